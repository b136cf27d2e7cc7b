#!/usr/bin/env bash
# Restarts node K of the cluster `make run` is running (after it died or was
# killed), on the same data directory and ports; it catches up from its
# WAL and its peers. Usage: scripts/restart-node.sh K
# (SHARDHOUSE_DATA as for make run, default ./.data/local).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

K=${1:?usage: scripts/restart-node.sh K (the node number, 1..NODES)}
DATA=${SHARDHOUSE_DATA:-./.data/local}
[ -f "$DATA/cluster.env" ] || sh_die "no cluster in $DATA (start one with make run)"
# shellcheck disable=SC1091
source "$DATA/cluster.env"
((K >= 1 && K <= CREATED_NODES)) || sh_die "node $K is not in this cluster (1..$CREATED_NODES)"
SH_FIXED_PORTS=1 sh_cluster_init "$DATA" "$CREATED_NODES"
sh_cluster_credential
sh_alive "node-$K" && sh_die "node-$K is running (pid $(sh_pid_of "node-$K"))"
sh_alive etcd || sh_die "etcd of this cluster is not running; restart the whole cluster with make run"
sh_start_node "$K"
sh_wait_node "$K"
