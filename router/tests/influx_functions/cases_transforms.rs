//! Transformations over raw fields and over aggregates (with the bucket
//! InfluxDB reads before the range), in both time orders.

use crate::cases::{aggregate, cnt, col, group, join, points_series, sel, w, Col, Ctx, Grid};
use crate::oracle::{self as f, Fill, Vals, V};
use crate::{Oracle, MIN, S};

type Tf = Box<dyn Fn(&Vals) -> Vals>;

fn tf(name: &str, unit: i64, n: usize, ascending: bool) -> Tf {
    match name {
        "derivative" => Box::new(move |v| f::derivative(v, unit, false, ascending)),
        "non_negative_derivative" => Box::new(move |v| f::derivative(v, unit, true, ascending)),
        "difference" => Box::new(|v| f::difference(v, false)),
        "non_negative_difference" => Box::new(|v| f::difference(v, true)),
        "moving_average" => Box::new(move |v| f::moving_average(v, n)),
        "cumulative_sum" => Box::new(f::cumulative_sum),
        "elapsed" => Box::new(move |v| f::elapsed(v, unit)),
        other => panic!("no transformation {other}"),
    }
}

pub async fn run(o: &mut Oracle, c: &Ctx<'_>) {
    let r = c.range();
    let all = c.select("sensor", |_| true);

    // Over raw fields, every series, one statement per transformation.
    let raw: [(&str, &str, i64, usize); 9] = [
        ("derivative(g, 1m)", "g", MIN, 0),
        ("derivative(f)", "f", S, 0),
        ("non_negative_derivative(c, 1s)", "c", S, 0),
        ("difference(i)", "i", 0, 0),
        ("non_negative_difference(c)", "c", 0, 0),
        ("moving_average(g, 4)", "g", 0, 4),
        ("cumulative_sum(i)", "i", 0, 0),
        ("elapsed(g, 1s)", "g", S, 0),
        ("elapsed(f)", "f", 1, 0),
    ];
    for (call, field, unit, n) in raw {
        let name = &call[..call.find('(').unwrap()];
        let t = tf(name, unit, n, true);
        let q = format!("SELECT {call} FROM sensor WHERE {r} GROUP BY *");
        let per = group(&all, &["host", "zone"])
            .into_iter()
            .map(|(key, pts)| (key, t(&f::values(&pts, field))))
            .collect();
        o.case(call, &q, points_series("sensor", per), None).await;
    }

    // Several in one statement, joined by time.
    let q = format!(
        "SELECT difference(c), cumulative_sum(g), derivative(i, 10s) FROM sensor \
         WHERE {r} AND host = 'h4' GROUP BY zone"
    );
    let want = group(&c.select("sensor", |p| p.tag("host") == "h4"), &["zone"])
        .into_iter()
        .filter_map(|(key, pts)| {
            join(
                "sensor",
                key,
                vec![
                    f::difference(&f::values(&pts, "c"), false),
                    f::cumulative_sum(&f::values(&pts, "g")),
                    f::derivative(&f::values(&pts, "i"), 10 * S, false, true),
                ],
            )
        })
        .collect();
    o.case("several transformations", &q, want, None).await;

    // ORDER BY time DESC: points fed newest first (InfluxDB negates the
    // elapsed time of derivatives).
    let h5 = c.select("sensor", |p| p.tag("host") == "h5");
    for (call, field, unit) in [
        ("derivative(g, 1s)", "g", S),
        ("difference(i)", "i", 0),
        ("cumulative_sum(c)", "c", 0),
    ] {
        let name = &call[..call.find('(').unwrap()];
        let t = tf(name, unit, 0, false);
        let q = format!(
            "SELECT {call} FROM sensor WHERE {r} AND host = 'h5' GROUP BY zone ORDER BY time DESC"
        );
        let per = group(&h5, &["zone"])
            .into_iter()
            .map(|(key, pts)| {
                let mut v = f::values(&pts, field);
                v.reverse();
                (key, t(&v))
            })
            .collect();
        // DESC reverses the series order too.
        let mut want = points_series("sensor", per);
        want.reverse();
        o.case("transformation DESC", &q, want, None).await;
    }

    // Over aggregates per 10-minute bucket: the bucket before the range
    // feeds the first one (one interval back; none for cumulative_sum).
    type Agg<'a> = fn(&'a str) -> Col<'a>;
    let nested: [(&str, &str, Agg, i64, usize, &str); 8] = [
        (
            "derivative(mean(f), 1m)",
            "derivative",
            |x| col(x, f::mean),
            MIN,
            0,
            "f",
        ),
        (
            "non_negative_derivative(max(c))",
            "non_negative_derivative",
            |x| sel(x, f::max),
            10 * MIN,
            0,
            "c",
        ),
        (
            "difference(sum(i))",
            "difference",
            |x| col(x, f::sum),
            0,
            0,
            "i",
        ),
        (
            "non_negative_difference(last(c))",
            "non_negative_difference",
            |x| sel(x, f::last),
            0,
            0,
            "c",
        ),
        (
            "moving_average(mean(g), 3)",
            "moving_average",
            |x| col(x, f::mean),
            0,
            3,
            "g",
        ),
        ("cumulative_sum(count(f))", "cumulative_sum", cnt, 0, 0, "f"),
        (
            "elapsed(mean(f), 1m)",
            "elapsed",
            |x| col(x, f::mean),
            MIN,
            0,
            "f",
        ),
        (
            "derivative(median(g))",
            "derivative",
            |x| col(x, f::median),
            10 * MIN,
            0,
            "g",
        ),
    ];
    for (fill, text) in [(Fill::Null, ""), (Fill::Number(0.0), " fill(0)")] {
        for (call, name, agg, unit, n, field) in nested {
            let q = format!("SELECT {call} FROM sensor WHERE {r} GROUP BY time(10m), host{text}");
            let back = if name == "cumulative_sum" {
                0
            } else {
                10 * MIN
            };
            let pts = c.select_in("sensor", c.qs - back, c.qe, |_| true);
            let grid = Grid {
                win: Some(w(10 * MIN)),
                from: c.qs - back,
                to: c.qe,
                fill,
                desc: false,
            };
            let t = tf(name, unit, n, true);
            let per = aggregate("sensor", &pts, &["host"], grid, &[agg(field)])
                .into_iter()
                .map(|s| {
                    let v: Vals = s
                        .rows
                        .iter()
                        .filter_map(|row| match (&row[0], &row[1]) {
                            (Some(V::I(t)), Some(x)) => Some((*t, x.clone())),
                            _ => None,
                        })
                        .collect();
                    (s.tags, t(&v))
                })
                .collect();
            o.case(
                &format!("{call}{text}"),
                &q,
                points_series("sensor", per),
                None,
            )
            .await;
        }
    }
}
