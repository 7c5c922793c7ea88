//! The virt-launcher pods as the controllers' informer caches them: decoded from the watch into
//! only what the VM and VMI decisions read.
//!
//! A virt-launcher pod carries a dozen volumes (container disks, sockets, hotplug, private and
//! public directories; k8s-openapi's `Volume` is 3 KiB inline), several containers and init
//! containers with their environment, mounts and security contexts: most of a cached pod's
//! heap (`benches/cache_memory.rs`), and, decoded into k8s-openapi's wide structs only to be
//! dropped, the largest single cost of the controller's watch decoding ("Fourth pass" in
//! `git show 6c3c857:docs/performance.md`).
//! Of the volumes the decisions read only names and claims; of the rest nothing. They read:
//! - the metadata (without `managedFields`; its labels and annotations kept beside it);
//! - `spec.nodeName` (the current pod is the newest on the VMI's node, controller.go:323-359),
//!   the tolerations (a hotplug attachment pod copies its launcher pod's, template.go:1083),
//!   of a launcher pod's claim volumes their name and claim (`GetHotplugVolumes`,
//!   volume.go:77-106, matches the VMI's hotpluggable volumes by name, and the renderer gives
//!   each claim, DataVolume and ephemeral volume a claim volume of its name,
//!   rendervolumes.go:595-640; a VMI volume named like one of the launcher's own volumes
//!   would make the pod's volume names collide, which the API server refuses), and of an
//!   attachment pod every volume's name and claim (`podVolumesMatchesReadyVolumes`,
//!   volume-hotplug.go:394-410, counts them all),
//!   the `compute` container's image (the outdated-launcher label, lifecycle.go:287-294) and
//!   its resource requests (the memory request in the progress lines);
//! - of the status: the phase, every condition (copied to the VMI's conditions,
//!   lifecycle.go:1398-1466, and the readiness gate, lifecycle.go:926-976), the QOS class
//!   (lifecycle.go:360-367), and of each container status its name, readiness and state
//!   (`IsPodReady`, `isComputeContainerDown`/`Failed`, controller.go:492-545; the image pull
//!   errors, lifecycle.go:978-992). Init containers matter only while they wait (an image pull
//!   error is a waiting state), so only the waiting init container statuses are kept.
//!
//! Every write to a pod is a patch of metadata or status, never a copy of the cached object, so
//! nothing is lost on the server; the inspector reads pods from the API server, not from this
//! cache. A reader of a pod field not listed here must add it to the decoding below; the unit
//! tests check every `podutil` answer on cached copies against the whole pod.
//!
//! So the pod informer watches and caches [`CachedPod`], whose decoding keeps exactly that and
//! skips the rest of the JSON without building it (`managedFields` too, when read through
//! [`crate::runtime::wire::WithoutManagedFields`] as the informer and the create answer read
//! it; decoded alone, it is decoded and dropped after). Left out of a container status: the
//! container ID, image and image ID, the last state, the allocated resources and mounts (about
//! 3 KB of a running launcher pod's status, "Eighth pass" in `git show
//! 6c3c857:docs/performance.md`). KubeVirt's informers cache whole pods (client-go
//! `SetTransform` is the way to trim them there; a narrower decode has no client-go
//! counterpart).
//!
//! A [`CachedPod`] holds those fields in a layout of its own: k8s-openapi's `Pod`, `Container`
//! and `ContainerStatus` take 2,176, 2,120 and 752 bytes inline whatever they hold, more than
//! half of a cached launcher pod's heap when it was cached as a `Pod`
//! (`benches/cache_memory.rs`). Its labels and annotations are sorted lists of pairs beside the
//! metadata ([`SmallMap`]; a `BTreeMap` allocates 544 bytes a node, and a launcher pod's dozen
//! annotations took three nodes), read through [`CachedPod::label`] and
//! [`CachedPod::annotation`]; its [`kube::Resource::meta`] has neither. A reconcile reads its
//! VMI's pods as the [`Pod`]s [`CachedPod::to_pod`] builds, so every reader of a pod reads one
//! type.

use super::podutil::COMPUTE_CONTAINER;
use crate::api::common::{KnownStr, MetaMaps, SmallMap};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStatus, PersistentVolumeClaimVolumeSource, Pod,
    PodCondition, PodSpec, PodStatus, ResourceRequirements, Toleration, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;

/// A pod as the pod informer caches it: what the controllers read of it (module docs).
/// [`CachedPod::to_pod`] gives it as a [`Pod`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedPod {
    /// The metadata without `managedFields`, labels and annotations ([`kube::Resource::meta`]).
    metadata: ObjectMeta,
    /// `metadata.labels` and `metadata.annotations`, kept beside it as sorted lists: a launcher
    /// pod's twelve annotations took three 640-byte `BTreeMap` nodes, its six labels one.
    /// Read through [`CachedPod::label`], [`CachedPod::annotation`] and [`CachedPod::to_pod`].
    maps: MetaMaps,
    spec: Option<CachedSpec>,
    status: Option<CachedStatus>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct CachedSpec {
    node_name: Option<String>,
    /// The `compute` container, if the pod has one.
    compute: Option<CachedCompute>,
    tolerations: Option<Vec<Toleration>>,
    volumes: Option<Vec<CachedVolume>>,
}

/// The `compute` container's image and, when it has `resources`, their requests.
#[derive(Clone, Debug, Default, PartialEq)]
struct CachedCompute {
    image: Option<String>,
    /// As a sorted list ([`SmallMap`]): a launcher's half a dozen requests fill half of the
    /// eleven-slot node a `BTreeMap` would allocate.
    resources: Option<Option<SmallMap<Quantity>>>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct CachedVolume {
    name: String,
    claim: Option<PersistentVolumeClaimVolumeSource>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct CachedStatus {
    phase: Option<String>,
    conditions: Option<Vec<CachedCondition>>,
    qos_class: Option<String>,
    container_statuses: Option<Vec<CachedContainerStatus>>,
    /// The waiting ones only; `None` when none waits.
    init_container_statuses: Option<Vec<CachedContainerStatus>>,
}

/// A pod condition, every field kept: k8s-openapi's `PodCondition` takes 160 bytes inline and
/// a string each for its type and status; here the types and statuses a pod has are static
/// strings ([`KnownStr`]), 144 bytes inline and a launcher pod's six conditions allocate
/// nothing for them.
#[derive(Clone, Debug, Default, PartialEq)]
struct CachedCondition {
    type_: KnownStr,
    status: KnownStr,
    reason: Option<Box<str>>,
    message: Option<Box<str>>,
    last_probe_time: Option<Time>,
    last_transition_time: Option<Time>,
    observed_generation: Option<i64>,
}

impl CachedCondition {
    fn of(c: PodCondition) -> Self {
        CachedCondition {
            type_: c.type_.into(),
            status: c.status.into(),
            reason: c.reason.map(String::into_boxed_str),
            message: c.message.map(String::into_boxed_str),
            last_probe_time: c.last_probe_time,
            last_transition_time: c.last_transition_time,
            observed_generation: c.observed_generation,
        }
    }

    fn to_condition(&self) -> PodCondition {
        PodCondition {
            type_: self.type_.to_string(),
            status: self.status.to_string(),
            reason: self.reason.as_deref().map(str::to_string),
            message: self.message.as_deref().map(str::to_string),
            last_probe_time: self.last_probe_time.clone(),
            last_transition_time: self.last_transition_time.clone(),
            observed_generation: self.observed_generation,
        }
    }
}

/// A container status without its IDs, images, last state, resources and mounts; a
/// terminated state without its container ID.
#[derive(Clone, Debug, Default, PartialEq)]
struct CachedContainerStatus {
    name: String,
    ready: bool,
    restart_count: i32,
    started: Option<bool>,
    state: Option<ContainerState>,
}

impl CachedPod {
    /// A pod of `metadata` alone, as cached (its labels and annotations beside it).
    pub fn from_metadata(mut metadata: ObjectMeta) -> Self {
        CachedPod {
            maps: MetaMaps::take_from(&mut metadata),
            metadata,
            ..Default::default()
        }
    }

    /// The value of the label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.maps.labels.as_ref()?.get(key).map(String::as_str)
    }

    /// The value of the annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.maps.annotations.as_ref()?.get(key).map(String::as_str)
    }

    /// The pod as k8s-openapi's [`Pod`], every field the cache keeps set as the whole pod has
    /// it (only the `compute` container; of a launcher pod only its claim volumes).
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: self.maps.restored(self.metadata.clone()),
            spec: self.spec.as_ref().map(CachedSpec::to_spec),
            status: self.status.as_ref().map(CachedStatus::to_status),
        }
    }
}

impl From<CachedPod> for Pod {
    fn from(pod: CachedPod) -> Pod {
        pod.to_pod()
    }
}

/// As the [`Pod`] it reads as (the flight recorder records cached objects so).
impl Serialize for CachedPod {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_pod().serialize(serializer)
    }
}

impl CachedSpec {
    fn to_spec(&self) -> PodSpec {
        PodSpec {
            node_name: self.node_name.clone(),
            containers: self
                .compute
                .iter()
                .map(|c| Container {
                    name: COMPUTE_CONTAINER.into(),
                    image: c.image.clone(),
                    resources: c.resources.as_ref().map(|requests| ResourceRequirements {
                        requests: requests.as_ref().map(SmallMap::to_btree_map),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            tolerations: self.tolerations.clone(),
            volumes: self.volumes.as_ref().map(|vs| {
                vs.iter()
                    .map(|v| Volume {
                        name: v.name.clone(),
                        persistent_volume_claim: v.claim.clone(),
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }
}

impl CachedStatus {
    fn to_status(&self) -> PodStatus {
        let statuses = |s: &Option<Vec<CachedContainerStatus>>| {
            s.as_ref()
                .map(|s| s.iter().map(CachedContainerStatus::to_status).collect())
        };
        PodStatus {
            phase: self.phase.clone(),
            conditions: self
                .conditions
                .as_ref()
                .map(|c| c.iter().map(CachedCondition::to_condition).collect()),
            qos_class: self.qos_class.clone(),
            container_statuses: statuses(&self.container_statuses),
            init_container_statuses: statuses(&self.init_container_statuses),
            ..Default::default()
        }
    }
}

impl CachedContainerStatus {
    fn to_status(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            ready: self.ready,
            restart_count: self.restart_count,
            started: self.started,
            state: self.state.clone(),
            ..Default::default()
        }
    }
}

/// The JSON of a pod, with only the fields [`CachedPod`] keeps; serde skips every other field
/// without building it (`metadata.managedFields`: see the module docs). Absent and `null`
/// fields decode as k8s-openapi's `Pod` decodes them, so no pod that decodes as a `Pod` fails
/// here.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: Option<ObjectMeta>,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    conditions: Option<Vec<PodCondition>>,
    #[serde(default)]
    qos_class: Option<String>,
    #[serde(default)]
    container_statuses: Option<Vec<WireContainerStatus>>,
    #[serde(default)]
    init_container_statuses: Option<Vec<WireContainerStatus>>,
}

/// A container status with what the decisions read; the boolean and count fields decode as
/// k8s-openapi's do (absent or `null` → `false` / `0`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainerStatus {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    ready: Option<bool>,
    #[serde(default)]
    restart_count: Option<i32>,
    #[serde(default)]
    started: Option<bool>,
    #[serde(default)]
    state: Option<ContainerState>,
}

impl WireContainerStatus {
    fn into_cached(self) -> CachedContainerStatus {
        let mut state = self.state;
        if let Some(t) = state.as_mut().and_then(|s| s.terminated.as_mut()) {
            t.container_id = None;
        }
        CachedContainerStatus {
            name: self.name.unwrap_or_default(),
            ready: self.ready.unwrap_or_default(),
            restart_count: self.restart_count.unwrap_or_default(),
            started: self.started,
            state,
        }
    }

    fn is_waiting(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.waiting.is_some())
    }
}

impl WireStatus {
    fn into_cached(self) -> CachedStatus {
        CachedStatus {
            phase: self.phase,
            conditions: self
                .conditions
                .map(|c| c.into_iter().map(CachedCondition::of).collect()),
            qos_class: self.qos_class,
            container_statuses: self.container_statuses.map(|c| {
                c.into_iter()
                    .map(WireContainerStatus::into_cached)
                    .collect()
            }),
            init_container_statuses: self.init_container_statuses.and_then(|c| {
                let waiting: Vec<CachedContainerStatus> = c
                    .into_iter()
                    .filter(WireContainerStatus::is_waiting)
                    .map(WireContainerStatus::into_cached)
                    .collect();
                (!waiting.is_empty()).then_some(waiting)
            }),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Option<Vec<WireContainer>>,
    #[serde(default)]
    tolerations: Option<Vec<Toleration>>,
    #[serde(default)]
    volumes: Option<Vec<WireVolume>>,
}

/// A pod volume: its name, and the claim of a `persistentVolumeClaim` volume (what hotplug
/// reads: which VMI volumes the launcher pod has, which claims an attachment pod mounts).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireVolume {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

#[derive(Deserialize)]
struct WireContainer {
    /// k8s-openapi reads an absent or `null` name as `""`.
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    resources: Option<WireResources>,
}

#[derive(Deserialize)]
struct WireResources {
    #[serde(default)]
    requests: Option<SmallMap<Quantity>>,
}

/// A virt-launcher pod (label `kubevirt.io: virt-launcher`, template.go:1196), not a hotplug
/// attachment pod (`hotplug-disk`, template.go:1041).
fn is_launcher(metadata: &ObjectMeta) -> bool {
    let labels = metadata.labels.as_ref();
    labels
        .and_then(|l| l.get("kubevirt.io"))
        .map(String::as_str)
        == Some("virt-launcher")
}

impl WireSpec {
    fn into_cached(self, launcher: bool) -> CachedSpec {
        CachedSpec {
            node_name: self.node_name,
            compute: self
                .containers
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.name.as_deref() == Some(COMPUTE_CONTAINER))
                .map(|c| CachedCompute {
                    image: c.image,
                    resources: c.resources.map(|r| r.requests),
                }),
            tolerations: self.tolerations,
            volumes: self.volumes.map(|vs| {
                vs.into_iter()
                    .filter(|v| !launcher || v.persistent_volume_claim.is_some())
                    .map(|v| CachedVolume {
                        name: v.name.unwrap_or_default(),
                        claim: v.persistent_volume_claim,
                    })
                    .collect()
            }),
        }
    }
}

impl<'de> Deserialize<'de> for CachedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let mut metadata = wire.metadata.unwrap_or_default();
        let launcher = is_launcher(&metadata);
        metadata.managed_fields = None;
        Ok(CachedPod {
            spec: wire.spec.map(|s| s.into_cached(launcher)),
            status: wire.status.map(WireStatus::into_cached),
            ..CachedPod::from_metadata(metadata)
        })
    }
}

/// The pods' API (`v1`, `pods`), so that an `Api<CachedPod>` lists and watches pods.
impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;
    fn kind(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT.into()
    }
    /// Without the labels and annotations ([`CachedPod::label`], [`CachedPod::annotation`]).
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The UID of a pod's controller owner reference: the `controller-uid` index, which finds the
/// launcher pods of a VMI and the attachment pods of a launcher pod. KubeVirt reads a
/// namespace index and keeps the pods the VMI controls (`vmi.go` `listPodsFromNamespace` +
/// `controller.IsControlledBy`); indexing by the controller UID gives the same pods without
/// the namespace walk.
pub(crate) static CONTROLLER_UID: crate::runtime::index::IndexFn<CachedPod> =
    crate::runtime::index::IndexFn {
        name: "controller-uid",
        value: |pod| crate::api::key::controller_of(&pod.metadata).map(|r| r.uid.clone()),
    };

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachineInstance;
    use crate::launcher::render_launch_manifest;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use rand::SeedableRng;
    use serde_json::json;
    use std::sync::Arc;

    fn cached(json: &serde_json::Value) -> Pod {
        serde_json::from_value::<CachedPod>(json.clone())
            .expect("decode")
            .to_pod()
    }

    /// A launcher pod as the renderer makes it for a container-disk VMI (volumes, environment
    /// and mounts) with a hook sidecar, scheduled and running.
    fn rendered_launcher_pod() -> Pod {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "cache-vm", "namespace": "default", "uid": "vmi-uid"},
            "spec": {
                "domain": {
                    "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    "resources": {"requests": {"memory": "128Mi"}}
                },
                "volumes": [{"name": "root",
                             "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
            }
        }))
        .expect("VMI");
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut pod =
            render_launch_manifest(&vmi, &Default::default(), &Default::default(), &mut rng)
                .expect("render");
        pod.metadata.name = Some("virt-launcher-cache-vm-abcde".into());
        pod.metadata.uid = Some("pod-uid".into());
        pod.metadata.resource_version = Some("42".into());
        pod.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kube-scheduler".into()),
            ..Default::default()
        }]);
        let spec = pod.spec.as_mut().expect("spec");
        spec.node_name = Some("node01".into());
        // A hook sidecar before the compute container (the renderer puts its own after it).
        spec.containers.insert(
            0,
            Container {
                name: "hook-sidecar-0".into(),
                image: Some("sidecar-shim:v1".into()),
                ..Default::default()
            },
        );
        pod.status = Some(
            serde_json::from_value(json!({
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "compute", "ready": true, "restartCount": 0,
                                       "image": "virt-launcher", "imageID": "",
                                       "state": {"running": {"startedAt": "2026-12-02T10:00:00Z"}}}]
            }))
            .expect("status"),
        );
        pod
    }

    /// Conditions keep every field; the types and statuses a pod has allocate nothing, others
    /// are kept as they came.
    #[test]
    fn conditions_keep_every_field_and_borrow_the_known_words() {
        let pod = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": "2026-12-07T16:00:00Z", "reason": "R", "message": "M",
             "observedGeneration": 3},
            {"type": "kubevirt.io/virtual-machine-unpaused", "status": "False"},
            {"type": "example.com/gate", "status": "Maybe"}
        ]}});
        let whole: Pod = serde_json::from_value(pod.clone()).expect("pod");
        assert_eq!(cached(&pod).status, whole.status);
        let decoded: CachedPod = serde_json::from_value(pod).expect("decode");
        let kept = decoded
            .status
            .and_then(|s| s.conditions)
            .expect("conditions");
        assert!(
            kept[..2]
                .iter()
                .all(|c| c.type_.is_static() && c.status.is_static())
        );
        assert!(!kept[2].type_.is_static() && !kept[2].status.is_static());
    }

    /// Labels and annotations live beside the metadata, one slot a pair, and come back whole.
    #[test]
    fn labels_and_annotations_are_kept_as_small_maps_and_restored() {
        let pod = rendered_launcher_pod();
        let (labels, annotations) = (&pod.metadata.labels, &pod.metadata.annotations);
        let n_annotations = annotations
            .as_ref()
            .map_or(0, std::collections::BTreeMap::len);
        assert!(
            n_annotations > 1 && labels.as_ref().is_some_and(|l| l.len() > 1),
            "the rendered pod has labels and annotations"
        );
        let cached: CachedPod =
            serde_json::from_value(serde_json::to_value(&pod).unwrap()).expect("decode");
        let cached = Arc::unwrap_or_clone(crate::runtime::informer::cache_copy(cached));

        for (key, value) in labels.iter().flatten() {
            assert_eq!(cached.label(key), Some(value.as_str()), "label {key}");
        }
        for (key, value) in annotations.iter().flatten() {
            assert_eq!(
                cached.annotation(key),
                Some(value.as_str()),
                "annotation {key}"
            );
        }
        assert_eq!(
            (cached.label("absent"), cached.annotation("absent")),
            (None, None)
        );
        // Not in the metadata itself: readers go through `label` / `annotation`.
        let meta = kube::Resource::meta(&cached);
        assert_eq!((&meta.labels, &meta.annotations), (&None, &None));
        assert_eq!(meta.name, pod.metadata.name);

        let back = cached.to_pod();
        assert_eq!(
            (&back.metadata.labels, &back.metadata.annotations),
            (labels, annotations)
        );
        let pairs = cached
            .maps
            .annotations
            .clone()
            .expect("annotations")
            .into_pairs();
        assert_eq!(
            (pairs.len(), pairs.capacity()),
            (n_annotations, n_annotations)
        );
        // A pod without either keeps neither.
        let bare = CachedPod::from_metadata(ObjectMeta::default());
        assert_eq!(bare.to_pod().metadata, ObjectMeta::default());
    }

    #[test]
    fn a_launcher_pod_is_cached_with_its_metadata_status_node_and_compute_container() {
        let pod = rendered_launcher_pod();
        let spec = pod.spec.as_ref().expect("spec");
        assert!(
            spec.volumes.as_ref().is_some_and(|v| !v.is_empty()) && spec.containers.len() > 1,
            "the rendered pod has what the cache drops"
        );
        let compute = spec
            .containers
            .iter()
            .find(|c| c.name == COMPUTE_CONTAINER)
            .expect("compute container");
        assert!(compute.env.is_some() && compute.volume_mounts.is_some());

        let got = cached(&serde_json::to_value(&pod).expect("JSON"));

        let mut metadata = pod.metadata.clone();
        metadata.managed_fields = None;
        let want = Pod {
            metadata,
            spec: Some(PodSpec {
                node_name: Some("node01".into()),
                containers: vec![Container {
                    name: COMPUTE_CONTAINER.into(),
                    image: compute.image.clone(),
                    resources: compute.resources.as_ref().map(|r| ResourceRequirements {
                        requests: r.requests.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                tolerations: spec.tolerations.clone(),
                // Of each claim volume only its name and claim; no other volume.
                volumes: spec.volumes.as_ref().map(|vs| {
                    vs.iter()
                        .filter(|v| v.persistent_volume_claim.is_some())
                        .map(|v| Volume {
                            name: v.name.clone(),
                            persistent_volume_claim: v.persistent_volume_claim.clone(),
                            ..Default::default()
                        })
                        .collect()
                }),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: pod.status.as_ref().and_then(|s| s.conditions.clone()),
                container_statuses: Some(vec![ContainerStatus {
                    name: COMPUTE_CONTAINER.into(),
                    ready: true,
                    state: pod.status.as_ref().and_then(|s| {
                        s.container_statuses
                            .as_ref()
                            .and_then(|c| c[0].state.clone())
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        assert_eq!(got, want);
        // What the decisions and progress lines read from it.
        use crate::controller::vmi::podutil;
        assert_eq!(podutil::pod_node_name(&got), "node01");
        assert_eq!(
            podutil::compute_container_image(&got),
            compute.image.as_deref().unwrap_or_default()
        );
        assert_eq!(
            crate::cli::progress::compute_memory_request(&got),
            crate::cli::progress::compute_memory_request(&pod)
        );
        assert!(podutil::is_pod_ready(&got));
    }

    /// A launcher pod keeps its claim volumes only (name and claim), which is all that
    /// `GetHotplugVolumes` can match a VMI's hotpluggable volume to; an attachment pod keeps
    /// every volume's name and claim (`podVolumesMatchesReadyVolumes` counts them all).
    #[test]
    fn a_launcher_pod_keeps_its_claim_volumes_and_an_attachment_pod_all() {
        let pod = |app: &str| {
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid",
                    "labels": {"kubevirt.io": app}},
                "spec": {"containers": [], "volumes": [
                    {"name": "private", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
                    {"name": "hotplug-disks", "emptyDir": {}}]}})
        };
        let names = |p: &Pod| -> Vec<String> {
            let vs = p.spec.as_ref().and_then(|s| s.volumes.clone());
            vs.unwrap_or_default().into_iter().map(|v| v.name).collect()
        };
        let launcher = cached(&pod("virt-launcher"));
        assert_eq!(names(&launcher), ["data"]);
        let claim = launcher.spec.as_ref().and_then(|s| s.volumes.as_ref());
        let claim = claim.and_then(|v| v[0].persistent_volume_claim.clone());
        assert_eq!(claim.map(|c| c.claim_name), Some("data-pvc".to_string()));
        let attachment = cached(&pod("hotplug-disk"));
        assert_eq!(names(&attachment), ["private", "data", "hotplug-disks"]);
        // The hotplug volumes of a VMI are the same on the cached launcher pod as on the pod.
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
                {"name": "hot", "persistentVolumeClaim": {"claimName": "hot-pvc",
                    "hotpluggable": true}}]}}))
        .expect("VMI");
        let whole: Pod = serde_json::from_value(pod("virt-launcher")).expect("pod");
        let hot = |p: &Pod| -> Vec<String> {
            let vs = crate::controller::vmi::volume_hotplug::hotplug_volumes(&vmi, p);
            vs.into_iter().map(|v| v.name.clone()).collect()
        };
        assert_eq!(hot(&launcher), hot(&whole));
        assert_eq!(hot(&launcher), ["hot"]);
    }

    /// Launcher pod statuses as a kubelet reports them, with everything the cache drops (IDs,
    /// images, last states, IPs): starting, waiting on image pulls (init and regular), running
    /// with a sidecar not ready, the compute container terminated with and without an error,
    /// failed, succeeded.
    fn statuses() -> Vec<(&'static str, serde_json::Value)> {
        let cs = |name: &str, ready: bool, state: serde_json::Value| {
            json!({"name": name, "ready": ready, "restartCount": 1, "started": ready,
                   "containerID": format!("containerd://{name}-0123456789abcdef"),
                   "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                   "imageID": "quay.io/kubevirt/virt-launcher@sha256:0123456789abcdef",
                   "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                   "allocatedResources": {"memory": "1Gi"},
                   "state": state})
        };
        let running = json!({"running": {"startedAt": "2026-12-03T10:00:00Z"}});
        let waiting = |reason: &str| json!({"waiting": {"reason": reason, "message": format!("{reason}: quay.io/x")}});
        let terminated = |code: i32| {
            json!({"terminated": {"exitCode": code, "reason": "Completed",
            "containerID": "containerd://gone", "startedAt": "2026-12-03T10:00:00Z",
            "finishedAt": "2026-12-03T10:05:00Z"}})
        };
        let conditions = |ready: &str| {
            json!([
                {"type": "kubevirt.io/virtual-machine-unpaused", "status": "True", "reason": "NotPaused",
                 "message": "the virtual machine is not paused",
                 "lastTransitionTime": "2026-12-03T10:00:00Z"},
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": ready, "reason": "ContainersNotReady", "message": "containers with unready status: [compute]"}
            ])
        };
        let status =
            |phase: &str, ready: &str, init: serde_json::Value, regular: serde_json::Value| {
                json!({
                    "phase": phase, "conditions": conditions(ready), "qosClass": "Burstable",
                    "hostIP": "10.0.0.1", "hostIPs": [{"ip": "10.0.0.1"}], "podIP": "10.244.0.9",
                    "podIPs": [{"ip": "10.244.0.9"}], "startTime": "2026-12-03T10:00:00Z",
                    "initContainerStatuses": init, "containerStatuses": regular
                })
            };
        vec![
            (
                "pending, init image pull",
                status(
                    "Pending",
                    "False",
                    json!([
                        cs("guest-console-log", true, running.clone()),
                        cs("volumeroot", false, waiting("ErrImagePull"))
                    ]),
                    json!([cs("compute", false, waiting("PodInitializing"))]),
                ),
            ),
            (
                "pending, compute image back-off",
                status(
                    "Pending",
                    "False",
                    json!([cs("volumeroot", true, terminated(0))]),
                    json!([cs("compute", false, waiting("ImagePullBackOff"))]),
                ),
            ),
            (
                "running and ready",
                status(
                    "Running",
                    "True",
                    json!([
                        cs("guest-console-log", true, running.clone()),
                        cs("volumeroot", false, terminated(0))
                    ]),
                    json!([cs("compute", true, running.clone())]),
                ),
            ),
            (
                "running, a sidecar not ready",
                status(
                    "Running",
                    "False",
                    json!([]),
                    json!([
                        cs("hook-sidecar-0", false, running.clone()),
                        cs("compute", false, running.clone())
                    ]),
                ),
            ),
            (
                "running, istio not ready",
                status(
                    "Running",
                    "False",
                    json!(null),
                    json!([
                        cs("compute", true, running.clone()),
                        cs("istio-proxy", false, running.clone())
                    ]),
                ),
            ),
            (
                "compute exited cleanly",
                status(
                    "Running",
                    "False",
                    json!([]),
                    json!([cs("compute", false, terminated(0))]),
                ),
            ),
            (
                "compute failed",
                status(
                    "Running",
                    "False",
                    json!([]),
                    json!([cs("compute", false, terminated(1))]),
                ),
            ),
            (
                "failed",
                status(
                    "Failed",
                    "False",
                    json!([]),
                    json!([cs("compute", false, terminated(2))]),
                ),
            ),
            (
                "succeeded",
                status(
                    "Succeeded",
                    "False",
                    json!([]),
                    json!([cs("compute", false, terminated(0))]),
                ),
            ),
            ("no statuses yet", json!({"phase": "Pending"})),
        ]
    }

    /// Every answer the decisions and progress lines take from a pod is the same on the cached
    /// copy as on the whole pod (the contract of the module docs).
    #[test]
    fn every_pod_reading_answers_the_same_on_the_cached_copy() {
        use crate::api::common::Time;
        use crate::controller::vmi::{conditions, podutil};
        let base = serde_json::to_value(rendered_launcher_pod()).expect("JSON");
        let now = Time::now();
        for (case, status) in statuses() {
            let mut body = base.clone();
            body["status"] = status;
            let full: Pod = serde_json::from_value(body.clone())
                .unwrap_or_else(|e| panic!("{case}: a Pod decodes it: {e}"));
            let ours = cached(&body);
            assert_eq!(
                podutil::pod_phase(&ours),
                podutil::pod_phase(&full),
                "{case}"
            );
            assert_eq!(
                podutil::is_pod_ready(&ours),
                podutil::is_pod_ready(&full),
                "{case}"
            );
            assert_eq!(
                podutil::is_pod_down_or_going_down(&ours),
                podutil::is_pod_down_or_going_down(&full),
                "{case}"
            );
            assert_eq!(
                podutil::is_pod_failed_or_going_down(&ours),
                podutil::is_pod_failed_or_going_down(&full),
                "{case}"
            );
            assert_eq!(
                podutil::is_compute_container_failed(&ours),
                podutil::is_compute_container_failed(&full),
                "{case}"
            );
            assert_eq!(
                podutil::container_image_error(&ours),
                podutil::container_image_error(&full),
                "{case}"
            );
            assert_eq!(
                podutil::pod_qos_class(&ours),
                podutil::pod_qos_class(&full),
                "{case}"
            );
            for t in [
                "kubevirt.io/virtual-machine-unpaused",
                "PodScheduled",
                "Ready",
                "Other",
            ] {
                assert_eq!(
                    podutil::pod_condition(&ours, t),
                    podutil::pod_condition(&full, t),
                    "{case}: condition {t}"
                );
            }
            for running in [false, true] {
                assert_eq!(
                    conditions::desired_ready_condition(Some(&ours), running, now),
                    conditions::desired_ready_condition(Some(&full), running, now),
                    "{case}"
                );
            }
            for paused in [false, true] {
                assert_eq!(
                    conditions::readiness_gate_update(paused, &ours, now),
                    conditions::readiness_gate_update(paused, &full, now),
                    "{case}"
                );
            }
            assert_eq!(
                podutil::compute_container_image(&ours),
                podutil::compute_container_image(&full)
            );
            assert_eq!(
                crate::cli::progress::compute_memory_request(&ours),
                crate::cli::progress::compute_memory_request(&full)
            );
            assert_eq!(ours.metadata, {
                let mut m = full.metadata.clone();
                m.managed_fields = None;
                m
            });
            // What it leaves out.
            let st = ours.status.as_ref().expect("status");
            assert!(st.host_ips.is_none() && st.pod_ip.is_none() && st.start_time.is_none());
            for c in st.container_statuses.iter().flatten() {
                assert!(
                    c.container_id.is_none() && c.image_id.is_empty() && c.last_state.is_none()
                );
            }
            assert!(
                st.init_container_statuses
                    .iter()
                    .flatten()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.waiting.is_some())),
                "{case}: only waiting init containers are kept"
            );
        }
    }

    #[test]
    fn absent_and_null_parts_decode_as_absent() {
        let meta = json!({"name": "virt-launcher-x", "namespace": "default"});
        for (case, body, spec) in [
            ("no spec", json!({"metadata": meta}), None),
            ("null spec", json!({"metadata": meta, "spec": null}), None),
            (
                "null containers",
                json!({"metadata": meta, "spec": {"containers": null, "nodeName": "n1"}}),
                Some(PodSpec {
                    node_name: Some("n1".into()),
                    ..Default::default()
                }),
            ),
            (
                "no compute container",
                json!({"metadata": meta, "spec": {"containers": [{"name": "sidecar"}]}}),
                Some(PodSpec::default()),
            ),
        ] {
            let pod = cached(&body);
            assert_eq!(pod.spec, spec, "{case}");
            assert_eq!(
                pod.metadata.name.as_deref(),
                Some("virt-launcher-x"),
                "{case}"
            );
            assert_eq!(pod.status, None, "{case}");
        }
    }

    /// Whatever decodes as a `Pod` decodes here: a nameless container (k8s-openapi reads its
    /// name as `""`) is just not the compute container, `null` metadata is empty metadata.
    #[test]
    fn what_decodes_as_a_pod_decodes_here() {
        for (case, body) in [
            (
                "nameless container",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"image": "i"}]}}),
            ),
            (
                "null container name",
                json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": null}]}}),
            ),
            ("null metadata", json!({"metadata": null, "spec": {}})),
        ] {
            let full: Pod = serde_json::from_value(body.clone())
                .unwrap_or_else(|e| panic!("{case}: a Pod decodes it: {e}"));
            let ours = cached(&body);
            assert_eq!(ours.metadata, full.metadata, "{case}");
            assert_eq!(
                ours.spec.map(|s| s.containers),
                Some(vec![]),
                "{case}: no compute container"
            );
        }
    }

    #[test]
    fn the_wire_type_lists_and_watches_pods() {
        use kube::Resource;
        assert_eq!(CachedPod::kind(&()), "Pod");
        assert_eq!(CachedPod::api_version(&()), "v1");
        assert_eq!(CachedPod::plural(&()), "pods");
        assert_eq!(
            CachedPod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
    }
}
