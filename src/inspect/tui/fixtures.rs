//! Hand-built [`Inspection`] and [`Fleet`] values for the scenarios of issue 10, shared by the
//! state tests and the snapshot tests. One clock: [`now`] = 2026-11-30T00:42:40Z.

use crate::api::common::ObjectVersion;
use crate::inspect::model::*;
use crate::launcher::overhead::OverheadTerm;
use chrono::{DateTime, Duration, Utc};
use std::collections::BTreeMap;

/// The instant every fixture was "gathered" at.
pub(crate) fn now() -> DateTime<Utc> {
    "2026-11-30T00:42:40Z".parse().expect("a valid timestamp")
}

fn at(seconds_before_now: i64) -> DateTime<Utc> {
    now() - Duration::seconds(seconds_before_now)
}

fn our_lease() -> LeaseView {
    LeaseView {
        lease: "kubevirt/virt-controller".into(),
        holder_identity: Some("myhost_1a2b3c4d".into()),
        holder_kind: HolderKind::VirtctlRs,
        renew_time: Some(at(2)),
        acquire_time: Some(at(40)),
        lease_duration_seconds: Some(15),
        lease_transitions: Some(1),
        renew_age_seconds: Some(2.0),
        stale: false,
        debug_endpoint: Some("http://127.0.0.1:8182".into()),
    }
}

fn debug_source() -> ControllerSource {
    ControllerSource {
        kind: ControllerSourceKind::DebugEndpoint,
        url: Some("http://127.0.0.1:8182/debug/state?key=default/vm-cirros".into()),
        expectations_exposed: true,
        debug_state: None,
    }
}

fn idle_queues() -> Vec<QueueView> {
    ["virt-controller-vm", "virt-controller-vmi"]
        .into_iter()
        .map(|name| QueueView {
            name: name.into(),
            key_state: Some(KeyState::Idle),
            ..Default::default()
        })
        .collect()
}

fn terms() -> Vec<OverheadTerm> {
    let t = |name: &str, bytes: i64, reason: &str| OverheadTerm {
        name: name.into(),
        bytes,
        reason: reason.into(),
        source: "pkg/virt-controller/services/renderresources.go".into(),
    };
    vec![
        t("pageTables", 262144, "memory request 128Mi / 512"),
        t(
            "virtLauncherMonitor",
            26214400,
            "virt-launcher-monitor process",
        ),
        t("virtLauncher", 104857600, "virt-launcher process"),
        t("virtlogd", 26214400, "virtlogd process"),
        t("virtqemud", 41943040, "virtqemud process"),
        t("qemu", 31457280, "QEMU process"),
        t("vcpus", 8388608, "8Mi × 1 vCPU(s)"),
        t("ioThread", 8388608, "one IO thread, fixed"),
        t("videoRam", 33554432, "graphics device attached"),
    ]
}

fn matching_overhead() -> OverheadCheck {
    let terms = terms();
    let formula: i64 = terms.iter().map(|t| t.bytes).sum();
    let request = formula + 128 * 1024 * 1024;
    OverheadCheck {
        formula_bytes: formula,
        terms,
        formula_request_bytes: Some(request),
        pod_request_bytes: Some(request),
        guest_memory_bytes: Some(128 * 1024 * 1024),
        formula_limit_bytes: None,
        pod_limit_bytes: None,
        annotation_bytes: Some(formula),
        status_bytes: Some(formula),
        matches: true,
        differences: vec![],
        cpu: Some(CpuCheck {
            vcpus: 1,
            allocation_ratio: 10,
            formula_request_millis: Some(100),
            pod_request_millis: Some(100),
            matches: true,
        }),
    }
}

fn cond(type_: &str, status: &str, reason: Option<&str>, message: Option<&str>) -> ConditionView {
    ConditionView {
        type_: type_.into(),
        status: status.into(),
        reason: reason.map(Into::into),
        message: message.map(Into::into),
        last_transition_time: Some(at(5)),
    }
}

fn event(ago: i64, type_: &str, reason: &str, object: &str, message: &str) -> EventView {
    EventView {
        time: Some(at(ago)),
        type_: type_.into(),
        reason: reason.into(),
        object: object.into(),
        message: message.into(),
        count: 1,
        api: "core/v1".into(),
    }
}

fn vm(status: &str, strategy: &str) -> VmView {
    VmView {
        object: ObjectVersion {
            uid: Some("3f6c1a52-0000-4000-8000-000000000001".into()),
            resource_version: Some("1042".into()),
            generation: Some(1),
        },
        run_strategy: Some(strategy.into()),
        printable_status: Some(status.into()),
        observed_generation: Some(1),
        desired_generation: Some(1),
        created: Some(at(60)),
        ..Default::default()
    }
}

fn transitions(phases: &[(&str, i64)]) -> Vec<PhaseTransition> {
    phases
        .iter()
        .enumerate()
        .map(|(i, (phase, ago))| {
            let until = phases.get(i + 1).map(|(_, a)| *a).unwrap_or(0);
            PhaseTransition {
                phase: (*phase).into(),
                timestamp: at(*ago),
                duration_seconds: (ago - until) as f64,
            }
        })
        .collect()
}

fn caught_up() -> CaughtUp {
    CaughtUp {
        generation_observed: true,
        vm_cache_current: Some(true),
        vmi_cache_current: Some(true),
        template_changes: Vec::new(),
        summary: "generation 1 observed; the leader's caches hold the current VM and VMI".into(),
    }
}

fn launcher_pod(phase: &str, node: Option<&str>) -> PodView {
    PodView {
        name: "virt-launcher-vm-cirros-7fttt".into(),
        uid: Some("9a0e".into()),
        phase: Some(phase.into()),
        node_name: node.map(Into::into),
        compute_requests: BTreeMap::from([
            ("cpu".into(), "100m".into()),
            ("memory".into(), "415236096".into()),
        ]),
        created: Some(at(8)),
        ..Default::default()
    }
}

fn printable(computed: &str, rule: &str, inputs: &[(&str, &str)]) -> PrintableStatusReason {
    PrintableStatusReason {
        computed: computed.into(),
        stored: Some(computed.into()),
        rule: rule.into(),
        inputs: inputs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    }
}

/// A VM Running under our controller: Lease ours, queues idle, nothing pending, MATCH.
pub(crate) fn running_ours() -> Inspection {
    Inspection {
        generated_at: now(),
        namespace: "default".into(),
        name: "vm-cirros".into(),
        vm: Some(vm("Running", "Always")),
        vmi: Some(VmiView {
            uid: Some("5b1d".into()),
            resource_version: Some("1051".into()),
            phase: "Running".into(),
            phase_transitions: transitions(&[
                ("Pending", 8),
                ("Scheduling", 8),
                ("Scheduled", 5),
                ("Running", 4),
            ]),
            node_name: Some("sim-node-0".into()),
            conditions: vec![cond("Ready", "True", None, None)],
            status_memory_overhead_bytes: Some(matching_overhead().formula_bytes),
            deletion_timestamp: None,
        }),
        pods: vec![launcher_pod("Running", Some("sim-node-0"))],
        node: Some(NodeView {
            name: "sim-node-0".into(),
            ready: Some("True".into()),
            ..Default::default()
        }),
        lease: Some(our_lease()),
        controller: debug_source(),
        queues: idle_queues(),
        last_reconciles: vec![ReconcileView {
            controller: "vm".into(),
            at: at(4),
            result: "ok".into(),
            error: None,
            actions: vec!["UpdateVmStatus".into()],
        }],
        caught_up: Some(caught_up()),
        printable_status_reason: Some(printable(
            "Running",
            "VMI Running and Ready (vm.go:2925)",
            &[("runStrategy", "Always"), ("vmi.phase", "Running")],
        )),
        overhead_check: Some(matching_overhead()),
        next_decision: Some(NextDecision {
            summary: "VMI Running: the Always branch does nothing (vm.go:979)".into(),
            explanation: vec!["runStrategy Always and the VMI is running (vm.go:979)".into()],
            ..Default::default()
        }),
        events: vec![
            event(
                9,
                "Normal",
                "SuccessfulCreate",
                "VirtualMachine/vm-cirros",
                "Started the virtual machine by creating the new virtual machine instance vm-cirros",
            ),
            event(
                8,
                "Normal",
                "SuccessfulCreate",
                "VirtualMachineInstance/vm-cirros",
                "Created virtual machine pod virt-launcher-vm-cirros-7fttt",
            ),
            event(
                5,
                "Normal",
                "Scheduled",
                "Pod/virt-launcher-vm-cirros-7fttt",
                "Successfully assigned default/virt-launcher-vm-cirros-7fttt to sim-node-0",
            ),
            event(
                4,
                "Normal",
                "Started",
                "VirtualMachineInstance/vm-cirros",
                "VirtualMachineInstance started.",
            ),
        ],
        ..Default::default()
    }
}

/// A VM status update refused with a Conflict, retried late: after a burst of failures the VM
/// queue's shared rate limit (client-go's token bucket) is reserved minutes ahead, so the key
/// waits far longer than its own 5 ms backoff.
pub(crate) fn rate_limited_retry() -> Inspection {
    let wait = 471.0;
    Inspection {
        queues: vec![
            QueueView {
                name: "virt-controller-vm".into(),
                depth: 0,
                retries: 1,
                key_state: Some(KeyState::Waiting),
                key_seconds: Some(wait - 2.0),
                rate_limiter_wait_seconds: Some(wait),
                ..Default::default()
            },
            QueueView {
                rate_limiter_wait_seconds: Some(0.0),
                ..idle_queues().remove(1)
            },
        ],
        last_reconciles: vec![ReconcileView {
            controller: "vm".into(),
            at: at(2),
            result: "error".into(),
            error: Some(
                "Operation cannot be fulfilled on virtualmachines.kubevirt.io \"vm-cirros\": the \
                 object has been modified; please apply your changes to the latest version and \
                 try again"
                    .into(),
            ),
            actions: vec!["UpdateVmStatus".into()],
        }],
        next_decision: Some(NextDecision {
            summary: "VMI Running: the Always branch does nothing (vm.go:979)".into(),
            waiting: Some(
                "retry after 1 failed reconcile: virt-controller-vm runs this key again in 7 m 49 s; \
                 the queue's shared rate limit is reserved 7 m 51 s ahead (10 retries a second \
                 after a burst of 100, for all keys); a change to the VM, its VMI or its \
                 DataVolumes runs it sooner"
                    .into(),
            ),
            explanation: vec!["runStrategy Always and the VMI is running (vm.go:979)".into()],
            ..Default::default()
        }),
        ..running_ours()
    }
}

/// runStrategy Halted: no VMI, no pod, nothing to do.
pub(crate) fn halted_no_vmi() -> Inspection {
    Inspection {
        vm: Some(vm("Stopped", "Halted")),
        vmi: None,
        pods: vec![],
        node: None,
        overhead_check: None,
        printable_status_reason: Some(printable(
            "Stopped",
            "no VMI and the run strategy does not start one (vm.go:2893)",
            &[("runStrategy", "Halted"), ("vmi", "absent")],
        )),
        next_decision: Some(NextDecision {
            summary: "Halted: no VMI to delete, nothing to do (vm.go:1006)".into(),
            ..Default::default()
        }),
        missing: vec![Missing {
            what: "vmi".into(),
            reason: "no VMI: runStrategy Halted".into(),
        }],
        events: vec![],
        last_reconciles: vec![],
        ..running_ours()
    }
}

/// CrashLoopBackOff: three failed starts, the next in 42 s.
pub(crate) fn crash_loop() -> Inspection {
    let mut vm = vm("CrashLoopBackOff", "Always");
    vm.start_failure = Some(StartFailureView {
        consecutive_fail_count: 3,
        retry_after: Some(now() + Duration::seconds(42)),
        retry_in_seconds: Some(42.0),
    });
    Inspection {
        vm: Some(vm),
        vmi: None,
        pods: vec![],
        node: None,
        overhead_check: None,
        queues: vec![
            QueueView {
                name: "virt-controller-vm".into(),
                depth: 0,
                retries: 3,
                key_state: Some(KeyState::Waiting),
                key_seconds: Some(42.0),
                ..Default::default()
            },
            idle_queues().remove(1),
        ],
        printable_status_reason: Some(printable(
            "CrashLoopBackOff",
            "startFailure set and retryAfterTimestamp in the future (vm.go:2860)",
            &[
                ("runStrategy", "Always"),
                ("startFailure.consecutiveFailCount", "3"),
            ],
        )),
        next_decision: Some(NextDecision {
            summary: "CrashLoopBackOff: next start in 42 s".into(),
            waiting: Some(
                "start backoff: retryAfterTimestamp 00:43:22 (in 42 s) (vm.go:1054)".into(),
            ),
            explanation: vec![
                "3 consecutive start failures: backoff 10 s × 2^(3-1), capped at 5 m (vm.go:3361)"
                    .into(),
            ],
            ..Default::default()
        }),
        blockers: vec![Blocker {
            object: "VirtualMachine/vm-cirros".into(),
            reason: "CrashLoopBackOff".into(),
            message: "the VMI failed 3 times in a row; next start in 42 s".into(),
            depth: 0,
            fix: None,
        }],
        events: vec![
            event(
                60,
                "Warning",
                "FailedCreate",
                "VirtualMachineInstance/vm-cirros",
                "virt-launcher pod failed",
            ),
            event(
                30,
                "Normal",
                "SuccessfulDelete",
                "VirtualMachine/vm-cirros",
                "Stopped the virtual machine by deleting the virtual machine instance",
            ),
        ],
        missing: vec![Missing {
            what: "vmi".into(),
            reason: "no VMI: waiting out the start backoff".into(),
        }],
        ..running_ours()
    }
}

/// A VMI creation expected 3 s ago and not yet seen by the informer.
pub(crate) fn pending_expectations() -> Inspection {
    Inspection {
        vm: Some(vm("Stopped", "Always")),
        vmi: None,
        pods: vec![],
        node: None,
        overhead_check: None,
        expectations: vec![ExpectationView {
            store: "vm-vmi".into(),
            key: "default/vm-cirros".into(),
            adds: 1,
            dels: 0,
            age_seconds: 3.0,
            expires_in_seconds: 297.0,
            satisfied: false,
            expected_deletions: vec![],
        }],
        queues: vec![
            QueueView {
                name: "virt-controller-vm".into(),
                depth: 1,
                retries: 0,
                key_state: Some(KeyState::Queued),
                key_seconds: Some(0.4),
                ..Default::default()
            },
            idle_queues().remove(1),
        ],
        next_decision: Some(NextDecision {
            summary: "waiting: VMI creation expected 3 s ago".into(),
            waiting: Some("VMI creation expected 3 s ago, expectations expire in 4 m 57 s".into()),
            explanation: vec![
                "SatisfiedExpectations is false: the reconcile only updates status (vm.go:322)"
                    .into(),
            ],
            ..Default::default()
        }),
        printable_status_reason: Some(printable(
            "Stopped",
            "no VMI yet (vm.go:2893)",
            &[("runStrategy", "Always"), ("vmi", "absent")],
        )),
        events: vec![event(
            3,
            "Normal",
            "SuccessfulCreate",
            "VirtualMachine/vm-cirros",
            "Started the virtual machine by creating the new virtual machine instance vm-cirros",
        )],
        ..running_ours()
    }
}

/// The pod's memory request is 1 Mi more than the formula.
pub(crate) fn memory_mismatch() -> Inspection {
    let mut check = matching_overhead();
    let extra = 1024 * 1024;
    check.pod_request_bytes = check.formula_request_bytes.map(|b| b + extra);
    check.matches = false;
    check.differences = vec!["pod request is 1048576 bytes more than the formula".into()];
    Inspection {
        overhead_check: Some(check),
        ..running_ours()
    }
}

/// The leader renders with the KubeVirt CR it loaded at resourceVersion 812
/// (`cpuAllocationRatio` 10); the CR now says 5. The check, computed with the CR's, finds the
/// pod's CPU request half the formula's.
pub(crate) fn settings_behind_the_cr() -> Inspection {
    let cr = crate::config::ClusterSettings {
        cpu_allocation_ratio: 5,
        ..Default::default()
    };
    let mut check = matching_overhead();
    if let Some(cpu) = check.cpu.as_mut() {
        cpu.allocation_ratio = 5;
        cpu.formula_request_millis = Some(200);
        cpu.matches = false;
    }
    check.matches = false;
    check.differences = vec![
        "pod compute CPU request is 100m, the formula 200m (1 vCPUs ÷ cpuAllocationRatio 5)".into(),
    ];
    Inspection {
        overhead_check: Some(check),
        settings: Some(SettingsCheck {
            cluster: cr,
            controller: Some(Default::default()),
            controller_source: Some(crate::controller::cluster_config::SettingsSource::KubevirtCr),
            controller_resource_version: Some("812".into()),
            controller_loaded_at: Some(at(600)),
            controller_refused: None,
            differences: vec!["cpuAllocationRatio: controller 10, KubeVirt CR 5".into()],
        }),
        ..running_ours()
    }
}

/// The Lease is held by KubeVirt's virt-controller: metrics only, no expectations.
pub(crate) fn kubevirt_metrics() -> Inspection {
    Inspection {
        lease: Some(LeaseView {
            holder_identity: Some("virt-controller-7d9f8b6c5-x2k4q".into()),
            holder_kind: HolderKind::KubeVirt,
            debug_endpoint: None,
            lease_transitions: Some(4),
            ..our_lease()
        }),
        controller: ControllerSource {
            kind: ControllerSourceKind::Metrics,
            url: Some("/api/v1/namespaces/kubevirt/pods/virt-controller-7d9f8b6c5-x2k4q:8443/proxy/metrics".into()),
            expectations_exposed: false,
            debug_state: None,
        },
        queues: vec![
            QueueView {
                name: "virt-controller-vm".into(),
                depth: 2,
                retries: 17,
                longest_running_processor_seconds: Some(0.3),
                ..Default::default()
            },
            QueueView {
                name: "virt-controller-vmi".into(),
                depth: 0,
                retries: 5,
                longest_running_processor_seconds: Some(0.0),
                ..Default::default()
            },
        ],
        last_reconciles: vec![],
        caught_up: Some(CaughtUp {
            generation_observed: true,
            summary: "generation 1 observed (cache resourceVersions not exposed by this controller)".into(),
            ..Default::default()
        }),
        ..running_ours()
    }
}

/// The Lease was last renewed 2 minutes ago with a 15 s duration: stale.
pub(crate) fn stale_lease() -> Inspection {
    Inspection {
        lease: Some(LeaseView {
            renew_time: Some(at(120)),
            renew_age_seconds: Some(120.0),
            stale: true,
            ..our_lease()
        }),
        controller: ControllerSource::default(),
        queues: vec![],
        last_reconciles: vec![],
        caught_up: Some(CaughtUp {
            generation_observed: true,
            summary: "generation 1 observed; the leader is gone, nothing will change".into(),
            ..Default::default()
        }),
        missing: vec![Missing {
            what: "debugState".into(),
            reason: "stale Lease: myhost_1a2b3c4d last renewed 2 m 0 s ago (duration 15 s); http://127.0.0.1:8182 unreachable: connection refused".into(),
        }],
        ..running_ours()
    }
}

/// The launcher pod cannot be scheduled: no node has a free devices.kubevirt.io/kvm.
pub(crate) fn unschedulable() -> Inspection {
    let mut pod = launcher_pod("Pending", None);
    let msg = "0/2 nodes are available: 2 Insufficient devices.kubevirt.io/kvm. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.";
    pod.conditions = vec![cond(
        "PodScheduled",
        "False",
        Some("Unschedulable"),
        Some(msg),
    )];
    Inspection {
        vm: Some(vm("ErrorUnschedulable", "Always")),
        vmi: Some(VmiView {
            phase: "Scheduling".into(),
            phase_transitions: transitions(&[("Pending", 70), ("Scheduling", 70)]),
            node_name: None,
            status_memory_overhead_bytes: None,
            conditions: vec![cond(
                "PodScheduled",
                "False",
                Some("Unschedulable"),
                Some(msg),
            )],
            ..running_ours().vmi.unwrap_or_default()
        }),
        pods: vec![pod],
        node: None,
        overhead_check: Some(OverheadCheck {
            status_bytes: None,
            ..matching_overhead()
        }),
        printable_status_reason: Some(printable(
            "ErrorUnschedulable",
            "VMI PodScheduled=False reason Unschedulable (vm.go:2939)",
            &[
                ("vmi.phase", "Scheduling"),
                ("pod.PodScheduled", "False/Unschedulable"),
            ],
        )),
        next_decision: Some(NextDecision {
            summary: "VMI Scheduling: nothing to do until the pod is scheduled (vmi.go:1130)"
                .into(),
            ..Default::default()
        }),
        blockers: vec![
            Blocker {
                object: "Pod/virt-launcher-vm-cirros-7fttt".into(),
                reason: "Unschedulable".into(),
                message: msg.into(),
                depth: 2,
                fix: None,
            },
            Blocker {
                object: "Node/*".into(),
                reason: "NoKvmDevice".into(),
                message:
                    "no node has a free devices.kubevirt.io/kvm (2 nodes, 0 with capacity left)"
                        .into(),
                depth: 4,
                fix: None,
            },
        ],
        events: vec![
            event(
                70,
                "Normal",
                "SuccessfulCreate",
                "VirtualMachineInstance/vm-cirros",
                "Created virtual machine pod virt-launcher-vm-cirros-7fttt",
            ),
            EventView {
                count: 5,
                ..event(
                    10,
                    "Warning",
                    "FailedScheduling",
                    "Pod/virt-launcher-vm-cirros-7fttt",
                    msg,
                )
            },
        ],
        ..running_ours()
    }
}

/// The VM's DataVolume is still Pending.
pub(crate) fn datavolume_pending() -> Inspection {
    Inspection {
        vm: Some(vm("Provisioning", "Always")),
        vmi: None,
        pods: vec![],
        node: None,
        overhead_check: None,
        volumes: vec![VolumeView {
            kind: "DataVolume".into(),
            name: "vm-fedora-disk".into(),
            volume: "rootdisk".into(),
            phase: Some("Pending".into()),
            ready: Some("False".into()),
            exists: true,
            ..Default::default()
        }],
        printable_status_reason: Some(printable(
            "Provisioning",
            "a DataVolume of the VM is not ready (vm.go:2980)",
            &[
                ("dataVolume/vm-fedora-disk", "Pending"),
                ("runStrategy", "Always"),
            ],
        )),
        next_decision: Some(NextDecision {
            summary: "waiting for DataVolume vm-fedora-disk: no VMI until it is ready (vm.go:1177)"
                .into(),
            waiting: Some("DataVolume vm-fedora-disk is Pending".into()),
            ..Default::default()
        }),
        blockers: vec![Blocker {
            object: "DataVolume/vm-fedora-disk".into(),
            reason: "DataVolumePending".into(),
            message: "phase Pending, Ready=False".into(),
            depth: 3,
            fix: None,
        }],
        events: vec![event(
            20,
            "Normal",
            "Pending",
            "DataVolume/vm-fedora-disk",
            "PVC vm-fedora-disk Pending",
        )],
        missing: vec![Missing {
            what: "vmi".into(),
            reason: "no VMI: the VM waits for its DataVolumes".into(),
        }],
        last_reconciles: vec![],
        ..running_ours()
    }
}

/// The VMI names a PriorityClass that does not exist: the pod is never created.
pub(crate) fn missing_priority_class() -> Inspection {
    let msg = "pods \"virt-launcher-vm-cirros-\" is forbidden: no PriorityClass with name vm-high was found";
    Inspection {
        vm: Some(vm("Starting", "Always")),
        vmi: Some(VmiView {
            phase: "Pending".into(),
            phase_transitions: transitions(&[("Pending", 30)]),
            node_name: None,
            status_memory_overhead_bytes: None,
            conditions: vec![cond("Synchronized", "False", Some("FailedCreate"), Some(msg))],
            ..running_ours().vmi.unwrap_or_default()
        }),
        pods: vec![],
        node: None,
        overhead_check: None,
        queues: vec![
            idle_queues().remove(0),
            QueueView {
                name: "virt-controller-vmi".into(),
                depth: 0,
                retries: 4,
                key_state: Some(KeyState::Waiting),
                key_seconds: Some(8.0),
                ..Default::default()
            },
        ],
        next_decision: Some(NextDecision {
            summary: "VMI Pending without a pod: would create pod virt-launcher-vm-cirros-… (vmi.go:1098)".into(),
            actions: vec![PlannedActionView {
                controller: "vmi".into(),
                kind: "CreatePod".into(),
                why: "no launcher pod for a Pending VMI (vmi.go:1098)".into(),
            }],
            ..Default::default()
        }),
        last_reconciles: vec![ReconcileView {
            controller: "vmi".into(),
            at: at(8),
            result: "error".into(),
            error: Some(msg.into()),
            actions: vec!["CreatePod".into()],
        }],
        blockers: vec![Blocker {
            object: "PriorityClass/vm-high".into(),
            reason: "PriorityClassNotFound".into(),
            message: msg.into(),
            depth: 2,
            fix: None,
        }],
        events: vec![EventView {
            count: 4,
            ..event(8, "Warning", "FailedCreate", "VirtualMachineInstance/vm-cirros", msg)
        }],
        ..running_ours()
    }
}

fn row(name: &str, status: &str, phase: Option<&str>, secs: Option<f64>) -> FleetRow {
    FleetRow {
        namespace: "default".into(),
        name: name.into(),
        printable_status: Some(status.into()),
        vmi_phase: phase.map(Into::into),
        phase_seconds: secs,
        overhead_match: phase.map(|_| true),
        ..Default::default()
    }
}

/// A fleet mixing healthy VMs and the scenarios above, in no particular order.
pub(crate) fn fleet() -> Fleet {
    Fleet {
        generated_at: now(),
        namespace: None,
        lease: Some(our_lease()),
        controller: ControllerSource {
            url: Some("http://127.0.0.1:8182/debug/state".into()),
            ..debug_source()
        },
        queues: vec![
            QueueView {
                name: "virt-controller-vm".into(),
                depth: 1,
                ..Default::default()
            },
            QueueView {
                name: "virt-controller-vmi".into(),
                depth: 0,
                ..Default::default()
            },
        ],
        rows: vec![
            FleetRow {
                memory_request_bytes: Some(1536 * MI),
                memory_limit_bytes: Some(2048 * MI),
                ..row("vm-alpine", "Running", Some("Running"), Some(3600.0))
            },
            FleetRow {
                retries: 3,
                problem: Some("CrashLoopBackOff: next start in 42 s".into()),
                ..row("vm-crashy", "CrashLoopBackOff", None, None)
            },
            FleetRow {
                memory_request_bytes: Some(415498240),
                ..row("vm-cirros", "Running", Some("Running"), Some(4.0))
            },
            FleetRow {
                overhead_match: Some(false),
                overhead_difference_bytes: Some(1048576),
                memory_request_bytes: Some(3368 * MI),
                memory_limit_bytes: Some(3400 * MI),
                ..row("vm-big", "Running", Some("Running"), Some(600.0))
            },
            FleetRow {
                namespace: "tenant-a".into(),
                problem: Some(
                    "Pod/virt-launcher-vm-gpu-x8s2d Unschedulable: 0/2 nodes are available".into(),
                ),
                overhead_match: Some(true),
                memory_request_bytes: Some(3368 * MI),
                memory_limit_bytes: Some(3880 * MI),
                ..row(
                    "vm-gpu",
                    "ErrorUnschedulable",
                    Some("Scheduling"),
                    Some(70.0),
                )
            },
            row("vm-halted", "Stopped", None, None),
            FleetRow {
                pending_expectations: 1,
                ..row("vm-new", "Stopped", None, None)
            },
        ],
        missing: vec![],
    }
}

const MI: i64 = 1024 * 1024;

/// `n` healthy VMs `vm-00000`… (paging and selection tests).
pub(crate) fn big_fleet(n: usize) -> Fleet {
    Fleet {
        rows: (0..n)
            .map(|i| {
                row(
                    &format!("vm-{i:05}"),
                    "Running",
                    Some("Running"),
                    Some(i as f64),
                )
            })
            .collect(),
        ..fleet()
    }
}

/// The launcher pod refused by Pod Security admission in a `restricted` namespace: the VMI's
/// `FailedCreate`, and the label that would admit the pod (the diagnostic's own text).
pub(crate) fn pod_security_rejected() -> Inspection {
    let msg = "failed to create pod for vmi default/vm-cirros, it needs a privileged namespace to run: pods \"virt-launcher-vm-cirros-\" is forbidden: violates PodSecurity \"restricted:latest\": allowPrivilegeEscalation != false (container \"compute\" must set securityContext.allowPrivilegeEscalation=false), seccompProfile (pod or container \"compute\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")";
    let events = vec![EventView {
        count: 4,
        ..event(
            8,
            "Warning",
            "FailedCreate",
            "VirtualMachineInstance/vm-cirros",
            msg,
        )
    }];
    let psa = crate::inspect::diagnose::pod_security_rejection(
        "default",
        None,
        &events,
        Some("restricted"),
    );
    Inspection {
        blockers: std::iter::once(Blocker {
            object: "VirtualMachineInstance/vm-cirros".into(),
            reason: "FailedCreate".into(),
            message: msg.into(),
            depth: 1,
            fix: None,
        })
        .chain(psa)
        .collect(),
        events,
        ..missing_priority_class()
    }
}

/// A VM with a GPU passed through (`vm-gpu`, 4 vCPUs, 2Gi): its overhead is dominated by one
/// term, the 1Gi VFIO term; the reasons are as long as the formula's real ones.
pub(crate) fn vfio_dominated() -> Inspection {
    const MI: i64 = 1024 * 1024;
    let t = |name: &str, bytes: i64, reason: &str| OverheadTerm {
        name: name.into(),
        bytes,
        reason: reason.into(),
        source: "pkg/virt-controller/services/renderresources.go".into(),
    };
    let terms = vec![
        t(
            "pageTables",
            4 * MI,
            "memory request 2Gi / 512 (request rounded up to whole kB)",
        ),
        t(
            "virtLauncherMonitor",
            25 * MI,
            "virt-launcher-monitor process",
        ),
        t("virtLauncher", 100 * MI, "virt-launcher process"),
        t("virtlogd", 25 * MI, "virtlogd process"),
        t("virtqemud", 40 * MI, "virtqemud process"),
        t("qemu", 30 * MI, "QEMU process"),
        t(
            "vcpus",
            32 * MI,
            "8Mi × 4 vCPU(s): spec.domain.cpu cores × sockets × threads",
        ),
        t(
            "ioThread",
            8 * MI,
            "one IO thread, fixed (independent of ioThreadsPolicy)",
        ),
        t(
            "videoRam",
            32 * MI,
            "graphics device attached (autoattachGraphicsDevice not false)",
        ),
        t(
            "vfio",
            1024 * MI,
            "VFIO devices: 1 GPU(s), 0 host device(s), 0 SR-IOV interface(s); added once",
        ),
    ];
    let formula: i64 = terms.iter().map(|t| t.bytes).sum();
    let request = formula + 2048 * MI;
    // A 2.5Gi memory limit on the VMI: the pod's is that plus the overhead.
    let limit = formula + 2560 * MI;
    let check = OverheadCheck {
        formula_bytes: formula,
        terms,
        formula_request_bytes: Some(request),
        pod_request_bytes: Some(request),
        guest_memory_bytes: Some(2048 * MI),
        formula_limit_bytes: Some(limit),
        pod_limit_bytes: Some(limit),
        annotation_bytes: Some(formula),
        status_bytes: Some(formula),
        matches: true,
        differences: vec![],
        cpu: Some(CpuCheck {
            vcpus: 4,
            allocation_ratio: 10,
            formula_request_millis: Some(400),
            pod_request_millis: Some(400),
            matches: true,
        }),
    };
    let base = running_ours();
    Inspection {
        name: "vm-gpu".into(),
        vmi: base.vmi.clone().map(|v| VmiView {
            status_memory_overhead_bytes: Some(formula),
            ..v
        }),
        overhead_check: Some(check),
        ..base
    }
}

/// `running_ours` gathered `ago` seconds before [`now`], its VMI `uid` in these phases (each
/// `(phase, seconds before now)`), with the start failure `(count, retry after, seconds before
/// now)` if any.
fn run_gathered(
    ago: i64,
    uid: &str,
    phases: &[(&str, i64)],
    failure: Option<(i64, i64)>,
) -> Inspection {
    let base = running_ours();
    let mut vmi = base.vmi.clone().expect("a VMI");
    vmi.uid = Some(uid.into());
    // The phases as they were `ago` seconds before now.
    let seen: Vec<(&str, i64)> = phases.iter().copied().filter(|(_, a)| *a >= ago).collect();
    vmi.phase_transitions = transitions(&seen);
    if let Some(t) = vmi.phase_transitions.last_mut() {
        t.duration_seconds = (t.duration_seconds - ago as f64).max(0.0);
    }
    vmi.phase = seen.last().map(|(p, _)| (*p).into()).unwrap_or_default();
    let mut vm = base.vm.clone().expect("a VM");
    vm.start_failure = failure.map(|(count, until)| StartFailureView {
        consecutive_fail_count: count,
        retry_after: Some(at(until)),
        retry_in_seconds: Some((until - ago).max(0) as f64),
    });
    Inspection {
        generated_at: at(ago),
        vm: Some(vm),
        vmi: Some(vmi),
        ..base
    }
}

/// What the inspector gathered over five minutes of a VM that failed three times, waited out a
/// start backoff after each failure, and now runs (the fourth VMI): oldest first.
pub(crate) fn three_restarts() -> Vec<Inspection> {
    let runs: [(&str, i64, i64); 4] = [
        ("r1", 290, 250),
        ("r2", 230, 195),
        ("r3", 175, 150),
        ("r4", 100, 0),
    ];
    let phases = |start: i64, end: i64| {
        let mut p = vec![
            ("Pending", start),
            ("Scheduling", start - 1),
            ("Scheduled", start - 4),
            ("Running", start - 5),
        ];
        if end > 0 {
            p.push(("Failed", end));
        }
        p
    };
    let mut out = Vec::new();
    let mut failure = None;
    for (i, (uid, start, end)) in runs.into_iter().enumerate() {
        let p = phases(start, end);
        out.push(run_gathered(start - 10, uid, &p, failure));
        if end > 0 {
            // The failed VMI, then the backoff the VM waits before the next start.
            let next = runs[i + 1].1;
            failure = Some((i as i64 + 1, next));
            out.push(run_gathered(end - 2, uid, &p, failure));
        }
    }
    out.push(run_gathered(0, "r4", &phases(100, 0), None));
    out
}

/// A minute of gathers (one a second, oldest first) across a Lease handover: `myhost_1a2b3c4d`
/// leads, nobody does for five seconds, then `otherhost_9f8e7d6c` (leaseTransitions 2); a burst
/// on the VM queue and a retrying reconcile of the key on the way.
pub(crate) fn lease_handover() -> Vec<Inspection> {
    (0..=60)
        .rev()
        .map(|ago: i64| {
            let mut insp = running_ours();
            insp.generated_at = at(ago);
            let lease = insp.lease.as_mut().expect("a Lease");
            lease.renew_age_seconds = Some((ago % 2) as f64 + 0.5);
            match ago {
                31.. => {}
                26..=30 => {
                    lease.stale = true;
                    lease.renew_age_seconds = Some(15.0 + (31 - ago) as f64);
                }
                _ => {
                    lease.holder_identity = Some("otherhost_9f8e7d6c".into());
                    lease.lease_transitions = Some(2);
                }
            }
            // A burst of adds on the VM queue as the new leader lists everything.
            let burst = if (18..=24).contains(&ago) {
                25 - ago as u64
            } else {
                0
            };
            let step = 60 - ago as u64;
            insp.queues[0].depth = burst * 3;
            insp.queues[0].adds_total = Some(step * 2 + burst * burst);
            insp.queues[1].adds_total = Some(step);
            insp.queues[0].retries = u64::from((10..=20).contains(&ago));
            insp.last_reconciles[0].at = at(ago - ago % 5);
            insp
        })
        .collect()
}

/// `running_ours` inspected with `--shadow FILE`: the shadow's verdicts on the leader's last
/// writes for the VM, of which the VMI creation differed from ours.
pub(crate) fn shadow_differs() -> Inspection {
    use crate::shadow::{LastVerdict, ShadowVerdicts, Verdict, VmVerdicts};
    let mut insp = running_ours();
    let at = |s: i64| now() - chrono::TimeDelta::seconds(s);
    let write =
        |s: i64, kind: &str, key: &str, action: &str, verdict, paths: &[&str]| LastVerdict {
            seen: at(s),
            kind: kind.into(),
            key: key.into(),
            part: "main".into(),
            action: Some(action.into()),
            verdict,
            paths: paths.iter().map(|p| p.to_string()).collect(),
        };
    let vm = "default/vm-cirros";
    let doc = ShadowVerdicts {
        written_at: at(2),
        since: at(600),
        vms: [(
            vm.to_string(),
            VmVerdicts {
                decisions: 9,
                agreed: 8,
                last_difference: None,
                last: vec![
                    write(
                        40,
                        "ControllerRevision",
                        "default/revision-start-vm-1",
                        "CreateControllerRevision",
                        Verdict::Agree,
                        &[],
                    ),
                    write(
                        40,
                        "VirtualMachineInstance",
                        vm,
                        "CreateVmi",
                        Verdict::Differ,
                        &["metadata.labels.team"],
                    ),
                    write(
                        39,
                        "VirtualMachine",
                        vm,
                        "UpdateVmStatus",
                        Verdict::AgreeLater,
                        &[],
                    ),
                ],
            },
        )]
        .into(),
    };
    insp.shadow = Some(crate::inspect::shadow_view::view(
        &doc,
        vm,
        "/tmp/shadow-verdicts.json",
        insp.generated_at,
    ));
    insp
}
