//! The tag queries, in each form a layout can ask them, timed and their
//! answers compared.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use arrow_array::cast::AsArray;
use arrow_array::types::Float64Type;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use shardhouse_engine::Engine;
use shardhouse_test_support::measure::fmt_int;

use crate::RUNS;

/// One way to ask a query; `{db}`, `{F}` (FINAL or nothing) and `{T}` (the
/// last timestamp) are filled in per run.
pub(crate) struct Variant {
    pub(crate) name: &'static str,
    pub(crate) sql: &'static str,
}

/// A query in the forms each layout can ask it; every form is timed and the
/// fastest is reported.
pub(crate) struct Query {
    pub(crate) id: &'static str,
    pub(crate) what: &'static str,
    /// (a) forms.
    pub(crate) columns: Vec<Variant>,
    /// (b) forms.
    pub(crate) index: Vec<Variant>,
}

pub(crate) const SERIES_HOST: &str =
    "(SELECT series_id, tags['host'] AS host FROM {db}._series WHERE measurement = 'cpu')";

pub(crate) fn queries() -> Vec<Query> {
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

pub(crate) fn render(sql: &str, db: &str, final_kw: bool, last_ns: i64) -> String {
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
pub(crate) struct Answer {
    pub(crate) rows: usize,
    pub(crate) columns: Vec<Sum>,
}

#[derive(Clone, Debug)]
pub(crate) enum Sum {
    Num(f64),
    Text(u64),
}

impl Answer {
    pub(crate) fn of(batches: &[RecordBatch]) -> Result<Answer> {
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

    pub(crate) fn matches(&self, other: &Answer) -> bool {
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
pub(crate) fn time_query(engine: &Engine, sql: &str) -> Result<(f64, Answer)> {
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
pub(crate) struct QueryFigures {
    pub(crate) best: &'static str,
    pub(crate) final_ms: f64,
    pub(crate) no_final_ms: f64,
    /// Every form: name, median with FINAL, median without.
    pub(crate) variants: Vec<(&'static str, f64, f64)>,
}

pub(crate) fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1}")
    } else {
        fmt_int(ms)
    }
}
