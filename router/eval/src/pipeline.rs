//! The last steps of a `SELECT`, once each field's values are gathered:
//! aggregates evaluate their merged partials (with fill and
//! transformation), raw fields order and transform their points, and
//! [`shape`] joins the fields into series. One place for the router's
//! planner, its subqueries and the test planner.

use std::collections::BTreeMap;

use shardhouse_influxql::{Expr, Field, SelectStatement};

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
    /// Arithmetic on calls (`max(v) - min(v)`): `inputs` are the
    /// expression's calls in pre-order, each evaluated on its own, then
    /// combined row by row ([`crate::math::combine`]).
    Math { expr: Expr, inputs: Vec<Gathered> },
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
        let (width, per_series) = evaluate_gathered(stmt, g, windowing, opts)?;
        widths.push(width);
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

/// One field's points per series, in output order, and how many columns
/// it fills.
fn evaluate_gathered(
    stmt: &SelectStatement,
    gathered: Gathered,
    windowing: &Windowing,
    opts: EvalOptions,
) -> Result<(usize, BTreeMap<SeriesKey, Vec<Emitted>>)> {
    Ok(match gathered {
        Gathered::Aggregate {
            agg,
            transform,
            groups: merged,
        } => {
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
            (1 + agg.aux_columns().len(), out)
        }
        Gathered::Raw { transform, series } => {
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
            (1, out)
        }
        Gathered::Math { expr, inputs } => {
            let mut evaluated = Vec::with_capacity(inputs.len());
            for input in inputs {
                evaluated.push(evaluate_gathered(stmt, input, windowing, opts)?.1);
            }
            (1, crate::math::combine(&expr, evaluated, opts.ascending))
        }
    })
}
