//! Damaged data parts of shards' tables: found at start (and when a read
//! trips over one), reported, and refused to readers until the shard's
//! copy is replaced by a snapshot from a peer (docs/operations.md, "A
//! damaged engine part").
//!
//! What chDB does with a damaged part (measured on chdb-core 26.9): at
//! start it checks each part's files against the sizes in its
//! `checksums.txt`; a truncated `data.bin`, `checksums.txt` or
//! `columns.txt` makes the part `broken-on-start`: it is detached and the
//! table serves the other parts, so reads silently answer fewer rows.
//! Bytes changed in place (same size) pass the start; a read of that part
//! fails with `CHECKSUM_DOESNT_MATCH`, and `CHECK TABLE` (which hashes
//! every file of every part) finds it. A table whose metadata cannot be
//! parsed makes chDB refuse to open at all: the node does not start.

use std::collections::BTreeMap;
use std::time::Instant;

use crate::columns::strings;
use crate::engine::{Engine, Inner};
use crate::error::{EngineError, Result};
use crate::layout;
use crate::metrics;
use crate::shard_state::ShardState;

pub use crate::shard_state::{DamagedPart, ShardDamage};

/// Whether a `system.detached_parts` reason means chDB set the part aside
/// because it could not trust it. Parts detached by hand (reason empty),
/// `ignored` (covered by a merged part after a crash: their rows are in
/// the merged part) and parts mid-fetch or mid-attach are not damage.
pub fn is_damage_reason(reason: &str) -> bool {
    reason.starts_with("broken") || reason == "covered-by-broken" || reason == "noquorum"
}

/// Whether a chDB error message says the data it read is damaged (rather
/// than the statement being wrong): a checksum mismatch, a file shorter
/// than its marks, a block that does not decompress.
pub fn is_corruption_message(message: &str) -> bool {
    [
        "CHECKSUM_DOESNT_MATCH",
        "CANNOT_READ_ALL_DATA",
        "CORRUPTED_DATA",
        "CANNOT_DECOMPRESS",
        "UNKNOWN_COMPRESSION_METHOD",
        "ATTEMPT_TO_READ_AFTER_EOF",
        "UNEXPECTED_FILE_IN_DATA_PART",
        "NO_FILE_IN_DATA_PART",
    ]
    .iter()
    .any(|code| message.contains(code))
}

/// The damaged shards among `rows` of (chDB database, table, part,
/// reason), already filtered to damage; rows of databases that are not a
/// shard's are ignored. Sorted by shard, parts sorted.
pub fn damaged_shards(rows: Vec<DamagedPart>) -> Vec<ShardDamage> {
    let mut by_shard: BTreeMap<u32, Vec<DamagedPart>> = BTreeMap::new();
    for p in rows {
        let shard =
            layout::parse_shard_db(&p.database).or_else(|| layout::parse_data_db(&p.database));
        if let Some(shard) = shard {
            by_shard.entry(shard).or_default().push(p);
        }
    }
    by_shard
        .into_iter()
        .map(|(shard, mut parts)| {
            parts.sort();
            parts.dedup();
            ShardDamage { shard, parts }
        })
        .collect()
}

impl Engine {
    /// Shards whose copy here is damaged and not yet replaced, with the parts.
    pub fn damaged_shards(&self) -> Vec<ShardDamage> {
        let mut out: Vec<ShardDamage> = self
            .inner
            .shards
            .all()
            .iter()
            .filter_map(|st| {
                let parts = st.damaged_parts();
                (!parts.is_empty()).then(|| ShardDamage {
                    shard: st.shard(),
                    parts,
                })
            })
            .collect();
        out.sort_by_key(|d| d.shard);
        out
    }

    /// Hashes every file of every part of the shards' tables against its
    /// `checksums.txt` (`CHECK TABLE`), marking shards with a failing part
    /// damaged. Reads all stored data: its cost grows with the data (the
    /// node's log says how long it took). Returns the shards found damaged.
    pub fn verify_parts(&self) -> Result<Vec<ShardDamage>> {
        let started = Instant::now();
        let mut conn = self.inner.pool.get();
        let tables = conn.query(
            "SELECT database, name, total_bytes FROM system.tables \
             WHERE database LIKE 'shard\\_%' AND engine LIKE '%MergeTree' ORDER BY database, name",
        )?;
        let mut found = Vec::new();
        let (mut n_tables, mut bytes) = (0usize, 0u64);
        for b in &tables {
            let (dbs, names) = (strings(b, 0), strings(b, 1));
            bytes += crate::columns::u64s(b, 2).iter().sum::<u64>();
            for (db, table) in dbs.into_iter().zip(names) {
                n_tables += 1;
                let sql = format!(
                    "CHECK TABLE {} SETTINGS check_query_single_value_result = 0",
                    layout::qualified(&db, &table)
                );
                let rows = match conn.query(&sql) {
                    Ok(rows) => rows,
                    Err(e) => {
                        found.push(DamagedPart {
                            database: db.clone(),
                            table: table.clone(),
                            part: "*".into(),
                            reason: format!("CHECK TABLE failed: {e}"),
                        });
                        continue;
                    }
                };
                for r in &rows {
                    let (part, passed, msg) = (strings(r, 0), strings(r, 1), strings(r, 2));
                    for i in 0..r.num_rows() {
                        if passed[i] != "1" {
                            found.push(DamagedPart {
                                database: db.clone(),
                                table: table.clone(),
                                part: part[i].clone(),
                                reason: msg[i].clone(),
                            });
                        }
                    }
                }
            }
        }
        tracing::info!(
            tables = n_tables,
            bytes,
            took_ms = started.elapsed().as_millis() as u64,
            "engine parts verified against their checksums"
        );
        Ok(self.inner.mark_damaged(damaged_shards(found)))
    }
}

impl Inner {
    /// Parts chDB detached at start because it could not load them.
    pub(crate) fn find_detached_damage(&self) -> Result<()> {
        let batches = self.pool.get().query(
            "SELECT database, table, name, reason FROM system.detached_parts \
             WHERE database LIKE 'shard\\_%' ORDER BY database, table, name",
        )?;
        let mut rows = Vec::new();
        for b in &batches {
            let (db, table, name, reason) =
                (strings(b, 0), strings(b, 1), strings(b, 2), strings(b, 3));
            for i in 0..b.num_rows() {
                if is_damage_reason(&reason[i]) {
                    rows.push(DamagedPart {
                        database: db[i].clone(),
                        table: table[i].clone(),
                        part: name[i].clone(),
                        reason: reason[i].clone(),
                    });
                }
            }
        }
        self.mark_damaged(damaged_shards(rows));
        Ok(())
    }

    /// Records damage (logging each part once) and returns what was new.
    pub(crate) fn mark_damaged(&self, found: Vec<ShardDamage>) -> Vec<ShardDamage> {
        let mut new = Vec::new();
        for d in found {
            let fresh = self.shard_state(d.shard).add_damage(d.parts);
            for p in &fresh {
                tracing::error!(
                    shard = d.shard,
                    database = %p.database,
                    table = %p.table,
                    part = %p.part,
                    reason = %p.reason,
                    "engine part damaged: shard {}'s copy on this node is incomplete; reads of it are refused until it is rebuilt from a peer",
                    d.shard
                );
            }
            if !fresh.is_empty() {
                new.push(ShardDamage {
                    shard: d.shard,
                    parts: fresh,
                });
            }
        }
        self.count_damaged();
        new
    }

    /// The shard's data was replaced whole: whatever was damaged is gone.
    pub(crate) fn clear_damage(&self, st: &ShardState) {
        if st.clear_damage() {
            tracing::info!(
                shard = st.shard(),
                "damaged engine data replaced from a snapshot"
            );
        }
        self.count_damaged();
    }

    fn count_damaged(&self) {
        let n = self
            .shards
            .all()
            .iter()
            .filter(|st| st.is_damaged())
            .count();
        metrics::DAMAGED_SHARDS.set(n as i64);
    }

    /// Err for a read of a damaged shard (another replica answers it).
    pub(crate) fn refuse_damaged(&self, st: &ShardState) -> Result<()> {
        let parts = st.damaged_parts();
        if parts.is_empty() {
            return Ok(());
        }
        let d = ShardDamage {
            shard: st.shard(),
            parts,
        };
        Err(EngineError::ShardDamaged {
            shard: st.shard(),
            parts: d.describe(),
        })
    }

    /// A read failed: when chDB says the data is damaged, the shard is,
    /// and the read is refused as for damage found at start (another
    /// replica answers it); other errors are the statement's.
    pub(crate) fn read_error(&self, shard: u32, database: &str, e: EngineError) -> EngineError {
        let EngineError::Sql { message, .. } = &e else {
            return e;
        };
        if !is_corruption_message(message) {
            return e;
        }
        let damage = ShardDamage {
            shard,
            parts: vec![DamagedPart {
                database: database.to_string(),
                table: "?".into(),
                part: "?".into(),
                reason: message.chars().take(300).collect(),
            }],
        };
        let parts = damage.describe();
        self.mark_damaged(vec![damage]);
        EngineError::ShardDamaged { shard, parts }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(db: &str, part: &str, reason: &str) -> DamagedPart {
        DamagedPart {
            database: db.into(),
            table: "cpu".into(),
            part: part.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn only_parts_chdb_could_not_trust_are_damage() {
        for r in ["broken-on-start", "broken", "covered-by-broken", "noquorum"] {
            assert!(is_damage_reason(r), "{r}");
        }
        for r in ["", "ignored", "clone", "attaching", "deleting", "tmp-fetch"] {
            assert!(!is_damage_reason(r), "{r}");
        }
    }

    #[test]
    fn damaged_parts_group_by_shard_and_ignore_other_databases() {
        let key = "shard_0003_e14736afa73f9fe9";
        let rows = vec![
            part(key, "broken-on-start_19700101_2_2_1", "broken-on-start"),
            part(
                "shard_0011",
                "all_1_1_0",
                "Checksum mismatch for file data.bin",
            ),
            part(key, "broken-on-start_19700101_2_2_1", "broken-on-start"),
            part("default", "all_1_1_0", "broken-on-start"),
            part("shard_x", "all_1_1_0", "broken-on-start"),
        ];
        let got = damaged_shards(rows);
        assert_eq!(got.iter().map(|d| d.shard).collect::<Vec<_>>(), [3, 11]);
        assert_eq!(got[0].parts.len(), 1, "duplicates collapse");
        let text = got[0].describe();
        assert!(
            text.contains(key) && text.contains("19700101_2_2_1"),
            "{text}"
        );
        assert!(damaged_shards(Vec::new()).is_empty());
    }

    #[test]
    fn corruption_is_told_apart_from_a_bad_statement() {
        assert!(is_corruption_message(
            "Code: 40. DB::Exception: Checksum doesn't match: corrupted data. (CHECKSUM_DOESNT_MATCH)"
        ));
        assert!(is_corruption_message(
            "Cannot read all data. (CANNOT_READ_ALL_DATA)"
        ));
        assert!(!is_corruption_message(
            "Unknown table expression identifier 'x'. (UNKNOWN_TABLE)"
        ));
        assert!(!is_corruption_message("Syntax error (SYNTAX_ERROR)"));
    }
}
