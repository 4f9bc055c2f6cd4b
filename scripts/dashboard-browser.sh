#!/usr/bin/env bash
# The dashboard driven in headless Chromium (Debian's chromium + chromium-driver,
# Selenium from PyPI) against a live `herald serve` + `herald sim`. Used by CI; by hand:
#
#   scripts/dashboard-browser.sh [path-to-herald-binary] [--screenshots docs/images]
#
# --screenshots refreshes the PNGs README shows (1440 and 375 px wide, one dark).
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${1:-.build/debug/herald}
shift || true
[ -x "$HERALD" ] || { echo "dashboard-browser: no Herald binary at $HERALD (swift build first)" >&2; exit 1; }
if ! command -v chromium > /dev/null || ! command -v chromedriver > /dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver > /dev/null
fi
python3 -c "import selenium" 2>/dev/null || pip install -q "selenium==4.51.0"
exec python3 scripts/dashboard-browser.py "$HERALD" "$@"
