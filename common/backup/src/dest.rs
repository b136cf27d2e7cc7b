//! Where backups live: a local directory or an S3-compatible bucket,
//! through `object_store` (its S3 client signs requests; none of it is
//! hand-written here).
//!
//! URLs:
//! - `/abs/dir` or `file:///abs/dir`: a local directory (created if absent);
//! - `s3://bucket[/prefix][?endpoint=URL&region=R&path_style=true|false]`:
//!   credentials, and defaults for region and endpoint, come from the
//!   environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//!   `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT`; in Kubernetes, from
//!   a Secret mapped to those variables). Virtual-host addressing unless
//!   `path_style=true` (MinIO and most self-hosted servers want path style).
//!   Request bodies are sent as `UNSIGNED-PAYLOAD` (the headers are still
//!   signed) unless `sign_payload=true`: signing hashes every byte with
//!   SHA-256 on the node and again on the server, which cost more CPU than
//!   the upload itself (see [`Target`]); the manifest's XXH3-128 of every
//!   object, checked on every download, catches a body damaged on the way.
//!
//! Layout under the prefix: `CLUSTER` (the source cluster's name),
//! `objects/ab/<id>` (content-addressed files), `backups/<id>.manifest`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as Key;
use object_store::{ObjectStore, PutPayload, WriteMultipart};

use crate::error::{BackupError, Result};
use crate::manifest::{self, Manifest};
use crate::rate::RateLimit;

/// Files above this size are uploaded in parts.
pub const MULTIPART_BYTES: u64 = 32 << 20;
/// The size of one part of a multipart upload: object_store's default
/// (5 MiB, S3's minimum) makes a request of every 5 MiB; larger parts
/// mean fewer requests for the same bytes.
const PART_BYTES: usize = 16 << 20;
/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Files transferred at once per node, by default (`--jobs` overrides):
/// a copy to or from a directory is bound by the disk, so a few suffice;
/// each request to S3 also waits for a round trip and the server, which
/// more requests in flight hide.
const LOCAL_JOBS: usize = 4;
const S3_JOBS: usize = 8;
const CLUSTER_KEY: &str = "CLUSTER";

/// Retries of one request. object_store's default (10 retries within
/// 3 minutes) makes an unreachable or refusing destination look like a
/// hang to the operator; a few quick retries still ride out a brief
/// server hiccup, then the error names the destination.
fn retry_config() -> object_store::RetryConfig {
    object_store::RetryConfig {
        backoff: object_store::BackoffConfig::default(),
        max_retries: RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    }
}

const RETRIES: usize = 3;
const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A parsed destination URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Local(PathBuf),
    S3 {
        bucket: String,
        prefix: String,
        endpoint: Option<String>,
        region: Option<String>,
        path_style: bool,
        /// Sign the request bodies (SHA-256 of every byte on both ends);
        /// off by default: see the module's documentation.
        sign_payload: bool,
    },
}

impl Target {
    /// Files transferred at once per node when the caller names none.
    pub fn default_jobs(&self) -> usize {
        match self {
            Target::Local(_) => LOCAL_JOBS,
            Target::S3 { .. } => S3_JOBS,
        }
    }
}

/// Parses a destination URL (see the module's documentation).
pub fn parse(url: &str) -> Result<Target> {
    let bad = |reason: &str| BackupError::BadDestination {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    if let Some(rest) = url.strip_prefix("s3://") {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket: write s3://bucket[/prefix]"));
        }
        let (mut endpoint, mut region) = (None, None);
        let (mut path_style, mut sign_payload) = (false, false);
        for kv in query.split('&').filter(|s| !s.is_empty()) {
            match kv.split_once('=') {
                Some(("endpoint", v)) => endpoint = Some(v.to_string()),
                Some(("region", v)) => region = Some(v.to_string()),
                Some(("path_style", v)) => {
                    path_style = v.parse().map_err(|_| bad("path_style is true or false"))?
                }
                Some(("sign_payload", v)) => {
                    sign_payload = v
                        .parse()
                        .map_err(|_| bad("sign_payload is true or false"))?
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown option {kv:?} (endpoint, region, path_style, sign_payload)"
                    )))
                }
            }
        }
        return Ok(Target::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            endpoint,
            region,
            path_style,
            sign_payload,
        });
    }
    let path = url.strip_prefix("file://").unwrap_or(url);
    if !path.starts_with('/') {
        return Err(bad(
            "not a destination: use an absolute directory, file:///dir or s3://bucket/prefix",
        ));
    }
    Ok(Target::Local(PathBuf::from(path)))
}

/// An open destination.
#[derive(Clone)]
pub struct Destination {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// The directory of a local destination (objects are plain files).
    local: Option<PathBuf>,
    default_jobs: usize,
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Destination({})", self.url)
    }
}

impl Destination {
    pub fn open(url: &str) -> Result<Destination> {
        let bad = |e: &dyn std::fmt::Display| BackupError::BadDestination {
            url: url.to_string(),
            reason: e.to_string(),
        };
        let target = parse(url)?;
        let default_jobs = target.default_jobs();
        let local = match &target {
            Target::Local(dir) => Some(dir.clone()),
            Target::S3 { .. } => None,
        };
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match target {
            Target::Local(dir) => {
                std::fs::create_dir_all(&dir).map_err(|source| BackupError::Io {
                    path: dir.clone(),
                    source,
                })?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| bad(&e))?;
                (Arc::new(fs), String::new())
            }
            Target::S3 {
                bucket,
                prefix,
                endpoint,
                region,
                path_style,
                sign_payload,
            } => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_retry(retry_config())
                    .with_bucket_name(bucket)
                    .with_virtual_hosted_style_request(!path_style)
                    .with_unsigned_payload(!sign_payload);
                if let Some(e) = endpoint {
                    b = b.with_allow_http(e.starts_with("http://")).with_endpoint(e);
                }
                if let Some(r) = region {
                    b = b.with_region(r);
                }
                (Arc::new(b.build().map_err(|e| bad(&e))?), prefix)
            }
        };
        Ok(Destination {
            url: url.to_string(),
            store,
            prefix,
            local,
            default_jobs,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Files to transfer at once per node: `requested`, or this kind of
    /// destination's default for 0.
    pub fn jobs(&self, requested: u32) -> usize {
        match requested {
            0 => self.default_jobs,
            n => n as usize,
        }
    }

    /// The file of an object of a local destination (None for S3): a
    /// download from a directory is a plain file copy, with large reads.
    pub fn local_path(&self, rel: &str) -> Option<PathBuf> {
        self.local.as_ref().map(|d| d.join(rel))
    }

    fn key(&self, rel: &str) -> Key {
        if self.prefix.is_empty() {
            Key::from(rel)
        } else {
            Key::from(format!("{}/{rel}", self.prefix))
        }
    }

    fn err(&self, op: &'static str, key: &str, e: impl std::fmt::Display) -> BackupError {
        BackupError::Store {
            url: self.url.clone(),
            op,
            key: key.to_string(),
            message: e.to_string(),
        }
    }

    pub async fn exists(&self, rel: &str) -> Result<bool> {
        match self.store.head(&self.key(rel)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err("HEAD", rel, e)),
        }
    }

    pub async fn put(&self, rel: &str, bytes: Bytes) -> Result<()> {
        self.store
            .put(&self.key(rel), PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.err("PUT", rel, e))
    }

    /// Uploads a local file; large files in parts, so memory stays bounded.
    /// `limit` paces the bytes sent (see [`RateLimit`]).
    pub async fn put_file(
        &self,
        rel: &str,
        path: &Path,
        size: u64,
        limit: Option<&RateLimit>,
    ) -> Result<()> {
        let io = |source| BackupError::Io {
            path: path.to_path_buf(),
            source,
        };
        if size <= MULTIPART_BYTES {
            let bytes = tokio::fs::read(path).await.map_err(io)?;
            if let Some(l) = limit {
                l.take(bytes.len() as u64).await;
            }
            return self.put(rel, Bytes::from(bytes)).await;
        }
        let upload = self
            .store
            .put_multipart(&self.key(rel))
            .await
            .map_err(|e| self.err("PUT (multipart)", rel, e))?;
        let mut w = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        let mut f = tokio::fs::File::open(path).await.map_err(io)?;
        let mut buf = vec![0u8; PART_BYTES];
        loop {
            use tokio::io::AsyncReadExt;
            let n = f.read(&mut buf).await.map_err(io)?;
            if n == 0 {
                break;
            }
            if let Some(l) = limit {
                l.take(n as u64).await;
            }
            w.wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| self.err("PUT (multipart)", rel, e))?;
            w.write(&buf[..n]);
        }
        w.finish()
            .await
            .map(|_| ())
            .map_err(|e| self.err("PUT (multipart)", rel, e))
    }

    /// The object's bytes, or None if it does not exist.
    pub async fn get(&self, rel: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.key(rel)).await {
            Ok(r) => r
                .bytes()
                .await
                .map(Some)
                .map_err(|e| self.err("GET", rel, e)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("GET", rel, e)),
        }
    }

    /// The object as a stream of chunks.
    pub async fn get_stream(
        &self,
        rel: &str,
    ) -> Result<futures::stream::BoxStream<'static, Result<Bytes>>> {
        let r = self
            .store
            .get(&self.key(rel))
            .await
            .map_err(|e| self.err("GET", rel, e))?;
        let (url, key) = (self.url.clone(), rel.to_string());
        Ok(Box::pin(r.into_stream().map_err(move |e| {
            BackupError::Store {
                url: url.clone(),
                op: "GET",
                key: key.clone(),
                message: e.to_string(),
            }
        })))
    }

    pub async fn delete(&self, rel: &str) -> Result<()> {
        match self.store.delete(&self.key(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("DELETE", rel, e)),
        }
    }

    /// Keys (relative to the prefix) under `rel`.
    pub async fn list(&self, rel: &str) -> Result<Vec<String>> {
        let base = self.key(rel);
        let metas: Vec<_> = self
            .store
            .list(Some(&base))
            .try_collect()
            .await
            .map_err(|e| self.err("LIST", rel, e))?;
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        Ok(metas
            .into_iter()
            .map(|m| {
                let k = m.location.to_string();
                k.strip_prefix(&strip).unwrap_or(&k).to_string()
            })
            .collect())
    }

    /// Claims the destination for `cluster`, or refuses one that holds
    /// another cluster's backups.
    pub async fn claim(&self, cluster: &str) -> Result<()> {
        match self.get(CLUSTER_KEY).await? {
            Some(b) if b.as_ref() == cluster.as_bytes() => Ok(()),
            Some(b) => Err(BackupError::OtherCluster {
                url: self.url.clone(),
                found: String::from_utf8_lossy(&b).into_owned(),
                expected: cluster.to_string(),
            }),
            None => {
                self.put(CLUSTER_KEY, Bytes::from(cluster.to_string()))
                    .await
            }
        }
    }

    /// Ids of the backups here (those with a manifest), sorted.
    pub async fn backup_ids(&self) -> Result<Vec<String>> {
        let mut ids: Vec<String> = self
            .list("backups")
            .await?
            .iter()
            .filter_map(|k| manifest::id_of_key(k).map(str::to_string))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Reads and checks one backup's manifest.
    pub async fn manifest(&self, id: &str) -> Result<Manifest> {
        let key = manifest::manifest_key(id);
        let bytes = self.get(&key).await?.ok_or_else(|| BackupError::NotFound {
            url: self.url.clone(),
            id: id.to_string(),
        })?;
        Manifest::decode(&self.url, &key, &bytes)
    }

    /// Every backup's manifest.
    pub async fn manifests(&self) -> Result<Vec<Manifest>> {
        let mut out = Vec::new();
        for id in self.backup_ids().await? {
            out.push(self.manifest(&id).await?);
        }
        Ok(out)
    }

    /// The newest backup's id (ids sort by time: see `new_backup_id`).
    pub async fn latest(&self) -> Result<String> {
        let ms = self.manifests().await?;
        ms.into_iter()
            .max_by(|a, b| (a.started_ms, &a.id).cmp(&(b.started_ms, &b.id)))
            .map(|m| m.id)
            .ok_or_else(|| BackupError::Empty {
                url: self.url.clone(),
            })
    }

    /// Writes a manifest: the last write of a backup (in a local
    /// directory fsynced, like the objects before it).
    pub async fn put_manifest(&self, m: &Manifest) -> Result<()> {
        let key = manifest::manifest_key(&m.id);
        let bytes = m.encode();
        let Some(target) = self.local_path(&key) else {
            return self.put(&key, Bytes::from(bytes)).await;
        };
        let dest = self.clone();
        tokio::task::spawn_blocking(move || {
            crate::local::write_durably(dest.url(), &key, &target, |staging| {
                std::fs::write(staging, &bytes).map_err(|e| ("writing".to_string(), e))
            })
        })
        .await
        .map_err(|e| self.err("PUT", "manifest", e))?
    }
}

/// A new backup's id from the wall clock: `b-YYYYmmddTHHMMSSZ` sorts by time.
pub fn new_backup_id(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "b-{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(parse("/var/b").unwrap(), Target::Local("/var/b".into()));
        assert_eq!(
            parse("file:///var/b").unwrap(),
            Target::Local("/var/b".into())
        );
        assert_eq!(
            parse("s3://bk/a/b/?endpoint=http://127.0.0.1:9000&region=eu-west-1&path_style=true")
                .unwrap(),
            Target::S3 {
                bucket: "bk".into(),
                prefix: "a/b".into(),
                endpoint: Some("http://127.0.0.1:9000".into()),
                region: Some("eu-west-1".into()),
                path_style: true,
                sign_payload: false,
            }
        );
        let signed = parse("s3://bk?sign_payload=true").unwrap();
        assert!(matches!(
            signed,
            Target::S3 {
                sign_payload: true,
                ..
            }
        ));
        assert!(signed.default_jobs() > parse("/var/b").unwrap().default_jobs());
        for bad in [
            "relative/dir",
            "s3://",
            "s3://b?colour=red",
            "s3://b?path_style=yes",
            "s3://b?sign_payload=1",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }

    #[test]
    fn ids_sort_by_time() {
        assert_eq!(new_backup_id(0), "b-19700101T000000Z");
        assert_eq!(
            new_backup_id(1_795_737_600_000 + 3_723_000),
            "b-20261127T010203Z"
        );
        assert!(new_backup_id(1_000_000) < new_backup_id(2_000_000));
    }

    #[tokio::test]
    async fn local_directory_round_trip_and_cluster_claim() {
        let d = tempfile::tempdir().unwrap();
        let dest = Destination::open(d.path().to_str().unwrap()).unwrap();
        assert!(!dest.exists("objects/ab/x").await.unwrap());
        dest.put("objects/ab/x", Bytes::from_static(b"hi"))
            .await
            .unwrap();
        assert!(dest.exists("objects/ab/x").await.unwrap());
        assert_eq!(dest.get("objects/ab/x").await.unwrap().unwrap(), "hi");
        assert_eq!(dest.list("objects").await.unwrap(), ["objects/ab/x"]);
        dest.claim("a").await.unwrap();
        dest.claim("a").await.unwrap();
        let e = dest.claim("b").await.unwrap_err().to_string();
        assert!(e.contains("cluster \"a\"") && e.contains("\"b\""), "{e}");
        let e = dest.manifest("nope").await.unwrap_err().to_string();
        assert!(e.contains("\"nope\" not found"), "{e}");
        assert!(dest.latest().await.is_err());
        // A manifest is written in place (fsynced) and read back whole.
        let m = crate::manifest::tests::manifest("b1", &["a"]);
        dest.put_manifest(&m).await.unwrap();
        assert_eq!(dest.manifest("b1").await.unwrap(), m);
        assert_eq!(dest.backup_ids().await.unwrap(), ["b1"]);
    }
}
