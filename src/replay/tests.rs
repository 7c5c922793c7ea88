use super::*;
use crate::flight::{Expectation, Input, ObjectId, Version, WatchOp};
use serde_json::{Value, json};

fn line(seq: u64, body: Body) -> Line {
    Line {
        seq,
        at: Utc::now(),
        body,
    }
}

fn vm(rv: &str, strategy: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "a", "namespace": "ns", "uid": "vm-uid", "resourceVersion": rv,
            "generation": 1, "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"}},
        "spec": {"runStrategy": strategy, "template": {"spec": {"domain": {
            "memory": {"guest": "128Mi"}, "devices": {}}}}}})
}

fn id() -> ObjectId {
    ObjectId {
        kind: "VirtualMachine".into(),
        key: "ns/a".into(),
    }
}

fn watch(seq: u64, old: Option<&Value>, new: &Value) -> Line {
    line(
        seq,
        Body::Watch {
            id: id(),
            op: if old.is_some() {
                WatchOp::Update
            } else {
                WatchOp::Add
            },
            version: Some(crate::flight::format::version_of(old, new)),
        },
    )
}

fn reconcile(rv: &str, decided: &[String]) -> Body {
    Body::Reconcile(Box::new(Reconcile {
        controller: "vm".into(),
        key: "ns/a".into(),
        now: Utc::now(),
        inputs: vec![Input {
            id: id(),
            rv: rv.into(),
        }],
        expectations: vec![Expectation {
            store: "vm-vmi".into(),
            adds: 0,
            dels: 0,
            satisfied: true,
        }],
        decided: decided
            .iter()
            .map(|a| Decided {
                action: a.clone(),
                why: String::new(),
            })
            .collect(),
        sync_failed: false,
        skipped: None,
        applied: Vec::new(),
        error: None,
    }))
}

/// What our decision does for a VM of `strategy` with no VMI, as the recording would say it.
fn decided_for(strategy: &str) -> Vec<String> {
    let mut m = Mirror::default();
    m.set(
        crate::shadow::Kind::VirtualMachine,
        "ns/a",
        Some(vm("1", strategy)),
    );
    let (d, _) = m.decisions("ns/a", Utc::now(), &[]).unwrap();
    d.unwrap()
        .actions
        .iter()
        .map(|p| p.action.kind().to_string())
        .collect()
}

#[test]
fn a_reconcile_is_replayed_on_the_versions_it_saw_not_the_latest() {
    let (v1, v2) = (vm("1", "Always"), vm("2", "Halted"));
    let always = decided_for("Always");
    let halted = decided_for("Halted");
    assert_ne!(always, halted);
    let lines = vec![
        watch(1, None, &v1),
        watch(2, Some(&v1), &v2),
        // Recorded after the change to Halted, but its snapshot held rv 1.
        line(3, reconcile("1", &always)),
        line(4, reconcile("2", &always)),
    ];
    let r = replay(&lines);
    assert_eq!((r.reconciles, r.same, r.differ), (2, 1, 1), "{r:#?}");
    let steps = &r.vms[0].steps;
    assert_eq!(steps[0].verdict, Verdict::Same);
    assert_eq!(steps[1].verdict, Verdict::Differ);
    assert_eq!(steps[1].replayed, halted);
    assert!(render_text(&r).contains("DIFFER"));
}

#[test]
fn an_input_missing_from_the_recording_is_named_not_guessed() {
    let lines = vec![
        watch(1, None, &vm("1", "Always")),
        line(2, reconcile("7", &["CreateVmi".to_string()])),
    ];
    let r = replay(&lines);
    assert_eq!(r.not_replayed, 1);
    let note = r.vms[0].steps[0].note.clone().unwrap();
    assert!(
        note.contains("VirtualMachine ns/a at resourceVersion 7"),
        "{note}"
    );
}

#[test]
fn a_change_without_its_base_version_is_counted() {
    let broken = Line {
        seq: 1,
        at: Utc::now(),
        body: Body::Watch {
            id: id(),
            op: WatchOp::Update,
            version: Some(Version {
                rv: "3".into(),
                from_rv: Some("2".into()),
                object: None,
                patch: Some(json!([])),
            }),
        },
    };
    assert_eq!(replay(&[broken]).broken_versions, 1);
}

#[test]
fn a_step_names_the_versions_it_read_and_the_answers_to_its_writes() {
    let v1 = vm("1", "Always");
    let write = |action: &str, error: Option<&str>, rv: Option<&str>| {
        line(
            2,
            Body::Write(Box::new(Write {
                controller: "vm".into(),
                key: "ns/a".into(),
                action: action.into(),
                error: error.map(String::from),
                answer: rv.map(|rv| crate::flight::Answer {
                    id: id(),
                    version: Version {
                        rv: rv.into(),
                        from_rv: Some("1".into()),
                        object: None,
                        patch: Some(json!([])),
                    },
                }),
            })),
        )
    };
    let lines = vec![
        watch(1, None, &v1),
        write("UpdateVmStatus", None, Some("2")),
        write("CreateVmi", Some("500 Internal Server Error"), None),
        write("Event", None, None),
        line(3, reconcile("1", &decided_for("Always"))),
    ];
    let step = &replay(&lines).vms[0].steps[0];
    assert_eq!(step.inputs, ["VirtualMachine ns/a rv 1"]);
    assert_eq!(
        step.answers,
        [
            "VirtualMachine ns/a rv 2",
            "failed: 500 Internal Server Error",
            "accepted"
        ]
    );
    assert_eq!(step.answers.len(), step.writes.len());
}
