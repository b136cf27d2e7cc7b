//! A shard's applied-but-not-flushed rows. Plain data, no I/O.
//!
//! Each table's rows remember the first entry they came from, so a flush
//! that stores some tables and not others knows how far the shard's flushed
//! index may move: to just below the oldest entry whose rows are still only
//! in memory.

use std::collections::HashMap;
use std::time::Instant;

use arrow_array::RecordBatch;

use crate::layout::TableId;

/// Rows of one table waiting for a flush.
#[derive(Default)]
pub struct TableBuf {
    pub batches: Vec<RecordBatch>,
    pub rows: usize,
    /// Index of the first entry whose rows are here (0 when empty).
    pub first_index: u64,
}

impl TableBuf {
    pub fn push(&mut self, index: u64, batches: Vec<RecordBatch>, rows: usize) {
        if self.first_index == 0 {
            self.first_index = index;
        }
        self.batches.extend(batches);
        self.rows += rows;
    }

    /// Appends rows that arrived after this buffer's.
    fn append_newer(&mut self, mut newer: TableBuf) {
        self.batches.append(&mut newer.batches);
        self.rows += newer.rows;
        if self.first_index == 0 {
            self.first_index = newer.first_index;
        }
    }
}

/// A shard's applied-but-not-flushed data: fact tables' rows and new
/// series (under each database's `_series` table).
#[derive(Default)]
pub struct ShardBuf {
    pub tables: HashMap<TableId, TableBuf>,
    pub rows: usize,
    /// Highest entry index applied into this buffer.
    pub max_index: u64,
    pub oldest: Option<Instant>,
}

impl ShardBuf {
    pub fn is_empty(&self) -> bool {
        self.max_index == 0
    }

    /// Puts `older` (what a flush could not store) back in front of what
    /// arrived since.
    pub fn restore(&mut self, mut older: ShardBuf) {
        for (m, tb) in std::mem::take(&mut self.tables) {
            older.tables.entry(m).or_default().append_newer(tb);
        }
        older.rows += self.rows;
        older.max_index = older.max_index.max(self.max_index);
        older.oldest = match (older.oldest, self.oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        *self = older;
    }

    /// The first entry index among the rows still held (None when no rows).
    pub fn first_pending_index(&self) -> Option<u64> {
        self.tables
            .values()
            .filter(|t| t.rows > 0)
            .map(|t| t.first_index)
            .min()
    }
}

/// Where a shard's flushed index may move after a flush of everything up
/// to `taken_max` in which the rows from `first_pending` on (if any) stayed
/// unstored: never past an entry whose rows are not durable, never back.
pub fn flushed_after(current: u64, taken_max: u64, first_pending: Option<u64>) -> u64 {
    let reachable = match first_pending {
        Some(first) => taken_max.min(first.saturating_sub(1)),
        None => taken_max,
    };
    reachable.max(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushed_index_stops_below_rows_still_pending() {
        assert_eq!(flushed_after(3, 10, None), 10);
        assert_eq!(flushed_after(3, 10, Some(7)), 6);
        // Never backwards, never past what was taken.
        assert_eq!(flushed_after(8, 10, Some(7)), 8);
        assert_eq!(flushed_after(0, 10, Some(20)), 10);
    }

    fn id(t: &str) -> TableId {
        TableId::new("db", t)
    }

    #[test]
    fn restore_keeps_the_older_first_index_in_front() {
        let mut now = ShardBuf::default();
        now.tables.entry(id("a")).or_default().push(9, vec![], 2);
        now.max_index = 9;
        let mut failed = ShardBuf::default();
        failed.tables.entry(id("a")).or_default().push(4, vec![], 5);
        failed.tables.entry(id("b")).or_default().push(5, vec![], 1);
        failed.max_index = 6;
        now.restore(failed);
        assert_eq!(now.tables[&id("a")].first_index, 4);
        assert_eq!(now.tables[&id("a")].rows, 7);
        assert_eq!(now.max_index, 9);
        assert_eq!(now.first_pending_index(), Some(4));
        assert_eq!(ShardBuf::default().first_pending_index(), None);
    }
}
