//! Resources served from another resource's storage, with conversion on the way in and out.
//!
//! The one case: `events.k8s.io/v1` Events are stored as core `v1` Events, as on a real server
//! (`pkg/apis/events/v1/conversion.go`): `regarding`↔`involvedObject`, `note`↔`message`,
//! `reportingController`↔`reportingComponent`, `deprecatedSource`↔`source`,
//! `deprecatedFirstTimestamp`↔`firstTimestamp`, `deprecatedLastTimestamp`↔`lastTimestamp`,
//! `deprecatedCount`↔`count`; `eventTime`, `series`, `action`, `reason`, `type`, `related`,
//! `reportingInstance` and `metadata` are shared. So an event recorded by kube's `Recorder`
//! shows up in `kubectl get events` and vice versa.

use serde_json::{Map, Value, json};

use super::resources::ResourceDef;

/// (events.k8s.io/v1 name, core/v1 name) of the renamed Event fields.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn is_new_event(def: &ResourceDef) -> bool {
    def.group == "events.k8s.io" && def.kind == "Event"
}

fn rename(obj: &Value, from_new: bool, api_version: &str) -> Value {
    let Some(m) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = Map::with_capacity(m.len());
    for (k, v) in m {
        let renamed = EVENT_FIELDS
            .iter()
            .find(|(new, old)| if from_new { *new == k } else { *old == k })
            .map(|(new, old)| if from_new { *old } else { *new });
        out.insert(renamed.unwrap_or(k).to_string(), v.clone());
    }
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    Value::Object(out)
}

/// The stored form of an object sent to `def`.
pub(crate) fn to_storage(def: &ResourceDef, obj: Value) -> Value {
    if is_new_event(def) {
        rename(&obj, true, "v1")
    } else {
        obj
    }
}

/// The served form (for `def`) of a stored object.
pub(crate) fn from_storage(def: &ResourceDef, obj: &Value) -> Option<Value> {
    is_new_event(def).then(|| rename(obj, false, &def.api_version()))
}

/// The stored field label a field selector on `def` means (`regarding.name` →
/// `involvedObject.name`).
pub(crate) fn storage_field(def: &ResourceDef, label: &str) -> String {
    if !is_new_event(def) {
        return label.to_string();
    }
    let (head, tail) = match label.split_once('.') {
        Some((h, t)) => (h, Some(t)),
        None => (label, None),
    };
    let head = EVENT_FIELDS
        .iter()
        .find(|(new, _)| *new == head)
        .map(|(_, old)| *old)
        .unwrap_or(head);
    match tail {
        Some(t) => format!("{head}.{t}"),
        None => head.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    fn new_events() -> ResourceDef {
        let r = Registry::new(builtin_resources());
        r.get(r.find("events.k8s.io", "v1", "events").unwrap())
            .clone()
    }

    #[test]
    fn round_trip() {
        let d = new_events();
        let e = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hi", "reason": "Started",
            "reportingController": "virt-controller", "eventTime": "2024-01-01T00:00:00.000000Z"});
        let stored = to_storage(&d, e.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["reportingComponent"], "virt-controller");
        assert_eq!(from_storage(&d, &stored).unwrap(), e);
        assert_eq!(storage_field(&d, "regarding.name"), "involvedObject.name");
        assert_eq!(storage_field(&d, "reason"), "reason");
    }
}
