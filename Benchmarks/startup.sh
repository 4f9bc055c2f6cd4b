#!/usr/bin/env bash
# A release binary's size and start-up time: from exec of `herald serve` (a fresh SQLite
# file, one app, no catalog) to the first 200 from /livez, five runs, min / median / max.
#
#   Benchmarks/startup.sh [HERALD_BINARY]      (default: the binary in dist's tarball)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
binary=${1:-}
if [ -z "$binary" ]; then
    tarball=$(find dist -maxdepth 1 -name 'herald-*-linux-x86_64.tar.gz' 2> /dev/null | head -1)
    [ -n "$tarball" ] || { echo "startup: no tarball in dist/ (scripts/release.sh first)" >&2; exit 1; }
    tar -C "$work" -xzf "$tarball"
    binary=$(find "$work" -name herald -type f | head -1)
fi
[ -x "$binary" ] || { echo "startup: no binary at $binary" >&2; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$work/herald.yaml" << YAML
server: { host: 127.0.0.1, port: $port }
database: { url: "sqlite://$work/herald.sqlite" }
apps:
  - id: demo
    keys: { server: "startup-server-key-0123456789" }
YAML
times=()
for _ in 1 2 3 4 5; do
    rm -rf "$work"/herald.sqlite*
    start=$(date +%s%N)
    HERALD_LOG_LEVEL=error "$binary" serve --config "$work/herald.yaml" > /dev/null 2>&1 &
    pid=$!
    until curl -sf -o /dev/null "http://127.0.0.1:$port/livez"; do
        kill -0 "$pid" 2> /dev/null || { echo "startup: herald exited" >&2; exit 1; }
        sleep 0.005
    done
    times+=($((($(date +%s%N) - start) / 1000000)))
    kill -TERM "$pid"
    wait "$pid" || true
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n | paste -sd' ')
read -r -a ms <<< "$sorted"
echo "binary: $(basename "$binary") ($("$binary" --version)), $(stat -c %s "$binary") bytes ($(($(stat -c %s "$binary") / 1048576)) MiB)"
echo "start-up to the first /livez 200, fresh SQLite file: min ${ms[0]} ms, median ${ms[2]} ms, max ${ms[4]} ms"
