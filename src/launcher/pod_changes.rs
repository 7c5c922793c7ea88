//! Was a launcher pod's spec changed after it was created? For `explain-overhead`'s likely
//! cause, when the pod's resources differ from the rendering its own overhead annotation
//! implies and no cluster setting explains it.
//!
//! `metadata.generation` alone cannot tell: it starts at 1 (pkg/registry/core/pod/strategy.go,
//! `PrepareForCreate`) and every change of the spec bumps it (`updatePodGeneration`), including
//! changes nobody made by hand. So the pod is compared with what the renderer makes of its
//! VMI, and the bumps its visible state accounts for are subtracted:
//!
//! - the binding (`spec.nodeName`): kube-apiserver's `pods/binding` writes storage directly and
//!   does not bump it (pkg/registry/core/pod/storage/storage.go, `assignPod`), but other API
//!   servers have, so a bound pod may owe one bump to it;
//! - the start of a graceful deletion (`metadata.deletionTimestamp`: apiserver
//!   pkg/registry/rest/delete.go, `BeforeDelete`);
//! - each ephemeral container (`kubectl debug`, through `pods/ephemeralcontainers`);
//! - each toleration the renderer did not write and the `DefaultTolerationSeconds` admission
//!   plugin did not add at creation (tolerations can only be added by update);
//! - an `activeDeadlineSeconds` the renderer did not write.
//!
//! The kubelet writes only `status` (no bump); admission defaults (the ServiceAccount token
//! volume, priority, `enableServiceLinks`, …) are set at creation (no bump either). What is
//! left over is a spec update nothing visible explains: an in-place resize (`pods/resize`,
//! the only way to change a container's resources after creation) or an image update. A resize
//! under way shows in the status: a `PodResizePending` / `PodResizeInProgress` condition, the
//! older `status.resize`, or the kubelet reporting other resources for the container than its
//! spec asks for.

use super::containers::compute_container;
use crate::api::quantity::ParsedQuantity;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements, Toleration};
use std::collections::BTreeMap;

/// Taints whose NoExecute tolerations `DefaultTolerationSeconds` adds to every pod at creation
/// (plugin/pkg/admission/defaulttolerationseconds).
const DEFAULT_TOLERATION_TAINTS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// What the pod tells about changes to its spec since it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SpecHistory {
    /// A resize of its containers is under way; the text says what shows it.
    Resizing(String),
    /// `metadata.generation` is above what creation and the visible changes account for.
    Updated {
        /// The pod's `metadata.generation`.
        generation: i64,
        /// The most the visible changes account for (creation included).
        accounted: i64,
    },
    /// Nothing shows a change of the spec after creation. `accounted` names the visible
    /// changes that may have bumped `metadata.generation` (empty when it is 1 or unset).
    Unchanged {
        /// The pod's `metadata.generation` (0 when the server sets none).
        generation: i64,
        /// The visible changes that account for a generation above 1.
        accounted: Vec<String>,
    },
}

/// Read `pod`'s history against `rendered`, what the renderer makes of its VMI today (`None`
/// when it cannot render it: then every toleration and deadline counts as a possible update).
pub(crate) fn spec_history(pod: &Pod, rendered: Option<&Pod>) -> SpecHistory {
    if let Some(evidence) = resize_under_way(pod) {
        return SpecHistory::Resizing(evidence);
    }
    let generation = pod.metadata.generation.unwrap_or(0);
    let accounted = accounted_bumps(pod, rendered);
    let most = 1 + accounted.iter().map(|(n, _)| n).sum::<i64>();
    if generation > most {
        return SpecHistory::Updated {
            generation,
            accounted: most,
        };
    }
    SpecHistory::Unchanged {
        generation,
        accounted: if generation > 1 {
            accounted.into_iter().map(|(_, why)| why).collect()
        } else {
            Vec::new()
        },
    }
}

/// What in the status shows a resize of the pod under way, if anything.
fn resize_under_way(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let condition = status.conditions.iter().flatten().find(|c| {
        matches!(c.type_.as_str(), "PodResizePending" | "PodResizeInProgress") && c.status == "True"
    });
    if let Some(c) = condition {
        return Some(format!("its {} condition", c.type_));
    }
    if let Some(resize) = status.resize.as_deref().filter(|r| !r.is_empty()) {
        return Some(format!("its status.resize {resize:?}"));
    }
    let spec = compute_container(pod)?.resources.as_ref();
    let applied = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == "compute")?
        .resources
        .as_ref()?;
    // Only what both sides name: the kubelet reports what it enacted, which may leave out
    // what it does not manage.
    let amounts = |r: Option<&ResourceRequirements>, side: &str| {
        let m = r.and_then(|r| {
            if side == "requests" {
                r.requests.clone()
            } else {
                r.limits.clone()
            }
        });
        m.unwrap_or_default()
            .into_iter()
            .filter(|(name, _)| name == "cpu" || name == "memory")
            .map(|(name, q)| (name, ParsedQuantity::parse(&q.0).ok()))
            .collect::<BTreeMap<_, _>>()
    };
    let differs = |side: &str| {
        let (want, enacted) = (amounts(spec, side), amounts(Some(applied), side));
        enacted
            .iter()
            .any(|(name, q)| want.get(name).is_some_and(|w| w != q))
    };
    (differs("requests") || differs("limits"))
        .then(|| "the kubelet reporting other CPU/memory for compute than its spec".to_string())
}

/// The visible changes that may each have bumped `metadata.generation` since creation, with how
/// many bumps each accounts for at most.
fn accounted_bumps(pod: &Pod, rendered: Option<&Pod>) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let spec = pod.spec.as_ref();
    if spec
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        out.push((1, "the binding (spec.nodeName)".to_string()));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        out.push((1, "the start of its deletion".to_string()));
    }
    let ephemeral = spec.map_or(0, |s| s.ephemeral_containers.iter().flatten().count());
    if ephemeral > 0 {
        out.push((
            ephemeral as i64,
            format!("{ephemeral} ephemeral container(s)"),
        ));
    }
    let rendered_spec = rendered.and_then(|p| p.spec.as_ref());
    let rendered_tolerations: Vec<&Toleration> = rendered_spec
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .collect();
    let added = spec
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| !rendered_tolerations.contains(t) && !is_default_toleration(t))
        .count();
    if added > 0 {
        out.push((added as i64, format!("{added} added toleration(s)")));
    }
    let deadline = spec.and_then(|s| s.active_deadline_seconds);
    if deadline.is_some() && deadline != rendered_spec.and_then(|s| s.active_deadline_seconds) {
        out.push((1, "spec.activeDeadlineSeconds".to_string()));
    }
    out
}

/// A toleration `DefaultTolerationSeconds` adds at creation.
fn is_default_toleration(t: &Toleration) -> bool {
    t.key
        .as_deref()
        .is_some_and(|k| DEFAULT_TOLERATION_TAINTS.contains(&k))
        && t.effect.as_deref() == Some("NoExecute")
        && t.operator.as_deref() == Some("Exists")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(v: Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "virt-launcher-v-abcde", "generation": 1},
            "spec": {"containers": [{"name": "compute", "image": "launcher",
                     "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}}]}
        });
        json_patch::merge(&mut base, &v);
        serde_json::from_value(base).unwrap()
    }

    fn rendered() -> Pod {
        pod(json!({"spec": {"tolerations": [{"key": "vmi", "operator": "Exists"}]}}))
    }

    #[test]
    fn a_bound_running_pod_with_admission_defaults_was_not_updated() {
        // Bound, run by the kubelet, defaulted at admission; a server that bumped the
        // generation for the binding.
        let p = pod(json!({
            "metadata": {"generation": 2},
            "spec": {"nodeName": "node-1", "priority": 0, "enableServiceLinks": true,
                     "tolerations": [
                         {"key": "vmi", "operator": "Exists"},
                         {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                          "effect": "NoExecute", "tolerationSeconds": 300},
                         {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                          "effect": "NoExecute", "tolerationSeconds": 300}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "compute", "image": "launcher",
                       "imageID": "", "ready": true, "restartCount": 0,
                       "resources": {"requests": {"cpu": "0.1", "memory": "1024Mi"}}}]}
        }));
        assert_eq!(
            spec_history(&p, Some(&rendered())),
            SpecHistory::Unchanged {
                generation: 2,
                accounted: vec!["the binding (spec.nodeName)".to_string()]
            }
        );
    }

    #[test]
    fn bumps_beyond_the_visible_changes_are_an_update() {
        let p = pod(
            json!({"metadata": {"generation": 3, "deletionTimestamp": "2026-01-01T00:00:00Z"},
                           "spec": {"nodeName": "node-1"}}),
        );
        assert!(matches!(
            spec_history(&p, Some(&rendered())),
            SpecHistory::Unchanged { generation: 3, .. }
        ));
        let p = pod(
            json!({"metadata": {"generation": 4, "deletionTimestamp": "2026-01-01T00:00:00Z"},
                           "spec": {"nodeName": "node-1"}}),
        );
        assert_eq!(
            spec_history(&p, Some(&rendered())),
            SpecHistory::Updated {
                generation: 4,
                accounted: 3
            }
        );
        // A hand-added toleration and a debug container account for their own bumps.
        let p = pod(json!({"metadata": {"generation": 3},
                           "spec": {"tolerations": [{"key": "mine", "operator": "Exists"}],
                                    "ephemeralContainers": [{"name": "debug", "image": "busybox"}]}}));
        assert!(matches!(
            spec_history(&p, Some(&rendered())),
            SpecHistory::Unchanged { .. }
        ));
        // Without a rendering, the rendered toleration counts as a possible addition too.
        let p = pod(json!({"metadata": {"generation": 2},
                           "spec": {"tolerations": [{"key": "vmi", "operator": "Exists"}]}}));
        assert!(matches!(
            spec_history(&p, Some(&rendered())),
            SpecHistory::Updated { .. }
        ));
        assert!(matches!(
            spec_history(&p, None),
            SpecHistory::Unchanged { .. }
        ));
    }

    #[test]
    fn a_resize_under_way_shows_in_the_status() {
        let p = pod(
            json!({"status": {"conditions": [{"type": "PodResizeInProgress", "status": "True"}]}}),
        );
        assert_eq!(
            spec_history(&p, None),
            SpecHistory::Resizing("its PodResizeInProgress condition".into())
        );
        let p = pod(
            json!({"status": {"containerStatuses": [{"name": "compute", "image": "launcher",
                           "imageID": "", "ready": true, "restartCount": 0,
                           "resources": {"requests": {"cpu": "100m", "memory": "2Gi"}}}]}}),
        );
        assert!(
            matches!(spec_history(&p, None), SpecHistory::Resizing(e) if e.contains("kubelet reporting"))
        );
    }
}
