#!/usr/bin/env bash
# Fuzzes a live `herald serve --dev` with schemathesis (PyPI) from its own /openapi.yaml and fails
# on any 5xx answer (check `not_a_server_error`). Used by CI; run it by hand the same way:
#
#   scripts/schemathesis.sh [path-to-herald-binary]
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${1:-.build/debug/herald}
PORT=${HERALD_SCHEMATHESIS_PORT:-18090}
WORK=$(mktemp -d)
ADMIN="schemathesis-admin-key-0123456789"
python3 -c "import schemathesis" 2>/dev/null || pip install -q schemathesis
HERALD_ADMIN_KEY="$ADMIN" HERALD_LOG_LEVEL=warning "$HERALD" serve --dev --port "$PORT" --dev-dir "$WORK/dev" \
    > "$WORK/serve.out" 2> "$WORK/serve.err" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { cat "$WORK/serve.err" >&2; exit 1; }
schemathesis --config-file scripts/schemathesis.toml run "http://127.0.0.1:$PORT/openapi.yaml" \
    --checks not_a_server_error \
    --header "Authorization: Bearer $ADMIN" \
    --max-examples "${HERALD_SCHEMATHESIS_EXAMPLES:-60}" \
    --generation-deterministic
echo "schemathesis: no 5xx answers"
if kill -0 $PID 2>/dev/null; then echo "server still up after the run"; else echo "server died" >&2; exit 1; fi
