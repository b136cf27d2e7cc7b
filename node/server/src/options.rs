//! Node options: serde defaults, then an optional TOML file, then env vars
//! (`SHARDHOUSE_NODE_<FLAG>`), then flags; validated before anything starts.

use crate::error::{NodeError, Result};
use clap::Parser;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// Everything a node process is configured with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeOptions {
    /// Unique, stable id of this node in the cluster (>= 1).
    pub node_id: u64,
    /// Root of the node's state: `wal/` (RocksDB) and `engine/` (chDB).
    pub data_dir: PathBuf,
    pub grpc_listen: String,
    pub http_listen: String,
    /// Host peers and routers dial; joined with the bound gRPC port.
    pub advertise_host: String,
    pub etcd_endpoints: Vec<String>,
    pub cluster: String,
    /// chDB connection pool size; 0 = `cores`.
    pub pool_size: usize,
    /// Where the chdb-core wheel is unpacked; None = `SHARDHOUSE_CHDB_DIR`.
    pub chdb_dir: Option<PathBuf>,
    /// Cores the process is sized for; 0 = what the machine has.
    pub cores: u32,
    /// `shards=N,rf=R,nodes=K`: write the initial shard map once K nodes registered.
    pub init_cluster: Option<InitCluster>,
    /// Bytes of Write requests admitted but not yet committed, over all shards.
    pub max_inflight_bytes: usize,
    /// Per-shard cap handed to the WAL.
    pub max_inflight_bytes_per_shard: usize,
    pub flush_max_rows: usize,
    pub flush_max_age_ms: u64,
    pub raft_tick_ms: u64,
    pub raft_election_ticks: usize,
    pub raft_heartbeat_ticks: usize,
    /// TTL of the etcd lease under which `nodes/<id>` is registered.
    pub lease_ttl_secs: i64,
    /// Nice value for threads off the write path (chDB flushes and merges,
    /// RocksDB compactions); 0 leaves every thread at normal priority.
    pub background_nice: i32,
    /// Seconds between `malloc_trim(0)` calls that give the memory glibc
    /// keeps after the engine and RocksDB free it back to the system
    /// (memory.rs); 0 disables.
    pub malloc_trim_secs: u64,
    /// Threads running the WAL's batched Raft loop; each syncs its own
    /// RocksDB write batch per round, so fewer threads mean larger fsync
    /// groups and more shards waiting on each fsync.
    pub wal_poll_threads: usize,
    /// Threads applying committed entries to the engine.
    pub wal_apply_threads: usize,
    /// A replica whose apply failed this many times at one entry is
    /// rebuilt from its leader's snapshot; 0 = only by hand
    /// (`shardhouse-ctl rebuild-replica`).
    pub wal_rebuild_after_failed_applies: u32,
    /// Hash every stored part against its checksums at start (`CHECK
    /// TABLE`), so bytes damaged in place are found before a read trips
    /// over them; it reads all engine data once per start.
    pub engine_verify_parts_at_start: bool,
    /// How often the node checks whether it leads more than its fair share
    /// of shards and hands one to a replica that leads fewer; 0 = never.
    pub leader_balance_interval_ms: u64,
    /// Retention of databases that set none, in seconds; 0 = keep forever.
    pub default_retention_secs: u64,
    /// How often expired day partitions are looked for (ms).
    pub retention_check_interval_ms: u64,
    /// Read every fact table with `FINAL`, also those this node knows hold
    /// each point once (docs/storage.md, "FINAL only where it can matter").
    pub engine_reads_always_final: bool,
    /// Keep rollups of new measurements and read them where exact
    /// (docs/storage.md, "Rollups").
    pub engine_rollups: bool,
    /// Sort order of fact tables created from now on: `series-time` (the
    /// default) or `hour-series-time` (docs/storage.md, "Sort order").
    pub engine_fact_order: String,
    /// RocksDB memtable size of the WAL; up to 4 are held, so the WAL's
    /// memtables take at most 4x this (the operator sizes it to the pod's
    /// memory limit).
    pub wal_write_buffer_bytes: usize,
    /// Log a shard's leader keeps beyond the engine's flush for followers
    /// that are behind (a restarted replica, a learner installing a
    /// snapshot), so they catch up from the log instead of by snapshot.
    pub wal_follower_log_retention_bytes: u64,
    /// File holding the cluster credential that node gRPC requires and that
    /// this node presents to its peers; None = `SHARDHOUSE_CLUSTER_TOKEN`,
    /// and with neither the check is off (docs/operations.md).
    pub cluster_token_file: Option<PathBuf>,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            node_id: 0,
            data_dir: PathBuf::from("./.data/node"),
            grpc_listen: "127.0.0.1:7400".into(),
            http_listen: "127.0.0.1:7401".into(),
            advertise_host: "127.0.0.1".into(),
            etcd_endpoints: vec!["http://127.0.0.1:2379".into()],
            cluster: "local".into(),
            pool_size: 0,
            chdb_dir: None,
            cores: 0,
            init_cluster: None,
            max_inflight_bytes: 512 << 20,
            max_inflight_bytes_per_shard: 64 << 20,
            flush_max_rows: 1_000_000,
            // 2 s, not 5: each flush's parts are synced with one syncfs
            // that the WAL's fsyncs wait behind, and the WAL keeps every
            // unflushed entry live in its memtable (written to an SST if a
            // memtable flush comes first). Smaller, more frequent engine
            // flushes cut both bursts: RF=3 at 350k points/s, three
            // interleaved 30 s runs each, p95 162 / 154 / 159 ms vs 223 /
            // 269 / 196 ms at 5 s (docs/benchmarks.md). Still one insert
            // per table per shard every 2 s.
            flush_max_age_ms: 2_000,
            raft_tick_ms: 100,
            raft_election_ticks: 10,
            raft_heartbeat_ticks: 3,
            lease_ttl_secs: 10,
            background_nice: 10,
            malloc_trim_secs: 10,
            wal_poll_threads: 2,
            wal_apply_threads: 2,
            wal_rebuild_after_failed_applies: 10,
            engine_verify_parts_at_start: true,
            leader_balance_interval_ms: 5_000,
            default_retention_secs: 0,
            retention_check_interval_ms: 60_000,
            engine_reads_always_final: false,
            engine_rollups: false,
            engine_fact_order: shardhouse_engine::layout::FactOrder::default()
                .name()
                .to_string(),
            wal_write_buffer_bytes: 256 << 20,
            wal_follower_log_retention_bytes: 512 << 20,
            cluster_token_file: None,
        }
    }
}

/// `--init-cluster shards=N,rf=R,nodes=K`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitCluster {
    pub shards: u32,
    pub rf: u32,
    pub nodes: u32,
}

impl FromStr for InitCluster {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (mut shards, mut rf, mut nodes) = (None, None, None);
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("expected key=value in {part:?}"))?;
            let v: u32 = v
                .trim()
                .parse()
                .map_err(|_| format!("{k} must be a positive integer, got {v:?}"))?;
            match k.trim() {
                "shards" => shards = Some(v),
                "rf" => rf = Some(v),
                "nodes" => nodes = Some(v),
                other => return Err(format!("unknown key {other:?} (want shards, rf, nodes)")),
            }
        }
        let init = InitCluster {
            shards: shards.ok_or("missing shards=N")?,
            rf: rf.ok_or("missing rf=R")?,
            nodes: nodes.ok_or("missing nodes=K")?,
        };
        if init.shards == 0 || init.rf == 0 || init.nodes == 0 {
            return Err("shards, rf and nodes must all be >= 1".into());
        }
        Ok(init)
    }
}

/// Command line; every flag is also `SHARDHOUSE_NODE_<FLAG>`. Unset flags
/// leave the file/default value alone.
#[derive(Debug, Default, Parser)]
#[command(name = "shardhouse-node", about = "Shardhouse storage node", version)]
pub struct Cli {
    /// TOML file with any of the options (flag names with `_`).
    #[arg(long, env = "SHARDHOUSE_NODE_CONFIG")]
    pub config: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_NODE_NODE_ID")]
    pub node_id: Option<u64>,
    #[arg(long, env = "SHARDHOUSE_NODE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_NODE_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    #[arg(long, env = "SHARDHOUSE_NODE_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    #[arg(long, env = "SHARDHOUSE_NODE_ADVERTISE_HOST")]
    pub advertise_host: Option<String>,
    /// Comma separated etcd URLs.
    #[arg(long, env = "SHARDHOUSE_NODE_ETCD_ENDPOINTS", value_delimiter = ',')]
    pub etcd_endpoints: Option<Vec<String>>,
    #[arg(long, env = "SHARDHOUSE_NODE_CLUSTER")]
    pub cluster: Option<String>,
    #[arg(long, env = "SHARDHOUSE_NODE_POOL_SIZE")]
    pub pool_size: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_CHDB_DIR")]
    pub chdb_dir: Option<PathBuf>,
    #[arg(long, env = "SHARDHOUSE_NODE_CORES")]
    pub cores: Option<u32>,
    #[arg(long, env = "SHARDHOUSE_NODE_INIT_CLUSTER")]
    pub init_cluster: Option<InitCluster>,
    #[arg(long, env = "SHARDHOUSE_NODE_MAX_INFLIGHT_BYTES")]
    pub max_inflight_bytes: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_MAX_INFLIGHT_BYTES_PER_SHARD")]
    pub max_inflight_bytes_per_shard: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_FLUSH_MAX_ROWS")]
    pub flush_max_rows: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_FLUSH_MAX_AGE_MS")]
    pub flush_max_age_ms: Option<u64>,
    #[arg(long, env = "SHARDHOUSE_NODE_RAFT_TICK_MS")]
    pub raft_tick_ms: Option<u64>,
    #[arg(long, env = "SHARDHOUSE_NODE_RAFT_ELECTION_TICKS")]
    pub raft_election_ticks: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_RAFT_HEARTBEAT_TICKS")]
    pub raft_heartbeat_ticks: Option<usize>,
    #[arg(long, env = "SHARDHOUSE_NODE_LEASE_TTL_SECS")]
    pub lease_ttl_secs: Option<i64>,
    /// Nice value (0..=19) for threads off the write path; 0 disables.
    #[arg(long, env = "SHARDHOUSE_NODE_BACKGROUND_NICE")]
    pub background_nice: Option<i32>,
    /// Seconds between malloc_trim calls (0 disables).
    #[arg(long, env = "SHARDHOUSE_NODE_MALLOC_TRIM_SECS")]
    pub malloc_trim_secs: Option<u64>,
    /// Threads running the WAL's Raft loop (>= 1); each syncs its own batch.
    #[arg(long, env = "SHARDHOUSE_NODE_WAL_POLL_THREADS")]
    pub wal_poll_threads: Option<usize>,
    /// Threads applying committed entries to the engine (>= 1).
    #[arg(long, env = "SHARDHOUSE_NODE_WAL_APPLY_THREADS")]
    pub wal_apply_threads: Option<usize>,
    /// Failed applies of one entry before the replica is rebuilt from its
    /// leader's snapshot; 0 = only by hand.
    #[arg(long, env = "SHARDHOUSE_NODE_WAL_REBUILD_AFTER_FAILED_APPLIES")]
    pub wal_rebuild_after_failed_applies: Option<u32>,
    /// Verify every engine part's checksums at start (true/false).
    #[arg(long, env = "SHARDHOUSE_NODE_ENGINE_VERIFY_PARTS_AT_START")]
    pub engine_verify_parts_at_start: Option<bool>,
    /// How often to check for an unfair share of leaderships (ms); 0 = off.
    #[arg(long, env = "SHARDHOUSE_NODE_LEADER_BALANCE_INTERVAL_MS")]
    pub leader_balance_interval_ms: Option<u64>,
    /// Retention (s) of databases that set none; 0 = keep forever.
    #[arg(long, env = "SHARDHOUSE_NODE_DEFAULT_RETENTION_SECS")]
    pub default_retention_secs: Option<u64>,
    /// How often expired day partitions are looked for (ms).
    #[arg(long, env = "SHARDHOUSE_NODE_RETENTION_CHECK_INTERVAL_MS")]
    pub retention_check_interval_ms: Option<u64>,
    /// Read every fact table with FINAL, also those known to hold each
    /// point once (true/false; default false).
    #[arg(long, env = "SHARDHOUSE_NODE_ENGINE_READS_ALWAYS_FINAL")]
    pub engine_reads_always_final: Option<bool>,
    /// Keep 1-minute and 1-hour rollups of new measurements and read them
    /// where exact (true/false; default false).
    #[arg(long, env = "SHARDHOUSE_NODE_ENGINE_ROLLUPS")]
    pub engine_rollups: Option<bool>,
    /// Sort order of fact tables created from now on: series-time
    /// (default) or hour-series-time.
    #[arg(long, env = "SHARDHOUSE_NODE_ENGINE_FACT_ORDER")]
    pub engine_fact_order: Option<String>,
    /// WAL RocksDB memtable bytes (up to 4 held); default 256 MiB.
    #[arg(long, env = "SHARDHOUSE_NODE_WAL_WRITE_BUFFER_BYTES")]
    pub wal_write_buffer_bytes: Option<usize>,
    /// Log bytes per shard a leader keeps for lagging followers; default
    /// 512 MiB (at most a quarter of the per-shard log bound); 0 = none.
    #[arg(long, env = "SHARDHOUSE_NODE_WAL_FOLLOWER_LOG_RETENTION_BYTES")]
    pub wal_follower_log_retention_bytes: Option<u64>,
    /// File with the cluster credential (see docs/operations.md).
    #[arg(long, env = "SHARDHOUSE_NODE_CLUSTER_TOKEN_FILE")]
    pub cluster_token_file: Option<PathBuf>,
}

impl NodeOptions {
    /// Layers defaults -> `--config` file -> env/flags and validates.
    pub fn load(cli: Cli) -> Result<NodeOptions> {
        let mut opts: NodeOptions = shardhouse_common::layered::from_file(cli.config.as_deref())
            .map_err(|e| NodeError::ConfigFile {
                path: e.path,
                reason: e.reason,
            })?;
        opts.apply_cli(cli);
        if opts.chdb_dir.is_none() {
            opts.chdb_dir = std::env::var_os("SHARDHOUSE_CHDB_DIR").map(PathBuf::from);
        }
        opts.validate()?;
        Ok(opts)
    }

    fn apply_cli(&mut self, cli: Cli) {
        shardhouse_common::overlay!(self, cli;
            node_id,
            data_dir,
            grpc_listen,
            http_listen,
            advertise_host,
            etcd_endpoints,
            cluster,
            pool_size,
            cores,
            max_inflight_bytes,
            max_inflight_bytes_per_shard,
            flush_max_rows,
            flush_max_age_ms,
            raft_tick_ms,
            raft_election_ticks,
            raft_heartbeat_ticks,
            lease_ttl_secs,
            background_nice,
            malloc_trim_secs,
            wal_poll_threads,
            wal_apply_threads,
            wal_rebuild_after_failed_applies,
            engine_verify_parts_at_start,
            leader_balance_interval_ms,
            default_retention_secs,
            retention_check_interval_ms,
            engine_reads_always_final,
            engine_rollups,
            engine_fact_order,
            wal_write_buffer_bytes,
            wal_follower_log_retention_bytes;
            optional: chdb_dir, init_cluster, cluster_token_file
        );
    }

    /// Rejects options the process could not run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(NodeError::InvalidOptions(m));
        if shardhouse_engine::layout::FactOrder::parse(&self.engine_fact_order).is_none() {
            return bad(format!(
                "--engine-fact-order {:?} is not a sort order: use hour-series-time or series-time",
                self.engine_fact_order
            ));
        }
        if self.node_id == 0 {
            return bad("--node-id must be >= 1 (0 means 'no node' in Raft)".into());
        }
        for (name, addr) in [
            ("--grpc-listen", &self.grpc_listen),
            ("--http-listen", &self.http_listen),
        ] {
            if addr.parse::<SocketAddr>().is_err() {
                return bad(format!("{name} {addr:?} is not host:port (IP literal)"));
            }
        }
        if self.advertise_host.trim().is_empty() {
            return bad("--advertise-host must not be empty".into());
        }
        if self.etcd_endpoints.iter().all(|e| e.trim().is_empty()) {
            return bad("--etcd-endpoints needs at least one URL".into());
        }
        if self.cluster.is_empty() || self.cluster.contains('/') {
            return bad(format!(
                "--cluster {:?} must be non-empty without '/'",
                self.cluster
            ));
        }
        if self.max_inflight_bytes == 0 || self.max_inflight_bytes_per_shard == 0 {
            return bad("in-flight byte limits must be > 0".into());
        }
        if self.wal_write_buffer_bytes < (1 << 20) {
            return bad(format!(
                "--wal-write-buffer-bytes {} must be at least 1 MiB (1048576)",
                self.wal_write_buffer_bytes
            ));
        }
        if !(0..=19).contains(&self.background_nice) {
            return bad(format!(
                "--background-nice {} must be 0..=19 (0 keeps every thread at normal priority)",
                self.background_nice
            ));
        }
        if !(1..=64).contains(&self.wal_poll_threads) || !(1..=64).contains(&self.wal_apply_threads)
        {
            return bad(format!(
                "--wal-poll-threads {} and --wal-apply-threads {} must be 1..=64",
                self.wal_poll_threads, self.wal_apply_threads
            ));
        }
        if self.raft_tick_ms == 0 || self.raft_heartbeat_ticks == 0 {
            return bad("--raft-tick-ms and --raft-heartbeat-ticks must be > 0".into());
        }
        if self.raft_election_ticks <= self.raft_heartbeat_ticks {
            return bad("--raft-election-ticks must exceed --raft-heartbeat-ticks".into());
        }
        if self.lease_ttl_secs < 2 {
            return bad("--lease-ttl-secs must be >= 2".into());
        }
        if let Some(init) = self.init_cluster {
            if init.rf > init.nodes {
                return bad(format!(
                    "--init-cluster rf={} exceeds nodes={}",
                    init.rf, init.nodes
                ));
            }
        }
        Ok(())
    }

    /// Cores the process is sized for.
    pub fn effective_cores(&self) -> u32 {
        if self.cores > 0 {
            self.cores
        } else {
            std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_cluster_parses_and_rejects_garbage() {
        let i: InitCluster = "shards=8, rf=3,nodes=3".parse().unwrap();
        assert_eq!(
            i,
            InitCluster {
                shards: 8,
                rf: 3,
                nodes: 3
            }
        );
        assert!("shards=8,rf=3".parse::<InitCluster>().is_err());
        assert!("shards=8,rf=3,nodes=3,x=1".parse::<InitCluster>().is_err());
        assert!("shards=0,rf=1,nodes=1".parse::<InitCluster>().is_err());
    }

    #[test]
    fn flags_override_file_and_validation_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(
            &path,
            "node_id = 4\ncluster = \"from-file\"\nflush_max_age_ms = 50\n",
        )
        .unwrap();
        let cli = Cli::try_parse_from([
            "shardhouse-node",
            "--config",
            path.to_str().unwrap(),
            "--cluster",
            "from-flag",
            "--init-cluster",
            "shards=4,rf=1,nodes=1",
        ])
        .unwrap();
        let o = NodeOptions::load(cli).unwrap();
        assert_eq!(o.node_id, 4);
        assert_eq!(o.cluster, "from-flag");
        assert_eq!(o.flush_max_age_ms, 50);
        assert_eq!(o.init_cluster.unwrap().shards, 4);

        let bad = Cli::try_parse_from(["shardhouse-node", "--node-id", "0"]).unwrap();
        assert!(matches!(
            NodeOptions::load(bad),
            Err(NodeError::InvalidOptions(_))
        ));
        let bad_rf = Cli::try_parse_from([
            "shardhouse-node",
            "--node-id",
            "1",
            "--init-cluster",
            "shards=1,rf=3,nodes=1",
        ])
        .unwrap();
        assert!(NodeOptions::load(bad_rf).is_err());
        let order = |o: &str| {
            NodeOptions::load(
                Cli::try_parse_from([
                    "shardhouse-node",
                    "--node-id",
                    "1",
                    "--engine-fact-order",
                    o,
                ])
                .unwrap(),
            )
        };
        assert_eq!(
            order("hour-series-time").unwrap().engine_fact_order,
            "hour-series-time"
        );
        let e = order("time-first").unwrap_err().to_string();
        assert!(
            e.contains("time-first") && e.contains("hour-series-time"),
            "{e}"
        );
    }

    #[test]
    fn wal_thread_counts_are_bounded() {
        let parse = |n: &str| {
            NodeOptions::load(
                Cli::try_parse_from(["shardhouse-node", "--node-id", "1", "--wal-poll-threads", n])
                    .unwrap(),
            )
        };
        assert_eq!(parse("1").unwrap().wal_poll_threads, 1);
        match parse("0") {
            Err(NodeError::InvalidOptions(m)) => assert!(m.contains("--wal-poll-threads"), "{m}"),
            other => panic!("0 poll threads accepted: {other:?}"),
        }
        assert_eq!(NodeOptions::default().wal_apply_threads, 2);
    }

    #[test]
    fn example_config_parses() {
        let text = include_str!("../node.example.toml");
        let o: NodeOptions = toml::from_str(text).unwrap();
        o.validate().unwrap();
    }
}
