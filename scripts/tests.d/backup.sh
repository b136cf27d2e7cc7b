#!/usr/bin/env bash
# `make test` suite: backup and restore end to end (issue 30), with real
# node processes, a real S3-compatible server and a recorded ack-load.
#
#  1. An S3 server: s3s-fs (crates.io), built once into $SHARDHOUSE_CACHE/bin
#     by scripts/deps.d/s3s-fs.sh (run here too, so a fresh machine builds it).
#  2. Cluster A: 3 nodes, RF=3, $SHARDS shards, its Raft logs kept whole
#     (SHARDHOUSE_TEST_FAULT_DISK keep_log=1: never compacted). A preload
#     (ack-load) and then a steady ack-load that keeps writing; both record
#     every acknowledged point.
#  3. Backup b1 to s3://... while the steady load writes. The acks recorded
#     before b1 started are kept aside: each must be found after restore.
#  4. Backup b2 after some more data: its upload must be under 5% of b1's
#     bytes (content-addressed parts; a part merged since b1 from b1's parts
#     is named by them, not uploaded).
#  5. Refusals that must leave no manifest: wrong credentials, an
#     unreachable destination, a destination holding another cluster's
#     backups.
#  6. Backup b3 with a node killed -9 as soon as the first shard is stored:
#     either it completes from the other replicas (then its manifest names
#     every shard) or it fails naming the shard, and no b3 manifest exists.
#  7. Cluster A is stopped; `shardhouse-wal-points` reads node 2's log
#     (node 1 was killed) and maps every steady point to its shard and Raft
#     index; then A is destroyed (data deleted).
#  8. Cluster B: 2 nodes, RF=2, same shard count. Refusals first, each must
#     leave B empty: a restore from an unreachable destination and one with
#     wrong credentials, a truncated manifest, a tampered part object.
#  9. Restore b3 (b2 when b3 failed: then no backup taken across a kill -9
#     exists); every point acknowledged before it started is found
#     exactly once (shardhouse-loadtest verify); the restored steady points
#     are exactly those of the Raft entries at or below the manifest's
#     flushed_index of their shard, each once, and every point acknowledged
#     before the backup is in an entry at or below its commit_index (see
#     "The manifest's index, point by point"); a restore of a database the
#     backup lacks and a second restore into the now non-empty cluster are
#     refused; B takes writes.
# 10. Cluster C: 1 node; `restore --database other` of b2 brings back the
#     50 points written to database "other" before b2, and no other
#     database.
# Last line: `backup_scenarios=N acked_points_lost=0 incremental_upload_pct=X
# ...`, or a FAIL line.
#
# Knobs: SHARDS (4), PRELOAD_SECS (3), PRELOAD_RATE x PRELOAD_BATCH
# (5 x 100000), RATE x BATCH (10 x 100, the steady load), KEEP_DATA=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/s3s.sh
source scripts/lib/s3s.sh

log() { echo "[backup] $*" >&2; }
fail() {
  echo "FAIL backup: $*" >&2
  exit 1
}

SHARDS=${SHARDS:-4}
# The preload comes in few large requests over a few seconds: each flush
# (about every second per shard) makes a part, and fewer than 5 parts of
# similar size are not merged for many minutes, while 15 are merged in a
# cascade that, on a loaded machine, can run past b1 and make b2 upload the
# merged parts again (a 30% "incremental" seen with two suites at once).
PRELOAD_SECS=${PRELOAD_SECS:-3}
PRELOAD_RATE=${PRELOAD_RATE:-5}
PRELOAD_BATCH=${PRELOAD_BATCH:-100000}
RATE=${RATE:-10}
BATCH=${BATCH:-100}
STEADY_SERIES=64
sh_require_bins shardhouse-node shardhouse-router shardhouse-loadtest shardhouse-ctl shardhouse-wal-points
LT="$SH_BIN/shardhouse-loadtest"
CTL="$SH_BIN/shardhouse-ctl"
WAL_POINTS="$SH_BIN/shardhouse-wal-points"

scripts/deps.d/s3s-fs.sh || fail "cannot build s3s-fs (scripts/deps.d/s3s-fs.sh)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-backup-test.XXXXXX")
LOAD_PID="" S3_PID="" SCENARIOS=0
cleanup() {
  local rc=$?
  # errexit still holds here: a killed child's status must not end the trap.
  set +e
  [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null && wait "$LOAD_PID" 2>/dev/null
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  [ -n "$S3_PID" ] && kill "$S3_PID" 2>/dev/null && wait "$S3_PID" 2>/dev/null
  if [ "$rc" != 0 ] || [ "${KEEP_DATA:-0}" = 1 ]; then
    log "data kept in $TMP"
  else
    rm -rf "$TMP"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed() {
  SCENARIOS=$((SCENARIOS + 1))
  log "ok $SCENARIOS: $*"
}

# --- the S3 server ------------------------------------------------------------
# The nodes open the destination themselves: they inherit these.
export AWS_ACCESS_KEY_ID=shardhouse AWS_SECRET_ACCESS_KEY=shardhouse-backup-test AWS_REGION=us-east-1
mkdir -p "$TMP/s3/backups"
s3s_start "$TMP/s3" "$TMP/s3.log" || fail "the S3 server did not start"
DEST="s3://backups/cluster-a?endpoint=http://127.0.0.1:$S3_PORT&path_style=true"
OBJECTS="$TMP/s3/backups/cluster-a"
log "s3s-fs on 127.0.0.1:$S3_PORT, destination $DEST"

ctl() { "$CTL" --etcd "$SH_ETCD_ENDPOINT" "$@"; }

# expect_refused WHAT PATTERN CMD...: CMD fails and its output names PATTERN.
expect_refused() {
  local what=$1 pattern=$2
  shift 2
  if "$@" >"$TMP/refused.out" 2>&1; then
    cat "$TMP/refused.out" >&2
    fail "$what: the command succeeded"
  fi
  # One line: an S3 server's error text may span several.
  tr '\n' ' ' <"$TMP/refused.out" >"$TMP/refused.line"
  grep -q -- "$pattern" "$TMP/refused.line" || {
    cat "$TMP/refused.out" >&2
    fail "$what: no error naming '$pattern'"
  }
  log "refused as expected ($what): $(grep -m1 -- "Error" "$TMP/refused.out" || head -n 1 "$TMP/refused.out")"
}

no_manifest() {
  [ ! -e "$OBJECTS/backups/$1.manifest" ] || fail "$2: a manifest for $1 was written"
}

# Points acknowledged so far in an ack log (lines `<first> <count> ...`).
acked_points() { awk '!/^#/ && NF >= 2 { n += $2 } END { print n + 0 }' "$1"; }

# wait_acked FILE N: until FILE holds N acknowledged points (the load runs).
wait_acked() {
  local deadline=$((SECONDS + 120))
  until (($(acked_points "$1" 2>/dev/null || echo 0) >= $2)); do
    kill -0 "$LOAD_PID" 2>/dev/null || fail "steady load exited: $(tail -n 3 "$TMP/steady.err")"
    ((SECONDS < deadline)) || fail "the steady load acknowledged under $2 points in 120 s"
    sleep 0.2
  done
}

# settle_merges: the preload's flushes leave many small parts that chDB
# merges in the background for a while after the load stops. Parts merged
# between two backups are uploaded again (new content): churn, not new
# data, and not what the incremental figure is about. Waits (at most 90 s)
# until every node's active-part gauge, sampled every 10 s, reads the same
# twice in a row.
settle_merges() {
  local deadline=$((SECONDS + 90)) prev="" now k port
  while ((SECONDS < deadline)); do
    now=""
    for ((k = 1; k <= SH_NODES; k++)); do
      port=$(sh_node_http_port "$k")
      now+="$(curl -s "http://127.0.0.1:$port/metrics" | awk '$1 == "shardhouse_engine_parts" { print $2 }') "
    done
    if [ "$now" = "$prev" ]; then
      log "active parts per node settled: $now"
      return 0
    fi
    prev=$now
    sleep 11
  done
  log "active parts still changing after 90 s ($now); b2 may re-upload merged parts"
}

start_cluster() { # DIR NODES RF
  sh_cluster_init "$1" "$2"
  sh_cluster_credential
  sh_start_etcd
  sh_start_nodes "$SHARDS" "$3"
  # shellcheck disable=SC2119 # the router takes no extra flags here
  sh_start_router
  sh_wait_writable "$SH_READY_TIMEOUT" || fail "cluster in $1 never became writable"
}

# --- cluster A: 3 nodes, RF=3, under load --------------------------------------
# Its logs are never compacted, so every entry can be read after the run
# (step 7); B and C run as in service.
SHARDHOUSE_TEST_FAULT_DISK='node=*,keep_log=1' start_cluster "$TMP/a" 3 3

log "preload: ${PRELOAD_SECS}s of $PRELOAD_RATE req/s x $PRELOAD_BATCH points"
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$TMP/preload.acks" --measurement preload \
  --rate "$PRELOAD_RATE" --batch "$PRELOAD_BATCH" --secs "$PRELOAD_SECS" --timeout-ms 10000 \
  >"$TMP/preload.out" 2>"$TMP/preload.err" || fail "preload failed: $(tail -n 3 "$TMP/preload.err")"
log "preload: $(tail -n 1 "$TMP/preload.out")"
settle_merges

# One request at a time (see "Later points" below).
"$LT" ack-load --url "http://$SH_ROUTER_HTTP" --ack-log "$TMP/steady.acks" --measurement steady \
  --series "$STEADY_SERIES" --max-inflight 1 --rate "$RATE" --batch "$BATCH" --secs 3600 --stop-file "$TMP/stop-load" --timeout-ms 10000 \
  >"$TMP/steady.out" 2>"$TMP/steady.err" &
LOAD_PID=$!
# A few seconds of steady writes before b1, so b1 starts mid-load.
wait_acked "$TMP/steady.acks" $((RATE * BATCH * 3))

# Every point acknowledged before b1 starts must be in b1: whole lines only
# (a line is written once its request was acknowledged).
head -n "$(wc -l <"$TMP/steady.acks")" "$TMP/steady.acks" >"$TMP/steady-before-b1.acks"
points_b1=$(($(acked_points "$TMP/preload.acks") + $(acked_points "$TMP/steady-before-b1.acks")))
log "backup b1 during the load ($points_b1 points acknowledged before it)"
ctl backup create --to "$DEST" --id b1 >"$TMP/b1.out" 2>&1 || {
  cat "$TMP/b1.out" >&2
  fail "backup b1 failed"
}
cat "$TMP/b1.out" >&2
passed "backup b1 taken during the load"

# A second database, for `restore --database` (step 10): 50 points
# acknowledged before b2 starts.
other_base=$(($(date +%s) * 1000000000))
other_lines=$(for i in $(seq 50); do echo "om,src=test v=$i $((other_base + i))"; done)
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://$SH_ROUTER_HTTP/write?db=other" \
  --data-binary "$other_lines")
[ "$code" = 204 ] || fail "cannot write to database other (HTTP $code)"

# About 1% more data, then b2.
target=$((points_b1 / 100))
base=$(acked_points "$TMP/steady.acks")
wait_acked "$TMP/steady.acks" $((base + target))
added=$(($(acked_points "$TMP/steady.acks") - base))
head -n "$(wc -l <"$TMP/steady.acks")" "$TMP/steady.acks" >"$TMP/steady-before-b2.acks"
ctl backup create --to "$DEST" --id b2 >"$TMP/b2.out" 2>&1 || {
  cat "$TMP/b2.out" >&2
  fail "backup b2 failed"
}
cat "$TMP/b2.out" >&2

# Incremental: bytes uploaded by b2 against b1's total. Bytes from the
# `complete` lines (MB with one decimal is too coarse for b2's upload).
bytes_of() { sed -n "s/^backup $1 bytes=\([0-9]*\) uploaded_bytes=\([0-9]*\).*/\\$2/p" "$TMP/$1.out"; }
b1_bytes=$(bytes_of b1 1) b2_up=$(bytes_of b2 2)
if [ -z "$b1_bytes" ] || [ -z "$b2_up" ]; then fail "no bytes in the backups' complete lines"; fi
((b1_bytes > 0)) || fail "backup b1 stored no bytes: the shards' parts were not found"
pct=$(python3 -c "print(f'{100 * $b2_up / $b1_bytes:.2f}')")
data_pct=$(python3 -c "print(f'{100 * $added / $points_b1:.2f}')")
log "incremental: b1 $b1_bytes bytes; b2 uploaded $b2_up bytes (${pct}%) after ${data_pct}% more points"
python3 -c "import sys; sys.exit(0 if $b2_up < 0.05 * $b1_bytes else 1)" ||
  fail "backup b2 uploaded $b2_up bytes, not under 5% of b1's $b1_bytes"
passed "incremental upload ${pct}% of b1"

# --- bad destinations: a clear error, no manifest -------------------------------
expect_refused "wrong credentials" "credentials" \
  env AWS_SECRET_ACCESS_KEY=wrong "$CTL" --etcd "$SH_ETCD_ENDPOINT" backup create --to "$DEST" --id bad1
no_manifest bad1 "wrong credentials"
passed "wrong credentials refused"
dead_port=$(sh_free_port)
expect_refused "unreachable destination" "127.0.0.1:$dead_port" \
  ctl backup create --to "s3://backups/x?endpoint=http://127.0.0.1:$dead_port&path_style=true" --id bad2
passed "unreachable destination refused"
expect_refused "another cluster's destination" "holds backups of cluster" \
  ctl --cluster other backup create --to "$DEST" --id bad3
no_manifest bad3 "another cluster's destination"
passed "another cluster's destination refused"

# --- kill -9 of a node during a backup ------------------------------------------
# One shard at a time; node 1 dies once the first shard is stored, so the
# others are backed up with a replica gone (or the backup fails).
head -n "$(wc -l <"$TMP/steady.acks")" "$TMP/steady.acks" >"$TMP/steady-before-b3.acks"
ctl backup create --to "$DEST" --id b3 --parallel-shards 1 >"$TMP/b3.out" 2>&1 &
b3_pid=$!
# Bounded by the ctl's own exit: it either prints a shard line or ends.
until grep -q '^shard ' "$TMP/b3.out" || ! kill -0 "$b3_pid" 2>/dev/null; do sleep 0.05; done
sh_kill9 node-1
log "node 1 killed -9 during backup b3"
if wait "$b3_pid"; then
  cat "$TMP/b3.out" >&2
  [ -e "$OBJECTS/backups/b3.manifest" ] || fail "b3 reported complete but wrote no manifest"
  shards_b3=$(ctl backup list --at "$DEST" | awk '$1 == "b3" { print $2 }')
  [ "$shards_b3" = "$SHARDS" ] || fail "b3's manifest names $shards_b3 shards, not $SHARDS"
  passed "backup b3 finished from the other replicas after a kill -9"
  # Restored below: a backup taken across a kill -9 must hold every point
  # acknowledged before it, like any other.
  RESTORED=b3
else
  cat "$TMP/b3.out" >&2
  grep -q "was not recorded" "$TMP/b3.out" || fail "b3 failed without saying it was not recorded"
  no_manifest b3 "b3 after a kill -9"
  passed "backup b3 failed clearly after a kill -9 and left no manifest"
  RESTORED=b2
fi
ctl backup list --at "$DEST" >&2

touch "$TMP/stop-load"
wait "$LOAD_PID" || true
LOAD_PID=""
log "steady load: $(tail -n 1 "$TMP/steady.out")"

sh_stop_all
# Node 2 was never killed: with node 1 dead it took part in every commit,
# so its log holds every committed entry (the same on every replica).
"$WAL_POINTS" --wal-dir "$TMP/a/node-2/wal" --measurement steady >"$TMP/wal-points.txt" 2>"$TMP/wal-points.err" ||
  fail "cannot read node 2's log: $(cat "$TMP/wal-points.err")"
log "node 2's log: $(tail -n 1 "$TMP/wal-points.err")"
log "destroying cluster A"
rm -rf "$TMP/a"

# --- cluster B: 2 nodes, RF=2 --------------------------------------------------
start_cluster "$TMP/b" 2 2

# A restore that cannot read its destination fails before it touches the
# cluster (the manifest is read first); the restore below needs B empty,
# so it also proves these wrote nothing.
dead_port=$(sh_free_port)
expect_refused "restore from an unreachable destination" "127.0.0.1:$dead_port.*nothing was restored" \
  ctl restore --from "s3://backups/x?endpoint=http://127.0.0.1:$dead_port&path_style=true" --backup b1
passed "restore from an unreachable destination refused"
expect_refused "restore with wrong credentials" "backups/b1.manifest.*credentials.*nothing was restored" \
  env AWS_SECRET_ACCESS_KEY=wrong "$CTL" --etcd "$SH_ETCD_ENDPOINT" restore --from "$DEST" --backup b1
passed "restore with wrong credentials refused"

manifest="$OBJECTS/backups/b1.manifest"
cp "$manifest" "$TMP/b1.manifest"
head -c 2000 "$TMP/b1.manifest" >"$manifest"
expect_refused "truncated manifest" "backups/b1.manifest" ctl restore --from "$DEST" --backup b1
cp "$TMP/b1.manifest" "$manifest"
passed "truncated manifest refused"

# Same length, one digit of shard 0's commit index changed (a hand edit):
# the checksum trailer no longer matches the body.
python3 - "$TMP/b1.manifest" "$manifest" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'"commit_index":\s*(\d)', t)
d = "2" if m.group(1) == "1" else "1"
open(sys.argv[2], "w").write(t[:m.start(1)] + d + t[m.end(1):])
EOF
expect_refused "altered manifest" "backups/b1.manifest.*altered" ctl restore --from "$DEST" --backup b1
cp "$TMP/b1.manifest" "$manifest"
passed "altered manifest refused"

# Shard 0's first object, changed in place: shard 0 is restored first
# (--parallel-shards 1) and is checked before anything is attached.
object=$(python3 -c "
import json,sys
t=open(sys.argv[1]).read().rsplit('\n#xxh3-128 ',1)[0]
m=json.loads(t)
f=[f for t in m['shards'][0]['tables'] for p in t['parts'] for f in p['files'] if f['size']>0][0]
print('objects/%s/%s' % (f['object'][:2], f['object']))" "$TMP/b1.manifest")
cp "$OBJECTS/$object" "$TMP/object.orig"
printf 'X' | dd of="$OBJECTS/$object" bs=1 seek=0 conv=notrunc status=none
expect_refused "tampered object" "$object" ctl restore --from "$DEST" --backup b1 --parallel-shards 1
cp "$TMP/object.orig" "$OBJECTS/$object"
passed "tampered object refused"

# restore --database of a database the backup does not hold: an error naming
# it and the databases it holds, nothing restored (the restore below
# needs B empty). Restoring only the named database is unit-tested
# (shardhouse_backup::Manifest::select_database).
expect_refused "restore of a database the backup lacks" 'holds no database "nope"' \
  ctl restore --from "$DEST" --backup b2 --database nope
passed "restore --database of a missing database refused"
# (restore --database other: cluster C, at the end)

# $RESTORED is restored: b3 and b2 are incremental and name parts merged
# since the backup before by its parts when they can
# (shardhouse_backup::merged), so this also restores those.
# With a download limit of RESTORE_MB_S per node: each of B's 2 nodes holds
# every shard (RF=2) and so downloads all of the backup's bytes; the limiter lends
# one second of bytes, so the restore cannot take less than
# (bytes - 1 s of bytes) / rate.
RESTORE_MB_S=2
restore_t0=$(date +%s.%N)
ctl restore --from "$DEST" --backup "$RESTORED" --max-mb-s "$RESTORE_MB_S" >"$TMP/restore.out" 2>&1 || {
  cat "$TMP/restore.out" >&2
  fail "restore failed"
}
restore_secs=$(python3 -c "import time; print(f'{time.time() - $restore_t0:.1f}')")
cat "$TMP/restore.out" >&2
min_secs=$(python3 -c "print(f'{0.9 * ($b1_bytes / 1e6 - $RESTORE_MB_S) / $RESTORE_MB_S:.1f}')")
python3 -c "import sys; sys.exit(0 if $restore_secs >= $min_secs else 1)" ||
  fail "restore --max-mb-s $RESTORE_MB_S took ${restore_secs}s for $b1_bytes bytes per node: the limit was not kept (at least ${min_secs}s)"
passed "restore --max-mb-s $RESTORE_MB_S kept each node's download rate (${restore_secs}s, at least ${min_secs}s)"
restore_rate=$(sed -n "s/^restore $RESTORED complete: .*, \([0-9.]*\) MB\/s (one copy)\$/\1/p" "$TMP/restore.out")

lost=0
for acks in preload.acks "steady-before-$RESTORED.acks"; do
  "$LT" verify --url "http://$SH_ROUTER_HTTP" --ack-log "$TMP/$acks" --wait-secs 30 \
    >"$TMP/verify-$acks.out" 2>"$TMP/verify-$acks.err" || {
    cat "$TMP/verify-$acks.out" "$TMP/verify-$acks.err" >&2
    fail "points acknowledged before backup $RESTORED missing or duplicated after the restore ($acks)"
  }
  n=$(sed -n 's/.*acked_points_lost=\([0-9]*\).*/\1/p' "$TMP/verify-$acks.out" | tail -n 1)
  lost=$((lost + ${n:-0}))
  log "$acks: $(head -n 1 "$TMP/verify-$acks.out")"
done
passed "restore of $RESTORED into 2 nodes found every point acknowledged before $RESTORED exactly once"

# The manifest's index, point by point. Node 2's log (step 7) names the
# shard and Raft index of every steady point written. A shard's backup is
# its replica's parts frozen right after a flush: they hold exactly the
# rows of the entries at or below the flushed index the manifest records
# (the flushed index moves only past rows written to parts, and no flush
# runs while the parts are frozen). So the restored steady points must be
# exactly the points of entries at or below `flushed_index` of their
# shard (a point sent twice counts at its first entry), each once; and
# every point acknowledged before the backup started must be in an entry at
# or below `commit_index` (the read index the backup took). Acknowledged
# points missing from the log would make the map incomplete: an error too.
curl -s -m 60 -G "http://$SH_ROUTER_HTTP/api/v1/sql?db=shardhouse" \
  --data-urlencode 'q=SELECT v FROM steady FINAL' >"$TMP/steady-restored.json"
later=$(python3 - "$TMP/steady-restored.json" "$TMP/steady.acks" "$TMP/steady-before-$RESTORED.acks" \
  "$OBJECTS/backups/$RESTORED.manifest" "$TMP/wal-points.txt" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
seqs = [int(float(r["v"])) for r in rows]
def acked(path):
    out = set()
    for line in open(path):
        f = line.split()
        if len(f) >= 2 and not line.startswith("#"):
            out.update(range(int(f[0]), int(f[0]) + int(f[1])))
    return out
before, all_acked = acked(sys.argv[3]), acked(sys.argv[2])
body = open(sys.argv[4]).read().rsplit("\n#xxh3-128 ", 1)[0]
shards = {s["shard"]: s for s in json.loads(body)["shards"]}
# seq -> (index, shard) of the first entry carrying it.
first = {}
for line in open(sys.argv[5]):
    shard, index, db, _m, _n, vals = line.split()
    if db != "shardhouse":
        continue
    for v in vals.split(","):
        s = int(v)
        if s not in first or int(index) < first[s][0]:
            first[s] = (int(index), int(shard))
held = set(seqs)
expected = {s for s, (i, sh) in first.items() if i <= shards[sh]["flushed_index"]}
above_commit = sorted(s for s in before if s in first and first[s][0] > shards[first[s][1]]["commit_index"])
unmapped = sorted(all_acked - first.keys())
missing, extra = sorted(expected - held), sorted(held - expected)
dup = len(seqs) - len(held)
later = expected - before
firsts = [f"first_{k}={v[:5]}" for k, v in
          (("missing", missing), ("extra", extra), ("unmapped", unmapped)) if v]
print(f"wal_points={len(first)} expected={len(expected)} held={len(held)} missing={len(missing)} "
      f"extra={len(extra)} duplicated={dup} before_above_commit={len(above_commit)} "
      f"unmapped_acked={len(unmapped)} later_held={len(later)} "
      f"later_acked_held={len(later & all_acked)}", *firsts)
sys.exit(1 if missing or extra or dup or above_commit or unmapped or not first else 0)
EOF
) || fail "restored steady points against the manifest's indexes: $later"
log "steady points against $RESTORED's per-shard indexes: $later"
passed "the restore holds exactly the points of the entries at or below each shard's index"

expect_refused "restore into a non-empty cluster" "not empty" ctl restore --from "$DEST" --backup b1
passed "restore into a non-empty cluster refused"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST "http://$SH_ROUTER_HTTP/write?db=shardhouse" \
  --data-binary "after_restore,src=test ok=1")
[ "$code" = 204 ] || fail "cluster B does not take writes after the restore (HTTP $code)"

# --- cluster C: 1 node, only database "other" of b2 ------------------------------
sh_stop_all
rm -rf "$TMP/b"
# This node creates tables hour first: the backup's parts were sorted
# series first, so the restore must create om (and _samples) in their order.
export SHARDHOUSE_NODE_ENGINE_FACT_ORDER=hour-series-time
start_cluster "$TMP/c" 1 1
unset SHARDHOUSE_NODE_ENGINE_FACT_ORDER
ctl restore --from "$DEST" --backup b2 --database other >"$TMP/restore-other.out" 2>&1 || {
  cat "$TMP/restore-other.out" >&2
  fail "restore --database other failed"
}
cat "$TMP/restore-other.out" >&2
grep -q 'restore database "other" of b2' "$TMP/restore-other.out" ||
  fail "restore --database other did not say what it restores: $(head -n 1 "$TMP/restore-other.out")"
n_other=$(curl -s -G "http://$SH_ROUTER_HTTP/api/v1/sql?db=other" --data-urlencode 'q=SELECT count() AS n FROM om FINAL' |
  python3 -c 'import json, sys; print(sum(int(r["n"]) for r in json.load(sys.stdin)))' 2>/dev/null || echo "?")
[ "$n_other" = 50 ] || fail "restore --database other: $n_other points of om, not 50"
dbs=$(curl -s -G "http://$SH_ROUTER_HTTP/query" --data-urlencode 'q=SHOW DATABASES')
if grep -q '"shardhouse"' <<<"$dbs" || ! grep -q '"other"' <<<"$dbs"; then
  fail "after restore --database other the cluster holds: $dbs"
fi
passed "restore --database other brought back its 50 points and no other database"
# A time range prunes by the sort key: parts read in the wrong order
# would answer it wrong. Points 11..30: count 20, sum 410.
range_q="SELECT count(v), sum(v) FROM om WHERE time >= $((other_base + 11)) AND time <= $((other_base + 30))"
range_ans=$(curl -s -G "http://$SH_ROUTER_HTTP/query?db=other" --data-urlencode "q=$range_q" |
  python3 -c 'import json, sys; v = json.load(sys.stdin)["results"][0]["series"][0]["values"][0]; print(v[1], v[2])' 2>/dev/null || echo "?")
[ "$range_ans" = "20 410" ] ||
  fail "restored series-first om into an hour-first node: count, sum over points 11..30 = $range_ans, not 20 410"
passed "restored parts keep their sort order on a node that sorts otherwise"

b1_rate=$(sed -n 's/^backup b1 complete: .*, \([0-9.]*\) MB\/s$/\1/p' "$TMP/b1.out")
echo "backup_scenarios=$SCENARIOS acked_points_lost=$lost incremental_upload_pct=$pct $later" \
  "points_before_b1=$points_b1 more_points_pct=$data_pct backup_bytes=$b1_bytes" \
  "backup_mb_s=$b1_rate restore_mb_s=$restore_rate nodes=3->2 restored=$RESTORED"
