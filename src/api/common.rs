//! Pieces shared by the kubevirt.io types: the "everything else" map, timestamps and conditions.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Fields of an object that virtctl-rs does not model. Every typed struct in `crate::api` keeps
/// them here (`#[serde(flatten)]`) so that reading then writing an object loses nothing.
///
/// Almost always empty, and there is one in every struct of a VM's template, so an empty one
/// costs one word: the map is boxed and allocated on the first insert (`serde_json::Map` with
/// `preserve_order` is 72 bytes inline; 33 kinds of struct carry one, and the informer caches
/// hold every VM, VMI and DataVolume, docs/performance.md "Sixth pass"). It reads as the map
/// ([`Deref`](std::ops::Deref)) and is written through it
/// ([`DerefMut`](std::ops::DerefMut), which allocates the map if there is none).
#[derive(Clone, Default)]
pub struct Extra(Option<Box<serde_json::Map<String, serde_json::Value>>>);

/// The map an empty [`Extra`] reads as.
static NO_EXTRA: std::sync::LazyLock<serde_json::Map<String, serde_json::Value>> =
    std::sync::LazyLock::new(serde_json::Map::new);

impl Extra {
    /// No fields.
    pub fn new() -> Self {
        Extra(None)
    }
}

impl std::ops::Deref for Extra {
    type Target = serde_json::Map<String, serde_json::Value>;
    fn deref(&self) -> &Self::Target {
        self.0.as_deref().unwrap_or(&NO_EXTRA)
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.get_or_insert_with(Default::default)
    }
}

impl From<serde_json::Map<String, serde_json::Value>> for Extra {
    fn from(map: serde_json::Map<String, serde_json::Value>) -> Self {
        Extra((!map.is_empty()).then(|| Box::new(map)))
    }
}

/// Equal when the fields are: no map and an empty one are the same.
impl PartialEq for Extra {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde_json::Map::deserialize(deserializer).map(Extra::from)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A struct shaped like every `crate::api` type: modelled fields and the rest flattened.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    struct Modelled {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(flatten)]
        extra: Extra,
    }

    #[test]
    fn an_empty_extra_is_one_word_and_allocates_nothing() {
        assert_eq!(std::mem::size_of::<Extra>(), std::mem::size_of::<usize>());
        let m: Modelled = serde_json::from_value(json!({"name": "a"})).expect("decodes");
        assert!(m.extra.0.is_none(), "no unmodelled field: no map");
        assert!(m.extra.is_empty() && m.extra.get("x").is_none());
        assert_eq!(
            serde_json::to_value(&m).expect("encodes"),
            json!({"name": "a"})
        );
    }

    #[test]
    fn unmodelled_fields_survive_a_round_trip_in_their_order() {
        let text = r#"{"zeta":{"b":1,"a":[true,null]},"name":"a","alpha":"x"}"#;
        let m: Modelled = serde_json::from_str(text).expect("decodes");
        assert_eq!(m.extra.keys().collect::<Vec<_>>(), ["zeta", "alpha"]);
        assert_eq!(m.extra["zeta"], json!({"b": 1, "a": [true, null]}));
        assert_eq!(
            serde_json::to_string(&m).expect("encodes"),
            r#"{"name":"a","zeta":{"b":1,"a":[true,null]},"alpha":"x"}"#
        );
        let yaml = serde_yaml::to_string(&m).expect("yaml");
        let back: Modelled = serde_yaml::from_str(&yaml).expect("yaml decodes");
        assert_eq!(back, m);
    }

    #[test]
    fn writing_through_it_allocates_and_no_map_equals_an_empty_one() {
        let mut m = Modelled::default();
        let none = m.clone();
        m.extra.insert("k".into(), json!(1));
        assert_eq!(m.extra.get("k"), Some(&json!(1)));
        assert_ne!(m, none);
        m.extra.remove("k");
        assert!(m.extra.0.is_some(), "the emptied map stays");
        assert_eq!(m, none, "an empty map equals no map");
        assert_eq!(Extra::from(serde_json::Map::new()).0, None);
        assert_eq!(format!("{:?}", Extra::new()), "{}");
    }
}
