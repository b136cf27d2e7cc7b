//! Per-series limits and the other write formats: the cardinality limit,
//! field type conflicts, and msgpack, Prometheus remote_write and gRPC
//! writes reaching the nodes.

use crate::fake::*;
use arrow_array::Array;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cardinality_limit_rejects_new_series_but_keeps_known_ones() {
    let h = harness(1, 2, |o| o.max_series_per_db = 2).await;
    let resp = h
        .post(
            "/write?db=small",
            "cpu,host=a v=1\ncpu,host=b v=1\ncpu,host=c v=1\ncpu,host=a v=2\n",
        )
        .await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("line 3") && msg.contains("\"small\"") && msg.contains("2"),
        "{msg}"
    );
    assert_eq!(h.total_rows().await, 3);
    // Another database has its own budget.
    assert_eq!(
        h.post("/write?db=other", "cpu,host=c v=1\n").await.status(),
        204
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_type_conflicts_name_the_line() {
    let h = harness(1, 1, |_| {}).await;
    let resp = h.post("/write?db=d", "cpu v=1\ncpu v=2i\ncpu v=3\n").await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("line 2") && msg.contains("type conflict"),
        "{msg}"
    );
    assert_eq!(h.total_rows().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msgpack_prometheus_and_grpc_writes_reach_the_nodes() {
    let h = harness(1, 2, |_| {}).await;
    // msgpack: array of {measurement, tags, fields, timestamp}.
    #[derive(serde::Serialize)]
    struct P {
        measurement: &'static str,
        tags: std::collections::BTreeMap<&'static str, &'static str>,
        fields: std::collections::BTreeMap<&'static str, serde_json::Value>,
        timestamp: i64,
    }
    let pts = vec![P {
        measurement: "weather",
        tags: [("city", "oslo")].into(),
        fields: [
            ("temp", serde_json::json!(3.5)),
            ("n", serde_json::json!(4)),
            ("ok", serde_json::json!(true)),
            ("note", serde_json::json!("cold")),
        ]
        .into(),
        timestamp: 1_000,
    }];
    let body = rmp_serde::to_vec_named(&pts).unwrap();
    let resp = h.post("/api/v1/write/msgpack?db=d", body).await;
    assert_eq!(resp.status(), 204, "{}", resp.text().await.unwrap());
    let w = h.nodes[0].writes().await;
    let b = &decode(&w.last().unwrap().points_ipc)[0];
    let types: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert!(types.contains(&"n:Int64".to_string()), "{types:?}");
    assert!(types.contains(&"temp:Float64".to_string()), "{types:?}");
    assert!(types.contains(&"note:Utf8".to_string()), "{types:?}");

    // Prometheus remote_write.
    use shardhouse_common::prom_proto as pp;
    let req = pp::WriteRequest {
        timeseries: vec![pp::TimeSeries {
            labels: vec![
                pp::Label {
                    name: "__name__".into(),
                    value: "up".into(),
                },
                pp::Label {
                    name: "job".into(),
                    value: "node".into(),
                },
            ],
            samples: vec![
                pp::Sample {
                    value: 1.0,
                    timestamp: 1_700_000_000_000,
                },
                pp::Sample {
                    value: 0.0,
                    timestamp: 1_700_000_015_000,
                },
            ],
        }],
    };
    let raw = prost::Message::encode_to_vec(&req);
    let body = snap::raw::Encoder::new().compress_vec(&raw).unwrap();
    let resp = h.post("/api/v1/prom/write", body).await;
    assert_eq!(resp.status(), 204);
    let w = h.nodes[0].writes().await;
    // Every metric lands in the database's one `_samples` table; the
    // metric name is the series' measurement.
    let up = w
        .iter()
        .find(|w| w.measurement == "_samples")
        .expect("a _samples batch for metric up");
    assert_eq!(up.database, "prometheus");
    let series = &decode(&up.series_ipc)[0];
    let metric = series
        .column(1)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .unwrap();
    assert_eq!(metric.value(0), "up");
    let b = &decode(&up.points_ipc)[0];
    assert_eq!(b.num_rows(), 2);
    assert_eq!(b.schema().field(2).name(), "value");
    let tags = &decode(&up.series_ipc)[0];
    let key = tags
        .column(2)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .unwrap();
    assert_eq!(key.value(0), "up,job=node");

    // gRPC unary and streaming.
    use shardhouse_common::ingest_proto as ip;
    let mut client =
        ip::ingest_client::IngestClient::connect(format!("http://{}", h.router.grpc_addr))
            .await
            .unwrap();
    let point = |v: f64| ip::Point {
        measurement: "grpc_m".into(),
        tags: [("k".to_string(), "v".to_string())].into(),
        fields: vec![ip::Field {
            key: "f".into(),
            value: Some(ip::field::Value::FloatValue(v)),
        }],
        timestamp_ns: Some(5),
    };
    let r = client
        .write(ip::WriteRequest {
            database: "d".into(),
            points: vec![point(1.0), point(2.0)],
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().points_written, 2);
    let msgs = vec![
        ip::WriteRequest {
            database: "d".into(),
            points: vec![point(3.0)],
            ..Default::default()
        },
        ip::WriteRequest {
            database: "d".into(),
            points: vec![point(4.0), point(5.0)],
            ..Default::default()
        },
    ];
    let r = client.write_stream(tokio_stream::iter(msgs)).await.unwrap();
    assert_eq!(r.into_inner().points_written, 3);
    // A bad point is INVALID_ARGUMENT naming it; the good one is written.
    let mut bad = point(6.0);
    bad.measurement.clear();
    let err = client
        .write(ip::WriteRequest {
            database: "d".into(),
            points: vec![point(7.0), bad],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("point 1"), "{}", err.message());
}
