//! The sidecar's configuration: flags and `SIGX_*` environment variables, parsed and validated
//! before anything binds. Every bad value is reported by name, and `main` exits with code 64
//! (EX_USAGE).

use clap::{Parser, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The exit code for a configuration error (EX_USAGE).
pub const EXIT_USAGE: i32 = 64;

/// Which membership provider the host joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MembershipKind {
    /// No cluster: a single host that serves every call itself.
    None,
    /// The embedded default: hosts on one machine share one SQLite database file.
    Sqlite,
    /// One coordination.k8s.io/v1 Lease per host.
    Kubernetes,
    /// A fleet outside Kubernetes (VMs, bare metal): the hosts share one PostgreSQL database
    /// (`--membership-dsn`).
    Postgres,
}

/// Where new activations go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlacementPolicy {
    /// A uniformly random eligible host.
    Random,
    /// This host when it is eligible, otherwise random.
    PreferLocal,
    /// The less loaded of two random eligible hosts, by the loads their records publish.
    LeastLoaded,
}

/// Raw flags and environment, as the user wrote them.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "sigx-sidecar",
    version,
    about = "The sigx sidecar: one host of the actor system"
)]
pub struct Args {
    /// The Unix socket the app talks to.
    #[arg(
        long,
        env = "SIGX_SOCKET",
        default_value = "/var/run/sigx/sidecar.sock"
    )]
    pub socket: PathBuf,

    /// Permission bits of the app socket, in octal. 660 (owner and group) by default; the
    /// operator sets 666 because in a pod the socket's directory is an `emptyDir` mounted only in
    /// that pod's containers, so the volume is the boundary and the app need not share the
    /// sidecar's UID or group (the platform may assign either).
    #[arg(long, env = "SIGX_SOCKET_MODE", default_value = "660")]
    pub socket_mode: String,

    /// The token `/drain` on the health listener requires, in an `X-Sigx-Drain-Token` header.
    /// Absent: `/drain` is off (404). The operator sets it and puts the same header in the app
    /// containers' preStop hook, so a network peer that has not read the pod spec cannot drain
    /// a host.
    #[arg(long, env = "SIGX_DRAIN_TOKEN", hide_env_values = true)]
    pub drain_token: Option<String>,

    /// The HTTP health and metrics listener (/livez, /readyz, /startupz, /metrics, /drain).
    #[arg(long, env = "SIGX_HEALTH_ADDR", default_value = "0.0.0.0:9090")]
    pub health_addr: String,

    /// The mesh listener (host-to-host gRPC).
    #[arg(long, env = "SIGX_MESH_ADDR", default_value = "0.0.0.0:7311")]
    pub mesh_addr: String,

    /// The mesh address peers dial (host:port). Default: $POD_IP or 127.0.0.1, with the mesh port.
    #[arg(long, env = "SIGX_ADVERTISE")]
    pub advertise: Option<String>,

    /// This host's id. Default: $POD_NAME (or "sigx") plus a random incarnation suffix, so a
    /// restarted sidecar is a new host. An explicit id held by another live process makes this
    /// one exit 64; one left by a dead process is taken once its record lapses (TTL + margin).
    #[arg(long, env = "SIGX_HOST_ID")]
    pub host_id: Option<String>,

    /// The membership provider.
    #[arg(long, env = "SIGX_MEMBERSHIP", value_enum, default_value = "sqlite")]
    pub membership: MembershipKind,

    /// The SQLite membership database (provider `sqlite`).
    #[arg(long, env = "SIGX_SQLITE_PATH", default_value = ".sigx/membership.db")]
    pub sqlite_path: PathBuf,

    /// The PostgreSQL membership database (`--membership postgres`), URL or key=value form.
    /// It holds the password: prefer --membership-dsn-file. Default: the state store's
    /// --state-dsn, so one database serves both.
    #[arg(long, env = "SIGX_MEMBERSHIP_DSN", hide_env_values = true)]
    pub membership_dsn: Option<String>,

    /// A file holding the PostgreSQL membership connection string.
    #[arg(long, env = "SIGX_MEMBERSHIP_DSN_FILE")]
    pub membership_dsn_file: Option<PathBuf>,

    /// The cluster this host joins.
    #[arg(long, env = "SIGX_CLUSTER", default_value = "default")]
    pub cluster: String,

    /// The role (ActorRole name) this host belongs to.
    #[arg(long, env = "SIGX_ROLE", default_value = "default")]
    pub role: String,

    /// The Kubernetes namespace (provider `kubernetes`).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,

    /// The pod name (provider `kubernetes`; also the default host id prefix).
    #[arg(long, env = "POD_NAME")]
    pub pod_name: Option<String>,

    /// The pod UID: the host's Lease is owned by the Pod, so deletion is garbage-collected.
    #[arg(long, env = "POD_UID")]
    pub pod_uid: Option<String>,

    /// The pod IP (the default advertise host).
    #[arg(long, env = "POD_IP")]
    pub pod_ip: Option<String>,

    /// The machine this host runs on, published as meta.node.
    #[arg(long, env = "NODE_NAME")]
    pub node: Option<String>,

    /// The zone this host runs in, published as meta.zone, for callers that ask for
    /// same-zone placement (`CallRequest.locality`). On Kubernetes the operator fills it from
    /// the node's `topology.kubernetes.io/zone` label (copied onto the pod at binding). Empty
    /// means no zone.
    #[arg(long, env = "SIGX_ZONE")]
    pub zone: Option<String>,

    /// The cluster secret for mesh HMAC (prefer --secret-file).
    #[arg(long, env = "SIGX_SECRET", hide_env_values = true)]
    pub secret: Option<String>,

    /// A file holding the cluster secret. Its bytes are the HMAC key, exactly, binary or text:
    /// only one trailing line ending ("\n" or "\r\n", as `echo` and editors add) is dropped.
    /// An empty or whitespace-only secret is refused.
    #[arg(long, env = "SIGX_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,

    /// A file holding a second secret, accepted on inbound mesh requests but never signed with
    /// (same format as SIGX_SECRET_FILE): set only while the cluster secret is rotated, first to
    /// the new secret, then to the old one (README, "Rotating the mesh secret").
    #[arg(long, env = "SIGX_SECRET_ACCEPT_FILE")]
    pub secret_accept_file: Option<PathBuf>,

    /// How often the secret files are read again, milliseconds; an edited file is used without
    /// a restart, and the signing key it replaces stays accepted for five minutes (README,
    /// "Rotating the mesh secret in place"). 0 reads them only at startup.
    #[arg(long, env = "SIGX_SECRET_RELOAD_MS", default_value_t = 10_000)]
    pub secret_reload_ms: u64,

    /// With a secret: sign every mesh request, and also accept requests that carry no MAC. Only
    /// for the middle step of switching a running cluster between --insecure and a secret
    /// (README, "Switching between insecure and a secret"): hosts on either side of the switch
    /// meet hosts in this mode without a refusal. Needs a secret.
    #[arg(long, env = "SIGX_ACCEPT_UNSIGNED")]
    pub accept_unsigned: bool,

    /// Run the mesh without authentication. A claim you make in writing: only for a mesh no
    /// untrusted caller can reach.
    #[arg(long, env = "SIGX_INSECURE")]
    pub insecure: bool,

    /// Membership heartbeat interval, milliseconds.
    #[arg(long, env = "SIGX_BEAT_MS", default_value_t = 5_000)]
    pub beat_ms: u64,

    /// Membership TTL, milliseconds. Must exceed twice the beat.
    #[arg(long, env = "SIGX_TTL_MS", default_value_t = 15_000)]
    pub ttl_ms: u64,

    /// Trailing window of membership refresh coalescing, milliseconds (the seed's
    /// `coalesceMs`). 0, the default, refreshes on the leading edge only: every notification
    /// not already covered by a read in flight reads at once. A window makes a burst of changes
    /// cost one more read at its end; raise it when a noisy membership store costs more than
    /// the staleness it saves. At most SIGX_BEAT_MS.
    #[arg(long, env = "SIGX_MEMBERSHIP_COALESCE_MS", default_value_t = 0)]
    pub membership_coalesce_ms: u64,

    /// Default call deadline, milliseconds.
    #[arg(long, env = "SIGX_CALL_TIMEOUT_MS", default_value_t = 30_000)]
    pub call_timeout_ms: u64,

    /// Routing retries on unreachable / wrong-host / unplaceable.
    #[arg(long, env = "SIGX_RETRIES", default_value_t = 3)]
    pub retries: u32,

    /// Largest payload accepted or delivered, bytes.
    #[arg(long, env = "SIGX_MAX_PAYLOAD_BYTES", default_value_t = 4 * 1024 * 1024)]
    pub max_payload_bytes: u64,

    /// Placement policy for new activations.
    #[arg(long, env = "SIGX_PLACEMENT", value_enum, default_value = "random")]
    pub placement: PlacementPolicy,

    /// Per-type placement policies, `Type=policy` comma-separated (`Counter=least-loaded`),
    /// overriding --placement for the types named. Give every host of a cluster the same: the
    /// caller's host decides where a new activation goes.
    #[arg(
        long = "placement-type",
        env = "SIGX_PLACEMENT_TYPES",
        value_delimiter = ','
    )]
    pub placement_types: Vec<String>,

    /// Rebalancing: a host far above its peers' mean activations hands idle ones away (their
    /// next call places them anew). `--rebalance false` keeps activations where they were
    /// placed until they go idle.
    #[arg(long, env = "SIGX_REBALANCE", default_value_t = true, action = clap::ArgAction::Set)]
    pub rebalance: bool,

    /// Rebalancing moves only activations whose last turn ended at least this long ago.
    #[arg(long, env = "SIGX_REBALANCE_MIN_IDLE_MS", default_value_t = 250)]
    pub rebalance_min_idle_ms: u64,

    /// A turn running longer than this logs a warning naming the actor and method.
    #[arg(long, env = "SIGX_SLOW_TURN_MS", default_value_t = 5_000)]
    pub slow_turn_ms: u64,

    /// How long a graceful stop waits for in-flight turns.
    #[arg(long, env = "SIGX_DRAIN_TIMEOUT_MS", default_value_t = 20_000)]
    pub drain_timeout_ms: u64,

    /// Exit (code 70) when the host fences, instead of answering `fenced` until restarted.
    #[arg(long, env = "SIGX_EXIT_ON_FENCE")]
    pub exit_on_fence: bool,

    /// A directory holding `tls.crt`, `tls.key` and `ca.crt`: the mesh then runs mutual TLS,
    /// every peer's certificate checked against the CA, and every request's claimed host id
    /// against its certificate: a URI SAN `spiffe://<cluster>/host/<host-id>` (or the host id
    /// without its `-<8 hex>` incarnation suffix, e.g. the pod name). Without a secret it needs
    /// --insecure too.
    #[arg(long, env = "SIGX_MTLS_DIR")]
    pub mtls_dir: Option<PathBuf>,

    /// The name checked against peers' server certificates (default: the host part of the
    /// peer's advertised address). Use a shared name when pod IPs are not in the certificates.
    #[arg(long, env = "SIGX_MTLS_SERVER_NAME")]
    pub mtls_server_name: Option<String>,

    /// The stateful types this host's role declares, comma-separated (set by the operator, which
    /// labels the pod with them). When set, the app must register exactly these.
    #[arg(long, env = "SIGX_ACTORS")]
    pub actors: Option<String>,

    /// The worker types this host's role declares, comma-separated (see `--actors`).
    #[arg(long, env = "SIGX_WORKERS")]
    pub workers: Option<String>,

    /// Threads of the sidecar's async runtime (default: one per CPU the process may use, cgroup
    /// quota included). Every call hands work between tasks, and on few cores a hand-off to
    /// another thread costs more than the work: a sidecar in a pod with a CPU limit of one core
    /// or less is usually best served by 1.
    #[arg(long, env = "SIGX_WORKER_THREADS")]
    pub worker_threads: Option<usize>,

    /// Where actor state and epochs live: `memory` (this process only), `sqlite` (one file shared
    /// by the hosts of one machine) or `postgres` (one database shared by the fleet). Default:
    /// `postgres` when a DSN is given; `sqlite` when a state path is given or the membership is
    /// `sqlite` (then the file is `sigx-state.db` next to the membership file, like `sigx dev
    /// up`); otherwise `memory`, which suits a single host only: a fleet needs `postgres`.
    #[arg(long, env = "SIGX_STATE", value_enum)]
    pub state: Option<crate::state::StateKind>,

    /// The SQLite state database (`--state sqlite`). Default: `sigx-state.db` in the directory
    /// of `--sqlite-path`.
    #[arg(long, env = "SIGX_STATE_PATH")]
    pub state_path: Option<PathBuf>,

    /// The PostgreSQL connection string (`--state postgres`), URL or key=value form. It holds
    /// the password: prefer --state-dsn-file.
    #[arg(long, env = "SIGX_STATE_DSN", hide_env_values = true)]
    pub state_dsn: Option<String>,

    /// A file holding the PostgreSQL connection string.
    #[arg(long, env = "SIGX_STATE_DSN_FILE")]
    pub state_dsn_file: Option<PathBuf>,

    /// How log lines are written to stderr: `text`, or `json` (one object per line, with the
    /// `trace_id` / `span_id` of the traced call it was written in). `SIGX_LOG` filters them.
    #[arg(long, env = "SIGX_LOG_FORMAT", value_enum, default_value_t = crate::logs::LogFormat::Text)]
    pub log_format: crate::logs::LogFormat,

    /// Distributed tracing: OTLP export and its sampling (sidecar/src/trace.rs).
    #[command(flatten)]
    pub tracing: crate::trace::TraceArgs,
}

/// A configuration value that is wrong, named.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name}={value:?} is not a valid {what}: {reason}")]
    Invalid {
        name: &'static str,
        value: String,
        what: &'static str,
        reason: String,
    },
    #[error(
        "SIGX_TTL_MS={ttl} must exceed twice SIGX_BEAT_MS={beat}: a host must be able to miss a \
         beat without being expired. Raise the TTL or shorten the beat."
    )]
    TtlTooShort { ttl: u64, beat: u64 },
    #[error(
        "SIGX_TTL_MS={ttl} is longer than the 600000 ms maximum (the ActorCluster CRD's own \
         bound): a dead host's actors would wait that long to move to a live one. Lower the TTL."
    )]
    TtlTooLong { ttl: u64 },
    #[error(
        "no mesh secret: set SIGX_SECRET_FILE (or SIGX_SECRET), or pass --insecure to state in \
         writing that the mesh is unreachable by untrusted callers"
    )]
    MissingSecret,
    #[error(
        "SIGX_MTLS_DIR is set but there is no mesh secret: mutual TLS alone is not the written \
         opt-out. Set SIGX_SECRET_FILE to use the HMAC with mTLS, or pass --insecure to run the \
         mesh on mTLS alone"
    )]
    MtlsWithoutSecret,
    #[error(
        "the mesh secret is empty or whitespace-only: that is never a secret (even with --insecure)"
    )]
    EmptySecret,
    #[error("{name}={path:?} cannot be read: {source}")]
    SecretFile {
        name: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "SIGX_SECRET_ACCEPT_FILE is set but the mesh has no secret to sign with: a second accepted \
         secret only means something during a rotation of SIGX_SECRET_FILE; set that too, or \
         unset SIGX_SECRET_ACCEPT_FILE"
    )]
    AcceptWithoutSecret,
    #[error(
        "SIGX_ACCEPT_UNSIGNED is set but the mesh has no secret: it means \"sign with the secret, \
         and also accept requests without a MAC\", the middle step of switching between \
         --insecure and a secret; set SIGX_SECRET_FILE too, or unset SIGX_ACCEPT_UNSIGNED \
         (--insecure alone accepts every request already)"
    )]
    AcceptUnsignedWithoutSecret,
    #[error("{0} is required with --membership kubernetes (set it from the downward API)")]
    MissingPodIdentity(&'static str),
    #[error("SIGX_SQLITE_PATH={path:?}: {reason}")]
    SqlitePath { path: PathBuf, reason: String },
    #[error(transparent)]
    State(#[from] crate::state::config::StateConfigError),
    #[error(transparent)]
    MembershipDsn(#[from] crate::membership::postgres::MembershipDsnError),
}

/// The validated configuration the host runs with.
#[derive(Clone)]
pub struct Config {
    pub socket: PathBuf,
    /// Permission bits of the app socket (`SIGX_SOCKET_MODE`).
    pub socket_mode: u32,
    /// What `/drain` requires in `X-Sigx-Drain-Token`; `None`: `/drain` is off. Never printed.
    pub drain_token: Option<String>,
    pub health_addr: SocketAddr,
    pub mesh_addr: SocketAddr,
    pub advertise: String,
    pub host_id: String,
    /// This process's incarnation nonce (16 hex digits, drawn at start). One identity, one
    /// process (DESIGN.md §3): it is in the membership holder identity `<host-id>/<incarnation>`
    /// and in every activation id, so neither repeats across processes started with one host id.
    pub incarnation: String,
    pub membership: MembershipKind,
    pub sqlite_path: PathBuf,
    /// The connection string of `--membership postgres` (holds the password: never printed).
    pub membership_dsn: Option<String>,
    pub cluster: String,
    pub role: String,
    pub namespace: Option<String>,
    pub pod_name: Option<String>,
    pub pod_uid: Option<String>,
    pub node: Option<String>,
    /// The zone published as `meta.zone` (`--zone`; empty reads as none).
    pub zone: Option<String>,
    /// `None` means insecure (stated explicitly).
    pub secret: Option<Secret>,
    /// A second secret accepted on inbound requests, never signed with (a rotation).
    pub secret_accepted: Option<Secret>,
    /// Requests without a MAC are accepted too (`--accept-unsigned`; only with a secret).
    pub accept_unsigned: bool,
    /// The files the secret was read from, re-read every `secret_reload` (`None`: the secret
    /// came from `SIGX_SECRET`, or there is none).
    pub secret_files: Option<crate::mesh::secret_reload::SecretFiles>,
    /// How often the secret files are re-read (`None`: never).
    pub secret_reload: Option<Duration>,
    pub beat: Duration,
    pub ttl: Duration,
    /// The trailing window of the membership refresh coalescer (0: leading edge only).
    pub membership_coalesce: Duration,
    pub call_timeout: Duration,
    pub retries: u32,
    pub max_payload_bytes: usize,
    pub placement: PlacementPolicy,
    /// Per-type placement policies (`--placement-type`).
    pub placement_types: std::collections::BTreeMap<String, PlacementPolicy>,
    /// Rebalancing (its period follows the beat).
    pub rebalance: crate::placement::rebalance::RebalanceConfig,
    pub slow_turn: Duration,
    pub drain_timeout: Duration,
    pub exit_on_fence: bool,
    /// The types the role declares, when the operator said: (stateful, workers).
    pub declared_types: Option<(Vec<String>, Vec<String>)>,
    /// Mutual TLS for the mesh, when configured.
    pub mtls: Option<crate::mesh::MeshTlsConfig>,
    /// Threads of the async runtime; `None`: one per available CPU.
    pub worker_threads: Option<usize>,
    /// The state store (`state::open` opens it).
    pub state: crate::state::StateConfig,
}

/// The cluster secret. Never printed: `Debug` shows its length only.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret from bytes; empty or whitespace-only is refused.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ConfigError> {
        let bytes = bytes.into();
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            return Err(ConfigError::EmptySecret);
        }
        Ok(Secret(bytes))
    }

    /// The secret's bytes, for the HMAC key.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

/// The HMAC key a secret file holds: its bytes, never decoded as text (a lossy decode turned
/// every invalid UTF-8 byte into U+FFFD, so distinct binary secrets authenticated each other),
/// minus exactly one trailing line ending ("\n" or "\r\n") — the one `echo`, editors and
/// `kubectl create secret --from-file` of an edited file leave. Nothing else is trimmed: a key
/// that is meant to end in a newline can be written with two.
pub fn secret_file_key(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    } else if bytes.ends_with(b"\n") {
        bytes.truncate(bytes.len() - 1);
    }
    bytes
}

/// The secret a file holds ([`secret_file_key`]), its errors named by the setting `name`.
fn read_secret_file(name: &'static str, path: &std::path::Path) -> Result<Secret, ConfigError> {
    let bytes = std::fs::read(path).map_err(|source| ConfigError::SecretFile {
        name,
        path: path.to_path_buf(),
        source,
    })?;
    Secret::new(secret_file_key(bytes))
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("socket", &self.socket)
            .field("health_addr", &self.health_addr)
            .field("mesh_addr", &self.mesh_addr)
            .field("advertise", &self.advertise)
            .field("host_id", &self.host_id)
            .field("membership", &self.membership)
            .field("cluster", &self.cluster)
            .field("role", &self.role)
            .field("node", &self.node)
            .field("zone", &self.zone)
            .field("secret", &self.secret)
            .field("beat", &self.beat)
            .field("ttl", &self.ttl)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// `--placement-type` entries (`Type=policy`) into a map; a malformed entry, an invalid type
/// name, an unknown policy or a type named twice is an error naming it.
fn parse_type_policies(
    entries: &[String],
) -> Result<std::collections::BTreeMap<String, PlacementPolicy>, ConfigError> {
    let mut out = std::collections::BTreeMap::new();
    for entry in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let invalid = |reason: String| ConfigError::Invalid {
            name: "SIGX_PLACEMENT_TYPES",
            value: entry.to_string(),
            what: "per-type placement (Type=policy)",
            reason,
        };
        let Some((ty, policy)) = entry.split_once('=') else {
            return Err(invalid(
                "write Type=policy, e.g. Counter=least-loaded".into(),
            ));
        };
        let (ty, policy) = (ty.trim(), policy.trim());
        if !crate::runtime::registry::valid_type_name(ty) {
            return Err(invalid(format!(
                "{ty:?} is not a type name: use a letter, then letters, digits, '_', '.' or '-'"
            )));
        }
        let policy = PlacementPolicy::from_str(policy, true).map_err(|_| {
            invalid(format!(
                "{policy:?} is not a policy: use random, prefer-local or least-loaded"
            ))
        })?;
        if out.insert(ty.to_string(), policy).is_some() {
            return Err(invalid(format!("{ty} is named twice")));
        }
    }
    Ok(out)
}

fn parse_addr(name: &'static str, value: &str) -> Result<SocketAddr, ConfigError> {
    value
        .parse()
        .map_err(|e: std::net::AddrParseError| ConfigError::Invalid {
            name,
            value: value.to_string(),
            what: "socket address (ip:port)",
            reason: e.to_string(),
        })
}

/// The most runtime threads `SIGX_WORKER_THREADS` accepts (a sidecar is one host's proxy).
const MAX_WORKER_THREADS: usize = 64;

fn positive(name: &'static str, value: u64, what: &'static str) -> Result<u64, ConfigError> {
    if value == 0 {
        return Err(ConfigError::Invalid {
            name,
            value: value.to_string(),
            what,
            reason: "must be greater than zero".into(),
        });
    }
    Ok(value)
}

/// A random incarnation suffix: a restarted sidecar is a new host (DESIGN.md §4 Rule 3).
fn incarnation_suffix() -> String {
    use rand::RngExt;
    let n: u32 = rand::rng().random();
    format!("{n:08x}")
}

impl Args {
    /// Validates everything before anything binds.
    pub fn validate(self) -> Result<Config, ConfigError> {
        let health_addr = parse_addr("SIGX_HEALTH_ADDR", &self.health_addr)?;
        let mesh_addr = parse_addr("SIGX_MESH_ADDR", &self.mesh_addr)?;
        let beat_ms = positive("SIGX_BEAT_MS", self.beat_ms, "number of milliseconds")?;
        let ttl_ms = positive("SIGX_TTL_MS", self.ttl_ms, "number of milliseconds")?;
        if ttl_ms <= 2 * beat_ms {
            return Err(ConfigError::TtlTooShort {
                ttl: ttl_ms,
                beat: beat_ms,
            });
        }
        if Duration::from_millis(ttl_ms) > crate::membership::config::MAX_TTL {
            return Err(ConfigError::TtlTooLong { ttl: ttl_ms });
        }
        // A window longer than a beat would leave views a heartbeat or more behind what the
        // store announced; the seed's coalesceMs is a few tens of milliseconds.
        if self.membership_coalesce_ms > beat_ms {
            return Err(ConfigError::Invalid {
                name: "SIGX_MEMBERSHIP_COALESCE_MS",
                value: self.membership_coalesce_ms.to_string(),
                what: "refresh coalescing window",
                reason: format!(
                    "must not exceed SIGX_BEAT_MS={beat_ms}: a longer window leaves membership \
                     views more than a heartbeat behind; 0 (the default) coalesces nothing"
                ),
            });
        }
        let call_timeout_ms = positive(
            "SIGX_CALL_TIMEOUT_MS",
            self.call_timeout_ms,
            "number of milliseconds",
        )?;
        let max_payload = positive(
            "SIGX_MAX_PAYLOAD_BYTES",
            self.max_payload_bytes,
            "number of bytes",
        )?;
        if max_payload > 64 * 1024 * 1024 {
            return Err(ConfigError::Invalid {
                name: "SIGX_MAX_PAYLOAD_BYTES",
                value: max_payload.to_string(),
                what: "payload limit",
                reason: "at most 64 MiB".into(),
            });
        }
        if let Some(n) = self.worker_threads
            && !(1..=MAX_WORKER_THREADS).contains(&n)
        {
            return Err(ConfigError::Invalid {
                name: "SIGX_WORKER_THREADS",
                value: n.to_string(),
                what: "number of runtime threads",
                reason: format!("must be between 1 and {MAX_WORKER_THREADS}"),
            });
        }
        let socket_mode = u32::from_str_radix(self.socket_mode.trim_start_matches("0o"), 8)
            .ok()
            .filter(|m| *m <= 0o777 && m & 0o600 == 0o600)
            .ok_or_else(|| ConfigError::Invalid {
                name: "SIGX_SOCKET_MODE",
                value: self.socket_mode.clone(),
                what: "octal permission bits",
                reason: "write three octal digits the owner can read and write, e.g. 660".into(),
            })?;
        let drain_token = self.drain_token.filter(|t| !t.trim().is_empty());
        if self.socket.as_os_str().is_empty() {
            return Err(ConfigError::Invalid {
                name: "SIGX_SOCKET",
                value: String::new(),
                what: "socket path",
                reason: "must not be empty".into(),
            });
        }

        // Secret rules (DESIGN.md §7): an empty secret is refused always; none needs --insecure.
        let secret = match (&self.secret, &self.secret_file) {
            (Some(s), _) => Some(Secret::new(s.as_bytes().to_vec())?),
            (None, Some(path)) => Some(read_secret_file("SIGX_SECRET_FILE", path)?),
            (None, None) => None,
        };
        let secret_accepted = match &self.secret_accept_file {
            None => None,
            Some(_) if secret.is_none() => return Err(ConfigError::AcceptWithoutSecret),
            Some(path) => Some(read_secret_file("SIGX_SECRET_ACCEPT_FILE", path)?),
        };
        let secret_files = match (&self.secret, &self.secret_file) {
            (None, Some(sign)) => Some(crate::mesh::secret_reload::SecretFiles {
                sign: sign.clone(),
                accept: self.secret_accept_file.clone(),
            }),
            _ => None,
        };
        if self.accept_unsigned && secret.is_none() {
            return Err(ConfigError::AcceptUnsignedWithoutSecret);
        }
        // mTLS authenticates peers but is not the written claim: without a secret it still
        // needs --insecure, so a deployment that meant to have both cannot drop the secret by
        // accident.
        if self.membership != MembershipKind::None && secret.is_none() && !self.insecure {
            return Err(match self.mtls_dir {
                Some(_) => ConfigError::MtlsWithoutSecret,
                None => ConfigError::MissingSecret,
            });
        }
        let mtls = match &self.mtls_dir {
            Some(dir) => {
                if !dir.is_dir() {
                    return Err(ConfigError::Invalid {
                        name: "SIGX_MTLS_DIR",
                        value: dir.display().to_string(),
                        what: "directory of tls.crt, tls.key and ca.crt",
                        reason: "it does not exist or is not a directory".into(),
                    });
                }
                Some(crate::mesh::MeshTlsConfig {
                    cert: dir.join("tls.crt"),
                    key: dir.join("tls.key"),
                    ca: dir.join("ca.crt"),
                    server_name: self.mtls_server_name.clone().filter(|n| !n.is_empty()),
                })
            }
            None => None,
        };

        if self.membership == MembershipKind::Kubernetes {
            if self.pod_name.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::MissingPodIdentity("POD_NAME"));
            }
            if self.namespace.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::MissingPodIdentity("POD_NAMESPACE"));
            }
        }
        if self.membership == MembershipKind::Sqlite {
            if let Some(parent) = self.sqlite_path.parent()
                && !parent.as_os_str().is_empty()
                && !parent.is_dir()
            {
                return Err(ConfigError::SqlitePath {
                    path: self.sqlite_path.clone(),
                    reason: format!("directory {parent:?} does not exist"),
                });
            }
            if self.sqlite_path.is_dir() {
                return Err(ConfigError::SqlitePath {
                    path: self.sqlite_path.clone(),
                    reason: "is a directory, not a database file".into(),
                });
            }
        }

        let membership_dsn = crate::membership::postgres::resolve_dsn(
            self.membership == MembershipKind::Postgres,
            self.membership_dsn.as_deref(),
            self.membership_dsn_file.as_deref(),
            self.state_dsn.as_deref(),
            self.state_dsn_file.as_deref(),
        )?;
        // A fleet on PostgreSQL membership keeps its state there too unless told otherwise.
        let state_dsn = match (&membership_dsn, self.state, &self.state_path) {
            (Some(dsn), None | Some(crate::state::StateKind::Postgres), None)
                if self.state_dsn.is_none() && self.state_dsn_file.is_none() =>
            {
                Some(dsn.as_str())
            }
            _ => self.state_dsn.as_deref(),
        };
        let state = crate::state::config::validate(
            self.state,
            self.state_path.as_deref(),
            state_dsn,
            self.state_dsn_file.as_deref(),
            (self.membership == MembershipKind::Sqlite).then_some(self.sqlite_path.as_path()),
        )?;

        let host_id = match self.host_id {
            Some(id) if !id.trim().is_empty() => id,
            _ => format!(
                "{}-{}",
                self.pod_name.clone().unwrap_or_else(|| "sigx".to_string()),
                incarnation_suffix()
            ),
        };
        if !crate::mesh::auth::valid_host_id(&host_id) {
            return Err(ConfigError::Invalid {
                name: "SIGX_HOST_ID",
                value: host_id,
                what: "host id",
                reason: format!(
                    "use 1..={} visible ASCII characters other than '/' (a pod name is one): \
                     peers read the id from a request header, and could not read this one back",
                    crate::mesh::auth::MAX_HOST_ID_BYTES
                ),
            });
        }
        let advertise = self.advertise.unwrap_or_else(|| {
            let ip = self
                .pod_ip
                .clone()
                .unwrap_or_else(|| "127.0.0.1".to_string());
            format!("{ip}:{}", mesh_addr.port())
        });

        let split = |name: &'static str, v: &Option<String>| -> Result<Vec<String>, ConfigError> {
            let mut out: Vec<String> = v
                .as_deref()
                .unwrap_or("")
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(String::from)
                .collect();
            if let Some(bad) = out
                .iter()
                .find(|t| !crate::runtime::registry::valid_type_name(t))
            {
                return Err(ConfigError::Invalid {
                    name,
                    value: bad.clone(),
                    what: "type name",
                    reason: "use a letter, then letters, digits, '_', '.' or '-'".into(),
                });
            }
            out.sort();
            out.dedup();
            Ok(out)
        };
        let placement_types = parse_type_policies(&self.placement_types)?;
        let declared_types = if self.actors.is_some() || self.workers.is_some() {
            Some((
                split("SIGX_ACTORS", &self.actors)?,
                split("SIGX_WORKERS", &self.workers)?,
            ))
        } else {
            None
        };

        Ok(Config {
            mtls,
            declared_types,
            socket: self.socket,
            socket_mode,
            drain_token,
            health_addr,
            mesh_addr,
            advertise,
            host_id,
            incarnation: crate::membership::random_incarnation(),
            membership: self.membership,
            sqlite_path: self.sqlite_path,
            membership_dsn,
            cluster: self.cluster,
            role: self.role,
            namespace: self.namespace,
            pod_name: self.pod_name,
            pod_uid: self.pod_uid,
            node: self.node.filter(|n| !n.trim().is_empty()),
            zone: self.zone.filter(|z| !z.trim().is_empty()),
            secret,
            secret_accepted,
            accept_unsigned: self.accept_unsigned,
            secret_files,
            secret_reload: (self.secret_reload_ms > 0)
                .then(|| Duration::from_millis(self.secret_reload_ms)),
            beat: Duration::from_millis(beat_ms),
            ttl: Duration::from_millis(ttl_ms),
            membership_coalesce: Duration::from_millis(self.membership_coalesce_ms),
            call_timeout: Duration::from_millis(call_timeout_ms),
            retries: self.retries,
            max_payload_bytes: max_payload as usize,
            placement: self.placement,
            placement_types,
            rebalance: crate::placement::rebalance::RebalanceConfig {
                enabled: self.rebalance,
                min_idle: Duration::from_millis(self.rebalance_min_idle_ms),
                ..crate::placement::rebalance::RebalanceConfig::for_beat(Duration::from_millis(
                    beat_ms,
                ))
            },
            slow_turn: Duration::from_millis(self.slow_turn_ms),
            drain_timeout: Duration::from_millis(self.drain_timeout_ms),
            exit_on_fence: self.exit_on_fence,
            worker_threads: self.worker_threads,
            state,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
