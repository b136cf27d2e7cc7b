//! RocksDB key and value layout. Every shard of the node shares one RocksDB
//! instance, so every key starts with a kind byte and the shard id; big-endian
//! integers keep one shard's log contiguous and ordered by index.
//!
//! - `0x01 | shard u32 BE | index u64 BE` -> encoded log entry
//! - `0x02 | shard u32 BE` -> the shard's [`LocalState`]

use bytes::Bytes;
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState};

use crate::error::{Result, WalError};
use crate::ShardId;

pub const LOG_PREFIX: u8 = 0x01;
pub const STATE_PREFIX: u8 = 0x02;

const ENTRY_VERSION: u8 = 1;
/// version + term + type + context length
const ENTRY_HEADER: usize = 1 + 8 + 1 + 4;

pub fn log_key(shard: ShardId, index: u64) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[0] = LOG_PREFIX;
    k[1..5].copy_from_slice(&shard.to_be_bytes());
    k[5..13].copy_from_slice(&index.to_be_bytes());
    k
}

/// Decodes a log key; None if it is not a log key.
pub fn parse_log_key(key: &[u8]) -> Option<(ShardId, u64)> {
    if key.len() != 13 || key[0] != LOG_PREFIX {
        return None;
    }
    let shard = u32::from_be_bytes(key[1..5].try_into().ok()?);
    let index = u64::from_be_bytes(key[5..13].try_into().ok()?);
    Some((shard, index))
}

pub fn state_key(shard: ShardId) -> [u8; 5] {
    let mut k = [0u8; 5];
    k[0] = STATE_PREFIX;
    k[1..5].copy_from_slice(&shard.to_be_bytes());
    k
}

pub fn parse_state_key(key: &[u8]) -> Option<ShardId> {
    if key.len() != 5 || key[0] != STATE_PREFIX {
        return None;
    }
    Some(u32::from_be_bytes(key[1..5].try_into().ok()?))
}

fn entry_type_byte(t: EntryType) -> u8 {
    match t {
        EntryType::EntryNormal => 0,
        EntryType::EntryConfChange => 1,
        EntryType::EntryConfChangeV2 => 2,
    }
}

/// Encodes an entry as `version | term LE | type | context len LE | context | data`.
/// The index lives in the key. One copy of the payload, into the value buffer.
pub fn encode_entry(e: &Entry) -> Vec<u8> {
    let mut v = Vec::with_capacity(ENTRY_HEADER + e.context.len() + e.data.len());
    v.push(ENTRY_VERSION);
    v.extend_from_slice(&e.term.to_le_bytes());
    v.push(entry_type_byte(e.get_entry_type()));
    v.extend_from_slice(&(e.context.len() as u32).to_le_bytes());
    v.extend_from_slice(&e.context);
    v.extend_from_slice(&e.data);
    v
}

/// Decodes an entry value read from RocksDB; data and context are zero-copy
/// slices of `value`.
pub fn decode_entry(index: u64, value: Bytes) -> Result<Entry> {
    if value.len() < ENTRY_HEADER || value[0] != ENTRY_VERSION {
        return Err(WalError::Corrupt(format!(
            "log entry {index}: bad header ({} bytes)",
            value.len()
        )));
    }
    let term = u64::from_le_bytes(value[1..9].try_into().expect("8 bytes"));
    let entry_type = match value[9] {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        t => {
            return Err(WalError::Corrupt(format!(
                "log entry {index}: unknown type {t}"
            )))
        }
    };
    let ctx_len = u32::from_le_bytes(value[10..14].try_into().expect("4 bytes")) as usize;
    if value.len() < ENTRY_HEADER + ctx_len {
        return Err(WalError::Corrupt(format!(
            "log entry {index}: context longer than value"
        )));
    }
    let mut e = Entry {
        index,
        term,
        context: value.slice(ENTRY_HEADER..ENTRY_HEADER + ctx_len),
        data: value.slice(ENTRY_HEADER + ctx_len..),
        ..Default::default()
    };
    e.set_entry_type(entry_type);
    Ok(e)
}

/// Everything about a shard's log that is not an entry. One key per shard so
/// that it is always written atomically.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalState {
    pub hard_state: HardState,
    pub conf_state: ConfState,
    /// Index of the conf change (or snapshot) that produced `conf_state`.
    pub conf_index: u64,
    /// Last index removed from the log (compaction or snapshot); the log
    /// starts at `truncated_index + 1`.
    pub truncated_index: u64,
    pub truncated_term: u64,
}

const STATE_VERSION: u8 = 1;

impl LocalState {
    pub fn encode(&self) -> Vec<u8> {
        let cs = self
            .conf_state
            .write_to_bytes()
            .expect("encoding a ConfState cannot fail");
        let mut v = Vec::with_capacity(1 + 6 * 8 + cs.len());
        v.push(STATE_VERSION);
        for x in [
            self.hard_state.term,
            self.hard_state.vote,
            self.hard_state.commit,
            self.conf_index,
            self.truncated_index,
            self.truncated_term,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&cs);
        v
    }

    pub fn decode(shard: ShardId, v: &[u8]) -> Result<LocalState> {
        if v.len() < 1 + 6 * 8 || v[0] != STATE_VERSION {
            return Err(WalError::Corrupt(format!(
                "shard {shard}: bad raft state record ({} bytes)",
                v.len()
            )));
        }
        let u = |i: usize| u64::from_le_bytes(v[1 + i * 8..9 + i * 8].try_into().expect("8 bytes"));
        let hs = HardState {
            term: u(0),
            vote: u(1),
            commit: u(2),
            ..Default::default()
        };
        let conf_state = ConfState::parse_from_bytes(&v[49..])
            .map_err(|e| WalError::Corrupt(format!("shard {shard}: bad conf state: {e}")))?;
        Ok(LocalState {
            hard_state: hs,
            conf_state,
            conf_index: u(3),
            truncated_index: u(4),
            truncated_term: u(5),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_sort_by_shard_then_index() {
        let mut keys = [
            log_key(2, 1),
            log_key(1, 256),
            log_key(1, 2),
            log_key(1, u64::MAX),
            log_key(0x0100_0000, 0),
        ];
        keys.sort();
        let parsed: Vec<_> = keys.iter().map(|k| parse_log_key(k).unwrap()).collect();
        assert_eq!(
            parsed,
            vec![(1, 2), (1, 256), (1, u64::MAX), (2, 1), (0x0100_0000, 0)]
        );
        // Log keys never collide with state keys.
        assert!(parse_state_key(&log_key(1, 1)).is_none());
        assert!(parse_log_key(&state_key(1)).is_none());
        assert_eq!(parse_state_key(&state_key(77)), Some(77));
        assert!(state_key(0)[..] > log_key(u32::MAX, u64::MAX)[..]);
    }

    #[test]
    fn entry_roundtrip_keeps_payload() {
        let mut e = Entry {
            index: 42,
            term: 7,
            context: Bytes::from_static(b"ctx"),
            data: Bytes::from(vec![9u8; 1000]),
            ..Default::default()
        };
        e.set_entry_type(EntryType::EntryConfChange);
        let v = encode_entry(&e);
        let d = decode_entry(42, Bytes::from(v)).unwrap();
        assert_eq!(d, e);
        let empty = Entry {
            index: 1,
            ..Default::default()
        };
        let d = decode_entry(1, Bytes::from(encode_entry(&empty))).unwrap();
        assert_eq!(d, empty);
    }

    #[test]
    fn corrupt_entries_are_rejected() {
        assert!(decode_entry(1, Bytes::from_static(b"\x01abc")).is_err());
        let mut v = encode_entry(&Entry::default());
        v[0] = 9;
        assert!(decode_entry(1, Bytes::from(v)).is_err());
        let mut v = encode_entry(&Entry::default());
        v[10] = 200; // context length beyond the value
        assert!(decode_entry(1, Bytes::from(v)).is_err());
    }

    #[test]
    fn local_state_roundtrip() {
        let mut s = LocalState::default();
        s.hard_state.term = 3;
        s.hard_state.vote = 2;
        s.hard_state.commit = 99;
        s.conf_state.voters = vec![1, 2, 3];
        s.conf_state.learners = vec![4];
        s.conf_index = 50;
        s.truncated_index = 80;
        s.truncated_term = 2;
        assert_eq!(LocalState::decode(1, &s.encode()).unwrap(), s);
        assert!(LocalState::decode(1, &[1, 2, 3]).is_err());
    }
}
