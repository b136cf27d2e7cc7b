//! The crate's one error type.

use thiserror::Error;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Error)]
pub enum Error {
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("cannot reach {url}: {reason}; is the server running and listening there?")]
    Unreachable { url: String, reason: String },
    #[error("query failed with HTTP {status}: {body}; check the SQL and that the table exists")]
    Query { status: u16, body: String },
    #[error(
        "cannot understand the query answer: {0}; the /api/v1/sql answer format may have changed"
    )]
    QueryFormat(String),
    #[error("ack log {path}: {reason}")]
    AckLog { path: String, reason: String },
    #[error("I/O error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("gRPC: {0}; is the router's --grpc-listen address right?")]
    Grpc(String),
}

impl Error {
    pub fn io(path: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
