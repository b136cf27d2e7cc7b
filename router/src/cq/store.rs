//! Continuous queries in etcd: the definitions of a database under
//! `/shardhouse/<cluster>/cq/<db>` (JSON list, in creation order, as
//! `SHOW CONTINUOUS QUERIES` lists them) and, per query, the end of the
//! last window whose rows were acknowledged under
//! `/shardhouse/<cluster>/cq-done/<db>/<name>` (nanoseconds).

use super::{ContinuousQuery, CqError};
use crate::meta_kv::{KvError, MetaKv};
use std::collections::BTreeMap;
use std::sync::Arc;

impl From<KvError> for CqError {
    fn from(e: KvError) -> CqError {
        CqError::Unavailable(e.0)
    }
}

pub struct CqStore {
    kv: Arc<MetaKv>,
}

impl CqStore {
    pub fn new(kv: Arc<MetaKv>) -> CqStore {
        CqStore { kv }
    }

    fn defs_prefix(&self) -> String {
        self.kv.key("cq/")
    }

    fn defs_key(&self, database: &str) -> String {
        format!("{}{database}", self.defs_prefix())
    }

    fn done_key(&self, database: &str, name: &str) -> String {
        self.kv.key(&format!("cq-done/{database}/{name}"))
    }

    /// Adds `cq`; the same name with the same query again is a no-op, with
    /// another query InfluxDB's "continuous query already exists".
    pub async fn create(&self, cq: ContinuousQuery) -> Result<(), CqError> {
        self.kv
            .update(
                &self.defs_key(&cq.database),
                |cur: Option<&Vec<ContinuousQuery>>| {
                    let mut list = cur.cloned().unwrap_or_default();
                    if let Some(old) = list.iter().find(|c| c.name == cq.name) {
                        if old.query.eq_ignore_ascii_case(&cq.query) {
                            return Ok(None);
                        }
                        return Err(CqError::Exists);
                    }
                    list.push(cq.clone());
                    Ok(Some(Some(list)))
                },
            )
            .await
            .map(|_| ())
    }

    /// Removes a query and its progress (a missing one is no error, as
    /// in InfluxDB 1.8).
    pub async fn drop(&self, database: &str, name: &str) -> Result<(), CqError> {
        self.kv
            .update(
                &self.defs_key(database),
                |cur: Option<&Vec<ContinuousQuery>>| {
                    let mut list = cur.cloned().unwrap_or_default();
                    let before = list.len();
                    list.retain(|c| c.name != name);
                    if list.len() == before {
                        return Ok::<_, CqError>(None);
                    }
                    Ok(Some((!list.is_empty()).then_some(list)))
                },
            )
            .await?;
        self.forget(database, name).await
    }

    async fn forget(&self, database: &str, name: &str) -> Result<(), CqError> {
        self.kv
            .update(&self.done_key(database, name), |cur: Option<&i64>| {
                Ok::<_, CqError>(cur.map(|_| None))
            })
            .await
            .map(|_| ())
    }

    /// A dropped database's queries and their progress go with it.
    pub async fn drop_database(&self, database: &str) -> Result<(), CqError> {
        let (defs, _) = self
            .kv
            .get::<Vec<ContinuousQuery>>(&self.defs_key(database))
            .await?;
        for cq in defs.unwrap_or_default() {
            self.forget(database, &cq.name).await?;
        }
        self.kv
            .update(
                &self.defs_key(database),
                |cur: Option<&Vec<ContinuousQuery>>| Ok::<_, CqError>(cur.map(|_| None)),
            )
            .await
            .map(|_| ())
    }

    /// Every query, by database.
    pub async fn all(&self) -> Result<BTreeMap<String, Vec<ContinuousQuery>>, CqError> {
        let (list, _) = self
            .kv
            .list::<Vec<ContinuousQuery>>(&self.defs_prefix())
            .await?;
        Ok(list.into_iter().collect())
    }

    /// The end of the last window of `name` whose rows were acknowledged.
    pub async fn done(&self, database: &str, name: &str) -> Result<Option<i64>, CqError> {
        Ok(self.kv.get::<i64>(&self.done_key(database, name)).await?.0)
    }

    /// Records a completed window's end (never moving backwards).
    pub async fn record_done(&self, database: &str, name: &str, end: i64) -> Result<(), CqError> {
        self.kv
            .update(&self.done_key(database, name), |cur: Option<&i64>| {
                Ok::<_, CqError>(match cur {
                    Some(c) if *c >= end => None,
                    _ => Some(Some(end)),
                })
            })
            .await
            .map(|_| ())
    }
}
