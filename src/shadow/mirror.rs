//! The shadow's caches: every watched object as JSON, by kind and `namespace/name`, and our
//! decisions for one VM key computed from them with the controllers' own pure functions
//! (through the inspector's [`decide_next`], which builds the snapshots the executors build).

use super::predict::{Intended, Kind, vm_writes, vmi_writes};
use crate::api::{Time, VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::controller::vm::VmDecision;
use crate::controller::vm::volume_snapshot::StorageView;
use crate::controller::vmi::VmiDecision;
use crate::inspect::analyze::{Refused, decide_next_refused, decide_vmi, vmi_expectations_state};
use crate::inspect::gather::{BackendStorageInputs, Gathered};
use crate::inspect::model::ExpectationView;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;

/// Objects of one kind by `namespace/name`.
pub(super) type Objects = BTreeMap<String, Value>;

/// The watched objects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mirror {
    /// One map per compared kind.
    pub objects: BTreeMap<Kind, Objects>,
    /// PersistentVolumeClaims (read by both decisions, never compared).
    pub pvcs: Objects,
    /// The settings the decisions render with.
    pub settings: ClusterSettings,
    /// The cluster's storage objects the VM controller reads for
    /// `status.volumeSnapshotStatuses`; `None`: not known (a live shadow watches only the
    /// StorageClasses, below), and the decision leaves that field as it is.
    pub storage: Option<StorageObjects>,
    /// The StorageClasses a live shadow watches, by name: what backend storage decides with
    /// when [`Mirror::storage`] is not known.
    pub storage_classes: Objects,
    /// The nodes (as the controller's node cache keeps them, by `/name`) the VMI controller's
    /// topology hinter reads; `None`: not known (a live shadow and an audit log watch no nodes),
    /// and the VMI decision predicts no `status.topologyHints`, saying so. Replay knows them:
    /// a recorded reconcile names the nodes it read.
    pub nodes: Option<Objects>,
}

/// StorageClasses, StorageProfiles and VolumeSnapshotClasses (cluster-scoped) by name, as
/// KubeVirt's snapshot controller's informers hold them (snapshot_base.go:70-125).
#[derive(Debug, Clone, Default)]
pub(crate) struct StorageObjects {
    pub storage_classes: Objects,
    pub storage_profiles: Objects,
    pub snapshot_classes: Objects,
}

/// The objects of a map, decoded; one that does not decode is an error naming it.
fn typed<T: serde::de::DeserializeOwned>(kind: &str, m: &Objects) -> Result<Vec<T>, String> {
    m.iter()
        .map(|(name, v)| {
            serde_json::from_value(v.clone())
                .map_err(|e| format!("{kind} {name}: cannot be read: {e}"))
        })
        .collect()
}

impl StorageObjects {
    /// What the backend-storage rules read of them: the StorageClasses and the StorageProfiles'
    /// claim property sets (the claims come from the mirror's PVCs).
    fn backend_storage(&self) -> Result<BackendStorageInputs, String> {
        let profiles: Vec<crate::api::storage::StorageProfile> =
            typed("StorageProfile", &self.storage_profiles)?;
        Ok(BackendStorageInputs {
            claims: Vec::new(),
            storage_classes: typed("StorageClass", &self.storage_classes)?,
            profile_sets: crate::inspect::gather::profile_sets(&profiles),
        })
    }

    /// What the volume snapshot rule reads of them; an object that does not decode is an
    /// error naming it.
    fn view(&self) -> Result<StorageView, String> {
        let classes: Vec<k8s_openapi::api::storage::v1::StorageClass> =
            typed("StorageClass", &self.storage_classes)?;
        let profiles: Vec<crate::api::storage::StorageProfile> =
            typed("StorageProfile", &self.storage_profiles)?;
        let snapshot: Vec<crate::api::storage::VolumeSnapshotClass> =
            typed("VolumeSnapshotClass", &self.snapshot_classes)?;
        Ok(StorageView::from_objects(&classes, &profiles, &snapshot))
    }
}

/// `namespace/name` of a JSON object.
pub(crate) fn key_of(obj: &Value) -> String {
    let meta = &obj["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or("")
    )
}

/// The name of the controller owner of `obj` of kind `owner_kind`.
fn controller_owner<'a>(obj: &'a Value, owner_kind: &str) -> Option<&'a str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r["controller"] == Value::Bool(true) && r["kind"] == owner_kind)?
        .get("name")?
        .as_str()
}

/// The VM key whose reconcile writes `obj` of `kind`: the VM itself, the VMI's namesake VM,
/// the owner VMI of a pod, the owner VM of a revision or DataVolume. `None`: no VM or VMI
/// controller reconciles it.
pub(crate) fn vm_key(kind: Kind, obj: &Value) -> Option<String> {
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let owner = match kind {
        Kind::VirtualMachine | Kind::VirtualMachineInstance => return Some(key_of(obj)),
        Kind::Pod => controller_owner(obj, "VirtualMachineInstance"),
        Kind::ControllerRevision | Kind::DataVolume => controller_owner(obj, "VirtualMachine"),
    }?;
    Some(format!("{ns}/{owner}"))
}

impl Mirror {
    /// The objects of `kind`.
    pub(crate) fn of(&self, kind: Kind) -> Option<&Objects> {
        self.objects.get(&kind)
    }

    /// The object of `kind` at `key`.
    pub(crate) fn get(&self, kind: Kind, key: &str) -> Option<&Value> {
        self.of(kind)?.get(key)
    }

    /// Store (`Some`) or forget (`None`) the object of `kind` at `key`.
    pub(crate) fn set(&mut self, kind: Kind, key: &str, obj: Option<Value>) {
        let map = self.objects.entry(kind).or_default();
        match obj {
            Some(v) => {
                map.insert(key.to_string(), v);
            }
            None => {
                map.remove(key);
            }
        }
    }

    fn in_namespace<T: serde::de::DeserializeOwned>(&self, kind: Kind, ns: &str) -> Vec<T> {
        let prefix = format!("{ns}/");
        self.of(kind)
            .into_iter()
            .flat_map(|m| m.range(prefix.clone()..))
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(_, v)| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        kind: Kind,
        key: &str,
    ) -> Result<Option<T>, String> {
        self.get(kind, key)
            .map(|v| {
                serde_json::from_value(v.clone())
                    .map_err(|e| format!("{} {key}: cannot be read: {e}", kind.as_str()))
            })
            .transpose()
    }

    /// The writes our VM and VMI controllers would make for VM key `key` (`namespace/name`)
    /// from these objects at `now`, expectations satisfied (the shadow cannot see the
    /// leader's). An object that does not decode is an error naming it.
    pub(crate) fn decide(&self, key: &str, now: DateTime<Utc>) -> Result<Vec<Intended>, String> {
        let name = key.split_once('/').map_or(key, |(_, n)| n);
        let (vm, vmi) = self.decisions(key, now, &[])?;
        let mut out = vm.map(|d| vm_writes(&d, name)).unwrap_or_default();
        out.extend(vmi.into_iter().flat_map(|d| vmi_writes(&d, name)));
        Ok(out)
    }

    /// The VM and VMI controllers' decisions for key `key` from these objects at `now`, with
    /// the key's `expectations` entries (none: satisfied): the VM's (when the VM is here) and
    /// the VMI's (when the VMI is). Shadow and `replay` both decide here.
    pub(crate) fn decisions(
        &self,
        key: &str,
        now: DateTime<Utc>,
        expectations: &[ExpectationView],
    ) -> Result<(Option<VmDecision>, Option<VmiDecision>), String> {
        self.decisions_refused(key, now, expectations, None)
    }

    /// [`Mirror::decisions`] when a write of the reconcile was `refused`: the controller whose
    /// write it was decides the rest from the error, as its executor does.
    pub(crate) fn decisions_refused(
        &self,
        key: &str,
        now: DateTime<Utc>,
        expectations: &[ExpectationView],
        refused: Option<&Refused>,
    ) -> Result<(Option<VmDecision>, Option<VmiDecision>), String> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let vm: Option<VirtualMachine> = self.typed(Kind::VirtualMachine, key)?;
        let vmi: Option<VirtualMachineInstance> = self.typed(Kind::VirtualMachineInstance, key)?;
        let pvcs = |claim: &str| {
            self.pvcs
                .get(&format!("{ns}/{claim}"))
                .and_then(|v| serde_json::from_value(v.clone()).ok())
        };
        let Some(vm) = vm else {
            let state = vmi_expectations_state(expectations);
            return Ok((
                None,
                vmi.map(|v| self.decide_vmi_alone(v, now, pvcs, state, refused)),
            ));
        };
        let g = Gathered {
            now,
            namespace: ns.to_string(),
            name: name.to_string(),
            vm: Some(vm.clone()),
            vmi,
            pods: self.in_namespace(Kind::Pod, ns),
            revisions: self.in_namespace(Kind::ControllerRevision, ns),
            data_volumes: self.in_namespace(Kind::DataVolume, ns),
            pvcs: self
                .pvcs_in(ns)
                .into_iter()
                .filter_map(|p| p.metadata.name.clone().map(|n| (n, p)))
                .collect(),
            settings: self.settings.clone(),
            storage: self
                .storage
                .as_ref()
                .map(StorageObjects::view)
                .transpose()?,
            backend_storage: self.backend_storage()?,
            topology: self.topology(),
            ..Gathered::default()
        };
        let d = decide_next_refused(&g, &vm, expectations, refused);
        Ok((Some(d.vm), d.vmi))
    }

    /// The storage objects backend storage reads: all of them when known (an audit log's),
    /// else the StorageClasses a live shadow watches, without StorageProfiles (a claim to be
    /// created then gets the access mode of a class without a profile: backend-storage.go:
    /// 453-456).
    fn backend_storage(&self) -> Result<BackendStorageInputs, String> {
        match &self.storage {
            Some(s) => s.backend_storage(),
            None => Ok(BackendStorageInputs {
                storage_classes: typed("StorageClass", &self.storage_classes)?,
                ..Default::default()
            }),
        }
    }

    fn pvcs_in(&self, ns: &str) -> Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim> {
        let prefix = format!("{ns}/");
        self.pvcs
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(_, v)| serde_json::from_value(v.clone()).ok())
            .collect()
    }

    fn decide_vmi_alone(
        &self,
        vmi: VirtualMachineInstance,
        now: DateTime<Utc>,
        pvc: impl Fn(&str) -> Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
        expectations: crate::controller::vmi::ExpectationsState,
        refused: Option<&Refused>,
    ) -> VmiDecision {
        let ns = vmi.metadata.namespace.clone().unwrap_or_default();
        let pods: Vec<_> = self.in_namespace(Kind::Pod, &ns);
        let dvs: Vec<crate::api::DataVolume> = self.in_namespace(Kind::DataVolume, &ns);
        let dv = |n: &str| {
            dvs.iter()
                .find(|d| d.metadata.name.as_deref() == Some(n))
                .cloned()
        };
        let settings = &self.settings;
        // The VMI's backend-storage claim as the VMI executor finds it (it was read as empty,
        // so a standalone VMI with a persistent TPM or EFI was decided without its claim).
        let backend = self.backend_storage().unwrap_or_default();
        let claims = self.pvcs_in(&ns);
        let classes: Vec<_> = backend.storage_classes.iter().collect();
        let backend_state = crate::controller::vmi::backend_storage::state(
            &vmi,
            claims.iter(),
            &classes,
            |class| backend.profile_sets.get(class).cloned(),
            settings.vm_state_storage_class.as_deref(),
        );
        let mut snap = crate::controller::vmi::executor::snapshot_from_objects(
            vmi,
            pods.into_iter().map(std::sync::Arc::new),
            None,
            expectations,
            (dv, pvc, &Default::default(), backend_state),
            (settings, || {
                crate::launcher::resources::NamespaceContext::from_cluster(None, &[], settings)
            }),
            Time::from_datetime(now),
        );
        snap.topology = self.topology();
        decide_vmi(&snap, refused)
    }

    /// What the topology hinter reads, when the nodes are known: the settings' minimum TSC
    /// frequency, the nodes, each marked when a mirrored VMI runs on it (filter.go:109-123).
    fn topology(&self) -> Option<crate::controller::vmi::topology::TopologyState> {
        use crate::controller::vmi::topology::{NodeTsc, TopologyState};
        let nodes = self.nodes.as_ref()?;
        let running: std::collections::BTreeSet<&str> = self
            .of(Kind::VirtualMachineInstance)
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.pointer("/status/nodeName")?.as_str())
            .collect();
        let nodes = nodes
            .values()
            .filter_map(|v| {
                serde_json::from_value::<k8s_openapi::api::core::v1::Node>(v.clone()).ok()
            })
            .map(|n| {
                let mut t = NodeTsc::from_node(&n);
                t.runs_vmis = running.contains(t.name.as_str());
                t
            })
            .collect();
        Some(TopologyState {
            minimum_cluster_tsc_frequency: self.settings.minimum_cluster_tsc_frequency,
            nodes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A standalone VMI `ns/NAME` as virt-api leaves it, Pending, with `spec`.
    fn pending_vmi(name: &str, spec: serde_json::Value) -> serde_json::Value {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "ns", "uid": "vmi-uid",
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                                "kubevirt.io/storage-observed-api-version": "v1"}},
            "spec": spec, "status": {"phase": "Pending"}})
    }

    #[test]
    fn writes_map_to_the_vm_key_that_reconciles_them() {
        let pod = json!({"metadata": {"namespace": "ns", "name": "virt-launcher-a-x",
            "ownerReferences": [{"kind": "VirtualMachineInstance", "name": "a",
                "controller": true, "uid": "u", "apiVersion": "kubevirt.io/v1"}]}});
        assert_eq!(vm_key(Kind::Pod, &pod).as_deref(), Some("ns/a"));
        let stray = json!({"metadata": {"namespace": "ns", "name": "p"}});
        assert_eq!(vm_key(Kind::Pod, &stray), None);
        let vmi = json!({"metadata": {"namespace": "ns", "name": "b"}});
        assert_eq!(
            vm_key(Kind::VirtualMachineInstance, &vmi).as_deref(),
            Some("ns/b")
        );
    }

    /// A Pending VMI with a persistent TPM, its claim not created yet, a default StorageClass
    /// among the storage objects: the shadow decides what the controller does, creating the
    /// claim in that class (backend-storage.go:412-437, 509-557). It read no StorageClass
    /// before, and decided `FailedBackendStorageCreate` "no default storage class found".
    #[test]
    fn a_persistent_tpm_vm_gets_its_claim_in_the_default_class() {
        let mut m = Mirror::default();
        let tpm = json!({"domain": {"devices": {"tpm": {"persistent": true}}}});
        // The VM and its VMI, `tpm` in namespace `ns`, both with the observed api-version.
        let object = |kind: &str, uid: &str, meta: Value, rest: Value| {
            let mut o = json!({"apiVersion": "kubevirt.io/v1", "kind": kind,
                "metadata": {"name": "tpm", "namespace": "ns", "uid": uid,
                    "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                                    "kubevirt.io/storage-observed-api-version": "v1"}}});
            json_patch::merge(&mut o, &json!({ "metadata": meta }));
            json_patch::merge(&mut o, &rest);
            o
        };
        let vm = object(
            "VirtualMachine",
            "vm-uid",
            json!({"finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]}),
            json!({"spec": {"runStrategy": "Always", "template": {"spec": tpm.clone()}}}),
        );
        let owner = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "name": "tpm", "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true});
        let vmi = object(
            "VirtualMachineInstance",
            "vmi-uid",
            json!({ "ownerReferences": [owner] }),
            json!({"spec": tpm, "status": {"phase": "Pending"}}),
        );
        m.set(Kind::VirtualMachine, "ns/tpm", Some(vm));
        m.set(Kind::VirtualMachineInstance, "ns/tpm", Some(vmi));
        let mut storage = StorageObjects::default();
        storage.storage_classes.insert(
            "fast".into(),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": "fast", "annotations":
                    {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "example.com/fast"}),
        );
        m.storage = Some(storage);
        let (_, vmi) = m.decisions("ns/tpm", Utc::now(), &[]).unwrap();
        let vmi = vmi.unwrap();
        let created = vmi.sync_actions.iter().find_map(|a| match a {
            crate::controller::vmi::VmiAction::CreateBackendStoragePvc { pvc, .. } => {
                Some(pvc.clone())
            }
            _ => None,
        });
        let pvc = created.unwrap_or_else(|| panic!("no claim created: {vmi:#?}"));
        let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
        assert_eq!(class.as_deref(), Some("fast"));
    }

    /// An `invtsc` VMI: with the nodes known (replay), the mirror decides the hint the
    /// controller writes, the lowest frequency of a schedulable node or one running a VMI
    /// (hinter.go:49-67); without them (a live shadow), no hint, and the decision says so.
    #[test]
    fn an_invtsc_vmi_gets_the_hint_of_the_known_nodes() {
        let mut m = Mirror::default();
        m.set(
            Kind::VirtualMachineInstance,
            "ns/tsc",
            Some(pending_vmi(
                "tsc",
                json!({"architecture": "amd64", "domain": {"devices": {},
                    "cpu": {"features": [{"name": "invtsc", "policy": "require"}]}}}),
            )),
        );
        m.set(
            Kind::VirtualMachineInstance,
            "ns/other",
            Some(
                json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "other", "namespace": "ns"},
                "spec": {"domain": {"devices": {}}},
                "status": {"phase": "Running", "nodeName": "cordoned"}}),
            ),
        );
        let hint = |m: &Mirror| {
            let (_, vmi) = m.decisions("ns/tsc", Utc::now(), &[]).unwrap();
            let vmi = vmi.unwrap();
            let hint = vmi.status_actions.iter().find_map(|a| match a {
                crate::controller::vmi::VmiAction::UpdateVmi { vmi, .. } => {
                    vmi.status.as_ref()?.extra.get("topologyHints").cloned()
                }
                _ => None,
            });
            (hint, vmi.explanation)
        };
        let (none, why) = hint(&m);
        assert_eq!(none, None);
        assert!(why.iter().any(|e| e.contains("not predicted")), "{why:#?}");
        let node = |name: &str, freq: &str, schedulable: &str| {
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
                "cpu-timer.node.kubevirt.io/tsc-frequency": freq,
                "kubevirt.io/schedulable": schedulable}}})
        };
        m.nodes = Some(
            [
                ("/a".to_string(), node("a", "2400000000", "true")),
                (
                    "/cordoned".to_string(),
                    node("cordoned", "2200000000", "false"),
                ),
                ("/idle".to_string(), node("idle", "1000", "false")),
            ]
            .into(),
        );
        assert_eq!(hint(&m).0, Some(json!({"tscFrequency": 2_200_000_000_i64})));
    }

    /// The same for a VM's VMI, decided through the inspector's `decide_next` (replay of a
    /// VM key): the nodes reach it in `Gathered::topology`.
    #[test]
    fn a_vms_invtsc_vmi_gets_the_hint_of_the_known_nodes() {
        let mut m = Mirror::default();
        let spec = json!({"architecture": "amd64", "domain": {"devices": {},
            "cpu": {"features": [{"name": "invtsc", "policy": "require"}]}}});
        let annotations = json!({"kubevirt.io/latest-observed-api-version": "v1",
            "kubevirt.io/storage-observed-api-version": "v1"});
        m.set(
            Kind::VirtualMachine,
            "ns/tsc",
            Some(
                json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": "tsc", "namespace": "ns", "uid": "vm-uid",
                    "annotations": annotations,
                    "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
                "spec": {"runStrategy": "Always", "template": {"spec": spec}}}),
            ),
        );
        m.set(
            Kind::VirtualMachineInstance,
            "ns/tsc",
            Some(
                json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "tsc", "namespace": "ns", "uid": "vmi-uid",
                    "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachine", "name": "tsc", "uid": "vm-uid",
                        "controller": true, "blockOwnerDeletion": true}]},
                "spec": spec, "status": {"phase": "Pending"}}),
            ),
        );
        m.nodes = Some(
            [(
                "/a".to_string(),
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "a",
                    "labels": {"cpu-timer.node.kubevirt.io/tsc-frequency": "2400000000",
                        "kubevirt.io/schedulable": "true"}}}),
            )]
            .into(),
        );
        let (_, vmi) = m.decisions("ns/tsc", Utc::now(), &[]).unwrap();
        let vmi = vmi.unwrap();
        assert!(
            vmi.explanation
                .iter()
                .any(|e| e.contains("TSC frequency 2400000000")),
            "{:#?}",
            vmi.explanation
        );
    }

    /// A standalone VMI with a persistent TPM whose labelled claim is Bound: its pod mounts
    /// the claim as `vm-state`. The shadow passed an empty backend-storage state for VMIs
    /// without a VM, so the pod it predicted had no such volume.
    #[test]
    fn a_standalone_vmi_mounts_its_bound_claim() {
        let mut m = Mirror::default();
        m.set(
            Kind::VirtualMachineInstance,
            "ns/solo",
            Some(pending_vmi(
                "solo",
                json!({"domain": {"devices": {"tpm": {"persistent": true}}}}),
            )),
        );
        m.pvcs.insert(
            "ns/persistent-state-for-solo-x1".into(),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "persistent-state-for-solo-x1", "namespace": "ns",
                    "labels": {"persistent-state-for": "solo"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast"},
                "status": {"phase": "Bound"}}),
        );
        let (_, vmi) = m.decisions("ns/solo", Utc::now(), &[]).unwrap();
        let vmi = vmi.unwrap();
        let pod = vmi.sync_actions.iter().find_map(|a| match a {
            crate::controller::vmi::VmiAction::CreatePod { pod, .. } => Some(pod.clone()),
            _ => None,
        });
        let pod = serde_json::to_value(&*pod.expect("a pod")).unwrap();
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert!(
            volumes.contains(&json!({"name": "vm-state", "persistentVolumeClaim":
                {"claimName": "persistent-state-for-solo-x1"}})),
            "{volumes:?}"
        );
    }

    #[test]
    fn an_object_that_does_not_decode_is_named() {
        let mut m = Mirror::default();
        m.set(
            Kind::VirtualMachine,
            "ns/a",
            Some(json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"runStrategy": 7}})),
        );
        let err = m.decide("ns/a", Utc::now()).unwrap_err();
        assert!(err.contains("VirtualMachine ns/a"), "{err}");
    }
}
