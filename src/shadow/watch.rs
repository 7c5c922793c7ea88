//! The shadow's watches: one read-only client, a list+watch per kind merged into one stream,
//! so the [`Tracker`] sees the changes in one order.

use super::predict::Kind;
use super::tracker::{Change, Tracker, resource_version};
use crate::runtime::gate::{BoxError, gated_client};
use axum::http::Method;
use futures::stream::{BoxStream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use serde_json::Value;

/// What a watched object is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// A compared kind.
    Compared(Kind),
    /// PersistentVolumeClaims: read by the decisions, never compared.
    Claims,
    /// StorageClasses (cluster-scoped): what the VMI controller's backend storage reads, as its
    /// StorageClass informer (vmi.go:103; backend-storage.go:412-437, 611-626). Never compared.
    StorageClasses,
}

impl Source {
    pub(crate) const ALL: [Source; 7] = [
        Source::Compared(Kind::VirtualMachine),
        Source::Compared(Kind::VirtualMachineInstance),
        Source::Compared(Kind::Pod),
        Source::Compared(Kind::ControllerRevision),
        Source::Compared(Kind::DataVolume),
        Source::Claims,
        Source::StorageClasses,
    ];

    fn resource(self) -> ApiResource {
        let gvk = |g: &str, v: &str, k: &str| GroupVersionKind::gvk(g, v, k);
        let (gvk, plural) = match self {
            Source::Compared(Kind::VirtualMachine) => (
                gvk("kubevirt.io", "v1", "VirtualMachine"),
                "virtualmachines",
            ),
            Source::Compared(Kind::VirtualMachineInstance) => (
                gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
                "virtualmachineinstances",
            ),
            Source::Compared(Kind::Pod) => (gvk("", "v1", "Pod"), "pods"),
            Source::Compared(Kind::ControllerRevision) => (
                gvk("apps", "v1", "ControllerRevision"),
                "controllerrevisions",
            ),
            Source::Compared(Kind::DataVolume) => (
                gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
                "datavolumes",
            ),
            Source::Claims => (
                gvk("", "v1", "PersistentVolumeClaim"),
                "persistentvolumeclaims",
            ),
            Source::StorageClasses => (
                gvk("storage.k8s.io", "v1", "StorageClass"),
                "storageclasses",
            ),
        };
        ApiResource::from_gvk_with_plural(&gvk, plural)
    }

    /// The label selector of the list+watch: launcher pods only, as the VMI controller's pod
    /// informer (KubeVirt's `kubevirt.io` label).
    fn selector(self) -> Option<&'static str> {
        matches!(self, Source::Compared(Kind::Pod)).then_some("kubevirt.io=virt-launcher")
    }

    /// Cluster-scoped: watched in every namespace whatever the shadow's namespace.
    fn cluster_scoped(self) -> bool {
        matches!(self, Source::StorageClasses)
    }
}

/// One item of the merged stream.
pub(crate) enum Item {
    /// An object changed (`None`: deleted) at `key`.
    Changed(Source, String, Option<Value>),
    /// A source's initial list is complete.
    Synced(Source),
    /// A watch failed (it is retried with back-off); the text says which.
    Failed(Source, String),
}

fn to_item(
    source: Source,
    event: Result<watcher::Event<DynamicObject>, watcher::Error>,
) -> Vec<Item> {
    let changed = |obj: DynamicObject, gone: bool| {
        let value = serde_json::to_value(&obj).unwrap_or(Value::Null);
        let key = super::mirror::key_of(&value);
        Item::Changed(source, key, (!gone).then_some(value))
    };
    match event {
        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => vec![changed(o, false)],
        Ok(watcher::Event::Delete(o)) => vec![changed(o, true)],
        Ok(watcher::Event::Init) => Vec::new(),
        Ok(watcher::Event::InitDone) => vec![Item::Synced(source)],
        Err(e) => vec![Item::Failed(source, e.to_string())],
    }
}

/// The merged list+watch of every [`Source`] in `namespace` (`None`: all; the cluster-scoped
/// StorageClasses whatever it is), through `client`.
pub(crate) fn watch_all(
    client: &kube::Client,
    namespace: Option<&str>,
) -> BoxStream<'static, Item> {
    let streams = Source::ALL.into_iter().map(|source| {
        let ar = source.resource();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) if !source.cluster_scoped() => Api::namespaced_with(client.clone(), ns, &ar),
            _ => Api::all_with(client.clone(), &ar),
        };
        let mut config = watcher::Config::default();
        if let Some(sel) = source.selector() {
            config = config.labels(sel);
        }
        watcher::watcher(api, config)
            .flat_map(move |e| futures::stream::iter(to_item(source, e)))
            .boxed()
    });
    futures::stream::select_all(streams).boxed()
}

/// Hand one item to the tracker: before every source has listed, objects only fill the
/// caches; after, each change is classified.
pub(crate) fn feed(
    tracker: &mut Tracker,
    item: Item,
    live: bool,
    now: chrono::DateTime<chrono::Utc>,
) {
    let Item::Changed(source, key, object) = item else {
        return;
    };
    if let (Source::Compared(kind), Some(rv)) = (source, object.as_ref().and_then(resource_version))
    {
        tracker.delivered(kind, rv, now);
    }
    match source {
        Source::Claims => tracker.mirror.set_pvc(&key, object),
        // Cluster-scoped: the key is `/NAME`.
        Source::StorageClasses => {
            let name = key.trim_start_matches('/').to_string();
            match object {
                Some(v) => tracker.mirror.storage_classes.insert(name, v),
                None => tracker.mirror.storage_classes.remove(&name),
            };
        }
        Source::Compared(kind) if live => tracker.observe(Change { kind, key, object }, now),
        Source::Compared(kind) => tracker.mirror.set(kind, &key, object),
    }
}

/// Why the shadow's client refused a request.
#[derive(Debug, thiserror::Error)]
#[error("the shadow never writes: {method} {path} refused")]
pub(super) struct ReadOnly {
    method: Method,
    path: String,
}

/// `client` that sends GET requests (gets, lists, watches) only: any other method fails
/// with [`ReadOnly`] without being sent. The shadow's only client.
pub(crate) fn read_only(client: kube::Client) -> kube::Client {
    gated_client(client, |request| {
        Box::pin(async move {
            if request.method() != Method::GET {
                return Err(Box::new(ReadOnly {
                    method: request.method().clone(),
                    path: request.uri().path().to_string(),
                }) as BoxError);
            }
            Ok(request)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;

    /// The claim a live shadow decides for a Pending persistent-TPM VMI: in the StorageClass
    /// its watch delivered as the cluster's default (backend-storage.go:412-437), and none
    /// once that class is deleted. It watched no StorageClass and decided
    /// `FailedBackendStorageCreate` "no default storage class found" where the controller
    /// created the claim.
    #[test]
    fn the_watched_default_class_decides_the_backend_storage_claim() {
        use crate::controller::vmi::VmiAction;
        let mut t = Tracker::new(super::super::mirror::Mirror::default(), Vec::new(), None);
        let now = chrono::Utc::now();
        let annotations = serde_json::json!({"kubevirt.io/latest-observed-api-version": "v1",
            "kubevirt.io/storage-observed-api-version": "v1"});
        let tpm = serde_json::json!({"domain": {"devices": {"tpm": {"persistent": true}}}});
        let vm = serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "tpm", "namespace": "ns", "uid": "vm-uid",
                "annotations": annotations,
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
            "spec": {"runStrategy": "Always", "template": {"spec": tpm}}});
        let vmi = serde_json::json!({"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "tpm", "namespace": "ns", "uid": "vmi-uid",
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "tpm", "uid": "vm-uid", "controller": true,
                    "blockOwnerDeletion": true}]},
            "spec": tpm, "status": {"phase": "Pending"}});
        let class = serde_json::json!({"apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": "fast", "annotations":
                {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "example.com/fast"});
        let changed =
            |source, key: &str, obj: Option<Value>| Item::Changed(source, key.to_string(), obj);
        for item in [
            changed(Source::Compared(Kind::VirtualMachine), "ns/tpm", Some(vm)),
            changed(
                Source::Compared(Kind::VirtualMachineInstance),
                "ns/tpm",
                Some(vmi),
            ),
            changed(Source::StorageClasses, "/fast", Some(class)),
        ] {
            feed(&mut t, item, false, now);
        }
        let decided = |t: &Tracker| {
            let (_, vmi) = t.mirror.decisions("ns/tpm", now, &[]).expect("decided");
            let vmi = vmi.expect("a VMI decision");
            let class = vmi.sync_actions.iter().find_map(|a| match a {
                VmiAction::CreateBackendStoragePvc { pvc, .. } => {
                    pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone())
                }
                _ => None,
            });
            (class, vmi.sync_error.map(|e| e.message))
        };
        assert_eq!(decided(&t), (Some("fast".to_string()), None));
        feed(
            &mut t,
            changed(Source::StorageClasses, "/fast", None),
            true,
            now,
        );
        assert_eq!(
            decided(&t),
            (None, Some("no default storage class found".to_string()))
        );
    }

    #[tokio::test]
    async fn the_read_only_client_refuses_every_write_and_reads() {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let client = read_only(server.client().await.expect("client"));
        let api: Api<ConfigMap> = Api::namespaced(client, "default");
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some("x".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let err = api.create(&PostParams::default(), &cm).await.unwrap_err();
        assert!(err.to_string().contains("the shadow never writes"), "{err}");
        assert!(api.list(&Default::default()).await.is_ok());
        let audit = server.audit().by_user_agent("");
        assert!(audit.iter().all(|e| e.verb != "create"), "{audit:?}");
    }
}
