//! The volume binder's part for the claims of a pod the simulated scheduler just bound, on an API
//! server that has no PV controller (a bare kube-apiserver; [`super::NodeSimConfig::bind_claims`]).
//!
//! kube-scheduler's VolumeBinding plugin puts `volume.kubernetes.io/selected-node` on a
//! WaitForFirstConsumer claim of the pod it places, and the PV controller with a provisioner then
//! binds the claim to a volume on that node. Here both happen at once, with the rules and the
//! writes of the embedded server's binder ([`crate::sim::pvbinder`]): a claim that is Pending, not
//! held, and whose StorageClass binds on first consumer gets the binder's annotations with the
//! node, then status `Bound` with its access modes and requested size. Claims of other classes are
//! left to whoever binds them on that server.

use crate::sim::pvbinder::{Binding, binding, bound_annotations, bound_status};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use std::sync::Arc;

/// The claims `pod` mounts (`spec.volumes[].persistentVolumeClaim.claimName`).
fn claim_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect()
}

/// Bind the WaitForFirstConsumer claims of `pod`, which was just bound to `node`. The pod is read
/// afresh: the nodes' cache drops the volumes ([`super::cached_pod`]). Failures are logged and
/// left: the claim stays Pending, as when a provisioner fails.
pub(super) async fn bind_first_consumer_claims(client: &Client, pod: &Pod, node: &str) {
    let ns = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let Ok(Some(pod)) = pods.get_opt(&pod.name_any()).await else {
        return;
    };
    let names = claim_names(&pod);
    if names.is_empty() {
        return;
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let classes: Api<StorageClass> = Api::all(client.clone());
    let mut consumer = serde_json::to_value(&pod).unwrap_or_default();
    consumer["spec"]["nodeName"] = json!(node);
    let consumer = [Arc::new(consumer)];
    for name in names {
        let Ok(Some(claim)) = claims.get_opt(&name).await else {
            continue;
        };
        let class = claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.clone());
        let Some(Ok(Some(class))) = (match class {
            Some(c) if !c.is_empty() => Some(classes.get_opt(&c).await),
            _ => None,
        }) else {
            continue;
        };
        let claim = serde_json::to_value(&claim).unwrap_or_default();
        let class = [Arc::new(serde_json::to_value(&class).unwrap_or_default())];
        let Binding::Bindable(Some(selected)) = binding(&claim, &class, &consumer) else {
            continue;
        };
        if let Err(e) = bind(&claims, &name, &claim, &selected).await {
            tracing::debug!(claim = %format!("{ns}/{name}"), error = %e, "binding the claim failed");
        }
    }
}

/// The binder's two writes: the annotations, then the status.
async fn bind(
    claims: &Api<PersistentVolumeClaim>,
    name: &str,
    claim: &Value,
    node: &str,
) -> Result<(), kube::Error> {
    let params = PatchParams::default();
    let annotations = json!({"metadata": {"annotations": bound_annotations(Some(node))}});
    claims
        .patch(name, &params, &Patch::Merge(&annotations))
        .await?;
    let status = json!({"status": bound_status(claim)});
    claims
        .patch_status(name, &params, &Patch::Merge(&status))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claims_of_a_pod_are_its_claim_volumes() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "volumes": [
                {"name": "a", "persistentVolumeClaim": {"claimName": "disk"}},
                {"name": "b", "emptyDir": {}},
                {"name": "c", "persistentVolumeClaim": {"claimName": "data"}}
            ]}
        }))
        .expect("pod");
        assert_eq!(claim_names(&pod), ["disk", "data"]);
    }
}
