//! `host_descriptor`: what a host publishes about itself, as peers read it
//! (`sidecar/src/membership/descriptor.rs`, `membership/kubernetes`).
//!
//! Byte 0 mod 3 picks the form of the rest: 0, the descriptor JSON of a SQL row or a Lease
//! annotation ([`HostDescriptor::from_json`]); 1, a whole `coordination.k8s.io/v1` Lease as
//! JSON ([`record_of`]); 2, the protobuf form ([`HostDescriptor::from_proto`]). A descriptor
//! that reads is normalized and round-trips through the form it came in.

use crate::support::decode;
use k8s_openapi::api::coordination::v1::Lease;
use sigx_proto::v1;
use sigx_sidecar::membership::descriptor::HostDescriptor;
use sigx_sidecar::membership::kubernetes::record_of;

/// The fuzz target.
pub fn host_descriptor(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    match form % 3 {
        0 => {
            if let Ok(d) = std::str::from_utf8(rest).map(HostDescriptor::from_json) {
                json_round_trip(d.ok());
            }
        }
        1 => {
            let Ok(lease) = serde_json::from_slice::<Lease>(rest) else {
                return;
            };
            if let Ok(record) = record_of(&lease) {
                assert_eq!(
                    Some(&record.descriptor.id),
                    lease.metadata.name.as_ref(),
                    "a Lease read as another host's record"
                );
                json_round_trip(Some(record.descriptor));
            }
        }
        _ => {
            let Some(p) = decode::<v1::HostDescriptor>(rest) else {
                return;
            };
            let Ok(d) = HostDescriptor::from_proto(&p) else {
                return;
            };
            assert!(!d.id.is_empty());
            assert!(d == d.clone().normalized(), "from_proto did not normalize");
            let again = HostDescriptor::from_proto(&d.to_proto()).expect("its own proto reads");
            assert!(again == d, "proto round trip: {d:?} vs {again:?}");
        }
    }
}

fn json_round_trip(d: Option<HostDescriptor>) {
    let Some(d) = d else {
        return;
    };
    assert!(!d.id.is_empty(), "a descriptor without an id was read");
    assert!(d == d.clone().normalized(), "from_json did not normalize");
    let json = d.to_json();
    let again = HostDescriptor::from_json(&json)
        .unwrap_or_else(|e| panic!("a descriptor's own JSON does not read ({e}): {json}"));
    assert!(again == d, "JSON round trip: {d:?} vs {again:?}");
}
