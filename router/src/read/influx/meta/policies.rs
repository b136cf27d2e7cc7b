//! `CREATE/DROP DATABASE` and the retention policy statements: the
//! decision is `crate::policy`'s (InfluxDB 1.8's rules), the storage of a
//! policy a storage operation every shard's log applies, and the catalog
//! (which policies, which is the default) a compare-and-swap in etcd.
//! Storage goes first, so a policy the catalog names always has its
//! storage, with its retention, before a write can reach it.

use shardhouse_common::proto::{
    storage_op, CreateDatabase, DeletePoints, DropDatabase, SetRetention,
};
use shardhouse_eval::{Series, Value};
use shardhouse_influxql::{RetentionDuration, RetentionPolicyOptions, Statement};

use super::super::Ctx;
use super::database_of;
use super::series_index::{databases, s, table};
use super::storage_ops::{apply, valid_database};
use crate::error::{Error, Result};
use crate::policy::{
    go_duration, DatabasePolicies, PolicyError, PolicySpec, PolicyUpdate, RetentionPolicy,
};

/// The statements this module answers; None for any other.
pub(super) async fn run(ctx: &Ctx<'_>, stmt: &Statement) -> Option<Result<Vec<Series>>> {
    Some(match stmt {
        Statement::ShowRetentionPolicies { database } => show(ctx, database.as_deref()).await,
        Statement::CreateDatabase(c) => {
            create_database(ctx, &c.name, c.retention_policy.as_ref()).await
        }
        Statement::DropDatabase { name } => drop_database(ctx, name).await,
        Statement::CreateRetentionPolicy(c) => {
            let spec = PolicySpec {
                name: c.name.clone(),
                duration_ns: nanos(c.duration),
                shard_duration_ns: c.shard_duration.unwrap_or(0),
                replication: c.replication,
            };
            create_policy(ctx, &c.database, spec, c.default).await
        }
        Statement::AlterRetentionPolicy(a) => {
            let update = PolicyUpdate {
                duration_ns: a.duration.map(nanos),
                shard_duration_ns: a.shard_duration,
                replication: a.replication,
                make_default: a.default,
            };
            alter_policy(ctx, &a.database, &a.name, update).await
        }
        Statement::DropRetentionPolicy { name, database } => drop_policy(ctx, database, name).await,
        _ => return None,
    })
}

fn nanos(d: RetentionDuration) -> i64 {
    match d {
        RetentionDuration::Infinite => 0,
        RetentionDuration::Nanos(n) => n,
    }
}

/// The database's policies: the catalog in etcd (read fresh), else the
/// implicit `autogen` of a database the nodes hold; None when neither.
async fn current(ctx: &Ctx<'_>, db: &str) -> Result<Option<DatabasePolicies>> {
    if let Some(p) = ctx.router.policies.update(db, |_| Ok(None)).await? {
        return Ok(Some(p));
    }
    Ok(databases(ctx)
        .await?
        .into_iter()
        .find(|(n, _)| n == db)
        .map(|(_, retention_ns)| DatabasePolicies::implicit(db, retention_ns)))
}

/// Stores `next` unless another router changed the catalog since `base`
/// was read (then the statement is decided again on what it wrote).
async fn store<F>(ctx: &Ctx<'_>, db: &str, base: DatabasePolicies, decide: F) -> Result<()>
where
    F: Fn(&DatabasePolicies) -> Result<Option<DatabasePolicies>, PolicyError>,
{
    ctx.router
        .policies
        .update(db, |cur| {
            let cur = cur.unwrap_or(&base);
            Ok(decide(cur)?.map(Some))
        })
        .await
        .map(|_| ())
        .map_err(Error::from)
}

async fn show(ctx: &Ctx<'_>, on: Option<&str>) -> Result<Vec<Series>> {
    let db = database_of(ctx, on)?;
    let policies = match ctx.router.policies.cached(&db) {
        Some(p) => (*p).clone(),
        None => current(ctx, &db)
            .await?
            .ok_or_else(|| Error::from(PolicyError::DatabaseNotFound(db.clone())))?,
    };
    let rows = policies
        .policies
        .iter()
        .map(|p| {
            vec![
                s(p.name.clone()),
                s(go_duration(p.duration_ns)),
                s(go_duration(p.shard_duration_ns)),
                Value::Int(p.replication as i64),
                Value::Bool(p.name == policies.default),
            ]
        })
        .collect();
    Ok(vec![table(
        "",
        &[
            "name",
            "duration",
            "shardGroupDuration",
            "replicaN",
            "default",
        ],
        rows,
    )])
}

async fn create_database(
    ctx: &Ctx<'_>,
    db: &str,
    with: Option<&RetentionPolicyOptions>,
) -> Result<Vec<Series>> {
    let spec = match with {
        None => None,
        Some(o) => {
            if let Some(name) = o.name.as_deref() {
                crate::policy::valid_name(name)?;
            }
            Some(PolicySpec {
                name: o
                    .name
                    .clone()
                    .unwrap_or_else(|| crate::policy::AUTOGEN.into()),
                duration_ns: o.duration.map_or(0, nanos),
                shard_duration_ns: o.shard_duration.unwrap_or(0),
                replication: o.replication.unwrap_or(1),
            })
        }
    };
    valid_database(db)?;
    let existing = current(ctx, db).await?;
    let next = DatabasePolicies::create_database(db, existing.as_ref(), spec.as_ref())?;
    let home = next.resolve(None)?.clone();
    apply(
        ctx,
        storage_op::Op::CreateDatabase(CreateDatabase {
            database: home.storage.clone(),
            retention_ns: home.duration_ns,
        }),
    )
    .await?;
    store(ctx, db, next.clone(), |cur| {
        DatabasePolicies::create_database(db, Some(cur), spec.as_ref()).map(Some)
    })
    .await?;
    Ok(Vec::new())
}

async fn drop_database(ctx: &Ctx<'_>, db: &str) -> Result<Vec<Series>> {
    valid_database(db)?;
    let mut storages = ctx.router.policies.storages(db);
    if let Some(p) = current(ctx, db).await? {
        storages.extend(p.policies.into_iter().map(|p| p.storage));
        storages.sort();
        storages.dedup();
    }
    for storage in storages {
        let op = storage_op::Op::DropDatabase(DropDatabase { database: storage });
        apply(ctx, op).await?;
    }
    ctx.router
        .policies
        .update(db, |cur| Ok(cur.map(|_| None)))
        .await?;
    crate::cq::store::CqStore::new(ctx.router.meta.clone())
        .drop_database(db)
        .await
        .map_err(super::continuous::cq_error)?;
    Ok(Vec::new())
}

async fn create_policy(
    ctx: &Ctx<'_>,
    db: &str,
    spec: PolicySpec,
    make_default: bool,
) -> Result<Vec<Series>> {
    let base = current(ctx, db)
        .await?
        .ok_or_else(|| Error::from(PolicyError::DatabaseNotFound(db.to_owned())))?;
    let Some((_, policy)) = base.create_policy(db, &spec, make_default)? else {
        return Ok(Vec::new());
    };
    create_storage(ctx, &policy).await?;
    store(ctx, db, base, |cur| {
        Ok(cur
            .create_policy(db, &spec, make_default)?
            .map(|(next, _)| next))
    })
    .await?;
    Ok(Vec::new())
}

/// A policy's storage with its retention (both idempotent).
async fn create_storage(ctx: &Ctx<'_>, policy: &RetentionPolicy) -> Result<()> {
    apply(
        ctx,
        storage_op::Op::CreateDatabase(CreateDatabase {
            database: policy.storage.clone(),
            retention_ns: policy.duration_ns,
        }),
    )
    .await?;
    apply(
        ctx,
        storage_op::Op::SetRetention(SetRetention {
            database: policy.storage.clone(),
            retention_ns: policy.duration_ns,
        }),
    )
    .await?;
    Ok(())
}

async fn alter_policy(
    ctx: &Ctx<'_>,
    db: &str,
    name: &str,
    update: PolicyUpdate,
) -> Result<Vec<Series>> {
    let base = current(ctx, db)
        .await?
        .ok_or_else(|| Error::from(PolicyError::DatabaseNotFound(db.to_owned())))?;
    let (_, altered) = base.alter_policy(name, &update)?;
    create_storage(ctx, &altered).await?;
    store(ctx, db, base, |cur| {
        cur.alter_policy(name, &update).map(|(next, _)| Some(next))
    })
    .await?;
    Ok(Vec::new())
}

async fn drop_policy(ctx: &Ctx<'_>, db: &str, name: &str) -> Result<Vec<Series>> {
    // No database, no policy: nothing to do, as InfluxDB answers.
    let Some(base) = current(ctx, db).await? else {
        return Ok(Vec::new());
    };
    let (_, dropped) = base.drop_policy(name);
    let Some(dropped) = dropped else {
        return Ok(Vec::new());
    };
    let op = if dropped.storage == db {
        // The home storage keeps the database's name (and its listing);
        // its points and series go.
        storage_op::Op::DeletePoints(DeletePoints {
            database: db.to_owned(),
            measurement: String::new(),
            min_time_ns: i64::MIN,
            max_time_ns: i64::MAX,
            predicate: None,
            drop_series: true,
        })
    } else {
        storage_op::Op::DropDatabase(DropDatabase {
            database: dropped.storage.clone(),
        })
    };
    apply(ctx, op).await?;
    store(ctx, db, base, |cur| Ok(Some(cur.drop_policy(name).0))).await?;
    Ok(Vec::new())
}
