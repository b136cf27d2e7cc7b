//! Issue 14's oracle for InfluxQL: every function, grouping and fill the
//! router serves through `/query`, on a live cluster (etcd, three
//! `shardhouse-node` processes at RF=3 with 8 shards, the router binary),
//! compared with the same evaluated here in plain Rust over the points the
//! test wrote (influx_functions/oracle.rs).
//!
//! Data: random (seeded; the seed is printed, `ORACLE_SEED=n` replays
//! it) points of 12 series (6 hosts x 2 zones) over 4 hours with a gap of
//! 25-55 minutes in each series, floats `f` (sometimes absent) and `g`,
//! integers `i` and a counter `c` with resets, strings `s`, booleans `b`
//! (sometimes absent); a second measurement `sensor_b`; a few points three
//! days old. Every timestamp is unique, so no answer depends on how equal
//! times tie.
//!
//! Tolerances: integers, strings, booleans and times exactly; floats
//! within 1e-9 relative (the router sums floats exactly and rounds once,
//! the oracle adds left to right; the router's stddev comes from exact
//! moments, the oracle's from two passes).

#[path = "influx_functions/cases.rs"]
mod cases;
#[path = "influx_functions/cases_aggregates.rs"]
mod cases_aggregates;
#[path = "influx_functions/cases_transforms.rs"]
mod cases_transforms;
#[path = "influx_functions/cases_where.rs"]
mod cases_where;
#[path = "influx_functions/oracle.rs"]
mod oracle;
mod support;

use std::collections::BTreeMap;

use anyhow::{ensure, Result};
use oracle::{Pt, V};
use serde_json::Value;
use support::{now_ns, start_etcd, start_router, wait_writable, Node, Rng};

const DB: &str = "fnoracle";
pub const S: i64 = 1_000_000_000;
pub const MIN: i64 = 60 * S;
pub const HOUR: i64 = 60 * MIN;

/// An expected series: rows of cells, the time first.
#[derive(Debug, Clone)]
pub struct Ser {
    pub name: String,
    pub tags: Vec<(String, String)>,
    pub rows: Vec<Vec<Option<V>>>,
}

/// The running cluster and what the cases found wrong.
pub struct Oracle {
    http: reqwest::Client,
    base: String,
    pub failures: Vec<String>,
    pub cases: usize,
}

impl Oracle {
    /// The first statement's result (times as integer nanoseconds), or
    /// the error text the router answered.
    pub async fn result(&self, q: &str) -> std::result::Result<Value, String> {
        let r = self
            .http
            .get(format!("{}/query", self.base))
            .query(&[("db", DB), ("q", q), ("epoch", "ns")])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = r.status().as_u16();
        let body = r.text().await.map_err(|e| e.to_string())?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{status} {body}: {e}"))?;
        if status != 200 {
            return Err(format!("HTTP {status}: {body}"));
        }
        let result = v["results"][0].clone();
        match result.get("error") {
            Some(e) => Err(e.to_string()),
            None => Ok(result),
        }
    }

    /// Runs `q` and compares its series with `want` (and the column names
    /// when given); a difference is recorded, not fatal, so one run shows
    /// every wrong answer.
    pub async fn case(&mut self, label: &str, q: &str, want: Vec<Ser>, columns: Option<&[&str]>) {
        let got = self.result(q).await;
        self.check(label, q, got, want, columns);
    }

    /// Compares an answer already fetched.
    pub fn check(
        &mut self,
        label: &str,
        q: &str,
        got: std::result::Result<Value, String>,
        want: Vec<Ser>,
        columns: Option<&[&str]>,
    ) {
        self.cases += 1;
        let outcome = match got {
            Ok(got) => compare(&got, &want, columns),
            Err(e) => Err(format!("error {e}")),
        };
        if let Err(e) = outcome {
            self.failures.push(format!("[{label}] {q}\n    {e}"));
        }
    }

    /// `q` must be refused with a message containing `needle`.
    pub async fn refused(&mut self, label: &str, q: &str, needle: &str) {
        self.cases += 1;
        match self.result(q).await {
            Err(e) if e.contains(needle) => {}
            other => self.failures.push(format!(
                "[{label}] {q}\n    want an error naming {needle:?}, got {other:?}"
            )),
        }
    }
}

fn close(got: f64, want: f64) -> bool {
    got == want
        || (got - want).abs() <= 1e-9 * got.abs().max(want.abs())
        || (got.is_nan() && want.is_nan())
}

fn cell_matches(got: &Value, want: &Option<V>) -> bool {
    match want {
        None => got.is_null(),
        Some(V::I(i)) => got.as_i64() == Some(*i),
        Some(V::F(f)) => got.as_f64().is_some_and(|g| close(g, *f)),
        Some(V::S(s)) => got.as_str() == Some(s),
        Some(V::B(b)) => got.as_bool() == Some(*b),
    }
}

fn show(row: &[Option<V>]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|c| match c {
            None => "null".into(),
            Some(V::I(i)) => i.to_string(),
            Some(V::F(f)) => format!("{f:?}"),
            Some(V::S(s)) => format!("{s:?}"),
            Some(V::B(b)) => b.to_string(),
        })
        .collect();
    format!("[{}]", cells.join(","))
}

fn compare(got: &Value, want: &[Ser], columns: Option<&[&str]>) -> std::result::Result<(), String> {
    let series = got["series"].as_array().cloned().unwrap_or_default();
    let got_keys: Vec<String> = series
        .iter()
        .map(|s| format!("{} {}", s["name"], s.get("tags").unwrap_or(&Value::Null)))
        .collect();
    let want_keys: Vec<String> = want
        .iter()
        .map(|s| {
            let tags: serde_json::Map<String, Value> = s
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect();
            let tags = if tags.is_empty() {
                Value::Null
            } else {
                Value::Object(tags)
            };
            format!("\"{}\" {tags}", s.name)
        })
        .collect();
    if got_keys != want_keys {
        return Err(format!("series {got_keys:?}, want {want_keys:?}"));
    }
    for (g, w) in series.iter().zip(want) {
        let rows = g["values"].as_array().cloned().unwrap_or_default();
        if let Some(cols) = columns {
            let names: Vec<&str> = g["columns"]
                .as_array()
                .map(|c| c.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if names != cols {
                return Err(format!("{}: columns {names:?}, want {cols:?}", w.name));
            }
        }
        let n = rows.len().max(w.rows.len());
        for i in 0..n {
            let (gr, wr) = (rows.get(i), w.rows.get(i));
            let ok = match (gr, wr) {
                (Some(gr), Some(wr)) => {
                    let cells = gr.as_array().cloned().unwrap_or_default();
                    cells.len() == wr.len() && cells.iter().zip(wr).all(|(c, e)| cell_matches(c, e))
                }
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "{:?}: {} rows, want {}; first difference at row {i}: got {}, want {}",
                    w.tags,
                    rows.len(),
                    w.rows.len(),
                    gr.map_or("none".into(), |r| r.to_string()),
                    wr.map_or("none".into(), |r| show(r)),
                ));
            }
        }
    }
    Ok(())
}

/// The data set: `(points, line protocol)`. Series `k` writes its points
/// at `k` nanoseconds past whole seconds, so every time is unique.
fn generate(seed: u64, start: i64, now: i64) -> (Vec<Pt>, String) {
    let mut rng = Rng(seed | 1);
    let mut points = Vec::new();
    let strings = ["alpha", "beta", "gamma", "delta"];
    let mut k = 0;
    for h in 0..6 {
        for z in [h % 3, (h + 1) % 3] {
            k += 1;
            let tags: BTreeMap<String, String> = [
                ("host".to_string(), format!("h{h}")),
                ("zone".to_string(), format!("z{z}")),
            ]
            .into();
            let gap = start + (30 + rng.below(170) as i64) * MIN;
            let gap_end = gap + (25 + rng.below(30) as i64) * MIN;
            let mut counter = rng.below(100) as i64;
            let mut t = start + rng.below(60) as i64 * S;
            while t < start + 4 * HOUR {
                if !(gap..gap_end).contains(&t) {
                    counter = if rng.below(20) == 0 {
                        rng.below(10) as i64
                    } else {
                        counter + rng.below(50) as i64
                    };
                    let mut fields: BTreeMap<&'static str, V> = BTreeMap::new();
                    if rng.below(7) != 0 {
                        fields.insert("f", V::F(rng.below(100_000) as f64 / 1000.0));
                    }
                    // Multiples of 1/8: sums of g are exact in any order.
                    fields.insert("g", V::F(rng.below(800) as f64 / 8.0));
                    fields.insert("i", V::I(rng.below(50) as i64 - 20));
                    fields.insert("c", V::I(counter));
                    fields.insert("s", V::S(strings[rng.below(4) as usize].into()));
                    if rng.below(5) != 0 {
                        fields.insert("b", V::B(rng.below(2) == 0));
                    }
                    points.push(Pt {
                        measurement: "sensor".into(),
                        tags: tags.clone(),
                        time: t + k,
                        fields,
                    });
                }
                t += (40 + rng.below(60) as i64) * S;
            }
        }
    }
    // A second measurement from two hosts, for FROM a, b and FROM /re/.
    for h in 0..2 {
        let mut t = start + (h as i64 + 1) * S;
        while t < start + 4 * HOUR {
            let fields: BTreeMap<&'static str, V> = [
                ("f", V::F(rng.below(10_000) as f64 / 100.0)),
                ("i", V::I(rng.below(1000) as i64)),
            ]
            .into();
            points.push(Pt {
                measurement: "sensor_b".into(),
                tags: [("host".to_string(), format!("h{h}"))].into(),
                time: t + 100 + h as i64,
                fields,
            });
            t += (200 + rng.below(200) as i64) * S;
        }
    }
    // Three days old: inside `now() - 5d`, outside `now() - 1d`.
    for j in 0..5 {
        let fields: BTreeMap<&'static str, V> = [
            ("f", V::F(j as f64 + 0.5)),
            ("g", V::F(j as f64)),
            ("i", V::I(j)),
            ("c", V::I(j)),
            ("s", V::S("old".into())),
            ("b", V::B(true)),
        ]
        .into();
        points.push(Pt {
            measurement: "sensor".into(),
            tags: [
                ("host".to_string(), "h0".to_string()),
                ("zone".to_string(), "z0".to_string()),
            ]
            .into(),
            time: (now - 3 * 24 * HOUR) / S * S + j * MIN + 200,
            fields,
        });
    }
    let mut lines = String::new();
    for p in &points {
        let tags: String = p.tags.iter().map(|(k, v)| format!(",{k}={v}")).collect();
        let fields: Vec<String> = p
            .fields
            .iter()
            .map(|(k, v)| match v {
                V::I(i) => format!("{k}={i}i"),
                V::F(f) => format!("{k}={f:?}"),
                V::S(s) => format!("{k}=\"{s}\""),
                V::B(b) => format!("{k}={b}"),
            })
            .collect();
        lines.push_str(&format!(
            "{}{tags} {} {}\n",
            p.measurement,
            fields.join(","),
            p.time
        ));
    }
    (points, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_influxql_function_equals_one_place_evaluation() -> Result<()> {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir()?;
    let (_etcd, etcd_url) = start_etcd(dir.path()).await?;
    let cluster = "fnoracle";
    let init = "shards=8,rf=3,nodes=3";
    let mut nodes = Vec::new();
    for id in 1..=3 {
        nodes.push(Node::start(id, dir.path(), &etcd_url, cluster, init, &[])?);
    }
    let (_router, base) = start_router(dir.path(), &etcd_url, cluster)?;
    let http = reqwest::Client::new();
    wait_writable(&http, &base).await?;

    let seed = std::env::var("ORACLE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ns() as u64);
    eprintln!("influx_functions: seed {seed} (ORACLE_SEED={seed} replays it)");
    let now = now_ns();
    let start = (now - 5 * HOUR) / HOUR * HOUR;
    let (points, lines) = generate(seed, start, now);
    for chunk in lines.lines().collect::<Vec<_>>().chunks(2000) {
        let r = http
            .post(format!("{base}/write?db={DB}"))
            .body(chunk.join("\n"))
            .send()
            .await?;
        ensure!(r.status().as_u16() == 204, "write: {}", r.text().await?);
    }
    eprintln!("wrote {} points in {:?}", points.len(), started.elapsed());

    let mut o = Oracle {
        http,
        base,
        failures: Vec::new(),
        cases: 0,
    };
    // Leaders may still move right after start (the nodes balance them):
    // wait until a statement runs, then every acknowledged point must be
    // counted (no polling on the count itself).
    let total = points.iter().filter(|p| p.measurement == "sensor").count() as i64;
    let q = "SELECT count(g) FROM sensor";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let first = loop {
        match o.result(q).await {
            Err(e) if e.contains("unavailable") && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await
            }
            other => break other,
        }
    };
    let want = vec![Ser {
        name: "sensor".into(),
        tags: vec![],
        rows: vec![vec![Some(V::I(0)), Some(V::I(total))]],
    }];
    o.check("every written point", q, first, want, None);
    // A measurement created by an acknowledged write is read at once.
    let r = o
        .http
        .post(format!("{}/write?db={DB}", o.base))
        .body(format!("fresh,host=a v=7i {}", start + MIN))
        .send()
        .await?;
    ensure!(r.status().as_u16() == 204, "write: {}", r.text().await?);
    let q = "SELECT v FROM fresh";
    let want = vec![Ser {
        name: "fresh".into(),
        tags: vec![],
        rows: vec![vec![Some(V::I(start + MIN)), Some(V::I(7))]],
    }];
    o.case("a new measurement right after its write", q, want, None)
        .await;
    let ctx = cases::Ctx {
        points: &points,
        qs: start + 30 * MIN,
        qe: start + 3 * HOUR + 30 * MIN,
        start,
    };
    cases::run_all(&mut o, &ctx).await;
    eprintln!(
        "influx_functions: {} cases, {} wrong, in {:?} (seed {seed})",
        o.cases,
        o.failures.len(),
        started.elapsed()
    );
    ensure!(
        o.failures.is_empty(),
        "{} of {} /query answers differ from the one-place evaluation (seed {seed}):\n{}",
        o.failures.len(),
        o.cases,
        o.failures.join("\n")
    );
    Ok(())
}
