# shellcheck shell=bash
# What the benchmark scripts (bench-e2e, bench-small-writes, bench-scaleout)
# share beyond the cluster and QuestDB helpers; bench-query and bench-promql
# take bench_profile_md from here.

# QuestDB as its configuration docs advise for a host this small: each of
# its three shared pools (network, query, write) defaults to max(2, CPUs)
# threads, and an idle worker spins and yields for thousands of empty loops
# before it naps (the recorded run: 1.9 cores busy at 25k points/s). Here:
# two network workers (they parse ILP over HTTP), one query and one write
# worker (nothing queries during a ramp), and idle workers nap after 100
# and sleep after 1,000 empty loops instead of 7,000 and 10,000.
# QDB_DEFAULTS=1 leaves QuestDB at its own defaults; each QDB_* variable
# already set wins. Exported: qdb_start passes its environment to QuestDB.
qdb_small_host() {
  [ "${QDB_DEFAULTS:-0}" = 1 ] && return 0
  export QDB_SHARED_NETWORK_WORKER_COUNT=${QDB_SHARED_NETWORK_WORKER_COUNT:-2}
  export QDB_SHARED_QUERY_WORKER_COUNT=${QDB_SHARED_QUERY_WORKER_COUNT:-1}
  export QDB_SHARED_WRITE_WORKER_COUNT=${QDB_SHARED_WRITE_WORKER_COUNT:-1}
  export QDB_SHARED_WORKER_NAP_THRESHOLD=${QDB_SHARED_WORKER_NAP_THRESHOLD:-100}
  export QDB_SHARED_WORKER_SLEEP_THRESHOLD=${QDB_SHARED_WORKER_SLEEP_THRESHOLD:-1000}
}

# The QuestDB settings in force, for the report.
qdb_settings() {
  if [ "${QDB_DEFAULTS:-0}" = 1 ]; then
    echo "QuestDB defaults"
  else
    env | grep -E '^QDB_SHARED_' | sort | tr '\n' ' '
  fi
}

# The 1-minute load average now (figures taken on a busy machine say so).
bench_load() { cut -d' ' -f1 /proc/loadavg; }

# bench_ramp NAME BATCH URL EXTRA_ARGS...: one open-model ramp of the load
# generator ($LT) into $OUT/NAME.{md,json,loadtest.log}: the POINT_RATES
# steps, then GROW per step until a step delivers < 80% of offered. Reads
# DATASET, PROTOCOL, POINT_RATES, GROW, MAX_STEPS, STEP_SECS, MAX_INFLIGHT
# and WARMUP_SECS; NAME is also the key of its last line
# (NAME_sustainable_points_per_sec=). Notes the load average around it.
bench_ramp() {
  local name=$1 batch=$2 url=$3 load0
  shift 3
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  "$LT" ramp --name "$name" --url "$url" --protocol "$PROTOCOL" --dataset "$DATASET" \
    --batch "$batch" --point-rates "$POINT_RATES" --grow "$GROW" --max-steps "$MAX_STEPS" \
    --step-secs "$STEP_SECS" --max-inflight "$MAX_INFLIGHT" --stop-below-pct 80 \
    --warmup-secs "${WARMUP_SECS:-5}" --json "$OUT/$name.json" \
    --summary-key "$name" "$@" 2>"$OUT/$name.loadtest.log" | tee "$OUT/$name.md"
  echo "note: load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end" | tee -a "$OUT/$name.md"
}

# bench_sustainable NAME: the NAME_sustainable_points_per_sec of a ramp (0
# when it did not run).
bench_sustainable() {
  local v
  v=$(grep -h "^$1_sustainable_points_per_sec=" "$OUT/$1.md" 2>/dev/null | tail -n 1 | cut -d= -f2)
  echo "${v:-0}"
}

# bench_profile_md WORK NAME NODES: $WORK/profile.NAME.md from the CPU per
# query the driver's `loop` wrote ($WORK/profile.NAME.json) and, when
# `perf record` left $WORK/perf.NAME.data, the router's and each node's
# share by library and top functions. Needs cluster.sh (sh_pid_of).
bench_profile_md() {
  local work=$1 name=$2 nodes=$3 k proc pid
  {
    echo "#### $name: CPU per query (ms) and where it goes"
    echo
    echo '```'
    cat "$work/profile.$name.json"
    if [ -s "$work/perf.$name.data" ]; then
      for k in $(seq 0 "$nodes"); do
        if ((k == 0)); then proc=router; else proc=node-$k; fi
        pid=$(sh_pid_of "$proc")
        echo "-- $proc (pid $pid): % of all samples by library, then top functions (self)"
        perf report -i "$work/perf.$name.data" --pid "$pid" --no-children --sort dso \
          --stdio -g none --percent-limit 1 2>/dev/null | grep -v -e '^#' -e '^$' | head -n 8 || true
        perf report -i "$work/perf.$name.data" --pid "$pid" --no-children --sort sym \
          --stdio -g none --percent-limit 0.7 2>/dev/null | grep -v -e '^#' -e '^$' | head -n 15 || true
      done
    fi
    echo '```'
    echo
  } >"$work/profile.$name.md"
}
