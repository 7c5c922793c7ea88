//! Admission: what virt-api's webhooks and the Pod Security admission plugin do to the requests
//! the controller and users send, for what they observe. Off with
//! [`super::ApiServerConfig::admission`] `= false` (`cluster serve --no-admission`), which is a
//! cluster without virt-api.
//!
//! Modelled (KubeVirt v1.9.0):
//! - VMI create (`pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go`, `Mutate`):
//!   the finalizer `kubevirt.io/foregroundDeleteVirtualMachine` appended, `status.phase: Pending`
//!   and a `Pending` entry in `status.phaseTransitionTimestamps`.
//! - VM create (`mutators/vm-mutator.go`, `Mutate`): `setFirmwareDefaultsIfEmpty` (a random
//!   `uuid.New()` firmware UUID and serial in `spec.template.spec.domain.firmware` when empty:
//!   same-name VMs in different namespaces get different UUIDs), then
//!   `defaults.SetVirtualMachineDefaults` (`pkg/defaults/defaults.go`: template
//!   `architecture` `amd64`, `domain.machine.type` `q35`) and, for PCIe machines,
//!   `setDefaultPciTopologyVersion` (template annotation `kubevirt.io/pci-topology-version: v3`).
//! - Quantities that Go cannot unmarshal are refused by the mutators before anything else
//!   (`webhookutils.GetVMFromAdmissionReview` → `ToAdmissionResponseError`, 400), with
//!   apimachinery's `ErrFormatWrong` text.
//! - VM create and update (`validating-webhook/admitters/vms-admitter.go`, `validateRunStrategy`):
//!   `running` with `runStrategy`, neither of them, and an unknown run strategy, 422 with
//!   virt-api's messages and causes.
//! - The API server wraps webhook denials as `webhookerrors.ToStatusErr` does
//!   (`admission webhook "<name>" denied the request: <message>`).
//! - Pod Security admission (`k8s.io/pod-security-admission`) in `enforce` mode for pods created
//!   in a namespace labelled `pod-security.kubernetes.io/enforce`: the baseline checks
//!   (privileged, host namespaces, hostPath volumes, host ports, capabilities beyond the baseline
//!   set) and, for `restricted`, allowPrivilegeEscalation, non-root, seccomp, capabilities
//!   (drop ALL, add only NET_BIND_SERVICE) and volume types; 403 `violates PodSecurity
//!   "<level>:<version>": ...`.

use serde_json::{Map, Value, json};

use super::object;
use super::resources::ResourceDef;
use super::status::ApiError;
use crate::api::quantity::ParsedQuantity;

/// The VM validating webhook (`pkg/virt-operator/resource/generate/components/webhooks.go`).
pub(crate) const VM_VALIDATOR: &str = "virtualmachine-validator.kubevirt.io";
/// The VM mutating webhook.
pub(crate) const VM_MUTATOR: &str = "virtualmachines-mutator.kubevirt.io";
/// The VMI mutating webhook.
pub(crate) const VMI_MUTATOR: &str = "virtualmachineinstances-mutator.kubevirt.io";

/// `v1.VirtualMachineInstanceFinalizer`.
const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
/// `v1.PciTopologyVersionAnnotation`.
const PCI_TOPOLOGY_ANNOTATION: &str = "kubevirt.io/pci-topology-version";
/// `validRunStrategies` (vms-admitter.go).
const RUN_STRATEGIES: &[&str] = &["Halted", "Manual", "Always", "RerunOnFailure", "Once"];
/// apimachinery's `resource.ErrFormatWrong`.
const QUANTITY_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

fn is_kubevirt(def: &ResourceDef, kind: &str) -> bool {
    def.group == "kubevirt.io" && def.kind == kind
}

/// `webhookerrors.ToStatusErr`: the webhook's status with the denial prefix.
fn denied(webhook: &str, code: u16, reason: &str, message: &str) -> ApiError {
    ApiError {
        code,
        reason: reason.to_string(),
        message: format!("admission webhook {webhook:?} denied the request: {message}"),
        details: None,
        retry_after: None,
    }
}

/// One cause of a webhook's `ToAdmissionResponse`.
struct Cause {
    kind: &'static str,
    message: String,
    field: String,
}

/// `webhookutils.ToAdmissionResponse`: the messages of the first ten causes joined by `, `.
fn denied_with_causes(webhook: &str, causes: &[Cause]) -> ApiError {
    let shown = &causes[..causes.len().min(10)];
    let mut message = shown
        .iter()
        .map(|c| c.message.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if causes.len() > 10 {
        message = format!(
            "{message}, and {} more validation errors",
            causes.len() - 10
        );
    }
    let mut e = denied(webhook, 422, "Invalid", &message);
    let mut d = Map::new();
    d.insert(
        "causes".into(),
        Value::Array(
            shown
                .iter()
                .map(|c| json!({"reason": c.kind, "message": c.message, "field": c.field}))
                .collect(),
        ),
    );
    e.details = Some(Box::new(d));
    e
}

/// Mutating admission of a create: the VMI and VM mutators. `obj` is the object as it will be
/// stored (name not yet generated).
///
/// # Errors
/// The mutators' refusals (malformed quantities).
pub(crate) fn mutate_create(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    if is_kubevirt(def, "VirtualMachineInstance") {
        check_quantities(VMI_MUTATOR, obj.get("spec"))?;
        mutate_vmi(obj);
    } else if is_kubevirt(def, "VirtualMachine") {
        if let Some(template_spec) = obj.pointer("/spec/template/spec") {
            check_quantities(VM_MUTATOR, Some(template_spec))?;
        }
        check_data_volume_templates(VM_MUTATOR, obj)?;
        if object::is_deleting(obj) || obj.pointer("/spec/template").is_none() {
            // vm-mutator.go returns early for a VM being deleted; without a template the
            // validating webhook refuses it.
            return Ok(());
        }
        mutate_vm(obj);
    }
    Ok(())
}

/// Validating admission of a create or an update of the main resource.
///
/// # Errors
/// The validators' refusals.
pub(crate) fn validate(def: &ResourceDef, obj: &Value) -> Result<(), ApiError> {
    if is_kubevirt(def, "VirtualMachine") {
        let causes = validate_run_strategy(obj);
        if !causes.is_empty() {
            return Err(denied_with_causes(VM_VALIDATOR, &causes));
        }
    }
    Ok(())
}

/// `vmi-mutator.go` on create: the foreground finalizer, phase `Pending` with its timestamp.
fn mutate_vmi(obj: &mut Value) {
    let mut fin = object::finalizers(obj);
    fin.push(VMI_FINALIZER.to_string());
    object::set_finalizers(obj, &fin);
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let status = m.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    if let Some(s) = status.as_object_mut() {
        s.insert("phase".into(), json!("Pending"));
        let stamps = s
            .entry("phaseTransitionTimestamps")
            .or_insert_with(|| json!([]));
        if !stamps.is_array() {
            *stamps = json!([]);
        }
        if let Some(a) = stamps.as_array_mut() {
            a.push(json!({"phase": "Pending", "phaseTransitionTimestamp": object::now_rfc3339()}));
        }
    }
}

fn object_at<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if let Some(m) = v.as_object_mut() {
        let e = m.entry(key).or_insert_with(|| json!({}));
        if !e.is_object() {
            *e = json!({});
        }
    }
    // Just made an object; an input that is not an object was refused by decoding.
    v.get_mut(key)
        .and_then(Value::as_object_mut)
        .expect("an object was just inserted")
}

fn empty_str(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str).is_none_or(str::is_empty)
}

/// `vm-mutator.go` on create: firmware UUID and serial, architecture, machine type, PCI
/// topology version.
fn mutate_vm(obj: &mut Value) {
    let Some(template) = obj.pointer_mut("/spec/template") else {
        return;
    };
    if !template.is_object() {
        return;
    }
    let spec = object_at(template, "spec");
    let mut spec_v = Value::Object(std::mem::take(spec));
    {
        let domain = object_at(&mut spec_v, "domain");
        let mut domain_v = Value::Object(std::mem::take(domain));
        {
            // setFirmwareDefaultsIfEmpty: uuid.New() for both.
            let fw = object_at(&mut domain_v, "firmware");
            if empty_str(fw.get("uuid")) {
                fw.insert("uuid".into(), json!(uuid::Uuid::new_v4().to_string()));
            }
            if empty_str(fw.get("serial")) {
                fw.insert("serial".into(), json!(uuid::Uuid::new_v4().to_string()));
            }
        }
        {
            // setVMDefaultMachineType: GetMachineType(amd64) is "q35".
            let machine = object_at(&mut domain_v, "machine");
            if empty_str(machine.get("type")) {
                machine.insert("type".into(), json!("q35"));
            }
        }
        *object_at(&mut spec_v, "domain") = match domain_v {
            Value::Object(m) => m,
            _ => Map::new(),
        };
    }
    // setDefaultArchitecture: the cluster's default architecture.
    if let Some(s) = spec_v.as_object_mut()
        && empty_str(s.get("architecture"))
    {
        s.insert("architecture".into(), json!("amd64"));
    }
    let supports_pcie = {
        let arch = object::str_at(&spec_v, "/architecture");
        let machine = object::str_at(&spec_v, "/domain/machine/type");
        // defaults.SupportsPCIeHotplug
        matches!(arch, "amd64" | "arm64" | "")
            && (machine.contains("q35") || machine.starts_with("virt"))
    };
    *object_at(template, "spec") = match spec_v {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    if supports_pcie {
        let meta = object_at(template, "metadata");
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if !ann.is_object() {
            *ann = json!({});
        }
        if let Some(a) = ann.as_object_mut() {
            a.entry(PCI_TOPOLOGY_ANNOTATION)
                .or_insert_with(|| json!("v3"));
        }
    }
}

/// `validateRunStrategy` (vms-admitter.go:231-270), without the WaitAsReceiver feature gate.
fn validate_run_strategy(obj: &Value) -> Vec<Cause> {
    let spec = obj.get("spec");
    let running = spec.and_then(|s| s.get("running")).filter(|v| !v.is_null());
    let strategy = spec
        .and_then(|s| s.get("runStrategy"))
        .filter(|v| !v.is_null());
    let mut causes = Vec::new();
    if running.is_some() && strategy.is_some() {
        causes.push(Cause {
            kind: "FieldValueInvalid",
            message: "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead".into(),
            field: "spec.running".into(),
        });
    }
    if running.is_none() && strategy.is_none() {
        causes.push(Cause {
            kind: "FieldValueInvalid",
            message: "RunStrategy must be specified".into(),
            field: "spec.running".into(),
        });
    }
    if let Some(s) = strategy {
        let s = s.as_str().unwrap_or("");
        if s == "WaitAsReceiver" {
            causes.push(Cause {
                kind: "FieldValueInvalid",
                message: format!(
                    "Invalid RunStrategy ({s}), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource"
                ),
                field: "spec.runStrategy".into(),
            });
        } else if !RUN_STRATEGIES.contains(&s) {
            causes.push(Cause {
                kind: "FieldValueInvalid",
                message: format!("Invalid RunStrategy ({s})"),
                field: "spec.runStrategy".into(),
            });
        }
    }
    causes
}

/// A quantity as Go's `Quantity.UnmarshalJSON` reads it: a JSON string or number.
fn quantity_ok(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => ParsedQuantity::parse(s).is_ok(),
        Value::Number(n) => ParsedQuantity::parse(&n.to_string()).is_ok(),
        _ => false,
    }
}

fn check_quantity_map(webhook: &str, m: Option<&Value>) -> Result<(), ApiError> {
    if let Some(m) = m.and_then(Value::as_object)
        && m.values().any(|v| !quantity_ok(v))
    {
        return Err(denied(webhook, 400, "", QUANTITY_FORMAT));
    }
    Ok(())
}

fn check_quantity(webhook: &str, v: Option<&Value>) -> Result<(), ApiError> {
    if v.is_some_and(|v| !quantity_ok(v)) {
        return Err(denied(webhook, 400, "", QUANTITY_FORMAT));
    }
    Ok(())
}

/// The `resource.Quantity` fields of a VMI spec the Go types unmarshal: domain resources,
/// guest memory, empty-disk capacities.
fn check_quantities(webhook: &str, spec: Option<&Value>) -> Result<(), ApiError> {
    let Some(spec) = spec else {
        return Ok(());
    };
    for p in ["/domain/resources/requests", "/domain/resources/limits"] {
        check_quantity_map(webhook, spec.pointer(p))?;
    }
    for p in ["/domain/memory/guest", "/domain/memory/maxGuest"] {
        check_quantity(webhook, spec.pointer(p))?;
    }
    for vol in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        check_quantity(webhook, vol.pointer("/emptyDisk/capacity"))?;
    }
    Ok(())
}

/// Storage requests of `spec.dataVolumeTemplates` (CDI's `pvc` / `storage` resources).
fn check_data_volume_templates(webhook: &str, vm: &Value) -> Result<(), ApiError> {
    for t in vm
        .pointer("/spec/dataVolumeTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for p in [
            "/spec/pvc/resources/requests",
            "/spec/pvc/resources/limits",
            "/spec/storage/resources/requests",
            "/spec/storage/resources/limits",
        ] {
            check_quantity_map(webhook, t.pointer(p))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Pod Security admission

/// The Pod Security level a namespace enforces: `(level, version)` from its
/// `pod-security.kubernetes.io/enforce` and `enforce-version` labels; `None` for no label or
/// `privileged`.
pub(crate) fn enforced_level(namespace: &Value) -> Option<(String, String)> {
    let labels = namespace.pointer("/metadata/labels")?;
    let level = labels
        .get("pod-security.kubernetes.io/enforce")?
        .as_str()?
        .to_string();
    if level == "privileged" {
        return None;
    }
    let version = labels
        .get("pod-security.kubernetes.io/enforce-version")
        .and_then(Value::as_str)
        .unwrap_or("latest")
        .to_string();
    Some((level, version))
}

/// Capabilities the baseline level allows to add (`check_capabilities_baseline.go`).
const BASELINE_CAPS: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Volume types the restricted level allows (`check_restrictedVolumes.go`).
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// Containers of every kind, with the kind's JSON key.
fn all_containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect()
}

/// The containers adding capabilities that `allowed` refuses, and those capabilities (each
/// once, in order of appearance).
fn added_capabilities(
    containers: &[&Value],
    allowed: impl Fn(&str) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut names = Vec::new();
    let mut caps: Vec<String> = Vec::new();
    for c in containers {
        let extra: Vec<&str> = c
            .pointer("/securityContext/capabilities/add")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|a| !allowed(a))
            .collect();
        if extra.is_empty() {
            continue;
        }
        names.push(entry_name(c));
        for a in extra {
            if !caps.iter().any(|x| x == a) {
                caps.push(a.to_string());
            }
        }
    }
    (names, caps)
}

/// The names of the `entries` (containers or volumes) for which `hit` holds.
fn names_where(entries: &[&Value], hit: impl Fn(&Value) -> bool) -> Vec<String> {
    entries
        .iter()
        .filter(|e| hit(e))
        .map(|e| entry_name(e))
        .collect()
}

/// The `name` of a volume or container entry (`""` when absent).
fn entry_name(v: &Value) -> String {
    object::str_at(v, "/name").to_string()
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn containers_phrase(names: &[String]) -> String {
    if names.len() == 1 {
        format!("container {}", quoted(names))
    } else {
        format!("containers {}", quoted(names))
    }
}

/// The Pod Security checks of `level` (baseline or restricted) that `pod` fails, each as
/// `<check> (<details>)` in the order of the `policy` package's check registry.
fn pod_security_violations(level: &str, pod: &Value) -> Vec<String> {
    let null = Value::Null;
    let spec = pod.get("spec").unwrap_or(&null);
    let containers = all_containers(spec);
    let csc = |c: &Value| c.get("securityContext").cloned().unwrap_or(Value::Null);
    let mut out = Vec::new();

    // privileged
    let privileged = names_where(&containers, |c| {
        csc(c).get("privileged").and_then(Value::as_bool) == Some(true)
    });
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            containers_phrase(&privileged)
        ));
    }
    // host namespaces
    let host: Vec<&str> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| spec.get(*k).and_then(Value::as_bool) == Some(true))
        .collect();
    if !host.is_empty() {
        out.push(format!(
            "host namespaces ({})",
            host.iter()
                .map(|k| format!("{k}=true"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let volumes: Vec<&Value> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    // hostPath volumes
    let host_paths = names_where(&volumes, |v| v.get("hostPath").is_some());
    if !host_paths.is_empty() && level == "baseline" {
        out.push(format!(
            "hostPath volumes (volume{} {})",
            plural(&host_paths),
            quoted(&host_paths)
        ));
    }
    // hostPort
    let host_port = names_where(&containers, |c| {
        c.get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|p| p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) != 0)
    });
    if !host_port.is_empty() {
        out.push(format!(
            "hostPort ({} uses hostPort)",
            containers_phrase(&host_port)
        ));
    }
    // capabilities (baseline)
    let (bad_cap_containers, bad_caps) =
        added_capabilities(&containers, |a| BASELINE_CAPS.contains(&a));
    if !bad_caps.is_empty() && level == "baseline" {
        out.push(format!(
            "non-default capabilities ({} must not include {} in securityContext.capabilities.add)",
            containers_phrase(&bad_cap_containers),
            quoted(&bad_caps)
        ));
    }
    if level == "restricted" {
        out.extend(restricted_violations(spec, &containers, &volumes));
    }
    out
}

/// The checks only the `restricted` level adds, in the registry's order.
fn restricted_violations(spec: &Value, containers: &[&Value], volumes: &[&Value]) -> Vec<String> {
    let null = Value::Null;
    let psc = spec.get("securityContext").unwrap_or(&null);
    let csc = |c: &Value| c.get("securityContext").cloned().unwrap_or(Value::Null);
    let mut out = Vec::new();
    // restricted volume types
    let bad_volumes = names_where(volumes, |v| {
        v.as_object().is_some_and(|m| {
            m.keys()
                .any(|k| k != "name" && !RESTRICTED_VOLUMES.contains(&k.as_str()))
        })
    });
    if !bad_volumes.is_empty() {
        out.push(format!(
            "restricted volume types (volume{} {} use{} restricted volume type{})",
            plural(&bad_volumes),
            quoted(&bad_volumes),
            if bad_volumes.len() == 1 { "s" } else { "" },
            if bad_volumes.len() == 1 { "" } else { "s" },
        ));
    }
    // allowPrivilegeEscalation
    let escalation = names_where(containers, |c| {
        csc(c)
            .get("allowPrivilegeEscalation")
            .and_then(Value::as_bool)
            != Some(false)
    });
    if !escalation.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
            containers_phrase(&escalation)
        ));
    }
    // capabilities (restricted)
    let not_dropping = names_where(containers, |c| {
        !csc(c)
            .pointer("/capabilities/drop")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|d| d.as_str() == Some("ALL"))
    });
    let (adding, adding_caps) = added_capabilities(containers, |a| a == "NET_BIND_SERVICE");
    let mut cap_details = Vec::new();
    if !not_dropping.is_empty() {
        cap_details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&not_dropping)
        ));
    }
    if !adding.is_empty() {
        cap_details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            quoted(&adding_caps)
        ));
    }
    if !cap_details.is_empty() {
        out.push(format!(
            "unrestricted capabilities ({})",
            cap_details.join("; ")
        ));
    }
    // runAsNonRoot
    let pod_non_root = psc.get("runAsNonRoot").and_then(Value::as_bool);
    let not_non_root = names_where(containers, |c| {
        let own = csc(c).get("runAsNonRoot").and_then(Value::as_bool);
        own.or(pod_non_root) != Some(true)
    });
    if pod_non_root == Some(false) || !not_non_root.is_empty() {
        out.push(format!(
            "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
            containers_phrase(&not_non_root)
        ));
    }
    // runAsUser=0
    let pod_root = psc.get("runAsUser").and_then(Value::as_i64) == Some(0);
    let root = names_where(containers, |c| {
        csc(c).get("runAsUser").and_then(Value::as_i64) == Some(0)
    });
    if pod_root || !root.is_empty() {
        let who = if pod_root && root.is_empty() {
            "pod must not set runAsUser=0".to_string()
        } else {
            format!("{} must not set runAsUser=0", containers_phrase(&root))
        };
        out.push(format!("runAsUser=0 ({who})"));
    }
    // seccompProfile
    let allowed = |sc: &Value| {
        matches!(
            sc.pointer("/seccompProfile/type").and_then(Value::as_str),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let pod_seccomp = allowed(psc);
    let no_seccomp = names_where(containers, |c| {
        let own = csc(c);
        if own.pointer("/seccompProfile/type").is_some() {
            !allowed(&own)
        } else {
            !pod_seccomp
        }
    });
    if !no_seccomp.is_empty() {
        out.push(format!(
            "seccompProfile (pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            containers_phrase(&no_seccomp)
        ));
    }
    out
}

fn plural(names: &[String]) -> &'static str {
    if names.len() == 1 { "" } else { "s" }
}

/// Pod Security admission of a pod created in `namespace` (enforce mode). `name` is the pod's
/// name (generated when it has only a `generateName`).
///
/// # Errors
/// 403 Forbidden `pods "<name>" is forbidden: violates PodSecurity "<level>:<version>": ...`.
pub(crate) fn pod_security(
    def: &ResourceDef,
    namespace: &Value,
    name: &str,
    pod: &Value,
) -> Result<(), ApiError> {
    let Some((level, version)) = enforced_level(namespace) else {
        return Ok(());
    };
    if level != "baseline" && level != "restricted" {
        return Ok(());
    }
    let violations = pod_security_violations(&level, pod);
    if violations.is_empty() {
        return Ok(());
    }
    Err(ApiError::forbidden(
        def,
        name,
        &format!(
            "violates PodSecurity \"{level}:{version}\": {}",
            violations.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    fn def(group: &str, plural: &str) -> ResourceDef {
        let reg = Registry::new(builtin_resources());
        let id = reg
            .find(group, "v1", plural)
            .unwrap_or_else(|| panic!("{plural} served"));
        reg.get(id).clone()
    }

    #[test]
    fn run_strategy_rules_and_messages() {
        let vm = def("kubevirt.io", "virtualmachines");
        let both = json!({"spec": {"running": true, "runStrategy": "Always", "template": {}}});
        let e = validate(&vm, &both).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"
        );
        let e = validate(&vm, &json!({"spec": {"runStrategy": "Sometimes"}})).unwrap_err();
        assert!(
            e.message.ends_with("Invalid RunStrategy (Sometimes)"),
            "{}",
            e.message
        );
        assert_eq!(
            e.details.as_ref().unwrap()["causes"][0]["field"],
            "spec.runStrategy"
        );
        let e = validate(&vm, &json!({"spec": {}})).unwrap_err();
        assert!(e.message.ends_with("RunStrategy must be specified"));
        assert!(validate(&vm, &json!({"spec": {"runStrategy": "Halted"}})).is_ok());
        assert!(validate(&vm, &json!({"spec": {"running": false}})).is_ok());
    }

    #[test]
    fn vm_defaults_give_each_vm_its_own_firmware_uuid() {
        let vm = def("kubevirt.io", "virtualmachines");
        let mk = || json!({"spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}}});
        let (mut a, mut b) = (mk(), mk());
        mutate_create(&vm, &mut a).unwrap();
        mutate_create(&vm, &mut b).unwrap();
        let fw = |v: &Value| {
            v.pointer("/spec/template/spec/domain/firmware")
                .cloned()
                .unwrap()
        };
        assert_ne!(fw(&a)["uuid"], fw(&b)["uuid"]);
        assert_ne!(fw(&a)["uuid"], fw(&a)["serial"]);
        assert_eq!(
            a.pointer("/spec/template/spec/domain/machine/type"),
            Some(&json!("q35"))
        );
        assert_eq!(
            a.pointer("/spec/template/spec/architecture"),
            Some(&json!("amd64"))
        );
        assert_eq!(
            a.pointer("/spec/template/metadata/annotations/kubevirt.io~1pci-topology-version"),
            Some(&json!("v3"))
        );
        // A UUID already set is kept.
        let mut c =
            json!({"spec": {"template": {"spec": {"domain": {"firmware": {"uuid": "u"}}}}}});
        mutate_create(&vm, &mut c).unwrap();
        assert_eq!(
            c.pointer("/spec/template/spec/domain/firmware/uuid"),
            Some(&json!("u"))
        );
    }

    #[test]
    fn vmi_create_is_pending_with_the_foreground_finalizer() {
        let vmi = def("kubevirt.io", "virtualmachineinstances");
        let mut o = json!({"metadata": {"name": "a", "finalizers": ["x"]}, "spec": {}});
        mutate_create(&vmi, &mut o).unwrap();
        assert_eq!(o["metadata"]["finalizers"], json!(["x", VMI_FINALIZER]));
        assert_eq!(o["status"]["phase"], "Pending");
        assert_eq!(
            o["status"]["phaseTransitionTimestamps"][0]["phase"],
            "Pending"
        );
    }

    #[test]
    fn malformed_quantities_are_refused_by_the_mutator() {
        let vmi = def("kubevirt.io", "virtualmachineinstances");
        let mut o = json!({"spec": {"domain": {"resources": {"requests": {"memory": "1Gx"}}}}});
        let e = mutate_create(&vmi, &mut o).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.starts_with("admission webhook \"virtualmachineinstances-mutator.kubevirt.io\" denied the request: quantities must match"), "{}", e.message);
        let vm = def("kubevirt.io", "virtualmachines");
        let mut o =
            json!({"spec": {"template": {"spec": {"domain": {"memory": {"guest": "lots"}}}}}});
        assert_eq!(mutate_create(&vm, &mut o).unwrap_err().code, 400);
        let mut ok =
            json!({"spec": {"domain": {"resources": {"requests": {"memory": "1Gi", "cpu": 2}}}}});
        assert!(mutate_create(&vmi, &mut ok).is_ok());
    }

    #[test]
    fn pod_security_restricted_and_baseline() {
        let pods = def("", "pods");
        let ns = |level: &str| json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}});
        let pod = json!({"spec": {"containers": [{"name": "compute", "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_NICE"]}}}]}});
        let e = pod_security(&pods, &ns("baseline"), "p", &pod).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "pods \"p\" is forbidden: violates PodSecurity \"baseline:latest\": privileged (container \"compute\" must not set securityContext.privileged=true), non-default capabilities (container \"compute\" must not include \"SYS_NICE\" in securityContext.capabilities.add)"
        );
        let plain = json!({"spec": {"containers": [{"name": "c"}]}});
        assert!(pod_security(&pods, &ns("baseline"), "p", &plain).is_ok());
        assert!(pod_security(&pods, &ns("privileged"), "p", &pod).is_ok());
        let e = pod_security(&pods, &ns("restricted"), "p", &plain).unwrap_err();
        assert!(
            e.message
                .contains("\"restricted:latest\": allowPrivilegeEscalation != false"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("seccompProfile (pod or container \"c\""),
            "{}",
            e.message
        );
        let good = json!({"spec": {"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}});
        assert!(pod_security(&pods, &ns("restricted"), "p", &good).is_ok());
    }
}
