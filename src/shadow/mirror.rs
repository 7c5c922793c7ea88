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
use crate::launcher::backend_storage::PVC_PREFIX;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Objects of one kind by `namespace/name`.
pub(super) type Objects = BTreeMap<String, Value>;

/// Objects of one compared kind by `namespace/name`, each shared with the tracker's history and
/// the scoped copies ([`Mirror::scope`]) instead of copied.
type Shared = BTreeMap<String, Arc<Value>>;

/// The watched objects.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mirror {
    /// One map per compared kind (written through [`Mirror::set`], which keeps the indexes).
    objects: BTreeMap<Kind, Shared>,
    /// PersistentVolumeClaims, read by both decisions, never compared (written through
    /// [`Mirror::set_pvc`]).
    pvcs: Objects,
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
    /// Per owner UID, the objects of the compared kinds with an ownerReference to it: a VMI's
    /// launcher pods, their attachment pods, a VM's revisions and DataVolumes.
    owned: BTreeMap<String, BTreeSet<(Kind, String)>>,
    /// Per VM key, the objects of the compared kinds its reconciles write ([`vm_key`]).
    by_vm_key: BTreeMap<String, BTreeSet<(Kind, String)>>,
    /// Per `namespace/value` of the backend-storage label ([`PVC_PREFIX`]), its claims.
    state_claims: BTreeMap<String, BTreeSet<String>>,
}

/// What the decisions for one VM key can read of a [`Mirror`] ([`Mirror::reads`]).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Reads {
    /// Objects of the compared kinds, by kind and `namespace/name`.
    pub objects: BTreeSet<(Kind, String)>,
    /// PersistentVolumeClaims by `namespace/name`.
    pub claims: BTreeSet<String>,
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
            T::deserialize(v).map_err(|e| format!("{kind} {name}: cannot be read: {e}"))
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

/// Where [`Mirror::set`] indexes `obj` of `kind`: the UIDs its ownerReferences name, and its
/// VM key.
fn index_entries(kind: Kind, obj: &Value) -> (Vec<String>, Option<String>) {
    let uids = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(str::to_string))
        .collect();
    (uids, vm_key(kind, obj))
}

/// Take `id` out of `index[at]`, and the entry once empty.
fn unindex<T: Ord>(index: &mut BTreeMap<String, BTreeSet<T>>, at: &str, id: &T) {
    if let Some(set) = index.get_mut(at) {
        set.remove(id);
        if set.is_empty() {
            index.remove(at);
        }
    }
}

/// Every string value in `v` (not the keys), into `out`: the names an object may refer to.
fn string_leaves<'a>(v: &'a Value, out: &mut BTreeSet<&'a str>) {
    match v {
        Value::String(s) => {
            out.insert(s);
        }
        Value::Array(items) => items.iter().for_each(|i| string_leaves(i, out)),
        Value::Object(map) => map.values().for_each(|i| string_leaves(i, out)),
        _ => {}
    }
}

impl Mirror {
    /// An empty mirror whose decisions render with `settings`.
    pub(crate) fn new(settings: ClusterSettings) -> Self {
        Mirror {
            settings,
            ..Mirror::default()
        }
    }

    /// The objects of `kind`.
    fn of(&self, kind: Kind) -> impl Iterator<Item = (&String, &Value)> {
        let map = self.objects.get(&kind).into_iter().flatten();
        map.map(|(k, v)| (k, v.as_ref()))
    }

    /// The object of `kind` at `key`.
    pub(crate) fn get(&self, kind: Kind, key: &str) -> Option<&Value> {
        self.objects.get(&kind)?.get(key).map(Arc::as_ref)
    }

    /// The object of `kind` at `key`, shared.
    pub(crate) fn shared(&self, kind: Kind, key: &str) -> Option<Arc<Value>> {
        self.objects.get(&kind)?.get(key).cloned()
    }

    /// Store (`Some`) or forget (`None`) the object of `kind` at `key`.
    pub(crate) fn set(&mut self, kind: Kind, key: &str, obj: Option<Value>) {
        self.set_shared(kind, key, obj.map(Arc::new));
    }

    /// [`Mirror::set`] with an object shared with its other holders.
    pub(crate) fn set_shared(&mut self, kind: Kind, key: &str, obj: Option<Arc<Value>>) {
        let map = self.objects.entry(kind).or_default();
        let old = match obj {
            Some(v) => map.insert(key.to_string(), v),
            None => map.remove(key),
        };
        let id = (kind, key.to_string());
        if let Some(old) = old {
            let (uids, vm_key) = index_entries(kind, &old);
            for uid in uids {
                unindex(&mut self.owned, &uid, &id);
            }
            if let Some(k) = vm_key {
                unindex(&mut self.by_vm_key, &k, &id);
            }
        }
        if let Some(new) = self.get(kind, key) {
            let (uids, vm_key) = index_entries(kind, new);
            for uid in uids {
                self.owned.entry(uid).or_default().insert(id.clone());
            }
            if let Some(k) = vm_key {
                self.by_vm_key.entry(k).or_default().insert(id);
            }
        }
    }

    /// Store (`Some`) or forget (`None`) the PersistentVolumeClaim at `key`.
    pub(crate) fn set_pvc(&mut self, key: &str, obj: Option<Value>) {
        let old = match obj {
            Some(v) => self.pvcs.insert(key.to_string(), v),
            None => self.pvcs.remove(key),
        };
        let label = |v: &Value| {
            let value = v.pointer("/metadata/labels")?.get(PVC_PREFIX)?.as_str()?;
            let ns = v.pointer("/metadata/namespace")?.as_str().unwrap_or("");
            Some(format!("{ns}/{value}"))
        };
        if let Some(l) = old.as_ref().and_then(label) {
            unindex(&mut self.state_claims, &l, &key.to_string());
        }
        if let Some(l) = self.pvcs.get(key).and_then(label) {
            self.state_claims
                .entry(l)
                .or_default()
                .insert(key.to_string());
        }
    }

    /// The VM keys with an object here, each once.
    #[cfg(test)]
    pub(crate) fn vm_keys(&self) -> BTreeSet<&str> {
        self.by_vm_key.keys().map(String::as_str).collect()
    }

    /// The objects of VM key `key`'s reconciles ([`vm_key`]): its VM, its VMI, the launcher
    /// pods a VMI of that name controls, the revisions and DataVolumes the VM controls.
    pub(crate) fn of_vm_key<'a>(&'a self, key: &str) -> impl Iterator<Item = (Kind, &'a str)> {
        self.by_vm_key
            .get(key)
            .into_iter()
            .flatten()
            .map(|(k, n)| (*k, n.as_str()))
    }

    /// What the decisions for VM key `key` can read: its VM and VMI (as stored, and as in
    /// `also`, other versions of them); the objects their UIDs own (launcher pods, revisions,
    /// DataVolumes) and the attachment pods those pods own; the objects the key's reconciles
    /// write; every DataVolume, revision and claim of the namespace that one of those VM or
    /// VMI versions names; and the backend-storage claims of `name` (by label or by the legacy
    /// name, backend-storage.go's `CurrentPVCName`). The controllers' snapshots filter their
    /// candidates by these relations (executor.rs's `snapshot_from_objects`, `vm_revisions`;
    /// lookups by name), so deciding from these objects alone decides as from all of them,
    /// without reading every object of the namespace for each decision.
    pub(crate) fn reads(&self, key: &str, also: &[&Value]) -> Reads {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let mut out = Reads::default();
        let mut versions: Vec<&Value> = Vec::new();
        for kind in [Kind::VirtualMachine, Kind::VirtualMachineInstance] {
            if let Some(v) = self.get(kind, key) {
                out.objects.insert((kind, key.to_string()));
                versions.push(v);
            }
        }
        versions.extend(also.iter().copied());
        let of_key = self.by_vm_key.get(key).into_iter().flatten();
        out.objects.extend(of_key.cloned());
        self.add_owned(&versions, &mut out);
        self.add_named(ns, &versions, &mut out);
        let labelled = self.state_claims.get(key).into_iter().flatten();
        out.claims.extend(labelled.cloned());
        let legacy = format!("{ns}/{PVC_PREFIX}-{name}");
        if self.pvcs.contains_key(&legacy) {
            out.claims.insert(legacy);
        }
        out
    }

    /// Into `out`: the objects the UIDs of `versions` own, then the pods the pods in `out` own
    /// (a launcher pod's attachment pods).
    fn add_owned(&self, versions: &[&Value], out: &mut Reads) {
        let owned_by = |uid: &str| self.owned.get(uid).into_iter().flatten();
        let uids = versions
            .iter()
            .filter_map(|v| v.pointer("/metadata/uid")?.as_str());
        for uid in uids {
            out.objects.extend(owned_by(uid).cloned());
        }
        let pods = (out.objects.iter())
            .filter(|(k, _)| *k == Kind::Pod)
            .filter_map(|(k, n)| self.get(*k, n));
        let attachments: Vec<(Kind, String)> = pods
            .filter_map(|p| p.pointer("/metadata/uid")?.as_str())
            .flat_map(|uid| owned_by(uid).filter(|(k, _)| *k == Kind::Pod).cloned())
            .collect();
        out.objects.extend(attachments);
    }

    /// Into `out`: the DataVolumes, revisions and claims of namespace `ns` named by a string
    /// of `versions`.
    fn add_named(&self, ns: &str, versions: &[&Value], out: &mut Reads) {
        let mut names = BTreeSet::new();
        for v in versions {
            string_leaves(v, &mut names);
        }
        for n in names {
            let k = format!("{ns}/{n}");
            for kind in [Kind::DataVolume, Kind::ControllerRevision] {
                if self.get(kind, &k).is_some() {
                    out.objects.insert((kind, k.clone()));
                }
            }
            if self.pvcs.contains_key(&k) {
                out.claims.insert(k);
            }
        }
    }

    /// A mirror of what the decisions for VM key `key` can read ([`Mirror::reads`], with
    /// `also`), to change and decide from without copying every object. With the nodes known,
    /// every VMI is kept: the topology hinter marks the nodes that run one.
    pub(crate) fn scope(&self, key: &str, also: &[&Value]) -> Mirror {
        let reads = self.reads(key, also);
        let mut m = Mirror {
            settings: self.settings.clone(),
            storage: self.storage.clone(),
            storage_classes: self.storage_classes.clone(),
            nodes: self.nodes.clone(),
            ..Mirror::default()
        };
        let mut objects = reads.objects;
        if self.nodes.is_some() {
            let vmis = self.of(Kind::VirtualMachineInstance);
            objects.extend(vmis.map(|(k, _)| (Kind::VirtualMachineInstance, k.clone())));
        }
        for (kind, k) in objects {
            m.set_shared(kind, &k, self.shared(kind, &k));
        }
        for c in reads.claims {
            m.set_pvc(&c, self.pvcs.get(&c).cloned());
        }
        m
    }

    /// The objects of `kind` among `reads`, decoded; one that does not decode is left out (as
    /// a cache lists what it could decode).
    fn decoded<T: serde::de::DeserializeOwned>(&self, kind: Kind, reads: &Reads) -> Vec<T> {
        reads
            .objects
            .iter()
            .filter(|(k, _)| *k == kind)
            .filter_map(|(_, n)| self.get(kind, n))
            .filter_map(|v| T::deserialize(v).ok())
            .collect()
    }

    fn typed<T: serde::de::DeserializeOwned>(
        &self,
        kind: Kind,
        key: &str,
    ) -> Result<Option<T>, String> {
        self.get(kind, key)
            .map(|v| {
                T::deserialize(v)
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
                .and_then(|v| Deserialize::deserialize(v).ok())
        };
        let reads = self.reads(key, &[]);
        let Some(vm) = vm else {
            let state = vmi_expectations_state(expectations);
            return Ok((
                None,
                vmi.map(|v| self.decide_vmi_alone(v, &reads, now, pvcs, state, refused)),
            ));
        };
        let g = Gathered {
            now,
            namespace: ns.to_string(),
            name: name.to_string(),
            vm: Some(vm.clone()),
            vmi,
            pods: self.decoded(Kind::Pod, &reads),
            revisions: self.decoded(Kind::ControllerRevision, &reads),
            data_volumes: self.decoded(Kind::DataVolume, &reads),
            pvcs: self
                .claims(&reads)
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

    /// The claims among `reads`, decoded (one that does not decode is left out).
    fn claims(&self, reads: &Reads) -> Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim> {
        reads
            .claims
            .iter()
            .filter_map(|k| self.pvcs.get(k))
            .filter_map(|v| Deserialize::deserialize(v).ok())
            .collect()
    }

    fn decide_vmi_alone(
        &self,
        vmi: VirtualMachineInstance,
        reads: &Reads,
        now: DateTime<Utc>,
        pvc: impl Fn(&str) -> Option<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
        expectations: crate::controller::vmi::ExpectationsState,
        refused: Option<&Refused>,
    ) -> VmiDecision {
        let pods: Vec<_> = self.decoded(Kind::Pod, reads);
        let dvs: Vec<crate::api::DataVolume> = self.decoded(Kind::DataVolume, reads);
        let dv = |n: &str| {
            dvs.iter()
                .find(|d| d.metadata.name.as_deref() == Some(n))
                .cloned()
        };
        let settings = &self.settings;
        // The VMI's backend-storage claim as the VMI executor finds it (it was read as empty,
        // so a standalone VMI with a persistent TPM or EFI was decided without its claim).
        let backend = self.backend_storage().unwrap_or_default();
        let claims = self.claims(reads);
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
            .filter_map(|(_, v)| v.pointer("/status/nodeName")?.as_str())
            .collect();
        let nodes = nodes
            .values()
            .filter_map(|v| k8s_openapi::api::core::v1::Node::deserialize(v).ok())
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

    /// VMs `a` and `b` of namespace `ns`, each with its VMI, launcher pod, an attachment pod
    /// the launcher pod controls, a revision the VM owns, one the VMI names, the DataVolume
    /// and claim its volume names and a backend-storage claim; and a claim no one names.
    fn two_vms() -> Mirror {
        let mut m = Mirror::default();
        let owner = |kind: &str, name: &str, uid: &str| {
            json!([{"apiVersion": "v1", "kind": kind, "name": name, "uid": uid,
                "controller": true}])
        };
        let object = |kind: &str, name: &str, uid: &str, owners: Value| {
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name,
                "namespace": "ns", "uid": uid, "ownerReferences": owners}})
        };
        for vm in ["a", "b"] {
            let volumes = json!([{"name": "disk", "dataVolume": {"name": format!("dv-{vm}")}}]);
            let mut v = object("VirtualMachine", vm, &format!("vm-{vm}"), json!([]));
            v["spec"] = json!({"runStrategy": "Always",
                "template": {"spec": {"domain": {"devices": {}}, "volumes": volumes}}});
            m.set(Kind::VirtualMachine, &format!("ns/{vm}"), Some(v));
            let mut vmi = object(
                "VirtualMachineInstance",
                vm,
                &format!("vmi-{vm}"),
                owner("VirtualMachine", vm, &format!("vm-{vm}")),
            );
            vmi["spec"] = json!({"domain": {"devices": {}}, "volumes": volumes});
            vmi["status"] = json!({"phase": "Running",
                "virtualMachineRevisionName": format!("named-{vm}")});
            m.set(Kind::VirtualMachineInstance, &format!("ns/{vm}"), Some(vmi));
            let launcher = format!("virt-launcher-{vm}");
            let owned = [
                (Kind::Pod, launcher.clone(), "VirtualMachineInstance", "vmi"),
                (Kind::Pod, format!("hp-{vm}"), "Pod", "pod"),
                (
                    Kind::ControllerRevision,
                    format!("rev-{vm}"),
                    "VirtualMachine",
                    "vm",
                ),
            ];
            for (kind, name, owner_kind, owner_uid) in owned {
                let owner_name = if owner_kind == "Pod" { &launcher } else { vm };
                let refs = owner(owner_kind, owner_name, &format!("{owner_uid}-{vm}"));
                let uid = if name == launcher {
                    format!("pod-{vm}")
                } else {
                    name.clone()
                };
                m.set(
                    kind,
                    &format!("ns/{name}"),
                    Some(object(kind.as_str(), &name, &uid, refs)),
                );
            }
            for (kind, name) in [
                (Kind::ControllerRevision, format!("named-{vm}")),
                (Kind::DataVolume, format!("dv-{vm}")),
            ] {
                let obj = object(kind.as_str(), &name, &name, json!([]));
                m.set(kind, &format!("ns/{name}"), Some(obj));
            }
            let claim = object("PersistentVolumeClaim", &format!("dv-{vm}"), "c", json!([]));
            m.set_pvc(&format!("ns/dv-{vm}"), Some(claim));
            let mut state = object("PersistentVolumeClaim", &format!("s-{vm}"), "s", json!([]));
            state["metadata"]["labels"] = json!({ PVC_PREFIX: vm });
            m.set_pvc(&format!("ns/s-{vm}"), Some(state));
        }
        let unnamed = object("PersistentVolumeClaim", "unnamed", "u", json!([]));
        m.set_pvc("ns/unnamed", Some(unnamed));
        m
    }

    fn ids(list: &[(Kind, &str)]) -> BTreeSet<(Kind, String)> {
        list.iter().map(|(k, n)| (*k, format!("ns/{n}"))).collect()
    }

    /// A decision reads what its VM key's snapshots can keep (executor.rs's filters; lookups
    /// by name), not every object of the namespace: with 1,000 VMs in one namespace, a
    /// shadow decoded every pod and revision of it for each write it classified, and fell
    /// minutes behind a bulk start.
    #[test]
    fn a_keys_decisions_read_its_own_objects_and_those_it_names() {
        let m = two_vms();
        let reads = m.reads("ns/a", &[]);
        let own = ids(&[
            (Kind::VirtualMachine, "a"),
            (Kind::VirtualMachineInstance, "a"),
            (Kind::Pod, "virt-launcher-a"),
            (Kind::Pod, "hp-a"),
            (Kind::ControllerRevision, "rev-a"),
            (Kind::ControllerRevision, "named-a"),
            (Kind::DataVolume, "dv-a"),
        ]);
        assert_eq!(reads.objects, own);
        let claims: BTreeSet<String> = ["ns/dv-a", "ns/s-a"].map(String::from).into();
        assert_eq!(reads.claims, claims);
        // The VM key's objects are found through the VM key alone, VM and VMI gone.
        let mut gone = two_vms();
        gone.set(Kind::VirtualMachine, "ns/a", None);
        gone.set(Kind::VirtualMachineInstance, "ns/a", None);
        let reads = gone.reads("ns/a", &[]);
        let left = ids(&[
            (Kind::Pod, "virt-launcher-a"),
            (Kind::Pod, "hp-a"),
            (Kind::ControllerRevision, "rev-a"),
        ]);
        assert_eq!(reads.objects, left);
        assert_eq!(gone.vm_keys(), ["ns/a", "ns/b"].into());
        // A version given beside the stored ones is read through too (a VMI taken back).
        let vmi = m.get(Kind::VirtualMachineInstance, "ns/a").unwrap();
        let named = (Kind::ControllerRevision, "ns/named-a".to_string());
        assert!(!reads.objects.contains(&named));
        assert!(gone.reads("ns/a", &[vmi]).objects.contains(&named));
    }

    /// The indexes follow updates and deletions: a pod whose owner changes, a claim whose
    /// label goes, a deleted revision.
    #[test]
    fn the_indexes_follow_updates_and_deletions() {
        let mut m = two_vms();
        let mut hp = m.get(Kind::Pod, "ns/hp-a").unwrap().clone();
        hp["metadata"]["ownerReferences"][0]["uid"] = json!("pod-b");
        m.set(Kind::Pod, "ns/hp-a", Some(hp));
        let mut state = m.pvcs["ns/s-a"].clone();
        state["metadata"]["labels"] = json!({});
        m.set_pvc("ns/s-a", Some(state));
        m.set(Kind::ControllerRevision, "ns/rev-a", None);
        let reads = m.reads("ns/a", &[]);
        for gone in [
            (Kind::Pod, "ns/hp-a"),
            (Kind::ControllerRevision, "ns/rev-a"),
        ] {
            assert!(
                !reads.objects.contains(&(gone.0, gone.1.into())),
                "{gone:?}"
            );
        }
        assert!(!reads.claims.contains("ns/s-a"));
        let b = m.reads("ns/b", &[]);
        assert!(b.objects.contains(&(Kind::Pod, "ns/hp-a".into())));
    }

    /// Deciding from [`Mirror::scope`] is deciding from the whole mirror.
    #[test]
    fn a_scoped_mirror_decides_as_the_whole() {
        let m = two_vms();
        let now = Utc::now();
        for key in ["ns/a", "ns/b"] {
            let scoped = m.scope(key, &[]);
            let whole = m.decide(key, now).expect("decided");
            assert!(!whole.is_empty(), "{key}");
            assert_eq!(scoped.decide(key, now), Ok(whole), "{key}");
            assert_eq!(scoped.reads(key, &[]), m.reads(key, &[]), "{key}");
        }
        assert!(
            m.scope("ns/a", &[])
                .get(Kind::VirtualMachine, "ns/b")
                .is_none()
        );
    }

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
        m.set_pvc(
            "ns/persistent-state-for-solo-x1",
            Some(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "persistent-state-for-solo-x1", "namespace": "ns",
                    "labels": {"persistent-state-for": "solo"}},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast"},
                "status": {"phase": "Bound"}})),
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
