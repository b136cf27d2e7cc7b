//! Storage operations that travel through the WAL (create and drop a
//! database, retention, drop a measurement, delete points or series) and
//! the retention sweep.
//!
//! An operation is applied as a **barrier**: the rows of earlier entries
//! still buffered are stored first, then the operation runs, then the
//! shard's flushed index moves to the operation's own index. Every replica
//! applies the same operations at the same places of the same log, so they
//! hold the same data; a replay after a crash re-applies entries from the
//! flushed index on, and each operation is idempotent.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use shardhouse_common::proto::{storage_op, tag_expr, tag_match, StorageOp, TagExpr};
use storage_op::Op;

use crate::apply::Applied;
use crate::columns::strings;
use crate::engine::{Engine, Inner};
use crate::error::{EngineError, Result};
use crate::flush;
use crate::layout::{self, TableId, DATABASE_TABLE, SAMPLES_TABLE, SERIES_TABLE};
use crate::pool::Conn;
use crate::shard_state::{DatabaseState, ShardState};

/// One database as this node's replicas hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseReport {
    pub name: String,
    /// Effective retention in ns (0 = keep forever), the node default
    /// applied where the database sets none.
    pub retention_ns: i64,
    /// Shards of which this node holds a replica with this database.
    pub shards: Vec<u32>,
}

/// SQL condition over `_series` rows for a tag predicate. A missing tag
/// reads as '' (`tags['k']` of a map without `k`), as in InfluxDB.
pub fn predicate_sql(expr: &TagExpr) -> std::result::Result<String, String> {
    match &expr.expr {
        None => Err("a tag predicate is empty".into()),
        Some(tag_expr::Expr::Match(m)) => {
            if m.key.is_empty() {
                return Err("a tag predicate names no tag key".into());
            }
            let tag = format!("tags[{}]", layout::literal(&m.key));
            let v = layout::literal(&m.value);
            Ok(match tag_match::Op::try_from(m.op) {
                Ok(tag_match::Op::Eq) => format!("{tag} = {v}"),
                Ok(tag_match::Op::Neq) => format!("{tag} != {v}"),
                Ok(tag_match::Op::Regex) => format!("match({tag}, {v})"),
                Ok(tag_match::Op::NotRegex) => format!("NOT match({tag}, {v})"),
                Err(_) => return Err(format!("unknown tag match operator {}", m.op)),
            })
        }
        Some(tag_expr::Expr::All(list)) | Some(tag_expr::Expr::Any(list)) => {
            if list.items.is_empty() {
                return Err("an AND/OR of tag predicates has no items".into());
            }
            let join = if matches!(expr.expr, Some(tag_expr::Expr::All(_))) {
                " AND "
            } else {
                " OR "
            };
            let parts: std::result::Result<Vec<String>, String> = list
                .items
                .iter()
                .map(|e| predicate_sql(e).map(|s| format!("({s})")))
                .collect();
            Ok(parts?.join(join))
        }
    }
}

/// Regular expressions of a predicate (checked against the engine before
/// an operation runs, so a bad one is rejected instead of failing forever).
fn regexes(expr: &TagExpr, out: &mut Vec<String>) {
    match &expr.expr {
        Some(tag_expr::Expr::Match(m))
            if matches!(
                tag_match::Op::try_from(m.op),
                Ok(tag_match::Op::Regex | tag_match::Op::NotRegex)
            ) =>
        {
            out.push(m.value.clone())
        }
        Some(tag_expr::Expr::All(l)) | Some(tag_expr::Expr::Any(l)) => {
            l.items.iter().for_each(|e| regexes(e, out))
        }
        _ => {}
    }
}

/// Checks the regular expressions of a delete's predicate against the
/// engine: Err with the reason for one it cannot compile.
/// Of `ids` (sorted), those no fact table in `tables` holds a point of.
fn series_without_points(
    conn: &mut Conn,
    chdb: &str,
    tables: &[String],
    ids: &[u64],
) -> Result<Vec<u64>> {
    let id_list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let mut left = std::collections::HashSet::new();
    for table in tables {
        let sql = format!(
            "SELECT DISTINCT series_id FROM {} WHERE series_id IN ({id_list})",
            layout::qualified(chdb, table)
        );
        for b in conn.query(&sql)? {
            left.extend(crate::columns::u64s(&b, 0));
        }
    }
    Ok(ids
        .iter()
        .copied()
        .filter(|id| !left.contains(id))
        .collect())
}

fn probe_regexes(conn: &mut Conn, op: &StorageOp) -> std::result::Result<(), String> {
    let Some(Op::DeletePoints(d)) = &op.op else {
        return Ok(());
    };
    let mut res = Vec::new();
    if let Some(p) = &d.predicate {
        regexes(p, &mut res);
    }
    for re in res {
        let probe = format!("SELECT match('', {})", layout::literal(&re));
        if let Err(e) = conn.query(&probe) {
            return Err(format!("invalid regular expression {re:?}: {e}"));
        }
    }
    Ok(())
}

/// The database an operation is about.
pub fn op_database(op: &StorageOp) -> Option<&str> {
    Some(match op.op.as_ref()? {
        storage_op::Op::CreateDatabase(o) => &o.database,
        storage_op::Op::DropDatabase(o) => &o.database,
        storage_op::Op::SetRetention(o) => &o.database,
        storage_op::Op::DropMeasurement(o) => &o.database,
        storage_op::Op::DeletePoints(o) => &o.database,
    })
}

/// Checks what can be checked without the engine: names, times, the
/// predicate's shape. Deterministic: every replica decides alike.
pub fn validate_op(op: &StorageOp) -> std::result::Result<(), String> {
    let db = op_database(op).ok_or("the storage operation is empty")?;
    shardhouse_common::names::validate_storage(db).map_err(|e| e.to_string())?;
    match op.op.as_ref() {
        Some(storage_op::Op::CreateDatabase(o)) if o.retention_ns < 0 => {
            Err("retention must be 0 (keep forever) or positive".into())
        }
        Some(storage_op::Op::SetRetention(o)) if o.retention_ns < 0 => {
            Err("retention must be 0 (keep forever) or positive".into())
        }
        Some(storage_op::Op::DropMeasurement(o)) => {
            layout::validate_measurement(&o.measurement).map_err(|e| e.to_string())
        }
        Some(storage_op::Op::DeletePoints(o)) => {
            if !o.measurement.is_empty() {
                layout::validate_measurement(&o.measurement).map_err(|e| e.to_string())?;
            }
            if !o.drop_series && o.min_time_ns > o.max_time_ns {
                return Err(format!(
                    "the time range is empty: {} > {}",
                    o.min_time_ns, o.max_time_ns
                ));
            }
            if let Some(p) = &o.predicate {
                predicate_sql(p)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

impl Engine {
    /// Applies a committed storage operation (see the module docs). `Err`
    /// only for failures that may pass (the WAL retries the entry).
    pub fn apply_op(&self, shard: u32, index: u64, op: &StorageOp) -> Result<Applied> {
        self.inner.apply_op(shard, index, op)
    }

    /// The databases this node's replicas hold.
    pub fn databases(&self) -> Vec<DatabaseReport> {
        let mut by_name: std::collections::BTreeMap<String, DatabaseReport> = Default::default();
        for st in self.inner.shards.all() {
            let mut held: std::collections::BTreeMap<String, i64> = st
                .lock_databases()
                .iter()
                .map(|(name, d)| (name.clone(), d.retention_ns))
                .collect();
            // A database created by a write not flushed yet exists too (its
            // chDB database is made at the first flush).
            for t in st.lock_buf().tables.keys() {
                held.entry(t.database.clone()).or_insert(-1);
            }
            for (name, retention_ns) in held {
                let r = by_name
                    .entry(name.clone())
                    .or_insert_with(|| DatabaseReport {
                        name: name.clone(),
                        retention_ns: self.inner.effective_retention(retention_ns),
                        shards: Vec::new(),
                    });
                r.shards.push(st.shard());
            }
        }
        let mut out: Vec<DatabaseReport> = by_name.into_values().collect();
        for r in &mut out {
            r.shards.sort_unstable();
        }
        out
    }

    /// Drops the partitions that retention has expired, now (the ticker
    /// does this every `retention_check_interval`). Returns how many.
    pub fn enforce_retention(&self) -> Result<usize> {
        self.inner.enforce_retention()
    }
}

impl Inner {
    pub(crate) fn effective_retention(&self, retention_ns: i64) -> i64 {
        if retention_ns >= 0 {
            return retention_ns;
        }
        self.cfg
            .default_retention
            .map_or(0, |d| d.as_nanos().min(i64::MAX as u128) as i64)
    }

    fn apply_op(&self, shard: u32, index: u64, op: &StorageOp) -> Result<Applied> {
        let st = self.shard_state(shard);
        if index <= st.applied() {
            return Ok(Applied::Stored);
        }
        let reject = |st: &ShardState, reason: String| {
            st.set_applied(index);
            Ok(Applied::Rejected(EngineError::InvalidBatch {
                measurement: op_database(op).unwrap_or_default().to_string(),
                reason,
            }))
        };
        if let Err(reason) = validate_op(op) {
            return reject(&st, reason);
        }
        // The barrier: everything earlier in the log is stored first.
        self.flush_shard(&st, true)?;
        let _flushes = st.lock_flushes();
        if !st.lock_buf().is_empty() {
            return Err(EngineError::Sql {
                context: format!("shard {shard} storage operation at index {index}"),
                message: "rows of earlier entries are still buffered; retrying".into(),
            });
        }
        let mut conn = self.pool.get();
        if let Err(reason) = probe_regexes(&mut conn, op) {
            drop(conn);
            return reject(&st, reason);
        }
        // A drop or delete may remove `_series` rows: what this replica
        // believed it holds is stale from here (even if the op fails).
        st.lock_known_series().clear();
        let ran = self.run_op(&mut conn, &st, index, op);
        // Again once it ran: a read meanwhile may have remembered the
        // series it selected before the op removed some (series_cache.rs).
        st.lock_known_series().clear();
        // Done or not, the op may have changed what settled buckets hold.
        match op_database(op) {
            Some(database) => self.marks.bump_database(shard, database),
            None => self.marks.bump_shard(shard),
        }
        ran?;
        self.ensure_shard(&mut conn, &st)?;
        self.sync_parts()?;
        flush::write_flushed(&mut conn, st.db(), index)?;
        st.set_flushed(index);
        st.set_applied(index);
        tracing::info!(shard, index, op = ?op.op, "storage operation applied");
        Ok(Applied::Stored)
    }

    fn run_op(&self, conn: &mut Conn, st: &ShardState, index: u64, op: &StorageOp) -> Result<()> {
        let Some(op) = &op.op else { return Ok(()) };
        match op {
            Op::CreateDatabase(o) => {
                let known = st.lock_databases().contains_key(&o.database);
                self.ensure_database(conn, st, &o.database)?;
                // Creating an existing database keeps its retention (as
                // InfluxDB's CREATE DATABASE does).
                if !known {
                    self.write_retention(conn, st, &o.database, o.retention_ns, index)?;
                }
                Ok(())
            }
            Op::SetRetention(o) => {
                self.ensure_database(conn, st, &o.database)?;
                self.write_retention(conn, st, &o.database, o.retention_ns, index)
            }
            Op::DropDatabase(o) => {
                conn.execute(&format!(
                    "DROP DATABASE IF EXISTS {} SYNC",
                    layout::ident(&layout::data_db(st.shard(), &o.database))
                ))?;
                st.lock_databases().remove(&o.database);
                st.lock_tables().retain(|t, _| t.database != o.database);
                st.lock_rollups().retain(|t| t.database != o.database);
                st.write_catalog().forget(|t| t.database != o.database);
                Ok(())
            }
            Op::DropMeasurement(o) => self.drop_measurement(conn, st, o),
            Op::DeletePoints(o) => self.delete_points(conn, st, o),
        }
    }

    fn drop_measurement(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        o: &shardhouse_common::proto::DropMeasurement,
    ) -> Result<()> {
        let Some(chdb) = self.chdb_of(st, &o.database) else {
            return Ok(());
        };
        let id = TableId::new(&o.database, &o.measurement);
        for sql in crate::rollups::drop(&chdb, &o.measurement) {
            conn.execute(&sql)?;
        }
        st.lock_rollups().remove(&id);
        conn.execute(&format!(
            "DROP TABLE IF EXISTS {} SYNC",
            layout::qualified(&chdb, &o.measurement)
        ))?;
        st.lock_tables().remove(&id);
        st.write_catalog().forget(|t| *t != id);
        let series = format!(
            "SELECT series_id FROM {} WHERE measurement = {}",
            layout::qualified(&chdb, SERIES_TABLE),
            layout::literal(&o.measurement)
        );
        conn.execute(&format!(
            "DELETE FROM {} WHERE series_id IN ({series})",
            layout::qualified(&chdb, SAMPLES_TABLE)
        ))?;
        conn.execute(&format!(
            "DELETE FROM {} WHERE measurement = {}",
            layout::qualified(&chdb, SERIES_TABLE),
            layout::literal(&o.measurement)
        ))
    }

    fn delete_points(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        o: &shardhouse_common::proto::DeletePoints,
    ) -> Result<()> {
        let Some(chdb) = self.chdb_of(st, &o.database) else {
            return Ok(());
        };
        let mut series_where = Vec::new();
        if !o.measurement.is_empty() {
            series_where.push(format!("measurement = {}", layout::literal(&o.measurement)));
        }
        if let Some(p) = &o.predicate {
            series_where.push(predicate_sql(p).map_err(|m| EngineError::Sql {
                context: "tag predicate".into(),
                message: m,
            })?);
        }
        let series_cond = if series_where.is_empty() {
            "1".to_string()
        } else {
            series_where.join(" AND ")
        };
        // Materialized once: the points' condition must not change
        // while `_series` rows are deleted below.
        let ids_sql = format!(
            "SELECT DISTINCT series_id FROM {} WHERE {series_cond} ORDER BY series_id",
            layout::qualified(&chdb, SERIES_TABLE)
        );
        let ids: Vec<u64> = conn
            .query(&ids_sql)?
            .iter()
            .flat_map(|b| crate::columns::u64s(b, 0))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let id_list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let time_cond = if o.drop_series {
            String::new()
        } else {
            format!(
                " AND time >= fromUnixTimestamp64Nano(toInt64({})) AND time <= fromUnixTimestamp64Nano(toInt64({}))",
                o.min_time_ns, o.max_time_ns
            )
        };
        let tables: Vec<String> = {
            let t = st.lock_tables();
            let mut v: Vec<String> = t
                .keys()
                .filter(|t| {
                    t.database == o.database
                        && (o.measurement.is_empty()
                            || t.table == o.measurement
                            || t.table == SAMPLES_TABLE)
                })
                .map(|t| t.table.clone())
                .collect();
            v.sort();
            v
        };
        let range = (!o.drop_series).then_some((o.min_time_ns, o.max_time_ns));
        for table in &tables {
            conn.execute(&format!(
                "DELETE FROM {} WHERE series_id IN ({id_list}){time_cond}",
                layout::qualified(&chdb, table)
            ))?;
            if st.has_rollups(&o.database, table) {
                let fields = st
                    .lock_tables()
                    .get(&TableId::new(&o.database, table))
                    .cloned()
                    .unwrap_or_default();
                for sql in crate::rollups::repair(&chdb, table, &fields, &id_list, range) {
                    conn.execute(&sql)?;
                }
            }
        }
        // DROP SERIES forgets the series; a DELETE forgets those it left
        // without a point (as InfluxDB's index does: SHOW SERIES lists
        // only series with data).
        let gone = if o.drop_series {
            id_list
        } else {
            let emptied = series_without_points(conn, &chdb, &tables, &ids)?;
            if emptied.is_empty() {
                return Ok(());
            }
            emptied
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        conn.execute(&format!(
            "DELETE FROM {} WHERE series_id IN ({gone})",
            layout::qualified(&chdb, SERIES_TABLE)
        ))
    }

    fn chdb_of(&self, st: &ShardState, database: &str) -> Option<String> {
        st.lock_databases().get(database).map(|d| d.chdb.clone())
    }

    fn write_retention(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        database: &str,
        retention_ns: i64,
        index: u64,
    ) -> Result<()> {
        use arrow_array::{Int64Array, RecordBatch, StringArray, UInt64Array};
        let chdb = self.ensure_database(conn, st, database)?;
        let schema = crate::shard_io::database_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![database])),
                Arc::new(Int64Array::from(vec![retention_ns])),
                Arc::new(UInt64Array::from(vec![index])),
            ],
        )?;
        conn.ingest(&chdb, DATABASE_TABLE, schema, vec![batch])?;
        if let Some(d) = st.lock_databases().get_mut(database) {
            d.retention_ns = retention_ns;
        }
        Ok(())
    }

    /// Drops every day partition that ended before `now - retention`, in
    /// every database with a retention, on this replica.
    pub(crate) fn enforce_retention(&self) -> Result<usize> {
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let mut dropped = 0;
        for st in self.shards.all() {
            let dbs: Vec<(String, DatabaseState)> = st
                .lock_databases()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            for (name, d) in dbs {
                let retention = self.effective_retention(d.retention_ns);
                if retention <= 0 {
                    continue;
                }
                let cutoff = expired_before(now_ns, retention);
                let _flushes = st.lock_flushes();
                let mut conn = self.pool.get();
                let parts = conn.query(&format!(
                    "SELECT DISTINCT table, partition_id FROM system.parts \
                     WHERE database = {} AND active AND partition_id < {} ORDER BY table, partition_id",
                    layout::literal(&d.chdb),
                    layout::literal(&cutoff)
                ))?;
                for b in &parts {
                    let tables = strings(b, 0);
                    let ids = strings(b, 1);
                    for (table, id) in tables.iter().zip(ids) {
                        // Rollups share the raw tables' day partitions.
                        if layout::is_engine_table(table)
                            && table != SAMPLES_TABLE
                            && !shardhouse_common::rollup::is_rollup_table(table)
                        {
                            continue;
                        }
                        conn.execute(&format!(
                            "ALTER TABLE {} DROP PARTITION ID {}",
                            layout::qualified(&d.chdb, table),
                            layout::literal(&id)
                        ))?;
                        dropped += 1;
                        self.marks.bump_table(st.shard(), &name, table);
                        // A dropped day no longer holds duplicates.
                        let tid = crate::layout::TableId::new(&name, table);
                        let ledger = st
                            .lock_rewrites()
                            .get_mut(&tid)
                            .and_then(|t| t.forget_partition(&id).then(|| t.final_partitions()));
                        if let Some(partitions) = ledger {
                            // Best effort: an entry naming a gone day only
                            // keeps FINAL, and a restart drops it.
                            if let Err(e) = crate::rewrites_ledger::write(
                                &mut conn,
                                st.db(),
                                &tid,
                                true,
                                &partitions,
                            ) {
                                tracing::warn!(shard = st.shard(), table = %tid, error = %e, "could not update the rewrites ledger");
                            }
                        }
                        crate::metrics::RETENTION_PARTITIONS_DROPPED.inc();
                        tracing::info!(shard = st.shard(), database = %name, table = %table, partition = %id,
                            "retention dropped an expired day");
                    }
                }
            }
        }
        Ok(dropped)
    }
}

/// The partition id (`YYYYMMDD`, UTC) below which every day ended before
/// `now - retention`: a day partition D is dropped once all of D is older
/// than the retention.
pub fn expired_before(now_ns: i64, retention_ns: i64) -> String {
    let cutoff_s = now_ns
        .saturating_sub(retention_ns)
        .div_euclid(1_000_000_000);
    layout::partition_id_of_day(cutoff_s.div_euclid(86_400))
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::proto::{TagExprList, TagMatch};

    fn m(key: &str, op: tag_match::Op, value: &str) -> TagExpr {
        TagExpr {
            expr: Some(tag_expr::Expr::Match(TagMatch {
                key: key.into(),
                op: op as i32,
                value: value.into(),
            })),
        }
    }

    #[test]
    fn predicates_become_map_lookups() {
        let p = TagExpr {
            expr: Some(tag_expr::Expr::Any(TagExprList {
                items: vec![
                    m("host", tag_match::Op::Eq, "a'b"),
                    m("dc", tag_match::Op::NotRegex, "^eu"),
                ],
            })),
        };
        assert_eq!(
            predicate_sql(&p).unwrap(),
            "(tags['host'] = 'a\\'b') OR (NOT match(tags['dc'], '^eu'))"
        );
        assert!(predicate_sql(&TagExpr { expr: None }).is_err());
        let mut res = Vec::new();
        regexes(&p, &mut res);
        assert_eq!(res, vec!["^eu".to_string()]);
    }

    #[test]
    fn days_expire_whole() {
        // 2024-03-10T12:00:00Z, retention 1 day: 2024-03-09 is still
        // partly inside (it ends 2024-03-10T00:00Z, after 2024-03-09T12:00Z).
        let now = 1_710_072_000i64 * 1_000_000_000;
        assert_eq!(expired_before(now, 86_400 * 1_000_000_000), "20240309");
        assert_eq!(expired_before(0, 0), "19700101");
        assert_eq!(layout::partition_id_of_day(-1), "19691231");
        assert_eq!(layout::partition_id_of_day(19_782), "20240229");
    }

    #[test]
    fn operations_are_validated_before_they_run() {
        use shardhouse_common::proto::{CreateDatabase, DeletePoints};
        let create = |db: &str, r: i64| StorageOp {
            op: Some(storage_op::Op::CreateDatabase(CreateDatabase {
                database: db.into(),
                retention_ns: r,
            })),
        };
        assert!(validate_op(&create("ok", 0)).is_ok());
        // `db/rp` is a retention policy's storage; a third part is not.
        assert!(validate_op(&create("a/b", 0)).is_ok());
        assert!(validate_op(&create("a/b/c", 0)).is_err());
        assert!(validate_op(&create("/b", 0)).is_err());
        assert!(validate_op(&create("ok", -5)).is_err());
        assert!(validate_op(&StorageOp { op: None }).is_err());
        let del = StorageOp {
            op: Some(storage_op::Op::DeletePoints(DeletePoints {
                database: "db".into(),
                measurement: "cpu".into(),
                min_time_ns: 10,
                max_time_ns: 5,
                predicate: None,
                drop_series: false,
            })),
        };
        assert!(validate_op(&del).unwrap_err().contains("empty"));
    }
}
