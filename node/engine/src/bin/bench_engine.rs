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
    // The layout Shardhouse actually writes: Nullable fields, ReplacingMergeTree.
    {
        let l = &layouts[2];
        let cols: Vec<String> = (0..FIELDS)
            .map(|f| format!("f{f} Nullable(Int64)"))
            .collect();
        exec(
            pool,
            &format!(
                "CREATE TABLE bench.shardhouse_layout (time DateTime64(9), series_id UInt64, {}) ENGINE = {}",
                cols.join(", "),
                shardhouse_engine::layout::FACT_ENGINE
            ),
        )?;
        let t = insert_all(pool, "shardhouse_layout", &l.schema, &l.batches)?;
        let rate = rows as f64 / t.as_secs_f64();
        println!(
            "| series_id as stored by Shardhouse (Nullable fields, ReplacingMergeTree) | {} | {} | - | - |",
            fmt_int(rate),
            fmt_int(rate)
        );
    }
    drop(layouts);
    println!();

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
