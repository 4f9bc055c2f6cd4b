#!/usr/bin/env bash
# The Web Push example (Examples/web) in headless Chromium (Debian's chromium + chromium-driver,
# Selenium from PyPI) against a live `herald serve` + `herald sim`. Used by CI; by hand:
#
#   scripts/web-example-browser.sh [path-to-herald-binary]
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${1:-.build/debug/herald}
[ -x "$HERALD" ] || { echo "web-example-browser: no Herald binary at $HERALD (swift build first)" >&2; exit 1; }
if ! command -v chromium > /dev/null || ! command -v chromedriver > /dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver > /dev/null
fi
python3 -c "import selenium, websocket" 2>/dev/null || pip install -q "selenium==4.51.0" "websocket-client==1.9.2"
exec python3 scripts/web-example-browser.py "$HERALD"
