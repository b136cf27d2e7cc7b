use super::*;
use crate::write::otlp_wire::{decode, Encoding};
use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
use opentelemetry_proto::tonic::metrics::v1::{
    summary_data_point::ValueAtQuantile, ExponentialHistogram, ExponentialHistogramDataPoint,
    Gauge, Histogram, ResourceMetrics, ScopeMetrics, Sum, Summary,
};
use shardhouse_common::lineproto::Precision;

const T: u64 = 1_700_000_000_123_456_789;
const T_MS: i64 = 1_700_000_000_123;

fn s(v: &str) -> Option<AnyValue> {
    Some(AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    })
}

fn kv(k: &str, v: Option<AnyValue>) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: v,
        ..Default::default()
    }
}

fn request(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metric(name: &str, unit: &str, data: Data) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(data),
        ..Default::default()
    }
}

fn number(attrs: Vec<KeyValue>, v: Option<f64>) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attrs,
        time_unix_nano: T,
        value: v.map(number_data_point::Value::AsDouble),
        ..Default::default()
    }
}

fn sum(temporality: AggregationTemporality, monotonic: bool, pts: Vec<NumberDataPoint>) -> Data {
    Data::Sum(Sum {
        data_points: pts,
        aggregation_temporality: temporality as i32,
        is_monotonic: monotonic,
    })
}

/// `name{labels}` of a sample, labels sorted, the extra label merged in.
fn series(s: &Sample) -> String {
    let mut labels: Vec<(String, String)> = s
        .labels
        .iter()
        .filter(|(k, _)| s.extra.as_ref().is_none_or(|(e, _)| e != k))
        .cloned()
        .collect();
    labels.extend(s.extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    labels.sort();
    let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!("{}{{{}}}", s.name, inner.join(","))
}

fn samples(c: &Converted) -> Vec<(String, f64)> {
    c.samples.iter().map(|s| (series(s), s.value)).collect()
}

#[test]
fn gauges_and_counters_with_job_instance_and_target_info() {
    let req = request(
        vec![
            kv("service.name", s("checkout")),
            kv("service.namespace", s("shop")),
            kv("service.instance.id", s("pod-1")),
            kv("host.name", s("h1")),
        ],
        vec![
            metric(
                "http.server.requests",
                "{request}",
                sum(
                    AggregationTemporality::Cumulative,
                    true,
                    vec![number(vec![kv("http.method", s("GET"))], Some(12.0))],
                ),
            ),
            metric(
                "process.memory.usage",
                "By",
                Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        time_unix_nano: T,
                        value: Some(number_data_point::Value::AsInt(4096)),
                        ..Default::default()
                    }],
                }),
            ),
            metric(
                "queue.size",
                "1",
                sum(
                    AggregationTemporality::Cumulative,
                    false,
                    vec![number(vec![], Some(-3.0))],
                ),
            ),
        ],
    );
    let c = convert(&req);
    assert_eq!(c.points, 3);
    assert!(c.rejected.is_empty(), "{:?}", c.rejected);
    let id = r#"instance="pod-1",job="shop/checkout""#;
    assert_eq!(
        samples(&c),
        vec![
            (
                format!(r#"http_server_requests_total{{http_method="GET",{id}}}"#),
                12.0
            ),
            (format!("process_memory_usage_bytes{{{id}}}"), 4096.0),
            (format!("queue_size{{{id}}}"), -3.0),
            (format!(r#"target_info{{host_name="h1",{id}}}"#), 1.0),
        ]
    );
    assert!(c.samples.iter().all(|s| s.time_ms == T_MS));
    assert_eq!(c.samples[3].point, None);
}

#[test]
fn histograms_become_cumulative_buckets_sum_and_count() {
    let p = HistogramDataPoint {
        attributes: vec![kv("route", s("/a"))],
        time_unix_nano: T,
        count: 10,
        sum: Some(4.5),
        bucket_counts: vec![2, 3, 4, 1],
        explicit_bounds: vec![0.1, 1.0, 1e21],
        ..Default::default()
    };
    let no_sum = HistogramDataPoint {
        sum: None,
        bucket_counts: vec![],
        explicit_bounds: vec![],
        ..p.clone()
    };
    let req = request(
        vec![kv("service.name", s("api"))],
        vec![metric(
            "http.server.duration",
            "s",
            Data::Histogram(Histogram {
                data_points: vec![p, no_sum],
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            }),
        )],
    );
    let c = convert(&req);
    let (j, r) = (r#"job="api""#, r#"route="/a""#);
    let l = format!("{j},{r}");
    let n = "http_server_duration_seconds";
    assert_eq!(
        samples(&c),
        vec![
            (format!("{n}_sum{{{l}}}"), 4.5),
            (format!("{n}_count{{{l}}}"), 10.0),
            (format!(r#"{n}_bucket{{{j},le="0.1",{r}}}"#), 2.0),
            (format!(r#"{n}_bucket{{{j},le="1",{r}}}"#), 5.0),
            (
                format!(r#"{n}_bucket{{{j},le="1000000000000000000000",{r}}}"#),
                9.0
            ),
            (format!(r#"{n}_bucket{{{j},le="+Inf",{r}}}"#), 10.0),
            // No sum: no _sum; no buckets: only +Inf.
            (format!("{n}_count{{{l}}}"), 10.0),
            (format!(r#"{n}_bucket{{{j},le="+Inf",{r}}}"#), 10.0),
        ]
    );
    assert_eq!(c.samples[7].point, Some(1));
}

#[test]
fn summaries_become_quantiles_sum_and_count() {
    let p = SummaryDataPoint {
        time_unix_nano: T,
        count: 4,
        sum: 8.0,
        quantile_values: vec![
            ValueAtQuantile {
                quantile: 0.5,
                value: 1.5,
            },
            ValueAtQuantile {
                quantile: 0.99,
                value: 3.0,
            },
        ],
        ..Default::default()
    };
    let req = request(
        vec![],
        vec![metric(
            "rpc.latency",
            "ms",
            Data::Summary(Summary {
                data_points: vec![p],
            }),
        )],
    );
    let c = convert(&req);
    let n = "rpc_latency_milliseconds";
    assert_eq!(
        samples(&c),
        vec![
            (format!("{n}_sum{{}}"), 8.0),
            (format!("{n}_count{{}}"), 4.0),
            (format!(r#"{n}{{quantile="0.5"}}"#), 1.5),
            (format!(r#"{n}{{quantile="0.99"}}"#), 3.0),
        ]
    );
}

#[test]
fn delta_exponential_and_bad_points_are_refused_naming_the_metric() {
    let exp = Data::ExponentialHistogram(ExponentialHistogram {
        data_points: vec![ExponentialHistogramDataPoint {
            time_unix_nano: T,
            ..Default::default()
        }],
        aggregation_temporality: AggregationTemporality::Cumulative as i32,
    });
    let unset_time = NumberDataPoint {
        time_unix_nano: 0,
        ..number(vec![], Some(1.0))
    };
    let req = request(
        vec![],
        vec![
            metric(
                "delta.requests",
                "",
                sum(
                    AggregationTemporality::Delta,
                    true,
                    vec![number(vec![], Some(1.0)), number(vec![], Some(2.0))],
                ),
            ),
            metric("exp.latency", "s", exp),
            metric(
                "good.gauge",
                "",
                Data::Gauge(Gauge {
                    data_points: vec![
                        number(vec![], Some(7.0)),
                        number(vec![], None),
                        unset_time,
                        number(vec![kv("..", s("x"))], Some(1.0)),
                    ],
                }),
            ),
            metric(
                "nothing",
                "",
                Data::Gauge(Gauge {
                    data_points: vec![],
                }),
            ),
        ],
    );
    let c = convert(&req);
    assert_eq!(c.points, 7);
    assert_eq!(samples(&c), vec![("good_gauge{}".to_string(), 7.0)]);
    let points: Vec<Option<usize>> = c.rejected.iter().map(|r| r.point).collect();
    assert_eq!(
        points,
        vec![Some(0), Some(1), Some(2), Some(4), Some(5), Some(6)]
    );
    let msg = |i: usize| c.rejected[i].message.as_str();
    assert!(msg(0).contains("\"delta.requests\"") && msg(0).contains("delta temporality"));
    assert!(msg(2).contains("\"exp.latency\"") && msg(2).contains("exponential histograms"));
    assert!(msg(3).contains("\"good.gauge\" data point 4") && msg(3).contains("asDouble"));
    assert!(msg(4).contains("time_unix_nano is 0"), "{}", msg(4));
    assert!(msg(5).contains("only underscores"), "{}", msg(5));
    assert_eq!(c.warnings.len(), 1);
    assert!(c.warnings[0].contains("\"nothing\""));
}

#[test]
fn labels_collide_stale_points_and_name_attributes() {
    let stale = NumberDataPoint {
        flags: 1,
        ..number(
            vec![
                kv("a.b", s("1")),
                kv("a_b", s("2")),
                kv("le", s("x")),
                kv("__name__", s("evil")),
                kv("job", s("mine")),
                kv("empty", s("")),
            ],
            None,
        )
    };
    let req = request(
        vec![kv("service.name", s("svc"))],
        vec![metric(
            "g",
            "",
            Data::Gauge(Gauge {
                data_points: vec![stale],
            }),
        )],
    );
    let c = convert(&req);
    assert_eq!(c.samples.len(), 1);
    // Colliding names joined in key order; job from the resource wins;
    // __name__ and empty values dropped.
    assert_eq!(series(&c.samples[0]), r#"g{a_b="1;2",job="svc",le="x"}"#);
    assert_eq!(c.samples[0].value.to_bits(), STALE_NAN);
}

#[test]
fn attribute_values_as_prometheus_writes_them() {
    use any_value::Value as V;
    let v = |x: V| any_string(Some(&AnyValue { value: Some(x) }));
    assert_eq!(v(V::BoolValue(true)), "true");
    assert_eq!(v(V::IntValue(-42)), "-42");
    assert_eq!(v(V::DoubleValue(1.0)), "1");
    assert_eq!(v(V::DoubleValue(0.25)), "0.25");
    assert_eq!(v(V::DoubleValue(1.5e-7)), "1.5e-7");
    assert_eq!(v(V::DoubleValue(2e21)), "2e+21");
    assert_eq!(v(V::DoubleValue(f64::NAN)), "json: unsupported value: NaN");
    assert_eq!(v(V::BytesValue(b"hi".to_vec())), "aGk=");
    let arr = V::ArrayValue(ArrayValue {
        values: vec![
            AnyValue {
                value: Some(V::StringValue("a".into())),
            },
            AnyValue {
                value: Some(V::IntValue(2)),
            },
        ],
    });
    assert_eq!(v(arr), r#"["a",2]"#);
    let map = V::KvlistValue(KeyValueList {
        values: vec![
            kv("z", s("1")),
            kv(
                "a",
                Some(AnyValue {
                    value: Some(V::BoolValue(false)),
                }),
            ),
        ],
    });
    assert_eq!(v(map), r#"{"a":false,"z":"1"}"#);
    assert_eq!(any_string(None), "");
    assert_eq!(prom_float(0.005), "0.005");
    assert_eq!(prom_float(f64::INFINITY), "+Inf");
}

/// The OTLP/JSON example of opentelemetry-proto (`examples/metrics.json`),
/// in its shape: int64 as strings and as numbers, enum numbers, hex ids.
const EXAMPLE_JSON: &str = r#"{
  "resourceMetrics": [{
    "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "my.service"}}]},
    "scopeMetrics": [{
      "scope": {"name": "my.library", "version": "1.0.0",
                "attributes": [{"key": "my.scope.attribute", "value": {"stringValue": "x"}}]},
      "metrics": [
        {"name": "my.counter", "unit": "1", "description": "I am a Counter",
         "sum": {"aggregationTemporality": 2, "isMonotonic": true,
                 "dataPoints": [{"asDouble": 5, "startTimeUnixNano": "1544712660300000000",
                                 "timeUnixNano": "1544712660300000000",
                                 "attributes": [{"key": "my.counter.attr", "value": {"stringValue": "some value"}}],
                                 "exemplars": [{"timeUnixNano": "1544712660300000000", "asDouble": 1,
                                                "spanId": "eee19b7ec3c1b174", "traceId": "5b8efff798038103d269b633813fc60c"}]}]}},
        {"name": "my.gauge", "unit": "1", "description": "I am a Gauge",
         "gauge": {"dataPoints": [{"asInt": "10", "timeUnixNano": 1544712660300000000}]}},
        {"name": "my.histogram", "unit": "1", "description": "I am a Histogram",
         "histogram": {"aggregationTemporality": 2,
                       "dataPoints": [{"startTimeUnixNano": "1544712660300000000", "timeUnixNano": "1544712660300000000",
                                       "count": 2, "sum": 2, "bucketCounts": [1, "1"], "explicitBounds": [1],
                                       "min": 0, "max": 2, "unknownField": true}]}},
        {"name": "my.summary", "unit": "s",
         "summary": {"dataPoints": [{"timeUnixNano": "1544712660300000000", "count": "3", "sum": 6.5,
                                     "quantileValues": [{"quantile": 0.5, "value": 2}]}]}}
      ]
    }]
  }]
}"#;

#[test]
fn the_otlp_json_example_decodes_and_maps() {
    let req = decode(EXAMPLE_JSON.as_bytes(), Encoding::Json).unwrap();
    let c = convert(&req);
    assert!(c.rejected.is_empty() && c.warnings.is_empty(), "{c:?}");
    let j = r#"job="my.service""#;
    let got = samples(&c);
    let want = vec![
        (
            format!(r#"my_counter_total{{{j},my_counter_attr="some value"}}"#),
            5.0,
        ),
        (format!("my_gauge_ratio{{{j}}}"), 10.0),
        (format!("my_histogram_sum{{{j}}}"), 2.0),
        (format!("my_histogram_count{{{j}}}"), 2.0),
        (format!(r#"my_histogram_bucket{{{j},le="1"}}"#), 1.0),
        (format!(r#"my_histogram_bucket{{{j},le="+Inf"}}"#), 2.0),
        (format!("my_summary_seconds_sum{{{j}}}"), 6.5),
        (format!("my_summary_seconds_count{{{j}}}"), 3.0),
        (format!(r#"my_summary_seconds{{{j},quantile="0.5"}}"#), 2.0),
    ];
    assert_eq!(got, want);
    assert!(c.samples.iter().all(|s| s.time_ms == 1_544_712_660_300));
    // The same request as protobuf maps the same.
    let pb = prost::Message::encode_to_vec(&req);
    let again = convert(&decode(&pb, Encoding::Protobuf).unwrap());
    assert_eq!(samples(&again), want);
}

#[test]
fn samples_go_through_the_remote_write_path() {
    let req = request(
        vec![kv("service.name", s("svc"))],
        vec![metric(
            "g",
            "",
            Data::Gauge(Gauge {
                data_points: vec![
                    number(vec![kv("k", s("v"))], Some(1.0)),
                    // `time` is no tag key (docs/api.md): refused by the batch.
                    number(vec![kv("time", s("x"))], Some(2.0)),
                    number(vec![kv("k", s("w"))], Some(f64::NAN)),
                ],
            }),
        )],
    );
    let c = convert(&req);
    let mut b = RequestBatch::new(4, Precision::Millisecond, 0, None);
    let refused = add_samples(&mut b, &c.samples);
    assert_eq!(b.points(), 2, "NaN is kept as remote_write keeps it");
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].point, Some(1));
    assert!(refused[0].message.contains("\"g\""), "{:?}", refused[0]);
    let (batches, summary) = b.finish().unwrap();
    assert_eq!((summary.points, summary.rejected), (2, 1));
    assert!(!batches.is_empty());
}
