//! `CREATE | SHOW | DROP CONTINUOUS QUERY`: definitions kept in etcd
//! (`crate::cq::store`), run by the router holding the lease
//! (`crate::cq::runner`).

use shardhouse_eval::Series;
use shardhouse_influxql::Statement;

use super::super::Ctx;
use super::series_index::{databases, s, table};
use crate::cq::store::CqStore;
use crate::cq::{define, CqError};
use crate::error::{Error, Result};

/// A continuous query's error on the read path: etcd out of reach fails
/// the request, the rest is the statement's.
pub(super) fn cq_error(e: CqError) -> Error {
    match e {
        CqError::Unavailable(_) => Error::MetaUnavailable(e.to_string()),
        CqError::DatabaseNotFound(_) => Error::NotFound(e.to_string()),
        e => Error::statement(e),
    }
}

/// The statements this module answers; None for any other.
pub(super) async fn run(ctx: &Ctx<'_>, stmt: &Statement) -> Option<Result<Vec<Series>>> {
    let store = CqStore::new(ctx.router.meta.clone());
    Some(match stmt {
        Statement::CreateContinuousQuery(c) => {
            let known = match databases(ctx).await {
                Ok(dbs) => dbs.iter().any(|(n, _)| *n == c.database),
                Err(e) => return Some(Err(e)),
            };
            if !known {
                return Some(Err(cq_error(CqError::DatabaseNotFound(c.database.clone()))));
            }
            let default_rp = ctx.router.policies.default_name(&c.database);
            match define(c, &default_rp) {
                Ok(cq) => store.create(cq).await.map(|_| Vec::new()).map_err(cq_error),
                Err(e) => Err(cq_error(e)),
            }
        }
        Statement::DropContinuousQuery { name, database } => store
            .drop(database, name)
            .await
            .map(|_| Vec::new())
            .map_err(cq_error),
        Statement::ShowContinuousQueries => show(ctx, &store).await,
        _ => return None,
    })
}

/// One series per database (those without queries too, as InfluxDB).
async fn show(ctx: &Ctx<'_>, store: &CqStore) -> Result<Vec<Series>> {
    let mut all = store.all().await.map_err(cq_error)?;
    let mut out = Vec::new();
    for (db, _) in databases(ctx).await? {
        let rows = all
            .remove(&db)
            .unwrap_or_default()
            .into_iter()
            .map(|cq| vec![s(cq.name), s(cq.query)])
            .collect();
        out.push(table(&db, &["name", "query"], rows));
    }
    Ok(out)
}
