//! The labels of series a source has read, per database and series id,
//! for sources whose series id is the hash of the series' name and labels
//! (the router's, `shardhouse_common::series::series_id`): what an id
//! names is then the same on every shard and forever, so an entry is
//! never stale; only the set of ids a matcher selects changes, and that
//! is asked of the shards on every selection. Bounded:
//! past `capacity` entries it starts again empty (a miss costs one
//! statement, never a wrong answer).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::labels::Labels;

/// Entries kept before the cache starts again: ~300 bytes a series of
/// four labels, so at most some 60 MB.
pub const DEFAULT_CAPACITY: usize = 200_000;

pub struct LabelCache {
    capacity: usize,
    entries: Mutex<Entries>,
}

#[derive(Default)]
struct Entries {
    len: usize,
    by_database: HashMap<String, HashMap<u64, Labels>>,
}

impl Default for LabelCache {
    fn default() -> Self {
        LabelCache::new(DEFAULT_CAPACITY)
    }
}

impl LabelCache {
    pub fn new(capacity: usize) -> Self {
        LabelCache {
            capacity,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Entries are plain data, whole after any panic.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The labels of each id in `ids` (`None` where unknown), in order.
    pub fn get_all(&self, database: &str, ids: impl Iterator<Item = u64>) -> Vec<Option<Labels>> {
        let entries = self.lock();
        let known = entries.by_database.get(database);
        ids.map(|id| known.and_then(|m| m.get(&id)).cloned())
            .collect()
    }

    /// Remembers the labels of series read from `database`.
    pub fn insert_all(&self, database: &str, series: impl IntoIterator<Item = (u64, Labels)>) {
        let mut entries = self.lock();
        for (id, labels) in series {
            if entries.len >= self.capacity {
                *entries = Entries::default();
            }
            let added = entries
                .by_database
                .entry(database.to_string())
                .or_default()
                .insert(id, labels)
                .is_none();
            entries.len += usize::from(added);
        }
    }

    pub fn len(&self) -> usize {
        self.lock().len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(job: &str) -> Labels {
        Labels::from_pairs([("__name__", "up"), ("job", job)])
    }

    #[test]
    fn ids_are_remembered_per_database() {
        let c = LabelCache::new(10);
        c.insert_all("a", [(1, labels("x")), (2, labels("y"))]);
        assert_eq!(
            c.get_all("a", [2, 3, 1].into_iter()),
            vec![Some(labels("y")), None, Some(labels("x"))]
        );
        assert_eq!(c.get_all("b", [1].into_iter()), vec![None]);
        assert_eq!(c.len(), 2);
        c.insert_all("a", [(1, labels("x"))]);
        assert_eq!(c.len(), 2, "the same series counts once");
    }

    #[test]
    fn past_its_capacity_it_starts_again() {
        let c = LabelCache::new(2);
        c.insert_all("a", [(1, labels("x")), (2, labels("y"))]);
        c.insert_all("b", [(3, labels("z"))]);
        assert_eq!(c.len(), 1);
        assert_eq!(c.get_all("a", [1].into_iter()), vec![None]);
        assert_eq!(c.get_all("b", [3].into_iter()), vec![Some(labels("z"))]);
    }
}
