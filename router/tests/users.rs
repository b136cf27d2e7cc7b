//! InfluxDB users and `SELECT ... INTO` on real parts (etcd, a
//! `shardhouse-node`, two `shardhouse-router` processes with auth on):
//! users created through one router log in through the other (the etcd
//! watch) with v1 `u`/`p` and with Basic auth, get exactly the roles
//! their grants give (SHOW DATABASES lists only what they may read), lose
//! them on REVOKE and a changed password; a
//! plain token keeps working; `SELECT ... INTO` writes what InfluxDB
//! writes and needs the write role on its target.

mod support;

use anyhow::{ensure, Result};
use serde_json::Value;
use std::time::Duration;
use support::poll;

const ADMIN_TOKEN: &str = "users-test-admin-token";

struct Client {
    http: reqwest::Client,
}

/// How a request authenticates.
#[derive(Clone, Copy)]
enum As<'a> {
    Token,
    /// v1 `u` and `p` query parameters.
    UP(&'a str, &'a str),
    Basic(&'a str, &'a str),
}

impl Client {
    fn with(&self, req: reqwest::RequestBuilder, who: As<'_>) -> reqwest::RequestBuilder {
        match who {
            As::Token => req.header("Authorization", format!("Token {ADMIN_TOKEN}")),
            As::UP(u, p) => req.query(&[("u", u), ("p", p)]),
            As::Basic(u, p) => req.basic_auth(u, Some(p)),
        }
    }

    async fn query(&self, base: &str, who: As<'_>, db: &str, q: &str) -> Result<(u16, String)> {
        let req = self
            .http
            .post(format!("{base}/query"))
            .query(&[("db", db), ("q", q)]);
        let r = self.with(req, who).send().await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// The body of a 200 answer, without its closing newline.
    async fn ok(&self, base: &str, who: As<'_>, db: &str, q: &str) -> Result<String> {
        let (status, body) = self.query(base, who, db, q).await?;
        ensure!(status == 200, "{q} answered {status}: {body}");
        Ok(body.trim_end().to_owned())
    }

    async fn write(&self, base: &str, who: As<'_>, db: &str, body: &str) -> Result<u16> {
        let req = self
            .http
            .post(format!("{base}/write"))
            .query(&[("db", db)])
            .body(body.to_owned());
        Ok(self.with(req, who).send().await?.status().as_u16())
    }
}

const OK: &str = r#"{"results":[{"statement_id":0}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn users_log_in_with_their_grants_and_into_writes() -> Result<()> {
    let cluster = support::LocalCluster::builder("users")
        .routers(2)
        .router_args(&["--auth-token", ADMIN_TOKEN])
        .bin_dir(support::bin_dir())
        .start()?;
    let (a, b) = (cluster.routers[0].url(), cluster.routers[1].url());
    let c = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()?,
    };
    poll(
        "a committed warm-up write",
        Duration::from_secs(90),
        || async {
            Ok((c.write(&a, As::Token, "db0", "warm v=1 1000000000").await? == 204).then_some(()))
        },
    )
    .await?;

    users_and_grants(&c, &a, &b).await?;
    select_into(&c, &a).await?;
    Ok(())
}

async fn users_and_grants(c: &Client, a: &str, b: &str) -> Result<()> {
    let empty = r#"{"results":[{"statement_id":0,"series":[{"columns":["user","admin"]}]}]}"#;
    assert_eq!(c.ok(a, As::Token, "", "SHOW USERS").await?, empty);
    // Without credentials, user statements are refused like any other.
    assert_eq!(c.query(a, As::UP("x", "y"), "", "SHOW USERS").await?.0, 401);
    for q in [
        "CREATE USER alice WITH PASSWORD 'pw1'",
        "CREATE USER root WITH PASSWORD 'rootpw' WITH ALL PRIVILEGES",
        "GRANT READ ON db0 TO alice",
    ] {
        assert_eq!(c.ok(a, As::Token, "", q).await?, OK, "{q}");
    }
    assert_eq!(
        c.ok(a, As::Token, "", "SHOW USERS").await?,
        r#"{"results":[{"statement_id":0,"series":[{"columns":["user","admin"],"values":[["alice",false],["root",true]]}]}]}"#
    );
    assert_eq!(
        c.ok(a, As::Token, "", "SHOW GRANTS FOR alice").await?,
        r#"{"results":[{"statement_id":0,"series":[{"columns":["database","privilege"],"values":[["db0","READ"]]}]}]}"#
    );
    assert_eq!(
        c.ok(a, As::Token, "", "CREATE USER alice WITH PASSWORD 'other'")
            .await?,
        r#"{"results":[{"statement_id":0,"error":"user already exists"}]}"#
    );
    assert_eq!(
        c.ok(a, As::Token, "", "DROP USER noone").await?,
        r#"{"results":[{"statement_id":0,"error":"user not found"}]}"#
    );

    // The other router learns the users through the etcd watch.
    let read = "SELECT v FROM warm";
    poll(
        "alice known to the second router",
        Duration::from_secs(10),
        || async {
            Ok((c.query(b, As::UP("alice", "pw1"), "db0", read).await?.0 == 200).then_some(()))
        },
    )
    .await?;
    let body = c.ok(b, As::Basic("alice", "pw1"), "db0", read).await?;
    ensure!(
        body.contains(r#""values":[["1970-01-01T00:00:01Z",1]]"#),
        "{body}"
    );
    assert_eq!(
        c.query(b, As::Basic("alice", "bad"), "db0", read).await?.0,
        401
    );
    // SHOW DATABASES lists a user only what it may read (InfluxDB).
    c.ok(a, As::Token, "", "CREATE DATABASE hidden").await?;
    let listed = c
        .ok(b, As::UP("alice", "pw1"), "", "SHOW DATABASES")
        .await?;
    assert_eq!(
        listed,
        r#"{"results":[{"statement_id":0,"series":[{"name":"databases","columns":["name"],"values":[["db0"]]}]}]}"#
    );
    let all = c.ok(b, As::Token, "", "SHOW DATABASES").await?;
    ensure!(all.contains(r#"["hidden"]"#), "{all}");
    assert_eq!(
        c.query(b, As::UP("alice", "pw1"), "other", read).await?.0,
        403
    );
    assert_eq!(
        c.query(b, As::UP("alice", "pw1"), "", "DROP DATABASE db0")
            .await?
            .0,
        403
    );
    assert_eq!(
        c.write(b, As::UP("alice", "pw1"), "db0", "m v=1").await?,
        403
    );
    // Admin user: everything; a token after any user name still a token.
    assert_eq!(
        c.write(b, As::Basic("root", "rootpw"), "db0", "m v=1")
            .await?,
        204
    );
    assert_eq!(
        c.write(b, As::Basic("client", ADMIN_TOKEN), "db0", "m v=1")
            .await?,
        204
    );

    // GRANT WRITE replaces READ; a new password retires the old one.
    c.ok(
        a,
        As::UP("root", "rootpw"),
        "",
        "GRANT WRITE ON db0 TO alice",
    )
    .await?;
    c.ok(a, As::Token, "", "SET PASSWORD FOR alice = 'pw2'")
        .await?;
    poll(
        "the new password on the second router",
        Duration::from_secs(10),
        || async {
            Ok((c.write(b, As::UP("alice", "pw2"), "db0", "m v=2").await? == 204).then_some(()))
        },
    )
    .await?;
    assert_eq!(
        c.query(b, As::UP("alice", "pw1"), "db0", read).await?.0,
        401
    );
    assert_eq!(
        c.query(b, As::UP("alice", "pw2"), "db0", read).await?.0,
        403
    );
    c.ok(a, As::Token, "", "REVOKE WRITE ON db0 FROM alice")
        .await?;
    assert_eq!(
        c.ok(a, As::Token, "", "SHOW GRANTS FOR alice").await?,
        r#"{"results":[{"statement_id":0,"series":[{"columns":["database","privilege"],"values":[["db0","NO PRIVILEGES"]]}]}]}"#
    );
    c.ok(a, As::Token, "", "DROP USER alice").await?;
    poll(
        "alice gone from the second router",
        Duration::from_secs(10),
        || async {
            Ok((c.write(b, As::UP("alice", "pw2"), "db0", "m v=3").await? == 401).then_some(()))
        },
    )
    .await
}

async fn select_into(c: &Client, a: &str) -> Result<()> {
    let lines = "src,host=h1,dc=x v=1 1000000000\nsrc,host=h2,dc=y v=2,w=5i 2000000000\n";
    assert_eq!(c.write(a, As::Token, "db0", lines).await?, 204);
    let written = |n: usize| {
        format!(
            r#"{{"results":[{{"statement_id":0,"series":[{{"name":"result","columns":["time","written"],"values":[["1970-01-01T00:00:00Z",{n}]]}}]}}]}}"#
        )
    };
    // GROUP BY host keeps host a tag; dc becomes a field.
    assert_eq!(
        c.ok(
            a,
            As::Token,
            "db0",
            "SELECT * INTO copy FROM src GROUP BY host"
        )
        .await?,
        written(2)
    );
    assert_eq!(
        c.ok(a, As::Token, "db0", "SELECT * FROM copy GROUP BY *")
            .await?,
        r#"{"results":[{"statement_id":0,"series":[{"name":"copy","tags":{"host":"h1"},"columns":["time","dc","v","w"],"values":[["1970-01-01T00:00:01Z","x",1,null]]},{"name":"copy","tags":{"host":"h2"},"columns":["time","dc","v","w"],"values":[["1970-01-01T00:00:02Z","y",2,5]]}]}]}"#
    );
    // Another database as target, the source's name kept.
    c.ok(a, As::Token, "", "CREATE DATABASE db1").await?;
    assert_eq!(
        c.ok(
            a,
            As::Token,
            "db0",
            "SELECT max(v) INTO db1..:MEASUREMENT FROM src"
        )
        .await?,
        written(1)
    );
    let body = c.ok(a, As::Token, "db1", "SELECT * FROM src").await?;
    let v: Value = serde_json::from_str(&body)?;
    assert_eq!(v["results"][0]["series"][0]["values"][0][1], 2, "{body}");
    // A read-only user may not write through INTO.
    c.ok(a, As::Token, "", "CREATE USER reader WITH PASSWORD 'r'")
        .await?;
    c.ok(a, As::Token, "", "GRANT READ ON db0 TO reader")
        .await?;
    let (status, body) = c
        .query(
            a,
            As::UP("reader", "r"),
            "db0",
            "SELECT * INTO copy2 FROM src",
        )
        .await?;
    assert_eq!(status, 403, "{body}");
    Ok(())
}
