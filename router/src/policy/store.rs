//! The retention policy catalog in etcd, one key per database
//! (`/shardhouse/<cluster>/policies/<db>`, JSON [`DatabasePolicies`]),
//! cached by every router: read whole at start, then watched. A change is
//! a compare-and-swap on the key's revision (`meta_kv`), installed in this
//! router's cache at once, so the statement's next request here sees it;
//! other routers see it when their watch delivers it (milliseconds).
//!
//! The write path only reads the cache (one map lookup per request). A
//! database with no key is the implicit `autogen` in its own storage, so a
//! cluster whose etcd has no catalog at all writes and reads as before.

use super::{DatabasePolicies, PolicyError};
use crate::meta_kv::{decode, KvError, MetaKv};
use etcd_client::{EventType, WatchOptions};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

impl From<KvError> for PolicyError {
    fn from(e: KvError) -> PolicyError {
        PolicyError::Unavailable(e.0)
    }
}

pub struct PolicyStore {
    kv: Arc<MetaKv>,
    prefix: String,
    cache: RwLock<HashMap<String, Arc<DatabasePolicies>>>,
}

impl PolicyStore {
    pub fn new(kv: Arc<MetaKv>) -> PolicyStore {
        PolicyStore {
            prefix: kv.key("policies/"),
            kv,
            cache: RwLock::default(),
        }
    }

    /// The database's catalog as this router knows it.
    pub fn cached(&self, database: &str) -> Option<Arc<DatabasePolicies>> {
        self.cache.read().get(database).cloned()
    }

    /// The storage a write or read of `database` names with `rp` (None or
    /// empty: the default policy). A database without a catalog entry has
    /// only `autogen`, stored under its own name.
    pub fn storage(&self, database: &str, rp: Option<&str>) -> Result<String, PolicyError> {
        match self.cache.read().get(database) {
            Some(p) => p.resolve(rp).map(|p| p.storage.clone()),
            None => match rp.filter(|r| !r.is_empty()) {
                None | Some(super::AUTOGEN) => Ok(database.to_owned()),
                Some(other) => Err(PolicyError::NotFound(other.to_owned())),
            },
        }
    }

    /// The shard group duration InfluxDB would give the policy stored as
    /// `storage` (a week without a catalog entry, as for `autogen`).
    pub fn shard_duration(&self, storage: &str) -> i64 {
        let database = shardhouse_common::names::storage_database(storage);
        self.cached(database)
            .and_then(|p| {
                p.policies
                    .iter()
                    .find(|rp| rp.storage == storage)
                    .map(|rp| rp.shard_duration_ns)
            })
            .filter(|d| *d > 0)
            .unwrap_or_else(|| super::shard_group_duration(0))
    }

    /// The default policy's name (`autogen` without a catalog entry).
    pub fn default_name(&self, database: &str) -> String {
        self.cached(database)
            .map_or_else(|| super::AUTOGEN.to_owned(), |p| p.default.clone())
    }

    /// Every storage of `database`: its own name and each policy's.
    pub fn storages(&self, database: &str) -> Vec<String> {
        let mut out = vec![database.to_owned()];
        if let Some(p) = self.cache.read().get(database) {
            out.extend(p.policies.iter().map(|p| p.storage.clone()));
        }
        out.sort();
        out.dedup();
        out
    }

    /// Reads the database's catalog from etcd, changes it with `change`
    /// (Ok(None): leave it; Ok(Some(None)): delete it) and writes it back
    /// unless another router changed it since. Returns what is stored.
    pub async fn update<F>(
        &self,
        database: &str,
        change: F,
    ) -> Result<Option<DatabasePolicies>, PolicyError>
    where
        F: FnMut(
            Option<&DatabasePolicies>,
        ) -> Result<Option<Option<DatabasePolicies>>, PolicyError>,
    {
        let key = format!("{}{database}", self.prefix);
        let stored = self.kv.update(&key, change).await?;
        self.install(database, stored.clone());
        Ok(stored)
    }

    fn install(&self, database: &str, policies: Option<DatabasePolicies>) {
        let mut cache = self.cache.write();
        match policies {
            Some(p) => cache.insert(database.to_owned(), Arc::new(p)),
            None => cache.remove(database),
        };
    }

    /// Keeps the cache in step with etcd: the whole prefix read, then
    /// watched from the next revision; reconnects with backoff.
    pub async fn watch(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.watch_once().await {
                Ok(()) => tracing::warn!("etcd policy watch ended; reconnecting"),
                Err(e) => tracing::warn!(error = %e, "etcd policy watch failed; retrying"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    async fn watch_once(&self) -> Result<(), KvError> {
        let (all, rev) = self.kv.list::<DatabasePolicies>(&self.prefix).await?;
        *self.cache.write() = all.into_iter().map(|(db, p)| (db, Arc::new(p))).collect();
        let opts = WatchOptions::new()
            .with_prefix()
            .with_start_revision(rev + 1);
        let mut client = self.kv.client().await?;
        let mut stream = client.watch(self.prefix.as_str(), Some(opts)).await?;
        while let Some(resp) = stream.message().await? {
            for ev in resp.events() {
                let Some(kv) = ev.kv() else { continue };
                let Some(db) = kv.key_str().ok().and_then(|k| k.strip_prefix(&self.prefix)) else {
                    continue;
                };
                match ev.event_type() {
                    EventType::Put => self.install(db, Some(decode(db, kv.value())?)),
                    EventType::Delete => self.install(db, None),
                }
            }
        }
        Ok(())
    }
}
