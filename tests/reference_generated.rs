//! Generated VirtualMachines for the differential conformance suite (issue 41, item 3;
//! `tests/reference_conformance.rs` runs them under our controller and KubeVirt's).
//!
//! A seeded generator over the fields this project models: run strategies, CPU topologies,
//! dedicated CPUs (with an isolated emulator thread), memory (guest, requests, limits,
//! hugepages), CPU requests and limits, disks and their buses, the volume kinds that need no CDI
//! (container disks, cloud-init, empty disks, ConfigMaps, Secrets), pod networks with a
//! masquerade interface or none, readiness and liveness probes, tolerations, node affinity,
//! node selectors, priority classes, termination grace periods, labels and annotations. Every VM is one KubeVirt
//! accepts (valid names, quantities and buses); the same seed gives the same VMs.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

/// Pick one of `items`.
fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len())]
}

fn run_strategy(rng: &mut StdRng) -> &'static str {
    // Mostly strategies that start the VM: the launcher pod is what most fields reach.
    const STRATEGIES: [&str; 7] = [
        "Always",
        "Always",
        "Always",
        "RerunOnFailure",
        "Once",
        "Halted",
        "Manual",
    ];
    STRATEGIES[rng.random_range(0..STRATEGIES.len())]
}

/// `domain.cpu`, and, for dedicated CPUs, the vCPUs its topology fields give (0 without any:
/// `hwutil.GetNumberOfVCPUs`, pkg/util/hardware/hw_utils.go:87-104); the vCPUs the VMI gets.
fn cpu(rng: &mut StdRng) -> (Option<Value>, Option<u32>, u32) {
    if rng.random_bool(0.3) {
        return (None, None, 1);
    }
    let mut cpu = Map::new();
    let mut vcpus = 1;
    let mut topology = 0;
    for (field, max) in [("cores", 4u32), ("sockets", 2), ("threads", 2)] {
        if rng.random_bool(0.6) {
            let n = rng.random_range(1..=max);
            vcpus *= n;
            topology = vcpus;
            cpu.insert(field.into(), n.into());
        }
    }
    let dedicated = rng.random_bool(0.2).then_some(topology);
    if dedicated.is_some() {
        cpu.insert("dedicatedCpuPlacement".into(), true.into());
        if rng.random_bool(0.5) {
            cpu.insert("isolateEmulatorThread".into(), true.into());
        }
    }
    if rng.random_bool(0.2) {
        cpu.insert("model".into(), "host-passthrough".into());
    }
    (Some(Value::Object(cpu)), dedicated, vcpus)
}

/// `domain.memory` and `domain.resources`. Dedicated CPUs need whole CPUs and requests equal to
/// limits (KubeVirt's validation), and with a topology as many as it has vCPUs (virt-api refuses
/// the VM otherwise: pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go:
/// 806-818, `hwutil.GetNumberOfVCPUs`); hugepages need a guest size their page divides. A CPU limit
/// is never below `vcpus` / 10: without virt-api (which copies the limit into the request,
/// pkg/defaults/defaults.go:262-270) KubeVirt renders a request of vCPUs / 10 above it and the
/// API server refuses the pod, a difference the harness's missing virt-api makes, not either
/// controller (docs/shadow.md). Nor is a CPU request or limit above 1 given to a `domain.cpu`
/// without cores, sockets or threads (`no_topology`): virt-api would give it sockets from the
/// limit (defaults.go:285-308), while KubeVirt without virt-api counts its vCPUs as 1 in the
/// memory overhead (pkg/hypervisor/kvm/hypervisorbackend.go:93-110), 8Mi per vCPU below ours.
fn memory_and_resources(
    rng: &mut StdRng,
    dedicated: Option<u32>,
    vcpus: u32,
    no_topology: bool,
) -> (Option<Value>, Option<Value>) {
    let size = *pick(rng, &["128Mi", "256Mi", "512Mi", "1Gi", "2Gi"]);
    let hugepages = match rng.random_range(0..6) {
        0 => Some("2Mi"),
        1 if size.ends_with("Gi") => Some("1Gi"),
        _ => None,
    };
    let mut memory = Map::new();
    let mut requests = Map::new();
    let mut limits = Map::new();
    match rng.random_range(0..3) {
        0 => {
            memory.insert("guest".into(), size.into());
        }
        1 => {
            requests.insert("memory".into(), size.into());
        }
        _ => {
            memory.insert("guest".into(), size.into());
            requests.insert("memory".into(), size.into());
        }
    }
    if let Some(page) = hugepages {
        memory.insert("hugepages".into(), json!({"pageSize": page}));
        if !requests.contains_key("memory") {
            requests.insert("memory".into(), size.into());
        }
    }
    if let Some(topology) = dedicated {
        let cpus = if topology > 0 {
            topology.to_string()
        } else if no_topology {
            "1".to_string()
        } else {
            (*pick(rng, &["1", "2"])).to_string()
        };
        requests.insert("cpu".into(), cpus.clone().into());
        limits.insert("cpu".into(), cpus.into());
        if let Some(m) = requests.get("memory").cloned() {
            limits.insert("memory".into(), m);
        }
    } else {
        if rng.random_bool(0.3) {
            requests.insert("cpu".into(), (*pick(rng, &["100m", "500m", "1"])).into());
        }
        if rng.random_bool(0.2) {
            let limit = *pick(rng, &["1", "2"]);
            let limit = if vcpus > 10 { "2" } else { limit };
            let limit = if no_topology { "1" } else { limit };
            limits.insert("cpu".into(), limit.into());
        }
        if rng.random_bool(0.2) && requests.contains_key("memory") {
            limits.insert("memory".into(), "4Gi".into());
        }
    }
    let memory = (!memory.is_empty()).then_some(Value::Object(memory));
    let mut resources = Map::new();
    if !requests.is_empty() {
        resources.insert("requests".into(), Value::Object(requests));
    }
    if !limits.is_empty() {
        resources.insert("limits".into(), Value::Object(limits));
    }
    let resources = (!resources.is_empty()).then_some(Value::Object(resources));
    (memory, resources)
}

/// Disks and their volumes: a container disk first, then up to three more.
fn disks_and_volumes(rng: &mut StdRng) -> (Vec<Value>, Vec<Value>) {
    let mut disks = Vec::new();
    let mut volumes = Vec::new();
    let extra = rng.random_range(0..=3);
    for i in 0..=extra {
        let name = format!("disk{i}");
        let bus = *pick(rng, &["virtio", "virtio", "sata", "scsi"]);
        let source = if i == 0 {
            json!({"containerDisk": {"image": pick(rng, &[
                "quay.io/containerdisks/fedora:41", "quay.io/containerdisks/centos-stream:9"])}})
        } else {
            match rng.random_range(0..5) {
                0 => json!({"cloudInitNoCloud": {"userData": "#cloud-config\n"}}),
                1 => json!({"emptyDisk": {"capacity": pick(rng, &["1Gi", "2Gi"])}}),
                2 => json!({"configMap": {"name": format!("gen-config-{i}")}}),
                3 => json!({"secret": {"secretName": format!("gen-secret-{i}")}}),
                _ => json!({"containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}),
            }
        };
        // cloud-init and container disks as disks; ConfigMaps and Secrets too (KubeVirt
        // attaches them as ISO disks).
        disks.push(json!({"name": name, "disk": {"bus": bus}}));
        let mut volume = source;
        volume["name"] = name.into();
        volumes.push(volume);
    }
    (disks, volumes)
}

fn probe(rng: &mut StdRng) -> Value {
    let mut p = if rng.random_bool(0.5) {
        json!({"tcpSocket": {"port": 22}})
    } else {
        json!({"httpGet": {"port": 8080, "path": "/healthz"}})
    };
    p["initialDelaySeconds"] = rng.random_range(0..60).into();
    p["periodSeconds"] = rng.random_range(1..20).into();
    p
}

/// The scheduling fields of the VMI template: tolerations, node affinity, node selector.
fn scheduling(rng: &mut StdRng, spec: &mut Map<String, Value>) {
    if rng.random_bool(0.3) {
        spec.insert(
            "tolerations".into(),
            json!([{"key": "gen/dedicated", "operator": "Exists", "effect": "NoSchedule"}]),
        );
    }
    if rng.random_bool(0.3) {
        spec.insert(
            "affinity".into(),
            json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": rng.random_range(1..100),
                 "preference": {"matchExpressions": [
                     {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}}]}}),
        );
    }
    if rng.random_bool(0.3) {
        spec.insert("nodeSelector".into(), json!({"kubernetes.io/os": "linux"}));
    }
}

/// The PriorityClasses generated VMs may name (`spec.template.spec.priorityClassName`): the
/// harness creates them before the VMs ([`priority_classes`]), as a cluster would have them,
/// or the API server's Priority admission plugin refuses the launcher pods. Neither controller
/// reads the class: KubeVirt copies the name into the VMI with the rest of the template
/// (pkg/virt-controller/watch/vm/vm.go:1874, `SetupVMIFromVM`) and into the launcher pod
/// (pkg/virt-controller/services/template.go:756-758), and the API server fills in the pod's
/// `priority` from the class.
pub const PRIORITY_CLASSES: [(&str, i32); 2] =
    [("gen-priority-low", 1000), ("gen-priority-high", 100_000)];

/// The PriorityClass objects of [`PRIORITY_CLASSES`], to create before the generated VMs.
pub fn priority_classes() -> Vec<Value> {
    PRIORITY_CLASSES
        .iter()
        .map(|(name, value)| {
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value, "globalDefault": false,
                "preemptionPolicy": "Never",
                "description": "a priority class of the differential suite's generated VMs"})
        })
        .collect()
}

/// VM number `i` of the generator seeded with `seed`.
fn generated_vm(rng: &mut StdRng, i: usize) -> Value {
    let name = format!("gen-{i:04}");
    let (cpu, dedicated, vcpus) = cpu(rng);
    let no_topology = cpu.as_ref().is_some_and(|c| {
        ["cores", "sockets", "threads"]
            .iter()
            .all(|f| c.get(f).is_none())
    });
    let (memory, resources) = memory_and_resources(rng, dedicated, vcpus, no_topology);
    let (disks, volumes) = disks_and_volumes(rng);
    let mut domain = Map::new();
    if let Some(cpu) = cpu {
        domain.insert("cpu".into(), cpu);
    }
    if let Some(memory) = memory {
        domain.insert("memory".into(), memory);
    }
    if let Some(resources) = resources {
        domain.insert("resources".into(), resources);
    }
    let mut devices = json!({"disks": disks});
    let mut spec = Map::new();
    let pod_network = rng.random_bool(0.5);
    if pod_network {
        devices["interfaces"] = json!([{"name": "default", "masquerade": {}}]);
        spec.insert("networks".into(), json!([{"name": "default", "pod": {}}]));
    } else if rng.random_bool(0.2) {
        devices["autoattachPodInterface"] = false.into();
    }
    domain.insert("devices".into(), devices);
    spec.insert("domain".into(), Value::Object(domain));
    spec.insert("volumes".into(), volumes.into());
    // TCP and HTTP probes only with the pod network in `networks`: virt-api refuses them
    // otherwise (vmi-create-admitter.go:213-216, 479-492).
    if pod_network && rng.random_bool(0.3) {
        spec.insert("readinessProbe".into(), probe(rng));
    }
    if pod_network && rng.random_bool(0.2) {
        spec.insert("livenessProbe".into(), probe(rng));
    }
    if rng.random_bool(0.3) {
        spec.insert(
            "terminationGracePeriodSeconds".into(),
            (*pick(rng, &[0, 30, 180])).into(),
        );
    }
    scheduling(rng, &mut spec);
    if rng.random_bool(0.2) {
        let (class, _) = *pick(rng, &PRIORITY_CLASSES);
        spec.insert("priorityClassName".into(), class.into());
    }
    let mut template_labels = json!({"kubevirt.io/domain": name.clone()});
    if rng.random_bool(0.5) {
        template_labels["gen/tier"] = (*pick(rng, &["web", "db"])).into();
    }
    let mut template_meta = json!({"labels": template_labels});
    if rng.random_bool(0.3) {
        template_meta["annotations"] = json!({"gen/note": format!("vm {i}")});
    }
    let mut metadata = json!({"name": name, "labels": {"gen/index": i.to_string()}});
    if rng.random_bool(0.3) {
        metadata["annotations"] = json!({"gen/owner": "conformance"});
    }
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": metadata,
        "spec": {
            "runStrategy": run_strategy(rng),
            "template": {"metadata": template_meta, "spec": spec},
        },
    })
}

/// `count` generated VMs of `seed`.
pub fn generated_vms(seed: u64, count: usize) -> Vec<Value> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..count).map(|i| generated_vm(&mut rng, i)).collect()
}

#[test]
fn the_same_seed_gives_the_same_vms_and_names_are_unique() {
    let a = generated_vms(7, 40);
    assert_eq!(a, generated_vms(7, 40));
    assert_ne!(a, generated_vms(8, 40));
    let names: std::collections::BTreeSet<&str> = a
        .iter()
        .filter_map(|v| v.pointer("/metadata/name")?.as_str())
        .collect();
    assert_eq!(names.len(), 40);
    // Some name one of the harness's PriorityClasses, and only those.
    let classes: Vec<&str> = a
        .iter()
        .filter_map(|v| v.pointer("/spec/template/spec/priorityClassName")?.as_str())
        .collect();
    assert!(!classes.is_empty());
    assert!(
        classes
            .iter()
            .all(|c| PRIORITY_CLASSES.iter().any(|(name, _)| name == c)),
        "{classes:?}"
    );
    // Each generated VM parses as the project's VirtualMachine.
    for vm in a {
        serde_json::from_value::<virtctl_rs::api::VirtualMachine>(vm).expect("a VM");
    }
}

/// The two rules of virt-api's validation the generator once broke (69 of 500 VMs refused):
/// dedicated CPUs with a topology ask for exactly its vCPUs, and TCP or HTTP probes come with the
/// pod network.
#[test]
fn generated_vms_keep_virt_apis_dedicated_cpu_and_probe_rules() {
    for vm in generated_vms(41, 2000) {
        let spec = &vm["spec"]["template"]["spec"];
        let cpu = &spec["domain"]["cpu"];
        if cpu["dedicatedCpuPlacement"] == true {
            let fields = ["cores", "sockets", "threads"].map(|f| cpu[f].as_u64());
            if fields.iter().any(Option::is_some) {
                let vcpus: u64 = fields.iter().flatten().product();
                let resources = &spec["domain"]["resources"];
                for side in ["requests", "limits"] {
                    assert_eq!(resources[side]["cpu"], vcpus.to_string(), "{vm}");
                }
            }
        }
        let pod_network = spec["networks"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n.get("pod").is_some()));
        for probe in ["readinessProbe", "livenessProbe"] {
            assert!(pod_network || spec.get(probe).is_none(), "{vm}");
        }
    }
}
