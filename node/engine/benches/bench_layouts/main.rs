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

mod data;
mod ingest;
mod queries;
mod semantics;

use std::time::Instant;

use anyhow::{bail, Context, Result};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::{Engine, EngineConfig};
use shardhouse_test_support::measure::{fmt_int, loadavg};

use crate::data::Data;
use crate::ingest::{ingest, LAYOUTS};
use crate::queries::{fmt_ms, queries, render, time_query, Answer, QueryFigures};
use crate::semantics::check_semantics;

pub(crate) const SERIES: usize = 1_000_000;
pub(crate) const TIMESTAMPS: usize = 5;
pub(crate) const REGIONS: usize = 10;
pub(crate) const RACKS: usize = 100;
pub(crate) const BATCH: usize = 200_000;
/// 30 s between points, from a minute boundary: several 1-minute windows.
pub(crate) const INTERVAL_NS: i64 = 30_000_000_000;
pub(crate) const BASE_NS: i64 = 1_699_999_980_000_000_000;
pub(crate) const RUNS: usize = 5;
pub(crate) const FIELDS: [&str; 10] = [
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
pub(crate) const ANY_LAST: &str = "SimpleAggregateFunction(anyLast, Nullable(Float64))";
pub(crate) const SERIES_DDL: &str = "(series_id UInt64, measurement LowCardinality(String), tags Map(LowCardinality(String), String)) ENGINE = ReplacingMergeTree ORDER BY (measurement, series_id)";

fn env_usize(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

pub(crate) fn exec(pool: &Pool, sql: &str) -> Result<()> {
    pool.get().execute(sql).with_context(|| sql.to_string())
}

/// The one value of a one-row, one-column query.
pub(crate) fn scalar_u64(engine: &Engine, sql: &str) -> Result<u64> {
    let batches = engine.query_global(sql).with_context(|| sql.to_string())?;
    Ok(shardhouse_test_support::arrow::scalar_u64(&batches))
}

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
