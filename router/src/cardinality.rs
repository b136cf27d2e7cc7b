//! Per-database series cardinality limit.
//!
//! Each database keeps the set of `series_id`s it has admitted. A write that
//! introduces a series beyond the limit has that series' points rejected
//! (reported in the 400 answer); points of known series still go through.
//! The set lives in router memory: after a restart it refills from traffic,
//! so the limit is a guard rail, not an exact quota across routers.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The series one database has admitted.
#[derive(Debug)]
pub struct DbSeries {
    name: String,
    limit: usize,
    seen: Mutex<HashSet<u64>>,
}

impl DbSeries {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Admits `series_id` when it is known or fits under the limit.
    pub fn admit(&self, series_id: u64) -> bool {
        let mut seen = self.seen.lock();
        if seen.contains(&series_id) {
            return true;
        }
        if seen.len() >= self.limit {
            return false;
        }
        seen.insert(series_id);
        crate::metrics::SERIES_CARDINALITY
            .with_label_values(&[self.name.as_str()])
            .set(seen.len() as i64);
        true
    }

    pub fn len(&self) -> usize {
        self.seen.lock().len()
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
                .or_insert_with(|| {
                    Arc::new(DbSeries {
                        name: db.to_owned(),
                        limit: self.limit,
                        seen: Mutex::default(),
                    })
                })
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
}
