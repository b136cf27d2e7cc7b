//! Step 11-12 of the oracle test: a refreshing dashboard makes no more
//! parts than writing alone, and queries during a kill -9 of a node answer
//! completely or with an error.

use std::time::Duration;

use anyhow::{anyhow, ensure, Context, Result};
use serde_json::Value;

use super::support::now_ns;
use super::{Stack, Written};

/// 11: a minute of writes, then a minute of the same writes with a query
/// a second; active parts compared at the end of each.
pub async fn parts_with_and_without(s: &Stack) -> Result<()> {
    // 11. A dashboard refreshing every second for a minute makes no more
    // parts than writing alone: a minute of writes, then a minute of the
    // same writes with a query a second; active parts (every node's
    // `shardhouse_engine_parts`) compared at the end of each.
    let writes_alone = dashboard_minute(s, false).await?;
    let with_dashboard = dashboard_minute(s, true).await?;
    eprintln!(
        "active parts after a minute of writes: {writes_alone}; with a dashboard: {with_dashboard}"
    );
    ensure!(
        with_dashboard <= writes_alone + writes_alone / 4 + 4,
        "a dashboard grew the parts: {with_dashboard} active parts against {writes_alone} from writing alone"
    );
    Ok(())
}

/// 12: kill -9 of a node while a dashboard-like query loops; `cut` is
/// the time before which step 9 deleted h0's points.
pub async fn kill9_during_queries(s: &mut Stack, w: &Written, cut: i64) -> Result<()> {
    let (points, range) = (&w.points, &w.range);
    // 12. kill -9 of a node while a dashboard-like query loops: every answer
    // is complete or an error, never a silently short count.
    let total = points
        .iter()
        .filter(|p| !(p.host == "h0" && p.time < cut))
        .count() as i64;
    let q = format!("SELECT count(load) FROM cpu WHERE {range}");
    let mut complete = 0;
    let mut errors = 0;
    let killed = std::time::Instant::now();
    s.cluster.nodes[0].kill9();
    while killed.elapsed() < Duration::from_secs(20) {
        let (status, body) = s.query_raw(&q, &[]).await?;
        let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
        match v["results"][0]["series"][0]["values"][0][1].as_i64() {
            Some(n) => {
                ensure!(
                    status == 200 && n == total,
                    "incomplete answer {n} of {total}: {body}"
                );
                complete += 1;
            }
            None => {
                ensure!(
                    v["results"][0]["error"].is_string() || v["error"].is_string(),
                    "neither an answer nor an error: {status} {body}"
                );
                errors += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    ensure!(
        complete > 0,
        "no complete answer in 20 s with one of three nodes down ({errors} errors)"
    );
    eprintln!("kill -9 during queries: {complete} complete answers, {errors} errors");
    Ok(())
}

/// A minute of writes into `dash` (a point per series every 100 ms), with a
/// dashboard query every second when `dashboard`; returns the active parts
/// of every node at the end (after the gauge's 10 s refresh).
async fn dashboard_minute(s: &Stack, dashboard: bool) -> Result<i64> {
    let started = std::time::Instant::now();
    let mut last_query = started;
    let mut i = 0i64;
    while started.elapsed() < Duration::from_secs(60) {
        let t = now_ns();
        let body: String = (0..20)
            .map(|h| format!("m,host=h{h} v={i} {t}\n"))
            .collect();
        let r = s
            .http
            .post(format!("{}/write?db=dash", s.base))
            .body(body)
            .send()
            .await?;
        ensure!(
            r.status().as_u16() == 204,
            "dashboard write: {}",
            r.text().await?
        );
        if dashboard && last_query.elapsed() >= Duration::from_secs(1) {
            last_query = std::time::Instant::now();
            let r = s
                .http
                .get(format!("{}/query", s.base))
                .query(&[
                    ("db", "dash"),
                    (
                        "q",
                        "SELECT mean(v) FROM m WHERE time > now() - 5m GROUP BY time(10s), host",
                    ),
                ])
                .send()
                .await?;
            let text = r.text().await?;
            ensure!(text.contains("\"series\""), "dashboard query: {text}");
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    let mut parts = 0;
    for n in &s.cluster.nodes {
        let v = super::support::node_metric(&s.http, &n.http, "shardhouse_engine_parts")
            .await?
            .ok_or_else(|| anyhow!("node {} has no shardhouse_engine_parts", n.id))?;
        parts += v as i64;
    }
    Ok(parts)
}
