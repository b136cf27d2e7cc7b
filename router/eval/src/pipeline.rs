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
    /// A column of the rows a selector picks (`tx` in `SELECT tx,
    /// max(rx)`): value `index` of the points' [`Point::aux`] of field
    /// `selector` (an `Aggregate` whose points carry those values).
    ///
    /// [`Point::aux`]: crate::Point::aux
    AuxOf { selector: usize, index: usize },
}

/// One field's column count and points per series, in output order.
type Evaluated = (usize, BTreeMap<SeriesKey, Vec<Emitted>>);

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
    let mut evaluated: Vec<Option<Evaluated>> = Vec::new();
    let mut aux_of = Vec::new();
    let mut own_aux = vec![0; n];
    for (j, g) in gathered.into_iter().enumerate() {
        match g {
            Gathered::AuxOf { selector, index } => {
                aux_of.push((j, selector, index));
                evaluated.push(None);
            }
            g => {
                if let Gathered::Aggregate { agg, .. } = &g {
                    own_aux[j] = agg.aux_columns().len();
                }
                evaluated.push(Some(evaluate_gathered(stmt, g, windowing, opts)?));
            }
        }
    }
    // Columns picked with a selector's points, then the selector's points
    // without them.
    for (j, selector, index) in aux_of {
        let column = evaluated
            .get(selector)
            .and_then(Option::as_ref)
            .map(|(_, per_series)| picked_column(per_series, own_aux[selector] + index))
            .unwrap_or_default();
        evaluated[j] = Some((1, column));
    }
    let mut groups: BTreeMap<SeriesKey, Vec<Vec<Emitted>>> = BTreeMap::new();
    let mut widths = Vec::with_capacity(n);
    for (j, field) in evaluated.into_iter().enumerate() {
        let (width, per_series) = field.expect("every field evaluated above");
        widths.push(width);
        for (key, mut points) in per_series {
            for p in &mut points {
                p.aux.truncate(width - 1);
            }
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
) -> Result<Evaluated> {
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
                points.sort_by_key(|p| (p.time, p.series));
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
        // Resolved by `finish` from its selector; never inside arithmetic.
        Gathered::AuxOf { .. } => (1, BTreeMap::new()),
        Gathered::Math { expr, inputs } => {
            let mut evaluated = Vec::with_capacity(inputs.len());
            for input in inputs {
                evaluated.push(evaluate_gathered(stmt, input, windowing, opts)?.1);
            }
            (1, crate::math::combine(&expr, evaluated, opts.ascending))
        }
    })
}

/// Column `at` of the values a selector's points carry, at the points'
/// times (null where a point lacks it: a filled bucket).
fn picked_column(
    per_series: &BTreeMap<SeriesKey, Vec<Emitted>>,
    at: usize,
) -> BTreeMap<SeriesKey, Vec<Emitted>> {
    per_series
        .iter()
        .map(|(key, points)| {
            let column = points
                .iter()
                .map(|p| Emitted::new(p.time, p.aux.get(at).cloned().unwrap_or(crate::Value::Null)))
                .collect();
            (key.clone(), column)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Point, Value};
    use shardhouse_influxql::time::TimeRange;
    use shardhouse_influxql::Statement;

    fn select(q: &str) -> SelectStatement {
        match shardhouse_influxql::parse_statement(q).unwrap() {
            Statement::Select(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn columns_of_the_selected_rows_travel_with_the_selector() {
        // SELECT tx, max(rx): rows (time, rx, tx) = (1, 5, 50), (2, 9, 90).
        let stmt = select("SELECT tx, max(rx) FROM network");
        let agg = Aggregate::Max;
        let mut partial = agg.empty_partial();
        for (t, rx, tx) in [(1, 5, 50), (2, 9, 90)] {
            let p = Point::with_aux(t, Value::Int(rx), vec![Value::Int(tx)]);
            partial.add(&agg, &p, &[]).unwrap();
        }
        let key = SeriesKey::new("network", &[]);
        let groups = Groups::from([(key, BTreeMap::from([(0, partial)]))]);
        let gathered = vec![
            Gathered::AuxOf {
                selector: 1,
                index: 0,
            },
            Gathered::Aggregate {
                agg,
                transform: None,
                groups,
            },
        ];
        let windowing = Windowing::new(None, TimeRange::UNBOUNDED, None);
        let opts = EvalOptions {
            ascending: true,
            point_times: true,
        };
        let out = finish(&stmt, &stmt.fields, gathered, &windowing, opts).unwrap();
        assert_eq!(out[0].columns, ["time", "tx", "max"]);
        assert_eq!(
            out[0].values,
            vec![vec![Value::Time(2), Value::Int(90), Value::Int(9)]]
        );
    }

    #[test]
    fn raw_values_of_two_series_at_one_time_are_two_rows() {
        // InfluxDB's "order desc with sparse data": `used` only in series 1
        // (server2), `free` only in series 0 (server1), both at t=1 and t=2.
        let stmt = select("SELECT used, free FROM mem ORDER BY time DESC");
        let key = SeriesKey::new("mem", &[]);
        let raw = |series: u64, values: &[(i64, i64)]| Gathered::Raw {
            transform: None,
            series: BTreeMap::from([(
                key.clone(),
                values
                    .iter()
                    .map(|(t, v)| Emitted::of_series(*t, Value::Int(*v), series))
                    .collect(),
            )]),
        };
        let gathered = vec![raw(1, &[(1, 3), (2, 4)]), raw(0, &[(1, 1), (2, 2)])];
        let windowing = Windowing::new(None, TimeRange::UNBOUNDED, None);
        let opts = EvalOptions {
            ascending: false,
            point_times: false,
        };
        let out = finish(&stmt, &stmt.fields, gathered, &windowing, opts).unwrap();
        let t = Value::Time;
        let (i, n) = (Value::Int, Value::Null);
        assert_eq!(
            out[0].values,
            vec![
                vec![t(2), i(4), n.clone()],
                vec![t(2), n.clone(), i(2)],
                vec![t(1), i(3), n.clone()],
                vec![t(1), n, i(1)],
            ]
        );
    }
}
