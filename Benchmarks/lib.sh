# shellcheck shell=bash
# Shared by the delivery benchmarks (apns-send.sh, fcm-send.sh); sourced, not run.
# Expects HERALD, OUT, PORT and CONTROL to be set.

SIM_PID=""
# start_sim [herald sim options…]: the simulator on $PORT/$CONTROL with its files in $OUT/sim.
start_sim() {
    "$HERALD" sim --port "$PORT" --control-port "$CONTROL" --tls-dir "$OUT/sim" "$@" \
        > "$OUT/sim.out" 2> "$OUT/sim.err" &
    SIM_PID=$!
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$CONTROL/inbox" >/dev/null && return 0; sleep 0.1; done
    echo "simulator did not start" >&2; cat "$OUT/sim.err" >&2; exit 1
}
stop_sim() {
    if [ -n "$SIM_PID" ]; then
        kill "$SIM_PID" 2>/dev/null || true
        wait "$SIM_PID" 2>/dev/null || true
    fi
    SIM_PID=""
}
trap stop_sim EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.readline())['$1'])"; }
sim_cpu() { python3 -c "import os; f=open('/proc/$SIM_PID/stat').read().rsplit(')',1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"; }

# measure NAME COMMAND…: one warm-up run, then three measured runs of COMMAND (a herald send
# printing its summary line) against the running simulator, inbox emptied before each; prints
# a line per run and the medians, and sets HERALD_RATE to the median notifications/s.
measure() {
    local name=$1; shift
    "$@" > /dev/null
    local rates=() cpus=() rsss=() run before after line user sys rss wall cpu
    for run in 1 2 3; do
        curl -sf -X DELETE "http://127.0.0.1:$CONTROL/inbox" >/dev/null
        before=$(sim_cpu)
        line=$(/usr/bin/time -f "%U %S %M %e" -o "$OUT/$name-time-$run.txt" "$@")
        after=$(sim_cpu)
        read -r user sys rss wall < "$OUT/$name-time-$run.txt"
        cpu=$(python3 -c "print(round($user + $sys, 2))")
        echo "run $run: $line cpu_seconds=$cpu peak_rss_kb=$rss wall_seconds=$wall sim_cpu_seconds=$(python3 -c "print(round($after - $before, 2))") inbox=$(curl -sf "http://127.0.0.1:$CONTROL/inbox")"
        rates+=("$(echo "$line" | field per_second)"); cpus+=("$cpu"); rsss+=("$rss")
    done
    HERALD_RATE=$(printf '%s\n' "${rates[@]}" | median)
    echo "median: per_second=$HERALD_RATE cpu_seconds=$(printf '%s\n' "${cpus[@]}" | median) peak_rss_kb=$(printf '%s\n' "${rsss[@]}" | median)"
}

# check_exactly_once COUNT: the simulator's inbox holds COUNT notifications, one per token.
check_exactly_once() {
    local inbox
    inbox=$(curl -sf "http://127.0.0.1:$CONTROL/inbox")
    echo "inbox: $inbox"
    echo "counters: $(curl -sf "http://127.0.0.1:$CONTROL/counters")"
    python3 - "$inbox" "$1" <<'PY'
import json, sys
inbox, count = json.loads(sys.argv[1]), int(sys.argv[2])
ok = inbox["total"] == count and inbox["tokens"] == count and inbox["duplicates"] == 0
print("exactly once:", "yes" if ok else "NO")
sys.exit(0 if ok else 1)
PY
}
