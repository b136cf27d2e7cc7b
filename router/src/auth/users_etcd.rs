//! Users in etcd, beside the shard map: one JSON [`UserRecord`] per key
//! `/shardhouse/<cluster>/users/<name>`. Statements change a record with a
//! compare-and-swap on its revision (two routers granting at once do not
//! lose one grant), and every router watches the prefix into its
//! [`UserCache`], which authentication reads without a round trip.

use super::users::{create_conflict, new_record, UserCache, UserRecord};
use crate::error::{Error, Result};
use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, WatchOptions};
use shardhouse_common::shard_map::keys;
use std::sync::Arc;
use std::time::Duration;

/// How many times a compare-and-swap is retried against concurrent
/// changes of the same user before the statement fails.
const CAS_ATTEMPTS: usize = 8;

fn users_prefix(cluster: &str) -> String {
    format!("{}users/", keys::prefix(cluster))
}

fn not_found() -> Error {
    Error::BadRequest("user not found".into())
}

fn decode(value: &[u8]) -> Result<UserRecord> {
    serde_json::from_slice(value)
        .map_err(|e| Error::Internal(format!("a user record in etcd is not valid: {e}")))
}

fn encode(u: &UserRecord) -> Result<Vec<u8>> {
    serde_json::to_vec(u).map_err(|e| Error::Internal(e.to_string()))
}

/// bcrypt off the async workers.
async fn hashed(name: &str, password: &str, admin: bool) -> Result<UserRecord> {
    let (name, password) = (name.to_owned(), password.to_owned());
    tokio::task::spawn_blocking(move || new_record(&name, &password, admin))
        .await
        .map_err(|e| Error::Internal(format!("hashing the password: {e}")))?
}

/// The statements' access to the users of one cluster.
pub struct UserStore<'a> {
    endpoints: &'a [String],
    prefix: String,
    /// Updated on every successful change, so the next request to this
    /// router sees it before the watch event arrives.
    cache: &'a UserCache,
}

impl<'a> UserStore<'a> {
    pub fn new(endpoints: &'a [String], cluster: &str, cache: &'a UserCache) -> UserStore<'a> {
        UserStore {
            endpoints,
            prefix: users_prefix(cluster),
            cache,
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    async fn client(&self) -> Result<Client> {
        Ok(Client::connect(self.endpoints, None).await?)
    }

    /// Every user, by name.
    pub async fn list(&self) -> Result<Vec<UserRecord>> {
        let mut c = self.client().await?;
        let resp = c
            .get(self.prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await?;
        let mut users = resp
            .kvs()
            .iter()
            .map(|kv| decode(kv.value()))
            .collect::<Result<Vec<_>>>()?;
        users.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(users)
    }

    /// The user and its record's revision.
    async fn get(&self, c: &mut Client, name: &str) -> Result<Option<(UserRecord, i64)>> {
        let resp = c.get(self.key(name), None).await?;
        resp.kvs()
            .first()
            .map(|kv| Ok((decode(kv.value())?, kv.mod_revision())))
            .transpose()
    }

    pub async fn user(&self, name: &str) -> Result<UserRecord> {
        let mut c = self.client().await?;
        Ok(self.get(&mut c, name).await?.ok_or_else(not_found)?.0)
    }

    /// `CREATE USER`: created once; again with the same password and admin
    /// flag is no change, otherwise "user already exists" (InfluxDB).
    pub async fn create(&self, name: &str, password: &str, admin: bool) -> Result<()> {
        let mut c = self.client().await?;
        let mut fresh: Option<UserRecord> = None;
        for _ in 0..CAS_ATTEMPTS {
            if let Some((held, _)) = self.get(&mut c, name).await? {
                let (password, hash) = (password.to_owned(), held.clone());
                return tokio::task::spawn_blocking(move || {
                    create_conflict(&hash, &password, admin)
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
            }
            let record = match fresh.take() {
                Some(r) => r,
                None => hashed(name, password, admin).await?,
            };
            let key = self.key(name);
            let txn = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), encode(&record)?, None)]);
            let resp = c.txn(txn).await?;
            if resp.succeeded() {
                let rev = resp.header().map_or(0, |h| h.revision());
                self.cache.set(name, rev, Some(record));
                return Ok(());
            }
            fresh = Some(record);
        }
        Err(contended(name))
    }

    /// `DROP USER`.
    pub async fn drop_user(&self, name: &str) -> Result<()> {
        let mut c = self.client().await?;
        let resp = c.delete(self.key(name), None).await?;
        if resp.deleted() == 0 {
            return Err(not_found());
        }
        let rev = resp.header().map_or(0, |h| h.revision());
        self.cache.set(name, rev, None);
        Ok(())
    }

    /// `SET PASSWORD`.
    pub async fn set_password(&self, name: &str, password: &str) -> Result<()> {
        let hash = hashed(name, password, false).await?.hash;
        self.update(name, |u| UserRecord {
            hash: hash.clone(),
            ..u.clone()
        })
        .await
    }

    /// Read, change with `f` (pure), write back unless someone wrote in
    /// between (then again).
    pub async fn update(&self, name: &str, f: impl Fn(&UserRecord) -> UserRecord) -> Result<()> {
        let mut c = self.client().await?;
        for _ in 0..CAS_ATTEMPTS {
            let (held, rev) = self.get(&mut c, name).await?.ok_or_else(not_found)?;
            let changed = f(&held);
            if changed == held {
                return Ok(());
            }
            let key = self.key(name);
            let txn = Txn::new()
                .when([Compare::mod_revision(key.as_str(), CompareOp::Equal, rev)])
                .and_then([TxnOp::put(key.as_str(), encode(&changed)?, None)]);
            let resp = c.txn(txn).await?;
            if resp.succeeded() {
                let rev = resp.header().map_or(0, |h| h.revision());
                self.cache.set(name, rev, Some(changed));
                return Ok(());
            }
        }
        Err(contended(name))
    }
}

fn contended(name: &str) -> Error {
    Error::Unavailable {
        shard: 0,
        reason: format!("user {name} changed concurrently {CAS_ATTEMPTS} times; retry"),
    }
}

/// Keeps `cache` equal to etcd's users: a full read, then a watch from the
/// next revision; reconnects with backoff (as the shard map's watch).
pub async fn watch_users(cache: Arc<UserCache>, endpoints: Vec<String>, cluster: String) {
    let prefix = users_prefix(&cluster);
    let mut backoff = Duration::from_millis(100);
    loop {
        match watch_once(&cache, &endpoints, &prefix).await {
            Ok(()) => tracing::warn!("etcd users watch ended; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "etcd users watch failed; retrying"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(cache: &UserCache, endpoints: &[String], prefix: &str) -> Result<()> {
    let mut client = Client::connect(endpoints, None).await?;
    let resp = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await?;
    let rev = resp.header().map_or(0, |h| h.revision());
    let records = resp
        .kvs()
        .iter()
        .filter_map(|kv| decode(kv.value()).ok())
        .collect();
    cache.replace_all(rev, records);
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(rev + 1);
    let mut stream = client.watch(prefix, Some(options)).await?;
    while let Some(resp) = stream.message().await? {
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let name = String::from_utf8_lossy(kv.key())
                .strip_prefix(prefix)
                .unwrap_or_default()
                .to_owned();
            let record = match ev.event_type() {
                etcd_client::EventType::Put => match decode(kv.value()) {
                    Ok(r) => Some(r),
                    Err(e) => {
                        tracing::error!(error = %e, user = name, "ignoring a user record");
                        continue;
                    }
                },
                etcd_client::EventType::Delete => None,
            };
            cache.set(&name, kv.mod_revision(), record);
        }
    }
    Ok(())
}
