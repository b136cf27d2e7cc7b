//! Deterministic in-process multi-node harness: several real `Wal`s (each
//! with its own RocksDB directory) connected by an in-memory transport with
//! partition and drop filters, and an in-memory state machine that records
//! every applied entry and flags duplicates or reordering.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use parking_lot::Mutex;
use shardhouse_wal::eraftpb::Message;
use shardhouse_wal::{
    ApplyOutcome, Committed, NodeId, Role, ShardId, ShardStatus, StateMachine, Transport, Wal,
    WalConfig, WalError,
};

// ---------------------------------------------------------------- network

#[derive(Default)]
struct Net {
    nodes: Mutex<HashMap<NodeId, Arc<Wal>>>,
    /// Directed links that drop everything.
    blocked: Mutex<HashSet<(NodeId, NodeId)>>,
    /// Drop every n-th message (0 = none); a counter keeps it deterministic.
    drop_every: AtomicU64,
    sent: AtomicU64,
}

impl Net {
    fn isolate(&self, node: NodeId, all: &[NodeId]) {
        let mut b = self.blocked.lock();
        for &o in all {
            if o != node {
                b.insert((node, o));
                b.insert((o, node));
            }
        }
    }
    fn heal(&self) {
        self.blocked.lock().clear();
    }
}

struct NetTransport {
    from: NodeId,
    net: Arc<Net>,
}

impl Transport for NetTransport {
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, Message)>) {
        if self.net.blocked.lock().contains(&(self.from, to)) {
            return;
        }
        let Some(w) = self.net.nodes.lock().get(&to).cloned() else {
            return;
        };
        let every = self.net.drop_every.load(Ordering::Relaxed);
        for (shard, m) in msgs {
            let n = self.net.sent.fetch_add(1, Ordering::Relaxed) + 1;
            if every > 0 && n.is_multiple_of(every) {
                continue;
            }
            let _ = w.step(shard, m);
        }
    }
}

// ---------------------------------------------------------- state machine

#[derive(Default)]
struct ShardData {
    entries: Vec<(u64, Vec<u8>)>,
    flushed: u64,
    restores: u64,
}

/// Records applied entries per shard. "Durable" state is what was flushed:
/// `durable_copy` simulates a restart that loses unflushed entries.
#[derive(Default)]
struct MemSm {
    shards: Mutex<HashMap<ShardId, ShardData>>,
    violations: Mutex<Vec<String>>,
    /// While set, applying this (shard, index) fails (an engine outage).
    fail_at: Mutex<Option<(ShardId, u64)>>,
    /// Failed apply attempts so far.
    failures: AtomicU64,
}

/// Payloads starting with this are rejected on apply (a decision every
/// replica takes alike, as the engine does for a field type conflict).
const REJECT: &[u8] = b"reject:";

fn encode(entries: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, d) in entries {
        v.extend_from_slice(&i.to_le_bytes());
        v.extend_from_slice(&(d.len() as u32).to_le_bytes());
        v.extend_from_slice(d);
    }
    v
}

fn decode(mut b: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let i = u64::from_le_bytes(b[..8].try_into().unwrap());
        let n = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        out.push((i, b[12..12 + n].to_vec()));
        b = &b[12 + n..];
    }
    out
}

impl MemSm {
    fn entries(&self, shard: ShardId) -> Vec<(u64, Vec<u8>)> {
        self.shards
            .lock()
            .get(&shard)
            .map(|s| s.entries.clone())
            .unwrap_or_default()
    }
    fn payloads(&self, shard: ShardId) -> Vec<Vec<u8>> {
        self.entries(shard).into_iter().map(|(_, d)| d).collect()
    }
    /// Marks everything applied so far as durable.
    fn flush(&self, shard: ShardId) {
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        s.flushed = s.entries.last().map_or(s.flushed, |e| e.0);
    }
    fn flush_to(&self, shard: ShardId, index: u64) {
        self.shards.lock().entry(shard).or_default().flushed = index;
    }
    fn restores(&self, shard: ShardId) -> u64 {
        self.shards.lock().get(&shard).map_or(0, |s| s.restores)
    }
    fn durable_copy(&self) -> MemSm {
        let g = self.shards.lock();
        let shards = g
            .iter()
            .map(|(k, s)| {
                (
                    *k,
                    ShardData {
                        entries: s
                            .entries
                            .iter()
                            .filter(|e| e.0 <= s.flushed)
                            .cloned()
                            .collect(),
                        flushed: s.flushed,
                        restores: 0,
                    },
                )
            })
            .collect();
        MemSm {
            shards: Mutex::new(shards),
            ..MemSm::default()
        }
    }
    fn check(&self) -> anyhow::Result<()> {
        let v = self.violations.lock();
        if !v.is_empty() {
            bail!("state machine violations: {:?}", *v);
        }
        Ok(())
    }
}

impl StateMachine for MemSm {
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> Result<ApplyOutcome, String> {
        if *self.fail_at.lock() == Some((shard, index)) {
            self.failures.fetch_add(1, Ordering::Relaxed);
            return Err(format!("injected failure at {index}"));
        }
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        if let Some(last) = s.entries.last() {
            if index <= last.0 {
                self.violations.lock().push(format!(
                    "shard {shard}: index {index} applied after {}",
                    last.0
                ));
            }
        }
        if index <= s.flushed {
            self.violations.lock().push(format!(
                "shard {shard}: index {index} applied at or below flushed {}",
                s.flushed
            ));
        }
        if data.starts_with(REJECT) {
            return Ok(ApplyOutcome::Rejected("payload asks for it".into()));
        }
        s.entries.push((index, data.to_vec()));
        Ok(ApplyOutcome::Applied)
    }
    fn flushed_index(&self, shard: ShardId) -> u64 {
        self.shards.lock().get(&shard).map_or(0, |s| s.flushed)
    }
    fn snapshot(&self, shard: ShardId) -> Result<(u64, Vec<u8>), String> {
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        // Like the engine: flush, then export everything.
        s.flushed = s.entries.last().map_or(s.flushed, |e| e.0);
        Ok((s.flushed, encode(&s.entries)))
    }
    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> Result<(), String> {
        let mut g = self.shards.lock();
        let s = g.entry(shard).or_default();
        s.entries = decode(data);
        s.flushed = index;
        s.restores += 1;
        Ok(())
    }
}

// ---------------------------------------------------------------- cluster

struct Cluster {
    net: Arc<Net>,
    ids: Vec<NodeId>,
    dirs: HashMap<NodeId, PathBuf>,
    wals: HashMap<NodeId, Arc<Wal>>,
    sms: HashMap<NodeId, Arc<MemSm>>,
    _tmp: tempfile::TempDir,
    tweak: fn(&mut WalConfig),
}

fn test_config(node_id: NodeId, dir: PathBuf) -> WalConfig {
    WalConfig {
        node_id,
        dir,
        tick_interval: Duration::from_millis(50),
        election_ticks: 10,
        heartbeat_ticks: 2,
        compact_interval: Duration::from_millis(200),
        propose_timeout: Duration::from_secs(5),
        poll_threads: 2,
        apply_threads: 2,
        write_buffer_bytes: 8 << 20,
        ..Default::default()
    }
}

const WAIT: Duration = Duration::from_secs(40);

async fn wait_for<F: FnMut() -> bool>(what: &str, mut f: F) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if f() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    bail!("timed out after {WAIT:?} waiting for {what}")
}

impl Cluster {
    fn new(n: u64) -> anyhow::Result<Cluster> {
        Self::with(n, |_| {})
    }

    fn with(n: u64, tweak: fn(&mut WalConfig)) -> anyhow::Result<Cluster> {
        let tmp = tempfile::tempdir()?;
        let mut c = Cluster {
            net: Arc::new(Net::default()),
            ids: (1..=n).collect(),
            dirs: HashMap::new(),
            wals: HashMap::new(),
            sms: HashMap::new(),
            _tmp: tmp,
            tweak,
        };
        for id in c.ids.clone() {
            let dir = c._tmp.path().join(format!("node{id}"));
            c.dirs.insert(id, dir);
            c.start(id, Arc::new(MemSm::default()))?;
        }
        Ok(c)
    }

    fn start(&mut self, id: NodeId, sm: Arc<MemSm>) -> anyhow::Result<()> {
        let mut cfg = test_config(id, self.dirs[&id].clone());
        (self.tweak)(&mut cfg);
        let transport = Arc::new(NetTransport {
            from: id,
            net: self.net.clone(),
        });
        let wal = Wal::open(cfg, transport, sm.clone()).context("open wal")?;
        self.net.nodes.lock().insert(id, wal.clone());
        self.wals.insert(id, wal);
        self.sms.insert(id, sm);
        Ok(())
    }

    fn stop(&mut self, id: NodeId) {
        let w = self.net.nodes.lock().remove(&id);
        drop(w);
        if let Some(w) = self.wals.remove(&id) {
            w.shutdown();
        }
    }

    fn bootstrap(&self, shard: ShardId, on: &[NodeId]) -> anyhow::Result<()> {
        for id in on {
            self.wals[id].create_replica(shard, on)?;
        }
        Ok(())
    }

    fn status(&self, id: NodeId, shard: ShardId) -> Option<ShardStatus> {
        self.wals
            .get(&id)?
            .shard_states()
            .into_iter()
            .find(|s| s.shard == shard)
    }

    fn leaders(&self, shard: ShardId, among: &[NodeId]) -> Vec<(NodeId, u64)> {
        among
            .iter()
            .filter_map(|id| {
                let s = self.status(*id, shard)?;
                (s.role == Role::Leader).then_some((*id, s.term))
            })
            .collect()
    }

    /// Waits until exactly one of `among` leads `shard` and returns it.
    async fn leader(&self, shard: ShardId, among: &[NodeId]) -> anyhow::Result<NodeId> {
        let mut found = 0;
        wait_for("a single leader", || {
            let l = self.leaders(shard, among);
            if l.len() == 1 {
                found = l[0].0;
                true
            } else {
                false
            }
        })
        .await?;
        Ok(found)
    }

    /// Proposes on whichever replica leads, retrying on leader changes.
    async fn propose(
        &self,
        shard: ShardId,
        data: Vec<u8>,
        among: &[NodeId],
    ) -> anyhow::Result<Committed> {
        let deadline = Instant::now() + WAIT;
        loop {
            let l = self.leader(shard, among).await?;
            match self.wals[&l].propose(shard, data.clone()).await {
                Ok(c) => return Ok(c),
                Err(e @ (WalError::NotLeader { .. } | WalError::Unavailable(_))) => {
                    if Instant::now() > deadline {
                        bail!("propose kept failing: {e}");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => bail!("propose failed: {e}"),
            }
        }
    }

    async fn wait_applied(
        &self,
        shard: ShardId,
        nodes: &[NodeId],
        expected: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        for id in nodes {
            let sm = self.sms[id].clone();
            wait_for(
                &format!("node {id} to apply {} entries", expected.len()),
                || sm.payloads(shard).len() >= expected.len(),
            )
            .await?;
            let got = sm.payloads(shard);
            if got != expected {
                bail!(
                    "node {id} applied {} entries that differ from the {} committed ones",
                    got.len(),
                    expected.len()
                );
            }
            sm.check()?;
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in self.ids.clone() {
            self.stop(id);
        }
    }
}

fn payload(tag: &str, i: usize) -> Vec<u8> {
    let mut v = format!("{tag}-{i}-").into_bytes();
    v.resize(v.len() + 100 + i % 50, i as u8);
    v
}

// ------------------------------------------------------------------ tests

mod apply_outcomes;
mod log_and_restarts;
mod membership;
