//! Field-merge semantics: rewriting some fields of a point keeps the
//! others, under each fact table, checked before anything is measured.

use std::sync::Arc;

use anyhow::{Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, Float64Array, RecordBatch, TimestampNanosecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::Engine;
use shardhouse_test_support::arrow::ts_field;

use crate::{exec, ANY_LAST, BASE_NS};

pub(crate) fn two_field_batch(
    rows: &[(u64, Option<f64>, Option<f64>)],
) -> Result<(SchemaRef, RecordBatch)> {
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

pub(crate) fn ingest_rows(
    pool: &Pool,
    table: &str,
    rows: &[(u64, Option<f64>, Option<f64>)],
) -> Result<()> {
    let (schema, batch) = two_field_batch(rows)?;
    pool.get()
        .ingest("tl_semantics", table, schema, vec![batch])?;
    Ok(())
}

pub(crate) fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("NULL".to_string(), |v| format!("{v}"))
}

/// `(u, s)` of one point, read with FINAL.
pub(crate) fn read_point(engine: &Engine, table: &str, sid: u64) -> Result<String> {
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
pub(crate) fn read_bulk(engine: &Engine, table: &str) -> Result<String> {
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
pub(crate) fn check_semantics(engine: &Engine) -> Result<bool> {
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
