# shellcheck shell=bash
# HERALD, WORK, PG_URL and PSQL are set here for the scripts that source this file.
# shellcheck disable=SC2034
# Shared by the load scripts (sourced, not run): release build, work folder, process cleanup,
# waiting for a port, JSON fields, a PostgreSQL server of the script's own.
#   bench_setup NAME   → HERALD (HERALD_BIN, else a release build), WORK (bench-out/NAME, emptied),
#                        PIDS; kills PIDS and stops the
#                        PostgreSQL server at exit
#   start_postgres PORT → initdb + start in $WORK/pg (as the postgres user when root); sets
#                        PG_URL (its postgres database), PSQL and PG_PID (the postmaster)
#   database_cpu       → CPU seconds that server has used so far (0 without one)

bench_setup() {
    [ "${NO_BUILD:-0}" = 1 ] || [ -n "${HERALD_BIN:-}" ] || swift build -c release >&2
    HERALD=${HERALD_BIN:-$PWD/.build/release/herald}
    WORK=$PWD/bench-out/$1
    rm -rf "$WORK"; mkdir -p "$WORK"
    PIDS=()
    PG_STOP=""
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    [ -z "$PG_STOP" ] || eval "$PG_STOP" > /dev/null 2>&1 || true
}

wait_for() { for _ in $(seq 1 300); do curl -sf "$1" >/dev/null && return 0; sleep 0.1; done; echo "no answer from $1" >&2; return 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

start_postgres() {
    local port=$1 bin as=""
    bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
    [ -d "$bin" ] || { echo "PostgreSQL's server binaries not found: apt-get install postgresql" >&2; exit 69; }
    [ "$(id -u)" = 0 ] && as="runuser -u postgres --"
    mkdir -p "$WORK/pg"; [ -z "$as" ] || chown postgres "$WORK/pg"
    $as "$bin/initdb" -D "$WORK/pg/data" -U postgres -A trust -E UTF8 > "$WORK/pg/initdb.log"
    $as "$bin/pg_ctl" -D "$WORK/pg/data" -l "$WORK/pg/server.log" -w \
        -o "-p $port -k $WORK/pg -c listen_addresses=127.0.0.1 -c shared_buffers=512MB -c max_wal_size=4GB ${PG_OPTIONS:-}" start > /dev/null
    PG_STOP="$as $bin/pg_ctl -D $WORK/pg/data -m fast stop"
    PG_PID=$(head -1 "$WORK/pg/data/postmaster.pid")
    PG_URL="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
    PSQL="psql -X -q -t -A -h 127.0.0.1 -p $port -U postgres"
}

# A process's CPU seconds so far (user and system; PID).
proc_cpu() { awk '{print ($14+$15)/100}' "/proc/$1/stat"; }

# The postmaster's CPU, its ended backends' (its children fields) and its live backends'.
database_cpu() {
    [ -n "${PG_PID:-}" ] || { echo 0; return; }
    python3 - "$PG_PID" <<'PY'
import os, sys
pid = sys.argv[1]
def fields(process):
    with open("/proc/%s/stat" % process) as stat:
        return stat.read().rsplit(")", 1)[1].split()
postmaster = fields(pid)
ticks = sum(int(value) for value in postmaster[11:15])  # utime, stime, cutime, cstime
for process in os.listdir("/proc"):
    if not process.isdigit():
        continue
    try:
        process_fields = fields(process)
    except OSError:
        continue
    if process_fields[1] == pid:
        ticks += int(process_fields[11]) + int(process_fields[12])
print("%.1f" % (ticks / os.sysconf("SC_CLK_TCK")))
PY
}
