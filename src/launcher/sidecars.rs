//! Hook sidecars of the virt-launcher pod: those the VMI asks for in its
//! `hooks.kubevirt.io/hookSidecars` annotation, then one per network binding plugin with a
//! `sidecarImage` (the two sidecar creators, application.go:713-717), rendered as
//! `hook-sidecar-<i>` containers with their volumes.
//!
//! KubeVirt v1.9.0:
//! - the annotation (pkg/hooks/hooks.go:29-95): a JSON list of `{image, imagePullPolicy,
//!   command, args, configMap: {name, key, hookPath}, pvc: {name, volumePath,
//!   sharedComputePath}}`;
//! - binding plugins (pkg/network/netbinding/netbinding.go:29-70): an interface naming an
//!   unregistered plugin is an error; a plugin with a `sidecarImage` gets a sidecar with the
//!   cluster's image pull policy, its `downwardAPI` and its name in
//!   `NETWORK_BINDING_PLUGIN_NAME`. KubeVirt walks a Go map, so two plugins' sidecars come in
//!   a random order; here in plugin-name order;
//! - the container (`newSidecarContainerRenderer`, template.go:877-923; `sidecarResources`,
//!   renderresources.go:535-569): env `CONTAINER_NAME` (after the XDG variables when
//!   non-root), the sockets mount with the container's name as subPath, the network-info mount
//!   for `device-info`, the ConfigMap mounted at `hookPath` with `key` as subPath, the PVC at
//!   `volumePath`; the resources `supportContainerResources` sets for `sidecar`, none
//!   otherwise, except with dedicated CPUs or Guaranteed QoS (limits 200m / 64M unless set,
//!   requests = limits);
//! - the pod (template.go:578-620, 794): a ConfigMap volume (mode 0755) per ConfigMap hook,
//!   **read while rendering** — a missing ConfigMap fails the render with the GET's error — and
//!   a PVC volume per PVC hook, after every other volume; a `sharedComputePath` mounts the PVC
//!   in `compute` too.
//!
//! Not modelled: an empty `image` takes virt-controller's `SIDECAR_SHIM_IMAGE`, derived here
//! from the launcher image (`…/sidecar-shim:<tag>`).

use super::containers::{security_context, xdg_env};
use super::error::RenderError;
use super::network::{DEVICE_INFO, binding_name};
use super::resources::{NamespaceContext, SUPPORT_SIDECAR, Support};
use super::volumes::{
    HOOK_SIDECAR_SOCKETS, HOOK_SOCKETS_DIR, NETWORK_INFO_MOUNT, NETWORK_INFO_VOLUME, mount,
};
use crate::api::vmi::VirtualMachineInstance;
use crate::config::ClusterSettings;
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, EnvVar, PersistentVolumeClaimVolumeSource,
    ResourceRequirements, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The VMI annotation listing hook sidecars (hooks.go:29).
pub(crate) const HOOK_SIDECARS: &str = "hooks.kubevirt.io/hookSidecars";

/// A ConfigMap hook: `key` of ConfigMap `name` mounted at `hookPath`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookConfigMap {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub hook_path: String,
}

/// A PVC hook: claim `name` mounted at `volumePath` (and at `sharedComputePath` in `compute`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookPvc {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub volume_path: String,
    #[serde(default)]
    pub shared_compute_path: String,
}

/// One requested hook sidecar (`hooks.HookSidecar`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookSidecar {
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub image_pull_policy: String,
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub config_map: Option<HookConfigMap>,
    #[serde(default)]
    pub pvc: Option<HookPvc>,
    /// Not in the annotation: a binding plugin's `downwardAPI`.
    #[serde(skip)]
    pub downward_api: String,
    /// Not in the annotation: the binding plugin the sidecar serves.
    #[serde(skip)]
    pub network_binding_plugin: String,
}

/// The sidecars KubeVirt renders for `vmi`: the annotation's, then the binding plugins'.
pub(crate) fn requested_sidecars(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    object: &str,
) -> Result<Vec<HookSidecar>, RenderError> {
    let mut list = annotation_sidecars(vmi, object)?;
    let mut plugins = BTreeMap::new();
    for iface in vmi.spec.domain.devices.interfaces.iter().flatten() {
        let Some(name) = binding_name(iface) else {
            continue;
        };
        let Some(plugin) = settings.network_bindings.get(name) else {
            return Err(RenderError::Input {
                vmi: object.to_string(),
                message: format!("couldn't find configuration for network binding: {name}"),
            });
        };
        plugins.insert(name.to_string(), plugin);
    }
    for (name, plugin) in plugins {
        if let Some(image) = plugin.sidecar_image.as_deref() {
            list.push(HookSidecar {
                image: image.to_string(),
                // The cluster's `imagePullPolicy` (netbinding.go:64).
                image_pull_policy: settings.image_pull_policy.clone(),
                downward_api: plugin.downward_api.clone().unwrap_or_default(),
                network_binding_plugin: name,
                ..Default::default()
            });
        }
    }
    Ok(list)
}

fn annotation_sidecars(
    vmi: &VirtualMachineInstance,
    object: &str,
) -> Result<Vec<HookSidecar>, RenderError> {
    let Some(text) = vmi
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOOK_SIDECARS))
    else {
        return Ok(Vec::new());
    };
    let list: Option<Vec<HookSidecar>> =
        serde_json::from_str(text).map_err(|e| RenderError::Field {
            vmi: object.to_string(),
            field: format!("metadata.annotations[{HOOK_SIDECARS}]"),
            message: e.to_string(),
        })?;
    Ok(list.unwrap_or_default())
}

/// The ConfigMaps KubeVirt GETs while rendering `vmi` (its ConfigMap hooks), or none when the
/// annotation does not parse (the render fails before any GET).
pub(crate) fn wanted_config_maps(vmi: &VirtualMachineInstance) -> Vec<String> {
    annotation_sidecars(vmi, "")
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.config_map.map(|c| c.name))
        .collect()
}

/// virt-controller's `SIDECAR_SHIM_IMAGE`: the launcher image's repository with `sidecar-shim`
/// as last path element, same tag or digest.
pub(crate) fn sidecar_shim_image(launcher_image: &str) -> String {
    let (repo, rest) = match launcher_image.find(['@']) {
        Some(i) => launcher_image.split_at(i),
        None => match launcher_image.rfind(':') {
            Some(i) if !launcher_image[i..].contains('/') => launcher_image.split_at(i),
            _ => (launcher_image, ""),
        },
    };
    let prefix = repo.rsplit_once('/').map(|(p, _)| format!("{p}/"));
    format!("{}sidecar-shim{rest}", prefix.unwrap_or_default())
}

/// `sidecarResources` (renderresources.go:535-569): the requests and limits
/// `supportContainerResources` sets for `sidecar`; with dedicated CPUs or Guaranteed QoS the
/// limits default to 200m / 64M and the requests equal them.
fn sidecar_resources(support: Support<'_>) -> ResourceRequirements {
    let set = |limit: bool| -> BTreeMap<String, Quantity> {
        ["cpu", "memory"]
            .into_iter()
            .filter_map(|r| {
                let q = if limit {
                    support.limit(SUPPORT_SIDECAR, r)
                } else {
                    support.request(SUPPORT_SIDECAR, r)
                };
                Some((r.to_string(), q?))
            })
            .collect()
    };
    let (requests, limits) = if support.guaranteed {
        let both = support.cpu_memory(SUPPORT_SIDECAR, true, "200m", "64M");
        (both.clone(), both)
    } else {
        (set(false), set(true))
    };
    ResourceRequirements {
        requests: (!requests.is_empty()).then_some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        claims: None,
    }
}

/// The `hook-sidecar-<index>` container (`newSidecarContainerRenderer`).
pub(crate) fn sidecar_container(
    index: usize,
    sidecar: &HookSidecar,
    settings: &ClusterSettings,
    non_root: bool,
    guaranteed: bool,
) -> Container {
    let support = Support {
        entries: &settings.support_container_resources,
        guaranteed,
    };
    let name = format!("hook-sidecar-{index}");
    let user_id = if non_root {
        super::containers::NON_ROOT_UID
    } else {
        0
    };
    let mut env = if non_root { xdg_env() } else { Vec::new() };
    let plain = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    };
    env.push(plain("CONTAINER_NAME", &name));
    if !sidecar.network_binding_plugin.is_empty() {
        env.push(plain(
            "NETWORK_BINDING_PLUGIN_NAME",
            &sidecar.network_binding_plugin,
        ));
    }
    let mut mounts = vec![VolumeMount {
        sub_path: Some(name.clone()),
        ..mount(HOOK_SIDECAR_SOCKETS, HOOK_SOCKETS_DIR)
    }];
    if sidecar.downward_api == DEVICE_INFO {
        mounts.push(mount(NETWORK_INFO_VOLUME, NETWORK_INFO_MOUNT));
    }
    if let Some(cm) = &sidecar.config_map {
        mounts.push(VolumeMount {
            sub_path: Some(cm.key.clone()).filter(|k| !k.is_empty()),
            ..mount(&cm.name, &cm.hook_path)
        });
    }
    if let Some(pvc) = &sidecar.pvc {
        mounts.push(mount(&pvc.name, &pvc.volume_path));
    }
    let image = if sidecar.image.is_empty() {
        sidecar_shim_image(&settings.launcher_image)
    } else {
        sidecar.image.clone()
    };
    let non_empty = |v: &[String]| (!v.is_empty()).then(|| v.to_vec());
    let resources = sidecar_resources(support);
    Container {
        name,
        image: Some(image),
        image_pull_policy: Some(sidecar.image_pull_policy.clone()).filter(|p| !p.is_empty()),
        security_context: Some(security_context(
            user_id,
            non_root.then(|| Capabilities {
                add: None,
                drop: Some(vec!["ALL".into()]),
            }),
        )),
        command: non_empty(&sidecar.command),
        args: non_empty(&sidecar.args),
        volume_mounts: Some(mounts),
        resources: (resources != ResourceRequirements::default()).then_some(resources),
        env: Some(env),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}

/// The pod volumes of the sidecars' ConfigMap and PVC hooks (template.go:583-611), checking
/// each ConfigMap against what the caller read (`ns.lookups`; not read → assumed present).
pub(crate) fn sidecar_volumes(
    sidecars: &[HookSidecar],
    ns: &NamespaceContext,
    object: &str,
) -> Result<Vec<Volume>, RenderError> {
    let mut out = Vec::new();
    for sidecar in sidecars {
        if let Some(cm) = &sidecar.config_map {
            if let Some(lookups) = &ns.lookups {
                let not_found = || Err(format!("configmaps \"{}\" not found", cm.name));
                let read = lookups.config_maps.get(&cm.name).cloned();
                if let Err(message) = read.unwrap_or_else(not_found) {
                    return Err(RenderError::Input {
                        vmi: object.to_string(),
                        message,
                    });
                }
            }
            out.push(Volume {
                name: cm.name.clone(),
                config_map: Some(ConfigMapVolumeSource {
                    name: cm.name.clone(),
                    default_mode: Some(0o755),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(pvc) = &sidecar.pvc {
            out.push(Volume {
                name: pvc.name.clone(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: pvc.name.clone(),
                    read_only: None,
                }),
                ..Default::default()
            });
        }
    }
    Ok(out)
}

/// The `compute` mounts of PVC hooks with a `sharedComputePath` (template.go:611-618).
pub(crate) fn compute_shared_mounts(sidecars: &[HookSidecar]) -> Vec<VolumeMount> {
    sidecars
        .iter()
        .filter_map(|s| s.pvc.as_ref())
        .filter(|p| !p.shared_compute_path.is_empty())
        .map(|p| mount(&p.name, &p.shared_compute_path))
        .collect()
}
