//! `CREATE USER`, `DROP USER`, `SET PASSWORD`, `GRANT`, `REVOKE`,
//! `SHOW USERS` and `SHOW GRANTS FOR`, answered as InfluxDB 1.8 answers
//! them, over the users in etcd (`auth::users_etcd`). They work whether
//! auth is on or off, as in InfluxDB with auth disabled.

use shardhouse_eval::{Series, Value};
use shardhouse_influxql::UserStatement;

use super::series_index::{s, table};
use crate::auth::users::{granted, revoked};
use crate::auth::users_etcd::UserStore;
use crate::error::{Error, Result};
use crate::read::influx::select::database_exists;
use crate::read::influx::Ctx;

/// Runs one user statement.
pub async fn run(ctx: &Ctx<'_>, stmt: &UserStatement) -> Result<Vec<Series>> {
    let router = ctx.router;
    let store = UserStore::new(
        &router.options.etcd_endpoints,
        &router.options.cluster,
        router.auth.users(),
    );
    match stmt {
        UserStatement::ShowUsers => {
            let rows = store
                .list()
                .await?
                .into_iter()
                .map(|u| vec![s(u.name), Value::Bool(u.admin)])
                .collect();
            Ok(vec![table("", &["user", "admin"], rows)])
        }
        UserStatement::ShowGrants { name } => {
            let user = store.user(name).await?;
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
        } => store.create(name, password, *admin).await.map(none),
        UserStatement::Drop { name } => store.drop_user(name).await.map(none),
        UserStatement::SetPassword { name, password } => {
            store.set_password(name, password).await.map(none)
        }
        UserStatement::Grant {
            privilege,
            database,
            user,
        } => {
            known_database(ctx, &store, user, database.as_deref()).await?;
            let (p, db) = (*privilege, database.as_deref());
            store.update(user, |u| granted(u, p, db)).await.map(none)
        }
        UserStatement::Revoke {
            privilege,
            database,
            user,
        } => {
            known_database(ctx, &store, user, database.as_deref()).await?;
            let (p, db) = (*privilege, database.as_deref());
            store.update(user, |u| revoked(u, p, db)).await.map(none)
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
) -> Result<()> {
    let Some(db) = database else {
        return Ok(());
    };
    store.user(user).await?;
    if !database_exists(ctx, db).await? {
        return Err(Error::NotFound(format!("database not found: {db}")));
    }
    Ok(())
}
