//! shardhouse-wal: the node's multi-Raft write-ahead log.
//!
//! Every shard replica hosted by a node is a raft-rs `RawNode`; all of them
//! keep their log, hard state and configuration in ONE RocksDB instance. A
//! few poll threads drive many groups and write each round's log entries for
//! all their shards with one synced write batch (group commit). Committed
//! entries go to a [`StateMachine`] on separate apply threads. See
//! `docs/wal.md` for the key layout, the Ready loop, recovery, compaction
//! and snapshots.

mod apply;
mod error;
mod keys;
pub mod metrics;
mod policy;
mod poller;
mod storage;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use raft::eraftpb::{ConfChange, ConfChangeType};
use rocksdb::DB;
use tokio::sync::oneshot;

pub use error::{Result, WalError};
pub use raft;
pub use raft::eraftpb;

use apply::ApplyMsg;
use poller::{Peer, PollMsg, Poller};
use storage::{ShardStorage, SnapSlot};

pub type ShardId = u32;
pub type NodeId = u64;

/// WAL settings. `Default` gives production values except `node_id`/`dir`.
#[derive(Debug, Clone)]
pub struct WalConfig {
    /// This node's Raft id (non-zero, unique in the cluster).
    pub node_id: NodeId,
    /// RocksDB directory of the log (created if missing).
    pub dir: PathBuf,
    pub tick_interval: Duration,
    /// Election timeout in ticks.
    pub election_ticks: usize,
    pub heartbeat_ticks: usize,
    /// Admission bound: bytes proposed on a shard and not yet applied.
    pub max_inflight_bytes_per_shard: usize,
    /// How often each shard's log is compacted up to the state machine's
    /// flushed index.
    pub compact_interval: Duration,
    /// Skip compactions that would remove fewer entries than this.
    pub compact_min_entries: u64,
    /// Threads running the batched Ready loop (shard % poll_threads).
    pub poll_threads: usize,
    /// Threads calling the state machine (shard % apply_threads).
    pub apply_threads: usize,
    /// A proposal not committed within this fails with `Unavailable`.
    pub propose_timeout: Duration,
    /// raft-rs: max bytes of entries per append message.
    pub max_size_per_msg: u64,
    /// raft-rs: max append messages in flight per follower.
    pub max_inflight_msgs: usize,
    /// Recent entries kept in memory per shard beyond the applied index.
    pub entry_cache_bytes_per_shard: usize,
    /// RocksDB memtable size: large enough to hold the entries written
    /// between a flush of the engine and the log compaction after it.
    pub write_buffer_bytes: usize,
    /// RocksDB `bytes_per_sync`: SST files (flushes, compactions) are synced
    /// every this many bytes while written instead of in one burst at the
    /// end. 0 = off.
    pub sst_bytes_per_sync: u64,
    /// RocksDB rate limit on SST writes (memtable flushes, compactions), in
    /// bytes/s; 0 = unlimited. A flush writes the memtable's live entries
    /// (~50-100 MB here) at once; unpaced, every WAL fsync queued behind it
    /// waits. Keep it well above the SST demand (about a third of the WAL
    /// ingest rate) or memtables pile up until RocksDB stalls writes.
    pub sst_write_bytes_per_sec: u64,
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig {
            node_id: 1,
            dir: PathBuf::from("wal"),
            tick_interval: Duration::from_millis(100),
            election_ticks: 10,
            heartbeat_ticks: 3,
            max_inflight_bytes_per_shard: 64 << 20,
            // Short: entries the engine has flushed should be deleted while
            // they are still in the memtable, so RocksDB never writes them
            // to an SST (flushing and compacting dead entries costs CPU and
            // disk bandwidth the WAL's fsyncs compete with).
            compact_interval: Duration::from_millis(500),
            compact_min_entries: 1,
            poll_threads: 2,
            apply_threads: 2,
            propose_timeout: Duration::from_secs(10),
            max_size_per_msg: 4 << 20,
            max_inflight_msgs: 256,
            entry_cache_bytes_per_shard: 32 << 20,
            write_buffer_bytes: 256 << 20,
            sst_bytes_per_sync: 1 << 20,
            sst_write_bytes_per_sec: 48 << 20,
        }
    }
}

/// Delivers raft messages to other nodes.
pub trait Transport: Send + Sync + 'static {
    /// Deliver raft messages to other nodes (best effort; may drop). `msgs`
    /// are (shard, message) pairs, all for `to`. Called from poll threads:
    /// must not block.
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, eraftpb::Message)>);
}

/// What applying one committed entry decided. Both outcomes advance the
/// shard's applied index; the decision must be a pure function of the
/// shard's log so every replica takes the same one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyOutcome {
    /// The entry's effects are in the state machine.
    Applied,
    /// The entry can never be stored (e.g. a field type conflicting with
    /// an earlier entry): it is a no-op on every replica, and the proposer
    /// gets [`WalError::Rejected`] with this reason.
    Rejected(String),
}

/// What committed entries are applied to (the node's engine).
pub trait StateMachine: Send + Sync + 'static {
    /// Called in index order per shard, from WAL apply threads (blocking is
    /// OK there). Only entries carrying caller data are passed.
    ///
    /// `Err` is a failure that may pass (the engine is unavailable): the
    /// entry is NOT skipped. The shard's apply stops there and the same
    /// entry is retried with backoff; [`ShardStatus::apply_stalled`] says why.
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> std::result::Result<ApplyOutcome, String>;
    /// Highest index whose effects are durable in the state machine. The
    /// log is compacted up to it, and on restart entries above it are
    /// applied again.
    fn flushed_index(&self, shard: ShardId) -> u64;
    /// All of the shard's state, reflecting every entry applied so far, and
    /// the index it covers. Called on the shard's apply thread.
    fn snapshot(&self, shard: ShardId) -> std::result::Result<(u64, Vec<u8>), String>;
    /// Replace the shard's state by a snapshot covering `index`.
    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> std::result::Result<(), String>;
}

/// A proposal's position once a quorum has it durably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    #[default]
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

/// One replica's state, as reported by [`Wal::shard_states`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardStatus {
    pub shard: ShardId,
    pub role: Role,
    pub term: u64,
    pub leader_id: Option<NodeId>,
    pub commit_index: u64,
    pub applied_index: u64,
    pub flushed_index: u64,
    /// First index still in the log (after compaction).
    pub first_index: u64,
    pub last_index: u64,
    pub voters: Vec<NodeId>,
    pub learners: Vec<NodeId>,
    /// On a leader: entries the slowest follower or learner is behind.
    pub max_follower_lag: u64,
    pub inflight_bytes: usize,
    /// Set while the state machine keeps failing to apply the next entry:
    /// the failure, and how many attempts were made. The shard's applied
    /// index stays below that entry until it succeeds.
    pub apply_stalled: Option<ApplyStall>,
}

/// Why a shard's apply is stuck (see [`StateMachine::apply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyStall {
    /// Index of the entry that keeps failing.
    pub index: u64,
    pub error: String,
    pub attempts: u32,
}

/// Counters of the WAL's group commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    pub synced_batches: u64,
    pub synced_entries: u64,
}

impl WalStats {
    /// Mean log entries per synced write batch.
    pub fn mean_group_commit_entries(&self) -> f64 {
        if self.synced_batches == 0 {
            0.0
        } else {
            self.synced_entries as f64 / self.synced_batches as f64
        }
    }
}

#[derive(Default)]
struct StatsCounters {
    synced_batches: AtomicU64,
    synced_entries: AtomicU64,
}

/// Per-shard state shared between callers, the poll thread and the apply
/// thread.
pub(crate) struct ShardHandle {
    shard: ShardId,
    poll_idx: usize,
    inflight_bytes: AtomicUsize,
    applied: AtomicU64,
    /// EWMA of propose-to-commit latency, for `retry_after_ms`.
    commit_micros: AtomicU64,
    status: Mutex<ShardStatus>,
    snap: Arc<Mutex<SnapSlot>>,
    /// Set by the apply thread while an entry keeps failing to apply.
    apply_stall: Mutex<Option<ApplyStall>>,
    /// Woken whenever `applied` moves (readers waiting for a read index).
    applied_notify: tokio::sync::Notify,
}

impl ShardHandle {
    fn new(shard: ShardId, poll_idx: usize) -> ShardHandle {
        ShardHandle {
            shard,
            poll_idx,
            inflight_bytes: AtomicUsize::new(0),
            applied: AtomicU64::new(0),
            commit_micros: AtomicU64::new(0),
            status: Mutex::new(ShardStatus {
                shard,
                ..Default::default()
            }),
            snap: Default::default(),
            apply_stall: Mutex::new(None),
            applied_notify: tokio::sync::Notify::new(),
        }
    }
}

pub(crate) struct Inner {
    cfg: WalConfig,
    transport: Arc<dyn Transport>,
    sm: Arc<dyn StateMachine>,
    shards: RwLock<HashMap<ShardId, Arc<ShardHandle>>>,
    poll_txs: Vec<Sender<PollMsg>>,
    apply_txs: Vec<Sender<ApplyMsg>>,
    stats: StatsCounters,
    lag_slots: Vec<AtomicU64>,
}

impl Inner {
    fn apply_tx(&self, shard: ShardId) -> Sender<ApplyMsg> {
        self.apply_txs[shard as usize % self.apply_txs.len()].clone()
    }
    fn poll_idx(&self, shard: ShardId) -> usize {
        shard as usize % self.poll_txs.len()
    }
}

/// The node's multi-Raft WAL. `Send + Sync`; share it as `Arc<Wal>`.
pub struct Wal {
    inner: Arc<Inner>,
    poll_threads: Mutex<Vec<JoinHandle<()>>>,
    apply_threads: Mutex<Vec<JoinHandle<()>>>,
    db: Mutex<Option<Arc<DB>>>,
    shut_down: AtomicBool,
}

fn open_db(cfg: &WalConfig) -> Result<DB> {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    // Raft payloads are Arrow IPC batches that compress poorly; the log is
    // short-lived (compacted after flush), so spend no CPU compressing it.
    o.set_compression_type(rocksdb::DBCompressionType::None);
    o.set_write_buffer_size(cfg.write_buffer_bytes);
    o.set_max_write_buffer_number(4);
    o.set_max_background_jobs(2);
    o.set_enable_pipelined_write(true);
    // Memtable flushes and compactions write the log's older entries out as
    // SST files (~100 MB at a time here). Left to the kernel, that lands as
    // one writeback burst, and every WAL fsync issued meanwhile waits behind
    // it (the device flush covers it all). Syncing SST data every 1 MiB as it
    // is written spreads the same bytes out: at RF=3, 250k points/s, commit
    // p99 went from 0.4-0.6 s to ~0.2-0.3 s (docs/benchmarks.md).
    o.set_bytes_per_sync(cfg.sst_bytes_per_sync);
    if let Some(rate) = policy::sst_rate_limit(cfg.sst_write_bytes_per_sec) {
        // 100 ms refill, RocksDB's default fairness.
        o.set_ratelimiter(rate, 100_000, 10);
    }
    DB::open(&o, &cfg.dir).map_err(|e| {
        WalError::Storage(format!(
            "cannot open the WAL RocksDB at {}: {e}",
            cfg.dir.display()
        ))
    })
}

impl Wal {
    /// Opens (or creates) the WAL in `cfg.dir`, reloads every replica
    /// persisted there and starts the poll and apply threads.
    pub fn open(
        cfg: WalConfig,
        transport: Arc<dyn Transport>,
        sm: Arc<dyn StateMachine>,
    ) -> Result<Arc<Wal>> {
        if cfg.node_id == 0 {
            return Err(WalError::InvalidArgument("node_id must not be 0".into()));
        }
        if cfg.election_ticks <= cfg.heartbeat_ticks {
            return Err(WalError::InvalidArgument(
                "election_ticks must be greater than heartbeat_ticks".into(),
            ));
        }
        metrics::register();
        let n_poll = cfg.poll_threads.max(1);
        let n_apply = cfg.apply_threads.max(1);
        let db = Arc::new(open_db(&cfg)?);
        let mut poll_rxs = Vec::new();
        let mut poll_txs = Vec::new();
        for _ in 0..n_poll {
            let (tx, rx) = crossbeam_channel::unbounded();
            poll_txs.push(tx);
            poll_rxs.push(rx);
        }
        let mut apply_rxs = Vec::new();
        let mut apply_txs = Vec::new();
        for _ in 0..n_apply {
            let (tx, rx) = crossbeam_channel::unbounded();
            apply_txs.push(tx);
            apply_rxs.push(rx);
        }
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            transport,
            sm: sm.clone(),
            shards: RwLock::new(HashMap::new()),
            poll_txs,
            apply_txs,
            stats: StatsCounters::default(),
            lag_slots: (0..n_poll).map(|_| AtomicU64::new(0)).collect(),
        });

        // Recovery: every replica with a state record comes back.
        let logger = poller::raft_logger();
        let mut peers: Vec<Vec<Peer>> = (0..n_poll).map(|_| Vec::new()).collect();
        for (shard, state) in poller::load_states(&db)? {
            let idx = inner.poll_idx(shard);
            let handle = Arc::new(ShardHandle::new(shard, idx));
            let flushed = sm.flushed_index(shard);
            let applied = policy::recovery_applied_index(
                flushed,
                state.truncated_index,
                state.hard_state.commit,
            );
            let (conf_index, conf_state) = (state.conf_index, state.conf_state.clone());
            let storage = ShardStorage::load(
                db.clone(),
                shard,
                state,
                handle.snap.clone(),
                inner.apply_tx(shard),
            )?;
            let _ = inner.apply_tx(shard).send(ApplyMsg::Register {
                handle: handle.clone(),
                applied,
                last_data_index: applied,
                conf_index,
                conf_state,
            });
            let peer = Peer::new(&inner, storage, handle.clone(), applied, &logger)?;
            tracing::info!(
                shard,
                applied,
                flushed,
                first_index = peer_first(&peer),
                "recovered replica"
            );
            *handle.status.lock() = peer.status();
            inner.shards.write().insert(shard, handle);
            peers[idx].push(peer);
            metrics::SHARDS.inc();
        }

        let mut apply_threads = Vec::new();
        for (i, rx) in apply_rxs.into_iter().enumerate() {
            let sm = sm.clone();
            apply_threads.push(
                std::thread::Builder::new()
                    .name(format!("wal-apply-{i}"))
                    .spawn(move || apply::run(rx, sm))
                    .map_err(|e| WalError::Unavailable(format!("spawn apply thread: {e}")))?,
            );
        }
        let mut poll_threads = Vec::new();
        for (i, (rx, peers)) in poll_rxs.into_iter().zip(peers).enumerate() {
            let poller = Poller::new(i, inner.clone(), db.clone(), rx, peers);
            poll_threads.push(
                std::thread::Builder::new()
                    .name(format!("wal-poll-{i}"))
                    .spawn(move || poller.run())
                    .map_err(|e| WalError::Unavailable(format!("spawn poll thread: {e}")))?,
            );
        }
        Ok(Arc::new(Wal {
            inner,
            poll_threads: Mutex::new(poll_threads),
            apply_threads: Mutex::new(apply_threads),
            db: Mutex::new(Some(db)),
            shut_down: AtomicBool::new(false),
        }))
    }

    fn handle(&self, shard: ShardId) -> Result<Arc<ShardHandle>> {
        self.inner
            .shards
            .read()
            .get(&shard)
            .cloned()
            .ok_or(WalError::ShardNotFound(shard))
    }

    fn check_open(&self) -> Result<()> {
        if self.shut_down.load(Ordering::Acquire) {
            Err(WalError::Shutdown)
        } else {
            Ok(())
        }
    }

    /// Create a replica (idempotent). `voters` non-empty bootstraps a new
    /// group with that initial configuration (every initial replica calls
    /// this with the same voters); empty creates a replica that waits to be
    /// added by the leader (learner target).
    pub fn create_replica(&self, shard: ShardId, voters: &[NodeId]) -> Result<()> {
        self.check_open()?;
        if self.has_replica(shard) {
            return Ok(());
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inner.poll_txs[self.inner.poll_idx(shard)]
            .send(PollMsg::Create {
                shard,
                voters: voters.to_vec(),
                tx,
            })
            .map_err(|_| WalError::Shutdown)?;
        rx.recv().map_err(|_| WalError::Shutdown)?
    }

    /// Deletes this node's replica of `shard` and its log (after it was
    /// removed from the group, or to rebuild it). Idempotent.
    pub fn destroy_replica(&self, shard: ShardId) -> Result<()> {
        self.check_open()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.inner.poll_txs[self.inner.poll_idx(shard)]
            .send(PollMsg::Destroy { shard, tx })
            .map_err(|_| WalError::Shutdown)?;
        rx.recv().map_err(|_| WalError::Shutdown)?
    }

    pub fn has_replica(&self, shard: ShardId) -> bool {
        self.inner.shards.read().contains_key(&shard)
    }

    /// Hands a raft message received from the network to its shard.
    pub fn step(&self, shard: ShardId, msg: eraftpb::Message) -> Result<()> {
        let h = self.handle(shard)?;
        self.inner.poll_txs[h.poll_idx]
            .send(PollMsg::Step { shard, msg })
            .map_err(|_| WalError::Shutdown)
    }

    /// Proposes `data` and waits until a quorum has it durably and this
    /// leader has applied it: the apply decides whether the entry is stored
    /// or, on every replica alike, rejected ([`WalError::Rejected`]). Fails
    /// fast with `NotLeader` or `Overloaded`.
    pub async fn propose(&self, shard: ShardId, data: Vec<u8>) -> Result<Committed> {
        self.check_open()?;
        let handle = self.handle(shard)?;
        {
            let st = handle.status.lock();
            if st.role != Role::Leader {
                return Err(WalError::NotLeader {
                    leader_hint: st.leader_id,
                });
            }
        }
        let size = data.len();
        let limit = self.inner.cfg.max_inflight_bytes_per_shard;
        let admitted = handle
            .inflight_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                policy::admit(cur, size, limit).then_some(cur + size)
            })
            .is_ok();
        if !admitted {
            return Err(WalError::Overloaded {
                retry_after_ms: policy::retry_after_ms(
                    handle.commit_micros.load(Ordering::Relaxed),
                ),
            });
        }
        let (tx, rx) = oneshot::channel();
        let sent = self.inner.poll_txs[handle.poll_idx].send(PollMsg::Propose {
            handle: handle.clone(),
            data,
            started: Instant::now(),
            tx,
        });
        if sent.is_err() {
            handle.inflight_bytes.fetch_sub(size, Ordering::AcqRel);
            return Err(WalError::Shutdown);
        }
        // The poll thread fails a proposal not committed within
        // `propose_timeout`; this bounds the wait for its apply as well.
        let limit = self.inner.cfg.propose_timeout * 2;
        match tokio::time::timeout(limit, rx).await {
            Ok(r) => r.map_err(|_| WalError::Shutdown)?,
            Err(_) => Err(WalError::Unavailable(format!(
                "shard {shard}: committed but not applied within {limit:?}{}; the write is durable, a retry is safe",
                stall_note(&handle)
            ))),
        }
    }

    /// A Raft read index: the shard's commit index at the time of the call,
    /// once the leader confirmed it still leads (a follower asks its
    /// leader). Every write acknowledged before the call is at or below it.
    pub async fn read_index(&self, shard: ShardId) -> Result<u64> {
        self.check_open()?;
        let h = self.handle(shard)?;
        let (tx, rx) = oneshot::channel();
        self.inner.poll_txs[h.poll_idx]
            .send(PollMsg::ReadIndex { shard, tx })
            .map_err(|_| WalError::Shutdown)?;
        rx.await.map_err(|_| WalError::Shutdown)?
    }

    /// Waits until this replica has applied `index` (e.g. a read index), at
    /// most `timeout`.
    pub async fn wait_applied(&self, shard: ShardId, index: u64, timeout: Duration) -> Result<()> {
        let h = self.handle(shard)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = h.applied_notify.notified();
            tokio::pin!(notified);
            // Registered before the check, so an apply in between wakes us.
            notified.as_mut().enable();
            let applied = h.applied.load(Ordering::Acquire);
            if applied >= index {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(WalError::Unavailable(format!(
                    "shard {shard}: this replica applied up to {applied}, not {index}, within {timeout:?}{}; read from another replica",
                    stall_note(&h)
                )));
            }
        }
    }

    async fn conf_change(
        &self,
        shard: ShardId,
        change_type: ConfChangeType,
        node: NodeId,
    ) -> Result<()> {
        self.check_open()?;
        let h = self.handle(shard)?;
        let mut cc = ConfChange::default();
        cc.set_change_type(change_type);
        cc.node_id = node;
        let (tx, rx) = oneshot::channel();
        self.inner.poll_txs[h.poll_idx]
            .send(PollMsg::ConfChange { shard, cc, tx })
            .map_err(|_| WalError::Shutdown)?;
        rx.await.map_err(|_| WalError::Shutdown)?
    }

    /// Adds `node` as a learner (it then catches up by log or snapshot).
    /// Returns once the change is committed and applied on this leader.
    pub async fn add_learner(&self, shard: ShardId, node: NodeId) -> Result<()> {
        self.conf_change(shard, ConfChangeType::AddLearnerNode, node)
            .await
    }

    /// Makes learner `node` a voter.
    pub async fn promote_learner(&self, shard: ShardId, node: NodeId) -> Result<()> {
        self.conf_change(shard, ConfChangeType::AddNode, node).await
    }

    /// Removes `node`'s replica (voter or learner) from the group.
    pub async fn remove_replica(&self, shard: ShardId, node: NodeId) -> Result<()> {
        self.conf_change(shard, ConfChangeType::RemoveNode, node)
            .await
    }

    /// Moves leadership to `to`; returns once this replica sees `to` lead.
    pub async fn transfer_leader(&self, shard: ShardId, to: NodeId) -> Result<()> {
        self.check_open()?;
        let h = self.handle(shard)?;
        let (tx, rx) = oneshot::channel();
        self.inner.poll_txs[h.poll_idx]
            .send(PollMsg::TransferLeader { shard, to, tx })
            .map_err(|_| WalError::Shutdown)?;
        rx.await.map_err(|_| WalError::Shutdown)?
    }

    /// State of every replica on this node, by shard.
    pub fn shard_states(&self) -> Vec<ShardStatus> {
        let handles: Vec<Arc<ShardHandle>> = self.inner.shards.read().values().cloned().collect();
        let mut out: Vec<ShardStatus> = handles
            .iter()
            .map(|h| {
                let mut st = h.status.lock().clone();
                st.applied_index = h.applied.load(Ordering::Acquire);
                st.flushed_index = self.inner.sm.flushed_index(h.shard);
                st.inflight_bytes = h.inflight_bytes.load(Ordering::Relaxed);
                st.apply_stalled = h.apply_stall.lock().clone();
                st
            })
            .collect();
        out.sort_by_key(|s| s.shard);
        out
    }

    /// Tells `shard`'s raft that `node` could not be reached.
    pub fn report_unreachable(&self, shard: ShardId, node: NodeId) {
        if let Ok(h) = self.handle(shard) {
            let _ =
                self.inner.poll_txs[h.poll_idx].send(PollMsg::ReportUnreachable { shard, node });
        }
    }

    /// Group-commit counters since open.
    pub fn stats(&self) -> WalStats {
        WalStats {
            synced_batches: self.inner.stats.synced_batches.load(Ordering::Relaxed),
            synced_entries: self.inner.stats.synced_entries.load(Ordering::Relaxed),
        }
    }

    pub fn node_id(&self) -> NodeId {
        self.inner.cfg.node_id
    }

    /// Stops the threads (pending proposals fail with `Shutdown`) and closes
    /// RocksDB, so the directory can be opened again. Idempotent.
    pub fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        for tx in &self.inner.poll_txs {
            let _ = tx.send(PollMsg::Shutdown);
        }
        for t in self.poll_threads.lock().drain(..) {
            let _ = t.join();
        }
        // Apply threads finish what is queued, then stop.
        for tx in &self.inner.apply_txs {
            let _ = tx.send(ApplyMsg::Shutdown);
        }
        for t in self.apply_threads.lock().drain(..) {
            let _ = t.join();
        }
        let n = self.inner.shards.read().len();
        metrics::SHARDS.sub(n as f64);
        let leaders = self
            .inner
            .shards
            .read()
            .values()
            .filter(|h| h.status.lock().role == Role::Leader)
            .count();
        metrics::LEADERS.sub(leaders as f64);
        self.db.lock().take();
        tracing::info!(node_id = self.inner.cfg.node_id, "WAL shut down");
    }
}

/// ` (apply stalled at index I: <error>)` when the shard's apply is stuck.
fn stall_note(h: &ShardHandle) -> String {
    match h.apply_stall.lock().as_ref() {
        Some(st) => format!(" (apply stalled at index {}: {})", st.index, st.error),
        None => String::new(),
    }
}

fn peer_first(p: &Peer) -> u64 {
    p.first_index()
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.shutdown();
    }
}
