//! Group commit for the SQLite state database: writes that arrive while another is committing
//! share the next transaction.
//!
//! SQLite has one writer at a time per file, and with `synchronous = FULL` every transaction
//! costs an fsync. One transaction per write made the hosts of a machine queue on the lock (a
//! 3-host dev cluster committed ~300 writes/s, and setting reminders in bulk crawled at ~150/s).
//! Here each write is a job queued on its store; whichever task next holds the connection runs
//! every queued job in one `BEGIN IMMEDIATE` transaction, each job inside its own savepoint (a job
//! that fails — a stale epoch, a limit — is rolled back alone and answers its own error), then
//! commits once and only then answers the jobs that succeeded: nobody hears `Ok` for a write
//! before it is durable, and a failed commit fails every job of the group.

use super::StateError;
use rusqlite::Connection;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Answers one job once the group's commit outcome is known.
type Finish = Box<dyn FnOnce(Result<(), StateError>) + Send>;
/// Runs one job inside the group's transaction (`None`: the transaction could not start), and
/// says whether it succeeded (its savepoint is kept) and how to answer it.
type Job = Box<dyn FnOnce(Option<&Connection>) -> (bool, Finish) + Send>;

/// The queued writes of one connection.
#[derive(Default, Clone)]
pub(crate) struct WriteQueue {
    jobs: Arc<Mutex<Vec<Job>>>,
}

impl WriteQueue {
    /// Queues `f` and returns a receiver for its answer, given once its group committed.
    pub(crate) fn push<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StateError> + Send + 'static,
    ) -> oneshot::Receiver<Result<T, StateError>> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let ran = conn.map(f);
            let ok = matches!(ran, Some(Ok(_)));
            let finish: Finish = Box::new(move |committed| {
                let answer = match (ran, committed) {
                    // A job that failed wrote nothing (its savepoint was rolled back).
                    (Some(Err(e)), _) => Err(e),
                    (Some(Ok(v)), Ok(())) => Ok(v),
                    (_, Err(e)) => Err(e),
                    (None, Ok(())) => Err(StateError::Unavailable {
                        store: "sqlite",
                        message: "the write was not run".into(),
                    }),
                };
                let _ = tx.send(answer);
            });
            (ok, finish)
        });
        self.jobs.lock().expect("write queue lock").push(job);
        rx
    }

    /// Runs every queued job as one group on `conn` (nothing when another task already ran
    /// them). Called with the connection locked.
    pub(crate) fn run(&self, conn: &Connection) {
        let jobs = std::mem::take(&mut *self.jobs.lock().expect("write queue lock"));
        if jobs.is_empty() {
            return;
        }
        if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
            let err = super::sqlite::sql(e);
            for job in jobs {
                let (_, finish) = job(None);
                finish(Err(err.clone()));
            }
            return;
        }
        let mut finishes = Vec::with_capacity(jobs.len());
        let mut broken: Option<StateError> = None;
        for job in jobs {
            if broken.is_some() {
                finishes.push(job(None).1);
                continue;
            }
            if let Err(e) = conn.execute_batch("SAVEPOINT job") {
                broken = Some(super::sqlite::sql(e));
                finishes.push(job(None).1);
                continue;
            }
            let (ok, finish) = job(Some(conn));
            let end = if ok {
                conn.execute_batch("RELEASE job")
            } else {
                conn.execute_batch("ROLLBACK TO job; RELEASE job")
            };
            if let Err(e) = end {
                broken = Some(super::sqlite::sql(e));
            }
            finishes.push(finish);
        }
        let outcome = match broken {
            Some(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
            None => conn.execute_batch("COMMIT").map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                super::sqlite::sql(e)
            }),
        };
        for finish in finishes {
            finish(outcome.clone());
        }
    }
}
