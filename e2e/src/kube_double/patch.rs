//! Patch semantics: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and the subset of
//! server-side apply field ownership that controllers and `kube-lease-manager` rely on.
//!
//! Strategic merge patches are applied as merge patches: lists are replaced, not merged by key.
//! Server-side apply tracks ownership per *leaf* (a non-object value; lists are atomic leaves),
//! which is enough for the two behaviours that matter to clients: an apply that would change a
//! field another manager owns fails with 409 unless forced (leader election depends on it), and
//! fields a manager stops applying are removed when nobody else owns them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// A path from the object root to a leaf, e.g. `["spec", "holderIdentity"]`.
pub type FieldPath = Vec<String>;

/// Applies an RFC 7386 merge patch in place: `null` removes a key, objects merge, anything
/// else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let target = target.as_object_mut().expect("made an object above");
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Why a JSON patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum JsonPatchError {
    #[error("the JSON patch must be a list of operations")]
    NotAList,
    #[error("JSON patch operation {index} is malformed: {why}")]
    Malformed { index: usize, why: &'static str },
    #[error("JSON patch operation {index}: path {path:?} does not exist")]
    Missing { index: usize, path: String },
    #[error("JSON patch operation {index}: test of {path:?} failed")]
    TestFailed { index: usize, path: String },
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(pointer: &str) -> Option<(String, String)> {
    let idx = pointer.rfind('/')?;
    Some((pointer[..idx].to_owned(), unescape(&pointer[idx + 1..])))
}

fn add_at(doc: &mut Value, pointer: &str, value: Value) -> Option<()> {
    if pointer.is_empty() {
        *doc = value;
        return Some(());
    }
    let (parent, last) = split_pointer(pointer)?;
    match doc.pointer_mut(&parent)? {
        Value::Object(map) => {
            map.insert(last, value);
            Some(())
        }
        Value::Array(list) => {
            if last == "-" {
                list.push(value);
            } else {
                let i: usize = last.parse().ok()?;
                if i > list.len() {
                    return None;
                }
                list.insert(i, value);
            }
            Some(())
        }
        _ => None,
    }
}

fn remove_at(doc: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, last) = split_pointer(pointer)?;
    match doc.pointer_mut(&parent)? {
        Value::Object(map) => map.remove(&last),
        Value::Array(list) => {
            let i: usize = last.parse().ok()?;
            (i < list.len()).then(|| list.remove(i))
        }
        _ => None,
    }
}

/// Applies an RFC 6902 JSON patch; on error the document is left unchanged.
pub fn json_patch(doc: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let ops = patch.as_array().ok_or(JsonPatchError::NotAList)?;
    let mut work = doc.clone();
    for (index, op) in ops.iter().enumerate() {
        let malformed = |why| JsonPatchError::Malformed { index, why };
        let kind = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or(malformed("no op"))?;
        let path = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or(malformed("no path"))?;
        let missing = || JsonPatchError::Missing {
            index,
            path: path.to_owned(),
        };
        let value = || op.get("value").cloned().ok_or(malformed("no value"));
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or(malformed("no from"))
        };
        match kind {
            "add" => add_at(&mut work, path, value()?).ok_or_else(missing)?,
            "remove" => {
                remove_at(&mut work, path).ok_or_else(missing)?;
            }
            "replace" => {
                let slot = work.pointer_mut(path).ok_or_else(missing)?;
                *slot = value()?;
            }
            "test" => {
                if work.pointer(path) != Some(&value()?) {
                    return Err(JsonPatchError::TestFailed {
                        index,
                        path: path.to_owned(),
                    });
                }
            }
            "move" => {
                let v = remove_at(&mut work, from()?).ok_or_else(missing)?;
                add_at(&mut work, path, v).ok_or_else(missing)?;
            }
            "copy" => {
                let v = work.pointer(from()?).cloned().ok_or_else(missing)?;
                add_at(&mut work, path, v).ok_or_else(missing)?;
            }
            _ => return Err(malformed("unknown op")),
        }
    }
    *doc = work;
    Ok(())
}

/// Metadata the server owns; never tracked as a manager's field.
fn is_server_field(path: &[String]) -> bool {
    match path {
        [top] => top == "apiVersion" || top == "kind",
        [meta, field, ..] if meta == "metadata" => matches!(
            field.as_str(),
            "name"
                | "namespace"
                | "resourceVersion"
                | "uid"
                | "creationTimestamp"
                | "generation"
                | "managedFields"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "selfLink"
                | "generateName"
        ),
        _ => false,
    }
}

/// Collects the leaf paths of `value` (objects are descended into; everything else, lists
/// included, is a leaf), skipping server-owned metadata.
pub fn leaves(value: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    prefix.push(k.clone());
                    walk(child, prefix, out);
                    prefix.pop();
                }
            }
            _ => {
                if !prefix.is_empty() && !is_server_field(prefix) {
                    out.insert(prefix.clone());
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(value, &mut Vec::new(), &mut out);
    out
}

fn get_path<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| cur.get(seg))
}

fn remove_path(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parent {
        match cur.get_mut(seg) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Some(map) = cur.as_object_mut() {
        map.remove(last);
    }
}

/// Deep-merges an applied intent into an object: objects merge, everything else replaces.
/// Unlike a merge patch, `null` in an intent is a value, not a deletion.
pub fn apply_merge(target: &mut Value, intent: &Value) {
    match (target, intent) {
        (Value::Object(t), Value::Object(i)) => {
            for (k, v) in i {
                match t.get_mut(k) {
                    Some(slot) if slot.is_object() && v.is_object() => apply_merge(slot, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, i) => *t = i.clone(),
    }
}

/// How a manager came to own its fields (server-side apply distinguishes the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

/// Field ownership of one object: which manager owns which leaves.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    managers: BTreeMap<(String, Operation), BTreeSet<FieldPath>>,
}

/// A field that an apply would change but another manager owns.
#[derive(Debug, Clone)]
pub struct FieldConflict {
    pub manager: String,
    pub path: FieldPath,
}

impl Ownership {
    /// Records a non-apply write (PUT, merge/strategic/JSON patch) by `manager`: every leaf it
    /// changed or added becomes its own (taken from everyone else); removed leaves lose all
    /// owners.
    pub fn record_update(&mut self, manager: &str, old: &Value, new: &Value) {
        let before = leaves(old);
        let after = leaves(new);
        let changed: Vec<FieldPath> = after
            .iter()
            .filter(|p| get_path(old, p) != get_path(new, p))
            .cloned()
            .collect();
        for fields in self.managers.values_mut() {
            for p in &changed {
                fields.remove(p);
            }
            for p in before.difference(&after) {
                fields.remove(p);
            }
        }
        if !changed.is_empty() {
            self.managers
                .entry((manager.to_owned(), Operation::Update))
                .or_default()
                .extend(changed);
        }
        self.managers.retain(|_, f| !f.is_empty());
    }

    /// Server-side apply of `intent` by `manager` onto `object`. Without `force`, a leaf whose
    /// value would change and that another manager owns is a conflict and nothing is written.
    /// Leaves the manager applied before but no longer applies are removed unless someone else
    /// owns them.
    pub fn apply(
        &mut self,
        manager: &str,
        object: &mut Value,
        intent: &Value,
        force: bool,
    ) -> Result<(), Vec<FieldConflict>> {
        let wanted = leaves(intent);
        let mut conflicts = Vec::new();
        for path in &wanted {
            let current = get_path(object, path);
            if current.is_none() || current == get_path(intent, path) {
                continue;
            }
            for ((other, _), fields) in &self.managers {
                if other != manager && fields.contains(path) {
                    conflicts.push(FieldConflict {
                        manager: other.clone(),
                        path: path.clone(),
                    });
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return Err(conflicts);
        }
        for ((other, _), fields) in self.managers.iter_mut() {
            if other != manager {
                for c in &conflicts {
                    fields.remove(&c.path);
                }
            }
        }
        let key = (manager.to_owned(), Operation::Apply);
        let previous = self.managers.remove(&key).unwrap_or_default();
        for dropped in previous.difference(&wanted) {
            let owned_elsewhere = self.managers.values().any(|f| f.contains(dropped));
            if !owned_elsewhere {
                remove_path(object, dropped);
            }
        }
        apply_merge(object, intent);
        if !wanted.is_empty() {
            self.managers.insert(key, wanted);
        }
        Ok(())
    }

    /// The managers that currently own at least one field, for tests and diagnostics.
    pub fn managers(&self) -> Vec<(String, Operation)> {
        self.managers.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_removes_nulls_and_merges_objects() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": {"b": null, "d": 3}, "l": [3]}));
        assert_eq!(doc, json!({"a": {"c": 2, "d": 3}, "l": [3]}));
    }

    #[test]
    fn json_patch_ops_and_failed_test_leaves_doc_alone() {
        let mut doc = json!({"metadata": {"finalizers": ["x"]}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["x"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "y"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "add", "path": "/spec", "value": {"a": 1}},
                {"op": "copy", "from": "/spec/a", "path": "/spec/b"},
                {"op": "move", "from": "/spec/a", "path": "/spec/c"},
                {"op": "replace", "path": "/spec/b", "value": 2}
            ]),
        )
        .unwrap();
        assert_eq!(
            doc,
            json!({"metadata": {"finalizers": ["y"]}, "spec": {"b": 2, "c": 1}})
        );
        let before = doc.clone();
        let err = json_patch(
            &mut doc,
            &json!([
                {"op": "replace", "path": "/spec/b", "value": 9},
                {"op": "test", "path": "/spec/c", "value": 5}
            ]),
        );
        assert!(matches!(err, Err(JsonPatchError::TestFailed { .. })));
        assert_eq!(doc, before);
    }

    #[test]
    fn apply_conflicts_with_another_manager_unless_forced() {
        let mut own = Ownership::default();
        let mut obj = json!({"spec": {}});
        own.apply("a", &mut obj, &json!({"spec": {"holder": "a"}}), false)
            .unwrap();
        let err = own
            .apply("b", &mut obj, &json!({"spec": {"holder": "b"}}), false)
            .unwrap_err();
        assert_eq!(err[0].manager, "a");
        assert_eq!(obj["spec"]["holder"], "a");
        // Same value is shared ownership, not a conflict.
        own.apply("b", &mut obj, &json!({"spec": {"holder": "a"}}), false)
            .unwrap();
        own.apply("b", &mut obj, &json!({"spec": {"other": 1}}), true)
            .unwrap();
        // b stopped applying holder, but a still owns it: it stays.
        assert_eq!(obj["spec"]["holder"], "a");
        own.apply("c", &mut obj, &json!({"spec": {"holder": "c"}}), true)
            .unwrap();
        assert_eq!(obj["spec"]["holder"], "c");
    }

    #[test]
    fn apply_removes_fields_the_manager_no_longer_applies() {
        let mut own = Ownership::default();
        let mut obj = json!({});
        own.apply("m", &mut obj, &json!({"data": {"x": "1", "y": "2"}}), false)
            .unwrap();
        own.apply("m", &mut obj, &json!({"data": {"x": "1"}}), false)
            .unwrap();
        assert_eq!(obj, json!({"data": {"x": "1"}}));
    }

    #[test]
    fn update_takes_ownership_and_removal_clears_it() {
        let mut own = Ownership::default();
        let mut obj = json!({});
        own.apply("a", &mut obj, &json!({"spec": {"h": "a"}}), false)
            .unwrap();
        let old = obj.clone();
        merge_patch(&mut obj, &json!({"spec": {"h": null}}));
        own.record_update("a", &old, &obj);
        own.apply("b", &mut obj, &json!({"spec": {"h": "b"}}), false)
            .unwrap();
        assert_eq!(obj["spec"]["h"], "b");
    }
}
