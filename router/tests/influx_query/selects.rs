//! Step 1-5 of the oracle test: aggregates (evaluated by the router and
//! pushed down to chDB), selectors, raw points through conditions, regex
//! and fill(0), a measurement some shards lack, and a subquery, each
//! compared with the same computed in plain Rust.

use std::collections::BTreeMap;

use anyhow::{anyhow, ensure, Result};

use super::eval::{by_tags, close, median, percentile, stddev};
use super::{Pt, Stack, Written, MINUTE};

/// 1 and 1b: aggregates per host and 10-minute bucket, router and chDB.
pub async fn aggregates(s: &Stack, w: &Written) -> Result<()> {
    let (points, start, range) = (&w.points, w.start, &w.range);
    // 1. Aggregates per host and 10-minute bucket.
    let q = format!(
        "SELECT count(usage), sum(usage), mean(usage), min(usage), max(usage), median(usage), \
         spread(usage), stddev(usage), percentile(usage, 90) FROM cpu WHERE {range} \
         GROUP BY time(10m), host fill(none)"
    );
    let got = by_tags(&s.query(&q).await?);
    let want = usage_per_10m(points, start, |p| format!("host={}", p.host));
    ensure!(
        got.keys().collect::<Vec<_>>() == want.keys().collect::<Vec<_>>(),
        "series differ: {:?} vs {:?}",
        got.keys(),
        want.keys()
    );
    for (series, buckets) in &want {
        let rows = &got[series];
        ensure!(
            rows.len() == buckets.len(),
            "{series}: {} rows, want {}",
            rows.len(),
            buckets.len()
        );
        for (row, (bucket, values)) in rows.iter().zip(buckets) {
            let mut v = values.clone();
            let n = v.len() as f64;
            let sum: f64 = v.iter().sum();
            let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let expected: Vec<Option<f64>> = vec![
                Some(n),
                Some(sum),
                Some(sum / n),
                Some(min),
                Some(max),
                Some(median(&mut v)),
                Some(max - min),
                stddev(values),
                percentile(&mut v, 90.0),
            ];
            ensure!(
                row[0].as_i64() == Some(*bucket),
                "{series}: bucket {:?} want {bucket}",
                row[0]
            );
            for (i, e) in expected.iter().enumerate() {
                let cell = &row[i + 1];
                match e {
                    None => ensure!(
                        cell.is_null(),
                        "{series} {bucket} col {i}: {cell} want null"
                    ),
                    Some(e) => {
                        let g = cell
                            .as_f64()
                            .ok_or_else(|| anyhow!("{series} col {i}: {cell}"))?;
                        ensure!(close(g, *e), "{series} {bucket} col {i}: got {g}, want {e}");
                    }
                }
            }
        }
    }

    // 1b. The same aggregates the shards compute in chDB (pushed down):
    // equal to the plain evaluation (float sums within 1e-9). Asked twice:
    // first grouped by host at the shards, then (the router has seen that
    // every series is its own group) by series.
    let q = format!(
        "SELECT count(usage), sum(usage), mean(usage), min(usage), max(usage), spread(usage) \
         FROM cpu WHERE {range} GROUP BY time(10m), host fill(none)"
    );
    for _ in 0..2 {
        pushed_equal(&by_tags(&s.query(&q).await?), &want)?;
    }
    // 1c. Per region: the shards join each point to its region's group.
    let want = usage_per_10m(points, start, |p| format!("region={}", p.region));
    let q = q.replace("host fill", "region fill");
    for _ in 0..2 {
        pushed_equal(&by_tags(&s.query(&q).await?), &want)?;
    }
    Ok(())
}

/// The `usage` values per group (`group` of each point) and 10-minute
/// bucket from `start`.
fn usage_per_10m(
    points: &[Pt],
    start: i64,
    group: impl Fn(&Pt) -> String,
) -> BTreeMap<String, BTreeMap<i64, Vec<f64>>> {
    let mut want: BTreeMap<String, BTreeMap<i64, Vec<f64>>> = BTreeMap::new();
    for p in points {
        if let Some(u) = p.usage {
            want.entry(group(p))
                .or_default()
                .entry(start + (p.time - start) / (10 * MINUTE) * (10 * MINUTE))
                .or_default()
                .push(u);
        }
    }
    want
}

/// Pushed count, sum, mean, min, max and spread per series and bucket
/// (`got`) equal the plain evaluation of the `want` values.
fn pushed_equal(
    got: &BTreeMap<String, Vec<Vec<serde_json::Value>>>,
    want: &BTreeMap<String, BTreeMap<i64, Vec<f64>>>,
) -> Result<()> {
    ensure!(
        got.keys().collect::<Vec<_>>() == want.keys().collect::<Vec<_>>(),
        "pushed series differ: {:?} vs {:?}",
        got.keys(),
        want.keys()
    );
    for (series, buckets) in want {
        let rows = &got[series];
        ensure!(
            rows.len() == buckets.len(),
            "pushed {series}: {} rows",
            rows.len()
        );
        for (row, (bucket, values)) in rows.iter().zip(buckets) {
            let n = values.len() as f64;
            let sum: f64 = values.iter().sum();
            let min = values.iter().cloned().fold(f64::INFINITY, f64::min);
            let max = values.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let expected = [n, sum, sum / n, min, max, max - min];
            ensure!(
                row[0].as_i64() == Some(*bucket),
                "pushed {series}: bucket {:?}",
                row[0]
            );
            for (i, e) in expected.iter().enumerate() {
                let g = row[i + 1]
                    .as_f64()
                    .ok_or_else(|| anyhow!("pushed {series} col {i}: {row:?}"))?;
                ensure!(
                    close(g, *e),
                    "pushed {series} {bucket} col {i}: got {g}, want {e}"
                );
            }
        }
    }
    Ok(())
}

/// 2-5b: selectors, raw points, regex with fill(0), a sparse measurement
/// and a subquery.
pub async fn selectors_and_raw(s: &Stack, w: &Written) -> Result<()> {
    let (points, start, range) = (&w.points, w.start, &w.range);
    // 2. Selectors per region over the whole range (integers stay integers).
    let q =
        format!("SELECT first(load), last(load), max(load) FROM cpu WHERE {range} GROUP BY region");
    let got = by_tags(&s.query(&q).await?);
    for region in ["r0", "r1"] {
        let mine: Vec<&Pt> = points.iter().filter(|p| p.region == region).collect();
        // Earliest time, then the larger value on a tie (InfluxDB's rule).
        let first = mine.iter().min_by_key(|p| (p.time, -p.load)).unwrap();
        let last = mine.iter().max_by_key(|p| (p.time, p.load)).unwrap();
        let max = mine.iter().map(|p| p.load).max().unwrap();
        let row = &got[&format!("region={region}")][0];
        ensure!(
            row[0].as_i64() == Some(start),
            "{region}: time {:?}",
            row[0]
        );
        ensure!(
            row[1].as_i64() == Some(first.load)
                && row[2].as_i64() == Some(last.load)
                && row[3].as_i64() == Some(max),
            "{region}: {row:?} want first {} last {} max {max}",
            first.load,
            last.load
        );
    }

    // 2b. First and last per host, asked twice: grouped by host at the
    // shards, then by series (each group one series: the value at the
    // earliest and latest time with a value, no tuple of the two).
    let q = format!("SELECT first(usage), last(usage) FROM cpu WHERE {range} GROUP BY host");
    for _ in 0..2 {
        let got = by_tags(&s.query(&q).await?);
        for h in 0..10 {
            let host = format!("h{h}");
            let mine: Vec<(i64, f64)> = points
                .iter()
                .filter(|p| p.host == host)
                .filter_map(|p| p.usage.map(|u| (p.time, u)))
                .collect();
            let first = mine.iter().min_by_key(|p| p.0).unwrap().1;
            let last = mine.iter().max_by_key(|p| p.0).unwrap().1;
            let row = &got[&format!("host={host}")][0];
            ensure!(
                row[1].as_f64() == Some(first) && row[2].as_f64() == Some(last),
                "{host}: {row:?} want first {first} last {last}"
            );
        }
    }

    // 3. Raw points through a tag and a field condition, in time order.
    let q = format!("SELECT usage, region FROM cpu WHERE host = 'h3' AND usage > 50 AND {range}");
    let got = by_tags(&s.query(&q).await?);
    let mut want: Vec<(i64, f64)> = points
        .iter()
        .filter(|p| p.host == "h3" && p.usage.is_some_and(|u| u > 50.0))
        .map(|p| (p.time, p.usage.unwrap()))
        .collect();
    want.sort_by_key(|w| w.0);
    let rows = got.get("").cloned().unwrap_or_default();
    ensure!(
        rows.len() == want.len(),
        "raw: {} rows, want {}",
        rows.len(),
        want.len()
    );
    for (row, (t, u)) in rows.iter().zip(&want) {
        ensure!(
            row[0].as_i64() == Some(*t) && row[1].as_f64() == Some(*u) && row[2] == "r1",
            "raw row {row:?} want {t} {u}"
        );
    }

    // 4. Regex on a tag, count with fill(0) over 30-minute buckets, newest first.
    let q = format!(
        "SELECT count(load) FROM cpu WHERE host =~ /^h[12]$/ AND {range} GROUP BY time(30m) fill(0) ORDER BY time DESC"
    );
    let got = by_tags(&s.query(&q).await?);
    let rows = &got[""];
    ensure!(rows.len() == 4, "4 buckets, got {rows:?}");
    for (i, row) in rows.iter().enumerate() {
        let b = start + (3 - i as i64) * 30 * MINUTE;
        let n = points
            .iter()
            .filter(|p| {
                (p.host == "h1" || p.host == "h2") && p.time >= b && p.time < b + 30 * MINUTE
            })
            .count() as i64;
        ensure!(
            row[0].as_i64() == Some(b) && row[1].as_i64() == Some(n),
            "bucket {row:?} want {b} {n}"
        );
    }

    // 5. A measurement some shards never received.
    let q = format!("SELECT sum(free), count(free) FROM mem WHERE {range}");
    let r = s.query(&q).await?;
    let row = &r["series"][0]["values"][0];
    let want_sum: i64 = points
        .iter()
        .filter(|p| p.host.as_str() < "h3")
        .map(|p| p.load * 3)
        .sum();
    let want_n = points.iter().filter(|p| p.host.as_str() < "h3").count() as i64;
    ensure!(
        row[1].as_i64() == Some(want_sum) && row[2].as_i64() == Some(want_n),
        "mem: {row:?}"
    );

    // 5b. A subquery (what Grafana users write): the largest per-host mean.
    let q =
        format!("SELECT max(mean) FROM (SELECT mean(usage) FROM cpu WHERE {range} GROUP BY host)");
    let r = s.query(&q).await?;
    let mut best = f64::NEG_INFINITY;
    for h in 0..10 {
        let v: Vec<f64> = points
            .iter()
            .filter(|p| p.host == format!("h{h}"))
            .filter_map(|p| p.usage)
            .collect();
        best = best.max(v.iter().sum::<f64>() / v.len() as f64);
    }
    let got = r["series"][0]["values"][0][1]
        .as_f64()
        .ok_or_else(|| anyhow!("subquery: {r}"))?;
    ensure!(
        close(got, best),
        "subquery max of means: got {got}, want {best}"
    );
    Ok(())
}
