//! JSON patches the VMI controller sends.
//!
//! - `prepareVMIPatch` (lifecycle.go:627-721) is [`prepare_vmi_patch`]: test+replace ops for a
//!   Running/Scheduled VMI.
//! - `SyncPodAnnotations` (pkg/controller/controller.go:575-597) is
//!   [`sync_pod_annotations_patch`].
//! - `syncDynamicAnnotationsAndLabelsToPod` (lifecycle.go:724-844) is
//!   [`dynamic_pod_metadata_patch`], for the fixed and the Velero keys.
//!
//! Patches are built with the shared [`PatchSet`]; semantic equality is the shared
//! [`semantic_eq`] (both in `controller::common`).

use crate::api::vmi::VirtualMachineInstanceStatus;
use crate::api::{JsonList, VirtualMachineInstance};
use crate::controller::common::patch::path as ptr;
use crate::controller::common::{PatchSet, semantic_eq};
use crate::launcher::annotations;
use json_patch::Patch;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::collections::BTreeMap;

/// Label keys synced VMI → pod (`dynamicLabels`, lifecycle.go:801). Extra configured keys
/// (`additionalLauncherLabelsSync`) are not modelled.
pub(crate) const DYNAMIC_LABELS: &[&str] =
    &["kubevirt.io/nodeName", "kubevirt.io/outdatedLauncherImage"];
/// Annotation keys synced VMI → pod (`dynamicAnnotations`, lifecycle.go:808-810): the descheduler
/// opt-in/opt-out keys; the Velero keys are added by [`dynamic_pod_metadata_patch`]. Configured
/// extra keys (`additionalLauncherAnnotationsSync`) are not modelled.
pub(crate) const DYNAMIC_ANNOTATIONS: &[&str] = &[
    "descheduler.alpha.kubernetes.io/evict",
    "descheduler.alpha.kubernetes.io/prefer-no-eviction",
];

fn sorted_interfaces(status: &VirtualMachineInstanceStatus) -> Vec<Value> {
    let mut v = status
        .interfaces
        .as_ref()
        .map(JsonList::entries)
        .unwrap_or_default();
    v.sort_by(|a, b| {
        let name = |x: &Value| {
            x.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        name(a).cmp(&name(b))
    });
    v
}

/// `prepareVMIPatch` (lifecycle.go:627-721): for each of volumeStatus, conditions, activePods,
/// phase, launcherContainerImageVersion, labels, finalizers and interfaces that changed, a
/// `test` of the old value then a `replace` (or an `add` where the old value was empty/nil, and
/// always `add` after the test for interfaces). Conditions compare with `ConditionsEqual`
/// (type/status/reason only); interfaces compare sorted by name. Empty when nothing changed.
pub(crate) fn prepare_vmi_patch(
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
) -> Patch {
    let empty = VirtualMachineInstanceStatus::default();
    let os = old.status.as_ref().unwrap_or(&empty);
    let ns = new.status.as_ref().unwrap_or(&empty);
    let mut ops = PatchSet::new();

    if !semantic_eq(&ns.volume_status, &os.volume_status) {
        let p = ptr(&["status", "volumeStatus"]);
        ops.add_or_test_and_replace(p, os.volume_status.as_ref(), &ns.volume_status);
    }
    if !super::conditions::conditions_equal(os, ns) {
        let p = ptr(&["status", "conditions"]);
        ops.test(p.clone(), &os.conditions);
        ops.replace(p, &ns.conditions);
    }
    if !semantic_eq(&ns.active_pods, &os.active_pods) {
        let p = ptr(&["status", "activePods"]);
        ops.test(p.clone(), &os.active_pods);
        ops.replace(p, &ns.active_pods);
    }
    let old_phase = os.phase.unwrap_or_default();
    let new_phase = ns.phase.unwrap_or_default();
    if old_phase != new_phase {
        let p = ptr(&["status", "phase"]);
        ops.test(p.clone(), &old_phase);
        ops.replace(p, &new_phase);
    }
    let old_img = os.launcher_container_image_version.as_deref().unwrap_or("");
    let new_img = ns.launcher_container_image_version.as_deref().unwrap_or("");
    if old_img != new_img {
        let p = ptr(&["status", "launcherContainerImageVersion"]);
        if old_img.is_empty() {
            ops.add(p, new_img);
        } else {
            ops.test(p.clone(), old_img);
            ops.replace(p, new_img);
        }
    }
    if !semantic_eq(&old.metadata.labels, &new.metadata.labels) {
        let p = ptr(&["metadata", "labels"]);
        let new_labels = new.metadata.labels.clone().unwrap_or_default();
        ops.add_or_test_and_replace(p, old.metadata.labels.as_ref(), &new_labels);
    }
    if !semantic_eq(&old.metadata.finalizers, &new.metadata.finalizers) {
        let p = ptr(&["metadata", "finalizers"]);
        let new_f = new.metadata.finalizers.clone().unwrap_or_default();
        ops.add_or_test_and_replace(p, old.metadata.finalizers.as_ref(), &new_f);
    }
    if !semantic_eq(&sorted_interfaces(ns), &sorted_interfaces(os)) {
        let p = ptr(&["status", "interfaces"]);
        ops.test(p.clone(), &os.interfaces);
        ops.add(p, &ns.interfaces);
    }
    ops.into_patch()
}

/// `SyncPodAnnotations` (pkg/controller/controller.go:575-597): one `add
/// /metadata/annotations/<key>` per annotation that is missing or has another value; empty when
/// the pod already has them all.
pub(crate) fn sync_pod_annotations_patch(pod: &Pod, wanted: &BTreeMap<String, String>) -> Patch {
    let current = pod.metadata.annotations.as_ref();
    let mut ops = PatchSet::new();
    for (k, v) in wanted {
        if current.and_then(|a| a.get(k)) != Some(v) {
            ops.add(ptr(&["metadata", "annotations", k]), v);
        }
    }
    ops.into_patch()
}

/// `MarkEvictionInProgress` / `MarkEvictionCompleted`
/// (pkg/virt-controller/watch/descheduler/descheduler.go:51-95): add the annotation with value
/// `"true"`, or test its current value and remove it.
pub(crate) fn eviction_in_progress_patch(pod: &Pod, mark: bool) -> Patch {
    const KEY: &str = "descheduler.alpha.kubernetes.io/eviction-in-progress";
    let current = crate::api::annotation(&pod.metadata, KEY).map(str::to_owned);
    let p = ptr(&["metadata", "annotations", KEY]);
    let mut ops = PatchSet::new();
    match (mark, current) {
        (true, None) => {
            ops.add(p, "true");
        }
        (false, Some(v)) => {
            ops.test(p.clone(), &v).remove(p);
        }
        _ => {}
    }
    ops.into_patch()
}

/// Sync `keys` from the VMI's values (`want`) into a copy of `pod_map` (exact keys only;
/// wildcard patterns are not modelled). Returns the new map when anything changed.
fn sync_keys<'a>(
    keys: &[&str],
    want: impl Fn(&str) -> Option<&'a String>,
    pod_map: Option<&BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    let have = |key: &str| pod_map.and_then(|m| m.get(key));
    // Nearly every reconcile finds them equal: compare before copying the pod's map.
    if keys.iter().all(|key| want(key) == have(key)) {
        return None;
    }
    let mut out = pod_map.cloned().unwrap_or_default();
    for key in keys {
        match want(key) {
            Some(v) => {
                out.insert((*key).to_string(), v.clone());
            }
            None => {
                out.remove(*key);
            }
        }
    }
    Some(out)
}

/// `syncDynamicAnnotationsAndLabelsToPod` (lifecycle.go:724-844) for [`DYNAMIC_LABELS`],
/// [`DYNAMIC_ANNOTATIONS`] and the storage generator's Velero keys: make the pod's values of
/// those keys equal the VMI's, where the Velero keys' values are generated from the VMI with
/// the KubeVirt CR's `kubevirt.io/skip-backup-hooks` (`cluster_skip_backup_hooks`) as the
/// fallback (lifecycle.go:804-821), copied or deleted. For each changed map: `add
/// /metadata/<labels|annotations>` when the pod had none, else `test` the old map and
/// `replace` it.
pub(crate) fn dynamic_pod_metadata_patch(
    vmi: &VirtualMachineInstance,
    pod: &Pod,
    cluster_skip_backup_hooks: Option<&str>,
) -> Patch {
    let mut ops = PatchSet::new();
    let vmi_labels = vmi.metadata.labels.as_ref();
    let pod_labels = pod.metadata.labels.as_ref();
    let want = |k: &str| vmi_labels.and_then(|m| m.get(k));
    if let Some(new_map) = sync_keys(DYNAMIC_LABELS, want, pod_labels) {
        ops.add_or_test_and_replace(ptr(&["metadata", "labels"]), pod_labels, &new_map);
    }
    // The generated Velero values win over the VMI's own.
    let velero = annotations::velero(vmi, cluster_skip_backup_hooks);
    let vmi_annotations = vmi.metadata.annotations.as_ref();
    let pod_annotations = pod.metadata.annotations.as_ref();
    let keys: Vec<&str> = DYNAMIC_ANNOTATIONS
        .iter()
        .copied()
        .chain(annotations::VELERO_KEYS)
        .collect();
    let want = |k: &str| {
        velero
            .get(k)
            .or_else(|| vmi_annotations.and_then(|m| m.get(k)))
    };
    if let Some(new_map) = sync_keys(&keys, want, pod_annotations) {
        ops.add_or_test_and_replace(ptr(&["metadata", "annotations"]), pod_annotations, &new_map);
    }
    ops.into_patch()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::annotations::SKIP_BACKUP_HOOKS;
    use crate::api::{Condition, Phase};
    use crate::controller::vmi::podutil::tests::launcher_pod;
    use serde_json::json;

    fn running_vmi() -> VirtualMachineInstance {
        VirtualMachineInstance {
            status: Some(VirtualMachineInstanceStatus {
                phase: Some(Phase::Running),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ops_json(p: &Patch) -> Value {
        serde_json::to_value(p).expect("patch serialises")
    }

    // vmi_test.go:890-900 "should create empty status network interfaces patch, regardless of interfaces order"
    #[test]
    fn interfaces_reordered_is_empty_patch() {
        let mut old = running_vmi();
        if let Some(s) = old.status.as_mut() {
            s.interfaces = Some(
                vec![
                    json!({"name": "stubNetStatusUpdate1"}),
                    json!({"name": "stubNetStatusUpdate2"}),
                ]
                .into(),
            );
        }
        let mut new = old.clone();
        if let Some(s) = new.status.as_mut() {
            let mut entries = old.interface_status_entries();
            entries.reverse();
            s.interfaces = Some(entries.into());
        }
        assert!(prepare_vmi_patch(&old, &new).0.is_empty());
    }

    // vmi_test.go:901-912 "should create non empty status network interfaces patch"
    #[test]
    fn interfaces_added_is_test_and_add() {
        let mut old = running_vmi();
        if let Some(s) = old.status.as_mut() {
            s.interfaces = Some(vec![json!({"name": "a"})].into());
        }
        let mut new = old.clone();
        if let Some(s) = new.status.as_mut() {
            s.interfaces = Some(vec![json!({"name": "a"}), json!({"name": "b"})].into());
        }
        assert_eq!(
            ops_json(&prepare_vmi_patch(&old, &new)),
            json!([
                {"op": "test", "path": "/status/interfaces", "value": [{"name": "a"}]},
                {"op": "add", "path": "/status/interfaces", "value": [{"name": "a"}, {"name": "b"}]}
            ])
        );
    }

    #[test]
    fn phase_conditions_and_image_ops() {
        let old = running_vmi();
        let mut new = old.clone();
        if let Some(s) = new.status.as_mut() {
            s.phase = Some(Phase::Failed);
            s.conditions = Some(vec![Condition {
                type_: "Ready".into(),
                status: "False".into(),
                reason: Some("PodNotExists".into()),
                ..Default::default()
            }]);
            s.launcher_container_image_version = Some("img".into());
        }
        new.metadata.finalizers = Some(vec!["kubevirt.io/foregroundDeleteVirtualMachine".into()]);
        assert_eq!(
            ops_json(&prepare_vmi_patch(&old, &new)),
            json!([
                {"op": "test", "path": "/status/conditions", "value": null},
                {"op": "replace", "path": "/status/conditions", "value": [
                    {"type": "Ready", "status": "False", "reason": "PodNotExists",
                     "lastProbeTime": null, "lastTransitionTime": null}]},
                {"op": "test", "path": "/status/phase", "value": "Running"},
                {"op": "replace", "path": "/status/phase", "value": "Failed"},
                {"op": "add", "path": "/status/launcherContainerImageVersion", "value": "img"},
                {"op": "add", "path": "/metadata/finalizers",
                 "value": ["kubevirt.io/foregroundDeleteVirtualMachine"]}
            ])
        );
    }

    // The `test` op must carry the conditions exactly as KubeVirt stored them (Go writes zero
    // times as null), or the API server rejects the patch.
    #[test]
    fn test_op_reproduces_go_written_conditions() {
        let stored = json!([
            {"type": "Ready", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "LiveMigratable", "status": "True", "lastProbeTime": null,
             "lastTransitionTime": null, "message": "ok"}
        ]);
        let old: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "a"},
            "spec": {"domain": {}},
            "status": {"phase": "Running", "conditions": stored.clone()}
        }))
        .expect("valid VMI");
        let mut new = old.clone();
        if let Some(c) = new.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c[0].status = "False".into();
        }
        let ops = ops_json(&prepare_vmi_patch(&old, &new));
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/status/conditions", "value": stored})
        );
    }

    #[test]
    fn condition_message_change_alone_is_not_patched() {
        let mut old = running_vmi();
        let c = Condition {
            type_: "Ready".into(),
            status: "True".into(),
            message: Some("a".into()),
            ..Default::default()
        };
        if let Some(s) = old.status.as_mut() {
            s.conditions = Some(vec![c.clone()]);
        }
        let mut new = old.clone();
        if let Some(s) = new.status.as_mut() {
            s.conditions = Some(vec![Condition {
                message: Some("b".into()),
                ..c
            }]);
        }
        assert!(prepare_vmi_patch(&old, &new).0.is_empty());
    }

    #[test]
    fn labels_replace_with_test() {
        let mut old = running_vmi();
        old.metadata.labels = Some([("a".to_string(), "1".to_string())].into());
        let mut new = old.clone();
        new.metadata.labels = Some(Default::default());
        assert_eq!(
            ops_json(&prepare_vmi_patch(&old, &new)),
            json!([
                {"op": "test", "path": "/metadata/labels", "value": {"a": "1"}},
                {"op": "replace", "path": "/metadata/labels", "value": {}}
            ])
        );
    }

    #[test]
    fn pod_annotation_add_escapes_key() {
        let pod = launcher_pod("Running");
        let wanted: BTreeMap<String, String> = [(
            "descheduler.alpha.kubernetes.io/request-evict-only".to_string(),
            String::new(),
        )]
        .into();
        assert_eq!(
            ops_json(&sync_pod_annotations_patch(&pod, &wanted)),
            json!([{"op": "add",
                    "path": "/metadata/annotations/descheduler.alpha.kubernetes.io~1request-evict-only",
                    "value": ""}])
        );
        let mut annotated = pod.clone();
        annotated.metadata.annotations = Some(wanted.clone());
        assert!(sync_pod_annotations_patch(&annotated, &wanted).0.is_empty());
    }

    #[test]
    fn eviction_marks() {
        let mut pod = launcher_pod("Running");
        assert_eq!(
            ops_json(&eviction_in_progress_patch(&pod, true)),
            json!([{"op": "add",
                    "path": "/metadata/annotations/descheduler.alpha.kubernetes.io~1eviction-in-progress",
                    "value": "true"}])
        );
        assert!(eviction_in_progress_patch(&pod, false).0.is_empty());
        pod.metadata.annotations = Some(
            [(
                "descheduler.alpha.kubernetes.io/eviction-in-progress".to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert_eq!(eviction_in_progress_patch(&pod, false).0.len(), 2);
    }

    // vmi_test.go:2150-2260 "when VMI dynamic annotations and label sets changes" (fixed keys)
    /// [`running_vmi`] with the Velero hooks turned off (the tests of the other keys).
    fn running_vmi_without_hooks() -> VirtualMachineInstance {
        let mut vmi = running_vmi();
        vmi.metadata.annotations =
            Some([(SKIP_BACKUP_HOOKS.to_string(), "true".to_string())].into());
        vmi
    }

    #[test]
    fn dynamic_labels_follow_vmi() {
        let mut vmi = running_vmi_without_hooks();
        vmi.metadata.labels = Some(
            [
                ("kubevirt.io/nodeName".to_string(), "node01".to_string()),
                ("other".to_string(), "x".to_string()),
            ]
            .into(),
        );
        let mut pod = launcher_pod("Running");
        pod.metadata.labels = Some(
            [
                ("kubevirt.io".to_string(), "virt-launcher".to_string()),
                (
                    "kubevirt.io/outdatedLauncherImage".to_string(),
                    String::new(),
                ),
            ]
            .into(),
        );
        assert_eq!(
            ops_json(&dynamic_pod_metadata_patch(&vmi, &pod, None)),
            json!([
                {"op": "test", "path": "/metadata/labels",
                 "value": {"kubevirt.io": "virt-launcher", "kubevirt.io/outdatedLauncherImage": ""}},
                {"op": "replace", "path": "/metadata/labels",
                 "value": {"kubevirt.io": "virt-launcher", "kubevirt.io/nodeName": "node01"}}
            ])
        );
        let mut synced = pod.clone();
        synced.metadata.labels = Some(
            [
                ("kubevirt.io".to_string(), "virt-launcher".to_string()),
                ("kubevirt.io/nodeName".to_string(), "node01".to_string()),
            ]
            .into(),
        );
        assert!(dynamic_pod_metadata_patch(&vmi, &synced, None).0.is_empty());
    }

    #[test]
    fn dynamic_annotation_added_to_pod_without_annotations() {
        let mut vmi = running_vmi_without_hooks();
        if let Some(a) = vmi.metadata.annotations.as_mut() {
            a.insert(
                "descheduler.alpha.kubernetes.io/evict".to_string(),
                "true".to_string(),
            );
        }
        let pod = launcher_pod("Running");
        assert_eq!(
            ops_json(&dynamic_pod_metadata_patch(&vmi, &pod, None)),
            json!([{"op": "add", "path": "/metadata/annotations",
                    "value": {"descheduler.alpha.kubernetes.io/evict": "true"}}])
        );
    }

    // lifecycle.go:804-821: the storage generator's keys follow the VMI and the KubeVirt CR.
    #[test]
    fn the_velero_hooks_follow_the_vmi_and_the_cluster_annotation() {
        let mut vmi = running_vmi();
        vmi.metadata.name = Some("db".into());
        vmi.metadata.namespace = Some("prod".into());
        let pod = launcher_pod("Running");
        let added = ops_json(&dynamic_pod_metadata_patch(&vmi, &pod, None));
        let value = &added[0]["value"];
        assert_eq!(added[0]["op"], "add", "{added}");
        assert_eq!(value["pre.hook.backup.velero.io/container"], "compute");
        assert_eq!(value.as_object().map(|m| m.len()), Some(5), "{value}");
        // The pod as created (hooks in place): nothing to do, unless the cluster turns them off.
        let mut hooked = pod.clone();
        hooked.metadata.annotations = Some(crate::launcher::annotations::velero(&vmi, None));
        assert!(dynamic_pod_metadata_patch(&vmi, &hooked, None).0.is_empty());
        let removed = ops_json(&dynamic_pod_metadata_patch(&vmi, &hooked, Some("true")));
        assert_eq!(removed[1]["op"], "replace", "{removed}");
        assert_eq!(removed[1]["value"], json!({}));
        // The VMI's own annotation wins over the cluster's.
        vmi.metadata.annotations =
            Some([(SKIP_BACKUP_HOOKS.to_string(), "false".to_string())].into());
        assert!(
            dynamic_pod_metadata_patch(&vmi, &hooked, Some("true"))
                .0
                .is_empty()
        );
    }
}
