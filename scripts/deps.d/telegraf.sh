#!/usr/bin/env bash
# Telegraf, built once into $SHARDHOUSE_CACHE/bin/telegraf-<version> with
# only the plugins scripts/tests.d/telegraf-cq.sh uses (cpu, mem, the
# InfluxDB v1 output and the file output). A present binary is not rebuilt.
# Cost: ~45 s once (the module proxy serves v1.37.2 here).
set -euo pipefail

TELEGRAF_VERSION=1.37.2
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
BIN=$CACHE/bin/telegraf-$TELEGRAF_VERSION
[ -x "$BIN" ] && exit 0
command -v go >/dev/null || { echo "[deps/telegraf] go missing: run scripts/install-deps.sh" >&2; exit 1; }
echo "[deps/telegraf] building telegraf $TELEGRAF_VERSION into $BIN (once)" >&2
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
GOFLAGS=-mod=mod GOBIN="$root" go install \
  -tags "custom,inputs.cpu,inputs.mem,outputs.influxdb,outputs.file" \
  "github.com/influxdata/telegraf/cmd/telegraf@v$TELEGRAF_VERSION" >&2
mkdir -p "$CACHE/bin"
mv "$root/telegraf" "$BIN"
