use super::*;
use pretty_assertions::assert_eq;

const VMI_UID: &str = "vmi-uid-1";

/// A VM named `vm-a` with `runStrategy: strategy` and `status`, and its VMI in `phase` with
/// `spec.terminationGracePeriodSeconds: grace` (no VMI when `phase` is `None`).
fn observed(strategy: &str, status: Value, vmi: Option<(&str, Option<i64>)>) -> Observed {
    let vm_raw = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm-a", "namespace": "ns"},
        "spec": {"runStrategy": strategy, "template": {"spec": {"domain": {}}}},
        "status": status,
    });
    let vmi = vmi.map(|(phase, grace)| {
        let mut v = json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm-a", "namespace": "ns", "uid": VMI_UID},
            "spec": {"domain": {}},
            "status": {"phase": phase},
        });
        if let Some(g) = grace {
            v["spec"]["terminationGracePeriodSeconds"] = json!(g);
        }
        serde_json::from_value(v).expect("VMI")
    });
    Observed {
        vm: serde_json::from_value(vm_raw.clone()).expect("VM"),
        vm_raw,
        vmi,
    }
}

/// The plan in one line: each write (`grace:FROM->TO`, `spec:VALUE`, `status:ACTIONS`), then a
/// refusal as `CODE:MESSAGE` (the text after the object name for a conflict).
fn outcome(result: Result<Plan, Refusal>) -> String {
    let refusal = |r: Refusal| {
        let text = r
            .message
            .split_once("\"vm-a\": ")
            .map_or(r.message.clone(), |(_, m)| m.to_string());
        format!("{}:{text}", r.code)
    };
    let plan = match result {
        Ok(plan) => plan,
        Err(r) => return refusal(r),
    };
    let mut parts: Vec<String> = plan
        .writes
        .iter()
        .map(|w| match w {
            Write::VmiGracePeriod { from, to, .. } => format!("grace:{from:?}->{to}"),
            Write::Vm { patch, .. } => format!("spec:{}", patch[1]["value"]),
            Write::VmStatus { patch, .. } => {
                let requests = patch
                    .as_array()
                    .and_then(|ops| ops.iter().find(|op| op["op"] != "test"))
                    .map(|op| {
                        let v = &op["value"];
                        v.get("stateChangeRequests").unwrap_or(v).clone()
                    })
                    .unwrap_or_default();
                let actions: Vec<&str> = requests
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["action"].as_str())
                    .collect();
                format!("status:{}", actions.join(","))
            }
        })
        .collect();
    if let Some(r) = plan.refusal {
        parts.push(refusal(r));
    }
    if parts.is_empty() {
        "nothing".into()
    } else {
        parts.join(" ")
    }
}

/// Run strategy × verb × VMI against lifecycle.go's handlers (v1.9.0), row by row.
#[test]
fn each_strategy_and_verb_writes_or_refuses_as_virt_api() {
    use Verb::*;
    let running = Some(("Running", Some(30)));
    let succeeded = Some(("Succeeded", Some(30)));
    let failed = Some(("Failed", Some(30)));
    let none = None;
    /// The VMI: phase and grace period.
    type Vmi<'a> = Option<(&'a str, Option<i64>)>;
    #[rustfmt::skip]
    let rows: &[(Verb, &str, Vmi, Option<i64>, &str)] = &[
        // StartVMRequestHandler (lifecycle.go:43-160)
        (Start, "Halted", none, None, "spec:\"Always\""),
        (Start, "Halted", running, None, "409:VM is already running"),
        (Start, "Halted", Some(("Unknown", None)), None, "spec:\"Always\""),
        (Start, "Halted", Some(("", None)), None, "spec:\"Always\""),
        (Start, "Halted", succeeded, None, "spec:\"Always\""),
        (Start, "Manual", none, None, "status:Start"),
        (Start, "Manual", succeeded, None, "status:Stop,Start"),
        (Start, "Manual", failed, None, "status:Stop,Start"),
        (Start, "RerunOnFailure", none, None, "status:Start"),
        (Start, "RerunOnFailure", succeeded, None, "status:Stop,Start"),
        (Start, "RerunOnFailure", failed, None,
            "409:RerunOnFailure does not support starting VM from failed state"),
        (Start, "Always", none, None, "409:Always does not support manual start requests"),
        (Start, "Once", none, None, "409:Once does not support manual start requests"),
        (Start, "WaitAsReceiver", none, None, "nothing"),
        // StopVMRequestHandler (lifecycle.go:162-258)
        (Stop, "Always", running, None, "spec:\"Halted\""),
        (Stop, "Always", none, None, "spec:\"Halted\""),
        (Stop, "Once", running, None, "spec:\"Halted\""),
        (Stop, "Always", running, Some(0), "grace:Some(30)->0 spec:\"Halted\""),
        (Stop, "Always", succeeded, Some(0), "spec:\"Halted\""),
        (Stop, "Manual", running, None, "status:Stop"),
        (Stop, "Manual", running, Some(5), "grace:Some(30)->5 status:Stop"),
        (Stop, "Manual", none, None, "409:VM is not running"),
        (Stop, "RerunOnFailure", succeeded, None, "409:VM is not running"),
        (Stop, "Halted", none, Some(0), "409:VM is not running"),
        (Stop, "Halted", running, None,
            "409:Halted only supports manual stop requests with a shorter graceperiod"),
        (Stop, "Halted", running, Some(0), "grace:Some(30)->0 status:Stop"),
        (Stop, "Halted", Some(("Running", None)), Some(60), "grace:None->60 status:Stop"),
        // virt-api writes the grace period, then refuses (lifecycle.go:193-219).
        (Stop, "Halted", running, Some(30),
            "grace:Some(30)->30 409:Halted only supports manual stop requests with a shorter graceperiod"),
        (Stop, "WaitAsReceiver", running, None, "nothing"),
        // RestartVMRequestHandler (lifecycle.go:395-496)
        (Restart, "Always", running, None, "status:Stop,Start"),
        (Restart, "Manual", running, None, "status:Stop,Start"),
        (Restart, "RerunOnFailure", succeeded, None, "status:Stop,Start"),
        (Restart, "Always", running, Some(0), "grace:Some(30)->1 status:Stop,Start"),
        (Restart, "Always", running, Some(5),
            "400:For force restart, only gracePeriod=0 is supported for now"),
        (Restart, "Always", running, Some(1),
            "400:For force restart, only gracePeriod=0 is supported for now"),
        (Restart, "Always", running, Some(-1), "400:gracePeriod has to be greater or equal to 0"),
        (Restart, "Halted", running, None, "409:RunStategy Halted does not support manual restart requests"),
        (Restart, "Once", running, None, "409:RunStategy Once does not support manual restart requests"),
        (Restart, "Always", none, None, "409:VM is not running: Halted"),
    ];
    let mut failures = Vec::new();
    for (verb, strategy, vmi, grace, expected) in rows {
        let obs = observed(strategy, json!({"printableStatus": "x"}), *vmi);
        let got = outcome(decide(
            *verb,
            &obs,
            Options {
                grace_period: *grace,
                paused: false,
            },
        ));
        if got != *expected {
            failures.push(format!(
                "{} {strategy} vmi={vmi:?} grace={grace:?}: got {got}, want {expected}",
                verb.as_str()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn patches_test_what_was_read_and_clear_a_start_failure() {
    // A VM with a status: test the (absent) list, add the request, remove startFailure.
    let obs = observed(
        "Manual",
        json!({"printableStatus": "Stopped", "startFailure": {"consecutiveFailCount": 2}}),
        None,
    );
    let plan = decide(Verb::Start, &obs, Options::default()).expect("plan");
    assert_eq!(
        plan.writes[0].patch(),
        &json!([
            {"op": "test", "path": "/status/stateChangeRequests", "value": null},
            {"op": "add", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]},
            {"op": "remove", "path": "/status/startFailure"},
        ])
    );
    // An empty status: add one holding the requests (lifecycle.go:610-613).
    for empty in [
        json!(null),
        json!({}),
        json!({"created": false, "conditions": []}),
    ] {
        let obs = observed("Manual", empty.clone(), Some(("Succeeded", Some(30))));
        let plan = decide(Verb::Start, &obs, Options::default()).expect("plan");
        assert_eq!(
            plan.writes[0].patch(),
            &json!([{"op": "add", "path": "/status", "value": {"stateChangeRequests": [
                {"action": "Stop", "uid": VMI_UID}, {"action": "Start"}
            ]}}]),
            "status {empty}"
        );
    }
    // A pending request: a single Stop replaces it, anything else is refused (500).
    let pending =
        json!({"printableStatus": "Running", "stateChangeRequests": [{"action": "Start"}]});
    let obs = observed("Manual", pending.clone(), Some(("Running", Some(30))));
    let plan = decide(Verb::Stop, &obs, Options::default()).expect("plan");
    assert_eq!(
        plan.writes[0].patch(),
        &json!([
            {"op": "test", "path": "/status/stateChangeRequests", "value": [{"action": "Start"}]},
            {"op": "replace", "path": "/status/stateChangeRequests", "value": [
                {"action": "Stop", "uid": VMI_UID}
            ]},
        ])
    );
    let refused = decide(Verb::Restart, &obs, Options::default()).unwrap_err();
    assert_eq!(
        (refused.code, refused.message.as_str()),
        (
            500,
            "Internal error occurred: unable to complete request: stop/start already underway"
        )
    );
}

#[test]
fn spec_patches_follow_the_field_the_vm_uses() {
    let mut obs = observed("Halted", json!({}), None);
    let plan = decide(Verb::Start, &obs, Options::default()).expect("plan");
    assert_eq!(
        plan.writes[0].patch(),
        &json!([
            {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
            {"op": "replace", "path": "/spec/runStrategy", "value": "Always"},
        ])
    );
    // The deprecated `running` (and neither field: Halted, tested as null).
    for (running, tested) in [(Some(false), json!(false)), (None, json!(null))] {
        let spec = obs.vm_raw["spec"].as_object_mut().expect("spec");
        spec.remove("runStrategy");
        match running {
            Some(r) => spec.insert("running".into(), json!(r)),
            None => spec.remove("running"),
        };
        obs.vm = serde_json::from_value(obs.vm_raw.clone()).expect("VM");
        let plan = decide(Verb::Start, &obs, Options::default()).expect("plan");
        assert_eq!(
            plan.writes[0].patch(),
            &json!([
                {"op": "test", "path": "/spec/running", "value": tested},
                {"op": "replace", "path": "/spec/running", "value": true},
            ])
        );
    }
    // Both fields: virt-api's 500, naming the fields.
    obs.vm_raw["spec"]["runStrategy"] = json!("Always");
    obs.vm_raw["spec"]["running"] = json!(true);
    obs.vm = serde_json::from_value(obs.vm_raw.clone()).expect("VM");
    let err = decide(Verb::Stop, &obs, Options::default()).unwrap_err();
    assert_eq!(err.code, 500);
    assert!(
        err.message.contains("mutually exclusive"),
        "{}",
        err.message
    );
}

#[test]
fn force_restart_lowers_the_grace_period_first_and_can_roll_it_back() {
    let obs = observed(
        "Always",
        json!({"printableStatus": "Running"}),
        Some(("Running", Some(180))),
    );
    let plan = decide(
        Verb::Restart,
        &obs,
        Options {
            grace_period: Some(0),
            paused: false,
        },
    )
    .expect("plan");
    assert_eq!(
        plan.writes[0].patch(),
        &json!([
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": 180},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 1},
        ])
    );
    assert!(matches!(plan.writes[1], Write::VmStatus { .. }));
    assert_eq!(
        plan.rollback,
        Some(json!([
            {"op": "test", "path": "/spec/terminationGracePeriodSeconds", "value": 1},
            {"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": 180},
        ]))
    );
    // Without --force nothing touches the VMI.
    let plan = decide(Verb::Restart, &obs, Options::default()).expect("plan");
    assert_eq!(plan.writes.len(), 1);
    assert_eq!(plan.rollback, None);
}

#[test]
fn recovery_conditions_block_start_and_restart() {
    let status = json!({"conditions": [
        {"type": "ManualRecoveryRequired", "status": "True"},
        {"type": "VolumesChange", "status": "True"},
    ]});
    let obs = observed("Manual", status, Some(("Running", Some(30))));
    let err = decide(Verb::Restart, &obs, Options::default()).unwrap_err();
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("VM recovery required"),
        "{}",
        err.message
    );
    let stopped = observed(
        "Manual",
        json!({"conditions": [{"type": "ManualRecoveryRequired", "status": "True"}]}),
        None,
    );
    let err = decide(Verb::Start, &stopped, Options::default()).unwrap_err();
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("VM recovery required"),
        "{}",
        err.message
    );
}

#[test]
fn zero_status_is_go_semantic_equality() {
    assert!(status_is_zero(&json!(null)));
    assert!(status_is_zero(
        &json!({"ready": false, "observedGeneration": 0, "runStrategy": ""})
    ));
    assert!(!status_is_zero(&json!({"printableStatus": "Stopped"})));
    // A pointer field is set even when what it points to is zero.
    assert!(!status_is_zero(&json!({"startFailure": {}})));
    assert!(!status_is_zero(&json!({"snapshotInProgress": ""})));
}

#[test]
fn a_paused_start_is_a_start_request_with_paused_data() {
    let paused = Options {
        paused: true,
        ..Options::default()
    };
    let start_paused = json!({"action": "Start", "data": {"paused": "true"}});
    // Halted: a request instead of the runStrategy patch; Manual: the request carries the data.
    for (strategy, vmi, requests) in [
        ("Halted", None, json!([start_paused])),
        ("Manual", None, json!([start_paused])),
        (
            "Manual",
            Some(("Succeeded", Some(30))),
            json!([{"action": "Stop", "uid": VMI_UID}, start_paused]),
        ),
    ] {
        let obs = observed(strategy, json!({"printableStatus": "Stopped"}), vmi);
        let plan = decide(Verb::Start, &obs, paused).expect("plan");
        assert_eq!(
            plan.writes[0].patch()[1],
            json!({"op": "add", "path": "/status/stateChangeRequests", "value": requests}),
            "{strategy} {vmi:?}"
        );
    }
    // Still refused where a start is.
    let obs = observed("Always", json!({}), None);
    assert_eq!(decide(Verb::Start, &obs, paused).unwrap_err().code, 409);
}
