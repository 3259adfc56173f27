//! Durable counts (`COUNTER_STATE_DIR`): one small JSON file per counter, written through on
//! every increment, with the activation id as a fencing token.
//!
//! Without it a count lives only as long as its activation, which is the example's point. With
//! it, a count survives its activation (idle deactivation, a host stopping, an actor moving to
//! another host, an app killed with -9), which is what tests of handoffs and crashes need to
//! tell a lost increment from a moved actor.
//!
//! Fencing: activating claims the file for the new activation id; every write checks, under an
//! exclusive `flock`, that the file still names this activation, and refuses otherwise. A stale
//! activation (say, on a host that lost its lease but has not noticed yet) can then never
//! overwrite a count a newer activation owns: its increment fails as an `app` error naming both
//! activations. Files survive a process crash (the page cache outlives the process), not a
//! machine crash: nothing is fsynced.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The count of one counter, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Record {
    value: i64,
    /// The activation that owns the record.
    activation: String,
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A newer activation claimed the record: this one is stale.
    #[error(
        "activation {mine} no longer owns the count of {key}: activation {owner} claimed it \
         (this activation is stale; the actor lives elsewhere now)"
    )]
    FencedOut {
        key: String,
        mine: String,
        owner: String,
    },
    #[error("the count of {key} cannot be stored in {path}: {source}")]
    Io {
        key: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// A directory of counter records.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
}

/// A file name for any key: the key itself when it is short and plain, otherwise a hash of it.
fn file_stem(key: &str) -> String {
    let plain = !key.is_empty()
        && key.len() <= 100
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if plain {
        format!("k-{key}")
    } else {
        // FNV-1a, 64 bit: stable across runs and processes (unlike std's hasher).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in key.bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("h-{h:016x}")
    }
}

impl Store {
    /// A store in `dir` (created if missing).
    pub fn open(dir: &Path) -> std::io::Result<Store> {
        std::fs::create_dir_all(dir).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("COUNTER_STATE_DIR={}: {e}", dir.display()),
            )
        })?;
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    fn io(&self, key: &str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
        let (key, path) = (key.to_string(), path.to_path_buf());
        move |source| StoreError::Io { key, path, source }
    }

    /// Holds the counter's lock until dropped: one process at a time reads and writes a record.
    fn lock(&self, key: &str) -> Result<File, StoreError> {
        let path = self.dir.join(format!("{}.lock", file_stem(key)));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(self.io(key, &path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| self.io(key, &path)(e.into()))?;
        Ok(file)
    }

    fn read(&self, key: &str) -> Result<Option<Record>, StoreError> {
        let path = self.dir.join(format!("{}.json", file_stem(key)));
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| self.io(key, &path)(std::io::Error::other(e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(key, &path)(e)),
        }
    }

    /// Replaces the record atomically (write a temporary file, then rename over).
    fn write(&self, key: &str, record: &Record) -> Result<(), StoreError> {
        let path = self.dir.join(format!("{}.json", file_stem(key)));
        let tmp = self.dir.join(format!("{}.tmp", file_stem(key)));
        let mut f = File::create(&tmp).map_err(self.io(key, &tmp))?;
        f.write_all(&serde_json::to_vec(record).expect("a record serializes"))
            .map_err(self.io(key, &tmp))?;
        std::fs::rename(&tmp, &path).map_err(self.io(key, &path))
    }

    /// Claims the counter for `activation` and returns its stored value (0 when new).
    pub fn claim(&self, key: &str, activation: &str) -> Result<i64, StoreError> {
        let _lock = self.lock(key)?;
        let value = self.read(key)?.map(|r| r.value).unwrap_or(0);
        self.write(
            key,
            &Record {
                value,
                activation: activation.to_string(),
            },
        )?;
        Ok(value)
    }

    /// Stores `value` if `activation` still owns the counter.
    pub fn save(&self, key: &str, activation: &str, value: i64) -> Result<(), StoreError> {
        let _lock = self.lock(key)?;
        if let Some(current) = self.read(key)?
            && current.activation != activation
        {
            return Err(StoreError::FencedOut {
                key: key.to_string(),
                mine: activation.to_string(),
                owner: current.activation,
            });
        }
        self.write(
            key,
            &Record {
                value,
                activation: activation.to_string(),
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("counter-store-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_count_survives_its_activation_and_a_stale_one_is_fenced_out() {
        let dir = scratch("fence");
        let store = Store::open(&dir).unwrap();
        assert_eq!(store.claim("a", "A1").unwrap(), 0);
        store.save("a", "A1", 5).unwrap();
        // A new activation (elsewhere) picks the count up...
        assert_eq!(store.claim("a", "A2").unwrap(), 5);
        store.save("a", "A2", 6).unwrap();
        // ...and the old one can no longer write.
        let e = store.save("a", "A1", 99).unwrap_err();
        assert!(
            matches!(e, StoreError::FencedOut { ref owner, .. } if owner == "A2"),
            "{e}"
        );
        assert_eq!(
            store.claim("a", "A3").unwrap(),
            6,
            "the stale write did not land"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn any_key_gets_a_safe_file_name() {
        assert_eq!(file_stem("user-42"), "k-user-42");
        let odd = file_stem("../../etc/passwd");
        assert!(odd.starts_with("h-") && !odd.contains('/'), "{odd}");
        assert_eq!(file_stem(&"x".repeat(1024)).len(), 18);
        assert_ne!(file_stem("a/b"), file_stem("a/c"));
        let dir = scratch("keys");
        let store = Store::open(&dir).unwrap();
        store.claim("a/b", "A").unwrap();
        store.save("a/b", "A", 3).unwrap();
        assert_eq!(store.claim("a/b", "B").unwrap(), 3);
        assert_eq!(store.claim("a/c", "C").unwrap(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
