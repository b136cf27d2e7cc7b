//! `make bench-engine`: reproduces the layout and connection tables of the
//! chDB insert-scaling study on this machine, through Shardhouse's own engine
//! loader and pool. Prints markdown tables; the last line is
//! `engine_series_id_rows_per_sec_1conn=<N>`.
// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow_array::{
    ArrayRef, Int64Array, MapArray, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use shardhouse_engine::layout::{create_fact_table, FieldType};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::{Engine, EngineConfig};

const SERIES: usize = 1_000;
const TIMESTAMPS: usize = 1_000;
const TAGS: usize = 6;
const FIELDS: usize = 5;
const LAYOUT_BATCH: usize = 50_000;
const POOL_BATCH: usize = 200_000;
const POOL_ROWS: usize = 12_800_000;
const BASE_NS: i64 = 1_700_000_000_000_000_000;

fn tag_value(series: usize, tag: usize) -> String {
    // Cardinalities 10, 10, 10, 1, 1, 1 give 1,000 distinct series.
    let v = match tag {
        0 => series % 10,
        1 => (series / 10) % 10,
        2 => series / 100,
        _ => 0,
    };
    format!("tag{tag}_value_{v}")
}

/// Sample i: series i % SERIES, timestamp i / SERIES (so batches interleave
/// series, as a real scrape does).
fn sample(i: usize) -> (usize, i64) {
    (i % SERIES, BASE_NS + (i / SERIES) as i64 * 1_000_000_000)
}

fn field_cols(range: std::ops::Range<usize>) -> Vec<ArrayRef> {
    (0..FIELDS)
        .map(|f| {
            Arc::new(Int64Array::from_iter_values(
                range.clone().map(|i| (i as i64) * 7 + f as i64),
            )) as ArrayRef
        })
        .collect()
}

fn field_defs() -> Vec<Field> {
    (0..FIELDS)
        .map(|f| Field::new(format!("f{f}"), DataType::Int64, false))
        .collect()
}

fn map_entry_fields() -> Fields {
    Fields::from(vec![
        Field::new("keys", DataType::Utf8, false),
        Field::new("values", DataType::Utf8, true),
    ])
}

fn map_entries() -> Field {
    Field::new("entries", DataType::Struct(map_entry_fields()), false)
}

/// A `Map(String, String)` column's Arrow field.
pub(crate) fn map_field(name: &str) -> Field {
    Field::new(name, DataType::Map(Arc::new(map_entries()), false), false)
}

/// A map column of `rows` rows with `per_row` entries each, from flat keys
/// and values (row after row).
pub(crate) fn map_array(
    keys: StringArray,
    values: StringArray,
    per_row: usize,
    rows: usize,
) -> Result<MapArray> {
    let offsets = arrow_buffer::OffsetBuffer::from_lengths(std::iter::repeat_n(per_row, rows));
    let entries_arr = arrow_array::StructArray::new(
        map_entry_fields(),
        vec![Arc::new(keys) as ArrayRef, Arc::new(values) as ArrayRef],
        None,
    );
    Ok(MapArray::try_new(
        Arc::new(map_entries()),
        offsets,
        entries_arr,
        None,
        false,
    )?)
}

pub(crate) fn ts_field() -> Field {
    Field::new(
        "time",
        DataType::Timestamp(TimeUnit::Nanosecond, None),
        false,
    )
}

fn series_id_of(series: usize) -> u64 {
    let tags: Vec<(String, String)> = (0..TAGS)
        .map(|t| (format!("tag{t}"), tag_value(series, t)))
        .collect();
    let refs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    shardhouse_common::series::series_id("bench", &refs)
}

struct Layout {
    name: &'static str,
    columns: String,
    order_by: &'static str,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
}

fn build_layouts(rows: usize) -> Result<Vec<Layout>> {
    let ids: Vec<u64> = (0..SERIES).map(series_id_of).collect();
    let mut out = Vec::new();
    let field_sql: Vec<String> = (0..FIELDS).map(|f| format!("f{f} Int64")).collect();

    // cols: a String column per tag, all in the sort key.
    let mut fields = vec![ts_field()];
    fields.extend((0..TAGS).map(|t| Field::new(format!("tag{t}"), DataType::Utf8, false)));
    fields.extend(field_defs());
    let schema = Arc::new(Schema::new(fields));
    let mut batches = Vec::new();
    for start in (0..rows).step_by(LAYOUT_BATCH) {
        let r = start..(start + LAYOUT_BATCH).min(rows);
        let mut cols: Vec<ArrayRef> = vec![Arc::new(TimestampNanosecondArray::from_iter_values(
            r.clone().map(|i| sample(i).1),
        ))];
        for t in 0..TAGS {
            cols.push(Arc::new(StringArray::from_iter_values(
                r.clone().map(|i| tag_value(sample(i).0, t)),
            )));
        }
        cols.extend(field_cols(r));
        batches.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    let tag_sql: Vec<String> = (0..TAGS).map(|t| format!("tag{t} String")).collect();
    out.push(Layout {
        name: "cols (one column/tag)",
        columns: format!(
            "time DateTime64(9), {}, {}",
            tag_sql.join(", "),
            field_sql.join(", ")
        ),
        order_by: "(tag0, tag1, tag2, tag3, tag4, tag5, time)",
        schema,
        batches,
    });

    // map(tags): one Map(String, String) column.
    let mut fields = vec![ts_field(), map_field("tags")];
    fields.extend(field_defs());
    let schema = Arc::new(Schema::new(fields));
    let mut batches = Vec::new();
    for start in (0..rows).step_by(LAYOUT_BATCH) {
        let r = start..(start + LAYOUT_BATCH).min(rows);
        let n = r.len();
        let keys = StringArray::from_iter_values(
            r.clone().flat_map(|_| (0..TAGS).map(|t| format!("tag{t}"))),
        );
        let vals = StringArray::from_iter_values(
            r.clone()
                .flat_map(|i| (0..TAGS).map(move |t| tag_value(sample(i).0, t))),
        );
        let map = map_array(keys, vals, TAGS, n)?;
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                r.clone().map(|i| sample(i).1),
            )),
            Arc::new(map),
        ];
        cols.extend(field_cols(r));
        batches.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    out.push(Layout {
        name: "map(tags)",
        columns: format!(
            "time DateTime64(9), tags Map(String, String), {}",
            field_sql.join(", ")
        ),
        order_by: "time",
        schema,
        batches,
    });

    // series_id: tags hashed away into one UInt64 (the Shardhouse layout).
    let schema = series_id_schema();
    let batches = series_id_batches(&schema, &ids, 0..rows, LAYOUT_BATCH)?;
    out.push(Layout {
        name: "series_id (narrow fact)",
        columns: format!(
            "time DateTime64(9), series_id UInt64, {}",
            field_sql.join(", ")
        ),
        order_by: "(series_id, time)",
        schema,
        batches,
    });
    Ok(out)
}

fn series_id_schema() -> SchemaRef {
    let mut fields = vec![ts_field(), Field::new("series_id", DataType::UInt64, false)];
    fields.extend(field_defs());
    Arc::new(Schema::new(fields))
}

fn series_id_batches(
    schema: &SchemaRef,
    ids: &[u64],
    rows: std::ops::Range<usize>,
    batch: usize,
) -> Result<Vec<RecordBatch>> {
    let mut batches = Vec::new();
    let end = rows.end;
    for start in rows.step_by(batch) {
        let r = start..(start + batch).min(end);
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                r.clone().map(|i| sample(i).1),
            )),
            Arc::new(UInt64Array::from_iter_values(
                r.clone().map(|i| ids[sample(i).0]),
            )),
        ];
        cols.extend(field_cols(r));
        batches.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    Ok(batches)
}

pub(crate) fn exec(pool: &Pool, sql: &str) -> Result<()> {
    pool.get().execute(sql).with_context(|| sql.to_string())
}

pub(crate) fn scalar_u64(engine: &Engine, sql: &str) -> Result<u64> {
    let b = engine.query_global(sql)?;
    let col = arrow_cast::cast::cast(b[0].column(0), &DataType::UInt64)?;
    Ok(col
        .as_any()
        .downcast_ref::<UInt64Array>()
        .context("u64 column")?
        .value(0))
}

fn insert_all(
    pool: &Pool,
    table: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Duration> {
    let mut conn = pool.get();
    let t0 = Instant::now();
    for b in batches {
        conn.ingest("bench", table, schema.clone(), vec![b.clone()])?;
    }
    Ok(t0.elapsed())
}

/// CPU time of this process's threads, split into chDB's background merges
/// (threads named `MergeMutate`) and everything else (the insert pipeline
/// and the calling threads), from /proc/self/task. On a 2-core machine the
/// merges of earlier inserts compete with the next insert for the cores,
/// so the split tells what limits the wall-clock figure.
#[derive(Clone, Copy, Default)]
pub(crate) struct CpuSplit {
    pub(crate) inserts_s: f64,
    pub(crate) merges_s: f64,
}

impl CpuSplit {
    pub(crate) fn now() -> CpuSplit {
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let mut out = CpuSplit::default();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return out;
        };
        for task in tasks.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue;
            };
            // "pid (comm) state ... utime stime ..." (fields 14 and 15).
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let rest: Vec<&str> = stat[close + 2..].split(' ').collect();
            let t = |i: usize| {
                rest.get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let secs = (t(11) + t(12)) / ticks;
            if stat[open + 1..close].starts_with("MergeMutate") {
                out.merges_s += secs;
            } else {
                out.inserts_s += secs;
            }
        }
        out
    }

    pub(crate) fn since(self, earlier: CpuSplit) -> CpuSplit {
        CpuSplit {
            inserts_s: self.inserts_s - earlier.inserts_s,
            merges_s: self.merges_s - earlier.merges_s,
        }
    }
}

pub(crate) fn fmt_int(n: f64) -> String {
    let s = format!("{:.0}", n);
    let bytes = s.as_bytes();
    let mut out = String::new();
    for (i, c) in bytes.iter().enumerate() {
        if i > 0 && (bytes.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(*c as char);
    }
    out
}

fn main() -> Result<()> {
    let data_dir =
        std::env::temp_dir().join(format!("shardhouse-bench-engine-{}", std::process::id()));
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let engine = Engine::open(EngineConfig {
        data_dir: data_dir.clone(),
        pool_size: 4,
        ..Default::default()
    })?;
    let pool = engine.pool();
    exec(pool, "CREATE DATABASE IF NOT EXISTS bench")?;
    let version = engine.query_global("SELECT version()")?;
    let version = arrow_cast::display::array_value_to_string(version[0].column(0), 0)?;
    println!(
        "# bench-engine: chDB {version}, {cores} cores, data dir {}",
        data_dir.display()
    );
    println!();

    // FACT_ONLY=1: only the storage layout 2 table (a quicker A/B).
    if std::env::var("FACT_ONLY").is_ok_and(|v| v == "1") {
        fact_layouts(&engine)?;
        drop(engine);
        let _ = std::fs::remove_dir_all(&data_dir);
        return Ok(());
    }

    // --- Lever 1: layout, one connection, 50k-row batches.
    let rows = SERIES * TIMESTAMPS;
    println!(
        "## Layouts: {} samples ({SERIES} series x {TIMESTAMPS} timestamps, {TAGS} tags, {FIELDS} Int64 fields), {}-row batches, 1 connection",
        fmt_int(rows as f64),
        fmt_int(LAYOUT_BATCH as f64)
    );
    println!();
    println!("| Layout | samples/s | rows/s | convert share | on-disk |");
    println!("|---|---|---|---|---|");
    let layouts = build_layouts(rows)?;
    let mut layout_rates = Vec::new();
    for (i, l) in layouts.iter().enumerate() {
        let table = format!("layout_{i}");
        let null_table = format!("layout_{i}_null");
        exec(
            pool,
            &format!(
                "CREATE TABLE bench.{table} ({}) ENGINE = MergeTree ORDER BY {}",
                l.columns, l.order_by
            ),
        )?;
        exec(
            pool,
            &format!(
                "CREATE TABLE bench.{null_table} ({}) ENGINE = Null",
                l.columns
            ),
        )?;
        // Conversion alone (Null sink) vs the full insert (sort, compress, write).
        let null_t = insert_all(pool, &null_table, &l.schema, &l.batches)?;
        let t = insert_all(pool, &table, &l.schema, &l.batches)?;
        let bytes = scalar_u64(
            &engine,
            &format!(
                "SELECT toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE active AND database = 'bench' AND table = 'layout_{i}'"
            ),
        )?;
        let rate = rows as f64 / t.as_secs_f64();
        layout_rates.push(rate);
        println!(
            "| {} | {} | {} | {:.0}% | {:.1} MiB |",
            l.name,
            fmt_int(rate),
            fmt_int(rate),
            100.0 * null_t.as_secs_f64() / t.as_secs_f64(),
            bytes as f64 / (1024.0 * 1024.0)
        );
    }
    // The layout Shardhouse actually writes (layout 2: the node's own DDL).
    {
        let l = &layouts[2];
        let fields: Vec<(String, FieldType)> = (0..FIELDS)
            .map(|f| (format!("f{f}"), FieldType::Int64))
            .collect();
        exec(
            pool,
            &create_fact_table("bench", "shardhouse_layout", &fields),
        )?;
        let t = insert_all(pool, "shardhouse_layout", &l.schema, &l.batches)?;
        let rate = rows as f64 / t.as_secs_f64();
        println!(
            "| series_id as stored by Shardhouse (layout 2: anyLast fields, AggregatingMergeTree, day partitions) | {} | {} | - | - |",
            fmt_int(rate),
            fmt_int(rate)
        );
    }
    drop(layouts);
    println!();

    // --- Storage layout 2's fact table against layout 1's.
    fact_layouts(&engine)?;

    // --- Lever 2: connections into one series_id table, 200k-row batches.
    println!(
        "## Connection pool: series_id layout, {} rows in {}-row batches, all connections into one table",
        fmt_int(POOL_ROWS as f64),
        fmt_int(POOL_BATCH as f64)
    );
    println!();
    println!("| Connections | wall (s) | rows/s | speedup | CPU ns/row: inserts | merges |");
    println!("|---|---|---|---|---|---|");
    let ids: Vec<u64> = (0..SERIES).map(series_id_of).collect();
    let schema = series_id_schema();
    // Distinct batches (different timestamps) reused round-robin: building
    // 12.8M rows of Arrow up front would measure memory, not the engine.
    let distinct = series_id_batches(&schema, &ids, 0..16 * POOL_BATCH, POOL_BATCH)?;
    let n_batches = POOL_ROWS / POOL_BATCH;
    let mut one_conn = 0.0;
    let field_sql: Vec<String> = (0..FIELDS).map(|f| format!("f{f} Int64")).collect();
    for conns in [1usize, 2, 4] {
        let table = format!("pool_{conns}");
        exec(
            pool,
            &format!(
                "CREATE TABLE bench.{table} (time DateTime64(9), series_id UInt64, {}) ENGINE = MergeTree ORDER BY (series_id, time)",
                field_sql.join(", ")
            ),
        )?;
        let t0 = Instant::now();
        let cpu0 = CpuSplit::now();
        std::thread::scope(|s| -> Result<()> {
            let handles: Vec<_> = (0..conns)
                .map(|w| {
                    let (distinct, schema, table) = (&distinct, &schema, &table);
                    s.spawn(move || -> Result<()> {
                        let mut conn = pool.get();
                        for b in (w..n_batches).step_by(conns) {
                            conn.ingest(
                                "bench",
                                table,
                                schema.clone(),
                                vec![distinct[b % distinct.len()].clone()],
                            )?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().expect("bench worker panicked")?;
            }
            Ok(())
        })?;
        let wall = t0.elapsed().as_secs_f64();
        let cpu = CpuSplit::now().since(cpu0);
        let rate = POOL_ROWS as f64 / wall;
        if conns == 1 {
            one_conn = rate;
        }
        let per_row = |secs: f64| secs * 1e9 / POOL_ROWS as f64;
        println!(
            "| {conns} | {wall:.3} | {} | {:.2}x | {:.0} | {:.0} |",
            fmt_int(rate),
            rate / one_conn,
            per_row(cpu.inserts_s),
            per_row(cpu.merges_s)
        );
        let got = scalar_u64(
            &engine,
            &format!("SELECT toUInt64(count()) FROM bench.{table}"),
        )?;
        anyhow::ensure!(
            got == POOL_ROWS as u64,
            "{table} holds {got} rows, expected {POOL_ROWS}"
        );
    }
    println!();

    // --- One engine, many databases (the shard-per-database layout).
    let dbs = 256;
    let rows_per_db = 20_000;
    let small = series_id_batches(&schema, &ids, 0..rows_per_db, rows_per_db)?;
    let t0 = Instant::now();
    for d in 0..dbs {
        exec(pool, &format!("CREATE DATABASE bench_shard_{d:04}"))?;
        exec(
            pool,
            &format!(
                "CREATE TABLE bench_shard_{d:04}.cpu (time DateTime64(9), series_id UInt64, {}) ENGINE = MergeTree ORDER BY (series_id, time)",
                field_sql.join(", ")
            ),
        )?;
    }
    let ddl = t0.elapsed();
    let t0 = Instant::now();
    std::thread::scope(|s| -> Result<()> {
        let workers = 2.min(pool.size());
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (small, schema) = (&small, &schema);
                s.spawn(move || -> Result<()> {
                    let mut conn = pool.get();
                    for d in (w..dbs).step_by(workers) {
                        conn.ingest(
                            &format!("bench_shard_{d:04}"),
                            "cpu",
                            schema.clone(),
                            small.clone(),
                        )?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("bench worker panicked")?;
        }
        Ok(())
    })?;
    let ins = t0.elapsed();
    println!("## Many databases in one engine");
    println!();
    println!("| Databases | create db + table (s) | insert {} rows into each, 2 connections (s) | rows/s |", fmt_int(rows_per_db as f64));
    println!("|---|---|---|---|");
    println!(
        "| {dbs} | {:.2} | {:.2} | {} |",
        ddl.as_secs_f64(),
        ins.as_secs_f64(),
        fmt_int((dbs * rows_per_db) as f64 / ins.as_secs_f64())
    );
    println!();

    drop(engine);
    let _ = std::fs::remove_dir_all(&data_dir);
    println!("engine_series_id_rows_per_sec_1conn={:.0}", one_conn);
    Ok(())
}

// --- Storage layout 2 (issue 13): the fact table's two changes, A/B.

const FACT_BATCH: usize = 200_000;
const FACT_DISTINCT_BATCHES: usize = 5;
const FACT_IN_INSERT: usize = 4;

/// Process CPU (user + system of every thread, also exited ones), seconds.
pub(crate) fn process_cpu_s() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn loadavg1() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split(' ').next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// The fact tables compared: layout 1, each of layout 2's two changes on
/// its own, and layout 2 (the node's DDL).
struct FactVariant {
    key: &'static str,
    name: &'static str,
    /// `SET` statements run on the inserting connection (reset after).
    settings: &'static [&'static str],
    /// Rows handed over sorted by (series_id, time), the sort counted.
    presort: bool,
}

const FACT_VARIANTS: [FactVariant; 6] = [
    FactVariant {
        key: "layout1",
        name: "layout 1: ReplacingMergeTree, Nullable, no partition",
        settings: &[],
        presort: false,
    },
    FactVariant {
        key: "layout1_partition",
        name: "(a) layout 1 + PARTITION BY toYYYYMMDD(time)",
        settings: &[],
        presort: false,
    },
    FactVariant {
        key: "layout1_anylast",
        name: "(b) layout 1 + anyLast columns (AggregatingMergeTree), no partition",
        settings: &[],
        presort: false,
    },
    FactVariant {
        key: "layout2",
        name: "layout 2 (node DDL: AggregatingMergeTree, anyLast, day partition)",
        settings: &[],
        presort: false,
    },
    FactVariant {
        key: "layout2_no_optimize_on_insert",
        name: "(c) layout 2, inserts with optimize_on_insert = 0",
        settings: &["SET optimize_on_insert = 0"],
        presort: false,
    },
    FactVariant {
        key: "layout2_presorted",
        name: "(d) layout 2, rows sorted by (series_id, time) before the insert",
        settings: &[],
        presort: true,
    },
];

/// Rows of `b` in (series_id, time) order (a stable sort: equal keys keep
/// their insertion order, which anyLast depends on).
fn sorted_by_key(b: &RecordBatch) -> Result<RecordBatch> {
    let ids = b
        .column(1)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .context("series_id column")?;
    let ts = b
        .column(0)
        .as_any()
        .downcast_ref::<TimestampNanosecondArray>()
        .context("time column")?;
    let mut idx: Vec<u32> = (0..b.num_rows() as u32).collect();
    idx.sort_by_key(|&i| (ids.value(i as usize), ts.value(i as usize)));
    let idx = arrow_array::UInt32Array::from(idx);
    let cols = b
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &idx, None))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(b.schema(), cols)?)
}

fn fact_insert(
    pool: &Pool,
    v: &FactVariant,
    table: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<Duration> {
    let mut conn = pool.get();
    for s in v.settings {
        conn.execute(s)?;
    }
    let t0 = Instant::now();
    for b in batches {
        let b = if v.presort {
            sorted_by_key(b)?
        } else {
            b.clone()
        };
        conn.ingest("bench", table, schema.clone(), vec![b])?;
    }
    let t = t0.elapsed();
    if !v.settings.is_empty() {
        conn.execute("SET optimize_on_insert = 1")?;
    }
    Ok(t)
}

fn fact_ddl(variant: &str, table: &str) -> String {
    let fields: Vec<(String, FieldType)> = (0..FIELDS)
        .map(|f| (format!("f{f}"), FieldType::Float64))
        .collect();
    let nullable: Vec<String> = (0..FIELDS)
        .map(|f| format!("f{f} Nullable(Float64)"))
        .collect();
    let any_last: Vec<String> = (0..FIELDS)
        .map(|f| format!("f{f} {}", FieldType::Float64.clickhouse()))
        .collect();
    let head = format!("CREATE TABLE bench.{table} (time DateTime64(9), series_id UInt64");
    match variant {
        "layout1" => format!(
            "{head}, {}) ENGINE = ReplacingMergeTree ORDER BY (series_id, time)",
            nullable.join(", ")
        ),
        "layout1_partition" => format!(
            "{head}, {}) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMMDD(time) ORDER BY (series_id, time)",
            nullable.join(", ")
        ),
        "layout1_anylast" => format!(
            "{head}, {}) ENGINE = AggregatingMergeTree ORDER BY (series_id, time)",
            any_last.join(", ")
        ),
        // layout 2 and its variants: the node's DDL.
        _ => create_fact_table("bench", table, &fields),
    }
}

/// `rows` rows of the series_id shape with 5 Float64 fields (two decimals,
/// as the load generator's points), in 200,000-row batches. `rewrites`:
/// the batches cycle over FACT_DISTINCT_BATCHES distinct ones, so each
/// point is written rows / (FACT_DISTINCT_BATCHES * FACT_BATCH) times
/// (the load generator cycles its pre-encoded requests likewise).
/// `in_insert`: every insert holds FACT_IN_INSERT copies of each of its
/// points (the rows of one insert cycle over FACT_BATCH / FACT_IN_INSERT
/// points), as a node's flush does under the load generator, whose 64
/// pre-encoded requests repeat within a flush: chDB collapses them at
/// insert time (`optimize_on_insert`).
fn fact_batches(
    ids: &[u64],
    rows: usize,
    rewrites: bool,
    in_insert: bool,
) -> Result<(SchemaRef, Vec<RecordBatch>)> {
    let mut fields = vec![ts_field(), Field::new("series_id", DataType::UInt64, false)];
    fields.extend((0..FIELDS).map(|f| Field::new(format!("f{f}"), DataType::Float64, false)));
    let schema = Arc::new(Schema::new(fields));
    let mut out = Vec::new();
    for b in 0..rows.div_ceil(FACT_BATCH) {
        let src = if rewrites {
            b % FACT_DISTINCT_BATCHES
        } else {
            b
        };
        let first = src * FACT_BATCH;
        let distinct = if in_insert {
            FACT_BATCH / FACT_IN_INSERT
        } else {
            FACT_BATCH
        };
        let r: Vec<usize> = (0..FACT_BATCH).map(|k| first + k % distinct).collect();
        let r = r.into_iter();
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(TimestampNanosecondArray::from_iter_values(
                r.clone().map(|i| sample(i).1),
            )),
            Arc::new(UInt64Array::from_iter_values(
                r.clone().map(|i| ids[sample(i).0]),
            )),
        ];
        for f in 0..FIELDS {
            cols.push(Arc::new(arrow_array::Float64Array::from_iter_values(
                r.clone().map(|i| {
                    ((i as u64)
                        .wrapping_mul(7919)
                        .wrapping_add(f as u64 * 104_729)
                        % 10_000) as f64
                        / 100.0
                }),
            )));
        }
        out.push(RecordBatch::try_new(schema.clone(), cols)?);
    }
    Ok((schema, out))
}

fn merges_running(engine: &Engine, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.merges WHERE database = 'bench' AND table = '{table}'"),
    )
}

fn active_parts(engine: &Engine, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.parts WHERE active AND database = 'bench' AND table = '{table}'"),
    )
}

struct FactFigures {
    held_rows_per_s: f64,
    held_insert_ns: f64,
    optimize_s: f64,
    optimize_ns: f64,
    rows_after: u64,
    run_rows_per_s: f64,
    run_ns: f64,
    run_merge_ns: f64,
    run_parts: u64,
    run_optimize_ns: f64,
    load: String,
}

fn fact_run(
    engine: &Engine,
    v: &FactVariant,
    tag: &str,
    schema: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<FactFigures> {
    let pool = engine.pool();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let per_row = |secs: f64| secs * 1e9 / rows as f64;
    let load = loadavg1();

    // 1. Merges held: the inserts alone, then one OPTIMIZE FINAL merging
    //    every part (the whole merge work of these rows, in one place).
    let variant = v.key;
    let held = format!("fact_{tag}_{variant}_held");
    exec(pool, &fact_ddl(variant, &held))?;
    exec(pool, &format!("SYSTEM STOP MERGES bench.{held}"))?;
    let c0 = process_cpu_s();
    let t = fact_insert(pool, v, &held, schema, batches)?;
    let held_insert_cpu = process_cpu_s() - c0;
    exec(pool, &format!("SYSTEM START MERGES bench.{held}"))?;
    let c0 = process_cpu_s();
    let t0 = Instant::now();
    exec(pool, &format!("OPTIMIZE TABLE bench.{held} FINAL"))?;
    let optimize_s = t0.elapsed().as_secs_f64();
    let optimize_cpu = process_cpu_s() - c0;
    let rows_after = scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM bench.{held}"),
    )?;

    // 2. Merges running, as on a node: the inserts with chDB's background
    //    merges, CPU counted until no merge of the table runs any more.
    let run = format!("fact_{tag}_{variant}_run");
    exec(pool, &fact_ddl(variant, &run))?;
    let c0 = process_cpu_s();
    let m0 = CpuSplit::now();
    let t1 = fact_insert(pool, v, &run, schema, batches)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while merges_running(engine, &run)? > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let run_cpu = process_cpu_s() - c0;
    let run_merges = CpuSplit::now().since(m0).merges_s;
    let run_parts = active_parts(engine, &run)?;
    let c0 = process_cpu_s();
    exec(pool, &format!("OPTIMIZE TABLE bench.{run} FINAL"))?;
    let run_optimize_cpu = process_cpu_s() - c0;
    for t in [&held, &run] {
        exec(pool, &format!("DROP TABLE bench.{t} SYNC"))?;
    }
    Ok(FactFigures {
        held_rows_per_s: rows as f64 / t.as_secs_f64(),
        held_insert_ns: per_row(held_insert_cpu),
        optimize_s,
        optimize_ns: per_row(optimize_cpu),
        rows_after,
        run_rows_per_s: rows as f64 / t1.as_secs_f64(),
        run_ns: per_row(run_cpu),
        run_merge_ns: per_row(run_merges),
        run_parts,
        run_optimize_ns: per_row(run_optimize_cpu),
        load,
    })
}

/// Layout 1's fact table against layout 2's, and each of the two changes
/// (day partition key; anyLast columns in an AggregatingMergeTree) alone.
fn fact_layouts(engine: &Engine) -> Result<()> {
    let rows: usize = std::env::var("FACT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000_000);
    let ids: Vec<u64> = (0..SERIES).map(series_id_of).collect();
    let shapes = [
        ("distinct", false, false, "every row a new point"),
        ("rewrites", true, false, "5 distinct batches cycled"),
        (
            "in_insert",
            false,
            true,
            "each insert holds each of its points 4 times",
        ),
    ];
    println!(
        "## Storage layout 2 fact table: {} rows ({SERIES} series, {FIELDS} Float64 fields), {}-row inserts, 1 connection",
        fmt_int(rows as f64),
        fmt_int(FACT_BATCH as f64)
    );
    println!();
    println!("CPU is the process's (getrusage, every thread). Merges held: `SYSTEM STOP MERGES` during the inserts, then one `OPTIMIZE TABLE ... FINAL` of all {} parts (CPU per row merged = per row inserted). Merges running: background merges on, CPU counted until no merge of the table runs; then OPTIMIZE FINAL of what is left.", rows.div_ceil(FACT_BATCH));
    println!();
    println!("| data | fact table | merges held: insert rows/s | insert CPU ns/row | OPTIMIZE FINAL (s) | merge CPU ns/row | rows after | merges running: rows/s | CPU ns/row incl. merges | of which merges | parts left | OPTIMIZE CPU ns/row | load avg |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut lines = Vec::new();
    let times = rows as f64 / (FACT_DISTINCT_BATCHES * FACT_BATCH) as f64;
    for (tag, rewrites, in_insert, what) in shapes {
        let what = if rewrites {
            format!("{what}: every point written {times:.1} times")
        } else {
            what.to_string()
        };
        let (schema, batches) = fact_batches(&ids, rows, rewrites, in_insert)?;
        for v in &FACT_VARIANTS {
            let f = fact_run(engine, v, tag, &schema, &batches)?;
            println!(
                "| {tag} ({what}) | {} | {} | {:.0} | {:.2} | {:.0} | {} | {} | {:.0} | {:.0} | {} | {:.0} | {} |",
                v.name,
                fmt_int(f.held_rows_per_s),
                f.held_insert_ns,
                f.optimize_s,
                f.optimize_ns,
                fmt_int(f.rows_after as f64),
                fmt_int(f.run_rows_per_s),
                f.run_ns,
                f.run_merge_ns,
                f.run_parts,
                f.run_optimize_ns,
                f.load
            );
            lines.push(format!(
                "fact_layout={} data={tag} insert_rows_per_sec={:.0} insert_cpu_ns_per_row={:.0} merge_cpu_ns_per_row={:.0} running_rows_per_sec={:.0} running_cpu_ns_per_row={:.0}",
                v.key, f.held_rows_per_s, f.held_insert_ns, f.optimize_ns, f.run_rows_per_s, f.run_ns
            ));
        }
    }
    println!();
    for l in lines {
        println!("{l}");
    }
    println!();
    Ok(())
}
