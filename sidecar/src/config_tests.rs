//! Tests of the configuration rules (config.rs): every bad value named, the secret rules, the
//! defaults derived from other settings.

use super::*;

fn args(extra: &[&str]) -> Args {
    let mut v = vec!["sigx-sidecar", "--membership", "none"];
    v.extend_from_slice(extra);
    Args::try_parse_from(v).expect("parse")
}

#[test]
fn ttl_must_exceed_twice_the_beat() {
    let err = args(&["--beat-ms", "5000", "--ttl-ms", "10000"])
        .validate()
        .unwrap_err();
    assert!(matches!(err, ConfigError::TtlTooShort { .. }), "{err}");
    assert!(err.to_string().contains("SIGX_TTL_MS=10000"));
    assert!(
        args(&["--beat-ms", "5000", "--ttl-ms", "10001"])
            .validate()
            .is_ok()
    );
}

#[test]
fn ttl_is_at_most_ten_minutes() {
    let err = args(&["--ttl-ms", "600001"]).validate().unwrap_err();
    assert!(matches!(err, ConfigError::TtlTooLong { .. }), "{err}");
    assert!(err.to_string().contains("SIGX_TTL_MS=600001"), "{err}");
    assert!(args(&["--ttl-ms", "600000"]).validate().is_ok());
}

#[test]
fn bad_values_are_named() {
    let err = args(&["--health-addr", "nope"]).validate().unwrap_err();
    assert!(
        err.to_string().contains("SIGX_HEALTH_ADDR=\"nope\""),
        "{err}"
    );
    let err = args(&["--beat-ms", "0"]).validate().unwrap_err();
    assert!(err.to_string().contains("SIGX_BEAT_MS"), "{err}");
}

#[test]
fn the_coalescing_window_defaults_to_zero_and_is_bounded_by_the_beat() {
    assert_eq!(
        args(&[]).validate().unwrap().membership_coalesce,
        Duration::ZERO
    );
    let cfg = args(&["--membership-coalesce-ms", "50"])
        .validate()
        .unwrap();
    assert_eq!(cfg.membership_coalesce, Duration::from_millis(50));
    let err = args(&[
        "--beat-ms",
        "100",
        "--ttl-ms",
        "300",
        "--membership-coalesce-ms",
        "101",
    ])
    .validate()
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("SIGX_MEMBERSHIP_COALESCE_MS=\"101\"")
            && err.to_string().contains("SIGX_BEAT_MS=100"),
        "{err}"
    );
    let err = Args::try_parse_from([
        "sigx-sidecar",
        "--membership",
        "none",
        "--membership-coalesce-ms",
        "soon",
    ])
    .unwrap_err();
    assert!(err.to_string().contains("soon"), "{err}");
}

#[test]
fn worker_threads_are_bounded_and_named() {
    assert_eq!(args(&[]).validate().unwrap().worker_threads, None);
    assert_eq!(
        args(&["--worker-threads", "1"])
            .validate()
            .unwrap()
            .worker_threads,
        Some(1)
    );
    for bad in ["0", "65"] {
        let err = args(&["--worker-threads", bad]).validate().unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("SIGX_WORKER_THREADS={bad:?}")),
            "{err}"
        );
    }
}

#[test]
fn secret_rules() {
    let base = [
        "sigx-sidecar",
        "--membership",
        "sqlite",
        "--sqlite-path",
        "x.db",
    ];
    let parse = |extra: &[&str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap().validate()
    };
    assert!(matches!(
        parse(&[]).unwrap_err(),
        ConfigError::MissingSecret
    ));
    assert!(parse(&["--insecure"]).is_ok());
    // mTLS alone is not the written opt-out.
    let mtls = tempfile::tempdir().unwrap();
    let dir = mtls.path().to_str().unwrap();
    let err = parse(&["--mtls-dir", dir]).unwrap_err();
    assert!(matches!(err, ConfigError::MtlsWithoutSecret), "{err}");
    assert!(err.to_string().contains("--insecure"), "{err}");
    assert!(parse(&["--mtls-dir", dir, "--insecure"]).is_ok());
    assert!(parse(&["--mtls-dir", dir, "--secret", "s"]).is_ok());
    assert!(matches!(
        parse(&["--secret", "  "]).unwrap_err(),
        ConfigError::EmptySecret
    ));
    assert!(matches!(
        parse(&["--secret", "", "--insecure"]).unwrap_err(),
        ConfigError::EmptySecret
    ));
    let cfg = parse(&["--secret", "hunter2"]).unwrap();
    assert!(!format!("{cfg:?}").contains("hunter2"));
    assert!(cfg.secret_accepted.is_none());

    // A rotation's second, accepted secret: read like the first, only next to one.
    let files = tempfile::tempdir().unwrap();
    let accept = files.path().join("accept");
    std::fs::write(&accept, b"next-secret\n").unwrap();
    let accept = accept.to_str().unwrap();
    let cfg = parse(&["--secret", "hunter2", "--secret-accept-file", accept]).unwrap();
    assert_eq!(cfg.secret_accepted.unwrap().expose(), b"next-secret");
    let err = parse(&["--insecure", "--secret-accept-file", accept]).unwrap_err();
    assert!(matches!(err, ConfigError::AcceptWithoutSecret), "{err}");
    // Between --insecure and a secret: accepting unsigned requests needs a secret to sign with.
    assert!(!parse(&["--secret", "hunter2"]).unwrap().accept_unsigned);
    let cfg = parse(&["--secret", "hunter2", "--accept-unsigned"]).unwrap();
    assert!(cfg.accept_unsigned);
    let err = parse(&["--insecure", "--accept-unsigned"]).unwrap_err();
    assert!(
        matches!(err, ConfigError::AcceptUnsignedWithoutSecret),
        "{err}"
    );
    assert!(err.to_string().contains("SIGX_SECRET_FILE"), "{err}");
    let missing = files.path().join("nope");
    let err = parse(&[
        "--secret",
        "hunter2",
        "--secret-accept-file",
        missing.to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(
        err.to_string().starts_with("SIGX_SECRET_ACCEPT_FILE="),
        "{err}"
    );
    std::fs::write(files.path().join("blank"), b" \n").unwrap();
    let blank = files.path().join("blank");
    let err = parse(&[
        "--secret",
        "hunter2",
        "--secret-accept-file",
        blank.to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(matches!(err, ConfigError::EmptySecret), "{err}");
}

#[test]
fn a_secret_file_is_bytes_minus_one_trailing_line_ending() {
    assert_eq!(secret_file_key(vec![0xff; 32]), vec![0xff; 32]);
    assert_eq!(secret_file_key(b"s3cret\n".to_vec()), b"s3cret");
    assert_eq!(secret_file_key(b"s3cret\r\n".to_vec()), b"s3cret");
    assert_eq!(secret_file_key(b"s3cret\n\n".to_vec()), b"s3cret\n");
    assert_eq!(secret_file_key(b" s3cret ".to_vec()), b" s3cret ");
    let dir = tempfile::tempdir().unwrap();
    let read = |bytes: &[u8]| {
        let path = dir.path().join("secret");
        std::fs::write(&path, bytes).unwrap();
        Args::try_parse_from([
            "sigx-sidecar",
            "--membership",
            "none",
            "--secret-file",
            path.to_str().unwrap(),
        ])
        .unwrap()
        .validate()
    };
    let ff = read(&[0xff; 32]).unwrap().secret.unwrap();
    let fe = read(&[0xfe; 32]).unwrap().secret.unwrap();
    assert_eq!(ff.expose(), &[0xff; 32]);
    assert_ne!(ff, fe);
    for blank in [&b""[..], b"\n", b" \t\r\n"] {
        assert!(
            matches!(read(blank).unwrap_err(), ConfigError::EmptySecret),
            "{blank:?}"
        );
    }
}

#[test]
fn kubernetes_needs_pod_identity() {
    let err = Args::try_parse_from(["sigx-sidecar", "--membership", "kubernetes", "--insecure"])
        .unwrap()
        .validate()
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::MissingPodIdentity("POD_NAME")),
        "{err}"
    );
}

#[test]
fn unreadable_sqlite_directory_is_named() {
    let err = Args::try_parse_from([
        "sigx-sidecar",
        "--insecure",
        "--sqlite-path",
        "/nonexistent-dir/m.db",
    ])
    .unwrap()
    .validate()
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent-dir"), "{err}");
}

#[test]
fn the_state_store_defaults_to_sqlite_beside_the_membership_file_else_memory() {
    use crate::state::StateConfig;
    assert_eq!(args(&[]).validate().unwrap().state, StateConfig::Memory);
    let cfg = Args::try_parse_from([
        "sigx-sidecar",
        "--insecure",
        "--sqlite-path",
        "/tmp/membership.db",
    ])
    .unwrap()
    .validate()
    .unwrap();
    assert_eq!(
        cfg.state,
        StateConfig::Sqlite {
            path: "/tmp/sigx-state.db".into()
        }
    );
    let err = args(&["--state", "postgres"]).validate().unwrap_err();
    assert!(err.to_string().contains("SIGX_STATE_DSN_FILE"), "{err}");
    let cfg = args(&[
        "--state",
        "postgres",
        "--state-dsn",
        "postgres://u:hunter2@db/s",
    ])
    .validate()
    .unwrap();
    assert!(!format!("{cfg:?}").contains("hunter2"));
}

#[test]
fn host_ids_get_an_incarnation_suffix() {
    let a = args(&[]).validate().unwrap().host_id;
    let b = args(&[]).validate().unwrap().host_id;
    assert_ne!(a, b);
    assert!(a.starts_with("sigx-"));
}

/// Found by fuzzing (fuzz/regressions/mesh_auth): a host id that is not visible ASCII was sent
/// in `sigx-peer` but could not be read back, so every peer refused the host's requests as
/// unsigned. It is refused at startup instead, by name.
#[test]
fn a_host_id_peers_could_not_read_is_refused() {
    for bad in ["höst-1", "host 1", "a/b", "tab\there"] {
        let e = args(&["--host-id", bad])
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SIGX_HOST_ID") && e.contains("visible ASCII"),
            "{e}"
        );
    }
    assert_eq!(
        args(&["--host-id", "pod-a-1.web_x:9"])
            .validate()
            .unwrap()
            .host_id,
        "pod-a-1.web_x:9"
    );
}

#[test]
fn the_socket_mode_is_octal_and_keeps_the_owner_able_to_use_it() {
    assert_eq!(args(&[]).validate().unwrap().socket_mode, 0o660);
    assert_eq!(
        args(&["--socket-mode", "666"])
            .validate()
            .unwrap()
            .socket_mode,
        0o666
    );
    assert_eq!(
        args(&["--socket-mode", "0o600"])
            .validate()
            .unwrap()
            .socket_mode,
        0o600
    );
    for bad in ["999", "444", "1777", "rw"] {
        let err = args(&["--socket-mode", bad]).validate().unwrap_err();
        assert!(err.to_string().contains("SIGX_SOCKET_MODE"), "{bad}: {err}");
    }
}

#[test]
fn a_blank_drain_token_leaves_drain_off() {
    assert_eq!(args(&[]).validate().unwrap().drain_token, None);
    assert_eq!(
        args(&["--drain-token", " "])
            .validate()
            .unwrap()
            .drain_token,
        None
    );
    assert_eq!(
        args(&["--drain-token", "t"])
            .validate()
            .unwrap()
            .drain_token
            .as_deref(),
        Some("t")
    );
}

#[test]
fn per_type_placement_policies_parse_and_bad_entries_are_named() {
    let cfg = args(&[
        "--placement",
        "prefer-local",
        "--placement-type",
        "Counter=least-loaded, Relay=random",
    ])
    .validate()
    .unwrap();
    assert_eq!(cfg.placement, PlacementPolicy::PreferLocal);
    assert_eq!(
        cfg.placement_types.into_iter().collect::<Vec<_>>(),
        vec![
            ("Counter".to_string(), PlacementPolicy::LeastLoaded),
            ("Relay".to_string(), PlacementPolicy::Random)
        ]
    );
    for (bad, says) in [
        ("Counter", "write Type=policy"),
        ("Counter=fastest", "\"fastest\" is not a policy"),
        ("9lives=random", "\"9lives\" is not a type name"),
        ("A=random,A=least-loaded", "A is named twice"),
    ] {
        let err = args(&["--placement-type", bad]).validate().unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("SIGX_PLACEMENT_TYPES="), "{text}");
        assert!(text.contains(says), "{bad}: {text}");
    }
}

#[test]
fn postgres_membership_needs_a_dsn_names_the_flag_and_keeps_the_state_there_too() {
    let pg = |extra: &[&str]| {
        let mut v = vec!["sigx-sidecar", "--membership", "postgres", "--insecure"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).expect("parse")
    };
    let err = pg(&[]).validate().unwrap_err();
    assert!(matches!(err, ConfigError::MembershipDsn(_)), "{err}");
    assert!(err.to_string().contains("--membership-dsn"), "{err}");
    let err = pg(&["--membership-dsn", "postgres://u:pw@h:notaport/d"])
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("SIGX_MEMBERSHIP_DSN"), "{err}");

    let cfg = pg(&["--membership-dsn", "postgres://u:pw@db:5432/fleet"])
        .validate()
        .unwrap();
    assert_eq!(
        cfg.membership_dsn.as_deref(),
        Some("postgres://u:pw@db:5432/fleet")
    );
    assert_eq!(cfg.state.kind(), crate::state::StateKind::Postgres);
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("u:pw@"), "never the password: {shown}");
    // The state DSN serves both when only it is given; an explicit state kind is kept.
    let cfg = pg(&["--state-dsn", "host=state"]).validate().unwrap();
    assert_eq!(cfg.membership_dsn.as_deref(), Some("host=state"));
    let cfg = pg(&["--membership-dsn", "host=db", "--state", "memory"])
        .validate()
        .unwrap();
    assert_eq!(cfg.state.kind(), crate::state::StateKind::Memory);
    // A DSN for another provider is a mistake, named.
    let err = args(&["--membership-dsn", "host=db"])
        .validate()
        .unwrap_err();
    assert!(err.to_string().contains("--membership-dsn"), "{err}");
}
