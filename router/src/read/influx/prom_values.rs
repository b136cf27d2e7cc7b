//! InfluxDB 1.8's side of Prometheus remote_read on `/api/v1/prom/read`:
//! measurements written as line protocol, read as Prometheus series. The
//! metric name (`__name__`) is the measurement, the samples are the float
//! field `value`, the labels the series' tags (no `__name__`), the time
//! range inclusive at both ends, and regex matchers match anywhere, as
//! InfluxDB's storage predicate does. Samples remote_write stored are
//! read by `crate::read::promql` as before; the endpoint answers both.

use std::collections::BTreeMap;

use shardhouse_eval::Value;
use shardhouse_influxql::{quote_ident, quote_string, Statement};
use shardhouse_promql::{LabelMatcher, MatchKind};

use super::Ctx;
use crate::error::Result;

/// A series' labels (its non-empty tags, by name) and its samples in
/// milliseconds.
pub type ValueSeries = (BTreeMap<String, String>, Vec<(i64, f64)>);

/// The `SELECT` of one remote_read query over the line-protocol
/// measurement `measurement` (pure): its tag matchers as InfluxQL.
pub fn value_select(
    measurement: &str,
    matchers: &[LabelMatcher],
    start_ms: i64,
    end_ms: i64,
) -> String {
    let mut conds = vec![format!("time >= {start_ms}ms AND time <= {end_ms}ms")];
    for m in matchers.iter().filter(|m| m.name != "__name__") {
        let key = quote_ident(&m.name);
        conds.push(match m.kind {
            MatchKind::Equal => format!("{key} = {}", quote_string(&m.value)),
            MatchKind::NotEqual => format!("{key} != {}", quote_string(&m.value)),
            MatchKind::Regex => format!("{key} =~ {}", regex_literal(&m.value)),
            MatchKind::NotRegex => format!("{key} !~ {}", regex_literal(&m.value)),
        });
    }
    format!(
        "SELECT \"value\" FROM {} WHERE {} GROUP BY *",
        quote_ident(measurement),
        conds.join(" AND ")
    )
}

/// Whether a measurement's name passes the `__name__` matchers, with
/// InfluxDB's regexes (matching anywhere).
fn name_matches(matchers: &[LabelMatcher], name: &str) -> bool {
    matchers.iter().filter(|m| m.name == "__name__").all(|m| {
        let re = || regex::Regex::new(&m.value).is_ok_and(|r| r.is_match(name));
        match m.kind {
            MatchKind::Equal => m.value == name,
            MatchKind::NotEqual => m.value != name,
            MatchKind::Regex => re(),
            MatchKind::NotRegex => !re(),
        }
    })
}

fn regex_literal(pattern: &str) -> String {
    format!("/{}/", pattern.replace('/', "\\/"))
}

/// The line-protocol series of the context's database (and policy) one
/// remote_read query selects: every measurement the `__name__` matchers
/// pass that has a float field `value` (Prometheus metrics remote_write
/// stored are left to the samples path); none when the database does not
/// exist (InfluxDB answers an empty result).
pub async fn value_series(
    ctx: &Ctx<'_>,
    matchers: &[LabelMatcher],
    start_ms: i64,
    end_ms: i64,
) -> Result<Vec<ValueSeries>> {
    let storage = match ctx
        .router
        .policies
        .storage(ctx.database, ctx.retention_policy)
    {
        Ok(s) => s,
        Err(_) => return Ok(Vec::new()),
    };
    let named = matchers
        .iter()
        .find(|m| m.name == "__name__" && m.kind == MatchKind::Equal);
    let names = match named {
        Some(m) => vec![m.value.clone()],
        None => match super::meta::measurement_names(ctx, &storage).await {
            Ok(all) => all,
            Err(e) if e.is_statement_error() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        },
    };
    // The catalogs side by side: a `__name__` regex may pass hundreds of
    // names, most of them remote-written metrics.
    let names: Vec<&String> = names.iter().filter(|n| name_matches(matchers, n)).collect();
    let schemas = futures::future::join_all(
        names
            .iter()
            .map(|n| super::select::schema(ctx, &storage, n)),
    )
    .await;
    let mut out = Vec::new();
    for (name, schema) in names.into_iter().zip(schemas) {
        match schema {
            Ok(s) if !s.samples && s.fields.get("value") == Some(&"float") => {}
            Ok(_) => continue,
            Err(e) if e.is_statement_error() => continue,
            Err(e) => return Err(e),
        }
        let text = value_select(name, matchers, start_ms, end_ms);
        let Ok(parsed) = shardhouse_influxql::parse(&text) else {
            // A regex InfluxQL cannot hold: nothing here matches it.
            continue;
        };
        for stmt in &parsed.statements {
            let Statement::Select(select) = stmt else {
                continue;
            };
            let series = match super::select::run(ctx, select).await {
                Ok(s) => s,
                Err(e) if e.is_statement_error() => continue,
                Err(e) => return Err(e),
            };
            out.extend(series.into_iter().filter_map(value_series_of));
        }
    }
    Ok(out)
}

/// One InfluxQL series as labels (its non-empty tags) and samples.
fn value_series_of(s: shardhouse_eval::Series) -> Option<ValueSeries> {
    let labels: BTreeMap<String, String> =
        s.tags.into_iter().filter(|(_, v)| !v.is_empty()).collect();
    let samples: Vec<(i64, f64)> = s
        .values
        .iter()
        .filter_map(|row| match (row.first(), row.get(1)) {
            (Some(Value::Int(t) | Value::Time(t)), Some(Value::Float(v))) => {
                Some((t.div_euclid(1_000_000), *v))
            }
            _ => None,
        })
        .collect();
    (!samples.is_empty()).then_some((labels, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(kind: MatchKind, name: &str, value: &str) -> LabelMatcher {
        LabelMatcher::new(kind, name, value).unwrap()
    }

    #[test]
    fn matchers_become_influxql() {
        let sql = value_select(
            "mem",
            &[
                m(MatchKind::Equal, "__name__", "mem"),
                m(MatchKind::Regex, "host", "server-1$"),
                m(MatchKind::NotEqual, "region", "it's"),
                m(MatchKind::NotRegex, "dc", "a/b"),
            ],
            119_000,
            120_010,
        );
        assert_eq!(
            sql,
            "SELECT \"value\" FROM mem WHERE time >= 119000ms AND time <= 120010ms AND host =~ /server-1$/ \
             AND region != 'it\\'s' AND dc !~ /a\\/b/ GROUP BY *"
        );
        shardhouse_influxql::parse(&sql).expect("parses");
        assert!(value_select("a b", &[], 0, 1).contains("FROM \"a b\" WHERE"));
    }

    #[test]
    fn metric_name_matchers_pick_measurements() {
        let named = [m(MatchKind::Equal, "__name__", "mem")];
        assert!(name_matches(&named, "mem"));
        assert!(!name_matches(&named, "cpu"));
        // InfluxDB's regexes match anywhere.
        let re = [m(MatchKind::Regex, "__name__", "em")];
        assert!(name_matches(&re, "mem"));
        assert!(!name_matches(
            &[m(MatchKind::NotRegex, "__name__", "^m")],
            "mem"
        ));
        assert!(name_matches(
            &[m(MatchKind::Equal, "host", "a")],
            "anything"
        ));
    }
}
