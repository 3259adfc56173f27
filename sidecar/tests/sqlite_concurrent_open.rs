//! Regression: the hosts of `sigx dev up` start together and open the same fresh SQLite files.
//! Turning a new file to WAL needs an exclusive lock, and SQLite answers a lock upgrade that could
//! deadlock with `SQLITE_BUSY` at once, without calling the busy handler; a sidecar then exited
//! 64 with "database is locked" (seen in CI: the cross-language test's three-host `dev up`).
//! Every opener of a fresh file must succeed.

use sigx_sidecar::membership::{SqliteOptions, SqliteProvider};
use sigx_sidecar::state::sqlite::SqliteStateStore;
use std::sync::{Arc, Barrier};

const OPENERS: usize = 8;
const ROUNDS: usize = 30;

/// Runs `open` from `OPENERS` threads released together, against a fresh file each round.
fn race(open: impl Fn(&std::path::Path, usize) -> Result<(), String> + Send + Sync + 'static) {
    let open = Arc::new(open);
    let dir = tempfile::tempdir().unwrap();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("r{round}.db"));
        let barrier = Arc::new(Barrier::new(OPENERS));
        let threads: Vec<_> = (0..OPENERS)
            .map(|i| {
                let (open, barrier, path) = (open.clone(), barrier.clone(), path.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    open(&path, i)
                })
            })
            .collect();
        for (i, t) in threads.into_iter().enumerate() {
            if let Err(e) = t.join().unwrap() {
                panic!("round {round}: opener {i} of a fresh file failed: {e}");
            }
        }
    }
}

#[test]
fn hosts_opening_a_fresh_membership_file_together_all_succeed() {
    race(|path, i| {
        SqliteProvider::open(&SqliteOptions::new(path), format!("h{i}"))
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

#[test]
fn hosts_opening_a_fresh_state_file_together_all_succeed() {
    race(|path, _| {
        SqliteStateStore::open(path)
            .map(drop)
            .map_err(|e| e.to_string())
    });
}
