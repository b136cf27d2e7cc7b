#!/usr/bin/env bash
# Grafana's server (no frontend), built from the Go module proxy, for the
# dashboard test scripts/tests.d/grafana.sh: the shipped InfluxDB datasource
# and dashboard run by Grafana's own backend against a local cluster.
#
# The served version is main of 2023-06-09 (10.0.0-preview), as a Go
# pseudo-version of github.com/grafana/grafana. The module zip lacks the
# generated wire_gen.go and its go.mod carries `replace` lines, so it is built
# inside a writable copy of the module (which keeps those lines in force),
# after `wire gen` (wire v0.7.0; the pinned v0.5.0 panics under current Go).
#
# Everything lands in $SHARDHOUSE_CACHE/grafana (outside the clone):
#   bin/grafana   the server binary (~150 MB)
#   home/         --homepath: conf/defaults.ini and public/ from the module
# A current build is not redone. When Go or the module is not available
# (the proxy answers 403 for versions it does not serve) this prints why and
# exits 0: the test then skips with the same reason.
# Cost (2 cores, measured): 41 s with Go's build cache warm; the first build
# here, modules partly downloaded already, took 13 min.
set -euo pipefail

GRAFANA_MODULE=github.com/grafana/grafana
GRAFANA_VERSION=v1.9.2-0.20230609164553-81d85ce8028d
WIRE_VERSION=v0.7.0
CACHE=${SHARDHOUSE_CACHE:-$HOME/.cache/shardhouse}
DIR=$CACHE/grafana
export PATH=$HOME/go/bin:/usr/local/go/bin:$PATH
export GOFLAGS="-mod=mod -buildvcs=false"

log() { echo "[deps/grafana] $*" >&2; }
skip() {
  log "skipped: $*"
  mkdir -p "$DIR"
  echo "$*" >"$DIR/.skipped"
  exit 0
}

if [ -x "$DIR/bin/grafana" ] && [ "$(cat "$DIR/.version" 2>/dev/null)" = "$GRAFANA_VERSION" ]; then
  exit 0
fi
command -v go >/dev/null || skip "go not found: install Go >= 1.24 (https://go.dev/dl)"
mkdir -p "$DIR/bin"
rm -f "$DIR/.skipped"

log "building Grafana $GRAFANA_VERSION from the Go module proxy (first time ~15 min)"
info=$(cd "$DIR" && go mod download -json "$GRAFANA_MODULE@$GRAFANA_VERSION" 2>&1) ||
  skip "the Go module proxy did not serve $GRAFANA_MODULE@$GRAFANA_VERSION: $(echo "$info" |
    python3 -c 'import json,sys; t=sys.stdin.read()
try: print(json.loads(t).get("Error", t))
except ValueError: print(" ".join(t.split())[:300])')"
moddir=$(echo "$info" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
[ -f "$moddir/go.mod" ] || skip "module directory $moddir has no go.mod"

src=$DIR/src
if [ "$(cat "$src/.version" 2>/dev/null)" != "$GRAFANA_VERSION" ]; then
  rm -rf "$src" "$src.tmp"
  cp -r "$moddir" "$src.tmp"
  chmod -R u+w "$src.tmp"
  echo "$GRAFANA_VERSION" >"$src.tmp/.version"
  mv "$src.tmp" "$src"
fi

GOBIN=$DIR/bin go install "github.com/google/wire/cmd/wire@$WIRE_VERSION" ||
  skip "could not install wire $WIRE_VERSION from the Go module proxy"
(
  cd "$src"
  [ -f pkg/server/wire_gen.go ] || "$DIR/bin/wire" gen -tags oss ./pkg/server >/dev/null
  # -s -w: no symbol table or DWARF (the linker's slowest part for a
  # 150 MB binary); the tests only run it.
  nice go build -ldflags "-s -w" -o "$DIR/bin/grafana.tmp" ./pkg/cmd/grafana
) || skip "go build of Grafana failed (see the output above)"
mv "$DIR/bin/grafana.tmp" "$DIR/bin/grafana"

# The server's home: defaults.ini and the datasource plugin.json files under
# public/ are all it reads without a built frontend.
mkdir -p "$DIR/home/conf"
cp "$src/conf/defaults.ini" "$DIR/home/conf/defaults.ini"
ln -sfn "$src/public" "$DIR/home/public"
echo "$GRAFANA_VERSION" >"$DIR/.version"
log "installed $DIR/bin/grafana"
