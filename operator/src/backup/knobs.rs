//! What a caller of a backup or restore run chooses, in one place so that
//! `shardhouse-ctl` and the controllers hand the same settings to both.

/// How a backup or restore runs.
///
/// The public functions write their lines to `out: &mut (dyn Write +
/// Send)`, so that their futures are `Send` (a controller's reconcile).
#[derive(Debug, Clone)]
pub struct Knobs {
    /// Shards worked on at once (bounds the cluster-wide I/O).
    pub parallel_shards: usize,
    /// Files each node uploads or downloads at once.
    pub jobs: u32,
}

impl Default for Knobs {
    /// The ctl's defaults: 2 shards at once, 4 files per node.
    fn default() -> Knobs {
        Knobs {
            parallel_shards: 2,
            jobs: 4,
        }
    }
}

/// What else a run may ask for, apart from [`Knobs`] so that callers
/// building `Knobs { parallel_shards, jobs }` keep compiling; used by
/// [`create_with`] and [`restore_with`] (`Options::default()`: what
/// [`create`] and [`restore`] do).
///
/// [`create`]: crate::backup::create
/// [`create_with`]: crate::backup::create_with
/// [`restore`]: crate::backup::restore
/// [`restore_with`]: crate::backup::restore_with
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Upload rate limit of a backup, or download rate limit of a
    /// restore, on each node, bytes per second (0 = none); shared by the
    /// shards a node backs up or restores at once.
    pub max_bytes_per_sec: u64,
    /// Progress redrawn in place on one line (stdout is a terminal);
    /// otherwise one `progress` line per shard.
    pub live_progress: bool,
    /// Restore only this database (its tables and series catalog).
    pub database: Option<String>,
}
