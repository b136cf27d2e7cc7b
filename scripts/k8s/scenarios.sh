#!/usr/bin/env bash
# `make test-k8s` scenarios, run by scripts/k8s/run.sh inside the cluster's
# network namespace (KUBECONFIG and K8S_* set by scripts/k8s/cluster.sh):
#
#   1. install: `helm install` of the chart with the operator (its own
#      ServiceAccount and ClusterRole) and a ShardhouseCluster (3 nodes,
#      RF 3, managed etcd) from the images of `make images`; everything
#      Ready; `kubectl get shc` columns and conditions; ingest through the
#      router Service at a fixed rate (no moves: the baseline) and read back
#      every acknowledged point.
#   2. scale-out: nodes.replicas 3 -> 5 while writing: shards move onto the
#      new pods; 0 failed writes, every acknowledged point read back.
#   3. scale-in: 5 -> 3 while writing: drained first, then shrunk (the
#      drained pods' volumes deleted); same checks.
#   4. upgrade: node and router images rebuilt under a new tag, spec.image.tag
#      changed while writing: one node pod at a time, its leaderships moved
#      first, the next only once the last is Ready (caught up); same checks.
#   5. pod delete: `kubectl delete pod` of the node leading the most shards
#      while writing; no acknowledged point lost.
#   6. backup and restore: a ShardhouseBackup (run now by its annotation)
#      takes a backup to a real S3 server (s3s-fs on the node's address,
#      credentials from a Secret given to the operator and the node pods)
#      while writing; a new ShardhouseCluster of 1 node at RF 1 and a
#      ShardhouseRestore bring it back: every point acknowledged before the
#      backup started is there, once. Both with spec.maxMbPerSecond; the
#      restore's (about 6 s of the backup's bytes) is checked by its duration.
#   7. delete: the ShardhouseCluster goes, and with it every object it owns
#      and every PVC (the finalizer; local PVs are Retain: Released, data
#      kept on disk); `helm uninstall` leaves the namespace empty.
# At the end every phase's acknowledged points are read back once more.
# Last line: k8s_scenarios=<N> failed_writes=<N> acked_points_lost=<N>
# Figures (offered/acked/failed/lost, p95) go to $K8S_RESULTS (JSON lines).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
SH_BIN=${SHARDHOUSE_BIN:-$CARGO_TARGET_DIR/release}
D=${K8S_DIR:?run through scripts/k8s/run.sh}
W=$D/scenarios
mkdir -p "$W"
RESULTS=${K8S_RESULTS:-$W/results.jsonl}
: >"$RESULTS"

NS=shardhouse
C=sh
TAG=$K8S_IMAGE_TAG
REG=$K8S_IMAGE_REGISTRY
RATE=${K8S_RATE:-40}      # requests/s, open model
BATCH=${K8S_BATCH:-100}   # points per request
BASELINE_SECS=${K8S_BASELINE_SECS:-40}
MAX_LOAD_SECS=${K8S_MAX_LOAD_SECS:-900}

log() { echo "[k8s-test $(date +%T)] $*" >&2; }
fail() { echo "[k8s-test] FAIL: $*" >&2; exit 1; }
k() { kubectl -n "$NS" "$@"; }

scenarios=0
failed_total=0
lost_total=0
LOADS=()

wait_until() { # SECS WHAT CMD...
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs)) t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what: not after ${secs}s"
    sleep 2
  done
  log "$what ($((SECONDS - t0)) s)"
}

shc() { k get shc "$C" -o "jsonpath=$1"; }
shc_settled() { # NODES: Running, n/n ready, every shard healthy, no moves
  local n=$1
  [ "$(shc '{.status.phase}')" = Running ] &&
    [ "$(shc '{.status.nodesReady}')" = "$n/$n" ] &&
    [ "$(shc '{.status.shardsHealthy}')" = "$SHARDS/$SHARDS" ] &&
    [ "$(shc '{.status.pendingMoves}')" = 0 ] &&
    [ "$(shc '{.status.observedGeneration}')" = "$(shc '{.metadata.generation}')" ]
}
node_shards() { # "id:shards:leaders ..." from the status
  shc '{range .status.nodeShards[*]}{.nodeId}:{.shards}:{.leaders} {end}'
}
pods_ready() { # LABEL-SELECTOR COUNT
  local got
  got=$(k get pods -l "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True || true)
  [ "$got" = "$2" ] && [ "$(k get pods -l "$1" --no-headers 2>/dev/null | wc -l)" = "$2" ]
}

# --- load: the project's load generator, open model at a fixed rate,
# recording every acknowledged point; 429/503 are retried (counted).
load_start() { # NAME [SECS]
  local name=$1 secs=${2:-$MAX_LOAD_SECS}
  rm -f "$W/$name.stop"
  "$SH_BIN/shardhouse-loadtest" ack-load --url "$ROUTER" --ack-log "$W/$name.acks" \
    --measurement "k8s_$name" --series 64 --rate "$RATE" --batch "$BATCH" \
    --secs "$secs" --stop-file "$W/$name.stop" --max-inflight 256 --retries 20 \
    --timeout-ms 30000 --json "$W/$name.json" >"$W/$name.out" 2>"$W/$name.err" &
  echo $! >"$W/$name.pid"
  LOADS+=("$name")
  sleep 3
  kill -0 "$(cat "$W/$name.pid")" 2>/dev/null || { cat "$W/$name.err" >&2; fail "load generator $name exited at once"; }
}
load_stop() { # NAME: end the run, read every acknowledged point back
  local name=$1 pid
  pid=$(cat "$W/$name.pid")
  touch "$W/$name.stop"
  wait "$pid" || { cat "$W/$name.err" >&2; fail "load generator $name failed"; }
  log "$name: $(cat "$W/$name.out")"
  verify "$name"
  python3 - "$W/$name.json" "$name" "$lost" "$RESULTS" "${2:-}" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j.update(phase=sys.argv[2], lost=int(sys.argv[3]), note=sys.argv[5])
open(sys.argv[4], "a").write(json.dumps(j) + "\n")
PY
  local failed
  # Failed: never acknowledged (after retries), plus requests the open
  # model could not even send (the client's in-flight cap was full).
  failed=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["failed"] + j["dropped"])' "$W/$name.json")
  failed_total=$((failed_total + failed))
  lost_total=$((lost_total + lost))
  ((failed == 0)) || log "WARNING: $name: $failed writes failed (not acknowledged): $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["errors"])' "$W/$name.json")"
  ((lost == 0)) || fail "$name: $lost acknowledged points lost"
}
lost=0
verify() { # NAME: every acknowledged point of that run is stored, once
  local out
  out=$("$SH_BIN/shardhouse-loadtest" verify --url "$ROUTER" --ack-log "$W/$1.acks" --wait-secs 120 2>"$W/$1.verify.err") || true
  lost=$(sed -n 's/^acked_points_lost=//p' <<<"$out")
  [ -n "$lost" ] || { cat "$W/$1.verify.err" >&2; fail "verify $1: no verdict"; }
  log "verify $1: $(head -1 <<<"$out") lost=$lost"
}

on_exit() {
  local rc=$? n
  rm -f "$CACHE"/images/shardhouse-*-"${NEWTAG:-none}".oci.tar{,.inputs,.tmp} 2>/dev/null
  for n in "${LOADS[@]}"; do
    [ -f "$W/$n.pid" ] && kill "$(cat "$W/$n.pid")" 2>/dev/null || true
  done
  [ -n "${WATCH_PID:-}" ] && kill "$WATCH_PID" 2>/dev/null || true
  [ -n "${S3_PID:-}" ] && kill "$S3_PID" 2>/dev/null || true
  if ((rc != 0)); then
    log "failed: operator log tail"
    k logs deploy/shardhouse-operator --tail=40 >&2 2>/dev/null || true
    k get shc,pods,pvc -o wide >&2 2>/dev/null || true
  fi
  exit "$rc"
}
trap on_exit EXIT

for b in shardhouse-loadtest shardhouse-ctl; do
  [ -x "$SH_BIN/$b" ] || fail "$SH_BIN/$b missing: cargo build --release --workspace --bins"
done

###########################################################################
log "1. install: helm install (operator + ShardhouseCluster: 3 nodes, RF 3, managed etcd)"
t_install=$SECONDS
SHARDS=${K8S_SHARDS:-6}
cat >"$W/values.yaml" <<EOF
image:
  registry: $REG
  tag: "$TAG"
  pullPolicy: Never
operator:
  logLevel: info,kube=warn,shardhouse_operator=debug
  backupCredentialsSecret: backup-s3
cluster:
  enabled: true
  name: $C
  spec:
    shardCount: $SHARDS
    replicationFactor: 3
    nodes:
      replicas: 3
      cores: 1
      memory: 1536Mi
      backupCredentialsSecret: backup-s3
      # a 2-core machine runs 5 node pods: reserve little, cap memory
      resources:
        requests: {cpu: 100m, memory: 256Mi}
        limits: {memory: 1536Mi}
      storage: {size: 5Gi, storageClassName: $K8S_STORAGE_CLASS}
    routers:
      replicas: 1
      cores: 1
      memory: 512Mi
      resources:
        requests: {cpu: 100m, memory: 128Mi}
        limits: {memory: 512Mi}
    etcd:
      image: $REG/shardhouse-etcd:$TAG
      storageSize: 1Gi
EOF
# Backups (scenario 6): a real S3 server on the node's address, which pods
# reach like the API server; its credentials in a Secret that the chart
# gives the operator and the cluster gives its node pods.
S3S=$CACHE/bin/s3s-fs-0.14.1
"$ROOT/scripts/deps.d/s3s-fs.sh" || fail "cannot build s3s-fs (scripts/deps.d/s3s-fs.sh)"
S3_KEY=shardhouse S3_SECRET=shardhouse-k8s-backup S3_PORT=9000
mkdir -p "$W/s3/backups"
"$S3S" --host "$K8S_NODE_IP" --port "$S3_PORT" --access-key "$S3_KEY" --secret-key "$S3_SECRET" \
  "$W/s3" >"$W/s3.log" 2>&1 &
S3_PID=$!
BACKUP_DEST="s3://backups/k8s?endpoint=http://$K8S_NODE_IP:$S3_PORT&path_style=true"
kubectl create namespace "$NS" >/dev/null
k create secret generic backup-s3 --from-literal=AWS_ACCESS_KEY_ID="$S3_KEY" \
  --from-literal=AWS_SECRET_ACCESS_KEY="$S3_SECRET" --from-literal=AWS_REGION=us-east-1 >/dev/null
helm install shardhouse "$ROOT/charts/shardhouse" -n "$NS" --create-namespace \
  -f "$W/values.yaml" --wait --timeout 5m >"$W/helm-install.out"
log "helm: $(grep -E '^(STATUS|REVISION)' "$W/helm-install.out" | tr '\n' ' ')"
wait_until 600 "ShardhouseCluster Running, 3/3 nodes, $SHARDS/$SHARDS shards" shc_settled 3
wait_until 120 "router Ready" pods_ready "app.kubernetes.io/component=router" 1
wait_until 60 "etcd Ready" pods_ready "app.kubernetes.io/component=etcd" 1
log "install took $((SECONDS - t_install)) s"

# kubectl get shc: the printer columns and the conditions
k get shc | tee "$W/get-shc.txt" >&2
head -1 "$W/get-shc.txt" | grep -qE 'NAME +PHASE +NODES +SHARDS +AGE' || fail "kubectl get shc columns: $(head -1 "$W/get-shc.txt")"
grep -qE "^$C +Running +3/3 +$SHARDS/$SHARDS " "$W/get-shc.txt" || fail "kubectl get shc row"
conds=$(shc '{range .status.conditions[*]}{.type}={.status} {end}')
log "conditions: $conds"
for want in Ready=True Progressing=False Degraded=False ReplicasHealthy=True Rebalancing=False; do
  grep -qw "$want" <<<"$conds" || fail "condition $want missing in: $conds"
done
k get pods -o wide >&2

# The operator runs as the chart's ServiceAccount, bound to the chart's
# ClusterRole only (not an admin token).
sa=$(k get deploy shardhouse-operator -o jsonpath='{.spec.template.spec.serviceAccountName}')
[ "$sa" = shardhouse ] || fail "operator ServiceAccount is $sa"
as="system:serviceaccount:$NS:$sa"
kubectl auth can-i --as="$as" patch statefulsets -n "$NS" >/dev/null || fail "$as cannot patch statefulsets"
! kubectl auth can-i --as="$as" '*' '*' >/dev/null 2>&1 || fail "$as is a cluster admin"
# Secrets: the operator creates <cluster>-cluster-token once and gets the
# cluster token by name to present it to nodes (spec.security.clusterToken);
# it can neither enumerate Secrets nor change or delete one.
for verb in list watch update patch delete; do
  ! kubectl auth can-i --as="$as" "$verb" secrets -n "$NS" >/dev/null 2>&1 || fail "$as can $verb secrets"
done
bindings=$(kubectl get clusterrolebindings,rolebindings -A -o json | python3 -c '
import json, sys
sa = sys.argv[1].split(":")
for b in json.load(sys.stdin)["items"]:
    for s in b.get("subjects") or []:
        if s.get("kind") == "ServiceAccount" and s.get("name") == sa[3] and s.get("namespace") == sa[2]:
            print(b["kind"] + "/" + b["metadata"]["name"] + "->" + b["roleRef"]["name"])
' "$as")
[ "$bindings" = "ClusterRoleBinding/shardhouse->shardhouse" ] || fail "operator bindings: $bindings"
if k logs deploy/shardhouse-operator | grep -i forbidden >&2; then fail "the operator hit RBAC denials"; fi
log "operator runs as $as with $bindings only; no RBAC denials"

# Pod settings a real cluster needs
pod=$C-node-0
k get pod "$pod" -o json >"$W/node-pod.json"
python3 - "$W/node-pod.json" <<'PY' || fail "node pod spec"
import json, sys
p = json.load(open(sys.argv[1]))["spec"]
sc = p["securityContext"]
assert sc["fsGroupChangePolicy"] == "OnRootMismatch", sc
assert "podAntiAffinity" in p["affinity"], p.get("affinity")
c = p["containers"][0]
for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
    assert probe in c, probe
assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
PY
# fsGroup took effect on the volume (the kubelet chowned its root once)
owner=$(k exec "$pod" -- busybox stat -c %g /var/lib/shardhouse)
[ "$owner" = 65532 ] || fail "data volume group is $owner, want fsGroup 65532"
log "node pod: fsGroup 65532 on the volume, OnRootMismatch, anti-affinity, startup/liveness/readiness probes"

ROUTER_IP=$(k get svc "$C-router" -o jsonpath='{.spec.clusterIP}')
ROUTER=http://$ROUTER_IP:8086
ETCD=http://$(k get pod "$C-etcd-0" -o jsonpath='{.status.podIP}'):2379
ctl() { "$SH_BIN/shardhouse-ctl" --etcd "$ETCD" --cluster "$C" "$@"; }
ctl status >&2
log "ingest through the router Service $ROUTER: $RATE req/s x $BATCH points, ${BASELINE_SECS}s (no moves: baseline)"
load_start baseline "$BASELINE_SECS"
sleep "$BASELINE_SECS"
load_stop baseline "no shard moves"
scenarios=$((scenarios + 1))

###########################################################################
log "2. scale-out: nodes.replicas 3 -> 5 while writing"
load_start scale_out
sleep 5
t=$SECONDS
k patch shc "$C" --type merge -p '{"spec":{"nodes":{"replicas":5}}}' >/dev/null
wait_until 900 "5/5 nodes, moves done" shc_settled 5
log "scale-out took $((SECONDS - t)) s; per node id:shards:leaders $(node_shards)"
for id in 4 5; do
  n=$(node_shards | tr ' ' '\n' | awk -F: -v id=$id '$1==id {print $2}')
  [ "${n:-0}" -gt 0 ] || fail "node $id holds no shard after scale-out: $(node_shards)"
done
# balanced: replica counts per node differ by at most one
spread=$(node_shards | tr ' ' '\n' | awk -F: 'NF==3 {if (min=="" || $2<min) min=$2; if ($2>max) max=$2} END {print max-min}')
[ "$spread" -le 1 ] || fail "replicas not balanced after scale-out: $(node_shards)"
sleep 5
load_stop scale_out "3 -> 5 nodes"
scenarios=$((scenarios + 1))

###########################################################################
log "3. scale-in: nodes.replicas 5 -> 3 while writing (drain first)"
load_start scale_in
sleep 5
t=$SECONDS
k patch shc "$C" --type merge -p '{"spec":{"nodes":{"replicas":3}}}' >/dev/null
# while draining, the StatefulSet keeps 5 pods
sleep 3
[ "$(k get sts "$C-node" -o jsonpath='{.spec.replicas}')" = 5 ] || log "note: StatefulSet already shrunk after 3 s"
wait_until 900 "3/3 nodes, drained and shrunk" shc_settled 3
wait_until 120 "pods $C-node-3 and -4 gone" bash -c "! kubectl -n $NS get pod $C-node-3 $C-node-4 2>/dev/null | grep -q node"
wait_until 120 "their volumes deleted (whenScaled: Delete)" bash -c "! kubectl -n $NS get pvc data-$C-node-3 data-$C-node-4 2>/dev/null | grep -q data"
for id in 4 5; do
  n=$(node_shards | tr ' ' '\n' | awk -F: -v id=$id '$1==id {print $2}')
  [ "${n:-0}" = 0 ] || fail "node $id still holds $n shards: $(node_shards)"
done
log "scale-in took $((SECONDS - t)) s; per node $(node_shards)"
sleep 5
load_stop scale_in "5 -> 3 nodes"
scenarios=$((scenarios + 1))

###########################################################################
NEWTAG=$TAG-up$$
log "4. rolling upgrade to $NEWTAG while writing"
t=$SECONDS
SHARDHOUSE_IMAGE_TAG=$NEWTAG SHARDHOUSE_IMAGE_REGISTRY=$REG SHARDHOUSE_IMAGE_LABEL="upgrade-$(date +%s)" \
  "$ROOT/scripts/images.sh" node router >&2
for img in node router; do
  $K8S_CTR images import "$CACHE/images/shardhouse-$img-$NEWTAG.oci.tar" >/dev/null
  # imported: the archive (~600 MB for the node) is not needed again
  rm -f "$CACHE/images/shardhouse-$img-$NEWTAG.oci.tar" "$CACHE/images/shardhouse-$img-$NEWTAG.oci.tar.inputs"
done
log "images rebuilt and imported ($((SECONDS - t)) s)"
# Watch the node pods once a second: name uid image ready terminating
(
  while :; do
    ts=$(date +%s.%N)
    kubectl -n "$NS" get pods -l app.kubernetes.io/component=node -o json 2>/dev/null |
      python3 -c '
import json, sys
ts = sys.argv[1]
for p in json.load(sys.stdin)["items"]:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
    print(ts, p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["containers"][0]["image"],
          int(ready), int("deletionTimestamp" in p["metadata"]))
' "$ts"
    sleep 1
  done
) >"$W/upgrade-watch.txt" 2>/dev/null &
WATCH_PID=$!
load_start upgrade
sleep 5
t=$SECONDS
k patch shc "$C" --type merge -p "{\"spec\":{\"image\":{\"tag\":\"$NEWTAG\"}}}" >/dev/null
all_new() {
  [ "$(k get pods -l app.kubernetes.io/component=node -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | grep -c ":$NEWTAG$")" = 3 ] &&
    shc_settled 3 && pods_ready app.kubernetes.io/component=router 1 &&
    [ "$(k get pods -l app.kubernetes.io/component=router -o jsonpath='{.items[0].spec.containers[0].image}')" = "$REG/shardhouse-router:$NEWTAG" ]
}
wait_until 1200 "every pod on $NEWTAG, Running" all_new
log "upgrade took $((SECONDS - t)) s"
sleep 5
kill "$WATCH_PID" 2>/dev/null || true
WATCH_PID=
# the operator's events, oldest first (events.k8s.io: eventTime has microseconds)
kubectl -n "$NS" get events.events.k8s.io -o json | python3 -c '
import json, sys
evs = [e for e in json.load(sys.stdin)["items"] if e.get("regarding", {}).get("kind") == "ShardhouseCluster"]
evs.sort(key=lambda e: e.get("eventTime") or e["metadata"]["creationTimestamp"])
for e in evs:
    print(e.get("eventTime") or e["metadata"]["creationTimestamp"], e.get("reason"), e.get("note"))
' >"$W/events.txt"
python3 - "$W/upgrade-watch.txt" "$W/events.txt" "$NEWTAG" <<'PY' || fail "rolling upgrade order"
import re, sys
watch, events, tag = sys.argv[1:]
snaps = {}
for line in open(watch):
    ts, name, uid, image, ready, term = line.split()
    snaps.setdefault(float(ts), []).append((name, uid, image, ready == "1", term == "1"))
order, seen_uid, worst = [], {}, 0
for ts in sorted(snaps):
    pods = snaps[ts]
    down = [n for n, u, i, r, t in pods if t or not r]
    worst = max(worst, len(down) + max(0, 3 - len(pods)))
    for n, u, i, r, t in pods:
        if n in seen_uid and seen_uid[n] != u and n not in order:
            order.append(n)
        seen_uid[n] = u
print(f"upgrade: restart order {order}, at most {worst} node pod(s) down at once")
assert worst <= 1, f"{worst} node pods were down at the same time"
assert sorted(order) == ["sh-node-0", "sh-node-1", "sh-node-2"], order
ev = open(events).read()
for n in order:
    nid = int(n.rsplit("-", 1)[1]) + 1
    up = [m.start() for m in re.finditer(rf"restarting {n} \(node {nid}\)", ev)]
    tl = [m.start() for m in re.finditer(rf"leaderships off node {nid} ", ev)]
    assert up, f"no UpgradePod event for {n}"
    assert tl and min(tl) < up[0], f"{n} restarted before its leaderships moved"
print("upgrade: each pod's leaderships moved before its restart; the next pod only after the last was Ready")
PY
load_stop upgrade "rolling upgrade, 3 node pods and the router"
scenarios=$((scenarios + 1))

###########################################################################
log "5. kubectl delete pod of the node leading the most shards, while writing"
victim_id=$(node_shards | tr ' ' '\n' | awk -F: 'NF==3 {print $3, $1}' | sort -rn | head -1 | cut -d' ' -f2)
victim=$C-node-$((victim_id - 1))
log "victim: $victim (node $victim_id) leads $(node_shards | tr ' ' '\n' | awk -F: -v id="$victim_id" '$1==id {print $3}') shards"
load_start pod_delete
sleep 5
t=$SECONDS
old_uid=$(k get pod "$victim" -o jsonpath='{.metadata.uid}')
k delete pod "$victim" --wait=false >/dev/null
wait_until 120 "$victim recreated" bash -c "[ \"\$(kubectl -n $NS get pod $victim -o jsonpath='{.metadata.uid}')\" != $old_uid ]"
wait_until 600 "$victim Ready again, cluster Running" shc_settled 3
log "pod delete: back in $((SECONDS - t)) s"
sleep 5
load_stop pod_delete "delete the pod of node $victim_id"
scenarios=$((scenarios + 1))

###########################################################################
log "6. backup while writing (ShardhouseBackup to S3), restore into 1 node at RF 1 (ShardhouseRestore)"
t=$SECONDS
load_start backup
# Whole lines only: a line is written once its request was acknowledged.
head -n "$(wc -l <"$W/backup.acks")" "$W/backup.acks" >"$W/backup-before.acks"
cat <<EOF | kubectl apply -f - >/dev/null
apiVersion: shardhouse.dev/v1alpha1
kind: ShardhouseBackup
metadata:
  name: nightly
  namespace: $NS
  annotations:
    shardhouse.dev/backup-now: "1"
spec:
  clusterRef: $C
  schedule: "30 3 * * *"
  destination: "$BACKUP_DEST"
  retention: {keep: 3}
  credentialsSecret: backup-s3
  maxMbPerSecond: 5
EOF
shb() { k get shb nightly -o "jsonpath=$1"; }
backup_done() { [ -n "$(shb '{.status.lastSuccessTime}')" ]; }
wait_until 300 "ShardhouseBackup nightly succeeded" backup_done
sleep 3
load_stop backup "a backup taken meanwhile"
id=$(shb '{.status.lastBackup}')
log "backup $id: $(shb '{.status.conditions[?(@.type=="Ready")].message}'), $(shb '{.status.lastDurationSeconds}') s"
k get shb nightly >&2
[ "$(shb '{.status.shards[*].shard}' | wc -w)" = "$SHARDS" ] || fail "backup status names shards $(shb '{.status.shards[*].shard}'), want $SHARDS"
(($(shb '{.status.lastSizeBytes}') > 0)) || fail "backup status: size $(shb '{.status.lastSizeBytes}')"
kubectl -n "$NS" get events --field-selector involvedObject.name=nightly -o jsonpath='{.items[*].reason}' |
  grep -qw BackupSucceeded || fail "no BackupSucceeded Event for nightly"
[ -e "$W/s3/backups/k8s/backups/$id.manifest" ] || fail "no manifest $id at the S3 server: $(find "$W/s3" -maxdepth 4 | head)"
# The restore's download limit (spec.maxMbPerSecond, per node): about 6 s
# for the backup's bytes on the restored cluster's one node, whatever their
# size; the limiter lends one second of bytes, so the restore cannot take
# less than (MB - rate) / rate seconds (checked below).
size=$(shb '{.status.lastSizeBytes}')
# Seconds from one RFC 3339 time to another (jiff writes nanoseconds,
# Python reads at most microseconds).
secs_between() {
  python3 - "$1" "$2" <<'PY'
import re, sys
from datetime import datetime
def t(s):
    s = re.sub(r"\.(\d+)", lambda m: "." + (m.group(1) + "000000")[:6], s)
    return datetime.fromisoformat(s.replace("Z", "+00:00"))
print(f"{(t(sys.argv[2]) - t(sys.argv[1])).total_seconds():.1f}")
PY
}
restore_mb_s=$(python3 -c "print(max(0.1, round($size / 1e6 / 6, 1)))")

R=restored
cat <<EOF | kubectl apply -f - >/dev/null
apiVersion: shardhouse.dev/v1alpha1
kind: ShardhouseCluster
metadata:
  name: $R
  namespace: $NS
spec:
  image: {registry: $REG, tag: "$TAG", pullPolicy: Never}
  shardCount: $SHARDS
  replicationFactor: 1
  nodes:
    replicas: 1
    cores: 1
    memory: 1536Mi
    backupCredentialsSecret: backup-s3
    resources:
      requests: {cpu: 100m, memory: 256Mi}
      limits: {memory: 1536Mi}
    storage: {size: 5Gi, storageClassName: $K8S_STORAGE_CLASS}
  routers:
    replicas: 1
    cores: 1
    memory: 512Mi
    resources:
      requests: {cpu: 100m, memory: 128Mi}
      limits: {memory: 512Mi}
  etcd:
    image: $REG/shardhouse-etcd:$TAG
    storageSize: 1Gi
---
apiVersion: shardhouse.dev/v1alpha1
kind: ShardhouseRestore
metadata:
  name: $R-from-nightly
  namespace: $NS
spec:
  clusterRef: $R
  source: "$BACKUP_DEST"
  backupId: "$id"
  credentialsSecret: backup-s3
  maxMbPerSecond: $restore_mb_s
EOF
shr() { k get shr "$R-from-nightly" -o "jsonpath=$1"; }
restore_done() { case $(shr '{.status.phase}') in Succeeded | Failed) return 0 ;; esac; return 1; }
wait_until 600 "ShardhouseRestore $R-from-nightly done" restore_done
[ "$(shr '{.status.phase}')" = Succeeded ] || fail "restore: $(shr '{.status.phase}'): $(shr '{.status.message}')"
k get shr >&2
log "restore: $(shr '{.status.message}')"
restore_secs=$(secs_between "$(shr '{.status.startTime}')" "$(shr '{.status.completionTime}')")
min_secs=$(python3 -c "print(f'{0.9 * ($size / 1e6 - $restore_mb_s) / $restore_mb_s:.1f}')")
python3 -c "import sys; sys.exit(0 if $restore_secs >= $min_secs else 1)" ||
  fail "ShardhouseRestore maxMbPerSecond $restore_mb_s: $size bytes in ${restore_secs}s, the limit did not reach the node (at least ${min_secs}s)"
log "restore at maxMbPerSecond $restore_mb_s: $size bytes in ${restore_secs}s (at least ${min_secs}s)"
ROUTER_MAIN=$ROUTER
ROUTER=http://$(k get svc "$R-router" -o jsonpath='{.spec.clusterIP}'):8086
# Every phase before this one, and the acks of this one before the backup.
for n in "${LOADS[@]/#backup/backup-before}"; do
  verify "$n"
  ((lost == 0)) || fail "restore of $id: $lost points acknowledged before the backup started are missing (ack log $n)"
done
ROUTER=$ROUTER_MAIN
k delete shr "$R-from-nightly" >/dev/null
k delete shc "$R" --wait=true --timeout=300s >/dev/null
k delete shb nightly >/dev/null
log "backup and restore took $((SECONDS - t)) s"
scenarios=$((scenarios + 1))

###########################################################################
log "every acknowledged point of every phase, read back again"
for n in "${LOADS[@]}"; do
  verify "$n"
  ((lost == 0)) || fail "$n: $lost acknowledged points lost by the end"
done

###########################################################################
log "7. delete the ShardhouseCluster"
t=$SECONDS
owned() {
  kubectl -n "$NS" get statefulsets,deployments,services,configmaps,poddisruptionbudgets,pods,pvc \
    -l "app.kubernetes.io/instance=$C" --no-headers 2>/dev/null
}
pvs_before=$(kubectl get pv -o jsonpath='{range .items[?(@.spec.claimRef.namespace=="'$NS'")]}{.metadata.name} {end}')
k delete shc "$C" --wait=true --timeout=300s >/dev/null
wait_until 300 "every owned object gone" bash -c "[ -z \"\$(kubectl -n $NS get statefulsets,deployments,services,configmaps,poddisruptionbudgets,pods,pvc -l app.kubernetes.io/instance=$C --no-headers 2>/dev/null)\" ]"
for pv in $pvs_before; do
  phase=$(kubectl get pv "$pv" -o jsonpath='{.status.phase}' 2>/dev/null || echo deleted)
  log "volume $pv after the delete: $phase"
  case $phase in Released|deleted|Available) ;; *) fail "PV $pv is $phase after its claim was deleted" ;; esac
done
log "ShardhouseCluster deleted in $((SECONDS - t)) s: StatefulSets, Deployment, Services, ConfigMaps, PDB, pods and PVCs gone"
helm uninstall shardhouse -n "$NS" --wait >/dev/null
leftovers() {
  k get all,configmaps,serviceaccounts,roles,rolebindings --no-headers 2>/dev/null |
    grep -v -e '^configmap/kube-root-ca.crt' -e '^serviceaccount/default' || true
}
ns_empty() { [ -z "$(leftovers)" ]; }
# helm's --wait does not wait for the operator's pod to finish terminating
ns_empty || sleep 5
ns_empty || log "still in $NS after helm uninstall: $(leftovers | tr -s ' ' | paste -sd';' -)"
wait_until 120 "namespace $NS empty after helm uninstall" ns_empty
! kubectl get clusterrole shardhouse >/dev/null 2>&1 || fail "ClusterRole left after helm uninstall"
k delete secret backup-s3 >/dev/null
scenarios=$((scenarios + 1))

log "results (JSON lines): $RESULTS"
cat "$RESULTS" >&2
echo "k8s_scenarios=$scenarios failed_writes=$failed_total acked_points_lost=$lost_total"
