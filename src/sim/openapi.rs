//! A minimal OpenAPI v3 surface, just enough for `kubectl apply`/`create`.
//!
//! kubectl (1.27+) validates manifests by asking `/openapi/v3` whether the PATCH operation of
//! the object's group/version/kind accepts the `fieldValidation` query parameter
//! (`k8s.io/kubectl/pkg/util/openapi/query_param_verifier_v3.go`, `supportsQueryParamV3`). When
//! it does, validation is left to the server and no schema is downloaded. This module serves a
//! root document listing every served group/version and, per group/version, one PATCH operation
//! per resource carrying `x-kubernetes-group-version-kind` and a `fieldValidation` parameter.
//! There are no schemas: the server does not validate fields (see docs/embedded-cluster.md).

use serde_json::{Map, Value, json};

use super::resources::Registry;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn served_gvs(reg: &Registry) -> Vec<(&'static str, &'static str)> {
    let mut out: Vec<(&'static str, &'static str)> = Vec::new();
    for d in reg.defs() {
        if !out.contains(&(d.group, d.version)) {
            out.push((d.group, d.version));
        }
    }
    out
}

/// `/openapi/v3`: the discovery root.
pub(crate) fn root(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, v) in served_gvs(reg) {
        let p = gv_path(g, v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash=sim{}", reg.defs().len())}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<api/v1 | apis/g/v>`, or `None` when not served.
pub(crate) fn group_version(reg: &Registry, path: &str) -> Option<Value> {
    let (g, v) = served_gvs(reg)
        .into_iter()
        .find(|(g, v)| gv_path(g, v) == path)?;
    let mut paths = Map::new();
    for d in reg.defs().iter().filter(|d| d.group == g && d.version == v) {
        let base = format!("/{}", gv_path(g, v));
        let item = if d.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
        } else {
            format!("{base}/{}/{{name}}", d.plural)
        };
        paths.insert(
            item,
            json!({
                "patch": {
                    "operationId": format!("patch{}", d.kind),
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {"group": d.group, "version": d.version, "kind": d.kind},
                    "parameters": [
                        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
                    ],
                    "responses": {"200": {"description": "OK"}}
                }
            }),
        );
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (virtctl-rs embedded)", "version": format!("v1.{}.0", super::discovery::KUBE_MINOR)},
        "paths": paths,
        "components": {"schemas": {}}
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_resources;

    #[test]
    fn root_lists_group_versions() {
        let reg = Registry::new(builtin_resources());
        let r = root(&reg);
        assert!(r["paths"].get("api/v1").is_some());
        assert!(r["paths"].get("apis/kubevirt.io/v1").is_some());
        let gv = group_version(&reg, "apis/kubevirt.io/v1").unwrap();
        let p = &gv["paths"]["/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}"]
            ["patch"];
        assert_eq!(
            p["x-kubernetes-group-version-kind"]["kind"],
            "VirtualMachine"
        );
        assert!(group_version(&reg, "apis/nope/v1").is_none());
    }
}
