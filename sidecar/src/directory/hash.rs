//! The directory's hashes. **Wire contract**: every host of a cluster must compute the same
//! partition for an actor, the same owner for a partition and the same fingerprint for a view,
//! whatever its version. Changing any function here is a breaking change of the cluster
//! protocol; the test vectors below pin them.
//!
//! * `H(bytes)` = `fmix64(FNV-1a-64(bytes))`: FNV-1a 64 (offset basis `0xcbf29ce484222325`,
//!   prime `0x100000001b3`) followed by MurmurHash3's 64-bit finalizer, so that the low bits
//!   used by `mod P` depend on every input byte.
//! * `partition(type, key)` = `H(type ‖ 0x00 ‖ key) mod 4096`.
//! * `weight(p, host)` = `H(be32(p) ‖ host_id)`; `owner(p)` = the eligible host with the highest
//!   weight, ties broken by the smaller host id (rendezvous hashing: when a host joins or
//!   leaves, only the partitions it wins or held move).
//! * `fingerprint(ids)` = `H(id₁ ‖ 0x00 ‖ id₂ ‖ 0x00 ‖ …)` over the sorted ids of the active
//!   stateful hosts, each followed by a 0x00.

/// Number of directory partitions (wire contract).
pub const PARTITIONS: u32 = 4096;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 state.
#[derive(Debug, Clone, Copy)]
pub struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(FNV_OFFSET)
    }
}

impl Fnv1a {
    /// Absorbs `bytes`.
    #[inline]
    pub fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h ^= b as u64;
            h = h.wrapping_mul(FNV_PRIME);
        }
        self.0 = h;
    }

    /// The finalized hash `fmix64(state)`.
    #[inline]
    pub fn finish(self) -> u64 {
        fmix64(self.0)
    }
}

/// MurmurHash3's 64-bit finalizer.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// `H(type ‖ 0 ‖ key)`: the actor's 64-bit directory hash.
#[inline]
pub fn actor_hash(actor_type: &str, key: &str) -> u64 {
    let mut h = Fnv1a::default();
    h.write(actor_type.as_bytes());
    h.write(&[0]);
    h.write(key.as_bytes());
    h.finish()
}

/// The partition of an actor.
#[inline]
pub fn partition(actor_type: &str, key: &str) -> u32 {
    (actor_hash(actor_type, key) % PARTITIONS as u64) as u32
}

/// The rendezvous weight of `host` for partition `p`.
#[inline]
pub fn weight(p: u32, host: &str) -> u64 {
    let mut h = Fnv1a::default();
    h.write(&p.to_be_bytes());
    h.write(host.as_bytes());
    h.finish()
}

/// The owner of partition `p` among `eligible` host ids: highest weight, ties to the smaller id.
pub fn owner<'a, I>(p: u32, eligible: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut best: Option<(u64, &'a str)> = None;
    for id in eligible {
        let w = weight(p, id);
        best = match best {
            Some((bw, bid)) if bw > w || (bw == w && bid <= id) => Some((bw, bid)),
            _ => Some((w, id)),
        };
    }
    best.map(|(_, id)| id)
}

/// The fingerprint of a set of active stateful host ids (sorted by the caller).
pub fn fingerprint<'a, I>(sorted_ids: I) -> u64
where
    I: IntoIterator<Item = &'a str>,
{
    let mut h = Fnv1a::default();
    for id in sorted_ids {
        h.write(id.as_bytes());
        h.write(&[0]);
    }
    h.finish()
}

/// The fingerprint of the active stateful hosts with their active epochs (sorted by id by the
/// caller): each `(id, epoch)` hashes as in [`fingerprint`], followed by `0x01` and the epoch
/// as 8 little-endian bytes when the epoch is not 0. A view in which no host ever re-activated
/// has the same fingerprint as under [`fingerprint`], so hosts of an older version agree with
/// it until one of them re-activates. (Host ids never contain `0x00` or `0x01`.)
pub fn fingerprint_with_epochs<'a, I>(sorted: I) -> u64
where
    I: IntoIterator<Item = (&'a str, u64)>,
{
    let mut h = Fnv1a::default();
    for (id, epoch) in sorted {
        h.write(id.as_bytes());
        h.write(&[0]);
        if epoch != 0 {
            h.write(&[1]);
            h.write(&epoch.to_le_bytes());
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pinned values: a change here is a protocol break between hosts of different versions.
    #[test]
    fn test_vectors() {
        assert_eq!(Fnv1a::default().0, FNV_OFFSET);
        // Plain FNV-1a 64 of "a" is the published 0xaf63dc4c8601ec8c.
        let mut f = Fnv1a::default();
        f.write(b"a");
        assert_eq!(f.0, 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fmix64(0), 0);
        // Computed independently (a 10-line Python transcription of the module doc).
        assert_eq!(actor_hash("Counter", "user-42"), 0x8362_3d2e_5a44_5c3c);
        assert_eq!(partition("Counter", "user-42"), 3132);
        assert_eq!(partition("Counter", ""), 2012);
        assert_eq!(partition("Report", "2026-q3"), 1057);
        assert_eq!(weight(7, "host-a"), 0x7965_560b_fb5a_3fb4);
        assert_eq!(fingerprint(["host-a", "host-b"]), 0x5543_6594_60f5_5de0);
        assert_eq!(fingerprint([]), 0xefd0_1f60_ba99_2926);
        assert_eq!(
            fingerprint_with_epochs([("host-a", 0), ("host-b", 0)]),
            fingerprint(["host-a", "host-b"])
        );
    }

    #[test]
    fn a_re_activation_changes_the_fingerprint() {
        let first = fingerprint_with_epochs([("a", 0), ("b", 0)]);
        let again = fingerprint_with_epochs([("a", 1), ("b", 0)]);
        let twice = fingerprint_with_epochs([("a", 2), ("b", 0)]);
        assert_ne!(first, again);
        assert_ne!(again, twice);
        assert_ne!(again, fingerprint_with_epochs([("a", 0), ("b", 1)]));
    }

    #[test]
    fn the_separator_keeps_type_and_key_apart() {
        assert_ne!(actor_hash("ab", "c"), actor_hash("a", "bc"));
    }

    #[test]
    fn partitions_spread_evenly() {
        let mut counts = vec![0u32; PARTITIONS as usize];
        let n = 409_600;
        for i in 0..n {
            counts[partition("Counter", &format!("user-{i}")) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        // Expect 100 per partition; a uniform hash stays well inside ±50%.
        assert!(*min > 50 && *max < 150, "min {min} max {max}");
    }

    #[test]
    fn rendezvous_moves_only_the_partitions_of_the_changed_host() {
        let three = ["a", "b", "c"];
        let four = ["a", "b", "c", "d"];
        let mut moved = 0;
        let mut won_by_d = [0u32; 4];
        for p in 0..PARTITIONS {
            let before = owner(p, three).unwrap();
            let after = owner(p, four).unwrap();
            if before != after {
                assert_eq!(after, "d", "a partition moved between old hosts");
                moved += 1;
            }
            let idx = four.iter().position(|h| *h == after).unwrap();
            won_by_d[idx] += 1;
        }
        // About a quarter moves to the new host.
        assert!((800..1250).contains(&moved), "{moved}");
        for c in won_by_d {
            assert!((800..1250).contains(&c), "{won_by_d:?}");
        }
        // Order of the input does not matter.
        for p in 0..64 {
            assert_eq!(owner(p, ["c", "a", "b"]), owner(p, three));
        }
        assert_eq!(owner(0, []), None);
    }
}
