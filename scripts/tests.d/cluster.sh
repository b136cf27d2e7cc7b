#!/usr/bin/env bash
# `make test` suite: the local cluster end to end, with the real binaries,
# etcd and chDB.
#  1. `make run` smoke: run-local.sh in the background on a temp data dir,
#     write with curl, read back through /api/v1/sql, SIGINT, assert a clean
#     exit and no process left; start again on the same dir and read the
#     points back (the data dir is reused).
#  2. the chaos run, short timings (CHAOS_SHORT=1, ~2-3 min).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${SHARDHOUSE_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/shardhouse/target}/release}
export SHARDHOUSE_BIN=$BIN
fail() { echo "FAIL cluster: $*" >&2; exit 1; }
for b in shardhouse-node shardhouse-router shardhouse-loadtest; do
  [ -x "$BIN/$b" ] || fail "$BIN/$b missing: build with cargo build --release --workspace --bins"
done
command -v etcd >/dev/null || fail "etcd missing: run scripts/install-deps.sh"
CHDB=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}
[ -d "$CHDB" ] || fail "chDB engine missing at $CHDB: run scripts/install-deps.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-cluster-test.XXXXXX")
RUN_PID=""
cleanup() {
  if [ -n "$RUN_PID" ] && kill -0 "$RUN_PID" 2>/dev/null; then
    kill -INT "$RUN_PID" 2>/dev/null || true
    wait "$RUN_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT

# Ports for this test only (make run's defaults may be in use).
export SHARDHOUSE_ROUTER_HTTP_PORT=$(free_port) SHARDHOUSE_ROUTER_GRPC_PORT=$(free_port)
export SHARDHOUSE_ETCD_PORT=$(free_port) SHARDHOUSE_ETCD_PEER_PORT=$(free_port)
export SHARDHOUSE_LOCAL_NODE_PORT_BASE=$((20000 + RANDOM % 20000))
export SHARDHOUSE_DATA="$TMP/data" NODES=3 RF=3 SHARDS=4
ROUTER="http://127.0.0.1:$SHARDHOUSE_ROUTER_HTTP_PORT"

start_cluster() {
  # Job control gives the background script its own process group and keeps
  # SIGINT deliverable to it (non-interactive shells ignore SIGINT in `&` jobs).
  # `env --default-signal=INT` also undoes an ignored SIGINT inherited from
  # whatever started `make test` (a shell cannot trap a signal ignored on
  # entry, so Ctrl-C would never reach run-local.sh's trap).
  set -m
  env --default-signal=INT scripts/run-local.sh >"$TMP/run.out" 2>&1 &
  RUN_PID=$!
  set +m
  local deadline=$((SECONDS + 300))
  until grep -q '^Shardhouse is running' "$TMP/run.out"; do
    kill -0 "$RUN_PID" 2>/dev/null || { cat "$TMP/run.out" >&2; fail "run-local.sh exited before the cluster was up"; }
    ((SECONDS < deadline)) || { cat "$TMP/run.out" >&2; fail "cluster not up after 300 s"; }
    sleep 0.5
  done
}

stop_cluster() {
  local pids
  pids=$(cat "$SHARDHOUSE_DATA"/pids/*.pid 2>/dev/null | tr '\n' ' ')
  [ -n "$pids" ] || fail "no pid files under $SHARDHOUSE_DATA/pids while running"
  kill -INT "$RUN_PID"
  local rc=0
  wait "$RUN_PID" || rc=$?
  RUN_PID=""
  [ "$rc" = 0 ] || { cat "$TMP/run.out" >&2; fail "run-local.sh exited with $rc after SIGINT (want 0)"; }
  local p
  for p in $pids; do
    kill -0 "$p" 2>/dev/null && fail "process $p still running after Ctrl-C"
  done
  grep -q 'stopped; data kept' "$TMP/run.out" || fail "no clean-stop message"
  echo "ok: SIGINT stopped every process ($pids) and exited 0"
}

# The router fans a query out to one replica per shard and returns each
# shard's rows (with a `shard` column), so per-shard counts are summed here.
count_smoke() {
  curl -s -G "$ROUTER/api/v1/sql?db=shardhouse" --data-urlencode 'q=SELECT count() AS n FROM smoke FINAL' |
    python3 -c 'import json,sys; print(sum(int(r["n"]) for r in json.load(sys.stdin)))' 2>/dev/null
}

wait_count() {
  local want=$1 deadline=$((SECONDS + 60)) got=""
  while ((SECONDS < deadline)); do
    got=$(count_smoke || true)
    [ "$got" = "$want" ] && return 0
    sleep 1
  done
  fail "read back count()=$got from smoke, want $want (answer: $(curl -s -G "$ROUTER/api/v1/sql?db=shardhouse" --data-urlencode 'q=SELECT count() AS n FROM smoke FINAL'))"
}

echo "== make run smoke (3 nodes, RF=3) in $SHARDHOUSE_DATA"
start_cluster
code=$(curl -s -o "$TMP/w.out" -w '%{http_code}' -XPOST "$ROUTER/write?db=shardhouse" \
  --data-binary $'smoke,host=a v=1 1700000000000000000\nsmoke,host=b v=2 1700000000000000000\nsmoke,host=a v=3 1700000001000000000')
[ "$code" = 204 ] || fail "write answered $code: $(cat "$TMP/w.out")"
wait_count 3
echo "ok: 3 points written with curl and read back"

# One node dying must not take the local cluster down (it used to).
kill -KILL "$(cat "$SHARDHOUSE_DATA/pids/node-2.pid")"
deadline=$((SECONDS + 30))
until grep -q 'node-2 exited unexpectedly; the other nodes keep serving' "$TMP/run.out"; do
  ((SECONDS < deadline)) || { cat "$TMP/run.out" >&2; fail "run-local.sh did not report the dead node"; }
  kill -0 "$RUN_PID" 2>/dev/null || { cat "$TMP/run.out" >&2; fail "run-local.sh exited when one node died"; }
  sleep 0.5
done
code=""
deadline=$((SECONDS + 60))
until [ "$code" = 204 ]; do
  ((SECONDS < deadline)) || fail "writes fail with one of three nodes down (last $code: $(cat "$TMP/w.out"))"
  code=$(curl -s -o "$TMP/w.out" -w '%{http_code}' -XPOST "$ROUTER/write?db=shardhouse" \
    --data-binary 'smoke,host=c v=4 1700000002000000000' || true)
  [ "$code" = 204 ] || sleep 1
done
kill -0 "$RUN_PID" 2>/dev/null || fail "run-local.sh exited"
SHARDHOUSE_DATA="$SHARDHOUSE_DATA" scripts/restart-node.sh 2 >"$TMP/restart.out" 2>&1 ||
  { cat "$TMP/restart.out" >&2; fail "scripts/restart-node.sh 2 failed"; }
deadline=$((SECONDS + 30))
until grep -q 'node-2 is running again' "$TMP/run.out"; do
  ((SECONDS < deadline)) || { cat "$TMP/run.out" >&2; fail "run-local.sh did not see node-2 back"; }
  sleep 0.5
done
wait_count 4
echo "ok: node-2 killed, the rest kept serving and took a write, node-2 restarted"
stop_cluster

echo "== make run again on the same data dir"
start_cluster
wait_count 4
echo "ok: the second run reuses the data (4 points still there)"
stop_cluster

echo "== chaos (short)"
CHAOS_SHORT=1 scripts/chaos.sh 2>&1 | tee "$TMP/chaos.out"
last=$(tail -n 1 "$TMP/chaos.out")
[[ "$last" =~ ^chaos_scenarios=([0-9]+)\ acked_points_lost=0$ ]] || fail "chaos: $last"
want=6; [ "$(id -u)" = 0 ] && want=9 # the partition and the two full disks need root
[ "${BASH_REMATCH[1]}" -ge "$want" ] || fail "chaos ran ${BASH_REMATCH[1]} scenarios, want $want"
echo "ok: $last"
echo "cluster: 4 passed, 0 failed"
