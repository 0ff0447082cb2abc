#!/usr/bin/env bash
# Build a Debian base image from Debian's packages, with no container registry.
#
#   make-base-image.sh [TAG]        (default TAG: labserver/base:bookworm)
#
# The Debian mirror is read at run time from this machine's apt sources (deb822 files under
# /etc/apt/sources.list.d/ or a classic /etc/apt/sources.list); no mirror host is written into the
# repository. Uses mmdebstrap when present (about 25 s), else debootstrap (about 45 s).
# Idempotent: does nothing when TAG already exists. Environment:
#   DOCKER        docker client to use (default /usr/bin/docker, Debian's client)
#   SUITE         Debian suite (default bookworm)
#   MIRROR        override the mirror read from apt sources
#   EXTRA_PACKAGES  extra comma-separated packages
set -euo pipefail

TAG="${1:-labserver/base:bookworm}"
DOCKER="${DOCKER:-/usr/bin/docker}"
SUITE="${SUITE:-bookworm}"
# the tag labserver/backends/docker/images.py uses carries a hash of this list: change it and a new base is built
# (git and patch: labs apply patches, e.g. sanavideo's one-click deployment)
PACKAGES="python3,python3-venv,bash,procps,less,nano,ca-certificates,git,patch${EXTRA_PACKAGES:+,$EXTRA_PACKAGES}"

if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG already present"
  exit 0
fi

find_mirror() {
  local f uri
  shopt -s nullglob
  # deb822 sources: the first URIs: line of a Debian (not -security) entry
  for f in /etc/apt/sources.list.d/*.sources; do
    uri="$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' "$f")"
    if [ -n "$uri" ] && grep -q "debian" <<<"$uri"; then echo "$uri"; return; fi
  done
  # one-line sources
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri="$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) {print $i; exit}}' "$f")"
    if [ -n "$uri" ] && grep -q "debian" <<<"$uri"; then echo "$uri"; return; fi
  done
}

MIRROR="${MIRROR:-$(find_mirror)}"
if [ -z "$MIRROR" ]; then
  echo "error: no Debian mirror found in /etc/apt/sources.list*; set MIRROR=" >&2
  exit 2
fi
echo "mirror: $MIRROR (from apt sources)"

WORK="$(mktemp -d /tmp/labserver-base.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

if command -v mmdebstrap >/dev/null 2>&1; then
  echo "bootstrapping $SUITE with mmdebstrap"
  mmdebstrap --variant=minbase --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    "$SUITE" "$WORK/rootfs.tar" "$MIRROR"
  IMPORT_SRC="$WORK/rootfs.tar"
elif command -v debootstrap >/dev/null 2>&1; then
  echo "bootstrapping $SUITE with debootstrap"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$WORK/root" "$MIRROR"
  rm -rf "$WORK/root/var/cache/apt/archives/"*.deb "$WORK/root/var/lib/apt/lists/"*
  tar -C "$WORK/root" -cf "$WORK/rootfs.tar" .
  IMPORT_SRC="$WORK/rootfs.tar"
else
  echo "error: neither mmdebstrap nor debootstrap is installed (apt-get install -y mmdebstrap)" >&2
  exit 2
fi

echo "importing as $TAG"
"$DOCKER" import -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' "$IMPORT_SRC" "$TAG"
echo "base image $TAG ready"
