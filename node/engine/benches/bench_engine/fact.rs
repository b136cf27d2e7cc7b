//! Storage layout 2 (issue 13): the fact table's two changes, A/B.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow_array::{ArrayRef, RecordBatch, TimestampNanosecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardhouse_engine::layout::{create_fact_table, FactOrder, FieldType};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::Engine;
use shardhouse_test_support::arrow::ts_field;
use shardhouse_test_support::measure::{fmt_int, loadavg1, process_cpu_s, CpuSplit};

use crate::tables::{exec, sample, scalar_u64, series_id_of};
use crate::{FIELDS, SERIES};

const FACT_BATCH: usize = 200_000;
const FACT_DISTINCT_BATCHES: usize = 5;
const FACT_IN_INSERT: usize = 4;

/// The fact tables compared: layout 1, each of layout 2's two changes on
/// its own, and layout 2 (the node's DDL).
pub(crate) struct FactVariant {
    pub(crate) key: &'static str,
    pub(crate) name: &'static str,
    /// `SET` statements run on the inserting connection (reset after).
    pub(crate) settings: &'static [&'static str],
    /// Rows handed over sorted by (series_id, time), the sort counted.
    pub(crate) presort: bool,
}

pub(crate) const FACT_VARIANTS: [FactVariant; 6] = [
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
pub(crate) fn sorted_by_key(b: &RecordBatch) -> Result<RecordBatch> {
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

pub(crate) fn fact_insert(
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

pub(crate) fn fact_ddl(variant: &str, table: &str) -> String {
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
        _ => create_fact_table("bench", table, &fields, FactOrder::default()),
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
pub(crate) fn fact_batches(
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

pub(crate) fn merges_running(engine: &Engine, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.merges WHERE database = 'bench' AND table = '{table}'"),
    )
}

pub(crate) fn active_parts(engine: &Engine, table: &str) -> Result<u64> {
    scalar_u64(
        engine,
        &format!("SELECT toUInt64(count()) FROM system.parts WHERE active AND database = 'bench' AND table = '{table}'"),
    )
}

pub(crate) struct FactFigures {
    pub(crate) held_rows_per_s: f64,
    pub(crate) held_insert_ns: f64,
    pub(crate) optimize_s: f64,
    pub(crate) optimize_ns: f64,
    pub(crate) rows_after: u64,
    pub(crate) run_rows_per_s: f64,
    pub(crate) run_ns: f64,
    pub(crate) run_merge_ns: f64,
    pub(crate) run_parts: u64,
    pub(crate) run_optimize_ns: f64,
    pub(crate) load: String,
}

pub(crate) fn fact_run(
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
pub(crate) fn fact_layouts(engine: &Engine) -> Result<()> {
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
