#!/usr/bin/env bash
# Operator packaging checks run by `make test` after cargo test:
#   1. the committed CRD and install bundle match what crdgen / the chart render
#   2. helm lint of the chart
#   3. dashboards are valid JSON and every metric a panel queries is exported
#      by a running shardhouse-node, shardhouse-router and shardhouse-operator
# (The chart's server-side dry run runs in `cargo test -p shardhouse-operator`,
# against the kube-apiserver that test starts.)
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
BIN=$CARGO_TARGET_DIR/release
HELM=$CACHE/bin/helm
fail() { echo "operator.sh: FAIL: $*" >&2; exit 1; }
log() { echo "[operator.sh] $*" >&2; }

[ -x "$HELM" ] || fail "helm missing at $HELM: run scripts/install-deps.sh"
for b in crdgen shardhouse-operator; do
  [ -x "$BIN/$b" ] || cargo build --release -p shardhouse-operator --bins >&2
done

# --- 1. generated files are committed as generated
log "CRD drift"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
"$BIN/crdgen" >"$tmp/crd.yaml"
for f in manifests/crds/shardhouseclusters.shardhouse.dev.yaml charts/shardhouse/crds/shardhouseclusters.shardhouse.dev.yaml; do
  diff -u "$f" "$tmp/crd.yaml" >&2 || fail "$f differs from crdgen output: run operator/gen.sh"
done
log "install bundle drift"
operator/gen.sh --check "$tmp/install.yaml" || fail "manifests/install.yaml is stale: run operator/gen.sh"

# --- 2. chart lint
log "helm lint"
"$HELM" lint --strict charts/shardhouse >&2 || fail "helm lint"
"$HELM" lint --strict charts/shardhouse --set cluster.enabled=true >&2 || fail "helm lint (cluster.enabled)"

# --- 3. dashboards: valid JSON, metric names exported for real
log "dashboards"
metrics="$tmp/metrics.txt"
: >"$metrics"

"$BIN/shardhouse-operator" --print-metrics >>"$metrics" || fail "shardhouse-operator --print-metrics"

wait_ready() { # file pid what
  for _ in $(seq 1 600); do
    grep -q '^READY ' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1" "$1.err" >&2 || true; fail "$3 exited before READY"; }
    sleep 0.1
  done
  fail "$3 not READY after 60s"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

source_desc="docs/contracts.md"
if [ -x "$BIN/shardhouse-node" ] && [ -x "$BIN/shardhouse-router" ]; then
  source_desc="running shardhouse-node, shardhouse-router and shardhouse-operator"
  command -v etcd >/dev/null || fail "etcd missing: run scripts/install-deps.sh"
  export SHARDHOUSE_CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}
  [ -e "$SHARDHOUSE_CHDB_DIR/chdb/_chdb.abi3.so" ] || fail "chDB engine missing at $SHARDHOUSE_CHDB_DIR: run scripts/install-deps.sh"
  ep=$(free_port); pp=$(free_port)
  etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$ep" --advertise-client-urls "http://127.0.0.1:$ep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" >"$tmp/etcd.log" 2>&1 &
  pids+=($!)
  "$BIN/shardhouse-node" --node-id 1 --data-dir "$tmp/node1" --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
    --etcd-endpoints "http://127.0.0.1:$ep" --cluster dashcheck --init-cluster shards=2,rf=1,nodes=1 \
    >"$tmp/node.out" 2>"$tmp/node.out.err" &
  pids+=($!)
  wait_ready "$tmp/node.out" "${pids[-1]}" shardhouse-node
  "$BIN/shardhouse-router" --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 \
    --etcd-endpoints "http://127.0.0.1:$ep" --cluster dashcheck >"$tmp/router.out" 2>"$tmp/router.out.err" &
  pids+=($!)
  wait_ready "$tmp/router.out" "${pids[-1]}" shardhouse-router
  node_http=$(sed -n 's/^READY .*http=\([^ ]*\).*/\1/p' "$tmp/node.out")
  router_http=$(sed -n 's/^READY .*http=\([^ ]*\).*/\1/p' "$tmp/router.out")
  # Labelled series only appear once used: write points and send one bad
  # request so every stage has observed something.
  for _ in 1 2 3; do
    curl -s -o /dev/null -X POST "http://$router_http/write?db=dash" --data-binary $'cpu,host=a v=1\ncpu,host=b v=2' || true
  done
  curl -s -o /dev/null -X POST "http://$router_http/write?db=dash" --data-binary 'not line protocol' || true
  curl -sf "http://$router_http/metrics" >>"$metrics" || fail "router /metrics"
  curl -sf "http://$node_http/metrics" >>"$metrics" || fail "node /metrics"
else
  log "shardhouse-node/shardhouse-router not built: checking router/node names against docs/contracts.md"
  python3 - >>"$metrics" <<'PY'
import re
for line in open("docs/contracts.md"):
    m = re.match(r"\|\s*\w+\s*\|\s*`(shardhouse_[a-z0-9_]+)`\s*\|\s*(\w+)", line)
    if not m or m.group(1).startswith("shardhouse_operator_"):
        continue
    name, kind = m.groups()
    for n in ([name + s for s in ("_bucket", "_sum", "_count")] if kind == "histogram" else [name]):
        print(n, 0)
PY
fi

python3 - "$metrics" "$source_desc" charts/shardhouse/dashboards/*.json <<'PY'
import json, re, sys
metrics_file, source, *dashboards = sys.argv[1:]
exported = set()
for line in open(metrics_file):
    if line.startswith("# TYPE "):
        exported.add(line.split()[2])
    elif line.strip() and not line.startswith("#"):
        exported.add(re.split(r"[{ ]", line, 1)[0])
missing, total = [], 0
for path in dashboards:
    try:
        d = json.load(open(path))
    except ValueError as e:
        sys.exit(f"{path}: invalid JSON: {e}")
    assert d.get("panels"), f"{path}: no panels"
    for p in d["panels"]:
        assert p.get("targets"), f"{path}: panel {p.get('title')!r} has no queries"
        for t in p["targets"]:
            for name in re.findall(r"\bshardhouse_[a-z0-9_]+", t.get("expr", "")):  # InfluxQL targets have none
                total += 1
                if name not in exported:
                    missing.append(f"{path}: panel {p['title']!r}: {name}")
if missing:
    sys.exit("metrics queried by dashboards but not exported (" + source + "):\n  " + "\n  ".join(missing))
print(f"[operator.sh] {len(dashboards)} dashboards, {total} metric references, all exported by {source}", file=sys.stderr)
PY
log "ok"
