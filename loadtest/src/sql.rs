//! Reading points back through the router's `GET /api/v1/sql`.

use crate::target::Target;
use crate::{Error, Result};
use serde_json::{Map, Value};

pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Runs `sql` against `database` and returns its rows as JSON objects
/// (column name -> value).
pub async fn query_rows(
    target: &Target,
    database: &str,
    sql: &str,
) -> Result<Vec<Map<String, Value>>> {
    let (status, body) = target
        .get(&format!(
            "/api/v1/sql?db={}&q={}",
            url_encode(database),
            url_encode(sql)
        ))
        .await?;
    if !(200..300).contains(&status) {
        return Err(Error::Query {
            status,
            body: String::from_utf8_lossy(&body).chars().take(500).collect(),
        });
    }
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| Error::QueryFormat(format!("not JSON: {e}")))?;
    rows_of(&v).ok_or_else(|| {
        Error::QueryFormat(format!(
            "no rows found in {}",
            String::from_utf8_lossy(&body)
                .chars()
                .take(300)
                .collect::<String>()
        ))
    })
}

fn column_names(v: &Value) -> Option<Vec<String>> {
    let arr = v.as_array()?;
    arr.iter()
        .map(|c| match c {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("name")?.as_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

/// Accepts the shapes SQL-over-HTTP APIs use: a bare array of row objects,
/// or an object holding `data`/`rows`/`results` (objects, or arrays next to
/// `columns`/`meta`).
pub fn rows_of(v: &Value) -> Option<Vec<Map<String, Value>>> {
    match v {
        Value::Array(a) if a.iter().all(Value::is_object) => {
            Some(a.iter().filter_map(|r| r.as_object().cloned()).collect())
        }
        Value::Object(o) => {
            let cols = ["columns", "meta", "fields", "schema"]
                .iter()
                .find_map(|k| o.get(*k).and_then(column_names));
            for key in ["data", "rows", "results", "result"] {
                let Some(inner) = o.get(key) else { continue };
                if let Some(a) = inner.as_array() {
                    if a.is_empty() {
                        return Some(vec![]);
                    }
                    if a.iter().all(Value::is_array) {
                        let cols = cols.clone()?;
                        return Some(
                            a.iter()
                                .map(|r| {
                                    cols.iter()
                                        .cloned()
                                        .zip(r.as_array().cloned().unwrap_or_default())
                                        .collect()
                                })
                                .collect(),
                        );
                    }
                }
                if let Some(rows) = rows_of(inner) {
                    return Some(rows);
                }
            }
            None
        }
        _ => None,
    }
}

/// A number in a JSON cell (ClickHouse renders 64-bit integers as strings).
pub fn as_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finds_rows_in_common_shapes() {
        let a = json!([{"v": 1, "shard": 0}]);
        let b = json!({"data": [{"v": "2"}], "rows": 1});
        let c = json!({"columns": ["shard", "v"], "rows": [[0, 3.0]]});
        let d = json!({"meta": [{"name": "v", "type": "Float64"}], "data": [[4]]});
        for (val, want) in [(a, 1.0), (b, 2.0), (c, 3.0), (d, 4.0)] {
            let rows = rows_of(&val).unwrap();
            assert_eq!(as_f64(&rows[0]["v"]), Some(want), "{val}");
        }
        assert!(rows_of(&json!({"error": "x"})).is_none());
    }

    #[test]
    fn encodes_query() {
        assert_eq!(url_encode("SELECT v FROM m"), "SELECT%20v%20FROM%20m");
    }
}
