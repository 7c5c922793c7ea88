//! `explain-overhead` against a live cluster: one VM, VMI or virt-launcher pod explained with
//! the cluster's own inputs ([`explain_target`]), and the fleet-wide OOM-risk audit
//! ([`gather_audit`] reads, [`audit`] decides).
//!
//! The inputs are those KubeVirt's virt-controller renders a launcher pod from
//! (pkg/virt-controller/services/template.go): the VMI, the KubeVirt CR's configuration, the
//! namespace's labels and ResourceQuotas. Each is read once — for the audit one list of pods,
//! VMIs, namespaces and quotas for the whole scope, never a call per VM — and every object that
//! could not be read is named with the reason ([`Missing`]), never fatal unless nothing can be
//! explained at all.

use super::gather::{
    GatherOptions, describe_error, found, is_not_found, is_transport, read_kubevirt, read_namespace,
};
use super::model::Missing;
use crate::api::manifest::KubeVirtObject;
use crate::api::quantity::{ParsedQuantity, human_bytes};
use crate::api::{VirtualMachine, VirtualMachineInstance, annotations};
use crate::config::ClusterSettings;
use crate::kubevirt_version::KubeVirtVersion;
use crate::launcher::explain::{
    ExplainError, Explanation, RenderInputs, check_pod, explain_in, launcher_image_tag,
    likely_cause,
};
use crate::launcher::resources::NamespaceContext;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Label of every virt-launcher pod (`kubevirt.io: virt-launcher`).
pub const LAUNCHER_SELECTOR: &str = "kubevirt.io=virt-launcher";

/// What `explain-overhead TYPE/NAME` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `vm/NAME`: the running VMI, or the VM's template when none runs.
    Vm(String),
    /// `vmi/NAME`.
    Vmi(String),
    /// `pod/NAME`: a virt-launcher pod (its VMI is `kubevirt.io/domain`).
    Pod(String),
}

impl std::str::FromStr for Target {
    type Err = String;

    /// kubectl's spellings: `vm/a`, `virtualmachine/a`, `vmi/a`, `pod/a`, `po/a`, ...
    fn from_str(text: &str) -> Result<Self, String> {
        let Some((kind, name)) = text.split_once('/') else {
            return Err(format!(
                "expected TYPE/NAME (vm/NAME, vmi/NAME or pod/NAME), got {text:?}"
            ));
        };
        if name.is_empty() || name.contains('/') {
            return Err(format!("expected TYPE/NAME, got {text:?}"));
        }
        let name = name.to_string();
        match kind.to_ascii_lowercase().as_str() {
            "vm" | "vms" | "virtualmachine" | "virtualmachines" => Ok(Target::Vm(name)),
            "vmi" | "vmis" | "virtualmachineinstance" | "virtualmachineinstances" => {
                Ok(Target::Vmi(name))
            }
            "pod" | "pods" | "po" => Ok(Target::Pod(name)),
            other => Err(format!(
                "explain-overhead explains VMs, VMIs and virt-launcher pods: resource type {other:?} is none of them"
            )),
        }
    }
}

/// Why a cluster explanation could not be made (exit code 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The named object (or the VMI a pod belongs to) does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The object exists but cannot be explained (the message names it and the field).
    #[error("{0}")]
    Invalid(String),
    /// The API server could not be reached or refused the first read.
    #[error("cluster unreachable: {0}")]
    Unreachable(String),
}

fn first_read_error(what: String, e: &kube::Error) -> ClusterError {
    if is_not_found(e) {
        ClusterError::NotFound(what)
    } else if is_transport(e) {
        ClusterError::Unreachable(format!("get {what}: {}", describe_error(e)))
    } else {
        ClusterError::Invalid(format!("get {what}: {}", describe_error(e)))
    }
}

/// The cluster's inputs as read: settings, version, namespace context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInputs {
    /// The KubeVirt CR's `status.observedKubeVirtVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt_version: Option<String>,
    /// Where the settings come from: `KubeVirt CR` or `KubeVirt's defaults`.
    pub settings_source: String,
    /// The settings used.
    pub settings: ClusterSettings,
    /// What the renderer knows of the namespace.
    pub namespace_context: NamespaceContext,
}

/// `explain-overhead TYPE/NAME`: the formula, the rendering and the pod, with the cluster's
/// inputs and what could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterExplanation {
    /// The formula and the rendered `compute` resources; `podCheck` when a launcher pod runs.
    #[serde(flatten)]
    pub explanation: Explanation,
    /// What the explanation was computed from.
    pub cluster: ClusterInputs,
    /// The VMI's `status.memory.memoryOverhead` (VmiMemoryOverheadReport), bytes: KubeVirt's own
    /// figure, ground truth where reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_overhead_bytes: Option<i64>,
    /// Why no pod is compared, when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_pod: Option<String>,
    /// What could not be read, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// The VMI's `status.memory.memoryOverhead` in bytes.
pub(crate) fn reported_overhead(vmi: &VirtualMachineInstance) -> Option<i64> {
    vmi.status
        .as_ref()
        .and_then(|s| s.memory.as_ref())
        .and_then(|m| m.memory_overhead.as_ref())
        .and_then(|q| ParsedQuantity::parse(&q.0).ok())
        .map(|q| q.value())
}

/// The live launcher pod of a VMI among `pods` (controlled by its uid, newest not being deleted
/// first).
fn launcher_pod_of<'a>(vmi: &VirtualMachineInstance, pods: &'a [Pod]) -> Option<&'a Pod> {
    let uid = vmi.metadata.uid.as_deref()?;
    let mut own: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == uid)
        })
        .collect();
    own.sort_by_key(|p| {
        (
            p.metadata.deletion_timestamp.is_some(),
            std::cmp::Reverse(p.metadata.creation_timestamp.clone().map(|t| t.0)),
        )
    });
    own.into_iter().next()
}

/// Reproduce the formula of the version the cluster reports (`status.observedKubeVirtVersion`,
/// the rule [`crate::kubevirt_version::KubeVirtVersion::observed`]); an unreported or unknown
/// one keeps the default (v1.9.0) with a note.
fn select_version(
    settings: &mut ClusterSettings,
    observed: Option<&str>,
    missing: &mut Vec<Missing>,
) {
    match crate::kubevirt_version::KubeVirtVersion::observed(observed) {
        Ok(v) => settings.kubevirt_version = v,
        Err(reason) => missing.push(Missing {
            what: "kubevirt status.observedKubeVirtVersion".into(),
            reason: format!(
                "{reason}; the {} formula is used",
                settings.kubevirt_version
            ),
        }),
    }
}

/// Read the KubeVirt CR and the namespace context; notes go to `missing`.
async fn read_inputs(
    client: &kube::Client,
    namespace: &str,
    opts: &GatherOptions,
    missing: &mut Vec<Missing>,
) -> ClusterInputs {
    let (kubevirt, ns) = tokio::join!(
        read_kubevirt(client, &opts.kubevirt_namespace),
        read_namespace(client, namespace)
    );
    let (settings, kubevirt_version, settings_source) = match kubevirt {
        Ok((mut s, v)) => {
            select_version(&mut s, v.as_deref(), missing);
            (s, v, "KubeVirt CR".to_string())
        }
        Err(m) => {
            missing.push(m);
            (
                ClusterSettings::default(),
                None,
                "KubeVirt's defaults".to_string(),
            )
        }
    };
    let namespace_context = match ns {
        Ok((n, quotas, note)) => {
            missing.extend(note);
            NamespaceContext::from_cluster(Some(&n), &quotas, &settings)
        }
        Err(m) => {
            missing.push(Missing {
                what: m.what,
                reason: format!("{}; rendered as in a namespace without labels", m.reason),
            });
            NamespaceContext::default()
        }
    };
    ClusterInputs {
        kubevirt_version,
        settings_source,
        settings,
        namespace_context,
    }
}

/// Explain `target` in `namespace` with the cluster's inputs.
pub async fn explain_target(
    client: &kube::Client,
    namespace: &str,
    target: &Target,
    opts: &GatherOptions,
) -> Result<ClusterExplanation, ClusterError> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut missing = Vec::new();
    let mut pod_named: Option<Pod> = None;
    // The object to explain: a VMI when one runs, else the VM's template.
    let object = match target {
        Target::Vmi(name) => KubeVirtObject::Vmi(Box::new(vmis.get(name).await.map_err(|e| {
            first_read_error(format!("VirtualMachineInstance {namespace}/{name}"), &e)
        })?)),
        Target::Vm(name) => {
            let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
            let vm = vms
                .get(name)
                .await
                .map_err(|e| first_read_error(format!("VirtualMachine {namespace}/{name}"), &e))?;
            match vmis.get_opt(name).await {
                Ok(Some(vmi)) => KubeVirtObject::Vmi(Box::new(vmi)),
                Ok(None) => KubeVirtObject::Vm(Box::new(vm)),
                Err(e) => {
                    missing.push(Missing {
                        what: format!("virtualMachineInstance/{name}"),
                        reason: format!("{}; the VM's template is explained", describe_error(&e)),
                    });
                    KubeVirtObject::Vm(Box::new(vm))
                }
            }
        }
        Target::Pod(name) => {
            let pod = pods
                .get(name)
                .await
                .map_err(|e| first_read_error(format!("Pod {namespace}/{name}"), &e))?;
            let Some(domain) = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::DOMAIN))
                .cloned()
            else {
                return Err(ClusterError::Invalid(format!(
                    "Pod {namespace}/{name}: field metadata.annotations[{}]: missing: not a virt-launcher pod",
                    annotations::DOMAIN
                )));
            };
            let vmi = vmis.get(&domain).await.map_err(|e| {
                first_read_error(
                    format!("VirtualMachineInstance {namespace}/{domain} (of pod {name})"),
                    &e,
                )
            })?;
            pod_named = Some(pod);
            KubeVirtObject::Vmi(Box::new(vmi))
        }
    };
    let cluster = read_inputs(client, namespace, opts, &mut missing).await;
    let mut explanation = explain_in(
        &object,
        namespace,
        &cluster.settings,
        &cluster.namespace_context,
    )
    .map_err(|e| {
        ClusterError::Invalid(format!(
            "{} {namespace}/{}: {e}",
            object.kind(),
            object.name()
        ))
    })?;
    let (mut reported_overhead_bytes, mut no_pod) = (None, None);
    match &object {
        KubeVirtObject::Vm(_) => {
            no_pod = Some("no VMI runs: the VM's template is explained, no pod to compare".into())
        }
        KubeVirtObject::Vmi(vmi) => {
            reported_overhead_bytes = reported_overhead(vmi);
            let pod = match pod_named {
                Some(p) => Some(p),
                None => {
                    let lp = ListParams::default().labels(LAUNCHER_SELECTOR);
                    match pods.list(&lp).await {
                        Ok(list) => launcher_pod_of(vmi, &list.items).cloned(),
                        Err(e) => {
                            missing.push(Missing {
                                what: format!("pods/{namespace}"),
                                reason: describe_error(&e),
                            });
                            None
                        }
                    }
                }
            };
            match pod {
                Some(pod) => {
                    let mut check = check_pod(&explanation, &pod);
                    let inputs = RenderInputs {
                        object: &object,
                        default_namespace: namespace,
                        settings: &cluster.settings,
                        namespace: &cluster.namespace_context,
                    };
                    check.likely_cause =
                        likely_cause(inputs, &pod, &check, cluster.kubevirt_version.as_deref());
                    explanation.pod_check = Some(check);
                }
                None => no_pod = Some("the VMI has no launcher pod".into()),
            }
        }
    }
    Ok(ClusterExplanation {
        explanation,
        cluster,
        reported_overhead_bytes,
        no_pod,
        missing,
    })
}

// ---------------------------------------------------------------------------------------------
// The fleet audit

/// How bad a finding is; findings are listed worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FindingKind {
    /// The `compute` container was OOM-killed before (its last state).
    OomKilled,
    /// The guest's resident memory (Prometheus) is close to or above what the pod may use.
    ResidentNearLimit,
    /// The memory limit leaves less than the formula's overhead above the guest.
    OomRisk,
    /// The pod's resources differ from what the cluster's KubeVirt would render now.
    Drift,
    /// The rendering of the cluster's KubeVirt version is known to hurt (upstream defect).
    UpstreamDefect,
    /// A shape KubeVirt's maintainers call risky for the fixed estimate, with little headroom.
    RiskyShape,
    /// Rendered by an older KubeVirt release, as that release renders it: it changes on the
    /// pod's next restart. Listed apart from the findings ([`AuditReport::older_renderings`]).
    OlderRendering,
}

impl FindingKind {
    /// The camelCase name used in JSON and the table.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FindingKind::OomKilled => "oomKilled",
            FindingKind::ResidentNearLimit => "residentNearLimit",
            FindingKind::OomRisk => "oomRisk",
            FindingKind::Drift => "drift",
            FindingKind::UpstreamDefect => "upstreamDefect",
            FindingKind::RiskyShape => "riskyShape",
            FindingKind::OlderRendering => "olderRendering",
        }
    }
}

/// One flagged launcher pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What is wrong.
    pub kind: FindingKind,
    /// Namespace of the pod and its VMI.
    pub namespace: String,
    /// The virt-launcher pod.
    pub pod: String,
    /// The VMI (`kubevirt.io/domain`).
    pub vmi: String,
    /// For humans: the figures and the likely cause.
    pub message: String,
    /// The size of the problem in bytes where it has one (shortfall, drift), for ordering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<i64>,
}

/// Whether the cluster reports `status.memory.memoryOverhead` (VmiMemoryOverheadReport).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverheadReporting {
    /// VMIs with a reported overhead.
    pub reported: usize,
    /// VMIs with a launcher pod in scope.
    pub vmis: usize,
}

/// `explain-overhead -A` / `-n NS`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// The namespace audited, `None` for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The KubeVirt CR's observed version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt_version: Option<String>,
    /// Launcher pods checked.
    pub pods_checked: usize,
    /// Launcher pods whose VMI is gone or unreadable (not checked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_skipped: Vec<String>,
    /// `status.memory.memoryOverhead` reporting; where reported it is the overhead used.
    pub overhead_reporting: OverheadReporting,
    /// Whether guest resident memory was read from Prometheus.
    pub prometheus: bool,
    /// Flagged pods, worst first.
    pub findings: Vec<Finding>,
    /// Pods rendered by an older KubeVirt release that agree with that release's rendering:
    /// not drift, but they change on their next restart (kind `olderRendering`; not flagged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub older_renderings: Vec<Finding>,
    /// What could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// Everything the audit reads, in one list each.
#[derive(Debug, Clone, Default)]
pub struct AuditInputs {
    /// virt-launcher pods in scope.
    pub pods: Vec<Pod>,
    /// VMIs in scope.
    pub vmis: Vec<VirtualMachineInstance>,
    /// Namespaces (all, or the one in scope).
    pub namespaces: Vec<Namespace>,
    /// ResourceQuotas in scope.
    pub quotas: Vec<ResourceQuota>,
    /// The cluster settings.
    pub settings: ClusterSettings,
    /// The KubeVirt CR's observed version.
    pub kubevirt_version: Option<String>,
    /// Guest resident memory by `namespace/name` of the VMI (Prometheus), bytes.
    pub resident_bytes: Option<HashMap<String, i64>>,
}

/// Guest memory of a VMI: `memory.guest`, else the memory request, else the limit (bytes).
fn guest_bytes(vmi: &VirtualMachineInstance) -> Option<i64> {
    let d = &vmi.spec.domain;
    let q = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|p| p.value())
    };
    q(d.memory.as_ref().and_then(|m| m.guest.as_ref()))
        .or_else(|| {
            q(d.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory")))
        })
        .or_else(|| {
            q(d.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .and_then(|r| r.get("memory")))
        })
}

fn compute_memory(pod: &Pod, side: &str) -> Option<i64> {
    crate::launcher::containers::compute_quantity(pod, side, "memory")
}

/// How often, and when last, the `compute` container was OOM-killed.
fn oom_killed(pod: &Pod) -> Option<(i32, Option<String>)> {
    let st = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "compute")?;
    let term = st.last_state.as_ref()?.terminated.as_ref()?;
    (term.reason.as_deref() == Some("OOMKilled")).then(|| {
        (
            st.restart_count,
            term.finished_at.as_ref().map(|t| t.0.to_string()),
        )
    })
}

/// Guest memory from which KubeVirt's maintainers call the fixed overhead estimate risky.
pub const LARGE_GUEST_BYTES: i64 = 64 * 1024 * 1024 * 1024;
/// Host devices + GPUs from which a VMI counts as "many devices".
pub const MANY_HOST_DEVICES: usize = 2;
/// Headroom above guest + base overhead below which a risky shape is flagged: this share of the
/// base overhead.
pub const RISKY_HEADROOM_PERCENT: i64 = 10;
/// An upstream defect whose overhead shortfall is below this is not flagged by the audit
/// (8 MiB: the page tables of a 4Gi guest).
pub const DEFECT_SHORTFALL_BYTES: i64 = 8 * 1024 * 1024;
/// Resident memory above this share of what the pod may use is flagged.
pub const RESIDENT_PERCENT: i64 = 90;

/// The audit's decisions over what was read: pure, one pass over the pods.
pub(crate) fn audit(inputs: &AuditInputs, namespace: Option<&str>) -> AuditReport {
    let mut report = AuditReport {
        namespace: namespace.map(str::to_string),
        kubevirt_version: inputs.kubevirt_version.clone(),
        pods_checked: 0,
        pods_skipped: Vec::new(),
        overhead_reporting: OverheadReporting::default(),
        prometheus: inputs.resident_bytes.is_some(),
        findings: Vec::new(),
        older_renderings: Vec::new(),
        missing: Vec::new(),
    };
    for launcher in launchers(inputs, &mut report.pods_skipped) {
        let vmi = launcher.vmi;
        // A VMI the formula cannot read is skipped but still counted for overhead reporting.
        report.overhead_reporting.vmis += 1;
        let reported = reported_overhead(vmi);
        if reported.is_some() {
            report.overhead_reporting.reported += 1;
        }
        let explanation = match launcher.explain(&inputs.settings) {
            Ok(e) => e,
            Err(e) => {
                report.pods_skipped.push(launcher.skip_reason(&e));
                continue;
            }
        };
        report.pods_checked += 1;
        let a = PodAudit {
            ns: launcher.ns,
            pod_name: launcher.pod_name,
            pod: launcher.pod,
            vmi,
            vmi_name: vmi.metadata.name.clone().unwrap_or_default(),
            explanation: &explanation,
            reported,
            guest: guest_bytes(vmi),
            limit: compute_memory(launcher.pod, "limits"),
            hugepages: vmi
                .spec
                .domain
                .memory
                .as_ref()
                .is_some_and(|m| m.hugepages.is_some()),
        };
        report.findings.extend(a.oom_killed());
        match a.drift(launcher.render_inputs(&inputs.settings), inputs) {
            Some(f) if f.kind == FindingKind::OlderRendering => report.older_renderings.push(f),
            other => report.findings.extend(other),
        }
        report.findings.extend(a.oom_risk());
        report.findings.extend(a.resident_near_limit(inputs));
        report.findings.extend(a.upstream_defects());
        report.findings.extend(a.risky_shape());
    }
    report.findings.sort_by(|a, b| {
        a.kind
            .cmp(&b.kind)
            .then(b.bytes.unwrap_or(0).cmp(&a.bytes.unwrap_or(0)))
            .then((&a.namespace, &a.pod).cmp(&(&b.namespace, &b.pod)))
    });
    report
}

/// The release that rendered `pod`, when its launcher image tag names one older than the
/// cluster's and the VMI rendered under that release gives the pod's resources and overhead
/// annotation exactly (KubeVirt's own audit mistake, fixed in PR 16746, was to compare every
/// pod with today's formula).
fn older_rendering(pod: &Pod, now: RenderInputs<'_>) -> Option<KubeVirtVersion> {
    let version = KubeVirtVersion::parse(&launcher_image_tag(pod)?).ok()?;
    if version >= now.settings.kubevirt_version {
        return None;
    }
    let settings = ClusterSettings {
        kubevirt_version: version,
        ..now.settings.clone()
    };
    let then = explain_in(now.object, now.default_namespace, &settings, now.namespace).ok()?;
    check_pod(&then, pod).matches.then_some(version)
}

/// A running launcher pod in scope, with its VMI and the rules of its namespace: what the
/// audit and the upgrade rehearsal render again.
pub(super) struct Launcher<'a> {
    pub ns: &'a str,
    pub pod_name: &'a str,
    pub pod: &'a Pod,
    pub vmi: &'a VirtualMachineInstance,
    object: KubeVirtObject,
    namespace: std::rc::Rc<NamespaceContext>,
}

impl Launcher<'_> {
    /// The cluster inputs to render the VMI with under `settings`.
    fn render_inputs<'s>(&'s self, settings: &'s ClusterSettings) -> RenderInputs<'s> {
        RenderInputs {
            object: &self.object,
            default_namespace: self.ns,
            settings,
            namespace: &self.namespace,
        }
    }

    /// The VMI explained (and its launcher pod rendered) under `settings`.
    pub(crate) fn explain(&self, settings: &ClusterSettings) -> Result<Explanation, ExplainError> {
        explain_in(&self.object, self.ns, settings, &self.namespace)
    }

    /// The launcher pod `settings` render for the VMI with `overhead_bytes` and the configured
    /// QEMU timeout without KubeVirt's random jitter, so that two releases' renderings differ
    /// only where their rules do.
    pub(crate) fn render_pod(
        &self,
        settings: &ClusterSettings,
        overhead_bytes: i64,
    ) -> Result<Pod, String> {
        let vmi = crate::launcher::explain::effective_vmi(&self.object, self.ns, settings)
            .map_err(|e| e.to_string())?;
        crate::launcher::pod::render_launch_manifest_with(
            &vmi,
            settings,
            &self.namespace,
            overhead_bytes,
            settings.qemu_timeout_seconds,
        )
        .map_err(|e| e.to_string())
    }

    /// The rendering the pod carries: that of the release its launcher image tag names, when
    /// older than `settings`' and matching the pod exactly ([`PodAudit::older_rendering`]),
    /// else `settings`'.
    pub(crate) fn rendering(
        &self,
        settings: &ClusterSettings,
    ) -> Result<Explanation, ExplainError> {
        if let Some(version) = older_rendering(self.pod, self.render_inputs(settings)) {
            let then = ClusterSettings {
                kubevirt_version: version,
                ..settings.clone()
            };
            return self.explain(&then);
        }
        self.explain(settings)
    }

    /// `(namespace, VMI, pod)`.
    pub(crate) fn names(&self) -> (String, String, String) {
        let vmi = self.vmi.metadata.name.clone().unwrap_or_default();
        (self.ns.to_string(), vmi, self.pod_name.to_string())
    }

    /// Why the pod is skipped when its VMI cannot be explained.
    pub(crate) fn skip_reason(&self, e: &ExplainError) -> String {
        let vmi = self.vmi.metadata.name.as_deref().unwrap_or_default();
        format!(
            "{}/{}: VirtualMachineInstance {}/{vmi}: {e}",
            self.ns, self.pod_name, self.ns
        )
    }
}

/// Every running launcher pod of `inputs` whose VMI is in the list, in list order; the others
/// are recorded in `skipped`.
pub(super) fn launchers<'a>(
    inputs: &'a AuditInputs,
    skipped: &mut Vec<String>,
) -> Vec<Launcher<'a>> {
    let index = AuditIndex::new(inputs);
    let mut contexts: BTreeMap<&str, std::rc::Rc<NamespaceContext>> = BTreeMap::new();
    let mut out = Vec::new();
    for pod in &inputs.pods {
        let Some((ns, pod_name, vmi)) = index.running_launcher_pod(pod, skipped) else {
            continue;
        };
        let namespace = contexts
            .entry(ns)
            .or_insert_with(|| std::rc::Rc::new(index.namespace_context(ns, inputs)))
            .clone();
        out.push(Launcher {
            ns,
            pod_name,
            pod,
            vmi,
            object: KubeVirtObject::Vmi(Box::new(vmi.clone())),
            namespace,
        });
    }
    out
}

/// The audit's lookups over what was read: VMIs by namespace and name, namespaces by name,
/// quotas by namespace.
struct AuditIndex<'a> {
    vmis: HashMap<(&'a str, &'a str), &'a VirtualMachineInstance>,
    namespaces: HashMap<&'a str, &'a Namespace>,
    quotas: HashMap<&'a str, Vec<&'a ResourceQuota>>,
}

impl<'a> AuditIndex<'a> {
    fn new(inputs: &'a AuditInputs) -> Self {
        let vmis = inputs
            .vmis
            .iter()
            .filter_map(|v| {
                let key = (
                    v.metadata.namespace.as_deref()?,
                    v.metadata.name.as_deref()?,
                );
                Some((key, v))
            })
            .collect();
        let namespaces = inputs
            .namespaces
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n)))
            .collect();
        let mut quotas: HashMap<&str, Vec<&ResourceQuota>> = HashMap::new();
        for q in &inputs.quotas {
            if let Some(ns) = q.metadata.namespace.as_deref() {
                quotas.entry(ns).or_default().push(q);
            }
        }
        AuditIndex {
            vmis,
            namespaces,
            quotas,
        }
    }

    /// The namespace rules the controller renders `ns`'s pods with.
    fn namespace_context(&self, ns: &str, inputs: &AuditInputs) -> NamespaceContext {
        NamespaceContext::from_cluster(
            self.namespaces.get(ns).copied(),
            self.quotas.get(ns).into_iter().flatten().copied(),
            &inputs.settings,
        )
    }

    /// A running, not deleted pod that is its VMI's own launcher pod: its namespace, name and
    /// VMI. A pod whose VMI is not in the list is recorded as skipped.
    fn running_launcher_pod(
        &self,
        pod: &'a Pod,
        skipped: &mut Vec<String>,
    ) -> Option<(&'a str, &'a str, &'a VirtualMachineInstance)> {
        let ns = pod.metadata.namespace.as_deref()?;
        let pod_name = pod.metadata.name.as_deref()?;
        let finished = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed");
        if pod.metadata.deletion_timestamp.is_some() || finished {
            return None;
        }
        let domain = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::DOMAIN));
        let Some(vmi) = domain.and_then(|d| self.vmis.get(&(ns, d.as_str()))) else {
            skipped.push(format!(
                "{ns}/{pod_name}: {}",
                match domain {
                    Some(d) => format!("its VMI {d} is not in the list"),
                    None => format!("no {} annotation", annotations::DOMAIN),
                }
            ));
            return None;
        };
        // Only the VMI's own pod.
        launcher_pod_of(vmi, std::slice::from_ref(pod))?;
        Some((ns, pod_name, vmi))
    }
}

/// One launcher pod under audit, with what the checks share.
struct PodAudit<'a> {
    ns: &'a str,
    pod_name: &'a str,
    pod: &'a Pod,
    vmi: &'a VirtualMachineInstance,
    vmi_name: String,
    explanation: &'a Explanation,
    /// `status.memory.memoryOverhead`, when the VMI reports one.
    reported: Option<i64>,
    guest: Option<i64>,
    limit: Option<i64>,
    /// With hugepages the guest is outside the memory limit (it lives in hugepages-*).
    hugepages: bool,
}

impl PodAudit<'_> {
    fn finding(&self, kind: FindingKind, message: String, bytes: Option<i64>) -> Finding {
        Finding {
            kind,
            namespace: self.ns.to_string(),
            pod: self.pod_name.to_string(),
            vmi: self.vmi_name.clone(),
            message,
            bytes,
        }
    }

    fn oom_killed(&self) -> Option<Finding> {
        let (restarts, at) = oom_killed(self.pod)?;
        Some(self.finding(
            FindingKind::OomKilled,
            format!(
                "the compute container was OOM-killed (restarts {restarts}{})",
                at.map(|t| format!(", last at {t}")).unwrap_or_default()
            ),
            None,
        ))
    }

    /// Drift from what the cluster's KubeVirt renders now.
    fn drift(&self, now: RenderInputs<'_>, inputs: &AuditInputs) -> Option<Finding> {
        let mut check = check_pod(self.explanation, self.pod);
        if check.matches {
            return None;
        }
        let older = self.older_rendering(now);
        if older.is_none() {
            check.likely_cause =
                likely_cause(now, self.pod, &check, inputs.kubevirt_version.as_deref());
        }
        let mut parts: Vec<String> = check
            .differences
            .iter()
            .map(|d| {
                format!(
                    "{} {} (KubeVirt renders {})",
                    d.resource,
                    d.pod.as_deref().unwrap_or("unset"),
                    d.rendered.as_deref().unwrap_or("none")
                )
            })
            .collect();
        if let Some(d) = check.overhead_difference_bytes.filter(|d| *d != 0) {
            parts.push(format!("overhead annotation {d:+} bytes from the formula"));
        }
        if check.annotation_overhead_bytes.is_none() {
            parts.push(format!(
                "no {} annotation",
                annotations::MEMORY_OVERHEAD_BYTES
            ));
        }
        let bytes = check
            .differences
            .iter()
            .filter(|d| d.unit == "bytes")
            .filter_map(|d| d.difference)
            .map(i64::abs)
            .max()
            .or(check.overhead_difference_bytes.map(i64::abs));
        let cause = check
            .likely_cause
            .as_deref()
            .map(|c| format!(". Likely cause: {c}"))
            .unwrap_or_default();
        if let Some(version) = older {
            return Some(self.finding(
                FindingKind::OlderRendering,
                format!(
                    "rendered by KubeVirt {} (its launcher image tag) as that release renders it; \
                     on its next restart the cluster's {} renders it otherwise: {}",
                    version.name(),
                    now.settings.kubevirt_version.name(),
                    parts.join("; ")
                ),
                bytes,
            ));
        }
        Some(self.finding(
            FindingKind::Drift,
            format!("{}{cause}", parts.join("; ")),
            bytes,
        ))
    }

    fn older_rendering(&self, now: RenderInputs<'_>) -> Option<KubeVirtVersion> {
        older_rendering(self.pod, now)
    }

    /// OOM risk: the limit must hold guest + overhead (reported overhead where there is one).
    fn oom_risk(&self) -> Option<Finding> {
        let overhead = self
            .reported
            .unwrap_or(self.explanation.overhead.total_bytes);
        let source = if self.reported.is_some() {
            "status.memory.memoryOverhead"
        } else {
            "the formula's overhead"
        };
        let (g, l) = (self.guest?, self.limit?);
        let above = if self.hugepages { l } else { l - g };
        if above >= overhead {
            return None;
        }
        let guest = if self.hugepages {
            "in hugepages".to_string()
        } else {
            human_bytes(g)
        };
        Some(self.finding(
            FindingKind::OomRisk,
            format!(
                "memory limit {} leaves {} above the guest ({guest}), {source} is {}: {} short",
                human_bytes(l),
                human_bytes(above),
                human_bytes(overhead),
                human_bytes(overhead - above)
            ),
            Some(overhead - above),
        ))
    }

    /// Resident memory against what the pod may use.
    fn resident_near_limit(&self, inputs: &AuditInputs) -> Option<Finding> {
        let resident = inputs
            .resident_bytes
            .as_ref()?
            .get(&format!("{}/{}", self.ns, self.vmi_name))?;
        let (cap, what) = match self.limit {
            Some(l) => (Some(l), "memory limit"),
            None => (compute_memory(self.pod, "requests"), "memory request"),
        };
        let cap = cap.filter(|c| *c > 0)?;
        if resident * 100 < cap * RESIDENT_PERCENT {
            return None;
        }
        Some(self.finding(
            FindingKind::ResidentNearLimit,
            format!(
                "guest resident memory {} (kubevirt_vmi_memory_resident_bytes) is {}% of the pod's {what} {}",
                human_bytes(*resident),
                resident * 100 / cap,
                human_bytes(cap)
            ),
            Some(resident - cap),
        ))
    }

    /// Known upstream defects of the version's rendering: a rejected pod always, a shortfall
    /// from 8 MiB (a 4Gi guest-only VMI; a 512Mi one misses 1 MiB of page tables, less than
    /// the fixed estimates' own rounding).
    fn upstream_defects(&self) -> Vec<Finding> {
        self.explanation
            .warnings
            .iter()
            .filter(|w| {
                w.shortfall_bytes
                    .is_none_or(|b| b >= DEFECT_SHORTFALL_BYTES)
            })
            .map(|w| {
                self.finding(
                    FindingKind::UpstreamDefect,
                    format!("{} ({})", w.message, w.upstream),
                    w.shortfall_bytes,
                )
            })
            .collect()
    }

    /// Shapes for which the fixed estimate is known to be tight.
    fn risky_shape(&self) -> Option<Finding> {
        let mut shape = Vec::new();
        if self.guest.is_some_and(|g| g >= LARGE_GUEST_BYTES) {
            shape.push(format!(
                "{} guest memory",
                human_bytes(self.guest.unwrap_or(0))
            ));
        }
        let spec = &self.vmi.spec;
        if spec.is_cpu_dedicated() {
            shape.push("dedicated CPUs".to_string());
        }
        let devices = spec
            .domain
            .devices
            .host_devices
            .as_ref()
            .map_or(0, |d| d.len())
            + spec.domain.devices.gpus.as_ref().map_or(0, |d| d.len());
        if devices >= MANY_HOST_DEVICES {
            shape.push(format!("{devices} host devices/GPUs"));
        }
        if shape.is_empty() {
            return None;
        }
        let base: i64 = self
            .explanation
            .overhead
            .terms
            .iter()
            .filter(|t| t.name != "overheadRatio")
            .map(|t| t.bytes)
            .sum();
        let guest = self.guest?;
        let room = self.limit.or(compute_memory(self.pod, "requests"))?;
        let inside = if self.hugepages { room } else { room - guest };
        let headroom = inside - base;
        if headroom < 0 || headroom * 100 >= base * RISKY_HEADROOM_PERCENT {
            return None;
        }
        Some(self.finding(
            FindingKind::RiskyShape,
            format!(
                "{}: only {} above the fixed overhead estimate ({}); consider additionalGuestMemoryOverheadRatio or reservedOverhead",
                shape.join(", "),
                human_bytes(headroom),
                human_bytes(base)
            ),
            None,
        ))
    }
}

/// Read what the audit needs for `namespace` (`None`: every namespace) — one list each — and
/// audit it. `progress` is told what is being read.
pub async fn gather_audit(
    client: &kube::Client,
    namespace: Option<&str>,
    opts: &GatherOptions,
    prometheus: Option<&str>,
    progress: &mut dyn FnMut(&str),
) -> Result<AuditReport, ClusterError> {
    let (inputs, missing) =
        gather_audit_inputs(client, namespace, opts, prometheus, progress).await?;
    progress(&format!(
        "checking {} virt-launcher pods",
        inputs.pods.len()
    ));
    let mut report = audit(&inputs, namespace);
    report.missing.extend(missing);
    Ok(report)
}

/// What [`audit`] reads, with one list each, and what could not be read.
pub(super) async fn gather_audit_inputs(
    client: &kube::Client,
    namespace: Option<&str>,
    opts: &GatherOptions,
    prometheus: Option<&str>,
    progress: &mut dyn FnMut(&str),
) -> Result<(AuditInputs, Vec<Missing>), ClusterError> {
    let lp = ListParams::default();
    let (pods_api, vmis_api, quotas_api): (
        Api<Pod>,
        Api<VirtualMachineInstance>,
        Api<ResourceQuota>,
    ) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    progress("listing virt-launcher pods, VMIs, namespaces, ResourceQuotas and the KubeVirt CR");
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let launchers = ListParams::default().labels(LAUNCHER_SELECTOR);
    let (pods, vmis, quotas, namespaces, kubevirt) = tokio::join!(
        pods_api.list(&launchers),
        vmis_api.list(&lp),
        quotas_api.list(&lp),
        async {
            match namespace {
                Some(ns) => {
                    found(ns_api.get_opt(ns).await, format!("namespace/{ns}")).map(|n| vec![n])
                }
                None => ns_api
                    .list(&lp)
                    .await
                    .map(|l| l.items)
                    .map_err(|e| Missing {
                        what: "namespaces".into(),
                        reason: describe_error(&e),
                    }),
            }
        },
        read_kubevirt(client, &opts.kubevirt_namespace),
    );
    let scope = namespace.map_or("every namespace".to_string(), |n| format!("namespace {n}"));
    let pods = pods.map_err(|e| {
        if is_transport(&e) {
            ClusterError::Unreachable(format!("list pods in {scope}: {}", describe_error(&e)))
        } else {
            ClusterError::Invalid(format!("list pods in {scope}: {}", describe_error(&e)))
        }
    })?;
    let vmis = vmis.map_err(|e| {
        ClusterError::Invalid(format!(
            "list VirtualMachineInstances in {scope}: {}",
            describe_error(&e)
        ))
    })?;
    let mut missing = Vec::new();
    let quotas = quotas.map(|l| l.items).unwrap_or_else(|e| {
        missing.push(Missing {
            what: "resourceQuotas".into(),
            reason: format!(
                "{}; limits are rendered as without a quota",
                describe_error(&e)
            ),
        });
        Vec::new()
    });
    let namespaces = namespaces.unwrap_or_else(|m| {
        missing.push(Missing {
            what: m.what,
            reason: format!("{}; rendered as in namespaces without labels", m.reason),
        });
        Vec::new()
    });
    let (mut settings, kubevirt_version) = kubevirt.unwrap_or_else(|m| {
        missing.push(m);
        (ClusterSettings::default(), None)
    });
    select_version(&mut settings, kubevirt_version.as_deref(), &mut missing);
    let resident_bytes = match prometheus {
        None => None,
        Some(url) => {
            progress("querying Prometheus for kubevirt_vmi_memory_resident_bytes");
            match resident_memory(url, opts.timeout).await {
                Ok(map) => Some(map),
                Err(reason) => {
                    missing.push(Missing {
                        what: format!("prometheus {url}"),
                        reason,
                    });
                    None
                }
            }
        }
    };
    let inputs = AuditInputs {
        pods: pods.items,
        vmis: vmis.items,
        namespaces,
        quotas,
        settings,
        kubevirt_version,
        resident_bytes,
    };
    Ok((inputs, missing))
}

/// `kubevirt_vmi_memory_resident_bytes` by `namespace/name`, from a Prometheus HTTP API at
/// `url` (`/api/v1/query`, instant vector; labels `namespace` and `name` as KubeVirt exports
/// them). The reason as text when it cannot be read.
pub(crate) async fn resident_memory(
    url: &str,
    timeout: std::time::Duration,
) -> Result<HashMap<String, i64>, String> {
    let base: http::Uri = url
        .trim_end_matches('/')
        .parse()
        .map_err(|e| format!("not a URL: {e}"))?;
    let mut config = kube::Config::new(base);
    config.read_timeout = Some(timeout);
    config.connect_timeout = Some(timeout);
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let request = http::Request::get("/api/v1/query?query=kubevirt_vmi_memory_resident_bytes")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    let text = client
        .request_text(request)
        .await
        .map_err(|e| crate::runtime::error_chain(&e))?;
    parse_resident_memory(&text)
}

/// The `namespace/name → bytes` map of a Prometheus instant-query answer.
pub(crate) fn parse_resident_memory(text: &str) -> Result<HashMap<String, i64>, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a Prometheus answer: {e}"))?;
    if v["status"] != "success" {
        return Err(format!(
            "Prometheus answered {}: {}",
            v["status"],
            v["error"].as_str().unwrap_or("")
        ));
    }
    let mut out = HashMap::new();
    for sample in v["data"]["result"].as_array().into_iter().flatten() {
        let (Some(ns), Some(name)) = (
            sample["metric"]["namespace"].as_str(),
            sample["metric"]["name"].as_str(),
        ) else {
            continue;
        };
        if let Some(bytes) = sample["value"][1]
            .as_str()
            .and_then(|s| s.parse::<f64>().ok())
        {
            out.insert(format!("{ns}/{name}"), bytes as i64);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::vmi::executor::render_pod_with;
    use serde_json::json;

    fn vmi(name: &str, domain: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"domain": domain}
        }))
        .unwrap()
    }

    fn inputs(vmis: Vec<VirtualMachineInstance>, settings: ClusterSettings) -> AuditInputs {
        let pods = vmis
            .iter()
            .map(|v| {
                let mut p = render_pod_with(&settings, &NamespaceContext::default(), v).unwrap();
                p.metadata.name = Some(format!(
                    "virt-launcher-{}",
                    v.metadata.name.as_deref().unwrap()
                ));
                p
            })
            .collect();
        AuditInputs {
            pods,
            vmis,
            settings,
            ..Default::default()
        }
    }

    #[test]
    fn risky_shapes_are_flagged_only_with_little_headroom_above_the_fixed_estimate() {
        let dedicated = vmi(
            "pinned",
            json!({"devices": {}, "cpu": {"cores": 4, "dedicatedCpuPlacement": true},
                   "resources": {"requests": {"memory": "4Gi", "cpu": "4"}, "limits": {"memory": "4Gi", "cpu": "4"}}}),
        );
        let plain = vmi(
            "plain",
            json!({"devices": {}, "resources": {"requests": {"memory": "4Gi"}}}),
        );
        let r = audit(
            &inputs(
                vec![dedicated.clone(), plain.clone()],
                ClusterSettings::default(),
            ),
            None,
        );
        assert_eq!(r.pods_checked, 2);
        let kinds: Vec<(&str, FindingKind)> = r
            .findings
            .iter()
            .map(|f| (f.vmi.as_str(), f.kind))
            .collect();
        assert_eq!(
            kinds,
            [("pinned", FindingKind::RiskyShape)],
            "{:#?}",
            r.findings
        );
        assert!(
            r.findings[0].message.contains("dedicated CPUs"),
            "{}",
            r.findings[0].message
        );
        // With an overhead ratio the pod has headroom above the fixed estimate: not flagged.
        let roomy = ClusterSettings {
            additional_guest_memory_overhead_ratio: Some("1.5".into()),
            ..Default::default()
        };
        let r = audit(&inputs(vec![dedicated, plain], roomy), None);
        assert!(r.findings.is_empty(), "{:#?}", r.findings);
    }

    /// A fleet rendered by v1.5.0 (video 16Mi, the 100Mi after the ratio) and audited on a
    /// v1.9.0 cluster: each pod agrees with its own release, so it is an older rendering, not
    /// drift; a pod whose tag names v1.5.0 but whose resources fit no release stays drift.
    #[test]
    fn pods_rendered_by_an_older_release_are_older_renderings_not_drift() {
        let old = ClusterSettings {
            kubevirt_version: KubeVirtVersion::V1_5,
            launcher_image: "quay.io/kubevirt/virt-launcher:v1.5.0".into(),
            ..Default::default()
        };
        let shapes = [
            (
                "plain",
                json!({"devices": {}, "resources": {"requests": {"memory": "2Gi"}}}),
            ),
            (
                "guaranteed",
                json!({"devices": {}, "resources": {"requests": {"memory": "2Gi", "cpu": "2"},
                       "limits": {"memory": "2Gi", "cpu": "2"}}}),
            ),
        ];
        let vmis = shapes.iter().map(|(n, d)| vmi(n, d.clone())).collect();
        let mut i = inputs(vmis, old);
        i.settings = ClusterSettings::default();
        i.kubevirt_version = Some("v1.9.0".into());
        let r = audit(&i, None);
        assert_eq!(r.pods_checked, 2);
        assert!(
            r.findings.iter().all(|f| f.kind != FindingKind::Drift),
            "{:#?}",
            r.findings
        );
        let older: Vec<&str> = r.older_renderings.iter().map(|f| f.vmi.as_str()).collect();
        assert_eq!(older, ["plain", "guaranteed"], "{:#?}", r.older_renderings);
        assert!(
            r.older_renderings[0]
                .message
                .contains("rendered by KubeVirt v1.5.0"),
            "{}",
            r.older_renderings[0].message
        );
        // The same pods on a v1.5.0 cluster match: nothing to report.
        let mut same = i.clone();
        same.settings.kubevirt_version = KubeVirtVersion::V1_5;
        let r = audit(&same, None);
        assert!(
            r.older_renderings.is_empty() && r.findings.is_empty(),
            "{r:#?}"
        );
        // A pod changed after it was rendered fits neither release: drift.
        let compute = i.pods[0].spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap();
        compute.requests.as_mut().unwrap().insert(
            "memory".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("3Gi".into()),
        );
        let r = audit(&i, None);
        let drift: Vec<&str> = r
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::Drift)
            .map(|f| f.vmi.as_str())
            .collect();
        assert_eq!(drift, ["plain"], "{:#?}", r.findings);
        assert_eq!(r.older_renderings.len(), 1);
    }

    #[test]
    fn pods_of_gone_vmis_are_listed_as_not_checked_and_final_pods_are_ignored() {
        let mut i = inputs(
            vec![vmi(
                "a",
                json!({"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}),
            )],
            ClusterSettings::default(),
        );
        let mut done = i.pods[0].clone();
        done.metadata.name = Some("virt-launcher-a-old".into());
        done.status = Some(serde_json::from_value(json!({"phase": "Failed"})).unwrap());
        i.pods.push(done);
        i.vmis.clear();
        let r = audit(&i, Some("ns"));
        assert_eq!(r.pods_checked, 0);
        assert_eq!(r.pods_skipped.len(), 1, "{:?}", r.pods_skipped);
        assert!(r.pods_skipped[0].contains("its VMI a is not in the list"));
    }

    #[test]
    fn prometheus_answers_are_read_by_namespace_and_name() {
        let m = parse_resident_memory(
            r#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"namespace":"ns","name":"a"},"value":[1,"1048576"]},
            {"metric":{"name":"no-namespace"},"value":[1,"5"]}]}}"#,
        )
        .unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m["ns/a"], 1_048_576);
        let e = parse_resident_memory(r#"{"status":"error","error":"bad query"}"#).unwrap_err();
        assert!(e.contains("bad query"), "{e}");
        assert!(
            parse_resident_memory("<html>")
                .unwrap_err()
                .contains("not a Prometheus answer")
        );
    }
}
