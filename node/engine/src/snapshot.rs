//! Snapshot bytes of one shard: its tables as Arrow IPC streams.
//!
//! Layout: `SHXSNAP1`, then per table: u32 name length, name, u64 stream
//! length, Arrow IPC stream (schema + batches). All integers little-endian.

use arrow_array::RecordBatch;
use arrow_ipc::writer::StreamWriter;
use arrow_schema::SchemaRef;

use crate::error::{EngineError, Result};
use crate::ipc;

const MAGIC: &[u8; 8] = b"SHXSNAP1";

/// One table in a snapshot.
pub type SnapshotTable = (String, SchemaRef, Vec<RecordBatch>);

pub fn encode(tables: &[SnapshotTable]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    for (name, schema, batches) in tables {
        let mut stream = Vec::new();
        {
            let mut w = StreamWriter::try_new(&mut stream, schema)?;
            for b in batches {
                w.write(b)?;
            }
            w.finish()?;
        }
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(stream.len() as u64).to_le_bytes());
        out.extend_from_slice(&stream);
    }
    Ok(out)
}

pub fn decode(shard: u32, data: &[u8]) -> Result<Vec<SnapshotTable>> {
    let bad = |reason: &str| EngineError::BadSnapshot {
        shard,
        reason: reason.to_string(),
    };
    let rest = data
        .strip_prefix(MAGIC.as_slice())
        .ok_or_else(|| bad("missing SHXSNAP1 header"))?;
    let mut rest = rest;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (len, r) = take(rest, 4).ok_or_else(|| bad("truncated table name length"))?;
        let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
        let (name, r) = take(r, len).ok_or_else(|| bad("truncated table name"))?;
        let name = std::str::from_utf8(name)
            .map_err(|_| bad("table name is not UTF-8"))?
            .to_string();
        let (len, r) = take(r, 8).ok_or_else(|| bad("truncated stream length"))?;
        let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
        let (stream, r) = take(r, len).ok_or_else(|| bad("truncated table stream"))?;
        let (schema, batches) = ipc::decode_stream(stream)?;
        let schema = schema.ok_or_else(|| bad("table stream without schema"))?;
        out.push((name, schema, batches));
        rest = r;
    }
    Ok(out)
}

fn take(b: &[u8], n: usize) -> Option<(&[u8], &[u8])> {
    (b.len() >= n).then(|| b.split_at(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::{points_batch, FieldValue, PointRow};

    #[test]
    fn round_trip_and_truncation() {
        let b = points_batch("m", &[PointRow::new(1, 2).field("v", FieldValue::Int(3))]).unwrap();
        let bytes = encode(&[("m".into(), b.schema(), vec![b.clone()])]).unwrap();
        let t = decode(0, &bytes).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, "m");
        assert_eq!(t[0].2[0], b);
        assert!(decode(0, &bytes[..bytes.len() - 3]).is_err());
        assert!(decode(0, b"nope").is_err());
    }
}
