//! Pure helpers over virt-launcher pods, mirroring `pkg/controller/controller.go` and the small
//! pod predicates of `pkg/virt-controller/watch/vmi/lifecycle.go` (KubeVirt v1.9.0).
//!
//! Nothing here talks to an API server; every function reads a [`Pod`] as the informer cache
//! holds it. Absent optional fields behave like Go's zero values (an absent phase is `""`, an
//! absent container state is "not running, not terminated, not waiting").

use crate::api::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition};
use std::borrow::Borrow;

/// Name of the launcher's main container (`compute`).
pub(crate) const COMPUTE_CONTAINER: &str = "compute";
/// Istio's sidecar: only has to be running, never ready (controller.go:505-511).
pub(crate) const ISTIO_PROXY_CONTAINER: &str = "istio-proxy";
/// Marks a WaitForFirstConsumer "doppelganger" pod (`EphemeralProvisioningObject`,
/// types.go:1229). Such pods are not the VMI's launcher pod (lifecycle.go:1085-1088).
pub(crate) const EPHEMERAL_PROVISIONING_ANNOTATION: &str =
    crate::launcher::pod::EPHEMERAL_PROVISIONING_ANNOTATION;
/// Launcher supports unix-socket migrations (`MigrationTransportUnixAnnotation`,
/// types.go:1306).
pub(crate) const MIGRATION_TRANSPORT_UNIX_ANNOTATION: &str = "kubevirt.io/migrationTransportUnix";
/// `ErrImagePull` container waiting reason (`ErrImagePullReason`, controller.go:109).
pub(crate) const ERR_IMAGE_PULL_REASON: &str = "ErrImagePull";
/// `ImagePullBackOff` container waiting reason (`ImagePullBackOffReason`, controller.go:112).
pub(crate) const IMAGE_PULL_BACK_OFF_REASON: &str = "ImagePullBackOff";
/// Pod phase `Running`.
pub(crate) const POD_RUNNING: &str = "Running";
/// Pod phase `Succeeded`.
pub(crate) const POD_SUCCEEDED: &str = "Succeeded";
/// Pod phase `Failed`.
pub(crate) const POD_FAILED: &str = "Failed";
/// Pod QoS class `Guaranteed`.
pub(crate) const QOS_GUARANTEED: &str = "Guaranteed";

/// `pod.status.phase`, `""` when absent.
pub(crate) fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `pod.metadata.name`, `""` when absent.
pub(crate) fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

/// `pod.spec.nodeName`, `""` when absent.
pub(crate) fn pod_node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// `pod.metadata.uid`, `""` when absent.
pub(crate) fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// True when the pod has a `deletionTimestamp`.
pub(crate) fn is_pod_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// True when `owner_uid` is the UID of the pod's controller reference (the first owner reference
/// with `controller: true`) — `metav1.IsControlledBy`.
pub(crate) fn is_controlled_by(pod: &Pod, owner_uid: &str) -> bool {
    pod.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
        .is_some_and(|r| r.uid == owner_uid)
}

/// The pods among `pods` controlled by the VMI (controller reference UID = VMI UID), in input
/// order.
pub(crate) fn pods_controlled_by<'a, P: Borrow<Pod>>(
    vmi: &'a VirtualMachineInstance,
    pods: &'a [P],
) -> impl Iterator<Item = &'a Pod> + 'a {
    let uid = vmi.metadata.uid.as_deref().unwrap_or("");
    pods.iter()
        .map(Borrow::borrow)
        .filter(move |p| is_controlled_by(p, uid))
}

/// The VMI's current pod (`CurrentVMIPod`, controller.go:323-359): among the pods controlled by
/// the VMI, ignoring pods on another node than `status.nodeName` when that is set, the one with
/// the newest `creationTimestamp` (the first one wins a tie; an absent timestamp is oldest).
pub(crate) fn current_vmi_pod<'a, P: Borrow<Pod>>(
    vmi: &'a VirtualMachineInstance,
    pods: &'a [P],
) -> Option<&'a Pod> {
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("");
    let mut current: Option<&Pod> = None;
    for pod in pods_controlled_by(vmi, pods) {
        if !node.is_empty() && node != pod_node_name(pod) {
            continue;
        }
        let newer = match current {
            None => true,
            Some(cur) => {
                cur.metadata.creation_timestamp.as_ref().map(|t| t.0)
                    < pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
            }
        };
        if newer {
            current = Some(pod);
        }
    }
    current
}

fn container_statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
}

fn init_container_statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_deref())
        .unwrap_or_default()
}

fn is_running(cs: &ContainerStatus) -> bool {
    cs.state.as_ref().is_some_and(|s| s.running.is_some())
}

/// Phase `Succeeded` or `Failed` (`PodIsDown`, controller.go:547-549; also `isPodFinal`,
/// lifecycle.go:1013-1015).
pub(crate) fn pod_is_down(pod: &Pod) -> bool {
    matches!(pod_phase(pod), POD_SUCCEEDED | POD_FAILED)
}

/// The `compute` container has terminated (`isComputeContainerDown`, controller.go:529-536).
pub(crate) fn is_compute_container_down(pod: &Pod) -> bool {
    container_statuses(pod)
        .iter()
        .find(|c| c.name == COMPUTE_CONTAINER)
        .is_some_and(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()))
}

/// The `compute` container terminated with a non-zero exit code
/// (`isComputeContainerFailed`, controller.go:538-545).
pub(crate) fn is_compute_container_failed(pod: &Pod) -> bool {
    container_statuses(pod)
        .iter()
        .find(|c| c.name == COMPUTE_CONTAINER)
        .is_some_and(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code != 0)
        })
}

/// Down, compute container terminated, or being deleted (`IsPodDownOrGoingDown`,
/// controller.go:521-523).
pub(crate) fn is_pod_down_or_going_down(pod: &Pod) -> bool {
    pod_is_down(pod) || is_compute_container_down(pod) || is_pod_deleting(pod)
}

/// Phase `Failed`, compute container failed, or being deleted (`IsPodFailedOrGoingDown`,
/// controller.go:525-527).
pub(crate) fn is_pod_failed_or_going_down(pod: &Pod) -> bool {
    pod_phase(pod) == POD_FAILED || is_compute_container_failed(pod) || is_pod_deleting(pod)
}

/// Ready to be handed over to virt-handler (`IsPodReady`, controller.go:492-519): not down or
/// going down; `compute` and `istio-proxy` running (their readiness is not required); every
/// other container ready; pod phase `Running`.
pub(crate) fn is_pod_ready(pod: &Pod) -> bool {
    if is_pod_down_or_going_down(pod) {
        return false;
    }
    for cs in container_statuses(pod) {
        let ok = if cs.name == COMPUTE_CONTAINER || cs.name == ISTIO_PROXY_CONTAINER {
            is_running(cs)
        } else {
            cs.ready
        };
        if !ok {
            return false;
        }
    }
    pod_phase(pod) == POD_RUNNING
}

/// A WaitForFirstConsumer temporary pod (`isTempPod`, lifecycle.go:1085-1088).
pub(crate) fn is_temp_pod(pod: &Pod) -> bool {
    has_annotation(pod, EPHEMERAL_PROVISIONING_ANNOTATION)
}

/// The pod announces unix-socket migrations (`shouldSetMigrationTransport`,
/// lifecycle.go:1090-1093).
pub(crate) fn should_set_migration_transport(pod: &Pod) -> bool {
    has_annotation(pod, MIGRATION_TRANSPORT_UNIX_ANNOTATION)
}

/// True when the pod carries the annotation (any value).
pub(crate) fn has_annotation(pod: &Pod, key: &str) -> bool {
    annotation(pod, key).is_some()
}

/// A pod annotation's value.
pub(crate) fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    crate::api::annotation(&pod.metadata, key)
}

/// `pod.status.qosClass`, `None` when absent or empty.
pub(crate) fn pod_qos_class(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .filter(|q| !q.is_empty())
}

/// Image of the first container named `compute` in `pod.spec.containers`, `""` when there is
/// none (lifecycle.go:287-294).
pub(crate) fn compute_container_image(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == COMPUTE_CONTAINER))
        .and_then(|c| c.image.as_deref())
        .unwrap_or("")
}

/// A pod condition by type (`PodConditionManager.GetCondition`, conditions.go:319-329).
pub(crate) fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == type_)
}

/// An image pull failure found in a container status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ImagePullError {
    /// Container name (may be empty in synthetic statuses).
    pub container: String,
    /// `ErrImagePull` or `ImagePullBackOff`.
    pub reason: String,
    /// The waiting state's message (`""` when absent).
    pub message: String,
    /// True when found among `initContainerStatuses`.
    pub init_container: bool,
}

/// The first init container, then regular container, waiting with reason `ErrImagePull` or
/// `ImagePullBackOff` (`checkForContainerImageError`, lifecycle.go:978-992).
pub(crate) fn container_image_error(pod: &Pod) -> Option<ImagePullError> {
    let init = init_container_statuses(pod).iter().map(|c| (c, true));
    let regular = container_statuses(pod).iter().map(|c| (c, false));
    for (cs, init_container) in init.chain(regular) {
        let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = waiting.reason.as_deref().unwrap_or("");
        if reason == ERR_IMAGE_PULL_REASON || reason == IMAGE_PULL_BACK_OFF_REASON {
            return Some(ImagePullError {
                container: cs.name.clone(),
                reason: reason.to_string(),
                message: waiting.message.clone().unwrap_or_default(),
                init_container,
            });
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
        ContainerStateWaiting, PodSpec, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    pub(crate) fn ts(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid test timestamp"))
    }

    pub(crate) fn running() -> Option<ContainerState> {
        Some(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        })
    }

    pub(crate) fn terminated(code: i32) -> Option<ContainerState> {
        Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    pub(crate) fn status(
        name: &str,
        state: Option<ContainerState>,
        ready: bool,
    ) -> ContainerStatus {
        ContainerStatus {
            name: name.to_string(),
            state,
            ready,
            ..Default::default()
        }
    }

    /// Like KubeVirt's `newPodForVirtualMachine` (vmi_test.go:5426-5458): owned by VMI uid
    /// `1234`, compute container running but not ready.
    pub(crate) fn launcher_pod(phase: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("test".into()),
                namespace: Some("default".into()),
                uid: Some("virt-launch-uid".into()),
                owner_references: Some(vec![OwnerReference {
                    api_version: "kubevirt.io/v1".into(),
                    kind: "VirtualMachineInstance".into(),
                    name: "testvmi".into(),
                    uid: "1234".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "compute".into(),
                    image: Some("launcher:v1".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![status("compute", running(), false)]),
                ..Default::default()
            }),
        }
    }

    fn vmi_with_uid(uid: &str) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::default();
        vmi.metadata.uid = Some(uid.into());
        vmi
    }

    fn set_statuses(pod: &mut Pod, statuses: Vec<ContainerStatus>) {
        if let Some(s) = pod.status.as_mut() {
            s.container_statuses = Some(statuses);
        }
    }

    // vmi_test.go:1432-1462 "should hand over pod to virt-handler if pod is ready and running"
    // and vmi_test.go:1463-1486 "should not hand over pod to virt-handler if pod is ready and
    // running" (an unready infra container).
    #[test]
    fn readiness_of_a_running_pod_follows_its_containers() {
        let cases = [
            (
                "running compute, no infra container",
                vec![status("compute", running(), false)],
                true,
            ),
            (
                "running compute, unready istio-proxy",
                vec![
                    status("compute", running(), false),
                    status("istio-proxy", running(), false),
                ],
                true,
            ),
            (
                "unready infra container",
                vec![
                    status("compute", running(), false),
                    status("infra", running(), false),
                ],
                false,
            ),
            (
                "compute not running",
                vec![status("compute", None, true)],
                false,
            ),
        ];
        for (case, statuses, ready) in cases {
            let mut pod = launcher_pod(POD_RUNNING);
            set_statuses(&mut pod, statuses);
            assert_eq!(is_pod_ready(&pod), ready, "{case}");
        }
    }

    #[test]
    fn not_ready_unless_phase_running() {
        for phase in ["Pending", "Unknown", "Succeeded", "Failed", ""] {
            assert!(!is_pod_ready(&launcher_pod(phase)), "phase {phase:?}");
        }
    }

    #[test]
    fn deleting_pod_is_going_down_and_not_ready() {
        let mut pod = launcher_pod(POD_RUNNING);
        pod.metadata.deletion_timestamp = Some(ts(100));
        assert!(is_pod_down_or_going_down(&pod));
        assert!(is_pod_failed_or_going_down(&pod));
        assert!(!is_pod_ready(&pod));
    }

    #[test]
    fn compute_terminated_zero_is_down_but_not_failed() {
        let mut pod = launcher_pod("Pending");
        set_statuses(&mut pod, vec![status("compute", terminated(0), false)]);
        assert!(is_pod_down_or_going_down(&pod));
        assert!(!is_pod_failed_or_going_down(&pod));
        set_statuses(&mut pod, vec![status("compute", terminated(2), false)]);
        assert!(is_pod_failed_or_going_down(&pod));
    }

    #[test]
    fn succeeded_pod_is_down_not_failed() {
        let pod = launcher_pod(POD_SUCCEEDED);
        assert!(pod_is_down(&pod));
        assert!(is_pod_down_or_going_down(&pod));
        assert!(!is_pod_failed_or_going_down(&pod));
        assert!(is_pod_failed_or_going_down(&launcher_pod(POD_FAILED)));
    }

    #[test]
    fn current_pod_is_newest_controlled_pod() {
        let vmi = vmi_with_uid("1234");
        let mut old = launcher_pod(POD_RUNNING);
        old.metadata.name = Some("old".into());
        old.metadata.creation_timestamp = Some(ts(10));
        let mut new = old.clone();
        new.metadata.name = Some("new".into());
        new.metadata.creation_timestamp = Some(ts(20));
        let mut foreign = old.clone();
        foreign.metadata.name = Some("foreign".into());
        foreign.metadata.creation_timestamp = Some(ts(30));
        if let Some(refs) = foreign.metadata.owner_references.as_mut() {
            refs[0].uid = "other".into();
        }
        let pods = vec![old, new, foreign];
        assert_eq!(current_vmi_pod(&vmi, &pods).map(pod_name), Some("new"));
    }

    #[test]
    fn current_pod_respects_status_node_name() {
        let mut vmi = vmi_with_uid("1234");
        vmi.status = Some(crate::api::vmi::VirtualMachineInstanceStatus {
            node_name: Some("node-a".into()),
            ..Default::default()
        });
        let mut on_a = launcher_pod(POD_RUNNING);
        on_a.metadata.name = Some("on-a".into());
        on_a.metadata.creation_timestamp = Some(ts(10));
        if let Some(s) = on_a.spec.as_mut() {
            s.node_name = Some("node-a".into());
        }
        let mut on_b = on_a.clone();
        on_b.metadata.name = Some("on-b".into());
        on_b.metadata.creation_timestamp = Some(ts(20));
        if let Some(s) = on_b.spec.as_mut() {
            s.node_name = Some("node-b".into());
        }
        let pods = vec![on_a, on_b];
        assert_eq!(current_vmi_pod(&vmi, &pods).map(pod_name), Some("on-a"));
    }

    #[test]
    fn non_controller_owner_reference_does_not_count() {
        let mut pod = launcher_pod(POD_RUNNING);
        if let Some(refs) = pod.metadata.owner_references.as_mut() {
            refs[0].controller = Some(false);
        }
        assert!(!is_controlled_by(&pod, "1234"));
    }

    #[test]
    fn image_pull_error_in_init_container_comes_first() {
        let mut pod = launcher_pod("Pending");
        let waiting = |reason: &str, msg: &str| {
            Some(ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.into()),
                    message: Some(msg.into()),
                }),
                ..Default::default()
            })
        };
        set_statuses(
            &mut pod,
            vec![status(
                "compute",
                waiting("ErrImagePull", "compute msg"),
                false,
            )],
        );
        let e = container_image_error(&pod).expect("compute error");
        assert_eq!(
            (e.reason.as_str(), e.message.as_str(), e.init_container),
            ("ErrImagePull", "compute msg", false)
        );
        if let Some(s) = pod.status.as_mut() {
            s.init_container_statuses = Some(vec![status(
                "container-disk-binary",
                waiting("ImagePullBackOff", "init msg"),
                false,
            )]);
        }
        let e = container_image_error(&pod).expect("init error");
        assert_eq!(
            (e.reason.as_str(), e.message.as_str(), e.init_container),
            ("ImagePullBackOff", "init msg", true)
        );
    }

    #[test]
    fn other_waiting_reasons_are_not_image_errors() {
        let mut pod = launcher_pod("Pending");
        set_statuses(
            &mut pod,
            vec![status(
                "compute",
                Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some("ContainerCreating".into()),
                        message: None,
                    }),
                    ..Default::default()
                }),
                false,
            )],
        );
        assert_eq!(container_image_error(&pod), None);
    }

    #[test]
    fn qos_and_image_reads() {
        let mut pod = launcher_pod(POD_RUNNING);
        assert_eq!(pod_qos_class(&pod), None);
        if let Some(s) = pod.status.as_mut() {
            s.qos_class = Some("Burstable".into());
        }
        assert_eq!(pod_qos_class(&pod), Some("Burstable"));
        assert_eq!(compute_container_image(&pod), "launcher:v1");
        pod.spec = None;
        assert_eq!(compute_container_image(&pod), "");
    }
}
