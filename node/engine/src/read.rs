//! Users' queries against one shard: read-only, one statement, no way out
//! of the shard's data (read_guard.rs), times in UTC.

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use crate::change_marks::ChangeMark;
use crate::columns::strings;
use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::shard_state::ShardState;
use crate::{layout, metrics, read_guard};

impl Engine {
    /// Runs a user's `SELECT` against one shard's database: unqualified
    /// table names resolve to that shard's tables. Fact tables keep rewritten
    /// points until merges collapse them; use `FINAL` to read one row per
    /// point. Rows applied but not flushed yet of a table the statement
    /// names are flushed first, so a query sees every write applied here; a table whose flush keeps failing does
    /// not stop queries of anything else, but a query that reads it fails
    /// rather than answer without its buffered rows.
    ///
    /// `database` scopes the statement: its tables (`cpu`, `_series`,
    /// `_samples`) are unqualified names. An empty `database` reads the
    /// shard's own tables (`_flushed`).
    pub fn query(&self, shard: u32, database: &str, sql: &str) -> Result<Vec<RecordBatch>> {
        let mut conn = self.inner.readers.get();
        // The engine's own parser: one statement, and the text that runs
        // is the formatted one (nothing after a `;` can hide).
        let formatted = conn
            .query(&format!(
                "SELECT formatQuerySingleLine({})",
                layout::literal(sql)
            ))
            .map_err(|e| EngineError::InvalidQuery(engine_message(e)))?;
        let formatted = formatted
            .first()
            .and_then(|b| strings(b, 0).into_iter().next())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| EngineError::InvalidQuery("the statement is empty".into()))?;
        let ast = conn
            .query(&format!("EXPLAIN AST {formatted}"))
            .map_err(|e| EngineError::InvalidQuery(engine_message(e)))?;
        let lines: Vec<String> = ast.iter().flat_map(|b| strings(b, 0)).collect();
        read_guard::check_ast(&lines).map_err(|r| EngineError::QueryRefused(r.0))?;
        Ok(self.read(&mut conn, shard, database, &formatted)?.0)
    }

    /// Runs a statement the router planned itself (InfluxQL `/query`): as
    /// [`Engine::query`], but checked on ClickHouse's tokens
    /// (`shardhouse_common::sql_check`: one `SELECT`, no `SETTINGS`, no
    /// function that reads outside the database) instead of the engine's
    /// own parse, which costs two engine round trips per statement; the
    /// connection is `readonly` either way.
    pub fn query_planned(&self, shard: u32, database: &str, sql: &str) -> Result<Vec<RecordBatch>> {
        Ok(self.query_planned_marked(shard, database, sql)?.0)
    }

    /// [`Engine::query_planned`], with the change mark of the tables the
    /// statement reads (change_marks.rs), taken after the pre-read flush.
    pub fn query_planned_marked(
        &self,
        shard: u32,
        database: &str,
        sql: &str,
    ) -> Result<(Vec<RecordBatch>, ChangeMark)> {
        let checked =
            shardhouse_common::sql_check::check_select(sql).map_err(EngineError::QueryRefused)?;
        let mut conn = self.inner.readers.get();
        self.read(&mut conn, shard, database, &checked)
    }

    /// Whether reads of a fact table keep `FINAL`: true unless this process
    /// flushed every row the table holds and no key twice (rewrites.rs).
    pub fn reads_need_final(&self, shard: u32, database: &str, table: &str) -> bool {
        self.inner
            .shards
            .get(shard)
            .is_none_or(|st| !st.tables_without_rewrites(database).contains(table))
    }

    /// The fields of `database` (of one `table`, or of every user table) on
    /// this shard, from the shard's catalog: the rows `system.columns` would
    /// give (table, name, stored type), without an engine statement and
    /// without flushing, because the catalog is decided when an entry is
    /// applied. A shard without the database answers no rows.
    pub fn catalog_fields(
        &self,
        shard: u32,
        database: &str,
        table: Option<&str>,
    ) -> Result<Vec<RecordBatch>> {
        // Applied rows count even before their first flush creates the
        // tables, as they do for reads.
        let fields = match self.inner.shards.get(shard) {
            Some(st) => st.read_catalog().fields_of(database, table),
            None => Vec::new(),
        };
        let column = |f: &dyn Fn(&(String, String, crate::layout::FieldType)) -> &str| {
            Arc::new(StringArray::from_iter_values(fields.iter().map(f))) as ArrayRef
        };
        let schema = Arc::new(Schema::new(vec![
            Field::new("table", DataType::Utf8, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("type", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                column(&|r| r.0.as_str()),
                column(&|r| r.1.as_str()),
                column(&|r| r.2.clickhouse()),
            ],
        )
        .map_err(|e| EngineError::InvalidQuery(format!("catalog answer: {e}")))?;
        Ok(vec![batch])
    }

    /// Flushes what `sql` reads, refuses failing tables, then runs `sql`
    /// (already checked) in the shard's database; with the change mark of
    /// what it reads, taken between the flush and the read.
    fn read(
        &self,
        conn: &mut crate::pool::Conn,
        shard: u32,
        database: &str,
        formatted: &str,
    ) -> Result<(Vec<RecordBatch>, ChangeMark)> {
        let st = self.inner.shards.get(shard);
        if let Some(st) = &st {
            self.inner.refuse_damaged(st)?;
            self.flush_what_is_read(st, shard, database, formatted);
            refuse_failing_tables(st, shard, database, formatted)?;
        }
        let mark = self
            .inner
            .marks
            .mark(shard, database, |t| mentions(formatted, t));
        let exists = st.as_ref().is_some_and(|st| {
            st.is_created() && (database.is_empty() || st.lock_databases().contains_key(database))
        });
        // Nothing to read yet: the router treats this as "no rows here".
        if !exists {
            return Err(EngineError::NoDatabase {
                shard,
                database: if database.is_empty() {
                    layout::shard_db(shard)
                } else {
                    database.to_string()
                },
            });
        }
        let db = if database.is_empty() {
            layout::shard_db(shard)
        } else {
            layout::data_db(shard, database)
        };
        let rows = self.run_read(conn, st.as_ref(), shard, database, &db, formatted)?;
        Ok((rows, mark))
    }

    /// Flushes the shard's buffered rows if `formatted` reads them. A
    /// flush another thread has taken the buffer for must finish before we
    /// read (the flush lock); then rows still buffered are flushed only if
    /// the statement reads their table, so reads of the schema or of idle
    /// tables (a dashboard refreshing) make no parts of their own.
    fn flush_what_is_read(
        &self,
        st: &Arc<ShardState>,
        shard: u32,
        database: &str,
        formatted: &str,
    ) {
        let reads_buffered = {
            let _in_flight = st.lock_flushes();
            let buf = st.lock_buf();
            let mut buffered = buf.tables.keys().filter(|t| t.database == database);
            // The engine's own tables (`system.columns`) and a database
            // not created yet see buffered tables only once flushed.
            let first = buffered.next();
            first.is_some()
                && (mentions(formatted, "system")
                    || !st.lock_databases().contains_key(database)
                    || first
                        .into_iter()
                        .chain(buffered)
                        .any(|t| mentions(formatted, &t.table)))
        };
        if reads_buffered {
            if let Err(e) = self.inner.flush_shard(st, false) {
                tracing::warn!(shard, error = %e, "flush before a query failed");
            }
        }
    }

    /// Runs `formatted` in `db`, without `FINAL` on the tables that hold no
    /// rewritten point.
    fn run_read(
        &self,
        conn: &mut crate::pool::Conn,
        st: Option<&Arc<ShardState>>,
        shard: u32,
        database: &str,
        db: &str,
        formatted: &str,
    ) -> Result<Vec<RecordBatch>> {
        // After the flush in `read`: it may have stored a rewrite.
        let clean = st
            .filter(|_| !self.inner.cfg.reads_always_final)
            .map(|st| st.tables_without_rewrites(database))
            .unwrap_or_default();
        let sql = if clean.is_empty() {
            formatted.to_string()
        } else {
            crate::rewrites::strip_final(formatted, &|t| clean.contains(t))
        };
        conn.use_database(db)?;
        let rows = conn
            .query(&sql)
            .map_err(|e| self.inner.read_error(shard, db, e))?;
        if sql.len() == formatted.len() {
            return Ok(rows);
        }
        // A flush that ran meanwhile may have stored a rewrite: it marks
        // the table before its insert, so a read that could have seen the
        // second copy sees the mark here, and runs again with FINAL.
        let still = st
            .map(|st| st.tables_without_rewrites(database))
            .unwrap_or_default();
        if clean.iter().all(|t| still.contains(t)) {
            metrics::READS_WITHOUT_FINAL_TOTAL.inc();
            return Ok(rows);
        }
        conn.query(formatted)
            .map_err(|e| self.inner.read_error(shard, db, e))
    }
}

/// Refuses a statement that reads a table whose flush keeps failing: it
/// would answer without that table's buffered rows.
fn refuse_failing_tables(
    st: &ShardState,
    shard: u32,
    database: &str,
    formatted: &str,
) -> Result<()> {
    let failing = st.failing_tables();
    if let Some(t) = failing
        .iter()
        .find(|t| t.database == database && mentions(formatted, &t.table))
    {
        let error = st.flush_failure().map(|f| f.error).unwrap_or_default();
        return Err(EngineError::TableUnavailable {
            shard,
            table: t.to_string(),
            reason: error,
        });
    }
    Ok(())
}

/// The engine's message without our statement context (which repeats the
/// user's SQL).
fn engine_message(e: EngineError) -> String {
    match e {
        EngineError::Sql { message, .. } => message,
        other => other.to_string(),
    }
}

/// Whether `sql` (formatted) names table `t`, quoted or not. Conservative:
/// a false positive makes a query fail clearly, never answer incompletely.
fn mentions(sql: &str, t: &str) -> bool {
    sql.contains(&layout::ident(t)) || {
        let bytes = sql.as_bytes();
        sql.match_indices(t).any(|(i, _)| {
            let before = i.checked_sub(1).map(|j| bytes[j]);
            let after = bytes.get(i + t.len()).copied();
            let word = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
            !word(before) && !word(after)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::mentions;

    #[test]
    fn table_mentions_are_whole_words_or_quoted() {
        assert!(mentions("SELECT * FROM cpu FINAL", "cpu"));
        assert!(mentions("SELECT * FROM `a;b`", "a;b"));
        assert!(mentions("SELECT count() FROM shard.cpu", "cpu"));
        assert!(!mentions("SELECT * FROM cpu2", "cpu"));
        assert!(!mentions("SELECT 1", "cpu"));
    }
}
