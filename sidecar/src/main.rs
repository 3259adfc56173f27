//! `sigx-sidecar`: parses configuration (exit 64 on a bad value, before anything binds), then
//! runs one host until SIGTERM/SIGINT. A second signal skips to a fast exit.
#![forbid(unsafe_code)]

use clap::Parser;
use sigx_sidecar::config::{Args, EXIT_USAGE};
use sigx_sidecar::host::{self, Host, StopKind};
use sigx_sidecar::trace;

fn main() {
    let args = Args::parse();
    let trace_args = args.tracing.clone();
    let log_format = args.log_format;
    let cfg = match args.validate() {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("sigx-sidecar: configuration error: {e}");
            std::process::exit(EXIT_USAGE);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    sigx_sidecar::logs::init(log_format);
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cfg.worker_threads {
        rt.worker_threads(n);
    }
    let rt = rt.enable_all().build().expect("tokio runtime");
    let code = rt.block_on(async move {
        // Inside the runtime: the OTLP exporter's gRPC channel lives on it.
        let tracing = match trace::init(&trace_args, &cfg.host_id) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("sigx-sidecar: configuration error: {e}");
                return EXIT_USAGE;
            }
        };
        let code = run(cfg).await;
        // Flush the spans still queued (a blocking call: off the async threads).
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
        code
    });
    std::process::exit(code);
}

/// Runs one host until a signal (or until it cannot run); the process's exit code.
async fn run(cfg: sigx_sidecar::config::Config) -> i32 {
    {
        let host = match Host::start(cfg).await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("cannot start: {e}");
                eprintln!("sigx-sidecar: cannot start: {e}");
                return if e.is_config() { EXIT_USAGE } else { 1 };
            }
        };
        let state = host.state.clone();
        tokio::select! {
            signal = host::first_signal() => {
                if let Err(e) = signal {
                    tracing::error!("cannot install signal handlers: {e}");
                    return 1;
                }
            }
            reason = state.unusable() => {
                // Found after start-up (nothing was joined): stop at once, as for a bad flag.
                eprintln!("sigx-sidecar: cannot run: {reason}");
                host.stop(StopKind::Fast).await;
                return EXIT_USAGE;
            }
        }
        tracing::info!("stop requested: graceful stop (signal again to skip to a fast exit)");
        let cluster = host.cluster.clone();
        let stop = host.stop(StopKind::Graceful);
        tokio::pin!(stop);
        tokio::select! {
            biased;
            _ = &mut stop => {}
            _ = host::first_signal() => {
                tracing::warn!("second signal: fast exit (withdrawing the membership record first)");
                if let Some(c) = cluster.get() {
                    c.withdraw().await;
                }
            }
        }
        0
    }
}
