//! Instancetypes and preferences (`instancetype.kubevirt.io/v1beta1`) as KubeVirt v1.9's VM
//! controller uses them (pkg/instancetype/): finding the referenced spec (a stashed
//! ControllerRevision first, then the object), stashing it in a ControllerRevision, the conflict
//! checks, and expanding it into a VMI spec. Pure functions over raw JSON; the VM controller's
//! engine (`controller::vm::engine::instancetype`) calls them.

pub(crate) mod apply;
pub(crate) mod expand;
mod json;
pub(crate) mod preference;
pub(crate) mod revision;

use crate::api::vm::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The ControllerRevision labels (api/instancetype/register.go:49-55).
pub(crate) mod labels {
    pub(crate) const OBJECT_GENERATION: &str = "instancetype.kubevirt.io/object-generation";
    pub(crate) const OBJECT_KIND: &str = "instancetype.kubevirt.io/object-kind";
    pub(crate) const OBJECT_NAME: &str = "instancetype.kubevirt.io/object-name";
    pub(crate) const OBJECT_UID: &str = "instancetype.kubevirt.io/object-uid";
    pub(crate) const OBJECT_VERSION: &str = "instancetype.kubevirt.io/object-version";
}

/// The VMI annotations naming the instancetype and preference (core/v1/types.go:1365-1375).
pub(crate) mod annotations {
    pub(crate) const INSTANCETYPE: &str = "kubevirt.io/instancetype-name";
    pub(crate) const CLUSTER_INSTANCETYPE: &str = "kubevirt.io/cluster-instancetype-name";
    pub(crate) const PREFERENCE: &str = "kubevirt.io/preference-name";
    pub(crate) const CLUSTER_PREFERENCE: &str = "kubevirt.io/cluster-preference-name";
}

/// One of the four kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    Instancetype,
    ClusterInstancetype,
    Preference,
    ClusterPreference,
}

impl Resource {
    pub const ALL: [Resource; 4] = [
        Resource::Instancetype,
        Resource::ClusterInstancetype,
        Resource::Preference,
        Resource::ClusterPreference,
    ];

    /// The kind.
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Resource::Instancetype => "VirtualMachineInstancetype",
            Resource::ClusterInstancetype => "VirtualMachineClusterInstancetype",
            Resource::Preference => "VirtualMachinePreference",
            Resource::ClusterPreference => "VirtualMachineClusterPreference",
        }
    }

    /// The resource (plural) name.
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Resource::Instancetype => "virtualmachineinstancetypes",
            Resource::ClusterInstancetype => "virtualmachineclusterinstancetypes",
            Resource::Preference => "virtualmachinepreferences",
            Resource::ClusterPreference => "virtualmachineclusterpreferences",
        }
    }

    /// Namespaced (the VM's namespace) rather than cluster-wide.
    pub(crate) fn is_namespaced(self) -> bool {
        matches!(self, Resource::Instancetype | Resource::Preference)
    }

    /// The Go client's NotFound text for a GET of `name`.
    pub(crate) fn not_found(self, name: &str) -> String {
        format!(
            "{}.{} \"{name}\" not found",
            self.plural(),
            crate::api::instancetype::GROUP
        )
    }
}

/// `spec.instancetype` / `spec.preference` (`InstancetypeMatcher` / `PreferenceMatcher`,
/// core/v1/types.go:3890-3990). Absent strings are empty, as in Go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matcher {
    pub name: String,
    pub kind: String,
    pub revision_name: String,
    pub infer_from_volume: String,
    pub infer_from_volume_failure_policy: Option<String>,
}

impl Matcher {
    fn parse(v: Option<&Value>) -> Option<Matcher> {
        let v = v.filter(|v| !v.is_null())?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        Some(Matcher {
            name: s("name"),
            kind: s("kind"),
            revision_name: s("revisionName"),
            infer_from_volume: s("inferFromVolume"),
            infer_from_volume_failure_policy: v
                .get("inferFromVolumeFailurePolicy")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// The VM's instancetype matcher.
    pub(crate) fn instancetype(vm: &VirtualMachine) -> Option<Matcher> {
        Matcher::parse(vm.spec.instancetype.as_deref())
    }

    /// The VM's preference matcher.
    pub(crate) fn preference(vm: &VirtualMachine) -> Option<Matcher> {
        Matcher::parse(vm.spec.preference.as_deref())
    }

    /// The kind switch of the finders (find/spec.go:52-81, preference/find/spec.go:51-79): the
    /// namespaced kind by singular or plural name (any case), the cluster kind by name or when
    /// empty; anything else is KubeVirt's "got unexpected kind" error.
    pub(crate) fn resource(&self, preference: bool) -> Result<Resource, String> {
        let kind = self.kind.to_lowercase();
        let (ns, cluster, matcher) = if preference {
            (
                Resource::Preference,
                Resource::ClusterPreference,
                "PreferenceMatcher",
            )
        } else {
            (
                Resource::Instancetype,
                Resource::ClusterInstancetype,
                "InstancetypeMatcher",
            )
        };
        let singular = |r: Resource| r.kind().to_lowercase();
        if kind == singular(ns) || kind == ns.plural() {
            Ok(ns)
        } else if kind.is_empty() || kind == singular(cluster) || kind == cluster.plural() {
            Ok(cluster)
        } else {
            Err(format!("got unexpected kind in {matcher}: {}", self.kind))
        }
    }
}

/// The instancetype objects one VM sync may read, from the four informer stores (the finders'
/// `store.GetByKey`, find/instancetype.go:41-71): the objects the VM's matchers name, by kind and
/// name, as the API returned them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Objects(pub BTreeMap<(Resource, String), Arc<Value>>);

impl Objects {
    /// The object of `resource` named `name`.
    pub(crate) fn get(&self, resource: Resource, name: &str) -> Option<&Value> {
        self.0
            .get(&(resource, name.to_string()))
            .map(|v| v.as_ref())
    }

    /// The (kind, name) pairs a VM's matchers name, for filling [`Objects`] from stores
    /// (unknown kinds are left out: the sync reports them).
    pub(crate) fn wanted(vm: &VirtualMachine) -> Vec<(Resource, String)> {
        [
            (Matcher::instancetype(vm), false),
            (Matcher::preference(vm), true),
        ]
        .into_iter()
        .filter_map(|(m, pref)| {
            let m = m?;
            Some((m.resource(pref).ok()?, m.name))
        })
        .collect()
    }
}

/// `status.instancetypeRef` / `status.preferenceRef` (`InstancetypeStatusRef`,
/// core/v1/types.go:2189-2215) as raw JSON; `None` when absent.
pub(crate) fn status_ref(vm: &VirtualMachine, preference: bool) -> Option<Value> {
    let key = if preference {
        "preferenceRef"
    } else {
        "instancetypeRef"
    };
    vm.status
        .as_ref()?
        .extra
        .read(|m| m.get(key).filter(|v| !v.is_null()).cloned())
}

/// `status.*Ref.controllerRevisionRef.name`, `""` when unset.
pub(crate) fn status_revision_name(vm: &VirtualMachine, preference: bool) -> String {
    status_ref(vm, preference)
        .and_then(|r| {
            r.pointer("/controllerRevisionRef/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// A ControllerRevision of the VM's namespace by name, or the Go client's NotFound text.
fn revision_by_name<'a>(
    revisions: &'a [Arc<ControllerRevision>],
    name: &str,
) -> Result<&'a ControllerRevision, String> {
    revisions
        .iter()
        .map(|r| r.as_ref())
        .find(|r| r.metadata.name.as_deref() == Some(name))
        .ok_or_else(|| format!("controllerrevisions.apps \"{name}\" not found"))
}

/// `specFinder.Find` / `FindPreference` (find/spec.go:52-82, find/revision.go:36-64,
/// preference/find/spec.go, preference/find/revision.go): the spec of the VM's instancetype
/// (`preference` false) or preference: from `spec.*.revisionName`'s ControllerRevision, else from
/// the status ref's one when it stashes the object the matcher names, else from the object.
/// `Ok(None)` without a matcher; `Err` is KubeVirt's error text.
pub(crate) fn find_spec(
    vm: &VirtualMachine,
    preference: bool,
    objects: &Objects,
    revisions: &[Arc<ControllerRevision>],
) -> Result<Option<Value>, String> {
    let matcher = if preference {
        Matcher::preference(vm)
    } else {
        Matcher::instancetype(vm)
    };
    let Some(m) = matcher else {
        return Ok(None);
    };
    if !m.revision_name.is_empty() {
        let cr = revision_by_name(revisions, &m.revision_name)?;
        return revision::stashed_spec(cr, preference).map(Some);
    }
    let ref_name = status_revision_name(vm, preference);
    if !ref_name.is_empty() {
        let cr = revision_by_name(revisions, &ref_name)?;
        let stashes_named = cr
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::OBJECT_NAME))
            .is_some_and(|n| *n == m.name);
        if stashes_named {
            return revision::stashed_spec(cr, preference).map(Some);
        }
    }
    let resource = m.resource(preference)?;
    let object = objects
        .get(resource, &m.name)
        .ok_or_else(|| resource.not_found(&m.name))?;
    Ok(Some(
        object
            .get("spec")
            .cloned()
            .unwrap_or(Value::Object(Default::default())),
    ))
}

/// The instancetype and preference annotations `ApplyToVMI` puts on the VMI
/// (pkg/instancetype/annotations/annotations.go:28-44, preference/annotations/annotations.go):
/// the name under the namespaced or the cluster key; an unknown kind sets nothing.
pub(crate) fn set_name_annotations(vm: &VirtualMachine, target: &mut crate::api::SmallMap<String>) {
    let pairs = [
        (
            Matcher::instancetype(vm),
            false,
            annotations::INSTANCETYPE,
            annotations::CLUSTER_INSTANCETYPE,
        ),
        (
            Matcher::preference(vm),
            true,
            annotations::PREFERENCE,
            annotations::CLUSTER_PREFERENCE,
        ),
    ];
    for (m, pref, ns_key, cluster_key) in pairs {
        let Some(m) = m else { continue };
        match m.resource(pref) {
            Ok(r) if r.is_namespaced() => {
                target.insert(ns_key, m.name.clone());
            }
            Ok(_) => {
                target.insert(cluster_key, m.name.clone());
            }
            Err(_) => {}
        }
    }
}

/// `ApplyToVM` (apply/vm.go:67-87): the VM with its instancetype and preference expanded into
/// `spec.template` (used for RestartRequired and the live-update checks, and by `inspect`).
/// `Err` is KubeVirt's error text (a find error, or "VM conflicts with instancetype spec in
/// fields: [...]").
pub(crate) fn apply_to_vm(
    vm: &VirtualMachine,
    objects: &Objects,
    revisions: &[Arc<ControllerRevision>],
) -> Result<VirtualMachine, String> {
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return Ok(vm.clone());
    }
    let it = find_spec(vm, false, objects, revisions)?;
    let pref = find_spec(vm, true, objects, revisions)?;
    let mut out = vm.clone();
    let template = out.spec.template.get_or_insert_with(Default::default);
    let mut spec = serde_json::to_value(template.spec.take().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    let meta = template.metadata.get_or_insert_with(Default::default);
    let mut ann = meta.maps.annotations.take().unwrap_or_default();
    let conflicts = apply::apply_to_vmi("spec", it.as_ref(), pref.as_ref(), &mut spec, &mut ann);
    if !conflicts.is_empty() {
        return Err(format!(
            "VM conflicts with instancetype spec in fields: [{}]",
            conflicts.paths()
        ));
    }
    meta.maps.annotations = (!ann.is_empty()).then_some(ann);
    template.spec = Some(serde_json::from_value(spec).map_err(|e| e.to_string())?);
    Ok(out)
}

#[cfg(test)]
mod tests;
