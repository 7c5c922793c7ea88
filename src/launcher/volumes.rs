//! Volumes of the virt-launcher pod and the mounts/devices of its `compute` container.
//!
//! KubeVirt v1.9.0: `VolumeRenderer` (pkg/virt-controller/services/rendervolumes.go) configured by
//! `newVolumeRenderer` (template.go:1009-1064). Options are applied in this order, and volumes and
//! mounts appear in that order after the fixed emptyDirs:
//! config volumes (secret / configMap / downwardAPI), VMI volumes (PVC, ephemeral, hostDisk,
//! DataVolume, downwardMetrics, cloud-init secret refs, sysprep), access credentials, image
//! volumes (ImageVolume gate), plugin sockets (Plugins gate), hugepages, hotplug disks (unless
//! `disableHotplug`), the network-info downward API volume (SR-IOV interfaces, binding plugins
//! with `downwardAPI: device-info`), the virtiofs sockets. The hook-sidecar sockets come after
//! the image volumes; the sidecars' ConfigMap and PVC volumes are the pod renderer's
//! (`super::sidecars`), after all of these.
//!
//! The backend-storage claim (`vm-state`, persistent TPM/EFI/CBT state) comes right after the
//! access credentials ([`super::backend_storage`], template.go:969-973).

use super::error::RenderError;
use super::resources::{NamespaceContext, PvcInfo};
use crate::api::vmi::{VirtualMachineInstance, Volume as VmiVolume};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EmptyDirVolumeSource,
    HostPathVolumeSource, ImageVolumeSource, ObjectFieldSelector,
    PersistentVolumeClaimVolumeSource, SecretVolumeSource, Volume, VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;
use std::collections::BTreeSet;

/// `util.VirtPrivateDir`.
pub(crate) const VIRT_PRIVATE_DIR: &str = "/var/run/kubevirt-private";
/// `util.VirtShareDir` (= the controller's `--kubevirt-share-dir`).
pub(crate) const VIRT_SHARE_DIR: &str = "/var/run/kubevirt";
/// `--ephemeral-disk-dir` (application.go:123).
pub(crate) const EPHEMERAL_DISK_DIR: &str = "/var/run/kubevirt-ephemeral-disks";
/// `--container-disk-dir` (application.go:139).
pub(crate) const CONTAINER_DISK_DIR: &str = "/var/run/kubevirt/container-disks";
/// `v1.HotplugDiskDir` (application.go:140).
pub(crate) const HOTPLUG_DISK_DIR: &str = "/var/run/kubevirt/hotplug-disks";
/// `util.VirtImageVolumeDir`: container disks as image volumes.
pub(crate) const IMAGE_VOLUME_DIR: &str = "/var/run/kubevirt-image-volume";
/// `util.VirtKernelBootVolumeDir`.
pub(crate) const KERNEL_BOOT_VOLUME_DIR: &str = "/var/run/kubevirt-kernel-boot";
/// `util.ContainerBinary`: where the launcher image volume is mounted in init containers.
pub(crate) const CONTAINER_BINARY_DIR: &str = "/container-disk-binary";
/// `containerdisk.LauncherVolume`.
pub(crate) const LAUNCHER_VOLUME: &str = "launcher-volume";
/// `containerdisk.KernelBootVolumeName`.
pub(crate) const KERNEL_BOOT_VOLUME: &str = "kernel-boot-volume";
/// `virtBinDir` emptyDir shared with container-disk containers.
pub(crate) const VIRT_BIN_SHARE_DIR: &str = "virt-bin-share-dir";
/// emptyDir holding container disks when ImageVolume is off.
pub(crate) const CONTAINER_DISKS: &str = "container-disks";
/// The emptyDir holding the hook sockets (`hookSidecarSocks`, template.go:76).
pub(crate) const HOOK_SIDECAR_SOCKETS: &str = "hook-sidecar-sockets";
/// Where the hook sockets are mounted (`hooks.HookSocketsSharedDirectory`, hooks.go:30).
pub(crate) const HOOK_SOCKETS_DIR: &str = "/var/run/kubevirt-hooks";
/// The network-info downward-API volume (`downwardapi.NetworkInfoVolumeName`).
pub(crate) const NETWORK_INFO_VOLUME: &str = "network-info-annotation";
/// Where the network-info volume is mounted (`downwardapi.MountPath`).
pub(crate) const NETWORK_INFO_MOUNT: &str = "/etc/podinfo";
/// The emptyDir shared by `compute` and the virtiofsd containers (`virtiofs.VirtioFSContainers`).
pub(crate) const VIRTIOFS_CONTAINERS: &str = "virtiofs-containers";
/// `VirtioFSContainersMountBaseDir`: `/var/run/kubevirt/virtiofs-containers`.
pub(crate) fn virtiofs_containers_dir() -> String {
    format!("{VIRT_SHARE_DIR}/{VIRTIOFS_CONTAINERS}")
}
/// emptyDir for hotplugged disks.
pub(crate) const HOTPLUG_DISKS: &str = "hotplug-disks";
/// Where container-disk containers put their disks when ImageVolume is off:
/// `<ephemeral-disk-dir>/container-disk-data/<VMI UID>` (application.go:694, container-disk.go:67-69).
pub(crate) fn container_disk_mount_dir(uid: &str) -> String {
    format!("{EPHEMERAL_DISK_DIR}/container-disk-data/{uid}")
}

/// What the volume renderer produced.
#[derive(Debug, Default)]
pub(crate) struct RenderedVolumes {
    pub volumes: Vec<Volume>,
    pub mounts: Vec<VolumeMount>,
    pub devices: Vec<VolumeDevice>,
    /// Paths of ReadWriteMany filesystem PVCs (`SHARED_FILESYSTEM_PATHS`).
    pub shared_paths: Vec<String>,
}

/// Which optional volume groups apply (decided by the pod renderer from settings and the VMI).
pub(crate) struct VolumeOptions<'a> {
    pub image_volume: bool,
    /// Any hook sidecar: the `hook-sidecar-sockets` emptyDir (`withSidecarVolumes`).
    pub hook_sidecars: bool,
    pub plugins: bool,
    /// An SR-IOV or device-info binding-plugin interface: the network-info volume.
    pub network_info: bool,
    /// A virtiofs filesystem: the `virtiofs-containers` emptyDir (`withVirioFS`).
    pub virtiofs: bool,
    pub launcher_image: &'a str,
    pub image_pull_policy: &'a str,
    /// The backend-storage claim's name, for a VMI that needs one (`withBackendStorage`).
    pub backend_storage_claim: Option<&'a str>,
    /// `vmitrait.IsNonRoot`: where the backend-storage sub-paths are mounted.
    pub non_root: bool,
}

pub(crate) fn empty_dir(name: &str) -> Volume {
    Volume {
        name: name.to_string(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

pub(crate) fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_string(),
        mount_path: path.to_string(),
        ..Default::default()
    }
}

fn mount_ro(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        read_only: Some(true),
        ..mount(name, path)
    }
}

fn mount_sub_ro(name: &str, path: &str, sub: &str) -> VolumeMount {
    VolumeMount {
        sub_path: Some(sub.to_string()),
        ..mount_ro(name, path)
    }
}

fn str_at<'a>(v: Option<&'a Value>, path: &[&str]) -> Option<&'a str> {
    let mut cur = v?;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

/// Names of volumes that are hotplugged: listed with `hotplugVolume` in `status.volumeStatus`, or
/// a DataVolume/PVC marked `hotpluggable` (rendervolumes.go:338-352).
fn hotplug_volumes(vmi: &VirtualMachineInstance) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for st in vmi.volume_status_entries() {
        if st.get("hotplugVolume").is_some_and(|h| !h.is_null())
            && let Some(name) = st.get("name").and_then(|n| n.as_str())
        {
            set.insert(name.to_string());
        }
    }
    for v in vmi.spec.volumes.iter().flatten() {
        let hot = |c: &Option<crate::api::vmi::ClaimSource>| {
            c.as_ref().is_some_and(|c| {
                c.extra
                    .get("hotpluggable")
                    .and_then(|h| h.as_bool())
                    .unwrap_or(false)
            })
        };
        if hot(&v.data_volume) || hot(&v.persistent_volume_claim) {
            set.insert(v.name.clone());
        }
    }
    set
}

fn extra<'a>(v: &'a VmiVolume, key: &str) -> Option<&'a Value> {
    v.extra.get(key).filter(|x| !x.is_null())
}

/// Render the pod volumes, the compute mounts and the compute volume devices: KubeVirt's
/// volume renderer options, in its order (rendervolumes.go).
pub(crate) fn render_volumes(
    vmi: &VirtualMachineInstance,
    ns: &NamespaceContext,
    opts: &VolumeOptions<'_>,
    object: &str,
) -> Result<RenderedVolumes, RenderError> {
    let mut out = RenderedVolumes::default();
    with_fixed_volumes(&mut out, opts);
    with_vmi_config_volumes(&mut out, vmi, object)?;
    with_vmi_volumes(&mut out, vmi, ns, object)?;
    with_access_credentials(&mut out, vmi);
    if let Some(claim) = opts.backend_storage_claim {
        let mut state = super::backend_storage::StateVolumes::default();
        super::backend_storage::with_backend_storage(&mut state, vmi, claim, opts.non_root);
        out.volumes.extend(state.volumes);
        out.mounts.extend(state.mounts);
    }
    if opts.image_volume {
        with_image_volumes(&mut out, vmi, opts);
    }
    with_support_volumes(&mut out, vmi, opts);
    Ok(out)
}

fn field_error(object: &str, field: String, message: String) -> RenderError {
    RenderError::Field {
        vmi: object.to_string(),
        field,
        message,
    }
}

/// Fixed emptyDirs and mounts (rendervolumes.go:70-97).
fn with_fixed_volumes(out: &mut RenderedVolumes, opts: &VolumeOptions<'_>) {
    for name in [
        "private",
        "public",
        "sockets",
        VIRT_BIN_SHARE_DIR,
        "libvirt-runtime",
        "ephemeral-disks",
    ] {
        out.volumes.push(empty_dir(name));
    }
    out.mounts.push(mount("private", VIRT_PRIVATE_DIR));
    out.mounts.push(mount("public", VIRT_SHARE_DIR));
    out.mounts
        .push(mount("ephemeral-disks", EPHEMERAL_DISK_DIR));
    out.mounts
        .push(mount("libvirt-runtime", "/var/run/libvirt"));
    out.mounts
        .push(mount("sockets", &format!("{VIRT_SHARE_DIR}/sockets")));
    if !opts.image_volume {
        out.volumes.push(empty_dir(CONTAINER_DISKS));
        out.mounts.push(VolumeMount {
            mount_propagation: Some("HostToContainer".into()),
            ..mount(CONTAINER_DISKS, CONTAINER_DISK_DIR)
        });
    }
}

/// `withVMIConfigVolumes` (rendervolumes.go:195-233): volumes for every secret/configMap/
/// downwardAPI volume, mounts only for those referenced by a disk.
fn with_vmi_config_volumes(
    out: &mut RenderedVolumes,
    vmi: &VirtualMachineInstance,
    object: &str,
) -> Result<(), RenderError> {
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    for v in volumes {
        if let Some(s) = extra(v, "secret") {
            out.volumes.push(Volume {
                name: v.name.clone(),
                secret: Some(SecretVolumeSource {
                    secret_name: str_at(Some(s), &["secretName"]).map(str::to_string),
                    optional: s.get("optional").and_then(|o| o.as_bool()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(c) = extra(v, "configMap") {
            out.volumes.push(Volume {
                name: v.name.clone(),
                config_map: Some(ConfigMapVolumeSource {
                    name: str_at(Some(c), &["name"]).unwrap_or_default().to_string(),
                    optional: c.get("optional").and_then(|o| o.as_bool()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(d) = extra(v, "downwardAPI") {
            let items: Option<Vec<DownwardAPIVolumeFile>> = match d.get("fields") {
                Some(f) if !f.is_null() => {
                    Some(serde_json::from_value(f.clone()).map_err(|e| {
                        field_error(
                            object,
                            format!("spec.volumes[{}].downwardAPI.fields", v.name),
                            e.to_string(),
                        )
                    })?)
                }
                _ => None,
            };
            out.volumes.push(Volume {
                name: v.name.clone(),
                downward_api: Some(DownwardAPIVolumeSource {
                    items,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    for disk in vmi.spec.domain.devices.disks.iter().flatten() {
        let Some(v) = volumes.iter().find(|v| v.name == disk.name) else {
            continue;
        };
        if extra(v, "secret").is_some() {
            out.mounts.push(mount_ro(
                &v.name,
                &format!("{VIRT_PRIVATE_DIR}/secret/{}", v.name),
            ));
        }
        if extra(v, "configMap").is_some() {
            out.mounts.push(mount_ro(
                &v.name,
                &format!("{VIRT_PRIVATE_DIR}/config-map/{}", v.name),
            ));
        }
        if extra(v, "downwardAPI").is_some() {
            out.mounts.push(mount_ro(
                &v.name,
                &format!("{VIRT_PRIVATE_DIR}/downwardapi/{}", v.name),
            ));
        }
    }
    Ok(())
}

/// `withVMIVolumes` (rendervolumes.go:144-193): each volume's pod volume and mount, hotplugged
/// volumes excepted.
fn with_vmi_volumes(
    out: &mut RenderedVolumes,
    vmi: &VirtualMachineInstance,
    ns: &NamespaceContext,
    object: &str,
) -> Result<(), RenderError> {
    let hotplug = hotplug_volumes(vmi);
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    for v in volumes.iter().filter(|v| !hotplug.contains(&v.name)) {
        with_vmi_volume(out, v, ns, object)?;
    }
    Ok(())
}

/// One volume of `withVMIVolumes`: a claim (PVC, ephemeral, DataVolume), a host disk, the
/// downward metrics disk, cloud-init and sysprep sources (rendervolumes.go:144-193).
fn with_vmi_volume(
    out: &mut RenderedVolumes,
    v: &VmiVolume,
    ns: &NamespaceContext,
    object: &str,
) -> Result<(), RenderError> {
    if let Some(pvc) = &v.persistent_volume_claim {
        let claim = pvc.claim_name.clone().unwrap_or_default();
        add_pvc(out, ns, &v.name, &claim, object)?;
        let read_only = pvc
            .extra
            .get("readOnly")
            .and_then(|r| r.as_bool())
            .unwrap_or(false);
        out.volumes
            .push(claim_volume(&v.name, claim, read_only.then_some(true)));
    }
    if let Some(eph) = extra(v, "ephemeral") {
        with_ephemeral_volume(out, v, eph, ns, object)?;
    }
    if let Some(hd) = extra(v, "hostDisk") {
        with_host_disk(out, &v.name, hd);
    }
    if let Some(dv) = &v.data_volume {
        let claim = dv.name.clone().unwrap_or_default();
        add_pvc(out, ns, &v.name, &claim, object)?;
        out.volumes.push(claim_volume(&v.name, claim, None));
    }
    if v.downward_metrics.is_some() {
        out.volumes.push(Volume {
            name: v.name.clone(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".into()),
                size_limit: Some(Quantity("1Mi".into())),
            }),
            ..Default::default()
        });
        out.mounts.push(mount(
            &v.name,
            &format!("{VIRT_PRIVATE_DIR}/downwardmetric-disk"),
        ));
    }
    if let Some(ci) = extra(v, "cloudInitNoCloud") {
        cloud_init_secrets(out, &v.name, ci);
    }
    if let Some(sp) = extra(v, "sysprep") {
        out.volumes.push(sysprep_volume(&v.name, sp, object)?);
        out.mounts.push(mount_ro(
            &v.name,
            &format!("{VIRT_PRIVATE_DIR}/sysprep/{}", v.name),
        ));
    }
    if let Some(cd) = extra(v, "cloudInitConfigDrive") {
        cloud_init_secrets(out, &v.name, cd);
    }
    Ok(())
}

fn claim_volume(name: &str, claim: String, read_only: Option<bool>) -> Volume {
    Volume {
        name: name.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only,
        }),
        ..Default::default()
    }
}

/// An `ephemeral` volume: its PVC as the source of the pod volume.
fn with_ephemeral_volume(
    out: &mut RenderedVolumes,
    v: &VmiVolume,
    eph: &Value,
    ns: &NamespaceContext,
    object: &str,
) -> Result<(), RenderError> {
    let source = eph
        .get("persistentVolumeClaim")
        .cloned()
        .unwrap_or_default();
    let claim = str_at(Some(&source), &["claimName"])
        .unwrap_or_default()
        .to_string();
    add_pvc(out, ns, &v.name, &claim, object)?;
    let source: Option<PersistentVolumeClaimVolumeSource> = if source.is_null() {
        None
    } else {
        Some(serde_json::from_value(source).map_err(|e| {
            field_error(
                object,
                format!("spec.volumes[{}].ephemeral.persistentVolumeClaim", v.name),
                e.to_string(),
            )
        })?)
    };
    out.volumes.push(Volume {
        name: v.name.clone(),
        persistent_volume_claim: source,
        ..Default::default()
    });
    Ok(())
}

/// A `hostDisk`: the image's directory from the host, mounted under vmi-disks.
fn with_host_disk(out: &mut RenderedVolumes, volume: &str, hd: &Value) {
    let path = str_at(Some(hd), &["path"]).unwrap_or_default();
    let dir = match path.rfind('/') {
        Some(0) => "/".to_string(),
        Some(i) => path[..i].to_string(),
        None => ".".to_string(),
    };
    let type_ = match str_at(Some(hd), &["type"]) {
        Some("Disk") => "Directory",
        Some("DiskOrCreate") => "DirectoryOrCreate",
        _ => "",
    };
    out.mounts.push(mount(
        volume,
        &format!("{VIRT_PRIVATE_DIR}/vmi-disks/{volume}"),
    ));
    out.volumes.push(Volume {
        name: volume.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: dir,
            type_: Some(type_.to_string()),
        }),
        ..Default::default()
    });
}

/// A `sysprep` volume: its Secret or ConfigMap; one of them must be set.
fn sysprep_volume(volume: &str, sp: &Value, object: &str) -> Result<Volume, RenderError> {
    let set = |key: &str| sp.get(key).is_some_and(|s| !s.is_null());
    if set("secret") {
        Ok(Volume {
            name: volume.to_string(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(
                    str_at(Some(sp), &["secret", "name"])
                        .unwrap_or_default()
                        .to_string(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    } else if set("configMap") {
        Ok(Volume {
            name: volume.to_string(),
            config_map: Some(ConfigMapVolumeSource {
                name: str_at(Some(sp), &["configMap", "name"])
                    .unwrap_or_default()
                    .to_string(),
                ..Default::default()
            }),
            ..Default::default()
        })
    } else {
        Err(field_error(
            object,
            format!("spec.volumes[{volume}].sysprep"),
            "Sysprep must have Secret or ConfigMap reference set".into(),
        ))
    }
}

/// withAccessCredentials (rendervolumes.go:354-384).
fn with_access_credentials(out: &mut RenderedVolumes, vmi: &VirtualMachineInstance) {
    let creds = vmi
        .spec
        .extra
        .get("accessCredentials")
        .and_then(|c| c.as_array());
    for cred in creds.into_iter().flatten() {
        let secret = str_at(
            Some(cred),
            &["sshPublicKey", "source", "secret", "secretName"],
        )
        .or_else(|| {
            str_at(
                Some(cred),
                &["userPassword", "source", "secret", "secretName"],
            )
        })
        .unwrap_or_default();
        if secret.is_empty() {
            continue;
        }
        let name = format!("{secret}-access-cred");
        out.volumes.push(Volume {
            name: name.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        });
        out.mounts.push(mount_ro(
            &name,
            &format!("{VIRT_PRIVATE_DIR}/secret/{name}"),
        ));
    }
}

/// `withImageVolumes` (rendervolumes.go:235-257, 760-820).
fn with_image_volumes(
    out: &mut RenderedVolumes,
    vmi: &VirtualMachineInstance,
    opts: &VolumeOptions<'_>,
) {
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    for (i, v) in volumes.iter().enumerate() {
        if let Some(cd) = &v.container_disk {
            out.volumes.push(Volume {
                name: v.name.clone(),
                image: Some(ImageVolumeSource {
                    reference: Some(cd.image.clone().unwrap_or_default()),
                    pull_policy: cd
                        .extra
                        .get("imagePullPolicy")
                        .and_then(|p| p.as_str())
                        .filter(|p| !p.is_empty())
                        .map(str::to_string),
                }),
                ..Default::default()
            });
            out.mounts
                .push(mount_ro(&v.name, &format!("{IMAGE_VOLUME_DIR}/disk_{i}")));
        }
    }
    let kernel = kernel_boot_container(vmi);
    if let Some(kb) = kernel {
        out.volumes.push(Volume {
            name: KERNEL_BOOT_VOLUME.into(),
            image: Some(ImageVolumeSource {
                reference: Some(str_at(Some(kb), &["image"]).unwrap_or_default().into()),
                pull_policy: str_at(Some(kb), &["imagePullPolicy"])
                    .filter(|p| !p.is_empty())
                    .map(str::to_string),
            }),
            ..Default::default()
        });
        out.mounts
            .push(mount_ro(KERNEL_BOOT_VOLUME, KERNEL_BOOT_VOLUME_DIR));
    }
    // No image digests are known when rendering a fresh pod, so any containerDisk or kernel
    // boot image needs the launcher binary volume (shouldAddLauncherBinaryVolume).
    if volumes.iter().any(|v| v.container_disk.is_some()) || kernel.is_some() {
        out.volumes.push(Volume {
            name: LAUNCHER_VOLUME.into(),
            image: Some(ImageVolumeSource {
                reference: Some(opts.launcher_image.to_string()),
                pull_policy: Some(opts.image_pull_policy.to_string()),
            }),
            ..Default::default()
        });
    }
}

/// The volumes of KubeVirt's optional renderer options: hook sidecars, plugins, hugepages,
/// hotplug, network info, virtiofs.
fn with_support_volumes(
    out: &mut RenderedVolumes,
    vmi: &VirtualMachineInstance,
    opts: &VolumeOptions<'_>,
) {
    // withSidecarVolumes (rendervolumes.go:467-478).
    if opts.hook_sidecars {
        out.volumes.push(empty_dir(HOOK_SIDECAR_SOCKETS));
        out.mounts
            .push(mount(HOOK_SIDECAR_SOCKETS, HOOK_SOCKETS_DIR));
    }

    // withPluginSocketVolume (Alpha gate Plugins).
    if opts.plugins {
        out.volumes.push(empty_dir("kubevirt-plugin-sockets"));
        out.mounts
            .push(mount("kubevirt-plugin-sockets", "/var/run/kubevirt-plugin"));
    }

    // withHugepages (rendervolumes.go:462-492).
    if vmi.spec.has_hugepages() {
        out.volumes.push(Volume {
            name: "hugepages".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("HugePages".into()),
                size_limit: None,
            }),
            ..Default::default()
        });
        out.mounts.push(mount("hugepages", "/dev/hugepages"));
        out.volumes.push(empty_dir("hugetblfs-dir"));
        out.mounts
            .push(mount("hugetblfs-dir", "/dev/hugepages/libvirt/qemu"));
    }

    // withHotplugSupport (rendervolumes.go:494-505).
    if vmi.spec.domain.devices.disable_hotplug != Some(true) {
        out.mounts.push(VolumeMount {
            mount_propagation: Some("HostToContainer".into()),
            ..mount(HOTPLUG_DISKS, HOTPLUG_DISK_DIR)
        });
        out.volumes.push(empty_dir(HOTPLUG_DISKS));
    }

    // Network info for SR-IOV and device-info binding-plugin interfaces (template.go:994-1000;
    // pkg/network/downwardapi).
    if opts.network_info {
        out.mounts
            .push(mount(NETWORK_INFO_VOLUME, NETWORK_INFO_MOUNT));
        out.volumes.push(Volume {
            name: NETWORK_INFO_VOLUME.into(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: "network-info".into(),
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.annotations['kubevirt.io/network-info']".into(),
                        api_version: None,
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    // withVirioFS (rendervolumes.go:491-497).
    if opts.virtiofs {
        let dir = virtiofs_containers_dir();
        out.mounts.push(mount(VIRTIOFS_CONTAINERS, &dir));
        out.volumes.push(empty_dir(VIRTIOFS_CONTAINERS));
    }
}

/// `spec.domain.firmware.kernelBoot.container`, if set (`util.HasKernelBootContainerImage`).
pub(crate) fn kernel_boot_container(vmi: &VirtualMachineInstance) -> Option<&Value> {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.extra.get("kernelBoot"))
        .and_then(|k| k.get("container"))
        .filter(|c| !c.is_null())
}

fn cloud_init_secrets(out: &mut RenderedVolumes, volume: &str, source: &Value) {
    for (key, suffix, lower, camel) in [
        ("userDataSecretRef", "udata", "userdata", "userData"),
        (
            "networkDataSecretRef",
            "ndata",
            "networkdata",
            "networkData",
        ),
    ] {
        let Some(secret) = source.get(key).filter(|s| !s.is_null()) else {
            continue;
        };
        let name = format!("{volume}-{suffix}");
        out.volumes.push(Volume {
            name: name.clone(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(str_at(Some(secret), &["name"]).unwrap_or_default().into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        for sub in [lower, camel] {
            out.mounts.push(mount_sub_ro(
                &name,
                &format!("{VIRT_PRIVATE_DIR}/secret/{volume}/{sub}"),
                sub,
            ));
        }
    }
}

/// `addPVCToLaunchManifest` (rendervolumes.go:501-531): a device for block PVCs, a mount at
/// `/var/run/kubevirt-private/vmi-disks/<volume>` otherwise.
fn add_pvc(
    out: &mut RenderedVolumes,
    ns: &NamespaceContext,
    volume: &str,
    claim: &str,
    object: &str,
) -> Result<(), RenderError> {
    let info = match &ns.pvcs {
        None => PvcInfo::default(),
        Some(pvcs) => pvcs
            .get(claim)
            .cloned()
            .ok_or_else(|| RenderError::PvcNotFound {
                vmi: object.to_string(),
                claim: claim.to_string(),
            })?,
    };
    if info.block {
        out.devices.push(VolumeDevice {
            name: volume.to_string(),
            device_path: format!("/dev/{volume}"),
        });
    } else {
        let path = format!("{VIRT_PRIVATE_DIR}/vmi-disks/{volume}");
        out.mounts.push(mount(volume, &path));
        if info.shared {
            out.shared_paths.push(path);
        }
    }
    Ok(())
}

/// `imgPullSecrets` + kernel boot pull secret (template.go:414-424): unique, in order.
pub(crate) fn image_pull_secrets(vmi: &VirtualMachineInstance) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |s: Option<&str>| {
        if let Some(s) = s.filter(|s| !s.is_empty())
            && !out.iter().any(|o| o == s)
        {
            out.push(s.to_string());
        }
    };
    for v in vmi.spec.volumes.iter().flatten() {
        if let Some(cd) = &v.container_disk {
            push(cd.extra.get("imagePullSecret").and_then(|s| s.as_str()));
        }
    }
    if let Some(kb) = kernel_boot_container(vmi) {
        push(str_at(Some(kb), &["imagePullSecret"]));
    }
    out
}

/// The serviceAccount volume's account name, if any (`ServiceAccountNameFromVolumes`).
pub(crate) fn service_account_volume(vmi: &VirtualMachineInstance) -> Option<String> {
    vmi.spec.volumes.iter().flatten().find_map(|v| {
        v.extra
            .get("serviceAccount")
            .filter(|s| !s.is_null())
            .map(|s| {
                str_at(Some(s), &["serviceAccountName"])
                    .unwrap_or_default()
                    .to_string()
            })
    })
}
