//! The subset of virt-api's admission defaults (`pkg/defaults/defaults.go`,
//! `SetDefaultVirtualMachineInstanceSpec`) that changes the memory overhead or the launcher pod's
//! resources. A VMI read from the cluster already has them; a VM template or a VMI read from a
//! file does not, so `explain-overhead -f` and the VM controller's dry renders apply them first.
//!
//! Modelled: default architecture, CPU request copied from the CPU limit
//! (`setDefaultResourceRequests`), `memory.guest` from the memory request / limit / hugepage size
//! (`setGuestMemory`), the guest CPU topology (`SetDefaultGuestCPUTopology`: sockets = CPU
//! limit `.Value()`, else CPU request `.Value()`, else 1; cores = threads = 1), and the default
//! pod network (`SetDefaultNetworkInterface`, pkg/network/vmispec/interface.go: when
//! `autoattachPodInterface` is not false and there are no interfaces and no networks, one
//! interface `default` with the cluster's default binding — `bridge` unless configured — and
//! the network `{name: default, pod: {}}`).
//! Per KubeVirt version ([`KubeVirtVersion`]): up to v1.6 `setDefaultResourceRequests` also set
//! `requests.memory` (from the memory limit, else `memory.guest`, else the hugepage size, the
//! last two × 100 / memoryOvercommit; v1.6.0 pkg/defaults/defaults.go:317-349, v1.5.0 303-335).
//! From v1.7.0 and v1.6.4 (PR 15896, cherry-picked as PR 16032) the request stays unset and the renderer's
//! `WithMemoryRequests` derives it for the pod only, so the VMI has no memory request.
//! Not modelled (no effect on the overhead or resources): machine type, CPU model, eviction
//! strategy, container disk pull policies, hyper-V dependencies, CPU/memory hotplug maxima, the
//! cluster-wide `cpuRequest` setting.

use super::quantity::ParsedQuantity;
use super::vmi::{Cpu, Disk, Interface, Memory, Network, VirtualMachineInstanceSpec};
use crate::kubevirt_version::KubeVirtVersion;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn is_zero(q: Option<&Quantity>) -> bool {
    q.is_none_or(|q| {
        ParsedQuantity::parse(&q.0)
            .map(|p| p.is_zero())
            .unwrap_or(false)
    })
}

/// `spec.domain.resources.requests[name]` (or `.limits[name]` with `limits`).
fn resource<'a>(
    spec: &'a VirtualMachineInstanceSpec,
    limits: bool,
    name: &str,
) -> Option<&'a Quantity> {
    let res = spec.domain.resources.as_ref()?;
    let list = if limits { &res.limits } else { &res.requests };
    list.as_ref()?.get(name)
}

/// The cluster settings the admission defaults read (from the KubeVirt CR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// `architectureConfiguration.defaultArchitecture` (default `amd64`).
    pub architecture: String,
    /// `network.defaultNetworkInterface` (default `bridge`).
    pub default_network_interface: String,
    /// `network.permitBridgeInterfaceOnPodNetwork` (default true).
    pub permit_bridge_interface_on_pod_network: bool,
    /// The release whose virt-api to reproduce (see the module docs).
    pub kubevirt_version: KubeVirtVersion,
    /// `developerConfiguration.memoryOvercommit` in percent (read by virt-api up to v1.6).
    pub memory_overcommit: u32,
}

impl Default for AdmissionSettings {
    fn default() -> Self {
        AdmissionSettings {
            architecture: "amd64".into(),
            default_network_interface: "bridge".into(),
            permit_bridge_interface_on_pod_network: true,
            kubevirt_version: KubeVirtVersion::default(),
            memory_overcommit: 100,
        }
    }
}

/// Admission would reject the spec.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefaultsError {
    /// `SetDefaultNetworkInterface` with a bridge default that the cluster forbids.
    #[error("bridge interface is not enabled in kubevirt-config")]
    BridgeNotPermitted,
    /// `SetDefaultNetworkInterface` with the removed slirp default.
    #[error("slirp interface is deprecated as of v1.3")]
    SlirpDeprecated,
}

/// Apply the admission defaults listed in the module docs to `spec`, in virt-api's order.
/// Invalid quantities are left for the formula to report with their field name.
pub fn apply_admission_defaults(
    spec: &mut VirtualMachineInstanceSpec,
    settings: &AdmissionSettings,
) -> Result<(), DefaultsError> {
    apply_defaults(spec, settings, None)
}

/// All of `SetDefaultVirtualMachineInstanceSpec` (v1.9.0 pkg/defaults/defaults.go:193-206), as
/// the instancetype expansion runs it on a VM template (pkg/instancetype/expand/expand.go:
/// 109-112): the admission defaults above plus the machine type (`setDefaultMachineType`,
/// 214-225), the cluster `cpuRequest` (`setDefaultResourceRequests`, 262-283), the container
/// disk pull policies (227-237), the eviction strategy (208-212) and a disk for every volume
/// (`SetDefaultVolumeDisk`).
pub(crate) fn set_default_instance_spec(
    spec: &mut VirtualMachineInstanceSpec,
    settings: &AdmissionSettings,
    more: &SpecDefaultSettings,
) -> Result<(), DefaultsError> {
    apply_defaults(spec, settings, Some(more))
}

/// The cluster settings `SetDefaultVirtualMachineInstanceSpec` reads beyond
/// [`AdmissionSettings`], from the KubeVirt CR.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecDefaultSettings {
    /// The deprecated top-level `machineType`: it wins over the per-architecture ones
    /// (`GetMachineType`, pkg/virt-config/virt-config.go:199-212).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_type: Option<String>,
    /// `architectureConfiguration.{amd64,arm64,s390x}.machineType` by architecture (KubeVirt's
    /// defaults `q35`, `virt`, `s390-ccw-virtio`: virt-config.go:62-64, configuration.go:254-270).
    pub arch_machine_types: std::collections::BTreeMap<String, String>,
    /// `cpuRequest` when it is not KubeVirt's default `100m`: only then is it written into a
    /// spec without a CPU request (defaults.go:272-282). Canonical text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<String>,
    /// `evictionStrategy` (`None` unless the CR says otherwise: configuration.go:186, 206).
    pub eviction_strategy: String,
}

impl Default for SpecDefaultSettings {
    fn default() -> Self {
        SpecDefaultSettings {
            machine_type: None,
            arch_machine_types: [
                ("amd64", "q35"),
                ("arm64", "virt"),
                ("s390x", "s390-ccw-virtio"),
            ]
            .into_iter()
            .map(|(a, m)| (a.to_string(), m.to_string()))
            .collect(),
            cpu_request: None,
            eviction_strategy: "None".into(),
        }
    }
}

impl SpecDefaultSettings {
    /// `GetMachineType(arch)`: the top-level type, else the architecture's (amd64's for any
    /// other architecture).
    fn machine_type(&self, arch: &str) -> String {
        if let Some(t) = self.machine_type.as_ref().filter(|t| !t.is_empty()) {
            return t.clone();
        }
        let arch = if matches!(arch, "arm64" | "s390x") {
            arch
        } else {
            "amd64"
        };
        self.arch_machine_types
            .get(arch)
            .cloned()
            .unwrap_or_default()
    }
}

/// `setDefaultMachineType` (defaults.go:214-225): `domain.machine.type` when empty.
fn set_default_machine_type(spec: &mut VirtualMachineInstanceSpec, more: &SpecDefaultSettings) {
    let machine_type = more.machine_type(spec.architecture.as_deref().unwrap_or(""));
    let mut machine = spec
        .domain
        .extra
        .get("machine")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    if machine
        .get("type")
        .and_then(|t| t.as_str())
        .unwrap_or("")
        .is_empty()
    {
        machine["type"] = serde_json::json!(machine_type);
        spec.domain.extra.insert("machine".into(), machine);
    }
}

/// `setDefaultPullPoliciesOnContainerDisks` (defaults.go:227-237): `Always` for a `:latest` or
/// untagged image, else `IfNotPresent`, where the volume sets none.
fn set_default_pull_policies(spec: &mut VirtualMachineInstanceSpec) {
    for volume in spec.volumes.iter_mut().flatten() {
        let Some(disk) = volume.container_disk.as_mut() else {
            continue;
        };
        let set = disk
            .extra
            .get("imagePullPolicy")
            .and_then(|p| p.as_str())
            .is_some_and(|p| !p.is_empty());
        if set {
            continue;
        }
        let image = disk.image.as_deref().unwrap_or("");
        let policy = if image.ends_with(":latest") || !image.contains([':', '@']) {
            "Always"
        } else {
            "IfNotPresent"
        };
        disk.extra
            .insert("imagePullPolicy".into(), serde_json::json!(policy));
    }
}

/// The CPU half of `setDefaultResourceRequests` for the cluster's `cpuRequest` (defaults.go:
/// 272-282): a spec without a CPU request gets it, unless it asks for dedicated CPUs.
fn set_cluster_cpu_request(spec: &mut VirtualMachineInstanceSpec, more: &SpecDefaultSettings) {
    let Some(request) = more.cpu_request.as_ref() else {
        return;
    };
    if resource(spec, false, "cpu").is_some() {
        return;
    }
    let dedicated = spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false);
    if dedicated {
        return;
    }
    spec.domain
        .resources
        .get_or_insert_with(Default::default)
        .requests
        .get_or_insert_with(Default::default)
        .insert("cpu", Quantity(request.clone()));
}

/// `SetDefaultVolumeDisk` (pkg/util/util.go:131-152): append a disk `{name}` for every volume
/// whose name is neither a disk nor a filesystem (`devices.filesystems`) name.
pub(crate) fn set_default_volume_disk(spec: &mut VirtualMachineInstanceSpec) {
    let mut names: Vec<String> = spec
        .domain
        .devices
        .disks
        .iter()
        .flatten()
        .map(|d| d.name.clone())
        .collect();
    if let Some(fs) = spec
        .domain
        .devices
        .extra
        .get("filesystems")
        .and_then(|f| f.as_array())
    {
        names.extend(
            fs.iter()
                .filter_map(|f| f.get("name").and_then(|n| n.as_str()))
                .map(str::to_string),
        );
    }
    let missing: Vec<String> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| !names.contains(&v.name))
        .map(|v| v.name.clone())
        .collect();
    if missing.is_empty() {
        return;
    }
    let disks = spec.domain.devices.disks.get_or_insert_with(Vec::new);
    for name in missing {
        disks.push(Disk {
            name,
            extra: Default::default(),
        });
    }
}

/// The admission defaults, and with `more` the rest of `SetDefaultVirtualMachineInstanceSpec`,
/// in its order.
fn apply_defaults(
    spec: &mut VirtualMachineInstanceSpec,
    settings: &AdmissionSettings,
    more: Option<&SpecDefaultSettings>,
) -> Result<(), DefaultsError> {
    // setDefaultArchitecture (defaults.go:327-331): the cluster's, which may be empty
    // (`GetDefaultArchitecture`, see `ClusterSettings::architecture`); an empty one is not
    // written (`architecture,omitempty`).
    if spec.architecture.as_deref().unwrap_or("").is_empty() && !settings.architecture.is_empty() {
        spec.architecture = Some(settings.architecture.clone());
    }
    if let Some(more) = more {
        set_default_machine_type(spec, more);
    }
    // setDefaultResourceRequests: CPU request := CPU limit when only the limit is set.
    if let Some(res) = spec.domain.resources.as_mut() {
        let limit = res.limits.as_ref().and_then(|l| l.get("cpu")).cloned();
        let request_zero = is_zero(res.requests.as_ref().and_then(|r| r.get("cpu")));
        if let Some(limit) = limit.filter(|l| !is_zero(Some(l)))
            && request_zero
        {
            res.requests
                .get_or_insert_with(Default::default)
                .insert("cpu", limit);
        }
    }
    if let Some(more) = more {
        set_cluster_cpu_request(spec, more);
    }
    if settings
        .kubevirt_version
        .formula()
        .admission_sets_memory_request
        .value
    {
        set_default_memory_request(spec, settings.memory_overcommit);
    }
    // setGuestMemory.
    let has_guest = spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.guest.is_some());
    if !has_guest {
        let req = resource(spec, false, "memory");
        let lim = resource(spec, true, "memory");
        let page = spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.hugepages.as_ref())
            .and_then(|h| h.page_size.clone())
            .filter(|p| ParsedQuantity::parse(p).is_ok());
        let guest = if !is_zero(req) {
            req.cloned()
        } else if !is_zero(lim) {
            lim.cloned()
        } else {
            page.map(Quantity)
        };
        let memory = spec.domain.memory.get_or_insert_with(Memory::default);
        memory.guest = guest;
    }
    // SetDefaultGuestCPUTopology (v1.9.0 pkg/defaults/defaults.go:285-308): an absent or
    // all-zero topology gets sockets = CPU limit, else request, `.Value()`, else 1.
    let value = |q: Option<&Quantity>| {
        q.and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|p| u32::try_from(p.value()).unwrap_or(0))
    };
    let sockets = value(resource(spec, true, "cpu"))
        .or_else(|| value(resource(spec, false, "cpu")))
        .unwrap_or(1);
    let cpu = spec.domain.cpu.get_or_insert_with(Cpu::default);
    let unset = |v: Option<u32>| v.unwrap_or(0) == 0;
    if unset(cpu.cores) && unset(cpu.sockets) && unset(cpu.threads) {
        cpu.sockets = Some(sockets);
        cpu.cores = Some(1);
        cpu.threads = Some(1);
    }
    if let Some(more) = more {
        set_default_pull_policies(spec);
        if spec.eviction_strategy.is_none() {
            spec.eviction_strategy = Some(more.eviction_strategy.clone());
        }
    }
    set_default_network_interface(spec, settings)?;
    if more.is_some() {
        set_default_volume_disk(spec);
    }
    Ok(())
}

/// The memory half of `setDefaultResourceRequests` up to v1.6 (v1.6.0 pkg/defaults/defaults.go:
/// 317-349): the limit when the request is zero; with no request at all, `memory.guest`, else the
/// hugepage size, × 100 / `overcommit` (`resource.NewQuantity(value, memory.Format)`).
fn set_default_memory_request(spec: &mut VirtualMachineInstanceSpec, overcommit: u32) {
    let request = resource(spec, false, "memory");
    let limit = resource(spec, true, "memory");
    let value = if !is_zero(limit) && is_zero(request) {
        limit.cloned()
    } else if request.is_none() {
        let memory = spec.domain.memory.as_ref();
        let base = match memory.and_then(|m| m.guest.as_ref()) {
            Some(g) => ParsedQuantity::parse(&g.0).ok(),
            None => memory
                .and_then(|m| m.hugepages.as_ref())
                .and_then(|h| h.page_size.as_deref())
                .and_then(|p| ParsedQuantity::parse(p).ok()),
        };
        base.filter(|m| m.value() > 0)
            .map(|m| m.overcommitted(overcommit).to_quantity())
    } else {
        None
    };
    if let Some(value) = value {
        spec.domain
            .resources
            .get_or_insert_with(Default::default)
            .requests
            .get_or_insert_with(Default::default)
            .insert("memory", value);
    }
}

/// `SetDefaultNetworkInterface` (pkg/network/vmispec/interface.go).
pub(crate) fn set_default_network_interface(
    spec: &mut VirtualMachineInstanceSpec,
    settings: &AdmissionSettings,
) -> Result<(), DefaultsError> {
    if spec.domain.devices.autoattach_pod_interface == Some(false) {
        return Ok(());
    }
    let has_networks = spec.networks.as_ref().is_some_and(|n| !n.is_empty());
    let has_interfaces = spec
        .domain
        .devices
        .interfaces
        .as_ref()
        .is_some_and(|i| !i.is_empty());
    if has_networks || has_interfaces {
        return Ok(());
    }
    let mut iface = Interface {
        name: "default".into(),
        ..Default::default()
    };
    match settings.default_network_interface.as_str() {
        "bridge" => {
            if !settings.permit_bridge_interface_on_pod_network {
                return Err(DefaultsError::BridgeNotPermitted);
            }
            iface.bridge = Some(Box::new(serde_json::json!({})));
            spec.domain.devices.interfaces = Some(vec![iface]);
        }
        "masquerade" => {
            iface.masquerade = Some(Box::new(serde_json::json!({})));
            spec.domain.devices.interfaces = Some(vec![iface]);
        }
        "slirp" => return Err(DefaultsError::SlirpDeprecated),
        // Any other value: KubeVirt adds no interface but still adds the pod network.
        _ => {}
    }
    spec.networks = Some(vec![Network {
        name: "default".into(),
        pod: Some(Box::new(serde_json::json!({}))),
        ..Default::default()
    }]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::vmi::ResourceRequirements;

    fn spec(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> VirtualMachineInstanceSpec {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect()
        };
        let mut s = VirtualMachineInstanceSpec::default();
        s.domain.resources = Some(ResourceRequirements {
            requests: Some(map(requests)),
            limits: Some(map(limits)),
            ..Default::default()
        });
        s
    }

    #[test]
    fn topology_from_limit_then_request_then_one() {
        let mut s = spec(&[("cpu", "3")], &[("cpu", "5")]);
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        let cpu = s.domain.cpu.unwrap();
        assert_eq!(
            (cpu.sockets, cpu.cores, cpu.threads),
            (Some(5), Some(1), Some(1))
        );
        let mut s = spec(&[("cpu", "1500m")], &[]);
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        assert_eq!(s.domain.cpu.unwrap().sockets, Some(2));
        let mut s = VirtualMachineInstanceSpec::default();
        let arm = AdmissionSettings {
            architecture: "arm64".into(),
            ..Default::default()
        };
        apply_admission_defaults(&mut s, &arm).unwrap();
        assert_eq!(s.domain.cpu.unwrap().sockets, Some(1));
        assert_eq!(s.architecture.as_deref(), Some("arm64"));
    }

    #[test]
    fn cpu_request_from_limit_and_guest_from_request() {
        let mut s = spec(&[("memory", "1Gi")], &[("cpu", "4")]);
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        let res = s.domain.resources.as_ref().unwrap();
        assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "4");
        assert_eq!(s.domain.memory.unwrap().guest.unwrap().0, "1Gi");
        // An existing guest and topology are kept.
        let mut s = spec(&[("memory", "1Gi")], &[]);
        s.domain.memory = Some(Memory {
            guest: Some(Quantity("2Gi".into())),
            ..Default::default()
        });
        s.domain.cpu = Some(Cpu {
            cores: Some(2),
            ..Default::default()
        });
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        assert_eq!(s.domain.memory.unwrap().guest.unwrap().0, "2Gi");
        assert_eq!(s.domain.cpu.unwrap().sockets, None);
    }

    /// v1.6.0 pkg/defaults/defaults.go:317-349 (and its unit tests in
    /// pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator_test.go, removed by PR 15896):
    /// the limit becomes the request; without one, memory.guest or the hugepage size × 100 /
    /// overcommit. From v1.6.4 / v1.7 the VMI keeps no memory request.
    #[test]
    fn memory_request_from_admission_up_to_v1_6() {
        let at = |v: KubeVirtVersion, overcommit: u32| AdmissionSettings {
            kubevirt_version: v,
            memory_overcommit: overcommit,
            ..Default::default()
        };
        let request = |s: &VirtualMachineInstanceSpec| {
            s.domain
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory"))
                .map(|q| q.0.clone())
        };
        let guest = |g: &str, page: Option<&str>| {
            let mut s = VirtualMachineInstanceSpec::default();
            s.domain.memory = Some(Memory {
                guest: (!g.is_empty()).then(|| Quantity(g.into())),
                hugepages: page
                    .map(|p| serde_json::from_value(serde_json::json!({"pageSize": p})).unwrap()),
                ..Default::default()
            });
            s
        };
        let mut s = guest("1Gi", None);
        apply_admission_defaults(&mut s, &at(KubeVirtVersion::V1_6, 100)).unwrap();
        assert_eq!(request(&s).as_deref(), Some("1Gi"));
        let mut s = guest("1Gi", None);
        apply_admission_defaults(&mut s, &at(KubeVirtVersion::V1_6, 150)).unwrap();
        assert_eq!(request(&s), Some(((1i64 << 30) * 100 / 150).to_string()));
        // Hugepage size when there is no guest; setGuestMemory then copies the scaled request.
        let mut s = guest("", Some("1Gi"));
        apply_admission_defaults(&mut s, &at(KubeVirtVersion::V1_5, 200)).unwrap();
        assert_eq!(request(&s).as_deref(), Some("512Mi"));
        assert_eq!(s.domain.memory.unwrap().guest.unwrap().0, "512Mi");
        // The limit when the request is missing.
        let mut s = spec(&[], &[("memory", "2Gi")]);
        apply_admission_defaults(&mut s, &at(KubeVirtVersion::V1_6, 150)).unwrap();
        assert_eq!(request(&s).as_deref(), Some("2Gi"));
        // Nothing to copy: no request is invented, no empty map either.
        let mut s = VirtualMachineInstanceSpec::default();
        apply_admission_defaults(&mut s, &at(KubeVirtVersion::V1_6, 150)).unwrap();
        assert!(s.domain.resources.is_none());
        // From v1.6.4 (PR 15896 backported) and v1.7 virt-api leaves the request unset.
        for v in [
            KubeVirtVersion::V1_6_4,
            KubeVirtVersion::V1_7,
            KubeVirtVersion::V1_9,
            KubeVirtVersion::Main,
        ] {
            let mut s = guest("1Gi", None);
            apply_admission_defaults(&mut s, &at(v, 150)).unwrap();
            assert_eq!(request(&s), None, "{v}");
        }
    }

    #[test]
    fn default_pod_network_like_set_default_network_interface() {
        let mut s = VirtualMachineInstanceSpec::default();
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        let ifaces = s.domain.devices.interfaces.clone().unwrap();
        assert_eq!((ifaces.len(), ifaces[0].name.as_str()), (1, "default"));
        assert!(ifaces[0].bridge.is_some());
        assert!(s.networks.as_ref().unwrap()[0].pod.is_some());

        let masq = AdmissionSettings {
            default_network_interface: "masquerade".into(),
            ..Default::default()
        };
        let mut s = VirtualMachineInstanceSpec::default();
        apply_admission_defaults(&mut s, &masq).unwrap();
        assert!(s.domain.devices.interfaces.unwrap()[0].masquerade.is_some());

        let mut s = VirtualMachineInstanceSpec::default();
        s.domain.devices.autoattach_pod_interface = Some(false);
        apply_admission_defaults(&mut s, &AdmissionSettings::default()).unwrap();
        assert!(s.domain.devices.interfaces.is_none() && s.networks.is_none());

        let no_bridge = AdmissionSettings {
            permit_bridge_interface_on_pod_network: false,
            ..Default::default()
        };
        let mut s = VirtualMachineInstanceSpec::default();
        assert_eq!(
            apply_admission_defaults(&mut s, &no_bridge),
            Err(DefaultsError::BridgeNotPermitted)
        );
    }
}
