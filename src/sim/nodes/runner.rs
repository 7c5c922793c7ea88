//! The node simulator's event loop and its control handle.
//!
//! One task watches Pods, Nodes and VirtualMachineInstances (kube-runtime `watcher`, list +
//! watch with back-off), keeps its own cache of them, and after every batch of events runs a
//! level-triggered pass: PodGC for removed nodes → virt-handler → scheduler → kubelet. A pass
//! decides only for the objects that changed since the last one, those whose timer is due, and
//! the pending pods when capacity changed (module `work`); a handle call makes it decide for
//! everything. Each step asks a pure decision function what to write and writes it with that
//! component's client. Write responses go straight into the cache (newest `resourceVersion`
//! wins) and mark the object for the next pass; failed writes are retried after a delay.

use super::faults::{FaultState, Matcher};
use super::kubelet::{self, KubeletAction, KubeletInputs, find_condition, set_condition};
use super::node::{NodeCapacity, NodeLabel, build_node, node_internal_ip, pod_ip};
use super::scheduler::{self, ScheduleDecision};
use super::virt_handler::{self, VmiDecision, vmi_node};
use super::work::{PodIndex, WorkSet};
use super::{
    AGENT_KUBELET, AGENT_NODE_LIFECYCLE, AGENT_SCHEDULER, AGENT_VIRT_HANDLER, NodeSimConfig,
    NodeSimError,
};
use axum::http::{HeaderValue, header::USER_AGENT};
use futures::{FutureExt, StreamExt, stream::BoxStream};
use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams,
    Preconditions,
};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How soon to retry after a failed write.
const RETRY_AFTER: Duration = Duration::from_millis(250);
/// At most this many pods and VMIs are decided for (and pods bound) per pass; the rest wait
/// for the next. Every write of a pass is awaited in turn and the watches are read only between
/// passes, so an unbounded pass over tens of thousands of objects left the watches minutes
/// behind: far enough, at 100,000 VMs, to fall out of the server's window and relist.
const PASS_BUDGET: usize = 512;

/// VMI status write mode: not yet known / `status` subresource / whole object.
const VMI_STATUS_UNKNOWN: u8 = 0;
const VMI_STATUS_SUBRESOURCE: u8 = 1;
const VMI_STATUS_MAIN: u8 = 2;

#[derive(Clone)]
struct Clients {
    scheduler: Client,
    kubelet: Client,
    virt_handler: Client,
    lifecycle: Client,
}

fn client_with_agent(config: &kube::Config, agent: &'static str) -> Result<Client, NodeSimError> {
    let mut config = config.clone();
    config.headers.retain(|(name, _)| name != USER_AGENT);
    config
        .headers
        .push((USER_AGENT, HeaderValue::from_static(agent)));
    Client::try_from(config).map_err(|source| NodeSimError::Api {
        what: format!("building the {agent} client"),
        source,
    })
}

#[derive(Debug, Clone)]
struct SimState {
    kubelet_delay: Duration,
    /// Time from a VMI being Scheduled with a running launcher to virt-handler reporting it
    /// Running (the domain start); zero by default.
    virt_handler_delay: Duration,
    grace_scale: f64,
    capacity: NodeCapacity,
    /// Labels added to the nodes ([`super::NodeSimConfig::labels`]).
    labels: Vec<NodeLabel>,
    /// [`super::NodeSimConfig::bind_claims`].
    bind_claims: bool,
    /// Managed node name → index.
    managed: BTreeMap<String, usize>,
    /// Nodes removed through the handle (their pods are garbage-collected).
    removed: BTreeSet<String>,
    next_index: usize,
    faults: FaultState,
}

struct Inner {
    clients: Clients,
    state: Mutex<SimState>,
    wake: tokio::sync::Notify,
    vmi_resource: ApiResource,
    vmi_status_mode: AtomicU8,
}

impl Inner {
    fn state(&self) -> MutexGuard<'_, SimState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn vmi_api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

fn now_time() -> Time {
    let secs = chrono::Utc::now().timestamp();
    Time(
        k8s_openapi::jiff::Timestamp::from_second(secs)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> NodeSimError {
    let what = what.into();
    move |source| NodeSimError::Api { what, source }
}

/// Reads `name` through `api` (`key` is its `namespace/name`, for errors):
/// [`NodeSimError::NotFound`] when it does not exist, [`NodeSimError::Api`] when the read fails.
async fn get_existing<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    key: &str,
) -> Result<K, NodeSimError>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name)
        .await
        .map_err(api_err(format!("reading {kind} {key}")))?
        .ok_or_else(|| NodeSimError::NotFound {
            kind,
            key: key.to_string(),
        })
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

use crate::api::key::key_of;

fn rv_number<K: ResourceExt>(obj: &K) -> Option<u64> {
    obj.resource_version()?.parse().ok()
}

/// Cache of one kind, fed by a watcher and by write responses; every object goes through
/// `trim` on its way in (pods: [`super::cached_pod::for_node_cache`]).
struct Cache<K> {
    items: BTreeMap<String, K>,
    init: Option<BTreeMap<String, K>>,
    trim: fn(K) -> K,
}

/// What applying a watch event did to a [`Cache`].
enum Applied<K> {
    /// Nothing the loop has to look at (an old or already-cached version, a relist under way).
    Unchanged,
    /// The object at `key` was inserted, replaced or removed; `old` is the copy it replaced.
    Changed { key: String, old: Option<K> },
    /// A relist replaced the whole cache.
    Relisted,
}

impl<K: ResourceExt + Clone> Cache<K> {
    fn new() -> Self {
        Self::trimmed(|k| k)
    }

    fn trimmed(trim: fn(K) -> K) -> Self {
        Cache {
            items: BTreeMap::new(),
            init: None,
            trim,
        }
    }

    /// Insert unless the cached copy of the same object is newer or the same version. Returns
    /// the copy replaced (`Some(None)` for a new key), `None` when nothing changed.
    fn upsert(&mut self, obj: K) -> Option<Option<K>> {
        let obj = (self.trim)(obj);
        let key = key_of(&obj);
        if let Some(old) = self.items.get(&key)
            && old.uid() == obj.uid()
            && let (Some(a), Some(b)) = (rv_number(old), rv_number(&obj))
            && a >= b
        {
            return None;
        }
        Some(self.items.insert(key, obj))
    }

    /// Remove the cached copy of `obj` (same UID); returns it.
    fn remove(&mut self, obj: &K) -> Option<K> {
        let key = key_of(obj);
        if self
            .items
            .get(&key)
            .is_some_and(|old| old.uid() == obj.uid())
        {
            return self.items.remove(&key);
        }
        None
    }

    fn apply(&mut self, event: watcher::Event<K>) -> Applied<K> {
        let changed = |key: String, old: Option<Option<K>>| match old {
            Some(old) => Applied::Changed { key, old },
            None => Applied::Unchanged,
        };
        match event {
            watcher::Event::Apply(o) => {
                let key = key_of(&o);
                let old = self.upsert(o);
                changed(key, old)
            }
            watcher::Event::Delete(o) => {
                let old = self.remove(&o).map(Some);
                changed(key_of(&o), old)
            }
            watcher::Event::Init => {
                self.init = Some(BTreeMap::new());
                Applied::Unchanged
            }
            watcher::Event::InitApply(o) => {
                if let Some(buf) = self.init.as_mut() {
                    buf.insert(key_of(&o), (self.trim)(o));
                    Applied::Unchanged
                } else {
                    let key = key_of(&o);
                    let old = self.upsert(o);
                    changed(key, old)
                }
            }
            watcher::Event::InitDone => match self.init.take() {
                Some(buf) => {
                    self.items = buf;
                    Applied::Relisted
                }
                None => Applied::Unchanged,
            },
        }
    }
}

/// Control handle of a running [`NodeSimulator`]: fault injection and knobs. Cheap to clone.
#[derive(Clone)]
pub struct NodeSimHandle {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for NodeSimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSimHandle")
            .field("nodes", &self.node_names())
            .finish()
    }
}

/// A running node simulator (see the module docs). Stop it with [`NodeSimulator::shutdown`];
/// dropping it also stops the loop (without waiting).
pub struct NodeSimulator {
    handle: NodeSimHandle,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Drop for NodeSimulator {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl NodeSimulator {
    /// Register the nodes and start the loop against the API server of `kube_config`.
    ///
    /// Errors: [`NodeSimError::Config`] for bad settings, [`NodeSimError::Api`] when a client
    /// cannot be built or a Node cannot be registered.
    pub async fn start(
        kube_config: kube::Config,
        config: NodeSimConfig,
    ) -> Result<Self, NodeSimError> {
        config.validate()?;
        let clients = Clients {
            scheduler: client_with_agent(&kube_config, AGENT_SCHEDULER)?,
            kubelet: client_with_agent(&kube_config, AGENT_KUBELET)?,
            virt_handler: client_with_agent(&kube_config, AGENT_VIRT_HANDLER)?,
            lifecycle: client_with_agent(&kube_config, AGENT_NODE_LIFECYCLE)?,
        };
        let inner = Arc::new(Inner {
            clients,
            state: Mutex::new(SimState {
                kubelet_delay: config.kubelet_delay,
                virt_handler_delay: Duration::ZERO,
                grace_scale: config.grace_scale,
                capacity: config.capacity.clone(),
                labels: config.labels.clone(),
                bind_claims: config.bind_claims,
                managed: BTreeMap::new(),
                removed: BTreeSet::new(),
                next_index: 0,
                faults: FaultState::default(),
            }),
            wake: tokio::sync::Notify::new(),
            vmi_resource: vmi_api_resource(),
            vmi_status_mode: AtomicU8::new(VMI_STATUS_UNKNOWN),
        });
        let handle = NodeSimHandle { inner };
        for _ in 0..config.nodes {
            handle.add_node().await?;
        }
        let cancel = CancellationToken::new();
        let runner = Runner::new(handle.inner.clone());
        let task = tokio::spawn(runner.run(cancel.clone()));
        Ok(NodeSimulator {
            handle,
            cancel,
            task: Some(task),
        })
    }

    /// [`NodeSimulator::start`] with a client configuration read from a kubeconfig file.
    ///
    /// Errors: [`NodeSimError::Kubeconfig`] when the file cannot be read or used.
    pub async fn start_from_kubeconfig(
        path: &Path,
        config: NodeSimConfig,
    ) -> Result<Self, NodeSimError> {
        let kubeconfig_err = |message: String| NodeSimError::Kubeconfig {
            path: path.display().to_string(),
            message,
        };
        let kubeconfig =
            kube::config::Kubeconfig::read_from(path).map_err(|e| kubeconfig_err(e.to_string()))?;
        let kube_config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| kubeconfig_err(e.to_string()))?;
        Self::start(kube_config, config).await
    }

    /// The control handle.
    pub fn handle(&self) -> &NodeSimHandle {
        &self.handle
    }

    /// Stop the loop and wait for it to end. Nodes are left registered.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

async fn write_pod_status(
    client: &Client,
    pod: &Pod,
    status: PodStatus,
) -> Result<Pod, kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let mut p = pod.clone();
    p.status = Some(status);
    Api::<Pod>::namespaced(client.clone(), &ns)
        .replace_status(&pod.name_any(), &PostParams::default(), &p)
        .await
}

/// A core/v1 Event a simulated component records about one object, as client-go's recorder
/// writes a new one (count 1, first and last timestamp now).
struct SimEvent<'a> {
    api_version: &'static str,
    kind: &'static str,
    about: &'a kube::api::ObjectMeta,
    type_: &'a str,
    reason: &'a str,
    message: &'a str,
    component: &'static str,
    host: Option<String>,
    action: Option<&'static str>,
}

/// Create `e`; best effort, as event recording is (a failure is logged at debug).
async fn record_event(client: &Client, e: SimEvent<'_>) {
    use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
    let ns = e.about.namespace.clone().unwrap_or_default();
    let name = e.about.name.clone().unwrap_or_default();
    let now = now_time();
    let micros = chrono::Utc::now().timestamp_micros();
    let event = Event {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{name}.{micros:x}")),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(e.api_version.into()),
            kind: Some(e.kind.into()),
            name: e.about.name.clone(),
            namespace: Some(ns.clone()),
            uid: e.about.uid.clone(),
            resource_version: e.about.resource_version.clone(),
            ..Default::default()
        },
        reason: Some(e.reason.into()),
        message: Some(e.message.to_string()),
        type_: Some(e.type_.into()),
        source: Some(EventSource {
            component: Some(e.component.into()),
            host: e.host,
        }),
        reporting_component: Some(e.component.into()),
        action: e.action.map(str::to_string),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        ..Default::default()
    };
    if let Err(err) = Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &event)
        .await
    {
        tracing::debug!(object = %format!("{ns}/{name}"), reason = e.reason, error = %err, "event not recorded");
    }
}

/// The `FailedScheduling` Warning event kube-scheduler records for a pod it cannot place
/// (pkg/scheduler/schedule_one.go, `handleSchedulingFailure`: reason `FailedScheduling`, the
/// fit error's message), so `kubectl describe pod` shows why.
async fn failed_scheduling_event(client: &Client, pod: &Pod, message: &str) {
    let event = SimEvent {
        api_version: "v1",
        kind: "Pod",
        about: &pod.metadata,
        type_: "Warning",
        reason: "FailedScheduling",
        message,
        component: "default-scheduler",
        host: None,
        action: Some("Scheduling"),
    };
    record_event(client, event).await;
}

/// A core/v1 Event about a VMI from `virt-handler` (its recorder's source component), on the
/// VMI's node.
async fn vmi_event(client: &Client, vmi: &DynamicObject, type_: &str, reason: &str, message: &str) {
    let host = vmi
        .data
        .pointer("/status/nodeName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let event = SimEvent {
        api_version: "kubevirt.io/v1",
        kind: "VirtualMachineInstance",
        about: &vmi.metadata,
        type_,
        reason,
        message,
        component: "virt-handler",
        host,
        action: None,
    };
    record_event(client, event).await;
}

async fn delete_pod_now(client: &Client, pod: &Pod) -> Result<(), kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match Api::<Pod>::namespaced(client.clone(), &ns)
        .delete(&pod.name_any(), &dp)
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `spec.nodeName` of a pod, if bound.
fn bound_node(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The node we bound `pod` to when the cached copy does not show the binding yet. Any unbound
/// copy of a pod we bound predates the binding, whatever its resourceVersion: updates committed
/// before the binding (a status patch by the controller, say) can still be on their way through
/// the watch, and treating them as unbound made the scheduler bind again (409 "already bound")
/// on every pass until the bound copy arrived.
fn awaiting_node<'a>(awaiting: &'a HashMap<String, String>, pod: &Pod) -> Option<&'a str> {
    if bound_node(pod).is_some() {
        return None;
    }
    awaiting.get(&pod.uid()?).map(String::as_str)
}

/// Bind through `pods/binding` (as kube-scheduler does). A server without that subresource
/// (404/405 while the pod exists) gets an update of `spec.nodeName` instead.
async fn bind_pod(client: &Client, pod: &Pod, node: &str) -> Result<Option<Pod>, kube::Error> {
    let ns = pod.namespace().unwrap_or_default();
    let api = Api::<Pod>::namespaced(client.clone(), &ns);
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod.name_any(), "namespace": ns, "uid": pod.uid()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    match api
        .create_subresource::<_, Value>(
            "binding",
            &pod.name_any(),
            &PostParams::default(),
            &binding,
        )
        .await
    {
        Ok(_) => Ok(None),
        Err(e) if is_status(&e, 404) || is_status(&e, 405) => {
            let Some(mut current) = api.get_opt(&pod.name_any()).await? else {
                return Err(e);
            };
            if let Some(spec) = current.spec.as_mut() {
                spec.node_name = Some(node.to_string());
            }
            api.replace(&pod.name_any(), &PostParams::default(), &current)
                .await
                .map(Some)
        }
        Err(e) => Err(e),
    }
}

impl Inner {
    /// [`Self::write_vmi`], then the event virt-handler records when the phase changed
    /// ([`virt_handler::phase_change_event`]; best effort, as event recording is).
    async fn write_vmi_phase(
        &self,
        old: &Value,
        new: &Value,
    ) -> Result<DynamicObject, NodeSimError> {
        let written = self.write_vmi(new).await?;
        let event = virt_handler::phase_change_event(
            virt_handler::vmi_phase(old),
            virt_handler::vmi_phase(new),
        );
        if let Some((type_, reason, message)) = event {
            vmi_event(&self.clients.virt_handler, &written, type_, reason, message).await;
        }
        Ok(written)
    }

    /// PUT a VMI's status: through `status` when the server serves it for VMIs, else the whole
    /// object (KubeVirt's VMI CRD has no status subresource).
    async fn write_vmi(&self, vmi: &Value) -> Result<DynamicObject, NodeSimError> {
        let obj: DynamicObject =
            serde_json::from_value(vmi.clone()).map_err(|e| NodeSimError::InvalidState {
                kind: "VirtualMachineInstance",
                key: String::new(),
                message: format!("cannot encode: {e}"),
            })?;
        let ns = obj.namespace().unwrap_or_default();
        let name = obj.name_any();
        let what = format!("updating VirtualMachineInstance {ns}/{name}");
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.clients.virt_handler.clone(), &ns, &self.vmi_resource);
        let pp = PostParams::default();
        if self.vmi_status_mode.load(Ordering::Relaxed) != VMI_STATUS_MAIN {
            match api.replace_status(&name, &pp, &obj).await {
                Ok(o) => {
                    self.vmi_status_mode
                        .store(VMI_STATUS_SUBRESOURCE, Ordering::Relaxed);
                    return Ok(o);
                }
                Err(e) if is_status(&e, 404) || is_status(&e, 405) => {
                    if api
                        .get_opt(&name)
                        .await
                        .map_err(api_err(what.clone()))?
                        .is_none()
                    {
                        return Err(NodeSimError::NotFound {
                            kind: "VirtualMachineInstance",
                            key: format!("{ns}/{name}"),
                        });
                    }
                    self.vmi_status_mode
                        .store(VMI_STATUS_MAIN, Ordering::Relaxed);
                }
                Err(e) => return Err(api_err(what)(e)),
            }
        }
        api.replace(&name, &pp, &obj).await.map_err(api_err(what))
    }
}

/// Retry `attempt` on 409 Conflict a few times (each attempt re-reads the object).
async fn with_conflict_retry<T, F, Fut>(mut attempt: F) -> Result<T, NodeSimError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, NodeSimError>>,
{
    let mut tries = 0;
    loop {
        match attempt().await {
            Err(NodeSimError::Api { source, .. }) if is_status(&source, 409) && tries < 5 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20 * tries)).await;
            }
            other => return other,
        }
    }
}

impl NodeSimHandle {
    fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Names of the simulated nodes currently registered, in index order.
    pub fn node_names(&self) -> Vec<String> {
        let state = self.inner.state();
        let mut nodes: Vec<(usize, String)> =
            state.managed.iter().map(|(n, i)| (*i, n.clone())).collect();
        nodes.sort();
        nodes.into_iter().map(|(_, n)| n).collect()
    }

    /// Change the delay between binding and a pod running (applies to pods not yet running).
    pub fn set_kubelet_delay(&self, delay: Duration) {
        self.inner.state().kubelet_delay = delay;
        self.wake();
    }

    /// Change the delay between a VMI being Scheduled with a running launcher pod and
    /// virt-handler reporting it Running (default zero; applies to VMIs not yet Running).
    pub fn set_virt_handler_delay(&self, delay: Duration) {
        self.inner.state().virt_handler_delay = delay;
        self.wake();
    }

    /// Pods matching `matcher` that are not running yet stay Pending with their containers
    /// waiting `ErrImagePull`, then `ImagePullBackOff`, until [`Self::clear_image_pull_faults`].
    pub fn stick_image_pull(&self, matcher: Matcher) {
        self.inner.state().faults.image_pull.push(matcher);
        self.wake();
    }

    /// Let stuck pods pull their images (they then start normally).
    pub fn clear_image_pull_faults(&self) {
        self.inner.state().faults.image_pull.clear();
        self.wake();
    }

    /// The next `count` VMIs matching `matcher` that reach `Scheduled` go `Failed` instead of
    /// `Running` (their launcher pod fails with exit code 1), like a guest that dies during
    /// boot.
    pub fn fail_vmis_before_running(&self, matcher: Matcher, count: u32) {
        if count > 0 {
            self.inner
                .state()
                .faults
                .fail_before_running
                .push((matcher, count));
            self.wake();
        }
    }

    fn managed_node_of_pod(&self, pod: &Pod) -> Option<String> {
        let node = pod.spec.as_ref()?.node_name.clone()?;
        self.inner
            .state()
            .managed
            .contains_key(&node)
            .then_some(node)
    }

    /// Make a pod on a simulated node fail: every container terminated with exit code 1
    /// (reason `Error`), phase `Failed`.
    ///
    /// Errors: [`NodeSimError::NotFound`], [`NodeSimError::InvalidState`] when the pod is not on
    /// one of our nodes or already ended, [`NodeSimError::Api`].
    pub async fn fail_pod(&self, namespace: &str, name: &str) -> Result<(), NodeSimError> {
        self.terminate_pod(namespace, name, 1, "Error", Some("simulated failure"))
            .await
    }

    /// The kernel OOM-kills a pod on a simulated node: every container terminated with exit
    /// code 137 (128 + SIGKILL) and reason `OOMKilled`, as the container runtime reports a
    /// cgroup OOM kill, phase `Failed`. virt-handler then fails the VMI (its domain is gone).
    ///
    /// Errors: as [`Self::fail_pod`].
    pub async fn oom_kill_pod(&self, namespace: &str, name: &str) -> Result<(), NodeSimError> {
        self.terminate_pod(namespace, name, 137, "OOMKilled", None)
            .await
    }

    async fn terminate_pod(
        &self,
        namespace: &str,
        name: &str,
        exit_code: i32,
        reason: &str,
        message: Option<&str>,
    ) -> Result<(), NodeSimError> {
        let key = format!("{namespace}/{name}");
        let api = Api::<Pod>::namespaced(self.inner.clients.kubelet.clone(), namespace);
        with_conflict_retry(|| async {
            let pod = get_existing(&api, "Pod", name, &key).await?;
            if self.managed_node_of_pod(&pod).is_none() {
                return Err(NodeSimError::InvalidState {
                    kind: "Pod",
                    key: key.clone(),
                    message: "spec.nodeName is not a simulated node".into(),
                });
            }
            if kubelet::is_terminal(&pod) {
                return Err(NodeSimError::InvalidState {
                    kind: "Pod",
                    key: key.clone(),
                    message: "status.phase is already Succeeded or Failed".into(),
                });
            }
            let status = kubelet::terminated_status(&pod, exit_code, reason, message, &now_time());
            write_pod_status(&self.inner.clients.kubelet, &pod, status)
                .await
                .map_err(api_err(format!("updating status of Pod {key}")))
        })
        .await?;
        self.wake();
        Ok(())
    }

    /// The guest of a Running VMI shuts down: VMI `Succeeded`, launcher pod `Succeeded`.
    ///
    /// Errors: [`NodeSimError::NotFound`], [`NodeSimError::InvalidState`] when the VMI is not
    /// Running on one of our nodes, [`NodeSimError::Api`].
    pub async fn shutdown_guest(&self, namespace: &str, name: &str) -> Result<(), NodeSimError> {
        self.stop_guest(namespace, name, virt_handler::PHASE_SUCCEEDED, 0)
            .await
    }

    /// The guest of a Running VMI crashes: VMI `Failed` (no status reason, as virt-handler),
    /// launcher pod `Failed` with exit code 1.
    ///
    /// Errors: as [`Self::shutdown_guest`].
    pub async fn crash_guest(&self, namespace: &str, name: &str) -> Result<(), NodeSimError> {
        self.stop_guest(namespace, name, virt_handler::PHASE_FAILED, 1)
            .await
    }

    async fn stop_guest(
        &self,
        namespace: &str,
        name: &str,
        phase: &str,
        exit_code: i32,
    ) -> Result<(), NodeSimError> {
        let key = format!("{namespace}/{name}");
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.inner.clients.virt_handler.clone(),
            namespace,
            &self.inner.vmi_resource,
        );
        let written = with_conflict_retry(|| async {
            let obj = get_existing(&api, "VirtualMachineInstance", name, &key).await?;
            let vmi = serde_json::to_value(&obj).unwrap_or(Value::Null);
            let on_our_node = vmi_node(&vmi).is_some_and(|n| self.inner.state().managed.contains_key(n));
            if virt_handler::vmi_phase(&vmi) != virt_handler::PHASE_RUNNING || !on_our_node {
                return Err(NodeSimError::InvalidState {
                    kind: "VirtualMachineInstance",
                    key: key.clone(),
                    message: format!(
                        "status.phase is {:?} on node {:?}; only a Running VMI on a simulated node has a guest to stop",
                        virt_handler::vmi_phase(&vmi),
                        vmi_node(&vmi)
                    ),
                });
            }
            let new = virt_handler::final_vmi(&vmi, phase, &now_rfc3339());
            self.inner.write_vmi_phase(&vmi, &new).await?;
            Ok(vmi)
        })
        .await?;
        // The launcher's compute container exits once the domain is gone.
        let pods = Api::<Pod>::namespaced(self.inner.clients.kubelet.clone(), namespace);
        let uid = written
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let selector = format!("{}={uid}", virt_handler::LABEL_CREATED_BY);
        let list = pods
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_err(format!("listing launcher pods of {key}")))?;
        if let Some(launcher) = virt_handler::find_launcher_pod(&written, list.items.iter()) {
            let reason = if exit_code == 0 { "Completed" } else { "Error" };
            let pod_name = launcher.name_any();
            with_conflict_retry(|| async {
                let pod = pods
                    .get(&pod_name)
                    .await
                    .map_err(api_err(format!("reading Pod {namespace}/{pod_name}")))?;
                if kubelet::is_terminal(&pod) {
                    return Ok(());
                }
                let status = kubelet::terminated_status(&pod, exit_code, reason, None, &now_time());
                write_pod_status(&self.inner.clients.kubelet, &pod, status)
                    .await
                    .map(|_| ())
                    .map_err(api_err(format!(
                        "updating status of Pod {namespace}/{pod_name}"
                    )))
            })
            .await?;
        }
        self.wake();
        Ok(())
    }

    /// Register one more node (`sim-node-<next index>`) and return its name.
    ///
    /// Errors: [`NodeSimError::Api`] when the Node cannot be created.
    pub(crate) async fn add_node(&self) -> Result<String, NodeSimError> {
        let (index, capacity, labels) = {
            let mut state = self.inner.state();
            let index = state.next_index;
            state.next_index += 1;
            (index, state.capacity.clone(), state.labels.clone())
        };
        let node = build_node(index, &capacity, &labels, &now_time());
        let name = node.name_any();
        let api = Api::<Node>::all(self.inner.clients.kubelet.clone());
        let what = format!("registering Node {name}");
        let created = match api.create(&PostParams::default(), &node).await {
            Ok(n) => n,
            Err(e) if is_status(&e, 409) => {
                let mut existing = api.get(&name).await.map_err(api_err(what.clone()))?;
                existing.metadata.labels = node.metadata.labels.clone();
                existing.metadata.annotations = node.metadata.annotations.clone();
                existing.spec = node.spec.clone();
                api.replace(&name, &PostParams::default(), &existing)
                    .await
                    .map_err(api_err(what.clone()))?
            }
            Err(e) => return Err(api_err(what)(e)),
        };
        if created.status != node.status {
            let mut with_status = created.clone();
            with_status.status = node.status.clone();
            api.replace_status(&name, &PostParams::default(), &with_status)
                .await
                .map_err(api_err(format!("posting status of Node {name}")))?;
        }
        {
            let mut state = self.inner.state();
            state.removed.remove(&name);
            state.managed.insert(name.clone(), index);
        }
        self.wake();
        Ok(name)
    }

    /// Remove a simulated node: its kubelet stops, the Node object is deleted, and its pods are
    /// handled as PodGC does for pods of a vanished node: phase `Failed` with condition
    /// `DisruptionTarget` (reason `DeletionByPodGC`), then force-deleted. VMIs on it are left to
    /// virt-controller (their launcher pod vanishes).
    ///
    /// Errors: [`NodeSimError::NotFound`] for a name that is not a simulated node,
    /// [`NodeSimError::Api`].
    pub async fn remove_node(&self, name: &str) -> Result<(), NodeSimError> {
        {
            let mut state = self.inner.state();
            if state.managed.remove(name).is_none() {
                return Err(NodeSimError::NotFound {
                    kind: "Node",
                    key: name.to_string(),
                });
            }
            state.removed.insert(name.to_string());
        }
        let api = Api::<Node>::all(self.inner.clients.lifecycle.clone());
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(e) if is_status(&e, 404) => {}
            Err(e) => return Err(api_err(format!("deleting Node {name}"))(e)),
        }
        self.wake();
        Ok(())
    }
}

/// Per-object bookkeeping of the loop.
struct Runner {
    inner: Arc<Inner>,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    vmis: Cache<DynamicObject>,
    bound_seen: HashMap<String, Instant>,
    deletion_seen: HashMap<String, Instant>,
    /// VMI UID → when virt-handler first could start it (Scheduled, launcher running).
    start_seen: HashMap<String, Instant>,
    /// Pod UID → exit code of its containers, once virt-handler stopped the domain: the
    /// kubelet reports it until a status write succeeds.
    exited: HashMap<String, i32>,
    /// Pod UID → (resourceVersion our write produced, status we wrote).
    last_status_write: HashMap<String, (Option<String>, PodStatus)>,
    deleted: HashSet<String>,
    ip_seq: BTreeMap<String, u64>,
    /// Pod UID → IP handed out (kept until the pod is gone).
    pod_ips: HashMap<String, String>,
    /// Pods bound by us whose bound copy has not arrived through the watch yet: UID → node.
    awaiting_bind: HashMap<String, String>,
    /// What the next pass decides for.
    work: WorkSet,
    /// Pods by owning VMI, node usage, pending pods.
    index: PodIndex,
    /// VMI UID → key.
    vmi_keys: HashMap<String, String>,
    /// While a pass runs: the pods and VMIs it decides for (objects changed by its own writes
    /// join, for the steps still to come).
    pass_pods: BTreeSet<String>,
    pass_vmis: BTreeSet<String>,
    in_pass: bool,
    /// [`PodIndex::epoch`] when the scheduler last placed the pending pods.
    scheduled_at_epoch: Option<u64>,
    /// The managed Nodes in the scheduler's preference order, kept until a Node changes or a
    /// handle call (which may add or remove one) makes a full pass.
    schedulable: Option<Arc<[Node]>>,
}

impl Runner {
    fn new(inner: Arc<Inner>) -> Self {
        Runner {
            inner,
            pods: Cache::trimmed(super::cached_pod::for_node_cache),
            nodes: Cache::new(),
            vmis: Cache::new(),
            bound_seen: HashMap::new(),
            deletion_seen: HashMap::new(),
            start_seen: HashMap::new(),
            exited: HashMap::new(),
            last_status_write: HashMap::new(),
            deleted: HashSet::new(),
            ip_seq: BTreeMap::new(),
            pod_ips: HashMap::new(),
            awaiting_bind: HashMap::new(),
            work: WorkSet::default(),
            index: PodIndex::default(),
            vmi_keys: HashMap::new(),
            pass_pods: BTreeSet::new(),
            pass_vmis: BTreeSet::new(),
            in_pass: false,
            scheduled_at_epoch: None,
            schedulable: None,
        }
    }

    async fn run(mut self, cancel: CancellationToken) {
        let cfg = watcher::Config::default();
        let mut pods: BoxStream<'static, Result<watcher::Event<Pod>, watcher::Error>> = watcher(
            Api::<Pod>::all(self.inner.clients.kubelet.clone()),
            cfg.clone(),
        )
        .default_backoff()
        .boxed();
        let mut nodes: BoxStream<'static, Result<watcher::Event<Node>, watcher::Error>> = watcher(
            Api::<Node>::all(self.inner.clients.kubelet.clone()),
            cfg.clone(),
        )
        .default_backoff()
        .boxed();
        let mut vmis: BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>> =
            watcher(
                Api::<DynamicObject>::all_with(
                    self.inner.clients.virt_handler.clone(),
                    &self.inner.vmi_resource,
                ),
                cfg,
            )
            .default_backoff()
            .boxed();
        let mut next: Option<Instant> = None;
        loop {
            let sleep = async {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => futures::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => break,
                Some(ev) = pods.next() => self.on_pod(ev),
                Some(ev) = nodes.next() => self.on_node(ev),
                Some(ev) = vmis.next() => self.on_vmi(ev),
                // A handle call (fault, knob, node added or removed) may change any decision.
                _ = self.inner.wake.notified() => self.work.full = true,
                _ = sleep => {}
            }
            // Take every event that is already there before acting.
            loop {
                let mut any = false;
                if let Some(Some(ev)) = pods.next().now_or_never() {
                    self.on_pod(ev);
                    any = true;
                }
                if let Some(Some(ev)) = nodes.next().now_or_never() {
                    self.on_node(ev);
                    any = true;
                }
                if let Some(Some(ev)) = vmis.next().now_or_never() {
                    self.on_vmi(ev);
                    any = true;
                }
                if !any {
                    break;
                }
            }
            if cancel.is_cancelled() {
                break;
            }
            self.pass().await;
            next = self.work.next_wake(Instant::now());
        }
    }

    fn on_pod(&mut self, ev: Result<watcher::Event<Pod>, watcher::Error>) {
        match ev {
            Ok(e) => match self.pods.apply(e) {
                Applied::Unchanged => {}
                Applied::Changed { key, old } => self.pod_changed(&key, old),
                Applied::Relisted => self.pods_relisted(),
            },
            Err(e) => tracing::debug!(error = %e, "pod watch"),
        }
    }

    fn on_node(&mut self, ev: Result<watcher::Event<Node>, watcher::Error>) {
        match ev {
            Ok(e) => match self.nodes.apply(e) {
                Applied::Unchanged => {}
                Applied::Changed { .. } | Applied::Relisted => {
                    self.schedulable = None;
                    self.index.nodes_changed();
                }
            },
            Err(e) => tracing::debug!(error = %e, "node watch"),
        }
    }

    fn on_vmi(&mut self, ev: Result<watcher::Event<DynamicObject>, watcher::Error>) {
        match ev {
            Ok(e) => match self.vmis.apply(e) {
                Applied::Unchanged => {}
                Applied::Changed { key, old } => self.vmi_changed(&key, old),
                Applied::Relisted => self.vmis_relisted(),
            },
            Err(e) => tracing::debug!(error = %e, "virtualmachineinstance watch"),
        }
    }

    /// Decide for the pod at `key` on this pass (in the steps still to come) and the next.
    fn mark_pod(&mut self, key: &str) {
        if self.in_pass {
            self.pass_pods.insert(key.to_string());
        }
        self.work.pods.insert(key.to_string());
    }

    fn mark_vmi(&mut self, key: &str) {
        if self.in_pass {
            self.pass_vmis.insert(key.to_string());
        }
        self.work.vmis.insert(key.to_string());
    }

    fn retry_pod(&mut self, pod: &Pod) {
        self.work.pod_at(&key_of(pod), Instant::now() + RETRY_AFTER);
    }

    /// The cached pod at `key` changed from `old`: forget a pod that is gone, re-index it, and
    /// decide again for it and for the VMIs it belongs (or belonged) to.
    fn pod_changed(&mut self, key: &str, old: Option<Pod>) {
        let new_uid = self.pods.items.get(key).and_then(|p| p.uid());
        if let Some(old_uid) = old.and_then(|p| p.uid())
            && new_uid.as_ref() != Some(&old_uid)
        {
            self.forget_pod(&old_uid);
        }
        if let Some(uid) = &new_uid
            && self.pods.items.get(key).and_then(bound_node).is_some()
        {
            // The bound copy arrived.
            self.awaiting_bind.remove(uid);
        }
        for uid in self.reindex_pod(key) {
            if let Some(vmi_key) = self.vmi_keys.get(&uid).cloned() {
                self.mark_vmi(&vmi_key);
            }
        }
        self.mark_pod(key);
    }

    /// Bring the index entry of the pod at `key` up to date; returns the VMI UIDs affected.
    fn reindex_pod(&mut self, key: &str) -> Vec<String> {
        let pod = self.pods.items.get(key);
        let bound_by_us = pod.and_then(|p| awaiting_node(&self.awaiting_bind, p));
        self.index.update(key, pod, bound_by_us)
    }

    /// Bookkeeping of a pod UID that left the cache.
    fn forget_pod(&mut self, uid: &str) {
        self.bound_seen.remove(uid);
        self.deletion_seen.remove(uid);
        self.exited.remove(uid);
        self.last_status_write.remove(uid);
        self.deleted.remove(uid);
        self.pod_ips.remove(uid);
        self.awaiting_bind.remove(uid);
    }

    /// A write response: cache it and decide again for it (even when the watch already brought
    /// the same version).
    fn pod_written(&mut self, pod: Pod) {
        let key = key_of(&pod);
        match self.pods.upsert(pod) {
            Some(old) => self.pod_changed(&key, old),
            None => self.mark_pod(&key),
        }
    }

    fn vmi_written(&mut self, vmi: DynamicObject) {
        let key = key_of(&vmi);
        match self.vmis.upsert(vmi) {
            Some(old) => self.vmi_changed(&key, old),
            None => self.mark_vmi(&key),
        }
    }

    fn vmi_changed(&mut self, key: &str, old: Option<DynamicObject>) {
        let new_uid = self.vmis.items.get(key).and_then(|v| v.uid());
        if let Some(old_uid) = old.and_then(|v| v.uid())
            && new_uid.as_ref() != Some(&old_uid)
        {
            self.start_seen.remove(&old_uid);
            self.vmi_keys.remove(&old_uid);
        }
        if let Some(uid) = new_uid {
            self.vmi_keys.insert(uid, key.to_string());
        }
        self.mark_vmi(key);
    }

    /// Forget every pod UID no longer cached (after a relist; a full pass checks too).
    fn forget_gone_pods(&mut self) {
        let live: HashSet<String> = self.pods.items.values().filter_map(|p| p.uid()).collect();
        self.bound_seen.retain(|uid, _| live.contains(uid));
        self.deletion_seen.retain(|uid, _| live.contains(uid));
        self.last_status_write.retain(|uid, _| live.contains(uid));
        self.deleted.retain(|uid| live.contains(uid));
        self.pod_ips.retain(|uid, _| live.contains(uid));
        let unbound: HashSet<String> = self
            .pods
            .items
            .values()
            .filter(|p| bound_node(p).is_none())
            .filter_map(|p| p.uid())
            .collect();
        self.awaiting_bind.retain(|uid, _| unbound.contains(uid));
    }

    fn pods_relisted(&mut self) {
        self.forget_gone_pods();
        self.index.clear();
        let keys: Vec<String> = self.pods.items.keys().cloned().collect();
        for key in &keys {
            self.reindex_pod(key);
        }
        self.work.full = true;
    }

    fn vmis_relisted(&mut self) {
        self.vmi_keys = self
            .vmis
            .items
            .iter()
            .filter_map(|(key, v)| Some((v.uid()?, key.clone())))
            .collect();
        let live = &self.vmi_keys;
        self.start_seen.retain(|uid, _| live.contains_key(uid));
        self.work.full = true;
    }

    async fn pass(&mut self) {
        let state = self.inner.state().clone();
        let now = Instant::now();
        self.work.take_due(now);
        let full = std::mem::take(&mut self.work.full);
        if full {
            self.schedulable = None;
            self.forget_gone_pods();
            let live_vmis: HashSet<String> =
                self.vmis.items.values().filter_map(|v| v.uid()).collect();
            self.start_seen.retain(|uid, _| live_vmis.contains(uid));
            self.work.pods.extend(self.pods.items.keys().cloned());
            self.work.vmis.extend(self.vmis.items.keys().cloned());
        }
        (self.pass_pods, self.pass_vmis) = self.work.take_batch(PASS_BUDGET);
        self.in_pass = true;
        self.pod_gc(&state).await;
        self.virt_handler(&state).await;
        self.scheduler(&state, now, full).await;
        self.kubelet(&state, now).await;
        self.in_pass = false;
        self.pass_pods.clear();
        self.pass_vmis.clear();
    }

    /// The cached copies of this pass's pods matching `keep`.
    fn pass_pods_where(&self, keep: impl Fn(&Pod) -> bool) -> Vec<Pod> {
        self.pass_pods
            .iter()
            .filter_map(|k| self.pods.items.get(k))
            .filter(|p| keep(p))
            .cloned()
            .collect()
    }

    /// Whether the cached copy of `pod` predates a binding we made (its watch update is due).
    fn stale_after_bind(&self, pod: &Pod) -> bool {
        awaiting_node(&self.awaiting_bind, pod).is_some()
    }

    fn pod_status_unchanged_since_our_write(&self, pod: &Pod, desired: &PodStatus) -> bool {
        let Some(uid) = pod.uid() else { return false };
        self.last_status_write
            .get(&uid)
            .is_some_and(|(rv, written)| {
                rv.as_deref() == pod.resource_version().as_deref() && written == desired
            })
    }

    async fn put_pod_status(&mut self, client: &Client, pod: &Pod, status: PodStatus) -> bool {
        if self.pod_status_unchanged_since_our_write(pod, &status) {
            // The server normalised what we wrote; writing it again would only churn.
            return false;
        }
        match write_pod_status(client, pod, status.clone()).await {
            Ok(updated) => {
                if let Some(uid) = updated.uid() {
                    self.last_status_write
                        .insert(uid, (updated.resource_version(), status));
                }
                self.pod_written(updated);
                true
            }
            Err(e) if is_status(&e, 409) => {
                // The status manager's answer to a conflict: fetch the current pod and compute
                // the status again from it at once (pkg/kubelet/status/status_manager.go,
                // syncPod reads the latest pod before every write), instead of retrying from a
                // cached copy the watch may be slow to replace.
                tracing::debug!(pod = %key_of(pod), "pod status write conflicted; re-reading the pod");
                let api =
                    Api::<Pod>::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
                match api.get_opt(&pod.name_any()).await {
                    Ok(Some(fresh)) => {
                        // At once when the pod did change; a conflict on an unchanged pod (an
                        // injected one) waits like any other failure.
                        if fresh.resource_version() != pod.resource_version() {
                            self.pod_written(fresh);
                        } else {
                            self.pods.upsert(fresh);
                            self.retry_pod(pod);
                        }
                    }
                    Ok(None) => {}
                    Err(_) => self.retry_pod(pod),
                }
                false
            }
            Err(e) => {
                tracing::debug!(pod = %key_of(pod), error = %e, "pod status write failed");
                self.retry_pod(pod);
                false
            }
        }
    }

    async fn delete_pod(&mut self, client: &Client, pod: &Pod) {
        let Some(uid) = pod.uid() else { return };
        if self.deleted.contains(&uid) {
            return;
        }
        match delete_pod_now(client, pod).await {
            Ok(()) => {
                self.deleted.insert(uid);
            }
            Err(e) => {
                tracing::debug!(pod = %key_of(pod), error = %e, "pod delete failed");
                self.retry_pod(pod);
            }
        }
    }

    /// PodGC stand-in for pods bound to nodes removed through the handle.
    async fn pod_gc(&mut self, state: &SimState) {
        if state.removed.is_empty() {
            return;
        }
        let client = self.inner.clients.lifecycle.clone();
        let orphans =
            self.pass_pods_where(|p| bound_node(p).is_some_and(|n| state.removed.contains(n)));
        let now = now_time();
        for pod in orphans {
            let gc_marked = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
                && find_condition(pod.status.as_ref(), kubelet::COND_DISRUPTION_TARGET).is_some();
            if !gc_marked && !kubelet::is_terminal(&pod) {
                let status = kubelet::pod_gc_status(&pod, &now);
                if !self.put_pod_status(&client, &pod, status).await {
                    continue;
                }
            }
            let current = self.pods.items.get(&key_of(&pod)).cloned().unwrap_or(pod);
            self.delete_pod(&client, &current).await;
        }
    }

    async fn virt_handler(&mut self, state: &SimState) {
        let now = now_rfc3339();
        // Only VMIs on this runner's nodes become trees (`data` holds `status`): before
        // scheduling a VMI is written several times, and turning each into a tree per pass
        // was 2 % of the embedded cluster's CPU in a 10,000-VM start.
        let vmis: Vec<(String, Value)> = self
            .pass_vmis
            .iter()
            .filter_map(|k| Some((k, self.vmis.items.get(k)?)))
            .filter(|(_, v)| vmi_node(&v.data).is_some_and(|n| state.managed.contains_key(n)))
            .filter_map(|(k, v)| Some((k.clone(), serde_json::to_value(v).ok()?)))
            .collect();
        for (key, vmi) in vmis {
            let name = vmi
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let labels: Option<BTreeMap<String, String>> = vmi
                .pointer("/metadata/labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok());
            let early = if virt_handler::vmi_phase(&vmi) == virt_handler::PHASE_SCHEDULED
                && !virt_handler::vmi_is_deleting(&vmi)
            {
                self.inner
                    .state()
                    .faults
                    .early_failure(&name, labels.as_ref())
            } else {
                None
            };
            let candidates: Vec<&Pod> = vmi
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .into_iter()
                .flat_map(|uid| self.index.launchers_of(uid))
                .filter_map(|key| self.pods.items.get(key))
                .collect();
            let launcher =
                virt_handler::find_launcher_pod(&vmi, candidates.iter().copied()).cloned();
            let decision =
                match virt_handler::decide_launcher_deleted(&vmi, candidates.iter().copied(), &now)
                {
                    Some(d) => d,
                    None => virt_handler::decide(&vmi, launcher.as_ref(), early.is_some(), &now),
                };
            let (new_vmi, launcher_exit) = match decision {
                VmiDecision::Nothing => continue,
                VmiDecision::Start(v) => {
                    // The domain takes virt_handler_delay to start.
                    if !state.virt_handler_delay.is_zero()
                        && let Some(uid) = vmi.pointer("/metadata/uid").and_then(Value::as_str)
                    {
                        let now = Instant::now();
                        let seen = *self.start_seen.entry(uid.to_string()).or_insert(now);
                        let ready = seen + state.virt_handler_delay;
                        if now < ready {
                            self.work.vmi_at(&key, ready);
                            continue;
                        }
                    }
                    (v, None)
                }
                VmiDecision::Volumes(v) => (v, None),
                VmiDecision::Stop { vmi, launcher_exit } => (vmi, launcher_exit),
            };
            match self.inner.write_vmi_phase(&vmi, &new_vmi).await {
                Ok(updated) => {
                    self.vmi_written(updated);
                    if let Some(i) = early {
                        self.inner.state().faults.consume_early_failure(i);
                    }
                }
                Err(e) => {
                    tracing::debug!(vmi = %name, error = %e, "vmi status write failed");
                    self.work.vmi_at(&key, Instant::now() + RETRY_AFTER);
                    continue;
                }
            }
            if let (Some(code), Some(pod)) = (launcher_exit, launcher)
                && let Some(uid) = pod.uid()
            {
                // The domain is gone, so virt-launcher exits: the kubelet step of this pass
                // reports it, and keeps reporting it until a write goes through.
                self.exited.insert(uid, code);
                self.mark_pod(&key_of(&pod));
            }
        }
    }

    /// Places the pending pods, all of them in creation order, whenever one of them changed,
    /// or a node's usage or the Nodes did (their verdicts, and the unschedulable message,
    /// depend on every node); otherwise every pending pod would get last pass's verdict.
    async fn scheduler(&mut self, state: &SimState, now: Instant, full: bool) {
        let client = self.inner.clients.scheduler.clone();
        let place = full
            || self.scheduled_at_epoch != Some(self.index.epoch)
            || self.pass_pods.iter().any(|k| self.index.is_pending(k));
        if place {
            // Bindings made below change the usage again: the next pass places the pods left
            // pending against it.
            self.scheduled_at_epoch = Some(self.index.epoch);
            self.place_pending(state, &client, now).await;
        }
        // The binding API sets PodScheduled=True; add it where the server did not.
        let time = now_time();
        let bound = self.pass_pods_where(|p| {
            bound_node(p).is_some_and(|n| state.managed.contains_key(n))
                && p.metadata.deletion_timestamp.is_none()
                && !kubelet::is_terminal(p)
                && !self.stale_after_bind(p)
                && find_condition(p.status.as_ref(), "PodScheduled")
                    .is_none_or(|c| c.status != "True")
        });
        for pod in bound {
            let mut status = pod.status.clone().unwrap_or_default();
            let mut conditions = status.conditions.take().unwrap_or_default();
            set_condition(&mut conditions, "PodScheduled", "True", None, None, &time);
            status.conditions = Some(conditions);
            self.put_pod_status(&client, &pod, status).await;
        }
    }

    async fn place_pending(&mut self, state: &SimState, client: &Client, now: Instant) {
        let nodes = match &self.schedulable {
            Some(nodes) => nodes.clone(),
            None => {
                let mut managed: Vec<(usize, Node)> = self
                    .nodes
                    .items
                    .values()
                    .filter_map(|n| state.managed.get(&n.name_any()).map(|i| (*i, n.clone())))
                    .collect();
                managed.sort_by_key(|(i, _)| *i);
                let nodes: Arc<[Node]> = managed.into_iter().map(|(_, n)| n).collect();
                self.schedulable = Some(nodes.clone());
                nodes
            }
        };
        // A node removed through the handle leaves `managed` before its watch event arrives.
        let node_refs: Vec<&Node> = nodes
            .iter()
            .filter(|n| {
                n.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| state.managed.contains_key(name))
            })
            .collect();
        let time = now_time();
        let mut order = scheduler::NodeOrder::new(&node_refs, self.index.usage());
        let mut binds = 0;
        for key in self.index.pending() {
            if binds == PASS_BUDGET {
                // The rest on the next pass, after the watches are read: marking one pending
                // pod makes that pass place again.
                self.work.pods.insert(key);
                break;
            }
            let Some(pod) = self.pods.items.get(&key).cloned() else {
                continue;
            };
            match scheduler::schedule_in(&pod, &node_refs, self.index.usage(), &order) {
                ScheduleDecision::Bind { node } => match bind_pod(client, &pod, &node).await {
                    Ok(updated) => {
                        binds += 1;
                        if state.bind_claims {
                            super::claims::bind_first_consumer_claims(client, &pod, &node).await;
                        }
                        if let Some(uid) = pod.uid() {
                            self.bound_seen.insert(uid.clone(), now);
                            if updated.is_none() {
                                // The binding response carries no pod: the watch brings it.
                                // Until then the pod counts on its node.
                                self.awaiting_bind.insert(uid, node.clone());
                                self.reindex_pod(&key);
                            }
                        }
                        if let Some(bound) = updated {
                            self.pod_written(bound);
                        }
                        let pods = self.index.usage().get(&node).map_or(0, |u| u.pods);
                        order.set_pods(&node, pods);
                    }
                    Err(e) => {
                        tracing::debug!(pod = %key, error = %e, "binding failed");
                        self.retry_pod(&pod);
                    }
                },
                ScheduleDecision::Unschedulable { message } => {
                    let current = find_condition(pod.status.as_ref(), "PodScheduled");
                    let same = current.is_some_and(|c| {
                        c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                            && c.message.as_deref() == Some(message.as_str())
                    });
                    if same {
                        continue;
                    }
                    let mut status = pod.status.clone().unwrap_or_default();
                    let mut conditions = status.conditions.take().unwrap_or_default();
                    set_condition(
                        &mut conditions,
                        "PodScheduled",
                        "False",
                        Some("Unschedulable"),
                        Some(&message),
                        &time,
                    );
                    status.conditions = Some(conditions);
                    status.phase.get_or_insert_with(|| "Pending".to_string());
                    if self.put_pod_status(client, &pod, status).await {
                        failed_scheduling_event(client, &pod, &message).await;
                    }
                }
            }
        }
    }

    fn pod_ip_for(&mut self, pod: &Pod, node: &str, index: usize) -> String {
        if let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| !ip.is_empty())
        {
            return ip;
        }
        let uid = pod.uid().unwrap_or_default();
        if let Some(ip) = self.pod_ips.get(&uid) {
            return ip.clone();
        }
        let seq = self.ip_seq.entry(node.to_string()).or_insert(0);
        let ip = pod_ip(index, *seq);
        *seq += 1;
        self.pod_ips.insert(uid, ip.clone());
        ip
    }

    async fn kubelet(&mut self, state: &SimState, now: Instant) {
        let client = self.inner.clients.kubelet.clone();
        let ours: Vec<(Pod, String, usize)> = self
            .pass_pods
            .iter()
            .filter_map(|k| self.pods.items.get(k))
            .filter_map(|p| {
                let node = p.spec.as_ref()?.node_name.clone()?;
                let index = *state.managed.get(&node)?;
                Some((p.clone(), node, index))
            })
            .collect();
        let time = now_time();
        for (pod, node, index) in ours {
            let Some(uid) = pod.uid() else { continue };
            let bound_at = *self.bound_seen.entry(uid.clone()).or_insert(now);
            let deletion_at = pod
                .metadata
                .deletion_timestamp
                .is_some()
                .then(|| *self.deletion_seen.entry(uid.clone()).or_insert(now));
            let stuck = state.faults.image_pull_stuck(
                &pod.name_any(),
                pod.metadata.labels.as_ref(),
                pod.metadata.annotations.as_ref(),
            );
            let pod_ip = self.pod_ip_for(&pod, &node, index);
            let host_ip = node_internal_ip(index);
            let elapsed_now = Instant::now();
            let inputs = KubeletInputs {
                now: &time,
                pod_ip: &pod_ip,
                host_ip: &host_ip,
                since_bound: elapsed_now.saturating_duration_since(bound_at),
                since_deletion: deletion_at.map(|t| elapsed_now.saturating_duration_since(t)),
                kubelet_delay: state.kubelet_delay,
                grace_scale: state.grace_scale,
                image_pull_stuck: stuck,
                exited: self.exited.get(&uid).copied(),
            };
            match kubelet::decide(&pod, &inputs) {
                KubeletAction::Nothing => {}
                KubeletAction::WaitFor(d) => self.work.pod_at(&key_of(&pod), elapsed_now + d),
                KubeletAction::WriteStatus(status) => {
                    if stuck && self.pod_status_unchanged_since_our_write(&pod, &status) {
                        // The churn guard keeps the pod as it is; its image pull still moves
                        // on to back-off at twice the kubelet delay.
                        let back_off = bound_at + state.kubelet_delay * 2;
                        if back_off > elapsed_now {
                            self.work.pod_at(&key_of(&pod), back_off);
                        }
                    }
                    self.put_pod_status(&client, &pod, *status).await;
                }
                KubeletAction::Delete => self.delete_pod(&client, &pod).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(uid: &str, rv: &str, phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn phase_of(cache: &Cache<Pod>) -> Option<String> {
        cache
            .items
            .get("default/p")
            .and_then(|p| p.status.as_ref()?.phase.clone())
    }

    #[test]
    fn a_pod_we_bound_stays_bound_until_its_bound_copy_arrives() {
        let awaiting: HashMap<String, String> =
            [("u1".to_string(), "sim-node-1".to_string())].into();
        // The copy the scheduler bound (rv 5), and a newer copy committed before the binding
        // (rv 6, a status patch) that the watch delivered afterwards: both are unbound copies of
        // a pod we bound.
        assert_eq!(
            awaiting_node(&awaiting, &pod("u1", "5", "Pending")),
            Some("sim-node-1")
        );
        assert_eq!(
            awaiting_node(&awaiting, &pod("u1", "6", "Pending")),
            Some("sim-node-1")
        );
        // The bound copy arrived.
        let mut bound = pod("u1", "7", "Pending");
        bound.spec = Some(k8s_openapi::api::core::v1::PodSpec {
            node_name: Some("sim-node-1".into()),
            ..Default::default()
        });
        assert_eq!(awaiting_node(&awaiting, &bound), None);
        // A pod we did not bind.
        assert_eq!(awaiting_node(&awaiting, &pod("u2", "5", "Pending")), None);
    }

    #[test]
    fn cache_keeps_the_newest_copy() {
        let mut c = Cache::new();
        c.upsert(pod("a", "10", "Running"));
        // A late watch event for an older version does not win over a write response.
        c.apply(watcher::Event::Apply(pod("a", "9", "Pending")));
        assert_eq!(phase_of(&c).as_deref(), Some("Running"));
        c.apply(watcher::Event::Apply(pod("a", "11", "Succeeded")));
        assert_eq!(phase_of(&c).as_deref(), Some("Succeeded"));
        // A re-created object (new UID) replaces whatever was there.
        c.apply(watcher::Event::Apply(pod("b", "5", "Pending")));
        assert_eq!(phase_of(&c).as_deref(), Some("Pending"));
        // Deleting the old UID does not remove the new object.
        c.apply(watcher::Event::Delete(pod("a", "12", "Succeeded")));
        assert!(c.items.contains_key("default/p"));
        c.apply(watcher::Event::Delete(pod("b", "6", "Pending")));
        assert!(c.items.is_empty());
    }

    #[test]
    fn relist_replaces_the_cache() {
        let mut c = Cache::new();
        c.upsert(pod("a", "1", "Running"));
        c.apply(watcher::Event::Init);
        c.apply(watcher::Event::InitApply(pod("b", "7", "Pending")));
        assert_eq!(
            phase_of(&c).as_deref(),
            Some("Running"),
            "not swapped before InitDone"
        );
        c.apply(watcher::Event::InitDone);
        assert_eq!(
            c.items.get("default/p").and_then(|p| p.uid()).as_deref(),
            Some("b")
        );
    }
}
