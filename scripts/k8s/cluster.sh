#!/usr/bin/env bash
# The inside of scripts/k8s/run.sh: runs in the cluster's network namespace
# (and a private mount namespace). Starts the node, imports the images, runs
# "$@" (or an interactive shell), stops everything it started.
#
# Exported to the command: KUBECONFIG (cluster admin), K8S_DIR (state),
# K8S_NODE_IP, K8S_NODE_NAME, K8S_CTR (`ctr` bound to this containerd),
# K8S_IMAGE_REGISTRY, K8S_IMAGE_TAG, K8S_STORAGE_CLASS (local volumes that
# honour fsGroup), PATH with $SHARDHOUSE_CACHE/bin first.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin
D=${K8S_DIR:?run through scripts/k8s/run.sh}
ID=${K8S_ID:?}
export PATH=$BIN:$PATH

NODE_IP=10.250.0.1
NODE_NAME=$ID
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
API_SERVICE_IP=10.96.0.1
K8S_VERSION=$(cat "$BIN/.kubelet.version" 2>/dev/null || echo unknown)

log() { echo "[k8s $(date +%T)] $*" >&2; }
die() { echo "[k8s] ERROR: $*" >&2; exit 1; }
for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy coredns helm; do
  [ -x "$BIN/$b" ] || die "$BIN/$b missing: run scripts/k8s/deps.sh (and scripts/deps.d/kube.sh)"
done
for b in etcd containerd runc ctr iptables busybox buildah kubectl openssl; do
  command -v "$b" >/dev/null || die "$b missing: run scripts/k8s/deps.sh"
done
[ -x /usr/lib/cni/bridge ] || die "CNI plugins missing: apt-get install containernetworking-plugins"

mkdir -p "$D"/{pids,logs,pki,etcd,containerd,kubelet,cni/net.d,cni/ipam,pv}
SOCK=$D/containerd/containerd.sock
ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }
KUBECONFIG=$D/admin.kubeconfig
export KUBECONFIG

# --- processes
STARTED=()
start() { # NAME CMD...: background, logged, PID recorded
  local name=$1
  shift
  "$@" >"$D/logs/$name.log" 2>&1 &
  echo $! >"$D/pids/$name.pid"
  STARTED+=("$name")
}
stop_all() {
  local i name pid
  # reverse start order; the kubelet first stops nothing else by itself
  for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
    name=${STARTED[$i]}
    pid=$(cat "$D/pids/$name.pid" 2>/dev/null) || continue
    if [ "$name" = containerd ]; then stop_pods; fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$D/pids/$name.pid"
  done
}
# Every container process lives in the kubelet's cgroup root: kill them by
# PID, then their shims go too.
stop_pods() {
  local pids
  for _ in 1 2 3; do
    pids=$(find /sys/fs/cgroup/pids/"$ID" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -un)
    [ -n "$pids" ] || break
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.5
  done
  # shims exit when their tasks are gone; ask containerd to clean up
  local t
  for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
}
on_exit() {
  local rc=$?
  set +e
  if ((rc != 0)) && [ "${K8S_DUMP_ON_FAIL:-1}" = 1 ]; then
    log "failed (exit $rc): cluster state"
    kubectl get nodes,pods,pvc,svc -A -o wide 2>&1 | head -60 >&2
    kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -30 >&2
    for f in "$D"/logs/*.log; do
      echo "--- tail $f" >&2
      tail -5 "$f" >&2
    done
  fi
  log "stopping the cluster"
  stop_all
  exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_for() { # SECONDS WHAT CMD...
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs)) name
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready after ${secs}s"
    for name in "${STARTED[@]}"; do
      kill -0 "$(cat "$D/pids/$name.pid")" 2>/dev/null || die "$name exited (waiting for $what): $(tail -3 "$D/logs/$name.log")"
    done
    sleep 0.5
  done
}

# --- cgroups: `ip netns exec` mounted a fresh /sys for this namespace,
# which hides the host's cgroup mounts; mount the same hierarchies again
# (private to this mount namespace, same cgroups underneath).
if ! grep -q ' /sys/fs/cgroup/' /proc/self/mounts; then
  mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup
  while read -r _ dir fstype opts _; do
    case $fstype in cgroup|cgroup2) ;; *) continue ;; esac
    case $dir in /sys/fs/cgroup/*) ;; *) continue ;; esac
    mkdir -p "$dir"
    if [ "$fstype" = cgroup2 ]; then
      mount -t cgroup2 cgroup2 "$dir"
    else
      # the controller options (cpu / memory / name=systemd ...)
      sub=$(tr ',' '\n' <<<"$opts" | grep -vE '^(rw|ro|relatime|noatime|nosuid|nodev|noexec|clone_children)$' | paste -sd, -)
      mount -t cgroup -o "$sub" cgroup "$dir"
    fi
  done </proc/1/mounts
fi

# The kubelet's cgroup root, in every hierarchy (run.sh removes it).
for h in /sys/fs/cgroup/*/; do
  mkdir -p "$h$ID"
  if [ -f "${h}cpuset.cpus" ]; then
    cat "${h}cpuset.cpus" >"$h$ID/cpuset.cpus"
    cat "${h}cpuset.mems" >"$h$ID/cpuset.mems"
  fi
done

# --- network: the node address on one end of a veth pair whose both ends
# stay in this namespace (no dummy module here), a route for the service
# range through it; no default route.
ip link set lo up
ip link add node0 type veth peer name node0p
ip addr add "$NODE_IP/24" dev node0
ip link set node0p up
ip link set node0 up
ip route add "$SERVICE_CIDR" dev node0
sysctl -qw net.ipv4.ip_forward=1
# bridged pod-to-service-to-pod replies must pass conntrack (per namespace)
sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || log "no br_netfilter: hairpin service traffic may fail"

# --- PKI: a CA, the API server's serving certificate, the service-account
# signing key, a static admin token.
pki=$D/pki
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=shk8s-ca" \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
cat >"$pki/apiserver.ext" <<EOF
subjectAltName=IP:$API_SERVICE_IP,IP:$NODE_IP,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:$NODE_NAME
extendedKeyUsage=serverAuth
EOF
openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
  -keyout "$pki/apiserver.key" -out "$pki/apiserver.csr" 2>/dev/null
openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
  -days 2 -extfile "$pki/apiserver.ext" -out "$pki/apiserver.crt" 2>/dev/null
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
TOKEN=$(openssl rand -hex 16)
echo "$TOKEN,admin,admin,system:masters" >"$pki/tokens.csv"
kubectl config set-cluster shk8s --server="https://$NODE_IP:6443" --certificate-authority="$pki/ca.crt" --embed-certs >/dev/null
kubectl config set-credentials admin --token="$TOKEN" >/dev/null
kubectl config set-context shk8s --cluster=shk8s --user=admin >/dev/null
kubectl config use-context shk8s >/dev/null

# --- control plane
log "etcd, kube-apiserver"
start etcd etcd --name shk8s --data-dir "$D/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster shk8s=http://127.0.0.1:2380 --quota-backend-bytes 2147483648
start kube-apiserver kube-apiserver \
  --etcd-servers=http://127.0.0.1:2379 \
  --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --token-auth-file="$pki/tokens.csv" --authorization-mode=Node,RBAC \
  --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
  --kubelet-preferred-address-types=InternalIP --profiling=false \
  --enable-priority-and-fairness=false
wait_for 120 kube-apiserver kubectl get --raw /readyz
log "kube-controller-manager, kube-scheduler"
start kube-controller-manager kube-controller-manager --kubeconfig="$KUBECONFIG" \
  --authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" \
  --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
  --use-service-account-credentials=false --leader-elect=false \
  --enable-hostpath-provisioner --bind-address=127.0.0.1 --secure-port=10257 \
  --controllers='*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
start kube-scheduler kube-scheduler --kubeconfig="$KUBECONFIG" \
  --authentication-kubeconfig="$KUBECONFIG" --authorization-kubeconfig="$KUBECONFIG" \
  --leader-elect=false --bind-address=127.0.0.1 --secure-port=10259

# --- containerd: private root, state and socket; the pause image is built
# locally (no registry).
cat >"$D/cni/net.d/10-shk8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$ID",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$D/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
PAUSE=localhost/shk8s-pause:busybox
cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[debug]
  address = "$SOCK.debug"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$D/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  # no CAP_SYS_RESOURCE here: without this every sandbox fails with
  # "can't get final child's PID from pipe: EOF"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF
log "containerd"
start containerd containerd --config "$D/containerd/config.toml"
wait_for 30 containerd ctr_ version

# --- images: the pause image, then Shardhouse's archives.
build_pause() {
  local f=$CACHE/images/shk8s-pause.oci.tar
  [ -f "$f" ] && return 0
  local b=(buildah --root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver vfs)
  local c m
  c=$("${b[@]}" from scratch)
  m=$("${b[@]}" mount "$c")
  mkdir -p "$m/bin"
  cp -L "$(command -v busybox)" "$m/bin/busybox"
  "${b[@]}" umount "$c" >/dev/null
  "${b[@]}" config --entrypoint '["/bin/busybox","sleep","infinity"]' "$c"
  mkdir -p "$CACHE/images"
  "${b[@]}" commit --quiet --rm --format oci "$c" "oci-archive:$f.tmp:$PAUSE" >/dev/null
  mv "$f.tmp" "$f"
}
t0=$SECONDS
build_pause
ctr_ images import "$CACHE/images/shk8s-pause.oci.tar" >/dev/null
export K8S_IMAGE_REGISTRY=${SHARDHOUSE_IMAGE_REGISTRY:-localhost}
export K8S_IMAGE_TAG=${SHARDHOUSE_IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)}
for img in ${K8S_IMAGES:-}; do
  name=shardhouse-$img
  f=$CACHE/images/$name-$K8S_IMAGE_TAG.oci.tar
  [ -f "$f" ] || die "$f missing: run make images"
  ctr_ images import "$f" >/dev/null
done
log "images imported in $((SECONDS - t0)) s: $(ctr_ images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

# --- kubelet
cat >"$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$ID
cgroupsPerQOS: true
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$SOCK
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
resolvConf: ""
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 10s
localStorageCapacityIsolation: false
maxPods: 60
nodeStatusReportFrequency: 10s
syncFrequency: 10s
EOF
log "kubelet"
start kubelet kubelet --config="$D/kubelet/config.yaml" --kubeconfig="$KUBECONFIG" \
  --root-dir="$D/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP" \
  --cert-dir="$D/kubelet/pki"
wait_for 120 "node $NODE_NAME" kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s

# --- kube-proxy (iptables, inside the namespace only; conntrack sysctls are
# global, so it leaves them alone) and CoreDNS (cluster names only).
cat >"$D/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: $POD_CIDR
hostnameOverride: $NODE_NAME
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
clientConnection: {kubeconfig: $KUBECONFIG}
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
log "kube-proxy, coredns"
start kube-proxy kube-proxy --config="$D/kube-proxy.yaml"
cat >"$D/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG shk8s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
start coredns coredns -conf "$D/Corefile"

# --- storage: the hostpath provisioner as the default class (root-owned
# 0750 directories: for etcd), and `local`, pre-made local volumes, which
# honour fsGroup (and fsGroupChangePolicy) for pods that run as non-root.
export K8S_STORAGE_CLASS=local
{
  cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: hostpath
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubernetes.io/host-path
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
  for i in $(seq 1 ${K8S_LOCAL_VOLUMES:-12}); do
    mkdir -p "$D/pv/local-$i"
    cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: local-$i, labels: {shk8s/volume: local}}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: local
  local: {path: $D/pv/local-$i}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}]
EOF
  done
} | kubectl apply -f - >/dev/null

# CoreDNS answers, and the API server's ClusterIP reaches it (kube-proxy).
wait_for 60 "cluster DNS" bash -c "getent hosts kubernetes.default.svc.cluster.local"
wait_for 60 "kube-proxy rules" bash -c "curl -sk --max-time 2 https://$API_SERVICE_IP/readyz -H 'Authorization: Bearer $TOKEN' | grep -q ok"
wait_for 60 "default service account" kubectl get serviceaccount default -n default

export K8S_NODE_IP=$NODE_IP K8S_NODE_NAME=$NODE_NAME K8S_API_SERVICE_IP=$API_SERVICE_IP K8S_VERSION
export K8S_CTR="ctr --address $SOCK --namespace k8s.io"
log "ready: Kubernetes v$K8S_VERSION, node $NODE_NAME ($NODE_IP), pods $POD_CIDR, services $SERVICE_CIDR, state $D"
if (($#)); then
  "$@"
else
  log "interactive shell in the cluster's namespace (KUBECONFIG=$KUBECONFIG); exit to tear down"
  bash -i </dev/tty >/dev/tty 2>&1 || true
fi
