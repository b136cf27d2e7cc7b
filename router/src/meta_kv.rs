//! Cluster metadata the routers share through etcd (retention policies,
//! continuous queries): JSON values under `/shardhouse/<cluster>/`, read
//! and changed by compare-and-swap on a key's revision, so two routers
//! changing the same key never lose each other's change.

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// How often a read-modify-write is tried when other routers race it.
const MAX_CAS_TRIES: usize = 8;

/// Why etcd could not be read or written; the text names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KvError(pub String);

impl From<etcd_client::Error> for KvError {
    fn from(e: etcd_client::Error) -> KvError {
        KvError(e.to_string())
    }
}

/// One etcd connection (made on first use, then shared) and the cluster's
/// key prefix.
pub struct MetaKv {
    prefix: String,
    endpoints: Vec<String>,
    client: tokio::sync::Mutex<Option<Client>>,
}

impl MetaKv {
    pub fn new(cluster: &str, endpoints: Vec<String>) -> MetaKv {
        MetaKv {
            prefix: shardhouse_common::shard_map::keys::prefix(cluster),
            endpoints,
            client: tokio::sync::Mutex::new(None),
        }
    }

    /// `/shardhouse/<cluster>/<rest>`.
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.prefix)
    }

    pub async fn client(&self) -> Result<Client, KvError> {
        let mut guard = self.client.lock().await;
        if let Some(c) = guard.as_ref() {
            return Ok(c.clone());
        }
        let c = Client::connect(&self.endpoints, None).await?;
        *guard = Some(c.clone());
        Ok(c)
    }

    /// The value at `key` and its revision (0: absent).
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<(Option<T>, i64), KvError> {
        let got = self.client().await?.get(key, None).await?;
        match got.kvs().first() {
            Some(kv) => Ok((Some(decode(key, kv.value())?), kv.mod_revision())),
            None => Ok((None, 0)),
        }
    }

    /// Every value under `prefix`, with the key's rest, and the revision
    /// they were read at (to watch from).
    pub async fn list<T: DeserializeOwned>(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, T)>, i64), KvError> {
        let got = self
            .client()
            .await?
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await?;
        let mut out = Vec::new();
        for kv in got.kvs() {
            let key = kv.key_str().map_err(KvError::from)?;
            if let Some(rest) = key.strip_prefix(prefix) {
                out.push((rest.to_owned(), decode(key, kv.value())?));
            }
        }
        Ok((out, got.header().map_or(0, |h| h.revision())))
    }

    /// Reads `key`, changes it with `change` (Ok(None): leave it as it is;
    /// Ok(Some(None)): delete it) and writes it back if nobody changed it
    /// since, else tries again on what they wrote. Returns what is stored.
    pub async fn update<T, E, F>(&self, key: &str, mut change: F) -> Result<Option<T>, E>
    where
        T: Serialize + DeserializeOwned + Clone,
        E: From<KvError>,
        F: FnMut(Option<&T>) -> Result<Option<Option<T>>, E>,
    {
        for _ in 0..MAX_CAS_TRIES {
            let (current, rev) = self.get::<T>(key).await?;
            let Some(next) = change(current.as_ref())? else {
                return Ok(current);
            };
            let op = match &next {
                Some(v) => TxnOp::put(key, encode(v), None),
                None => TxnOp::delete(key, None),
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Equal, rev)])
                .and_then([op]);
            let mut client = self.client().await?;
            if client.txn(txn).await.map_err(KvError::from)?.succeeded() {
                return Ok(next);
            }
        }
        Err(KvError(format!(
            "{key} changed {MAX_CAS_TRIES} times while being updated"
        ))
        .into())
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

pub fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, KvError> {
    serde_json::from_slice(bytes).map_err(|e| KvError(format!("{key} is not valid: {e}")))
}
