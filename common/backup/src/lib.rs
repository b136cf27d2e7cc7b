//! shardhouse-backup: consistent, incremental backups of a Shardhouse
//! cluster to a local directory or S3-compatible object storage.
//!
//! # Design (docs/operations.md, "Backups")
//!
//! - **The unit is a shard.** One replica of each shard (its leader when
//!   live) takes the shard's backup at one Raft index: it waits for the
//!   shard's read index (the commit index, confirmed by the leader, so
//!   every write acknowledged before the backup started is at or below
//!   it) to be applied, flushes the shard's buffered rows, and freezes
//!   (hardlinks) the engine's immutable parts. The flushed index is then
//!   at or above the read index, so the parts alone hold every entry up
//!   to it: the WAL tail between the two is empty by construction.
//! - **Content-addressed objects.** Every file of every part is stored
//!   once, under the XXH3-128 of its bytes (`objects/ab/<32 hex>`). A part
//!   is immutable, so a part already in the destination is never uploaded
//!   again: a second backup uploads only the parts written since, and a
//!   part merged since only when its sources are not all in the previous
//!   backup ([`merged`]).
//! - **The manifest is written last.** `backups/<id>.manifest` names the
//!   source cluster, its shard map, every shard's indexes, databases,
//!   tables, parts and files with sizes and checksums. It ends with the
//!   checksum of its own bytes, so a truncated or altered manifest is
//!   refused. A backup without a manifest does not exist (its objects are
//!   unnamed until a later backup names them, or retention removes them).
//! - **Restore** reads a manifest into an empty cluster with the same
//!   number of shards (any node count and replication factor): every
//!   replica of each shard downloads the shard's files, checks each size
//!   and checksum, and attaches the parts.
//! - **Retention** keeps the newest N backups and deletes only objects no
//!   kept manifest names ([`retention::plan`]).
//!
//! Pure decisions (manifest encoding, addressing, retention) are plain
//! functions with unit tests; [`dest`] and [`transfer`] are the I/O.

pub mod dest;
pub mod error;
mod local;
pub mod manifest;
pub mod merged;
pub mod objects;
pub mod rate;
pub mod retention;
pub mod transfer;

pub use dest::Destination;
pub use error::{BackupError, Result};
pub use manifest::{
    DatabaseEntry, FileEntry, Manifest, PartEntry, ShardManifest, Stats, TableEntry,
};
pub use objects::ObjectId;
