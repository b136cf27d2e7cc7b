//! Token buckets for per-token write limits, as pure functions of the time
//! (seconds since any fixed instant) so tests drive the clock.
//!
//! Points are only known once a body is parsed, so the point bucket is
//! charged after the write and may go into debt; a write is admitted while
//! the bucket is not in debt. Over time a token writes exactly its rate;
//! the overshoot is one request per request in flight at once.

use std::time::Duration;

/// A refill rate and the bucket size it refills up to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    per_sec: f64,
    capacity: f64,
}

impl Rate {
    /// `per_sec` > 0; the bucket holds `burst_secs` seconds of it (at least
    /// one unit, so a request limit of 0.5/s still admits a request).
    pub fn new(per_sec: f64, burst_secs: f64) -> Rate {
        Rate {
            per_sec,
            capacity: (per_sec * burst_secs).max(1.0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    level: f64,
    at: f64,
}

impl TokenBucket {
    pub fn full(rate: &Rate, now: f64) -> TokenBucket {
        TokenBucket {
            level: rate.capacity,
            at: now,
        }
    }

    fn refill(&mut self, rate: &Rate, now: f64) {
        // A clock read earlier on another thread must not drain the bucket.
        if now > self.at {
            self.level = (self.level + (now - self.at) * rate.per_sec).min(rate.capacity);
            self.at = now;
        }
    }

    /// Takes `cost` if the bucket holds it (cost 0: if it is not in debt);
    /// otherwise leaves the bucket alone and says how long until it would.
    pub fn admit(&mut self, rate: &Rate, now: f64, cost: f64) -> Result<(), Duration> {
        self.refill(rate, now);
        if self.level >= cost {
            self.level -= cost;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((cost - self.level) / rate.per_sec))
        }
    }

    /// Takes `amount` whatever the level (the bucket may go into debt).
    pub fn charge(&mut self, rate: &Rate, now: f64, amount: f64) {
        self.refill(rate, now);
        self.level -= amount;
    }

    pub fn level(&self) -> f64 {
        self.level
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_beyond_the_burst_wait_for_the_refill() {
        let rate = Rate::new(2.0, 1.0); // 2 requests/s, burst of 2
        let mut b = TokenBucket::full(&rate, 0.0);
        assert!(b.admit(&rate, 0.0, 1.0).is_ok());
        assert!(b.admit(&rate, 0.0, 1.0).is_ok());
        let wait = b.admit(&rate, 0.0, 1.0).unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-9, "{wait:?}");
        // A refused request takes nothing: after the wait it goes through.
        assert!(b.admit(&rate, 0.25, 1.0).is_err());
        assert!(b.admit(&rate, 0.5, 1.0).is_ok());
        assert!(b.admit(&rate, 0.5, 1.0).is_err());
    }

    #[test]
    fn idle_time_refills_only_up_to_the_burst() {
        let rate = Rate::new(10.0, 2.0);
        let mut b = TokenBucket::full(&rate, 0.0);
        b.charge(&rate, 0.0, 20.0);
        assert_eq!(b.level(), 0.0);
        assert!(b.admit(&rate, 1000.0, 0.0).is_ok());
        assert_eq!(b.level(), 20.0);
    }

    #[test]
    fn point_debt_blocks_until_repaid_and_the_long_run_rate_holds() {
        let rate = Rate::new(1000.0, 1.0);
        let mut b = TokenBucket::full(&rate, 0.0);
        // One big write of 3000 points is let in, then the token waits 2 s.
        assert!(b.admit(&rate, 0.0, 0.0).is_ok());
        b.charge(&rate, 0.0, 3000.0);
        let wait = b.admit(&rate, 0.0, 0.0).unwrap_err();
        assert!((wait.as_secs_f64() - 2.0).abs() < 1e-9, "{wait:?}");
        assert!(b.admit(&rate, 1.999, 0.0).is_err());
        assert!(b.admit(&rate, 2.001, 0.0).is_ok());

        // A writer sending 100-point requests as fast as admitted for 10 s
        // gets 1000 points/s plus the first burst, within one request.
        let mut b = TokenBucket::full(&rate, 0.0);
        let (mut t, mut written) = (0.0_f64, 0.0_f64);
        while t < 10.0 {
            match b.admit(&rate, t, 0.0) {
                Ok(()) => {
                    b.charge(&rate, t, 100.0);
                    written += 100.0;
                }
                Err(wait) => t += wait.as_secs_f64().max(1e-3),
            }
        }
        assert!((written - 11_000.0).abs() <= 100.0, "{written}");
    }

    #[test]
    fn a_clock_going_backwards_does_not_drain() {
        let rate = Rate::new(1.0, 5.0);
        let mut b = TokenBucket::full(&rate, 10.0);
        assert!(b.admit(&rate, 9.0, 1.0).is_ok());
        assert_eq!(b.level(), 4.0);
    }

    #[test]
    fn tiny_rates_still_admit_one_request() {
        let rate = Rate::new(0.1, 1.0);
        let mut b = TokenBucket::full(&rate, 0.0);
        assert!(b.admit(&rate, 0.0, 1.0).is_ok());
        let wait = b.admit(&rate, 0.0, 1.0).unwrap_err();
        assert!((wait.as_secs_f64() - 10.0).abs() < 1e-9);
    }
}
