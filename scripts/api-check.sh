#!/usr/bin/env bash
# The public API of the modules apps link (HeraldKit, HeraldKitTesting, HeraldPayload)
# is checked in as text under docs/api/; a change that was not meant fails CI with the diff.
#   scripts/api-check.sh            # compare with docs/api/ (after `swift build`)
#   scripts/api-check.sh --update   # write docs/api/ from the build (commit it with the change)
# The summaries are Linux's (Foundation types print as FoundationEssentials.* here).
set -euo pipefail
cd "$(dirname "$0")/.."
MODULES=(HeraldKit HeraldKitTesting HeraldPayload)
BUILD=$(swift build --show-bin-path)
mkdir -p docs/api
status=0
for module in "${MODULES[@]}"; do
    dump=$(mktemp)
    swift-api-digester -dump-sdk -module "$module" -I "$BUILD/Modules" -o "$dump" 2> /dev/null
    summary=$(mktemp)
    python3 scripts/api-summary.py "$dump" > "$summary"
    if [ "${1:-}" = --update ]; then
        cp "$summary" "docs/api/$module.txt"
        echo "api: docs/api/$module.txt written ($(wc -l < "$summary") lines)"
    elif ! diff -u "docs/api/$module.txt" "$summary"; then
        echo "api: the public API of $module changed (above). If that is meant, run scripts/api-check.sh --update and commit docs/api/$module.txt" >&2
        status=1
    fi
    rm -f "$dump" "$summary"
done
[ "$status" = 0 ] && [ "${1:-}" != --update ] && echo "api: ${MODULES[*]} unchanged"
exit $status
