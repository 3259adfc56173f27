//! `sigx dashboard`: a web page, served by the CLI, that shows the fleet live.
//!
//! The data path: on every poll of the page (`/api/fleet`), the dashboard asks each sidecar it
//! knows (the sockets of a `sigx dev up` directory, or `--socket` ones) for its `Status` over
//! the app socket and, when the sidecar's health address is known (a dev directory records it
//! in `host-N/health.addr`; `--socket PATH,ADDR` names it), for its `/metrics` call-latency
//! histogram. The answers are merged into one snapshot ([`snapshot::build`]); a sidecar that
//! does not answer is shown as unreachable, never dropped. A host known only from another
//! sidecar's membership view is asked for its `/metrics` at the health address its descriptor
//! publishes (`meta.health`); one that publishes none (an older sidecar) is listed with what the
//! view says. With `--kubernetes` ([`kube`]) the hosts come from the cluster's Leases instead,
//! and each is asked only for its `/metrics`.
//!
//! Live updates are by polling, not server-sent events: every answer is a complete snapshot, so
//! a missed poll or a restarted dashboard needs no resynchronisation, the page can say how old
//! its data is (and that the dashboard itself stopped answering) from the poll's own outcome,
//! and sidecars are asked only while a page is open.

mod kube;
mod page;
mod probe;
mod scrape;
mod server;
mod snapshot;

use crate::{EXIT_FAILED, EXIT_USAGE};
use probe::Target;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  sigx dev up --hosts 3 &              # a local cluster in .sigx/
  sigx dashboard                       # then open http://127.0.0.1:7400/
  sigx dashboard --dir .sigx/dev       # the cluster of `sigx dev up --dir .sigx/dev`
  sigx dashboard --socket /tmp/a.sock,127.0.0.1:9090 --socket /tmp/b.sock
On Kubernetes (the sidecar image carries `sigx`; socket /var/run/sigx/sidecar.sock, health port
9090 by default), from one pod, seeing the fleet through that sidecar's membership view:
  kubectl exec POD -c sigx-sidecar -- sigx dashboard \\
      --socket /var/run/sigx/sidecar.sock,127.0.0.1:9090 --listen 127.0.0.1:7400
  kubectl port-forward POD 7400          # then open http://127.0.0.1:7400/
Or from anywhere with a kube config that reaches the API server and the pod network (the hosts'
health addresses are published in their Lease descriptors, meta.health = podIP:9090):
  sigx dashboard --kubernetes -n apps --cluster demo
With neither --dir nor --socket, the dashboard uses .sigx (if `sigx dev up` made it) or else
$SIGX_SOCKET / the default socket. A sidecar that does not answer is shown unreachable, not
dropped; the page polls /api/fleet (JSON) every --interval.")]
pub struct DashboardArgs {
    /// A `sigx dev up` directory: every host-N/sidecar.sock in it (re-read on every poll), with
    /// the health address dev up records in host-N/health.addr.
    #[arg(long, value_name = "DIR")]
    pub dir: Vec<PathBuf>,
    /// A sidecar's app socket, optionally with its health/metrics address after a comma
    /// (`/var/run/sigx/sidecar.sock,127.0.0.1:9090`). Repeatable.
    #[arg(long, value_name = "PATH[,ADDR]", value_parser = parse_socket)]
    pub socket: Vec<Target>,
    /// Find the hosts in the Kubernetes API (the ActorCluster and its membership Leases) and
    /// scrape each one's /metrics at the health address its descriptor publishes.
    #[arg(long, conflicts_with_all = ["dir", "socket"])]
    pub kubernetes: bool,
    /// With --kubernetes: the namespace (default: the kube config's).
    #[arg(long, short = 'n', requires = "kubernetes")]
    pub namespace: Option<String>,
    /// With --kubernetes: the ActorCluster (default: the namespace's only one).
    #[arg(long, requires = "kubernetes")]
    pub cluster: Option<String>,
    /// The address the page is served on. The default is loopback only: the page shows the
    /// fleet and finds actors for anyone who can reach it.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// How often the page polls (e.g. 500ms, 2s).
    #[arg(long, default_value = "1s", value_parser = crate::duration::parse)]
    pub interval: Duration,
    /// How long each sidecar has to answer a poll before it is shown unreachable.
    #[arg(long, default_value = "2s", value_parser = crate::duration::parse)]
    pub probe_timeout: Duration,
}

fn parse_socket(s: &str) -> Result<Target, String> {
    let (path, health) = match s.rsplit_once(',') {
        Some((path, addr)) => {
            if !probe::is_host_port(addr) {
                return Err(format!(
                    "{addr:?} is not a health address: write PATH,HOST:PORT, e.g. \
                     /var/run/sigx/sidecar.sock,127.0.0.1:9090"
                ));
            }
            (path, Some(addr.to_string()))
        }
        None => (s, None),
    };
    if path.is_empty() {
        return Err("the socket path is empty".into());
    }
    Ok(Target {
        label: path.to_string(),
        socket: Some(PathBuf::from(path)),
        health,
        host_id: None,
    })
}

/// Where the dashboard looks for sidecars.
#[derive(Debug, Clone)]
pub struct Sources {
    dirs: Vec<PathBuf>,
    sockets: Vec<Target>,
}

impl Sources {
    fn from_args(args: &DashboardArgs) -> Sources {
        let mut s = Sources {
            dirs: args.dir.clone(),
            sockets: args.socket.clone(),
        };
        if s.dirs.is_empty() && s.sockets.is_empty() {
            let dev = PathBuf::from(".sigx");
            if !dev_hosts(&dev).is_empty() {
                s.dirs.push(dev);
            } else {
                let socket = sigx_sdk::socket_from_env();
                s.sockets.push(Target {
                    label: socket.display().to_string(),
                    socket: Some(socket),
                    health: None,
                    host_id: None,
                });
            }
        }
        s
    }

    /// Every sidecar to ask now: each directory's hosts (as they are on disk now), then the
    /// sockets.
    pub fn targets(&self) -> Vec<Target> {
        let several = self.dirs.len() > 1;
        let mut out = Vec::new();
        for dir in &self.dirs {
            for (n, host_dir) in dev_hosts(dir) {
                let health = std::fs::read_to_string(host_dir.join("health.addr"))
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| probe::is_host_port(s));
                out.push(Target {
                    label: if several {
                        format!("{}/host-{n}", dir.display())
                    } else {
                        format!("host-{n}")
                    },
                    socket: Some(host_dir.join("sidecar.sock")),
                    health,
                    host_id: None,
                });
            }
        }
        out.extend(self.sockets.iter().cloned());
        out
    }

    fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .dirs
            .iter()
            .map(|d| format!("dev directory {}", d.display()))
            .collect();
        parts.extend(self.sockets.iter().map(|t| format!("socket {}", t.label)));
        parts.join(", ")
    }
}

/// The `host-N` directories of a dev directory, by N.
fn dev_hosts(dir: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut hosts: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix("host-")?.parse().ok()?;
            e.path().is_dir().then(|| (n, e.path()))
        })
        .collect();
    hosts.sort();
    hosts
}

pub async fn run(args: DashboardArgs) -> ExitCode {
    let kube = if args.kubernetes {
        // The API read of a poll gets twice a sidecar's time: it is two requests.
        let api_timeout = args.probe_timeout * 2;
        match kube::KubeSource::connect(args.namespace.clone(), args.cluster.clone(), api_timeout)
            .await
        {
            Ok(k) => Some(k),
            Err(e) => {
                eprintln!("sigx dashboard: {e}");
                return ExitCode::from(e.exit_code());
            }
        }
    } else {
        None
    };
    let sources = if kube.is_some() {
        Sources {
            dirs: Vec::new(),
            sockets: Vec::new(),
        }
    } else {
        Sources::from_args(&args)
    };
    for dir in &sources.dirs {
        if !dir.is_dir() {
            eprintln!(
                "sigx dashboard: {} is not a directory: pass the --dir of a `sigx dev up`",
                dir.display()
            );
            return ExitCode::from(EXIT_USAGE);
        }
    }
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "sigx dashboard: cannot listen on {}: {e} (pick another with --listen)",
                args.listen
            );
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let addr = listener.local_addr().unwrap_or(args.listen);
    if !addr.ip().is_loopback() {
        eprintln!(
            "sigx dashboard: warning: listening on {addr}, not loopback: anyone who can reach it \
             sees the fleet and can search its actors (the page has no login)"
        );
    }
    let asking = match &kube {
        Some(k) => k.describe(),
        None => sources.describe(),
    };
    println!(
        "sigx dashboard: http://{addr}/ (asking {asking}; polled every {})",
        crate::duration::human(args.interval)
    );
    let state = server::State::new(sources, kube, args.interval, args.probe_timeout);
    tokio::select! {
        () = server::serve(listener, state) => ExitCode::SUCCESS,
        _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_may_carry_its_health_address() {
        let t = parse_socket("/run/a.sock,127.0.0.1:9090").unwrap();
        assert_eq!(t.socket, Some(PathBuf::from("/run/a.sock")));
        assert_eq!(t.health.as_deref(), Some("127.0.0.1:9090"));
        assert_eq!(parse_socket("/run/a.sock").unwrap().health, None);
        let e = parse_socket("/run/a.sock,nope").unwrap_err();
        assert!(e.contains("PATH,HOST:PORT"), "{e}");
        assert!(parse_socket("").is_err());
    }

    #[test]
    fn a_dev_directory_yields_its_hosts_in_order_with_their_health_addresses() {
        let dir = tempfile::tempdir().unwrap();
        for n in [10, 2, 1] {
            std::fs::create_dir_all(dir.path().join(format!("host-{n}"))).unwrap();
        }
        std::fs::write(dir.path().join("host-2/health.addr"), "127.0.0.1:4242\n").unwrap();
        std::fs::create_dir_all(dir.path().join("not-a-host")).unwrap();
        std::fs::write(dir.path().join("host-3"), "a file, not a host").unwrap();
        let sources = Sources {
            dirs: vec![dir.path().to_path_buf()],
            sockets: vec![parse_socket("/run/x.sock").unwrap()],
        };
        let targets = sources.targets();
        let labels: Vec<&str> = targets.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(labels, ["host-1", "host-2", "host-10", "/run/x.sock"]);
        assert_eq!(targets[0].health, None);
        assert_eq!(targets[1].health.as_deref(), Some("127.0.0.1:4242"));
        assert_eq!(
            targets[1].socket,
            Some(dir.path().join("host-2/sidecar.sock"))
        );
    }
}
