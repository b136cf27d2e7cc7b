//! The answers of planned statements that read only the tag index
//! (`_series`), remembered per shard while the index stays put.
//!
//! Every `GROUP BY <tag>` panel asks each shard for its series' tags
//! (`sqlgen::series_sql`) beside its facts, and every dashboard load asks
//! `SHOW TAG VALUES` for its variables: one chDB statement per shard each
//! time (2-4 ms), for rows that change only when the shard's `_series`
//! rows do. The same version rules as the series cache (series_cache.rs)
//! make a remembered answer equal to what the statement would read: an
//! answer is used only at the tag index version it was computed at, and
//! kept only if no `_series` row waited in the buffer then.
//!
//! Which statements qualify is decided on their tokens
//! ([`reads_only_the_tag_index`]): every table they read is `_series`
//! and every function they call is one whose value depends only on its
//! arguments. Anything else (a fact table, `now()`, a function not on the
//! list) is never remembered.

use std::sync::Arc;

use arrow_array::RecordBatch;
use shardhouse_common::sql_check::{lex, Kind};

use crate::layout::SERIES_TABLE;
use crate::series_cache::VersionedCache;

/// Functions routers use over the tag index, all of them deterministic.
/// Compared case-sensitively, as ClickHouse names them.
const DETERMINISTIC: &[&str] = &[
    "arrayMap",
    "arrayJoin",
    "arraySort",
    "arrayDistinct",
    "toString",
    "mapKeys",
    "mapValues",
    "mapContains",
    "concat",
    "match",
    "like",
    "notLike",
    "bitAnd",
    "bitOr",
    "bitXor",
    "if",
    "ifNull",
    "toJSONString",
    "count",
    "countIf",
    "uniq",
    "uniqExact",
    "groupArray",
    "groupUniqArray",
    "min",
    "max",
    "any",
    "sum",
    "length",
    "empty",
    "notEmpty",
    "has",
    "tuple",
];

/// Keywords a `(` may follow without being a call.
const KEYWORDS: &[&str] = &[
    "AND", "OR", "NOT", "IN", "WHERE", "ON", "USING", "BY", "AS", "SELECT", "DISTINCT", "WHEN",
    "THEN", "ELSE", "HAVING",
];

/// Answers kept before the cache starts over, and their bytes.
const MAX_ENTRIES: usize = 1024;
const MAX_BYTES: usize = 64 << 20;

/// Remembered answers by (shard, database, statement).
pub type TagAnswers = VersionedCache<Arc<Vec<RecordBatch>>>;

impl TagAnswers {
    pub fn bounded() -> TagAnswers {
        VersionedCache::new(MAX_ENTRIES, MAX_BYTES)
    }
}

/// The memory an answer holds.
pub fn answer_bytes(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.get_array_memory_size()).sum()
}

/// Whether `sql` reads only the tag index, with deterministic functions
/// (see the module docs).
pub fn reads_only_the_tag_index(sql: &str) -> bool {
    let Ok(toks) = lex(sql) else {
        return false;
    };
    let word = |i: usize| {
        toks.get(i)
            .filter(|t| t.kind == Kind::Word)
            .map(|t| &sql[t.start..t.end])
    };
    let mut tables = 0;
    for i in 0..toks.len() {
        let Some(w) = word(i) else {
            continue;
        };
        let next = toks.get(i + 1).map(|t| t.kind);
        if w.eq_ignore_ascii_case("FROM")
            || (w.eq_ignore_ascii_case("JOIN")
                && !i
                    .checked_sub(1)
                    .and_then(word)
                    .is_some_and(|p| p.eq_ignore_ascii_case("ARRAY")))
        {
            // A table, never a subquery or a table function.
            if word(i + 1) != Some(SERIES_TABLE)
                || toks.get(i + 2).map(|t| t.kind) == Some(Kind::Punct('.'))
            {
                return false;
            }
            tables += 1;
        } else if next == Some(Kind::Punct('('))
            && !DETERMINISTIC.contains(&w)
            && !KEYWORDS.iter().any(|k| w.eq_ignore_ascii_case(k))
        {
            return false;
        }
    }
    tables > 0
}

#[cfg(test)]
mod tests {
    use super::reads_only_the_tag_index;

    #[test]
    fn statements_of_the_tag_index_with_deterministic_functions_qualify() {
        for sql in [
            "SELECT series_id, arrayMap(k -> toString(k), mapKeys(tags)) AS keys, mapValues(tags) AS vals FROM _series WHERE measurement = 'cpu' AND ((match(tags['host'], '^h1')))",
            "SELECT measurement, concat(toString(k), '\\0', v) FROM _series ARRAY JOIN mapKeys(tags) AS k, mapValues(tags) AS v",
            "SELECT measurement, countIf(mapContains(tags, 'host')), countIf(mapContains(tags, 'host') AND tags['host'] = 'a') FROM _series GROUP BY measurement",
            "SELECT DISTINCT measurement FROM _series",
            "SELECT DISTINCT toString(arrayJoin(mapKeys(tags))) FROM _series WHERE measurement = 'cpu' AND (tags['a'] IN ('x', 'y'))",
        ] {
            assert!(reads_only_the_tag_index(sql), "{sql}");
        }
    }

    #[test]
    fn facts_time_and_unknown_functions_do_not() {
        for sql in [
            "SELECT count() FROM cpu FINAL WHERE series_id IN (SELECT series_id FROM _series WHERE measurement = 'cpu')",
            "SELECT series_id FROM _series WHERE measurement = 'cpu' AND now() > 0",
            "SELECT series_id FROM _series ANY LEFT JOIN cpu USING (series_id)",
            "SELECT series_id FROM (SELECT series_id FROM _series)",
            "SELECT rand() FROM _series",
            "SELECT series_id FROM _series WHERE series_id IN (SELECT series_id FROM cpu)",
            "SELECT 1",
            "SELECT 1 FROM system.parts",
            "SELECT 1 FROM _series.x",
            "SELECT 'unterminated FROM _series",
        ] {
            assert!(!reads_only_the_tag_index(sql), "{sql}");
        }
    }
}
