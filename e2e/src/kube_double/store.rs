//! The object store behind the double: every object of every kind as JSON, one global
//! resourceVersion, an ordered change log that watches replay from, and the watchers
//! themselves. Every method runs under one lock, so an event reaches every watcher in
//! resourceVersion order, exactly as a watch on a real API server sees etcd's revisions.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use super::patch::{self, Ownership};
use super::selector::{FieldSelector, LabelSelector};

/// A resource addressed by a request path: group (empty for core), version and plural.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRef {
    pub group: String,
    pub version: String,
    pub plural: String,
}

impl ResourceRef {
    /// `leases.coordination.k8s.io`, or `configmaps` for the core group, as error messages say.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `coordination.k8s.io/v1`, or `v1` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// An API error, answered as a `meta/v1` Status body that kube parses into `ErrorResponse`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
        }
    }

    pub fn not_found(res: &ResourceRef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        )
    }

    pub fn conflict(res: &ResourceRef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(422, "Invalid", message)
    }

    /// The `meta/v1` Status JSON for this error.
    pub fn to_status(&self) -> Value {
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        })
    }
}

const STALE: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// An admission check for one API group, run on every create and every update of the main
/// resource (and `/scale`), as a validating admission (or a CRD's CEL rules) would. It gets
/// the object as it would be stored and the stored one (None on create); an `Err` is the
/// refusal message, answered as 422 Invalid.
pub type Admission =
    std::sync::Arc<dyn Fn(&Value, Option<&Value>) -> Result<(), String> + Send + Sync>;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// The patch flavours the API server accepts (by `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    /// Applied as a merge patch: lists are replaced rather than merged by key.
    Strategic,
    Json,
    Apply {
        force: bool,
    },
}

/// What `DeleteOptions` asked for.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub resource_version: Option<String>,
    pub uid: Option<String>,
    pub orphan: bool,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy)]
pub enum WatchFrom {
    /// Synthetic ADDED events for every current object, then live changes (rv unset or "0").
    Current,
    /// Every change after this resourceVersion, then live changes.
    After(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Storage key: group, plural, namespace ("" for cluster-scoped), name. The version is not
/// part of it: one object, whichever version it is read through.
type Key = (String, String, String, String);

struct Stored {
    value: Value,
    ownership: Ownership,
}

struct LoggedEvent {
    rv: u64,
    group: String,
    plural: String,
    namespace: String,
    kind: EventType,
    object: Value,
    old: Option<Value>,
}

/// One line of a watch stream, ready to write.
#[derive(Debug)]
pub struct WatchLine {
    pub bytes: Bytes,
    pub bookmark: bool,
}

/// A registered watch: what it selects and where its events go.
pub struct Watcher {
    group: String,
    plural: String,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    api_version: String,
    kind: String,
    tx: mpsc::UnboundedSender<WatchLine>,
}

impl Watcher {
    pub fn new(
        res: &ResourceRef,
        namespace: Option<String>,
        labels: LabelSelector,
        fields: FieldSelector,
        tx: mpsc::UnboundedSender<WatchLine>,
    ) -> Self {
        Self {
            group: res.group.clone(),
            plural: res.plural.clone(),
            namespace,
            labels,
            fields,
            api_version: res.api_version(),
            kind: String::new(),
            tx,
        }
    }

    fn selects(&self, v: &Value) -> bool {
        self.labels.matches(v) && self.fields.matches(v)
    }

    fn covers(&self, group: &str, plural: &str, namespace: &str) -> bool {
        self.group == group
            && self.plural == plural
            && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }

    /// Sends the event as this watcher sees it: an object entering its selection is ADDED,
    /// one leaving it is DELETED. Returns false when the stream is gone.
    fn offer(&self, kind: EventType, object: &Value, old: Option<&Value>) -> bool {
        let now = self.selects(object);
        let projected = match kind {
            EventType::Added | EventType::Deleted => now.then_some(kind),
            EventType::Modified => match (old.is_some_and(|o| self.selects(o)), now) {
                (true, true) => Some(EventType::Modified),
                (false, true) => Some(EventType::Added),
                (true, false) => Some(EventType::Deleted),
                (false, false) => None,
            },
        };
        match projected {
            Some(k) => self.send(json!({"type": k.as_str(), "object": object}), false),
            None => true,
        }
    }

    fn send(&self, event: Value, bookmark: bool) -> bool {
        let mut line = serde_json::to_vec(&event).expect("JSON values serialize");
        line.push(b'\n');
        self.tx
            .send(WatchLine {
                bytes: Bytes::from(line),
                bookmark,
            })
            .is_ok()
    }
}

/// The whole state of the double's "cluster".
pub struct Store {
    rv: u64,
    uids: u64,
    objects: BTreeMap<Key, Stored>,
    log: VecDeque<LoggedEvent>,
    compacted_through: u64,
    history_limit: Option<usize>,
    watchers: BTreeMap<u64, Watcher>,
    next_watcher: u64,
    kinds: BTreeMap<(String, String), String>,
    pub mutations: u64,
    /// Whether an object created with owner references to objects that do not exist is
    /// collected at once (see `KubeDouble::collect_orphans`).
    pub collect_orphans: bool,
    /// Admission checks by API group (see [`Admission`]).
    pub admission: BTreeMap<String, Admission>,
}

fn known_kind(plural: &str) -> Option<&'static str> {
    Some(match plural {
        "leases" => "Lease",
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "pods" => "Pod",
        "services" => "Service",
        "serviceaccounts" => "ServiceAccount",
        "namespaces" => "Namespace",
        "events" => "Event",
        "nodes" => "Node",
        "deployments" => "Deployment",
        "replicasets" => "ReplicaSet",
        "statefulsets" => "StatefulSet",
        "roles" => "Role",
        "rolebindings" => "RoleBinding",
        "clusterroles" => "ClusterRole",
        "clusterrolebindings" => "ClusterRoleBinding",
        "poddisruptionbudgets" => "PodDisruptionBudget",
        "customresourcedefinitions" => "CustomResourceDefinition",
        "actorclusters" => "ActorCluster",
        "actorroles" => "ActorRole",
        _ => return None,
    })
}

/// The wall clock is only used to stamp `creationTimestamp`/`deletionTimestamp`, as a real
/// server does; nothing in the double's logic reads it back.
/// Whether a PUT on a missing object of this resource creates it (the registry strategy's
/// `AllowCreateOnUpdate`): true for `leases.coordination.k8s.io` (and, on a real server, a few
/// core kinds the double does not model specially), false for everything else.
pub fn allows_create_on_update(res: &ResourceRef) -> bool {
    res.group == "coordination.k8s.io" && res.plural == "leases"
}

fn now_rfc3339() -> String {
    format!("{:.0}", k8s_openapi::jiff::Timestamp::now())
}

fn meta(v: &Value) -> Option<&Map<String, Value>> {
    v.get("metadata").and_then(Value::as_object)
}

fn meta_mut(v: &mut Value) -> &mut Map<String, Value> {
    if !v.get("metadata").is_some_and(Value::is_object) {
        v["metadata"] = Value::Object(Map::new());
    }
    v["metadata"]
        .as_object_mut()
        .expect("set to an object above")
}

fn meta_str<'a>(v: &'a Value, field: &str) -> Option<&'a str> {
    meta(v)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A cheap deterministic mixer for generated names (no randomness needed in a test double).
fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Everything except metadata and status: a change here bumps `metadata.generation`.
fn spec_part(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

fn without_rv(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    v
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        Self {
            rv: 1,
            uids: 0,
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            compacted_through: 0,
            history_limit: None,
            watchers: BTreeMap::new(),
            next_watcher: 0,
            kinds: BTreeMap::new(),
            mutations: 0,
            collect_orphans: false,
            admission: BTreeMap::new(),
        }
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn active_watches(&self) -> usize {
        self.watchers.len()
    }

    /// Drops the change history: a watch from any earlier resourceVersion now gets 410 Gone.
    pub fn compact(&mut self) {
        self.log.clear();
        self.compacted_through = self.rv;
    }

    /// Keeps at most `limit` events of history (None = unbounded), like etcd compaction.
    pub fn set_history_limit(&mut self, limit: Option<usize>) {
        self.history_limit = limit;
        self.trim_log();
    }

    fn trim_log(&mut self) {
        if let Some(limit) = self.history_limit {
            while self.log.len() > limit {
                let e = self.log.pop_front().expect("longer than the limit");
                self.compacted_through = e.rv;
            }
        }
    }

    fn kind_of(&self, res: &ResourceRef) -> String {
        if let Some(k) = self.kinds.get(&(res.group.clone(), res.plural.clone())) {
            return k.clone();
        }
        if let Some(k) = known_kind(&res.plural) {
            return k.to_owned();
        }
        let singular = res.plural.strip_suffix('s').unwrap_or(&res.plural);
        let mut c = singular.chars();
        c.next()
            .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
            .unwrap_or_default()
    }

    fn key(res: &ResourceRef, namespace: Option<&str>, name: &str) -> Key {
        (
            res.group.clone(),
            res.plural.clone(),
            namespace.unwrap_or_default().to_owned(),
            name.to_owned(),
        )
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.mutations += 1;
        self.rv
    }

    fn emit(&mut self, key: &Key, kind: EventType, object: &Value, old: Option<&Value>) {
        let (group, plural, namespace, _) = key;
        self.watchers
            .retain(|_, w| !w.covers(group, plural, namespace) || w.offer(kind, object, old));
        self.log.push_back(LoggedEvent {
            rv: self.rv,
            group: group.clone(),
            plural: plural.clone(),
            namespace: namespace.clone(),
            kind,
            object: object.clone(),
            old: old.cloned(),
        });
        self.trim_log();
    }

    /// Runs the group's admission check, if any, on a write about to be stored.
    fn admit(&self, res: &ResourceRef, new: &Value, old: Option<&Value>) -> Result<(), ApiError> {
        match self.admission.get(&res.group) {
            Some(check) => check(new, old).map_err(ApiError::invalid),
            None => Ok(()),
        }
    }

    /// Reads one object.
    pub fn get(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        self.objects
            .get(&Self::key(res, namespace, name))
            .map(|s| s.value.clone())
            .ok_or_else(|| ApiError::not_found(res, name))
    }

    /// Lists objects of one resource (all namespaces when `namespace` is None), sorted by
    /// namespace and name, paginated by `limit` with a `continue` token.
    pub fn list(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        limit: Option<usize>,
        continue_token: Option<&str>,
    ) -> Result<Value, ApiError> {
        let after = match continue_token {
            Some(t) if !t.is_empty() => Some(
                t.split_once('/')
                    .map(|(ns, n)| (ns.to_owned(), n.to_owned()))
                    .ok_or_else(|| ApiError::bad_request("malformed continue token"))?,
            ),
            _ => None,
        };
        let mut items = Vec::new();
        let mut next = None;
        for ((g, p, ns, name), stored) in &self.objects {
            if *g != res.group || *p != res.plural {
                continue;
            }
            if namespace.is_some_and(|want| want != ns) {
                continue;
            }
            if after
                .as_ref()
                .is_some_and(|(ans, an)| (ns.as_str(), name.as_str()) <= (ans, an))
            {
                continue;
            }
            if !labels.matches(&stored.value) || !fields.matches(&stored.value) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                next = items.last().map(|v: &Value| {
                    format!(
                        "{}/{}",
                        meta_str(v, "namespace").unwrap_or_default(),
                        meta_str(v, "name").unwrap_or_default()
                    )
                });
                break;
            }
            items.push(stored.value.clone());
        }
        let mut metadata = json!({"resourceVersion": self.rv.to_string()});
        if let Some(c) = next {
            metadata["continue"] = Value::String(c);
        }
        Ok(json!({
            "apiVersion": res.api_version(),
            "kind": format!("{}List", self.kind_of(res)),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// Creates an object (POST). `status` is dropped, as for any kind with a status
    /// subresource; `generateName` gets a five-character suffix.
    pub fn create(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        mut body: Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if let Some(m) = body.as_object_mut() {
            m.remove("status");
        }
        self.prepare_new(res, namespace, &mut body)?;
        let name = meta_str(&body, "name")
            .expect("prepare_new names it")
            .to_owned();
        let key = Self::key(res, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", res.qualified()),
            ));
        }
        let mut ownership = Ownership::default();
        ownership.record_update(manager, &json!({}), &body);
        self.admit(res, &body, None)?;
        self.insert_new(key, body, ownership)
    }

    /// Fills in everything the server owns on a new object and checks name and namespace.
    fn prepare_new(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        body: &mut Value,
    ) -> Result<(), ApiError> {
        let kind = self.kind_of(res);
        let obj = body.as_object_mut().expect("checked by the caller");
        obj.entry("apiVersion")
            .or_insert_with(|| Value::String(res.api_version()));
        let kind = obj
            .entry("kind")
            .or_insert_with(|| Value::String(kind))
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.kinds
            .insert((res.group.clone(), res.plural.clone()), kind);
        let m = meta_mut(body);
        match (namespace, m.get("namespace").and_then(Value::as_str)) {
            (Some(path_ns), Some(body_ns)) if !body_ns.is_empty() && body_ns != path_ns => {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({path_ns})"
                )));
            }
            (Some(path_ns), _) => {
                m.insert("namespace".into(), Value::String(path_ns.to_owned()));
            }
            (None, _) => {
                m.remove("namespace");
            }
        }
        let has_name = m
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        if !has_name {
            let Some(prefix) = m.get("generateName").and_then(Value::as_str) else {
                return Err(ApiError::invalid(format!(
                    "{} is invalid: metadata.name: Required value: name or generateName is required",
                    res.qualified()
                )));
            };
            let prefix = prefix.to_owned();
            const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
            let mut seed = splitmix(self.uids ^ self.rv.rotate_left(32));
            let name = loop {
                let suffix: String = (0..5)
                    .map(|i| ALPHABET[((seed >> (i * 8)) % ALPHABET.len() as u64) as usize] as char)
                    .collect();
                let candidate = format!("{prefix}{suffix}");
                if !self
                    .objects
                    .contains_key(&Self::key(res, namespace, &candidate))
                {
                    break candidate;
                }
                seed = splitmix(seed);
            };
            meta_mut(body).insert("name".into(), Value::String(name));
        }
        self.uids += 1;
        let uid = format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            self.uids as u32,
            (splitmix(self.uids) >> 48) as u16,
            (splitmix(self.uids) >> 36) as u16 & 0xfff,
            (splitmix(self.uids) >> 24) as u16 & 0xfff,
            splitmix(self.uids) & 0xffff_ffff_ffff
        );
        let m = meta_mut(body);
        m.insert("uid".into(), Value::String(uid));
        m.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        m.insert("generation".into(), json!(1));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        Ok(())
    }

    fn insert_new(
        &mut self,
        key: Key,
        mut value: Value,
        ownership: Ownership,
    ) -> Result<Value, ApiError> {
        let rv = self.next_rv();
        meta_mut(&mut value).insert("resourceVersion".into(), Value::String(rv.to_string()));
        self.emit(&key, EventType::Added, &value, None);
        let owners = Self::owner_uids(&value);
        self.objects.insert(
            key.clone(),
            Stored {
                value: value.clone(),
                ownership,
            },
        );
        // The garbage collector deletes a dependent whose owners are all gone, also one
        // created after its owner was deleted (a controller racing the deletion).
        let orphaned = self.collect_orphans
            && !owners.is_empty()
            && owners.iter().all(|u| {
                !self
                    .objects
                    .values()
                    .any(|s| meta_str(&s.value, "uid") == Some(u.as_str()))
            });
        if orphaned {
            self.remove(&key, false);
        }
        Ok(value)
    }

    /// Stores `new` for an existing object: a no-op write changes nothing (no new
    /// resourceVersion, no event); a change outside metadata and status bumps generation; an
    /// object being deleted whose last finalizer went away is removed.
    fn commit(&mut self, key: &Key, mut new: Value, ownership: Ownership) -> Value {
        let old = self.objects[key].value.clone();
        for field in [
            "uid",
            "creationTimestamp",
            "name",
            "namespace",
            "generation",
            "deletionTimestamp",
        ] {
            match meta(&old).and_then(|m| m.get(field)) {
                Some(v) => {
                    meta_mut(&mut new).insert(field.into(), v.clone());
                }
                None => {
                    meta_mut(&mut new).remove(field);
                }
            }
        }
        for top in ["apiVersion", "kind"] {
            if let Some(v) = old.get(top) {
                new[top] = v.clone();
            }
        }
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            if m.get("finalizers")
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove("finalizers");
            }
            if m.get("labels")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                m.remove("labels");
            }
            if m.get("annotations")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
            {
                m.remove("annotations");
            }
        }
        self.objects.get_mut(key).expect("exists").ownership = ownership;
        if without_rv(&new) == without_rv(&old) {
            return old;
        }
        if spec_part(&new) != spec_part(&old) {
            let generation = meta(&old)
                .and_then(|m| m.get("generation"))
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
        }
        let rv = self.next_rv();
        meta_mut(&mut new).insert("resourceVersion".into(), Value::String(rv.to_string()));
        self.objects.get_mut(key).expect("exists").value = new.clone();
        self.emit(key, EventType::Modified, &new, Some(&old));
        let finalized = meta(&new).is_some_and(|m| {
            m.contains_key("deletionTimestamp")
                && m.get("finalizers")
                    .and_then(Value::as_array)
                    .is_none_or(Vec::is_empty)
        });
        if finalized {
            return self.remove(key, false);
        }
        new
    }

    fn existing(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(Key, Value, Ownership), ApiError> {
        let key = Self::key(res, namespace, name);
        let s = self
            .objects
            .get(&key)
            .ok_or_else(|| ApiError::not_found(res, name))?;
        Ok((key, s.value.clone(), s.ownership.clone()))
    }

    fn check_rv(
        res: &ResourceRef,
        name: &str,
        wanted: Option<&str>,
        current: &Value,
    ) -> Result<(), ApiError> {
        match wanted {
            Some(w) if !w.is_empty() && Some(w) != meta_str(current, "resourceVersion") => {
                Err(ApiError::conflict(res, name, STALE))
            }
            _ => Ok(()),
        }
    }

    /// Replaces an object (PUT), as genericregistry `Store.Update` does; returns the object and
    /// whether the PUT created it (answered 201).
    ///
    /// * A `metadata.uid` in the body is a precondition (the only one the server takes from an
    ///   update): checked first, against the stored object, or against an empty one when there
    ///   is none, so a PUT naming a uid on a deleted object is a 409 Conflict "Precondition
    ///   failed: UID in precondition: <uid>, UID in object meta: " (empty), never a create.
    /// * A non-empty resourceVersion that is not the current one is a 409 Conflict ("the object
    ///   has been modified"); an empty one is an unconditional update.
    /// * Create on update: for kinds whose strategy allows it (Leases, see
    ///   [`allows_create_on_update`]) a PUT on a missing object creates it, ignoring the body's
    ///   resourceVersion (the create path does); for the others it is 404.
    /// * On the main resource `status` is kept; on `/status` only `status` changes.
    pub fn replace(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
        sub: Subresource,
        mut body: Value,
        manager: &str,
    ) -> Result<(Value, bool), ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&body, "name").unwrap_or_default()
            )));
        }
        let key = Self::key(res, namespace, name);
        let stored_uid = self
            .objects
            .get(&key)
            .map(|s| meta_str(&s.value, "uid").unwrap_or_default().to_owned());
        if let Some(uid) = meta_str(&body, "uid").filter(|u| !u.is_empty())
            && stored_uid.as_deref() != Some(uid)
        {
            return Err(ApiError::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    stored_uid.unwrap_or_default()
                ),
            ));
        }
        if stored_uid.is_none() {
            if sub != Subresource::Main || !allows_create_on_update(res) {
                return Err(ApiError::not_found(res, name));
            }
            if let Some(m) = body.as_object_mut() {
                m.remove("status");
            }
            meta_mut(&mut body).insert("name".into(), Value::String(name.to_owned()));
            // prepare_new drops the resourceVersion: the create path ignores it.
            self.prepare_new(res, namespace, &mut body)?;
            let mut ownership = Ownership::default();
            ownership.record_update(manager, &json!({}), &body);
            self.admit(res, &body, None)?;
            return Ok((self.insert_new(key, body, ownership)?, true));
        }
        let (key, old, mut ownership) = self.existing(res, namespace, name)?;
        Self::check_rv(res, name, meta_str(&body, "resourceVersion"), &old)?;
        let new = Self::split_sub(sub, &old, body);
        if sub == Subresource::Main {
            self.admit(res, &new, Some(&old))?;
        }
        ownership.record_update(manager, &old, &new);
        Ok((self.commit(&key, new, ownership), false))
    }

    /// Keeps the half of `candidate` a write to `sub` may change and the other half of `old`.
    fn split_sub(sub: Subresource, old: &Value, candidate: Value) -> Value {
        match sub {
            Subresource::Main => {
                let mut new = candidate;
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new
            }
            Subresource::Status => {
                let mut new = old.clone();
                match candidate.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                new
            }
        }
    }

    /// Patches an object. Server-side apply creates the object when it does not exist.
    /// Returns the result and whether it was created.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: Value,
        manager: &str,
    ) -> Result<(Value, bool), ApiError> {
        let key = Self::key(res, namespace, name);
        if let PatchKind::Apply { .. } = kind {
            if !body.is_object() {
                return Err(ApiError::bad_request(
                    "an applied configuration must be an object",
                ));
            }
            if meta_str(&body, "name").is_some_and(|n| n != name) {
                return Err(ApiError::bad_request(format!(
                    "the name of the applied object does not match the name on the URL ({name})"
                )));
            }
            if !self.objects.contains_key(&key) {
                if sub == Subresource::Status {
                    return Err(ApiError::not_found(res, name));
                }
                let mut intent = body;
                if let Some(m) = intent.as_object_mut() {
                    m.remove("status");
                }
                meta_mut(&mut intent).insert("name".into(), Value::String(name.to_owned()));
                let mut value = json!({});
                let mut ownership = Ownership::default();
                ownership
                    .apply(manager, &mut value, &intent, true)
                    .expect("forced apply cannot conflict");
                self.prepare_new(res, namespace, &mut value)?;
                self.admit(res, &value, None)?;
                return Ok((self.insert_new(key, value, ownership)?, true));
            }
        }
        let (key, old, mut ownership) = self.existing(res, namespace, name)?;
        let mut work = old.clone();
        match kind {
            PatchKind::Merge | PatchKind::Strategic => {
                Self::check_rv(res, name, meta_str(&body, "resourceVersion"), &old)?;
                patch::merge_patch(&mut work, &body);
            }
            PatchKind::Json => {
                patch::json_patch(&mut work, &body)
                    .map_err(|e| ApiError::invalid(e.to_string()))?;
            }
            PatchKind::Apply { force } => {
                Self::check_rv(res, name, meta_str(&body, "resourceVersion"), &old)?;
                let mut intent = body;
                let obj = intent.as_object_mut().expect("checked above");
                match sub {
                    Subresource::Main => {
                        obj.remove("status");
                    }
                    Subresource::Status => {
                        obj.retain(|k, _| k == "status" || k == "apiVersion" || k == "kind")
                    }
                }
                if let Err(conflicts) = ownership.apply(manager, &mut work, &intent, force) {
                    let list: Vec<String> = conflicts
                        .iter()
                        .map(|c| format!("conflict with \"{}\": .{}", c.manager, c.path.join(".")))
                        .collect();
                    return Err(ApiError::new(
                        409,
                        "Conflict",
                        format!(
                            "Apply failed with {} conflict(s): {}",
                            list.len(),
                            list.join("; ")
                        ),
                    ));
                }
            }
        }
        let new = Self::split_sub(sub, &old, work);
        if sub == Subresource::Main {
            self.admit(res, &new, Some(&old))?;
        }
        if !matches!(kind, PatchKind::Apply { .. }) {
            ownership.record_update(manager, &old, &new);
        }
        Ok((self.commit(&key, new, ownership), false))
    }

    /// Deletes an object. With finalizers it is only marked (deletionTimestamp) until they are
    /// removed. Dependents whose every owner is gone are deleted too (background cascade), or
    /// have the owner reference stripped when `orphan` is asked for.
    pub fn delete(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let (key, old, ownership) = self.existing(res, namespace, name)?;
        if let Some(uid) = opts.uid.as_deref().filter(|u| !u.is_empty())
            && Some(uid) != meta_str(&old, "uid")
        {
            return Err(ApiError::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta_str(&old, "uid").unwrap_or_default()
                ),
            ));
        }
        if let Some(rv) = opts.resource_version.as_deref().filter(|r| !r.is_empty())
            && Some(rv) != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(
                res,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    meta_str(&old, "resourceVersion").unwrap_or_default()
                ),
            ));
        }
        let has_finalizers = meta(&old)
            .and_then(|m| m.get("finalizers"))
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if meta(&old).is_some_and(|m| m.contains_key("deletionTimestamp")) {
                return Ok(old);
            }
            let mut marked = old.clone();
            meta_mut(&mut marked).insert("deletionGracePeriodSeconds".into(), json!(0));
            let rv = self.next_rv();
            let m = meta_mut(&mut marked);
            m.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
            let stored = self.objects.get_mut(&key).expect("exists");
            stored.value = marked.clone();
            stored.ownership = ownership;
            self.emit(&key, EventType::Modified, &marked, Some(&old));
            return Ok(marked);
        }
        Ok(self.remove(&key, opts.orphan))
    }

    /// Removes an object for good, emits DELETED, and runs the garbage collector over its
    /// dependents.
    fn remove(&mut self, key: &Key, orphan: bool) -> Value {
        let mut gone = self.objects.remove(key).expect("exists").value;
        let rv = self.next_rv();
        meta_mut(&mut gone).insert("resourceVersion".into(), Value::String(rv.to_string()));
        self.emit(key, EventType::Deleted, &gone, None);
        if let Some(uid) = meta_str(&gone, "uid").map(str::to_owned) {
            self.collect_dependents(&uid, orphan);
        }
        gone
    }

    fn owner_uids(v: &Value) -> Vec<String> {
        meta(v)
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn collect_dependents(&mut self, owner_uid: &str, orphan: bool) {
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, s)| Self::owner_uids(&s.value).iter().any(|u| u == owner_uid))
            .map(|(k, _)| k.clone())
            .collect();
        for key in dependents {
            let Some(stored) = self.objects.get(&key) else {
                continue;
            };
            let value = stored.value.clone();
            let ownership = stored.ownership.clone();
            if orphan {
                let mut new = value.clone();
                if let Some(refs) = meta_mut(&mut new)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid));
                    if refs.is_empty() {
                        meta_mut(&mut new).remove("ownerReferences");
                    }
                }
                self.commit(&key, new, ownership);
                continue;
            }
            let live_owner = Self::owner_uids(&value).iter().any(|u| {
                self.objects
                    .values()
                    .any(|s| meta_str(&s.value, "uid") == Some(u.as_str()))
            });
            if live_owner {
                continue;
            }
            let (group, plural, ns, name) = key.clone();
            let res = ResourceRef {
                group,
                plural,
                version: String::new(),
            };
            let ns = (!ns.is_empty()).then_some(ns);
            // A dependent deleted by the collector honours its own finalizers.
            let _ = self.delete(&res, ns.as_deref(), &name, &DeleteOptions::default());
        }
    }

    /// The `autoscaling/v1` Scale view of an object with `spec.replicas`.
    pub fn get_scale(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let obj = self.get(res, namespace, name)?;
        Ok(Self::scale_of(&obj))
    }

    fn scale_of(obj: &Value) -> Value {
        let selector = match obj.pointer("/status/selector") {
            Some(Value::String(s)) => s.clone(),
            _ => obj
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default(),
        };
        let m = meta(obj).cloned().unwrap_or_default();
        json!({
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": m.get("name"),
                "namespace": m.get("namespace"),
                "uid": m.get("uid"),
                "resourceVersion": m.get("resourceVersion"),
                "creationTimestamp": m.get("creationTimestamp"),
            },
            "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
            "status": {
                "replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
                "selector": selector,
            },
        })
    }

    /// Writes `/scale`: the new Scale (already patched by the caller) sets `spec.replicas`.
    pub fn set_scale(
        &mut self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
        scale: &Value,
        manager: &str,
    ) -> Result<Value, ApiError> {
        let (key, old, mut ownership) = self.existing(res, namespace, name)?;
        Self::check_rv(res, name, meta_str(scale, "resourceVersion"), &old)?;
        let replicas = scale
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .ok_or_else(|| ApiError::invalid("Scale.spec.replicas must be an integer"))?;
        let mut new = old.clone();
        new["spec"]["replicas"] = json!(replicas);
        self.admit(res, &new, Some(&old))?;
        ownership.record_update(manager, &old, &new);
        let stored = self.commit(&key, new, ownership);
        Ok(Self::scale_of(&stored))
    }

    /// Registers a watcher. From a compacted resourceVersion this is 410 Gone (the caller
    /// sends it as an ERROR event, as a real server does). Returns the watcher id.
    pub fn watch(&mut self, mut watcher: Watcher, from: WatchFrom) -> Result<u64, ApiError> {
        watcher.kind = self.kind_of(&ResourceRef {
            group: watcher.group.clone(),
            version: String::new(),
            plural: watcher.plural.clone(),
        });
        match from {
            WatchFrom::Current => {
                for ((g, p, ns, _), s) in &self.objects {
                    if watcher.covers(g, p, ns) && watcher.selects(&s.value) {
                        watcher.send(json!({"type": "ADDED", "object": s.value}), false);
                    }
                }
            }
            WatchFrom::After(rv) => {
                if rv < self.compacted_through {
                    return Err(ApiError::new(
                        410,
                        "Expired",
                        format!(
                            "too old resource version: {rv} ({})",
                            self.compacted_through + 1
                        ),
                    ));
                }
                for e in self.log.iter().filter(|e| e.rv > rv) {
                    if watcher.covers(&e.group, &e.plural, &e.namespace) {
                        watcher.offer(e.kind, &e.object, e.old.as_ref());
                    }
                }
            }
        }
        self.next_watcher += 1;
        self.watchers.insert(self.next_watcher, watcher);
        Ok(self.next_watcher)
    }

    /// Sends a BOOKMARK at the current resourceVersion to one watcher; every event up to that
    /// version has already been queued to it. `initial_end` marks the end of a streaming list.
    pub fn bookmark(&mut self, id: u64, initial_end: bool) {
        let rv = self.rv.to_string();
        if let Some(w) = self.watchers.get(&id) {
            let mut metadata = json!({"resourceVersion": rv});
            if initial_end {
                metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            let ok = w.send(
                json!({
                    "type": "BOOKMARK",
                    "object": {"apiVersion": w.api_version, "kind": w.kind, "metadata": metadata},
                }),
                true,
            );
            if !ok {
                self.watchers.remove(&id);
            }
        }
    }

    pub fn unwatch(&mut self, id: u64) {
        self.watchers.remove(&id);
    }

    /// The field managers of an object, for tests.
    pub fn managers(
        &self,
        res: &ResourceRef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Vec<(String, patch::Operation)>> {
        self.objects
            .get(&Self::key(res, namespace, name))
            .map(|s| s.ownership.managers())
    }
}
