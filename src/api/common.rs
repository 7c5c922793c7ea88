//! Pieces shared by the kubevirt.io types: the "everything else" map, timestamps and conditions.

use chrono::{DateTime, SecondsFormat, Utc};
use litemap::LiteMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Fields of an object that virtctl-rs does not model. Every typed struct in `crate::api` keeps
/// them here (`#[serde(flatten)]`) so that reading then writing an object loses nothing.
///
/// Almost always empty, and there is one in every struct of a VM's template, so an empty one
/// costs one word and allocates nothing (`serde_json::Map` with `preserve_order` is 72 bytes
/// inline; 33 kinds of struct carry one, docs/performance.md "Bytes per cached VM").
///
/// A non-empty one is kept as its compact JSON text, parsed into the map on the first read
/// ([`Deref`](std::ops::Deref)) and kept parsed in that copy; a clone copies only the text. The
/// informer caches hold clones, so a cached disk's `{"disk":{"bus":"virtio"}}` is about 64
/// bytes in two allocations instead of about 450 in eight as a map of maps (each
/// `serde_json::Map` is an entry vector and an index table; docs/performance.md "Bytes per
/// cached VM").
/// Writing through it ([`DerefMut`](std::ops::DerefMut), which allocates the map if there is
/// none) makes the map the truth until the next clone writes its text again.
#[derive(Default)]
pub struct Extra(Option<Box<ExtraFields>>);

/// The fields of a non-empty [`Extra`]: the text, the map, or both (then they agree).
#[derive(Default)]
pub(crate) struct ExtraFields {
    /// Compact JSON of the map; `None` once the map was written through.
    text: Option<Box<str>>,
    /// The map, once read or written.
    map: std::sync::OnceLock<Box<serde_json::Map<String, serde_json::Value>>>,
}

impl ExtraFields {
    fn from_map(map: serde_json::Map<String, serde_json::Value>) -> Self {
        ExtraFields {
            text: Some(serde_json::Value::Object(map).to_string().into_boxed_str()),
            map: std::sync::OnceLock::new(),
        }
    }

    /// The map, parsed from the text when not yet read. The text is this type's own
    /// rendering of a map, so it always parses.
    fn map(&self) -> &serde_json::Map<String, serde_json::Value> {
        self.map.get_or_init(|| Box::new(self.parse()))
    }

    /// The map without keeping it: the parsed copy if there is one, else a fresh parse.
    fn with_map<R>(&self, f: impl FnOnce(&serde_json::Map<String, serde_json::Value>) -> R) -> R {
        match self.map.get() {
            Some(m) => f(m),
            None => f(&self.parse()),
        }
    }

    fn parse(&self) -> serde_json::Map<String, serde_json::Value> {
        self.text
            .as_deref()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }
}

/// The map an empty [`Extra`] reads as.
static NO_EXTRA: std::sync::LazyLock<serde_json::Map<String, serde_json::Value>> =
    std::sync::LazyLock::new(serde_json::Map::new);

impl Extra {
    /// No fields.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Extra(None)
    }

    /// Apply `f` to the fields without keeping a parsed map in this copy: the read for a shared
    /// cached object, which a read through [`Deref`](std::ops::Deref) would leave holding the
    /// map for as long as the cache holds it (the VM sync reads the cached VM itself, so at
    /// 10,000 VMs such reads kept 0.9 KiB per VM; "Tenth pass" in
    /// `git show 6c3c857:docs/performance.md`).
    pub(crate) fn read<R>(
        &self,
        f: impl FnOnce(&serde_json::Map<String, serde_json::Value>) -> R,
    ) -> R {
        self.with_map(f)
    }

    /// Whether the fields may hold `key`: `false` only when the text, not yet parsed, has no
    /// `"key"` in it, so a reconcile that looks for a field most objects lack (a memory dump
    /// volume among a VMI's volumes) does not parse every unmodelled map to find it missing.
    /// `key` must need no JSON escaping (letters, digits, `-`, `_`, `.`, `/`).
    pub(crate) fn may_have_key(&self, key: &str) -> bool {
        let Some(fields) = &self.0 else {
            return false;
        };
        if fields.map.get().is_some() {
            return true;
        }
        fields.text.as_deref().is_some_and(|t| {
            t.match_indices(key)
                .any(|(i, _)| t[..i].ends_with('"') && t[i + key.len()..].starts_with('"'))
        })
    }

    /// `f` of the field `key`, read as [`Extra::read`] reads, when the fields hold it; most
    /// objects lack the unmodelled fields reconciles look for, so the text is searched for the
    /// key first ([`Extra::may_have_key`]) and parsed only when it may be there. `key` must need
    /// no JSON escaping.
    pub(crate) fn field<R>(
        &self,
        key: &str,
        f: impl FnOnce(&serde_json::Value) -> Option<R>,
    ) -> Option<R> {
        if !self.may_have_key(key) {
            return None;
        }
        self.read(|m| m.get(key).and_then(f))
    }

    /// Whether this copy holds a parsed map (for tests of what reads keep).
    #[cfg(test)]
    pub(crate) fn holds_parsed_map(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.map.get().is_some())
    }

    /// Apply `f` to the fields without keeping a parsed map (a read of a cached object that
    /// should stay compact: equality, encoding).
    fn with_map<R>(&self, f: impl FnOnce(&serde_json::Map<String, serde_json::Value>) -> R) -> R {
        match &self.0 {
            Some(fields) => fields.with_map(f),
            None => f(&NO_EXTRA),
        }
    }
}

impl std::ops::Deref for Extra {
    type Target = serde_json::Map<String, serde_json::Value>;
    fn deref(&self) -> &Self::Target {
        match &self.0 {
            Some(fields) => fields.map(),
            None => &NO_EXTRA,
        }
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut Self::Target {
        let fields = self.0.get_or_insert_with(Default::default);
        if fields.map.get().is_none() {
            let parsed = fields.parse();
            let _ = fields.map.set(Box::new(parsed));
        }
        fields.text = None;
        fields.map.get_mut().expect("parsed above")
    }
}

/// A copy holds the text only (written from the map if the map was written through).
impl Clone for Extra {
    fn clone(&self) -> Self {
        let Some(fields) = &self.0 else {
            return Extra(None);
        };
        match (&fields.text, fields.map.get()) {
            (Some(text), _) => Extra(Some(Box::new(ExtraFields {
                text: Some(text.clone()),
                map: std::sync::OnceLock::new(),
            }))),
            (None, Some(map)) => Extra::from((**map).clone()),
            (None, None) => Extra(None),
        }
    }
}

impl From<serde_json::Map<String, serde_json::Value>> for Extra {
    fn from(map: serde_json::Map<String, serde_json::Value>) -> Self {
        Extra((!map.is_empty()).then(|| Box::new(ExtraFields::from_map(map))))
    }
}

/// Equal when the fields are: no map and an empty one are the same. Equal texts answer at
/// once; otherwise the maps are compared (key order does not matter), without keeping them.
impl PartialEq for Extra {
    fn eq(&self, other: &Self) -> bool {
        if let (Some(a), Some(b)) = (&self.0, &other.0)
            && let (Some(ta), Some(tb)) = (&a.text, &b.text)
            && ta == tb
        {
            return true;
        }
        self.with_map(|a| other.with_map(|b| a == b))
    }
}

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.with_map(|m| m.fmt(f))
    }
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.with_map(|m| m.serialize(serializer))
    }
}

/// Decoded straight into its compact text ([`ToJson`]): no map is built and dropped on the
/// way (`serde_json::Map::deserialize` then `Extra::from` was about 3 % of the controller's
/// CPU in a 1,000-VM start, "Ninth pass" in `git show 6c3c857:docs/performance.md`). Keys are
/// read as `String`s and values as a `serde_json::Value` reads them, so what decodes and what
/// errors is the same.
impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut text = Vec::new();
        let entries = deserializer.deserialize_map(ToJson(&mut text))?;
        if entries == 0 {
            return Ok(Extra(None));
        }
        // Only `serde_json`'s writer and ASCII punctuation went into it.
        let text = String::from_utf8(text).map_err(serde::de::Error::custom)?;
        Ok(Extra(Some(Box::new(ExtraFields {
            text: Some(text.into_boxed_str()),
            map: std::sync::OnceLock::new(),
        }))))
    }
}

/// A visitor (and seed) that writes the value it is handed as compact JSON into a buffer, as
/// `serde_json::Value`'s `Display` would write the value it decodes to; answers how many
/// entries or elements it wrote.
struct ToJson<'a>(&'a mut Vec<u8>);

impl ToJson<'_> {
    fn scalar<T: Serialize + ?Sized, E: serde::de::Error>(self, v: &T) -> Result<usize, E> {
        serde_json::to_writer(&mut *self.0, v).map_err(E::custom)?;
        Ok(0)
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for ToJson<'_> {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ToJson<'_> {
    type Value = usize;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<usize, E> {
        self.scalar(&v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<usize, E> {
        self.scalar(&v)
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<usize, E> {
        self.scalar(&v)
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<usize, E> {
        match (i64::try_from(v), u64::try_from(v)) {
            (Ok(v), _) => self.scalar(&v),
            (_, Ok(v)) => self.scalar(&v),
            _ => Err(E::custom("number out of range")),
        }
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<usize, E> {
        match u64::try_from(v) {
            Ok(v) => self.scalar(&v),
            Err(_) => Err(E::custom("number out of range")),
        }
    }

    /// A non-finite float is `null`, as `serde_json::Value` holds it.
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<usize, E> {
        self.scalar(&v)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<usize, E> {
        self.scalar(v)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<usize, E> {
        self.scalar(&())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<usize, E> {
        self.scalar(&())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        self.0.push(b'[');
        let mut n = 0;
        loop {
            let mark = self.0.len();
            if n > 0 {
                self.0.push(b',');
            }
            if seq.next_element_seed(ToJson(self.0))?.is_none() {
                self.0.truncate(mark);
                break;
            }
            n += 1;
        }
        self.0.push(b']');
        Ok(n)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<usize, A::Error> {
        self.0.push(b'{');
        let mut n = 0;
        while let Some(key) = map.next_key::<String>()? {
            if n > 0 {
                self.0.push(b',');
            }
            serde_json::to_writer(&mut *self.0, &key).map_err(serde::de::Error::custom)?;
            self.0.push(b':');
            map.next_value_seed(ToJson(self.0))?;
            n += 1;
        }
        self.0.push(b'}');
        Ok(n)
    }
}

/// A JSON array that objects carry and decisions read now and then (a VMI's
/// `status.interfaces` and `status.volumeStatus`, each entry an object virt-handler or the VMI
/// controller writes), kept as its compact text: a cached VMI's one interface entry is about
/// 200 bytes in one allocation as text and about 1,950 bytes in 20 allocations as
/// `serde_json::Value`s (each object an entry vector and an index table; docs/performance.md
/// "Bytes per cached VM").
///
/// Readers parse it ([`JsonList::entries`]) and keep nothing in the shared copy; a writer
/// builds a new one from the entries ([`From<Vec<Value>>`](JsonList::from)).
#[derive(Clone, Default)]
pub struct JsonList(Box<str>);

impl JsonList {
    /// The entries, parsed from the text (this type's own rendering of an array, so it parses).
    pub fn entries(&self) -> Vec<serde_json::Value> {
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// The compact JSON text of the array.
    pub fn as_json(&self) -> &str {
        &self.0
    }
}

impl From<Vec<serde_json::Value>> for JsonList {
    fn from(entries: Vec<serde_json::Value>) -> Self {
        JsonList(
            serde_json::Value::Array(entries)
                .to_string()
                .into_boxed_str(),
        )
    }
}

/// Equal when the entries are (key order within an entry does not matter); equal texts answer
/// at once.
impl PartialEq for JsonList {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0 || self.entries() == other.entries()
    }
}

impl std::fmt::Debug for JsonList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.entries().fmt(f)
    }
}

impl Serialize for JsonList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.entries().serialize(serializer)
    }
}

/// Decoded straight into its compact text ([`ToJson`]), as [`Extra`] is; anything but an array
/// is an error.
impl<'de> Deserialize<'de> for JsonList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut text = Vec::new();
        deserializer.deserialize_any(ToJson(&mut text))?;
        if text.first() != Some(&b'[') {
            let found = String::from_utf8_lossy(&text);
            let shown: String = found.chars().take(60).collect();
            let more = if shown.len() < found.len() { "…" } else { "" };
            return Err(serde::de::Error::custom(format!(
                "expected a JSON array, found {shown}{more}"
            )));
        }
        // Only `serde_json`'s writer and ASCII punctuation went into it.
        let text = String::from_utf8(text).map_err(serde::de::Error::custom)?;
        Ok(JsonList(text.into_boxed_str()))
    }
}

/// The strings VMs, VMIs and launcher pods carry by the thousand, sorted: the label and
/// annotation keys KubeVirt v1.9 writes (pkg/virt-controller/services/template.go:
/// `generatePodAnnotations` and the launcher's labels; the Velero and descheduler ones of
/// pkg/storage/pod/annotations/generator.go; watch/vm/vm.go; the instancetype ones), kubectl's
/// and the recommended `app.kubernetes.io` ones, a launcher's resource names, the condition
/// types, statuses, reasons and fixed messages of VMs and VMIs (staging/src/kubevirt.io/api
/// core/v1/types.go:680-801 and 2331-2344; lifecycle.go:874-924;
/// pkg/network/vmispec/interface.go:87), and a pod's condition types (k8s.io/api core/v1
/// types.go's `PodConditionType` values and KubeVirt's readiness gate, types.go:1330). A
/// [`KnownStr`] of one of them is a static string.
const KNOWN_STRINGS: [&str; 87] = [
    "AccessCredentialsSynchronized",
    "AgentConnected",
    "AgentVersionNotSupported",
    "ContainersReady",
    "DataVolumesReady",
    "DisksNotLiveMigratable",
    "DisruptionTarget",
    "EvictionRequested",
    "Failure",
    "False",
    "Guest VM is not reported as running",
    "GuestNotRunning",
    "HostDeviceNotLiveMigratable",
    "HotMemoryChange",
    "HotVCPUChange",
    "HotplugNotLiveMigratable",
    "Initialized",
    "InterfaceNotLiveMigratable",
    "LiveMigratable",
    "ManualRecoveryRequired",
    "MigrationRequired",
    "NotMigratable",
    "NotPaused",
    "Paused",
    "PodConditionMissing",
    "PodNotExists",
    "PodReadyToStartContainers",
    "PodResizeInProgress",
    "PodResizePending",
    "PodScheduled",
    "PodTerminating",
    "Provisioning",
    "Ready",
    "RestartRequired",
    "StorageLiveMigratable",
    "Synchronized",
    "True",
    "Unknown",
    "Unschedulable",
    "VMI is marked for eviction",
    "VolumesChange",
    "app.kubernetes.io/component",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/name",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/version",
    "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network",
    "cpu",
    "descheduler.alpha.kubernetes.io/request-evict-only",
    "devices.kubevirt.io/kvm",
    "devices.kubevirt.io/tun",
    "devices.kubevirt.io/vhost-net",
    "ephemeral-storage",
    "k8s.v1.cni.cncf.io/networks",
    "kubectl.kubernetes.io/default-container",
    "kubectl.kubernetes.io/last-applied-configuration",
    "kubevirt.io",
    "kubevirt.io/cluster-instancetype-name",
    "kubevirt.io/cluster-preference-name",
    "kubevirt.io/created-by",
    "kubevirt.io/domain",
    "kubevirt.io/instancetype-name",
    "kubevirt.io/latest-observed-api-version",
    "kubevirt.io/memory-overhead-bytes",
    "kubevirt.io/migrationTransportUnix",
    "kubevirt.io/nodeName",
    "kubevirt.io/outdatedLauncherImage",
    "kubevirt.io/pci-interface-slot-count",
    "kubevirt.io/pci-topology-version",
    "kubevirt.io/preference-name",
    "kubevirt.io/storage-observed-api-version",
    "kubevirt.io/virtual-machine-unpaused",
    "kubevirt.io/vm-generation",
    "memory",
    "post.hook.backup.velero.io/command",
    "post.hook.backup.velero.io/container",
    "pre.hook.backup.velero.io/command",
    "pre.hook.backup.velero.io/container",
    "pre.hook.backup.velero.io/timeout",
    "the virtual machine is not paused",
    "the virtual machine is paused",
    "virt-launcher pod has not yet been scheduled",
    "virt-launcher pod is missing the Ready condition",
    "virt-launcher pod is terminating",
    "vm.kubevirt.io/name",
    "vmi.kubevirt.io/id",
];

/// A string a cached object carries by the thousand: a [`SmallMap`]'s key, a VM's or VMI's
/// condition's type, status, reason and message, a cached launcher pod's condition's type and
/// status. One of [`KNOWN_STRINGS`] is a static string, allocating nothing;
/// any other is its own copy. A launcher pod's eighteen label and annotation keys took eighteen
/// allocations (docs/performance.md "Bytes per cached VM"). Compares, hashes and orders as its
/// text.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KnownStr(std::borrow::Cow<'static, str>);

impl KnownStr {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is one of [`KNOWN_STRINGS`], kept without a copy of its own.
    #[cfg(test)]
    pub(crate) fn is_static(&self) -> bool {
        matches!(self.0, std::borrow::Cow::Borrowed(_))
    }

    /// The static copy of `text` when it is one of [`KNOWN_STRINGS`].
    fn known(text: &str) -> Option<&'static str> {
        KNOWN_STRINGS
            .binary_search(&text)
            .ok()
            .map(|i| KNOWN_STRINGS[i])
    }
}

/// The empty string.
impl Default for KnownStr {
    fn default() -> Self {
        KnownStr(std::borrow::Cow::Borrowed(""))
    }
}

impl From<String> for KnownStr {
    fn from(text: String) -> Self {
        KnownStr(match KnownStr::known(&text) {
            Some(known) => known.into(),
            None => text.into(),
        })
    }
}

impl From<&str> for KnownStr {
    fn from(text: &str) -> Self {
        KnownStr(match KnownStr::known(text) {
            Some(known) => known.into(),
            None => text.to_owned().into(),
        })
    }
}

impl From<KnownStr> for String {
    fn from(text: KnownStr) -> String {
        text.0.into_owned()
    }
}

impl std::ops::Deref for KnownStr {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for KnownStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for KnownStr {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for KnownStr {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl std::fmt::Debug for KnownStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl std::fmt::Display for KnownStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for KnownStr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A string; a known one is looked up without a copy.
impl<'de> Deserialize<'de> for KnownStr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;

        impl serde::de::Visitor<'_> for Text {
            type Value = KnownStr;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<KnownStr, E> {
                Ok(KnownStr::from(text))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<KnownStr, E> {
                Ok(KnownStr::from(text))
            }
        }

        deserializer.deserialize_str(Text)
    }
}

/// A small JSON object with string keys, such as a VMI's `status.activePods`, kept as a sorted
/// list of pairs ([`LiteMap`], read through `Deref`): a `BTreeMap` allocates an eleven-slot
/// node, about 550 bytes, for its first entry (docs/performance.md "Bytes per cached VM").
///
/// Serde is this type's own: `LiteMap`'s writes an empty map as `[]` and reads a list of pairs
/// as a map, where a Kubernetes map field is an object both ways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SmallMap<V>(LiteMap<KnownStr, V>);

impl<V> SmallMap<V> {
    /// An empty map.
    pub fn new() -> Self {
        SmallMap(LiteMap::new())
    }

    /// Insert or replace the value of `key`, as `BTreeMap::insert`: the old value, if any.
    pub fn insert(&mut self, key: impl Into<KnownStr>, value: V) -> Option<V> {
        self.0.insert(key.into(), value)
    }

    /// The pairs, sorted by key.
    pub fn into_pairs(self) -> Vec<(String, V)> {
        let pairs = self.0.into_tuple_vec();
        pairs.into_iter().map(|(k, v)| (k.into(), v)).collect()
    }

    /// A copy as the `BTreeMap` k8s-openapi's types hold.
    pub fn to_btree_map(&self) -> std::collections::BTreeMap<String, V>
    where
        V: Clone,
    {
        self.0
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }
}

/// As `BTreeMap::from`: a later duplicate key wins.
impl<V, const N: usize> From<[(String, V); N]> for SmallMap<V> {
    fn from(pairs: [(String, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

/// The value of `key`; panics when absent, as `BTreeMap`'s index does.
impl<V> std::ops::Index<&str> for SmallMap<V> {
    type Output = V;

    fn index(&self, key: &str) -> &V {
        self.0.get(key).expect("key in SmallMap")
    }
}

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        SmallMap::new()
    }
}

/// An `ObjectMeta`'s labels and annotations kept apart from it as [`SmallMap`]s: how the
/// caches hold them ([`crate::api::vm::TemplateMeta`], the launcher pod cache), since the
/// `BTreeMap`s of k8s-openapi's `ObjectMeta` take a 544-byte node each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaMaps {
    pub labels: Option<SmallMap<String>>,
    pub annotations: Option<SmallMap<String>>,
}

impl MetaMaps {
    /// Move the labels and annotations out of `meta`.
    pub fn take_from(
        meta: &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Self {
        MetaMaps {
            labels: meta.labels.take().map(SmallMap::from_iter),
            annotations: meta.annotations.take().map(SmallMap::from_iter),
        }
    }

    /// `meta` with these labels and annotations put back.
    pub fn restored(
        &self,
        meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            labels: self.labels.as_ref().map(SmallMap::to_btree_map),
            annotations: self.annotations.as_ref().map(SmallMap::to_btree_map),
            ..meta
        }
    }
}

impl<V> std::ops::Deref for SmallMap<V> {
    type Target = LiteMap<KnownStr, V>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<V> std::ops::DerefMut for SmallMap<V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// A later duplicate key wins, as in a `BTreeMap`.
impl<V, K: Into<KnownStr>> FromIterator<(K, V)> for SmallMap<V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Self {
        let mut pairs: Vec<(KnownStr, V)> = pairs.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // Strictly increasing keys are already a map (the usual case: what this type wrote).
        if !pairs.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable: equal keys stay in input order, and the last of each run is kept.
            pairs.sort_by(|a, b| a.0.cmp(&b.0));
            let mut unique: Vec<(KnownStr, V)> = Vec::with_capacity(pairs.len());
            for pair in pairs {
                match unique.last_mut() {
                    Some(last) if last.0 == pair.0 => *last = pair,
                    _ => unique.push(pair),
                }
            }
            pairs = unique;
        }
        SmallMap(LiteMap::from_sorted_store_unchecked(pairs))
    }
}

/// A JSON object, in key order (as Go's `encoding/json` writes a map).
impl<V: Serialize> Serialize for SmallMap<V> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.0.iter())
    }
}

/// A JSON object; anything else is an error.
impl<'de, V: Deserialize<'de>> Deserialize<'de> for SmallMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs<V>(std::marker::PhantomData<V>);

        impl<'de, V: Deserialize<'de>> serde::de::Visitor<'de> for Pairs<V> {
            type Value = SmallMap<V>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of string keys")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut access: A,
            ) -> Result<Self::Value, A::Error> {
                let mut pairs = Vec::with_capacity(access.size_hint().unwrap_or(0));
                while let Some(pair) = access.next_entry::<KnownStr, V>()? {
                    pairs.push(pair);
                }
                Ok(pairs.into_iter().collect())
            }
        }

        deserializer.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

/// A `metav1.Time`: RFC 3339 with second precision, always UTC (`2026-10-13T00:42:32Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub DateTime<Utc>);

impl Time {
    /// The current wall-clock time, truncated to whole seconds as `metav1.Now()` serialises.
    pub(crate) fn now() -> Self {
        Time::from_datetime(Utc::now())
    }

    /// Truncate a chrono time to whole seconds.
    pub(crate) fn from_datetime(t: DateTime<Utc>) -> Self {
        use chrono::Timelike;
        Time(t.with_nanosecond(0).unwrap_or(t))
    }

    /// RFC 3339, seconds precision, `Z` suffix.
    pub(crate) fn to_rfc3339(self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Secs, true)
    }

    /// Convert from k8s-openapi's (jiff based) `Time`.
    pub(crate) fn from_k8s(
        t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) -> Option<Self> {
        let secs = t.0.as_second();
        DateTime::<Utc>::from_timestamp(secs, 0).map(Time)
    }

    /// Convert to k8s-openapi's (jiff based) `Time`.
    pub(crate) fn to_k8s(self) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
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
    pub type_: KnownStr,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: KnownStr,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<KnownStr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<KnownStr>,
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
    pub(crate) fn is_true(&self) -> bool {
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
    pub(crate) fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Self {
        ObjectVersion {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            generation: meta.generation,
        }
    }
}

/// An object's annotation by key: `meta` is k8s-openapi's `ObjectMeta` or a VM's or VMI's
/// [`Meta`](super::Meta) (generic, so a `Meta` is never read as the `ObjectMeta` it derefs to,
/// which has no maps).
pub fn annotation<'a, M: ObjectMaps + ?Sized>(meta: &'a M, key: &str) -> Option<&'a str> {
    meta.annotation_value(key)
}

/// An object's label by key (`meta` as for [`annotation`]).
pub fn label<'a, M: ObjectMaps + ?Sized>(meta: &'a M, key: &str) -> Option<&'a str> {
    meta.label_value(key)
}

/// Metadata that holds labels and annotations: k8s-openapi's `ObjectMeta`, and a VM's or VMI's
/// [`Meta`](super::Meta).
pub trait ObjectMaps {
    /// A label's value.
    fn label_value(&self, key: &str) -> Option<&str>;
    /// An annotation's value.
    fn annotation_value(&self, key: &str) -> Option<&str>;
}

impl ObjectMaps for k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation_value(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// Find a condition by type.
pub(crate) fn find_condition<'a>(
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

    fn small(pairs: &[(&str, &str)]) -> SmallMap<String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_small_map_is_sorted_and_the_last_duplicate_wins() {
        let map = small(&[("b", "1"), ("a", "2"), ("b", "3"), ("c", "4"), ("a", "5")]);
        let pairs: Vec<(&str, &str)> = map.iter().map(|(k, v)| (&k[..], &v[..])).collect();
        assert_eq!(pairs, [("a", "5"), ("b", "3"), ("c", "4")]);
        assert_eq!(map.get("b").map(String::as_str), Some("3"));
        // Sorted input is kept as it came, with no spare slot.
        let sorted = small(&[("a", "1"), ("b", "2")]).into_pairs();
        assert_eq!((sorted.len(), sorted.capacity()), (2, 2));
    }

    #[test]
    fn the_well_known_keys_are_sorted_and_unique() {
        assert!(KNOWN_STRINGS.is_sorted_by(|a, b| a < b));
    }

    #[test]
    fn a_well_known_key_is_static_and_any_other_is_copied() {
        use crate::api::{annotations, labels};
        for known in [
            labels::CREATED_BY,
            labels::VMI_ID,
            annotations::DOMAIN,
            annotations::DEFAULT_CONTAINER,
            annotations::VM_GENERATION,
            crate::launcher::resources::KVM_DEVICE,
            "cpu",
        ] {
            assert!(KnownStr::from(known).is_static(), "{known}");
            assert!(KnownStr::from(known.to_string()).is_static(), "{known}");
        }
        let other = KnownStr::from("example.com/team");
        assert!(!other.is_static());
        assert_eq!(
            (other.as_str(), other.to_string()),
            ("example.com/team", "example.com/team".into())
        );
        // Decoding looks the key up too, escaped or not.
        let map: SmallMap<String> = serde_json::from_str(
            r#"{"kubevirt.io/domain":"a","vm.kubevirt.io\/name":"b","x":"c"}"#,
        )
        .unwrap();
        let statics: Vec<bool> = map.keys().map(KnownStr::is_static).collect();
        assert_eq!(statics, [true, true, false]);
        assert_eq!(
            map.get("vm.kubevirt.io/name").map(String::as_str),
            Some("b")
        );
    }

    #[test]
    fn a_condition_keeps_kubevirts_words_static_and_reads_back_as_written() {
        let text = r#"{"type":"LiveMigratable","status":"False","reason":"InterfaceNotLiveMigratable","message":"cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network","lastProbeTime":null,"lastTransitionTime":"2026-12-07T21:44:03Z"}"#;
        let c: Condition = serde_json::from_str(text).unwrap();
        let words = [
            Some(&c.type_),
            Some(&c.status),
            c.reason.as_ref(),
            c.message.as_ref(),
        ];
        assert!(
            words.iter().all(|w| w.is_some_and(KnownStr::is_static)),
            "{c:?}"
        );
        assert_eq!(serde_json::to_string(&c).unwrap(), text);
        let other: Condition = serde_json::from_value(
            json!({"type": "example.com/Custom", "status": "True", "message": "disk 3 of 4"}),
        )
        .unwrap();
        assert!(!other.type_.is_static() && other.status.is_static());
        let wrong = serde_json::from_value::<Condition>(json!({"type": 1, "status": "True"}));
        let err = wrong.unwrap_err().to_string();
        assert!(
            err.contains("invalid type: integer `1`, expected a string"),
            "{err}"
        );
        assert_eq!(
            (other.type_.as_str(), other.message.as_deref()),
            ("example.com/Custom", Some("disk 3 of 4"))
        );
    }

    #[test]
    fn a_key_orders_and_compares_as_its_text_wherever_it_lives() {
        let (known, copied) = (
            KnownStr::from("kubevirt.io/domain"),
            KnownStr::from("kubevirt.io/a"),
        );
        assert!(copied < known && known == KnownStr::from("kubevirt.io/domain".to_string()));
        assert!(known == "kubevirt.io/domain" && known == *"kubevirt.io/domain");
        let map = small(&[
            ("kubevirt.io/domain", "1"),
            ("kubevirt.io/a", "2"),
            ("zz", "3"),
        ]);
        let keys: Vec<&str> = map.keys().map(KnownStr::as_str).collect();
        assert_eq!(keys, ["kubevirt.io/a", "kubevirt.io/domain", "zz"]);
        assert_eq!(String::from(known), "kubevirt.io/domain");
    }

    #[test]
    fn a_small_map_is_a_json_object_both_ways() {
        assert_eq!(serde_json::to_value(small(&[])).unwrap(), json!({}));
        let map = small(&[("z", "1"), ("a", "2")]);
        assert_eq!(serde_json::to_string(&map).unwrap(), r#"{"a":"2","z":"1"}"#);
        let back: SmallMap<String> = serde_json::from_str(r#"{"z":"1","a":"2"}"#).unwrap();
        assert_eq!(back, map);
        let yaml: SmallMap<String> = serde_yaml::from_str("z: '1'\na: '2'\n").unwrap();
        assert_eq!(yaml, map);
        for wrong in [
            json!([["a", "1"]]),
            json!("a"),
            json!(null),
            json!({"a": 1}),
        ] {
            let err = serde_json::from_value::<SmallMap<String>>(wrong.clone()).unwrap_err();
            assert!(err.to_string().contains("invalid type"), "{wrong}: {err}");
        }
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
        assert!(Extra::from(serde_json::Map::new()).0.is_none());
        assert_eq!(format!("{:?}", Extra::new()), "{}");
    }

    #[test]
    fn may_have_key_is_false_only_when_the_text_lacks_the_quoted_key() {
        let text = r#"{"name":"a","containerDisk":{"image":"xmemoryDump"},"memoryDumpX":1}"#;
        let m: Modelled = serde_json::from_str(text).expect("decodes");
        assert!(
            !m.extra.may_have_key("memoryDump"),
            "a longer word is not the key"
        );
        assert!(!m.extra.holds_parsed_map(), "the check parses nothing");
        assert!(m.extra.may_have_key("containerDisk") && m.extra.may_have_key("image"));
        let dump: Modelled =
            serde_json::from_str(r#"{"memoryDump":{"claimName":"c"}}"#).expect("decodes");
        assert!(dump.extra.may_have_key("memoryDump"));
        let value: Modelled = serde_json::from_str(r#"{"image":"memoryDump"}"#).expect("decodes");
        assert!(
            value.extra.may_have_key("memoryDump"),
            "a value alike: parse to be sure"
        );
        assert!(!Modelled::default().extra.may_have_key("memoryDump"));
        let mut written = Modelled::default();
        written.extra.insert("other".into(), json!(1));
        assert!(
            written.extra.may_have_key("memoryDump"),
            "a parsed map: no shortcut"
        );
    }

    #[test]
    fn field_reads_one_field_and_parses_only_when_the_text_may_hold_it() {
        let text = r#"{"name":"a","containerDisk":{"image":"memoryDumpX"}}"#;
        let m: Modelled = serde_json::from_str(text).expect("decodes");
        assert_eq!(m.extra.field("memoryDump", |d| Some(d.clone())), None);
        assert!(!m.extra.holds_parsed_map(), "an absent key parses nothing");
        let image = m
            .extra
            .field("containerDisk", |d| d["image"].as_str().map(str::to_owned));
        assert_eq!(image.as_deref(), Some("memoryDumpX"));
        assert!(
            !m.extra.holds_parsed_map(),
            "a read keeps no map in the copy"
        );
        let alike: Modelled = serde_json::from_str(r#"{"image":"memoryDump"}"#).expect("decodes");
        assert_eq!(alike.extra.field("memoryDump", |_| Some(())), None);
        let mut written = Modelled::default();
        written
            .extra
            .insert("memoryDump".into(), json!({"claimName": "c"}));
        let claim = written
            .extra
            .field("memoryDump", |d| d["claimName"].as_str().map(str::to_owned));
        assert_eq!(claim.as_deref(), Some("c"));
    }

    #[test]
    fn a_copy_keeps_the_text_and_parses_on_the_first_read() {
        let text = r#"{"name":"a","disk":{"bus":"virtio"},"serial":"x1"}"#;
        let decoded: Modelled = serde_json::from_str(text).expect("decodes");
        let fields = decoded.extra.0.as_ref().expect("fields");
        assert_eq!(
            fields.text.as_deref(),
            Some(r#"{"disk":{"bus":"virtio"},"serial":"x1"}"#)
        );
        assert!(fields.map.get().is_none(), "not parsed until read");
        // Equality, encoding and Debug read without keeping a map.
        let copy = decoded.clone();
        assert_eq!(copy, decoded);
        assert_eq!(serde_json::to_string(&copy).expect("encodes"), text);
        assert!(format!("{copy:?}").contains("virtio"));
        assert!(copy.extra.0.as_ref().unwrap().map.get().is_none());
        // `read` answers from a fresh parse and keeps nothing (the read for shared copies).
        let bus = copy
            .extra
            .read(|m| m["disk"]["bus"].as_str().map(str::to_string));
        assert_eq!(bus.as_deref(), Some("virtio"));
        assert!(copy.extra.0.as_ref().unwrap().map.get().is_none());
        assert!(Extra::new().read(|m| m.is_empty()));
        // A read through Deref parses once and keeps it; `read` then uses the kept map.
        assert_eq!(copy.extra["disk"]["bus"], json!("virtio"));
        assert!(copy.extra.0.as_ref().unwrap().map.get().is_some());
        assert!(copy.extra.read(|m| m.contains_key("serial")));
        // A clone of a read copy is text only again.
        assert!(copy.clone().extra.0.unwrap().map.get().is_none());
    }

    /// Decoding writes the text `Extra::from` would write from the decoded map, from JSON and
    /// from YAML, and fails where decoding the map fails.
    #[test]
    fn decoding_writes_the_text_of_the_decoded_map() {
        let via_map = |m: serde_json::Map<String, serde_json::Value>| {
            Extra::from(m).0.and_then(|f| f.text).map(String::from)
        };
        let text_of = |e: &Extra| {
            e.0.as_ref()
                .and_then(|f| f.text.as_deref())
                .map(String::from)
        };
        let json_doc = r#"{"name":"a","s":"q\"u\u00e9\n","n":[-1,18446744073709551615,0.5,1e-7],
            "o":{"z":{},"a":[],"b":[[null,true,false]]},"e":""}"#;
        let m: Modelled = serde_json::from_str(json_doc).expect("decodes");
        let mut map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(json_doc).expect("map");
        map.shift_remove("name");
        assert_eq!(text_of(&m.extra), via_map(map.clone()));
        let yaml_doc = "name: a\nf: .nan\ng: 2.5\nlist: [1, x, ~]\nnested: {k: {j: yes}}\n";
        let m: Modelled = serde_yaml::from_str(yaml_doc).expect("yaml decodes");
        let mut ymap: serde_json::Map<String, serde_json::Value> =
            serde_yaml::from_str(yaml_doc).expect("yaml map");
        ymap.shift_remove("name");
        assert_eq!(text_of(&m.extra), via_map(ymap));
        assert_eq!(m.extra["f"], serde_json::Value::Null);
        // No unmodelled field: nothing allocated.
        let m: Modelled = serde_json::from_str(r#"{"name":"a"}"#).expect("decodes");
        assert!(m.extra.0.is_none());
        // A duplicated key reads as the map reads it (the last value, the first position).
        let m: Modelled = serde_json::from_str(r#"{"k":1,"j":2,"k":3}"#).expect("decodes");
        let want: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(r#"{"k":1,"j":2,"k":3}"#).expect("map");
        assert_eq!(*m.extra, want);
        assert_eq!(
            serde_json::to_string(&m).expect("encodes"),
            r#"{"k":3,"j":2}"#
        );
        // What the map refuses, decoding refuses.
        let bad = "name: a\nm: {[1, 2]: x}\n";
        assert!(serde_yaml::from_str::<serde_json::Map<String, serde_json::Value>>(bad).is_err());
        assert!(serde_yaml::from_str::<Modelled>(bad).is_err());
    }

    /// The text is parsed again on each copy's first read, so a number must survive text ->
    /// map -> text unchanged: serde_json's default float parser can be off by one unit in the
    /// last place for rare values (this one read as `...823e-75`), hence `float_roundtrip`.
    #[test]
    fn floats_survive_decode_copy_read_and_encode_exactly() {
        let text = r#"{"name":"a","ratio":1.0715660391465826e-75,"w":[0.1,2.5e300,-7.0e-310]}"#;
        let decoded: Modelled = serde_json::from_str(text).expect("decodes");
        let copy = decoded.clone();
        assert_eq!(copy.extra["ratio"].as_f64(), Some(1.0715660391465826e-75));
        let again = copy.clone();
        let encoded = serde_json::to_string(&again).expect("encodes");
        let want = r#"{"name":"a","ratio":1.0715660391465826e-75,"w":[0.1,2.5e+300,-7e-310]}"#;
        assert_eq!(encoded, want);
        let mut written = copy.clone();
        written.extra.insert("k".into(), json!(true));
        let encoded = serde_json::to_string(&written.clone()).expect("encodes");
        assert!(encoded.contains("1.0715660391465826e-75"), "{encoded}");
    }

    #[test]
    fn a_write_is_kept_by_copies_and_encodings() {
        let mut m: Modelled =
            serde_json::from_str(r#"{"disk":{"bus":"virtio"},"serial":"x1"}"#).expect("decodes");
        let before = m.clone();
        m.extra.insert("cache".into(), json!("none"));
        m.extra["disk"]["bus"] = json!("sata");
        let want = json!({"disk": {"bus": "sata"}, "serial": "x1", "cache": "none"});
        assert_eq!(serde_json::to_value(&m).expect("encodes"), want);
        let copy = m.clone();
        assert_eq!(serde_json::to_value(&copy).expect("encodes"), want);
        assert_eq!(copy, m);
        assert_ne!(copy, before);
        // The same fields in another order are equal (their texts differ).
        let reordered: Modelled = serde_json::from_value(
            json!({"cache": "none", "serial": "x1", "disk": {"bus": "sata"}}),
        )
        .expect("decodes");
        assert_eq!(reordered, copy);
        // Emptied by writes: equal to none, and a copy allocates nothing.
        let mut emptied = before.clone();
        emptied.extra.clear();
        assert_eq!(emptied, Modelled::default());
        assert!(emptied.clone().extra.0.is_none());
    }

    /// Shaped like `status`: a list field beside flattened unmodelled fields (so it decodes
    /// through serde's buffered content, as in every `crate::api` type).
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    struct Listed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interfaces: Option<JsonList>,
        #[serde(flatten)]
        extra: Extra,
    }

    #[test]
    fn a_list_survives_a_round_trip_as_its_text() {
        let text = r#"{"interfaces":[{"name":"default","mac":"02:00:00:00:00:01","ipAddresses":["10.0.0.4"],"queueCount":1,"x":null}],"phase":"Running"}"#;
        let l: Listed = serde_json::from_str(text).expect("decodes");
        let list = l.interfaces.as_ref().expect("kept");
        assert_eq!(
            list.as_json(),
            r#"[{"name":"default","mac":"02:00:00:00:00:01","ipAddresses":["10.0.0.4"],"queueCount":1,"x":null}]"#
        );
        assert_eq!(list.entries()[0]["ipAddresses"][0], json!("10.0.0.4"));
        assert_eq!(serde_json::to_string(&l).expect("encodes"), text);
        let yaml = serde_yaml::to_string(&l).expect("yaml");
        let back: Listed = serde_yaml::from_str(&yaml).expect("yaml decodes");
        assert_eq!(back, l);
        let empty: Listed = serde_json::from_str(r#"{"interfaces":[]}"#).expect("decodes");
        assert_eq!(
            empty.interfaces.expect("kept").entries(),
            Vec::<serde_json::Value>::new()
        );
    }

    #[test]
    fn lists_are_equal_when_their_entries_are() {
        let a = JsonList::from(vec![json!({"name": "a", "phase": "Ready"})]);
        let reordered: JsonList =
            serde_json::from_str(r#"[{"phase":"Ready","name":"a"}]"#).expect("decodes");
        assert_ne!(a.as_json(), reordered.as_json());
        assert_eq!(a, reordered, "key order within an entry does not matter");
        assert_ne!(a, JsonList::from(vec![json!({"name": "a"})]));
        let two = JsonList::from(vec![json!({"name": "a"}), json!({"name": "b"})]);
        let swapped = JsonList::from(vec![json!({"name": "b"}), json!({"name": "a"})]);
        assert_ne!(two, swapped, "the entries' order does");
    }

    #[test]
    fn a_list_field_holding_anything_but_an_array_is_an_error() {
        for bad in [r#"{"interfaces":{"name":"a"}}"#, r#"{"interfaces":"a"}"#] {
            let err = serde_json::from_str::<Listed>(bad).expect_err(bad);
            assert!(
                err.to_string().contains("expected a JSON array"),
                "{bad}: {err}"
            );
        }
        let absent: Listed = serde_json::from_str(r#"{"interfaces":null}"#).expect("null");
        assert_eq!(absent.interfaces, None);
    }

    #[test]
    fn meta_maps_move_out_of_object_meta_and_back() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let whole = ObjectMeta {
            name: Some("a".into()),
            labels: Some([("b".to_string(), "2".to_string()), ("a".into(), "1".into())].into()),
            annotations: Some(Default::default()),
            ..Default::default()
        };
        let mut rest = whole.clone();
        let maps = MetaMaps::take_from(&mut rest);
        assert_eq!((&rest.labels, &rest.annotations), (&None, &None));
        assert_eq!(rest.name.as_deref(), Some("a"));
        let labels = maps.labels.as_ref().expect("labels");
        assert_eq!(labels.get("a").map(String::as_str), Some("1"));
        assert_eq!(
            maps.annotations.as_ref().map(|a| a.len()),
            Some(0),
            "empty stays present"
        );
        assert_eq!(maps.restored(rest), whole);
        assert_eq!(
            MetaMaps::default().restored(ObjectMeta::default()),
            ObjectMeta::default()
        );
    }
}
