use thiserror::Error;

/// What went wrong with a query, grouped as Prometheus groups its
/// `errorType`s so the HTTP layer maps each to the same status code.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The request itself is wrong (Prometheus's `bad_data`, HTTP 400):
    /// malformed PromQL with the parser's position, a bad time or step.
    #[error("{0}")]
    BadData(String),
    /// The query is valid but cannot be answered as asked (`execution`,
    /// HTTP 422): duplicate series in a vector, bad function arguments.
    #[error("{0}")]
    Execution(String),
    /// More samples than the engine's `max_samples` would be held at once.
    #[error("query processing would load too many samples into memory in query execution")]
    TooManySamples,
    /// The sample source failed (`execution`, but HTTP 503 in Prometheus's
    /// terms of an unavailable storage); the message says which part.
    #[error("{0}")]
    Source(String),
}

pub type Result<T> = std::result::Result<T, Error>;

pub(crate) fn exec(msg: impl Into<String>) -> Error {
    Error::Execution(msg.into())
}
