#!/usr/bin/env bash
# The InfluxDB 1.x Python client (`influxdb`, what scripts and Jupyter users
# query with), unpacked into a project-local dir the /query client test puts
# on PYTHONPATH. Idempotent: a stamp file records the installed version.
set -euo pipefail
cd "$(dirname "$0")/../.."

INFLUXDB_PY_VERSION=5.3.2
DIR=${SHARDHOUSE_PYCLIENTS_DIR:-$PWD/.deps/pyclients}
log() { echo "[deps/pyclients] $*" >&2; }

if [ ! -f "$DIR/.installed-influxdb-$INFLUXDB_PY_VERSION" ]; then
  log "installing influxdb==$INFLUXDB_PY_VERSION into $DIR"
  rm -rf "$DIR"
  mkdir -p "$DIR"
  python3 -m pip install --quiet --disable-pip-version-check \
    --target "$DIR" "influxdb==$INFLUXDB_PY_VERSION"
  touch "$DIR/.installed-influxdb-$INFLUXDB_PY_VERSION"
fi
