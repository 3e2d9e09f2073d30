#!/usr/bin/env bash
# Runs a command in this checkout under CPython VERSION (3.13, 3.14), inside a Debian root built once.
#
#   scripts/pyroot.sh 3.13 make test
#
# Debian 12 ships only 3.11; Debian's own archive has python3.13 in trixie and python3.14 in sid. The
# root is made with debootstrap from the mirror this machine's apt already uses, and kept with its venv
# (torch pinned) under $MINIDYNAMO_CACHE (default ~/.cache/minidynamo), outside the work tree, so later
# runs on the same machine reuse it. The checkout is bind-mounted at its own path (two checkouts can use
# one root at once) and put first on PYTHONPATH; everything mounted is unmounted again, also when the
# command fails or is interrupted.
set -euo pipefail

version=${1:?usage: scripts/pyroot.sh VERSION COMMAND...}
shift
case "$version" in
  3.13) suite=trixie ;;
  3.14) suite=sid ;;
  *) echo "pyroot.sh: no Debian suite known for CPython $version (3.13, 3.14)" >&2; exit 2 ;;
esac

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${MINIDYNAMO_CACHE:-$HOME/.cache/minidynamo}
root=$cache/py$version
torch_pin=${TORCH_PIN:-torch==2.13.0}

mirror() {
  # the URIs line of the machine's own Debian source (never written into the repo)
  local uri
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$uri" ] || { echo "pyroot.sh: no Debian mirror configured on this machine" >&2; exit 1; }
  echo "$uri"
}

build_root() {
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  local tmp=$root.partial
  rm -rf "$tmp"
  mkdir -p "$cache"
  echo "pyroot.sh: building a Debian $suite root with python$version in $root (about 3 minutes)" >&2
  debootstrap --variant=minbase \
    --include="python$version,python$version-venv,python$version-dev,g++,make,git,ca-certificates" \
    "$suite" "$tmp" "$(mirror)" >"$cache/debootstrap-$version.log" 2>&1 \
    || { tail -20 "$cache/debootstrap-$version.log" >&2; exit 1; }
  mv "$tmp" "$root"
}

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap unmount_all EXIT INT TERM

bind() {  # bind SOURCE TARGET_IN_ROOT
  mkdir -p "$root$2"
  mount --rbind "$1" "$root$2"  # recursive: /dev/shm and /dev/pts come along (multiprocessing needs them)
  mounted+=("$root$2")
}

[ -x "$root/usr/bin/python$version" ] || build_root
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
bind /proc /proc
bind /dev /dev
bind "$repo" "$repo"

venv=/opt/venv
if [ ! -f "$root$venv/.torch-stamp" ]; then
  echo "pyroot.sh: installing $torch_pin for python$version in $root$venv (about 2 minutes, 4.7 GB)" >&2
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin LANG=C.UTF-8 /bin/sh -c \
    "python$version -m venv $venv && $venv/bin/pip install -q --no-cache-dir '$torch_pin' numpy && touch $venv/.torch-stamp"
fi

# The command runs as root in the checkout; the venv's python is the one on PATH.
chroot "$root" /usr/bin/env -i HOME=/root PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 \
  CI="${CI:-}" MINIDYNAMO_TEST_REFERENCE="${MINIDYNAMO_TEST_REFERENCE:-}" PYTHONUNBUFFERED=1 \
  PYTHONPATH="$repo" /bin/bash -c 'cd "$0" && exec "$@"' "$repo" "$@"
