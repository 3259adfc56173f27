//! `sigx-operator`: parses its configuration, binds its metrics port, then runs the
//! controllers under leader election until SIGTERM.
#![forbid(unsafe_code)]

use anyhow::Context as _;
use clap::Parser;
use sigx_operator::config::Cli;
use sigx_operator::{Operator, server};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let settings = match cli.settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sigx-operator: {e}");
            std::process::exit(2);
        }
    };
    let listener = tokio::net::TcpListener::bind(cli.metrics_addr)
        .await
        .with_context(|| format!("binding the metrics address {}", cli.metrics_addr))?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    tracing::info!(identity = %settings.identity, namespace = ?settings.namespace, "sigx-operator starting");
    let operator = Operator::new(client, settings);
    let metrics = operator.metrics();
    let leading = operator.leading();
    let shutdown = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutting down: releasing the leader Lease");
    };
    tokio::select! {
        r = operator.run(shutdown) => r.context("leader election")?,
        _ = server::serve(listener, metrics, leading) => {}
    }
    Ok(())
}
