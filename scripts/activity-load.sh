#!/usr/bin/env bash
# Live Activity update fan-out against `herald sim` (release builds), with and without a
# broadcast channel, in one run:
#
#   scripts/activity-load.sh [DEVICES]   # default 10,000 devices, each with a push-to-start token
#
# 1. Per device: an activity started on every device (DEVICES starts); each device's update
#    token (the simulator issues it) reported back; then UPDATES (default 10) updates, each one
#    push per device: seconds per update (median), pushes/s, server CPU for the updates.
# 2. On a channel: a channel created, an activity started on every device listening on it; the
#    same UPDATES updates, each one publish: seconds per update, server CPU, publishes counted
#    by the simulator; the ratios per-device ÷ channel.
# Every device must hold the last state in both (the simulator's view), nothing ignored.
# DATABASE=postgres runs it on a PostgreSQL server the script starts. HERALD_BIN / NO_BUILD as
# in scripts/server-load.sh. Figures print at the end; logs stay in bench-out/activity-load/.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-10000}
UPDATES=${UPDATES:-10}
. scripts/bench-lib.sh
bench_setup activity-load
SIM_PORT=18643; SIM_CONTROL=18644; PORT=18680
SERVER="server-key-0123456789abcdef"

"${SIM_BIN:-$HERALD}" sim --port $SIM_PORT --control-port $SIM_CONTROL --tls-dir "$WORK/sim" --topic com.example.load \
    > "$WORK/sim.out" 2> "$WORK/sim.err" &
PIDS+=("$!")
wait_for "http://127.0.0.1:$SIM_CONTROL/inbox"
DATABASE_URL="sqlite://$WORK/herald.sqlite"
case "${DATABASE:-sqlite}" in
    sqlite) ;;
    postgres) start_postgres 18690; DATABASE_URL=$PG_URL ;;
    *) echo "DATABASE is sqlite or postgres" >&2; exit 64 ;;
esac
echo "== database ${DATABASE_URL%%://*}, $COUNT devices, $UPDATES updates"
cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "$DATABASE_URL" }
apps:
  - id: load
    keys: { server: "$SERVER" }
    live_activities: { priority_pushes_per_hour: 100 }
    apns: { team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: com.example.load,
            environment: sandbox, endpoint: "https://127.0.0.1:$SIM_PORT", ca_file: "sim/sim-ca.pem" }
YAML
HERALD_LOG_LEVEL=${HERALD_LOG_LEVEL:-notice} "$HERALD" serve --config "$WORK/herald.yaml" >> "$WORK/serve.out" 2>> "$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for "http://127.0.0.1:$PORT/healthz"

WORK="$WORK" python3 - "$COUNT" "$PORT" "$SERVER" "$SIM_CONTROL" "$UPDATES" "$SERVE_PID" <<'PY'
import http.client, json, os, secrets, statistics, sys, time
count, port, key, control, updates, pid = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
api = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def call(method, path, body=None, expect=(200, 201, 204)):
    api.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    answer = api.getresponse()
    data = answer.read()
    if answer.status not in expect:
        sys.exit("%s %s: %d %s" % (method, path, answer.status, data[:300]))
    return json.loads(data) if data else {}

def sim(path):
    connection = http.client.HTTPConnection("127.0.0.1", control, timeout=60)
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())

def cpu():
    with open("/proc/%s/stat" % pid) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

lines = "".join('{"device_id":"d%d","user_id":"u%d","token":"%s","environment":"sandbox"}\n' % (i, i, secrets.token_hex(32)) for i in range(count))
api.request("POST", "/v1/apps/load/devices/import", body=lines, headers={"Authorization": "Bearer " + key, "Content-Type": "application/x-ndjson"})
answer = api.getresponse(); imported = json.loads(answer.read())["imported"]
starts = {}
for i in range(count):
    token = secrets.token_hex(32)
    starts[token] = i
    call("PUT", "/v1/apps/load/devices/d%d/activity-tokens/start/ScoreAttributes" % i, {"token": token})
print("imported %d devices with a push-to-start token each" % imported)
everyone = {"device_ids": ["d%d" % i for i in range(count)]}

def run_updates(activity):
    times, before = [], cpu()
    for n in range(1, updates + 1):
        start = time.time()
        call("POST", "/v1/apps/load/activities/%s/update" % activity, {"content_state": {"score": n}})
        times.append(time.time() - start)
    return statistics.median(times), cpu() - before, times

# 1. One push per device.
start = time.time()
started = call("POST", "/v1/apps/load/activities", {"activity_id": "per-device", "attributes_type": "ScoreAttributes",
    "content_state": {"score": 0}, "to": everyone, "alert": {"title": "Kick-off"}})
start_seconds = time.time() - start
sent = sum(1 for d in started["devices"] if d["status"] == "sent")
held = [a for a in sim("/activities")["activities"] if a.get("update_token")]
for activity in held:
    call("PUT", "/v1/apps/load/activities/per-device/tokens/d%d" % starts[activity["start_token"]], {"token": activity["update_token"]})
print("per device: %d starts sent in %.2fs; %d update tokens reported" % (sent, start_seconds, len(held)))
per_median, per_cpu, per_times = run_updates("per-device")
view = sim("/activities")
per_ok = sum(1 for a in view["activities"] if a.get("update_token") and a.get("content_state") == {"score": updates})
print("per device: %d updates, median %.3fs each (%.0f pushes/s), server CPU %.2fs; %d of %d devices hold the last state" %
      (updates, per_median, count / per_median, per_cpu, per_ok, count))

# 2. One publish per update.
channel = call("POST", "/v1/apps/load/channels", {"event_key": "match", "storage": "none", "environment": "sandbox"})["channel_id"]
started = call("POST", "/v1/apps/load/activities", {"activity_id": "on-channel", "attributes_type": "ScoreAttributes",
    "content_state": {"score": 0}, "to": everyone, "alert": {"title": "Kick-off"}, "channel": channel})
ch_median, ch_cpu, ch_times = run_updates("on-channel")
view = sim("/activities")
ch_ok = sum(1 for a in view["activities"] if a.get("channel") == channel and a.get("content_state") == {"score": updates})
print("channel: %d updates, median %.4fs each, server CPU %.2fs; %d publishes; %d of %d devices hold the last state" %
      (updates, ch_median, ch_cpu, view["publishes"], ch_ok, count))
print("ignored by devices: %s" % (view["ignored"] or "none"))
print("per device ÷ channel: time per update %.0f×, server CPU %.0f×" % (per_median / ch_median, per_cpu / max(ch_cpu, 0.01)))
with open(os.environ.get("WORK", ".") + "/updates.json", "w") as out:
    json.dump({"per_device": per_times, "channel": ch_times}, out)
if per_ok != count or ch_ok != count or view["ignored"]:
    sys.exit("not every device holds the last state")
PY
echo "server peak RSS: $(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$SERVE_PID/status") MB; database CPU $(database_cpu) s"
