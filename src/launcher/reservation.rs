//! SCSI persistent reservation and the launcher pod: the claims a VMI reserves are labelled on its
//! pod, and the pod refuses a node that runs another pod reserving the same claim (KubeVirt
//! v1.9.0 `setPersistentReservationAntiAffinity`, pkg/virt-controller/services/template.go:164-193,
//! with pkg/storage/reservation/pr.go:75-132).

use super::resources::NamespaceContext;
use crate::api::vmi::VirtualMachineInstance;
use k8s_openapi::api::core::v1::PodAffinityTerm;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeMap;

/// `v1.PersistentReservationLabelPrefix` (kubevirt.io/api core/v1/types.go:1394).
const LABEL_PREFIX: &str = "pr.kubevirt.io/";

/// `PersistentReservationPVCLabels` (pr.go:75-108): `pr.kubevirt.io/<claim UID>: ""` for every
/// `lun` disk with `reservation: true` whose volume is a `persistentVolumeClaim` or
/// `dataVolume` claim found in `ns.pvcs`. A claim not found (or claims not known) adds nothing,
/// as KubeVirt's cache lookup returning no claim does.
pub(crate) fn claim_labels(
    vmi: &VirtualMachineInstance,
    ns: &NamespaceContext,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(pvcs) = &ns.pvcs else {
        return out;
    };
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    for disk in vmi.spec.domain.devices.disks.iter().flatten() {
        let reserved = disk
            .extra
            .field("lun", |l| l.get("reservation")?.as_bool())
            .unwrap_or(false);
        if !reserved {
            continue;
        }
        // `PVCNameFromVirtVolume` (pkg/storage/types/pvc.go:111-122).
        let claim = volumes
            .iter()
            .find(|v| v.name == disk.name)
            .and_then(|v| match &v.data_volume {
                Some(dv) => dv.name.as_deref(),
                None => v.persistent_volume_claim.as_ref()?.claim_name.as_deref(),
            })
            .filter(|c| !c.is_empty());
        if let Some(uid) = claim.and_then(|c| pvcs.get(c)?.uid.as_deref()) {
            out.insert(format!("{LABEL_PREFIX}{uid}"), String::new());
        }
    }
    out
}

/// `PersistentReservationPodAntiAffinityTerms` (pr.go:110-132): per label, a required term
/// keeping the pod off any node (`kubernetes.io/hostname`) with a pod carrying that label.
/// KubeVirt walks a Go map (random order); these follow the labels' sorted order.
pub(crate) fn anti_affinity_terms(labels: &BTreeMap<String, String>) -> Vec<PodAffinityTerm> {
    labels
        .keys()
        .map(|key| PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: key.clone(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                match_labels: None,
            }),
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::resources::PvcInfo;
    use serde_json::json;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "ns"}, "spec": spec}))
        .unwrap()
    }

    fn claims(entries: &[(&str, Option<&str>)]) -> NamespaceContext {
        NamespaceContext {
            pvcs: Some(
                entries
                    .iter()
                    .map(|(name, uid)| {
                        let info = PvcInfo {
                            uid: uid.map(str::to_string),
                            ..PvcInfo::default()
                        };
                        (name.to_string(), info)
                    })
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// pr_test.go's cases: only reserving LUN disks count, by their claim's UID; a claim not in
    /// the cache is skipped; a plain disk or a LUN without reservation adds nothing.
    #[test]
    fn labels_name_the_uids_of_reserved_claims_only() {
        let v = vmi(json!({"domain": {"devices": {"disks": [
                {"name": "a", "lun": {"bus": "scsi", "reservation": true}},
                {"name": "b", "lun": {"bus": "scsi"}},
                {"name": "c", "disk": {"bus": "virtio"}},
                {"name": "d", "lun": {"reservation": true}},
                {"name": "e", "lun": {"reservation": true}}]}},
            "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "shared-lun"}},
                {"name": "b", "persistentVolumeClaim": {"claimName": "plain-lun"}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "root"}},
                {"name": "d", "dataVolume": {"name": "imported-lun"}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "not-cached"}}]}));
        let ns = claims(&[
            ("shared-lun", Some("uid-1")),
            ("plain-lun", Some("uid-2")),
            ("root", Some("uid-3")),
            ("imported-lun", Some("uid-4")),
        ]);
        let labels = claim_labels(&v, &ns);
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            ["pr.kubevirt.io/uid-1", "pr.kubevirt.io/uid-4"]
        );
        assert!(labels.values().all(String::is_empty));
        // Claims not known at all (explain-overhead without a cluster): nothing to label.
        assert!(claim_labels(&v, &NamespaceContext::default()).is_empty());
    }

    #[test]
    fn one_required_hostname_term_per_label() {
        let labels = BTreeMap::from([
            ("pr.kubevirt.io/u2".to_string(), String::new()),
            ("pr.kubevirt.io/u1".to_string(), String::new()),
        ]);
        let terms = anti_affinity_terms(&labels);
        let got: Vec<_> = terms
            .iter()
            .map(|t| {
                let e = &t
                    .label_selector
                    .as_ref()
                    .unwrap()
                    .match_expressions
                    .as_ref()
                    .unwrap()[0];
                (e.key.as_str(), e.operator.as_str(), t.topology_key.as_str())
            })
            .collect();
        assert_eq!(
            got,
            [
                ("pr.kubevirt.io/u1", "Exists", "kubernetes.io/hostname"),
                ("pr.kubevirt.io/u2", "Exists", "kubernetes.io/hostname")
            ]
        );
    }
}
