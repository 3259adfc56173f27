//! Re-reading the secret files while the host runs (`--secret-reload-ms`): an edited Kubernetes
//! Secret reaches the files of a running pod's volume within the kubelet's sync period (about a
//! minute), and without a reload the pod kept its old key until it restarted, so every edit
//! split the mesh until the last pod was replaced.
//!
//! A changed signing key is swapped in at once, and the key it replaces stays accepted for
//! [`KEEP_PREVIOUS`]: hosts see the edit at different moments, and one that has not reloaded
//! yet still signs with the old key. A file that cannot be read or holds a blank key changes
//! nothing and is logged once. With an accepted second secret (`SIGX_SECRET_ACCEPT_FILE`,
//! `spec.auth.acceptSecretRef`) reloaded the same way, a rotation needs no restart at all
//! (README, "Rotating the mesh secret in place").

use super::secret::MeshSecret;
use crate::config::secret_file_key;
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::time::Duration;

/// How long a signing key replaced by a reload is still accepted: longer than the kubelet takes
/// to bring an edited Secret to every pod, short enough that a leaked key stops working soon.
pub const KEEP_PREVIOUS: Duration = Duration::from_secs(300);

/// The files a host's mesh secret was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFiles {
    /// `SIGX_SECRET_FILE`: the key signed with.
    pub sign: PathBuf,
    /// `SIGX_SECRET_ACCEPT_FILE`: a second key accepted during a rotation.
    pub accept: Option<PathBuf>,
}

/// A digest of the keys the files hold, to tell a change without keeping the bytes.
pub fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

struct Read {
    sign: Vec<u8>,
    accept: Option<Vec<u8>>,
}

async fn read(files: &SecretFiles) -> Result<Read, String> {
    let one = |path: PathBuf| async move {
        tokio::fs::read(&path)
            .await
            .map(secret_file_key)
            .map_err(|e| format!("{} cannot be read: {e}", path.display()))
    };
    let sign = one(files.sign.clone()).await?;
    let accept = match &files.accept {
        Some(p) => Some(one(p.clone()).await?),
        None => None,
    };
    Ok(Read { sign, accept })
}

/// Re-reads `files` every `every` and reloads `secret` (and so every clone of it) when a key
/// changed; forgets a replaced signing key `keep_previous` after the reload. `started` are the
/// digests of the keys the host started with ([`digest`] of the signing key, and of the
/// accepted one). Runs until dropped.
pub async fn watch(
    secret: MeshSecret,
    files: SecretFiles,
    started: ([u8; 32], Option<[u8; 32]>),
    every: Duration,
    keep_previous: Duration,
) {
    let (mut sign_applied, mut accept_applied) = started;
    // Ticks of `every` left before the replaced key is forgotten.
    let keep_ticks = (keep_previous.as_millis() / every.as_millis().max(1)).max(1) as u64;
    let mut forget_in: Option<u64> = None;
    let mut last_problem: Option<String> = None;
    loop {
        tokio::time::sleep(every).await;
        if let Some(left) = forget_in.as_mut() {
            *left -= 1;
            if *left == 0 {
                forget_in = None;
                secret.forget_previous();
                tracing::info!(
                    after = ?keep_previous,
                    "the mesh secret replaced by the last reload is no longer accepted"
                );
            }
        }
        let keys = match read(&files).await {
            Ok(keys) => keys,
            Err(problem) => {
                if last_problem.as_ref() != Some(&problem) {
                    tracing::warn!(%problem, "mesh secret not reloaded; keeping the keys in use");
                    last_problem = Some(problem);
                }
                continue;
            }
        };
        let sign = digest(&keys.sign);
        let accept = keys.accept.as_deref().map(digest);
        if (sign, accept) == (sign_applied, accept_applied) {
            last_problem = None;
            continue;
        }
        if let Err(e) = secret.reload(&keys.sign, keys.accept.as_deref()) {
            let problem = format!("the edited secret files were refused: {e}");
            if last_problem.as_ref() != Some(&problem) {
                tracing::warn!(%problem, "mesh secret not reloaded; keeping the keys in use");
                last_problem = Some(problem);
            }
            continue;
        }
        last_problem = None;
        if sign != sign_applied {
            forget_in = Some(keep_ticks);
            tracing::info!(
                file = %files.sign.display(),
                keep_previous = ?keep_previous,
                "mesh secret reloaded: signing with the edited key, and still accepting the \
                 previous one for a while"
            );
        }
        if accept != accept_applied {
            tracing::info!(
                rotating = accept.is_some(),
                "mesh secret reloaded: the accepted second secret changed"
            );
        }
        (sign_applied, accept_applied) = (sign, accept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(signer: &str, host: &MeshSecret) -> bool {
        let mac = MeshSecret::new(signer).unwrap().sign("p", 1, "/x");
        host.verify("p", 1, "/x", mac.as_bytes())
    }

    fn signs_with(host: &MeshSecret, key: &str) -> bool {
        let mac = host.sign("p", 1, "/x");
        MeshSecret::new(key)
            .unwrap()
            .verify("p", 1, "/x", mac.as_bytes())
    }

    #[tokio::test(start_paused = true)]
    async fn an_edited_file_is_reloaded_and_the_old_key_dropped_later() {
        let dir = tempfile::tempdir().unwrap();
        let sign = dir.path().join("secret");
        let accept = dir.path().join("accept");
        std::fs::write(&sign, "old\n").unwrap();
        std::fs::write(&accept, "old").unwrap();
        let host = MeshSecret::new("old").unwrap().accepting("old").unwrap();
        let files = SecretFiles {
            sign: sign.clone(),
            accept: Some(accept.clone()),
        };
        let started = (digest(b"old"), Some(digest(b"old")));
        let every = Duration::from_secs(1);
        let watcher = tokio::spawn(watch(
            host.clone(),
            files,
            started,
            every,
            Duration::from_secs(10),
        ));
        let tick = || tokio::time::sleep(every + Duration::from_millis(10));
        // Step 1 of an in-place rotation: the accepted file gets the new key.
        std::fs::write(&accept, "new\n").unwrap();
        tick().await;
        assert!(accepts("new", &host) && signs_with(&host, "old"));
        // Step 2: the signing file gets it; the old key stays accepted, then goes.
        std::fs::write(&sign, "new").unwrap();
        tick().await;
        assert!(signs_with(&host, "new") && accepts("old", &host));
        // A blank edit is refused and changes nothing.
        std::fs::write(&accept, "  \n").unwrap();
        tick().await;
        assert!(signs_with(&host, "new") && accepts("old", &host));
        std::fs::write(&accept, "new").unwrap();
        // A vanished file too.
        std::fs::remove_file(&sign).unwrap();
        tick().await;
        assert!(signs_with(&host, "new"));
        std::fs::write(&sign, "new").unwrap();
        tokio::time::sleep(Duration::from_secs(12)).await;
        assert!(!accepts("old", &host), "the replaced key is forgotten");
        assert!(accepts("new", &host));
        watcher.abort();
    }
}
