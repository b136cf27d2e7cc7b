//! Process-level harness shared by the integration tests and `bench-wal`:
//! a real etcd on free loopback ports with its own data dir, real
//! `shardhouse-node` processes (killed on drop), and a small Write/Query
//! client that routes by leader hints.
#![allow(dead_code)]

use anyhow::{anyhow, bail, Context, Result};
use arrow_array::{Array, Int64Array, RecordBatch, TimestampNanosecondArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use shardhouse_common::proto::{
    admin_client::AdminClient, node_client::NodeClient, write_response::Result as WriteResult,
    QueryRequest, ShardStatesRequest, WriteRequest,
};
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The chDB engine the nodes load; tests fail (never skip) without it.
pub fn chdb_dir() -> Result<PathBuf> {
    let dir = std::env::var_os("SHARDHOUSE_CHDB_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/chdb")));
    if !dir.join("chdb/_chdb.abi3.so").exists() {
        bail!(
            "chDB engine not found at {} (chdb/_chdb.abi3.so): run `make deps` or set SHARDHOUSE_CHDB_DIR",
            dir.display()
        );
    }
    Ok(dir)
}

/// A port that was free a moment ago (etcd cannot report port 0 back).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

pub struct Etcd {
    child: Child,
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    pub fn start() -> Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))?;
        let child = Command::new("etcd")
            .arg("--name")
            .arg("test")
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--listen-client-urls")
            .arg(&endpoint)
            .arg("--advertise-client-urls")
            .arg(&endpoint)
            .arg("--listen-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-advertise-peer-urls")
            .arg(format!("http://127.0.0.1:{peer}"))
            .arg("--initial-cluster")
            .arg(format!("test=http://127.0.0.1:{peer}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("etcd is not installed (apt-get install etcd-server, or `make deps`)")?;
        let etcd = Etcd {
            child,
            endpoint,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                return Ok(etcd);
            }
            if Instant::now() > deadline {
                bail!("etcd did not listen on {} within 20s", etcd.endpoint);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn node_binary() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_shardhouse-node") {
        return PathBuf::from(p);
    }
    // bench-wal sits next to shardhouse-node in the target directory.
    std::env::current_exe()
        .expect("current exe")
        .with_file_name("shardhouse-node")
}

/// One node process. Restarts reuse its data dir and ports.
pub struct NodeProc {
    pub id: u64,
    child: Option<Child>,
    pub grpc: String,
    pub http: String,
    args: Vec<String>,
    pub data_dir: PathBuf,
    pub stopped: bool,
}

impl NodeProc {
    pub fn spawn(id: u64, data_dir: &Path, etcd: &str, extra: &[String]) -> Result<NodeProc> {
        let mut args = vec![
            "--node-id".into(),
            id.to_string(),
            "--data-dir".into(),
            data_dir.display().to_string(),
            "--etcd-endpoints".into(),
            etcd.into(),
            "--cluster".into(),
            "test".into(),
            "--chdb-dir".into(),
            chdb_dir()?.display().to_string(),
            "--pool-size".into(),
            "1".into(),
        ];
        args.extend(extra.iter().cloned());
        let mut n = NodeProc {
            id,
            child: None,
            grpc: String::new(),
            http: String::new(),
            args,
            data_dir: data_dir.to_path_buf(),
            stopped: false,
        };
        n.start(&[
            "--grpc-listen".into(),
            "127.0.0.1:0".into(),
            "--http-listen".into(),
            "127.0.0.1:0".into(),
        ])?;
        Ok(n)
    }

    fn start(&mut self, listen: &[String]) -> Result<()> {
        std::fs::create_dir_all(&self.data_dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.data_dir.join("node.log"))?;
        let mut child = Command::new(node_binary())
            .args(&self.args)
            .args(listen)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("spawn shardhouse-node")?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("READY ") {
                    let _ = tx.send(line);
                }
            }
        });
        self.child = Some(child);
        let line = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| {
            let log = std::fs::read_to_string(self.data_dir.join("node.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            anyhow!(
                "node {} exited or printed no READY line within 60s; its log ends:\n{}",
                self.id,
                tail.join("\n")
            )
        })?;
        let field = |k: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("READY line without {k}: {line}"))
        };
        self.grpc = field("grpc=")?;
        self.http = field("http=")?;
        self.stopped = false;
        Ok(())
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        let mut c = self
            .child
            .take()
            .ok_or_else(|| anyhow!("node not running"))?;
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        Ok(c.wait()?)
    }

    /// Restarts on the same data dir and ports.
    pub fn restart(&mut self) -> Result<()> {
        self.kill9();
        let listen = [
            "--grpc-listen".into(),
            self.grpc.clone(),
            "--http-listen".into(),
            self.http.clone(),
        ];
        self.start(&listen)
    }

    pub fn sigstop(&mut self) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, libc::SIGSTOP) };
            self.stopped = true;
        }
    }

    pub fn sigcont(&mut self) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
            self.stopped = false;
        }
    }

    pub fn running(&self) -> bool {
        self.child.is_some() && !self.stopped
    }

    /// Restarts with some flags replaced (or added).
    pub fn restart_with(&mut self, flags: &[(&str, &str)]) -> Result<()> {
        self.kill9();
        for (flag, value) in flags {
            match self.args.iter().position(|a| a == flag) {
                Some(i) => self.args[i + 1] = (*value).to_owned(),
                None => {
                    self.args.push((*flag).to_owned());
                    self.args.push((*value).to_owned());
                }
            }
        }
        let listen = [
            "--grpc-listen".into(),
            self.grpc.clone(),
            "--http-listen".into(),
            self.http.clone(),
        ];
        self.start(&listen)
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
        }
        self.kill9();
    }
}

pub struct Cluster {
    pub nodes: Vec<NodeProc>,
    pub shards: u32,
    pub etcd: Etcd,
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// `n` nodes, all started with `--init-cluster` (the create-if-absent
    /// transaction leaves one map).
    pub fn start(n: u64, shards: u32, rf: u32, extra: &[String]) -> Result<Cluster> {
        chdb_dir()?;
        let etcd = Etcd::start()?;
        let dir = tempfile::Builder::new()
            .prefix("shardhouse-node-test")
            .tempdir()?;
        let mut args = extra.to_vec();
        args.push("--init-cluster".into());
        args.push(format!("shards={shards},rf={rf},nodes={n}"));
        // Start them in parallel: each loads chDB, which takes a moment.
        let handles: Vec<_> = (1..=n)
            .map(|id| {
                let (d, e, a) = (
                    dir.path().join(format!("node-{id}")),
                    etcd.endpoint.clone(),
                    args.clone(),
                );
                std::thread::spawn(move || NodeProc::spawn(id, &d, &e, &a))
            })
            .collect();
        let mut nodes = Vec::new();
        for h in handles {
            nodes.push(h.join().map_err(|_| anyhow!("spawn thread panicked"))??);
        }
        Ok(Cluster {
            nodes,
            shards,
            etcd,
            dir,
        })
    }

    pub fn node(&mut self, id: u64) -> &mut NodeProc {
        self.nodes.iter_mut().find(|n| n.id == id).expect("node id")
    }

    pub fn live_addrs(&self) -> Vec<(u64, String)> {
        self.nodes
            .iter()
            .filter(|n| n.running())
            .map(|n| (n.id, n.grpc.clone()))
            .collect()
    }

    /// shard -> leader node id, as reported by the leaders themselves.
    pub async fn leaders(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (id, addr) in self.live_addrs() {
            let Ok(Ok(mut c)) = tokio::time::timeout(
                Duration::from_secs(2),
                AdminClient::connect(format!("http://{addr}")),
            )
            .await
            else {
                continue;
            };
            let Ok(Ok(r)) = tokio::time::timeout(
                Duration::from_secs(2),
                c.shard_states(ShardStatesRequest {}),
            )
            .await
            else {
                continue;
            };
            for s in r.into_inner().shards {
                if s.role == "leader" {
                    out.insert(s.shard, id);
                }
            }
        }
        out
    }

    /// Waits until every shard has a live leader.
    pub async fn wait_leaders(&self, timeout: Duration) -> Result<BTreeMap<u32, u64>> {
        let deadline = Instant::now() + timeout;
        loop {
            let l = self.leaders().await;
            if l.len() == self.shards as usize {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!(
                    "only {} of {} shards have a leader after {timeout:?}: {l:?}",
                    l.len(),
                    self.shards
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

pub fn points_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        ),
        Field::new("series_id", DataType::UInt64, false),
        Field::new("v", DataType::Int64, true),
    ]))
}

/// One batch where each point is unique: time = value, series = value % 8.
pub fn points_ipc(values: &[i64]) -> Vec<u8> {
    let schema = points_schema();
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(TimestampNanosecondArray::from(values.to_vec())),
            Arc::new(UInt64Array::from_iter_values(
                values.iter().map(|v| (*v as u64) % 8),
            )),
            Arc::new(Int64Array::from(values.to_vec())),
        ],
    )
    .expect("batch");
    ipc_bytes(&schema, &[batch])
}

pub fn ipc_bytes(schema: &Schema, batches: &[RecordBatch]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema).expect("writer");
    for b in batches {
        w.write(b).expect("write");
    }
    w.finish().expect("finish");
    drop(w);
    out
}

/// Routes writes to shard leaders, following NotLeader hints.
#[derive(Default)]
pub struct Router {
    channels: HashMap<String, NodeClient<Channel>>,
    leader: HashMap<u32, String>,
    pub addrs: Vec<String>,
    rr: usize,
}

pub enum Outcome {
    Acked,
    /// May or may not be committed; never retried with the same points so
    /// a duplicate can only come from the node, which the checks catch.
    Failed(String),
}

impl Router {
    pub fn new(addrs: Vec<String>) -> Router {
        Router {
            addrs,
            ..Router::default()
        }
    }

    async fn client(&mut self, addr: &str) -> Result<NodeClient<Channel>> {
        if let Some(c) = self.channels.get(addr) {
            return Ok(c.clone());
        }
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(1))
            .timeout(Duration::from_secs(10))
            .connect()
            .await?;
        let c = NodeClient::new(ch)
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20);
        self.channels.insert(addr.to_owned(), c.clone());
        Ok(c)
    }

    fn next_addr(&mut self, shard: u32) -> String {
        if let Some(a) = self.leader.get(&shard) {
            return a.clone();
        }
        self.rr += 1;
        self.addrs[self.rr % self.addrs.len()].clone()
    }

    /// Sends one batch; NotLeader and Overloaded answers (nothing proposed)
    /// are retried on the hinted leader until `deadline`.
    pub async fn write(
        &mut self,
        shard: u32,
        measurement: &str,
        points_ipc: Vec<u8>,
        deadline: Duration,
    ) -> Outcome {
        let end = Instant::now() + deadline;
        let mut last = String::from("deadline");
        while Instant::now() < end {
            let addr = self.next_addr(shard);
            let mut client = match self.client(&addr).await {
                Ok(c) => c,
                Err(e) => {
                    self.leader.remove(&shard);
                    last = format!("connect {addr}: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let req = WriteRequest {
                shard,
                request_id: String::new(),
                measurement: measurement.into(),
                points_ipc: points_ipc.clone().into(),
                series_ipc: Default::default(),
                shard_map_epoch: 0,
                tables: Vec::new(),
                database: TEST_DATABASE.into(),
            };
            match client.write(req).await.map(|r| r.into_inner().result) {
                Ok(Some(WriteResult::Committed(_))) => {
                    self.leader.insert(shard, addr);
                    return Outcome::Acked;
                }
                Ok(Some(WriteResult::NotLeader(nl))) => {
                    if nl.leader_addr.is_empty() {
                        self.leader.remove(&shard);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    } else {
                        self.leader.insert(shard, nl.leader_addr);
                    }
                    last = "not leader".into();
                }
                Ok(Some(WriteResult::Overloaded(o))) => {
                    tokio::time::sleep(Duration::from_millis(o.retry_after_ms.into())).await;
                    last = "overloaded".into();
                }
                Ok(Some(WriteResult::Rejected(r))) => {
                    return Outcome::Failed(format!("rejected: {}", r.reason))
                }
                Ok(Some(WriteResult::Unavailable(u))) => {
                    self.leader.remove(&shard);
                    return Outcome::Failed(format!("unavailable: {}", u.reason));
                }
                Ok(None) => return Outcome::Failed("empty response".into()),
                Err(e) => {
                    self.leader.remove(&shard);
                    self.channels.remove(&addr);
                    return Outcome::Failed(format!("rpc to {addr}: {e}"));
                }
            }
        }
        Outcome::Failed(last)
    }
}

/// The database the tests write to and read from.
pub const TEST_DATABASE: &str = "db";

/// Runs `sql` on one node's replica of `shard` and returns the first column as i64s.
pub async fn query_i64(addr: &str, shard: u32, sql: &str) -> Result<Vec<i64>> {
    let mut c = NodeClient::connect(format!("http://{addr}"))
        .await?
        .max_decoding_message_size(256 << 20);
    let r = c
        .query(QueryRequest {
            shard,
            sql: sql.into(),
            database: TEST_DATABASE.into(),
        })
        .await?
        .into_inner();
    let reader =
        arrow_ipc::reader::StreamReader::try_new(std::io::Cursor::new(r.result_ipc), None)?;
    let mut out = Vec::new();
    for b in reader {
        let b = b?;
        if b.num_columns() == 0 {
            continue;
        }
        let col = arrow_cast_i64(b.column(0).as_ref())?;
        out.extend(col);
    }
    Ok(out)
}

fn arrow_cast_i64(a: &dyn Array) -> Result<Vec<i64>> {
    if let Some(x) = a.as_any().downcast_ref::<Int64Array>() {
        return Ok(x.iter().flatten().collect());
    }
    if let Some(x) = a.as_any().downcast_ref::<UInt64Array>() {
        return Ok(x.iter().flatten().map(|v| v as i64).collect());
    }
    bail!("unexpected column type {:?}", a.data_type())
}

/// Checks that every acknowledged value of `shard` is in the replica at
/// `addr` exactly once with FINAL, waiting up to `timeout` for flushes.
/// `strict_raw` also forbids duplicate rows without FINAL: right only when
/// no flush can have been interrupted (the engine writes rows before its
/// flushed index, so a crash in between replays rows that FINAL collapses).
/// Returns (acked, present) counts.
pub async fn verify_shard(
    addr: &str,
    shard: u32,
    table: &str,
    acked: &[i64],
    timeout: Duration,
    strict_raw: bool,
) -> Result<(usize, usize)> {
    let deadline = Instant::now() + timeout;
    loop {
        let final_rows = query_i64(addr, shard, &format!("SELECT v FROM {table} FINAL")).await;
        let raw_rows = query_i64(addr, shard, &format!("SELECT v FROM {table}")).await;
        let problem = match (final_rows, raw_rows) {
            (Ok(fin), Ok(raw)) => {
                let mut counts: HashMap<i64, u32> = HashMap::new();
                for v in &raw {
                    *counts.entry(*v).or_default() += 1;
                }
                let dup = counts.iter().find(|(_, c)| **c > 1);
                let fin_set: std::collections::HashSet<i64> = fin.iter().copied().collect();
                let missing: Vec<i64> = acked
                    .iter()
                    .filter(|v| !fin_set.contains(v))
                    .copied()
                    .take(5)
                    .collect();
                if let (true, Some((v, c))) = (strict_raw, dup) {
                    // Duplicates never heal: fail at once.
                    bail!("shard {shard} at {addr}: value {v} stored {c} times (no FINAL)");
                }
                if fin.len() != fin_set.len() {
                    bail!("shard {shard} at {addr}: duplicate values under FINAL");
                }
                if missing.is_empty() {
                    let sum_acked: i128 = acked.iter().map(|v| *v as i128).sum();
                    let sum_present: i128 = fin
                        .iter()
                        .filter(|v| acked.binary_search(v).is_ok())
                        .map(|v| *v as i128)
                        .sum();
                    if sum_acked != sum_present {
                        bail!("shard {shard}: checksum mismatch {sum_acked} vs {sum_present}");
                    }
                    return Ok((acked.len(), fin.len()));
                }
                format!("{} rows, missing e.g. {missing:?}", fin.len())
            }
            (Err(e), _) | (_, Err(e)) => format!("query failed: {e}"),
        };
        if Instant::now() > deadline {
            bail!("shard {shard} at {addr}: acknowledged points not all present after {timeout:?}: {problem}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
