//! `explain-overhead -A --upgrade-to VERSION`: an upgrade rehearsal.
//!
//! Every running launcher pod in scope is rendered again under the target release, from the
//! same VMI and the same cluster inputs the audit reads ([`super::overhead::AuditInputs`]). Per
//! VM: the release that rendered the pod now (its launcher image tag, when that release's
//! rendering matches the pod exactly, else the cluster's), every request and limit of the
//! `compute` container that changes on the next restart, and the overhead terms that account
//! for it, each with the target release's source (`TAG:file:lines`, PR numbers where the
//! version table names them, see [`crate::kubevirt_version`]).
//!
//! KubeVirt's workload-update migrations (and every later restart) re-render the launcher pod
//! with the new release's virt-controller (pkg/virt-controller/services/template.go), and the
//! scheduler then needs the new memory request on some node. The rehearsal checks each VM
//! against the node it runs on now: the node's allocatable memory, less what every other pod
//! on it requests (all namespaces), must hold the new request. A per-node summary adds what the
//! node needs once all its VMs have restarted.
//!
//! Beyond the compute resources, the two renderings (the pod's release and the target, both
//! from the same VMI and inputs, without the random QEMU timeout jitter) are compared field by
//! field, and each differing field is put down to the renderer rule of
//! [`crate::kubevirt_version::PodRules`] that renders it (PR 18237: the launcher flags in
//! `args`); a field no rule names is listed as `unattributed`. The VM's hotplug attachment pods
//! (among the pods bound to nodes) are checked against the controller rule that renders their
//! owner annotations (PR 18222); the VMI controller creates them again for the new launcher pod.

use super::gather::{GatherOptions, describe_error};
use super::model::Missing;
use super::overhead::{AuditInputs, ClusterError, gather_audit_inputs, launchers};
use crate::api::quantity::ParsedQuantity;
use crate::config::ClusterSettings;
use crate::kubevirt_version::KubeVirtVersion;
use crate::launcher::explain::{Explanation, ResourceDifference, check_pod};
use crate::launcher::overhead::OverheadBreakdown;
use crate::launcher::pod::LIBVIRT_HOOKS_FLAG;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// What the rehearsal reads: the audit's inputs, the nodes, and every pod bound to a node.
#[derive(Debug, Clone, Default)]
pub(crate) struct RehearsalInputs {
    /// Launcher pods, VMIs, namespaces, quotas and settings in scope, as the audit reads them.
    pub audit: AuditInputs,
    /// Every node (allocatable memory).
    pub nodes: Vec<Node>,
    /// Every pod bound to a node, in every namespace (what the scheduler counts).
    pub node_pods: Vec<Pod>,
    /// The release to rehearse.
    pub target: KubeVirtVersion,
}

/// The rehearsal's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rehearsal {
    /// The namespace in scope, `None` for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The cluster's KubeVirt release (the KubeVirt CR's observed version, or the default).
    pub from: KubeVirtVersion,
    /// The release rehearsed.
    pub to: KubeVirtVersion,
    /// One entry per running launcher pod, the largest memory increase first.
    pub vms: Vec<VmRehearsal>,
    /// One entry per node that runs a VM in scope, by name.
    pub nodes: Vec<NodeRehearsal>,
    /// Launcher pods that could not be rehearsed, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_skipped: Vec<String>,
    /// What could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

impl Rehearsal {
    /// VMs that would no longer fit on their node after their next restart.
    pub(crate) fn no_longer_fit(&self) -> impl Iterator<Item = &VmRehearsal> {
        self.vms.iter().filter(|v| v.fits_after == Some(false))
    }
}

/// One VM's launcher pod, now and after the upgrade.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VmRehearsal {
    pub namespace: String,
    /// The VMI (`kubevirt.io/domain`).
    pub vmi: String,
    /// The launcher pod now.
    pub pod: String,
    /// The node it runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The release whose rendering the pod carries.
    pub rendered_by: KubeVirtVersion,
    /// Every request and limit of `compute` that the target release renders otherwise (the
    /// pod's value on the left).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<ResourceDifference>,
    /// The `compute` memory request after − now, bytes.
    pub memory_request_delta_bytes: i64,
    /// The overhead terms that differ between the two renderings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<TermChange>,
    /// Whether the new memory request fits on the node it runs on, with every other pod there
    /// as now; `None` when the node or its allocatable memory is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fits_after: Option<bool>,
    /// The launcher pod's other fields that the target release renders otherwise, by cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_changes: Vec<PodChange>,
}

/// Fields of the launcher pod, beyond the compute resources and the overhead annotation, that
/// one renderer rule changes between the two releases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PodChange {
    /// What changed and why (`PR 18237: the launcher flags move from command to args`), or
    /// `unattributed`.
    pub cause: String,
    /// Where the target's rule comes from (`PR 18237:…`, `v1.9.0:…`).
    pub source: String,
    /// The fields, as `spec.containers[compute].args` (list elements by name).
    pub paths: Vec<String>,
}

/// An overhead term that one release adds and the other does not, or with other bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TermChange {
    /// The term's machine name (`qemu`, `videoRam`, …).
    pub term: String,
    pub before_bytes: i64,
    pub after_bytes: i64,
    /// Where the new value comes from (the old one's when the term goes away).
    pub source: String,
}

/// One node, now and once every VM in scope on it has restarted under the target release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeRehearsal {
    pub node: String,
    /// `status.allocatable.memory`; `None` when the node is not in the list or has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable_bytes: Option<i64>,
    /// What every pod on the node requests now.
    pub requested_bytes: i64,
    /// The same once every VM in scope on it has restarted.
    pub requested_after_bytes: i64,
    /// VMs in scope on the node.
    pub vms: usize,
}

impl NodeRehearsal {
    /// Bytes the node lacks once every VM has restarted (0 when it holds them all).
    pub(crate) fn short_after_bytes(&self) -> i64 {
        self.allocatable_bytes
            .map_or(0, |a| (self.requested_after_bytes - a).max(0))
    }
}

/// `±N` in binary units (`+20Mi`, `-1.5Gi`, `0`): a memory change as the table and the TUI
/// show it.
pub(crate) fn signed(bytes: i64) -> String {
    use crate::api::quantity::human_bytes;
    match bytes {
        0 => "0".into(),
        b if b > 0 => format!("+{}", human_bytes(b)),
        b => format!("-{}", human_bytes(-b)),
    }
}

/// Read what [`rehearse`] needs (the audit's lists, every node, every pod bound to a node) and
/// rehearse `target`.
///
/// Errors: as [`super::overhead::gather_audit`]; nodes or pods of other namespaces that cannot
/// be read are [`Missing`] (the fit checks are then left out).
pub(crate) async fn gather_rehearsal(
    client: &kube::Client,
    namespace: Option<&str>,
    opts: &GatherOptions,
    target: KubeVirtVersion,
    progress: &mut dyn FnMut(&str),
) -> Result<Rehearsal, ClusterError> {
    let (audit, mut missing) = gather_audit_inputs(client, namespace, opts, None, progress).await?;
    progress("listing nodes and the pods bound to them");
    let lp = ListParams::default();
    let (nodes_api, pods_api) = (
        Api::<Node>::all(client.clone()),
        Api::<Pod>::all(client.clone()),
    );
    let (nodes, pods) = tokio::join!(nodes_api.list(&lp), pods_api.list(&lp));
    let nodes = listed(nodes, "nodes", &mut missing);
    let node_pods = listed(pods, "pods in every namespace", &mut missing);
    progress(&format!(
        "rehearsing {} on {} virt-launcher pods",
        target.name(),
        audit.pods.len()
    ));
    let inputs = RehearsalInputs {
        audit,
        nodes,
        node_pods,
        target,
    };
    let mut rehearsal = rehearse(&inputs, namespace);
    rehearsal.missing.extend(missing);
    Ok(rehearsal)
}

/// The items of a list, or none with the reason recorded in `missing`.
fn listed<K: Clone>(
    list: Result<kube::core::ObjectList<K>, kube::Error>,
    what: &str,
    missing: &mut Vec<Missing>,
) -> Vec<K> {
    list.map(|l| l.items).unwrap_or_else(|e| {
        missing.push(Missing {
            what: what.into(),
            reason: format!(
                "{}; VMs are not checked against their nodes",
                describe_error(&e)
            ),
        });
        Vec::new()
    })
}

/// Rehearse `inputs.target` on every running launcher pod in `namespace` (all when `None`).
pub(crate) fn rehearse(inputs: &RehearsalInputs, namespace: Option<&str>) -> Rehearsal {
    let audit = &inputs.audit;
    let mut rehearsal = Rehearsal {
        namespace: namespace.map(str::to_string),
        from: audit.settings.kubevirt_version,
        to: inputs.target,
        vms: Vec::new(),
        nodes: Vec::new(),
        pods_skipped: Vec::new(),
        missing: Vec::new(),
    };
    let usage = NodeUsage::new(&inputs.node_pods);
    let target = ClusterSettings {
        kubevirt_version: inputs.target,
        ..audit.settings.clone()
    };
    for launcher in launchers(audit, &mut rehearsal.pods_skipped) {
        let rendered = launcher
            .rendering(&audit.settings)
            .and_then(|now| Ok((now, launcher.explain(&target)?)));
        let (now, after) = match rendered {
            Ok(pair) => pair,
            Err(e) => {
                rehearsal.pods_skipped.push(launcher.skip_reason(&e));
                continue;
            }
        };
        let node = launcher.pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let mut vm = vm_rehearsal(launcher.names(), launcher.pod, &now, &after, node);
        let renderings = launcher
            .render_pod(
                &ClusterSettings {
                    kubevirt_version: now.kubevirt_version,
                    ..audit.settings.clone()
                },
                now.overhead.total_bytes,
            )
            .and_then(|a| Ok((a, launcher.render_pod(&target, after.overhead.total_bytes)?)));
        let attachments = attachment_pod_changes(
            launcher.pod,
            &inputs.node_pods,
            now.kubevirt_version,
            inputs.target,
        );
        match renderings {
            Ok((a, b)) => vm.pod_changes = pod_changes(&a, &b, now.kubevirt_version, inputs.target),
            Err(reason) => rehearsal.missing.push(Missing {
                what: format!("the launcher pod diff of {}/{}", vm.namespace, vm.vmi),
                reason,
            }),
        }
        vm.pod_changes.extend(attachments);
        vm.fits_after = vm.node.as_deref().and_then(|n| {
            let free = allocatable(&inputs.nodes, n)? - usage.requested(n);
            Some(vm.memory_request_delta_bytes <= free)
        });
        rehearsal.vms.push(vm);
    }
    rehearsal.nodes = node_summary(&rehearsal.vms, &inputs.nodes, &usage);
    rehearsal.vms.sort_by(|a, b| {
        b.memory_request_delta_bytes
            .cmp(&a.memory_request_delta_bytes)
            .then((&a.namespace, &a.vmi).cmp(&(&b.namespace, &b.vmi)))
    });
    rehearsal
}

/// The rehearsal of one pod: `now` is the rendering it carries, `after` the target's.
fn vm_rehearsal(
    (namespace, vmi, pod_name): (String, String, String),
    pod: &Pod,
    now: &Explanation,
    after: &Explanation,
    node: Option<String>,
) -> VmRehearsal {
    let check = check_pod(after, pod);
    let delta = check.memory_request_difference_bytes.map_or(0, |d| -d);
    VmRehearsal {
        namespace,
        vmi,
        pod: pod_name,
        node,
        rendered_by: now.kubevirt_version,
        changes: check.differences,
        memory_request_delta_bytes: delta,
        causes: term_changes(&now.overhead, &after.overhead),
        fits_after: None,
        pod_changes: Vec::new(),
    }
}

/// The fields where `after` (rendered by `to`) differs from `before` (by `from`), beyond what
/// the memory formula renders, grouped by the [`PodRules`](crate::kubevirt_version::PodRules)
/// rule that renders them.
fn pod_changes(
    before: &Pod,
    after: &Pod,
    from: KubeVirtVersion,
    to: KubeVirtVersion,
) -> Vec<PodChange> {
    let json = |p: &Pod| serde_json::to_value(p).unwrap_or_default();
    let mut paths = Vec::new();
    diff_fields("", Some(&json(before)), Some(&json(after)), &mut paths);
    paths.retain(|p| !rendered_by_the_formula(p));
    let (old, new) = (from.pod_rules(), to.pod_rules());
    let mut rules: Vec<RuleFields> = Vec::new();
    if old.launcher_flags_in_args.value != new.launcher_flags_in_args.value {
        let way = if new.launcher_flags_in_args.value {
            "from command to args"
        } else {
            "from args back to command"
        };
        rules.push((
            format!("PR 18237: the launcher flags move {way}"),
            new.launcher_flags_in_args.source,
            |p| p.ends_with(".command") || p.ends_with(".args"),
        ));
    }
    if old.libvirt_hooks_flag.value != new.libvirt_hooks_flag.value
        && has_hooks_flag(before) != has_hooks_flag(after)
    {
        let what = if has_hooks_flag(after) {
            "is passed again"
        } else {
            "is dropped (LibvirtHooksServerAndClient is GA)"
        };
        rules.push((
            format!("PR 18687: {LIBVIRT_HOOKS_FLAG} {what}"),
            new.libvirt_hooks_flag.source,
            |p| p.ends_with(".command") || p.ends_with(".args"),
        ));
    }
    // A field two rules render (PR 18237 and PR 18687 both change the flags) is listed under
    // each; one no rule renders is unattributed.
    let mut out: Vec<PodChange> = Vec::new();
    let unattributed: Vec<String> = paths
        .iter()
        .filter(|p| !rules.iter().any(|(_, _, renders)| renders(p)))
        .cloned()
        .collect();
    for (cause, source, renders) in rules {
        let mine: Vec<String> = paths.iter().filter(|p| renders(p)).cloned().collect();
        if !mine.is_empty() {
            out.push(PodChange {
                cause,
                source: source.to_string(),
                paths: mine,
            });
        }
    }
    if !unattributed.is_empty() {
        out.push(PodChange {
            cause: "unattributed".into(),
            source: String::new(),
            paths: unattributed,
        });
    }
    out
}

/// The owner annotations of the launcher pod's hotplug attachment pods (the pods it controls,
/// `kubevirt.io=hotplug-disk`, among `node_pods`) that `to` renders otherwise than they are
/// (PR 18222: KubeVirt main records the VMI's name and UID on them,
/// [`ControllerRules::attachment_pod_owner_annotations`]); the VMI controller creates them
/// again for the new launcher pod after the restart. A path is
/// `attachmentPod[NAME].metadata.annotations.KEY`.
///
/// [`ControllerRules::attachment_pod_owner_annotations`]: crate::kubevirt_version::ControllerRules
fn attachment_pod_changes(
    launcher: &Pod,
    node_pods: &[Pod],
    from: KubeVirtVersion,
    to: KubeVirtVersion,
) -> Option<PodChange> {
    use crate::api::annotations::{OWNER_VMI_NAME, OWNER_VMI_UID};
    use crate::launcher::attachment_pod::HOTPLUG_DISK;
    let rule = to.controller_rules().attachment_pod_owner_annotations;
    let uid = launcher.metadata.uid.as_deref()?;
    if from
        .controller_rules()
        .attachment_pod_owner_annotations
        .value
        == rule.value
    {
        return None;
    }
    let mut paths = Vec::new();
    for pod in node_pods.iter().filter(|p| {
        let labels = p.metadata.labels.as_ref();
        crate::api::key::controller_of(&p.metadata).is_some_and(|r| r.kind == "Pod" && r.uid == uid)
            && labels
                .and_then(|l| l.get(crate::api::labels::APP))
                .map(String::as_str)
                == Some(HOTPLUG_DISK)
    }) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        for key in [OWNER_VMI_NAME, OWNER_VMI_UID] {
            let has = pod
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(key));
            if has != rule.value {
                paths.push(format!("attachmentPod[{name}].metadata.annotations.{key}"));
            }
        }
    }
    let what = if rule.value {
        "hotplug attachment pods record their VMI's name and UID"
    } else {
        "hotplug attachment pods no longer record their VMI"
    };
    (!paths.is_empty()).then(|| PodChange {
        cause: format!("PR 18222: {what}"),
        source: rule.source.to_string(),
        paths,
    })
}

/// Whether `compute` passes [`LIBVIRT_HOOKS_FLAG`] (in `command` or `args`).
fn has_hooks_flag(pod: &Pod) -> bool {
    let compute = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .find(|c| c.name == "compute");
    compute.is_some_and(|c| {
        c.command
            .iter()
            .chain(&c.args)
            .flatten()
            .any(|a| a == LIBVIRT_HOOKS_FLAG)
    })
}

/// A renderer rule that changed: the cause, the target's source, and which fields it renders.
type RuleFields = (String, &'static str, fn(&str) -> bool);

/// The compute resources and the overhead annotation: the formula's part, which
/// [`VmRehearsal::changes`] and [`VmRehearsal::causes`] report.
fn rendered_by_the_formula(path: &str) -> bool {
    path.contains(".resources.")
        || path.ends_with(".resources")
        || path
            == format!(
                "metadata.annotations.{}",
                crate::api::annotations::MEMORY_OVERHEAD_BYTES
            )
}

/// The leaf fields where `a` and `b` differ; a list whose elements all have a `name` is
/// compared element by element under `[name]`, any other list as one value.
fn diff_fields(at: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<String>) {
    let field = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diff_fields(&field(k), x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) if named(x) && named(y) => {
            let by_name = |l: &'_ Vec<Value>| -> BTreeMap<String, Value> {
                l.iter()
                    .map(|e| {
                        (
                            e["name"].as_str().unwrap_or_default().to_string(),
                            e.clone(),
                        )
                    })
                    .collect()
            };
            let (x, y) = (by_name(x), by_name(y));
            let names: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for n in names {
                diff_fields(&format!("{at}[{n}]"), x.get(n), y.get(n), out);
            }
        }
        (a, b) if a != b => out.push(at.to_string()),
        _ => {}
    }
}

fn named(list: &[Value]) -> bool {
    !list.is_empty()
        && list
            .iter()
            .all(|e| e.get("name").is_some_and(Value::is_string))
}

/// The terms whose bytes differ between `before` and `after` (a missing term counts 0), in
/// the order the formula adds them.
fn term_changes(before: &OverheadBreakdown, after: &OverheadBreakdown) -> Vec<TermChange> {
    let old: BTreeMap<&str, (i64, &str)> = before
        .terms
        .iter()
        .map(|t| (t.name.as_str(), (t.bytes, t.source.as_str())))
        .collect();
    let new: BTreeMap<&str, (i64, &str)> = after
        .terms
        .iter()
        .map(|t| (t.name.as_str(), (t.bytes, t.source.as_str())))
        .collect();
    let order = after
        .terms
        .iter()
        .chain(
            before
                .terms
                .iter()
                .filter(|t| !new.contains_key(t.name.as_str())),
        )
        .map(|t| t.name.as_str());
    order
        .filter_map(|name| {
            let (b, old_source) = old.get(name).copied().unwrap_or((0, ""));
            let (a, new_source) = new.get(name).copied().unwrap_or((0, old_source));
            (a != b).then(|| TermChange {
                term: name.to_string(),
                before_bytes: b,
                after_bytes: a,
                source: new_source.to_string(),
            })
        })
        .collect()
}

/// Node `name`'s `status.allocatable.memory`, bytes.
fn allocatable(nodes: &[Node], name: &str) -> Option<i64> {
    let node = nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(name))?;
    let q = node.status.as_ref()?.allocatable.as_ref()?.get("memory")?;
    Some(ParsedQuantity::parse(&q.0).ok()?.value())
}

/// What the pods on each node request, as the scheduler counts it.
struct NodeUsage(BTreeMap<String, i64>);

impl NodeUsage {
    fn new(pods: &[Pod]) -> Self {
        let mut by_node: BTreeMap<String, i64> = BTreeMap::new();
        for pod in pods.iter().filter(|p| !finished(p)) {
            if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                *by_node.entry(node).or_default() += pod_memory_request(pod);
            }
        }
        NodeUsage(by_node)
    }

    fn requested(&self, node: &str) -> i64 {
        self.0.get(node).copied().unwrap_or(0)
    }
}

fn finished(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

/// A pod's memory request as the scheduler's fit check counts it (kubernetes
/// pkg/api/v1/resource `PodRequests`): the sum over its containers, at least the largest init
/// container's, plus `spec.overhead`.
fn pod_memory_request(pod: &Pod) -> i64 {
    let Some(spec) = pod.spec.as_ref() else {
        return 0;
    };
    let memory = |c: &k8s_openapi::api::core::v1::Container| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .and_then(|q| Some(ParsedQuantity::parse(&q.0).ok()?.value()))
            .unwrap_or(0)
    };
    let containers: i64 = spec.containers.iter().map(memory).sum();
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(memory)
        .max()
        .unwrap_or(0);
    let overhead = spec
        .overhead
        .as_ref()
        .and_then(|o| o.get("memory"))
        .and_then(|q| Some(ParsedQuantity::parse(&q.0).ok()?.value()))
        .unwrap_or(0);
    containers.max(init) + overhead
}

/// One entry per node that runs a VM of `vms`.
fn node_summary(vms: &[VmRehearsal], nodes: &[Node], usage: &NodeUsage) -> Vec<NodeRehearsal> {
    let mut by_node: BTreeMap<&str, (i64, usize)> = BTreeMap::new();
    for vm in vms {
        if let Some(node) = vm.node.as_deref() {
            let entry = by_node.entry(node).or_default();
            entry.0 += vm.memory_request_delta_bytes;
            entry.1 += 1;
        }
    }
    by_node
        .into_iter()
        .map(|(node, (delta, count))| NodeRehearsal {
            node: node.to_string(),
            allocatable_bytes: allocatable(nodes, node),
            requested_bytes: usage.requested(node),
            requested_after_bytes: usage.requested(node) + delta,
            vms: count,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachineInstance;
    use crate::controller::vmi::executor::render_pod_with;
    use crate::launcher::resources::NamespaceContext;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    const MIB: i64 = 1 << 20;

    fn vmi(name: &str, memory: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": memory}}}}
        }))
        .unwrap()
    }

    /// `vmi`'s launcher pod as `settings` render it, on `node`.
    fn pod(vmi: &VirtualMachineInstance, settings: &ClusterSettings, node: &str) -> Pod {
        let mut p = render_pod_with(settings, &NamespaceContext::default(), vmi).unwrap();
        p.metadata.name = Some(format!(
            "virt-launcher-{}",
            vmi.metadata.name.as_deref().unwrap()
        ));
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p
    }

    fn node(name: &str, allocatable: i64) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            allocatable: Some([("memory".to_string(), Quantity(allocatable.to_string()))].into()),
            ..Default::default()
        });
        n
    }

    /// Two VMs on `roomy`, one on `full`, which has `free` bytes left beside them and a
    /// 512Mi pod of another kind, all rendered as v1.9.0.
    fn fleet(free: i64, target: KubeVirtVersion) -> RehearsalInputs {
        let settings = ClusterSettings::default();
        let vmis = vec![vmi("a", "2Gi"), vmi("b", "4Gi"), vmi("c", "1Gi")];
        let pods: Vec<Pod> = vmis
            .iter()
            .zip(["roomy", "roomy", "full"])
            .map(|(v, n)| pod(v, &settings, n))
            .collect();
        let mut other: Pod = serde_json::from_value(json!({
            "metadata": {"name": "db", "namespace": "other"},
            "spec": {"nodeName": "full", "containers": [
                {"name": "db", "resources": {"requests": {"memory": "512Mi"}}}]}
        }))
        .unwrap();
        other.metadata.uid = Some("uid-db".into());
        let mut node_pods = pods.clone();
        node_pods.push(other);
        let on_full = NodeUsage::new(&node_pods).requested("full");
        RehearsalInputs {
            audit: AuditInputs {
                pods,
                vmis,
                settings,
                ..Default::default()
            },
            nodes: vec![node("roomy", 64 << 30), node("full", on_full + free)],
            node_pods,
            target,
        }
    }

    /// PR 18222: a VM with a hotplug attachment pod (v1.9.0's, no annotations) lists the two
    /// owner annotations main adds to it; the other VMs, and a rehearsal of v1.9.0, do not.
    #[test]
    fn main_names_the_owner_annotations_of_a_vms_attachment_pod() {
        let mut inputs = fleet(1 << 30, KubeVirtVersion::Main);
        inputs.audit.pods[0].metadata.uid = Some("launcher-a".into());
        let attachment: Pod = serde_json::from_value(json!({
            "metadata": {"name": "hp-volume-x", "namespace": "ns",
                "labels": {"kubevirt.io": "hotplug-disk"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "virt-launcher-a",
                                     "uid": "launcher-a", "controller": true}]},
            "spec": {"nodeName": "roomy", "containers": []}
        }))
        .unwrap();
        inputs.node_pods.push(attachment);
        let r = rehearse(&inputs, None);
        let change = |vm: &str| {
            let vm = r.vms.iter().find(|v| v.vmi == vm).unwrap();
            vm.pod_changes
                .iter()
                .find(|c| c.cause.starts_with("PR 18222:"))
                .cloned()
        };
        let a = change("a").expect("a has an attachment pod");
        assert_eq!(
            a.cause,
            "PR 18222: hotplug attachment pods record their VMI's name and UID"
        );
        assert_eq!(
            a.paths,
            [
                "attachmentPod[hp-volume-x].metadata.annotations.kubevirt.io/owner-vmi-name",
                "attachmentPod[hp-volume-x].metadata.annotations.kubevirt.io/owner-vmi-uid"
            ]
        );
        assert!(a.source.starts_with("PR 18222:"), "{}", a.source);
        assert_eq!(change("b"), None);
        inputs.target = KubeVirtVersion::V1_9;
        let r = rehearse(&inputs, None);
        assert!(r.vms.iter().all(|v| v.pod_changes.is_empty()), "{r:#?}");
    }

    #[test]
    fn main_adds_the_qemu_20mi_to_every_vm_and_a_full_node_loses_its_vm() {
        let r = rehearse(&fleet(10 * MIB, KubeVirtVersion::Main), None);
        assert_eq!(r.vms.len(), 3);
        for vm in &r.vms {
            assert_eq!(vm.memory_request_delta_bytes, 20 * MIB, "{vm:#?}");
            assert_eq!(vm.rendered_by, KubeVirtVersion::V1_9);
            let qemu = vm.causes.iter().find(|c| c.term == "qemu").expect("qemu");
            assert_eq!((qemu.before_bytes, qemu.after_bytes), (30 * MIB, 50 * MIB));
            assert!(qemu.source.contains("PR 18388"), "{}", qemu.source);
            assert!(
                vm.changes.iter().any(|c| c.resource == "requests.memory"),
                "{vm:#?}"
            );
        }
        let blocked: Vec<&str> = r.no_longer_fit().map(|v| v.vmi.as_str()).collect();
        assert_eq!(blocked, ["c"]);
        let full = r.nodes.iter().find(|n| n.node == "full").unwrap();
        assert_eq!(full.vms, 1);
        assert_eq!(full.requested_after_bytes - full.requested_bytes, 20 * MIB);
        assert_eq!(full.short_after_bytes(), 10 * MIB, "the db pod counts too");
        let roomy = r.nodes.iter().find(|n| n.node == "roomy").unwrap();
        assert_eq!((roomy.vms, roomy.short_after_bytes()), (2, 0));
    }

    /// The two renderings differ beyond the formula only where main's PR 18237 renders
    /// otherwise: the flags of `compute` in `args`.
    #[test]
    fn main_moves_every_vms_launcher_flags_to_args_drops_the_hooks_flag_and_nothing_else() {
        let r = rehearse(&fleet(1 << 30, KubeVirtVersion::Main), None);
        assert!(r.missing.is_empty(), "{:?}", r.missing);
        for vm in &r.vms {
            let causes: Vec<&str> = vm.pod_changes.iter().map(|c| c.cause.as_str()).collect();
            assert_eq!(
                causes,
                [
                    "PR 18237: the launcher flags move from command to args",
                    "PR 18687: --libvirt-hook-server-and-client is dropped \
                     (LibvirtHooksServerAndClient is GA)"
                ]
            );
            for (change, pr) in vm.pod_changes.iter().zip(["PR 18237:", "PR 18687:"]) {
                assert_eq!(
                    change.paths,
                    [
                        "spec.containers[compute].args",
                        "spec.containers[compute].command"
                    ]
                );
                assert!(change.source.starts_with(pr), "{}", change.source);
            }
        }
        let back = rehearse(&fleet(1 << 30, KubeVirtVersion::V1_9), None);
        assert!(
            back.vms.iter().all(|v| v.pod_changes.is_empty()),
            "{back:#?}"
        );
    }

    #[test]
    fn a_field_no_rule_renders_is_unattributed() {
        let before = pod(&vmi("a", "1Gi"), &ClusterSettings::default(), "n");
        let mut after = before.clone();
        after.spec.as_mut().unwrap().hostname = Some("x".into());
        let mut resized = after.clone();
        let compute = &mut resized.spec.as_mut().unwrap().containers[0];
        compute.resources = None;
        let changes = pod_changes(
            &before,
            &resized,
            KubeVirtVersion::V1_9,
            KubeVirtVersion::V1_9,
        );
        assert_eq!(
            changes,
            [PodChange {
                cause: "unattributed".into(),
                source: String::new(),
                paths: vec!["spec.hostname".into()],
            }],
            "the compute resources are the formula's"
        );
    }

    #[test]
    fn a_node_with_room_for_the_increase_keeps_its_vm() {
        let r = rehearse(&fleet(20 * MIB, KubeVirtVersion::Main), None);
        assert_eq!(r.no_longer_fit().count(), 0, "{r:#?}");
        assert!(r.nodes.iter().all(|n| n.short_after_bytes() == 0));
    }

    #[test]
    fn the_same_release_changes_nothing() {
        let r = rehearse(&fleet(0, KubeVirtVersion::V1_9), None);
        for vm in &r.vms {
            assert_eq!(vm.memory_request_delta_bytes, 0);
            assert!(vm.changes.is_empty() && vm.causes.is_empty(), "{vm:#?}");
            assert_eq!(vm.fits_after, Some(true));
        }
    }

    #[test]
    fn a_pod_rendered_by_an_older_release_is_rehearsed_from_that_rendering() {
        let old = ClusterSettings {
            kubevirt_version: KubeVirtVersion::V1_5,
            launcher_image: "quay.io/kubevirt/virt-launcher:v1.5.0".into(),
            ..Default::default()
        };
        let mut inputs = fleet(1 << 30, KubeVirtVersion::V1_9);
        inputs.audit.pods[0] = pod(&inputs.audit.vmis[0], &old, "roomy");
        let r = rehearse(&inputs, None);
        let a = r.vms.iter().find(|v| v.vmi == "a").unwrap();
        assert_eq!(a.rendered_by, KubeVirtVersion::V1_5);
        // v1.6.0 doubled the video RAM (PR 14673).
        let video = a.causes.iter().find(|c| c.term == "videoRam");
        assert!(
            video.is_some_and(|c| c.after_bytes - c.before_bytes == 16 * MIB),
            "{a:#?}"
        );
        assert!(a.memory_request_delta_bytes >= 16 * MIB, "{a:#?}");
    }

    #[test]
    fn a_pod_without_a_node_or_a_node_without_allocatable_is_not_fit_checked() {
        let mut inputs = fleet(0, KubeVirtVersion::Main);
        inputs.audit.pods[0].spec.as_mut().unwrap().node_name = None;
        inputs
            .nodes
            .retain(|n| n.metadata.name.as_deref() != Some("full"));
        let r = rehearse(&inputs, None);
        let fits: BTreeMap<&str, Option<bool>> = r
            .vms
            .iter()
            .map(|v| (v.vmi.as_str(), v.fits_after))
            .collect();
        assert_eq!(fits["a"], None);
        assert_eq!(fits["b"], Some(true));
        assert_eq!(fits["c"], None);
        let full = r.nodes.iter().find(|n| n.node == "full").unwrap();
        assert_eq!(
            (full.allocatable_bytes, full.short_after_bytes()),
            (None, 0)
        );
    }

    #[test]
    fn a_pods_memory_request_counts_init_containers_and_overhead_as_the_scheduler_does() {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "resources": {"requests": {"memory": "100Mi"}}},
                    {"name": "b", "resources": {"requests": {"memory": "50Mi"}}},
                    {"name": "c"}],
                "initContainers": [{"name": "i", "resources": {"requests": {"memory": "200Mi"}}}],
                "overhead": {"memory": "10Mi"}
            }
        }))
        .unwrap();
        assert_eq!(pod_memory_request(&p), 210 * MIB);
        let mut done = p.clone();
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        done.spec.as_mut().unwrap().node_name = Some("n".into());
        assert_eq!(
            NodeUsage::new(&[done]).requested("n"),
            0,
            "a finished pod frees its node"
        );
    }
}
