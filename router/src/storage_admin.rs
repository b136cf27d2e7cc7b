//! Databases, retention and deletes: the router's admin endpoints, each a
//! storage operation proposed to every shard's log (docs/api.md,
//! "Databases, retention and deletes").
//!
//! An operation is idempotent on a shard, so a request that failed on some
//! shards is simply sent again; until then the shards that applied it and
//! the ones that did not differ, and the answer (503) says which failed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use shardhouse_common::proto::admin_client::AdminClient;
use shardhouse_common::proto::{
    storage_op, tag_expr, tag_match, CreateDatabase, DatabasesRequest, DeletePoints, DropDatabase,
    DropMeasurement, SetRetention, StorageOp, StorageRequest, TagExpr, TagExprList, TagMatch,
};

use crate::auth::Role;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::http::{authorize, error_response, parse_params, presented_token};
use crate::ingest::Router;

/// How long one admin request may take across every shard.
const ADMIN_DEADLINE: Duration = Duration::from_secs(30);

impl Cluster {
    /// Proposes `op` to every shard's leader; Ok once every shard applied it.
    pub async fn storage_all(&self, op: &StorageOp) -> Result<()> {
        let map = self.shard_map()?;
        let deadline = Instant::now() + ADMIN_DEADLINE;
        let futs = (0..map.shard_count).map(|shard| {
            let map = map.clone();
            async move {
                let mut target = self.first_target(&map, shard)?;
                let mut last = String::new();
                while Instant::now() < deadline {
                    let mut client = AdminClient::new(self.channel(&target.1)?);
                    let mut req = tonic::Request::new(StorageRequest {
                        shard,
                        op: Some(op.clone()),
                    });
                    req.set_timeout(deadline.saturating_duration_since(Instant::now()));
                    match client.storage(req).await {
                        Ok(r) => {
                            let r = r.into_inner();
                            if r.ok {
                                return Ok(());
                            }
                            last = r.message;
                            match r.not_leader {
                                Some(nl) if !nl.leader_addr.is_empty() => {
                                    target = (nl.leader_hint, nl.leader_addr);
                                    continue;
                                }
                                _ => {
                                    target = self
                                        .next_replica(&map, shard, target.0)
                                        .unwrap_or(target)
                                }
                            }
                        }
                        Err(s) if s.code() == tonic::Code::InvalidArgument => {
                            return Err(Error::BadRequest(s.message().to_owned()))
                        }
                        Err(s) => {
                            last = format!("node {}: {}", target.0, s.message());
                            target = self.next_replica(&map, shard, target.0).unwrap_or(target);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(Error::Unavailable {
                    shard,
                    reason: format!(
                        "the storage operation was not applied on this shard (the others may have it; sending the request again is safe); last: {last}"
                    ),
                })
            }
        });
        futures::future::join_all(futs)
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()
            .map(|_| ())
    }

    /// The databases every node holds, merged.
    pub async fn databases_all(&self) -> Result<Vec<DatabaseView>> {
        let map = self.shard_map()?;
        let mut by_name: BTreeMap<String, DatabaseView> = BTreeMap::new();
        let nodes: Vec<(u64, String)> = map
            .nodes
            .iter()
            .map(|(id, n)| (*id, n.grpc_addr.clone()))
            .collect();
        for (id, addr) in nodes {
            let mut client = AdminClient::new(self.channel(&addr)?);
            let mut req = tonic::Request::new(DatabasesRequest {});
            req.set_timeout(Duration::from_secs(5));
            let reply = client
                .databases(req)
                .await
                .map_err(|s| Error::Unavailable {
                    shard: 0,
                    reason: format!(
                        "node {id} at {addr} did not list its databases: {}",
                        s.message()
                    ),
                })?;
            for d in reply.into_inner().databases {
                let v = by_name
                    .entry(d.name.clone())
                    .or_insert_with(|| DatabaseView {
                        name: d.name.clone(),
                        retention_ns: d.retention_ns,
                        shards: Vec::new(),
                    });
                v.retention_ns = v.retention_ns.max(d.retention_ns);
                v.shards.extend(d.shards);
            }
        }
        Ok(by_name
            .into_values()
            .map(|mut v| {
                v.shards.sort_unstable();
                v.shards.dedup();
                v
            })
            .collect())
    }
}

/// One database across the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseView {
    pub name: String,
    pub retention_ns: i64,
    pub shards: Vec<u32>,
}

/// Parses a retention: InfluxQL duration literals (`90m`, `1h30m`, `7d`,
/// `2w`), `INF` or `0` for "keep forever". Returns nanoseconds.
pub fn parse_retention(text: &str) -> std::result::Result<i64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("inf") || t == "0" {
        return Ok(0);
    }
    let mut total: i128 = 0;
    let mut rest = t;
    if rest.is_empty() {
        return Err("a retention is empty; use a duration such as 7d, 12h or INF".into());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "retention {t:?} is not a duration: expected a number at {rest:?} (use e.g. 7d, 12h, 90m or INF)"
            ));
        }
        let n: i128 = rest[..digits]
            .parse()
            .map_err(|_| format!("retention {t:?}: number too large"))?;
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
                return Err(format!(
                    "retention {t:?}: unknown unit {other:?} (use ns, u, ms, s, m, h, d or w)"
                ))
            }
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    i64::try_from(total).map_err(|_| format!("retention {t:?} is too long"))
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
pub fn delete_op(database: &str, body: DeleteBody) -> std::result::Result<StorageOp, String> {
    let mut items = Vec::with_capacity(body.tags.len());
    for c in body.tags {
        let op = match c.op.as_str() {
            "=" => tag_match::Op::Eq,
            "!=" => tag_match::Op::Neq,
            "=~" => tag_match::Op::Regex,
            "!~" => tag_match::Op::NotRegex,
            other => {
                return Err(format!(
                    "tag condition on {:?}: unknown operator {other:?} (use =, !=, =~ or !~)",
                    c.key
                ))
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

fn required<'a>(params: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str> {
    params
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Error::BadRequest(format!("query parameter `{name}` is required")))
}

fn database_param(params: &BTreeMap<String, String>) -> Result<String> {
    let db = required(params, "db")?;
    shardhouse_common::names::validate_database(db)
        .map_err(|e| Error::BadRequest(e.to_string()))?;
    Ok(db.to_owned())
}

/// The request's query parameters, once its token is checked for `need`
/// (admin for every change; listing databases reads) on its `db`.
fn authorized_params(
    r: &Router,
    query: Option<&str>,
    headers: &HeaderMap,
    need: Role,
) -> Result<BTreeMap<String, String>> {
    let params = parse_params(query)?;
    let db = params.get("db").map_or("", String::as_str);
    authorize(r, presented_token(headers, Some(&params)), need, &[db])?;
    Ok(params.into_iter().collect())
}

fn ok_json(value: serde_json::Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// `GET` lists, `POST ?db=&retention=` creates, `DELETE ?db=` drops.
pub async fn databases(
    State(r): State<Arc<Router>>,
    method: Method,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let endpoint = "databases";
    let res = async {
        let need = if method == Method::GET {
            Role::Read
        } else {
            Role::Admin
        };
        let params = authorized_params(&r, query.as_deref(), &headers, need)?;
        if method == Method::GET {
            let dbs = r.cluster.databases_all().await?;
            let list: Vec<serde_json::Value> = dbs
                .iter()
                .map(|d| {
                    serde_json::json!({
                        "name": d.name,
                        "retention": format_retention(d.retention_ns),
                        "retention_ns": d.retention_ns,
                        "shards": d.shards.len(),
                    })
                })
                .collect();
            return Ok(ok_json(serde_json::json!({ "databases": list })));
        }
        let db = database_param(&params)?;
        let op = if method == Method::DELETE {
            storage_op::Op::DropDatabase(DropDatabase {
                database: db.clone(),
            })
        } else {
            let retention_ns = match params.get("retention") {
                Some(t) => parse_retention(t).map_err(Error::BadRequest)?,
                None => 0,
            };
            storage_op::Op::CreateDatabase(CreateDatabase {
                database: db.clone(),
                retention_ns,
            })
        };
        r.cluster.storage_all(&StorageOp { op: Some(op) }).await?;
        Ok(ok_json(serde_json::json!({ "database": db, "ok": true })))
    }
    .await;
    res.unwrap_or_else(|e| error_response(endpoint, &e))
}

/// `POST /api/v1/retention?db=&retention=`: sets a database's retention.
pub async fn retention(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let endpoint = "retention";
    let res = async {
        let params = authorized_params(&r, query.as_deref(), &headers, Role::Admin)?;
        let db = database_param(&params)?;
        let retention_ns =
            parse_retention(required(&params, "retention")?).map_err(Error::BadRequest)?;
        let op = storage_op::Op::SetRetention(SetRetention {
            database: db.clone(),
            retention_ns,
        });
        r.cluster.storage_all(&StorageOp { op: Some(op) }).await?;
        Ok(ok_json(serde_json::json!({
            "database": db,
            "retention": format_retention(retention_ns),
            "ok": true
        })))
    }
    .await;
    res.unwrap_or_else(|e| error_response(endpoint, &e))
}

/// `POST /api/v1/drop_measurement?db=&measurement=`.
pub async fn drop_measurement(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let endpoint = "drop_measurement";
    let res = async {
        let params = authorized_params(&r, query.as_deref(), &headers, Role::Admin)?;
        let db = database_param(&params)?;
        let measurement = required(&params, "measurement")?.to_owned();
        let op = storage_op::Op::DropMeasurement(DropMeasurement {
            database: db,
            measurement,
        });
        r.cluster.storage_all(&StorageOp { op: Some(op) }).await?;
        Ok(ok_json(serde_json::json!({ "ok": true })))
    }
    .await;
    res.unwrap_or_else(|e| error_response(endpoint, &e))
}

/// `POST /api/v1/delete?db=` with a JSON [`DeleteBody`].
pub async fn delete(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let endpoint = "delete";
    let res = async {
        let params = authorized_params(&r, query.as_deref(), &headers, Role::Admin)?;
        let db = database_param(&params)?;
        let bytes = axum::body::to_bytes(body, 1 << 20)
            .await
            .map_err(|e| Error::BadRequest(format!("cannot read the body: {e}")))?;
        let body: DeleteBody = if bytes.is_empty() {
            DeleteBody::default()
        } else {
            serde_json::from_slice(&bytes)
                .map_err(|e| Error::BadRequest(format!("the delete body is not valid: {e}")))?
        };
        let op = delete_op(&db, body).map_err(Error::BadRequest)?;
        r.cluster.storage_all(&op).await?;
        Ok(ok_json(serde_json::json!({ "ok": true })))
    }
    .await;
    res.unwrap_or_else(|e| error_response(endpoint, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retentions_parse_like_influxql_durations() {
        assert_eq!(parse_retention("INF"), Ok(0));
        assert_eq!(parse_retention("0"), Ok(0));
        assert_eq!(parse_retention("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_retention("7d"), Ok(604_800_000_000_000));
        assert!(parse_retention("7x").unwrap_err().contains("unknown unit"));
        assert!(parse_retention("h")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_retention("").is_err());
        assert!(parse_retention("99999999999w")
            .unwrap_err()
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
            .contains("unknown operator"));
    }
}
