//! Simulated nodes against the real embedded API server: scheduling, kubelet, virt-handler and
//! fault injection. Every wait is a poll with a generous deadline.

use crate::common;

use common::wait_for;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::faults::{FaultRule, Verb};
use virtctl_rs::sim::nodes::{Matcher, NodeCapacity};

const GATE: &str = "kubevirt.io/virtual-machine-unpaused";
const DEADLINE: Duration = Duration::from_secs(30);

async fn start() -> EmbeddedCluster {
    start_with(2, NodeCapacity::default()).await
}

async fn start_with(nodes: usize, capacity: NodeCapacity) -> EmbeddedCluster {
    // The nodes alone, with no virt-controller: without admission, whose VMI finalizer only
    // virt-controller removes.
    EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes,
        kubelet_delay: Duration::from_millis(50),
        grace_scale: 0.01,
        capacity,
        labels: Vec::new(),
        api: virtctl_rs::sim::ApiServerConfig {
            admission: false,
            ..Default::default()
        },
    })
    .await
    .expect("embedded cluster starts")
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod_manifest(name: &str, extra_spec: Value) -> Pod {
    let mut spec = json!({
        "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        "nodeSelector": {"kubevirt.io/schedulable": "true"},
        "restartPolicy": "Never",
    });
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }))
    .expect("valid pod")
}

async fn get_pod(pods: &Api<Pod>, name: &str) -> Option<Pod> {
    pods.get_opt(name).await.expect("get pod")
}

/// Patch a pod status condition the way virt-controller's readiness-gate sync does (read,
/// modify, PUT to `status`).
async fn set_pod_condition(pods: &Api<Pod>, name: &str, type_: &str, status: &str) {
    for _ in 0..10 {
        let mut pod = pods.get(name).await.expect("get pod");
        let st = pod.status.get_or_insert_with(PodStatus::default);
        let conds = st.conditions.get_or_insert_with(Vec::new);
        conds.retain(|c| c.type_ != type_);
        conds.push(PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some("NotPaused".into()),
            message: Some("the virtual machine is not paused".into()),
            ..Default::default()
        });
        match pods
            .replace_status(name, &PostParams::default(), &pod)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("update pod status: {e}"),
        }
    }
    panic!("could not update pod {name} status: conflicts");
}

#[tokio::test]
async fn nodes_are_registered_with_kubevirt_labels_and_capacity() {
    let cluster = start().await;
    let client = cluster.client().await.expect("client");
    let nodes: Api<Node> = Api::all(client);
    let list = nodes.list(&Default::default()).await.expect("list nodes");
    let mut names: Vec<String> = list.items.iter().map(|n| n.name_any()).collect();
    names.sort();
    assert_eq!(names, ["sim-node-0", "sim-node-1"]);
    assert_eq!(cluster.nodes().node_names(), names);
    for node in &list.items {
        let labels = node.labels();
        assert_eq!(
            labels.get("kubevirt.io/schedulable").map(String::as_str),
            Some("true")
        );
        assert_eq!(
            labels.get("kubernetes.io/arch").map(String::as_str),
            Some("amd64")
        );
        assert_eq!(
            labels.get("kubernetes.io/os").map(String::as_str),
            Some("linux")
        );
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(&node.name_any()));
        let status = node.status.clone().unwrap_or_default();
        let alloc = status.allocatable.unwrap_or_default();
        for r in [
            "cpu",
            "memory",
            "pods",
            "devices.kubevirt.io/kvm",
            "devices.kubevirt.io/tun",
            "devices.kubevirt.io/vhost-net",
        ] {
            assert!(alloc.contains_key(r), "{} allocatable {r}", node.name_any());
        }
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready condition");
        assert_eq!(ready.status, "True");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn pod_is_scheduled_runs_and_is_ready_only_after_its_readiness_gate() {
    let cluster = start().await;
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod = pod_manifest(
        "gated",
        json!({"readinessGates": [{"conditionType": GATE}]}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    let running = wait_for("pod Running with containers ready", || async {
        let p = get_pod(&pods, "gated").await?;
        let ready = condition(&p, "ContainersReady").is_some_and(|c| c.status == "True");
        (phase(&p) == "Running" && ready).then_some(p)
    })
    .await;
    let node = running
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    assert!(node.starts_with("sim-node-"), "bound to {node:?}");
    assert_eq!(
        condition(&running, "PodScheduled").map(|c| c.status.as_str()),
        Some("True")
    );
    let st = running.status.clone().unwrap_or_default();
    assert!(st.pod_ip.is_some() && st.host_ip.is_some() && st.start_time.is_some());
    assert_eq!(st.qos_class.as_deref(), Some("Burstable"));
    let cs = st.container_statuses.unwrap_or_default();
    assert!(
        cs.iter()
            .all(|c| c.ready && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some())
    );
    let ready = condition(&running, "Ready").expect("Ready condition");
    assert_eq!(ready.status, "False", "gate not yet set: {ready:?}");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));

    set_pod_condition(&pods, "gated", GATE, "True").await;
    wait_for("pod Ready after the gate", || async {
        let p = get_pod(&pods, "gated").await?;
        condition(&p, "Ready")
            .is_some_and(|c| c.status == "True")
            .then_some(())
    })
    .await;

    // And back: the gate going False makes the pod unready again.
    set_pod_condition(&pods, "gated", GATE, "False").await;
    wait_for("pod unready after the gate flips", || async {
        let p = get_pod(&pods, "gated").await?;
        condition(&p, "Ready")
            .is_some_and(|c| c.status == "False")
            .then_some(())
    })
    .await;

    // A settled pod is not rewritten: while another pod goes through its whole start, the
    // simulator writes nothing more to this one.
    let writes_to = |name: &str| {
        cluster
            .api()
            .audit()
            .writes()
            .iter()
            .filter(|e| e.name == name && e.user_agent.starts_with("sim-"))
            .count()
    };
    let before = writes_to("gated");
    pods.create(&PostParams::default(), &pod_manifest("later", json!({})))
        .await
        .expect("create pod");
    wait_for("second pod Ready", || async {
        let p = get_pod(&pods, "later").await?;
        condition(&p, "Ready")
            .is_some_and(|c| c.status == "True")
            .then_some(())
    })
    .await;
    assert_eq!(writes_to("gated"), before, "no churn on a settled pod");
    // Binding (it sets PodScheduled), Running: at most three writes.
    let ok_writes = cluster
        .api()
        .audit()
        .writes()
        .iter()
        .filter(|e| e.name == "later" && e.user_agent.starts_with("sim-") && e.code < 300)
        .count();
    assert!(ok_writes <= 3, "{ok_writes} writes to a simple pod");
    cluster.shutdown().await;
}

#[tokio::test]
async fn pod_that_fits_no_node_is_unschedulable() {
    let cluster = start().await;
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod = pod_manifest(
        "nowhere",
        json!({"nodeSelector": {"kubernetes.io/arch": "s390x"}}),
    );
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let cond = wait_for("PodScheduled=False", || async {
        let p = get_pod(&pods, "nowhere").await?;
        condition(&p, "PodScheduled")
            .filter(|c| c.status == "False")
            .cloned()
    })
    .await;
    assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
    let message = cond.message.unwrap_or_default();
    assert!(
        message.starts_with(
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        ),
        "{message}"
    );
    let p = get_pod(&pods, "nowhere").await.expect("pod exists");
    assert_eq!(phase(&p), "Pending");
    assert!(p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none());
    // Another scheduler's pod is left alone entirely.
    let other = pod_manifest("other-scheduler", json!({"schedulerName": "my-scheduler"}));
    pods.create(&PostParams::default(), &other)
        .await
        .expect("create pod");
    let fits = pod_manifest("fits", json!({}));
    pods.create(&PostParams::default(), &fits)
        .await
        .expect("create pod");
    wait_for("the fitting pod runs", || async {
        let p = get_pod(&pods, "fits").await?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    let p = get_pod(&pods, "other-scheduler").await.expect("pod exists");
    assert!(p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none());
    assert!(condition(&p, "PodScheduled").is_none());
    cluster.shutdown().await;
}

#[tokio::test]
async fn terminating_pod_is_terminated_then_deleted_after_its_scaled_grace() {
    let cluster = start().await;
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // 100 s × 0.01 = 1 s.
    let pod = pod_manifest("graceful", json!({"terminationGracePeriodSeconds": 100}));
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    wait_for("pod Running", || async {
        let p = get_pod(&pods, "graceful").await?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    let uid = get_pod(&pods, "graceful")
        .await
        .and_then(|p| p.uid())
        .expect("uid");
    let cfg = watcher::Config::default().fields("metadata.name=graceful");
    let mut events = watcher(pods.clone(), cfg).boxed();
    pods.delete("graceful", &DeleteParams::default())
        .await
        .expect("delete pod");
    let mut last_seen: Option<Pod> = None;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let ev = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("pod deleted before the deadline")
            .expect("watch stream open")
            .expect("watch event");
        match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p)
                if p.uid().as_deref() == Some(&uid) =>
            {
                last_seen = Some(p)
            }
            watcher::Event::Delete(p) if p.uid().as_deref() == Some(&uid) => break,
            watcher::Event::InitDone if get_pod(&pods, "graceful").await.is_none() => break,
            _ => {}
        }
    }
    let last = last_seen.expect("saw the pod");
    assert!(last.metadata.deletion_timestamp.is_some());
    let st = last.status.clone().unwrap_or_default();
    let cs = st.container_statuses.unwrap_or_default();
    assert!(
        cs.iter().all(|c| c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some()),
        "containers terminated before deletion: {cs:?}"
    );
    assert_eq!(st.phase.as_deref(), Some("Succeeded"));
    cluster.shutdown().await;
}

/// Wait until the pod `name` is Running; returns it.
async fn wait_running(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(&format!("pod {name} Running"), || async {
        let p = get_pod(pods, name).await?;
        (phase(&p) == "Running").then_some(p)
    })
    .await
}

/// Writes to the pod `name` (any agent, in log order): (user agent, subresource).
fn pod_writes(cluster: &EmbeddedCluster, name: &str) -> Vec<(String, String)> {
    cluster
        .api()
        .audit()
        .writes()
        .iter()
        .filter(|e| e.resource == "pods" && e.name == name && e.code < 300)
        .map(|e| (e.user_agent.clone(), e.subresource.clone()))
        .collect()
}

/// The node loop decides only for what changed (src/sim/nodes/work.rs); a pod left pending for
/// want of capacity must still be placed as soon as another pod's end frees it, although
/// nothing happens to the pending pod itself.
#[tokio::test]
async fn pending_pod_is_scheduled_once_another_pod_frees_capacity() {
    let mut capacity = NodeCapacity::default();
    capacity.resources.insert("pods".into(), "1".into());
    let cluster = start_with(1, capacity).await;
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod_manifest("first", json!({})))
        .await
        .expect("create pod");
    wait_running(&pods, "first").await;
    pods.create(&PostParams::default(), &pod_manifest("second", json!({})))
        .await
        .expect("create pod");
    let cond = wait_for("second pod unschedulable", || async {
        let p = get_pod(&pods, "second").await?;
        condition(&p, "PodScheduled")
            .filter(|c| c.status == "False")
            .cloned()
    })
    .await;
    let message = cond.message.unwrap_or_default();
    assert!(
        message.starts_with("0/1 nodes are available: 1 Too many pods."),
        "{message}"
    );
    let writes_while_pending = pod_writes(&cluster, "second");
    // Its 30 s grace period × 0.01: the first pod ends and is deleted after 0.3 s.
    pods.delete("first", &DeleteParams::default())
        .await
        .expect("delete pod");
    let bound = wait_running(&pods, "second").await;
    assert_eq!(
        bound.spec.and_then(|s| s.node_name).as_deref(),
        Some("sim-node-0")
    );
    // Nothing but the simulator touched the pending pod: its placement came from the first
    // pod's end alone.
    let writes = pod_writes(&cluster, "second");
    assert!(
        writes[writes_while_pending.len()..]
            .iter()
            .all(|(agent, _)| agent.starts_with("sim-")),
        "{writes:?}"
    );
    assert!(
        writes[writes_while_pending.len()..]
            .iter()
            .any(|(agent, sub)| agent == "sim-scheduler" && sub == "binding"),
        "{writes:?}"
    );
    cluster.shutdown().await;
}

/// A timer alone moves a bound pod to Running: once it is bound and `PodScheduled`, nothing
/// changes until its kubelet delay has passed, so the node loop must come back to it by
/// itself.
#[tokio::test]
async fn bound_pod_runs_when_its_kubelet_delay_is_over_with_no_event() {
    let cluster = start().await;
    cluster
        .nodes()
        .set_kubelet_delay(Duration::from_millis(500));
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod_manifest("delayed", json!({})))
        .await
        .expect("create pod");
    wait_running(&pods, "delayed").await;
    // Created, bound (the binding sets PodScheduled, as kube-apiserver's), Running: the last
    // write before Running was the scheduler's own, so the kubelet acted on its timer.
    let writes = pod_writes(&cluster, "delayed");
    let agents: Vec<&str> = writes.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(
        agents.get(1..3),
        Some(&["sim-scheduler", "sim-kubelet"][..]),
        "{writes:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn stuck_image_pull_keeps_the_pod_pending_until_cleared() {
    let cluster = start().await;
    cluster
        .nodes()
        .stick_image_pull(Matcher::name_prefix("stuck-"));
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    // Every state of the pod, from a watch: `ErrImagePull` lasts one kubelet delay (50 ms), too
    // short for polling on a loaded machine.
    let mut states = watcher(
        pods.clone(),
        watcher::Config::default().fields("metadata.name=stuck-1"),
    )
    .boxed();
    pods.create(&PostParams::default(), &pod_manifest("stuck-1", json!({})))
        .await
        .expect("create pod");
    let waiting_reason = |p: &Pod| {
        p.status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .iter()
            .find(|c| c.name == "compute")?
            .state
            .as_ref()?
            .waiting
            .as_ref()
            .map(|w| {
                (
                    w.reason.clone().unwrap_or_default(),
                    w.message.clone().unwrap_or_default(),
                )
            })
    };
    let mut next_waiting = async |reason: &str| loop {
        let event = tokio::time::timeout(Duration::from_secs(60), states.next())
            .await
            .unwrap_or_else(|_| panic!("timed out after 60s waiting for {reason}"))
            .expect("watch open")
            .expect("watch event");
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = event
            && let Some((r, message)) = waiting_reason(&p)
            && r == reason
        {
            return message;
        }
    };
    let message = next_waiting("ErrImagePull").await;
    assert!(
        message.contains("quay.io/kubevirt/virt-launcher:v1.9.0"),
        "{message}"
    );
    let message = next_waiting("ImagePullBackOff").await;
    assert_eq!(
        message,
        "Back-off pulling image \"quay.io/kubevirt/virt-launcher:v1.9.0\""
    );
    let p = get_pod(&pods, "stuck-1").await.expect("pod");
    assert_eq!(phase(&p), "Pending");
    cluster.nodes().clear_image_pull_faults();
    wait_for("pod Running once images pull", || async {
        let p = get_pod(&pods, "stuck-1").await?;
        (phase(&p) == "Running").then_some(())
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn failed_pod_and_removed_node() {
    let cluster = start().await;
    let client = cluster.client().await.expect("client");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let on_node1 = json!({"nodeSelector": {"kubernetes.io/hostname": "sim-node-1"}});
    pods.create(
        &PostParams::default(),
        &pod_manifest("doomed", on_node1.clone()),
    )
    .await
    .expect("create pod");
    pods.create(&PostParams::default(), &pod_manifest("orphan", on_node1))
        .await
        .expect("create pod");
    for name in ["doomed", "orphan"] {
        wait_for("pod Running on sim-node-1", || async {
            let p = get_pod(&pods, name).await?;
            (phase(&p) == "Running").then_some(())
        })
        .await;
    }

    cluster
        .nodes()
        .fail_pod("default", "doomed")
        .await
        .expect("fail pod");
    let p = get_pod(&pods, "doomed").await.expect("pod");
    assert_eq!(phase(&p), "Failed");
    let compute = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "compute"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .expect("compute terminated");
    assert_eq!(compute.exit_code, 1);
    assert!(
        cluster.nodes().fail_pod("default", "doomed").await.is_err(),
        "already failed"
    );

    cluster
        .nodes()
        .remove_node("sim-node-1")
        .await
        .expect("remove node");
    assert_eq!(cluster.nodes().node_names(), ["sim-node-0"]);
    let nodes: Api<Node> = Api::all(client);
    wait_for("Node object gone", || async {
        nodes
            .get_opt("sim-node-1")
            .await
            .expect("get node")
            .is_none()
            .then_some(())
    })
    .await;
    wait_for("pods of the removed node deleted", || async {
        let a = get_pod(&pods, "orphan").await;
        let b = get_pod(&pods, "doomed").await;
        (a.is_none() && b.is_none()).then_some(())
    })
    .await;
    // New pods only go to the remaining node.
    pods.create(&PostParams::default(), &pod_manifest("after", json!({})))
        .await
        .expect("create pod");
    let p = wait_for("new pod bound", || async {
        let p = get_pod(&pods, "after").await?;
        p.spec.as_ref()?.node_name.clone()
    })
    .await;
    assert_eq!(p, "sim-node-0");
    cluster.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// VirtualMachineInstances: the test plays virt-controller (launcher pod, Scheduled phase).

fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

struct VmiFixture {
    vmis: Api<DynamicObject>,
    pods: Api<Pod>,
}

impl VmiFixture {
    fn new(client: Client) -> Self {
        VmiFixture {
            vmis: Api::namespaced_with(client.clone(), "default", &vmi_resource()),
            pods: Api::namespaced(client, "default"),
        }
    }

    async fn vmi(&self, name: &str) -> Value {
        let obj = self.vmis.get(name).await.expect("get vmi");
        serde_json::to_value(obj).expect("vmi json")
    }

    /// Write the VMI status like virt-controller (status subresource if served, else PUT).
    async fn update_vmi_status(&self, name: &str, f: impl Fn(&mut Value)) {
        for _ in 0..10 {
            let mut v = self.vmi(name).await;
            f(&mut v);
            let obj: DynamicObject = serde_json::from_value(v).expect("vmi object");
            let res = match self
                .vmis
                .replace_status(name, &PostParams::default(), &obj)
                .await
            {
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => {
                    self.vmis.replace(name, &PostParams::default(), &obj).await
                }
                other => other,
            };
            match res {
                Ok(_) => return,
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => panic!("update vmi status: {e}"),
            }
        }
        panic!("could not update vmi {name}: conflicts");
    }

    /// Create a VMI and its launcher pod, wait for the pod to run, then mark the VMI
    /// Scheduled on the pod's node. Returns the pod name.
    async fn scheduled_vmi(&self, name: &str, finalizer: bool) -> String {
        let (pod_name, node) = self.running_launcher(name, finalizer).await;
        self.mark_scheduled(name, &node).await;
        pod_name
    }

    /// Create a VMI and its launcher pod and wait for the pod to run. Returns the pod's name
    /// and node.
    async fn running_launcher(&self, name: &str, finalizer: bool) -> (String, String) {
        let mut vmi = json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]},
                           "resources": {"requests": {"memory": "64Mi"}}},
                "networks": [{"name": "default", "pod": {}}]
            }
        });
        if finalizer {
            vmi["metadata"]["finalizers"] = json!(["kubevirt.io/virtualMachineControllerFinalize"]);
        }
        let obj: DynamicObject = serde_json::from_value(vmi).expect("vmi object");
        let created = self
            .vmis
            .create(&PostParams::default(), &obj)
            .await
            .expect("create vmi");
        let uid = created.uid().expect("vmi uid");
        let pod_name = format!("virt-launcher-{name}-abcde");
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": "default",
                "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": uid},
                "annotations": {"kubevirt.io/domain": name},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                     "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}]
            },
            "spec": {
                "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}],
                "nodeSelector": {"kubevirt.io/schedulable": "true"},
                "readinessGates": [{"conditionType": GATE}],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 60
            }
        }))
        .expect("pod");
        self.pods
            .create(&PostParams::default(), &pod)
            .await
            .expect("create launcher pod");
        let node = wait_for("launcher pod Running", || async {
            let p = get_pod(&self.pods, &pod_name).await?;
            if phase(&p) != "Running" {
                return None;
            }
            p.spec.as_ref()?.node_name.clone()
        })
        .await;
        (pod_name, node)
    }

    /// Mark the VMI Scheduled on `node`, as virt-controller does once its launcher runs.
    async fn mark_scheduled(&self, name: &str, node: &str) {
        self.update_vmi_status(name, |v| {
            v["status"] = json!({
                "phase": "Scheduled",
                "nodeName": node,
                "phaseTransitionTimestamps": [
                    {"phase": "Pending", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"},
                    {"phase": "Scheduling", "phaseTransitionTimestamp": "2026-01-01T00:00:01Z"},
                    {"phase": "Scheduled", "phaseTransitionTimestamp": "2026-01-01T00:00:02Z"}
                ]
            });
        })
        .await;
    }

    async fn wait_phase(&self, name: &str, want: &str) -> Value {
        wait_for(&format!("VMI {name} {want}"), || async {
            let v = self.vmi(name).await;
            (v.pointer("/status/phase").and_then(Value::as_str) == Some(want)).then_some(v)
        })
        .await
    }
}

fn transitions(v: &Value, phase: &str) -> usize {
    v.pointer("/status/phaseTransitionTimestamps")
        .and_then(Value::as_array)
        .map_or(0, |a| a.iter().filter(|e| e["phase"] == phase).count())
}

#[tokio::test]
async fn scheduled_vmi_goes_running_then_guest_shutdown_and_crash() {
    let cluster = start().await;
    let fx = VmiFixture::new(cluster.client().await.expect("client"));
    let pod_a = fx.scheduled_vmi("vm-a", false).await;
    let running = fx.wait_phase("vm-a", "Running").await;
    assert_eq!(transitions(&running, "Running"), 1);
    let ts = running
        .pointer("/status/phaseTransitionTimestamps")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|e| e["phase"] == "Running"))
        .and_then(|e| e["phaseTransitionTimestamp"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        chrono::DateTime::parse_from_rfc3339(&ts).is_ok(),
        "RFC 3339 timestamp {ts:?}"
    );
    assert!(!ts.contains('.'), "second precision: {ts}");
    let pod = get_pod(&fx.pods, &pod_a).await.expect("launcher");
    let pod_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("pod ip");
    assert_eq!(
        running.pointer("/status/interfaces/0/ipAddress"),
        Some(&json!(pod_ip))
    );

    // Every component wrote with its own user agent, through the right endpoints.
    let audit = cluster.api().audit();
    let wrote = |agent: &str, resource: &str, sub: &str| {
        audit
            .by_user_agent(agent)
            .iter()
            .any(|e| e.is_write() && e.code < 300 && e.resource == resource && e.subresource == sub)
    };
    assert!(
        wrote("sim-scheduler", "pods", "binding"),
        "scheduler binds through pods/binding"
    );
    assert!(
        wrote("sim-kubelet", "pods", "status"),
        "kubelet writes pods/status"
    );
    assert!(wrote("sim-kubelet", "nodes", ""), "kubelet registers nodes");
    assert!(
        wrote("sim-virt-handler", "virtualmachineinstances", "status")
            || wrote("sim-virt-handler", "virtualmachineinstances", ""),
        "virt-handler writes the VMI"
    );
    assert!(!wrote("sim-kubelet", "pods", "binding"));

    // Guest shutdown: VMI Succeeded, launcher pod Succeeded.
    cluster
        .nodes()
        .shutdown_guest("default", "vm-a")
        .await
        .expect("shutdown guest");
    let done = fx.wait_phase("vm-a", "Succeeded").await;
    assert_eq!(transitions(&done, "Succeeded"), 1);
    assert_eq!(transitions(&done, "Running"), 1);
    let pod = get_pod(&fx.pods, &pod_a).await.expect("launcher");
    assert_eq!(phase(&pod), "Succeeded");
    assert!(
        cluster
            .nodes()
            .shutdown_guest("default", "vm-a")
            .await
            .is_err(),
        "not running any more"
    );

    // Crash: VMI Failed, launcher pod Failed.
    let pod_b = fx.scheduled_vmi("vm-b", false).await;
    fx.wait_phase("vm-b", "Running").await;
    cluster
        .nodes()
        .crash_guest("default", "vm-b")
        .await
        .expect("crash guest");
    let failed = fx.wait_phase("vm-b", "Failed").await;
    assert_eq!(transitions(&failed, "Failed"), 1);
    let pod = get_pod(&fx.pods, &pod_b).await.expect("launcher");
    assert_eq!(phase(&pod), "Failed");
    cluster.shutdown().await;
}

#[tokio::test]
async fn vmis_can_be_made_to_fail_before_running() {
    let cluster = start().await;
    cluster
        .nodes()
        .fail_vmis_before_running(Matcher::vmi("flaky"), 2);
    let fx = VmiFixture::new(cluster.client().await.expect("client"));
    for round in 0..2 {
        let pod = fx.scheduled_vmi("flaky", false).await;
        let failed = fx.wait_phase("flaky", "Failed").await;
        assert_eq!(transitions(&failed, "Running"), 0, "round {round}");
        wait_for("launcher pod Failed", || async {
            let p = get_pod(&fx.pods, &pod).await?;
            (phase(&p) == "Failed").then_some(())
        })
        .await;
        // Clean up for the next round (virt-controller would delete the VMI and its pod).
        fx.pods
            .delete(&pod, &DeleteParams::default().grace_period(0))
            .await
            .expect("delete pod");
        fx.vmis
            .delete("flaky", &DeleteParams::default())
            .await
            .expect("delete vmi");
        wait_for("VMI and pod gone", || async {
            let v = fx.vmis.get_opt("flaky").await.expect("get vmi");
            let p = get_pod(&fx.pods, &pod).await;
            (v.is_none() && p.is_none()).then_some(())
        })
        .await;
    }
    // Budget used up: the third one runs.
    fx.scheduled_vmi("flaky", false).await;
    fx.wait_phase("flaky", "Running").await;
    cluster.shutdown().await;
}

/// The launcher of a VMI that fails before running exits; the kubelet reports that even when
/// its first status writes answer 409 Conflict: the status manager re-reads the pod and writes
/// again (pkg/kubelet/status/status_manager.go, syncPod), it does not forget the exit.
#[tokio::test]
async fn launcher_exit_is_reported_through_status_conflicts() {
    let cluster = start().await;
    let fx = VmiFixture::new(cluster.client().await.expect("client"));
    let (pod, node) = fx.running_launcher("flaky", false).await;
    let conflicts = 2;
    cluster.api().faults().add(
        FaultRule::conflict()
            .verbs(&[Verb::Update])
            .resource("pods")
            .user_agent("sim-kubelet")
            .times(conflicts),
    );
    cluster
        .nodes()
        .fail_vmis_before_running(Matcher::vmi("flaky"), 1);
    fx.mark_scheduled("flaky", &node).await;
    let failed = fx.wait_phase("flaky", "Failed").await;
    assert_eq!(transitions(&failed, "Running"), 0);
    wait_for("launcher pod Failed", || async {
        let p = get_pod(&fx.pods, &pod).await?;
        (phase(&p) == "Failed").then_some(())
    })
    .await;
    let refused = cluster
        .api()
        .audit()
        .writes()
        .iter()
        .filter(|e| e.resource == "pods" && e.name == pod && e.code == 409)
        .count();
    assert_eq!(
        refused, conflicts as usize,
        "the kubelet's writes met the conflicts"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn deleted_vmi_is_shut_down_to_succeeded() {
    let cluster = start().await;
    let fx = VmiFixture::new(cluster.client().await.expect("client"));
    fx.scheduled_vmi("vm-del", true).await;
    fx.wait_phase("vm-del", "Running").await;
    fx.vmis
        .delete("vm-del", &DeleteParams::default())
        .await
        .expect("delete vmi");
    let done = fx.wait_phase("vm-del", "Succeeded").await;
    assert!(done.pointer("/metadata/deletionTimestamp").is_some());
    assert_eq!(transitions(&done, "Succeeded"), 1);
    // Release the finalizer so the object goes away.
    let mut obj: DynamicObject = serde_json::from_value(done).expect("vmi");
    obj.metadata.finalizers = None;
    fx.vmis
        .replace("vm-del", &PostParams::default(), &obj)
        .await
        .expect("drop finalizer");
    cluster.shutdown().await;
}

#[tokio::test]
async fn virt_handler_delay_holds_a_scheduled_vmi_before_running() {
    let cluster = start().await;
    let delay = Duration::from_millis(1500);
    cluster.nodes().set_virt_handler_delay(delay);
    let fx = VmiFixture::new(cluster.client().await.expect("client"));
    fx.scheduled_vmi("slow-start", false).await;
    // The simulator sees the Scheduled VMI about when the status write returns, and starts the
    // domain no earlier than `delay` after seeing it. Without the delay it is Running within
    // milliseconds; half the delay leaves room for the watch beating the write's response.
    let scheduled_at = std::time::Instant::now();
    fx.wait_phase("slow-start", "Running").await;
    assert!(
        scheduled_at.elapsed() >= delay / 2,
        "Running after {:?}, before the {delay:?} virt-handler delay",
        scheduled_at.elapsed()
    );
    // Back to zero: the next VMI starts as soon as its launcher runs.
    cluster.nodes().set_virt_handler_delay(Duration::ZERO);
    fx.scheduled_vmi("fast-start", false).await;
    fx.wait_phase("fast-start", "Running").await;
    cluster.shutdown().await;
}
