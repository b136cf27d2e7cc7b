//! Encoding points into request bodies, done before a run starts so the
//! client spends its time sending, not encoding.

use crate::dataset::Point;
use crate::{Error, Result};
use bytes::Bytes;
use prost::Message;
use shardhouse_common::{ingest_proto, prom_proto};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// InfluxDB line protocol over HTTP (`/write`).
    Line,
    /// msgpack array of point maps (`/api/v1/write/msgpack`).
    Msgpack,
    /// Prometheus remote_write, snappy protobuf (`/api/v1/prom/write`).
    Prom,
    /// gRPC `Ingest.Write`, one RPC per batch.
    GrpcUnary,
    /// gRPC `Ingest.WriteStream`, batches on a long-lived stream.
    GrpcStream,
}

impl FromStr for Protocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "line" | "lp" => Protocol::Line,
            "msgpack" => Protocol::Msgpack,
            "prom" | "remote-write" => Protocol::Prom,
            "grpc" | "grpc-unary" => Protocol::GrpcUnary,
            "grpc-stream" => Protocol::GrpcStream,
            other => {
                return Err(Error::InvalidArgument(format!(
                    "unknown protocol {other:?}; use line, msgpack, prom, grpc-unary or grpc-stream"
                )))
            }
        })
    }
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Line => "line",
            Protocol::Msgpack => "msgpack",
            Protocol::Prom => "prom",
            Protocol::GrpcUnary => "grpc-unary",
            Protocol::GrpcStream => "grpc-stream",
        }
    }

    pub fn is_grpc(self) -> bool {
        matches!(self, Protocol::GrpcUnary | Protocol::GrpcStream)
    }
}

/// A request ready to send: either an HTTP body or a gRPC message.
#[derive(Debug, Clone)]
pub enum Body {
    Http {
        path: String,
        content_type: &'static str,
        content_encoding: Option<&'static str>,
        body: Bytes,
    },
    Grpc(ingest_proto::WriteRequest),
}

#[derive(Debug, Clone)]
pub struct Prepared {
    pub body: Body,
    /// Points (rows) the request carries.
    pub points: u64,
}

/// Paths the encoders use; QuestDB and other InfluxDB-compatible servers only
/// need `line`.
#[derive(Debug, Clone)]
pub struct Paths {
    pub line: String,
    pub msgpack: String,
    pub prom: String,
    pub database: String,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            line: "/write?db=shardhouse".into(),
            msgpack: "/api/v1/write/msgpack?db=shardhouse".into(),
            prom: "/api/v1/prom/write?db=shardhouse".into(),
            database: "shardhouse".into(),
        }
    }
}

fn escape_into(out: &mut String, s: &str, specials: &[char]) {
    for c in s.chars() {
        if specials.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
}

/// Line protocol, one point per line, nanosecond timestamps.
pub fn line_protocol(points: &[Point]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(points.len() * 160);
    for p in points {
        escape_into(&mut out, p.measurement, &[',', ' ']);
        for (k, v) in &p.tags {
            out.push(',');
            escape_into(&mut out, k, &[',', '=', ' ']);
            out.push('=');
            escape_into(&mut out, v, &[',', '=', ' ']);
        }
        for (i, (k, v)) in p.fields.iter().enumerate() {
            out.push(if i == 0 { ' ' } else { ',' });
            escape_into(&mut out, k, &[',', '=', ' ']);
            // `{:?}` keeps a decimal point so the value parses as a float.
            let _ = write!(out, "={v:?}");
        }
        let _ = writeln!(out, " {}", p.timestamp_ns);
    }
    out
}

/// msgpack: an array of `{measurement, tags{}, fields{}, timestamp}` maps,
/// timestamp in nanoseconds.
pub fn msgpack(points: &[Point]) -> Vec<u8> {
    use rmp::encode as e;
    let mut out = Vec::with_capacity(points.len() * 160);
    // Writing into a Vec cannot fail, hence the ignored results.
    let _ = e::write_array_len(&mut out, points.len() as u32);
    for p in points {
        let _ = e::write_map_len(&mut out, 4);
        let _ = e::write_str(&mut out, "measurement");
        let _ = e::write_str(&mut out, p.measurement);
        let _ = e::write_str(&mut out, "tags");
        let _ = e::write_map_len(&mut out, p.tags.len() as u32);
        for (k, v) in &p.tags {
            let _ = e::write_str(&mut out, k);
            let _ = e::write_str(&mut out, v);
        }
        let _ = e::write_str(&mut out, "fields");
        let _ = e::write_map_len(&mut out, p.fields.len() as u32);
        for (k, v) in &p.fields {
            let _ = e::write_str(&mut out, k);
            let _ = e::write_f64(&mut out, *v);
        }
        let _ = e::write_str(&mut out, "timestamp");
        let _ = e::write_sint(&mut out, p.timestamp_ns);
    }
    out
}

/// Prometheus remote_write: one time series per (point, field), named
/// `<measurement>_<field>`, millisecond timestamps, snappy block format.
pub fn prom_remote_write(points: &[Point]) -> Vec<u8> {
    let mut timeseries =
        Vec::with_capacity(points.len() * points.first().map_or(1, |p| p.fields.len()));
    for p in points {
        for (f, v) in &p.fields {
            let mut labels = Vec::with_capacity(p.tags.len() + 1);
            labels.push(prom_proto::Label {
                name: "__name__".into(),
                value: format!("{}_{}", p.measurement, f),
            });
            for (k, val) in &p.tags {
                labels.push(prom_proto::Label {
                    name: (*k).into(),
                    value: val.clone(),
                });
            }
            timeseries.push(prom_proto::TimeSeries {
                labels,
                samples: vec![prom_proto::Sample {
                    value: *v,
                    timestamp: p.timestamp_ns / 1_000_000,
                }],
            });
        }
    }
    let raw = prom_proto::WriteRequest { timeseries }.encode_to_vec();
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .unwrap_or_default()
}

pub fn grpc_request(points: &[Point], database: &str) -> ingest_proto::WriteRequest {
    ingest_proto::WriteRequest {
        database: database.into(),
        points: points
            .iter()
            .map(|p| ingest_proto::Point {
                measurement: p.measurement.into(),
                tags: p
                    .tags
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), v.clone()))
                    .collect(),
                fields: p
                    .fields
                    .iter()
                    .map(|(k, v)| ingest_proto::Field {
                        key: (*k).into(),
                        value: Some(ingest_proto::field::Value::FloatValue(*v)),
                    })
                    .collect(),
                timestamp_ns: Some(p.timestamp_ns),
            })
            .collect(),
        retention_policy: String::new(),
    }
}

pub fn prepare(protocol: Protocol, points: &[Point], paths: &Paths) -> Prepared {
    let n = points.len() as u64;
    let body = match protocol {
        Protocol::Line => Body::Http {
            path: paths.line.clone(),
            content_type: "text/plain; charset=utf-8",
            content_encoding: None,
            body: Bytes::from(line_protocol(points)),
        },
        Protocol::Msgpack => Body::Http {
            path: paths.msgpack.clone(),
            content_type: "application/msgpack",
            content_encoding: None,
            body: Bytes::from(msgpack(points)),
        },
        Protocol::Prom => Body::Http {
            path: paths.prom.clone(),
            content_type: "application/x-protobuf",
            content_encoding: Some("snappy"),
            body: Bytes::from(prom_remote_write(points)),
        },
        Protocol::GrpcUnary | Protocol::GrpcStream => {
            Body::Grpc(grpc_request(points, &paths.database))
        }
    };
    Prepared { body, points: n }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{DatasetKind, Generator};

    fn pts() -> Vec<Point> {
        vec![Point {
            measurement: "cpu load",
            tags: vec![("host", "a,b".into()), ("k=", "v w".into())],
            fields: vec![("usage", 0.5), ("n", 3.0)],
            timestamp_ns: 1_700_000_000_000_000_001,
        }]
    }

    #[test]
    fn line_protocol_escapes_and_keeps_floats() {
        assert_eq!(
            line_protocol(&pts()),
            "cpu\\ load,host=a\\,b,k\\==v\\ w usage=0.5,n=3.0 1700000000000000001\n"
        );
    }

    #[test]
    fn line_protocol_parses_with_the_routers_parser_shape() {
        let p = Generator::new(DatasetKind::Series1m, 7, 0).batch(3);
        let text = line_protocol(&p);
        assert_eq!(text.lines().count(), 3);
        for line in text.lines() {
            // measurement+tags, fields, timestamp
            assert_eq!(line.split(' ').count(), 3, "{line}");
        }
    }

    #[test]
    fn msgpack_round_trips_structure() {
        let buf = msgpack(&pts());
        let mut rd = &buf[..];
        assert_eq!(rmp::decode::read_array_len(&mut rd).unwrap(), 1);
        assert_eq!(rmp::decode::read_map_len(&mut rd).unwrap(), 4);
        let mut key = [0u8; 32];
        assert_eq!(
            rmp::decode::read_str(&mut rd, &mut key).unwrap(),
            "measurement"
        );
    }

    #[test]
    fn prom_is_snappy_protobuf_with_one_series_per_field() {
        let body = prom_remote_write(&pts());
        let raw = snap::raw::Decoder::new().decompress_vec(&body).unwrap();
        let req = prom_proto::WriteRequest::decode(&raw[..]).unwrap();
        assert_eq!(req.timeseries.len(), 2);
        assert_eq!(req.timeseries[0].labels[0].value, "cpu load_usage");
        assert_eq!(req.timeseries[0].samples[0].timestamp, 1_700_000_000_000);
    }
}
