# shellcheck shell=bash
# Helpers to run a local Shardhouse cluster (etcd, nodes, router) on loopback.
# Sourced by run-local.sh, bench-e2e.sh, chaos.sh and tests.d/cluster.sh.
#
# State lives under $SH_DATA:
#   etcd/          etcd data
#   node-<k>/      node data dirs
#   logs/          one log per process (stdout + stderr)
#   pids/<name>.pid  pid of each process; the load generator reads this dir to
#                  sample CPU and RSS per component (--pid-dir)
#   ports.env      ports chosen on first start, reused on every restart so the
#                  addresses registered in etcd and the shard map stay valid
#
# Every process is started in its own session (setsid) so a terminal Ctrl-C
# reaches only the script, which then stops the components in order.

SH_BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
SH_CLUSTER_NAME=${SHARDHOUSE_CLUSTER:-local}
# Nodes load the engine from here (the Makefile exports it; scripts run from
# the repository root when called directly).
export SHARDHOUSE_CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}
SH_READY_TIMEOUT=${SHARDHOUSE_READY_TIMEOUT:-120}
# cgroup v2 root used to tag node sockets for partition tests (chaos.sh).
SH_CGROUP_ROOT=${SH_CGROUP_ROOT:-}

sh_log() { echo "[cluster] $*" >&2; }
sh_die() { echo "[cluster] ERROR: $*" >&2; exit 1; }

# sh_require_bins NAME...: every named binary is built in $SH_BIN, or exit.
sh_require_bins() {
  local b
  for b in "$@"; do
    [ -x "$SH_BIN/$b" ] || sh_die "missing $SH_BIN/$b: run make build"
  done
}

# A free TCP port on 127.0.0.1 (the kernel picks it; we release it at once).
sh_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# sh_cluster_init DATA_DIR NODES
# Creates the layout and chooses ports (kept in ports.env across restarts).
# With SH_FIXED_PORTS=1 (make run) the well-known ports are used:
# etcd 2379/2380, router 8086/8087, node k grpc 7100+2k http 7101+2k.
# The cluster credential nodes require on gRPC and routers present
# (docs/operations.md "Locked doors"): made once per data directory and
# passed to every process through SHARDHOUSE_CLUSTER_TOKEN.
sh_cluster_credential() {
  local f="$SH_DATA/cluster-token"
  if [ ! -s "$f" ]; then
    (umask 077 && od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$f")
  fi
  SHARDHOUSE_CLUSTER_TOKEN=$(cat "$f")
  export SHARDHOUSE_CLUSTER_TOKEN
}

sh_cluster_init() {
  SH_DATA=$1
  SH_NODES=$2
  mkdir -p "$SH_DATA"/{logs,pids}
  SH_DATA=$(cd "$SH_DATA" && pwd)
  local ports="$SH_DATA/ports.env"
  if [ ! -f "$ports" ]; then
    {
      if [ "${SH_FIXED_PORTS:-0}" = 1 ]; then
        echo "SH_ETCD_CLIENT_PORT=${SHARDHOUSE_ETCD_PORT:-2379}"
        echo "SH_ETCD_PEER_PORT=${SHARDHOUSE_ETCD_PEER_PORT:-2380}"
        echo "SH_ROUTER_HTTP_PORT=${SHARDHOUSE_ROUTER_HTTP_PORT:-8086}"
        echo "SH_ROUTER_GRPC_PORT=${SHARDHOUSE_ROUTER_GRPC_PORT:-8087}"
      else
        echo "SH_ETCD_CLIENT_PORT=$(sh_free_port)"
        echo "SH_ETCD_PEER_PORT=$(sh_free_port)"
        echo "SH_ROUTER_HTTP_PORT=$(sh_free_port)"
        echo "SH_ROUTER_GRPC_PORT=$(sh_free_port)"
      fi
    } >"$ports"
  fi
  # shellcheck disable=SC1090
  source "$ports"
  local k
  for ((k = 1; k <= SH_NODES; k++)); do
    if ! grep -q "^SH_NODE_${k}_GRPC_PORT=" "$ports"; then
      if [ "${SH_FIXED_PORTS:-0}" = 1 ]; then
        local base=${SHARDHOUSE_LOCAL_NODE_PORT_BASE:-7100}
        echo "SH_NODE_${k}_GRPC_PORT=$((base + 2 * k))" >>"$ports"
        echo "SH_NODE_${k}_HTTP_PORT=$((base + 2 * k + 1))" >>"$ports"
      else
        echo "SH_NODE_${k}_GRPC_PORT=$(sh_free_port)" >>"$ports"
        echo "SH_NODE_${k}_HTTP_PORT=$(sh_free_port)" >>"$ports"
      fi
    fi
  done
  # shellcheck disable=SC1090
  source "$ports"
  SH_ETCD_ENDPOINT="http://127.0.0.1:$SH_ETCD_CLIENT_PORT"
  SH_ROUTER_HTTP="127.0.0.1:$SH_ROUTER_HTTP_PORT"
  SH_ROUTER_GRPC="127.0.0.1:$SH_ROUTER_GRPC_PORT"
  export SH_DATA SH_NODES SH_ETCD_ENDPOINT SH_ROUTER_HTTP SH_ROUTER_GRPC
}

sh_node_grpc_port() { local v="SH_NODE_${1}_GRPC_PORT"; echo "${!v}"; }
sh_node_http_port() { local v="SH_NODE_${1}_HTTP_PORT"; echo "${!v}"; }

sh_pid_of() { cat "$SH_DATA/pids/$1.pid" 2>/dev/null || true; }
sh_alive() { local p; p=$(sh_pid_of "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# Refuses to start over a cluster that is still running from the same data dir
# (e.g. a previous `make run` whose shell was killed with -9).
sh_check_not_running() {
  local f name
  for f in "$SH_DATA"/pids/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    if sh_alive "$name"; then
      sh_die "$name (pid $(sh_pid_of "$name")) from a previous run is still running on $SH_DATA; stop it (kill $(sh_pid_of "$name")) or use another SHARDHOUSE_DATA"
    fi
    rm -f "$f"
  done
}

# sh_spawn NAME CGROUP CMD...: starts CMD in its own session, stdout+stderr to
# logs/NAME.log (appended, so restarts keep history), pid to pids/NAME.pid.
# CGROUP (may be empty) is a cgroup v2 directory the process joins before exec,
# so every socket it opens can be matched by iptables (partition tests).
sh_spawn() {
  local name=$1 cg=$2
  shift 2
  local log="$SH_DATA/logs/$name.log"
  echo "=== start $(date -u +%FT%TZ): $*" >>"$log"
  # The marker makes READY detection look only at output of this start.
  local mark
  mark=$(wc -l <"$log")
  echo "$mark" >"$SH_DATA/pids/$name.logmark"
  local pidf="$SH_DATA/pids/$name.pid"
  rm -f "$pidf"
  # The wrapper writes its own pid and then execs, so the pid file names the
  # real process whether or not setsid had to fork.
  setsid bash -c 'echo $$ > "$0"; if [ -n "$1" ]; then echo $$ > "$1/cgroup.procs" || exit 97; fi; shift; exec "$@"' \
    "$pidf" "$cg" "$@" >>"$log" 2>&1 </dev/null &
  local i
  for ((i = 0; i < 100; i++)); do
    [ -s "$pidf" ] && return 0
    sleep 0.05
  done
  sh_die "could not start $name (no pid file)"
}

# sh_wait_ready NAME PATTERN: waits until the log of the current start has a
# line matching PATTERN (the READY line) and prints it. Fails early if the
# process exits.
sh_wait_ready() {
  local name=$1 pattern=$2 log="$SH_DATA/logs/$1.log"
  local mark deadline line
  mark=$(cat "$SH_DATA/pids/$name.logmark" 2>/dev/null || echo 0)
  deadline=$((SECONDS + SH_READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    line=$(tail -n +"$((mark + 1))" "$log" | grep -m1 -E "$pattern" || true)
    if [ -n "$line" ]; then
      echo "$line"
      return 0
    fi
    if ! sh_alive "$name"; then
      echo "[cluster] $name exited before it was ready; last lines of $log:" >&2
      tail -n 30 "$log" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "[cluster] $name not ready after ${SH_READY_TIMEOUT}s; last lines of $log:" >&2
  tail -n 30 "$log" >&2
  return 1
}

sh_start_etcd() {
  command -v etcd >/dev/null || sh_die "etcd not found: run scripts/install-deps.sh (apt-get install etcd-server)"
  mkdir -p "$SH_DATA/etcd"
  sh_spawn etcd "" etcd --name shardhouse-local --data-dir "$SH_DATA/etcd" \
    --listen-client-urls "$SH_ETCD_ENDPOINT" --advertise-client-urls "$SH_ETCD_ENDPOINT" \
    --listen-peer-urls "http://127.0.0.1:$SH_ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$SH_ETCD_PEER_PORT" \
    --initial-cluster "shardhouse-local=http://127.0.0.1:$SH_ETCD_PEER_PORT" \
    --listen-metrics-urls "" --log-level warn
  # etcd prints no single READY line of ours; its health endpoint says when
  # it serves.
  local deadline=$((SECONDS + SH_READY_TIMEOUT))
  until curl -fsS -m 2 "$SH_ETCD_ENDPOINT/health" 2>/dev/null | grep -q '"health":"true"'; do
    sh_alive etcd || { tail -n 30 "$SH_DATA/logs/etcd.log" >&2; sh_die "etcd exited"; }
    ((SECONDS < deadline)) || sh_die "etcd not healthy after ${SH_READY_TIMEOUT}s (log: $SH_DATA/logs/etcd.log)"
    sleep 0.2
  done
  sh_log "etcd ready at $SH_ETCD_ENDPOINT"
}

# sh_start_node K [INIT_SPEC]: INIT_SPEC like shards=8,rf=3,nodes=3 (node 1).
# Does not wait: nodes with --init-cluster wait for the others to register,
# so all nodes are started first and then awaited (sh_wait_node).
sh_start_node() {
  local k=$1 init=${2:-}
  [ -x "$SH_BIN/shardhouse-node" ] || sh_die "$SH_BIN/shardhouse-node not built: run cargo build --release --workspace --bins (or make build)"
  [ -d "$SHARDHOUSE_CHDB_DIR" ] || sh_die "chDB engine missing at $SHARDHOUSE_CHDB_DIR: run scripts/install-deps.sh (or set SHARDHOUSE_CHDB_DIR)"
  mkdir -p "$SH_DATA/node-$k"
  local cg=""
  if [ -n "$SH_CGROUP_ROOT" ]; then
    cg="$SH_CGROUP_ROOT/node-$k"
    mkdir -p "$cg"
  fi
  local args=(--node-id "$k" --data-dir "$SH_DATA/node-$k"
    --grpc-listen "127.0.0.1:$(sh_node_grpc_port "$k")"
    --http-listen "127.0.0.1:$(sh_node_http_port "$k")"
    --etcd-endpoints "$SH_ETCD_ENDPOINT" --cluster "$SH_CLUSTER_NAME")
  [ -n "$init" ] && args+=(--init-cluster "$init")
  sh_spawn "node-$k" "$cg" "$SH_BIN/shardhouse-node" "${args[@]}"
}

sh_wait_node() {
  local line
  line=$(sh_wait_ready "node-$1" '^READY shardhouse-node') || sh_die "node $1 did not start (log: $SH_DATA/logs/node-$1.log)"
  sh_log "$line"
}

sh_start_router() {
  [ -x "$SH_BIN/shardhouse-router" ] || sh_die "$SH_BIN/shardhouse-router not built: run cargo build --release --workspace --bins (or make build)"
  sh_spawn router "" "$SH_BIN/shardhouse-router" --http-listen "$SH_ROUTER_HTTP" \
    --grpc-listen "$SH_ROUTER_GRPC" --etcd-endpoints "$SH_ETCD_ENDPOINT" \
    --cluster "$SH_CLUSTER_NAME" "$@"
  local line
  line=$(sh_wait_ready router '^READY shardhouse-router') || sh_die "router did not start (log: $SH_DATA/logs/router.log)"
  sh_log "$line"
}

# Starts all nodes (node 1 initialises the shard map) and waits for them.
sh_start_nodes() {
  local shards=$1 rf=$2 k
  for ((k = 1; k <= SH_NODES; k++)); do
    if ((k == 1)); then
      sh_start_node 1 "shards=$shards,rf=$rf,nodes=$SH_NODES"
    else
      sh_start_node "$k"
    fi
  done
  for ((k = 1; k <= SH_NODES; k++)); do sh_wait_node "$k"; done
}

# sh_wait_writable: the router is READY before every shard has a leader; a
# tiny probe write tells when the cluster accepts writes end to end. The
# probe goes to a database of its own, dropped afterwards, so the user's
# databases never show it.
sh_wait_writable() {
  local deadline=$((SECONDS + ${1:-$SH_READY_TIMEOUT})) code
  while ((SECONDS < deadline)); do
    code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -XPOST \
      "http://$SH_ROUTER_HTTP/write?db=shardhouse_probe" --data-binary "probe,src=scripts ok=1" || true)
    if [ "$code" = 204 ]; then
      curl -s -m 10 -o /dev/null -XPOST "http://$SH_ROUTER_HTTP/query" \
        --data-urlencode 'q=DROP DATABASE "shardhouse_probe"' || true
      return 0
    fi
    sleep 0.5
  done
  sh_log "cluster not writable after ${1:-$SH_READY_TIMEOUT}s (last HTTP status $code)"
  return 1
}

# sh_stop NAME [TIMEOUT]: SIGTERM, then SIGKILL after TIMEOUT seconds.
sh_stop() {
  local name=$1 timeout=${2:-15} pid
  pid=$(sh_pid_of "$name")
  [ -n "$pid" ] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + timeout))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      sh_log "$name (pid $pid) did not stop in ${timeout}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Reap it if it is our child (keeps `wait` quiet and avoids zombies).
  wait "$pid" 2>/dev/null || true
  rm -f "$SH_DATA/pids/$name.pid" "$SH_DATA/pids/$name.logmark"
}

# sh_kill9 NAME: the crash every chaos scenario starts with.
sh_kill9() {
  local pid
  pid=$(sh_pid_of "$1")
  [ -n "$pid" ] || return 0
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  rm -f "$SH_DATA/pids/$1.pid"
}

# Stops router, then nodes (highest id first), then etcd.
sh_stop_all() {
  sh_stop router
  local k
  for ((k = ${SH_NODES:-0}; k >= 1; k--)); do sh_stop "node-$k"; done
  sh_stop etcd
}

# Prints the name of the first component that died, if any.
sh_first_dead() {
  local f name
  for f in "$SH_DATA"/pids/*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    sh_alive "$name" || { echo "$name"; return 0; }
  done
  return 1
}
