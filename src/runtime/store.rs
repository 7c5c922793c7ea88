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
use std::hash::Hash;
use std::sync::{Arc, PoisonError, RwLock};

/// The map behind a [`Store`] (what [`Store::replace`] takes).
pub(crate) type Map<K> = hashbrown::HashMap<ObjectRef<K>, Arc<K>, foldhash::fast::RandomState>;

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
        let map = self.map.read().unwrap_or_else(PoisonError::into_inner);
        map.get(key)
            .or_else(|| {
                key.namespace.as_ref()?;
                let mut cluster = key.clone();
                cluster.namespace = None;
                map.get(&cluster)
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
    pub(crate) fn insert(&self, key: ObjectRef<K>, obj: Arc<K>) -> Option<Arc<K>> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(key, obj)
    }

    /// Drop the object under `key`; returns it.
    pub(crate) fn remove(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        let mut map = self.map.write().unwrap_or_else(PoisonError::into_inner);
        map.remove(key)
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
        assert!(store.insert(key.clone(), first.clone()).is_none());
        let second = Arc::new(cm("ns", "a", "2"));
        let replaced = store.insert(key.clone(), second.clone()).expect("replaced");
        assert!(Arc::ptr_eq(&replaced, &first));
        let read = reader.get(&key).expect("cached");
        assert!(
            Arc::ptr_eq(&read, &second),
            "no copy between the cache and its readers"
        );
        assert_eq!(reader.len(), 1);
        assert!(Arc::ptr_eq(&store.remove(&key).expect("removed"), &second));
        assert!(reader.get(&key).is_none() && reader.is_empty());
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
        store.insert(ObjectRef::new("default"), Arc::new(ns));
        assert!(store.get(&ObjectRef::new("default").within("x")).is_some());
        assert!(store.get(&ObjectRef::new("other").within("x")).is_none());
    }

    #[test]
    fn replace_swaps_in_exactly_the_listed_objects() {
        let store = Store::<ConfigMap>::default();
        store.insert(
            ObjectRef::new("gone").within("ns"),
            Arc::new(cm("ns", "gone", "1")),
        );
        store.insert(
            ObjectRef::new("kept").within("ns"),
            Arc::new(cm("ns", "kept", "1")),
        );
        store.replace(Map::from_iter([
            (
                ObjectRef::new("kept").within("ns"),
                Arc::new(cm("ns", "kept", "2")),
            ),
            (
                ObjectRef::new("new").within("ns"),
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
