//! What-if: the change parsing, the virt-api request rules, the diff and the fit, and the whole
//! evaluation on hand-built gathered states ("now" is fixed).

use super::analyze::{changed_fields, diff_maps, fit_check, pod_requests, vmi_for};
use super::parse::PathStep;
use super::parse::apply_request;
use super::parse::parse_path;
use super::*;
use crate::api::VirtualMachine;
use crate::api::annotations::MEMORY_OVERHEAD_BYTES;
use crate::config::ClusterSettings;
use crate::controller::vm::revision::build_start_revision;
use crate::controller::vm::setup_vmi_from_vm;
use crate::controller::vmi::executor::render_pod_with;
use crate::inspect::gather::Gathered;
use crate::launcher::overhead::MIB;
use crate::lifecycle::Verb;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use crate::inspect::test_support::{now, vm_a};

fn vm(strategy: &str) -> VirtualMachine {
    vm_a(
        strategy,
        Value::Null,
        json!({"printableStatus": "Running", "observedGeneration": 2, "desiredGeneration": 2}),
    )
}

fn node(name: &str, memory: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubevirt.io/schedulable": "true",
            "kubernetes.io/arch": "amd64"}},
        "status": {
            "allocatable": {"cpu": "8", "memory": memory, "pods": "110",
                "ephemeral-storage": "100Gi",
                "devices.kubevirt.io/kvm": "1k", "devices.kubevirt.io/tun": "1k",
                "devices.kubevirt.io/vhost-net": "1k"},
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("node")
}

/// A VM running from its start revision, its VMI and the launcher pod the renderer gives it.
pub(crate) fn running(settings: ClusterSettings) -> Gathered {
    let vm = vm("Always");
    let revision = build_start_revision(&vm).expect("revision");
    let mut vmi = setup_vmi_from_vm(&vm).expect("vmi");
    vmi.metadata.uid = Some("vmi-uid".into());
    vmi.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kubevirt.io/vm-generation", "2".into());
    let status = json!({
        "phase": "Running", "nodeName": "node-a",
        "virtualMachineRevisionName": revision.metadata.name.clone(),
        "conditions": [{"type": "Ready", "status": "True"}]
    });
    vmi.status = Some(serde_json::from_value(status).expect("status"));
    let mut pod = render_pod_with(&settings, &Default::default(), &vmi).expect("pod");
    pod.metadata.name = Some("virt-launcher-vm-a-abcde".into());
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Running",
            "conditions": [{"type": "PodScheduled", "status": "True"}]}))
        .expect("pod status"),
    );
    Gathered {
        now: now(),
        namespace: "demo".into(),
        name: "vm-a".into(),
        vm: Some(vm),
        vmi: Some(vmi),
        pods: vec![pod],
        revisions: vec![revision],
        candidate_nodes: vec![node("node-a", "16Gi"), node("node-b", "64Gi")],
        settings,
        ..Default::default()
    }
}

fn set(text: &str) -> Change {
    Change {
        sets: vec![parse_set(text).expect("set")],
        ..Default::default()
    }
}

#[test]
fn set_values_are_json_when_they_parse_else_strings() {
    let s = parse_set("spec.template.spec.domain.cpu.sockets=2").unwrap();
    assert_eq!(s.value, json!(2));
    assert_eq!(s.steps.last(), Some(&PathStep::Key("sockets".into())));
    assert_eq!(
        parse_set("spec.runStrategy=Halted").unwrap().value,
        json!("Halted")
    );
    assert_eq!(parse_set("a.b=8Gi").unwrap().value, json!("8Gi"));
    assert_eq!(parse_set("a.b=false").unwrap().value, json!(false));
    assert_eq!(parse_set("a.b=\"true\"").unwrap().value, json!("true"));
    assert_eq!(parse_set("a.b={\"x\":1}").unwrap().value, json!({"x": 1}));
    assert_eq!(parse_set("a.b=x=y").unwrap().value, json!("x=y"));
    assert_eq!(
        parse_path(r"metadata.labels.example\.com/tier").unwrap(),
        vec![
            PathStep::Key("metadata".into()),
            PathStep::Key("labels".into()),
            PathStep::Key("example.com/tier".into())
        ]
    );
    assert_eq!(
        parse_path("spec.disks[1].bootOrder").unwrap(),
        vec![
            PathStep::Key("spec".into()),
            PathStep::Key("disks".into()),
            PathStep::Index(1),
            PathStep::Key("bootOrder".into())
        ]
    );
    for bad in ["novalue", "=1", "a..b=1", "a[x]=1", "[0]=1", "a.=1"] {
        assert!(parse_set(bad).is_err(), "{bad} should be refused");
    }
}

#[test]
fn patches_must_be_objects_json_or_yaml() {
    assert_eq!(
        parse_patch(r#"{"spec":{"runStrategy":"Halted"}}"#).unwrap(),
        json!({"spec": {"runStrategy": "Halted"}})
    );
    assert_eq!(
        parse_patch("spec:\n  runStrategy: Halted\n").unwrap(),
        json!({"spec": {"runStrategy": "Halted"}})
    );
    assert!(
        parse_patch("[1,2]")
            .unwrap_err()
            .to_string()
            .contains("must be an object")
    );
    assert!(parse_patch("{").is_err());
}

#[test]
fn set_edits_create_objects_index_lists_and_remove_with_null() {
    let mut doc = json!({"spec": {"list": [{"a": 1}]}});
    let change = Change {
        sets: vec![
            parse_set("spec.new.deep=1").unwrap(),
            parse_set("spec.list[0].a=2").unwrap(),
            parse_set("spec.list[1]={\"b\":3}").unwrap(),
            parse_set("spec.new.deep=null").unwrap(),
        ],
        ..Default::default()
    };
    change.apply_to_value(&mut doc).unwrap();
    assert_eq!(
        doc,
        json!({"spec": {"new": {}, "list": [{"a": 2}, {"b": 3}]}})
    );
    let past = Change {
        sets: vec![parse_set("spec.list[5]=1").unwrap()],
        ..Default::default()
    };
    assert!(
        past.apply_to_value(&mut doc)
            .unwrap_err()
            .to_string()
            .contains("past the end")
    );
}

#[test]
fn apply_change_bumps_generation_and_refuses_identity_status_and_bad_types() {
    let before = vm("Always");
    let after = apply_change(&before, None, &set("spec.runStrategy=Halted")).unwrap();
    assert_eq!(after.spec.run_strategy.as_deref(), Some("Halted"));
    assert_eq!(after.metadata.generation, Some(3));
    let same = apply_change(&before, None, &set("metadata.labels.a=b")).unwrap();
    assert_eq!(same.metadata.generation, Some(2), "metadata is not spec");
    let e = apply_change(&before, None, &set("metadata.name=other")).unwrap_err();
    assert!(e.to_string().contains("metadata.name"), "{e}");
    let e = apply_change(&before, None, &set("status.printableStatus=Stopped")).unwrap_err();
    assert!(e.to_string().contains("--what-if-request"), "{e}");
    let e = apply_change(
        &before,
        None,
        &set("spec.template.spec.domain.cpu.sockets=many"),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.template.spec.domain.cpu.sockets"),
        "{e}"
    );
    // Merge patches first, then --set.
    let change = Change {
        patches: vec![json!({"spec": {"runStrategy": "Manual"}})],
        sets: vec![parse_set("spec.runStrategy=Once").unwrap()],
        ..Default::default()
    };
    let after = apply_change(&before, None, &change).unwrap();
    assert_eq!(after.spec.run_strategy.as_deref(), Some("Once"));
}

fn requests(vm: &VirtualMachine) -> Vec<(String, Option<String>)> {
    vm.status
        .as_ref()
        .and_then(|s| s.state_change_requests.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.action, r.uid))
        .collect()
}

/// lifecycle.go: stop on Always patches the spec; Manual gets a Stop request with the VMI uid;
/// restart is [Stop{uid}, Start]; start on Always is a 409; a pending request blocks another.
#[test]
fn requests_follow_virt_apis_subresources() {
    let g = running(ClusterSettings::default());
    let vmi = g.vmi.as_ref();
    let mut v = vm("Always");
    apply_request(&mut v, vmi, Verb::Stop).unwrap();
    assert_eq!(v.spec.run_strategy.as_deref(), Some("Halted"));
    let mut legacy = vm("Always");
    legacy.spec.run_strategy = None;
    legacy.spec.running = Some(true);
    apply_request(&mut legacy, vmi, Verb::Stop).unwrap();
    assert_eq!(legacy.spec.running, Some(false));

    let mut v = vm("Manual");
    apply_request(&mut v, vmi, Verb::Stop).unwrap();
    assert_eq!(requests(&v), vec![("Stop".into(), Some("vmi-uid".into()))]);

    let mut v = vm("Always");
    v.status.as_mut().unwrap().start_failure = Some(Default::default());
    apply_request(&mut v, vmi, Verb::Restart).unwrap();
    assert_eq!(
        requests(&v),
        vec![
            ("Stop".into(), Some("vmi-uid".into())),
            ("Start".into(), None)
        ]
    );
    assert!(v.status.as_ref().unwrap().start_failure.is_none());
    let e = apply_request(&mut v, vmi, Verb::Restart).unwrap_err();
    assert!(e.to_string().contains("already underway"), "{e}");

    let e = apply_request(&mut vm("Always"), vmi, Verb::Start).unwrap_err();
    assert!(e.to_string().contains("VM is already running"), "{e}");
    let e = apply_request(&mut vm("Always"), None, Verb::Start).unwrap_err();
    assert!(
        e.to_string()
            .contains("Always does not support manual start requests"),
        "{e}"
    );
    let mut v = vm("Halted");
    apply_request(&mut v, None, Verb::Start).unwrap();
    assert_eq!(v.spec.run_strategy.as_deref(), Some("Always"));
    let mut v = vm("Manual");
    apply_request(&mut v, None, Verb::Start).unwrap();
    assert_eq!(requests(&v), vec![("Start".into(), None)]);
    let e = apply_request(&mut vm("Halted"), vmi, Verb::Restart).unwrap_err();
    assert!(
        e.to_string().contains("does not support manual restart"),
        "{e}"
    );
    assert!(parse_request("pause").is_err());
}

#[test]
fn changed_fields_name_every_leaf() {
    let before = vm("Always");
    let after = apply_change(
        &before,
        None,
        &Change {
            patches: vec![json!({"spec": {"runStrategy": "Halted",
                "template": {"spec": {"domain": {"memory": {"guest": "1Gi"}}}}}})],
            ..Default::default()
        },
    )
    .unwrap();
    let fields = changed_fields(&before, &after);
    let paths: Vec<&str> = fields.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        vec!["spec.runStrategy", "spec.template.spec.domain.memory.guest"]
    );
    assert_eq!(fields[0].before, Some(json!("Always")));
    assert_eq!(fields[1].before, None);
}

#[test]
fn map_diffs_compare_quantities_by_value() {
    let m = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    let d = diff_maps(
        &m(&[
            ("requests.memory", "1Gi"),
            ("requests.cpu", "100m"),
            ("limits.x", "1"),
        ]),
        &m(&[
            ("requests.memory", "1024Mi"),
            ("requests.cpu", "200m"),
            ("limits.y", "1"),
        ]),
        true,
    );
    let names: Vec<&str> = d.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, vec!["limits.x", "limits.y", "requests.cpu"]);
    assert_eq!(d[2].delta, Some(100));
    assert_eq!(human_bytes(-32 * MIB), "-32Mi");
    // Exact in the largest unit that divides it, as kubectl writes quantities.
    assert_eq!(human_bytes(3 * 1024 * MIB / 2), "1536Mi");
    assert_eq!(human_bytes(3 * 1024 * MIB / 2 + 1), "1.50Gi");
}

/// The what-if of `change` on [`running`] with the default settings.
fn on_running(change: &Change) -> WhatIf {
    what_if(&running(ClusterSettings::default()), change).expect("what-if")
}

/// Asserts that a line of `w.outcome` starts with `prefix`.
pub(crate) fn assert_outcome(w: &WhatIf, prefix: &str) {
    assert!(
        w.outcome.iter().any(|o| o.starts_with(prefix)),
        "{:?}",
        w.outcome
    );
}

#[test]
fn halted_would_delete_the_vmi() {
    let w = on_running(&set("spec.runStrategy=Halted"));
    assert_outcome(&w, "would delete VMI vm-a");
    assert!(w.after.actions.iter().any(|a| a.kind == "DeleteVmi"));
    assert!(!w.before.actions.iter().any(|a| a.kind == "DeleteVmi"));
    assert!(render_text(&w).contains("would delete VMI vm-a"));
    // The status written after the delete, with the deletion expected: Stopping.
    assert_eq!(w.after.printable_status.as_deref(), Some("Stopping"));
    assert_eq!(w.before.printable_status.as_deref(), Some("Running"));
}

#[test]
fn restart_request_is_a_restart() {
    let w = on_running(&Change {
        request: Some(Verb::Restart),
        ..Default::default()
    });
    assert_outcome(&w, "would restart");
    assert!(
        w.changed_fields
            .iter()
            .any(|f| f.path == "status.stateChangeRequests")
    );
}

#[test]
fn graphics_off_needs_a_restart_and_drops_video_ram() {
    let w = on_running(&set(
        "spec.template.spec.domain.devices.autoattachGraphicsDevice=false",
    ));
    assert!(!w.before.restart_required);
    assert!(w.after.restart_required, "{:?}", w.after);
    assert_outcome(&w, "RestartRequired");
    let pod = w.pod.expect("pod diff");
    assert_eq!(pod.before_source, "pod/virt-launcher-vm-a-abcde");
    let video = pod
        .terms
        .iter()
        .find(|t| t.name == "videoRam")
        .expect("videoRam moved");
    assert_eq!(video.delta_bytes, -32 * MIB);
    assert_eq!(pod.terms.len(), 1, "{:?}", pod.terms);
    assert_eq!(
        pod.memory_request_after_bytes.unwrap() - pod.memory_request_before_bytes.unwrap(),
        -32 * MIB
    );
    assert!(
        pod.annotations
            .iter()
            .any(|a| a.name == MEMORY_OVERHEAD_BYTES && a.delta == Some(-32 * MIB))
    );
    assert_eq!(w.rollout.change_needs_restart, Some(true));
}

#[test]
fn memory_guest_follows_the_rollout_strategy() {
    let change = set("spec.template.spec.domain.memory.guest=256Mi");
    let live = on_running(&change);
    assert_eq!(live.rollout.strategy, "LiveUpdate");
    assert!(!live.after.restart_required);
    assert_eq!(live.rollout.change_needs_restart, Some(false));
    assert!(
        live.rollout
            .summary
            .contains("live update of spec.template.spec.domain.memory.guest")
    );
    let stage = ClusterSettings {
        vm_rollout_strategy_live_update: false,
        ..Default::default()
    };
    let staged = what_if(&running(stage), &change).unwrap();
    assert_eq!(staged.rollout.strategy, "Stage");
    assert!(staged.after.restart_required);
    assert!(
        staged.rollout.summary.contains("RestartRequired"),
        "{}",
        staged.rollout.summary
    );
}

#[test]
fn an_oversized_pod_fits_no_node_and_names_the_closest() {
    let g = running(ClusterSettings::default());
    let w = what_if(
        &g,
        &set("spec.template.spec.domain.resources.requests.memory=100Gi"),
    )
    .unwrap();
    let fit = w.fit.expect("fit");
    assert!(!fit.fits);
    assert_eq!(fit.closest_node.as_deref(), Some("node-b"));
    assert!(
        fit.summary.contains("closest node-b: memory: needs"),
        "{}",
        fit.summary
    );
    assert!(w.outcome.iter().any(|o| o.contains("unschedulable")));
    // The current template fits both.
    let ok = what_if(&g, &set("metadata.labels.x=y")).unwrap();
    assert_eq!(ok.fit.unwrap().fitting_nodes, vec!["node-a", "node-b"]);
    assert_eq!(
        ok.outcome,
        vec!["no change: the controllers would do the same as now"]
    );
}

#[test]
fn fit_rules_out_cordoned_unready_and_unlabelled_nodes() {
    let g = running(ClusterSettings::default());
    let pod = &g.pods[0];
    let mut cordoned = node("c", "64Gi");
    cordoned.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
        unschedulable: Some(true),
        ..Default::default()
    });
    let mut unlabelled = node("u", "64Gi");
    unlabelled.metadata.labels = None;
    let fit = fit_check(pod, &[cordoned, unlabelled]);
    assert!(!fit.fits);
    assert!(fit.nodes[0].problems[0].contains("cordoned"));
    assert!(
        fit.nodes[1]
            .problems
            .iter()
            .any(|p| p.contains("nodeSelector kubevirt.io/schedulable=true")),
        "{:?}",
        fit.nodes[1]
    );
    assert!(pod_requests(pod).contains_key("devices.kubevirt.io/kvm"));
}

#[test]
fn a_manifest_is_a_gathered_state() {
    let text = serde_yaml::to_string(&vm("Always")).unwrap()
        + "---\n"
        + &serde_yaml::to_string(&node("node-a", "1Gi")).unwrap()
        + "---\nkind: KubeVirt\napiVersion: kubevirt.io/v1\nmetadata: {name: kv}\nspec: {configuration: {vmRolloutStrategy: Stage}}\n";
    let g = gathered_from_manifest("vm.yaml", &text, "default", now()).unwrap();
    assert_eq!((g.namespace.as_str(), g.name.as_str()), ("demo", "vm-a"));
    assert!(!g.settings.vm_rollout_strategy_live_update);
    assert_eq!(g.candidate_nodes.len(), 1);
    assert!(g.missing.iter().any(|m| m.what == "vmi"));
    let w = what_if(&g, &set("spec.runStrategy=Halted")).unwrap();
    assert_eq!(w.rollout.strategy, "Stage");
    assert!(gathered_from_manifest("x.yaml", "kind: Pod\n", "default", now()).is_err());
}

#[test]
fn a_change_line_takes_sets_patches_and_one_request() {
    let c = parse_change_line(
        r#"spec.runStrategy=Halted; metadata.labels.a={"x": [1, 2]}  {"spec": {"running": null}} restart"#,
    )
    .unwrap();
    assert_eq!(c.sets.len(), 2);
    assert_eq!(c.sets[0].value, json!("Halted"));
    assert_eq!(
        c.sets[1].value,
        json!({"x": [1, 2]}),
        "spaces inside JSON stay"
    );
    assert_eq!(c.patches, vec![json!({"spec": {"running": null}})]);
    assert_eq!(c.request, Some(Verb::Restart));
    assert_eq!(
        parse_change_line("  stop ").unwrap().request,
        Some(Verb::Stop)
    );
    assert_eq!(
        parse_change_line(r#"metadata.labels.a="b c""#)
            .unwrap()
            .sets[0]
            .value,
        json!("b c")
    );
    for bad in [
        "",
        " ; ",
        "halted",
        "start stop",
        "{not json",
        "[1]",
        "=1",
        "a..b=1",
        "a=}}]]",
    ] {
        let e = parse_change_line(bad);
        if bad == "a=}}]]" {
            assert_eq!(
                e.unwrap().sets[0].value,
                json!("}}]]"),
                "unbalanced closers are text"
            );
            continue;
        }
        assert!(e.is_err(), "{bad:?} parsed as {e:?}");
    }
    assert_eq!(
        parse_change_line("halted").unwrap_err().to_string(),
        r#""halted": expected path=value, a JSON merge patch {…}, or start, stop, restart"#
    );
}

/// virt-api's checks before the run strategy (lifecycle.go:63-64, 427-429): a VM whose volume
/// migration needs manual recovery may not be started (`ManualRecoveryRequired`) nor restarted
/// (`VolumesChange`); both are 409 Conflict.
#[test]
fn manual_recovery_refuses_start_and_restart() {
    let recovery = |type_: &str| {
        let status = json!({"conditions": [{"type": type_, "status": "True"}]});
        vm_a("Manual", Value::Null, status)
    };
    let g = running(ClusterSettings::default());
    let e = apply_request(&mut recovery("ManualRecoveryRequired"), None, Verb::Start).unwrap_err();
    assert!(e.to_string().contains("409 Conflict"), "{e}");
    assert!(
        e.to_string().contains("manual intervention is needed"),
        "{e}"
    );
    let e = apply_request(
        &mut recovery("VolumesChange"),
        g.vmi.as_ref(),
        Verb::Restart,
    )
    .unwrap_err();
    assert!(e.to_string().contains("409 Conflict"), "{e}");
    assert!(e.to_string().contains("RestartVMRequestHandler"), "{e}");
    // A condition that is not True refuses nothing.
    let mut v = vm_a(
        "Manual",
        Value::Null,
        json!({"conditions": [{"type": "ManualRecoveryRequired", "status": "False"}]}),
    );
    apply_request(&mut v, None, Verb::Start).unwrap();
    assert_eq!(requests(&v), vec![("Start".into(), None)]);
}

/// getChangeRequestJson's "stop/start already underway" is not a Conflict: the handlers wrap
/// it in errors.NewInternalError, a 500 (lifecycle.go:471-475, 606-624).
#[test]
fn a_request_while_another_is_underway_is_a_500() {
    let g = running(ClusterSettings::default());
    let mut v = vm_a(
        "Manual",
        Value::Null,
        json!({"stateChangeRequests": [{"action": "Stop", "uid": "vmi-uid"}]}),
    );
    let e = apply_request(&mut v, g.vmi.as_ref(), Verb::Restart).unwrap_err();
    let text = e.to_string();
    assert!(text.contains("500 InternalError"), "{text}");
    assert!(text.contains("stop/start already underway"), "{text}");
}

/// The VMI a what-if renders for a VM with an instancetype is the expanded one
/// (pkg/instancetype/apply/vm.go:67-87), from the stash the status ref names; without that
/// stash it cannot be rendered and says why.
#[test]
fn instancetype_vms_render_expanded() {
    let mut vm = vm("Always");
    vm.spec.instancetype = Some(json!({"name": "cx1.medium"}).into());
    if let Some(m) = vm.spec.template.as_mut().and_then(|t| t.spec.as_mut()) {
        m.domain.memory = None;
        m.domain.cpu = None;
        m.domain.resources = None;
    }
    let object = json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1",
        "kind": "VirtualMachineClusterInstancetype",
        "metadata": {"name": "cx1.medium", "uid": "it-uid", "generation": 1},
        "spec": {"cpu": {"guest": 4}, "memory": {"guest": "8Gi"}}
    });
    let stash = crate::instancetype::revision::build(
        &vm,
        crate::instancetype::Resource::ClusterInstancetype,
        &object,
    );
    let name = stash.metadata.name.clone().unwrap();
    vm.status = Some(
        serde_json::from_value(json!({
            "instancetypeRef": {"name": "cx1.medium", "controllerRevisionRef": {"name": name}}
        }))
        .unwrap(),
    );
    let vmi = vmi_for(&vm, None, "demo", std::slice::from_ref(&stash)).expect("vmi");
    let spec = serde_json::to_value(&vmi.spec).unwrap();
    assert_eq!(
        spec["domain"]["cpu"],
        json!({"sockets": 4, "cores": 1, "threads": 1})
    );
    assert_eq!(spec["domain"]["memory"]["guest"], "8Gi");
    assert_eq!(
        vmi.metadata.annotations.as_ref().unwrap()["kubevirt.io/cluster-instancetype-name"],
        "cx1.medium"
    );
    let err = vmi_for(&vm, None, "demo", &[]).unwrap_err();
    assert_eq!(
        err,
        format!("controllerrevisions.apps \"{name}\" not found")
    );
}

/// [`running`] with 1 socket of at most 2 in the template, its start revision and its VMI.
fn running_hotpluggable() -> Gathered {
    let mut g = running(ClusterSettings::default());
    let cpu: crate::api::vmi::Cpu =
        serde_json::from_value(json!({"sockets": 1, "cores": 1, "maxSockets": 2})).unwrap();
    let vm = g.vm.as_mut().unwrap();
    crate::controller::vm::template_spec_mut(vm).domain.cpu = Some(cpu.clone());
    let revision = build_start_revision(vm).expect("revision");
    let vmi = g.vmi.as_mut().unwrap();
    vmi.spec.domain.cpu = Some(cpu);
    vmi.status.as_mut().unwrap().virtual_machine_revision_name = revision.metadata.name.clone();
    g.revisions = vec![revision];
    g
}

/// The rollout line tells a live update the VM controller applies (its VMI patch) from one its
/// handler turns into RestartRequired (vm.go:622-673), with the handler's message.
#[test]
fn live_updates_show_the_vmi_patch_or_the_handlers_restart() {
    let g = running_hotpluggable();
    let live = what_if(&g, &set("spec.template.spec.domain.cpu.sockets=2")).unwrap();
    assert!(!live.after.restart_required);
    assert!(live.after.actions.iter().any(|a| a.kind == "PatchVmiSpec"));
    assert!(
        live.rollout
            .summary
            .contains("the VM controller patches the VMI's spec (1 patch)"),
        "{}",
        live.rollout.summary
    );

    let beyond = what_if(&g, &set("spec.template.spec.domain.cpu.sockets=3")).unwrap();
    let message = "CPU sockets updated in template spec to a value higher than what's available";
    assert!(beyond.after.restart_required);
    assert_eq!(
        beyond.after.restart_required_message.as_deref(),
        Some(message)
    );
    assert!(
        !beyond
            .after
            .actions
            .iter()
            .any(|a| a.kind == "PatchVmiSpec")
    );
    assert!(
        beyond
            .rollout
            .summary
            .contains(&format!("the live update cannot be applied: {message}")),
        "{}",
        beyond.rollout.summary
    );

    let tolerations = what_if(
        &g,
        &Change {
            patches: vec![json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k"}]}}}})],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(
        tolerations
            .rollout
            .summary
            .contains("patches the VMI's spec"),
        "{}",
        tolerations.rollout.summary
    );
}

/// An added bridge interface is hotplugged by the network synchronizer (its VMI patch in the
/// rollout line); removing the VMI's interface needs a restart (vmliveupdate/restart.go).
#[test]
fn interface_changes_show_the_hotplug_or_the_restart() {
    let g = running(ClusterSettings::default());
    let vm = g.vm.as_ref().unwrap();
    let spec = vm.template_spec().unwrap();
    let mut ifaces = serde_json::to_value(&spec.domain.devices.interfaces).unwrap();
    let mut nets = serde_json::to_value(&spec.networks).unwrap();
    if ifaces.is_null() {
        ifaces = json!([]);
        nets = json!([]);
    }
    ifaces
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "blue", "bridge": {}}));
    nets.as_array_mut()
        .unwrap()
        .push(json!({"name": "blue", "multus": {"networkName": "blue-nad"}}));
    let patch = json!({"spec": {"template": {"spec": {
        "domain": {"devices": {"interfaces": ifaces}}, "networks": nets}}}});
    let plug = what_if(
        &g,
        &Change {
            patches: vec![patch],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!plug.after.restart_required, "{:?}", plug.rollout);
    assert!(
        plug.rollout.summary.contains("hotplug interface blue")
            && plug.rollout.summary.contains("MigrationRequired"),
        "{}",
        plug.rollout.summary
    );
    // A VM started with blue: removing it from the template is no hot-unplug.
    let mut g = running(ClusterSettings::default());
    let blue_iface: crate::api::vmi::Interface =
        serde_json::from_value(json!({"name": "blue", "bridge": {}})).unwrap();
    let blue_net: crate::api::vmi::Network =
        serde_json::from_value(json!({"name": "blue", "multus": {"networkName": "blue-nad"}}))
            .unwrap();
    let vm = g.vm.as_mut().unwrap();
    let spec = crate::controller::vm::template_spec_mut(vm);
    spec.domain.devices.interfaces = Some(vec![blue_iface.clone()]);
    spec.networks = Some(vec![blue_net.clone()]);
    let revision = build_start_revision(vm).expect("revision");
    let vmi = g.vmi.as_mut().unwrap();
    vmi.spec.domain.devices.interfaces = Some(vec![blue_iface]);
    vmi.spec.networks = Some(vec![blue_net]);
    vmi.status.as_mut().unwrap().virtual_machine_revision_name = revision.metadata.name.clone();
    g.revisions = vec![revision];
    let removed = json!({"spec": {"template": {"spec": {
        "domain": {"devices": {"interfaces": []}}, "networks": []}}}});
    let unplug = what_if(
        &g,
        &Change {
            patches: vec![removed],
            ..Default::default()
        },
    )
    .unwrap();
    assert!(unplug.after.restart_required, "{:?}", unplug.rollout);
}
