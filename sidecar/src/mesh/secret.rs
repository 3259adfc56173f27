//! The cluster secret as HMAC keys (DESIGN.md §7): the key this host signs with, the keys it
//! also accepts, and whether it accepts unsigned requests. The raw bytes are not stored, only
//! pre-keyed HMAC states, and `Debug` prints nothing of them.
//!
//! The keys sit in one cell shared by every clone of a [`MeshSecret`], so a reload of the secret
//! files ([`super::secret_reload`]) reaches the mesh client (which signs) and the verifier (which
//! checks) at once, without a restart.

use hmac::{KeyInit, Mac};
use std::fmt;
use std::sync::{Arc, RwLock, RwLockReadGuard};

pub(crate) type HmacSha256 = hmac::Hmac<sha2::Sha256>;

use super::auth::{MAC_DOMAIN, SecretError};

/// The cluster secret; during a rotation, also a second secret accepted on inbound requests but
/// never signed with ([`MeshSecret::accepting`]). Clones share their keys: a [`MeshSecret::reload`]
/// of one is seen by all.
#[derive(Clone)]
pub struct MeshSecret {
    keys: Arc<RwLock<Keys>>,
}

#[derive(Clone)]
struct Keys {
    keyed: HmacSha256,
    /// The second secret of a rotation (`SIGX_SECRET_ACCEPT_FILE`). Boxed: it is rare, and the
    /// common case stays one key's size.
    accepted: Option<Box<HmacSha256>>,
    /// The key signed with before the last reload changed it, accepted for a while so that hosts
    /// that have not reloaded yet are not refused ([`MeshSecret::reload`]).
    previous: Option<Box<HmacSha256>>,
    /// Also accepts requests that carry no MAC at all ([`MeshSecret::accepting_unsigned`]).
    accept_unsigned: bool,
}

impl fmt::Debug for MeshSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MeshSecret(<redacted>)")
    }
}

fn refuse_blank(bytes: &[u8]) -> Result<(), SecretError> {
    if bytes.iter().all(|b| b.is_ascii_whitespace()) {
        Err(SecretError::Blank)
    } else {
        Ok(())
    }
}

impl MeshSecret {
    /// Keys an HMAC with `secret`. Empty or whitespace-only secrets are refused.
    pub fn new(secret: impl AsRef<[u8]>) -> Result<Self, SecretError> {
        let bytes = secret.as_ref();
        refuse_blank(bytes)?;
        Ok(MeshSecret {
            keys: Arc::new(RwLock::new(Keys {
                keyed: keyed(bytes),
                accepted: None,
                previous: None,
                accept_unsigned: false,
            })),
        })
    }

    fn keys(&self) -> RwLockReadGuard<'_, Keys> {
        // A poisoned lock still holds whole keys: every writer replaces them in one assignment.
        self.keys.read().unwrap_or_else(|e| e.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut Keys)) {
        let mut keys = self.keys.write().unwrap_or_else(|e| e.into_inner());
        let mut next = keys.clone();
        f(&mut next);
        *keys = next;
    }

    /// Also accepts requests signed with `other`, while still signing with this secret: the
    /// rotation's middle steps (README, "Rotating the mesh secret"). First every host accepts the
    /// new secret while signing with the old, then every host signs with the new while accepting
    /// the old, then the old goes: at no step does a host refuse a peer that has not rolled yet.
    pub fn accepting(self, other: impl AsRef<[u8]>) -> Result<Self, SecretError> {
        let bytes = other.as_ref();
        refuse_blank(bytes)?;
        self.update(|k| k.accepted = Some(Box::new(keyed(bytes))));
        Ok(self)
    }

    /// Also accepts requests that carry no MAC, while still signing every request: the middle
    /// step of switching a running cluster between `--insecure` and a secret (README, "Switching
    /// between insecure and a secret"). Hosts still on `--insecure` send no MAC and ignore the
    /// one they receive, so a host with a secret that accepts unsigned requests meets both kinds
    /// of peer without refusing either. A request that *does* carry a MAC must still verify: a
    /// wrong MAC is a peer with another secret, never a peer without one.
    pub fn accepting_unsigned(self) -> Self {
        self.update(|k| k.accept_unsigned = true);
        self
    }

    /// Whether requests without a MAC are accepted ([`MeshSecret::accepting_unsigned`]).
    pub fn accepts_unsigned(&self) -> bool {
        self.keys().accept_unsigned
    }

    /// Whether a second secret is accepted (a rotation is in progress).
    pub fn is_rotating(&self) -> bool {
        self.keys().accepted.is_some()
    }

    /// Whether the key signed with before the last reload is still accepted.
    pub fn accepts_previous(&self) -> bool {
        self.keys().previous.is_some()
    }

    /// Replaces the keys in place, for every clone: sign with `sign` from now on, accept
    /// `accept` beside it (or no second secret). When `sign` differs from the key signed with
    /// until now, that key is kept as accepted ([`MeshSecret::forget_previous`] drops it): hosts
    /// see an edited Secret at different moments, and a host that has not reloaded yet still
    /// signs with the old key. Blank keys are refused and change nothing.
    pub fn reload(&self, sign: &[u8], accept: Option<&[u8]>) -> Result<(), SecretError> {
        refuse_blank(sign)?;
        if let Some(a) = accept {
            refuse_blank(a)?;
        }
        let next = keyed(sign);
        // The raw bytes are not kept; the MACs of the empty message are equal iff the keys are.
        let tag = |k: &HmacSha256| k.clone().finalize().into_bytes();
        self.update(|k| {
            if tag(&k.keyed) != tag(&next) {
                k.previous = Some(Box::new(std::mem::replace(&mut k.keyed, next)));
            }
            k.accepted = accept.map(|a| Box::new(keyed(a)));
        });
        Ok(())
    }

    /// Stops accepting the key replaced by the last [`MeshSecret::reload`].
    pub fn forget_previous(&self) {
        self.update(|k| k.previous = None);
    }

    /// The MAC of one request, as the 64 lowercase hex characters sent in `sigx-mac`.
    pub fn sign(&self, peer: &str, ts_ms: i64, path: &str) -> String {
        let tag = mac_state(&self.keys().keyed, peer, ts_ms, path)
            .finalize()
            .into_bytes();
        let mut out = String::with_capacity(64);
        for b in tag.iter() {
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
        out
    }

    /// Verifies `mac_hex` in constant time (over the decoded tag), against the signing key,
    /// a rotation's accepted key and a reload's previous key.
    pub fn verify(&self, peer: &str, ts_ms: i64, path: &str, mac_hex: &[u8]) -> bool {
        let mut tag = [0u8; 32];
        if mac_hex.len() != 64 {
            return false;
        }
        for (i, pair) in mac_hex.chunks_exact(2).enumerate() {
            match (unhex(pair[0]), unhex(pair[1])) {
                (Some(h), Some(l)) => tag[i] = (h << 4) | l,
                _ => return false,
            }
        }
        let keys = self.keys();
        let ok = |k: &HmacSha256| mac_state(k, peer, ts_ms, path).verify_slice(&tag).is_ok();
        ok(&keys.keyed)
            || keys.accepted.as_deref().is_some_and(ok)
            || keys.previous.as_deref().is_some_and(ok)
    }
}

fn keyed(bytes: &[u8]) -> HmacSha256 {
    HmacSha256::new_from_slice(bytes).expect("HMAC accepts keys of any length")
}

fn mac_state(keyed: &HmacSha256, peer: &str, ts_ms: i64, path: &str) -> HmacSha256 {
    let mut mac = keyed.clone();
    mac.update(MAC_DOMAIN.as_bytes());
    mac.update(b"\n");
    mac.update(peer.as_bytes());
    mac.update(b"\n");
    let mut buf = [0u8; 20];
    mac.update(decimal(ts_ms, &mut buf));
    mac.update(b"\n");
    mac.update(path.as_bytes());
    mac
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn unhex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Writes `v` in decimal into `buf` without allocating (the MAC sits on every call).
fn decimal(v: i64, buf: &mut [u8; 20]) -> &[u8] {
    let neg = v < 0;
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if neg {
        i -= 1;
        buf[i] = b'-';
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/p";

    fn accepts(signer: &MeshSecret, verifier: &MeshSecret) -> bool {
        let mac = signer.sign("peer-a", 1_700_000_000_000, PATH);
        verifier.verify("peer-a", 1_700_000_000_000, PATH, mac.as_bytes())
    }

    #[test]
    fn a_reload_reaches_every_clone_and_keeps_the_previous_key_until_forgotten() {
        let old = MeshSecret::new("old").unwrap();
        let new = MeshSecret::new("new").unwrap();
        let host = MeshSecret::new("old").unwrap();
        let signer = host.clone();
        host.reload(b"new", None).unwrap();
        assert!(
            accepts(&signer, &new),
            "the clone signs with the reloaded key"
        );
        assert!(!accepts(&signer, &old));
        assert!(
            accepts(&old, &host),
            "a host not reloaded yet is still accepted"
        );
        assert!(host.accepts_previous());
        host.forget_previous();
        assert!(
            !accepts(&old, &host),
            "the replaced key is dropped for good"
        );
        assert!(accepts(&new, &host));
    }

    #[test]
    fn reloading_the_same_key_keeps_no_previous_and_blank_keys_change_nothing() {
        let host = MeshSecret::new("k").unwrap();
        host.reload(b"k", None).unwrap();
        assert!(!host.accepts_previous());
        assert_eq!(host.reload(b" \n", None), Err(SecretError::Blank));
        assert_eq!(host.reload(b"other", Some(b"")), Err(SecretError::Blank));
        assert!(
            accepts(&MeshSecret::new("k").unwrap(), &host),
            "still the old key"
        );
        assert!(!host.accepts_previous());
    }

    #[test]
    fn a_reload_sets_or_clears_the_accepted_key_and_keeps_accepting_unsigned() {
        let host = MeshSecret::new("k").unwrap().accepting_unsigned();
        host.reload(b"k", Some(b"next")).unwrap();
        assert!(host.is_rotating());
        assert!(accepts(&MeshSecret::new("next").unwrap(), &host));
        host.reload(b"k", None).unwrap();
        assert!(!host.is_rotating());
        assert!(!accepts(&MeshSecret::new("next").unwrap(), &host));
        assert!(host.accepts_unsigned());
    }
}
