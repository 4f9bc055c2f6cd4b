#!/usr/bin/env bash
# Checks the release on a Debian without Swift: makes a minimal Debian bookworm root
# (debootstrap --variant=minbase, from Debian's packages), installs the package's declared
# dependencies and then dist/herald_*.deb with dpkg -i, and in a chroot runs `herald sim` and
# `herald serve` with the packaged example configuration: a device registered, a typed
# notification delivered to the simulator's inbox, a quiet-hours type deferred in a named time
# zone (tzdata is there), `herald --version` naming the commit, no Swift library loaded, and
# `systemd-analyze verify` clean on the unit. Needs root (chroot, mounts); installs debootstrap.
#
#   scripts/release.sh && scripts/release-check.sh
#   HERALD_RELEASE_ROOT=DIR   where the root is made (default: a fresh temporary directory;
#                             an existing root there is reused, its herald purged first)
set -euo pipefail
cd "$(dirname "$0")/.."

deb=$(find dist -maxdepth 1 -name 'herald_*_amd64.deb' 2> /dev/null | head -1)
[ -n "$deb" ] || { echo "release-check: no dist/herald_*_amd64.deb (run scripts/release.sh)" >&2; exit 1; }
version=$(dpkg-deb -f "$deb" Version)
mirror=${HERALD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if ! command -v debootstrap > /dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null
fi

root=${HERALD_RELEASE_ROOT:-$(mktemp -d /tmp/herald-release-root.XXXXXX)}
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2> /dev/null || true; done
    sleep 1
    for mount in "$root/proc" "$root/dev"; do
        if mountpoint -q "$mount"; then umount -l "$mount" || true; fi
    done
}
trap cleanup EXIT
fail() {
    echo "release-check: FAILED: $*" >&2
    for log in "$root"/root/try/*.log; do
        [ -f "$log" ] && { echo "--- $log (last lines)" >&2; tail -20 "$log" >&2; }
    done
    exit 1
}
step() { echo "release-check: $*"; }

if [ ! -x "$root/usr/bin/dpkg" ]; then
    step "making a minimal Debian bookworm root in $root"
    debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1 ||
        { tail -20 "$root.debootstrap.log" >&2; fail "debootstrap"; }
fi
mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"
mountpoint -q "$root/dev" || mount --bind /dev "$root/dev"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}

if in_root sh -c 'ls /usr/lib/swift /usr/lib/x86_64-linux-gnu/libswiftCore.so 2> /dev/null' | grep -q .; then
    fail "the root has a Swift runtime: the check would prove nothing"
fi
in_root dpkg -s herald > /dev/null 2>&1 && in_root dpkg --purge herald > /dev/null

# The package's declared dependencies from Debian, then the package itself with dpkg -i.
depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/(.*)//; s/|.*//; s/ //g' | grep . | paste -sd' ')
step "installing its dependencies ($depends) and $(basename "$deb")"
in_root apt-get update -qq > /dev/null
# shellcheck disable=SC2086
in_root apt-get install -y -qq --no-install-recommends $depends > /dev/null
cp "$deb" "$root/tmp/herald.deb"
in_root dpkg -i /tmp/herald.deb
in_root test -x /usr/bin/herald || fail "/usr/bin/herald missing"
[ "$(stat -c %a "$root/etc/herald/herald.yaml")" = 640 ] || fail "/etc/herald/herald.yaml is not mode 0640"
in_root getent passwd herald > /dev/null || fail "no herald user"
[ "$(in_root stat -c %U /var/lib/herald)" = herald ] || fail "/var/lib/herald is not the herald user's"
grep -q '^HERALD_ADMIN_KEY=[0-9a-f]\{64\}$' "$root/etc/herald/herald.env" || fail "no admin key made"

step "herald config check on the packaged configuration"
in_root herald config check --config /etc/herald/herald.yaml || fail "the packaged herald.yaml does not pass its check"

step "herald --version"
reported=$(in_root herald --version)
echo "  $reported"
case "$reported" in "$version (commit "*) ;; *) fail "--version says '$reported'" ;; esac
if ldd "$root/usr/bin/herald" | grep -Ei "swift|Foundation|dispatch|BlocksRuntime"; then
    fail "the binary loads a Swift library"
fi
ldd "$root/usr/bin/herald" | sed 's/^/  /'

# Free ports for the simulator, its control API and the server (the root shares the network).
read -r sim control api < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
in_root sh -c "rm -rf /root/try && cp -r /usr/share/doc/herald/examples /root/try"
sed -i "s#https://127.0.0.1:8443#https://127.0.0.1:$sim#" "$root/root/try/herald.example.yaml"

step "herald sim (:$sim, control :$control) and herald serve (:$api) in the root"
chroot "$root" /bin/sh -c "cd /root/try && exec herald sim --port $sim --control-port $control" \
    > "$root/root/try/sim.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
    [ -f "$root/root/try/.herald-sim/sim-ca.pem" ] && curl -sf "http://127.0.0.1:$control/counters" > /dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$control/counters" > /dev/null || fail "herald sim did not start"
chroot "$root" /bin/sh -c "cd /root/try && exec herald serve --config herald.example.yaml --port $api" \
    > "$root/root/try/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
    curl -sf "http://127.0.0.1:$api/healthz" > /dev/null && break
    sleep 0.2
done
curl -sf "http://127.0.0.1:$api/healthz" > /dev/null || fail "herald serve did not answer /healthz"

# A named zone where it is now between 23:00 and 08:00: inside SyncWell's quiet hours (22–09).
zone=$(python3 -c '
import datetime, zoneinfo
for name in ["Pacific/Pago_Pago", "Pacific/Honolulu", "America/Anchorage", "America/Los_Angeles",
             "America/Denver", "America/Chicago", "America/New_York", "America/Sao_Paulo",
             "Atlantic/South_Georgia", "Atlantic/Azores", "Europe/London", "Europe/Paris",
             "Europe/Athens", "Europe/Moscow", "Asia/Dubai", "Asia/Karachi", "Asia/Dhaka",
             "Asia/Bangkok", "Asia/Shanghai", "Asia/Tokyo", "Australia/Brisbane", "Pacific/Noumea",
             "Pacific/Auckland", "Pacific/Kiritimati"]:
    hour = datetime.datetime.now(zoneinfo.ZoneInfo(name)).hour
    if hour >= 23 or hour < 8:
        print(name)
        break')
[ -n "$zone" ] || fail "no zone in quiet hours (the list covers every hour)"
client="Authorization: Bearer example-client-key-change-me"
server="Authorization: Bearer example-server-key-change-me"
json="Content-Type: application/json"
token=$(printf 'ab%.0s' $(seq 32))
step "a device of user ana in $zone, a sync_error (PN-02, transactional) and a new_provider (PN-03, quiet hours)"
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$api/v1/apps/demo/devices" -H "$client" -H "$json" \
    -d "{\"device_id\":\"phone-1\",\"user_id\":\"ana\",\"platform\":\"apns\",\"environment\":\"sandbox\",\"token\":\"$token\",\"time_zone\":\"$zone\"}")
[ "$status" = 201 ] || fail "device registration answered $status"
status=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$api/v1/apps/demo/users/ana" -H "$server" -H "$json" \
    -d "{\"time_zone\":\"$zone\"}")
[ "$status" = 200 ] || fail "PUT user with time_zone $zone answered $status"
send() {
    curl -sf -X POST "http://127.0.0.1:$api/v1/apps/demo/notifications" -H "$server" -H "$json" -d "$1" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
counts() {
    curl -sf "http://127.0.0.1:$api/v1/apps/demo/notifications/$1" -H "$server" |
        python3 -c 'import json, sys; c = json.load(sys.stdin)["counts"]; print(c["sent"], c["deferred"], c["queued"])'
}
urgent=$(send '{"to":{"user_ids":["ana"]},"type":"PN-02","data":{"Source":"Strava","source_id":"strava"}}') ||
    fail "the PN-02 send was refused"
quiet=$(send '{"to":{"user_ids":["ana"]},"type":"PN-03","data":{"New Provider":"Garmin","provider_id":"garmin"}}') ||
    fail "the PN-03 send was refused"
for _ in $(seq 1 100); do
    [ "$(counts "$urgent")" = "1 0 0" ] && [ "$(counts "$quiet")" = "0 1 0" ] && break
    sleep 0.2
done
[ "$(counts "$urgent")" = "1 0 0" ] || fail "PN-02 not sent (sent deferred queued: $(counts "$urgent"))"
[ "$(counts "$quiet")" = "0 1 0" ] || fail "PN-03 not deferred by quiet hours in $zone ($(counts "$quiet"))"
inbox=$(curl -sf "http://127.0.0.1:$control/inbox/$token")
echo "$inbox" | grep -q "SyncWell Action Required" || fail "the simulator's inbox lacks the PN-02 copy: $inbox"
echo "$inbox" | grep -q "New Integration" && fail "PN-03 reached the device inside quiet hours"
step "delivered: PN-02 in the simulator's inbox; PN-03 deferred in $zone"

step "systemd-analyze verify herald.service"
if ! in_root sh -c 'command -v systemd-analyze' > /dev/null; then
    in_root apt-get install -y -qq --no-install-recommends systemd > /dev/null
fi
in_root systemd-analyze verify /lib/systemd/system/herald.service || fail "systemd-analyze verify"

step "ok: herald $version from $(basename "$deb") on Debian bookworm minbase, no Swift installed"
