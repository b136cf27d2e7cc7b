//! Step 6-10 of the oracle test: SHOW statements, errors, chunked answers,
//! DELETE and DROP MEASUREMENT, and the InfluxDB 1.x Python client.

use anyhow::{anyhow, ensure, Result};
use serde_json::Value;

use super::{Stack, Written, MINUTE};

/// 6: the SHOW statements.
pub async fn show(s: &Stack) -> Result<()> {
    // 6. The SHOW statements.
    let r = s.query("SHOW MEASUREMENTS").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["cpu"], ["mem"]]),
        "{r}"
    );
    let r = s.query("SHOW TAG KEYS FROM cpu").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["host"], ["region"]]),
        "{r}"
    );
    let r = s
        .query("SHOW TAG VALUES FROM cpu WITH KEY = region")
        .await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["region", "r0"], ["region", "r1"]]),
        "{r}"
    );
    let r = s.query("SHOW FIELD KEYS FROM cpu").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["load", "integer"], ["usage", "float"]]),
        "{r}"
    );
    let r = s.query("SHOW SERIES FROM mem").await?;
    ensure!(
        r["series"][0]["values"]
            == serde_json::json!([["mem,host=h0"], ["mem,host=h1"], ["mem,host=h2"]]),
        "{r}"
    );
    let r = s.query("SHOW DATABASES").await?;

    let dbs = r["series"][0]["values"].to_string();
    ensure!(
        dbs.contains("\"oracle\"") && dbs.contains("\"warmup\""),
        "{r}"
    );
    Ok(())
}

/// 7: parse errors name the position, statement errors come in the
/// result, a missing q is a 400, an unknown database is InfluxDB's error.
pub async fn errors(s: &Stack) -> Result<()> {
    // 7. Errors: parse errors name the position; statement errors come in
    // the result; a missing q is a 400.
    let (status, body) = s.query_raw("SELECT FROM cpu", &[]).await?;
    ensure!(
        status == 400 && body.contains("error parsing query") && body.contains("char 8"),
        "{status} {body}"
    );
    let (status, body) = s.query_raw("SELECT foo(usage) FROM cpu", &[]).await?;
    ensure!(status == 400 && body.contains("foo"), "{status} {body}");
    // No lower time bound: InfluxDB starts at the first point read.
    let (status, body) = s
        .query_raw("SELECT mean(usage) FROM cpu GROUP BY time(1m)", &[])
        .await?;
    ensure!(
        status == 200 && body.contains("\"series\"") && !body.contains("error"),
        "{status} {body}"
    );
    // Statement errors come in the result, in InfluxDB's words.
    let (status, body) = s
        .query_raw("SELECT mean(usage), usage FROM cpu", &[])
        .await?;
    ensure!(
        status == 200
            && body.contains("mixing aggregate and non-aggregate queries is not supported"),
        "{status} {body}"
    );
    let r = s.http.get(format!("{}/query", s.base)).send().await?;
    ensure!(
        r.status().as_u16() == 400 && r.text().await?.contains("missing required parameter"),
        "no q"
    );
    // A database nobody holds: InfluxDB's words, which clients match on;
    // an existing database without the measurement answers no series.
    for q in [
        "SELECT usage FROM nodb..cpu",
        "SHOW MEASUREMENTS ON nodb",
        "SHOW TAG KEYS ON nodb",
        "SHOW FIELD KEYS ON nodb",
    ] {
        let (status, body) = s.query_raw(q, &[]).await?;
        ensure!(
            status == 200 && body.contains("database not found: nodb"),
            "{q}: {status} {body}"
        );
    }
    let r = s.query("SELECT usage FROM nosuchmeasurement").await?;
    ensure!(r.get("series").is_none(), "{r}");
    Ok(())
}

/// 8: chunked answers.
pub async fn chunked(s: &Stack, w: &Written) -> Result<()> {
    let (points, range) = (&w.points, &w.range);
    // 8. Chunked: one JSON document per line, all but the last partial.
    let (status, body) = s
        .query_raw(
            &format!("SELECT usage FROM cpu WHERE host = 'h5' AND {range}"),
            &[("chunked", "true"), ("chunk_size", "100")],
        )
        .await?;
    ensure!(status == 200, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    let h5 = points
        .iter()
        .filter(|p| p.host == "h5" && p.usage.is_some())
        .count();
    ensure!(
        lines.len() == h5.div_ceil(100),
        "{} chunks for {h5} rows",
        lines.len()
    );
    for (i, l) in lines.iter().enumerate() {
        let v: Value = serde_json::from_str(l)?;
        ensure!(
            v["results"][0]["partial"].as_bool().unwrap_or(false) == (i + 1 < lines.len()),
            "chunk {i}: {l}"
        );
    }
    Ok(())
}

/// 9: DELETE by tag and time, then DROP MEASUREMENT; returns the time
/// before which h0's points were deleted.
pub async fn delete_and_drop(s: &Stack, w: &Written) -> Result<i64> {
    let (points, start, range) = (&w.points, w.start, &w.range);
    // 9. DELETE by tag and time, then DROP MEASUREMENT.
    let cut = start + 60 * MINUTE;
    s.query(&format!(
        "DELETE FROM cpu WHERE host = 'h0' AND time < {cut}"
    ))
    .await?;
    let r = s
        .query(&format!(
            "SELECT count(load) FROM cpu WHERE host = 'h0' AND {range}"
        ))
        .await?;
    let left = points
        .iter()
        .filter(|p| p.host == "h0" && p.time >= cut)
        .count() as i64;
    ensure!(
        r["series"][0]["values"][0][1].as_i64() == Some(left),
        "after DELETE: {r}"
    );
    s.query("DROP MEASUREMENT mem").await?;
    let r = s.query("SHOW MEASUREMENTS").await?;
    ensure!(
        r["series"][0]["values"] == serde_json::json!([["cpu"]]),
        "after DROP MEASUREMENT: {r}"
    );
    Ok(cut)
}

/// 10: the InfluxDB 1.x Python client, unchanged.
pub fn python_client(s: &Stack) -> Result<()> {
    // 10. The InfluxDB 1.x Python client, unchanged (scripts/deps.d/pyclients.sh
    // installs it; `make test` runs that first).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let pyclients = std::env::var("SHARDHOUSE_PYCLIENTS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join(".deps/pyclients"));
    ensure!(
        pyclients.join("influxdb").is_dir(),
        "the influxdb Python client is not installed at {}: run scripts/deps.d/pyclients.sh (make test does)",
        pyclients.display()
    );
    let addr = s.base.trim_start_matches("http://").to_owned();
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("base {addr}"))?;
    let out = std::process::Command::new("python3")
        .arg(root.join("router/tests/clients/influxdb_v1_query.py"))
        .args([host, port])
        .env("PYTHONPATH", &pyclients)
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        out.status.success() && text.trim_end().ends_with("ok"),
        "influxdb client: {text}"
    );
    Ok(())
}
