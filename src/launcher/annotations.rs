//! The launcher pod annotations KubeVirt's annotation generators add after the VMI's own
//! (`generatePodAnnotations`, template.go:1539-1563; the generators are the network one, then
//! the storage one: application.go:719).
//!
//! - **Istio** (pkg/network/pod/annotations/generator.go:83-88, 182-188): a VMI with a
//!   masquerade interface gets `traffic.sidecar.istio.io/kubevirtInterfaces` and
//!   `istio.io/reroute-virtual-interfaces` naming the pod-side bridge `k6t-eth0`, so an Istio
//!   sidecar redirects the guest's traffic.
//! - **Velero backup hooks** (pkg/storage/pod/annotations/generator.go:45-80): every launcher
//!   pod runs `virt-freezer` in `compute` before (`--freeze`, 60 s timeout) and after
//!   (`--unfreeze`) a Velero backup, unless `kubevirt.io/skip-backup-hooks` is true on the VMI
//!   (or, for the VMI controller's later sync only, on the KubeVirt CR: the renderer's generator
//!   has no cluster configuration, application.go:719 `storageannotations.Generator{}`).
//!
//! The network generator's Multus annotations are [`super::network::multus_annotations`].

use std::collections::BTreeMap;

use crate::api::VirtualMachineInstance;
use crate::api::annotations::SKIP_BACKUP_HOOKS;

/// Istio's interface list for KubeVirt (pkg/network/istio/decorators.go:34).
pub(crate) const ISTIO_KUBEVIRT_INTERFACES: &str = "traffic.sidecar.istio.io/kubevirtInterfaces";
/// Istio's newer name for the same list (decorators.go:40).
pub(crate) const ISTIO_REROUTE_VIRTUAL_INTERFACES: &str = "istio.io/reroute-virtual-interfaces";
/// The pod-side bridge of the pod network's masquerade interface.
const ISTIO_BRIDGE: &str = "k6t-eth0";

const PRE_HOOK_CONTAINER: &str = "pre.hook.backup.velero.io/container";
const PRE_HOOK_COMMAND: &str = "pre.hook.backup.velero.io/command";
const PRE_HOOK_TIMEOUT: &str = "pre.hook.backup.velero.io/timeout";
const POST_HOOK_CONTAINER: &str = "post.hook.backup.velero.io/container";
const POST_HOOK_COMMAND: &str = "post.hook.backup.velero.io/command";

/// The storage generator's keys, which the VMI controller keeps in sync on a running pod
/// (`ManagedAnnotationKeys`, generator.go:45-53; lifecycle.go:811).
pub(crate) const VELERO_KEYS: [&str; 5] = [
    PRE_HOOK_CONTAINER,
    PRE_HOOK_COMMAND,
    PRE_HOOK_TIMEOUT,
    POST_HOOK_CONTAINER,
    POST_HOOK_COMMAND,
];

/// The network generator's Istio annotations for `vmi` (none without a masquerade interface).
pub(crate) fn istio(vmi: &VirtualMachineInstance) -> BTreeMap<String, String> {
    let masquerade = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.masquerade.is_some());
    if !masquerade {
        return BTreeMap::new();
    }
    [ISTIO_KUBEVIRT_INTERFACES, ISTIO_REROUTE_VIRTUAL_INTERFACES]
        .into_iter()
        .map(|k| (k.to_string(), ISTIO_BRIDGE.to_string()))
        .collect()
}

/// The storage generator's Velero hooks for `vmi`. `cluster_skip` is the KubeVirt CR's
/// `kubevirt.io/skip-backup-hooks`, read only when the VMI does not carry the annotation
/// (generator.go:56-63); the renderer passes `None`, as KubeVirt's does.
pub(crate) fn velero(
    vmi: &VirtualMachineInstance,
    cluster_skip: Option<&str>,
) -> BTreeMap<String, String> {
    let skip = match vmi
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SKIP_BACKUP_HOOKS))
    {
        Some(v) => go_parse_bool(v),
        None => cluster_skip.is_some_and(go_parse_bool),
    };
    if skip {
        return BTreeMap::new();
    }
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let namespace = vmi.metadata.namespace.as_deref().unwrap_or_default();
    let command = |flag: &str| {
        format!(
            "[\"/usr/bin/virt-freezer\", \"{flag}\", \"--name\", {}, \"--namespace\", {}]",
            go_quote(name),
            go_quote(namespace)
        )
    };
    BTreeMap::from([
        (PRE_HOOK_CONTAINER.to_string(), "compute".to_string()),
        (PRE_HOOK_COMMAND.to_string(), command("--freeze")),
        (PRE_HOOK_TIMEOUT.to_string(), "60s".to_string()),
        (POST_HOOK_CONTAINER.to_string(), "compute".to_string()),
        (POST_HOOK_COMMAND.to_string(), command("--unfreeze")),
    ])
}

/// Go's `strconv.ParseBool`, with an error read as false (generator.go:67 ignores it).
fn go_parse_bool(s: &str) -> bool {
    matches!(s, "1" | "t" | "T" | "TRUE" | "true" | "True")
}

/// Go's `%q` of a Kubernetes name or namespace (DNS labels: no character needs more than JSON's
/// escaping, which agrees with Go's for them).
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(
        annotations: serde_json::Value,
        interfaces: serde_json::Value,
    ) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "db-1", "namespace": "prod", "annotations": annotations},
            "spec": {"domain": {"devices": {"interfaces": interfaces}}}
        }))
        .expect("vmi")
    }

    #[test]
    fn every_pod_gets_the_freeze_and_thaw_hooks_naming_its_vmi() {
        let a = velero(&vmi(json!({}), json!([])), None);
        assert_eq!(a.keys().map(String::as_str).collect::<Vec<_>>(), {
            let mut k = VELERO_KEYS.to_vec();
            k.sort();
            k
        });
        assert_eq!(a[PRE_HOOK_CONTAINER], "compute");
        assert_eq!(a[PRE_HOOK_TIMEOUT], "60s");
        assert_eq!(
            a[PRE_HOOK_COMMAND],
            r#"["/usr/bin/virt-freezer", "--freeze", "--name", "db-1", "--namespace", "prod"]"#
        );
        assert_eq!(
            a[POST_HOOK_COMMAND],
            r#"["/usr/bin/virt-freezer", "--unfreeze", "--name", "db-1", "--namespace", "prod"]"#
        );
    }

    #[test]
    fn the_vmi_annotation_decides_before_the_cluster_one_as_go_parses_it() {
        let skipped = |vmi_value: Option<&str>, cluster: Option<&str>| {
            let annotations = match vmi_value {
                Some(v) => json!({SKIP_BACKUP_HOOKS: v}),
                None => json!({}),
            };
            velero(&vmi(annotations, json!([])), cluster).is_empty()
        };
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert!(skipped(Some(yes), None), "{yes}");
            assert!(skipped(None, Some(yes)), "{yes}");
        }
        for no in ["0", "false", "yes", "", "tRuE"] {
            assert!(!skipped(Some(no), None), "{no:?}");
        }
        assert!(
            !skipped(Some("false"), Some("true")),
            "the VMI's value wins"
        );
        assert!(!skipped(None, None));
    }

    #[test]
    fn only_a_masquerade_interface_brings_the_istio_annotations() {
        let with = istio(&vmi(
            json!({}),
            json!([{"name": "a", "bridge": {}}, {"name": "default", "masquerade": {}}]),
        ));
        assert_eq!(with[ISTIO_KUBEVIRT_INTERFACES], "k6t-eth0");
        assert_eq!(with[ISTIO_REROUTE_VIRTUAL_INTERFACES], "k6t-eth0");
        assert!(istio(&vmi(json!({}), json!([{"name": "a", "bridge": {}}]))).is_empty());
        assert!(istio(&vmi(json!({}), json!([]))).is_empty());
    }
}
