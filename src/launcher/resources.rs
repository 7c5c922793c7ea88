//! The vocabulary of the `compute` container's resources: the device-plugin resource names and
//! constants KubeVirt uses, what the renderer knows about the namespace ([`NamespaceContext`]),
//! and the result ([`ComputeResources`]). The rules that compute them are in
//! `renderer.rs` (KubeVirt's `ResourceRenderer`).
//!
//! Multus network resource names come from the NADs the caller read ([`RenderLookups`]; KubeVirt
//! reads them only when the Beta gate `ExternalNetResourceInjection` is disabled — it is on by
//! default, so the default KubeVirt renders none either). The support containers' resources read
//! the KubeVirt CR's `supportContainerResources` through [`Support`]. The hypervisor device is
//! `kvm`, or `mshv` for the CR's `hyperv-direct` hypervisor ([`hypervisor_device`]).

use crate::api::quantity::ParsedQuantity;
use k8s_openapi::api::core::v1::{ResourceClaim, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `supportContainerResources` types (`SupportContainerType`, core/v1/types.go:3318-3333).
pub(crate) const SUPPORT_SIDECAR: &str = "sidecar";
pub(crate) const SUPPORT_VIRTIOFS: &str = "virtiofs";
pub(crate) const SUPPORT_CONTAINER_DISK: &str = "container-disk";
pub(crate) const SUPPORT_GUEST_CONSOLE_LOG: &str = "guest-console-log";
pub(crate) const SUPPORT_HOTPLUG_DISK: &str = "hotplug-disk";

/// What a support container's resources depend on: the KubeVirt CR's
/// `supportContainerResources` (`GetSupportContainerRequest`/`Limit`, virt-config.go:318-340)
/// and whether the VMI has dedicated CPUs or wants Guaranteed QoS (then requests follow limits).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Support<'a> {
    pub entries: &'a [crate::config::SupportContainerResources],
    pub guaranteed: bool,
}

impl Support<'_> {
    /// The CR's request of `resource` for `kind`, if it sets one.
    pub(crate) fn request(&self, kind: &str, resource: &str) -> Option<Quantity> {
        crate::config::support_quantity(self.entries, kind, false, resource)
    }

    /// The CR's limit of `resource` for `kind`, if it sets one.
    pub(crate) fn limit(&self, kind: &str, resource: &str) -> Option<Quantity> {
        crate::config::support_quantity(self.entries, kind, true, resource)
    }

    /// `{cpu, memory}` requests (or limits): the CR's for `kind`, else the defaults given.
    pub(crate) fn cpu_memory(
        &self,
        kind: &str,
        limit: bool,
        cpu: &str,
        memory: &str,
    ) -> BTreeMap<String, Quantity> {
        let get = |resource: &str, default: &str| {
            let set = if limit {
                self.limit(kind, resource)
            } else {
                self.request(kind, resource)
            };
            (
                resource.to_string(),
                set.unwrap_or_else(|| Quantity(default.into())),
            )
        };
        BTreeMap::from([get("cpu", cpu), get("memory", memory)])
    }
}

/// Resource name prefix of KubeVirt's device plugins (template.go:85).
pub const DEVICE_PREFIX: &str = "devices.kubevirt.io";
/// `/dev/kvm` (the KVM hypervisor's device, pkg/hypervisor/kvm).
pub const KVM_DEVICE: &str = "devices.kubevirt.io/kvm";
/// `/dev/mshv`, the `hyperv-direct` hypervisor's device (pkg/hypervisor/mshv/hypervisorbackend.go:44,
/// template.go:1039-1041).
pub const MSHV_DEVICE: &str = "devices.kubevirt.io/mshv";

/// `ConstructHypervisorResourceName` (template.go:1039-1041) of the settings' hypervisor
/// (`NewLauncherHypervisorResources`, launcherhypervisorresources.go:40-48): `mshv` for
/// `hyperv-direct`, `kvm` for anything else.
pub(crate) fn hypervisor_device(settings: &crate::config::ClusterSettings) -> &'static str {
    if settings.hypervisor_name() == crate::config::HYPERV_DIRECT_HYPERVISOR {
        MSHV_DEVICE
    } else {
        KVM_DEVICE
    }
}
/// `/dev/net/tun`.
pub const TUN_DEVICE: &str = "devices.kubevirt.io/tun";
/// `/dev/vhost-net`.
pub const VHOST_NET_DEVICE: &str = "devices.kubevirt.io/vhost-net";
/// `/dev/vhost-vsock`.
pub const VHOST_VSOCK_DEVICE: &str = "devices.kubevirt.io/vhost-vsock";
/// AMD SEV / SEV-SNP.
pub const SEV_DEVICE: &str = "devices.kubevirt.io/sev";
/// Intel TDX.
pub const TDX_DEVICE: &str = "devices.kubevirt.io/tdx";
/// SCSI persistent reservation helper.
pub const PR_HELPER_DEVICE: &str = "devices.kubevirt.io/pr-helper";
/// IOMMUFD (Alpha gate `IOMMUFD`).
pub const IOMMUFD_DEVICE: &str = "devices.kubevirt.io/iommufd";
/// Added to the ephemeral-storage request (and limit, if any), template.go:117.
pub const EPHEMERAL_STORAGE_OVERHEAD: &str = "50M";
/// Memory limit = request × this ratio when a limit is added automatically (template.go:121).
pub const DEFAULT_MEMORY_LIMIT_RATIO: f64 = 2.0;
/// Namespace label overriding [`DEFAULT_MEMORY_LIMIT_RATIO`] (types.go:1434).
pub const AUTO_MEMORY_LIMITS_RATIO_LABEL: &str = "alpha.kubevirt.io/auto-memory-limits-ratio";
/// VMI annotation: pad an isolated emulator thread to an even CPU count (types.go:1440).
pub const EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY: &str =
    "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity";

/// What the renderer needs to know about the VMI's namespace. `Default` means "no ResourceQuota,
/// no labels, PVCs unknown".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceContext {
    /// Labels of the namespace (for `alpha.kubevirt.io/auto-memory-limits-ratio`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A ResourceQuota in the namespace has `spec.hard["limits.cpu"]` (→ automatic CPU limit,
    /// template.go:1753-1769).
    #[serde(default)]
    pub quota_limits_cpu: bool,
    /// A ResourceQuota in the namespace has `spec.hard["limits.memory"]` (→ automatic memory limit).
    #[serde(default)]
    pub quota_limits_memory: bool,
    /// The namespace matches the KubeVirt CR's `autoCPULimitNamespaceLabelSelector`
    /// (template.go:1576-1612; the caller evaluates the selector).
    #[serde(default)]
    pub auto_cpu_limit_selector_matches: bool,
    /// PersistentVolumeClaims of the namespace by name, if known. `None`: unknown — every claim is
    /// assumed to exist in filesystem mode without shared access. `Some`: a claim missing from
    /// the map makes the pod renderer fail with `didn't find PVC <name>` like KubeVirt
    /// (rendervolumes.go:501-531).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvcs: Option<BTreeMap<String, PvcInfo>>,
    /// The objects KubeVirt GETs while rendering, as the caller read them. `None`: not read —
    /// every hook-sidecar ConfigMap is assumed to exist and every NetworkAttachmentDefinition
    /// to name no resource (what `explain-overhead` and `inspect` render with).
    #[serde(skip)]
    pub lookups: Option<RenderLookups>,
    /// The VMI's backend-storage claim (`PVCForVMI`, backend-storage.go:61-83), for the
    /// `vm-state` volume of a VMI with persistent TPM/EFI state. `None` with `pvcs` known: the
    /// claim does not exist yet and the render fails as KubeVirt's does (template.go:356-363);
    /// `None` with `pvcs` unknown: the legacy name `persistent-state-for-<VMI name>` is shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_storage_claim: Option<String>,
}

/// The objects KubeVirt's renderer reads through the API while rendering, not from a cache:
/// hook-sidecar ConfigMaps (template.go:583-587) and, with the Beta gate
/// `ExternalNetResourceInjection` disabled, the NetworkAttachmentDefinitions of Multus networks
/// (template.go:427-433, pkg/network/multus/nad.go:48-70); `lookups::wanted` says which.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderLookups {
    /// ConfigMaps of the VMI's namespace by name: `Ok` read, `Err` the GET's error text
    /// (`configmaps "NAME" not found`). A name missing from the map counts as not found.
    pub config_maps: BTreeMap<String, Result<(), String>>,
    /// NetworkAttachmentDefinitions by `namespace/name`: the value of their
    /// `k8s.v1.cni.cncf.io/resourceName` annotation (`""` without one), `None` when the GET
    /// failed. A key missing from the map counts as a failed GET.
    pub network_attachment_definitions: BTreeMap<String, Option<String>>,
}

impl NamespaceContext {
    /// What KubeVirt's `TemplateService` reads from its namespace and ResourceQuota informers
    /// (pkg/virt-controller/services/template.go `doesVMIRequireAutoResourceLimits`,
    /// `doesVMIRequireAutoCPULimits`, `getMemoryLimitsRatio`): the namespace's labels, whether
    /// any of `quotas` (those of the VMI's namespace) sets `spec.hard["limits.cpu"]` /
    /// `["limits.memory"]`, and whether the labels match the cluster's
    /// `autoCPULimitNamespaceLabelSelector`. A namespace that is not known, or a selector that
    /// does not parse, matches nothing (KubeVirt logs a warning and renders no limit). PVCs stay
    /// unknown.
    ///
    /// The one place this rule is evaluated: the controller (from its informers), the inspector
    /// and `explain-overhead` (from what they read) all call it.
    pub(crate) fn from_cluster<'a>(
        namespace: Option<&k8s_openapi::api::core::v1::Namespace>,
        quotas: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::ResourceQuota>,
        settings: &crate::config::ClusterSettings,
    ) -> Self {
        let labels = namespace
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let (mut quota_limits_cpu, mut quota_limits_memory) = (false, false);
        for q in quotas {
            if let Some(hard) = q.spec.as_ref().and_then(|s| s.hard.as_ref()) {
                quota_limits_cpu |= hard.contains_key("limits.cpu");
                quota_limits_memory |= hard.contains_key("limits.memory");
            }
        }
        let auto_cpu_limit_selector_matches = namespace.is_some()
            && settings
                .auto_cpu_limit_namespace_label_selector
                .clone()
                .and_then(|s| kube::core::Selector::try_from(s).ok())
                .is_some_and(|s| kube::core::SelectorExt::matches(&s, &labels));
        NamespaceContext {
            labels,
            quota_limits_cpu,
            quota_limits_memory,
            auto_cpu_limit_selector_matches,
            pvcs: None,
            lookups: None,
            backend_storage_claim: None,
        }
    }
}

/// The facts about a PVC the pod renderer uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcInfo {
    /// `spec.volumeMode: Block` → a `volumeDevices` entry at `/dev/<volume>` instead of a mount.
    pub block: bool,
    /// Access modes include ReadWriteMany (→ listed in `SHARED_FILESYSTEM_PATHS`).
    pub shared: bool,
    /// `metadata.uid`: names the claim in a persistent-reservation pod label
    /// (`pr.kubevirt.io/<uid>`, template.go:164-193).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// A DRA claim consumed by the `compute` container (`containers[].resources.claims[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    /// Pod-level claim name (`spec.resourceClaims[].name`).
    pub name: String,
    /// Request inside the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// The `compute` container's resources. Quantities are Kubernetes canonical text (`300m`,
/// `1294Mi`, `1282971493`); resource names are sorted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeResources {
    /// `resources.requests`.
    pub requests: BTreeMap<String, Quantity>,
    /// `resources.limits`.
    pub limits: BTreeMap<String, Quantity>,
    /// `resources.claims` (DRA GPUs / host devices / networks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimRef>,
}

impl ComputeResources {
    /// These resources as the API server stores them in a Pod: every limit without a request
    /// gives the request (Kubernetes `SetDefaults_Pod`, pkg/apis/core/v1/defaults.go), so the
    /// device plugins' limits KubeVirt renders (`devices.kubevirt.io/kvm`, …) are requests too.
    /// What a running launcher pod is compared with.
    pub fn as_stored(&self) -> ComputeResources {
        let mut stored = self.clone();
        for (name, limit) in &self.limits {
            stored
                .requests
                .entry(name.clone())
                .or_insert_with(|| limit.clone());
        }
        stored
    }

    /// As k8s-openapi `ResourceRequirements` (empty maps/lists become `None`).
    pub fn to_resource_requirements(&self) -> ResourceRequirements {
        ResourceRequirements {
            requests: (!self.requests.is_empty()).then(|| self.requests.clone()),
            limits: (!self.limits.is_empty()).then(|| self.limits.clone()),
            claims: (!self.claims.is_empty()).then(|| {
                self.claims
                    .iter()
                    .map(|c| ResourceClaim {
                        name: c.name.clone(),
                        request: c.request.clone(),
                    })
                    .collect()
            }),
        }
    }

    /// A request parsed back to a number of whole units (bytes for memory, `Value()` rounding
    /// up); `None` when absent or unparseable.
    pub(crate) fn request_value(&self, name: &str) -> Option<i64> {
        self.requests
            .get(name)
            .and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|q| q.value())
    }

    /// A limit parsed back to whole units, like [`ComputeResources::request_value`].
    pub(crate) fn limit_value(&self, name: &str) -> Option<i64> {
        self.limits
            .get(name)
            .and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|q| q.value())
    }
}

#[cfg(test)]
mod tests {
    use super::NamespaceContext;
    use crate::config::ClusterSettings;
    use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
    use serde_json::json;

    fn namespace(labels: serde_json::Value) -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": "prod", "labels": labels}})).unwrap()
    }

    fn quota(hard: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(
            json!({"metadata": {"name": "q", "namespace": "prod"}, "spec": {"hard": hard}}),
        )
        .unwrap()
    }

    #[test]
    fn quotas_with_limits_turn_on_automatic_limits_each_for_its_own_resource() {
        let s = ClusterSettings::default();
        let ns = namespace(json!({"alpha.kubevirt.io/auto-memory-limits-ratio": "3.2"}));
        let none = NamespaceContext::from_cluster(Some(&ns), [], &s);
        assert!(!none.quota_limits_cpu && !none.quota_limits_memory);
        assert_eq!(
            none.labels["alpha.kubevirt.io/auto-memory-limits-ratio"],
            "3.2"
        );
        let requests_only = quota(json!({"requests.memory": "10Gi", "pods": "10"}));
        let mem = quota(json!({"limits.memory": "10Gi"}));
        let cpu = quota(json!({"limits.cpu": "4"}));
        let c = NamespaceContext::from_cluster(Some(&ns), [&requests_only], &s);
        assert!(!c.quota_limits_cpu && !c.quota_limits_memory);
        let c = NamespaceContext::from_cluster(Some(&ns), [&requests_only, &mem], &s);
        assert!(!c.quota_limits_cpu && c.quota_limits_memory);
        let c = NamespaceContext::from_cluster(Some(&ns), [&cpu, &mem], &s);
        assert!(c.quota_limits_cpu && c.quota_limits_memory);
        assert!(!c.auto_cpu_limit_selector_matches);
    }

    #[test]
    fn the_auto_cpu_limit_selector_matches_namespace_labels_like_a_label_selector() {
        let cr = |selector: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(&json!({
                "kind": "KubeVirt",
                "spec": {"configuration": {"autoCPULimitNamespaceLabelSelector": selector}}
            }))
            .unwrap()
        };
        let team = namespace(json!({"team": "a", "tier": "gold"}));
        let other = namespace(json!({"team": "b"}));
        let by_labels = cr(json!({"matchLabels": {"team": "a"}}));
        let by_expr = cr(
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold", "silver"]}]}),
        );
        let bad =
            cr(json!({"matchExpressions": [{"key": "tier", "operator": "Like", "values": ["x"]}]}));
        let unset = ClusterSettings::default();
        // Unset selector, unknown namespace, or an unparseable selector: no automatic CPU limit.
        for (case, namespace, settings, matches) in [
            ("matchLabels, matching", Some(&team), &by_labels, true),
            ("matchLabels, other", Some(&other), &by_labels, false),
            ("matchExpressions, matching", Some(&team), &by_expr, true),
            ("matchExpressions, other", Some(&other), &by_expr, false),
            ("no selector", Some(&team), &unset, false),
            ("namespace not known", None, &by_labels, false),
            ("unparseable selector", Some(&team), &bad, false),
        ] {
            assert_eq!(
                NamespaceContext::from_cluster(namespace, [], settings)
                    .auto_cpu_limit_selector_matches,
                matches,
                "{case}"
            );
        }
        // A selector that is not a LabelSelector is a field error naming the field.
        let e = ClusterSettings::from_kubevirt_cr(&json!({
            "kind": "KubeVirt",
            "spec": {"configuration": {"autoCPULimitNamespaceLabelSelector": {"matchLabels": "x"}}}
        }))
        .unwrap_err();
        assert!(
            e.to_string().contains("autoCPULimitNamespaceLabelSelector"),
            "{e}"
        );
    }
}
