//! Every state store keeps the same promises (DESIGN.md §11), checked by one suite run against
//! each: epochs strictly increase across handles (processes) sharing the store, a batch with a
//! stale epoch writes nothing, a batch applies atomically and in order, reads see what was
//! committed, and what was committed survives reopening the store. PostgreSQL runs for real: a
//! server per test, started by support/postgres.rs.

#[path = "support/postgres.rs"]
mod pg;

use bytes::Bytes;
use clap::Parser;
use sigx_sidecar::runtime::ActorId;
use sigx_sidecar::state::memory::MemoryStateStore;
use sigx_sidecar::state::postgres::{PostgresStateError, PostgresStateStore};
use sigx_sidecar::state::sqlite::{SqliteStateError, SqliteStateStore};
use sigx_sidecar::state::{Selection, StateError, StateOpenError, StateStore, StateWrite};
use std::sync::Arc;

fn put(k: &str, v: &str) -> StateWrite {
    StateWrite::Put {
        key: k.into(),
        value: Bytes::copy_from_slice(v.as_bytes()),
    }
}

fn del(k: &str) -> StateWrite {
    StateWrite::Delete { key: k.into() }
}

async fn get(s: &dyn StateStore, a: &ActorId, epoch: u64, k: &str) -> Option<String> {
    let got = s
        .read(a, epoch, &Selection::Keys(vec![k.into()]))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    got[0]
        .1
        .as_ref()
        .map(|v| String::from_utf8(v.to_vec()).unwrap())
}

/// The promises, for two handles `s1`, `s2` on one store (two processes of one fleet).
async fn suite(s1: Arc<dyn StateStore>, s2: Arc<dyn StateStore>) {
    let x = ActorId::new("Counter", "x");
    let y = ActorId::new("Counter", "y");

    // Epochs: strictly increasing per actor, whichever handle issues them; per actor.
    let e1 = s1.next_epoch(&x).await.unwrap();
    let e2 = s2.next_epoch(&x).await.unwrap();
    let e3 = s1.next_epoch(&x).await.unwrap();
    assert!(
        e1 < e2 && e2 < e3,
        "epochs {e1}, {e2}, {e3} must strictly increase"
    );
    assert_eq!(s2.next_epoch(&y).await.unwrap(), 1, "epochs are per actor");

    // The current epoch writes; a batch applies in order (put then delete of one key).
    s1.commit(
        &x,
        e3,
        &[put("a", "1"), put("b", "2"), del("b"), put("c", "3")],
    )
    .await
    .unwrap();
    assert_eq!(get(&*s2, &x, e3, "a").await.as_deref(), Some("1"));
    assert_eq!(get(&*s2, &x, e3, "b").await, None, "the later delete wins");
    let all = s2.read(&x, e3, &Selection::All).await.unwrap();
    let keys: Vec<&str> = all.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "c"], "All lists entries in key order");

    // A newer activation supersedes: the old epoch's batch writes nothing, not even in part.
    let e4 = s2.next_epoch(&x).await.unwrap();
    let refused = s1
        .commit(&x, e3, &[put("a", "stale"), put("z", "stale")])
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StateError::StaleEpoch { given, current, .. } if given == e3 && current == e4),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("stale epoch"), "{refused}");
    assert_eq!(get(&*s1, &x, e4, "a").await.as_deref(), Some("1"));
    assert_eq!(get(&*s1, &x, e4, "z").await, None);
    // Reads with the old epoch are refused too: a zombie learns it is one.
    assert!(matches!(
        s2.read(&x, e3, &Selection::All).await,
        Err(StateError::StaleEpoch { .. })
    ));
    // An epoch never issued is not current either.
    assert!(matches!(
        s1.commit(&x, e4 + 10, &[put("a", "x")]).await,
        Err(StateError::UnknownEpoch { .. })
    ));
    assert!(matches!(
        s1.commit(&ActorId::new("Counter", "never"), 1, &[put("a", "x")])
            .await,
        Err(StateError::UnknownEpoch { .. })
    ));
    // The new epoch writes, and binary values round-trip.
    let bin = Bytes::from_static(&[0, 159, 146, 150, 255]);
    s2.commit(
        &x,
        e4,
        &[StateWrite::Put {
            key: "bin".into(),
            value: bin.clone(),
        }],
    )
    .await
    .unwrap();
    let got = s1
        .read(
            &x,
            e4,
            &Selection::Keys(vec!["bin".into(), "missing".into()]),
        )
        .await
        .unwrap();
    assert_eq!(got[0], ("bin".to_string(), Some(bin)));
    assert_eq!(got[1], ("missing".to_string(), None));
    // A key named twice is answered twice.
    let twice = s2
        .read(&x, e4, &Selection::Keys(vec!["a".into(), "a".into()]))
        .await
        .unwrap();
    assert_eq!(twice[0], twice[1], "{twice:?}");
    assert!(twice[1].1.is_some(), "{twice:?}");
    // Other actors are untouched.
    assert!(
        s1.read(&y, 1, &Selection::All).await.unwrap().is_empty(),
        "state is per actor"
    );
}

/// Racing handles never issue one epoch twice.
async fn racing_epochs(handles: Vec<Arc<dyn StateStore>>) {
    let a = ActorId::new("Counter", "race");
    let mut tasks = Vec::new();
    for s in handles {
        let a = a.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            for _ in 0..50 {
                got.push(s.next_epoch(&a).await.unwrap());
            }
            got
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await.unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        all.extend(got);
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "an epoch was issued twice");
}

/// A commit under the current epoch racing the next activation of the actor elsewhere (a newer
/// epoch issued, then its state read at once): either the commit lands before the new epoch
/// exists and the new activation reads it, or it is refused as stale and wrote nothing. Never
/// `Ok` with the write missing from the newer activation's read (a zombie's write landing
/// behind its successor's load), never refused with the write present.
async fn commits_racing_newer_epochs(s1: Arc<dyn StateStore>, s2: Arc<dyn StateStore>) {
    let a = ActorId::new("Counter", "fence");
    let mut e = s1.next_epoch(&a).await.unwrap();
    let (mut landed, mut refused) = (0, 0);
    for round in 0..200 {
        let value = format!("v{round}");
        let commit = tokio::spawn({
            let (s1, a, value) = (s1.clone(), a.clone(), value.clone());
            async move { s1.commit(&a, e, &[put("v", &value)]).await }
        });
        let next = tokio::spawn({
            let (s2, a) = (s2.clone(), a.clone());
            async move {
                let newer = s2.next_epoch(&a).await.unwrap();
                (newer, get(&*s2, &a, newer, "v").await)
            }
        });
        let (committed, (newer, seen)) = (commit.await.unwrap(), next.await.unwrap());
        match committed {
            Ok(()) => {
                landed += 1;
                assert_eq!(
                    seen.as_deref(),
                    Some(&*value),
                    "round {round}: Ok but not read"
                );
            }
            Err(StateError::StaleEpoch { .. }) => {
                refused += 1;
                let stored = get(&*s2, &a, newer, "v").await;
                assert_ne!(
                    stored.as_deref(),
                    Some(&*value),
                    "round {round}: refused but stored"
                );
            }
            Err(other) => panic!("round {round}: {other}"),
        }
        e = newer;
    }
    eprintln!("commits racing a newer epoch: {landed} landed, {refused} refused");
    assert_eq!(landed + refused, 200);
}

#[tokio::test]
async fn the_memory_store_keeps_the_promises() {
    let s: Arc<dyn StateStore> = Arc::new(MemoryStateStore::new());
    suite(s.clone(), s.clone()).await;
    commits_racing_newer_epochs(s.clone(), s.clone()).await;
    racing_epochs(vec![s.clone(), s]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_store_keeps_the_promises_across_handles_and_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s1: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
    let s2: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
    suite(s1.clone(), s2.clone()).await;
    commits_racing_newer_epochs(s1.clone(), s2.clone()).await;
    racing_epochs(vec![s1.clone(), s2.clone()]).await;
    drop((s1, s2));
    // Reopened (a restarted process): the state and the epochs are still there.
    let s = SqliteStateStore::open(&path).unwrap();
    let x = ActorId::new("Counter", "x");
    let e = s.next_epoch(&x).await.unwrap();
    assert!(e > 4, "epochs survive reopening: got {e}");
    assert_eq!(get(&s, &x, e, "a").await.as_deref(), Some("1"));
}

/// SQLite group-commits writes that queue up together: one refused batch among them is
/// rolled back alone, and every other one is stored (and answered only once durable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_sqlite_batch_among_concurrent_ones_is_rolled_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let s: Arc<dyn StateStore> = Arc::new(SqliteStateStore::open(&path).unwrap());
    let stale = ActorId::new("Counter", "stale");
    let old = s.next_epoch(&stale).await.unwrap();
    let current = s.next_epoch(&stale).await.unwrap();
    let mut epochs = Vec::new();
    for i in 0..64 {
        let a = ActorId::new("Counter", format!("a{i}"));
        epochs.push((a.clone(), s.next_epoch(&a).await.unwrap()));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (a, e) in epochs.clone() {
        let s = s.clone();
        tasks.spawn(async move { s.commit(&a, e, &[put("v", &a.key)]).await.map(|_| a) });
    }
    {
        let s = s.clone();
        let stale = stale.clone();
        tasks.spawn(async move {
            s.commit(&stale, old, &[put("v", "stale")])
                .await
                .map(|_| stale)
        });
    }
    let (mut stored, mut refused) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => stored += 1,
            Err(StateError::StaleEpoch { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!((stored, refused), (64, 1));
    drop(s);
    let s = SqliteStateStore::open(&path).unwrap();
    for (a, e) in &epochs {
        assert_eq!(get(&s, a, *e, "v").await.as_deref(), Some(&*a.key));
    }
    assert_eq!(
        get(&s, &stale, current, "v").await,
        None,
        "the stale batch wrote nothing"
    );
}

#[test]
fn a_sqlite_state_file_of_a_newer_schema_or_an_unusable_path_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    drop(SqliteStateStore::open(&path).unwrap());
    // Opening again is idempotent.
    drop(SqliteStateStore::open(&path).unwrap());
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE sigx_state_schema SET version = 99", [])
        .unwrap();
    drop(conn);
    let err = SqliteStateStore::open(&path).err().expect("too new");
    assert!(
        matches!(err, SqliteStateError::TooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("schema version 99"), "{err}");
    let err = SqliteStateStore::open(&dir.path().join("no/such/dir/state.db"))
        .err()
        .expect("unopenable");
    assert!(err.to_string().contains("SIGX_STATE_PATH"), "{err}");
}

#[test]
fn batches_over_the_limits_are_refused_with_the_limit_named() {
    use sigx_sidecar::state::{MAX_BATCH_WRITES, MAX_KEY_BYTES, MAX_VALUE_BYTES, check_batch};
    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let e = check_batch(&[put(&long_key, "v")]).unwrap_err();
    assert!(
        e.to_string().contains("over the limit of 1024 bytes"),
        "{e}"
    );
    let big = StateWrite::Put {
        key: "big".into(),
        value: Bytes::from(vec![0u8; MAX_VALUE_BYTES + 1]),
    };
    let e = check_batch(&[big]).unwrap_err();
    assert!(e.to_string().contains("\"big\""), "{e}");
    let many: Vec<StateWrite> = (0..=MAX_BATCH_WRITES)
        .map(|i| del(&format!("k{i}")))
        .collect();
    let e = check_batch(&many).unwrap_err();
    assert!(e.to_string().contains("per turn"), "{e}");
    assert!(
        check_batch(&[put("", "v")]).is_err(),
        "empty keys are refused"
    );
    assert!(check_batch(&[put("ok", "v"), del("ok")]).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_keeps_the_promises_across_handles_and_reopening() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("suite").await;
    // Hosts opening together on an empty database: the migration runs under its advisory lock,
    // so the one that creates the tables does it alone and the others find them.
    let opened = futures::future::join_all((0..6).map(|_| PostgresStateStore::open(&dsn))).await;
    let mut opened = opened.into_iter().map(|s| s.unwrap());
    let s1: Arc<dyn StateStore> = Arc::new(opened.next().unwrap());
    let s2: Arc<dyn StateStore> = Arc::new(opened.next().unwrap());
    suite(s1.clone(), s2.clone()).await;
    commits_racing_newer_epochs(s1.clone(), s2.clone()).await;
    racing_epochs(vec![s1.clone(), s2.clone(), s1.clone(), s2.clone()]).await;
    drop((s1, s2));
    let s = PostgresStateStore::open(&dsn).await.unwrap();
    let x = ActorId::new("Counter", "x");
    let e = s.next_epoch(&x).await.unwrap();
    assert!(e > 4, "epochs survive reopening: got {e}");
    assert_eq!(get(&s, &x, e, "a").await.as_deref(), Some("1"));
}

/// A read cut off by its timeout while the server held its `BEGIN ... READ ONLY` (a stopped
/// server that comes back): the server then runs that BEGIN on the connection. Handed to the
/// next caller, it would run a write inside a read-only transaction ("cannot execute INSERT in
/// a read-only transaction", seen in a dev-up run's server log). A connection whose BEGIN may
/// have reached the server counts as inside the transaction, and is closed instead of reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_cancelled_inside_its_begin_leaves_no_transaction_for_the_next_write() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("cancelled").await;
    let s = PostgresStateStore::open(&dsn).await.unwrap();
    let a = ActorId::new("Counter", "a");
    let e = s.next_epoch(&a).await.unwrap();
    s.commit(&a, e, &[put("n", "1")]).await.unwrap();
    // The store's server processes, stopped (a stalled backend; the server itself stays up).
    let (client, conn) = tokio_postgres::connect(&server.dsn("postgres"), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let backends: Vec<i32> = client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'sigx-sidecar'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(!backends.is_empty(), "the store holds a connection");
    let signal = |sig: &str| {
        for pid in &backends {
            let ok = std::process::Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .unwrap()
                .success();
            assert!(ok, "kill {sig} {pid}");
        }
    };
    signal("-STOP");
    let err = s.read(&a, e, &Selection::All).await.unwrap_err();
    assert!(matches!(err, StateError::Unavailable { .. }), "{err:?}");
    // Resumed, the backend runs the BEGIN it was sent.
    signal("-CONT");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // The write takes whatever connection the pool hands out next.
    s.commit(&a, e, &[put("n", "2")])
        .await
        .unwrap_or_else(|e| panic!("the write after the cancelled read: {e}"));
    assert_eq!(get(&s, &a, e, "n").await.as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_outage_answers_unavailable_and_the_store_recovers_after_it() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("outage").await;
    let s = PostgresStateStore::open(&dsn).await.unwrap();
    let a = ActorId::new("Counter", "a");
    let e = s.next_epoch(&a).await.unwrap();
    s.commit(&a, e, &[put("n", "1")]).await.unwrap();

    // The server drops the store's connections (an idle timeout, a failover, an admin): the
    // next calls reconnect and succeed, nothing surfaces. The server's goodbye reaches an idle
    // connection asynchronously, so the next statement meets either a closed socket or the
    // goodbye itself (SQLSTATE 57P01) in place of its answer; rounds make both likely, for each
    // of a read, an epoch and a commit.
    let mut e = e;
    for round in 0..24 {
        server
            .sql(
                "postgres",
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE application_name = 'sigx-sidecar'",
            )
            .await;
        match round % 3 {
            0 => assert_eq!(
                get(&s, &a, e, "n").await.as_deref(),
                Some("1"),
                "round {round}"
            ),
            1 => {
                e = s
                    .next_epoch(&a)
                    .await
                    .unwrap_or_else(|err| panic!("round {round}: {err}"))
            }
            _ => s
                .commit(&a, e, &[put("n", "1")])
                .await
                .unwrap_or_else(|err| panic!("round {round}: {err}")),
        }
    }
    s.commit(&a, e, &[put("n", "1")]).await.unwrap();

    server.halt();
    let target = format!("127.0.0.1:{}/outage", server.port());
    let outage = [
        s.next_epoch(&a).await.unwrap_err(),
        s.commit(&a, e, &[put("n", "2")]).await.unwrap_err(),
        s.read(&a, e, &Selection::All).await.unwrap_err(),
    ];
    for err in &outage {
        assert!(
            matches!(
                err,
                StateError::Unavailable {
                    store: "postgres",
                    ..
                }
            ),
            "an outage is Unavailable, never a fencing error: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(&target), "names the server: {msg}");
        assert!(msg.contains("retried"), "says what to do: {msg}");
        assert!(
            !msg.contains(server.password()),
            "never the password: {msg}"
        );
    }

    server.resume();
    // The same handle works again: broken connections were dropped, new ones made.
    assert_eq!(get(&s, &a, e, "n").await.as_deref(), Some("1"));
    s.commit(&a, e, &[put("n", "3")]).await.unwrap();
    let e2 = s.next_epoch(&a).await.unwrap();
    assert!(e2 > e);
    assert_eq!(get(&s, &a, e2, "n").await.as_deref(), Some("3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_that_cannot_be_used_is_refused_at_open_by_name() {
    let server = pg::PgServer::start();
    let dsn = server.create_database("app").await;
    let open_err = |dsn: String| async move {
        PostgresStateStore::open(&dsn)
            .await
            .err()
            .expect("open must fail")
    };

    let err = open_err("postgres://sigx:secret@127.0.0.1:notaport/app".into()).await;
    assert!(matches!(err, PostgresStateError::BadDsn { .. }), "{err}");
    assert!(err.to_string().contains("SIGX_STATE_DSN"), "{err}");
    assert!(
        !err.to_string().contains("secret"),
        "never the password: {err}"
    );

    let err = open_err(server.dsn_as(pg::SUPERUSER, "wrong-password", "app")).await;
    assert!(matches!(err, PostgresStateError::Auth { .. }), "{err}");
    assert!(err.to_string().contains("password"), "{err}");
    assert!(!err.to_string().contains("wrong-password"), "{err}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = open_err(format!("postgres://sigx:x@127.0.0.1:{port}/app")).await;
    assert!(
        matches!(err, PostgresStateError::Unreachable { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    let err = open_err(server.dsn("nosuchdb")).await;
    assert!(
        matches!(&err, PostgresStateError::NoDatabase { database, .. } if database == "nosuchdb"),
        "{err}"
    );

    // A role that may connect but not create tables (PostgreSQL 15: not the owner of public).
    server
        .sql(
            "app",
            "CREATE ROLE limited LOGIN PASSWORD 'limitedpw'; GRANT CONNECT ON DATABASE app TO limited;",
        )
        .await;
    let limited = server.dsn_as("limited", "limitedpw", "app");
    let err = open_err(limited.clone()).await;
    assert!(
        matches!(err, PostgresStateError::Permission { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("grant it"), "{err}");
    // The owner prepares the schema; the role still lacks row privileges on the tables.
    drop(PostgresStateStore::open(&dsn).await.unwrap());
    let err = open_err(limited.clone()).await;
    assert!(
        matches!(err, PostgresStateError::Permission { .. }),
        "{err}"
    );
    // Granted them, it opens (no DDL needed on a schema at this version).
    server
        .sql(
            "app",
            "GRANT SELECT, INSERT, UPDATE ON sigx_actor_epochs TO limited;
             GRANT SELECT, INSERT, UPDATE, DELETE ON sigx_actor_state TO limited;
             GRANT SELECT, INSERT, UPDATE, DELETE ON sigx_reminders TO limited;
             GRANT SELECT ON sigx_state_schema TO limited;",
        )
        .await;
    let s = PostgresStateStore::open(&limited).await.unwrap();
    assert_eq!(s.next_epoch(&ActorId::new("T", "k")).await.unwrap(), 1);

    // The factory the sidecar calls opens what the flags name, and names what is wrong.
    let cfg = |dsn: &str| {
        sigx_sidecar::config::Args::try_parse_from([
            "sigx-sidecar",
            "--membership",
            "none",
            "--state",
            "postgres",
            "--state-dsn",
            dsn,
        ])
        .unwrap()
        .validate()
        .unwrap()
    };
    let opened = sigx_sidecar::state::open(&cfg(&dsn)).await.unwrap();
    assert_eq!(opened.kind(), "postgres");
    let err = sigx_sidecar::state::open(&cfg(&server.dsn_as(pg::SUPERUSER, "nope", "app")))
        .await
        .err()
        .expect("wrong password");
    assert!(
        matches!(
            err,
            StateOpenError::Postgres(PostgresStateError::Auth { .. })
        ),
        "{err}"
    );

    // Opening again is idempotent; a schema written by a newer sigx is refused by name.
    drop(PostgresStateStore::open(&dsn).await.unwrap());
    server
        .sql("app", "UPDATE sigx_state_schema SET version = 99")
        .await;
    let err = open_err(dsn).await;
    assert!(
        matches!(err, PostgresStateError::TooNew { found: 99, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("schema version 99"), "{err}");
}

#[tokio::test]
async fn the_factory_opens_the_memory_and_sqlite_stores_the_flags_name() {
    use sigx_sidecar::config::Args;
    let dir = tempfile::tempdir().unwrap();
    let membership = dir.path().join("membership.db");
    let cfg = Args::try_parse_from([
        "sigx-sidecar",
        "--insecure",
        "--sqlite-path",
        membership.to_str().unwrap(),
    ])
    .unwrap()
    .validate()
    .unwrap();
    let s = sigx_sidecar::state::open(&cfg).await.unwrap();
    assert_eq!(s.kind(), "sqlite");
    assert!(
        dir.path().join("sigx-state.db").is_file(),
        "the state file sits next to the membership file"
    );
    let cfg = Args::try_parse_from(["sigx-sidecar", "--membership", "none"])
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(
        sigx_sidecar::state::open(&cfg).await.unwrap().kind(),
        "memory"
    );
}

/// The sidecar binary refuses a state store it cannot use before it binds anything: exit 64 and
/// a message naming the store and what to fix (here: a PostgreSQL port nothing listens on, a file
/// that is not a SQLite database, and a directory that does not exist). The socket is never
/// created.
#[test]
fn the_sidecar_exits_64_naming_a_state_store_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let dsn = format!("postgres://sigx:secret-pw@127.0.0.1:{port}/sigx?connect_timeout=2");
    let missing = dir.path().join("no/such/dir/state.db");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["--state", "postgres", "--state-dsn", &dsn],
            &["state store", "127.0.0.1"],
        ),
        (
            &[
                "--state",
                "sqlite",
                "--state-path",
                garbage.to_str().unwrap(),
            ],
            &["state store", "garbage.db"],
        ),
        (
            &[
                "--state",
                "sqlite",
                "--state-path",
                missing.to_str().unwrap(),
            ],
            &["SIGX_STATE_PATH", "does not exist"],
        ),
    ];
    for (i, (flags, named)) in cases.iter().enumerate() {
        let socket = dir.path().join(format!("s{i}.sock"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sigx-sidecar"))
            .args(["--membership", "none", "--health-addr", "127.0.0.1:0"])
            .arg("--socket")
            .arg(&socket)
            .args(*flags)
            .env("SIGX_LOG", "error")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flags:?}: {stderr}");
        for named in *named {
            assert!(
                stderr.contains(named),
                "{flags:?} names {named:?}: {stderr}"
            );
        }
        assert!(
            !stderr.contains("secret-pw"),
            "the password never shows: {stderr}"
        );
        assert!(!socket.exists(), "nothing was bound");
    }
}
