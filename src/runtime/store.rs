//! The informer cache: objects by [`ObjectRef`], each held once as an `Arc` that the cache and
//! the notifications handed to event handlers share (client-go `cache.Indexer`'s `threadSafeMap`
//! stores the pointer the `DeltaFIFO` pops, and handlers receive the same pointer).
//!
//! Why not kube's `reflector::Store`: its `Writer::apply_watcher_event` takes the watcher event
//! by reference and deep-copies every object into a new `Arc`, so an informer that also hands
//! the object to its handlers copied each watch event's object twice (at 1,000 VMs the pod and
//! VMI clones of that path were about 2 % of the controller's CPU); now it is copied once.
//! Reads keep kube's API (`get`, `state`) so callers did not change.

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, PoisonError, RwLock};

/// The map behind a [`Store`] (what [`Store::replace`] takes).
pub(crate) type Map<K> = hashbrown::HashMap<Key, Arc<K>, foldhash::fast::RandomState>;

/// Where a cached object is kept: its namespace and name. kube's `ObjectRef`, the key readers
/// pass, also holds the object's resource version and uid (two more strings per cached
/// object when made by `ObjectRef::from_obj`) and is 96 bytes inline; this is 32, in a table
/// with one slot per object of each cached kind (docs/performance.md "Bytes per cached VM").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    namespace: Option<Box<str>>,
    name: Box<str>,
}

impl Key {
    /// The key of `obj` (an object without a name, which the API server never sends, is kept
    /// under the empty name rather than refused).
    pub(crate) fn of<K: Resource>(obj: &K) -> Key {
        let meta = obj.meta();
        Key {
            namespace: meta.namespace.as_deref().map(Box::from),
            name: meta.name.as_deref().unwrap_or_default().into(),
        }
    }

    /// This key, borrowed (for [`Store::lookup`]).
    pub(crate) fn borrowed(&self) -> KeyRef<'_> {
        KeyRef {
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
    }

    /// The key `r` names.
    #[cfg(test)]
    pub(crate) fn from_ref<K>(r: &ObjectRef<K>) -> Key
    where
        K: Resource,
        K::DynamicType: Eq + Hash + Clone,
    {
        Key {
            namespace: r.namespace.as_deref().map(Box::from),
            name: r.name.as_str().into(),
        }
    }
}

/// A [`Key`] borrowed from an `ObjectRef` or an object: a lookup that allocates nothing.
#[derive(Clone, Copy)]
pub(crate) struct KeyRef<'a> {
    namespace: Option<&'a str>,
    name: &'a str,
}

impl<'a> KeyRef<'a> {
    /// The key of `obj`, borrowed.
    pub(crate) fn of<K: Resource>(obj: &'a K) -> Self {
        let meta = obj.meta();
        KeyRef {
            namespace: meta.namespace.as_deref(),
            name: meta.name.as_deref().unwrap_or_default(),
        }
    }

    pub(crate) fn from_ref<K>(r: &'a ObjectRef<K>) -> Self
    where
        K: Resource,
        K::DynamicType: Eq + Hash + Clone,
    {
        KeyRef {
            namespace: r.namespace.as_deref(),
            name: &r.name,
        }
    }
}

/// One hash for [`Key`] and [`KeyRef`], as `hashbrown`'s `Equivalent` requires.
fn hash_key<H: Hasher>(namespace: Option<&str>, name: &str, state: &mut H) {
    namespace.hash(state);
    name.hash(state);
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key(self.namespace.as_deref(), &self.name, state);
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_key(self.namespace, self.name, state);
    }
}

impl hashbrown::Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.name == &*key.name && self.namespace == key.namespace.as_deref()
    }
}

/// A reader of an informer's cache. Cheap to clone; every clone sees the same objects.
pub struct Store<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    map: Arc<RwLock<Map<K>>>,
}

impl<K> Clone for Store<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn clone(&self) -> Self {
        Store {
            map: self.map.clone(),
        }
    }
}

impl<K> Default for Store<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Store {
            map: Arc::new(RwLock::new(Map::default())),
        }
    }
}

impl<K> Store<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    /// The cached object under `key`; for a key with a namespace, also the cluster-scoped
    /// object of that name (as kube's `Store::get`).
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.lookup(KeyRef::from_ref(key))
    }

    /// [`Store::get`] by a borrowed key.
    pub(crate) fn lookup(&self, key: KeyRef<'_>) -> Option<Arc<K>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(&key)
            .or_else(|| {
                key.namespace?;
                map.get(&KeyRef {
                    namespace: None,
                    ..key
                })
            })
            .cloned()
    }

    /// Every cached object, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.values().cloned().collect()
    }

    /// How many objects are cached.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when nothing is cached.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cache `obj` under `key`; returns the object it replaces.
    pub(crate) fn insert(&self, key: Key, obj: Arc<K>) -> Option<Arc<K>> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(key, obj)
    }

    /// Drop the object under `key`; returns it.
    pub(crate) fn remove(&self, key: KeyRef<'_>) -> Option<Arc<K>> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(&key)
    }

    /// Replace the whole cache (after a complete list) with `fresh`.
    pub(crate) fn replace(&self, fresh: Map<K>) {
        let old = {
            let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *map, fresh)
        };
        // The old objects are freed after the lock is released.
        drop(old);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, rv: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn insert_returns_the_replaced_object_and_readers_share_the_same_arc() {
        let store = Store::<ConfigMap>::default();
        let reader = store.clone();
        let key = ObjectRef::new("a").within("ns");
        let first = Arc::new(cm("ns", "a", "1"));
        assert!(store.insert(Key::from_ref(&key), first.clone()).is_none());
        let second = Arc::new(cm("ns", "a", "2"));
        let replaced = store
            .insert(Key::from_ref(&key), second.clone())
            .expect("replaced");
        assert!(Arc::ptr_eq(&replaced, &first));
        let read = reader.get(&key).expect("cached");
        assert!(
            Arc::ptr_eq(&read, &second),
            "no copy between the cache and its readers"
        );
        assert_eq!(reader.len(), 1);
        assert!(Arc::ptr_eq(
            &store.remove(KeyRef::from_ref(&key)).expect("removed"),
            &second
        ));
        assert!(reader.get(&key).is_none() && reader.is_empty());
    }

    /// The cache keys an object by namespace and name only: a reader's `ObjectRef` made from
    /// an object (with its resource version and uid) finds it, and so does one of a later
    /// version; the key is a third of an `ObjectRef`'s size.
    #[test]
    fn an_object_is_keyed_by_namespace_and_name_alone() {
        let store = Store::<ConfigMap>::default();
        let first = cm("ns", "a", "1");
        store.insert(Key::of(&first), Arc::new(first.clone()));
        assert!(store.get(&ObjectRef::from_obj(&first)).is_some());
        assert!(
            store
                .get(&ObjectRef::from_obj(&cm("ns", "a", "7")))
                .is_some()
        );
        assert!(store.lookup(KeyRef::of(&cm("ns", "a", "9"))).is_some());
        assert!(store.get(&ObjectRef::new("a").within("other")).is_none());
        assert!(store.get(&ObjectRef::new("a")).is_none());
        assert_eq!(Key::of(&first), Key::from_ref(&ObjectRef::from_obj(&first)));
        assert_eq!(size_of::<Key>(), 32);
        assert_eq!(size_of::<ObjectRef<ConfigMap>>(), 96);
    }

    #[test]
    fn a_namespaced_key_also_finds_a_cluster_scoped_object_of_that_name() {
        let store = Store::<Namespace>::default();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some("default".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        store.insert(
            Key::from_ref(&ObjectRef::<Namespace>::new("default")),
            Arc::new(ns),
        );
        assert!(store.get(&ObjectRef::new("default").within("x")).is_some());
        assert!(store.get(&ObjectRef::new("other").within("x")).is_none());
    }

    #[test]
    fn replace_swaps_in_exactly_the_listed_objects() {
        let store = Store::<ConfigMap>::default();
        store.insert(
            Key::from_ref(&ObjectRef::<ConfigMap>::new("gone").within("ns")),
            Arc::new(cm("ns", "gone", "1")),
        );
        store.insert(
            Key::from_ref(&ObjectRef::<ConfigMap>::new("kept").within("ns")),
            Arc::new(cm("ns", "kept", "1")),
        );
        store.replace(Map::from_iter([
            (
                Key::from_ref(&ObjectRef::<ConfigMap>::new("kept").within("ns")),
                Arc::new(cm("ns", "kept", "2")),
            ),
            (
                Key::from_ref(&ObjectRef::<ConfigMap>::new("new").within("ns")),
                Arc::new(cm("ns", "new", "1")),
            ),
        ]));
        let mut names: Vec<String> = store
            .state()
            .iter()
            .map(|c| {
                format!(
                    "{}@{}",
                    c.metadata.name.as_deref().unwrap_or(""),
                    c.metadata.resource_version.as_deref().unwrap_or("")
                )
            })
            .collect();
        names.sort();
        assert_eq!(names, ["kept@2", "new@1"]);
    }
}
