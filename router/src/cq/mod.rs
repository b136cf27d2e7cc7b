//! Continuous queries as InfluxDB 1.x runs them: a `SELECT ... INTO ...
//! GROUP BY time(i)` run every `RESAMPLE EVERY` (default `i`) over the last
//! `RESAMPLE FOR` (default `i`), its rows written through the normal
//! write path into the target measurement and retention policy.
//!
//! What Shardhouse adds is that every interval is computed even across
//! restarts and failovers: exactly one router runs the queries at a time
//! (a lease in etcd, [`runner`]), and the end of the last window each query
//! completed is recorded in etcd after its rows were acknowledged. A run
//! that finds an older record recomputes from there, so an interval missed
//! while no router ran (or computed by a router killed before recording
//! it) is computed by the next; one computed twice writes the same points
//! (same series, same time) again, which the storage reads once.
//!
//! This module decides (pure functions, tested); [`store`] keeps the
//! definitions and progress in etcd, [`runner`] runs them.

pub mod runner;
pub mod store;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use shardhouse_influxql::{Dimension, SelectStatement, Source, Statement};
use thiserror::Error;

/// How many intervals a run recomputes at most when it catches up after
/// an outage (older ones are left as they are, and logged).
pub const MAX_CATCH_UP_WINDOWS: i64 = 1_000;

/// One continuous query as stored: its canonical statement (what `SHOW
/// CONTINUOUS QUERIES` prints) and the schedule read from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinuousQuery {
    pub name: String,
    pub database: String,
    /// `CREATE CONTINUOUS QUERY ... END`, sources and target qualified.
    pub query: String,
    /// The `GROUP BY time()` interval and offset.
    pub interval_ns: i64,
    pub offset_ns: i64,
    pub every_ns: i64,
    pub for_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CqError {
    #[error("continuous query already exists")]
    Exists,
    #[error("continuous query must have an INTO clause")]
    NoInto,
    #[error("GROUP BY requires at least one aggregate function")]
    NoGroupByTime,
    #[error("database not found: {0}")]
    DatabaseNotFound(String),
    #[error("continuous queries are unavailable (etcd: {0}); retry later")]
    Unavailable(String),
    #[error("{0}")]
    Invalid(String),
}

/// The `GROUP BY time(interval[, offset])` of a statement.
pub fn group_by_time(select: &SelectStatement) -> Option<(i64, i64)> {
    select.group_by.iter().find_map(|d| match d {
        Dimension::Time { interval, offset } => Some((
            *interval,
            match offset {
                Some(shardhouse_influxql::TimeOffset::Duration(d)) => *d,
                _ => 0,
            },
        )),
        _ => None,
    })
}

/// `CREATE CONTINUOUS QUERY`, made canonical as InfluxDB stores it: every
/// source and the target name their database and retention policy
/// (`default_rp`: the database's default at creation).
pub fn define(
    stmt: &shardhouse_influxql::CreateContinuousQuery,
    default_rp: &str,
) -> Result<ContinuousQuery, CqError> {
    let mut select = (*stmt.select).clone();
    let (interval_ns, offset_ns) = group_by_time(&select).ok_or(CqError::NoGroupByTime)?;
    let Some(into) = select.into.as_mut() else {
        return Err(CqError::NoInto);
    };
    if interval_ns <= 0 {
        return Err(CqError::Invalid("GROUP BY time() must be positive".into()));
    }
    if into.database.is_none() {
        into.database = Some(stmt.database.clone());
    }
    for source in &mut select.from {
        if let Source::Measurement(m) = source {
            if m.database.is_none() {
                m.database = Some(stmt.database.clone());
            }
            if m.retention_policy.is_none() {
                m.retention_policy = Some(default_rp.to_owned());
            }
        }
    }
    let every_ns = stmt.resample_every.unwrap_or(interval_ns);
    let for_ns = stmt.resample_for.unwrap_or(interval_ns);
    if every_ns <= 0 || for_ns <= 0 {
        return Err(CqError::Invalid(
            "RESAMPLE durations must be positive".into(),
        ));
    }
    if for_ns < interval_ns {
        return Err(CqError::Invalid(format!(
            "FOR duration must be >= GROUP BY time duration: must be a minimum of {} got {}",
            shardhouse_influxql::format_duration(interval_ns),
            shardhouse_influxql::format_duration(for_ns)
        )));
    }
    let canonical = shardhouse_influxql::CreateContinuousQuery {
        select: Box::new(select),
        ..stmt.clone()
    };
    Ok(ContinuousQuery {
        name: stmt.name.clone(),
        database: stmt.database.clone(),
        query: Statement::CreateContinuousQuery(canonical).to_string(),
        interval_ns,
        offset_ns,
        every_ns,
        for_ns,
    })
}

/// A window of time one run computes: `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

fn floor_to(t: i64, step: i64, offset: i64) -> i64 {
    (t - offset).div_euclid(step) * step + offset
}

/// The run due at `now`, given the end of the last completed window
/// (`done`, None before the first run): None when the current `EVERY`
/// boundary was already run. The window ends at the last `GROUP BY`
/// boundary at or before the `EVERY` boundary and reaches `FOR` back, or
/// further back to `done` when runs were missed (at most
/// [`MAX_CATCH_UP_WINDOWS`] intervals).
pub fn due(cq: &ContinuousQuery, done: Option<i64>, now: i64) -> Option<Window> {
    let tick = floor_to(now, cq.every_ns, cq.offset_ns);
    let end = floor_to(tick, cq.interval_ns, cq.offset_ns);
    if done.is_some_and(|d| d >= end) {
        return None;
    }
    let mut start = end - cq.for_ns;
    if let Some(d) = done {
        let oldest = end - MAX_CATCH_UP_WINDOWS * cq.interval_ns;
        start = start.min(d.max(oldest));
    }
    Some(Window { start, end })
}

/// The statement one run executes: the CQ's select limited to `window`.
pub fn window_statement(select: &SelectStatement, window: Window) -> SelectStatement {
    use shardhouse_influxql::{BinaryOp, Expr, Literal};
    let bound = |op, t| Expr::Binary {
        op,
        lhs: Box::new(Expr::var("time")),
        rhs: Box::new(Expr::Literal(Literal::Integer(t))),
    };
    let range = Expr::Binary {
        op: BinaryOp::And,
        lhs: Box::new(bound(BinaryOp::GtEq, window.start)),
        rhs: Box::new(bound(BinaryOp::Lt, window.end)),
    };
    let mut out = select.clone();
    out.condition = Some(match out.condition.take() {
        None => range,
        Some(c) => Expr::Binary {
            op: BinaryOp::And,
            lhs: Box::new(c),
            rhs: Box::new(range),
        },
    });
    out
}

/// The select of a stored query (parsed back from its canonical text).
pub fn parse_select(cq: &ContinuousQuery) -> Result<SelectStatement, CqError> {
    match shardhouse_influxql::parse_statement(&cq.query) {
        Ok(Statement::CreateContinuousQuery(c)) => Ok(*c.select),
        Ok(_) => Err(CqError::Invalid(format!("{} is not a CQ", cq.query))),
        Err(e) => Err(CqError::Invalid(format!("{}: {e}", cq.query))),
    }
}
