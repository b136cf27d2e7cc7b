//! The admin endpoints: `/api/v1/databases`, `/api/v1/retention`,
//! `/api/v1/drop_measurement` and `/api/v1/delete`, each a storage
//! operation (`cluster::storage_op`) sent to every shard
//! (`Cluster::storage_all`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use shardhouse_common::proto::{
    storage_op, CreateDatabase, DropDatabase, DropMeasurement, SetRetention, StorageOp,
};

use super::{error_response, parse_params};
use crate::auth::{presented_token, Role};
use crate::cluster::storage_op::{delete_op, format_retention, parse_retention, DeleteBody};
use crate::error::{Error, Result};
use crate::state::Router;

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
    r.auth.authorize(
        presented_token(headers, Some(&params)).as_deref(),
        need,
        &[db],
    )?;
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
                Some(t) => parse_retention(t)?,
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
        let retention_ns = parse_retention(required(&params, "retention")?)?;
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
        let op = delete_op(&db, body)?;
        r.cluster.storage_all(&op).await?;
        Ok(ok_json(serde_json::json!({ "ok": true })))
    }
    .await;
    res.unwrap_or_else(|e| error_response(endpoint, &e))
}
