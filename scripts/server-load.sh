#!/usr/bin/env bash
# Server load runs against `herald sim` (release builds):
#
#   scripts/server-load.sh reliability [DEVICES]   # default 100,000: send to all, kill -9 mid-way,
#                                                  # restart; every device must be in the inbox
#   scripts/server-load.sh fanout [DEVICES]        # default 1,000,000: import, send to all, time
#                                                  # until every delivery has its result; peak RSS
#   scripts/server-load.sh import [DEVICES]        # default 1,000,000: POST …/devices/import only;
#                                                  # seconds, server CPU and peak RSS
#
# DATABASE=postgres runs the same on PostgreSQL: a server the script starts from the installed
# binaries (Debian's postgresql package) in bench-out/server-*/pg, with its default durability;
# DATABASE=postgres://... uses that (empty) database instead.
#
# Figures print at the end; logs stay in bench-out/server-*/.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?reliability, fanout or import}
case "$MODE" in
    reliability) COUNT=${2:-100000} ;;
    fanout|import) COUNT=${2:-1000000} ;;
    *) echo "mode is reliability, fanout or import" >&2; exit 64 ;;
esac
. scripts/bench-lib.sh
bench_setup "server-$MODE"
SIM_PORT=18543; SIM_CONTROL=18544; PORT=18580
SERVER="server-key-0123456789abcdef"
peak_rss_mb() { awk '/VmHWM/ {printf "%.1f", $2/1024}' /proc/$1/status; }

"$HERALD" sim --port $SIM_PORT --control-port $SIM_CONTROL --tls-dir "$WORK/sim" --topic com.example.load \
    > "$WORK/sim.out" 2> "$WORK/sim.err" &
PIDS+=($!)
wait_for "http://127.0.0.1:$SIM_CONTROL/inbox"
DATABASE_URL="sqlite://$WORK/herald.sqlite"
case "${DATABASE:-sqlite}" in
    sqlite) ;;
    postgres) start_postgres 18590; DATABASE_URL=$PG_URL ;;
    postgres://*|postgresql://*) DATABASE_URL=$DATABASE ;;
    *) echo "DATABASE is sqlite, postgres or a postgres:// URL" >&2; exit 64 ;;
esac
echo "== database ${DATABASE_URL%%://*}"
cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "$DATABASE_URL" }
apps:
  - id: load
    keys: { server: "$SERVER" }
    apns: { team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: com.example.load,
            environment: sandbox, endpoint: "https://127.0.0.1:$SIM_PORT", ca_file: "sim/sim-ca.pem" }
YAML
SERVE_PID=""
start_server() {
    HERALD_LOG_LEVEL=${HERALD_LOG_LEVEL:-notice} "$HERALD" serve --config "$WORK/herald.yaml" >> "$WORK/serve.out" 2>> "$WORK/serve.err" &
    SERVE_PID=$!
    PIDS+=($SERVE_PID)
    wait_for "http://127.0.0.1:$PORT/healthz"
}
start_server

echo "== import $COUNT devices"
python3 - "$COUNT" > "$WORK/devices.jsonl" <<'PY'
import secrets, sys
count = int(sys.argv[1])
out = sys.stdout
for i in range(count):
    out.write('{"device_id":"d%d","user_id":"u%d","token":"%s","environment":"sandbox"}\n' % (i, i // 3, secrets.token_hex(32)))
PY
start=$(date +%s.%N)
imported=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/devices/import" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/devices.jsonl" | json 'd["imported"]')
import_seconds=$(python3 -c "import time; print(round(time.time() - $start, 2))")
echo "imported $imported in ${import_seconds}s (server peak RSS so far $(peak_rss_mb $SERVE_PID) MB)"
if [ "$MODE" = import ]; then
    echo "server CPU: $(awk '{print ($14+$15)/100}' /proc/$SERVE_PID/stat) s; peak RSS: $(peak_rss_mb $SERVE_PID) MB"
    [ "$imported" = "$COUNT" ] || { echo "imported $imported of $COUNT" >&2; exit 1; }
    exit 0
fi

echo "== send one notification to all"
start=$(date +%s.%N)
id=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/json" -d '{"to":{"all":true},"alert":{"title":"Hello","body":"Everyone"}}' | json 'd["id"]')
accepted_seconds=$(python3 -c "import time; print(round(time.time() - $start, 2))")
echo "202 after ${accepted_seconds}s: notification $id"

counts() { curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$id?limit=1" -H "Authorization: Bearer $SERVER" | json 'd["counts"]'; }
queued() { curl -sf "http://127.0.0.1:$PORT/v1/apps/load/notifications/$id?limit=1" -H "Authorization: Bearer $SERVER" | json 'd["counts"]["queued"]'; }

if [ "$MODE" = reliability ]; then
    target=$((COUNT * 3 / 10))
    while true; do
        total=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]')
        [ "$total" -ge "$target" ] && break
        sleep 0.05
    done
    kill -9 $SERVE_PID
    wait $SERVE_PID 2>/dev/null || true
    echo "kill -9 with $total of $COUNT in the inbox"
    start_server
fi

while true; do
    q=$(queued 2>/dev/null || echo 1)
    [ "$q" = 0 ] && break
    sleep 0.25
done
all_seconds=$(python3 -c "import time; print(round(time.time() - $start, 2))")
inbox=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox")
echo "every delivery recorded after ${all_seconds}s: counts $(counts)"
echo "inbox: $inbox"
echo "server peak RSS: $(peak_rss_mb $SERVE_PID) MB (this process); CPU: $(awk '{print ($14+$15)/100}' /proc/$SERVE_PID/stat) s"
grep -h "queued again" "$WORK/serve.err" | tail -1 || true
python3 - "$inbox" "$COUNT" <<'PY'
import json, sys
inbox, count = json.loads(sys.argv[1]), int(sys.argv[2])
ok = inbox["tokens"] == count
print("every device reached:", "yes" if ok else "NO", "| duplicates:", inbox["duplicates"])
sys.exit(0 if ok else 1)
PY
