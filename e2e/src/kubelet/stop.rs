//! A deleted pod's stop: preStop hooks, SIGTERM in the kubelet's order, removal.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};

use super::container::http_get;
use super::{HttpGet, Shared, Stopped, fail};

/// Stops a deleted pod as the kubelet does, then removes it from the API: the app containers'
/// preStop hooks, SIGTERM to the containers, then to the sidecars in reverse start order, each
/// given what is left of the grace period before SIGKILL.
pub(super) async fn stop_pod(shared: &Arc<Shared>, pod: &Pod, running: bool) {
    let uid = pod.uid().unwrap_or_default();
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(grace.max(0) as u64);
    if running {
        let mut hooks: Vec<(String, HttpGet)> = Vec::new();
        let mut pids: Vec<(bool, u32)> = Vec::new();
        for c in shared
            .pods
            .lock()
            .unwrap()
            .get(&uid)
            .into_iter()
            .flat_map(|p| &p.containers)
        {
            if let (false, Some(hook)) = (c.sidecar, &c.pre_stop) {
                hooks.push((c.name.clone(), hook.clone()));
            }
            pids.push((c.sidecar, c.child.id()));
        }
        let mut pre_stop = Vec::new();
        for (container, hook) in hooks {
            let call = tokio::task::spawn_blocking(move || http_get(&hook));
            let code = match tokio::time::timeout_at(deadline, call).await {
                Ok(Ok(code)) => code,
                _ => 0,
            };
            pre_stop.push((container, code));
        }
        let apps: Vec<u32> = pids.iter().filter(|(s, _)| !s).map(|(_, p)| *p).collect();
        let sidecars: Vec<u32> = pids
            .iter()
            .rev()
            .filter(|(s, _)| *s)
            .map(|(_, p)| *p)
            .collect();
        let mut exits = Vec::new();
        for group in [apps, sidecars] {
            for pid in &group {
                signal(*pid, rustix::process::Signal::TERM);
            }
            while tokio::time::Instant::now() < deadline && !all_exited(shared, &uid, &group) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut pods = shared.pods.lock().unwrap();
            for c in pods
                .get_mut(&uid)
                .into_iter()
                .flat_map(|p| &mut p.containers)
            {
                if group.contains(&c.child.id()) {
                    let code = c.child.try_wait().ok().flatten().and_then(|s| s.code());
                    exits.push((c.name.clone(), code));
                }
            }
        }
        if let Some(mut p) = shared.pods.lock().unwrap().remove(&uid) {
            for c in &mut p.containers {
                let _ = c.child.kill();
                let _ = c.child.wait();
            }
        }
        shared.stopped.lock().unwrap().push(Stopped {
            namespace: ns.clone(),
            name: name.clone(),
            pre_stop,
            exits,
        });
    }
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
    match api
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => fail(shared, format!("remove deleted pod {ns}/{name}: {e}")),
    }
}

pub(super) fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

pub(super) fn all_exited(shared: &Shared, uid: &str, pids: &[u32]) -> bool {
    let mut pods = shared.pods.lock().unwrap();
    let Some(p) = pods.get_mut(uid) else {
        return true;
    };
    p.containers
        .iter_mut()
        .filter(|c| pids.contains(&c.child.id()))
        .all(|c| !matches!(c.child.try_wait(), Ok(None)))
}
