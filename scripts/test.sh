#!/usr/bin/env bash
# Every test: commit subjects, formatting, lints, unit and integration tests
# (real chDB, RocksDB, etcd, node processes), then the extra suites in
# scripts/tests.d. Installs what it needs first (scripts/install-deps.sh).
#
# Where a cold run's time goes, and why the stages are in this order:
# - The slow tools of scripts/deps.d (Go builds: kube-apiserver, helm,
#   Grafana) and the Kubernetes suite's own (scripts/k8s/deps.sh: kubelet,
#   CoreDNS, containerd...) build in the background while cargo compiles;
#   cargo test waits for them (the operator tests run kube-apiserver).
# - The workspace is compiled once per mode: clippy checks it, then one
#   `cargo build --bins --tests --examples` builds everything cargo test
#   runs, with the features cargo test resolves (dev-dependencies turn on
#   features such as tokio's test-util, so a plain `cargo build --bins`
#   compiled tokio, arrow, tonic, kube and every workspace crate a second
#   time with other features). Build-script outputs, RocksDB's C++ above
#   all, are shared by clippy and the build (same profile).
# - RocksDB's C++ (~10 min cold) cannot come from Debian instead: bookworm's
#   librocksdb-dev is 7.8.3, the rocksdb crate bundles and binds 11.8.1.
# Every stage prints "== <stage> took Ns"; a table of them ends the run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Commits after this one must have subjects under 72 characters
# (CONTRIBUTING.md); older history is left as it is. Main's history is
# never rewritten, so a commit that landed over the limit is listed here
# (full hash) and not counted again.
SUBJECT_CUTOFF=de37d8b
SUBJECT_MAX=71
SUBJECT_EXEMPT="eee9a44bf79d8c4b75bfe9c05ca7eb88a5bf1c31
333a3ef713655c4bf32a1f55ee51c3e7ab69c003 59882282ed0fc0cc709b4f9f8b30b7f2f5d02202"

stage_names=()
stage_secs=()
tools_pid=""
tools_secs=""
TOOLS_LOG=$(mktemp "${TMPDIR:-/tmp}/shardhouse-tools.XXXXXX")

summary() {
  local rc=$? i
  if [ -n "$tools_pid" ]; then
    kill -TERM -- "-$tools_pid" 2>/dev/null || true
    wait "$tools_pid" 2>/dev/null || true
  fi
  rm -f "$TOOLS_LOG"
  echo "== stage timings (seconds)"
  for i in "${!stage_names[@]}"; do
    printf '  %6s  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"
  done
  [ -z "$tools_secs" ] || printf '  %6s  %s\n' "$tools_secs" "(background: scripts/deps.d and the k8s suite's tools, overlapped with cargo)"
  printf '  %6s  %s\n' "$SECONDS" "total"
  return "$rc"
}
trap summary EXIT

# stage NAME COMMAND...: runs COMMAND, records its time, stops the run if
# it fails. Functions run here must return their status explicitly: errexit
# does not apply inside a command tested by `||`.
stage() {
  local name=$1 t0=$SECONDS rc=0
  shift
  echo "== $name"
  "$@" || rc=$?
  stage_names+=("$name")
  stage_secs+=($((SECONDS - t0)))
  echo "== $name took $((SECONDS - t0))s"
  if ((rc != 0)); then
    stage_names[-1]+=" FAILED (exit $rc)"
    exit "$rc"
  fi
}

# The tools the cargo tests and the suites need but cargo does not build.
# Runs in a process group of its own (job control on while it starts), so
# a failing run can stop all of it.
tools_job() {
  local t0=$SECONDS rc=0
  scripts/install-deps.sh --extras || rc=$?
  if ((rc == 0)) && [ -e scripts/tests.d/k8s.sh ] && [ "$(id -u)" = 0 ]; then
    # Only a head start: scripts/tests.d/k8s.sh runs it again (a no-op
    # when everything is current) and reports a failure where it belongs.
    local t1=$SECONDS
    scripts/k8s/deps.sh || echo "[tools] scripts/k8s/deps.sh failed (exit $?); scripts/tests.d/k8s.sh will retry it"
    echo "[tools] scripts/k8s/deps.sh took $((SECONDS - t1))s"
  fi
  echo "[tools] done in $((SECONDS - t0))s"
  return "$rc"
}

start_tools() {
  export -f tools_job
  set -m
  bash -c 'set -euo pipefail; tools_job' >"$TOOLS_LOG" 2>&1 </dev/null &
  tools_pid=$!
  set +m
  echo "building the test tools in the background (log: $TOOLS_LOG)"
}

wait_tools() {
  local rc=0
  # What the job printed so far, then live until it ends (a stalled
  # download shows here, not as a silent wait).
  tail -n +1 -f --pid="$tools_pid" "$TOOLS_LOG" | sed -u 's/^/  | /'
  wait "$tools_pid" || rc=$?
  tools_pid=""
  tools_secs=$(sed -n 's/^\[tools\] done in \([0-9]*\)s$/\1/p' "$TOOLS_LOG" | tail -n 1)
  ((rc == 0)) || echo "the test tools failed to install (exit $rc): see the log above"
  return "$rc"
}

# Subjects of the commits since SUBJECT_CUTOFF (or HEAD's alone when the
# history does not reach it, e.g. a shallow clone).
check_commit_subjects() {
  if ! git rev-parse --verify -q HEAD >/dev/null 2>&1; then
    echo "not a git checkout: skipped"
    return 0
  fi
  local range=(-1 HEAD)
  if git cat-file -e "$SUBJECT_CUTOFF^{commit}" 2>/dev/null &&
    git merge-base --is-ancestor "$SUBJECT_CUTOFF" HEAD 2>/dev/null; then
    range=("$SUBJECT_CUTOFF..HEAD")
  else
    echo "$SUBJECT_CUTOFF is not in this history: checking HEAD only"
  fi
  git log --format='%H%x09%s' "${range[@]}" |
    SUBJECT_MAX=$SUBJECT_MAX SUBJECT_EXEMPT=$SUBJECT_EXEMPT python3 -c '
import os, sys
limit, bad, n = int(os.environ["SUBJECT_MAX"]), 0, 0
exempt = set(os.environ["SUBJECT_EXEMPT"].split())
for line in sys.stdin.buffer.read().decode("utf-8", "replace").splitlines():
    sha, _, subject = line.partition("\t")
    n += 1
    if len(subject) > limit and sha not in exempt:
        bad += 1
        print(f"commit {sha}: subject of {len(subject)} characters (at most {limit}; detail goes in the body, CONTRIBUTING.md):\n  {subject[:100]}...")
if bad:
    print("Not landed yet: reword it (git rebase -i main). Already on main: add its hash to SUBJECT_EXEMPT in scripts/test.sh.")
print(f"{n} commit subjects checked, {bad} too long")
sys.exit(1 if bad else 0)' || return
}

cargo_test() {
  cargo test --release --workspace --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/shardhouse-cargo-test.log"
  local status=${PIPESTATUS[0]}
  ((status == 0)) || echo "cargo test failed"
  return "$status"
}

stage "deps" scripts/install-deps.sh --core
start_tools
stage "commit subjects" check_commit_subjects
stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy -D warnings" cargo clippy --release --workspace --all-targets -- -D warnings
# Every crate of router/, node/ and common/, and the operator (issue 26).
CHECKED_SRC=(router/src router/eval/src router/influxql/src router/promql/src common/src
  common/backup/src node/engine/src node/wal/src node/server/src operator/src)
stage "module cycles" python3 scripts/check-module-cycles.py --self-test "${CHECKED_SRC[@]}"
stage "function length" python3 scripts/check-function-length.py --self-test "${CHECKED_SRC[@]}"
stage "cargo build (binaries, tests, examples)" \
  cargo build --release --workspace --bins --tests --examples
stage "test tools (waiting for the background build)" wait_tools
stage "cargo test" cargo_test

for suite in scripts/tests.d/*.sh; do
  [ -e "$suite" ] || continue
  stage "$suite" bash "$suite"
done
trap - EXIT
summary
echo "== all tests passed"
