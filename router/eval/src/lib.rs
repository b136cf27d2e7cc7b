//! # shardhouse-eval
//!
//! The layout-independent half of the router's InfluxQL read path: pure
//! functions over plain data (no I/O, no engine) that turn per-shard
//! partial aggregates into an InfluxDB 1.8 `/query` response body.
//!
//! ## How the router uses it
//!
//! For a `SELECT` parsed by `shardhouse-influxql`, with each field an
//! aggregate (optionally wrapped in a transformation) or a raw field:
//!
//! 1. **Plan.** [`Aggregate::from_call`] / [`Transform::from_call`] read
//!    the calls; [`Windowing`] holds the time range, the
//!    [`Interval`] of `GROUP BY time()` and the [`time_zone`] of `tz()`.
//!    With a transformation and `GROUP BY time()`, widen the range by
//!    [`Transform::lookback`].
//! 2. **Shards compute partials.** Each shard groups its points by series
//!    key (name and `GROUP BY` tags) and bucket
//!    ([`Windowing::bucket_start`]) and builds one [`Partial`] per group,
//!    bucket and field ([`Partial::add`]; [`partials::group_partials`] is
//!    the reference over plain points).
//! 3. **The router merges.** Partials of the same group, bucket and field
//!    fold together with [`Partial::merge`] ([`partials::merge_groups`]),
//!    in any order: the result is
//!    exactly the partial of all the points (see [`aggregate`] and
//!    [`exact`] for why, aggregate by aggregate).
//! 4. **Evaluate, fill, transform.** [`evaluate`] turns one series' merged
//!    buckets into points (bucket or selected-point times, `integral`
//!    across buckets); [`fill`] fills the gaps; [`Transform::apply`]
//!    computes derivatives, differences, moving averages.
//!    [`evaluate_field`] does the three in order.
//! 5. **Shape.** [`shape`] joins the fields of each series into rows by
//!    time, orders series as InfluxDB does, and applies
//!    `LIMIT`/`OFFSET`/`SLIMIT`/`SOFFSET` and `ORDER BY time DESC`;
//!    [`column_names`] names the columns (`mean`, `mean_1`, aliases).
//! 6. **Encode.** [`encode::to_json`] (or [`encode::CsvWriter`]) writes
//!    the body; [`encode::chunk`] splits a statement for `chunked=true`.
//!
//! What it does not do: read storage, expand `*` and regex field lists
//! (that needs the schema), evaluate WHERE filters, subqueries, math
//! functions, `sample`, `holt_winters` and the technical-analysis
//! functions.

pub mod aggregate;
pub mod encode;
mod error;
mod eval;
pub mod exact;
mod fill;
pub mod math;
pub mod partials;
mod pipeline;
mod shape;
mod transform;
mod value;
mod window;

use std::collections::BTreeMap;

pub use aggregate::{Aggregate, BucketOutput, Partial};
pub use error::{Error, Result};
pub use eval::{evaluate, Emitted, EvalOptions};
pub use fill::fill;
pub use pipeline::{finish, Gathered};
pub use shape::{column_names, only_selector, shape, ShapeOptions};
pub use shardhouse_influxql::Fill;
pub use transform::Transform;
pub use value::{Point, Series, SeriesKey, Value, ValueKey};
pub use window::{time_zone, Interval, Windowing, Zone, MAX_TIME, MIN_TIME};

/// Evaluates one field of one series from its merged partials: the
/// aggregate, then `fill()` (for aggregates InfluxDB fills; `fill` is the
/// statement's, `None` meaning `fill(null)`), then the transformation
/// wrapped around it, if any.
pub fn evaluate_field(
    agg: &Aggregate,
    transform: Option<&Transform>,
    buckets: &BTreeMap<i64, Partial>,
    windowing: &Windowing,
    fill_mode: Option<&Fill>,
    opts: EvalOptions,
) -> Result<Vec<Emitted>> {
    let mut points = evaluate(agg, buckets, windowing, opts)?;
    if agg.fills() {
        let mode = fill_mode.copied().unwrap_or(Fill::Null);
        let is_count = matches!(agg, Aggregate::Count | Aggregate::CountDistinct);
        points = fill(points, &mode, is_count, windowing, opts.ascending);
    }
    match transform {
        Some(t) => t.apply(&points, opts.ascending),
        None => Ok(points),
    }
}
