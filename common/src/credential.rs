//! The cluster credential: one shared secret that every caller of a node's
//! gRPC services (routers, peer nodes, the operator, `shardhouse-ctl`)
//! presents in the `x-shardhouse-cluster-token` metadata. Nodes refuse calls
//! without it when one is configured; with none configured the check is off
//! (a laptop cluster, the test suite).
//!
//! This module holds what both sides need: loading the token (a file, as
//! Kubernetes mounts a Secret, or `SHARDHOUSE_CLUSTER_TOKEN`), the
//! constant-time comparison, and the client interceptor that attaches it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

/// gRPC metadata key carrying the cluster token.
pub const METADATA_KEY: &str = "x-shardhouse-cluster-token";
/// Environment variable read when no token file is configured.
pub const ENV_VAR: &str = "SHARDHOUSE_CLUSTER_TOKEN";

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot read the cluster token file {path}: {reason} (point --cluster-token-file at the mounted Secret's key, or unset it)")]
    File { path: PathBuf, reason: String },
    #[error("the cluster token from {source_name} is not usable: {reason}")]
    Invalid {
        source_name: String,
        reason: &'static str,
    },
}

/// The shared secret. `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterToken(Arc<str>);

impl fmt::Debug for ClusterToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterToken(<{} bytes>)", self.0.len())
    }
}

impl ClusterToken {
    /// A token must fit in a gRPC metadata value: 16 or more visible ASCII
    /// characters (a short token is a guessable one).
    pub fn new(text: &str, source_name: &str) -> Result<ClusterToken, CredentialError> {
        let text = text.trim();
        let invalid = |reason| CredentialError::Invalid {
            source_name: source_name.to_owned(),
            reason,
        };
        if text.len() < 16 {
            return Err(invalid("it must be at least 16 characters"));
        }
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "it must be visible ASCII without spaces (e.g. `openssl rand -hex 32`)",
            ));
        }
        Ok(ClusterToken(Arc::from(text)))
    }

    /// Reads a token file (surrounding whitespace, e.g. a final newline, is
    /// ignored).
    pub fn from_file(path: &Path) -> Result<ClusterToken, CredentialError> {
        let text = std::fs::read_to_string(path).map_err(|e| CredentialError::File {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        ClusterToken::new(&text, &path.display().to_string())
    }

    /// The token from `file` if given, else from `SHARDHOUSE_CLUSTER_TOKEN`
    /// if set and non-empty, else none (the check is off).
    pub fn load(file: Option<&Path>) -> Result<Option<ClusterToken>, CredentialError> {
        if let Some(path) = file {
            return ClusterToken::from_file(path).map(Some);
        }
        match std::env::var(ENV_VAR) {
            Ok(v) if !v.trim().is_empty() => ClusterToken::new(&v, ENV_VAR).map(Some),
            _ => Ok(None),
        }
    }

    /// Whether `presented` is this token, in time independent of where the
    /// two first differ.
    pub fn matches(&self, presented: &[u8]) -> bool {
        constant_time_eq(self.0.as_bytes(), presented)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Byte equality that looks at every byte of equal-length inputs, so the
/// time taken does not reveal the length of a matching prefix.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Client side: adds the token to every call (nothing when there is none).
#[derive(Clone, Debug, Default)]
pub struct PresentCredential {
    value: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl PresentCredential {
    pub fn new(token: Option<&ClusterToken>) -> PresentCredential {
        PresentCredential {
            // ClusterToken::new admits visible ASCII only, which always parses.
            value: token.and_then(|t| t.expose().parse().ok()),
        }
    }
}

impl Interceptor for PresentCredential {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.value {
            req.metadata_mut().insert(METADATA_KEY, v.clone());
        }
        Ok(req)
    }
}

/// A channel to a node that presents the cluster credential.
pub type CredentialChannel = InterceptedService<Channel, PresentCredential>;

pub fn with_credential(channel: Channel, token: Option<&ClusterToken>) -> CredentialChannel {
    InterceptedService::new(channel, PresentCredential::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_spaced_tokens_are_refused_with_their_source() {
        let e = ClusterToken::new("short", "x.txt").unwrap_err().to_string();
        assert!(e.contains("x.txt") && e.contains("16"), "{e}");
        assert!(ClusterToken::new("has a space in the middle", "env").is_err());
        let t = ClusterToken::new("  0123456789abcdef0123\n", "f").unwrap();
        assert_eq!(t.expose(), "0123456789abcdef0123");
        assert!(!format!("{t:?}").contains("0123"));
    }

    #[test]
    fn matches_only_the_exact_token() {
        let t = ClusterToken::new("0123456789abcdef", "t").unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeF"));
        assert!(!t.matches(b"0123456789abcdef0"));
        assert!(!t.matches(b""));
    }

    #[test]
    fn file_errors_name_the_file() {
        let e = ClusterToken::load(Some(Path::new("/nonexistent/token")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/token"), "{e}");
        let dir = tempfile_dir();
        let p = dir.join("token");
        std::fs::write(&p, "abcdefghijklmnopqrstuvwxyz\n").unwrap();
        let t = ClusterToken::load(Some(&p)).unwrap().unwrap();
        assert!(t.matches(b"abcdefghijklmnopqrstuvwxyz"));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn interceptor_adds_the_metadata_only_with_a_token() {
        let t = ClusterToken::new("0123456789abcdef", "t").unwrap();
        let req = PresentCredential::new(Some(&t))
            .call(tonic::Request::new(()))
            .unwrap();
        assert_eq!(
            req.metadata().get(METADATA_KEY).unwrap(),
            "0123456789abcdef"
        );
        let req = PresentCredential::new(None)
            .call(tonic::Request::new(()))
            .unwrap();
        assert!(req.metadata().get(METADATA_KEY).is_none());
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("sh-cred-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
