//! Label and field selectors, parsed the way the API server parses them.
//!
//! Only the subset controllers actually send is supported: `k=v`, `k==v`, `k!=v`,
//! `k in (a,b)`, `k notin (a,b)`, `k` (exists) and `!k` (does not exist) for labels, and
//! `path=v` / `path!=v` over dotted JSON paths (`metadata.name`, `spec.nodeName`) for fields.

use serde_json::Value;

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// A selector string the double could not parse; answered with 400 Bad Request.
#[derive(Debug, thiserror::Error)]
#[error("unable to parse selector {selector:?}: {why}")]
pub struct SelectorError {
    selector: String,
    why: &'static str,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_set(selector: &str, rest: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or(SelectorError {
            selector: selector.to_owned(),
            why: "a set must be written as (a,b,...)",
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `labelSelector` as sent in a list or watch query.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in split_top_level(selector) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let err = |why| SelectorError {
                selector: selector.to_owned(),
                why,
            };
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::DoesNotExist(key.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                Requirement::NotIn(k.trim().to_owned(), parse_set(selector, rest)?)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                Requirement::In(k.trim().to_owned(), parse_set(selector, rest)?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(err("expected =, ==, !=, in, notin, a key or !key"));
            } else {
                Requirement::Exists(part.to_owned())
            };
            requirements.push(req);
        }
        Ok(Self { requirements })
    }

    /// Whether the object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path!=value` terms over dotted JSON paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(Vec<String>, bool, String)>,
}

impl FieldSelector {
    /// Parses `fieldSelector` as sent in a list or watch query.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for part in selector.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (path, equal, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(SelectorError {
                    selector: selector.to_owned(),
                    why: "a field selector term must be path=value or path!=value",
                });
            };
            let path = path.trim().split('.').map(str::to_owned).collect();
            terms.push((path, equal, value.trim().to_owned()));
        }
        Ok(Self { terms })
    }

    /// Whether the object satisfies every term (a missing field reads as the empty string).
    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(path, equal, value)| {
            let mut cur = Some(object);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let actual = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "labels": labels}})
    }

    #[test]
    fn label_requirements() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(!m("app!=web"));
        assert!(m("app in (db, web)"));
        assert!(!m("app notin (web)"));
        assert!(m("tier in (front),app notin (db)"));
        assert!(!m("missing"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("missing!=x"));
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_terms() {
        let o = json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"replicas": 3}});
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(!m("metadata.name=b"));
        assert!(m("metadata.name!=b,metadata.namespace=ns"));
        assert!(m("spec.replicas=3"));
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
