//! `/api/v1/sql`: plans a SELECT across shards ([`crate::sql_plan`]), runs
//! each shard's part on one replica of every shard, and merges the answers
//! into the one a single ClickHouse over all the data would give
//! ([`crate::sql_merge`]). `per_shard=true` keeps the plain fan-out: the
//! statement as written on every shard, rows concatenated with a `shard`
//! column.

use crate::error::{Error, Result};
use crate::ingest::Router;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, FixedSizeListArray, LargeListArray, ListArray, MapArray,
    RecordBatch, StringArray, StructArray, UInt32Array,
};
use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, TimeUnit};
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

fn with_shard_column(batch: &RecordBatch, shard: u32) -> Result<RecordBatch> {
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
/// with a header line. Returns `(content type, body)`.
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
    let plan = crate::sql_plan::plan(&sql).map_err(|e| {
        Error::BadRequest(format!(
            "{e} (see docs/api.md, \"Read-back: SQL\", for what /api/v1/sql merges across shards)"
        ))
    })?;
    let shards = router.cluster.shard_map()?.shard_count;
    let cap = opts.max_rows.saturating_add(1);
    let none = HashSet::new();
    let first = plan.shard_sql(&none, cap);
    let mut answers: Vec<Result<Vec<u8>>> = futures::future::join_all(
        (0..shards).map(|s| router.cluster.query_shard(database, s, &first, deadline)),
    )
    .await;
    // Shards that lack a column other shards have read it as NULL.
    let unknown = |r: &Result<Vec<u8>>| matches!(r, Err(Error::BadRequest(m)) if m.contains("UNKNOWN_IDENTIFIER") || m.contains("Missing columns"));
    if answers.iter().any(unknown) {
        let columns = shard_columns(router, database, shards, deadline).await?;
        let union: HashSet<String> = columns.iter().flatten().cloned().collect();
        let retries = (0..shards)
            .filter(|s| unknown(&answers[*s as usize]))
            .map(|s| {
                let missing: HashSet<String> =
                    union.difference(&columns[s as usize]).cloned().collect();
                let sql = plan.shard_sql(&missing, cap);
                async move {
                    if missing.is_empty() {
                        return None;
                    }
                    Some((
                        s,
                        router
                            .cluster
                            .query_shard(database, s, &sql, deadline)
                            .await,
                    ))
                }
            });
        for (s, r) in futures::future::join_all(retries)
            .await
            .into_iter()
            .flatten()
        {
            answers[s as usize] = r;
        }
    }
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
        let mut sr = crate::sql_merge::ShardRows::default();
        for b in decode_ipc(shard, ipc)? {
            if sr.names.is_empty() {
                sr.names = b
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone())
                    .collect();
            }
            sr.rows
                .extend(crate::sql_value::batch_rows(&b).map_err(Error::Internal)?);
        }
        if sr.rows.len() as u64 > opts.max_rows {
            return Err(too_large(format!(
                "shard {shard} alone answers more than max_rows={} rows",
                opts.max_rows
            )));
        }
        shard_rows.push(sr);
    }
    if crate::sql_plan::reads_no_table(&sql) {
        // `SELECT 1`, `FROM numbers(10)`: the same on every shard, once.
        let first = shard_rows.iter().position(|s| !s.names.is_empty());
        shard_rows = first
            .map(|i| vec![shard_rows.swap_remove(i)])
            .unwrap_or_default();
    }
    let answer = match &plan {
        crate::sql_plan::Plan::Rows(p) => crate::sql_merge::merge_rows(p, shard_rows),
        crate::sql_plan::Plan::Groups(p) => {
            crate::sql_merge::merge_groups(p, shard_rows).map_err(Error::Internal)?
        }
    };
    if answer.rows.len() as u64 > opts.max_rows {
        return Err(too_large(format!(
            "the answer has more than max_rows={} rows",
            opts.max_rows
        )));
    }
    Ok(crate::sql_value::encode_rows(
        &answer.names,
        &answer.rows,
        opts.csv,
    ))
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
            for row in crate::sql_value::batch_rows(&b).map_err(Error::Internal)? {
                if let Some(crate::sql_value::Value::Str(n)) = row.into_iter().next() {
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

/// Encodes merged batches as JSON rows or CSV. Timestamps (at any depth)
/// are written as RFC 3339 UTC strings whatever their time zone label
/// (chDB labels DateTime64 with the machine's zone) and whatever the
/// router's `TZ`.
pub fn encode(batches: &[RecordBatch], csv: bool) -> Result<(&'static str, Vec<u8>)> {
    let err = |e: arrow_schema::ArrowError| Error::Internal(format!("encoding result: {e}"));
    let batches = batches
        .iter()
        .map(timestamps_as_utc_strings)
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    if csv {
        let mut w = arrow_csv::WriterBuilder::new()
            .with_header(true)
            .build(Vec::new());
        for b in &batches {
            w.write(b).map_err(err)?;
        }
        return Ok(("text/csv", w.into_inner()));
    }
    let mut w = arrow_json::ArrayWriter::new(Vec::new());
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    w.write_batches(&refs).map_err(err)?;
    w.finish().map_err(err)?;
    let mut out = w.into_inner();
    if out.is_empty() {
        out = b"[]".to_vec();
    }
    Ok(("application/json", out))
}

/// RFC 3339 in UTC of `secs` + `nanos` since the epoch:
/// `2023-11-14T22:13:20Z`, with the fraction's digits up to the last
/// non-zero one (`.5`, `.000001`) when it is not zero (Go's RFC3339Nano,
/// as InfluxDB answers).
pub fn rfc3339_utc(secs: i64, nanos: u32) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Days to civil date (Howard Hinnant's algorithm, proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        sod / 3_600,
        sod % 3_600 / 60,
        sod % 60
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

fn contains_timestamp(dt: &DataType) -> bool {
    match dt {
        DataType::Timestamp(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => contains_timestamp(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| contains_timestamp(f.data_type())),
        _ => false,
    }
}

fn utc_strings<T: ArrowPrimitiveType<Native = i64>>(a: &dyn Array, per_sec: i64) -> ArrayRef {
    let nanos_per_unit = 1_000_000_000 / per_sec;
    let strings: StringArray = a
        .as_primitive::<T>()
        .iter()
        .map(|v| {
            v.map(|v| {
                let nanos = v.rem_euclid(per_sec) * nanos_per_unit;
                rfc3339_utc(v.div_euclid(per_sec), nanos as u32)
            })
        })
        .collect();
    Arc::new(strings)
}

fn with_type(f: &FieldRef, dt: &DataType) -> FieldRef {
    Arc::new(f.as_ref().clone().with_data_type(dt.clone()))
}

/// `a` with every Timestamp, at any depth, replaced by RFC 3339 UTC strings.
fn timestamps_to_strings(a: &ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError> {
    if !contains_timestamp(a.data_type()) {
        return Ok(a.clone());
    }
    Ok(match a.data_type() {
        DataType::Timestamp(TimeUnit::Second, _) => utc_strings::<TimestampSecondType>(a, 1),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            utc_strings::<TimestampMillisecondType>(a, 1_000)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            utc_strings::<TimestampMicrosecondType>(a, 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            utc_strings::<TimestampNanosecondType>(a, 1_000_000_000)
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(ListArray::try_new(
                with_type(f, values.data_type()),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::LargeList(f) => {
            let l = a.as_list::<i64>();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(LargeListArray::try_new(
                with_type(f, values.data_type()),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::FixedSizeList(f, size) => {
            let l = a.as_fixed_size_list();
            let values = timestamps_to_strings(l.values())?;
            Arc::new(FixedSizeListArray::try_new(
                with_type(f, values.data_type()),
                *size,
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(timestamps_to_strings)
                .collect::<Result<Vec<_>, _>>()?;
            let fields: Fields = fields
                .iter()
                .zip(&columns)
                .map(|(f, c)| with_type(f, c.data_type()))
                .collect();
            Arc::new(StructArray::try_new(fields, columns, s.nulls().cloned())?)
        }
        DataType::Map(f, sorted) => {
            let m = a.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            let entries = timestamps_to_strings(&entries)?;
            Arc::new(MapArray::try_new(
                with_type(f, entries.data_type()),
                m.offsets().clone(),
                entries.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        _ => a.clone(),
    })
}

/// `batch` with its timestamp columns as RFC 3339 UTC strings.
fn timestamps_as_utc_strings(batch: &RecordBatch) -> Result<RecordBatch, arrow_schema::ArrowError> {
    let schema = batch.schema();
    if !schema
        .fields()
        .iter()
        .any(|f| contains_timestamp(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(timestamps_to_strings)
        .collect::<Result<Vec<_>, _>>()?;
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .zip(&columns)
        .map(|(f, c)| with_type(f, c.data_type()))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())),
        columns,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn missing_database_or_table_is_recognised() {
        use crate::is_missing_table;
        assert!(is_missing_table("chDB statement failed (USE `shard_0000`): [chdb] Code: 81. DB::Exception: Database shard_0000 does not exist. (UNKNOWN_DATABASE)"));
        assert!(is_missing_table(
            "Code: 60. DB::Exception: Unknown table expression identifier 'cpu'. (UNKNOWN_TABLE)"
        ));
        assert!(!is_missing_table(
            "Code: 62. DB::Exception: Syntax error (SYNTAX_ERROR)"
        ));
    }

    #[test]
    fn only_single_selects_pass() {
        assert_eq!(validate_select(" select 1; ").unwrap(), "select 1");
        assert!(validate_select("SELECT count() FROM cpu").is_ok());
        for bad in [
            "INSERT INTO t VALUES (1)",
            "DROP TABLE cpu",
            "select 1; drop table x",
            "",
        ] {
            assert!(validate_select(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rows_get_a_shard_column_in_json_and_csv() {
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)])),
            vec![Arc::new(Int64Array::from(vec![7, 8]))],
        )
        .unwrap();
        let b = with_shard_column(&b, 3).unwrap();
        let (_, json) = encode(std::slice::from_ref(&b), false).unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(
            rows,
            serde_json::json!([{"v": 7, "shard": 3}, {"v": 8, "shard": 3}])
        );
        let (_, csv) = encode(&[b], true).unwrap();
        assert_eq!(String::from_utf8(csv).unwrap(), "v,shard\n7,3\n8,3\n");
        assert_eq!(encode(&[], false).unwrap().1, b"[]");
    }

    /// Issue 12: `SELECT 1 AS shard` gave row objects with two `shard` keys.
    #[test]
    fn a_result_with_its_own_shard_column_gets_underscore_shard() {
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new(
                "shard",
                DataType::Int64,
                false,
            )])),
            vec![Arc::new(Int64Array::from(vec![1]))],
        )
        .unwrap();
        let b = with_shard_column(&b, 5).unwrap();
        let (_, json) = encode(std::slice::from_ref(&b), false).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"[{"shard":1,"_shard":5}]"#
        );
        let (_, csv) = encode(std::slice::from_ref(&b), true).unwrap();
        assert_eq!(String::from_utf8(csv).unwrap(), "shard,_shard\n1,5\n");
        // And again when `_shard` is taken too.
        let b = with_shard_column(&b, 6).unwrap();
        assert_eq!(b.schema().field(2).name(), "__shard");
    }

    #[test]
    fn rfc3339_in_utc() {
        assert_eq!(rfc3339_utc(0, 0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000, 0), "2023-11-14T22:13:20Z");
        assert_eq!(
            rfc3339_utc(1_700_000_000, 500_000_000),
            "2023-11-14T22:13:20.5Z"
        );
        assert_eq!(
            rfc3339_utc(1_700_000_000, 1),
            "2023-11-14T22:13:20.000000001Z"
        );
        assert_eq!(
            rfc3339_utc(-1, 999_999_999),
            "1969-12-31T23:59:59.999999999Z"
        );
        assert_eq!(rfc3339_utc(951_782_400, 0), "2000-02-29T00:00:00Z");
        // The int64 nanosecond extremes.
        assert_eq!(
            rfc3339_utc(
                i64::MIN.div_euclid(1_000_000_000),
                i64::MIN.rem_euclid(1_000_000_000) as u32
            ),
            "1677-09-21T00:12:43.145224192Z"
        );
        assert_eq!(
            rfc3339_utc(i64::MAX / 1_000_000_000, (i64::MAX % 1_000_000_000) as u32),
            "2262-04-11T23:47:16.854775807Z"
        );
    }

    fn time_batch(tz: Option<&str>) -> RecordBatch {
        use arrow_array::TimestampNanosecondArray;
        let t = TimestampNanosecondArray::from(vec![
            Some(1_700_000_000_000_000_000),
            Some(1_700_000_000_250_000_000),
            None,
        ])
        .with_timezone_opt(tz.map(str::to_owned));
        let ty = t.data_type().clone();
        // The same instants in a nested column: List<Timestamp>.
        let inner = Arc::new(Field::new("item", ty.clone(), true));
        let list = ListArray::new(
            inner.clone(),
            arrow_buffer::OffsetBuffer::from_lengths([1, 1, 0]),
            Arc::new(t.clone()),
            None,
        );
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("time", ty, true),
                Field::new("times", DataType::List(inner), true),
            ])),
            vec![Arc::new(t), Arc::new(list)],
        )
        .unwrap()
    }

    /// Issue 12: chDB labels DateTime64 with the machine's zone name, and
    /// arrow refused "Etc/UTC" (500 on the README's own query). Any label
    /// gives the same UTC text. (`tests/sql_time_zone.rs` repeats this
    /// under several `TZ` values.)
    #[test]
    fn timestamps_render_as_rfc3339_utc_whatever_the_zone_label() {
        for tz in [
            Some("Etc/UTC"),
            Some("UTC"),
            Some("Europe/Berlin"),
            Some("America/New_York"),
            Some("+05:30"),
            Some("-08:00"),
            None,
        ] {
            let b = with_shard_column(&time_batch(tz), 0).unwrap();
            let (ct, json) = encode(std::slice::from_ref(&b), false).unwrap();
            assert_eq!(ct, "application/json");
            let rows: serde_json::Value = serde_json::from_slice(&json).unwrap();
            assert_eq!(
                rows,
                serde_json::json!([
                    {"time": "2023-11-14T22:13:20Z", "times": ["2023-11-14T22:13:20Z"], "shard": 0},
                    {"time": "2023-11-14T22:13:20.25Z", "times": ["2023-11-14T22:13:20.25Z"], "shard": 0},
                    {"times": [], "shard": 0},
                ]),
                "label {tz:?}"
            );
            let plain = RecordBatch::try_new(
                Arc::new(Schema::new(vec![b.schema().field(0).clone()])),
                vec![b.column(0).clone()],
            )
            .unwrap();
            let (ct, csv) = encode(&[plain], true).unwrap();
            assert_eq!(ct, "text/csv");
            assert_eq!(
                String::from_utf8(csv).unwrap(),
                // (the csv crate quotes the empty field of a one-column row)
                "time\n2023-11-14T22:13:20Z\n2023-11-14T22:13:20.25Z\n\"\"\n",
                "label {tz:?}"
            );
        }
    }

    #[test]
    fn other_time_units_and_struct_columns() {
        use arrow_array::{TimestampMillisecondArray, TimestampSecondArray};
        let s = TimestampSecondArray::from(vec![1_700_000_000]).with_timezone("Asia/Kolkata");
        let ms = TimestampMillisecondArray::from(vec![1_700_000_000_123]).with_timezone("Etc/UTC");
        let st = StructArray::from(vec![(
            Arc::new(Field::new("at", ms.data_type().clone(), false)),
            Arc::new(ms.clone()) as ArrayRef,
        )]);
        let b = RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("s", s.data_type().clone(), false),
                Field::new("st", st.data_type().clone(), false),
            ])),
            vec![Arc::new(s), Arc::new(st)],
        )
        .unwrap();
        let (_, json) = encode(&[b], false).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"[{"s":"2023-11-14T22:13:20Z","st":{"at":"2023-11-14T22:13:20.123Z"}}]"#
        );
    }
}
