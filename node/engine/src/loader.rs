//! Finding and loading the chDB engine (chdb-core's ADBC driver) and libpython.
//!
//! chdb-core ships the engine as a CPython extension module whose only C entry
//! point is an ADBC driver. The module references ~120 CPython symbols; they
//! resolve from libpython loaded with RTLD_GLOBAL, without ever starting an
//! interpreter.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use adbc_core::options::AdbcVersion;
use adbc_driver_manager::ManagedDriver;

use crate::error::{EngineError, Result};

/// Where the engine is looked for when neither config nor env names it: the
/// project-local install made by `make deps` (scripts/install-deps.sh).
pub const DEFAULT_CHDB_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../.deps/chdb");

/// The engine's shared object inside a chdb-core install.
pub fn driver_path(chdb_dir: &Path) -> PathBuf {
    chdb_dir.join("chdb").join("_chdb.abi3.so")
}

/// Config wins, then `SHARDHOUSE_CHDB_DIR`, then `.deps/chdb` of the project.
pub fn resolve_chdb_dir(configured: Option<&Path>) -> PathBuf {
    if let Some(p) = configured {
        return p.to_path_buf();
    }
    match std::env::var_os("SHARDHOUSE_CHDB_DIR") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_CHDB_DIR),
    }
}

/// `SHARDHOUSE_LIBPYTHON` wins; otherwise ask python3's sysconfig.
pub fn find_libpython() -> Result<PathBuf> {
    if let Some(v) = std::env::var_os("SHARDHOUSE_LIBPYTHON") {
        let p = PathBuf::from(v);
        if p.is_file() {
            return Ok(p);
        }
        return Err(EngineError::LibPythonNotFound {
            reason: format!("SHARDHOUSE_LIBPYTHON={} is not a file", p.display()),
        });
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import sysconfig, os; print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', sysconfig.get_config_var('LDLIBRARY') or ''))",
        ])
        .output()
        .map_err(|e| EngineError::LibPythonNotFound {
            reason: format!("cannot run python3: {e}"),
        })?;
    if !out.status.success() {
        return Err(EngineError::LibPythonNotFound {
            reason: format!(
                "python3 sysconfig failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    // A static python reports libpython3.x.a, which cannot be dlopen'd.
    let is_shared = p
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.contains(".so"));
    if !is_shared || !p.is_file() {
        return Err(EngineError::LibPythonNotFound {
            reason: format!(
                "python3 reports {} which is not a shared library",
                p.display()
            ),
        });
    }
    Ok(p)
}

struct Loaded {
    chdb_dir: PathBuf,
    driver: ManagedDriver,
    // Kept alive for the life of the process: the driver's symbols point into it.
    _libpython: libloading::os::unix::Library,
}

static LOADED: OnceLock<Loaded> = OnceLock::new();

/// Loads libpython and the driver once per process and returns the driver.
///
/// The first successful call fixes the engine directory for the process; a
/// later call naming another directory still gets the loaded driver (two
/// copies of the engine cannot live in one process).
pub fn load_driver(chdb_dir: &Path) -> Result<ManagedDriver> {
    let so = driver_path(chdb_dir);
    if !so.is_file() {
        return Err(EngineError::EngineNotFound {
            path: chdb_dir.to_path_buf(),
        });
    }
    // A failed load is not cached so the caller can fix the path and retry;
    // racing first loads are serialized by this lock.
    static LOAD_LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _guard = LOAD_LOCK.lock();
    if let Some(l) = LOADED.get() {
        if l.chdb_dir != chdb_dir {
            tracing::warn!(loaded = %l.chdb_dir.display(), requested = %chdb_dir.display(),
                "chDB engine already loaded from another directory; using the loaded one");
        }
        return Ok(l.driver.clone());
    }
    let libpython_path = find_libpython()?;
    // SAFETY: loading libpython runs no Python code (no interpreter is
    // started); RTLD_GLOBAL makes its symbols visible to the driver.
    let libpython = unsafe {
        libloading::os::unix::Library::open(
            Some(&libpython_path),
            libloading::os::unix::RTLD_LAZY | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .map_err(|e| EngineError::LibPythonNotFound {
        reason: format!("dlopen {}: {e}", libpython_path.display()),
    })?;
    let driver =
        ManagedDriver::load_dynamic_from_filename(&so, Some(b"AdbcDriverInit"), AdbcVersion::V110)
            .map_err(|e| EngineError::EngineBroken {
                path: chdb_dir.to_path_buf(),
                reason: e.message,
            })?;
    tracing::info!(chdb_dir = %chdb_dir.display(), libpython = %libpython_path.display(), "chDB engine loaded");
    let _ = LOADED.set(Loaded {
        chdb_dir: chdb_dir.to_path_buf(),
        driver: driver.clone(),
        _libpython: libpython,
    });
    Ok(driver)
}
