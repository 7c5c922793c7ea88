//! The quantities of a VMI spec that size its virt-launcher pod, parsed once: the requests and
//! limits of `spec.domain.resources`, `spec.domain.memory.guest` and
//! `spec.domain.memory.reservedOverhead.addedOverhead`.
//!
//! KubeVirt reads them with `resource.MustParse` and friends wherever it needs them (the memory
//! overhead in pkg/hypervisor/kvm/hypervisorbackend.go:69-209, the compute container's resources
//! in pkg/virt-controller/services/renderresources.go); here [`VmiResources::parse`] reads them
//! once and both the overhead formula and the resource renderer use the result. Errors are one
//! type, [`FieldError`], naming the field; the caller names the object.

use crate::api::SmallMap;
use crate::api::quantity::{ParsedQuantity, QuantityError};
use crate::api::vmi::VirtualMachineInstanceSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Largest memory/CPU quantity accepted: 1 EiB (2^60). Sums of all overhead terms stay far
/// below `i64::MAX`.
pub(crate) const MAX_QUANTITY: i64 = 1 << 60;

/// A field of an object that cannot be used. The field path is relative to the object (a VMI:
/// `spec.domain.resources.requests.memory`); whoever reports the error names the object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// Field path.
    pub field: String,
    /// What is wrong with it.
    pub problem: FieldProblem,
}

/// What is wrong with a field ([`FieldError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    /// A quantity that does not parse.
    #[error("{0}")]
    Quantity(#[source] QuantityError),
    /// A memory or CPU quantity below zero (the text as written).
    #[error("must not be negative, found {0:?}")]
    Negative(String),
    /// A quantity above 1 EiB (no node has that much; larger values would overflow the sums).
    #[error("{0:?} is larger than 1Ei")]
    TooLarge(String),
    /// A value that parses but cannot be used (KubeVirt would panic in `resource.MustParse`).
    #[error("{0}")]
    Invalid(String),
}

impl FieldError {
    /// An error of `field`.
    pub(crate) fn new(field: impl Into<String>, problem: FieldProblem) -> Self {
        FieldError {
            field: field.into(),
            problem,
        }
    }

    /// The field path.
    #[cfg(test)]
    pub(crate) fn field(&self) -> &str {
        &self.field
    }

    /// The same error with `prefix` before the field path (a VM's template: `spec.template.`).
    pub(crate) fn with_field_prefix(mut self, prefix: &str) -> Self {
        self.field.insert_str(0, prefix);
        self
    }
}

/// Parse one quantity, naming `field` in the error.
pub(crate) fn parse_quantity(q: &Quantity, field: &str) -> Result<ParsedQuantity, FieldError> {
    ParsedQuantity::parse(&q.0).map_err(|e| FieldError::new(field, FieldProblem::Quantity(e)))
}

/// Parse an optional memory/CPU quantity that must be ≥ 0 and ≤ [`MAX_QUANTITY`].
pub(crate) fn parse_non_negative(
    q: Option<&Quantity>,
    field: &str,
) -> Result<Option<ParsedQuantity>, FieldError> {
    let Some(q) = q else { return Ok(None) };
    let p = parse_quantity(q, field)?;
    if p.nanos < 0 {
        return Err(FieldError::new(field, FieldProblem::Negative(q.0.clone())));
    }
    if p.value() > MAX_QUANTITY {
        return Err(FieldError::new(field, FieldProblem::TooLarge(q.0.clone())));
    }
    Ok(Some(p))
}

/// The sizing quantities of a VMI spec, parsed (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct VmiResources {
    /// `spec.domain.resources.requests`, every entry.
    pub requests: BTreeMap<String, ParsedQuantity>,
    /// `spec.domain.resources.limits`, every entry.
    pub limits: BTreeMap<String, ParsedQuantity>,
    /// `spec.domain.memory.guest`.
    pub guest: Option<ParsedQuantity>,
    /// `spec.domain.memory.reservedOverhead.addedOverhead`.
    pub reserved_overhead: Option<ParsedQuantity>,
    /// `spec.domain.resources.overcommitGuestOverhead`.
    pub overcommit_guest_overhead: bool,
}

impl VmiResources {
    /// Parse the spec's sizing quantities.
    ///
    /// Checked in this order, the first failure wins: memory and CPU requests and limits (must
    /// be ≥ 0 and ≤ 1Ei), `reservedOverhead.addedOverhead` (the same), then every other limit
    /// and request, then `memory.guest` (must parse).
    pub(crate) fn parse(spec: &VirtualMachineInstanceSpec) -> Result<Self, FieldError> {
        let res = spec.domain.resources.as_ref();
        let requests = res.and_then(|r| r.requests.as_ref());
        let limits = res.and_then(|r| r.limits.as_ref());
        for (kind, list, name) in [
            ("requests", requests, "memory"),
            ("limits", limits, "memory"),
            ("requests", requests, "cpu"),
            ("limits", limits, "cpu"),
        ] {
            parse_non_negative(
                list.and_then(|l| l.get(name)),
                &format!("spec.domain.resources.{kind}.{name}"),
            )?;
        }
        let memory = spec.domain.memory.as_ref();
        let reserved_overhead = parse_non_negative(
            memory
                .and_then(|m| m.reserved_overhead.as_ref())
                .and_then(|r| r.added_overhead.as_ref()),
            "spec.domain.memory.reservedOverhead.addedOverhead",
        )?;
        let list = |kind: &str, list: Option<&SmallMap<Quantity>>| {
            list.into_iter()
                .flat_map(|l| l.iter())
                .map(|(name, q)| {
                    let field = format!("spec.domain.resources.{kind}.{name}");
                    Ok((name.to_string(), parse_quantity(q, &field)?))
                })
                .collect::<Result<BTreeMap<_, _>, FieldError>>()
        };
        let limits = list("limits", limits)?;
        let requests = list("requests", requests)?;
        let guest = memory
            .and_then(|m| m.guest.as_ref())
            .map(|q| parse_quantity(q, "spec.domain.memory.guest"))
            .transpose()?;
        Ok(VmiResources {
            requests,
            limits,
            guest,
            reserved_overhead,
            overcommit_guest_overhead: res
                .and_then(|r| r.overcommit_guest_overhead)
                .unwrap_or(false),
        })
    }

    /// `requests[name]`.
    pub(crate) fn request(&self, name: &str) -> Option<ParsedQuantity> {
        self.requests.get(name).copied()
    }

    /// `limits[name]`.
    pub(crate) fn limit(&self, name: &str) -> Option<ParsedQuantity> {
        self.limits.get(name).copied()
    }

    /// `vmi.WantsToHaveQOSGuaranteed()` (staging/src/kubevirt.io/api/core/v1/types.go:577-586):
    /// memory (only a limit, or request == limit ≠ 0) and CPU (request == limit ≠ 0).
    pub(crate) fn wants_guaranteed_qos(&self) -> bool {
        let nanos = |q: Option<ParsedQuantity>| q.map_or(0, |q| q.nanos);
        let (mem_req, mem_lim) = (nanos(self.request("memory")), nanos(self.limit("memory")));
        let (cpu_req, cpu_lim) = (nanos(self.request("cpu")), nanos(self.limit("cpu")));
        let memory = (mem_req == 0 && mem_lim != 0) || (mem_req != 0 && mem_req == mem_lim);
        memory && cpu_req != 0 && cpu_req == cpu_lim
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(domain: serde_json::Value) -> VirtualMachineInstanceSpec {
        serde_json::from_value(json!({ "domain": domain })).unwrap()
    }

    fn parse(domain: serde_json::Value) -> Result<VmiResources, FieldError> {
        VmiResources::parse(&spec(domain))
    }

    #[test]
    fn wants_guaranteed_qos_like_types_go() {
        let q = |r: serde_json::Value| {
            parse(json!({"resources": r}))
                .unwrap()
                .wants_guaranteed_qos()
        };
        assert!(q(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        ));
        assert!(q(
            json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1000m", "memory": "1Gi"}})
        ));
        assert!(!q(
            json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}})
        ));
        assert!(!q(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
        ));
        assert!(!q(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1"}})
        ));
    }

    #[test]
    fn parses_every_entry_once() {
        let r = parse(json!({
            "resources": {"requests": {"memory": "1Gi", "ephemeral-storage": "30M"},
                          "limits": {"cpu": "2"}, "overcommitGuestOverhead": true},
            "memory": {"guest": "512Mi", "reservedOverhead": {"addedOverhead": "1Mi"}}}))
        .unwrap();
        assert_eq!(r.request("memory").unwrap().value(), 1 << 30);
        assert_eq!(r.request("ephemeral-storage").unwrap().value(), 30_000_000);
        assert_eq!(r.limit("cpu").unwrap().value(), 2);
        assert_eq!(r.guest.unwrap().value(), 512 << 20);
        assert_eq!(r.reserved_overhead.unwrap().value(), 1 << 20);
        assert!(r.overcommit_guest_overhead);
        assert_eq!(parse(json!({})).unwrap(), VmiResources::default());
    }

    /// The order of the checks is the order in which the overhead formula and then the
    /// resource renderer used to read the fields: memory/CPU first, `memory.guest` last.
    #[test]
    fn errors_name_the_field_in_a_fixed_order() {
        let e = parse(json!({"resources": {"requests": {"memory": "-1Gi"}}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.domain.resources.requests.memory: must not be negative, found \"-1Gi\""
        );
        let e = parse(json!({"resources": {"limits": {"cpu": "2000000Ti"}}})).unwrap_err();
        assert!(matches!(e.problem, FieldProblem::TooLarge(_)), "{e}");
        let e = parse(
            json!({"memory": {"guest": "lots", "reservedOverhead": {"addedOverhead": "-1"}},
            "resources": {"requests": {"ephemeral-storage": "x"}}}),
        )
        .unwrap_err();
        assert_eq!(
            e.field(),
            "spec.domain.memory.reservedOverhead.addedOverhead"
        );
        let e = parse(json!({"memory": {"guest": "lots"},
            "resources": {"requests": {"ephemeral-storage": "x"}, "limits": {"foo": "y"}}}))
        .unwrap_err();
        assert_eq!(e.field(), "spec.domain.resources.limits.foo");
        let e = parse(json!({"memory": {"guest": "lots"}})).unwrap_err();
        assert!(
            e.to_string().starts_with("spec.domain.memory.guest: "),
            "{e}"
        );
        assert_eq!(
            e.with_field_prefix("spec.template.").field(),
            "spec.template.spec.domain.memory.guest"
        );
    }
}
