//! `mesh_auth`: the mesh's peer authentication (`sidecar/src/mesh/auth.rs`).
//!
//! Byte 0 picks the mode. Even: the rest is a request as a peer sends it (first line the path,
//! then `name:value` header lines, then optionally a `cert:` line of URI SANs), checked by the
//! [`Verifier`]; whatever it accepts must carry the exact MAC the secret signs for that peer,
//! timestamp and path, inside the window, from a known peer (and, with bit 1 set, on a
//! connection whose certificate binds the peer); with bit 2 set the verifier also accepts
//! unsigned requests (`--accept-unsigned`), and then only a request with no MAC header at all
//! may skip the MAC rules. Odd: `peer\nts\npath\n` then a mutation (two
//! bytes of position, one of XOR): a host id the sidecar's configuration accepts must read
//! back from the signed headers,
//! what [`MeshAuth::sign_headers`] signs (for a peer id that reads back, in the window) must
//! verify, and the same request with one byte of its peer, timestamp, MAC or path changed must
//! be refused.

use crate::support::{FixedClock, NOW_MS, split};
use http::{HeaderMap, HeaderName, HeaderValue};
use sigx_sidecar::mesh::auth::{
    DEFAULT_WINDOW, KnownPeers, MAC_HEADER, MeshAuth, MeshSecret, PEER_HEADER, TS_HEADER, Verifier,
};
use sigx_sidecar::mesh::tls::binds_host;
use std::sync::Arc;

/// The cluster secret of the fuzzed verifier.
pub const SECRET: &str = "fuzz-cluster-secret";
/// The cluster whose certificate identities bind host ids.
pub const CLUSTER: &str = "fuzz";
/// The one host id the verifier's view does not know.
pub const STRANGER: &str = "stranger";

struct AllButStranger;

impl KnownPeers for AllButStranger {
    fn is_known(&self, peer: &str) -> bool {
        peer != STRANGER
    }
}

fn verifier(cert: bool, unsigned: bool) -> Verifier {
    let secret = MeshSecret::new(SECRET).expect("a non-blank secret");
    let secret = if unsigned {
        secret.accepting_unsigned()
    } else {
        secret
    };
    let v = Verifier::new(
        MeshAuth::Secret(secret),
        Arc::new(FixedClock),
        DEFAULT_WINDOW,
        Arc::new(AllButStranger),
    );
    if cert {
        v.with_cert_identity(CLUSTER)
    } else {
        v
    }
}

fn in_window(ts: i64) -> bool {
    (i128::from(NOW_MS) - i128::from(ts)).unsigned_abs() <= DEFAULT_WINDOW.as_millis()
}

/// The fuzz target.
pub fn mesh_auth(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        as_sent(mode & 2 != 0, mode & 4 != 0, rest);
    } else {
        sign_then_mutate(rest);
    }
}

fn as_sent(cert: bool, unsigned: bool, data: &[u8]) {
    let mut lines = data.split(|&b| b == b'\n');
    let path = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let mut headers = HeaderMap::new();
    let mut uris: Option<Vec<String>> = None;
    for line in lines {
        if let Some(list) = line.strip_prefix(b"cert:") {
            let list = String::from_utf8_lossy(list);
            uris = Some(list.split(' ').map(str::to_owned).collect());
            continue;
        }
        let (name, value) = split(line, b':');
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value)) {
            headers.append(n, v);
        }
    }
    let Ok(peer) = verifier(cert, unsigned).verify_conn(&headers, &path, uris.as_deref()) else {
        return;
    };
    match headers.get(MAC_HEADER) {
        None => assert!(unsigned, "accepted a request without a MAC"),
        Some(mac) => {
            let ts: i64 = headers[TS_HEADER].to_str().unwrap().parse().unwrap();
            let secret = MeshSecret::new(SECRET).unwrap();
            assert_eq!(
                mac.as_bytes(),
                secret.sign(&peer, ts, &path).as_bytes(),
                "accepted a MAC the secret did not sign"
            );
            assert!(in_window(ts), "accepted a timestamp outside the window");
        }
    }
    assert_eq!(headers[PEER_HEADER].to_str().unwrap(), peer);
    assert_ne!(peer, STRANGER, "accepted a peer the view does not know");
    if cert {
        assert!(
            binds_host(uris.as_deref().unwrap_or(&[]), CLUSTER, &peer),
            "accepted a peer its certificate does not name"
        );
    }
}

/// Whether the sidecar's configuration takes `id` as its host id (`--host-id`).
fn config_accepts(id: &str) -> bool {
    use clap::Parser;
    use sigx_sidecar::config::Args;
    let arg = format!("--host-id={id}");
    Args::try_parse_from(["sigx-sidecar", "--membership", "none", "--insecure", &arg])
        .is_ok_and(|a| a.validate().is_ok_and(|c| c.host_id == id))
}

fn sign_then_mutate(data: &[u8]) {
    let (peer, rest) = split(data, b'\n');
    let (ts, rest) = split(rest, b'\n');
    let (path, rest) = split(rest, b'\n');
    let peer = String::from_utf8_lossy(peer).into_owned();
    let path = String::from_utf8_lossy(path).into_owned();
    let ts: i64 = std::str::from_utf8(ts)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(NOW_MS);
    let auth = MeshAuth::Secret(MeshSecret::new(SECRET).unwrap());
    let mut signed = HeaderMap::new();
    auth.sign_headers(&peer, ts, &path, &mut signed);
    let v = verifier(false, false);
    let verdict = v.verify(&signed, &path);
    // What a peer reads back as the signer's id (only text; config refuses ids that are not).
    let readable = !peer.is_empty()
        && signed.get(PEER_HEADER).and_then(|v| v.to_str().ok()) == Some(peer.as_str());
    if config_accepts(&peer) {
        assert!(
            readable,
            "the sidecar starts with host id {peer:?}, which does not read back from {PEER_HEADER}"
        );
    }
    if readable && in_window(ts) && peer != STRANGER {
        assert_eq!(
            verdict.as_deref().ok(),
            Some(peer.as_str()),
            "a request this host signed was refused: {verdict:?}"
        );
    } else {
        assert!(verdict.is_err(), "accepted {peer:?} at {ts} on {path:?}");
    }

    // One byte of the peer, the timestamp, the MAC or the path changes.
    let mut fields: Vec<Vec<u8>> = [PEER_HEADER, TS_HEADER, MAC_HEADER]
        .iter()
        .map(|h| {
            signed
                .get(*h)
                .map(|v| v.as_bytes().to_vec())
                .unwrap_or_default()
        })
        .collect();
    fields.push(path.clone().into_bytes());
    let total: usize = fields.iter().map(Vec::len).sum();
    if total == 0 || rest.len() < 3 {
        return;
    }
    let mut at = usize::from(u16::from_le_bytes([rest[0], rest[1]])) % total;
    let xor = rest[2].max(1);
    for f in &mut fields {
        if at < f.len() {
            f[at] ^= xor;
            break;
        }
        at -= f.len();
    }
    let mut mutated = HeaderMap::new();
    for (name, value) in [PEER_HEADER, TS_HEADER, MAC_HEADER].iter().zip(&fields) {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            mutated.insert(*name, v);
        }
    }
    let mutated_path = String::from_utf8_lossy(&fields[3]).into_owned();
    if let Ok(p) = v.verify(&mutated, &mutated_path) {
        let unchanged = p == peer
            && mutated_path == path
            && mutated.get(MAC_HEADER) == signed.get(MAC_HEADER)
            && mutated
                .get(TS_HEADER)
                .and_then(|t| t.to_str().ok()?.parse::<i64>().ok())
                == Some(ts);
        assert!(
            unchanged,
            "accepted a signed request with one byte changed: peer {p:?} path {mutated_path:?}"
        );
    }
}
