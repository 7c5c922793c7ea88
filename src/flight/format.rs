//! The recording's one format, version 1 ([`FORMAT`]): JSON lines, each a [`Line`] tagged by
//! `type`. docs/replay.md describes every field. Objects are recorded once in full (`add`, or
//! a segment's `snapshot`), then as RFC 6902 patches from the previous version of the same
//! object in the same segment.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The format name and version every segment's header carries.
pub const FORMAT: &str = "virtctl-rs.flight/v1";

/// One object of the controller's caches: its kind (`VirtualMachine`, `Pod`, …) and
/// `namespace/name`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ObjectId {
    /// The kind as the API writes it.
    pub kind: String,
    /// `namespace/name`.
    pub key: String,
}

/// What happened to a cached object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchOp {
    /// A new object: `object` holds it.
    Add,
    /// A change: `patch` turns the version `fromRv` into `rv`.
    Update,
    /// Deleted (or gone in a relist).
    Delete,
}

/// A version of an object as a change of the one before it: the whole object when there was
/// none, else an RFC 6902 patch from `from_rv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    /// `metadata.resourceVersion` of this version.
    pub rv: String,
    /// The version the patch applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_rv: Option<String>,
    /// The whole object (no earlier version recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    /// RFC 6902 patch from `from_rv`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<Value>,
}

/// An object a reconcile's snapshot held, by resourceVersion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// Which object.
    #[serde(flatten)]
    pub id: ObjectId,
    /// Its `metadata.resourceVersion`.
    pub rv: String,
}

/// An expectations entry a reconcile saw (`vm-vmi`, `vm-datavolume`, `vmi-pod`, `vmi-self`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expectation {
    /// The store.
    pub store: String,
    /// Creations still expected.
    pub adds: i64,
    /// Deletions still expected.
    pub dels: i64,
    /// What `SatisfiedExpectations` answered (fulfilled or expired).
    pub satisfied: bool,
}

/// One action of a decision: its kind (`CreateVmi`, `Event SuccessfulCreate`, …) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// The action's kind.
    pub action: String,
    /// The decision's reason, when it gives one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
}

/// One reconcile of one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reconcile {
    /// `vm` or `vmi`.
    pub controller: String,
    /// `namespace/name`.
    pub key: String,
    /// The decision's clock.
    pub now: DateTime<Utc>,
    /// The objects the snapshot held.
    pub inputs: Vec<Input>,
    /// The key's expectations entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<Expectation>,
    /// The decision before any write was answered (the VMI controller's status part: after
    /// its sync part ran).
    pub decided: Vec<Decided>,
    /// Set when the VMI controller's sync part failed: its status part then depends on the
    /// error and is not compared.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync_failed: bool,
    /// The decision skipped the key (the VMI controller's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// What was applied, as `/debug/state` lists it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<String>,
    /// The reconcile's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One write and the API server's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    /// `vm` or `vmi`.
    pub controller: String,
    /// The reconciled key.
    pub key: String,
    /// The action's kind.
    pub action: String,
    /// `None`: accepted; else the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The object the answer returned, as a version of the cached one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Answer>,
}

/// An object a write returned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// Which object.
    #[serde(flatten)]
    pub id: ObjectId,
    /// The version, relative to the cached one.
    #[serde(flatten)]
    pub version: Version,
}

/// A core/v1 Event the controller emitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventLine {
    /// The involved object's kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its uid.
    #[serde(default)]
    pub uid: String,
    /// `Normal` or `Warning`.
    pub event_type: String,
    /// The reason.
    pub reason: String,
    /// The message.
    pub message: String,
}

/// What one line records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Body {
    /// The first line of every segment.
    #[serde(rename_all = "camelCase")]
    Header {
        /// [`FORMAT`].
        format: String,
        /// The controller's identity.
        identity: String,
        /// The segment's number.
        segment: u64,
    },
    /// An object as the caches held it when the segment began.
    Snapshot {
        /// Which object.
        #[serde(flatten)]
        id: ObjectId,
        /// The whole object.
        object: Value,
    },
    /// A change of a cached object.
    Watch {
        /// Which object.
        #[serde(flatten)]
        id: ObjectId,
        /// What happened.
        op: WatchOp,
        /// The new version (absent for a deletion).
        #[serde(flatten)]
        version: Option<Version>,
    },
    /// The cluster settings the controllers render with (at each leadership term).
    Settings {
        /// The settings.
        settings: Value,
    },
    /// This controller started or stopped leading.
    #[serde(rename_all = "camelCase")]
    Lease {
        /// `started-leading` or `stopped-leading`.
        event: String,
        /// The Lease `namespace/name`.
        lease: String,
    },
    /// One reconcile.
    Reconcile(Box<Reconcile>),
    /// One write.
    Write(Box<Write>),
    /// One Event.
    Event(EventLine),
}

/// One line of a recording: a sequence number (one counter across segments), the wall
/// clock, and what it records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    /// Increases by one per line.
    pub seq: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// What.
    #[serde(flatten)]
    pub body: Body,
}

/// `metadata.resourceVersion` of a JSON object (empty when it has none).
pub(crate) fn rv_of(obj: &Value) -> String {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// `new` as a [`Version`] of `old`: a patch when there is an `old`, else the whole object.
pub(crate) fn version_of(old: Option<&Value>, new: &Value) -> Version {
    match old {
        Some(old) => Version {
            rv: rv_of(new),
            from_rv: Some(rv_of(old)),
            object: None,
            patch: Some(serde_json::to_value(json_patch::diff(old, new)).unwrap_or(Value::Null)),
        },
        None => Version {
            rv: rv_of(new),
            from_rv: None,
            object: Some(new.clone()),
            patch: None,
        },
    }
}

impl Version {
    /// The object this version describes, given the version it patches (`base`). An error
    /// says what is missing or what does not apply.
    pub(crate) fn resolve(&self, base: Option<&Value>) -> Result<Value, String> {
        if let Some(obj) = &self.object {
            return Ok(obj.clone());
        }
        let from = self.from_rv.as_deref().unwrap_or("");
        let Some(base) = base.filter(|b| rv_of(b) == from) else {
            return Err(format!("its version {from} is not in the recording"));
        };
        let patch: json_patch::Patch =
            serde_json::from_value(self.patch.clone().unwrap_or(Value::Array(Vec::new())))
                .map_err(|e| format!("patch to rv {}: not an RFC 6902 patch: {e}", self.rv))?;
        let mut obj = base.clone();
        json_patch::patch(&mut obj, &patch)
            .map_err(|e| format!("patch to rv {}: does not apply: {e}", self.rv))?;
        Ok(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(rv: &str, phase: &str) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
            "labels": {"keep": "x"}}, "spec": {"runStrategy": "Always",
            "template": {"spec": {"domain": {"memory": {"guest": "1Gi"}}}}},
            "status": {"printableStatus": phase}})
    }

    #[test]
    fn a_change_is_recorded_as_a_patch_that_rebuilds_the_new_version() {
        let (old, new) = (vm("5", "Starting"), vm("6", "Running"));
        let v = version_of(Some(&old), &new);
        assert_eq!((v.rv.as_str(), v.from_rv.as_deref()), ("6", Some("5")));
        assert!(v.object.is_none());
        let patch = serde_json::to_string(v.patch.as_ref().unwrap()).unwrap();
        // Only what changed: not the spec, not the labels.
        assert!(
            !patch.contains("runStrategy") && !patch.contains("keep"),
            "{patch}"
        );
        assert_eq!(v.resolve(Some(&old)).unwrap(), new);
    }

    #[test]
    fn a_patch_without_its_base_version_is_an_error_naming_it() {
        let v = version_of(Some(&vm("5", "Starting")), &vm("6", "Running"));
        assert!(v.resolve(None).unwrap_err().contains("version 5"));
        let err = v.resolve(Some(&vm("4", "Starting"))).unwrap_err();
        assert!(err.contains("version 5 is not in the recording"), "{err}");
        let first = version_of(None, &vm("5", "Starting"));
        assert_eq!(first.resolve(None).unwrap(), vm("5", "Starting"));
    }

    #[test]
    fn lines_round_trip_with_their_type_tag() {
        let line = Line {
            seq: 7,
            at: Utc::now(),
            body: Body::Watch {
                id: ObjectId {
                    kind: "Pod".into(),
                    key: "ns/p".into(),
                },
                op: WatchOp::Update,
                version: Some(version_of(Some(&vm("1", "a")), &vm("2", "b"))),
            },
        };
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.contains(r#""type":"watch""#) && text.contains(r#""op":"update""#));
        assert!(text.contains(r#""kind":"Pod""#) && text.contains(r#""fromRv":"1""#));
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), line);
        let delete = Line {
            body: Body::Watch {
                id: ObjectId {
                    kind: "Pod".into(),
                    key: "ns/p".into(),
                },
                op: WatchOp::Delete,
                version: None,
            },
            ..line
        };
        let text = serde_json::to_string(&delete).unwrap();
        assert_eq!(serde_json::from_str::<Line>(&text).unwrap(), delete);
    }
}
