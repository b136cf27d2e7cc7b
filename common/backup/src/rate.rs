//! Pacing a backup's uploads or a restore's downloads: a token bucket
//! shared by every transfer of one backup or restore on one node.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A transfer rate limit (bytes per second) shared by the uploads of one
/// backup, or the downloads of one restore, on one node: a token bucket holding at most one second of
/// bytes. A sender takes its bytes before sending them; when the bucket
/// is short it waits until the rate has paid them back, so concurrent
/// senders queue behind each other's debt and the sum keeps the rate.
#[derive(Debug)]
pub struct RateLimit {
    bytes_per_sec: f64,
    bucket: Mutex<Bucket>,
}

/// The state of a token bucket: `tokens` may go below zero (a debt the
/// next senders wait for).
#[derive(Debug, Clone, Copy)]
pub struct Bucket {
    pub tokens: f64,
    pub at: Instant,
}

impl Bucket {
    /// Takes `n` bytes at `now` for a bucket refilled at `rate` bytes/s up
    /// to `rate` bytes; returns how long the sender waits before sending.
    pub fn take(&mut self, rate: f64, n: u64, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate).min(rate);
        self.at = now.max(self.at);
        self.tokens -= n as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / rate)
        }
    }
}

impl RateLimit {
    /// None for 0 (no limit).
    pub fn new(bytes_per_sec: u64) -> Option<RateLimit> {
        (bytes_per_sec > 0).then(|| RateLimit {
            bytes_per_sec: bytes_per_sec as f64,
            bucket: Mutex::new(Bucket {
                tokens: bytes_per_sec as f64,
                at: Instant::now(),
            }),
        })
    }

    pub fn bytes_per_sec(&self) -> u64 {
        self.bytes_per_sec as u64
    }

    /// Waits until `n` more bytes may be sent.
    pub async fn take(&self, n: u64) {
        let wait = self.bucket.lock().unwrap_or_else(|e| e.into_inner()).take(
            self.bytes_per_sec,
            n,
            Instant::now(),
        );
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lends_one_second_and_then_paces_at_the_rate() {
        let t0 = Instant::now();
        let mut b = Bucket {
            tokens: 100.0,
            at: t0,
        };
        // A full bucket: a second's worth goes at once.
        assert_eq!(b.take(100.0, 100, t0), Duration::ZERO);
        // Then 50 bytes wait half a second, the next 50 a whole second.
        assert_eq!(b.take(100.0, 50, t0), Duration::from_millis(500));
        assert_eq!(b.take(100.0, 50, t0), Duration::from_secs(1));
        // Three seconds later the debt (one second) is paid and one second
        // is saved, not two.
        let t3 = t0 + Duration::from_secs(3);
        assert_eq!(b.take(100.0, 100, t3), Duration::ZERO);
        assert_eq!(b.take(100.0, 25, t3), Duration::from_millis(250));
        assert!(RateLimit::new(0).is_none());
    }
}
