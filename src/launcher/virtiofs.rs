//! The `virtiofs-<volume>` containers: one virtiofsd per volume shared with the guest through
//! `spec.domain.devices.filesystems` (KubeVirt v1.9.0 pkg/virt-controller/services/virtiofs.go,
//! pkg/virtiofs/resources.go, pkg/virtiofs/virtiofs.go).
//!
//! - A container per VMI volume named by a filesystem, in volume order; `containerPath`
//!   volumes are skipped (a pod mutating webhook handles them, virtiofs.go:38-42).
//! - `/usr/libexec/virtiofsd --socket-path=/var/run/kubevirt/virtiofs-containers/<vol>.sock
//!   --shared-dir=<dir> --sandbox=none --cache=auto --migration-on-error=guest-error
//!   --migration-mode=find-paths`, plus `--translate-uid=host:107:0:1` for a serviceAccount
//!   volume (virtiofs.go:77-97). `<dir>` is where the volume is mounted in the container:
//!   `/var/run/kubevirt-private/{config-map,secret,downwardapi}/<vol>` for those sources, the
//!   service account token directory, `/<vol>` otherwise (virtiofs.go:58-72; pkg/config).
//! - Mounts: the `virtiofs-containers` emptyDir at `/var/run/kubevirt/virtiofs-containers`, and
//!   the volume itself except for a serviceAccount (the kubelet mounts that one).
//! - Runs as 107, no privilege escalation, all capabilities dropped; image the launcher's,
//!   pull policy `IfNotPresent`.
//! - Resources (resources.go:30-95): requests 10m / 1M, limits 100m / 80M, each overridden by
//!   the KubeVirt CR's `supportContainerResources` for `virtiofs`; with dedicated CPUs or
//!   Guaranteed QoS the requests equal the limits.

use super::resources::{SUPPORT_VIRTIOFS, Support};
use super::volumes::{VIRT_PRIVATE_DIR, VIRTIOFS_CONTAINERS, mount, virtiofs_containers_dir};
use crate::api::vmi::{VirtualMachineInstance, Volume as VmiVolume};
use k8s_openapi::api::core::v1::{Capabilities, Container, ResourceRequirements, SecurityContext};
use std::collections::BTreeSet;

/// Where the service account token is mounted (`config.ServiceAccountSourceDir`).
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount/";
/// `util.NonRootUID`.
const NON_ROOT_UID: i64 = 107;

/// `util.IsVMIVirtiofsEnabled`: a filesystem with `virtiofs` set.
pub(crate) fn is_enabled(vmi: &VirtualMachineInstance) -> bool {
    filesystems(vmi)
        .iter()
        .any(|f| f.get("virtiofs").is_some_and(|v| !v.is_null()))
}

fn filesystems(vmi: &VirtualMachineInstance) -> &[serde_json::Value] {
    vmi.spec
        .domain
        .devices
        .extra
        .get("filesystems")
        .and_then(|f| f.as_array())
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn has(v: &VmiVolume, source: &str) -> bool {
    v.extra.get(source).is_some_and(|s| !s.is_null())
}

/// `virtioFSMountPoint`: where the volume is mounted in its virtiofsd container.
fn mount_point(v: &VmiVolume) -> String {
    if has(v, "configMap") {
        format!("{VIRT_PRIVATE_DIR}/config-map/{}", v.name)
    } else if has(v, "secret") {
        format!("{VIRT_PRIVATE_DIR}/secret/{}", v.name)
    } else if has(v, "serviceAccount") {
        SERVICE_ACCOUNT_DIR.to_string()
    } else if has(v, "downwardAPI") {
        format!("{VIRT_PRIVATE_DIR}/downwardapi/{}", v.name)
    } else {
        format!("/{}", v.name)
    }
}

/// `ResourcesForVirtioFSContainer` (resources.go:43-95): KubeVirt's defaults or
/// `supportContainerResources`' `virtiofs`; KubeVirt calls it with dedicated CPUs as
/// `dedicatedCPUs` and dedicated-or-Guaranteed as `guaranteedQOS` (services/virtiofs.go:34), so
/// both requests follow the limits exactly when `support.guaranteed`.
fn resources(support: Support<'_>) -> ResourceRequirements {
    let limits = support.cpu_memory(SUPPORT_VIRTIOFS, true, "100m", "80M");
    let requests = if support.guaranteed {
        limits.clone()
    } else {
        support.cpu_memory(SUPPORT_VIRTIOFS, false, "10m", "1M")
    };
    ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        claims: None,
    }
}

/// The virtiofsd containers of `vmi` (`generateVirtioFSContainers`); `guaranteed` is "dedicated
/// CPUs or Guaranteed QoS".
pub(crate) fn containers(
    vmi: &VirtualMachineInstance,
    launcher_image: &str,
    support: Support<'_>,
) -> Vec<Container> {
    let shared: BTreeSet<&str> = filesystems(vmi)
        .iter()
        .filter_map(|f| f.get("name").and_then(|n| n.as_str()))
        .collect();
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| shared.contains(v.name.as_str()) && !has(v, "containerPath"))
        .map(|v| container(v, launcher_image, support))
        .collect()
}

fn container(v: &VmiVolume, image: &str, support: Support<'_>) -> Container {
    let service_account = has(v, "serviceAccount");
    let mut args = vec![
        format!(
            "--socket-path={}/{}.sock",
            virtiofs_containers_dir(),
            v.name
        ),
        format!("--shared-dir={}", mount_point(v)),
        "--sandbox=none".into(),
        "--cache=auto".into(),
        "--migration-on-error=guest-error".into(),
        "--migration-mode=find-paths".into(),
    ];
    if service_account {
        args.push(format!("--translate-uid=host:{NON_ROOT_UID}:0:1"));
    }
    let mut mounts = vec![mount(VIRTIOFS_CONTAINERS, &virtiofs_containers_dir())];
    if !service_account {
        mounts.push(mount(&v.name, &mount_point(v)));
    }
    Container {
        name: format!("virtiofs-{}", v.name),
        image: Some(image.to_string()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec!["/usr/libexec/virtiofsd".into()]),
        args: Some(args),
        volume_mounts: Some(mounts),
        resources: Some(resources(support)),
        security_context: Some(SecurityContext {
            run_as_user: Some(NON_ROOT_UID),
            run_as_group: Some(NON_ROOT_UID),
            run_as_non_root: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                add: None,
                drop: Some(vec!["ALL".into()]),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::test_vmi as vmi;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// KubeVirt's defaults (no `supportContainerResources`).
    fn defaults(guaranteed: bool) -> Support<'static> {
        Support {
            entries: &[],
            guaranteed,
        }
    }

    fn q(r: &Option<BTreeMap<String, Quantity>>, k: &str) -> String {
        r.as_ref().unwrap()[k].0.clone()
    }

    /// virtiofs_test.go ("should create a container per shared volume"): one container per
    /// filesystem volume in volume order, mount points per source, the service account's uid
    /// translation and no mount for it, containerPath skipped.
    #[test]
    fn one_container_per_filesystem_volume() {
        let v = vmi(json!({
            "domain": {"devices": {"filesystems": [
                {"name": "data", "virtiofs": {}}, {"name": "conf", "virtiofs": {}},
                {"name": "sa", "virtiofs": {}}, {"name": "ext", "virtiofs": {}}]}},
            "volumes": [
                {"name": "conf", "configMap": {"name": "app-config"}},
                {"name": "disk", "containerDisk": {"image": "x"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "sa", "serviceAccount": {"serviceAccountName": "default"}},
                {"name": "ext", "containerPath": {"path": "/x"}}]}));
        assert!(is_enabled(&v));
        let cs = containers(&v, "launcher:1", defaults(false));
        let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["virtiofs-conf", "virtiofs-data", "virtiofs-sa"]);
        let args = |i: usize| cs[i].args.clone().unwrap();
        assert_eq!(
            args(1),
            [
                "--socket-path=/var/run/kubevirt/virtiofs-containers/data.sock",
                "--shared-dir=/data",
                "--sandbox=none",
                "--cache=auto",
                "--migration-on-error=guest-error",
                "--migration-mode=find-paths"
            ]
        );
        assert_eq!(
            args(0)[1],
            "--shared-dir=/var/run/kubevirt-private/config-map/conf"
        );
        assert_eq!(
            args(2)[1..],
            [
                "--shared-dir=/var/run/secrets/kubernetes.io/serviceaccount/",
                "--sandbox=none",
                "--cache=auto",
                "--migration-on-error=guest-error",
                "--migration-mode=find-paths",
                "--translate-uid=host:107:0:1"
            ]
        );
        let mounts = |i: usize| -> Vec<(String, String)> {
            cs[i]
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| (m.name.clone(), m.mount_path.clone()))
                .collect()
        };
        let base = (
            "virtiofs-containers".to_string(),
            "/var/run/kubevirt/virtiofs-containers".to_string(),
        );
        assert_eq!(mounts(1), [base.clone(), ("data".into(), "/data".into())]);
        assert_eq!(mounts(2), [base]);
        let sc = cs[0].security_context.clone().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_group, sc.run_as_non_root),
            (Some(107), Some(107), Some(true))
        );
        assert_eq!(cs[0].image.as_deref(), Some("launcher:1"));
    }

    /// resources_test.go: defaults 10m/1M → 100m/80M; Guaranteed (or dedicated) → requests = limits.
    #[test]
    fn resources_follow_qos() {
        let v = vmi(
            json!({"domain": {"devices": {"filesystems": [{"name": "d", "virtiofs": {}}]}},
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        let shared = containers(&v, "l", defaults(false))[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(
            (q(&shared.requests, "cpu"), q(&shared.requests, "memory")),
            ("10m".into(), "1M".into())
        );
        assert_eq!(
            (q(&shared.limits, "cpu"), q(&shared.limits, "memory")),
            ("100m".into(), "80M".into())
        );
        let guaranteed = containers(&v, "l", defaults(true))[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(guaranteed.requests, guaranteed.limits);
    }

    /// resources_test.go with `supportContainerResources` for `virtiofs`: each set quantity
    /// replaces its default; Guaranteed takes the (overridden) limits as requests.
    #[test]
    fn support_container_resources_override_the_defaults() {
        let v = vmi(
            json!({"domain": {"devices": {"filesystems": [{"name": "d", "virtiofs": {}}]}},
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        let entries = [crate::config::SupportContainerResources {
            container_type: "virtiofs".into(),
            requests: BTreeMap::from([("memory".into(), "20M".into())]),
            limits: BTreeMap::from([("cpu".into(), "500m".into())]),
        }];
        let support = |guaranteed| Support {
            entries: &entries,
            guaranteed,
        };
        let r = containers(&v, "l", support(false))[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(
            (q(&r.requests, "cpu"), q(&r.requests, "memory")),
            ("10m".into(), "20M".into())
        );
        assert_eq!(
            (q(&r.limits, "cpu"), q(&r.limits, "memory")),
            ("500m".into(), "80M".into())
        );
        let g = containers(&v, "l", support(true))[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(
            (q(&g.requests, "cpu"), q(&g.requests, "memory")),
            ("500m".into(), "80M".into())
        );
    }

    #[test]
    fn no_filesystems_no_containers() {
        let v = vmi(
            json!({"domain": {"devices": {}}, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}),
        );
        assert!(!is_enabled(&v));
        assert!(containers(&v, "l", defaults(false)).is_empty());
    }
}
