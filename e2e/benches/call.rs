//! Call latency and throughput of sigx next to raw tonic baselines measured in the same run.
//!
//! * same host: an actor call through the sidecar's Unix socket (SDK client → sidecar → SDK app
//!   → back) vs a raw tonic unary echo over a Unix socket;
//! * cross host: an actor call that crosses the mesh (client → sidecar A → mesh → sidecar B →
//!   app B → back) vs a raw tonic unary echo over loopback TCP.
//!
//! * cross host, first call: a call to a fresh key (directory claim, epoch, Activate turn on
//!   host B, then the echo) vs a warm cross-host call, alternating, in the same pair of hosts.
//!
//! * cross host, traced: the same with OTLP export on at 100 % to a real collector (when
//!   `make otelcol` built it), every call carrying a sampled `traceparent`.
//!
//! * trace off: the trace module's work on one untraced cross-host call with export off (the
//!   calls the call path makes), timed in a loop, as a share of the cross-host median.
//!
//! * same host through a real `sigx-sidecar` process (`SIGX_BIN_DIR`, when it holds one): the
//!   Rust SDK client and app of this process around the release binary, vs a raw tonic unary
//!   echo over a Unix socket with tonic's stock client (`Endpoint`, default options). This is
//!   the Rust reference of issue 15's per-language SDK overhead (`make bench-lang`,
//!   scripts/bench-lang.sh), shaped like the Python, Node.js and Go benches beside each SDK.
//!
//! Run: `make bench` (or `cargo bench -p sigx-e2e --bench call`). Figures are ratios against the
//! baseline of the same run, because machines are noisy.

use bytes::Bytes;
use sigx_proto::v1;
use sigx_proto::v1::actor_host_server::{ActorHost, ActorHostServer};
use sigx_sdk::{ActorType, App, Client, Context, WorkerType};
use sigx_sidecar::host::{Host, HostOptions, StopKind};
use sigx_sidecar::membership::MemoryHub;
use sigx_sidecar::runtime::ActorId;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::{Request, Response, Status, Streaming};

const SEQUENTIAL: usize = 3_000;
/// Blocks the sequential calls of baseline and sigx alternate in.
const ROUNDS: usize = 6;
const CONCURRENCY: usize = 32;
const THROUGHPUT_FOR: Duration = Duration::from_secs(2);
const PAYLOAD: &[u8] = &[7u8; 64];

/// A raw echo: the same generated service and messages, `Call` answers the payload back.
struct RawEcho;

#[tonic::async_trait]
impl ActorHost for RawEcho {
    type ServeStream = futures::stream::Empty<Result<v1::SidecarMessage, Status>>;
    type WatchMembersStream = futures::stream::Empty<Result<v1::MembersResponse, Status>>;
    async fn serve(
        &self,
        _r: Request<Streaming<v1::AppMessage>>,
    ) -> Result<Response<Self::ServeStream>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn call(
        &self,
        r: Request<v1::CallRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        Ok(Response::new(v1::CallResponse {
            payload: r.into_inner().payload,
        }))
    }
    async fn members(
        &self,
        _r: Request<v1::MembersRequest>,
    ) -> Result<Response<v1::MembersResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn dispatch_on(
        &self,
        _r: Request<v1::DispatchOnRequest>,
    ) -> Result<Response<v1::CallResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn watch_members(
        &self,
        _r: Request<v1::MembersRequest>,
    ) -> Result<Response<Self::WatchMembersStream>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn status(
        &self,
        _r: Request<v1::StatusRequest>,
    ) -> Result<Response<v1::StatusResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn read_state(
        &self,
        _r: Request<v1::ReadStateRequest>,
    ) -> Result<Response<v1::ReadStateResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn set_timer(
        &self,
        _r: Request<v1::SetTimerRequest>,
    ) -> Result<Response<v1::SetTimerResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
    async fn cancel_timer(
        &self,
        _r: Request<v1::CancelTimerRequest>,
    ) -> Result<Response<v1::CancelTimerResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }

    async fn set_reminder(
        &self,
        _r: Request<v1::SetReminderRequest>,
    ) -> Result<Response<v1::SetReminderResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }

    async fn delete_reminder(
        &self,
        _r: Request<v1::DeleteReminderRequest>,
    ) -> Result<Response<v1::DeleteReminderResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }

    async fn list_reminders(
        &self,
        _r: Request<v1::ListRemindersRequest>,
    ) -> Result<Response<v1::ListRemindersResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }

    async fn locate(
        &self,
        _r: Request<v1::LocateRequest>,
    ) -> Result<Response<v1::LocateResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }

    async fn list_actors(
        &self,
        _r: Request<v1::ListActorsRequest>,
    ) -> Result<Response<v1::ListActorsResponse>, Status> {
        Err(Status::unimplemented("baseline"))
    }
}

async fn raw_echo_uds(path: &Path) {
    let listener = tokio::net::UnixListener::bind(path).unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ActorHostServer::new(RawEcho))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
    );
}

/// A tonic client with default options on a Unix socket: the stock way to call a gRPC server
/// there (tonic has no `unix:` URIs of its own; the connector is tonic's documented example).
async fn tonic_uds(
    path: &Path,
) -> v1::actor_host_client::ActorHostClient<tonic::transport::Channel> {
    let path = path.to_path_buf();
    let channel = tonic::transport::Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(path).await?,
                ))
            }
        }))
        .await
        .unwrap();
    v1::actor_host_client::ActorHostClient::new(channel)
}

async fn raw_echo_tcp() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ActorHostServer::new(RawEcho))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    addr
}

#[derive(Debug, Clone, Copy)]
struct Figures {
    p50_us: f64,
    p99_us: f64,
    per_sec: f64,
    /// CPU time of the whole process (every thread) per sequential call: less sensitive than
    /// latency to other work on the machine, so it shows what a change saved.
    cpu_us: f64,
    /// Times any thread of the process was scheduled onto a CPU, per sequential call: every
    /// hand-off between threads (a parked runtime worker woken for a task) costs one. This
    /// count does not depend on how fast the machine is, and on a virtual machine, where each
    /// switch is dear, it explains most of the latency.
    switches: f64,
}

/// CPU time consumed so far by every live thread of this process, from the scheduler's own
/// accounting (`/proc/self/task/*/schedstat`, nanoseconds); 0 where that is unavailable.
/// Also returns how many times they were scheduled onto a CPU (the third field).
fn cpu_ns() -> (u64, u64) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0, 0);
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| {
            let mut f = s.split_whitespace();
            let ns = f.next()?.parse::<u64>().ok()?;
            let slices = f.nth(1)?.parse::<u64>().ok()?;
            Some((ns, slices))
        })
        .fold((0, 0), |(a, b), (ns, sl)| (a + ns, b + sl))
}

/// Latency of `SEQUENTIAL` sequential calls each, then throughput with `CONCURRENCY` callers
/// each, of the baseline (`base(i)` makes call i) and of sigx (`sigx(i)`).
///
/// The sequential calls alternate between the two in `ROUNDS` blocks, so both see the same
/// machine: on a shared box a burst of other work during one block otherwise lands on one side
/// of the ratio only.
async fn measure_pair<B, BF, S, SF>(base: B, sigx: S) -> (Figures, Figures)
where
    B: Fn(usize) -> BF + Send + Sync + 'static,
    BF: std::future::Future<Output = ()> + Send,
    S: Fn(usize) -> SF + Send + Sync + 'static,
    SF: std::future::Future<Output = ()> + Send,
{
    let (base, sigx) = (Arc::new(base), Arc::new(sigx));
    for i in 0..200 {
        base(i).await;
        sigx(i).await;
    }
    let mut lat = (
        Vec::with_capacity(SEQUENTIAL),
        Vec::with_capacity(SEQUENTIAL),
    );
    let mut cpu = ((0u64, 0u64), (0u64, 0u64));
    let per_round = SEQUENTIAL / ROUNDS;
    for round in 0..ROUNDS {
        let from = round * per_round;
        let before = cpu_ns();
        for i in from..from + per_round {
            let t = Instant::now();
            base(i).await;
            lat.0.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let between = cpu_ns();
        for i in from..from + per_round {
            let t = Instant::now();
            sigx(i).await;
            lat.1.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let after = cpu_ns();
        cpu.0.0 += between.0.saturating_sub(before.0);
        cpu.0.1 += between.1.saturating_sub(before.1);
        cpu.1.0 += after.0.saturating_sub(between.0);
        cpu.1.1 += after.1.saturating_sub(between.1);
    }
    let base_tp = throughput(base).await;
    let sigx_tp = throughput(sigx).await;
    (
        figures(lat.0, cpu.0, base_tp),
        figures(lat.1, cpu.1, sigx_tp),
    )
}

fn figures(mut lat: Vec<f64>, (cpu_ns, slices): (u64, u64), per_sec: f64) -> Figures {
    let cpu_us = cpu_ns as f64 / 1e3 / lat.len() as f64;
    let switches = slices as f64 / lat.len() as f64;
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| lat[((lat.len() as f64 - 1.0) * q) as usize];
    Figures {
        p50_us: p(0.50),
        p99_us: p(0.99),
        per_sec,
        cpu_us,
        switches,
    }
}

/// Calls per second with `CONCURRENCY` concurrent callers for `THROUGHPUT_FOR`.
async fn throughput<F, Fut>(call: Arc<F>) -> f64
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    // `SIGX_BENCH_THROUGHPUT=0` skips the throughput part (to profile the sequential calls).
    if std::env::var("SIGX_BENCH_THROUGHPUT").as_deref() == Ok("0") {
        return f64::NAN;
    }
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let until = Instant::now() + THROUGHPUT_FOR;
    let mut tasks = Vec::new();
    for w in 0..CONCURRENCY {
        let call = call.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = w;
            while Instant::now() < until {
                call(i).await;
                done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                i += CONCURRENCY;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(std::sync::atomic::Ordering::Relaxed) as f64 / THROUGHPUT_FOR.as_secs_f64()
}

fn bench_app(name: &str) -> App {
    let actor = ActorType::new("Bench", |_ctx: Context| async { Ok(()) })
        .method("echo", |ctx| async move { Ok(ctx.payload().clone()) });
    App::new(name)
        .actor(actor)
        .worker(WorkerType::new("Nop").method("nop", |_ctx| async move { Ok(Bytes::new()) }))
}

fn host_args(dir: &Path, id: &str, clustered: bool) -> sigx_sidecar::config::Config {
    let mut args: Vec<String> = vec![
        "sigx-sidecar".into(),
        "--socket".into(),
        dir.join(format!("{id}.sock")).display().to_string(),
        "--health-addr".into(),
        "127.0.0.1:0".into(),
        "--host-id".into(),
        id.into(),
    ];
    if clustered {
        args.extend(
            [
                "--membership",
                "sqlite",
                "--sqlite-path",
                "unused.db",
                "--mesh-addr",
                "127.0.0.1:0",
                "--advertise",
                "127.0.0.1:0",
                "--secret",
                "bench-secret",
                "--beat-ms",
                "1000",
                "--ttl-ms",
                "5000",
            ]
            .map(String::from),
        );
    } else {
        args.extend(["--membership", "none"].map(String::from));
    }
    <sigx_sidecar::config::Args as clap::Parser>::try_parse_from(args)
        .unwrap()
        .validate()
        .unwrap()
}

async fn wait_ready(host: &Host) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !host.state.ready() {
        assert!(
            Instant::now() < deadline,
            "host {} never became ready",
            host.id()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn row(name: &str, base: Figures, sigx: Figures) {
    println!(
        "{name:<11} | raw p50 {:>7.1} µs p99 {:>7.1} µs {:>8.0}/s cpu {:>5.1} µs/call {:>4.1} sw/call | sigx p50 {:>7.1} µs p99 {:>7.1} µs {:>8.0}/s cpu {:>5.1} µs/call {:>4.1} sw/call | p50 {:.2}x  p99 {:.2}x  throughput {:.0}%  cpu {:.2}x",
        base.p50_us,
        base.p99_us,
        base.per_sec,
        base.cpu_us,
        base.switches,
        sigx.p50_us,
        sigx.p99_us,
        sigx.per_sec,
        sigx.cpu_us,
        sigx.switches,
        sigx.p50_us / base.p50_us,
        sigx.p99_us / base.p99_us,
        100.0 * sigx.per_sec / base.per_sec,
        sigx.cpu_us / base.cpu_us,
    );
}

async fn same_host(dir: &Path) -> (Figures, Figures) {
    let raw_path = dir.join("raw.sock");
    raw_echo_uds(&raw_path).await;
    let raw = Client::lazy(&raw_path);

    let host = Host::start(host_args(dir, "solo", false)).await.unwrap();
    let client = Client::lazy(&host.socket);
    let serving = bench_app("bench").spawn(&client);
    wait_ready(&host).await;
    let figures = measure_pair(
        move |_| {
            let raw = raw.clone();
            async move {
                raw.call("Bench", "k", "echo", Bytes::from_static(PAYLOAD))
                    .await
                    .unwrap();
            }
        },
        move |i| {
            let client = client.clone();
            async move {
                client
                    .call(
                        "Bench",
                        format!("k{}", i % 64),
                        "echo",
                        Bytes::from_static(PAYLOAD),
                    )
                    .await
                    .unwrap();
            }
        },
    )
    .await;
    drop(serving);
    host.stop(StopKind::Fast).await;
    figures
}

/// The sidecar binary the process row runs, when `SIGX_BIN_DIR` (else this bench's own target
/// directory) holds one.
fn sidecar_binary() -> Option<std::path::PathBuf> {
    let bin = sigx_e2e::chaos::bin_dir().join("sigx-sidecar");
    bin.is_file().then_some(bin)
}

/// A started `sigx-sidecar` process, killed when dropped.
struct SidecarProcess(std::process::Child);
impl Drop for SidecarProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Same host through a real sidecar process: the Rust SDK's client and app in this process,
/// `bin` between them (membership none, memory state, as the other languages' benches start
/// it), vs a raw tonic echo with tonic's stock client.
async fn same_host_process(dir: &Path, bin: &Path) -> (Figures, Figures) {
    let raw_path = dir.join("raw-p.sock");
    raw_echo_uds(&raw_path).await;
    let raw = tonic_uds(&raw_path).await;

    let socket = dir.join("p.sock");
    let log = std::fs::File::create(dir.join("sidecar.log")).unwrap();
    let _sidecar = SidecarProcess(
        std::process::Command::new(bin)
            .env("SIGX_SOCKET", &socket)
            .env("SIGX_MEMBERSHIP", "none")
            .env("SIGX_HEALTH_ADDR", "127.0.0.1:0")
            .env("SIGX_HOST_ID", "rust-bench")
            .env("SIGX_INSECURE", "true")
            .env(
                "SIGX_LOG",
                std::env::var("SIGX_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "{} did not start", bin.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let client = Client::lazy(&socket);
    let serving = bench_app("bench-process").spawn(&client);
    while !client.status().await.is_ok_and(|s| s.app_connected) {
        assert!(Instant::now() < deadline, "the app never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let figures = measure_pair(
        move |_| {
            let mut raw = raw.clone();
            async move {
                raw.call(v1::CallRequest {
                    actor: Some(v1::ActorRef {
                        actor_type: "Bench".into(),
                        key: "k".into(),
                    }),
                    method: "echo".into(),
                    payload: Bytes::from_static(PAYLOAD),
                    timeout_ms: 0,
                    trace: None,
                    locality: 0,
                })
                .await
                .unwrap();
            }
        },
        move |i| {
            let client = client.clone();
            async move {
                client
                    .call(
                        "Bench",
                        format!("k{}", i % 64),
                        "echo",
                        Bytes::from_static(PAYLOAD),
                    )
                    .await
                    .unwrap();
            }
        },
    )
    .await;
    drop(serving);
    figures
}

/// The cross-host path; with `trace`, every sigx call carries that sampled `traceparent`.
async fn cross_host(dir: &Path, trace: Option<v1::TraceContext>) -> (Figures, Figures) {
    let addr = raw_echo_tcp().await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let raw = v1::actor_host_client::ActorHostClient::new(channel);

    // Host a registers only a worker, so every Bench call crosses the mesh to host b.
    let hub = MemoryHub::new();
    let a = Host::start_with(
        host_args(dir, "a", true),
        HostOptions {
            provider: Some(hub.provider("a")),
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
    let b = Host::start_with(
        host_args(dir, "b", true),
        HostOptions {
            provider: Some(hub.provider("b")),
            ..HostOptions::default()
        },
    )
    .await
    .unwrap();
    let ca = Client::lazy(&a.socket);
    let cb = Client::lazy(&b.socket);
    let untraced = trace.is_none();
    let traced = ca.with_trace(trace);
    let _sa = App::new("front")
        .worker(WorkerType::new("Nop").method("nop", |_ctx| async move { Ok(Bytes::new()) }))
        .spawn(&ca);
    let _sb = bench_app("back").spawn(&cb);
    wait_ready(&a).await;
    wait_ready(&b).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let figures = measure_pair(
        move |_| {
            let mut raw = raw.clone();
            async move {
                raw.call(v1::CallRequest {
                    actor: Some(v1::ActorRef {
                        actor_type: "Bench".into(),
                        key: "k".into(),
                    }),
                    method: "echo".into(),
                    payload: Bytes::from_static(PAYLOAD),
                    timeout_ms: 0,
                    trace: None,
                    locality: 0,
                })
                .await
                .unwrap();
            }
        },
        move |i| {
            let ca = traced.clone();
            async move {
                ca.call(
                    "Bench",
                    format!("k{}", i % 64),
                    "echo",
                    Bytes::from_static(PAYLOAD),
                )
                .await
                .unwrap();
            }
        },
    )
    .await;
    if untraced {
        first_calls(&ca).await;
    }
    a.host_stop().await;
    b.host_stop().await;
    figures
}

/// First calls across hosts (issue 18): each call to a fresh key claims it in the directory,
/// takes an epoch and activates it on host b (an Activate turn in b's app) before the echo; each
/// is paired with a warm call to an active key of b, alternating, so both see the same machine.
async fn first_calls(ca: &Client) {
    const FIRST_CALLS: usize = 400;
    let (mut first, mut warm) = (Vec::new(), Vec::new());
    for i in 0..FIRST_CALLS {
        let t = Instant::now();
        ca.call(
            "Bench",
            format!("first-{i}"),
            "echo",
            Bytes::from_static(PAYLOAD),
        )
        .await
        .unwrap();
        first.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        ca.call(
            "Bench",
            format!("k{}", i % 64),
            "echo",
            Bytes::from_static(PAYLOAD),
        )
        .await
        .unwrap();
        warm.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let (first, warm) = (
        figures(first, (0, 0), f64::NAN),
        figures(warm, (0, 0), f64::NAN),
    );
    println!(
        "cross-first | first call (claim + epoch + Activate on b) p50 {:.1} µs p99 {:.1} µs | warm cross-host p50 {:.1} µs p99 {:.1} µs | first p50 {:.2}x warm ({FIRST_CALLS} each, alternating)",
        first.p50_us,
        first.p99_us,
        warm.p50_us,
        warm.p99_us,
        first.p50_us / warm.p50_us,
    );
}

/// One untraced cross-host call's worth of the trace module's work with export off, as the
/// call path does it (app API, router, mesh delivery, inbound, turn, the turn's message to the
/// app): one metadata look-up, three `enabled` checks, two `child_of_current`, two `step`s
/// (a directory look-up, a state commit), one `current` and four `traced(None)` wrappers (the
/// routing loop has made no span of its own since issue 16's change). With `eager`, the two spans' attributes are
/// built before the call as the code did before `child_of_current` took them lazily, so the
/// same run shows what that change saved.
async fn trace_off_once(md: &tonic::metadata::MetadataMap, actor: &ActorId, eager: bool) {
    use opentelemetry::trace::SpanKind;
    use sigx_sidecar::trace;
    use std::hint::black_box;
    let ok = || async { Ok::<_, sigx_proto::ActorError>(()) };
    let attrs = |method| {
        let early = eager.then(|| trace::actor_attrs(black_box(actor), method));
        move || early.unwrap_or_else(|| trace::actor_attrs(actor, method))
    };
    let parent = trace::extract_metadata(black_box(md));
    black_box(parent.is_some() || trace::enabled());
    let _ = trace::traced(None, ok()).await;
    let cx = trace::child_of_current("sigx.mesh.deliver", SpanKind::Client, attrs("echo"));
    black_box(cx.as_ref().and_then(trace::inject));
    let _ = trace::traced(cx, ok()).await;
    for _ in 0..2 {
        black_box(trace::step(
            "sigx.directory.lookup",
            SpanKind::Internal,
            || trace::actor_only_attrs(actor),
        ));
    }
    black_box(trace::enabled());
    let _ = trace::traced(None, ok()).await;
    black_box(trace::enabled());
    let cx = trace::child_of_current("sigx.turn", SpanKind::Internal, attrs("echo"));
    black_box(trace::current());
    let _ = trace::traced(cx, ok()).await;
}

/// Nanoseconds per call of [`trace_off_once`], over many repetitions, with metadata like an SDK
/// call's (no `traceparent`).
async fn trace_off_ns(eager: bool) -> f64 {
    const N: u32 = 200_000;
    let mut md = tonic::metadata::MetadataMap::new();
    md.insert("content-type", "application/grpc".parse().unwrap());
    md.insert("te", "trailers".parse().unwrap());
    md.insert("user-agent", "tonic/0.14".parse().unwrap());
    md.insert("grpc-timeout", "30000m".parse().unwrap());
    let actor = ActorId::new("Bench", "k17");
    for _ in 0..N / 10 {
        trace_off_once(&md, &actor, eager).await;
    }
    let t0 = Instant::now();
    for _ in 0..N {
        trace_off_once(&md, &actor, eager).await;
    }
    t0.elapsed().as_nanos() as f64 / f64::from(N)
}

trait Stop {
    async fn host_stop(self);
}
impl Stop for Host {
    async fn host_stop(self) {
        self.stop(StopKind::Fast).await
    }
}

fn main() {
    // Logging as the sidecar binary sets it up (an `EnvFilter` subscriber; `SIGX_LOG`, default
    // `warn` here so the figures are not interleaved with startup lines). Without any
    // subscriber every disabled span and event of every crate takes `tracing`'s `log`
    // fallback path instead, which no deployed process does.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SIGX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // `SIGX_BENCH_WORKERS=n` sets the runtime's worker threads (default 2, the CI machine's cores).
    let workers = std::env::var("SIGX_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        println!(
            "sigx call benchmark: {SEQUENTIAL} sequential calls (latency), {CONCURRENCY} concurrent callers for {THROUGHPUT_FOR:?} (throughput), {}-byte payload",
            PAYLOAD.len()
        );
        // `SIGX_BENCH_ONLY=same` or `=cross` runs one path (for profiling one of them).
        let only = std::env::var("SIGX_BENCH_ONLY").unwrap_or_default();
        if only.is_empty() || only == "same" {
            let (base, sigx) = same_host(dir.path()).await;
            row("same-host", base, sigx);
        }
        // `SIGX_BENCH_ONLY=process` is what `make bench-lang` runs: the Rust line of issue 15.
        if let Some(bin) = sidecar_binary().filter(|_| only.is_empty() || only == "process") {
            let (base, sigx) = same_host_process(dir.path(), &bin).await;
            row("sidecar-proc", base, sigx);
            println!(
                "lang-bench lang=rust stack=tonic calls={SEQUENTIAL} raw_p50_us={:.1} raw_p99_us={:.1} raw_per_s={:.0} sdk_p50_us={:.1} sdk_p99_us={:.1} sdk_per_s={:.0}",
                base.p50_us, base.p99_us, base.per_sec, sigx.p50_us, sigx.p99_us, sigx.per_sec
            );
        }
        if only.is_empty() || only == "cross" {
            let (base, sigx) = cross_host(dir.path(), None).await;
            row("cross-host", base, sigx);
            // Tracing off (export off, an untraced call): what the trace module's work on the
            // call path costs, against this run's cross-host median.
            let p50_ns = sigx.p50_us * 1000.0;
            let (off, eager) = (trace_off_ns(false).await, trace_off_ns(true).await);
            println!(
                "trace-off   | {off:.0} ns per call = {:.3} % of the cross-host p50 ({:.1} µs); \
                 with eagerly built span attributes (before) {eager:.0} ns = {:.3} %",
                100.0 * off / p50_ns,
                sigx.p50_us,
                100.0 * eager / p50_ns,
            );
        }
        // Tracing on: export at 100 % to a real collector (e2e/otelcol, `make otelcol`), every
        // call carrying a sampled traceparent. Last, because export is turned on once per
        // process; compare its ratio with the cross-host row's (tracing off) of the same run.
        if (only.is_empty() || only == "traced") && sigx_e2e::otelcol::binary().is_file() {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let collector = sigx_e2e::otelcol::Collector::start(dir.path(), port);
            let args = sigx_sidecar::trace::TraceArgs {
                otlp_endpoint: Some(collector.endpoint.clone()),
                ..Default::default()
            };
            let tracing = sigx_sidecar::trace::init(&args, "bench").unwrap();
            let trace = v1::TraceContext {
                traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
                tracestate: String::new(),
            };
            let traced_dir = dir.path().join("traced");
            std::fs::create_dir_all(&traced_dir).unwrap();
            let (base, sigx) = cross_host(&traced_dir, Some(trace)).await;
            row("cross-traced", base, sigx);
            let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
            drop(collector);
        }
    });
}
