//! What the informers and the typed write answers decode: an object without its
//! `metadata.managedFields`, skipped while the JSON is read instead of built and then dropped.
//!
//! On kube-apiserver every object carries `managedFields`: one entry per field manager and
//! operation, each with a `fieldsV1` tree naming every field that manager set, often larger than
//! the object itself. Decoded whole, k8s-openapi builds each `fieldsV1` into a
//! `serde_json::Value` (a map per level, each key hashed and allocated) that the caches drop
//! ([`super::informer::strip_for_cache`]) and no controller decision reads: for a launcher pod's
//! watch line that was 71 µs of decoding against 20 µs without it (docs/performance.md,
//! "Decoding without managedFields"). client-go's informers decode it whole (a `TransformFunc`
//! can only drop it after); KubeVirt v1.9's informers keep it.
//!
//! [`WithoutManagedFields<W>`] decodes like `W` except that the value of the top-level
//! `metadata`'s `managedFields` key is skipped unread (serde's `IgnoredAny`: the JSON is still
//! checked as JSON). Any other `managedFields` key (in a template's metadata, in an unmodelled
//! field) is kept: only the object's own bookkeeping goes. It is a [`kube::Resource`] of the same
//! API as `W`, so `Api<WithoutManagedFields<W>>` lists and watches what `Api<W>` does.

use kube::Resource;
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;

/// The key skipped inside the top-level `metadata`.
const MANAGED_FIELDS: &str = "managedFields";
/// The top-level key whose value is read without [`MANAGED_FIELDS`].
const METADATA: &str = "metadata";

/// `W`, decoded without its `metadata.managedFields` (module docs). Encodes as `W`.
#[derive(Debug, Clone, PartialEq)]
pub struct WithoutManagedFields<W>(pub W);

impl<W> WithoutManagedFields<W> {
    /// The object decoded.
    pub fn into_inner(self) -> W {
        self.0
    }
}

impl<'de, W: Deserialize<'de>> Deserialize<'de> for WithoutManagedFields<W> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        W::deserialize(Filtered {
            inner: d,
            level: Level::Object,
        })
        .map(WithoutManagedFields)
    }
}

impl<W: Serialize> Serialize for WithoutManagedFields<W> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// The same API as `W` (kind, group, version, plural), so that the URL paths are `W`'s. The
/// scope is dynamic so that [`lean_api`] can make an `Api` of either scope.
impl<W: Resource> Resource for WithoutManagedFields<W> {
    type DynamicType = W::DynamicType;
    type Scope = kube::core::DynamicResourceScope;
    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        W::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        W::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        W::version(dt)
    }
    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        W::api_version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        W::plural(dt)
    }
    fn url_path(dt: &Self::DynamicType, namespace: Option<&str>) -> String {
        W::url_path(dt, namespace)
    }
    fn metadata_api() -> bool {
        W::metadata_api()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        self.0.meta_mut()
    }
}

/// `api` (its client, namespace or all namespaces) reading objects without `managedFields`.
pub(crate) fn lean_api<W>(api: kube::Api<W>) -> kube::Api<WithoutManagedFields<W>>
where
    W: Resource,
    W::DynamicType: Default,
{
    let namespace = api.namespace().map(str::to_owned);
    let client = api.into_client();
    let dt = W::DynamicType::default();
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client, &ns, &dt),
        None => kube::Api::all_with(client, &dt),
    }
}

/// Which map the filter is reading: the object (whose `metadata` value is read as
/// [`Level::Metadata`]) or its metadata (whose `managedFields` is skipped).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Object,
    Metadata,
}

/// `Deserializer` methods passed to the inner deserializer with the caller's visitor as is.
macro_rules! unfiltered {
    ($($method:ident)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method(visitor)
            }
        )*
    };
}

/// A deserializer handing its visitor's map through [`FilteredMap`]; anything else as is.
struct Filtered<D> {
    inner: D,
    level: Level,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filtered<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner
            .deserialize_any(FilteredVisitor { visitor, level })
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner
            .deserialize_map(FilteredVisitor { visitor, level })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner
            .deserialize_struct(name, fields, FilteredVisitor { visitor, level })
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner
            .deserialize_option(FilteredVisitor { visitor, level })
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.inner
            .deserialize_newtype_struct(name, FilteredVisitor { visitor, level })
    }

    // The rest read no map of the object's: passed to the inner deserializer unfiltered.
    unfiltered! {
        deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64
        deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char deserialize_str
        deserialize_string deserialize_bytes deserialize_byte_buf deserialize_unit
        deserialize_seq deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner.deserialize_enum(name, variants, visitor)
    }
}

/// The caller's visitor, given a [`FilteredMap`] for a map; every other form passed on as
/// read, so that errors and non-map forms read as they would without the filter.
struct FilteredVisitor<V> {
    visitor: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilteredVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(FilteredMap {
            inner: map,
            level: self.level,
            value_is_metadata: false,
        })
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Filtered {
            inner: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Filtered {
            inner: d,
            level: self.level,
        })
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.visitor.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.visitor.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.visitor.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.visitor.visit_f64(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.visitor.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.visitor.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.visitor.visit_string(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(seq)
    }
}

/// A map read key by key: at [`Level::Metadata`] a `managedFields` entry is skipped; at
/// [`Level::Object`] the `metadata` value is read through [`Filtered`] at the metadata level.
struct FilteredMap<A> {
    inner: A,
    level: Level,
    /// The key just handed out was the object's `metadata`.
    value_is_metadata: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilteredMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.inner.next_key::<Key<'de>>()? else {
                return Ok(None);
            };
            let name = key.as_str();
            if self.level == Level::Metadata && name == MANAGED_FIELDS {
                self.inner.next_value::<IgnoredAny>()?;
                continue;
            }
            self.value_is_metadata = self.level == Level::Object && name == METADATA;
            return match key {
                Key::Borrowed(s) => seed
                    .deserialize(de::value::BorrowedStrDeserializer::new(s))
                    .map(Some),
                Key::Owned(s) => seed.deserialize(s.into_deserializer()).map(Some),
            };
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.value_is_metadata) {
            self.inner.next_value_seed(MetadataSeed(seed))
        } else {
            self.inner.next_value_seed(seed)
        }
    }
}

/// The caller's seed for the `metadata` value, reading it without `managedFields`.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Filtered {
            inner: d,
            level: Level::Metadata,
        })
    }
}

/// A map key, borrowed from the input when it has no escapes (`serde_json::from_str` and
/// `from_slice`, how kube decodes), else owned.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachine;
    use crate::api::vm::TemplateMeta;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ObjectList;
    use kube::core::WatchEvent;
    use serde_json::json;

    /// A VM as kube-apiserver sends it: two managers' `managedFields`, a template whose
    /// metadata has a `managedFields` key of its own, an unmodelled field named alike.
    fn served_vm() -> serde_json::Value {
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine",
            "metadata": {
                "name": "vm",
                "namespace": "default",
                "uid": "u1",
                "resourceVersion": "7",
                "labels": {"app": "a"},
                "managedFields": [
                    {"manager": "kubectl", "operation": "Update", "apiVersion": "kubevirt.io/v1",
                     "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:spec": {"f:runStrategy": {}, "f:template": {".": {}}}}},
                    {"manager": "virt-controller", "operation": "Update", "subresource": "status",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:ready": {}}}}
                ],
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalizer"]
            },
            "spec": {
                "runStrategy": "Always",
                "template": {
                    "metadata": {"labels": {"k": "v"}, "managedFields": [{"manager": "kept"}]},
                    "spec": {"domain": {"devices": {}}}
                },
                "managedFields": "an unmodelled field, kept"
            },
            "status": {"ready": true}
        })
    }

    fn without_managed_fields(mut v: serde_json::Value) -> serde_json::Value {
        v["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove(MANAGED_FIELDS);
        v
    }

    #[test]
    fn decodes_as_the_object_without_its_own_managed_fields_and_keeps_the_rest() {
        let text = served_vm().to_string();
        let lean: WithoutManagedFields<VirtualMachine> =
            serde_json::from_str(&text).expect("decodes");
        let whole: VirtualMachine =
            serde_json::from_value(without_managed_fields(served_vm())).expect("decodes");
        assert_eq!(lean.0, whole);
        assert_eq!(lean.0.metadata.managed_fields, None);
        let template_meta = lean
            .0
            .spec
            .template
            .as_ref()
            .and_then(|t| t.metadata.as_ref())
            .and_then(TemplateMeta::rest);
        assert_eq!(
            template_meta
                .and_then(|m| m.managed_fields.as_ref())
                .map(Vec::len),
            Some(1),
            "a template's own managedFields is not the object's bookkeeping"
        );
        assert_eq!(
            serde_json::to_value(&lean).expect("encodes"),
            without_managed_fields(served_vm()),
            "nothing else is lost"
        );
    }

    #[test]
    fn the_skipped_value_is_not_decoded_only_checked_as_json() {
        // Not a list of entries: decoding it would fail; skipped, it does not.
        let mut vm = served_vm();
        vm["metadata"][MANAGED_FIELDS] = json!({"not": ["a list of entries"]});
        let text = vm.to_string();
        assert!(serde_json::from_str::<VirtualMachine>(&text).is_err());
        let lean: WithoutManagedFields<VirtualMachine> =
            serde_json::from_str(&text).expect("skipped unread");
        assert_eq!(lean.0.metadata.name.as_deref(), Some("vm"));
        let broken = text.replace("\"not\":[", "\"not\":[,");
        assert!(serde_json::from_str::<WithoutManagedFields<VirtualMachine>>(&broken).is_err());
    }

    #[test]
    fn escaped_keys_are_read_by_their_value() {
        let text = served_vm()
            .to_string()
            .replace("\"metadata\":{\"name\"", "\"meta\\u0064ata\":{\"name\"")
            .replace(
                "\"managedFields\":[{\"manager\":\"kubectl\"",
                "\"managed\\u0046ields\":[{\"manager\":\"kubectl\"",
            );
        assert!(text.contains("\\u0046"), "the test input has escaped keys");
        let lean: WithoutManagedFields<VirtualMachine> =
            serde_json::from_str(&text).expect("decodes");
        assert_eq!(lean.0.metadata.name.as_deref(), Some("vm"));
        assert_eq!(lean.0.metadata.managed_fields, None);
    }

    #[test]
    fn watch_events_and_lists_decode_each_object_without_it() {
        let event = json!({"type": "MODIFIED", "object": served_vm()}).to_string();
        match serde_json::from_str::<WatchEvent<WithoutManagedFields<VirtualMachine>>>(&event) {
            Ok(WatchEvent::Modified(vm)) => {
                assert_eq!(vm.0.metadata.managed_fields, None);
                assert_eq!(vm.0.metadata.resource_version.as_deref(), Some("7"));
            }
            other => panic!("expected MODIFIED, got {other:?}"),
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "managedFields": [{"manager": "kubelet",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
            "spec": {"containers": [{"name": "compute", "image": "i"}]}
        });
        let list = json!({"apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": "9"}, "items": [pod.clone(), pod]});
        let list: ObjectList<WithoutManagedFields<Pod>> =
            serde_json::from_str(&list.to_string()).expect("decodes");
        assert_eq!(list.items.len(), 2);
        for p in &list.items {
            assert_eq!(p.0.metadata.managed_fields, None);
            assert_eq!(p.0.spec.as_ref().map(|s| s.containers.len()), Some(1));
        }
    }

    #[test]
    fn bad_input_fails_with_the_same_error_as_without_the_filter() {
        for text in [
            r#"{"metadata": 5, "spec": {}}"#,
            r#"{"metadata": {"name": 3}, "spec": {}}"#,
            r#"{"metadata": {"name": "a"}}"#,
            r#"[1, 2]"#,
            r#"{"metadata": {"name": "a"}, "spec": {"runStrategy": 1}}"#,
        ] {
            let plain = serde_json::from_str::<VirtualMachine>(text).expect_err(text);
            let lean =
                serde_json::from_str::<WithoutManagedFields<VirtualMachine>>(text).expect_err(text);
            assert_eq!(lean.to_string(), plain.to_string(), "{text}");
        }
    }

    #[tokio::test]
    async fn its_api_has_the_namespace_or_all_of_the_api_it_reads_for() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("URL"));
        let client = kube::Client::try_from(config).expect("client");
        let ns = lean_api(kube::Api::<Pod>::namespaced(client.clone(), "ns"));
        assert_eq!(ns.namespace(), Some("ns"));
        assert_eq!(ns.resource_url(), "/api/v1/namespaces/ns/pods");
        let all = lean_api(kube::Api::<VirtualMachine>::all(client));
        assert_eq!(all.namespace(), None);
        assert_eq!(all.resource_url(), "/apis/kubevirt.io/v1/virtualmachines");
    }

    #[test]
    fn it_lists_and_watches_the_same_api() {
        type Lean = WithoutManagedFields<Pod>;
        assert_eq!(Lean::kind(&()), "Pod");
        assert_eq!(Lean::api_version(&()), "v1");
        assert_eq!(
            Lean::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        let vm = WithoutManagedFields::<VirtualMachine>::url_path(&(), None);
        assert_eq!(vm, VirtualMachine::url_path(&(), None));
    }
}
