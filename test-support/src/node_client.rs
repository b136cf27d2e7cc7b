//! A client of the node's Write and Query API for tests and `bench-wal`:
//! writes follow NotLeader hints to shard leaders, reads check that every
//! acknowledged point is stored exactly once.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use arrow_array::{Array, Int64Array, UInt64Array};
use shardhouse_common::proto::{
    node_client::NodeClient, write_response::Result as WriteResult, QueryRequest, WriteRequest,
};
use tonic::transport::Channel;

/// The database the tests write to and read from.
pub const TEST_DATABASE: &str = "db";

/// Routes writes to shard leaders, following NotLeader hints.
#[derive(Default)]
pub struct LeaderClient {
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

impl LeaderClient {
    /// A client of the nodes at `addrs` (gRPC `host:port`).
    pub fn new(addrs: Vec<String>) -> LeaderClient {
        LeaderClient {
            addrs,
            ..LeaderClient::default()
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
            ..Default::default()
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
        out.extend(column_i64(b.column(0).as_ref())?);
    }
    Ok(out)
}

fn column_i64(a: &dyn Array) -> Result<Vec<i64>> {
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
/// `acked` must be sorted. Returns (acked, present) counts.
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
                let fin_set: HashSet<i64> = fin.iter().copied().collect();
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
