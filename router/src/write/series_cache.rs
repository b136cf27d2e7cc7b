//! Router-wide cache of the series requests have already resolved: from the
//! raw series of a line (measurement and tags as written) to its shard and
//! the length of its measurement, per database.
//!
//! Why: at 1M series every line of a request is a series new to that
//! request, so each request parsed its tags, validated them, hashed,
//! placed and admitted every series again (issue 18). Scrapes repeat their
//! series, so after a first pass a line's series is found here and the
//! request skips all of that.
//!
//! What an entry claims, and why each claim stays true:
//! - the raw series is valid and is its own canonical key (only such
//!   spellings are cached; the others keep the full path), so its
//!   `series_id` is the XXH3 of the raw bytes the caller already computed;
//!   validity is a function of the bytes alone;
//! - the series was admitted under its database's cardinality limit by the
//!   router's [`crate::write::cardinality::Cardinality`] (entries are only made after
//!   admission). A database's set only grows, so it stays admitted; the
//!   cache and that `Cardinality` are made and dropped together (`Router`);
//! - its shard for the shard count stored with it (recomputed for another).
//!
//! Entries are found by a 128-bit fingerprint of the raw bytes (the XXH3
//! the line already has, plus a second, seeded XXH3) and the database id,
//! compared exactly; the raw bytes are not kept. Comparing them would cost
//! a third dependent cache miss per line and ~70 more bytes per entry; a
//! false hit needs both 64-bit hashes of two spellings to agree, far less
//! likely than the 64-bit `series_id` collision every series already risks.
//!
//! Memory is bounded by `series_cache_entries`: the cache is cut into
//! [`STRIPES`] locked stripes (requests run on every runtime thread), each
//! holding at most its share in its own table ([`table`]); a stripe that is
//! full is cleared wholesale before the next insert (no per-entry
//! bookkeeping on hits). Below the cap nothing is ever dropped; a router
//! whose live series exceed it keeps working, with fewer hits. An entry is
//! a 32-byte slot, at most 3/4 of the slots used: 43 bytes per entry when
//! full, up to 85 right after a table doubled.

mod memory;
mod table;

use parking_lot::Mutex;
use prometheus::{IntCounter, IntGauge};
use std::collections::HashMap;
use table::{Published, Table, Value};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Lock stripes. A lookup per line from every request task: one lock
/// would make them queue (as the single cardinality lock did). 16, not
/// more: a lookup holds its lock for a few ns, and fewer, larger tables
/// reach the 2 MiB that huge pages need (at the default 2M entries each
/// stripe's table ends at 4 MiB).
const STRIPES: usize = 16;

/// Seed of the second hash of the raw bytes (any value other than 0, the
/// seed of the first).
const CHECK_SEED: u64 = 0x5bd1_e995_a5a5_5a5a;

/// The second half of a raw series' fingerprint.
#[inline]
pub fn check_of(raw: &[u8]) -> u64 {
    xxh3_64_with_seed(raw, CHECK_SEED)
}

/// The table key of a raw series (by its XXH3 `raw_hash`) in database
/// `db`: the same series in two databases gets two entries instead of
/// evicting each other.
#[inline]
fn table_key(raw_hash: u64, db: u32) -> u64 {
    raw_hash ^ (u64::from(db) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The stripe of a table key: bits 40..44, away from the low bits that
/// pick a slot.
#[inline]
fn stripe_of(key: u64) -> usize {
    ((key >> 40) as usize) % STRIPES
}

/// Entries one stripe may hold for `total` entries in all. Rounded down to
/// 3/4 of a power of two, what a table of that many slots holds at its
/// largest load, so a full stripe is a full table (no doubling into a
/// half-empty one); at least 1 so that a tiny cache (tests) holds something.
pub fn stripe_capacity(total: usize, stripes: usize) -> usize {
    let share = total / stripes;
    if share < 12 {
        return share.max(usize::from(total > 0));
    }
    // The largest 2^k slots whose 3/4 is within the share.
    let slots = 1usize << (usize::BITS - 1 - (share * 4 / 3).leading_zeros());
    slots / 4 * 3
}

/// What a hit tells a request about a raw series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Known {
    /// `Some` when cached for the shard count asked for.
    pub shard: Option<u32>,
    /// The measurement is `raw[..measurement_len]` (no escapes in a cached
    /// spelling).
    pub measurement_len: usize,
}

/// A series a request resolved and admitted, to be cached.
#[derive(Debug, Clone, Copy)]
pub struct NewEntry {
    pub raw_hash: u64,
    pub check: u64,
    pub shard_count: u32,
    pub shard: u32,
    pub measurement_len: usize,
}

/// Aligned so two stripes' locks never share a cache line.
#[repr(align(64))]
struct Stripe {
    table: Mutex<Table>,
    published: Published,
}

/// The cache of the whole router.
pub struct SeriesCache {
    stripes: Box<[Stripe]>,
    stripe_capacity: usize,
    /// Database ids (exact: compared in every entry).
    dbs: Mutex<HashMap<String, u32>>,
    entries: IntGauge,
    clears: IntCounter,
}

impl std::fmt::Debug for SeriesCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeriesCache")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl SeriesCache {
    /// A cache of at most `max_entries` series (0 = no cache).
    pub fn new(max_entries: usize) -> SeriesCache {
        SeriesCache {
            stripes: (0..STRIPES)
                .map(|_| Stripe {
                    table: Mutex::new(Table::new(stripe_capacity(max_entries, STRIPES))),
                    published: Published::default(),
                })
                .collect(),
            stripe_capacity: stripe_capacity(max_entries, STRIPES),
            dbs: Mutex::default(),
            entries: crate::metrics::SERIES_CACHE_ENTRIES.clone(),
            clears: crate::metrics::SERIES_CACHE_CLEARS.clone(),
        }
    }

    /// Entries the cache holds at most.
    pub fn capacity(&self) -> usize {
        self.stripe_capacity * STRIPES
    }

    /// Entries held now (locks every stripe: tests and diagnostics).
    pub fn len(&self) -> usize {
        self.stripes.iter().map(|s| s.table.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cache as seen by requests to database `db`, or `None` when the
    /// cache is off.
    pub fn db(&self, db: &str) -> Option<DbCache<'_>> {
        if self.stripe_capacity == 0 {
            return None;
        }
        let mut dbs = self.dbs.lock();
        // From 1: 0 marks an empty slot.
        let next = dbs.len() as u32 + 1;
        let id = *dbs.entry(db.to_owned()).or_insert(next);
        Some(DbCache {
            cache: self,
            db: id,
        })
    }
}

/// The cache for one database: what a request holds.
#[derive(Debug, Clone, Copy)]
pub struct DbCache<'a> {
    cache: &'a SeriesCache,
    db: u32,
}

impl DbCache<'_> {
    /// Brings the place of a raw series' entry into the CPU cache: called
    /// a few lines ahead of [`Self::get`], so that the lookup does not wait
    /// for memory (at 1M series every entry is elsewhere in RAM).
    #[inline]
    pub fn prefetch(&self, raw_hash: u64) {
        let key = table_key(raw_hash, self.db);
        self.cache.stripes[stripe_of(key)].published.prefetch(key);
    }

    /// The cached facts of a raw series (`raw_hash` its XXH3, `check` its
    /// [`check_of`]) for `shard_count` shards.
    #[inline]
    pub fn get(&self, raw_hash: u64, check: u64, shard_count: u32) -> Option<Known> {
        let key = table_key(raw_hash, self.db);
        let e = self.cache.stripes[stripe_of(key)].table.lock().get(key)?;
        (e.check == check && e.db == self.db).then_some(Known {
            shard: (e.shard_count == shard_count).then_some(e.shard),
            measurement_len: e.measurement_len as usize,
        })
    }

    /// Caches the series of `new` (reordered), one lock per stripe.
    pub fn insert(&self, new: &mut [NewEntry]) {
        let key = |n: &NewEntry| table_key(n.raw_hash, self.db);
        new.sort_unstable_by_key(|n| stripe_of(key(n)));
        let mut added = 0i64;
        for group in new.chunk_by(|a, b| stripe_of(key(a)) == stripe_of(key(b))) {
            let stripe = &self.cache.stripes[stripe_of(key(&group[0]))];
            let mut table = stripe.table.lock();
            for n in group {
                let value = Value {
                    check: n.check,
                    db: self.db,
                    shard_count: n.shard_count,
                    shard: n.shard,
                    measurement_len: n.measurement_len as u32,
                };
                let change = table.insert(key(n), value, &stripe.published);
                if change < 0 {
                    self.cache.clears.inc();
                }
                added += change;
            }
        }
        self.cache.entries.add(added);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xxhash_rust::xxh3::xxh3_64;

    fn new_entry(raw: &[u8], shard: u32) -> NewEntry {
        NewEntry {
            raw_hash: xxh3_64(raw),
            check: check_of(raw),
            shard_count: 8,
            shard,
            measurement_len: 3,
        }
    }

    #[test]
    fn stripe_capacity_is_a_full_table_within_the_share() {
        assert_eq!(stripe_capacity(0, 64), 0);
        assert_eq!(stripe_capacity(10, 64), 1, "a tiny cache holds something");
        assert_eq!(stripe_capacity(64 * 7, 64), 7);
        assert_eq!(stripe_capacity(64 * 12, 64), 12);
        assert_eq!(stripe_capacity(64 * 24_576, 64), 24_576);
        // 2M in 64 stripes: 31,250 each; 24,576 fill 32,768 slots to 3/4.
        assert_eq!(stripe_capacity(2_000_000, 64), 24_576);
        // The default: 16 stripes of 98,304 in 131,072 slots (4 MiB each).
        assert_eq!(stripe_capacity(2_000_000, STRIPES), 98_304);
        for total in [100, 1_000, 123_457, 2_000_000, 10_000_000] {
            let c = stripe_capacity(total, 64);
            assert!(c * 64 <= total, "{total}: never above the cap");
            assert!(c * 64 * 2 > total, "{total}: at least half the cap");
        }
    }

    #[test]
    fn a_hit_returns_what_was_inserted_for_its_database_only() {
        let cache = SeriesCache::new(10_000);
        let a = cache.db("a").unwrap();
        let b = cache.db("b").unwrap();
        let raw = b"cpu,host=x";
        let (h, c) = (xxh3_64(raw), check_of(raw));
        assert_eq!(a.get(h, c, 8), None);
        a.prefetch(h);
        a.insert(&mut [new_entry(raw, 5)]);
        let want = Known {
            shard: Some(5),
            measurement_len: 3,
        };
        assert_eq!(a.get(h, c, 8), Some(want));
        assert_eq!(cache.db("a").unwrap().get(h, c, 8), Some(want));
        assert_eq!(b.get(h, c, 8), None, "databases do not share entries");
        assert_eq!(a.get(h, c ^ 1, 8), None, "the second hash must agree");
        assert_eq!(
            a.get(h, c, 16),
            Some(Known {
                shard: None,
                measurement_len: 3
            }),
            "another shard count: the caller places the series again"
        );
        b.insert(&mut [new_entry(raw, 2)]);
        assert_eq!(a.get(h, c, 8).unwrap().shard, Some(5));
        assert_eq!(b.get(h, c, 8).unwrap().shard, Some(2));
        assert!(SeriesCache::new(0).db("a").is_none(), "0 turns it off");
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let cache = SeriesCache::new(64 * 7);
        let db = cache.db("db").unwrap();
        let raws: Vec<Vec<u8>> = (0..5_000)
            .map(|i| format!("cpu,host=h{i}").into_bytes())
            .collect();
        for chunk in raws.chunks(100) {
            let mut new: Vec<NewEntry> = chunk.iter().map(|r| new_entry(r, 1)).collect();
            db.insert(&mut new);
            assert!(cache.len() <= cache.capacity());
        }
        assert_eq!(cache.capacity(), STRIPES * stripe_capacity(448, STRIPES));
        // Full stripes were cleared, so most of the last ones inserted are
        // there (a stripe may have been cleared among them) and the first
        // ones are not.
        let found = |rs: &[Vec<u8>]| {
            rs.iter()
                .filter(|r| db.get(xxh3_64(r), check_of(r), 8).is_some())
                .count()
        };
        assert!(found(&raws[4_900..]) > 60, "{}", found(&raws[4_900..]));
        assert!(found(&raws[..100]) < 10, "{}", found(&raws[..100]));
    }
}
