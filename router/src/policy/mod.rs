//! Retention policies as InfluxDB 1.x has them: several per database, one
//! of them the default, each with a duration (how long its points are
//! kept), a shard group duration and a replication count.
//!
//! A policy is a storage decision. The database's home policy (the one
//! `CREATE DATABASE` made, `autogen` unless named) is stored under the
//! database's own name, so a database written before policies existed
//! keeps its points; every other policy `rp` is the storage `db/rp`
//! (`shardhouse_common::names::policy_storage`). The nodes keep one
//! storage per name: its tables, tag index and retention, created,
//! retained and dropped through the shards' logs like any storage
//! operation. What is not storage (the list of policies, which is the
//! default, the shard group duration and replication InfluxDB shows) is
//! this catalog, kept in etcd ([`store`]) and cached by every router.
//!
//! This module decides (pure functions over [`DatabasePolicies`], with
//! InfluxDB 1.8's rules and error texts); [`store`] does the I/O.

pub mod store;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use shardhouse_common::names::policy_storage;
use thiserror::Error;

pub use store::PolicyStore;

/// The policy `CREATE DATABASE` makes when it names none.
pub const AUTOGEN: &str = "autogen";

const HOUR_NS: i64 = 3_600_000_000_000;
const DAY_NS: i64 = 24 * HOUR_NS;
/// InfluxDB's `MinRetentionPolicyDuration`.
pub const MIN_DURATION_NS: i64 = HOUR_NS;

/// One retention policy of a database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPolicy {
    pub name: String,
    /// The storage on the nodes holding the policy's points.
    pub storage: String,
    /// How long points are kept, in nanoseconds; 0 = forever.
    pub duration_ns: i64,
    pub shard_duration_ns: i64,
    /// Shown as InfluxDB shows it; the cluster's replication factor is
    /// the shard map's, one for every policy.
    pub replication: u64,
}

/// Every policy of one database and the default's name (which may name
/// a dropped policy, as InfluxDB leaves it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct DatabasePolicies {
    pub default: String,
    pub policies: Vec<RetentionPolicy>,
}

/// What `CREATE RETENTION POLICY` or `CREATE DATABASE ... WITH` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    pub name: String,
    pub duration_ns: i64,
    /// 0: chosen from the duration, as InfluxDB does.
    pub shard_duration_ns: i64,
    pub replication: u64,
}

/// What `ALTER RETENTION POLICY` changes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyUpdate {
    pub duration_ns: Option<i64>,
    pub shard_duration_ns: Option<i64>,
    pub replication: Option<u64>,
    pub make_default: bool,
}

/// Why a policy statement or a write's `rp` was refused, in InfluxDB
/// 1.8's words (clients and its test suite read them).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PolicyError {
    #[error("retention policy not found: {0}")]
    NotFound(String),
    #[error("database not found: {0}")]
    DatabaseNotFound(String),
    #[error("retention policy already exists")]
    Exists,
    #[error("retention policy conflicts with an existing policy")]
    Conflict,
    #[error("retention policy duration must be at least 1h0m0s")]
    DurationTooLow,
    #[error("retention policy duration must be greater than the shard duration")]
    IncompatibleDurations,
    #[error("replication factor must be greater than 0")]
    ReplicationTooLow,
    #[error("retention policy name required")]
    NameRequired,
    #[error("invalid name")]
    InvalidName,
    /// The catalog in etcd could not be read or written.
    #[error("retention policies are unavailable (etcd: {0}); retry later")]
    Unavailable(String),
}

/// InfluxDB's shard group duration for a policy duration: a week for
/// forever or six months and more, a day from two days, else an hour.
pub fn shard_group_duration(duration_ns: i64) -> i64 {
    if duration_ns == 0 || duration_ns >= 180 * DAY_NS {
        7 * DAY_NS
    } else if duration_ns >= 2 * DAY_NS {
        DAY_NS
    } else {
        HOUR_NS
    }
}

/// InfluxDB's `normalisedShardDuration`: unset picks from the duration,
/// below an hour is raised to an hour's group.
pub fn normalised_shard_duration(shard_ns: i64, duration_ns: i64) -> i64 {
    if shard_ns == 0 {
        shard_group_duration(duration_ns)
    } else if shard_ns < MIN_DURATION_NS {
        shard_group_duration(MIN_DURATION_NS)
    } else {
        shard_ns
    }
}

/// InfluxDB's rule for policy names (`ValidName`).
pub fn valid_name(name: &str) -> Result<(), PolicyError> {
    if name.is_empty() {
        return Err(PolicyError::NameRequired);
    }
    let bad = name == "."
        || name == ".."
        || name.contains(['/', '\\'])
        || name.chars().any(char::is_control);
    if bad || shardhouse_common::names::validate_database(name).is_err() {
        return Err(PolicyError::InvalidName);
    }
    Ok(())
}

fn checked(spec: &PolicySpec) -> Result<(i64, i64), PolicyError> {
    valid_name(&spec.name)?;
    if spec.replication < 1 {
        return Err(PolicyError::ReplicationTooLow);
    }
    if spec.duration_ns != 0 && spec.duration_ns < MIN_DURATION_NS {
        return Err(PolicyError::DurationTooLow);
    }
    let shard = normalised_shard_duration(spec.shard_duration_ns, spec.duration_ns);
    if spec.duration_ns > 0 && spec.duration_ns < shard {
        return Err(PolicyError::IncompatibleDurations);
    }
    Ok((spec.duration_ns, shard))
}

impl DatabasePolicies {
    /// A database no catalog entry names (written before policies, or
    /// created by a write): its home storage as `autogen`, the default.
    pub fn implicit(database: &str, duration_ns: i64) -> DatabasePolicies {
        DatabasePolicies {
            default: AUTOGEN.into(),
            policies: vec![RetentionPolicy {
                name: AUTOGEN.into(),
                storage: database.into(),
                duration_ns,
                shard_duration_ns: shard_group_duration(duration_ns),
                replication: 1,
            }],
        }
    }

    /// `CREATE DATABASE db [WITH ...]`: the first policy (the spec's, or
    /// autogen) is the default and lives in the database's own storage.
    /// Re-creating an existing database succeeds when the spec matches
    /// its default policy, as InfluxDB's `CreateDatabaseWithRetentionPolicy`.
    pub fn create_database(
        database: &str,
        existing: Option<&DatabasePolicies>,
        spec: Option<&PolicySpec>,
    ) -> Result<DatabasePolicies, PolicyError> {
        let Some(existing) = existing else {
            let spec = spec.cloned().unwrap_or_else(|| PolicySpec {
                name: AUTOGEN.into(),
                duration_ns: 0,
                shard_duration_ns: 0,
                replication: 1,
            });
            let (duration_ns, shard_duration_ns) = checked(&spec)?;
            return Ok(DatabasePolicies {
                default: spec.name.clone(),
                policies: vec![RetentionPolicy {
                    name: spec.name,
                    storage: database.into(),
                    duration_ns,
                    shard_duration_ns,
                    replication: spec.replication,
                }],
            });
        };
        if let Some(spec) = spec {
            let (duration_ns, shard_duration_ns) = checked(spec)?;
            let same = existing.get(&spec.name).is_some_and(|p| {
                p.duration_ns == duration_ns
                    && p.shard_duration_ns == shard_duration_ns
                    && p.replication == spec.replication
            });
            if !same || existing.default != spec.name {
                return Err(PolicyError::Conflict);
            }
        }
        Ok(existing.clone())
    }

    pub fn get(&self, name: &str) -> Option<&RetentionPolicy> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// The policy `rp` names, the default when absent or empty.
    pub fn resolve(&self, rp: Option<&str>) -> Result<&RetentionPolicy, PolicyError> {
        let name = rp.filter(|r| !r.is_empty()).unwrap_or(&self.default);
        self.get(name)
            .ok_or_else(|| PolicyError::NotFound(name.to_owned()))
    }

    /// `CREATE RETENTION POLICY`: Ok(None) when an identical policy is
    /// already there (nothing to do), else the new catalog and the policy
    /// whose storage must be created.
    pub fn create_policy(
        &self,
        database: &str,
        spec: &PolicySpec,
        make_default: bool,
    ) -> Result<Option<(DatabasePolicies, RetentionPolicy)>, PolicyError> {
        let (duration_ns, shard_duration_ns) = checked(spec)?;
        if let Some(p) = self.get(&spec.name) {
            if p.replication != spec.replication
                || p.duration_ns != duration_ns
                || p.shard_duration_ns != shard_duration_ns
            {
                return Err(PolicyError::Exists);
            }
            if make_default && self.default != spec.name {
                return Err(PolicyError::Conflict);
            }
            return Ok(None);
        }
        // Every policy but the home one has a storage of its own; the home
        // storage is never handed to another (its points were deleted when
        // its policy was dropped, its name stays the database's).
        let storage = policy_storage(database, &spec.name);
        let policy = RetentionPolicy {
            name: spec.name.clone(),
            storage,
            duration_ns,
            shard_duration_ns,
            replication: spec.replication,
        };
        let mut next = self.clone();
        next.policies.push(policy.clone());
        if make_default {
            next.default = spec.name.clone();
        }
        Ok(Some((next, policy)))
    }

    /// `ALTER RETENTION POLICY`: the new catalog and the policy as it now
    /// is (its storage's retention follows `duration_ns`).
    pub fn alter_policy(
        &self,
        name: &str,
        update: &PolicyUpdate,
    ) -> Result<(DatabasePolicies, RetentionPolicy), PolicyError> {
        let current = self
            .get(name)
            .ok_or_else(|| PolicyError::NotFound(name.to_owned()))?;
        if let Some(d) = update.duration_ns {
            if d != 0 && d < MIN_DURATION_NS {
                return Err(PolicyError::DurationTooLow);
            }
        }
        let duration_ns = update.duration_ns.unwrap_or(current.duration_ns);
        let shard_ns = update
            .shard_duration_ns
            .unwrap_or(current.shard_duration_ns);
        if duration_ns > 0 && duration_ns < shard_ns {
            return Err(PolicyError::IncompatibleDurations);
        }
        if update.replication == Some(0) {
            return Err(PolicyError::ReplicationTooLow);
        }
        let mut altered = current.clone();
        altered.duration_ns = duration_ns;
        if let Some(s) = update.shard_duration_ns {
            altered.shard_duration_ns = normalised_shard_duration(s, duration_ns);
        }
        if let Some(r) = update.replication {
            altered.replication = r;
        }
        let mut next = self.clone();
        for p in &mut next.policies {
            if p.name == name {
                *p = altered.clone();
            }
        }
        if update.make_default {
            next.default = name.to_owned();
        }
        Ok((next, altered))
    }

    /// `DROP RETENTION POLICY`: the new catalog and the dropped policy
    /// (None: there was none of that name, which InfluxDB accepts). The
    /// default keeps naming a dropped policy, as in InfluxDB: writes
    /// without `rp` then fail until it is created again or another is
    /// made the default.
    pub fn drop_policy(&self, name: &str) -> (DatabasePolicies, Option<RetentionPolicy>) {
        let mut next = self.clone();
        let dropped = next
            .policies
            .iter()
            .position(|p| p.name == name)
            .map(|i| next.policies.remove(i));
        (next, dropped)
    }
}

/// A duration as Go prints it (`168h0m0s`, `1h30m0s`, `0s`): InfluxDB's
/// `SHOW RETENTION POLICIES` columns.
pub fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let secs = ns / 1_000_000_000;
    let frac = ns % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    let s = if frac == 0 {
        s.to_string()
    } else {
        let f = format!("{:09}", frac);
        format!("{s}.{}", f.trim_end_matches('0'))
    };
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}
