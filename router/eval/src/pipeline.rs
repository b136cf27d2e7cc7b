//! The last steps of a `SELECT`, once each field's values are gathered:
//! aggregates evaluate their merged partials (with fill and
//! transformation), raw fields order and transform their points, and
//! [`shape`] joins the fields into series. One place for the router's
//! planner, its subqueries and the test planner.

use std::collections::BTreeMap;

use shardhouse_influxql::{Field, SelectStatement};

use crate::aggregate::Aggregate;
use crate::error::Result;
use crate::eval::{Emitted, EvalOptions};
use crate::partials::Groups;
use crate::shape::{column_names, shape, ShapeOptions};
use crate::transform::Transform;
use crate::value::{Series, SeriesKey};
use crate::window::Windowing;

/// One output field's gathered values.
pub enum Gathered {
    /// An aggregate's partials, merged across shards.
    Aggregate {
        agg: Aggregate,
        transform: Option<Transform>,
        groups: Groups,
    },
    /// Raw points per series, in any order.
    Raw {
        transform: Option<Transform>,
        series: BTreeMap<SeriesKey, Vec<Emitted>>,
    },
}

/// Evaluates every field and shapes the statement's series. `fields` are
/// the statement's fields after `*` expansion (for column names).
pub fn finish(
    stmt: &SelectStatement,
    fields: &[Field],
    gathered: Vec<Gathered>,
    windowing: &Windowing,
    opts: EvalOptions,
) -> Result<Vec<Series>> {
    let n = gathered.len();
    let limit_rows = gathered.iter().all(|g| matches!(g, Gathered::Raw { .. }));
    let mut groups: BTreeMap<SeriesKey, Vec<Vec<Emitted>>> = BTreeMap::new();
    let mut widths = Vec::with_capacity(n);
    for (j, g) in gathered.into_iter().enumerate() {
        let per_series = match g {
            Gathered::Aggregate {
                agg,
                transform,
                groups: merged,
            } => {
                widths.push(1 + agg.aux_columns().len());
                let mut out = BTreeMap::new();
                for (key, buckets) in merged {
                    let points = crate::evaluate_field(
                        &agg,
                        transform.as_ref(),
                        &buckets,
                        windowing,
                        stmt.fill.as_ref(),
                        opts,
                    )?;
                    out.insert(key, points);
                }
                out
            }
            Gathered::Raw { transform, series } => {
                widths.push(1);
                let mut out = BTreeMap::new();
                for (key, mut points) in series {
                    points.sort_by_key(|p| p.time);
                    if !opts.ascending {
                        points.reverse();
                    }
                    let points = match &transform {
                        Some(t) => t.apply(&points, opts.ascending)?,
                        None => points,
                    };
                    out.insert(key, points);
                }
                out
            }
        };
        for (key, points) in per_series {
            groups.entry(key).or_insert_with(|| vec![Vec::new(); n])[j] = points;
        }
    }
    let options = ShapeOptions {
        ascending: opts.ascending,
        limit: stmt.limit.unwrap_or(0),
        offset: stmt.offset.unwrap_or(0),
        slimit: stmt.slimit.unwrap_or(0),
        soffset: stmt.soffset.unwrap_or(0),
        limit_rows,
        fill: stmt.fill,
    };
    Ok(shape(&column_names(fields), &widths, groups, &options))
}
