//! Kubernetes' own admission plugins for a pod create, which every kube-apiserver runs
//! (they are in its default plugin list) whatever else is installed:
//!
//! - `ServiceAccount` (`plugin/pkg/admission/serviceaccount/admission.go`): an empty
//!   `serviceAccountName` becomes `default`; the v1 form mirrors it in the deprecated
//!   `serviceAccount`; unless the pod sets `automountServiceAccountToken: false`, the projected
//!   token volume `kube-api-access-XXXXX` and its read-only mount in every container
//!   (`mountServiceAccountToken`; the account itself is not looked up, so its own
//!   `automountServiceAccountToken` is not honoured).
//! - `Priority` (`plugin/pkg/admission/priority/admission.go` `admitPod`): `spec.priority` and
//!   `spec.preemptionPolicy` from the pod's PriorityClass, 0 and `PreemptLowerPriority` without
//!   one; a class that does not exist is refused with 403 "no PriorityClass with name NAME was
//!   found", and so is a `priority` that differs from the class's value.
//! - `DefaultTolerationSeconds` (`plugin/pkg/admission/defaulttolerationseconds`): tolerations
//!   of 300 s for the `node.kubernetes.io/not-ready` and `unreachable` NoExecute taints, unless
//!   the pod already tolerates them.
//!
//! The differences were found by creating the same launcher pods on kube-apiserver v1.36 and
//! here (tests/server_conformance.rs).

use serde_json::{Value, json};

use super::resources::ResourceDef;
use super::status::ApiError;

/// The PriorityClasses kube-apiserver creates at start (`pkg/apis/scheduling` `SystemPriorityClasses`).
const SYSTEM_PRIORITY_CLASSES: [(&str, i64); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];
const DEFAULT_TOLERATION_SECONDS: i64 = 300;
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Admit a new pod: `lookup_class` finds a PriorityClass by name. `name` names the pod in
/// errors (its `generateName` when the name is not chosen yet, as kube-apiserver does).
pub(super) fn admit_pod(
    def: &ResourceDef,
    name: &str,
    pod: &mut Value,
    lookup_class: impl Fn(&str) -> Option<Value>,
) -> Result<(), ApiError> {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    // ServiceAccount.
    let account = match spec.get("serviceAccountName").and_then(Value::as_str) {
        Some(a) if !a.is_empty() => a.to_string(),
        _ => "default".to_string(),
    };
    spec.insert("serviceAccountName".into(), json!(account));
    spec.insert("serviceAccount".into(), json!(account));
    mount_service_account_token(spec);

    // Priority.
    let class = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .map(str::to_string);
    let (priority, preemption) = match &class {
        None => (0, "PreemptLowerPriority".to_string()),
        Some(class) => match SYSTEM_PRIORITY_CLASSES.iter().find(|(n, _)| n == class) {
            Some((_, value)) => (*value, "PreemptLowerPriority".to_string()),
            None => {
                let pc = lookup_class(class).ok_or_else(|| {
                    ApiError::forbidden(
                        def,
                        name,
                        &format!("no PriorityClass with name {class} was found"),
                    )
                })?;
                (
                    pc.get("value").and_then(Value::as_i64).unwrap_or(0),
                    pc.get("preemptionPolicy")
                        .and_then(Value::as_str)
                        .unwrap_or("PreemptLowerPriority")
                        .to_string(),
                )
            }
        },
    };
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != priority
    {
        return Err(ApiError::forbidden(
            def,
            name,
            &format!(
                "the integer value of priority ({given}) must not be provided in pod spec; \
                 priority admission controller computed {priority} from the given PriorityClass name"
            ),
        ));
    }
    spec.insert("priority".into(), json!(priority));
    spec.entry("preemptionPolicy").or_insert(json!(preemption));

    // DefaultTolerationSeconds.
    let tolerations = spec
        .entry("tolerations")
        .or_insert_with(|| json!([]))
        .as_array_mut();
    if let Some(tolerations) = tolerations {
        for taint in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
            if !tolerations.iter().any(|t| tolerates_no_execute(t, taint)) {
                tolerations.push(json!({
                    "key": taint,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
                }));
            }
        }
    }
    Ok(())
}

/// Where the ServiceAccount plugin mounts the token (`DefaultAPITokenMountPath`).
const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ServiceAccount plugin's `mountServiceAccountToken`
/// (plugin/pkg/admission/serviceaccount/admission.go): unless automount is off or a container
/// already mounts something at the token path, a projected `kube-api-access-XXXXX` volume (token,
/// `kube-root-ca.crt`, namespace) mounted read-only in every init and regular container.
fn mount_service_account_token(spec: &mut serde_json::Map<String, Value>) {
    if spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        == Some(false)
    {
        return;
    }
    let containers = ["initContainers", "containers"];
    let mounted = containers.iter().any(|k| {
        spec.get(*k).and_then(Value::as_array).is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("volumeMounts")
                    .and_then(Value::as_array)
                    .is_some_and(|ms| {
                        ms.iter().any(|m| {
                            m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH)
                        })
                    })
            })
        })
    });
    if mounted {
        return;
    }
    let name = format!("kube-api-access-{}", super::object::random_suffix());
    let volume = json!({"name": name, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]}});
    if let Some(vs) = spec
        .entry("volumes")
        .or_insert_with(|| json!([]))
        .as_array_mut()
    {
        vs.push(volume);
    }
    for key in containers {
        for c in spec
            .get_mut(key)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(ms) = c
                .as_object_mut()
                .map(|o| o.entry("volumeMounts").or_insert_with(|| json!([])))
                .and_then(Value::as_array_mut)
            {
                ms.push(json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
            }
        }
    }
}

/// Whether toleration `t` tolerates the NoExecute taint `key` (`defaulttolerationseconds`'s
/// check: the key, or an empty key with `Exists`; the NoExecute effect or any effect).
fn tolerates_no_execute(t: &Value, key: &str) -> bool {
    let t_key = t.get("key").and_then(Value::as_str).unwrap_or("");
    let operator = t.get("operator").and_then(Value::as_str).unwrap_or("Equal");
    let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
    (t_key == key || (t_key.is_empty() && operator == "Exists"))
        && (effect.is_empty() || effect == "NoExecute")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods() -> ResourceDef {
        super::super::resources::builtin_resources()
            .into_iter()
            .find(|d| d.plural == "pods")
            .expect("pods")
    }

    fn classes(name: &str) -> Option<Value> {
        (name == "high").then(|| json!({"value": 1000, "preemptionPolicy": "Never"}))
    }

    #[test]
    fn a_plain_pod_gets_the_default_account_priority_zero_and_the_node_tolerations() {
        let mut pod = json!({"spec": {"containers": []}});
        admit_pod(&pods(), "p", &mut pod, classes).expect("admitted");
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert_eq!(pod["spec"]["serviceAccount"], "default");
        assert_eq!(pod["spec"]["priority"], 0);
        assert_eq!(pod["spec"]["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn the_priority_class_decides_priority_and_preemption() {
        let mut pod = json!({"spec": {"priorityClassName": "high", "serviceAccountName": "sa"}});
        admit_pod(&pods(), "p", &mut pod, classes).expect("admitted");
        assert_eq!(pod["spec"]["priority"], 1000);
        assert_eq!(pod["spec"]["preemptionPolicy"], "Never");
        assert_eq!(pod["spec"]["serviceAccount"], "sa");

        let mut system = json!({"spec": {"priorityClassName": "system-node-critical"}});
        admit_pod(&pods(), "p", &mut system, classes).expect("admitted");
        assert_eq!(system["spec"]["priority"], 2_000_001_000);
    }

    #[test]
    fn a_missing_class_or_a_conflicting_priority_is_forbidden() {
        let mut pod = json!({"spec": {"priorityClassName": "nope"}});
        let e = admit_pod(&pods(), "virt-launcher-x-", &mut pod, classes).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"virt-launcher-x-\" is forbidden: no PriorityClass with name nope was found"
        );
        let mut pod = json!({"spec": {"priorityClassName": "high", "priority": 5}});
        let e = admit_pod(&pods(), "p", &mut pod, classes).unwrap_err();
        assert!(
            e.message.contains("must not be provided in pod spec"),
            "{}",
            e.message
        );
    }

    #[test]
    fn tolerations_already_given_are_not_repeated() {
        let mut pod = json!({"spec": {"tolerations": [
            {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"operator": "Exists"},
        ]}});
        admit_pod(&pods(), "p", &mut pod, classes).expect("admitted");
        assert_eq!(pod["spec"]["tolerations"].as_array().map(Vec::len), Some(2));
    }
}
