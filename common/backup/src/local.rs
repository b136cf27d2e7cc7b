//! Durable writes into a local-directory destination: staged, fsynced,
//! renamed into place, the directory fsynced.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{BackupError, Result};

/// Writes `target` of the local destination `url` with `write` (to a staging
/// path it is given), fsynced and renamed into place.
pub(crate) fn write_durably(
    url: &str,
    key: &str,
    target: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), (String, std::io::Error)>,
) -> Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let fail = |what: &str, e: std::io::Error| BackupError::Store {
        url: url.to_string(),
        op: "PUT",
        key: key.to_string(),
        message: format!("{what}: {e}"),
    };
    if let Some(dir) = target.parent() {
        std::fs::create_dir_all(dir).map_err(|e| fail("creating its directory", e))?;
    }
    let mut staging = target.as_os_str().to_owned();
    staging.push(format!(
        "#{}{:012}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let staging = PathBuf::from(staging);
    let written = write(&staging)
        .map_err(|(what, e)| fail(&what, e))
        .and_then(|_| {
            std::fs::File::open(&staging)
                .and_then(|f| f.sync_all())
                .map_err(|e| fail("fsync", e))
        })
        .and_then(|_| std::fs::rename(&staging, target).map_err(|e| fail("renaming", e)));
    if written.is_err() {
        let _ = std::fs::remove_file(&staging);
        return written;
    }
    if let Some(dir) = target.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| fail("fsync of its directory", e))?;
    }
    Ok(())
}
