//! The series a planned statement selects, remembered per shard while the
//! shard's tag index has not changed, so a repeated dashboard query runs
//! one engine statement over literal ids instead of a subquery.
//!
//! Routers select a measurement's series as
//! `series_id IN (SELECT series_id FROM _series WHERE <condition>)`. In
//! chDB the subquery costs about as much as the read of the facts it
//! prunes (bench-query's shard_sql_cost: 4-7 ms per shard with it, 2.1 ms
//! with the ids as literals). The ids a condition selects change only when
//! the shard's `_series` rows do: a new series buffered, or a storage
//! operation, restore or snapshot import (each moves the shard's
//! [`crate::known_series::KnownSeries::version`]). An entry is kept with
//! the version it was computed at and only when no `_series` row was
//! buffered then, so while the version reads the same the stored rows are
//! the ones the entry was computed from.
//!
//! The decisions are pure functions over the statement's text
//! ([`selections`], [`substitute`]) with unit tests; the engine does the
//! I/O (read.rs).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The text of a selection up to its condition, as routers generate it.
const PREFIX: &str = "series_id IN (SELECT series_id FROM _series WHERE ";

/// Entries kept before the cache starts over (dashboards repeat a few
/// hundred statements; this bounds memory, not hits).
const MAX_ENTRIES: usize = 4096;

/// Ids one entry may hold: a longer literal list costs more to parse than
/// the subquery does to run.
pub const MAX_IDS: usize = 20_000;

/// One series selection in a statement: the byte range of the
/// parenthesized subquery (from its `(` to its `)`) and its condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub start: usize,
    pub end: usize,
    pub condition: String,
}

/// Every series selection in `sql`, in order; a selection whose brackets
/// do not close is not one.
pub fn selections(sql: &str) -> Vec<Selection> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = sql[from..].find(PREFIX) {
        let at = from + at;
        // A selection follows a word boundary (`xseries_id` is another column).
        let bounded = at == 0
            || !sql.as_bytes()[at - 1].is_ascii_alphanumeric() && sql.as_bytes()[at - 1] != b'_';
        let open = at + "series_id IN ".len();
        let cond_start = at + PREFIX.len();
        match closing_bracket(sql, open) {
            Some(close) if bounded => {
                out.push(Selection {
                    start: open,
                    end: close + 1,
                    condition: sql[cond_start..close].to_string(),
                });
                from = close + 1;
            }
            _ => from = cond_start,
        }
    }
    out
}

/// The byte offset of the `)` that closes the `(` at `open`, skipping
/// quoted strings and identifiers (ClickHouse: `\` escapes, doubled quotes).
fn closing_bracket(sql: &str, open: usize) -> Option<usize> {
    let b = sql.as_bytes();
    if b.get(open) != Some(&b'(') {
        return None;
    }
    let mut depth = 0usize;
    let mut i = open;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i += 1;
                loop {
                    match b.get(i)? {
                        b'\\' => i += 2,
                        &c if c == q => {
                            if b.get(i + 1) == Some(&q) {
                                i += 2;
                            } else {
                                break;
                            }
                        }
                        _ => i += 1,
                    }
                }
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The statement that selects the ids of one selection's condition.
pub fn ids_sql(condition: &str) -> String {
    format!("SELECT series_id FROM _series WHERE {condition}")
}

/// The ids as the bracketed literal list that replaces a subquery (`()`
/// for none: chDB reads `IN ()` as the empty set); `None` for too many.
pub fn literal(ids: &[u64]) -> Option<String> {
    if ids.len() > MAX_IDS {
        return None;
    }
    let mut s = String::with_capacity(ids.len() * 8 + 2);
    s.push('(');
    for (i, id) in ids.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&id.to_string());
    }
    s.push(')');
    Some(s)
}

/// `sql` with each selection that has a literal replaced by it.
pub fn substitute(sql: &str, replaced: &[(Selection, Arc<str>)]) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (s, lit) in replaced {
        out.push_str(&sql[at..s.start]);
        out.push_str(lit);
        at = s.end;
    }
    out.push_str(&sql[at..]);
    out
}

/// What one entry is kept under: shard, database and the text it answers.
type Key = (u32, String, String);

struct Entries<V> {
    map: HashMap<Key, (u64, V, usize)>,
    bytes: usize,
}

/// Values by (shard, database, text), each with the tag index version it
/// was computed at: the series cache's literals ([`SeriesCache`]) and the
/// answers of statements that read only the tag index (tag_answers.rs).
/// Bounded: when an entry would pass `max_entries` or `max_bytes`, it
/// starts over (dashboards repeat a few hundred statements, so this bounds
/// memory, not hits).
pub struct VersionedCache<V> {
    entries: Mutex<Entries<V>>,
    max_entries: usize,
    max_bytes: usize,
}

/// The literal id lists of series selections.
pub type SeriesCache = VersionedCache<Arc<str>>;

impl SeriesCache {
    pub fn for_selections() -> SeriesCache {
        VersionedCache::new(MAX_ENTRIES, 64 << 20)
    }
}

impl<V: Clone> VersionedCache<V> {
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        VersionedCache {
            entries: Mutex::new(Entries {
                map: HashMap::new(),
                bytes: 0,
            }),
            max_entries,
            max_bytes,
        }
    }

    /// The value of `text` on `shard`'s `database` if it was computed at
    /// `version`.
    pub fn get(&self, shard: u32, database: &str, text: &str, version: u64) -> Option<V> {
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // The key borrows nothing: build it once per lookup.
        let key = (shard, database.to_string(), text.to_string());
        match e.map.get(&key) {
            Some((v, value, _)) if *v == version => Some(value.clone()),
            _ => None,
        }
    }

    /// Remembers `value` of `text`, computed at `version`, `bytes` large
    /// (not kept if larger than the whole cache may be).
    pub fn put(
        &self,
        shard: u32,
        database: &str,
        text: &str,
        version: u64,
        value: V,
        bytes: usize,
    ) {
        if bytes > self.max_bytes {
            return;
        }
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if e.map.len() >= self.max_entries || e.bytes + bytes > self.max_bytes {
            e.map.clear();
            e.bytes = 0;
        }
        let key = (shard, database.to_string(), text.to_string());
        if let Some((_, _, old)) = e.map.insert(key, (version, value, bytes)) {
            e.bytes -= old;
        }
        e.bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_are_found_with_their_conditions_and_brackets() {
        let sql = "SELECT a FROM cpu FINAL WHERE time >= 1 AND series_id IN (SELECT series_id FROM _series WHERE measurement = 'cpu' AND ((tags['host'] = 'a)(' OR tags['x'] = 'it''s'))) AND (v > 1)";
        let s = selections(sql);
        assert_eq!(s.len(), 1);
        assert_eq!(
            s[0].condition,
            "measurement = 'cpu' AND ((tags['host'] = 'a)(' OR tags['x'] = 'it''s'))"
        );
        assert_eq!(&sql[s[0].start..s[0].start + 1], "(");
        assert_eq!(&sql[s[0].end..], " AND (v > 1)");
        let lit: Arc<str> = literal(&[3, 1]).unwrap().into();
        assert_eq!(
            substitute(sql, &[(s[0].clone(), lit)]),
            "SELECT a FROM cpu FINAL WHERE time >= 1 AND series_id IN (3,1) AND (v > 1)"
        );
    }

    #[test]
    fn escapes_two_selections_and_non_selections() {
        let sql = r"SELECT 1 FROM a WHERE series_id IN (SELECT series_id FROM _series WHERE tags['h'] = 'x\')') UNION ALL SELECT 1 FROM b WHERE series_id IN (SELECT series_id FROM _series WHERE measurement = 'b')";
        let s = selections(sql);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].condition, r"tags['h'] = 'x\')'");
        assert_eq!(s[1].condition, "measurement = 'b'");
        // Another column, an unclosed bracket: no selection.
        assert!(
            selections("SELECT 1 WHERE xseries_id IN (SELECT series_id FROM _series WHERE 1)")
                .is_empty()
        );
        assert!(
            selections("SELECT 1 WHERE series_id IN (SELECT series_id FROM _series WHERE (1")
                .is_empty()
        );
        assert!(selections("SELECT series_id FROM _series WHERE tags['h'] = 'a'").is_empty());
    }

    #[test]
    fn literals_and_the_cache_keep_their_version() {
        assert_eq!(literal(&[]).as_deref(), Some("()"));
        assert_eq!(literal(&vec![1; MAX_IDS + 1]), None);
        assert_eq!(literal(&[7]).as_deref(), Some("(7)"));
        let c = SeriesCache::for_selections();
        c.put(1, "db", "measurement = 'cpu'", 5, "(7)".into(), 3);
        assert_eq!(
            c.get(1, "db", "measurement = 'cpu'", 5).as_deref(),
            Some("(7)")
        );
        assert_eq!(c.get(1, "db", "measurement = 'cpu'", 6), None);
        assert_eq!(c.get(2, "db", "measurement = 'cpu'", 5), None);
        assert_eq!(c.get(1, "other", "measurement = 'cpu'", 5), None);
    }

    #[test]
    fn the_cache_starts_over_past_its_bounds() {
        let c: VersionedCache<u32> = VersionedCache::new(2, 100);
        c.put(1, "db", "a", 1, 1, 40);
        c.put(1, "db", "a", 1, 2, 40);
        assert_eq!(
            c.get(1, "db", "a", 1),
            Some(2),
            "a new value replaces the old"
        );
        c.put(1, "db", "b", 1, 3, 40);
        assert_eq!(
            c.get(1, "db", "a", 1),
            Some(2),
            "80 bytes in two entries fit"
        );
        c.put(1, "db", "c", 1, 4, 10);
        assert_eq!(c.get(1, "db", "a", 1), None, "a third entry starts over");
        assert_eq!(c.get(1, "db", "c", 1), Some(4));
        c.put(1, "db", "d", 1, 5, 95);
        assert_eq!(c.get(1, "db", "c", 1), None, "past the bytes: starts over");
        c.put(1, "db", "e", 1, 6, 101);
        assert_eq!(
            c.get(1, "db", "e", 1),
            None,
            "larger than the cache: not kept"
        );
        assert_eq!(c.get(1, "db", "d", 1), Some(5));
    }
}
