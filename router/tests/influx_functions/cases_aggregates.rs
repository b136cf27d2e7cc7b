//! Aggregates and selectors, per bucket and series, with every fill.

use crate::cases::{
    aggregate, cnt, col, count_distinct, group, pct, points_series, sel, w, Col, Ctx, Grid,
};
use crate::oracle::{self as f, Fill, Win, V};
use crate::{Oracle, Ser, HOUR, MIN};

pub async fn run(o: &mut Oracle, c: &Ctx<'_>) {
    let r = c.range();
    let all = c.select("sensor", |_| true);
    let grid = |win: Option<Win>, fill: Fill| Grid {
        win,
        from: c.qs,
        to: c.qe,
        fill,
        desc: false,
    };

    // Every aggregate of the points path, per series (GROUP BY *), 20m.
    let cols = [
        cnt("f"),
        col("g", f::sum),
        col("f", f::mean),
        col("f", f::median),
        col("i", f::mode),
        col("f", f::spread),
        col("f", f::stddev),
        pct("f", 5.0),
        pct("f", 50.0),
        pct("f", 99.9),
        count_distinct("i"),
        col("i", f::sum),
        col("i", f::mean),
        sel("i", f::min),
        sel("g", f::max),
        sel("c", f::first),
        sel("c", f::last),
    ];
    let q = format!(
        "SELECT count(f), sum(g), mean(f), median(f), mode(i), spread(f), stddev(f), \
         percentile(f, 5), percentile(f, 50), percentile(f, 99.9), count(distinct(i)), sum(i), \
         mean(i), min(i), max(g), first(c), last(c) FROM sensor WHERE {r} \
         GROUP BY time(20m), * fill(none)"
    );
    let want = aggregate(
        "sensor",
        &all,
        &["host", "zone"],
        grid(Some(w(20 * MIN)), Fill::None),
        &cols,
    );
    o.case("aggregates per series and 20m", &q, want, None)
        .await;

    // What the shards push down, per host (two series each), 20m.
    let cols = [
        cnt("i"),
        col("i", f::sum),
        col("i", f::mean),
        sel("f", f::min),
        sel("f", f::max),
        sel("g", f::first),
        sel("g", f::last),
        col("i", f::spread),
        col("g", f::sum),
        col("g", f::mean),
        col("c", f::spread),
    ];
    let q = format!(
        "SELECT count(i), sum(i), mean(i), min(f), max(f), first(g), last(g), spread(i), \
         sum(g), mean(g), spread(c) FROM sensor WHERE {r} GROUP BY time(20m), host fill(none)"
    );
    let want = aggregate(
        "sensor",
        &all,
        &["host"],
        grid(Some(w(20 * MIN)), Fill::None),
        &cols,
    );
    o.case("pushed-down aggregates per host", &q, want, None)
        .await;

    // Integers per zone over the whole range (one row at the range start).
    let cols = [
        col("i", f::median),
        col("i", f::mode),
        col("i", f::spread),
        col("i", f::stddev),
        pct("i", 75.0),
        sel("c", f::max),
        sel("c", f::min),
        col("c", f::sum),
        col("c", f::mean),
    ];
    let q = format!(
        "SELECT median(i), mode(i), spread(i), stddev(i), percentile(i, 75), max(c), min(c), \
         sum(c), mean(c) FROM sensor WHERE {r} GROUP BY zone"
    );
    let want = aggregate("sensor", &all, &["zone"], grid(None, Fill::Null), &cols);
    o.case("integer aggregates per zone", &q, want, None).await;

    // Strings and booleans.
    let cols = [
        cnt("s"),
        col("s", f::mode),
        sel("s", f::first),
        sel("s", f::last),
        cnt("b"),
        col("b", f::mode),
        sel("b", f::first),
        sel("b", f::last),
        count_distinct("s"),
    ];
    let q = format!(
        "SELECT count(s), mode(s), first(s), last(s), count(b), mode(b), first(b), last(b), \
         count(distinct(s)) FROM sensor WHERE {r} GROUP BY time(1h), host fill(none)"
    );
    let want = aggregate(
        "sensor",
        &all,
        &["host"],
        grid(Some(w(HOUR)), Fill::None),
        &cols,
    );
    o.case("strings and booleans per host and hour", &q, want, None)
        .await;

    // distinct(): several rows per bucket, all at the bucket's time.
    for (field, by, every) in [("s", "zone", 30 * MIN), ("i", "host", HOUR)] {
        let q = format!(
            "SELECT distinct({field}) FROM sensor WHERE {r} GROUP BY time({}m), {by} fill(none)",
            every / MIN
        );
        let win = w(every);
        let per: Vec<_> = group(&all, &[by])
            .into_iter()
            .map(|(key, pts)| {
                let mut rows = Vec::new();
                for b in win.all(c.qs, c.qe) {
                    let inside: Vec<_> = pts
                        .iter()
                        .copied()
                        .filter(|p| win.start(p.time) == b)
                        .collect();
                    for v in f::distinct(&f::values(&inside, field)) {
                        rows.push((b, v));
                    }
                }
                (key, rows)
            })
            .collect();
        o.case(
            "distinct per bucket",
            &q,
            points_series("sensor", per),
            None,
        )
        .await;
    }

    // A selector alone keeps its point's time; with GROUP BY time() the
    // bucket's.
    type Pick = fn(&f::Vals) -> Option<(i64, V)>;
    let alone: [(&str, &str, Pick, &str); 5] = [
        ("max", "f", f::max, "host"),
        ("min", "i", f::min, "zone"),
        ("first", "f", f::first, "host, zone"),
        ("last", "s", f::last, "host"),
        ("max", "c", f::max, "*"),
    ];
    for (name, field, pick, by) in alone {
        let q = format!("SELECT {name}({field}) FROM sensor WHERE {r} GROUP BY {by}");
        let keys: &[&str] = match by {
            "host" => &["host"],
            "zone" => &["zone"],
            _ => &["host", "zone"],
        };
        let per = group(&all, keys)
            .into_iter()
            .map(|(key, pts)| (key, pick(&f::values(&pts, field)).into_iter().collect()))
            .collect();
        o.case(
            "selector with its own time",
            &q,
            points_series("sensor", per),
            None,
        )
        .await;
    }
    let q = format!("SELECT percentile(g, 30) FROM sensor WHERE {r} GROUP BY zone");
    let per = group(&all, &["zone"])
        .into_iter()
        .map(|(key, pts)| {
            let v = f::percentile(&f::values(&pts, "g"), 30.0);
            (key, v.into_iter().collect())
        })
        .collect();
    o.case(
        "percentile alone keeps its time",
        &q,
        points_series("sensor", per),
        None,
    )
    .await;
    let h2 = c.select("sensor", |p| p.tag("host") == "h2");
    let q = format!("SELECT max(f) FROM sensor WHERE {r} AND host = 'h2' GROUP BY time(30m)");
    let want = aggregate(
        "sensor",
        &h2,
        &[],
        grid(Some(w(30 * MIN)), Fill::Null),
        &[sel("f", f::max)],
    );
    o.case("selector per bucket at the bucket time", &q, want, None)
        .await;

    // top() and bottom(), with and without a tag argument.
    type Top<'a> = (&'a str, &'a str, usize, bool, &'a [&'a str], &'a str);
    let tops: [Top; 3] = [
        ("top(f, 3)", "f", 3, true, &["host"], "GROUP BY host"),
        ("bottom(i, 4)", "i", 4, false, &[], "AND zone = 'z1'"),
        ("top(c, 2)", "c", 2, true, &["host", "zone"], "GROUP BY *"),
    ];
    for (call, field, n, largest, keys, tail) in tops {
        let q = format!("SELECT {call} FROM sensor WHERE {r} {tail}");
        let pts = if tail.contains("z1") {
            c.select("sensor", |p| p.tag("zone") == "z1")
        } else {
            all.clone()
        };
        let per = group(&pts, keys)
            .into_iter()
            .map(|(key, ps)| (key, f::top(&f::values(&ps, field), n, largest)))
            .collect();
        o.case("top/bottom", &q, points_series("sensor", per), None)
            .await;
    }
    for (call, field, tag, n, largest, every) in [
        ("top(g, host, 3)", "g", "host", 3, true, None),
        ("bottom(f, zone, 2)", "f", "zone", 2, false, Some(HOUR)),
    ] {
        let q = match every {
            None => format!("SELECT {call} FROM sensor WHERE {r}"),
            Some(e) => format!(
                "SELECT {call} FROM sensor WHERE {r} GROUP BY time({}m)",
                e / MIN
            ),
        };
        let buckets = match every {
            None => vec![(c.qs, c.qe)],
            Some(e) => w(e)
                .all(c.qs, c.qe)
                .into_iter()
                .map(|b| (b, b + e))
                .collect(),
        };
        let mut rows = Vec::new();
        for (b0, b1) in buckets {
            let tagged: Vec<(i64, V, String)> = all
                .iter()
                .filter(|p| p.time >= b0 && p.time < b1)
                .filter_map(|p| {
                    p.fields
                        .get(field)
                        .map(|v| (p.time, v.clone(), p.tag(tag).to_string()))
                })
                .collect();
            for (t, v, tv) in f::top_by_tag(&tagged, n, largest) {
                rows.push(vec![Some(V::I(t)), Some(v), Some(V::S(tv))]);
            }
        }
        let name = if largest { "top" } else { "bottom" };
        let want = vec![Ser {
            name: "sensor".into(),
            tags: vec![],
            rows,
        }];
        o.case(
            "top/bottom with a tag",
            &q,
            want,
            Some(&["time", name, tag]),
        )
        .await;
    }

    // Every fill over a series with gaps, buckets offset by 3 minutes.
    let h3 = c.select("sensor", |p| p.tag("host") == "h3");
    for (fill, text) in [
        (Fill::Null, "null"),
        (Fill::None, "none"),
        (Fill::Previous, "previous"),
        (Fill::Linear, "linear"),
        (Fill::Number(-1.0), "-1"),
        (Fill::Number(2.5), "2.5"),
    ] {
        let q = format!(
            "SELECT mean(f), count(f), max(i), sum(c), median(g) FROM sensor \
             WHERE {r} AND host = 'h3' GROUP BY time(10m, 3m), zone fill({text})"
        );
        let cols: [Col; 5] = [
            col("f", f::mean),
            cnt("f"),
            sel("i", f::max),
            col("c", f::sum),
            col("g", f::median),
        ];
        let win = Win {
            every: 10 * MIN,
            offset: 3 * MIN,
        };
        let want = aggregate("sensor", &h3, &["zone"], grid(Some(win), fill), &cols);
        o.case(&format!("fill({text})"), &q, want, None).await;
    }

    // ORDER BY time DESC with fill(previous), per zone.
    let q = format!(
        "SELECT mean(g), max(i), count(b) FROM sensor WHERE {r} \
         GROUP BY time(30m), zone fill(previous) ORDER BY time DESC"
    );
    let g = Grid {
        desc: true,
        ..grid(Some(w(30 * MIN)), Fill::Previous)
    };
    let want = aggregate(
        "sensor",
        &all,
        &["zone"],
        g,
        &[col("g", f::mean), sel("i", f::max), cnt("b")],
    );
    o.case("ORDER BY time DESC", &q, want, None).await;

    // LIMIT / OFFSET per series, SLIMIT / SOFFSET over series.
    let q = format!(
        "SELECT mean(f) FROM sensor WHERE {r} GROUP BY time(30m), * fill(none) \
         LIMIT 3 OFFSET 2 SLIMIT 4 SOFFSET 3"
    );
    let mut want = aggregate(
        "sensor",
        &all,
        &["host", "zone"],
        grid(Some(w(30 * MIN)), Fill::None),
        &[col("f", f::mean)],
    );
    want = want.into_iter().skip(3).take(4).collect();
    for s in &mut want {
        s.rows = s.rows.iter().skip(2).take(3).cloned().collect();
    }
    o.case("LIMIT OFFSET SLIMIT SOFFSET", &q, want, None).await;

    // integral(), whole range (time 0) and per bucket.
    let q = format!("SELECT integral(f) FROM sensor WHERE {r} GROUP BY host, zone");
    let per = group(&all, &["host", "zone"])
        .into_iter()
        .map(|(key, pts)| {
            let v = f::integral(&f::values(&pts, "f"), crate::S, None);
            (key, v.into_iter().map(|(t, x)| (t, V::F(x))).collect())
        })
        .collect();
    o.case("integral", &q, points_series("sensor", per), None)
        .await;
    let q = format!("SELECT integral(g, 1m) FROM sensor WHERE {r} GROUP BY time(30m), host");
    let per = group(&all, &["host"])
        .into_iter()
        .map(|(key, pts)| {
            let v = f::integral(&f::values(&pts, "g"), MIN, Some(w(30 * MIN)));
            (key, v.into_iter().map(|(t, x)| (t, V::F(x))).collect())
        })
        .collect();
    o.case(
        "integral per bucket",
        &q,
        points_series("sensor", per),
        None,
    )
    .await;
}
