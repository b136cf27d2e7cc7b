//! The bodies every door accepts, added point by point to a
//! [`RequestBatch`] (line protocol is `RequestBatch::add_line_protocol`
//! itself): msgpack points, Prometheus remote_write samples and gRPC rows.
//! A bad point is rejected with its position; the others still go.

use super::batch::{RejectReason, RequestBatch};
use crate::error::{Error, Result};
use shardhouse_common::ingest_proto::{self, field};
use shardhouse_common::lineproto::{FieldValue, Precision};
use shardhouse_common::prom_proto;
use std::collections::BTreeMap;

/// One msgpack point. Shape documented in docs/api.md.
#[derive(serde::Deserialize)]
pub struct MsgPoint<'a> {
    measurement: &'a str,
    #[serde(default, borrow)]
    tags: BTreeMap<&'a str, &'a str>,
    #[serde(borrow)]
    fields: BTreeMap<&'a str, MsgValue<'a>>,
    #[serde(default)]
    timestamp: Option<i64>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum MsgValue<'a> {
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
}

impl<'a> MsgValue<'a> {
    fn field(&self) -> FieldValue<'a> {
        match *self {
            MsgValue::Bool(b) => FieldValue::Boolean(b),
            MsgValue::Int(i) => FieldValue::Integer(i),
            MsgValue::UInt(u) => FieldValue::Unsigned(u),
            MsgValue::Float(f) => FieldValue::Float(f),
            MsgValue::Str(s) => FieldValue::String(s),
        }
    }
}

/// The points of a `/api/v1/write/msgpack` body.
pub fn msgpack_points(body: &[u8]) -> Result<Vec<MsgPoint<'_>>> {
    rmp_serde::from_slice(body).map_err(|e| {
        Error::BadRequest(format!(
            "body is not a msgpack array of {{measurement, tags, fields, timestamp}} maps: {e}"
        ))
    })
}

/// Decodes a msgpack body as `/api/v1/write/msgpack` does and counts its
/// points (property tests and the fuzz target call this).
pub fn decode_msgpack(body: &[u8]) -> Result<usize> {
    msgpack_points(body).map(|p| p.len())
}

/// Adds msgpack points (timestamps in `precision`).
pub fn add_msgpack(b: &mut RequestBatch<'_>, points: &[MsgPoint<'_>], precision: Precision) {
    let mut tags = Vec::new();
    let mut fields = Vec::new();
    for (i, p) in points.iter().enumerate() {
        tags.clear();
        tags.extend(p.tags.iter().map(|(k, v)| (*k, *v)));
        fields.clear();
        fields.extend(p.fields.iter().map(|(k, v)| (k.as_bytes(), v.field())));
        let time = match p.timestamp.map(|t| precision.to_nanos(t)).transpose() {
            Ok(t) => t,
            Err(e) => {
                b.reject(i, RejectReason::BadPoint, e.to_string());
                continue;
            }
        };
        if let Err((reason, msg)) = b.add_point(p.measurement, &tags, fields.iter().copied(), time)
        {
            b.reject(i, reason, msg);
        }
    }
}

/// A remote_write body: snappy block format (Prometheus says
/// `Content-Encoding: snappy`) of a protobuf `WriteRequest`, at most
/// `limit` bytes once decompressed.
pub fn remote_write_request(compressed: &[u8], limit: usize) -> Result<prom_proto::WriteRequest> {
    let len = snap::raw::decompress_len(compressed)
        .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
    if len > limit {
        return Err(Error::BodyTooLarge { limit });
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(compressed)
        .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
    <prom_proto::WriteRequest as prost::Message>::decode(&raw[..])
        .map_err(|e| Error::BadRequest(format!("body is not a remote_write WriteRequest: {e}")))
}

/// Adds remote_write samples: every metric in one table per database
/// (docs/storage.md), NaN kept (Prometheus's stale marker).
pub fn add_remote_write(b: &mut RequestBatch<'_>, req: &prom_proto::WriteRequest) {
    prom_samples_batch(b);
    let mut tags = Vec::new();
    let mut i = 0usize;
    for ts in &req.timeseries {
        let name = ts.labels.iter().find(|l| l.name == "__name__");
        tags.clear();
        tags.extend(
            ts.labels
                .iter()
                .filter(|l| l.name != "__name__" && !l.value.is_empty())
                .map(|l| (l.name.as_str(), l.value.as_str())),
        );
        for s in &ts.samples {
            let res = match name {
                Some(name) => add_prom_sample(b, &name.value, &tags, s.value, s.timestamp),
                None => Err((
                    RejectReason::BadPoint,
                    "time series without a __name__ label".into(),
                )),
            };
            if let Err((reason, msg)) = res {
                b.reject(i, reason, msg);
            }
            i += 1;
        }
    }
}

/// Readies a batch for Prometheus samples (remote_write, OTLP): every
/// metric in one table per database (docs/storage.md), and NaN kept, as
/// it is how Prometheus marks a stale series.
pub fn prom_samples_batch(b: &mut RequestBatch<'_>) {
    b.keep_non_finite_floats();
    b.samples_table();
}

/// Adds one Prometheus sample (`time_ms` in milliseconds) as a point:
/// measurement = the metric name, tags = the labels (the caller drops
/// empty values first: Prometheus's "no label"), one Float64 field
/// `value`. The one path of remote_write and OTLP samples into a batch.
pub fn add_prom_sample(
    b: &mut RequestBatch<'_>,
    name: &str,
    labels: &[(&str, &str)],
    value: f64,
    time_ms: i64,
) -> Result<(), (RejectReason, String)> {
    let Some(time) = time_ms.checked_mul(1_000_000) else {
        return Err((
            RejectReason::BadPoint,
            format!("timestamp {time_ms} ms out of range"),
        ));
    };
    let field = [(&b"value"[..], FieldValue::Float(value))];
    b.add_point(name, labels, field.iter().copied(), Some(time))
}

/// Adds the protobuf rows of one gRPC `WriteRequest`.
pub fn add_grpc_points(b: &mut RequestBatch<'_>, req: &ingest_proto::WriteRequest) {
    let mut tags: Vec<(&str, &str)> = Vec::new();
    let mut fields: Vec<(&[u8], FieldValue<'_>)> = Vec::new();
    for (i, p) in req.points.iter().enumerate() {
        tags.clear();
        tags.extend(p.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        fields.clear();
        let mut missing = None;
        for f in &p.fields {
            let v = match &f.value {
                Some(field::Value::FloatValue(x)) => FieldValue::Float(*x),
                Some(field::Value::IntValue(x)) => FieldValue::Integer(*x),
                Some(field::Value::UintValue(x)) => FieldValue::Unsigned(*x),
                Some(field::Value::StringValue(x)) => FieldValue::String(x.as_str()),
                Some(field::Value::BoolValue(x)) => FieldValue::Boolean(*x),
                None => {
                    missing = Some(f.key.clone());
                    break;
                }
            };
            fields.push((f.key.as_bytes(), v));
        }
        if let Some(k) = missing {
            b.reject(
                i,
                RejectReason::BadPoint,
                format!(
                    "field {:?} has no value",
                    shardhouse_common::names::excerpt(k.as_bytes())
                ),
            );
            continue;
        }
        if let Err((reason, msg)) = b.add_point(
            &p.measurement,
            &tags,
            fields.iter().copied(),
            p.timestamp_ns,
        ) {
            b.reject(i, reason, msg);
        }
    }
}
