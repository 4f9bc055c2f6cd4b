#!/usr/bin/env bash
# `herald migrate` of a large SQLite store into PostgreSQL (release build):
#
#   scripts/migrate-load.sh [DEVICES]    # default 1,000,000 devices (3 per user) imported into a
#                                        # SQLite store, the server stopped; then a PostgreSQL
#                                        # server of the script's own (Debian's postgresql
#                                        # package) and `herald migrate --verify` into it: its
#                                        # seconds, rows/s, CPU and peak RSS, and the verification
#
# HERALD_BIN=/path uses that binary (NO_BUILD=1 skips the build). BATCH=N sets --batch-size.
# Logs stay in bench-out/migrate/.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${1:-1000000}
. scripts/bench-lib.sh
bench_setup migrate
PORT=18581
SERVER="server-key-0123456789abcdef"
cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "sqlite://$WORK/herald.sqlite" }
apps:
  - id: load
    keys: { server: "$SERVER" }
YAML
HERALD_LOG_LEVEL=warning "$HERALD" serve --config "$WORK/herald.yaml" > "$WORK/serve.out" 2> "$WORK/serve.err" &
SERVE_PID=$!
PIDS+=("$SERVE_PID")
wait_for "http://127.0.0.1:$PORT/healthz"

echo "== import $COUNT devices into SQLite"
python3 - "$COUNT" > "$WORK/devices.jsonl" <<'PY'
import secrets, sys
count = int(sys.argv[1])
for i in range(count):
    sys.stdout.write('{"device_id":"d%d","user_id":"u%d","token":"%s","environment":"sandbox","locale":"en","time_zone":"Europe/Paris","authorization_status":"authorized","app_version":"2.%d"}\n'
                     % (i, i // 3, secrets.token_hex(32), i % 3))
PY
imported=$(curl -sf -X POST "http://127.0.0.1:$PORT/v1/apps/load/devices/import" -H "Authorization: Bearer $SERVER" \
    -H "Content-Type: application/x-ndjson" --data-binary @"$WORK/devices.jsonl" | json 'd["imported"]')
echo "imported $imported"
kill -TERM "$SERVE_PID"
wait "$SERVE_PID" 2> /dev/null || true
echo "SQLite store: $(du -m "$WORK/herald.sqlite" | cut -f1) MB"

start_postgres 18592
echo "== herald migrate --verify"
/usr/bin/time -f "%e %U %S %M" -o "$WORK/migrate.time" \
    "$HERALD" migrate --from "sqlite://$WORK/herald.sqlite" --to "$PG_URL" --verify --batch-size "${BATCH:-1000}" \
    > "$WORK/migrate.json" 2> "$WORK/migrate.err"
read -r wall user sys rss < "$WORK/migrate.time"
tail -3 "$WORK/migrate.err"
python3 - "$WORK/migrate.json" "$wall" "$user" "$sys" "$rss" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
wall, user, system, rss = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print("migrated %d rows (%d devices) in %.1f s, copy and verify: %.0f rows/s; herald CPU %.1f s; peak RSS %.1f MB; verified: %s"
      % (summary["rows"], summary["tables"]["devices"], wall, summary["rows"] / wall, user + system, rss / 1024, summary.get("verified")))
sys.exit(0 if summary.get("verified") else 1)
PY
