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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elects_one_leader_per_shard() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    for shard in 1..=4 {
        c.bootstrap(shard, &c.ids)?;
    }
    for shard in 1..=4 {
        let l = c.leader(shard, &c.ids).await?;
        // Every replica agrees on the leader once heartbeats flow.
        wait_for("followers to learn the leader", || {
            c.ids
                .iter()
                .all(|id| c.status(*id, shard).and_then(|s| s.leader_id) == Some(l))
        })
        .await?;
        let st = c.status(l, shard).unwrap();
        assert_eq!(st.voters, vec![1, 2, 3]);
        assert!(st.term >= 1);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicates_every_committed_entry_once_in_order() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shards: Vec<ShardId> = (10..14).collect();
    for &s in &shards {
        c.bootstrap(s, &c.ids)?;
    }
    let mut expected: HashMap<ShardId, Vec<Vec<u8>>> = HashMap::new();
    // Concurrent proposals over several shards exercise group commit.
    for round in 0..10 {
        let mut tasks = Vec::new();
        for &s in &shards {
            for k in 0..5 {
                let data = payload(&format!("s{s}"), round * 5 + k);
                expected.entry(s).or_default().push(data.clone());
                let l = c.leader(s, &c.ids).await?;
                let w = c.wals[&l].clone();
                tasks.push(tokio::spawn(async move {
                    let r = w.propose(s, data.clone()).await;
                    (s, data, r)
                }));
            }
        }
        for t in tasks {
            let (s, data, r) = t.await?;
            if r.is_err() {
                // A leader change failed it (nothing committed under that
                // proposal's term): propose again.
                c.propose(s, data, &c.ids).await?;
            }
        }
    }
    for &s in &shards {
        let l = c.leader(s, &c.ids).await?;
        let want_len = expected[&s].len();
        let sm = c.sms[&l].clone();
        wait_for("leader to apply", || sm.payloads(s).len() >= want_len).await?;
        let reference = sm.payloads(s);
        // Same set as proposed (an ambiguous failure retried may commit a
        // payload twice, at two indexes), and identical sequence everywhere.
        let mut a = reference.clone();
        a.sort();
        a.dedup();
        let mut b = expected[&s].clone();
        b.sort();
        assert_eq!(a, b, "shard {s}: applied entries differ from proposed");
        c.wait_applied(s, &c.ids, &reference).await?;
        let idx: Vec<u64> = c.sms[&l].entries(s).iter().map(|e| e.0).collect();
        assert!(idx.windows(2).all(|w| w[0] < w[1]));
    }
    let stats: Vec<_> = c.ids.iter().map(|id| c.wals[id].stats()).collect();
    for s in &stats {
        assert!(s.synced_batches > 0 && s.synced_entries > 0);
    }
    let leader_stats = c.wals[&c.leader(shards[0], &c.ids).await?].stats();
    eprintln!(
        "group commit: mean {:.2} entries per synced batch ({} batches)",
        leader_stats.mean_group_commit_entries(),
        leader_stats.synced_batches
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicates_under_message_loss() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.leader(1, &c.ids).await?;
    c.net.drop_every.store(7, Ordering::Relaxed);
    let mut expected = Vec::new();
    for i in 0..30 {
        let d = payload("lossy", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.net.drop_every.store(0, Ordering::Relaxed);
    let l = c.leader(1, &c.ids).await?;
    let sm = c.sms[&l].clone();
    wait_for("leader apply", || sm.payloads(1).len() >= expected.len()).await?;
    // Retries after an ambiguous failure may duplicate a payload; each
    // committed index is still applied exactly once everywhere.
    let reference = sm.payloads(1);
    for d in &expected {
        assert!(reference.contains(d));
    }
    c.wait_applied(1, &c.ids, &reference).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_leader_steps_down_and_cannot_commit() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let old = c.leader(1, &c.ids).await?;
    let old_term = c.status(old, 1).unwrap().term;
    c.propose(1, b"before".to_vec(), &c.ids).await?;

    c.net.isolate(old, &c.ids);
    // A proposal on the cut-off leader must not commit.
    let stale = c.wals[&old].propose(1, b"stale-write".to_vec()).await;
    assert!(
        matches!(
            stale,
            Err(WalError::NotLeader { .. } | WalError::Unavailable(_))
        ),
        "old leader committed while partitioned: {stale:?}"
    );
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != old).collect();
    let new = c.leader(1, &rest).await?;
    assert_ne!(new, old);
    assert!(c.status(new, 1).unwrap().term > old_term);
    // check_quorum makes the old leader step down on its own.
    wait_for("old leader to step down", || {
        c.status(old, 1).is_some_and(|s| s.role != Role::Leader)
    })
    .await?;
    c.propose(1, b"after".to_vec(), &rest).await?;

    c.net.heal();
    let expected = vec![b"before".to_vec(), b"after".to_vec()];
    c.wait_applied(1, &c.ids, &expected).await?;
    for id in &c.ids {
        assert!(!c.sms[id].payloads(1).contains(&b"stale-write".to_vec()));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lagging_replica_catches_up_by_snapshot() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    let leader = c.leader(1, &c.ids).await?;
    let lagger = *c.ids.iter().find(|i| **i != leader).unwrap();
    let rest: Vec<NodeId> = c.ids.iter().copied().filter(|i| *i != lagger).collect();
    let mut expected = Vec::new();
    for i in 0..5 {
        let d = payload("early", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected).await?;

    c.net.isolate(lagger, &c.ids);
    for i in 0..40 {
        let d = payload("late", i);
        c.propose(1, d.clone(), &rest).await?;
        expected.push(d);
    }
    c.wait_applied(1, &rest, &expected).await?;
    let lagger_last = c.status(lagger, 1).unwrap().last_index;
    // Flush on the connected replicas; compaction then drops the entries
    // the lagging replica would need.
    for id in &rest {
        c.sms[id].flush(1);
    }
    let l = c.leader(1, &rest).await?;
    wait_for("leader log compaction past the lagging replica", || {
        c.status(l, 1)
            .is_some_and(|s| s.first_index > lagger_last + 1)
    })
    .await?;

    c.net.heal();
    c.wait_applied(1, &c.ids, &expected).await?;
    assert!(
        c.sms[&lagger].restores(1) >= 1,
        "caught up without a snapshot"
    );
    // And it keeps replicating normally afterwards.
    let d = payload("post", 0);
    c.propose(1, d.clone(), &c.ids).await?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected).await?;
    wait_for(
        "lagging replica's log to restart after the snapshot",
        || {
            c.status(lagger, 1)
                .is_some_and(|s| s.first_index > lagger_last + 1)
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_reloads_log_and_reapplies_above_flushed_exactly_once() -> anyhow::Result<()> {
    let mut c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.bootstrap(2, &c.ids)?;
    let mut expected = Vec::new();
    for i in 0..20 {
        let d = payload("r", i);
        c.propose(1, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(1, &c.ids, &expected).await?;
    let victim = 1;
    let before = c.status(victim, 1).unwrap();
    let entries = c.sms[&victim].entries(1);
    let flushed_at = entries[9].0;
    c.sms[&victim].flush_to(1, flushed_at);

    c.stop(victim);
    let durable = Arc::new(c.sms[&victim].durable_copy());
    assert_eq!(durable.payloads(1).len(), 10);
    c.start(victim, durable.clone())?;

    let after = c.status(victim, 1).context("replica reloaded")?;
    assert!(after.term >= before.term);
    assert!(
        after.last_index >= before.last_index,
        "log lost: {after:?} vs {before:?}"
    );
    assert!(c.status(victim, 2).is_some(), "second shard not reloaded");
    assert_eq!(after.voters, vec![1, 2, 3]);
    // Entries above flushed come back exactly once (the state machine
    // flags any at or below flushed, or any repeat).
    c.wait_applied(1, &[victim], &expected).await?;
    let idx: Vec<u64> = durable.entries(1).iter().map(|e| e.0).collect();
    assert_eq!(idx, entries.iter().map(|e| e.0).collect::<Vec<_>>());

    // The restarted node keeps working.
    let d = payload("r", 99);
    c.propose(1, d.clone(), &c.ids).await?;
    expected.push(d);
    c.wait_applied(1, &c.ids, &expected).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_restart_keeps_hard_state_and_log() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(5, &[1])?;
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("solo", i);
        c.propose(5, d.clone(), &[1]).await?;
        expected.push(d);
    }
    c.wait_applied(5, &[1], &expected).await?;
    let before = c.status(1, 5).unwrap();
    c.stop(1);
    // Nothing flushed: every committed entry is applied again, once.
    let fresh = Arc::new(MemSm::default());
    c.start(1, fresh.clone())?;
    let after = c.status(1, 5).unwrap();
    assert!(after.term >= before.term);
    assert_eq!(after.last_index, before.last_index, "log lost on restart");
    c.wait_applied(5, &[1], &expected).await?;
    c.leader(5, &[1]).await?;
    wait_for("commit index back", || {
        c.status(1, 5)
            .is_some_and(|s| s.commit_index > before.commit_index)
    })
    .await?;
    Ok(())
}

/// Regression: a single voter's commit advances arrive in raft-rs's
/// LightReady, not in a Ready's hard state. If they are not persisted, the
/// stored commit stays at the bootstrap index while compaction moves the log
/// past it, and raft-rs refuses to start the replica after a restart
/// ("hs.commit 1 is out of range").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_voter_restarts_after_log_compaction() -> anyhow::Result<()> {
    let mut c = Cluster::new(1)?;
    c.bootstrap(6, &[1])?;
    let mut expected = Vec::new();
    for i in 0..60 {
        let d = payload("compact", i);
        c.propose(6, d.clone(), &[1]).await?;
        expected.push(d);
    }
    c.wait_applied(6, &[1], &expected).await?;
    c.sms[&1].flush(6);
    wait_for("log compaction on the single voter", || {
        c.status(1, 6).is_some_and(|s| s.first_index > 30)
    })
    .await?;
    let before = c.status(1, 6).unwrap();
    let durable = Arc::new(c.sms[&1].durable_copy());
    c.stop(1);
    c.start(1, durable.clone())?;
    c.leader(6, &[1]).await?;
    let after = c.status(1, 6).unwrap();
    assert!(after.commit_index >= before.first_index - 1, "{after:?}");
    let d = payload("after-restart", 0);
    c.propose(6, d.clone(), &[1]).await?;
    wait_for("the new entry applied after restart", || {
        durable.payloads(6).last() == Some(&d)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_add_learner_promote_remove() -> anyhow::Result<()> {
    let c = Cluster::new(4)?;
    let initial = [1, 2, 3];
    c.bootstrap(1, &initial)?;
    let mut expected = Vec::new();
    for i in 0..10 {
        let d = payload("m", i);
        c.propose(1, d.clone(), &initial).await?;
        expected.push(d);
    }
    c.wals[&4].create_replica(1, &[])?;
    let l = c.leader(1, &initial).await?;
    c.wals[&l].add_learner(1, 4).await?;
    c.wait_applied(1, &[4], &expected).await?;
    let st = c.status(l, 1).unwrap();
    assert_eq!(st.learners, vec![4]);
    assert_eq!(st.voters, vec![1, 2, 3]);

    // A second change while the first is applied is fine.
    let l = c.leader(1, &initial).await?;
    c.wals[&l].promote_learner(1, 4).await?;
    wait_for("node 4 to see itself as voter", || {
        c.status(4, 1)
            .is_some_and(|s| s.voters == vec![1, 2, 3, 4] && s.learners.is_empty())
    })
    .await?;

    let all = [1, 2, 3, 4];
    let l = c.leader(1, &all).await?;
    let victim = if l == 3 { 2 } else { 3 };
    c.wals[&l].remove_replica(1, victim).await?;
    let remaining: Vec<NodeId> = all.iter().copied().filter(|i| *i != victim).collect();
    wait_for("voters without the removed replica", || {
        remaining.iter().all(|id| {
            c.status(*id, 1)
                .is_some_and(|s| s.voters == remaining && s.learners.is_empty())
        })
    })
    .await?;
    let d = payload("m", 100);
    c.propose(1, d.clone(), &remaining).await?;
    expected.push(d);
    c.wait_applied(1, &remaining, &expected).await?;
    // Removing and deleting the local copy.
    c.wals[&victim].destroy_replica(1)?;
    assert!(!c.wals[&victim].has_replica(1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_leader_moves_leadership() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    c.bootstrap(1, &c.ids)?;
    c.propose(1, b"x".to_vec(), &c.ids).await?;
    let l = c.leader(1, &c.ids).await?;
    let target = *c.ids.iter().find(|i| **i != l).unwrap();
    // Let the target catch up so the transfer is not refused.
    c.wait_applied(1, &c.ids, &[b"x".to_vec()]).await?;
    c.wals[&l].transfer_leader(1, target).await?;
    wait_for("target to lead", || {
        c.leaders(1, &c.ids).iter().any(|(id, _)| *id == target)
    })
    .await?;
    // The old leader now refuses proposals with a hint.
    wait_for("old leader to know the new one", || {
        c.status(l, 1).is_some_and(|s| s.leader_id == Some(target))
    })
    .await?;
    match c.wals[&l].propose(1, b"y".to_vec()).await {
        Err(WalError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(target)),
        other => bail!("expected NotLeader, got {other:?}"),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overloaded_shard_rejects_instead_of_queueing() -> anyhow::Result<()> {
    // A long election timeout keeps the isolated leader leading while the
    // test looks at its admission state.
    let c = Cluster::with(3, |cfg| {
        cfg.max_inflight_bytes_per_shard = 1000;
        cfg.election_ticks = 60;
    })?;
    c.bootstrap(1, &c.ids)?;
    let l = c.leader(1, &c.ids).await?;
    c.propose(1, vec![1; 10], &c.ids).await?;
    // Cut the leader off so nothing commits and bytes stay in flight.
    c.net.isolate(l, &c.ids);
    let w = c.wals[&l].clone();
    let pending = tokio::spawn(async move { w.propose(1, vec![2; 600]).await });
    wait_for("first proposal in flight", || {
        c.status(l, 1).is_some_and(|s| s.inflight_bytes == 600)
    })
    .await?;
    match c.wals[&l].propose(1, vec![3; 600]).await {
        Err(WalError::Overloaded { retry_after_ms }) => assert!(retry_after_ms >= 10),
        other => bail!("expected Overloaded, got {other:?}"),
    }
    // The stuck proposal fails (no quorum) and releases its bytes.
    assert!(pending.await?.is_err());
    wait_for("in-flight bytes released", || {
        c.status(l, 1).is_some_and(|s| s.inflight_bytes == 0)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_shard_and_not_leader_errors() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    assert!(matches!(
        c.wals[&1].propose(9, b"x".to_vec()).await,
        Err(WalError::ShardNotFound(9))
    ));
    assert!(matches!(
        c.wals[&1].step(9, Message::default()),
        Err(WalError::ShardNotFound(9))
    ));
    c.bootstrap(9, &c.ids)?;
    // Idempotent.
    c.bootstrap(9, &c.ids)?;
    let l = c.leader(9, &c.ids).await?;
    let f = *c.ids.iter().find(|i| **i != l).unwrap();
    wait_for("follower knows leader", || {
        c.status(f, 9).and_then(|s| s.leader_id) == Some(l)
    })
    .await?;
    match c.wals[&f].propose(9, b"x".to_vec()).await {
        Err(WalError::NotLeader { leader_hint }) => assert_eq!(leader_hint, Some(l)),
        other => bail!("expected NotLeader, got {other:?}"),
    }
    Ok(())
}

// ------------------------------------------------- apply outcomes and reads

/// A state machine failure must stop the shard's apply at that entry (the
/// entry is retried, never skipped), report it, and resume in order once
/// the failure passes. The entry used to be logged and skipped, and the
/// next flush moved the flushed index (and log compaction) past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_apply_stops_the_shard_and_is_never_skipped() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 1;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids).await?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    let mut expected = Vec::new();
    for i in 0..3 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    c.wait_applied(shard, &c.ids, &expected).await?;
    let stuck = c.status(follower, shard).unwrap().applied_index + 2;
    *c.sms[&follower].fail_at.lock() = Some((shard, stuck));
    for i in 3..10 {
        let d = payload("a", i);
        c.propose(shard, d.clone(), &c.ids).await?;
        expected.push(d);
    }
    // The follower stops right below the failing entry and says why.
    wait_for("the follower's apply to stall", || {
        c.status(follower, shard)
            .and_then(|s| s.apply_stalled)
            .is_some_and(|st| st.index == stuck && st.attempts >= 2)
    })
    .await?;
    let st = c.status(follower, shard).unwrap();
    assert_eq!(st.applied_index, stuck - 1);
    assert!(st.apply_stalled.unwrap().error.contains("injected failure"));
    // A flush now cannot pass the entry: nothing after it was applied.
    c.sms[&follower].flush(shard);
    assert!(c.sms[&follower].flushed_index(shard) < stuck);
    // Writes keep committing on the other two replicas meanwhile.
    let d = payload("a", 10);
    c.propose(shard, d.clone(), &c.ids).await?;
    expected.push(d);
    // The failure passes: everything is applied once, in order.
    *c.sms[&follower].fail_at.lock() = None;
    c.wait_applied(shard, &c.ids, &expected).await?;
    wait_for("the stall to clear", || {
        c.status(follower, shard).unwrap().apply_stalled.is_none()
    })
    .await?;
    // Retries backed off: a few attempts, not a busy loop.
    let failures = c.sms[&follower].failures.load(Ordering::Relaxed);
    assert!((2..50).contains(&failures), "{failures} attempts");
    Ok(())
}

/// On the leader, a proposal is answered only once its entry is applied:
/// a stalled apply holds the answer back instead of acknowledging a write
/// whose fate (stored or rejected) is not decided yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_is_answered_after_its_apply() -> anyhow::Result<()> {
    let c = Cluster::new(1)?;
    let shard = 2;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids).await?;
    let next = c.propose(shard, payload("b", 0), &c.ids).await?.index + 1;
    *c.sms[&1].fail_at.lock() = Some((shard, next));
    let wal = c.wals[&1].clone();
    let pending = tokio::spawn(async move { wal.propose(shard, payload("b", 1)).await });
    wait_for("the apply to stall", || {
        c.status(1, shard).unwrap().apply_stalled.is_some()
    })
    .await?;
    assert!(
        !pending.is_finished(),
        "answered before the entry was applied"
    );
    *c.sms[&1].fail_at.lock() = None;
    let committed = pending.await??;
    assert_eq!(committed.index, next);
    assert_eq!(c.sms[&1].payloads(shard).len(), 2);
    Ok(())
}

/// An entry the state machine rejects is answered with `Rejected`, and
/// every replica skips it alike; the entries around it are stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_entries_are_answered_and_skipped_on_every_replica() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 3;
    c.bootstrap(shard, &c.ids)?;
    let leader = c.leader(shard, &c.ids).await?;
    let ok1 = payload("c", 1);
    c.propose(shard, ok1.clone(), &c.ids).await?;
    let mut bad = REJECT.to_vec();
    bad.extend_from_slice(b"field g conflicts");
    match c.wals[&leader].propose(shard, bad).await {
        Err(WalError::Rejected(reason)) => assert!(reason.contains("asks for it"), "{reason}"),
        other => panic!("expected Rejected, got {other:?}"),
    }
    let ok2 = payload("c", 2);
    c.propose(shard, ok2.clone(), &c.ids).await?;
    c.wait_applied(shard, &c.ids, &[ok1, ok2]).await?;
    Ok(())
}

/// A read index covers every acknowledged write, on the leader and on a
/// follower: once a replica has applied up to it, it holds them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_index_covers_every_acknowledged_write() -> anyhow::Result<()> {
    let c = Cluster::new(3)?;
    let shard = 4;
    c.bootstrap(shard, &c.ids)?;
    c.leader(shard, &c.ids).await?;
    let mut acked = Vec::new();
    let mut last = 0;
    for i in 0..20 {
        let d = payload("d", i);
        last = c.propose(shard, d.clone(), &c.ids).await?.index;
        acked.push(d);
    }
    for id in c.ids.clone() {
        let wal = &c.wals[&id];
        let idx = wal.read_index(shard).await?;
        assert!(
            idx >= last,
            "node {id}: read index {idx} < acknowledged {last}"
        );
        wal.wait_applied(shard, idx, Duration::from_secs(10))
            .await?;
        let got = c.sms[&id].payloads(shard);
        assert_eq!(got, acked, "node {id} misses acknowledged writes");
    }
    // An isolated replica cannot confirm a read index.
    let leader = c.leader(shard, &c.ids).await?;
    let follower = *c.ids.iter().find(|id| **id != leader).unwrap();
    c.net.isolate(follower, &c.ids);
    let r =
        tokio::time::timeout(Duration::from_secs(10), c.wals[&follower].read_index(shard)).await;
    assert!(
        matches!(r, Ok(Err(_))),
        "an isolated replica answered a read index: {r:?}"
    );
    c.net.heal();
    Ok(())
}
