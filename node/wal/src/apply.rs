//! Apply threads: hand committed entries to the state machine in index order
//! per shard (a shard always maps to the same thread), build snapshots and
//! restore received ones, off the poll threads.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use raft::eraftpb::ConfState;

use crate::storage::GeneratedSnapshot;
use crate::{ShardHandle, ShardId, StateMachine};

/// One committed entry as the apply thread sees it.
pub struct ApplyItem {
    pub index: u64,
    /// Caller bytes of a normal entry; None for empty and conf change entries.
    pub data: Option<Bytes>,
    /// The configuration in force after this entry, if it changed it.
    pub conf_state: Option<ConfState>,
    /// In-flight proposal bytes to release once applied (leader's own proposals).
    pub release: usize,
}

pub enum ApplyMsg {
    Register {
        handle: Arc<ShardHandle>,
        applied: u64,
        /// Last index known to have carried data (conservatively `applied`
        /// after a restart, 0 for a new replica).
        last_data_index: u64,
        conf_index: u64,
        conf_state: ConfState,
    },
    Unregister {
        shard: ShardId,
    },
    Entries {
        shard: ShardId,
        items: Vec<ApplyItem>,
    },
    GenSnapshot {
        shard: ShardId,
    },
    Restore {
        shard: ShardId,
        index: u64,
        conf_state: ConfState,
        data: Bytes,
        done: Sender<Result<(), String>>,
    },
    Shutdown,
}

struct ApplyShard {
    handle: Arc<ShardHandle>,
    applied: u64,
    /// Index of the last entry that carried data: entries after it up to
    /// `applied` did not change the state machine.
    last_data_index: u64,
    /// Recent configurations by the index they took effect at, so a
    /// snapshot at index i carries the configuration in force at i.
    conf_history: VecDeque<(u64, ConfState)>,
}

const CONF_HISTORY: usize = 16;

impl ApplyShard {
    fn conf_at(&self, index: u64) -> Option<ConfState> {
        self.conf_history
            .iter()
            .rev()
            .find(|(i, _)| *i <= index)
            .map(|(_, cs)| cs.clone())
    }
}

pub fn run(rx: Receiver<ApplyMsg>, sm: Arc<dyn StateMachine>) {
    let mut shards: HashMap<ShardId, ApplyShard> = HashMap::new();
    while let Ok(msg) = rx.recv() {
        match msg {
            ApplyMsg::Register {
                handle,
                applied,
                last_data_index,
                conf_index,
                conf_state,
            } => {
                handle.applied.store(applied, Ordering::Release);
                shards.insert(
                    handle.shard,
                    ApplyShard {
                        handle,
                        applied,
                        last_data_index,
                        conf_history: VecDeque::from([(conf_index, conf_state)]),
                    },
                );
            }
            ApplyMsg::Unregister { shard } => {
                shards.remove(&shard);
            }
            ApplyMsg::Entries { shard, items } => {
                let Some(s) = shards.get_mut(&shard) else {
                    continue;
                };
                for item in items {
                    if item.index <= s.applied {
                        // Already applied (re-delivery after a restore); the
                        // state machine must see each index once.
                        release(s, item.release);
                        continue;
                    }
                    if let Some(data) = &item.data {
                        s.last_data_index = item.index;
                        if let Err(e) = sm.apply(shard, item.index, data) {
                            // The leader admits entries before proposing, so
                            // this is a bug or an engine failure; the entry
                            // stays in the log until flushed_index passes it.
                            tracing::error!(shard, index = item.index, error = %e, "state machine failed to apply a committed entry");
                        }
                    }
                    if let Some(cs) = item.conf_state {
                        s.conf_history.push_back((item.index, cs));
                        if s.conf_history.len() > CONF_HISTORY {
                            s.conf_history.pop_front();
                        }
                    }
                    s.applied = item.index;
                    s.handle.applied.store(item.index, Ordering::Release);
                    release(s, item.release);
                }
            }
            ApplyMsg::GenSnapshot { shard } => {
                let Some(s) = shards.get(&shard) else {
                    continue;
                };
                let built = build_snapshot(&*sm, s);
                let mut slot = s.handle.snap.lock();
                slot.generating = false;
                match built {
                    Ok(g) => slot.ready = Some(g),
                    Err(e) => {
                        tracing::warn!(shard, error = %e, "could not build a snapshot; raft will ask again")
                    }
                }
            }
            ApplyMsg::Restore {
                shard,
                index,
                conf_state,
                data,
                done,
            } => {
                let r = sm.restore(shard, index, &data);
                if r.is_ok() {
                    if let Some(s) = shards.get_mut(&shard) {
                        s.applied = index;
                        s.last_data_index = index;
                        s.handle.applied.store(index, Ordering::Release);
                        s.conf_history.clear();
                        s.conf_history.push_back((index, conf_state));
                    }
                }
                let _ = done.send(r);
            }
            ApplyMsg::Shutdown => break,
        }
    }
}

fn release(s: &ApplyShard, bytes: usize) {
    if bytes > 0 {
        s.handle.inflight_bytes.fetch_sub(bytes, Ordering::AcqRel);
    }
}

fn build_snapshot(sm: &dyn StateMachine, s: &ApplyShard) -> Result<GeneratedSnapshot, String> {
    // Runs on the shard's apply thread, so no apply races the export: the
    // data reflects every entry up to `s.applied`.
    let (sm_index, data) = sm.snapshot(s.handle.shard)?;
    if sm_index > s.applied {
        return Err(format!(
            "state machine snapshot claims index {sm_index} beyond applied {}",
            s.applied
        ));
    }
    // If the export holds every data entry applied so far, it is the state
    // at `applied` (later entries were empty or conf changes), which keeps
    // the snapshot's configuration known even across restarts.
    let index = if sm_index >= s.last_data_index {
        s.applied
    } else {
        sm_index
    };
    let conf_state = s.conf_at(index).ok_or_else(|| {
        format!("configuration at index {index} unknown (restart since); waiting for a newer flush")
    })?;
    Ok(GeneratedSnapshot {
        index,
        conf_state,
        data: Bytes::from(data),
    })
}
