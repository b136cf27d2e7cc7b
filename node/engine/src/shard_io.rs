//! Moving a shard's data in and out of this node whole: snapshot export
//! and import (Raft snapshots for lagging or new replicas) and dropping a
//! shard's copy.

use crate::columns::align_all;
use crate::engine::{Engine, Inner};
use crate::error::EngineError;
use crate::error::Result;
use crate::layout::{self, FieldType, TableId, DATABASE_TABLE, SERIES_TABLE};
use crate::pool::Conn;
use crate::shard_state::ShardState;
use crate::tag_index;
use crate::{flush, ipc, metrics, snapshot};

impl Engine {
    /// All of a shard's data after flushing it, as snapshot bytes, with its
    /// flushed index. Tables are named `database/table`; every database
    /// brings its `_series` and `_database` tables, so an empty database
    /// and its retention travel too.
    pub fn export_shard(&self, shard: u32) -> Result<(u64, Vec<u8>)> {
        let st = self.inner.shard_state(shard);
        // A damaged copy must not seed another replica.
        self.inner.refuse_damaged(&st)?;
        self.inner.flush_shard(&st, true)?;
        let _flushes = st.lock_flushes();
        let index = st.flushed();
        let mut tables = Vec::new();
        if st.is_created() {
            let mut conn = self.inner.pool.get();
            let cols: Vec<(TableId, Vec<(String, FieldType)>)> = {
                let t = st.lock_tables();
                let mut v: Vec<_> = t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            let databases: Vec<(String, String)> = {
                let d = st.lock_databases();
                let mut v: Vec<_> = d.iter().map(|(k, v)| (k.clone(), v.chdb.clone())).collect();
                v.sort();
                v
            };
            for (name, chdb) in &databases {
                let sql = format!(
                    "SELECT name, retention_ns, `index` FROM {} FINAL",
                    layout::qualified(chdb, DATABASE_TABLE)
                );
                let batches = conn.query(&sql)?;
                let schema = database_schema();
                let aligned = align_all(&batches, &schema)?;
                tables.push((TableId::new(name, DATABASE_TABLE).path(), schema, aligned));
                let sql = format!(
                    "SELECT series_id, measurement, tags FROM {} FINAL",
                    layout::qualified(chdb, SERIES_TABLE)
                );
                let batches = conn.query(&sql)?;
                let schema = tag_index::index_schema();
                let aligned = align_all(&batches, &schema)?;
                tables.push((TableId::new(name, SERIES_TABLE).path(), schema, aligned));
            }
            for (id, fields) in cols {
                let chdb = layout::data_db(shard, &id.database);
                let sql = format!(
                    "SELECT * FROM {} FINAL",
                    layout::qualified(&chdb, &id.table)
                );
                let batches = conn.query(&sql)?;
                let schema = ipc::points_schema(&fields);
                let aligned = align_all(&batches, &schema)?;
                tables.push((id.path(), schema, aligned));
            }
        }
        Ok((index, snapshot::encode(&tables)?))
    }

    /// Replaces a shard's data with a snapshot and sets its flushed index.
    pub fn import_shard(&self, shard: u32, flushed_index: u64, data: &[u8]) -> Result<()> {
        let tables = snapshot::decode(shard, data)?;
        let st = self.inner.shard_state(shard);
        let _flushes = st.lock_flushes();
        let dropped = std::mem::take(&mut *st.lock_buf());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        st.clear_failing();
        let mut conn = self.inner.pool.get();
        self.inner.drop_shard_storage(&mut conn, &st)?;
        self.inner.ensure_shard(&mut conn, &st)?;
        for (name, schema, batches) in tables {
            let id = TableId::from_path(&name).ok_or_else(|| EngineError::BadSnapshot {
                shard,
                reason: format!("table {name:?} is not named database/table"),
            })?;
            layout::validate_database(&id.database)?;
            let chdb = self.inner.ensure_database(&mut conn, &st, &id.database)?;
            if id.table == SERIES_TABLE || id.table == DATABASE_TABLE {
                flush::ingest_concat(&mut conn, &chdb, &id.table, &schema, &batches)?;
                if id.table == DATABASE_TABLE {
                    let r = batches
                        .last()
                        .and_then(|b| crate::columns::i64s(b, 1).last().copied());
                    if let (Some(r), Some(d)) = (r, st.lock_databases().get_mut(&id.database)) {
                        d.retention_ns = r;
                    }
                }
                continue;
            }
            layout::validate_table(&id.table)?;
            let fields = layout::batch_fields(&id.table, &schema)?;
            {
                let mut cat = st.write_catalog();
                for (f, t) in &fields {
                    cat.insert(&id, f, *t);
                }
            }
            let cols = self.inner.ensure_table(&mut conn, &st, &id, &fields)?;
            let tschema = ipc::points_schema(&cols);
            let aligned = align_all(&batches, &tschema)?;
            flush::ingest_concat(&mut conn, &chdb, &id.table, &tschema, &aligned)?;
        }
        self.inner.sync_parts()?;
        flush::write_flushed(&mut conn, st.db(), flushed_index)?;
        st.set_flushed(flushed_index);
        st.set_applied(flushed_index);
        self.inner.clear_damage(&st);
        self.inner.marks.bump_shard(shard);
        Ok(())
    }

    /// Deletes a shard's data and buffers on this node.
    pub fn drop_shard(&self, shard: u32) -> Result<()> {
        let Some(st) = self.inner.shards.get(shard) else {
            return Ok(());
        };
        let _flushes = st.lock_flushes();
        let dropped = std::mem::take(&mut *st.lock_buf());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        st.clear_failing();
        self.inner
            .drop_shard_storage(&mut self.inner.pool.get(), &st)?;
        self.inner.shards.remove(shard);
        Ok(())
    }
}

impl Inner {
    /// Drops every chDB database of a shard (its own and its databases')
    /// and forgets what the shard knew about them. Caller holds the flush lock.
    pub(crate) fn drop_shard_storage(&self, conn: &mut Conn, st: &ShardState) -> Result<()> {
        // The ledger first: if this stops half way, no table is trusted.
        crate::rewrites_ledger::forget_all(conn, st.db())?;
        let prefix = format!("{}\\_%", st.db());
        let batches = conn.query(&format!(
            "SELECT name FROM system.databases WHERE name LIKE {}",
            layout::literal(&prefix)
        ))?;
        for b in &batches {
            for db in crate::columns::strings(b, 0) {
                if layout::parse_data_db(&db) == Some(st.shard()) {
                    conn.execute(&format!(
                        "DROP DATABASE IF EXISTS {} SYNC",
                        layout::ident(&db)
                    ))?;
                }
            }
        }
        conn.execute(&format!(
            "DROP DATABASE IF EXISTS {} SYNC",
            layout::ident(st.db())
        ))?;
        st.set_created(false);
        st.lock_tables().clear();
        st.lock_databases().clear();
        st.write_catalog().clear();
        st.lock_known_series().clear();
        st.lock_rewrites().clear();
        st.lock_rollups().clear();
        self.marks.bump_shard(st.shard());
        Ok(())
    }
}

/// Columns of a database's `_database` settings table.
pub(crate) fn database_schema() -> arrow_schema::SchemaRef {
    use arrow_schema::{DataType, Field, Schema};
    std::sync::Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("retention_ns", DataType::Int64, false),
        Field::new("index", DataType::UInt64, false),
    ]))
}
