#!/usr/bin/env bash
# Idempotent: MySQL (Debian unstable's mysql-server-core, MySQL 9.7 LTS) for the MySQL sandbox
# (sparkcdc/testing/mysql.py). Debian 12 ships no MySQL, and unstable's needs a newer C library
# than Debian 12 has, so it lives in a minimal Debian unstable root made with debootstrap from
# the Debian mirror this machine's apt already uses; the sandbox runs mysqld chrooted there.
#
#   SPARKCDC_MYSQL_ROOT  where the root goes (default /opt/sparkcdc-mysql)
#
# A second run with the root in place is a no-op. Needs root (debootstrap and chroot do).
set -euo pipefail

ROOT=${SPARKCDC_MYSQL_ROOT:-/opt/sparkcdc-mysql}
STAMP="$ROOT/.sparkcdc-mysql-installed"

if [ -f "$STAMP" ] && [ -x "$ROOT/usr/sbin/mysqld" ]; then
    echo "setup: MySQL already installed in $ROOT ($(cat "$STAMP"))"
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

if ! command -v debootstrap >/dev/null 2>&1; then
    echo "setup: installing debootstrap (for the MySQL root)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap
fi

# The Debian mirror apt uses here: the first archive URI (not the security one) in
# /etc/apt/sources.list or sources.list.d, one-line (.list) or deb822 (.sources) format.
mirror_of() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            /^[[:space:]]*#/ { next }
            /^[[:space:]]*deb[[:space:]]/ {
                for (i = 2; i <= NF; i++) {
                    if ($i ~ /^\[/) { while ($i !~ /\]$/ && i < NF) i++; continue }
                    print $i; break
                }
                next
            }
            /^URIs:/ { for (i = 2; i <= NF; i++) print $i }
        ' "$f"
    done | grep -E '^(https?|file)://' | grep -E '/debian/?$' | head -n 1
}
MIRROR=${SPARKCDC_DEBIAN_MIRROR:-$(mirror_of)}
if [ -z "$MIRROR" ]; then
    echo "setup: no Debian archive found in /etc/apt/sources.list{,.d}; set SPARKCDC_DEBIAN_MIRROR" >&2
    exit 1
fi

PARTIAL="$ROOT.partial"
echo "setup: making a Debian unstable root for MySQL in $ROOT (once, about a minute)"
$SUDO rm -rf "$PARTIAL"
$SUDO mkdir -p "$(dirname "$ROOT")"
$SUDO debootstrap --variant=minbase sid "$PARTIAL" "$MIRROR" >"${TMPDIR:-/tmp}/sparkcdc-debootstrap.log" 2>&1 || {
    echo "setup: debootstrap failed; its log:" >&2
    tail -n 30 "${TMPDIR:-/tmp}/sparkcdc-debootstrap.log" >&2
    exit 1
}
# no service starts inside the root; mysqld is started by the sandbox alone
printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$PARTIAL/usr/sbin/policy-rc.d" >/dev/null
$SUDO chmod 755 "$PARTIAL/usr/sbin/policy-rc.d"
# a mirror that is a dated copy of the archive serves a Release file past its Valid-Until:
# the signatures are still checked, only the date is not
APT=(apt-get -o Acquire::Check-Valid-Until=false)
$SUDO chroot "$PARTIAL" "${APT[@]}" update -qq
$SUDO chroot "$PARTIAL" env DEBIAN_FRONTEND=noninteractive \
    "${APT[@]}" install -y -qq --no-install-recommends mysql-server-core mysql-client-core tzdata \
    >"${TMPDIR:-/tmp}/sparkcdc-mysql-apt.log" 2>&1 || {
    echo "setup: installing MySQL in the root failed; apt's log:" >&2
    tail -n 30 "${TMPDIR:-/tmp}/sparkcdc-mysql-apt.log" >&2
    exit 1
}
$SUDO chroot "$PARTIAL" apt-get clean
$SUDO mkdir -p "$PARTIAL/tmp" && $SUDO chmod 1777 "$PARTIAL/tmp"
VERSION=$($SUDO chroot "$PARTIAL" /usr/sbin/mysqld --version)
$SUDO rm -rf "$ROOT"
$SUDO mv "$PARTIAL" "$ROOT"
echo "$VERSION" | $SUDO tee "$STAMP" >/dev/null
echo "setup: $VERSION in $ROOT"
