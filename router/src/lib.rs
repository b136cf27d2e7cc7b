//! shardhouse-router: the stateless front door. Parses writes (InfluxDB line
//! protocol, msgpack, Prometheus remote_write, gRPC) straight into columns,
//! hashes series, splits by shard and forwards one Arrow IPC batch per
//! (shard, measurement) to the shard leader; fans SELECTs out for read-back.
//!
//! The tree follows a request (docs/architecture.md, "Router"):
//! [`routes`] maps each HTTP path to a thin handler in [`http`] (and
//! [`grpc`] is the gRPC door); every door checks the token with [`auth`]
//! and shares [`state::Router`]. Writes go through [`write`] (parse, admit,
//! split into shard batches) and [`cluster::write`] (reserve, queue,
//! forward to the shard leader); reads through [`read`] (InfluxQL and SQL
//! planned onto the shards, merged) and [`cluster::read`]. Modules only
//! import downwards: http/grpc -> state -> read/write -> cluster -> write's
//! batches and queues; `scripts/check-module-cycles.py` keeps it so.

pub mod auth;
pub mod cluster;
pub mod config;
pub mod cq;
pub mod error;
pub mod grpc;
pub mod http;
pub mod meta_kv;
pub mod metrics;
pub mod policy;
pub mod read;
pub mod routes;
/// The `/api/v1/sql` statement check, shared with the nodes' planned reads.
pub use shardhouse_common::sql_check;
pub mod state;
pub mod tls;
pub mod write;

pub use error::{Error, Result};

use axum::serve::ListenerExt as _;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;

/// A serving router (HTTP + gRPC listeners).
pub struct RunningRouter {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub router: Arc<state::Router>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningRouter {
    /// The line scripts and tests wait for (docs/contracts.md).
    pub fn ready_line(&self) -> String {
        format!(
            "READY shardhouse-router http={} grpc={}",
            self.http_addr, self.grpc_addr
        )
    }

    /// Stops serving (tests).
    pub fn abort(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }

    /// Waits until a listener task ends (it only ends on error).
    pub async fn wait(&mut self) {
        if !self.tasks.is_empty() {
            let (ended, _, _) = futures::future::select_all(self.tasks.iter_mut()).await;
            if let Err(e) = ended {
                tracing::error!(error = %e, "listener task failed");
            }
        }
    }
}

impl Drop for RunningRouter {
    fn drop(&mut self) {
        self.abort();
    }
}

/// Binds both listeners (port 0 allowed) and serves until aborted.
pub async fn start(
    options: config::RouterOptions,
    cluster: Arc<cluster::Cluster>,
) -> Result<RunningRouter> {
    let http_listener = bind("http_listen", &options.http_listen).await?;
    let grpc_listener = bind("grpc_listen", &options.grpc_listen).await?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|e| Error::Internal(e.to_string()))?;
    // Both listeners speak TLS when a certificate is configured (validate()
    // checked the two files go together).
    let tls = match (&options.tls_cert_file, &options.tls_key_file) {
        (Some(cert), Some(key)) => Some(tls::RouterTls::start(
            cert.clone(),
            key.clone(),
            tls::RELOAD_POLL,
        )?),
        _ => None,
    };
    let router = Arc::new(state::Router::new(options.clone(), cluster)?);
    spawn_watchers(&router, &options);
    let (http_tls, grpc_tls) = match tls {
        Some(t) => (Some(t.http), Some(t.grpc)),
        None => (None, None),
    };
    let http_task = serve_http(http_listener, routes::app(router.clone()), http_tls)?;
    let grpc_task = serve_grpc(grpc_listener, router.clone(), grpc_tls);
    Ok(RunningRouter {
        http_addr,
        grpc_addr,
        router,
        tasks: vec![http_task, grpc_task],
    })
}

/// Binds the listener of option `what` (port 0 allowed).
async fn bind(what: &str, addr: &str) -> Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Config(format!("binding {what} {addr}: {e}")))
}

/// The background tasks every router runs: retention policies, continuous
/// queries, token and user reloads.
fn spawn_watchers(router: &Arc<state::Router>, options: &config::RouterOptions) {
    tokio::spawn(router.policies.clone().watch());
    tokio::spawn(cq::runner::run(router.clone(), read::influx::run_cq_select));
    // A rotated tokens Secret is picked up like a renewed certificate.
    router
        .auth
        .reload_on_change(options.token_sources(), tls::RELOAD_POLL);
    // InfluxDB users: every router follows the records in etcd.
    tokio::spawn(auth::users_etcd::watch_users(
        router.auth.users().clone(),
        options.etcd_endpoints.clone(),
        options.cluster.clone(),
    ));
}

/// Serves the HTTP API on `listener`, over TLS when `tls` is set.
fn serve_http(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: Option<tls::ReloadingConfig>,
) -> Result<JoinHandle<()>> {
    Ok(match tls {
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config)
                .map_err(|e| Error::Internal(e.to_string()))?;
            let listener = http::lenient::LenientListener(listener);
            tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "https server stopped");
                }
            })
        }
        None => tokio::spawn(async move {
            // No Nagle: a response written in pieces must not wait for the
            // client's delayed ACK (~40 ms per request at low load).
            let listener = http::lenient::LenientListener(listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            }));
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "http server stopped");
            }
        }),
    })
}

/// Serves the gRPC ingest service on `listener`, over TLS when `tls` is
/// set.
fn serve_grpc(
    listener: tokio::net::TcpListener,
    router: Arc<state::Router>,
    tls: Option<tls::ReloadingConfig>,
) -> JoinHandle<()> {
    let svc = grpc::server(router);
    match tls {
        Some(config) => {
            let incoming =
                tokio_stream::wrappers::ReceiverStream::new(tls::accept_tls(listener, config))
                    .map(|(conn, _)| Ok::<_, std::io::Error>(conn));
            tokio::spawn(async move {
                if let Err(e) = tonic::transport::Server::builder()
                    .add_service(svc)
                    .serve_with_incoming(incoming)
                    .await
                {
                    tracing::error!(error = %e, "grpc (TLS) server stopped");
                }
            })
        }
        None => tokio::spawn(async move {
            // tonic's own tcp_nodelay applies only to listeners it binds.
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|tcp| {
                if let Ok(tcp) = &tcp {
                    let _ = tcp.set_nodelay(true);
                }
                tcp
            });
            if let Err(e) = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming)
                .await
            {
                tracing::error!(error = %e, "grpc server stopped");
            }
        }),
    }
}
