//! Read-back: runs a SELECT on one replica of every shard and merges the
//! rows, adding a `shard` column. Not a distributed query engine: each
//! shard answers the statement on its own data (no cross-shard aggregation).

use crate::error::{Error, Result};
use crate::ingest::Router;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_schema::{DataType, Field, Schema};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Accepts exactly one SELECT statement (a trailing `;` is allowed).
pub fn validate_select(q: &str) -> Result<String> {
    let t = q.trim();
    let t = t.strip_suffix(';').unwrap_or(t).trim();
    let first = t
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    if !first.eq_ignore_ascii_case("select") {
        return Err(Error::BadRequest(format!(
            "only SELECT statements are allowed here, got {:?}",
            t.chars().take(40).collect::<String>()
        )));
    }
    if t.contains(';') {
        return Err(Error::BadRequest(
            "send one statement per request (found `;` inside)".into(),
        ));
    }
    Ok(t.to_owned())
}

fn with_shard_column(batch: &RecordBatch, shard: u32) -> Result<RecordBatch> {
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new("shard", DataType::UInt32, false));
    let mut cols: Vec<ArrayRef> = batch.columns().to_vec();
    cols.push(Arc::new(UInt32Array::from(vec![shard; batch.num_rows()])));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)
        .map_err(|e| Error::Internal(format!("adding shard column: {e}")))
}

/// Runs `q` and encodes the merged rows: JSON array of row objects, or CSV
/// with a header line. Returns `(content type, body)`.
pub async fn run(router: &Router, q: &str, csv: bool) -> Result<(&'static str, Vec<u8>)> {
    let sql = validate_select(q)?;
    let deadline = Instant::now() + Duration::from_millis(router.options.request_timeout_ms);
    let results = router.cluster.query_all(&sql, deadline).await?;
    // A node answers every query of an existing table with at least a schema;
    // empty bytes from every shard mean no shard has the table at all.
    if !results.is_empty() && results.iter().all(|(_, ipc)| ipc.is_empty()) {
        return Err(Error::BadRequest(
            "no shard has the table(s) this query reads: nothing has been written to that measurement yet (table names are measurement names, e.g. `SELECT * FROM cpu FINAL`)".to_owned(),
        ));
    }
    let mut batches = Vec::new();
    for (shard, ipc) in results {
        if ipc.is_empty() {
            continue;
        }
        let reader = arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc), None)
            .map_err(|e| Error::Internal(format!("shard {shard} sent bad Arrow IPC: {e}")))?;
        for b in reader {
            let b =
                b.map_err(|e| Error::Internal(format!("shard {shard} sent bad Arrow IPC: {e}")))?;
            batches.push(with_shard_column(&b, shard)?);
        }
    }
    encode(&batches, csv)
}

/// Encodes merged batches as JSON rows or CSV.
pub fn encode(batches: &[RecordBatch], csv: bool) -> Result<(&'static str, Vec<u8>)> {
    let err = |e: arrow_schema::ArrowError| Error::Internal(format!("encoding result: {e}"));
    if csv {
        let mut w = arrow_csv::WriterBuilder::new()
            .with_header(true)
            .build(Vec::new());
        for b in batches {
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

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn missing_database_or_table_is_recognised() {
        use crate::cluster::is_missing_table;
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
}
