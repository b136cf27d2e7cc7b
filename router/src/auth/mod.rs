//! Who may do what at the router: tokens with roles (write, read, admin),
//! optionally limited to some databases and to a write rate. The decisions
//! are pure functions over the configured grants ([`decide`], the token
//! buckets in [`rate`], [`statement::required_role`]); the HTTP and gRPC
//! front doors only extract the presented token and call [`Authorizer`].
//!
//! Configuration (docs/operations.md "Tokens and roles"): `auth_tokens` keeps
//! its old meaning, tokens with every role and no limit; `[[tokens]]` tables
//! (in the router's config or in `tokens_file`) add roles and limits. With
//! no token configured at all, auth is off.
//!
//! InfluxDB users ([`users`], stored in etcd by [`users_etcd`]) are a
//! second kind of credential while auth is on: a user name with its
//! password (v1 `u`/`p`, Basic) is checked against them, and their grants
//! map onto the same roles.

mod presented;
pub mod rate;
pub mod statement;
pub mod users;
pub mod users_etcd;

pub use presented::{grpc_token, presented_token};

use crate::error::{Error, Result};
use parking_lot::{Mutex, RwLock};
use rate::{Rate, TokenBucket};
use serde::{Deserialize, Serialize};
use shardhouse_common::credential::constant_time_eq;
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use users::{UserCache, UserRecord};

/// What a request needs. Roles do not imply each other: a token that should
/// read and write lists both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// `/write`, `/api/v2/write`, msgpack, remote_write, gRPC `Write`.
    Write,
    /// `/query` SELECT and SHOW, `/api/v1/sql`.
    Read,
    /// Database create/drop, DROP MEASUREMENT/SERIES, DELETE, storage admin.
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Write, Role::Read, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Write => "write",
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[tokens]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    /// Named in errors, logs and metrics instead of the secret.
    pub name: String,
    pub token: String,
    pub roles: Vec<Role>,
    /// Databases the token may use; empty = all.
    #[serde(default)]
    pub databases: Vec<String>,
    /// Points per second this token may write (token bucket); None = no limit.
    #[serde(default)]
    pub write_points_per_sec: Option<f64>,
    /// Write requests per second; None = no limit.
    #[serde(default)]
    pub write_requests_per_sec: Option<f64>,
    /// Bucket size in seconds of the rates above (how long a burst at
    /// full speed may last after an idle spell); default 1.
    #[serde(default)]
    pub burst_secs: Option<f64>,
}

/// A `tokens_file`: nothing but `[[tokens]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    tokens: Vec<TokenSpec>,
}

/// A configured token as the decisions see it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub name: String,
    token: Vec<u8>,
    pub roles: BTreeSet<Role>,
    /// None = every database.
    pub databases: Option<BTreeSet<String>>,
    pub points: Option<Rate>,
    pub requests: Option<Rate>,
}

impl Grant {
    fn from_spec(s: &TokenSpec) -> Result<Grant> {
        let bad = |m: String| Err(Error::Config(format!("token `{}`: {m}", s.name)));
        if s.name.trim().is_empty() {
            return Err(Error::Config(
                "every [[tokens]] entry needs a `name` (used in errors and logs)".into(),
            ));
        }
        if s.token.len() < 8 {
            return bad("`token` must be at least 8 characters".into());
        }
        if s.roles.is_empty() {
            return bad("`roles` must list at least one of write, read, admin".into());
        }
        let burst = s.burst_secs.unwrap_or(1.0);
        let rate = |what: &str, v: Option<f64>| -> Result<Option<Rate>> {
            match v {
                None => Ok(None),
                Some(r) if r > 0.0 && r.is_finite() && burst > 0.0 && burst.is_finite() => {
                    Ok(Some(Rate::new(r, burst)))
                }
                Some(r) => Err(Error::Config(format!(
                    "token `{}`: {what} {r} and burst_secs {burst} must be positive numbers",
                    s.name
                ))),
            }
        };
        Ok(Grant {
            name: s.name.clone(),
            token: s.token.as_bytes().to_vec(),
            roles: s.roles.iter().copied().collect(),
            databases: (!s.databases.is_empty()).then(|| s.databases.iter().cloned().collect()),
            points: rate("write_points_per_sec", s.write_points_per_sec)?,
            requests: rate("write_requests_per_sec", s.write_requests_per_sec)?,
        })
    }

    /// `auth_tokens` entries: every role, every database, no limit.
    fn all_roles(index: usize, token: &str) -> Grant {
        Grant {
            name: format!("auth_tokens[{index}]"),
            token: token.as_bytes().to_vec(),
            roles: Role::ALL.into_iter().collect(),
            databases: None,
            points: None,
            requests: None,
        }
    }
}

/// Why a request was refused, before it is turned into a status.
#[derive(Debug, Clone, PartialEq)]
pub enum Denied {
    Missing,
    Invalid,
    Role {
        token: String,
        need: Role,
        has: Vec<Role>,
    },
    Database {
        token: String,
        database: String,
    },
}

impl From<Denied> for Error {
    fn from(d: Denied) -> Error {
        match d {
            Denied::Missing => Error::Unauthorized(
                "send `Authorization: Token <token>` (v1 also accepts u/p query or Basic auth)"
                    .into(),
            ),
            Denied::Invalid => Error::Unauthorized("the token is not valid for this router".into()),
            Denied::Role { token, need, has } => Error::Forbidden(format!(
                "this request needs the `{need}` role; token `{token}` has {}",
                has.iter()
                    .map(|r| format!("`{r}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Denied::Database { token, database } => {
                Error::Forbidden(format!("token `{token}` may not use database `{database}`"))
            }
        }
    }
}

/// Which grant (by index) `presented` is. Every configured token is
/// compared, in constant time each, so the time taken does not tell which
/// one nearly matched.
pub fn identify(grants: &[Grant], presented: Option<&str>) -> std::result::Result<usize, Denied> {
    let presented = presented.ok_or(Denied::Missing)?;
    let mut found = None;
    for (i, g) in grants.iter().enumerate() {
        if constant_time_eq(&g.token, presented.as_bytes()) && found.is_none() {
            found = Some(i);
        }
    }
    found.ok_or(Denied::Invalid)
}

/// Whether a grant may do `need` on every one of `databases`.
pub fn permit(g: &Grant, need: Role, databases: &[&str]) -> std::result::Result<(), Denied> {
    if !g.roles.contains(&need) {
        return Err(Denied::Role {
            token: g.name.clone(),
            need,
            has: g.roles.iter().copied().collect(),
        });
    }
    if let Some(allowed) = &g.databases {
        // An empty name is a request that names none (its own 400 follows).
        if let Some(db) = databases
            .iter()
            .find(|d| !d.is_empty() && !allowed.contains(**d))
        {
            return Err(Denied::Database {
                token: g.name.clone(),
                database: (*db).to_owned(),
            });
        }
    }
    Ok(())
}

/// The whole decision: [`identify`], then [`permit`].
pub fn decide(
    grants: &[Grant],
    presented: Option<&str>,
    need: Role,
    databases: &[&str],
) -> std::result::Result<usize, Denied> {
    let i = identify(grants, presented)?;
    permit(&grants[i], need, databases)?;
    Ok(i)
}

/// A request that passed: which token (None when auth is off), in the
/// table that let it in, so a reload in between changes nothing for it.
#[derive(Debug, Clone)]
pub struct Access {
    grant: Option<(Arc<Table>, usize)>,
    /// An InfluxDB user that was let in (instead of a token).
    user: Option<Arc<UserRecord>>,
}

#[derive(Debug, Default, Clone)]
struct Buckets {
    points: Option<TokenBucket>,
    requests: Option<TokenBucket>,
}

/// The grants in force and their write buckets; a reload replaces it whole.
#[derive(Debug)]
pub struct Table {
    grants: Vec<Grant>,
    buckets: Mutex<Vec<Buckets>>,
}

impl Table {
    /// `grants`, keeping the buckets of `old` tokens of the same name and
    /// rates, so rewriting the file does not refill anyone's bucket.
    fn carrying(grants: Vec<Grant>, old: Option<&Table>) -> Table {
        let buckets = grants
            .iter()
            .map(|g| {
                old.and_then(|t| {
                    let i = t.grants.iter().position(|o| {
                        o.name == g.name && o.points == g.points && o.requests == g.requests
                    })?;
                    Some(t.buckets.lock()[i].clone())
                })
                .unwrap_or_default()
            })
            .collect();
        Table {
            grants,
            buckets: Mutex::new(buckets),
        }
    }
}

/// The configured grants and their write buckets; the tokens file is
/// re-read when it changes (see [`Authorizer::reload_on_change`]).
pub struct Authorizer {
    table: Arc<RwLock<Arc<Table>>>,
    epoch: Instant,
    users: Arc<UserCache>,
}

/// Where the tokens come from: the router options' `auth_tokens`, `tokens`
/// and `tokens_file` (`RouterOptions::token_sources`).
#[derive(Debug, Clone, Default)]
pub struct TokenSources {
    /// Tokens with every role and no limit.
    pub auth_tokens: Vec<String>,
    /// `[[tokens]]` tables of the router's config.
    pub tokens: Vec<TokenSpec>,
    /// A TOML file of `[[tokens]]` tables, re-read when it changes.
    pub tokens_file: Option<PathBuf>,
}

/// The grants of `auth_tokens`, `tokens` and `tokens_file`; errors name the
/// token or file at fault.
fn load_grants(o: &TokenSources) -> Result<Vec<Grant>> {
    let mut specs = o.tokens.clone();
    if let Some(path) = &o.tokens_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("reading tokens_file {}: {e}", path.display())))?;
        let file: TokensFile = toml::from_str(&text)
            .map_err(|e| Error::Config(format!("tokens_file {}: {e}", path.display())))?;
        specs.extend(file.tokens);
    }
    let mut grants: Vec<Grant> = o
        .auth_tokens
        .iter()
        .enumerate()
        .map(|(i, t)| Grant::all_roles(i, t))
        .collect();
    for s in &specs {
        grants.push(Grant::from_spec(s)?);
    }
    let mut names = BTreeSet::new();
    for g in &grants {
        if !names.insert(g.name.as_str()) {
            return Err(Error::Config(format!("two tokens are named `{}`", g.name)));
        }
    }
    Ok(grants)
}

fn swap(table: &RwLock<Arc<Table>>, grants: Vec<Grant>) {
    let mut t = table.write();
    *t = Arc::new(Table::carrying(grants, Some(&t)));
}

impl Authorizer {
    /// From `auth_tokens`, `tokens` and `tokens_file`; errors name the token
    /// or file at fault.
    pub fn from_sources(o: &TokenSources) -> Result<Authorizer> {
        Ok(Authorizer::new(load_grants(o)?))
    }

    pub fn new(grants: Vec<Grant>) -> Authorizer {
        Authorizer {
            table: Arc::new(RwLock::new(Arc::new(Table::carrying(grants, None)))),
            epoch: Instant::now(),
            users: Arc::default(),
        }
    }

    /// The users this router knows (the etcd watch fills it).
    pub fn users(&self) -> &Arc<UserCache> {
        &self.users
    }

    fn current(&self) -> Arc<Table> {
        Arc::clone(&self.table.read())
    }

    /// Replaces the grants (requests already let in keep theirs).
    pub fn replace(&self, grants: Vec<Grant>) {
        swap(&self.table, grants);
    }

    /// Polls `tokens_file` (when there is one) every `poll` and loads it
    /// again when it changed, as a mounted Secret is updated in place. A
    /// file that does not load is logged and the previous tokens kept.
    pub fn reload_on_change(&self, o: TokenSources, poll: Duration) {
        let Some(path) = o.tokens_file.clone() else {
            return;
        };
        let table = Arc::downgrade(&self.table);
        tokio::spawn(async move {
            let mut seen = crate::tls::stamp(&[&path]);
            loop {
                tokio::time::sleep(poll).await;
                let Some(table) = table.upgrade() else { return };
                let now = crate::tls::stamp(&[&path]);
                if now == seen {
                    continue;
                }
                seen = now;
                match load_grants(&o) {
                    Ok(grants) => {
                        let n = grants.len();
                        swap(&table, grants);
                        tracing::info!(file = %path.display(), tokens = n, "tokens file reloaded");
                    }
                    Err(e) => tracing::error!(
                        error = %e,
                        "tokens file changed but does not load; still using the previous tokens"
                    ),
                }
            }
        });
    }

    /// Whether any token is configured (auth is off otherwise).
    pub fn enabled(&self) -> bool {
        !self.table.read().grants.is_empty()
    }

    /// 401 for a missing or unknown token, 403 naming the role or database.
    pub fn authorize(
        &self,
        presented: Option<&str>,
        need: Role,
        databases: &[&str],
    ) -> Result<Access> {
        let who = self.authenticate(presented)?;
        self.permit(&who, need, databases)?;
        Ok(who)
    }

    /// Only who is asking (401), for requests whose role is known later
    /// (an InfluxQL query once it is parsed).
    pub fn authenticate(&self, presented: Option<&str>) -> Result<Access> {
        let table = self.current();
        if table.grants.is_empty() {
            return Ok(Access {
                grant: None,
                user: None,
            });
        }
        let mut presented = presented;
        if let Some((name, password)) = presented.and_then(users::split_credential) {
            if let Some(user) = self.users.verify(name, password)? {
                return Ok(Access {
                    grant: None,
                    user: Some(user),
                });
            }
            // No such user: the password may be a token (clients that put
            // any user name before a token in Basic auth).
            presented = Some(password);
        }
        let i = identify(&table.grants, presented)?;
        Ok(Access {
            grant: Some((table, i)),
            user: None,
        })
    }

    /// 403 unless the authenticated token may do `need` on `databases`.
    pub fn permit(&self, who: &Access, need: Role, databases: &[&str]) -> Result<()> {
        if let Some(user) = &who.user {
            return Ok(users::permit_user(user, need, databases)?);
        }
        match &who.grant {
            None => Ok(()),
            Some((t, i)) => Ok(permit(&t.grants[*i], need, databases)?),
        }
    }

    /// False only for an InfluxDB user without read on `database`
    /// (tokens and auth off: true).
    pub fn user_may_read(&self, who: &Access, database: &str) -> bool {
        who.user
            .as_ref()
            .is_none_or(|u| users::roles_on(u, database).contains(&Role::Read))
    }

    /// The name of the token that was let in (logs).
    pub fn token_name<'a>(&self, access: &'a Access) -> Option<&'a str> {
        if let Some(user) = &access.user {
            return Some(user.name.as_str());
        }
        access
            .grant
            .as_ref()
            .map(|(t, i)| t.grants[*i].name.as_str())
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_secs_f64()
    }

    /// Before a write runs: 429 with the wait when the token's request or
    /// point bucket is empty. Takes one request from the request bucket.
    pub fn admit_write(&self, access: &Access) -> Result<()> {
        let Some((t, i)) = &access.grant else {
            return Ok(());
        };
        let i = *i;
        let g = &t.grants[i];
        if g.points.is_none() && g.requests.is_none() {
            return Ok(());
        }
        let now = self.now();
        let mut all = t.buckets.lock();
        let b = &mut all[i];
        if let Some(rate) = &g.points {
            let bucket = b.points.get_or_insert_with(|| TokenBucket::full(rate, now));
            bucket
                .admit(rate, now, 0.0)
                .map_err(|wait| limited(g, "points", wait))?;
        }
        if let Some(rate) = &g.requests {
            let bucket = b
                .requests
                .get_or_insert_with(|| TokenBucket::full(rate, now));
            bucket
                .admit(rate, now, 1.0)
                .map_err(|wait| limited(g, "requests", wait))?;
        }
        Ok(())
    }

    /// After a write: charges the points it carried to the token's point
    /// bucket (it may go into debt; the next write waits for it).
    pub fn charge_points(&self, access: &Access, points: u64) {
        let Some((t, i)) = &access.grant else {
            return;
        };
        if let Some(rate) = &t.grants[*i].points {
            let now = self.now();
            let mut all = t.buckets.lock();
            all[*i]
                .points
                .get_or_insert_with(|| TokenBucket::full(rate, now))
                .charge(rate, now, points as f64);
        }
    }
}

fn limited(g: &Grant, what: &str, wait: Duration) -> Error {
    Error::Overloaded(
        format!(
            "token `{}` is over its write {what} rate limit; retry after the Retry-After seconds",
            g.name
        ),
        wait,
    )
}

#[cfg(test)]
mod tests;
