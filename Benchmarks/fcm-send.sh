#!/usr/bin/env bash
# FCM delivery benchmark: `herald send --fcm --tokens-file` with 20,000 distinct
# registration tokens to `herald sim` (FCM HTTP v1: OAuth2 token endpoint + messages:send over
# HTTP/2 + TLS) on this machine, 1 warm-up run + 3 measured runs; then a fault run (10% 500
# INTERNAL, 5% 503 UNAVAILABLE, 1% 429 QUOTA_EXCEEDED, all with Retry-After: 1, GOAWAY every
# 1,000 streams) checked for exactly-once delivery. The Firebase Admin Python SDK
# (`messaging.send_each_async`, HTTP/2 via httpx) runs against the same simulator for comparison.
#
#   Benchmarks/fcm-send.sh [--no-build] [--no-firebase-admin]
#
# Output: one line per run and a summary with medians; the raw logs stay in bench-out/.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=1; FIREBASE=1
for arg in "$@"; do
    case "$arg" in
        --no-build) BUILD=0 ;;
        --no-firebase-admin) FIREBASE=0 ;;
        *) echo "unknown option $arg" >&2; exit 64 ;;
    esac
done
OUT=bench-out
mkdir -p "$OUT"
[ "$BUILD" = 1 ] && swift build -c release --product herald >&2
HERALD=${HERALD_BIN:-.build/release/herald}
TOKENS="$OUT/fcm-tokens-20000.txt"
COUNT=20000
PORT=${HERALD_BENCH_PORT:-18443}
CONTROL=${HERALD_BENCH_CONTROL_PORT:-18444}
# FCM registration tokens are opaque strings of ~150 characters; these are as long.
python3 -c "import secrets; print('\n'.join(secrets.token_urlsafe(60) + ':APA91b' + secrets.token_urlsafe(56) for _ in range($COUNT)))" > "$TOKENS"

. Benchmarks/lib.sh
# The simulator's demo service account (its token_uri points at the simulator).
SEND=("$HERALD" send --fcm --service-account "$OUT/sim/demo-service-account.json"
    --endpoint "https://127.0.0.1:$PORT" --ca-file "$OUT/sim/sim-ca.pem"
    --title Hello --body World --tokens-file "$TOKENS" --quiet)

echo "== herald send --fcm: $COUNT tokens, 1 warm-up run + 3 measured runs"
start_sim
measure fcm "${SEND[@]}"
echo "counters: $(curl -sf "http://127.0.0.1:$CONTROL/counters")"

if [ "$FIREBASE" = 1 ]; then
    python3 -c "import firebase_admin, h2" 2>/dev/null || pip install -q firebase-admin 'httpx[http2]' >&2
    echo "== firebase-admin (PyPI $(python3 -c 'import importlib.metadata as m; print(m.version("firebase-admin"))')): $COUNT tokens, 3 runs"
    frates=()
    for run in 1 2 3; do
        curl -sf -X DELETE "http://127.0.0.1:$CONTROL/inbox" >/dev/null
        line=$(/usr/bin/time -f "%U %S %M %e" -o "$OUT/ftime-$run.txt" python3 -W ignore Benchmarks/firebase_admin_send.py \
            --endpoint "https://127.0.0.1:$PORT" --ca-file "$OUT/sim/sim-ca.pem" \
            --service-account "$OUT/sim/demo-service-account.json" --tokens-file "$TOKENS")
        read -r user sys rss wall < "$OUT/ftime-$run.txt"
        echo "run $run: $line cpu_seconds=$(python3 -c "print(round($user + $sys, 2))") peak_rss_kb=$rss inbox=$(curl -sf "http://127.0.0.1:$CONTROL/inbox")"
        frates+=("$(echo "$line" | field per_second)")
    done
    FIREBASE_RATE=$(printf '%s\n' "${frates[@]}" | median)
    echo "median: per_second=$FIREBASE_RATE; herald/firebase-admin = $(python3 -c "print(round($HERALD_RATE / $FIREBASE_RATE, 1))")x"
fi
stop_sim

echo "== fault run: 10% 500, 5% 503, 1% 429 (Retry-After: 1), GOAWAY every 1,000 streams, $COUNT tokens"
start_sim --fail-500 0.1 --fail-503 0.05 --fail-429 0.01 --goaway-after-streams 1000
line=$(/usr/bin/time -f "%U %S %M %e" -o "$OUT/fcm-time-fault.txt" "${SEND[@]}" --retry-base-delay 0.05 --max-attempts 20)
read -r user sys rss wall < "$OUT/fcm-time-fault.txt"
echo "send: $line cpu_seconds=$(python3 -c "print(round($user + $sys, 2))") peak_rss_kb=$rss wall_seconds=$wall"
check_exactly_once "$COUNT"
