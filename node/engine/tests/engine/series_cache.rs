//! Planned reads answer their series selections from the series cache
//! (series_cache.rs) only while the tag index stays as it was: a new
//! series, a series written again, a drop and a selection of no series each read
//! right.

use shardhouse_engine::metrics::SERIES_SELECTIONS_TOTAL;
use shardhouse_engine::Applied;

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
    let count = |sql: &str| scalar(&e.query_planned(shard, "db", sql).expect(sql));

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

    // Nothing selected: the empty set, cached too.
    let none = host_a.replace("'a'", "'zzz'");
    assert_eq!(count(&none), 0);
    assert_eq!(count(&none), 0);
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
