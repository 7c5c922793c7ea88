//! The table of resources the embedded API server serves.
//!
//! Storage is generic (JSON objects keyed by resource/namespace/name); adding a kind is one
//! [`ResourceDef`] entry in [`builtin_resources`], not new code. Field names follow the
//! `APIResource` discovery type of `k8s.io/apimachinery/pkg/apis/meta/v1/types.go`.

/// Which `kubectl.kubernetes.io`-style patch flavours a resource accepts and how its objects
/// behave on write. One entry per served group/version/resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group; `""` for the core (legacy `/api/v1`) group.
    pub group: &'static str,
    /// API version, e.g. `v1`, `v1beta1`.
    pub version: &'static str,
    /// Plural resource name used in URLs, e.g. `pods`.
    pub plural: &'static str,
    /// Singular name, e.g. `pod`.
    pub singular: &'static str,
    /// Kind, e.g. `Pod`. The list kind is `{kind}List`.
    pub kind: &'static str,
    /// Namespaced (`true`) or cluster-scoped (`false`).
    pub namespaced: bool,
    /// Short names kubectl resolves (`po`, `vmi`, ...).
    pub short_names: &'static [&'static str],
    /// Discovery categories (`all`, ...).
    pub categories: &'static [&'static str],
    /// Serves a `/status` subresource: the main endpoint ignores `.status`, `/status` ignores
    /// everything else (apiextensions `status_strategy.go`, core `podStatusStrategy`).
    pub status_subresource: bool,
    /// `metadata.generation` is set to 1 on create and bumped when anything outside
    /// `metadata` changes, and outside `status` too when `status` is a subresource: a custom
    /// resource without one (KubeVirt's VMI) counts status writes as changes
    /// (apiextensions-apiserver `strategy.go` `PrepareForUpdate`).
    pub generation: bool,
    /// A built-in kind: strategic merge patch is accepted and updates without
    /// `metadata.resourceVersion` are allowed. `false` models a CustomResourceDefinition:
    /// strategic merge patch → 415, unconditional update → 422.
    pub builtin: bool,
    /// Extra field-selector labels besides `metadata.name` / `metadata.namespace`,
    /// as JSON paths into the object (`spec.nodeName`).
    pub field_labels: &'static [&'static str],
    /// Served from another resource's storage (group, version, plural), converted by
    /// `sim::convert` (events.k8s.io/v1 events live in core v1 events).
    pub storage: Option<(&'static str, &'static str, &'static str)>,
}

impl ResourceDef {
    /// `apiVersion` string of the objects (`v1`, `kubevirt.io/v1`).
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `{kind}List`.
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Qualified resource as printed by apimachinery's `GroupResource.String()`:
    /// `pods`, `virtualmachines.kubevirt.io`.
    pub(crate) fn group_resource(&self) -> String {
        self.qualified(self.plural)
    }

    /// Qualified kind as printed by `GroupKind.String()`: `Pod`, `VirtualMachine.kubevirt.io`.
    pub(crate) fn group_kind(&self) -> String {
        self.qualified(self.kind)
    }

    /// `name` for the core group, `name.group` otherwise (how apimachinery prints a
    /// `GroupResource` or `GroupKind`).
    fn qualified(&self, name: &str) -> String {
        if self.group.is_empty() {
            name.to_string()
        } else {
            format!("{name}.{}", self.group)
        }
    }

    /// Whether `label` may be used in a field selector for this resource.
    pub(crate) fn supports_field(&self, label: &str) -> bool {
        label == "metadata.name"
            || (self.namespaced && label == "metadata.namespace")
            || self.field_labels.contains(&label)
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const NEW_EVENT_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

/// A compact constructor used by the table below.
#[allow(clippy::too_many_arguments)]
const fn def(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status_subresource: bool,
    generation: bool,
    builtin: bool,
) -> ResourceDef {
    ResourceDef {
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short_names,
        categories: &[],
        status_subresource,
        generation,
        builtin,
        field_labels: &[],
        storage: None,
    }
}

/// The default resource table.
///
/// Short names and categories follow the real API server (core) and the KubeVirt / CDI CRDs
/// (`kubevirt.io/v1` `virtualmachines` → `vm`, `vms`; `virtualmachineinstances` → `vmi`, `vmis`;
/// `cdi.kubevirt.io/v1beta1` `datavolumes` → `dv`, `dvs`; `k8s.cni.cncf.io/v1`
/// `network-attachment-definitions` → `net-attach-def`).
pub(crate) fn builtin_resources() -> Vec<ResourceDef> {
    let mut defs = core_resources();
    defs.extend(api_group_resources());
    defs.extend(kubevirt_resources());
    defs.extend(add_on_resources());
    defs
}

/// The core group (`/api/v1`).
fn core_resources() -> Vec<ResourceDef> {
    let core = |plural, singular, kind, namespaced, short, status| {
        def(
            "", "v1", plural, singular, kind, namespaced, short, status, false, true,
        )
    };
    let mut pods = core("pods", "pod", "Pod", true, &["po"], true);
    pods.generation = true;
    pods.categories = &["all"];
    pods.field_labels = POD_FIELDS;
    let mut namespaces = core("namespaces", "namespace", "Namespace", false, &["ns"], true);
    namespaces.field_labels = &["status.phase"];
    let mut nodes = core("nodes", "node", "Node", false, &["no"], true);
    nodes.field_labels = &["spec.unschedulable"];
    let mut events = core("events", "event", "Event", true, &["ev"], false);
    events.field_labels = EVENT_FIELDS;
    let mut pvcs = core(
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
    );
    pvcs.field_labels = &["status.phase"];
    let mut services = core("services", "service", "Service", true, &["svc"], true);
    services.categories = &["all"];
    vec![
        pods,
        namespaces,
        nodes,
        events,
        pvcs,
        core("configmaps", "configmap", "ConfigMap", true, &["cm"], false),
        core("secrets", "secret", "Secret", true, &[], false),
        core(
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
            &["sa"],
            false,
        ),
        services,
        core(
            "resourcequotas",
            "resourcequota",
            "ResourceQuota",
            true,
            &["quota"],
            true,
        ),
        core(
            "limitranges",
            "limitrange",
            "LimitRange",
            true,
            &["limits"],
            false,
        ),
        core(
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            false,
            &["pv"],
            true,
        ),
    ]
}

/// The built-in named groups: Leases, ControllerRevisions, `events.k8s.io`, PriorityClasses,
/// StorageClasses.
fn api_group_resources() -> Vec<ResourceDef> {
    let mut new_events = def(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        false,
        false,
        true,
    );
    new_events.field_labels = NEW_EVENT_FIELDS;
    new_events.storage = Some(("", "v1", "events"));
    vec![
        def(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            true,
            &[],
            false,
            false,
            true,
        ),
        def(
            "apps",
            "v1",
            "controllerrevisions",
            "controllerrevision",
            "ControllerRevision",
            true,
            &[],
            false,
            false,
            true,
        ),
        new_events,
        def(
            "scheduling.k8s.io",
            "v1",
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            false,
            &["pc"],
            false,
            false,
            true,
        ),
        def(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "storageclass",
            "StorageClass",
            false,
            &["sc"],
            false,
            false,
            true,
        ),
    ]
}

/// KubeVirt's CRDs.
fn kubevirt_resources() -> Vec<ResourceDef> {
    let kv = |plural, singular, kind, short, status| {
        let mut d = def(
            "kubevirt.io",
            "v1",
            plural,
            singular,
            kind,
            true,
            short,
            status,
            true,
            false,
        );
        d.categories = &["all"];
        d
    };
    let instancetype = |plural, singular, kind, namespaced, short| {
        def(
            "instancetype.kubevirt.io",
            "v1beta1",
            plural,
            singular,
            kind,
            namespaced,
            short,
            false,
            true,
            false,
        )
    };
    vec![
        kv(
            "virtualmachines",
            "virtualmachine",
            "VirtualMachine",
            &["vm", "vms"],
            true,
        ),
        // KubeVirt's VMI CRD has no status subresource (pkg/virt-operator/resource/generate/
        // components/crds.go NewVirtualMachineInstanceCrd): virt-controller and virt-handler
        // write VMI status with a whole-object update or a JSON patch.
        kv(
            "virtualmachineinstances",
            "virtualmachineinstance",
            "VirtualMachineInstance",
            &["vmi", "vmis"],
            false,
        ),
        kv(
            "virtualmachineinstancemigrations",
            "virtualmachineinstancemigration",
            "VirtualMachineInstanceMigration",
            &["vmim", "vmims"],
            true,
        ),
        kv(
            "virtualmachineinstancereplicasets",
            "virtualmachineinstancereplicaset",
            "VirtualMachineInstanceReplicaSet",
            &["vmirs", "vmirss"],
            true,
        ),
        kv(
            "virtualmachineinstancepresets",
            "virtualmachineinstancepreset",
            "VirtualMachineInstancePreset",
            &["vmipreset", "vmipresets"],
            false,
        ),
        kv("kubevirts", "kubevirt", "KubeVirt", &["kv", "kvs"], true),
        instancetype(
            "virtualmachineinstancetypes",
            "virtualmachineinstancetype",
            "VirtualMachineInstancetype",
            true,
            &["vminstancetype", "vminstancetypes", "vmf", "vmfs"],
        ),
        instancetype(
            "virtualmachineclusterinstancetypes",
            "virtualmachineclusterinstancetype",
            "VirtualMachineClusterInstancetype",
            false,
            &[
                "vmclusterinstancetype",
                "vmclusterinstancetypes",
                "vmcf",
                "vmcfs",
            ],
        ),
        instancetype(
            "virtualmachinepreferences",
            "virtualmachinepreference",
            "VirtualMachinePreference",
            true,
            &["vmpref", "vmprefs", "vmp", "vmps"],
        ),
        instancetype(
            "virtualmachineclusterpreferences",
            "virtualmachineclusterpreference",
            "VirtualMachineClusterPreference",
            false,
            &["vmcpref", "vmcprefs", "vmcp", "vmcps"],
        ),
        def(
            "migrations.kubevirt.io",
            "v1alpha1",
            "migrationpolicies",
            "migrationpolicy",
            "MigrationPolicy",
            false,
            &[],
            true,
            true,
            false,
        ),
        def(
            "pool.kubevirt.io",
            "v1beta1",
            "virtualmachinepools",
            "virtualmachinepool",
            "VirtualMachinePool",
            true,
            &["vmpool", "vmpools"],
            true,
            true,
            false,
        ),
    ]
}

/// CRDs of KubeVirt's neighbours: Multus' NetworkAttachmentDefinitions, CDI's DataVolumes,
/// CDI CRs, CDIConfigs and StorageProfiles, external-snapshotter's VolumeSnapshotClasses.
fn add_on_resources() -> Vec<ResourceDef> {
    vec![
        // Multus' NetworkAttachmentDefinitions: KubeVirt's VMI controller reads a Multus
        // network's NAD while rendering when `ExternalNetResourceInjection` is disabled
        // (pkg/network/multus/nad.go:48-70); short name as the NAD CRD's.
        def(
            "k8s.cni.cncf.io",
            "v1",
            "network-attachment-definitions",
            "network-attachment-definition",
            "NetworkAttachmentDefinition",
            true,
            &["net-attach-def"],
            false,
            true,
            false,
        ),
        def(
            "cdi.kubevirt.io",
            "v1beta1",
            "datavolumes",
            "datavolume",
            "DataVolume",
            true,
            &["dv", "dvs"],
            true,
            true,
            false,
        ),
        // CDI's cluster-scoped kinds KubeVirt reads: the CDI CR (counted), CDIConfig (the
        // filesystem overhead, vmi/storage.go:374-394) and StorageProfiles (the snapshot
        // class of a StorageClass, snapshot.go:732-745).
        def(
            "cdi.kubevirt.io",
            "v1beta1",
            "cdis",
            "cdi",
            "CDI",
            false,
            &["cdi", "cdis"],
            true,
            true,
            false,
        ),
        def(
            "cdi.kubevirt.io",
            "v1beta1",
            "cdiconfigs",
            "cdiconfig",
            "CDIConfig",
            false,
            &[],
            true,
            true,
            false,
        ),
        def(
            "cdi.kubevirt.io",
            "v1beta1",
            "storageprofiles",
            "storageprofile",
            "StorageProfile",
            false,
            &[],
            true,
            true,
            false,
        ),
        // external-snapshotter's VolumeSnapshotClasses: KubeVirt matches their driver against
        // a StorageClass's provisioner (snapshot.go:724-774). Short names as its CRD's.
        def(
            "snapshot.storage.k8s.io",
            "v1",
            "volumesnapshotclasses",
            "volumesnapshotclass",
            "VolumeSnapshotClass",
            false,
            &["vsclass", "vsclasses"],
            false,
            true,
            false,
        ),
    ]
}

/// Lookup over a resource table: by group/version/plural, and the served groups in order.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    defs: Vec<ResourceDef>,
}

/// Index of a resource in its [`Registry`]; stable for the life of the server.
pub(crate) type ResId = usize;

impl Registry {
    /// Build a registry from a table (see [`builtin_resources`]).
    pub(crate) fn new(defs: Vec<ResourceDef>) -> Self {
        Self { defs }
    }

    /// All definitions, in table order.
    pub(crate) fn defs(&self) -> &[ResourceDef] {
        &self.defs
    }

    /// The definition with index `id`.
    pub(crate) fn get(&self, id: ResId) -> &ResourceDef {
        &self.defs[id]
    }

    /// Find by group, version and plural name.
    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<ResId> {
        self.defs
            .iter()
            .position(|d| d.group == group && d.version == version && d.plural == plural)
    }

    /// The resource whose collection stores `id`'s objects (itself unless it is an alias).
    pub(crate) fn storage_id(&self, id: ResId) -> ResId {
        match self.defs[id].storage {
            Some((g, v, p)) => self.find(g, v, p).unwrap_or(id),
            None => id,
        }
    }

    /// Find the core `v1` resource with this plural (`pods`, `namespaces`).
    pub(crate) fn core(&self, plural: &str) -> Option<ResId> {
        self.find("", "v1", plural)
    }

    /// Find by apiVersion (`v1`, `kubevirt.io/v1`) and kind.
    pub(crate) fn find_kind(&self, api_version: &str, kind: &str) -> Option<ResId> {
        self.defs
            .iter()
            .position(|d| d.api_version() == api_version && d.kind == kind)
    }

    /// Whether any resource is served under this group/version.
    pub(crate) fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.version == version)
    }

    /// Non-core groups with their versions, in first-appearance order.
    pub(crate) fn groups(&self) -> Vec<(&'static str, Vec<&'static str>)> {
        let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
        for d in &self.defs {
            if d.group.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, versions)) => {
                    if !versions.contains(&d.version) {
                        versions.push(d.version);
                    }
                }
                None => out.push((d.group, vec![d.version])),
            }
        }
        out
    }
}

/// The built-in definition with this plural, for tests of code that takes one.
#[cfg(test)]
pub(crate) fn builtin_def(plural: &str) -> ResourceDef {
    builtin_resources()
        .into_iter()
        .find(|d| d.plural == plural)
        .unwrap_or_else(|| panic!("no built-in resource {plural}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_has_unique_group_version_plural() {
        let defs = builtin_resources();
        for (i, a) in defs.iter().enumerate() {
            for b in &defs[i + 1..] {
                assert!(
                    !(a.group == b.group && a.version == b.version && a.plural == b.plural),
                    "duplicate {}",
                    a.plural
                );
            }
        }
    }

    #[test]
    fn names_print_like_apimachinery() {
        let reg = Registry::new(builtin_resources());
        let pods = reg.get(reg.core("pods").unwrap());
        assert_eq!(pods.group_resource(), "pods");
        assert_eq!(pods.group_kind(), "Pod");
        assert_eq!(pods.api_version(), "v1");
        let vm = reg.get(reg.find("kubevirt.io", "v1", "virtualmachines").unwrap());
        assert_eq!(vm.group_resource(), "virtualmachines.kubevirt.io");
        assert_eq!(vm.group_kind(), "VirtualMachine.kubevirt.io");
        assert_eq!(vm.list_kind(), "VirtualMachineList");
        assert!(vm.supports_field("metadata.namespace"));
        assert!(!vm.supports_field("spec.running"));
        assert!(pods.supports_field("spec.nodeName"));
    }

    #[test]
    fn groups_are_listed_once() {
        let reg = Registry::new(builtin_resources());
        let groups = reg.groups();
        let kv = groups.iter().filter(|(g, _)| *g == "kubevirt.io").count();
        assert_eq!(kv, 1);
    }
}
