#!/usr/bin/env bash
# Web Push sends against `herald sim` (release builds), next to APNs and FCM in the same run:
#
#   scripts/webpush-load.sh [DEVICES]   # default 5,000 devices per platform
#
# Three apps, one per platform, each with DEVICES devices (web push: subscriptions the simulator
# made, each with its own P-256 key and auth secret). Each app sends one notification to all its
# devices, one app after the other, RUNS times (default 3), alternating the platforms; for each
# send: seconds from the API call until every delivery is recorded, sends per second, and the
# server's and the simulator's CPU per send (a web push message is encrypted per device by
# Herald and decrypted and VAPID-checked per device by the simulator). Medians print at the end;
# every send must reach every device. HERALD_BIN / NO_BUILD as in scripts/server-load.sh; logs
# stay in bench-out/webpush-load/.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-5000}
RUNS=${RUNS:-3}
. scripts/bench-lib.sh
bench_setup webpush-load
SIM_PORT=18743; SIM_CONTROL=18744; PORT=18780
SERVER="server-key-0123456789abcdef"

"${SIM_BIN:-$HERALD}" sim --port $SIM_PORT --control-port $SIM_CONTROL --tls-dir "$WORK/sim" --topic com.example.load \
    --fcm-device-rate 0 > "$WORK/sim.out" 2> "$WORK/sim.err" &
SIM_PID=$!
PIDS+=("$SIM_PID")
wait_for "http://127.0.0.1:$SIM_CONTROL/inbox"
"$HERALD" webpush keygen --out "$WORK/vapid.pem" > "$WORK/keygen.out"
APNS="{ team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: \"sim/demo-AuthKey.p8\", topic: com.example.load, environment: sandbox, endpoint: \"https://127.0.0.1:$SIM_PORT\", ca_file: \"sim/sim-ca.pem\" }"
cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "sqlite://$WORK/herald.sqlite" }
apps:
  - id: apns
    keys: { server: "$SERVER-apns" }
    apns: $APNS
  - id: fcm
    keys: { server: "$SERVER-fcm" }
    fcm: { service_account_file: sim/demo-service-account.json, endpoint: "https://127.0.0.1:$SIM_PORT", ca_file: sim/sim-ca.pem }
  - id: web
    keys: { server: "$SERVER-web" }
    webpush: { vapid_key_file: vapid.pem, subject: "mailto:load@example.com", allowed_hosts: ["127.0.0.1"], ca_file: sim/sim-ca.pem }
YAML
HERALD_LOG_LEVEL=${HERALD_LOG_LEVEL:-notice} "$HERALD" serve --config "$WORK/herald.yaml" >> "$WORK/serve.out" 2>> "$WORK/serve.err" &
HERALD_PID=$!
PIDS+=("$HERALD_PID")
wait_for "http://127.0.0.1:$PORT/healthz"

python3 - "$COUNT" "$PORT" "$SERVER" "$SIM_CONTROL" "$RUNS" "$HERALD_PID" "$SIM_PID" <<'PY'
import http.client, json, os, secrets, statistics, sys, time
count, port, key, control, runs, pid, sim_pid = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                                 int(sys.argv[5]), sys.argv[6], sys.argv[7])
api = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

def call(method, path, body=None, content="application/json", expect=(200, 201, 202)):
    app = path.split("/")[3]
    api.request(method, path, body=body, headers={"Authorization": "Bearer %s-%s" % (key, app), "Content-Type": content})
    answer = api.getresponse()
    data = answer.read()
    if answer.status not in expect:
        sys.exit("%s %s: %d %s" % (method, path, answer.status, data[:300]))
    return json.loads(data) if data else {}

def sim(method, path):
    connection = http.client.HTTPConnection("127.0.0.1", control, timeout=60)
    connection.request(method, path)
    return json.loads(connection.getresponse().read())

def cpu(process):
    with open("/proc/%s/stat" % process) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

for app in ("apns", "fcm", "web"):
    lines = []
    for i in range(count):
        device = {"device_id": "d%d" % i, "user_id": "u%d" % i, "environment": "sandbox"}
        if app == "apns":
            device["token"] = secrets.token_hex(32)
        elif app == "fcm":
            device.update(platform="fcm", token="fcm-%s" % secrets.token_hex(16))
        else:
            subscription = sim("POST", "/webpush/subscriptions")
            device.update(platform="webpush", endpoint=subscription["endpoint"], keys=subscription["keys"])
        lines.append(json.dumps(device))
    imported = call("POST", "/v1/apps/%s/devices/import" % app, "\n".join(lines) + "\n", "application/x-ndjson")["imported"]
    print("%s: %d devices" % (app, imported))

results = {"apns": [], "fcm": [], "web": []}
for run in range(runs):
    for app in ("apns", "fcm", "web") if run % 2 == 0 else ("web", "fcm", "apns"):
        before, sim_before, inbox_before = cpu(pid), cpu(sim_pid), sim("GET", "/inbox")["total"]
        start = time.time()
        sent = call("POST", "/v1/apps/%s/notifications" % app,
                    json.dumps({"to": {"all": True}, "alert": {"title": "Load", "body": "run %d" % run}}))
        while True:
            view = call("GET", "/v1/apps/%s/notifications/%s" % (app, sent["id"]))
            if view["counts"].get("queued", 0) == 0 and sum(view["counts"].values()) >= count:
                break
            time.sleep(0.05)
        seconds = time.time() - start
        server, simulator = cpu(pid) - before, cpu(sim_pid) - sim_before
        reached = sim("GET", "/inbox")["total"] - inbox_before
        if view["counts"].get("sent") != count or reached != count:
            sys.exit("%s run %d: %s, the simulator took %d" % (app, run, view["counts"], reached))
        results[app].append((seconds, server, simulator))
        print("%s run %d: %.2fs, %.0f/s, server %.1f µs CPU a send, simulator %.1f µs" %
              (app, run, seconds, count / seconds, server / count * 1e6, simulator / count * 1e6))
print()
for app, label in (("apns", "APNs"), ("fcm", "FCM"), ("web", "Web Push")):
    seconds = statistics.median(r[0] for r in results[app])
    server = statistics.median(r[1] for r in results[app])
    simulator = statistics.median(r[2] for r in results[app])
    print("%-8s median of %d: %.0f sends/s, server %.1f µs CPU a send, simulator %.1f µs" %
          (label, runs, count / seconds, server / count * 1e6, simulator / count * 1e6))
PY
echo "server peak RSS: $(awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$HERALD_PID/status") MB"
