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

#[derive(Default)]
struct Entries {
    map: HashMap<(u32, String, String), (u64, Arc<str>)>,
}

/// Literal id lists by (shard, database, condition), each with the tag
/// index version it was computed at.
#[derive(Default)]
pub struct SeriesCache {
    entries: Mutex<Entries>,
}

impl SeriesCache {
    /// The literal of `condition` on `shard`'s `database` if it was
    /// computed at `version`.
    pub fn get(
        &self,
        shard: u32,
        database: &str,
        condition: &str,
        version: u64,
    ) -> Option<Arc<str>> {
        let e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // The key borrows nothing: build it once per lookup.
        let key = (shard, database.to_string(), condition.to_string());
        match e.map.get(&key) {
            Some((v, lit)) if *v == version => Some(Arc::clone(lit)),
            _ => None,
        }
    }

    /// Remembers `literal` of `condition`, computed at `version`.
    pub fn put(
        &self,
        shard: u32,
        database: &str,
        condition: &str,
        version: u64,
        literal: Arc<str>,
    ) {
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if e.map.len() >= MAX_ENTRIES {
            e.map.clear();
        }
        e.map.insert(
            (shard, database.to_string(), condition.to_string()),
            (version, literal),
        );
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
        let c = SeriesCache::default();
        c.put(1, "db", "measurement = 'cpu'", 5, "(7)".into());
        assert_eq!(
            c.get(1, "db", "measurement = 'cpu'", 5).as_deref(),
            Some("(7)")
        );
        assert_eq!(c.get(1, "db", "measurement = 'cpu'", 6), None);
        assert_eq!(c.get(2, "db", "measurement = 'cpu'", 5), None);
        assert_eq!(c.get(1, "other", "measurement = 'cpu'", 5), None);
    }
}
