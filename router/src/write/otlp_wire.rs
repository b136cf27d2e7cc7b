//! OTLP/HTTP bodies: which encoding a request is in, decoding an
//! `ExportMetricsServiceRequest` from protobuf or OTLP/JSON, and the
//! answers OTLP clients read (`ExportMetricsServiceResponse`, and
//! `google.rpc.Status` for errors) in the request's own encoding.
//!
//! OTLP/JSON is read with `opentelemetry-proto`'s serde: lowerCamelCase
//! keys, 64-bit integers as strings or numbers, trace and span ids in hex,
//! unknown keys ignored, as the OTLP spec says. Where it falls short:
//! a metric's data that does not decode comes back from it as "no data"
//! (a flattened `Option`), so such a request is read again here and
//! answered 400 naming the metric; enum values given by name
//! (`"AGGREGATION_TEMPORALITY_CUMULATIVE"`, which the protobuf JSON
//! mapping allows) are then read as their numbers; `"NaN"`/`"Infinity"`
//! strings are read only in a summary's quantiles (elsewhere the metric
//! is refused, or the point, for `asDouble`).

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use prost::Message as _;

use super::otlp_names::OtlpError;

/// How a request's body (and so its answer) is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// The encoding named by a `Content-Type` (parameters such as `charset`
/// ignored); `Err` says what is accepted.
pub fn encoding_of(content_type: Option<&str>) -> Result<Encoding, OtlpError> {
    let media = content_type
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase());
    match media.as_deref() {
        Some("application/x-protobuf") | Some("application/protobuf") => Ok(Encoding::Protobuf),
        Some("application/json") => Ok(Encoding::Json),
        other => {
            Err(OtlpError::UnsupportedMediaType(format!(
            "Content-Type {} is not OTLP/HTTP; send `application/x-protobuf` or `application/json`",
            other.map_or("(none)".to_string(), |m| format!("{:?}", super::otlp_names::excerpt(m)))
        )))
        }
    }
}

/// Decodes a (decompressed) body; `Err` says what was wrong with it.
pub fn decode(body: &[u8], enc: Encoding) -> Result<ExportMetricsServiceRequest, OtlpError> {
    match enc {
        Encoding::Protobuf => ExportMetricsServiceRequest::decode(body).map_err(|e| {
            OtlpError::Undecodable(format!(
                "body is not a protobuf ExportMetricsServiceRequest: {e}"
            ))
        }),
        Encoding::Json => decode_json(body),
    }
}

fn decode_json(body: &[u8]) -> Result<ExportMetricsServiceRequest, OtlpError> {
    let bad = |e: serde_json::Error| {
        OtlpError::Undecodable(format!(
            "body is not an OTLP/JSON ExportMetricsServiceRequest: {e}"
        ))
    };
    let req: ExportMetricsServiceRequest = serde_json::from_slice(body).map_err(bad)?;
    if !req
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .any(|m| m.data.is_none())
    {
        return Ok(req);
    }
    // The crate's serde reads a metric's data as a flattened `Option`:
    // data that does not decode comes back as none, silently. Read again
    // with enum names as numbers, and say which metric did not decode.
    let mut value: serde_json::Value = serde_json::from_slice(body).map_err(bad)?;
    enum_names_to_numbers(&mut value);
    check_metric_data(&value)?;
    serde_json::from_value(value).map_err(bad)
}

/// Decodes every metric's data on its own, to name the one that does not.
fn check_metric_data(v: &serde_json::Value) -> Result<(), OtlpError> {
    use opentelemetry_proto::tonic::metrics::v1 as m;
    let list = |v: &'_ serde_json::Value, key: &str| -> Vec<serde_json::Value> {
        v.get(key)
            .and_then(|x| x.as_array())
            .cloned()
            .unwrap_or_default()
    };
    for rm in list(v, "resourceMetrics") {
        for sm in list(&rm, "scopeMetrics") {
            for metric in list(&sm, "metrics") {
                let name = metric.get("name").and_then(|n| n.as_str()).unwrap_or("");
                let Some((key, data)) = metric.as_object().and_then(|o| {
                    [
                        "gauge",
                        "sum",
                        "histogram",
                        "exponentialHistogram",
                        "summary",
                    ]
                    .into_iter()
                    .find_map(|k| o.get(k).map(|d| (k, d.clone())))
                }) else {
                    continue;
                };
                let res = match key {
                    "gauge" => serde_json::from_value::<m::Gauge>(data).map(drop),
                    "sum" => serde_json::from_value::<m::Sum>(data).map(drop),
                    "histogram" => serde_json::from_value::<m::Histogram>(data).map(drop),
                    "summary" => serde_json::from_value::<m::Summary>(data).map(drop),
                    _ => serde_json::from_value::<m::ExponentialHistogram>(data).map(drop),
                };
                res.map_err(|e| {
                    OtlpError::Undecodable(format!(
                        "metric {:?}: its `{key}` is not OTLP/JSON: {e}",
                        super::otlp_names::excerpt(name)
                    ))
                })?;
            }
        }
    }
    Ok(())
}

/// Rewrites `aggregationTemporality` values given by name into numbers
/// (the protobuf JSON mapping allows both); true when one was rewritten.
fn enum_names_to_numbers(v: &mut serde_json::Value) -> bool {
    use serde_json::Value as J;
    let mut changed = false;
    match v {
        J::Object(map) => {
            for (k, x) in map.iter_mut() {
                if k == "aggregationTemporality" {
                    if let Some(n) = x.as_str().and_then(AggregationTemporality::from_str_name) {
                        *x = J::from(n as i32);
                        changed = true;
                        continue;
                    }
                }
                changed |= enum_names_to_numbers(x);
            }
        }
        J::Array(items) => {
            for x in items {
                changed |= enum_names_to_numbers(x);
            }
        }
        _ => {}
    }
    changed
}

/// The success answer: `partial_success` set when points were refused or
/// `message` is a warning.
pub fn response_body(enc: Encoding, rejected: usize, message: &str) -> Vec<u8> {
    let partial = (rejected > 0 || !message.is_empty()).then(|| ExportMetricsPartialSuccess {
        rejected_data_points: rejected as i64,
        error_message: message.to_string(),
    });
    match enc {
        Encoding::Protobuf => ExportMetricsServiceResponse {
            partial_success: partial,
        }
        .encode_to_vec(),
        // By hand: the proto3 JSON mapping writes int64 as a string, the
        // crate's serde as a number.
        Encoding::Json => match partial {
            None => b"{}".to_vec(),
            Some(p) => serde_json::json!({
                "partialSuccess": {
                    "rejectedDataPoints": p.rejected_data_points.to_string(),
                    "errorMessage": p.error_message,
                }
            })
            .to_string()
            .into_bytes(),
        },
    }
}

/// `google.rpc.Status`, what OTLP/HTTP error answers carry (`details`
/// left out).
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// An error answer's body: `grpc_code` is the gRPC status code.
pub fn status_body(enc: Encoding, grpc_code: i32, message: &str) -> Vec<u8> {
    match enc {
        Encoding::Protobuf => RpcStatus {
            code: grpc_code,
            message: message.to_string(),
        }
        .encode_to_vec(),
        Encoding::Json => serde_json::json!({ "code": grpc_code, "message": message })
            .to_string()
            .into_bytes(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        let e = |c: &str| encoding_of(Some(c));
        assert_eq!(e("application/x-protobuf"), Ok(Encoding::Protobuf));
        assert_eq!(e("application/json; charset=utf-8"), Ok(Encoding::Json));
        assert_eq!(e("Application/JSON"), Ok(Encoding::Json));
        let refused = |c: Option<&str>| match encoding_of(c) {
            Err(OtlpError::UnsupportedMediaType(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(refused(Some("text/plain")).contains("\"text/plain\""));
        assert!(refused(None).contains("(none)"));
    }

    #[test]
    fn responses_in_both_encodings() {
        assert!(response_body(Encoding::Protobuf, 0, "").is_empty());
        assert_eq!(response_body(Encoding::Json, 0, ""), b"{}");
        let pb = response_body(Encoding::Protobuf, 3, "bad points");
        let back = ExportMetricsServiceResponse::decode(&pb[..]).unwrap();
        let p = back.partial_success.unwrap();
        assert_eq!(
            (p.rejected_data_points, p.error_message.as_str()),
            (3, "bad points")
        );
        let js: serde_json::Value =
            serde_json::from_slice(&response_body(Encoding::Json, 3, "bad")).unwrap();
        assert_eq!(js["partialSuccess"]["rejectedDataPoints"], "3");
        assert_eq!(js["partialSuccess"]["errorMessage"], "bad");
        let st = RpcStatus::decode(&status_body(Encoding::Protobuf, 3, "no")[..]).unwrap();
        assert_eq!((st.code, st.message.as_str()), (3, "no"));
        let js: serde_json::Value =
            serde_json::from_slice(&status_body(Encoding::Json, 16, "who")).unwrap();
        assert_eq!(
            (js["code"].as_i64(), js["message"].as_str()),
            (Some(16), Some("who"))
        );
    }

    #[test]
    fn undecodable_bodies_say_why() {
        let e = decode(b"\xff\xff\xff", Encoding::Protobuf)
            .unwrap_err()
            .to_string();
        assert!(e.contains("protobuf ExportMetricsServiceRequest"), "{e}");
        let e = decode(b"{\"resourceMetrics\": 5}", Encoding::Json)
            .unwrap_err()
            .to_string();
        assert!(e.contains("OTLP/JSON"), "{e}");
        let e = decode(b"not json", Encoding::Json).unwrap_err().to_string();
        assert!(e.contains("OTLP/JSON"), "{e}");
    }

    #[test]
    fn metric_data_that_does_not_decode_is_named() {
        let body = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
            {"name":"ok","gauge":{"dataPoints":[]}},
            {"name":"broken","histogram":{"dataPoints":[{"bucketCounts":"many"}]}}]}]}]}"#;
        let e = decode(body, Encoding::Json).unwrap_err().to_string();
        assert!(e.contains("\"broken\": its `histogram`"), "{e}");
        // No data at all is not an error here (the metric is dropped later).
        let body = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"x"}]}]}]}"#;
        assert!(
            decode(body, Encoding::Json).unwrap().resource_metrics[0].scope_metrics[0].metrics[0]
                .data
                .is_none()
        );
    }

    #[test]
    fn enum_names_are_read_as_numbers() {
        let body = br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"c",
            "sum":{"aggregationTemporality":"AGGREGATION_TEMPORALITY_CUMULATIVE","isMonotonic":true,
            "dataPoints":[{"timeUnixNano":"1000000","asInt":"7"}]}}]}]}]}"#;
        let req = decode(body, Encoding::Json).unwrap();
        let m = &req.resource_metrics[0].scope_metrics[0].metrics[0];
        let Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Sum(s)) = &m.data else {
            panic!("{m:?}")
        };
        assert_eq!(s.aggregation_temporality, 2);
    }
}
