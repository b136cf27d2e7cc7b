//! The manifest: what a backup holds. JSON, then a trailer line with the
//! XXH3-128 of the JSON bytes, so a truncated or edited manifest is
//! refused rather than half-restored.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::{BackupError, Result};
use crate::objects::ObjectId;

/// Format version of [`Manifest`].
pub const FORMAT: u32 = 1;

const TRAILER: &str = "\n#xxh3-128 ";

/// Key of a backup's manifest under the destination's prefix.
pub fn manifest_key(id: &str) -> String {
    format!("backups/{id}.manifest")
}

/// The backup id of a manifest key.
pub fn id_of_key(key: &str) -> Option<&str> {
    key.rsplit('/').next()?.strip_suffix(".manifest")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub id: String,
    /// Name of the source cluster (`--cluster`).
    pub cluster: String,
    /// Unix milliseconds: when the backup started and when its last shard
    /// was stored.
    pub started_ms: u64,
    pub finished_ms: u64,
    pub shard_count: u32,
    pub replication_factor: u32,
    /// The source cluster's shard map (JSON), for the record.
    pub shard_map: serde_json::Value,
    pub shards: Vec<ShardManifest>,
    pub stats: Stats,
}

/// Bytes and files of a backup (or of one shard's part of it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub files: u64,
    pub bytes: u64,
    /// Of which were uploaded (not already in the destination).
    pub files_uploaded: u64,
    pub bytes_uploaded: u64,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.files += o.files;
        self.bytes += o.bytes;
        self.files_uploaded += o.files_uploaded;
        self.bytes_uploaded += o.bytes_uploaded;
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardManifest {
    pub shard: u32,
    /// Node whose replica was backed up.
    pub node_id: u64,
    /// The shard's Raft commit index when the backup reached it: every
    /// write acknowledged before is at or below it.
    pub commit_index: u64,
    /// Every entry at or below this index is in the parts (>= commit_index);
    /// rows of a few later entries may be there too.
    pub flushed_index: u64,
    pub databases: Vec<DatabaseEntry>,
    pub tables: Vec<TableEntry>,
    pub stats: Stats,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatabaseEntry {
    pub name: String,
    /// ns; 0 = forever, -1 = the node's default.
    pub retention_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableEntry {
    pub database: String,
    pub table: String,
    /// The engine table's UUID on the backed-up replica; empty when
    /// unknown. Part names compare only within one UUID.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// Field columns (name, engine type) of a fact table.
    pub fields: Vec<(String, String)>,
    /// A fact table's sort order (`series-time`, `hour-series-time`): its
    /// parts are sorted by it, so a restore creates the table with it.
    /// Absent in manifests written before orders had names, whose tables
    /// were all `series-time`, and for `_series`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    pub parts: Vec<PartEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartEntry {
    pub name: String,
    /// Rows in the part (its `count.txt`); 0 when unknown (manifests
    /// written before it was recorded).
    #[serde(default)]
    pub rows: u64,
    pub files: Vec<FileEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    pub object: ObjectId,
}

impl Manifest {
    /// Every object the backup names.
    pub fn objects(&self) -> BTreeSet<ObjectId> {
        self.shards
            .iter()
            .flat_map(ShardManifest::objects)
            .collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        let sum = ObjectId::of(&out);
        out.extend_from_slice(format!("{TRAILER}{sum}\n").as_bytes());
        out
    }

    /// Decodes and checks a manifest read from `key` at `url`.
    pub fn decode(url: &str, key: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad = |reason: String| BackupError::BadManifest {
            url: url.to_string(),
            key: key.to_string(),
            reason,
        };
        let text = std::str::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
        let (body, sum) = text.rsplit_once(TRAILER).ok_or_else(|| {
            bad(format!(
                "no checksum trailer: truncated ({} bytes)",
                bytes.len()
            ))
        })?;
        let sum = sum.trim_end();
        let actual = ObjectId::of(body.as_bytes());
        if sum != actual.as_str() {
            return Err(bad(format!(
                "checksum {actual} of its {} bytes differs from the recorded {sum}: truncated or altered",
                body.len()
            )));
        }
        let m: Manifest = serde_json::from_str(body).map_err(|e| bad(e.to_string()))?;
        if m.format != FORMAT {
            return Err(bad(format!(
                "format {} (this release reads {FORMAT})",
                m.format
            )));
        }
        m.check().map_err(bad)?;
        Ok(m)
    }

    /// Structure a restore relies on: one entry per shard `0..shard_count`,
    /// file and part names that stay inside their directory.
    fn check(&self) -> Result<(), String> {
        let shards: Vec<u32> = self.shards.iter().map(|s| s.shard).collect();
        let expected: Vec<u32> = (0..self.shard_count).collect();
        if shards != expected {
            return Err(format!(
                "it names shards {shards:?}, expected 0..{}",
                self.shard_count
            ));
        }
        for s in &self.shards {
            for t in &s.tables {
                for p in &t.parts {
                    plain_name(&p.name)?;
                    for f in &p.files {
                        plain_name(&f.name)?;
                    }
                }
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// The databases the backup holds, sorted.
    pub fn database_names(&self) -> Vec<String> {
        let names: BTreeSet<&str> = self
            .shards
            .iter()
            .flat_map(|s| s.databases.iter().map(|d| d.name.as_str()))
            .chain(
                self.shards
                    .iter()
                    .flat_map(|s| s.tables.iter().map(|t| t.database.as_str())),
            )
            .collect();
        names.into_iter().map(str::to_string).collect()
    }

    /// The backup restricted to one database (`restore --database`): every
    /// shard keeps only that database and its tables (its series catalog
    /// and fact tables); the stats count the files it still names (none of
    /// them "uploaded"). An error naming the backup and the databases it
    /// holds when it holds no `database`.
    pub fn select_database(&self, database: &str) -> std::result::Result<Manifest, String> {
        let names = self.database_names();
        if !names.iter().any(|n| n == database) {
            return Err(format!(
                "backup {} holds no database {database:?} (it holds {names:?})",
                self.id
            ));
        }
        let mut m = self.clone();
        m.stats = Stats::default();
        for s in &mut m.shards {
            s.databases.retain(|d| d.name == database);
            s.tables.retain(|t| t.database == database);
            s.stats = Stats::default();
            for f in s
                .tables
                .iter()
                .flat_map(|t| &t.parts)
                .flat_map(|p| &p.files)
            {
                s.stats.files += 1;
                s.stats.bytes += f.size;
            }
            m.stats.add(&s.stats);
        }
        Ok(m)
    }

    /// Parts the backup names (each restored replica attaches them all).
    pub fn parts(&self) -> u64 {
        self.shards.iter().map(ShardManifest::parts).sum()
    }
}

impl ShardManifest {
    pub fn parts(&self) -> u64 {
        self.tables.iter().map(|t| t.parts.len() as u64).sum()
    }

    pub fn objects(&self) -> impl Iterator<Item = ObjectId> + '_ {
        self.tables
            .iter()
            .flat_map(|t| t.parts.iter())
            .flat_map(|p| p.files.iter())
            .map(|f| f.object.clone())
    }
}

/// A part or file name: one path component.
pub fn plain_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0']);
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?} is not a plain file or part name"))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn file(name: &str, content: &str) -> FileEntry {
        FileEntry {
            name: name.into(),
            size: content.len() as u64,
            object: ObjectId::of(content.as_bytes()),
        }
    }

    pub(crate) fn manifest(id: &str, contents: &[&str]) -> Manifest {
        let files = contents.iter().map(|c| file("data.bin", c)).collect();
        Manifest {
            format: FORMAT,
            id: id.into(),
            cluster: "c".into(),
            started_ms: 1,
            finished_ms: 2,
            shard_count: 1,
            replication_factor: 3,
            shard_map: serde_json::json!({"shard_count": 1}),
            shards: vec![ShardManifest {
                shard: 0,
                node_id: 1,
                commit_index: 10,
                flushed_index: 12,
                databases: vec![DatabaseEntry {
                    name: "db".into(),
                    retention_ns: 0,
                }],
                tables: vec![TableEntry {
                    database: "db".into(),
                    table: "cpu".into(),
                    uuid: "6e1c2f2a-0000-4000-8000-000000000001".into(),
                    fields: vec![("v".into(), "Float64".into())],
                    order: Some("hour-series-time".into()),
                    parts: vec![PartEntry {
                        name: "20261127_1_1_0".into(),
                        rows: 1000,
                        files,
                    }],
                }],
                stats: Stats::default(),
            }],
            stats: Stats::default(),
        }
    }

    #[test]
    fn round_trip() {
        let m = manifest("b1", &["a", "b"]);
        let bytes = m.encode();
        assert_eq!(Manifest::decode("u", "k", &bytes).unwrap(), m);
        assert_eq!(m.objects().len(), 2);
        assert_eq!(id_of_key(&manifest_key("b1")), Some("b1"));
        assert_eq!(id_of_key("backups/b1.tmp"), None);
    }

    #[test]
    fn truncated_or_altered_manifests_are_refused_by_name() {
        let bytes = manifest("b1", &["a"]).encode();
        for cut in [10, bytes.len() / 2, bytes.len() - 5] {
            let e = Manifest::decode("file:///b", "backups/b1.manifest", &bytes[..cut]);
            let msg = e.unwrap_err().to_string();
            assert!(
                msg.contains("backups/b1.manifest") && msg.contains("damaged"),
                "{msg}"
            );
        }
        let text = String::from_utf8(bytes)
            .unwrap()
            .replace("\"cpu\"", "\"cpv\"");
        let msg = Manifest::decode("u", "k", text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("altered"), "{msg}");
    }

    #[test]
    fn one_database_is_selected_with_its_tables_and_bytes() {
        let mut m = manifest("b1", &["a", "bb"]);
        let mut other = m.shards[0].tables[0].clone();
        other.database = "other".into();
        other.parts[0].files = vec![file("data.bin", "cccc")];
        m.shards[0].tables.push(other.clone());
        other.table = "_series".into();
        m.shards[0].tables.push(other);
        m.shards[0].databases.push(DatabaseEntry {
            name: "other".into(),
            retention_ns: -1,
        });
        assert_eq!(m.database_names(), ["db", "other"]);
        assert_eq!(m.parts(), 3);

        let db = m.select_database("db").unwrap();
        let s = &db.shards[0];
        assert_eq!(s.databases.len(), 1);
        assert_eq!(s.databases[0].name, "db");
        assert!(s.tables.iter().all(|t| t.database == "db"));
        assert_eq!((s.stats.files, s.stats.bytes), (2, 3));
        assert_eq!((db.stats.files, db.stats.bytes), (2, 3));

        let other = m.select_database("other").unwrap();
        let tables: Vec<&str> = other.shards[0]
            .tables
            .iter()
            .map(|t| t.table.as_str())
            .collect();
        assert_eq!(tables, ["cpu", "_series"]);
        assert_eq!(other.stats.bytes, 8);
        // Shards stay (a restore needs one entry per shard), even empty.
        assert_eq!(other.shards.len(), m.shards.len());

        let e = m.select_database("nope").unwrap_err();
        assert!(
            e.contains("b1") && e.contains("\"nope\"") && e.contains("[\"db\", \"other\"]"),
            "{e}"
        );
    }

    #[test]
    fn names_that_leave_their_directory_are_refused() {
        let mut m = manifest("b1", &["a"]);
        m.shards[0].tables[0].parts[0].files[0].name = "../../x".into();
        let msg = Manifest::decode("u", "k", &m.encode())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("not a plain"), "{msg}");
        let mut m = manifest("b1", &["a"]);
        m.shard_count = 2;
        let msg = Manifest::decode("u", "k", &m.encode())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("expected 0..2"), "{msg}");
    }
}
