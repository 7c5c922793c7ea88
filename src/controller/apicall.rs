//! Small helpers the executors use to talk to the API server: RFC 6902 JSON patches (sent as
//! `application/json-patch+json`, like client-go's `types.JSONPatchType`), and typed `Api`
//! handles for the namespaced kinds.

use axum::http;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// PATCH `name` (optionally its `subresource`, e.g. `status`) in `namespace` with a JSON patch
/// document (a JSON array of operations). Returns the patched object.
///
/// Errors: the API server's answer (409 when a `test` operation fails is reported by Kubernetes
/// as 422 Invalid), or a transport error.
pub async fn json_patch<K>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    patch: &serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let mut url = format!("{}/{}", K::url_path(&(), Some(namespace)), name);
    if let Some(sub) = subresource {
        url.push('/');
        url.push_str(sub);
    }
    let body = serde_json::to_vec(patch).map_err(kube::Error::SerdeError)?;
    let request = http::Request::patch(url)
        .header(http::header::CONTENT_TYPE, "application/json-patch+json")
        .header(http::header::ACCEPT, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<K>(request).await
}

/// A namespaced `Api` for `K`.
pub fn api<K>(client: &kube::Client, namespace: &str) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    Api::namespaced(client.clone(), namespace)
}
