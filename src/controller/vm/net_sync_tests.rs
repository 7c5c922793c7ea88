//! Cases after KubeVirt v1.9.0 pkg/network/controllers/vm_test.go ("VM Network Controller"),
//! with this project's own names and values.

use super::*;
use serde_json::json;

fn masquerade() -> Value {
    json!({"name": "default", "masquerade": {}})
}

fn bridge(name: &str) -> Value {
    json!({"name": name, "bridge": {}})
}

fn pod_net() -> Value {
    json!({"name": "default", "pod": {}})
}

fn multus(name: &str, nad: &str) -> Value {
    json!({"name": name, "multus": {"networkName": nad}})
}

fn spec(ifaces: &[Value], nets: &[Value]) -> Value {
    json!({"domain": {"devices": {"interfaces": ifaces}}, "networks": nets})
}

fn vm(spec: Value) -> VirtualMachine {
    serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
                                  "spec": {"template": {"spec": spec}}}))
    .unwrap()
}

fn vmi(spec: Value, interfaces: Value) -> VirtualMachineInstance {
    serde_json::from_value(
        json!({"metadata": {"name": "vm", "namespace": "ns"}, "spec": spec,
                                  "status": {"interfaces": interfaces}}),
    )
    .unwrap()
}

fn status(names: &[(&str, &str)]) -> Value {
    names
        .iter()
        .map(|(n, p)| json!({"name": n, "podInterfaceName": p}))
        .collect()
}

/// The patch's `add` values: (networks, interfaces).
fn added(s: &NetSync) -> (Value, Value) {
    let ops = s.vmi_patch.as_ref().expect("a VMI patch").patch.clone();
    let ops = ops.as_array().unwrap();
    assert_eq!(ops.len(), 4);
    assert_eq!(ops[0]["op"], "test");
    assert_eq!(ops[1]["path"], "/spec/networks");
    assert_eq!(ops[3]["path"], "/spec/domain/devices/interfaces");
    (ops[1]["value"].clone(), ops[3]["value"].clone())
}

/// "sync does nothing when": no VMI, a VMI being deleted, no interfaces, identical interfaces,
/// a status entry that matches no spec interface.
#[test]
fn nothing_to_do() {
    let both = spec(
        &[masquerade(), bridge("red")],
        &[pod_net(), multus("red", "red-nad")],
    );
    assert_eq!(sync(&vm(both.clone()), None, true), NetSync::default());
    let mut deleting = vmi(both.clone(), json!([]));
    deleting.metadata = serde_json::from_value(json!({"name": "vm",
        "deletionTimestamp": "2026-12-01T00:00:00Z"}))
    .unwrap();
    let mut unplug = both.clone();
    unplug["domain"]["devices"]["interfaces"][1]["state"] = json!("absent");
    assert_eq!(sync(&vm(unplug), Some(&deleting), true), NetSync::default());
    let empty = spec(&[], &[]);
    assert_eq!(
        sync(&vm(empty.clone()), Some(&vmi(empty, json!([]))), true),
        NetSync::default()
    );
    assert_eq!(
        sync(&vm(both.clone()), Some(&vmi(both, json!([]))), true),
        NetSync::default()
    );
    let one = spec(&[masquerade()], &[pod_net()]);
    let stray = vmi(one.clone(), status(&[("OTHER", "")]));
    assert_eq!(sync(&vm(one), Some(&stray), true), NetSync::default());
}

/// "sync succeeds to hotplug new interface": bridge and SR-IOV, with or without a link state;
/// "does not hotplug a new absent interface" nor one with another binding.
#[test]
fn hotplug_appends_bridge_and_sriov_interfaces() {
    let running = vmi(spec(&[masquerade()], &[pod_net()]), json!([]));
    let sriov = json!({"name": "red", "sriov": {}});
    let down = json!({"name": "red", "bridge": {}, "state": "down"});
    for iface in [bridge("red"), sriov, down] {
        let want = spec(
            &[masquerade(), iface.clone()],
            &[pod_net(), multus("red", "red-nad")],
        );
        let s = sync(&vm(want), Some(&running), true);
        let (nets, ifaces) = added(&s);
        assert_eq!(nets, json!([pod_net(), multus("red", "red-nad")]));
        assert_eq!(ifaces, json!([masquerade(), iface]));
        assert!(s.template.is_none());
    }
    let mut absent = bridge("red");
    absent["state"] = json!("absent");
    let passt = json!({"name": "red", "binding": {"name": "passt"}});
    for iface in [absent, passt] {
        let want = spec(
            &[masquerade(), iface],
            &[pod_net(), multus("red", "red-nad")],
        );
        assert!(sync(&vm(want), Some(&running), true).vmi_patch.is_none());
    }
}

/// "sync succeeds to mark an existing interface for hotunplug" (hashed pod interface names);
/// "sync does not hotunplug interfaces when naming scheme is unknown" or ordinal.
#[test]
fn unplug_marks_absent_only_with_hashed_names() {
    let have = spec(
        &[masquerade(), bridge("red")],
        &[pod_net(), multus("red", "red-nad")],
    );
    let mut want = have.clone();
    want["domain"]["devices"]["interfaces"][1]["state"] = json!("absent");
    let hashed = vmi(
        have.clone(),
        status(&[("default", "eth0"), ("red", "pod1f3c2b9a0de")]),
    );
    let s = sync(&vm(want.clone()), Some(&hashed), true);
    let (_, ifaces) = added(&s);
    assert_eq!(ifaces[1]["state"], "absent");
    // Still in the VMI's spec and status: the template keeps it.
    assert!(s.template.is_none());
    for names in [
        status(&[("default", "eth0"), ("red", "")]),
        status(&[("default", "eth0"), ("red", "net1")]),
    ] {
        let s = sync(&vm(want.clone()), Some(&vmi(have.clone(), names)), true);
        assert!(s.vmi_patch.is_none(), "{s:?}");
    }
}

/// "sync succeeds to clear hotunplug interfaces from running VM" and "from stopped VM": an
/// absent interface gone from the VMI's status leaves the VMI and then the template.
#[test]
fn unplugged_interfaces_are_cleared() {
    let mut gone = bridge("red");
    gone["state"] = json!("absent");
    let both = spec(
        &[masquerade(), gone],
        &[pod_net(), multus("red", "red-nad")],
    );
    let running = vmi(both.clone(), status(&[("default", "eth0")]));
    let s = sync(&vm(both.clone()), Some(&running), true);
    assert_eq!(added(&s), (json!([pod_net()]), json!([masquerade()])));
    let (ifaces, nets) = s.template.expect("template cleared");
    assert_eq!(
        (ifaces.len(), nets.len(), ifaces[0].name.as_str()),
        (1, 1, "default")
    );
    let stopped = sync(&vm(both), None, true);
    assert!(stopped.vmi_patch.is_none());
    assert_eq!(stopped.template.expect("template cleared").0.len(), 1);
}

/// "sync updates link state of an existing interface" and "doesn't update link state if
/// hot-unplug is underway".
#[test]
fn link_state_follows_the_template_unless_absent() {
    let states = ["", "up", "down"];
    for from in states {
        for to in states.iter().chain(&["absent"]) {
            let mut have = bridge("red");
            let mut want = bridge("red");
            if !from.is_empty() {
                have["state"] = json!(from);
            }
            if !to.is_empty() {
                want["state"] = json!(to);
            }
            let nets = [pod_net(), multus("red", "red-nad")];
            let names = status(&[("default", "eth0"), ("red", "pod1f3c2b9a0de")]);
            let running = vmi(spec(&[masquerade(), have], &nets), names);
            let s = sync(
                &vm(spec(&[masquerade(), want], &nets)),
                Some(&running),
                true,
            );
            if from == *to {
                assert!(s.vmi_patch.is_none());
            } else {
                let state = added(&s).1[1]["state"].clone();
                assert_eq!(state.as_str().unwrap_or(""), *to, "{from} → {to}");
            }
        }
        let mut absent = bridge("red");
        absent["state"] = json!("absent");
        let nets = [pod_net(), multus("red", "red-nad")];
        let names = status(&[("red", "pod1f3c2b9a0de")]);
        let running = vmi(spec(&[masquerade(), absent], &nets), names);
        let mut want = bridge("red");
        if !from.is_empty() {
            want["state"] = json!(from);
        }
        let s = sync(
            &vm(spec(&[masquerade(), want], &nets)),
            Some(&running),
            true,
        );
        assert!(s.vmi_patch.is_none(), "absent → {from}");
    }
}

/// "sync handles NAD reference updates by copying NAD reference to VMI", and (PR 18194, main)
/// not when the caller says the NAD must not be synced.
#[test]
fn nad_reference_reaches_the_vmi() {
    let ifaces = [masquerade(), bridge("red"), bridge("blue")];
    let have = spec(
        &ifaces,
        &[
            pod_net(),
            multus("red", "red-nad"),
            multus("blue", "blue-nad"),
        ],
    );
    let want = spec(
        &ifaces,
        &[
            pod_net(),
            multus("red", "ns2/red-v2"),
            multus("blue", "blue-v2"),
        ],
    );
    let running = vmi(have, json!([]));
    let s = sync(&vm(want.clone()), Some(&running), true);
    let (nets, _) = added(&s);
    assert_eq!(nets[1]["multus"]["networkName"], "ns2/red-v2");
    assert_eq!(nets[2]["multus"]["networkName"], "blue-v2");
    assert!(
        s.vmi_patch
            .unwrap()
            .why
            .contains("NAD red-nad → ns2/red-v2")
    );
    assert!(sync(&vm(want), Some(&running), false).vmi_patch.is_none());
}

/// "Sync successfully performs hotplug and hotunplug at the same time".
#[test]
fn hotplug_and_unplug_together() {
    let have = spec(
        &[masquerade(), bridge("red")],
        &[pod_net(), multus("red", "red-nad")],
    );
    let mut gone = bridge("red");
    gone["state"] = json!("absent");
    let want = spec(
        &[masquerade(), gone, bridge("blue")],
        &[
            pod_net(),
            multus("red", "red-nad"),
            multus("blue", "blue-nad"),
        ],
    );
    let names = status(&[("default", "eth0"), ("red", "pod1f3c2b9a0de")]);
    let s = sync(&vm(want), Some(&vmi(have, names)), true);
    let (nets, ifaces) = added(&s);
    assert_eq!(ifaces[1]["state"], "absent");
    assert_eq!(ifaces[2]["name"], "blue");
    assert_eq!(nets.as_array().unwrap().len(), 3);
}
