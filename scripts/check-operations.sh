#!/usr/bin/env bash
# Checks docs/operations/: the alert rules load (`promtool check rules`) and fire as their tests
# say (`promtool test rules`); every Grafana panel's query is valid PromQL (each is loaded as a
# recording rule, the dashboard's variables given values); and every herald_* metric the rules
# and the dashboard name is one Herald exports (its name is in Sources/). promtool comes from
# Debian's prometheus package (installed when missing, without its recommends).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v promtool > /dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus > /dev/null
fi
dir=docs/operations
promtool check rules "$dir/herald.rules.yml"
(cd "$dir" && promtool test rules herald.rules.test.yml)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 - "$dir/grafana-dashboard.json" > "$work/panels.rules.yml" <<'PY'
import json, sys
dashboard = json.load(open(sys.argv[1]))
print("groups:\n  - name: grafana-panels\n    rules:")
n = 0
for panel in dashboard["panels"]:
    for target in panel.get("targets", []):
        expr = (target["expr"].replace("$__rate_interval", "5m").replace("$__range", "1h")
                .replace("$instance", ".*"))
        n += 1
        print("      - record: panel_%d\n        expr: %s" % (n, json.dumps(expr)))
PY
promtool check rules "$work/panels.rules.yml"

missing=0
while read -r name; do
    if ! grep -rqF "\"$name\"" Sources; then
        echo "check-operations: $name is not a metric Herald exports" >&2
        missing=1
    fi
done < <(grep -ohE 'herald_[a-z_]+' "$dir/herald.rules.yml" "$dir/grafana-dashboard.json" \
    | sed -E 's/_(bucket|sum|count)$//' | sort -u)
[ "$missing" = 0 ]
echo "check-operations: rules, their tests, the dashboard's queries and metric names: ok"
