//! Users' queries on the real chDB engine: read-only, one statement, no
//! function that reaches outside the shard, times in UTC whatever the
//! machine's zone. Each refusal here was a working escape on chDB 26.9 with
//! `readonly = 1` alone, or before it.

use std::sync::OnceLock;
use std::time::Duration;

use shardhouse_engine::testdata::{encode_points, FieldValue, PointRow};
use shardhouse_engine::{Engine, EngineConfig, EngineError};
use shardhouse_test_support::arrow::col_strings;
use shardhouse_test_support::chdb_dir;

const SHARD: u32 = 1;

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        // The machine's zone must not leak into results.
        std::env::set_var("TZ", "America/New_York");
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let e = Engine::open(EngineConfig {
            data_dir: dir,
            chdb_dir: Some(chdb_dir().unwrap()),
            pool_size: 2,
            flush_max_rows: 1_000,
            flush_max_age: Duration::from_millis(50),
            ..Default::default()
        })
        .expect("open engine");
        let rows = [PointRow::new(1, 1_700_000_000_123_456_789).field("v", FieldValue::Float(1.0))];
        e.apply(
            SHARD,
            1,
            "db",
            "cpu",
            &encode_points("cpu", &rows).unwrap(),
            &[],
        )
        .unwrap();
        let odd = [PointRow::new(2, 5).field("v", FieldValue::Float(2.0))];
        e.apply(
            SHARD,
            2,
            "db",
            "a;b",
            &encode_points("a;b", &odd).unwrap(),
            &[],
        )
        .unwrap();
        e
    })
}

fn refused(sql: &str) -> String {
    match engine().query(SHARD, "db", sql) {
        Err(e @ (EngineError::QueryRefused(_) | EngineError::InvalidQuery(_))) => e.to_string(),
        other => panic!("{sql:?} must be refused, got {other:?}"),
    }
}

#[test]
fn functions_that_reach_outside_the_shard_are_refused() {
    for sql in [
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "SELECT file('/etc/passwd')",
        "SELECT FILE('/etc/passwd')",
        "SELECT * FROM url('http://127.0.0.1:1/health', 'JSONAsString')",
        "SELECT * FROM executable('id', 'TSV', 'x String')",
        "SELECT * FROM s3('http://127.0.0.1:1/b/k', 'CSV')",
        "SELECT * FROM remote('127.0.0.1', system.one)",
        "SELECT * FROM mysql('127.0.0.1:1', 'a', 'b', 'c', 'd')",
        "SELECT * FROM merge('shard_0002', '.*')",
        "SELECT v FROM cpu WHERE v IN (SELECT toFloat64(length(file('/etc/passwd'))))",
    ] {
        let msg = refused(sql);
        assert!(msg.contains("not allowed"), "{sql}: {msg}");
        // The node's data path never shows in the answer.
        assert!(!msg.contains("/tmp/"), "{sql}: {msg}");
    }
}

#[test]
fn only_one_select_runs_and_it_writes_nothing() {
    let out = std::env::temp_dir().join(format!("shardhouse-outfile-{}", std::process::id()));
    for sql in [
        "SELECT 1; SELECT 2".to_string(),
        "SELECT 1 -- c\n; SELECT file('/etc/passwd')".to_string(),
        "INSERT INTO cpu (time, series_id, v) VALUES (now(), 9, 9)".to_string(),
        "DROP TABLE cpu".to_string(),
        "SET max_threads = 1".to_string(),
        "SELECT 1 SETTINGS max_threads = 1".to_string(),
        "SELECT 1 SETTINGS max_threads = 3".to_string(),
        "SELECT x FROM (SELECT 1 AS x SETTINGS max_threads = 1)".to_string(),
        "SYSTEM FLUSH LOGS".to_string(),
        "CREATE TABLE x (a Int8) ENGINE = Memory".to_string(),
        format!("SELECT 1 INTO OUTFILE '{}'", out.display()),
        "SELECT 1 FORMAT JSON".to_string(),
        "".to_string(),
    ] {
        refused(&sql);
    }
    assert!(!out.exists(), "INTO OUTFILE wrote {}", out.display());
    let r = engine()
        .query(SHARD, "db", "SELECT count() FROM cpu")
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1"], "nothing was inserted");
}

#[test]
fn selects_the_old_check_refused_now_run() {
    let e = engine();
    let r = e
        .query(SHARD, "db", "WITH x AS (SELECT 1 AS n) SELECT n FROM x")
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1"]);
    let r = e.query(SHARD, "db", "SELECT 'a;b'").unwrap();
    assert_eq!(col_strings(&r, 0), ["a;b"]);
    // A measurement whose name holds `;` is queryable.
    let r = e.query(SHARD, "db", "SELECT v FROM `a;b` FINAL").unwrap();
    assert_eq!(col_strings(&r, 0), ["2.0"]);
    let r = e
        .query(
            SHARD,
            "db",
            "SELECT count() FROM cpu UNION ALL SELECT count() FROM `a;b`;",
        )
        .unwrap();
    assert_eq!(col_strings(&r, 0).len(), 2);
}

#[test]
fn times_come_back_in_utc_whatever_the_machine_zone() {
    let r = engine()
        .query(
            SHARD,
            "db",
            "SELECT time, toString(time) AS s, toHour(time) AS h FROM cpu",
        )
        .unwrap();
    // The instant is exact whatever zone label chDB gives the column (the
    // router renders every label as UTC), and the session's functions
    // compute in UTC, not in the machine's zone (set to New York above).
    let col = r[0].column(0);
    let arrow_schema::DataType::Timestamp(arrow_schema::TimeUnit::Nanosecond, _) = col.data_type()
    else {
        panic!("time is {}", col.data_type())
    };
    let t = col
        .as_any()
        .downcast_ref::<arrow_array::TimestampNanosecondArray>()
        .expect("nanosecond timestamps");
    assert_eq!(t.value(0), 1_700_000_000_123_456_789);
    assert_eq!(col_strings(&r, 1), ["2023-11-14 22:13:20.123456789"]);
    assert_eq!(col_strings(&r, 2), ["22"]);
}

#[test]
fn reader_connections_are_read_only_and_utc() {
    let r = engine()
        .query(SHARD, "db", "SELECT toString(getSetting('readonly')), toString(getSetting('session_timezone')), timezone()")
        .unwrap();
    assert_eq!(col_strings(&r, 0), ["1"]);
    assert_eq!(col_strings(&r, 1), ["UTC"]);
}
