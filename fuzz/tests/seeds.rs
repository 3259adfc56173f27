//! Writes the seed corpus `fuzz/corpus/<target>/`: a few well-formed inputs per target, so the
//! fuzzer starts from messages the code accepts instead of guessing protobuf tags and MACs.
//! Not part of `make test`; rerun after changing a target's input format:
//!
//! ```sh
//! cargo test -p sigx-fuzz --test seeds -- --ignored
//! ```

use prost::Message;
use sigx_proto::v1;
use sigx_sidecar::mesh::auth::MeshSecret;
use std::path::Path;

const NOW_MS: i64 = 1_700_000_000_000;
const PATH: &str = "/sigx.actors.v1.Mesh/Deliver";

fn write(target: &str, name: &str, bytes: impl AsRef<[u8]>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn tagged(tag: u8, m: &impl Message) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend(m.encode_to_vec());
    v
}

fn actor(ty: &str, key: &str) -> Option<v1::ActorRef> {
    Some(v1::ActorRef {
        actor_type: ty.into(),
        key: key.into(),
    })
}

fn trace() -> v1::TraceContext {
    v1::TraceContext {
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        tracestate: "vendor=value".into(),
    }
}

fn mesh_auth() {
    let secret = MeshSecret::new("fuzz-cluster-secret").unwrap();
    let mac = secret.sign("host-a", NOW_MS, PATH);
    let signed = format!("{PATH}\nsigx-peer:host-a\nsigx-ts:{NOW_MS}\nsigx-mac:{mac}");
    write("mesh_auth", "signed", format!("\x00{signed}"));
    write(
        "mesh_auth",
        "signed-cert",
        format!("\x02{signed}\ncert:spiffe://fuzz/host/host-a"),
    );
    let stranger = secret.sign("stranger", NOW_MS, PATH);
    write(
        "mesh_auth",
        "stranger",
        format!("\x00{PATH}\nsigx-peer:stranger\nsigx-ts:{NOW_MS}\nsigx-mac:{stranger}"),
    );
    write(
        "mesh_auth",
        "unsigned",
        format!("\x00{PATH}\nsigx-peer:host-a"),
    );
    // A verifier that also accepts unsigned requests (`--accept-unsigned`, bit 2).
    write(
        "mesh_auth",
        "unsigned-accepted",
        format!("\x04{PATH}\nsigx-peer:host-a"),
    );
    write(
        "mesh_auth",
        "signed-accepting-unsigned",
        format!("\x06{signed}\ncert:spiffe://fuzz/host/host-a"),
    );
    write(
        "mesh_auth",
        "mutate-mac",
        format!("\x01host-a\n{NOW_MS}\n{PATH}\n\x20\x00\x01"),
    );
    write(
        "mesh_auth",
        "mutate-ts",
        format!(
            "\x01host-b\n{}\n/sigx.actors.v1.Mesh/Lookup\n\x08\x00\x02",
            NOW_MS - 30_000
        ),
    );
    write(
        "mesh_auth",
        "old-ts",
        format!("\x01host-a\n1600000000000\n{PATH}\n\x00\x00\x01"),
    );
}

/// An HPACK literal with incremental indexing and a literal name (RFC 7541 §6.2.1).
fn indexed_literal(out: &mut Vec<u8>, name: &str, value: &str) {
    out.push(0x40);
    out.push(name.len() as u8);
    out.extend(name.as_bytes());
    out.push(value.len() as u8);
    out.extend(value.as_bytes());
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    out.extend(&(payload.len() as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
}

fn app_authority() {
    // :method POST, :scheme http, :path from a literal, :authority as gRPC's C core sends it.
    let block = |authority: &str| {
        let mut b = vec![0x83, 0x86];
        indexed_literal(&mut b, ":path", "/sigx.actors.v1.ActorHost/Call");
        indexed_literal(&mut b, ":authority", authority);
        indexed_literal(&mut b, "content-type", "application/grpc");
        b
    };
    for (name, authority) in [("c-core", "tmp%2Fdir%2Fs.sock"), ("valid", "localhost")] {
        let mut conn = Vec::new();
        frame(&mut conn, 0x4, 0, 0, &[]); // SETTINGS
        frame(&mut conn, 0x1, 0x4, 1, &block(authority)); // HEADERS, END_HEADERS
        frame(&mut conn, 0x0, 0x1, 1, &[0, 0, 0, 0, 2, 8, 1]); // DATA, END_STREAM
        // Stream 3 refers to the dynamic table: :path, :authority, content-type (62..64).
        frame(&mut conn, 0x1, 0x4, 3, &[0x83, 0x86, 0xc0, 0xbf, 0xbe]);
        // Stream 5: padded, with priority, split over a CONTINUATION.
        let b = block(authority);
        let (head, tail) = b.split_at(b.len() / 2);
        let mut first = vec![2, 0, 0, 0, 0, 16];
        first.extend(head);
        first.extend([0, 0]);
        frame(&mut conn, 0x1, 0x8 | 0x20 | 0x1, 5, &first);
        frame(&mut conn, 0x9, 0x4, 5, tail);
        for chunk in [0u8, 1, 7] {
            let mut input = vec![chunk];
            input.extend(&conn);
            write("app_authority", &format!("{name}-chunk{chunk}"), input);
        }
    }
}

fn app_requests() {
    let call = v1::CallRequest {
        actor: actor("Counter", "k1"),
        method: "add".into(),
        payload: vec![1, 2, 3].into(),
        timeout_ms: 5000,
        trace: Some(trace()),
        locality: 2,
    };
    write("app_requests", "call", tagged(0, &call));
    let register = v1::Register {
        app_name: "counter".into(),
        actors: vec![v1::ActorTypeSpec {
            name: "Counter".into(),
            reentrant: false,
            idle_timeout_ms: 60_000,
            methods: vec!["add".into(), "get".into()],
        }],
        workers: vec![v1::WorkerTypeSpec {
            name: "Echo".into(),
            max_concurrency: 4,
            methods: vec!["echo".into()],
        }],
    };
    write("app_requests", "register", tagged(1, &register));
    let timer = v1::SetTimerRequest {
        actor: actor("Counter", "k1"),
        activation_id: "act-1".into(),
        name: "tick".into(),
        due_ms: 1000,
        period_ms: 500,
        payload: vec![9].into(),
    };
    write("app_requests", "timer", tagged(2, &timer));
    let serve = v1::AppMessage {
        msg: Some(v1::app_message::Msg::Register(register)),
    };
    write("app_requests", "serve-register", tagged(3, &serve));
    write("app_requests", "trace", tagged(4, &trace()));
    let mut t = vec![5];
    t.extend(2500u64.to_le_bytes());
    t.extend(b"250m");
    write("app_requests", "grpc-timeout", t);
}

fn reminders() {
    let periodic = v1::SetReminderRequest {
        actor: actor("Counter", "k1"),
        name: "daily".into(),
        period_ms: 86_400_000,
        payload: vec![1].into(),
        due: Some(v1::set_reminder_request::Due::DueUnixMs(NOW_MS + 1000)),
        epoch: 0,
    };
    write("reminders", "set-periodic", tagged(0, &periodic));
    let once = v1::SetReminderRequest {
        actor: actor("Counter", "k1"),
        name: "once".into(),
        period_ms: 0,
        payload: Default::default(),
        due: Some(v1::set_reminder_request::Due::DueInMs(30_000)),
        epoch: 7,
    };
    write("reminders", "set-once", tagged(0, &once));
    let delivery = v1::Reminder {
        name: "daily".into(),
        payload: vec![1, 2].into(),
        due_unix_ms: NOW_MS,
        period_ms: 1000,
        attempt: 2,
    };
    write("reminders", "delivery", tagged(1, &delivery));
}

fn host_descriptor() {
    let json = r#"{"id":"pod-a-1","advertise":"10.0.0.1:9090","types":["Counter","Echo"],"statefulTypes":["Counter"],"meta":{"node":"n1","zone":"z1"},"status":"active","startedAtUnixMs":1700000000000,"activeEpoch":2,"load":{"activations":12,"turnsPerSec":40}}"#;
    write("host_descriptor", "json", format!("\x00{json}"));
    write(
        "host_descriptor",
        "json-minimal",
        "\x00{\"id\":\"h\",\"advertise\":\"a:1\",\"status\":\"joining\",\"startedAtUnixMs\":0}",
    );
    let lease = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "pod-a-1",
            "resourceVersion": "42",
            "annotations": {
                "actors.sigx.dev/descriptor": json,
                "actors.sigx.dev/lease-ttl-ms": "15000"
            }
        },
        "spec": {"holderIdentity": "pod-a-1/abc", "leaseDurationSeconds": 15,
                 "renewTime": "2026-01-01T00:00:00.000000Z"}
    });
    write("host_descriptor", "lease", format!("\x01{lease}"));
    let proto = v1::HostDescriptor {
        id: "pod-a-1".into(),
        advertise: "10.0.0.1:9090".into(),
        types: Some(v1::TypeList {
            names: vec!["Echo".into(), "Counter".into()],
        }),
        meta: [("node".to_string(), "n1".to_string())]
            .into_iter()
            .collect(),
        status: 2,
        started_at_unix_ms: NOW_MS,
        stateful_types: Some(v1::TypeList {
            names: vec!["Counter".into()],
        }),
    };
    write("host_descriptor", "proto", tagged(2, &proto));
}

fn mesh_messages() {
    let deliver = v1::DeliverRequest {
        actor: actor("Counter", "k1"),
        method: "add".into(),
        payload: vec![1].into(),
        timeout_ms: 5000,
        trace: Some(trace()),
        ..Default::default()
    };
    write("mesh_messages", "deliver", tagged(0, &deliver));
    let frame = v1::DeliverFrame {
        call_id: 7,
        request: Some(deliver),
    };
    write("mesh_messages", "deliver-frame", tagged(1, &frame));
    let detail = v1::ErrorDetail {
        kind: 3,
        message: "the partition is recovering".into(),
        owner_hint: "host-b".into(),
        retry_after_ms: 50,
        cause: Some(Box::new(v1::ErrorDetail {
            kind: 2,
            message: "cause".into(),
            ..Default::default()
        })),
    };
    let answer = v1::DeliverAnswer {
        call_id: 7,
        response: Some(v1::DeliverResponse {
            outcome: Some(v1::deliver_response::Outcome::Error(detail.clone())),
        }),
    };
    write("mesh_messages", "deliver-answer", tagged(2, &answer));
    let lookup = v1::LookupRequest {
        actor: actor("Counter", "k1"),
    };
    write("mesh_messages", "lookup", tagged(3, &lookup));
    let entry = v1::DirectoryEntry {
        actor: actor("Counter", "k1"),
        host_id: "host-a".into(),
        activation_id: "act-1".into(),
    };
    let register = v1::RegisterRequest {
        entry: Some(entry.clone()),
    };
    write("mesh_messages", "register", tagged(4, &register));
    let unregister = v1::UnregisterRequest { entry: Some(entry) };
    write("mesh_messages", "unregister", tagged(5, &unregister));
    let collect = v1::CollectRequest {
        partitions: vec![0, 5, 4095],
        fingerprint: 99,
        ..Default::default()
    };
    write("mesh_messages", "collect", tagged(6, &collect));
    let list = v1::ListEntriesRequest {
        actor_type: "Counter".into(),
        partitions: vec![1, 2],
        limit: 100,
        ..Default::default()
    };
    write("mesh_messages", "list-entries", tagged(7, &list));
    write("mesh_messages", "error-detail", tagged(7, &detail));
}

fn operator_render() {
    let meta = |name: &str, uid: &str, generation: i64| serde_json::json!({"name": name, "namespace": "apps", "uid": uid, "generation": generation});
    let cluster = serde_json::json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorCluster",
        "metadata": meta("demo", "c-uid-1", 1),
        "spec": {"sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0"}}
    });
    let role = serde_json::json!({
        "apiVersion": "actors.sigx.dev/v1alpha1", "kind": "ActorRole",
        "metadata": meta("engine", "r-uid-engine", 3),
        "spec": {
            "clusterRef": {"name": "demo"}, "replicas": 3,
            "actors": ["Counter"], "workers": ["Echo"],
            "template": {
                "metadata": {"labels": {"app": "counter"}},
                "spec": {"containers": [{"name": "app", "image": "ghcr.io/sigx/counter-app:0.1.0",
                          "ports": [{"containerPort": 8080}]}]}
            }
        }
    });
    write(
        "operator_render",
        "cluster-role",
        serde_json::json!({"cluster": cluster, "role": role}).to_string(),
    );
    let mut rich = cluster.clone();
    rich["spec"] = serde_json::json!({
        "sidecar": {"image": "ghcr.io/sigx/sidecar:0.1.0", "resources": {"requests": {"cpu": "100m"}}},
        "auth": {"secretRef": {"name": "mesh", "key": "secret"}},
        "membership": {"heartbeatSeconds": 2, "ttlSeconds": 6},
        "calls": {"drainSeconds": 20},
        "healthPort": 9191
    });
    write(
        "operator_render",
        "cluster-secret-ref",
        serde_json::json!({"cluster": rich, "role": role}).to_string(),
    );
    write(
        "operator_render",
        "cluster-only",
        serde_json::json!({"cluster": cluster}).to_string(),
    );
}

#[test]
#[ignore = "writes fuzz/corpus; run by hand after changing a target's input format"]
fn write_seed_corpus() {
    mesh_auth();
    app_authority();
    app_requests();
    reminders();
    host_descriptor();
    mesh_messages();
    operator_render();
}
