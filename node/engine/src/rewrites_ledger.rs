//! The shard's record of which partitions reads must collapse, kept in
//! chDB beside the flushed index so that skipping `FINAL` survives a
//! restart (rewrites.rs says what is tracked and why).
//!
//! One row per change of a table's entry, newest `version` wins: the
//! table is tracked (every partition not named was written under
//! tracking) or not (after a restore: everything keeps `FINAL` until the
//! next flush starts tracking again). Rows are written before the insert
//! that needs them and made durable by the same `syncfs` as the flush's
//! parts, so a partition that may hold a key twice is named whenever its
//! rows are on disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::layout::{self, TableId};
use crate::pool::Conn;
use crate::Result;

/// The ledger's table in the shard's own chDB database.
pub(crate) const LEDGER_TABLE: &str = "_rewrites";

/// Versions only grow, also when the clock steps back.
static LAST_VERSION: AtomicU64 = AtomicU64::new(0);

fn next_version() -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let prev = LAST_VERSION
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
            Some(v.saturating_add(1).max(now))
        })
        .unwrap_or(0);
    prev.saturating_add(1).max(now)
}

fn create(shard_db: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (`table` String, tracked UInt8, partitions Array(String), version UInt64) ENGINE = ReplacingMergeTree(version) ORDER BY `table`",
        layout::qualified(shard_db, LEDGER_TABLE)
    )
}

/// `INSERT` of one table's entry.
fn insert(
    shard_db: &str,
    table: &TableId,
    tracked: bool,
    partitions: &[String],
    version: u64,
) -> String {
    let list: Vec<String> = partitions.iter().map(|p| layout::literal(p)).collect();
    format!(
        "INSERT INTO {} VALUES ({}, {}, [{}], {version})",
        layout::qualified(shard_db, LEDGER_TABLE),
        layout::literal(&table.path()),
        u8::from(tracked),
        list.join(", ")
    )
}

/// Records a table's entry: tracked with the partitions a read must
/// collapse, or untracked.
pub(crate) fn write(
    conn: &mut Conn,
    shard_db: &str,
    table: &TableId,
    tracked: bool,
    partitions: &[String],
) -> Result<()> {
    conn.execute(&create(shard_db))?;
    conn.execute(&insert(
        shard_db,
        table,
        tracked,
        partitions,
        next_version(),
    ))
}

/// The tracked tables of a shard with the partitions a read must
/// collapse. A shard without a ledger (created before it existed, or
/// whose ledger cannot be read) tracks nothing: every table keeps `FINAL`
/// until its first flush.
pub(crate) fn load(conn: &mut Conn, shard_db: &str) -> Vec<(TableId, Vec<String>)> {
    let sql = format!(
        "SELECT `table`, argMax(tracked, version) AS t, arrayStringConcat(argMax(partitions, version), ','), max(version) FROM {} GROUP BY `table` HAVING t = 1",
        layout::qualified(shard_db, LEDGER_TABLE)
    );
    let Ok(batches) = conn.query(&sql) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for b in &batches {
        let tables = crate::columns::strings(b, 0);
        // Partition ids are `YYYYMMDD`: a comma never occurs in one.
        let lists = crate::columns::strings(b, 2).into_iter().map(|l| {
            l.split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect::<Vec<_>>()
        });
        for v in crate::columns::u64s(b, 3) {
            LAST_VERSION.fetch_max(v, Ordering::AcqRel);
        }
        for (path, partitions) in tables.iter().zip(lists) {
            if let Some(id) = TableId::from_path(path) {
                out.push((id, partitions));
            }
        }
    }
    out
}

/// Drops a shard's ledger: its tables are about to be replaced by rows
/// the flusher never saw.
pub(crate) fn forget_all(conn: &mut Conn, shard_db: &str) -> Result<()> {
    conn.execute(&format!(
        "DROP TABLE IF EXISTS {} SYNC",
        layout::qualified(shard_db, LEDGER_TABLE)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_grow_and_entries_quote_their_names() {
        let a = next_version();
        LAST_VERSION.fetch_max(u64::MAX - 10, Ordering::AcqRel);
        let b = next_version();
        assert!(b > a, "{a} {b}");
        let sql = insert(
            "shard_0001",
            &TableId::new("db", "it's"),
            true,
            &["20261127".to_string()],
            7,
        );
        assert_eq!(
            sql,
            "INSERT INTO `shard_0001`.`_rewrites` VALUES ('db/it\\'s', 1, ['20261127'], 7)"
        );
    }
}
