#!/usr/bin/env bash
# The example services in Examples/ build without warnings and pass their tests
# against a live `herald serve` + `herald sim` (the Herald binary: HERALD_BIN, default the
# checkout's debug build, which `swift build` makes).
set -euo pipefail
cd "$(dirname "$0")/.."
export HERALD_BIN="${HERALD_BIN:-$(pwd)/.build/debug/herald}"
[ -x "$HERALD_BIN" ] || { echo "examples: no Herald binary at $HERALD_BIN (swift build first)" >&2; exit 1; }
for manifest in Examples/*/Package.swift; do
    example=$(dirname "$manifest")
    echo "== $example"
    swift build --package-path "$example" --build-tests 2>&1 | tee /tmp/herald-example-build.log
    if grep -E "^$(pwd)/$example/(Sources|Tests)/.*warning:" /tmp/herald-example-build.log; then
        echo "examples: compiler warnings in $example (above)" >&2
        exit 1
    fi
    swift test --package-path "$example" --skip-build 2>&1 | tee /tmp/herald-example-test.log
    grep -Eq "Test run with [0-9]+ tests? .*passed" /tmp/herald-example-test.log
done
