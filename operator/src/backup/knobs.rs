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

/// Slowest rate limit a caller may ask for, MB/s per node. A node's shard
/// call ends after an hour (`node::SHARD_CALL_TIMEOUT`), so at 0.1 MB/s a
/// shard may move at most 360 MB; a slower limit fails all but tiny
/// shards, and below 10^-6 MB/s the bytes per second round to 0, which
/// the nodes read as no limit at all.
pub const MIN_MB_PER_SEC: f64 = 0.1;

/// A rate limit in MB/s (10^6 bytes) per node as [`Options::max_bytes_per_sec`]:
/// 0 is no limit; otherwise at least [`MIN_MB_PER_SEC`]. The error says
/// what to give instead (`what` names the setting: `--max-mb-s`,
/// `spec.maxMbPerSecond`).
pub fn max_bytes_per_sec(what: &str, mb_per_sec: f64) -> Result<u64, String> {
    if mb_per_sec == 0.0 {
        return Ok(0);
    }
    if !mb_per_sec.is_finite() || mb_per_sec < MIN_MB_PER_SEC {
        return Err(format!(
            "{what} is {mb_per_sec}: give 0 (no limit) or at least {MIN_MB_PER_SEC} MB/s per node (10^6 bytes per second), e.g. 50"
        ));
    }
    Ok((mb_per_sec * 1e6).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_is_megabytes_per_second_and_zero_is_none() {
        assert_eq!(max_bytes_per_sec("x", 0.0), Ok(0));
        assert_eq!(max_bytes_per_sec("x", 50.0), Ok(50_000_000));
        assert_eq!(max_bytes_per_sec("x", 0.1), Ok(100_000));
        assert_eq!(max_bytes_per_sec("x", 2.5), Ok(2_500_000));
    }

    #[test]
    fn a_rate_limit_too_slow_to_finish_or_not_a_number_is_refused() {
        for bad in [-1.0, 0.05, 1e-7, f64::NAN, f64::INFINITY] {
            let e = max_bytes_per_sec("spec.maxMbPerSecond", bad).unwrap_err();
            assert!(e.starts_with("spec.maxMbPerSecond is "), "{e}");
            assert!(e.contains("at least 0.1 MB/s"), "{e}");
        }
    }
}
