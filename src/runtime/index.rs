//! Secondary indexes of an informer's cache, client-go's `Indexers` / `ByIndex`
//! (`tools/cache/index.go`, `thread_safe_store.go`): a named function gives each cached object
//! an index value, and the index lists the objects under each value, so a controller asks
//! "the pods this VMI controls" without walking every cached pod.
//!
//! KubeVirt registers such indexes on its informers (`pkg/controller/virtinformers.go`: the
//! `vm` index of ControllerRevisions by owning VM, 1175-1189; namespace indexes on pods). An
//! index only narrows the candidates: [`crate::runtime::informer::Informer::by_index`] checks
//! each candidate with the index function again, so a lookup returns exactly what filtering
//! the whole cache would, also while the index and the cache are between two updates, or when
//! the informer was built without that index (then it filters the whole cache).

use super::store::Key;
use kube::Resource;
use std::collections::HashMap;
use std::sync::RwLock;

/// A named index function: the value an object is indexed under, if any (client-go's
/// `IndexFunc`, one value per object: every index here has at most one).
pub struct IndexFn<K> {
    /// Index name (`vm`, `controller-uid`); lookups find the informer's index by it.
    pub name: &'static str,
    /// The object's index value.
    pub value: fn(&K) -> Option<String>,
}

impl<K> IndexFn<K> {
    /// Whether `obj` is indexed under `value`.
    pub(crate) fn matches(&self, obj: &K, value: &str) -> bool {
        (self.value)(obj).as_deref() == Some(value)
    }
}

/// One index of a cache: value → (namespace, name) of the objects under it. Written by the
/// informer's task on every change, read by reconciles.
pub(crate) struct Index<K: Resource + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    pub(crate) func: &'static IndexFn<K>,
    entries: RwLock<HashMap<String, Vec<Key>>>,
}

impl<K> Index<K>
where
    K: Resource + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    pub(crate) fn new(func: &'static IndexFn<K>) -> Self {
        Index {
            func,
            entries: RwLock::new(HashMap::new()),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Vec<Key>>> {
        // A panic while holding the lock leaves the map consistent (every edit is one call).
        self.entries.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Record that the cached copy of one object went from `old` to `new` (`None`: absent).
    pub(crate) fn update(&self, old: Option<&K>, new: Option<&K>) {
        let Some(any) = new.or(old) else { return };
        let key = Key::of(any);
        let old_value = old.and_then(self.func.value);
        let new_value = new.and_then(self.func.value);
        let mut entries = self.write();
        if let Some(v) = old_value
            .as_ref()
            .filter(|v| Some(*v) != new_value.as_ref())
        {
            remove(&mut entries, v, &key);
        }
        if let Some(v) = new_value {
            let refs = entries.entry(v).or_insert_with(one_slot);
            if !refs.contains(&key) {
                refs.push(key);
            }
        }
    }

    /// Replace the whole index with the objects of a complete list (after a relist).
    pub(crate) fn rebuild<'a>(&self, objects: impl IntoIterator<Item = &'a K>)
    where
        K: 'a,
    {
        let mut fresh: HashMap<String, Vec<Key>> = HashMap::new();
        for obj in objects {
            if let Some(v) = (self.func.value)(obj) {
                fresh.entry(v).or_insert_with(one_slot).push(Key::of(obj));
            }
        }
        *self.write() = fresh;
    }

    /// The objects listed under `value`.
    pub(crate) fn refs(&self, value: &str) -> Vec<Key> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.get(value).cloned().unwrap_or_default()
    }

    /// How many values the index holds (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn values(&self) -> usize {
        self.entries.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The slots allocated for the objects under `value` (for tests of what the index keeps).
    #[cfg(test)]
    fn slots(&self, value: &str) -> usize {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.get(value).map_or(0, Vec::capacity)
    }
}

/// A new value's list, sized for one object: nearly every value lists one (a VM's revision, a
/// VMI's launcher pod), and a `Vec`'s first push reserves four keys, three of which would stay
/// empty (96 bytes per value; two indexes: 192 bytes per VM).
fn one_slot() -> Vec<Key> {
    Vec::with_capacity(1)
}

fn remove(entries: &mut HashMap<String, Vec<Key>>, value: &str, key: &Key) {
    if let Some(refs) = entries.get_mut(value) {
        refs.retain(|r| r != key);
        if refs.is_empty() {
            entries.remove(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    static BY_LABEL: IndexFn<ConfigMap> = IndexFn {
        name: "app",
        value: |c| c.metadata.labels.as_ref()?.get("app").cloned(),
    };

    fn labelled(name: &str, app: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.namespace = Some("ns".into());
        c.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        c
    }

    /// A value that lists one object holds one slot, whether the object came by an update or
    /// by a relist; a second object under it still fits.
    #[test]
    fn a_value_of_one_object_holds_one_slot() {
        let index = Index::new(&BY_LABEL);
        let a = labelled("a", "x");
        index.update(None, Some(&a));
        assert_eq!(index.slots("x"), 1);
        let b = labelled("b", "x");
        index.update(None, Some(&b));
        assert_eq!(index.refs("x").len(), 2);
        index.rebuild([&a, &labelled("c", "y")]);
        assert_eq!((index.slots("x"), index.slots("y")), (1, 1));
        assert_eq!(
            index.refs("y"),
            [Key::from_ref(
                &kube::runtime::reflector::ObjectRef::<ConfigMap>::new("c").within("ns")
            )]
        );
    }
}
