//! Applying a preference to a VMI spec (`vmiApplier.Apply`, pkg/instancetype/preference/apply/vmi.go:36-54):
//! every preferred value fills a field only where the VMI leaves it unset (ACPI and
//! `disableHotplug` excepted: KubeVirt cannot tell "unset" there and overwrites).

use super::json::{at, child, non_zero, set_if_nil, str_at};
use crate::api::SmallMap;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

/// `vmiApplier.Apply` (preference/apply/vmi.go:36-54), in KubeVirt's order.
pub(crate) fn apply(pref: &Value, spec: &mut Value, annotations: &mut SmallMap<String>) {
    cpu_features(pref, spec);
    devices(pref, spec);
    features(pref, spec);
    firmware(pref, spec);
    machine(pref, spec);
    clock(pref, spec);
    if !non_zero(at(spec, &["subdomain"]))
        && let Some(s) = at(pref, &["preferredSubdomain"])
    {
        // preference/apply/subdomain.go:26-30
        spec["subdomain"] = s.clone();
    }
    if let Some(t) = at(pref, &["preferredTerminationGracePeriodSeconds"]) {
        // preference/apply/termination.go:27-32
        set_if_nil(spec, "terminationGracePeriodSeconds", t);
    }
    architecture(pref, spec);
    // preference/apply/annotations.go:25-35: only keys the VMI does not have.
    if let Some(map) = at(pref, &["annotations"]).and_then(Value::as_object) {
        for (k, v) in map {
            if !annotations.contains_key(k.as_str()) {
                annotations.insert(k.as_str(), v.as_str().unwrap_or("").to_string());
            }
        }
    }
    // preference/apply/launchsecurity.go:25-32
    if let Some(ls) = at(pref, &["preferredLaunchSecurity"]) {
        set_if_nil(child(spec, "domain"), "launchSecurity", ls);
    }
}

/// `ApplyArchitecturePreferences` (preference/apply/architecture.go:26-34).
pub(crate) fn architecture(pref: &Value, spec: &mut Value) {
    let arch = str_at(pref, &["preferredArchitecture"]);
    if !arch.is_empty() && !non_zero(at(spec, &["architecture"])) {
        spec["architecture"] = json!(arch);
    }
}

/// `applyCPUPreferences` (preference/apply/cpu.go:27-43): preferred CPU features the VMI does
/// not name already, appended.
fn cpu_features(pref: &Value, spec: &mut Value) {
    let Some(preferred) = at(pref, &["cpu", "preferredCPUFeatures"]).and_then(Value::as_array)
    else {
        return;
    };
    if preferred.is_empty() {
        return;
    }
    let cpu = child(child(spec, "domain"), "cpu");
    let names: BTreeSet<String> = at(cpu, &["features"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|f| str_at(f, &["name"]).to_string())
        .collect();
    let missing: Vec<Value> = preferred
        .iter()
        .filter(|f| !names.contains(str_at(f, &["name"])))
        .cloned()
        .collect();
    if missing.is_empty() {
        return;
    }
    let list = cpu
        .as_object_mut()
        .expect("child() returns an object")
        .entry("features")
        .or_insert_with(|| json!([]));
    if let Some(l) = list.as_array_mut() {
        l.extend(missing);
    } else {
        *list = Value::Array(missing);
    }
}

/// `ApplyAutoAttachPreferences` (preference/apply/device.go:34-53): the `autoattach*` booleans
/// the VMI leaves unset. Also called by `startVMI` before the input device and the default
/// network are added (vm.go:1302-1307).
pub(crate) fn auto_attach(pref: &Value, spec: &mut Value) {
    let Some(dev) = at(pref, &["devices"]) else {
        return;
    };
    let pairs = [
        (
            "preferredAutoattachGraphicsDevice",
            "autoattachGraphicsDevice",
        ),
        ("preferredAutoattachMemBalloon", "autoattachMemBalloon"),
        ("preferredAutoattachPodInterface", "autoattachPodInterface"),
        (
            "preferredAutoattachSerialConsole",
            "autoattachSerialConsole",
        ),
        ("preferredAutoattachInputDevice", "autoattachInputDevice"),
    ];
    let devices = child(child(spec, "domain"), "devices");
    for (p, v) in pairs {
        if let Some(b) = at(dev, &[p]) {
            set_if_nil(devices, v, b);
        }
    }
}

/// `ApplyDevicePreferences` (preference/apply/device.go:55-105).
fn devices(pref: &Value, spec: &mut Value) {
    let Some(dev) = at(pref, &["devices"]) else {
        return;
    };
    {
        let d = child(child(spec, "domain"), "devices");
        for (p, v) in [
            ("preferredUseVirtioTransitional", "useVirtioTransitional"),
            ("preferredBlockMultiQueue", "blockMultiQueue"),
            (
                "preferredNetworkInterfaceMultiQueue",
                "networkInterfaceMultiQueue",
            ),
            ("preferredRng", "rng"),
            ("preferredTPM", "tpm"),
        ] {
            if let Some(b) = at(dev, &[p]) {
                set_if_nil(d, v, b);
            }
        }
        // `DisableHotplug` is a plain bool: overwritten (device.go:82-85).
        if let Some(b) = at(dev, &["preferredDisableHotplug"]).and_then(Value::as_bool) {
            let m = d.as_object_mut().expect("object");
            if b {
                m.insert("disableHotplug".into(), json!(true));
            } else {
                m.remove("disableHotplug");
            }
        }
        let sound_model = str_at(dev, &["preferredSoundModel"]);
        if !sound_model.is_empty()
            && let Some(sound) = d.get_mut("sound").filter(|s| s.is_object())
            && str_at(sound, &["model"]).is_empty()
        {
            sound["model"] = json!(sound_model);
        }
        if let Some(t) = at(dev, &["preferredVideoType"]) {
            let video = child(d, "video");
            if str_at(video, &["type"]).is_empty() {
                video["type"] = t.clone();
            }
        }
    }
    auto_attach(pref, spec);
    disks(dev, spec);
    interfaces(dev, spec);
    inputs(dev, spec);
    panic_devices(dev, spec);
}

fn each_mut<'a>(spec: &'a mut Value, path: &[&str]) -> impl Iterator<Item = &'a mut Value> {
    let mut cur = Some(spec);
    for k in path {
        cur = cur.and_then(|c| c.get_mut(*k));
    }
    cur.and_then(Value::as_array_mut).into_iter().flatten()
}

/// Set `obj[key]` to the string `value` when `value` is non-empty and `obj[key]` is empty.
fn fill_str(obj: &mut Value, key: &str, value: &str) {
    if !value.is_empty() && str_at(obj, &[key]).is_empty() {
        obj[key] = json!(value);
    }
}

/// `applyDiskPreferences` (preference/apply/disk.go:28-69). A disk with no target gets `disk: {}`.
fn disks(dev: &Value, spec: &mut Value) {
    let s = |k: &str| str_at(dev, &[k]).to_string();
    let (bus, cache, io) = (
        s("preferredDiskBus"),
        s("preferredDiskCache"),
        s("preferredDiskIO"),
    );
    let (cdrom_bus, lun_bus) = (s("preferredCdromBus"), s("preferredLunBus"));
    for d in each_mut(spec, &["domain", "devices", "disks"]) {
        let has = |d: &Value, k: &str| at(d, &[k]).is_some();
        if !has(d, "disk") && !has(d, "cdrom") && !has(d, "lun") {
            child(d, "disk");
        }
        if has(d, "disk") {
            fill_str(child(d, "disk"), "bus", &bus);
            if let Some(bs) = at(dev, &["preferredDiskBlockSize"]) {
                set_if_nil(d, "blockSize", bs);
            }
            fill_str(d, "cache", &cache);
            fill_str(d, "io", &io);
            if let Some(t) = at(dev, &["preferredDiskDedicatedIoThread"])
                && str_at(d, &["disk", "bus"]) == "virtio"
            {
                set_if_nil(d, "dedicatedIOThread", t);
            }
        } else if has(d, "cdrom") {
            fill_str(child(d, "cdrom"), "bus", &cdrom_bus);
        } else {
            fill_str(child(d, "lun"), "bus", &lun_bus);
        }
    }
}

/// The interface binding keys of `InterfaceBindingMethod` (core/v1/schema.go:1552-1571) and
/// `binding`.
const BINDINGS: &[&str] = &[
    "bridge",
    "slirp",
    "masquerade",
    "sriov",
    "macvtap",
    "passt",
    "passtBinding",
    "binding",
];

/// `applyInterfacePreferences` (preference/apply/interface.go:38-53).
fn interfaces(dev: &Value, spec: &mut Value) {
    let model = str_at(dev, &["preferredInterfaceModel"]).to_string();
    let masquerade = at(dev, &["preferredInterfaceMasquerade"]).cloned();
    let pod_networks: BTreeSet<String> = at(spec, &["networks"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|n| at(n, &["pod"]).is_some())
        .map(|n| str_at(n, &["name"]).to_string())
        .collect();
    for i in each_mut(spec, &["domain", "devices", "interfaces"]) {
        fill_str(i, "model", &model);
        if let Some(m) = &masquerade
            && BINDINGS.iter().all(|b| at(i, &[b]).is_none())
            && pod_networks.contains(str_at(i, &["name"]))
        {
            i["masquerade"] = m.clone();
        }
    }
}

/// `applyInputPreferences` (preference/apply/device.go:107-118).
fn inputs(dev: &Value, spec: &mut Value) {
    let (bus, type_) = (
        str_at(dev, &["preferredInputBus"]).to_string(),
        str_at(dev, &["preferredInputType"]).to_string(),
    );
    for i in each_mut(spec, &["domain", "devices", "inputs"]) {
        fill_str(i, "bus", &bus);
        fill_str(i, "type", &type_);
    }
}

/// `applyPanicDevicePreferences` (preference/apply/device.go:120-139).
fn panic_devices(dev: &Value, spec: &mut Value) {
    let Some(model) = at(dev, &["preferredPanicDeviceModel"]) else {
        return;
    };
    let devices = child(child(spec, "domain"), "devices");
    let empty = at(devices, &["panicDevices"])
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if empty {
        devices["panicDevices"] = json!([{"model": model}]);
        return;
    }
    for p in each_mut(devices, &["panicDevices"]) {
        set_if_nil(p, "model", model);
    }
}

/// `applyFeaturePreferences` (preference/apply/features.go:27-64). A features object KubeVirt
/// creates always carries `acpi` (a non-pointer struct, encoded even when empty).
fn features(pref: &Value, spec: &mut Value) {
    let Some(f) = at(pref, &["features"]) else {
        return;
    };
    let vf = child(child(spec, "domain"), "features");
    if let Some(acpi) = at(f, &["preferredAcpi"]) {
        vf["acpi"] = acpi.clone();
    }
    if !vf.as_object().is_some_and(|m| m.contains_key("acpi")) {
        vf["acpi"] = json!({});
    }
    for (p, v) in [
        ("preferredApic", "apic"),
        ("preferredKvm", "kvm"),
        ("preferredPvspinlock", "pvspinlock"),
        ("preferredSmm", "smm"),
    ] {
        if let Some(x) = at(f, &[p]) {
            set_if_nil(vf, v, x);
        }
    }
    // applyHyperVFeaturePreferences (features.go:66-123): each enlightenment the VMI leaves unset.
    if let Some(h) = at(f, &["preferredHyperv"]).and_then(Value::as_object) {
        let hv = child(vf, "hyperv");
        let keys: Map<String, Value> = h.clone();
        for (k, x) in &keys {
            if !x.is_null() {
                set_if_nil(hv, k, x);
            }
        }
    }
}

/// `applyFirmwarePreferences` (preference/apply/firmware.go:28-72). The bootloader object is
/// created whenever the preference has a `firmware` section.
fn firmware(pref: &Value, spec: &mut Value) {
    let Some(fw) = at(pref, &["firmware"]) else {
        return;
    };
    let bl = child(child(child(spec, "domain"), "firmware"), "bootloader");
    let flag = |k: &str| at(fw, &[k]).and_then(Value::as_bool);
    let has = |bl: &Value, k: &str| at(bl, &[k]).is_some();
    if flag("preferredUseBios") == Some(true) && !has(bl, "bios") && !has(bl, "efi") {
        bl["bios"] = json!({});
    }
    if let Some(serial) = at(fw, &["preferredUseBiosSerial"])
        && has(bl, "bios")
    {
        set_if_nil(child(bl, "bios"), "useSerial", serial);
    }
    if !has(bl, "efi")
        && !has(bl, "bios")
        && let Some(efi) = at(fw, &["preferredEfi"])
    {
        bl["efi"] = efi.clone();
        return;
    }
    if flag("preferredUseEfi") == Some(true) && !has(bl, "efi") && !has(bl, "bios") {
        bl["efi"] = json!({});
    }
    if let Some(sb) = at(fw, &["preferredUseSecureBoot"])
        && has(bl, "efi")
    {
        set_if_nil(child(bl, "efi"), "secureBoot", sb);
    }
}

/// `applyMachinePreferences` (preference/apply/machine.go:26-39).
fn machine(pref: &Value, spec: &mut Value) {
    let t = str_at(pref, &["machine", "preferredMachineType"]).to_string();
    if t.is_empty() {
        return;
    }
    fill_str(child(child(spec, "domain"), "machine"), "type", &t);
}

/// `applyClockPreferences` (preference/apply/clock.go:27-45): the offset only when the VMI sets
/// neither `utc` nor `timezone`; the timer only when unset.
fn clock(pref: &Value, spec: &mut Value) {
    let Some(c) = at(pref, &["clock"]) else {
        return;
    };
    let vc = child(child(spec, "domain"), "clock");
    if let Some(offset) = at(c, &["preferredClockOffset"]).and_then(Value::as_object)
        && at(vc, &["utc"]).is_none()
        && at(vc, &["timezone"]).is_none()
    {
        for (k, v) in offset {
            vc[k.as_str()] = v.clone();
        }
    }
    if let Some(t) = at(c, &["preferredTimer"]) {
        set_if_nil(vc, "timer", t);
    }
}
