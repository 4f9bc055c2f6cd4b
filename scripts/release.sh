#!/usr/bin/env bash
# Builds a release of herald for Linux x86_64: one binary with the Swift runtime linked in
# (--static-swift-stdlib; it needs only the C library, ca-certificates and tzdata), then
#   dist/herald-VERSION-linux-x86_64.tar.gz   the binary, herald.example.yaml with its catalogs,
#                                             herald.service, LICENSE, INSTALL.md
#   dist/herald_VERSION_amd64.deb             /usr/bin/herald, /etc/herald/herald.yaml (conffile),
#                                             herald.service, the herald user, /var/lib/herald
# The commit it is built from is stamped into the binary (`herald --version`); the stamp file is
# put back afterwards. scripts/release-check.sh installs the .deb on a Debian without Swift.
#
#   scripts/release.sh            (NO_BUILD=1 reuses the last release build)
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^ *static let release = "\(.*\)"$/\1/p' Sources/herald/Version.swift)
[ -n "$version" ] || { echo "release: no version in Sources/herald/Version.swift" >&2; exit 1; }
commit=$(git rev-parse --short=12 HEAD)
# "-modified": the sources the binary is built from differ from the commit.
if [ -n "$(git status --porcelain --untracked-files=no -- Sources Package.swift)" ]; then commit="$commit-modified"; fi

work=$(mktemp -d)
stamp=Sources/herald/BuildInfo.swift
cp "$stamp" "$work/BuildInfo.swift"
# Whatever happens, the stamp file is as it was and the scratch directory goes.
trap 'cp "$work/BuildInfo.swift" "$stamp"; rm -rf "$work"' EXIT

if [ -z "${NO_BUILD:-}" ]; then
    sed -i "s/static let commit: String? = nil/static let commit: String? = \"$commit\"/" "$stamp"
    echo "release: building herald $version (commit $commit), release mode, Swift runtime linked in"
    swift build -c release --product herald --static-swift-stdlib
    cp "$work/BuildInfo.swift" "$stamp"
fi
binary="$(swift build -c release --show-bin-path)/herald"
[ -x "$binary" ] || { echo "release: no release binary at $binary" >&2; exit 1; }
if ldd "$binary" | grep -Ei "swift|Foundation|dispatch|BlocksRuntime"; then
    echo "release: the binary links a Swift library dynamically (above)" >&2
    exit 1
fi

rm -rf dist && mkdir -p dist

# The tarball.
name="herald-$version-linux-x86_64"
tree="$work/$name"
mkdir -p "$tree/catalogs"
# Debug sections out (a smaller file), symbols kept (a crash's backtrace still names functions).
strip --strip-debug -o "$tree/herald" "$binary"
cp packaging/examples/herald.example.yaml packaging/herald.service packaging/INSTALL.md LICENSE "$tree/"
cp Examples/*.yaml "$tree/catalogs/"
tar -C "$work" -czf "dist/$name.tar.gz" "$name"

# The Debian package.
root="$work/deb"
install -D -m 0755 "$tree/herald" "$root/usr/bin/herald"
install -D -m 0640 packaging/herald.yaml "$root/etc/herald/herald.yaml"
install -D -m 0644 packaging/herald.service "$root/lib/systemd/system/herald.service"
doc="$root/usr/share/doc/herald"
install -D -m 0644 packaging/INSTALL.md "$doc/INSTALL.md"
install -D -m 0644 LICENSE "$doc/copyright"
install -D -m 0644 docs/configuration.md "$doc/configuration.md"
install -D -m 0644 packaging/examples/herald.example.yaml "$doc/examples/herald.example.yaml"
for catalog in Examples/*.yaml; do install -D -m 0644 "$catalog" "$doc/examples/catalogs/$(basename "$catalog")"; done
install -d "$root/DEBIAN"
install -m 0755 packaging/debian/postinst packaging/debian/prerm packaging/debian/postrm "$root/DEBIAN/"
echo "/etc/herald/herald.yaml" > "$root/DEBIAN/conffiles"
# Depends: the packages of the shared libraries the binary loads (the C library's, the C++
# runtime's), then what it reads at run time.
libraries=$(ldd "$binary" | awk '/=> \// { print $3 }')
depends=$(for library in $libraries; do dpkg -S "$(readlink -f "$library")" 2> /dev/null || dpkg -S "$library"; done |
    cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')
size=$(du -sk "$root" | cut -f1)
cat > "$root/DEBIAN/control" << CONTROL
Package: herald
Version: $version
Architecture: amd64
Maintainer: Herald developers <herald@example.invalid>
Installed-Size: $size
Depends: $depends, ca-certificates, tzdata, passwd
Section: net
Priority: optional
Description: self-hosted push-notification server for APNs and FCM
 Herald registers devices, decides what may be sent to whom and when (preferences,
 quiet hours, pacing) and delivers through Apple's APNs and Google's FCM from a
 durable outbox on SQLite or PostgreSQL. Built from commit $commit.
CONTROL
dpkg-deb --root-owner-group -Zxz --build "$root" "dist/herald_${version}_amd64.deb" > /dev/null

ls -l dist/
echo "release: herald $("$binary" --version); binary $(stat -c %s "$tree/herald") bytes"
