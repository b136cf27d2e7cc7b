//! Evaluates PromQL range queries over raw samples dumped from a real
//! Prometheus, to compare this engine with it without a cluster:
//!
//! ```text
//! curl -s 'PROM/api/v1/query?query={__name__=~".%2B"}[15m]&time=END' > dump.json
//! cargo run --release -p shardhouse-promql --example replay -- dump.json queries.txt START END STEP
//! ```
//!
//! Prints one Prometheus JSON answer per query line, in order.

use std::io::Write;

use shardhouse_promql::{api, Engine, Labels, MemorySource};

fn load(path: &str) -> anyhow::Result<MemorySource> {
    let dump: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let mut src = MemorySource::default();
    for s in dump["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let labels = Labels::from_pairs(
            s["metric"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string())),
        );
        let samples = s["values"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let t = (p[0].as_f64().unwrap_or(0.0) * 1000.0).round() as i64;
                let v = api_value(p[1].as_str().unwrap_or("NaN"));
                (t, v)
            })
            .collect();
        src.add(labels, samples);
    }
    Ok(src)
}

fn api_value(s: &str) -> f64 {
    match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => s.parse().unwrap_or(f64::NAN),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, dump, queries, start, end, step] = &args[..] else {
        anyhow::bail!("usage: replay DUMP QUERIES START END STEP");
    };
    let src = load(dump)?;
    let (start, end) = (
        api::parse_time(start).map_err(anyhow::Error::msg)?,
        api::parse_time(end).map_err(anyhow::Error::msg)?,
    );
    let step = api::parse_duration(step).map_err(anyhow::Error::msg)?;
    let engine = Engine::default();
    let mut out = std::io::stdout().lock();
    for q in std::fs::read_to_string(queries)?.lines() {
        let q = q.trim();
        if q.is_empty() || q.starts_with('#') {
            continue;
        }
        let body = match engine.range(&src, q, start, end, step).await {
            Ok(v) => api::success_body(&v, &[]),
            Err(e) => api::error_body(&e).1,
        };
        writeln!(out, "{body}")?;
    }
    Ok(())
}
