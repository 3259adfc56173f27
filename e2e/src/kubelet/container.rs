//! One container's process: its entrypoint, environment, mounts and probes, resolved from
//! its spec as the kubelet resolves them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use serde_json::json;

use super::volumes::{config_map_data, field_value, secret_data};
use super::{HttpGet, RunningContainer, Shared, TOKEN_DIR};

/// The image's entrypoint: the workspace binary `scripts/build-images.sh` puts in it.
pub(super) fn entrypoint(image: &str) -> Result<&'static str, String> {
    let repo = image.rsplit_once(':').map_or(image, |(repo, _)| repo);
    match repo {
        "ghcr.io/sigx/sidecar" => Ok("sigx-sidecar"),
        "ghcr.io/sigx/counter-app" => Ok("counter-app"),
        "ghcr.io/sigx/operator" => Ok("sigx-operator"),
        _ => Err(format!(
            "image {image} has no workspace binary in the test kubelet"
        )),
    }
}

/// A probe's or hook's httpGet resolved against the container's ports and the pod IP.
pub(super) fn resolve_http_get(
    c: &Container,
    get: &HTTPGetAction,
    ip: &str,
) -> Result<HttpGet, String> {
    let port = match &get.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .map(|p| p.container_port)
            .ok_or_else(|| format!("container {} has no port named {name}", c.name))?,
    };
    if get.scheme.as_deref().is_some_and(|s| s != "HTTP") {
        return Err(format!(
            "container {}: only HTTP probes are supported",
            c.name
        ));
    }
    let host = get.host.clone().unwrap_or_else(|| ip.to_owned());
    Ok(HttpGet {
        addr: format!("{host}:{port}")
            .parse()
            .map_err(|e| format!("probe address {host}:{port}: {e}"))?,
        path: get.path.clone().unwrap_or_else(|| "/".into()),
        headers: get
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    })
}

pub(super) fn running_probe(
    c: &Container,
    probe: Option<&Probe>,
    ip: &str,
) -> Result<Option<HttpGet>, String> {
    let Some(probe) = probe else { return Ok(None) };
    match &probe.http_get {
        Some(get) => resolve_http_get(c, get, ip).map(Some),
        None => Err(format!(
            "container {}: only httpGet probes are supported",
            c.name
        )),
    }
}

/// Whether a probe's `GET` answers 200–399, as a kubelet judges it (within 2 s: the specs say
/// 1 s, and a loaded 2-core test machine answers late more often than a node does).
pub(super) async fn probe_ok(get: &HttpGet) -> bool {
    let get = get.clone();
    tokio::task::spawn_blocking(move || {
        let wait = Duration::from_secs(2);
        let code = crate::probe::http_status_with(get.addr, &get.path, &get.headers, wait);
        (200..400).contains(&code)
    })
    .await
    .unwrap_or(false)
}

/// The status code of the probe's or hook's GET (a minute at most: a drain hook answers once
/// its sidecar has drained), or 0 when nothing answers.
pub(super) fn http_get(get: &HttpGet) -> u16 {
    crate::probe::http_status_with(get.addr, &get.path, &get.headers, Duration::from_secs(60))
}

/// `$(NAME)` references to earlier variables expanded, `$$` to `$`, as the kubelet does; an
/// unknown reference stays as written.
pub(super) fn expand(value: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&rest[i..i + 2 + end + 1]),
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The path on this machine for a path in the container: under the longest mount that
/// contains it, or unchanged.
pub(super) fn host_path(value: &str, mounts: &[(String, PathBuf)]) -> Option<String> {
    mounts
        .iter()
        .filter(|(m, _)| value == m || value.starts_with(&format!("{m}/")))
        .max_by_key(|(m, _)| m.len())
        .map(|(m, host)| format!("{}{}", host.display(), &value[m.len()..]))
}

/// An env value or argument as the process on this machine must see it: mount paths moved to
/// the pod's directories, the wildcard listen address to the pod's IP.
pub(super) fn localise(value: &str, mounts: &[(String, PathBuf)], ip: &str) -> String {
    let value = host_path(value, mounts).unwrap_or_else(|| value.to_owned());
    value.replace("0.0.0.0:", &format!("{ip}:"))
}

pub(super) async fn start_container(
    shared: &Shared,
    pod: &Pod,
    c: &Container,
    sidecar: bool,
    ip: &str,
    dir: &Path,
    volumes: &HashMap<String, PathBuf>,
) -> Result<RunningContainer, String> {
    let ns = pod.namespace().unwrap_or_default();
    let image = c.image.clone().unwrap_or_default();
    let bin = crate::chaos::bin_dir().join(entrypoint(&image)?);
    if c.command.is_some() {
        return Err(format!(
            "container {}: a command replacing the entrypoint",
            c.name
        ));
    }
    if c.env_from.is_some() {
        return Err(format!("container {}: envFrom is not supported", c.name));
    }
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        if m.sub_path.is_some() || m.sub_path_expr.is_some() {
            return Err(format!(
                "container {}: subPath mounts are not supported",
                c.name
            ));
        }
        let host = volumes
            .get(&m.name)
            .ok_or_else(|| format!("container {} mounts unknown volume {}", c.name, m.name))?;
        mounts.push((m.mount_path.clone(), host.clone()));
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for e in c.env.iter().flatten() {
        let value = if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_value(pod, ip, &f.field_path)?
            } else if let Some(s) = &from.secret_key_ref {
                let data = secret_data(shared, &ns, &s.name).await?;
                let v = data
                    .get(&s.key)
                    .ok_or_else(|| format!("secret {} has no key {}", s.name, s.key))?;
                String::from_utf8_lossy(v).into_owned()
            } else if let Some(m) = &from.config_map_key_ref {
                let data = config_map_data(shared, &ns, &m.name).await?;
                let v = data
                    .get(&m.key)
                    .ok_or_else(|| format!("configMap {} has no key {}", m.name, m.key))?;
                String::from_utf8_lossy(v).into_owned()
            } else {
                return Err(format!(
                    "env {}: a source the test kubelet does not support",
                    e.name
                ));
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &env)
        };
        env.push((e.name.clone(), localise(&value, &mounts, ip)));
    }
    if let Some(token_dir) = host_path(TOKEN_DIR, &mounts) {
        let kubeconfig = dir.join(format!("kubeconfig-{}", c.name));
        let config = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "in-cluster", "cluster": {
                "server": shared.server,
                "certificate-authority": format!("{token_dir}/ca.crt")}}],
            "users": [{"name": "pod", "user": {"tokenFile": format!("{token_dir}/token")}}],
            "contexts": [{"name": "in-cluster", "context": {
                "cluster": "in-cluster", "user": "pod", "namespace": ns}}],
            "current-context": "in-cluster",
        });
        std::fs::write(&kubeconfig, config.to_string()).map_err(|e| format!("kubeconfig: {e}"))?;
        env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
    }
    env.push((
        "PATH".into(),
        format!("{}:/usr/bin:/bin", crate::chaos::bin_dir().display()),
    ));
    let args: Vec<String> = c
        .args
        .iter()
        .flatten()
        .map(|a| localise(&expand(a, &env), &mounts, ip))
        .collect();
    let log = dir.join(format!("{}.log", c.name));
    let out = std::fs::File::create(&log).map_err(|e| format!("log file: {e}"))?;
    let child = Command::new(&bin)
        .args(&args)
        .env_clear()
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(out.try_clone().map_err(|e| e.to_string())?)
        .stderr(out)
        .spawn()
        .map_err(|e| format!("start {}: {e}", bin.display()))?;
    let readiness = running_probe(c, c.readiness_probe.as_ref(), ip)?;
    let pre_stop = match c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        None => None,
        Some(h) => match &h.http_get {
            Some(get) => Some(resolve_http_get(c, get, ip)?),
            None => return Err(format!("container {}: only httpGet preStop hooks", c.name)),
        },
    };
    Ok(RunningContainer {
        name: c.name.clone(),
        image,
        sidecar,
        child,
        env,
        readiness,
        pre_stop,
        log,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_references_expand_like_the_kubelets() {
        let env = vec![("A".to_owned(), "x".to_owned())];
        assert_eq!(expand("$(A)/$(B)/$$(A)/$", &env), "x/$(B)/$(A)/$");
    }

    #[test]
    fn paths_move_under_the_longest_mount_and_wildcards_to_the_pod_ip() {
        let mounts = vec![
            ("/var/run".to_owned(), PathBuf::from("/h/run")),
            ("/var/run/sigx".to_owned(), PathBuf::from("/h/sock")),
        ];
        assert_eq!(
            localise("/var/run/sigx/s.sock", &mounts, "1.2.3.4"),
            "/h/sock/s.sock"
        );
        assert_eq!(localise("/var/runner", &mounts, "1.2.3.4"), "/var/runner");
        assert_eq!(localise("0.0.0.0:9090", &mounts, "1.2.3.4"), "1.2.3.4:9090");
    }
}
