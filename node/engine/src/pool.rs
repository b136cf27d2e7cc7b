//! A fixed pool of chDB connections, one statement at a time per connection.
//!
//! Every call here blocks the calling thread for the statement's duration.
//! Async callers must use `tokio::task::spawn_blocking` (or dedicated threads,
//! as the flusher does); never call the pool from an async worker thread.

use std::sync::Arc;

use adbc_core::options::{IngestMode, OptionStatement, OptionValue};
use adbc_core::{Connection, Database, Optionable, Statement};
use adbc_driver_manager::{ManagedConnection, ManagedDatabase, ManagedStatement};
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::SchemaRef;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;

use crate::error::{EngineError, Result};

/// One connection to the process's engine. Not shared between threads while a
/// statement runs: chDB serializes statements per connection anyway.
pub struct Conn {
    inner: ManagedConnection,
    /// The database the last [`Conn::use_database`] switched to, so reads
    /// of the same database skip a round trip through the engine.
    current_db: Option<String>,
}

impl Conn {
    pub(crate) fn open(db: &ManagedDatabase) -> Result<Conn> {
        let inner = db
            .new_connection()
            .map_err(|e| EngineError::sql("open connection", e))?;
        Ok(Conn {
            inner,
            current_db: None,
        })
    }

    /// `USE db`, unless this connection already reads `db`.
    pub fn use_database(&mut self, db: &str) -> Result<()> {
        if self.current_db.as_deref() == Some(db) {
            return Ok(());
        }
        self.current_db = None;
        self.execute(&format!("USE {}", crate::layout::ident(db)))?;
        self.current_db = Some(db.to_string());
        Ok(())
    }

    /// A statement holding `sql`, not run yet.
    fn statement(&mut self, sql: &str) -> Result<ManagedStatement> {
        let mut st = self
            .inner
            .new_statement()
            .map_err(|e| EngineError::sql(sql_ctx(sql), e))?;
        st.set_sql_query(sql)
            .map_err(|e| EngineError::sql(sql_ctx(sql), e))?;
        Ok(st)
    }

    /// Runs a statement that returns no rows (DDL, ALTER, DROP ...).
    pub fn execute(&mut self, sql: &str) -> Result<()> {
        let mut st = self.statement(sql)?;
        st.execute_update()
            .map_err(|e| EngineError::sql(sql_ctx(sql), e))?;
        Ok(())
    }

    /// Runs a query and collects its result. The result stream is drained and
    /// dropped before returning, so the connection is free for the next statement.
    pub fn query(&mut self, sql: &str) -> Result<Vec<RecordBatch>> {
        // `RUST_LOG=shardhouse_engine::pool=trace` lists every statement.
        tracing::trace!(sql, "engine query");
        let mut st = self.statement(sql)?;
        let reader = st
            .execute()
            .map_err(|e| EngineError::sql(sql_ctx(sql), e))?;
        let mut out = Vec::new();
        for b in reader {
            out.push(b.map_err(|e| EngineError::Sql {
                context: sql_ctx(sql),
                message: e.to_string(),
            })?);
        }
        crate::exit::skip_engine_teardown_after(crate::exit::Stage::Query);
        Ok(out)
    }

    /// Appends batches to `db`.`table` through the Arrow ingest path: the
    /// engine reads the Arrow stream directly, no SQL text per row. chDB
    /// matches columns BY POSITION: the batch must carry every column of the
    /// table in table order (the engine aligns batches before calling this).
    pub fn ingest(
        &mut self,
        db: &str,
        table: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<()> {
        let ctx = || format!("ingest into {db}.{table}");
        let mut st = self
            .inner
            .new_statement()
            .map_err(|e| EngineError::sql(ctx(), e))?;
        st.set_option(
            OptionStatement::TargetDbSchema,
            OptionValue::String(db.to_string()),
        )
        .map_err(|e| EngineError::sql(ctx(), e))?;
        st.set_option(
            OptionStatement::TargetTable,
            OptionValue::String(table.to_string()),
        )
        .map_err(|e| EngineError::sql(ctx(), e))?;
        st.set_option(OptionStatement::IngestMode, IngestMode::Append.into())
            .map_err(|e| EngineError::sql(ctx(), e))?;
        let reader: Box<dyn RecordBatchReader + Send> = Box::new(RecordBatchIterator::new(
            batches.into_iter().map(Ok),
            schema,
        ));
        st.bind_stream(reader)
            .map_err(|e| EngineError::sql(ctx(), e))?;
        st.execute_update()
            .map_err(|e| EngineError::sql(ctx(), e))?;
        crate::exit::skip_engine_teardown_after(crate::exit::Stage::Insert);
        Ok(())
    }
}

fn sql_ctx(sql: &str) -> String {
    const MAX: usize = 200;
    if sql.len() <= MAX {
        sql.to_string()
    } else {
        let mut end = MAX;
        while !sql.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &sql[..end])
    }
}

/// A fixed set of connections handed out one caller at a time.
pub struct Pool {
    conns: Vec<Mutex<Conn>>,
    free_tx: Sender<usize>,
    free_rx: Receiver<usize>,
}

/// A checked-out connection; goes back to the pool on drop.
pub struct PooledConn<'a> {
    pool: &'a Pool,
    idx: usize,
    guard: Option<parking_lot::MutexGuard<'a, Conn>>,
}

impl std::ops::Deref for PooledConn<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.guard.as_ref().expect("guard present until drop")
    }
}

impl std::ops::DerefMut for PooledConn<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.guard.as_mut().expect("guard present until drop")
    }
}

impl Drop for PooledConn<'_> {
    fn drop(&mut self) {
        self.guard.take();
        // The receiver lives in the pool itself, so this cannot fail.
        let _ = self.pool.free_tx.send(self.idx);
    }
}

impl Pool {
    /// `size` connections, each of which runs the `init` statements first
    /// (session settings).
    pub fn new(db: &ManagedDatabase, size: usize, init: &[&str]) -> Result<Arc<Pool>> {
        let size = size.max(1);
        let (free_tx, free_rx) = crossbeam_channel::bounded(size);
        let mut conns = Vec::with_capacity(size);
        for i in 0..size {
            let mut conn = Conn::open(db)?;
            for sql in init {
                conn.execute(sql)?;
            }
            conns.push(Mutex::new(conn));
            free_tx.send(i).expect("channel sized to the pool");
        }
        Ok(Arc::new(Pool {
            conns,
            free_tx,
            free_rx,
        }))
    }

    /// Number of connections.
    pub fn size(&self) -> usize {
        self.conns.len()
    }

    /// Waits for a free connection.
    pub fn get(&self) -> PooledConn<'_> {
        let idx = self.free_rx.recv().expect("pool owns a sender");
        let guard = self.conns[idx]
            .try_lock()
            .expect("free connection is unlocked");
        PooledConn {
            pool: self,
            idx,
            guard: Some(guard),
        }
    }
}
