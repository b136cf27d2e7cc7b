#!/usr/bin/env bash
# `make test` suite: Shardhouse's /query answers against a real influxd
# 1.8.10's, statement by statement (scripts/influxd_compare.py): one
# dataset of 24 series reporting at aligned times (ties between series at
# one time everywhere, as Telegraf data has them), written to both; ~660
# statements of selectors and aggregates, with and without GROUP BY time(),
# by tags, under conditions, with tags beside a selector, in a policy of
# hour-long shard groups. Fails on any answer that differs (floats within
# 1e-9 relative count as equal). Skips, saying why, when influxd cannot be
# had (it is built by the influx-suite's prepare step, cached).
# Cost: ~30 s warm.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/lib/cluster.sh
source scripts/lib/cluster.sh
# shellcheck source=scripts/lib/influxd.sh
source scripts/lib/influxd.sh

sh_require_bins shardhouse-node shardhouse-router
if ! influxd_install >/dev/null; then
  echo "SKIP influxd-compare: influxd $INFLUXD_VERSION cannot be built here (reason above)"
  exit 0
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/shardhouse-influxd-compare.XXXXXX")
cleanup() {
  [ -n "${SH_DATA:-}" ] && sh_stop_all
  influxd_stop || true
}
trap cleanup EXIT
sh_cluster_init "$TMP/cluster" 3
sh_start_etcd
sh_start_nodes 6 3
sh_start_router
sh_wait_writable "$SH_READY_TIMEOUT" || { echo "FAIL influxd-compare: cluster never became writable" >&2; exit 1; }
port=$(sh_free_port)
influxd_start "$TMP/influxdb" "$port"
if ! python3 scripts/influxd_compare.py "$SH_ROUTER_HTTP" "127.0.0.1:$port" | tee "$TMP/compare.txt"; then
  echo "FAIL influxd-compare: answers differ from influxd's (each DIFF above; logs in $TMP)" >&2
  exit 1
fi
