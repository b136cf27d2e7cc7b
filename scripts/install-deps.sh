#!/usr/bin/env bash
# Installs everything Shardhouse needs on a fresh machine; idempotent and
# quick when everything is already there. Needs root for apt (CI runs as root).
#
#   scripts/install-deps.sh           everything (make deps)
#   scripts/install-deps.sh --core    what cargo needs to build: apt
#                                     packages (libclang, protoc, etcd) and
#                                     the toolchain
#   scripts/install-deps.sh --extras  what only running needs: the engine
#                                     (chdb-core, 175 MB from PyPI) and the
#                                     tools of scripts/deps.d (Go builds that
#                                     take minutes cold); scripts/test.sh runs
#                                     this in the background while cargo
#                                     compiles
set -euo pipefail
cd "$(dirname "$0")/.."

CHDB_VERSION=26.9.0
CHDB_DIR=${SHARDHOUSE_CHDB_DIR:-$PWD/.deps/chdb}

log() { echo "[deps] $*" >&2; }

case ${1:-} in
  "") core=1 extras=1 ;;
  --core) core=1 extras=0 ;;
  --extras) core=0 extras=1 ;;
  *) log "usage: $0 [--core | --extras]"; exit 2 ;;
esac

install_core() {
  # --- Room on disk first: the shared build cache grows with every clone.
  scripts/lib/cache-trim.sh

  # --- Debian packages: libclang (RocksDB bindgen), protoc (etcd-client,
  # tonic), etcd (metadata store for tests and `make run`).
  local need_apt=()
  dpkg -s libclang-dev >/dev/null 2>&1 || need_apt+=(libclang-dev)
  command -v protoc >/dev/null 2>&1 || need_apt+=(protobuf-compiler)
  command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || need_apt+=(etcd-client)
  if ((${#need_apt[@]})); then
    log "apt-get install ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi

  # --- Rust toolchain pinned by rust-toolchain.toml (rustup installs on demand).
  command -v cargo >/dev/null || { log "cargo not found: install rustup first"; exit 1; }
  cargo --version >/dev/null
}

install_engine() {
  # --- The embedded engine: chdb-core wheel unpacked into a project-local dir.
  if [ ! -f "$CHDB_DIR/.installed-$CHDB_VERSION" ]; then
    log "installing chdb-core==$CHDB_VERSION into $CHDB_DIR"
    rm -rf "$CHDB_DIR"
    mkdir -p "$CHDB_DIR"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$CHDB_DIR" "chdb-core==$CHDB_VERSION"
    touch "$CHDB_DIR/.installed-$CHDB_VERSION"
  fi
}

# --- Extra tools some tests need (kube-apiserver, helm, ...) register here,
# one script each; each prints how long it took (a cold Go build is minutes).
install_extras() {
  local extra t0
  for extra in scripts/deps.d/*.sh; do
    [ -e "$extra" ] || continue
    t0=$SECONDS
    bash "$extra"
    log "$extra: $((SECONDS - t0)) s"
  done
}

((core == 0)) || install_core
if ((extras)); then
  install_engine
  install_extras
fi
log "ok"
