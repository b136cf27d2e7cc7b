//! A shard's immutable parts in and out of the engine, for backups
//! (docs/operations.md, "Backups").
//!
//! **Freeze**: flush the shard, then, under its flush lock (no flush, DDL
//! or drop in between), read its flushed index, databases and tables and
//! `ALTER TABLE ... FREEZE WITH NAME` every table: chDB hardlinks the
//! table's active parts under `shadow/<name>/`, so they stay readable
//! while merges replace them. The caller copies the files out and calls
//! [`Engine::unfreeze`]. Every entry at or below the flushed index is in
//! those parts (a flush only moves the index after its rows' parts were
//! written); rows of later entries may be there too.
//!
//! **Restore**: into a shard that stores nothing here: create its
//! databases and tables as a write would, record their columns in the
//! shard's catalog, move the part directories into each table's
//! `detached/` and `ATTACH PART` them. The shard's flushed and applied
//! indexes are left as they are: the restored rows are the shard's
//! starting data, outside its (new) Raft log, and every replica of the
//! shard restores the same parts.
//!
//! `_database` is not frozen: its rows carry the old log's indexes, which
//! would outrank the new log's storage operations. A database's retention
//! travels as a value and is written again with index 0.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt64Array};

use crate::columns::strings;
use crate::engine::{Engine, Inner};
use crate::error::{EngineError, Result};
use crate::layout::{self, FieldType, TableId, DATABASE_TABLE, SERIES_TABLE};
use crate::pool::Conn;
use crate::shard_state::ShardState;

/// One database of a shard: its name and retention (ns; 0 = forever,
/// -1 = the node's default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardDatabase {
    pub name: String,
    pub retention_ns: i64,
}

/// One table's parts, frozen (backup) or staged (restore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableParts {
    pub database: String,
    /// The table's name in its database: a measurement, `_samples` or
    /// `_series`.
    pub table: String,
    /// Field columns of a fact table (empty for `_series`), in table order.
    pub fields: Vec<(String, FieldType)>,
    /// Part name and the directory holding its files.
    pub parts: Vec<(String, PathBuf)>,
    /// The table's UUID when frozen (a table dropped and created again
    /// has another, and its part names mean other rows); empty when
    /// staged for a restore or unknown.
    pub uuid: String,
    /// How a fact table's parts are sorted: a restore creates the table
    /// with this order (parts sorted otherwise would read wrong). Unused
    /// for `_series`.
    pub order: layout::FactOrder,
}

/// What [`Engine::freeze_shard`] hardlinked.
#[derive(Debug, Clone)]
pub struct FrozenShard {
    pub shard: u32,
    /// Every entry at or below this index is in the parts.
    pub flushed_index: u64,
    pub databases: Vec<ShardDatabase>,
    pub tables: Vec<TableParts>,
}

impl Engine {
    /// Flushes a shard and hardlinks its parts under `shadow/<tag>/`.
    /// `tag` is the backup's id (letters, digits, `-`, `_`).
    pub fn freeze_shard(&self, shard: u32, tag: &str) -> Result<FrozenShard> {
        check_tag(tag)?;
        let st = self.inner.shard_state(shard);
        self.inner.refuse_damaged(&st)?;
        self.inner.flush_shard(&st, true)?;
        // Lock order: `flushes` first; the databases and tables locks are
        // taken and released one at a time below it.
        let _flushes = st.lock_flushes();
        let flushed_index = st.flushed();
        let databases = shard_databases(&st);
        let mut tables = Vec::new();
        if st.is_created() {
            let mut conn = self.inner.pool.get();
            for (id, fields) in shard_tables(&st, &databases) {
                let chdb = layout::data_db(shard, &id.database);
                let parts = self.inner.freeze_table(&mut conn, &chdb, &id.table, tag)?;
                let (uuid, order) = self.inner.table_identity(&mut conn, &chdb, &id.table)?;
                tables.push(TableParts {
                    database: id.database,
                    table: id.table,
                    fields,
                    parts,
                    uuid,
                    order,
                });
            }
        }
        Ok(FrozenShard {
            shard,
            flushed_index,
            databases,
            tables,
        })
    }

    /// Removes what [`Engine::freeze_shard`] hardlinked under `tag`.
    pub fn unfreeze(&self, tag: &str) -> Result<()> {
        check_tag(tag)?;
        let dir = self
            .inner
            .cfg
            .data_dir
            .join("shadow")
            .join(shadow_name(tag));
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(EngineError::DataDir {
                path: dir,
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Removes what a backup or restore stopped half-way (a killed
    /// process) left behind: hardlinks under `shadow/` (they would pin
    /// merged-away parts' disk space forever) and staged downloads. Call at
    /// start, before any backup can run.
    pub fn clear_backup_leftovers(&self) -> Result<()> {
        for dir in [self.inner.cfg.data_dir.join("shadow"), self.staging_dir()] {
            match std::fs::remove_dir_all(&dir) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(EngineError::DataDir {
                        path: dir,
                        source: e,
                    })
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A directory next to the engine's (same file system, so staged
    /// parts move in by rename) for a restore's downloads.
    pub fn staging_dir(&self) -> PathBuf {
        self.inner.cfg.data_dir.with_file_name("backup-staging")
    }

    /// True when this node's copy of the shard stores any database.
    pub fn shard_has_data(&self, shard: u32) -> bool {
        let st = self.inner.shards.get(shard);
        st.is_some_and(|st| !st.lock_databases().is_empty())
    }

    /// Restores a shard's databases and parts into this node's (empty)
    /// copy of it. The part directories are moved (or copied, across
    /// file systems) into the tables' `detached/` directories.
    pub fn restore_shard(
        &self,
        shard: u32,
        databases: &[ShardDatabase],
        tables: &[TableParts],
    ) -> Result<()> {
        let st = self.inner.shard_state(shard);
        let _flushes = st.lock_flushes();
        // `buf` before `databases` (lock order), never both at once.
        let buffered = !st.lock_buf().is_empty();
        let stored = !st.lock_databases().is_empty();
        if buffered || stored {
            return Err(EngineError::RestoreRefused {
                shard,
                reason: "this node's copy of the shard already holds data".into(),
            });
        }
        let mut conn = self.inner.pool.get();
        for d in databases {
            layout::validate_database(&d.name)?;
            let chdb = self.inner.ensure_database(&mut conn, &st, &d.name)?;
            if d.retention_ns >= 0 {
                write_retention(&mut conn, &chdb, &d.name, d.retention_ns)?;
            }
            if let Some(s) = st.lock_databases().get_mut(&d.name) {
                s.retention_ns = d.retention_ns;
            }
        }
        for t in tables {
            // Attached rows were not seen by the flusher: reads keep FINAL,
            // also after a restart (the ledger hears it first).
            let id = TableId::new(&t.database, &t.table);
            crate::rewrites_ledger::write(&mut conn, st.db(), &id, false, &[])?;
            st.lock_rewrites().remove(&id);
            self.inner.attach_table(&mut conn, &st, t)?;
        }
        self.inner.sync_parts()?;
        st.lock_known_series().clear();
        self.inner.marks.bump_shard(shard);
        Ok(())
    }
}

impl Inner {
    /// Freezes one table; returns its frozen parts (name, directory).
    fn freeze_table(
        &self,
        conn: &mut Conn,
        chdb: &str,
        table: &str,
        tag: &str,
    ) -> Result<Vec<(String, PathBuf)>> {
        let data_path = self.table_path(conn, chdb, table)?;
        conn.execute(&format!(
            "ALTER TABLE {} FREEZE WITH NAME {}",
            layout::qualified(chdb, table),
            layout::literal(tag)
        ))?;
        let root = self.root()?;
        let rel = data_path
            .strip_prefix(&root)
            .map_err(|_| EngineError::BackupFiles {
                path: data_path.clone(),
                reason: format!(
                    "table data is not under the engine's directory {}",
                    root.display()
                ),
            })?;
        let shadow = root.join("shadow").join(shadow_name(tag)).join(rel);
        list_parts(&shadow)
    }

    /// Creates a table like a write would, in the order its parts were
    /// sorted for, then attaches the staged parts.
    fn attach_table(&self, conn: &mut Conn, st: &ShardState, t: &TableParts) -> Result<()> {
        let chdb = self.ensure_database(conn, st, &t.database)?;
        if t.table != SERIES_TABLE {
            layout::validate_table(&t.table)?;
            let id = TableId::new(&t.database, &t.table);
            // `_samples` came with the database, in this node's order; it
            // is empty (the shard stored nothing), so it is made again.
            let exists = st.lock_tables().contains_key(&id);
            if exists && self.table_identity(conn, &chdb, &t.table)?.1 != t.order {
                conn.execute(&format!(
                    "DROP TABLE IF EXISTS {}",
                    layout::qualified(&chdb, &t.table)
                ))?;
                st.lock_tables().remove(&id);
            }
            self.ensure_table_ordered(conn, st, &id, &t.fields, t.order)?;
            let mut cat = st.write_catalog();
            for (f, ty) in &t.fields {
                cat.insert(&id, f, *ty);
            }
        }
        let detached = self.table_path(conn, &chdb, &t.table)?.join("detached");
        for (name, dir) in &t.parts {
            check_part_name(name)?;
            let to = detached.join(name);
            move_dir(dir, &to)?;
            conn.execute(&format!(
                "ALTER TABLE {} ATTACH PART {}",
                layout::qualified(&chdb, &t.table),
                layout::literal(name)
            ))?;
        }
        Ok(())
    }

    /// The table's UUID (empty for a table without one: all zeros) and
    /// its sort order (`_series`' is none of a fact table's: the default).
    fn table_identity(
        &self,
        conn: &mut Conn,
        chdb: &str,
        table: &str,
    ) -> Result<(String, layout::FactOrder)> {
        let batches = conn.query(&format!(
            "SELECT toString(uuid), sorting_key FROM system.tables WHERE database = {} AND name = {}",
            layout::literal(chdb),
            layout::literal(table)
        ))?;
        let uuid = batches.iter().flat_map(|b| strings(b, 0)).next();
        let key = batches.iter().flat_map(|b| strings(b, 1)).next();
        let order = key
            .as_deref()
            .and_then(layout::FactOrder::from_sorting_key)
            .unwrap_or_default();
        let uuid = uuid
            .filter(|u| u.chars().any(|c| c != '0' && c != '-'))
            .unwrap_or_default();
        Ok((uuid, order))
    }

    /// The table's data directory (absolute).
    fn table_path(&self, conn: &mut Conn, chdb: &str, table: &str) -> Result<PathBuf> {
        let batches = conn.query(&format!(
            "SELECT arrayJoin(data_paths) FROM system.tables WHERE database = {} AND name = {}",
            layout::literal(chdb),
            layout::literal(table)
        ))?;
        let path = batches.iter().flat_map(|b| strings(b, 0)).next();
        path.map(PathBuf::from)
            .ok_or_else(|| EngineError::BackupFiles {
                path: PathBuf::from(format!("{chdb}.{table}")),
                reason: "the table has no data path in system.tables".into(),
            })
    }

    fn root(&self) -> Result<PathBuf> {
        let d = &self.cfg.data_dir;
        d.canonicalize().map_err(|source| EngineError::DataDir {
            path: d.clone(),
            source,
        })
    }
}

/// The shard's databases, by name.
fn shard_databases(st: &ShardState) -> Vec<ShardDatabase> {
    let mut v: Vec<ShardDatabase> = st
        .lock_databases()
        .iter()
        .map(|(name, d)| ShardDatabase {
            name: name.clone(),
            retention_ns: d.retention_ns,
        })
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// Every table to back up: each database's `_series`, then the fact
/// tables (measurements and `_samples`) with their columns.
fn shard_tables(
    st: &ShardState,
    databases: &[ShardDatabase],
) -> Vec<(TableId, Vec<(String, FieldType)>)> {
    let mut v: Vec<(TableId, Vec<(String, FieldType)>)> = databases
        .iter()
        .map(|d| (TableId::new(&d.name, SERIES_TABLE), Vec::new()))
        .collect();
    let mut facts: Vec<_> = st
        .lock_tables()
        .iter()
        .map(|(k, f)| (k.clone(), f.clone()))
        .collect();
    facts.sort_by(|a, b| a.0.cmp(&b.0));
    v.extend(facts);
    v
}

fn write_retention(conn: &mut Conn, chdb: &str, name: &str, retention_ns: i64) -> Result<()> {
    let schema = crate::shard_io::database_schema();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(vec![name])),
        Arc::new(Int64Array::from(vec![retention_ns])),
        Arc::new(UInt64Array::from(vec![0u64])),
    ];
    let batch = RecordBatch::try_new(schema.clone(), cols)?;
    conn.ingest(chdb, DATABASE_TABLE, schema, vec![batch])
}

/// Part directories under a frozen table's shadow directory, by name.
fn list_parts(shadow: &Path) -> Result<Vec<(String, PathBuf)>> {
    let io = |source| EngineError::DataDir {
        path: shadow.to_path_buf(),
        source,
    };
    let entries = match std::fs::read_dir(shadow) {
        Ok(e) => e,
        // A table without parts freezes nothing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    let mut parts = Vec::new();
    for e in entries {
        let e = e.map_err(io)?;
        if e.file_type().map_err(io)?.is_dir() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name != "detached" {
                parts.push((name, e.path()));
            }
        }
    }
    parts.sort();
    Ok(parts)
}

fn move_dir(from: &Path, to: &Path) -> Result<()> {
    let io = |path: &Path, source| EngineError::DataDir {
        path: path.to_path_buf(),
        source,
    };
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| io(to, e))?;
    }
    if std::fs::rename(from, to).is_ok() {
        return Ok(());
    }
    // Another file system: copy the (flat) part directory.
    std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
    for e in std::fs::read_dir(from).map_err(|e| io(from, e))? {
        let e = e.map_err(|e| io(from, e))?;
        std::fs::copy(e.path(), to.join(e.file_name())).map_err(|err| io(&e.path(), err))?;
    }
    Ok(())
}

/// A backup id names a directory under `shadow/`.
fn check_tag(tag: &str) -> Result<()> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::BackupFiles {
            path: PathBuf::from(tag),
            reason: "a backup id is 1-128 letters, digits, '-' or '_'".into(),
        })
    }
}

/// The directory chDB freezes `tag` into: it escapes a name for the file
/// system as ClickHouse's `escapeForFileName` does (every byte but ASCII
/// letters, digits and `_` as `%XX`), so `b-1` lands in `shadow/b%2D1`.
fn shadow_name(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    for b in tag.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A part name from a manifest becomes a directory name: no separators.
fn check_part_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(EngineError::BackupFiles {
            path: PathBuf::from(name),
            reason: "not a part name (letters, digits, '-' and '_')".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_part_names_cannot_escape_their_directory() {
        assert!(check_tag("b-20261127-0930_1").is_ok());
        for bad in ["", "../x", "a/b", "a b", "x".repeat(129).as_str()] {
            assert!(check_tag(bad).is_err(), "{bad:?}");
        }
        assert!(check_part_name("20261127_1_5_1_7").is_ok());
        for bad in ["", ".", "..", "a/b", "../../etc"] {
            assert!(check_part_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shadow_names_are_escaped_like_chdb_does() {
        assert_eq!(shadow_name("b1_s0"), "b1_s0");
        assert_eq!(shadow_name("b-20261127-s1"), "b%2D20261127%2Ds1");
    }

    #[test]
    fn parts_are_the_directories_of_a_shadow_table() {
        let d = tempfile::tempdir().unwrap();
        assert!(list_parts(&d.path().join("none")).unwrap().is_empty());
        std::fs::create_dir(d.path().join("all_2_2_0")).unwrap();
        std::fs::create_dir(d.path().join("all_1_1_0")).unwrap();
        std::fs::create_dir(d.path().join("detached")).unwrap();
        std::fs::write(d.path().join("frozen_metadata.txt"), "x").unwrap();
        let names: Vec<String> = list_parts(d.path())
            .unwrap()
            .into_iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(names, ["all_1_1_0", "all_2_2_0"]);
    }
}
