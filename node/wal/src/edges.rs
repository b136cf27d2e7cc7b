//! The WAL's two edges: the network its Raft messages leave through and
//! the state machine its committed entries are applied to.

use shardhouse_common::status::{ErrorExt, StatusCode};

use crate::{eraftpb, NodeId, ShardId};

/// Delivers raft messages to other nodes.
pub trait Transport: Send + Sync + 'static {
    /// Deliver raft messages to other nodes (best effort; may drop). `msgs`
    /// are (shard, message) pairs, all for `to`. Called from poll threads:
    /// must not block.
    fn send(&self, to: NodeId, msgs: Vec<(ShardId, eraftpb::Message)>);

    /// Whether this transport reports the outcome of every snapshot it is
    /// given ([`Wal::report_snapshot`](crate::Wal::report_snapshot)) once
    /// the peer has it or the send failed. If not (the default), a snapshot
    /// is taken as delivered as soon as it is handed over, and the leader
    /// probes the follower at once: fine for small snapshots; a large one
    /// still in transit is then rejected and generated again.
    fn reports_snapshots(&self) -> bool {
        false
    }
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
    /// gets [`WalError::Rejected`](crate::WalError::Rejected) with this reason.
    Rejected(String),
}

/// A state machine call that failed but may pass (the engine is
/// unavailable, a disk is full): the WAL keeps the entry and retries it,
/// it never skips it (see [`StateMachine::apply`]). It keeps its source and
/// that source's status code; a decision that an entry can never be
/// stored is not an error but [`ApplyOutcome::Rejected`].
///
/// One kind is enough: the WAL handles every failed call alike (apply and
/// restore stall the shard and retry with backoff, up to a rebuild; a
/// failed snapshot is asked for again).
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct StateMachineError {
    /// What the state machine was doing (`shard 3 index 7`).
    context: String,
    status: StatusCode,
    #[source]
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl StateMachineError {
    /// A failure of the status model's errors: keeps `source`'s status code.
    pub fn new<E>(context: impl Into<String>, source: E) -> StateMachineError
    where
        E: ErrorExt + Send + Sync + 'static,
    {
        StateMachineError {
            context: context.into(),
            status: source.status_code(),
            source: Box::new(source),
        }
    }

    /// A failure from outside the status model (an injected test fault):
    /// `Unavailable`, the WAL retries it.
    pub fn other(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> StateMachineError {
        StateMachineError {
            context: context.into(),
            status: StatusCode::Unavailable,
            source: source.into(),
        }
    }
}

impl ErrorExt for StateMachineError {
    fn status_code(&self) -> StatusCode {
        self.status
    }
}

/// What committed entries are applied to (the node's engine).
pub trait StateMachine: Send + Sync + 'static {
    /// Called in index order per shard, from WAL apply threads (blocking is
    /// OK there). Only entries carrying caller data are passed.
    ///
    /// `Err` is a failure that may pass (the engine is unavailable): the
    /// entry is NOT skipped. The shard's apply stops there and the same
    /// entry is retried with backoff; [`ShardStatus::apply_stalled`](crate::ShardStatus::apply_stalled) says why.
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &bytes::Bytes,
    ) -> std::result::Result<ApplyOutcome, StateMachineError>;
    /// Highest index whose effects are durable in the state machine. The
    /// log is compacted up to it, and on restart entries above it are
    /// applied again.
    fn flushed_index(&self, shard: ShardId) -> u64;
    /// All of the shard's state, reflecting every entry applied so far, and
    /// the index it covers. Called on the shard's apply thread.
    fn snapshot(&self, shard: ShardId) -> std::result::Result<(u64, Vec<u8>), StateMachineError>;
    /// Replace the shard's state by a snapshot covering `index`.
    fn restore(
        &self,
        shard: ShardId,
        index: u64,
        data: &[u8],
    ) -> std::result::Result<(), StateMachineError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("disk full")]
    struct Full;

    impl ErrorExt for Full {
        fn status_code(&self) -> StatusCode {
            StatusCode::StorageFull
        }
    }

    #[test]
    fn a_state_machine_error_keeps_its_source_and_its_status() {
        let e = StateMachineError::new("shard 3 index 7", Full);
        assert_eq!(e.to_string(), "shard 3 index 7: disk full");
        assert_eq!(e.status_code(), StatusCode::StorageFull);
        let source = std::error::Error::source(&e).expect("a source");
        assert!(source.downcast_ref::<Full>().is_some());

        let e = StateMachineError::other("shard 3 index 7", "injected failure");
        assert_eq!(e.to_string(), "shard 3 index 7: injected failure");
        assert_eq!(e.status_code(), StatusCode::Unavailable);
        assert!(e.status_code().is_retryable());
    }
}
