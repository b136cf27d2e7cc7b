//! PromQL's samples from the shards: a [`SampleSource`] over the
//! database's `_series` (metric name = `measurement`, labels = `tags`) and
//! `_samples` tables. Label matchers become a `_series` condition run on
//! every shard (a series and its samples live on one shard, so each
//! shard's answer is whole); the engine re-checks every matcher, so the
//! condition only has to select a superset.
//!
//! A selector is one statement per shard, all shards at once: the
//! samples of the matching series, ordered by series. Their labels come
//! from the router's [`LabelCache`] (a series id is the hash of its
//! labels, so what an id names never changes); only a selection that
//! meets an id the cache lacks asks those shards for its series' labels.

use std::collections::{BTreeSet, HashMap};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use shardhouse_promql::labels::METRIC_NAME;
use shardhouse_promql::{
    Grid, LabelMatcher, Labels, MatchKind, Needed, SampleSource, Selection, Series,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::read::sql::decode_ipc;
use crate::state::Router;

mod decode;

use decode::SeriesSamples;

/// DateTime64(9) holds times up to 2262; Prometheus's `maxTime` is far
/// beyond, so ranges are clamped to what the table can hold.
const MAX_STORED_MS: i64 = 9_200_000_000_000;

pub struct ShardSamples<'a> {
    pub router: &'a Router,
    pub database: String,
    pub deadline: Instant,
}

/// A ClickHouse string literal.
fn literal(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// The `_series` condition of a matcher: the name is `measurement`, a
/// label is `tags['name']` (an absent key reads as '', as in Prometheus).
fn condition(m: &LabelMatcher) -> String {
    let col = if m.name == METRIC_NAME {
        "measurement".to_string()
    } else {
        format!("tags[{}]", literal(&m.name))
    };
    // Prometheus anchors regexes at both ends; ClickHouse's match() is
    // RE2, the syntax Prometheus's Go regexps use.
    let re = || literal(&format!("^(?:{})$", m.value));
    match m.kind {
        MatchKind::Equal => format!("{col} = {}", literal(&m.value)),
        MatchKind::NotEqual => format!("{col} != {}", literal(&m.value)),
        MatchKind::Regex => format!("match({col}, {})", re()),
        MatchKind::NotRegex => format!("NOT match({col}, {})", re()),
    }
}

pub fn series_condition(matchers: &[LabelMatcher]) -> String {
    if matchers.is_empty() {
        return "1".into();
    }
    matchers
        .iter()
        .map(condition)
        .collect::<Vec<_>>()
        .join(" AND ")
}

fn series_sql(cond: &str, start_ms: i64, end_ms: i64, with_samples_only: bool) -> String {
    let mut sql = format!(
        "SELECT series_id, toString(measurement) AS name, toJSONString(tags) AS tags_json FROM _series WHERE {cond}"
    );
    if with_samples_only {
        sql.push_str(&format!(
            " AND series_id IN (SELECT series_id FROM _samples WHERE {})",
            time_condition(start_ms, end_ms)
        ));
    }
    sql
}

fn time_condition(start_ms: i64, end_ms: i64) -> String {
    format!(
        "time >= fromUnixTimestamp64Milli(toInt64({})) AND time <= fromUnixTimestamp64Milli(toInt64({}))",
        start_ms.clamp(0, MAX_STORED_MS),
        end_ms.clamp(0, MAX_STORED_MS)
    )
}

/// A signed literal, parenthesised so that it can follow a minus sign.
fn num(n: i64) -> String {
    format!("({n})")
}

/// The samples of a selection, as `(series_id, t, bits)` rows ordered by
/// series id (decode.rs copies each series' run at once): the value's
/// bits, so that a stale marker (one NaN among many) stays recognisable.
/// Only what the engine will look at is read (see [`Needed`]), and at most
/// one row past the query's remaining sample budget, so that a query over
/// the limit is refused without being held in memory.
pub fn samples_sql(cond: &str, sel: &Selection) -> String {
    let ids = format!("series_id IN (SELECT series_id FROM _series WHERE {cond})");
    let limit = match sel.limit {
        usize::MAX => String::new(),
        n => format!(" LIMIT {}", n + 1),
    };
    let end = |grid: &Grid| sel.end_ms.min(grid.last());
    match sel.needed {
        Needed::All => format!(
            "SELECT series_id, toUnixTimestamp64Milli(time) AS t, reinterpretAsUInt64(ifNull(value, nan)) AS bits FROM _samples FINAL WHERE {ids} AND {} ORDER BY series_id, time{limit}",
            time_condition(sel.start_ms, sel.end_ms)
        ),
        // Windows with gaps between them: a sample is in one when the
        // distance to the next reference time at or after it is at most
        // the range.
        Needed::Windows { grid, range } => format!(
            "SELECT series_id, toUnixTimestamp64Milli(time) AS t, reinterpretAsUInt64(ifNull(value, nan)) AS bits FROM _samples FINAL WHERE {ids} AND {} AND ({} - toUnixTimestamp64Milli(time)) % {} <= {range} ORDER BY series_id, time{limit}",
            time_condition(sel.start_ms, end(&grid)),
            num(grid.last()),
            grid.step,
        ),
        // The newest sample of each step interval k (0 up to the first
        // reference time, else r[k-1] < t <= r[k]), kept only when it is
        // within the lookback of r[k]: what `Needed::keep` computes.
        Needed::NewestPerStep { grid, lookback } => {
            let first = num(grid.first);
            format!(
                "SELECT series_id, max(ts) AS t, argMax(b, time) AS bits FROM (SELECT series_id, time, toUnixTimestamp64Milli(time) AS ts, reinterpretAsUInt64(ifNull(value, nan)) AS b, if(ts <= {first}, 0, intDiv(ts - {first} - 1, {step}) + 1) AS k FROM _samples FINAL WHERE {ids} AND {}) GROUP BY series_id, k HAVING t >= {first} + k * {step} - {lookback} ORDER BY series_id, t{limit}",
                time_condition(sel.start_ms, end(&grid)),
                step = grid.step,
            )
        }
    }
}

fn text(col: &ArrayRef, row: usize) -> String {
    match col.data_type() {
        DataType::Utf8 => col.as_string::<i32>().value(row).to_string(),
        DataType::LargeUtf8 => col.as_string::<i64>().value(row).to_string(),
        DataType::Binary => String::from_utf8_lossy(col.as_binary::<i32>().value(row)).into_owned(),
        DataType::LargeBinary => {
            String::from_utf8_lossy(col.as_binary::<i64>().value(row)).into_owned()
        }
        _ => String::new(),
    }
}

fn uint(col: &ArrayRef, row: usize) -> Option<u64> {
    match col.data_type() {
        DataType::UInt64 => Some(col.as_primitive::<UInt64Type>().value(row)),
        DataType::Int64 => u64::try_from(col.as_primitive::<Int64Type>().value(row)).ok(),
        _ => None,
    }
}

/// A series row: the metric name and the tags map as JSON.
fn labels_of(name: &str, tags_json: &str) -> Labels {
    let tags: HashMap<String, String> = serde_json::from_str(tags_json).unwrap_or_default();
    Labels::from_pairs(
        tags.into_iter()
            .chain(std::iter::once((METRIC_NAME.to_string(), name.to_string()))),
    )
}

fn source_error(e: Error) -> shardhouse_promql::Error {
    shardhouse_promql::Error::Source(format!("reading the shards: {e}"))
}

impl ShardSamples<'_> {
    async fn each_shard(
        &self,
        sql: &str,
    ) -> shardhouse_promql::Result<Vec<(u32, Vec<RecordBatch>)>> {
        let answers = self
            .router
            .cluster
            .planned_all(&self.database, sql, self.deadline)
            .await
            .map_err(source_error)?;
        answers
            .into_iter()
            .map(|(shard, ipc)| Ok((shard, decode_ipc(shard, ipc).map_err(source_error)?)))
            .collect()
    }

    /// Every series the matchers select, keyed by (shard, series id).
    pub async fn series(
        &self,
        matchers: &[LabelMatcher],
        range: Option<(i64, i64)>,
    ) -> shardhouse_promql::Result<HashMap<(u32, u64), Labels>> {
        let cond = series_condition(matchers);
        let (start, end) = range.unwrap_or((0, MAX_STORED_MS));
        let sql = series_sql(&cond, start, end, range.is_some());
        let mut out = HashMap::new();
        for (shard, batches) in self.each_shard(&sql).await? {
            for (id, labels) in series_rows(&batches) {
                if matchers.iter().all(|m| m.matches_labels(&labels)) {
                    out.insert((shard, id), labels);
                }
            }
        }
        Ok(out)
    }

    /// The labels of every series `cond` selects on `shards`, by id (the
    /// shards are asked at once).
    async fn series_on(
        &self,
        shards: &BTreeSet<u32>,
        cond: &str,
    ) -> shardhouse_promql::Result<HashMap<u64, Labels>> {
        let sql = &series_sql(cond, 0, MAX_STORED_MS, false);
        let cluster = &self.router.cluster;
        let answers = futures::future::join_all(shards.iter().map(|&shard| async move {
            let ipc = cluster
                .planned_shard(&self.database, shard, sql, self.deadline)
                .await
                .map_err(source_error)?;
            decode_ipc(shard, ipc).map_err(source_error)
        }))
        .await;
        let mut out = HashMap::new();
        for batches in answers {
            out.extend(series_rows(&batches?));
        }
        Ok(out)
    }

    /// The labels of the series `found` (shard, id, samples) from the
    /// cache, asking the shards that answered an id it lacks for the
    /// series of `cond` (and remembering them). `None`: a series gone
    /// from `_series` between the two statements.
    async fn labels_of(
        &self,
        cond: &str,
        found: &[(u32, SeriesSamples)],
    ) -> shardhouse_promql::Result<Vec<Option<Labels>>> {
        let cache = &self.router.promql_labels;
        let mut labels = cache.get_all(&self.database, found.iter().map(|f| f.1 .0));
        let missing: BTreeSet<u32> = found
            .iter()
            .zip(&labels)
            .filter(|(_, l)| l.is_none())
            .map(|(f, _)| f.0)
            .collect();
        if missing.is_empty() {
            return Ok(labels);
        }
        let read = self.series_on(&missing, cond).await?;
        for (f, l) in found.iter().zip(&mut labels) {
            if l.is_none() {
                *l = read.get(&f.1 .0).cloned();
            }
        }
        cache.insert_all(&self.database, read);
        Ok(labels)
    }

    /// Label names (or one label's values) over the series of `sets`
    /// (every series when `sets` is empty).
    pub async fn label_values(
        &self,
        sets: &[Vec<LabelMatcher>],
        range: Option<(i64, i64)>,
        name: Option<&str>,
    ) -> shardhouse_promql::Result<Vec<String>> {
        let all = [Vec::new()];
        let sets = if sets.is_empty() { &all[..] } else { sets };
        let mut out = BTreeSet::new();
        for set in sets {
            for labels in self.series(set, range).await?.into_values() {
                match name {
                    Some(n) => {
                        let v = labels.get(n);
                        if !v.is_empty() {
                            out.insert(v.to_string());
                        }
                    }
                    None => out.extend(labels.iter().map(|(k, _)| k.to_string())),
                }
            }
        }
        Ok(out.into_iter().collect())
    }
}

/// The series rows of `series_sql` answers: id and labels.
fn series_rows(batches: &[RecordBatch]) -> impl Iterator<Item = (u64, Labels)> + '_ {
    batches
        .iter()
        .filter(|b| b.num_columns() >= 3)
        .flat_map(|b| {
            (0..b.num_rows()).filter_map(move |row| {
                let id = uint(b.column(0), row)?;
                Some((
                    id,
                    labels_of(&text(b.column(1), row), &text(b.column(2), row)),
                ))
            })
        })
}

#[shardhouse_promql::async_trait]
impl SampleSource for ShardSamples<'_> {
    /// One statement per shard, every shard at once; the labels from the
    /// cache (`labels_of`).
    async fn select(&self, sel: &Selection) -> shardhouse_promql::Result<Vec<Series>> {
        let cond = series_condition(&sel.matchers);
        let answers = self.each_shard(&samples_sql(&cond, sel)).await?;
        let rows: usize = answers
            .iter()
            .flat_map(|(_, batches)| batches.iter().map(RecordBatch::num_rows))
            .sum();
        if rows > sel.limit {
            return Err(shardhouse_promql::Error::TooManySamples);
        }
        let mut found = Vec::new();
        for (shard, batches) in answers {
            let series = decode::series_samples(&batches).map_err(|e| {
                shardhouse_promql::Error::Source(format!(
                    "reading the shards: shard {shard} answered a selection oddly ({e}); are the router and nodes of one version?"
                ))
            })?;
            found.extend(series.into_iter().map(|s| (shard, s)));
        }
        let labels = self.labels_of(&cond, &found).await?;
        // The shards' condition selects a superset (RE2 against Rust's
        // regexes): every matcher is checked here.
        Ok(found
            .into_iter()
            .zip(labels)
            .filter_map(|((_, (_, samples)), labels)| {
                Some(Series {
                    labels: labels?,
                    samples,
                })
            })
            .filter(|s| sel.matchers.iter().all(|m| m.matches_labels(&s.labels)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_become_a_series_condition() {
        let ms = vec![
            LabelMatcher::new(MatchKind::Equal, "__name__", "up").unwrap(),
            LabelMatcher::new(MatchKind::Regex, "job", "a|b'").unwrap(),
            LabelMatcher::new(MatchKind::NotEqual, "x", "").unwrap(),
        ];
        assert_eq!(
            series_condition(&ms),
            "measurement = 'up' AND match(tags['job'], '^(?:a|b\\')$') AND tags['x'] != ''"
        );
    }

    #[test]
    fn series_rows_become_labels() {
        let l = labels_of("up", r#"{"job":"demo","instance":"a:1"}"#);
        assert_eq!(
            l.to_string(),
            r#"{__name__="up", instance="a:1", job="demo"}"#
        );
    }

    fn selection(needed: Needed, start_ms: i64, end_ms: i64) -> Selection {
        Selection {
            matchers: vec![LabelMatcher::new(MatchKind::Equal, "__name__", "up").unwrap()],
            start_ms,
            end_ms,
            needed,
            limit: 1000,
        }
    }

    #[test]
    fn every_sample_when_all_are_needed_up_to_the_limit() {
        let sql = samples_sql("measurement = 'up'", &selection(Needed::All, 5, 90));
        assert!(sql.contains("toUnixTimestamp64Milli(time) AS t"), "{sql}");
        assert!(
            sql.contains("fromUnixTimestamp64Milli(toInt64(5))"),
            "{sql}"
        );
        assert!(
            sql.contains("fromUnixTimestamp64Milli(toInt64(90))"),
            "{sql}"
        );
        assert!(
            sql.ends_with("ORDER BY series_id, time LIMIT 1001"),
            "one row past the budget tells the router the query is over it: {sql}"
        );
        assert!(!sql.contains("GROUP BY"), "{sql}");
    }

    #[test]
    fn instant_selectors_keep_the_newest_sample_per_step() {
        // Steps at 1,000,000 + k * 60,000 ms (k < 10), lookback 5 min: the
        // read stops at the last step, not at the query's end.
        let grid = Grid::new(1_000_000, 60_000, 10);
        let needed = Needed::NewestPerStep {
            grid,
            lookback: 300_000,
        };
        let sql = samples_sql("1", &selection(needed, 700_000, 1_600_000));
        assert!(sql.contains("argMax(b, time) AS bits"), "{sql}");
        assert!(sql.contains("max(ts) AS t"), "{sql}");
        assert!(
            sql.contains("if(ts <= (1000000), 0, intDiv(ts - (1000000) - 1, 60000) + 1) AS k"),
            "{sql}"
        );
        assert!(sql.contains("GROUP BY series_id, k"), "{sql}");
        assert!(
            sql.contains("HAVING t >= (1000000) + k * 60000 - 300000"),
            "{sql}"
        );
        assert!(sql.contains("toInt64(1540000)"), "last step: {sql}");
        assert!(
            sql.contains("reinterpretAsUInt64(ifNull(value, nan)) AS b"),
            "stale markers keep their bits: {sql}"
        );
    }

    #[test]
    fn negative_reference_times_stay_valid_sql() {
        // `x offset 1h` at t = 0: reference times before the epoch.
        let grid = Grid::new(-3_600_000, 1, 1);
        let needed = Needed::NewestPerStep {
            grid,
            lookback: 300_000,
        };
        let sql = samples_sql("1", &selection(needed, -3_900_000, -3_600_000));
        assert!(
            sql.contains("intDiv(ts - (-3600000) - 1, 1)"),
            "parenthesised: {sql}"
        );
        assert!(sql.contains("toInt64(0)"), "clamped to the table: {sql}");
    }

    #[test]
    fn range_selectors_with_gaps_read_only_their_windows() {
        // rate(x[1m]) at a 10 min step: windows [r - 1m, r].
        let grid = Grid::new(600_000, 600_000, 4);
        let needed = Needed::Windows {
            grid,
            range: 60_000,
        };
        let sql = samples_sql("1", &selection(needed, 540_000, 2_500_000));
        assert!(
            sql.contains("((2400000) - toUnixTimestamp64Milli(time)) % 600000 <= 60000"),
            "{sql}"
        );
        assert!(sql.contains("toInt64(2400000)"), "last window's end: {sql}");
        assert!(sql.contains("ORDER BY series_id, time"), "{sql}");
    }
}
