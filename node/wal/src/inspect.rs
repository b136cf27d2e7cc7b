//! Read a stopped node's log from outside the node, for tests and debugging:
//! which Raft index holds which payload. The backup suite
//! (scripts/tests.d/backup.sh) maps every point it wrote to the entry that
//! carries it, to check a backup's per-shard index point by point.
//!
//! Opens RocksDB read-only: it takes no lock and changes nothing, so a
//! running node is never disturbed, but entries it compacts meanwhile are
//! missed; run it on a stopped node's WAL (one kept whole with
//! `SHARDHOUSE_TEST_FAULT_DISK=node=*,keep_log=1`).

use std::path::Path;

use bytes::Bytes;
use raft::eraftpb::Entry;
use rocksdb::{Direction, IteratorMode, Options, DB};

use crate::error::{Result, WalError};
use crate::keys;
use crate::ShardId;

/// Calls `f` with every log entry of every shard in the WAL at `dir`, in
/// (shard, index) order, and returns how many there were. Entries above a
/// replica's commit index may still be replaced by a new leader's; a
/// stopped replica's log is committed up to its last `HardState`.
pub fn for_each_entry(dir: &Path, mut f: impl FnMut(ShardId, &Entry)) -> Result<u64> {
    let db = DB::open_for_read_only(&Options::default(), dir, false).map_err(|source| {
        WalError::Storage {
            context: Some(format!(
                "cannot open the WAL RocksDB at {} read-only",
                dir.display()
            )),
            source,
        }
    })?;
    let start = [keys::LOG_PREFIX];
    let mut n = 0;
    for item in db.iterator(IteratorMode::From(&start, Direction::Forward)) {
        let (key, value) = item?;
        let Some((shard, index)) = keys::parse_log_key(&key) else {
            break;
        };
        let entry = keys::decode_entry(index, Bytes::from(value.into_vec()))?;
        f(shard, &entry);
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_log_entry_is_read_back_in_shard_and_index_order() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = DB::open_default(dir.path()).unwrap();
            // A state record sorts after every log key and is skipped.
            db.put(keys::state_key(1), b"x").unwrap();
            for (shard, index, data) in [(1u32, 7u64, "b"), (0, 3, "a"), (1, 5, "c")] {
                let e = Entry {
                    index,
                    term: 2,
                    data: Bytes::from(data),
                    ..Default::default()
                };
                db.put(keys::log_key(shard, index), keys::encode_entry(&e))
                    .unwrap();
            }
        }
        let mut seen = Vec::new();
        let n = for_each_entry(dir.path(), |shard, e| {
            seen.push((shard, e.index, String::from_utf8(e.data.to_vec()).unwrap()))
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(
            seen,
            vec![
                (0, 3, "a".to_string()),
                (1, 5, "c".to_string()),
                (1, 7, "b".to_string())
            ]
        );
    }

    #[test]
    fn a_missing_wal_is_an_error_naming_its_path() {
        let err = for_each_entry(Path::new("/nonexistent/wal"), |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/wal"), "{err}");
    }
}
