#!/usr/bin/env bash
# `make test-k8s` (and scripts/tests.d/k8s.sh under `make test`): everything
# the Kubernetes suite needs, installed or built here and cached under
# $SHARDHOUSE_CACHE, then the suite.
#   1. scripts/k8s/deps.sh: Debian packages (containerd, runc, buildah, CNI
#      plugins, busybox-static, iptables, conntrack, socat, etcd-server,
#      libpython3.11); kubelet, kube-scheduler, kube-proxy and CoreDNS from
#      the Go module proxy (kube-apiserver, kube-controller-manager and helm
#      come from scripts/deps.d/kube.sh, run by scripts/install-deps.sh).
#   2. scripts/images.sh: the operator, router, node and etcd images from
#      the release binaries (rebuilt only when an input changed), then
#      --check: they agree with docker/*.Dockerfile and the node image
#      serves from its own files.
#   3. scripts/k8s/run.sh scripts/k8s/scenarios.sh: the cluster in its own
#      network namespace, the scenarios, teardown. Last line:
#      k8s_scenarios=<N> failed_writes=<N> acked_points_lost=<N>
# Cold (nothing cached): ~10 min of Go builds + ~1 min apt + ~0.5 min images
# + ~5 min cluster and scenarios; warm: ~6 min.
set -euo pipefail
cd "$(dirname "$0")/../.."
t0=$SECONDS
scripts/k8s/deps.sh
scripts/images.sh
scripts/images.sh --check
echo "[k8s] deps and images ready in $((SECONDS - t0)) s" >&2
scripts/k8s/run.sh scripts/k8s/scenarios.sh
echo "[k8s] suite took $((SECONDS - t0)) s" >&2
