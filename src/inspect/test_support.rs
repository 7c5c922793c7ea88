//! Fixtures shared by the inspector's unit tests (`analyze_tests.rs`, `whatif/tests.rs`): a fixed
//! clock and the VM `demo/vm-a` written as JSON the way the API server returns it.

use crate::api::VirtualMachine;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

/// The tests' "now".
pub(crate) const NOW: &str = "2026-12-01T10:00:00Z";

/// [`NOW`] as a time.
pub(crate) fn now() -> DateTime<Utc> {
    NOW.parse().expect("time")
}

/// [`NOW`] moved by `offset_seconds`, as the API server writes times.
pub(crate) fn at(offset_seconds: i64) -> String {
    (now() + chrono::Duration::seconds(offset_seconds))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The domain of the VM's template, and so of its VMI.
pub(crate) fn domain() -> Value {
    json!({
        "firmware": {"uuid": "0d2a2043-41c0-59c3-9b17-025022203668"},
        "devices": {},
        "resources": {"requests": {"memory": "128Mi"}}
    })
}

/// `demo/vm-a` (uid `vm-uid`, resourceVersion 10, generation 2) with `runStrategy` `strategy`,
/// the template's `volumes` (`null`: none) and `status`, as virt-api admitted it (api-version
/// annotations) and the VM controller finalised it.
pub(crate) fn vm_a(strategy: &str, volumes: Value, status: Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "vm-a", "namespace": "demo", "uid": "vm-uid", "resourceVersion": "10",
            "generation": 2,
            "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"
            },
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]
        },
        "spec": {
            "runStrategy": strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": "vm-a"}},
                "spec": {"domain": domain(), "volumes": volumes}
            }
        },
        "status": status
    }))
    .expect("vm")
}
