//! Request bodies in `application/vnd.kubernetes.protobuf` for the built-in kinds that kubectl's
//! typed clients send that way (`kubectl create namespace|configmap|secret|serviceaccount|
//! service|priorityclass|quota`), decoded with `k8s-pb` and turned into the JSON the store keeps.
//!
//! The wire format is apimachinery's protobuf serializer
//! (`k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go`): the 4-byte prefix
//! `k8s\0`, then a `runtime.Unknown` whose `raw` holds the object's own message. JSON field names
//! follow the `json:` tags of `k8s.io/api`; empty repeated fields and maps and absent optional
//! fields are left out, as Go's `omitempty` does.
//!
//! Every message is converted field by field through an exhaustive destructuring (see
//! [`to_json!`]), so a field added to `k8s-pb` fails the build instead of being dropped.

use base64::Engine;
use k8s_pb::api::core::v1 as core;
use k8s_pb::api::scheduling::v1 as scheduling;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

use super::resources::ResourceDef;
use super::status::ApiError;

/// The media type.
pub(crate) const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every protobuf-encoded object (`protobuf.go`, `protoEncodingPrefix`).
const MAGIC: &[u8] = b"k8s\x00";

/// `time.Time{}.Unix()`: the seconds of Go's zero time.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// The kinds accepted in protobuf, as `(group, kind)`.
pub(crate) const KINDS: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Service"),
    ("", "ResourceQuota"),
    ("scheduling.k8s.io", "PriorityClass"),
];

/// Decode a protobuf request body for the resource `def` into its JSON form.
///
/// # Errors
/// 415 UnsupportedMediaType for a kind this server cannot decode from protobuf; 400 BadRequest
/// for a body that is not a `k8s\0`-prefixed `runtime.Unknown` or whose object does not decode.
pub(crate) fn decode(def: &ResourceDef, body: &[u8]) -> Result<Value, ApiError> {
    if !KINDS.contains(&(def.group, def.kind)) {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({} {:?} is not decoded from {CONTENT_TYPE} by the embedded API server)",
            def.kind, def.group
        )));
    }
    let rest = body.strip_prefix(MAGIC).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{CONTENT_TYPE} body does not start with the k8s protobuf prefix"
        ))
    })?;
    let bad = |e: prost::DecodeError| {
        ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: {e}",
            def.kind, def.version, def.kind
        ))
    };
    let unknown = Unknown::decode(rest).map_err(bad)?;
    let Unknown {
        type_meta,
        raw,
        content_encoding: _,
        content_type: _,
    } = unknown;
    let raw = raw.unwrap_or_default();
    let raw = raw.as_slice();
    let mut obj = match def.kind {
        "Namespace" => json_of::<core::Namespace>(raw),
        "ConfigMap" => json_of::<core::ConfigMap>(raw),
        "Secret" => json_of::<core::Secret>(raw),
        "ServiceAccount" => json_of::<core::ServiceAccount>(raw),
        "Service" => json_of::<core::Service>(raw),
        "ResourceQuota" => json_of::<core::ResourceQuota>(raw),
        _ => json_of::<scheduling::PriorityClass>(raw),
    }
    .map_err(bad)?;
    if let (Some(m), Some(tm)) = (obj.as_object_mut(), type_meta) {
        // apiVersion and kind first, as in JSON requests.
        let mut out = Map::new();
        if let Some(v) = tm.api_version.filter(|s| !s.is_empty()) {
            out.insert("apiVersion".into(), json!(v));
        }
        if let Some(k) = tm.kind.filter(|s| !s.is_empty()) {
            out.insert("kind".into(), json!(k));
        }
        out.append(m);
        return Ok(Value::Object(out));
    }
    Ok(obj)
}

/// Conversion of a decoded protobuf value to its JSON form; `None` when Go's `omitempty`
/// leaves it out.
/// Decode the protobuf message `M` from `raw` into its JSON form.
fn json_of<M: Message + Default + ToJson>(raw: &[u8]) -> Result<Value, prost::DecodeError> {
    Ok(M::decode(raw)?.to_json())
}

trait ToJson {
    fn to_json_opt(self) -> Option<Value>;
    fn to_json(self) -> Value
    where
        Self: Sized,
    {
        self.to_json_opt().unwrap_or_else(|| json!({}))
    }
}

impl ToJson for String {
    fn to_json_opt(self) -> Option<Value> {
        Some(Value::String(self))
    }
}
impl ToJson for bool {
    fn to_json_opt(self) -> Option<Value> {
        Some(Value::Bool(self))
    }
}
impl ToJson for i32 {
    fn to_json_opt(self) -> Option<Value> {
        Some(json!(self))
    }
}
impl ToJson for i64 {
    fn to_json_opt(self) -> Option<Value> {
        Some(json!(self))
    }
}
/// `[]byte` is base64 in JSON.
impl ToJson for Vec<u8> {
    fn to_json_opt(self) -> Option<Value> {
        Some(Value::String(
            base64::engine::general_purpose::STANDARD.encode(self),
        ))
    }
}
impl<T: ToJson> ToJson for Option<T> {
    fn to_json_opt(self) -> Option<Value> {
        self.and_then(ToJson::to_json_opt)
    }
}
impl<T: ToJson> ToJson for Vec<T> {
    fn to_json_opt(self) -> Option<Value> {
        if self.is_empty() {
            return None;
        }
        Some(Value::Array(
            self.into_iter()
                .map(|v| v.to_json_opt().unwrap_or(Value::Null))
                .collect(),
        ))
    }
}
impl<T: ToJson> ToJson for BTreeMap<String, T> {
    fn to_json_opt(self) -> Option<Value> {
        if self.is_empty() {
            return None;
        }
        Some(Value::Object(
            self.into_iter()
                .map(|(k, v)| (k, v.to_json_opt().unwrap_or(Value::Null)))
                .collect(),
        ))
    }
}
/// `metav1.Time`: RFC 3339 with seconds (`time.go`, `MarshalJSON`).
impl ToJson for meta::Time {
    fn to_json_opt(self) -> Option<Value> {
        // Go's zero time (what `creationTimestamp: null` is in a Go client) is year 1.
        let seconds = self.seconds.filter(|s| *s != GO_ZERO_TIME)?;
        let t = chrono::DateTime::from_timestamp(seconds, 0)?;
        Some(json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
    }
}
/// `intstr.IntOrString`: type 0 is an int, 1 a string.
impl ToJson for IntOrString {
    fn to_json_opt(self) -> Option<Value> {
        Some(match self.r#type {
            Some(1) => json!(self.str_val.unwrap_or_default()),
            _ => json!(self.int_val.unwrap_or(0)),
        })
    }
}
impl ToJson for Quantity {
    fn to_json_opt(self) -> Option<Value> {
        Some(json!(self.string.unwrap_or_default()))
    }
}
/// `metav1.FieldsV1` is raw JSON.
impl ToJson for meta::FieldsV1 {
    fn to_json_opt(self) -> Option<Value> {
        serde_json::from_slice(&self.raw?).ok()
    }
}

/// The zero values `omitempty` leaves out of a Go struct field that is not a pointer (gogo
/// protobuf sends such fields even when empty).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// `ToJson` for a message: every field destructured (no `..`, so a new field is a build
/// error), each put under its JSON name when present and not a zero value. `field: keep`
/// marks a field Go keeps when zero: a pointer (`*bool`, `*string`, ...) or one without
/// `omitempty` in its `json:` tag.
macro_rules! to_json {
    ($ty:path { $($field:ident $(: $keep:ident)? => $name:literal),* $(,)? }) => {
        impl ToJson for $ty {
            fn to_json_opt(self) -> Option<Value> {
                let $ty { $($field),* } = self;
                let mut m = Map::new();
                $(
                    if let Some(v) = $field.to_json_opt() {
                        let keep = false $(|| stringify!($keep) == "keep")?;
                        if keep || !is_zero(&v) {
                            m.insert($name.into(), v);
                        }
                    }
                )*
                Some(Value::Object(m))
            }
        }
    };
}

to_json!(meta::ObjectMeta {
    name => "name", generate_name => "generateName", namespace => "namespace",
    self_link => "selfLink", uid => "uid", resource_version => "resourceVersion",
    generation => "generation", creation_timestamp => "creationTimestamp",
    deletion_timestamp => "deletionTimestamp",
    deletion_grace_period_seconds: keep => "deletionGracePeriodSeconds", labels => "labels",
    annotations => "annotations", owner_references => "ownerReferences",
    finalizers => "finalizers", managed_fields => "managedFields",
});
to_json!(meta::OwnerReference {
    api_version: keep => "apiVersion", kind: keep => "kind", name: keep => "name", uid: keep => "uid",
    controller: keep => "controller", block_owner_deletion: keep => "blockOwnerDeletion",
});
to_json!(meta::ManagedFieldsEntry {
    manager => "manager", operation => "operation", api_version => "apiVersion",
    time => "time", fields_type => "fieldsType", fields_v1 => "fieldsV1",
    subresource => "subresource",
});
to_json!(meta::Condition {
    r#type: keep => "type", status: keep => "status", observed_generation => "observedGeneration",
    last_transition_time: keep => "lastTransitionTime", reason: keep => "reason", message: keep => "message",
});
to_json!(core::Namespace { metadata => "metadata", spec => "spec", status => "status" });
to_json!(core::NamespaceSpec { finalizers => "finalizers" });
to_json!(core::NamespaceStatus { phase => "phase", conditions => "conditions" });
to_json!(core::NamespaceCondition {
    r#type: keep => "type", status: keep => "status", last_transition_time => "lastTransitionTime",
    reason => "reason", message => "message",
});
to_json!(core::ConfigMap {
    metadata => "metadata", immutable: keep => "immutable", data => "data",
    binary_data => "binaryData",
});
to_json!(core::Secret {
    metadata => "metadata", immutable: keep => "immutable", data => "data",
    string_data => "stringData", r#type => "type",
});
to_json!(core::ServiceAccount {
    metadata => "metadata", secrets => "secrets", image_pull_secrets => "imagePullSecrets",
    automount_service_account_token: keep => "automountServiceAccountToken",
});
to_json!(core::ObjectReference {
    kind => "kind", namespace => "namespace", name => "name", uid => "uid",
    api_version => "apiVersion", resource_version => "resourceVersion",
    field_path => "fieldPath",
});
to_json!(core::LocalObjectReference { name => "name" });
to_json!(core::Service { metadata => "metadata", spec => "spec", status => "status" });
to_json!(core::ServiceSpec {
    ports => "ports", selector => "selector", cluster_ip => "clusterIP",
    cluster_ips => "clusterIPs", r#type => "type", external_ips => "externalIPs",
    session_affinity => "sessionAffinity", load_balancer_ip => "loadBalancerIP",
    load_balancer_source_ranges => "loadBalancerSourceRanges",
    external_name => "externalName", external_traffic_policy => "externalTrafficPolicy",
    health_check_node_port => "healthCheckNodePort",
    publish_not_ready_addresses => "publishNotReadyAddresses",
    session_affinity_config => "sessionAffinityConfig", ip_families => "ipFamilies",
    ip_family_policy: keep => "ipFamilyPolicy",
    allocate_load_balancer_node_ports: keep => "allocateLoadBalancerNodePorts",
    load_balancer_class: keep => "loadBalancerClass",
    internal_traffic_policy: keep => "internalTrafficPolicy",
    traffic_distribution: keep => "trafficDistribution",
});
to_json!(core::ServicePort {
    name => "name", protocol => "protocol", app_protocol => "appProtocol", port: keep => "port",
    target_port => "targetPort", node_port => "nodePort",
});
to_json!(core::SessionAffinityConfig { client_ip => "clientIP" });
to_json!(core::ClientIpConfig { timeout_seconds: keep => "timeoutSeconds" });
to_json!(core::ServiceStatus { load_balancer => "loadBalancer", conditions => "conditions" });
to_json!(core::LoadBalancerStatus { ingress => "ingress" });
to_json!(core::LoadBalancerIngress {
    ip => "ip", hostname => "hostname", ip_mode: keep => "ipMode", ports => "ports",
});
to_json!(core::PortStatus { port: keep => "port", protocol: keep => "protocol", error: keep => "error" });
to_json!(core::ResourceQuota { metadata => "metadata", spec => "spec", status => "status" });
to_json!(core::ResourceQuotaSpec {
    hard => "hard", scopes => "scopes", scope_selector => "scopeSelector",
});
to_json!(core::ResourceQuotaStatus { hard => "hard", used => "used" });
to_json!(core::ScopeSelector { match_expressions => "matchExpressions" });
to_json!(core::ScopedResourceSelectorRequirement {
    scope_name: keep => "scopeName", operator: keep => "operator", values => "values",
});
to_json!(scheduling::PriorityClass {
    metadata => "metadata", value: keep => "value", global_default => "globalDefault",
    description => "description", preemption_policy: keep => "preemptionPolicy",
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    fn def(plural: &str) -> ResourceDef {
        let reg = Registry::new(builtin_resources());
        let id = reg.core(plural).expect("served");
        reg.get(id).clone()
    }

    fn wire(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let u = Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut out = MAGIC.to_vec();
        out.extend(u.encode_to_vec());
        out
    }

    #[test]
    fn secret_bytes_are_base64_and_empty_fields_are_left_out() {
        let s = core::Secret {
            metadata: Some(meta::ObjectMeta {
                name: Some("s".into()),
                namespace: Some("prod".into()),
                creation_timestamp: None,
                ..Default::default()
            }),
            data: BTreeMap::from([("a".to_string(), b"b".to_vec())]),
            r#type: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(&def("secrets"), &wire("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "s", "namespace": "prod"},
                   "data": {"a": "Yg=="}, "type": "Opaque"})
        );
    }

    #[test]
    fn service_port_target_port_is_int_or_string() {
        let svc = core::Service {
            metadata: Some(meta::ObjectMeta {
                name: Some("sv".into()),
                ..Default::default()
            }),
            spec: Some(core::ServiceSpec {
                ports: vec![core::ServicePort {
                    name: Some("http".into()),
                    port: Some(80),
                    target_port: Some(IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: Some("web".into()),
                    }),
                    ..Default::default()
                }],
                cluster_ip: Some("None".into()),
                ..Default::default()
            }),
            status: None,
        };
        let v = decode(
            &def("services"),
            &wire("v1", "Service", svc.encode_to_vec()),
        )
        .unwrap();
        assert_eq!(v["spec"]["ports"][0]["targetPort"], json!("web"));
        assert_eq!(v["spec"]["clusterIP"], json!("None"));
    }

    #[test]
    fn unsupported_kinds_and_bad_bodies_are_refused() {
        let e = decode(&def("pods"), b"k8s\x00").unwrap_err();
        assert_eq!(e.code, 415);
        let e = decode(&def("configmaps"), b"{}").unwrap_err();
        assert_eq!(e.code, 400);
        let e = decode(&def("configmaps"), b"k8s\x00\xff\xff").unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("ConfigMap"), "{}", e.message);
    }
}
