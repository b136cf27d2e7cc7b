#!/usr/bin/env bash
# `make bench-scaleout`: does adding node processes add throughput? (issue 18)
# The e2e open-model ramp (POINT_RATES, then GROW per step until a step
# delivers < 80% of offered) against a local RF=1 cluster of 1, 2 and 4
# nodes (NODE_COUNTS), one shard per node, each on a fresh cluster. Every
# node process is held to the same CPU share (NODE_CPU cores, default
# 0.25) by a CFS quota in its own cgroup, so the cores of this machine are
# not what is measured; the router, etcd and the load generator run outside
# the quotas. cgroup v2 (cpu.max) when its cpu controller is available,
# else the v1 cpu controller (cpu.cfs_quota_us); needs root.
# Dataset 100k by default: 24 low-cardinality series hash unevenly onto 4
# shards, 100,000 series spread evenly.
# Prints a table and as its LAST lines:
#   scaleout_nodes_<n>_sustainable_points_per_sec=<N>   (for each n)
#   scaleout_efficiency_1_to_2=<S2 / 2 S1>, scaleout_efficiency_2_to_4=<S4 / 2 S2>
#   scaleout_efficiency_1_to_4=<S4 / 4 S1>
# Knobs: NODE_COUNTS, NODE_CPU, DATASET, BATCH, POINT_RATES, GROW,
# MAX_STEPS, STEP_SECS, MAX_INFLIGHT, PROTOCOL, OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/bench.sh
source scripts/lib/bench.sh

NODE_COUNTS=${NODE_COUNTS:-1,2,4}
NODE_CPU=${NODE_CPU:-0.25}
DATASET=${DATASET:-100k}
BATCH=${BATCH:-1000}
PROTOCOL=${PROTOCOL:-line}
POINT_RATES=${POINT_RATES:-25000,50000,75000,100000}
GROW=${GROW:-1.2}
MAX_STEPS=${MAX_STEPS:-40}
STEP_SECS=${STEP_SECS:-10}
MAX_INFLIGHT=${MAX_INFLIGHT:-256}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-scaleout.XXXXXX")}
mkdir -p "$OUT"
LT="$SH_BIN/shardhouse-loadtest"
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest
log() { echo "[bench-scaleout] $*" >&2; }

# The cgroup parent every node's group is made under, and how a quota is
# written there.
CG_VERSION=""
for d in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  if grep -qw cpu "$d/cgroup.controllers" 2>/dev/null; then CG_VERSION=2; CG_BASE=$d; break; fi
done
if [ -z "$CG_VERSION" ] && [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then CG_VERSION=1; CG_BASE=/sys/fs/cgroup/cpu; fi
[ -n "$CG_VERSION" ] || { log "no writable cgroup cpu controller (v2 cpu.max or v1 cpu.cfs_quota_us): run as root"; exit 1; }
CG_PARENT="$CG_BASE/shardhouse-scaleout-$$"
period_us=100000
quota_us=$(python3 -c "print(int(round($NODE_CPU * $period_us)))")

cg_make_node() { # K: the group node K joins, with its quota
  local g="$CG_PARENT/node-$1"
  mkdir -p "$g"
  if [ "$CG_VERSION" = 2 ]; then
    echo "$quota_us $period_us" >"$g/cpu.max"
  else
    echo "$period_us" >"$g/cpu.cfs_period_us"
    echo "$quota_us" >"$g/cpu.cfs_quota_us"
  fi
}

cg_cleanup() {
  [ -d "$CG_PARENT" ] || return 0
  local g
  for g in "$CG_PARENT"/node-*; do [ -d "$g" ] && rmdir "$g" 2>/dev/null || true; done
  if [ "$CG_VERSION" = 2 ]; then echo "-cpu" >"$CG_PARENT/cgroup.subtree_control" 2>/dev/null || true; fi
  rmdir "$CG_PARENT" 2>/dev/null || log "could not remove $CG_PARENT (a process still in it?)"
}

# Throttled time per node (the quota at work), from the cgroup's cpu.stat.
cg_throttled() { # K
  local f="$CG_PARENT/node-$1/cpu.stat"
  if [ "$CG_VERSION" = 2 ]; then
    awk '/^throttled_usec/ {printf "%.1f s", $2 / 1e6}' "$f" 2>/dev/null
  else
    awk '/^throttled_time/ {printf "%.1f s", $2 / 1e9}' "$f" 2>/dev/null
  fi
}

trap 'sh_stop_all 2>/dev/null || true; cg_cleanup' EXIT
mkdir -p "$CG_PARENT"
if [ "$CG_VERSION" = 2 ]; then echo "+cpu" >"$CG_PARENT/cgroup.subtree_control"; fi

start=$SECONDS
log "cgroup v$CG_VERSION at $CG_PARENT; $NODE_CPU core per node ($quota_us/$period_us us); nodes $NODE_COUNTS; dataset $DATASET, $BATCH points/request; rates $POINT_RATES then x$GROW; results in $OUT"
IFS=, read -r -a counts <<<"$NODE_COUNTS"
declare -A sus throttled
for n in "${counts[@]}"; do
  name="scaleout_nodes_$n"
  log "== $name: $n node(s), RF=1, $n shard(s), each node at most $NODE_CPU core"
  for ((k = 1; k <= n; k++)); do cg_make_node "$k"; done
  SH_CGROUP_ROOT=$CG_PARENT
  sh_cluster_init "$OUT/$name-data" "$n"
  sh_start_etcd
  sh_start_nodes "$n" 1
  SH_CGROUP_ROOT=""
  sh_start_router
  if sh_wait_writable; then
    bench_ramp "$name" "$BATCH" "http://$SH_ROUTER_HTTP" --pid-dir "$SH_DATA/pids" || true
  else
    log "$name never became writable"
  fi
  t=""
  for ((k = 1; k <= n; k++)); do t+="node-$k $(cg_throttled "$k"); "; done
  throttled[$n]=$t
  sh_stop_all
  rm -rf "$SH_DATA"/node-* "$SH_DATA"/etcd
  for ((k = 1; k <= n; k++)); do rmdir "$CG_PARENT/node-$k" 2>/dev/null || true; done
  sus[$n]=$(bench_sustainable "$name")
done

log "done in $((SECONDS - start)) s; JSON and logs in $OUT"
echo
echo "## Scale-out (RF=1, one shard per node, $NODE_CPU core per node, $DATASET dataset, $BATCH points/request; load average $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
echo
echo "| nodes | sustainable points/s | per node | of linear from 1 node | time throttled by the quota |"
echo "|---|---|---|---|---|"
base=${sus[${counts[0]}]:-0}
for n in "${counts[@]}"; do
  python3 - "$n" "${sus[$n]}" "$base" "${counts[0]}" "${throttled[$n]}" <<'PY'
import sys
n, s, base, n0, thr = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lin = s / (base * n / n0) if base > 0 else 0.0
print(f"| {n} | {s:,.0f} | {s / n:,.0f} | {lin:.2f} | {thr} |")
PY
done
echo
eff() { # A B: S_B / (B/A x S_A)
  python3 -c "a,b,sa,sb=$1,$2,${sus[$1]:-0},${sus[$2]:-0}; print(f'{sb / (sa * b / a):.2f}' if sa > 0 else '0.00')"
}
for n in "${counts[@]}"; do echo "scaleout_nodes_${n}_sustainable_points_per_sec=${sus[$n]}"; done
[ -n "${sus[1]:-}" ] && [ -n "${sus[2]:-}" ] && echo "scaleout_efficiency_1_to_2=$(eff 1 2)"
[ -n "${sus[2]:-}" ] && [ -n "${sus[4]:-}" ] && echo "scaleout_efficiency_2_to_4=$(eff 2 4)"
[ -n "${sus[1]:-}" ] && [ -n "${sus[4]:-}" ] && echo "scaleout_efficiency_1_to_4=$(eff 1 4)"
true
