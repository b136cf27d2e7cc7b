//! # shardhouse-influxql
//!
//! A parser for InfluxQL 1.x (as InfluxDB 1.8 documents it) for the router's
//! `/query` endpoint: a lexer, a recursive-descent parser, a typed AST that
//! prints back as canonical InfluxQL, and pure helpers that turn a WHERE
//! clause into a time range and tag / field filters. No I/O, no planner.
//!
//! ```
//! use shardhouse_influxql::{parse, time, Statement};
//!
//! let query = parse(
//!     "SELECT mean(\"value\") FROM \"cpu\" WHERE \"host\" =~ /^a$/ \
//!      AND time >= 1700000000123ms AND time <= 1700003600456ms \
//!      GROUP BY time(1m), \"host\" fill(null)",
//! )
//! .unwrap();
//! let Statement::Select(select) = &query.statements[0] else { unreachable!() };
//! // Canonical text: identifiers unquoted where they can be, durations in
//! // their largest unit (`1700000000000ms` would print as `1700000000s`).
//! assert_eq!(
//!     select.to_string(),
//!     "SELECT mean(value) FROM cpu WHERE host =~ /^a$/ AND time >= 1700000000123ms \
//!      AND time <= 1700003600456ms GROUP BY time(1m), host fill(null)"
//! );
//! let where_clause = select.condition.as_ref().unwrap();
//! let parts = time::split_condition(where_clause, |name| name == "host").unwrap();
//! let range = time::time_range(parts.time.as_ref().unwrap(), 0).unwrap();
//! assert_eq!(range.start, 1_700_000_000_123_000_000);
//! assert_eq!(range.end, 1_700_003_600_456_000_001); // `<=` includes the instant
//! assert_eq!(parts.tags.unwrap().to_string(), "host =~ /^a$/");
//! ```
//!
//! * [`parse`] / [`parse_with_params`] read one or more `;`-separated
//!   statements; `$name` bind parameters come from a [`Params`] map.
//! * Errors are a [`ParseError`]: an [`ErrorKind`] plus the byte offset,
//!   line and column; `Display` reads like InfluxDB's
//!   (`found FROM, expected identifier, string, number, bool at line 1,
//!   char 8`). The `/query` handler prefixes `error parsing query: `.
//! * Statements InfluxQL has but Shardhouse does not serve (continuous
//!   queries, subscriptions, shards, `KILL QUERY`) fail with
//!   [`ErrorKind::Unsupported`] naming them; unknown functions with
//!   [`ErrorKind::UndefinedFunction`]; wrong arity with [`ErrorKind::Arity`].
//! * `tz('...')` names are kept as written; the planner validates them.

pub mod ast;
mod display;
pub mod error;
pub mod functions;
mod lexer;
mod parser;
mod select;
mod statements;
pub mod time;
mod users;

pub use ast::*;
pub use display::{format_duration, quote_ident, quote_string};
pub use error::{ErrorKind, ParseError, Position, TimeError};
pub use lexer::KEYWORDS;
pub use parser::{ParamValue, Params};

/// Parses a query of one or more statements.
pub fn parse(text: &str) -> Result<Query, ParseError> {
    parser::Parser::new(text, None).parse_query()
}

/// Parses a query whose `$name` bind parameters take their values from
/// `params`; a parameter missing from the map is an error.
pub fn parse_with_params(text: &str, params: &Params) -> Result<Query, ParseError> {
    parser::Parser::new(text, Some(params)).parse_query()
}

/// Parses exactly one statement (no `;`-separated list).
pub fn parse_statement(text: &str) -> Result<Statement, ParseError> {
    let mut query = parse(text)?;
    if query.statements.len() != 1 {
        let offset = text.find(';').unwrap_or(text.len());
        return Err(ParseError {
            kind: ErrorKind::Invalid(format!(
                "expected one statement, found {}",
                query.statements.len()
            )),
            position: Position::at(text, offset),
        });
    }
    Ok(query.statements.remove(0))
}
