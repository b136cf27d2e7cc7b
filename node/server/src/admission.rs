//! Per-node admission by in-flight bytes: a Write holds its request size
//! from admission until its entry commits, so a slow quorum pushes back on
//! routers (Overloaded + retry hint) instead of growing queues.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Debug)]
pub struct Admission {
    limit: usize,
    inflight: AtomicUsize,
}

/// Returns its bytes to the budget when dropped.
#[derive(Debug)]
pub struct Permit {
    owner: Arc<Admission>,
    bytes: usize,
}

impl Admission {
    pub fn new(limit: usize) -> Arc<Admission> {
        Arc::new(Admission {
            limit,
            inflight: AtomicUsize::new(0),
        })
    }

    /// Reserves `bytes`, or None when that would exceed the limit. A request
    /// larger than the whole limit is still admitted when nothing else is in
    /// flight, so it can never be starved forever.
    pub fn try_admit(self: &Arc<Self>, bytes: usize) -> Option<Permit> {
        let mut cur = self.inflight.load(Ordering::Relaxed);
        loop {
            if cur > 0 && cur.saturating_add(bytes) > self.limit {
                return None;
            }
            match self.inflight.compare_exchange_weak(
                cur,
                cur + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    crate::metrics::metrics()
                        .inflight_bytes
                        .set((cur + bytes) as i64);
                    return Some(Permit {
                        owner: Arc::clone(self),
                        bytes,
                    });
                }
                Err(actual) => cur = actual,
            }
        }
    }

    pub fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    /// A retry delay that grows with how far over budget the node is.
    pub fn retry_after_ms(&self) -> u32 {
        let ratio = self.inflight() as f64 / self.limit.max(1) as f64;
        (20.0 + 80.0 * ratio).clamp(20.0, 500.0) as u32
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let prev = self.owner.inflight.fetch_sub(self.bytes, Ordering::AcqRel);
        crate::metrics::metrics()
            .inflight_bytes
            .set((prev - self.bytes) as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_until_limit_and_releases_on_drop() {
        let a = Admission::new(100);
        let p1 = a.try_admit(60).expect("first fits");
        assert!(a.try_admit(50).is_none(), "60 + 50 > 100");
        let p2 = a.try_admit(40).expect("60 + 40 fits");
        assert_eq!(a.inflight(), 100);
        drop(p1);
        assert_eq!(a.inflight(), 40);
        drop(p2);
        assert_eq!(a.inflight(), 0);
        let big = a
            .try_admit(1000)
            .expect("oversized request admitted when idle");
        assert!(a.try_admit(1).is_none());
        drop(big);
        assert!(a.retry_after_ms() >= 20);
    }
}
