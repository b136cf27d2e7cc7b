//! Issue 27's downsampling, end to end with real parts (etcd, nodes, two
//! `shardhouse-router` processes): raw points go to a 1h policy, a
//! continuous query keeps per-second means and counts in a second policy,
//! and the router running it is killed with SIGKILL half-way. Every
//! acknowledged point is recorded; afterwards every whole second between
//! the first and the last downsampled one holds, per host, exactly the
//! count and mean of the acknowledged raw points: nothing missed while the
//! other router took the lease over, nothing counted twice.

mod support;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::{now_ns, poll, wait_writable};

const SECOND: i64 = 1_000_000_000;
const HOSTS: [&str; 2] = ["a", "b"];

async fn influx(http: &reqwest::Client, base: &str, q: &str) -> Result<Value> {
    let r = http
        .post(format!("{base}/query"))
        .query(&[("db", "cqdb"), ("q", q), ("epoch", "ns")])
        .send()
        .await?;
    let status = r.status();
    let text = r.text().await?;
    ensure!(status == 200, "{q:?} answered {status}: {text}");
    let v: Value = serde_json::from_str(&text)?;
    if let Some(e) = v["results"][0].get("error") {
        bail!("{q:?}: {e}");
    }
    Ok(v)
}

/// Which router holds the continuous-query lease (its /metrics says 1).
async fn leader(http: &reqwest::Client, urls: &[String]) -> Result<Option<usize>> {
    for (i, u) in urls.iter().enumerate() {
        let Ok(r) = http.get(format!("{u}/metrics")).send().await else {
            continue;
        };
        let text = r.text().await.unwrap_or_default();
        if text
            .lines()
            .any(|l| l.trim() == "shardhouse_router_cq_leader 1")
        {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// (host, second) -> (count, sum) of the acknowledged raw points.
type Acked = BTreeMap<(String, i64), (i64, f64)>;

async fn write_for(
    http: &reqwest::Client,
    base: &str,
    until: Instant,
    acked: &mut Acked,
    seq: &mut i64,
) -> Result<()> {
    while Instant::now() < until {
        let ts = now_ns();
        let points: Vec<(&str, i64)> = HOSTS
            .iter()
            .map(|h| {
                *seq += 1;
                (*h, *seq % 97)
            })
            .collect();
        let body: String = points
            .iter()
            .map(|(h, v)| format!("cpu,host={h} v={v} {ts}\n"))
            .collect();
        let r = http
            .post(format!("{base}/write?db=cqdb&rp=raw"))
            .body(body)
            .send()
            .await?;
        if r.status().as_u16() == 204 {
            for (h, v) in points {
                let e = acked.entry((h.to_string(), ts / SECOND)).or_default();
                e.0 += 1;
                e.1 += v as f64;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downsampling_survives_a_kill_of_the_router_running_it() -> Result<()> {
    let mut cluster = shardhouse_test_support::LocalCluster::builder("cq")
        .nodes(1)
        .shards(2)
        .rf(1)
        .routers(2)
        .bin_dir(
            std::path::Path::new(env!("CARGO_BIN_EXE_shardhouse-router"))
                .parent()
                .context("bin dir")?,
        )
        .start()?;
    let urls: Vec<String> = cluster.routers.iter().map(|r| r.url()).collect();
    let http = reqwest::Client::new();
    wait_writable(&http, &urls[0]).await?;
    for q in [
        "CREATE DATABASE cqdb",
        "CREATE RETENTION POLICY raw ON cqdb DURATION 1h REPLICATION 1 DEFAULT",
        "CREATE RETENTION POLICY ds ON cqdb DURATION INF REPLICATION 1",
        "CREATE CONTINUOUS QUERY cq ON cqdb RESAMPLE FOR 3s BEGIN SELECT count(v) AS n, sum(v) AS s INTO cqdb.ds.cpu_1s FROM cpu GROUP BY time(1s), host END",
    ] {
        influx(&http, &urls[0], q).await?;
    }
    let shown = influx(&http, &urls[0], "SHOW CONTINUOUS QUERIES").await?;
    ensure!(
        shown.to_string().contains("FROM cqdb.raw.cpu"),
        "the CQ is stored qualified: {shown}"
    );
    let lead = poll(
        "a router takes the CQ lease",
        Duration::from_secs(30),
        || {
            let (http, urls) = (&http, &urls);
            async move { leader(http, urls).await }
        },
    )
    .await?;
    let other = 1 - lead;

    let (mut acked, mut seq) = (Acked::new(), 0);
    write_for(
        &http,
        &urls[other],
        Instant::now() + Duration::from_secs(6),
        &mut acked,
        &mut seq,
    )
    .await?;
    cluster.routers[lead].kill9();
    write_for(
        &http,
        &urls[other],
        Instant::now() + Duration::from_secs(16),
        &mut acked,
        &mut seq,
    )
    .await?;
    let last_second = acked
        .keys()
        .map(|(_, s)| *s)
        .max()
        .context("no write acked")?;
    ensure!(
        leader(&http, &urls[other..=other]).await? == Some(0),
        "the surviving router did not take the lease over"
    );

    // Wait for the last whole second to be downsampled.
    let rows = poll("the CQ catches up", Duration::from_secs(30), || {
        let (http, base) = (&http, &urls[other]);
        async move {
            let v = influx(http, base, "SELECT n, s FROM cqdb.ds.cpu_1s GROUP BY host").await?;
            let mut got: BTreeMap<(String, i64), (i64, f64)> = BTreeMap::new();
            for series in v["results"][0]["series"].as_array().into_iter().flatten() {
                let host = series["tags"]["host"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                for row in series["values"].as_array().into_iter().flatten() {
                    let t = row[0].as_i64().unwrap_or_default() / SECOND;
                    let n = row[1].as_i64().unwrap_or_default();
                    let s = row[2].as_f64().unwrap_or_default();
                    got.insert((host.clone(), t), (n, s));
                }
            }
            let done = HOSTS
                .iter()
                .all(|h| got.contains_key(&(h.to_string(), last_second)));
            Ok(done.then_some(got))
        }
    })
    .await?;
    let first = rows
        .keys()
        .map(|(_, s)| *s)
        .min()
        .context("nothing downsampled")?;
    let mut checked = 0;
    for ((host, second), want) in acked.iter().filter(|((_, s), _)| *s >= first) {
        let got = rows.get(&(host.clone(), *second));
        ensure!(
            got.is_some_and(|g| g.0 == want.0 && (g.1 - want.1).abs() < 1e-9),
            "{host} at second {second}: downsampled {got:?}, acknowledged raw (count, sum) {want:?}"
        );
        checked += 1;
    }
    ensure!(checked >= 2 * 15, "only {checked} intervals checked");
    eprintln!("cq_intervals_checked={checked} first={first} last={last_second}");
    Ok(())
}
