//! WHERE forms, raw reads (fields, tags, `*`, arithmetic), several
//! measurements, relative times and `tz()`.

use crate::cases::{aggregate, cnt, col, raw, sel, w, Ctx, Grid, Raw};
use crate::oracle::{self as f, Fill, Pt, Win, V};
use crate::{Oracle, HOUR, MIN, S};

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` of Unix nanoseconds (proleptic
/// Gregorian, days to civil date).
fn rfc3339(ns: i64) -> String {
    let (secs, nanos) = (ns.div_euclid(S), ns.rem_euclid(S));
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

fn fv(p: &Pt, k: &str) -> Option<f64> {
    p.fields.get(k).map(V::f64)
}

fn iv(p: &Pt, k: &str) -> i64 {
    match p.fields.get(k) {
        Some(V::I(i)) => *i,
        other => panic!("{k} is {other:?}"),
    }
}

pub async fn run(o: &mut Oracle, c: &Ctx<'_>) {
    let r = c.range();
    let all = c.select("sensor", |_| true);
    let none = (usize::MAX, 0);

    // Tag =, !=, =~, !~, field conditions, AND / OR / parentheses; times as
    // RFC3339 and as epoch with units.
    let q = format!(
        "SELECT f, i FROM sensor WHERE host != 'h1' AND zone =~ /z[01]/ AND i > 5 \
         AND time >= '{}' AND time < '{}'",
        rfc3339(c.qs),
        rfc3339(c.qe)
    );
    let pts = c.select("sensor", |p| {
        p.tag("host") != "h1" && ["z0", "z1"].contains(&p.tag("zone")) && iv(p, "i") > 5
    });
    let want = raw(
        "sensor",
        &pts,
        &[],
        &[Raw::Field("f"), Raw::Field("i")],
        false,
        none,
    );
    o.case("tags != =~, field >, RFC3339", &q, want, None).await;

    let (qs_ms, qe_s) = (c.qs / 1_000_000, c.qe / S);
    let q = format!(
        "SELECT g, s FROM sensor WHERE (host = 'h0' OR host = 'h4') AND zone !~ /^z2$/ \
         AND (f < 20 OR b = true) AND time >= {qs_ms}ms AND time < {qe_s}s"
    );
    let pts = c.select_in("sensor", qs_ms * 1_000_000, qe_s * S, |p| {
        ["h0", "h4"].contains(&p.tag("host"))
            && p.tag("zone") != "z2"
            && (fv(p, "f").is_some_and(|x| x < 20.0) || p.fields.get("b") == Some(&V::B(true)))
    });
    let want = raw(
        "sensor",
        &pts,
        &[],
        &[Raw::Field("g"), Raw::Field("s")],
        false,
        none,
    );
    o.case("OR and parentheses, epoch ms and s", &q, want, None)
        .await;

    let q = format!(
        "SELECT c FROM sensor WHERE ((i >= -3 AND i <= 4) OR c > 900) AND s = 'beta' \
         AND b = false AND {r} GROUP BY host"
    );
    let pts = c.select("sensor", |p| {
        let i = iv(p, "i");
        ((-3..=4).contains(&i) || iv(p, "c") > 900)
            && p.fields.get("s") == Some(&V::S("beta".into()))
            && p.fields.get("b") == Some(&V::B(false))
    });
    let want = raw("sensor", &pts, &["host"], &[Raw::Field("c")], false, none);
    o.case("string and boolean conditions", &q, want, None)
        .await;

    // now() - Nd: the three-day-old points are inside 5d, outside 1d.
    for days in [1, 5] {
        let q = format!(
            "SELECT count(g), sum(i) FROM sensor WHERE time > now() - {days}d GROUP BY host"
        );
        let from = crate::support::now_ns() - days * 24 * HOUR;
        let pts: Vec<&Pt> = c
            .points
            .iter()
            .filter(|p| p.measurement == "sensor" && p.time > from)
            .collect();
        let grid = Grid {
            win: None,
            from: 0,
            to: 0,
            fill: Fill::Null,
            desc: false,
        };
        let mut want = aggregate(
            "sensor",
            &pts,
            &["host"],
            grid,
            &[cnt("g"), col("i", f::sum)],
        );
        // No GROUP BY time(): the row's time is the range's start, which
        // moves with now(); take it from the answer, compare the values.
        let got = o.result(&q).await;
        if let Ok(got) = &got {
            let series = got["series"].as_array().cloned().unwrap_or_default();
            for (s, g) in want.iter_mut().zip(series) {
                if let Some(t) = g["values"][0][0].as_i64() {
                    s.rows[0][0] = Some(V::I(t));
                }
            }
        }
        o.check(&format!("now() - {days}d"), &q, got, want, None);
    }

    // Raw reads: ORDER BY time DESC with LIMIT / OFFSET, tags as columns,
    // `*`, a field regex, SLIMIT over raw series.
    let h4 = c.select("sensor", |p| p.tag("host") == "h4");
    let q = format!(
        "SELECT f, i FROM sensor WHERE {r} AND host = 'h4' ORDER BY time DESC LIMIT 20 OFFSET 5"
    );
    let want = raw(
        "sensor",
        &h4,
        &[],
        &[Raw::Field("f"), Raw::Field("i")],
        true,
        (20, 5),
    );
    o.case("raw DESC LIMIT OFFSET", &q, want, None).await;

    let pts = c.select("sensor", |p| iv(p, "i") > 20);
    let q = format!("SELECT f, host, zone FROM sensor WHERE {r} AND i > 20");
    let cols = [Raw::Field("f"), Raw::Tag("host"), Raw::Tag("zone")];
    let want = raw("sensor", &pts, &[], &cols, false, none);
    o.case(
        "tags as columns",
        &q,
        want,
        Some(&["time", "f", "host", "zone"]),
    )
    .await;

    let h2 = c.select("sensor", |p| p.tag("host") == "h2");
    let q = format!("SELECT * FROM sensor WHERE {r} AND host = 'h2' LIMIT 30");
    let cols = [
        Raw::Field("b"),
        Raw::Field("c"),
        Raw::Field("f"),
        Raw::Field("g"),
        Raw::Tag("host"),
        Raw::Field("i"),
        Raw::Field("s"),
        Raw::Tag("zone"),
    ];
    let want = raw("sensor", &h2, &[], &cols, false, (30, 0));
    let names = ["time", "b", "c", "f", "g", "host", "i", "s", "zone"];
    o.case("SELECT *", &q, want, Some(&names)).await;

    let q = format!("SELECT /^[fg]$/ FROM sensor WHERE {r} AND host = 'h2' GROUP BY zone");
    let want = raw(
        "sensor",
        &h2,
        &["zone"],
        &[Raw::Field("f"), Raw::Field("g")],
        false,
        none,
    );
    o.case("field regex", &q, want, Some(&["time", "f", "g"]))
        .await;

    let q =
        format!("SELECT g FROM sensor WHERE {r} GROUP BY host, zone LIMIT 7 SLIMIT 2 SOFFSET 5");
    let want: Vec<_> = raw(
        "sensor",
        &all,
        &["host", "zone"],
        &[Raw::Field("g")],
        false,
        (7, 0),
    )
    .into_iter()
    .skip(5)
    .take(2)
    .collect();
    o.case("raw SLIMIT SOFFSET", &q, want, None).await;

    // Arithmetic between fields (InfluxDB: int / int is a float, x / 0 is 0).
    let h5 = c.select("sensor", |p| p.tag("host") == "h5");
    let q = format!(
        "SELECT g * 2 + i, c - i, g / i, i / 4, i % 3, (g + c) * 0.5 FROM sensor \
         WHERE {r} AND host = 'h5'"
    );
    let div = |a: f64, b: f64| if b == 0.0 { 0.0 } else { a / b };
    let cols = [
        Raw::Expr(Box::new(|p: &Pt| {
            Some(V::F(fv(p, "g")? * 2.0 + iv(p, "i") as f64))
        })),
        Raw::Expr(Box::new(|p: &Pt| Some(V::I(iv(p, "c") - iv(p, "i"))))),
        Raw::Expr(Box::new(move |p: &Pt| {
            Some(V::F(div(fv(p, "g")?, iv(p, "i") as f64)))
        })),
        Raw::Expr(Box::new(|p: &Pt| Some(V::F(iv(p, "i") as f64 / 4.0)))),
        Raw::Expr(Box::new(|p: &Pt| Some(V::I(iv(p, "i") % 3)))),
        Raw::Expr(Box::new(|p: &Pt| {
            Some(V::F((fv(p, "g")? + iv(p, "c") as f64) * 0.5))
        })),
    ];
    let want = raw("sensor", &h5, &[], &cols, false, none);
    o.case("arithmetic", &q, want, None).await;

    // Several measurements, by name and by regex.
    let b = c.select("sensor_b", |_| true);
    let grid = Grid {
        win: Some(w(HOUR)),
        from: c.qs,
        to: c.qe,
        fill: Fill::None,
        desc: false,
    };
    let cols = [col("f", f::mean), cnt("i")];
    let q = format!("SELECT mean(f), count(i) FROM sensor, sensor_b WHERE {r} GROUP BY time(1h), host fill(none)");
    let mut want = aggregate("sensor", &all, &["host"], grid, &cols);
    want.extend(aggregate("sensor_b", &b, &["host"], grid, &cols));
    o.case("FROM two measurements", &q, want, None).await;

    let q = format!("SELECT max(i) FROM /^sensor/ WHERE {r}");
    let mut want = Vec::new();
    for (name, pts) in [("sensor", &all), ("sensor_b", &b)] {
        if let Some((t, v)) = f::max(&f::values(pts, "i")) {
            want.push(crate::Ser {
                name: name.into(),
                tags: vec![],
                rows: vec![vec![Some(V::I(t)), Some(v)]],
            });
        }
    }
    o.case("FROM /regex/", &q, want, None).await;

    let q = format!("SELECT mean(*) FROM sensor_b WHERE {r} GROUP BY time(1h) fill(none)");
    let want = aggregate(
        "sensor_b",
        &b,
        &[],
        grid,
        &[col("f", f::mean), col("i", f::mean)],
    );
    o.case("mean(*)", &q, want, Some(&["time", "mean_f", "mean_i"]))
        .await;

    // GROUP BY time with a negative offset, over the whole data.
    let q = format!(
        "SELECT min(g), last(s) FROM sensor WHERE time >= {} AND time < {} GROUP BY time(25m, -7m), zone",
        c.start,
        c.start + 4 * HOUR
    );
    let grid = Grid {
        win: Some(Win {
            every: 25 * MIN,
            offset: -7 * MIN,
        }),
        from: c.start,
        to: c.start + 4 * HOUR,
        fill: Fill::Null,
        desc: false,
    };
    let whole = c.select_in("sensor", c.start, c.start + 4 * HOUR, |_| true);
    let want = aggregate(
        "sensor",
        &whole,
        &["zone"],
        grid,
        &[sel("g", f::min), sel("s", f::last)],
    );
    o.case("GROUP BY time(25m, -7m)", &q, want, None).await;

    // tz(): a fixed zone moves 3-hour buckets to local midnight (UTC+5).
    let q = format!(
        "SELECT count(g), max(c) FROM sensor WHERE {r} GROUP BY time(3h), host fill(none) tz('Etc/GMT-5')"
    );
    let grid = Grid {
        win: Some(Win {
            every: 3 * HOUR,
            offset: -5 * HOUR,
        }),
        ..grid
    };
    let grid = Grid {
        from: c.qs,
        to: c.qe,
        fill: Fill::None,
        ..grid
    };
    let want = aggregate(
        "sensor",
        &all,
        &["host"],
        grid,
        &[cnt("g"), sel("c", f::max)],
    );
    o.case("tz('Etc/GMT-5')", &q, want, None).await;

    // A zone the IANA database does not have is refused, naming it
    // (zones with daylight-saving rules are evaluated: shardhouse-eval's
    // window tests check them against InfluxDB's answers).
    let q = format!("SELECT count(g) FROM sensor WHERE {r} GROUP BY time(1h) tz('Mars/Olympus')");
    o.refused("unknown tz", &q, "Mars/Olympus").await;

    // Functions InfluxDB has that the router does not evaluate: refused,
    // naming the function.
    for (q, needle) in [
        (
            format!("SELECT holt_winters(mean(f), 3, 0) FROM sensor WHERE {r} GROUP BY time(1h)"),
            "holt_winters",
        ),
        (format!("SELECT abs(i) FROM sensor WHERE {r}"), "abs"),
    ] {
        o.refused("not served", &q, needle).await;
    }
}
