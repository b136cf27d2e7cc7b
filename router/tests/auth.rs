//! Locked doors on a real cluster (etcd, a `shardhouse-node` that requires
//! the cluster credential, the `shardhouse-router` binary): the router's
//! HTTP and gRPC listeners on TLS with a certificate made here (a client
//! with the CA gets in, one without does not, a renewed certificate is
//! picked up), each role allowed only its endpoints, database-scoped
//! tokens, a write rate limit answering 429 with Retry-After, and a
//! rewritten tokens file used without a restart.

mod support;

use anyhow::{ensure, Context, Result};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use shardhouse_common::ingest_proto::ingest_client::IngestClient;
use shardhouse_common::ingest_proto::{field, Field, Point, WriteRequest};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{field as ready_field, poll, spawn_ready, start_etcd, Node, Proc};

const CLUSTER_TOKEN: &str = "router-test-cluster-token-0123";

/// A CA and a server certificate for 127.0.0.1 signed by it (PEM).
struct Pki {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

fn pki() -> Result<Pki> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?
        .signed_by(&key, &ca)?;
    Ok(Pki {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

fn install(pki: &Pki, dir: &Path) -> Result<()> {
    // Key first, then the certificate: the router reloads once both changed
    // and keeps the old pair while they do not go together.
    std::fs::write(dir.join("tls.key"), &pki.key_pem)?;
    std::fs::write(dir.join("tls.crt"), &pki.cert_pem)?;
    Ok(())
}

fn https_client(ca_pem: Option<&str>) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(Duration::from_secs(20));
    if let Some(ca) = ca_pem {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes())?);
    }
    Ok(b.build()?)
}

const TOKENS: &str = r#"
[[tokens]]
name = "ingest"
token = "writer-token-1"
roles = ["write"]

[[tokens]]
name = "grafana"
token = "reader-token-1"
roles = ["read"]

[[tokens]]
name = "ops"
token = "admin-token-1"
roles = ["admin"]

[[tokens]]
name = "scoped"
token = "scoped-token-1"
roles = ["write", "read"]
databases = ["scoped"]

[[tokens]]
name = "slow"
token = "slow-token-1"
roles = ["write"]
write_requests_per_sec = 0.2
"#;

struct Cluster {
    base: String,
    ca_pem: String,
    grpc: String,
    http: reqwest::Client,
    dir: tempfile::TempDir,
    _router: Proc,
    _node: Node,
    _etcd: Proc,
}

async fn start() -> Result<(Cluster, Pki)> {
    let dir = tempfile::tempdir()?;
    let secrets = dir.path().join("secrets");
    std::fs::create_dir_all(&secrets)?;
    let cluster_token = secrets.join("cluster-token");
    std::fs::write(&cluster_token, CLUSTER_TOKEN)?;
    std::fs::write(secrets.join("tokens.toml"), TOKENS)?;
    let pki = pki()?;
    install(&pki, &secrets)?;

    let (etcd, etcd_url) = start_etcd(dir.path()).await?;
    let token_arg = cluster_token.display().to_string();
    let node = Node::start(
        1,
        dir.path(),
        &etcd_url,
        "auth",
        "shards=2,rf=1,nodes=1",
        &["--cluster-token-file", &token_arg],
    )?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_shardhouse-router"));
    cmd.args([
        "--http-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
    ])
    .args(["--etcd-endpoints", &etcd_url, "--cluster", "auth"])
    .args(["--cluster-token-file", &token_arg])
    .arg("--tokens-file")
    .arg(secrets.join("tokens.toml"))
    .arg("--tls-cert-file")
    .arg(secrets.join("tls.crt"))
    .arg("--tls-key-file")
    .arg(secrets.join("tls.key"));
    let (router, ready) = spawn_ready(cmd, "shardhouse-router", dir.path().join("router.log"))?;
    let c = Cluster {
        base: format!("https://{}", ready_field(&ready, "http")?),
        ca_pem: pki.ca_pem.clone(),
        grpc: ready_field(&ready, "grpc")?,
        http: https_client(Some(&pki.ca_pem))?,
        dir,
        _router: router,
        _node: node,
        _etcd: etcd,
    };
    // Writes commit once the node leads both shards; the router presents
    // the cluster credential the node requires.
    poll("a committed write", Duration::from_secs(90), || async {
        let r = c
            .http
            .post(format!("{}/write?db=warmup", c.base))
            .header("authorization", "Token writer-token-1")
            .body("w v=1 1\n")
            .send()
            .await?;
        Ok((r.status().as_u16() == 204).then_some(()))
    })
    .await?;
    Ok((c, pki))
}

impl Cluster {
    async fn send(
        &self,
        token: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, String)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .body(body);
        if path.starts_with("/api/v1/prom/write") {
            req = req.header("content-encoding", "snappy");
        }
        if let Some(t) = token {
            req = req.header("authorization", format!("Token {t}"));
        }
        let resp = req.send().await?;
        Ok((resp.status().as_u16(), resp.text().await?))
    }
}

fn msgpack_body() -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct P<'a> {
        measurement: &'a str,
        tags: std::collections::BTreeMap<&'a str, &'a str>,
        fields: std::collections::BTreeMap<&'a str, f64>,
    }
    rmp_serde::to_vec_named(&vec![P {
        measurement: "m",
        tags: [("host", "a")].into(),
        fields: [("v", 1.0)].into(),
    }])
    .expect("msgpack")
}

fn remote_write_body() -> Vec<u8> {
    use shardhouse_common::prom_proto::{Label, Sample, TimeSeries, WriteRequest};
    let req = WriteRequest {
        timeseries: vec![TimeSeries {
            labels: vec![Label {
                name: "__name__".into(),
                value: "up".into(),
            }],
            samples: vec![Sample {
                value: 1.0,
                timestamp: 1_700_000_000_000,
            }],
        }],
    };
    snap::raw::Encoder::new()
        .compress_vec(&prost::Message::encode_to_vec(&req))
        .expect("snappy")
}

/// (what, method, path, body, the one role allowed).
fn endpoints() -> Vec<(&'static str, reqwest::Method, String, Vec<u8>, &'static str)> {
    use reqwest::Method as M;
    let q = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    vec![
        (
            "v1 write",
            M::POST,
            "/write?db=d".into(),
            b"m v=1\n".to_vec(),
            "write",
        ),
        (
            "v2 write",
            M::POST,
            "/api/v2/write?bucket=d".into(),
            b"m v=2\n".to_vec(),
            "write",
        ),
        (
            "msgpack",
            M::POST,
            "/api/v1/write/msgpack?db=d".into(),
            msgpack_body(),
            "write",
        ),
        (
            "remote_write",
            M::POST,
            "/api/v1/prom/write?db=d".into(),
            remote_write_body(),
            "write",
        ),
        (
            "SELECT",
            M::GET,
            format!("/query?db=d&q={}", q("SELECT * FROM m")),
            vec![],
            "read",
        ),
        (
            "SHOW",
            M::GET,
            format!("/query?db=d&q={}", q("SHOW MEASUREMENTS")),
            vec![],
            "read",
        ),
        (
            "sql",
            M::GET,
            format!("/api/v1/sql?db=d&q={}", q("SELECT count() FROM m")),
            vec![],
            "read",
        ),
        (
            "CREATE DATABASE",
            M::POST,
            format!("/query?q={}", q("CREATE DATABASE made")),
            vec![],
            "admin",
        ),
        (
            "DROP SERIES",
            M::POST,
            format!("/query?db=d&q={}", q("DROP SERIES FROM nothing")),
            vec![],
            "admin",
        ),
        (
            "DELETE",
            M::POST,
            format!("/query?db=d&q={}", q("DELETE FROM nothing WHERE time < 0")),
            vec![],
            "admin",
        ),
        (
            "DROP MEASUREMENT",
            M::POST,
            format!("/query?db=d&q={}", q("DROP MEASUREMENT nothing")),
            vec![],
            "admin",
        ),
        (
            "databases POST",
            M::POST,
            "/api/v1/databases?db=made2".into(),
            vec![],
            "admin",
        ),
        (
            "drop_measurement",
            M::POST,
            "/api/v1/drop_measurement?db=d&measurement=nothing".into(),
            vec![],
            "admin",
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_roles_and_rate_limits() -> Result<()> {
    let started = Instant::now();
    let (c, pki) = start().await?;

    // TLS: a client without the CA cannot connect; plain HTTP gets nothing.
    let untrusting = https_client(None)?;
    let err = untrusting
        .get(format!("{}/ping", c.base))
        .send()
        .await
        .expect_err("a client without the CA was served");
    ensure!(
        format!("{err:?}").to_lowercase().contains("certificate"),
        "the failure should be the certificate: {err:?}"
    );
    let plain = reqwest::Client::new()
        .get(c.base.replacen("https://", "http://", 1) + "/ping")
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    ensure!(
        !matches!(&plain, Ok(r) if r.status().is_success()),
        "plain HTTP was served on the TLS port: {plain:?}"
    );

    // Each role only its endpoints: 2xx with it, 403 naming it without.
    let tokens = [
        ("write", "writer-token-1"),
        ("read", "reader-token-1"),
        ("admin", "admin-token-1"),
    ];
    for (what, method, path, body, role) in endpoints() {
        for (has, token) in tokens {
            let (status, text) = c
                .send(Some(token), method.clone(), &path, body.clone())
                .await?;
            if has == role {
                ensure!(
                    (200..300).contains(&status),
                    "{what} with the {has} token: {status} {text}"
                );
            } else {
                ensure!(
                    status == 403 && text.contains(&format!("`{role}` role")),
                    "{what} with the {has} token should be 403 naming `{role}`: {status} {text}"
                );
            }
        }
        let (status, text) = c.send(None, method.clone(), &path, body.clone()).await?;
        ensure!(status == 401, "{what} without a token: {status} {text}");
        let (status, _) = c.send(Some("not-a-token"), method, &path, body).await?;
        ensure!(status == 401, "{what} with an unknown token: {status}");
    }

    // A token limited to a database.
    let post = reqwest::Method::POST;
    let (s, _) = c
        .send(
            Some("scoped-token-1"),
            post.clone(),
            "/write?db=scoped",
            b"m v=1\n".to_vec(),
        )
        .await?;
    ensure!(s == 204, "scoped write to its database: {s}");
    let (s, text) = c
        .send(
            Some("scoped-token-1"),
            post.clone(),
            "/write?db=other",
            b"m v=1\n".to_vec(),
        )
        .await?;
    ensure!(
        s == 403 && text.contains("`other`"),
        "scoped write elsewhere: {s} {text}"
    );
    let sel = format!(
        "/query?db=scoped&q={}",
        form_urlencoded::byte_serialize(b"SELECT * FROM other..m").collect::<String>()
    );
    let (s, text) = c
        .send(Some("scoped-token-1"), reqwest::Method::GET, &sel, vec![])
        .await?;
    ensure!(
        s == 403 && text.contains("`other`"),
        "a statement naming another database: {s} {text}"
    );

    // Write rate limit: 0.2 requests/s, so the second write at once is 429.
    let (s, _) = c
        .send(
            Some("slow-token-1"),
            post.clone(),
            "/write?db=d",
            b"m v=1\n".to_vec(),
        )
        .await?;
    ensure!(s == 204, "first limited write: {s}");
    let resp = c
        .http
        .post(format!("{}/write?db=d", c.base))
        .header("authorization", "Token slow-token-1")
        .body("m v=2\n")
        .send()
        .await?;
    ensure!(
        resp.status().as_u16() == 429,
        "second limited write: {}",
        resp.status()
    );
    let retry: u64 = resp
        .headers()
        .get("retry-after")
        .context("429 without Retry-After")?
        .to_str()?
        .parse()?;
    ensure!((1..=5).contains(&retry), "Retry-After {retry}");

    grpc_over_tls(&c, &pki.ca_pem).await?;
    tokens_reload(&c).await?;
    reload(&c).await?;
    eprintln!("auth test took {:?}", started.elapsed());
    Ok(())
}

/// gRPC ingest over TLS: the write role writes, the read role is refused.
async fn grpc_over_tls(c: &Cluster, ca_pem: &str) -> Result<()> {
    let channel = tls_channel(&c.grpc, ca_pem).await?;
    let point = Point {
        measurement: "g".into(),
        fields: vec![Field {
            key: "v".into(),
            value: Some(field::Value::FloatValue(1.0)),
        }],
        ..Default::default()
    };
    let write = |token: &str| {
        let mut req = tonic::Request::new(WriteRequest {
            database: "d".into(),
            points: vec![point.clone()],
            ..Default::default()
        });
        req.metadata_mut()
            .insert("authorization", format!("Token {token}").parse().unwrap());
        req
    };
    let mut client = IngestClient::new(channel);
    let ok = client.write(write("writer-token-1")).await?;
    ensure!(ok.into_inner().points_written == 1, "gRPC write over TLS");
    let denied = client.write(write("reader-token-1")).await.unwrap_err();
    ensure!(
        denied.code() == tonic::Code::PermissionDenied && denied.message().contains("`write` role"),
        "gRPC write with the read token: {denied:?}"
    );
    Ok(())
}

async fn tls_channel(addr: &str, ca_pem: &str) -> Result<tonic::transport::Channel> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(
        ca_pem.as_bytes(),
    )?)?;
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let addr = addr.to_owned();
    let connect = tower::service_fn(move |_: http::Uri| {
        let (connector, addr) = (connector.clone(), addr.clone());
        async move {
            let tcp = tokio::net::TcpStream::connect(&addr).await?;
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")
                .map_err(std::io::Error::other)?;
            let tls = connector.connect(name, tcp).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
        }
    });
    Ok(tonic::transport::Endpoint::from_static("http://127.0.0.1")
        .connect_with_connector(connect)
        .await?)
}

/// A rewritten tokens file (a rotated Secret) is used without a restart:
/// the replaced token is refused and its successor let in.
async fn tokens_reload(c: &Cluster) -> Result<()> {
    let rotated = TOKENS.replace("reader-token-1", "reader-token-2");
    let file = c.dir.path().join("secrets").join("tokens.toml");
    // As the kubelet updates a mounted Secret: a new file renamed over.
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, rotated)?;
    std::fs::rename(&tmp, &file)?;
    let t0 = Instant::now();
    let get = reqwest::Method::GET;
    poll(
        "the rotated token accepted",
        Duration::from_secs(10),
        || async {
            let (s, _) = c
                .send(
                    Some("reader-token-2"),
                    get.clone(),
                    "/api/v1/databases",
                    vec![],
                )
                .await?;
            Ok((s == 200).then_some(()))
        },
    )
    .await?;
    let (s, text) = c
        .send(
            Some("reader-token-1"),
            get.clone(),
            "/api/v1/databases",
            vec![],
        )
        .await?;
    ensure!(s == 401, "the replaced token after the reload: {s} {text}");
    let (s, _) = c
        .send(Some("writer-token-1"), get, "/api/v1/databases", vec![])
        .await?;
    ensure!(s == 403, "an unchanged token keeps its roles: {s}");
    eprintln!("tokens file reloaded within {:?}", t0.elapsed());
    Ok(())
}

/// A renewed certificate from another CA is served once the files change.
async fn reload(c: &Cluster) -> Result<()> {
    let renewed = pki()?;
    install(&renewed, &c.dir.path().join("secrets"))?;
    let new_client = https_client(Some(&renewed.ca_pem))?;
    poll(
        "the renewed certificate served",
        Duration::from_secs(20),
        || async {
            Ok(new_client
                .get(format!("{}/ping", c.base))
                .send()
                .await
                .is_ok()
                .then_some(()))
        },
    )
    .await?;
    // A fresh client: the old one's pooled connection keeps its session.
    let old = https_client(Some(&c.ca_pem))?
        .get(format!("{}/ping", c.base))
        .send()
        .await;
    ensure!(
        old.is_err(),
        "the old CA still verifies after the reload: {old:?}"
    );
    Ok(())
}
