//! Column-first batching: points go straight into per-(shard, measurement)
//! column builders, then each builder becomes one Arrow batch of points and
//! one of series; they are encoded as Arrow IPC when the shard's write
//! leaves ([`wire_tables`]), together with the other requests coalesced
//! into that write.
//!
//! The hot path (a line of a series already seen in this request) costs one
//! scan of the line, one XXH3 of the raw series bytes and a hash-map probe,
//! the field parse, and appends to plain vectors. Tag parsing, sorting,
//! canonical key and `series_id` only run the first time a request meets a
//! raw series; nothing is heap-allocated per point (arenas and vectors grow
//! amortised).
//!
//! Along its seams: `state` (what the request has met; resolving a series
//! new to it), `append` (type check, admission, columns), `columns` (the
//! column builders) and `encode` (tables to the wire format's Arrow IPC).

mod append;
mod columns;
mod encode;
mod state;

pub use encode::wire_tables;

use crate::error::Result;
use crate::write::cardinality::DbSeries;
use crate::write::series_cache::DbCache;
use arrow_array::RecordBatch;
use shardhouse_common::lineproto::{
    self, FieldParser, FieldValue, LineProtocolError, Precision, SeriesParser,
};
use shardhouse_common::names::{self, NameError, SAMPLES_TABLE};
use state::{BatchState, MeasurementSchema};
use xxhash_rust::xxh3::xxh3_64;

/// One request's rows of one (shard, table), ready for `Node.Write`.
#[derive(Debug, Clone)]
pub struct ShardBatch {
    pub shard: u32,
    /// The database the router was asked to write to (set by the caller).
    pub database: String,
    /// The table: a measurement, or `_samples` (Prometheus).
    pub measurement: String,
    pub rows: usize,
    /// Points in the wire's points schema (time, series_id, fields).
    pub points: RecordBatch,
    /// The series of the points, in the wire's series schema.
    pub series: RecordBatch,
    /// Memory of both batches: what the in-flight byte budgets count.
    pub bytes: usize,
}

/// Why points of a request were rejected (first one is reported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectReason {
    BadPoint,
    Cardinality,
}

/// The first rejected point of a request.
#[derive(Debug, Clone)]
pub struct Rejection {
    /// 1-based line number (line protocol) or 0-based point index (others).
    pub position: usize,
    pub reason: RejectReason,
    pub message: String,
}

/// Lines of a body split ahead of their turn: while line i is added, the
/// series cache entry of line i + LOOKAHEAD is fetched from memory (a line
/// takes ~0.5 µs, a fetch from RAM ~0.1 µs; at 1M series every lookup
/// would otherwise wait for one).
const LOOKAHEAD: usize = 4;

/// A line split ahead of its turn.
struct Ahead<'b> {
    line_no: usize,
    line: &'b [u8],
    /// Raw series, the rest and the raw series' XXH3; `None` when the line
    /// does not split (the error is found again in its turn).
    split: Option<(&'b [u8], &'b [u8], u64)>,
}

/// Builds the shard batches of one write request.
pub struct RequestBatch<'a> {
    state: BatchState<'a>,
    series_parser: SeriesParser,
    field_parser: FieldParser,
    /// Scratch for structured (non line protocol) points.
    tag_scratch: Vec<(usize, usize, usize, usize)>,
    text_scratch: Vec<u8>,
    key_scratch: Vec<u8>,
    /// Whether structured points may carry NaN and infinite floats
    /// (Prometheus staleness markers); refused otherwise, as in line
    /// protocol.
    keep_non_finite: bool,
}

/// Outcome counters of a request.
#[derive(Debug, Clone, Default)]
pub struct BatchSummary {
    pub points: usize,
    pub rejected: usize,
    pub rejected_for_cardinality: usize,
    pub first_rejection: Option<Rejection>,
}

impl<'a> RequestBatch<'a> {
    /// `default_time` (ns) is used for points without a timestamp;
    /// `db` enforces the database's cardinality limit when given.
    pub fn new(
        shard_count: u32,
        precision: Precision,
        default_time: i64,
        db: Option<&'a DbSeries>,
    ) -> RequestBatch<'a> {
        RequestBatch {
            state: BatchState::new(shard_count, precision, default_time, db),
            series_parser: SeriesParser::default(),
            field_parser: FieldParser::default(),
            tag_scratch: Vec::new(),
            text_scratch: Vec::new(),
            key_scratch: Vec::new(),
            keep_non_finite: false,
        }
    }

    /// Looks series new to the request up in the router-wide series cache
    /// of the database (line protocol), and caches the ones it resolves.
    /// The cache must be the one made with the `DbSeries` given to `new`
    /// (its entries say "admitted"): the router keeps them together.
    pub fn use_series_cache(&mut self, cache: DbCache<'a>) {
        self.state.series_cache = Some(cache);
    }

    /// Series new to the request found in (hits) and missing from (misses)
    /// the series cache so far.
    pub fn series_cache_lookups(&self) -> (usize, usize) {
        (self.state.cache_hits, self.state.cache_misses)
    }

    /// Puts every point in the `_samples` table (Prometheus remote_write):
    /// one table per database for every metric, instead of a table per
    /// metric name in every shard (docs/storage.md). Call before adding points.
    pub fn samples_table(&mut self) {
        let st = &mut self.state;
        let m = st.measurements.len() as u32;
        st.measurements.push(MeasurementSchema {
            name: SAMPLES_TABLE.to_string(),
            raw: SAMPLES_TABLE.as_bytes().into(),
            fields: Vec::new(),
        });
        st.samples_table = Some(m);
    }

    /// Lets structured points carry NaN and infinite floats (Prometheus
    /// remote_write only: NaN marks stale series). Every other input
    /// refuses them, as InfluxDB does.
    pub fn keep_non_finite_floats(&mut self) {
        self.keep_non_finite = true;
    }

    /// Adds every line of a line protocol body. Bad lines are counted and
    /// the first is remembered; the good ones are kept (partial write).
    pub fn add_line_protocol(&mut self, body: &[u8]) {
        // One UTF-8 check for the whole body instead of one per line: `\n`
        // never occurs inside a multi-byte character, so every line of a
        // valid body is valid. Only a body that fails is checked line by
        // line, to reject just its bad lines (with their numbers).
        let body_is_utf8 = lineproto::is_utf8(body);
        self.state.begin_body(body);
        let mut lines = lineproto::lines(body);
        let mut ring: [Option<Ahead<'_>>; LOOKAHEAD] =
            std::array::from_fn(|_| lines.next().map(|l| self.look_ahead(l)));
        for i in 0.. {
            let k = i % LOOKAHEAD;
            let Some(ahead) = ring[k].take() else {
                break;
            };
            ring[k] = lines.next().map(|l| self.look_ahead(l));
            if let Err(e) = self.add_ahead(&ahead, !body_is_utf8) {
                self.state.reject(ahead.line_no, e);
            }
        }
        self.state.commit_reserved();
        self.state.publish_resolved();
    }

    /// Splits a line of a body before its turn and prefetches its series'
    /// cache entry.
    #[inline]
    fn look_ahead<'b>(&self, (line_no, line): (usize, &'b [u8])) -> Ahead<'b> {
        let split = lineproto::split_series(line).ok().map(|(raw, rest)| {
            let hash = xxh3_64(raw);
            if let Some(cache) = self.state.series_cache {
                // Also for series the request has met (a hit in cache,
                // cheaper than asking the request's memo first).
                cache.prefetch(hash);
            }
            (raw, rest, hash)
        });
        Ahead {
            line_no,
            line,
            split,
        }
    }

    /// Adds a line split by [`Self::look_ahead`], as [`Self::add_line_checked`].
    #[inline]
    fn add_ahead(&mut self, a: &Ahead<'_>, check_utf8: bool) -> Result<(), (RejectReason, String)> {
        if check_utf8 && std::str::from_utf8(a.line).is_err() {
            return Err(bad_line(LineProtocolError::InvalidUtf8));
        }
        match a.split {
            Some((raw, rest, hash)) => self.add_split(raw, rest, hash),
            None => {
                let (raw, rest) = lineproto::split_series(a.line).map_err(bad_line)?;
                self.add_split(raw, rest, xxh3_64(raw))
            }
        }
    }

    /// Adds one line (no newline, no leading blanks).
    pub fn add_line(&mut self, line: &[u8]) -> Result<(), (RejectReason, String)> {
        self.add_line_checked(line, true)
    }

    /// [`Self::add_line`]; `check_utf8` false when the caller has already
    /// validated the line (as part of its body).
    #[inline]
    fn add_line_checked(
        &mut self,
        line: &[u8],
        check_utf8: bool,
    ) -> Result<(), (RejectReason, String)> {
        if check_utf8 && std::str::from_utf8(line).is_err() {
            return Err(bad_line(LineProtocolError::InvalidUtf8));
        }
        let (raw, rest) = lineproto::split_series(line).map_err(bad_line)?;
        self.add_split(raw, rest, xxh3_64(raw))
    }

    /// Adds a line split into its raw series (XXH3 `hash`) and the rest.
    #[inline]
    fn add_split(
        &mut self,
        raw: &[u8],
        rest: &[u8],
        hash: u64,
    ) -> Result<(), (RejectReason, String)> {
        let bad = bad_line;
        let known = self.state.find_slot(hash, raw);
        // A known series has a table: lines of one table usually repeat
        // their field keys, which the parser then recognises instead of
        // scanning (same result either way). A series new to the request
        // (every line, at 1M series) tries the keys of the previous line's
        // table: lines of one measurement come together.
        let layout = known
            .map(|s| self.state.slots[s as usize].table)
            .or(self.state.last_table);
        let fields = match layout {
            Some(table) => self.field_parser.parse_in_layout(rest, table as usize),
            None => self.field_parser.parse(rest),
        }
        .map_err(bad)?;
        let time = match fields.timestamp {
            Some(t) => self.state.precision.to_nanos(t).map_err(bad)?,
            None => self.state.default_time,
        };
        // Series errors come after field errors, as the series of a new
        // raw spelling is only parsed now.
        let slot = match known {
            Some(s) => s,
            None => self
                .state
                .resolve_new_raw(hash, raw, &mut self.series_parser)?,
        };
        self.state.last_table = Some(self.state.slots[slot as usize].table);
        self.state.append(slot, time, fields.iter(), fields.len())
    }

    /// Adds a structured point (msgpack, gRPC, remote_write). Tags may be in
    /// any order. `time` is in nanoseconds; `None` means "now".
    pub fn add_point<'v, I>(
        &mut self,
        measurement: &str,
        tags: &[(&str, &str)],
        fields: I,
        time: Option<i64>,
    ) -> Result<(), (RejectReason, String)>
    where
        I: ExactSizeIterator<Item = (&'v [u8], FieldValue<'v>)> + Clone,
    {
        let bad = |m: String| (RejectReason::BadPoint, m);
        if measurement.is_empty() {
            return Err(bad(LineProtocolError::MissingMeasurement.to_string()));
        }
        if fields.len() == 0 {
            return Err(bad(LineProtocolError::MissingFields.to_string()));
        }
        if let Some(t) = time.filter(|&t| !lineproto::nanos_in_range(t)) {
            return Err(bad(LineProtocolError::TimestampOutOfRange(t).to_string()));
        }
        // Validate fields the way the line protocol parser does, NaN and
        // infinities included (refused unless `keep_non_finite_floats`).
        for (i, (k, v)) in fields.clone().enumerate() {
            if k.is_empty() {
                return Err(bad(LineProtocolError::EmptyFieldKey.to_string()));
            }
            if let FieldValue::Float(f) = v {
                if !f.is_finite() && !self.keep_non_finite {
                    return Err(bad(LineProtocolError::InvalidFieldValue {
                        key: lossy(k),
                        value: f.to_string(),
                        why: "NaN and infinities are not stored (as in line protocol); send a \
                              finite number or leave the field out",
                    }
                    .to_string()));
                }
            }
            if lineproto::RESERVED_FIELD_KEYS
                .iter()
                .any(|r| r.as_bytes() == k)
            {
                return Err(bad(
                    LineProtocolError::ReservedFieldKey(lossy(k)).to_string()
                ));
            }
            if fields.clone().take(i).any(|(k2, _)| k2 == k) {
                return Err(bad(LineProtocolError::DuplicateField(lossy(k)).to_string()));
            }
        }
        // Canonical key from sorted tags.
        self.tag_scratch.clear();
        self.text_scratch.clear();
        for (k, v) in tags {
            if k.is_empty() {
                return Err(bad(LineProtocolError::EmptyTagKey.to_string()));
            }
            if v.is_empty() {
                return Err(bad(
                    LineProtocolError::EmptyTagValue(lossy(k.as_bytes())).to_string()
                ));
            }
            names::validate_tag_key(k).map_err(name_error)?;
            let ks = self.text_scratch.len();
            self.text_scratch.extend_from_slice(k.as_bytes());
            let vs = self.text_scratch.len();
            self.text_scratch.extend_from_slice(v.as_bytes());
            self.tag_scratch.push((ks, vs, vs, self.text_scratch.len()));
        }
        let text = &self.text_scratch;
        self.tag_scratch
            .sort_by(|a, b| text[a.0..a.1].cmp(&text[b.0..b.1]));
        if let Some(w) = self
            .tag_scratch
            .windows(2)
            .find(|w| text[w[0].0..w[0].1] == text[w[1].0..w[1].1])
        {
            return Err(bad(LineProtocolError::DuplicateTag(lossy(
                &text[w[0].0..w[0].1],
            ))
            .to_string()));
        }
        let mut key = std::mem::take(&mut self.key_scratch);
        shardhouse_common::series::canonical_key_into(
            &mut key,
            measurement.as_bytes(),
            self.tag_scratch
                .iter()
                .map(|t| (&text[t.0..t.1], &text[t.2..t.3])),
        );
        let slot = self.state.resolve_canonical(&key, measurement.as_bytes());
        self.key_scratch = key;
        let slot = slot?;
        let n = fields.len();
        self.state
            .append(slot, time.unwrap_or(self.state.default_time), fields, n)
    }

    /// Records a rejected structured point at `position` (0-based index).
    pub fn reject(&mut self, position: usize, reason: RejectReason, message: String) {
        self.state.reject_with(position, reason, message);
    }

    /// Measures the time spent on series new to the request (for the
    /// `series_hash_seconds` metric); off by default to keep benches clean.
    pub fn set_timing(&mut self, on: bool) {
        self.state.timing = on;
    }

    /// Seconds spent resolving new series (0 unless timing is on).
    pub fn series_seconds(&self) -> f64 {
        self.state.series_nanos as f64 / 1e9
    }

    /// Points accepted so far.
    pub fn points(&self) -> usize {
        self.state.points
    }

    pub fn summary(&self) -> BatchSummary {
        BatchSummary {
            points: self.state.points,
            rejected: self.state.rejected,
            rejected_for_cardinality: self.state.rejected_for_cardinality,
            first_rejection: self.state.first_rejection.clone(),
        }
    }

    /// Number of distinct series met.
    pub fn distinct_series(&self) -> usize {
        self.state.slots.len()
    }

    /// Every (shard, measurement) builder as Arrow batches.
    pub fn finish(mut self) -> Result<(Vec<ShardBatch>, BatchSummary)> {
        let summary = self.summary();
        let st = &mut self.state;
        // Lines added one by one (`add_line`) are admitted as they come.
        st.publish_resolved();
        let mut tables = std::mem::take(&mut st.tables);
        let mut out = Vec::with_capacity(tables.len());
        for t in &mut tables {
            out.extend(st.encode_table(t)?);
        }
        Ok((out, summary))
    }
}

/// A user's name or value in an error message: short (see
/// [`names::excerpt`]).
fn lossy(b: &[u8]) -> String {
    names::excerpt(b)
}

/// A line protocol error as a rejection.
fn bad_line(e: LineProtocolError) -> (RejectReason, String) {
    (RejectReason::BadPoint, e.to_string())
}

/// A broken naming rule as a rejection (the message names the rule).
fn name_error(e: NameError) -> (RejectReason, String) {
    (RejectReason::BadPoint, e.to_string())
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
