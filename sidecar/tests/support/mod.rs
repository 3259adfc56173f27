//! A test app speaking the raw wire contract (no SDK), and helpers to run an in-process host.
#![allow(dead_code)]

pub mod relay;

use bytes::Bytes;
use sigx_proto::v1;
use sigx_proto::v1::actor_host_client::ActorHostClient;
use sigx_sidecar::config::{Args, Config};
use sigx_sidecar::host::Host;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint, Uri};

/// Connects a gRPC channel to a Unix socket.
pub async fn connect(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .expect("connect to sidecar socket")
}

/// A config for an in-process single host in `dir`.
pub fn single_host_config(dir: &Path, extra: &[&str]) -> Config {
    let socket = dir.join("sidecar.sock");
    let mut args = vec![
        "sigx-sidecar".to_string(),
        "--membership".into(),
        "none".into(),
        "--socket".into(),
        socket.display().to_string(),
        "--health-addr".into(),
        "127.0.0.1:0".into(),
        "--host-id".into(),
        "h1".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    <Args as clap::Parser>::try_parse_from(args)
        .unwrap()
        .validate()
        .unwrap()
}

/// One event the test app saw.
#[derive(Debug, Clone)]
pub struct Event {
    pub actor: String,
    pub activation_id: String,
    pub what: String,
    /// The turn's payload (an Invoke's or a timer tick's; empty for lifecycle turns).
    pub payload: Bytes,
    pub start: Instant,
    pub end: Instant,
}

/// How the test app behaves for a method.
#[derive(Clone)]
pub enum Behaviour {
    /// Sleep, then answer the payload back.
    SleepEcho(Duration),
    /// Answer an app error with this message.
    Fail(String),
    /// Never answer.
    Hang,
}

/// The behaviour key of Activate turns (answered at once when absent).
pub const ACTIVATE: &str = "<activate>";
/// The behaviour key of Deactivate turns (answered at once when absent).
pub const DEACTIVATE: &str = "<deactivate>";

/// Runs a lifecycle turn as its behaviour says (none: answer at once).
async fn lifecycle_turn(b: Option<&Behaviour>) -> Result<Bytes, String> {
    match b {
        None => Ok(Bytes::new()),
        Some(Behaviour::SleepEcho(d)) => {
            tokio::time::sleep(*d).await;
            Ok(Bytes::new())
        }
        Some(Behaviour::Fail(m)) => Err(m.clone()),
        Some(Behaviour::Hang) => futures::future::pending().await,
    }
}

/// A raw-protocol test app.
pub struct TestApp {
    pub events: Arc<Mutex<Vec<Event>>>,
    /// Becomes true when the sidecar ends the Serve stream.
    pub ended: tokio::sync::watch::Receiver<bool>,
    pub host_id: String,
    tx: mpsc::UnboundedSender<v1::AppMessage>,
    task: tokio::task::JoinHandle<()>,
}

pub fn actor_spec(name: &str, reentrant: bool, idle_ms: u64) -> v1::ActorTypeSpec {
    v1::ActorTypeSpec {
        name: name.into(),
        reentrant,
        idle_timeout_ms: idle_ms,
        methods: vec![],
    }
}

impl TestApp {
    /// Registers `register` and serves turns with `behaviour` per method.
    pub async fn start(
        socket: &Path,
        register: v1::Register,
        behaviour: HashMap<String, Behaviour>,
    ) -> Result<TestApp, tonic::Status> {
        let mut client = ActorHostClient::new(connect(socket).await);
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(v1::AppMessage {
            msg: Some(v1::app_message::Msg::Register(register)),
        })
        .unwrap();
        let mut inbound = client
            .serve(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        let first = inbound.message().await?.expect("registered");
        let host_id = match first.msg {
            Some(v1::sidecar_message::Msg::Registered(r)) => r.host_id,
            other => panic!("expected Registered, got {other:?}"),
        };
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        let out = tx.clone();
        let behaviour = Arc::new(behaviour);
        let (ended_tx, ended) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let _ended = scopeguard(ended_tx);
            let mut turns = tokio::task::JoinSet::new();
            while let Ok(Some(msg)) = inbound.message().await {
                let Some(v1::sidecar_message::Msg::Turn(turn)) = msg.msg else {
                    continue;
                };
                let ev = ev.clone();
                let out = out.clone();
                let behaviour = behaviour.clone();
                turns.spawn(async move {
                    let start = Instant::now();
                    let actor = turn.actor.clone().unwrap();
                    let actor = format!("{}/{}", actor.actor_type, actor.key);
                    let mut payload = Bytes::new();
                    let (what, outcome) = match turn.kind.clone().unwrap() {
                        v1::turn::Kind::Activate(_) => (
                            "activate".to_string(),
                            lifecycle_turn(behaviour.get(ACTIVATE)).await,
                        ),
                        v1::turn::Kind::Deactivate(_) => (
                            "deactivate".to_string(),
                            lifecycle_turn(behaviour.get(DEACTIVATE)).await,
                        ),
                        v1::turn::Kind::Invoke(inv) => {
                            payload = inv.payload.clone();
                            let b = behaviour
                                .get(&inv.method)
                                .cloned()
                                .unwrap_or(Behaviour::SleepEcho(Duration::ZERO));
                            let outcome = match b {
                                Behaviour::SleepEcho(d) => {
                                    tokio::time::sleep(d).await;
                                    Ok(inv.payload.clone())
                                }
                                Behaviour::Fail(m) => Err(m),
                                Behaviour::Hang => {
                                    futures::future::pending::<()>().await;
                                    unreachable!()
                                }
                            };
                            (inv.method, outcome)
                        }
                        // A tick of timer NAME behaves as the method "timer:NAME" says.
                        v1::turn::Kind::Timer(tick) => {
                            let what = format!("timer:{}", tick.name);
                            payload = tick.payload.clone();
                            let outcome = match behaviour.get(&what).cloned() {
                                None => Ok(Bytes::new()),
                                Some(Behaviour::SleepEcho(d)) => {
                                    tokio::time::sleep(d).await;
                                    Ok(Bytes::new())
                                }
                                Some(Behaviour::Fail(m)) => Err(m),
                                Some(Behaviour::Hang) => futures::future::pending().await,
                            };
                            (what, outcome)
                        }
                        // Recorded as `reminder:<name>:<due_unix_ms>:<attempt>`; behaviour
                        // by `reminder:<name>`.
                        v1::turn::Kind::Reminder(r) => {
                            let outcome = match behaviour.get(&format!("reminder:{}", r.name)) {
                                Some(Behaviour::Fail(m)) => Err(m.clone()),
                                Some(Behaviour::SleepEcho(d)) => {
                                    tokio::time::sleep(*d).await;
                                    Ok(r.payload.clone())
                                }
                                Some(Behaviour::Hang) => {
                                    futures::future::pending::<()>().await;
                                    unreachable!()
                                }
                                None => Ok(r.payload.clone()),
                            };
                            (
                                format!("reminder:{}:{}:{}", r.name, r.due_unix_ms, r.attempt),
                                outcome,
                            )
                        }
                    };
                    ev.lock().unwrap().push(Event {
                        actor,
                        activation_id: turn.activation_id.clone(),
                        what,
                        payload,
                        start,
                        end: Instant::now(),
                    });
                    let outcome = match outcome {
                        Ok(b) => v1::turn_result::Outcome::Ok(b),
                        Err(m) => v1::turn_result::Outcome::Error(v1::TurnError {
                            kind: v1::ErrorKind::App as i32,
                            message: m,
                        }),
                    };
                    let _ = out.send(v1::AppMessage {
                        msg: Some(v1::app_message::Msg::Result(v1::TurnResult {
                            turn_id: turn.turn_id,
                            outcome: Some(outcome),
                            writes: Vec::new(),
                        })),
                    });
                });
            }
            // The stream ended, but the app is a process of its own: turns it is running go
            // on to their end (their answers have nowhere to go), as a real app's would.
            drop(_ended);
            while turns.join_next().await.is_some() {}
        });
        Ok(TestApp {
            events,
            ended,
            host_id,
            tx,
            task,
        })
    }

    /// Asks the sidecar to drain this app, keeps answering turns, and waits for the sidecar to
    /// end the stream.
    pub async fn drain(&mut self, within: Duration) {
        self.tx
            .send(v1::AppMessage {
                msg: Some(v1::app_message::Msg::Drain(v1::Drain {})),
            })
            .unwrap();
        tokio::time::timeout(within, self.ended.wait_for(|e| *e))
            .await
            .expect("the sidecar ends the stream after the drain")
            .unwrap();
    }

    /// Kills the app: its stream closes mid-whatever.
    pub fn kill(self) {
        self.task.abort();
        drop(self.tx);
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}

/// Sets the watch to true when dropped (the serving task ended).
pub struct EndGuard(tokio::sync::watch::Sender<bool>);
impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}
fn scopeguard(tx: tokio::sync::watch::Sender<bool>) -> EndGuard {
    EndGuard(tx)
}

/// A client for Call and Status.
pub async fn client(socket: &Path) -> ActorHostClient<Channel> {
    ActorHostClient::new(connect(socket).await)
}

/// Calls an actor.
pub async fn call(
    c: &mut ActorHostClient<Channel>,
    ty: &str,
    key: &str,
    method: &str,
    payload: &[u8],
    timeout_ms: u64,
) -> Result<Bytes, sigx_proto::ActorError> {
    c.call(v1::CallRequest {
        actor: Some(v1::ActorRef {
            actor_type: ty.into(),
            key: key.into(),
        }),
        method: method.into(),
        payload: Bytes::copy_from_slice(payload),
        timeout_ms,
        trace: None,
        locality: 0,
    })
    .await
    .map(|r| r.into_inner().payload)
    .map_err(|s| sigx_proto::ActorError::from_status(&s))
}

/// GET on the health endpoint; returns the status code.
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    buf.split_whitespace().nth(1).unwrap().parse().unwrap()
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub async fn start_host(dir: &Path, extra: &[&str]) -> Host {
    Host::start(single_host_config(dir, extra)).await.unwrap()
}

pub fn socket_of(dir: &Path) -> PathBuf {
    dir.join("sidecar.sock")
}

/// A config for an in-process clustered host `id` in `dir` (the membership provider is
/// injected through `HostOptions`).
pub fn cluster_host_config(dir: &Path, id: &str, extra: &[&str]) -> Config {
    let socket = dir.join(format!("{id}.sock"));
    let mut args = vec![
        "sigx-sidecar".to_string(),
        "--membership".into(),
        "sqlite".into(),
        "--sqlite-path".into(),
        dir.join("m.db").display().to_string(),
        "--socket".into(),
        socket.display().to_string(),
        "--health-addr".into(),
        "127.0.0.1:0".into(),
        "--mesh-addr".into(),
        "127.0.0.1:0".into(),
        "--advertise".into(),
        "127.0.0.1:0".into(),
        "--host-id".into(),
        id.into(),
        "--secret".into(),
        "test-cluster-secret".into(),
        "--beat-ms".into(),
        "100".into(),
        "--ttl-ms".into(),
        "600".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    <Args as clap::Parser>::try_parse_from(args)
        .unwrap()
        .validate()
        .unwrap()
}

/// Waits until `/readyz` answers 200, or panics after `within`.
pub async fn wait_ready(addr: std::net::SocketAddr, within: Duration) {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if http_get(addr, "/readyz").await == 200 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("host at {addr} not ready within {within:?}");
}

/// Activations of each actor across `apps`, as (host, start, end) from Activate to Deactivate
/// (an activation still live ends at `now`). Returns the actors with two overlapping ones.
pub fn overlapping_activations(apps: &[(&str, &TestApp)]) -> Vec<String> {
    let now = Instant::now();
    let mut spans: HashMap<String, Vec<(String, Instant, Instant)>> = HashMap::new();
    for (host, app) in apps {
        let events = app.events();
        for e in events.iter().filter(|e| e.what == "activate") {
            let end = events
                .iter()
                .find(|d| d.what == "deactivate" && d.activation_id == e.activation_id)
                .map(|d| d.end)
                .unwrap_or(now);
            spans
                .entry(e.actor.clone())
                .or_default()
                .push((host.to_string(), e.start, end));
        }
    }
    let mut bad = Vec::new();
    for (actor, list) in spans {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if a.1 < b.2 && b.1 < a.2 {
                    bad.push(format!("{actor}: {} and {}", a.0, b.0));
                }
            }
        }
    }
    bad
}

/// Makes `<dir>/<host>/` hold `tls.crt`, `tls.key` and `ca.crt` (the layout of SIGX_MTLS_DIR, as
/// a kubernetes.io/tls Secret with its CA mounts) for host `host` of cluster `cluster`: a leaf for
/// IP 127.0.0.1 and the URI SAN `spiffe://<cluster>/host/<host>` that binds the host id, valid as
/// both client and server, signed by the CA in `<dir>/ca.crt` (made by the `openssl` CLI on the
/// first call). Returns the host's directory.
pub fn make_mtls_dir(dir: &Path, cluster: &str, host: &str) -> std::path::PathBuf {
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl CLI makes the test certificates");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    std::fs::create_dir_all(dir.join(host)).unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    if !dir.join("ca.crt").exists() {
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        ca.extend([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=sigx-test-ca",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ]);
        run(&ca);
    }
    let ext = format!("{host}.cnf");
    std::fs::write(
        dir.join(&ext),
        format!(
            "subjectAltName=IP:127.0.0.1,URI:spiffe://{cluster}/host/{host}\n\
             extendedKeyUsage=serverAuth,clientAuth\n\
             basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        ),
    )
    .unwrap();
    let (key, csr, crt) = (
        format!("{host}/tls.key"),
        format!("{host}/tls.csr"),
        format!("{host}/tls.crt"),
    );
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=sigx-host"]);
    run(&req);
    run(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &crt,
        "-days",
        "2",
        "-extfile",
        &ext,
    ]);
    std::fs::copy(dir.join("ca.crt"), dir.join(host).join("ca.crt")).unwrap();
    dir.join(host)
}

/// One in-process clustered host over a memory hub, with a raw-protocol app registered.
pub struct Node {
    pub host: Host,
    pub app: TestApp,
}

/// Starts `id` on `hub` registering `actors` and `workers` (max concurrency 8); the app's
/// method `work` sleeps 2 ms and echoes, unless `behaviours` says otherwise. Ready on return.
pub async fn cluster_node(
    dir: &std::path::Path,
    hub: &sigx_sidecar::membership::MemoryHub,
    id: &str,
    actors: &[&str],
    workers: &[&str],
    behaviours: HashMap<String, Behaviour>,
) -> Node {
    cluster_node_with(dir, hub, id, actors, workers, behaviours, &[]).await
}

/// [`cluster_node`] with extra sidecar flags (`--placement least-loaded`, ...).
pub async fn cluster_node_with(
    dir: &std::path::Path,
    hub: &sigx_sidecar::membership::MemoryHub,
    id: &str,
    actors: &[&str],
    workers: &[&str],
    behaviours: HashMap<String, Behaviour>,
    extra: &[&str],
) -> Node {
    let mut cfg = cluster_host_config(dir, id, extra);
    // These tests are about routing and the directory, not failover: a TTL of 600 ms fenced
    // hosts when a loaded CI machine starved a heartbeat, and the calls then failed.
    cfg.beat = Duration::from_millis(250);
    cfg.ttl = Duration::from_secs(3);
    let host = Host::start_with(
        cfg,
        sigx_sidecar::host::HostOptions {
            provider: Some(hub.provider(id)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: actors.iter().map(|a| actor_spec(a, false, 0)).collect(),
            workers: workers
                .iter()
                .map(|w| v1::WorkerTypeSpec {
                    name: w.to_string(),
                    max_concurrency: 8,
                    methods: vec![],
                })
                .collect(),
            app_name: id.into(),
        },
        {
            let mut b = HashMap::from([(
                "work".to_string(),
                Behaviour::SleepEcho(Duration::from_millis(2)),
            )]);
            b.extend(behaviours);
            b
        },
    )
    .await
    .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    Node { host, app }
}
