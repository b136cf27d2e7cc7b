# shellcheck shell=bash
# A headless Grafana server (scripts/deps.d/grafana.sh builds it into the
# cache, without the frontend) for the suites that drive Grafana's backend:
# tests.d/grafana.sh (the shipped dashboard) and tests.d/promql.sh (the
# Prometheus data source). Needs sh_free_port (scripts/lib/cluster.sh).

GRAFANA_DIR=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}/grafana

# sh_grafana_built: true when the server binary is there; else prints why
# it was not built (for the suite's SKIP line).
sh_grafana_built() {
  [ -x "$GRAFANA_DIR/bin/grafana" ] && return 0
  cat "$GRAFANA_DIR/.skipped" 2>/dev/null || echo "not built: run scripts/deps.d/grafana.sh"
  return 1
}

# sh_start_grafana DIR PROVISIONING: starts Grafana (admin:admin) on a free
# loopback port with its data, logs and config under DIR and its
# provisioning from PROVISIONING (the caller's environment reaches the
# provisioning files' ${VARS}); waits until it is healthy. Sets GRAFANA
# (its URL) and GRAFANA_PID; returns 1, with its log, if it does not come up.
sh_start_grafana() {
  local dir=$1 provisioning=$2 port deadline
  port=$(sh_free_port)
  mkdir -p "$dir"
  cat >"$dir/custom.ini" <<INI
[paths]
data = $dir/data
logs = $dir/logs
plugins = $dir/plugins
provisioning = $provisioning
[server]
http_addr = 127.0.0.1
http_port = $port
[security]
admin_user = admin
admin_password = admin
[analytics]
reporting_enabled = false
check_for_updates = false
check_for_plugin_updates = false
[log]
mode = file
level = info
INI
  "$GRAFANA_DIR/bin/grafana" server --homepath "$GRAFANA_DIR/home" --config "$dir/custom.ini" \
    >"$dir/out.log" 2>&1 &
  GRAFANA_PID=$!
  GRAFANA="http://127.0.0.1:$port"
  deadline=$((SECONDS + 120))
  until curl -fsS -m 2 "$GRAFANA/api/health" >/dev/null 2>&1; do
    if ! kill -0 "$GRAFANA_PID" 2>/dev/null || ((SECONDS >= deadline)); then
      tail -n 30 "$dir/out.log" "$dir"/logs/* >&2 2>/dev/null
      echo "grafana did not become healthy (log above)" >&2
      return 1
    fi
    sleep 0.5
  done
}
