//! Metadata kept in sync between a VM and its running VMI: the "dynamic" labels and annotations
//! copied VM → VMI (`syncDynamicAnnotationsAndLabelsToVMI`, pkg/virt-controller/watch/vm/vm.go:
//! 3067-3188) and the PCI topology annotations copied VMI → VM template
//! (`syncPCITopologyAnnotationsToVM`, vm.go:3190-3213).

use super::reasons::annotation;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::VirtualMachineInstance;
use crate::api::{KnownStr, SmallMap};
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use serde_json::Value;
use std::sync::Arc;

type Map = SmallMap<String>;

/// The VMI patch and the label/annotation maps it writes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DynamicMetadataPatch {
    /// RFC 6902 patch (ops on `/metadata/labels` and `/metadata/annotations`).
    pub patch: Value,
    /// The VMI labels after the patch.
    pub labels: Option<Map>,
    /// The VMI annotations after the patch.
    pub annotations: Option<Map>,
}

/// Sync the keys matching `patterns` (exact keys, or `prefix*`; a bare `*` is ignored) from
/// `vm_map` into `vmi_map`: present on the VM → copied, absent → deleted. True if anything
/// changed.
/// `vm_map` is its pairs in key order (a template's or the VM's own [`SmallMap`]).
fn sync_map<'a, I>(patterns: &[String], vm_map: I, vmi_map: &mut Map) -> bool
where
    I: Iterator<Item = (&'a KnownStr, &'a String)> + Clone,
{
    let mut changed = false;
    let mut sync_key = |key: &str, vmi_map: &mut Map| {
        let vm_val = vm_map
            .clone()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v);
        if vm_val == vmi_map.get(key) {
            return;
        }
        changed = true;
        match vm_val {
            Some(v) => {
                vmi_map.insert(key, v.clone());
            }
            None => {
                vmi_map.remove(key);
            }
        }
    };
    for pattern in patterns {
        if pattern.is_empty() {
            continue;
        }
        if let Some(prefix) = pattern.strip_suffix('*') {
            if prefix.is_empty() {
                continue;
            }
            let mut keys: Vec<KnownStr> = vm_map
                .clone()
                .map(|(k, _)| k)
                .chain(vmi_map.keys())
                .filter(|k| k.starts_with(prefix))
                .cloned()
                .collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                sync_key(&k, vmi_map);
            }
            continue;
        }
        sync_key(pattern, vmi_map);
    }
    changed
}

/// The pairs of a map, if there is one.
fn small_pairs(
    map: Option<&SmallMap<String>>,
) -> impl Iterator<Item = (&KnownStr, &String)> + Clone {
    map.into_iter().flat_map(|m| m.iter())
}

/// The dynamic metadata patch for the VMI, or `None` when nothing differs (or the VMI is being
/// deleted). Labels: `label_patterns` (`--additional-launcher-labels-sync`); annotations: the two
/// descheduler keys plus `annotation_patterns`, from the VM template; the Velero skip-hooks
/// annotation from the VM's own metadata. Each changed map adds `add` (VMI map absent) or
/// `test`+`replace` ops; like KubeVirt's builder, the values are the final maps, so when both
/// annotation groups change the second `test` fails on the server.
pub(crate) fn dynamic_metadata_patch(
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
    label_patterns: &[String],
    annotation_patterns: &[String],
) -> Option<DynamicMetadataPatch> {
    let template = vm.spec.template.as_ref()?;
    if vmi.is_deleting() {
        return None;
    }
    let tmeta = template.metadata.as_ref();
    let orig_labels = vmi.metadata.labels.as_ref();
    let orig_annotations = vmi.metadata.annotations.as_ref();
    let mut labels = orig_labels.cloned().unwrap_or_default();
    let mut annotations = orig_annotations.cloned().unwrap_or_default();

    let mut ops: Vec<(&str, Option<&Map>)> = Vec::new();
    if sync_map(
        label_patterns,
        small_pairs(tmeta.and_then(|m| m.maps.labels.as_ref())),
        &mut labels,
    ) {
        ops.push(("labels", orig_labels));
    }
    let mut ann_patterns = vec![
        annotation::DESCHEDULER_EVICT.to_string(),
        annotation::DESCHEDULER_PREFER_NO_EVICTION.to_string(),
    ];
    ann_patterns.extend(annotation_patterns.iter().cloned());
    if sync_map(
        &ann_patterns,
        small_pairs(tmeta.and_then(|m| m.maps.annotations.as_ref())),
        &mut annotations,
    ) {
        ops.push(("annotations", orig_annotations));
    }
    if sync_map(
        &[annotation::VELERO_SKIP_HOOKS.to_string()],
        small_pairs(vm.metadata.annotations.as_ref()),
        &mut annotations,
    ) {
        ops.push(("annotations", orig_annotations));
    }
    if ops.is_empty() {
        return None;
    }
    let mut patch = PatchSet::new();
    for (sub, orig) in ops {
        let value = if sub == "labels" {
            &labels
        } else {
            &annotations
        };
        patch.add_or_test_and_replace(path(&["metadata", sub]), orig, value);
    }
    Some(DynamicMetadataPatch {
        patch: patch.into_value(),
        labels: Some(labels),
        annotations: Some(annotations),
    })
}

/// `syncPCITopologyAnnotationsToVM` (vm.go:3190-3213): when the VMI has
/// `kubevirt.io/pci-topology-version` and the VM template has none, copy it (and
/// `kubevirt.io/pci-interface-slot-count` if present) into the template annotations. The
/// sync's working copy `vm` is copied (`Arc::make_mut`) only when it changes.
pub(crate) fn sync_pci_topology_annotations_to_vm(
    vm: &mut Arc<VirtualMachine>,
    vmi: Option<&VirtualMachineInstance>,
) {
    let Some(vmi_ann) = vmi.and_then(|v| v.metadata.annotations.as_ref()) else {
        return;
    };
    let Some(version) = vmi_ann
        .get(annotation::PCI_TOPOLOGY_VERSION)
        .filter(|v| !v.is_empty())
    else {
        return;
    };
    let Some(template) = vm.spec.template.as_ref() else {
        return;
    };
    if template
        .metadata
        .as_ref()
        .and_then(|m| m.maps.annotations.as_ref())
        .and_then(|a| a.get(annotation::PCI_TOPOLOGY_VERSION))
        .is_some_and(|v| !v.is_empty())
    {
        return;
    }
    let Some(template) = Arc::make_mut(vm).spec.template.as_mut() else {
        return;
    };
    let meta = template.metadata.get_or_insert_with(Default::default);
    let ann = meta.maps.annotations.get_or_insert_with(Default::default);
    ann.insert(annotation::PCI_TOPOLOGY_VERSION, version.clone());
    if let Some(count) = vmi_ann.get(annotation::PCI_INTERFACE_SLOT_COUNT) {
        ann.insert(annotation::PCI_INTERFACE_SLOT_COUNT, count.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(template_meta: Value, vm_ann: Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "annotations": vm_ann},
            "spec": {"template": {"metadata": template_meta, "spec": {"domain": {"devices": {}}}}},
        }))
        .unwrap()
    }

    fn vmi(meta: Value) -> VirtualMachineInstance {
        let mut m = meta;
        m["name"] = json!("vm");
        serde_json::from_value(json!({"metadata": m, "spec": {"domain": {"devices": {}}}})).unwrap()
    }

    /// Mirrors vm_test.go:3237 "should sync selected dynamic annotations from spec.template to
    /// vmi": descheduler keys are synced by default, others only when configured.
    #[test]
    fn annotations() {
        let v = vm(
            json!({"annotations": {"descheduler.alpha.kubernetes.io/evict": "true", "other": "x",
                                    "vendor.io/a": "1"}}),
            json!(null),
        );
        let i = vmi(json!({"annotations": {"keep": "me"}}));
        let p = dynamic_metadata_patch(&v, &i, &[], &[]).unwrap();
        assert_eq!(
            p.patch,
            json!([
                {"op": "test", "path": "/metadata/annotations", "value": {"keep": "me"}},
                {"op": "replace", "path": "/metadata/annotations",
                 "value": {"descheduler.alpha.kubernetes.io/evict": "true", "keep": "me"}},
            ])
        );
        let p = dynamic_metadata_patch(&v, &i, &[], &["vendor.io/*".into(), "*".into()]).unwrap();
        assert_eq!(
            p.annotations
                .unwrap()
                .get("vendor.io/a")
                .map(String::as_str),
            Some("1")
        );
        // Already in sync: nothing.
        let synced = vmi(json!({"annotations": {"descheduler.alpha.kubernetes.io/evict": "true"}}));
        assert!(dynamic_metadata_patch(&v, &synced, &[], &[]).is_none());
        // Removed from the VM: removed from the VMI.
        let v2 = vm(json!({}), json!(null));
        let p = dynamic_metadata_patch(&v2, &synced, &[], &[]).unwrap();
        assert_eq!(p.annotations, Some(Map::new()));
    }

    /// Mirrors vm_test.go:3348 "should sync selected dynamic labels from spec.template to vmi".
    #[test]
    fn labels_only_when_configured_and_add_when_absent() {
        let v = vm(json!({"labels": {"team": "a"}}), json!(null));
        let i = vmi(json!({}));
        assert!(dynamic_metadata_patch(&v, &i, &[], &[]).is_none());
        let p = dynamic_metadata_patch(&v, &i, &["team".into()], &[]).unwrap();
        assert_eq!(
            p.patch,
            json!([{"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}])
        );
    }

    #[test]
    fn velero_annotation_comes_from_vm_metadata() {
        let v = vm(json!({}), json!({"kubevirt.io/skip-backup-hooks": "true"}));
        let i = vmi(json!({}));
        let p = dynamic_metadata_patch(&v, &i, &[], &[]).unwrap();
        assert_eq!(
            p.patch,
            json!([{"op": "add", "path": "/metadata/annotations",
                    "value": {"kubevirt.io/skip-backup-hooks": "true"}}])
        );
    }

    #[test]
    fn pci_topology_copied_once() {
        let mut v = Arc::new(vm(json!({}), json!(null)));
        let i = vmi(
            json!({"annotations": {"kubevirt.io/pci-topology-version": "v2",
                                            "kubevirt.io/pci-interface-slot-count": "4"}}),
        );
        sync_pci_topology_annotations_to_vm(&mut v, Some(&i));
        let ann = v
            .spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .maps
            .annotations
            .clone()
            .unwrap();
        assert_eq!(ann.get("kubevirt.io/pci-topology-version").unwrap(), "v2");
        assert_eq!(
            ann.get("kubevirt.io/pci-interface-slot-count").unwrap(),
            "4"
        );
        // Present now: nothing is copied again, and the shared VM is not copied either.
        let before = v.clone();
        sync_pci_topology_annotations_to_vm(&mut v, Some(&i));
        assert!(Arc::ptr_eq(&before, &v));
        // A VMI without the annotation leaves the VM shared too.
        let mut bare = Arc::new(vm(json!({}), json!(null)));
        let shared = bare.clone();
        sync_pci_topology_annotations_to_vm(&mut bare, Some(&vmi(json!({}))));
        assert!(Arc::ptr_eq(&shared, &bare));
    }
}
