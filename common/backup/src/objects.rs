//! Content addressing: an object's id is the XXH3-128 of its bytes.
//!
//! XXH3-128 detects corruption and truncation (and, with 128 bits, never
//! confuses two different parts in practice) at memory speed, so hashing
//! does not bound the backup's rate. It is not a signature: whoever can
//! rewrite the bucket can rewrite a manifest too.

use std::fmt;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use crate::error::{BackupError, Result};

/// 32 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ObjectId(String);

impl ObjectId {
    pub fn of(bytes: &[u8]) -> ObjectId {
        ObjectId::from_u128(xxhash_rust::xxh3::xxh3_128(bytes))
    }

    fn from_u128(h: u128) -> ObjectId {
        ObjectId(format!("{h:032x}"))
    }

    /// Hashes a file as a stream; returns its id and size.
    pub fn of_file(path: &Path) -> Result<(ObjectId, u64)> {
        let io = |source| BackupError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let mut h = Xxh3::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = f.read(&mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
            size += n as u64;
        }
        Ok((ObjectId::from_u128(h.digest128()), size))
    }

    /// Key of the object under the destination's prefix: two levels keep
    /// a local directory's listings short.
    pub fn key(&self) -> String {
        format!("objects/{}/{}", &self.0[..2], self.0)
    }

    /// The id of an object key, if it is one.
    pub fn from_key(key: &str) -> Option<ObjectId> {
        let name = key.rsplit('/').next()?;
        ObjectId::try_from(name.to_string()).ok()
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ObjectId {
    type Error = BackupError;

    fn try_from(s: String) -> Result<ObjectId> {
        let ok = s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(ObjectId(s))
        } else {
            Err(BackupError::BadName {
                name: s,
                reason: "an object id is 32 lowercase hex digits (XXH3-128)".into(),
            })
        }
    }
}

impl From<ObjectId> for String {
    fn from(id: ObjectId) -> String {
        id.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_content_only() {
        let a = ObjectId::of(b"part bytes");
        assert_eq!(a, ObjectId::of(b"part bytes"));
        assert_ne!(a, ObjectId::of(b"part bytez"));
        assert_eq!(a.key(), format!("objects/{}/{a}", &a.as_str()[..2]));
        assert_eq!(ObjectId::from_key(&a.key()), Some(a.clone()));
        assert_eq!(ObjectId::from_key("backups/x.manifest"), None);
    }

    #[test]
    fn a_file_hashes_like_its_bytes() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &bytes).unwrap();
        assert_eq!(
            ObjectId::of_file(&p).unwrap(),
            (ObjectId::of(&bytes), 3_000_000)
        );
        assert!(ObjectId::of_file(&d.path().join("none")).is_err());
    }

    #[test]
    fn ids_are_checked() {
        for bad in [
            "",
            "../../etc/passwd",
            "A".repeat(32).as_str(),
            "a".repeat(31).as_str(),
        ] {
            assert!(ObjectId::try_from(bad.to_string()).is_err(), "{bad:?}");
        }
        let id: ObjectId = serde_json::from_str(&format!("\"{}\"", "0".repeat(32))).unwrap();
        assert_eq!(id.as_str(), "0".repeat(32));
        assert!(serde_json::from_str::<ObjectId>("\"zz\"").is_err());
    }
}
