//! The series a shard replica has already buffered for its `_series`
//! tables, so that applying an entry stores only the series new to it.
//!
//! A router lists in every request the series of that request: it cannot
//! know which ones a node already has. At high cardinality every point is
//! then also a `_series` row (1M series: one per point), which every
//! replica tag-indexed, buffered, inserted and merged again. `_series` is
//! a set (ReplacingMergeTree without a version: a series' row never
//! changes), so a row for a series already buffered or stored adds
//! nothing and can be left out.
//!
//! What this set promises: an id in it has its row buffered or stored in
//! this replica's engine. So it is filled when an entry's rows are
//! buffered (under the buffer lock, after the entry can no longer be
//! rejected), and emptied whenever storage can lose rows: a storage
//! operation (drop, delete: they may remove `_series` rows), a snapshot
//! import or a dropped shard. It lives in memory only; after a restart the
//! WAL replay and new writes fill it again (a few rows stored twice, which
//! the table merges away). Bounded: past `capacity` ids new series are no
//! longer remembered, they are stored every time as before.

use std::collections::HashMap;

use arrow_array::{Array, BooleanArray, UInt64Array};
use shardhouse_common::series::IdSet;

/// Default bound on the ids remembered per shard replica: 8 bytes each
/// plus the table's slack, ~40 MB at the bound.
pub const DEFAULT_CAPACITY: usize = 2_000_000;

/// The `series_id`s per database whose `_series` rows a shard replica
/// holds (buffered or stored).
#[derive(Debug)]
pub struct KnownSeries {
    by_database: HashMap<String, IdSet>,
    len: usize,
    capacity: usize,
    /// Moves whenever the shard's `_series` rows may change (series_cache.rs).
    version: u64,
}

/// Versions are unique in the process, so a shard dropped and created
/// again never repeats one.
fn next_version() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Default for KnownSeries {
    fn default() -> Self {
        KnownSeries::with_capacity(DEFAULT_CAPACITY)
    }
}

impl KnownSeries {
    /// An empty set remembering at most `capacity` ids.
    pub fn with_capacity(capacity: usize) -> KnownSeries {
        KnownSeries {
            by_database: HashMap::new(),
            len: 0,
            capacity,
            version: next_version(),
        }
    }

    /// The version of the shard's tag index: the same only while no
    /// `_series` row was buffered and no storage change forgot the set.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Records that `_series` rows were buffered (new series, or series
    /// stored again past the capacity).
    pub fn touch(&mut self) {
        self.version = next_version();
    }

    /// Ids remembered, over every database.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no id is remembered.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the row of `series_id` in `database` is held.
    pub fn contains(&self, database: &str, series_id: u64) -> bool {
        self.by_database
            .get(database)
            .is_some_and(|s| s.contains(&series_id))
    }

    /// Which rows of `ids` to keep: `None` when every row is new (keep the
    /// batch as it is), else a mask with `true` for the rows not held.
    pub fn unknown_rows(&self, database: &str, ids: &UInt64Array) -> Option<BooleanArray> {
        let set = self.by_database.get(database)?;
        let mask: BooleanArray = (0..ids.len())
            .map(|i| Some(ids.is_null(i) || !set.contains(&ids.value(i))))
            .collect();
        if mask.true_count() == ids.len() {
            None
        } else {
            Some(mask)
        }
    }

    /// Remembers `ids` as held in `database`, up to the capacity.
    pub fn remember(&mut self, database: &str, ids: impl IntoIterator<Item = u64>) {
        if self.len >= self.capacity {
            return;
        }
        let set = match self.by_database.get_mut(database) {
            Some(s) => s,
            None => self.by_database.entry(database.to_string()).or_default(),
        };
        for id in ids {
            if self.len >= self.capacity {
                break;
            }
            if set.insert(id) {
                self.len += 1;
            }
        }
    }

    /// Forgets everything (storage may have lost rows).
    pub fn clear(&mut self) {
        self.by_database.clear();
        self.len = 0;
        self.version = next_version();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[u64]) -> UInt64Array {
        UInt64Array::from(v.to_vec())
    }

    #[test]
    fn a_batch_of_new_series_is_kept_whole() {
        let mut k = KnownSeries::default();
        assert!(k.unknown_rows("db", &ids(&[1, 2])).is_none());
        k.remember("db", [1, 2]);
        assert!(k.unknown_rows("db", &ids(&[3, 4])).is_none());
    }

    #[test]
    fn held_series_are_masked_out_per_database() {
        let mut k = KnownSeries::default();
        k.remember("db", [1, 3]);
        let mask = k.unknown_rows("db", &ids(&[1, 2, 3, 4])).expect("a mask");
        let kept: Vec<bool> = mask.iter().map(|b| b.unwrap()).collect();
        assert_eq!(kept, [false, true, false, true]);
        // Another database has its own series.
        assert!(k.unknown_rows("other", &ids(&[1, 3])).is_none());
        assert!(k.contains("db", 3) && !k.contains("other", 3));
    }

    #[test]
    fn the_capacity_bounds_what_is_remembered() {
        let mut k = KnownSeries::with_capacity(3);
        k.remember("a", [1, 2]);
        k.remember("b", [1, 2, 3]);
        assert_eq!(k.len(), 3);
        assert!(k.contains("b", 1) && !k.contains("b", 2));
        // Past the bound new series are stored every time: never masked.
        assert!(k.unknown_rows("b", &ids(&[2, 3])).is_none());
        // Remembering an id twice does not count twice.
        let mut k = KnownSeries::with_capacity(3);
        k.remember("a", [1, 1, 1]);
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut k = KnownSeries::default();
        k.remember("db", [7]);
        k.clear();
        assert!(k.is_empty());
        assert!(k.unknown_rows("db", &ids(&[7])).is_none());
    }
}
