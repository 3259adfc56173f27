//! The app socket serves every stock gRPC client with its default options (issue 15): whatever
//! `:authority` it sends, the standard rich error model on every error, and reflection in both
//! protocol versions. The Python, Node.js and Go runners in sdk/ check the same with the stock
//! libraries themselves; these tests pin the wire behaviour from Rust.

mod support;

use std::time::Duration;
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    b.extend([kind, flags]);
    b.extend(stream_id.to_be_bytes());
    b.extend(payload);
    b
}

/// The answer to one raw HTTP/2 gRPC request: the response's header fields (initial and
/// trailing), or the RST_STREAM error code when the server refused the stream.
#[derive(Debug)]
enum Answer {
    Headers(Vec<(String, String)>),
    Reset(u32),
}

/// Sends `grpc.health.v1.Health/Check` with `authority` over a raw HTTP/2 connection, encoded
/// the way gRPC's C core encodes it (`:authority` as a literal with incremental indexing), and
/// reads the answer until the trailers or a reset.
async fn health_check_with_authority(socket: &std::path::Path, authority: &str) -> Answer {
    let mut conn = tokio::net::UnixStream::connect(socket).await.unwrap();
    let mut encoder = loona_hpack::Encoder::new();
    let headers: Vec<(&[u8], &[u8])> = vec![
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/grpc.health.v1.Health/Check"),
        (b":authority", authority.as_bytes()),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ];
    let block = encoder.encode(headers);
    let mut out = PREFACE.to_vec();
    out.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    out.extend(frame(0x1, 0x4, 1, &block)); // HEADERS, END_HEADERS
    out.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0])); // DATA: an empty HealthCheckRequest
    conn.write_all(&out).await.unwrap();

    let mut decoder = loona_hpack::Decoder::new();
    let mut fields = Vec::new();
    let read = async {
        loop {
            let mut head = [0u8; 9];
            conn.read_exact(&mut head).await.unwrap();
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let (kind, flags) = (head[3], head[4]);
            let sid = u32::from_be_bytes([head[5], head[6], head[7], head[8]]);
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            match kind {
                0x4 if flags & 0x1 == 0 => conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
                0x3 if sid == 1 => {
                    return Answer::Reset(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                }
                0x1 if sid == 1 => {
                    for (n, v) in decoder.decode(&payload).unwrap() {
                        fields.push((String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()));
                    }
                    if flags & 0x1 != 0 {
                        return Answer::Headers(fields);
                    }
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_authority_a_stock_client_sends_is_accepted_on_the_socket() {
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    // gRPC's C core (Python, Ruby, PHP, C++) percent-encodes the socket path; grpc-go sends
    // "localhost"; an empty one must not matter either.
    let c_core = host
        .socket
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F");
    for authority in [c_core.as_str(), "localhost", "tmp%2Fa%2Fs.sock", ""] {
        let fields = match health_check_with_authority(&host.socket, authority).await {
            Answer::Headers(fields) => fields,
            Answer::Reset(code) => {
                panic!("authority {authority:?} was refused: RST_STREAM with error code {code}")
            }
        };
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get(":status"), Some("200"), "{authority:?}: {fields:?}");
        assert_eq!(get("grpc-status"), Some("0"), "{authority:?}: {fields:?}");
    }
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

/// Reads a status the way every language's stock helper does: `grpc-status-details-bin` is a
/// `google.rpc.Status` with the same code and message, whose one detail is a packed ErrorDetail;
/// the kind is also in `sigx-error-kind`. Returns the detail's kind.
fn rich_kind(status: &tonic::Status) -> sigx_proto::v1::ErrorKind {
    use prost::Message;
    let rich = sigx_proto::google::rpc::Status::decode(status.details())
        .unwrap_or_else(|e| panic!("details of {status:?} are no google.rpc.Status: {e}"));
    assert_eq!(rich.code, status.code() as i32, "{status:?}");
    assert_eq!(rich.message, status.message(), "{status:?}");
    assert_eq!(rich.details.len(), 1, "{rich:?}");
    assert_eq!(
        rich.details[0].type_url,
        "type.googleapis.com/sigx.actors.v1.ErrorDetail"
    );
    let detail = sigx_proto::v1::ErrorDetail::decode(rich.details[0].value.as_slice()).unwrap();
    let kind = sigx_proto::v1::ErrorKind::try_from(detail.kind).unwrap();
    let metadata = status
        .metadata()
        .get(sigx_proto::error::ERROR_KIND_METADATA)
        .unwrap_or_else(|| panic!("no sigx-error-kind on {status:?}"));
    assert_eq!(
        metadata.to_str().unwrap(),
        sigx_proto::ErrorKind::from_proto(detail.kind).as_str()
    );
    kind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refusals_and_call_errors_carry_the_standard_rich_error_model() {
    use sigx_proto::v1::{self, ErrorKind};
    use std::collections::HashMap;
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let register = |actors| v1::Register {
        actors,
        workers: vec![],
        app_name: "rich-errors".into(),
    };

    let invalid = TestApp::start(&host.socket, register(vec![]), HashMap::new())
        .await
        .err()
        .expect("an empty registration is refused");
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    assert_eq!(rich_kind(&invalid), ErrorKind::Invalid);

    let _first = TestApp::start(
        &host.socket,
        register(vec![actor_spec("A", false, 0)]),
        HashMap::new(),
    )
    .await
    .unwrap();
    let second = TestApp::start(
        &host.socket,
        register(vec![actor_spec("B", false, 0)]),
        HashMap::new(),
    )
    .await
    .err()
    .expect("a second app is refused");
    assert_eq!(second.code(), tonic::Code::FailedPrecondition);
    assert!(
        second.message().contains("already registered"),
        "{second:?}"
    );
    assert_eq!(rich_kind(&second), ErrorKind::WrongHost);

    let mut client = client(&host.socket).await;
    let unknown = client
        .call(v1::CallRequest {
            actor: Some(v1::ActorRef {
                actor_type: "Nope".into(),
                key: "1".into(),
            }),
            method: "get".into(),
            payload: Default::default(),
            timeout_ms: 2_000,
            trace: None,
            locality: 0,
        })
        .await
        .expect_err("an unknown type fails");
    assert_eq!(
        rich_kind(&unknown),
        ErrorKind::Invalid,
        "a single host knows its types"
    );
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

/// A real `sigx-sidecar` process stopped with SIGTERM ends the app's Serve stream with OK after
/// deactivating its actors, before the GOAWAY: an app tells "stopping" from "crashed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_serve_stream_with_ok_after_the_drain() {
    use sigx_proto::v1::{self, actor_host_client::ActorHostClient};
    let dir = tempdir();
    let socket = dir.path().join("s.sock");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sigx-sidecar"))
        .env("SIGX_SOCKET", &socket)
        .env("SIGX_MEMBERSHIP", "none")
        .env("SIGX_HEALTH_ADDR", "127.0.0.1:0")
        .env("SIGX_INSECURE", "true")
        .env("SIGX_LOG", "info")
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = tokio::time::Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no socket after 15 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut app = ActorHostClient::new(connect(&socket).await);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(v1::AppMessage {
        msg: Some(v1::app_message::Msg::Register(v1::Register {
            actors: vec![actor_spec("Counter", false, 0)],
            workers: vec![],
            app_name: "sigterm".into(),
        })),
    })
    .unwrap();
    let mut inbound = app
        .serve(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        inbound.message().await.unwrap().unwrap().msg,
        Some(v1::sidecar_message::Msg::Registered(_))
    ));
    // One activation, so the stop has something to deactivate.
    let caller = tokio::spawn({
        let socket = socket.clone();
        async move {
            let mut c = client(&socket).await;
            call(&mut c, "Counter", "a", "incr", b"", 10_000).await
        }
    });
    let mut kinds = Vec::new();
    let answer = |turn: v1::Turn, kinds: &mut Vec<&'static str>| {
        kinds.push(match turn.kind {
            Some(v1::turn::Kind::Activate(_)) => "activate",
            Some(v1::turn::Kind::Invoke(_)) => "invoke",
            Some(v1::turn::Kind::Deactivate(_)) => "deactivate",
            Some(v1::turn::Kind::Timer(_)) => "timer",
            Some(v1::turn::Kind::Reminder(_)) => "reminder",
            None => "none",
        });
        tx.send(v1::AppMessage {
            msg: Some(v1::app_message::Msg::Result(v1::TurnResult {
                turn_id: turn.turn_id,
                outcome: Some(v1::turn_result::Outcome::Ok(Default::default())),
                writes: Vec::new(),
            })),
        })
        .unwrap();
    };
    for _ in 0..2 {
        let Some(v1::sidecar_message::Msg::Turn(turn)) =
            inbound.message().await.unwrap().unwrap().msg
        else {
            panic!("expected a turn");
        };
        answer(turn, &mut kinds);
    }
    caller.await.unwrap().expect("the call succeeds");

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match inbound.message().await {
                Ok(Some(v1::SidecarMessage {
                    msg: Some(v1::sidecar_message::Msg::Turn(turn)),
                })) => answer(turn, &mut kinds),
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(status) => return Err(status),
            }
        }
    })
    .await
    .expect("the Serve stream ends within 20 s of SIGTERM");
    drop(tx);
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the sidecar exits")
        .unwrap();
    let mut log = String::new();
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut log).await;
    }
    assert!(
        end.is_ok(),
        "the Serve stream broke instead of ending with OK: {end:?}\n{log}"
    );
    assert_eq!(kinds, ["activate", "invoke", "deactivate"], "{log}");
    assert!(exit.success(), "{exit:?}\n{log}");
    let ended = log.find("app-stream-ended").expect("the step is logged");
    let closed = log.find("listeners-closed").expect("the step is logged");
    assert!(
        ended < closed,
        "the stream ends before the listeners close:\n{log}"
    );
}

/// Reflection answers in v1alpha too (Python's grpcio-reflection client, older grpcurl), with
/// the same services as v1, and resolves a sigx symbol to its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_answers_in_v1alpha_as_well_as_v1() {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let dir = tempdir();
    let host = start_host(dir.path(), &[]).await;
    let mut reflection = ServerReflectionClient::new(connect(&host.socket).await);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(
                "sigx.actors.v1.ActorHost".into(),
            )),
        },
    ];
    let mut answers = reflection
        .server_reflection_info(futures::stream::iter(requests))
        .await
        .expect("v1alpha reflection is served")
        .into_inner();
    let list = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = list.message_response else {
        panic!("unexpected reflection answer: {list:?}");
    };
    let mut names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    names.sort();
    assert_eq!(names, ["grpc.health.v1.Health", "sigx.actors.v1.ActorHost"]);
    let file = answers.message().await.unwrap().unwrap();
    let Some(MessageResponse::FileDescriptorResponse(files)) = file.message_response else {
        panic!("unexpected reflection answer: {file:?}");
    };
    assert!(!files.file_descriptor_proto.is_empty());
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}

/// In a cluster an unknown type is `activation` (its routing retries spent on `unplaceable`):
/// an answer no blind retry can fix, so it travels under FAILED_PRECONDITION, which generic gRPC
/// retry policies leave alone — not UNAVAILABLE, which they retry — with the kind and its cause
/// in the rich error model as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_type_in_a_cluster_answers_a_code_generic_clients_do_not_retry() {
    use prost::Message;
    use sigx_proto::v1::{self, ErrorKind};
    use std::collections::HashMap;
    let dir = tempdir();
    let host = sigx_sidecar::host::Host::start(cluster_host_config(dir.path(), "solo", &[]))
        .await
        .unwrap();
    let _app = TestApp::start(
        &host.socket,
        v1::Register {
            actors: vec![actor_spec("Known", false, 0)],
            workers: vec![],
            app_name: "unknown-type".into(),
        },
        HashMap::new(),
    )
    .await
    .unwrap();
    wait_ready(host.health_addr, Duration::from_secs(10)).await;
    let mut c = client(&host.socket).await;
    let unknown = c
        .call(v1::CallRequest {
            actor: Some(v1::ActorRef {
                actor_type: "Nope".into(),
                key: "1".into(),
            }),
            method: "get".into(),
            payload: Default::default(),
            timeout_ms: 5_000,
            trace: None,
            locality: 0,
        })
        .await
        .expect_err("an unknown type fails");
    assert_eq!(rich_kind(&unknown), ErrorKind::Activation, "{unknown:?}");
    assert_eq!(
        unknown.code(),
        tonic::Code::FailedPrecondition,
        "{unknown:?}"
    );
    let rich = sigx_proto::google::rpc::Status::decode(unknown.details()).unwrap();
    let detail = v1::ErrorDetail::decode(rich.details[0].value.as_slice()).unwrap();
    assert_eq!(
        detail.cause.map(|c| c.kind),
        Some(ErrorKind::Unplaceable as i32),
        "the cause says why"
    );
    host.stop(sigx_sidecar::host::StopKind::Fast).await;
}
