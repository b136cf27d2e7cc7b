#!/usr/bin/env bash
# `make images`: the operator, router, node and etcd images built with
# buildah, without a Docker engine or a registry, written as OCI archives:
#
#   $SHARDHOUSE_CACHE/images/<name>-<tag>.oci.tar   (image <registry>/<name>:<tag>)
#
# Each image is assembled from scratch out of the files its binary needs:
# the release binary and its ldd closure (glibc, libstdc++ ... from this
# Debian bookworm machine, the same libraries debian:bookworm-slim ships),
# /etc/passwd and /etc/group with the `shardhouse` user (uid 65532), the CA
# bundle, /tmp, and busybox as /bin/sh. The node image adds the chdb-core
# engine (.deps/chdb -> /opt/chdb) and Debian's libpython3.11 with its ldd
# closure. Everything the Dockerfile's final stage configures (ENTRYPOINT,
# CMD, USER, EXPOSE, ENV, VOLUME, WORKDIR) is read from docker/<x>.Dockerfile,
# so the two cannot drift; scripts/tests.d/images.sh checks the archives
# against the Dockerfiles.
#
# Usage: scripts/images.sh [--tag T] [--registry R] [--force] [--check] [NAME...]
#   NAME: operator router node etcd (default: all four)
#   --check: build nothing; check the archives against the Dockerfiles
#            (config, files the final stage copies, and that each
#            ENTRYPOINT runs inside its own root filesystem as its USER)
# Env: SHARDHOUSE_IMAGE_TAG (default: the workspace version),
#      SHARDHOUSE_IMAGE_REGISTRY (default: localhost),
#      SHARDHOUSE_IMAGE_LABEL (extra label build.id=<value>, forces a rebuild).
# An archive is rebuilt only when its inputs changed (stamp next to it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}
BIN=${SHARDHOUSE_BIN:-$CARGO_TARGET_DIR/release}
CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$ROOT/.deps/chdb}
OUT=$CACHE/images
TAG=${SHARDHOUSE_IMAGE_TAG:-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)}
REGISTRY=${SHARDHOUSE_IMAGE_REGISTRY:-localhost}
LABEL=${SHARDHOUSE_IMAGE_LABEL:-}
FORCE=0
CHECK=0
names=()
while (($#)); do
  case $1 in
    --tag) TAG=$2; shift 2 ;;
    --registry) REGISTRY=$2; shift 2 ;;
    --force) FORCE=1; shift ;;
    --check) CHECK=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) names+=("$1"); shift ;;
  esac
done
((${#names[@]})) || names=(operator router node etcd)

log() { echo "[images] $*" >&2; }
die() { echo "[images] ERROR: $*" >&2; exit 1; }

for tool in buildah busybox objcopy; do
  command -v "$tool" >/dev/null || die "$tool missing: scripts/k8s/deps.sh installs it (apt-get install buildah busybox-static)"
done
LIBPYTHON=/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0

# Private buildah storage: nothing under /var/lib/containers, no registry.
BROOT=$CACHE/buildah
buildah_() { buildah --root "$BROOT/storage" --runroot "$BROOT/run" --storage-driver vfs "$@"; }
mkdir -p "$OUT" "$BROOT"

# --- The Dockerfile's final stage, as `KEY value` lines.
dockerfile_config() { # FILE
  python3 - "$1" <<'PY'
import json, re, shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
last = max(i for i, l in enumerate(lines) if l.upper().startswith("FROM "))
for l in lines[last + 1:]:
    op, _, rest = l.partition(" ")
    op = op.upper()
    rest = rest.strip()
    if op in ("ENTRYPOINT", "CMD"):
        print(op, json.dumps(json.loads(rest)))
    elif op == "USER" or op == "WORKDIR":
        print(op, rest)
    elif op == "EXPOSE":
        for p in rest.split():
            print(op, p)
    elif op == "VOLUME":
        vols = json.loads(rest) if rest.startswith("[") else rest.split()
        for v in vols:
            print(op, v)
    elif op == "ENV":
        parts = shlex.split(rest)
        if len(parts) >= 2 and "=" not in parts[0]:
            print(op, parts[0] + "=" + " ".join(parts[1:]))
        else:
            for p in parts:
                print(op, p)
PY
}

# --- Root filesystem pieces.
base_rootfs() { # DIR
  local d=$1
  mkdir -p "$d"/{etc/ssl/certs,tmp,usr/bin,usr/lib/x86_64-linux-gnu,usr/lib64,usr/local/bin,usr/sbin,var/tmp}
  # Debian's merged /usr, so ldd's /lib/... paths resolve as on the host.
  ln -sfn usr/bin "$d/bin"
  ln -sfn usr/sbin "$d/sbin"
  ln -sfn usr/lib "$d/lib"
  ln -sfn usr/lib64 "$d/lib64"
  chmod 1777 "$d/tmp" "$d/var/tmp"
  cat >"$d/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
shardhouse:x:65532:65532::/home/shardhouse:/usr/sbin/nologin
EOF
  cat >"$d/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
shardhouse:x:65532:
EOF
  echo "hosts: files dns" >"$d/etc/nsswitch.conf"
  cp -L /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/ca-certificates.crt"
  # A shell for `kubectl exec` and for the operator's node command line.
  cp -L "$(command -v busybox)" "$d/usr/bin/busybox"
  ln -sfn busybox "$d/usr/bin/sh"
}

# Copies FILE to DIR/DEST and every shared library it needs (ldd closure).
add_elf() { # DIR FILE DEST
  local d=$1 f=$2 dest=$3
  mkdir -p "$d/$(dirname "$dest")"
  cp -L "$f" "$d/$dest"
  add_libs "$d" "$f"
}
# The workspace binaries carry DWARF (release profile with debuginfo): the
# image keeps their symbols (backtraces) and drops the debug sections, as
# the Dockerfiles' build stages do.
add_rust_bin() { # DIR NAME
  add_elf "$1" "$BIN/$2" "usr/local/bin/$2"
  objcopy --strip-debug "$1/usr/local/bin/$2"
}
add_libs() { # DIR FILE
  local d=$1 f=$2 lib
  while read -r lib; do
    [ -n "$lib" ] || continue
    case $lib in "$d"/*) continue ;; esac # found inside the image already
    local rel=${lib#/}
    [ -e "$d/$rel" ] && continue
    mkdir -p "$d/$(dirname "$rel")"
    cp -L "$lib" "$d/$rel"
  done < <(ldd "$f" | awk '/=> \// {print $3} $1 ~ /^\// && !/=>/ {print $1}')
}

# Files per image, mirroring docker/<name>.Dockerfile.
assemble() { # NAME DIR
  local name=$1 d=$2
  base_rootfs "$d"
  case $name in
    operator)
      add_rust_bin "$d" shardhouse-operator
      add_rust_bin "$d" shardhouse-ctl
      ;;
    router)
      add_rust_bin "$d" shardhouse-router
      ;;
    node)
      add_rust_bin "$d" shardhouse-node
      # Debian's libpython3.11 (the engine resolves CPython symbols from it;
      # no interpreter in the image) and the chdb-core wheel.
      add_elf "$d" "$LIBPYTHON" "${LIBPYTHON#/}"
      mkdir -p "$d/opt"
      cp -a "$CHDB_DIR" "$d/opt/chdb"
      rm -rf "$d/opt/chdb/chdb/__pycache__" "$d"/opt/chdb/.installed-*
      # its own chdb_core.libs resolve through RPATH inside /opt/chdb
      add_libs "$d" "$d/opt/chdb/chdb/_chdb.abi3.so"
      mkdir -p "$d/var/lib/shardhouse"
      chown 65532:65532 "$d/var/lib/shardhouse"
      ;;
    etcd)
      add_elf "$d" /usr/bin/etcd usr/bin/etcd
      mkdir -p "$d/var/lib/etcd"
      ;;
    *) die "unknown image $name (want operator, router, node or etcd)" ;;
  esac
}

inputs() { # NAME: files whose content decides the image
  local name=$1
  echo "$ROOT/scripts/images.sh" "$ROOT/docker/$name.Dockerfile"
  case $name in
    operator) echo "$BIN/shardhouse-operator" "$BIN/shardhouse-ctl" ;;
    router) echo "$BIN/shardhouse-router" ;;
    node) echo "$BIN/shardhouse-node" "$LIBPYTHON" "$CHDB_DIR/chdb/_chdb.abi3.so" ;;
    etcd) echo /usr/bin/etcd ;;
  esac
}

image_ref() { echo "$REGISTRY/$(image_name "$1"):$TAG"; }
image_name() { case $1 in etcd) echo shardhouse-etcd ;; *) echo "shardhouse-$1" ;; esac; }
archive() { echo "$OUT/$(image_name "$1")-$TAG.oci.tar"; }

build_one() {
  local name=$1 ref file stamp want
  ref=$(image_ref "$name")
  file=$(archive "$name")
  local df=$ROOT/docker/$name.Dockerfile
  [ -f "$df" ] || die "no $df"
  local f
  for f in $(inputs "$name"); do
    [ -e "$f" ] || die "$f missing (cargo build --release --workspace --bins; scripts/install-deps.sh; scripts/k8s/deps.sh)"
  done
  # shellcheck disable=SC2046
  want=$( { echo "$ref $LABEL"; sha256sum $(inputs "$name"); } | sha256sum | cut -d' ' -f1)
  stamp="$file.inputs"
  if ((!FORCE)) && [ -f "$file" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    log "$ref is current ($file)"
    return 0
  fi
  local t0=$SECONDS work
  work=$(mktemp -d "$OUT/.work-$name.XXXXXX")
  WORKDIRS+=("$work")
  assemble "$name" "$work/rootfs"
  local cfg=()
  local key val
  while read -r key val; do
    case $key in
      ENTRYPOINT) cfg+=(--entrypoint "$val") ;;
      CMD) cfg+=(--cmd "$val") ;;
      USER) cfg+=(--user "$val") ;;
      WORKDIR) cfg+=(--workingdir "$val") ;;
      EXPOSE) [[ $val == */* ]] || val+=/tcp; cfg+=(--port "$val") ;;
      VOLUME) cfg+=(--volume "$val") ;;
      ENV) cfg+=(--env "$val") ;;
    esac
  done < <(dockerfile_config "$df")
  local ctr mnt
  ctr=$(buildah_ from --name "shardhouse-build-$name-$$" scratch)
  mnt=$(buildah_ mount "$ctr")
  cp -a "$work/rootfs/." "$mnt/"
  buildah_ umount "$ctr" >/dev/null
  buildah_ config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --os linux --arch amd64 \
    --label org.opencontainers.image.title="$(image_name "$name")" \
    --label org.opencontainers.image.version="$TAG" \
    --label org.opencontainers.image.source=docker/$name.Dockerfile \
    ${LABEL:+--label "build.id=$LABEL"} \
    "${cfg[@]}" "$ctr"
  rm -f "$file.tmp"
  buildah_ commit --quiet --rm --format oci "$ctr" "oci-archive:$file.tmp:$ref" >/dev/null
  mv "$file.tmp" "$file"
  echo "$want" >"$stamp"
  rm -rf "$work"
  log "$ref -> $file ($(du -m "$file" | cut -f1) MB, $((SECONDS - t0)) s)"
}

# The node image's own files are enough to serve: inside the unpacked root
# filesystem, as its USER and with only the image's ENV, shardhouse-node
# loads libpython and the chDB engine, opens its data directory (the
# image's VOLUME), registers with an etcd on loopback, creates a one-shard
# cluster and answers /health and /ready. (No network namespace needed:
# chroot keeps the host's loopback.)
node_opens_engine() { # WORK (rootfs at WORK/rootfs, config at WORK/dockerfile.cfg)
  local w=$1 env=() key val
  command -v etcd >/dev/null || die "etcd missing: apt-get install etcd-server"
  while read -r key val; do
    [ "$key" = ENV ] && env+=("$val")
  done <"$w/dockerfile.cfg"
  local user
  user=$(sed -n 's/^USER //p' "$w/dockerfile.cfg")
  local port ep pp
  port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  ep=$(port); pp=$(port)
  etcd --data-dir "$w/etcd" --listen-client-urls "http://127.0.0.1:$ep" --advertise-client-urls "http://127.0.0.1:$ep" \
    --listen-peer-urls "http://127.0.0.1:$pp" --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
    --initial-cluster "default=http://127.0.0.1:$pp" >"$w/etcd.log" 2>&1 &
  local etcd_pid=$!
  CHECK_PIDS+=("$etcd_pid")
  chroot --userspec="$user:$user" "$w/rootfs" /usr/bin/busybox env -i \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp "${env[@]}" \
    /usr/local/bin/shardhouse-node --node-id 1 --data-dir /var/lib/shardhouse \
    --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 --advertise-host 127.0.0.1 \
    --etcd-endpoints "http://127.0.0.1:$ep" --cluster imagecheck --init-cluster shards=1,rf=1,nodes=1 \
    >"$w/node.out" 2>"$w/node.err" &
  local node_pid=$!
  CHECK_PIDS+=("$node_pid")
  local http="" i
  for i in $(seq 1 600); do
    http=$(sed -n 's/^READY .*http=\([^ ]*\).*/\1/p' "$w/node.out" 2>/dev/null)
    [ -n "$http" ] && break
    kill -0 "$node_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$http" ] || die "node image: shardhouse-node did not start inside the image: $(tail -5 "$w/node.err")"
  local ready=""
  for i in $(seq 1 100); do
    curl -sf "http://$http/ready" >/dev/null 2>&1 && { ready=1; break; }
    sleep 0.2
  done
  curl -sf "http://$http/health" >/dev/null || die "node image: /health failed: $(tail -5 "$w/node.err")"
  [ -n "$ready" ] || die "node image: /ready never answered 200: $(tail -5 "$w/node.err")"
  grep -q "chDB engine loaded" "$w/node.err" || die "node image: no 'chDB engine loaded' in the node's log"
  kill -TERM "$node_pid" 2>/dev/null; wait "$node_pid" 2>/dev/null || true
  kill -TERM "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null || true
  log "node image: the engine opens and the node serves /health and /ready as uid $user with the image's files only"
}

# --- --check: the archive against the Dockerfile, and the binaries run.
check_one() {
  local name=$1 file df
  file=$(archive "$name")
  df=$ROOT/docker/$name.Dockerfile
  [ -f "$file" ] || die "$file missing: run make images"
  local work
  work=$(mktemp -d "$OUT/.check-$name.XXXXXX")
  WORKDIRS+=("$work")
  dockerfile_config "$df" >"$work/dockerfile.cfg"
  python3 - "$file" "$df" "$work/dockerfile.cfg" "$work/rootfs" "$(image_ref "$name")" <<'PY'
import json, re, sys, tarfile
archive, df_path, cfg_path, rootfs, ref = sys.argv[1:]
fail = []
with tarfile.open(archive) as t:
    blob = lambda d: t.extractfile("blobs/sha256/" + d.split(":")[1])
    index = json.load(t.extractfile("index.json"))
    m = index["manifests"][0]
    if m.get("annotations", {}).get("org.opencontainers.image.ref.name") != ref:
        fail.append(f"archive names {m.get('annotations')}, want {ref}")
    manifest = json.load(blob(m["digest"]))
    config = json.load(blob(manifest["config"]["digest"]))["config"]
    import os
    os.makedirs(rootfs)
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=blob(layer["digest"]), mode="r|*") as lt:
            lt.extractall(rootfs, numeric_owner=True, filter="fully_trusted")
want = {"ENV": [], "EXPOSE": [], "VOLUME": []}
for line in open(cfg_path):
    k, _, v = line.rstrip("\n").partition(" ")
    if k in want:
        want[k].append(v)
    else:
        want[k] = v
def eq(what, got, exp):
    if got != exp:
        fail.append(f"{what}: image has {got!r}, Dockerfile says {exp!r}")
eq("Entrypoint", config.get("Entrypoint"), json.loads(want["ENTRYPOINT"]) if "ENTRYPOINT" in want else None)
eq("Cmd", config.get("Cmd"), json.loads(want["CMD"]) if "CMD" in want else None)
eq("User", config.get("User", ""), want.get("USER", ""))
eq("WorkingDir", config.get("WorkingDir", ""), want.get("WORKDIR", ""))
eq("ExposedPorts", sorted(config.get("ExposedPorts", {})), sorted(p if "/" in p else p + "/tcp" for p in want["EXPOSE"]))
eq("Volumes", sorted(config.get("Volumes", {})), sorted(want["VOLUME"]))
env = config.get("Env", [])
for e in want["ENV"]:
    if e not in env:
        fail.append(f"Env: {e} from the Dockerfile missing in {env}")
# Files the final stage copies in, the user it runs as.
text = open(df_path).read()
final = text[text.rindex("\nFROM "):]
for src, dest in re.findall(r"^COPY --from=\S+ (\S+) (\S+)", final, re.M):
    if not os.path.lexists(rootfs + dest):
        fail.append(f"{dest} (COPY {src} {dest}) not in the image")
user = want.get("USER")
if user:
    uids = {l.split(":")[2] for l in open(rootfs + "/etc/passwd")}
    if user not in uids:
        fail.append(f"USER {user} not in /etc/passwd")
for v in want["VOLUME"]:
    st = os.lstat(rootfs + v) if os.path.lexists(rootfs + v) else None
    if st is None:
        fail.append(f"VOLUME {v} missing")
    elif user and str(st.st_uid) != user and "chown" in final:
        fail.append(f"VOLUME {v} owned by {st.st_uid}, the Dockerfile chowns it to {user}")
for e in want["ENV"]:
    k, _, v = e.partition("=")
    if v.startswith("/") and not os.path.lexists(rootfs + v):
        fail.append(f"ENV {k}={v}: no such path in the image")
if fail:
    sys.exit("\n".join(f"{archive}: {f}" for f in fail))
PY
  # The entrypoint starts inside its own root filesystem, as its user.
  local entry user
  entry=$(sed -n 's/^ENTRYPOINT \["\([^"]*\)".*/\1/p' "$work/dockerfile.cfg")
  user=$(sed -n 's/^USER //p' "$work/dockerfile.cfg")
  local out
  if ! out=$(chroot ${user:+--userspec="$user:$user"} "$work/rootfs" "$entry" --version 2>&1); then
    die "$name: $entry --version failed inside the image: $out"
  fi
  if [ "$name" = node ]; then
    # the engine's libraries resolve inside the image too
    local missing
    missing=$(chroot "$work/rootfs" /usr/bin/busybox true 2>&1; for so in /opt/chdb/chdb/_chdb.abi3.so "$LIBPYTHON"; do
      [ -e "$work/rootfs$so" ] || echo "$so missing"; done)
    [ -z "$missing" ] || die "node: $missing"
    node_opens_engine "$work"
  fi
  rm -rf "$work"
  log "ok: $(image_ref "$name") matches docker/$name.Dockerfile; $entry runs ($(echo "$out" | head -1))"
}

WORKDIRS=()
CHECK_PIDS=()
cleanup() {
  local p w
  for p in "${CHECK_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${CHECK_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  for w in "${WORKDIRS[@]}"; do rm -rf "$w"; done
}
trap cleanup EXIT
for n in "${names[@]}"; do
  if ((CHECK)); then check_one "$n"; else build_one "$n"; fi
done
