#!/usr/bin/env bash
# Server load runs against `herald sim` (release builds):
#
#   scripts/server-load.sh reliability [DEVICES]   # default 100,000: send to all, kill -9 mid-way,
#                                                  # restart; every device must be in the inbox
#   scripts/server-load.sh backup [DEVICES]        # default 100,000: send to all, `herald backup`
#                                                  # mid-way while it sends, finish; then restore the
#                                                  # backup into a stopped server, empty the inbox and
#                                                  # start it: it must send exactly what the backup
#                                                  # had not answered, each once (nothing lost,
#                                                  # nothing sent twice); backup and restore seconds
#   scripts/server-load.sh fanout [DEVICES]        # default 1,000,000: import, send to all, time
#                                                  # until every delivery has its result; peak RSS.
#                                                  # RAW=200000 first times raw `herald send` of
#                                                  # that many tokens to the same simulator: ratio.
#                                                  # SINK=1: both go to Benchmarks/h2sink.c (answers
#                                                  # every request 200, checks nothing) instead of
#                                                  # the simulator, which is slower than the sender;
#                                                  # every delivery is then checked in the database
#   scripts/server-load.sh import [DEVICES]        # default 1,000,000: POST …/devices/import only;
#                                                  # seconds, server CPU and peak RSS
#   scripts/server-load.sh tracks [USERS]          # default 1,000,000 users with a device each:
#                                                  # import, bulk-enrol every user in a 4-step track
#                                                  # (enrol/s), then move the clock a day so a step of
#                                                  # every user falls due at once: time until every
#                                                  # delivery is recorded; server CPU, peak RSS
#   scripts/server-load.sh opens [DEVICES]         # default 100,000: import, send a typed notification
#                                                  # to all, then report OPENS (default: min(DEVICES,
#                                                  # 100,000)) opens as fast as the API takes them
#                                                  # (64 connections; OPEN_RATE=N paces them at N/s)
#                                                  # and a tenth of them again: opens/s, server CPU
#                                                  # and CPU per report, peak RSS; the floor: CPU per
#                                                  # GET /healthz, half as many at the same pace; then
#                                                  # GET …/analytics over the DEVICES deliveries: p50/max
#   scripts/server-load.sh dashboard [DEVICES]     # default 1,000,000 (3 per user): import, a
#                                                  # transactional notification to all (sent), a
#                                                  # promo to all held by quiet hours (deferred),
#                                                  # 10,000 single-user sends (SINGLES=N); then every dashboard
#                                                  # page signed in, 3 rounds of 7 calls: the median
#                                                  # of the rounds' p50 ms, max, server CPU, peak RSS
#                                                  # (AGED=1: after the notice, one receipt and the clock 25 h on,
#                                                  # so Analytics counts accepted, not received;
#                                                  # AGED=all: the single sends before that, so each
#                                                  # of them is accepted, not received too)
#   scripts/server-load.sh night [USERS]           # default 1,000,000 users with a device each, all in
#                                                  # quiet hours (UTC, now ± 1 h): a transactional
#                                                  # notice to all (the plain fan-out), then a promo
#                                                  # to all: time until every delivery is deferred
#                                                  # (none queued or sending) and its ratio to the
#                                                  # fan-out; /metrics and /readyz times with them
#                                                  # all deferred; then the clock moves past the
#                                                  # quiet hours: the wave's time and its ratio;
#                                                  # last, the same promo to all by day (a daytime
#                                                  # audience) and the wave's ratio to it. After
#                                                  # each phase: the outbox's stages (claims,
#                                                  # prepares, provider batches, record writes:
#                                                  # how many, mean time) and how long SQLite's
#                                                  # writer was held and waited for.
#                                                  # PG_STATEMENTS=1 (DATABASE=postgres) prints the
#                                                  # wave's and the daytime promo's statements by
#                                                  # total time (pg_stat_statements)
#   scripts/server-load.sh latency [RATE]          # default 500/s: single-device sends for 10 s
#                                                  # (LOAD_SECONDS=…) to 100 devices in turn, after
#                                                  # WARMUP_SECONDS (default 1) at the same rate that
#                                                  # are not counted (connections open); API call
#                                                  # start → the simulator receiving the request:
#                                                  # p50 / p90 / p99 / max (each in latency.csv).
#                                                  # PROBES=2000 also calls GET /healthz that often
#                                                  # per second, keyless, from 16 connections
#                                                  # (PROBE_CONNECTIONS=…), for the whole run (what
#                                                  # a probe flood costs sends; the flood is
#                                                  # Benchmarks/probe-flood.c, built with cc; it
#                                                  # prints its own CPU time; PROBE_NICE=19 runs it,
#                                                  # and a RECEIPTS flood, at that nice level).
#                                                  # RECEIPTS=2000: the run alone, then again with
#                                                  # that many device receipts a second from 128
#                                                  # connections, each for a distinct sent
#                                                  # delivery; FLOOR=1 puts between them a run with
#                                                  # as many GET /healthz a second from as many
#                                                  # connections (what any such load costs sends).
#                                                  # ROUNDS=N (1-10) repeats the phases N times in
#                                                  # turn (alone, floor, receipts, alone, …) and
#                                                  # prints each round's p99s and the medians of
#                                                  # the per-round ratios: the box's drift within
#                                                  # a run falls on every phase alike
#
# DATABASE=postgres runs the same on PostgreSQL: a server the script starts from the installed
# binaries (Debian's postgresql package) in bench-out/server-*/pg, with its default durability;
# DATABASE=postgres://... uses that (empty) database instead.
#
# SIM_BIN=/path runs the simulator from another build (HERALD_BIN: the server).
# SIM_FAULTS='{"max_concurrent_streams": 100}' sets the simulator's faults (PUT /faults) first.
# OUTBOX='{ max_in_flight: 2000 }' adds that `outbox:` section to the server's configuration.
# PERF=1 (fanout, tracks) records the server from the send (the clock's move) to the last result with `perf record -g`
# into bench-out/server-fanout/serve.perf.data (read it with `perf report -i …`); PERF=enrol (tracks)
# records the enrolments instead, into enrol.perf.data. PERF=1 (night) records the notice and the
# wave, into notice.perf.data and wave.perf.data beside it.
# Figures print at the end; logs stay in bench-out/server-*/.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?reliability, backup, fanout, import, tracks, night, opens, dashboard or latency}
case "$MODE" in
    reliability|backup) COUNT=${2:-100000} ;;
    fanout|import|tracks|night|dashboard) COUNT=${2:-1000000} ;;
    opens) COUNT=${2:-100000} ;;
    latency) RATE=${2:-500}; COUNT=100 ;;
    *) echo "mode is reliability, backup, fanout, import, tracks, night, opens, dashboard or latency" >&2; exit 64 ;;
esac
. scripts/bench-lib.sh

# With PG_STATEMENTS=1 on PostgreSQL: the statements since the last call by total time, headed
# LABEL (none: nothing printed), then pg_stat_statements reset.
pg_statements() {
    [ -n "${PG_STATEMENTS:-}" ] && [ -n "${PSQL:-}" ] || return 0
    if [ -n "${1:-}" ]; then
        echo "$1: statements by total time (calls | total ms | mean ms | rows | query)"
        $PSQL -d postgres -F ' | ' -c "SELECT calls, round(total_exec_time::numeric, 1), round(mean_exec_time::numeric, 3), rows,
            left(regexp_replace(query, '\s+', ' ', 'g'), 160) FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12"
    fi
    $PSQL -d postgres -c "SELECT pg_stat_statements_reset()" > /dev/null
}
bench_setup "server-$MODE"
SIM_PORT=18543; SIM_CONTROL=18544; PORT=18580
SERVER="server-key-0123456789abcdef0123456789"
METRICS="metrics-key-0123456789abcdef-0123456789"
peak_rss_mb() { awk '/VmHWM/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
# Seconds since $1 (a `date +%s.%N` or time.time() reading), to the hundredth.
elapsed() { python3 -c "import time; print(round(time.time() - $1, 2))"; }

# The night run's inbox holds three notifications a device (the simulator keeps 2M by default).
SIM_ARGS=()
if [ "$MODE" = night ] && [ $((3 * COUNT)) -gt 2000000 ]; then SIM_ARGS=(--inbox-limit $((3 * COUNT))); fi
"${SIM_BIN:-$HERALD}" sim --port $SIM_PORT --control-port $SIM_CONTROL --tls-dir "$WORK/sim" --topic com.example.load \
    "${SIM_ARGS[@]}" > "$WORK/sim.out" 2> "$WORK/sim.err" &
SIM_PID=$!
PIDS+=("$SIM_PID")
wait_for "http://127.0.0.1:$SIM_CONTROL/inbox"
[ -z "${SIM_FAULTS:-}" ] || curl -sf -X PUT --data "$SIM_FAULTS" "http://127.0.0.1:$SIM_CONTROL/faults" > /dev/null
APNS_PORT=$SIM_PORT
if [ -n "${SINK:-}" ]; then
    [ "$MODE" = fanout ] || { echo "SINK=1 is for fanout" >&2; exit 64; }
    # The independent receiver, with the simulator's certificate (its CA is the app's ca_file).
    [ -f /usr/include/nghttp2/nghttp2.h ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libnghttp2-dev > /dev/null; }
    cc -O2 -o "$WORK/h2sink" Benchmarks/h2sink.c -lnghttp2 -lssl -lcrypto -lpthread
    "$WORK/h2sink" 18545 "$WORK/sim/sim-server.pem" "$WORK/sim/sim-server-key.pem" > "$WORK/sink.out" 2> "$WORK/sink.err" &
    SINK_PID=$!
    PIDS+=("$SINK_PID")
    for _ in $(seq 100); do grep -q ready "$WORK/sink.out" && break; sleep 0.05; done
    APNS_PORT=18545
    echo "== receiver: h2sink (Benchmarks/h2sink.c), not the simulator"
fi
DATABASE_URL="sqlite://$WORK/herald.sqlite"
case "${DATABASE:-sqlite}" in
    sqlite) ;;
    postgres)
        # PG_STATEMENTS=1 (night): pg_stat_statements loaded (pg_statements prints and resets it).
        [ -z "${PG_STATEMENTS:-}" ] || PG_OPTIONS="${PG_OPTIONS:-} -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all"
        start_postgres 18590; DATABASE_URL=$PG_URL
        [ -z "${PG_STATEMENTS:-}" ] || $PSQL -d postgres -c "CREATE EXTENSION pg_stat_statements" > /dev/null ;;
    postgres://*|postgresql://*) DATABASE_URL=$DATABASE ;;
    *) echo "DATABASE is sqlite, postgres or a postgres:// URL" >&2; exit 64 ;;
esac
echo "== database ${DATABASE_URL%%://*}"
cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "$DATABASE_URL" }
metrics_key: "$METRICS"
apps:
  - id: load
    keys: { server: "$SERVER" }
    apns: { team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: com.example.load,
            environment: sandbox, endpoint: "https://127.0.0.1:$APNS_PORT", ca_file: "sim/sim-ca.pem" }
YAML
ADMIN="admin-key-0123456789abcdef-0123456789"
if [ "$MODE" = tracks ]; then
    # A catalog with one type and a 4-step track, days 1 to 4 after enrolment; the clock moves
    # only when told (POST /v1/dev/clock with the admin key).
    cat > "$WORK/catalog.yaml" <<'YAML'
app: { name: Load, pacing_limit: 0 }
types:
  nudge: { copy: { en: { title: "Day {day}", body: "Your trial, day {day}." } }, placeholders: [day] }
tracks:
  trial:
    anchor: trial_started
    steps:
      - { id: d1, type: nudge, after: 1d, data: { day: "1" } }
      - { id: d2, type: nudge, after: 2d, data: { day: "2" } }
      - { id: d3, type: nudge, after: 3d, data: { day: "3" } }
      - { id: d4, type: nudge, after: 4d, data: { day: "4" } }
YAML
    echo "    catalog: \"$WORK/catalog.yaml\"" >> "$WORK/herald.yaml"
    printf 'clock: manual\nadmin_key: "%s"\n' "$ADMIN" >> "$WORK/herald.yaml"
fi
if [ "$MODE" = night ]; then
    # Quiet from an hour ago to an hour from now (users without a zone are in UTC): a promo waits
    # for the end, a transactional notice goes at once. The clock moves only when told.
    QUIET_START=$(date -u -d '-1 hour' +%H:%M); QUIET_END=$(date -u -d '+1 hour' +%H:%M)
    cat > "$WORK/catalog.yaml" <<YAML
app: { name: Load, pacing_limit: 0, quiet_hours: { start: "$QUIET_START", end: "$QUIET_END" } }
types:
  promo: { id: PN-01, copy: { en: { title: "New", body: "Something new for you." } } }
  notice: { id: PN-02, transactional: true, copy: { en: { title: "Notice", body: "Your account was updated." } } }
YAML
    echo "    catalog: \"$WORK/catalog.yaml\"" >> "$WORK/herald.yaml"
    printf 'clock: manual\nadmin_key: "%s"\n' "$ADMIN" >> "$WORK/herald.yaml"
fi
if [ "$MODE" = opens ]; then
    # One type with a click-through goal: what the analytics report on.
    cat > "$WORK/catalog.yaml" <<'YAML'
app: { name: Load, pacing_limit: 0 }
types:
  promo: { id: PN-01, copy: { en: { title: "New", body: "Something new for you." } }, goal_ctr: 0.15, actions: [{ id: OPEN, title: Open }] }
YAML
    echo "    catalog: \"$WORK/catalog.yaml\"" >> "$WORK/herald.yaml"
fi
if [ "$MODE" = dashboard ]; then
    # Quiet all day (users without a zone are in UTC): a promo to all stays deferred, as a
    # broadcast at night does; `notice` is transactional and goes at once.
    cat > "$WORK/catalog.yaml" <<'YAML'
app: { name: Load, pacing_limit: 0, quiet_hours: { start: "00:00", end: "23:59" } }
types:
  promo: { id: PN-01, copy: { en: { title: "New", body: "Something new for {name}." } }, placeholders: [name], goal_ctr: 0.15 }
  notice: { id: PN-02, transactional: true, copy: { en: { title: "Notice", body: "Your account was updated." } } }
YAML
    echo "    catalog: \"$WORK/catalog.yaml\"" >> "$WORK/herald.yaml"
    # AGED=1 moves the clock past the receipt window once the notice is answered.
    [ -z "${AGED:-}" ] || printf 'clock: manual\nadmin_key: "%s"\n' "$ADMIN" >> "$WORK/herald.yaml"
fi
[ -z "${OUTBOX:-}" ] || echo "outbox: $OUTBOX" >> "$WORK/herald.yaml"
# TELEMETRY='{ otlp_endpoint: "http://127.0.0.1:4318", sample_ratio: 1 }' measures with traces on.
[ -z "${TELEMETRY:-}" ] || echo "telemetry: $TELEMETRY" >> "$WORK/herald.yaml"
SERVE_PID=""
start_server() {
    HERALD_LOG_LEVEL=${HERALD_LOG_LEVEL:-notice} "$HERALD" serve --config "$WORK/herald.yaml" >> "$WORK/serve.out" 2>> "$WORK/serve.err" &
    SERVE_PID=$!
    PIDS+=("$SERVE_PID")
    wait_for "http://127.0.0.1:$PORT/healthz"
}
start_server

echo "== import $COUNT devices"
python3 - "$COUNT" "$MODE" > "$WORK/devices.jsonl" <<'PY'
import secrets, sys
count = int(sys.argv[1])
out = sys.stdout
per_user = 1 if sys.argv[2] in ("tracks", "night") else 3
# opens: every device reports a permission and an app version (what the opt-in rate reads).
extra = (lambda i: ',"authorization_status":"%s","app_version":"2.%d"' % ("denied" if i % 4 == 3 else "authorized", i % 3)) \
    if sys.argv[2] == "opens" else (lambda i: "")
for i in range(count):
    out.write('{"device_id":"d%d","user_id":"u%d","token":"%s","environment":"sandbox"%s}\n' % (i, i // per_user, secrets.token_hex(32), extra(i)))
PY
start=$(date +%s.%N)
imported=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/devices/import" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/devices.jsonl" | json 'd["imported"]')
import_seconds=$(elapsed "$start")
echo "imported $imported in ${import_seconds}s (server peak RSS so far $(peak_rss_mb $SERVE_PID) MB)"
if [ "$MODE" = import ]; then
    echo "server CPU: $(proc_cpu $SERVE_PID) s; peak RSS: $(peak_rss_mb $SERVE_PID) MB"
    [ "$imported" = "$COUNT" ] || { echo "imported $imported of $COUNT" >&2; exit 1; }
    exit 0
fi

if [ "$MODE" = dashboard ]; then
    await_settled() {
        while true; do
            q=$(curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$1?limit=1" -H "Authorization: Bearer $SERVER" | json 'd["counts"]["queued"]' 2>/dev/null || echo 1)
            [ "$q" = 0 ] && break
            sleep 0.5
        done
    }
    send_all() {
        curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
            -H "Content-Type: application/json" -d "$1" | json 'd["id"]'
    }
    # SINGLES single-user sends of the notice (3 devices each); with AGED=all before the clock
    # moves past the receipt window, so each of them is accepted, not received.
    single_sends() {
        echo "== ${SINGLES:=10000} single-user sends"
        python3 - "$PORT" "$SERVER" "$COUNT" "$SINGLES" <<'PY'
import asyncio, json, sys, time
port, key, count, singles = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
users = max(1, count // 3)
async def worker(queue):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while (seq := await queue.get()) is not None:
        body = json.dumps({"to": {"user_ids": ["u%d" % (seq * 7919 % users)]}, "type": "notice"}).encode()
        writer.write(b"POST /v1/apps/load/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key.encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
        await reader.readexactly(length)
async def main():
    queue = asyncio.Queue()
    for seq in range(singles): queue.put_nowait(seq)
    for _ in range(16): queue.put_nowait(None)
    await asyncio.gather(*[worker(queue) for _ in range(16)])
begin = time.monotonic()
asyncio.run(main())
print("%d sends in %.1fs" % (singles, time.monotonic() - begin))
PY
        # Their answers written.
        sleep 2
    }
    start=$(date +%s.%N)
    sent_id=$(send_all '{"to":{"all":true},"type":"notice"}')
    await_settled "$sent_id"
    echo "notice to all settled after $(python3 -c "import time; print(round(time.time() - $start, 1))")s"
    [ "${AGED:-}" != all ] || single_sends
    if [ -n "${AGED:-}" ]; then
        # One device reports a receipt (its build then reports receipts) and the clock moves past
        # the 24-hour receipt window: Analytics counts every other delivery as accepted, not received.
        first=$(curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$sent_id?limit=1" -H "Authorization: Bearer $SERVER" \
            | json '"{\"delivery_id\":%d,\"device_id\":\"%s\"}" % (d["deliveries"][0]["id"], d["deliveries"][0]["device_id"])')
        curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/received" -H "Authorization: Bearer $SERVER" \
            -H "Content-Type: application/json" -d "$first" > /dev/null
        curl -sf -X POST "http://127.0.0.1:$PORT/v1/dev/clock" -H "Authorization: Bearer $ADMIN" -H "Content-Type: application/json" \
            -d '{"advance":"25h"}' > /dev/null
        echo "one receipt reported; the clock moved 25 hours"
    fi
    start=$(date +%s.%N)
    held_id=$(send_all '{"to":{"all":true},"type":"promo","data":{"name":"you"}}')
    await_settled "$held_id"
    echo "promo to all (deferred) settled after $(python3 -c "import time; print(round(time.time() - $start, 1))")s"
    [ "${AGED:-}" = all ] || single_sends
    echo "== every dashboard page, signed in with the server key: 7 calls each"
    cpu_before=$(proc_cpu $SERVE_PID)
    python3 - "$PORT" "$SERVER" "$sent_id" "$held_id" <<'PY'
import http.client, re, sys, time, urllib.parse
port, key, sent_id, held_id = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
connection = http.client.HTTPConnection("127.0.0.1", port)
cookies = {}
def call(method, path, form=None):
    headers = {"Cookie": "; ".join("%s=%s" % item for item in cookies.items())}
    body = None
    if form is not None:
        body = urllib.parse.urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    html = response.read().decode()
    for header, value in response.getheaders():
        if header.lower() == "set-cookie":
            name, _, rest = value.partition("=")
            cookies[name] = rest.split(";")[0]
    return response.status, html
_, login = call("GET", "/dashboard/login")
csrf = re.search(r'name="csrf" value="([^"]+)"', login).group(1)
status, _ = call("POST", "/dashboard/login", {"csrf": csrf, "key": key})
assert status == 303, status
_, page = call("GET", "/dashboard/apps/load/compose")
csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
app = "/dashboard/apps/load"
pages = [
    ("Overview", "GET", app, None, "Queue"),
    ("Users (3 devices, 3 deferred)", "GET", app + "/users?user_id=u1234", None, "deferred"),
    ("Notifications", "GET", app + "/notifications", None, "notice"),
    ("Notifications, type promo", "GET", app + "/notifications?type=promo", None, held_id),
    ("Notifications, with a deferred delivery", "GET", app + "/notifications?status=deferred", None, held_id),
    ("Notifications, with a failed one (none)", "GET", app + "/notifications?status=failed", None, "No notifications match"),
    ("Notification: 1M sent", "GET", app + "/notifications/" + sent_id, None, "sent"),
    ("Notification: 1M deferred", "GET", app + "/notifications/" + held_id, None, "quiet hours"),
    ("Notification live (JSON), 1M", "GET", app + "/notifications/" + held_id + "/live", None, "deferred"),
    ("Compose", "GET", app + "/compose", None, "Preview"),
    ("Compose: preview, 3 users", "POST", app + "/compose", {"csrf": csrf, "type": "promo", "data": "name=Ana", "user_ids": "u1 u2 u3", "action": "preview"}, "of 4096 bytes"),
    ("Analytics", "GET", app + "/analytics", None, "promo"),
    ("Catalog", "GET", app + "/catalog", None, "Something new"),
]
# Three rounds over every page, 7 calls a page each: the median of the rounds' p50s, and the max.
results = {name: [] for name, *_ in pages}
for _ in range(3):
    for name, method, path, form, expect in pages:
        times = []
        for _ in range(7):
            start = time.monotonic()
            status, html = call(method, path, form)
            times.append((time.monotonic() - start) * 1000)
            if status != 200 or expect not in html:
                sys.exit("%s: status %d, %r not in the page" % (name, status, expect))
        results[name].append(sorted(times))
print("| page | p50 ms (median of 3 rounds) | rounds' p50 | max ms |")
print("| --- | --- | --- | --- |")
for name, rounds in results.items():
    p50s = sorted(r[3] for r in rounds)
    print("| %s | %.1f | %s | %.1f |" % (name, p50s[1], " / ".join("%.1f" % r[3] for r in rounds), max(r[-1] for r in rounds)))
PY
    cpu_after=$(proc_cpu $SERVE_PID)
    echo "server CPU for the 273 page loads: $(python3 -c "print('%.2f' % ($cpu_after - $cpu_before))") s; peak RSS $(peak_rss_mb $SERVE_PID) MB"
    exit 0
fi

if [ "$MODE" = tracks ]; then
    python3 -c "import sys; sys.stdout.write(''.join('{\"user_id\":\"u%d\"}\n' % i for i in range($COUNT)))" > "$WORK/enrolments.jsonl"
    echo "== enrol $COUNT users in a 4-step track"
    ENROL_PERF_PID=""
    if [ "${PERF:-}" = enrol ]; then
        perf record -F 499 -g -p "$SERVE_PID" -o "$WORK/enrol.perf.data" 2> "$WORK/perf.err" &
        ENROL_PERF_PID=$!
        sleep 0.5
    fi
    cpu_before=$(proc_cpu $SERVE_PID)
    start=$(date +%s.%N)
    enrolled=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/tracks/trial/enrolments" -H "Authorization: Bearer $SERVER" \
        -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/enrolments.jsonl" | json 'd["enrolled"]')
    enrol_seconds=$(elapsed "$start")
    cpu_after=$(proc_cpu $SERVE_PID)
    python3 -c "print('enrolled $enrolled in ${enrol_seconds}s: %.0f enrolments/s (%d steps written), server CPU %.1f s, peak RSS so far $(peak_rss_mb $SERVE_PID) MB' % ($enrolled / $enrol_seconds, 4 * $enrolled, $cpu_after - $cpu_before))"
    if [ -n "$ENROL_PERF_PID" ]; then kill -INT "$ENROL_PERF_PID"; wait "$ENROL_PERF_PID" || true; echo "profile: $WORK/enrol.perf.data"; fi
    [ "$enrolled" = "$COUNT" ] || { echo "enrolled $enrolled of $COUNT" >&2; exit 1; }
    echo "== move the clock a day: $COUNT steps fall due at once"
    PERF_PID=""
    if [ -n "${PERF:-}" ] && [ "$PERF" != enrol ]; then
        perf record -F 499 -g -p "$SERVE_PID" -o "$WORK/serve.perf.data" 2> "$WORK/perf.err" &
        PERF_PID=$!
        sleep 0.5
    fi
    cpu_before=$(proc_cpu $SERVE_PID)
    sim_cpu_before=$(proc_cpu $SIM_PID)
    start=$(date +%s.%N)
    curl -sf -X POST "http://127.0.0.1:$PORT/v1/dev/clock" -H "Authorization: Bearer $ADMIN" -H "Content-Type: application/json" \
        -d '{"advance":"1d"}' > /dev/null
    while true; do
        total=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]')
        [ "$total" -ge "$COUNT" ] && break
        sleep 0.25
    done
    while true; do
        depth=$(curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | awk '/^herald_queue_depth / {print $2}')
        [ "${depth%.*}" = 0 ] && break
        sleep 0.25
    done
    wave_seconds=$(elapsed "$start")
    cpu_after=$(proc_cpu $SERVE_PID)
    if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; echo "profile: $WORK/serve.perf.data"; fi
    inbox=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox")
    sim_cpu_after=$(proc_cpu $SIM_PID)
    echo "every step recorded after ${wave_seconds}s ($(python3 -c "print('%.0f' % ($COUNT / $wave_seconds))")/s); server CPU $(python3 -c "print('%.1f' % ($cpu_after - $cpu_before))") s (simulator $(python3 -c "print('%.1f' % ($sim_cpu_after - $sim_cpu_before))") s); peak RSS $(peak_rss_mb $SERVE_PID) MB"
    echo "inbox: $inbox"
    # One user's Pro upgrade among them all (a cancel by the track's key for one user, with a
    # million fired and pending steps and their deliveries under that key), then its listing.
    unenrol_ms=$(curl -sf -o /dev/null -w '%{time_total}' -X DELETE "http://127.0.0.1:$PORT/v1/apps/load/users/u7/tracks/trial" \
        -H "Authorization: Bearer $SERVER" | python3 -c "import sys; print('%.1f' % (float(sys.stdin.read()) * 1000))")
    list_ms=$(curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:$PORT/v1/apps/load/users/u7/tracks" \
        -H "Authorization: Bearer $SERVER" | python3 -c "import sys; print('%.1f' % (float(sys.stdin.read()) * 1000))")
    echo "one user's unenrolment after the wave: ${unenrol_ms} ms; its tracks listed: ${list_ms} ms"
    curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | grep -E "^herald_timers_total|^herald_outbox_store_seconds_(sum|count)" || true
    python3 - "$inbox" "$COUNT" <<'PY'
import json, sys
inbox, count = json.loads(sys.argv[1]), int(sys.argv[2])
ok = inbox["tokens"] == count and inbox["duplicates"] == 0
print("every user's step 1 reached once:", "yes" if ok else "NO", "| duplicates:", inbox["duplicates"])
sys.exit(0 if ok else 1)
PY
    exit $?
fi

# Time in outbox transactions (claims and result writes, waiting for the writer included), the
# APNs client's, and the server's CPU and peak RSS.
# The accepts' time in the store so far and SQLite's writer's use, as one JSON object.
store_use() {
    curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | python3 -c '
import json, re, sys
values = {}
for line in sys.stdin:
    m = re.match(r"herald_outbox_store_seconds_(sum|count)\{operation=\"accept\"\} ([0-9.e+-]+)", line)
    if m: values["accept_" + m.group(1)] = float(m.group(2))
    m = re.match(r"herald_sqlite_writer_(holds|held_seconds|wait_seconds)_total\{work=\"(\w+)\"\} ([0-9.e+-]+)", line)
    if m: values[m.group(2) + "_" + m.group(1)] = float(m.group(3))
print(json.dumps(values))
' || echo "{}"
}

# The outbox stages' totals and the SQLite writer's use so far, as JSON (stage_since prints
# what a phase added).
stage_use() {
    curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | python3 -c '
import json, re, sys
values = {}
for line in sys.stdin:
    m = re.match(r"herald_outbox_stage_seconds_(sum|count)\{stage=\"(\w+)\"\} ([0-9.e+-]+)", line)
    if m: values[m.group(2) + "_" + m.group(1)] = float(m.group(3))
    m = re.match(r"herald_sqlite_writer_(held|wait)_seconds_total\{work=\"(\w+)\"\} ([0-9.e+-]+)", line)
    if m: values["writer_" + m.group(1)] = values.get("writer_" + m.group(1), 0) + float(m.group(3))
print(json.dumps(values))
' || echo "{}"
}
stage_since() {
    python3 -c '
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
parts = []
for stage in ["claim", "prepare", "provider", "record", "room"]:
    n = delta.get(stage + "_count", 0)
    if n: parts.append("%s %d x %.1f ms" % (stage, n, 1000 * delta.get(stage + "_sum", 0) / n))
if "writer_held" in delta:
    parts.append("SQLite writer held %.1f s, waited for %.1f s" % (delta["writer_held"], delta.get("writer_wait", 0)))
print("   stages: " + "; ".join(parts))
' "$1" "$(stage_use)"
}

print_metrics() {
    curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | python3 -c '
import re, sys
stats = {}
for line in sys.stdin:
    m = re.match(r"herald_outbox_store_seconds_(sum|count)\{operation=\"(\w+)\"\} ([0-9.e+-]+)", line)
    if m: stats.setdefault("outbox " + m.group(2), {})[m.group(1)] = float(m.group(3))
    m = re.match(r"herald_apns_(batch|request)_seconds_(sum|count) ([0-9.e+-]+)", line)
    if m: stats.setdefault("APNs " + m.group(1), {})[m.group(2)] = float(m.group(3))
    m = re.match(r"herald_outbox_stage_seconds_(sum|count)\{stage=\"(\w+)\"\} ([0-9.e+-]+)", line)
    if m: stats.setdefault("stage " + m.group(2), {})[m.group(1)] = float(m.group(3))
    m = re.match(r"herald_outbox_stage_seconds_bucket\{stage=\"(\w+)\",le=\"([0-9.e+-]+|\+Inf)\"\} ([0-9.e+-]+)", line)
    if m: stats.setdefault("stage " + m.group(1), {}).setdefault("buckets", []).append((float(m.group(2)), float(m.group(3))))
def quantile(buckets, q):
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0
    for bound, seen in buckets:
        if total and seen >= q * total: return "<=%gms" % (bound * 1000)
    return "-"
for op, v in sorted(stats.items()):
    line = "%s: %d, %.2f s in all" % (op, v.get("count", 0), v.get("sum", 0))
    if "buckets" in v:
        line += "; p50 %s, p99 %s" % (quantile(v["buckets"], 0.5), quantile(v["buckets"], 0.99))
    print(line)
' || true
    echo "server peak RSS: $(peak_rss_mb $SERVE_PID) MB (this process); CPU: $(proc_cpu $SERVE_PID) s"
}

if [ "$MODE" = night ]; then
    # Waits until notification $1 has COUNT deliveries with status $2 (none queued or sending).
    await_status() {
        while true; do
            curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$1?limit=1" -H "Authorization: Bearer $SERVER" \
                | python3 -c "import json, sys; c = json.load(sys.stdin)['counts']; sys.exit(0 if c.get('$2') == $COUNT and c.get('queued') == 0 else 1)" \
                2> /dev/null && break
            sleep 0.25
        done
    }
    send_all() {
        curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
            -H "Content-Type: application/json" -d "$1" | json 'd["id"]'
    }
    cpu() { proc_cpu "$SERVE_PID"; }
    # PERF=1: `perf record -g` of the server over a phase, into $WORK/$1.perf.data.
    PERF_PID=""
    perf_start() {
        [ -n "${PERF:-}" ] || return 0
        perf record -F 499 -g -p "$SERVE_PID" -o "$WORK/$1.perf.data" 2> "$WORK/perf.err" &
        PERF_PID=$!
        sleep 0.5
    }
    perf_stop() {
        [ -n "$PERF_PID" ] || return 0
        kill -INT "$PERF_PID"; wait "$PERF_PID" || true; PERF_PID=""
        echo "profile: $WORK/$1.perf.data"
    }
    # The database's and the simulator's CPU beside the server's, for each phase.
    others() { echo "$(database_cpu) $(proc_cpu "$SIM_PID")"; }
    others_since() {
        python3 -c "import sys; b = sys.argv[1].split(); a = sys.argv[2].split(); print('database CPU %.1f s, simulator CPU %.1f s' % (float(a[0]) - float(b[0]), float(a[1]) - float(b[1])))" "$1" "$(others)"
    }
    echo "== quiet hours $QUIET_START-$QUIET_END UTC; a transactional notice to all $COUNT (the plain fan-out)"
    perf_start notice
    stages_before=$(stage_use)
    cpu_before=$(cpu); others_before=$(others); start=$(date +%s.%N)
    notice=$(send_all '{"to":{"all":true},"type":"notice"}')
    await_status "$notice" sent
    fanout_seconds=$(elapsed "$start"); fanout_cpu=$(python3 -c "print('%.1f' % ($(cpu) - $cpu_before))")
    perf_stop notice
    echo "notice sent to all after ${fanout_seconds}s, server CPU ${fanout_cpu} s ($(others_since "$others_before"))"
    stage_since "$stages_before"
    echo "== a promo to all, inside their quiet hours"
    cpu_before=$(cpu); others_before=$(others); start=$(date +%s.%N)
    promo=$(send_all '{"to":{"all":true},"type":"promo"}')
    await_status "$promo" deferred
    defer_seconds=$(elapsed "$start"); defer_cpu=$(python3 -c "print('%.1f' % ($(cpu) - $cpu_before))")
    echo "promo deferred for all after ${defer_seconds}s, server CPU ${defer_cpu} s ($(others_since "$others_before")): $(python3 -c "print('%.2f' % ($defer_seconds / $fanout_seconds))")x the fan-out"
    python3 - "$PORT" "$METRICS" <<'PY'
import sys, time, urllib.request
port, key = int(sys.argv[1]), sys.argv[2]
for path in ["/metrics", "/readyz"]:
    times = []
    for _ in range(7):
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), headers={"Authorization": "Bearer " + key})
        begin = time.monotonic()
        try:
            urllib.request.urlopen(request).read()
        except urllib.error.HTTPError as error:
            error.read()
        times.append((time.monotonic() - begin) * 1000)
    times.sort()
    print("%s with every promo deferred: p50 %.1f ms, max %.1f ms" % (path, times[3], times[-1]))
PY
    echo "== the clock moves past the quiet hours: the wave"
    pg_statements
    perf_start wave
    stages_before=$(stage_use)
    cpu_before=$(cpu); others_before=$(others); start=$(date +%s.%N)
    curl -sf -X POST "http://127.0.0.1:$PORT/v1/dev/clock" -H "Authorization: Bearer $ADMIN" -H "Content-Type: application/json" \
        -d '{"advance":"2h"}' > /dev/null
    await_status "$promo" sent
    wave_seconds=$(elapsed "$start"); wave_cpu=$(python3 -c "print('%.1f' % ($(cpu) - $cpu_before))")
    perf_stop wave
    echo "promo sent to all after ${wave_seconds}s, server CPU ${wave_cpu} s ($(others_since "$others_before")): $(python3 -c "print('%.2f' % ($wave_seconds / $fanout_seconds))")x the fan-out; peak RSS $(peak_rss_mb $SERVE_PID) MB"
    stage_since "$stages_before"
    pg_statements "the wave"
    echo "== the same promo to all by day (a daytime audience)"
    stages_before=$(stage_use)
    cpu_before=$(cpu); others_before=$(others); start=$(date +%s.%N)
    day=$(send_all '{"to":{"all":true},"type":"promo"}')
    await_status "$day" sent
    day_seconds=$(elapsed "$start"); day_cpu=$(python3 -c "print('%.1f' % ($(cpu) - $cpu_before))")
    echo "promo by day sent to all after ${day_seconds}s, server CPU ${day_cpu} s ($(others_since "$others_before")): the wave took $(python3 -c "print('%.2f' % ($wave_seconds / $day_seconds))")x as long"
    stage_since "$stages_before"
    pg_statements "the daytime promo"
    print_metrics
    inbox=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox")
    echo "inbox: $inbox"
    python3 -c "import json, sys; d = json.loads(sys.argv[1]); ok = d['tokens'] == $COUNT and d['total'] == 3 * $COUNT; print('every device got the notice and both promos once:', 'yes' if ok else 'NO'); sys.exit(0 if ok else 1)" "$inbox"
    exit $?
fi

if [ "$MODE" = latency ]; then
    echo "== ${LOAD_SECONDS:=10}s of single-device sends at $RATE/s, after ${WARMUP_SECONDS:=1}s not counted"
    ROUNDS=${ROUNDS:-1}
    if [ "$ROUNDS" -lt 1 ] || [ "$ROUNDS" -gt 10 ]; then echo "ROUNDS is 1 to 10" >&2; exit 64; fi
    status=0
    PROBE_PID=
    phases="alone"
    if [ "${RECEIPTS:-0}" -gt 0 ]; then
        # Receipts for distinct sent deliveries, as many as the flood sends: devices of their
        # own (r0, r1, …), a notification to all, its deliveries listed.
        flood_seconds=$(python3 -c "print($LOAD_SECONDS + $WARMUP_SECONDS + 3)")
        receipt_devices=$(python3 -c "print(int($RECEIPTS * $flood_seconds) * $ROUNDS)")
        echo "== $receipt_devices more devices and a notification to all, for their receipts"
        python3 - "$receipt_devices" > "$WORK/receipt-devices.jsonl" <<'PY'
import secrets, sys
for i in range(int(sys.argv[1])):
    sys.stdout.write('{"device_id":"r%d","user_id":"ru%d","token":"%s","environment":"sandbox"}\n' % (i, i, secrets.token_hex(32)))
PY
        curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/devices/import" -H "Authorization: Bearer $SERVER" \
            -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/receipt-devices.jsonl" > /dev/null
        receipt_id=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
            -H "Content-Type: application/json" -d '{"to":{"all":true},"alert":{"body":"receipts"}}' | json 'd["id"]')
        python3 - "$PORT" "$SERVER" "$receipt_id" > "$WORK/receipts.jsonl" <<'PY'
import json, sys, time, urllib.request
port, key, notification = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def get(path):
    return json.load(urllib.request.urlopen(urllib.request.Request(
        "http://127.0.0.1:%d%s" % (port, path), headers={"Authorization": "Bearer " + key})))
while get("/v1/apps/load/notifications/%s?limit=1" % notification)["counts"]["queued"] > 0:
    time.sleep(0.25)
offset = 0
while True:
    page = get("/v1/apps/load/notifications/%s?limit=10000&offset=%d" % (notification, offset))["deliveries"]
    if not page:
        break
    for delivery in page:
        if delivery["device_id"].startswith("r") and delivery["status"] == "sent":
            print(json.dumps({"delivery_id": delivery["id"], "device_id": delivery["device_id"]}))
    offset += len(page)
PY
        echo "   $(wc -l < "$WORK/receipts.jsonl") deliveries to report; the latency run alone, then with ${RECEIPTS} receipts/s"
        # Each round's flood reports deliveries of its own.
        python3 - "$WORK/receipts.jsonl" "$ROUNDS" <<'PY'
import sys
lines = open(sys.argv[1]).readlines()
rounds = int(sys.argv[2])
share = len(lines) // rounds
for number in range(rounds):
    with open(sys.argv[1].replace(".jsonl", "-%d.jsonl" % (number + 1)), "w") as out:
        out.writelines(lines[number * share:(number + 1) * share])
PY
        cc -O2 -o "$WORK/probe-flood" Benchmarks/probe-flood.c
        phases="alone receipts"
        # FLOOR=1: also a phase with as many requests that do nothing (GET /healthz, keyless)
        # from as many connections at the same nice level, between the two: what any 2,000
        # requests a second cost the sends on this box.
        [ -z "${FLOOR:-}" ] || phases="alone floor receipts"
    fi
    for round in $(seq 1 "$ROUNDS"); do
    [ "$ROUNDS" = 1 ] || echo "== round $round of $ROUNDS"
    for phase in $phases; do
    if [ "$phase" = receipts ]; then
        echo "== with ${RECEIPTS} receipts/s from 128 connections (Benchmarks/probe-flood.c), each delivery once"
        nice -n "${PROBE_NICE:-0}" "$WORK/probe-flood" "$PORT" "$RECEIPTS" "$flood_seconds" 128 /v1/apps/load/received "$WORK/receipts-$round.jsonl" "$SERVER" > "$WORK/receipt-flood.txt" &
        PROBE_PID=$!
        sleep 0.5
    fi
    if [ "$phase" = floor ]; then
        echo "== with GET /healthz at ${RECEIPTS}/s from 128 connections (the floor for the receipts)"
        nice -n "${PROBE_NICE:-0}" "$WORK/probe-flood" "$PORT" "$RECEIPTS" "$flood_seconds" 128 /healthz > "$WORK/floor-flood.txt" &
        PROBE_PID=$!
        sleep 0.5
    fi
    if [ "${PROBES:-0}" -gt 0 ]; then
        echo "== with GET /healthz at ${PROBES}/s from ${PROBE_CONNECTIONS:=16} connections (Benchmarks/probe-flood.c)"
        cc -O2 -o "$WORK/probe-flood" Benchmarks/probe-flood.c
        nice -n "${PROBE_NICE:-0}" "$WORK/probe-flood" "$PORT" "$PROBES" "$(python3 -c "print($LOAD_SECONDS + $WARMUP_SECONDS + 3)")" "$PROBE_CONNECTIONS" /healthz > "$WORK/probes.txt" &
        PROBE_PID=$!
        sleep 0.5
    fi
    case $phase in receipts) seq_offset=10000000 ;; floor) seq_offset=20000000 ;; *) seq_offset=0 ;; esac
    seq_offset=$((seq_offset + (round - 1) * 1000000))
    use_before=$(store_use); phase_cpu_before=$(proc_cpu "$SERVE_PID"); phase_start=$(date +%s.%N)
    python3 - "$PORT" "$SERVER" "$RATE" "$LOAD_SECONDS" "$SIM_CONTROL" "$WORK/devices.jsonl" "$WARMUP_SECONDS" "$seq_offset" <<'PY' | tee "$WORK/latency-$phase-$round.txt" || status=$?
import asyncio, json, sys, time, urllib.request
port, key, rate, seconds, control = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
warmup = int(rate * float(sys.argv[7]))
# A second run in the same process numbers its sends from here (the inbox keeps the first's).
offset = int(sys.argv[8])
tokens = [json.loads(line)["token"] for line in open(sys.argv[6])]
users = len(tokens)  # sends go to one device each, round robin
total = int(rate * seconds)
started = {}
accepted = {}
statuses = {}

async def worker(queue):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while True:
        seq = await queue.get()
        if seq is None:
            writer.close()
            return
        body = json.dumps({"to": {"device_ids": ["d%d" % (seq % users)]}, "alert": {"body": "latency"}, "data": {"seq": seq + offset}}).encode()
        request = (b"POST /v1/apps/load/notifications HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key.encode()
                   + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        started[seq] = time.time()
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        accepted[seq] = time.time()
        statuses[seq] = int(head.split(b" ")[1])

async def main():
    queue = asyncio.Queue()
    workers = [asyncio.create_task(worker(queue)) for _ in range(32)]
    # The warm-up (the server's APNs connections and the clients' own open, caches fill) goes
    # to the same devices at the same pace, numbered from -warmup; those sends are not counted.
    begin = time.monotonic() + warmup / rate
    for seq in range(-warmup, total):
        delay = begin + seq / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        queue.put_nowait(seq)
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers)
    return time.monotonic() - begin

elapsed = asyncio.run(main())
bad = {s: c for s, c in statuses.items() if c != 202}
print("sent %d in %.2fs (%.0f/s offered), non-202: %d" % (total, elapsed, total / elapsed, len(bad)))
time.sleep(2)
received = {}
def find_seq(value):
    if isinstance(value, dict):
        if isinstance(value.get("seq"), int):
            return value["seq"]
        for inner in value.values():
            found = find_seq(inner)
            if found is not None:
                return found
    return None
for token in tokens:
    inbox = json.load(urllib.request.urlopen("http://127.0.0.1:%d/inbox/%s" % (control, token)))
    for entry in inbox["notifications"]:
        seq = find_seq(entry["payload"])
        if seq is not None:
            seq -= offset
        if seq is not None and 0 <= seq < total:
            received.setdefault(seq, entry["received_at_us"] / 1e6)
for warm in [s for s in statuses if s < 0]:
    started.pop(warm, None); accepted.pop(warm, None); statuses.pop(warm)
with open(sys.argv[6].replace("devices.jsonl", "latency.csv"), "w") as out:
    out.write("seq,started,latency_ms,accept_ms\n")
    for s in sorted(received):
        out.write("%d,%.6f,%.3f,%.3f\n" % (s, started[s], (received[s] - started[s]) * 1000, (accepted.get(s, started[s]) - started[s]) * 1000))
latencies = sorted((received[s] - started[s]) * 1000 for s in received if s in started)
accepts = sorted((accepted[s] - started[s]) * 1000 for s in accepted)
missing = total - len(latencies)
def pct(values, p):
    return values[min(len(values) - 1, int(round(p / 100 * len(values))) - 1)]
print("received %d of %d; API call start -> APNs request (ms): p50 %.2f  p90 %.2f  p99 %.2f  max %.2f"
      % (len(latencies), total, pct(latencies, 50), pct(latencies, 90), pct(latencies, 99), latencies[-1]))
print("API call start -> 202 read (ms): p50 %.2f  p90 %.2f  p99 %.2f  max %.2f"
      % (pct(accepts, 50), pct(accepts, 90), pct(accepts, 99), accepts[-1]))
sys.exit(1 if missing or bad else 0)
PY
    # The server's own view, free of the Python client's scheduling: the accepts' time in the
    # store (the writer's wait, the transaction, the fsync) and the server's CPU over the phase.
    # SQLite's writer: the share of the phase each kind of work held it, and the waits for it.
    python3 -c "
import json, sys
before, after = json.loads(sys.argv[1]), json.loads(sys.argv[2])
new = lambda key: after.get(key, 0) - before.get(key, 0)
n = new('accept_count')
print('server: %d accepts, %.3f ms in the store on average; CPU %.2f s' % (
    n, new('accept_sum') / n * 1000 if n else 0, float(sys.argv[4]) - float(sys.argv[3])))
seconds = float(sys.argv[5])
for work in ['foreground', 'background']:
    holds = new(work + '_holds')
    if holds:
        print('writer, %s: held %.1f%% of the phase, %d holds of %.3f ms, each waited %.3f ms on average' % (
            work, new(work + '_held_seconds') / seconds * 100, holds, new(work + '_held_seconds') / holds * 1000,
            new(work + '_wait_seconds') / holds * 1000))
" "$use_before" "$(store_use)" "$phase_cpu_before" "$(proc_cpu "$SERVE_PID")" "$(elapsed "$phase_start")" | tee -a "$WORK/latency-$phase-$round.txt"
    cp "$WORK/latency.csv" "$WORK/latency-$phase-$round.csv"
    if [ -n "$PROBE_PID" ]; then
        wait "$PROBE_PID" || status=1
        case $phase in
            receipts) cat "$WORK/receipt-flood.txt" ;;
            floor) cat "$WORK/floor-flood.txt" ;;
            *) cat "$WORK/probes.txt" ;;
        esac
        PROBE_PID=
    fi
    done
    done
    if [ "${RECEIPTS:-0}" -gt 0 ]; then
        python3 - "$WORK" "$ROUNDS" <<'PY'
import os, re, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def found(phase, number, pattern):
    path = "%s/latency-%s-%d.txt" % (work, phase, number)
    if not os.path.exists(path):
        return None
    for line in open(path):
        match = re.search(pattern, line)
        if match:
            return float(match.group(1))
def p99(phase, number):
    return found(phase, number, r"APNs request \(ms\): .*p99 ([0-9.]+)")
def store_ms(phase, number):
    return found(phase, number, r"accepts, ([0-9.]+) ms in the store")
def pooled_p99(phase):
    latencies = []
    for number in range(1, rounds + 1):
        path = "%s/latency-%s-%d.csv" % (work, phase, number)
        if os.path.exists(path):
            latencies += [float(line.split(",")[2]) for line in list(open(path))[1:]]
    latencies.sort()
    return latencies[max(0, int(round(0.99 * len(latencies))) - 1)] if latencies else None
ratios, floors, against_floor = [], [], []
for number in range(1, rounds + 1):
    alone, receipts, floor = p99("alone", number), p99("receipts", number), p99("floor", number)
    ratios.append(receipts / alone)
    line = "send p99 alone %.2f ms, with the receipts %.2f ms: %.2fx" % (alone, receipts, receipts / alone)
    if floor is not None:
        floors.append(floor / alone)
        against_floor.append(receipts / floor)
        line += "; with as many GET /healthz %.2f ms: %.2fx alone; the receipts %.2fx the floor" % (
            floor, floor / alone, receipts / floor)
    print(("round %d: " % number if rounds > 1 else "") + line)
if rounds > 1:
    line = "median of %d rounds: the receipts %.2fx alone" % (rounds, statistics.median(ratios))
    if floors:
        line += ", the floor %.2fx alone, the receipts %.2fx the floor" % (
            statistics.median(floors), statistics.median(against_floor))
    print(line)
    # Every round's sends of a phase together: one round's stall weighs a fifth, not a half.
    pooled = {phase: pooled_p99(phase) for phase in ["alone", "floor", "receipts"]}
    line = "pooled over %d rounds: send p99 alone %.2f ms, with the receipts %.2f ms: %.2fx" % (
        rounds, pooled["alone"], pooled["receipts"], pooled["receipts"] / pooled["alone"])
    if pooled["floor"] is not None:
        line += "; the floor %.2f ms, the receipts %.2fx the floor" % (pooled["floor"], pooled["receipts"] / pooled["floor"])
    print(line)
stores = {phase: [store_ms(phase, n) for n in range(1, rounds + 1)] for phase in ["alone", "floor", "receipts"]}
if all(v is not None for v in stores["alone"] + stores["receipts"]):
    medians = {phase: statistics.median(v) for phase, v in stores.items() if v and None not in v}
    print("an accept's time in the store (the writer's wait, its transaction, the fsync), median of the rounds: "
          + ", ".join("%s %.3f ms" % (phase, ms) for phase, ms in medians.items()))
PY
        curl -sf "http://127.0.0.1:$PORT/metrics" -H "Authorization: Bearer $METRICS" | grep '^herald_deliveries_received_total' || true
    fi
    print_metrics
    exit $status
fi

if [ "$MODE" = fanout ] && [ "${RAW:-0}" -gt 0 ]; then
    # The reference the issue compares against: raw `herald send` (no database) of RAW fresh
    # tokens to the same simulator, in the same run; then the inbox is emptied.
    python3 -c "import secrets; print('\n'.join(secrets.token_hex(32) for _ in range($RAW)))" > "$WORK/raw-tokens.txt"
    raw=$("$HERALD" send --endpoint "https://127.0.0.1:$APNS_PORT" --ca-file "$WORK/sim/sim-ca.pem" \
        --key-file "$WORK/sim/demo-AuthKey.p8" --key-id DEMOKEY001 --team-id DEMOTEAM01 --topic com.example.load \
        --title Hello --body Everyone --tokens-file "$WORK/raw-tokens.txt" --quiet)
    RAW_RATE=$(echo "$raw" | json 'd["per_second"]')
    echo "raw herald send of $RAW tokens: $raw"
    curl -sf -X DELETE "http://127.0.0.1:$SIM_CONTROL/inbox" > /dev/null
fi

PERF_PID=""
if [ "$MODE" = fanout ] && [ -n "${PERF:-}" ]; then
    perf record -F 499 -g -p "$SERVE_PID" -o "$WORK/serve.perf.data" 2> "$WORK/perf.err" &
    PERF_PID=$!
    sleep 0.5
fi
echo "== send one notification to all"
# The server's and the receiver's CPU over the fan-out (the receiver: h2sink or the simulator).
RECEIVER_PID=${SINK_PID:-$SIM_PID}
[ "$MODE" != fanout ] || fanout_cpu_before="$(proc_cpu "$SERVE_PID") $(proc_cpu "$RECEIVER_PID")"
start=$(date +%s.%N)
BODY='{"to":{"all":true},"alert":{"title":"Hello","body":"Everyone"}}'
[ "$MODE" != opens ] || BODY='{"to":{"all":true},"type":"promo"}'
id=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/json" -d "$BODY" | json 'd["id"]')
accepted_seconds=$(python3 -c "import time; print(round(time.time() - $start, 2))")
echo "202 after ${accepted_seconds}s: notification $id"

counts() { curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$id?limit=1" -H "Authorization: Bearer $SERVER" | json 'd["counts"]'; }
# One of the notification's counts: queued, sent, failed…
count_of() { curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$id?limit=1" -H "Authorization: Bearer $SERVER" | json "d['counts']['$1']"; }
queued() { count_of queued; }

# Waits until the simulator's inbox holds 30% of COUNT; sets total to what it holds then.
await_inbox_share() {
    local target=$((COUNT * 3 / 10))
    while true; do
        total=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]')
        [ "$total" -ge "$target" ] && break
        sleep 0.05
    done
}

if [ "$MODE" = reliability ]; then
    await_inbox_share
    # What a crash now would send again: sent and unanswered, answered and unwritten.
    window=$(curl -sf -H "Authorization: Bearer $METRICS" "http://127.0.0.1:$PORT/metrics" \
        | awk '/^herald_outbox_(in_flight|unwritten_answers) / {printf "%s=%s ", $1, $2}' || true)
    kill -9 $SERVE_PID
    wait $SERVE_PID 2>/dev/null || true
    echo "kill -9 with $total of $COUNT in the inbox; just before: ${window:-no window gauges}"
    start_server
fi
if [ "$MODE" = backup ]; then
    await_inbox_share
    backup_start=$(date +%s.%N)
    "$HERALD" backup --config "$WORK/herald.yaml" --to "$WORK/backup.sqlite" > "$WORK/backup.json"
    backup_seconds=$(python3 -c "import time; print(round(time.time() - $backup_start, 2))")
    after=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]')
    echo "herald backup in ${backup_seconds}s while sending (inbox $total -> $after of $COUNT): $(cat "$WORK/backup.json")"
fi

while true; do
    q=$(queued 2>/dev/null || echo 1)
    [ "$q" = 0 ] && break
    sleep 0.25
done
all_seconds=$(python3 -c "import time; print(round(time.time() - $start, 2))")
if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID"; wait "$PERF_PID" || true; echo "profile: $WORK/serve.perf.data"; fi
inbox=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox")
echo "every delivery recorded after ${all_seconds}s: counts $(counts)"
if [ "$MODE" = fanout ]; then
    python3 -c "import sys; b = sys.argv[1].split(); a = sys.argv[2].split(); s = float(sys.argv[3])
print('fan-out CPU: server %.1f s (%.2f cores), receiver %.1f s' % (float(a[0]) - float(b[0]), (float(a[0]) - float(b[0])) / s, float(a[1]) - float(b[1])))" \
        "$fanout_cpu_before" "$(proc_cpu "$SERVE_PID") $(proc_cpu "$RECEIVER_PID")" "$all_seconds"
fi
if [ -n "${RAW_RATE:-}" ]; then
    python3 -c "rate = $COUNT / $all_seconds; print('durable fan-out %.0f/s vs raw herald send %.0f/s: ratio %.2f' % (rate, $RAW_RATE, rate / $RAW_RATE))"
fi
echo "inbox: $inbox"
if [ "$MODE" = reliability ]; then
    # What the restart wrote from the killed process's answer journal, and what it queued again.
    restart=$(curl -sf -H "Authorization: Bearer $METRICS" "http://127.0.0.1:$PORT/metrics" \
        | awk '/^herald_(journaled_answers|restart_resends)_total / {printf "%s=%s ", $1, $2}' || true)
    echo "after the restart: ${restart:-no restart counters}"
fi
if [ "$MODE" = opens ]; then
    OPENS=${OPENS:-$(( COUNT < 100000 ? COUNT : 100000 ))}
    echo "== report $OPENS opens (and a tenth of them again) as fast as the API takes them"
    status=0
    python3 - "$PORT" "$SERVER" "$id" "$OPENS" "${OPEN_RATE:-0}" "$SERVE_PID" <<'PY' || status=$?
import asyncio, json, sys, time, urllib.request
port, key, notification, opens, rate, pid = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]

def server_cpu():
    fields = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0

cpu_before = server_cpu()
deliveries = []
offset = 0
while len(deliveries) < opens:
    request = urllib.request.Request("http://127.0.0.1:%d/v1/apps/load/notifications/%s?limit=10000&offset=%d" % (port, notification, offset),
                                     headers={"Authorization": "Bearer " + key})
    page = json.load(urllib.request.urlopen(request))["deliveries"]
    if not page:
        break
    deliveries += [(d["id"], d["device_id"]) for d in page]
    offset += len(page)
deliveries = deliveries[:opens]
reports = deliveries + deliveries[: len(deliveries) // 10]
statuses = {}
counted = 0

def open_request(item):
    body = json.dumps({"delivery_id": item[0], "device_id": item[1], "action": "default"}).encode()
    return (b"POST /v1/apps/load/opened HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + key.encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

def open_answer(code, answer):
    global counted
    statuses[code] = statuses.get(code, 0) + 1
    if code == 200 and b'"counted":true' in answer:
        counted += 1

async def worker(queue, request, answered):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while True:
        entry = await queue.get()
        if entry is None:
            writer.close()
            return
        index, item = entry
        if rate > 0:
            # Paced: request i is due at begin + i / rate.
            delay = begin + index / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        writer.write(request(item))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        answered(int(head.split(b" ")[1]), await reader.readexactly(length))

begin = 0.0

async def run(items, request, answered):
    """Sends items over 64 connections (paced when rate > 0); returns the seconds taken."""
    global begin
    queue = asyncio.Queue()
    for entry in enumerate(items):
        queue.put_nowait(entry)
    workers = [asyncio.create_task(worker(queue, request, answered)) for _ in range(64)]
    for _ in workers:
        queue.put_nowait(None)
    begin = time.monotonic()
    await asyncio.gather(*workers)
    return time.monotonic() - begin

client_before = time.process_time()
elapsed = asyncio.run(run(reports, open_request, open_answer))
print("%d reports (%d opens, %d repeats) in %.2fs: %.0f/s; statuses %s; counted %d; client CPU %.1f s"
      % (len(reports), len(deliveries), len(reports) - len(deliveries), elapsed, len(reports) / elapsed, statuses, counted,
         time.process_time() - client_before))
cpu = server_cpu() - cpu_before
peak = [line.split()[1] for line in open("/proc/%s/status" % pid) if line.startswith("VmHWM:")][0]
print("server CPU for the reports: %.1f s, %.3f ms a report; peak RSS %.1f MB" % (cpu, cpu * 1000 / len(reports), int(peak) / 1024))
# The floor: what a request that does nothing (GET /healthz) costs at the same pace over as
# many connections, in the same run.
floor = len(reports) // 2
cpu_before = server_cpu()
asyncio.run(run(range(floor), lambda _: b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", lambda code, answer: None))
print("server CPU for %d GET /healthz at the same pace (the floor): %.3f ms a request"
      % (floor, (server_cpu() - cpu_before) * 1000 / floor))
sys.exit(0 if counted == len(deliveries) and statuses.get(200) == len(reports) else 1)
PY
    python3 - "$PORT" "$SERVER" "$OPENS" "$COUNT" <<'PY' || status=$?
import json, sys, time, urllib.request
port, key, opens, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
times = []
for _ in range(7):
    request = urllib.request.Request("http://127.0.0.1:%d/v1/apps/load/analytics" % port, headers={"Authorization": "Bearer " + key})
    start = time.monotonic()
    answer = json.load(urllib.request.urlopen(request))
    times.append((time.monotonic() - start) * 1000)
promo = answer["types"][0]
times.sort()
print("GET analytics over %d deliveries: p50 %.1f ms, max %.1f ms; promo sent %d opened %d ctr %s below_goal %s; opt-in reported %d"
      % (count, times[len(times) // 2], times[-1], promo["sent"], promo["opened"], promo["ctr"], promo["below_goal"], answer["opt_in"]["reported"]))
sys.exit(0 if promo["opened"] == opens and promo["accepted"] == count else 1)
PY
    [ "$status" = 0 ] || exit $status
fi
print_metrics
grep -h "queued again" "$WORK/serve.err" | tail -1 || true
if [ -n "${SINK:-}" ]; then
    # The sink keeps nothing: every delivery must be recorded sent, once.
    kill -TERM "$SINK_PID"; wait "$SINK_PID" 2>/dev/null || true
    echo "$(cat "$WORK/sink.err") (raw herald send's included)"
    sent=$(count_of sent)
    echo "every delivery recorded sent: $([ "$sent" = "$COUNT" ] && echo yes || echo NO) ($sent of $COUNT)"
    [ "$sent" = "$COUNT" ]
    exit $?
fi
python3 - "$inbox" "$COUNT" <<'PY'
import json, sys
inbox, count = json.loads(sys.argv[1]), int(sys.argv[2])
# A resend carries its first try's collapse id: the device replaces, it does not show twice.
ok = inbox["tokens"] == count and inbox.get("shown", count) == count
print("every device reached:", "yes" if ok else "NO", "| duplicates:", inbox["duplicates"],
      "(%.2f%% of %d) | shown: %s (one per device: %s)" % (100.0 * inbox["duplicates"] / count, count, inbox.get("shown"),
      "yes" if inbox.get("shown") == count else "NO"))
sys.exit(0 if ok else 1)
PY

if [ "$MODE" = backup ]; then
    echo "== restore the backup into the stopped server; an empty inbox; start it again"
    kill -TERM "$SERVE_PID"
    wait "$SERVE_PID" 2> /dev/null || true
    curl -sf -X DELETE "http://127.0.0.1:$SIM_CONTROL/inbox" > /dev/null
    # What the backup had not answered: the tokens the restored server must send to, once each.
    # The notification went to all devices (a broadcast: a device's row is written when its
    # page is answered), so that is every device without an answered row.
    python3 - "$WORK/backup.sqlite" "$id" > "$WORK/pending.txt" <<'PY'
import sqlite3, sys
db = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
answered = {device for (device, notification) in db.execute(
    "SELECT device_id, notification_id FROM deliveries WHERE app_id = 'load'"
    " AND status NOT IN ('queued', 'deferred', 'sending')") if notification.lower() == sys.argv[2].lower()}
for (device, token) in db.execute("SELECT device_id, token FROM devices WHERE app_id = 'load'"):
    if device not in answered:
        print(token)
PY
    pending=$(wc -l < "$WORK/pending.txt")
    restore_start=$(date +%s.%N)
    "$HERALD" restore --config "$WORK/herald.yaml" --from "$WORK/backup.sqlite" > /dev/null
    restore_seconds=$(python3 -c "import time; print(round(time.time() - $restore_start, 2))")
    echo "herald restore in ${restore_seconds}s; the backup had $pending deliveries not answered"
    start_server
    while true; do
        q=$(queued 2> /dev/null || echo 1)
        [ "$q" = 0 ] && break
        sleep 0.25
    done
    echo "restored server finished: counts $(counts)"
    python3 - "$SIM_CONTROL" "$WORK/pending.txt" <<'PY'
import http.client, json, sys
control, pending = int(sys.argv[1]), open(sys.argv[2]).read().split()
connection = http.client.HTTPConnection("127.0.0.1", control)
def get(path):
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())
inbox = get("/inbox")
counts = [len(get("/inbox/" + token)["notifications"]) for token in pending]
lost = sum(1 for n in counts if n == 0)
twice = sum(1 for n in counts if n > 1)
others = inbox["total"] - sum(counts)
print("restored server sent %d: of the backup's %d unanswered, %d not sent, %d sent twice; %d sent that the backup had answered"
      % (inbox["total"], len(pending), lost, twice, others))
sys.exit(0 if lost == 0 and twice == 0 and others == 0 else 1)
PY
fi
