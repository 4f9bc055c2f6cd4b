#!/usr/bin/env bash
# OpenTelemetry traces end to end: a live `herald serve` with `telemetry` exports to an OTLP/HTTP
# receiver that decodes spans with PyPI's opentelemetry-proto (installed, pinned, when missing).
# Used by CI; by hand:
#
#   scripts/trace-check.sh [path-to-herald-binary]
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${1:-.build/debug/herald}
[ -x "$HERALD" ] || { echo "trace-check: no Herald binary at $HERALD (swift build first)" >&2; exit 1; }
python3 -c "import opentelemetry.proto" 2>/dev/null || pip install -q "opentelemetry-proto==1.39.0"
exec python3 scripts/trace-check.py "$HERALD"
