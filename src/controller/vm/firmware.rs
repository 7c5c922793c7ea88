//! The stable firmware UUID (pkg/virt-controller/watch/vm/firmware.go).

use crate::api::vm::VirtualMachine;
use crate::api::vmi::Firmware;
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use serde_json::Value;
use uuid::Uuid;

/// `magicUUID` (firmware.go:83): the UUIDv5 namespace of legacy firmware UUIDs.
#[cfg(test)]
pub(crate) const LEGACY_UUID_NAMESPACE: &str = "6a1a24a1-4061-4607-8bf4-a3963d0c5895";

const NAMESPACE: Uuid = Uuid::from_u128(0x6a1a24a1_4061_4607_8bf4_a3963d0c5895);

/// `CalculateLegacyUUID(name)` (firmware.go:85-89): RFC 4122 version-5 UUID of the raw bytes of
/// `name` (no namespace) under [`LEGACY_UUID_NAMESPACE`], lower-case hyphenated.
pub(crate) fn calculate_legacy_uuid(name: &str) -> String {
    Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string()
}

/// The firmware synchronizer (firmware.go:48-66): when the VM template has no firmware UUID,
/// the JSON patch that persists [`calculate_legacy_uuid`] of the VM name — test the current
/// `/spec/template/spec/domain/firmware` (null when absent), then add it with the UUID — and the
/// firmware value written. `None` when a UUID is present (or the VM has no template).
pub(crate) fn firmware_uuid_patch(vm: &VirtualMachine) -> Option<(Value, Firmware)> {
    let spec = vm.spec.template.as_ref()?.spec.as_ref();
    let current = spec.and_then(|s| s.domain.firmware.as_ref());
    if current
        .and_then(|f| f.uuid.as_deref())
        .is_some_and(|u| !u.is_empty())
    {
        return None;
    }
    let mut updated = current.cloned().unwrap_or_default();
    updated.uuid = Some(calculate_legacy_uuid(
        vm.metadata.name.as_deref().unwrap_or(""),
    ));
    let at = || path(&["spec", "template", "spec", "domain", "firmware"]);
    let mut patch = PatchSet::new();
    patch.test(at(), &current).add(at(), &updated);
    Some((patch.into_value(), updated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_constant_matches_text() {
        assert_eq!(NAMESPACE.to_string(), LEGACY_UUID_NAMESPACE);
    }

    /// Vectors from the facts file §1.7.3 (a standard UUIDv5 of the name).
    #[test]
    fn legacy_uuid_vectors() {
        assert_eq!(
            calculate_legacy_uuid("testvmi"),
            "f8918e71-270a-598e-a2a4-1afac39e1394"
        );
        assert_eq!(
            calculate_legacy_uuid("testvm"),
            "5a9fc181-957e-5c32-9e5a-2de5e9673531"
        );
        assert_eq!(
            calculate_legacy_uuid("vm-cirros"),
            "0d2a2043-41c0-59c3-9b17-025022203668"
        );
    }

    #[test]
    fn firmware_patch_only_without_uuid() {
        let mut vm: VirtualMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "testvm"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}}}}
        }))
        .unwrap();
        let (patch, fw) = firmware_uuid_patch(&vm).unwrap();
        assert_eq!(
            fw.uuid.as_deref(),
            Some("5a9fc181-957e-5c32-9e5a-2de5e9673531")
        );
        assert_eq!(
            patch,
            serde_json::json!([
                {"op": "test", "path": "/spec/template/spec/domain/firmware", "value": null},
                {"op": "add", "path": "/spec/template/spec/domain/firmware",
                 "value": {"uuid": "5a9fc181-957e-5c32-9e5a-2de5e9673531"}},
            ])
        );
        crate::controller::vm::template_spec_mut(&mut vm)
            .domain
            .firmware = Some(fw);
        assert!(firmware_uuid_patch(&vm).is_none());
    }
}
