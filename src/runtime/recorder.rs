//! Writes core/v1 Events as client-go's `record.EventRecorder` does for KubeVirt's
//! virt-controller, with bounded, constant-time bookkeeping.
//!
//! KubeVirt gives its VM and VMI controllers a recorder each, both with the source component
//! `virtualmachine-controller` and no host (pkg/virt-controller/watch/application.go:391,
//! 817, 680-684: `record.NewBroadcaster`, `StartRecordingToSink` on
//! `CoreV1().Events(NamespaceAll)`, `NewRecorder(scheme, EventSource{Component})`). client-go
//! then writes `source.component` = `reportingComponent` = that component and
//! `source.host` = `reportingInstance` = "" (k8s.io/client-go/tools/record/event.go:451-455),
//! a new Event with `count: 1` and `firstTimestamp` = `lastTimestamp` = now (event.go:484-503).
//!
//! Each broadcaster runs every event through an `EventCorrelator`
//! (tools/record/events_cache.go:433-516), in this order, as [`Correlator::correlate`] does:
//! 1. **aggregation** (`EventAggregator`, events_cache.go:238-306): events that differ only by
//!    message (same object, type, reason) are counted per distinct message; the tenth distinct
//!    message within ten minutes of the previous one turns them into one Event
//!    `(combined from similar events): <message>`, which later ones update;
//! 2. **counting** (`eventLogger`, events_cache.go:323-367): a repeat of an Event written
//!    before (same object, field path, type, reason and message; the object's
//!    resourceVersion is not compared) is a strategic merge patch of that Event's `count`,
//!    `lastTimestamp` and `message`, not a new Event; a patch answered 404 creates it again
//!    (event.go:330-346);
//! 3. **the spam filter** (`EventSourceObjectSpamFilter`, events_cache.go:127-150): a token
//!    bucket per object and type, burst 25, refilled one token every five minutes; an event
//!    with no token is not written (but was counted in 2, so the next write's count includes
//!    it, as client-go's does).
//!
//! Every stage keeps a least-recently-used cache of at most [`MAX_CACHED_EVENTS`] entries
//! (client-go's `maxLruCacheEntries`), each lookup and update O(1) (the `lru` crate), so a
//! publish costs the same at 10,000 VM starts as at one (kube's
//! `Recorder` walked its whole cache on every publish and its queue overflowed). The entries
//! hold what the next decision needs, not the Event: the name, first timestamp and count
//! (client-go's `eventLog`), the distinct messages, the bucket's tokens. The source and the
//! reporting fields are the same for every event of one recorder, so the keys leave them out.
//!
//! Left out: client-go retries a write that failed below HTTP up to 12 times, 10 s apart
//! (event.go:300-323); here a failed write is logged by the caller and the next occurrence
//! writes again (its count includes the lost one). client-go also re-keys its counting cache by
//! the Event the server returned (`UpdateState`, event.go:342-345); the server returns what
//! was sent, so that changes nothing but an entry under the combined message's own key, which
//! no event the controllers record can match.

use super::apicall::{create_unread, strategic_patch_unread};
use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff;
use kube::api::ObjectMeta;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// The source component of the events KubeVirt's VM and VMI controllers record
/// (application.go:391, 817).
pub const COMPONENT: &str = "virtualmachine-controller";

/// At most this many entries in each of the correlator's caches (client-go
/// `maxLruCacheEntries`, events_cache.go:36).
pub const MAX_CACHED_EVENTS: usize = 4096;

/// Distinct messages of one object, type and reason that make a combined Event
/// (`defaultAggregateMaxEvents`, events_cache.go:40).
const AGGREGATE_MAX_EVENTS: usize = 10;

/// How long after the last similar event aggregation keeps counting
/// (`defaultAggregateIntervalInSeconds`, events_cache.go:41).
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);

/// Events an object may get at once from one recorder (`defaultSpamBurst`,
/// events_cache.go:47).
const SPAM_BURST: f64 = 25.0;

/// The spam filter's refill: one event every five minutes (`defaultSpamQPS`,
/// events_cache.go:48).
const SPAM_QPS: f64 = 1.0 / 300.0;

/// The message prefix of a combined Event (`EventAggregatorByReasonMessageFunc`,
/// events_cache.go:182-184).
const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// One event to record (`recorder.Eventf(object, type, reason, message)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: &'static str,
    /// Machine-readable reason (`SuccessfulCreate`).
    pub reason: String,
    /// The human-readable message.
    pub message: String,
}

/// The involved object as client-go's keys compare it: kind, namespace, name, UID and
/// apiVersion (not its resourceVersion; the field path only in [`LogKey`]). One allocation
/// that the keys of one event in all three caches share (the caches hold the same events,
/// so 3 × 4,096 keys would otherwise hold three copies of each object's five strings).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Subject(Arc<[Option<Box<str>>; 5]>);

impl Subject {
    fn of(object: &ObjectReference) -> Self {
        let fields = [
            &object.kind,
            &object.namespace,
            &object.name,
            &object.uid,
            &object.api_version,
        ];
        Subject(Arc::new(fields.map(|f| f.as_deref().map(Box::from))))
    }
}

/// `EventAggregatorByReasonFunc`'s aggregate key (events_cache.go:161-179): object, type and
/// reason; shared by the aggregation and counting caches' keys of one event.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AggregateKey(Arc<AggregateFields>);

#[derive(Debug, PartialEq, Eq, Hash)]
struct AggregateFields {
    subject: Subject,
    type_: &'static str,
    reason: Box<str>,
}

/// The counting cache's key: `getEventKey` (events_cache.go:52-67) for an event written as
/// recorded, the aggregate key for a combined one (the key `EventAggregate` returns).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum LogKey {
    Exact {
        aggregate: AggregateKey,
        field_path: Option<Box<str>>,
        /// The same allocation as the aggregation cache's copy of the message.
        message: Arc<str>,
    },
    Combined(AggregateKey),
}

/// `aggregateRecord`: the distinct messages seen and when the last similar event came.
struct AggregateRecord {
    /// client-go's `localKeys` set; at most [`AGGREGATE_MAX_EVENTS`] entries, so a list (most
    /// hold one message: a set's table would take five times the bytes).
    messages: Vec<Arc<str>>,
    last: jiff::Timestamp,
}

/// `eventLog`: what a repeat needs of the Event written first.
#[derive(Debug, Clone)]
struct LogRecord {
    name: String,
    first: jiff::Timestamp,
    count: i32,
}

/// A passive token bucket (`flowcontrol.NewTokenBucketPassiveRateLimiterWithClock` over
/// `x/time/rate`): starts full, refills continuously.
struct SpamBucket {
    tokens: f64,
    last: jiff::Timestamp,
}

impl SpamBucket {
    /// `TryAccept`: take a token if there is one at `now`.
    fn try_accept(&mut self, now: jiff::Timestamp) -> bool {
        let elapsed = now.duration_since(self.last).as_secs_f64().max(0.0);
        self.tokens = (self.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        self.last = self.last.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One Event as it is to be written: created whole when `count` is 1, else patched.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    /// `metadata.name`.
    pub name: String,
    /// `message` (a combined Event's carries the prefix).
    pub message: String,
    /// `firstTimestamp`.
    pub first: jiff::Timestamp,
    /// `lastTimestamp`.
    pub last: jiff::Timestamp,
    /// `count`.
    pub count: i32,
    /// A combined Event: client-go writes it with no reporting fields (events_cache.go:278-290).
    pub combined: bool,
}

/// What the correlator decided for one event (`EventCorrelateResult`).
#[derive(Debug, Clone, PartialEq)]
pub enum Correlated {
    /// Filtered as spam: nothing is written.
    Skip,
    /// Create or patch this occurrence.
    Write(Occurrence),
}

/// client-go's `EventCorrelator` with its default options, time passed in.
pub struct Correlator {
    aggregates: LruCache<AggregateKey, AggregateRecord>,
    logs: LruCache<LogKey, LogRecord>,
    spam: LruCache<(Subject, &'static str), SpamBucket>,
}

impl Default for Correlator {
    fn default() -> Self {
        let size = NonZeroUsize::new(MAX_CACHED_EVENTS).expect("non-zero");
        Correlator {
            aggregates: LruCache::new(size),
            logs: LruCache::new(size),
            spam: LruCache::new(size),
        }
    }
}

impl Correlator {
    /// `EventCorrelate`: aggregate, count, then filter `event` about `object` at `now`.
    #[cfg(test)]
    pub(crate) fn correlate(
        &mut self,
        event: &Event,
        object: &ObjectReference,
        now: jiff::Timestamp,
    ) -> Correlated {
        self.correlate_recorded(event, object, now, now)
    }

    /// [`Self::correlate`] of an event recorded at `recorded` and published at `now`: as
    /// client-go stamps an Event when it is recorded (`makeEvent`, event.go:484-503) and its
    /// broadcaster correlates it later, the Event's name and timestamps are the recording's,
    /// except a combined Event's, which the aggregator makes at `now` (events_cache.go:278-290);
    /// aggregation and the spam filter run at `now`.
    pub(crate) fn correlate_recorded(
        &mut self,
        event: &Event,
        object: &ObjectReference,
        recorded: jiff::Timestamp,
        now: jiff::Timestamp,
    ) -> Correlated {
        let subject = Subject::of(object);
        let aggregate = AggregateKey(Arc::new(AggregateFields {
            subject: subject.clone(),
            type_: event.type_,
            reason: event.reason.as_str().into(),
        }));
        let shared: Arc<str> = event.message.as_str().into();
        let combined = self.aggregate(&aggregate, &shared, now);
        let (key, message) = if combined {
            (
                LogKey::Combined(aggregate),
                format!("{COMBINED_PREFIX}{}", event.message),
            )
        } else {
            let key = LogKey::Exact {
                aggregate,
                field_path: object.field_path.as_deref().map(Box::from),
                message: shared,
            };
            (key, event.message.clone())
        };
        let stamp = if combined { now } else { recorded };
        let occurrence = self.observe(key, object, message, combined, stamp);
        if self.filtered(subject, event.type_, now) {
            return Correlated::Skip;
        }
        Correlated::Write(occurrence)
    }

    /// `EventAggregate`: whether to write the combined Event of `key` rather than the event as
    /// recorded.
    fn aggregate(&mut self, key: &AggregateKey, message: &Arc<str>, now: jiff::Timestamp) -> bool {
        let fresh = || AggregateRecord {
            messages: Vec::new(),
            last: now,
        };
        let record = match self.aggregates.get_mut(key) {
            Some(record) => record,
            None => self.aggregates.get_or_insert_mut(key.clone(), fresh),
        };
        let interval = now.duration_since(record.last).as_secs_f64();
        if interval > AGGREGATE_INTERVAL.as_secs_f64() {
            record.messages.clear();
        }
        record.last = now;
        if !record.messages.iter().any(|m| m == message) {
            record.messages.push(message.clone());
        }
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            return false;
        }
        // `localKeys.PopAny()` (any one: Go's map order; here the first in the list): the set
        // never grows past the threshold.
        record.messages.swap_remove(0);
        true
    }

    /// `eventObserve`: the occurrence to write for `key`, and the count remembered.
    fn observe(
        &mut self,
        key: LogKey,
        object: &ObjectReference,
        message: String,
        combined: bool,
        now: jiff::Timestamp,
    ) -> Occurrence {
        let record = match self.logs.get(&key) {
            Some(seen) => LogRecord {
                count: seen.count.saturating_add(1),
                ..seen.clone()
            },
            None => LogRecord {
                name: event_name(object.name.as_deref().unwrap_or_default(), now),
                first: now,
                count: 1,
            },
        };
        let occurrence = Occurrence {
            name: record.name.clone(),
            message,
            first: record.first,
            last: now,
            count: record.count,
            combined,
        };
        self.logs.put(key, record);
        occurrence
    }

    /// `EventSourceObjectSpamFilter.Filter`: true when the object has no token left.
    fn filtered(&mut self, subject: Subject, type_: &'static str, now: jiff::Timestamp) -> bool {
        let bucket = self
            .spam
            .get_or_insert_mut((subject, type_), || SpamBucket {
                tokens: SPAM_BURST,
                last: now,
            });
        !bucket.try_accept(now)
    }

    /// How many distinct Events are remembered for counting.
    pub(crate) fn cached(&self) -> usize {
        self.logs.len()
    }
}

/// `util.GenerateEventName` (tools/record/util/util.go:50-57): `<object name>.<unix nanoseconds
/// in hex>`, or a random UUID when that is not a valid object name.
fn event_name(object: &str, now: jiff::Timestamp) -> String {
    let name = format!("{object}.{:x}", now.as_nanosecond());
    let valid = name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if valid {
        name
    } else {
        uuid::Uuid::new_v4().to_string()
    }
}

/// Publishes events as [`COMPONENT`], through one [`Correlator`] (one client-go broadcaster).
pub struct Recorder {
    client: kube::Client,
    component: String,
    correlator: Correlator,
}

impl Recorder {
    /// A recorder writing through `client` with source component `component`.
    pub fn new(client: kube::Client, component: String) -> Self {
        Recorder {
            client,
            component,
            correlator: Correlator::default(),
        }
    }

    /// Record `event` about `object`: create its Event, patch the one a repeat counts, or
    /// nothing when the spam filter drops it.
    pub async fn publish(
        &mut self,
        event: &Event,
        object: &ObjectReference,
    ) -> Result<(), kube::Error> {
        self.publish_recorded(event, object, jiff::Timestamp::now())
            .await
    }

    /// [`Self::publish`] of an event recorded at `recorded` (its Event's timestamps), queued
    /// until now.
    pub async fn publish_recorded(
        &mut self,
        event: &Event,
        object: &ObjectReference,
        recorded: jiff::Timestamp,
    ) -> Result<(), kube::Error> {
        let now = jiff::Timestamp::now();
        let correlated = self
            .correlator
            .correlate_recorded(event, object, recorded, now);
        let Correlated::Write(occurrence) = correlated else {
            tracing::debug!(reason = %event.reason, "event filtered as spam (client-go's per-object token bucket)");
            return Ok(());
        };
        let whole = self.event(event, object, &occurrence);
        let ns = whole.metadata.namespace.clone().unwrap_or_default();
        if occurrence.count > 1 {
            let patched = strategic_patch_unread::<CoreEvent>(
                &self.client,
                &ns,
                &occurrence.name,
                &repeat_patch(&occurrence),
            )
            .await;
            match patched {
                // Gone (expired, deleted): create it again, count and all (event.go:336-341).
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                other => return other,
            }
        }
        create_unread(&self.client, &ns, &whole).await
    }

    /// The whole Event for `occurrence` (event.go:484-503 with the source of 451-455; a
    /// combined one as events_cache.go:278-290 builds it).
    fn event(&self, event: &Event, object: &ObjectReference, o: &Occurrence) -> CoreEvent {
        let reporting = (!o.combined).then(|| self.component.clone());
        CoreEvent {
            metadata: ObjectMeta {
                name: Some(o.name.clone()),
                namespace: Some(
                    object
                        .namespace
                        .clone()
                        .filter(|ns| !ns.is_empty())
                        .unwrap_or_else(|| "default".into()),
                ),
                ..Default::default()
            },
            involved_object: object.clone(),
            reason: Some(event.reason.clone()),
            message: Some(o.message.clone()),
            first_timestamp: Some(Time(o.first)),
            last_timestamp: Some(Time(o.last)),
            count: Some(o.count),
            type_: Some(event.type_.to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            // `json:"reportingComponent"` / `json:"reportingInstance"`: never omitted.
            reporting_component: Some(reporting.unwrap_or_default()),
            reporting_instance: Some(String::new()),
            ..Default::default()
        }
    }

    /// How many distinct Events are remembered for counting.
    pub fn cached(&self) -> usize {
        self.correlator.cached()
    }
}

/// The strategic merge patch of a repeat: what `CreateTwoWayMergePatch` finds between the
/// Event with `count` 0, `lastTimestamp` at the epoch and no message and the Event to write
/// (events_cache.go:344-352), keys in Go's sorted order.
fn repeat_patch(o: &Occurrence) -> serde_json::Value {
    let mut patch = serde_json::Map::new();
    patch.insert("count".into(), o.count.into());
    patch.insert(
        "lastTimestamp".into(),
        serde_json::to_value(Time(o.last)).unwrap_or_default(),
    );
    if !o.message.is_empty() {
        patch.insert("message".into(), o.message.clone().into());
    }
    serde_json::Value::Object(patch)
}

#[cfg(test)]
mod tests;
