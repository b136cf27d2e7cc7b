//! Wires one node process together: engine, WAL, transport, gRPC and HTTP
//! servers, etcd; and takes it apart again on shutdown.

use crate::admission::Admission;
use crate::cluster;
use crate::context::NodeContext;
use crate::directory::PeerDirectory;
use crate::error::{NodeError, Result};
use crate::options::NodeOptions;
use crate::services;
use crate::state_machine::EngineStateMachine;
use crate::transport::GrpcTransport;
use axum::serve::ListenerExt as _;
use parking_lot::RwLock;
use shardhouse_common::credential::ClusterToken;
use shardhouse_common::shard_map::NodeInfo;
use shardhouse_engine::{Engine, EngineConfig};
use shardhouse_wal::{Wal, WalConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt as _;

/// What the READY line reports.
#[derive(Debug, Clone)]
pub struct Listening {
    pub node_id: u64,
    /// Advertised gRPC address (advertise host + bound port).
    pub grpc: String,
    pub http: String,
}

async fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| NodeError::Bind {
        addr: addr.to_owned(),
        reason: e.to_string(),
    })
}

/// Runs the node until `shutdown` resolves; `on_ready` is called once the
/// engine is open, both servers listen and the node is registered.
pub async fn run(
    opts: NodeOptions,
    on_ready: impl FnOnce(&Listening),
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let cores = opts.effective_cores();
    let engine = open_engine(
        engine_config(&opts, cores),
        opts.engine_verify_parts_at_start,
    )
    .await?;

    let cluster_token = ClusterToken::load(opts.cluster_token_file.as_deref())
        .map_err(|e| NodeError::InvalidOptions(e.to_string()))?;
    if cluster_token.is_none() {
        tracing::warn!("no cluster credential configured: node gRPC accepts any caller");
    }
    let directory = Arc::new(PeerDirectory::default());
    let transport = GrpcTransport::new(opts.node_id, Arc::clone(&directory), cluster_token.clone());
    let mut wal_cfg = wal_config(&opts);
    crate::faults::apply_disk_env(opts.node_id, &mut wal_cfg);
    let sm = EngineStateMachine::new(Arc::clone(&engine), opts.node_id);
    let wal = {
        let transport = Arc::clone(&transport);
        tokio::task::spawn_blocking(move || Wal::open(wal_cfg, transport, sm))
            .await
            .map_err(|e| NodeError::Serve(e.to_string()))??
    };
    transport.attach_wal(&wal);
    crate::priority::spawn_sweeper(opts.background_nice, Duration::from_secs(1))
        .map_err(|e| NodeError::Serve(format!("cannot start the priority sweeper: {e}")))?;
    crate::memory::spawn_trimmer(Duration::from_secs(opts.malloc_trim_secs))
        .map_err(|e| NodeError::Serve(format!("cannot start the malloc-trim thread: {e}")))?;

    let ctx = Arc::new(NodeContext {
        node_id: opts.node_id,
        wal: Arc::clone(&wal),
        engine: Arc::clone(&engine),
        admission: Admission::new(opts.max_inflight_bytes),
        directory,
        shard_map: RwLock::new(None),
        ready: AtomicBool::new(false),
        cluster_token: cluster_token.clone(),
    });

    let grpc_listener = bind(&opts.grpc_listen).await?;
    let http_listener = bind(&opts.http_listen).await?;
    let grpc_local: SocketAddr = grpc_listener
        .local_addr()
        .map_err(|e| NodeError::Serve(e.to_string()))?;
    let http_local: SocketAddr = http_listener
        .local_addr()
        .map_err(|e| NodeError::Serve(e.to_string()))?;
    let listening = Listening {
        node_id: opts.node_id,
        grpc: format!("{}:{}", opts.advertise_host, grpc_local.port()),
        http: format!("{}:{}", opts.advertise_host, http_local.port()),
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let grpc_task = tokio::spawn(serve_grpc(
        &ctx,
        grpc_listener,
        cluster_token,
        stop_rx.clone(),
    ));
    let http_task = tokio::spawn(serve_http(&ctx, http_listener, stop_rx));
    join_cluster(&opts, &ctx, &listening, cores).await?;

    ctx.ready.store(true, Ordering::Release);
    tracing::info!(node_id = opts.node_id, grpc = %listening.grpc, http = %listening.http, "node serving");
    on_ready(&listening);

    tokio::select! {
        () = shutdown => tracing::info!("shutdown requested"),
        r = grpc_task => return Err(NodeError::Serve(format!("gRPC server stopped: {r:?}"))),
    }
    ctx.ready.store(false, Ordering::Release);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), http_task).await;
    final_flush(wal, engine).await;
    Ok(())
}

/// The engine's settings from the node's options.
fn engine_config(opts: &NodeOptions, cores: u32) -> EngineConfig {
    EngineConfig {
        data_dir: opts.data_dir.join("engine"),
        chdb_dir: opts.chdb_dir.clone(),
        pool_size: if opts.pool_size == 0 {
            cores as usize
        } else {
            opts.pool_size
        },
        flush_max_rows: opts.flush_max_rows,
        flush_max_age: Duration::from_millis(opts.flush_max_age_ms),
        default_retention: (opts.default_retention_secs > 0)
            .then(|| Duration::from_secs(opts.default_retention_secs)),
        retention_check_interval: Duration::from_millis(opts.retention_check_interval_ms),
        reads_always_final: opts.engine_reads_always_final,
        rollups: opts.engine_rollups,
        // validate() refused any other name.
        fact_order: shardhouse_engine::layout::FactOrder::parse(&opts.engine_fact_order)
            .unwrap_or_default(),
    }
}

/// The WAL's settings from the node's options.
fn wal_config(opts: &NodeOptions) -> WalConfig {
    WalConfig {
        node_id: opts.node_id,
        dir: opts.data_dir.join("wal"),
        tick_interval: Duration::from_millis(opts.raft_tick_ms),
        election_ticks: opts.raft_election_ticks,
        heartbeat_ticks: opts.raft_heartbeat_ticks,
        max_inflight_bytes_per_shard: opts.max_inflight_bytes_per_shard,
        poll_threads: opts.wal_poll_threads,
        apply_threads: opts.wal_apply_threads,
        write_buffer_bytes: opts.wal_write_buffer_bytes,
        follower_log_retention_bytes: opts.wal_follower_log_retention_bytes,
        rebuild_after_failed_applies: opts.wal_rebuild_after_failed_applies,
        ..WalConfig::default()
    }
}

/// Loads chDB and opens the engine (off the async threads), then clears a
/// stopped backup's files and, if asked, verifies the parts.
async fn open_engine(engine_cfg: EngineConfig, verify_parts: bool) -> Result<Arc<Engine>> {
    let engine = tokio::task::spawn_blocking(move || {
        crate::preload::preload_chdb(engine_cfg.chdb_dir.as_deref())?;
        let engine = Engine::open(engine_cfg).map_err(NodeError::from)?;
        if let Err(e) = engine.clear_backup_leftovers() {
            tracing::warn!(error = %e, "cannot remove a stopped backup's files");
        }
        // Before the WAL opens, so no read reaches a damaged part.
        if verify_parts {
            if let Err(e) = engine.verify_parts() {
                tracing::error!(error = %e, "cannot verify the engine's parts");
            }
        }
        Ok::<_, NodeError>(engine)
    })
    .await
    .map_err(|e| NodeError::Serve(e.to_string()))??;
    Ok(Arc::new(engine))
}

/// Resolves once `rx` sees `true`: the servers' shutdown signal.
async fn stopped(mut rx: tokio::sync::watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// The node's gRPC services (data, raft, admin, backup) behind the cluster
/// credential check, until `stop` turns true.
fn serve_grpc(
    ctx: &Arc<NodeContext>,
    listener: TcpListener,
    cluster_token: Option<ClusterToken>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = std::result::Result<(), tonic::transport::Error>> {
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(8 << 20))
        .initial_connection_window_size(Some(32 << 20))
        .layer(tonic::service::InterceptorLayer::new(
            crate::auth::RequireCredential::new(cluster_token),
        ))
        .add_service(services::node_server(Arc::clone(ctx)))
        .add_service(services::raft_server(Arc::clone(ctx)))
        .add_service(services::admin_server(Arc::clone(ctx)))
        .add_service(crate::backup::backup_server(Arc::clone(ctx)))
        .serve_with_incoming_shutdown(
            // tcp_nodelay above applies only to listeners tonic binds itself;
            // without it HTTP/2 frames wait on delayed ACKs (~40 ms).
            TcpListenerStream::new(listener).map(|tcp| {
                if let Ok(tcp) = &tcp {
                    let _ = tcp.set_nodelay(true);
                }
                tcp
            }),
            stopped(stop),
        )
}

/// The node's HTTP API (health, metrics, admin) until `stop` turns true.
fn serve_http(
    ctx: &Arc<NodeContext>,
    listener: TcpListener,
    stop: tokio::sync::watch::Receiver<bool>,
) -> impl Future<Output = std::io::Result<()>> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let http = axum::serve(listener, crate::http::router(Arc::clone(ctx)))
        .with_graceful_shutdown(stopped(stop));
    async move { http.await }
}

/// Registers the node in etcd and starts the tasks that follow the
/// cluster: the shard map, leader hints, engine damage, leader balancing
/// and, with `--init-cluster`, the cluster's first shard map.
async fn join_cluster(
    opts: &NodeOptions,
    ctx: &Arc<NodeContext>,
    listening: &Listening,
    cores: u32,
) -> Result<()> {
    let me = NodeInfo {
        node_id: opts.node_id,
        grpc_addr: listening.grpc.clone(),
        http_addr: listening.http.clone(),
        cores,
    };
    let client = cluster::connect(&opts.etcd_endpoints, Duration::from_secs(30)).await?;
    cluster::register(
        client.clone(),
        opts.cluster.clone(),
        me.clone(),
        opts.lease_ttl_secs,
    )
    .await?;
    tokio::spawn(cluster::watch(
        Arc::clone(ctx),
        client.clone(),
        opts.cluster.clone(),
    ));
    tokio::spawn(cluster::publish_leader_hints(
        Arc::clone(ctx),
        client.clone(),
        opts.cluster.clone(),
        me,
    ));
    tokio::spawn(crate::engine_damage::run(
        Arc::clone(ctx),
        Duration::from_millis(500),
    ));
    if opts.leader_balance_interval_ms > 0 {
        tokio::spawn(crate::leadership::run(
            Arc::clone(ctx),
            Duration::from_millis(opts.leader_balance_interval_ms),
        ));
    }
    if let Some(init) = opts.init_cluster {
        let (client, name) = (client.clone(), opts.cluster.clone());
        tokio::spawn(async move {
            if let Err(e) =
                cluster::init_cluster(client, name, init.shards, init.rf, init.nodes).await
            {
                tracing::error!(error = %e, "initialising the cluster failed");
            }
        });
    }
    Ok(())
}

/// Stops the log first so nothing is applied after the final flush; what
/// was committed but not flushed is replayed from the WAL on restart.
async fn final_flush(wal: Arc<Wal>, engine: Arc<Engine>) {
    let flush = tokio::task::spawn_blocking(move || {
        wal.shutdown();
        engine.flush_all()
    });
    match flush.await {
        Ok(Ok(())) => tracing::info!("engine flushed; bye"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "final flush failed; the WAL replays it on restart")
        }
        Err(e) => tracing::error!(error = %e, "final flush panicked"),
    }
}
