//! The virt-launcher pods as the controllers' informer caches them: decoded from the watch into
//! only what the VM and VMI decisions read.
//!
//! A virt-launcher pod carries a dozen volumes (container disks, sockets, hotplug, private and
//! public directories; k8s-openapi's `Volume` is 3 KiB inline), several containers and init
//! containers with their environment, mounts and security contexts: most of a cached pod's
//! heap (`benches/cache_memory.rs`), and, decoded into k8s-openapi's wide structs only to be
//! dropped, the largest single cost of the controller's watch decoding (docs/performance.md).
//! Nothing the VM and VMI controllers or the progress lines decide reads them: they read the
//! metadata, the status, `spec.nodeName` (the current pod is the newest on the VMI's node,
//! controller.go:323-359), the `compute` container's image (the outdated-launcher label,
//! lifecycle.go:287-294) and its memory request (progress lines). Every write to a pod is a
//! patch of metadata or status, never a copy of the cached object, so nothing is lost on the
//! server; the inspector reads pods from the API server, not from this cache.
//!
//! So the pod informer watches [`LauncherPodForCache`], whose decoding keeps exactly that
//! (the metadata without `managedFields`, the whole status, and of the spec the node and the
//! compute container's name, image and resources) and skips the rest of the JSON without
//! building it (`managedFields`, part of the metadata, is decoded and dropped after; the
//! embedded cluster never sets it), and caches the [`Pod`] it converts into. KubeVirt's informers cache whole pods
//! (client-go `SetTransform` is the way to trim them there; a narrower decode has no client-go
//! counterpart).

use super::podutil::COMPUTE_CONTAINER;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;

/// A launcher pod decoded with only what the controllers read (module docs); `Pod::from` gives
/// the pod the cache holds.
#[derive(Clone, Debug, Default)]
pub struct LauncherPodForCache(Pod);

impl From<LauncherPodForCache> for Pod {
    fn from(pod: LauncherPodForCache) -> Pod {
        pod.0
    }
}

/// The JSON of a pod, with only the fields [`LauncherPodForCache`] keeps; serde skips every
/// other field without building it (`metadata.managedFields` is decoded with the metadata and
/// dropped after). Absent and `null` fields decode as k8s-openapi's `Pod` decodes them, so no
/// pod that decodes as a `Pod` fails here.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: Option<ObjectMeta>,
    #[serde(default)]
    spec: Option<WireSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    containers: Option<Vec<WireContainer>>,
}

#[derive(Deserialize)]
struct WireContainer {
    /// k8s-openapi reads an absent or `null` name as `""`.
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    resources: Option<ResourceRequirements>,
}

impl<'de> Deserialize<'de> for LauncherPodForCache {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let spec = wire.spec.map(|spec| PodSpec {
            node_name: spec.node_name,
            containers: spec
                .containers
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.name.as_deref() == Some(COMPUTE_CONTAINER))
                .map(|c| Container {
                    name: c.name.unwrap_or_default(),
                    image: c.image,
                    resources: c.resources,
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        });
        let mut metadata = wire.metadata.unwrap_or_default();
        metadata.managed_fields = None;
        Ok(LauncherPodForCache(Pod {
            metadata,
            spec,
            status: wire.status,
        }))
    }
}

/// The pods' API (`v1`, `pods`), so that an `Api<LauncherPodForCache>` lists and watches pods.
impl kube::Resource for LauncherPodForCache {
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
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachineInstance;
    use crate::launcher::render_launch_manifest;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use rand::SeedableRng;
    use serde_json::json;

    fn cached(json: &serde_json::Value) -> Pod {
        serde_json::from_value::<LauncherPodForCache>(json.clone())
            .expect("decode")
            .into()
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
                    resources: compute.resources.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: pod.status.clone(),
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
        assert_eq!(LauncherPodForCache::kind(&()), "Pod");
        assert_eq!(LauncherPodForCache::api_version(&()), "v1");
        assert_eq!(LauncherPodForCache::plural(&()), "pods");
        assert_eq!(
            LauncherPodForCache::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
    }
}
