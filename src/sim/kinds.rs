//! Per-kind behaviour the generic store calls into: create-time defaults and status reset,
//! metadata validation, pod update restrictions and graceful-deletion periods.
//!
//! Sources: `pkg/registry/core/pod/strategy.go` (PrepareForCreate: phase Pending + QoS class;
//! `CheckGracefulDelete`), `pkg/apis/core/v1/defaults.go` (pod defaults),
//! `pkg/registry/core/namespace/strategy.go` (`kubernetes` finalizer, phase Active),
//! apiextensions `strategy.go` (custom resources drop `.status` on create when the status
//! subresource is enabled), `pkg/apis/core/validation/validation.go` (`ValidatePodUpdate`).

use serde_json::{Map, Value, json};

use super::object::{meta, meta_mut};
use super::resources::ResourceDef;
use super::selector::{is_dns_label, is_dns_subdomain, validate_label_key, validate_label_value};
use super::status::{ApiError, Cause};

/// Finalizer names the API server accepts without a `/` (`validation.go` standard finalizers).
pub(crate) const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// The API server's warnings for finalizer names without a domain prefix (other than the
/// standard ones): `metadata.finalizers: "x": prefer a domain-qualified finalizer name
/// including a path (/) to avoid accidental conflicts with other finalizer writers`, sent in
/// `Warning` headers; the write succeeds.
pub(crate) fn finalizer_warnings<S: AsRef<str>>(finalizers: &[S]) -> Vec<String> {
    finalizers
        .iter()
        .map(AsRef::as_ref)
        .filter(|f| !f.contains('/') && !STANDARD_FINALIZERS.contains(f))
        .map(|f| {
            format!(
                "metadata.finalizers: {f:?}: prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers"
            )
        })
        .collect()
}

/// Defaulting and status reset on create. `obj` already carries name/namespace.
pub(crate) fn prepare_create(def: &ResourceDef, obj: &mut Value) {
    match (def.group, def.plural) {
        ("", "pods") => {
            default_pod_spec(obj);
            let qos = qos_class(obj);
            if let Some(m) = obj.as_object_mut() {
                m.insert(
                    "status".into(),
                    json!({"phase": "Pending", "qosClass": qos}),
                );
            }
        }
        ("", "namespaces") => {
            if let Some(m) = obj.as_object_mut() {
                let spec = m.entry("spec").or_insert_with(|| json!({}));
                if let Some(s) = spec.as_object_mut() {
                    s.insert("finalizers".into(), json!(["kubernetes"]));
                }
                m.insert("status".into(), json!({"phase": "Active"}));
            }
            // The namespace controller labels every namespace with its name.
            let m = meta_mut(obj);
            let name = m.get("name").cloned().unwrap_or(Value::Null);
            let labels = m.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), name);
            }
        }
        // `pkg/registry/core/persistentvolumeclaim/strategy.go` PrepareForCreate clears the
        // status; `pkg/apis/core/v1/defaults.go` `SetDefaults_PersistentVolumeClaim` sets
        // phase Pending and volumeMode Filesystem.
        ("", "persistentvolumeclaims") => {
            if let Some(m) = obj.as_object_mut() {
                let spec = m.entry("spec").or_insert_with(|| json!({}));
                if let Some(s) = spec.as_object_mut() {
                    s.entry("volumeMode").or_insert_with(|| json!("Filesystem"));
                }
                m.insert("status".into(), json!({"phase": "Pending"}));
            }
        }
        // Nodes register with their status (kubelet), services keep theirs.
        ("", "nodes") | ("", "services") => {}
        _ if def.status_subresource => {
            if let Some(m) = obj.as_object_mut() {
                if def.builtin {
                    m.insert("status".into(), json!({}));
                } else {
                    m.remove("status");
                }
            }
        }
        _ => {}
    }
}

fn default_pod_spec(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let spec = m.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    let defaults: [(&str, Value); 5] = [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("securityContext", json!({})),
    ];
    for (k, v) in defaults {
        spec.entry(k).or_insert(v);
    }
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                c.entry("terminationMessagePath")
                    .or_insert(json!("/dev/termination-log"));
                c.entry("terminationMessagePolicy").or_insert(json!("File"));
                if !c.contains_key("imagePullPolicy") {
                    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                    c.insert("imagePullPolicy".into(), json!(pull_policy_for(image)));
                }
                c.entry("resources").or_insert(json!({}));
                default_requests_to_limits(c);
                for var in c
                    .get_mut("env")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    default_field_ref(var.pointer_mut("/valueFrom/fieldRef"));
                }
            }
        }
    }
    for volume in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_volume(volume);
    }
}

/// `SetDefaults_Pod` (defaults.go): a limit without a request gives the request (on a Pod
/// only, not a pod template).
fn default_requests_to_limits(container: &mut Map<String, Value>) {
    let Some(resources) = container
        .get_mut("resources")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let requests = resources.entry("requests").or_insert_with(|| json!({}));
    if let Some(requests) = requests.as_object_mut() {
        for (name, value) in limits {
            requests.entry(name).or_insert(value);
        }
    }
}

/// `SetDefaults_ObjectFieldSelector`: a field reference's `apiVersion` is `v1`.
fn default_field_ref(field_ref: Option<&mut Value>) {
    if let Some(r) = field_ref.and_then(Value::as_object_mut) {
        r.entry("apiVersion").or_insert(json!("v1"));
    }
}

/// Volume defaults: the field references of downward API items (also inside projected
/// volumes) and an image volume's `pullPolicy` (`SetDefaults_ImageVolumeSource`: `Always` for
/// `:latest` or no tag, else `IfNotPresent`, as for containers).
fn default_volume(volume: &mut Value) {
    let default_items = |items: Option<&mut Value>| {
        for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
            default_field_ref(item.get_mut("fieldRef"));
        }
    };
    default_items(volume.pointer_mut("/downwardAPI/items"));
    for source in volume
        .pointer_mut("/projected/sources")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_items(source.pointer_mut("/downwardAPI/items"));
    }
    if let Some(image) = volume.get_mut("image").and_then(Value::as_object_mut)
        && !image.contains_key("pullPolicy")
    {
        let reference = image.get("reference").and_then(Value::as_str).unwrap_or("");
        image.insert("pullPolicy".into(), json!(pull_policy_for(reference)));
    }
}

/// `Always` for an image without a tag or digest or with `:latest`, else `IfNotPresent`.
fn pull_policy_for(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if !last.contains(':') && !last.contains('@') || last.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    }
}

/// `GetPodQOS` (`pkg/apis/core/helper/qos/qos.go`), simplified to cpu and memory over
/// `containers` and `initContainers`.
pub(crate) fn qos_class(pod: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for list in ["containers", "initContainers"] {
        let Some(cs) = pod
            .pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
        else {
            continue;
        };
        for c in cs {
            let req = c.pointer("/resources/requests").and_then(Value::as_object);
            let lim = c.pointer("/resources/limits").and_then(Value::as_object);
            let get = |m: Option<&Map<String, Value>>, k: &str| m.and_then(|m| m.get(k)).cloned();
            for r in ["cpu", "memory"] {
                let rq = get(req, r);
                let lm = get(lim, r);
                if rq.is_some() || lm.is_some() {
                    any = true;
                }
                // A missing request defaults to the limit.
                match (rq, lm) {
                    (_, None) => guaranteed = false,
                    (Some(a), Some(b)) if a != b => guaranteed = false,
                    _ => {}
                }
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Validate `metadata` of an object about to be stored: name format, labels, annotations size
/// is not checked, finalizer names.
pub(crate) fn validate_meta(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    let name = super::object::name(obj);
    let name_ok = if def.plural == "namespaces" {
        is_dns_label(name)
    } else {
        is_dns_subdomain(name)
    };
    if !name_ok {
        let detail = if def.plural == "namespaces" {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        };
        return Err(ApiError::invalid_field(
            def,
            name,
            "metadata.name",
            name,
            detail,
        ));
    }
    let mut causes = Vec::new();
    if let Some(labels) = meta(obj).and_then(|m| m.get("labels")) {
        match labels.as_object() {
            Some(labels) => {
                for (k, v) in labels {
                    if let Err(e) = validate_label_key(k) {
                        causes.push(Cause {
                            reason: "FieldValueInvalid".into(),
                            message: format!("Invalid value: {k:?}: {e}"),
                            field: "metadata.labels".into(),
                        });
                    }
                    match v.as_str() {
                        Some(s) => {
                            if let Err(e) = validate_label_value(s) {
                                causes.push(Cause {
                                    reason: "FieldValueInvalid".into(),
                                    message: format!("Invalid value: {s:?}: {e}"),
                                    field: "metadata.labels".into(),
                                });
                            }
                        }
                        None => {
                            return Err(ApiError::bad_request(format!(
                                "{} in version {:?} cannot be handled as a {}: json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.labels of type string",
                                def.kind,
                                def.version,
                                def.kind,
                                json_type(v)
                            )));
                        }
                    }
                }
            }
            None if labels.is_null() => {}
            None => {
                return Err(ApiError::bad_request(format!(
                    "{} in version {:?} cannot be handled as a {}: json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.labels of type map[string]string",
                    def.kind,
                    def.version,
                    def.kind,
                    json_type(labels)
                )));
            }
        }
    }
    if let Some(ann) = meta(obj).and_then(|m| m.get("annotations"))
        && !ann.is_null()
        && !ann
            .as_object()
            .is_some_and(|m| m.values().all(Value::is_string))
    {
        return Err(ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: json: cannot unmarshal into Go struct field ObjectMeta.metadata.annotations of type map[string]string",
            def.kind, def.version, def.kind
        )));
    }
    for (i, f) in super::object::finalizers(obj).iter().enumerate() {
        // A name without a prefix is accepted (apimachinery's ValidateFinalizerName is
        // IsQualifiedName), with a warning: see `finalizer_warnings`.
        if !f.contains('/') && !is_dns_subdomain(&f.to_ascii_lowercase()) {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {f:?}: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
                ),
                field: format!("metadata.finalizers[{i}]"),
            });
        } else if let Some((prefix, rest)) = f.split_once('/')
            && (!is_dns_subdomain(prefix) || rest.is_empty())
        {
            causes.push(Cause {
                reason: "FieldValueInvalid".into(),
                message: format!(
                    "Invalid value: {f:?}: a qualified name must be of the form prefix/name"
                ),
                field: format!("metadata.finalizers[{i}]"),
            });
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(def, name, causes))
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Extra update validation for the main endpoint (`ValidatePodUpdate`): a pod's spec may only
/// change container images, `activeDeadlineSeconds`, added tolerations and removed scheduling
/// gates. `spec.nodeName` is set through the `binding` subresource, not by update.
pub(crate) fn validate_update(def: &ResourceDef, old: &Value, new: &Value) -> Result<(), ApiError> {
    if def.group.is_empty() && def.plural == "pods" {
        let mask = |v: &Value| {
            let mut s = v.get("spec").cloned().unwrap_or(Value::Null);
            if let Some(m) = s.as_object_mut() {
                m.remove("activeDeadlineSeconds");
                m.remove("tolerations");
                m.remove("schedulingGates");
                for list in ["containers", "initContainers"] {
                    if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
                        for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                            c.remove("image");
                        }
                    }
                }
            }
            s
        };
        if mask(old) != mask(new) {
            return Err(ApiError::forbidden_field(
                def,
                super::object::name(new),
                "spec",
                "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
            ));
        }
    }
    if def.group.is_empty() && def.plural == "namespaces" {
        // spec.finalizers are only changed through the `finalize` subresource.
        if old.pointer("/spec") != new.pointer("/spec") {
            return Err(ApiError::forbidden_field(
                def,
                super::object::name(new),
                "spec.finalizers",
                "spec.finalizers can only be changed through the finalize subresource",
            ));
        }
    }
    Ok(())
}

/// The grace period a delete uses (`CheckGracefulDelete`): only pods are graceful. The
/// requested period, else `spec.terminationGracePeriodSeconds` (default 30); 0 for pods not
/// bound to a node and for pods in phase `Succeeded`/`Failed`. Negative values become 1.
pub(crate) fn grace_period(def: &ResourceDef, obj: &Value, requested: Option<i64>) -> i64 {
    if !(def.group.is_empty() && def.plural == "pods") {
        return 0;
    }
    let unbound = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty);
    let phase = obj
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    if unbound || phase == "Succeeded" || phase == "Failed" {
        return 0;
    }
    let g = requested.unwrap_or_else(|| {
        obj.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(30)
    });
    if g < 0 { 1 } else { g }
}

/// Whether an object with a deletionTimestamp and no finalizers must still stay: a namespace
/// keeps existing until the namespace controller has emptied it and cleared `spec.finalizers`.
pub(crate) fn blocks_removal(def: &ResourceDef, obj: &Value) -> bool {
    def.group.is_empty()
        && def.plural == "namespaces"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_def as def;

    #[test]
    fn pods_start_pending_with_defaults() {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}, "status": {"phase": "Running"}});
        prepare_create(&def("pods"), &mut p);
        assert_eq!(p["status"]["phase"], "Pending");
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        assert_eq!(p["spec"]["terminationGracePeriodSeconds"], 30);
        assert_eq!(
            p["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
    }

    #[test]
    fn qos() {
        let g = json!({"spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        assert_eq!(qos_class(&g), "Guaranteed");
        let b = json!({"spec": {"containers": [{"resources": {"requests": {"cpu": "1"}}}]}});
        assert_eq!(qos_class(&b), "Burstable");
    }

    #[test]
    fn crd_status_dropped_on_create() {
        let mut vm = json!({"metadata": {"name": "v"}, "spec": {}, "status": {"printableStatus": "Running"}});
        prepare_create(&def("virtualmachines"), &mut vm);
        assert!(vm.get("status").is_none());
        // VMIs have no status subresource in KubeVirt's CRD: their status is kept.
        let mut vmi =
            json!({"metadata": {"name": "v"}, "spec": {}, "status": {"phase": "Pending"}});
        prepare_create(&def("virtualmachineinstances"), &mut vmi);
        assert_eq!(vmi["status"]["phase"], "Pending");
    }

    #[test]
    fn finalizer_names_validated() {
        let ok = json!({"metadata": {"name": "a", "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine", "orphan"]}});
        assert!(validate_meta(&def("pods"), &ok).is_ok());
        // An unqualified name is accepted (with a warning); a malformed one is not.
        let unqualified = json!({"metadata": {"name": "a", "finalizers": ["bogus", "orphan"]}});
        assert!(validate_meta(&def("pods"), &unqualified).is_ok());
        assert_eq!(
            finalizer_warnings(&super::super::object::finalizers(&unqualified)),
            vec!["metadata.finalizers: \"bogus\": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers".to_string()]
        );
        let bad = json!({"metadata": {"name": "a", "finalizers": ["-bogus"]}});
        assert_eq!(validate_meta(&def("pods"), &bad).unwrap_err().code, 422);
        let bad_name = json!({"metadata": {"name": "Bad_Name"}});
        assert_eq!(
            validate_meta(&def("pods"), &bad_name).unwrap_err().code,
            422
        );
    }

    #[test]
    fn grace_rules() {
        let pods = def("pods");
        let unbound = json!({"spec": {"terminationGracePeriodSeconds": 30}});
        assert_eq!(grace_period(&pods, &unbound, None), 0);
        let bound = json!({"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}});
        assert_eq!(grace_period(&pods, &bound, None), 30);
        assert_eq!(grace_period(&pods, &bound, Some(5)), 5);
        let done = json!({"spec": {"nodeName": "n"}, "status": {"phase": "Succeeded"}});
        assert_eq!(grace_period(&pods, &done, None), 0);
        assert_eq!(grace_period(&def("configmaps"), &bound, Some(5)), 0);
    }

    #[test]
    fn pod_spec_is_mostly_immutable() {
        let pods = def("pods");
        let old = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let img = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "b"}]}});
        assert!(validate_update(&pods, &old, &img).is_ok());
        let node = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "a"}]}});
        assert_eq!(validate_update(&pods, &old, &node).unwrap_err().code, 422);
    }
}
