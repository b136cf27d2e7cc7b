//! Which fact tables can hold a point twice, so that reads use `FINAL`
//! only where it can change an answer.
//!
//! A fact table is an AggregatingMergeTree keyed by (series_id, time): a
//! point written again (a rewrite, an out-of-order duplicate, an entry
//! replayed after a crash, a flush retried after an error) is a second row
//! until a merge collapses it, and `FINAL` collapses it at read time. But
//! `FINAL` costs: over a day of 10-second points in a few dozen parts a
//! `count()` takes ~1 s with it and ~1 ms without (docs/benchmarks.md). In
//! a metrics pipeline almost no key is ever written twice.
//!
//! The flusher records, per table, the newest time it has written for each
//! series ([`TableRewrites::note`], before every insert attempt, so a
//! retried insert counts as a rewrite). A row at or before its series'
//! newest time may be a second copy: its partition (UTC day) becomes dirty.
//! Tracking starts at a table's first flush in this process; partitions
//! that already existed then are untracked (this process never saw their
//! rows), and so is everything after a snapshot import or a restore (their
//! trackers are dropped). A table whose every partition is tracked and
//! clean holds each key once, and a read of it without `FINAL` gives the
//! same rows ([`strip_final`]). Everything unknown keeps `FINAL`.

use std::collections::BTreeSet;

use shardhouse_common::series::IdMap;
use shardhouse_common::sql_check::{self, Kind};

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// What the flusher knows about one fact table's duplicates.
#[derive(Debug, Default)]
pub(crate) struct TableRewrites {
    /// Partition ids that existed before tracking began.
    untracked: BTreeSet<String>,
    /// Days (since the Unix epoch, UTC) where a key may be stored twice.
    dirty: BTreeSet<i64>,
    /// Newest time (ns) written for each series while tracked.
    latest: IdMap<i64>,
}

impl TableRewrites {
    /// Starts tracking a table whose active parts are in `existing`
    /// partitions.
    pub(crate) fn new(existing: impl IntoIterator<Item = String>) -> TableRewrites {
        TableRewrites {
            untracked: existing.into_iter().collect(),
            ..TableRewrites::default()
        }
    }

    /// Records rows about to be inserted: `(series_id, time)` pairs in any
    /// order. Consecutive rows of one series cost one map lookup.
    pub(crate) fn note(&mut self, rows: impl IntoIterator<Item = (u64, i64)>) {
        let mut current: Option<(u64, i64)> = None;
        for (series, time) in rows {
            let newest = match current {
                Some((s, t)) if s == series => t,
                other => {
                    if let Some((s, t)) = other {
                        self.latest.insert(s, t);
                    }
                    self.latest.get(&series).copied().unwrap_or(i64::MIN)
                }
            };
            if time <= newest {
                self.dirty.insert(time.div_euclid(NANOS_PER_DAY));
            }
            current = Some((series, newest.max(time)));
        }
        if let Some((s, t)) = current {
            self.latest.insert(s, t);
        }
    }

    /// Forgets a partition that was dropped (retention): whatever it held
    /// is gone.
    pub(crate) fn forget_partition(&mut self, partition_id: &str) {
        self.untracked.remove(partition_id);
        self.dirty
            .retain(|day| crate::layout::partition_id_of_day(*day) != partition_id);
    }

    /// Whether a read must collapse duplicates (`FINAL`).
    pub(crate) fn needs_final(&self) -> bool {
        !self.untracked.is_empty() || !self.dirty.is_empty()
    }
}

/// `sql` without `FINAL` after `FROM <table>` for every table `clean`
/// says holds each key once; other text is kept byte for byte. A
/// statement that does not lex is returned as it is (the engine reports
/// its error).
pub(crate) fn strip_final(sql: &str, clean: &dyn Fn(&str) -> bool) -> String {
    let Ok(tokens) = sql_check::lex(sql) else {
        return sql.to_string();
    };
    let text = |i: usize| &sql[tokens[i].start..tokens[i].end];
    let word = |i: usize, w: &str| tokens[i].kind == Kind::Word && text(i).eq_ignore_ascii_case(w);
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for i in 2..tokens.len() {
        if !(word(i, "final") && word(i - 2, "from")) {
            continue;
        }
        let table = match tokens[i - 1].kind {
            Kind::Word => Some(text(i - 1).to_string()),
            Kind::QuotedIdent => sql_check::unquote(text(i - 1)),
            _ => None,
        };
        if table.is_some_and(|t| clean(&t)) {
            // From the end of the table name, so one space stays.
            cuts.push((tokens[i - 1].end, tokens[i].end));
        }
    }
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (from, to) in cuts {
        out.push_str(&sql[at..from]);
        at = to;
    }
    out.push_str(&sql[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = NANOS_PER_DAY;

    #[test]
    fn points_in_time_order_per_series_are_clean() {
        let mut t = TableRewrites::new(Vec::new());
        t.note([(1, 10), (2, 10), (1, 20), (1, 30), (2, 20)]);
        t.note([(2, 25), (1, 31)]);
        assert!(!t.needs_final());
    }

    #[test]
    fn a_rewrite_an_out_of_order_point_or_a_retried_insert_is_dirty() {
        let mut t = TableRewrites::new(Vec::new());
        t.note([(1, 10), (1, 20)]);
        t.note([(1, 20)]);
        assert!(t.needs_final(), "same key again");
        assert_eq!(t.dirty, BTreeSet::from([0]));

        let mut t = TableRewrites::new(Vec::new());
        t.note([(1, 3 * DAY + 5), (1, 3 * DAY + 4)]);
        assert_eq!(t.dirty, BTreeSet::from([3]), "older point of a series");

        let mut t = TableRewrites::new(Vec::new());
        let rows = [(7, 100), (8, 100)];
        t.note(rows);
        t.note(rows);
        assert!(t.needs_final(), "an insert attempted twice");

        // Negative times (before 1970) fall on their own day.
        let mut t = TableRewrites::new(Vec::new());
        t.note([(1, -5), (1, -5)]);
        assert_eq!(t.dirty, BTreeSet::from([-1]));
    }

    #[test]
    fn partitions_from_before_tracking_keep_final_until_dropped() {
        let mut t = TableRewrites::new(["20261127".to_string()]);
        assert!(t.needs_final());
        // 2026-11-26 is day 20,783 since the epoch.
        t.note([(1, 20_783 * DAY + 5), (1, 20_783 * DAY + 5)]);
        t.forget_partition("20261127");
        assert!(t.needs_final(), "the dirty day is another one");
        t.forget_partition("20261126");
        assert!(!t.needs_final());
    }

    #[test]
    fn final_is_dropped_only_after_a_clean_table() {
        let clean = |t: &str| t == "cpu";
        assert_eq!(
            strip_final(
                "SELECT count() FROM `cpu` FINAL WHERE series_id IN (SELECT series_id FROM _series FINAL)",
                &clean
            ),
            "SELECT count() FROM `cpu` WHERE series_id IN (SELECT series_id FROM _series FINAL)"
        );
        assert_eq!(
            strip_final("select * from cpu final", &clean),
            "select * from cpu"
        );
        assert_eq!(
            strip_final("SELECT * FROM mem FINAL", &clean),
            "SELECT * FROM mem FINAL"
        );
        // `FINAL` as a name, or a table named like one, is not the keyword.
        assert_eq!(
            strip_final("SELECT final FROM cpu AS final", &clean),
            "SELECT final FROM cpu AS final"
        );
        assert_eq!(strip_final("SELECT 'x", &clean), "SELECT 'x");
    }
}
