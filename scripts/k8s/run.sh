#!/usr/bin/env bash
# A real single-machine Kubernetes in a network namespace of its own, for
# `make test-k8s`: etcd, kube-apiserver, kube-controller-manager (hostpath
# provisioner), kube-scheduler, containerd + runc, the CNI bridge, kubelet,
# kube-proxy (iptables) and CoreDNS, with Shardhouse's images imported.
#
#   scripts/k8s/run.sh [--images "operator router node etcd"] [--] CMD [ARG...]
#
# runs CMD inside the namespace once the node is Ready (KUBECONFIG, K8S_DIR,
# K8S_NODE_IP ... exported, see cluster.sh), then tears everything down, also
# when a step fails or the run is interrupted. With no CMD it runs an
# interactive shell (keep the cluster up, poke at it, exit to tear down).
#
# Network rule: every process of the cluster (control plane, kubelet,
# containerd and its pods, CoreDNS, and CMD with its load generator) runs
# inside the namespace `shk8s-<pid>`, whose only interfaces are lo, a veth
# pair carrying the node address (both ends inside) and the CNI bridge. There is no default
# route and no address outside the namespace, and CoreDNS answers only
# cluster names (no forwarder): nothing can leave the machine.
#
# Left as found afterwards: processes (by PID: those recorded, those in the
# namespace, those in the kubelet's cgroup root), the namespace with its
# iptables rules, bridge and sysctls, /etc/netns/<ns>, the cgroup root, the
# global sysctls the kubelet changes (vm.overcommit_memory, vm.panic_on_oom,
# kernel.panic, kernel.panic_on_oops, kernel.keys.root_maxkeys,
# kernel.keys.root_maxbytes), pod network namespace files in /run/netns,
# hostpath volumes under /tmp/hostpath_pv and the state directory (kept with
# K8S_KEEP=1 for debugging).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
export SHARDHOUSE_CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}

IMAGES="operator router node etcd"
while (($#)); do
  case $1 in
    --images) IMAGES=$2; shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

log() { echo "[k8s] $*" >&2; }
die() { echo "[k8s] ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (network namespace, containerd, kubelet)"

ID=shk8s-$$
STATE=${K8S_STATE_DIR:-${TMPDIR:-/tmp}/$ID}
NETNS=$ID
mkdir -p "$STATE"
export K8S_ID=$ID K8S_DIR=$STATE K8S_NETNS=$NETNS K8S_IMAGES=$IMAGES

# --- What the run may change globally: recorded now, restored on exit.
SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
declare -A saved_sysctl=()
for s in $SYSCTLS; do
  saved_sysctl[$s]=$(sysctl -n "$s" 2>/dev/null || echo "")
done
ls /run/netns 2>/dev/null | sort >"$STATE/netns.before" || true
ls /tmp/hostpath_pv 2>/dev/null | sort >"$STATE/hostpath.before" || true
# containerd's CRI caches CNI results (pod loopbacks too) under
# /var/lib/cni/results: whatever this run adds there goes afterwards
ls /var/lib/cni/results 2>/dev/null | sort >"$STATE/cni-results.before" || true
# directories containerd's shims and the CNI library create on the host
# paths they do not let us move; removed afterwards if they were not there
created_dirs=()
for d in /run/containerd /var/lib/cni /etc/netns; do [ -e "$d" ] || created_dirs+=("$d"); done

netns_inode() { stat -Lc %i "/run/netns/$NETNS" 2>/dev/null || echo none; }

# Processes of this run: recorded PIDs, anything in our network namespace,
# anything in our cgroup root (pods run in their own network namespaces).
our_pids() {
  local ino p
  ino=$(netns_inode)
  cat "$STATE"/pids/*.pid 2>/dev/null || true
  [ "$ino" = none ] || ip netns pids "$NETNS" 2>/dev/null || true
  for p in /sys/fs/cgroup/*/"$ID" /sys/fs/cgroup/unified/"$ID"; do
    [ -d "$p" ] && find "$p" -name cgroup.procs -exec cat {} + 2>/dev/null
  done
  true
}

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  set +e
  log "tearing down ($ID)"
  local pids round
  for round in 1 2 3 4 5; do
    pids=$(our_pids | sort -un | grep -v "^$$\$" || true)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    if ((round < 3)); then kill -TERM $pids 2>/dev/null; else kill -KILL $pids 2>/dev/null; fi
    sleep 1
  done
  pids=$(our_pids | sort -un)
  [ -z "$pids" ] || log "WARNING: still running after teardown: $pids"
  # cgroups: deepest first
  local c
  for c in /sys/fs/cgroup/*/"$ID" /sys/fs/cgroup/unified/"$ID"; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$c" ] && log "WARNING: cgroup $c left behind"
  done
  ip netns del "$NETNS" 2>/dev/null
  rm -rf "/etc/netns/$NETNS"
  # pod network namespaces containerd made (their mounts died with the
  # cluster's mount namespace; the files stay on /run)
  local n
  for n in $(comm -13 "$STATE/netns.before" <(ls /run/netns 2>/dev/null | sort)); do
    case $n in cni-*) umount "/run/netns/$n" 2>/dev/null; rm -f "/run/netns/$n" ;; esac
  done
  for n in $(comm -13 "$STATE/hostpath.before" <(ls /tmp/hostpath_pv 2>/dev/null | sort)); do
    rm -rf "/tmp/hostpath_pv/${n:?}"
  done
  rmdir /tmp/hostpath_pv 2>/dev/null
  local s
  for s in $SYSCTLS; do
    [ -n "${saved_sysctl[$s]}" ] && [ "$(sysctl -n "$s" 2>/dev/null)" != "${saved_sysctl[$s]}" ] &&
      sysctl -qw "$s=${saved_sysctl[$s]}"
  done
  rm -rf /var/lib/cni/results/"$ID"-* 2>/dev/null
  for n in $(comm -13 "$STATE/cni-results.before" <(ls /var/lib/cni/results 2>/dev/null | sort)); do
    rm -rf "/var/lib/cni/results/${n:?}"
  done
  for n in "${created_dirs[@]}"; do
    [ -d "$n" ] && find "$n" -depth -type d -empty -delete 2>/dev/null
    [ -e "$n" ] && log "WARNING: $n not empty, left in place"
  done
  # What a run leaves for reading afterwards (logs, the scenarios' results,
  # events and load summaries): $SHARDHOUSE_CACHE/k8s-last-run.
  local keep=$SHARDHOUSE_CACHE/k8s-last-run
  rm -rf "$keep"
  mkdir -p "$keep"
  cp -r "$STATE/logs" "$keep/" 2>/dev/null
  [ -d "$STATE/scenarios" ] && cp -r "$STATE/scenarios" "$keep/" 2>/dev/null
  echo "$rc" >"$keep/exit-code"
  if [ "${K8S_KEEP:-0}" = 1 ]; then
    log "state kept in $STATE (K8S_KEEP=1)"
  else
    # containerd's snapshots may hold read-only dirs; make them removable
    chmod -R u+w "$STATE" 2>/dev/null
    rm -rf "$STATE"
  fi
  log "teardown done"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$NETNS"
mkdir -p "/etc/netns/$NETNS"
# `ip netns exec` bind-mounts these over /etc/resolv.conf and /etc/hosts:
# the host's resolver is out of reach, CoreDNS (on the node address) answers
# cluster names only.
echo "search svc.cluster.local cluster.local" >"/etc/netns/$NETNS/resolv.conf"
echo "nameserver 10.250.0.1" >>"/etc/netns/$NETNS/resolv.conf"
printf '127.0.0.1 localhost\n10.250.0.1 %s\n' "$ID" >"/etc/netns/$NETNS/hosts"

# One `ip netns exec` for the whole cluster: every component shares one
# mount namespace (the kubelet's volume mounts must be visible to
# containerd), a slave of the host's, so all of its mounts vanish with it.
ip netns exec "$NETNS" bash "$ROOT/scripts/k8s/cluster.sh" "$@"
