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
mod clock;
mod config;
mod disk;
mod edges;
mod error;
mod handle;
pub mod inspect;
mod keys;
mod messages;
pub mod metrics;
mod policy;
mod poller;
mod shared;
mod snapshot;
mod status;
mod storage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Receiver;
use parking_lot::{Mutex, RwLock};
use raft::eraftpb::{ConfChange, ConfChangeType};
use rocksdb::DB;
use tokio::sync::oneshot;

pub use clock::TickSource;
pub use config::WalConfig;
pub use disk::{DiskFaults, FAIL_STOP_EXIT_CODE};
pub use edges::{ApplyOutcome, StateMachine, StateMachineError, Transport};
pub use error::{Result, WalError};
pub use raft;
pub use raft::eraftpb;
pub use status::{ApplyStall, Committed, Rebuild, Role, ShardStatus, WalMemory, WalStats};

use clock::Clock;
use handle::ShardHandle;
use messages::{ApplyMsg, PollMsg};
use poller::{Peer, Poller};
use shared::{Inner, StatsCounters};
use storage::ShardStorage;

pub type ShardId = u32;
pub type NodeId = u64;

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
    // A torn last record (a crash mid-write) is dropped, as it was never
    // acknowledged; damage anywhere else fails the open (and the WAL is set
    // aside, see `Wal::open`) instead of silently cutting the log short.
    o.set_wal_recovery_mode(rocksdb::DBRecoveryMode::TolerateCorruptedTailRecords);
    if let Some(rate) = policy::sst_rate_limit(cfg.sst_write_bytes_per_sec) {
        // 100 ms refill, RocksDB's default fairness.
        o.set_ratelimiter(rate, 100_000, 10);
    }
    DB::open(&o, &cfg.dir).map_err(|source| WalError::Storage {
        context: Some(format!(
            "cannot open the WAL RocksDB at {}",
            cfg.dir.display()
        )),
        source,
    })
}

/// Recovery: every replica with a state record comes back, registered with
/// its apply thread; returns them per poll thread.
fn recover_peers(inner: &Arc<Inner>, db: &Arc<DB>, n_poll: usize) -> Result<Vec<Vec<Peer>>> {
    let logger = poller::raft_logger();
    let mut peers: Vec<Vec<Peer>> = (0..n_poll).map(|_| Vec::new()).collect();
    for (shard, state) in poller::load_states(db)? {
        let idx = inner.poll_idx(shard);
        let handle = Arc::new(ShardHandle::new(shard, idx));
        let flushed = inner.sm.flushed_index(shard);
        let applied =
            policy::recovery_applied_index(flushed, state.truncated_index, state.hard_state.commit);
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
        let peer = Peer::new(inner, storage, handle.clone(), applied, &logger)?;
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
    Ok(peers)
}

fn spawn_apply_threads(
    inner: &Arc<Inner>,
    apply_rxs: Vec<Receiver<ApplyMsg>>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut apply_threads = Vec::new();
    for (i, rx) in apply_rxs.into_iter().enumerate() {
        let sm = inner.sm.clone();
        let clock = inner.clock.clone();
        apply_threads.push(
            std::thread::Builder::new()
                .name(format!("wal-apply-{i}"))
                .spawn(move || apply::run(rx, sm, clock))
                .map_err(|e| WalError::Unavailable(format!("spawn apply thread: {e}")))?,
        );
    }
    Ok(apply_threads)
}

fn spawn_poll_threads(
    inner: &Arc<Inner>,
    db: &Arc<DB>,
    poll_rxs: Vec<Receiver<PollMsg>>,
    peers: Vec<Vec<Peer>>,
) -> Result<Vec<JoinHandle<()>>> {
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
    Ok(poll_threads)
}

impl Wal {
    /// Opens (or creates) the WAL in `cfg.dir`, reloads every replica
    /// persisted there and starts the poll and apply threads. A WAL found
    /// damaged (a RocksDB checksum, a log entry that does not decode) is
    /// moved aside and the node starts with an empty one: its replicas are
    /// created again from the shard map and caught up by their leaders
    /// (disk.rs, docs/operations.md "Disk faults").
    pub fn open(
        cfg: WalConfig,
        transport: Arc<dyn Transport>,
        sm: Arc<dyn StateMachine>,
    ) -> Result<Arc<Wal>> {
        match Wal::open_dir(cfg.clone(), transport.clone(), sm.clone(), false) {
            Err(e) if disk::is_damage(&e) => {
                disk::set_aside(&cfg.dir, &e)?;
                Wal::open_dir(cfg, transport, sm, true)
            }
            r => r,
        }
    }

    /// `damaged`: the WAL there was just set aside; replicas created from
    /// now on are rebuilt from their leaders' snapshots.
    fn open_dir(
        cfg: WalConfig,
        transport: Arc<dyn Transport>,
        sm: Arc<dyn StateMachine>,
        damaged: bool,
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
            clock: Clock::new(cfg.ticks),
            disk: disk::WalDisk::new(
                cfg.node_id,
                &cfg.dir,
                cfg.disk_reserve_bytes,
                cfg.disk_faults.clone(),
                damaged,
            ),
        });

        let peers = recover_peers(&inner, &db, n_poll)?;
        let apply_threads = spawn_apply_threads(&inner, apply_rxs)?;
        let poll_threads = spawn_poll_threads(&inner, &db, poll_rxs, peers)?;
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
        let log_bytes = {
            let st = handle.status.lock();
            if st.role != Role::Leader {
                return Err(WalError::NotLeader {
                    leader_hint: st.leader_id,
                });
            }
            st.log_bytes
        };
        let max_log = self.inner.cfg.max_log_bytes_per_shard;
        self.inner.disk.admit(shard, log_bytes, max_log)?;
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
            started: self.inner.clock.now(),
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

    /// Rebuilds this node's replica of `shard` from its leader's snapshot
    /// (replacing its state machine's copy); a leader first hands
    /// leadership to another voter. Returns once the rebuild is under way;
    /// `ShardStatus::rebuilding` is set until the snapshot is restored.
    pub async fn rebuild_replica(&self, shard: ShardId) -> Result<()> {
        self.rebuild_for(shard, Rebuild::Manual).await
    }

    /// [`Wal::rebuild_replica`] for a replica whose state machine found its
    /// stored copy damaged (reported and counted as `damaged`).
    pub async fn rebuild_damaged_replica(&self, shard: ShardId) -> Result<()> {
        self.rebuild_for(shard, Rebuild::Damaged).await
    }

    async fn rebuild_for(&self, shard: ShardId, why: Rebuild) -> Result<()> {
        self.check_open()?;
        let h = self.handle(shard)?;
        let (tx, rx) = oneshot::channel();
        self.inner.poll_txs[h.poll_idx]
            .send(PollMsg::Rebuild { shard, why, tx })
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

    /// Tells `shard`'s raft whether the snapshot sent to `node` arrived
    /// (the peer stepped it) or was lost (the leader sends it again after
    /// probing). Only transports that [report snapshots](Transport::reports_snapshots) call this.
    pub fn report_snapshot(&self, shard: ShardId, node: NodeId, delivered: bool) {
        if let Ok(h) = self.handle(shard) {
            let _ = self.inner.poll_txs[h.poll_idx].send(PollMsg::ReportSnapshot {
                shard,
                node,
                delivered,
            });
        }
    }

    /// Group-commit counters since open.
    pub fn stats(&self) -> WalStats {
        WalStats {
            synced_batches: self.inner.stats.synced_batches.load(Ordering::Relaxed),
            synced_entries: self.inner.stats.synced_entries.load(Ordering::Relaxed),
        }
    }

    /// What RocksDB holds in memory now (zeros once shut down).
    pub fn memory(&self) -> WalMemory {
        let Some(db) = self.db.lock().clone() else {
            return WalMemory::default();
        };
        let prop = |name: &str| db.property_int_value(name).ok().flatten().unwrap_or(0);
        WalMemory {
            memtables: prop("rocksdb.cur-size-all-mem-tables"),
            sst_readers: prop("rocksdb.estimate-table-readers-mem"),
        }
    }

    /// With [`TickSource::Manual`]: moves this node's clock one
    /// `tick_interval`, so every replica ticks once (elections, heartbeats)
    /// and deadlines and apply retries that fell due fire.
    pub fn tick(&self) -> Result<()> {
        self.check_open()?;
        if !self.inner.clock.advance(self.inner.cfg.tick_interval) {
            return Err(WalError::InvalidArgument(
                "this WAL ticks on the wall clock; open it with TickSource::Manual to tick by hand"
                    .into(),
            ));
        }
        for tx in &self.inner.poll_txs {
            tx.send(PollMsg::Tick).map_err(|_| WalError::Shutdown)?;
        }
        for tx in &self.inner.apply_txs {
            tx.send(ApplyMsg::Tick).map_err(|_| WalError::Shutdown)?;
        }
        Ok(())
    }

    /// Returns once this WAL handled everything handed to it before the
    /// call: each poll thread ran its Ready rounds until none was pending
    /// (their messages are with the transport), each apply thread applied
    /// what was committed (a stalled entry excepted), and the poll threads
    /// saw those applied indexes. Lets a test step the WAL deterministically.
    pub fn barrier(&self) -> Result<()> {
        self.check_open()?;
        self.poll_barrier()?;
        let mut waits = Vec::new();
        for tx in &self.inner.apply_txs {
            let (done, wait) = crossbeam_channel::bounded(1);
            tx.send(ApplyMsg::Barrier(done))
                .map_err(|_| WalError::Shutdown)?;
            waits.push(wait);
        }
        for w in waits {
            w.recv().map_err(|_| WalError::Shutdown)?;
        }
        self.poll_barrier()
    }

    fn poll_barrier(&self) -> Result<()> {
        let mut waits = Vec::new();
        for tx in &self.inner.poll_txs {
            let (done, wait) = crossbeam_channel::bounded(1);
            tx.send(PollMsg::Barrier(done))
                .map_err(|_| WalError::Shutdown)?;
            waits.push(wait);
        }
        for w in waits {
            w.recv().map_err(|_| WalError::Shutdown)?;
        }
        Ok(())
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
