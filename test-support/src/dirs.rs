//! Where tests keep their data and find the embedded engine.

use std::path::PathBuf;

use anyhow::{bail, Result};

/// A fresh directory, removed on drop; `prefix` tells which test left it
/// when one is kept around.
pub fn temp_dir(prefix: &str) -> Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new().prefix(prefix).tempdir()?)
}

/// The repository root (this crate sits one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The chDB engine nodes load: `$SHARDHOUSE_CHDB_DIR`, else `.deps/chdb`
/// of the repository. Missing, it is an error (tests fail, never skip).
pub fn chdb_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("SHARDHOUSE_CHDB_DIR") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => workspace_root().join(".deps/chdb"),
    };
    if !dir.join("chdb/_chdb.abi3.so").exists() {
        bail!(
            "chDB engine not found at {} (chdb/_chdb.abi3.so): run `make deps` or set SHARDHOUSE_CHDB_DIR",
            dir.display()
        );
    }
    Ok(dir)
}
