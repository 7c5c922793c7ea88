//! Gathering: read one VM's objects (by name, label and field selectors; never the whole
//! cluster) and the controller's view of it, into a [`Gathered`] value that
//! `inspect::analyze` turns into an `Inspection` (the two are joined in `inspect/mod.rs`).
//!
//! Every read that fails is recorded in [`Gathered::missing`] with its reason (not found,
//! forbidden, unreachable, timed out); only "the VM does not exist" and "the API server cannot be
//! reached" end the gathering ([`GatherError`]).
//!
//! The controller's view comes from the Lease (`--lease-namespace/--lease-name`, KubeVirt's
//! `kubevirt/virt-controller` by default):
//! - our `run-controller` annotates it with its debug endpoint
//!   ([`DEBUG_ENDPOINT_ANNOTATION`]); we GET `/debug/state?key=NAMESPACE/NAME` there;
//! - KubeVirt's virt-controller holds it under its pod name (`leaderelectionconfig`, identity =
//!   hostname); we read its Prometheus metrics through the API server's pod proxy on the HTTPS
//!   port 8443 (`--port 8443` set by virt-operator, metrics served over TLS: application.go:1042,
//!   deployments.go:435-470 in KubeVirt v1.9).

use super::model::{EventView, Missing};
use crate::api::labels::{APP, APP_VIRT_LAUNCHER, CREATED_BY};
use crate::api::{DataVolume, KubeVirt, VirtualMachine, VirtualMachineInstance};
use crate::config::{ClusterSettings, select_kubevirt_cr};
use crate::controller::debug_state::DebugState;
use crate::controller::vm::executor::snapshot_data_volume_names;
use crate::runtime::lease::{DEBUG_ENDPOINT_ANNOTATION, DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Event, Namespace, Node, PersistentVolumeClaim, Pod, ResourceQuota,
};
use k8s_openapi::api::events::v1::Event as EventsV1;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// How to find the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherOptions {
    /// Namespace of the controller Lease (KubeVirt: `kubevirt`).
    pub lease_namespace: String,
    /// Name of the controller Lease (KubeVirt: `virt-controller`).
    pub lease_name: String,
    /// Namespace of the KubeVirt CR whose settings are read (KubeVirt: `kubevirt`); the
    /// controller's `--kubevirt-namespace`, which need not be the Lease's (deploy/controller.yaml
    /// keeps its Lease in `virtctl-rs`).
    pub kubevirt_namespace: String,
    /// Timeout of each read outside the Kubernetes client (debug endpoint, metrics).
    pub timeout: Duration,
    /// Another release whose overhead formula the inspection compares (`--kubevirt-version`).
    pub compare_version: Option<crate::kubevirt_version::KubeVirtVersion>,
}

impl Default for GatherOptions {
    fn default() -> Self {
        GatherOptions {
            lease_namespace: DEFAULT_NAMESPACE.to_string(),
            lease_name: DEFAULT_LEASE_NAME.to_string(),
            kubevirt_namespace: DEFAULT_NAMESPACE.to_string(),
            timeout: Duration::from_secs(5),
            compare_version: None,
        }
    }
}

/// Why nothing could be shown (exit code 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatherError {
    /// The VirtualMachine does not exist.
    #[error("VirtualMachine {namespace}/{name} not found")]
    VmNotFound {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The API server could not be reached or refused the first read.
    #[error("cluster unreachable: {0}")]
    Unreachable(String),
}

/// The controller's own view of the VM, as read.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ControllerView {
    /// Nothing could be read (the reason is in [`Gathered::missing`]).
    #[default]
    None,
    /// Our leader's `/debug/state?key=` (or the full document for the fleet).
    DebugState {
        /// The URL read.
        url: String,
        /// The document.
        state: Box<DebugState>,
    },
    /// KubeVirt's virt-controller's Prometheus text.
    Metrics {
        /// The API path read.
        url: String,
        /// The exposition text.
        text: String,
    },
}

/// Everything read about one VM, before any analysis. Tests build it by hand.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    /// When the reads finished.
    pub now: DateTime<Utc>,
    /// The VM's namespace.
    pub namespace: String,
    /// The VM's name.
    pub name: String,
    /// The VM.
    pub vm: Option<VirtualMachine>,
    /// The VMI of the same name.
    pub vmi: Option<VirtualMachineInstance>,
    /// Its virt-launcher pods (label `kubevirt.io/created-by=<vmi uid>`).
    pub pods: Vec<Pod>,
    /// ControllerRevisions the VM sync reads (the VMI's start revision, the VM's revisions).
    pub revisions: Vec<ControllerRevision>,
    /// DataVolumes the VM's volumes name.
    pub data_volumes: Vec<DataVolume>,
    /// PVCs the VM's volumes name, by name.
    pub pvcs: BTreeMap<String, PersistentVolumeClaim>,
    /// The node of the VMI or its pod.
    pub node: Option<Node>,
    /// Every node, read only when the pod cannot be scheduled (for the fit check).
    pub candidate_nodes: Vec<Node>,
    /// What the VMI controller's topology hinter reads, read only while the VMI waits for its
    /// `status.topologyHints` (every node, and the settings' minimum TSC frequency; which
    /// nodes run VMIs is not read: `None` when the nodes could not be listed), for the VMI
    /// decision ([`crate::controller::vmi::topology`]).
    pub topology: Option<crate::controller::vmi::topology::TopologyState>,
    /// The PriorityClass the VMI asks for: `(name, exists)`.
    pub priority_class: Option<(String, bool)>,
    /// Events about the VM, VMI, pods and DataVolumes, both APIs, deduplicated by uid.
    pub events: Vec<RawEvent>,
    /// The controller Lease.
    pub lease: Option<Lease>,
    /// `namespace/name` of the Lease looked at.
    pub lease_key: String,
    /// Whether the Lease holder is a pod of the Lease namespace (`None`: not checked).
    pub holder_is_pod: Option<bool>,
    /// The controller's view.
    pub controller: ControllerView,
    /// The cluster settings (KubeVirt CR, or KubeVirt's defaults).
    pub settings: ClusterSettings,
    /// StorageClasses, StorageProfiles and VolumeSnapshotClasses as the VM controller reads
    /// them for `status.volumeSnapshotStatuses`; `None`: not read (the decision then leaves
    /// that field as it is).
    pub storage: Option<crate::controller::vm::volume_snapshot::StorageView>,
    /// Another release whose overhead formula is compared ([`GatherOptions::compare_version`]).
    pub compare_version: Option<crate::kubevirt_version::KubeVirtVersion>,
    /// The VM's Namespace object (`None`: not read).
    pub namespace_object: Option<Namespace>,
    /// The ResourceQuotas of the namespace.
    pub resource_quotas: Vec<ResourceQuota>,
    /// The VMs of the namespace (for the firmware UUID check; empty when not read).
    pub namespace_vms: Vec<VirtualMachine>,
    /// The VMIs of the namespace (for the firmware UUID check; empty when not read).
    pub namespace_vmis: Vec<VirtualMachineInstance>,
    /// What the controllers read for the backend-storage claim (persistent TPM/EFI); empty
    /// when the VM needs none.
    pub backend_storage: BackendStorageInputs,
    /// What could not be read, with the reason.
    pub missing: Vec<Missing>,
}

/// The objects the VM and VMI controllers read from their caches for backend storage
/// (pkg/storage/backend-storage/backend-storage.go:61-83, 412-437; pkg/storage/utils/
/// volumes.go:105-131), so that `inspect`, what-if and `shadow` decide a VM with a persistent
/// TPM or EFI as the controller does.
#[derive(Debug, Clone, Default)]
pub struct BackendStorageInputs {
    /// The namespace's claims labelled `persistent-state-for=<VM>` and the one named
    /// `persistent-state-for-<VM>` (the legacy name).
    pub claims: Vec<PersistentVolumeClaim>,
    /// Every StorageClass (the default class, a Pending claim's binding mode).
    pub storage_classes: Vec<k8s_openapi::api::storage::v1::StorageClass>,
    /// CDI StorageProfile name → `status.claimPropertySets` (a new claim's access mode).
    pub profile_sets: BTreeMap<String, Vec<serde_json::Value>>,
}

/// Whether the VM (or its VMI) needs a backend-storage claim.
pub(crate) fn needs_backend_storage(
    vm: Option<&VirtualMachine>,
    vmi: Option<&VirtualMachineInstance>,
) -> bool {
    vm.is_some_and(crate::controller::vm::volume_snapshot::vm_needs_backend_storage)
        || vmi.is_some_and(crate::launcher::backend_storage::is_needed)
}

/// Read [`BackendStorageInputs`] for VM `name`: the labelled claims, the legacy-named one,
/// the StorageClasses and the StorageProfiles (absent without CDI: no note).
async fn read_backend_storage(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    notes: &mut Vec<Missing>,
) -> BackendStorageInputs {
    use crate::launcher::backend_storage::PVC_PREFIX;
    let mut out = BackendStorageInputs::default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let selector = ListParams::default().labels(&format!("{PVC_PREFIX}={name}"));
    match pvcs.list(&selector).await {
        Ok(l) => out.claims = l.items,
        Err(e) => missing(notes, "backend-storage claims", describe_error(&e)),
    }
    let legacy = format!("{PVC_PREFIX}-{name}");
    match pvcs.get_opt(&legacy).await {
        Ok(Some(c))
            if !out
                .claims
                .iter()
                .any(|k| k.metadata.name == c.metadata.name) =>
        {
            out.claims.push(c);
        }
        Ok(_) => {}
        Err(e) => missing(
            notes,
            format!("persistentVolumeClaim/{legacy}"),
            describe_error(&e),
        ),
    }
    let classes: Api<k8s_openapi::api::storage::v1::StorageClass> = Api::all(client.clone());
    match classes.list(&ListParams::default()).await {
        Ok(l) => out.storage_classes = l.items,
        Err(e) => missing(notes, "storageclasses", describe_error(&e)),
    }
    let profiles: Api<crate::api::storage::StorageProfile> = Api::all(client.clone());
    if let Ok(l) = profiles.list(&ListParams::default()).await {
        out.profile_sets = profile_sets(&l.items);
    }
    out
}

/// StorageProfile name → `status.claimPropertySets`, as the VMI executor reads its cache.
pub(crate) fn profile_sets(
    profiles: &[crate::api::storage::StorageProfile],
) -> BTreeMap<String, Vec<serde_json::Value>> {
    profiles
        .iter()
        .filter_map(|p| {
            let sets = p.status.as_ref()?.get("claimPropertySets")?.as_array()?;
            Some((p.metadata.name.clone()?, sets.clone()))
        })
        .collect()
}

impl Gathered {
    /// What the launcher renderer knows of the VM's namespace (labels, quotas, the cluster's
    /// auto-CPU-limit selector), as the controller computes it from its caches.
    pub(crate) fn namespace_context(&self) -> crate::launcher::resources::NamespaceContext {
        crate::launcher::resources::NamespaceContext::from_cluster(
            self.namespace_object.as_ref(),
            &self.resource_quotas,
            &self.settings,
        )
    }
}

/// One event, from either API, reduced to what the inspector shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RawEvent {
    /// The event's own uid (to merge the two APIs' copies).
    pub uid: Option<String>,
    /// The event as shown.
    pub view: EventView,
}

/// Why a read failed, as a short phrase.
pub(crate) fn describe_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => "not found".to_string(),
        kube::Error::Api(s) if s.code == 403 => format!("forbidden: {}", s.message),
        kube::Error::Api(s) => format!("{} ({}): {}", s.reason, s.code, s.message),
        other => format!("unreachable: {}", crate::runtime::error_chain(other)),
    }
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

pub(crate) fn is_transport(e: &kube::Error) -> bool {
    !matches!(e, kube::Error::Api(_))
}

/// The object a `get_opt` found, or why `what` (`kind/name`) is missing.
pub(crate) fn found<T>(read: Result<Option<T>, kube::Error>, what: String) -> Result<T, Missing> {
    match read {
        Ok(Some(o)) => Ok(o),
        Ok(None) => Err(Missing {
            what,
            reason: "not found".into(),
        }),
        Err(e) => Err(Missing {
            what,
            reason: describe_error(&e),
        }),
    }
}

fn missing(list: &mut Vec<Missing>, what: impl Into<String>, reason: impl Into<String>) {
    list.push(Missing {
        what: what.into(),
        reason: reason.into(),
    });
}

/// Gather one VM and the controller's view of it.
pub(crate) async fn gather_raw(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
) -> Result<Gathered, GatherError> {
    let mut g = Gathered {
        namespace: namespace.to_string(),
        name: name.to_string(),
        compare_version: opts.compare_version,
        ..Default::default()
    };
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = match vms.get(name).await {
        Ok(vm) => vm,
        Err(e) if is_not_found(&e) => {
            return Err(GatherError::VmNotFound {
                namespace: namespace.to_string(),
                name: name.to_string(),
            });
        }
        Err(e) => {
            return Err(GatherError::Unreachable(format!(
                "get VirtualMachine {namespace}/{name}: {}",
                describe_error(&e)
            )));
        }
    };
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    g.vmi = match vmis.get_opt(name).await {
        Ok(Some(v)) => Some(v),
        Ok(None) => {
            missing(&mut g.missing, "vmi", "no VMI yet (not found)");
            None
        }
        Err(e) => {
            if is_transport(&e) {
                return Err(GatherError::Unreachable(describe_error(&e)));
            }
            missing(&mut g.missing, "vmi", describe_error(&e));
            None
        }
    };
    let (pods, revisions, volumes, ns, kubevirt, peers) = tokio::join!(
        read_pods(client, namespace, g.vmi.as_ref()),
        read_revisions(client, namespace, g.vmi.as_ref()),
        read_volumes(client, namespace, &vm),
        read_namespace(client, namespace),
        read_settings(client, &opts.kubevirt_namespace),
        read_namespace_machines(client, namespace),
    );
    let mut notes = Vec::new();
    match peers {
        Ok((vms, vmis)) => (g.namespace_vms, g.namespace_vmis) = (vms, vmis),
        Err(m) => notes.push(m),
    }
    g.pods = pods.unwrap_or_else(|m| {
        notes.push(m);
        Vec::new()
    });
    g.revisions = revisions.unwrap_or_else(|m| {
        notes.push(m);
        Vec::new()
    });
    if let Some(vm) = &g.vm {
        let stashed = read_instancetype_revisions(client, namespace, vm, &g.revisions).await;
        g.revisions.extend(stashed.0);
        notes.extend(stashed.1);
    }
    let (dvs, pvcs, vol_missing) = volumes;
    g.data_volumes = dvs;
    g.pvcs = pvcs;
    notes.extend(vol_missing);
    if needs_backend_storage(g.vm.as_ref(), g.vmi.as_ref()) {
        g.backend_storage = read_backend_storage(client, namespace, name, &mut notes).await;
    }
    match ns {
        Ok((namespace_object, quotas, note)) => {
            g.namespace_object = Some(namespace_object);
            g.resource_quotas = quotas;
            notes.extend(note);
        }
        Err(m) => notes.push(m),
    }
    match kubevirt {
        Ok(s) => g.settings = s,
        Err(m) => {
            notes.push(m);
            g.settings = ClusterSettings::default();
        }
    }
    g.missing.extend(notes);
    read_node_and_scheduling(client, &mut g, &vm).await;
    let (events, events_missing) = read_events(
        client,
        namespace,
        &vm,
        g.vmi.as_ref(),
        &g.pods,
        &g.data_volumes,
    )
    .await;
    g.events = events;
    g.missing.extend(events_missing);
    let key = format!("{namespace}/{name}");
    read_controller(client, opts, Some(&key), &mut g).await;
    g.vm = Some(vm);
    g.now = Utc::now();
    Ok(g)
}

async fn read_pods(
    client: &kube::Client,
    namespace: &str,
    vmi: Option<&VirtualMachineInstance>,
) -> Result<Vec<Pod>, Missing> {
    let Some(uid) = vmi.and_then(|v| v.metadata.uid.as_deref()) else {
        return Ok(Vec::new());
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&format!("{CREATED_BY}={uid}"));
    match pods.list(&lp).await {
        Ok(list) => {
            let mut items = list.items;
            items.sort_by(|a, b| {
                b.metadata
                    .creation_timestamp
                    .cmp(&a.metadata.creation_timestamp)
            });
            if items.is_empty() {
                return Err(Missing {
                    what: "pods".into(),
                    reason: format!("no virt-launcher pod with label {CREATED_BY}={uid}"),
                });
            }
            Ok(items)
        }
        Err(e) => Err(Missing {
            what: "pods".into(),
            reason: describe_error(&e),
        }),
    }
}

/// Every VM and VMI of the namespace: the firmware UUID check compares the VM with them.
async fn read_namespace_machines(
    client: &kube::Client,
    namespace: &str,
) -> Result<(Vec<VirtualMachine>, Vec<VirtualMachineInstance>), Missing> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default();
    let (vms, vmis) = tokio::join!(vms.list(&lp), vmis.list(&lp));
    let note = |e: kube::Error| Missing {
        what: "firmwareUuidCheck".into(),
        reason: format!(
            "list the VMs and VMIs of namespace {namespace}: {}",
            describe_error(&e)
        ),
    };
    Ok((vms.map_err(note)?.items, vmis.map_err(note)?.items))
}

async fn read_revisions(
    client: &kube::Client,
    namespace: &str,
    vmi: Option<&VirtualMachineInstance>,
) -> Result<Vec<ControllerRevision>, Missing> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let Some(rev) = vmi
        .and_then(|v| v.status.as_ref())
        .and_then(|s| s.virtual_machine_revision_name.clone())
    else {
        return Ok(Vec::new());
    };
    match api.get_opt(&rev).await {
        Ok(Some(r)) => Ok(vec![r]),
        Ok(None) => Err(Missing {
            what: format!("controllerRevision/{rev}"),
            reason: "not found (the VMI's start revision)".into(),
        }),
        Err(e) => Err(Missing {
            what: format!("controllerRevision/{rev}"),
            reason: describe_error(&e),
        }),
    }
}

/// The ControllerRevisions stashing the VM's instancetype and preference (its status refs and
/// `spec.*.revisionName`), which the VM sync and the what-if expansion read
/// (pkg/instancetype/find/revision.go:36-64); those already read are skipped.
async fn read_instancetype_revisions(
    client: &kube::Client,
    namespace: &str,
    vm: &VirtualMachine,
    have: &[ControllerRevision],
) -> (Vec<ControllerRevision>, Vec<Missing>) {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let mut names: Vec<String> = Vec::new();
    for preference in [false, true] {
        let matcher = if preference {
            crate::instancetype::Matcher::preference(vm)
        } else {
            crate::instancetype::Matcher::instancetype(vm)
        };
        let status = crate::instancetype::status_revision_name(vm, preference);
        for name in [matcher.map(|m| m.revision_name).unwrap_or_default(), status] {
            let known = have
                .iter()
                .any(|r| r.metadata.name.as_deref() == Some(&name));
            if !name.is_empty() && !known && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for name in names {
        match api.get_opt(&name).await {
            Ok(Some(r)) => found.push(r),
            Ok(None) => missing.push(Missing {
                what: format!("controllerRevision/{name}"),
                reason: "not found (a stashed instancetype or preference)".into(),
            }),
            Err(e) => missing.push(Missing {
                what: format!("controllerRevision/{name}"),
                reason: describe_error(&e),
            }),
        }
    }
    (found, missing)
}

/// The claim names of the VM's template volumes: `(volume, claim, is_data_volume)`.
pub(crate) fn volume_claims(vm: &VirtualMachine) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for v in vm.template_volumes() {
        if let Some(dv) = v.data_volume.as_ref().and_then(|d| d.name.clone()) {
            out.push((v.name.clone(), dv, true));
        } else if let Some(pvc) = v
            .persistent_volume_claim
            .as_ref()
            .and_then(|p| p.claim_name.clone())
        {
            out.push((v.name.clone(), pvc, false));
        } else if let Some(dump) = v.extra.read(|m| {
            m.get("memoryDump")?
                .get("claimName")?
                .as_str()
                .map(str::to_string)
        }) {
            out.push((v.name.clone(), dump, false));
        }
    }
    // The claim of a memory dump request not yet in the template (the VM controller reads it
    // to annotate it, memorydump.go:264-274).
    if let Some(claim) = crate::controller::vm::memory_dump::requested_claim(vm)
        && !out.iter().any(|(_, c, _)| *c == claim)
    {
        out.push((claim.clone(), claim, false));
    }
    out
}

async fn read_volumes(
    client: &kube::Client,
    namespace: &str,
    vm: &VirtualMachine,
) -> (
    Vec<DataVolume>,
    BTreeMap<String, PersistentVolumeClaim>,
    Vec<Missing>,
) {
    let mut notes = Vec::new();
    let mut dvs = Vec::new();
    let mut pvcs = BTreeMap::new();
    let dv_api: Api<DataVolume> = Api::namespaced(client.clone(), namespace);
    let pvc_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let mut dv_names = snapshot_data_volume_names(vm);
    dv_names.sort();
    dv_names.dedup();
    for dv in &dv_names {
        match found(dv_api.get_opt(dv).await, format!("dataVolume/{dv}")) {
            Ok(d) => dvs.push(d),
            Err(m) => notes.push(m),
        }
    }
    let mut claims: Vec<String> = volume_claims(vm).into_iter().map(|(_, c, _)| c).collect();
    claims.sort();
    claims.dedup();
    for claim in claims {
        let what = format!("persistentVolumeClaim/{claim}");
        match found(pvc_api.get_opt(&claim).await, what) {
            Ok(p) => {
                pvcs.insert(claim, p);
            }
            Err(m) => notes.push(m),
        }
    }
    (dvs, pvcs, notes)
}

/// The namespace and its ResourceQuotas (what the renderer's automatic limits read); a quota
/// list that fails is a note, and the limits are rendered as without a quota.
pub(crate) async fn read_namespace(
    client: &kube::Client,
    namespace: &str,
) -> Result<(Namespace, Vec<ResourceQuota>, Option<Missing>), Missing> {
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns = found(
        ns_api.get_opt(namespace).await,
        format!("namespace/{namespace}"),
    )?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    match quotas.list(&ListParams::default()).await {
        Ok(list) => Ok((ns, list.items, None)),
        Err(e) => Ok((
            ns,
            Vec::new(),
            Some(Missing {
                what: format!("resourceQuotas/{namespace}"),
                reason: format!(
                    "{}; limits are rendered as without a quota",
                    describe_error(&e)
                ),
            }),
        )),
    }
}

/// The KubeVirt CR of the KubeVirt namespace, through the parser `explain-overhead
/// --kubevirt-cr` uses; KubeVirt's defaults (and a note) when there is none.
async fn read_settings(client: &kube::Client, namespace: &str) -> Result<ClusterSettings, Missing> {
    read_kubevirt(client, namespace).await.map(|(s, _)| s)
}

/// [`read_settings`], with the CR's `status.observedKubeVirtVersion` (`None` when it reports
/// none).
pub(crate) async fn read_kubevirt(
    client: &kube::Client,
    namespace: &str,
) -> Result<(ClusterSettings, Option<String>), Missing> {
    let api: Api<KubeVirt> = Api::namespaced(client.clone(), namespace);
    let note = |reason: String| Missing {
        what: "kubevirt".into(),
        reason: format!("{reason}; KubeVirt's default settings assumed"),
    };
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            // The controller's rule (it follows the same CR): crate::config::select_kubevirt_cr.
            let cr = match select_kubevirt_cr(&list.items, namespace) {
                Ok(Some(cr)) => cr,
                Ok(None) => return Err(note(format!("no KubeVirt CR in namespace {namespace}"))),
                Err(e) => return Err(note(e.to_string())),
            };
            let value = cr.to_cr_value();
            let version = value
                .pointer("/status/observedKubeVirtVersion")
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
                .map(str::to_string);
            ClusterSettings::from_kubevirt_cr(&value)
                .map(|s| (s, version))
                .map_err(|e| note(e.to_string()))
        }
        Err(e) => Err(note(format!("KubeVirt CR: {}", describe_error(&e)))),
    }
}

fn pod_unschedulable(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "False")
}

async fn read_node_and_scheduling(client: &kube::Client, g: &mut Gathered, vm: &VirtualMachine) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node_name = g
        .vmi
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
        .or_else(|| {
            g.pods
                .iter()
                .find_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        });
    if let Some(n) = node_name {
        match found(nodes.get_opt(&n).await, format!("node/{n}")) {
            Ok(node) => g.node = Some(node),
            Err(m) => g.missing.push(m),
        }
    } else if g
        .vmi
        .as_ref()
        .is_some_and(crate::controller::vmi::topology::pod_waits_for_hints)
    {
        // The hinter's input (hinter.go:49-67): no pod exists yet.
        use crate::controller::vmi::topology::{NodeTsc, TopologyState};
        match nodes.list(&ListParams::default()).await {
            Ok(list) => {
                g.topology = Some(TopologyState {
                    minimum_cluster_tsc_frequency: g.settings.minimum_cluster_tsc_frequency,
                    nodes: list.items.iter().map(NodeTsc::from_node).collect(),
                })
            }
            Err(e) => missing(&mut g.missing, "nodes", describe_error(&e)),
        }
    } else if g.pods.iter().any(pod_unschedulable) {
        // Only to say which resource no node has: the fit check of the blocker chain.
        match nodes.list(&ListParams::default()).await {
            Ok(list) => g.candidate_nodes = list.items,
            Err(e) => missing(&mut g.missing, "nodes", describe_error(&e)),
        }
    }
    let wanted = g
        .vmi
        .as_ref()
        .and_then(|v| v.spec.priority_class_name.clone())
        .or_else(|| vm.template_spec()?.priority_class_name.clone())
        .filter(|n| !n.is_empty());
    if let Some(pc) = wanted {
        let api: Api<PriorityClass> = Api::all(client.clone());
        match api.get_opt(&pc).await {
            Ok(found) => g.priority_class = Some((pc, found.is_some())),
            Err(e) => missing(
                &mut g.missing,
                format!("priorityClass/{pc}"),
                describe_error(&e),
            ),
        }
    }
}

fn k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

fn micro_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
) -> Option<DateTime<Utc>> {
    crate::runtime::lease::record::micro_time_to_chrono(t)
}

/// A `core/v1` Event about `object` (`Kind/name`).
fn core_event(e: Event, object: &str) -> RawEvent {
    RawEvent {
        uid: e.metadata.uid.clone(),
        view: EventView {
            time: e
                .last_timestamp
                .as_ref()
                .and_then(k8s_time)
                .or_else(|| e.event_time.as_ref().and_then(micro_time))
                .or_else(|| e.first_timestamp.as_ref().and_then(k8s_time))
                .or_else(|| e.metadata.creation_timestamp.as_ref().and_then(k8s_time)),
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            object: object.to_owned(),
            message: e.message.unwrap_or_default(),
            count: e.count.unwrap_or(1).max(1),
            api: "core/v1".into(),
        },
    }
}

/// An `events.k8s.io/v1` Event about `object` (`Kind/name`).
fn v1_event(e: EventsV1, object: &str) -> RawEvent {
    RawEvent {
        uid: e.metadata.uid.clone(),
        view: EventView {
            time: e
                .series
                .as_ref()
                .and_then(|s| micro_time(&s.last_observed_time))
                .or_else(|| e.event_time.as_ref().and_then(micro_time))
                .or_else(|| e.deprecated_last_timestamp.as_ref().and_then(k8s_time)),
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            object: object.to_owned(),
            message: e.note.unwrap_or_default(),
            count: e.series.as_ref().map_or(1, |s| s.count.max(1)),
            api: "events.k8s.io/v1".into(),
        },
    }
}

async fn read_events(
    client: &kube::Client,
    namespace: &str,
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    pods: &[Pod],
    dvs: &[DataVolume],
) -> (Vec<RawEvent>, Option<Missing>) {
    let mut objects: Vec<(String, String, Option<String>)> = vec![(
        "VirtualMachine".into(),
        vm.metadata.name.clone().unwrap_or_default(),
        vm.metadata.uid.clone(),
    )];
    if let Some(v) = vmi {
        objects.push((
            "VirtualMachineInstance".into(),
            v.metadata.name.clone().unwrap_or_default(),
            v.metadata.uid.clone(),
        ));
    }
    for p in pods {
        objects.push((
            "Pod".into(),
            p.metadata.name.clone().unwrap_or_default(),
            p.metadata.uid.clone(),
        ));
    }
    for d in dvs {
        objects.push((
            "DataVolume".into(),
            d.metadata.name.clone().unwrap_or_default(),
            d.metadata.uid.clone(),
        ));
    }
    let core: Api<Event> = Api::namespaced(client.clone(), namespace);
    let v1: Api<EventsV1> = Api::namespaced(client.clone(), namespace);
    let mut out: Vec<RawEvent> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut errors = Vec::new();
    for (kind, name, uid) in &objects {
        let object = format!("{kind}/{name}");
        let selector = |prefix: &str| {
            ListParams::default().fields(&match uid {
                Some(u) => format!("{prefix}.uid={u}"),
                None => format!("{prefix}.kind={kind},{prefix}.name={name}"),
            })
        };
        let core_events = core.list(&selector("involvedObject")).await.map(|l| {
            l.items
                .into_iter()
                .map(|e| core_event(e, &object))
                .collect::<Vec<_>>()
        });
        let v1_events = v1
            .list(&selector("regarding"))
            .await
            .map(|l| l.items.into_iter().map(|e| v1_event(e, &object)).collect());
        for (api, read) in [("core/v1", core_events), ("events.k8s.io/v1", v1_events)] {
            match read {
                // Both APIs serve the same events: keep the first copy of each uid.
                Ok(events) => out.extend(
                    events
                        .into_iter()
                        .filter(|e| e.uid.as_ref().is_none_or(|u| seen.insert(u.clone()))),
                ),
                Err(e) => errors.push(format!("{api} events of {object}: {}", describe_error(&e))),
            }
        }
    }
    let missing = (!errors.is_empty()).then(|| Missing {
        what: "events".into(),
        reason: errors.join("; "),
    });
    (out, missing)
}

/// Read the Lease and, through it, the controller's view: our debug endpoint (`key`: one key,
/// `None`: the full document) or KubeVirt's metrics.
async fn read_controller(
    client: &kube::Client,
    opts: &GatherOptions,
    key: Option<&str>,
    g: &mut Gathered,
) {
    g.lease_key = format!("{}/{}", opts.lease_namespace, opts.lease_name);
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.lease_namespace);
    let lease = match leases.get_opt(&opts.lease_name).await {
        Ok(Some(l)) => l,
        Ok(None) => {
            missing(
                &mut g.missing,
                "lease",
                format!("Lease {} not found: no controller has run", g.lease_key),
            );
            missing(
                &mut g.missing,
                "controller",
                "no Lease, so no leader to ask",
            );
            return;
        }
        Err(e) => {
            missing(
                &mut g.missing,
                "lease",
                format!("Lease {}: {}", g.lease_key, describe_error(&e)),
            );
            missing(
                &mut g.missing,
                "controller",
                "the Lease could not be read, so no leader to ask",
            );
            return;
        }
    };
    let endpoint =
        crate::api::annotation(&lease.metadata, DEBUG_ENDPOINT_ANNOTATION).map(str::to_owned);
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .filter(|h| !h.is_empty());
    g.lease = Some(lease);
    if let Some(url) = endpoint {
        let url = match key {
            Some(k) => format!("{url}?key={}", k.replace('/', "%2F")),
            None => url,
        };
        match http_get(&url, opts.timeout).await {
            Ok((200, body)) => match serde_json::from_str::<DebugState>(&body) {
                Ok(state) => {
                    g.controller = ControllerView::DebugState {
                        url,
                        state: Box::new(state),
                    }
                }
                Err(e) => missing(
                    &mut g.missing,
                    "debugState",
                    format!("{url}: not a debug state document: {e}"),
                ),
            },
            Ok((code, body)) => missing(
                &mut g.missing,
                "debugState",
                format!("{url}: HTTP {code}: {}", body.trim()),
            ),
            Err(e) => missing(
                &mut g.missing,
                "debugState",
                format!("{url}: unreachable: {e}"),
            ),
        }
        return;
    }
    let Some(holder) = holder else {
        missing(
            &mut g.missing,
            "controller",
            format!("nobody holds the Lease {}", g.lease_key),
        );
        return;
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.lease_namespace);
    match pods.get_opt(&holder).await {
        Ok(Some(_)) => g.holder_is_pod = Some(true),
        Ok(None) => {
            g.holder_is_pod = Some(false);
            missing(
                &mut g.missing,
                "controller",
                format!(
                    "the Lease holder {holder:?} has no debug endpoint annotation ({DEBUG_ENDPOINT_ANNOTATION}) and is not a pod in namespace {}: its state cannot be read",
                    opts.lease_namespace
                ),
            );
            return;
        }
        Err(e) => {
            missing(
                &mut g.missing,
                "controller",
                format!(
                    "pod {}/{holder}: {}",
                    opts.lease_namespace,
                    describe_error(&e)
                ),
            );
            return;
        }
    }
    let path = metrics_path(&opts.lease_namespace, &holder);
    let request = match axum::http::Request::get(&path).body(Vec::new()) {
        Ok(r) => r,
        Err(e) => {
            missing(&mut g.missing, "metrics", format!("{path}: {e}"));
            return;
        }
    };
    match tokio::time::timeout(opts.timeout, client.request_text(request)).await {
        Ok(Ok(text)) => {
            g.controller = ControllerView::Metrics { url: path, text };
        }
        Ok(Err(e)) => missing(
            &mut g.missing,
            "metrics",
            format!("{path}: {}", describe_error(&e)),
        ),
        Err(_) => missing(
            &mut g.missing,
            "metrics",
            format!("{path}: unreachable: no answer within {:?}", opts.timeout),
        ),
    }
}

/// The API server's pod-proxy path of virt-controller's metrics (HTTPS port 8443).
pub(crate) fn metrics_path(namespace: &str, pod: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods/https:{pod}:8443/proxy/metrics")
}

/// A plain-HTTP GET of `url` (`http://HOST:PORT/PATH?QUERY`) with one overall timeout; returns
/// the status code and body. Enough for our own `/debug/state` (no TLS, no redirects).
pub async fn http_get(url: &str, timeout: Duration) -> Result<(u16, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// endpoints are supported, got {url:?}"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let fetch = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(authority)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        stream
            .read_to_end(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        parse_http_response(&buf)
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

fn parse_http_response(buf: &[u8]) -> Result<(u16, String), String> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| "truncated HTTP response".to_string())?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP response: {:?}", head.lines().next()))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((code, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest
            .split_once("\r\n")
            .ok_or_else(|| "truncated chunked body".to_string())?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            break;
        }
        if after.len() < size {
            return Err("truncated chunk".into());
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    Ok((code, out))
}

// ------------------------------------------------------------------------------------------
// The fleet
// ------------------------------------------------------------------------------------------

/// Everything read for the fleet view.
#[derive(Debug, Clone, Default)]
pub struct GatheredFleet {
    /// The namespace in scope (`None`: all).
    pub namespace: Option<String>,
    /// The VMs.
    pub vms: Vec<VirtualMachine>,
    /// The VMIs.
    pub vmis: Vec<VirtualMachineInstance>,
    /// The virt-launcher pods (label `kubevirt.io=virt-launcher`).
    pub pods: Vec<Pod>,
    /// Cluster settings.
    pub settings: ClusterSettings,
    /// The Lease and the controller view, in the same shape as for one VM; its `now` (when the
    /// reads finished) is the fleet's clock too.
    pub controller: Gathered,
    /// What could not be read.
    pub missing: Vec<Missing>,
}

/// One list each of VMs, VMIs and launcher pods in scope, plus the leader's full
/// `/debug/state` (or KubeVirt's metrics); rows problems first.
pub(crate) async fn gather_fleet_raw(
    client: &kube::Client,
    namespace: Option<&str>,
    opts: &GatherOptions,
) -> Result<GatheredFleet, GatherError> {
    let vms: Api<VirtualMachine> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let vmis: Api<VirtualMachineInstance> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let pods: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut f = GatheredFleet {
        namespace: namespace.map(str::to_string),
        ..Default::default()
    };
    f.vms = match vms.list(&ListParams::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            return Err(GatherError::Unreachable(format!(
                "list VirtualMachines: {}",
                describe_error(&e)
            )));
        }
    };
    match vmis.list(&ListParams::default()).await {
        Ok(l) => f.vmis = l.items,
        Err(e) => missing(&mut f.missing, "vmis", describe_error(&e)),
    }
    let lp = ListParams::default().labels(&format!("{APP}={APP_VIRT_LAUNCHER}"));
    match pods.list(&lp).await {
        Ok(l) => f.pods = l.items,
        Err(e) => missing(&mut f.missing, "pods", describe_error(&e)),
    }
    match read_settings(client, &opts.kubevirt_namespace).await {
        Ok(s) => f.settings = s,
        Err(m) => f.missing.push(m),
    }
    let mut c = Gathered::default();
    read_controller(client, opts, None, &mut c).await;
    f.missing.append(&mut c.missing);
    c.now = Utc::now();
    f.controller = c;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_responses_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
        assert_eq!(parse_http_response(plain), Ok((200, "{}".to_string())));
        let chunked =
            b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_http_response(chunked), Ok((400, "abcde".to_string())));
        assert!(parse_http_response(b"garbage").is_err());
    }

    #[tokio::test]
    async fn an_endpoint_nobody_listens_on_is_unreachable_not_a_panic() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let err = http_get(
            &format!("http://{addr}/debug/state"),
            Duration::from_secs(2),
        )
        .await
        .expect_err("nobody listens");
        assert!(!err.is_empty());
        let err = http_get("https://x/debug/state", Duration::from_secs(1))
            .await
            .expect_err("https refused");
        assert!(err.contains("only http://"), "{err}");
    }

    #[test]
    fn kubevirt_metrics_go_through_the_pod_proxy_on_https_8443() {
        assert_eq!(
            metrics_path("kubevirt", "virt-controller-7d9f-abcde"),
            "/api/v1/namespaces/kubevirt/pods/https:virt-controller-7d9f-abcde:8443/proxy/metrics"
        );
    }
}
