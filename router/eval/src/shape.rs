//! Result shaping: column names, series order, `SLIMIT`/`SOFFSET`,
//! `LIMIT`/`OFFSET`, `ORDER BY time DESC`, and several fields joined into
//! rows by time, as InfluxDB 1.8 emits them.

use std::collections::{BTreeMap, HashMap, HashSet};

use shardhouse_influxql::{Expr, Field, Fill};

use crate::eval::Emitted;
use crate::value::{Series, SeriesKey, Value};

/// InfluxDB 1.8's `ColumnNames`: `time` (or the alias of a `time` field),
/// then each field's alias or generated name (`mean`, `x_y` for `x + y`),
/// with `_1`, `_2`, ... on generated names that collide; `top`/`bottom`
/// tag arguments add their own columns right after the call's.
pub fn column_names(fields: &[Field]) -> Vec<String> {
    let mut time = "time".to_string();
    let mut wanted: Vec<(Option<&str>, String)> = Vec::new();
    for field in fields {
        if let Expr::VarRef(v) = &field.expr {
            if v.name == "time" {
                if let Some(alias) = &field.alias {
                    time = alias.clone();
                }
                continue;
            }
        }
        wanted.push((field.alias.as_deref(), generated_name(&field.expr)));
        if let Expr::Call(call) = &field.expr {
            if matches!(call.name.as_str(), "top" | "bottom") && call.args.len() > 2 {
                for arg in &call.args[1..call.args.len() - 1] {
                    if let Expr::VarRef(v) = arg {
                        wanted.push((None, v.name.clone()));
                    }
                }
            }
        }
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (alias, _) in &wanted {
        if let Some(alias) = alias {
            seen.insert(alias.to_string(), 1);
        }
    }
    let mut columns = vec![time];
    for (alias, name) in wanted {
        if let Some(alias) = alias {
            columns.push(alias.to_string());
            continue;
        }
        let mut name = name;
        if let Some(&taken) = seen.get(&name) {
            let mut count = taken;
            loop {
                let resolved = format!("{name}_{count}");
                if !seen.contains_key(&resolved) {
                    seen.insert(name, count + 1);
                    name = resolved;
                    break;
                }
                count += 1;
            }
        }
        *seen.entry(name.clone()).or_insert(0) += 1;
        columns.push(name);
    }
    columns
}

/// A field's name without an alias: a call's function name, a variable's
/// name, or the names in an arithmetic expression joined by `_`.
fn generated_name(expr: &Expr) -> String {
    fn walk(expr: &Expr, names: &mut Vec<String>) {
        match expr {
            Expr::VarRef(v) => names.push(v.name.clone()),
            Expr::Call(c) => names.push(c.name.clone()),
            Expr::Binary { lhs, rhs, .. } => {
                walk(lhs, names);
                walk(rhs, names);
            }
            _ => {}
        }
    }
    match expr {
        Expr::Call(c) => c.name.clone(),
        Expr::VarRef(v) => v.name.clone(),
        Expr::Binary { .. } => {
            let mut names = Vec::new();
            walk(expr, &mut names);
            names.join("_")
        }
        _ => String::new(),
    }
}

/// Whether the fields hold exactly one distinct call and it is a selector
/// (`first`, `last`, `min`, `max`, `percentile`, `sample`, `top`,
/// `bottom`): then, without `GROUP BY time()`, rows keep the selected
/// point's time instead of the query's start.
pub fn only_selector(fields: &[Field]) -> bool {
    fn calls<'a>(expr: &'a Expr, out: &mut Vec<&'a Expr>) {
        match expr {
            Expr::Call(_) => out.push(expr),
            Expr::Binary { lhs, rhs, .. } => {
                calls(lhs, out);
                calls(rhs, out);
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for field in fields {
        calls(&field.expr, &mut found);
    }
    let distinct: HashSet<String> = found.iter().map(|c| c.to_string()).collect();
    distinct.len() == 1
        && matches!(
            found[0],
            Expr::Call(c) if matches!(
                c.name.as_str(),
                "first" | "last" | "min" | "max" | "percentile" | "sample" | "top" | "bottom"
            )
        )
}

/// How a statement's groups become series.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShapeOptions {
    /// `ORDER BY time DESC` when false (points are already in that order).
    pub ascending: bool,
    /// `LIMIT` / `OFFSET` (0: none), per series.
    pub limit: u64,
    pub offset: u64,
    /// `SLIMIT` / `SOFFSET` (0: none), over series in ascending order.
    /// As in InfluxDB 1.8, `SOFFSET` without `SLIMIT` leaves no series.
    pub slimit: u64,
    pub soffset: u64,
    /// Raw queries (no aggregate) limit rows; aggregate queries limit each
    /// field's points before the fields are joined, as InfluxDB does.
    pub limit_rows: bool,
    /// The statement's `fill()`: decides what a cell holds when its field
    /// has no value at a row's time (the number, the field's previous value
    /// in the series, else null).
    pub fill: Option<Fill>,
}

/// Joins the fields of each group into rows and orders, limits and names
/// the series. `groups` maps each series to one point list per field (in
/// output order); `widths[j]` is how many columns field `j` fills (1, plus
/// `top`/`bottom` tag columns); `columns` comes from [`column_names`].
/// Float NaN becomes null here, as InfluxDB prints it.
pub fn shape(
    columns: &[String],
    widths: &[usize],
    groups: BTreeMap<SeriesKey, Vec<Vec<Emitted>>>,
    opts: &ShapeOptions,
) -> Vec<Series> {
    let mut keys: Vec<(SeriesKey, Vec<Vec<Emitted>>)> = groups.into_iter().collect();
    if opts.slimit != 0 || opts.soffset != 0 {
        let (offset, limit) = (opts.soffset as usize, opts.slimit as usize);
        keys = if offset > keys.len() {
            Vec::new()
        } else {
            let end = (offset + limit).min(keys.len());
            keys.drain(offset..end).collect()
        };
    }
    if !opts.ascending {
        keys.reverse();
    }
    let mut out = Vec::new();
    for (key, mut fields) in keys {
        if !opts.limit_rows {
            for points in &mut fields {
                *points = limited(std::mem::take(points), opts.offset, opts.limit);
            }
        }
        let mut rows = join(&fields, widths, opts);
        if opts.limit_rows {
            rows = limited(rows, opts.offset, opts.limit);
        }
        if rows.is_empty() {
            continue;
        }
        out.push(Series {
            name: key.name,
            tags: key.tags,
            columns: columns.to_vec(),
            values: rows,
            partial: false,
        });
    }
    out
}

fn limited<T>(items: Vec<T>, offset: u64, limit: u64) -> Vec<T> {
    let take = if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    };
    items.into_iter().skip(offset as usize).take(take).collect()
}

/// Rows at every time any field has a point, one point per field per row
/// (a field with two points at one time yields two rows).
fn join(fields: &[Vec<Emitted>], widths: &[usize], opts: &ShapeOptions) -> Vec<Vec<Value>> {
    let mut heads = vec![0usize; fields.len()];
    let total: usize = widths.iter().sum();
    let mut previous = vec![Value::Null; total];
    let default = match opts.fill {
        Some(Fill::Integer(n)) => Some(Value::Int(n)),
        Some(Fill::Float(f)) => Some(Value::Float(f)),
        _ => None,
    };
    let keep_previous = matches!(opts.fill, Some(Fill::Previous));
    let mut rows = Vec::new();
    loop {
        // A row per time and series (raw values of two series at one time
        // are two rows; aggregates are all series 0).
        let keys = fields
            .iter()
            .zip(&heads)
            .filter_map(|(points, &h)| points.get(h).map(|p| (p.time, p.series)));
        let next = if opts.ascending {
            keys.min()
        } else {
            keys.max()
        };
        let Some((time, series)) = next else { break };
        let mut row = Vec::with_capacity(total + 1);
        row.push(Value::Time(time));
        let mut column = 0;
        for (j, points) in fields.iter().enumerate() {
            let width = widths.get(j).copied().unwrap_or(1);
            match points.get(heads[j]) {
                Some(p) if p.time == time && p.series == series => {
                    heads[j] += 1;
                    let cells = std::iter::once(&p.value).chain(p.aux.iter());
                    let cells = cells.chain(std::iter::repeat(&Value::Null)).take(width);
                    for (k, cell) in cells.enumerate() {
                        let cell = match cell {
                            Value::Float(f) if f.is_nan() => Value::Null,
                            other => other.clone(),
                        };
                        previous[column + k] = cell.clone();
                        row.push(cell);
                    }
                }
                _ => {
                    for k in 0..width {
                        row.push(match (&default, keep_previous) {
                            (Some(v), _) => v.clone(),
                            (None, true) => previous[column + k].clone(),
                            (None, false) => Value::Null,
                        });
                    }
                }
            }
            column += width;
        }
        rows.push(row);
    }
    rows
}
