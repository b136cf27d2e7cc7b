//! The statements and, for each, its expected answer built from the
//! written points with the plain evaluation (oracle.rs).

use std::collections::BTreeMap;

use crate::oracle::{self, Fill, Pt, Vals, Win, V};
use crate::{Oracle, Ser};

pub struct Ctx<'a> {
    pub points: &'a [Pt],
    /// The statements' usual range `[qs, qe)`, inside the data.
    pub qs: i64,
    pub qe: i64,
    /// The first written minute.
    pub start: i64,
}

pub type Key = Vec<(String, String)>;

impl Ctx<'_> {
    pub fn range(&self) -> String {
        format!("time >= {} AND time < {}", self.qs, self.qe)
    }

    /// Points of `measurement` in `[qs, qe)` that pass `keep`.
    pub fn select(&self, measurement: &str, keep: impl Fn(&Pt) -> bool) -> Vec<&Pt> {
        self.select_in(measurement, self.qs, self.qe, keep)
    }

    pub fn select_in(
        &self,
        measurement: &str,
        from: i64,
        to: i64,
        keep: impl Fn(&Pt) -> bool,
    ) -> Vec<&Pt> {
        let mut out: Vec<&Pt> = self
            .points
            .iter()
            .filter(|p| p.measurement == measurement && p.time >= from && p.time < to && keep(p))
            .collect();
        out.sort_by_key(|p| p.time);
        out
    }
}

/// Groups points by the values of the tag keys `by` (sorted as InfluxDB
/// orders series).
pub fn group<'a>(points: &[&'a Pt], by: &[&str]) -> BTreeMap<Key, Vec<&'a Pt>> {
    let mut out: BTreeMap<Key, Vec<&Pt>> = BTreeMap::new();
    let mut by: Vec<&str> = by.to_vec();
    by.sort();
    for p in points {
        let key = by
            .iter()
            .map(|k| (k.to_string(), p.tag(k).to_string()))
            .collect();
        out.entry(key).or_default().push(p);
    }
    out
}

/// One aggregated column: the value of a bucket's points.
/// A bucket's points to one output value.
pub type BucketFn<'a> = Box<dyn Fn(&[&Pt]) -> Option<V> + 'a>;
/// A point to one output value.
pub type PointFn<'a> = Box<dyn Fn(&Pt) -> Option<V> + 'a>;

pub struct Col<'a> {
    pub eval: BucketFn<'a>,
    /// `count()`: `fill(null)` gives 0.
    pub count: bool,
}

pub fn col<'a>(field: &'a str, agg: fn(&Vals) -> Option<V>) -> Col<'a> {
    Col {
        eval: Box::new(move |pts| agg(&oracle::values(pts, field))),
        count: false,
    }
}

/// `count(field)`.
pub fn cnt(field: &str) -> Col<'_> {
    Col {
        count: true,
        ..col(field, oracle::count)
    }
}

/// A selector's value (its time dropped: several calls share the bucket's).
pub fn sel<'a>(field: &'a str, agg: fn(&Vals) -> Option<(i64, V)>) -> Col<'a> {
    Col {
        eval: Box::new(move |pts| agg(&oracle::values(pts, field)).map(|(_, v)| v)),
        count: false,
    }
}

pub fn pct(field: &str, p: f64) -> Col<'_> {
    Col {
        eval: Box::new(move |pts| oracle::percentile(&oracle::values(pts, field), p).map(|x| x.1)),
        count: false,
    }
}

pub fn count_distinct(field: &str) -> Col<'_> {
    Col {
        eval: Box::new(move |pts| {
            let d = oracle::distinct(&oracle::values(pts, field));
            (!d.is_empty()).then_some(V::I(d.len() as i64))
        }),
        count: true,
    }
}

/// How an aggregate statement buckets: `GROUP BY time(win)` over
/// `[from, to)`, or one bucket reported at `from`.
#[derive(Clone, Copy)]
pub struct Grid {
    pub win: Option<Win>,
    pub from: i64,
    pub to: i64,
    pub fill: Fill,
    pub desc: bool,
}

/// The series of an aggregate statement over `points` (one measurement).
pub fn aggregate(name: &str, points: &[&Pt], by: &[&str], grid: Grid, cols: &[Col]) -> Vec<Ser> {
    let mut out = Vec::new();
    for (key, pts) in group(points, by) {
        let mut rows: BTreeMap<i64, Vec<Option<V>>> = BTreeMap::new();
        match grid.win {
            Some(w) => {
                let buckets = w.all(grid.from, grid.to);
                let mut per: BTreeMap<i64, Vec<&Pt>> = BTreeMap::new();
                for p in &pts {
                    per.entry(w.start(p.time)).or_default().push(p);
                }
                let mut any = false;
                for (i, c) in cols.iter().enumerate() {
                    let real: BTreeMap<i64, V> = per
                        .iter()
                        .filter_map(|(b, ps)| (c.eval)(ps).map(|v| (*b, v)))
                        .collect();
                    any |= !real.is_empty();
                    let mode = match grid.fill {
                        Fill::Null if c.count => Fill::Number(0.0),
                        m => m,
                    };
                    for (t, v) in oracle::fill(&buckets, &real, mode) {
                        rows.entry(t).or_insert_with(|| vec![None; cols.len()])[i] = v;
                    }
                }
                if !any {
                    continue;
                }
            }
            None => {
                let row: Vec<Option<V>> = cols.iter().map(|c| (c.eval)(&pts)).collect();
                if row.iter().all(Option::is_none) {
                    continue;
                }
                rows.insert(grid.from, row);
            }
        }
        out.push(series(name, key, rows, grid.desc));
    }
    // ORDER BY time DESC reverses the series order too (InfluxDB's
    // sorted merge compares names and tags in the same direction).
    if grid.desc {
        out.reverse();
    }
    out
}

pub fn series(name: &str, tags: Key, rows: BTreeMap<i64, Vec<Option<V>>>, desc: bool) -> Ser {
    let mut rows: Vec<Vec<Option<V>>> = rows
        .into_iter()
        .map(|(t, cells)| {
            let mut r = vec![Some(V::I(t))];
            r.extend(cells);
            r
        })
        .collect();
    if desc {
        rows.reverse();
    }
    Ser {
        name: name.into(),
        tags,
        rows,
    }
}

/// A raw column: a field, a tag or an expression over a point.
pub enum Raw<'a> {
    Field(&'a str),
    Tag(&'a str),
    Expr(PointFn<'a>),
}

/// The series of a raw `SELECT` (a row per point with any field value),
/// `LIMIT`/`OFFSET` per series.
pub fn raw(
    name: &str,
    points: &[&Pt],
    by: &[&str],
    cols: &[Raw],
    desc: bool,
    limit_offset: (usize, usize),
) -> Vec<Ser> {
    let mut out = Vec::new();
    for (key, pts) in group(points, by) {
        let mut rows = Vec::new();
        for p in pts {
            let cells: Vec<Option<V>> = cols
                .iter()
                .map(|c| match c {
                    Raw::Field(f) => p.fields.get(f).cloned(),
                    Raw::Tag(t) => Some(V::S(p.tag(t).to_string())),
                    Raw::Expr(e) => e(p),
                })
                .collect();
            let has_field = cols
                .iter()
                .zip(&cells)
                .any(|(c, v)| !matches!(c, Raw::Tag(_)) && v.is_some());
            if has_field {
                let mut r = vec![Some(V::I(p.time))];
                r.extend(cells);
                rows.push(r);
            }
        }
        if desc {
            rows.reverse();
        }
        let (limit, offset) = limit_offset;
        let rows: Vec<_> = rows.into_iter().skip(offset).take(limit).collect();
        if !rows.is_empty() {
            out.push(Ser {
                name: name.into(),
                tags: key,
                rows,
            });
        }
    }
    out
}

/// Series from per-group output points `(time, value)` of one column.
pub fn points_series(name: &str, per_group: Vec<(Key, Vals)>) -> Vec<Ser> {
    per_group
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(tags, v)| Ser {
            name: name.into(),
            tags,
            rows: v
                .into_iter()
                .map(|(t, x)| vec![Some(V::I(t)), Some(x)])
                .collect(),
        })
        .collect()
}

/// Several columns of output points joined into rows by time.
pub fn join(name: &str, tags: Key, columns: Vec<Vals>) -> Option<Ser> {
    let mut rows: BTreeMap<i64, Vec<Option<V>>> = BTreeMap::new();
    let n = columns.len();
    for (i, c) in columns.into_iter().enumerate() {
        for (t, v) in c {
            rows.entry(t).or_insert_with(|| vec![None; n])[i] = Some(v);
        }
    }
    (!rows.is_empty()).then(|| series(name, tags, rows, false))
}

pub fn w(every: i64) -> Win {
    Win { every, offset: 0 }
}

pub async fn run_all(o: &mut Oracle, c: &Ctx<'_>) {
    crate::cases_aggregates::run(o, c).await;
    crate::cases_transforms::run(o, c).await;
    crate::cases_where::run(o, c).await;
}
