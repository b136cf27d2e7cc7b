//! The WAL's time: when replicas tick and when requests time out.
//! Production reads the wall clock. Tests use a manual clock that moves only
//! when [`Wal::tick`](crate::Wal::tick) is called, so elections, heartbeats
//! and deadlines happen at steps the test chooses instead of after sleeps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a WAL's ticks come from ([`WalConfig::ticks`](crate::WalConfig::ticks)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TickSource {
    /// Every replica ticks each `tick_interval` of wall-clock time.
    #[default]
    WallClock,
    /// Time stands still until [`Wal::tick`](crate::Wal::tick) moves it by
    /// one `tick_interval`. Proposal, read, leader-transfer and apply-retry
    /// deadlines are counted on it too. For tests that step the WAL by hand.
    Manual,
}

/// The clock the poll and apply threads read. Cloning shares a manual clock.
#[derive(Clone)]
pub(crate) enum Clock {
    Wall,
    Manual(Arc<ManualTime>),
}

/// A manual clock: a fixed origin plus the time [`Clock::advance`] added.
pub(crate) struct ManualTime {
    origin: Instant,
    elapsed_nanos: AtomicU64,
}

impl Clock {
    pub(crate) fn new(source: TickSource) -> Clock {
        match source {
            TickSource::WallClock => Clock::Wall,
            TickSource::Manual => Clock::Manual(Arc::new(ManualTime {
                origin: Instant::now(),
                elapsed_nanos: AtomicU64::new(0),
            })),
        }
    }

    pub(crate) fn now(&self) -> Instant {
        match self {
            Clock::Wall => Instant::now(),
            Clock::Manual(t) => {
                t.origin + Duration::from_nanos(t.elapsed_nanos.load(Ordering::Acquire))
            }
        }
    }

    pub(crate) fn since(&self, earlier: Instant) -> Duration {
        self.now().saturating_duration_since(earlier)
    }

    /// How long a thread waiting for `deadline` may block on its channel.
    /// None: until a message arrives, since a manual clock only moves when
    /// [`Wal::tick`](crate::Wal::tick) also sends every thread a message.
    pub(crate) fn wait_limit(&self, deadline: Instant) -> Option<Duration> {
        match self {
            Clock::Wall => Some(deadline.saturating_duration_since(Instant::now())),
            Clock::Manual(_) => None,
        }
    }

    /// Moves a manual clock forward; false for the wall clock, which no
    /// caller may move.
    pub(crate) fn advance(&self, by: Duration) -> bool {
        match self {
            Clock::Wall => false,
            Clock::Manual(t) => {
                let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
                t.elapsed_nanos.fetch_add(nanos, Ordering::AcqRel);
                true
            }
        }
    }
}

/// Receives from `rx`, blocking at most `limit` (forever when None).
pub(crate) fn recv_until<T>(
    rx: &crossbeam_channel::Receiver<T>,
    limit: Option<Duration>,
) -> Result<T, crossbeam_channel::RecvTimeoutError> {
    match limit {
        Some(d) => rx.recv_timeout(d),
        None => rx
            .recv()
            .map_err(|_| crossbeam_channel::RecvTimeoutError::Disconnected),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = Clock::new(TickSource::Manual);
        let t0 = c.now();
        assert_eq!(c.now(), t0);
        assert!(c.advance(Duration::from_millis(50)));
        assert_eq!(c.since(t0), Duration::from_millis(50));
        assert_eq!(c.wait_limit(t0 + Duration::from_secs(1)), None);
        // Clones share the time.
        let d = c.clone();
        d.advance(Duration::from_millis(50));
        assert_eq!(c.since(t0), Duration::from_millis(100));
    }

    #[test]
    fn the_wall_clock_cannot_be_moved() {
        let c = Clock::new(TickSource::WallClock);
        assert!(!c.advance(Duration::from_secs(1)));
        let past = Instant::now() - Duration::from_secs(1);
        assert_eq!(c.wait_limit(past), Some(Duration::ZERO));
    }
}
