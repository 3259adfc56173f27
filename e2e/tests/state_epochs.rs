//! Durable state fenced by epochs, end to end through the production path (DESIGN.md §11): a
//! host in process with a real SQLite state store, an app served by the Rust SDK over the real
//! Unix socket, calls through the socket. The test stands in for "another host" by taking the
//! actor's next epoch from the same store, exactly what a newer activation elsewhere does.

use sigx_sdk::{ActorType, App, Client, Context, ErrorKind};
use sigx_sidecar::host::{Host, StopKind};
use sigx_sidecar::runtime::ActorId;
use sigx_sidecar::state::sqlite::SqliteStateStore;
use sigx_sidecar::state::{Selection, StateStore, StateWrite};
use std::sync::Arc;
use std::time::Duration;

/// Counter keeping its count in the state API, plus a method that writes many keys at once.
fn counter() -> App {
    let counter = ActorType::new("Counter", |ctx: Context| async move {
        Ok(ctx.storage().get::<i64>("count").await?.unwrap_or(0))
    })
    .json_method("increment", |ctx, by: Option<i64>| async move {
        let mut n = ctx.state().await;
        let next = *n + by.unwrap_or(1);
        ctx.storage().put("count", &next)?;
        *n = next;
        Ok(next)
    })
    .json_method("stored", |ctx, (): ()| async move {
        // A read through the sidecar, not the instance's memory.
        ctx.storage().get::<i64>("count").await
    })
    .json_method("epoch", |ctx, (): ()| async move { Ok(ctx.epoch()) })
    .json_method("oversize", |ctx, (): ()| async move {
        ctx.storage()
            .put_bytes("big", vec![0u8; sigx_sidecar::state::MAX_VALUE_BYTES + 1]);
        Ok(())
    });
    App::new("state-e2e").actor(counter)
}

struct Fixture {
    _dir: tempfile::TempDir,
    host: Option<Host>,
    store: Arc<SqliteStateStore>,
    client: Client,
    app: sigx_sdk::ServeHandle,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let store = Arc::new(SqliteStateStore::open(&dir.path().join("state.db")).unwrap());
    let host = sigx_e2e::single_host::start(&socket, "h1", store.clone()).await;
    let client = Client::lazy(&socket).with_timeout(Duration::from_secs(5));
    let app = counter().spawn(&client);
    for _ in 0..200 {
        if client
            .call_json::<(), i64>("Counter", "warmup", "stored", &())
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Fixture {
        _dir: dir,
        host: Some(host),
        store,
        client,
        app,
    }
}

async fn stored(store: &SqliteStateStore, actor: &ActorId) -> Option<i64> {
    // Reading needs the current epoch; taking a new one would supersede the actor, so peek at
    // the row through a fresh epoch only where the test means to.
    let epoch = store.next_epoch(actor).await.unwrap();
    let got = store
        .read(actor, epoch, &Selection::Keys(vec!["count".into()]))
        .await
        .unwrap();
    got[0]
        .1
        .as_ref()
        .map(|v| serde_json::from_slice(v).unwrap())
}

/// The zombie case at the store: an activation keeps running after a newer one took the actor
/// (here: the newer epoch and its write, made straight on the shared store). The old one's next
/// write is refused, its caller gets `stale-epoch` (never `ok`), the store keeps only the newer
/// write, and the old activation is dropped: the next call activates afresh from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_activation_cannot_write_and_its_caller_is_told_stale_epoch() {
    let f = fixture().await;
    let x = ActorId::new("Counter", "x");
    let c = &f.client;
    assert_eq!(
        c.call_json::<i64, i64>("Counter", "x", "increment", &5)
            .await
            .unwrap(),
        5
    );
    let old_epoch: u64 = c.call_json("Counter", "x", "epoch", &()).await.unwrap();
    assert_eq!(
        c.call_json::<(), Option<i64>>("Counter", "x", "stored", &())
            .await
            .unwrap(),
        Some(5),
        "the increment is durable before its answer"
    );

    // A newer activation elsewhere: a higher epoch, and its own write.
    let newer = f.store.next_epoch(&x).await.unwrap();
    assert!(newer > old_epoch);
    f.store
        .commit(
            &x,
            newer,
            &[StateWrite::Put {
                key: "count".into(),
                value: bytes::Bytes::from_static(b"100"),
            }],
        )
        .await
        .unwrap();

    let err = c
        .call_json::<i64, i64>("Counter", "x", "increment", &1)
        .await
        .expect_err("a stale activation's write must not succeed");
    assert_eq!(err.kind, ErrorKind::StaleEpoch, "{err}");
    assert!(err.message.contains("stale epoch"), "{err}");

    // The next call is a new activation, with a newer epoch, starting from the newer write.
    assert_eq!(
        c.call_json::<i64, i64>("Counter", "x", "increment", &1)
            .await
            .unwrap(),
        101,
        "the old activation was dropped and the new one loaded the store's value"
    );
    let epoch: u64 = c.call_json("Counter", "x", "epoch", &()).await.unwrap();
    assert!(epoch > newer, "epoch {epoch} after the newer {newer}");
    assert_eq!(stored(&f.store, &x).await, Some(101));
    let counters = f.host.as_ref().unwrap().runtime.counters();
    assert!(
        counters
            .stale_epochs
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    let _ = f.app.shutdown().await;
    f.host.unwrap().stop(StopKind::Graceful).await;
}

/// A read by a superseded activation is refused too, and a batch over the limits is refused by
/// name with nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_read_and_an_oversize_batch_are_refused_and_store_nothing() {
    let f = fixture().await;
    let y = ActorId::new("Counter", "y");
    let c = &f.client;
    c.call_json::<i64, i64>("Counter", "y", "increment", &2)
        .await
        .unwrap();
    f.store.next_epoch(&y).await.unwrap();
    let err = c
        .call_json::<(), Option<i64>>("Counter", "y", "stored", &())
        .await
        .expect_err("a stale read");
    // The SDK passes the read's error up through the handler: the actor's failure (`app`),
    // naming the stale epoch.
    assert!(err.message.contains("stale epoch"), "{err}");

    let err = c
        .call_json::<(), ()>("Counter", "z", "oversize", &())
        .await
        .expect_err("an oversize value");
    assert_eq!(err.kind, ErrorKind::Invalid, "{err}");
    assert!(err.message.contains("over the limit"), "{err}");
    assert!(err.message.contains("\"big\""), "{err}");
    let _ = f.app.shutdown().await;
    f.host.unwrap().stop(StopKind::Graceful).await;
}
