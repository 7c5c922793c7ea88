//! Containers of the virt-launcher pod other than their resources: the `compute` container's
//! security context, probes and ports, the `guest-console-log` native sidecar and the
//! container-disk (init) containers.
//!
//! KubeVirt v1.9.0 sources: pkg/virt-controller/services/rendercontainer.go (ContainerSpecRenderer),
//! serialconsolelog.go, template.go (`copyProbe`, `wrapGuestAgentPingWithVirtProbe`,
//! `newInitContainerRenderer`), pkg/container-disk/container-disk.go.

use super::error::RenderError;
use super::resources::{SUPPORT_CONTAINER_DISK, SUPPORT_GUEST_CONSOLE_LOG, Support};
use super::volumes::{
    CONTAINER_BINARY_DIR, CONTAINER_DISKS, LAUNCHER_VOLUME, VIRT_BIN_SHARE_DIR, VIRT_PRIVATE_DIR,
    container_disk_mount_dir, mount,
};
use crate::api::vmi::{Probe as VmiProbe, VirtualMachineInstance};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, ExecAction, HTTPGetAction, Probe,
    ResourceRequirements, SecurityContext, TCPSocketAction, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// `util.NonRootUID`: the qemu user.
pub const NON_ROOT_UID: i64 = 107;
/// Seconds added to custom probes' initial delay (`LibvirtStartupDelay`, template.go:108).
pub const LIBVIRT_STARTUP_DELAY: i32 = 10;
/// Name of the container that runs the guest (`compute`).
pub const COMPUTE: &str = "compute";

/// The `compute` container of a virt-launcher pod.
pub(crate) fn compute_container(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == COMPUTE)
}

/// A `compute` container quantity in whole units (bytes for memory): `side` is `requests` or
/// `limits`; `None` when absent or unparseable.
pub fn compute_quantity(
    pod: &k8s_openapi::api::core::v1::Pod,
    side: &str,
    name: &str,
) -> Option<i64> {
    let r = compute_container(pod)?.resources.as_ref()?;
    let m = if side == "limits" {
        r.limits.as_ref()
    } else {
        r.requests.as_ref()
    }?;
    crate::api::quantity::ParsedQuantity::parse(&m.get(name)?.0)
        .ok()
        .map(|q| q.value())
}

/// Container name of the serial console log sidecar.
pub const GUEST_CONSOLE_LOG: &str = "guest-console-log";
/// Env var carrying the launcher log verbosity.
pub const ENV_VIRT_LAUNCHER_LOG_VERBOSITY: &str = "VIRT_LAUNCHER_LOG_VERBOSITY";

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        value_from: None,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
        .collect()
}

/// `securityContext(userId, caps)` (rendercontainer.go:207-221): `runAsUser`, `runAsNonRoot`,
/// and for non-root also `runAsGroup` and `allowPrivilegeEscalation: false`.
pub(crate) fn security_context(user_id: i64, caps: Option<Capabilities>) -> SecurityContext {
    let non_root = user_id != 0;
    SecurityContext {
        run_as_user: Some(user_id),
        run_as_non_root: Some(non_root),
        run_as_group: non_root.then_some(user_id),
        allow_privilege_escalation: non_root.then_some(false),
        capabilities: caps,
        ..Default::default()
    }
}

/// The `compute` container's capabilities: add `NET_BIND_SERVICE` (+ `SYS_NICE` as root), drop
/// `ALL` when non-root (rendercontainer.go:96-122, 285-295).
pub(crate) fn compute_capabilities(non_root: bool) -> Capabilities {
    let mut add = vec!["NET_BIND_SERVICE".to_string()];
    if !non_root {
        add.push("SYS_NICE".into());
    }
    Capabilities {
        add: Some(add),
        drop: non_root.then(|| vec!["ALL".to_string()]),
    }
}

/// `XDG_CACHE_HOME`, `XDG_CONFIG_HOME`, `XDG_RUNTIME_DIR` for non-root containers
/// (rendercontainer.go:183-200).
pub(crate) fn xdg_env() -> Vec<EnvVar> {
    vec![
        env("XDG_CACHE_HOME", VIRT_PRIVATE_DIR),
        env("XDG_CONFIG_HOME", VIRT_PRIVATE_DIR),
        env("XDG_RUNTIME_DIR", "/var/run"),
    ]
}

/// Container ports from `spec.domain.devices.interfaces[].ports` (protocol defaults to TCP,
/// rendercontainer.go:223-240).
pub(crate) fn container_ports(
    vmi: &VirtualMachineInstance,
    object: &str,
) -> Result<Vec<ContainerPort>, RenderError> {
    let mut out = Vec::new();
    for iface in vmi.spec.domain.devices.interfaces.iter().flatten() {
        let Some(ports) = iface.extra.get("ports").and_then(|p| p.as_array()) else {
            continue;
        };
        for (i, p) in ports.iter().enumerate() {
            let port = p
                .get("port")
                .and_then(|n| n.as_i64())
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| RenderError::Field {
                    vmi: object.to_string(),
                    field: format!(
                        "spec.domain.devices.interfaces[{}].ports[{i}].port",
                        iface.name
                    ),
                    message: format!(
                        "must be a 32-bit integer, found {}",
                        p.get("port").unwrap_or(&serde_json::Value::Null)
                    ),
                })?;
            let protocol = p
                .get("protocol")
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .unwrap_or("TCP");
            out.push(ContainerPort {
                container_port: port,
                name: p
                    .get("name")
                    .and_then(|v| v.as_str())
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
                protocol: Some(protocol.to_string()),
                ..Default::default()
            });
        }
    }
    Ok(out)
}

fn int_field(p: &VmiProbe, key: &str) -> i32 {
    p.extra
        .get(key)
        .and_then(|v| v.as_i64())
        .and_then(|v| i32::try_from(v).ok())
        .unwrap_or(0)
}

/// A VMI probe as the `compute` container's probe: defaults applied (`SetDefaults_Probe`:
/// timeout ≥ 1, period 10, success 1, failure 3), copied (exec/httpGet/tcpSocket only),
/// `initialDelaySeconds + 10`; exec commands wrapped as `virt-probe --domainName <ns>_<name>
/// --timeoutSeconds <t> --command <cmd0> -- <args…>` and guest-agent pings as `virt-probe …
/// --guestAgentPing`, each with timeout + 1 (template.go:1382-1412, rendercontainer.go:242-283).
pub(crate) fn compute_probe(
    vmi: &VirtualMachineInstance,
    p: &VmiProbe,
    field: &str,
    object: &str,
) -> Result<Probe, RenderError> {
    let err = |sub: &str, e: serde_json::Error| RenderError::Field {
        vmi: object.to_string(),
        field: format!("{field}.{sub}"),
        message: e.to_string(),
    };
    let at_least = |v: i32, min: i32, default: i32| if v < min { default } else { v };
    let mut timeout = at_least(int_field(p, "timeoutSeconds"), 1, 1);
    let period = at_least(int_field(p, "periodSeconds"), 1, 10);
    let success = at_least(int_field(p, "successThreshold"), 1, 1);
    let failure = at_least(int_field(p, "failureThreshold"), 1, 3);
    let initial = int_field(p, "initialDelaySeconds").saturating_add(LIBVIRT_STARTUP_DELAY);
    let exec: Option<ExecAction> = match &p.exec {
        Some(v) if !v.is_null() => {
            Some(serde_json::from_value((**v).clone()).map_err(|e| err("exec", e))?)
        }
        _ => None,
    };
    let http_get: Option<HTTPGetAction> = match p.extra.get("httpGet") {
        Some(v) if !v.is_null() => {
            Some(serde_json::from_value(v.clone()).map_err(|e| err("httpGet", e))?)
        }
        _ => None,
    };
    let tcp_socket: Option<TCPSocketAction> = match p.extra.get("tcpSocket") {
        Some(v) if !v.is_null() => {
            Some(serde_json::from_value(v.clone()).map_err(|e| err("tcpSocket", e))?)
        }
        _ => None,
    };
    let domain = format!(
        "{}_{}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default()
    );
    let mut exec = exec;
    if p.extra.get("guestAgentPing").is_some_and(|g| !g.is_null()) {
        exec = Some(ExecAction {
            command: Some(vec![
                "virt-probe".into(),
                "--domainName".into(),
                domain,
                "--timeoutSeconds".into(),
                timeout.to_string(),
                "--guestAgentPing".into(),
            ]),
        });
        timeout += 1;
    } else if let Some(e) = exec.as_mut() {
        let original = e.command.clone().unwrap_or_default();
        if let Some((cmd0, args)) = original.split_first()
            && cmd0 != "virt-probe"
        {
            let mut wrapped = vec![
                "virt-probe".to_string(),
                "--domainName".into(),
                domain,
                "--timeoutSeconds".into(),
                timeout.to_string(),
                "--command".into(),
                cmd0.clone(),
                "--".into(),
            ];
            wrapped.extend(args.iter().cloned());
            e.command = Some(wrapped);
            timeout += 1;
        }
    }
    let nz = |v: i32| (v != 0).then_some(v);
    Ok(Probe {
        exec,
        http_get,
        tcp_socket,
        initial_delay_seconds: nz(initial),
        timeout_seconds: nz(timeout),
        period_seconds: nz(period),
        success_threshold: nz(success),
        failure_threshold: nz(failure),
        ..Default::default()
    })
}

/// The `guest-console-log` native sidecar (serialconsolelog.go:16-93): `virt-tail` on
/// `/var/run/kubevirt-private/<uid>/virt-serial0-log`, requests 5m/35M, limits 15m/60M unless
/// `supportContainerResources` sets `guest-console-log`'s (requests = limits for dedicated CPUs
/// or Guaranteed QoS), always non-root 107.
pub(crate) fn console_log_container(
    uid: &str,
    image: &str,
    pull_policy: &str,
    verbosity: u64,
    support: Support<'_>,
) -> Container {
    let limits = support.cpu_memory(SUPPORT_GUEST_CONSOLE_LOG, true, "15m", "60M");
    let requests = if support.guaranteed {
        limits.clone()
    } else {
        support.cpu_memory(SUPPORT_GUEST_CONSOLE_LOG, false, "5m", "35M")
    };
    Container {
        name: GUEST_CONSOLE_LOG.into(),
        image: Some(image.into()),
        image_pull_policy: Some(pull_policy.into()),
        command: Some(strings(&["/usr/bin/virt-tail"])),
        args: Some(vec![
            "--logfile".into(),
            format!("{VIRT_PRIVATE_DIR}/{uid}/virt-serial0-log"),
        ]),
        volume_mounts: Some(vec![VolumeMount {
            read_only: Some(true),
            ..mount("private", VIRT_PRIVATE_DIR)
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: Some(limits),
            claims: None,
        }),
        security_context: Some(restricted_security_context()),
        restart_policy: Some("Always".into()),
        env: Some(vec![env(
            ENV_VIRT_LAUNCHER_LOG_VERBOSITY,
            &verbosity.to_string(),
        )]),
        ..Default::default()
    }
}

/// `getMinimalInitContainerDiskResources` (container-disk.go:445-477): requests 1m / 1M /
/// ephemeral-storage 50M, limits 10m / 40M, cpu and memory overridden by
/// `supportContainerResources`' `container-disk`; dedicated or Guaranteed → cpu and memory
/// requests = limits.
pub(crate) fn container_disk_resources(support: Support<'_>) -> ResourceRequirements {
    let limits = support.cpu_memory(SUPPORT_CONTAINER_DISK, true, "10m", "40M");
    let mut requests = support.cpu_memory(SUPPORT_CONTAINER_DISK, false, "1m", "1M");
    requests.extend(quantities(&[("ephemeral-storage", "50M")]));
    if support.guaranteed {
        requests.extend(limits.clone());
    }
    ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        claims: None,
    }
}

/// Non-root (107), no privilege escalation, all capabilities dropped: the console-log and
/// container-disk containers (template.go, container-disk.go).
fn restricted_security_context() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(NON_ROOT_UID),
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".into()]),
        }),
        ..Default::default()
    }
}

/// ImageVolume mode: the no-op init container that makes the kubelet pull (and report the
/// digest of) a containerDisk image, running the container-disk binary from the launcher image
/// volume (`CreateImageVolumeInitContainer`, container-disk.go:479-503). Named `volume<name>`.
pub(crate) fn image_volume_init_container(
    volume: &str,
    image: &str,
    pull_policy: Option<String>,
    support: Support<'_>,
) -> Container {
    Container {
        name: format!("volume{volume}"),
        image: Some(image.into()),
        image_pull_policy: pull_policy,
        command: Some(vec![format!(
            "{CONTAINER_BINARY_DIR}/usr/bin/container-disk"
        )]),
        args: Some(strings(&["--no-op"])),
        resources: Some(container_disk_resources(support)),
        security_context: Some(restricted_security_context()),
        volume_mounts: Some(vec![VolumeMount {
            read_only: Some(true),
            ..mount(LAUNCHER_VOLUME, CONTAINER_BINARY_DIR)
        }]),
        ..Default::default()
    }
}

/// ImageVolume off: a container serving a containerDisk (`--copy-path <dir>/disk_<i>` or
/// `…/kernel-boot`), or its pre-pull init twin (`volume<name>-init`, `--no-op`)
/// (`generateContainerFromVolume`, container-disk.go:263-325).
pub(crate) fn container_disk_container(
    uid: &str,
    volume: &str,
    image: &str,
    pull_policy: Option<String>,
    target: &str,
    init: bool,
    support: Support<'_>,
) -> Container {
    let dir = container_disk_mount_dir(uid);
    let (name, args) = if init {
        (format!("volume{volume}-init"), strings(&["--no-op"]))
    } else {
        (
            format!("volume{volume}"),
            vec!["--copy-path".into(), format!("{dir}/{target}")],
        )
    };
    Container {
        name,
        image: Some(image.into()),
        image_pull_policy: pull_policy,
        command: Some(strings(&["/usr/bin/container-disk"])),
        args: Some(args),
        volume_mounts: Some(vec![
            mount(CONTAINER_DISKS, &dir),
            mount(VIRT_BIN_SHARE_DIR, "/usr/bin"),
        ]),
        resources: Some(container_disk_resources(support)),
        security_context: Some(restricted_security_context()),
        ..Default::default()
    }
}

/// ImageVolume off: `container-disk-binary`, copying the container-disk binary into the shared
/// `virt-bin-share-dir` (template.go:712-725, 896-909; resources from
/// `initContainerResourceRequirementsForVMI` with `container-disk`, renderresources.go:571-625:
/// requests 10m/1M, limits 100m/40M, or 10m/40M for both when dedicated/Guaranteed, each
/// overridden by `supportContainerResources`' `container-disk`).
pub(crate) fn container_disk_binary_container(
    image: &str,
    pull_policy: &str,
    user_id: i64,
    support: Support<'_>,
) -> Container {
    let (requests, limits) = if support.guaranteed {
        let both = support.cpu_memory(SUPPORT_CONTAINER_DISK, true, "10m", "40M");
        (both.clone(), both)
    } else {
        (
            support.cpu_memory(SUPPORT_CONTAINER_DISK, false, "10m", "1M"),
            support.cpu_memory(SUPPORT_CONTAINER_DISK, true, "100m", "40M"),
        )
    };
    Container {
        name: "container-disk-binary".into(),
        image: Some(image.into()),
        image_pull_policy: Some(pull_policy.into()),
        command: Some(strings(&[
            "/usr/bin/cp",
            "--preserve=all",
            "/usr/bin/container-disk",
            "/init/usr/bin/container-disk",
        ])),
        volume_mounts: Some(vec![mount(VIRT_BIN_SHARE_DIR, "/init/usr/bin")]),
        resources: Some(ResourceRequirements {
            requests: Some(requests),
            limits: Some(limits),
            claims: None,
        }),
        security_context: Some(security_context(
            user_id,
            Some(Capabilities {
                add: None,
                drop: Some(vec!["ALL".into()]),
            }),
        )),
        env: (user_id != 0).then(xdg_env),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}
