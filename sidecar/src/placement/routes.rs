//! The route cache: where an actor was last found, valid for one membership view.
//!
//! Keyed on the view `Arc` itself (`Arc::ptr_eq`), never on `version`: any observed change —
//! an expiry nobody wrote included — is a new `Arc`, so the cache can never outlive the view it
//! was filled under. A route naming a host that is not eligible in the current view is dropped
//! on read.

use super::is_eligible;
use crate::membership::MembershipView;
use crate::runtime::ActorId;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The view the routes were found under, and the routes.
type ViewRoutes = (Arc<MembershipView>, HashMap<ActorId, String>);

/// Routes of one view.
#[derive(Debug, Default)]
pub struct RouteCache {
    inner: Mutex<Option<ViewRoutes>>,
}

impl RouteCache {
    /// The cached host of `actor` under `view`, if still eligible there.
    pub fn get(&self, view: &Arc<MembershipView>, actor: &ActorId) -> Option<String> {
        let mut inner = self.inner.lock().expect("routes lock");
        let (cached_view, routes) = inner.as_mut()?;
        if !Arc::ptr_eq(cached_view, view) {
            *inner = None;
            return None;
        }
        let host = routes.get(actor)?;
        match view.get(host) {
            Some(h) if is_eligible(h, &actor.actor_type) => Some(host.clone()),
            _ => {
                routes.remove(actor);
                None
            }
        }
    }

    /// Whether the cache holds routes of `view` (and not of an older view).
    pub fn holds(&self, view: &Arc<MembershipView>) -> bool {
        self.inner
            .lock()
            .expect("routes lock")
            .as_ref()
            .is_some_and(|(cached, _)| Arc::ptr_eq(cached, view))
    }

    /// Records that `actor` lives on `host` under `view`.
    pub fn put(&self, view: &Arc<MembershipView>, actor: &ActorId, host: &str) {
        let mut inner = self.inner.lock().expect("routes lock");
        match inner.as_mut() {
            Some((cached_view, routes)) if Arc::ptr_eq(cached_view, view) => {
                routes.insert(actor.clone(), host.to_string());
            }
            _ => {
                *inner = Some((
                    view.clone(),
                    HashMap::from([(actor.clone(), host.to_string())]),
                ));
            }
        }
    }

    /// Forgets the route of `actor`.
    pub fn evict(&self, actor: &ActorId) {
        if let Some((_, routes)) = self.inner.lock().expect("routes lock").as_mut() {
            routes.remove(actor);
        }
    }

    /// Number of cached routes.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("routes lock")
            .as_ref()
            .map_or(0, |(_, r)| r.len())
    }

    /// Whether no route is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::{HostDescriptor, HostStatus};

    fn view(version: u64, hosts: &[(&str, HostStatus)]) -> Arc<MembershipView> {
        Arc::new(MembershipView::new(
            version,
            hosts
                .iter()
                .map(|(id, st)| {
                    let mut d = HostDescriptor::new(
                        *id,
                        "x:1",
                        Some(vec!["C".into()]),
                        Some(vec!["C".into()]),
                    );
                    d.status = *st;
                    d
                })
                .collect(),
        ))
    }

    #[test]
    fn a_new_view_is_a_new_cache_and_ineligible_routes_drop() {
        let v1 = view(1, &[("a", HostStatus::Active), ("b", HostStatus::Active)]);
        let cache = RouteCache::default();
        let actor = ActorId::new("C", "k");
        cache.put(&v1, &actor, "a");
        assert_eq!(cache.get(&v1, &actor).as_deref(), Some("a"));
        // An equal-looking view with another Arc is another cache.
        let v1b = view(1, &[("a", HostStatus::Active), ("b", HostStatus::Active)]);
        assert_eq!(cache.get(&v1b, &actor), None);
        let v2 = view(2, &[("a", HostStatus::Leaving)]);
        cache.put(&v2, &actor, "a");
        assert_eq!(
            cache.get(&v2, &actor),
            None,
            "a leaving host is not eligible"
        );
    }
}
