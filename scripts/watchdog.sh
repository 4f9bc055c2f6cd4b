#!/usr/bin/env bash
# Runs a test command with a time limit, its output shown and kept in LOG. Past the limit it
# says which tests started and never finished (swift-testing's "◇ Test … started" lines without
# a matching end), prints every thread's stack of the test process (gdb, when installed), kills
# the command and exits 124: a hang fails CI in minutes with its cause on the page, instead of
# running into CI's own limit with nothing said.
#
#   scripts/watchdog.sh SECONDS LOG command [arguments…]
set -uo pipefail

if [ $# -lt 3 ]; then
    echo "usage: $0 SECONDS LOG command [arguments…]" >&2
    exit 2
fi
limit=$1
log=$2
shift 2

# The command and its tee in a process group of their own, so that killing it takes the
# children (the test process swift test starts) with it; the group's status is the command's,
# and the log is complete once it ends.
set -m
(
    set -o pipefail
    "$@" 2>&1 | tee "$log"
) &
pid=$!
set +m

waited=0
while kill -0 "$pid" 2> /dev/null; do
    if [ "$waited" -ge "$limit" ]; then
        echo "watchdog: still running after ${limit} s: $*" >&2
        echo "watchdog: tests started and not finished:" >&2
        python3 - "$log" >&2 << 'EOF'
import re, sys
started, ended = [], set()
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r'^\S+ Test "(.*)" (started|passed|failed|skipped|recorded)', line)
    if not m:
        continue
    if m.group(2) == "started":
        started.append(m.group(1))
    elif m.group(2) != "recorded":
        ended.add(m.group(1))
for name in started:
    if name not in ended:
        print("  - " + name)
EOF
        for child in $(pgrep -g "$pid" 2> /dev/null); do
            case "$(cat "/proc/$child/comm" 2> /dev/null)" in
            *xctest* | *PackageTests* | *swift-testing*)
                if command -v gdb > /dev/null; then
                    echo "watchdog: threads of process $child:" >&2
                    gdb -p "$child" -batch -ex "thread apply all bt 25" 2>&1 | grep -E "^(Thread|#)" | head -400 >&2
                fi
                ;;
            esac
        done
        kill -KILL -- "-$pid" 2> /dev/null
        wait "$pid" 2> /dev/null
        exit 124
    fi
    sleep 5
    waited=$((waited + 5))
done
wait "$pid"
