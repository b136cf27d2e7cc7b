#!/usr/bin/env bash
# The Dockerfile-agreement check alone (scripts/k8s/test.sh runs the same
# first, so `make test-k8s` and `make test` include it): `make images` and
# docker/*.Dockerfile agree. Builds the images when their inputs changed
# (cached otherwise), then checks every archive against its Dockerfile's
# final stage: ENTRYPOINT, CMD, USER, EXPOSE, ENV, VOLUME, WORKDIR, the files
# it copies in, the user in /etc/passwd, the volume's owner, and that the
# entrypoint runs inside the image's own root filesystem as that user.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/k8s/deps.sh apt
scripts/images.sh
scripts/images.sh --check
echo "[images] ok: operator, router, node and etcd images match docker/*.Dockerfile"
