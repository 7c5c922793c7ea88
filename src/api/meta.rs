//! A VM's and a VMI's own `metadata` in the layout the caches keep: labels and annotations as
//! [`SmallMap`]s beside an `ObjectMeta` that has neither.
//!
//! k8s-openapi's `ObjectMeta` holds each map as a `BTreeMap`, which allocates an eleven-slot
//! node (544 bytes, a 640-byte jemalloc class) for its first entry; every cached VM and VMI has
//! both (docs/performance.md "Bytes per cached VM").

use super::common::{MetaMaps, ObjectMaps, SmallMap};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `metadata` (`metav1.ObjectMeta`) of a VM or VMI. `labels` and `annotations` are fields of
/// their own, so `vm.metadata.labels` reads them; every other field is read and written through
/// `Deref` to an `ObjectMeta` whose `labels` and `annotations` are always `None`
/// ([`kube::Resource::meta`] returns that one: read the maps from the fields, not from it).
/// Serde is `ObjectMeta`'s: the same fields, in the same order, accepted and refused alike.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Meta {
    pub labels: Option<SmallMap<String>>,
    pub annotations: Option<SmallMap<String>>,
    /// The other fields; `labels` and `annotations` unset.
    rest: ObjectMeta,
}

impl ObjectMaps for Meta {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation_value(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

impl From<ObjectMeta> for Meta {
    fn from(mut rest: ObjectMeta) -> Self {
        let MetaMaps {
            labels,
            annotations,
        } = MetaMaps::take_from(&mut rest);
        Meta {
            labels,
            annotations,
            rest,
        }
    }
}

impl std::ops::Deref for Meta {
    type Target = ObjectMeta;

    fn deref(&self) -> &ObjectMeta {
        &self.rest
    }
}

/// Set `labels` and `annotations` on the fields of [`Meta`], not through this: a map written
/// here is read by nothing but serde (which writes it when the field is unset, so it is not lost).
/// Only the `kube::Resource::meta_mut` of the VM and VMI hands it out, and nothing here sets a
/// map through it.
impl std::ops::DerefMut for Meta {
    fn deref_mut(&mut self) -> &mut ObjectMeta {
        &mut self.rest
    }
}

/// Written as `ObjectMeta` writes itself (k8s-openapi's field order, absent fields left out),
/// without copying it.
impl Serialize for Meta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let r = &self.rest;
        debug_assert!(
            r.labels.is_none() && r.annotations.is_none(),
            "labels or annotations set through Meta's DerefMut"
        );
        let present = [
            self.annotations.is_some() || r.annotations.is_some(),
            r.creation_timestamp.is_some(),
            r.deletion_grace_period_seconds.is_some(),
            r.deletion_timestamp.is_some(),
            r.finalizers.is_some(),
            r.generate_name.is_some(),
            r.generation.is_some(),
            self.labels.is_some() || r.labels.is_some(),
            r.managed_fields.is_some(),
            r.name.is_some(),
            r.namespace.is_some(),
            r.owner_references.is_some(),
            r.resource_version.is_some(),
            r.self_link.is_some(),
            r.uid.is_some(),
        ];
        let mut s =
            serializer.serialize_struct("ObjectMeta", present.iter().filter(|p| **p).count())?;
        if self.annotations.is_some() {
            field(&mut s, "annotations", &self.annotations)?;
        } else {
            field(&mut s, "annotations", &r.annotations)?;
        }
        field(&mut s, "creationTimestamp", &r.creation_timestamp)?;
        field(
            &mut s,
            "deletionGracePeriodSeconds",
            &r.deletion_grace_period_seconds,
        )?;
        field(&mut s, "deletionTimestamp", &r.deletion_timestamp)?;
        field(&mut s, "finalizers", &r.finalizers)?;
        field(&mut s, "generateName", &r.generate_name)?;
        field(&mut s, "generation", &r.generation)?;
        if self.labels.is_some() {
            field(&mut s, "labels", &self.labels)?;
        } else {
            field(&mut s, "labels", &r.labels)?;
        }
        field(&mut s, "managedFields", &r.managed_fields)?;
        field(&mut s, "name", &r.name)?;
        field(&mut s, "namespace", &r.namespace)?;
        field(&mut s, "ownerReferences", &r.owner_references)?;
        field(&mut s, "resourceVersion", &r.resource_version)?;
        field(&mut s, "selfLink", &r.self_link)?;
        field(&mut s, "uid", &r.uid)?;
        s.end()
    }
}

fn field<S: SerializeStruct, T: Serialize>(
    s: &mut S,
    name: &'static str,
    value: &Option<T>,
) -> Result<(), S::Error> {
    match value {
        Some(value) => s.serialize_field(name, value),
        None => Ok(()),
    }
}

/// Read as an `ObjectMeta` is, so what it accepts, rejects and ignores is unchanged.
impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(Meta::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Every `ObjectMeta` field set, as kube-apiserver serves a VMI's.
    fn served() -> serde_json::Value {
        json!({
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1", "a": ""},
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "deletionGracePeriodSeconds": 30,
            "deletionTimestamp": "2026-12-07T10:05:00Z",
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "generateName": "demo-",
            "generation": 3,
            "labels": {"kubevirt.io/nodeName": "node-1", "app": "demo"},
            "managedFields": [{"manager": "virt-controller", "operation": "Update"}],
            "name": "demo",
            "namespace": "default",
            "ownerReferences": [{
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "demo",
                "uid": "u-1", "controller": true, "blockOwnerDeletion": true
            }],
            "resourceVersion": "42",
            "selfLink": "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/demo",
            "uid": "u-2"
        })
    }

    #[test]
    fn reads_and_writes_as_object_meta_does() {
        for value in [served(), json!({}), json!({"name": "a", "labels": {}})] {
            let as_meta: ObjectMeta = serde_json::from_value(value.clone()).unwrap();
            let ours: Meta = serde_json::from_value(value.clone()).unwrap();
            let written = serde_json::to_value(&ours).unwrap();
            let reread: ObjectMeta = serde_json::from_value(written).unwrap();
            assert_eq!(reread, as_meta, "{value}");
            assert_eq!(
                serde_json::to_string(&ours).unwrap(),
                serde_json::to_string(&as_meta).unwrap(),
                "the same fields, in the same order: {value}"
            );
            assert_eq!(Meta::from(as_meta), ours);
        }
    }

    #[test]
    fn the_maps_are_fields_and_the_rest_reads_through() {
        let ours: Meta = serde_json::from_value(served()).unwrap();
        assert_eq!(ours.label_value("kubevirt.io/nodeName"), Some("node-1"));
        assert_eq!(ours.annotation_value("a"), Some(""));
        assert_eq!(ours.label_value("absent"), None);
        assert_eq!(ours.name.as_deref(), Some("demo"));
        assert_eq!(ours.generation, Some(3));
        let inner: &ObjectMeta = &ours;
        assert_eq!((&inner.labels, &inner.annotations), (&None, &None));
        // The crate's helpers read the fields, not the `ObjectMeta` it derefs to.
        assert_eq!(crate::api::label(&ours, "app"), Some("demo"));
        assert_eq!(crate::api::annotation(&ours, "a"), Some(""));
        // An empty map stays present, as in `ObjectMeta`.
        let empty: Meta = serde_json::from_value(json!({"labels": {}})).unwrap();
        assert_eq!(empty.labels.as_ref().map(|l| l.len()), Some(0));
    }

    /// A map set on the inner `ObjectMeta` (through `DerefMut`, as `kube::Resource::meta_mut`
    /// hands it out) is a bug debug builds stop at; a release build writes it, not drops it.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "labels or annotations set through Meta's DerefMut")
    )]
    fn a_map_set_through_the_inner_object_meta_is_written() {
        let mut ours = Meta::default();
        let inner: &mut ObjectMeta = &mut ours;
        inner.labels = Some([("a".to_string(), "1".to_string())].into());
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            json!({"labels": {"a": "1"}})
        );
    }

    #[test]
    fn a_bad_map_is_refused_as_object_meta_refuses_it() {
        let err = serde_json::from_value::<Meta>(json!({"annotations": {"a": 1}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid type"), "{err}");
    }
}
