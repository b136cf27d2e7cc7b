//! The WAL's settings.

use std::path::PathBuf;
use std::time::Duration;

use crate::{NodeId, TickSource};

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
    /// A replica whose apply failed this many times at the same entry is
    /// rebuilt from its leader's snapshot (a leader hands leadership to a
    /// healthy voter first). With the 100 ms-doubling retry backoff, 10
    /// attempts is about a minute. 0 = never automatically (by hand with
    /// [`Wal::rebuild_replica`](crate::Wal::rebuild_replica) only).
    pub rebuild_after_failed_applies: u32,
    /// Proposals are refused ([`WalError::DiskFull`](crate::WalError)) while
    /// the WAL filesystem has less free space than this, so RocksDB itself
    /// rarely meets a full disk.
    pub disk_reserve_bytes: u64,
    /// Proposals on a shard are refused (429, retry after 1 s) while its log
    /// holds more than this many bytes: entries the engine has not flushed
    /// stay in the log, so a failing engine disk fills the WAL's instead.
    pub max_log_bytes_per_shard: u64,
    /// A leader keeps up to this many bytes of log beyond its own compaction
    /// point for followers that are behind (a learner installing a snapshot,
    /// a restarted or slow replica), so they catch up from the log instead
    /// of being sent snapshot after snapshot. Capped at a quarter of
    /// `max_log_bytes_per_shard`, so it never causes write backpressure.
    pub follower_log_retention_bytes: u64,
    /// Test faults of the write path; default off.
    pub disk_faults: crate::DiskFaults,
    /// Wall-clock ticks in production; [`TickSource::Manual`] lets a test
    /// step time with [`Wal::tick`](crate::Wal::tick).
    pub ticks: TickSource,
}

impl WalConfig {
    /// The log a leader may keep for lagging followers, in bytes per shard.
    pub fn effective_follower_retention(&self) -> u64 {
        self.follower_log_retention_bytes
            .min(self.max_log_bytes_per_shard / 4)
    }
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
            // With log retention a catching-up follower is sent appends
            // from the log; this bounds what one Ready reads and queues for
            // it (x max_size_per_msg = 256 MiB).
            max_inflight_msgs: 64,
            entry_cache_bytes_per_shard: 32 << 20,
            write_buffer_bytes: 256 << 20,
            sst_bytes_per_sync: 1 << 20,
            sst_write_bytes_per_sec: 48 << 20,
            rebuild_after_failed_applies: 10,
            disk_reserve_bytes: 64 << 20,
            max_log_bytes_per_shard: 4 << 30,
            follower_log_retention_bytes: 512 << 20,
            disk_faults: crate::DiskFaults::default(),
            ticks: TickSource::WallClock,
        }
    }
}
