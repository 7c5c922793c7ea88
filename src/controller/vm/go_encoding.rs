//! What Go's `encoding/json` adds to a VM or VMI that KubeVirt's controller sends whole.
//!
//! KubeVirt writes a VirtualMachine (`Update`: vm.go:376-378, 1129, 3380), creates a VMI
//! (vm.go:1334) and writes a start ControllerRevision's data (vm.go:1702-1724) by marshalling
//! its Go types. A field whose type is a struct, not a pointer, is written even when empty:
//! `omitempty` does not omit structs. In a VMI spec that field is `domain.resources`
//! (`Resources ResourceRequirements json:"resources,omitempty"`, kubevirt.io/api
//! core/v1/schema.go:219), so the object the server stores gets `resources: {}` where the
//! manifest had none; for a VM's template that is a spec change, and the server bumps
//! `metadata.generation` (measured against KubeVirt v1.9.0's virt-controller by
//! tests/reference_conformance.rs: its first write, the api-version annotations, takes a VM
//! from generation 1 to 2). `domain.devices` is the other such field; [`crate::api::vmi`]
//! already writes it always. The other way round, an `int32` tagged `omitempty` is left out
//! when zero: a probe's `initialDelaySeconds: 0` is not written back (found by the same suite
//! on generated VMs).

use crate::api::vm::VirtualMachine;
use crate::api::vmi::VirtualMachineInstanceSpec;

/// The integer fields of a `v1.Probe`, each `int32` tagged `omitempty` (kubevirt.io/api
/// core/v1/types.go:2424-2445): Go leaves a zero out.
const PROBE_INTEGERS: [&str; 5] = [
    "initialDelaySeconds",
    "timeoutSeconds",
    "periodSeconds",
    "successThreshold",
    "failureThreshold",
];

/// `spec` as Go writes it: `domain.resources` present, probes without their zero integers.
pub(crate) fn vmi_spec(spec: &mut VirtualMachineInstanceSpec) {
    spec.domain.resources.get_or_insert_with(Default::default);
    for probe in [&mut spec.liveness_probe, &mut spec.readiness_probe]
        .into_iter()
        .flatten()
    {
        for field in PROBE_INTEGERS {
            if probe.extra.get(field).and_then(serde_json::Value::as_i64) == Some(0) {
                probe.extra.remove(field);
            }
        }
    }
}

/// `vm` as Go writes it: its template's spec as [`vmi_spec`] (a template without a spec gets
/// one, as `Spec VirtualMachineInstanceSpec json:"spec,omitempty"` is a struct too).
pub(crate) fn vm(vm: &mut VirtualMachine) {
    if let Some(template) = vm.spec.template.as_mut() {
        vmi_spec(template.spec.get_or_insert_with(Default::default));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_absent_resources_is_written_empty_and_a_present_one_kept() {
        let mut v: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}}}}
        }))
        .unwrap();
        vm(&mut v);
        let out = serde_json::to_value(&v).unwrap();
        assert_eq!(
            out.pointer("/spec/template/spec/domain/resources"),
            Some(&json!({}))
        );
        let mut s: VirtualMachineInstanceSpec = serde_json::from_value(
            json!({"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}),
        )
        .unwrap();
        vmi_spec(&mut s);
        assert_eq!(
            serde_json::to_value(&s)
                .unwrap()
                .pointer("/domain/resources"),
            Some(&json!({"requests": {"memory": "1Gi"}}))
        );
    }

    #[test]
    fn a_probe_s_zero_integers_are_left_out_and_the_others_kept() {
        let mut s: VirtualMachineInstanceSpec = serde_json::from_value(json!({
            "domain": {"devices": {}},
            "readinessProbe": {"tcpSocket": {"port": 22}, "initialDelaySeconds": 0,
                               "periodSeconds": 5, "timeoutSeconds": 0},
            "livenessProbe": {"httpGet": {"port": 80}, "failureThreshold": 0}
        }))
        .unwrap();
        vmi_spec(&mut s);
        let out = serde_json::to_value(&s).unwrap();
        assert_eq!(
            out["readinessProbe"],
            json!({"tcpSocket": {"port": 22}, "periodSeconds": 5})
        );
        assert_eq!(out["livenessProbe"], json!({"httpGet": {"port": 80}}));
    }
}
