#!/usr/bin/env bash
# Several `herald serve` nodes on one PostgreSQL, against `herald sim` answering after
# 100 ms with 100 streams per connection (I/O-bound, like a real APNs round trip):
#
#   scripts/scale-out.sh rate [DEVICES]   # default 40,000: one notification to all, with 1 node
#                                         # then 2 nodes; time send → every result recorded
#   scripts/scale-out.sh kill [DEVICES]   # default 100,000: 2 nodes, kill -9 one at >= 30% in
#                                         # the inbox; every device must be reached; prints the
#                                         # dead node's in-flight claims (rescued) and duplicates
#
# Needs PostgreSQL's server binaries (Debian's postgresql package); starts its own server in
# bench-out/scale-*/pg. Release build (NO_BUILD=1 skips building). Logs stay in bench-out/scale-*/.
# OUTBOX='{ max_in_flight: 2000 }' adds that `outbox:` section to every node's configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?rate or kill}
case "$MODE" in
    rate) COUNT=${2:-40000} ;;
    kill) COUNT=${2:-100000} ;;
    *) echo "mode is rate or kill" >&2; exit 64 ;;
esac
. scripts/bench-lib.sh
bench_setup "scale-$MODE"
SIM_PORT=18643; SIM_CONTROL=18644
SERVER="server-key-0123456789abcdef"
now() { date +%s.%N; }
since() { python3 -c "import time; print(round(time.time() - $1, 2))"; }

start_postgres 18690
URL="postgres://postgres@127.0.0.1:18690/herald?sslmode=disable"

"$HERALD" sim --port $SIM_PORT --control-port $SIM_CONTROL --tls-dir "$WORK/sim" --topic com.example.load \
    --latency-ms 100 --max-concurrent-streams 100 > "$WORK/sim.out" 2> "$WORK/sim.err" &
PIDS+=($!)
wait_for "http://127.0.0.1:$SIM_CONTROL/inbox"

NODE_PIDS=()
start_node() { # index
    local port=$((18680 + $1))
    cat > "$WORK/herald-$1.yaml" <<YAML
server: { host: 127.0.0.1, port: $port }
database: { url: "$URL" }
apps:
  - id: load
    keys: { server: "$SERVER" }
    apns: { team_id: DEMOTEAM01, key_id: DEMOKEY001, key_file: "sim/demo-AuthKey.p8", topic: com.example.load,
            environment: sandbox, endpoint: "https://127.0.0.1:$SIM_PORT", ca_file: "sim/sim-ca.pem" }
YAML
    [ -z "${OUTBOX:-}" ] || echo "outbox: $OUTBOX" >> "$WORK/herald-$1.yaml"
    HERALD_LOG_LEVEL=${HERALD_LOG_LEVEL:-info} "$HERALD" serve --config "$WORK/herald-$1.yaml" >> "$WORK/serve-$1.out" 2>> "$WORK/serve-$1.err" &
    NODE_PIDS[$1]=$!
    PIDS+=($!)
    wait_for "http://127.0.0.1:$port/healthz"
}
stop_nodes() {
    for pid in "${NODE_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    NODE_PIDS=()
}
API=http://127.0.0.1:18680
queued() { curl -sf "$API/v1/apps/load/notifications/$1?limit=1" -H "Authorization: Bearer $SERVER" | json 'd["counts"]["queued"]'; }
send_all() {
    curl -sf -X POST "$API/v1/apps/load/notifications" -H "Authorization: Bearer $SERVER" \
        -H "Content-Type: application/json" -d '{"to":{"all":true},"alert":{"title":"Hello","body":"Everyone"}}' | json 'd["id"]'
}
wait_recorded() { while [ "$(queued "$1" 2>/dev/null || echo 1)" != 0 ]; do sleep 0.1; done; }

$PSQL -d postgres -c "CREATE DATABASE herald"
start_node 0
python3 - "$COUNT" > "$WORK/devices.jsonl" <<'PY'
import secrets, sys
for i in range(int(sys.argv[1])):
    sys.stdout.write('{"device_id":"d%d","user_id":"u%d","token":"%s","environment":"sandbox"}\n' % (i, i, secrets.token_hex(32)))
PY
curl -sf -X POST "$API/v1/apps/load/devices/import" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/devices.jsonl" > /dev/null
echo "== $COUNT devices imported"

if [ "$MODE" = rate ]; then
    for nodes in 1 2 1 2 1 2; do
        [ "$nodes" = 2 ] && start_node 1
        start=$(now); id=$(send_all); wait_recorded "$id"; seconds=$(since "$start")
        echo "$nodes node(s): $COUNT delivered and recorded in ${seconds}s ($(python3 -c "print(round($COUNT / $seconds))")/s)"
        [ "$nodes" = 2 ] && { kill -TERM "${NODE_PIDS[1]}"; wait "${NODE_PIDS[1]}" 2>/dev/null || true; unset 'NODE_PIDS[1]'; }
    done
else
    start_node 1
    start=$(now); id=$(send_all)
    target=$((COUNT * 3 / 10))
    while [ "$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]')" -lt "$target" ]; do sleep 0.05; done
    kill -9 "${NODE_PIDS[1]}"
    dead=$(grep -o 'herald.node=[0-9a-f-]*' "$WORK/serve-1.err" | head -1 | cut -d= -f2)
    # Claimed rows, and a broadcast's devices handed out in pages not yet answered.
    inflight=$($PSQL -d herald -c "SELECT (SELECT count(*) FROM deliveries WHERE status = 'sending' AND claimed_by = '$dead')
        + (SELECT COALESCE(SUM(remaining), 0) FROM broadcast_pages WHERE claimed_by = '$dead')")
    echo "kill -9 node 1 ($dead) with $(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox" | json 'd["total"]') of $COUNT in the inbox: $inflight claims in flight"
    wait_recorded "$id"
    echo "every delivery recorded after $(since "$start")s"
    inbox=$(curl -sf "http://127.0.0.1:$SIM_CONTROL/inbox")
    rescued=$(grep -ho 'herald.requeued=[0-9]*' "$WORK/serve-0.err" | cut -d= -f2 | paste -sd+ | bc)
    python3 - "$inbox" "$COUNT" "$inflight" "${rescued:-0}" <<'PY'
import json, sys
inbox, count, inflight, rescued = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ok = inbox["tokens"] == count and inbox["duplicates"] <= inflight
print("every device reached:", "yes" if inbox["tokens"] == count else "NO",
      "| rescued by the survivor:", rescued, "| dead node's in-flight claims:", inflight,
      "| duplicates:", inbox["duplicates"], "(<= in-flight claims: %s)" % ("yes" if inbox["duplicates"] <= inflight else "NO"))
sys.exit(0 if ok else 1)
PY
fi
stop_nodes
