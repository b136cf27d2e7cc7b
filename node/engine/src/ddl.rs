//! Creating a shard's storage in chDB on first use: the shard's own
//! database, a database's storage in it, a fact table and its columns.
//! Idempotent; the shard's in-memory view says what already exists.

use crate::engine::Inner;
use crate::error::Result;
use crate::layout::{self, FieldType, TableId};
use crate::pool::Conn;
use crate::rollups;
use crate::shard_state::{DatabaseState, ShardState};

impl Inner {
    pub(crate) fn ensure_shard(&self, conn: &mut Conn, st: &ShardState) -> Result<()> {
        if st.is_created() {
            return Ok(());
        }
        for sql in layout::create_shard(st.db()) {
            conn.execute(&sql)?;
        }
        st.set_created(true);
        Ok(())
    }

    /// Creates a database's storage in a shard if it does not exist yet
    /// (first write, or an explicit create) and returns its chDB database.
    pub(crate) fn ensure_database(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        database: &str,
    ) -> Result<String> {
        if let Some(d) = st.lock_databases().get(database) {
            return Ok(d.chdb.clone());
        }
        self.ensure_shard(conn, st)?;
        let chdb = layout::data_db(st.shard(), database);
        for sql in layout::create_database(&chdb, database, self.cfg.fact_order) {
            conn.execute(&sql)?;
        }
        st.lock_tables().insert(
            TableId::new(database, layout::SAMPLES_TABLE),
            vec![("value".to_string(), FieldType::Float64)],
        );
        st.lock_databases().insert(
            database.to_string(),
            DatabaseState {
                chdb: chdb.clone(),
                retention_ns: -1,
            },
        );
        Ok(chdb)
    }

    /// Creates the fact table or adds missing columns; returns its columns.
    pub(crate) fn ensure_table(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        fields: &[(String, FieldType)],
    ) -> Result<Vec<(String, FieldType)>> {
        self.ensure_table_ordered(conn, st, id, fields, self.cfg.fact_order)
    }

    /// [`Self::ensure_table`] with the order a table it creates gets
    /// (a restore's parts were sorted for their table's order).
    pub(crate) fn ensure_table_ordered(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        id: &TableId,
        fields: &[(String, FieldType)],
        order: layout::FactOrder,
    ) -> Result<Vec<(String, FieldType)>> {
        let chdb = self.ensure_database(conn, st, &id.database)?;
        let mut tables = st.lock_tables();
        match tables.get_mut(id) {
            None => {
                conn.execute(&layout::create_fact_table(&chdb, &id.table, fields, order))?;
                // Rollups only from a table's first row on: one created
                // later would miss the rows before it.
                // A rollup that cannot be made leaves the table without
                // (reads use the raw rows), not the write refused.
                if self.cfg.rollups && rollups::applies_to(&id.table) {
                    let made = self.create_rollups(conn, &chdb, &id.table, fields, order);
                    match made {
                        Ok(()) => {
                            st.lock_rollups().insert(id.clone());
                        }
                        Err(e) => {
                            tracing::warn!(shard = st.shard(), table = %id, error = %e,
                                "rollups not created; reads of this table use its raw points");
                        }
                    }
                }
                tables.insert(id.clone(), fields.to_vec());
            }
            Some(cols) => {
                let missing: Vec<(String, FieldType)> = fields
                    .iter()
                    .filter(|(n, _)| !cols.iter().any(|(c, _)| c == n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    let mut all = cols.clone();
                    all.extend(missing.iter().cloned());
                    let rolled = st.has_rollups(&id.database, &id.table);
                    let (rollup_tables, views) = if rolled {
                        rollups::add_fields(&chdb, &id.table, &all, &missing)
                    } else {
                        Default::default()
                    };
                    let widened = rollup_tables.iter().try_for_each(|sql| conn.execute(sql));
                    conn.execute(&layout::add_columns(&chdb, &id.table, &missing))?;
                    let widened =
                        widened.and_then(|()| views.iter().try_for_each(|sql| conn.execute(sql)));
                    if let Err(e) = widened {
                        self.forget_rollups(conn, st, &chdb, id, &e);
                    }
                    cols.extend(missing);
                }
            }
        }
        Ok(tables[id].clone())
    }

    /// Rollups for a table just created: any left from an earlier table
    /// of that name go first, and only an empty table gets them (one
    /// created meanwhile by another path may hold rows they would miss).
    /// They are sorted as the table is (`order`).
    fn create_rollups(
        &self,
        conn: &mut Conn,
        chdb: &str,
        table: &str,
        fields: &[(String, FieldType)],
        order: layout::FactOrder,
    ) -> Result<()> {
        for sql in rollups::drop(chdb, table) {
            conn.execute(&sql)?;
        }
        let rows = conn.query(&format!(
            "SELECT count() FROM {}",
            layout::qualified(chdb, table)
        ))?;
        let empty = rows
            .first()
            .is_none_or(|b| crate::columns::u64s(b, 0).first().is_none_or(|n| *n == 0));
        if !empty {
            return Err(crate::error::EngineError::Sql {
                context: "rollups".into(),
                message: format!("{table} already holds rows"),
            });
        }
        rollups::create(chdb, table, fields, order)
            .iter()
            .try_for_each(|sql| conn.execute(sql))
    }

    /// A table whose rollups could not follow a new field reads raw from
    /// now on: its views are dropped, so a restart does not find them
    /// whole either (lifecycle.rs), and it leaves the rollup set.
    fn forget_rollups(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        chdb: &str,
        id: &TableId,
        e: &crate::error::EngineError,
    ) {
        tracing::warn!(shard = st.shard(), table = %id, error = %e,
            "rollups could not take a new field; reads of this table use its raw points");
        st.lock_rollups().remove(id);
        for sql in rollups::drop(chdb, &id.table) {
            if let Err(e) = conn.execute(&sql) {
                tracing::warn!(shard = st.shard(), table = %id, error = %e, "rollup not dropped");
            }
        }
    }

    /// After a restart, before a table's first insert: its rollups still
    /// count what its raw rows count from `from` on (the reload window's
    /// start; rows older than it that a replay brings again make their
    /// day dirty instead, rewrites.rs). A crash between an insert's raw
    /// part and its rollup part leaves them apart; then the rollups go.
    pub(crate) fn check_rollups(
        &self,
        conn: &mut Conn,
        st: &ShardState,
        chdb: &str,
        id: &TableId,
        from: Option<i64>,
    ) {
        if !st.has_rollups(&id.database, &id.table) {
            return;
        }
        let fields = st.lock_tables().get(id).cloned().unwrap_or_default();
        let from = from.and_then(|f| {
            shardhouse_common::rollup::floor(f, shardhouse_common::rollup::LEVELS[0].step_ns)
        });
        let mut counts = Vec::new();
        for sql in rollups::count_sql(chdb, &id.table, &fields, from) {
            match conn.query(&sql) {
                Ok(b) => counts.push(
                    b.first()
                        .map(|b| {
                            (0..b.num_columns())
                                .map(|i| crate::columns::u64s(b, i).first().copied().unwrap_or(0))
                                .collect::<Vec<u64>>()
                        })
                        .unwrap_or_default(),
                ),
                Err(e) => return self.forget_rollups(conn, st, chdb, id, &e),
            }
        }
        if counts.windows(2).any(|w| w[0] != w[1]) {
            let e = crate::error::EngineError::Sql {
                context: "rollup check".into(),
                message: format!("raw and rollup counts differ from {from:?} on: {counts:?}"),
            };
            self.forget_rollups(conn, st, chdb, id, &e);
        }
    }
}
