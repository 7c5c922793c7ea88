//! The hotplug attachment pod (`hp-volume-…`) that mounts a VMI's hotplugged claims on the
//! node of its launcher pod, for virt-handler to hand them to the guest:
//! `RenderHotplugAttachmentPodTemplate` (pkg/virt-controller/services/template.go:1077-1209).
//!
//! The container's resources are KubeVirt's defaults or the KubeVirt CR's
//! `supportContainerResources` for `hotplug-disk` (renderresources.go:627-662); its SELinux type
//! is the CR's `selinuxLauncherType` (template.go:1122-1126; left out when empty, as Go's
//! `omitempty` does).

use super::resources::{SUPPORT_HOTPLUG_DISK, Support};
use crate::api::VirtualMachineInstance;
use crate::api::vmi::Volume;
use crate::config::SupportContainerResources;
use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `hotplugDisk` (template.go:81): the container's name and the pod's `kubevirt.io` label.
pub(crate) const HOTPLUG_DISK: &str = "hotplug-disk";
/// `hotplugDisks` (template.go:75): the emptyDir the claims are mounted under.
const HOTPLUG_DISKS: &str = "hotplug-disks";
/// `util.NonRootUID` (pkg/util/util.go:32).
const NON_ROOT_UID: i64 = 107;

/// What the renderer knows of a hotplugged volume's claim: its UID (the block device path) and
/// whether it is a block volume (`IsPVCBlock`, pvc.go:64-70).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttachmentClaim {
    /// `metadata.uid` of the claim.
    pub uid: String,
    /// `spec.volumeMode: Block`.
    pub block: bool,
}

/// `PVCNameFromVirtVolume` (pvc.go:111-122): the claim of a `persistentVolumeClaim`,
/// `dataVolume` or `memoryDump` volume.
pub(crate) fn claim_of(volume: &Volume) -> Option<String> {
    if let Some(dv) = &volume.data_volume {
        return dv.name.clone();
    }
    if let Some(pvc) = &volume.persistent_volume_claim {
        return pvc.claim_name.clone();
    }
    volume.extra.field("memoryDump", |md| {
        md.get("claimName")?.as_str().map(str::to_string)
    })
}

/// `hotplugPodTolerations` (renderresources.go:664-692): the node-condition taints a pod of a
/// running VMI must survive.
fn hotplug_tolerations() -> Vec<Toleration> {
    [
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
    ]
    .into_iter()
    .map(|key| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..Default::default()
    })
    .collect()
}

/// `matchSELinuxLevelOfVMI` (template.go:1502-1525): the level of the VMI's SELinux context
/// (the migration source's while a target has none yet); `None` for `none`.
fn selinux_level(vmi: &VirtualMachineInstance) -> Result<Option<String>, String> {
    let read = |ptr: &str| {
        vmi.status.as_ref().and_then(|s| {
            s.extra
                .read(|m| Value::Object(m.clone()).pointer(ptr).cloned())
                .and_then(|v| v.as_str().map(str::to_string))
                .filter(|c| !c.is_empty())
        })
    };
    let context = match read("/selinuxContext") {
        Some(c) => c,
        None => match read("/migrationState/sourceState/selinuxContext") {
            Some(c) => c,
            None => return Err("VMI is missing SELinux context".into()),
        },
    };
    if context == "none" {
        return Ok(None);
    }
    let parts: Vec<&str> = context.split(':').collect();
    if parts.len() < 4 {
        return Err(format!("VMI has invalid SELinux context: {context}"));
    }
    Ok(Some(parts[3..].join(":")))
}

/// `hotplugContainerResourceRequirementsForVMI` (renderresources.go:627-662): limits 100m /
/// 80M, requests 10m / 2M, each replaced by what `supportContainerResources` sets for
/// `hotplug-disk`.
fn hotplug_resources(entries: &[SupportContainerResources]) -> Value {
    let support = Support {
        entries,
        guaranteed: false,
    };
    json!({
        "limits": support.cpu_memory(SUPPORT_HOTPLUG_DISK, true, "100m", "80M"),
        "requests": support.cpu_memory(SUPPORT_HOTPLUG_DISK, false, "10m", "2M"),
    })
}

/// The attachment pod for `volumes` (the ready hotplug volumes, in the VMI's order), owned by
/// the launcher pod `owner` and pinned to its node; `claims` by volume name (a volume whose
/// claim is missing gets the pod volume but no mount). A claim already `Ready` or
/// `MountedToPod` in the VMI's volume status is not mounted again (template.go:1166-1206).
/// Errors are KubeVirt's texts (the VMI controller then creates no pod, volume-hotplug.go:233).
pub(crate) fn render_attachment_pod(
    volumes: &[&Volume],
    owner: &Pod,
    vmi: &VirtualMachineInstance,
    claims: &BTreeMap<String, AttachmentClaim>,
    launcher_image: &str,
    support: &[SupportContainerResources],
    selinux_type: Option<&str>,
) -> Result<Pod, String> {
    let level = selinux_level(vmi)?.unwrap_or_else(|| "s0".into());
    let mut selinux = json!({"level": level});
    if let Some(t) = selinux_type.filter(|t| !t.is_empty()) {
        selinux["type"] = json!(t);
    }
    let mut tolerations = hotplug_tolerations();
    tolerations.extend(
        owner
            .spec
            .as_ref()
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default(),
    );
    // template.go:1085-1089: sorted by key (Go's sort.Slice; stable here), then adjacent
    // duplicates dropped.
    tolerations.sort_by(|a, b| a.key.cmp(&b.key));
    tolerations.dedup();
    let entries = vmi.volume_status_entries();
    let phases: BTreeMap<&str, &str> = entries
        .iter()
        .filter(|e| e.get("hotplugVolume").is_some_and(|h| !h.is_null()))
        .filter_map(|e| Some((e.get("name")?.as_str()?, e.get("phase")?.as_str()?)))
        .collect();
    let mut pod_volumes = vec![json!({"name": HOTPLUG_DISKS, "emptyDir": {}})];
    let mut mounts = vec![
        json!({"name": HOTPLUG_DISKS, "mountPath": "/path", "mountPropagation": "HostToContainer"}),
    ];
    let mut devices: Vec<Value> = Vec::new();
    for volume in volumes {
        let Some(claim) = claim_of(volume) else {
            continue;
        };
        let name = volume.name.as_str();
        pod_volumes.push(json!({"name": name, "persistentVolumeClaim": {"claimName": claim}}));
        let Some(info) = claims.get(name) else {
            continue;
        };
        if info.block {
            devices.push(json!({"name": name, "devicePath": format!("/path/{name}/{}", info.uid)}));
        } else if !matches!(phases.get(name), Some(&"Ready") | Some(&"MountedToPod")) {
            mounts.push(json!({"name": name, "mountPath": format!("/{name}")}));
        }
    }
    let mut container = json!({
        "name": HOTPLUG_DISK,
        "image": launcher_image,
        "command": ["/bin/sh", "-c", "/usr/bin/container-disk --copy-path /path/hp"],
        "resources": hotplug_resources(support),
        "securityContext": hotplug_security_context(selinux),
        "volumeMounts": mounts,
    });
    if !devices.is_empty() {
        container["volumeDevices"] = Value::Array(devices);
    }
    let pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": hp_volume_metadata(owner),
        "spec": {
            "containers": [container],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{
                    "key": "kubernetes.io/hostname", "operator": "In",
                    "values": [owner.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()]
                }]}]
            }}},
            "tolerations": tolerations,
            "volumes": pod_volumes,
            "terminationGracePeriodSeconds": 0
        }
    });
    serde_json::from_value(pod).map_err(|e| format!("attachment pod: {e}"))
}

/// The `hotplug-disk` container's security context both `hp-volume-` pods share
/// (template.go:1112-1128, 1255-1268): non-root, no privilege escalation, the runtime's
/// default seccomp profile, no capabilities, `selinux` as its SELinux options.
fn hotplug_security_context(selinux: Value) -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "runAsNonRoot": true,
        "runAsUser": NON_ROOT_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"]},
        "seLinuxOptions": selinux
    })
}

/// The metadata both `hp-volume-` pods share (template.go:1091-1104, 1233-1246): generated
/// name, the launcher pod `owner` as controlling owner, the `kubevirt.io: hotplug-disk` label.
fn hp_volume_metadata(owner: &Pod) -> Value {
    let meta = &owner.metadata;
    json!({
        "generateName": "hp-volume-",
        "namespace": meta.namespace,
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod",
            "name": meta.name, "uid": meta.uid,
            "controller": true, "blockOwnerDeletion": true
        }],
        "labels": {"kubevirt.io": HOTPLUG_DISK}
    })
}

/// The trigger pod of a hotplugged volume whose DataVolume waits for its first consumer:
/// `RenderHotplugAttachmentTriggerPodTemplate` with `tempPod` true (template.go:1211-1300, from
/// `createAttachmentPopulateTriggerPodTemplate`, volume-hotplug.go:327-343). A temporary pod
/// ([`super::pod::EPHEMERAL_PROVISIONING_ANNOTATION`]) owned by the launcher pod `owner`,
/// placed next to it by a pod affinity on its labels, that mounts the claim `claim` and exits
/// (`/bin/bash -c exit 0`): its scheduling gets the claim bound. Unlike the attachment pod it
/// tolerates only what the launcher pod tolerates and has no SELinux type; a Block claim is a
/// device at `/dev/hotplugblockdevice` with the pod running as root, any other is mounted at
/// `/pvc`. Errors are KubeVirt's SELinux-context texts.
pub(crate) fn render_trigger_pod(
    volume: &Volume,
    owner: &Pod,
    vmi: &VirtualMachineInstance,
    (claim, block): (&str, bool),
    launcher_image: &str,
    support: &[SupportContainerResources],
) -> Result<Pod, String> {
    let level = selinux_level(vmi)?.unwrap_or_else(|| "s0".into());
    let name = volume.name.as_str();
    let mut container = json!({
        "name": HOTPLUG_DISK,
        "image": launcher_image,
        "command": ["/bin/bash", "-c", "exit", "0"],
        "resources": hotplug_resources(support),
        "securityContext": hotplug_security_context(json!({"level": level})),
        "volumeMounts": [
            {"name": HOTPLUG_DISKS, "mountPath": "/path", "mountPropagation": "HostToContainer"}
        ],
    });
    if block {
        container["volumeDevices"] =
            json!([{"name": name, "devicePath": "/dev/hotplugblockdevice"}]);
    } else if let Some(mounts) = container["volumeMounts"].as_array_mut() {
        mounts.push(json!({"name": name, "mountPath": "/pvc"}));
    }
    let owner_meta = &owner.metadata;
    let mut metadata = hp_volume_metadata(owner);
    metadata["annotations"] = json!({super::pod::EPHEMERAL_PROVISIONING_ANNOTATION: "true"});
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [container],
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": owner_meta.labels.clone().unwrap_or_default()},
                "topologyKey": "kubernetes.io/hostname"
            }]}},
            "tolerations": owner.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            "volumes": [
                {"name": name, "persistentVolumeClaim": {"claimName": claim}},
                {"name": HOTPLUG_DISKS, "emptyDir": {}}
            ],
            "terminationGracePeriodSeconds": 0
        }
    });
    if block {
        pod["spec"]["securityContext"] = json!({"runAsUser": 0});
    }
    serde_json::from_value(pod).map_err(|e| format!("trigger pod: {e}"))
}

/// KubeVirt main (PR 18222, [`ControllerRules::attachment_pod_owner_annotations`]): the
/// attachment pod records the VMI it serves, its name and UID, in
/// [`OWNER_VMI_NAME`](crate::api::annotations::OWNER_VMI_NAME) and
/// [`OWNER_VMI_UID`](crate::api::annotations::OWNER_VMI_UID), so that the VMI controller can
/// find the VMI of a deleted attachment pod whose launcher pod already left its cache. Up to
/// v1.9.0 the pod has no annotations (template.go:1092-1103).
///
/// [`ControllerRules::attachment_pod_owner_annotations`]: crate::kubevirt_version::ControllerRules
pub(crate) fn record_owner_vmi(pod: &mut Pod, vmi: &VirtualMachineInstance) {
    use crate::api::annotations::{OWNER_VMI_NAME, OWNER_VMI_UID};
    let meta = &vmi.metadata;
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(OWNER_VMI_NAME.into(), meta.name.clone().unwrap_or_default());
    annotations.insert(OWNER_VMI_UID.into(), meta.uid.clone().unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(status: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
                                      "spec": {"domain": {"devices": {}}}, "status": status}))
        .unwrap()
    }

    fn owner() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-vm-abcde", "namespace": "ns", "uid": "launcher-uid"},
            "spec": {"nodeName": "node-1", "containers": [],
                     "tolerations": [
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 300},
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
                         "effect": "NoSchedule"}]}
        }))
        .unwrap()
    }

    fn volume(v: Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    /// The golden attachment pod, written from template.go:1077-1209 and
    /// renderresources.go:627-692: a filesystem claim mounted at `/<volume>`, a block claim as
    /// a device under `/path/<volume>/<claim UID>`, the owner's tolerations merged into the
    /// hotplug ones by key, the SELinux level of the VMI's context.
    #[test]
    fn the_attachment_pod_is_kubevirts() {
        let fs = volume(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}}),
        );
        let blk =
            volume(json!({"name": "raw", "dataVolume": {"name": "raw-dv", "hotpluggable": true}}));
        let claims = BTreeMap::from([
            (
                "data".to_string(),
                AttachmentClaim {
                    uid: "u-data".into(),
                    block: false,
                },
            ),
            (
                "raw".to_string(),
                AttachmentClaim {
                    uid: "u-raw".into(),
                    block: true,
                },
            ),
        ]);
        let v = vmi(json!({"selinuxContext": "system_u:system_r:container_t:s0:c1,c2"}));
        let pod = render_attachment_pod(
            &[&fs, &blk],
            &owner(),
            &v,
            &claims,
            "virt-launcher:v1.9.0",
            &[],
            None,
        )
        .unwrap();
        let tol =
            |key: &str, effect: &str| json!({"key": key, "operator": "Exists", "effect": effect});
        let golden = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "generateName": "hp-volume-", "namespace": "ns",
                "labels": {"kubevirt.io": "hotplug-disk"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "virt-launcher-vm-abcde",
                    "uid": "launcher-uid", "controller": true, "blockOwnerDeletion": true}]
            },
            "spec": {
                "containers": [{
                    "name": "hotplug-disk", "image": "virt-launcher:v1.9.0",
                    "command": ["/bin/sh", "-c", "/usr/bin/container-disk --copy-path /path/hp"],
                    "resources": {"limits": {"cpu": "100m", "memory": "80M"},
                                  "requests": {"cpu": "10m", "memory": "2M"}},
                    "securityContext": {"allowPrivilegeEscalation": false, "runAsNonRoot": true,
                        "runAsUser": 107, "seccompProfile": {"type": "RuntimeDefault"},
                        "capabilities": {"drop": ["ALL"]}, "seLinuxOptions": {"level": "s0:c1,c2"}},
                    "volumeMounts": [
                        {"name": "hotplug-disks", "mountPath": "/path", "mountPropagation": "HostToContainer"},
                        {"name": "data", "mountPath": "/data"}],
                    "volumeDevices": [{"name": "raw", "devicePath": "/path/raw/u-raw"}]
                }],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}]}]}}},
                "tolerations": [
                    tol("node.kubernetes.io/disk-pressure", "NoSchedule"),
                    tol("node.kubernetes.io/memory-pressure", "NoSchedule"),
                    tol("node.kubernetes.io/network-unavailable", "NoSchedule"),
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300},
                    tol("node.kubernetes.io/pid-pressure", "NoSchedule"),
                    tol("node.kubernetes.io/unschedulable", "NoSchedule")],
                "volumes": [
                    {"name": "hotplug-disks", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc"}},
                    {"name": "raw", "persistentVolumeClaim": {"claimName": "raw-dv"}}],
                "terminationGracePeriodSeconds": 0
            }
        });
        assert_eq!(serde_json::to_value(&pod).unwrap(), golden);
    }

    /// A volume the guest already has (`Ready`) keeps its pod volume but is not mounted again
    /// (template.go:1178-1180); `none` keeps level `s0`; without a context there is no pod
    /// (template.go:1511).
    /// renderresources.go:627-662: `supportContainerResources` for `hotplug-disk` replaces
    /// the quantities it sets; the others keep KubeVirt's defaults.
    /// template.go:1211-1300 with tempPod true: the trigger pod of a WaitForFirstConsumer
    /// hotplug volume.
    #[test]
    fn the_trigger_pod_is_kubevirts() {
        let v =
            volume(json!({"name": "hp", "dataVolume": {"name": "hp-dv", "hotpluggable": true}}));
        let running = vmi(json!({"selinuxContext": "system_u:system_r:container_t:s0:c1,c2"}));
        let render = |block| {
            let pod = render_trigger_pod(&v, &owner(), &running, ("hp-dv", block), "img", &[])
                .expect("rendered");
            serde_json::to_value(pod).expect("json")
        };
        let fs = render(false);
        assert_eq!(fs["metadata"]["generateName"], "hp-volume-");
        assert_eq!(
            fs["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"],
            "true"
        );
        assert_eq!(fs["metadata"]["ownerReferences"][0]["kind"], "Pod");
        let c = &fs["spec"]["containers"][0];
        assert_eq!(c["command"], json!(["/bin/bash", "-c", "exit", "0"]));
        assert_eq!(
            c["securityContext"]["seLinuxOptions"],
            json!({"level": "s0:c1,c2"})
        );
        assert_eq!(
            c["volumeMounts"][1],
            json!({"name": "hp", "mountPath": "/pvc"})
        );
        assert_eq!(
            fs["spec"]["volumes"][0],
            json!({"name": "hp", "persistentVolumeClaim": {"claimName": "hp-dv"}})
        );
        let term = &fs["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert_eq!(fs["spec"]["terminationGracePeriodSeconds"], 0);
        assert!(fs["spec"].get("securityContext").is_none());
        let block = render(true);
        assert_eq!(
            block["spec"]["containers"][0]["volumeDevices"],
            json!([{"name": "hp", "devicePath": "/dev/hotplugblockdevice"}])
        );
        assert_eq!(block["spec"]["securityContext"], json!({"runAsUser": 0}));
        let missing = vmi(json!({}));
        assert_eq!(
            render_trigger_pod(&v, &owner(), &missing, ("hp-dv", false), "img", &[]).unwrap_err(),
            "VMI is missing SELinux context"
        );
    }

    #[test]
    fn support_container_resources_size_the_attachment_container() {
        let fs = volume(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}}),
        );
        let entries = [SupportContainerResources {
            container_type: "hotplug-disk".into(),
            requests: BTreeMap::from([("memory".into(), "16Mi".into())]),
            limits: BTreeMap::from([("cpu".into(), "250m".into())]),
        }];
        let v = vmi(json!({"selinuxContext": "system_u:system_r:container_t:s0:c1,c2"}));
        let pod = render_attachment_pod(
            &[&fs],
            &owner(),
            &v,
            &BTreeMap::new(),
            "img",
            &entries,
            None,
        )
        .unwrap();
        let r = pod.spec.unwrap().containers[0].resources.clone().unwrap();
        let q = |m: Option<
            BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
        >,
                 k: &str| m.unwrap()[k].0.clone();
        assert_eq!(
            (q(r.requests.clone(), "cpu"), q(r.requests, "memory")),
            ("10m".to_string(), "16Mi".to_string())
        );
        assert_eq!(
            (q(r.limits.clone(), "cpu"), q(r.limits, "memory")),
            ("250m".to_string(), "80M".to_string())
        );
    }

    #[test]
    fn ready_volumes_are_not_remounted_and_a_context_is_required() {
        let fs = volume(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}}),
        );
        let claims = BTreeMap::from([(
            "data".to_string(),
            AttachmentClaim {
                uid: "u".into(),
                block: false,
            },
        )]);
        let v = vmi(json!({"selinuxContext": "none", "volumeStatus": [
            {"name": "data", "target": "", "phase": "Ready", "hotplugVolume": {}}]}));
        // The CR's launcher type sits beside the level (template.go:1122-1126).
        let pod = render_attachment_pod(&[&fs], &owner(), &v, &claims, "img", &[], Some("spc_t"))
            .unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.volume_mounts.as_ref().unwrap().len(), 1);
        assert_eq!(
            pod.spec.as_ref().unwrap().volumes.as_ref().unwrap().len(),
            2
        );
        let options = c
            .security_context
            .as_ref()
            .unwrap()
            .se_linux_options
            .clone()
            .unwrap();
        assert_eq!(
            (options.level.as_deref(), options.type_.as_deref()),
            (Some("s0"), Some("spc_t"))
        );
        assert_eq!(
            render_attachment_pod(&[&fs], &owner(), &vmi(json!({})), &claims, "img", &[], None)
                .unwrap_err(),
            "VMI is missing SELinux context"
        );
        assert_eq!(
            render_attachment_pod(
                &[&fs],
                &owner(),
                &vmi(json!({"selinuxContext": "a:b"})),
                &claims,
                "img",
                &[],
                None
            )
            .unwrap_err(),
            "VMI has invalid SELinux context: a:b"
        );
    }

    /// PR 18222 (main): the pod names its VMI by name and UID, nothing else changes; v1.9.0's
    /// pod (above) has no annotations.
    #[test]
    fn main_records_the_owner_vmi_on_the_attachment_pod() {
        let fs = volume(
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}}),
        );
        let mut v = vmi(json!({"selinuxContext": "none"}));
        v.metadata.uid = Some("vmi-uid".into());
        let plain = render_attachment_pod(&[&fs], &owner(), &v, &BTreeMap::new(), "img", &[], None)
            .unwrap();
        assert_eq!(plain.metadata.annotations, None);
        let mut pod = plain.clone();
        record_owner_vmi(&mut pod, &v);
        let annotations = pod.metadata.annotations.take().unwrap();
        assert_eq!(
            annotations,
            BTreeMap::from([
                ("kubevirt.io/owner-vmi-name".to_string(), "vm".to_string()),
                (
                    "kubevirt.io/owner-vmi-uid".to_string(),
                    "vmi-uid".to_string()
                ),
            ])
        );
        assert_eq!(pod, plain);
    }
}
