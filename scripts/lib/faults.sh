# shellcheck shell=bash
# Faults shared by chaos.sh and soak.sh, on a cluster started with
# scripts/lib/cluster.sh (source that first).
#
# Partition: iptables on loopback, matching a node's sockets by the cgroup v2
# it runs in (sh_spawn puts each node in $SH_CGROUP_ROOT/node-<k>). Needs
# root, iptables and cgroup v2; faults_partition_setup says why not in
# FAULTS_PARTITION_WHY and leaves FAULTS_PARTITION_OK=0.

FAULTS_PARTITION_OK=0
FAULTS_PARTITION_WHY=""
FAULTS_CG_REL=""
FAULTS_RULES=()

# Call before the nodes start (they must join the cgroup when spawned).
faults_partition_setup() {
  local cg2
  cg2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts || true)
  if [ "$(id -u)" != 0 ]; then
    FAULTS_PARTITION_WHY="not root"
    return 0
  fi
  if [ -z "$cg2" ]; then
    FAULTS_PARTITION_WHY="no cgroup v2 mount"
    return 0
  fi
  if ! command -v iptables >/dev/null; then
    echo "[faults] installing iptables (Debian) for the partition fault" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1; } || true
  fi
  if ! command -v iptables >/dev/null; then
    FAULTS_PARTITION_WHY="iptables not installable"
  elif ! iptables -w -L OUTPUT -n >/dev/null 2>&1; then
    FAULTS_PARTITION_WHY="iptables cannot read the OUTPUT chain (no netfilter in this kernel/sandbox)"
  else
    FAULTS_CG_REL="shardhouse-faults-$$"
    if mkdir -p "$cg2/$FAULTS_CG_REL" 2>/dev/null; then
      SH_CGROUP_ROOT="$cg2/$FAULTS_CG_REL"
      FAULTS_PARTITION_OK=1
    else
      FAULTS_PARTITION_WHY="cannot create a cgroup under $cg2"
    fi
  fi
}

# faults_partition K PEERS...: node K can no longer reach the nodes PEERS,
# and nobody (peers, router) can reach node K, until faults_heal.
faults_partition() {
  local k=$1 p r
  shift
  FAULTS_RULES+=("-o lo -p tcp --dport $(sh_node_grpc_port "$k") -j DROP")
  for p in "$@"; do
    FAULTS_RULES+=("-o lo -p tcp -m cgroup --path $FAULTS_CG_REL/node-$k --dport $(sh_node_grpc_port "$p") -j DROP")
  done
  for r in "${FAULTS_RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -I OUTPUT $r
  done
}

faults_heal() {
  local r
  for r in "${FAULTS_RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -w -D OUTPUT $r 2>/dev/null || true
  done
  FAULTS_RULES=()
}

# Removes the cgroups made for the partition (after the nodes have exited).
faults_cleanup() {
  faults_heal
  if [ -n "${SH_CGROUP_ROOT:-}" ] && [ -d "$SH_CGROUP_ROOT" ]; then
    local d
    for d in "$SH_CGROUP_ROOT"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
    rmdir "$SH_CGROUP_ROOT" 2>/dev/null || true
  fi
}

# faults_slow NAME SECS: a slow process, not a dead one: SIGSTOP/SIGCONT
# bursts (stopped 0.5 s, running 0.5 s) for SECS seconds, left running.
faults_slow() {
  local pid end
  pid=$(sh_pid_of "$1")
  [ -n "$pid" ] || return 0
  end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    kill -STOP "$pid" 2>/dev/null || break
    sleep 0.5
    kill -CONT "$pid" 2>/dev/null || break
    sleep 0.5
  done
  kill -CONT "$pid" 2>/dev/null || true
}

# faults_rss_sampler FILE SECS: appends `<unix_secs> <name> <pid> <rss_kb>`
# for every process in $SH_DATA/pids every SECS seconds, until killed
# (run it in the background). `shardhouse-loadtest analyze rss-slope` reads it.
faults_rss_sampler() {
  local out=$1 every=$2 f name pid rss now
  while true; do
    now=$(date +%s)
    for f in "$SH_DATA"/pids/*.pid; do
      [ -e "$f" ] || continue
      name=$(basename "$f" .pid)
      pid=$(cat "$f" 2>/dev/null) || continue
      rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || continue
      [ -n "$rss" ] && echo "$now $name $pid $rss" >>"$out"
    done
    sleep "$every"
  done
}
