//! Pieces shared by the kubevirt.io types: the "everything else" map, timestamps and conditions.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Fields of an object that virtctl-rs does not model. Every typed struct in `crate::api` keeps
/// them here (`#[serde(flatten)]`) so that reading then writing an object loses nothing.
pub type Extra = serde_json::Map<String, serde_json::Value>;

/// A `metav1.Time`: RFC 3339 with second precision, always UTC (`2026-10-13T00:42:32Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub DateTime<Utc>);

impl Time {
    /// The current wall-clock time, truncated to whole seconds as `metav1.Now()` serialises.
    pub fn now() -> Self {
        Time::from_datetime(Utc::now())
    }

    /// Truncate a chrono time to whole seconds.
    pub fn from_datetime(t: DateTime<Utc>) -> Self {
        use chrono::Timelike;
        Time(t.with_nanosecond(0).unwrap_or(t))
    }

    /// RFC 3339, seconds precision, `Z` suffix.
    pub fn to_rfc3339(&self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Convert from k8s-openapi's (jiff based) `Time`.
    pub fn from_k8s(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<Self> {
        let secs = t.0.as_second();
        DateTime::<Utc>::from_timestamp(secs, 0).map(Time)
    }

    /// Convert to k8s-openapi's (jiff based) `Time`.
    pub fn to_k8s(&self) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
        k8s_openapi::jiff::Timestamp::from_second(self.0.timestamp())
            .ok()
            .map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time)
    }
}

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Time {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DateTime::parse_from_rfc3339(&s)
            .map(|t| Time(t.with_timezone(&Utc)))
            .map_err(|e| serde::de::Error::custom(format!("invalid RFC 3339 time {s:?}: {e}")))
    }
}

/// A condition on a VM or VMI (`v1.VirtualMachineCondition`, `v1.VirtualMachineInstanceCondition`:
/// same shape).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`, `Failure`, `RestartRequired`, `Paused`, `PodScheduled`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Written as `null` when unset, like Go's zero `metav1.Time` (the field is `+nullable` and
    /// always serialised): JSON-patch `test` ops against conditions written by KubeVirt only
    /// match if we serialise them the same way.
    #[serde(default)]
    pub last_probe_time: Option<Time>,
    /// Written as `null` when unset (see `last_probe_time`).
    #[serde(default)]
    pub last_transition_time: Option<Time>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Condition {
    /// True when `status == "True"`.
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// One object's identity and version, from its `metadata` (the VM of `inspect`'s model, the
/// cached VM and VMI of `/debug/state?key=`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectVersion {
    /// `metadata.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `metadata.generation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
}

impl ObjectVersion {
    /// The version of the object whose metadata is `meta`.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        ObjectVersion {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
        }
    }
}

/// An object's annotation by key.
pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    entry(meta.annotations.as_ref(), key)
}

/// An object's label by key.
pub fn label<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    entry(meta.labels.as_ref(), key)
}

fn entry<'a>(
    map: Option<&'a std::collections::BTreeMap<String, String>>,
    key: &str,
) -> Option<&'a str> {
    map?.get(key).map(String::as_str)
}

/// Find a condition by type.
pub fn find_condition<'a>(
    conditions: Option<&'a Vec<Condition>>,
    type_: &str,
) -> Option<&'a Condition> {
    conditions.and_then(|c| c.iter().find(|c| c.type_ == type_))
}
