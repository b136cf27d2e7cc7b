use super::*;

const S: i64 = 1_000_000_000;

fn create(text: &str) -> shardhouse_influxql::CreateContinuousQuery {
    match shardhouse_influxql::parse_statement(text).unwrap() {
        Statement::CreateContinuousQuery(c) => c,
        other => panic!("{other:?}"),
    }
}

#[test]
fn definitions_are_stored_qualified_as_influxdb_shows_them() {
    let cq = define(
        &create(r#"CREATE CONTINUOUS QUERY "cq1" ON db0 BEGIN SELECT count(value) INTO "rp1".:MEASUREMENT FROM /[cg]pu/ GROUP BY time(5s) END"#),
        "rp0",
    )
    .unwrap();
    assert_eq!(
        cq.query,
        "CREATE CONTINUOUS QUERY cq1 ON db0 BEGIN SELECT count(value) INTO db0.rp1.:MEASUREMENT FROM db0.rp0./[cg]pu/ GROUP BY time(5s) END"
    );
    assert_eq!(
        (cq.interval_ns, cq.every_ns, cq.for_ns),
        (5 * S, 5 * S, 5 * S)
    );
    let cq2 = define(
        &create(r#"CREATE CONTINUOUS QUERY "cq2" ON db0 BEGIN SELECT count(value) INTO "rp2".:MEASUREMENT FROM /[cg]pu/ GROUP BY time(5s), * END"#),
        "rp0",
    )
    .unwrap();
    assert!(
        cq2.query.ends_with("GROUP BY time(5s), * END"),
        "{}",
        cq2.query
    );
    // The stored text parses back to the same select.
    assert_eq!(define(&create(&cq.query), "other").unwrap(), cq);
}

#[test]
fn a_cq_needs_into_and_group_by_time() {
    let no_into =
        create("CREATE CONTINUOUS QUERY c ON db BEGIN SELECT mean(v) FROM m GROUP BY time(1m) END");
    assert_eq!(define(&no_into, "autogen"), Err(CqError::NoInto));
    let no_time = create("CREATE CONTINUOUS QUERY c ON db BEGIN SELECT mean(v) INTO x FROM m END");
    assert_eq!(define(&no_time, "autogen"), Err(CqError::NoGroupByTime));
    let short_for = create("CREATE CONTINUOUS QUERY c ON db RESAMPLE FOR 30s BEGIN SELECT mean(v) INTO x FROM m GROUP BY time(1m) END");
    assert!(matches!(
        define(&short_for, "autogen"),
        Err(CqError::Invalid(_))
    ));
}

fn cq(interval: i64, every: i64, for_ns: i64) -> ContinuousQuery {
    ContinuousQuery {
        name: "c".into(),
        database: "db".into(),
        query: String::new(),
        interval_ns: interval,
        offset_ns: 0,
        every_ns: every,
        for_ns,
    }
}

#[test]
fn each_interval_runs_once_at_its_end() {
    let q = cq(60 * S, 60 * S, 60 * S);
    // First run: the interval that ended last.
    let w = due(&q, None, 125 * S).unwrap();
    assert_eq!((w.start, w.end), (60 * S, 120 * S));
    // Done: nothing until the next boundary.
    assert_eq!(due(&q, Some(120 * S), 179 * S), None);
    let w = due(&q, Some(120 * S), 180 * S).unwrap();
    assert_eq!((w.start, w.end), (120 * S, 180 * S));
}

#[test]
fn missed_intervals_are_caught_up_from_the_record() {
    let q = cq(60 * S, 60 * S, 60 * S);
    // Down from 120s to 400s: the next run covers every missed interval.
    let w = due(&q, Some(120 * S), 400 * S).unwrap();
    assert_eq!((w.start, w.end), (120 * S, 360 * S));
    // Far too long down: at most MAX_CATCH_UP_WINDOWS intervals.
    let w = due(&q, Some(0), 10_000_000 * S).unwrap();
    assert_eq!(w.end - w.start, MAX_CATCH_UP_WINDOWS * 60 * S);
}

#[test]
fn resample_every_and_for_widen_and_repeat_the_window() {
    // Every 30s, over the last 2 minutes, in 1-minute buckets.
    let q = cq(60 * S, 30 * S, 120 * S);
    let w = due(&q, None, 200 * S).unwrap();
    assert_eq!((w.start, w.end), (60 * S, 180 * S));
    // At 210s the EVERY boundary is 210s, whose last bucket end is 180s:
    // already done.
    assert_eq!(due(&q, Some(180 * S), 215 * S), None);
    let w = due(&q, Some(180 * S), 240 * S).unwrap();
    assert_eq!((w.start, w.end), (120 * S, 240 * S));
}

#[test]
fn a_window_bounds_the_select() {
    let c = create("CREATE CONTINUOUS QUERY c ON db BEGIN SELECT mean(v) INTO x FROM m WHERE host = 'a' GROUP BY time(1m) END");
    let stmt = window_statement(
        &c.select,
        Window {
            start: 60,
            end: 120,
        },
    );
    assert_eq!(
        stmt.condition.unwrap().to_string(),
        "host = 'a' AND (time >= 60 AND time < 120)"
    );
}
