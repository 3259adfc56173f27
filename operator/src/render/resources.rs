//! The sidecar's resource requests and limits.
//!
//! Why every sidecar gets requests: a container without them is BestEffort-weighted by the
//! kernel's CPU scheduler (the smallest `cpu.weight`), so under contention its Lease renewals
//! slip and a stateful host fences; and a namespace with a ResourceQuota on `requests.cpu` or
//! `requests.memory` refuses every pod with a container lacking them (the ReplicaSet reports
//! `FailedCreate`). The defaults are sized from the measured idle footprint (BENCHMARKS.md,
//! "Sidecar idle footprint", `scripts/measure-sidecar-idle.sh`) with headroom for traffic.
//!
//! Why no CPU limit by default: a CFS quota throttles a container for the rest of a 100 ms
//! period once it used its share, even on an idle node; a throttled sidecar answers its probes
//! and renews its Lease late, and a late renewal fences the host. The request already buys the
//! sidecar its share under contention. Set `limits.cpu` explicitly (per cluster or per role) if
//! the platform requires one; a LimitRange's `default` is applied by the API server only to
//! containers that set no limit, so setting `limits.memory` alone does not stop it from adding a
//! CPU limit — set `limits.cpu` too, or exempt the namespace. No memory limit by default either:
//! an OOM kill of the sidecar is a fenced host, and a value right for one app's actor count is
//! wrong for another's; the platform or the role sets one.
//!
//! Precedence, resource by resource: the role's `spec.sidecar.resources`, then the cluster's
//! `spec.sidecar.resources`, then [`DEFAULT_CPU_REQUEST`] and [`DEFAULT_MEMORY_REQUEST`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Default CPU request of a sidecar. Measured idle: 1.8 millicores (a Lease renewal every 5 s and
/// the watch of the cluster's Leases, release build); the rest is headroom for routing calls,
/// and enough `cpu.weight` that a busy neighbour does not starve the heartbeat.
pub const DEFAULT_CPU_REQUEST: &str = "25m";

/// Default memory request of a sidecar. Measured idle resident set: 17 MiB (release build, app
/// registered); about twice that, for the Lease cache, connection buffers and the directory.
pub const DEFAULT_MEMORY_REQUEST: &str = "32Mi";

/// The sidecar's effective resources: defaults, overlaid by the cluster's, overlaid by the
/// role's, each resource name separately. Limits come only from the cluster and the role.
pub fn sidecar_resources(
    cluster: Option<&ResourceRequirements>,
    role: Option<&ResourceRequirements>,
) -> ResourceRequirements {
    let mut requests = BTreeMap::from([
        ("cpu".to_owned(), Quantity(DEFAULT_CPU_REQUEST.to_owned())),
        (
            "memory".to_owned(),
            Quantity(DEFAULT_MEMORY_REQUEST.to_owned()),
        ),
    ]);
    let mut limits = BTreeMap::new();
    let mut claims = None;
    for layer in [cluster, role].into_iter().flatten() {
        requests.extend(layer.requests.clone().unwrap_or_default());
        limits.extend(layer.limits.clone().unwrap_or_default());
        if layer.claims.is_some() {
            claims = layer.claims.clone();
        }
    }
    // A request above its limit is refused by the API server; a limit set without a request is
    // the request Kubernetes would default to, so keep the two consistent as it would.
    for (name, limit) in &limits {
        let explicit = [role, cluster]
            .into_iter()
            .flatten()
            .any(|l| l.requests.as_ref().is_some_and(|r| r.contains_key(name)));
        if !explicit {
            requests.insert(name.clone(), limit.clone());
        }
    }
    ResourceRequirements {
        claims,
        limits: (!limits.is_empty()).then_some(limits),
        requests: Some(requests),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ResourceRequirements {
        let map = |kv: &[(&str, &str)]| {
            (!kv.is_empty()).then(|| {
                kv.iter()
                    .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                    .collect()
            })
        };
        ResourceRequirements {
            claims: None,
            limits: map(limits),
            requests: map(requests),
        }
    }

    #[test]
    fn defaults_are_requests_only_without_any_limit() {
        let r = sidecar_resources(None, None);
        assert_eq!(r, rr(&[("cpu", "25m"), ("memory", "32Mi")], &[]));
        assert!(r.limits.is_none(), "no CPU (or memory) limit by default");
    }

    #[test]
    fn role_overrides_cluster_overrides_defaults_per_resource() {
        let cluster = rr(&[("cpu", "50m")], &[("memory", "256Mi")]);
        let role = rr(&[("memory", "128Mi")], &[]);
        let r = sidecar_resources(Some(&cluster), Some(&role));
        assert_eq!(
            r,
            rr(
                &[("cpu", "50m"), ("memory", "128Mi")],
                &[("memory", "256Mi")]
            )
        );
        let only_cluster = sidecar_resources(Some(&cluster), None);
        assert_eq!(
            only_cluster.requests,
            rr(&[("cpu", "50m"), ("memory", "256Mi")], &[]).requests,
            "a limit without a request is also the request, as Kubernetes defaults it"
        );
    }

    #[test]
    fn a_limit_below_the_default_request_lowers_the_request() {
        let role = rr(&[], &[("cpu", "10m")]);
        let r = sidecar_resources(None, Some(&role));
        assert_eq!(r.requests.unwrap()["cpu"], Quantity("10m".into()));
    }
}
