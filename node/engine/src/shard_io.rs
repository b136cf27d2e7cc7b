//! Moving a shard's data in and out of this node whole: snapshot export
//! and import (Raft snapshots for lagging or new replicas) and dropping a
//! shard's copy.

use std::sync::atomic::Ordering;

use crate::columns::align_all;
use crate::engine::Engine;
use crate::error::Result;
use crate::layout::{self, FieldType, SERIES_TABLE};
use crate::{flush, ipc, metrics, snapshot};

impl Engine {
    /// All of a shard's data after flushing it, as snapshot bytes, with its flushed index.
    pub fn export_shard(&self, shard: u32) -> Result<(u64, Vec<u8>)> {
        let st = self.inner.shard_state(shard);
        self.inner.flush_shard(&st, true)?;
        let _g = st.flush_lock.lock();
        let index = st.flushed.load(Ordering::Acquire);
        let mut tables = Vec::new();
        if st.created.load(Ordering::Acquire) {
            let mut conn = self.inner.pool.get();
            let cols: Vec<(String, Vec<(String, FieldType)>)> = {
                let t = st.tables.lock();
                let mut v: Vec<_> = t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                v.sort_by(|a, b| a.0.cmp(&b.0));
                v
            };
            for (m, fields) in cols {
                let sql = format!("SELECT * FROM {} FINAL", layout::qualified(&st.db, &m));
                let batches = conn.query(&sql)?;
                let schema = ipc::points_schema(&fields);
                let aligned = align_all(&batches, &schema)?;
                tables.push((m, schema, aligned));
            }
            let sql = format!(
                "SELECT series_id, measurement, tags FROM {} FINAL",
                layout::qualified(&st.db, SERIES_TABLE)
            );
            let batches = conn.query(&sql)?;
            let schema = ipc::series_schema();
            let aligned = align_all(&batches, &schema)?;
            tables.push((SERIES_TABLE.to_string(), schema, aligned));
        }
        Ok((index, snapshot::encode(&tables)?))
    }

    /// Replaces a shard's data with a snapshot and sets its flushed index.
    pub fn import_shard(&self, shard: u32, flushed_index: u64, data: &[u8]) -> Result<()> {
        let tables = snapshot::decode(shard, data)?;
        let st = self.inner.shard_state(shard);
        let _g = st.flush_lock.lock();
        let dropped = std::mem::take(&mut *st.buf.lock());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        st.clear_failing();
        let mut conn = self.inner.pool.get();
        conn.execute(&format!(
            "DROP DATABASE IF EXISTS {} SYNC",
            layout::ident(&st.db)
        ))?;
        st.created.store(false, Ordering::Release);
        st.tables.lock().clear();
        st.catalog.write().clear();
        self.inner.ensure_shard(&mut conn, &st)?;
        for (name, schema, batches) in tables {
            if name == SERIES_TABLE {
                flush::ingest_concat(&mut conn, &st.db, SERIES_TABLE, &schema, &batches)?;
                continue;
            }
            layout::validate_measurement(&name)?;
            let fields = layout::batch_fields(&name, &schema)?;
            {
                let mut cat = st.catalog.write();
                for (f, t) in &fields {
                    cat.insert(&name, f, *t);
                }
            }
            let cols = self.inner.ensure_table(&mut conn, &st, &name, &fields)?;
            let tschema = ipc::points_schema(&cols);
            let aligned = align_all(&batches, &tschema)?;
            flush::ingest_concat(&mut conn, &st.db, &name, &tschema, &aligned)?;
        }
        self.inner.sync_parts()?;
        flush::write_flushed(&mut conn, &st.db, flushed_index)?;
        st.flushed.store(flushed_index, Ordering::Release);
        st.applied.store(flushed_index, Ordering::Release);
        Ok(())
    }

    /// Deletes a shard's data and buffers on this node.
    pub fn drop_shard(&self, shard: u32) -> Result<()> {
        let Some(st) = self.inner.shards.read().get(&shard).cloned() else {
            return Ok(());
        };
        let _g = st.flush_lock.lock();
        let dropped = std::mem::take(&mut *st.buf.lock());
        metrics::PENDING_ROWS.sub(dropped.rows as i64);
        st.clear_failing();
        self.inner.pool.get().execute(&format!(
            "DROP DATABASE IF EXISTS {} SYNC",
            layout::ident(&st.db)
        ))?;
        self.inner.shards.write().remove(&shard);
        Ok(())
    }
}
