//! The scripted fake node (its Write/WriteMany/Query gRPC answers chosen
//! per test by a [`Mode`]) and the harness that starts fake nodes and an
//! in-process router over them; shared by every test module here.

use arrow_array::{Array, RecordBatch};
use shardhouse_common::proto::node_server::{Node, NodeServer};
use shardhouse_common::proto::{
    write_response, Committed, NotLeader, Overloaded, QueryRequest, QueryResponse, Rejected,
    WriteManyRequest, WriteManyResponse, WriteRequest, WriteResponse,
};
use shardhouse_common::shard_map::{NodeInfo, ShardMap};
use shardhouse_common::status::Missing;
use shardhouse_router::cluster::Cluster;
use shardhouse_router::config::RouterOptions;
use shardhouse_router::RunningRouter;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, Notify};

#[derive(Clone, Default)]
pub(crate) enum Mode {
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

/// How the fake node fails every Query call, when told to.
#[derive(Clone, Copy)]
pub(crate) enum QueryFailure {
    /// Not ready to serve (no leader, shutting down): try another replica.
    Unavailable,
    /// The shard lacks what the statement reads (the node's NotFound with
    /// `shardhouse-missing`).
    Missing(Missing),
    /// The statement is refused (a chDB error of the statement's own).
    Invalid,
}

#[derive(Default)]
pub(crate) struct FakeState {
    pub(crate) query_failure: Option<QueryFailure>,
    pub(crate) mode: Mode,
    pub(crate) writes: Vec<WriteRequest>,
    /// Node.Write calls that committed (a coalesced one counts once).
    pub(crate) rpcs: usize,
    /// Shard writes per incoming call, in arrival order (1 for a Write).
    pub(crate) calls: Vec<usize>,
    /// Answer WriteMany with Unimplemented, like a node from before it.
    pub(crate) no_write_many: bool,
    /// WriteMany calls refused because of `no_write_many`.
    pub(crate) refused_many: usize,
}

#[derive(Clone, Default)]
pub(crate) struct FakeNode {
    pub(crate) state: Arc<Mutex<FakeState>>,
    /// Signalled when a write arrives (lets tests wait without sleeping).
    pub(crate) arrived: Arc<Notify>,
}

pub(crate) fn decode(ipc: &[u8]) -> Vec<RecordBatch> {
    arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(ipc.to_vec()), None)
        .expect("valid Arrow IPC stream")
        .map(|b| b.expect("valid batch"))
        .collect()
}

/// `b` with its `time` column (the first) labelled with zone `tz`.
pub(crate) fn with_zone_label(b: &RecordBatch, tz: &str) -> RecordBatch {
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
    pub(crate) async fn write_one(&self, req: WriteRequest) -> WriteResponse {
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
        match self.state.lock().await.query_failure {
            Some(QueryFailure::Unavailable) => {
                return Err(tonic::Status::unavailable("no leader for shard"))
            }
            Some(QueryFailure::Missing(m)) => return Err(m.status("Code: 60. no such table")),
            Some(QueryFailure::Invalid) => {
                return Err(tonic::Status::invalid_argument("Code: 62. Syntax error"))
            }
            None => {}
        }
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
        Ok(tonic::Response::new(QueryResponse {
            result_ipc: out,
            ..Default::default()
        }))
    }
}

impl FakeNode {
    pub(crate) async fn set_mode(&self, m: Mode) {
        self.state.lock().await.mode = m;
    }
    pub(crate) async fn rows(&self) -> usize {
        self.state
            .lock()
            .await
            .writes
            .iter()
            .flat_map(|w| decode(&w.points_ipc))
            .map(|b| b.num_rows())
            .sum()
    }
    pub(crate) async fn writes(&self) -> Vec<WriteRequest> {
        self.state.lock().await.writes.clone()
    }
}

pub(crate) async fn start_fake_node() -> (FakeNode, String) {
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

pub(crate) struct Harness {
    pub(crate) router: RunningRouter,
    pub(crate) cluster: Arc<Cluster>,
    pub(crate) nodes: Vec<FakeNode>,
    pub(crate) addrs: Vec<String>,
    pub(crate) client: reqwest::Client,
}

impl Harness {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.router.http_addr)
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .body(body)
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn total_rows(&self) -> usize {
        let mut n = 0;
        for node in &self.nodes {
            n += node.rows().await;
        }
        n
    }
}

/// `nodes` fake nodes, `shards` shards with rf 1; `tweak` edits options.
pub(crate) async fn harness(
    nodes: usize,
    shards: u32,
    tweak: impl FnOnce(&mut RouterOptions),
) -> Harness {
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

pub(crate) async fn json_body(resp: reqwest::Response) -> serde_json::Value {
    let text = resp.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}
