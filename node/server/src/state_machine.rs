//! What the WAL applies committed entries to: decode the `WalEntry` envelope
//! the leader wrote and hand its Arrow bytes to the engine untouched.

use bytes::Bytes;
use prost::Message as _;
use shardhouse_common::proto::WalEntry;
use shardhouse_engine::{Applied, Engine, TableBatchRef};
use shardhouse_wal::{ApplyOutcome, ShardId, StateMachine};
use std::sync::Arc;

pub struct EngineStateMachine {
    engine: Arc<Engine>,
}

impl EngineStateMachine {
    pub fn new(engine: Arc<Engine>) -> Arc<EngineStateMachine> {
        Arc::new(EngineStateMachine { engine })
    }
}

impl StateMachine for EngineStateMachine {
    fn apply(&self, shard: ShardId, index: u64, data: &Bytes) -> Result<ApplyOutcome, String> {
        // Leaders append an empty entry on election; there is nothing to store.
        if data.is_empty() {
            return Ok(ApplyOutcome::Applied);
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
                Err(e) => Err(format!("shard {shard} index {index}: {e}")),
            };
        }
        // A write's one shape (shardhouse_common::wire): its tables, each
        // naming its database. An entry with neither tables nor an operation
        // is layout 1's single-table shape (its fields are reserved now).
        if entry.tables.is_empty() {
            return Ok(ApplyOutcome::Rejected(format!(
                "shard {shard} index {index}: the entry carries no tables and no storage \
                 operation (a storage layout 1 entry?); it is not stored"
            )));
        }
        let tables: Vec<TableBatchRef<'_>> = entry
            .tables
            .iter()
            .map(|t| TableBatchRef {
                database: &t.database,
                measurement: &t.measurement,
                points_ipc: &t.points_ipc,
                series_ipc: &t.series_ipc,
            })
            .collect();
        match self.engine.apply_tables(shard, index, &tables) {
            Ok(Applied::Stored) => Ok(ApplyOutcome::Applied),
            Ok(Applied::Rejected(e)) => Ok(ApplyOutcome::Rejected(e.to_string())),
            Err(e) => Err(format!("shard {shard} index {index}: {e}")),
        }
    }

    fn flushed_index(&self, shard: ShardId) -> u64 {
        self.engine.flushed_index(shard)
    }

    fn snapshot(&self, shard: ShardId) -> Result<(u64, Vec<u8>), String> {
        self.engine
            .export_shard(shard)
            .map_err(|e| format!("shard {shard}: snapshot export failed: {e}"))
    }

    fn restore(&self, shard: ShardId, index: u64, data: &[u8]) -> Result<(), String> {
        self.engine
            .import_shard(shard, index, data)
            .map_err(|e| format!("shard {shard}: snapshot import failed: {e}"))
    }
}
