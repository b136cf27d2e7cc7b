#!/usr/bin/env bash
# Every test: commit subjects, formatting, lints, unit and integration tests
# (real chDB, RocksDB, etcd, node processes), then the extra suites in
# scripts/tests.d (`make test` installs what they need first).
# Every stage prints "== <stage> took Ns"; a table of them ends the run.
set -euo pipefail
cd "$(dirname "$0")/.."

# Commits after this one must have subjects under 72 characters
# (CONTRIBUTING.md); older history is left as it is.
SUBJECT_CUTOFF=de37d8b
SUBJECT_MAX=71

stage_names=()
stage_secs=()

summary() {
  local rc=$? i
  echo "== stage timings (seconds)"
  for i in "${!stage_names[@]}"; do
    printf '  %6s  %s\n' "${stage_secs[$i]}" "${stage_names[$i]}"
  done
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
  git log --format='%h%x09%s' "${range[@]}" | SUBJECT_MAX=$SUBJECT_MAX python3 -c '
import os, sys
limit, bad, n = int(os.environ["SUBJECT_MAX"]), 0, 0
for line in sys.stdin.buffer.read().decode("utf-8", "replace").splitlines():
    sha, _, subject = line.partition("\t")
    n += 1
    if len(subject) > limit:
        bad += 1
        print(f"commit {sha}: subject of {len(subject)} characters (at most {limit}; detail goes in the body, CONTRIBUTING.md):\n  {subject[:100]}...")
print(f"{n} commit subjects checked, {bad} too long")
sys.exit(1 if bad else 0)' || return
}

cargo_test() {
  cargo test --release --workspace --no-fail-fast 2>&1 | tee "${TMPDIR:-/tmp}/shardhouse-cargo-test.log"
  local status=${PIPESTATUS[0]}
  ((status == 0)) || echo "cargo test failed"
  return "$status"
}

stage "commit subjects" check_commit_subjects
stage "cargo fmt --check" cargo fmt --all -- --check
stage "cargo clippy -D warnings" cargo clippy --release --workspace --all-targets -- -D warnings
stage "cargo build (binaries used by integration tests)" cargo build --release --workspace --bins
stage "cargo test" cargo_test

for suite in scripts/tests.d/*.sh; do
  [ -e "$suite" ] || continue
  stage "$suite" bash "$suite"
done
trap - EXIT
summary
echo "== all tests passed"
