//! Issue 14 item 5: every query of the Grafana dashboard the chart ships
//! (charts/shardhouse/dashboards/hosts.json, read here so the queries tested
//! are the queries shipped), with the macros expanded as Grafana expands them,
//! against a live 3-node RF=3 cluster (etcd, node processes, the router
//! binary) after writing Telegraf-shaped `cpu` and `mem` points; each answer
//! is checked against the same computed here from the points written.
//!
//! Grafana's expansion (Grafana 10.0, InfluxQL raw queries, both the
//! frontend's classic path and the backend's `/api/ds/query`): dashboard
//! variables become their values, regex-escaped and joined as `(a|b)` for
//! multi-value / "All" variables; `$timeFilter` becomes `time >= <from>ms and
//! time <= <to>ms` (the backend; the 10.0 frontend for an absolute range)
//! or `time >= now() - 1h and time <= now()` (the 10.0 frontend for "Last 1
//! hour"); `$__interval` and `$interval` become the interval
//! (range / max data points, rounded to Grafana's steps, at least the
//! datasource's 10 s), formatted `10s`, `1m`, ...; `$__interval_ms` its ms.
//! scripts/tests.d/grafana.sh checks that a real Grafana sends exactly these
//! strings.
//!
//! Layout: grafana_dashboard/grafana.rs is Grafana's expansion,
//! grafana_dashboard/data.rs the points, grafana_dashboard/answers.rs the
//! expected answers and the comparison.

#[path = "grafana_dashboard/answers.rs"]
mod answers;
#[path = "grafana_dashboard/data.rs"]
mod data;
#[path = "grafana_dashboard/grafana.rs"]
mod grafana;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, ensure, Context, Result};
use serde_json::Value;

use answers::{compare, expected};
use data::{line_protocol, telegraf_points, HOSTS};
use grafana::{expand, grafana_interval, interval_text, View};
use support::{poll, start_etcd, start_router, Node};

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../charts/shardhouse/dashboards/hosts.json"
);
const DB: &str = "telegraf";
const HOUR: i64 = 3_600_000;

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

struct Target {
    panel: String,
    ref_id: String,
    query: String,
}

/// Every query of the dashboard: the panels' targets and the variables'.
fn dashboard() -> Result<(Vec<Target>, Vec<String>)> {
    let text =
        std::fs::read_to_string(DASHBOARD).with_context(|| format!("reading {DASHBOARD}"))?;
    let d: Value =
        serde_json::from_str(&text).with_context(|| format!("{DASHBOARD} is not JSON"))?;
    let mut targets = Vec::new();
    for p in d["panels"].as_array().ok_or_else(|| anyhow!("no panels"))? {
        for t in p["targets"]
            .as_array()
            .ok_or_else(|| anyhow!("panel without targets: {p}"))?
        {
            ensure!(
                t["rawQuery"] == true,
                "{}: only raw InfluxQL queries are tested",
                p["title"]
            );
            targets.push(Target {
                panel: p["title"].as_str().unwrap_or_default().to_string(),
                ref_id: t["refId"].as_str().unwrap_or_default().to_string(),
                query: t["query"]
                    .as_str()
                    .ok_or_else(|| anyhow!("target without query: {t}"))?
                    .to_string(),
            });
        }
    }
    let vars = d["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
        .filter_map(|v| v["query"].as_str().map(str::to_string))
        .collect();
    Ok((targets, vars))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_query_answers_as_influxdb() -> Result<()> {
    let (targets, var_queries) = dashboard()?;
    ensure!(targets.len() >= 8, "{DASHBOARD}: {} queries", targets.len());
    let dir = tempfile::tempdir()?;
    let (_etcd, etcd_url) = start_etcd(dir.path()).await?;
    let cluster = "grafana";
    let init = "shards=8,rf=3,nodes=3";
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Node::start(id, dir.path(), &etcd_url, cluster, init, &[])?);
    }
    let (_router, base) = start_router(dir.path(), &etcd_url, cluster)?;
    let http = reqwest::Client::new();
    // What Grafana sends: GET /query?db=&q=&epoch=ms; the first result.
    let query = |q: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            let r = http
                .get(format!("{base}/query"))
                .query(&[("db", DB), ("q", &q), ("epoch", "ms")])
                .send()
                .await?;
            let (status, body) = (r.status().as_u16(), r.text().await?);
            ensure!(status == 200, "HTTP {status}: {body}");
            let v: Value = serde_json::from_str(&body)?;
            Ok::<Value, anyhow::Error>(v["results"][0].clone())
        }
    };
    poll(
        "CREATE DATABASE (the cluster up)",
        Duration::from_secs(90),
        || async {
            let r = http
                .post(format!("{base}/query"))
                .form(&[("q", format!("CREATE DATABASE \"{DB}\""))])
                .send()
                .await?;
            Ok((r.status().as_u16() == 200).then_some(()))
        },
    )
    .await?;

    // Data up to a minute ago; nobody reports in the 150 s after an hour
    // ago, where "Last 1 hour"'s lower bound falls while the test runs.
    let now = now_ms();
    let (cpu, mem) = telegraf_points(now - 60_000, (now - HOUR - 5_000)..(now - HOUR + 150_000));
    for host in HOSTS {
        let r = http
            .post(format!("{base}/write?db={DB}"))
            .body(line_protocol(&cpu, &mem, host))
            .send()
            .await?;
        ensure!(
            r.status().as_u16() == 204,
            "write {host}: {}",
            r.text().await?
        );
    }

    // The host variable's query lists every host.
    for q in &var_queries {
        let r = query(q.clone()).await?;
        let want: Vec<Value> = HOSTS
            .iter()
            .map(|h| serde_json::json!(["host", h]))
            .collect();
        ensure!(
            r["series"][0]["values"] == Value::from(want),
            "variable query {q}: {r}"
        );
    }

    // Refreshes: the last hour with all hosts on a wide panel, as the
    // backend sends it (absolute) and as the 10.0 frontend does (relative);
    // the last 3 hours (an hour before the data) on a narrow panel with two
    // hosts; 6 hours at 2-minute buckets with web-2 (its outage inside).
    let view = |range: i64, points: i64, hosts: Vec<&'static str>, relative| View {
        from_ms: now - range,
        to_ms: now,
        interval_ms: grafana_interval(range, points),
        hosts,
        relative,
    };
    let views = [
        view(HOUR, 1_000, HOSTS.to_vec(), None),
        view(HOUR, 1_000, HOSTS.to_vec(), Some("1h")),
        view(3 * HOUR, 300, vec!["api.example.com", "web-1"], None),
        view(6 * HOUR, 200, vec!["web-2"], None),
    ];
    let mut failures = Vec::new();
    let mut checked = 0;
    for view in &views {
        for t in &targets {
            let q = expand(&t.query, view)?;
            let before = now_ms();
            let got = query(q.clone()).await;
            let after = now_ms();
            ensure!(
                view.relative.is_none() || after < now + 150_000,
                "the relative-range queries ran past the quiet period in the data: too slow to check"
            );
            // A relative range is the router's now: the answer must be the
            // one for some instant while the query ran.
            let instants = match view.relative {
                None => vec![view.clone()],
                Some(_) => [before, after]
                    .map(|t| View {
                        from_ms: t - HOUR,
                        to_ms: t,
                        ..view.clone()
                    })
                    .to_vec(),
            };
            let mut errs = Vec::new();
            for at in &instants {
                let (columns, want) = expected(&t.panel, &t.ref_id, at, &cpu, &mem)?;
                ensure!(
                    !want.is_empty(),
                    "{}/{}: no answer in the data",
                    t.panel,
                    t.ref_id
                );
                errs = match &got {
                    Ok(r) => compare(r, &columns, &want, after - before),
                    Err(e) => vec![e.to_string()],
                };
                if errs.is_empty() {
                    break;
                }
            }
            checked += 1;
            if !errs.is_empty() {
                failures.push(format!(
                    "panel {:?} {} (interval {}):\n  query: {q}\n  {}",
                    t.panel,
                    t.ref_id,
                    interval_text(view.interval_ms),
                    errs.join("\n  ")
                ));
            }
        }
    }
    ensure!(
        failures.is_empty(),
        "{} of {checked} dashboard queries answered wrong:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "grafana dashboard: {checked} queries ({} per refresh x {} refreshes) answered as InfluxDB 1.8",
        targets.len(),
        views.len()
    );
    drop(nodes);
    Ok(())
}
