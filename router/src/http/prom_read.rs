//! Prometheus remote_read (`POST /api/v1/read`, also InfluxDB 1.x's
//! `/api/v1/prom/read`): a Prometheus configured with `remote_read` reads
//! back what it (or anyone) remote-wrote. The body is a snappy
//! block-compressed `ReadRequest`; each query's matchers select series of
//! the database's `_samples` (`db=`, default `prometheus`, as
//! remote_write) and the answer is what the client lists first of the
//! two response types: SAMPLES, a snappy block-compressed `ReadResponse`
//! of raw samples (what Prometheus before 2.55 asks for), or
//! STREAMED_XOR_CHUNKS, a stream of CRC-checked `ChunkedReadResponse`
//! frames of XOR chunks ([`super::prom_chunks`]; Prometheus 2.55 and later
//! list it first).

use super::{content_encoding, error_response, parse_params, prom_chunks, read_raw_body};
use crate::auth::{presented_token, Role};
use crate::error::Error;
use crate::metrics;
use crate::read::promql::ShardSamples;
use crate::state::Router;
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use prost::Message;
use shardhouse_common::prom_proto::{
    label_matcher, read_request, Label, LabelMatcher as WireMatcher, Query, QueryResult,
    ReadRequest, ReadResponse, Sample, TimeSeries,
};
use shardhouse_promql::{LabelMatcher, MatchKind, SampleSource, Selection, Series};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const ENDPOINT: &str = "prom_read";

/// A query's matchers as the PromQL engine applies them; a query without
/// any, or with a bad regex or type, is refused naming it.
pub(crate) fn matchers_of(i: usize, q: &Query) -> Result<Vec<LabelMatcher>, Error> {
    if q.matchers.is_empty() {
        return Err(Error::BadRequest(format!(
            "query {i} has no label matchers: name at least one, e.g. __name__=\"up\""
        )));
    }
    q.matchers
        .iter()
        .map(|m: &WireMatcher| {
            let kind = match label_matcher::Type::try_from(m.r#type) {
                Ok(label_matcher::Type::Eq) => MatchKind::Equal,
                Ok(label_matcher::Type::Neq) => MatchKind::NotEqual,
                Ok(label_matcher::Type::Re) => MatchKind::Regex,
                Ok(label_matcher::Type::Nre) => MatchKind::NotRegex,
                Err(_) => {
                    return Err(Error::BadRequest(format!(
                        "query {i}: matcher on {:?} has unknown type {}",
                        m.name, m.r#type
                    )))
                }
            };
            LabelMatcher::new(kind, &m.name, &m.value)
                .map_err(|e| Error::BadRequest(format!("query {i}: {e}")))
        })
        .collect()
}

/// The answer's type: the first the client lists that is served
/// (Prometheus's `NegotiateResponseType`); SAMPLES when it lists none.
pub(crate) fn response_type(req: &ReadRequest) -> Result<read_request::ResponseType, Error> {
    if req.accepted_response_types.is_empty() {
        return Ok(read_request::ResponseType::Samples);
    }
    req.accepted_response_types
        .iter()
        .find_map(|&t| read_request::ResponseType::try_from(t).ok())
        .ok_or_else(|| {
            Error::BadRequest(format!(
                "none of the accepted response types {:?} is served; accept SAMPLES (0) or \
                 STREAMED_XOR_CHUNKS (1)",
                req.accepted_response_types
            ))
        })
}

/// One query's answer: series sorted by their labels, samples by time.
pub(crate) fn query_result(mut series: Vec<Series>) -> QueryResult {
    series.sort_by(|a, b| a.labels.iter().cmp(b.labels.iter()));
    QueryResult {
        timeseries: series
            .into_iter()
            .map(|mut s| {
                s.samples.sort_by_key(|(t, _)| *t);
                TimeSeries {
                    labels: s
                        .labels
                        .iter()
                        .map(|(name, value)| Label {
                            name: name.to_string(),
                            value: value.to_string(),
                        })
                        .collect(),
                    samples: s
                        .samples
                        .into_iter()
                        .map(|(timestamp, value)| Sample { value, timestamp })
                        .collect(),
                }
            })
            .collect(),
    }
}

fn decode_request(compressed: &[u8], limit: usize) -> Result<ReadRequest, Error> {
    let len = snap::raw::decompress_len(compressed)
        .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
    if len > limit {
        return Err(Error::BodyTooLarge { limit });
    }
    let raw = snap::raw::Decoder::new()
        .decompress_vec(compressed)
        .map_err(|e| Error::BadRequest(format!("body is not snappy block format: {e}")))?;
    ReadRequest::decode(&raw[..])
        .map_err(|e| Error::BadRequest(format!("body is not a remote_read ReadRequest: {e}")))
}

pub(crate) async fn read_prom(
    State(r): State<Arc<Router>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = r.options.max_body_bytes;
    let prep = async {
        let params = parse_params(query.as_deref())?;
        let db = params
            .get("db")
            .cloned()
            .unwrap_or_else(|| "prometheus".into());
        shardhouse_common::names::validate_database(&db)
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        let token = presented_token(&headers, Some(&params));
        r.auth
            .authorize(token.as_deref(), Role::Read, &[db.as_str()])?;
        content_encoding(&headers, &["snappy"])?;
        let compressed = read_raw_body(&headers, body, limit).await?;
        let req = decode_request(&compressed, limit)?;
        let kind = response_type(&req)?;
        let rp = params.get("rp").filter(|r| !r.is_empty()).cloned();
        let queries = req
            .queries
            .iter()
            .enumerate()
            .map(|(i, q)| Ok((matchers_of(i, q)?, q.start_timestamp_ms, q.end_timestamp_ms)))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok::<_, Error>((db, rp, queries, kind))
    };
    let (db, rp, queries, kind) = match prep.await {
        Ok(x) => x,
        Err(e) => return error_response(ENDPOINT, &e),
    };
    let deadline = Instant::now() + Duration::from_millis(r.options.request_timeout_ms);
    let source = ShardSamples {
        router: &r,
        database: db.clone(),
        deadline,
    };
    let mut results = Vec::with_capacity(queries.len());
    for (matchers, start, end) in queries {
        // Samples remote_write stored, and (as InfluxDB 1.8 answers this
        // endpoint) measurements written as line protocol.
        let lines = crate::read::influx::prom_value_series(
            &r,
            &db,
            rp.as_deref(),
            &matchers,
            (start, end),
            deadline,
        );
        let selection = Selection::all(matchers.clone(), start, end);
        let samples = source.select(&selection);
        match futures::try_join!(async { samples.await.map_err(|e| e.to_string()) }, async {
            lines.await.map_err(|e| e.to_string())
        }) {
            Ok((mut series, lines)) => {
                series.extend(lines.into_iter().map(|(labels, samples)| Series {
                    labels: shardhouse_promql::Labels::from_pairs(labels),
                    samples,
                }));
                results.push(series)
            }
            Err(e) => {
                return error_response(
                    ENDPOINT,
                    &Error::Internal(format!("remote_read could not read the shards: {e}")),
                )
            }
        }
    }
    let answer = match kind {
        read_request::ResponseType::Samples => samples_answer(results),
        read_request::ResponseType::StreamedXorChunks => Ok(chunks_answer(results)),
    };
    match answer {
        Ok(resp) => {
            metrics::REQUESTS
                .with_label_values(&[ENDPOINT, "200"])
                .inc();
            resp
        }
        Err(e) => error_response(ENDPOINT, &e),
    }
}

/// SAMPLES: one snappy block-compressed `ReadResponse`.
fn samples_answer(results: Vec<Vec<Series>>) -> Result<Response, Error> {
    let results = results.into_iter().map(query_result).collect();
    let raw = ReadResponse { results }.encode_to_vec();
    let body = snap::raw::Encoder::new()
        .compress_vec(&raw)
        .map_err(|e| Error::Internal(format!("compressing the answer: {e}")))?;
    Ok((
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "application/x-protobuf"),
            (header::CONTENT_ENCODING, "snappy"),
        ],
        body,
    )
        .into_response())
}

/// STREAMED_XOR_CHUNKS: the frames of every query in order, not
/// compressed (as Prometheus answers them).
fn chunks_answer(results: Vec<Vec<Series>>) -> Response {
    let mut body = Vec::new();
    for (i, series) in results.into_iter().enumerate() {
        prom_chunks::query_frames(i, series, prom_chunks::MAX_BYTES_IN_FRAME, &mut body);
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, prom_chunks::CONTENT_TYPE)],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_promql::Labels;

    fn wire(t: label_matcher::Type, name: &str, value: &str) -> WireMatcher {
        WireMatcher {
            r#type: t as i32,
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn matchers_map_to_the_engines_and_bad_ones_are_named() {
        let q = Query {
            start_timestamp_ms: 0,
            end_timestamp_ms: 10,
            matchers: vec![
                wire(label_matcher::Type::Eq, "__name__", "up"),
                wire(label_matcher::Type::Nre, "job", "a|b"),
            ],
        };
        let ms = matchers_of(0, &q).unwrap();
        let up = Labels::from_pairs([("__name__", "up"), ("job", "c")]);
        let b = Labels::from_pairs([("__name__", "up"), ("job", "b")]);
        assert!(ms.iter().all(|m| m.matches_labels(&up)));
        assert!(!ms.iter().all(|m| m.matches_labels(&b)));

        let none = Query {
            matchers: vec![],
            ..q.clone()
        };
        assert!(matchers_of(3, &none)
            .unwrap_err()
            .to_string()
            .contains("query 3 has no label matchers"));
        let bad = Query {
            matchers: vec![wire(label_matcher::Type::Re, "job", "(")],
            ..q.clone()
        };
        assert!(matchers_of(1, &bad)
            .unwrap_err()
            .to_string()
            .contains("query 1"));
        let odd = Query {
            matchers: vec![WireMatcher {
                r#type: 9,
                name: "job".into(),
                value: "x".into(),
            }],
            ..q
        };
        assert!(matchers_of(0, &odd)
            .unwrap_err()
            .to_string()
            .contains("unknown type 9"));
    }

    #[test]
    fn the_first_served_response_type_is_chosen() {
        use read_request::ResponseType::{Samples, StreamedXorChunks};
        let with = |types: &[i32]| ReadRequest {
            accepted_response_types: types.to_vec(),
            ..ReadRequest::default()
        };
        assert_eq!(response_type(&with(&[])).unwrap(), Samples);
        let chunks_first = with(&[StreamedXorChunks as i32, Samples as i32]);
        assert_eq!(response_type(&chunks_first).unwrap(), StreamedXorChunks);
        assert_eq!(response_type(&with(&[Samples as i32, 1])).unwrap(), Samples);
        assert_eq!(response_type(&with(&[7, 1])).unwrap(), StreamedXorChunks);
        let e = response_type(&with(&[7])).unwrap_err().to_string();
        assert!(e.contains("[7]") && e.contains("SAMPLES"), "{e}");
    }

    #[test]
    fn answers_are_sorted_and_round_trip() {
        let s = |job: &str, samples: Vec<(i64, f64)>| Series {
            labels: Labels::from_pairs([("__name__", "up"), ("job", job)]),
            samples,
        };
        let r = query_result(vec![
            s("b", vec![(2, 1.0), (1, 0.0)]),
            s("a", vec![(5, f64::NAN)]),
        ]);
        assert_eq!(r.timeseries[0].labels[1].value, "a");
        assert_eq!(
            r.timeseries[1]
                .samples
                .iter()
                .map(|s| s.timestamp)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        let bytes = ReadResponse { results: vec![r] }.encode_to_vec();
        let back = ReadResponse::decode(&bytes[..]).unwrap();
        assert!(back.results[0].timeseries[0].samples[0].value.is_nan());
    }
}
