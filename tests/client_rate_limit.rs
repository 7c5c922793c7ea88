//! KubeVirt's client rate limiter (src/runtime/rest_limiter.rs): the controller's requests
//! keep to the KubeVirt CR's `controllerConfiguration.restClient.rateLimiter.
//! tokenBucketRateLimiter`, and a change of the CR takes effect without a restart
//! (pkg/virt-controller/watch/application.go:557-563).

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig, Server};
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::time::Duration;
use virtctl_rs::sim::audit::AuditEntry;

fn bucket(qps: f64, burst: u32) -> serde_json::Value {
    json!({"controllerConfiguration": {"restClient": {"rateLimiter": {
        "tokenBucketRateLimiter": {"qps": qps, "burst": burst}
    }}}})
}

/// Wait until the controller's settings carry `qps`; the audit log's length then.
async fn wait_applied(env: &Env, qps: f64) -> usize {
    env.wait_for("the controller to apply the CR's client limit", || async {
        let s = env.manager.debug_state()["settings"]["current"]["controllerRateLimiter"].clone();
        (s["qps"].as_f64() == Some(qps)).then_some(())
    })
    .await;
    env.audit().len()
}

/// The times of the controller's requests after the first `skip` audit entries, Lease calls
/// left out (they have a client of their own).
fn controller_requests(entries: &[AuditEntry], skip: usize) -> Vec<chrono::DateTime<chrono::Utc>> {
    let mut times: Vec<_> = entries[skip.min(entries.len())..]
        .iter()
        .filter(|e| e.user_agent.starts_with(CONTROLLER_AGENT) && e.resource != "leases")
        .map(|e| e.time)
        .collect();
    times.sort();
    times
}

/// The controller's writes after the first `skip` audit entries that the server refused.
fn failed_controller_writes(entries: &[AuditEntry], skip: usize) -> Vec<AuditEntry> {
    entries[skip.min(entries.len())..]
        .iter()
        .filter(|e| {
            e.user_agent.starts_with(CONTROLLER_AGENT)
                && e.is_write()
                && !(200..300).contains(&e.code)
        })
        .cloned()
        .collect()
}

/// Whether `failed` holds only the two refusals a throttled controller meets, each at most once
/// an object. At 5 requests/s a write waits seconds for the bucket after it was decided, so the
/// cache it was decided from can be behind when it is sent:
/// - `patch pods` 422: a launcher-pod label patch sent again from a pod cache behind the
///   controller's own patch, refused for its `test` (KubeVirt's behaviour, docs/performance.md
///   "With KubeVirt's client rate limit");
/// - `update virtualmachineinstances` 409: a full Update carries the cached resourceVersion,
///   and any VMI event settles the VMI self-expectation it sets (vmi.go:516-522,
///   lifecycle.go:603-608), so a sync can decide from a copy one write behind; the conflict
///   requeues the VMI, as in KubeVirt. Seen once (CI, 2026-12-07, on kube-apiserver), not in
///   30 reruns alone, three at a time or beside the whole suite.
///
/// Either failed write waits for the bucket itself, and the cache catches up meanwhile: a second
/// refusal of the same object would be a cache that does not.
fn expected_failures(failed: &[AuditEntry]) -> bool {
    fn kind(e: &AuditEntry) -> (&str, &str, &str, u16) {
        (&e.verb, &e.resource, &e.subresource, e.code)
    }
    let allowed = [
        ("patch", "pods", "", 422),
        ("update", "virtualmachineinstances", "", 409),
    ];
    let mut objects: Vec<(&str, &str)> = failed
        .iter()
        .map(|e| (e.resource.as_str(), e.name.as_str()))
        .collect();
    objects.sort_unstable();
    objects.dedup();
    failed.iter().all(|e| allowed.contains(&kind(e))) && objects.len() == failed.len()
}

/// Every write to the objects of `failed`, from any client, one line each: who wrote what in
/// between is what tells a refusal's cause.
fn history(audit: &[AuditEntry], failed: &[AuditEntry]) -> String {
    let mut lines = vec![format!("{} failed controller writes:", failed.len())];
    for f in failed {
        lines.push(format!(
            "-- {} {} {} ({}):",
            f.verb, f.resource, f.name, f.code
        ));
        let writes = audit
            .iter()
            .filter(|e| e.is_write() && e.resource == f.resource && e.name == f.name);
        lines.extend(writes.map(|e| {
            format!(
                "   #{} {} {} {}{} {} {}",
                e.seq,
                e.time.format("%H:%M:%S%.3f"),
                e.user_agent,
                e.verb,
                if e.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", e.subresource)
                },
                e.code,
                e.path
            )
        }));
    }
    lines.join("\n")
}

/// The most requests in any window of `window` that starts at a request.
fn busiest(times: &[chrono::DateTime<chrono::Utc>], window: Duration) -> usize {
    let window = chrono::Duration::from_std(window).expect("window");
    (0..times.len())
        .map(|i| {
            times[i..]
                .iter()
                .take_while(|t| **t < times[i] + window)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Create `names` (container-disk VMs, Always) and wait until each runs.
async fn start_vms(env: &Env, names: &[&str]) {
    for name in names {
        let mut vm = common::example_vm_with("vm-containerdisk", "Always");
        vm.metadata.name = Some((*name).to_string());
        env.create_vm(&vm).await;
    }
    for name in names {
        env.wait_running(name).await;
    }
}

/// At 5 requests/s with a burst of 5 the controller's requests never exceed 5 + 5/s in any
/// window (one more for the window's edge and the server's clock); raised to 1,000/s in the
/// CR, the next starts go faster than the old limit allows, with no restart.
async fn the_kubevirt_crs_client_limit_holds_and_reloads(server: Server) {
    let config = EnvConfig {
        deadline: Duration::from_secs(120),
        ..EnvConfig::new("client-limit")
    };
    let env = Env::start_on_with(server, config).await;
    let kv_ns = env.manager_kubevirt_namespace();
    let api = env.kubevirts(&kv_ns);
    env.create_kubevirt_cr(bucket(5.0, 5)).await;
    let from = wait_applied(&env, 5.0).await;
    start_vms(&env, &["limited-a", "limited-b", "limited-c"]).await;
    let limited = controller_requests(&env.audit(), from);
    assert!(limited.len() > 30, "{} requests", limited.len());
    for seconds in [1, 2, 5] {
        let most = busiest(&limited, Duration::from_secs(seconds));
        let allowed = 5 + 5 * seconds as usize + 1;
        assert!(
            most <= allowed,
            "{most} requests within {seconds} s at 5/s burst 5 (at most {allowed})"
        );
    }
    let audit = env.audit();
    let failed = failed_controller_writes(&audit, from);
    assert!(expected_failures(&failed), "{}", history(&audit, &failed));

    let patch = json!({"spec": {"configuration": bucket(1000.0, 1000)}});
    api.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("raise the limit");
    let from = wait_applied(&env, 1000.0).await;
    start_vms(&env, &["fast-a", "fast-b", "fast-c", "fast-d"]).await;
    let fast = controller_requests(&env.audit(), from);
    let most = busiest(&fast, Duration::from_secs(2));
    assert!(
        most > 5 + 5 * 2 + 1,
        "{most} requests within 2 s: the raised limit did not take effect"
    );
    env.shutdown().await;
}

on_both_servers!(the_kubevirt_crs_client_limit_holds_and_reloads);

#[test]
fn only_the_two_throttled_refusals_once_an_object_pass() {
    let entry = |verb: &str, resource: &str, name: &str, code: u16| {
        common::objects::audit_entry(0, verb, resource, name, CONTROLLER_AGENT, code)
    };
    let vmi_conflict = entry("update", "virtualmachineinstances", "a", 409);
    let pod_patch = entry("patch", "pods", "virt-launcher-a-x", 422);
    assert!(expected_failures(&[]));
    assert!(expected_failures(&[
        vmi_conflict.clone(),
        pod_patch.clone()
    ]));
    assert!(!expected_failures(&[vmi_conflict.clone(), vmi_conflict]));
    assert!(!expected_failures(&[pod_patch.clone(), pod_patch]));
    assert!(!expected_failures(&[entry(
        "update",
        "virtualmachines",
        "a",
        409
    )]));
    assert!(!expected_failures(&[entry("create", "pods", "b", 422)]));
}
