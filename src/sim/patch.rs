//! PATCH bodies: RFC 6902 JSON patch, RFC 7386 merge patch, strategic merge patch for built-in
//! kinds, and a simplified server-side apply.
//!
//! Error mapping follows `k8s.io/apiserver/pkg/endpoints/handlers/patch.go`: an undecodable
//! patch is 400 BadRequest; a JSON patch that fails to apply (including a failed `test` op) is
//! `NewGenericServerResponse(422)`: reason `Invalid`, message "the server rejected our request
//! due to an error in our request". Custom resources reject strategic merge patch with 415.
//!
//! Strategic merge follows `k8s.io/apimachinery/pkg/util/strategicpatch/patch.go` for the
//! directives kubectl sends (`$patch: replace|delete|merge`, `$retainKeys`,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`) with the merge keys of the
//! `k8s.io/api` struct tags listed in [`merge_key`] (lists not listed are replaced).

use serde_json::{Map, Value};

use super::resources::ResourceDef;
use super::status::ApiError;

/// The patch flavours, by `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    /// `application/json-patch+json`
    Json,
    /// `application/merge-patch+json`
    Merge,
    /// `application/strategic-merge-patch+json`
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply, simplified)
    Apply,
}

impl PatchKind {
    /// Parse a `Content-Type` (parameters ignored).
    pub(crate) fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Some(Self::Json),
            "application/merge-patch+json" => Some(Self::Merge),
            "application/strategic-merge-patch+json" => Some(Self::Strategic),
            "application/apply-patch+yaml" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// The 415 the real server sends for a patch type the resource does not accept.
pub(crate) fn unsupported_patch(def: &ResourceDef) -> ApiError {
    let accepted = if def.builtin {
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    };
    ApiError::unsupported_media_type(format!(
        "the body of the request was in an unknown format - accepted media types include: {accepted}"
    ))
}

/// Apply an RFC 6902 patch with the API server's semantics (evanphx/json-patch v4, which the
/// Kubernetes API server uses), where it is laxer than the RFC:
/// - a `test` of `null` against an **absent** path succeeds;
/// - a `replace` of an absent key of an existing **object** sets it (like `add`).
///
/// KubeVirt relies on both: `test /metadata/finalizers null` + `replace /metadata/finalizers`
/// adds the first finalizer of a VM (vm.go:2362-2382), and virt-api `test`s an absent
/// `status.stateChangeRequests` against `null` (lifecycle.go:614). Operations are applied in
/// order; a failure leaves `doc` partly patched, so callers work on a copy. `inspect`'s what-if
/// applies virt-api's patches with it.
pub(crate) fn apply_json_patch(
    doc: &mut Value,
    p: json_patch::Patch,
) -> Result<(), json_patch::PatchError> {
    use json_patch::{AddOperation, PatchOperation};
    for op in p.0 {
        let op = match op {
            PatchOperation::Test(t)
                if t.value.is_null() && doc.pointer(t.path.as_str()).is_none() =>
            {
                continue;
            }
            PatchOperation::Replace(r) if doc.pointer(r.path.as_str()).is_none() => {
                let parent_is_object = r
                    .path
                    .parent()
                    .and_then(|parent| doc.pointer(parent.as_str()))
                    .is_some_and(Value::is_object);
                if parent_is_object {
                    PatchOperation::Add(AddOperation {
                        path: r.path,
                        value: r.value,
                    })
                } else {
                    PatchOperation::Replace(r)
                }
            }
            other => other,
        };
        json_patch::patch(doc, &[op])?;
    }
    Ok(())
}

/// Apply a patch body to `current`, returning the patched object.
pub(crate) fn apply(
    def: &ResourceDef,
    kind: PatchKind,
    current: &Value,
    body: &[u8],
) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Json => {
            let p: json_patch::Patch =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            let mut doc = current.clone();
            apply_json_patch(&mut doc, p).map_err(|_| ApiError::patch_unprocessable())?;
            Ok(doc)
        }
        PatchKind::Merge => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|_| ApiError::bad_request("Invalid JSON Patch"))?;
            let mut doc = current.clone();
            json_patch::merge(&mut doc, &p);
            Ok(doc)
        }
        PatchKind::Strategic => {
            if !def.builtin {
                return Err(unsupported_patch(def));
            }
            let p: Value =
                serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
            if !p.is_object() {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal into Go value of type map[string]interface {}",
                ));
            }
            strategic_merge(current, &p, "").map_err(ApiError::bad_request)
        }
        PatchKind::Apply => {
            let p = parse_apply(body)?;
            Ok(apply_merge(def, current, &p))
        }
    }
}

/// Decode an apply-patch body (YAML or JSON).
pub(crate) fn parse_apply(body: &[u8]) -> Result<Value, ApiError> {
    let v: Value = serde_yaml::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "error decoding YAML: the apply configuration must be an object",
        ));
    }
    Ok(v)
}

/// Server-side apply, simplified: the applied configuration is merged into the live object
/// (strategic rules for built-in kinds, recursive map merge otherwise). There are no managed
/// fields, so fields dropped from a later configuration are not removed, and there are no
/// apply conflicts.
pub(crate) fn apply_merge(def: &ResourceDef, current: &Value, cfg: &Value) -> Value {
    if def.builtin {
        strategic_merge(current, cfg, "").unwrap_or_else(|_| cfg.clone())
    } else {
        let mut doc = current.clone();
        merge_no_delete(&mut doc, cfg);
        doc
    }
}

fn merge_no_delete(doc: &mut Value, patch: &Value) {
    match (doc, patch) {
        (Value::Object(d), Value::Object(p)) => {
            for (k, v) in p {
                match d.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => {
                        merge_no_delete(existing, v)
                    }
                    _ => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, p) => *d = p.clone(),
    }
}

/// How a list at `path` (dot-joined field names, list indices omitted) merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListStrategy {
    /// Replace the whole list.
    Replace,
    /// Merge elements by this key.
    MergeKey(&'static str),
    /// Union of primitive values.
    Primitive,
}

/// The merge strategy of the lists of built-in kinds this server serves (from the
/// `patchStrategy`/`patchMergeKey` tags in `k8s.io/api/core/v1/types.go` and
/// `k8s.io/apimachinery/pkg/apis/meta/v1/types.go`).
pub(crate) fn merge_key(path: &str) -> ListStrategy {
    use ListStrategy::*;
    let last = path.rsplit('.').next().unwrap_or("");
    match path {
        "metadata.finalizers" => return Primitive,
        "metadata.ownerReferences" => return MergeKey("uid"),
        "spec.podCIDRs" => return Primitive,
        "spec.taints" => return MergeKey("key"),
        "spec.ports" => return MergeKey("port"),
        _ => {}
    }
    let in_container = path.contains("containers.")
        || path.contains("initContainers.")
        || path.contains("ephemeralContainers.");
    match last {
        "containers" | "initContainers" | "ephemeralContainers" => MergeKey("name"),
        "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates" => MergeKey("name"),
        "env" if in_container => MergeKey("name"),
        "ports" if in_container => MergeKey("containerPort"),
        "volumeMounts" if in_container => MergeKey("mountPath"),
        "volumeDevices" if in_container => MergeKey("devicePath"),
        "hostAliases" => MergeKey("ip"),
        "topologySpreadConstraints" => MergeKey("topologyKey"),
        "conditions" => MergeKey("type"),
        "podIPs" | "hostIPs" => MergeKey("ip"),
        "addresses" if path.starts_with("status") => MergeKey("type"),
        _ => Replace,
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// Strategic merge of `patch` into `original` (both JSON objects) at `path`.
pub(crate) fn strategic_merge(
    original: &Value,
    patch: &Value,
    path: &str,
) -> Result<Value, String> {
    let Some(p) = patch.as_object() else {
        return Ok(patch.clone());
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut m = p.clone();
        m.remove("$patch");
        return Ok(Value::Object(m));
    }
    let mut out: Map<String, Value> = match original {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    // primitive deletions first
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            let remove: Vec<&Value> = v.as_array().map(|a| a.iter().collect()).unwrap_or_default();
            if let Some(list) = out.get_mut(field).and_then(Value::as_array_mut) {
                list.retain(|x| !remove.contains(&x));
            }
        }
    }
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        let child = join(path, k);
        if v.is_null() {
            out.remove(k);
            continue;
        }
        let merged = match (out.get(k), v) {
            (Some(orig @ Value::Object(_)), Value::Object(_)) => {
                if v.get("$patch").and_then(Value::as_str) == Some("delete") {
                    out.remove(k);
                    continue;
                }
                strategic_merge(orig, v, &child)?
            }
            (Some(Value::Array(orig)), Value::Array(pl)) => merge_list(orig, pl, &child)?,
            (None, Value::Object(_)) => strategic_merge(&Value::Object(Map::new()), v, &child)?,
            (None, Value::Array(pl)) => merge_list(&[], pl, &child)?,
            _ => v.clone(),
        };
        out.insert(k.clone(), merged);
    }
    // $setElementOrder/<field>
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$setElementOrder/")
            && let (Some(order), Some(list)) = (
                v.as_array(),
                out.get_mut(field).and_then(Value::as_array_mut),
            )
        {
            let strategy = merge_key(&join(path, field));
            let pos = |x: &Value| -> usize {
                order
                    .iter()
                    .position(|o| match strategy {
                        ListStrategy::MergeKey(key) => {
                            o.get(key).is_some() && o.get(key) == x.get(key)
                        }
                        _ => o == x,
                    })
                    .unwrap_or(usize::MAX)
            };
            list.sort_by_key(|x| pos(x));
        }
    }
    // $retainKeys
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Value::Object(out))
}

fn merge_list(orig: &[Value], patch: &[Value], path: &str) -> Result<Value, String> {
    match merge_key(path) {
        ListStrategy::Replace => Ok(Value::Array(
            patch
                .iter()
                .filter(|e| e.get("$patch").is_none())
                .cloned()
                .collect(),
        )),
        ListStrategy::Primitive => {
            let mut out: Vec<Value> = orig.to_vec();
            for e in patch {
                if !out.contains(e) {
                    out.push(e.clone());
                }
            }
            Ok(Value::Array(out))
        }
        ListStrategy::MergeKey(key) => {
            if patch
                .iter()
                .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                return Ok(Value::Array(
                    patch
                        .iter()
                        .filter(|e| e.get("$patch").is_none())
                        .cloned()
                        .collect(),
                ));
            }
            let mut out: Vec<Value> = orig.to_vec();
            for e in patch {
                let Some(kv) = e.get(key) else {
                    return Err(format!(
                        "map: {e} does not contain declared merge key: {key}"
                    ));
                };
                let idx = out.iter().position(|o| o.get(key) == Some(kv));
                let delete = e.get("$patch").and_then(Value::as_str) == Some("delete");
                match (idx, delete) {
                    (Some(i), true) => {
                        out.remove(i);
                    }
                    (None, true) => {}
                    (Some(i), false) => {
                        out[i] = strategic_merge(&out[i], e, path)?;
                    }
                    (None, false) => {
                        out.push(strategic_merge(&Value::Object(Map::new()), e, path)?);
                    }
                }
            }
            Ok(Value::Array(patch_order(out, patch, orig, key)))
        }
    }
}

/// The order kube-apiserver gives a merged list with a merge key (apimachinery v0.36.3
/// pkg/util/strategicpatch/patch.go:1533-1544, 404-468): the items the patch names in the
/// patch's order, the others in the original's, interleaved by their places in the original;
/// an item only the patch has goes before the original's items still to place (so a condition
/// a patch adds comes before the ones it does not name).
fn patch_order(merged: Vec<Value>, patch: &[Value], orig: &[Value], key: &str) -> Vec<Value> {
    let named = |x: &Value| {
        patch
            .iter()
            .any(|e| e.get(key) == x.get(key) && e.get("$patch").is_none())
    };
    let (mut right, left): (Vec<Value>, Vec<Value>) = merged.into_iter().partition(named);
    let patch_place = |x: &Value| patch.iter().position(|e| e.get(key) == x.get(key));
    right.sort_by_key(patch_place);
    let place = |x: &Value| orig.iter().position(|o| o.get(key) == x.get(key));
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut left, mut right) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((place(l), place(r)), (Some(a), Some(b)) if a < b),
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

/// The `type` of each of `obj`'s `status.conditions`, in order: what the tests of a strategic
/// merge's list order compare.
#[cfg(test)]
pub(crate) fn condition_types(obj: &Value) -> Vec<&str> {
    let conditions = obj["status"]["conditions"].as_array().into_iter().flatten();
    conditions.filter_map(|c| c["type"].as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_def as def;
    use serde_json::json;

    #[test]
    fn json_patch_test_failure_is_422() {
        let cur = json!({"metadata": {"name": "a"}});
        let body = br#"[{"op":"test","path":"/metadata/name","value":"b"}]"#;
        let e = apply(&def("pods"), PatchKind::Json, &cur, body).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(e.reason, "Invalid");
        assert_eq!(
            e.message,
            "the server rejected our request due to an error in our request"
        );
        let e = apply(&def("pods"), PatchKind::Json, &cur, b"{not json").unwrap_err();
        assert_eq!(e.code, 400);
    }

    /// evanphx/json-patch: `test` of null on an absent path passes; of a value, fails. KubeVirt's
    /// first finalizer patch depends on it (vm.go:2362-2382).
    #[test]
    fn json_patch_test_null_on_absent_path() {
        let cur = json!({"metadata": {"name": "a"}});
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":null},{"op":"replace","path":"/metadata/finalizers","value":["f"]}]"#;
        let out = apply(&def("virtualmachines"), PatchKind::Json, &cur, body).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        let json_patch_code = |body: &[u8]| {
            apply(&def("virtualmachines"), PatchKind::Json, &cur, body)
                .unwrap_err()
                .code
        };
        // replace of a missing key under a missing parent still fails.
        let body = br#"[{"op":"replace","path":"/status/phase","value":"x"}]"#;
        assert_eq!(json_patch_code(body), 422);
        let body = br#"[{"op":"test","path":"/metadata/finalizers","value":["x"]}]"#;
        assert_eq!(json_patch_code(body), 422);
        // A present path with a null test value must really be null.
        let body = br#"[{"op":"test","path":"/metadata/name","value":null}]"#;
        assert_eq!(json_patch_code(body), 422);
    }

    #[test]
    fn json_patch_applies() {
        let cur = json!({"metadata": {"name": "a", "labels": {"x": "1"}}});
        let body = br#"[{"op":"test","path":"/metadata/labels/x","value":"1"},{"op":"replace","path":"/metadata/labels/x","value":"2"}]"#;
        let out = apply(&def("pods"), PatchKind::Json, &cur, body).unwrap();
        assert_eq!(out["metadata"]["labels"]["x"], "2");
    }

    #[test]
    fn merge_patch_nulls_delete() {
        let cur = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [1, 2]}});
        let out = apply(
            &def("virtualmachines"),
            PatchKind::Merge,
            &cur,
            br#"{"metadata":{"labels":{"a":null}},"spec":{"list":[3]}}"#,
        )
        .unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"b": "2"}}, "spec": {"list": [3]}})
        );
    }

    #[test]
    fn strategic_rejected_for_crds() {
        let e = apply(
            &def("virtualmachines"),
            PatchKind::Strategic,
            &json!({}),
            b"{}",
        )
        .unwrap_err();
        assert_eq!(e.code, 415);
        assert_eq!(e.reason, "UnsupportedMediaType");
    }

    #[test]
    fn strategic_conditions_by_type_containers_by_name() {
        let cur = json!({
            "metadata": {"finalizers": ["a/x"], "ownerReferences": [{"uid": "1", "name": "o1"}]},
            "spec": {"containers": [{"name": "c1", "image": "i1"}, {"name": "c2", "image": "i2"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
        });
        let patch = json!({
            "metadata": {"finalizers": ["b/y"], "ownerReferences": [{"uid": "2", "name": "o2"}]},
            "spec": {"containers": [{"name": "c2", "image": "new"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        let out = apply(
            &def("pods"),
            PatchKind::Strategic,
            &cur,
            patch.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a/x", "b/y"]));
        assert_eq!(
            out["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
        assert_eq!(out["spec"]["containers"][0]["image"], "i1");
        assert_eq!(out["spec"]["containers"][1]["image"], "new");
        assert_eq!(
            out["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True"})
        );
        assert_eq!(out["status"]["conditions"][1]["type"], "PodScheduled");
    }

    /// kube-apiserver places a condition a strategic merge patch adds before the ones the
    /// patch does not name (virt-controller's readiness-gate patch on a bound pod answers
    /// `[kubevirt.io/virtual-machine-unpaused, PodScheduled]`); one it names stays in place.
    #[test]
    fn strategic_merge_orders_a_list_as_kube_apiserver() {
        let cur = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}});
        let patch = json!({"status": {"conditions": [{"type": "Unpaused", "status": "True"}]}});
        let out = strategic_merge(&cur, &patch, "").unwrap();
        assert_eq!(condition_types(&out), ["Unpaused", "Ready", "PodScheduled"]);
        let patch = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"},
            {"type": "New", "status": "True"}]}});
        let out = strategic_merge(&cur, &patch, "").unwrap();
        assert_eq!(condition_types(&out), ["Ready", "PodScheduled", "New"]);
    }

    #[test]
    fn strategic_directives() {
        let cur = json!({"metadata": {"finalizers": ["a/x", "b/y"]}, "spec": {"containers": [{"name": "c1"}, {"name": "c2"}], "tolerations": [{"key": "k"}]}});
        let patch = json!({
            "$deleteFromPrimitiveList/finalizers": ["a/x"],
            "spec": {"containers": [{"name": "c1", "$patch": "delete"}], "tolerations": [{"key": "z"}]}
        });
        // $deleteFromPrimitiveList applies at the level it appears.
        let out = strategic_merge(&cur, &patch, "").unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "c2"}]));
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "z"}]));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}});
        let out = strategic_merge(&cur, &patch, "").unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b/y"]));
        let patch =
            json!({"spec": {"$setElementOrder/containers": [{"name": "c2"}, {"name": "c1"}]}});
        let out = strategic_merge(&cur, &patch, "").unwrap();
        assert_eq!(out["spec"]["containers"][0]["name"], "c2");
        let patch = json!({"spec": {"$patch": "replace", "x": 1}});
        assert_eq!(
            strategic_merge(&cur, &patch, "").unwrap()["spec"],
            json!({"x": 1})
        );
    }

    proptest::proptest! {
        #[test]
        fn patches_never_panic(body in "[\\[\\]{}\",:a-z0-9/ $-]{0,60}") {
            let cur = json!({"metadata": {"name": "a", "finalizers": ["x/y"]}, "spec": {"containers": [{"name": "c"}]}});
            for kind in [PatchKind::Json, PatchKind::Merge, PatchKind::Strategic, PatchKind::Apply] {
                let _ = apply(&def("pods"), kind, &cur, body.as_bytes());
            }
        }
    }

    #[test]
    fn apply_is_create_or_merge() {
        let cur = json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "spec": {"a": 1}});
        let out = apply(
            &def("virtualmachines"),
            PatchKind::Apply,
            &cur,
            b"metadata:\n  labels:\n    y: '2'\nspec:\n  b: 2\n",
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"x": "1", "y": "2"}));
        assert_eq!(out["spec"], json!({"a": 1, "b": 2}));
    }
}
