//! A tiny HTTP sink that stands in for a server while developing the load
//! generator and in this crate's unit tests: it answers line protocol writes
//! with 204, remembers the `v` field of each point per measurement, and
//! answers `SELECT v FROM <m> FINAL` on `/api/v1/sql`. It can be told to
//! lose points, to check that `verify` notices.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
pub struct SinkState {
    pub values: Mutex<HashMap<String, Vec<f64>>>,
    pub requests: AtomicU64,
    pub points: AtomicU64,
    /// Acknowledge but forget every Nth write request (0 = never).
    pub lose_every: AtomicU64,
    /// Answer every Nth write request with 503 (0 = never).
    pub fail_every: AtomicU64,
}

/// Binds `addr` and serves until the task is dropped.
pub async fn serve(
    addr: &str,
    state: Arc<SinkState>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let l = TcpListener::bind(addr).await?;
    let local = l.local_addr()?;
    let h = tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let st = state.clone();
            tokio::spawn(async move {
                let _ = conn(s, st).await;
            });
        }
    });
    Ok((local, h))
}

async fn conn(s: TcpStream, st: Arc<SinkState>) -> std::io::Result<()> {
    let _ = s.set_nodelay(true);
    let mut r = BufReader::new(s);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let target = parts.next().unwrap_or("").to_string();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).await?;
        let (status, resp) = handle(&method, &target, &body, &st);
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\ncontent-type: application/json\r\n\r\n",
            resp.len()
        );
        r.get_mut().write_all(head.as_bytes()).await?;
        r.get_mut().write_all(resp.as_bytes()).await?;
    }
}

fn handle(method: &str, target: &str, body: &[u8], st: &SinkState) -> (&'static str, String) {
    if method == "GET" && target.starts_with("/api/v1/sql") {
        let q = target.split_once("q=").map(|x| x.1).unwrap_or("");
        let q = percent_decode(q);
        // Only the verify query shape: SELECT v FROM <m> FINAL
        let m = q
            .split_whitespace()
            .skip_while(|w| !w.eq_ignore_ascii_case("FROM"))
            .nth(1)
            .unwrap_or("");
        let vals = st.values.lock().unwrap_or_else(|e| e.into_inner());
        let rows: Vec<serde_json::Value> = vals
            .get(m.trim_matches('"'))
            .map(|v| {
                v.iter()
                    .map(|x| serde_json::json!({"shard": 0, "v": x}))
                    .collect()
            })
            .unwrap_or_default();
        return ("200 OK", serde_json::json!({ "data": rows }).to_string());
    }
    if method != "POST" {
        return ("200 OK", "{}".into());
    }
    let n = st.requests.fetch_add(1, Ordering::Relaxed) + 1;
    let fail = st.fail_every.load(Ordering::Relaxed);
    if fail > 0 && n.is_multiple_of(fail) {
        return (
            "503 Service Unavailable",
            "{\"error\":\"sink told to fail\"}".into(),
        );
    }
    let lose = st.lose_every.load(Ordering::Relaxed);
    let text = String::from_utf8_lossy(body);
    let mut points = 0;
    let mut vals = st.values.lock().unwrap_or_else(|e| e.into_inner());
    for line in text.lines().filter(|l| !l.is_empty()) {
        points += 1;
        if lose > 0 && n.is_multiple_of(lose) {
            continue;
        }
        let meas = line.split([',', ' ']).next().unwrap_or("").to_string();
        let v = line
            .split(' ')
            .nth(1)
            .and_then(|f| f.split(',').find_map(|kv| kv.strip_prefix("v=")))
            .and_then(|v| v.trim_end_matches('i').parse::<f64>().ok());
        if let Some(v) = v {
            vals.entry(meas).or_default().push(v);
        }
    }
    st.points.fetch_add(points, Ordering::Relaxed);
    ("204 No Content", String::new())
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
