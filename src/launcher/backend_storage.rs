//! Backend storage in the launcher pod: the `vm-state` claim holding a VMI's persistent TPM,
//! persistent EFI variables and changed-block-tracking state. KubeVirt v1.9.0:
//! pkg/storage/backend-storage/backend-storage.go (what needs it, the claim's names) and
//! `withBackendStorage` (pkg/virt-controller/services/rendervolumes.go:386-463).
//!
//! The claim itself is created and waited for by the VMI controller
//! (`crate::controller::vmi::backend_storage`); the renderer gets its name through
//! [`super::NamespaceContext::backend_storage_claim`].

use crate::api::vmi::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, Volume, VolumeMount,
};

/// `util.VirtPrivateDir` (pkg/util/util.go:26).
const VIRT_PRIVATE_DIR: &str = "/var/run/kubevirt-private";

/// The pod volumes and compute mounts [`with_backend_storage`] adds.
#[derive(Debug, Default)]
pub(crate) struct StateVolumes {
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
}

fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

/// `PVCPrefix` (backend-storage.go:51): the claims' name prefix and the label naming their VMI.
pub const PVC_PREFIX: &str = "persistent-state-for";
/// `PVCSize` (backend-storage.go:52): what the claim requests.
pub const PVC_SIZE: &str = "10Mi";
/// `VolumeName` (backend-storage.go:53): the claim's entry in `status.volumeStatus`.
pub const STATUS_VOLUME_NAME: &str = "persistent-state-for-this-vm";
/// The pod volume (rendervolumes.go:392).
pub const POD_VOLUME: &str = "vm-state";

/// `basePVC` (backend-storage.go:56-58): `persistent-state-for-<VMI name>`, the legacy claim
/// name and the `generateName` stem of new claims.
pub fn base_claim_name(vmi: &VirtualMachineInstance) -> String {
    format!(
        "{PVC_PREFIX}-{}",
        vmi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `tpm.HasPersistentDevice` (pkg/tpm/tpm.go:5-14): a TPM that is not disabled and is
/// `persistent: true`.
pub fn has_persistent_tpm(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .devices
        .tpm
        .as_ref()
        .is_some_and(|t| t.enabled != Some(false) && t.persistent == Some(true))
}

/// `HasPersistentEFI` (backend-storage.go:277-283):
/// `firmware.bootloader.efi.persistent: true`.
pub fn has_persistent_efi(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec.domain.firmware.as_ref().is_some_and(|f| {
        f.extra
            .field("bootloader", |b| b.pointer("/efi/persistent")?.as_bool())
            == Some(true)
    })
}

/// `cbt.HasCBTStateEnabled` (pkg/storage/cbt/cbt.go:59-79): `status.changedBlockTracking.state`
/// is `Initializing` or `Enabled`.
fn has_cbt_state(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .is_some_and(|s| cbt_state_enabled(&s.extra))
}

/// `HasCBTStateEnabled` on the unmodelled fields of a VM's or VMI's status: its
/// `changedBlockTracking.state` is `Initializing` or `Enabled` (pkg/storage/cbt/cbt.go:59-79).
pub(crate) fn cbt_state_enabled(status: &crate::api::common::Extra) -> bool {
    status.read(|m| {
        matches!(
            m.get("changedBlockTracking")
                .and_then(|c| c.get("state"))
                .and_then(|s| s.as_str()),
            Some("Initializing" | "Enabled")
        )
    })
}

/// `IsBackendStorageNeeded` for a VMI (backend-storage.go:285-309): a persistent TPM, a
/// persistent EFI, or changed-block tracking initialising or enabled.
pub fn is_needed(vmi: &VirtualMachineInstance) -> bool {
    has_persistent_tpm(vmi) || has_persistent_efi(vmi) || has_cbt_state(vmi)
}

fn state_mount(path: String, sub: &str) -> VolumeMount {
    VolumeMount {
        name: POD_VOLUME.into(),
        mount_path: path,
        sub_path: Some(sub.into()),
        // `ReadOnly: false` is omitted on the wire (omitempty).
        ..Default::default()
    }
}

/// `withBackendStorage` (rendervolumes.go:386-463): the `vm-state` claim volume, its `meta`
/// mount, for a non-root VMI the `private-libvirt` / `private-libvirt-qemu` emptyDirs under
/// the private dir, then the `swtpm` / `swtpm-localca` (persistent TPM), `nvram` (persistent
/// EFI) and `cbt` sub-path mounts at the paths of pkg/util/util.go:193-218 and cbt.go:304-310.
/// Nothing when the VMI needs no backend storage.
pub(crate) fn with_backend_storage(
    out: &mut StateVolumes,
    vmi: &VirtualMachineInstance,
    claim: &str,
    non_root: bool,
) {
    if !is_needed(vmi) {
        return;
    }
    out.volumes.push(Volume {
        name: POD_VOLUME.into(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: None,
        }),
        ..Default::default()
    });
    out.mounts.push(state_mount(
        format!("{VIRT_PRIVATE_DIR}/backend-storage-meta"),
        "meta",
    ));
    let (root, private) = ("/var/lib", format!("{VIRT_PRIVATE_DIR}/libvirt/qemu"));
    if non_root {
        out.volumes.push(empty_dir("private-libvirt"));
        out.volumes.push(empty_dir("private-libvirt-qemu"));
        out.mounts.push(mount(
            "private-libvirt",
            &format!("{VIRT_PRIVATE_DIR}/libvirt"),
        ));
        out.mounts.push(mount("private-libvirt-qemu", &private));
    }
    let pick = |root_path: String, non_root_path: String| {
        if non_root { non_root_path } else { root_path }
    };
    if has_persistent_tpm(vmi) {
        out.mounts.push(state_mount(
            pick(format!("{root}/libvirt/swtpm"), format!("{private}/swtpm")),
            "swtpm",
        ));
        out.mounts.push(state_mount(
            pick(
                format!("{root}/swtpm-localca"),
                format!("{VIRT_PRIVATE_DIR}/var/lib/swtpm-localca"),
            ),
            "swtpm-localca",
        ));
    }
    if has_persistent_efi(vmi) {
        out.mounts.push(state_mount(
            pick(
                format!("{root}/libvirt/qemu/nvram"),
                format!("{private}/nvram"),
            ),
            "nvram",
        ));
    }
    if has_cbt_state(vmi) {
        out.mounts.push(state_mount(
            pick(format!("{root}/libvirt/qemu/cbt"), format!("{private}/cbt")),
            "cbt",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(spec: serde_json::Value, status: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance", "metadata": {"name": "vm1", "namespace": "ns"},
            "spec": spec, "status": status}))
        .unwrap()
    }

    /// backend-storage_test.go's `IsBackendStorageNeeded` cases, re-derived: a TPM that is
    /// persistent (and not disabled), a persistent EFI, CBT Initializing/Enabled.
    #[test]
    fn what_needs_backend_storage() {
        let s = json!({});
        for (case, spec, status, needed) in [
            ("nothing", json!({"domain": {}}), s.clone(), false),
            (
                "TPM not persistent",
                json!({"domain": {"devices": {"tpm": {}}}}),
                s.clone(),
                false,
            ),
            (
                "persistent TPM",
                json!({"domain": {"devices": {"tpm": {"persistent": true}}}}),
                s.clone(),
                true,
            ),
            (
                "persistent TPM, disabled",
                json!({"domain": {"devices": {"tpm": {"persistent": true, "enabled": false}}}}),
                s.clone(),
                false,
            ),
            (
                "persistent EFI",
                json!({"domain": {"firmware": {"bootloader": {"efi": {"persistent": true}}}}}),
                s.clone(),
                true,
            ),
            (
                "EFI not persistent",
                json!({"domain": {"firmware": {"bootloader": {"efi": {}}}}}),
                s.clone(),
                false,
            ),
            (
                "CBT enabled",
                json!({"domain": {}}),
                json!({"changedBlockTracking": {"state": "Enabled"}}),
                true,
            ),
            (
                "CBT disabled",
                json!({"domain": {}}),
                json!({"changedBlockTracking": {"state": "Disabled"}}),
                false,
            ),
        ] {
            assert_eq!(is_needed(&vmi(spec, status)), needed, "{case}");
        }
    }

    /// rendervolumes.go:386-463 for a non-root VMI with a persistent TPM and EFI: the claim
    /// volume, two emptyDirs, and the meta/swtpm/swtpm-localca/nvram sub-path mounts.
    #[test]
    fn the_state_volume_and_mounts() {
        let v = vmi(
            json!({"domain": {"devices": {"tpm": {"persistent": true}},
                "firmware": {"bootloader": {"efi": {"persistent": true}}}}}),
            json!({}),
        );
        let mut out = StateVolumes::default();
        with_backend_storage(&mut out, &v, "persistent-state-for-vm1-x7k2p", true);
        assert_eq!(
            serde_json::to_value(&out.volumes).unwrap(),
            json!([
                {"name": "vm-state", "persistentVolumeClaim":
                    {"claimName": "persistent-state-for-vm1-x7k2p"}},
                {"name": "private-libvirt", "emptyDir": {}},
                {"name": "private-libvirt-qemu", "emptyDir": {}},
            ])
        );
        let m = |name: &str, path: &str, sub: Option<&str>| {
            let mut v = json!({"name": name, "mountPath": path});
            if let Some(sub) = sub {
                v["subPath"] = json!(sub);
            }
            v
        };
        assert_eq!(
            serde_json::to_value(&out.mounts).unwrap(),
            json!([
                m(
                    "vm-state",
                    "/var/run/kubevirt-private/backend-storage-meta",
                    Some("meta")
                ),
                m("private-libvirt", "/var/run/kubevirt-private/libvirt", None),
                m(
                    "private-libvirt-qemu",
                    "/var/run/kubevirt-private/libvirt/qemu",
                    None
                ),
                m(
                    "vm-state",
                    "/var/run/kubevirt-private/libvirt/qemu/swtpm",
                    Some("swtpm")
                ),
                m(
                    "vm-state",
                    "/var/run/kubevirt-private/var/lib/swtpm-localca",
                    Some("swtpm-localca")
                ),
                m(
                    "vm-state",
                    "/var/run/kubevirt-private/libvirt/qemu/nvram",
                    Some("nvram")
                ),
            ])
        );
        // Root: no emptyDirs, the host-style paths (util.go:193-218).
        let mut out = StateVolumes::default();
        with_backend_storage(&mut out, &v, "c", false);
        let paths: Vec<&str> = out.mounts.iter().map(|m| m.mount_path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/var/run/kubevirt-private/backend-storage-meta",
                "/var/lib/libvirt/swtpm",
                "/var/lib/swtpm-localca",
                "/var/lib/libvirt/qemu/nvram"
            ]
        );
        // Not needed: nothing.
        let mut out = StateVolumes::default();
        with_backend_storage(&mut out, &vmi(json!({"domain": {}}), json!({})), "c", true);
        assert!(out.volumes.is_empty() && out.mounts.is_empty());
    }
}
