//! The objects a controller's own writes returned, kept until its informer cache catches up
//! (client-go `cache.MutationCache`, tools/cache/mutation_cache.go, with integer
//! resourceVersions as `NewIntegerResourceVersionMutationCache` compares them).
//!
//! A sync that follows the controller's own write before that write's watch event arrived would
//! otherwise decide from the older cached copy and send its resourceVersion: the write answers
//! 409 Conflict (the object changed since, by our own hand), or a patch puts back what the
//! earlier write replaced. [`MutationCache::newer`] hands such a sync the object the last write
//! returned instead. Another writer's change still wins as soon as the cache has it (a higher
//! resourceVersion), and until then it makes our write answer 409, as it should.

use kube::Resource;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Per key, the object the last write of it returned, while it is newer than the cache's.
pub struct MutationCache<K> {
    written: Mutex<HashMap<String, Arc<K>>>,
}

impl<K> Default for MutationCache<K> {
    fn default() -> Self {
        MutationCache {
            written: Mutex::new(HashMap::new()),
        }
    }
}

/// `metadata.resourceVersion` as the integer the API server (etcd's revision) gives it.
fn version<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

impl<K: Resource> MutationCache<K> {
    /// Record `obj`, the answer of a write of `key` (`Mutation`). An answer older than the one
    /// recorded (a slower write of the same key) is ignored.
    pub fn mutation(&self, key: &str, obj: Arc<K>) {
        let Some(new) = version(obj.as_ref()) else {
            return;
        };
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let keep_old = written.get(key).is_some_and(|old| {
            same_object(old.as_ref(), obj.as_ref()) && version(old.as_ref()) >= Some(new)
        });
        if !keep_old {
            written.insert(key.to_string(), obj);
        }
    }

    /// The newer of `cached` (the informer's copy of `key`) and the last written object
    /// (`GetByKey`). The record is dropped once the cache holds that version or a later one,
    /// or a different object (another UID) of the same name, or a resourceVersion that is not
    /// an integer.
    pub(crate) fn newer(&self, key: &str, cached: Arc<K>) -> Arc<K> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(last) = written.get(key) else {
            return cached;
        };
        match (version(last.as_ref()), version(cached.as_ref())) {
            (Some(w), Some(c)) if w > c && same_object(last.as_ref(), cached.as_ref()) => {
                last.clone()
            }
            _ => {
                written.remove(key);
                cached
            }
        }
    }

    /// Forget `key` (its object left the cache).
    pub(crate) fn forget(&self, key: &str) {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
    }

    /// How many keys hold a written object newer than the cache's, as last looked at.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no key holds a written object.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn same_object<K: Resource>(a: &K, b: &K) -> bool {
    a.meta().uid == b.meta().uid
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn cm(uid: &str, rv: &str, data: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some("c".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            data: Some([("v".to_string(), data.to_string())].into()),
            ..Default::default()
        })
    }

    fn data(c: &ConfigMap) -> &str {
        c.data.as_ref().and_then(|d| d.get("v")).map_or("", |s| s)
    }

    #[test]
    fn the_written_object_wins_until_the_cache_catches_up() {
        let cache = MutationCache::default();
        cache.mutation("ns/c", cm("u", "12", "written"));
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "11", "cached"))),
            "written"
        );
        // Still there for the next sync while the cache is behind.
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "11", "cached"))),
            "written"
        );
        // The watch event of the write arrived: the cache's copy, and the record is dropped.
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "12", "cached"))),
            "cached"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn another_writers_later_version_wins() {
        let cache = MutationCache::default();
        cache.mutation("ns/c", cm("u", "12", "written"));
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "15", "theirs"))),
            "theirs"
        );
        assert!(cache.is_empty());
    }

    #[test]
    fn a_slower_older_answer_does_not_replace_a_newer_one() {
        let cache = MutationCache::default();
        cache.mutation("ns/c", cm("u", "14", "second"));
        cache.mutation("ns/c", cm("u", "13", "first"));
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "10", "cached"))),
            "second"
        );
    }

    #[test]
    fn a_recreated_object_or_an_opaque_version_is_not_mixed_up() {
        let cache = MutationCache::default();
        cache.mutation("ns/c", cm("old-uid", "20", "old object"));
        assert_eq!(data(&cache.newer("ns/c", cm("new-uid", "5", "new"))), "new");
        assert!(cache.is_empty());
        cache.mutation("ns/c", cm("u", "not-a-number", "x"));
        assert!(
            cache.is_empty(),
            "an opaque resourceVersion cannot be ordered"
        );
        cache.mutation("ns/c", cm("u", "7", "written"));
        assert_eq!(
            data(&cache.newer("ns/c", cm("u", "opaque", "cached"))),
            "cached"
        );
        cache.mutation("ns/c", cm("u", "7", "written"));
        cache.forget("ns/c");
        assert!(cache.is_empty());
    }
}
