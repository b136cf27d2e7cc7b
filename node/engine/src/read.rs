//! Users' queries against one shard: read-only, one statement, no way out
//! of the shard's data (read_guard.rs), times in UTC.

use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};

use crate::change_marks::ChangeMark;
use crate::columns::strings;
use crate::engine::Engine;
use crate::error::{EngineError, Result};
use crate::shard_state::ShardState;
use crate::{empty_selection, layout, metrics, read_guard, series_cache, tag_answers};

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
        Ok(self
            .read(&mut conn, shard, database, &formatted, None, false)?
            .0)
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
        self.query_planned_rollup(shard, database, sql, None)
    }

    /// [`Engine::query_planned_marked`] with an equal statement over the
    /// rollups of one fact table, `rollup` = (table, statement): run
    /// instead where that table's rollups are exact (rollups.rs).
    pub fn query_planned_rollup(
        &self,
        shard: u32,
        database: &str,
        sql: &str,
        rollup: Option<(&str, &str)>,
    ) -> Result<(Vec<RecordBatch>, ChangeMark)> {
        let checked =
            shardhouse_common::sql_check::check_select(sql).map_err(EngineError::QueryRefused)?;
        let rollup = match rollup {
            Some((table, sql)) => Some((
                table,
                shardhouse_common::sql_check::check_select(sql)
                    .map_err(EngineError::QueryRefused)?,
            )),
            None => None,
        };
        let mut conn = self.inner.readers.get();
        let rollup = rollup.as_ref().map(|(t, s)| (*t, s.as_str()));
        self.read(&mut conn, shard, database, &checked, rollup, true)
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
    /// what it reads, taken between the flush and the read. A `planned`
    /// statement's series selections may be answered from the series
    /// cache (series_cache.rs).
    fn read(
        &self,
        conn: &mut crate::pool::Conn,
        shard: u32,
        database: &str,
        formatted: &str,
        rollup: Option<(&str, &str)>,
        planned: bool,
    ) -> Result<(Vec<RecordBatch>, ChangeMark)> {
        let st = self.inner.shards.get(shard);
        // Before the flush: a series buffered after this moves it.
        let series_version = st
            .as_ref()
            .filter(|_| planned)
            .map(|st| st.lock_known_series().version());
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
        let read = Read {
            shard,
            database,
            db: &db,
            series_version,
            rollup,
        };
        let rows = self.run_read(conn, st.as_ref(), &read, formatted)?;
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
    /// rewritten point, or its rollup equal where the rollups are exact.
    fn run_read(
        &self,
        conn: &mut crate::pool::Conn,
        st: Option<&Arc<ShardState>>,
        r: &Read<'_>,
        formatted: &str,
    ) -> Result<Vec<RecordBatch>> {
        let (shard, database, db) = (r.shard, r.database, r.db);
        if let (Some(st), Some(version)) = (st, r.series_version) {
            if tag_answers::reads_only_the_tag_index(formatted) {
                return self.tag_index_read(conn, st, r, formatted, version);
            }
        }
        // After the flush in `read`: it may have stored a rewrite.
        let clean = st
            .filter(|_| !self.inner.cfg.reads_always_final)
            .map(|st| st.tables_without_rewrites(database))
            .unwrap_or_default();
        // Rollups are exact where the raw table holds each point once.
        let rollup = r.rollup.filter(|(t, _)| {
            clean.contains(*t) && st.is_some_and(|st| st.has_rollups(database, t))
        });
        let strip = |sql: &str| {
            if clean.is_empty() {
                sql.to_string()
            } else {
                crate::rewrites::strip_final(sql, &|t| clean.contains(t))
            }
        };
        let sql = strip(formatted);
        let stripped = sql.len() != formatted.len() || rollup.is_some();
        conn.use_database(db)?;
        let sql = match (st, r.series_version) {
            (Some(st), Some(version)) => {
                // The raw statement's selections first: a statement of
                // no series ends here whichever form would run.
                let literals = match self.with_series_literals(conn, st, r, sql, version)? {
                    Literals::Sql(sql) => match rollup {
                        Some((_, rolled)) => {
                            self.with_series_literals(conn, st, r, strip(rolled), version)?
                        }
                        None => Literals::Sql(sql),
                    },
                    Literals::NoRows => Literals::NoRows,
                };
                match literals {
                    Literals::Sql(sql) => sql,
                    Literals::NoRows => {
                        metrics::READS_OF_NO_SERIES_TOTAL.inc();
                        return Ok(Vec::new());
                    }
                }
            }
            _ => rollup.map_or(sql, |(_, rolled)| strip(rolled)),
        };
        let rows = conn
            .query(&sql)
            .map_err(|e| self.inner.read_error(shard, db, e))?;
        if !stripped {
            return Ok(rows);
        }
        // A flush that ran meanwhile may have stored a rewrite: it marks
        // the table before its insert, so a read that could have seen the
        // second copy sees the mark here, and runs again with FINAL.
        let still = st
            .map(|st| st.tables_without_rewrites(database))
            .unwrap_or_default();
        if clean.iter().all(|t| still.contains(t)) {
            if rollup.is_some() {
                metrics::READS_FROM_ROLLUPS_TOTAL.inc();
            } else {
                metrics::READS_WITHOUT_FINAL_TOTAL.inc();
            }
            return Ok(rows);
        }
        conn.query(formatted)
            .map_err(|e| self.inner.read_error(shard, db, e))
    }

    /// A planned statement of the tag index alone: its answer from the
    /// tag answers while the index is still at `version`, else read now
    /// (and kept on the series cache's terms, see there).
    fn tag_index_read(
        &self,
        conn: &mut crate::pool::Conn,
        st: &ShardState,
        r: &Read<'_>,
        sql: &str,
        version: u64,
    ) -> Result<Vec<RecordBatch>> {
        let cache = &self.inner.tag_answers;
        if let Some(hit) = cache.get(r.shard, r.database, sql, version) {
            metrics::TAG_INDEX_ANSWERS_TOTAL
                .with_label_values(&["hit"])
                .inc();
            return Ok(hit.as_ref().clone());
        }
        let settled_before = series_settled(st, r.database);
        conn.use_database(r.db)?;
        let rows = conn
            .query(sql)
            .map_err(|e| self.inner.read_error(r.shard, r.db, e))?;
        if settled_before && still_at(st, r.database, version) {
            let bytes = tag_answers::answer_bytes(&rows);
            cache.put(
                r.shard,
                r.database,
                sql,
                version,
                Arc::new(rows.clone()),
                bytes,
            );
        }
        metrics::TAG_INDEX_ANSWERS_TOTAL
            .with_label_values(&["miss"])
            .inc();
        Ok(rows)
    }

    /// `sql` with each series selection replaced by its ids: from the
    /// cache when the tag index is still at `version`, else selected now
    /// (and cached when nothing changed meanwhile and no `_series` row
    /// waits in the buffer, so the stored rows are all of them). A
    /// selection of no series that leaves the statement nothing to read
    /// ends it there (empty_selection.rs).
    fn with_series_literals(
        &self,
        conn: &mut crate::pool::Conn,
        st: &ShardState,
        r: &Read<'_>,
        sql: String,
        version: u64,
    ) -> Result<Literals> {
        let found = series_cache::selections(&sql);
        if found.is_empty() {
            return Ok(Literals::Sql(sql));
        }
        let no_rows = |sel: &series_cache::Selection, lit: &str| {
            lit == "()" && empty_selection::answers_no_rows(&sql, sel.start)
        };
        let cache = &self.inner.series_ids;
        let mut replaced = Vec::with_capacity(found.len());
        for sel in found {
            if let Some(lit) = cache.get(r.shard, r.database, &sel.condition, version) {
                metrics::SERIES_SELECTIONS_TOTAL
                    .with_label_values(&["hit"])
                    .inc();
                if no_rows(&sel, &lit) {
                    return Ok(Literals::NoRows);
                }
                replaced.push((sel, lit));
                continue;
            }
            let settled_before = series_settled(st, r.database);
            let rows = conn
                .query(&series_cache::ids_sql(&sel.condition))
                .map_err(|e| self.inner.read_error(r.shard, r.db, e))?;
            let ids: Vec<u64> = rows
                .iter()
                .filter_map(|b| b.column(0).as_any().downcast_ref::<UInt64Array>())
                .flat_map(|a| a.iter().flatten())
                .collect();
            let Some(lit) = series_cache::literal(&ids) else {
                // Too many ids for a literal list: the subquery stays.
                metrics::SERIES_SELECTIONS_TOTAL
                    .with_label_values(&["skip"])
                    .inc();
                continue;
            };
            let lit: Arc<str> = lit.into();
            if settled_before && still_at(st, r.database, version) {
                let bytes = lit.len();
                cache.put(
                    r.shard,
                    r.database,
                    &sel.condition,
                    version,
                    Arc::clone(&lit),
                    bytes,
                );
            }
            metrics::SERIES_SELECTIONS_TOTAL
                .with_label_values(&["miss"])
                .inc();
            if no_rows(&sel, &lit) {
                return Ok(Literals::NoRows);
            }
            replaced.push((sel, lit));
        }
        Ok(Literals::Sql(series_cache::substitute(&sql, &replaced)))
    }
}

/// A planned statement with its series selections as literals, or the
/// finding that it reads no rows.
enum Literals {
    Sql(String),
    NoRows,
}

/// Where a read runs: the shard, the user's database, the engine database
/// that holds it, and (planned reads) the tag index version taken before
/// the read's flush.
struct Read<'a> {
    shard: u32,
    database: &'a str,
    db: &'a str,
    series_version: Option<u64>,
    /// The statement's equal over one fact table's rollups: (table, SQL).
    rollup: Option<(&'a str, &'a str)>,
}

/// Whether no `_series` row of `database` waits in the shard's buffer or
/// in a flush under way (the flush lock, as [`Engine::query`]'s flush).
fn series_settled(st: &ShardState, database: &str) -> bool {
    let _in_flight = st.lock_flushes();
    let buf = st.lock_buf();
    !buf.tables
        .keys()
        .any(|t| t.database == database && t.table == layout::SERIES_TABLE)
}

/// Whether what was read after a settled check may be kept as of
/// `version`: still no `_series` row of `database` buffered, and the tag
/// index still at `version` (buffer, then version: a row buffered in
/// between moves the version).
fn still_at(st: &ShardState, database: &str, version: u64) -> bool {
    series_settled(st, database) && st.lock_known_series().version() == version
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
