//! Issue 14's read-only rule, through every door a query can take: every
//! table function and every non-SELECT statement is refused with a 400
//! (by `/api/v1/sql`, also with `per_shard=true`; by a node's gRPC `Query`
//! whether or not the request says the router planned it), and nothing
//! runs: the table keeps its rows, no file appears, no setting changes.
//! InfluxQL `/query` builds its SQL itself: names, tag values and regexes
//! that try to break out of their quotes read as data. Real parts: etcd,
//! one `shardhouse-node` (4 shards), the `shardhouse-router` binary.

mod support;

use std::path::Path;

use anyhow::{ensure, Result};
use serde_json::Value;
use shardhouse_common::proto::node_client::NodeClient;
use shardhouse_common::proto::QueryRequest;
use shardhouse_router::sql_check::FORBIDDEN_FUNCTIONS;
use support::{start_etcd, start_router, wait_writable, Node};

const DB: &str = "ro";
const POINTS: usize = 40;

struct Stack {
    http: reqwest::Client,
    base: String,
}

impl Stack {
    async fn sql(&self, q: &str, per_shard: bool) -> Result<(u16, String)> {
        let mut params = vec![("db", DB), ("q", q)];
        if per_shard {
            params.push(("per_shard", "true"));
        }
        let r = self
            .http
            .get(format!("{}/api/v1/sql", self.base))
            .query(&params)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    async fn influxql(&self, q: &str) -> Result<(u16, String)> {
        let r = self
            .http
            .get(format!("{}/query", self.base))
            .query(&[("db", DB), ("q", q)])
            .send()
            .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// The points of `cpu`, counted through InfluxQL.
    async fn count(&self) -> Result<u64> {
        let (status, body) = self.influxql("SELECT count(usage) FROM cpu").await?;
        ensure!(status == 200, "count: {status} {body}");
        let v: Value = serde_json::from_str(&body)?;
        Ok(v["results"][0]["series"][0]["values"][0][1]
            .as_u64()
            .unwrap_or(0))
    }
}

/// Statements that are not one plain SELECT, each with a word the refusal
/// must name. `{m}` is a marker file that must never appear.
fn not_select(marker: &Path) -> Vec<(String, &'static str)> {
    let m = marker.display();
    [
        (
            "INSERT INTO cpu (time, series_id) VALUES (now(), 1)",
            "INSERT",
        ),
        ("CREATE TABLE x (a Int8) ENGINE = Memory", "CREATE"),
        ("DROP TABLE cpu", "DROP"),
        ("ALTER TABLE cpu DELETE WHERE 1", "ALTER"),
        ("TRUNCATE TABLE cpu", "TRUNCATE"),
        ("OPTIMIZE TABLE cpu FINAL", "OPTIMIZE"),
        ("SYSTEM FLUSH LOGS", "SYSTEM"),
        ("SET max_threads = 1", "SET"),
        ("KILL QUERY WHERE 1", "KILL"),
        ("DETACH TABLE cpu", "DETACH"),
        ("RENAME TABLE cpu TO cpu2", "RENAME"),
        ("USE system", "USE"),
        ("SELECT 1; DROP TABLE cpu", "one statement"),
        ("SELECT 1 SETTINGS readonly = 0", "SETTINGS"),
    ]
    .into_iter()
    .map(|(q, w)| (q.to_string(), w))
    .chain([(format!("SELECT 1 INTO OUTFILE '{m}'"), "OUTFILE")])
    .collect()
}

/// A call of table function `f` that would touch `marker` if it ran.
fn table_function_call(f: &str, marker: &Path) -> String {
    match f {
        "executable" | "executablepool" => format!(
            "SELECT * FROM {f}('touch {}', 'TSV', 'x String')",
            marker.display()
        ),
        _ => format!("SELECT * FROM {f}('{}')", marker.display()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_but_one_select_runs_through_any_door() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (_etcd, etcd_url) = start_etcd(dir.path()).await?;
    let node = Node::start(1, dir.path(), &etcd_url, "ro", "shards=4,rf=1,nodes=1", &[])?;
    let (_router, base) = start_router(dir.path(), &etcd_url, "ro")?;
    let s = Stack {
        http: reqwest::Client::new(),
        base,
    };
    wait_writable(&s.http, &s.base).await?;
    let lines: Vec<String> = (0..POINTS)
        .map(|i| {
            format!(
                "cpu,host=h{} usage={i} {}",
                i % 8,
                1_700_000_000_000_000_000i64 + i as i64
            )
        })
        .collect();
    let r = s
        .http
        .post(format!("{}/write?db={DB}", s.base))
        .body(lines.join("\n"))
        .send()
        .await?;
    ensure!(r.status().as_u16() == 204, "write: {}", r.text().await?);
    ensure!(s.count().await? == POINTS as u64, "points before");
    let marker = dir.path().join("marker");

    // 1. /api/v1/sql, fan-out and per shard: every table function.
    ensure!(FORBIDDEN_FUNCTIONS.len() >= 20, "the list shrank");
    for f in FORBIDDEN_FUNCTIONS {
        let q = table_function_call(f, &marker);
        for per_shard in [false, true] {
            let (status, text) = s.sql(&q, per_shard).await?;
            ensure!(
                status == 400 && text.to_lowercase().contains(f),
                "{q} (per_shard={per_shard}): {status} {text}"
            );
        }
        // Hidden in an expression, a subquery, a JOIN, mixed case.
        let upper = f.to_uppercase();
        for q in [
            format!(
                "SELECT (SELECT count() FROM {upper}('{}'))",
                marker.display()
            ),
            format!("SELECT usage FROM cpu WHERE series_id IN (SELECT 1 FROM {f}('x'))"),
        ] {
            let (status, text) = s.sql(&q, false).await?;
            ensure!(status == 400, "{q}: {status} {text}");
        }
    }

    // 2. /api/v1/sql: every non-SELECT statement.
    for (q, word) in not_select(&marker) {
        for per_shard in [false, true] {
            let (status, text) = s.sql(&q, per_shard).await?;
            ensure!(
                status == 400 && text.to_lowercase().contains(&word.to_lowercase()),
                "{q} (per_shard={per_shard}): {status} {text}"
            );
        }
    }

    // 3. A node's gRPC Query, user SQL and "planned" alike: the flag that
    // spares the router's own statements the engine parse is no way round.
    let mut client = NodeClient::connect(format!("http://{}", node.grpc)).await?;
    let mut refused = 0;
    let forbidden = FORBIDDEN_FUNCTIONS
        .iter()
        .map(|f| table_function_call(f, &marker))
        .chain(not_select(&marker).into_iter().map(|(q, _)| q));
    for sql in forbidden {
        for planned in [false, true] {
            for shard in 0..4 {
                let r = client
                    .query(QueryRequest {
                        shard,
                        sql: sql.clone(),
                        database: DB.into(),
                        planned,
                        ..Default::default()
                    })
                    .await;
                match r {
                    Err(status) => {
                        ensure!(
                            status.code() == tonic::Code::InvalidArgument,
                            "{sql} (planned={planned}) on shard {shard}: {status:?}"
                        );
                        refused += 1;
                    }
                    Ok(_) => anyhow::bail!("{sql} (planned={planned}) ran on shard {shard}"),
                }
            }
        }
    }
    ensure!(refused > 0);

    // 4. InfluxQL: quotes, backquotes and regexes stay data.
    for q in [
        r#"SELECT usage FROM "cpu` FINAL; DROP TABLE cpu --""#,
        r#"SELECT usage FROM cpu WHERE host = 'h1'' OR 1=1 --'"#,
        r#"SELECT usage FROM cpu WHERE host = 'x\' OR file(\'/etc/passwd\') = \''"#,
        r#"SELECT usage FROM cpu WHERE host =~ /'); DROP TABLE cpu --/"#,
        r#"SELECT "usage` FROM file('/etc/passwd') --" FROM cpu"#,
        r#"SHOW TAG VALUES FROM cpu WITH KEY = "host'); DROP TABLE cpu --""#,
        r#"DROP MEASUREMENT "cpu`; DROP TABLE cpu --""#,
    ] {
        let (status, body) = s.influxql(q).await?;
        ensure!(status == 200 || status == 400, "{q}: {status} {body}");
        let v: Value = serde_json::from_str(&body)?;
        let rows = v["results"][0]["series"][0]["values"]
            .as_array()
            .map_or(0, Vec::len);
        ensure!(rows == 0, "{q} answered rows: {body}");
    }
    // (`SELECT ... INTO` is a write, through the write path and the write
    // role: router/tests/users.rs checks it, not this read-only test.)

    // Nothing ran.
    ensure!(s.count().await? == POINTS as u64, "points after");
    ensure!(
        !marker.exists(),
        "a refused statement touched {}",
        marker.display()
    );
    let (status, text) = s.sql("SELECT name FROM system.tables", false).await?;
    ensure!(
        status != 200 || !text.contains("cpu2"),
        "a table appeared: {text}"
    );
    Ok(())
}
