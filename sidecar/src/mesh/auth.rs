//! Peer authentication on the mesh (DESIGN.md §7): every host-to-host request carries an
//! HMAC-SHA-256 over `"sigx-mesh-v1\n{peer}\n{ts}\n{path}"` keyed with the cluster secret, in the
//! metadata entries `sigx-peer`, `sigx-ts` (Unix milliseconds) and `sigx-mac` (lowercase hex).
//!
//! The MAC authenticates the *peer*, not the payload: it proves the caller holds the cluster
//! secret and names itself, at a time inside the replay window. It is checked in a tower layer
//! ([`MeshAuthLayer`]) in front of the gRPC service, before a single byte of the body is decoded.
//!
//! The secret itself is kept only as a pre-keyed HMAC state: the raw bytes are not stored, and
//! [`MeshSecret`]'s `Debug` prints nothing of it, so it cannot leak through logs or a `Status`.

pub use super::secret::MeshSecret;
use crate::clock::SharedClock;
use http::{HeaderMap, HeaderValue, Request, Response};
use sigx_proto::ActorError;
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// Metadata key naming the calling host.
pub const PEER_HEADER: &str = "sigx-peer";
/// Metadata key carrying the caller's wall clock, Unix milliseconds.
pub const TS_HEADER: &str = "sigx-ts";
/// Metadata key carrying the lowercase hex MAC.
pub const MAC_HEADER: &str = "sigx-mac";
/// Domain separation prefix of the signed string (wire contract).
pub const MAC_DOMAIN: &str = "sigx-mesh-v1";
/// The default replay window: a timestamp further than this from the verifier's wall clock is
/// refused.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Why a secret or an auth configuration was refused at startup.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The secret is empty or only whitespace. Refused always, `--insecure` or not.
    #[error(
        "the mesh secret is empty or only whitespace; set SIGX_MESH_SECRET to a random value \
         (e.g. `openssl rand -hex 32`) shared by every host of the cluster"
    )]
    Blank,
    /// No secret and no explicit opt-out.
    #[error(
        "no mesh secret: set SIGX_MESH_SECRET (shared by every host of the cluster), or pass \
         --insecure to state in writing that the mesh port is unreachable by untrusted callers"
    )]
    Missing,
    /// Both a secret and `--insecure` were given: two contradicting claims.
    #[error(
        "both a mesh secret and --insecure were given; drop --insecure to authenticate peers, \
         or drop the secret to run an unauthenticated mesh"
    )]
    Contradictory,
}

/// The longest host id, in bytes (a Kubernetes object name's limit).
pub const MAX_HOST_ID_BYTES: usize = 253;

/// Whether `id` can name a host: 1..=[`MAX_HOST_ID_BYTES`] visible ASCII characters other
/// than `/`. Only such an id reads back from the `sigx-peer` header as the text that was signed
/// (HTTP carries other bytes, but not as text), and fits the holder identity
/// `<host-id>/<incarnation>` and the certificate identity `spiffe://<cluster>/host/<id>`.
pub fn valid_host_id(id: &str) -> bool {
    (1..=MAX_HOST_ID_BYTES).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
}

/// How this host authenticates mesh peers.
#[derive(Clone, Debug)]
pub enum MeshAuth {
    /// HMAC with the cluster secret.
    Secret(MeshSecret),
    /// No HMAC: an explicit, written claim that the mesh port is unreachable by untrusted
    /// callers (an mTLS mesh, a private network). Requests still name their peer, unverified.
    Insecure,
}

impl MeshAuth {
    /// Applies the startup rules of DESIGN.md §7: a blank secret is refused always; no secret is
    /// refused unless `insecure` is set; both together are refused as contradictory. An insecure
    /// start is logged as a warning every time.
    pub fn from_config(secret: Option<&str>, insecure: bool) -> Result<Self, SecretError> {
        match (secret, insecure) {
            (Some(s), _) if s.trim().is_empty() => Err(SecretError::Blank),
            (Some(_), true) => Err(SecretError::Contradictory),
            (Some(s), false) => Ok(MeshAuth::Secret(MeshSecret::new(s)?)),
            (None, false) => Err(SecretError::Missing),
            (None, true) => {
                tracing::warn!(
                    "mesh authentication is OFF (--insecure): any process that can reach the mesh \
                     port can run actor calls and rewrite the directory"
                );
                Ok(MeshAuth::Insecure)
            }
        }
    }

    /// The three metadata values for one outbound request.
    ///
    /// The timestamp and the MAC differ on every request, so they are marked sensitive: HPACK
    /// then sends them as never-indexed literals (RFC 7541 §7.1.3) instead of inserting two
    /// single-use entries into both ends' dynamic tables per call, which evicted the entries
    /// that do repeat (path, content type, peer id) and made every header block larger and
    /// slower to code. Never-indexed is also what RFC 7541 asks for authenticators.
    pub fn sign_headers(&self, peer: &str, ts_ms: i64, path: &str, headers: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_str(peer) {
            headers.insert(PEER_HEADER, v);
        }
        let mut ts = HeaderValue::from(ts_ms);
        ts.set_sensitive(true);
        headers.insert(TS_HEADER, ts);
        if let MeshAuth::Secret(secret) = self {
            let mut mac = HeaderValue::from_str(&secret.sign(peer, ts_ms, path))
                .expect("hex is a valid header value");
            mac.set_sensitive(true);
            headers.insert(MAC_HEADER, mac);
        }
    }
}

/// Answers "is this host id in my current membership view?" for the mesh's peer check.
pub trait KnownPeers: Send + Sync + 'static {
    /// True when `peer` is in this host's current view (any status).
    fn is_known(&self, peer: &str) -> bool;
}

/// The identity the auth layer established for a request, in the request's extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedPeer(pub String);

/// Checks the three auth headers of inbound requests.
pub struct Verifier {
    auth: MeshAuth,
    clock: SharedClock,
    window: Duration,
    peers: Arc<dyn KnownPeers>,
    /// With mTLS: the cluster whose certificate identities bind claimed host ids.
    cert_cluster: Option<String>,
    /// Unsigned requests accepted ([`MeshSecret::accepting_unsigned`]).
    unsigned_accepted: std::sync::atomic::AtomicU64,
    /// Hosts already logged as sending unsigned requests.
    unsigned_peers: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("auth", &self.auth)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// A verifier with a replay window of `window` either side of the local wall clock.
    pub fn new(
        auth: MeshAuth,
        clock: SharedClock,
        window: Duration,
        peers: Arc<dyn KnownPeers>,
    ) -> Self {
        Verifier {
            auth,
            clock,
            window,
            peers,
            cert_cluster: None,
            unsigned_accepted: Default::default(),
            unsigned_peers: Default::default(),
        }
    }

    /// Also requires, on every request, that the connection's verified TLS certificate binds
    /// the claimed `sigx-peer` host id of `cluster` (a URI SAN `spiffe://<cluster>/host/<id>`,
    /// see [`crate::mesh::tls::binds_host`]). Without it any certificate the CA signed could
    /// claim any host id and `Register` or `Collect` as that host.
    pub fn with_cert_identity(mut self, cluster: impl Into<String>) -> Self {
        self.cert_cluster = Some(cluster.into());
        self
    }

    /// Verifies a request's headers for `path` as if it came over a connection proving no
    /// certificate identity; see [`Verifier::verify_conn`].
    pub fn verify(&self, headers: &HeaderMap, path: &str) -> Result<String, ActorError> {
        self.verify_conn(headers, path, None)
    }

    /// Verifies a request's headers for `path`, arriving on a connection whose verified
    /// certificate carries the URI SANs `cert_uris` (`None`: no TLS); on success returns the
    /// peer id.
    ///
    /// Order matters: the MAC and the certificate are checked before membership, so an
    /// unauthenticated caller learns nothing about which host ids exist.
    pub fn verify_conn(
        &self,
        headers: &HeaderMap,
        path: &str,
        cert_uris: Option<&[String]>,
    ) -> Result<String, ActorError> {
        let peer = headers
            .get(PEER_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                ActorError::unauthenticated(format!(
                    "mesh request to {path} has no {PEER_HEADER} header; peers must sign every \
                     request with the cluster secret"
                ))
            })?;
        let mut unsigned = false;
        if let MeshAuth::Secret(secret) = &self.auth {
            match headers.get(MAC_HEADER) {
                Some(mac) => self.verify_mac(secret, peer, path, headers, mac.as_bytes())?,
                // Between --insecure and a secret: the peer is not authenticated by the MAC,
                // and says so by sending none (the certificate check below still applies).
                None if secret.accepts_unsigned() => unsigned = true,
                None => {
                    return Err(ActorError::unauthenticated(format!(
                        "mesh request from {peer:?} has no {MAC_HEADER} header; is the peer \
                         running with --insecure while this host has a secret? (switch a running \
                         cluster through --accept-unsigned, README \"Switching between insecure \
                         and a secret\")"
                    )));
                }
            }
        }
        if let Some(cluster) = &self.cert_cluster {
            let uris = cert_uris.unwrap_or(&[]);
            if !crate::mesh::tls::binds_host(uris, cluster, peer) {
                return Err(ActorError::unauthenticated(format!(
                    "mesh request claims host {peer:?} but the connection's certificate does not \
                     name it: expected a URI SAN {} (the certificate names {uris:?}); each host \
                     needs a certificate for its own identity",
                    crate::mesh::tls::host_identity(cluster, peer)
                )));
            }
        }
        if !self.peers.is_known(peer) {
            // Unknown but authenticated: most likely a host that became active a moment ago and
            // that this host's view has not caught up with. The request did not run, so the
            // answer is `unreachable` (retryable) with a short retry-after, not a terminal error.
            return Err(ActorError::unreachable(format!(
                "mesh peer {peer:?} is not in this host's membership view; refused before any \
                 work (retry after the views converge)"
            ))
            .with_retry_after(Duration::from_millis(50)));
        }
        if unsigned {
            self.note_unsigned(peer);
        }
        Ok(peer.to_owned())
    }

    /// Checks the MAC and timestamp of a signed request.
    fn verify_mac(
        &self,
        secret: &MeshSecret,
        peer: &str,
        path: &str,
        headers: &HeaderMap,
        mac: &[u8],
    ) -> Result<(), ActorError> {
        let ts_ms: i64 = headers
            .get(TS_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                ActorError::unauthenticated(format!(
                    "mesh request from {peer:?} has no valid {TS_HEADER} header"
                ))
            })?;
        if !secret.verify(peer, ts_ms, path, mac) {
            return Err(ActorError::unauthenticated(format!(
                "mesh request from {peer:?} carries a wrong MAC; check that every host of \
                 the cluster uses the same secret"
            )));
        }
        // In 128 bits: a signed timestamp near i64::MIN overflowed `now - ts` (found by
        // fuzzing, fuzz/regressions/mesh_auth).
        let now = self.clock.wall_unix_ms();
        let skew = (i128::from(now) - i128::from(ts_ms)).unsigned_abs();
        if skew > self.window.as_millis() {
            return Err(ActorError::unauthenticated(format!(
                "mesh request from {peer:?} is timestamped {skew} ms away from this host's \
                 clock (window ±{} ms): a replay, or clocks out of sync (check NTP)",
                self.window.as_millis()
            )));
        }
        Ok(())
    }

    /// Counts an unsigned request accepted from the known host `peer`, and says so in the log
    /// the first time for each host: while a cluster switches to a secret, these lines name the
    /// hosts still on `--insecure`; once the hosts that accept unsigned requests stop logging
    /// new ones, every host signs and the last roll (without `--accept-unsigned`) is safe.
    fn note_unsigned(&self, peer: &str) {
        self.unsigned_accepted
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut seen = self
            .unsigned_peers
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Known hosts only reach here, so the set is bounded by the fleet; the cap is a belt.
        if seen.len() < 4096 && seen.insert(peer.to_owned()) {
            tracing::warn!(
                peer,
                "accepted an unsigned mesh request (--accept-unsigned): this peer runs without \
                 the secret"
            );
        }
    }

    /// Unsigned requests accepted so far ([`MeshSecret::accepting_unsigned`]).
    pub fn unsigned_accepted(&self) -> u64 {
        self.unsigned_accepted
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A tower layer that authenticates every request before the inner (gRPC) service sees it.
#[derive(Clone, Debug)]
pub struct MeshAuthLayer {
    verifier: Arc<Verifier>,
}

impl MeshAuthLayer {
    /// A layer checking requests with `verifier`.
    pub fn new(verifier: Arc<Verifier>) -> Self {
        MeshAuthLayer { verifier }
    }
}

impl<S> tower::Layer<S> for MeshAuthLayer {
    type Service = MeshAuthService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        MeshAuthService {
            inner,
            verifier: self.verifier.clone(),
        }
    }
}

/// The service of [`MeshAuthLayer`].
#[derive(Clone, Debug)]
pub struct MeshAuthService<S> {
    inner: S,
    verifier: Arc<Verifier>,
}

impl<S, B> tower::Service<Request<B>> for MeshAuthService<S>
where
    S: tower::Service<Request<B>, Response = Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = futures::future::Either<
        S::Future,
        futures::future::Ready<Result<Response<tonic::body::Body>, S::Error>>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let cert_uris = req
            .extensions()
            .get::<crate::mesh::transport::ConnInfo>()
            .and_then(|c| c.cert_uris.clone());
        match self
            .verifier
            .verify_conn(req.headers(), req.uri().path(), cert_uris.as_deref())
        {
            Ok(peer) => {
                req.extensions_mut().insert(VerifiedPeer(peer));
                futures::future::Either::Left(self.inner.call(req))
            }
            Err(err) => {
                tracing::warn!(path = req.uri().path(), error = %err, "mesh request refused");
                futures::future::Either::Right(futures::future::ready(Ok(err
                    .to_status()
                    .into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use std::time::UNIX_EPOCH;

    struct AllKnown;
    impl KnownPeers for AllKnown {
        fn is_known(&self, peer: &str) -> bool {
            peer != "stranger"
        }
    }

    const PATH: &str = "/sigx.actors.v1.Mesh/Deliver";

    fn verifier(secret: &str, clock: &ManualClock) -> Verifier {
        Verifier::new(
            MeshAuth::Secret(MeshSecret::new(secret).unwrap()),
            Arc::new(clock.clone()),
            DEFAULT_WINDOW,
            Arc::new(AllKnown),
        )
    }

    #[test]
    fn sign_matches_the_documented_construction() {
        // RFC 2104 HMAC-SHA-256 over "sigx-mesh-v1\nhost-a\n1700000000000\n/sigx.actors.v1.Mesh/Deliver"
        // with key "s3cret" — a wire-contract test vector, computed independently with
        // `printf '%s' "$msg" | openssl dgst -sha256 -hmac s3cret`.
        let s = MeshSecret::new("s3cret").unwrap();
        let mac = s.sign("host-a", 1_700_000_000_000, PATH);
        assert_eq!(mac.len(), 64);
        assert_eq!(mac, include_str!("testdata/mac_vector.txt").trim());
        assert!(s.verify("host-a", 1_700_000_000_000, PATH, mac.as_bytes()));
        assert!(!s.verify("host-b", 1_700_000_000_000, PATH, mac.as_bytes()));
        assert!(!s.verify("host-a", 1_700_000_000_001, PATH, mac.as_bytes()));
        assert!(!s.verify("host-a", 1_700_000_000_000, "/x", mac.as_bytes()));
        assert!(!s.verify(
            "host-a",
            1_700_000_000_000,
            PATH,
            mac.to_uppercase().as_bytes()
        ));
        assert!(!s.verify("host-a", 1_700_000_000_000, PATH, b"00"));
    }

    /// The rotation's four phases, each host rolled from one to the next: any two hosts of
    /// adjacent phases (the only ones that meet during a rolling update) accept each other's
    /// requests both ways; hosts further apart do not (so each roll must finish before the next
    /// starts), and a third secret is refused everywhere.
    #[test]
    fn a_rotation_in_three_rolls_never_splits_the_mesh() {
        let old = || MeshSecret::new("old-secret").unwrap();
        let new = || MeshSecret::new("new-secret").unwrap();
        let phases = [
            old(),
            old().accepting("new-secret").unwrap(),
            new().accepting("old-secret").unwrap(),
            new(),
        ];
        let accepts = |signer: &MeshSecret, verifier: &MeshSecret| {
            let mac = signer.sign("peer-a", 1_700_000_000_000, "/p");
            verifier.verify("peer-a", 1_700_000_000_000, "/p", mac.as_bytes())
        };
        for (i, a) in phases.iter().enumerate() {
            for (j, b) in phases.iter().enumerate() {
                // Phases 0 and 1 sign with the old secret, which phase 3 no longer takes;
                // phases 2 and 3 sign with the new one, which phase 0 does not take yet.
                let expected = !((i <= 1 && j == 3) || (i >= 2 && j == 0));
                if i.abs_diff(j) <= 1 {
                    assert!(expected, "adjacent phases always meet");
                }
                assert_eq!(
                    accepts(a, b),
                    expected,
                    "phase {i} signing, phase {j} verifying"
                );
            }
        }
        assert!(!phases[0].is_rotating() && phases[1].is_rotating());
        let stranger = MeshSecret::new("third").unwrap();
        assert!(phases.iter().all(|p| !accepts(&stranger, p)));
        assert_eq!(
            old().accepting(" \n").err(),
            Some(SecretError::Blank),
            "a blank accepted secret is refused too"
        );
    }

    /// Switching between `--insecure` and a secret, each host rolled from one phase to the
    /// next: insecure, secret accepting unsigned requests, secret. Adjacent phases accept each
    /// other both ways; insecure and strict hosts do not (so a roll must finish before the next
    /// starts). A wrong MAC stays refused even by a host that accepts unsigned requests.
    #[tokio::test(start_paused = true)]
    async fn a_switch_between_insecure_and_a_secret_in_two_rolls_never_splits_the_mesh() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000));
        let secret = || MeshSecret::new("k").unwrap();
        let phases = [
            MeshAuth::Insecure,
            MeshAuth::Secret(secret().accepting_unsigned()),
            MeshAuth::Secret(secret()),
        ];
        let verifiers: Vec<Verifier> = phases
            .iter()
            .map(|auth| {
                Verifier::new(
                    auth.clone(),
                    Arc::new(clock.clone()),
                    DEFAULT_WINDOW,
                    Arc::new(AllKnown),
                )
            })
            .collect();
        for (i, signer) in phases.iter().enumerate() {
            let mut h = HeaderMap::new();
            signer.sign_headers("host-a", clock.wall_unix_ms(), PATH, &mut h);
            for (j, v) in verifiers.iter().enumerate() {
                // Only a strict host meets an insecure one: it refuses the missing MAC.
                let expected = !(i == 0 && j == 2);
                assert_eq!(
                    v.verify(&h, PATH).is_ok(),
                    expected,
                    "phase {i} signing, phase {j} verifying"
                );
            }
        }
        // Only the host in the middle phase took unsigned requests: one, from the insecure one.
        assert_eq!(verifiers[1].unsigned_accepted(), 1);
        assert_eq!(verifiers[2].unsigned_accepted(), 0);
        // A MAC made with another secret is a misconfigured peer, not an unsigned one.
        let mut other = HeaderMap::new();
        MeshAuth::Secret(MeshSecret::new("other").unwrap()).sign_headers(
            "host-a",
            clock.wall_unix_ms(),
            PATH,
            &mut other,
        );
        let e = verifiers[1].verify(&other, PATH).unwrap_err();
        assert!(e.message.contains("wrong MAC"), "{}", e.message);
        // An unsigned request still names a peer, and an unknown one is not let in.
        let mut h = HeaderMap::new();
        MeshAuth::Insecure.sign_headers("stranger", clock.wall_unix_ms(), PATH, &mut h);
        assert_eq!(
            verifiers[1].verify(&h, PATH).unwrap_err().kind,
            sigx_proto::ErrorKind::Unreachable
        );
        assert_eq!(
            verifiers[1].unsigned_accepted(),
            1,
            "a stranger is not counted"
        );
        // The strict host's refusal names the way through.
        let mut h = HeaderMap::new();
        MeshAuth::Insecure.sign_headers("host-a", clock.wall_unix_ms(), PATH, &mut h);
        let e = verifiers[2].verify(&h, PATH).unwrap_err();
        assert!(e.message.contains("--accept-unsigned"), "{}", e.message);
    }

    #[test]
    fn blank_secrets_are_refused_always() {
        for blank in ["", " ", "\t\n  "] {
            assert_eq!(MeshSecret::new(blank).unwrap_err(), SecretError::Blank);
            assert_eq!(
                MeshAuth::from_config(Some(blank), true).unwrap_err(),
                SecretError::Blank
            );
            assert_eq!(
                MeshAuth::from_config(Some(blank), false).unwrap_err(),
                SecretError::Blank
            );
        }
        assert_eq!(
            MeshAuth::from_config(None, false).unwrap_err(),
            SecretError::Missing
        );
        assert_eq!(
            MeshAuth::from_config(Some("x"), true).unwrap_err(),
            SecretError::Contradictory
        );
        assert!(matches!(
            MeshAuth::from_config(None, true),
            Ok(MeshAuth::Insecure)
        ));
    }

    #[test]
    fn the_secret_never_shows_in_debug() {
        let auth = MeshAuth::from_config(Some("hunter2-very-secret"), false).unwrap();
        let text = format!(
            "{auth:?} {:?}",
            MeshSecret::new("hunter2-very-secret").unwrap()
        );
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn verifier_checks_mac_window_and_membership() {
        let clock = ManualClock::new(UNIX_EPOCH + Duration::from_millis(1_700_000_000_000));
        let v = verifier("k", &clock);
        let auth = MeshAuth::Secret(MeshSecret::new("k").unwrap());
        let now = clock.wall_unix_ms();
        let mut h = HeaderMap::new();
        auth.sign_headers("host-a", now, PATH, &mut h);
        assert_eq!(v.verify(&h, PATH).unwrap(), "host-a");
        // Same headers on another path: wrong MAC.
        let e = v.verify(&h, "/sigx.actors.v1.Mesh/Register").unwrap_err();
        assert_eq!(e.kind, sigx_proto::ErrorKind::Unauthenticated);
        // Missing MAC.
        let mut no_mac = h.clone();
        no_mac.remove(MAC_HEADER);
        assert_eq!(
            v.verify(&no_mac, PATH).unwrap_err().kind,
            sigx_proto::ErrorKind::Unauthenticated
        );
        // A replay 61 s later is refused; 59 s later is accepted.
        clock.advance(Duration::from_secs(59));
        assert!(v.verify(&h, PATH).is_ok());
        clock.advance(Duration::from_secs(2));
        let e = v.verify(&h, PATH).unwrap_err();
        assert_eq!(e.kind, sigx_proto::ErrorKind::Unauthenticated);
        assert!(e.message.contains("window"), "{}", e.message);
        // A correctly signed stranger is refused as unreachable (never ran, retryable).
        let mut s = HeaderMap::new();
        auth.sign_headers("stranger", clock.wall_unix_ms(), PATH, &mut s);
        let e = v.verify(&s, PATH).unwrap_err();
        assert_eq!(e.kind, sigx_proto::ErrorKind::Unreachable);
        // A different secret fails.
        let other = MeshAuth::Secret(MeshSecret::new("other").unwrap());
        let mut o = HeaderMap::new();
        other.sign_headers("host-a", clock.wall_unix_ms(), PATH, &mut o);
        assert_eq!(
            v.verify(&o, PATH).unwrap_err().kind,
            sigx_proto::ErrorKind::Unauthenticated
        );
    }
}
