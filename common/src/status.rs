//! One status model for every crate: each error enum says what kind of
//! failure it is ([`StatusCode`]) and when to retry ([`ErrorExt`]); the
//! answer a client sees is derived here, once, for HTTP (status, InfluxDB
//! error code, `Retry-After`), for gRPC ([`to_tonic_status`]) and for the
//! node's in-band write answer ([`write_result`] / [`write_status`]).

use crate::proto::{write_response::Result as WriteResult, NotLeader, Overloaded};
use crate::proto::{Rejected, ShardUnavailable};
use std::time::Duration;

/// What kind of failure an error is: it decides the HTTP status, the gRPC
/// code and whether the caller may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusCode {
    /// The request can never succeed as sent (bad syntax, bad schema, a
    /// field type conflict).
    InvalidArgument,
    /// The body is over a size limit; split it.
    PayloadTooLarge,
    /// The body is in an encoding this server does not read.
    UnsupportedMediaType,
    NotFound,
    AlreadyExists,
    /// No credentials were presented.
    Unauthenticated,
    /// The credentials do not allow this.
    PermissionDenied,
    /// This client is over its own rate; retry after the hint.
    RateLimited,
    /// The server is over a byte or request budget (backpressure); retry
    /// after the hint.
    Overloaded,
    /// This replica is not the shard's leader; retry at the leader.
    NotLeader,
    /// Temporarily unable to serve (no leader, shutting down, a node
    /// unreachable); retry, possibly on another replica.
    Unavailable,
    /// The deadline passed before an answer; retry.
    Timeout,
    /// The disk is full; retry once space is freed.
    StorageFull,
    /// A bug or a broken installation; retrying will not help.
    Internal,
}

impl StatusCode {
    /// Every code, for table tests and docs.
    pub const ALL: [StatusCode; 14] = [
        StatusCode::InvalidArgument,
        StatusCode::PayloadTooLarge,
        StatusCode::UnsupportedMediaType,
        StatusCode::NotFound,
        StatusCode::AlreadyExists,
        StatusCode::Unauthenticated,
        StatusCode::PermissionDenied,
        StatusCode::RateLimited,
        StatusCode::Overloaded,
        StatusCode::NotLeader,
        StatusCode::Unavailable,
        StatusCode::Timeout,
        StatusCode::StorageFull,
        StatusCode::Internal,
    ];

    /// Whether the same request may succeed later (here or elsewhere).
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            StatusCode::RateLimited
                | StatusCode::Overloaded
                | StatusCode::NotLeader
                | StatusCode::Unavailable
                | StatusCode::Timeout
                | StatusCode::StorageFull
        )
    }

    /// The HTTP status answered for this code. A leader change is a 503
    /// for HTTP clients: the router follows leaders itself, so a client
    /// only sees one when no leader could be found in time.
    pub fn http_status(self) -> u16 {
        match self {
            StatusCode::InvalidArgument => 400,
            StatusCode::Unauthenticated => 401,
            StatusCode::PermissionDenied => 403,
            StatusCode::NotFound => 404,
            StatusCode::AlreadyExists => 409,
            StatusCode::PayloadTooLarge => 413,
            StatusCode::UnsupportedMediaType => 415,
            StatusCode::RateLimited | StatusCode::Overloaded => 429,
            StatusCode::Internal => 500,
            StatusCode::NotLeader | StatusCode::Unavailable => 503,
            StatusCode::Timeout => 504,
            StatusCode::StorageFull => 507,
        }
    }

    /// The `code` of an InfluxDB-style JSON error body.
    pub fn influx_code(self) -> &'static str {
        match self {
            StatusCode::InvalidArgument => "invalid",
            StatusCode::PayloadTooLarge => "request too large",
            StatusCode::UnsupportedMediaType => "unsupported media type",
            StatusCode::NotFound => "not found",
            StatusCode::AlreadyExists => "conflict",
            StatusCode::Unauthenticated => "unauthorized",
            StatusCode::PermissionDenied => "forbidden",
            StatusCode::RateLimited | StatusCode::Overloaded => "too many requests",
            StatusCode::NotLeader | StatusCode::Unavailable => "unavailable",
            StatusCode::Timeout => "timeout",
            StatusCode::StorageFull => "insufficient storage",
            StatusCode::Internal => "internal error",
        }
    }

    /// The gRPC code answered for this code.
    pub fn grpc_code(self) -> tonic::Code {
        use tonic::Code as C;
        match self {
            StatusCode::InvalidArgument | StatusCode::UnsupportedMediaType => C::InvalidArgument,
            StatusCode::PayloadTooLarge
            | StatusCode::RateLimited
            | StatusCode::Overloaded
            | StatusCode::StorageFull => C::ResourceExhausted,
            StatusCode::NotFound => C::NotFound,
            StatusCode::AlreadyExists => C::AlreadyExists,
            StatusCode::Unauthenticated => C::Unauthenticated,
            StatusCode::PermissionDenied => C::PermissionDenied,
            StatusCode::NotLeader | StatusCode::Unavailable => C::Unavailable,
            StatusCode::Timeout => C::DeadlineExceeded,
            StatusCode::Internal => C::Internal,
        }
    }
}

/// Implemented once by every crate's error enum.
pub trait ErrorExt: std::error::Error {
    /// What kind of failure this is.
    fn status_code(&self) -> StatusCode;

    /// How long the caller should wait before retrying, when the error
    /// knows (backpressure, rate limits).
    fn retry_after(&self) -> Option<Duration> {
        None
    }

    /// The text a remote caller is shown: the whole message by default; an
    /// error whose text wraps a reason that crosses the wire as-is (a
    /// rejection decided when applied) gives just that reason.
    fn output_msg(&self) -> String {
        self.to_string()
    }
}

/// Whole seconds for a `Retry-After` header: rounded up, at least 1.
pub fn retry_after_secs(d: Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

/// The gRPC metadata key carrying the retry hint (milliseconds); HTTP
/// sends `Retry-After` instead.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// The gRPC metadata key of a `NotFound` read answer saying what is
/// missing ([`Missing`]).
pub const MISSING: &str = "shardhouse-missing";

/// What a read found missing on a replica, told in the `NotFound` status
/// (metadata [`MISSING`]) so the router acts on it without reading the
/// message: a shard that holds no such table yet has no rows to add, and a
/// column one shard lacks reads as NULL there (`/api/v1/sql`). A
/// `NotFound` without it is a node that holds no replica of the shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The shard holds no such database or table yet: nothing was written
    /// there.
    Table,
    /// A column (an identifier) the statement names is not in the shard's
    /// table.
    Column,
}

impl Missing {
    fn as_str(self) -> &'static str {
        match self {
            Missing::Table => "table",
            Missing::Column => "column",
        }
    }

    /// The `NotFound` status of a read that found this missing.
    pub fn status(self, message: impl Into<String>) -> tonic::Status {
        let mut status = tonic::Status::not_found(message);
        status.metadata_mut().insert(
            MISSING,
            tonic::metadata::MetadataValue::from_static(self.as_str()),
        );
        status
    }

    /// What `status` says is missing; `None` for any other answer.
    pub fn of(status: &tonic::Status) -> Option<Missing> {
        if status.code() != tonic::Code::NotFound {
            return None;
        }
        let mark = status.metadata().get(MISSING)?;
        [Missing::Table, Missing::Column]
            .into_iter()
            .find(|m| mark.as_bytes() == m.as_str().as_bytes())
    }
}

/// The one conversion of an error into a gRPC status.
pub fn to_tonic_status<E: ErrorExt + ?Sized>(e: &E) -> tonic::Status {
    let mut status = tonic::Status::new(e.status_code().grpc_code(), e.output_msg());
    if let Some(d) = e.retry_after() {
        if let Ok(v) = d.as_millis().to_string().parse() {
            status.metadata_mut().insert(RETRY_AFTER_MS, v);
        }
    }
    status
}

/// A node's in-band answer to a write that failed with `e` (the router
/// follows `NotLeader`, fails over on `Unavailable`, backs off on
/// `Overloaded` and answers 400 on `Rejected`). `not_leader` fills in the
/// leader hint when the error is a leader change.
pub fn write_result<E: ErrorExt + ?Sized>(
    e: &E,
    not_leader: impl FnOnce() -> NotLeader,
) -> WriteResult {
    let reason = e.output_msg();
    match e.status_code() {
        StatusCode::NotLeader => WriteResult::NotLeader(not_leader()),
        StatusCode::Overloaded | StatusCode::RateLimited => WriteResult::Overloaded(Overloaded {
            retry_after_ms: e
                .retry_after()
                .map_or(0, |d| u32::try_from(d.as_millis()).unwrap_or(u32::MAX)),
            reason,
        }),
        code if code.is_retryable() => WriteResult::Unavailable(ShardUnavailable { reason }),
        StatusCode::Internal => WriteResult::Unavailable(ShardUnavailable { reason }),
        _ => WriteResult::Rejected(Rejected { reason }),
    }
}

/// The status of a node's write answer, its reason and retry hint; `None`
/// for a commit. The inverse of [`write_result`].
pub fn write_status(r: &WriteResult) -> Option<(StatusCode, &str, Option<Duration>)> {
    match r {
        WriteResult::Committed(_) => None,
        WriteResult::NotLeader(_) => Some((StatusCode::NotLeader, "not the leader", None)),
        WriteResult::Unavailable(u) => Some((StatusCode::Unavailable, &u.reason, None)),
        WriteResult::Overloaded(o) => Some((
            StatusCode::Overloaded,
            &o.reason,
            Some(Duration::from_millis(u64::from(o.retry_after_ms.max(1)))),
        )),
        WriteResult::Rejected(r) => Some((StatusCode::InvalidArgument, &r.reason, None)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{code:?} failed")]
    struct Failed {
        code: StatusCode,
        after: Option<Duration>,
    }

    impl ErrorExt for Failed {
        fn status_code(&self) -> StatusCode {
            self.code
        }
        fn retry_after(&self) -> Option<Duration> {
            self.after
        }
    }

    #[test]
    fn every_code_maps_to_http_influx_and_grpc_as_clients_expect() {
        use tonic::Code as G;
        use StatusCode as S;
        let table = [
            (
                S::InvalidArgument,
                400,
                "invalid",
                G::InvalidArgument,
                false,
            ),
            (
                S::PayloadTooLarge,
                413,
                "request too large",
                G::ResourceExhausted,
                false,
            ),
            (
                S::UnsupportedMediaType,
                415,
                "unsupported media type",
                G::InvalidArgument,
                false,
            ),
            (S::NotFound, 404, "not found", G::NotFound, false),
            (S::AlreadyExists, 409, "conflict", G::AlreadyExists, false),
            (
                S::Unauthenticated,
                401,
                "unauthorized",
                G::Unauthenticated,
                false,
            ),
            (
                S::PermissionDenied,
                403,
                "forbidden",
                G::PermissionDenied,
                false,
            ),
            (
                S::RateLimited,
                429,
                "too many requests",
                G::ResourceExhausted,
                true,
            ),
            (
                S::Overloaded,
                429,
                "too many requests",
                G::ResourceExhausted,
                true,
            ),
            (S::NotLeader, 503, "unavailable", G::Unavailable, true),
            (S::Unavailable, 503, "unavailable", G::Unavailable, true),
            (S::Timeout, 504, "timeout", G::DeadlineExceeded, true),
            (
                S::StorageFull,
                507,
                "insufficient storage",
                G::ResourceExhausted,
                true,
            ),
            (S::Internal, 500, "internal error", G::Internal, false),
        ];
        assert_eq!(table.len(), S::ALL.len());
        for (code, http, influx, grpc, retry) in table {
            assert_eq!(code.http_status(), http, "{code:?}");
            assert_eq!(code.influx_code(), influx, "{code:?}");
            assert_eq!(code.grpc_code(), grpc, "{code:?}");
            assert_eq!(code.is_retryable(), retry, "{code:?}");
        }
    }

    #[test]
    fn grpc_status_carries_the_message_and_the_retry_hint() {
        let e = Failed {
            code: StatusCode::Overloaded,
            after: Some(Duration::from_millis(1500)),
        };
        let s = to_tonic_status(&e);
        assert_eq!(s.code(), tonic::Code::ResourceExhausted);
        assert_eq!(s.message(), "Overloaded failed");
        assert_eq!(s.metadata().get(RETRY_AFTER_MS).unwrap(), "1500");
        let s = to_tonic_status(&Failed {
            code: StatusCode::Internal,
            after: None,
        });
        assert!(s.metadata().get(RETRY_AFTER_MS).is_none());
        assert_eq!(retry_after_secs(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(3)), 3);
    }

    #[test]
    fn a_read_says_what_is_missing_in_its_status() {
        for m in [Missing::Table, Missing::Column] {
            let s = m.status("Code: 60. DB::Exception: no table");
            assert_eq!(s.code(), tonic::Code::NotFound);
            assert_eq!(Missing::of(&s), Some(m));
            assert_eq!(s.message(), "Code: 60. DB::Exception: no table");
        }
        // A node without a replica of the shard: not found, nothing missing.
        assert_eq!(Missing::of(&tonic::Status::not_found("no replica")), None);
        // The mark counts on a NotFound only.
        let mut s = tonic::Status::invalid_argument("x");
        s.metadata_mut().insert(
            MISSING,
            tonic::metadata::MetadataValue::from_static("table"),
        );
        assert_eq!(Missing::of(&s), None);
    }

    #[test]
    fn write_answers_round_trip_through_the_status_model() {
        let hint = || NotLeader {
            leader_hint: 2,
            leader_addr: "n2:1".into(),
        };
        for code in StatusCode::ALL {
            let e = Failed {
                code,
                after: Some(Duration::from_millis(40)),
            };
            let r = write_result(&e, hint);
            let (back, reason, after) = write_status(&r).expect("a failure");
            let want = match code {
                StatusCode::NotLeader => StatusCode::NotLeader,
                StatusCode::Overloaded | StatusCode::RateLimited => StatusCode::Overloaded,
                c if c.is_retryable() || c == StatusCode::Internal => StatusCode::Unavailable,
                _ => StatusCode::InvalidArgument,
            };
            assert_eq!(back, want, "{code:?}");
            if want == StatusCode::NotLeader {
                assert!(matches!(r, WriteResult::NotLeader(ref n) if n.leader_hint == 2));
            } else {
                assert_eq!(reason, format!("{code:?} failed"));
            }
            if want == StatusCode::Overloaded {
                assert_eq!(after, Some(Duration::from_millis(40)));
            }
        }
    }
}
