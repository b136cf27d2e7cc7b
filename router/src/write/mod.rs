//! The write path, from a decoded request to shard batches in the queues
//! to nodes:
//!
//! - [`parse`]: the bodies every door accepts (line protocol, msgpack,
//!   remote_write, gRPC rows) added point by point to a [`batch`];
//! - [`otlp`] (with [`otlp_names`] and [`otlp_wire`]): OTLP metrics as
//!   Prometheus samples, added through remote_write's path;
//! - [`admit`]: the token's `write` role and rate limit;
//! - [`stages`]: the router's byte budget, then the split of a request into
//!   one Arrow IPC batch per (shard, measurement) (`batch`, with the series
//!   [`cardinality`] limit and the [`series_cache`]);
//! - [`coalesce`] and [`node_mux`]: the per-shard and per-node queues that
//!   `cluster::write` drives.
//!
//! Nothing here knows the cluster: `state::Router::write` chains these
//! stages with `cluster::write`'s reserve and forward.

pub mod admit;
pub mod batch;
pub mod cardinality;
pub mod coalesce;
pub mod node_mux;
pub mod otlp;
pub mod otlp_names;
pub mod otlp_wire;
pub mod parse;
pub mod series_cache;
pub mod stages;

use crate::error::Error;
use batch::{BatchSummary, RejectReason};
use std::time::{SystemTime, UNIX_EPOCH};

/// What a write did: points committed and points rejected (partial write).
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    pub summary: BatchSummary,
}

impl WriteOutcome {
    /// The 400 error for rejected points, if any were rejected. Every good
    /// point has been committed when this is returned.
    pub fn partial_error(&self, unit: &str) -> Option<Error> {
        let s = &self.summary;
        let r = s.first_rejection.as_ref()?;
        let total = s.points + s.rejected;
        let what = match r.reason {
            RejectReason::Cardinality => "series limit",
            RejectReason::BadPoint => "invalid point",
        };
        Some(Error::BadRequest(format!(
            "partial write: {unit} {}: {}; {} of {total} points rejected ({what} first), the other {} were written",
            r.position, r.message, s.rejected, s.points
        )))
    }
}

pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}
