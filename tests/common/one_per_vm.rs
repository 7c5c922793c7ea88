//! "Exactly one VMI and one launcher pod per VM throughout", from the embedded API server's
//! audit log rather than the end state: every successful VMI and launcher-pod create, per VM,
//! in audit order, and for each create after the first, whether its predecessor had been
//! deleted before it.
//!
//! VMIs are named after their VM, so the API server itself refuses a second live one (409
//! AlreadyExists: counted, since it means the controller created from a stale cache). Launcher
//! pods use `generateName`, so a duplicate would be stored: a pod create is a violation unless
//! the VM's previous launcher pod had a successful `delete` before it.

use std::collections::BTreeMap;

use virtctl_rs::sim::AuditEntry;

/// VM name of a launcher pod name `virt-launcher-<vm>-<5 chars>`.
pub fn pod_vm(pod: &str) -> Option<&str> {
    let rest = pod.strip_prefix("virt-launcher-")?;
    let cut = rest.len().checked_sub(6)?;
    rest[cut..].starts_with('-').then(|| &rest[..cut])
}

/// The `create` requests of `resource` (main resource) sent by user agents containing `agent`.
pub fn controller_creates(audit: &[AuditEntry], resource: &str, agent: &str) -> Vec<AuditEntry> {
    audit
        .iter()
        .filter(|e| e.verb == "create" && e.resource == resource && e.subresource.is_empty())
        .filter(|e| e.user_agent.contains(agent))
        .cloned()
        .collect()
}

/// What the audit log says about the VMIs and launcher pods the controller created.
#[derive(Debug, Default)]
pub struct Creates {
    /// Successful VMI creates per VM.
    pub vmis: BTreeMap<String, usize>,
    /// Successful launcher-pod creates per VM.
    pub pods: BTreeMap<String, usize>,
    /// VMI creates refused with 409 AlreadyExists.
    pub vmi_already_exists: Vec<AuditEntry>,
    /// Launcher pods created while the VM's previous one had not been deleted.
    pub overlapping_pods: Vec<String>,
}

fn ok(e: &AuditEntry) -> bool {
    (200..300).contains(&e.code)
}

/// Read [`Creates`] from `audit` for the controller with user agent `agent`.
pub fn creates(audit: &[AuditEntry], agent: &str) -> Creates {
    let mut out = Creates::default();
    let vmi_creates = controller_creates(audit, "virtualmachineinstances", agent);
    for e in vmi_creates.iter().filter(|e| ok(e)) {
        *out.vmis.entry(e.name.clone()).or_default() += 1;
    }
    out.vmi_already_exists = vmi_creates.into_iter().filter(|e| e.code == 409).collect();
    let mut last_pod: BTreeMap<String, String> = BTreeMap::new();
    for e in controller_creates(audit, "pods", agent)
        .iter()
        .filter(|e| ok(e))
    {
        let vm = pod_vm(&e.name).unwrap_or(&e.name).to_string();
        *out.pods.entry(vm.clone()).or_default() += 1;
        if let Some(prev) = last_pod.insert(vm.clone(), e.name.clone()) {
            let deleted_before = audit.iter().any(|d| {
                d.seq < e.seq
                    && d.verb == "delete"
                    && d.resource == "pods"
                    && d.subresource.is_empty()
                    && d.name == prev
                    && ok(d)
            });
            if !deleted_before {
                out.overlapping_pods.push(format!(
                    "{vm}: pod {} created (#{}) while {prev} was not deleted",
                    e.name, e.seq
                ));
            }
        }
    }
    out
}

/// Assert that each VM of `starts` had exactly that many VMIs and launcher pods created, never
/// a VMI create refused as AlreadyExists, and never a launcher pod beside a live one.
pub fn assert_one_at_a_time(audit: &[AuditEntry], agent: &str, starts: &BTreeMap<String, usize>) {
    let c = creates(audit, agent);
    let refused: Vec<String> = c
        .vmi_already_exists
        .iter()
        .map(|e| format!("#{} {}/{}", e.seq, e.namespace, e.name))
        .collect();
    let mut problems = Vec::new();
    if !refused.is_empty() {
        problems.push(format!(
            "VMI creates refused with 409 AlreadyExists (created from a stale cache): {refused:?}"
        ));
    }
    if !c.overlapping_pods.is_empty() {
        problems.push(format!(
            "two launcher pods for one VM: {:?}",
            c.overlapping_pods
        ));
    }
    if &c.vmis != starts {
        problems.push(format!("successful VMI creates per VM: {:?}", c.vmis));
    }
    if &c.pods != starts {
        problems.push(format!(
            "successful launcher pod creates per VM: {:?}",
            c.pods
        ));
    }
    assert!(
        problems.is_empty(),
        "not one VMI and one launcher pod per VM at a time (expected {starts:?}):\n{}",
        problems.join("\n")
    );
}
