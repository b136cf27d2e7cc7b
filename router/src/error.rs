//! The router's error type. Messages tell the client what to do.

use shardhouse_common::status::{self, ErrorExt, StatusCode};
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
    /// What a statement names does not exist ("database not found: db",
    /// InfluxDB's words, which clients match on).
    #[error("{0}")]
    NotFound(String),
    /// A shard has no column the statement reads (other shards may have
    /// it): the SQL read-back asks that shard again with the column as NULL.
    #[error("shard {shard}: {reason}")]
    UnknownColumn { shard: u32, reason: String },
    /// A body in an encoding the router does not read (415).
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("router overloaded ({0}); retry after {1:?}")]
    Overloaded(String, Duration),
    #[error("shard {shard} unavailable: {reason}; retry later")]
    Unavailable { shard: u32, reason: String },
    #[error("no shard map yet (waiting for etcd key {0}); retry later")]
    NoShardMap(String),
    /// The cluster's metadata in etcd (continuous queries, users) could
    /// not be read or written; the message says which and to retry.
    #[error("{0}")]
    MetaUnavailable(String),
    #[error("node rejected the batch for shard {shard}: {reason}")]
    Rejected { shard: u32, reason: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    #[error("internal error: {0}")]
    Internal(String),
    /// A write's or a statement's retention policy (InfluxDB's texts).
    #[error("{0}")]
    Policy(#[from] crate::policy::PolicyError),
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
            Error::NotFound(s) => Error::NotFound(s.clone()),
            Error::UnknownColumn { shard, reason } => Error::UnknownColumn {
                shard: *shard,
                reason: reason.clone(),
            },
            Error::UnsupportedMediaType(s) => Error::UnsupportedMediaType(s.clone()),
            Error::Overloaded(s, d) => Error::Overloaded(s.clone(), *d),
            Error::Unavailable { shard, reason } => Error::Unavailable {
                shard: *shard,
                reason: reason.clone(),
            },
            Error::NoShardMap(s) => Error::NoShardMap(s.clone()),
            Error::MetaUnavailable(s) => Error::MetaUnavailable(s.clone()),
            Error::Rejected { shard, reason } => Error::Rejected {
                shard: *shard,
                reason: reason.clone(),
            },
            Error::Config(s) => Error::Config(s.clone()),
            Error::Etcd(e) => Error::Internal(format!("etcd: {e}")),
            Error::Internal(s) => Error::Internal(s.clone()),
            Error::Policy(e) => Error::Policy(e.clone()),
        }
    }

    /// HTTP status for the error (from its [`StatusCode`]).
    pub fn status(&self) -> http::StatusCode {
        http::StatusCode::from_u16(self.status_code().http_status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// InfluxDB error code for the JSON body.
    pub fn influx_code(&self) -> &'static str {
        self.status_code().influx_code()
    }

    /// Label for `shardhouse_router_rejected_total`, when it counts there.
    pub fn reject_reason(&self) -> Option<&'static str> {
        match self {
            Error::BodyTooLarge { .. } => Some("body_too_large"),
            Error::Unauthorized(_) | Error::Forbidden(_) => Some("unauthorized"),
            Error::BadRequest(_)
            | Error::Rejected { .. }
            | Error::UnsupportedMediaType(_)
            | Error::UnknownColumn { .. } => Some("bad_request"),
            Error::Overloaded(..) => Some("overloaded"),
            _ => None,
        }
    }

    /// A statement that cannot run as written (its text is what the
    /// client is shown, in InfluxDB's words where clients match on them).
    pub fn statement(message: impl std::fmt::Display) -> Error {
        Error::BadRequest(message.to_string())
    }

    /// Whether InfluxDB answers this error inside the statement's result
    /// (HTTP 200, `results[i].error`): the statement is at fault (its
    /// syntax or meaning, a name that does not exist, a missing grant).
    /// Anything else (a shard that cannot answer, a full budget, a bug)
    /// fails the whole request with its own status: never a 200 with an
    /// error string.
    pub fn is_statement_error(&self) -> bool {
        match self {
            // A statement's retention policy that does not exist is the
            // statement's fault (a write's is a 500 in InfluxDB).
            Error::Policy(p) => !matches!(p, crate::policy::PolicyError::Unavailable(_)),
            e => {
                let code = e.status_code();
                !code.is_retryable() && code != StatusCode::Internal
            }
        }
    }

    /// The retry hint (here so callers need not import [`ErrorExt`]).
    pub fn retry_after(&self) -> Option<Duration> {
        <Self as ErrorExt>::retry_after(self)
    }
}

impl ErrorExt for Error {
    fn status_code(&self) -> StatusCode {
        match self {
            Error::BodyTooLarge { .. } => StatusCode::PayloadTooLarge,
            Error::Unauthorized(_) => StatusCode::Unauthenticated,
            Error::Forbidden(_) => StatusCode::PermissionDenied,
            Error::BadRequest(_) | Error::Rejected { .. } | Error::UnknownColumn { .. } => {
                StatusCode::InvalidArgument
            }
            Error::NotFound(_) => StatusCode::NotFound,
            Error::UnsupportedMediaType(_) => StatusCode::UnsupportedMediaType,
            Error::Overloaded(..) => StatusCode::Overloaded,
            Error::Unavailable { .. }
            | Error::NoShardMap(_)
            | Error::MetaUnavailable(_)
            | Error::Etcd(_) => StatusCode::Unavailable,
            Error::Config(_) | Error::Internal(_) => StatusCode::Internal,
            Error::Policy(e) => policy_status(e),
        }
    }

    fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Overloaded(_, d) => Some(*d),
            _ => None,
        }
    }
}

/// InfluxDB 1.8 answers a write to a missing policy with 500 (clients
/// retry until it exists) and a missing database with 404.
fn policy_status(e: &crate::policy::PolicyError) -> StatusCode {
    use crate::policy::PolicyError as P;
    match e {
        P::NotFound(_) => StatusCode::Internal,
        P::DatabaseNotFound(_) => StatusCode::NotFound,
        P::Unavailable(_) => StatusCode::Unavailable,
        _ => StatusCode::InvalidArgument,
    }
}

/// An evaluation step's refusal is the statement's; partials of two
/// aggregates merged together are the planner's bug.
impl From<shardhouse_eval::Error> for Error {
    fn from(e: shardhouse_eval::Error) -> Error {
        match e {
            shardhouse_eval::Error::PartialMismatch { .. } => Error::Internal(e.to_string()),
            e => Error::statement(e),
        }
    }
}

/// A time condition the statement cannot mean.
impl From<shardhouse_influxql::TimeError> for Error {
    fn from(e: shardhouse_influxql::TimeError) -> Error {
        Error::statement(e)
    }
}

/// A statement's regular expression that does not compile.
impl From<regex::Error> for Error {
    fn from(e: regex::Error) -> Error {
        Error::statement(e)
    }
}

impl From<Error> for tonic::Status {
    fn from(e: Error) -> tonic::Status {
        status::to_tonic_status(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What clients saw before the status model, pinned per variant.
    #[test]
    fn every_variant_answers_as_before() {
        use http::StatusCode as H;
        use tonic::Code as G;
        let s = |t: &str| t.to_string();
        let table = [
            (
                Error::BodyTooLarge { limit: 1 },
                H::PAYLOAD_TOO_LARGE,
                "request too large",
                G::ResourceExhausted,
            ),
            (
                Error::Unauthorized(s("x")),
                H::UNAUTHORIZED,
                "unauthorized",
                G::Unauthenticated,
            ),
            (
                Error::Forbidden(s("x")),
                H::FORBIDDEN,
                "forbidden",
                G::PermissionDenied,
            ),
            (
                Error::BadRequest(s("x")),
                H::BAD_REQUEST,
                "invalid",
                G::InvalidArgument,
            ),
            (
                Error::Rejected {
                    shard: 1,
                    reason: s("x"),
                },
                H::BAD_REQUEST,
                "invalid",
                G::InvalidArgument,
            ),
            (
                Error::NotFound(s("database not found: x")),
                H::NOT_FOUND,
                "not found",
                G::NotFound,
            ),
            (
                Error::UnknownColumn {
                    shard: 1,
                    reason: s("x"),
                },
                H::BAD_REQUEST,
                "invalid",
                G::InvalidArgument,
            ),
            (
                Error::MetaUnavailable(s("x")),
                H::SERVICE_UNAVAILABLE,
                "unavailable",
                G::Unavailable,
            ),
            (
                Error::UnsupportedMediaType(s("x")),
                H::UNSUPPORTED_MEDIA_TYPE,
                "unsupported media type",
                G::InvalidArgument,
            ),
            (
                Error::Overloaded(s("x"), Duration::from_millis(1200)),
                H::TOO_MANY_REQUESTS,
                "too many requests",
                G::ResourceExhausted,
            ),
            (
                Error::Unavailable {
                    shard: 1,
                    reason: s("x"),
                },
                H::SERVICE_UNAVAILABLE,
                "unavailable",
                G::Unavailable,
            ),
            (
                Error::NoShardMap(s("k")),
                H::SERVICE_UNAVAILABLE,
                "unavailable",
                G::Unavailable,
            ),
            (
                Error::Config(s("x")),
                H::INTERNAL_SERVER_ERROR,
                "internal error",
                G::Internal,
            ),
            (
                Error::Internal(s("x")),
                H::INTERNAL_SERVER_ERROR,
                "internal error",
                G::Internal,
            ),
        ];
        for (e, http, influx, grpc) in table {
            assert_eq!(e.status(), http, "{e:?}");
            assert_eq!(e.influx_code(), influx, "{e:?}");
            assert_eq!(e.shared().status(), http, "{e:?}");
            let text = e.to_string();
            let retry = e.retry_after();
            let g = tonic::Status::from(e);
            assert_eq!(g.code(), grpc, "{text}");
            assert_eq!(g.message(), text);
            assert_eq!(
                g.metadata().get(status::RETRY_AFTER_MS).is_some(),
                retry.is_some(),
                "{text}"
            );
        }
    }

    /// InfluxDB answers a statement's own fault in-band (200); a shard that
    /// cannot answer fails the request with its status.
    #[test]
    fn only_the_statements_faults_are_statement_errors() {
        use crate::policy::PolicyError;
        let statement = [
            Error::statement("GROUP BY requires at least one aggregate function"),
            Error::NotFound("database not found: db".into()),
            Error::UnknownColumn {
                shard: 0,
                reason: "x".into(),
            },
            Error::Forbidden("x".into()),
            // A write's missing policy is a 500; a statement's is its fault.
            Error::Policy(PolicyError::NotFound("rp".into())),
            Error::from(shardhouse_eval::Error::InvalidInterval),
        ];
        for e in statement {
            assert!(e.is_statement_error(), "{e:?}");
        }
        let request = [
            Error::Unavailable {
                shard: 2,
                reason: "query failed on every replica".into(),
            },
            Error::NoShardMap("k".into()),
            Error::MetaUnavailable("continuous queries are unavailable".into()),
            Error::Internal("bad IPC".into()),
            Error::Overloaded("full".into(), Duration::from_secs(1)),
            Error::Policy(PolicyError::Unavailable("etcd".into())),
            Error::from(shardhouse_eval::Error::PartialMismatch {
                left: "sum",
                right: "count",
            }),
        ];
        for e in request {
            assert!(!e.is_statement_error(), "{e:?}");
            assert!(e.status().as_u16() >= 429, "{e:?}");
        }
        // The text is the statement's, unchanged.
        assert_eq!(
            Error::from(shardhouse_eval::Error::InvalidInterval).to_string(),
            "time dimension must have a positive duration"
        );
    }
}
