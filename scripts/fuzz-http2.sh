#!/usr/bin/env bash
# Fuzzes the HTTP/2 frame parser, HPACK decoding and flow control (what a server's bytes reach)
# with libFuzzer for a bounded time, from the seed corpus in Fuzz/corpus/http2. Used by CI; run it
# by hand the same way:
#
#   scripts/fuzz-http2.sh [seconds]        # default 60
#
# A crash leaves its input in .build/fuzz/artifacts/; replay it with a plain build:
#   swift build --product herald-fuzz-http2 && .build/debug/herald-fuzz-http2 <crash-file>
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
SCRATCH=.build/fuzz
swift build --scratch-path "$SCRATCH" --product herald-fuzz-http2 \
    -Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address 2>&1 | tail -3
BIN="$SCRATCH/debug/herald-fuzz-http2"
CORPUS="$SCRATCH/corpus"
mkdir -p "$CORPUS" "$SCRATCH/artifacts"
cp -n Fuzz/corpus/http2/* "$CORPUS/" 2>/dev/null || true
"$BIN" "$CORPUS" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$SCRATCH/artifacts/" -print_final_stats=1 2>&1 | tail -15
echo "fuzz-http2: no crash in ${SECONDS_TO_RUN} s"
