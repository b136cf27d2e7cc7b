//! Reading the Arrow IPC streams of committed entries cheaply.
//!
//! A router sends one small stream per shard, measurement and request (tens
//! of rows each), and every replica decodes every one of them. With
//! `arrow_ipc::reader::StreamReader` each stream paid for parsing its schema
//! message and for copying every column into fresh buffers; at RF=3 that was
//! the largest share of a node's CPU after the log itself. Here the schema of
//! a stream is parsed once per distinct schema message (all writes of one
//! table's field set carry the same bytes) and the columns are sliced out of
//! the entry's bytes without copying.

use std::collections::HashMap;
use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::reader::read_record_batch;
use arrow_ipc::{Message, MessageHeader};
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;
use parking_lot::RwLock;

use crate::error::{EngineError, Result};

/// Distinct schemas kept; a node sees one per measurement and field set, so
/// overflowing means something unusual (the cache then starts over).
const MAX_SCHEMAS: usize = 4096;

/// The end-of-stream marker and the continuation marker of the encapsulated
/// message format.
const CONTINUATION: u32 = 0xFFFF_FFFF;

/// Parsed schemas by the bytes of their schema message.
#[derive(Default)]
pub struct SchemaCache {
    schemas: RwLock<HashMap<Box<[u8]>, SchemaRef>>,
}

impl SchemaCache {
    pub fn new() -> SchemaCache {
        SchemaCache::default()
    }

    /// The schema of a stream (None for empty bytes), reading only its
    /// first message.
    pub fn schema(&self, stream: &[u8]) -> Result<Option<SchemaRef>> {
        let mut pos = 0;
        match next_message(stream, &mut pos)? {
            None => Ok(None),
            Some(m) => self.schema_of(&stream[m.meta], &m.message).map(Some),
        }
    }

    /// All batches of a stream (empty bytes read as no batches). The
    /// batches share `stream`'s memory where it is aligned for Arrow.
    pub fn decode(&self, stream: &Bytes) -> Result<(Option<SchemaRef>, Vec<RecordBatch>)> {
        let mut pos = 0;
        let Some(first) = next_message(stream, &mut pos)? else {
            return Ok((None, Vec::new()));
        };
        let schema = self.schema_of(&stream[first.meta], &first.message)?;
        let mut batches = Vec::new();
        while let Some(m) = next_message(stream, &mut pos)? {
            match m.message.header_type() {
                MessageHeader::RecordBatch => {
                    let header = m
                        .message
                        .header_as_record_batch()
                        .ok_or_else(|| bad("record batch message without a header".into()))?;
                    let body = Buffer::from(stream.slice(m.body));
                    batches.push(read_record_batch(
                        &body,
                        header,
                        schema.clone(),
                        &HashMap::new(),
                        None,
                        &m.message.version(),
                    )?);
                }
                MessageHeader::DictionaryBatch => {
                    return Err(bad(
                        "dictionary-encoded columns are not supported; send plain columns".into(),
                    ))
                }
                other => {
                    return Err(bad(format!(
                        "unexpected {other:?} message inside the stream"
                    )))
                }
            }
        }
        Ok((Some(schema), batches))
    }

    /// The schema in `message`, whose metadata bytes are `meta`.
    fn schema_of(&self, meta: &[u8], message: &Message<'_>) -> Result<SchemaRef> {
        if let Some(s) = self.schemas.read().get(meta) {
            return Ok(s.clone());
        }
        let fb = message
            .header_as_schema()
            .ok_or_else(|| bad("a stream must start with its schema".into()))?;
        let schema = SchemaRef::new(arrow_ipc::convert::try_fb_to_schema(fb)?);
        let mut map = self.schemas.write();
        if map.len() >= MAX_SCHEMAS {
            map.clear();
        }
        map.insert(meta.into(), schema.clone());
        Ok(schema)
    }
}

/// One encapsulated message: its parsed (and verified) metadata, and where
/// its metadata and body lie in the stream.
struct MessageSpan<'a> {
    message: Message<'a>,
    meta: Range<usize>,
    body: Range<usize>,
}

/// The next message at `*pos` (None at the end-of-stream marker or at the
/// end of the bytes), advancing `*pos` past it.
fn next_message<'a>(stream: &'a [u8], pos: &mut usize) -> Result<Option<MessageSpan<'a>>> {
    let word = |at: usize| -> Result<u32> {
        let b = stream
            .get(at..at + 4)
            .ok_or_else(|| bad(format!("truncated at byte {at}")))?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    };
    if *pos == stream.len() {
        return Ok(None);
    }
    let mut at = *pos;
    let mut len = word(at)?;
    at += 4;
    if len == CONTINUATION {
        len = word(at)?;
        at += 4;
    }
    if len == 0 {
        *pos = at;
        return Ok(None);
    }
    let meta = at..at + len as usize;
    let meta_bytes = stream
        .get(meta.clone())
        .ok_or_else(|| bad(format!("message metadata at byte {at} runs past the end")))?;
    let message = arrow_ipc::root_as_message(meta_bytes)
        .map_err(|e| bad(format!("message metadata at byte {at}: {e}")))?;
    let body_len = usize::try_from(message.bodyLength())
        .map_err(|_| bad(format!("negative body length at byte {at}")))?;
    let body = meta.end..meta.end + body_len;
    if body.end > stream.len() {
        return Err(bad(format!(
            "message body at byte {} ({body_len} bytes) runs past the end ({} bytes)",
            meta.end,
            stream.len()
        )));
    }
    *pos = body.end;
    Ok(Some(MessageSpan {
        message,
        meta,
        body,
    }))
}

fn bad(what: String) -> EngineError {
    EngineError::Ipc(ArrowError::IpcError(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipc::{decode_stream, encode_points, encode_series, FieldValue, PointRow};

    fn rows(n: i64) -> Vec<PointRow> {
        (0..n)
            .map(|i| {
                PointRow::new(i as u64 % 3, i)
                    .field("v", FieldValue::Float(i as f64))
                    .field("s", FieldValue::Str(format!("x{i}")))
            })
            .collect()
    }

    #[test]
    fn decodes_like_the_arrow_reader_and_parses_each_schema_once() {
        let cache = SchemaCache::new();
        for n in [1, 7, 1000] {
            let bytes = encode_points("m", &rows(n)).unwrap();
            let (want_schema, want) = decode_stream(&bytes).unwrap();
            let (schema, got) = cache.decode(&Bytes::from(bytes.clone())).unwrap();
            assert_eq!(schema, want_schema);
            assert_eq!(got, want);
            assert_eq!(cache.schema(&bytes).unwrap(), want_schema);
        }
        let series = encode_series(&[(1, "m", "m,a=b")]).unwrap();
        let (_, got) = cache.decode(&Bytes::from(series.clone())).unwrap();
        assert_eq!(got, decode_stream(&series).unwrap().1);
        // One points schema (same fields every time) and one series schema.
        assert_eq!(cache.schemas.read().len(), 2);
    }

    #[test]
    fn empty_bytes_are_no_batches() {
        let (schema, batches) = SchemaCache::new().decode(&Bytes::new()).unwrap();
        assert!(schema.is_none() && batches.is_empty());
    }

    #[test]
    fn damaged_streams_are_errors_not_panics() {
        let cache = SchemaCache::new();
        let bytes = encode_points("m", &rows(50)).unwrap();
        for cut in [3, 9, 40, bytes.len() / 2, bytes.len() - 9] {
            let r = cache.decode(&Bytes::copy_from_slice(&bytes[..cut]));
            if let Err(e) = r {
                assert!(e.to_string().contains("Arrow IPC"), "{e}");
            }
        }
        let mut flipped = bytes.clone();
        for i in (0..flipped.len()).step_by(7) {
            flipped[i] ^= 0x5a;
            let _ = cache.decode(&Bytes::from(flipped.clone()));
        }
        let err = cache
            .decode(&Bytes::from_static(b"not arrow at all"))
            .unwrap_err();
        assert!(err.to_string().contains("Arrow IPC"), "{err}");
    }
}
