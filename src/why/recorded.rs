//! Events from a flight recording (`why --recording DIR`): the controllers' Events are kept
//! there past the API server's one-hour TTL (docs/why.md), so a run that ended hours ago keeps
//! the controller's side of its story (which VMI it created, which pod, which VMI it deleted).

use super::gather::WhyGathered;
use crate::flight::{Body, EventLine, Line};
use chrono::{DateTime, SecondsFormat, Utc};
use k8s_openapi::api::core::v1::Event;
use serde_json::json;
use std::collections::BTreeMap;

/// `source.component` of an Event taken from a recording.
pub(crate) const RECORDED_SOURCE: &str = "virt-controller (flight recording)";

/// What makes two Events one (client-go's aggregation key without the source).
type EventKey = (String, String, String, String, String, String);

fn key_of(e: &EventLine) -> EventKey {
    (
        e.kind.clone(),
        e.name.clone(),
        e.uid.clone(),
        e.event_type.clone(),
        e.reason.clone(),
        e.message.clone(),
    )
}

fn cluster_key(e: &Event) -> EventKey {
    let o = &e.involved_object;
    let s = |v: &Option<String>| v.clone().unwrap_or_default();
    (
        s(&o.kind),
        s(&o.name),
        s(&o.uid),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    )
}

/// Add to `g.events` the recorded Events about the VM and its VMIs (which share its name) that
/// the cluster no longer holds, one per object, type, reason and message with its count and
/// its first and last time. An Event the cluster still holds is the cluster's copy.
pub(crate) fn add_recorded_events(g: &mut WhyGathered, lines: &[Line]) {
    let held: std::collections::HashSet<EventKey> = g.events.iter().map(cluster_key).collect();
    let mut seen: BTreeMap<EventKey, (u32, DateTime<Utc>, DateTime<Utc>)> = BTreeMap::new();
    for line in lines {
        let Body::Event(e) = &line.body else { continue };
        let ours = matches!(e.kind.as_str(), "VirtualMachine" | "VirtualMachineInstance");
        if !ours || e.namespace != g.namespace || e.name != g.name {
            continue;
        }
        let key = key_of(e);
        if held.contains(&key) {
            continue;
        }
        let entry = seen.entry(key).or_insert((0, line.at, line.at));
        entry.0 += 1;
        entry.2 = line.at;
    }
    for ((kind, name, uid, type_, reason, message), (count, first, last)) in seen {
        let stamp = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
        let event = json!({
            "metadata": {"name": format!("{name}.recorded-{}", first.timestamp_micros()),
                "namespace": g.namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": g.namespace, "uid": uid},
            "type": type_, "reason": reason, "message": message, "count": count,
            "firstTimestamp": stamp(first), "lastTimestamp": stamp(last),
            "source": {"component": RECORDED_SOURCE},
        });
        match serde_json::from_value(event) {
            Ok(e) => g.events.push(e),
            Err(e) => tracing::warn!(error = %e, "a recorded Event is left out"),
        }
    }
}
