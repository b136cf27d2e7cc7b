//! The crate's one error type: what went wrong and where.

use std::fmt;

/// A place in the query text. `offset` is a byte offset; `line` and `column`
/// are 1-based, the column counted in characters (what InfluxDB calls `char`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    pub offset: usize,
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` in `text` (clamped to its length).
    pub fn at(text: &str, offset: usize) -> Self {
        let offset = offset.min(text.len());
        let mut line = 1;
        let mut column = 1;
        for (i, ch) in text.char_indices() {
            if i >= offset {
                break;
            }
            if ch == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        Position {
            offset,
            line,
            column,
        }
    }
}

/// What went wrong, without the position. The `Display` wording follows
/// InfluxDB 1.8 where it has one, because clients show it to users.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ErrorKind {
    /// `found X, expected A, B`.
    #[error("found {found}, expected {}", expected.join(", "))]
    Unexpected {
        found: String,
        expected: Vec<String>,
    },
    /// A statement or clause InfluxQL has but this parser refuses.
    #[error("{what} is not supported")]
    Unsupported { what: String },
    /// A function this parser does not know.
    #[error("undefined function {name}()")]
    UndefinedFunction { name: String },
    /// A known function called with the wrong number of arguments.
    #[error("invalid number of arguments for {function}, expected {expected}, got {got}")]
    Arity {
        function: String,
        expected: String,
        got: usize,
    },
    /// A known function called with an argument of the wrong kind.
    #[error("invalid argument for {function}(): {message}")]
    Argument { function: String, message: String },
    /// A string or quoted identifier that never ends or spans a newline.
    #[error("unterminated {what}")]
    Unterminated { what: &'static str },
    /// A backslash escape InfluxQL does not define.
    #[error("bad escape \\{0}")]
    BadEscape(char),
    /// A `/regex/` that does not compile.
    #[error("invalid regular expression /{pattern}/: {message}")]
    Regex { pattern: String, message: String },
    /// A number that does not fit, or a malformed one.
    #[error("invalid number {0}")]
    Number(String),
    /// A duration that overflows 64-bit nanoseconds or is out of range.
    #[error("invalid duration {0}")]
    Duration(String),
    /// `$name` with no value in the parameters map.
    #[error("missing parameter: {0}")]
    MissingParameter(String),
    /// A parameter whose value cannot stand where it is used.
    #[error("parameter ${name} cannot be used here: {message}")]
    Parameter { name: String, message: String },
    /// Any other semantic rule of the language (messages as InfluxDB's).
    #[error("{0}")]
    Invalid(String),
}

/// A parse error: the kind and where it happened.
/// `Display` prints `<message> at line L, char C`, as InfluxDB does.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ParseError {
    pub kind: ErrorKind,
    pub position: Position,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {}, char {}",
            self.kind, self.position.line, self.position.column
        )
    }
}

impl ParseError {
    pub(crate) fn new(kind: ErrorKind, text: &str, offset: usize) -> Self {
        ParseError {
            kind,
            position: Position::at(text, offset),
        }
    }
}

/// Errors of the time helpers (`time` module): conditions the planner cannot
/// turn into a time range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("invalid time comparison: {0}")]
    InvalidComparison(String),
    #[error("invalid time condition: {0}")]
    InvalidCondition(String),
    #[error("invalid time literal '{0}': expected RFC3339 or 'YYYY-MM-DD[ HH:MM:SS[.fff]]'")]
    InvalidTimeLiteral(String),
    #[error("time arithmetic overflows 64-bit nanoseconds")]
    Overflow,
}

pub type Result<T, E = ParseError> = std::result::Result<T, E>;
