//! Poll threads: each owns a set of shards' `RawNode`s and runs the batched
//! Ready loop (TiKV raftstore style): collect every shard's Ready, merge all
//! log entries and hard states into ONE RocksDB write batch synced once,
//! then send the messages that required persistence and advance each group.

mod peer;
mod ready;
mod rebuild;
mod requests;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use raft::eraftpb::Message;
use raft::RawNode;
use rocksdb::DB;
use tokio::sync::oneshot;

use crate::clock::{self, Clock};
use crate::error::{Result, WalError};
use crate::handle::ShardHandle;
use crate::messages::{ApplyMsg, PollMsg};
use crate::shared::Inner;
use crate::storage::ShardStorage;
use crate::{Committed, NodeId, ShardId};

pub use peer::{load_states, raft_logger};

struct Proposal {
    index: u64,
    term: u64,
    size: usize,
    started: Instant,
    tx: oneshot::Sender<Result<Committed>>,
}

struct ConfWaiter {
    index: u64,
    term: u64,
    started: Instant,
    tx: oneshot::Sender<Result<()>>,
}

struct ReadWaiter {
    ctx: Vec<u8>,
    deadline: Instant,
    tx: oneshot::Sender<Result<u64>>,
}

struct TransferWaiter {
    to: NodeId,
    deadline: Instant,
    tx: oneshot::Sender<Result<()>>,
}

/// A Ready carrying a snapshot, held while the apply thread restores it.
struct HeldReady {
    ready: raft::Ready,
    index: u64,
    restored: bool,
}

pub struct Peer {
    shard: ShardId,
    node: RawNode<ShardStorage>,
    handle: Arc<ShardHandle>,
    apply_tx: Sender<ApplyMsg>,
    /// This shard's poll thread, told when a restore is done.
    poll_tx: Sender<PollMsg>,
    /// Set while a received snapshot is being restored.
    restore: Option<HeldReady>,
    /// Set while this replica is to be rebuilt from its leader's snapshot.
    rebuild: Option<rebuild::RebuildState>,
    proposals: VecDeque<Proposal>,
    conf_waiters: Vec<ConfWaiter>,
    transfer: Option<TransferWaiter>,
    reads: VecDeque<ReadWaiter>,
    next_read_ctx: u64,
    is_leader: bool,
    state_dirty: bool,
    clock: Clock,
}

pub struct Poller {
    idx: usize,
    inner: Arc<Inner>,
    db: Arc<DB>,
    rx: Receiver<PollMsg>,
    peers: BTreeMap<ShardId, Peer>,
    out: HashMap<NodeId, Vec<(ShardId, Message)>>,
    snapshots_sent: Vec<(ShardId, NodeId)>,
    /// Callers of [`PollMsg::Barrier`], answered after a round that left
    /// no work pending.
    barriers: Vec<Sender<()>>,
    logger: slog::Logger,
}

impl Poller {
    pub fn new(
        idx: usize,
        inner: Arc<Inner>,
        db: Arc<DB>,
        rx: Receiver<PollMsg>,
        peers: Vec<Peer>,
    ) -> Poller {
        Poller {
            idx,
            inner,
            db,
            rx,
            peers: peers.into_iter().map(|p| (p.shard, p)).collect(),
            out: HashMap::new(),
            snapshots_sent: Vec::new(),
            barriers: Vec::new(),
            logger: raft_logger(),
        }
    }

    pub fn run(mut self) {
        let cfg = self.inner.cfg.clone();
        let clock = self.inner.clock.clone();
        let mut next_tick = clock.now() + cfg.tick_interval;
        let mut next_compact = clock.now() + cfg.compact_interval;
        let mut busy = false;
        'outer: loop {
            // Wait for work, at most until the next tick.
            let timeout = if busy {
                Some(Duration::ZERO)
            } else {
                clock.wait_limit(next_tick)
            };
            let first = match clock::recv_until(&self.rx, timeout) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let mut pending = first;
            // Drain what queued up, bounded so ticks stay on time.
            for _ in 0..4096 {
                let Some(m) = pending.take() else { break };
                if matches!(m, PollMsg::Shutdown) {
                    break 'outer;
                }
                self.handle_msg(m);
                pending = self.rx.try_recv().ok();
            }
            if let Some(m) = pending {
                if matches!(m, PollMsg::Shutdown) {
                    break;
                }
                self.handle_msg(m);
            }
            let now = clock.now();
            let ticked = now >= next_tick;
            if ticked {
                next_tick = now + cfg.tick_interval;
                // A shard restoring a snapshot stays still (see `Step`).
                for p in self.peers.values_mut().filter(|p| p.restore.is_none()) {
                    p.node.tick();
                }
                self.check_timeouts();
                self.drive_rebuilds();
            }
            let compact = now >= next_compact;
            if compact {
                next_compact = now + cfg.compact_interval;
            }
            busy = self.round(compact, ticked);
            if !busy {
                for tx in self.barriers.drain(..) {
                    let _ = tx.send(());
                }
            }
        }
        for p in self.peers.values_mut() {
            p.fail_waiters(|| WalError::Shutdown);
        }
    }
}
