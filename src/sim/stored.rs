//! One stored object version in its serialised form.
//!
//! The store keeps every object (and every version its watch history still holds) as the JSON
//! bytes a response carries, not as a `serde_json::Value` tree: a tree of a virt-launcher Pod
//! takes several times its JSON's size (a heap allocation per string, map and array). A version
//! is serialised once when it is committed; watch streams and GETs send those bytes or decode
//! them on demand. This is what etcd holds for the real API server too (the serialised object
//! under its key, `k8s.io/apiserver/pkg/storage/etcd3/store.go`), and the watch cache sends one
//! serialisation of an event to every watcher (`cachingObject` in
//! `k8s.io/apiserver/pkg/storage/cacher/caching_object.go`).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::object;

/// One immutable object version: its JSON and the few metadata facts the store asks about
/// without decoding it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stored {
    json: Box<[u8]>,
    /// `metadata.resourceVersion` (0 when absent or not a number).
    rv: u64,
    /// `metadata.deletionTimestamp` is set.
    deleting: bool,
}

impl Stored {
    /// Serialise `obj`.
    pub(crate) fn encode(obj: &Value) -> Arc<Stored> {
        // A `Value` always serialises (its map keys are strings); an empty body would only
        // decode to `null`, never panic.
        let json = serde_json::to_vec(obj)
            .unwrap_or_default()
            .into_boxed_slice();
        Arc::new(Stored {
            json,
            rv: object::resource_version(obj).parse().unwrap_or(0),
            deleting: object::is_deleting(obj),
        })
    }

    /// The serialised object.
    pub(crate) fn json(&self) -> &[u8] {
        &self.json
    }

    /// The object as a tree (`null` if the bytes were not JSON, which `encode` never writes).
    /// The crate's `serde_json` has `float_roundtrip` and `preserve_order`, so the tree equals
    /// the one encoded, numbers and key order included.
    pub(crate) fn decode(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// `metadata.labels`, read from the bytes without building the object
    /// ([`object::read_labels`]): a watch with a label selector reads every event's labels (and
    /// the previous version's), and building a launcher pod's tree for that was a tenth of the
    /// embedded cluster's CPU in a 10,000-VM start. `None` when the labels do not read as a map
    /// of strings (the caller then decodes the object and matches as before).
    pub(crate) fn labels(&self) -> Option<BTreeMap<String, String>> {
        object::read_labels(&self.json)
    }

    /// `metadata.resourceVersion` as a number (0 when absent).
    pub(crate) fn rv(&self) -> u64 {
        self.rv
    }

    /// Whether `metadata.deletionTimestamp` is set.
    pub(crate) fn is_deleting(&self) -> bool {
        self.deleting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_the_tree_exactly() {
        let v = json!({
            "metadata": {"name": "a", "labels": {"z": "1", "a": "2"}},
            "spec": {"f": 0.1, "big": u64::MAX, "neg": -3, "n": null, "list": [1, "x", {}]},
        });
        let s = Stored::encode(&v);
        assert_eq!(s.decode(), v);
        // Key order as encoded (preserve_order), not sorted.
        assert!(
            std::str::from_utf8(s.json())
                .unwrap()
                .contains(r#"{"z":"1","a":"2"}"#)
        );
        assert!(!s.is_deleting());
        assert_eq!(s.rv(), 0);
        let s = Stored::encode(&json!({"metadata": {"resourceVersion": "42"}}));
        assert_eq!(s.rv(), 42);
    }

    #[test]
    fn knows_a_deleting_object() {
        let v = json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z"}});
        assert!(Stored::encode(&v).is_deleting());
        let v = json!({"metadata": {"name": "a", "deletionTimestamp": null}});
        assert!(!Stored::encode(&v).is_deleting());
    }

    #[test]
    fn reads_the_labels_without_the_object() {
        let v = json!({
            "metadata": {"name": "a", "labels": {"kubevirt.io": "virt-launcher", "q": "a\"b"}},
            "spec": {"containers": [{"name": "c", "labels": {"x": "y"}}]},
        });
        let stored = Stored::encode(&v);
        let labels = stored.labels().unwrap();
        assert_eq!(labels.len(), 2);
        assert_eq!(
            labels.get("kubevirt.io").map(String::as_str),
            Some("virt-launcher")
        );
        assert_eq!(labels.get("q").map(String::as_str), Some("a\"b"));
        for v in [
            json!({"metadata": {"name": "a"}}),
            json!({"metadata": {"labels": null}}),
            json!({}),
        ] {
            assert_eq!(Stored::encode(&v).labels(), Some(BTreeMap::new()), "{v}");
        }
        // A label that is not a string: the caller decodes the object instead.
        assert_eq!(
            Stored::encode(&json!({"metadata": {"labels": {"a": 1}}})).labels(),
            None
        );
    }

    #[test]
    fn keeps_only_the_bytes() {
        let v = json!({"metadata": {"name": "a"}, "spec": {"containers": [{"name": "c"}]}});
        let s = Stored::encode(&v);
        assert_eq!(s.json(), serde_json::to_vec(&v).unwrap().as_slice());
    }
}
