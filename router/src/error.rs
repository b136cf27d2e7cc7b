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
            Error::BadRequest(_) | Error::Rejected { .. } | Error::UnsupportedMediaType(_) => {
                Some("bad_request")
            }
            Error::Overloaded(..) => Some("overloaded"),
            _ => None,
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
            Error::BadRequest(_) | Error::Rejected { .. } => StatusCode::InvalidArgument,
            Error::UnsupportedMediaType(_) => StatusCode::UnsupportedMediaType,
            Error::Overloaded(..) => StatusCode::Overloaded,
            Error::Unavailable { .. } | Error::NoShardMap(_) | Error::Etcd(_) => {
                StatusCode::Unavailable
            }
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
}
