//! The check of the shard lock order (see the parent module's docs): every
//! lock of a shard has a [`Level`]; a thread may take a lock only when its
//! level is above every lock it already holds. Taking one out of order
//! panics at once, naming both locks, instead of deadlocking some day.
//!
//! Active in debug builds, in this crate's unit tests and with the
//! `lock-order-check` feature (`cargo test --release -p shardhouse-engine
//! --features lock-order-check` checks every path the integration tests
//! take). Anywhere else [`Held`] is the lock's guard and nothing more: no
//! thread-local, no branch, nothing on the write path.

use std::ops::{Deref, DerefMut};

/// A shard lock's place in the order, outermost first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Flushes = 1,
    ShardMap,
    Buf,
    Catalog,
    KnownSeries,
    Tables,
    Databases,
    Failing,
    Damage,
    Rewrites,
    Rollups,
}

/// A lock guard that, where the check is on, keeps its level on the
/// thread's list of held locks until it is dropped.
pub(crate) struct Held<G> {
    guard: G,
    #[cfg(any(debug_assertions, test, feature = "lock-order-check"))]
    _level: check::Entered,
}

/// Takes a lock at `level`: checks the order first (where the check is
/// on), so a wrong order panics before it can block.
#[inline]
pub(crate) fn hold<G>(level: Level, lock: impl FnOnce() -> G) -> Held<G> {
    #[cfg(any(debug_assertions, test, feature = "lock-order-check"))]
    let entered = check::Entered::new(level);
    #[cfg(not(any(debug_assertions, test, feature = "lock-order-check")))]
    let _ = level;
    Held {
        guard: lock(),
        #[cfg(any(debug_assertions, test, feature = "lock-order-check"))]
        _level: entered,
    }
}

impl<G: Deref> Deref for Held<G> {
    type Target = G::Target;
    #[inline]
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: DerefMut> DerefMut for Held<G> {
    #[inline]
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

#[cfg(any(debug_assertions, test, feature = "lock-order-check"))]
mod check {
    use std::cell::RefCell;

    use super::Level;

    thread_local! {
        /// Levels of the shard locks this thread holds, in taking order.
        static HELD: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
    }

    /// One held lock's entry on the thread's list.
    pub(crate) struct Entered(Level);

    impl Entered {
        pub(crate) fn new(level: Level) -> Entered {
            let highest = HELD.with(|h| {
                let mut h = h.borrow_mut();
                let highest = h.iter().copied().max();
                if highest.is_none_or(|top| top < level) {
                    h.push(level);
                }
                highest
            });
            // Panics with the list released, so unwinding can drop the
            // guards already held.
            if let Some(top) = highest.filter(|top| *top >= level) {
                panic!(
                    "shard lock order violated: taking {level:?} while holding {top:?} \
                     (the order is in node/engine/src/shard_state/mod.rs)"
                );
            }
            Entered(level)
        }
    }

    impl Drop for Entered {
        fn drop(&mut self) {
            // Guards may be dropped in any order: remove this one's entry.
            let _ = HELD.try_with(|h| {
                if let Ok(mut h) = h.try_borrow_mut() {
                    if let Some(i) = h.iter().rposition(|l| *l == self.0) {
                        h.remove(i);
                    }
                }
            });
        }
    }
}
