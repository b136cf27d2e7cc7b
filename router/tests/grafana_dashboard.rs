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
use data::{line_protocol, telegraf_points, HOSTS, MS};
use grafana::{expand, grafana_interval, interval_text, View};
use support::{poll, start_etcd, start_router, wait_writable, Node};

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

/// A 3-node RF=3 cluster with 8 shards (real processes) and the database.
struct Cluster {
    base: String,
    http: reqwest::Client,
    _router: support::Proc,
    _nodes: Vec<Node>,
    _etcd: support::Proc,
    _dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(name: &str) -> Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let (etcd, etcd_url) = start_etcd(dir.path()).await?;
        let init = "shards=8,rf=3,nodes=3";
        let mut nodes = Vec::new();
        for id in 1..=3 {
            nodes.push(Node::start(id, dir.path(), &etcd_url, name, init, &[])?);
        }
        let (router, base) = start_router(dir.path(), &etcd_url, name)?;
        let c = Cluster {
            base,
            http: reqwest::Client::new(),
            _router: router,
            _nodes: nodes,
            _etcd: etcd,
            _dir: dir,
        };
        let create = format!("CREATE DATABASE \"{DB}\"");
        poll(
            "CREATE DATABASE (the cluster up)",
            Duration::from_secs(90),
            || async {
                let r = c
                    .http
                    .post(format!("{}/query", c.base))
                    .form(&[("q", &create)])
                    .send()
                    .await?;
                Ok((r.status().as_u16() == 200).then_some(()))
            },
        )
        .await?;
        // CREATE DATABASE answers 200 even when its result is an error (no
        // shard map yet): a committed write says the cluster is up.
        wait_writable(&c.http, &c.base).await?;
        Ok(c)
    }

    async fn write(&self, lines: String) -> Result<()> {
        let r = self
            .http
            .post(format!("{}/write?db={DB}", self.base))
            .body(lines)
            .send()
            .await?;
        let status = r.status().as_u16();
        ensure!(status == 204, "write: {status} {}", r.text().await?);
        Ok(())
    }

    /// What Grafana sends, `GET /query?db=&q=&epoch=ms`: the first result.
    async fn query(&self, q: &str) -> Result<Value> {
        let r = self
            .http
            .get(format!("{}/query", self.base))
            .query(&[("db", DB), ("q", q), ("epoch", "ms")])
            .send()
            .await?;
        let (status, body) = (r.status().as_u16(), r.text().await?);
        ensure!(status == 200, "HTTP {status}: {body}");
        let v: Value = serde_json::from_str(&body)?;
        Ok(v["results"][0].clone())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_dashboard_query_answers_as_influxdb() -> Result<()> {
    let (targets, var_queries) = dashboard()?;
    ensure!(targets.len() >= 8, "{DASHBOARD}: {} queries", targets.len());
    let c = Cluster::start("grafana").await?;

    // Data up to a minute ago; nobody reports in the 150 s after an hour
    // ago, where "Last 1 hour"'s lower bound falls while the test runs.
    let now = now_ms();
    let (cpu, mem) = telegraf_points(now - 60_000, (now - HOUR - 5_000)..(now - HOUR + 150_000));
    for host in HOSTS {
        c.write(line_protocol(&cpu, &mem, host)).await?;
    }

    // The host variable's query lists every host.
    for q in &var_queries {
        let r = c.query(q).await?;
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
            let got = c.query(&q).await;
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
    Ok(())
}

/// The variable query Grafana users write for "hosts that reported in the
/// range" (`SHOW TAG VALUES ... WHERE $timeFilter`, refreshed on time range
/// change), in both forms Grafana 10 sends. InfluxDB 1.8 splits the time
/// range off the condition (it picks the shard groups to read) and answers
/// with the tag values; every host here wrote inside the range.
/// Before 173f1aa the router failed both forms (time read as a tag).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn variable_query_with_time_filter() -> Result<()> {
    let c = Cluster::start("grafanavar").await?;
    let now = now_ms();
    let t = (now - 600_000) * MS;
    c.write(format!(
        "cpu,cpu=cpu-total,host=b usage_user=1 {t}\ncpu,cpu=cpu-total,host=a usage_user=2 {t}\n"
    ))
    .await?;
    let hosts = serde_json::json!([["host", "a"], ["host", "b"]]);
    let keys = serde_json::json!([["cpu"], ["host"]]);
    let (from, to) = (now - HOUR, now + 60_000);
    let mut failures = Vec::new();
    for (q, want) in [
        (format!(r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE time >= {from}ms and time <= {to}ms"#), &hosts),
        (r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE time >= now() - 1h and time <= now()"#.to_string(), &hosts),
        (format!(r#"SHOW TAG VALUES FROM "cpu" WITH KEY = "host" WHERE "cpu" = 'cpu-total' AND time >= {from}ms"#), &hosts),
        (format!(r#"SHOW TAG KEYS FROM "cpu" WHERE time >= {from}ms and time <= {to}ms"#), &keys),
    ] {
        match c.query(&q).await {
            Ok(r) if r["series"][0]["values"] == *want => {}
            Ok(r) => failures.push(format!("{q}\n  answered {r}\n  want values {want}")),
            Err(e) => failures.push(format!("{q}\n  {e}")),
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
