//! Pure decisions of the WAL, kept free of I/O so they are unit-tested:
//! admission control and log compaction.

/// Whether a proposal of `size` bytes may enter a shard that already has
/// `inflight` bytes proposed and not yet applied. A proposal larger than the
/// whole limit is still admitted into an idle shard, or it could never pass.
pub fn admit(inflight: usize, size: usize, limit: usize) -> bool {
    inflight == 0 || inflight.saturating_add(size) <= limit
}

/// How long an overloaded caller should wait before retrying: about the time
/// the shard needs to commit what is queued, from the recent mean commit
/// latency, bounded to [10 ms, 5 s].
pub fn retry_after_ms(mean_commit_micros: u64) -> u64 {
    (mean_commit_micros.saturating_mul(2) / 1000).clamp(10, 5000)
}

/// Exponentially weighted moving average step (weight 1/8), in integers.
pub fn ewma(prev: u64, sample: u64) -> u64 {
    if prev == 0 {
        sample
    } else {
        prev - prev / 8 + sample / 8
    }
}

/// The index up to which a shard's log may be compacted now, or None.
///
/// Entries are only needed by the local state machine until they are
/// durable in it (`flushed`), and never beyond what was applied. Compacting
/// in steps of at least `min_step` entries keeps RocksDB range deletions few.
pub fn compaction_target(
    truncated: u64,
    applied: u64,
    flushed: u64,
    last_index: u64,
    min_step: u64,
) -> Option<u64> {
    let target = flushed.min(applied).min(last_index);
    if target > truncated && target - truncated >= min_step.max(1) {
        Some(target)
    } else {
        None
    }
}

/// How far a leader may compact given what its followers still need.
///
/// Compacting to the local target alone loses a follower that is behind:
/// under steady writes a learner installing a snapshot for 10-20 s came back
/// to a log already compacted past the snapshot, was sent another one, and
/// never caught up (the 30-minute soak; chaos scenario 5 at high load). So a
/// leader keeps, for each follower, the entries after what it `needs` (its
/// matched index, or the index of the snapshot it is being sent), as long as
/// keeping them costs at most `retain_bytes` of log. A follower further
/// behind than that is left to a snapshot, so one dead replica cannot grow
/// the log without bound. `log_bytes` over `(truncated, last_index]` gives
/// the bytes per entry.
pub fn retain_for_followers(
    local_target: u64,
    needs: impl IntoIterator<Item = u64>,
    truncated: u64,
    last_index: u64,
    log_bytes: u64,
    retain_bytes: u64,
) -> u64 {
    let entries = last_index.saturating_sub(truncated).max(1);
    let bytes_per_entry = (log_bytes / entries).max(1);
    needs
        .into_iter()
        .filter(|&need| need < local_target)
        .filter(|&need| (local_target - need).saturating_mul(bytes_per_entry) <= retain_bytes)
        .fold(local_target, u64::min)
        .max(truncated)
}

/// The initial applied index given to raft-rs on open: committed entries
/// above it are re-delivered to the state machine. It must lie within
/// [truncated, commit].
pub fn recovery_applied_index(flushed: u64, truncated: u64, commit: u64) -> u64 {
    flushed.max(truncated).min(commit.max(truncated))
}

/// Delay before retrying an entry whose apply failed `attempts` times:
/// 100 ms doubling to 10 s, so a stuck shard costs a log line and an engine
/// call every 10 s, not a busy loop.
pub fn apply_retry_delay(attempts: u32) -> std::time::Duration {
    let ms = 100u64.saturating_mul(1u64 << attempts.saturating_sub(1).min(10));
    std::time::Duration::from_millis(ms.min(10_000))
}

/// The RocksDB rate limit for `sst_write_bytes_per_sec`: None = unlimited.
pub fn sst_rate_limit(bytes_per_sec: u64) -> Option<i64> {
    match bytes_per_sec {
        0 => None,
        n => Some(i64::try_from(n).unwrap_or(i64::MAX)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_bounds_inflight_bytes() {
        assert!(admit(0, 10, 100));
        assert!(admit(90, 10, 100));
        assert!(!admit(91, 10, 100));
        // An oversized proposal only passes into an idle shard.
        assert!(admit(0, 1000, 100));
        assert!(!admit(1, 1000, 100));
        assert!(!admit(usize::MAX, 1, 100));
    }

    #[test]
    fn retry_after_is_bounded() {
        assert_eq!(retry_after_ms(0), 10);
        assert_eq!(retry_after_ms(50_000), 100);
        assert_eq!(retry_after_ms(u64::MAX), 5000);
    }

    #[test]
    fn ewma_moves_towards_samples() {
        assert_eq!(ewma(0, 800), 800);
        assert_eq!(ewma(800, 1600), 900);
        assert_eq!(ewma(800, 800), 800);
    }

    #[test]
    fn compaction_never_passes_applied_or_flushed() {
        assert_eq!(compaction_target(0, 100, 50, 100, 1), Some(50));
        assert_eq!(compaction_target(0, 40, 50, 100, 1), Some(40));
        assert_eq!(compaction_target(0, 100, 200, 90, 1), Some(90));
        assert_eq!(compaction_target(50, 100, 50, 100, 1), None);
        assert_eq!(compaction_target(60, 100, 50, 100, 1), None);
        assert_eq!(compaction_target(0, 100, 5, 100, 10), None);
        assert_eq!(compaction_target(0, 100, 10, 100, 10), Some(10));
        assert_eq!(compaction_target(0, 0, 0, 0, 0), None);
    }

    #[test]
    fn a_leader_keeps_the_log_a_close_follower_needs() {
        // 100 entries of 1 KiB in the log (0, 100]; the engine flushed 90.
        let keep = |needs: &[u64], retain| {
            retain_for_followers(90, needs.iter().copied(), 0, 100, 100 << 10, retain)
        };
        // No follower behind the target: compact to it.
        assert_eq!(keep(&[95, 100], 1 << 20), 90);
        // A learner being sent the snapshot at 60: keep 61.. for it.
        assert_eq!(keep(&[100, 60], 1 << 20), 60);
        // Two behind: the further one decides.
        assert_eq!(keep(&[70, 60], 1 << 20), 60);
        // 30 entries (30 KiB) are over a 20 KiB bound: that follower gets a
        // snapshot instead; a closer one is still kept for.
        assert_eq!(keep(&[60], 20 << 10), 90);
        assert_eq!(keep(&[60, 80], 20 << 10), 80);
        // A follower that matched nothing yet (a new leader's view) is far
        // behind: not kept for.
        assert_eq!(keep(&[0], 20 << 10), 90);
        // Never below what is already compacted.
        assert_eq!(
            retain_for_followers(90, [10], 50, 100, 50 << 10, 1 << 30),
            50
        );
    }

    #[test]
    fn recovery_applied_stays_in_range() {
        assert_eq!(recovery_applied_index(5, 0, 10), 5);
        assert_eq!(recovery_applied_index(0, 3, 10), 3);
        assert_eq!(recovery_applied_index(20, 0, 10), 10);
        assert_eq!(recovery_applied_index(0, 0, 0), 0);
        assert_eq!(recovery_applied_index(8, 8, 0), 8);
    }

    #[test]
    fn apply_retries_back_off_to_ten_seconds() {
        use std::time::Duration;
        assert_eq!(apply_retry_delay(1), Duration::from_millis(100));
        assert_eq!(apply_retry_delay(2), Duration::from_millis(200));
        assert_eq!(apply_retry_delay(5), Duration::from_millis(1600));
        assert_eq!(apply_retry_delay(8), Duration::from_secs(10));
        assert_eq!(apply_retry_delay(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn sst_rate_limit_zero_is_unlimited() {
        assert_eq!(sst_rate_limit(0), None);
        assert_eq!(sst_rate_limit(48 << 20), Some(48 << 20));
        assert_eq!(sst_rate_limit(u64::MAX), Some(i64::MAX));
    }
}
