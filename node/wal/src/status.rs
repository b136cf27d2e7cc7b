//! What the WAL reports: a proposal's position, each replica's state and
//! the group-commit counters.

use crate::{NodeId, ShardId};

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

/// One replica's state, as reported by [`Wal::shard_states`](crate::Wal::shard_states).
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
    /// Bytes of entries in the log (not yet compacted, which waits for the
    /// engine's flush); approximate after a compaction.
    pub log_bytes: u64,
    /// Set while the state machine keeps failing to apply the next entry:
    /// the failure, and how many attempts were made. The shard's applied
    /// index stays below that entry until it succeeds.
    pub apply_stalled: Option<ApplyStall>,
    /// Set from the moment this replica is to be rebuilt from its leader's
    /// snapshot (apply stuck past the bound, or asked by hand) until the
    /// snapshot is in its state machine.
    pub rebuilding: Option<Rebuild>,
}

/// Why a replica is being rebuilt from a peer's snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// Its apply failed `rebuild_after_failed_applies` times at one entry.
    Automatic,
    /// [`Wal::rebuild_replica`](crate::Wal::rebuild_replica) (shardhouse-ctl).
    Manual,
    /// Its state machine's stored copy was found damaged
    /// ([`Wal::rebuild_damaged_replica`](crate::Wal::rebuild_damaged_replica)).
    Damaged,
}

impl Rebuild {
    pub fn as_str(self) -> &'static str {
        match self {
            Rebuild::Automatic => "auto",
            Rebuild::Manual => "manual",
            Rebuild::Damaged => "damaged",
        }
    }
}

/// Why a shard's apply is stuck (see [`StateMachine::apply`](crate::StateMachine::apply)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyStall {
    /// Index of the entry that keeps failing.
    pub index: u64,
    pub error: String,
    pub attempts: u32,
}

/// Memory the WAL's RocksDB holds outside the Rust heap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalMemory {
    /// Active and immutable memtables (`rocksdb.cur-size-all-mem-tables`):
    /// up to `max_write_buffer_number` x the write buffer size.
    pub memtables: u64,
    /// Index and filter blocks of open SST files
    /// (`rocksdb.estimate-table-readers-mem`).
    pub sst_readers: u64,
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
