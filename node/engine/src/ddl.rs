//! Creating a shard's storage in chDB on first use: the shard's own
//! database, a database's storage in it, a fact table and its columns.
//! Idempotent; the shard's in-memory view says what already exists.

use crate::engine::Inner;
use crate::error::Result;
use crate::layout::{self, FieldType, TableId};
use crate::pool::Conn;
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
        for sql in layout::create_database(&chdb, database) {
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
        let chdb = self.ensure_database(conn, st, &id.database)?;
        let mut tables = st.lock_tables();
        match tables.get_mut(id) {
            None => {
                conn.execute(&layout::create_fact_table(&chdb, &id.table, fields))?;
                tables.insert(id.clone(), fields.to_vec());
            }
            Some(cols) => {
                let missing: Vec<(String, FieldType)> = fields
                    .iter()
                    .filter(|(n, _)| !cols.iter().any(|(c, _)| c == n))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    conn.execute(&layout::add_columns(&chdb, &id.table, &missing))?;
                    cols.extend(missing);
                }
            }
        }
        Ok(tables[id].clone())
    }
}
