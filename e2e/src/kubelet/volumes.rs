//! A pod's volumes materialised as directories of its own, and the downward API.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount, Volume};
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use serde_json::json;

use super::Shared;

/// Writes the `kube-root-ca.crt` ConfigMap into `ns` if it is not there yet (the root-CA
/// publisher's job, a controller the test control plane does not run).
pub(super) async fn publish_root_ca(shared: &Shared, ns: &str) -> Result<(), String> {
    let api: Api<ConfigMap> = Api::namespaced(shared.client.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "kube-root-ca.crt"},
        "data": {"ca.crt": shared.ca_pem},
    }))
    .expect("a ConfigMap");
    match api.create(&PostParams::default(), &cm).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("publish kube-root-ca.crt in {ns}: {e}")),
    }
}

/// Each volume's directory on this machine, by volume name.
pub(super) async fn materialise_volumes(
    shared: &Shared,
    pod: &Pod,
    ip: &str,
    dir: &Path,
) -> Result<HashMap<String, PathBuf>, String> {
    let ns = pod.namespace().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut out = HashMap::new();
    for v in spec.volumes.clone().unwrap_or_default() {
        let path = dir.join(&v.name);
        std::fs::create_dir_all(&path).map_err(|e| format!("volume dir: {e}"))?;
        fill_volume(shared, pod, &ns, ip, &v, &path).await?;
        out.insert(v.name.clone(), path);
    }
    Ok(out)
}

pub(super) fn write_file(dir: &Path, relative: &str, data: &[u8]) -> Result<(), String> {
    let path = dir.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    }
    std::fs::write(&path, data).map_err(|e| format!("{}: {e}", path.display()))
}

/// `items` (key → path) of a secret's or ConfigMap's data, or every key as its own file.
pub(super) fn project(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<k8s_openapi::api::core::v1::KeyToPath>>,
    what: &str,
) -> Result<(), String> {
    match items {
        Some(items) => {
            for item in items {
                let value = data
                    .get(&item.key)
                    .ok_or_else(|| format!("{what} has no key {}", item.key))?;
                write_file(dir, &item.path, value)?;
            }
        }
        None => {
            for (k, value) in data {
                write_file(dir, k, value)?;
            }
        }
    }
    Ok(())
}

pub(super) async fn secret_data(
    shared: &Shared,
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let secret = Api::<Secret>::namespaced(shared.client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| format!("secret {ns}/{name}: {e}"))?;
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    Ok(data)
}

pub(super) async fn config_map_data(
    shared: &Shared,
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let cm = Api::<ConfigMap>::namespaced(shared.client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| format!("configMap {ns}/{name}: {e}"))?;
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.unwrap_or_default() {
        data.insert(k, v.0);
    }
    Ok(data)
}

pub(super) async fn fill_volume(
    shared: &Shared,
    pod: &Pod,
    ns: &str,
    ip: &str,
    v: &Volume,
    path: &Path,
) -> Result<(), String> {
    if v.empty_dir.is_some() {
        return Ok(());
    }
    if let Some(s) = &v.secret {
        let name = s.secret_name.clone().unwrap_or_default();
        let data = secret_data(shared, ns, &name).await?;
        return project(path, &data, s.items.as_ref(), &format!("secret {name}"));
    }
    if let Some(c) = &v.config_map {
        let data = config_map_data(shared, ns, &c.name).await?;
        return project(
            path,
            &data,
            c.items.as_ref(),
            &format!("configMap {}", c.name),
        );
    }
    let Some(projected) = &v.projected else {
        return Err(format!(
            "volume {} is of a kind the test kubelet does not support",
            v.name
        ));
    };
    for source in projected.sources.iter().flatten() {
        if let Some(t) = &source.service_account_token {
            let token = service_account_token(shared, pod, ns, t.expiration_seconds).await?;
            write_file(path, &t.path, token.as_bytes())?;
        } else if let Some(c) = &source.config_map {
            let data = config_map_data(shared, ns, &c.name).await?;
            project(
                path,
                &data,
                c.items.as_ref(),
                &format!("configMap {}", c.name),
            )?;
        } else if let Some(s) = &source.secret {
            let data = secret_data(shared, ns, &s.name).await?;
            project(path, &data, s.items.as_ref(), &format!("secret {}", s.name))?;
        } else if let Some(d) = &source.downward_api {
            for item in d.items.iter().flatten() {
                let field = item.field_ref.as_ref().ok_or_else(|| {
                    format!("volume {}: only fieldRef downward API items", v.name)
                })?;
                let value = field_value(pod, ip, &field.field_path)?;
                write_file(path, &item.path, value.as_bytes())?;
            }
        } else {
            return Err(format!(
                "volume {}: a projected source the test kubelet does not support",
                v.name
            ));
        }
    }
    Ok(())
}

/// A token for the pod's ServiceAccount bound to the pod (TokenRequest with the pod as its
/// bound object), as the kubelet asks for one: it stops being valid when the pod is deleted.
pub(super) async fn service_account_token(
    shared: &Shared,
    pod: &Pod,
    ns: &str,
    expiration: Option<i64>,
) -> Result<String, String> {
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request: TokenRequest = serde_json::from_value(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": expiration.unwrap_or(3607),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                "name": pod.name_any(), "uid": pod.uid()},
        },
    }))
    .expect("a TokenRequest");
    let answer = Api::<ServiceAccount>::namespaced(shared.client.clone(), ns)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("a token for {ns}/{account}: {e}"))?;
    answer
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| format!("the token request for {ns}/{account} was answered without a token"))
}

/// A downward-API field of the pod, as the kubelet resolves it.
pub(super) fn field_value(pod: &Pod, ip: &str, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.clone().unwrap_or_default();
    let quoted = |prefix: &str| -> Option<String> {
        path.strip_prefix(prefix)?
            .strip_suffix("']")
            .map(str::to_owned)
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.podIP" => ip.to_owned(),
        "status.hostIP" => "127.0.0.1".to_owned(),
        _ => {
            if let Some(key) = quoted("metadata.labels['") {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = quoted("metadata.annotations['") {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(format!(
                    "fieldRef {path} is not supported by the test kubelet"
                ));
            }
        }
    })
}
