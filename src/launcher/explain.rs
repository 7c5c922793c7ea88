//! The data behind `explain-overhead`: for one VM or VMI, the overhead breakdown and the `compute`
//! container resources the selected KubeVirt release (v1.9.0 unless told otherwise,
//! [`crate::kubevirt_version`]) would render, the known upstream defects that hit it
//! ([`super::defects`]), and optionally a check against a real pod.
//!
//! The JSON/YAML shape of [`Explanation`] is a stable interface (documented in
//! docs/explain-overhead.md): `{"kind", "namespace", "name", "overhead": {"totalBytes", "terms":
//! [{"name", "bytes", "reason", "source"}]}, "computeResources": {"requests", "limits"},
//! "kubevirtVersion", "warnings"?: [{"id", "message", "upstream"}], "podCheck"?}`.

use super::defects::{Warning, known_defects};
use super::overhead::{OverheadBreakdown, memory_overhead_with};
use super::pod_changes::{SpecHistory, spec_history};
use super::renderer::render_compute_resources;
use super::resources::{ComputeResources, NamespaceContext};
use crate::api::defaults::apply_admission_defaults;
use crate::api::manifest::KubeVirtObject;
use crate::api::quantity::ParsedQuantity;
use crate::api::resources::{FieldError, VmiResources};
use crate::api::vmi::VirtualMachineInstanceSpec;
use crate::api::{VirtualMachineInstance, annotations};
use crate::config::ClusterSettings;
use crate::kubevirt_version::KubeVirtVersion;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

/// Result of comparing a real virt-launcher pod with the formula.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodCheck {
    /// `namespace/name` of the pod.
    pub pod: String,
    /// The pod's `kubevirt.io/memory-overhead-bytes` annotation, if present and numeric.
    pub annotation_overhead_bytes: Option<i64>,
    /// Formula total in bytes.
    pub formula_overhead_bytes: i64,
    /// annotation − formula (bytes), `None` without annotation.
    pub overhead_difference_bytes: Option<i64>,
    /// The pod's `compute` container memory request in bytes.
    pub pod_memory_request_bytes: Option<i64>,
    /// The memory request KubeVirt would render, in bytes.
    pub formula_memory_request_bytes: Option<i64>,
    /// pod − formula (bytes).
    pub memory_request_difference_bytes: Option<i64>,
    /// Every request and limit of the `compute` container where the pod and the rendering
    /// disagree (resources either side has; the pod's own values, not the formula's, on the
    /// left).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<ResourceDifference>,
    /// True when the overhead annotation equals the formula and every resource agrees.
    #[serde(rename = "match")]
    pub matches: bool,
    /// Why the pod most likely differs (see [`likely_cause`]); `None` when it matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likely_cause: Option<String>,
    /// Problems reading the pod (missing container, unparseable quantity ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// One request or limit of the `compute` container on which a pod and the rendering disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDifference {
    /// `requests.memory`, `limits.cpu`, `limits.devices.kubevirt.io/kvm`, ...
    pub resource: String,
    /// The pod's quantity as written (`None`: the pod has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The rendered quantity (`None`: KubeVirt would render none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered: Option<String>,
    /// pod − rendered, in [`ResourceDifference::unit`]s; a missing side counts as 0.
    /// `None` when a quantity does not parse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difference: Option<i64>,
    /// `bytes` (memory, hugepages, storage), `millicores` (cpu) or `units` (devices).
    pub unit: String,
}

/// One object explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `VirtualMachine` or `VirtualMachineInstance`.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub overhead: OverheadBreakdown,
    pub compute_resources: ComputeResources,
    /// The KubeVirt release whose formula and renderer were reproduced.
    #[serde(default)]
    pub kubevirt_version: KubeVirtVersion,
    /// Known upstream defects that hit this object with that release ([`super::defects`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_check: Option<PodCheck>,
}

/// Why an object could not be explained.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExplainError {
    /// The VM has no `spec.template.spec`.
    #[error("field {0}: required field is missing")]
    Missing(&'static str),
    /// A quantity in the spec is invalid or the compute resources cannot be rendered (the field
    /// path is relative to the object).
    #[error("field {0}")]
    Field(#[from] FieldError),
    /// virt-api would reject the object.
    #[error("{0}")]
    Admission(crate::api::defaults::DefaultsError),
}

/// The VMI a VM would start (template spec and metadata, named after the VM) or the VMI itself,
/// with virt-api's admission defaults applied (see [`crate::api::defaults`]).
pub(crate) fn effective_vmi(
    object: &KubeVirtObject,
    default_namespace: &str,
    settings: &ClusterSettings,
) -> Result<VirtualMachineInstance, ExplainError> {
    let mut vmi = match object {
        KubeVirtObject::Vmi(vmi) => (**vmi).clone(),
        KubeVirtObject::Vm(vm) => {
            let template = vm
                .spec
                .template
                .as_ref()
                .ok_or(ExplainError::Missing("spec.template"))?;
            let spec: VirtualMachineInstanceSpec = template
                .spec
                .clone()
                .ok_or(ExplainError::Missing("spec.template.spec"))?;
            let mut metadata = template
                .metadata
                .as_ref()
                .map(crate::api::vm::TemplateMeta::to_object_meta)
                .unwrap_or_default();
            metadata.name = vm.metadata.name.clone();
            metadata.namespace = vm.metadata.namespace.clone();
            VirtualMachineInstance::new(metadata, spec)
        }
    };
    if vmi.metadata.namespace.is_none() {
        vmi.metadata.namespace = Some(default_namespace.to_string());
    }
    apply_admission_defaults(&mut vmi.spec, &settings.admission())
        .map_err(ExplainError::Admission)?;
    Ok(vmi)
}

/// Explain one VM or VMI: overhead terms and compute resources, in a namespace without
/// ResourceQuotas or labels ([`explain_in`] with [`NamespaceContext::default`]).
///
/// Errors name the spec field at fault (relative to the VMI spec; for a VM the caller prefixes
/// `spec.template.`).
pub fn explain(
    object: &KubeVirtObject,
    default_namespace: &str,
    settings: &ClusterSettings,
) -> Result<Explanation, ExplainError> {
    explain_in(
        object,
        default_namespace,
        settings,
        &NamespaceContext::default(),
    )
}

/// [`explain`] with what the renderer knows of the namespace (labels, ResourceQuotas: the
/// automatic CPU and memory limits of template.go).
pub(crate) fn explain_in(
    object: &KubeVirtObject,
    default_namespace: &str,
    settings: &ClusterSettings,
    namespace: &NamespaceContext,
) -> Result<Explanation, ExplainError> {
    explain_with_overhead(object, default_namespace, settings, namespace, None)
}

/// [`explain_in`], rendering the compute resources with `overhead` bytes instead of the
/// formula's total when given (what a pod rendered with another overhead would carry).
fn explain_with_overhead(
    object: &KubeVirtObject,
    default_namespace: &str,
    settings: &ClusterSettings,
    namespace: &NamespaceContext,
    overhead_override: Option<i64>,
) -> Result<Explanation, ExplainError> {
    let vmi = effective_vmi(object, default_namespace, settings)?;
    // The VMI spec of a VM is its template's spec: errors name the VM's field.
    let prefix = match object {
        KubeVirtObject::Vm(_) => "spec.template.",
        KubeVirtObject::Vmi(_) => "",
    };
    let resources = VmiResources::parse(&vmi.spec).map_err(|e| e.with_field_prefix(prefix))?;
    let overhead = memory_overhead_with(&vmi.spec, &resources, settings);
    let compute_resources = render_compute_resources(
        &vmi,
        &resources,
        settings,
        overhead_override.unwrap_or(overhead.total_bytes),
        namespace,
    )
    .map_err(|e| e.with_field_prefix(prefix))?;
    let warnings = known_defects(&vmi, &resources, settings, &compute_resources);
    Ok(Explanation {
        kind: object.kind().to_string(),
        namespace: vmi.metadata.namespace.clone().unwrap_or_default(),
        name: object.name().to_string(),
        overhead,
        compute_resources,
        kubevirt_version: settings.kubevirt_version,
        warnings,
        pod_check: None,
    })
}

fn quantity_bytes(q: Option<&Quantity>) -> Result<Option<i64>, String> {
    q.map(|q| {
        ParsedQuantity::parse(&q.0)
            .map(|p| p.value())
            .map_err(|e| e.to_string())
    })
    .transpose()
}

/// Compare a real virt-launcher pod with an explanation: the overhead annotation against the
/// formula total, and the `compute` container's memory request against the rendered one.
pub(crate) fn check_pod(explanation: &Explanation, pod: &Pod) -> PodCheck {
    let mut notes = Vec::new();
    let meta = &pod.metadata;
    let pod_name = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(&explanation.namespace),
        meta.name.as_deref().unwrap_or("<no name>")
    );
    let annotation = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::MEMORY_OVERHEAD_BYTES));
    let annotation_overhead_bytes = match annotation {
        None => {
            notes.push(format!(
                "pod has no {} annotation",
                annotations::MEMORY_OVERHEAD_BYTES
            ));
            None
        }
        Some(text) => match text.trim().parse::<i64>() {
            Ok(v) => Some(v),
            Err(_) => {
                notes.push(format!(
                    "annotation {} is not a whole number of bytes: {text:?}",
                    annotations::MEMORY_OVERHEAD_BYTES
                ));
                None
            }
        },
    };
    let compute = super::containers::compute_container(pod);
    if compute.is_none() {
        notes.push("pod has no container named compute".into());
    }
    let pod_memory_request_bytes = match quantity_bytes(
        compute
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory")),
    ) {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!("compute container resources.requests.memory: {e}"));
            None
        }
    };
    let formula_memory_request_bytes = explanation.compute_resources.request_value("memory");
    let formula = explanation.overhead.total_bytes;
    let overhead_difference_bytes = annotation_overhead_bytes.map(|a| a - formula);
    let memory_request_difference_bytes =
        match (pod_memory_request_bytes, formula_memory_request_bytes) {
            (Some(p), Some(f)) => Some(p - f),
            _ => None,
        };
    let differences = compute
        .map(|c| compare_compute_resources(&explanation.compute_resources, c))
        .unwrap_or_default();
    let matches = overhead_difference_bytes == Some(0)
        && memory_request_difference_bytes == Some(0)
        && differences.is_empty();
    PodCheck {
        pod: pod_name,
        annotation_overhead_bytes,
        formula_overhead_bytes: formula,
        overhead_difference_bytes,
        pod_memory_request_bytes,
        formula_memory_request_bytes,
        memory_request_difference_bytes,
        differences,
        matches,
        likely_cause: None,
        notes,
    }
}

/// The unit a resource is compared in: millicores for `cpu`, bytes for memory, hugepages and
/// storage, whole units for devices.
fn unit_of(resource: &str) -> &'static str {
    if resource == "cpu" {
        "millicores"
    } else if resource == "memory"
        || resource.starts_with("hugepages-")
        || resource == "ephemeral-storage"
    {
        "bytes"
    } else {
        "units"
    }
}

/// Every request and limit on which the `compute` container and the rendering disagree
/// (compared as numbers: `1Gi` and `1073741824` agree), sorted by resource.
pub(crate) fn compare_compute_resources(
    rendered: &ComputeResources,
    compute: &k8s_openapi::api::core::v1::Container,
) -> Vec<ResourceDifference> {
    // Both sides as the API server stores a pod (a limit without a request gives the
    // request): a running pod has those defaults, a pod file written by hand may not.
    let rendered = rendered.as_stored();
    let res = compute.resources.as_ref();
    let pod = ComputeResources {
        requests: res.and_then(|r| r.requests.clone()).unwrap_or_default(),
        limits: res.and_then(|r| r.limits.clone()).unwrap_or_default(),
        claims: Vec::new(),
    }
    .as_stored();
    let (pod_requests, pod_limits) = (&pod.requests, &pod.limits);
    let mut out = Vec::new();
    for (side, pod, want) in [
        ("requests", pod_requests, &rendered.requests),
        ("limits", pod_limits, &rendered.limits),
    ] {
        let names: std::collections::BTreeSet<&String> = pod.keys().chain(want.keys()).collect();
        for name in names {
            let unit = unit_of(name);
            let amount = |q: Option<&Quantity>| -> Option<Option<i64>> {
                match q {
                    None => Some(None),
                    Some(q) => ParsedQuantity::parse(&q.0).ok().map(|p| {
                        Some(if unit == "millicores" {
                            p.milli_value()
                        } else {
                            p.value()
                        })
                    }),
                }
            };
            let (p, r) = (pod.get(name), want.get(name));
            let difference = match (amount(p), amount(r)) {
                (Some(a), Some(b)) => {
                    if a == b {
                        continue;
                    }
                    Some(a.unwrap_or(0) - b.unwrap_or(0))
                }
                _ if p.map(|q| &q.0) == r.map(|q| &q.0) => continue,
                _ => None,
            };
            out.push(ResourceDifference {
                resource: format!("{side}.{name}"),
                pod: p.map(|q| q.0.clone()),
                rendered: r.map(|q| q.0.clone()),
                difference,
                unit: unit.to_string(),
            });
        }
    }
    out
}

/// What a pod was rendered from, for [`likely_cause`]: the VM/VMI, the namespace default, the
/// cluster settings and namespace context of today.
#[derive(Debug, Clone, Copy)]
pub struct RenderInputs<'a> {
    /// The VMI (or the VM whose template starts it).
    pub object: &'a KubeVirtObject,
    /// Namespace used when the object names none.
    pub default_namespace: &'a str,
    /// Today's cluster settings.
    pub settings: &'a ClusterSettings,
    /// Today's namespace context.
    pub namespace: &'a NamespaceContext,
}

/// The tag of the `compute` container's image (`v1.8.2` of `.../virt-launcher:v1.8.2`), if any.
pub(crate) fn launcher_image_tag(pod: &Pod) -> Option<String> {
    let image = super::containers::compute_container(pod)?
        .image
        .as_deref()?;
    let (_, tag) = image.rsplit_once(':')?;
    (!tag.contains('/')).then(|| tag.split('@').next().unwrap_or(tag).to_string())
}

/// Why a launcher pod most likely differs from today's rendering, found by rendering again
/// under each hypothesis and keeping the first under which the pod agrees in every resource:
///
/// 1. another overhead (the pod's `kubevirt.io/memory-overhead-bytes` ≠ the formula): the pod
///    was rendered by another KubeVirt version (its launcher image tag says which) or with
///    other overhead settings (`additionalGuestMemoryOverheadRatio`, binding plugins);
/// 2. another `cpuAllocationRatio` or `memoryOvercommit` (the ratio the pod implies);
/// 3. only a limit the VMI does not set differs: the namespace's ResourceQuotas or its
///    `alpha.kubevirt.io/auto-memory-limits-ratio` label changed since the pod started;
/// 4. none: the pod changed after it was rendered: since its creation when its status shows a
///    resize under way or its `metadata.generation` is above what its binding, deletion,
///    ephemeral containers and added tolerations account for (compared with the rendering:
///    [`super::pod_changes`]), else at admission (a mutating webhook, a LimitRange).
///
/// `cluster_version` is the KubeVirt version the cluster reports, when known.
pub(crate) fn likely_cause(
    inputs: RenderInputs,
    pod: &Pod,
    check: &PodCheck,
    cluster_version: Option<&str>,
) -> Option<String> {
    if check.matches {
        return None;
    }
    let compute = super::containers::compute_container(pod)?;
    let agrees = |settings: &ClusterSettings, overhead: Option<i64>| {
        explain_with_overhead(
            inputs.object,
            inputs.default_namespace,
            settings,
            inputs.namespace,
            overhead,
        )
        .is_ok_and(|e| compare_compute_resources(&e.compute_resources, compute).is_empty())
    };
    let tag = launcher_image_tag(pod);
    let version_note = match (tag.as_deref(), cluster_version) {
        (Some(t), Some(c)) if t != c => format!(
            "its launcher image is {t} while the cluster runs KubeVirt {c}: rendered by another KubeVirt version"
        ),
        (Some(t), _) => format!(
            "its launcher image is {t}: rendered by another KubeVirt version, or with other overhead settings (additionalGuestMemoryOverheadRatio, network binding plugins) than today's"
        ),
        (None, _) => "rendered by another KubeVirt version, or with other overhead settings (additionalGuestMemoryOverheadRatio, network binding plugins) than today's".to_string(),
    };
    // 1. The overhead the pod says it was rendered with.
    if let (Some(a), Some(d)) = (
        check.annotation_overhead_bytes,
        check.overhead_difference_bytes,
    ) && d != 0
        && agrees(inputs.settings, Some(a))
    {
        return Some(format!(
            "the pod was rendered with an overhead of {a} bytes (its {} annotation), today's formula gives {} ({d:+} bytes): {version_note}",
            annotations::MEMORY_OVERHEAD_BYTES,
            check.formula_overhead_bytes
        ));
    }
    let overhead = check.annotation_overhead_bytes;
    // 2. The cluster settings the pod's CPU / memory requests imply.
    let value = |side: &str, name: &str| -> Option<ParsedQuantity> {
        let r = compute.resources.as_ref()?;
        let m = if side == "requests" {
            r.requests.as_ref()
        } else {
            r.limits.as_ref()
        }?;
        ParsedQuantity::parse(&m.get(name)?.0).ok()
    };
    let vmi = effective_vmi(inputs.object, inputs.default_namespace, inputs.settings).ok()?;
    let vcpus = vmi.spec.domain.cpu.as_ref().map_or(1, |c| c.vcpus().max(1));
    if let Some(cpu) = value("requests", "cpu").filter(|q| q.milli_value() > 0) {
        let implied = ((vcpus * 1000) as f64 / cpu.milli_value() as f64).round() as u32;
        if implied >= 1 && implied != inputs.settings.cpu_allocation_ratio {
            let mut s = inputs.settings.clone();
            s.cpu_allocation_ratio = implied;
            if agrees(&s, overhead) {
                return Some(format!(
                    "the pod's CPU request {} fits cpuAllocationRatio {implied}, today's is {}: the cluster settings changed since the pod started",
                    cpu.to_canonical(),
                    inputs.settings.cpu_allocation_ratio
                ));
            }
        }
    }
    if let (Some(guest), Some(req), Some(a)) = (
        vmi.spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.guest.as_ref())
            .and_then(|g| ParsedQuantity::parse(&g.0).ok()),
        value("requests", "memory"),
        overhead,
    ) {
        let base = req.value() - a;
        if base > 0 {
            let implied = ((guest.value() as f64) * 100.0 / base as f64).round() as u32;
            if implied >= 1 && implied != inputs.settings.memory_overcommit {
                let mut s = inputs.settings.clone();
                s.memory_overcommit = implied;
                if agrees(&s, overhead) {
                    return Some(format!(
                        "the pod's memory request fits memoryOvercommit {implied}%, today's is {}%: the cluster settings changed since the pod started",
                        inputs.settings.memory_overcommit
                    ));
                }
            }
        }
    }
    // 3. Only automatic limits differ.
    let user_limit = |name: &str| {
        vmi.spec
            .domain
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .is_some_and(|l| l.contains_key(name))
    };
    let automatic = |d: &ResourceDifference| {
        (d.resource == "limits.memory" && !user_limit("memory"))
            || (d.resource == "limits.cpu" && !user_limit("cpu"))
    };
    if !check.differences.is_empty() && check.differences.iter().all(automatic) {
        let what = check
            .differences
            .iter()
            .map(|d| d.resource.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        return Some(format!(
            "only the automatic {what} differs (the VMI sets no such limit): the namespace's ResourceQuotas (limits.cpu / limits.memory), its alpha.kubevirt.io/auto-memory-limits-ratio label or the autoCPULimitNamespaceLabelSelector changed since the pod started"
        ));
    }
    // 4. Changed after rendering: since creation, or at admission.
    if check.overhead_difference_bytes == Some(0) || check.annotation_overhead_bytes.is_none() {
        let rendered = super::pod::render_launch_manifest(
            &vmi,
            inputs.settings,
            inputs.namespace,
            &mut rand::rng(),
        )
        .ok();
        return Some(changed_after_rendering(spec_history(
            pod,
            rendered.as_ref(),
        )));
    }
    Some(format!(
        "the overhead and the resources both differ and no single change explains it: {version_note}"
    ))
}

/// The likely cause of a pod whose resources differ from its own rendering, from what the pod
/// tells about its spec since creation.
fn changed_after_rendering(history: SpecHistory) -> String {
    const AT_ADMISSION: &str = "the pod's resources differ from the rendering its own overhead annotation implies: changed at admission (a mutating webhook or a LimitRange), or created by something other than virt-controller";
    match history {
        SpecHistory::Resizing(evidence) => format!(
            "the pod is being resized in place ({evidence}): its resources were changed after it was created"
        ),
        SpecHistory::Updated {
            generation,
            accounted,
        } => format!(
            "the pod's spec was updated after it was created (metadata.generation {generation}; its binding, deletion, ephemeral containers and added tolerations account for at most {accounted}): resized in place or edited by hand"
        ),
        SpecHistory::Unchanged { accounted, .. } if accounted.is_empty() => AT_ADMISSION.into(),
        SpecHistory::Unchanged {
            generation,
            accounted,
        } => format!(
            "{AT_ADMISSION}; its metadata.generation {generation} is accounted for by {}, so nothing shows a change since it was created",
            accounted.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::vmi::executor::render_pod_with;
    use serde_json::{Value, json};

    fn vmi(domain: Value) -> KubeVirtObject {
        KubeVirtObject::Vmi(Box::new(
            serde_json::from_value(json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "v", "namespace": "ns", "uid": "u-1"},
                "spec": {"domain": domain}
            }))
            .unwrap(),
        ))
    }

    fn the_vmi(o: &KubeVirtObject) -> &VirtualMachineInstance {
        match o {
            KubeVirtObject::Vmi(v) => v,
            KubeVirtObject::Vm(_) => unreachable!(),
        }
    }

    /// The pod KubeVirt renders with `settings` / `ns`, then `edit`ed as JSON.
    fn pod(
        o: &KubeVirtObject,
        settings: &ClusterSettings,
        ns: &NamespaceContext,
        edit: impl FnOnce(&mut Value),
    ) -> Pod {
        let mut v =
            serde_json::to_value(render_pod_with(settings, ns, the_vmi(o)).unwrap()).unwrap();
        edit(&mut v);
        serde_json::from_value(v).unwrap()
    }

    /// (matches, likely cause) of `pod` against today's `settings` / `ns`.
    fn diagnose(
        o: &KubeVirtObject,
        settings: &ClusterSettings,
        ns: &NamespaceContext,
        pod: &Pod,
        version: Option<&str>,
    ) -> (bool, Option<String>, Vec<ResourceDifference>) {
        let e = explain_in(o, "ns", settings, ns).unwrap();
        let check = check_pod(&e, pod);
        let inputs = RenderInputs {
            object: o,
            default_namespace: "ns",
            settings,
            namespace: ns,
        };
        let cause = likely_cause(inputs, pod, &check, version);
        (check.matches, cause, check.differences)
    }

    fn compute(v: &mut Value) -> &mut Value {
        v["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|c| c["name"] == "compute")
            .unwrap()
    }

    #[test]
    fn a_pod_as_rendered_matches_in_every_resource() {
        let o = vmi(
            json!({"devices": {}, "cpu": {"cores": 2}, "resources": {"requests": {"memory": "2Gi"}}}),
        );
        let s = ClusterSettings::default();
        let ns = NamespaceContext::default();
        let (ok, cause, diffs) = diagnose(&o, &s, &ns, &pod(&o, &s, &ns, |_| {}), None);
        assert!(ok && cause.is_none() && diffs.is_empty(), "{diffs:?}");
        // Quantities compare as numbers: 2Gi written as bytes is no difference.
        let p = pod(&o, &s, &ns, |v| {
            let q = compute(v)["resources"]["requests"]["memory"]
                .as_str()
                .unwrap()
                .to_string();
            let bytes = crate::api::quantity::ParsedQuantity::parse(&q)
                .unwrap()
                .value();
            compute(v)["resources"]["requests"]["memory"] = json!(bytes.to_string());
        });
        assert!(diagnose(&o, &s, &ns, &p, None).0);
    }

    #[test]
    fn each_hypothesis_names_its_cause() {
        let o = vmi(json!({"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}));
        let s = ClusterSettings::default();
        let ns = NamespaceContext::default();

        // Rendered with another overhead (another version's formula): the annotation says so.
        let other = ClusterSettings {
            additional_guest_memory_overhead_ratio: Some("1.5".into()),
            ..Default::default()
        };
        let p = pod(&o, &other, &ns, |v| {
            compute(v)["image"] = json!("quay.io/kubevirt/virt-launcher:v1.8.2");
        });
        let (ok, cause, diffs) = diagnose(&o, &s, &ns, &p, Some("v1.9.0"));
        assert!(!ok);
        assert_eq!(
            diffs
                .iter()
                .map(|d| d.resource.as_str())
                .collect::<Vec<_>>(),
            ["requests.memory"]
        );
        let cause = cause.unwrap();
        assert!(cause.contains("rendered with an overhead of"), "{cause}");
        assert!(
            cause.contains("v1.8.2 while the cluster runs KubeVirt v1.9.0"),
            "{cause}"
        );

        // Rendered with another cpuAllocationRatio, or another memoryOvercommit (guest memory
        // only).
        let guest = vmi(json!({"devices": {}, "memory": {"guest": "4Gi"}}));
        let ratio_4 = ClusterSettings {
            cpu_allocation_ratio: 4,
            ..Default::default()
        };
        let overcommit_150 = ClusterSettings {
            memory_overcommit: 150,
            ..Default::default()
        };
        for (object, rendered_with, named) in [
            (&o, &ratio_4, "fits cpuAllocationRatio 4, today's is 10"),
            (
                &guest,
                &overcommit_150,
                "fits memoryOvercommit 150%, today's is 100%",
            ),
        ] {
            let p = pod(object, rendered_with, &ns, |_| {});
            let cause = diagnose(object, &s, &ns, &p, None).1.unwrap();
            assert!(cause.contains(named), "{cause}");
        }

        // Rendered when the namespace had a limits.memory quota.
        let quota = NamespaceContext {
            quota_limits_memory: true,
            ..Default::default()
        };
        let p = pod(&o, &s, &quota, |_| {});
        let (_, cause, diffs) = diagnose(&o, &s, &ns, &p, None);
        assert_eq!(diffs.len(), 1);
        assert_eq!(diffs[0].resource, "limits.memory");
        assert_eq!(diffs[0].rendered, None);
        assert!(cause.unwrap().contains("ResourceQuotas"));

        // Changed after rendering: since creation (a generation nothing visible accounts
        // for) or at admission.
        let edited = |generation: i64| {
            pod(&o, &s, &ns, move |v| {
                compute(v)["resources"]["requests"]["memory"] = json!("3Gi");
                v["metadata"]["generation"] = json!(generation);
            })
        };
        let cause = diagnose(&o, &s, &ns, &edited(2), None).1.unwrap();
        assert!(
            cause.contains("updated after it was created (metadata.generation 2;")
                && cause.contains("account for at most 1): resized in place or edited by hand"),
            "{cause}"
        );
        let cause = diagnose(&o, &s, &ns, &edited(1), None).1.unwrap();
        assert!(cause.contains("changed at admission"), "{cause}");
    }

    /// A running launcher pod is bound, defaulted at admission and written by the kubelet;
    /// none of that is an edit, whatever its generation (some API servers bump it for the
    /// binding, every one for a graceful deletion).
    #[test]
    fn binding_admission_and_kubelet_changes_are_not_edits() {
        let o = vmi(json!({"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}));
        let s = ClusterSettings::default();
        let ns = NamespaceContext::default();
        let running = |generation: i64, deleting: bool| {
            pod(&o, &s, &ns, move |v| {
                // A LimitRange raised the request at admission.
                compute(v)["resources"]["requests"]["memory"] = json!("3Gi");
                v["metadata"]["generation"] = json!(generation);
                if deleting {
                    v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                }
                v["spec"]["nodeName"] = json!("node-1");
                v["spec"]["priority"] = json!(0);
                v["spec"]["enableServiceLinks"] = json!(true);
                v["spec"]["tolerations"] = json!([
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300}]);
                v["spec"]["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "kube-api-access-x", "projected": {"sources": []}}));
                v["status"] = json!({"phase": "Running", "podIP": "10.0.0.1"});
            })
        };
        for (generation, deleting) in [(2, false), (3, true)] {
            let cause = diagnose(&o, &s, &ns, &running(generation, deleting), None)
                .1
                .unwrap();
            assert!(
                cause.contains("changed at admission")
                    && cause.contains(&format!("metadata.generation {generation} is accounted for by the binding (spec.nodeName)"))
                    && !cause.contains("edited by hand"),
                "{cause}"
            );
        }
        // One bump more than those account for is an update since creation.
        let cause = diagnose(&o, &s, &ns, &running(3, false), None).1.unwrap();
        assert!(
            cause.contains("resized in place or edited by hand"),
            "{cause}"
        );
    }

    #[test]
    fn differences_are_in_the_units_of_their_resource() {
        let rendered = ComputeResources {
            requests: [
                ("cpu".to_string(), Quantity("100m".into())),
                ("memory".to_string(), Quantity("1Gi".into())),
            ]
            .into(),
            limits: [("devices.kubevirt.io/kvm".to_string(), Quantity("1".into()))].into(),
            claims: Vec::new(),
        };
        let c: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({
            "name": "compute",
            "resources": {"requests": {"cpu": "250m", "memory": "1025Mi"}, "limits": {"memory": "2Gi"}}
        }))
        .unwrap();
        let d = compare_compute_resources(&rendered, &c);
        let by = |r: &str| d.iter().find(|x| x.resource == r).cloned().unwrap();
        assert_eq!(
            (
                by("requests.cpu").difference,
                by("requests.cpu").unit.as_str()
            ),
            (Some(150), "millicores")
        );
        assert_eq!(by("requests.memory").difference, Some(1024 * 1024));
        assert_eq!(by("limits.memory").difference, Some(2 << 30));
        assert_eq!(by("limits.memory").rendered, None);
        assert_eq!(
            (
                by("limits.devices.kubevirt.io/kvm").difference,
                by("limits.devices.kubevirt.io/kvm").pod.clone()
            ),
            (Some(-1), None)
        );
        // The API server gives the device limit a request too (SetDefaults_Pod).
        assert_eq!(by("requests.devices.kubevirt.io/kvm").difference, Some(-1));
        assert_eq!(d.len(), 5);
    }

    #[test]
    fn a_pod_as_the_api_server_stores_it_matches_its_rendering() {
        // kube-apiserver defaults a request from each limit without one, so a running
        // launcher pod has requests for the device plugins' resources KubeVirt renders as
        // limits only (found on kube-apiserver v1.36: tests/server_conformance.rs).
        let rendered = ComputeResources {
            requests: [("memory".to_string(), Quantity("1Gi".into()))].into(),
            limits: [("devices.kubevirt.io/kvm".to_string(), Quantity("1".into()))].into(),
            claims: Vec::new(),
        };
        let stored: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({
            "name": "compute",
            "resources": {
                "requests": {"memory": "1Gi", "devices.kubevirt.io/kvm": "1"},
                "limits": {"devices.kubevirt.io/kvm": "1"}
            }
        }))
        .unwrap();
        assert_eq!(compare_compute_resources(&rendered, &stored), vec![]);
        let as_written: k8s_openapi::api::core::v1::Container = serde_json::from_value(json!({
            "name": "compute",
            "resources": {"requests": {"memory": "1Gi"}, "limits": {"devices.kubevirt.io/kvm": "1"}}
        }))
        .unwrap();
        assert_eq!(compare_compute_resources(&rendered, &as_written), vec![]);
    }
}
