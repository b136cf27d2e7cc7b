//! The crate's one error type. Messages are worded for the `/query`
//! response body (clients show them to users) and say what to change.

/// Why an evaluation step refused its input.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A call this library does not evaluate (`sample`, `holt_winters`,
    /// the technical-analysis functions, math functions).
    #[error("unsupported call: {name}; supported aggregates are count, sum, mean, median, mode, min, max, first, last, spread, stddev, percentile, distinct, integral, top, bottom")]
    UnsupportedCall { name: String },
    /// A call whose arguments are not what the function takes.
    #[error("invalid argument to {function}(): {message}")]
    InvalidArgument { function: String, message: String },
    /// The function does not apply to this field type (InfluxDB 1.8 refuses
    /// the same combinations, e.g. `mean()` of a string field).
    #[error("unsupported {function} iterator type: {value_type}")]
    UnsupportedType {
        function: &'static str,
        value_type: &'static str,
    },
    /// One field had values of two types in the same group (a field type
    /// conflict between shards); cast it with `::float` / `::integer`.
    #[error("{function}(): field has both {first} and {second} values in one group; cast it with ::float or ::integer")]
    TypeConflict {
        function: &'static str,
        first: &'static str,
        second: &'static str,
    },
    /// Partials of two different aggregates were merged (a planner bug).
    #[error("cannot merge a {left} partial with a {right} partial")]
    PartialMismatch {
        left: &'static str,
        right: &'static str,
    },
    /// The shards' windows around a `percentile()` rank did not decide it
    /// (`aggregate::rank`): the router reads the points instead, so a
    /// client never sees this.
    #[error("percentile(): the shards' windows do not decide the rank; the points must be read")]
    RankUndecided,
    /// `tz('...')` named a zone we do not know.
    #[error("unable to find time zone {0}")]
    UnknownTimeZone(String),
    /// `GROUP BY time()` with a non-positive interval.
    #[error("time dimension must have a positive duration")]
    InvalidInterval,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
