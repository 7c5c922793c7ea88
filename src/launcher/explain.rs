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
    /// True when both differences are zero.
    #[serde(rename = "match")]
    pub matches: bool,
    /// Problems reading the pod (missing container, unparseable quantity ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
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
pub fn effective_vmi(
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
            let mut metadata = template.metadata.clone().unwrap_or_default();
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

/// Explain one VM or VMI: overhead terms and compute resources.
///
/// Errors name the spec field at fault (relative to the VMI spec; for a VM the caller prefixes
/// `spec.template.`).
pub fn explain(
    object: &KubeVirtObject,
    default_namespace: &str,
    settings: &ClusterSettings,
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
        overhead.total_bytes,
        &NamespaceContext::default(),
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
pub fn check_pod(explanation: &Explanation, pod: &Pod) -> PodCheck {
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
    let compute = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "compute"));
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
    let matches =
        overhead_difference_bytes == Some(0) && memory_request_difference_bytes == Some(0);
    PodCheck {
        pod: pod_name,
        annotation_overhead_bytes,
        formula_overhead_bytes: formula,
        overhead_difference_bytes,
        pod_memory_request_bytes,
        formula_memory_request_bytes,
        memory_request_difference_bytes,
        matches,
        notes,
    }
}
