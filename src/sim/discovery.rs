//! Discovery documents: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>`,
//! `/apis/<group>/<version>`, as plain `APIVersions` / `APIGroupList` / `APIGroup` /
//! `APIResourceList` JSON (`k8s.io/apimachinery/pkg/apis/meta/v1/types.go`).
//!
//! kubectl 1.3x first asks for aggregated discovery (`application/json;g=apidiscovery.k8s.io;
//! v=v2;as=APIGroupDiscoveryList`) and falls back to these legacy documents when the response
//! `Content-Type` is plain `application/json`, which is what this server always answers.

use serde_json::{Value, json};

use super::resources::{Registry, ResourceDef};

/// The Kubernetes version this server claims (the k8s-openapi feature in use is `v1_33`).
pub(crate) const KUBE_MINOR: &str = "33";

/// `/version`.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-virtctl-sim"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32"
    })
}

/// `/api`.
pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

fn group_json(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": {"groupVersion": format!("{group}/{}", versions[0]), "version": versions[0]}
    })
}

/// `/apis`.
pub(crate) fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, or `None` when the group is not served.
pub(crate) fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let groups = reg.groups();
    let (g, vs) = groups.iter().find(|(g, _)| *g == group)?;
    let mut v = group_json(g, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

fn verbs(d: &ResourceDef) -> Vec<&'static str> {
    let _ = d;
    vec![
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ]
}

/// `/api/v1` or `/apis/<group>/<version>`.
pub(crate) fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    if !reg.serves_group_version(group, version) {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let mut resources = Vec::new();
    for d in reg
        .defs()
        .iter()
        .filter(|d| d.group == group && d.version == version)
    {
        let mut r = json!({
            "name": d.plural,
            "singularName": d.singular,
            "namespaced": d.namespaced,
            "kind": d.kind,
            "verbs": verbs(d),
        });
        if !d.short_names.is_empty() {
            r["shortNames"] = json!(d.short_names);
        }
        if !d.categories.is_empty() {
            r["categories"] = json!(d.categories);
        }
        resources.push(r);
        if d.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", d.plural),
                "singularName": "",
                "namespaced": d.namespaced,
                "kind": d.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if d.group.is_empty() && d.plural == "pods" {
            resources.push(json!({
                "name": "pods/binding",
                "singularName": "",
                "namespaced": true,
                "kind": "Binding",
                "verbs": ["create"],
            }));
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_resources;

    #[test]
    fn core_list_has_pods_status_and_short_names() {
        let reg = Registry::new(builtin_resources());
        let l = resource_list(&reg, "", "v1").unwrap();
        let rs = l["resources"].as_array().unwrap();
        let pods = rs.iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(rs.iter().any(|r| r["name"] == "pods/status"));
        assert_eq!(l["groupVersion"], "v1");
    }

    #[test]
    fn kubevirt_group() {
        let reg = Registry::new(builtin_resources());
        let g = api_group(&reg, "kubevirt.io").unwrap();
        assert_eq!(g["preferredVersion"]["groupVersion"], "kubevirt.io/v1");
        let l = resource_list(&reg, "kubevirt.io", "v1").unwrap();
        let vmi = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "virtualmachineinstances")
            .unwrap();
        assert_eq!(vmi["shortNames"], json!(["vmi", "vmis"]));
        assert!(resource_list(&reg, "kubevirt.io", "v2").is_none());
        assert!(api_group(&reg, "nope.io").is_none());
    }
}
