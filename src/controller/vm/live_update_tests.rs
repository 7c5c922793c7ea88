//! Cases after KubeVirt v1.9.0's vm_test.go "Live update features" (5361-6100), values
//! re-derived from the rules.

use super::*;
use serde_json::json;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn spec(v: Value) -> VirtualMachineInstanceSpec {
    serde_json::from_value(v).unwrap()
}

fn vmi(spec: Value, status: Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": spec, "status": status}))
        .unwrap()
}

/// The VMI JSON after applying the outcome's patches (panics on anything but patches).
fn patched(vmi: &VirtualMachineInstance, outcome: Outcome) -> Value {
    let Outcome::Patch(patches) = outcome else {
        panic!("expected patches, got {outcome:?}");
    };
    let mut doc = serde_json::to_value(vmi).unwrap();
    for p in patches {
        let patch: json_patch::Patch = serde_json::from_value(p.patch).unwrap();
        json_patch::patch(&mut doc, &patch).unwrap();
    }
    doc
}

fn cpu_vmi(resources: Value, conditions: Value) -> VirtualMachineInstance {
    vmi(
        json!({"domain": {"cpu": {"sockets": 1, "maxSockets": 4}, "resources": resources,
                          "devices": {}}}),
        json!({"conditions": conditions}),
    )
}

fn cpu_want(sockets: u32, resources: Value) -> VirtualMachineInstanceSpec {
    spec(json!({"domain": {"cpu": {"sockets": sockets}, "resources": resources, "devices": {}}}))
}

/// vm_test.go:5394 "should patch VMI when CPU hotplug is requested": sockets replaced; request
/// and limit grow by 1000/10 = 100m per added vCPU, only where set.
#[test]
fn cpu_hotplug_patches_sockets_and_grows_set_resources() {
    let cases = [
        (json!({}), None, None),
        (json!({"requests": {"cpu": "100m"}}), Some("200m"), None),
        (
            json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "400m"}}),
            Some("200m"),
            Some("500m"),
        ),
    ];
    for (resources, request, limit) in cases {
        let v = cpu_vmi(resources.clone(), json!([]));
        let out = patched(
            &v,
            cpu_change(&cpu_want(2, resources), "amd64", &v, now(), 10),
        );
        assert_eq!(out["spec"]["domain"]["cpu"]["sockets"], 2);
        let res = &out["spec"]["domain"]["resources"];
        assert_eq!(res["requests"]["cpu"].as_str(), request);
        assert_eq!(res["limits"]["cpu"].as_str(), limit);
    }
    // Ratio 3: 1000/3 = 333m per vCPU (Go's integer division); two sockets added.
    let r = json!({"requests": {"cpu": "1"}});
    let v = cpu_vmi(r.clone(), json!([]));
    let out = patched(&v, cpu_change(&cpu_want(3, r), "amd64", &v, now(), 3));
    assert_eq!(
        out["spec"]["domain"]["resources"]["requests"]["cpu"],
        "1666m"
    );
}

/// vm_test.go:5368-5390 (maxSockets), 5503 (ARM) and vm.go:640-660: the restart and refusal
/// rules, in KubeVirt's order.
#[test]
fn cpu_hotplug_restart_and_refusal_rules() {
    let v = cpu_vmi(json!({}), json!([]));
    let restart = |o: Outcome| match o {
        Outcome::RestartRequired(m) => m,
        other => panic!("expected RestartRequired, got {other:?}"),
    };
    assert!(
        restart(cpu_change(&cpu_want(5, json!({})), "amd64", &v, now(), 10)).contains("higher")
    );
    let two = vmi(
        json!({"domain": {"cpu": {"sockets": 2, "maxSockets": 4}, "devices": {}}}),
        json!({}),
    );
    assert_eq!(
        restart(cpu_change(
            &cpu_want(1, json!({})),
            "amd64",
            &two,
            now(),
            10
        )),
        "Reduction of CPU socket count requires a restart"
    );
    assert_eq!(
        restart(cpu_change(&cpu_want(2, json!({})), "arm64", &v, now(), 10)),
        "ARM doesn't support CPU hotplug"
    );
    let busy = cpu_vmi(
        json!({}),
        json!([{"type": "HotVCPUChange", "status": "True"}]),
    );
    assert_eq!(
        cpu_change(&cpu_want(2, json!({})), "amd64", &busy, now(), 10),
        Outcome::Refused("another CPU hotplug is in progress".into())
    );
    let mut migrating = cpu_vmi(json!({}), json!([]));
    migrating.status.as_mut().unwrap().migration_state =
        Some(Box::new(json!({"startTimestamp": "2025-12-31T23:59:00Z"})));
    assert_eq!(
        cpu_change(&cpu_want(2, json!({})), "amd64", &migrating, now(), 10),
        Outcome::Refused("CPU hotplug is not allowed while VMI is migrating".into())
    );
    // Same sockets, or no CPU on either side: nothing to do.
    assert_eq!(
        cpu_change(&cpu_want(1, json!({})), "amd64", &v, now(), 10),
        Outcome::Unchanged
    );
    let no_cpu = spec(json!({"domain": {"devices": {}}}));
    assert_eq!(
        cpu_change(&no_cpu, "amd64", &v, now(), 10),
        Outcome::Unchanged
    );
}

/// vm_test.go:5917 "Tolerations should be live-updated" (added, changed, removed) and 6009
/// "Affinity should be live-updated": add when the VMI has none, test+replace, remove.
#[test]
fn tolerations_affinity_and_node_selector_are_carried_to_the_vmi() {
    let tol = json!([{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]);
    let bare = vmi(json!({"domain": {"devices": {}}}), json!({}));
    let want = spec(json!({"domain": {"devices": {}}, "tolerations": tol}));
    let out = patched(&bare, tolerations_change(&want, &bare, now()));
    assert_eq!(out["spec"]["tolerations"], tol);
    let with = vmi(
        json!({"domain": {"devices": {}}, "tolerations": [{"key": "old"}]}),
        json!({}),
    );
    let out = patched(&with, tolerations_change(&want, &with, now()));
    assert_eq!(out["spec"]["tolerations"], tol);
    let none = spec(json!({"domain": {"devices": {}}}));
    let out = patched(&with, tolerations_change(&none, &with, now()));
    assert!(out["spec"].get("tolerations").is_none());
    assert_eq!(tolerations_change(&none, &bare, now()), Outcome::Unchanged);

    let affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
        {"nodeSelectorTerms": [{"matchExpressions":
            [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}});
    let want = spec(json!({"domain": {"devices": {}}, "affinity": affinity,
                           "nodeSelector": {"disk": "ssd"}}));
    let Outcome::Patch(ps) = affinity_change(&want, &bare, now()) else {
        panic!("expected patches");
    };
    assert_eq!(
        ps.len(),
        2,
        "affinity and node selector are separate patches"
    );
    let out = patched(&bare, affinity_change(&want, &bare, now()));
    assert_eq!(out["spec"]["affinity"], affinity);
    assert_eq!(out["spec"]["nodeSelector"], json!({"disk": "ssd"}));
    let mut migrating = bare.clone();
    migrating.status.as_mut().unwrap().migration_state =
        Some(Box::new(json!({"startTimestamp": "2025-12-31T23:59:00Z"})));
    assert!(matches!(
        affinity_change(&want, &migrating, now()),
        Outcome::Refused(_)
    ));
}

fn mem_vmi(resources: Value, conditions: Value) -> VirtualMachineInstance {
    vmi(
        json!({"architecture": "amd64",
               "domain": {"memory": {"guest": "1Gi", "maxGuest": "4Gi"}, "resources": resources,
                          "devices": {}}}),
        json!({"conditions": conditions,
               "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"}}),
    )
}

fn mem_want(guest: &str, resources: Value) -> VirtualMachineInstanceSpec {
    spec(json!({"architecture": "amd64",
                "domain": {"memory": {"guest": guest}, "resources": resources, "devices": {}}}))
}

fn migratable() -> Value {
    json!([{"type": "LiveMigratable", "status": "True"}])
}

/// vm_test.go:5569 "should patch VMI when memory hotplug is requested": guest replaced, the
/// request grows by new guest − guestCurrent, the limit by the same where the template has one.
#[test]
fn memory_hotplug_patches_guest_request_and_limit() {
    let r = json!({"requests": {"memory": "1Gi"}});
    let v = mem_vmi(r.clone(), migratable());
    let out = patched(&v, memory_change(&mem_want("2Gi", r), &v, now()));
    assert_eq!(out["spec"]["domain"]["memory"]["guest"], "2Gi");
    assert_eq!(
        out["spec"]["domain"]["resources"]["requests"]["memory"],
        "2Gi"
    );
    let r = json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "4Gi"}});
    let v = mem_vmi(r.clone(), migratable());
    let out = patched(&v, memory_change(&mem_want("3Gi", r), &v, now()));
    let res = &out["spec"]["domain"]["resources"];
    assert_eq!(res["requests"]["memory"], "3Gi");
    assert_eq!(res["limits"]["memory"], "6Gi");
    // A request below the new guest size after the delta is raised to it; the limit then does
    // not grow (vm.go:3528-3533).
    let r = json!({"requests": {"memory": "512Mi"}, "limits": {"memory": "4Gi"}});
    let v = mem_vmi(r.clone(), migratable());
    let out = patched(&v, memory_change(&mem_want("2Gi", r), &v, now()));
    let res = &out["spec"]["domain"]["resources"];
    assert_eq!(res["requests"]["memory"], "2Gi");
    assert_eq!(res["limits"]["memory"], "4Gi");
}

/// vm_test.go:5624-5900: in progress, unchanged, below boot size, not migratable, failed
/// hotplug, incompatible configuration.
#[test]
fn memory_hotplug_restart_and_refusal_rules() {
    let restart = |o: Outcome| match o {
        Outcome::RestartRequired(m) => m,
        other => panic!("expected RestartRequired, got {other:?}"),
    };
    let v = mem_vmi(json!({}), migratable());
    assert_eq!(
        memory_change(&mem_want("1Gi", json!({})), &v, now()),
        Outcome::Unchanged
    );
    let busy = mem_vmi(
        json!({}),
        json!([{"type": "LiveMigratable", "status": "True"},
               {"type": "HotMemoryChange", "status": "True"}]),
    );
    assert_eq!(
        memory_change(&mem_want("2Gi", json!({})), &busy, now()),
        Outcome::Refused("another memory hotplug is in progress".into())
    );
    let mut booted_big = mem_vmi(json!({}), migratable());
    booted_big.spec.domain.memory.as_mut().unwrap().guest = Some(Quantity("3Gi".into()));
    let m = booted_big.status.as_mut().unwrap().memory.as_mut().unwrap();
    m.extra = serde_json::from_value(json!({"guestAtBoot": "3Gi", "guestCurrent": "3Gi"})).unwrap();
    assert_eq!(
        restart(memory_change(
            &mem_want("2Gi", json!({})),
            &booted_big,
            now()
        )),
        "memory updated in template spec to a value lower than what the VM started with"
    );
    let not_migratable = mem_vmi(json!({}), json!([]));
    assert!(
        restart(memory_change(
            &mem_want("2Gi", json!({})),
            &not_migratable,
            now()
        ))
        .ends_with("only available for migratable VMs")
    );
    let failed = mem_vmi(
        json!({}),
        json!([{"type": "LiveMigratable", "status": "True"},
               {"type": "HotMemoryChange", "status": "False"}]),
    );
    // A failed hotplug needs a restart even when the sizes agree (checked first).
    assert!(
        restart(memory_change(&mem_want("1Gi", json!({})), &failed, now()))
            .contains("Memory-hotplug failed")
    );
    assert_eq!(
        restart(memory_change(&mem_want("5Gi", json!({})), &v, now())),
        "memory hotplug not supported, Guest memory is greater than the configured maxGuest memory"
    );
    assert_eq!(
        restart(memory_change(&mem_want("1025Mi", json!({})), &v, now())),
        "memory hotplug not supported, Guest memory must be 2Mi aligned"
    );
    // Without guestCurrent (no virt-handler report yet) the handler does nothing.
    let unreported = vmi(
        json!({"domain": {"memory": {"guest": "1Gi", "maxGuest": "4Gi"}, "devices": {}}}),
        json!({}),
    );
    assert_eq!(
        memory_change(&mem_want("2Gi", json!({})), &unreported, now()),
        Outcome::Unchanged
    );
}

/// memory_test.go (pkg/liveupdate/memory): the validation rules and their texts.
#[test]
fn validate_live_update_memory_rules() {
    let gi = |n: i64| Some(ParsedQuantity::from_units(n << 30, Format::BinarySI));
    let ok = spec(json!({"architecture": "amd64",
                         "domain": {"memory": {"guest": "2Gi"}, "devices": {}}}));
    assert_eq!(validate_live_update_memory(&ok, gi(4)), Ok(()));
    assert!(
        validate_live_update_memory(&ok, None)
            .unwrap_err()
            .starts_with("Max guest")
    );
    let small = spec(json!({"architecture": "amd64",
                            "domain": {"memory": {"guest": "512Mi"}, "devices": {}}}));
    assert!(
        validate_live_update_memory(&small, gi(4))
            .unwrap_err()
            .contains("at least 1Gi")
    );
    let arm = spec(json!({"architecture": "arm64",
                          "domain": {"memory": {"guest": "2Gi"}, "devices": {}}}));
    assert!(
        validate_live_update_memory(&arm, gi(4))
            .unwrap_err()
            .contains("x86_64")
    );
    let huge = spec(json!({"architecture": "amd64",
        "domain": {"memory": {"guest": "2Gi", "hugepages": {"pageSize": "1Gi"}}, "devices": {}}}));
    let max = Some(ParsedQuantity::from_units(
        (4 << 30) + (2 << 20),
        Format::BinarySI,
    ));
    assert_eq!(
        validate_live_update_memory(&huge, max),
        Err("MaxGuest must be 1Gi aligned".into())
    );
    let realtime = spec(json!({"architecture": "amd64",
        "domain": {"cpu": {"realtime": {}}, "memory": {"guest": "2Gi"}, "devices": {}}}));
    assert!(
        validate_live_update_memory(&realtime, gi(4))
            .unwrap_err()
            .contains("realtime")
    );
    let sev = spec(json!({"architecture": "amd64",
        "domain": {"launchSecurity": {"sev": {}}, "memory": {"guest": "2Gi"}, "devices": {}}}));
    assert!(
        validate_live_update_memory(&sev, gi(4))
            .unwrap_err()
            .contains("encrypted")
    );
}
