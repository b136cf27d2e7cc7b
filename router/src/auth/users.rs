//! InfluxDB 1.x users on top of the router's roles: a user is admin (every
//! role on every database) or holds READ, WRITE or ALL on some databases,
//! which map onto the `read` and `write` roles there. The records live in
//! etcd (`users_etcd.rs`); this file holds the pure decisions (what a
//! GRANT or REVOKE makes of a record, which roles a record gives, whether
//! a user may do a request) and the in-memory copy the watch keeps.
//!
//! Passwords are bcrypt hashes, as InfluxDB stores them. bcrypt is slow on
//! purpose, so a password that verified once is remembered as a keyed
//! digest (HMAC-SHA-256 under a key drawn when the router starts) next to
//! the hash it verified against: a changed password or a dropped user
//! invalidates it, and the plain password is never kept.

use super::{Denied, Role};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use ring::hmac;
use serde::{Deserialize, Serialize};
use shardhouse_common::credential::constant_time_eq;
use shardhouse_influxql::Privilege;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// InfluxDB's bcrypt cost (Go's `bcrypt.DefaultCost`).
pub const BCRYPT_COST: u32 = 10;

/// A user's privilege on one database. The discriminants are InfluxDB's
/// bits (READ 1, WRITE 2, ALL 3): REVOKE clears bits, as it does there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DbPrivilege {
    None = 0,
    Read = 1,
    Write = 2,
    All = 3,
}

impl DbPrivilege {
    fn from_bits(bits: u8) -> DbPrivilege {
        match bits & 3 {
            1 => DbPrivilege::Read,
            2 => DbPrivilege::Write,
            3 => DbPrivilege::All,
            _ => DbPrivilege::None,
        }
    }

    /// The roles it gives on its database.
    pub fn roles(self) -> &'static [Role] {
        match self {
            DbPrivilege::None => &[],
            DbPrivilege::Read => &[Role::Read],
            DbPrivilege::Write => &[Role::Write],
            DbPrivilege::All => &[Role::Read, Role::Write],
        }
    }

    /// As `SHOW GRANTS` prints it.
    pub fn influx_text(self) -> &'static str {
        self.statement_privilege().as_str()
    }

    fn statement_privilege(self) -> Privilege {
        match self {
            DbPrivilege::None => Privilege::None,
            DbPrivilege::Read => Privilege::Read,
            DbPrivilege::Write => Privilege::Write,
            DbPrivilege::All => Privilege::All,
        }
    }
}

impl From<Privilege> for DbPrivilege {
    fn from(p: Privilege) -> DbPrivilege {
        match p {
            Privilege::None => DbPrivilege::None,
            Privilege::Read => DbPrivilege::Read,
            Privilege::Write => DbPrivilege::Write,
            Privilege::All => DbPrivilege::All,
        }
    }
}

/// One user as stored in etcd (JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserRecord {
    pub name: String,
    /// bcrypt hash of the password.
    pub hash: String,
    pub admin: bool,
    /// Per-database privileges; `None` entries stay after a REVOKE, as
    /// InfluxDB keeps them (SHOW GRANTS lists `NO PRIVILEGES`).
    #[serde(default)]
    pub privileges: BTreeMap<String, DbPrivilege>,
}

/// `GRANT privilege [ON db]`: ALL without a database makes the user admin;
/// a database privilege replaces the one held there (InfluxDB's
/// SetPrivilege).
pub fn granted(u: &UserRecord, privilege: Privilege, database: Option<&str>) -> UserRecord {
    let mut out = u.clone();
    match database {
        None => out.admin = true,
        Some(db) => {
            out.privileges.insert(db.to_owned(), privilege.into());
        }
    }
    out
}

/// `REVOKE privilege [ON db]`: ALL without a database takes admin away; on
/// a database, ALL leaves nothing and READ or WRITE clears that bit.
pub fn revoked(u: &UserRecord, privilege: Privilege, database: Option<&str>) -> UserRecord {
    let mut out = u.clone();
    match database {
        None => out.admin = false,
        Some(db) => {
            let held = out.privileges.get(db).copied().unwrap_or(DbPrivilege::None);
            let left = match privilege {
                Privilege::All => DbPrivilege::None,
                p => DbPrivilege::from_bits(held as u8 & !(DbPrivilege::from(p) as u8)),
            };
            out.privileges.insert(db.to_owned(), left);
        }
    }
    out
}

/// The roles `u` has on `database`: all of them for an admin.
pub fn roles_on(u: &UserRecord, database: &str) -> BTreeSet<Role> {
    if u.admin {
        return Role::ALL.into_iter().collect();
    }
    u.privileges
        .get(database)
        .map(|p| p.roles().iter().copied().collect())
        .unwrap_or_default()
}

/// Whether `u` may do `need` on every one of `databases`. The admin role
/// (create, drop, delete, user management) is an admin user's only. A
/// request naming no database is let through: InfluxDB's SHOW DATABASES,
/// which then lists only what the user may read (`Ctx::lists_database`);
/// a SELECT or a write without a database fails on its own.
pub fn permit_user(
    u: &UserRecord,
    need: Role,
    databases: &[&str],
) -> std::result::Result<(), Denied> {
    if u.admin {
        return Ok(());
    }
    if need == Role::Admin {
        return Err(Denied::Role {
            token: format!("user {}", u.name),
            need,
            has: u
                .privileges
                .values()
                .flat_map(|p| p.roles().iter().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        });
    }
    match databases
        .iter()
        .find(|db| !db.is_empty() && !roles_on(u, db).contains(&need))
    {
        None => Ok(()),
        Some(db) => Err(Denied::Database {
            token: format!("user {}", u.name),
            database: (*db).to_owned(),
        }),
    }
}

/// `CREATE USER` over what is stored: InfluxDB answers an existing user
/// with the same password and admin flag as created again (no change), and
/// "user already exists" otherwise.
pub fn create_conflict(existing: &UserRecord, password: &str, admin: bool) -> Result<()> {
    if existing.admin == admin && verify_hash(password, &existing.hash) {
        Ok(())
    } else {
        Err(Error::BadRequest("user already exists".into()))
    }
}

/// A new record with `password` hashed (slow: call off the async workers).
pub fn new_record(name: &str, password: &str, admin: bool) -> Result<UserRecord> {
    if name.is_empty() {
        return Err(Error::BadRequest("username required".into()));
    }
    Ok(UserRecord {
        name: name.to_owned(),
        hash: hash_password(password)?,
        admin,
        privileges: BTreeMap::new(),
    })
}

pub fn hash_password(password: &str) -> Result<String> {
    bcrypt::hash(password, BCRYPT_COST)
        .map_err(|e| Error::Internal(format!("hashing the password: {e}")))
}

fn verify_hash(password: &str, hash: &str) -> bool {
    bcrypt::verify(password, hash).unwrap_or(false)
}

/// How a user name travels with its password through the doors' one
/// `presented` string (`presented_token`): NUL cannot occur in a header
/// value, and a query parameter spelling it only says what `u` and `p`
/// would have said.
const USER_MARK: char = '\0';

/// `user` and `password` as one presented credential.
pub fn user_credential(user: &str, password: &str) -> String {
    format!("{USER_MARK}{user}{USER_MARK}{password}")
}

/// The user and password of a [`user_credential`], else `None` (a token).
pub fn split_credential(presented: &str) -> Option<(&str, &str)> {
    presented.strip_prefix(USER_MARK)?.split_once(USER_MARK)
}

/// A user as last seen: etcd's mod revision and the record (`None` once
/// deleted), so an older watch event never overwrites a newer local write.
type Seen = (i64, Option<Arc<UserRecord>>);

/// The users every router knows (kept by the etcd watch) and the passwords
/// verified so far.
pub struct UserCache {
    users: RwLock<HashMap<String, Seen>>,
    /// name -> (hash verified against, keyed digest of the password).
    verified: RwLock<HashMap<String, (String, hmac::Tag)>>,
    key: hmac::Key,
}

impl Default for UserCache {
    fn default() -> Self {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, &rand_fallback()));
        UserCache {
            users: RwLock::new(HashMap::new()),
            verified: RwLock::new(HashMap::new()),
            key,
        }
    }
}

/// Only if the system's random source fails: the process id and time,
/// which still differ between routers and restarts.
fn rand_fallback() -> Vec<u8> {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{t}:{}", std::process::id()).into_bytes()
}

impl UserCache {
    /// Records the state of one user at `revision` (newer wins).
    pub fn set(&self, name: &str, revision: i64, record: Option<UserRecord>) {
        let mut users = self.users.write();
        let newer = users.get(name).is_none_or(|(r, _)| *r <= revision);
        if newer {
            users.insert(name.to_owned(), (revision, record.map(Arc::new)));
        }
    }

    /// Replaces everything with a full listing at `revision`.
    pub fn replace_all(&self, revision: i64, records: Vec<UserRecord>) {
        let mut users = self.users.write();
        users.clear();
        for r in records {
            users.insert(r.name.clone(), (revision, Some(Arc::new(r))));
        }
    }

    pub fn get(&self, name: &str) -> Option<Arc<UserRecord>> {
        self.users.read().get(name).and_then(|(_, r)| r.clone())
    }

    /// The user when `password` is theirs; `None` for an unknown user,
    /// `Err(Denied::Invalid)` for a wrong password.
    pub fn verify(
        &self,
        name: &str,
        password: &str,
    ) -> std::result::Result<Option<Arc<UserRecord>>, Denied> {
        let Some(user) = self.get(name) else {
            return Ok(None);
        };
        let digest = hmac::sign(&self.key, password.as_bytes());
        let cached = self.verified.read().get(name).is_some_and(|(hash, tag)| {
            *hash == user.hash && constant_time_eq(tag.as_ref(), digest.as_ref())
        });
        if cached {
            return Ok(Some(user));
        }
        if !slow(|| verify_hash(password, &user.hash)) {
            return Err(Denied::Invalid);
        }
        self.verified
            .write()
            .insert(name.to_owned(), (user.hash.clone(), digest));
        Ok(Some(user))
    }
}

/// Runs a bcrypt step where it does not stall the other tasks of a worker
/// thread when it can (a multi-threaded runtime).
fn slow<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(admin: bool, privileges: &[(&str, DbPrivilege)]) -> UserRecord {
        UserRecord {
            name: "jdoe".into(),
            hash: String::new(),
            admin,
            privileges: privileges
                .iter()
                .map(|(d, p)| (d.to_string(), *p))
                .collect(),
        }
    }

    #[test]
    fn grants_map_onto_roles() {
        let u = user(false, &[("a", DbPrivilege::Read), ("b", DbPrivilege::All)]);
        assert_eq!(roles_on(&u, "a"), [Role::Read].into());
        assert_eq!(roles_on(&u, "b"), [Role::Read, Role::Write].into());
        assert!(roles_on(&u, "c").is_empty());
        assert_eq!(roles_on(&user(true, &[]), "c"), Role::ALL.into());
    }

    #[test]
    fn a_user_may_only_what_it_was_granted() {
        let u = user(
            false,
            &[("a", DbPrivilege::Read), ("w", DbPrivilege::Write)],
        );
        assert!(permit_user(&u, Role::Read, &["a"]).is_ok());
        assert!(matches!(
            permit_user(&u, Role::Write, &["a"]),
            Err(Denied::Database { database, .. }) if database == "a"
        ));
        assert!(permit_user(&u, Role::Write, &["w"]).is_ok());
        assert!(permit_user(&u, Role::Read, &["a", "w"]).is_err());
        // No database named: let through (SHOW DATABASES filters).
        assert!(permit_user(&u, Role::Read, &[""]).is_ok());
        assert!(permit_user(&user(false, &[]), Role::Read, &[]).is_ok());
        // Admin statements are an admin's.
        assert!(matches!(
            permit_user(&u, Role::Admin, &["a"]),
            Err(Denied::Role {
                need: Role::Admin,
                ..
            })
        ));
        assert!(permit_user(&user(true, &[]), Role::Admin, &["x"]).is_ok());
    }

    #[test]
    fn grant_replaces_and_revoke_clears_bits() {
        let u = user(false, &[]);
        let u = granted(&u, Privilege::Write, Some("db"));
        assert_eq!(u.privileges["db"], DbPrivilege::Write);
        let u = granted(&u, Privilege::All, Some("db"));
        assert_eq!(u.privileges["db"], DbPrivilege::All);
        let u = revoked(&u, Privilege::Read, Some("db"));
        assert_eq!(u.privileges["db"], DbPrivilege::Write);
        let u = revoked(&u, Privilege::All, Some("db"));
        assert_eq!(u.privileges["db"], DbPrivilege::None);
        assert_eq!(u.privileges["db"].influx_text(), "NO PRIVILEGES");
        let u = granted(&u, Privilege::All, None);
        assert!(u.admin && !revoked(&u, Privilege::All, None).admin);
    }

    #[test]
    fn credentials_round_trip_and_tokens_are_not_users() {
        let c = user_credential("jdoe", "pa:ss");
        assert_eq!(split_credential(&c), Some(("jdoe", "pa:ss")));
        assert_eq!(split_credential("a-token"), None);
    }

    #[test]
    fn passwords_verify_against_the_hash_and_changes_invalidate() {
        let cache = UserCache::default();
        let mut r = new_record("jdoe", "secret", false).unwrap();
        cache.set("jdoe", 5, Some(r.clone()));
        assert!(cache.verify("jdoe", "secret").unwrap().is_some());
        // Second time from the digest cache, same answer.
        assert!(cache.verify("jdoe", "secret").unwrap().is_some());
        assert_eq!(cache.verify("jdoe", "wrong").unwrap_err(), Denied::Invalid);
        assert!(cache.verify("nobody", "secret").unwrap().is_none());
        r.hash = hash_password("other").unwrap();
        cache.set("jdoe", 6, Some(r));
        assert_eq!(cache.verify("jdoe", "secret").unwrap_err(), Denied::Invalid);
        // An older event does not undo a newer one.
        cache.set("jdoe", 4, None);
        assert!(cache.get("jdoe").is_some());
        cache.set("jdoe", 7, None);
        assert!(cache.get("jdoe").is_none());
        assert!(create_conflict(&new_record("x", "p", true).unwrap(), "p", true).is_ok());
        assert!(create_conflict(&new_record("x", "p", true).unwrap(), "p", false).is_err());
        assert!(new_record("", "p", false).is_err());
    }
}
