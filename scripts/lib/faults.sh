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

# Removes the cgroups made for the partition and unmounts the tmpfs of
# the disk faults (after the nodes have exited).
faults_cleanup() {
  faults_heal
  faults_unmount_all
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

# --- Disk faults (scripts/chaos-disk.sh; usable from soak.sh) -------------
# A node's WAL (`wal`) or engine (`engine`) directory moved onto a
# size-limited tmpfs, so "disk full" is a real ENOSPC; a slow WAL disk and a
# corrupted WAL through the node's own test switch and real files. Usage:
#   faults_disk_setup                    # FAULTS_DISK_OK=1, or FAULTS_DISK_WHY
#   sh_stop node-1                       # (or before the first start)
#   faults_tmpfs 1 wal 512               # node-1/wal on a 512 MiB tmpfs
#   sh_start_node 1; sh_wait_node 1
#   faults_disk_fill 1 wal 32            # ballast: 32 MiB left (< 64 MiB reserve)
#   faults_disk_free 1 wal               # ballast gone; no restart needed
#   faults_restart_node 3 "node=3,wal_write_delay_ms=200"  # slow WAL disk
#   faults_restart_node 3                # healthy again
#   faults_corrupt_wal 3                 # node 3 stopped: 4 KiB overwritten
#   faults_cleanup                       # after sh_stop_all: unmounts too
# Mounts are recorded in FAULTS_MOUNTS and always unmounted by
# faults_cleanup (lazily if a file is still open); call it from an EXIT trap.
# Size a tmpfs for the load: the node's WAL holds up to its write buffer
# (256 MiB by default) of unflushed log before RocksDB writes tables.

FAULTS_DISK_OK=0
FAULTS_DISK_WHY=""
FAULTS_MOUNTS=()

# Whether tmpfs can be mounted here (root, mount(8) and the capability).
faults_disk_setup() {
  local probe
  if [ "$(id -u)" != 0 ]; then
    FAULTS_DISK_WHY="not root (a size-limited tmpfs needs mount)"
    return 0
  fi
  probe=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-tmpfs-probe.XXXXXX")
  if mount -t tmpfs -o size=1m tmpfs "$probe" 2>/dev/null; then
    umount "$probe"
    FAULTS_DISK_OK=1
  else
    FAULTS_DISK_WHY="cannot mount a tmpfs (no CAP_SYS_ADMIN in this sandbox?)"
  fi
  rmdir "$probe"
}

# faults_disk_dir K wal|engine: the directory of node K.
faults_disk_dir() {
  case $2 in
    wal | engine) echo "$SH_DATA/node-$1/$2" ;;
    *) echo "[faults] faults_disk_dir: expected wal or engine, got '$2'" >&2; return 1 ;;
  esac
}

# faults_tmpfs K wal|engine MIB: node K's directory (empty, or of a stopped
# node: its files are copied over) onto a new MIB MiB tmpfs.
faults_tmpfs() {
  local dir before
  dir=$(faults_disk_dir "$1" "$2") || return 1
  before="$dir.before-tmpfs"
  mkdir -p "$dir"
  rm -rf "$before"
  mv "$dir" "$before"
  mkdir "$dir"
  if ! mount -t tmpfs -o "size=${3}m" tmpfs "$dir"; then
    rmdir "$dir"
    mv "$before" "$dir"
    echo "[faults] cannot mount a tmpfs on $dir" >&2
    return 1
  fi
  FAULTS_MOUNTS+=("$dir")
  cp -a "$before/." "$dir/" && rm -rf "$before"
}

# faults_disk_fill K wal|engine LEAVE_MIB: a ballast file fills node K's
# tmpfs until LEAVE_MIB MiB are free (0: full to the last block).
faults_disk_fill() {
  local dir avail want
  dir=$(faults_disk_dir "$1" "$2") || return 1
  mountpoint -q "$dir" || { echo "[faults] $dir is not a mount (faults_tmpfs first)" >&2; return 1; }
  avail=$(df -P -B1 "$dir" | awk 'NR == 2 { print $4 }')
  want=$((avail - $3 * 1048576))
  ((want > 0)) || return 0
  # tmpfs allocates at once; dd is the fallback and stops at ENOSPC.
  fallocate -l "$want" "$dir/ballast" 2>/dev/null ||
    dd if=/dev/zero of="$dir/ballast" bs=1M count=$((want / 1048576)) status=none 2>/dev/null || true
  if (($3 == 0)); then
    # Whatever is left (block rounding) goes too.
    dd if=/dev/zero of="$dir/ballast.tail" bs=4k status=none 2>/dev/null || true
  fi
}

faults_disk_free() {
  local dir
  dir=$(faults_disk_dir "$1" "$2") || return 1
  rm -f "$dir/ballast" "$dir/ballast.tail"
}

# Free MiB on node K's wal or engine filesystem.
faults_disk_free_mib() {
  df -P -B1M "$(faults_disk_dir "$1" "$2")" | awk 'NR == 2 { print $4 }'
}

# faults_restart_node K [SPEC]: node K stopped (SIGTERM) and started again
# with SHARDHOUSE_TEST_FAULT_DISK=SPEC (docs/operations.md "Testing
# faults"), e.g. "node=3,wal_write_delay_ms=200" for a slow WAL disk;
# without SPEC it comes back healthy. Waits until it is READY.
faults_restart_node() {
  local k=$1 spec=${2:-}
  sh_stop "node-$k"
  if [ -n "$spec" ]; then
    SHARDHOUSE_TEST_FAULT_DISK="$spec" sh_start_node "$k"
  else
    # A subshell: the caller's own environment keeps its value.
    (unset SHARDHOUSE_TEST_FAULT_DISK; sh_start_node "$k")
  fi
  sh_wait_node "$k"
}

# faults_corrupt_wal K: overwrites 4 KiB in the middle of every RocksDB log
# and table file of node K's WAL over 64 KiB (16 KiB if none is that big),
# as a bad sector would. Node K must be stopped (kill -9). Prints the files;
# fails when there was none to damage.
faults_corrupt_wal() {
  local dir f len n=0 min
  dir=$(faults_disk_dir "$1" wal) || return 1
  for min in 65536 16384; do
    for f in "$dir"/*.log "$dir"/*.sst; do
      [ -f "$f" ] || continue
      len=$(stat -c %s "$f")
      ((len >= min)) || continue
      head -c 4096 /dev/zero | tr '\0' '\132' |
        dd of="$f" bs=4096 seek=$((len / 2)) oflag=seek_bytes conv=notrunc status=none
      echo "$(basename "$f") ($len bytes)"
      n=$((n + 1))
    done
    ((n > 0)) && return 0
  done
  echo "[faults] no RocksDB file of 16 KiB or more in $dir to damage" >&2
  return 1
}

# faults_node_metric K NAME [LABEL_SUBSTRING]: the value of a metric on
# node K's /metrics (first matching line), empty when absent.
faults_node_metric() {
  # awk reads to the end: curl must not die of SIGPIPE (pipefail).
  curl -s -m 5 "http://127.0.0.1:$(sh_node_http_port "$1")/metrics" |
    awk -v n="$2" -v l="${3:-}" 'v == "" && ($1 == n || index($1, n "{") == 1) && index($1, l) { v = $2 } END { print v }' || true
}

# Unmounts every tmpfs faults_tmpfs made (nodes stopped first); with
# FAULTS_KEEP_TMPFS=1 their files are copied to <dir>.tmpfs first (for a
# failed run's post-mortem: they vanish with the mount).
faults_unmount_all() {
  local d
  for d in "${FAULTS_MOUNTS[@]}"; do
    mountpoint -q "$d" || continue
    if [ "${FAULTS_KEEP_TMPFS:-0}" = 1 ]; then
      rm -f "$d/ballast" "$d/ballast.tail"
      mkdir -p "$d.tmpfs" && cp -a "$d/." "$d.tmpfs/" 2>/dev/null || true
    fi
    umount "$d" 2>/dev/null || umount -l "$d" 2>/dev/null ||
      echo "[faults] could not unmount $d: umount it by hand" >&2
  done
  FAULTS_MOUNTS=()
}

# --- Shared by the chaos scripts' runs -----------------------------------

# faults_stop_pids PID...: stops background helpers (load generators) and
# reaps them; empty or finished ones are skipped.
faults_stop_pids() {
  local p
  for p in "$@"; do
    if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
      kill -TERM "$p" 2>/dev/null || true
      wait "$p" 2>/dev/null || true
    fi
  done
}

# faults_finish RC DATA: once the cluster has stopped: partition rules,
# cgroups and tmpfs mounts undone; DATA removed when RC is 0 and it was a
# temp dir nobody asked to keep (KEEP_DATA=1, SHARDHOUSE_DATA), else kept
# with a copy of each tmpfs (ballast left out) next to its mount point.
faults_finish() {
  local rc=$1 data=$2
  if [ "${KEEP_DATA:-0}" != 1 ] && [ -z "${SHARDHOUSE_DATA:-}" ] && [ "$rc" = 0 ]; then
    faults_cleanup
    rm -rf "$data"
  else
    FAULTS_KEEP_TMPFS=1 faults_cleanup
    echo "[faults] data and logs kept in $data" >&2
  fi
}

# faults_acked_requests ACKS: acknowledged requests in an ack-load log.
faults_acked_requests() {
  local n
  n=$(grep -vc '^#' "$1" 2>/dev/null) || true
  echo "${n:-0}"
}

# faults_expect_progress ACKS BEFORE WHAT: a request acknowledged after the
# first BEFORE within 60 s, or the cluster did not recover from WHAT (and
# "nothing lost" would mean little).
faults_expect_progress() {
  local acks=$1 before=$2 deadline=$((SECONDS + 60))
  while (($(faults_acked_requests "$acks") <= before)); do
    ((SECONDS < deadline)) || { echo "[faults] no write acknowledged within 60 s after: $3" >&2; return 1; }
    sleep 0.5
  done
}

# faults_engine_part_file K MEASUREMENT: the data file of the oldest flushed
# part of MEASUREMENT (any shard, any database) on node K, if any.
faults_engine_part_file() {
  { ls -d "$SH_DATA/node-$1"/engine/data/shard_*_*/"$2"/[0-9]*/*.bin 2>/dev/null || true; } | sort | sed -n 1p
}

# faults_truncate_engine_part K MEASUREMENT: node K stopped (kill -9); that
# file cut to half its size, as a lost tail. Prints "<part> <file> (<bytes>)";
# fails when no part of MEASUREMENT is flushed there.
faults_truncate_engine_part() {
  local f len
  f=$(faults_engine_part_file "$1" "$2")
  [ -n "$f" ] || { echo "[faults] no flushed part of $2 on node $1" >&2; return 1; }
  len=$(stat -L -c %s "$f")
  truncate -s $((len / 2)) "$f"
  echo "$(basename "$(dirname "$f")") $(basename "$f") ($len bytes)"
}
