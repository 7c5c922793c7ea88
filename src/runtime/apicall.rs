//! Small helpers the executors and the Event recorder use to talk to the API server: RFC 6902
//! JSON patches (sent as `application/json-patch+json`, like client-go's
//! `types.JSONPatchType`), typed `Api` handles for the namespaced kinds, and writes whose answer
//! is not decoded ([`create_unread`], [`replace_unread`], [`json_patch_unread`],
//! [`merge_patch_unread`], [`strategic_patch_unread`], [`strategic_status_patch_unread`]).

use axum::http;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::wire::WithoutManagedFields;

/// PATCH `name` (optionally its `subresource`, e.g. `status`) in `namespace` with a JSON patch
/// document (a JSON array of operations). Returns the patched object, as the typed writes below
/// read every answer: without `metadata.managedFields` ([`WithoutManagedFields`]).
///
/// Errors: the API server's answer (409 when a `test` operation fails is reported by Kubernetes
/// as 422 Invalid), or a transport error.
pub(crate) async fn json_patch<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    patch: &serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    client
        .request::<WithoutManagedFields<K>>(json_patch_request::<K>(
            namespace,
            name,
            subresource,
            patch,
        )?)
        .await
        .map(WithoutManagedFields::into_inner)
}

// Typed writes whose answer is read, sent through the caller's client: an `Api<K>` would be a
// client clone (a `String` and a `tower::Buffer` handle, made and dropped per write) for the
// same request.

/// `Api::<K>::create`.
#[cfg(test)]
pub(crate) async fn create<K>(
    client: &kube::Client,
    namespace: &str,
    obj: &K,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    create_read_as::<K, K>(client, namespace, obj).await
}

/// [`create`] decoding the created object as `A`: a type that reads only part of it (the
/// launcher pod the VMI controller creates is read as its informer caches pods).
pub(crate) async fn create_read_as<K, A>(
    client: &kube::Client,
    namespace: &str,
    obj: &K,
) -> Result<A, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
    A: DeserializeOwned,
{
    client
        .request::<WithoutManagedFields<A>>(create_request(namespace, obj)?)
        .await
        .map(WithoutManagedFields::into_inner)
}

/// `Api::<K>::replace`, or with `subresource` `status` `Api::<K>::replace_status` (as
/// [`json_patch`] takes its subresource).
pub(crate) async fn replace<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    obj: &K,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
{
    client
        .request::<WithoutManagedFields<K>>(replace_request(namespace, name, subresource, obj)?)
        .await
        .map(WithoutManagedFields::into_inner)
}

/// The POST `Api::<K>::create` sends. The body is written as Go writes JSON
/// ([`super::gojson`]): a ControllerRevision's `data` is kept as the bytes sent, and only Go's
/// form survives a later merge patch of the revision.
fn create_request<K>(namespace: &str, obj: &K) -> Result<http::Request<Vec<u8>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let data = super::gojson::to_vec(obj).map_err(kube::Error::SerdeError)?;
    kube::core::Request::new(K::url_path(&(), Some(namespace)))
        .create(&PostParams::default(), data)
        .map_err(kube::Error::BuildRequest)
}

/// The PUT `Api::<K>::replace` sends, or `replace_status` with `subresource` `status`.
fn replace_request<K>(
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    obj: &K,
) -> Result<http::Request<Vec<u8>>, kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    let data = serde_json::to_vec(obj).map_err(kube::Error::SerdeError)?;
    let request = kube::core::Request::new(K::url_path(&(), Some(namespace)));
    match subresource {
        None => request.replace(name, &PostParams::default(), data),
        Some(sub) => request.replace_subresource(sub, name, &PostParams::default(), data),
    }
    .map_err(kube::Error::BuildRequest)
}

fn json_patch_request<K>(
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    patch: &serde_json::Value,
) -> Result<http::Request<Vec<u8>>, kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let mut url = format!("{}/{}", K::url_path(&(), Some(namespace)), name);
    if let Some(sub) = subresource {
        url.push('/');
        url.push_str(sub);
    }
    let body = serde_json::to_vec(patch).map_err(kube::Error::SerdeError)?;
    http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .header(http::header::ACCEPT, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)
}

// Writes whose caller does not read the object the server answers with (the controllers learn
// the new state from their informers, as KubeVirt's do: its VMI controller drops the result of
// `Update`, vmi.go, and of the pod patches; the Event recorder keeps what it wrote, not the
// answer). The request is the one `Api<K>`'s typed method
// sends and the answer's status is checked the same way (`Client::request_text`: an error
// status is the same `kube::Error::Api`), but the body is not decoded into a `K`: a launcher
// pod's answer is 7-8 KB of JSON, and a VMI is updated about five times per start.

/// `Api::<K>::create` without decoding the created object.
pub(crate) async fn create_unread<K>(
    client: &kube::Client,
    namespace: &str,
    obj: &K,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    send_unread(client, create_request(namespace, obj)?).await
}

/// `Api::<K>::replace` without decoding the stored object.
pub(crate) async fn replace_unread<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    obj: &K,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Serialize,
{
    send_unread(client, replace_request(namespace, name, None, obj)?).await
}

/// [`json_patch`] without decoding the patched object.
pub(crate) async fn json_patch_unread<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    patch: &serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    send_unread(
        client,
        json_patch_request::<K>(namespace, name, subresource, patch)?,
    )
    .await
}

/// `Api::<K>::patch` with a JSON merge patch (RFC 7386), without decoding the patched object.
#[cfg(test)]
pub(crate) async fn merge_patch_unread<K, P>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: &P,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()>,
    P: Serialize + std::fmt::Debug,
{
    let request = kube::core::Request::new(K::url_path(&(), Some(namespace)))
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .map_err(kube::Error::BuildRequest)?;
    send_unread(client, request).await
}

/// `Api::<K>::patch` with a strategic merge patch, without decoding the patched object (the
/// Event recorder's repeats, as client-go's `EventSinkImpl.Patch`).
pub(crate) async fn strategic_patch_unread<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let request = kube::core::Request::new(K::url_path(&(), Some(namespace)))
        .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
        .map_err(kube::Error::BuildRequest)?;
    send_unread(client, request).await
}

/// `Api::<K>::patch_status` with a strategic merge patch, without decoding the patched object.
pub(crate) async fn strategic_status_patch_unread<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()>,
{
    let request = kube::core::Request::new(K::url_path(&(), Some(namespace)))
        .patch_subresource(
            "status",
            name,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .map_err(kube::Error::BuildRequest)?;
    send_unread(client, request).await
}

/// PUT a JSON body to `path` (an aggregated API's subresource, such as virt-api's
/// `subresources.kubevirt.io/v1`), without decoding the answer.
pub(crate) async fn put_unread<B: Serialize>(
    client: &kube::Client,
    path: &str,
    body: &B,
) -> Result<(), kube::Error> {
    let body = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let request = http::Request::put(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    send_unread(client, request).await
}

async fn send_unread(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> Result<(), kube::Error> {
    client.request_text(request).await.map(drop)
}

/// A namespaced `Api` for `K`.
pub(crate) fn api<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), namespace)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(name: &str) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "compute", "image": "img"}]}
        }))
        .expect("pod")
    }

    /// The API error a failed write reports: what the executors branch on.
    fn api_error(r: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
        match r {
            Err(kube::Error::Api(s)) => (s.code, s.reason.clone()),
            other => panic!("expected an API error, got {other:?}"),
        }
    }

    /// The typed writes answer what `Api<K>`'s methods answer, and fail the same way.
    #[tokio::test]
    async fn typed_writes_answer_and_fail_like_api() {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let client = server.client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

        let created = create(&client, "default", &pod("p")).await.expect("create");
        assert_eq!(created, pods.get("p").await.expect("stored"));
        assert_eq!(
            api_error(create(&client, "default", &pod("p")).await),
            api_error(pods.create(&PostParams::default(), &pod("p")).await),
        );

        // Read as another type: here the whole answer as JSON.
        let answer: serde_json::Value = create_read_as(&client, "default", &pod("q"))
            .await
            .expect("create q");
        let stored = pods.get("q").await.expect("stored q");
        assert_eq!(answer, serde_json::to_value(&stored).expect("json"));

        let mut changed = created.clone();
        changed.metadata.labels = Some([("a".to_string(), "2".to_string())].into());
        let replaced = replace(&client, "default", "p", None, &changed)
            .await
            .expect("replace");
        assert_eq!(replaced, pods.get("p").await.expect("stored"));
        assert_eq!(replaced.metadata.labels, changed.metadata.labels);
        // `changed` is stale now: the same 409 Conflict.
        assert_eq!(
            api_error(replace(&client, "default", "p", None, &changed).await),
            api_error(pods.replace("p", &PostParams::default(), &changed).await),
        );

        // The status subresource: the status is written, a label change is not.
        let mut with_status = replaced.clone();
        with_status.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        with_status.metadata.labels = Some([("a".to_string(), "9".to_string())].into());
        let answered = replace(&client, "default", "p", Some("status"), &with_status)
            .await
            .expect("replace status");
        assert_eq!(answered, pods.get("p").await.expect("stored"));
        assert_eq!(
            answered.status.and_then(|s| s.phase).as_deref(),
            Some("Running")
        );
        assert_eq!(answered.metadata.labels, replaced.metadata.labels);
        assert_eq!(
            api_error(replace(&client, "default", "gone", Some("status"), &pod("gone")).await),
            api_error(
                pods.replace_status("gone", &PostParams::default(), &pod("gone"))
                    .await
            ),
        );
    }

    /// Each unread write changes the object as its typed counterpart does, and fails with the
    /// same API error (code and reason) where the typed one fails.
    #[tokio::test]
    async fn unread_writes_act_and_fail_like_the_typed_ones() {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let client = server.client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

        // create: the object is stored; a second create is the same 409 AlreadyExists.
        create_unread(&client, "default", &pod("p"))
            .await
            .expect("create");
        let stored = pods.get("p").await.expect("created pod");
        assert_eq!(
            api_error(create_unread(&client, "default", &pod("p")).await),
            api_error(pods.create(&PostParams::default(), &pod("p")).await),
        );
        assert_eq!(
            api_error(create_unread(&client, "default", &pod("p")).await).0,
            409
        );

        // replace: applied; with a stale resourceVersion, the same 409 Conflict.
        let mut changed = stored.clone();
        changed.metadata.labels = Some([("a".to_string(), "2".to_string())].into());
        replace_unread(&client, "default", "p", &changed)
            .await
            .expect("replace");
        let replaced = pods.get("p").await.expect("pod");
        assert_eq!(replaced.metadata.labels, changed.metadata.labels);
        assert_eq!(
            api_error(replace_unread(&client, "default", "p", &changed).await),
            api_error(pods.replace("p", &PostParams::default(), &changed).await),
        );
        assert_eq!(
            api_error(replace_unread(&client, "default", "p", &changed).await).0,
            409
        );

        // JSON patch: applied; a failing `test` operation, the same error as json_patch's.
        let patch = json!([{"op": "replace", "path": "/metadata/labels/a", "value": "3"}]);
        json_patch_unread::<Pod>(&client, "default", "p", None, &patch)
            .await
            .expect("patch");
        let labels = pods.get("p").await.expect("pod").metadata.labels;
        assert_eq!(
            labels.as_ref().and_then(|l| l.get("a")).map(String::as_str),
            Some("3")
        );
        let failing = json!([{"op": "test", "path": "/metadata/labels/a", "value": "1"}]);
        assert_eq!(
            api_error(json_patch_unread::<Pod>(&client, "default", "p", None, &failing).await),
            api_error(json_patch::<Pod>(&client, "default", "p", None, &failing).await),
        );

        // Merge patch: applied (a null removes the key); a missing pod, the same 404.
        let merge = json!({"metadata": {"labels": {"a": null, "b": "4"}}});
        merge_patch_unread::<Pod, _>(&client, "default", "p", &merge)
            .await
            .expect("merge patch");
        let labels = pods.get("p").await.expect("pod").metadata.labels;
        assert_eq!(labels, Some([("b".to_string(), "4".to_string())].into()));
        assert_eq!(
            api_error(merge_patch_unread::<Pod, _>(&client, "default", "gone", &merge).await),
            api_error(
                pods.patch("gone", &PatchParams::default(), &Patch::Merge(&merge))
                    .await
            ),
        );
        assert_eq!(
            api_error(merge_patch_unread::<Pod, _>(&client, "default", "gone", &merge).await).0,
            404
        );

        // Strategic status patch: applied to the status; a missing pod, the same 404.
        let status = json!({"status": {"phase": "Running"}});
        strategic_status_patch_unread::<Pod>(&client, "default", "p", &status)
            .await
            .expect("status patch");
        let phase = pods
            .get("p")
            .await
            .expect("pod")
            .status
            .and_then(|s| s.phase);
        assert_eq!(phase.as_deref(), Some("Running"));
        assert_eq!(
            api_error(
                strategic_status_patch_unread::<Pod>(&client, "default", "gone", &status).await
            ),
            api_error(
                pods.patch_status("gone", &PatchParams::default(), &Patch::Strategic(&status))
                    .await
            ),
        );
        assert_eq!(
            api_error(
                strategic_status_patch_unread::<Pod>(&client, "default", "gone", &status).await
            )
            .0,
            404
        );
    }
}
