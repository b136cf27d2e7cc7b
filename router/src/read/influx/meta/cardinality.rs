//! `SHOW <what> [EXACT] CARDINALITY`: the matching `SHOW` listing, counted
//! per measurement as InfluxDB 1.8 answers. Shardhouse counts exactly
//! every time; InfluxDB's estimate (from sketches) of series and
//! measurements, asked without `FROM` or `WHERE`, is answered with the
//! exact count under its column name, `cardinality estimation`.

use std::collections::BTreeMap;

use shardhouse_eval::{Series, Value};
use shardhouse_influxql::{
    CardinalityOf, Expr, ShowCardinality, ShowFieldKeys, ShowMeasurements, ShowSeries, ShowTagKeys,
    ShowTagValues, Statement,
};

use super::series_index::{measurement_matches, table};
use crate::error::{Error, Result};

/// InfluxDB's name of the statement in its messages.
fn name(of: &CardinalityOf) -> &'static str {
    match of {
        CardinalityOf::Series => "SHOW SERIES",
        CardinalityOf::Measurements => "SHOW MEASUREMENT",
        CardinalityOf::TagKeys => "SHOW TAG KEY",
        CardinalityOf::TagValues(_) => "SHOW TAG VALUES",
        CardinalityOf::FieldKeys => "SHOW FIELD KEY",
    }
}

/// Whether a condition reads `time`.
pub(super) fn mentions_time(e: &Expr) -> bool {
    match e {
        Expr::VarRef(v) => v.name.eq_ignore_ascii_case("time"),
        Expr::Binary { lhs, rhs, .. } => mentions_time(lhs) || mentions_time(rhs),
        _ => false,
    }
}

/// Whether the answer is InfluxDB's estimate (series or measurements,
/// neither filtered nor `EXACT`).
pub(super) fn estimated(c: &ShowCardinality) -> bool {
    !c.exact
        && c.from.is_empty()
        && c.condition.is_none()
        && matches!(c.of, CardinalityOf::Series | CardinalityOf::Measurements)
}

/// The listing whose rows are counted, or InfluxDB's error for a time
/// condition (which it refuses for exact and estimated counts alike).
pub(super) fn listing(c: &ShowCardinality) -> Result<Statement> {
    if c.condition.as_ref().is_some_and(mentions_time) {
        return Err(Error::statement(format!(
            "{} EXACT CARDINALITY doesn't support time in WHERE clause",
            name(&c.of)
        )));
    }
    let (database, from, condition) = (c.database.clone(), c.from.clone(), c.condition.clone());
    Ok(match &c.of {
        CardinalityOf::Series => Statement::ShowSeries(ShowSeries {
            database,
            from,
            condition,
            ..ShowSeries::default()
        }),
        // FROM narrows by name below (SHOW MEASUREMENTS has no FROM).
        CardinalityOf::Measurements => Statement::ShowMeasurements(ShowMeasurements {
            database,
            condition,
            ..ShowMeasurements::default()
        }),
        CardinalityOf::TagKeys => Statement::ShowTagKeys(ShowTagKeys {
            database,
            from,
            condition,
            ..ShowTagKeys::default()
        }),
        CardinalityOf::TagValues(key) => Statement::ShowTagValues(ShowTagValues {
            database,
            from,
            key: key.clone(),
            condition,
            limit: None,
            offset: None,
        }),
        CardinalityOf::FieldKeys => Statement::ShowFieldKeys(ShowFieldKeys {
            database,
            from,
            ..ShowFieldKeys::default()
        }),
    })
}

/// The measurement of a series key (`cpu,host=a` is `cpu`; `\,` and `\ `
/// are escaped characters of the name).
fn measurement_of(key: &str) -> String {
    let mut out = String::new();
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            ',' => break,
            c => out.push(c),
        }
    }
    out
}

fn count(name: &str, column: &str, n: usize) -> Series {
    table(name, &[column], vec![vec![Value::Int(n as i64)]])
}

/// Counts the listing's rows as InfluxDB answers the cardinality.
pub(super) fn counted(c: &ShowCardinality, listed: Vec<Series>) -> Vec<Series> {
    match &c.of {
        CardinalityOf::Series => {
            let mut per: BTreeMap<String, usize> = BTreeMap::new();
            for row in listed.iter().flat_map(|s| &s.values) {
                if let Some(Value::String(key)) = row.first() {
                    *per.entry(measurement_of(key)).or_default() += 1;
                }
            }
            if estimated(c) {
                return vec![count("", "cardinality estimation", per.values().sum())];
            }
            per.into_iter()
                .map(|(m, n)| count(&m, "count", n))
                .collect()
        }
        CardinalityOf::Measurements => {
            let names = listed
                .iter()
                .flat_map(|s| &s.values)
                .filter_map(|row| match row.first() {
                    Some(Value::String(n)) => Some(n),
                    _ => None,
                })
                .filter(|n| {
                    c.from.is_empty() || c.from.iter().any(|m| measurement_matches(&m.name, n))
                })
                .count();
            match (estimated(c), names) {
                (true, n) => vec![count("", "cardinality estimation", n)],
                (false, 0) => Vec::new(),
                (false, n) => vec![count("", "count", n)],
            }
        }
        _ => listed
            .iter()
            .filter(|s| !s.values.is_empty())
            .map(|s| count(&s.name, "count", s.values.len()))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(q: &str) -> ShowCardinality {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            Statement::ShowCardinality(c) => c,
            other => panic!("{other:?}"),
        }
    }

    fn rows(name: &str, column: &str, values: &[&str]) -> Series {
        table(
            name,
            &[column],
            values
                .iter()
                .map(|v| vec![Value::String(v.to_string())])
                .collect(),
        )
    }

    #[test]
    fn series_are_counted_per_measurement() {
        let keys = rows(
            "",
            "key",
            &["cpu,host=a", "cpu,host=b", "g\\,pu,host=a", "mem"],
        );
        let c = card("SHOW SERIES EXACT CARDINALITY");
        let out = counted(&c, vec![keys.clone()]);
        let got: Vec<(&str, &Value)> = out
            .iter()
            .map(|s| (s.name.as_str(), &s.values[0][0]))
            .collect();
        assert_eq!(
            got,
            [
                ("cpu", &Value::Int(2)),
                ("g,pu", &Value::Int(1)),
                ("mem", &Value::Int(1))
            ]
        );
        // Unfiltered and not EXACT: InfluxDB's estimate, one number.
        let out = counted(&card("SHOW SERIES CARDINALITY"), vec![keys]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].columns, ["cardinality estimation"]);
        assert_eq!(out[0].values, vec![vec![Value::Int(4)]]);
    }

    #[test]
    fn measurements_tags_and_fields() {
        let names = rows("measurements", "name", &["cpu", "disk", "gpu"]);
        let out = counted(
            &card("SHOW MEASUREMENT CARDINALITY FROM /[cg]pu/"),
            vec![names.clone()],
        );
        assert_eq!(
            (out[0].name.as_str(), &out[0].values[0][0]),
            ("", &Value::Int(2))
        );
        assert!(counted(
            &card("SHOW MEASUREMENT EXACT CARDINALITY FROM /z/"),
            vec![names]
        )
        .is_empty());
        let keys = vec![
            rows("cpu", "tagKey", &["host", "region"]),
            rows("gpu", "tagKey", &["host"]),
        ];
        let out = counted(&card("SHOW TAG KEY CARDINALITY"), keys);
        assert_eq!(out[1].name, "gpu");
        assert_eq!(out[1].values, vec![vec![Value::Int(1)]]);
    }

    #[test]
    fn time_conditions_are_refused_in_influxdbs_words() {
        assert_eq!(
            listing(&card("SHOW SERIES CARDINALITY WHERE time > now() - 1h"))
                .unwrap_err()
                .to_string(),
            "SHOW SERIES EXACT CARDINALITY doesn't support time in WHERE clause"
        );
        assert_eq!(
            listing(&card(
                "SHOW TAG KEY CARDINALITY FROM cpu WHERE host = 'a' AND time > 0"
            ))
            .unwrap_err()
            .to_string(),
            "SHOW TAG KEY EXACT CARDINALITY doesn't support time in WHERE clause"
        );
        assert!(listing(&card("SHOW SERIES CARDINALITY WHERE host = 'a'")).is_ok());
    }
}
