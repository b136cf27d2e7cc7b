//! The messages between the WAL's threads, in one place: what callers and
//! the apply threads ask of a poll thread ([`PollMsg`]), what a poll thread
//! hands an apply thread ([`ApplyMsg`]), and their payloads. Plain data;
//! the threads that handle them are poller/ and apply.rs.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::Sender;
use raft::eraftpb::{ConfChange, ConfState, Message};
use tokio::sync::oneshot;

use crate::error::{Result, WalError};
use crate::handle::ShardHandle;
use crate::{ApplyOutcome, Committed, NodeId, Rebuild, ShardId};

/// A request to a poll thread.
pub enum PollMsg {
    Step {
        shard: ShardId,
        msg: Message,
    },
    Propose {
        handle: Arc<ShardHandle>,
        data: Vec<u8>,
        started: Instant,
        tx: oneshot::Sender<Result<Committed>>,
    },
    ConfChange {
        shard: ShardId,
        cc: ConfChange,
        tx: oneshot::Sender<Result<()>>,
    },
    TransferLeader {
        shard: ShardId,
        to: NodeId,
        tx: oneshot::Sender<Result<()>>,
    },
    ReportUnreachable {
        shard: ShardId,
        node: NodeId,
    },
    /// The transport delivered (or failed to deliver) a snapshot to `node`.
    ReportSnapshot {
        shard: ShardId,
        node: NodeId,
        delivered: bool,
    },
    /// A Raft read index: the commit index once leadership is confirmed.
    ReadIndex {
        shard: ShardId,
        tx: oneshot::Sender<Result<u64>>,
    },
    Create {
        shard: ShardId,
        voters: Vec<NodeId>,
        tx: Sender<Result<()>>,
    },
    Destroy {
        shard: ShardId,
        tx: Sender<Result<()>>,
    },
    /// The apply thread restored a received snapshot into the state
    /// machine; the shard's held Ready may go on.
    Restored {
        shard: ShardId,
        index: u64,
    },
    /// Rebuild this replica from its leader's snapshot.
    Rebuild {
        shard: ShardId,
        why: Rebuild,
        tx: oneshot::Sender<Result<()>>,
    },
    /// A manual clock moved: wakes the thread to tick.
    Tick,
    /// Answered once everything sent before it is handled and a round left
    /// no work pending (its messages are with the transport).
    Barrier(Sender<()>),
    Shutdown,
}

/// Work for an apply thread.
pub enum ApplyMsg {
    Register {
        handle: Arc<ShardHandle>,
        applied: u64,
        /// Last index known to have carried data (conservatively `applied`
        /// after a restart, 0 for a new replica).
        last_data_index: u64,
        conf_index: u64,
        conf_state: ConfState,
    },
    Unregister {
        shard: ShardId,
    },
    Entries {
        shard: ShardId,
        items: Vec<ApplyItem>,
    },
    GenSnapshot {
        shard: ShardId,
    },
    /// Replace the shard's state by a received snapshot. Jumps the queue:
    /// entries waiting behind a stalled one at or below `index` are covered
    /// by the snapshot. A failure is retried with backoff like a failed
    /// apply (reported as the shard's stall); `done` hears only of success.
    Restore(PendingRestore),
    /// A manual clock moved: retry stalled entries that are due.
    Tick,
    /// Answered once everything sent before it is handled.
    Barrier(Sender<()>),
    Shutdown,
}

/// One committed entry as the apply thread sees it.
pub struct ApplyItem {
    pub index: u64,
    /// Caller bytes of a normal entry; None for empty and conf change entries.
    pub data: Option<Bytes>,
    /// The configuration in force after this entry, if it changed it.
    pub conf_state: Option<ConfState>,
    /// In-flight proposal bytes to release once applied (leader's own proposals).
    pub release: usize,
    /// The leader's proposer, answered once the entry is applied: only then
    /// is it known whether the entry was stored or rejected.
    pub waiter: Option<ApplyWaiter>,
}

/// A proposer waiting for its committed entry's apply outcome.
pub struct ApplyWaiter {
    pub committed: Committed,
    pub tx: oneshot::Sender<Result<Committed>>,
}

impl ApplyWaiter {
    pub(crate) fn answer(self, outcome: &ApplyOutcome) {
        let r = match outcome {
            ApplyOutcome::Applied => Ok(self.committed),
            ApplyOutcome::Rejected(reason) => Err(WalError::Rejected(reason.clone())),
        };
        let _ = self.tx.send(r);
    }
}

/// A snapshot to restore, kept until the state machine took it.
pub struct PendingRestore {
    pub shard: ShardId,
    pub index: u64,
    pub conf_state: ConfState,
    pub data: Bytes,
    /// Told once the state machine holds the snapshot, so the poll thread
    /// replaces the log (it never waits for this).
    pub done: Sender<PollMsg>,
}
