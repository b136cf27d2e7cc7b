//! Stages 1 and 2 of a write on their own: admission against the in-flight
//! budget and the split of a body into shard batches (stages 3 and 4 are
//! tested in `cluster/stages_tests.rs`).

use super::*;
use crate::write::batch::RejectReason;
use crate::write::cardinality::Cardinality;

const RETRY_AFTER: Duration = Duration::from_secs(3);

fn options(max_inflight_bytes: usize) -> RouterOptions {
    RouterOptions {
        max_inflight_bytes,
        request_timeout_ms: 10_000,
        ..RouterOptions::default()
    }
}

#[test]
fn admit_holds_the_body_bytes_until_dropped_and_refuses_a_full_budget() {
    let opts = options(100);
    let inflight = Arc::new(Semaphore::new(100));
    let first = admit(&opts, &inflight, RETRY_AFTER, "db", 60).unwrap();
    assert_eq!(inflight.available_permits(), 40);
    assert!(first.deadline > Instant::now() + Duration::from_secs(9));
    match admit(&opts, &inflight, RETRY_AFTER, "db", 60) {
        Err(Error::Overloaded(_, after)) => assert_eq!(after, RETRY_AFTER),
        other => panic!("expected Overloaded, got {:?}", other.err()),
    }
    drop(first);
    assert_eq!(inflight.available_permits(), 100);
    // A body larger than the whole budget still goes, alone.
    let big = admit(&opts, &inflight, RETRY_AFTER, "db", 1000).unwrap();
    assert_eq!(inflight.available_permits(), 0);
    drop(big);
}

#[test]
fn admit_refuses_an_invalid_database_name_before_taking_budget() {
    let inflight = Arc::new(Semaphore::new(100));
    match admit(&options(100), &inflight, RETRY_AFTER, "bad/name", 10) {
        Err(Error::BadRequest(_)) => {}
        other => panic!("expected BadRequest, got {:?}", other.err()),
    }
    assert_eq!(inflight.available_permits(), 100);
}

#[test]
fn split_puts_every_good_point_in_a_shard_batch_of_the_database() {
    let body = b"cpu,host=a v=1 10\ncpu,host=b v=2 20\nmem,host=a used=3i 30\nnot a line\n";
    let split = split("v1", "metrics", 4, Precision::Nanosecond, None, None, |b| {
        b.add_line_protocol(body)
    })
    .unwrap();
    assert_eq!(split.summary.points, 3);
    assert_eq!(split.summary.rejected, 1);
    let first = split.summary.first_rejection.as_ref().unwrap();
    assert_eq!(
        (first.position, &first.reason),
        (4, &RejectReason::BadPoint)
    );
    assert_eq!(split.batches.iter().map(|b| b.rows).sum::<usize>(), 3);
    for b in &split.batches {
        assert_eq!(b.database, "metrics");
        assert!(b.shard < 4, "shard {}", b.shard);
        assert!(b.points.num_rows() > 0 && b.series.num_rows() > 0);
    }
    let mut tables: Vec<&str> = split
        .batches
        .iter()
        .map(|b| b.measurement.as_str())
        .collect();
    tables.sort_unstable();
    tables.dedup();
    assert_eq!(tables, ["cpu", "mem"]);
}

#[test]
fn split_rejects_series_over_the_database_limit() {
    let cardinality = Cardinality::new(1);
    let db = cardinality.db("metrics");
    let split = split(
        "v1",
        "metrics",
        4,
        Precision::Nanosecond,
        db.as_deref(),
        None,
        |b| b.add_line_protocol(b"cpu,host=a v=1 10\ncpu,host=b v=2 20\ncpu,host=a v=3 30\n"),
    )
    .unwrap();
    assert_eq!(split.summary.points, 2);
    assert_eq!(split.summary.rejected_for_cardinality, 1);
}
