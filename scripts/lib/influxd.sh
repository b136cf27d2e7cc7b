# shellcheck shell=bash
# InfluxDB 1.8.10 (influxd), the InfluxQL peer of `make bench-query`: the
# binary scripts/influx-suite/run.sh builds from the Go module proxy, run on
# loopback with its default configuration except where it listens, where it
# keeps its data and with usage reporting off.
#
#   influxd_install         the binary is there, or build it (run.sh prepare,
#                           a few minutes the first time); fails when it
#                           cannot be had (no Go, proxy refused)
#   influxd_start DIR PORT  config in DIR/influxd.conf, meta/data/wal under
#                           DIR, HTTP on 127.0.0.1:PORT, RPC on a free port;
#                           waits until /ping answers
#   influxd_stop

INFLUXD_VERSION=${INFLUXD_VERSION:-1.8.10}
INFLUXD=${INFLUXD:-${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}/bin/influxd-$INFLUXD_VERSION}
INFLUXD_PID=${INFLUXD_PID:-}

influxd_log() { echo "[influxd] $*" >&2; }

influxd_install() {
  [ -x "$INFLUXD" ] && return 0
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  influxd_log "$INFLUXD missing: building it (scripts/influx-suite/run.sh prepare)"
  "$here/influx-suite/run.sh" prepare >&2 || { influxd_log "run.sh prepare failed (status $?)"; return 1; }
  [ -x "$INFLUXD" ] || { influxd_log "$INFLUXD not found after run.sh prepare"; return 1; }
}

# influxd_config DIR HTTP_PORT RPC_PORT: influxd's own defaults (`influxd
# config`) with four settings changed, section by section: reporting off,
# the RPC and HTTP bind addresses on loopback, meta/data/wal under DIR.
influxd_config() {
  local dir=$1 http=$2 rpc=$3
  "$INFLUXD" config 2>/dev/null | python3 -c '
import re, sys
d, http, rpc = sys.argv[1:4]
want = {
    ("", "reporting-disabled"): "true",
    ("", "bind-address"): "\"127.0.0.1:%s\"" % rpc,
    ("meta", "dir"): "\"%s/meta\"" % d,
    ("data", "dir"): "\"%s/data\"" % d,
    ("data", "wal-dir"): "\"%s/wal\"" % d,
    ("http", "bind-address"): "\"127.0.0.1:%s\"" % http,
}
section, done, out = "", set(), []
for line in sys.stdin.read().splitlines():
    m = re.match(r"^\s*\[+([^\]]+)\]+\s*$", line)
    if m:
        section = m.group(1).strip()
    kv = re.match(r"^(\s*)([A-Za-z0-9_-]+)\s*=", line)
    if kv and (section, kv.group(2)) in want:
        key = (section, kv.group(2))
        line = "%s%s = %s" % (kv.group(1), key[1], want[key])
        done.add(key)
    out.append(line)
missing = set(want) - done
if missing:
    sys.exit("influxd config: settings not found: %s" % sorted(missing))
print("\n".join(out))' "$dir" "$http" "$rpc" >"$dir/influxd.conf"
}

influxd_start() {
  local dir=$1 port=$2 rpc
  mkdir -p "$dir"
  rpc=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
  influxd_config "$dir" "$port" "$rpc" || return 1
  setsid "$INFLUXD" run -config "$dir/influxd.conf" >"$dir/influxd.log" 2>&1 </dev/null &
  INFLUXD_PID=$!
  echo "$INFLUXD_PID" >"$dir/influxd.pid"
  local deadline=$((SECONDS + 60))
  until curl -fsS -m 2 "http://127.0.0.1:$port/ping" >/dev/null 2>&1; do
    kill -0 "$INFLUXD_PID" 2>/dev/null || { tail -n 20 "$dir/influxd.log" >&2; influxd_log "exited during start"; INFLUXD_PID=""; return 1; }
    ((SECONDS < deadline)) || { influxd_log "not answering after 60 s"; influxd_stop; return 1; }
    sleep 0.2
  done
  influxd_log "ready on 127.0.0.1:$port (pid $INFLUXD_PID, RPC 127.0.0.1:$rpc, config $dir/influxd.conf)"
}

influxd_stop() {
  [ -n "${INFLUXD_PID:-}" ] || return 0
  kill -TERM "$INFLUXD_PID" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while kill -0 "$INFLUXD_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -KILL "$INFLUXD_PID" 2>/dev/null || true
  wait "$INFLUXD_PID" 2>/dev/null || true
  INFLUXD_PID=""
}
