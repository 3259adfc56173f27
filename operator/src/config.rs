//! Flags and environment of the `sigx-operator` binary, validated before anything binds.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

use crate::leader::LeaderSettings;
use crate::operator::Settings;

/// The sigx operator: reconciles ActorCluster and ActorRole resources.
#[derive(Debug, Clone, Parser)]
#[command(name = "sigx-operator", version, about)]
pub struct Cli {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "SIGX_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// This replica's identity (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Namespace of the leader Lease (the operator's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, env = "SIGX_LEADER_LEASE", default_value = "sigx-operator")]
    pub lease_name: String,
    /// Seconds a leader Lease lasts without renewal: the worst-case handover after a crash.
    #[arg(long, env = "SIGX_LEADER_LEASE_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds before expiry the leader renews.
    #[arg(long, env = "SIGX_LEADER_GRACE_SECONDS", default_value_t = 5)]
    pub lease_grace_seconds: u64,
    /// Run without leader election (only safe with exactly one replica).
    #[arg(long, env = "SIGX_NO_LEADER_ELECTION")]
    pub no_leader_election: bool,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    #[arg(long, env = "SIGX_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Server-side apply field manager.
    #[arg(long, env = "SIGX_FIELD_MANAGER", default_value = "sigx-operator")]
    pub field_manager: String,
    /// Milliseconds of quiet that coalesce bursts of changes to one object.
    #[arg(long, env = "SIGX_DEBOUNCE_MS", default_value_t = 200)]
    pub debounce_ms: u64,
    /// First retry delay after a failed reconciliation, in milliseconds (doubles per failure).
    #[arg(long, env = "SIGX_BACKOFF_BASE_MS", default_value_t = 500)]
    pub backoff_base_ms: u64,
    /// Longest retry delay, in seconds.
    #[arg(long, env = "SIGX_BACKOFF_MAX_SECONDS", default_value_t = 300)]
    pub backoff_max_seconds: u64,
}

/// A configuration value that cannot work, named with what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "SIGX_LEADER_GRACE_SECONDS ({grace}) must be at least 1 and less than SIGX_LEADER_LEASE_SECONDS ({duration})"
    )]
    LeaseTiming { duration: u64, grace: u64 },
    #[error("POD_NAME (--identity) is empty; set it to the pod name (downward API metadata.name)")]
    EmptyIdentity,
    #[error("SIGX_BACKOFF_BASE_MS must be at least 1 and SIGX_BACKOFF_MAX_SECONDS at least 1")]
    Backoff,
    #[error("SIGX_WATCH_NAMESPACE is set but empty; unset it to watch all namespaces")]
    EmptyNamespace,
}

impl Cli {
    /// Validates and converts to [`Settings`]. Without an identity, a random one is made up
    /// (fine outside Kubernetes; in a pod, POD_NAME names the replica in Events and the Lease).
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        if self.lease_grace_seconds == 0 || self.lease_grace_seconds >= self.lease_duration_seconds
        {
            return Err(ConfigError::LeaseTiming {
                duration: self.lease_duration_seconds,
                grace: self.lease_grace_seconds,
            });
        }
        if self.backoff_base_ms == 0 || self.backoff_max_seconds == 0 {
            return Err(ConfigError::Backoff);
        }
        if self
            .namespace
            .as_deref()
            .is_some_and(|n| n.trim().is_empty())
        {
            return Err(ConfigError::EmptyNamespace);
        }
        let identity = match &self.identity {
            Some(id) if id.trim().is_empty() => return Err(ConfigError::EmptyIdentity),
            Some(id) => id.clone(),
            None => format!("sigx-operator-{:08x}", rand::random::<u32>()),
        };
        Ok(Settings {
            namespace: self.namespace.clone(),
            field_manager: self.field_manager.clone(),
            identity,
            debounce: Duration::from_millis(self.debounce_ms),
            backoff_base: Duration::from_millis(self.backoff_base_ms),
            backoff_max: Duration::from_secs(self.backoff_max_seconds),
            watch_backoff: (Duration::from_millis(800), Duration::from_secs(30)),
            leader: (!self.no_leader_election).then(|| LeaderSettings {
                lease_name: self.lease_name.clone(),
                lease_namespace: self.lease_namespace.clone(),
                duration_seconds: self.lease_duration_seconds,
                grace_seconds: self.lease_grace_seconds,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("sigx-operator").chain(args.iter().copied())).unwrap()
    }

    #[test]
    fn defaults_elect_a_leader() {
        let s = parse(&["--identity", "op-0"]).settings().unwrap();
        let l = s.leader.unwrap();
        assert_eq!((l.duration_seconds, l.grace_seconds), (15, 5));
        assert_eq!(s.identity, "op-0");
        assert_eq!(s.field_manager, "sigx-operator");
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse(&[
            "--lease-duration-seconds",
            "5",
            "--lease-grace-seconds",
            "5",
        ])
        .settings()
        .unwrap_err();
        assert!(e.to_string().contains("SIGX_LEADER_GRACE_SECONDS"), "{e}");
        assert_eq!(
            parse(&["--identity", " "]).settings().unwrap_err(),
            ConfigError::EmptyIdentity
        );
        assert_eq!(
            parse(&["--namespace", ""]).settings().unwrap_err(),
            ConfigError::EmptyNamespace
        );
        assert!(Cli::try_parse_from(["sigx-operator", "--metrics-addr", "nope"]).is_err());
    }
}
