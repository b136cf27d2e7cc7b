//! shardhouse-operator: reconciles ShardhouseCluster, ShardhouseBackup and
//! ShardhouseRestore resources and serves `/metrics`, `/health` and `/ready`.

use anyhow::Context as _;
use axum::{routing::get, Router};
use clap::Parser;
use shardhouse_operator::{backup_controller, controller, metrics};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Kubernetes operator for ShardhouseCluster, ShardhouseBackup and ShardhouseRestore"
)]
struct Options {
    /// Address for /metrics, /health and /ready.
    #[arg(
        long,
        env = "SHARDHOUSE_OPERATOR_HTTP_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    http_listen: String,
    /// Print the metrics this process exports (Prometheus text) and exit;
    /// the dashboard check compares panel queries against it.
    #[arg(long)]
    print_metrics: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let opts = Options::parse();
    metrics::init();
    if opts.print_metrics {
        use std::io::Write;
        std::io::stdout().write_all(metrics::render().as_bytes())?;
        return Ok(());
    }
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes config: run in a pod or set KUBECONFIG")?;
    // Every request passes a counter (shardhouse_operator_api_requests_total).
    let client = kube::client::ClientBuilder::try_from(config)
        .context("Kubernetes client")?
        .with_layer(&tower::util::MapRequestLayer::new(
            metrics::count_api_request,
        ))
        .build();

    let listener = tokio::net::TcpListener::bind(&opts.http_listen)
        .await
        .with_context(|| format!("bind {}", opts.http_listen))?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(|| async { metrics::render() }))
        .route("/health", get(|| async { "ok" }))
        .route("/ready", get(|| async { "ok" }));
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    #[allow(clippy::print_stdout)]
    {
        println!("READY shardhouse-operator http={addr}");
    }
    // ShardhouseCluster, and ShardhouseBackup / ShardhouseRestore.
    tokio::join!(
        controller::run(client.clone()),
        backup_controller::run(client)
    );
    server.abort();
    Ok(())
}
