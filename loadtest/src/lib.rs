//! shardhouse-loadtest: the load generator behind `make bench-e2e` and
//! `make chaos`.
//!
//! Methodology (see `docs/benchmarks.md`): an **open model** offers a fixed
//! request rate per step from pre-encoded requests, and a request that cannot
//! start on time is counted as dropped rather than queued; a **closed model**
//! (N virtual users) is kept for contrast, because it hides backpressure.

pub mod ack;
pub mod ack_bulk;
pub mod analyze;
pub mod dataset;
pub mod encode;
pub mod error;
pub mod ramp;
pub mod report;
pub mod resources;
pub mod runner;
pub mod sink;
pub mod sql;
pub mod stats;
pub mod target;

pub use error::{Error, Result};
