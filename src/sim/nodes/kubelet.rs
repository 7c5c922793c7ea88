//! The kubelet stand-in's decisions: the pod status it would post (Running with every container
//! started, image-pull trouble, termination) and when to delete a terminating pod.
//!
//! Status shapes follow kubernetes pkg/kubelet/kubelet_pods.go (`generateAPIPodStatus`,
//! `getPhase`) and pkg/kubelet/status/generate.go (`GenerateContainersReadyCondition`,
//! `GeneratePodReadyCondition` including readiness gates, `GeneratePodInitializedCondition`).
//! Everything here is pure: times and IPs come in as arguments.

use super::resources::{is_restartable_init, qos_class};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::time::Duration;

/// Pod condition types the kubelet owns.
pub(crate) const COND_READY: &str = "Ready";
/// `ContainersReady` condition type.
pub(crate) const COND_CONTAINERS_READY: &str = "ContainersReady";
/// `Initialized` condition type.
pub(crate) const COND_INITIALIZED: &str = "Initialized";
/// `PodReadyToStartContainers` condition type (beta since 1.29, on by default).
pub(crate) const COND_READY_TO_START: &str = "PodReadyToStartContainers";
/// `DisruptionTarget` condition type (set by PodGC when a node goes away).
pub(crate) const COND_DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Default `terminationGracePeriodSeconds` of a pod (core/v1 defaults).
pub(crate) const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;

/// Which image-pull error a stuck pod shows (kubelet alternates; we settle on back-off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImagePullStage {
    /// `ErrImagePull`: the pull just failed.
    ErrImagePull,
    /// `ImagePullBackOff`: kubelet waits before retrying.
    BackOff,
}

/// What the kubelet does next for one pod.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum KubeletAction {
    /// Nothing to do now.
    Nothing,
    /// Nothing yet; look again after this long.
    WaitFor(Duration),
    /// PUT this status through the `status` subresource.
    WriteStatus(Box<PodStatus>),
    /// DELETE the pod with `gracePeriodSeconds=0` (containers are gone).
    Delete,
}

/// Inputs of [`decide`] besides the pod itself.
#[derive(Debug, Clone)]
pub(crate) struct KubeletInputs<'a> {
    /// Current time, second precision (what the kubelet writes into timestamps).
    pub now: &'a Time,
    /// IP to give the pod if it has none yet.
    pub pod_ip: &'a str,
    /// The node's InternalIP.
    pub host_ip: &'a str,
    /// How long ago the kubelet first saw the pod bound to its node.
    pub since_bound: Duration,
    /// How long ago the kubelet first saw `metadata.deletionTimestamp`, if set.
    pub since_deletion: Option<Duration>,
    /// Delay between binding and the pod running.
    pub kubelet_delay: Duration,
    /// Factor applied to grace periods (e.g. 0.01 turns 60 s into 0.6 s).
    pub grace_scale: f64,
    /// The pod's images cannot be pulled (fault injection).
    pub image_pull_stuck: bool,
    /// The pod's containers have exited with this code (virt-handler saw the domain end, or
    /// failed it before it ran): the kubelet reports it until the pod's status shows it.
    pub exited: Option<i32>,
}

/// `grace_seconds × scale` as a Duration (negative or NaN inputs give zero).
pub(crate) fn scaled_grace(grace_seconds: i64, scale: f64) -> Duration {
    let secs = grace_seconds.max(0) as f64 * scale;
    if secs.is_finite() && secs > 0.0 {
        Duration::from_secs_f64(secs)
    } else {
        Duration::ZERO
    }
}

/// The grace period of a terminating pod: `metadata.deletionGracePeriodSeconds`, else
/// `spec.terminationGracePeriodSeconds`, else 30.
pub(crate) fn deletion_grace_seconds(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Whether the pod is Succeeded or Failed.
pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(phase(pod), "Succeeded" | "Failed")
}

/// Whether any container or init container of the pod is running.
pub(crate) fn has_running_containers(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .any(|c| c.state.as_ref().and_then(|s| s.running.as_ref()).is_some())
}

fn hex_id(seed: &str) -> String {
    let a = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, seed.as_bytes())
        .simple()
        .to_string();
    let b = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, seed.as_bytes())
        .simple()
        .to_string();
    format!("{a}{b}")
}

/// `containerd://<64 hex>` derived from the pod UID and container name (stable across writes).
pub(crate) fn container_id(pod: &Pod, container: &str) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    format!("containerd://{}", hex_id(&format!("{uid}/{container}")))
}

/// `<image>@sha256:<64 hex>` derived from the image reference.
pub(crate) fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = match repo.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => repo,
    };
    format!("{repo}@sha256:{}", hex_id(image))
}

/// [`set_condition`] to `True` with no reason or message.
fn set_true(conditions: &mut Vec<PodCondition>, type_: &str, now: &Time) {
    set_condition(conditions, type_, "True", None, None, now);
}

/// Insert or update a condition, keeping `lastTransitionTime` when the status does not change.
pub(crate) fn set_condition(
    conditions: &mut Vec<PodCondition>,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &Time,
) {
    let new = |ltt: Option<Time>| PodCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.map(str::to_string),
        message: message.map(str::to_string),
        last_transition_time: ltt,
        last_probe_time: None,
        observed_generation: None,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status => {
            let ltt = c.last_transition_time.clone().or_else(|| Some(now.clone()));
            let probe = c.last_probe_time.clone();
            let observed = c.observed_generation;
            *c = new(ltt);
            c.last_probe_time = probe;
            c.observed_generation = observed;
        }
        Some(c) => *c = new(Some(now.clone())),
        None => conditions.push(new(Some(now.clone()))),
    }
}

/// The condition of the given type, if present.
pub(crate) fn find_condition<'a>(
    status: Option<&'a PodStatus>,
    type_: &str,
) -> Option<&'a PodCondition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Readiness-gate verdict: `Ok(())` when every `spec.readinessGates[].conditionType` is a pod
/// condition with status `True`; otherwise the kubelet's message
/// (`corresponding condition of pod readiness gate "X" does not exist.` /
/// `the status of pod readiness gate "X" is not "True", but False`), joined with ", ".
pub(crate) fn readiness_gates(pod: &Pod, status: &PodStatus) -> Result<(), String> {
    let mut problems = Vec::new();
    for gate in pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
    {
        match find_condition(Some(status), &gate.condition_type) {
            None => problems.push(format!(
                "corresponding condition of pod readiness gate {:?} does not exist.",
                gate.condition_type
            )),
            Some(c) if c.status != "True" => problems.push(format!(
                "the status of pod readiness gate {:?} is not \"True\", but {}",
                gate.condition_type, c.status
            )),
            Some(_) => {}
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

fn status_of<'a>(
    statuses: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses?.iter().find(|s| s.name == name)
}

fn running_container_status(
    pod: &Pod,
    c: &Container,
    previous: Option<&ContainerStatus>,
    now: &Time,
) -> ContainerStatus {
    let started_at = previous
        .and_then(|p| p.state.as_ref())
        .and_then(|s| s.running.as_ref())
        .and_then(|r| r.started_at.clone())
        .unwrap_or_else(|| now.clone());
    let running = ContainerState {
        running: Some(ContainerStateRunning {
            started_at: Some(started_at),
        }),
        ..Default::default()
    };
    ready_status(pod, c, true, running)
}

/// The status of a ready container of `pod` (image pulled, no restarts) in `state`.
fn ready_status(pod: &Pod, c: &Container, started: bool, state: ContainerState) -> ContainerStatus {
    let image = c.image.clone().unwrap_or_default();
    ContainerStatus {
        name: c.name.clone(),
        image_id: image_id(&image),
        image,
        container_id: Some(container_id(pod, &c.name)),
        ready: true,
        started: Some(started),
        restart_count: 0,
        state: Some(state),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    }
}

fn completed_init_status(
    pod: &Pod,
    c: &Container,
    previous: Option<&ContainerStatus>,
    now: &Time,
) -> ContainerStatus {
    if let Some(p) = previous.filter(|p| {
        p.state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    }) {
        return p.clone();
    }
    let completed = ContainerState {
        terminated: Some(ContainerStateTerminated {
            container_id: Some(container_id(pod, &c.name)),
            exit_code: 0,
            reason: Some("Completed".into()),
            started_at: Some(now.clone()),
            finished_at: Some(now.clone()),
            ..Default::default()
        }),
        ..Default::default()
    };
    ready_status(pod, c, false, completed)
}

fn sorted(mut statuses: Vec<ContainerStatus>) -> Vec<ContainerStatus> {
    statuses.sort_by(|a, b| a.name.cmp(&b.name));
    statuses
}

fn base_status(pod: &Pod, pod_ip: &str, host_ip: &str, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let ip = status
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| pod_ip.to_string());
    status.pod_ip = Some(ip.clone());
    status.pod_ips = Some(vec![PodIP { ip }]);
    status.host_ip = Some(host_ip.to_string());
    status.host_ips = Some(vec![HostIP {
        ip: host_ip.to_string(),
    }]);
    if status.start_time.is_none() {
        status.start_time = Some(now.clone());
    }
    if status.qos_class.is_none() {
        status.qos_class = pod.spec.as_ref().map(|s| qos_class(s).to_string());
    }
    status
}

/// Recompute `ContainersReady` and `Ready` on `status` from its container statuses and the pod's
/// readiness gates. `Ready` is True only when containers are ready and every gate is True.
pub(crate) fn apply_readiness(pod: &Pod, status: &mut PodStatus, now: &Time) {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut unready = Vec::new();
    for c in &spec.containers {
        if !status_of(status.container_statuses.as_ref(), &c.name).is_some_and(|s| s.ready) {
            unready.push(c.name.clone());
        }
    }
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init(c))
    {
        if !status_of(status.init_container_statuses.as_ref(), &c.name).is_some_and(|s| s.ready) {
            unready.push(c.name.clone());
        }
    }
    let terminal_reason = match status.phase.as_deref() {
        Some("Succeeded") => Some("PodCompleted"),
        Some("Failed") => Some("PodFailed"),
        _ => None,
    };
    let mut conditions = status.conditions.take().unwrap_or_default();
    if let Some(reason) = terminal_reason {
        set_condition(
            &mut conditions,
            COND_CONTAINERS_READY,
            "False",
            Some(reason),
            None,
            now,
        );
        set_condition(
            &mut conditions,
            COND_READY,
            "False",
            Some(reason),
            None,
            now,
        );
    } else if !unready.is_empty() {
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        set_condition(
            &mut conditions,
            COND_CONTAINERS_READY,
            "False",
            Some("ContainersNotReady"),
            Some(&message),
            now,
        );
        set_condition(
            &mut conditions,
            COND_READY,
            "False",
            Some("ContainersNotReady"),
            Some(&message),
            now,
        );
    } else {
        set_true(&mut conditions, COND_CONTAINERS_READY, now);
        status.conditions = Some(conditions.clone());
        match readiness_gates(pod, status) {
            Ok(()) => set_true(&mut conditions, COND_READY, now),
            Err(message) => set_condition(
                &mut conditions,
                COND_READY,
                "False",
                Some("ReadinessGatesNotReady"),
                Some(&message),
                now,
            ),
        }
    }
    status.conditions = Some(conditions);
}

/// The status of a running pod: phase Running, IPs, start time, QoS class, every container
/// running and ready, regular init containers Completed, native sidecars running and ready,
/// conditions PodReadyToStartContainers/Initialized/ContainersReady True and Ready per
/// [`apply_readiness`]. Conditions written by others (readiness gates, PodScheduled) are kept.
pub(crate) fn running_status(pod: &Pod, pod_ip: &str, host_ip: &str, now: &Time) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut status = base_status(pod, pod_ip, host_ip, now);
    let previous = pod.status.clone().unwrap_or_default();
    status.phase = Some("Running".into());
    status.reason = None;
    status.message = None;
    let containers = spec
        .containers
        .iter()
        .map(|c| {
            running_container_status(
                pod,
                c,
                status_of(previous.container_statuses.as_ref(), &c.name),
                now,
            )
        })
        .collect();
    status.container_statuses = Some(sorted(containers));
    let inits: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let prev = status_of(previous.init_container_statuses.as_ref(), &c.name);
            if is_restartable_init(c) {
                running_container_status(pod, c, prev, now)
            } else {
                completed_init_status(pod, c, prev, now)
            }
        })
        .collect();
    status.init_container_statuses = (!inits.is_empty()).then_some(inits);
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_true(&mut conditions, COND_READY_TO_START, now);
    set_true(&mut conditions, COND_INITIALIZED, now);
    status.conditions = Some(conditions);
    apply_readiness(pod, &mut status, now);
    status
}

fn waiting(c: &Container, reason: &str, message: Option<String>) -> ContainerStatus {
    ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        started: Some(false),
        restart_count: 0,
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.to_string()),
                message,
            }),
            ..Default::default()
        }),
        last_state: Some(ContainerState::default()),
        ..Default::default()
    }
}

/// The status of a pod whose images cannot be pulled: phase Pending, the first init container
/// (or every app container when there are none) waiting with `ErrImagePull` /
/// `ImagePullBackOff` and the runtime's message, the rest waiting `PodInitializing`.
pub(crate) fn image_pull_status(
    pod: &Pod,
    stage: ImagePullStage,
    pod_ip: &str,
    host_ip: &str,
    now: &Time,
) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut status = base_status(pod, pod_ip, host_ip, now);
    status.phase = Some("Pending".into());
    let failing = |c: &Container| {
        let image = c.image.clone().unwrap_or_default();
        match stage {
            ImagePullStage::ErrImagePull => waiting(
                c,
                "ErrImagePull",
                Some(format!(
                    "rpc error: code = NotFound desc = failed to pull and unpack image {image:?}: \
                     failed to resolve reference {image:?}: {image}: not found"
                )),
            ),
            ImagePullStage::BackOff => waiting(
                c,
                "ImagePullBackOff",
                Some(format!("Back-off pulling image {image:?}")),
            ),
        }
    };
    let inits: Vec<&Container> = spec.init_containers.iter().flatten().collect();
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_true(&mut conditions, COND_READY_TO_START, now);
    if let Some((first, rest)) = inits.split_first() {
        let mut statuses = vec![failing(first)];
        statuses.extend(rest.iter().map(|c| waiting(c, "PodInitializing", None)));
        status.init_container_statuses = Some(statuses);
        status.container_statuses = Some(sorted(
            spec.containers
                .iter()
                .map(|c| waiting(c, "PodInitializing", None))
                .collect(),
        ));
        let names: Vec<&str> = inits
            .iter()
            .filter(|c| !is_restartable_init(c))
            .map(|c| c.name.as_str())
            .collect();
        let message = format!("containers with incomplete status: [{}]", names.join(" "));
        set_condition(
            &mut conditions,
            COND_INITIALIZED,
            "False",
            Some("ContainersNotInitialized"),
            Some(&message),
            now,
        );
    } else {
        status.container_statuses = Some(sorted(spec.containers.iter().map(failing).collect()));
        set_true(&mut conditions, COND_INITIALIZED, now);
    }
    status.conditions = Some(conditions);
    apply_readiness(pod, &mut status, now);
    status
}

/// The status of a pod whose containers all exited: every running (or never started)
/// container and sidecar terminated with `exit_code` (`reason`, `message`), phase Succeeded for
/// exit code 0 and Failed otherwise, Ready/ContainersReady False (`PodCompleted`/`PodFailed`).
pub(crate) fn terminated_status(
    pod: &Pod,
    exit_code: i32,
    reason: &str,
    message: Option<&str>,
    now: &Time,
) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    let terminate = |cs: &ContainerStatus| -> ContainerStatus {
        let state = cs.state.clone().unwrap_or_default();
        if state.terminated.is_some() {
            return cs.clone();
        }
        let started_at = state.running.and_then(|r| r.started_at);
        let mut out = cs.clone();
        out.ready = false;
        out.started = Some(false);
        out.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                container_id: cs.container_id.clone(),
                exit_code,
                reason: Some(reason.to_string()),
                message: message.map(str::to_string),
                started_at,
                finished_at: Some(now.clone()),
                ..Default::default()
            }),
            ..Default::default()
        });
        out
    };
    let spec = pod.spec.clone().unwrap_or_default();
    let mut containers: Vec<ContainerStatus> = status.container_statuses.take().unwrap_or_default();
    for c in &spec.containers {
        if !containers.iter().any(|s| s.name == c.name) {
            containers.push(waiting(c, "ContainerCreating", None));
        }
    }
    status.container_statuses = Some(sorted(containers.iter().map(terminate).collect()));
    if let Some(inits) = status.init_container_statuses.take() {
        status.init_container_statuses = Some(inits.iter().map(terminate).collect());
    }
    status.phase = Some(
        if exit_code == 0 {
            "Succeeded"
        } else {
            "Failed"
        }
        .to_string(),
    );
    apply_readiness(pod, &mut status, now);
    status
}

/// The status PodGC writes before force-deleting a pod whose node is gone: phase Failed and
/// condition `DisruptionTarget=True`, reason `DeletionByPodGC`, message
/// `PodGC: node no longer exists` (kubernetes pkg/controller/podgc/gc_controller.go).
pub(crate) fn pod_gc_status(pod: &Pod, now: &Time) -> PodStatus {
    let mut status = pod.status.clone().unwrap_or_default();
    status.phase = Some("Failed".into());
    let mut conditions = status.conditions.take().unwrap_or_default();
    set_condition(
        &mut conditions,
        COND_DISRUPTION_TARGET,
        "True",
        Some("DeletionByPodGC"),
        Some("PodGC: node no longer exists"),
        now,
    );
    status.conditions = Some(conditions);
    status
}

fn remaining(total: Duration, elapsed: Duration) -> Option<Duration> {
    total.checked_sub(elapsed).filter(|d| !d.is_zero())
}

/// Decide the kubelet's next step for a pod bound to one of our nodes.
///
/// - Containers exited ([`KubeletInputs::exited`]) and the pod not yet Succeeded/Failed: its
///   containers terminated with that code (`Completed` for 0, else `Error`), whatever else
///   holds; the status manager keeps the latest status to report until a write succeeds
///   (pkg/kubelet/status/status_manager.go, `syncPod`).
/// - Being deleted: a pod that never ran or already ended is deleted at once; a running pod
///   keeps running until its grace period (× `grace_scale`) has passed since the deletion was
///   seen, then its containers are marked terminated (exit code 0) and the pod is deleted.
/// - Succeeded/Failed: nothing.
/// - Image pull stuck: `ErrImagePull` after `kubelet_delay`, `ImagePullBackOff` after twice that.
/// - Otherwise: Running after `kubelet_delay`; afterwards the status is kept in line with
///   [`running_status`] (so Ready follows readiness-gate changes).
pub(crate) fn decide(pod: &Pod, inputs: &KubeletInputs<'_>) -> KubeletAction {
    if let Some(code) = inputs.exited
        && !is_terminal(pod)
    {
        let reason = if code == 0 { "Completed" } else { "Error" };
        return KubeletAction::WriteStatus(Box::new(terminated_status(
            pod, code, reason, None, inputs.now,
        )));
    }
    if let Some(since) = inputs.since_deletion {
        if is_terminal(pod) || !has_running_containers(pod) {
            return KubeletAction::Delete;
        }
        let grace = scaled_grace(deletion_grace_seconds(pod), inputs.grace_scale);
        if let Some(wait) = remaining(grace, since) {
            return KubeletAction::WaitFor(wait);
        }
        return KubeletAction::WriteStatus(Box::new(terminated_status(
            pod,
            0,
            "Completed",
            None,
            inputs.now,
        )));
    }
    if is_terminal(pod) {
        return KubeletAction::Nothing;
    }
    let desired = if inputs.image_pull_stuck && phase(pod) != "Running" {
        if let Some(wait) = remaining(inputs.kubelet_delay, inputs.since_bound) {
            return KubeletAction::WaitFor(wait);
        }
        let stage = match remaining(inputs.kubelet_delay * 2, inputs.since_bound) {
            Some(_) => ImagePullStage::ErrImagePull,
            None => ImagePullStage::BackOff,
        };
        let current_reason = pod.status.as_ref().and_then(|s| {
            s.init_container_statuses
                .iter()
                .flatten()
                .chain(s.container_statuses.iter().flatten())
                .find_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
        });
        if stage == ImagePullStage::BackOff && current_reason.as_deref() == Some("ImagePullBackOff")
        {
            // Already backing off; keep the status (do not churn).
            return KubeletAction::Nothing;
        }
        let status = image_pull_status(pod, stage, inputs.pod_ip, inputs.host_ip, inputs.now);
        if stage == ImagePullStage::ErrImagePull && pod.status.as_ref() == Some(&status) {
            return KubeletAction::WaitFor(
                remaining(inputs.kubelet_delay * 2, inputs.since_bound).unwrap_or_default(),
            );
        }
        status
    } else {
        if let Some(wait) = remaining(inputs.kubelet_delay, inputs.since_bound) {
            return KubeletAction::WaitFor(wait);
        }
        running_status(pod, inputs.pod_ip, inputs.host_ip, inputs.now)
    };
    if pod.status.as_ref() == Some(&desired) {
        KubeletAction::Nothing
    } else {
        KubeletAction::WriteStatus(Box::new(desired))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    const GATE: &str = "kubevirt.io/virtual-machine-unpaused";

    fn t(secs: i64) -> Time {
        Time(
            k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + secs)
                .expect("valid timestamp"),
        )
    }

    /// The status a `WriteStatus` decision writes; panics with `expected` otherwise.
    fn written(action: KubeletAction, expected: &str) -> PodStatus {
        match action {
            KubeletAction::WriteStatus(s) => *s,
            other => panic!("{expected}, got {other:?}"),
        }
    }

    fn terminated(c: &ContainerStatus) -> Option<&ContainerStateTerminated> {
        c.state.as_ref().and_then(|s| s.terminated.as_ref())
    }

    /// The waiting state of the first (compute) container.
    fn compute_waiting(s: &PodStatus) -> ContainerStateWaiting {
        s.container_statuses.clone().unwrap_or_default()[0]
            .state
            .clone()
            .and_then(|s| s.waiting)
            .expect("waiting")
    }

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("quay.io/kubevirt/virt-launcher:v1.9.0".into()),
            ..Default::default()
        }
    }

    /// [`launcher_pod`] with `change` applied to its spec.
    fn launcher_pod_with(change: impl FnOnce(&mut PodSpec)) -> Pod {
        let mut pod = launcher_pod();
        if let Some(spec) = pod.spec.as_mut() {
            change(spec);
        }
        pod
    }

    fn launcher_pod() -> Pod {
        let mut sidecar = container("guest-console-log");
        sidecar.restart_policy = Some("Always".into());
        let mut compute = container("compute");
        compute.resources = Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "memory".to_string(),
                Quantity("300Mi".into()),
            )])),
            ..Default::default()
        });
        Pod {
            metadata: ObjectMeta {
                name: Some("virt-launcher-vm-a-abcde".into()),
                namespace: Some("default".into()),
                uid: Some("pod-uid".into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("sim-node-0".into()),
                containers: vec![compute],
                init_containers: Some(vec![sidecar, container("container-disk-binary")]),
                readiness_gates: Some(vec![PodReadinessGate {
                    condition_type: GATE.into(),
                }]),
                termination_grace_period_seconds: Some(60),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
        }
    }

    fn inputs<'a>(now: &'a Time) -> KubeletInputs<'a> {
        KubeletInputs {
            now,
            pod_ip: "10.244.0.2",
            host_ip: "10.89.0.2",
            since_bound: Duration::from_secs(1),
            since_deletion: None,
            kubelet_delay: Duration::from_millis(200),
            grace_scale: 0.01,
            image_pull_stuck: false,
            exited: None,
        }
    }

    fn cond<'a>(s: &'a PodStatus, type_: &str) -> &'a PodCondition {
        find_condition(Some(s), type_).unwrap_or_else(|| panic!("condition {type_} missing"))
    }

    fn with_gate(pod: &Pod, status: &str) -> Pod {
        let mut p = pod.clone();
        let s = p.status.get_or_insert_with(Default::default);
        let mut conds = s.conditions.take().unwrap_or_default();
        set_condition(&mut conds, GATE, status, Some("NotPaused"), None, &t(5));
        s.conditions = Some(conds);
        p
    }

    #[test]
    fn scaled_grace_multiplies_and_clamps() {
        assert_eq!(scaled_grace(60, 0.01), Duration::from_millis(600));
        assert_eq!(scaled_grace(30, 0.0), Duration::ZERO);
        assert_eq!(scaled_grace(-5, 1.0), Duration::ZERO);
        assert_eq!(scaled_grace(30, f64::NAN), Duration::ZERO);
        let mut p = launcher_pod();
        assert_eq!(deletion_grace_seconds(&p), 60);
        p.metadata.deletion_grace_period_seconds = Some(5);
        assert_eq!(deletion_grace_seconds(&p), 5);
        p.metadata.deletion_grace_period_seconds = None;
        if let Some(s) = p.spec.as_mut() {
            s.termination_grace_period_seconds = None;
        }
        assert_eq!(deletion_grace_seconds(&p), 30);
    }

    #[test]
    fn running_status_starts_every_container_and_sidecar() {
        let pod = launcher_pod();
        let s = running_status(&pod, "10.244.0.2", "10.89.0.2", &t(0));
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));
        assert_eq!(s.host_ip.as_deref(), Some("10.89.0.2"));
        assert_eq!(s.start_time, Some(t(0)));
        assert_eq!(s.qos_class.as_deref(), Some("Burstable"));
        let cs = s.container_statuses.clone().unwrap_or_default();
        assert_eq!(cs.len(), 1);
        assert!(cs[0].ready);
        assert!(
            cs[0]
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .is_some()
        );
        assert!(
            cs[0]
                .container_id
                .as_deref()
                .is_some_and(|id| id.starts_with("containerd://"))
        );
        let inits = s.init_container_statuses.clone().unwrap_or_default();
        let sidecar = inits
            .iter()
            .find(|c| c.name == "guest-console-log")
            .expect("sidecar status");
        assert!(sidecar.ready);
        assert!(
            sidecar
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .is_some()
        );
        let init = inits
            .iter()
            .find(|c| c.name == "container-disk-binary")
            .expect("init status");
        let term = terminated(init).expect("terminated");
        assert_eq!(term.exit_code, 0);
        assert_eq!(term.reason.as_deref(), Some("Completed"));
        assert_eq!(cond(&s, "Initialized").status, "True");
        assert_eq!(cond(&s, "ContainersReady").status, "True");
        assert_eq!(cond(&s, "PodReadyToStartContainers").status, "True");
    }

    #[test]
    fn ready_waits_for_the_readiness_gate() {
        let pod = launcher_pod();
        let s = running_status(&pod, "10.244.0.2", "10.89.0.2", &t(0));
        let ready = cond(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "corresponding condition of pod readiness gate \"kubevirt.io/virtual-machine-unpaused\" does not exist."
            )
        );

        let mut running = pod.clone();
        running.status = Some(s);
        let gated_false = with_gate(&running, "False");
        let s = running_status(&gated_false, "x", "10.89.0.2", &t(10));
        let ready = cond(&s, "Ready");
        assert_eq!(ready.status, "False");
        assert_eq!(
            ready.message.as_deref(),
            Some(
                "the status of pod readiness gate \"kubevirt.io/virtual-machine-unpaused\" is not \"True\", but False"
            )
        );

        let gated = with_gate(&running, "True");
        let s = running_status(&gated, "x", "10.89.0.2", &t(10));
        let ready = cond(&s, "Ready");
        assert_eq!(ready.status, "True");
        assert_eq!(ready.last_transition_time, Some(t(10)));
        // The gate condition written by virt-controller is kept, the pod IP is not reassigned.
        assert_eq!(cond(&s, GATE).status, "True");
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.0.2"));

        // decide() notices the gate flip and writes; afterwards it is quiet.
        let mut now_ready = gated.clone();
        let now = t(10);
        now_ready.status = Some(written(
            decide(&gated, &inputs(&now)),
            "expected a status write",
        ));
        let later = t(20);
        assert_eq!(decide(&now_ready, &inputs(&later)), KubeletAction::Nothing);
    }

    #[test]
    fn pod_without_gates_is_ready_with_containers() {
        let pod = launcher_pod_with(|s| s.readiness_gates = None);
        let s = running_status(&pod, "10.244.0.2", "10.89.0.2", &t(0));
        assert_eq!(cond(&s, "Ready").status, "True");
    }

    #[test]
    fn kubelet_waits_for_its_delay() {
        let pod = launcher_pod();
        let now = t(0);
        let mut i = inputs(&now);
        i.since_bound = Duration::from_millis(50);
        assert_eq!(
            decide(&pod, &i),
            KubeletAction::WaitFor(Duration::from_millis(150))
        );
        i.kubelet_delay = Duration::ZERO;
        i.since_bound = Duration::ZERO;
        assert!(matches!(decide(&pod, &i), KubeletAction::WriteStatus(_)));
    }

    #[test]
    fn terminating_pod_runs_out_its_scaled_grace_then_terminates_and_is_deleted() {
        let mut pod = launcher_pod();
        pod.status = Some(running_status(&pod, "10.244.0.2", "10.89.0.2", &t(0)));
        pod.metadata.deletion_timestamp = Some(t(60));
        pod.metadata.deletion_grace_period_seconds = Some(60);
        let now = t(1);
        let mut i = inputs(&now);
        i.since_deletion = Some(Duration::from_millis(100));
        // 60 s × 0.01 = 600 ms, 100 ms gone.
        assert_eq!(
            decide(&pod, &i),
            KubeletAction::WaitFor(Duration::from_millis(500))
        );
        i.since_deletion = Some(Duration::from_millis(600));
        let status = written(decide(&pod, &i), "expected terminated status");
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        for c in status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
        {
            assert!(terminated(c).is_some(), "{} terminated", c.name);
            if c.name != "container-disk-binary" {
                assert!(!c.ready, "{} not ready", c.name);
            }
        }
        assert_eq!(
            cond(&status, "Ready").reason.as_deref(),
            Some("PodCompleted")
        );
        pod.status = Some(status);
        assert_eq!(decide(&pod, &i), KubeletAction::Delete);
    }

    #[test]
    fn terminating_pod_that_never_ran_is_deleted_at_once() {
        let mut pod = launcher_pod();
        pod.metadata.deletion_timestamp = Some(t(60));
        let now = t(1);
        let mut i = inputs(&now);
        i.since_deletion = Some(Duration::ZERO);
        assert_eq!(decide(&pod, &i), KubeletAction::Delete);
    }

    #[test]
    fn failed_pod_is_left_alone() {
        let mut pod = launcher_pod();
        pod.status = Some(terminated_status(&pod, 1, "Error", Some("boom"), &t(0)));
        let st = pod.status.clone().unwrap_or_default();
        assert_eq!(st.phase.as_deref(), Some("Failed"));
        let compute = &st.container_statuses.clone().unwrap_or_default()[0];
        let term = terminated(compute).expect("terminated");
        assert_eq!(term.exit_code, 1);
        assert_eq!(term.reason.as_deref(), Some("Error"));
        assert_eq!(cond(&st, "Ready").reason.as_deref(), Some("PodFailed"));
        let now = t(1);
        assert_eq!(decide(&pod, &inputs(&now)), KubeletAction::Nothing);
    }

    #[test]
    fn exited_containers_are_reported_until_the_pod_has_ended() {
        let now = t(1);
        let mut i = inputs(&now);
        i.exited = Some(1);
        // Running, or still being deleted within its grace period: the exit is what counts.
        let running = with_gate(&launcher_pod(), "True");
        let mut deleting = running.clone();
        deleting.metadata.deletion_timestamp = Some(t(60));
        for (pod, since_deletion) in [(&running, None), (&deleting, Some(Duration::ZERO))] {
            i.since_deletion = since_deletion;
            let st = written(decide(pod, &i), "a Failed status");
            assert_eq!(st.phase.as_deref(), Some("Failed"));
            let compute = &st.container_statuses.clone().unwrap_or_default()[0];
            let term = terminated(compute).expect("terminated");
            assert_eq!((term.exit_code, term.reason.as_deref()), (1, Some("Error")));
        }
        // Once the status shows it, the kubelet has nothing more to say.
        let mut ended = running.clone();
        ended.status = Some(terminated_status(&running, 1, "Error", None, &now));
        i.since_deletion = None;
        assert_eq!(decide(&ended, &i), KubeletAction::Nothing);
        i.exited = Some(0);
        let st = written(decide(&running, &i), "a Succeeded status");
        assert_eq!(st.phase.as_deref(), Some("Succeeded"));
    }

    #[test]
    fn stuck_image_pull_goes_err_image_pull_then_back_off() {
        let mut pod = launcher_pod_with(|s| s.init_containers = None);
        let now = t(0);
        let mut i = inputs(&now);
        i.image_pull_stuck = true;
        i.since_bound = Duration::from_millis(250);
        let s = written(decide(&pod, &i), "expected ErrImagePull status");
        let w = compute_waiting(&s);
        assert_eq!(w.reason.as_deref(), Some("ErrImagePull"));
        assert!(
            w.message
                .unwrap_or_default()
                .contains("quay.io/kubevirt/virt-launcher:v1.9.0")
        );
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Ready").status, "False");
        pod.status = Some(s);
        // Same stage again: wait for the back-off.
        assert_eq!(
            decide(&pod, &i),
            KubeletAction::WaitFor(Duration::from_millis(150))
        );
        i.since_bound = Duration::from_millis(400);
        let s = written(decide(&pod, &i), "expected ImagePullBackOff status");
        let w = compute_waiting(&s);
        assert_eq!(w.reason.as_deref(), Some("ImagePullBackOff"));
        assert_eq!(
            w.message.as_deref(),
            Some("Back-off pulling image \"quay.io/kubevirt/virt-launcher:v1.9.0\"")
        );
        pod.status = Some(s);
        assert_eq!(decide(&pod, &i), KubeletAction::Nothing);
        // Fault cleared: the pod starts.
        i.image_pull_stuck = false;
        let s = written(decide(&pod, &i), "expected Running status");
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn image_pull_with_init_containers_blames_the_first_init_container() {
        let pod = launcher_pod();
        let s = image_pull_status(&pod, ImagePullStage::ErrImagePull, "ip", "host", &t(0));
        let inits = s.init_container_statuses.clone().unwrap_or_default();
        assert_eq!(
            inits[0]
                .state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref()),
            Some("ErrImagePull")
        );
        assert_eq!(cond(&s, "Initialized").status, "False");
    }

    #[test]
    fn pod_gc_marks_disruption_target() {
        let pod = launcher_pod();
        let s = pod_gc_status(&pod, &t(0));
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        let c = cond(&s, "DisruptionTarget");
        assert_eq!(c.reason.as_deref(), Some("DeletionByPodGC"));
        assert_eq!(c.message.as_deref(), Some("PodGC: node no longer exists"));
    }
}
