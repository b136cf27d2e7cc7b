//! What a request has met so far, and how a series new to the request
//! is resolved: parsed, named by its canonical key, hashed to its
//! `series_id` and shard, and given a table. Runs once per distinct raw
//! series of a request; a repeated series is one memo probe. A series some
//! earlier request resolved is found in the router-wide series cache
//! instead (`crate::write::series_cache`) and skips all of it.

use super::columns::{FieldTarget, TableBuilder};
use super::{name_error, RejectReason, Rejection};
use crate::write::cardinality::DbSeries;
use crate::write::series_cache::{self, DbCache, NewEntry};
use shardhouse_common::lineproto::{same_bytes, FieldType, Precision, SeriesParser};
use shardhouse_common::names;
use shardhouse_common::series::series_id_of_key;
use shardhouse_common::shard::jump_hash;
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_64;

pub(super) type IdentityMap<V> = shardhouse_common::series::IdMap<V>;

/// Key of a (shard, measurement) table in an [`IdentityMap`]: the pair,
/// spread over all 64 bits by a multiplication so the map's buckets and
/// control bytes (taken from the top bits) differ between tables.
#[inline]
fn table_key(shard: u32, measurement: u32) -> u64 {
    ((u64::from(shard) << 32) | u64::from(measurement)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Places under the cardinality limit a body reserves at a time: one
/// atomic update per block instead of a set lookup per series; near the
/// limit, other requests' unused places hold back at most this many each.
const RESERVE_BLOCK: usize = 256;

/// End of a slot's collision chain.
const NONE: u32 = u32::MAX;

/// Whether a series may be written under the database's cardinality limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    Unchecked,
    /// Admitted under the body's reservation; inserted into the database's
    /// set when the body is done ([`BatchState::commit_reserved`]).
    Reserved,
    Admitted,
    Rejected,
}

/// A distinct raw series met in this request.
pub(super) struct SeriesSlot {
    pub(super) series_id: u64,
    pub(super) table: u32,
    /// The series' measurement (its table's, except for Prometheus samples).
    pub(super) measurement: u32,
    /// Raw series bytes (as written) in `arena`; the memo's identity.
    pub(super) raw: (u32, u32),
    /// Canonical series key in `arena`: the same bytes as `raw` when the
    /// raw spelling is the key (copied once).
    pub(super) key: (u32, u32),
    /// Next slot with the same raw hash (collision chain).
    pub(super) next: u32,
    pub(super) admission: Admission,
    /// Whether this series was already listed in its table's series batch.
    pub(super) listed: bool,
}

/// A series this request resolved in full that may be cached once its
/// admission is final (`BatchState::publish_resolved`).
pub(super) struct Resolved {
    pub(super) slot: u32,
    pub(super) check: u64,
    pub(super) measurement_len: u32,
}

/// Per-request field types of one measurement (a field has one type).
pub(super) struct MeasurementSchema {
    pub(super) name: String,
    /// The name as parsed (bytes), for the last-measurement check.
    pub(super) raw: Box<[u8]>,
    pub(super) fields: Vec<(Box<[u8]>, FieldType)>,
}

impl MeasurementSchema {
    #[inline]
    pub(super) fn find(&self, key: &[u8], hint: usize) -> Option<usize> {
        if let Some((k, _)) = self.fields.get(hint) {
            if &**k == key {
                return Some(hint);
            }
        }
        self.fields.iter().position(|(k, _)| &**k == key)
    }
}

/// What a request has met so far: its measurements and their field
/// types, its series (memo of raw spellings), its tables, its rejections.
pub(super) struct BatchState<'a> {
    pub(super) shard_count: u32,
    pub(super) db: Option<&'a DbSeries>,
    pub(super) default_time: i64,
    pub(super) precision: Precision,
    pub(super) measurements: Vec<MeasurementSchema>,
    pub(super) measurement_ids: HashMap<Box<[u8]>, u32>,
    /// The measurement of the last new series: series of one measurement
    /// usually come together, and this skips hashing its name.
    pub(super) last_measurement: Option<u32>,
    pub(super) memo: IdentityMap<u32>,
    /// Table of the last line's series (line protocol): the field-key
    /// layout a series new to the request tries first.
    pub(super) last_table: Option<u32>,
    pub(super) slots: Vec<SeriesSlot>,
    /// Raw series and the keys rebuilt from them.
    pub(super) arena: Vec<u8>,
    pub(super) tables: Vec<TableBuilder>,
    /// Tables by [`table_key`] of (shard, measurement).
    pub(super) table_ids: IdentityMap<u32>,
    /// Prometheus samples: every series' points go to the `_samples` table
    /// (this measurement id), the metric name stays the series' measurement.
    pub(super) samples_table: Option<u32>,
    pub(super) points: usize,
    pub(super) rejected: usize,
    pub(super) first_rejection: Option<Rejection>,
    pub(super) rejected_for_cardinality: usize,
    pub(super) key_scratch: Vec<u8>,
    /// Targets of the fields of the point being appended (reused).
    pub(super) targets: Vec<FieldTarget>,
    /// Whether a line protocol body is being added: its series new to the
    /// database are admitted under reserved places, `reserved_places` of
    /// them so far, taken by `reserved_slots`.
    pub(super) reserving: bool,
    pub(super) reserved_places: usize,
    pub(super) reserved_slots: Vec<u32>,
    /// Lines of the body being added (0 for structured points), to size
    /// new tables.
    pub(super) lines_hint: usize,
    /// Whether a series key was rebuilt from a raw series that was not
    /// already canonical: only then can two slots (two spellings) share a
    /// series_id, and the series batches must drop the repeats.
    pub(super) spellings_may_repeat: bool,
    /// Time spent resolving series new to the request, when timing is on.
    pub(super) timing: bool,
    pub(super) series_nanos: u64,
    /// The router-wide cache of resolved series, for this database.
    pub(super) series_cache: Option<DbCache<'a>>,
    /// Series resolved in full (cache misses whose raw spelling is their
    /// key), cached when the body is done if they were admitted.
    pub(super) resolved: Vec<Resolved>,
    pub(super) cache_hits: usize,
    pub(super) cache_misses: usize,
}

impl<'a> BatchState<'a> {
    pub(super) fn new(
        shard_count: u32,
        precision: Precision,
        default_time: i64,
        db: Option<&'a DbSeries>,
    ) -> BatchState<'a> {
        BatchState {
            shard_count: shard_count.max(1),
            db,
            default_time,
            precision,
            measurements: Vec::new(),
            measurement_ids: HashMap::new(),
            last_measurement: None,
            memo: IdentityMap::default(),
            last_table: None,
            slots: Vec::new(),
            arena: Vec::new(),
            tables: Vec::new(),
            table_ids: IdentityMap::default(),
            samples_table: None,
            points: 0,
            rejected: 0,
            first_rejection: None,
            rejected_for_cardinality: 0,
            key_scratch: Vec::new(),
            targets: Vec::new(),
            reserving: false,
            reserved_places: 0,
            reserved_slots: Vec::new(),
            lines_hint: 0,
            spellings_may_repeat: false,
            timing: false,
            series_nanos: 0,
            series_cache: None,
            resolved: Vec::new(),
            cache_hits: 0,
            cache_misses: 0,
        }
    }

    pub(super) fn reject(&mut self, line_no: usize, (reason, message): (RejectReason, String)) {
        self.reject_with(line_no, reason, message);
    }

    pub(super) fn reject_with(&mut self, position: usize, reason: RejectReason, message: String) {
        self.rejected += 1;
        if reason == RejectReason::Cardinality {
            self.rejected_for_cardinality += 1;
        }
        if self.first_rejection.is_none() {
            self.first_rejection = Some(Rejection {
                position,
                reason,
                message,
            });
        }
    }

    /// Starts a line protocol body: new tables are sized for its lines
    /// (estimated from its first line's length), and its new series are
    /// admitted under reservations (see `crate::write::cardinality`).
    pub(super) fn begin_body(&mut self, body: &[u8]) {
        let first = body.iter().position(|&b| b == b'\n').unwrap_or(body.len());
        self.lines_hint = body.len() / (first + 1);
        self.reserving = self.db.is_some();
    }

    /// A reserved place for a series new to the database, reserving
    /// another block when the body has used its places; `false` when the
    /// block does not fit under the limit (then admit it alone).
    pub(super) fn take_place(&mut self, db: &DbSeries) -> bool {
        if self.reserved_slots.len() < self.reserved_places {
            return true;
        }
        if db.reserve(RESERVE_BLOCK) {
            self.reserved_places += RESERVE_BLOCK;
            return true;
        }
        false
    }

    /// Inserts the series admitted under the reservation into the
    /// database's set and gives back the unused places.
    pub(super) fn commit_reserved(&mut self) {
        self.reserving = false;
        let places = std::mem::take(&mut self.reserved_places);
        let Some(db) = self.db.filter(|_| places > 0) else {
            return;
        };
        let mut ids: Vec<u64> = self
            .reserved_slots
            .iter()
            .map(|&s| self.slots[s as usize].series_id)
            .collect();
        db.commit(places, &mut ids);
        for s in self.reserved_slots.drain(..) {
            self.slots[s as usize].admission = Admission::Admitted;
        }
    }

    /// Caches the series this request resolved in full and admitted (a
    /// rejected line or series is not cached: the next request decides
    /// again). Call after `commit_reserved`, when admissions are final.
    pub(super) fn publish_resolved(&mut self) {
        let Some(cache) = self.series_cache else {
            return;
        };
        let mut new: Vec<NewEntry> = self
            .resolved
            .drain(..)
            .filter_map(|r| {
                let slot = &self.slots[r.slot as usize];
                (slot.admission == Admission::Admitted).then(|| NewEntry {
                    // A cached spelling is its own key: its id is its hash.
                    raw_hash: slot.series_id,
                    check: r.check,
                    shard_count: self.shard_count,
                    shard: self.tables[slot.table as usize].shard,
                    measurement_len: r.measurement_len as usize,
                })
            })
            .collect();
        if !new.is_empty() {
            cache.insert(&mut new);
        }
    }

    #[inline]
    pub(super) fn find_slot(&self, hash: u64, raw: &[u8]) -> Option<u32> {
        let mut s = *self.memo.get(&hash)?;
        while s != NONE {
            let slot = &self.slots[s as usize];
            if same_bytes(&self.arena[slot.raw.0 as usize..slot.raw.1 as usize], raw) {
                return Some(s);
            }
            s = slot.next;
        }
        None
    }

    /// Checks the naming rules ([`names`]) of a measurement not yet met in
    /// this request (a known one passed already).
    fn check_measurement(&self, measurement: &[u8]) -> Result<(), (RejectReason, String)> {
        let known = self
            .last_measurement
            .is_some_and(|m| same_bytes(&self.measurements[m as usize].raw, measurement))
            || self.measurement_ids.contains_key(measurement);
        if known {
            return Ok(());
        }
        names::validate_measurement(measurement).map_err(name_error)
    }

    /// Slot of a raw (as written) series not met before in this request
    /// (`find_slot` said so); `hash` is its XXH3. Checks the naming rules
    /// of its measurement, tags and series key first.
    pub(super) fn resolve_new_raw(
        &mut self,
        hash: u64,
        raw: &[u8],
        parser: &mut SeriesParser,
    ) -> Result<u32, (RejectReason, String)> {
        let started = self.timing.then(std::time::Instant::now);
        let check = match self.series_cache {
            Some(cache) => {
                let check = series_cache::check_of(raw);
                if let Some(known) = cache.get(hash, check, self.shard_count) {
                    self.cache_hits += 1;
                    let slot = self.insert_known(hash, raw, known);
                    if let Some(t) = started {
                        self.series_nanos += t.elapsed().as_nanos() as u64;
                    }
                    return Ok(slot);
                }
                self.cache_misses += 1;
                Some(check)
            }
            None => None,
        };
        let series = parser
            .parse(raw)
            .map_err(|e| (RejectReason::BadPoint, e.to_string()))?;
        self.check_measurement(series.measurement())?;
        for (k, _) in series.tags() {
            names::validate_tag_key(k).map_err(name_error)?;
        }
        // Usually the raw series is its own canonical key (stored once),
        // and its XXH3 (`hash`) is the series_id. Otherwise
        // canonical_key_into (which clears its buffer) builds it in a
        // reused scratch vector.
        let canonical = series.raw_is_canonical_key();
        let (series_id, key) = if canonical {
            names::validate_series_key(raw).map_err(name_error)?;
            (hash, None)
        } else {
            self.spellings_may_repeat = true;
            series.canonical_key_into(&mut self.key_scratch);
            names::validate_series_key(&self.key_scratch).map_err(name_error)?;
            let k0 = self.arena.len();
            self.arena.extend_from_slice(&self.key_scratch);
            (
                series_id_of_key(&self.key_scratch),
                Some((k0, self.arena.len())),
            )
        };
        let measurement = series.measurement();
        let shard = jump_hash(series_id, self.shard_count);
        let slot = self.insert_slot(hash, raw, key, series_id, shard, measurement);
        if let (Some(check), true) = (check, canonical) {
            // Without escapes the measurement is the raw series' prefix,
            // which is how a hit finds it again.
            debug_assert!(raw.starts_with(measurement));
            self.resolved.push(Resolved {
                slot,
                check,
                measurement_len: measurement.len() as u32,
            });
        }
        if let Some(t) = started {
            self.series_nanos += t.elapsed().as_nanos() as u64;
        }
        Ok(slot)
    }

    /// Slot of a raw series found in the series cache: valid, its own key
    /// (so its id is `hash`) and admitted in this database before.
    fn insert_known(&mut self, hash: u64, raw: &[u8], known: series_cache::Known) -> u32 {
        let shard = known
            .shard
            .unwrap_or_else(|| jump_hash(hash, self.shard_count));
        let measurement = &raw[..known.measurement_len];
        let slot = self.insert_slot(hash, raw, None, hash, shard, measurement);
        self.slots[slot as usize].admission = Admission::Admitted;
        slot
    }

    /// Slot of a series given by its canonical key (structured inputs);
    /// a series new to the request has its measurement and key checked
    /// against the naming rules first (its tags were checked by the caller).
    pub(super) fn resolve_canonical(
        &mut self,
        key: &[u8],
        measurement: &[u8],
    ) -> Result<u32, (RejectReason, String)> {
        let hash = xxh3_64(key);
        if let Some(s) = self.find_slot(hash, key) {
            return Ok(s);
        }
        self.check_measurement(measurement)?;
        names::validate_series_key(key).map_err(name_error)?;
        let shard = jump_hash(hash, self.shard_count);
        Ok(self.insert_slot(hash, key, None, hash, shard, measurement))
    }

    fn insert_slot(
        &mut self,
        hash: u64,
        raw: &[u8],
        // Where the key was put in `arena`; `None`: the raw bytes are it.
        key: Option<(usize, usize)>,
        series_id: u64,
        shard: u32,
        measurement: &[u8],
    ) -> u32 {
        let last = self
            .last_measurement
            .filter(|&m| same_bytes(&self.measurements[m as usize].raw, measurement));
        let m = match last.or_else(|| self.measurement_ids.get(measurement).copied()) {
            Some(m) => m,
            None => {
                let m = self.measurements.len() as u32;
                self.measurements.push(MeasurementSchema {
                    // The stored name, in full (an excerpt is for messages).
                    name: String::from_utf8_lossy(measurement).into_owned(),
                    raw: measurement.into(),
                    fields: Vec::new(),
                });
                self.measurement_ids.insert(measurement.into(), m);
                m
            }
        };
        self.last_measurement = Some(m);
        let series_measurement = m;
        let m = self.samples_table.unwrap_or(m);
        let table = match self.table_ids.get(&table_key(shard, m)) {
            Some(&t) => t,
            None => {
                let t = self.tables.len() as u32;
                // Lines of a body spread over the shards; a quarter more
                // than the even share, as shards get uneven counts.
                let rows_hint = (self.lines_hint / self.shard_count as usize) * 5 / 4 + 8;
                self.tables
                    .push(TableBuilder::new(shard, m, rows_hint.min(1 << 16)));
                self.table_ids.insert(table_key(shard, m), t);
                t
            }
        };
        let r0 = self.arena.len();
        self.arena.extend_from_slice(raw);
        let r1 = self.arena.len();
        let key = key.unwrap_or((r0, r1));
        let idx = self.slots.len() as u32;
        let next = self.memo.insert(hash, idx).unwrap_or(NONE);
        self.slots.push(SeriesSlot {
            series_id,
            table,
            measurement: series_measurement,
            raw: (r0 as u32, r1 as u32),
            key: (key.0 as u32, key.1 as u32),
            next,
            admission: Admission::Unchecked,
            listed: false,
        });
        idx
    }
}
