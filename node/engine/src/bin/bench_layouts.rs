//! `make bench-layouts`: issue 13's tag layouts at 1M series, through
//! Shardhouse's own engine loader and pool (chDB via ADBC, Arrow ingest).
//!
//! A TSBS cpu-only-like measurement `cpu` (tags host: 1M distinct, region:
//! 10, rack: 100; 10 Float64 fields) is stored three ways:
//! - (a) "tags as columns": tags are `LowCardinality(String)` columns of the
//!   fact table;
//! - (b) "tag index": a narrow fact table plus `_series` with the tags in a
//!   `Map`, one row per series, inserted once;
//! - (b) with today's fact table (`ReplacingMergeTree`, plain `Nullable`
//!   fields) to show what the `anyLast` columns cost.
//!
//! Both (a) and (b) fact tables are `AggregatingMergeTree ORDER BY
//! (series_id, time)` with `SimpleAggregateFunction(anyLast,
//! Nullable(Float64))` fields: rewriting some fields of a point keeps the
//! others. The bench first checks that chDB merges fields that way, then
//! measures ingest (rows/s, process CPU per row, and `OPTIMIZE ... FINAL` as
//! the merge cost) and four tag queries, and fails when the layouts answer
//! differently. Prints markdown tables, then one `tag_layout=...` line per
//! layout.
//!
//! `BENCH_LAYOUTS_SERIES` / `BENCH_LAYOUTS_TIMESTAMPS` shrink the run (default
//! 1,000,000 series x 5 timestamps).
// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{
    Array, ArrayRef, Float64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::{Engine, EngineConfig};

// bench-engine's helpers (Arrow fields, CPU split, formatting), shared
// without a library of bench code; its `main` is unused here.
#[allow(dead_code)]
#[path = "bench_engine.rs"]
mod bench_engine;
use bench_engine::{exec, fmt_int, map_array, map_field, scalar_u64, ts_field, CpuSplit};

const SERIES: usize = 1_000_000;
const TIMESTAMPS: usize = 5;
const REGIONS: usize = 10;
const RACKS: usize = 100;
const BATCH: usize = 200_000;
/// 30 s between points, from a minute boundary: several 1-minute windows.
const INTERVAL_NS: i64 = 30_000_000_000;
const BASE_NS: i64 = 1_699_999_980_000_000_000;
const RUNS: usize = 5;
const FIELDS: [&str; 10] = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
];
const ANY_LAST: &str = "SimpleAggregateFunction(anyLast, Nullable(Float64))";
const SERIES_DDL: &str = "(series_id UInt64, measurement LowCardinality(String), tags Map(LowCardinality(String), String)) ENGINE = ReplacingMergeTree ORDER BY (measurement, series_id)";

fn host(s: usize) -> String {
    format!("host_{s}")
}
fn region(s: usize) -> String {
    format!("region_{}", s % REGIONS)
}
fn rack(s: usize) -> String {
    format!("rack_{}", (s / REGIONS) % RACKS)
}

/// Integer-valued Float64 in [0, 1000): sums are exact, so both layouts'
/// answers compare exactly whatever order chDB aggregates in.
fn value(series: usize, ts: usize, field: usize) -> f64 {
    let mut z = ((series as u64) << 16 | (ts as u64) << 4 | field as u64)
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % 1000) as f64
}

fn env_usize(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

/// Process CPU (user + system, every thread, also exited ones) in seconds.
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The series of one batch, shared by every timestamp.
struct Chunk {
    series_id: ArrayRef,
    host: ArrayRef,
    region: ArrayRef,
    rack: ArrayRef,
    /// `_series` rows of these series.
    series_rows: RecordBatch,
}

/// One timestamp of one chunk.
struct FactBatch {
    chunk: usize,
    time: ArrayRef,
    fields: Vec<ArrayRef>,
}

struct Data {
    series: usize,
    timestamps: usize,
    chunks: Vec<Chunk>,
    /// Timestamp after timestamp, chunks in order (as scrapes arrive).
    facts: Vec<FactBatch>,
    series_schema: SchemaRef,
}

impl Data {
    fn build(series: usize, timestamps: usize) -> Result<Data> {
        let series_schema = Arc::new(Schema::new(vec![
            Field::new("series_id", DataType::UInt64, false),
            Field::new("measurement", DataType::Utf8, false),
            map_field("tags"),
        ]));
        let ranges: Vec<Range<usize>> = (0..series)
            .step_by(BATCH)
            .map(|s| s..(s + BATCH).min(series))
            .collect();
        let mut chunks = Vec::new();
        for r in &ranges {
            let ids = UInt64Array::from_iter_values(r.clone().map(|s| {
                let (h, g, k) = (host(s), region(s), rack(s));
                shardhouse_common::series::series_id(
                    "cpu",
                    &[("host", &h), ("rack", &k), ("region", &g)],
                )
            }));
            let series_id: ArrayRef = Arc::new(ids);
            let keys =
                StringArray::from_iter_values(r.clone().flat_map(|_| ["host", "rack", "region"]));
            let vals = StringArray::from_iter_values(
                r.clone().flat_map(|s| [host(s), rack(s), region(s)]),
            );
            let series_rows = RecordBatch::try_new(
                series_schema.clone(),
                vec![
                    series_id.clone(),
                    Arc::new(StringArray::from_iter_values(r.clone().map(|_| "cpu"))),
                    Arc::new(map_array(keys, vals, 3, r.len())?),
                ],
            )?;
            chunks.push(Chunk {
                series_id,
                host: Arc::new(StringArray::from_iter_values(r.clone().map(host))),
                region: Arc::new(StringArray::from_iter_values(r.clone().map(region))),
                rack: Arc::new(StringArray::from_iter_values(r.clone().map(rack))),
                series_rows,
            });
        }
        let mut facts = Vec::new();
        for ts in 0..timestamps {
            for (chunk, r) in ranges.iter().enumerate() {
                let t = BASE_NS + ts as i64 * INTERVAL_NS;
                facts.push(FactBatch {
                    chunk,
                    time: Arc::new(TimestampNanosecondArray::from_iter_values(
                        r.clone().map(|_| t),
                    )),
                    fields: (0..FIELDS.len())
                        .map(|f| {
                            Arc::new(Float64Array::from_iter_values(
                                r.clone().map(|s| value(s, ts, f)),
                            )) as ArrayRef
                        })
                        .collect(),
                });
            }
        }
        Ok(Data {
            series,
            timestamps,
            chunks,
            facts,
            series_schema,
        })
    }

    fn rows(&self) -> usize {
        self.series * self.timestamps
    }

    fn last_time_ns(&self) -> i64 {
        BASE_NS + (self.timestamps as i64 - 1) * INTERVAL_NS
    }
}

fn fact_schema(tag_columns: bool) -> SchemaRef {
    let mut fields = vec![ts_field(), Field::new("series_id", DataType::UInt64, false)];
    if tag_columns {
        for t in ["host", "region", "rack"] {
            fields.push(Field::new(t, DataType::Utf8, false));
        }
    }
    fields.extend(
        FIELDS
            .iter()
            .map(|f| Field::new(*f, DataType::Float64, true)),
    );
    Arc::new(Schema::new(fields))
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// (a): tags as `LowCardinality(String)` columns, anyLast fields.
    Columns,
    /// (b): narrow fact table with anyLast fields, tags in `_series`.
    Index,
    /// (b) with today's fact table: ReplacingMergeTree, plain Nullable fields.
    IndexReplacing,
}

struct Layout {
    kind: Kind,
    /// Machine-readable name.
    key: &'static str,
    name: &'static str,
    db: &'static str,
}

const LAYOUTS: [Layout; 3] = [
    Layout {
        kind: Kind::Columns,
        key: "tags_as_columns",
        name: "(a) tags as columns (AggregatingMergeTree, anyLast)",
        db: "tl_columns",
    },
    Layout {
        kind: Kind::Index,
        key: "tag_index",
        name: "(b) tag index (AggregatingMergeTree, anyLast) + _series",
        db: "tl_index",
    },
    Layout {
        kind: Kind::IndexReplacing,
        key: "tag_index_replacing",
        name: "(b) tag index, fact as today (ReplacingMergeTree, Nullable) + _series",
        db: "tl_index_rmt",
    },
];

impl Layout {
    fn tag_index(&self) -> bool {
        self.kind != Kind::Columns
    }

    fn ddl(&self) -> Vec<String> {
        let (engine, field_type) = match self.kind {
            Kind::IndexReplacing => ("ReplacingMergeTree", "Nullable(Float64)"),
            _ => ("AggregatingMergeTree", ANY_LAST),
        };
        let tags = if self.tag_index() {
            ""
        } else {
            "host LowCardinality(String), region LowCardinality(String), rack LowCardinality(String), "
        };
        let fields: Vec<String> = FIELDS.iter().map(|f| format!("{f} {field_type}")).collect();
        // chDB 26.9 refuses AggregatingMergeTree columns that are neither in
        // the sorting key nor aggregates unless allowed: tags are, as the
        // series key, a function of series_id, so any row's value is right.
        let settings = if self.kind == Kind::Columns {
            " SETTINGS allow_dimensions_outside_sorting_key = 1"
        } else {
            ""
        };
        let mut out = vec![
            format!("DROP DATABASE IF EXISTS {} SYNC", self.db),
            format!("CREATE DATABASE {}", self.db),
            format!(
                "CREATE TABLE {}.cpu (time DateTime64(9), series_id UInt64, {tags}{}) ENGINE = {engine} ORDER BY (series_id, time){settings}",
                self.db,
                fields.join(", ")
            ),
        ];
        if self.tag_index() {
            out.push(format!("CREATE TABLE {}._series {SERIES_DDL}", self.db));
        }
        out
    }
}

struct IngestFigures {
    wall_s: f64,
    cpu_ns_row: f64,
    /// Of `cpu_ns_row`: chDB's background merge threads during the inserts.
    bg_merge_ns_row: f64,
    parts_after: u64,
    optimize_s: f64,
    merge_cpu_ns_row: f64,
    bytes: u64,
    /// Of `bytes`: the `_series` table.
    series_bytes: u64,
    /// The machine's 1-minute load average before the inserts (noise).
    load_before: String,
}

fn wait_for_merges(engine: &Engine) -> Result<()> {
    let t0 = Instant::now();
    while scalar_u64(engine, "SELECT toUInt64(count()) FROM system.merges")? > 0 {
        if t0.elapsed() > Duration::from_secs(120) {
            bail!("background merges still running after 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn active_parts(engine: &Engine, db: &str, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.parts WHERE active AND database = '{db}' AND table = '{table}'"),
    )
}

/// Inserts every batch on one connection (series rows right after the fact
/// rows that first carry them, as a flush does), then `OPTIMIZE ... FINAL`
/// until one part is left (timed separately: the merge cost).
fn ingest(engine: &Engine, layout: &Layout, data: &Data) -> Result<IngestFigures> {
    let pool: &Pool = engine.pool();
    for sql in layout.ddl() {
        exec(pool, &sql)?;
    }
    wait_for_merges(engine)?;
    let schema = fact_schema(!layout.tag_index());
    let db = layout.db;
    let load_before = loadavg().split(' ').next().unwrap_or_default().to_string();
    let (cpu0, split0, t0) = (process_cpu_s(), CpuSplit::now(), Instant::now());
    {
        let mut conn = pool.get();
        let mut series_done = vec![false; data.chunks.len()];
        for f in &data.facts {
            let c = &data.chunks[f.chunk];
            let mut cols = vec![f.time.clone(), c.series_id.clone()];
            if !layout.tag_index() {
                cols.extend([c.host.clone(), c.region.clone(), c.rack.clone()]);
            }
            cols.extend(f.fields.iter().cloned());
            let batch = RecordBatch::try_new(schema.clone(), cols)?;
            conn.ingest(db, "cpu", schema.clone(), vec![batch])?;
            if layout.tag_index() && !series_done[f.chunk] {
                series_done[f.chunk] = true;
                conn.ingest(
                    db,
                    "_series",
                    data.series_schema.clone(),
                    vec![c.series_rows.clone()],
                )?;
            }
        }
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let cpu_s = process_cpu_s() - cpu0;
    let split = CpuSplit::now().since(split0);
    let parts_after = active_parts(engine, db, "cpu")?;

    let mut tables = vec!["cpu"];
    if layout.tag_index() {
        tables.push("_series");
    }
    let (cpu0, t0) = (process_cpu_s(), Instant::now());
    for table in tables {
        for attempt in 0.. {
            exec(pool, &format!("OPTIMIZE TABLE {db}.{table} FINAL"))?;
            if active_parts(engine, db, table)? <= 1 {
                break;
            }
            if attempt == 20 {
                bail!("{db}.{table}: OPTIMIZE FINAL left several parts");
            }
            wait_for_merges(engine)?;
        }
    }
    let optimize_s = t0.elapsed().as_secs_f64();
    let merge_cpu_s = process_cpu_s() - cpu0;
    let bytes_of = |filter: &str| {
        scalar_u64(
            engine,
            &format!("SELECT toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE active AND database = '{db}'{filter}"),
        )
    };
    let (bytes, series_bytes) = (bytes_of("")?, bytes_of(" AND table = '_series'")?);
    let rows = data.rows() as f64;
    Ok(IngestFigures {
        wall_s,
        cpu_ns_row: cpu_s * 1e9 / rows,
        bg_merge_ns_row: split.merges_s * 1e9 / rows,
        parts_after,
        optimize_s,
        merge_cpu_ns_row: merge_cpu_s * 1e9 / rows,
        bytes,
        series_bytes,
        load_before,
    })
}

// --- Field-merge semantics -------------------------------------------------

fn two_field_batch(rows: &[(u64, Option<f64>, Option<f64>)]) -> Result<(SchemaRef, RecordBatch)> {
    let schema = Arc::new(Schema::new(vec![
        ts_field(),
        Field::new("series_id", DataType::UInt64, false),
        Field::new("u", DataType::Float64, true),
        Field::new("s", DataType::Float64, true),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|_| BASE_NS),
            )),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Float64Array::from_iter(rows.iter().map(|r| r.2))),
        ],
    )?;
    Ok((schema, batch))
}

fn ingest_rows(pool: &Pool, table: &str, rows: &[(u64, Option<f64>, Option<f64>)]) -> Result<()> {
    let (schema, batch) = two_field_batch(rows)?;
    pool.get()
        .ingest("tl_semantics", table, schema, vec![batch])?;
    Ok(())
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("NULL".to_string(), |v| format!("{v}"))
}

/// `(u, s)` of one point, read with FINAL.
fn read_point(engine: &Engine, table: &str, sid: u64) -> Result<String> {
    let b = engine.query_global(&format!(
        "SELECT toNullable(toFloat64(u)), toNullable(toFloat64(s)) FROM tl_semantics.{table} FINAL WHERE series_id = {sid}"
    ))?;
    let b = b
        .iter()
        .find(|b| b.num_rows() > 0)
        .context("point not found")?;
    let get = |i: usize| {
        let a = b.column(i).as_primitive::<Float64Type>();
        (!a.is_null(0)).then(|| a.value(0))
    };
    Ok(format!("u={}, s={}", fmt_opt(get(0)), fmt_opt(get(1))))
}

/// Count and sum of `u` over the bulk check's points, read with FINAL.
fn read_bulk(engine: &Engine, table: &str) -> Result<String> {
    let b = engine.query_global(&format!(
        "SELECT toUInt64(count()), toUInt64(sum(u)) FROM tl_semantics.{table} FINAL WHERE series_id >= 1000"
    ))?;
    let n = arrow_cast::display::array_value_to_string(b[0].column(0), 0)?;
    let sum = arrow_cast::display::array_value_to_string(b[0].column(1), 0)?;
    Ok(format!("{n} points, sum(u)={sum}"))
}

/// Checks the field-merge semantics (a) and (b) rely on; prints a table
/// (also for today's ReplacingMergeTree, for contrast) and returns whether
/// the anyLast table behaves as required.
fn check_semantics(engine: &Engine) -> Result<bool> {
    let pool = engine.pool();
    exec(pool, "DROP DATABASE IF EXISTS tl_semantics SYNC")?;
    exec(pool, "CREATE DATABASE tl_semantics")?;
    let tables = [
        (
            "agg",
            format!("u {ANY_LAST}, s {ANY_LAST}"),
            "AggregatingMergeTree",
        ),
        (
            "rmt",
            "u Nullable(Float64), s Nullable(Float64)".into(),
            "ReplacingMergeTree",
        ),
    ];
    for (t, cols, eng) in &tables {
        exec(
            pool,
            &format!("CREATE TABLE tl_semantics.{t} (time DateTime64(9), series_id UInt64, {cols}) ENGINE = {eng} ORDER BY (series_id, time)"),
        )?;
        // Point 1: three inserts.
        ingest_rows(pool, t, &[(1, Some(1.0), None)])?;
        ingest_rows(pool, t, &[(1, None, Some(2.0))])?;
        ingest_rows(pool, t, &[(1, Some(3.0), None)])?;
        // Point 2: one insert, u=1 then u=5. Point 3: one insert, u=1 then s=2.
        ingest_rows(pool, t, &[(2, Some(1.0), None), (2, Some(5.0), None)])?;
        ingest_rows(pool, t, &[(3, Some(1.0), None), (3, None, Some(2.0))])?;
        // Points 1000..2000: one insert of 100,000 rows, keys interleaved,
        // u = row number: the last row of point k is 99,000 + (k - 1000).
        let bulk: Vec<(u64, Option<f64>, Option<f64>)> = (0..100_000u64)
            .map(|i| (1000 + i % 1000, Some(i as f64), None))
            .collect();
        ingest_rows(pool, t, &bulk)?;
    }
    let bulk_expected = format!(
        "1000 points, sum(u)={}",
        (0..1000u64).map(|k| 99_000 + k).sum::<u64>()
    );
    type Read<'a> = Box<dyn Fn(&str) -> Result<String> + 'a>;
    let checks: [(&str, &str, Read); 4] = [
        (
            "3 inserts: (u=1), (s=2), (u=3)",
            "u=3, s=2",
            Box::new(|t| read_point(engine, t, 1)),
        ),
        (
            "1 insert: u=1 then u=5",
            "u=5, s=NULL",
            Box::new(|t| read_point(engine, t, 2)),
        ),
        (
            "1 insert: (u=1) then (s=2)",
            "u=1, s=2",
            Box::new(|t| read_point(engine, t, 3)),
        ),
        (
            "1 insert of 100,000 rows, 1,000 points interleaved, u = row number",
            &bulk_expected,
            Box::new(|t| read_bulk(engine, t)),
        ),
    ];
    let mut before = Vec::new();
    for (_, _, read) in &checks {
        before.push((read("agg")?, read("rmt")?));
    }
    for (t, _, _) in &tables {
        exec(pool, &format!("OPTIMIZE TABLE tl_semantics.{t} FINAL"))?;
    }
    println!("## Field-merge semantics (read with FINAL)");
    println!();
    println!("| Writes | expected | AggregatingMergeTree + anyLast: before OPTIMIZE | after OPTIMIZE FINAL | ok | ReplacingMergeTree (today), after OPTIMIZE |");
    println!("|---|---|---|---|---|---|");
    let mut all_ok = true;
    for ((what, expected, read), (agg_before, _)) in checks.iter().zip(&before) {
        let (agg_after, rmt_after) = (read("agg")?, read("rmt")?);
        let ok = agg_before == expected && &agg_after == expected;
        all_ok &= ok;
        println!(
            "| {what} | {expected} | {agg_before} | {agg_after} | {} | {rmt_after} |",
            if ok { "yes" } else { "**NO**" }
        );
    }
    println!();
    exec(pool, "DROP DATABASE tl_semantics SYNC")?;
    Ok(all_ok)
}

// --- Queries ----------------------------------------------------------------

/// One way to ask a query; `{db}`, `{F}` (FINAL or nothing) and `{T}` (the
/// last timestamp) are filled in per run.
struct Variant {
    name: &'static str,
    sql: &'static str,
}

/// A query in the forms each layout can ask it; every form is timed and the
/// fastest is reported.
struct Query {
    id: &'static str,
    what: &'static str,
    /// (a) forms.
    columns: Vec<Variant>,
    /// (b) forms.
    index: Vec<Variant>,
}

const SERIES_HOST: &str =
    "(SELECT series_id, tags['host'] AS host FROM {db}._series WHERE measurement = 'cpu')";

fn queries() -> Vec<Query> {
    let v = |name, sql| Variant { name, sql };
    vec![
        Query {
            id: "Q1",
            what: "host = 'host_123': mean(usage_user) per 1-minute window",
            columns: vec![
                v("WHERE host = ...", "SELECT toStartOfMinute(time) AS w, avg(usage_user) AS v FROM {db}.cpu {F} WHERE host = 'host_123' GROUP BY w ORDER BY w"),
                // Tags are a function of series_id: the inner scan needs no FINAL.
                v("series_id IN (host scan without FINAL)", "SELECT toStartOfMinute(time) AS w, avg(usage_user) AS v FROM {db}.cpu {F} WHERE series_id IN (SELECT series_id FROM {db}.cpu WHERE host = 'host_123') GROUP BY w ORDER BY w"),
            ],
            index: vec![
                v("series_id IN (tag index)", "SELECT toStartOfMinute(time) AS w, avg(usage_user) AS v FROM {db}.cpu {F} WHERE series_id IN (SELECT series_id FROM {db}._series WHERE measurement = 'cpu' AND tags['host'] = 'host_123') GROUP BY w ORDER BY w"),
            ],
        },
        Query {
            id: "Q2",
            what: "host =~ /^host_12[0-9]$/: max(usage_system) by host",
            columns: vec![
                v("WHERE match(host, ...)", "SELECT host, max(usage_system) AS v FROM {db}.cpu {F} WHERE match(host, '^host_12[0-9]$') GROUP BY host ORDER BY host"),
                v("series_id IN (host scan without FINAL)", "SELECT host, max(usage_system) AS v FROM {db}.cpu {F} WHERE series_id IN (SELECT series_id FROM {db}.cpu WHERE match(host, '^host_12[0-9]$')) GROUP BY host ORDER BY host"),
            ],
            index: vec![
                v("JOIN matched series", "SELECT s.host AS host, max(f.usage_system) AS v FROM {db}.cpu AS f {F} INNER JOIN (SELECT series_id, tags['host'] AS host FROM {db}._series WHERE measurement = 'cpu' AND match(tags['host'], '^host_12[0-9]$')) AS s USING series_id GROUP BY host ORDER BY host"),
                v("series_id IN + JOIN", "SELECT s.host AS host, max(f.usage_system) AS v FROM {db}.cpu AS f {F} INNER JOIN (SELECT series_id, tags['host'] AS host FROM {db}._series WHERE measurement = 'cpu' AND match(tags['host'], '^host_12[0-9]$')) AS s USING series_id WHERE f.series_id IN (SELECT series_id FROM {db}._series WHERE measurement = 'cpu' AND match(tags['host'], '^host_12[0-9]$')) GROUP BY host ORDER BY host"),
                v("IN, aggregate per series, then JOIN", "SELECT s.host AS host, max(p.v) AS v FROM (SELECT series_id, max(usage_system) AS v FROM {db}.cpu {F} WHERE series_id IN (SELECT series_id FROM {db}._series WHERE measurement = 'cpu' AND match(tags['host'], '^host_12[0-9]$')) GROUP BY series_id) AS p INNER JOIN (SELECT series_id, tags['host'] AS host FROM {db}._series WHERE measurement = 'cpu' AND match(tags['host'], '^host_12[0-9]$')) AS s USING series_id GROUP BY host ORDER BY host"),
            ],
        },
        Query {
            id: "Q3",
            what: "mean(usage_idle) by region, all rows",
            columns: vec![v("GROUP BY region", "SELECT region, avg(usage_idle) AS v FROM {db}.cpu {F} GROUP BY region ORDER BY region")],
            index: vec![
                v("JOIN _series", "SELECT s.region AS region, avg(f.usage_idle) AS v FROM {db}.cpu AS f {F} INNER JOIN (SELECT series_id, tags['region'] AS region FROM {db}._series WHERE measurement = 'cpu') AS s USING series_id GROUP BY region ORDER BY region"),
                // ANY LEFT: at most one match per fact row, also while _series holds a
                // not yet merged duplicate (ANY INNER would also keep one fact row
                // per series_id: a wrong answer, which the check catches).
                v("ANY LEFT JOIN _series", "SELECT s.region AS region, avg(f.usage_idle) AS v FROM {db}.cpu AS f {F} ANY LEFT JOIN (SELECT series_id, tags['region'] AS region FROM {db}._series WHERE measurement = 'cpu') AS s USING series_id GROUP BY region ORDER BY region"),
                v("aggregate per series, then JOIN", "SELECT s.region AS region, sum(p.total) / sum(p.n) AS v FROM (SELECT series_id, sum(usage_idle) AS total, count(usage_idle) AS n FROM {db}.cpu {F} GROUP BY series_id) AS p INNER JOIN (SELECT series_id, tags['region'] AS region FROM {db}._series WHERE measurement = 'cpu') AS s USING series_id GROUP BY region ORDER BY region"),
                v("_series left, aggregate per series right", "SELECT s.region AS region, sum(p.total) / sum(p.n) AS v FROM (SELECT series_id, tags['region'] AS region FROM {db}._series WHERE measurement = 'cpu') AS s INNER JOIN (SELECT series_id, sum(usage_idle) AS total, count(usage_idle) AS n FROM {db}.cpu {F} GROUP BY series_id) AS p USING series_id GROUP BY region ORDER BY region"),
            ],
        },
        Query {
            id: "Q4",
            what: "last timestamp: mean(usage_idle) by host (a group per series)",
            columns: vec![v("GROUP BY host", "SELECT host, avg(usage_idle) AS v FROM {db}.cpu {F} WHERE time = {T} GROUP BY host")],
            index: vec![
                v("JOIN _series", "SELECT s.host AS host, avg(f.usage_idle) AS v FROM {db}.cpu AS f {F} INNER JOIN {SH} AS s USING series_id WHERE f.time = {T} GROUP BY host"),
                v("ANY LEFT JOIN _series", "SELECT s.host AS host, avg(f.usage_idle) AS v FROM {db}.cpu AS f {F} ANY LEFT JOIN {SH} AS s USING series_id WHERE f.time = {T} GROUP BY host"),
                v("filtered fact subquery JOIN _series", "SELECT s.host AS host, avg(f.v) AS v FROM (SELECT series_id, usage_idle AS v FROM {db}.cpu {F} WHERE time = {T}) AS f INNER JOIN {SH} AS s USING series_id GROUP BY host"),
                v("_series left, fact right", "SELECT s.host AS host, avg(f.v) AS v FROM {SH} AS s INNER JOIN (SELECT series_id, usage_idle AS v FROM {db}.cpu {F} WHERE time = {T}) AS f USING series_id GROUP BY host"),
            ],
        },
    ]
}

fn render(sql: &str, db: &str, final_kw: bool, last_ns: i64) -> String {
    sql.replace("{SH}", SERIES_HOST)
        .replace("{db}", db)
        .replace("{F}", if final_kw { "FINAL" } else { "" })
        .replace(
            "{T}",
            &format!("fromUnixTimestamp64Nano(toInt64({last_ns}))"),
        )
}

/// An answer reduced to what two layouts must agree on: the row count, the
/// sum of every numeric column and a hash sum of every text column (all
/// independent of row order).
#[derive(Clone, Debug)]
struct Answer {
    rows: usize,
    columns: Vec<Sum>,
}

#[derive(Clone, Debug)]
enum Sum {
    Num(f64),
    Text(u64),
}

impl Answer {
    fn of(batches: &[RecordBatch]) -> Result<Answer> {
        let width = batches.first().map_or(0, |b| b.num_columns());
        let mut columns: Vec<Option<Sum>> = vec![None; width];
        let mut rows = 0;
        for b in batches {
            rows += b.num_rows();
            for (i, col) in b.columns().iter().enumerate() {
                let sum = match col.data_type() {
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Dictionary(..) => {
                        let text = arrow_cast::cast::cast(col, &DataType::Utf8)?;
                        let mut total = 0u64;
                        for v in text.as_string::<i32>().iter().flatten() {
                            let mut h = DefaultHasher::new();
                            v.hash(&mut h);
                            total = total.wrapping_add(h.finish());
                        }
                        Sum::Text(total)
                    }
                    DataType::Timestamp(..) => {
                        let n = arrow_cast::cast::cast(col, &DataType::Int64)?;
                        let n = arrow_cast::cast::cast(&n, &DataType::Float64)?;
                        Sum::Num(n.as_primitive::<Float64Type>().iter().flatten().sum())
                    }
                    _ => {
                        let n = arrow_cast::cast::cast(col, &DataType::Float64)?;
                        Sum::Num(n.as_primitive::<Float64Type>().iter().flatten().sum())
                    }
                };
                columns[i] = Some(match (columns[i].take(), sum) {
                    (None, s) => s,
                    (Some(Sum::Num(a)), Sum::Num(b)) => Sum::Num(a + b),
                    (Some(Sum::Text(a)), Sum::Text(b)) => Sum::Text(a.wrapping_add(b)),
                    _ => bail!("column {i} changes type between batches"),
                });
            }
        }
        Ok(Answer {
            rows,
            columns: columns.into_iter().flatten().collect(),
        })
    }

    fn matches(&self, other: &Answer) -> bool {
        self.rows == other.rows
            && self.columns.len() == other.columns.len()
            && self.columns.iter().zip(&other.columns).all(|p| match p {
                (Sum::Num(a), Sum::Num(b)) => (a - b).abs() <= 1e-9 * a.abs().max(1.0),
                (Sum::Text(a), Sum::Text(b)) => a == b,
                _ => false,
            })
    }
}

/// Median of `RUNS` runs in ms, and the answer of the first run (every run
/// must give the same).
fn time_query(engine: &Engine, sql: &str) -> Result<(f64, Answer)> {
    let mut times = Vec::with_capacity(RUNS);
    let mut answer: Option<Answer> = None;
    for _ in 0..RUNS {
        let t0 = Instant::now();
        let batches = engine.query_global(sql).with_context(|| sql.to_string())?;
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        let a = Answer::of(&batches)?;
        match &answer {
            None => answer = Some(a),
            Some(first) if !first.matches(&a) => bail!("{sql}: runs disagree: {first:?} vs {a:?}"),
            Some(_) => {}
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((times[RUNS / 2], answer.context("RUNS > 0")?))
}

/// The fastest variant of one query on one layout (with FINAL, and the
/// same variant without), every variant's median, and mismatches.
struct QueryFigures {
    best: &'static str,
    final_ms: f64,
    no_final_ms: f64,
    /// Every form: name, median with FINAL, median without.
    variants: Vec<(&'static str, f64, f64)>,
}

fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1}")
    } else {
        fmt_int(ms)
    }
}

// --- Main ------------------------------------------------------------------

fn main() -> Result<()> {
    let series = env_usize("BENCH_LAYOUTS_SERIES", SERIES)?;
    let timestamps = env_usize("BENCH_LAYOUTS_TIMESTAMPS", TIMESTAMPS)?;
    let data_dir =
        std::env::temp_dir().join(format!("shardhouse-bench-layouts-{}", std::process::id()));
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let engine = Engine::open(EngineConfig {
        data_dir: data_dir.clone(),
        pool_size: 2,
        ..Default::default()
    })?;
    let version = engine.query_global("SELECT version()")?;
    let version = arrow_cast::display::array_value_to_string(version[0].column(0), 0)?;
    println!(
        "# bench-layouts: chDB {version}, {cores} cores, data dir {}, load average {}",
        data_dir.display(),
        loadavg()
    );
    println!();

    let semantics_ok = check_semantics(&engine)?;

    let t_build = Instant::now();
    let data = Data::build(series, timestamps)?;
    println!(
        "Data: measurement cpu, {} series (host {} distinct, region {REGIONS}, rack {RACKS}) x {timestamps} timestamps {} s apart = {} rows, 10 Float64 fields; {}-row batches, 1 connection; built in {:.1} s.",
        fmt_int(series as f64),
        fmt_int(series as f64),
        INTERVAL_NS / 1_000_000_000,
        fmt_int(data.rows() as f64),
        fmt_int(BATCH as f64),
        t_build.elapsed().as_secs_f64()
    );
    println!();

    let mut ingest_figs = Vec::new();
    for layout in &LAYOUTS {
        ingest_figs.push(ingest(&engine, layout, &data)?);
    }
    println!("## Ingest (series-table rows included in (b)'s time and CPU; rows = fact rows)");
    println!();
    println!("| Layout | rows/s | CPU ns/row: ingest | of which background merges | parts after ingest | OPTIMIZE FINAL (s) | CPU ns/row: merge | on-disk (of which _series) | load average before |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    for (l, f) in LAYOUTS.iter().zip(&ingest_figs) {
        println!(
            "| {} | {} | {:.0} | {:.0} | {} | {:.2} | {:.0} | {:.1} MiB ({:.1}) | {} |",
            l.name,
            fmt_int(data.rows() as f64 / f.wall_s),
            f.cpu_ns_row,
            f.bg_merge_ns_row,
            f.parts_after,
            f.optimize_s,
            f.merge_cpu_ns_row,
            mib(f.bytes),
            mib(f.series_bytes),
            f.load_before
        );
    }
    println!();

    // Queries: every layout, every variant, FINAL and not; answers of (b)
    // must equal (a)'s.
    let last = data.last_time_ns();
    let qs = queries();
    let mut mismatches = Vec::new();
    let mut figs: Vec<Vec<QueryFigures>> = Vec::new(); // [layout][query]
    let mut reference: Vec<Option<Answer>> = vec![None; qs.len()];
    for layout in &LAYOUTS {
        let mut per_query = Vec::new();
        for (qi, q) in qs.iter().enumerate() {
            let variants = if layout.tag_index() {
                &q.index
            } else {
                &q.columns
            };
            let mut results = Vec::new();
            for v in variants {
                for final_kw in [true, false] {
                    let sql = render(v.sql, layout.db, final_kw, last);
                    let (ms, answer) = time_query(&engine, &sql)?;
                    match &reference[qi] {
                        None => reference[qi] = Some(answer),
                        Some(r) if !r.matches(&answer) => {
                            let msg = format!(
                                "{} {} [{}]{}: {answer:?}, (a) answered {r:?}",
                                q.id,
                                layout.key,
                                v.name,
                                if final_kw { "" } else { " without FINAL" }
                            );
                            println!("MISMATCH {msg}");
                            mismatches.push(msg);
                        }
                        Some(_) => {}
                    }
                    results.push((v.name, final_kw, ms));
                }
            }
            // results holds each form with FINAL, then without.
            let variants: Vec<(&'static str, f64, f64)> = results
                .chunks(2)
                .map(|p| (p[0].0, p[0].2, p[1].2))
                .collect();
            let (best, final_ms, no_final_ms) = variants
                .iter()
                .copied()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .context("a variant")?;
            per_query.push(QueryFigures {
                best,
                final_ms,
                no_final_ms,
                variants,
            });
        }
        figs.push(per_query);
    }

    println!("## Tag queries at {} series, after OPTIMIZE FINAL: median of {RUNS} runs, ms with FINAL / without; each layout in its fastest form with FINAL", fmt_int(series as f64));
    println!();
    print!("| Query |");
    for l in &LAYOUTS {
        print!(" {} |", l.name);
    }
    println!(" (b) / (a), FINAL | (a) form | (b) form |");
    println!("|---|---|---|---|---|---|---|");
    for (qi, q) in qs.iter().enumerate() {
        print!("| {} {} |", q.id, q.what);
        for per_layout in &figs {
            let f = &per_layout[qi];
            print!(" {} / {} |", fmt_ms(f.final_ms), fmt_ms(f.no_final_ms));
        }
        println!(
            " {:.2}x | {} | {} |",
            figs[1][qi].final_ms / figs[0][qi].final_ms,
            figs[0][qi].best,
            figs[1][qi].best
        );
    }
    println!();
    println!("### Every form tried: median ms with FINAL / without");
    println!();
    println!("| Query | layout | form | ms |");
    println!("|---|---|---|---|");
    for (qi, q) in qs.iter().enumerate() {
        for (l, per_layout) in LAYOUTS.iter().zip(&figs) {
            for (name, with, without) in &per_layout[qi].variants {
                println!(
                    "| {} | {} | {name} | {} / {} |",
                    q.id,
                    l.key,
                    fmt_ms(*with),
                    fmt_ms(*without)
                );
            }
        }
    }
    println!();
    println!(
        "Answers: {} (every form of every layout, with and without FINAL, against (a)'s first form with FINAL). Load average at the end: {}.",
        if mismatches.is_empty() { "identical".to_string() } else { format!("{} MISMATCHES", mismatches.len()) },
        loadavg()
    );
    println!();

    for ((l, f), q) in LAYOUTS.iter().zip(&ingest_figs).zip(&figs) {
        print!(
            "tag_layout={} rows={} ingest_rows_per_sec={:.0} ingest_cpu_ns_per_row={:.0} merge_cpu_ns_per_row={:.0} bytes={}",
            l.key,
            data.rows(),
            data.rows() as f64 / f.wall_s,
            f.cpu_ns_row,
            f.merge_cpu_ns_row,
            f.bytes
        );
        for (qf, qd) in q.iter().zip(&qs) {
            print!(" {}_ms={:.1}", qd.id.to_lowercase(), qf.final_ms);
        }
        println!();
    }

    drop(engine);
    let _ = std::fs::remove_dir_all(&data_dir);
    if !semantics_ok {
        bail!("chDB does not merge fields as the anyLast layout requires (table above)");
    }
    if !mismatches.is_empty() {
        bail!("layouts answered differently:\n{}", mismatches.join("\n"));
    }
    Ok(())
}
