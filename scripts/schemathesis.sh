#!/usr/bin/env bash
# Fuzzes a live `herald serve` with schemathesis (PyPI) from its own /openapi.yaml. Used by CI;
# run it by hand the same way:
#
#   scripts/schemathesis.sh [path-to-herald-binary]
#
# Three runs, each failing on any finding:
#   1. admin key against `herald serve --dev`: no 5xx answer (not_a_server_error);
#   2. the app's server key against a configured server with client_registration verified:
#      no 5xx, every status documented, every body as the document says
#      (status_code_conformance, response_schema_conformance);
#   3. the app's client key with a user token (X-Herald-User-Token from `herald token`): the same.
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${1:-.build/debug/herald}
PORT=${HERALD_SCHEMATHESIS_PORT:-18090}
EXAMPLES=${HERALD_SCHEMATHESIS_EXAMPLES:-60}
WORK=$(mktemp -d)
ADMIN="schemathesis-admin-key-0123456789"
SERVER_KEY="schemathesis-server-key-0123456789"
CLIENT_KEY="schemathesis-client-key-0123456789"
SECRET="schemathesis-user-token-secret-0123456789abcdef"
python3 -c "import schemathesis" 2>/dev/null || pip install -q schemathesis
PID=
stop() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=; fi; }
trap stop EXIT
wait_up() {
    for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0; sleep 0.1; done
    cat "$WORK/serve.err" >&2
    exit 1
}
run() {
    schemathesis --config-file scripts/schemathesis.toml run "http://127.0.0.1:$PORT/openapi.yaml" \
        --max-examples "$EXAMPLES" --generation-deterministic "$@"
}

echo "== schemathesis 1/3: admin key, --dev: no 5xx"
# --dev ignores HERALD_ADMIN_KEY: its admin key is the one it wrote to its keys.json.
HERALD_LOG_LEVEL=warning "$HERALD" serve --dev --port "$PORT" --dev-dir "$WORK/dev" \
    > "$WORK/serve.out" 2> "$WORK/serve.err" &
PID=$!
wait_up
DEV_ADMIN=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["admin"])' "$WORK/dev/keys.json")
run --checks not_a_server_error --header "Authorization: Bearer $DEV_ADMIN"
kill -0 "$PID" || { echo "server died" >&2; exit 1; }
stop

cat > "$WORK/herald.yaml" <<YAML
server: { host: 127.0.0.1, port: $PORT }
database: { url: "sqlite://$WORK/conformance.sqlite" }
admin_key: "$ADMIN"
apps:
  - id: demo
    keys: { server: "$SERVER_KEY", client: "$CLIENT_KEY" }
    user_token_secret: "$SECRET"
    catalog: "$(pwd)/Examples/syncwell.yaml"
YAML
HERALD_LOG_LEVEL=warning "$HERALD" serve --config "$WORK/herald.yaml" > "$WORK/serve.out" 2> "$WORK/serve.err" &
PID=$!
wait_up
CONFORMANCE=not_a_server_error,status_code_conformance,response_schema_conformance

echo "== schemathesis 2/3: server key: no 5xx, documented statuses and bodies"
run --checks "$CONFORMANCE" --header "Authorization: Bearer $SERVER_KEY"

echo "== schemathesis 3/3: client key + user token: no 5xx, documented statuses and bodies"
USER_TOKEN=$("$HERALD" token --app demo --user alice --ttl 1h --config "$WORK/herald.yaml")
run --checks "$CONFORMANCE" --header "Authorization: Bearer $CLIENT_KEY" --header "X-Herald-User-Token: $USER_TOKEN"

kill -0 "$PID" || { echo "server died" >&2; exit 1; }
echo "schemathesis: no findings"
