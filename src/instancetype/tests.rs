//! Cases follow KubeVirt's pkg/instancetype tests (apply/*_test.go, preference/apply/*_test.go,
//! revision/store_test.go); the expected values are worked out here from the rules.

use super::apply::{apply_to_vmi, guest_topology, overcommitted_request};
use super::*;
use crate::api::SmallMap;
use serde_json::json;

fn vm(spec: Value, status: Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid"},
        "spec": spec, "status": status,
    }))
    .unwrap()
}

fn apply(
    it: Option<Value>,
    pref: Option<Value>,
    mut spec: Value,
) -> (Value, BTreeMap<String, String>, Conflicts) {
    let mut ann = SmallMap::new();
    let c = apply_to_vmi(
        "spec.template.spec",
        it.as_ref(),
        pref.as_ref(),
        &mut spec,
        &mut ann,
    );
    (spec, ann.to_btree_map(), c)
}
use apply::Conflicts;

fn full_cpu_instancetype() -> Value {
    json!({
        "cpu": {"guest": 2, "model": "host-passthrough", "dedicatedCPUPlacement": true,
                "isolateEmulatorThread": true, "numa": {"guestMappingPassthrough": {}},
                "realtime": {"mask": "0-3,^1"}, "maxSockets": 6},
        "memory": {"guest": "512M"}
    })
}

/// apply/cpu_test.go "should default to PreferSockets" / PreferCores / PreferThreads / PreferAny.
#[test]
fn cpu_topology_follows_the_preferred_topology() {
    let cases = [
        (None, (2, 1, 1)),
        (Some("any"), (2, 1, 1)),
        (Some("preferAny"), (2, 1, 1)),
        (Some("cores"), (1, 2, 1)),
        (Some("preferCores"), (1, 2, 1)),
        (Some("threads"), (1, 1, 2)),
        (Some("sockets"), (2, 1, 1)),
    ];
    for (topology, (s, c, t)) in cases {
        let pref =
            json!({"cpu": topology.map_or(json!({}), |t| json!({"preferredCPUTopology": t}))});
        let (spec, _, conflicts) = apply(Some(full_cpu_instancetype()), Some(pref), json!({}));
        assert!(conflicts.is_empty());
        let cpu = &spec["domain"]["cpu"];
        assert_eq!(
            (
                cpu["sockets"].clone(),
                cpu["cores"].clone(),
                cpu["threads"].clone()
            ),
            (json!(s), json!(c), json!(t)),
            "{topology:?}"
        );
        assert_eq!(cpu["model"], "host-passthrough");
        assert_eq!(cpu["dedicatedCpuPlacement"], true);
        assert_eq!(cpu["isolateEmulatorThread"], true);
        assert_eq!(cpu["numa"], json!({"guestMappingPassthrough": {}}));
        assert_eq!(cpu["realtime"], json!({"mask": "0-3,^1"}));
        assert_eq!(cpu["maxSockets"], 6);
    }
}

/// apply/cpu_test.go "with PreferSpread" table: (vCPUs, ratio, across) → (sockets, cores, threads).
#[test]
fn spread_topology() {
    type Case<'a> = (u32, Option<u32>, Option<&'a str>, (u32, u32, u32));
    let cases: [Case; 9] = [
        (1, None, None, (1, 1, 1)),
        (2, None, None, (1, 2, 1)),
        (8, None, None, (4, 2, 1)),
        (9, Some(3), None, (3, 3, 1)),
        (16, Some(4), None, (4, 4, 1)),
        (8, None, Some("SocketsCoresThreads"), (2, 2, 2)),
        (18, Some(3), Some("SocketsCoresThreads"), (3, 3, 2)),
        (36, Some(4), Some("SocketsCoresThreads"), (4, 4, 2)),
        (6, None, Some("CoresThreads"), (1, 3, 2)),
    ];
    for (vcpus, ratio, across, want) in cases {
        let mut opts = json!({});
        if let Some(r) = ratio {
            opts["ratio"] = json!(r);
        }
        if let Some(a) = across {
            opts["across"] = json!(a);
        }
        let pref = json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": opts}});
        assert_eq!(
            guest_topology(vcpus, Some(&pref)),
            want,
            "{vcpus} {ratio:?} {across:?}"
        );
    }
    // The deprecated ratio field, and a zero ratio does not panic.
    let pref = json!({"cpu": {"preferredCPUTopology": "preferSpread"}, "preferSpreadSocketToCoreRatio": 3});
    assert_eq!(guest_topology(6, Some(&pref)), (2, 3, 1));
    let pref = json!({"cpu": {"preferredCPUTopology": "spread", "spreadOptions": {"ratio": 0}}});
    assert_eq!(guest_topology(4, Some(&pref)), (0, 0, 1));
}

/// apply/cpu_test.go conflict cases: every CPU field the VM sets, all reported.
#[test]
fn cpu_conflicts_are_all_reported() {
    let spec = json!({"domain": {
        "cpu": {"sockets": 1, "cores": 2, "threads": 1, "model": "host-model",
                "dedicatedCpuPlacement": true, "isolateEmulatorThread": true,
                "numa": {}, "realtime": {}},
        "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}});
    let (_, _, c) = apply(Some(full_cpu_instancetype()), None, spec);
    let p = |s: &str| format!("spec.template.spec.{s}");
    assert_eq!(
        c.0,
        vec![
            p("domain.resources.requests.cpu"),
            p("domain.resources.limits.cpu"),
            p("domain.cpu.sockets"),
            p("domain.cpu.cores"),
            p("domain.cpu.threads"),
            p("domain.cpu.model"),
            p("domain.cpu.dedicatedCPUPlacement"),
            p("domain.cpu.isolateEmulatorThread"),
            p("domain.cpu.numa"),
            p("domain.cpu.realtime"),
        ]
    );
    assert_eq!(
        c.to_string(),
        format!(
            "VM field(s) {} conflicts with selected instance type",
            c.paths()
        )
    );
    // A model the instancetype does not set is no conflict.
    let it = json!({"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}});
    let (spec, _, c) = apply(
        Some(it),
        None,
        json!({"domain": {"cpu": {"model": "host-model"}}}),
    );
    assert!(c.is_empty());
    assert_eq!(spec["domain"]["cpu"]["model"], "host-model");
}

/// apply/memory_test.go: guest, hugepages, maxGuest applied; the first memory conflict only.
#[test]
fn memory_and_its_conflicts() {
    let it = json!({"cpu": {"guest": 1}, "memory": {"guest": "512M", "hugepages": {"pageSize": "1Gi"}, "maxGuest": "2048M"}});
    let (spec, _, c) = apply(Some(it.clone()), None, json!({}));
    assert!(c.is_empty());
    assert_eq!(
        spec["domain"]["memory"],
        json!({"guest": "512M", "hugepages": {"pageSize": "1Gi"}, "maxGuest": "2048M"})
    );
    // Canonical quantities, as Go re-encodes them.
    let it2 = json!({"cpu": {"guest": 1}, "memory": {"guest": "1024Mi"}});
    assert_eq!(
        apply(Some(it2), None, json!({})).0["domain"]["memory"]["guest"],
        "1Gi"
    );
    for (spec, path) in [
        (
            json!({"domain": {"memory": {"guest": "1G", "hugepages": {}}}}),
            "domain.memory.guest",
        ),
        (
            json!({"domain": {"memory": {"hugepages": {"pageSize": "2Mi"}}}}),
            "domain.memory.hugepages",
        ),
        (
            json!({"domain": {"memory": {"maxGuest": "4G"}}}),
            "domain.memory.maxGuest",
        ),
        (
            json!({"domain": {"resources": {"requests": {"memory": "1G"}}}}),
            "domain.resources.requests.memory",
        ),
        (
            json!({"domain": {"resources": {"limits": {"memory": "1G"}}}}),
            "domain.resources.limits.memory",
        ),
    ] {
        let (_, _, c) = apply(Some(it.clone()), None, spec);
        assert_eq!(c.0, vec![format!("spec.template.spec.{path}")]);
    }
}

/// apply/memory_test.go "should apply memory overcommit": 512M at 15% and 80%, in float32.
#[test]
fn memory_overcommit_request() {
    // float32 arithmetic, worked out with IEEE single precision: 1 − 15/100 = 0.85000002,
    // 512e6 × that = 435200000 (a multiple of 1000: `435200k`); 1 − 80/100 = 0.19999999,
    // 512e6 × that rounds to 102399992.
    assert_eq!(overcommitted_request(&json!("512M"), 15), "435200k");
    assert_eq!(overcommitted_request(&json!("512M"), 80), "102399992");
    assert_eq!(overcommitted_request(&json!("1Gi"), 50), "512Mi");
    let it = json!({"cpu": {"guest": 1}, "memory": {"guest": "1Gi", "overcommitPercent": 50}});
    let (spec, _, _) = apply(Some(it), None, json!({}));
    assert_eq!(spec["domain"]["resources"]["requests"]["memory"], "512Mi");
}

/// apply/{gpu,hostdevices,iothreadpolicy,iothreads,launchsecurity,nodeselector,scheduler}_test.go.
#[test]
fn device_and_scheduling_fields() {
    let it = json!({
        "cpu": {"guest": 1}, "memory": {"guest": "1Gi"},
        "gpus": [{"name": "gpu1", "deviceName": "vendor.com/gpu"}],
        "hostDevices": [{"name": "hd1", "deviceName": "vendor.com/hd"}],
        "ioThreadsPolicy": "auto", "ioThreads": {"supplementalPoolThreadCount": 4},
        "launchSecurity": {"sev": {}}, "nodeSelector": {"zone": "a"}, "schedulerName": "s1",
        "annotations": {"a": "1"}
    });
    let (spec, ann, c) = apply(Some(it.clone()), None, json!({}));
    assert!(c.is_empty());
    let d = &spec["domain"];
    assert_eq!(d["devices"]["gpus"], it["gpus"]);
    assert_eq!(d["devices"]["hostDevices"], it["hostDevices"]);
    assert_eq!(d["ioThreadsPolicy"], "auto");
    assert_eq!(d["ioThreads"]["supplementalPoolThreadCount"], 4);
    assert_eq!(d["launchSecurity"], json!({"sev": {}}));
    assert_eq!(spec["nodeSelector"], json!({"zone": "a"}));
    assert_eq!(spec["schedulerName"], "s1");
    assert_eq!(ann.get("a").map(String::as_str), Some("1"));

    let taken = json!({
        "domain": {"devices": {"gpus": [{"name": "g"}], "hostDevices": [{"name": "h"}]},
                   "ioThreadsPolicy": "shared", "ioThreads": {"supplementalPoolThreadCount": 1},
                   "launchSecurity": {}},
        "nodeSelector": {}, "schedulerName": "other"
    });
    let mut ann = SmallMap::from([("a".to_string(), "2".to_string())]);
    let mut spec = taken;
    let c = apply_to_vmi("spec", Some(&it), None, &mut spec, &mut ann);
    assert_eq!(
        c.0,
        vec![
            "spec.nodeSelector",
            "spec.schedulerName",
            "spec.domain.ioThreads.supplementalPoolThreadCount",
            "spec.domain.ioThreadsPolicy",
            "spec.domain.launchSecurity",
            "spec.domain.devices.gpus",
            "spec.domain.devices.hostDevices",
            "annotations.a"
        ]
    );
}

/// preference/apply/*_test.go: defaults fill only what the VMI leaves unset.
#[test]
fn preference_defaults_fill_unset_fields() {
    let pref = json!({
        "devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio",
                    "preferredCdromBus": "sata", "preferredInputBus": "usb", "preferredInputType": "tablet",
                    "preferredRng": {}, "preferredAutoattachGraphicsDevice": false,
                    "preferredDiskDedicatedIoThread": true, "preferredVideoType": "virtio",
                    "preferredInterfaceMasquerade": {}},
        "features": {"preferredSmm": {}, "preferredHyperv": {"relaxed": {}, "vapic": {}}},
        "firmware": {"preferredUseEfi": true, "preferredUseSecureBoot": true},
        "machine": {"preferredMachineType": "q35"},
        "clock": {"preferredClockOffset": {"utc": {}}, "preferredTimer": {"hpet": {"present": false}}},
        "preferredSubdomain": "sub", "preferredTerminationGracePeriodSeconds": 30,
        "preferredArchitecture": "amd64", "annotations": {"p": "1", "keep": "pref"},
        "cpu": {"preferredCPUFeatures": [{"name": "pcid"}, {"name": "vmx", "policy": "require"}]}
    });
    let mut spec = json!({"domain": {
        "cpu": {"features": [{"name": "vmx", "policy": "disable"}]},
        "devices": {"disks": [{"name": "root"}, {"name": "cd", "cdrom": {}}, {"name": "d2", "disk": {"bus": "sata"}}],
                    "interfaces": [{"name": "default"}, {"name": "b", "bridge": {}}],
                    "inputs": [{"name": "i"}]},
        "machine": {"type": "pc"}},
        "networks": [{"name": "default", "pod": {}}, {"name": "b", "multus": {"networkName": "n"}}]});
    let mut ann = SmallMap::from([("keep".to_string(), "vm".to_string())]);
    preference::apply(&pref, &mut spec, &mut ann);
    let d = &spec["domain"];
    assert_eq!(
        d["cpu"]["features"],
        json!([{"name": "vmx", "policy": "disable"}, {"name": "pcid"}])
    );
    assert_eq!(
        d["devices"]["disks"],
        json!([
        {"name": "root", "disk": {"bus": "virtio"}, "dedicatedIOThread": true},
        {"name": "cd", "cdrom": {"bus": "sata"}},
        {"name": "d2", "disk": {"bus": "sata"}}])
    );
    assert_eq!(
        d["devices"]["interfaces"],
        json!([
        {"name": "default", "model": "virtio", "masquerade": {}},
        {"name": "b", "bridge": {}, "model": "virtio"}])
    );
    assert_eq!(
        d["devices"]["inputs"],
        json!([{"name": "i", "bus": "usb", "type": "tablet"}])
    );
    assert_eq!(d["devices"]["rng"], json!({}));
    assert_eq!(d["devices"]["autoattachGraphicsDevice"], false);
    assert_eq!(d["devices"]["video"], json!({"type": "virtio"}));
    assert_eq!(
        d["features"],
        json!({"acpi": {}, "smm": {}, "hyperv": {"relaxed": {}, "vapic": {}}})
    );
    assert_eq!(
        d["firmware"],
        json!({"bootloader": {"efi": {"secureBoot": true}}})
    );
    assert_eq!(d["machine"], json!({"type": "pc"}));
    assert_eq!(
        d["clock"],
        json!({"utc": {}, "timer": {"hpet": {"present": false}}})
    );
    assert_eq!(spec["subdomain"], "sub");
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);
    assert_eq!(spec["architecture"], "amd64");
    assert_eq!(
        ann.to_btree_map(),
        BTreeMap::from([("keep".into(), "vm".into()), ("p".into(), "1".into())])
    );
}

/// preference/apply/firmware_test.go: BIOS wins over EFI; preferredEfi returns early.
#[test]
fn firmware_preferences() {
    let run = |pref: Value, spec: Value| {
        let mut s = spec;
        preference::apply(&pref, &mut s, &mut SmallMap::new());
        s["domain"]["firmware"].clone()
    };
    assert_eq!(
        run(
            json!({"firmware": {"preferredUseBios": true, "preferredUseBiosSerial": true, "preferredUseEfi": true}}),
            json!({})
        ),
        json!({"bootloader": {"bios": {"useSerial": true}}})
    );
    assert_eq!(
        run(
            json!({"firmware": {"preferredEfi": {"persistent": true}, "preferredUseSecureBoot": false}}),
            json!({})
        ),
        json!({"bootloader": {"efi": {"persistent": true}}})
    );
    // A firmware section with nothing applicable still leaves an (empty) bootloader.
    assert_eq!(
        run(
            json!({"firmware": {"preferredUseBios": false}}),
            json!({"domain": {"firmware": {"uuid": "u"}}})
        ),
        json!({"uuid": "u", "bootloader": {}})
    );
}

/// The conflict check of `Store` runs without the preference; `ApplyToVMI` with both.
#[test]
fn conflicts_stop_the_preference() {
    let it = json!({"cpu": {"guest": 2}, "memory": {"guest": "1Gi"}});
    let pref = json!({"preferredSubdomain": "s"});
    let (spec, _, c) = apply(
        Some(it),
        Some(pref),
        json!({"domain": {"memory": {"guest": "2Gi"}}}),
    );
    assert_eq!(c.0, vec!["spec.template.spec.domain.memory.guest"]);
    assert!(spec.get("subdomain").is_none());
}

fn cluster_it(name: &str, generation: i64) -> Value {
    json!({"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": "VirtualMachineClusterInstancetype",
           "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": generation,
                        "resourceVersion": "7", "labels": {"l": "v"}, "annotations": {"a": "b"},
                        "managedFields": [{}]},
           "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2048Mi"}}})
}

/// revision/store_test.go: the stashed revision's name, labels, owner and data.
#[test]
fn revision_is_named_labelled_and_owned_as_kubevirt_does() {
    let v = vm(
        json!({"instancetype": {"name": "u1"}, "template": {"spec": {"domain": {"devices": {}}}}}),
        json!({}),
    );
    let cr = revision::build(&v, Resource::ClusterInstancetype, &cluster_it("u1", 3));
    assert_eq!(cr.metadata.name.as_deref(), Some("vm-u1-v1beta1-u1-uid-3"));
    assert_eq!(cr.metadata.namespace.as_deref(), Some("ns"));
    let owner = &cr.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("VirtualMachine", "vm-uid", Some(true))
    );
    assert_eq!(
        serde_json::to_value(&cr.metadata.labels).unwrap(),
        json!({
        "instancetype.kubevirt.io/object-generation": "3",
        "instancetype.kubevirt.io/object-kind": "VirtualMachineClusterInstancetype",
        "instancetype.kubevirt.io/object-name": "u1",
        "instancetype.kubevirt.io/object-uid": "u1-uid",
        "instancetype.kubevirt.io/object-version": "v1beta1"})
    );
    let data = &cr.data.as_ref().unwrap().0;
    assert_eq!(
        data["metadata"],
        json!({"name": "u1", "uid": "u1-uid", "generation": 3, "resourceVersion": "7"})
    );
    assert_eq!(data["spec"]["memory"]["guest"], "2Gi");
    assert_eq!(
        revision::stashed_spec(&cr, false).unwrap()["cpu"]["guest"],
        2
    );
    assert!(
        revision::stashed_spec(&cr, true)
            .unwrap_err()
            .contains("unexpected type")
    );
    assert!(revision::is_latest_version(&cr));
    assert!(revision::same_spec(&cr, &cr.clone()));
}

/// find/spec.go + find/revision.go: revisionName, then the status ref when it stashes the named
/// object, then the object; KubeVirt's errors otherwise.
#[test]
fn find_prefers_revisions() {
    let v0 = vm(
        json!({"instancetype": {"name": "u1"}, "template": {}}),
        json!({}),
    );
    let cr = Arc::new(revision::build(
        &v0,
        Resource::ClusterInstancetype,
        &cluster_it("u1", 1),
    ));
    let mut objects = Objects::default();
    let mut newer = cluster_it("u1", 2);
    newer["spec"]["cpu"]["guest"] = json!(4);
    objects.0.insert(
        (Resource::ClusterInstancetype, "u1".into()),
        Arc::new(newer),
    );
    let revs = vec![cr.clone()];
    let name = cr.metadata.name.clone().unwrap();
    let guest = |v: &VirtualMachine| {
        find_spec(v, false, &objects, &revs).map(|s| s.unwrap()["cpu"]["guest"].clone())
    };
    // No ref: the object.
    assert_eq!(guest(&v0), Ok(json!(4)));
    // Status ref to a revision of the same object: the revision.
    let with_ref = vm(
        json!({"instancetype": {"name": "u1"}, "template": {}}),
        json!({"instancetypeRef": {"name": "u1", "controllerRevisionRef": {"name": name}}}),
    );
    assert_eq!(guest(&with_ref), Ok(json!(2)));
    // The matcher now names another object: the ref is ignored; that object is missing.
    let renamed = vm(
        json!({"instancetype": {"name": "u2"}, "template": {}}),
        json!({"instancetypeRef": {"name": "u1", "controllerRevisionRef": {"name": name}}}),
    );
    assert_eq!(
        guest(&renamed),
        Err("virtualmachineclusterinstancetypes.instancetype.kubevirt.io \"u2\" not found".into())
    );
    // spec revisionName wins; a missing one is an error.
    let pinned = vm(
        json!({"instancetype": {"name": "u1", "revisionName": "gone"}, "template": {}}),
        json!({}),
    );
    assert_eq!(
        guest(&pinned),
        Err("controllerrevisions.apps \"gone\" not found".into())
    );
    let bad_kind = vm(
        json!({"instancetype": {"name": "u1", "kind": "Pod"}, "template": {}}),
        json!({}),
    );
    assert_eq!(
        guest(&bad_kind),
        Err("got unexpected kind in InstancetypeMatcher: Pod".into())
    );
    let ns_kind = vm(
        json!({"preference": {"name": "p", "kind": "VirtualMachinePreferences"}, "template": {}}),
        json!({}),
    );
    assert_eq!(
        find_spec(&ns_kind, true, &objects, &revs),
        Err("virtualmachinepreferences.instancetype.kubevirt.io \"p\" not found".into())
    );
}

#[test]
fn name_annotations_by_kind() {
    let v = vm(
        json!({"instancetype": {"name": "i", "kind": "virtualmachineinstancetype"},
                      "preference": {"name": "p"}, "template": {}}),
        json!({}),
    );
    let mut ann = crate::api::SmallMap::default();
    set_name_annotations(&v, &mut ann);
    assert_eq!(
        ann.to_btree_map(),
        BTreeMap::from([
            ("kubevirt.io/instancetype-name".into(), "i".into()),
            ("kubevirt.io/cluster-preference-name".into(), "p".into())
        ])
    );
}
