//! A shard's state on this node, behind one door: what it buffers, what it
//! knows exists in chDB, the field types its log decided, its applied and
//! flushed indexes, its failing tables and damaged parts. Fields are
//! private; the engine's parts (apply.rs, flush.rs, ddl.rs, ops.rs,
//! shard_io.rs, read.rs, damage.rs, lifecycle.rs) go through the methods
//! below.
//!
//! # Lock order
//!
//! A thread that holds several of these locks takes them in this order,
//! outermost first, and never takes one while holding a later one:
//!
//! 1. `flushes`: [`ShardState::lock_flushes`], serializes flushes, storage
//!    operations, snapshot import/export and dropping the shard; held
//!    across chDB statements.
//! 2. the engine's map of shards ([`ShardMap`]); dropping a shard removes
//!    it from the map while holding its `flushes`.
//! 3. `buf`: rows applied and not flushed yet (apply, flush, reads).
//! 4. `catalog`: the field types decided by the log (apply records new ones
//!    under `buf`).
//! 5. `known_series`: series whose `_series` rows are held (apply fills it
//!    under `buf`).
//! 6. `tables`: fact tables' columns as they exist in chDB.
//! 7. `databases`: the databases stored (reads look under `flushes` and
//!    `buf`; forgetting a table looks under `tables`).
//! 8. `failing`: tables whose flush keeps failing (the flush ticker looks
//!    under `buf`).
//! 9. `damage`: parts found damaged.
//! 10. `rewrites`: which fact tables may hold a key twice (rewrites.rs;
//!     the flusher notes rows under `flushes`, reads look alone).
//! 11. `rollups`: which fact tables have had rollups since their first
//!     row (rollups.rs; DDL records them under `flushes` and `tables`).
//!
//! Builds with debug assertions, this crate's unit tests and the
//! `lock-order-check` feature check the order on every lock taken and panic
//! on a wrong one (lock_order.rs); release builds take the plain locks.
//! The connection pools are outside the checked order: a writer
//! connection (`Inner::pool`) is taken after `flushes` (a flush writes
//! while holding it) and nothing holding one waits for `flushes`; a read
//! holds a reader connection while it waits for `flushes`, and the readers'
//! pool is a separate one.
//!
//! The indexes (`applied`, `flushed`) and the `created` and `queued` flags
//! are atomics: reading or setting them takes no lock.

mod lock_order;
mod records;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::buffer::ShardBuf;
use crate::catalog::ShardCatalog;
use crate::error::EngineError;
use crate::known_series::KnownSeries;
use crate::layout::{self, FieldType, TableId};
use crate::metrics;
use crate::rewrites::TableRewrites;

use lock_order::{hold, Held, Level};
pub(crate) use records::DatabaseState;
use records::{retry_delay, Failing};
pub use records::{DamagedPart, FlushFailure, ShardDamage};

/// Columns of a shard's fact tables, as they exist in chDB.
pub(crate) type TableColumns = HashMap<TableId, Vec<(String, FieldType)>>;

/// One shard's state on this node (see the module docs for the locks).
pub(crate) struct ShardState {
    shard: u32,
    db: String,
    /// Serializes flushes, DDL, import and drop of this shard.
    flushes: Mutex<()>,
    buf: Mutex<ShardBuf>,
    /// Field types decided by the shard's applied log (see catalog.rs).
    catalog: RwLock<ShardCatalog>,
    /// Series whose `_series` rows this replica holds (known_series.rs).
    known_series: Mutex<KnownSeries>,
    /// Columns of this shard's fact tables as they exist in chDB.
    tables: Mutex<TableColumns>,
    /// The databases this shard stores, as they exist in chDB.
    databases: Mutex<HashMap<String, DatabaseState>>,
    /// Tables of this shard that failed to flush, and when to retry them.
    failing: Mutex<Option<Failing>>,
    /// Parts of this shard's copy found damaged (damage.rs); reads are
    /// refused until a snapshot replaces the copy.
    damage: Mutex<Vec<DamagedPart>>,
    /// Per fact table: whether a key may be stored twice (rewrites.rs).
    rewrites: Mutex<HashMap<TableId, TableRewrites>>,
    /// Fact tables whose rollups were created with them (rollups.rs).
    rollups: Mutex<HashSet<TableId>>,
    created: AtomicBool,
    flushed: AtomicU64,
    applied: AtomicU64,
    queued: AtomicBool,
}

impl ShardState {
    pub(crate) fn new(shard: u32) -> ShardState {
        ShardState {
            shard,
            db: layout::shard_db(shard),
            flushes: Mutex::new(()),
            buf: Mutex::new(ShardBuf::default()),
            catalog: RwLock::new(ShardCatalog::default()),
            known_series: Mutex::new(KnownSeries::default()),
            tables: Mutex::new(HashMap::new()),
            databases: Mutex::new(HashMap::new()),
            failing: Mutex::new(None),
            damage: Mutex::new(Vec::new()),
            rewrites: Mutex::new(HashMap::new()),
            rollups: Mutex::new(HashSet::new()),
            created: AtomicBool::new(false),
            flushed: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            queued: AtomicBool::new(false),
        }
    }

    pub(crate) fn shard(&self) -> u32 {
        self.shard
    }

    /// The shard's own chDB database (`layout::shard_db`).
    pub(crate) fn db(&self) -> &str {
        &self.db
    }

    // The locks, in their order (module docs).

    pub(crate) fn lock_flushes(&self) -> Held<MutexGuard<'_, ()>> {
        hold(Level::Flushes, || self.flushes.lock())
    }

    pub(crate) fn lock_buf(&self) -> Held<MutexGuard<'_, ShardBuf>> {
        hold(Level::Buf, || self.buf.lock())
    }

    pub(crate) fn read_catalog(&self) -> Held<RwLockReadGuard<'_, ShardCatalog>> {
        hold(Level::Catalog, || self.catalog.read())
    }

    pub(crate) fn write_catalog(&self) -> Held<RwLockWriteGuard<'_, ShardCatalog>> {
        hold(Level::Catalog, || self.catalog.write())
    }

    pub(crate) fn lock_known_series(&self) -> Held<MutexGuard<'_, KnownSeries>> {
        hold(Level::KnownSeries, || self.known_series.lock())
    }

    pub(crate) fn lock_tables(&self) -> Held<MutexGuard<'_, TableColumns>> {
        hold(Level::Tables, || self.tables.lock())
    }

    pub(crate) fn lock_databases(&self) -> Held<MutexGuard<'_, HashMap<String, DatabaseState>>> {
        hold(Level::Databases, || self.databases.lock())
    }

    fn lock_failing(&self) -> Held<MutexGuard<'_, Option<Failing>>> {
        hold(Level::Failing, || self.failing.lock())
    }

    fn lock_damage(&self) -> Held<MutexGuard<'_, Vec<DamagedPart>>> {
        hold(Level::Damage, || self.damage.lock())
    }

    pub(crate) fn lock_rewrites(&self) -> Held<MutexGuard<'_, HashMap<TableId, TableRewrites>>> {
        hold(Level::Rewrites, || self.rewrites.lock())
    }

    /// The fact tables of `database` whose every key is stored once, as
    /// far as this process has seen (rewrites.rs).
    pub(crate) fn tables_without_rewrites(&self, database: &str) -> HashSet<String> {
        self.lock_rewrites()
            .iter()
            .filter(|(id, t)| id.database == database && !t.needs_final())
            .map(|(id, _)| id.table.clone())
            .collect()
    }

    pub(crate) fn lock_rollups(&self) -> Held<MutexGuard<'_, HashSet<TableId>>> {
        hold(Level::Rollups, || self.rollups.lock())
    }

    /// Whether `table` of `database` has rollups that hold every row it
    /// was ever given (rollups.rs); exact for a read only where the table
    /// also holds each key once ([`ShardState::tables_without_rewrites`]).
    pub(crate) fn has_rollups(&self, database: &str, table: &str) -> bool {
        self.lock_rollups().contains(&TableId::new(database, table))
    }

    // The indexes and flags (atomics, no lock).

    /// Whether the shard's own chDB database exists.
    pub(crate) fn is_created(&self) -> bool {
        self.created.load(Ordering::Acquire)
    }

    pub(crate) fn set_created(&self, created: bool) {
        self.created.store(created, Ordering::Release);
    }

    /// Highest Raft index whose rows are durably in chDB (0 if none).
    pub(crate) fn flushed(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    pub(crate) fn set_flushed(&self, index: u64) {
        self.flushed.store(index, Ordering::Release);
    }

    /// Highest Raft index applied (buffered, stored or rejected).
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    pub(crate) fn set_applied(&self, index: u64) {
        self.applied.store(index, Ordering::Release);
    }

    /// Marks the shard queued for a flusher; true if it was not already.
    pub(crate) fn queue_flush(&self) -> bool {
        !self.queued.swap(true, Ordering::AcqRel)
    }

    /// A flush of the shard started: it may be queued again.
    pub(crate) fn flush_started(&self) {
        self.queued.store(false, Ordering::Release);
    }

    // Tables whose flush keeps failing.

    /// Whether some table's flush is failing.
    pub(crate) fn is_failing(&self) -> bool {
        self.lock_failing().is_some()
    }

    /// Tables whose rows could not be stored so far.
    pub(crate) fn failing_tables(&self) -> Vec<TableId> {
        self.lock_failing()
            .as_ref()
            .map_or_else(Vec::new, |f| f.tables.clone())
    }

    /// The shard's failing flush as reported to operators, if any.
    pub(crate) fn flush_failure(&self) -> Option<FlushFailure> {
        self.lock_failing().as_ref().map(|f| f.report(self.shard))
    }

    /// Tables a flush leaves alone: the failing ones while their backoff
    /// runs, unless `retry_failing` (an explicit flush).
    pub(crate) fn tables_to_skip(&self, retry_failing: bool) -> HashSet<TableId> {
        match self.lock_failing().as_ref() {
            Some(f) if !retry_failing && f.retry_at > Instant::now() => {
                f.tables.iter().cloned().collect()
            }
            _ => HashSet::new(),
        }
    }

    /// Whether the flush ticker should queue this shard at `now`: its
    /// oldest buffered row is older than `max_age` (rows of failing tables
    /// wait for their retry time instead).
    pub(crate) fn flush_due(&self, max_age: Duration, now: Instant) -> bool {
        let buf = self.lock_buf();
        let aged = buf.oldest.is_some_and(|t| t.elapsed() >= max_age);
        match self.lock_failing().as_ref() {
            None => aged,
            Some(f) if f.retry_due(now) => true,
            Some(f) => aged && has_rows_outside(&buf, &f.tables),
        }
    }

    /// Forgets failing tables (the shard's data was replaced or dropped).
    pub(crate) fn clear_failing(&self) {
        if self.lock_failing().take().is_some() {
            metrics::FLUSH_FAILING_SHARDS.dec();
        }
    }

    /// A flush failed for `tables` (the `skipped` ones still count as
    /// failing): backs their next attempt off.
    pub(crate) fn record_flush_failure(
        &self,
        mut tables: Vec<TableId>,
        error: &EngineError,
        skipped: &HashSet<TableId>,
    ) {
        tables.extend(skipped.iter().cloned());
        tables.sort();
        tables.dedup();
        let mut slot = self.lock_failing();
        let attempts = slot.as_ref().map_or(0, |f| f.attempts) + 1;
        let since = slot.as_ref().map_or_else(Instant::now, |f| f.since);
        if slot.is_none() {
            metrics::FLUSH_FAILING_SHARDS.inc();
        }
        metrics::FLUSH_FAILURES_TOTAL.inc();
        let delay = retry_delay(attempts);
        // Once per attempt; attempts back off to 30 s.
        tracing::error!(shard = self.shard, tables = ?tables, attempts, retry_in = ?delay, error = %error,
            "flush failed; these tables' rows stay buffered (and in the WAL) and are retried, the shard's other tables keep flushing");
        *slot = Some(Failing {
            tables,
            error: error.to_string(),
            attempts,
            since,
            retry_at: Instant::now() + delay,
        });
    }

    /// A flush stored every table, the failing ones included.
    pub(crate) fn record_flush_success(&self) {
        let mut slot = self.lock_failing();
        if let Some(f) = slot.take() {
            metrics::FLUSH_FAILING_SHARDS.dec();
            tracing::info!(shard = self.shard, tables = ?f.tables, attempts = f.attempts,
                "tables that were failing to flush are stored again");
        }
    }

    // Damaged parts.

    /// The parts of this copy found damaged (empty: none).
    pub(crate) fn damaged_parts(&self) -> Vec<DamagedPart> {
        self.lock_damage().clone()
    }

    pub(crate) fn is_damaged(&self) -> bool {
        !self.lock_damage().is_empty()
    }

    /// Records damaged parts; returns those not known before.
    pub(crate) fn add_damage(&self, parts: Vec<DamagedPart>) -> Vec<DamagedPart> {
        let mut have = self.lock_damage();
        let fresh: Vec<DamagedPart> = parts.into_iter().filter(|p| !have.contains(p)).collect();
        have.extend(fresh.iter().cloned());
        fresh
    }

    /// Forgets the damage (the copy was replaced); true if there was some.
    pub(crate) fn clear_damage(&self) -> bool {
        !std::mem::take(&mut *self.lock_damage()).is_empty()
    }
}

/// Whether `buf` holds rows of tables other than `failing`.
fn has_rows_outside(buf: &ShardBuf, failing: &[TableId]) -> bool {
    buf.tables
        .iter()
        .any(|(n, t)| t.rows > 0 && !failing.contains(n))
}

/// The engine's shards, by id (second in the lock order).
#[derive(Default)]
pub(crate) struct ShardMap {
    map: RwLock<HashMap<u32, Arc<ShardState>>>,
}

impl ShardMap {
    fn read(&self) -> Held<RwLockReadGuard<'_, HashMap<u32, Arc<ShardState>>>> {
        hold(Level::ShardMap, || self.map.read())
    }

    fn write(&self) -> Held<RwLockWriteGuard<'_, HashMap<u32, Arc<ShardState>>>> {
        hold(Level::ShardMap, || self.map.write())
    }

    pub(crate) fn get(&self, shard: u32) -> Option<Arc<ShardState>> {
        self.read().get(&shard).cloned()
    }

    /// The shard's state, created empty on first use.
    pub(crate) fn get_or_create(&self, shard: u32) -> Arc<ShardState> {
        if let Some(s) = self.read().get(&shard) {
            return s.clone();
        }
        self.write()
            .entry(shard)
            .or_insert_with(|| Arc::new(ShardState::new(shard)))
            .clone()
    }

    /// Every shard's state (a copy of the map's values: no lock held).
    pub(crate) fn all(&self) -> Vec<Arc<ShardState>> {
        self.read().values().cloned().collect()
    }

    /// The shards' ids, sorted.
    pub(crate) fn ids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.read().keys().copied().collect();
        v.sort_unstable();
        v
    }

    pub(crate) fn remove(&self, shard: u32) {
        self.write().remove(&shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_taken_in_order_and_released_in_any_order_pass() {
        let st = ShardState::new(1);
        let map = ShardMap::default();
        let flushes = st.lock_flushes();
        let _ = map.get(1);
        let buf = st.lock_buf();
        st.write_catalog().clear();
        let tables = st.lock_tables();
        drop(buf);
        let databases = st.lock_databases();
        drop(tables);
        assert!(!st.is_failing() && !st.is_damaged());
        drop(databases);
        drop(flushes);
        // Everything released: any lock may be taken again.
        let _buf = st.lock_buf();
    }

    #[test]
    #[should_panic(expected = "shard lock order violated: taking Flushes while holding Buf")]
    fn taking_a_lock_out_of_order_panics() {
        let st = ShardState::new(1);
        let _buf = st.lock_buf();
        let _flushes = st.lock_flushes();
    }

    #[test]
    #[should_panic(expected = "taking Buf while holding Buf")]
    fn taking_one_level_twice_panics() {
        // Two shards' buffers: no order between them, so never both.
        let (a, b) = (ShardState::new(1), ShardState::new(2));
        let _a = a.lock_buf();
        let _b = b.lock_buf();
    }

    #[test]
    #[should_panic(expected = "taking ShardMap while holding Databases")]
    fn the_shard_map_is_not_taken_under_a_shard_lock() {
        let map = ShardMap::default();
        let st = map.get_or_create(3);
        let _d = st.lock_databases();
        map.get_or_create(4);
    }
}
