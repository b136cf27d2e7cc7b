//! PromQL for Shardhouse: queries parsed by the `promql-parser` crate and
//! evaluated the way Prometheus 2.x evaluates them (closed range windows,
//! the 5-minute lookback, stale markers, extrapolated rates), over any
//! [`SampleSource`] that returns raw samples per series.
//!
//! The crate does no I/O of its own: the router implements
//! [`SampleSource`] over its shards, and [`api`] turns HTTP parameters
//! into queries and results into Prometheus's JSON.

pub mod api;
pub mod engine;
mod error;
mod label_cache;
pub mod labels;
pub mod source;

pub use async_trait::async_trait;
pub use engine::{Engine, EngineOptions, QueryValue, RangeSeries};
pub use error::{Error, Result};
pub use label_cache::LabelCache;
pub use labels::Labels;
pub use source::{
    Grid, LabelMatcher, MatchKind, MemorySource, Needed, SampleSource, Selection, Series,
};
