//! Small helpers over `serde_json` objects: `metadata` accessors, timestamps, owner references.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// `metadata` of a serialised object decoded as `M`, without building the rest of the object:
/// the keys before `metadata` are skipped, not decoded, and the keys after it are not read at
/// all (objects are written `apiVersion`, `kind`, `metadata` first, so a launcher pod's spec
/// and status are never scanned); `M` keeps only the few strings it asks for. `None` when the
/// bytes are not a JSON object or their `metadata` does not decode as `M`: callers then decode
/// the whole object as before.
pub(crate) fn read_metadata<'a, M: Deserialize<'a> + Default>(json: &'a [u8]) -> Option<M> {
    use serde::de::{Error, IgnoredAny, MapAccess, Visitor};

    /// Sets the metadata it finds and stops the decoding there with an error.
    struct Top<'o, M>(&'o mut Option<M>);

    impl<'de, M: Deserialize<'de> + Default> Visitor<'de> for Top<'_, M> {
        type Value = ();

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                if key == "metadata" {
                    *self.0 = Some(map.next_value::<Option<M>>()?.unwrap_or_default());
                    return Err(A::Error::custom("the rest of the object is not read"));
                }
                map.next_value::<IgnoredAny>()?;
            }
            *self.0 = Some(M::default());
            Ok(())
        }
    }

    let mut out = None;
    // An error after the metadata was set is the early stop.
    let _ = serde_json::Deserializer::from_slice(json).deserialize_map(Top(&mut out));
    out
}

/// `metadata.labels` of a serialised object ([`read_metadata`]); no labels read as none.
pub(crate) fn read_labels(json: &[u8]) -> Option<BTreeMap<String, String>> {
    #[derive(Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        labels: Option<BTreeMap<String, String>>,
    }
    read_metadata::<Meta>(json).map(|m| m.labels.unwrap_or_default())
}

/// `metadata.finalizers` of a serialised object ([`read_metadata`]).
pub(crate) fn read_finalizers(json: &[u8]) -> Option<Vec<String>> {
    #[derive(Deserialize, Default)]
    struct Meta {
        #[serde(default)]
        finalizers: Option<Vec<String>>,
    }
    read_metadata::<Meta>(json).map(|m| m.finalizers.unwrap_or_default())
}

/// `metadata` of an object, if it is a JSON object.
pub(crate) fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// Mutable `metadata`, created (as `{}`) when missing or not an object.
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let m = obj.as_object_mut().expect("just made an object");
    let entry = m
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut().expect("just made an object")
}

/// A string field of `metadata` (`""` when absent).
pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The string at the JSON `pointer` of `obj` (`""` when absent or not a string).
pub(crate) fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// `metadata.name`.
pub(crate) fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

/// `metadata.namespace`.
pub(crate) fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

/// `metadata.uid`.
pub(crate) fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

/// `metadata.resourceVersion`.
pub(crate) fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion")
}

/// A list field of `metadata` (empty when absent or not a list).
fn meta_list<'a>(obj: &'a Value, field: &str) -> &'a [Value] {
    meta(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    meta_list(obj, "finalizers")
        .iter()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Replace `metadata.finalizers` (removing the key when empty, as the real server's JSON does).
pub(crate) fn set_finalizers(obj: &mut Value, f: &[String]) {
    let m = meta_mut(obj);
    if f.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert(
            "finalizers".into(),
            Value::Array(f.iter().cloned().map(Value::String).collect()),
        );
    }
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn is_deleting(obj: &Value) -> bool {
    meta(obj).is_some_and(|m| m.get("deletionTimestamp").is_some_and(|v| !v.is_null()))
}

/// `metadata.deletionGracePeriodSeconds`.
pub(crate) fn deletion_grace(obj: &Value) -> Option<i64> {
    meta(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
}

/// `metadata.generation` (0 when absent).
pub(crate) fn generation(obj: &Value) -> i64 {
    meta(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// One `metadata.ownerReferences` entry, as the GC reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OwnerRef {
    /// `apiVersion` of the owner.
    pub api_version: String,
    /// `kind` of the owner.
    pub kind: String,
    /// `name` of the owner.
    pub name: String,
    /// `uid` of the owner.
    pub uid: String,
    /// `blockOwnerDeletion`.
    pub block_owner_deletion: bool,
    /// `controller`.
    pub controller: bool,
}

/// Parsed `metadata.ownerReferences` (entries without a uid are skipped).
pub(crate) fn owner_refs(obj: &Value) -> Vec<OwnerRef> {
    meta_list(obj, "ownerReferences")
        .iter()
        .filter_map(|r| {
            let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            let flag = |k: &str| r.get(k).and_then(Value::as_bool).unwrap_or(false);
            let uid = s("uid");
            if uid.is_empty() {
                return None;
            }
            Some(OwnerRef {
                api_version: s("apiVersion"),
                kind: s("kind"),
                name: s("name"),
                uid,
                block_owner_deletion: flag("blockOwnerDeletion"),
                controller: flag("controller"),
            })
        })
        .collect()
}

/// The current time as `metav1.Time` JSON (RFC 3339, seconds precision, `Z`).
pub(crate) fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// What a `pods/binding` does to the pod it binds, as kube-apiserver's `setPodNodeAndMetadata`
/// (Kubernetes v1.36.3 pkg/registry/core/pod/storage/storage.go:245-264): `spec.nodeName` set to
/// `node`, the Binding's `annotations` copied onto the pod's, and the `PodScheduled` condition
/// set to `True` (`UpdatePodCondition`, pkg/api/pod/util.go:287-311: a new condition is
/// appended, an existing one replaced, its `lastTransitionTime` `now` unless its status was
/// already `True`). The caller checks the pod may be bound.
pub(crate) fn bind_pod(pod: &mut Value, node: &str, annotations: Option<&Value>, now: &str) {
    if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("nodeName".into(), Value::String(node.to_string()));
    }
    if let Some(add) = annotations
        .and_then(Value::as_object)
        .filter(|a| !a.is_empty())
    {
        let meta = &mut pod["metadata"];
        if !meta["annotations"].is_object() {
            meta["annotations"] = Value::Object(Default::default());
        }
        if let Some(own) = meta["annotations"].as_object_mut() {
            own.extend(add.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    if !pod["status"].is_object() {
        pod["status"] = Value::Object(Default::default());
    }
    let status = &mut pod["status"];
    if !status["conditions"].is_array() {
        status["conditions"] = Value::Array(Vec::new());
    }
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    let old = conditions.iter().position(|c| c["type"] == "PodScheduled");
    let since = old
        .map(|i| &conditions[i])
        .filter(|c| c["status"] == "True")
        .map_or_else(
            || Value::String(now.to_string()),
            |c| c["lastTransitionTime"].clone(),
        );
    let condition = serde_json::json!({"type": "PodScheduled", "status": "True",
        "lastProbeTime": null, "lastTransitionTime": since});
    match old {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// `now + seconds` as `metav1.Time` JSON.
pub(crate) fn rfc3339_in(seconds: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(seconds))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A copy of `obj` without `metadata` and `status`: what `metadata.generation` tracks.
#[cfg(test)]
pub(crate) fn spec_part(obj: &Value) -> Value {
    match obj {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether the fields of `a` and `b` that `keep` keeps are equal as `Map` equality has it (the
/// same keys, values equal by `eq`, in any order), without copying either.
fn same_fields(
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    keep: impl Fn(&str) -> bool,
    eq: impl Fn(&str, &Value, &Value) -> bool,
) -> bool {
    let kept = |m: &Map<String, Value>| m.keys().filter(|k| keep(k)).count();
    kept(a) == kept(b)
        && a.iter()
            .filter(|(k, _)| keep(k))
            .all(|(k, va)| b.get(k).is_some_and(|vb| eq(k, va, vb)))
}

/// `spec_part(a) == spec_part(b)` without the copies.
pub(crate) fn same_spec_part(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            same_fields(a, b, |k| k != "metadata" && k != "status", |_, x, y| x == y)
        }
        _ => a == b,
    }
}

/// `a` equal to `b` outside `metadata`: what a custom resource without a status
/// subresource tracks in `metadata.generation`.
pub(crate) fn same_ignoring_metadata(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => same_fields(a, b, |k| k != "metadata", |_, x, y| x == y),
        _ => a == b,
    }
}

/// `a` equal to `b` when `metadata.resourceVersion` is ignored (a no-op update). Compares in
/// place: the store calls it under its lock on every update.
pub(crate) fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let same_meta = |x: &Value, y: &Value| match (x.as_object(), y.as_object()) {
        (Some(x), Some(y)) => same_fields(x, y, |k| k != "resourceVersion", |_, p, q| p == q),
        _ => x == y,
    };
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => same_fields(
            a,
            b,
            |_| true,
            |k, x, y| {
                if k == "metadata" {
                    same_meta(x, y)
                } else {
                    x == y
                }
            },
        ),
        _ => a == b,
    }
}

/// Random suffix for `generateName`, from the alphabet of `k8s.io/apimachinery/pkg/util/rand`
/// (`bcdfghjklmnpqrstvwxz2456789`), 5 characters.
pub(crate) fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn metadata_fields_are_read_from_the_bytes_as_from_the_tree() {
        let obj = serde_json::json!({
            "spec": {"finalizers": ["not/these"]},
            "metadata": {"name": "p", "finalizers": ["kubevirt.io/x", "a\"b"], "labels": {"k": "v"}},
        });
        let json = serde_json::to_vec(&obj).unwrap();
        assert_eq!(
            super::read_finalizers(&json).unwrap(),
            super::finalizers(&obj)
        );
        let labels = super::read_labels(&json).unwrap();
        assert_eq!(labels.get("k").map(String::as_str), Some("v"));
        for none in [
            &b"{}"[..],
            br#"{"metadata":null}"#,
            br#"{"metadata":{"finalizers":null}}"#,
        ] {
            assert_eq!(super::read_finalizers(none), Some(Vec::new()));
        }
        assert_eq!(super::read_finalizers(b"not json"), None);
        // What follows the metadata is not read.
        let cut = br#"{"metadata":{"finalizers":["f"]},"spec":{"containers":[{"na"#;
        assert_eq!(super::read_finalizers(cut), Some(vec!["f".into()]));
        assert_eq!(
            super::read_finalizers(br#"{"metadata":{"finalizers":[1]}}"#),
            None
        );
    }

    #[test]
    fn a_binding_sets_the_node_the_annotations_and_pod_scheduled() {
        let mut pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let extra = serde_json::json!({"a": "b"});
        bind_pod(&mut pod, "n1", Some(&extra), "2026-12-06T00:00:01Z");
        assert_eq!(pod["spec"]["nodeName"], "n1");
        assert_eq!(pod["metadata"]["annotations"]["a"], "b");
        let scheduled = serde_json::json!({"type": "PodScheduled", "status": "True",
            "lastProbeTime": null, "lastTransitionTime": "2026-12-06T00:00:01Z"});
        assert_eq!(pod["status"]["conditions"][1], scheduled);
        // Already True: replaced, its transition time kept.
        bind_pod(&mut pod, "n2", None, "2026-12-06T00:00:09Z");
        assert_eq!(pod["status"]["conditions"][1], scheduled);
        assert_eq!(
            pod["status"]["conditions"].as_array().map(Vec::len),
            Some(2)
        );
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn accessors() {
        let mut o = json!({"metadata": {"name": "a", "finalizers": ["x", "y"], "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "blockOwnerDeletion": true},
            {"apiVersion": "v1", "kind": "Pod", "name": "q"}
        ]}});
        assert_eq!(name(&o), "a");
        assert_eq!(finalizers(&o), vec!["x", "y"]);
        let refs = owner_refs(&o);
        assert_eq!(refs.len(), 1);
        assert!(refs[0].block_owner_deletion);
        set_finalizers(&mut o, &[]);
        assert!(o["metadata"].get("finalizers").is_none());
        assert!(!is_deleting(&o));
    }

    #[test]
    fn suffix_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    }

    #[test]
    fn spec_part_drops_meta_and_status() {
        let o = json!({"metadata": {"a": 1}, "spec": {"x": 1}, "status": {"y": 2}});
        assert_eq!(spec_part(&o), json!({"spec": {"x": 1}}));
    }

    #[test]
    fn in_place_comparisons_agree_with_comparing_copies() {
        let strip_rv = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            v
        };
        let base = json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}},
                          "spec": {"x": 1}, "status": {"y": 2}});
        let variants = [
            base.clone(),
            json!({"metadata": {"resourceVersion": "6", "labels": {"x": "1"}, "name": "a"},
                   "status": {"y": 2}, "spec": {"x": 1}}),
            json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "2"}},
                   "spec": {"x": 1}, "status": {"y": 2}}),
            json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}},
                   "spec": {"x": 1}, "status": {"y": 3}}),
            json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}},
                   "spec": {"x": 2}, "status": {"y": 2}}),
            json!({"metadata": {"name": "a", "resourceVersion": "5", "labels": {"x": "1"}},
                   "spec": {"x": 1}}),
            json!({"metadata": "odd", "spec": {"x": 1}}),
            json!({"spec": {"x": 1}, "status": {"y": 2}}),
            json!({"spec": {"x": 1}, "status": {"y": 2}, "extra": null}),
            json!([1, 2]),
            json!(null),
        ];
        for a in &variants {
            for b in &variants {
                assert_eq!(
                    same_ignoring_rv(a, b),
                    strip_rv(a) == strip_rv(b),
                    "same_ignoring_rv({a}, {b})"
                );
                assert_eq!(
                    same_spec_part(a, b),
                    spec_part(a) == spec_part(b),
                    "same_spec_part({a}, {b})"
                );
            }
        }
        assert!(same_ignoring_rv(&variants[0], &variants[1]));
        assert!(!same_ignoring_rv(&variants[0], &variants[3]));
        assert!(same_spec_part(&variants[0], &variants[4]));
        assert!(!same_spec_part(&variants[0], &variants[5]));
    }
}
