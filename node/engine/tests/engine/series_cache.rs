//! Planned reads answer their series selections from the series cache
//! (series_cache.rs), and statements of the tag index alone from the tag
//! answers (tag_answers.rs), only while the tag index stays as it was: a
//! new series, a series written again, a drop and a selection of no series
//! each read right.

use shardhouse_engine::metrics::{
    READS_OF_NO_SERIES_TOTAL, SERIES_SELECTIONS_TOTAL, TAG_INDEX_ANSWERS_TOTAL,
};
use shardhouse_engine::Applied;
use shardhouse_test_support::arrow::col_strings;

use crate::{apply_cpu_series, drop_cpu_series, engine, scalar};

fn selections(result: &str) -> u64 {
    SERIES_SELECTIONS_TOTAL.with_label_values(&[result]).get()
}

#[test]
fn cached_series_selections_follow_new_series_and_drops() {
    let e = engine();
    let shard = 91;
    // No flush here: reads flush what they read.
    let write = |index: u64, rows: &[(u64, &str, &str)]| apply_cpu_series(e, shard, index, rows);
    let host_a = "SELECT count() FROM cpu FINAL WHERE series_id IN \
        (SELECT series_id FROM _series WHERE measurement = 'cpu' AND (tags['host'] = 'a'))";
    // No rows (a selection of no series, below) count as none.
    let count = |sql: &str| {
        let rows = e.query_planned(shard, "db", sql).expect(sql);
        if rows.iter().all(|b| b.num_rows() == 0) {
            0
        } else {
            scalar(&rows)
        }
    };

    write(1, &[(1, "cpu", "cpu,host=a"), (2, "cpu", "cpu,host=b")]);
    let (hits, misses) = (selections("hit"), selections("miss"));
    assert_eq!(count(host_a), 1);
    assert!(
        selections("miss") > misses,
        "the first read selects its series"
    );
    assert_eq!(count(host_a), 1);
    assert!(
        selections("hit") > hits,
        "the same read again is answered from the cache"
    );

    // A new series of host a, not flushed yet: the read sees it.
    write(2, &[(3, "cpu", "cpu,host=a")]);
    assert_eq!(count(host_a), 2, "a series new since the cached selection");
    assert_eq!(count(host_a), 2);

    // A known series written again adds no `_series` row: still cached, still right.
    let hits = selections("hit");
    write(3, &[(1, "cpu", "cpu,host=a")]);
    assert_eq!(count(host_a), 3);
    assert!(
        selections("hit") > hits,
        "a point of a known series keeps the selection"
    );

    // Nothing selected: the empty set, cached too, and no statement to
    // run (empty_selection.rs): no rows, where the engine would answer a
    // count of 0 (routers read both as no points).
    let none = host_a.replace("'a'", "'zzz'");
    for _ in 0..2 {
        let skipped = READS_OF_NO_SERIES_TOTAL.get();
        let rows = e.query_planned(shard, "db", &none).expect("no series");
        assert_eq!(rows.iter().map(|b| b.num_rows()).sum::<usize>(), 0);
        assert_eq!(READS_OF_NO_SERIES_TOTAL.get(), skipped + 1);
    }
    assert_eq!(scalar(&e.query(shard, "db", &none).expect("user sql")), 0);
    // A selection of no series beside an OR still runs, and reads right.
    let either = format!("{none} OR series_id = 2");
    assert_eq!(count(&either), 1, "host b's point, through the OR");
    write(4, &[(4, "cpu", "cpu,host=zzz")]);
    assert_eq!(
        count(&none),
        1,
        "the first series of a selection that was empty"
    );

    // DROP SERIES removes the series: the cached ids must not bring them back.
    let applied = e.apply_op(shard, 5, &drop_cpu_series());
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
    assert_eq!(count(host_a), 0, "dropped series read as gone");
    write(6, &[(1, "cpu", "cpu,host=a")]);
    assert_eq!(count(host_a), 1, "a series written again after the drop");
    // The unplanned path (user SQL) answers the same.
    assert_eq!(scalar(&e.query(shard, "db", host_a).expect("user sql")), 1);
}

#[test]
fn tag_index_answers_follow_new_series_and_drops() {
    let e = engine();
    let shard = 92;
    let write = |index: u64, rows: &[(u64, &str, &str)]| apply_cpu_series(e, shard, index, rows);
    let answers = |result: &str| TAG_INDEX_ANSWERS_TOTAL.with_label_values(&[result]).get();
    // What a `GROUP BY host` panel asks beside its facts (sqlgen::series_sql).
    let hosts = "SELECT series_id, tags['host'] AS host FROM _series \
        WHERE measurement = 'cpu' AND (match(tags['host'], '^[ab]')) ORDER BY series_id";
    let read = |sql: &str| {
        let rows = e.query_planned(shard, "db", sql).expect(sql);
        (col_strings(&rows, 0), col_strings(&rows, 1))
    };
    let ids = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>();

    write(
        1,
        &[
            (1, "cpu", "cpu,host=a"),
            (2, "cpu", "cpu,host=b"),
            (3, "cpu", "cpu,host=c"),
        ],
    );
    let misses = answers("miss");
    assert_eq!(read(hosts), (ids(&[1, 2]), vec!["a".into(), "b".into()]));
    assert!(answers("miss") > misses, "the first read runs");
    let hits = answers("hit");
    assert_eq!(read(hosts).0, ids(&[1, 2]));
    assert!(answers("hit") > hits, "the same read again is remembered");

    // A new series, buffered: the next read sees it, and so do later ones.
    write(2, &[(4, "cpu", "cpu,host=b2")]);
    assert_eq!(
        read(hosts).0,
        ids(&[1, 2, 4]),
        "a series new since the answer"
    );
    assert_eq!(read(hosts).0, ids(&[1, 2, 4]));
    // Points of known series add no `_series` row: still remembered.
    let hits = answers("hit");
    write(3, &[(1, "cpu", "cpu,host=a")]);
    assert_eq!(read(hosts).0, ids(&[1, 2, 4]));
    assert!(
        answers("hit") > hits,
        "a point of a known series keeps the answer"
    );

    // DROP SERIES: the remembered answer must not bring them back.
    let applied = e.apply_op(shard, 4, &drop_cpu_series());
    assert!(matches!(applied, Ok(Applied::Stored)), "{applied:?}");
    assert_eq!(
        read(hosts).0,
        Vec::<String>::new(),
        "dropped series read as gone"
    );
    write(5, &[(2, "cpu", "cpu,host=b")]);
    assert_eq!(
        read(hosts).0,
        ids(&[2]),
        "a series written again after the drop"
    );
    // User SQL, and a statement that also reads facts, are never remembered.
    let hits = answers("hit");
    let user = e.query(shard, "db", hosts).expect("user sql");
    assert_eq!(col_strings(&user, 0), ids(&[2]));
    let both = "SELECT count() FROM cpu FINAL WHERE series_id IN (SELECT series_id FROM _series)";
    for _ in 0..2 {
        assert_eq!(scalar(&e.query_planned(shard, "db", both).expect(both)), 1);
    }
    assert_eq!(
        answers("hit"),
        hits,
        "only planned reads of the tag index alone"
    );
}
