//! The crate's one error type: each message names the object or file and
//! says what to do.

use std::path::PathBuf;

pub type Result<T, E = BackupError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("invalid backup destination {url:?}: {reason}")]
    BadDestination { url: String, reason: String },

    #[error("backup destination {url}: {op} {key} failed: {message}; check that the destination is reachable and the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) allow it")]
    Store {
        url: String,
        op: &'static str,
        key: String,
        message: String,
    },

    #[error("backup {id:?} not found at {url}; `shardhouse-ctl backup list --at {url}` lists the backups there")]
    NotFound { url: String, id: String },

    #[error("no backup at {url}")]
    Empty { url: String },

    #[error("manifest {key} at {url} is damaged ({reason}); it cannot be trusted: restore from another backup")]
    BadManifest {
        url: String,
        key: String,
        reason: String,
    },

    #[error("object {key} at {url} (file {file}) is damaged: {reason}; restore from another backup (a later backup uploads the part again if its source still exists)")]
    BadObject {
        url: String,
        key: String,
        file: String,
        reason: String,
    },

    #[error("destination {url} holds backups of cluster {found:?}, not of {expected:?}: use another bucket or prefix per cluster")]
    OtherCluster {
        url: String,
        found: String,
        expected: String,
    },

    #[error("local file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("invalid name {name:?} in the manifest: {reason}")]
    BadName { name: String, reason: String },
}
