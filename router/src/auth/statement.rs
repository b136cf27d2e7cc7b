//! The role an InfluxQL statement needs at `/query`, and the databases it
//! names besides the request's `db` (both checked against the token).

use super::{Access, Authorizer, Role};
use crate::error::Result;
use shardhouse_influxql::ast::{MeasurementName, Source};
use shardhouse_influxql::{Statement, UserStatement};

impl Authorizer {
    /// `/query` once parsed: the role the statements need (admin for any
    /// create, drop or delete) on the request's database and every
    /// database the statements name.
    pub fn permit_statements(
        &self,
        who: &Access,
        statements: &[Statement],
        database: &str,
    ) -> Result<()> {
        let mut databases: Vec<&str> = statements.iter().flat_map(named_databases).collect();
        if !database.is_empty() {
            databases.push(database);
        }
        self.permit(who, required_role_all(statements), &databases)?;
        // `SELECT ... INTO` also writes: the write role on its target.
        for target in into_targets(statements, database) {
            self.permit(who, Role::Write, &[target])?;
        }
        Ok(())
    }
}

/// The databases `SELECT ... INTO` statements write to (the request's
/// `db` when the target names none).
pub fn into_targets<'a>(statements: &'a [Statement], database: &'a str) -> Vec<&'a str> {
    statements
        .iter()
        .filter_map(|s| match s {
            Statement::Select(s) => s.into.as_ref(),
            _ => None,
        })
        .map(|into| into.database.as_deref().unwrap_or(database))
        .collect()
}

/// SELECT and SHOW read; whatever creates, drops or deletes is admin.
pub fn required_role(statement: &Statement) -> Role {
    match statement {
        Statement::Select(_)
        | Statement::Explain { .. }
        | Statement::ShowDatabases
        | Statement::ShowMeasurements(_)
        | Statement::ShowTagKeys(_)
        | Statement::ShowTagValues(_)
        | Statement::ShowFieldKeys(_)
        | Statement::ShowSeries(_)
        | Statement::ShowRetentionPolicies { .. }
        | Statement::ShowContinuousQueries
        | Statement::ShowCardinality(_) => Role::Read,
        Statement::CreateDatabase(_)
        | Statement::DropDatabase { .. }
        | Statement::DropMeasurement { .. }
        | Statement::DropSeries(_)
        | Statement::Delete(_)
        | Statement::CreateRetentionPolicy(_)
        | Statement::AlterRetentionPolicy(_)
        | Statement::DropRetentionPolicy { .. }
        | Statement::CreateContinuousQuery(_)
        | Statement::DropContinuousQuery { .. } => Role::Admin,
        // Users and grants, SHOW USERS included, are an admin's (InfluxDB).
        Statement::User(_) => Role::Admin,
    }
}

/// The role a whole request needs: the highest of its statements' (a batch
/// with one DROP needs admin), read for an empty one.
pub fn required_role_all(statements: &[Statement]) -> Role {
    statements
        .iter()
        .map(required_role)
        .max()
        .unwrap_or(Role::Read)
}

/// Databases a statement names itself (`ON db`, `db.rp.m`, CREATE/DROP
/// DATABASE), so a token limited to some databases cannot reach others
/// through the statement text.
pub fn named_databases(statement: &Statement) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    match statement {
        Statement::Select(s) | Statement::Explain { statement: s, .. } => {
            select_sources(&s.from, &mut out)
        }
        Statement::ShowDatabases
        | Statement::DropMeasurement { .. }
        | Statement::ShowContinuousQueries => {}
        Statement::CreateContinuousQuery(c) => {
            out.push(&c.database);
            select_sources(&c.select.from, &mut out);
        }
        Statement::DropContinuousQuery { database, .. } => out.push(database),
        Statement::ShowMeasurements(s) => out.extend(s.database.as_deref()),
        Statement::ShowTagKeys(s) => on_and_from(&s.database, &s.from, &mut out),
        Statement::ShowTagValues(s) => on_and_from(&s.database, &s.from, &mut out),
        Statement::ShowFieldKeys(s) => on_and_from(&s.database, &s.from, &mut out),
        Statement::ShowSeries(s) => on_and_from(&s.database, &s.from, &mut out),
        Statement::ShowCardinality(s) => on_and_from(&s.database, &s.from, &mut out),
        Statement::ShowRetentionPolicies { database } => out.extend(database.as_deref()),
        Statement::CreateDatabase(c) => out.push(&c.name),
        Statement::DropDatabase { name } => out.push(name),
        Statement::DropSeries(f) | Statement::Delete(f) => on_and_from(&None, &f.from, &mut out),
        Statement::CreateRetentionPolicy(c) => out.push(&c.database),
        Statement::AlterRetentionPolicy(a) => out.push(&a.database),
        Statement::DropRetentionPolicy { database, .. } => out.push(database),
        Statement::User(u) => match u {
            UserStatement::Grant { database, .. } | UserStatement::Revoke { database, .. } => {
                out.extend(database.as_deref())
            }
            _ => {}
        },
    }
    out
}

fn on_and_from<'a>(on: &'a Option<String>, from: &'a [MeasurementName], out: &mut Vec<&'a str>) {
    out.extend(on.as_deref());
    out.extend(from.iter().filter_map(|m| m.database.as_deref()));
}

fn select_sources<'a>(sources: &'a [Source], out: &mut Vec<&'a str>) {
    for s in sources {
        match s {
            Source::Measurement(m) => out.extend(m.database.as_deref()),
            Source::Subquery(inner) => select_sources(&inner.from, out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(q: &str) -> Role {
        required_role_all(&shardhouse_influxql::parse(q).unwrap().statements)
    }

    #[test]
    fn reads_need_read_and_changes_need_admin() {
        for q in [
            "SELECT * FROM cpu",
            "SHOW DATABASES",
            "SHOW MEASUREMENTS",
            "SHOW TAG KEYS FROM cpu",
            "SHOW SERIES",
            "SHOW FIELD KEYS",
            "SHOW RETENTION POLICIES ON db",
        ] {
            assert_eq!(role(q), Role::Read, "{q}");
        }
        for q in [
            "CREATE DATABASE x",
            "DROP DATABASE x",
            "DROP MEASUREMENT cpu",
            "DROP SERIES FROM cpu",
            "DELETE FROM cpu WHERE time < 0",
            "SELECT * FROM cpu; DROP MEASUREMENT cpu",
            "SHOW USERS",
            "GRANT READ ON db TO u",
            "CREATE USER u WITH PASSWORD 'p'",
        ] {
            assert_eq!(role(q), Role::Admin, "{q}");
        }
    }

    #[test]
    fn into_writes_to_its_target() {
        let q =
            shardhouse_influxql::parse("SELECT * INTO other..m FROM cpu; SELECT * INTO m FROM cpu")
                .unwrap();
        assert_eq!(into_targets(&q.statements, "db"), vec!["other", "db"]);
    }

    #[test]
    fn databases_named_in_the_text_are_found() {
        let dbs = |q: &str| {
            let p = shardhouse_influxql::parse(q).unwrap();
            p.statements
                .iter()
                .flat_map(|s| named_databases(s).into_iter().map(str::to_owned))
                .collect::<Vec<_>>()
        };
        assert_eq!(dbs("SELECT * FROM other.autogen.cpu"), vec!["other"]);
        assert_eq!(
            dbs("SELECT max(m) FROM (SELECT mean(x) AS m FROM o2..cpu)"),
            vec!["o2"]
        );
        assert_eq!(dbs("DROP DATABASE gone"), vec!["gone"]);
        assert_eq!(dbs("SHOW MEASUREMENTS ON x"), vec!["x"]);
        assert!(dbs("SELECT * FROM cpu").is_empty());
    }
}
