//! `sigx`: the command line of the sigx actor runtime.
//!
//! * `sigx call <Type>/<key> <method> [json]`: call an actor through a sidecar.
//! * `sigx actors where <Type>/<key>` / `sigx actors list <Type>`: where an actor is active,
//!   and the live activations of a type across the fleet.
//! * `sigx status`: what a sidecar knows about itself and the fleet; `sigx status --kubernetes`:
//!   what the Kubernetes API records about a cluster (its ActorCluster status and Leases).
//! * `sigx dev up`: a local cluster of sidecars and counter apps on this machine.
//! * `sigx dashboard`: a live web page of the fleet (hosts, activations, counters, latency) with
//!   an actor search, served on 127.0.0.1.
//!
//! Exit codes: 0 success; 1 the call (or the dev workload check) failed; 2 bad usage; 3 the
//! sidecar could not be reached.
#![forbid(unsafe_code)]

mod actors;
mod call;
mod dashboard;
mod dev;
mod duration;
mod kubernetes;
mod status;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// The sidecar could not be reached (nothing listens on the socket).
pub const EXIT_UNREACHABLE: u8 = 3;
/// The command did run, and what it did failed (an actor error, a failed check).
pub const EXIT_FAILED: u8 = 1;
/// Bad usage (what clap uses too).
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "sigx",
    version,
    about = "The sigx actor runtime: call actors, find and list them, read status, watch the \
             fleet on a dashboard, run a local cluster"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the sidecar is.
#[derive(Debug, Clone, clap::Args)]
pub struct SocketArg {
    /// The sidecar's Unix socket.
    #[arg(long, env = "SIGX_SOCKET", default_value = sigx_sdk::DEFAULT_SOCKET)]
    pub socket: PathBuf,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Call a method on an actor (or worker) and print the reply.
    Call(call::CallArgs),
    /// Find actors: `where Counter/alice` (its host and activation) or `list Counter` (every
    /// live activation of the type across the fleet, from the directory owners).
    Actors {
        #[command(subcommand)]
        command: actors::ActorsCommand,
    },
    /// Show a sidecar's host, state, types, activations, counters and its view of the fleet (or,
    /// with --kubernetes, a cluster's ActorCluster status and Leases from the Kubernetes API).
    Status(status::StatusArgs),
    /// Serve a live web page of the fleet: hosts (state, node, reachability), activations per
    /// type, counters, call latency, fenced hosts, partitions recovering, and an actor search.
    /// Point it at a `sigx dev up` directory (--dir) or at sidecar sockets (--socket); it
    /// listens on 127.0.0.1:7400 by default (--listen).
    Dashboard(dashboard::DashboardArgs),
    /// Local development.
    Dev {
        #[command(subcommand)]
        command: DevCommand,
    },
}

#[derive(Debug, Subcommand)]
enum DevCommand {
    /// Start a local cluster on 127.0.0.1: sidecars, each with a counter app or your own (--app).
    Up(dev::UpArgs),
}

/// The values of one repeatable option of `m`, each with its position on the command line.
fn ordered(m: &clap::ArgMatches, id: &str) -> Vec<(usize, String)> {
    match (m.indices_of(id), m.get_many::<String>(id)) {
        (Some(at), Some(values)) => at.zip(values.cloned()).collect(),
        _ => Vec::new(),
    }
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `--actors` / `--workers` qualify the `--app` before them: only the order says which.
    if let Command::Dev {
        command: DevCommand::Up(args),
    } = &mut cli.command
        && let Some(up) = matches
            .subcommand_matches("dev")
            .and_then(|m| m.subcommand_matches("up"))
    {
        match dev::pair_apps(
            &ordered(up, "apps"),
            &ordered(up, "actors"),
            &ordered(up, "workers"),
        ) {
            Ok(specs) => args.app_specs = specs,
            Err(e) => {
                eprintln!("sigx dev up: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
        }
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIGX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sigx: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    rt.block_on(async move {
        match cli.command {
            Command::Call(args) => call::run(args).await,
            Command::Actors { command } => actors::run(command).await,
            Command::Status(args) => status::run(args).await,
            Command::Dashboard(args) => dashboard::run(args).await,
            Command::Dev {
                command: DevCommand::Up(args),
            } => dev::up(args).await,
        }
    })
}
