//! What the WAL applies committed entries to: decode the `WalEntry` envelope
//! the leader wrote and hand its Arrow bytes to the engine untouched.

use crate::faults::ApplyFault;
use bytes::Bytes;
use prost::Message as _;
use shardhouse_common::proto::WalEntry;
use shardhouse_engine::{Applied, Engine, TableBatchRef};
use shardhouse_wal::{ApplyOutcome, ShardId, StateMachine, StateMachineError};
use std::sync::Arc;

pub struct EngineStateMachine {
    engine: Arc<Engine>,
    /// Test fault injection (`SHARDHOUSE_TEST_FAULT_APPLY`), None in service.
    fault: Option<ApplyFault>,
}

impl EngineStateMachine {
    pub fn new(engine: Arc<Engine>, node_id: u64) -> Arc<EngineStateMachine> {
        Arc::new(EngineStateMachine {
            engine,
            fault: ApplyFault::from_env(node_id),
        })
    }
}

impl StateMachine for EngineStateMachine {
    fn apply(
        &self,
        shard: ShardId,
        index: u64,
        data: &Bytes,
    ) -> Result<ApplyOutcome, StateMachineError> {
        // Leaders append an empty entry on election; there is nothing to store.
        if data.is_empty() {
            return Ok(ApplyOutcome::Applied);
        }
        if let Some(f) = &self.fault {
            f.check(shard, index)
                .map_err(|e| StateMachineError::other(format!("shard {shard} index {index}"), e))?;
        }
        // Decoding from `Bytes` slices the IPC payloads out of the entry.
        // The bytes are the same on every replica: an undecodable entry is
        // rejected by all of them alike.
        let entry = match WalEntry::decode(data.clone()) {
            Ok(e) => e,
            Err(e) => {
                return Ok(ApplyOutcome::Rejected(format!(
                    "shard {shard} index {index}: undecodable WalEntry: {e}"
                )))
            }
        };
        if let Some(op) = &entry.op {
            return match self.engine.apply_op(shard, index, op) {
                Ok(Applied::Stored) => Ok(ApplyOutcome::Applied),
                Ok(Applied::Rejected(e)) => Ok(ApplyOutcome::Rejected(e.to_string())),
                Err(e) => Err(StateMachineError::new(
                    format!("shard {shard} index {index}"),
                    e,
                )),
            };
        }
        let tables = match entry_tables(&entry) {
            Ok(tables) => tables,
            Err(why) => {
                return Ok(ApplyOutcome::Rejected(format!(
                    "shard {shard} index {index}: {why}"
                )))
            }
        };
        match self.engine.apply_tables(shard, index, &tables) {
            Ok(Applied::Stored) => Ok(ApplyOutcome::Applied),
            Ok(Applied::Rejected(e)) => Ok(ApplyOutcome::Rejected(e.to_string())),
            Err(e) => Err(StateMachineError::new(
                format!("shard {shard} index {index}"),
                e,
            )),
        }
    }

    fn flushed_index(&self, shard: ShardId) -> u64 {
        self.engine.flushed_index(shard)
    }

    fn snapshot(&self, shard: ShardId) -> Result<(u64, Vec<u8>), StateMachineError> {
        self.engine.export_shard(shard).map_err(|e| {
            StateMachineError::new(format!("shard {shard}: snapshot export failed"), e)
        })
    }

    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> Result<(), StateMachineError> {
        self.engine.import_shard(shard, index, data).map_err(|e| {
            StateMachineError::new(format!("shard {shard}: snapshot import failed"), e)
        })
    }
}

/// The tables of a write entry for the engine, in the one shape of a write
/// (`shardhouse_common::wire`): each names its database. An entry with
/// neither tables nor an operation is layout 1's single-table shape (its
/// fields are reserved now) and can never be stored.
fn entry_tables(entry: &WalEntry) -> Result<Vec<TableBatchRef<'_>>, String> {
    if entry.tables.is_empty() {
        return Err(
            "the entry carries no tables and no storage operation (a storage \
                    layout 1 entry?); it is not stored"
                .into(),
        );
    }
    Ok(entry
        .tables
        .iter()
        .map(|t| TableBatchRef {
            database: &t.database,
            measurement: &t.measurement,
            points_ipc: &t.points_ipc,
            series_ipc: &t.series_ipc,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardhouse_common::proto::TableBatch;
    use shardhouse_common::wire;

    #[test]
    fn a_write_entry_gives_the_engine_every_table_with_its_database() {
        let table = |m: &str, db: &str| TableBatch {
            measurement: m.into(),
            points_ipc: vec![1].into(),
            series_ipc: Bytes::new(),
            database: db.into(),
        };
        let bytes = wire::write_entry("r".into(), vec![table("cpu", "a"), table("mem", "b")])
            .encode_to_vec();
        let entry = WalEntry::decode(Bytes::from(bytes)).unwrap();
        let tables = entry_tables(&entry).unwrap();
        let got: Vec<(&str, &str)> = tables.iter().map(|t| (t.database, t.measurement)).collect();
        assert_eq!(got, [("a", "cpu"), ("b", "mem")]);
        assert_eq!(&tables[0].points_ipc[..], &[1]);
    }

    #[test]
    fn a_layout_1_entry_is_rejected_not_stored_without_a_database() {
        // request_id, measurement, points_ipc, series_ipc as layout 1 wrote them.
        let mut bytes = Vec::new();
        prost::encoding::string::encode(1, &"r".to_string(), &mut bytes);
        prost::encoding::string::encode(2, &"cpu".to_string(), &mut bytes);
        prost::encoding::bytes::encode(3, &vec![1u8, 2], &mut bytes);
        prost::encoding::bytes::encode(4, &vec![3u8], &mut bytes);
        let entry = WalEntry::decode(Bytes::from(bytes)).unwrap();
        let err = entry_tables(&entry).unwrap_err();
        assert!(err.contains("layout 1"), "{err}");
    }
}
