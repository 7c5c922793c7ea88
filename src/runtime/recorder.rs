//! Writes `events.k8s.io/v1` Events, folding a repeat into the first one's `series` as kube's
//! `Recorder` does, with bounded, constant-time bookkeeping.
//!
//! kube-runtime 5's `Recorder::publish` walks its whole cache on every publish to expire
//! entries older than six minutes. The cache holds every distinct event of those six minutes,
//! so at 10,000 VM starts (two events each) a publish cost tens of thousands of steps and the
//! controller's event queue overflowed. Here the entries also expire after six minutes, but
//! from the front of a queue ordered by last use, and there are at most
//! [`MAX_CACHED_EVENTS`] of them, client-go's bound (`maxLruCacheEntries`,
//! k8s.io/client-go/tools/record/events_cache.go).
//!
//! What is written is what kube's `Recorder` writes: a new Event named
//! `<regarding name>.<unix nanoseconds in hex>` (client-go's naming too), or, for a repeat of a
//! cached one (same type, reason, action, reporter and regarding reference, resource version
//! included), a merge patch of that Event with `series: {count, lastObservedTime}`.
//!
//! The cache keeps what rebuilds the Event it wrote, not the Event: the key (type, reason,
//! action and the regarding reference, shared by the map and the use-order queue) and the
//! Event's name, note, event time and series count. client-go's `eventLogger` keeps the same
//! kind of record (count, first timestamp, name, resourceVersion) rather than the Event. A
//! whole cached `Event` was about 3.3 KB per entry with its table slot (6.7 MB for the 2,000
//! Events of a 1,000-VM start; "Eighth pass" in `git show 6c3c857:docs/performance.md`).

use super::apicall::{create_unread, merge_patch_unread};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff;
use kube::api::ObjectMeta;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// How long a published event is remembered for folding repeats (kube's `CACHE_TTL`).
pub const CACHE_TTL: Duration = Duration::from_secs(6 * 60);

/// At most this many distinct events are remembered (client-go `maxLruCacheEntries`).
pub const MAX_CACHED_EVENTS: usize = 4096;

/// One event to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// Machine-readable reason (`SuccessfulCreate`).
    pub reason: String,
    /// The human-readable note (at most 1 KiB, the API's limit).
    pub note: String,
    /// What was done (we record the reason, as KubeVirt's recorder has no action).
    pub action: String,
}

/// What makes two events the same series: type, reason, action (the reporter is the
/// recorder's own) and the whole regarding reference, `resourceVersion` and `fieldPath`
/// included, as kube's `EventKey` compares it (its `Reference` hashes five fields but its
/// equality is the whole `ObjectReference`'s). So an event about a newer version of the object
/// is a new Event, and only a repeat about the same version patches a series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    type_: &'static str,
    reason: String,
    action: String,
    regarding: [Option<String>; 7],
}

impl Key {
    fn new(event: &Event, regarding: &ObjectReference) -> Self {
        Key {
            type_: event.type_,
            reason: event.reason.clone(),
            action: event.action.clone(),
            regarding: [
                regarding.api_version.clone(),
                regarding.kind.clone(),
                regarding.namespace.clone(),
                regarding.name.clone(),
                regarding.uid.clone(),
                regarding.resource_version.clone(),
                regarding.field_path.clone(),
            ],
        }
    }

    /// The regarding reference the key was made from.
    fn regarding(&self) -> ObjectReference {
        let [
            api_version,
            kind,
            namespace,
            name,
            uid,
            resource_version,
            field_path,
        ] = self.regarding.clone();
        ObjectReference {
            api_version,
            kind,
            namespace,
            name,
            uid,
            resource_version,
            field_path,
        }
    }
}

/// A published Event, as much of it as its key does not hold ([`Recorder::event`] rebuilds
/// it).
#[derive(Debug, Clone, PartialEq)]
struct Cached {
    /// `metadata.name`.
    name: String,
    /// The note of the first occurrence (a repeat's patch sends it again, as kube's does).
    note: String,
    /// `eventTime`: when the first occurrence was created.
    event_time: jiff::Timestamp,
    /// `series.count`: `None` until the first repeat.
    count: Option<i32>,
    /// When it was last published (creation or series patch); `series.lastObservedTime`.
    last: jiff::Timestamp,
}

/// The cache of published events: a map for lookups and a queue of `(last use, key)` in use
/// order; a queue entry whose time is no longer its key's last use is stale and skipped.
#[derive(Default)]
struct Cache {
    map: hashbrown::HashMap<Arc<Key>, Cached, foldhash::fast::RandomState>,
    order: VecDeque<(jiff::Timestamp, Arc<Key>)>,
}

impl Cache {
    /// Forget what expired at `now`, and the least recently used entries beyond the bound.
    fn expire(&mut self, now: jiff::Timestamp) {
        let ttl = jiff::SignedDuration::try_from(CACHE_TTL).unwrap_or(jiff::SignedDuration::MAX);
        while let Some((at, key)) = self.order.front() {
            let current = self.map.get(key.as_ref()).map(|c| c.last);
            if current != Some(*at) {
                // Stale: the key was used again later (or is gone).
                self.order.pop_front();
                continue;
            }
            let expired = at.saturating_add(ttl).is_ok_and(|until| until <= now);
            if !(expired || self.map.len() > MAX_CACHED_EVENTS) {
                break;
            }
            let (_, key) = self.order.pop_front().expect("front exists");
            self.map.remove(key.as_ref());
        }
        // Stale entries pile up when one key repeats often: compact once they dominate.
        if self.order.len() > 2 * MAX_CACHED_EVENTS.max(self.map.len()) {
            let map = &self.map;
            self.order
                .retain(|(at, key)| map.get(key.as_ref()).is_some_and(|c| c.last == *at));
        }
    }

    /// Remember `cached` (published at `cached.last`) under `key`.
    fn remember(&mut self, key: Key, cached: Cached) {
        let now = cached.last;
        let key = match self.map.get_key_value(&key) {
            Some((shared, _)) => shared.clone(),
            None => Arc::new(key),
        };
        self.order.push_back((now, key.clone()));
        self.map.insert(key, cached);
        self.expire(now);
    }
}

/// Publishes events as `reporting_controller` / `reporting_instance`.
pub struct Recorder {
    client: kube::Client,
    controller: String,
    instance: String,
    cache: Cache,
}

impl Recorder {
    /// A recorder writing through `client`.
    pub fn new(client: kube::Client, controller: String, instance: String) -> Self {
        Recorder {
            client,
            controller,
            instance,
            cache: Cache::default(),
        }
    }

    /// Write `event` about `regarding`: create it, or patch the series of the same cached
    /// event. A failed write is not remembered (the next repeat creates it again).
    pub async fn publish(
        &mut self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        self.cache.expire(now);
        let key = Key::new(event, regarding);
        let ns = regarding.namespace.as_deref().unwrap_or("default");
        let written = match self.cache.map.get(&key) {
            Some(cached) => {
                let repeat = Cached {
                    count: Some(cached.count.map_or(2, |n| n + 1)),
                    last: now,
                    ..cached.clone()
                };
                merge_patch_unread::<K8sEvent, _>(
                    &self.client,
                    ns,
                    &repeat.name,
                    &self.event(&key, &repeat),
                )
                .await?;
                repeat
            }
            None => {
                let new = self.new_event(event, regarding, now);
                create_unread(&self.client, ns, &self.event(&key, &new)).await?;
                new
            }
        };
        self.cache.remember(key, written);
        Ok(())
    }

    /// The first occurrence of `event` about `regarding`, published at `now`.
    fn new_event(
        &self,
        event: &Event,
        regarding: &ObjectReference,
        now: jiff::Timestamp,
    ) -> Cached {
        Cached {
            name: format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or(&self.controller),
                now.as_nanosecond()
            ),
            note: event.note.clone(),
            event_time: now,
            count: None,
            last: now,
        }
    }

    /// The Event written for `key` as `cached` records it: created with no series, patched
    /// with `series: {count, lastObservedTime}` on a repeat.
    fn event(&self, key: &Key, cached: &Cached) -> K8sEvent {
        let regarding = key.regarding();
        K8sEvent {
            action: Some(key.action.clone()),
            reason: Some(key.reason.clone()),
            event_time: Some(MicroTime(cached.event_time)),
            note: Some(cached.note.clone()),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(cached.name.clone()),
                ..Default::default()
            },
            regarding: Some(regarding),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            series: cached.count.map(|count| EventSeries {
                count,
                last_observed_time: MicroTime(cached.last),
            }),
            type_: Some(key.type_.to_string()),
            ..Default::default()
        }
    }

    /// How many distinct events are remembered.
    pub fn cached(&self) -> usize {
        self.cache.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> Key {
        Key::new(
            &Event {
                type_: "Normal",
                reason: "SuccessfulCreate".into(),
                note: String::new(),
                action: "SuccessfulCreate".into(),
            },
            &ObjectReference {
                name: Some(format!("vmi-{i}")),
                namespace: Some("default".into()),
                ..Default::default()
            },
        )
    }

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
    }

    impl Cache {
        fn remember_at(&mut self, key: Key, now: jiff::Timestamp) {
            let cached = Cached {
                name: "e".into(),
                note: String::new(),
                event_time: now,
                count: None,
                last: now,
            };
            self.remember(key, cached);
        }
    }

    /// The Events rebuilt from the cache are the ones kube's `Recorder` writes: the first one
    /// whole, with no series, and a repeat as the first one with `series` (the note of the
    /// first occurrence, `lastObservedTime` the repeat's time).
    #[tokio::test]
    async fn the_written_events_are_rebuilt_exactly_from_the_cache() {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("URL"));
        let recorder = Recorder::new(
            kube::Client::try_from(config).expect("client"),
            "virt-controller".into(),
            "virt-controller-abc".into(),
        );
        let event = Event {
            type_: "Warning",
            reason: "FailedCreate".into(),
            note: "Error creating pod: quota exceeded".into(),
            action: "FailedCreate".into(),
        };
        let regarding = ObjectReference {
            api_version: Some("kubevirt.io/v1".into()),
            kind: Some("VirtualMachineInstance".into()),
            namespace: Some("prod".into()),
            name: Some("vm-1".into()),
            uid: Some("u-1".into()),
            resource_version: Some("41".into()),
            field_path: Some("spec".into()),
        };
        let key = Key::new(&event, &regarding);
        assert_eq!(key.regarding(), regarding);
        let first = recorder.new_event(&event, &regarding, at(0));
        let want = K8sEvent {
            action: Some("FailedCreate".into()),
            reason: Some("FailedCreate".into()),
            event_time: Some(MicroTime(at(0))),
            regarding: Some(regarding.clone()),
            note: Some("Error creating pod: quota exceeded".into()),
            metadata: ObjectMeta {
                namespace: Some("prod".into()),
                name: Some(format!("vm-1.{:x}", at(0).as_nanosecond())),
                ..Default::default()
            },
            reporting_controller: Some("virt-controller".into()),
            reporting_instance: Some("virt-controller-abc".into()),
            type_: Some("Warning".into()),
            ..Default::default()
        };
        assert_eq!(recorder.event(&key, &first), want);
        let repeat = Cached {
            count: Some(2),
            last: at(30),
            ..first
        };
        assert_eq!(
            recorder.event(&key, &repeat),
            K8sEvent {
                series: Some(EventSeries {
                    count: 2,
                    last_observed_time: MicroTime(at(30)),
                }),
                ..want
            }
        );
    }

    #[test]
    fn the_map_and_the_queue_share_one_key() {
        let mut c = Cache::default();
        c.remember_at(key(1), at(0));
        c.remember_at(key(1), at(1));
        let (shared, _) = c.map.get_key_value(&key(1)).expect("cached");
        assert!(c.order.iter().all(|(_, k)| Arc::ptr_eq(k, shared)));
        assert!(!c.order.is_empty());
        assert_eq!(Arc::strong_count(shared), 1 + c.order.len());
    }

    #[test]
    fn the_same_event_about_a_newer_version_of_the_object_is_another_series() {
        let event = Event {
            type_: "Normal",
            reason: "SuccessfulCreate".into(),
            note: String::new(),
            action: "SuccessfulCreate".into(),
        };
        let at_version = |rv: &str| ObjectReference {
            name: Some("vmi-1".into()),
            namespace: Some("default".into()),
            uid: Some("u-1".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        };
        assert_eq!(
            Key::new(&event, &at_version("7")),
            Key::new(&event, &at_version("7"))
        );
        assert_ne!(
            Key::new(&event, &at_version("7")),
            Key::new(&event, &at_version("8"))
        );
    }

    #[test]
    fn entries_expire_after_six_minutes_from_their_last_use() {
        let mut c = Cache::default();
        c.remember_at(key(1), at(0));
        c.remember_at(key(2), at(100));
        // key 1 used again at 300: it now lives until 660.
        c.remember_at(key(1), at(300));
        c.expire(at(459));
        assert_eq!(c.map.len(), 2);
        c.expire(at(460));
        assert!(c.map.contains_key(&key(1)) && !c.map.contains_key(&key(2)));
        c.expire(at(659));
        assert!(c.map.contains_key(&key(1)));
        c.expire(at(660));
        assert!(c.map.is_empty());
        assert!(c.order.is_empty(), "stale queue entries are dropped too");
    }

    #[test]
    fn at_most_4096_entries_and_the_least_recently_used_go_first() {
        let mut c = Cache::default();
        for i in 0..MAX_CACHED_EVENTS {
            c.remember_at(key(i), at(i as i64 / 100));
        }
        // Touch the oldest one: the second oldest is now the least recently used.
        c.remember_at(key(0), at(50));
        c.remember_at(key(MAX_CACHED_EVENTS), at(51));
        assert_eq!(c.map.len(), MAX_CACHED_EVENTS);
        assert!(c.map.contains_key(&key(0)));
        assert!(!c.map.contains_key(&key(1)));
        assert!(c.map.contains_key(&key(MAX_CACHED_EVENTS)));
    }

    #[test]
    fn one_key_repeated_many_times_keeps_the_queue_bounded() {
        let mut c = Cache::default();
        for i in 0..(10 * MAX_CACHED_EVENTS) {
            c.remember_at(key(7), at(i as i64 / 1000));
        }
        assert_eq!(c.map.len(), 1);
        assert!(c.order.len() <= 2 * MAX_CACHED_EVENTS + 1);
    }
}
