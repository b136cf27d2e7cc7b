//! Router options: defaults -> optional TOML file (`--config`) -> env
//! (`SHARDHOUSE_ROUTER_<FLAG>`) -> flags, validated at start.

use crate::error::{Error, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything the router can be told. Field names are the TOML keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RouterOptions {
    /// HTTP ingest/query/metrics listener.
    pub http_listen: String,
    /// gRPC ingest listener.
    pub grpc_listen: String,
    /// etcd endpoints holding the shard map.
    pub etcd_endpoints: Vec<String>,
    /// Cluster name: etcd keys live under `/shardhouse/<cluster>/`.
    pub cluster: String,
    /// Accepted tokens with every role; auth is off when this, `tokens`
    /// and `tokens_file` are all empty.
    pub auth_tokens: Vec<String>,
    /// Tokens with roles, databases and write rate limits
    /// (`[[tokens]]` tables, see docs/operations.md "Tokens and roles").
    pub tokens: Vec<crate::auth::TokenSpec>,
    /// A TOML file of `[[tokens]]` tables (a mounted Secret), read at start.
    pub tokens_file: Option<PathBuf>,
    /// The cluster credential presented to nodes; None =
    /// `SHARDHOUSE_CLUSTER_TOKEN`, none at all = nodes run without one.
    pub cluster_token_file: Option<PathBuf>,
    /// PEM certificate chain and private key: with both, the HTTP and gRPC
    /// listeners speak TLS only, and the files are re-read when they change.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// Largest accepted body, compressed or not (413 beyond it).
    pub max_body_bytes: usize,
    /// In-flight request bytes for the whole router (429 beyond it).
    pub max_inflight_bytes: usize,
    /// In-flight batch bytes per shard (429 beyond it).
    pub max_shard_inflight_bytes: usize,
    /// Node.Write calls in flight per shard from this router; requests that
    /// arrive meanwhile are coalesced into the next write (one Raft entry).
    pub max_shard_rpcs: usize,
    /// Largest coalesced write in bytes (a larger single request goes alone).
    pub max_coalesce_bytes: usize,
    /// Calls in flight per node; shard writes for a node that queue
    /// meanwhile go together as one Node.WriteMany. 0 = one call per shard
    /// write.
    pub max_node_rpcs: usize,
    /// Series per database (0 = unlimited, not tracked).
    pub max_series_per_db: usize,
    /// Entries of the router-wide series cache (all databases together;
    /// 43-85 bytes each, docs/api.md); 0 turns it off.
    pub series_cache_entries: usize,
    /// Deadline of a write, including retries at new leaders.
    pub request_timeout_ms: u64,
    /// Seconds suggested in `Retry-After` when the router itself is full.
    pub retry_after_secs: u64,
    /// Points one `/query` statement may read from the shards; a statement
    /// past it fails with an error naming this option (no OOM).
    pub query_max_points: usize,
    /// Deadline of one `/query` request.
    pub query_timeout_ms: u64,
    /// Memory for the InfluxQL cache of settled `GROUP BY time()` buckets
    /// (a dashboard refresh reads only the newest buckets); 0 turns it off.
    pub query_cache_mb: usize,
    /// Offer the nodes each pushed aggregate's equal over the rollups
    /// (read/influx/rollup.rs); off: raw points always.
    pub query_rollups: bool,
    /// Shards send `percentile()` as a window around its rank
    /// (read/influx/pushdown.rs); off: their points.
    pub query_percentile_windows: bool,
}

/// Default `max_shard_rpcs`.
pub const DEFAULT_MAX_SHARD_RPCS: usize = 4;
/// Default `max_coalesce_bytes`.
pub const DEFAULT_MAX_COALESCE_BYTES: usize = 16 << 20;
/// Default `max_node_rpcs`.
pub const DEFAULT_MAX_NODE_RPCS: usize = 4;

impl Default for RouterOptions {
    fn default() -> Self {
        RouterOptions {
            http_listen: "127.0.0.1:8086".into(),
            grpc_listen: "127.0.0.1:8087".into(),
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            cluster: "local".into(),
            auth_tokens: vec![],
            tokens: vec![],
            tokens_file: None,
            cluster_token_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            max_body_bytes: 64 << 20,
            max_inflight_bytes: 512 << 20,
            max_shard_inflight_bytes: 128 << 20,
            max_shard_rpcs: DEFAULT_MAX_SHARD_RPCS,
            max_coalesce_bytes: DEFAULT_MAX_COALESCE_BYTES,
            max_node_rpcs: DEFAULT_MAX_NODE_RPCS,
            max_series_per_db: 10_000_000,
            series_cache_entries: 2_000_000,
            request_timeout_ms: 10_000,
            retry_after_secs: 1,
            query_max_points: 10_000_000,
            query_timeout_ms: 60_000,
            query_cache_mb: 64,
            query_rollups: true,
            query_percentile_windows: true,
        }
    }
}

/// Command line; each flag also reads `SHARDHOUSE_ROUTER_<FLAG>`.
#[derive(Debug, Default, Parser)]
#[command(
    name = "shardhouse-router",
    version,
    about = "Shardhouse ingest router"
)]
pub struct Flags {
    /// TOML file with `RouterOptions` (see router/router.example.toml).
    #[arg(long, env = "SHARDHOUSE_ROUTER_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    /// Comma separated etcd URLs.
    #[arg(long, env = "SHARDHOUSE_ROUTER_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Option<Vec<String>>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_CLUSTER")]
    pub cluster: Option<String>,
    /// Repeatable; the env var takes a comma separated list.
    #[arg(
        long = "auth-token",
        env = "SHARDHOUSE_ROUTER_AUTH_TOKEN",
        value_delimiter = ','
    )]
    pub auth_tokens: Option<Vec<String>>,
    /// TOML file of `[[tokens]]` with roles (docs/operations.md).
    #[arg(long, env = "SHARDHOUSE_ROUTER_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,
    /// File with the cluster credential presented to nodes.
    #[arg(long, env = "SHARDHOUSE_ROUTER_CLUSTER_TOKEN_FILE")]
    pub cluster_token_file: Option<PathBuf>,
    /// PEM certificate chain for TLS on both listeners (with --tls-key-file).
    #[arg(long, env = "SHARDHOUSE_ROUTER_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_BODY_BYTES")]
    pub max_body_bytes: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_SHARD_INFLIGHT_BYTES")]
    pub max_shard_inflight_bytes: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_SHARD_RPCS")]
    pub max_shard_rpcs: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_COALESCE_BYTES")]
    pub max_coalesce_bytes: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_NODE_RPCS")]
    pub max_node_rpcs: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_MAX_SERIES_PER_DB")]
    pub max_series_per_db: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_SERIES_CACHE_ENTRIES")]
    pub series_cache_entries: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_REQUEST_TIMEOUT_MS")]
    pub request_timeout_ms: Option<u64>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_QUERY_MAX_POINTS")]
    pub query_max_points: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_ROUTER_QUERY_TIMEOUT_MS")]
    pub query_timeout_ms: Option<u64>,
    /// MiB for cached settled buckets of `GROUP BY time()` statements; 0
    /// turns the cache off.
    #[arg(long, env = "SHARDHOUSE_ROUTER_QUERY_CACHE_MB")]
    pub query_cache_mb: Option<usize>,
    /// Read measurements' rollups where exact (true/false; default true).
    #[arg(long, env = "SHARDHOUSE_ROUTER_QUERY_ROLLUPS")]
    pub query_rollups: Option<bool>,
    /// Shards send a percentile's window, not their points (true/false;
    /// default true).
    #[arg(long, env = "SHARDHOUSE_ROUTER_QUERY_PERCENTILE_WINDOWS")]
    pub query_percentile_windows: Option<bool>,
}

impl RouterOptions {
    /// Where [`crate::auth::Authorizer`] reads the tokens from.
    pub fn token_sources(&self) -> crate::auth::TokenSources {
        crate::auth::TokenSources {
            auth_tokens: self.auth_tokens.clone(),
            tokens: self.tokens.clone(),
            tokens_file: self.tokens_file.clone(),
        }
    }

    /// Parses a TOML document (unknown keys are errors).
    pub fn from_toml(text: &str) -> Result<RouterOptions> {
        toml::from_str(text).map_err(|e| Error::Config(e.to_string()))
    }

    /// Layers file, env and flags (clap merges env under flags) over the
    /// defaults, then validates.
    pub fn load(flags: Flags) -> Result<RouterOptions> {
        let mut o: RouterOptions = shardhouse_common::layered::from_file(flags.config.as_deref())
            .map_err(|e| Error::Config(e.to_string()))?;
        shardhouse_common::overlay!(o, flags;
            http_listen,
            grpc_listen,
            etcd_endpoints,
            cluster,
            auth_tokens,
            max_body_bytes,
            max_inflight_bytes,
            max_shard_inflight_bytes,
            max_shard_rpcs,
            max_coalesce_bytes,
            max_node_rpcs,
            max_series_per_db,
            series_cache_entries,
            request_timeout_ms,
            query_max_points,
            query_timeout_ms,
            query_cache_mb,
            query_rollups,
            query_percentile_windows;
            optional: tokens_file, cluster_token_file, tls_cert_file, tls_key_file
        );
        o.validate()?;
        Ok(o)
    }

    pub fn validate(&self) -> Result<()> {
        let addr = |name: &str, v: &str| {
            v.parse::<SocketAddr>().map(|_| ()).map_err(|e| {
                Error::Config(format!(
                    "{name} {v:?} is not host:port (e.g. 127.0.0.1:8086): {e}"
                ))
            })
        };
        addr("http_listen", &self.http_listen)?;
        addr("grpc_listen", &self.grpc_listen)?;
        if self.etcd_endpoints.is_empty() {
            return Err(Error::Config(
                "etcd_endpoints must list at least one URL".into(),
            ));
        }
        if self.cluster.is_empty() {
            return Err(Error::Config("cluster must not be empty".into()));
        }
        if self.auth_tokens.iter().any(|t| t.is_empty()) {
            return Err(Error::Config(
                "auth tokens must not be empty strings".into(),
            ));
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(Error::Config(
                "tls_cert_file and tls_key_file go together: set both for TLS, neither for plain TCP"
                    .into(),
            ));
        }
        if self.max_body_bytes == 0 || self.max_body_bytes > u32::MAX as usize {
            return Err(Error::Config(
                "max_body_bytes must be between 1 and 4294967295".into(),
            ));
        }
        if self.max_inflight_bytes < self.max_body_bytes {
            return Err(Error::Config(format!(
                "max_inflight_bytes ({}) must be at least max_body_bytes ({}) or no request fits",
                self.max_inflight_bytes, self.max_body_bytes
            )));
        }
        if self.max_shard_inflight_bytes == 0 {
            return Err(Error::Config("max_shard_inflight_bytes must be > 0".into()));
        }
        if self.max_shard_rpcs == 0 {
            return Err(Error::Config(
                "max_shard_rpcs must be >= 1 (1 sends a shard's writes one at a time)".into(),
            ));
        }
        if self.max_coalesce_bytes == 0 {
            return Err(Error::Config("max_coalesce_bytes must be > 0".into()));
        }
        if self.request_timeout_ms == 0 {
            return Err(Error::Config("request_timeout_ms must be > 0".into()));
        }
        if self.query_max_points == 0 || self.query_timeout_ms == 0 {
            return Err(Error::Config(
                "query_max_points and query_timeout_ms must be > 0".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_and_validates() {
        let text = include_str!("../router.example.toml");
        let o = RouterOptions::from_toml(text).expect("router.example.toml parses");
        o.validate().expect("router.example.toml is valid");
        assert_eq!(o.cluster, "local");
        assert_eq!(o.max_series_per_db, 1_000_000);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_rejected() {
        assert!(RouterOptions::from_toml("no_such_key = 1").is_err());
        let o = RouterOptions {
            http_listen: "nope".into(),
            ..Default::default()
        };
        assert!(o
            .validate()
            .unwrap_err()
            .to_string()
            .contains("http_listen"));
        let o = RouterOptions {
            max_inflight_bytes: 10,
            max_body_bytes: 100,
            ..Default::default()
        };
        assert!(o.validate().is_err());
    }

    #[test]
    fn flags_override_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        std::fs::write(
            &path,
            "cluster = \"from-file\"\nmax_body_bytes = 1000\nmax_inflight_bytes = 5000\n",
        )
        .unwrap();
        let flags = Flags::try_parse_from([
            "shardhouse-router",
            "--config",
            path.to_str().unwrap(),
            "--max-body-bytes",
            "2000",
            "--auth-token",
            "a",
            "--auth-token",
            "b",
        ])
        .unwrap();
        let o = RouterOptions::load(flags).unwrap();
        assert_eq!(o.cluster, "from-file");
        assert_eq!(o.max_body_bytes, 2000);
        assert_eq!(o.max_inflight_bytes, 5000);
        assert_eq!(o.auth_tokens, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(o.grpc_listen, RouterOptions::default().grpc_listen);
    }
}
