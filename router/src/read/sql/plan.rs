//! Planning of `/api/v1/sql` across shards (docs/api.md, "Read-back: SQL").
//!
//! The statement is read on ClickHouse's tokens ([`crate::sql_check`]) and
//! cut into its clauses at bracket depth 0. The router only parses what it
//! must evaluate itself: the expressions of SELECT, HAVING and ORDER BY
//! down to their aggregate calls. Everything else (FROM, JOIN, WHERE,
//! GROUP BY keys, aggregate arguments, scalar sub-expressions) is sent to
//! the shards as the text the user wrote, so ClickHouse syntax the router
//! does not know still runs as ClickHouse runs it.
//!
//! - Without aggregates ([`Plan::Rows`]): every shard runs the statement with
//!   the ORDER BY keys appended as hidden columns and `LIMIT limit+offset`;
//!   the router sorts the union by those keys and applies OFFSET/LIMIT once.
//! - With aggregates, GROUP BY or DISTINCT ([`Plan::Groups`]): every shard
//!   returns its group keys, the scalar sub-expressions and mergeable
//!   partial states ([`AggKind`]); the router merges per group, evaluates
//!   the expressions over aggregates, HAVING, DISTINCT, ORDER BY and
//!   LIMIT/OFFSET.
//!
//! What a shard computes alone must be the same as over all the data: joins
//! must be on `series_id` (a series' points and its `_series` row live on
//! one shard) and subqueries must not aggregate or limit unless they group
//! by `series_id`. Anything else is refused with its position.
//!
//! The planner is split along those steps: `aggregates` (which calls are
//! aggregates), `clauses` (cutting a statement and the shard-safety checks),
//! `expr` (the expression parser), `items` (SELECT / ORDER BY / LIMIT
//! lists), `build` (router expressions and partial states), `planner`
//! ([`plan`]) and `shard_sql` (the statement each shard runs). The plan
//! types below are what [`crate::read::sql::merge`] executes.

mod aggregates;
mod build;
mod clauses;
mod expr;
mod items;
mod planner;
mod shard_sql;
#[cfg(test)]
mod tests;

pub use aggregates::aggregate_name;
pub use clauses::reads_no_table;
pub use planner::plan;
pub use shard_sql::{quote_ident, rewrite_missing};

use crate::read::sql::value::Value;

/// Why `/api/v1/sql` cannot merge a statement across shards (a 400): the
/// message names the construct and its position.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl From<String> for PlanError {
    fn from(message: String) -> Self {
        PlanError(message)
    }
}

impl From<&str> for PlanError {
    fn from(message: &str) -> Self {
        PlanError(message.to_owned())
    }
}

/// An aggregate the router merges exactly.
#[derive(Debug, Clone, PartialEq)]
pub enum AggKind {
    /// `count`: sum of the shards' counts.
    Count,
    Sum,
    Min,
    Max,
    /// Shards send `sum` and `count`.
    Avg,
    /// `any`: the first non-NULL partial; `anyLast`: the last.
    Any,
    AnyLast,
    /// Shards send `argMin(a, b)` and `min(b)`.
    ArgMin,
    ArgMax,
    /// `uniqExact`, `count(DISTINCT)`, `uniq*`: shards send
    /// `groupUniqArray`; exact.
    Uniq,
    /// Shards send `groupArray`. `interpolated`: `quantile`/`median`
    /// (ClickHouse's linear interpolation between neighbours, exact here
    /// for any count); else `quantileExact` (the element at
    /// `floor(level * n)`). `multi`: `quantiles(...)`, an array.
    Quantile {
        levels: Vec<f64>,
        interpolated: bool,
        multi: bool,
    },
    /// Shards send `count`, `avg` and `varPop`, merged by Chan's formula.
    Var {
        sample: bool,
        sqrt: bool,
    },
}

/// One aggregate call: its kind and where its partials are in a shard row.
#[derive(Debug, Clone, PartialEq)]
pub struct AggSpec {
    pub kind: AggKind,
    pub cols: Vec<usize>,
}

/// Binary operators the router evaluates over aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    fn ch_name(self) -> &'static str {
        match self {
            BinOp::Add => "plus",
            BinOp::Sub => "minus",
            BinOp::Mul => "multiply",
            BinOp::Div => "divide",
            BinOp::Mod => "modulo",
            BinOp::Eq => "equals",
            BinOp::Ne => "notEquals",
            BinOp::Lt => "less",
            BinOp::Le => "lessOrEquals",
            BinOp::Gt => "greater",
            BinOp::Ge => "greaterOrEquals",
            BinOp::And => "and",
            BinOp::Or => "or",
        }
    }
}

/// Functions the router evaluates over aggregates.
#[rustfmt::skip]
pub const ROUTER_FUNCTIONS: &[&str] = &[
    "round", "abs", "sqrt", "floor", "ceil", "tofloat64", "toint64", "touint64", "ifnull",
    "coalesce",
];

/// An expression the router evaluates per group.
#[derive(Debug, Clone, PartialEq)]
pub enum RExpr {
    /// A column of the shard row (group key or scalar), constant per group.
    Col(usize),
    /// The merged value of aggregate `i`.
    Agg(usize),
    Lit(Value),
    Bin(BinOp, Box<RExpr>, Box<RExpr>),
    Neg(Box<RExpr>),
    Not(Box<RExpr>),
    Func(String, Vec<RExpr>),
}

/// An ORDER BY key.
#[derive(Debug, Clone, PartialEq)]
pub struct SortKey<E> {
    pub expr: E,
    pub desc: bool,
    pub nulls_first: bool,
}

/// How the name of an output column is found.
#[derive(Debug, Clone, PartialEq)]
pub enum OutName {
    /// As given (an alias, or the router's rendering of an expression
    /// over aggregates, as ClickHouse names it).
    Fixed(String),
    /// The name the shards' answer gives shard column `i` (ClickHouse's
    /// own), else the fallback.
    Shard(usize, String),
}

/// The plan of a statement without aggregates.
#[derive(Debug, Clone, PartialEq)]
pub struct RowsPlan {
    /// Projection items as written (with aliases).
    pub items: Vec<String>,
    /// `FROM ...` up to (not including) GROUP BY / ORDER BY / LIMIT.
    pub from: String,
    /// ORDER BY expressions (sent as hidden columns `__sh_o<i>` at the end
    /// of every shard row) and the clause as written.
    pub order: Vec<SortKey<String>>,
    pub order_text: Option<String>,
    pub limit: Option<u64>,
    pub offset: u64,
}

/// The plan of a statement with aggregates, GROUP BY or DISTINCT.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupsPlan {
    /// Shard row: `keys`, then `scalars`, then the aggregates' partials.
    pub keys: Vec<String>,
    pub scalars: Vec<String>,
    pub partials: Vec<String>,
    pub from: String,
    pub group_by: bool,
    pub aggs: Vec<AggSpec>,
    pub outputs: Vec<(OutName, RExpr)>,
    pub having: Option<RExpr>,
    pub distinct: bool,
    pub order: Vec<SortKey<RExpr>>,
    pub limit: Option<u64>,
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    Rows(RowsPlan),
    Groups(GroupsPlan),
}
