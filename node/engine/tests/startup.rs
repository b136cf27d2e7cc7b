//! Start-up errors, in a process that has not loaded chDB yet.

use shardhouse_engine::{Engine, EngineConfig, EngineError};

#[test]
fn missing_engine_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-chdb-here");
    let err = Engine::open(EngineConfig {
        data_dir: dir.path().join("data"),
        chdb_dir: Some(missing.clone()),
        ..Default::default()
    })
    .err()
    .expect("open must fail");
    assert!(matches!(err, EngineError::EngineNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(&missing.display().to_string()), "{msg}");
    assert!(
        msg.contains("make deps") && msg.contains("SHARDHOUSE_CHDB_DIR"),
        "{msg}"
    );
}

#[test]
fn broken_engine_is_a_clear_error() {
    // Checked in this binary only: here no real engine is ever loaded.
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("chdb");
    std::fs::create_dir_all(fake.join("chdb")).unwrap();
    std::fs::write(fake.join("chdb/_chdb.abi3.so"), b"not an ELF file").unwrap();
    let err = Engine::open(EngineConfig {
        data_dir: dir.path().join("data"),
        chdb_dir: Some(fake.clone()),
        ..Default::default()
    })
    .err()
    .expect("open must fail");
    assert!(matches!(err, EngineError::EngineBroken { .. }), "{err:?}");
    assert!(err.to_string().contains("make deps"), "{err}");
}

#[test]
fn libpython_override_must_exist() {
    // Runs the lookup directly so the process environment stays untouched
    // for the other tests: a child process gets the bad override.
    let exe = std::env::current_exe().unwrap();
    if std::env::var_os("SHARDHOUSE_ENGINE_TEST_LIBPYTHON_CHILD").is_some() {
        let err = shardhouse_engine::loader::find_libpython()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SHARDHOUSE_LIBPYTHON") && err.contains("/nonexistent/libpython.so"),
            "{err}"
        );
        return;
    }
    let status = std::process::Command::new(exe)
        .args(["--exact", "libpython_override_must_exist", "--nocapture"])
        .env("SHARDHOUSE_ENGINE_TEST_LIBPYTHON_CHILD", "1")
        .env("SHARDHOUSE_LIBPYTHON", "/nonexistent/libpython.so")
        .status()
        .unwrap();
    assert!(status.success(), "child check failed");
    // And without an override the real python3 is found.
    let p = shardhouse_engine::loader::find_libpython().unwrap();
    assert!(p.is_file());
    shardhouse_test_support::chdb_dir().unwrap();
}
