//! `shardhouse-wal-points --wal-dir <data-dir>/wal --measurement M [--field v]`:
//! which Raft entry of which shard carries which points, read from a
//! stopped node's log. A test tool: the backup suite
//! (scripts/tests.d/backup.sh) runs its cluster with the log kept whole
//! (`SHARDHOUSE_TEST_FAULT_DISK=node=*,keep_log=1`) and checks that a
//! restored backup holds exactly the points of the entries at or below the
//! manifest's index of each shard.
//!
//! Prints one line per write entry holding rows of the measurement:
//! `<shard> <index> <database> <measurement> <rows> <v,v,...>`, the field's
//! values in row order (integers without a decimal point; a row without
//! the field prints `null`). The last line, on stderr, counts the entries.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::{Array, RecordBatch};
use bytes::Bytes;
use clap::Parser;
use prost::Message as _;
use shardhouse_common::proto::WalEntry;
use shardhouse_common::wire;

#[derive(Parser, Debug)]
#[command(
    name = "shardhouse-wal-points",
    about = "List the points of each WAL entry"
)]
struct Args {
    /// A stopped node's WAL directory (`<data-dir>/wal`).
    #[arg(long)]
    wal_dir: PathBuf,
    /// Only the rows of this measurement.
    #[arg(long)]
    measurement: String,
    /// The numeric field printed for each row.
    #[arg(long, default_value = "v")]
    field: String,
}

/// The rows one entry holds of one table of the measurement.
#[derive(Debug, PartialEq)]
struct TablePoints {
    database: String,
    /// The field's values; None where a row lacks it.
    values: Vec<Option<f64>>,
}

/// The rows of `measurement` in an entry's payload. Empty entries (a new
/// leader's) and storage operations hold none.
fn entry_points(data: &Bytes, measurement: &str, field: &str) -> Result<Vec<TablePoints>, String> {
    if data.is_empty() {
        return Ok(Vec::new());
    }
    let entry = WalEntry::decode(data.clone()).map_err(|e| format!("undecodable WalEntry: {e}"))?;
    let mut out = Vec::new();
    for table in entry.tables.iter().filter(|t| t.measurement == measurement) {
        let (_, batches) = wire::decode_stream(&table.points_ipc)
            .map_err(|e| format!("table {}: bad points IPC: {e}", table.measurement))?;
        let mut values = Vec::new();
        for batch in &batches {
            values.extend(field_values(batch, field)?);
        }
        out.push(TablePoints {
            database: table.database.clone(),
            values,
        });
    }
    Ok(out)
}

/// A numeric column as f64s (all None when the batch lacks the field).
fn field_values(batch: &RecordBatch, field: &str) -> Result<Vec<Option<f64>>, String> {
    let Some(col) = batch.column_by_name(field) else {
        return Ok(vec![None; batch.num_rows()]);
    };
    let at = |i: usize| !col.is_null(i);
    let vals: Vec<Option<f64>> = if let Some(a) = col.as_primitive_opt::<Float64Type>() {
        (0..a.len()).map(|i| at(i).then(|| a.value(i))).collect()
    } else if let Some(a) = col.as_primitive_opt::<Int64Type>() {
        (0..a.len())
            .map(|i| at(i).then(|| a.value(i) as f64))
            .collect()
    } else if let Some(a) = col.as_primitive_opt::<UInt64Type>() {
        (0..a.len())
            .map(|i| at(i).then(|| a.value(i) as f64))
            .collect()
    } else {
        return Err(format!("field {field} is {}, not numeric", col.data_type()));
    };
    Ok(vals)
}

/// `1,2.5,null`: integers without a decimal point, as the suite's seqs.
fn format_values(values: &[Option<f64>]) -> String {
    let one = |v: &Option<f64>| match v {
        None => "null".to_string(),
        Some(x) if x.fract() == 0.0 && x.abs() < 9e15 => format!("{}", *x as i64),
        Some(x) => format!("{x}"),
    };
    values.iter().map(one).collect::<Vec<_>>().join(",")
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut bad = None;
    let mut lines = 0u64;
    let read = shardhouse_wal::inspect::for_each_entry(&args.wal_dir, |shard, e| {
        if bad.is_some() {
            return;
        }
        let tables = match entry_points(&e.data, &args.measurement, &args.field) {
            Ok(tables) => tables,
            Err(why) => {
                bad = Some(format!("shard {shard} index {}: {why}", e.index));
                return;
            }
        };
        for t in tables {
            lines += 1;
            let line = format!(
                "{shard} {} {} {} {} {}",
                e.index,
                t.database,
                args.measurement,
                t.values.len(),
                format_values(&t.values)
            );
            if let Err(why) = writeln!(out, "{line}") {
                bad = Some(format!("cannot write to stdout: {why}"));
                return;
            }
        }
    });
    let bad = bad.or_else(|| {
        out.flush()
            .err()
            .map(|e| format!("cannot write to stdout: {e}"))
    });
    match (read, bad) {
        (Err(e), _) => {
            eprintln!("shardhouse-wal-points: {e}");
            ExitCode::FAILURE
        }
        (Ok(_), Some(why)) => {
            eprintln!("shardhouse-wal-points: {why}");
            ExitCode::FAILURE
        }
        (Ok(n), None) => {
            eprintln!("wal_entries={n} entries_with_points={lines}");
            ExitCode::SUCCESS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, Float64Array};
    use shardhouse_common::proto::TableBatch;
    use std::sync::Arc;

    fn table(measurement: &str, vs: Vec<Option<f64>>) -> TableBatch {
        let n = vs.len();
        let v: ArrayRef = Arc::new(Float64Array::from(vs));
        let batch = wire::points_batch(vec![1; n], vec![7; n], vec![("v".into(), v)]).unwrap();
        TableBatch {
            measurement: measurement.into(),
            points_ipc: wire::encode_batch(&batch).unwrap().into(),
            series_ipc: Bytes::new(),
            database: "db".into(),
        }
    }

    #[test]
    fn an_entry_yields_the_field_values_of_the_measurement_only() {
        let entry = wire::write_entry(
            "r1".into(),
            vec![
                table("steady", vec![Some(3.0), None, Some(5.0)]),
                table("other", vec![Some(9.0)]),
            ],
        );
        let data = Bytes::from(entry.encode_to_vec());
        let got = entry_points(&data, "steady", "v").unwrap();
        assert_eq!(
            got,
            vec![TablePoints {
                database: "db".into(),
                values: vec![Some(3.0), None, Some(5.0)],
            }]
        );
        assert_eq!(format_values(&got[0].values), "3,null,5");
        assert!(entry_points(&data, "none", "v").unwrap().is_empty());
        let missing = entry_points(&data, "steady", "w").unwrap();
        assert_eq!(missing[0].values, vec![None, None, None]);
    }

    #[test]
    fn empty_entries_hold_nothing_and_garbage_is_an_error() {
        assert!(entry_points(&Bytes::new(), "steady", "v")
            .unwrap()
            .is_empty());
        assert!(entry_points(&Bytes::from_static(&[0xff; 8]), "steady", "v").is_err());
        assert_eq!(format_values(&[Some(2.5)]), "2.5");
    }
}
