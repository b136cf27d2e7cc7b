//! `make bench-engine`: reproduces the layout and connection tables of the
//! chDB insert-scaling study on this machine, through Shardhouse's own engine
//! loader and pool. Prints markdown tables; the last line is
//! `engine_series_id_rows_per_sec_1conn=<N>`.
// A benchmark's job is to print its figures.
#![allow(clippy::print_stdout)]

mod fact;
mod tables;

use std::time::Instant;

use anyhow::Result;
use shardhouse_engine::layout::{create_fact_table, FactOrder, FieldType};
use shardhouse_engine::{Engine, EngineConfig};
use shardhouse_test_support::measure::{fmt_int, CpuSplit};

use fact::fact_layouts;
use tables::{
    build_layouts, exec, insert_all, scalar_u64, series_id_batches, series_id_of, series_id_schema,
};

pub(crate) const SERIES: usize = 1_000;
pub(crate) const TIMESTAMPS: usize = 1_000;
pub(crate) const TAGS: usize = 6;
pub(crate) const FIELDS: usize = 5;
pub(crate) const LAYOUT_BATCH: usize = 50_000;
pub(crate) const POOL_BATCH: usize = 200_000;
pub(crate) const POOL_ROWS: usize = 12_800_000;
pub(crate) const BASE_NS: i64 = 1_700_000_000_000_000_000;

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
            &create_fact_table("bench", "shardhouse_layout", &fields, FactOrder::default()),
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
