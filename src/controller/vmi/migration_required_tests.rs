//! Cases after KubeVirt v1.9.0 pkg/network/migration/evaluator_test.go ("Evaluator") and
//! watch/vmi's MigrationRequired tests, with this project's own names and values.

use super::*;
use serde_json::json;

const NS: &str = "tenant";

fn vmi(secondary: Value, entries: Value, conditions: Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": NS},
        "spec": {"domain": {"devices": {"interfaces": [
                    {"name": "default", "bridge": {}}, secondary]}},
                 "networks": [{"name": "default", "pod": {}},
                              {"name": "green", "multus": {"networkName": "green-nad"}}]},
        "status": {"interfaces": entries, "conditions": conditions},
    }))
    .unwrap()
}

fn pod(network_status: Option<Value>) -> Pod {
    let mut p = Pod::default();
    if let Some(s) = network_status {
        p.metadata.annotations = Some(
            [(
                "k8s.v1.cni.cncf.io/network-status".to_string(),
                s.to_string(),
            )]
            .into(),
        );
    }
    p
}

fn at(secs: i64) -> Time {
    Time(chrono::DateTime::from_timestamp(1_767_225_600 + secs, 0).unwrap())
}

fn entry(name: &str, source: &str) -> Value {
    json!({"name": name, "infoSource": source})
}

fn bridge() -> Value {
    json!({"name": "green", "bridge": {}})
}

fn condition(v: &VirtualMachineInstance) -> Option<(String, String)> {
    v.condition(MIGRATION_REQUIRED).map(|c| {
        (
            c.status.to_string(),
            c.reason.as_deref().unwrap_or_default().to_string(),
        )
    })
}

/// "Should not require migration": status matches spec; an absent interface the domain still
/// reports.
#[test]
fn no_migration() {
    let plugged = json!([
        entry("default", "domain"),
        entry("green", "domain, multus-status")
    ]);
    let mut absent = bridge();
    absent["state"] = json!("absent");
    for v in [
        vmi(bridge(), plugged.clone(), json!([])),
        vmi(absent, plugged, json!([])),
    ] {
        assert_eq!(evaluate(&v, &pod(None), at(0)), None);
    }
}

/// "Should require a pending migration" (bridge hotplug, unplugged from the domain) and "an
/// immediate migration" for SR-IOV hotplug.
#[test]
fn hotplug_and_unplug_requirements() {
    let only_default = json!([entry("default", "domain")]);
    let v = vmi(bridge(), only_default.clone(), json!([]));
    assert_eq!(evaluate(&v, &pod(None), at(0)), Some("False"));
    let mut absent = bridge();
    absent["state"] = json!("absent");
    let multus_only = json!([entry("default", "domain"), entry("green", "multus-status")]);
    let v = vmi(absent, multus_only, json!([]));
    assert_eq!(evaluate(&v, &pod(None), at(0)), Some("False"));
    let sriov = json!({"name": "green", "sriov": {}});
    let v = vmi(sriov, only_default, json!([]));
    assert_eq!(evaluate(&v, &pod(None), at(0)), Some("True"));
}

/// "Time based scenarios": pending turns True only once the grace period has passed.
#[test]
fn pending_turns_true_after_the_grace_period() {
    let pending = json!([{"type": "MigrationRequired", "status": "False",
                          "reason": "AutoMigrationPending",
                          "lastTransitionTime": at(0).to_rfc3339(), "lastProbeTime": null}]);
    let v = vmi(bridge(), json!([entry("default", "domain")]), pending);
    assert_eq!(evaluate(&v, &pod(None), at(15)), Some("False"));
    assert_eq!(evaluate(&v, &pod(None), at(16)), Some("True"));
}

/// "NAD name change": the pod's network status names another NAD than the spec (bare names
/// are in the VMI's namespace).
#[test]
fn nad_name_change_needs_a_migration_now() {
    let entries = json!([entry("default", "domain"),
        {"name": "green", "infoSource": "domain, multus-status", "podInterfaceName": "pod7a1"}]);
    let v = vmi(bridge(), entries, json!([]));
    let status = |nad: &str| pod(Some(json!([{"name": nad, "interface": "pod7a1"}])));
    assert_eq!(
        evaluate(&v, &status(&format!("{NS}/green-nad")), at(0)),
        None
    );
    assert_eq!(evaluate(&v, &status("green-nad"), at(0)), None);
    assert_eq!(
        evaluate(&v, &status(&format!("{NS}/green-old")), at(0)),
        Some("True")
    );
}

/// lifecycle.go:1197-1232: False with a requeue, then True (kept), then removed once nothing
/// needs a migration.
#[test]
fn condition_lifecycle() {
    let mut v = vmi(bridge(), json!([entry("default", "domain")]), json!([]));
    let mut expl = Vec::new();
    let again = sync_migration_required(&mut v, &pod(None), at(0), &mut expl);
    assert_eq!(again, Some(PENDING_REEVALUATION));
    assert_eq!(condition(&v), Some(("False".into(), PENDING.into())));
    // Within the grace period: unchanged, including its transition time.
    sync_migration_required(&mut v, &pod(None), at(10), &mut expl);
    let t = v
        .condition(MIGRATION_REQUIRED)
        .unwrap()
        .last_transition_time;
    assert_eq!(t, Some(at(0)));
    let again = sync_migration_required(&mut v, &pod(None), at(20), &mut expl);
    assert_eq!(again, None);
    assert_eq!(
        condition(&v),
        Some(("True".into(), DUE_TO_LIVE_UPDATE.into()))
    );
    // The interface got plugged (an entry appears): the condition goes.
    let plugged = json!([
        entry("default", "domain"),
        entry("green", "domain, multus-status")
    ]);
    v.status.as_mut().unwrap().interfaces = serde_json::from_value(plugged).unwrap();
    sync_migration_required(&mut v, &pod(None), at(30), &mut expl);
    assert_eq!(condition(&v), None);
    assert_eq!(expl.len(), 3, "{expl:?}");
}
