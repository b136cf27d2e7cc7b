//! Moving part files between a node's disk and a destination: upload
//! only what the destination lacks (content addressing), download with
//! every size and checksum verified.

use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use tokio::io::AsyncWriteExt;
use xxhash_rust::xxh3::Xxh3;

use crate::dest::Destination;
use crate::error::{BackupError, Result};
use crate::manifest::{FileEntry, Stats};
use crate::objects::ObjectId;

/// Hashes and uploads files that are not yet in the destination, `jobs`
/// at a time. Returns one entry per file (in order) and the stats.
pub async fn upload_files(
    dest: &Destination,
    files: Vec<PathBuf>,
    jobs: usize,
) -> Result<(Vec<FileEntry>, Stats)> {
    let results: Vec<(FileEntry, bool)> = futures::stream::iter(files)
        .map(|path| upload_one(dest, path))
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

async fn upload_one(dest: &Destination, path: PathBuf) -> Result<(FileEntry, bool)> {
    let p = path.clone();
    let (object, size) = tokio::task::spawn_blocking(move || ObjectId::of_file(&p))
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
        dest.put_file(&key, &path, size).await?;
    }
    Ok((FileEntry { name, size, object }, uploaded))
}

/// Downloads one file to `to`, checking its size and checksum; a damaged
/// object is an error naming it, and nothing is left at `to`.
pub async fn download_file(dest: &Destination, file: &FileEntry, to: &Path) -> Result<()> {
    let key = file.object.key();
    let bad = |reason: String| BackupError::BadObject {
        url: dest.url().to_string(),
        key: key.clone(),
        file: to.display().to_string(),
        reason,
    };
    let io = |source| BackupError::Io {
        path: to.to_path_buf(),
        source,
    };
    let mut out = tokio::fs::File::create(to).await.map_err(io)?;
    let mut stream = match dest.get_stream(&key).await {
        Ok(s) => s,
        Err(e) => {
            let _ = tokio::fs::remove_file(to).await;
            return Err(e);
        }
    };
    let mut h = Xxh3::new();
    let mut size = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        h.update(&chunk);
        size += chunk.len() as u64;
        out.write_all(&chunk).await.map_err(io)?;
    }
    out.flush().await.map_err(io)?;
    let actual = format!("{:032x}", h.digest128());
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
            drop(out);
            let _ = tokio::fs::remove_file(to).await;
            Err(bad(p))
        }
    }
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
        let (entries, s1) = upload_files(&dest, files.clone(), 4).await.unwrap();
        assert_eq!((s1.files, s1.bytes), (3, 14));
        // "alpha" twice in one batch may race to upload: at most 3, at least 2.
        assert!((2..=3).contains(&s1.files_uploaded), "{s1:?}");
        let (_, s2) = upload_files(&dest, files, 4).await.unwrap();
        assert_eq!((s2.files, s2.files_uploaded, s2.bytes_uploaded), (3, 0, 0));

        let to = src.path().join("back");
        download_file(&dest, &entries[1], &to).await.unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"beta");
        // Tamper with the stored object: the download names it and keeps nothing.
        let obj = store.path().join(entries[1].object.key());
        std::fs::write(&obj, "betA").unwrap();
        let e = download_file(&dest, &entries[1], &to)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&entries[1].object.key()) && e.contains("checksum"),
            "{e}"
        );
        assert!(!to.exists());
        std::fs::write(&obj, "bet").unwrap();
        let e = download_file(&dest, &entries[1], &to)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("3 bytes, the manifest says 4"), "{e}");
    }
}
