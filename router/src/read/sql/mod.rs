//! `/api/v1/sql`: plans a SELECT across shards ([`plan`]), runs
//! each shard's part on one replica of every shard, and merges the answers
//! into the one a single ClickHouse over all the data would give
//! ([`merge`]). `per_shard=true` keeps the plain fan-out: the
//! statement as written on every shard, rows concatenated with a `shard`
//! column.
//!
//! The answer's encoding (JSON or CSV, timestamps as UTC strings) is in
//! `encode`; the tests are in `tests`.

mod encode;
pub mod merge;
pub mod plan;
#[cfg(test)]
mod tests;
pub mod value;

pub use encode::{encode, rfc3339_utc};

use crate::error::{Error, Result};
use crate::state::Router;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Accepts exactly one SELECT (or WITH ... SELECT) statement; see
/// [`crate::sql_check`] for the rules. Returns the statement to run.
pub fn validate_select(q: &str) -> Result<String> {
    crate::sql_check::check_select(q).map_err(Error::BadRequest)
}

/// Name of the column that says which shard a row came from: `shard`, or
/// `_shard` (more underscores as needed) when the result already has a
/// column of that name (`SELECT 1 AS shard`), so a row never has two
/// keys of one name.
pub fn shard_column_name(schema: &Schema) -> String {
    let mut name = "shard".to_owned();
    while schema.fields().iter().any(|f| f.name() == &name) {
        name.insert(0, '_');
    }
    name
}

pub(super) fn with_shard_column(batch: &RecordBatch, shard: u32) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new(
        shard_column_name(&schema),
        DataType::UInt32,
        false,
    ));
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    cols.push(Arc::new(UInt32Array::from(vec![shard; batch.num_rows()])));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::Internal(format!("adding shard column: {e}")))
}

/// How `/api/v1/sql` answers: format, mode and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlOptions {
    pub csv: bool,
    /// The statement as written on every shard, rows concatenated with a
    /// `shard` column (no merging).
    pub per_shard: bool,
    /// At most this many rows from one shard and in the answer.
    pub max_rows: u64,
    /// At most this many bytes of shard answers (Arrow IPC) in total.
    pub max_bytes: u64,
}

/// Default of `SHARDHOUSE_SQL_MAX_ROWS`.
pub const DEFAULT_MAX_ROWS: u64 = 1_000_000;
/// Default of `SHARDHOUSE_SQL_MAX_BYTES` (256 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

fn env_limit(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

impl SqlOptions {
    /// From the request's parameters: `format=csv`, `per_shard=true`,
    /// `max_rows` / `max_bytes` (which may only lower the router's limits,
    /// `SHARDHOUSE_SQL_MAX_ROWS` / `SHARDHOUSE_SQL_MAX_BYTES`).
    pub fn from_params(params: &std::collections::HashMap<String, String>) -> Result<Self> {
        let flag = |k: &str| -> Result<bool> {
            match params.get(k).map(String::as_str) {
                None | Some("false" | "0" | "") => Ok(false),
                Some("true" | "1") => Ok(true),
                Some(v) => Err(Error::BadRequest(format!(
                    "`{k}` must be true or false, not {v:?}"
                ))),
            }
        };
        let limit = |k: &str, env: &str, default: u64| -> Result<u64> {
            let max = env_limit(env, default);
            match params.get(k) {
                None => Ok(max),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|n| n.min(max))
                    .ok_or_else(|| {
                        Error::BadRequest(format!("`{k}` must be a positive integer, not {v:?}"))
                    }),
            }
        };
        Ok(SqlOptions {
            csv: params.get("format").is_some_and(|f| f == "csv"),
            per_shard: flag("per_shard")?,
            max_rows: limit("max_rows", "SHARDHOUSE_SQL_MAX_ROWS", DEFAULT_MAX_ROWS)?,
            max_bytes: limit("max_bytes", "SHARDHOUSE_SQL_MAX_BYTES", DEFAULT_MAX_BYTES)?,
        })
    }
}

fn no_table(database: &str) -> Error {
    Error::BadRequest(format!(
        "no shard has the table(s) this query reads in database {database:?}: nothing has been written there yet (table names are measurement names, e.g. `SELECT * FROM cpu FINAL`)"
    ))
}

/// The batches of one shard's Arrow IPC answer (none for empty bytes).
pub fn decode_ipc(shard: u32, ipc: Vec<u8>) -> Result<Vec<RecordBatch>> {
    if ipc.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |e: arrow_schema::ArrowError| {
        Error::Internal(format!("shard {shard} sent bad Arrow IPC: {e}"))
    };
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None).map_err(bad)?;
    reader.map(|b| b.map_err(bad)).collect()
}

/// Runs `q` and encodes the answer: JSON array of row objects, or CSV
/// with a header line. Returns `(content type, body)`. In steps: the plan,
/// each shard's part (asked again without the columns a shard lacks), the
/// answers read within the limits, merged and encoded.
pub async fn run(
    router: &Router,
    database: &str,
    q: &str,
    opts: SqlOptions,
) -> Result<(&'static str, Vec<u8>)> {
    let sql = validate_select(q)?;
    let deadline = Instant::now() + Duration::from_millis(router.options.request_timeout_ms);
    if opts.per_shard {
        return run_per_shard(router, database, &sql, opts, deadline).await;
    }
    let plan = plan::plan(&sql).map_err(|e| {
        Error::BadRequest(format!(
            "{e} (see docs/api.md, \"Read-back: SQL\", for what /api/v1/sql merges across shards)"
        ))
    })?;
    let fan_out = FanOut {
        router,
        database,
        plan: &plan,
        shards: router.cluster.shard_map()?.shard_count,
        cap: opts.max_rows.saturating_add(1),
        deadline,
    };
    let answers = fan_out.answers().await?;
    let mut shard_rows = read_answers(answers, database, opts)?;
    if plan::reads_no_table(&sql) {
        // `SELECT 1`, `FROM numbers(10)`: the same on every shard, once.
        let first = shard_rows.iter().position(|s| !s.names.is_empty());
        shard_rows = first
            .map(|i| vec![shard_rows.swap_remove(i)])
            .unwrap_or_default();
    }
    let answer = match &plan {
        plan::Plan::Rows(p) => merge::merge_rows(p, shard_rows),
        plan::Plan::Groups(p) => merge::merge_groups(p, shard_rows)?,
    };
    if answer.rows.len() as u64 > opts.max_rows {
        return Err(too_large(format!(
            "the answer has more than max_rows={} rows",
            opts.max_rows
        )));
    }
    Ok(value::encode_rows(&answer.names, &answer.rows, opts.csv))
}

/// A plan's parts sent to every shard.
struct FanOut<'a> {
    router: &'a Router,
    database: &'a str,
    plan: &'a plan::Plan,
    shards: u32,
    /// At most this many rows from one shard (one over the limit, to
    /// tell).
    cap: u64,
    deadline: Instant,
}

impl FanOut<'_> {
    /// Every shard's answer, in shard order. Shards that lack a column
    /// other shards have read it as NULL: they are asked again with it
    /// as NULL.
    async fn answers(&self) -> Result<Vec<Result<Vec<u8>>>> {
        let none = HashSet::new();
        let first = self.plan.shard_sql(&none, self.cap);
        let mut answers: Vec<Result<Vec<u8>>> =
            futures::future::join_all((0..self.shards).map(|s| self.query(s, &first))).await;
        let unknown = |r: &Result<Vec<u8>>| matches!(r, Err(Error::UnknownColumn { .. }));
        if !answers.iter().any(unknown) {
            return Ok(answers);
        }
        let columns = shard_columns(self.router, self.database, self.shards, self.deadline).await?;
        let union: HashSet<String> = columns.iter().flatten().cloned().collect();
        let retries = (0..self.shards)
            .filter(|s| unknown(&answers[*s as usize]))
            .map(|s| {
                let missing: HashSet<String> =
                    union.difference(&columns[s as usize]).cloned().collect();
                let sql = self.plan.shard_sql(&missing, self.cap);
                async move {
                    if missing.is_empty() {
                        return None;
                    }
                    Some((s, self.query(s, &sql).await))
                }
            });
        for (s, r) in futures::future::join_all(retries)
            .await
            .into_iter()
            .flatten()
        {
            answers[s as usize] = r;
        }
        Ok(answers)
    }

    async fn query(&self, shard: u32, sql: &str) -> Result<Vec<u8>> {
        self.router
            .cluster
            .query_shard(self.database, shard, sql, self.deadline)
            .await
    }
}

/// The shards' answers as rows, within `max_bytes` in all and `max_rows`
/// from each; an error when no shard has the table(s) read.
fn read_answers(
    answers: Vec<Result<Vec<u8>>>,
    database: &str,
    opts: SqlOptions,
) -> Result<Vec<merge::ShardRows>> {
    let mut bytes = 0u64;
    let mut parts = Vec::with_capacity(answers.len());
    for (shard, answer) in answers.into_iter().enumerate() {
        let ipc = answer?;
        bytes += ipc.len() as u64;
        if bytes > opts.max_bytes {
            return Err(too_large(format!(
                "the shards' answers exceed max_bytes={} bytes",
                opts.max_bytes
            )));
        }
        parts.push((shard as u32, ipc));
    }
    if !parts.is_empty() && parts.iter().all(|(_, ipc)| ipc.is_empty()) {
        return Err(no_table(database));
    }
    let mut shard_rows = Vec::with_capacity(parts.len());
    for (shard, ipc) in parts {
        let mut sr = merge::ShardRows::default();
        for b in decode_ipc(shard, ipc)? {
            if sr.names.is_empty() {
                sr.names = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
            }
            sr.rows.extend(value::batch_rows(&b)?);
        }
        if sr.rows.len() as u64 > opts.max_rows {
            return Err(too_large(format!(
                "shard {shard} alone answers more than max_rows={} rows",
                opts.max_rows
            )));
        }
        shard_rows.push(sr);
    }
    Ok(shard_rows)
}

fn too_large(what: String) -> Error {
    Error::BadRequest(format!(
        "{what}: narrow the query (WHERE, LIMIT, fewer groups) or raise the router's SHARDHOUSE_SQL_MAX_ROWS / SHARDHOUSE_SQL_MAX_BYTES"
    ))
}

/// The column names of each shard's tables in `database` (empty for a
/// shard without the database).
async fn shard_columns(
    router: &Router,
    database: &str,
    shards: u32,
    deadline: Instant,
) -> Result<Vec<HashSet<String>>> {
    let sql = "SELECT DISTINCT name FROM system.columns WHERE database = currentDatabase()";
    let answers = futures::future::join_all(
        (0..shards).map(|s| router.cluster.query_shard(database, s, sql, deadline)),
    )
    .await;
    let mut out = Vec::with_capacity(answers.len());
    for (shard, a) in answers.into_iter().enumerate() {
        let mut names = HashSet::new();
        for b in decode_ipc(shard as u32, a?)? {
            for row in value::batch_rows(&b)? {
                if let Some(value::Value::Str(n)) = row.into_iter().next() {
                    names.insert(n);
                }
            }
        }
        out.push(names);
    }
    Ok(out)
}

/// `per_shard=true`: the statement on every shard, rows concatenated with
/// a `shard` column.
async fn run_per_shard(
    router: &Router,
    database: &str,
    sql: &str,
    opts: SqlOptions,
    deadline: Instant,
) -> Result<(&'static str, Vec<u8>)> {
    let results = router.cluster.query_all(database, sql, deadline).await?;
    // A node answers every query of an existing table with at least a schema;
    // empty bytes from every shard mean no shard has the table at all.
    if !results.is_empty() && results.iter().all(|(_, ipc)| ipc.is_empty()) {
        return Err(no_table(database));
    }
    let total: u64 = results.iter().map(|(_, ipc)| ipc.len() as u64).sum();
    if total > opts.max_bytes {
        return Err(too_large(format!(
            "the shards' answers exceed max_bytes={} bytes",
            opts.max_bytes
        )));
    }
    let mut batches = Vec::new();
    let mut rows = 0u64;
    for (shard, ipc) in results {
        for b in decode_ipc(shard, ipc)? {
            rows += b.num_rows() as u64;
            batches.push(with_shard_column(&b, shard)?);
        }
    }
    if rows > opts.max_rows {
        return Err(too_large(format!(
            "the answer has more than max_rows={} rows",
            opts.max_rows
        )));
    }
    encode(&batches, opts.csv)
}
