#!/usr/bin/env bash
# APNs delivery benchmark: `herald send --tokens-file` with 20,000 distinct tokens to
# `herald sim` on this machine, three runs; aioapns against the same simulator for comparison;
# then the fault run (10% 500s, 5% 429s, GOAWAY every 1,000 streams) checked for exactly-once.
#
#   Benchmarks/apns-send.sh [--no-build] [--no-aioapns]
#
# Output: one line per run and a summary with medians; the raw logs stay in bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=1; AIOAPNS=1
for arg in "$@"; do
    case "$arg" in
        --no-build) BUILD=0 ;;
        --no-aioapns) AIOAPNS=0 ;;
        *) echo "unknown option $arg" >&2; exit 64 ;;
    esac
done
OUT=bench-out
mkdir -p "$OUT"
[ "$BUILD" = 1 ] && swift build -c release >&2
HERALD=${HERALD_BIN:-.build/release/herald}
TOKENS="$OUT/tokens-20000.txt"
COUNT=20000
PORT=${HERALD_BENCH_PORT:-18443}
CONTROL=${HERALD_BENCH_CONTROL_PORT:-18444}
python3 -c "import secrets,sys; print('\n'.join(secrets.token_hex(32) for _ in range($COUNT)))" > "$TOKENS"

. Benchmarks/lib.sh
SEND=("$HERALD" send --endpoint "https://127.0.0.1:$PORT" --ca-file "$OUT/sim/sim-ca.pem"
    --key-file "$OUT/sim/demo-AuthKey.p8" --key-id DEMOKEY001 --team-id DEMOTEAM01
    --topic com.example.bench --title Hello --body World --tokens-file "$TOKENS" --quiet)

echo "== herald send: $COUNT tokens, 1 warm-up run + 3 measured runs"
start_sim --topic com.example.bench
measure apns "${SEND[@]}"

if [ "$AIOAPNS" = 1 ]; then
    python3 -c "import aioapns" 2>/dev/null || pip install -q aioapns >&2
    echo "== aioapns (PyPI $(python3 -c 'import importlib.metadata as m; print(m.version("aioapns"))')): $COUNT tokens, 3 runs"
    arates=()
    for run in 1 2 3; do
        curl -sf -X DELETE "http://127.0.0.1:$CONTROL/inbox" >/dev/null
        line=$(/usr/bin/time -f "%U %S %M %e" -o "$OUT/atime-$run.txt" python3 Benchmarks/aioapns_send.py --port "$PORT" \
            --ca-file "$OUT/sim/sim-ca.pem" --key-file "$OUT/sim/demo-AuthKey.p8" --key-id DEMOKEY001 \
            --team-id DEMOTEAM01 --topic com.example.bench --tokens-file "$TOKENS")
        read -r user sys rss wall < "$OUT/atime-$run.txt"
        echo "run $run: $line cpu_seconds=$(python3 -c "print(round($user + $sys, 2))") peak_rss_kb=$rss"
        arates+=("$(echo "$line" | field per_second)")
    done
    AIO_RATE=$(printf '%s\n' "${arates[@]}" | median)
    echo "median: per_second=$AIO_RATE; herald/aioapns = $(python3 -c "print(round($HERALD_RATE / $AIO_RATE, 1))")x"
fi
stop_sim

echo "== fault run: 10% 500, 5% 429, GOAWAY every 1,000 streams, $COUNT tokens"
start_sim --fail-500 0.1 --fail-429 0.05 --goaway-after-streams 1000
line=$("${SEND[@]}")  # default flags: retried until --retry-deadline (60 s)
echo "send: $line"
check_exactly_once "$COUNT"
