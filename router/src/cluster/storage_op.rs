//! The storage operations the admin endpoints and InfluxQL statements
//! send to every shard, built from what a user wrote: retentions
//! (InfluxQL durations) and delete requests (docs/api.md).

use serde::Deserialize;
use shardhouse_common::proto::{
    storage_op, tag_expr, tag_match, DeletePoints, StorageOp, TagExpr, TagExprList, TagMatch,
};

use crate::error::{Error, Result};

/// Parses a retention: InfluxQL duration literals (`90m`, `1h30m`, `7d`,
/// `2w`), `INF` or `0` for "keep forever". Returns nanoseconds.
pub fn parse_retention(text: &str) -> Result<i64> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("inf") || t == "0" {
        return Ok(0);
    }
    let mut total: i128 = 0;
    let mut rest = t;
    if rest.is_empty() {
        return Err(Error::BadRequest(
            "a retention is empty; use a duration such as 7d, 12h or INF".into(),
        ));
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(Error::BadRequest(format!(
                "retention {t:?} is not a duration: expected a number at {rest:?} (use e.g. 7d, 12h, 90m or INF)"
            )));
        }
        let n: i128 = rest[..digits]
            .parse()
            .map_err(|_| Error::BadRequest(format!("retention {t:?}: number too large")))?;
        rest = &rest[digits..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        let unit: i128 = match &rest[..unit_len] {
            "ns" => 1,
            "u" | "µ" | "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "w" => 604_800_000_000_000,
            other => {
                return Err(Error::BadRequest(format!(
                    "retention {t:?}: unknown unit {other:?} (use ns, u, ms, s, m, h, d or w)"
                )))
            }
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    i64::try_from(total).map_err(|_| Error::BadRequest(format!("retention {t:?} is too long")))
}

/// `1h30m0s`-style rendering (Go's, as InfluxDB prints retentions); `0s`
/// means forever.
pub fn format_retention(ns: i64) -> String {
    if ns <= 0 {
        return "0s".into();
    }
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    format!("{h}h{m}m{s}s")
}

/// A tag condition in a delete request.
#[derive(Debug, Deserialize)]
pub struct TagCondition {
    pub key: String,
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    pub value: String,
}

/// Body of `POST /api/v1/delete`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DeleteBody {
    #[serde(default)]
    pub measurement: String,
    /// Nanoseconds since the epoch, inclusive; absent = from the beginning.
    pub start: Option<i64>,
    /// Nanoseconds since the epoch, inclusive; absent = to the end.
    pub stop: Option<i64>,
    /// All must hold (AND).
    #[serde(default)]
    pub tags: Vec<TagCondition>,
    /// Forget the matched series and all their points (`DROP SERIES`).
    #[serde(default)]
    pub drop_series: bool,
}

/// The storage operation of a delete request.
pub fn delete_op(database: &str, body: DeleteBody) -> Result<StorageOp> {
    let mut items = Vec::with_capacity(body.tags.len());
    for c in body.tags {
        let op = match c.op.as_str() {
            "=" => tag_match::Op::Eq,
            "!=" => tag_match::Op::Neq,
            "=~" => tag_match::Op::Regex,
            "!~" => tag_match::Op::NotRegex,
            other => {
                return Err(Error::BadRequest(format!(
                    "tag condition on {:?}: unknown operator {other:?} (use =, !=, =~ or !~)",
                    c.key
                )))
            }
        };
        items.push(TagExpr {
            expr: Some(tag_expr::Expr::Match(TagMatch {
                key: c.key,
                op: op as i32,
                value: c.value,
            })),
        });
    }
    let predicate = if items.is_empty() {
        None
    } else {
        Some(TagExpr {
            expr: Some(tag_expr::Expr::All(TagExprList { items })),
        })
    };
    Ok(StorageOp {
        op: Some(storage_op::Op::DeletePoints(DeletePoints {
            database: database.to_owned(),
            measurement: body.measurement,
            min_time_ns: body.start.unwrap_or(i64::MIN),
            max_time_ns: body.stop.unwrap_or(i64::MAX),
            predicate,
            drop_series: body.drop_series,
        })),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_parse_like_influxql_durations() {
        assert_eq!(parse_retention("INF").unwrap(), 0);
        assert_eq!(parse_retention("0").unwrap(), 0);
        assert_eq!(parse_retention("1h30m").unwrap(), 5_400_000_000_000);
        assert_eq!(parse_retention("7d").unwrap(), 604_800_000_000_000);
        assert!(parse_retention("7x")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_retention("h")
            .unwrap_err()
            .to_string()
            .contains("expected a number"));
        assert!(parse_retention("").is_err());
        assert!(parse_retention("99999999999w")
            .unwrap_err()
            .to_string()
            .contains("too long"));
        assert_eq!(format_retention(5_400_000_000_000), "1h30m0s");
        assert_eq!(format_retention(0), "0s");
    }

    #[test]
    fn deletes_become_one_conjunction() {
        let body = DeleteBody {
            measurement: "cpu".into(),
            start: Some(5),
            stop: None,
            tags: vec![TagCondition {
                key: "host".into(),
                op: "=~".into(),
                value: "^a".into(),
            }],
            drop_series: false,
        };
        let op = delete_op("db", body).unwrap();
        let Some(storage_op::Op::DeletePoints(d)) = op.op else {
            panic!("not a delete")
        };
        assert_eq!((d.min_time_ns, d.max_time_ns), (5, i64::MAX));
        assert!(matches!(
            d.predicate.and_then(|p| p.expr),
            Some(tag_expr::Expr::All(l)) if l.items.len() == 1
        ));
        let bad = DeleteBody {
            tags: vec![TagCondition {
                key: "k".into(),
                op: "<".into(),
                value: "v".into(),
            }],
            ..DeleteBody::default()
        };
        assert!(delete_op("db", bad)
            .unwrap_err()
            .to_string()
            .contains("unknown operator"));
    }
}
