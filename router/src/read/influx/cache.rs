//! A cache of settled `GROUP BY time()` buckets (issue 28, item 4), after
//! VictoriaMetrics' rollup result cache: a Grafana refresh re-asks the same
//! range, and buckets that ended long enough ago do not change unless a
//! late write, a delete, a drop or a retention drop touches them.
//!
//! What is cached: each shard's partial aggregates (one row per bucket and
//! series, pushdown.rs) of the buckets that lie wholly inside the range read
//! and ended [`ROUTER_LAG`] before now, with the shard's change mark
//! (node/engine/src/change_marks.rs) seen when they were read. Below the
//! merge: fill, transformations, ordering and limits run on the assembled
//! partials exactly as on a full read. The key is every shard's statement
//! with the time range left out (the statement decides everything else
//! the rows depend on: measurement, fields, conditions, interval, offset,
//! grouping), the cluster, database and shard map epoch.
//!
//! A refresh reads only what the cached span lacks (the statement with the
//! span excluded) and compares every shard's mark with the cached one: all
//! equal, cached and fresh rows are assembled; any different (a change, a
//! restarted node, another replica answering), the entry is dropped and the
//! range read in full. Nothing is cached from a node that sends no mark.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use arrow_array::{BooleanArray, RecordBatch};
use parking_lot::Mutex;
use shardhouse_eval::Interval;
use shardhouse_influxql::time::TimeRange;

use super::fetch::int_at;
use crate::cluster::read::ShardMark;
use crate::metrics;

/// A node counts a point older than 60 s at its flush as a late write
/// (`SETTLE_LAG` in change_marks.rs); buckets that ended this long ago are
/// settled: the other 2 minutes cover clock skew between router and nodes.
pub const ROUTER_LAG_NS: i64 = 180 * 1_000_000_000;

/// The bucket column of a pushed-down answer (pushdown.rs).
const BUCKET_COLUMN: &str = "__b";

/// One shard's cached rows and the mark they were read under.
#[derive(Debug, Clone)]
pub struct ShardPart {
    pub mark: ShardMark,
    pub rows: Vec<RecordBatch>,
}

/// The settled buckets `[lo, hi)` of one statement, per shard.
#[derive(Debug, Clone)]
pub struct Entry {
    pub lo: i64,
    pub hi: i64,
    pub shards: BTreeMap<u32, ShardPart>,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.shards
            .values()
            .flat_map(|p| p.rows.iter())
            .map(RecordBatch::get_array_memory_size)
            .sum::<usize>()
            + 64 * self.shards.len()
    }
}

/// The start of the bucket holding `t`.
pub fn bucket_floor(t: i64, iv: Interval) -> i64 {
    t - (t - iv.offset).rem_euclid(iv.duration)
}

/// The first bucket boundary at or after `t`.
pub fn bucket_ceil(t: i64, iv: Interval) -> i64 {
    let floor = bucket_floor(t, iv);
    if floor == t {
        t
    } else {
        floor.saturating_add(iv.duration)
    }
}

/// The buckets of `read` that may be cached: wholly inside it, and ended
/// by `settled_before`. None when there is no such bucket.
pub fn cacheable_span(read: TimeRange, iv: Interval, settled_before: i64) -> Option<(i64, i64)> {
    if !read.has_start() || !read.has_end() {
        return None;
    }
    let lo = bucket_ceil(read.start, iv);
    let hi = bucket_floor(read.end.min(settled_before), iv);
    (lo < hi).then_some((lo, hi))
}

/// The part of a cached span `[lo, hi)` whose buckets lie wholly inside
/// `read`: those the refresh takes from the cache.
pub fn usable_span(lo: i64, hi: i64, read: TimeRange, iv: Interval) -> Option<(i64, i64)> {
    if !read.has_start() || !read.has_end() {
        return None;
    }
    let lo = lo.max(bucket_ceil(read.start, iv));
    let hi = hi.min(bucket_floor(read.end, iv));
    (lo < hi).then_some((lo, hi))
}

/// Whether a refresh's marks let it use the entry: the same shards, each
/// with a known mark equal to the cached one.
pub fn marks_agree(cached: &BTreeMap<u32, ShardPart>, fresh: &BTreeMap<u32, ShardMark>) -> bool {
    cached.len() == fresh.len()
        && cached.iter().all(|(shard, part)| {
            part.mark.is_known() && fresh.get(shard).is_some_and(|m| *m == part.mark)
        })
}

/// The rows of `batches` whose bucket is in `[lo, hi)` (rows without a
/// bucket column are left out).
pub fn rows_within(batches: &[RecordBatch], lo: i64, hi: i64) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for b in batches {
        let Some(col) = b
            .schema()
            .index_of(BUCKET_COLUMN)
            .ok()
            .map(|i| b.column(i).clone())
        else {
            continue;
        };
        let keep: BooleanArray = (0..b.num_rows())
            .map(|row| Some(int_at(&col, row).is_some_and(|t| (lo..hi).contains(&t))))
            .collect();
        if let Ok(kept) = arrow_select::filter::filter_record_batch(b, &keep) {
            if kept.num_rows() > 0 {
                out.push(kept);
            }
        }
    }
    out
}

/// The entry to keep after a read of `read` whose answers (every shard's
/// rows of the whole range, and its mark) are `answers`: their settled
/// buckets, or None when nothing is cacheable (no settled bucket, or a
/// shard without a mark).
pub fn entry_of(
    answers: &BTreeMap<u32, ShardPart>,
    read: TimeRange,
    iv: Interval,
    settled_before: i64,
) -> Option<Entry> {
    let (lo, hi) = cacheable_span(read, iv, settled_before)?;
    if answers.values().any(|p| !p.mark.is_known()) {
        return None;
    }
    let shards = answers
        .iter()
        .map(|(shard, p)| {
            (
                *shard,
                ShardPart {
                    mark: p.mark,
                    rows: rows_within(&p.rows, lo, hi),
                },
            )
        })
        .collect();
    Some(Entry { lo, hi, shards })
}

/// The most of the budget one entry may take: 1/8. A panel grouped by a
/// tag over a day of a thousand series keeps partials per series and
/// bucket (~32 MB); kept, it would push out every other panel of the
/// dashboard on each refresh, so that none of them ever hits. Measured
/// on a 20-panel dashboard over 24 h: 4 hits in 36 lookups without the
/// cap.
const MAX_ENTRY_SHARE: usize = 8;

/// Entries by key, least recently used dropped first past a byte budget.
pub struct Lru {
    budget: usize,
    used: usize,
    tick: u64,
    entries: HashMap<String, (Arc<Entry>, usize, u64)>,
    order: BTreeMap<u64, String>,
}

impl Lru {
    pub fn new(budget: usize) -> Lru {
        Lru {
            budget,
            used: 0,
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    pub fn used(&self) -> usize {
        self.used
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Changes the budget (evicting what no longer fits).
    pub fn set_budget(&mut self, budget: usize) {
        self.budget = budget;
        self.evict();
    }

    pub fn get(&mut self, key: &str) -> Option<Arc<Entry>> {
        self.tick += 1;
        let (entry, _, used) = self.entries.get_mut(key)?;
        self.order.remove(used);
        *used = self.tick;
        self.order.insert(self.tick, key.to_string());
        Some(entry.clone())
    }

    /// Keeps `entry` (replacing the key's), unless it alone takes more
    /// than [`MAX_ENTRY_SHARE`] of the budget.
    pub fn put(&mut self, key: &str, entry: Entry) {
        self.remove(key);
        let size = entry.bytes() + key.len();
        if size > self.budget / MAX_ENTRY_SHARE {
            return;
        }
        self.tick += 1;
        self.used += size;
        self.entries
            .insert(key.to_string(), (Arc::new(entry), size, self.tick));
        self.order.insert(self.tick, key.to_string());
        self.evict();
    }

    pub fn remove(&mut self, key: &str) {
        if let Some((_, size, used)) = self.entries.remove(key) {
            self.used -= size;
            self.order.remove(&used);
        }
    }

    fn evict(&mut self) {
        while self.used > self.budget {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, size, _)) = self.entries.remove(&key) {
                self.used -= size;
            }
        }
    }
}

/// The router's cache (one per process: the key names the cluster).
static CACHE: LazyLock<Mutex<Lru>> = LazyLock::new(|| Mutex::new(Lru::new(0)));

/// The cached entry of `key`, the budget set to `budget_mb` first.
pub fn lookup(key: &str, budget_mb: usize) -> Option<Arc<Entry>> {
    let mut c = CACHE.lock();
    c.set_budget(budget_mb << 20);
    metrics::QUERY_CACHE_BYTES.set(c.used() as i64);
    c.get(key)
}

/// Keeps `entry` under `key` (None: drops the key's entry).
pub fn store(key: &str, entry: Option<Entry>) {
    let mut c = CACHE.lock();
    match entry {
        Some(e) => c.put(key, e),
        None => c.remove(key),
    }
    metrics::QUERY_CACHE_BYTES.set(c.used() as i64);
}

/// The key of a statement: the cluster, database and shard map epoch,
/// and each shard's statement with the time range left out.
pub fn key(
    cluster: &str,
    database: &str,
    map_epoch: u64,
    templates: &BTreeMap<u32, String>,
) -> String {
    let mut k = format!("{cluster}\u{0}{database}\u{0}{map_epoch}");
    for (shard, sql) in templates {
        k.push_str(&format!("\u{0}{shard}\u{0}{sql}"));
    }
    k
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Int64Array, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    const MIN: i64 = 60_000_000_000;

    fn iv(offset: i64) -> Interval {
        Interval {
            duration: MIN,
            offset,
        }
    }

    fn range(start: i64, end: i64) -> TimeRange {
        TimeRange { start, end }
    }

    fn rows(buckets: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("__b", DataType::Int64, false),
            Field::new("agg_c0", DataType::UInt64, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(buckets.to_vec())),
                Arc::new(UInt64Array::from(vec![1u64; buckets.len()])),
            ],
        )
        .unwrap()
    }

    fn buckets_of(batches: &[RecordBatch]) -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    }

    #[test]
    fn buckets_round_to_the_interval_and_its_offset() {
        assert_eq!(bucket_floor(MIN + 5, iv(0)), MIN);
        assert_eq!(bucket_ceil(MIN + 5, iv(0)), 2 * MIN);
        assert_eq!(bucket_ceil(MIN, iv(0)), MIN);
        assert_eq!(bucket_floor(-5, iv(0)), -MIN);
        assert_eq!(bucket_floor(MIN + 5, iv(10)), MIN + 10 - MIN);
        assert_eq!(bucket_ceil(MIN + 5, iv(10)), MIN + 10);
    }

    #[test]
    fn only_whole_settled_buckets_are_cached() {
        // Start mid-bucket: the first (partial) bucket is not cached.
        let read = range(MIN + 1, 100 * MIN + 7);
        assert_eq!(
            cacheable_span(read, iv(0), 50 * MIN + 3),
            Some((2 * MIN, 50 * MIN))
        );
        // Settled past the range: the range's last whole bucket ends it.
        assert_eq!(
            cacheable_span(read, iv(0), i64::MAX - 1),
            Some((2 * MIN, 100 * MIN))
        );
        assert_eq!(cacheable_span(read, iv(0), 2 * MIN + 1), None);
        assert_eq!(cacheable_span(TimeRange::UNBOUNDED, iv(0), 0), None);
    }

    #[test]
    fn a_refresh_uses_the_cached_buckets_inside_its_range() {
        // The range moved a minute and a half on.
        let read = range(2 * MIN + MIN / 2, 101 * MIN + MIN / 2);
        assert_eq!(
            usable_span(2 * MIN, 50 * MIN, read, iv(0)),
            Some((3 * MIN, 50 * MIN))
        );
        // A range before the cached span shares nothing.
        assert_eq!(
            usable_span(50 * MIN, 60 * MIN, range(0, 40 * MIN), iv(0)),
            None
        );
    }

    #[test]
    fn rows_are_kept_by_bucket() {
        let kept = rows_within(&[rows(&[0, MIN, 2 * MIN]), rows(&[3 * MIN])], MIN, 3 * MIN);
        assert_eq!(buckets_of(&kept), vec![MIN, 2 * MIN]);
        assert!(rows_within(&[rows(&[0])], MIN, 2 * MIN).is_empty());
    }

    #[test]
    fn an_entry_needs_every_shards_mark() {
        let seen = ShardMark::Seen { epoch: 7, mark: 1 };
        let part = |mark| ShardPart {
            mark,
            rows: vec![rows(&[0, MIN, 2 * MIN, 3 * MIN])],
        };
        let mut answers = BTreeMap::from([(0, part(seen)), (1, part(ShardMark::NoTable))]);
        let e = entry_of(&answers, range(0, 4 * MIN), iv(0), 2 * MIN).unwrap();
        assert_eq!((e.lo, e.hi), (0, 2 * MIN));
        assert_eq!(buckets_of(&e.shards[&0].rows), vec![0, MIN]);
        answers.insert(2, part(ShardMark::Unknown));
        assert!(entry_of(&answers, range(0, 4 * MIN), iv(0), 2 * MIN).is_none());
    }

    #[test]
    fn marks_must_all_read_the_same() {
        let seen = ShardMark::Seen { epoch: 7, mark: 1 };
        let cached = BTreeMap::from([
            (
                0,
                ShardPart {
                    mark: seen,
                    rows: vec![],
                },
            ),
            (
                1,
                ShardPart {
                    mark: ShardMark::NoTable,
                    rows: vec![],
                },
            ),
        ]);
        let fresh = BTreeMap::from([(0, seen), (1, ShardMark::NoTable)]);
        assert!(marks_agree(&cached, &fresh));
        let moved = BTreeMap::from([
            (0, ShardMark::Seen { epoch: 7, mark: 2 }),
            (1, ShardMark::NoTable),
        ]);
        assert!(!marks_agree(&cached, &moved));
        let restarted = BTreeMap::from([
            (0, ShardMark::Seen { epoch: 8, mark: 1 }),
            (1, ShardMark::NoTable),
        ]);
        assert!(!marks_agree(&cached, &restarted));
        let appeared = BTreeMap::from([(0, seen), (1, ShardMark::Seen { epoch: 7, mark: 0 })]);
        assert!(!marks_agree(&cached, &appeared));
        assert!(!marks_agree(&cached, &BTreeMap::from([(0, seen)])));
    }

    #[test]
    fn the_lru_keeps_to_its_budget() {
        let entry = |n: usize| Entry {
            lo: 0,
            hi: MIN,
            shards: BTreeMap::from([(
                0,
                ShardPart {
                    mark: ShardMark::NoTable,
                    rows: vec![rows(&vec![0; n])],
                },
            )]),
        };
        let one = entry(1000).bytes() + 1;
        let budget = 8 * one + 10;
        let mut lru = Lru::new(budget);
        for k in 0..8 {
            lru.put(&k.to_string(), entry(1000));
        }
        assert_eq!(lru.len(), 8);
        assert!(lru.get("0").is_some()); // "1" is now the least recent
        lru.put("8", entry(1000));
        assert_eq!(lru.len(), 8);
        assert!(lru.get("1").is_none());
        assert!(lru.get("0").is_some() && lru.get("8").is_some());
        assert!(lru.used() <= budget);
        // More than an eighth of the budget: not kept, and nothing else
        // is pushed out for it.
        lru.put("big", entry(2000));
        assert!(lru.get("big").is_none());
        assert_eq!(lru.len(), 8);
        lru.set_budget(0);
        assert!(lru.is_empty());
        assert_eq!(lru.used(), 0);
    }

    #[test]
    fn keys_differ_by_cluster_database_epoch_and_statement() {
        let t = BTreeMap::from([(0, "SELECT 1".to_string())]);
        let k = key("c", "db", 1, &t);
        assert_eq!(k, key("c", "db", 1, &t.clone()));
        assert_ne!(k, key("c", "db", 2, &t));
        assert_ne!(k, key("c", "db2", 1, &t));
        assert_ne!(k, key("d", "db", 1, &t));
        assert_ne!(
            k,
            key("c", "db", 1, &BTreeMap::from([(0, "SELECT 2".to_string())]))
        );
        assert_ne!(
            k,
            key("c", "db", 1, &BTreeMap::from([(1, "SELECT 1".to_string())]))
        );
    }
}
