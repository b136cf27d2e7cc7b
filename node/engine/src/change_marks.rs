//! Change marks: what lets a router cache settled buckets of a read
//! (issue 28, item 4). Per (shard, database, table) a counter moves
//! whenever data that a settled bucket could hold changes: a flush that
//! writes a point older than [`SETTLE_LAG`] before the flush's wall
//! clock (a late write), a storage operation on the database (delete,
//! drop, retention change), a retention drop of the table's partitions,
//! or a shard's storage replaced (snapshot import, restore, drop).
//!
//! A read takes the mark of the tables it names after its pre-read flush
//! and before it runs; a counter moves only after its change is visible.
//! So a cached answer whose mark still reads the same cannot miss a change
//! to a settled bucket: a change made before the mark was taken is in the
//! answer, one made after moved the mark. The `epoch` (random per
//! process) tells a restarted node, or another replica, from this one.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampNanosecondType;
use arrow_array::{Array, RecordBatch};
use parking_lot::Mutex;

/// A flushed point older than this before the flush is a late write. A
/// router caches only buckets that ended longer ago than this plus a
/// margin for clock skew between it and the nodes.
pub const SETTLE_LAG: Duration = Duration::from_secs(60);

/// The mark a read saw: equal marks from the same epoch mean no settled
/// bucket of the tables read has changed in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark {
    /// This process's epoch (never 0: 0 means "no mark" on the wire).
    pub epoch: u64,
    pub mark: u64,
}

#[derive(Default)]
struct ShardMarks {
    all: u64,
    databases: HashMap<String, DatabaseMarks>,
}

#[derive(Default)]
struct DatabaseMarks {
    all: u64,
    tables: HashMap<String, u64>,
}

/// Every shard's counters in this process (entries are never removed: a
/// dropped database's counters must not restart at 0 when it comes back).
pub struct ChangeMarks {
    epoch: u64,
    shards: Mutex<HashMap<u32, ShardMarks>>,
}

impl Default for ChangeMarks {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangeMarks {
    pub fn new() -> ChangeMarks {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pid = u64::from(std::process::id());
        ChangeMarks {
            epoch: (nanos ^ pid.rotate_left(40)) | 1,
            shards: Mutex::new(HashMap::new()),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// A settled bucket of `table` may have changed.
    pub fn bump_table(&self, shard: u32, database: &str, table: &str) {
        self.with_database(shard, database, |db| {
            *db.tables.entry(table.to_string()).or_default() += 1;
        });
    }

    /// Any table of `database` may have changed.
    pub fn bump_database(&self, shard: u32, database: &str) {
        self.with_database(shard, database, |db| db.all += 1);
    }

    fn with_database(&self, shard: u32, database: &str, bump: impl FnOnce(&mut DatabaseMarks)) {
        let mut shards = self.shards.lock();
        let db = shards
            .entry(shard)
            .or_default()
            .databases
            .entry(database.to_string())
            .or_default();
        bump(db);
    }

    /// The shard's whole storage may have changed.
    pub fn bump_shard(&self, shard: u32) {
        self.shards.lock().entry(shard).or_default().all += 1;
    }

    /// A flush stored `batches` (points: time is column 0) in `table`:
    /// a late write if one of them is older than [`SETTLE_LAG`].
    pub fn note_flushed(&self, shard: u32, database: &str, table: &str, batches: &[RecordBatch]) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(i64::MAX, |d| d.as_nanos() as i64);
        if batches
            .iter()
            .filter_map(oldest_time)
            .any(|t| is_late(t, now))
        {
            self.bump_table(shard, database, table);
        }
    }

    /// The mark of the tables of `database` that `reads` names.
    pub fn mark(&self, shard: u32, database: &str, reads: impl Fn(&str) -> bool) -> ChangeMark {
        let shards = self.shards.lock();
        let mark = shards.get(&shard).map_or(0, |s| {
            let db = s.databases.get(database).map_or(0, |d| {
                d.all
                    + d.tables
                        .iter()
                        .filter(|(t, _)| reads(t))
                        .map(|(_, n)| *n)
                        .sum::<u64>()
            });
            s.all + db
        });
        ChangeMark {
            epoch: self.epoch,
            mark,
        }
    }
}

/// Whether a point at `time_ns` flushed at `now_ns` is a late write.
pub fn is_late(time_ns: i64, now_ns: i64) -> bool {
    time_ns < now_ns.saturating_sub(SETTLE_LAG.as_nanos() as i64)
}

/// The oldest time of a batch of points (column 0, nanoseconds).
fn oldest_time(b: &RecordBatch) -> Option<i64> {
    let col = b.columns().first()?;
    let times = col.as_primitive_opt::<TimestampNanosecondType>()?;
    (0..times.len())
        .filter(|i| times.is_valid(*i))
        .map(|i| times.value(i))
        .min()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::TimestampNanosecondArray;
    use arrow_schema::{DataType, Field, Schema, TimeUnit};

    use super::*;

    fn points(times: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        )]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampNanosecondArray::from(times.to_vec()))],
        )
        .unwrap()
    }

    fn now_ns() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i64
    }

    #[test]
    fn only_points_older_than_the_settle_lag_are_late() {
        let lag = SETTLE_LAG.as_nanos() as i64;
        assert!(is_late(1_000 - lag - 1, 1_000));
        assert!(!is_late(1_000 - lag, 1_000));
        assert!(!is_late(1_000, 1_000));
    }

    #[test]
    fn a_late_flush_moves_the_mark_of_its_table_only() {
        let m = ChangeMarks::new();
        let reads_cpu = |t: &str| t == "cpu";
        let before = m.mark(0, "db", reads_cpu);
        m.note_flushed(0, "db", "cpu", &[points(&[now_ns()])]);
        assert_eq!(
            m.mark(0, "db", reads_cpu),
            before,
            "a fresh point is not late"
        );
        m.note_flushed(0, "db", "mem", &[points(&[0])]);
        assert_eq!(m.mark(0, "db", reads_cpu), before, "another table");
        m.note_flushed(1, "db", "cpu", &[points(&[0])]);
        assert_eq!(m.mark(0, "db", reads_cpu), before, "another shard");
        m.note_flushed(0, "db", "cpu", &[points(&[now_ns(), 0])]);
        assert_ne!(m.mark(0, "db", reads_cpu), before);
    }

    #[test]
    fn database_and_shard_changes_move_every_table() {
        let m = ChangeMarks::new();
        let reads = |t: &str| t == "cpu";
        let a = m.mark(3, "db", reads);
        m.bump_database(3, "other");
        assert_eq!(m.mark(3, "db", reads), a);
        m.bump_database(3, "db");
        let b = m.mark(3, "db", reads);
        assert_ne!(b, a);
        m.bump_shard(3);
        assert_ne!(m.mark(3, "db", reads), b);
        assert_ne!(m.epoch(), 0);
        assert_ne!(ChangeMarks::new().epoch(), 0);
    }
}
