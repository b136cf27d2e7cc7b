//! Fault injection for tests, compiled in and off unless the environment
//! asks for it (docs/operations.md, "Testing faults"):
//!
//! `SHARDHOUSE_TEST_FAULT_APPLY=node=<id>,shard=<s>,entry=<n>` makes node
//! `<id>` fail to apply the `<n>`-th data entry of shard `<s>` it applies
//! after starting, and every retry of that same entry, as an engine that
//! keeps failing would. Other nodes, shards and entries are untouched. The
//! replica stops at the entry and reports it, until it is rebuilt from a
//! peer's snapshot (which covers the entry).
//!
//! `SHARDHOUSE_TEST_FAULT_DISK=node=<id|*>,<key>=<n>[,...][;...]` sets the
//! WAL disk's test faults and sizes on the nodes it names:
//! `wal_write_delay_ms` (every WAL write batch sleeps first: a slow disk),
//! `fail_wal_sync_after` (the synced write after that many fails its fsync:
//! the node stops), `wal_reserve_mb` (free space below which writes are
//! refused), `max_log_mb` (a shard's unflushed log bound) and `keep_log=1`
//! (the log is never compacted, so a test reads every entry afterwards).

use parking_lot::Mutex;
use shardhouse_wal::{DiskFaults, ShardId, WalConfig};
use std::time::Duration;

pub const APPLY_ENV: &str = "SHARDHOUSE_TEST_FAULT_APPLY";
pub const DISK_ENV: &str = "SHARDHOUSE_TEST_FAULT_DISK";

/// Applies `SHARDHOUSE_TEST_FAULT_DISK` to this node's WAL settings.
pub fn apply_disk_env(node_id: u64, cfg: &mut WalConfig) {
    let Ok(spec) = std::env::var(DISK_ENV) else {
        return;
    };
    match parse_disk(&spec, node_id) {
        Ok(settings) => {
            if settings != DiskSettings::default() {
                tracing::warn!(spec, ?settings, "test disk settings on");
            }
            settings.apply(cfg);
        }
        Err(why) => tracing::error!(spec, why, "ignoring {DISK_ENV}"),
    }
}

/// What `SHARDHOUSE_TEST_FAULT_DISK` sets for one node.
#[derive(Debug, Default, PartialEq, Eq)]
struct DiskSettings {
    faults: DiskFaults,
    reserve_bytes: Option<u64>,
    max_log_bytes: Option<u64>,
    /// Never compact the log, so a test can read every entry afterwards
    /// (`shardhouse_wal::inspect`; the backup suite maps points to indexes).
    keep_log: bool,
}

impl DiskSettings {
    fn apply(self, cfg: &mut WalConfig) {
        cfg.disk_faults = self.faults;
        if let Some(b) = self.reserve_bytes {
            cfg.disk_reserve_bytes = b;
        }
        if let Some(b) = self.max_log_bytes {
            cfg.max_log_bytes_per_shard = b;
        }
        if self.keep_log {
            cfg.compact_min_entries = u64::MAX;
        }
    }
}

/// `node=<id|*>,key=n,...;...` -> the settings of `node_id` (later specs
/// naming it win).
fn parse_disk(spec: &str, node_id: u64) -> Result<DiskSettings, String> {
    let mut out = DiskSettings::default();
    for one in spec.split(';').filter(|s| !s.trim().is_empty()) {
        let mut mine = None;
        let mut s = DiskSettings::default();
        for part in one.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            if k == "node" {
                mine = Some(v == "*" || v.parse::<u64>().ok() == Some(node_id));
                continue;
            }
            let n: u64 = v.parse().map_err(|_| format!("`{part}`: not a number"))?;
            match k {
                "wal_write_delay_ms" => s.faults.write_delay = Duration::from_millis(n),
                "fail_wal_sync_after" => s.faults.fail_sync_after = n,
                "wal_reserve_mb" => s.reserve_bytes = Some(n << 20),
                "max_log_mb" => s.max_log_bytes = Some(n << 20),
                "keep_log" => s.keep_log = n != 0,
                _ => return Err(format!("`{part}`: expected node=, wal_write_delay_ms=, fail_wal_sync_after=, wal_reserve_mb=, max_log_mb=, keep_log=")),
            }
        }
        match mine {
            None => return Err(format!("`{one}`: node= is required")),
            Some(true) => {
                if s.faults != DiskFaults::default() {
                    out.faults = s.faults;
                }
                out.reserve_bytes = s.reserve_bytes.or(out.reserve_bytes);
                out.max_log_bytes = s.max_log_bytes.or(out.max_log_bytes);
                out.keep_log |= s.keep_log;
            }
            Some(false) => {}
        }
    }
    Ok(out)
}

/// One entry of one shard that fails to apply, for good.
#[derive(Debug)]
pub struct ApplyFault {
    shard: ShardId,
    nth: u64,
    state: Mutex<(u64, Option<u64>)>,
}

impl ApplyFault {
    /// The fault `SHARDHOUSE_TEST_FAULT_APPLY` sets for this node, if any.
    pub fn from_env(node_id: u64) -> Option<ApplyFault> {
        let spec = std::env::var(APPLY_ENV).ok()?;
        match parse(&spec) {
            Ok((node, fault)) if node == node_id => {
                tracing::warn!(spec, "test fault injection on: an entry will fail to apply");
                Some(fault)
            }
            Ok(_) => None,
            Err(why) => {
                tracing::error!(spec, why, "ignoring {APPLY_ENV}");
                None
            }
        }
    }

    /// Err when this apply is the injected failure.
    pub fn check(&self, shard: ShardId, index: u64) -> Result<(), String> {
        if shard != self.shard {
            return Ok(());
        }
        let mut st = self.state.lock();
        let (seen, latched) = &mut *st;
        if latched.is_none() {
            *seen += 1;
            if *seen == self.nth {
                *latched = Some(index);
            }
        }
        if *latched == Some(index) {
            return Err(format!(
                "injected apply failure ({APPLY_ENV}) at shard {shard} index {index}"
            ));
        }
        Ok(())
    }
}

/// `node=<id>,shard=<s>,entry=<n>` -> (node, fault).
fn parse(spec: &str) -> Result<(u64, ApplyFault), String> {
    let (mut node, mut shard, mut nth) = (None, None, None);
    for part in spec.split(',') {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("`{part}` is not key=value"))?;
        let v: u64 = v
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: not a number"))?;
        match k.trim() {
            "node" => node = Some(v),
            "shard" => shard = Some(v as ShardId),
            "entry" if v > 0 => nth = Some(v),
            _ => return Err(format!("`{part}`: expected node=, shard=, entry=(>= 1)")),
        }
    }
    match (node, shard, nth) {
        (Some(node), Some(shard), Some(nth)) => Ok((
            node,
            ApplyFault {
                shard,
                nth,
                state: Mutex::new((0, None)),
            },
        )),
        _ => Err("node=, shard= and entry= are all required".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_entry_of_the_shard_fails_every_time_and_nothing_else() {
        let (node, f) = parse("node=2,shard=1,entry=2").unwrap();
        assert_eq!(node, 2);
        assert!(f.check(0, 5).is_ok(), "another shard");
        assert!(f.check(1, 7).is_ok(), "first entry");
        assert!(f.check(1, 8).is_err(), "second entry");
        assert!(f.check(1, 8).is_err(), "its retry");
        assert!(f.check(1, 9).is_ok(), "later entries (after a rebuild)");
        assert!(parse("node=1,shard=0").is_err());
        assert!(parse("node=1,shard=0,entry=0").is_err());
        assert!(parse("node=x,shard=0,entry=1").is_err());
    }

    #[test]
    fn disk_settings_apply_to_the_nodes_they_name() {
        let spec = "node=3,wal_write_delay_ms=40;node=*,max_log_mb=4,wal_reserve_mb=1";
        let three = parse_disk(spec, 3).unwrap();
        assert_eq!(three.faults.write_delay, Duration::from_millis(40));
        assert_eq!(three.max_log_bytes, Some(4 << 20));
        assert_eq!(three.reserve_bytes, Some(1 << 20));
        let one = parse_disk(spec, 1).unwrap();
        assert_eq!(one.faults, DiskFaults::default());
        assert_eq!(one.max_log_bytes, Some(4 << 20));
        let mut cfg = WalConfig::default();
        parse_disk("node=2,fail_wal_sync_after=7", 2)
            .unwrap()
            .apply(&mut cfg);
        assert_eq!(cfg.disk_faults.fail_sync_after, 7);
        assert_eq!(
            cfg.max_log_bytes_per_shard,
            WalConfig::default().max_log_bytes_per_shard
        );
        assert!(parse_disk("wal_write_delay_ms=4", 1).is_err());
        assert!(parse_disk("node=1,bogus=4", 1).is_err());
        assert!(parse_disk("node=1,max_log_mb=x", 1).is_err());
    }

    #[test]
    fn keep_log_turns_compaction_off_for_the_named_nodes_only() {
        let spec = "node=2,keep_log=1";
        let mut kept = WalConfig::default();
        parse_disk(spec, 2).unwrap().apply(&mut kept);
        assert_eq!(kept.compact_min_entries, u64::MAX);
        let mut other = WalConfig::default();
        parse_disk(spec, 1).unwrap().apply(&mut other);
        assert_eq!(
            other.compact_min_entries,
            WalConfig::default().compact_min_entries
        );
    }
}
