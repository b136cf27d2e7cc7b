//! The layout and connection tables' data: samples of 1,000 series x
//! 1,000 timestamps in each table layout, and their inserts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use arrow_array::{
    ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use shardhouse_engine::pool::Pool;
use shardhouse_engine::Engine;
use shardhouse_test_support::arrow::{map_array, map_field, ts_field};

use crate::{BASE_NS, FIELDS, LAYOUT_BATCH, SERIES, TAGS};

pub(crate) fn tag_value(series: usize, tag: usize) -> String {
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
pub(crate) fn sample(i: usize) -> (usize, i64) {
    (i % SERIES, BASE_NS + (i / SERIES) as i64 * 1_000_000_000)
}

pub(crate) fn field_cols(range: std::ops::Range<usize>) -> Vec<ArrayRef> {
    (0..FIELDS)
        .map(|f| {
            Arc::new(Int64Array::from_iter_values(
                range.clone().map(|i| (i as i64) * 7 + f as i64),
            )) as ArrayRef
        })
        .collect()
}

pub(crate) fn field_defs() -> Vec<Field> {
    (0..FIELDS)
        .map(|f| Field::new(format!("f{f}"), DataType::Int64, false))
        .collect()
}

pub(crate) fn series_id_of(series: usize) -> u64 {
    let tags: Vec<(String, String)> = (0..TAGS)
        .map(|t| (format!("tag{t}"), tag_value(series, t)))
        .collect();
    let refs: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    shardhouse_common::series::series_id("bench", &refs)
}

pub(crate) struct Layout {
    pub(crate) name: &'static str,
    pub(crate) columns: String,
    pub(crate) order_by: &'static str,
    pub(crate) schema: SchemaRef,
    pub(crate) batches: Vec<RecordBatch>,
}

pub(crate) fn build_layouts(rows: usize) -> Result<Vec<Layout>> {
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

pub(crate) fn series_id_schema() -> SchemaRef {
    let mut fields = vec![ts_field(), Field::new("series_id", DataType::UInt64, false)];
    fields.extend(field_defs());
    Arc::new(Schema::new(fields))
}

pub(crate) fn series_id_batches(
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

pub(crate) fn insert_all(
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
