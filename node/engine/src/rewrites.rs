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
//!
//! Tracking survives a restart through the shard's ledger
//! (rewrites_ledger.rs): the partitions a read must collapse
//! ([`TableRewrites::final_partitions`]) are stored before an insert can
//! need them, so every partition the ledger does not name was written
//! under tracking. A restarted process starts from the ledger and, at the
//! table's first flush, reads back each series' newest time over the last
//! [`RELOAD_WINDOW_NS`]; a series it did not find there counts as having
//! rows up to the window's start ([`TableRewrites::reloaded`]).

use std::collections::BTreeSet;

use shardhouse_common::series::IdMap;
use shardhouse_common::sql_check::{self, Kind};

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// How far back from a table's newest row a restarted process reads each
/// series' newest time: late points within it are told apart from
/// rewrites exactly, older ones of series not seen in it make their day
/// dirty. Six hours of a 10-second series is 2,160 rows to scan.
pub(crate) const RELOAD_WINDOW_NS: i64 = 6 * 3_600 * 1_000_000_000;

/// What the flusher knows about one fact table's duplicates.
#[derive(Debug)]
pub(crate) struct TableRewrites {
    /// Partition ids that existed before tracking began.
    untracked: BTreeSet<String>,
    /// Days (since the Unix epoch, UTC) where a key may be stored twice.
    dirty: BTreeSet<i64>,
    /// Newest time (ns) written for each series while tracked.
    latest: IdMap<i64>,
    /// A series missing from `latest` may have rows before this time that
    /// this process never saw: `i64::MIN` for a table tracked from its
    /// first row, the reload window's start after a restart.
    unseen_before: i64,
    /// Tracking restored from the ledger: `latest` is still to be read
    /// back from the table, and until then every row counts as a rewrite.
    reload: bool,
}

impl Default for TableRewrites {
    fn default() -> TableRewrites {
        TableRewrites {
            untracked: BTreeSet::new(),
            dirty: BTreeSet::new(),
            latest: IdMap::default(),
            unseen_before: i64::MIN,
            reload: false,
        }
    }
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

    /// Tracking carried over a restart: the ledger names the partitions a
    /// read must collapse; every other one was written under tracking.
    pub(crate) fn from_ledger(final_partitions: impl IntoIterator<Item = String>) -> TableRewrites {
        TableRewrites {
            untracked: final_partitions.into_iter().collect(),
            unseen_before: i64::MAX,
            reload: true,
            ..TableRewrites::default()
        }
    }

    /// Whether the series' newest times are still to be read back
    /// ([`TableRewrites::reloaded`]) before the next insert.
    pub(crate) fn needs_reload(&self) -> bool {
        self.reload
    }

    /// What a restarted process read back: each series' newest time among
    /// the rows at or after `from` (a series not among them has none
    /// there), and the partitions that exist (a ledger entry for one that
    /// no longer does is dropped).
    pub(crate) fn reloaded(
        &mut self,
        latest: impl IntoIterator<Item = (u64, i64)>,
        from: i64,
        existing: &BTreeSet<String>,
    ) {
        self.latest = latest.into_iter().collect();
        self.unseen_before = from;
        self.untracked.retain(|p| existing.contains(p));
        self.reload = false;
    }

    /// Records rows about to be inserted: `(series_id, time)` pairs in any
    /// order. Consecutive rows of one series cost one map lookup. True when
    /// a day became dirty: the ledger must hear of it before the insert.
    pub(crate) fn note(&mut self, rows: impl IntoIterator<Item = (u64, i64)>) -> bool {
        let unseen = self.unseen_before.saturating_sub(1);
        let mut grew = false;
        let mut current: Option<(u64, i64)> = None;
        for (series, time) in rows {
            let newest = match current {
                Some((s, t)) if s == series => t,
                other => {
                    if let Some((s, t)) = other {
                        self.latest.insert(s, t);
                    }
                    self.latest.get(&series).copied().unwrap_or(unseen)
                }
            };
            if time <= newest {
                grew |= self.dirty.insert(time.div_euclid(NANOS_PER_DAY));
            }
            current = Some((series, newest.max(time)));
        }
        if let Some((s, t)) = current {
            self.latest.insert(s, t);
        }
        grew
    }

    /// Forgets a partition that was dropped (retention): whatever it held
    /// is gone. True when the ledger's entry changes.
    pub(crate) fn forget_partition(&mut self, partition_id: &str) -> bool {
        let before = self.untracked.len() + self.dirty.len();
        self.untracked.remove(partition_id);
        self.dirty
            .retain(|day| crate::layout::partition_id_of_day(*day) != partition_id);
        before != self.untracked.len() + self.dirty.len()
    }

    /// The partitions (`YYYYMMDD`) where a key may be stored twice: what
    /// the ledger keeps across a restart.
    pub(crate) fn final_partitions(&self) -> Vec<String> {
        let mut all: BTreeSet<String> = self.untracked.clone();
        all.extend(
            self.dirty
                .iter()
                .map(|d| crate::layout::partition_id_of_day(*d)),
        );
        all.into_iter().collect()
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
    fn after_a_restart_only_rows_the_reload_cannot_vouch_for_are_dirty() {
        let day = 20_783 * DAY;
        let hour = 3_600 * 1_000_000_000;
        let mut t = TableRewrites::from_ledger(["20261120".to_string(), "20261101".to_string()]);
        assert!(t.needs_final() && t.needs_reload());
        // Before the reload every row may be a second copy.
        let mut early = TableRewrites::from_ledger(Vec::new());
        assert!(!early.needs_final(), "a clean table reads without FINAL");
        assert!(early.note([(1, day + 10 * hour)]));

        let existing = BTreeSet::from(["20261120".to_string(), "20261126".to_string()]);
        // Series 1 has rows up to 12:00; the window starts at 06:00.
        t.reloaded([(1, day + 12 * hour)], day + 6 * hour, &existing);
        assert!(!t.needs_reload());
        assert_eq!(
            t.final_partitions(),
            ["20261120"],
            "a gone partition is dropped"
        );
        t.forget_partition("20261120");
        assert!(!t.needs_final());
        // Newer points of a known series, and of a series first seen now
        // inside the window, are clean.
        assert!(!t.note([(1, day + 12 * hour + 1), (2, day + 7 * hour)]));
        assert!(!t.needs_final());
        // A replayed point the table already holds is a rewrite.
        assert!(t.note([(1, day + 11 * hour)]));
        assert_eq!(t.final_partitions(), ["20261126"]);
        // An unseen series' point before the window may be stored already.
        let mut t = TableRewrites::from_ledger(Vec::new());
        t.reloaded(Vec::new(), day + 6 * hour, &existing);
        assert!(t.note([(9, day + 5 * hour)]));
        assert!(
            !t.note([(9, day + 5 * hour - 1)]),
            "same day: nothing new to record"
        );
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
