#!/usr/bin/env bash
# Everything the Docker tests need on a fresh Debian 12 machine (root), for .ci/run:
#   bash provisioning/images/ci-setup.sh [PYTHON]
# - apt: docker.io (engine, Debian's client at /usr/bin/docker), mmdebstrap (base images),
#   docker-compose (tests/backends/docker/test_compose.py), iproute2 (the second engine's bridge)
# - starts dockerd in the background unless an engine already answers
# - builds the lab image and the compose service images (cached by content hash: a no-op when
#   nothing changed, about 0.1 s each)
set -euo pipefail
PY="${1:-.venv/bin/python}"
DOCKER=/usr/bin/docker

need=()
for pkg in docker.io mmdebstrap docker-compose iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! "$DOCKER" info >/dev/null 2>&1; then
  nohup dockerd > /tmp/dockerd.log 2>&1 &
  for _ in $(seq 1 120); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 0.5
  done
  "$DOCKER" info >/dev/null 2>&1 || { echo "dockerd did not start; see /tmp/dockerd.log" >&2; exit 1; }
fi

start=$(date +%s)
"$PY" -m labserver.cli images build
"$PY" -m labserver.cli images build-services
echo "docker images ready in $(( $(date +%s) - start )) s"
