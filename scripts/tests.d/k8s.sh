#!/usr/bin/env bash
# `make test` suite: Shardhouse on a real single-machine Kubernetes
# (scripts/k8s/test.sh; docs/operator.md, "A real cluster"): installs what it
# needs (cached under ~/.cache/shardhouse), builds the images and checks them
# against docker/*.Dockerfile, then helm install, ingest, scale out/in,
# rolling upgrade and pod delete while writing, a ShardhouseBackup to a real
# S3 server and a ShardhouseRestore into a new cluster, the cluster's deletion,
# in a network namespace of its own that it tears down. Needs root.
# Last line: k8s_scenarios=<N> failed_writes=<N> acked_points_lost=<N>
# Cost (2 cores, release binaries already built by make test): ~5.5 min with
# deps cached, ~16 min cold (kubelet, kube-scheduler, kube-proxy and CoreDNS
# Go builds ~10 min, apt ~1 min, images ~30 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec scripts/k8s/test.sh
