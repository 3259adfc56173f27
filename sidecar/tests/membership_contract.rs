//! The membership provider contract (`support/contract.rs`) on every store, each failure named
//! `<store>::<check>`: `memory` (the in-process hub, the simulator's store model), `sqlite` (a
//! database file, every handle its own connection) and `postgres` (a real server,
//! `support/postgres.rs`, every handle its own sessions). Then the deliberately broken
//! variants: the same checks fail against a store that drops or reorders a change, resurrects a
//! deleted record by renewing it, or reports a withdrawal as an expiry.
//!
//! Not run here: the Kubernetes provider. Its API test double lives in the e2e crate
//! (`e2e/tests/membership_kubernetes.rs`), and two checks would say something else there: its
//! feed positions are its own watch cache's counter while record versions are resourceVersions
//! (increasing, not consecutive), and a watch's DELETED event carries the Lease's last
//! resourceVersion rather than a version of the deletion's own.

#[path = "support/contract.rs"]
mod contract;
#[path = "support/contract_races.rs"]
mod contract_races;
#[path = "support/postgres.rs"]
mod pg;

use async_trait::async_trait;
use contract::Store;
use sigx_sidecar::membership::{
    Change, ChangeBatch, DeleteOutcome, HostDescriptor, LeaseRecord, LostCause, MembershipProvider,
    MemoryHub, MemoryProvider, PostgresOptions, PostgresProvider, ProviderError, SqliteOptions,
    SqliteProvider,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The in-process hub; its log keeps 10 000 changes.
struct Memory(MemoryHub);

#[async_trait]
impl Store for Memory {
    async fn open(&self, id: &str) -> Arc<dyn MembershipProvider> {
        self.0.provider(id)
    }
    fn compaction_horizon(&self) -> usize {
        10_001
    }
    async fn cut_off(&self) {
        self.0.set_outage(true);
    }
    async fn restore(&self) {
        self.0.set_outage(false);
    }
}

async fn memory() -> Arc<dyn Store> {
    Arc::new(Memory(MemoryHub::new()))
}

/// One database file; its log keeps 4096 changes, compacted every 256. Cut off: another
/// connection (another process) holds the write lock.
struct Sqlite {
    opts: SqliteOptions,
    locker: Mutex<Option<rusqlite::Connection>>,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl Store for Sqlite {
    async fn open(&self, id: &str) -> Arc<dyn MembershipProvider> {
        SqliteProvider::open(&self.opts, id).expect("open the membership database")
    }
    fn compaction_horizon(&self) -> usize {
        4096 + 256 + 1
    }
    async fn cut_off(&self) {
        let c = rusqlite::Connection::open(&self.opts.path).unwrap();
        c.busy_timeout(Duration::from_secs(5)).unwrap();
        c.execute_batch("BEGIN EXCLUSIVE").unwrap();
        *self.locker.lock().unwrap() = Some(c);
    }
    async fn restore(&self) {
        let c = self.locker.lock().unwrap().take().expect("cut off");
        c.execute_batch("COMMIT").unwrap();
    }
}

async fn sqlite() -> Arc<dyn Store> {
    let dir = tempfile::tempdir().unwrap();
    let opts = SqliteOptions {
        poll_interval: Duration::from_millis(20),
        // Short enough that the cut-off check's four refused writes take seconds, long enough
        // that writers racing for the lock on a loaded machine do not time out.
        busy_timeout: Duration::from_millis(1000),
        ..SqliteOptions::new(dir.path().join("membership.db"))
    };
    Arc::new(Sqlite {
        opts,
        locker: Mutex::new(None),
        _dir: dir,
    })
}

/// One database of a real server, shared by the tests of this process that run at the same
/// time (each has a database of its own) and stopped when the last one ends. Cut off: an
/// operator's session holds the change counter, so writers wait out their lock timeout.
struct Postgres {
    opts: PostgresOptions,
    locker: tokio::sync::Mutex<Option<tokio_postgres::Client>>,
    _server: Arc<pg::PgServer>,
}

const PG_KEEP: i64 = 512;
const PG_COMPACT_EVERY: i64 = 64;

#[async_trait]
impl Store for Postgres {
    async fn open(&self, id: &str) -> Arc<dyn MembershipProvider> {
        PostgresProvider::open(&self.opts, id)
            .await
            .expect("open the membership database")
    }
    fn compaction_horizon(&self) -> usize {
        (PG_KEEP + PG_COMPACT_EVERY + 1) as usize
    }
    async fn cut_off(&self) {
        let (client, conn) = tokio_postgres::connect(&self.opts.dsn, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("BEGIN; LOCK TABLE sigx_change_counter IN EXCLUSIVE MODE")
            .await
            .unwrap();
        *self.locker.lock().await = Some(client);
    }
    async fn restore(&self) {
        let client = self.locker.lock().await.take().expect("cut off");
        client.batch_execute("COMMIT").await.unwrap();
    }
}

async fn postgres() -> Arc<dyn Store> {
    static SERVER: Mutex<Weak<pg::PgServer>> = Mutex::new(Weak::new());
    static DATABASES: AtomicU64 = AtomicU64::new(0);
    let server = {
        let mut s = SERVER.lock().unwrap();
        s.upgrade().unwrap_or_else(|| {
            let started = Arc::new(pg::PgServer::start());
            *s = Arc::downgrade(&started);
            started
        })
    };
    let name = format!("contract{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    let dsn = server.create_database(&name).await;
    let opts = PostgresOptions {
        // Far slower than any wait below: a prompt notification comes from NOTIFY.
        poll_interval: Duration::from_secs(30),
        log_keep: PG_KEEP,
        compact_every: PG_COMPACT_EVERY,
        ..PostgresOptions::new(dsn)
    };
    Arc::new(Postgres {
        opts,
        locker: tokio::sync::Mutex::new(None),
        _server: server,
    })
}

/// Every check, by name.
mod checks {
    pub use super::contract::*;
    pub use super::contract_races::*;
}

/// One test per check and store, named `<store>::<check>`.
macro_rules! contract {
    ($store:ident: $($check:ident),* $(,)?) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $check() {
                    super::checks::$check(super::$store().await).await;
                }
            )*
        }
    };
}

macro_rules! every_store {
    ($($store:ident),*) => {
        $(
            contract!($store:
                join_and_one_identity_one_process,
                renewals_and_a_stale_renewal_refused,
                deleted_records_stay_deleted,
                compare_and_swap_deletes,
                a_withdrawal_and_an_expiry_are_told_apart,
                a_snapshot_is_the_state_at_its_cursor,
                a_cursor_older_than_the_compacted_log_reads_a_snapshot,
                reads_are_fresh_and_notifications_follow,
                records_read_back_as_the_stores_keep_them,
                racing_joins_of_one_id_let_exactly_one_in,
                a_renewal_racing_its_expiry_is_one_or_the_other,
                racing_expiries_delete_once,
                one_holders_concurrent_renewals_all_land,
                a_store_refusing_writes_is_unavailable_and_changes_nothing,
                two_observers_see_one_gap_free_order,
            );
        )*
    };
}

every_store!(memory, sqlite, postgres);

/// DELIBERATELY BROKEN stores, each a [`MemoryProvider`] with one fault.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The feed leaves out every change whose version is a multiple of 7.
    DropsAChange,
    /// The feed delivers the first two changes of a batch swapped.
    Reorders,
    /// A renewal that finds the record gone joins again, re-creating it (a Kubernetes Lease
    /// PUT without the uid precondition).
    Resurrects,
    /// Every deletion in the feed reads as an expiry, withdrawals included.
    ForgetsWithdrawals,
}

struct Broken {
    hub: MemoryHub,
    fault: Fault,
}

struct BrokenProvider {
    inner: Arc<MemoryProvider>,
    fault: Fault,
}

#[async_trait]
impl Store for Broken {
    async fn open(&self, id: &str) -> Arc<dyn MembershipProvider> {
        Arc::new(BrokenProvider {
            inner: self.hub.provider(id),
            fault: self.fault,
        })
    }
    fn compaction_horizon(&self) -> usize {
        10_001
    }
    async fn cut_off(&self) {
        self.hub.set_outage(true);
    }
    async fn restore(&self) {
        self.hub.set_outage(false);
    }
}

#[async_trait]
impl MembershipProvider for BrokenProvider {
    fn kind(&self) -> &'static str {
        "memory-broken"
    }
    fn holder(&self) -> &str {
        self.inner.holder()
    }
    async fn join(&self, d: &HostDescriptor, ttl: Duration) -> Result<u64, ProviderError> {
        self.inner.join(d, ttl).await
    }
    async fn renew(&self, d: &HostDescriptor) -> Result<u64, ProviderError> {
        match self.inner.renew(d).await {
            Err(ProviderError::Lost {
                cause: LostCause::Gone,
                ..
            }) if self.fault == Fault::Resurrects => self.inner.join(d, contract::TTL).await,
            other => other,
        }
    }
    async fn withdraw(&self) -> Result<(), ProviderError> {
        self.inner.withdraw().await
    }
    async fn changes_since(&self, cursor: Option<u64>) -> Result<ChangeBatch, ProviderError> {
        let batch = self.inner.changes_since(cursor).await?;
        let ChangeBatch::Changes {
            mut changes,
            cursor,
        } = batch
        else {
            return Ok(batch);
        };
        match self.fault {
            Fault::DropsAChange => changes.retain(|c| !contract::version_of(c).is_multiple_of(7)),
            Fault::Reorders if changes.len() >= 2 => changes.swap(0, 1),
            Fault::ForgetsWithdrawals => {
                for c in &mut changes {
                    if let Change::Delete { withdrawn, .. } = c {
                        *withdrawn = false;
                    }
                }
            }
            _ => {}
        }
        Ok(ChangeBatch::Changes { changes, cursor })
    }
    fn notifications(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.notifications()
    }
    async fn read(&self, id: &str) -> Result<Option<LeaseRecord>, ProviderError> {
        self.inner.read(id).await
    }
    async fn delete_if(&self, id: &str, v: u64) -> Result<DeleteOutcome, ProviderError> {
        self.inner.delete_if(id, v).await
    }
}

/// Runs `check` against a broken store; answers its panic message (panics if it passed).
async fn fails<F: Future<Output = ()> + Send + 'static>(
    check: impl FnOnce(Arc<dyn Store>) -> F,
    fault: Fault,
) -> String {
    let store: Arc<dyn Store> = Arc::new(Broken {
        hub: MemoryHub::new(),
        fault,
    });
    let err = tokio::spawn(check(store))
        .await
        .expect_err("the check passed against a broken store");
    let panic = err.into_panic();
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

fn says(msg: &str, any_of: &[&str]) {
    assert!(
        any_of.iter().any(|w| msg.contains(w)),
        "the check failed for another reason: {msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variant_a_dropped_change_fails_the_order_check() {
    let msg = fails(
        contract_races::two_observers_see_one_gap_free_order,
        Fault::DropsAChange,
    )
    .await;
    // Which check sees the drop first depends on how the writes fell into batches: a batch
    // whose only change was dropped comes back empty with a moved cursor.
    says(
        &msg,
        &[
            "has a gap",
            "cursor of batch",
            "not every change once",
            "an empty batch moved the cursor",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variant_a_reordered_batch_fails_the_order_check() {
    let msg = fails(
        contract_races::two_observers_see_one_gap_free_order,
        Fault::Reorders,
    )
    .await;
    says(&msg, &["has a gap", "not every change once"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variant_a_resurrecting_renewal_fails_the_deletion_check() {
    let msg = fails(contract::deleted_records_stay_deleted, Fault::Resurrects).await;
    says(&msg, &["expected loss (Gone), got Ok"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_variant_a_withdrawal_read_as_an_expiry_fails_hole_d() {
    let msg = fails(
        contract::a_withdrawal_and_an_expiry_are_told_apart,
        Fault::ForgetsWithdrawals,
    )
    .await;
    says(&msg, &["expected a's withdrawal then b's expiry"]);
}
