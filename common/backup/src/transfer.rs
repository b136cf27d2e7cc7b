//! Moving part files between a node's disk and a destination: upload
//! only what the destination lacks (content addressing), download with
//! every size and checksum verified, uploads paced by a [`RateLimit`].
//!
//! To S3, a file that fits in one request is read once (hashed in
//! memory, then sent if the destination lacks it). To a local directory a
//! file is hashed with 1 MiB reads and, if new, copied by the kernel
//! (`std::fs::copy`: copy_file_range, no pass through user memory) to a
//! staging name and renamed; reading whole files into fresh buffers there
//! cost a page fault per 4 KiB and ran at half the restore's rate. A
//! download from a local directory is a plain copy with 1 MiB reads
//! (object_store's local stream reads 8 KiB at a time, each on the
//! blocking pool: a restore ran at a quarter of the disk's rate).

use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tokio::io::AsyncWriteExt;
use xxhash_rust::xxh3::Xxh3;

use crate::dest::{Destination, MULTIPART_BYTES};
use crate::error::{BackupError, Result};
use crate::local::write_durably;
use crate::manifest::{FileEntry, Stats};
use crate::objects::ObjectId;
pub use crate::rate::RateLimit;

/// Read and write size of copies.
const COPY_BUF: usize = 1 << 20;

/// Hashes and uploads files that are not yet in the destination, `jobs`
/// at a time, at most at `limit`'s rate. Returns one entry per file (in
/// order) and the stats.
pub async fn upload_files(
    dest: &Destination,
    files: Vec<PathBuf>,
    jobs: usize,
    limit: Option<&RateLimit>,
) -> Result<(Vec<FileEntry>, Stats)> {
    let results: Vec<(FileEntry, bool)> = futures::stream::iter(files)
        .map(|path| upload_one(dest, path, limit))
        .buffered(jobs.max(1))
        .try_collect()
        .await?;
    let mut stats = Stats::default();
    let entries = results
        .into_iter()
        .map(|(e, uploaded)| {
            stats.files += 1;
            stats.bytes += e.size;
            if uploaded {
                stats.files_uploaded += 1;
                stats.bytes_uploaded += e.size;
            }
            e
        })
        .collect();
    Ok((entries, stats))
}

/// Hashes a file; with `keep`, one that fits in one request is read into
/// memory once and its bytes are returned with its id.
fn hash_file(path: &Path, keep: bool) -> Result<(ObjectId, u64, Option<Bytes>)> {
    let io = |source| BackupError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if !keep || len > MULTIPART_BYTES {
        let (id, size) = ObjectId::of_file(path)?;
        return Ok((id, size, None));
    }
    let bytes = std::fs::read(path).map_err(io)?;
    Ok((ObjectId::of(&bytes), bytes.len() as u64, Some(bytes.into())))
}

async fn upload_one(
    dest: &Destination,
    path: PathBuf,
    limit: Option<&RateLimit>,
) -> Result<(FileEntry, bool)> {
    let p = path.clone();
    let keep = dest.local_path("").is_none();
    let (object, size, bytes) = tokio::task::spawn_blocking(move || hash_file(&p, keep))
        .await
        .map_err(|e| BackupError::Io {
            path: path.clone(),
            source: std::io::Error::other(e),
        })??;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let key = object.key();
    let uploaded = !dest.exists(&key).await?;
    if uploaded {
        match (bytes, dest.local_path(&key)) {
            (_, Some(target)) => {
                if let Some(l) = limit {
                    l.take(size).await;
                }
                let (d, k, p) = (dest.clone(), key.clone(), path.clone());
                tokio::task::spawn_blocking(move || copy_into(&d, &k, &p, &target))
                    .await
                    .map_err(|e| BackupError::Io {
                        path: path.clone(),
                        source: std::io::Error::other(e),
                    })??;
            }
            (Some(b), None) => {
                if let Some(l) = limit {
                    l.take(size).await;
                }
                dest.put(&key, b).await?;
            }
            (None, None) => dest.put_file(&key, &path, size, limit).await?,
        }
    }
    Ok((FileEntry { name, size, object }, uploaded))
}

/// Copies `from` to the local destination's `target` under a staging name
/// (`#` and digits after it: object_store never lists it, so a copy cut
/// short by a crash is not taken for an object), fsyncs it and renames it
/// into place (then fsyncs the directory), so a reader never sees half an
/// object and the manifest, written after, never names one a crash lost.
pub(crate) fn copy_into(dest: &Destination, key: &str, from: &Path, target: &Path) -> Result<()> {
    write_durably(dest.url(), key, target, |staging| {
        std::fs::copy(from, staging)
            .map(|_| ())
            .map_err(|e| (format!("copying {}", from.display()), e))
    })
}

/// Downloads one file to `to`, checking its size and checksum; a damaged
/// object is an error naming it, and nothing is left at `to`.
/// Downloads one file of a manifest into `to`, at most at `limit`'s rate
/// (shared with the other downloads of the restore), and checks its size
/// and checksum.
pub async fn download_file(
    dest: &Destination,
    file: &FileEntry,
    to: &Path,
    limit: Option<&RateLimit>,
) -> Result<()> {
    if let Some(l) = limit {
        l.take(file.size).await;
    }
    let key = file.object.key();
    let bad = |reason: String| BackupError::BadObject {
        url: dest.url().to_string(),
        key: key.clone(),
        file: to.display().to_string(),
        reason,
    };
    let copied = match dest.local_path(&key) {
        Some(from) => {
            let (d, k, t) = (dest.clone(), key.clone(), to.to_path_buf());
            tokio::task::spawn_blocking(move || copy_local(&d, &k, &from, &t))
                .await
                .map_err(|e| BackupError::Io {
                    path: to.to_path_buf(),
                    source: std::io::Error::other(e),
                })?
        }
        None => download_stream(dest, &key, to).await,
    };
    let (size, digest) = match copied {
        Ok(r) => r,
        Err(e) => {
            let _ = tokio::fs::remove_file(to).await;
            return Err(e);
        }
    };
    let actual = format!("{digest:032x}");
    let problem = if size != file.size {
        Some(format!("{size} bytes, the manifest says {}", file.size))
    } else if actual != file.object.as_str() {
        Some(format!(
            "checksum {actual}, the manifest says {}",
            file.object
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(p) => {
            let _ = tokio::fs::remove_file(to).await;
            Err(bad(p))
        }
    }
}

/// Copies an object of a local destination to `to`, hashing it; returns
/// its size and XXH3-128.
fn copy_local(dest: &Destination, key: &str, from: &Path, to: &Path) -> Result<(u64, u128)> {
    use std::io::{Read, Write};
    let mut src = match std::fs::File::open(from) {
        Ok(f) => f,
        Err(e) => {
            return Err(BackupError::Store {
                url: dest.url().to_string(),
                op: "GET",
                key: key.to_string(),
                message: e.to_string(),
            })
        }
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io { path, source }
    };
    let mut out = std::fs::File::create(to).map_err(io(to))?;
    let mut buf = vec![0u8; COPY_BUF];
    let mut h = Xxh3::new();
    let mut size = 0u64;
    loop {
        let n = src.read(&mut buf).map_err(io(from))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
        out.write_all(&buf[..n]).map_err(io(to))?;
    }
    Ok((size, h.digest128()))
}

/// Streams an object to `to` through a 1 MiB buffer, hashing it.
async fn download_stream(dest: &Destination, key: &str, to: &Path) -> Result<(u64, u128)> {
    let io = |source| BackupError::Io {
        path: to.to_path_buf(),
        source,
    };
    let file = tokio::fs::File::create(to).await.map_err(io)?;
    let mut out = tokio::io::BufWriter::with_capacity(COPY_BUF, file);
    let mut stream = dest.get_stream(key).await?;
    let mut h = Xxh3::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        h.update(&chunk);
        size += chunk.len() as u64;
        out.write_all(&chunk).await.map_err(io)?;
    }
    out.flush().await.map_err(io)?;
    Ok((size, h.digest128()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_upload_of_the_same_files_uploads_nothing_and_damage_is_named() {
        let src = tempfile::tempdir().unwrap();
        let store = tempfile::tempdir().unwrap();
        let dest = Destination::open(store.path().to_str().unwrap()).unwrap();
        let mut files = Vec::new();
        for (i, content) in ["alpha", "beta", "alpha"].iter().enumerate() {
            let p = src.path().join(format!("f{i}"));
            std::fs::write(&p, content).unwrap();
            files.push(p);
        }
        let (entries, s1) = upload_files(&dest, files.clone(), 4, None).await.unwrap();
        assert_eq!((s1.files, s1.bytes), (3, 14));
        // "alpha" twice in one batch may race to upload: at most 3, at least 2.
        assert!((2..=3).contains(&s1.files_uploaded), "{s1:?}");
        let limit = RateLimit::new(1 << 30).unwrap();
        let (_, s2) = upload_files(&dest, files, 4, Some(&limit)).await.unwrap();
        assert_eq!((s2.files, s2.files_uploaded, s2.bytes_uploaded), (3, 0, 0));

        let to = src.path().join("back");
        download_file(&dest, &entries[1], &to, Some(&limit))
            .await
            .unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"beta");
        // Tamper with the stored object: the download names it and keeps nothing.
        let obj = store.path().join(entries[1].object.key());
        std::fs::write(&obj, "betA").unwrap();
        let e = download_file(&dest, &entries[1], &to, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&entries[1].object.key()) && e.contains("checksum"),
            "{e}"
        );
        assert!(!to.exists());
        std::fs::write(&obj, "bet").unwrap();
        let e = download_file(&dest, &entries[1], &to, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 bytes, the manifest says 4"), "{e}");
        // A missing object is an error naming it, and nothing is left at `to`.
        std::fs::remove_file(&obj).unwrap();
        let e = download_file(&dest, &entries[1], &to, None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains(&entries[1].object.key()), "{e}");
        assert!(!to.exists());
    }
}
