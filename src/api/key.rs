//! The object key, `namespace/name` — the one definition the work queues, expectations,
//! informer handlers, controllers and tools share (client-go `cache.MetaNamespaceKeyFunc` and
//! `cache.SplitMetaNamespaceKey`, k8s.io/client-go/tools/cache/store.go), and the controller
//! owner reference that ties an object to the controller that owns it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use std::fmt;

/// A namespace and a name. Displays as `namespace/name`, or just `name` when the namespace is
/// empty (a cluster-scoped object), like `MetaNamespaceKeyFunc`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectKey {
    /// `metadata.namespace`; empty for cluster-scoped objects.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// The key of `name` in `namespace` (`None` or `""` for cluster-scoped).
    pub(crate) fn new(namespace: Option<&str>, name: &str) -> Self {
        ObjectKey {
            namespace: namespace.unwrap_or_default().to_string(),
            name: name.to_string(),
        }
    }

    /// The key of an object's metadata.
    pub(crate) fn of_meta(meta: &ObjectMeta) -> Self {
        ObjectKey::new(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or(""),
        )
    }

    /// The key of an object.
    pub(crate) fn of<K: Resource>(obj: &K) -> Self {
        ObjectKey::of_meta(obj.meta())
    }

    /// `SplitMetaNamespaceKey`: `ns/name` → (`ns`, `name`); a key without `/` is a
    /// cluster-scoped name.
    #[cfg(test)]
    pub(crate) fn parse(key: &str) -> Self {
        let (namespace, name) = split_key(key);
        ObjectKey {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// `metav1.GetControllerOf` (apimachinery pkg/apis/meta/v1/controller_ref.go): the owner
/// reference with `controller: true`.
pub(crate) fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// `MetaNamespaceKeyFunc` as a string: `namespace/name`, or `name` without a namespace.
pub fn key_of<K: Resource>(obj: &K) -> String {
    meta_key(obj.meta())
}

/// `MetaNamespaceKeyFunc` on metadata.
pub fn meta_key(meta: &ObjectMeta) -> String {
    join_key(
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or(""),
    )
}

/// The key of `name` in `namespace` (`None` or `""` for cluster-scoped), as [`ObjectKey`]
/// displays it, in one allocation of the exact size (client-go's `ObjectName.String`, one Go
/// string concatenation). The informer handlers build a key per event with it: going through
/// an `ObjectKey` cost three allocations and the formatter.
pub(crate) fn join_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => {
            let mut key = String::with_capacity(ns.len() + 1 + name.len());
            key.push_str(ns);
            key.push('/');
            key.push_str(name);
            key
        }
        _ => name.to_owned(),
    }
}

/// `SplitMetaNamespaceKey` without allocating: (`namespace`, `name`), namespace empty when the
/// key has no `/`.
pub(crate) fn split_key(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let k = ObjectKey::new(Some("ns"), "a");
        assert_eq!(k.to_string(), "ns/a");
        assert_eq!(ObjectKey::parse("ns/a"), k);
        assert_eq!(ObjectKey::new(None, "node1").to_string(), "node1");
        assert_eq!(ObjectKey::new(Some(""), "node1").to_string(), "node1");
        assert_eq!(ObjectKey::parse("node1"), ObjectKey::new(None, "node1"));
        assert_eq!(split_key("ns/a/b"), ("ns", "a/b"));
    }

    #[test]
    fn key_of_object_metadata() {
        let mut meta = ObjectMeta {
            name: Some("p".into()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        assert_eq!(meta_key(&meta), "default/p");
        let pod = k8s_openapi::api::core::v1::Pod {
            metadata: meta.clone(),
            ..Default::default()
        };
        assert_eq!(key_of(&pod), "default/p");
        meta.namespace = None;
        assert_eq!(meta_key(&meta), "p");
    }

    #[test]
    fn join_key_is_the_object_key_displayed() {
        for (ns, name) in [
            (Some("ns-1"), "vm-1"),
            (Some(""), "node1"),
            (None, "node1"),
            (Some("a"), ""),
        ] {
            let key = join_key(ns, name);
            assert_eq!(key, ObjectKey::new(ns, name).to_string());
            assert_eq!(
                key.capacity(),
                key.len(),
                "{key}: one allocation of the exact size"
            );
        }
    }
}
