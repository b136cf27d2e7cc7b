//! Tests that play several processes in turn (a writer killed with
//! SIGKILL, then a reader on the same directory): the test binary runs
//! itself again, filtered to one test, with a role and a directory in the
//! child's environment. chDB is process-global, so a "restart" of the
//! engine is a new process.
//!
//! ```ignore
//! #[test]
//! fn data_survives() {
//!     // writer(dir) kills itself with -9; reader(dir) checks what is left.
//!     roles::writer_then_reader("data_survives", writer, reader);
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

const ROLE: &str = "SHARDHOUSE_ENGINE_TEST_ROLE";
const DIR: &str = "SHARDHOUSE_ENGINE_TEST_DIR";

/// The role and directory [`run_as`] gave this process; `None` in the
/// test's own process.
pub fn role() -> Option<(String, PathBuf)> {
    let role = std::env::var(ROLE).ok()?;
    let dir = std::env::var_os(DIR)?;
    Some((role, PathBuf::from(dir)))
}

/// Runs the test named `test` (exactly) of this test binary in a child
/// process playing `role` in `dir`, with its output shown; its exit status.
pub fn run_as(test: &str, role: &str, dir: &Path) -> ExitStatus {
    Command::new(std::env::current_exe().expect("the test binary's path"))
        .args(["--exact", test, "--nocapture"])
        .env(ROLE, role)
        .env(DIR, dir)
        .status()
        .expect("the test binary runs again as a child")
}

/// The whole two-process test named `test`: in a child, plays its role;
/// in the test's own process, runs `writer` in a child on a new directory
/// (it must die abruptly: kill -9 of itself) and then `reader` in another
/// on the same directory (it must pass).
pub fn writer_then_reader(test: &str, writer: fn(&Path), reader: fn(&Path)) {
    match role() {
        Some((r, dir)) if r == "writer" => return writer(&dir),
        Some((r, dir)) if r == "reader" => return reader(&dir),
        _ => {}
    }
    crate::chdb_dir().expect("the chDB engine for the children");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let st = run_as(test, "writer", dir.path());
    assert!(!st.success(), "the writer must die abruptly, got {st:?}");
    let st = run_as(test, "reader", dir.path());
    assert!(st.success(), "reader checks failed: {st:?}");
}
