//! Whether the shards group a statement's partials by its `GROUP BY`
//! tags ([`Grouping::ByTags`]) or by series, learned from the series the
//! same statement found last time.
//!
//! Grouping by tags at the shards joins every point to its series' group:
//! a region panel over a day sends 4 rows per bucket instead of 1,000 (one
//! per host) and the router merges 4, but a statement whose groups are its
//! series (`GROUP BY host`) pays for the join and gains nothing. Which one
//! a statement is shows only in its series' tags, read beside the facts;
//! dashboards ask the same statements again and again, so the last answer
//! decides the next.

use std::collections::{BTreeSet, HashMap};
use std::sync::LazyLock;

use parking_lot::Mutex;

use super::SeriesTags;

/// Statements remembered; past it the memory starts over (a dashboard's
/// panels are a few dozen).
const MAX_STATEMENTS: usize = 4_096;

/// Per statement: whether its groups collapse, and how many series that
/// was decided over.
static COLLAPSES: LazyLock<Mutex<HashMap<String, (bool, usize)>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The memory's key: what decides the series and their groups.
pub(super) fn key(
    database: &str,
    measurement: &str,
    tag_sql: Option<&str>,
    dims: &[String],
) -> String {
    format!(
        "{database}\u{0}{measurement}\u{0}{}\u{0}{}",
        tag_sql.unwrap_or(""),
        dims.join("\u{0}")
    )
}

/// Whether to group by tags at the shards: yes unless the statement's
/// series were their own groups last time (an unknown statement may
/// collapse: grouping by tags costs it little if not, and saves much if so).
pub(super) fn by_tags(key: &str) -> bool {
    COLLAPSES.lock().get(key).is_none_or(|(c, _)| *c)
}

/// Remembers whether `series` grouped by `dims` make fewer groups than
/// series (at most half as many: fewer rows to send and merge than the
/// join costs).
///
/// Counting the groups walks every series; a refresh that finds as many
/// series as the last asking keeps the last decision rather than walk
/// them again on every query.
pub(super) fn learn(key: &str, series: &SeriesTags, dims: &[String]) {
    if COLLAPSES
        .lock()
        .get(key)
        .is_some_and(|(_, n)| *n == series.len())
    {
        return;
    }
    let collapses = collapses(series, dims);
    let mut m = COLLAPSES.lock();
    if m.len() >= MAX_STATEMENTS && !m.contains_key(key) {
        m.clear();
    }
    m.insert(key.to_string(), (collapses, series.len()));
}

/// Pure: whether the groups of `series` by `dims` are at most half as many
/// as the series.
fn collapses(series: &SeriesTags, dims: &[String]) -> bool {
    let groups: BTreeSet<Vec<&str>> = series
        .values()
        .map(|tags| {
            dims.iter()
                .map(|d| tags.get(d).map_or("", String::as_str))
                .collect()
        })
        .collect();
    !series.is_empty() && groups.len() * 2 <= series.len()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn series(rows: &[(&str, &str)]) -> SeriesTags {
        rows.iter()
            .enumerate()
            .map(|(i, (host, region))| {
                let mut t = BTreeMap::new();
                t.insert("host".to_string(), host.to_string());
                if !region.is_empty() {
                    t.insert("region".to_string(), region.to_string());
                }
                (i as u64 + 1, t)
            })
            .collect()
    }

    #[test]
    fn groups_collapse_when_series_share_their_tags() {
        let s = series(&[("a", "eu"), ("b", "eu"), ("c", "us"), ("d", "us")]);
        let dims = |d: &[&str]| d.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(collapses(&s, &dims(&["region"])));
        assert!(!collapses(&s, &dims(&["host"])));
        assert!(!collapses(&s, &dims(&["host", "region"])));
        // A missing tag is the empty value: one group.
        assert!(collapses(&s, &dims(&["nosuch"])));
        // Two of three series share a group: 2 groups for 3 series.
        let s = series(&[("a", "eu"), ("b", "eu"), ("c", "")]);
        assert!(!collapses(&s, &dims(&["region"])));
        assert!(!collapses(&SeriesTags::new(), &dims(&["region"])));
    }

    #[test]
    fn the_last_answer_decides_the_next_statement() {
        let k = key(
            "db",
            "cpu",
            Some("tags['x'] = 'learn-test'"),
            &["host".to_string()],
        );
        assert!(by_tags(&k), "unknown statements group by tags");
        learn(&k, &series(&[("a", ""), ("b", "")]), &["host".to_string()]);
        assert!(!by_tags(&k));
        // As many series as before: the last decision stands.
        learn(&k, &series(&[("a", ""), ("a", "")]), &["host".to_string()]);
        assert!(!by_tags(&k));
        // A series more: decided again.
        learn(
            &k,
            &series(&[("a", ""), ("a", ""), ("a", "")]),
            &["host".to_string()],
        );
        assert!(by_tags(&k));
    }
}
