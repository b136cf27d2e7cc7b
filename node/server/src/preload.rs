//! Loads the chDB shared object with `RTLD_DEEPBIND` before the engine
//! opens it.
//!
//! The node links RocksDB, which brings libstdc++ into the global symbol
//! scope. chDB carries its own C++ runtime and allocator; loaded normally,
//! some of its C++ runtime symbols bind to libstdc++'s instead and its static
//! initialisers abort with `free(): invalid pointer`. DEEPBIND makes the
//! library prefer its own definitions. The engine's later `dlopen` of the
//! same path gets this already-initialised copy.

use crate::error::{NodeError, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn dlopen(path: &Path, flags: libc::c_int) -> Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| NodeError::InvalidOptions(format!("path {} contains NUL", path.display())))?;
    // SAFETY: loading a shared object runs its initialisers, which is what
    // the engine does anyway; the handle is kept for the process's life.
    let handle = unsafe { libc::dlopen(c.as_ptr(), flags) };
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or NULL.
        let err = unsafe {
            let e = libc::dlerror();
            if e.is_null() {
                "unknown error".to_owned()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(NodeError::Serve(format!(
            "cannot load {}: {err}; check --chdb-dir / SHARDHOUSE_CHDB_DIR",
            path.display()
        )));
    }
    Ok(())
}

/// Preloads libpython (global, as the engine does) and chDB (deep-bound).
/// A missing engine is left to `Engine::open`, which reports it clearly.
pub fn preload_chdb(chdb_dir: Option<&Path>) -> Result<()> {
    let dir = shardhouse_engine::loader::resolve_chdb_dir(chdb_dir);
    let so = shardhouse_engine::loader::driver_path(&dir);
    if !so.is_file() {
        return Ok(());
    }
    let libpython = shardhouse_engine::loader::find_libpython()?;
    dlopen(&libpython, libc::RTLD_LAZY | libc::RTLD_GLOBAL)?;
    dlopen(
        &so,
        libc::RTLD_LAZY | libc::RTLD_LOCAL | libc::RTLD_DEEPBIND,
    )?;
    tracing::info!(chdb = %so.display(), "chDB preloaded with RTLD_DEEPBIND");
    Ok(())
}
