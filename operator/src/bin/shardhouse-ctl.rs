//! shardhouse-ctl: inspect and rebalance a Shardhouse cluster directly
//! through etcd and the nodes' Admin API (no Kubernetes needed), using the
//! same planner as the operator; backs a cluster up and restores it
//! (`backup`, `restore`; docs/operations.md, "Backups").

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use shardhouse_common::credential::ClusterToken;
use shardhouse_common::proto::{RebuildReplicaRequest, ShardStatesRequest};
use shardhouse_common::shard_map::ShardMap;
use shardhouse_operator::backup::{self, Knobs, Options as RunOptions};
use shardhouse_operator::rebalance::{ClusterMeta, Executor};
use shardhouse_operator::status;
use shardhouse_operator::{node_client, planner};
use std::io::Write;

#[derive(Parser, Debug)]
#[command(version, about = "Inspect and rebalance a Shardhouse cluster")]
struct Options {
    /// etcd client URLs, comma separated.
    #[arg(
        long,
        env = "SHARDHOUSE_ETCD",
        default_value = "http://127.0.0.1:2379",
        value_delimiter = ','
    )]
    etcd: Vec<String>,
    /// Cluster name (the `/shardhouse/<cluster>/` prefix).
    #[arg(long, env = "SHARDHOUSE_CLUSTER", default_value = "local")]
    cluster: String,
    /// File with the cluster credential the nodes require (without it:
    /// $SHARDHOUSE_CLUSTER_TOKEN, else none).
    #[arg(long, env = "SHARDHOUSE_CLUSTER_TOKEN_FILE")]
    cluster_token_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Shard map epoch, nodes, per-node replica and leader counts, health.
    Status {
        /// Print the status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Plan (and unless --dry-run, run) the moves that balance the shards
    /// over the given nodes (default: every registered node).
    Rebalance {
        /// Node ids that should hold replicas; replicas on others are drained.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<u64>,
        /// Print the plan only.
        #[arg(long)]
        dry_run: bool,
        /// Seconds to wait for one learner to catch up.
        #[arg(long, default_value_t = 300)]
        catch_up_timeout: u64,
    },
    /// Rebuild one node's replica of a shard from its leader's snapshot
    /// (a replica stuck on an entry, or suspected wrong); waits until the
    /// snapshot is restored.
    RebuildReplica {
        #[arg(long)]
        shard: u32,
        /// Node id holding the replica to rebuild.
        #[arg(long)]
        node: u64,
        /// Seconds to wait for the rebuild to finish.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
    },
    /// Back the cluster up, list or delete backups.
    Backup {
        #[command(subcommand)]
        command: BackupCommand,
    },
    /// Restore a backup into this cluster, which must be new and empty and
    /// have the backup's shard count (any node count and rf).
    Restore {
        /// Destination the backup is in (directory, file:///dir or
        /// s3://bucket/prefix?endpoint=...&region=...&path_style=true).
        #[arg(long)]
        from: String,
        /// Backup id (default: the newest).
        #[arg(long)]
        backup: Option<String>,
        /// Restore only this database (its tables and series catalog); the
        /// backup's other databases are skipped.
        #[arg(long)]
        database: Option<String>,
        /// Download rate limit per node, MB/s (10^6 bytes), shared by the
        /// shards a node restores at once (default: none).
        #[arg(long, value_parser = parse_mb_s)]
        max_mb_s: Option<f64>,
        #[command(flatten)]
        knobs: KnobArgs,
    },
}

#[derive(Subcommand, Debug)]
enum BackupCommand {
    /// Back up every shard from one replica; the manifest is written last.
    Create {
        /// Destination (directory, file:///dir or s3://bucket/prefix?...).
        #[arg(long)]
        to: String,
        /// Backup id (default: b-<UTC time>).
        #[arg(long)]
        id: Option<String>,
        /// Upload rate limit per node, MB/s (10^6 bytes), shared by the
        /// shards a node backs up at once (default: none).
        #[arg(long, value_parser = parse_mb_s)]
        max_mb_s: Option<f64>,
        #[command(flatten)]
        knobs: KnobArgs,
    },
    /// The backups at a destination.
    List {
        #[arg(long)]
        at: String,
    },
    /// Delete backups by id, or keep the newest N; objects a kept backup
    /// names are never deleted.
    Delete {
        #[arg(long)]
        at: String,
        /// Backup ids to delete.
        #[arg(long, value_delimiter = ',', required_unless_present = "keep")]
        id: Vec<String>,
        /// Keep the newest N backups, delete the others.
        #[arg(long, conflicts_with = "id")]
        keep: Option<usize>,
    },
}

/// How much of the cluster's I/O a backup or restore takes.
#[derive(clap::Args, Debug)]
struct KnobArgs {
    /// Shards backed up or restored at once.
    #[arg(long, default_value_t = 2)]
    parallel_shards: usize,
    /// Files each node transfers at once (0: the destination's default,
    /// 4 for a directory, 8 for S3, whose requests wait on round trips).
    #[arg(long, default_value_t = 0)]
    jobs: u32,
}

impl KnobArgs {
    fn knobs(&self) -> Knobs {
        Knobs {
            parallel_shards: self.parallel_shards,
            jobs: self.jobs,
        }
    }
}

/// Progress redrawn in place when stdout is a terminal, lines otherwise.
fn run_options() -> RunOptions {
    use std::io::IsTerminal;
    RunOptions {
        live_progress: std::io::stdout().is_terminal(),
        ..RunOptions::default()
    }
}

/// `--max-mb-s`: MB/s as the library takes it (0: none; a rate so low
/// that a shard cannot finish, or that rounds to no limit, is refused).
fn parse_mb_s(s: &str) -> Result<f64, String> {
    let v = s.parse::<f64>().map_err(|_| {
        format!("--max-mb-s {s:?}: a number of MB/s (10^6 bytes per second), e.g. 50")
    })?;
    backup::max_bytes_per_sec("--max-mb-s", v)?;
    Ok(v)
}

/// A `--max-mb-s` that `parse_mb_s` accepted, in bytes per second.
fn mb_s_to_bytes(v: f64) -> u64 {
    backup::max_bytes_per_sec("--max-mb-s", v).unwrap_or(0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let opts = Options::parse();
    let token = ClusterToken::load(opts.cluster_token_file.as_deref())?;
    // Not locked: the backup functions take a `Send` writer.
    let mut out = std::io::stdout();
    // Listing and deleting need only the destination, not the cluster.
    match &opts.command {
        Command::Backup {
            command: BackupCommand::List { at },
        } => {
            backup::list(at, &mut out).await?;
            return Ok(());
        }
        Command::Backup {
            command: BackupCommand::Delete { at, id, keep },
        } => {
            backup::delete(at, id, *keep, &mut out).await?;
            return Ok(());
        }
        _ => {}
    }
    let mut meta = ClusterMeta::connect(&opts.etcd, &opts.cluster)
        .await?
        .with_node_token(token);
    match opts.command {
        Command::Status { json } => {
            print_status(&mut meta, &opts.cluster, json, &mut out).await?;
        }
        Command::Rebalance {
            nodes,
            dry_run,
            catch_up_timeout,
        } => {
            rebalance(
                meta,
                &opts.cluster,
                nodes,
                dry_run,
                catch_up_timeout,
                &mut out,
            )
            .await?;
        }
        Command::Backup { command } => match command {
            BackupCommand::Create {
                to,
                id,
                max_mb_s,
                knobs,
            } => {
                let opts = RunOptions {
                    max_bytes_per_sec: max_mb_s.map_or(0, mb_s_to_bytes),
                    ..run_options()
                };
                backup::create_with(&mut meta, &to, id, &knobs.knobs(), &opts, &mut out).await?;
            }
            // Handled before connecting to etcd; kept for completeness.
            BackupCommand::List { at } => {
                backup::list(&at, &mut out).await?;
            }
            BackupCommand::Delete { at, id, keep } => {
                backup::delete(&at, &id, keep, &mut out).await?;
            }
        },
        Command::Restore {
            from,
            backup: id,
            database,
            max_mb_s,
            knobs,
        } => {
            let opts = RunOptions {
                database,
                max_bytes_per_sec: max_mb_s.map_or(0, mb_s_to_bytes),
                ..run_options()
            };
            backup::restore_with(&mut meta, &from, id, &knobs.knobs(), &opts, &mut out).await?;
        }
        Command::RebuildReplica {
            shard,
            node,
            timeout,
        } => {
            rebuild_replica(&mut meta, shard, node, timeout, &mut out).await?;
        }
    }
    Ok(())
}

/// The cluster's shard map as etcd holds it, or an error naming the cluster.
async fn current_shard_map(meta: &mut ClusterMeta, cluster: &str) -> anyhow::Result<ShardMap> {
    let (map, _) = meta
        .shard_map()
        .await?
        .with_context(|| format!("no shard map for cluster {cluster:?}"))?;
    Ok(map)
}

/// `status`: the shard map's epoch and health, and replicas and leaders
/// per node, as a table or JSON.
async fn print_status(
    meta: &mut ClusterMeta,
    cluster: &str,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let map = current_shard_map(meta, cluster).await?;
    let live = meta.live_nodes().await?;
    let live_ids = live.keys().copied().collect();
    let healthy = status::healthy_shards(&map, &live_ids);
    let counts = planner::counts(&map);
    if json {
        let v = serde_json::json!({
            "cluster": cluster,
            "epoch": map.epoch,
            "shardCount": map.shard_count,
            "replicationFactor": map.replication_factor,
            "healthyShards": healthy,
            "liveNodes": live.keys().collect::<Vec<_>>(),
            "nodes": counts.iter().map(|(id, (s, l))| serde_json::json!({
                "nodeId": id, "shards": s, "leaders": l, "live": live.contains_key(id),
                "grpcAddr": live.get(id).or(map.nodes.get(id)).map(|n| n.grpc_addr.clone()),
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(
            out,
            "cluster {} epoch {} shards {} rf {} healthy {healthy}/{}",
            cluster, map.epoch, map.shard_count, map.replication_factor, map.shard_count
        )?;
        writeln!(
            out,
            "{:>6} {:>6} {:>8} {:>5}  addr",
            "node", "shards", "leaders", "live"
        )?;
        for (id, (s, l)) in &counts {
            let addr = live
                .get(id)
                .or(map.nodes.get(id))
                .map_or("-", |n| n.grpc_addr.as_str());
            writeln!(
                out,
                "{id:>6} {s:>6} {l:>8} {:>5}  {addr}",
                live.contains_key(id)
            )?;
        }
    }
    Ok(())
}

/// `rebalance`: prints the plan, then (unless a dry run) runs its moves
/// one at a time.
async fn rebalance(
    mut meta: ClusterMeta,
    cluster: &str,
    nodes: Vec<u64>,
    dry_run: bool,
    catch_up_timeout: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let map = current_shard_map(&mut meta, cluster).await?;
    let nodes = if nodes.is_empty() {
        meta.live_nodes().await?.keys().copied().collect()
    } else {
        nodes
    };
    let moves = planner::plan(&map, &nodes)?;
    writeln!(out, "{} moves over nodes {nodes:?}", moves.len())?;
    for (i, mv) in moves.iter().enumerate() {
        writeln!(out, "{:>4} {}", i + 1, serde_json::to_string(mv)?)?;
    }
    if dry_run || moves.is_empty() {
        return Ok(());
    }
    let mut exec = Executor::new(meta);
    exec.catch_up_timeout = std::time::Duration::from_secs(catch_up_timeout);
    let started = std::time::Instant::now();
    for (i, mv) in moves.iter().enumerate() {
        let t0 = std::time::Instant::now();
        exec.execute(mv)
            .await
            .with_context(|| format!("move {} of {}: {mv:?}", i + 1, moves.len()))?;
        writeln!(
            out,
            "done {}/{} in {:.1} s",
            i + 1,
            moves.len(),
            t0.elapsed().as_secs_f64()
        )?;
    }
    // Scripts (chaos, soak) read this line: how long the moves took
    // and how many steps the nodes refused for now and were tried again.
    writeln!(
        out,
        "rebalance moves={} secs={:.1} retries={}",
        moves.len(),
        started.elapsed().as_secs_f64(),
        exec.retries
    )?;
    Ok(())
}

/// `rebuild-replica`: starts the rebuild on the node, then polls its shard
/// states until the replica is rebuilt or `timeout` seconds passed.
async fn rebuild_replica(
    meta: &mut ClusterMeta,
    shard: u32,
    node: u64,
    timeout: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let live = meta.live_nodes().await?;
    let info = live
        .get(&node)
        .with_context(|| format!("node {node} is not registered (live) in etcd"))?;
    let rpc_timeout = std::time::Duration::from_secs(10);
    let token = meta.node_token.as_ref();
    let mut admin = node_client::admin_client(&info.grpc_addr, token, rpc_timeout)
        .await
        .with_context(|| format!("cannot reach node {node} at {}", info.grpc_addr))?;
    let reply = admin
        .rebuild_replica(RebuildReplicaRequest { shard })
        .await?
        .into_inner();
    anyhow::ensure!(reply.ok, "node {node}: {}", reply.message);
    writeln!(out, "node {node} shard {shard}: rebuild started")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(timeout);
    loop {
        let states = admin
            .shard_states(ShardStatesRequest {})
            .await?
            .into_inner();
        let st = states
            .shards
            .iter()
            .find(|s| s.shard == shard)
            .with_context(|| format!("node {node} no longer holds shard {shard}"))?;
        if st.rebuilding.is_empty() {
            writeln!(
                out,
                "node {node} shard {shard}: rebuilt, applied index {}",
                st.applied_index
            )?;
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "node {node} shard {shard}: still rebuilding after {timeout} s (apply: {})",
            if st.apply_stalled.is_empty() {
                "ok"
            } else {
                &st.apply_stalled
            }
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    Ok(())
}
