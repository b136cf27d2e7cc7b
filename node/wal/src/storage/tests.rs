//! The log against RocksDB: appends, conflicts, compaction, reloads,
//! a damaged entry, and the snapshot request and hand-off.

use super::*;
use crate::snapshot::GeneratedSnapshot;
use raft::{GetEntriesContext, Storage, StorageError};
use rocksdb::{Options, WriteOptions};

fn entry(index: u64, term: u64, payload: &[u8]) -> Entry {
    Entry {
        index,
        term,
        data: Bytes::copy_from_slice(payload),
        ..Default::default()
    }
}

fn open_db(dir: &std::path::Path) -> Arc<DB> {
    let mut o = Options::default();
    o.create_if_missing(true);
    Arc::new(DB::open(&o, dir).unwrap())
}

fn write(db: &DB, wb: WriteBatch) {
    let mut wo = WriteOptions::default();
    wo.set_sync(true);
    db.write_opt(wb, &wo).unwrap();
}

fn new_storage(db: &Arc<DB>, shard: ShardId) -> ShardStorage {
    let (tx, _rx) = crossbeam_channel::unbounded();
    let cs = ConfState {
        voters: vec![1],
        ..Default::default()
    };
    ShardStorage::create(db.clone(), shard, cs, Default::default(), tx)
}

#[test]
fn append_conflict_compact_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let mut s = new_storage(&db, 7);
    let mut other = new_storage(&db, 8);
    let mut wb = WriteBatch::default();
    let ents: Vec<_> = (1..=10).map(|i| entry(i, 1, &[i as u8; 3])).collect();
    s.append(&ents, &mut wb).unwrap();
    other.append(&ents[..3], &mut wb).unwrap();
    s.write_state(&mut wb);
    other.write_state(&mut wb);
    write(&db, wb);
    assert_eq!(s.last_index().unwrap(), 10);
    assert_eq!(
        s.entries(2, 5, None, GetEntriesContext::empty(false))
            .unwrap(),
        ents[1..4].to_vec()
    );

    // A new leader overwrites 8..10 with a shorter suffix at term 2.
    let mut wb = WriteBatch::default();
    s.append(&[entry(8, 2, b"x")], &mut wb).unwrap();
    write(&db, wb);
    assert_eq!(s.last_index().unwrap(), 8);
    assert_eq!(s.term(8).unwrap(), 2);
    assert_eq!(s.term(7).unwrap(), 1);

    // Evicting the whole cache forces reads from RocksDB.
    s.evict_cache(8, 0);
    assert_eq!(s.cache_bytes(), 0);
    let got = s
        .entries(1, 9, None, GetEntriesContext::empty(false))
        .unwrap();
    assert_eq!(got.len(), 8);
    assert_eq!(got[7].data.as_ref(), b"x");
    assert_eq!(s.term(3).unwrap(), 1);

    let mut wb = WriteBatch::default();
    s.compact_to(5, &mut wb).unwrap();
    s.write_state(&mut wb);
    write(&db, wb);
    assert_eq!(s.first_index().unwrap(), 6);
    assert_eq!(s.term(5).unwrap(), 1);
    assert!(matches!(
        s.entries(5, 7, None, GetEntriesContext::empty(false)),
        Err(raft::Error::Store(StorageError::Compacted))
    ));
    assert!(matches!(
        s.term(4),
        Err(raft::Error::Store(StorageError::Compacted))
    ));
    // Keys 1..=5 are gone from RocksDB; the neighbour shard is untouched.
    assert!(db.get(keys::log_key(7, 5)).unwrap().is_none());
    assert!(db.get(keys::log_key(7, 6)).unwrap().is_some());
    assert!(db.get(keys::log_key(8, 1)).unwrap().is_some());

    // Reload from RocksDB.
    let state = LocalState::decode(7, &db.get(keys::state_key(7)).unwrap().unwrap()).unwrap();
    let (tx, _rx) = crossbeam_channel::unbounded();
    let r = ShardStorage::load(db.clone(), 7, state, Default::default(), tx).unwrap();
    assert_eq!(r.first_index().unwrap(), 6);
    assert_eq!(r.last_index().unwrap(), 8);
    assert_eq!(r.term(8).unwrap(), 2);
    assert_eq!(
        r.entries(6, 9, None, GetEntriesContext::empty(false))
            .unwrap(),
        s.entries(6, 9, None, GetEntriesContext::empty(false))
            .unwrap()
    );
    assert_eq!(r.initial_state().unwrap().conf_state.voters, vec![1]);
}

#[test]
fn log_bytes_follow_appends_and_compaction_and_a_damaged_entry_fails_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let mut s = new_storage(&db, 5);
    let mut wb = WriteBatch::default();
    let ents: Vec<_> = (1..=10).map(|i| entry(i, 1, &[0u8; 68])).collect();
    s.append(&ents, &mut wb).unwrap();
    s.write_state(&mut wb);
    write(&db, wb);
    assert_eq!(s.log_bytes(), 10 * 100);
    // Half the entries out of the cache, then compact 1..=4.
    s.evict_cache(5, 500);
    let mut wb = WriteBatch::default();
    s.compact_to(4, &mut wb).unwrap();
    s.write_state(&mut wb);
    write(&db, wb);
    assert_eq!(s.log_bytes(), 6 * 100);
    let load = || {
        let state = LocalState::decode(5, &db.get(keys::state_key(5)).unwrap().unwrap()).unwrap();
        let (tx, _rx) = crossbeam_channel::unbounded();
        ShardStorage::load(db.clone(), 5, state, Default::default(), tx)
    };
    assert_eq!(load().unwrap().log_bytes(), 6 * 100);
    // Entry 7 damaged on disk: the load says which.
    db.put(keys::log_key(5, 7), b"\x01garbage").unwrap();
    let err = load().err().expect("a damaged entry loads");
    assert!(matches!(err, WalError::Corrupt(_)), "{err}");
    assert!(err.to_string().contains("shard 5: log entry 7"), "{err}");
    // A missing entry too.
    db.delete(keys::log_key(5, 7)).unwrap();
    let err = load().err().expect("a log hole loads");
    assert!(err.to_string().contains("log entry 7 missing"), "{err}");
}

#[test]
fn snapshot_is_requested_then_served() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_db(dir.path());
    let (tx, rx) = crossbeam_channel::unbounded();
    let slot: Arc<Mutex<SnapSlot>> = Default::default();
    let mut s = ShardStorage::create(db.clone(), 3, ConfState::default(), slot.clone(), tx);
    let mut wb = WriteBatch::default();
    s.append(
        &(1..=4).map(|i| entry(i, 2, b"p")).collect::<Vec<_>>(),
        &mut wb,
    )
    .unwrap();
    write(&db, wb);
    assert!(matches!(
        s.snapshot(0, 2),
        Err(raft::Error::Store(
            StorageError::SnapshotTemporarilyUnavailable
        ))
    ));
    assert!(matches!(
        rx.try_recv(),
        Ok(ApplyMsg::GenSnapshot { shard: 3 })
    ));
    // A second request while generating does not queue another build.
    assert!(s.snapshot(0, 2).is_err());
    assert!(rx.try_recv().is_err());
    let cs = ConfState {
        voters: vec![1, 2],
        ..Default::default()
    };
    {
        let mut g = slot.lock();
        g.generating = false;
        g.ready = Some(GeneratedSnapshot {
            index: 3,
            conf_state: cs.clone(),
            data: Bytes::from_static(b"state"),
        });
    }
    let snap = s.snapshot(0, 2).unwrap();
    assert_eq!(snap.get_metadata().index, 3);
    assert_eq!(snap.get_metadata().term, 2);
    assert_eq!(snap.get_metadata().get_conf_state(), &cs);
    assert_eq!(snap.data.as_ref(), b"state");
}
