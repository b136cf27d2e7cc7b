//! Per-database series cardinality limit.
//!
//! Each database keeps the set of `series_id`s it has admitted. A write that
//! introduces a series beyond the limit has that series' points rejected
//! (reported in the 400 answer); points of known series still go through.
//! The set lives in router memory: after a restart it refills from traffic,
//! so the limit is a guard rail, not an exact quota across routers.
//!
//! A line protocol body first reserves one place per line
//! ([`DbSeries::reserve`]); its series are then admitted without a lookup
//! and inserted together at the end ([`DbSeries::commit`]), stripe by
//! stripe, releasing the places they did not need. At 1M series each
//! lookup is a cache miss: one after another, interleaved with parsing,
//! they cost ~12% of the front door; together they overlap. A body that
//! does not fit under the limit is admitted series by series
//! ([`DbSeries::admit`]), and so are bodies that meet the limit while other
//! requests hold reservations: near the limit, a series may then be
//! refused that would have fit a moment later.

use parking_lot::Mutex;
use prometheus::IntGauge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use shardhouse_common::series::IdSet;

/// Lock stripes of a database's set. Every point of a series new to its
/// request is admitted here, from every request task at once: one lock for
/// the whole set made those tasks queue behind each other (13% of the
/// router's CPU at 1M series, issue 18).
const STRIPES: usize = 64;

/// The stripe of an id: bits 40..46, away from the low bits the set's
/// buckets are chosen by and the top 7 bits its probes compare, so every
/// stripe's table still sees well-spread hashes.
#[inline]
fn stripe_of(series_id: u64) -> usize {
    ((series_id >> 40) as usize) % STRIPES
}

/// The series one database has admitted.
#[derive(Debug)]
pub struct DbSeries {
    name: String,
    limit: usize,
    stripes: Box<[Mutex<IdSet>]>,
    /// Series admitted, over all stripes (the limit is checked against it).
    count: AtomicUsize,
    /// This database's `shardhouse_router_series_cardinality`, looked up
    /// once (a label lookup per new series cost as much as the admission).
    gauge: IntGauge,
}

impl DbSeries {
    fn new(name: &str, limit: usize) -> DbSeries {
        DbSeries {
            name: name.to_owned(),
            limit,
            stripes: (0..STRIPES).map(|_| Mutex::default()).collect(),
            count: AtomicUsize::new(0),
            gauge: crate::metrics::SERIES_CARDINALITY.with_label_values(&[name]),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Admits `series_id` when it is known or fits under the limit.
    pub fn admit(&self, series_id: u64) -> bool {
        let mut seen = self.stripes[stripe_of(series_id)].lock();
        if seen.contains(&series_id) {
            return true;
        }
        // Take a place under the limit before inserting, so concurrent
        // admissions in other stripes cannot overshoot it.
        let limit = self.limit;
        if self
            .count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                (c < limit).then_some(c + 1)
            })
            .is_err()
        {
            return false;
        }
        seen.insert(series_id);
        self.gauge.inc();
        true
    }

    /// Takes `places` under the limit for a body's new series (one per
    /// line at most), or `false` when they do not all fit.
    pub fn reserve(&self, places: usize) -> bool {
        let limit = self.limit;
        self.count
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
                c.checked_add(places).filter(|&n| n <= limit)
            })
            .is_ok()
    }

    /// Inserts the series admitted under a reservation of `places` and
    /// gives back the places not used (ids already known, duplicates, lines
    /// rejected for other reasons). `ids` is reordered.
    pub fn commit(&self, places: usize, ids: &mut [u64]) {
        // By stripe: one lock per stripe, and the lookups of one stripe in
        // a row so their cache misses overlap.
        ids.sort_unstable_by_key(|&id| stripe_of(id));
        let mut new = 0;
        for group in ids.chunk_by(|a, b| stripe_of(*a) == stripe_of(*b)) {
            let mut seen = self.stripes[stripe_of(group[0])].lock();
            for &id in group {
                new += usize::from(seen.insert(id));
            }
        }
        // `new` <= `places` (one place per line, one series per line); the
        // other branch only keeps the count true if a caller broke that.
        if new <= places {
            self.count.fetch_sub(places - new, Ordering::Relaxed);
        } else {
            self.count.fetch_add(new - places, Ordering::Relaxed);
        }
        self.gauge.add(new as i64);
    }

    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// All databases' series sets. A limit of 0 disables tracking.
#[derive(Debug, Default)]
pub struct Cardinality {
    limit: usize,
    dbs: Mutex<HashMap<String, Arc<DbSeries>>>,
}

impl Cardinality {
    pub fn new(limit: usize) -> Cardinality {
        Cardinality {
            limit,
            dbs: Mutex::default(),
        }
    }

    /// The set of `db`, or `None` when the limit is disabled.
    pub fn db(&self, db: &str) -> Option<Arc<DbSeries>> {
        if self.limit == 0 {
            return None;
        }
        let mut dbs = self.dbs.lock();
        Some(
            dbs.entry(db.to_owned())
                .or_insert_with(|| Arc::new(DbSeries::new(db, self.limit)))
                .clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_known_series_and_new_ones_up_to_the_limit() {
        let c = Cardinality::new(2);
        let db = c.db("telegraf").unwrap();
        assert!(db.admit(1));
        assert!(db.admit(2));
        assert!(!db.admit(3), "third series is over the limit");
        assert!(db.admit(1), "known series still admitted");
        assert_eq!(db.len(), 2);
        let other = c.db("other").unwrap();
        assert!(other.admit(3), "limits are per database");
        assert!(Cardinality::new(0).db("x").is_none());
    }

    #[test]
    fn the_limit_holds_across_stripes() {
        let c = Cardinality::new(100);
        let db = c.db("striped").unwrap();
        // ids spread over every stripe, many more than the limit
        let ids: Vec<u64> = (0..1_000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let admitted = ids.iter().filter(|&&id| db.admit(id)).count();
        assert_eq!(admitted, 100);
        assert_eq!(db.len(), 100);
        let stripes: std::collections::HashSet<usize> =
            ids[..100].iter().map(|&id| stripe_of(id)).collect();
        assert!(
            stripes.len() > 32,
            "ids reach many stripes: {}",
            stripes.len()
        );
        // the admitted ones stay admitted, the others stay out
        assert!(ids.iter().filter(|&&id| db.admit(id)).count() == 100);
    }

    #[test]
    fn reservations_count_only_the_series_they_add() {
        let c = Cardinality::new(10);
        let db = c.db("reserved").unwrap();
        // ids in different stripes
        let id = |i: u64| i | (i << 40);
        assert!(db.admit(id(1)));
        assert!(db.reserve(6), "1 + 6 places fit under 10");
        assert_eq!(db.len(), 7);
        assert!(!db.reserve(4), "7 + 4 places do not");
        // 1 is known, 2 comes twice: two series are new
        db.commit(6, &mut [id(2), id(1), id(3), id(2)]);
        assert_eq!(db.len(), 3, "the four unused places came back");
        assert!(
            db.admit(id(2)) && db.admit(id(3)),
            "committed ids are known"
        );
        assert_eq!(db.len(), 3);
        assert!(db.reserve(7));
        assert!(!db.admit(id(4)), "reserved places count against the limit");
    }
}
