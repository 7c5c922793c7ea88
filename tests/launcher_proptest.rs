//! Property tests of the virt-launcher pod renderer: random VMI specs (CPU topology, memory
//! guest / requests / limits / hugepages, dedicated CPUs, flags, cluster settings, namespace
//! quota) never make it panic, and unless `overcommitGuestOverhead` is set the `compute`
//! container's memory request is at least the memory overhead it reports.

use proptest::prelude::*;
use rand::SeedableRng;
use serde_json::{Value, json};
use virtctl_rs::api::quantity::ParsedQuantity;
use virtctl_rs::api::vmi::VirtualMachineInstance;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::launcher::pod::render_launch_manifest;
use virtctl_rs::launcher::resources::NamespaceContext;

fn memory_quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("64M".to_string()),
        Just("128Mi".to_string()),
        Just("1Gi".to_string()),
        Just("1G".to_string()),
        Just("1.5Gi".to_string()),
        Just("2048M".to_string()),
        Just("1e9".to_string()),
        (1u64..64 * 1024 * 1024 * 1024).prop_map(|b| b.to_string()),
        (1u32..4096).prop_map(|m| format!("{m}Mi")),
    ]
}

fn cpu_quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1m".to_string()),
        Just("100m".to_string()),
        Just("1".to_string()),
        Just("2.5".to_string()),
        (1u32..64).prop_map(|c| c.to_string()),
    ]
}

fn topology() -> impl Strategy<Value = Option<u32>> {
    prop_oneof![
        3 => proptest::option::of(0u32..9),
        1 => proptest::option::of(0u32..100_000),
    ]
}

prop_compose! {
    fn cpu()(
        cores in topology(), sockets in topology(), threads in topology(),
        dedicated in any::<bool>(), isolate in any::<bool>(),
        model in proptest::option::of(prop_oneof![Just("host-model"), Just(""), Just("Conroe")]),
    ) -> Value {
        json!({"cores": cores, "sockets": sockets, "threads": threads,
            "dedicatedCpuPlacement": dedicated, "isolateEmulatorThread": isolate, "model": model})
    }
}

prop_compose! {
    fn memory()(
        guest in proptest::option::of(memory_quantity()),
        hugepages in proptest::option::of(prop_oneof![Just("2Mi"), Just("1Gi"), Just("bogus")]),
    ) -> Value {
        let mut memory = json!({});
        if let Some(g) = guest { memory["guest"] = json!(g); }
        if let Some(h) = hugepages { memory["hugepages"] = json!({"pageSize": h}); }
        memory
    }
}

prop_compose! {
    fn resources()(
        mem_req in proptest::option::of(memory_quantity()),
        mem_lim in proptest::option::of(memory_quantity()),
        cpu_req in proptest::option::of(cpu_quantity()),
        cpu_lim in proptest::option::of(cpu_quantity()),
        overcommit_overhead in any::<bool>(),
    ) -> Value {
        let mut requests = json!({});
        let mut limits = json!({});
        if let Some(q) = mem_req { requests["memory"] = json!(q); }
        if let Some(q) = mem_lim { limits["memory"] = json!(q); }
        if let Some(q) = cpu_req { requests["cpu"] = json!(q); }
        if let Some(q) = cpu_lim { limits["cpu"] = json!(q); }
        json!({"requests": requests, "limits": limits, "overcommitGuestOverhead": overcommit_overhead})
    }
}

prop_compose! {
    fn devices()(
        graphics in proptest::option::of(any::<bool>()),
        interfaces in 0usize..3,
        vsock in any::<bool>(),
        gpus in 0usize..3,
        serial in proptest::option::of(any::<bool>()),
        disable_hotplug in any::<bool>(),
    ) -> Value {
        let mut d = json!({"disableHotplug": disable_hotplug});
        if let Some(g) = graphics { d["autoattachGraphicsDevice"] = json!(g); }
        if let Some(s) = serial { d["logSerialConsole"] = json!(s); }
        if vsock { d["autoattachVSOCK"] = json!(true); }
        let ifaces: Vec<Value> = (0..interfaces).map(|i| json!({"name": format!("n{i}"), "masquerade": {}})).collect();
        d["interfaces"] = json!(ifaces);
        let gpu_list: Vec<Value> = (0..gpus).map(|i| json!({"name": format!("g{i}"), "deviceName": "nvidia.com/X"})).collect();
        d["gpus"] = json!(gpu_list);
        d
    }
}

prop_compose! {
    fn domain()(
        cpu in proptest::option::of(cpu()),
        memory in memory(),
        resources in resources(),
        devices in devices(),
        io_threads in proptest::option::of(0u32..8),
    ) -> Value {
        let mut d = json!({"devices": devices, "memory": memory, "resources": resources});
        if let Some(c) = cpu { d["cpu"] = c; }
        if let Some(n) = io_threads {
            d["ioThreadsPolicy"] = json!("supplementalPool");
            d["ioThreads"] = json!({"supplementalPoolThreadCount": n});
        }
        d
    }
}

prop_compose! {
    fn settings()(
        ratio in 1u32..40, overcommit in 50u32..200, emulation in any::<bool>(),
        serial in any::<bool>(), image_volume in any::<bool>(),
    ) -> ClusterSettings {
        ClusterSettings {
            cpu_allocation_ratio: ratio,
            memory_overcommit: overcommit,
            use_emulation: emulation,
            serial_console_log: serial,
            disabled_feature_gates: if image_volume { vec![] } else { vec!["ImageVolume".into()] },
            ..ClusterSettings::default()
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn renderer_never_panics_and_request_covers_overhead(
        domain in domain(),
        settings in settings(),
        arch in prop_oneof![Just("amd64"), Just("arm64"), Just("")],
        grace in proptest::option::of(-5i64..1000),
        quota_cpu in any::<bool>(),
        quota_mem in any::<bool>(),
        root in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut spec = json!({"domain": domain, "architecture": arch,
            "volumes": [{"name": "cd", "containerDisk": {"image": "img"}}]});
        if let Some(g) = grace { spec["terminationGracePeriodSeconds"] = json!(g); }
        let mut doc = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "prop", "namespace": "ns", "uid": "u"}, "spec": spec});
        if root { doc["status"] = json!({"runtimeUser": 0}); }
        let vmi: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
        let overcommit_overhead = vmi.spec.domain.resources.as_ref()
            .and_then(|r| r.overcommit_guest_overhead).unwrap_or(false);
        let ns = NamespaceContext { quota_limits_cpu: quota_cpu, quota_limits_memory: quota_mem, ..Default::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        // Errors are fine (invalid quantities, a CPU request Go would fail to parse); panics are not.
        if let Ok(pod) = render_launch_manifest(&vmi, &settings, &ns, &mut rng) {
            let overhead: i64 = pod.metadata.annotations.as_ref().unwrap()["kubevirt.io/memory-overhead-bytes"]
                .parse().unwrap();
            prop_assert!(overhead > 0);
            let spec = pod.spec.as_ref().unwrap();
            let compute = &spec.containers[0];
            prop_assert_eq!(compute.name.as_str(), "compute");
            let requests = compute.resources.as_ref().unwrap().requests.clone().unwrap();
            let mem = ParsedQuantity::parse(&requests["memory"].0).unwrap().value();
            if !overcommit_overhead {
                prop_assert!(mem >= overhead, "request {} < overhead {}", mem, overhead);
            }
            let timeout = compute.command.as_ref().unwrap()[2].trim_end_matches('s').parse::<u32>().unwrap();
            prop_assert!((240..360).contains(&timeout));
            // Every quantity is canonical text that parses again.
            for list in [compute.resources.as_ref().unwrap().requests.clone(), compute.resources.as_ref().unwrap().limits.clone()].into_iter().flatten() {
                for (k, q) in list {
                    prop_assert!(ParsedQuantity::parse(&q.0).is_ok(), "{} = {}", k, q.0);
                }
            }
            // The pod serialises.
            prop_assert!(serde_json::to_string(&pod).is_ok());
        }
    }
}

prop_compose! {
    /// A hugepages VMI virt-api admits (vmi-create-admitter.go validateHugepagesMemoryRequests:
    /// the memory it checks is a multiple of the page size, at least one page): guest, request
    /// and limit each absent or a whole number of pages, guest ≤ request ≤ limit.
    fn admitted_hugepages_vmi()(
        page in prop_oneof![Just(("2Mi", 2i64 << 20)), Just(("1Gi", 1i64 << 30))],
        guest in proptest::option::of(1i64..8),
        extra_request in proptest::option::of(0i64..4),
        extra_limit in proptest::option::of(0i64..4),
        dedicated in any::<bool>(),
    ) -> (Value, i64) {
        let (size, bytes) = page;
        let mut memory = json!({"hugepages": {"pageSize": size}});
        let mut requests = json!({});
        let mut limits = json!({});
        let base = guest.unwrap_or(1);
        if let Some(g) = guest { memory["guest"] = json!((g * bytes).to_string()); }
        let request = extra_request.map(|e| base + e);
        if let Some(r) = request { requests["memory"] = json!((r * bytes).to_string()); }
        if let Some(e) = extra_limit { limits["memory"] = json!(((request.unwrap_or(base) + e) * bytes).to_string()); }
        let domain = json!({"memory": memory, "resources": {"requests": requests, "limits": limits},
            "cpu": {"cores": 1, "dedicatedCpuPlacement": dedicated}});
        (domain, bytes)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Issue 12 item 5: every `hugepages-<size>` quantity run-controller renders is a multiple of
    /// the page size, whatever memoryOvercommit and KubeVirt release are configured (PR 18880's
    /// rule: hugepages are never overcommitted; before it, guest-only VMIs got 2Gi × 100/150).
    #[test]
    fn run_controller_hugepages_are_whole_pages(
        (domain, page) in admitted_hugepages_vmi(),
        overcommit in 10u32..400,
        version in proptest::sample::select(virtctl_rs::kubevirt_version::KubeVirtVersion::ALL.to_vec()),
        seed in any::<u64>(),
    ) {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "hp", "namespace": "ns", "uid": "u"},
            "spec": {"domain": domain, "volumes": [{"name": "cd", "containerDisk": {"image": "img"}}]}})).unwrap();
        let settings = ClusterSettings { memory_overcommit: overcommit, kubevirt_version: version, ..ClusterSettings::default() };
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let pod = render_launch_manifest(&vmi, &settings, &NamespaceContext::default(), &mut rng).unwrap();
        let resources = pod.spec.as_ref().unwrap().containers[0].resources.clone().unwrap();
        let mut seen = 0;
        for list in [resources.requests, resources.limits].into_iter().flatten() {
            for (name, q) in list.iter().filter(|(k, _)| k.starts_with("hugepages-")) {
                let bytes = ParsedQuantity::parse(&q.0).unwrap().value();
                prop_assert!(bytes % page == 0, "{} = {} with page {} (overcommit {}, {})", name, bytes, page, overcommit, version);
                seen += 1;
            }
        }
        prop_assert!(seen == 2, "hugepages in requests and limits");
    }
}
