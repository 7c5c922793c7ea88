//! The VMI controller's TSC topology hints on the running controller (issue 40 item 4):
//! KubeVirt v1.9.0 holds the launcher pod of a VMI that needs a TSC frequency until
//! `status.topologyHints` is written (vmi/lifecycle.go:106-109), writes it in the Pending
//! branch of `updateStatus` (lifecycle.go:326-334, 615-626) from the KubeVirt CR's
//! `minimumClusterTSCFrequency`, else the lowest `cpu-timer.node.kubevirt.io/tsc-frequency`
//! of the nodes that are schedulable or run VMIs (topology/hinter.go:49-67), and the pod then
//! selects `scheduling.node.kubevirt.io/tsc-frequency-<Hz>` (template.go:826-828).
//!
//! - Nodes labelled 2.5 GHz and 2.1 GHz: an `invtsc` VMI gets 2100000000 and its pod selects it.
//! - A minimum of 0 in the CR: the hinter fails, a Warning `FailedGatherhingClusterTopologyHints`
//!   event, no status write, no pod (lifecycle.go:617-619); a valid minimum later releases it.
//! - A controller that may not list nodes (403) does not stall: it decides as KubeVirt's hinter
//!   does with an empty node cache, a zero hint, and the pod without a TSC selector.

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig, Server};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use virtctl_rs::api::VirtualMachineInstance;
use virtctl_rs::sim::nodes::NodeLabel;

const TSC_LABEL: &str = "cpu-timer.node.kubevirt.io/tsc-frequency";
const SCHEDULING_LABEL: &str = "scheduling.node.kubevirt.io/tsc-frequency";
const REASON: &str = "FailedGatherhingClusterTopologyHints";

/// An amd64 VMI that requires `invtsc` (tsc.go:150-163: needs the frequency to boot).
fn invtsc_vmi(name: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"architecture": "amd64", "domain": {
            "cpu": {"features": [{"name": "invtsc", "policy": "require"}]},
            "devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}
    }))
    .expect("VMI")
}

async fn create(env: &Env, name: &str) {
    env.vmis()
        .create(&PostParams::default(), &invtsc_vmi(name))
        .await
        .unwrap_or_else(|e| panic!("create VMI {name}: {e}"));
}

fn hint(vmi: &VirtualMachineInstance) -> Option<Value> {
    vmi.status.as_ref()?.extra.get("topologyHints").cloned()
}

async fn wait_hint(env: &Env, name: &str) -> Value {
    env.wait_for(&format!("status.topologyHints of {name}"), || async {
        hint(&env.vmi(name).await?)
    })
    .await
}

async fn the_pod(env: &Env, name: &str) -> Pod {
    env.wait_for(&format!("the launcher pod of {name}"), || async {
        let uid = env.vmi_uid(name).await?;
        env.launcher_pods(&uid).await.into_iter().next()
    })
    .await
}

fn tsc_selectors(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with(SCHEDULING_LABEL))
        .collect()
}

fn labels(list: &[&str]) -> Vec<NodeLabel> {
    list.iter()
        .map(|l| NodeLabel::parse(l).expect("label"))
        .collect()
}

/// The `FailedGatherhingClusterTopologyHints` events about VMI `name`.
async fn hint_failures(env: &Env, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let fields = format!("involvedObject.name={name},reason={REASON}");
    events
        .list(&ListParams::default().fields(&fields))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

async fn set_minimum(env: &Env, minimum: i64) {
    let cr = env.kubevirts(&env.manager_kubevirt_namespace());
    let patch = json!({"spec": {"configuration":
        {"developerConfiguration": {"minimumClusterTSCFrequency": minimum}}}});
    cr.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the KubeVirt CR");
    env.wait_for(
        "the controller to load minimumClusterTSCFrequency",
        || async {
            let s = env.manager.debug_state()["settings"]["current"].clone();
            (s["minimumClusterTSCFrequency"] == json!(minimum)).then_some(())
        },
    )
    .await;
}

async fn the_lowest_node_frequency_is_hinted_and_a_bad_minimum_holds_the_pod(server: Server) {
    let mut config = EnvConfig::new("ctrl-e2e");
    config.cluster.labels = labels(&[
        &format!("sim-node-0={TSC_LABEL}=2500000000"),
        &format!("sim-node-1={TSC_LABEL}=2100000000"),
        &format!("sim-node-1={SCHEDULING_LABEL}-2100000000=true"),
    ]);
    let env = Env::start_on_with(server, config).await;

    create(&env, "tsc-lowest").await;
    assert_eq!(
        wait_hint(&env, "tsc-lowest").await,
        json!({"tscFrequency": 2_100_000_000_i64})
    );
    let pod = the_pod(&env, "tsc-lowest").await;
    assert_eq!(
        tsc_selectors(&pod),
        vec![(format!("{SCHEDULING_LABEL}-2100000000"), "true".to_string())]
    );

    env.create_kubevirt_cr(json!({"developerConfiguration": {}}))
        .await;
    set_minimum(&env, 0).await;
    create(&env, "tsc-held").await;
    let event = env
        .wait_for("the FailedGatherhingClusterTopologyHints event", || async {
            hint_failures(&env, "tsc-held").await.into_iter().next()
        })
        .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            "failed to determine the lowest tsc frequency on the cluster: the configured minimumClusterTSCFrequency must be greater 0, but got 0"
        )
    );
    let held = env.vmi("tsc-held").await.expect("VMI");
    assert_eq!(hint(&held), None, "no status write while the hinter fails");
    let uid = held.metadata.uid.clone().expect("uid");
    assert!(env.launcher_pods(&uid).await.is_empty(), "the pod is held");

    // A valid minimum: the retry (the sync error requeues with backoff) writes it, then the pod.
    set_minimum(&env, 2_000_000_000).await;
    assert_eq!(
        wait_hint(&env, "tsc-held").await,
        json!({"tscFrequency": 2_000_000_000_i64})
    );
    let pod = the_pod(&env, "tsc-held").await;
    assert_eq!(
        tsc_selectors(&pod),
        vec![(format!("{SCHEDULING_LABEL}-2000000000"), "true".to_string())]
    );
    env.shutdown().await;
}

on_both_servers!(the_lowest_node_frequency_is_hinted_and_a_bad_minimum_holds_the_pod);

/// RBAC that forbids listing nodes (the embedded server answers 403 to the controller's node
/// list): the manager still leads with synced caches, and the hinter decides without nodes, as
/// KubeVirt's does with a node cache that never synced: hint 0, pod without a TSC selector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_that_may_not_list_nodes_hints_without_them() {
    use virtctl_rs::sim::faults::FaultRule;
    let mut config = EnvConfig::new("ctrl-e2e");
    config.cluster.labels = labels(&[&format!("{TSC_LABEL}=2100000000")]);
    let env = Env::start_with(config, |cluster| {
        cluster.api().faults().add(
            FaultRule::error(403)
                .resource("nodes")
                .user_agent(CONTROLLER_AGENT),
        );
    })
    .await;
    create(&env, "tsc-no-nodes").await;
    assert_eq!(
        wait_hint(&env, "tsc-no-nodes").await,
        json!({"tscFrequency": 0})
    );
    let pod = the_pod(&env, "tsc-no-nodes").await;
    assert!(tsc_selectors(&pod).is_empty(), "{:?}", tsc_selectors(&pod));
    // One refused list, no watch retried against the refusal.
    let node_requests: Vec<_> = env
        .audit()
        .into_iter()
        .filter(|e| e.resource == "nodes" && e.user_agent.starts_with(CONTROLLER_AGENT))
        .map(|e| (e.verb, e.code))
        .collect();
    assert_eq!(node_requests, vec![("list".to_string(), 403)]);
    assert_eq!(env.manager.debug_state()["caches"]["nodes"], json!(0));
    env.shutdown().await;
}
