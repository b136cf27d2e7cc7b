//! HTTP/gRPC behaviour of an in-process router against in-process FAKE
//! node gRPC servers (the node's Write/Query API, scripted per test).

use arrow_array::{Array, RecordBatch, UInt64Array};
use shardhouse_common::proto::node_server::{Node, NodeServer};
use shardhouse_common::proto::{
    write_response, Committed, NotLeader, Overloaded, QueryRequest, QueryResponse, Rejected,
    WriteManyRequest, WriteManyResponse, WriteRequest, WriteResponse,
};
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_router::cluster::Cluster;
use shardhouse_router::config::RouterOptions;
use shardhouse_router::RunningRouter;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};

#[derive(Clone, Default)]
enum Mode {
    #[default]
    Commit,
    /// Answer NotLeader pointing at another node.
    NotLeader(u64, String),
    /// Hold every write until notified, then commit.
    Hold(Arc<Notify>),
    Overloaded,
    Rejected(String),
    /// Reject any write that carries a table of this measurement.
    RejectMeasurement(String),
}

#[derive(Default)]
struct FakeState {
    mode: Mode,
    writes: Vec<WriteRequest>,
    /// Node.Write calls that committed (a coalesced one counts once).
    rpcs: usize,
    /// Shard writes per incoming call, in arrival order (1 for a Write).
    calls: Vec<usize>,
    /// Answer WriteMany with Unimplemented, like a node from before it.
    no_write_many: bool,
    /// WriteMany calls refused because of `no_write_many`.
    refused_many: usize,
}

#[derive(Clone, Default)]
struct FakeNode {
    state: Arc<Mutex<FakeState>>,
    /// Signalled when a write arrives (lets tests wait without sleeping).
    arrived: Arc<Notify>,
}

fn decode(ipc: &[u8]) -> Vec<RecordBatch> {
    arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc.to_vec()), None)
        .expect("valid Arrow IPC stream")
        .map(|b| b.expect("valid batch"))
        .collect()
}

/// `b` with its `time` column (the first) labelled with zone `tz`.
fn with_zone_label(b: &RecordBatch, tz: &str) -> RecordBatch {
    use arrow_array::cast::AsArray;
    use arrow_array::types::TimestampNanosecondType;
    let time = b
        .column(0)
        .as_primitive::<TimestampNanosecondType>()
        .clone()
        .with_timezone(tz);
    let mut fields: Vec<arrow_schema::Field> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields[0] = fields[0].clone().with_data_type(time.data_type().clone());
    let mut columns = b.columns().to_vec();
    columns[0] = Arc::new(time);
    RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), columns).unwrap()
}

impl FakeNode {
    /// One shard write, answered as the scripted mode says.
    async fn write_one(&self, req: WriteRequest) -> WriteResponse {
        let mode = self.state.lock().await.mode.clone();
        self.arrived.notify_one();
        let result = match mode {
            Mode::Commit => None,
            Mode::Hold(n) => {
                n.notified().await;
                None
            }
            Mode::NotLeader(id, addr) => Some(write_response::Result::NotLeader(NotLeader {
                leader_hint: id,
                leader_addr: addr,
            })),
            Mode::Overloaded => Some(write_response::Result::Overloaded(Overloaded {
                retry_after_ms: 2500,
                reason: "apply queue full".into(),
            })),
            Mode::Rejected(r) => Some(write_response::Result::Rejected(Rejected { reason: r })),
            Mode::RejectMeasurement(m)
                if req.measurement == m || req.tables.iter().any(|t| t.measurement == m) =>
            {
                Some(write_response::Result::Rejected(Rejected {
                    reason: format!("field type conflict in measurement {m}"),
                }))
            }
            Mode::RejectMeasurement(_) => None,
        };
        let result = match result {
            Some(r) => r,
            None => {
                // A coalesced write is recorded as one write per table, the
                // shape the tests inspect.
                let mut st = self.state.lock().await;
                st.rpcs += 1;
                if req.tables.is_empty() {
                    st.writes.push(req);
                } else {
                    for t in &req.tables {
                        st.writes.push(WriteRequest {
                            measurement: t.measurement.clone(),
                            points_ipc: t.points_ipc.clone(),
                            series_ipc: t.series_ipc.clone(),
                            database: t.database.clone(),
                            tables: Vec::new(),
                            ..req.clone()
                        });
                    }
                }
                write_response::Result::Committed(Committed { index: 1, term: 1 })
            }
        };
        WriteResponse {
            result: Some(result),
        }
    }
}

#[tonic::async_trait]
impl Node for FakeNode {
    async fn write(
        &self,
        req: tonic::Request<WriteRequest>,
    ) -> Result<tonic::Response<WriteResponse>, tonic::Status> {
        self.state.lock().await.calls.push(1);
        Ok(tonic::Response::new(self.write_one(req.into_inner()).await))
    }

    async fn write_many(
        &self,
        req: tonic::Request<WriteManyRequest>,
    ) -> Result<tonic::Response<WriteManyResponse>, tonic::Status> {
        let writes = req.into_inner().writes;
        {
            let mut st = self.state.lock().await;
            if st.no_write_many {
                st.refused_many += 1;
                return Err(tonic::Status::unimplemented("WriteMany"));
            }
            st.calls.push(writes.len());
        }
        let results =
            futures::future::join_all(writes.into_iter().map(|w| self.write_one(w))).await;
        Ok(tonic::Response::new(WriteManyResponse { results }))
    }

    /// Answers `SELECT * FROM <m>` with every stored points batch of the
    /// shard and measurement (a stand-in for the node's chDB).
    async fn query(
        &self,
        req: tonic::Request<QueryRequest>,
    ) -> Result<tonic::Response<QueryResponse>, tonic::Status> {
        let req = req.into_inner();
        let shard = req.shard;
        let table = req
            .sql
            .split_whitespace()
            .skip_while(|w| !w.eq_ignore_ascii_case("from"))
            .nth(1)
            .unwrap_or_default()
            .trim_matches('`')
            .to_owned();
        let st = self.state.lock().await;
        // chDB labels DateTime64 with the machine's zone name: so does
        // this stand-in (issue 12: the router answered 500 on it).
        let batches: Vec<RecordBatch> = st
            .writes
            .iter()
            .filter(|w| w.shard == shard && w.measurement == table)
            .flat_map(|w| decode(&w.points_ipc))
            .map(|b| with_zone_label(&b, "Etc/UTC"))
            .collect();
        let mut out = Vec::new();
        if let Some(first) = batches.first() {
            let mut w =
                arrow_ipc::writer::StreamWriter::try_new(&mut out, &first.schema()).unwrap();
            for b in batches.iter().filter(|b| b.schema() == first.schema()) {
                w.write(b).unwrap();
            }
            w.finish().unwrap();
        }
        Ok(tonic::Response::new(QueryResponse { result_ipc: out }))
    }
}

impl FakeNode {
    async fn set_mode(&self, m: Mode) {
        self.state.lock().await.mode = m;
    }
    async fn rows(&self) -> usize {
        self.state
            .lock()
            .await
            .writes
            .iter()
            .flat_map(|w| decode(&w.points_ipc))
            .map(|b| b.num_rows())
            .sum()
    }
    async fn writes(&self) -> Vec<WriteRequest> {
        self.state.lock().await.writes.clone()
    }
}

async fn start_fake_node() -> (FakeNode, String) {
    let node = FakeNode::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let svc = NodeServer::new(node.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    (node, addr)
}

struct Harness {
    router: RunningRouter,
    cluster: Arc<Cluster>,
    nodes: Vec<FakeNode>,
    addrs: Vec<String>,
    client: reqwest::Client,
}

impl Harness {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.router.http_addr)
    }

    async fn post(&self, path: &str, body: impl Into<reqwest::Body>) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    async fn total_rows(&self) -> usize {
        let mut n = 0;
        for node in &self.nodes {
            n += node.rows().await;
        }
        n
    }
}

/// `nodes` fake nodes, `shards` shards with rf 1; `tweak` edits options.
async fn harness(nodes: usize, shards: u32, tweak: impl FnOnce(&mut RouterOptions)) -> Harness {
    let mut fakes = Vec::new();
    let mut addrs = Vec::new();
    let mut infos = Vec::new();
    for i in 0..nodes {
        let (n, addr) = start_fake_node().await;
        infos.push(NodeInfo {
            node_id: i as u64 + 1,
            grpc_addr: addr.clone(),
            http_addr: "127.0.0.1:1".into(),
            cores: 1,
        });
        fakes.push(n);
        addrs.push(addr);
    }
    let mut opts = RouterOptions {
        http_listen: "127.0.0.1:0".into(),
        grpc_listen: "127.0.0.1:0".into(),
        request_timeout_ms: 5_000,
        ..Default::default()
    };
    tweak(&mut opts);
    opts.validate().unwrap();
    let cluster = Arc::new(
        Cluster::new(
            "test",
            opts.max_shard_inflight_bytes,
            Duration::from_secs(1),
        )
        .with_write_coalescing(opts.max_shard_rpcs, opts.max_coalesce_bytes)
        .with_node_batching(opts.max_node_rpcs),
    );
    cluster.set_shard_map(ShardMap::initial(shards, 1, infos));
    let router = shardhouse_router::start(opts, cluster.clone())
        .await
        .unwrap();
    Harness {
        router,
        cluster,
        nodes: fakes,
        addrs,
        client: reqwest::Client::new(),
    }
}

async fn json_body(resp: reqwest::Response) -> serde_json::Value {
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_write_names_the_bad_line_and_writes_the_good_points() {
    let h = harness(2, 4, |_| {}).await;
    let body = "cpu,host=a usage=1.5 1000\n\
                cpu,host=b usage=oops 1000\n\
                # comment\n\
                cpu,host=c usage=2.5 2000\n\
                mem,host=a used=10i 3000\n";
    let resp = h.post("/write?db=telegraf", body).await;
    assert_eq!(resp.status(), 400);
    assert!(resp.headers().contains_key("x-influxdb-error"));
    let v = json_body(resp).await;
    assert_eq!(v["code"], "invalid");
    let msg = v["message"].as_str().unwrap();
    assert!(msg.contains("line 2"), "{msg}");
    assert!(msg.contains("usage") && msg.contains("oops"), "{msg}");
    assert!(msg.contains("1 of 4 points rejected"), "{msg}");
    assert_eq!(
        h.total_rows().await,
        3,
        "the three good points reached the nodes"
    );

    // Read-back through the router: every good point, merged across
    // shards (issue 14: one answer, no `shard` column); per_shard=true is
    // the plain fan-out, rows tagged with their shard.
    for (per_shard, tagged) in [("false", false), ("true", true)] {
        let resp = h
            .client
            .get(h.url("/api/v1/sql"))
            .query(&[
                ("q", "SELECT * FROM cpu"),
                ("db", "d"),
                ("per_shard", per_shard),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let rows = json_body(resp).await;
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 2, "the two good cpu points: {rows:?}");
        assert!(rows
            .iter()
            .all(|r| r.get("shard").is_some() == tagged && r.get("series_id").is_some()));
    }

    // CSV read-back has a header and one line per row.
    let resp = h
        .client
        .get(h.url("/api/v1/sql"))
        .query(&[("q", "SELECT * FROM cpu"), ("format", "csv"), ("db", "d")])
        .send()
        .await
        .unwrap();
    let csv = resp.text().await.unwrap();
    assert!(csv.lines().next().unwrap().contains("series_id"), "{csv}");
    assert_eq!(csv.lines().count(), 3, "{csv}");

    // Non-SELECT statements are refused.
    let resp = h
        .client
        .post(h.url("/api/v1/sql?db=d&q=DROP%20TABLE%20cpu"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_carry_the_contract_schema_and_series() {
    let h = harness(1, 1, |_| {}).await;
    let resp = h
        .post(
            "/api/v2/write?org=o&bucket=b&precision=s",
            "cpu,host=a,region=eu v=1,n=2i,ok=t,s=\"x\",u=3u 7\ncpu,region=eu,host=a v=2 8\n",
        )
        .await;
    assert_eq!(resp.status(), 204);
    let writes = h.nodes[0].writes().await;
    assert_eq!(writes.len(), 1, "one batch per (shard, measurement)");
    let w = &writes[0];
    assert_eq!(w.measurement, "cpu");
    assert_eq!(w.shard_map_epoch, 1);
    let b = &decode(&w.points_ipc)[0];
    let names: Vec<String> = b
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(names, ["time", "series_id", "v", "n", "ok", "s", "u"]);
    assert!(!b.schema().field(0).is_nullable() && b.schema().field(2).is_nullable());
    let ids = b.column(1).as_any().downcast_ref::<UInt64Array>().unwrap();
    let want = shardhouse_common::series::series_id("cpu", &[("host", "a"), ("region", "eu")]);
    assert_eq!(
        (ids.value(0), ids.value(1)),
        (want, want),
        "tag order does not matter"
    );
    assert_eq!(b.column(3).null_count(), 1, "missing field is null");
    let series = &decode(&w.series_ipc)[0];
    assert_eq!(series.num_rows(), 1);
    let tags = series
        .column(2)
        .as_any()
        .downcast_ref::<arrow_array::StringArray>()
        .unwrap();
    assert_eq!(tags.value(0), "cpu,host=a,region=eu");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_bodies_are_accepted_and_bad_gzip_is_400() {
    let h = harness(1, 2, |_| {}).await;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b"cpu,host=a v=1\ncpu,host=b v=2\n").unwrap();
    let gz = enc.finish().unwrap();
    let resp = h
        .client
        .post(h.url("/api/v2/write?bucket=b"))
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    assert_eq!(h.total_rows().await, 2);
    let resp = h
        .client
        .post(h.url("/api/v2/write?bucket=b"))
        .header("content-encoding", "gzip")
        .body("not gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_413_compressed_or_not() {
    let h = harness(1, 1, |o| o.max_body_bytes = 1000).await;
    let big = "cpu v=1\n".repeat(200);
    let resp = h.post("/write?db=d", big.clone()).await;
    assert_eq!(resp.status(), 413);
    // A small gzip body that inflates past the limit is refused too.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(big.as_bytes()).unwrap();
    let gz = enc.finish().unwrap();
    assert!(gz.len() < 1000);
    let resp = h
        .client
        .post(h.url("/write?db=d"))
        .header("content-encoding", "gzip")
        .body(gz)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(h.total_rows().await, 0);
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_is_401_without_or_with_a_wrong_token() {
    let h = harness(1, 1, |o| o.auth_tokens = vec!["s3cret".into()]).await;
    let line = "cpu v=1\n";
    assert_eq!(h.post("/api/v2/write?bucket=b", line).await.status(), 401);
    let send = |path: &str, auth: Option<&str>| {
        let mut r = h.client.post(h.url(path)).body(line);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        r.send()
    };
    assert_eq!(
        send("/api/v2/write?bucket=b", Some("Token wrong"))
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        send("/api/v2/write?bucket=b", Some("Token s3cret"))
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        send("/write?db=d&u=me&p=s3cret", None)
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        send("/write?db=d&u=me&p=nope", None)
            .await
            .unwrap()
            .status(),
        401
    );
    // Basic me:s3cret
    assert_eq!(
        send("/write?db=d", Some("Basic bWU6czNjcmV0"))
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(h.total_rows().await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_shard_answers_429_with_retry_after() {
    let h = harness(1, 1, |o| o.max_shard_inflight_bytes = 1).await;
    let hold = Arc::new(Notify::new());
    h.nodes[0].set_mode(Mode::Hold(hold.clone())).await;
    let first = {
        let c = h.client.clone();
        let url = h.url("/write?db=d");
        tokio::spawn(async move { c.post(url).body("cpu v=1\n").send().await.unwrap().status() })
    };
    // Wait until the first write is in flight at the node.
    h.nodes[0].arrived.notified().await;
    let resp = h.post("/write?db=d", "cpu v=2\n").await;
    assert_eq!(resp.status(), 429);
    let retry = resp
        .headers()
        .get("retry-after")
        .expect("Retry-After header");
    assert!(retry.to_str().unwrap().parse::<u64>().unwrap() >= 1);
    hold.notify_one();
    assert_eq!(first.await.unwrap(), 204);
    assert_eq!(h.total_rows().await, 1, "the refused write was not queued");
    let metrics = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("shardhouse_router_rejected_total{reason=\"overloaded\"}"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_leader_is_retried_at_the_hint_and_node_verdicts_map_to_status() {
    let h = harness(2, 1, |_| {}).await;
    // Shard 0 is placed on node 1 only (rf 1); node 1 points at node 2.
    h.nodes[0]
        .set_mode(Mode::NotLeader(2, h.addrs[1].clone()))
        .await;
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
    assert_eq!(h.nodes[1].rows().await, 1, "retried at the leader hint");
    h.nodes[1].set_mode(Mode::Overloaded).await;
    let resp = h.post("/write?db=d", "cpu v=1\n").await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    h.nodes[1]
        .set_mode(Mode::Rejected("field v is float, got integer".into()))
        .await;
    let resp = h.post("/write?db=d", "cpu v=1\n").await;
    assert_eq!(resp.status(), 400);
    let v = json_body(resp).await;
    assert!(
        v["message"].as_str().unwrap().contains("field v is float"),
        "{v}"
    );
}

/// Holds the first write of a one-shard cluster at the node, queues three
/// more requests behind it (one write slot), and returns them unfinished.
/// Polls `queued` until it reaches `want`; fails with `what` after 10 s.
async fn wait_for_queued(what: &str, want: usize, queued: impl Fn() -> usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while queued() < want {
        assert!(
            std::time::Instant::now() < deadline,
            "{what} ({} queued)",
            queued()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Puts node 0 in hold mode and sends a one-point write; returns once the
/// write is held there (with the notify that releases it).
async fn hold_one_write(
    h: &Arc<Harness>,
) -> (Arc<Notify>, tokio::task::JoinHandle<reqwest::Response>) {
    let hold = Arc::new(Notify::new());
    h.nodes[0].set_mode(Mode::Hold(hold.clone())).await;
    let arrived = h.nodes[0].arrived.notified();
    let first = {
        let h = h.clone();
        tokio::spawn(async move { h.post("/write?db=d", "cpu,host=a v=1 1\n").await })
    };
    arrived.await;
    (hold, first)
}

async fn queue_three_behind_a_held_write(
    h: &Arc<Harness>,
    bodies: [&'static str; 3],
) -> (Arc<Notify>, Vec<tokio::task::JoinHandle<reqwest::Response>>) {
    let (hold, first) = hold_one_write(h).await;
    let mut pending = vec![first];
    for body in bodies {
        let h = h.clone();
        pending.push(tokio::spawn(
            async move { h.post("/write?db=d", body).await },
        ));
    }
    wait_for_queued("requests never queued behind the held write", 3, || {
        h.cluster.queued_requests()
    })
    .await;
    (hold, pending)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_a_shard_share_one_node_write() {
    let h = Arc::new(harness(1, 1, |o| o.max_shard_rpcs = 1).await);
    let (hold, pending) = queue_three_behind_a_held_write(
        &h,
        [
            "cpu,host=b v=2 2\n",
            "mem,host=b used=3i 3\n",
            "cpu,host=c v=4 4\n",
        ],
    )
    .await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let st = h.nodes[0].state.lock().await;
    assert_eq!(
        st.rpcs, 2,
        "the held write, then the three queued ones together"
    );
    let last = st.writes.last().unwrap();
    assert_eq!(
        last.request_id.split(',').count(),
        3,
        "a coalesced write names its requests: {}",
        last.request_id
    );
    drop(st);
    assert_eq!(h.total_rows().await, 4, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_coalesced_write_fails_only_the_offending_request() {
    let h = Arc::new(harness(1, 1, |o| o.max_shard_rpcs = 1).await);
    let (hold, pending) = queue_three_behind_a_held_write(
        &h,
        [
            "cpu,host=b v=2 2\n",
            "bad,host=b v=3 3\n",
            "cpu,host=c v=4 4\n",
        ],
    )
    .await;
    h.nodes[0]
        .set_mode(Mode::RejectMeasurement("bad".into()))
        .await;
    hold.notify_one();
    let mut statuses = Vec::new();
    for p in pending {
        statuses.push(p.await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, vec![204, 204, 400, 204]);
    let writes = h.nodes[0].writes().await;
    assert!(writes.iter().all(|w| w.measurement != "bad"));
    assert_eq!(
        h.total_rows().await,
        3,
        "the good requests' points committed"
    );
}

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
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().points_written, 2);
    let msgs = vec![
        ip::WriteRequest {
            database: "d".into(),
            points: vec![point(3.0)],
        },
        ip::WriteRequest {
            database: "d".into(),
            points: vec![point(4.0), point(5.0)],
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
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("point 1"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_health_ready_and_metrics() {
    let h = harness(1, 1, |_| {}).await;
    let get = |p: &str| h.client.get(h.url(p)).send();
    assert_eq!(get("/ping").await.unwrap().status(), 204);
    // /health and /ready as InfluxDB answers them (issue 12: the v2
    // client's health() said "fail", ready() returned nothing).
    let resp = get("/health").await.unwrap();
    assert_eq!(resp.status(), 200);
    let v = json_body(resp).await;
    assert_eq!(v["name"], "shardhouse");
    assert_eq!(v["status"], "pass");
    assert_eq!(v["message"], "ready for queries and writes");
    assert_eq!(v["checks"], serde_json::json!([]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["commit"].is_string() && v["shard_map_epoch"] == 1, "{v}");
    let resp = get("/ready").await.unwrap();
    assert_eq!(resp.status(), 200);
    let v = json_body(resp).await;
    assert_eq!(v["status"], "ready");
    let started = v["started"].as_str().unwrap();
    assert!(started.ends_with('Z') && started.len() >= 20, "{v}");
    assert!(v["up"].as_str().unwrap().ends_with('s'), "{v}");
    assert_eq!(h.post("/write?db=d", "cpu v=1\n").await.status(), 204);
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    for name in [
        "shardhouse_router_requests_total",
        "shardhouse_router_points_total",
        "shardhouse_router_bytes_total",
        "shardhouse_router_parse_seconds",
        "shardhouse_router_series_hash_seconds",
        "shardhouse_router_batch_build_seconds",
        "shardhouse_router_forward_seconds",
        "shardhouse_router_write_seconds",
        "shardhouse_router_inflight_bytes",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(text.contains("shardhouse_router_requests_total{endpoint=\"v1\",status=\"204\"}"));
    // Missing db and bad precision are 400s.
    assert_eq!(h.post("/write", "cpu v=1\n").await.status(), 400);
    assert_eq!(
        h.post("/write?db=d&precision=x", "cpu v=1\n")
            .await
            .status(),
        400
    );
}

/// Holds a one-point write at the single fake node (one call in flight per
/// node), then sends a request whose points fall in all four shards and
/// waits until its four shard writes queue behind the held call.
async fn fan_out_behind_a_held_call(
    h: &Arc<Harness>,
) -> (Arc<Notify>, Vec<tokio::task::JoinHandle<reqwest::Response>>) {
    let (hold, first) = hold_one_write(h).await;
    let body: String = (0..40)
        .map(|i| format!("cpu,host=h{i} v={i} {i}\n"))
        .collect();
    let second = {
        let h = h.clone();
        tokio::spawn(async move { h.post("/write?db=d", body).await })
    };
    wait_for_queued("shard writes never queued behind the held call", 4, || {
        h.cluster.queued_node_writes()
    })
    .await;
    (hold, vec![first, second])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_writes_for_one_node_leave_as_one_call() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 1).await);
    let (hold, pending) = fan_out_behind_a_held_call(&h).await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let calls = h.nodes[0].state.lock().await.calls.clone();
    assert_eq!(
        calls,
        vec![1, 4],
        "the held write alone, then the second request's four shard writes in one WriteMany"
    );
    let shards: std::collections::BTreeSet<u32> =
        h.nodes[0].writes().await.iter().map(|w| w.shard).collect();
    assert_eq!(shards.len(), 4, "every shard got its own write: {shards:?}");
    assert_eq!(h.total_rows().await, 41, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_write_many_gets_single_writes() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 1).await);
    h.nodes[0].state.lock().await.no_write_many = true;
    let (hold, pending) = fan_out_behind_a_held_call(&h).await;
    h.nodes[0].set_mode(Mode::Commit).await;
    hold.notify_one();
    for p in pending {
        assert_eq!(p.await.unwrap().status(), 204);
    }
    let st = h.nodes[0].state.lock().await;
    assert_eq!(st.refused_many, 1, "WriteMany was tried once");
    assert_eq!(st.calls, vec![1, 1, 1, 1, 1], "then each shard write alone");
    drop(st);
    assert_eq!(h.total_rows().await, 41, "every point committed once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_batching_off_sends_one_write_per_shard() {
    let h = Arc::new(harness(1, 4, |o| o.max_node_rpcs = 0).await);
    let body: String = (0..40)
        .map(|i| format!("cpu,host=h{i} v={i} {i}\n"))
        .collect();
    assert_eq!(h.post("/write?db=d", body).await.status(), 204);
    let st = h.nodes[0].state.lock().await;
    assert_eq!(st.calls, vec![1, 1, 1, 1], "one Node.Write per shard");
    drop(st);
    assert_eq!(h.total_rows().await, 40);
}

// ------------------------------------------------------------ issue 12

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_reads_zone_labelled_times_and_checks_statements_on_tokens() {
    let h = harness(1, 2, |_| {}).await;
    let body = "cpu,host=a v=1 1700000000000000000\na;b,host=a v=2 1700000000500000000\n";
    assert_eq!(h.post("/write?db=d", body).await.status(), 204);
    let sql = |q: &'static str, csv: bool| {
        let mut params = vec![("q", q), ("db", "d")];
        if csv {
            params.push(("format", "csv"));
        }
        h.client.get(h.url("/api/v1/sql")).query(&params).send()
    };
    // The node labels times "Etc/UTC" (as chDB does): JSON and CSV are 200.
    let resp = sql("SELECT * FROM cpu FINAL", false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let rows = json_body(resp).await;
    assert_eq!(rows[0]["time"], "2023-11-14T22:13:20Z", "{rows}");
    let resp = sql("SELECT * FROM cpu", true).await.unwrap();
    assert_eq!(resp.status(), 200);
    let csv = resp.text().await.unwrap();
    assert!(csv.contains("2023-11-14T22:13:20Z"), "{csv}");
    // A measurement named `a;b` can be queried.
    let resp = sql("SELECT * FROM `a;b`", false).await.unwrap();
    assert_eq!(resp.status(), 200);
    let rows = json_body(resp).await;
    assert_eq!(rows[0]["time"], "2023-11-14T22:13:20.5Z", "{rows}");
    // Table functions and settings are refused, naming them and where.
    for (q, want) in [
        (
            "SELECT * FROM file('/etc/passwd', 'LineAsString')",
            "function \"file\" at line 1, column 15",
        ),
        ("SELECT 1 SETTINGS readonly=0", "SETTINGS"),
        ("SELECT 1; SELECT 2", "one statement per request"),
    ] {
        let resp = sql(q, false).await.unwrap();
        assert_eq!(resp.status(), 400, "{q}");
        let msg = json_body(resp).await["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(msg.contains(want), "{q}: {msg}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_with_a_reason_until_a_shard_map_is_known() {
    let opts = RouterOptions {
        http_listen: "127.0.0.1:0".into(),
        grpc_listen: "127.0.0.1:0".into(),
        ..Default::default()
    };
    let cluster = Arc::new(Cluster::new("test", 1 << 20, Duration::from_secs(1)));
    let router = shardhouse_router::start(opts, cluster.clone())
        .await
        .unwrap();
    let url = format!("http://{}/ready", router.http_addr);
    let resp = reqwest::get(&url).await.unwrap();
    assert_eq!(resp.status(), 503);
    let v = json_body(resp).await;
    assert_eq!(v["status"], "starting");
    assert!(v["message"].as_str().unwrap().contains("shard map"), "{v}");
    cluster.set_shard_map(ShardMap::initial(
        1,
        1,
        vec![NodeInfo {
            node_id: 1,
            grpc_addr: "127.0.0.1:1".into(),
            http_addr: "127.0.0.1:1".into(),
            cores: 1,
        }],
    ));
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
}

/// The InfluxDB v2 Python client's `health()` and `ready()` (issue 12),
/// when python3 can import `influxdb_client` (`pip install
/// influxdb-client`); skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn influxdb_v2_python_client_health_and_ready_pass() {
    let have = std::process::Command::new("python3")
        .args(["-c", "import influxdb_client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("skipped: python3 cannot import influxdb_client (pip install influxdb-client)");
        return;
    }
    let h = harness(1, 1, |_| {}).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/influxdb_v2_health.py"
    );
    let out = tokio::process::Command::new("python3")
        .arg(script)
        .arg(format!("http://{}", h.router.http_addr))
        .output()
        .await
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("OK"), "{text}");
}
