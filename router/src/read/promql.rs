//! PromQL's samples from the shards: a [`SampleSource`] over the
//! database's `_series` (metric name = `measurement`, labels = `tags`) and
//! `_samples` tables. Label matchers become a `_series` condition run on
//! every shard (a series and its samples live on one shard, so each
//! shard's answer is whole); the engine re-checks every matcher, so the
//! condition only has to select a superset.

use std::collections::{BTreeSet, HashMap};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use shardhouse_promql::labels::METRIC_NAME;
use shardhouse_promql::{LabelMatcher, Labels, MatchKind, SampleSource, Series};
use tokio::time::Instant;

use crate::error::Error;
use crate::read::sql::decode_ipc;
use crate::state::Router;

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

fn samples_sql(cond: &str, start_ms: i64, end_ms: i64) -> String {
    // The value's bits, so that a stale marker (one NaN among many) stays
    // recognisable.
    format!(
        "SELECT series_id, toUnixTimestamp64Milli(time) AS t, reinterpretAsUInt64(ifNull(value, nan)) AS bits FROM _samples FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE {cond}) AND {} ORDER BY series_id, time",
        time_condition(start_ms, end_ms)
    )
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

fn int(col: &ArrayRef, row: usize) -> Option<i64> {
    match col.data_type() {
        DataType::Int64 => Some(col.as_primitive::<Int64Type>().value(row)),
        DataType::UInt64 => i64::try_from(col.as_primitive::<UInt64Type>().value(row)).ok(),
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
            for b in batches.iter().filter(|b| b.num_columns() >= 3) {
                for row in 0..b.num_rows() {
                    let Some(id) = uint(b.column(0), row) else {
                        continue;
                    };
                    let labels = labels_of(&text(b.column(1), row), &text(b.column(2), row));
                    if matchers.iter().all(|m| m.matches_labels(&labels)) {
                        out.insert((shard, id), labels);
                    }
                }
            }
        }
        Ok(out)
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

#[shardhouse_promql::async_trait]
impl SampleSource for ShardSamples<'_> {
    async fn select(
        &self,
        matchers: &[LabelMatcher],
        start_ms: i64,
        end_ms: i64,
    ) -> shardhouse_promql::Result<Vec<Series>> {
        // The series' labels and their samples are two statements per
        // shard, independent of each other: both are sent at once, so a
        // selector costs one round trip of latency, not two.
        let sql = samples_sql(&series_condition(matchers), start_ms, end_ms);
        let (mut series, answers) =
            tokio::try_join!(self.series(matchers, None), self.each_shard(&sql))?;
        if series.is_empty() {
            return Ok(Vec::new());
        }
        let mut samples: HashMap<(u32, u64), Vec<(i64, f64)>> = HashMap::new();
        for (shard, batches) in answers {
            for b in batches.iter().filter(|b| b.num_columns() >= 3) {
                for row in 0..b.num_rows() {
                    let (Some(id), Some(t), Some(bits)) = (
                        uint(b.column(0), row),
                        int(b.column(1), row),
                        uint(b.column(2), row),
                    ) else {
                        continue;
                    };
                    samples
                        .entry((shard, id))
                        .or_default()
                        .push((t, f64::from_bits(bits)));
                }
            }
        }
        Ok(samples
            .into_iter()
            .filter_map(|(key, samples)| {
                series.remove(&key).map(|labels| Series { labels, samples })
            })
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
}
