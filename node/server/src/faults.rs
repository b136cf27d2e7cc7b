//! Fault injection for tests, compiled in and off unless the environment
//! asks for it (docs/operations.md, "Testing faults"):
//!
//! `SHARDHOUSE_TEST_FAULT_APPLY=node=<id>,shard=<s>,entry=<n>` makes node
//! `<id>` fail to apply the `<n>`-th data entry of shard `<s>` it applies
//! after starting, and every retry of that same entry, as an engine that
//! keeps failing would. Other nodes, shards and entries are untouched. The
//! replica stops at the entry and reports it, until it is rebuilt from a
//! peer's snapshot (which covers the entry).

use parking_lot::Mutex;
use shardhouse_wal::ShardId;

pub const APPLY_ENV: &str = "SHARDHOUSE_TEST_FAULT_APPLY";

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
}
