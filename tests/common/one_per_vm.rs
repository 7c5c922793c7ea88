//! "Exactly one VMI and one launcher pod per VM throughout", from the embedded API server's
//! audit log rather than the end state: every successful VMI and launcher-pod create, per VM,
//! in audit order, and for each create after the first, whether its predecessor had been
//! deleted before it.
//!
//! VMIs are named after their VM, so the API server itself refuses a second live one (409
//! AlreadyExists: counted, since it means the controller created from a stale cache). Launcher
//! pods use `generateName`, so a duplicate would be stored: a pod create is a violation unless
//! the VM's previous launcher pod had a successful `delete` before it. The same timeline is
//! kept for VMIs (a create is a violation unless the previous VMI of that name was deleted
//! after its own create), which also catches a VMI created while an earlier one was still
//! there by a server that let it through.

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
    /// VMIs created while the VM's previous VMI (the same name) had not been deleted since it
    /// was created.
    pub overlapping_vmis: Vec<String>,
}

fn ok(e: &AuditEntry) -> bool {
    (200..300).contains(&e.code)
}

/// Audit positions of the successful `delete`s of `resource` (main resource, by anyone), per
/// object name.
fn deletes<'a>(audit: &'a [AuditEntry], resource: &str) -> BTreeMap<&'a str, Vec<u64>> {
    let mut out: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for d in audit.iter().filter(|d| {
        d.verb == "delete" && d.resource == resource && d.subresource.is_empty() && ok(d)
    }) {
        out.entry(d.name.as_str()).or_default().push(d.seq);
    }
    out
}

/// For each successful create of `resource` by `agent` after a VM's first (in audit order),
/// whether the VM's previous object got a successful `delete` between its create and this one:
/// a timeline of live objects per VM, where an object is live from its create until its first
/// delete request (it may then still be terminating, but nothing asks for it any more).
/// Returns the creates per VM and one line per create that overlapped a live predecessor.
fn live_timeline(
    audit: &[AuditEntry],
    resource: &str,
    agent: &str,
    vm_of: impl Fn(&str) -> &str,
) -> (BTreeMap<String, usize>, Vec<String>) {
    let deleted = deletes(audit, resource);
    let mut count: BTreeMap<String, usize> = BTreeMap::new();
    let mut overlaps = Vec::new();
    let mut last: BTreeMap<String, (String, u64)> = BTreeMap::new();
    for e in controller_creates(audit, resource, agent)
        .iter()
        .filter(|e| ok(e))
    {
        let vm = vm_of(&e.name).to_string();
        *count.entry(vm.clone()).or_default() += 1;
        if let Some((prev, prev_seq)) = last.insert(vm.clone(), (e.name.clone(), e.seq)) {
            let deleted_between = deleted
                .get(prev.as_str())
                .is_some_and(|seqs| seqs.iter().any(|d| prev_seq < *d && *d < e.seq));
            if !deleted_between {
                overlaps.push(format!(
                    "{vm}: {resource} {} created (#{}) while {prev} (created #{prev_seq}) was not \
                     deleted",
                    e.name, e.seq
                ));
            }
        }
    }
    (count, overlaps)
}

/// Read [`Creates`] from `audit` for the controller(s) with user agents containing `agent`.
pub fn creates(audit: &[AuditEntry], agent: &str) -> Creates {
    let vmi_creates = controller_creates(audit, "virtualmachineinstances", agent);
    let (vmis, overlapping_vmis) = live_timeline(audit, "virtualmachineinstances", agent, |n| n);
    let (pods, overlapping_pods) = live_timeline(audit, "pods", agent, |n| pod_vm(n).unwrap_or(n));
    Creates {
        vmis,
        pods,
        vmi_already_exists: vmi_creates.into_iter().filter(|e| e.code == 409).collect(),
        overlapping_pods,
        overlapping_vmis,
    }
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
    if !c.overlapping_vmis.is_empty() {
        problems.push(format!("two VMIs for one VM: {:?}", c.overlapping_vmis));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, verb: &str, resource: &str, name: &str, agent: &str) -> AuditEntry {
        crate::common::objects::audit_entry(seq, verb, resource, name, agent, 201)
    }

    #[test]
    fn a_vmi_or_pod_created_beside_a_live_one_is_reported() {
        let vmi = "virtualmachineinstances";
        let audit = [
            entry(0, "create", vmi, "vm-a", "ctl-a"),
            entry(1, "create", "pods", "virt-launcher-vm-a-abcde", "ctl-a"),
            entry(2, "delete", vmi, "vm-a", "user"),
            entry(3, "delete", "pods", "virt-launcher-vm-a-abcde", "gc"),
            // Deleted before: fine.
            entry(4, "create", vmi, "vm-a", "ctl-b"),
            entry(5, "create", "pods", "virt-launcher-vm-a-fghij", "ctl-b"),
            // No delete of the previous ones since their creates: two live.
            entry(6, "create", vmi, "vm-a", "ctl-a"),
            entry(7, "create", "pods", "virt-launcher-vm-a-klmno", "ctl-a"),
        ];
        let c = creates(&audit, "ctl-");
        assert_eq!(c.vmis["vm-a"], 3);
        assert_eq!(c.pods["vm-a"], 3);
        assert_eq!(c.overlapping_vmis.len(), 1, "{:?}", c.overlapping_vmis);
        assert!(c.overlapping_vmis[0].contains("(#6)"));
        assert_eq!(c.overlapping_pods.len(), 1, "{:?}", c.overlapping_pods);
        assert!(c.overlapping_pods[0].contains("virt-launcher-vm-a-klmno"));
    }
}
