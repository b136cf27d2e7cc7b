//! `CREATE USER`, `DROP USER`, `SET PASSWORD`, `GRANT`, `REVOKE`,
//! `SHOW USERS` and `SHOW GRANTS FOR`, answered as InfluxDB 1.8 answers
//! them, over the users in etcd (`auth::users_etcd`). They work whether
//! auth is on or off, as in InfluxDB with auth disabled.

use shardhouse_eval::{Series, Value};
use shardhouse_influxql::UserStatement;

use super::series_index::{s, table};
use crate::auth::users::{granted, revoked};
use crate::auth::users_etcd::UserStore;
use crate::read::influx::select::{database_exists, StmtResult};
use crate::read::influx::Ctx;

/// Runs one user statement.
pub async fn run(ctx: &Ctx<'_>, stmt: &UserStatement) -> StmtResult<Vec<Series>> {
    let router = ctx.router;
    let store = UserStore::new(
        &router.options.etcd_endpoints,
        &router.options.cluster,
        router.auth.users(),
    );
    let msg = |e: crate::error::Error| e.to_string();
    match stmt {
        UserStatement::ShowUsers => {
            let rows = store
                .list()
                .await
                .map_err(msg)?
                .into_iter()
                .map(|u| vec![s(u.name), Value::Bool(u.admin)])
                .collect();
            Ok(vec![table("", &["user", "admin"], rows)])
        }
        UserStatement::ShowGrants { name } => {
            let user = store.user(name).await.map_err(msg)?;
            let rows = user
                .privileges
                .iter()
                .map(|(db, p)| vec![s(db.clone()), s(p.influx_text().to_owned())])
                .collect();
            Ok(vec![table("", &["database", "privilege"], rows)])
        }
        UserStatement::Create {
            name,
            password,
            admin,
        } => store
            .create(name, password, *admin)
            .await
            .map_err(msg)
            .map(none),
        UserStatement::Drop { name } => store.drop_user(name).await.map_err(msg).map(none),
        UserStatement::SetPassword { name, password } => store
            .set_password(name, password)
            .await
            .map_err(msg)
            .map(none),
        UserStatement::Grant {
            privilege,
            database,
            user,
        } => {
            known_database(ctx, &store, user, database.as_deref()).await?;
            let (p, db) = (*privilege, database.as_deref());
            store
                .update(user, |u| granted(u, p, db))
                .await
                .map_err(msg)
                .map(none)
        }
        UserStatement::Revoke {
            privilege,
            database,
            user,
        } => {
            known_database(ctx, &store, user, database.as_deref()).await?;
            let (p, db) = (*privilege, database.as_deref());
            store
                .update(user, |u| revoked(u, p, db))
                .await
                .map_err(msg)
                .map(none)
        }
    }
}

fn none(_: ()) -> Vec<Series> {
    Vec::new()
}

/// InfluxDB checks the user, then the database, before setting a
/// privilege on one: "user not found", then "database not found: db".
async fn known_database(
    ctx: &Ctx<'_>,
    store: &UserStore<'_>,
    user: &str,
    database: Option<&str>,
) -> StmtResult<()> {
    let Some(db) = database else {
        return Ok(());
    };
    store.user(user).await.map_err(|e| e.to_string())?;
    if !database_exists(ctx, db).await? {
        return Err(format!("database not found: {db}"));
    }
    Ok(())
}
