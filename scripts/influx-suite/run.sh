#!/usr/bin/env bash
# InfluxDB 1.8.10's own server test suite (tests/server_test.go) run over
# HTTP against a server and counted case by case (runner.go beside this
# file). The suite's source is downloaded from the Go module proxy when this
# runs and built in a writable copy under $SHARDHOUSE_CACHE; none of it is
# in this repository.
#
#   run.sh prepare            build the suite's test binary, influxd 1.8.10
#                             and the runner (cached; ~3 min the first time)
#   run.sh reference          run against a fresh influxd: the cases it
#                             passes are the ones counted (cached)
#   run.sh url URL [OUT]      run against a server at URL
#   run.sh cluster [OUT]      start a local cluster as `make run` does
#                             (3 nodes, RF=3, SHARDS shards) and run against it
#
# The last line is `influx_suite passed=N failed=M total=T`, the cases that
# influxd passes; OUT/failures.txt has each failing case with the suite's
# message (expected and actual JSON). The upstream binary is patched in one
# place: its TestMain runs every test once per index type (inmem, tsi1),
# which a remote server does not have, so it runs them once.
#
# Environment: SHARDHOUSE_CACHE, SHARDHOUSE_BIN (the cluster's binaries),
# SHARDS (12), INFLUX_SUITE_PORT_BASE (fixed ports base..base+20 instead of
# free ones). Exit status 3: the suite cannot be built here (no Go, or the
# module proxy refused the version), with the reason on stderr.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VERSION=v1.8.10
MODULE=github.com/influxdata/influxdb
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
DIR=$CACHE/influx-suite/$VERSION
INFLUXD=$CACHE/bin/influxd-${VERSION#v}
log() { echo "[influx-suite] $*" >&2; }
unavailable() { log "cannot build the suite: $*"; exit 3; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
port() { # port N: base+N with INFLUX_SUITE_PORT_BASE, else a free port
  if [ -n "${INFLUX_SUITE_PORT_BASE:-}" ]; then echo $((INFLUX_SUITE_PORT_BASE + $1)); else free_port; fi
}

# The runner is rebuilt when runner.go changes; the suite when this
# script's build steps change (the stamp names both).
runner_stamp() { sha256sum "$HERE/runner.go" | cut -c1-16; }

prepare() {
  command -v go >/dev/null || unavailable "no go on PATH (install Go >= 1.21)"
  mkdir -p "$DIR" "$CACHE/bin"
  if [ ! -x "$DIR/tests.test" ] || [ ! -x "$INFLUXD" ] || [ ! -s "$DIR/tests.txt" ]; then
    local info mod
    info=$(cd "$DIR" && GOFLAGS=-mod=mod go mod download -json "$MODULE@$VERSION" 2>&1) ||
      unavailable "go mod download $MODULE@$VERSION: $info"
    mod=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])' <<<"$info")
    log "building the suite from $mod (a few minutes the first time)"
    rm -rf "$DIR/src"
    cp -r "$mod" "$DIR/src"
    chmod -R u+w "$DIR/src"
    # One pass instead of one per index type (see the header).
    local main="$DIR/src/tests/server_test.go"
    sed -i 's/range tsdb\.RegisteredIndexes() {/range tsdb.RegisteredIndexes()[:1] {/' "$main"
    grep -q 'RegisteredIndexes()\[:1\]' "$main" || unavailable "TestMain's index loop not found in $main"
    grep -oE '^func Test[A-Za-z0-9_]+\(t \*testing\.T\)' "$main" | sed -E 's/^func (Test[A-Za-z0-9_]+).*/\1/' >"$DIR/tests.txt.new"
    (cd "$DIR/src" && GOFLAGS=-mod=mod go test -c -o "$DIR/tests.test.new" ./tests) || unavailable "go test -c ./tests failed"
    (cd "$DIR/src" && GOFLAGS=-mod=mod go build -tags uint -o "$INFLUXD.new" ./cmd/influxd) || unavailable "go build ./cmd/influxd failed"
    mv "$DIR/tests.txt.new" "$DIR/tests.txt"
    mv "$DIR/tests.test.new" "$DIR/tests.test"
    mv "$INFLUXD.new" "$INFLUXD"
    rm -rf "$DIR/reference"
  fi
  if [ ! -x "$DIR/runner" ] || [ "$(cat "$DIR/runner.stamp" 2>/dev/null)" != "$(runner_stamp)" ]; then
    rm -rf "$DIR/runner-src"
    mkdir -p "$DIR/runner-src"
    cp "$HERE/runner.go" "$DIR/runner-src/main.go"
    printf 'module shardhouse/influx-suite\n\ngo 1.21\n' >"$DIR/runner-src/go.mod"
    (cd "$DIR/runner-src" && go build -o "$DIR/runner" .) || unavailable "building runner.go failed"
    runner_stamp >"$DIR/runner.stamp"
  fi
}

# Against Shardhouse, two estimation tests are not run: they write 100,000
# measurements and 500,000 series, which a cluster that keeps a table per
# measurement on every replica does not take in the minutes `make test`
# has; their 4 cases count as failed (docs/api.md).
HEAVY='^(TestServer_Query_ShowMeasurementCardinalityEstimation|TestServer_Query_ShowSeriesCardinalityEstimation)$'

# run_against URL OUT [REFERENCE [SKIP]]
run_against() {
  local ref=()
  [ -z "${3:-}" ] || ref=(-reference "$3")
  [ -z "${4:-}" ] || ref+=(-skip "$4")
  "$DIR/runner" -bin "$DIR/tests.test" -url "$1" -tests "$DIR/tests.txt" -out "$2" "${ref[@]}"
}

# A fresh influxd with the settings the suite's own servers use (no
# reporting, no _internal database), stopped on return.
reference() {
  prepare
  if [ -s "$DIR/reference/results.tsv" ]; then
    log "reference: cached $DIR/reference/results.tsv"
    return 0
  fi
  local tmp http pid status=0
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/influx-suite-influxd.XXXXXX")
  http=$(port 2)
  "$INFLUXD" config 2>/dev/null | python3 -c '
import sys
tmp, http, rpc = sys.argv[1:4]
c = sys.stdin.read()
c = c.replace("reporting-disabled = false", "reporting-disabled = true")
c = c.replace("bind-address = \"127.0.0.1:8088\"", "bind-address = \"127.0.0.1:%s\"" % rpc)
c = c.replace("\"/root/.influxdb/", "\"%s/" % tmp).replace("store-enabled = true", "store-enabled = false")
c = c.replace("  bind-address = \":8086\"", "  bind-address = \"127.0.0.1:%s\"" % http)
c = c.replace("log-enabled = true", "log-enabled = false")
print(c)' "$tmp" "$http" "$(port 3)" >"$tmp/influxd.conf"
  grep -q "127.0.0.1:$http" "$tmp/influxd.conf" || { log "influxd config: [http] bind-address not set"; exit 1; }
  "$INFLUXD" run -config "$tmp/influxd.conf" >"$tmp/influxd.log" 2>&1 &
  pid=$!
  local deadline=$((SECONDS + 60))
  until curl -fsS -m 2 "http://127.0.0.1:$http/ping" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$tmp/influxd.log" >&2; log "influxd exited"; exit 1; }
    ((SECONDS < deadline)) || { kill "$pid"; log "influxd not up after 60 s"; exit 1; }
    sleep 0.2
  done
  log "reference run against influxd ${VERSION#v} at 127.0.0.1:$http"
  run_against "http://127.0.0.1:$http" "$tmp/out" || status=$?
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if [ "$status" = 0 ]; then
    mkdir -p "$DIR/reference"
    cp "$tmp/out/results.tsv" "$tmp/out/failures.txt" "$DIR/reference/"
  fi
  rm -rf "$tmp"
  return "$status"
}

# A cluster as `make run` starts it, on loopback, stopped on return.
cluster() {
  local out=$1 tmp status=0
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/influx-suite-cluster.XXXXXX")
  (
    cd "$ROOT"
    # shellcheck source=scripts/lib/cluster.sh
    source scripts/lib/cluster.sh
    trap 'sh_stop_all; rm -rf "$tmp"' EXIT
    if [ -n "${INFLUX_SUITE_PORT_BASE:-}" ]; then
      mkdir -p "$tmp/data"
      {
        echo "SH_ETCD_CLIENT_PORT=$(port 4)"
        echo "SH_ETCD_PEER_PORT=$(port 5)"
        echo "SH_ROUTER_HTTP_PORT=$(port 6)"
        echo "SH_ROUTER_GRPC_PORT=$(port 7)"
        for k in 1 2 3; do
          echo "SH_NODE_${k}_GRPC_PORT=$(port $((8 + 2 * k)))"
          echo "SH_NODE_${k}_HTTP_PORT=$(port $((9 + 2 * k)))"
        done
      } >"$tmp/data/ports.env"
    fi
    sh_cluster_init "$tmp/data" 3
    sh_cluster_credential
    sh_require_bins shardhouse-node shardhouse-router
    sh_start_etcd
    sh_start_nodes "${SHARDS:-12}" 3
    sh_start_router
    sh_wait_writable || sh_die "the cluster does not take writes"
    log "running against a 3-node RF=3 cluster (${SHARDS:-12} shards) at $SH_ROUTER_HTTP"
    run_against "http://$SH_ROUTER_HTTP" "$out" "$DIR/reference/results.tsv" "$HEAVY"
  ) || status=$?
  return "$status"
}

cmd=${1:-}
case "$cmd" in
  prepare) prepare ;;
  reference) reference ;;
  url)
    [ -n "${2:-}" ] || { echo "usage: $0 url URL [OUT]" >&2; exit 2; }
    reference
    run_against "$2" "${3:-${TMPDIR:-/tmp}/influx-suite-out}" "$DIR/reference/results.tsv" "${INFLUX_SUITE_SKIP:-}"
    ;;
  cluster)
    reference
    cluster "${2:-${TMPDIR:-/tmp}/influx-suite-out}"
    ;;
  *)
    sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
