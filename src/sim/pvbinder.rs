//! The embedded cluster's PersistentVolumeClaim binder: what kube-controller-manager's
//! PV controller (`pkg/controller/volume/persistentvolume/pv_controller.go`, `syncUnboundClaim`
//! → `bind`) and a dynamic provisioner do for a claim, without PersistentVolume objects.
//!
//! A new claim is `status.phase: Pending` (the create default of `persistentvolumeclaims`);
//! after [`super::ApiServerConfig::pvc_bind_delay`] the binder marks it bound as the PV
//! controller's `bindClaimToVolume` / `updateClaimStatus` do: annotations
//! `pv.kubernetes.io/bind-completed: "yes"` and `pv.kubernetes.io/bound-by-controller: "yes"`,
//! then `status.phase: Bound`, `status.accessModes` from the claim's `spec.accessModes` and
//! `status.capacity.storage` from its `spec.resources.requests.storage` (a provisioned volume
//! is exactly the size asked for). `spec.volumeName` is left empty: there is no volume object.
//!
//! Claims that stay Pending, as on a real cluster:
//! - `spec.storageClassName` names a StorageClass that does not exist (no provisioner: the PV
//!   controller waits, "storageclass.storage.k8s.io \"x\" not found"), or is `""` (only a
//!   pre-created PV could bind it, and there are none); an unset class binds, as if the
//!   cluster had a default class;
//! - the StorageClass has `volumeBindingMode: WaitForFirstConsumer`: Pending until a pod using
//!   the claim (`spec.volumes[].persistentVolumeClaim.claimName`) is bound to a node; the
//!   claim gets `volume.kubernetes.io/selected-node: <node>` at once (the scheduler's
//!   annotation, `pkg/controller/volume/persistentvolume/util` `AnnSelectedNode`) and binds
//!   after the delay, whether or not that pod is still there (a provisioner goes on; a VMI's
//!   WaitForFirstConsumer temporary pod is deleted once it ran); a claim that already has the
//!   annotation binds on that node;
//! - the claim carries the annotation [`HOLD_ANNOTATION`]`: "true"` (the simulator's own knob;
//!   removing it lets the claim bind).
//!
//! Writes appear in the audit log with user agent [`BINDER_USER_AGENT`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::audit::AuditLog;
use super::gc::{answer_of, record_write};
use super::object;
use super::selector::Filter;
use super::store::{ObjKey, Store, Sub, WatchFrom};

/// User agent of the binder's writes in the audit log.
pub const BINDER_USER_AGENT: &str =
    "kube-controller-manager/v1.33.0 (sim) persistentvolume-binder-controller";

/// A claim with this annotation set to `"true"` stays Pending.
pub const HOLD_ANNOTATION: &str = "sim.virtctl-rs.io/hold-binding";

/// The scheduler's annotation naming the node of a WaitForFirstConsumer claim (`AnnSelectedNode`).
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// How a claim stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Already Bound (or being deleted): nothing to do.
    Done,
    /// Stays Pending for now (the reason, for logs).
    Pending(&'static str),
    /// Can be bound; `Some(node)` for a WaitForFirstConsumer claim whose consumer was
    /// scheduled there.
    Bindable(Option<String>),
}

/// Whether `pvc` can be bound, given the StorageClasses and the pods of its namespace.
pub(crate) fn binding(pvc: &Value, classes: &[Arc<Value>], pods: &[Arc<Value>]) -> Binding {
    if object::is_deleting(pvc) || pvc["status"]["phase"] == "Bound" {
        return Binding::Done;
    }
    if pvc["metadata"]["annotations"][HOLD_ANNOTATION] == "true" {
        return Binding::Pending("held by annotation");
    }
    let class = match pvc["spec"]["storageClassName"].as_str() {
        None => return Binding::Bindable(None),
        Some("") => return Binding::Pending("no class and no volume to bind"),
        Some(c) => c,
    };
    let Some(sc) = classes.iter().find(|sc| object::name(sc) == class) else {
        return Binding::Pending("storage class not found");
    };
    if sc["volumeBindingMode"] != "WaitForFirstConsumer" {
        return Binding::Bindable(None);
    }
    if let Some(node) = pvc["metadata"]["annotations"][SELECTED_NODE].as_str() {
        return Binding::Bindable(Some(node.to_string()));
    }
    let name = object::name(pvc);
    let consumer = pods.iter().find(|p| {
        p["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
            && p["spec"]["volumes"].as_array().is_some_and(|vols| {
                vols.iter()
                    .any(|v| v["persistentVolumeClaim"]["claimName"] == name)
            })
    });
    match consumer {
        Some(p) => Binding::Bindable(p["spec"]["nodeName"].as_str().map(str::to_string)),
        None => Binding::Pending("waiting for first consumer"),
    }
}

/// Run until `stop`: bind claims `delay` after they become bindable.
pub(crate) async fn run(
    store: Arc<Store>,
    audit: Arc<AuditLog>,
    delay: Duration,
    stop: CancellationToken,
) {
    let reg = store.registry().clone();
    let (Some(pvcs), Some(pods)) = (reg.core("persistentvolumeclaims"), reg.core("pods")) else {
        return;
    };
    let classes = reg.find("storage.k8s.io", "v1", "storageclasses");
    let watch = |res| store.watch(res, None, WatchFrom::Current).ok();
    let (Some(mut pvc_rx), Some(mut pod_rx)) = (watch(pvcs), watch(pods)) else {
        return;
    };
    let mut sc_rx = classes.and_then(watch);
    // Claims bindable since (due, selected node).
    let mut due: BTreeMap<ObjKey, (Instant, Option<String>)> = BTreeMap::new();
    let mut pending = true;
    loop {
        let next = due
            .values()
            .map(|(at, _)| *at)
            .min()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        let mut rescan = false;
        tokio::select! {
            _ = stop.cancelled() => return,
            ev = pvc_rx.rx.recv() => match ev { Some(_) => rescan = true, None => return },
            ev = pod_rx.rx.recv() => match ev {
                // Pods matter only while a claim waits.
                Some(_) => rescan = pending,
                None => return,
            },
            ev = async { match sc_rx.as_mut() { Some(r) => r.rx.recv().await, None => std::future::pending().await } } => {
                rescan = ev.is_some();
            }
            _ = tokio::time::sleep_until(next) => {}
        }
        let all = Filter::default();
        if rescan {
            let Ok(claims) = store.list(pvcs, None, &all, 0, None) else {
                continue;
            };
            let scs = classes
                .and_then(|c| store.list(c, None, &all, 0, None).ok())
                .map(|p| p.items)
                .unwrap_or_default();
            pending = false;
            let mut still_due = BTreeMap::new();
            for pvc in &claims.items {
                let key = ObjKey {
                    res: pvcs,
                    ns: object::namespace(pvc).to_string(),
                    name: object::name(pvc).to_string(),
                };
                let consumers = store
                    .list(pods, Some(&key.ns), &all, 0, None)
                    .map(|p| p.items)
                    .unwrap_or_default();
                match binding(pvc, &scs, &consumers) {
                    Binding::Done => {}
                    Binding::Pending(_) => pending = true,
                    Binding::Bindable(node) => {
                        pending = true;
                        if let Some(node) = node.as_deref()
                            && pvc["metadata"]["annotations"][SELECTED_NODE].is_null()
                        {
                            select_node(&store, &audit, &key, node);
                        }
                        let at = due
                            .get(&key)
                            .map(|(at, _)| *at)
                            .unwrap_or_else(|| Instant::now() + delay);
                        still_due.insert(key, (at, node));
                    }
                }
            }
            due = still_due;
        }
        let now = Instant::now();
        let ready: Vec<ObjKey> = due
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in ready {
            if let Some((_, node)) = due.remove(&key) {
                bind(&store, &audit, &key, node.as_deref());
            }
        }
    }
}

/// Record the node chosen for a WaitForFirstConsumer claim, as kube-scheduler does when it
/// binds the claim's first consumer.
fn select_node(store: &Store, audit: &AuditLog, key: &ObjKey, node: &str) {
    let r = store.mutate(
        key.res,
        &key.ns,
        &key.name,
        Sub::Main,
        false,
        false,
        |cur| {
            let mut next = cur.clone();
            let m = object::meta_mut(&mut next);
            let ann = m.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                ann.insert(SELECTED_NODE.into(), json!(node));
            }
            Ok(next)
        },
    );
    let answer = answer_of(store, audit, key, r.as_ref().map(|o| Some(o.as_ref())));
    record_write(store, audit, BINDER_USER_AGENT, "update", key, "", answer);
}

/// Mark the claim bound: annotations on the object, then its status.
fn bind(store: &Store, audit: &AuditLog, key: &ObjKey, node: Option<&str>) {
    // One write of `sub`, audited; whether it succeeded.
    let write = |sub: Sub, f: &dyn Fn(&Value) -> Value| {
        let r = store.mutate(key.res, &key.ns, &key.name, sub, false, false, |cur| {
            Ok(f(cur))
        });
        let name = if sub == Sub::Status { "status" } else { "" };
        let answer = answer_of(store, audit, key, r.as_ref().map(|o| Some(o.as_ref())));
        record_write(store, audit, BINDER_USER_AGENT, "update", key, name, answer);
        r.is_ok()
    };
    let annotated = write(Sub::Main, &|cur| {
        let mut next = cur.clone();
        let m = object::meta_mut(&mut next);
        let ann = m.entry("annotations").or_insert_with(|| json!({}));
        if let (Some(ann), Value::Object(added)) = (ann.as_object_mut(), bound_annotations(node)) {
            ann.extend(added);
        }
        next
    });
    if !annotated {
        return;
    }
    write(Sub::Status, &|cur| {
        let mut next = cur.clone();
        next["status"] = bound_status(cur);
        next
    });
}

/// The annotations the PV controller (and, for a WaitForFirstConsumer claim, the scheduler's
/// `volume.kubernetes.io/selected-node`) puts on a claim it binds.
pub(crate) fn bound_annotations(node: Option<&str>) -> Value {
    let mut ann = json!({
        "pv.kubernetes.io/bind-completed": "yes",
        "pv.kubernetes.io/bound-by-controller": "yes",
    });
    if let Some(node) = node {
        ann[SELECTED_NODE] = json!(node);
    }
    ann
}

/// The status of `pvc` once bound: phase `Bound`, its access modes and requested size.
pub(crate) fn bound_status(pvc: &Value) -> Value {
    let mut status = json!({"phase": "Bound"});
    if let Some(modes) = pvc["spec"]["accessModes"].as_array() {
        status["accessModes"] = Value::Array(modes.clone());
    }
    if let Some(size) = pvc["spec"]["resources"]["requests"]["storage"].as_str() {
        status["capacity"] = json!({"storage": size});
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc(class: Option<&str>, annotations: Value) -> Value {
        let mut p = json!({
            "metadata": {"name": "disk", "namespace": "ns", "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}
        });
        if let Some(c) = class {
            p["spec"]["storageClassName"] = json!(c);
        }
        p
    }

    fn sc(name: &str, mode: &str) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name}, "volumeBindingMode": mode}))
    }

    fn pod(node: Option<&str>, claim: &str) -> Arc<Value> {
        let mut p = json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": claim}}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        Arc::new(p)
    }

    #[test]
    fn which_claims_bind() {
        let classes = [sc("fast", "Immediate"), sc("local", "WaitForFirstConsumer")];
        assert_eq!(
            binding(&pvc(None, json!({})), &classes, &[]),
            Binding::Bindable(None)
        );
        assert_eq!(
            binding(&pvc(Some("fast"), json!({})), &classes, &[]),
            Binding::Bindable(None)
        );
        assert_eq!(
            binding(&pvc(Some("missing"), json!({})), &classes, &[]),
            Binding::Pending("storage class not found")
        );
        assert!(matches!(
            binding(&pvc(Some(""), json!({})), &classes, &[]),
            Binding::Pending(_)
        ));
        assert_eq!(
            binding(&pvc(None, json!({HOLD_ANNOTATION: "true"})), &classes, &[]),
            Binding::Pending("held by annotation")
        );
        let wffc = pvc(Some("local"), json!({}));
        assert_eq!(
            binding(
                &wffc,
                &classes,
                &[pod(None, "disk"), pod(Some("n1"), "other")]
            ),
            Binding::Pending("waiting for first consumer"),
            "an unscheduled consumer, a scheduled pod of another claim"
        );
        assert_eq!(
            binding(&wffc, &classes, &[pod(Some("n1"), "disk")]),
            Binding::Bindable(Some("n1".into()))
        );
        // A node already selected binds there, the consumer gone or not.
        let selected = pvc(Some("local"), json!({SELECTED_NODE: "n2"}));
        assert_eq!(
            binding(&selected, &classes, &[]),
            Binding::Bindable(Some("n2".into()))
        );
        let mut bound = pvc(None, json!({}));
        bound["status"]["phase"] = json!("Bound");
        assert_eq!(binding(&bound, &classes, &[]), Binding::Done);
    }
}
