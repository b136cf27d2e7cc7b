#!/usr/bin/env bash
# `make run`: a local Shardhouse cluster in the foreground: etcd, NODES nodes
# (RF replicas, SHARDS shards) and one router on loopback. Ctrl-C stops every
# process cleanly. Data lives under SHARDHOUSE_DATA (default ./.data/local);
# a second run reuses it (same ports, same shard map, same points).
#
# Options (environment or make variables):
#   NODES=3 RF=3 SHARDS=12 SHARDHOUSE_DATA=./.data/local
#   SHARDHOUSE_ROUTER_HTTP_PORT=8086 SHARDHOUSE_ROUTER_GRPC_PORT=8087
#   SHARDHOUSE_ETCD_PORT=2379 SHARDHOUSE_LOCAL_NODE_PORT_BASE=7100 (node k: base+2k, base+2k+1)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh

NODES=${NODES:-3}
RF=${RF:-3}
SHARDS=${SHARDS:-12}
DATA=${SHARDHOUSE_DATA:-./.data/local}
((RF <= NODES)) || sh_die "RF=$RF needs at least $RF nodes (NODES=$NODES)"
# Data of an earlier storage layout (no SHARDHOUSE_LAYOUT file beside the
# engine's data) is refused by every node; say so here, once, with the fix
# (docs/storage.md, "Layout versions").
for engine in "$DATA"/node-*/engine; do
  if [ -d "$engine/store" ] && [ ! -f "$engine/SHARDHOUSE_LAYOUT" ]; then
    sh_die "$DATA holds data of storage layout 1 (written before databases); this release stores layout 2 and does not convert it. Remove it (rm -rf $DATA) or set SHARDHOUSE_DATA to another directory."
  fi
done

SH_FIXED_PORTS=1 sh_cluster_init "$DATA" "$NODES"
sh_cluster_credential
sh_check_not_running

stopping=0
shutdown() {
  ((stopping)) && return
  stopping=1
  echo
  sh_log "stopping router, nodes and etcd"
  sh_stop_all
  sh_log "stopped; data kept in $SH_DATA (a second make run reuses it)"
}
trap 'shutdown; exit 0' INT TERM
trap 'shutdown' EXIT

if [ -f "$SH_DATA/cluster.env" ]; then
  # The shard map already lives in etcd; the shape it was created with wins.
  # shellcheck disable=SC1091
  source "$SH_DATA/cluster.env"
  if [ "$CREATED_NODES" != "$NODES" ] || [ "$CREATED_RF" != "$RF" ] || [ "$CREATED_SHARDS" != "$SHARDS" ]; then
    sh_log "note: $SH_DATA was created with NODES=$CREATED_NODES RF=$CREATED_RF SHARDS=$CREATED_SHARDS; reusing that (remove the directory for a new shape)"
    NODES=$CREATED_NODES RF=$CREATED_RF SHARDS=$CREATED_SHARDS
    sh_cluster_init "$SH_DATA" "$NODES"
  fi
else
  printf 'CREATED_NODES=%s\nCREATED_RF=%s\nCREATED_SHARDS=%s\n' "$NODES" "$RF" "$SHARDS" >"$SH_DATA/cluster.env"
fi

sh_log "data: $SH_DATA  binaries: $SH_BIN"
sh_start_etcd
sh_start_nodes "$SHARDS" "$RF"
sh_start_router
sh_wait_writable || sh_die "the cluster started but does not accept writes; see $SH_DATA/logs/"

cat <<EOF

Shardhouse is running: $NODES node(s), RF=$RF, $SHARDS shards.
  write (InfluxDB line protocol): http://$SH_ROUTER_HTTP/write?db=shardhouse   (also /api/v2/write, /api/v1/write/msgpack, /api/v1/prom/write)
  gRPC ingest:                    $SH_ROUTER_GRPC
  read back (SQL):                http://$SH_ROUTER_HTTP/api/v1/sql?db=shardhouse&q=...
  metrics: router http://$SH_ROUTER_HTTP/metrics, nodes http://127.0.0.1:$(sh_node_http_port 1)/metrics ...
  logs: $SH_DATA/logs/   pids: $SH_DATA/pids/

Try it:
  curl -i -XPOST 'http://$SH_ROUTER_HTTP/write?db=shardhouse' --data-binary 'cpu,host=a usage=0.5' && curl -s 'http://$SH_ROUTER_HTTP/api/v1/sql?db=shardhouse' --data-urlencode 'q=SELECT * FROM cpu FINAL' -G

Press Ctrl-C to stop every process.
EOF

# Foreground until Ctrl-C. A node that dies is reported and the others keep
# serving (so a failover can be tried locally); `scripts/restart-node.sh K`
# brings it back on its data dir and ports. Without etcd or the router the
# cluster cannot serve, so their death stops everything, loudly.
declare -A down=()
while true; do
  for ((k = 1; k <= NODES; k++)); do
    name="node-$k"
    if sh_alive "$name"; then
      if [ -n "${down[$name]:-}" ]; then
        unset "down[$name]"
        sh_log "$name is running again"
      fi
    elif [ -z "${down[$name]:-}" ]; then
      down[$name]=1
      sh_log "$name exited unexpectedly; the other nodes keep serving (with RF=$RF a shard keeps taking writes while a majority of its $RF replicas runs). Last lines of $SH_DATA/logs/$name.log:"
      tail -n 20 "$SH_DATA/logs/$name.log" >&2 || true
      sh_log "bring it back with: SHARDHOUSE_DATA=$SH_DATA scripts/restart-node.sh $k"
    fi
  done
  for name in etcd router; do
    if ! sh_alive "$name"; then
      sh_log "$name exited unexpectedly; the cluster cannot serve without it. Last lines of $SH_DATA/logs/$name.log:"
      tail -n 30 "$SH_DATA/logs/$name.log" >&2 || true
      exit 1
    fi
  done
  sleep 1 &
  wait $! || true
done
