//! VMI traits: the questions KubeVirt asks of a VMI spec in many places (`vmi.IsCPUDedicated()`,
//! `util.IsSEVVMI`, `hardware.GetNumberOfVCPUs`, ...), answered once, as methods on the API types.
//!
//! `WantsToHaveQOSGuaranteed` needs parsed quantities and lives on
//! [`VmiResources`](crate::api::resources::VmiResources::wants_guaranteed_qos).

use crate::api::vmi::{Cpu, VirtualMachineInstance, VirtualMachineInstanceSpec};
use serde_json::Value;

impl VirtualMachineInstance {
    /// `status.volumeStatus`, parsed from the kept text ([`crate::api::JsonList`]); none when
    /// unset.
    pub fn volume_status_entries(&self) -> Vec<Value> {
        let list = self.status.as_ref().and_then(|s| s.volume_status.as_ref());
        list.map(crate::api::JsonList::entries).unwrap_or_default()
    }

    /// `status.interfaces`, parsed from the kept text; none when unset.
    pub fn interface_status_entries(&self) -> Vec<Value> {
        let list = self.status.as_ref().and_then(|s| s.interfaces.as_ref());
        list.map(crate::api::JsonList::entries).unwrap_or_default()
    }
}

impl Cpu {
    /// `hardware.GetNumberOfVCPUs` (pkg/util/hardware/hw_utils.go:87-104): cores × sockets ×
    /// threads with zero factors skipped; uint32 arithmetic (wrapping, as in Go).
    pub(crate) fn vcpus(&self) -> i64 {
        let mut n: u32 = self.cores.unwrap_or(0);
        for f in [self.sockets.unwrap_or(0), self.threads.unwrap_or(0)] {
            if f != 0 {
                n = if n == 0 { f } else { n.wrapping_mul(f) };
            }
        }
        i64::from(n)
    }
}

impl VirtualMachineInstanceSpec {
    /// `domain.devices.interfaces`, none when unset.
    pub(crate) fn interfaces(&self) -> &[crate::api::vmi::Interface] {
        self.domain
            .devices
            .interfaces
            .as_deref()
            .unwrap_or_default()
    }

    /// `vmi.IsCPUDedicated()`: `domain.cpu.dedicatedCpuPlacement`
    /// (staging/src/kubevirt.io/api/core/v1/types.go:568-570).
    pub(crate) fn is_cpu_dedicated(&self) -> bool {
        self.domain
            .cpu
            .as_ref()
            .and_then(|c| c.dedicated_cpu_placement)
            .unwrap_or(false)
    }

    /// `domain.cpu.model`, `""` when unset.
    pub(crate) fn cpu_model(&self) -> &str {
        self.domain
            .cpu
            .as_ref()
            .and_then(|c| c.model.as_deref())
            .unwrap_or_default()
    }

    /// `domain.memory.hugepages` is set (`util.HasHugePages`, pkg/util/util.go).
    pub(crate) fn has_hugepages(&self) -> bool {
        self.domain
            .memory
            .as_ref()
            .is_some_and(|m| m.hugepages.is_some())
    }

    /// `domain.memory.hugepages.pageSize`, if set.
    pub(crate) fn hugepage_size(&self) -> Option<&str> {
        self.domain
            .memory
            .as_ref()
            .and_then(|m| m.hugepages.as_ref())
            .and_then(|h| h.page_size.as_deref())
    }

    /// `ioThreads.supplementalPoolThreadCount`, whatever the policy (`getIOThreadsCount`,
    /// renderresources.go:120-126); 0 when unset.
    pub(crate) fn supplemental_io_threads(&self) -> i64 {
        self.domain
            .io_threads
            .as_ref()
            .and_then(|t| t.supplemental_pool_thread_count)
            .map(i64::from)
            .unwrap_or(0)
    }

    /// Interfaces exist, or the pod interface is auto-attached (`RequiresTunDevice`,
    /// pkg/network/vmispec/devices.go:30-34).
    pub(crate) fn requires_tun(&self) -> bool {
        let d = &self.domain.devices;
        d.interfaces.as_ref().is_some_and(|i| !i.is_empty())
            || d.autoattach_pod_interface != Some(false)
    }

    /// Some interface has model "" or `virtio` (`hasVirtioIface`,
    /// pkg/network/vmispec/interface.go:174-181).
    pub(crate) fn has_virtio_iface(&self) -> bool {
        self.domain
            .devices
            .interfaces
            .as_ref()
            .is_some_and(|ifaces| {
                ifaces
                    .iter()
                    .any(|i| matches!(i.model.as_deref(), None | Some("") | Some("virtio")))
            })
    }

    /// `devices.autoattachVSOCK: true` (`util.IsAutoAttachVSOCK`).
    pub(crate) fn autoattach_vsock(&self) -> bool {
        self.domain.devices.autoattach_vsock == Some(true)
    }

    /// `launchSecurity.sev` or `.snp` (`IsSEVVMI`, pkg/util/amd64.go:22-27).
    pub(crate) fn is_sev(&self) -> bool {
        self.domain
            .launch_security
            .as_ref()
            .is_some_and(|l| l.sev.is_some() || l.snp.is_some())
    }

    /// `launchSecurity.tdx` (`IsTDXVMI`).
    pub(crate) fn is_tdx(&self) -> bool {
        self.domain
            .launch_security
            .as_ref()
            .is_some_and(|l| l.tdx.is_some())
    }

    /// A `lun` disk with `reservation: true` (`HasVMIPersistentReservation`,
    /// pkg/storage/reservation/pr.go:62-73).
    pub(crate) fn has_persistent_reservation(&self) -> bool {
        self.domain.devices.disks.as_ref().is_some_and(|disks| {
            disks.iter().any(|d| {
                d.extra
                    .field("lun", |l| l.get("reservation")?.as_bool())
                    .unwrap_or(false)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(domain: serde_json::Value) -> VirtualMachineInstanceSpec {
        serde_json::from_value(json!({ "domain": domain })).unwrap()
    }

    #[test]
    fn vcpus_skip_zero_factors_and_wrap_like_go() {
        let cpu = |c: serde_json::Value| serde_json::from_value::<Cpu>(c).unwrap().vcpus();
        assert_eq!(cpu(json!({"cores": 2, "sockets": 3, "threads": 2})), 12);
        assert_eq!(cpu(json!({"sockets": 2, "threads": 2})), 4);
        assert_eq!(cpu(json!({"cores": 0, "threads": 0})), 0);
        assert_eq!(
            cpu(json!({"cores": u32::MAX, "sockets": 2})),
            i64::from(u32::MAX.wrapping_mul(2))
        );
    }

    #[test]
    fn traits_read_the_spec_like_kubevirt() {
        let plain = spec(json!({}));
        assert!(!plain.is_cpu_dedicated() && !plain.has_hugepages());
        assert!(plain.requires_tun(), "autoattachPodInterface unset");
        assert!(!plain.has_virtio_iface() && !plain.autoattach_vsock());
        assert!(!plain.is_sev() && !plain.is_tdx() && !plain.has_persistent_reservation());
        assert_eq!(plain.supplemental_io_threads(), 0);
        let s = spec(json!({
            "cpu": {"dedicatedCpuPlacement": true},
            "memory": {"hugepages": {"pageSize": "2Mi"}},
            "ioThreads": {"supplementalPoolThreadCount": 3},
            "launchSecurity": {"snp": {}},
            "devices": {"autoattachPodInterface": false, "autoattachVSOCK": true,
                "interfaces": [{"name": "a", "model": "e1000"}],
                "disks": [{"name": "d", "lun": {"reservation": true}}]}}));
        assert!(s.is_cpu_dedicated() && s.has_hugepages() && s.autoattach_vsock());
        assert_eq!(s.hugepage_size(), Some("2Mi"));
        assert_eq!(plain.hugepage_size(), None);
        assert_eq!(plain.cpu_model(), "");
        assert_eq!(
            spec(json!({"cpu": {"model": "Conroe"}})).cpu_model(),
            "Conroe"
        );
        assert!(s.requires_tun(), "an interface is listed");
        assert!(!s.has_virtio_iface(), "e1000 only");
        assert!(s.is_sev() && !s.is_tdx() && s.has_persistent_reservation());
        assert_eq!(s.supplemental_io_threads(), 3);
        assert!(!spec(json!({"devices": {"autoattachPodInterface": false}})).requires_tun());
        assert!(spec(json!({"devices": {"interfaces": [{"name": "a"}]}})).has_virtio_iface());
        assert!(spec(json!({"launchSecurity": {"tdx": {}}})).is_tdx());
    }
}
