#!/usr/bin/env bash
# `make bench-operator-scale`: the operator reconciling a 100-node
# ShardhouseCluster on a real API server (issue 18, "control plane at scale").
#
# Real parts: etcd, kube-apiserver, kube-controller-manager (StatefulSet,
# Deployment, PV binding), kube-scheduler, the CRD, the shardhouse-operator
# binary. Fake parts: kwok runs NODES+1 Nodes (one spare so the scale step's
# pod can be placed: node pods prefer distinct hosts) and moves their pods to
# Running/Ready; the node processes never run. The script stands in for them
# in etcd: a shard map of SHARDS shards (RF 3) over NODES nodes (balanced, as
# after a finished rebalance) is written before the cluster is applied, and
# each node registers under /shardhouse/<cluster>/nodes/ once its pod is
# placed. The registered addresses answer nothing:
#   NODE_ADDRS=refused    127.0.0.1:<closed port>, connections fail at once
#   NODE_ADDRS=hung       a local listener that accepts and never answers
#                         (stuck node processes): every call waits for its timeout
# so every step that calls a node (health scrape, shard moves) fails.
#
# Measured (per phase: apply -> Ready, steady state, scale NODES -> NODES+1):
#   - each reconcile's duration and Kubernetes API requests, from the
#     operator's own log line (the counting layer around its kube client);
#   - independently, the API server's audit log: requests made as the
#     operator's user, counted per phase and inside each reconcile's window.
# Prints a table and as its LAST lines:
#   operator_<NODES>_nodes_ready_secs=<N>   apply -> phase Running, nodes N/N
#   operator_reconcile_p50_ms=<N>  operator_reconcile_p95_ms=<N>   (all phases)
#   operator_api_calls_per_reconcile=<N>    median, operator's own count
# Knobs: NODES (100), SHARDS (4096, the CRD's maximum), NODE_ADDRS (refused),
# STEADY_SECS (75: one settled requeue is 60 s), SCALE_SECS (60), OUT, KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
NODES=${NODES:-100}
SHARDS=${SHARDS:-4096}
NODE_ADDRS=${NODE_ADDRS:-refused}
STEADY_SECS=${STEADY_SECS:-75}
SCALE_SECS=${SCALE_SECS:-60}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-bench-operator.XXXXXX")}
mkdir -p "$OUT"/{logs,pids,pki}
export SH_DATA=$OUT
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
log() { echo "[bench-operator-scale] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
BIN=$CACHE/bin
NS=bench
NAME=scale

# --- tools: kwok (bench-deps/kwok.sh), the control plane (deps.d/kube.sh), the
# scheduler (scripts/k8s/deps.sh builds it with the kubelet).
bash scripts/bench-deps/kwok.sh
[ -x "$BIN/kwok" ] || die "kwok not installed: $(cat "$BIN/.kwok.skipped" 2>/dev/null || echo 'run scripts/bench-deps/kwok.sh')"
[ -x "$BIN/kube-apiserver" ] || bash scripts/deps.d/kube.sh
[ -x "$BIN/kube-scheduler" ] || bash scripts/k8s/deps.sh
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run scripts/install-deps.sh and scripts/k8s/deps.sh"
done
command -v kubectl >/dev/null || die "kubectl not on PATH"
command -v etcdctl >/dev/null || die "etcdctl not found: apt-get install etcd-client"
OPERATOR=$CARGO_TARGET_DIR/release/shardhouse-operator
CTL=$CARGO_TARGET_DIR/release/shardhouse-ctl
# Rebuilt only when a source is newer than the binary: a build waits on
# cargo's lock while other builds run.
if [ ! -x "$OPERATOR" ] || [ ! -x "$CTL" ] ||
  [ -n "$(find operator/src common/src operator/Cargo.toml -newer "$OPERATOR" -print -quit)" ]; then
  cargo build --release -p shardhouse-operator --bin shardhouse-operator --bin shardhouse-ctl >&2
fi

cleanup() {
  for p in operator kwok kube-scheduler kube-controller-manager kube-apiserver registrar hung-nodes; do sh_stop "$p" 5; done
  sh_stop etcd 5
  if [ "${KEEP:-0}" = 1 ]; then log "kept $OUT"; else rm -rf "$OUT"; fi
}
trap cleanup EXIT

# --- control plane
SH_ETCD_PORT=$(sh_free_port)
SH_ETCD_PEER_PORT=$(sh_free_port)
SH_ETCD_ENDPOINT=http://127.0.0.1:$SH_ETCD_PORT
sh_start_etcd
export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=$SH_ETCD_ENDPOINT

pki=$OUT/pki
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
ADMIN_TOKEN=$(openssl rand -hex 16)
OP_TOKEN=$(openssl rand -hex 16)
# The operator has its own user so the audit log can tell its requests apart.
printf '%s,admin,admin,system:masters\n%s,shardhouse-operator,op,system:masters\n' \
  "$ADMIN_TOKEN" "$OP_TOKEN" >"$pki/tokens.csv"
cat >"$pki/audit.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: [shardhouse-operator]
- level: None
EOF
API_PORT=$(sh_free_port)
sh_spawn kube-apiserver "" "$BIN/kube-apiserver" \
  --etcd-servers="$SH_ETCD_ENDPOINT" --secure-port="$API_PORT" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --cert-dir="$pki/certs" \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --token-auth-file="$pki/tokens.csv" --authorization-mode=RBAC \
  --service-cluster-ip-range=10.96.0.0/16 --enable-priority-and-fairness=false \
  --audit-policy-file="$pki/audit.yaml" --audit-log-path="$OUT/audit.log" \
  --audit-log-format=json --audit-log-mode=blocking
kubeconfig() { # FILE TOKEN
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: b, cluster: {server: "https://127.0.0.1:$API_PORT", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: "$2"}}]
contexts: [{name: b, context: {cluster: b, user: u, namespace: $NS}}]
current-context: b
EOF
}
kubeconfig "$OUT/admin.kubeconfig" "$ADMIN_TOKEN"
kubeconfig "$OUT/operator.kubeconfig" "$OP_TOKEN"
export KUBECONFIG=$OUT/admin.kubeconfig
deadline=$((SECONDS + 120))
until [ "$(kubectl get --raw /readyz 2>/dev/null)" = ok ]; do
  sh_alive kube-apiserver || { tail -20 "$OUT/logs/kube-apiserver.log" >&2; die "kube-apiserver exited"; }
  ((SECONDS < deadline)) || die "kube-apiserver not ready after 120 s"
  sleep 0.5
done
log "kube-apiserver ready on :$API_PORT"
sh_spawn kube-controller-manager "" "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
  --controllers=statefulset,deployment,replicaset,garbagecollector,serviceaccount,persistentvolume-binder,nodelifecycle \
  --leader-elect=false --secure-port=0 --service-account-private-key-file="$pki/sa.key"
sh_spawn kube-scheduler "" "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG" \
  --leader-elect=false --bind-address=127.0.0.1 --secure-port="$(sh_free_port)"
# kwok's client-go (0.33) lists by watch stream, which needs etcd's
# RequestWatchProgress (etcd >= 3.4.31; Debian's is 3.4.23): plain lists.
sh_spawn kwok "" env KUBE_FEATURE_WatchListClient=false "$BIN/kwok" --kubeconfig="$KUBECONFIG" --manage-all-nodes=false \
  --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
  --cidr=10.0.0.0/16 --node-ip=10.0.0.1 --node-lease-duration-seconds=40

# --- fake Nodes (NODES+1), a PersistentVolume each (node pods' data claims)
# The node lifecycle controller lifts the not-ready taint new Nodes get.
fake_nodes=$((NODES + 1))
python3 - "$fake_nodes" >"$OUT/nodes.yaml" <<'PY'
import sys
for i in range(int(sys.argv[1])):
    print(f"""---
apiVersion: v1
kind: Node
metadata:
  name: kwok-{i}
  annotations: {{kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}}
  labels: {{kubernetes.io/hostname: kwok-{i}, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}}
status:
  allocatable: {{cpu: "32", memory: 256Gi, pods: "110"}}
  capacity: {{cpu: "32", memory: 256Gi, pods: "110"}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{i}}}
spec:
  capacity: {{storage: 20Gi}}
  accessModes: [ReadWriteOnce]
  storageClassName: kwok-local
  persistentVolumeReclaimPolicy: Delete
  hostPath: {{path: /nonexistent/kwok-{i}}}""")
# Bound by the scheduler when it places the pod (as with local volumes), so
# no pod waits in the scheduler's unschedulable queue for a bound claim.
print("""---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kwok-local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer""")
PY
kubectl apply -f "$OUT/nodes.yaml" >/dev/null
kubectl create namespace "$NS" >/dev/null
kubectl apply -f manifests/crds/shardhouseclusters.shardhouse.dev.yaml >/dev/null
kubectl wait --for=condition=Established crd/shardhouseclusters.shardhouse.dev --timeout=60s >/dev/null
deadline=$((SECONDS + 120))
untainted() { kubectl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.spec.taints}{"\n"}{end}' | grep -c '^$'; }
until [ "$(kubectl get nodes -l type=kwok --no-headers 2>/dev/null | grep -cw Ready)" -ge "$fake_nodes" ] &&
  [ "$(untainted 2>/dev/null)" -ge "$fake_nodes" ]; do
  ((SECONDS < deadline)) || die "kwok did not make $fake_nodes Nodes Ready and untainted in 120 s (log: $OUT/logs/kwok.log)"
  sleep 1
done
log "$fake_nodes kwok Nodes Ready, untainted"

# --- the cluster's metadata in etcd, as the node processes would leave it
case $NODE_ADDRS in
  refused) dead=$(sh_free_port); addr() { echo "127.0.0.1:$dead"; } ;;
  hung)
    dead=$(sh_free_port)
    sh_spawn hung-nodes "" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4096)
held = []
while True:
    held.append(s.accept()[0])  # accepted, never read nor answered
    held = held[-2000:]
' "$dead"
    addr() { echo "127.0.0.1:$dead"; } ;;
  *) die "NODE_ADDRS must be refused or hung" ;;
esac
node_info() { printf '{"node_id":%d,"grpc_addr":"%s","http_addr":"%s","cores":2}' "$1" "$(addr "$1")" "$(addr "$1")"; }
{
  for ((id = 1; id <= NODES; id++)); do node_info "$id"; echo; done
} | python3 -c '
import json, sys
shards, nodes = int(sys.argv[1]), [json.loads(l) for l in sys.stdin if l.strip()]
ids = [n["node_id"] for n in nodes]
rf = 3
placements = []
for s in range(shards):
    r = [ids[(s + i) % len(ids)] for i in range(rf)]
    placements.append({"shard": s, "replicas": r, "learners": [], "leader_hint": r[0]})
json.dump({"epoch": 1, "shard_count": shards, "replication_factor": rf, "shards": placements,
           "nodes": {str(n["node_id"]): n for n in nodes}}, sys.stdout)
' "$SHARDS" >"$OUT/shardmap.json"
etcdctl put "/shardhouse/$NAME/shardmap" <"$OUT/shardmap.json" >/dev/null
# Settle it as a finished rebalance would: the project's planner
# (shardhouse-ctl rebalance --dry-run) names the moves, applied here to the
# JSON, until it plans none; the operator then has nothing to move.
node_ids=$(seq -s, 1 "$NODES")
for round in $(seq 1 50); do
  "$CTL" --etcd "$SH_ETCD_ENDPOINT" --cluster "$NAME" rebalance --dry-run --nodes "$node_ids" >"$OUT/plan.txt"
  grep -q '{' "$OUT/plan.txt" || break
  ((round < 50)) || die "the planner still plans moves after 50 rounds: $OUT/plan.txt"
  python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
for line in open(sys.argv[2]):
    if "{" not in line:
        continue
    mv = json.loads(line[line.index("{"):])
    p, n = m["shards"][mv["shard"]], mv.get("node")
    op = mv["op"]
    if op == "add_learner": p["learners"].append(n)
    elif op == "promote_learner": p["learners"].remove(n); p["replicas"].append(n)
    elif op == "remove_replica":
        p["replicas"].remove(n)
        if p["leader_hint"] == n: p["leader_hint"] = p["replicas"][0]
    elif op == "transfer_leader": p["leader_hint"] = mv["to"]
    else: sys.exit(f"unknown move {line}")
m["epoch"] += 1
json.dump(m, open(sys.argv[1], "w"))
' "$OUT/shardmap.json" "$OUT/plan.txt"
  etcdctl put "/shardhouse/$NAME/shardmap" <"$OUT/shardmap.json" >/dev/null
done
log "shard map: $SHARDS shards, RF 3, $NODES nodes, balanced after $((round - 1)) planner rounds ($(wc -c <"$OUT/shardmap.json") bytes)"

# A node registers once its pod is placed: the real process registers on
# start, before its /ready passes (kwok makes a placed pod Ready at once).
cat >"$OUT/registrar.sh" <<EOF
set -u
$(declare -f addr node_info)
dead=${dead:-0}
while sleep 1; do
  kubectl -n $NS get pods -l app.kubernetes.io/component=node -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName}{"\n"}{end}' 2>/dev/null |
  while read -r pod placed; do
    [ -n "\$placed" ] || continue
    id=\$(( \${pod##*-} + 1 ))
    [ -e "$OUT/registered.\$id" ] && continue
    # in parallel, as node processes register on their own
    { node_info "\$id" | etcdctl put "/shardhouse/$NAME/nodes/\$id" >/dev/null && date +%s.%N >"$OUT/registered.\$id"; } &
  done
  wait
done
EOF
sh_spawn registrar "" bash "$OUT/registrar.sh"

# --- the operator
sh_spawn operator "" env KUBECONFIG="$OUT/operator.kubeconfig" NO_COLOR=1 \
  RUST_LOG="info,kube=warn,shardhouse_operator::controller=debug" \
  "$OPERATOR" --http-listen 127.0.0.1:0
line=$(sh_wait_ready operator '^READY ') || die "operator did not start"
OP_HTTP=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' <<<"$line")
log "operator up (metrics http://$OP_HTTP/metrics)"

mark() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ >"$OUT/mark.$1"; }
status() { kubectl -n "$NS" get shc "$NAME" -o jsonpath='{.status.phase} {.status.nodesReady} {.status.shardsHealthy}' 2>/dev/null || true; }

# --- phase 1: apply -> Running
mark apply
t0=$(date +%s.%N)
kubectl apply -f - >/dev/null <<EOF
apiVersion: shardhouse.dev/v1alpha1
kind: ShardhouseCluster
metadata: {name: $NAME, namespace: $NS}
spec:
  shardCount: $SHARDS
  replicationFactor: 3
  nodes: {replicas: $NODES, storage: {storageClassName: kwok-local}}
  etcd: {endpoints: ["$SH_ETCD_ENDPOINT"]}
EOF
deadline=$((SECONDS + 600))
while :; do
  st=$(status)
  [ "$st" = "Running $NODES/$NODES $SHARDS/$SHARDS" ] && break
  ((SECONDS < deadline)) || die "not Running after 600 s (status: $st; log: $OUT/logs/operator.log)"
  sh_alive operator || die "operator exited (log: $OUT/logs/operator.log)"
  sleep 0.25
done
ready_secs=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
log "Running after ${ready_secs}s: $(status)"

# --- phase 2: steady state (nothing changes; the settled requeue is 60 s)
mark steady
sleep "$STEADY_SECS"
log "steady: $(status)"

# --- phase 3: one scale step, NODES -> NODES+1
mark scale
kubectl -n "$NS" patch shc "$NAME" --type merge -p "{\"spec\":{\"nodes\":{\"replicas\":$((NODES + 1))}}}" >/dev/null
sleep "$SCALE_SECS"
mark end
log "after the scale step (${SCALE_SECS}s): $(status)"
kubectl -n "$NS" get events --field-selector involvedObject.kind=ShardhouseCluster \
  -o custom-columns=TYPE:.type,REASON:.reason,COUNT:.count,MESSAGE:.message --no-headers >"$OUT/events.txt" 2>/dev/null || true
curl -s "http://$OP_HTTP/metrics" >"$OUT/operator-metrics.txt" || true
kubectl get --raw /metrics >"$OUT/apiserver-metrics.txt" 2>/dev/null || true

# --- analysis: operator log lines and the audit log, per phase
python3 - "$OUT" "$NODES" "$ready_secs" "$NODE_ADDRS" <<'PY'
import json, re, sys, glob, os
from datetime import datetime, timedelta
out, nodes, ready_secs, addrs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def ts(s):
    return datetime.strptime(s.rstrip("Z")[:26], "%Y-%m-%dT%H:%M:%S.%f")
marks = {k: ts(open(f"{out}/mark.{k}").read().strip()) for k in ("apply", "steady", "scale", "end")}
phases = [("apply->Running", marks["apply"], marks["steady"]),
          ("steady state", marks["steady"], marks["scale"]),
          (f"scale {nodes}->{nodes+1}", marks["scale"], marks["end"])]
ansi = re.compile(r"\x1b\[[0-9;]*m")
runs = []  # (start, end, ms, api_requests, ok)
for line in open(f"{out}/logs/operator.log", errors="replace"):
    line = ansi.sub("", line)
    if "reconcile finished" not in line:
        continue
    m = re.match(r"(\S+)\s", line)
    f = dict(re.findall(r"(\w+)=(\S+)", line))
    end = ts(m.group(1))
    ms = float(f["ms"])
    runs.append((end - timedelta(milliseconds=ms), end, ms, int(f["api_requests"]), f.get("ok") == "true"))
audit = []
for line in open(f"{out}/audit.log"):
    e = json.loads(line)
    # watches complete when they end (minutes later): not a reconcile's
    if e.get("user", {}).get("username") != "shardhouse-operator" or e.get("stage") != "ResponseComplete" \
            or e["verb"] == "watch":
        continue
    audit.append((ts(e["requestReceivedTimestamp"]), e["verb"], e["objectRef"].get("resource", ""), e["objectRef"].get("subresource", "")))
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else 0
print(f"\nOperator on kwok: {nodes} nodes, node addresses {addrs}")
print(f"{'phase':<18} {'reconciles':>10} {'failed':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'API/rec (own)':>13} {'API/rec (audit)':>15} {'audit reqs':>10} {'audit reqs/s':>12}")
all_ms, all_calls = [], []
for name, a, b in phases:
    rs = [r for r in runs if a <= r[1] < b]
    ms = [r[2] for r in rs]; calls = [r[3] for r in rs]
    in_rec = [sum(1 for t, *_ in audit if r[0] <= t <= r[1]) for r in rs]
    reqs = [x for x in audit if a <= x[0] < b]
    secs = (b - a).total_seconds()
    all_ms += ms; all_calls += calls
    print(f"{name:<18} {len(rs):>10} {sum(1 for r in rs if not r[4]):>6} {pct(ms,50):>8.0f} {pct(ms,95):>8.0f} {max(ms or [0]):>8.0f} "
          f"{pct(calls,50):>13} {pct(in_rec,50):>15} {len(reqs):>10} {len(reqs)/secs:>12.2f}")
    kinds = {}
    for _, verb, res, sub in reqs:
        k = f"{verb} {res}{'/' + sub if sub else ''}"
        kinds[k] = kinds.get(k, 0) + 1
    print("    " + ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
print("\nevents (ShardhouseCluster):")
print(open(f"{out}/events.txt").read().rstrip() or "  none")
print()
print(f"operator_{nodes}_nodes_ready_secs={ready_secs}")
print(f"operator_reconcile_p50_ms={pct(all_ms,50):.0f}")
print(f"operator_reconcile_p95_ms={pct(all_ms,95):.0f}")
print(f"operator_api_calls_per_reconcile={pct(all_calls,50)}")
PY
