//! Input the nodes could not store or that clients send wrong (issue 12):
//! unstorable names, oversized measurements, unknown content encodings,
//! bad percent escapes and database names, NaN in msgpack and remote_write,
//! and an out-of-range line protocol timestamp.

use crate::fake::*;
use arrow_array::Array;

/// The first write's measurement names that reached the nodes.
async fn measurements_written(h: &Harness) -> Vec<String> {
    let mut out = Vec::new();
    for n in &h.nodes {
        out.extend(n.writes().await.into_iter().map(|w| w.measurement));
    }
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstorable_names_are_400_naming_the_limit_and_the_valid_lines_are_written() {
    let h = harness(2, 4, |_| {}).await;
    // 200 `-` and 100 `é` are within 200 bytes but 600 once ClickHouse
    // escapes them for a file name: acknowledged, then never storable.
    let body = format!(
        "cpu,host=a v=1 1000\n{} v=1 1000\n{} v=2 1000\nmem,host=a v=3 1000\n",
        "-".repeat(200),
        "é".repeat(100)
    );
    let resp = h.post("/write?db=d", body).await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(msg.contains("line 2"), "{msg}");
    assert!(
        msg.contains("600 bytes once every byte outside A-Z a-z 0-9 _ counts 3"),
        "{msg}"
    );
    assert!(msg.contains("the limit is 160"), "{msg}");
    assert!(msg.contains("2 of 4 points rejected"), "{msg}");
    assert_eq!(h.total_rows().await, 2);
    assert_eq!(measurements_written(&h).await, ["cpu", "mem"]);

    // Other names and the series key, each naming its limit.
    for (line, want) in [
        (format!("m {}=1", "f".repeat(256)), "field key"),
        (format!("m,{}=v f=1", "t".repeat(256)), "tag key"),
        (
            format!("m,t={} f=1", "v".repeat(70_000)),
            "maximum key length",
        ),
        ("_series f=1".to_owned(), "reserved for the engine"),
        ("a/b f=1".to_owned(), "contains `/`"),
    ] {
        let resp = h.post("/write?db=d", format!("{line}\nok v=1\n")).await;
        assert_eq!(resp.status(), 400, "{want}");
        let msg = json_body(resp).await["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            msg.contains(want) && msg.contains("line 1"),
            "{want}: {msg}"
        );
        assert!(msg.len() < 600, "{} bytes: {msg}", msg.len());
    }
    assert!(measurements_written(&h).await.contains(&"ok".to_owned()));

    // msgpack and remote_write check the same rules, by point / sample.
    #[derive(serde::Serialize)]
    struct P {
        measurement: String,
        fields: std::collections::BTreeMap<&'static str, f64>,
    }
    let pts = vec![
        P {
            measurement: "weather".into(),
            fields: [("t", 1.0)].into(),
        },
        P {
            measurement: "-".repeat(200),
            fields: [("t", 2.0)].into(),
        },
    ];
    let resp = h
        .post(
            "/api/v1/write/msgpack?db=d",
            rmp_serde::to_vec_named(&pts).unwrap(),
        )
        .await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("point 1") && msg.contains("the limit is 160"),
        "{msg}"
    );
    assert!(measurements_written(&h)
        .await
        .contains(&"weather".to_owned()));

    use shardhouse_common::prom_proto as pp;
    let series = |name: String| pp::TimeSeries {
        labels: vec![pp::Label {
            name: "__name__".into(),
            value: name,
        }],
        samples: vec![pp::Sample {
            value: 1.0,
            timestamp: 1_700_000_000_000,
        }],
    };
    let req = pp::WriteRequest {
        timeseries: vec![series("é".repeat(100)), series("up".into())],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&req))
        .unwrap();
    let resp = h.post("/api/v1/prom/write", body).await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("sample 0") && msg.contains("the limit is 160"),
        "{msg}"
    );
    assert!(series_measurements_written(&h)
        .await
        .contains(&"up".to_owned()));
}

/// Measurements of the series the nodes received (for `_samples`, the
/// metric names).
async fn series_measurements_written(h: &Harness) -> Vec<String> {
    let mut out = Vec::new();
    for n in &h.nodes {
        for w in n.writes().await {
            for b in decode(&w.series_ipc) {
                let m = b
                    .column(1)
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .unwrap();
                out.extend(m.iter().flatten().map(str::to_owned));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_kib_measurement_gets_a_small_400() {
    let h = harness(1, 1, |_| {}).await;
    let body = format!("{} v=1\ncpu v=1\n", "m".repeat(100 * 1024));
    let resp = h.post("/write?db=d", body).await;
    assert_eq!(resp.status(), 400);
    let header = resp.headers()["x-influxdb-error"].clone();
    assert!(header.len() <= 1024, "header of {} bytes", header.len());
    let text = resp.text().await.unwrap();
    assert!(text.len() < 1024, "body of {} bytes: {text}", text.len());
    // UTF-8 (the `…` of the excerpt), as InfluxDB sends names.
    let header = String::from_utf8_lossy(header.as_bytes()).into_owned();
    for part in [&header[..], &text[..]] {
        assert!(part.contains("too long for a table name"), "{part}");
        assert!(part.contains("…(102400 bytes)"), "{part}");
    }
    assert_eq!(h.total_rows().await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_content_encodings_are_415_on_every_write_endpoint() {
    let h = harness(1, 1, |_| {}).await;
    for (path, encoding) in [
        ("/write?db=d", "br"),
        ("/api/v2/write?bucket=b", "br"),
        ("/api/v1/write/msgpack?db=d", "br"),
        ("/api/v1/prom/write", "br"),
        ("/api/v1/prom/write", "gzip"),
        ("/write?db=d", "deflate"),
        ("/api/v1/sql?db=d", "br"),
    ] {
        let resp = h
            .client
            .post(h.url(path))
            .header("content-encoding", encoding)
            .body("cpu v=1\n")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 415, "{path} {encoding}");
        let v = json_body(resp).await;
        assert_eq!(v["code"], "unsupported media type");
        let msg = v["message"].as_str().unwrap();
        assert!(msg.contains(&format!("{encoding:?}")), "{path}: {msg}");
    }
    assert_eq!(h.total_rows().await, 0);
    // identity is the absence of an encoding.
    let resp = h
        .client
        .post(h.url("/write?db=d"))
        .header("content-encoding", "identity")
        .body("cpu v=1\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_percent_escapes_and_database_names_are_400() {
    let h = harness(1, 1, |_| {}).await;
    for (path, want) in [
        (
            "/write?db=%ZZ",
            "query parameter \"db\" has an invalid percent-escape",
        ),
        ("/api/v2/write?bucket=a%2", "query parameter \"bucket\""),
        (
            "/api/v1/write/msgpack?db=%FF",
            "query parameter \"db\" is not UTF-8",
        ),
        ("/write?db=a%2Fb", "database name \"a/b\" contains `/`"),
        ("/write?db=a%0Ab", "control character"),
    ] {
        let resp = h.post(path, "cpu v=1\n").await;
        assert_eq!(resp.status(), 400, "{path}");
        let msg = json_body(resp).await["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(msg.contains(want), "{path}: {msg}");
    }
    let resp = h
        .post(&format!("/write?db={}", "d".repeat(65)), "cpu v=1\n")
        .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(h.total_rows().await, 0);
    assert_eq!(h.post("/write?db=my%20db", "cpu v=1\n").await.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msgpack_refuses_nan_like_line_protocol_but_remote_write_keeps_it() {
    let h = harness(1, 1, |_| {}).await;
    #[derive(serde::Serialize)]
    struct P {
        measurement: &'static str,
        fields: std::collections::BTreeMap<&'static str, f64>,
    }
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let pts = vec![
            P {
                measurement: "m",
                fields: [("v", 1.0)].into(),
            },
            P {
                measurement: "m",
                fields: [("v", bad)].into(),
            },
        ];
        let resp = h
            .post(
                "/api/v1/write/msgpack?db=d",
                rmp_serde::to_vec_named(&pts).unwrap(),
            )
            .await;
        assert_eq!(resp.status(), 400, "{bad}");
        let msg = json_body(resp).await["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            msg.contains("point 1") && msg.contains("NaN and infinities"),
            "{msg}"
        );
    }
    // Line protocol: the same refusal.
    let resp = h.post("/write?db=d", "m v=nan\n").await;
    assert_eq!(resp.status(), 400);
    assert_eq!(h.total_rows().await, 3, "the finite points were written");
    // remote_write: NaN is a staleness marker and is kept.
    use shardhouse_common::prom_proto as pp;
    let req = pp::WriteRequest {
        timeseries: vec![pp::TimeSeries {
            labels: vec![pp::Label {
                name: "__name__".into(),
                value: "up".into(),
            }],
            samples: vec![pp::Sample {
                value: f64::NAN,
                timestamp: 1_700_000_000_000,
            }],
        }],
    };
    let body = snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&req))
        .unwrap();
    assert_eq!(h.post("/api/v1/prom/write", body).await.status(), 204);
    assert_eq!(h.total_rows().await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn line_protocol_timestamp_int64_min_is_out_of_range_not_a_non_integer() {
    let h = harness(1, 1, |_| {}).await;
    let resp = h
        .post(
            "/write?db=d",
            "m v=1 -9223372036854775808\nm v=2 -9223372036854775806\n",
        )
        .await;
    assert_eq!(resp.status(), 400);
    let msg = json_body(resp).await["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("line 1") && msg.contains("out of range"),
        "{msg}"
    );
    assert!(!msg.contains("expected an integer"), "{msg}");
    assert_eq!(
        h.total_rows().await,
        1,
        "InfluxDB's minimum time is written"
    );
}
