//! The SELinux options of the launcher pod: KubeVirt v1.9.0's `alignPodMultiCategorySecurity`
//! (pkg/virt-controller/services/template.go:748, 1473-1500, 1528-1537).
//!
//! - The KubeVirt CR's `selinuxLauncherType` (empty by default, virt-config.go:82, 278-280),
//!   when set, becomes the pod's `securityContext.seLinuxOptions`, holding only that type and
//!   replacing whatever options the pod had (template.go:1478-1484).
//! - With the deprecated `DockerSELinuxMCSWorkaround` gate listed in the CR (a deprecated gate
//!   still counts when listed: featuregate/feature-gates.go:91-112; inactive.go:57-59, 215),
//!   every container except `compute` gets `seLinuxOptions` with that type (left out when
//!   empty) and level `s0` (template.go:1486-1499, 1528-1537). Init containers are not touched:
//!   the loop walks `pod.Spec.Containers` only.
//!
//! The hotplug attachment pod's container carries the same type beside its level
//! (template.go:1122-1126): see [`super::attachment_pod`].

use crate::config::ClusterSettings;
use k8s_openapi::api::core::v1::{PodSecurityContext, PodSpec, SELinuxOptions, SecurityContext};

/// KubeVirt's feature gate for the Docker + SELinux workaround (inactive.go:59).
pub(crate) const DOCKER_SELINUX_MCS_WORKAROUND: &str = "DockerSELinuxMCSWorkaround";

/// The CR's launcher SELinux type, `None` when unset or empty.
pub(crate) fn launcher_type(settings: &ClusterSettings) -> Option<&str> {
    settings
        .selinux_launcher_type
        .as_deref()
        .filter(|t| !t.is_empty())
}

/// Apply `alignPodMultiCategorySecurity` to a rendered launcher pod spec.
pub(crate) fn align_pod_multi_category_security(spec: &mut PodSpec, settings: &ClusterSettings) {
    let selinux_type = launcher_type(settings);
    // Deprecated (not Beta): off unless listed.
    let workaround = settings.gate_enabled(DOCKER_SELINUX_MCS_WORKAROUND, false);
    if let Some(t) = selinux_type {
        spec.security_context
            .get_or_insert_with(PodSecurityContext::default)
            .se_linux_options = Some(SELinuxOptions {
            type_: Some(t.to_string()),
            ..Default::default()
        });
    }
    if !workaround {
        return;
    }
    for container in spec.containers.iter_mut().filter(|c| c.name != "compute") {
        let options = container
            .security_context
            .get_or_insert_with(SecurityContext::default)
            .se_linux_options
            .get_or_insert_with(SELinuxOptions::default);
        options.type_ = selinux_type.map(str::to_string);
        options.level = Some("s0".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn spec() -> PodSpec {
        let container = |name: &str| Container {
            name: name.into(),
            ..Default::default()
        };
        PodSpec {
            security_context: Some(PodSecurityContext {
                fs_group: Some(107),
                ..Default::default()
            }),
            containers: vec![container("compute"), container("hook-sidecar-0")],
            init_containers: Some(vec![container("container-disk-binary")]),
            ..Default::default()
        }
    }

    fn settings(selinux_type: Option<&str>, gates: &[&str]) -> ClusterSettings {
        ClusterSettings {
            selinux_launcher_type: selinux_type.map(str::to_string),
            feature_gates: gates.iter().map(|g| g.to_string()).collect(),
            ..ClusterSettings::default()
        }
    }

    fn level(spec: &PodSpec, i: usize) -> Option<SELinuxOptions> {
        spec.containers[i]
            .security_context
            .as_ref()
            .and_then(|s| s.se_linux_options.clone())
    }

    /// template_test.go:644-660: no type and no workaround leave the pod without options.
    #[test]
    fn nothing_without_a_type() {
        for t in [None, Some("")] {
            let mut s = spec();
            align_pod_multi_category_security(&mut s, &settings(t, &[]));
            assert_eq!(s, spec());
        }
    }

    /// template_test.go:662-683: `spc_t` becomes the pod's SELinux type; the other pod
    /// security fields stay; containers are untouched without the workaround
    /// (template_test.go:684-746, entry "nothing on all virt-launcher containers").
    #[test]
    fn the_launcher_type_goes_to_the_pod() {
        let mut s = spec();
        align_pod_multi_category_security(&mut s, &settings(Some("spc_t"), &[]));
        let psc = s.security_context.clone().unwrap();
        assert_eq!(psc.fs_group, Some(107));
        assert_eq!(
            psc.se_linux_options,
            Some(SELinuxOptions {
                type_: Some("spc_t".into()),
                ..Default::default()
            })
        );
        assert_eq!((level(&s, 0), level(&s, 1)), (None, None));
    }

    /// template_test.go:684-746, entry `"s0" on all but compute`: every container but compute
    /// gets level `s0` and the type; init containers keep theirs (template.go:1494-1499).
    #[test]
    fn the_docker_workaround_levels_all_but_compute() {
        let mut s = spec();
        let cfg = settings(Some("spc_t"), &[DOCKER_SELINUX_MCS_WORKAROUND]);
        align_pod_multi_category_security(&mut s, &cfg);
        assert_eq!(level(&s, 0), None);
        assert_eq!(
            level(&s, 1),
            Some(SELinuxOptions {
                type_: Some("spc_t".into()),
                level: Some("s0".into()),
                ..Default::default()
            })
        );
        assert!(s.init_containers.unwrap()[0].security_context.is_none());
        // Without a type the workaround still sets the level (template.go:1474-1477).
        let mut s = spec();
        align_pod_multi_category_security(
            &mut s,
            &settings(None, &[DOCKER_SELINUX_MCS_WORKAROUND]),
        );
        assert!(
            s.security_context
                .clone()
                .unwrap()
                .se_linux_options
                .is_none()
        );
        assert_eq!(level(&s, 1).unwrap().level.as_deref(), Some("s0"));
        assert_eq!(level(&s, 1).unwrap().type_, None);
    }
}
