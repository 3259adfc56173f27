//! Rust types of the two sigx custom resources, `ActorCluster` and `ActorRole`
//! (`actors.sigx.dev/v1alpha1`, namespaced).
//!
//! The types are the single source of the CRD schemas: `crdgen` renders them to
//! `crds/generated/*.yaml`, and a test fails when that checked-in YAML is stale. Validation that a
//! user should see at `kubectl apply` time (type-name pattern, ranges, TTL > 2 × heartbeat,
//! exactly one auth mode) lives in the schema as OpenAPI bounds and CEL
//! `x-kubernetes-validations` rules, so the apiserver refuses a bad object before the operator
//! ever sees it. The CEL rules are unit-tested without a server in `crds/tests/cel.rs`.
#![forbid(unsafe_code)]

#[cfg(feature = "cel")]
pub mod cel;
pub mod cluster;
pub mod common;
pub mod role;
pub mod state;

pub use cluster::{
    ActorCluster, ActorClusterSpec, ActorClusterStatus, AuthSpec, CallSpec, DEFAULT_SIDECAR_IMAGE,
    HostCounts, ImagePullPolicy, MembershipSpec, MtlsSpec, NodeCount, PlacementPolicy, RoleSummary,
    SecretKeyRef, SidecarSpec, TypePlacement,
};
pub use common::{TypeName, TypeNameError, condition_types, labels};
pub use role::{
    ActorRole, ActorRoleSpec, ActorRoleStatus, ClusterRef, RoleSidecarSpec, RolloutSpec,
};
pub use state::{StateKind, StateMode, StateSpec, StateSpecError};

/// API group of both resources.
pub const GROUP: &str = "actors.sigx.dev";
/// Served and stored version of both resources.
pub const VERSION: &str = "v1alpha1";

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// Every CRD this crate defines, as installed: `crdgen` writes these, the chart ships them.
///
/// The schemas of the embedded Kubernetes types (the role's `PodTemplateSpec`, the sidecar's
/// `ResourceRequirements`) keep their structure and validation but lose their descriptions:
/// with them the ActorRole CRD weighs ~600 KB, past the 256 KB a client-side `kubectl apply`
/// can store in its last-applied annotation, and `kubectl explain pod.spec` already documents
/// those fields.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut cluster = ActorCluster::crd();
    strip_descriptions_at(&mut cluster, &["spec", "sidecar", "resources"]);
    let mut role = ActorRole::crd();
    strip_descriptions_at(&mut role, &["spec", "template"]);
    vec![cluster, role]
}

fn strip_descriptions_at(crd: &mut CustomResourceDefinition, path: &[&str]) {
    for version in &mut crd.spec.versions {
        let Some(mut node) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        for key in path {
            match node.properties.as_mut().and_then(|p| p.get_mut(*key)) {
                Some(next) => node = next,
                None => panic!("CRD {:?} has no schema at {path:?}", crd.metadata.name),
            }
        }
        // Keep the description of the field itself (ours); drop those of everything below it.
        let own = node.description.take();
        strip_descriptions(node);
        node.description = own;
    }
}

fn strip_descriptions(s: &mut JSONSchemaProps) {
    s.description = None;
    let maps = [
        &mut s.properties,
        &mut s.pattern_properties,
        &mut s.definitions,
    ];
    for map in maps.into_iter().flatten() {
        map.values_mut().for_each(strip_descriptions);
    }
    let lists = [&mut s.all_of, &mut s.any_of, &mut s.one_of];
    for list in lists.into_iter().flatten() {
        list.iter_mut().for_each(strip_descriptions);
    }
    if let Some(not) = s.not.as_deref_mut() {
        strip_descriptions(not);
    }
    match s.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(one)) => strip_descriptions(one),
        Some(JSONSchemaPropsOrArray::Schemas(many)) => many.iter_mut().for_each(strip_descriptions),
        None => {}
    }
    for extra in [&mut s.additional_properties, &mut s.additional_items] {
        if let Some(JSONSchemaPropsOrBool::Schema(one)) = extra.as_mut() {
            strip_descriptions(one);
        }
    }
}

/// Errors rendering the CRDs to YAML.
#[derive(Debug, thiserror::Error)]
#[error("rendering CRD {name} to YAML failed: {source}")]
pub struct CrdYamlError {
    name: String,
    #[source]
    source: serde_saphyr::SerializeError,
}

/// The checked-in CRD files: `(file name, YAML text)`, one document per file, named
/// `<plural>.<group>.yaml`. The single source of both `crdgen` and the staleness test.
pub fn generated_yaml() -> Result<Vec<(String, String)>, CrdYamlError> {
    crds()
        .into_iter()
        .map(|crd| {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let yaml = serde_saphyr::to_string(&crd).map_err(|source| CrdYamlError {
                name: name.clone(),
                source,
            })?;
            let header = "# Generated by `cargo run -p sigx-crds --bin crdgen` from crds/src. Do not edit.\n";
            Ok((format!("{name}.yaml"), format!("{header}{yaml}")))
        })
        .collect()
}
