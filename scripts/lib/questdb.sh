# shellcheck shell=bash
# QuestDB 9.2.2, the side-by-side peer of `make bench-e2e`: installed from
# Maven Central, run on loopback only, line protocol over HTTP (/write).

QDB_VERSION=${QDB_VERSION:-9.2.2}
QDB_JAR=${QDB_JAR:-$HOME/.m2/repository/org/questdb/questdb/$QDB_VERSION/questdb-$QDB_VERSION.jar}

qdb_install() {
  [ -f "$QDB_JAR" ] && return 0
  command -v java >/dev/null || { echo "[questdb] installing a JDK (Debian openjdk-17-jre-headless)" >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }
  command -v mvn >/dev/null || { echo "[questdb] installing maven (Debian)" >&2; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq maven >/dev/null; }
  echo "[questdb] fetching org.questdb:questdb:$QDB_VERSION from Maven Central" >&2
  mvn -q dependency:get -Dartifact="org.questdb:questdb:$QDB_VERSION" -Dtransitive=false >&2
  [ -f "$QDB_JAR" ] || { echo "[questdb] $QDB_JAR not found after mvn dependency:get" >&2; return 1; }
}

# qdb_start DIR PORT: starts QuestDB with its root in DIR, HTTP on
# 127.0.0.1:PORT, every other listener off; waits until it answers.
qdb_start() {
  local dir=$1 port=$2
  mkdir -p "$dir"
  QDB_HTTP_BIND_TO="127.0.0.1:$port" QDB_HTTP_MIN_ENABLED=false QDB_PG_ENABLED=false \
    QDB_LINE_TCP_ENABLED=false QDB_LINE_UDP_ENABLED=false QDB_TELEMETRY_ENABLED=false \
    setsid java -p "$QDB_JAR" -m io.questdb/io.questdb.ServerMain -d "$dir" >"$dir/stdout.log" 2>&1 </dev/null &
  QDB_PID=$!
  echo "$QDB_PID" >"$dir/questdb.pid"
  local deadline=$((SECONDS + 120))
  until curl -fsS -m 2 -G "http://127.0.0.1:$port/exec" --data-urlencode 'query=SELECT 1' >/dev/null 2>&1; do
    kill -0 "$QDB_PID" 2>/dev/null || { tail -n 30 "$dir/stdout.log" >&2; echo "[questdb] exited during start" >&2; return 1; }
    ((SECONDS < deadline)) || { echo "[questdb] not answering after 120 s" >&2; return 1; }
    sleep 0.5
  done
  echo "[questdb] ready on 127.0.0.1:$port (pid $QDB_PID)" >&2
}

qdb_stop() {
  [ -n "${QDB_PID:-}" ] || return 0
  kill -TERM "$QDB_PID" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while kill -0 "$QDB_PID" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  kill -KILL "$QDB_PID" 2>/dev/null || true
  wait "$QDB_PID" 2>/dev/null || true
  QDB_PID=""
}
