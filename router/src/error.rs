//! The router's error type. Messages tell the client what to do.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "request body exceeds the limit of {limit} bytes; split the write into smaller batches"
    )]
    BodyTooLarge { limit: usize },
    #[error("authorization failed: {0}")]
    Unauthorized(String),
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// A body in an encoding the router does not read (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("router overloaded ({0}); retry after {1:?}")]
    Overloaded(String, Duration),
    #[error("shard {shard} unavailable: {reason}; retry later")]
    Unavailable { shard: u32, reason: String },
    #[error("no shard map yet (waiting for etcd key {0}); retry later")]
    NoShardMap(String),
    #[error("node rejected the batch for shard {shard}: {reason}")]
    Rejected { shard: u32, reason: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("internal error: {0}")]
    Internal(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A copy of the error for every request that shared one coalesced
    /// write (the etcd client's error cannot be cloned; it keeps its text).
    pub fn shared(&self) -> Error {
        match self {
            Error::BodyTooLarge { limit } => Error::BodyTooLarge { limit: *limit },
            Error::Unauthorized(s) => Error::Unauthorized(s.clone()),
            Error::Forbidden(s) => Error::Forbidden(s.clone()),
            Error::BadRequest(s) => Error::BadRequest(s.clone()),
            Error::UnsupportedMediaType(s) => Error::UnsupportedMediaType(s.clone()),
            Error::Overloaded(s, d) => Error::Overloaded(s.clone(), *d),
            Error::Unavailable { shard, reason } => Error::Unavailable {
                shard: *shard,
                reason: reason.clone(),
            },
            Error::NoShardMap(s) => Error::NoShardMap(s.clone()),
            Error::Rejected { shard, reason } => Error::Rejected {
                shard: *shard,
                reason: reason.clone(),
            },
            Error::Config(s) => Error::Config(s.clone()),
            Error::Etcd(e) => Error::Internal(format!("etcd: {e}")),
            Error::Internal(s) => Error::Internal(s.clone()),
        }
    }

    /// HTTP status for the error.
    pub fn status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            Error::BodyTooLarge { .. } => S::PAYLOAD_TOO_LARGE,
            Error::Unauthorized(_) => S::UNAUTHORIZED,
            Error::Forbidden(_) => S::FORBIDDEN,
            Error::BadRequest(_) | Error::Rejected { .. } => S::BAD_REQUEST,
            Error::UnsupportedMediaType(_) => S::UNSUPPORTED_MEDIA_TYPE,
            Error::Overloaded(..) => S::TOO_MANY_REQUESTS,
            Error::Unavailable { .. } | Error::NoShardMap(_) | Error::Etcd(_) => {
                S::SERVICE_UNAVAILABLE
            }
            Error::Config(_) | Error::Internal(_) => S::INTERNAL_SERVER_ERROR,
        }
    }

    /// InfluxDB error code for the JSON body.
    pub fn influx_code(&self) -> &'static str {
        match self {
            Error::BodyTooLarge { .. } => "request too large",
            Error::Unauthorized(_) => "unauthorized",
            Error::Forbidden(_) => "forbidden",
            Error::BadRequest(_) | Error::Rejected { .. } => "invalid",
            Error::UnsupportedMediaType(_) => "unsupported media type",
            Error::Overloaded(..) => "too many requests",
            Error::Unavailable { .. } | Error::NoShardMap(_) | Error::Etcd(_) => "unavailable",
            Error::Config(_) | Error::Internal(_) => "internal error",
        }
    }

    /// Label for `shardhouse_router_rejected_total`, when it counts there.
    pub fn reject_reason(&self) -> Option<&'static str> {
        match self {
            Error::BodyTooLarge { .. } => Some("body_too_large"),
            Error::Unauthorized(_) | Error::Forbidden(_) => Some("unauthorized"),
            Error::BadRequest(_) | Error::Rejected { .. } | Error::UnsupportedMediaType(_) => {
                Some("bad_request")
            }
            Error::Overloaded(..) => Some("overloaded"),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Overloaded(_, d) => Some(*d),
            _ => None,
        }
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        let msg = e.to_string();
        let mut status = match &e {
            Error::BodyTooLarge { .. } | Error::Overloaded(..) => {
                tonic::Status::resource_exhausted(msg)
            }
            Error::Unauthorized(_) => tonic::Status::unauthenticated(msg),
            Error::Forbidden(_) => tonic::Status::permission_denied(msg),
            Error::BadRequest(_) | Error::Rejected { .. } | Error::UnsupportedMediaType(_) => {
                tonic::Status::invalid_argument(msg)
            }
            Error::Unavailable { .. } | Error::NoShardMap(_) | Error::Etcd(_) => {
                tonic::Status::unavailable(msg)
            }
            Error::Config(_) | Error::Internal(_) => tonic::Status::internal(msg),
        };
        if let Some(d) = e.retry_after() {
            // Retry hint for gRPC clients (the HTTP side sends Retry-After).
            if let Ok(v) = d.as_millis().to_string().parse() {
                status.metadata_mut().insert("retry-after-ms", v);
            }
        }
        status
    }
}
