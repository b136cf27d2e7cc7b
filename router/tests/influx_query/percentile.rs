//! `percentile()` pushed down as rank windows: groups large enough that
//! each shard sends only a slice around its rank, answered exactly; where
//! the shards' data differ so much that the slices cannot decide the rank,
//! the router reads the points again (counted) and still answers exactly.

use anyhow::{anyhow, ensure, Result};

use super::eval::{close, percentile};
use super::{Stack, Written, S};
use crate::support::Rng;

/// Its own database: the other checks count the oracle's measurements.
const DB: &str = "pctl";
const HOSTS: u64 = 12;
const PER_HOST: i64 = 900;

/// The router's count of statements read again as points.
async fn rereads(s: &Stack) -> Result<f64> {
    let text = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("shardhouse_router_query_percentile_rereads_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0))
}

/// `kind=u`: every host's values from one distribution (the windows
/// decide); `kind=s`: host `h` holds values near `h * 1000` (each shard's
/// slice sits elsewhere).
async fn write(s: &Stack, start: i64) -> Result<Vec<(String, u64, f64)>> {
    let mut rng = Rng(0x9e3c_0001);
    let (mut lines, mut points) = (String::new(), Vec::new());
    for kind in ["u", "s"] {
        for h in 0..HOSTS {
            for i in 0..PER_HOST {
                let v = match kind {
                    "u" => rng.below(1_000_000) as f64 / 1000.0,
                    _ => (h * 1000 + rng.below(100)) as f64,
                };
                lines.push_str(&format!(
                    "pw,kind={kind},host=p{h} v={v} {}\n",
                    start + i * S
                ));
                points.push((kind.to_string(), h, v));
            }
        }
    }
    let r = s
        .http
        .post(format!("{}/write?db={DB}", s.base))
        .body(lines)
        .send()
        .await?;
    ensure!(r.status().as_u16() == 204, "write pw: {}", r.text().await?);
    Ok(points)
}

pub async fn windows(s: &Stack, w: &Written) -> Result<()> {
    let points = write(s, w.start).await?;
    let range = format!("time >= {} AND time < {}", w.start, w.start + PER_HOST * S);
    let want = |kind: &str, p: f64| {
        let mut v: Vec<f64> = points.iter().filter(|x| x.0 == kind).map(|x| x.2).collect();
        percentile(&mut v, p)
    };
    let ask = |kind: &'static str, p: f64| {
        let q = format!("SELECT percentile(v, {p}) FROM pw WHERE kind = '{kind}' AND {range}");
        async move {
            let r = s.query_in(DB, &q).await?;
            let got = r["series"][0]["values"][0][1].as_f64();
            ensure!(
                got.zip(want(kind, p)).is_some_and(|(g, e)| close(g, e)),
                "{q}: got {got:?}, want {:?}",
                want(kind, p)
            );
            Ok::<_, anyhow::Error>(())
        }
    };
    let before = rereads(s).await?;
    for p in [1.0, 50.0, 95.0, 99.9, 100.0] {
        ask("u", p).await?;
    }
    let uniform = rereads(s).await?;
    ensure!(
        uniform == before,
        "uniform data: the windows should decide every percentile, yet {} statements were read again",
        uniform - before
    );
    for p in [1.0, 25.0, 50.0, 75.0, 95.0] {
        ask("s", p).await?;
    }
    let skewed = rereads(s).await?;
    ensure!(
        skewed > uniform,
        "skewed data: no statement was read again as points, so the fallback went untested"
    );

    // Grouped by a tag (the shards group by it): each group exact.
    let q = format!("SELECT percentile(v, 90) FROM pw WHERE {range} GROUP BY kind");
    let r = s.query_in(DB, &q).await?;
    let series = r["series"]
        .as_array()
        .ok_or_else(|| anyhow!("{q}: no series: {r}"))?;
    ensure!(series.len() == 2, "{q}: {} series", series.len());
    for one in series {
        let kind = one["tags"]["kind"].as_str().unwrap_or("");
        let got = one["values"][0][1].as_f64();
        let e = want(kind, 90.0);
        ensure!(
            got.zip(e).is_some_and(|(g, e)| close(g, e)),
            "{q} kind={kind}: got {got:?}, want {e:?}"
        );
    }
    Ok(())
}
