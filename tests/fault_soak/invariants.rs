//! The soak's invariants read from the embedded API server's audit log after a run, and the
//! VM events it counts.

use std::collections::BTreeMap;

use virtctl_rs::sim::AuditEntry;

use crate::common::env::CONTROLLER_AGENT;
use crate::common::{one_per_vm, split_brain};

/// The election Lease of the soak's managers (the embedded cluster's default).
pub const LEASE: split_brain::LeaseName<'static> = ("kubevirt", "virt-controller");

/// Never two live launcher pods or VMIs for one VM ([`one_per_vm::creates`]: a create while
/// the VM's previous object had no delete request since its own create), across every
/// controller instance (their user agents all contain [`CONTROLLER_AGENT`]). Returns the
/// violations, and the VMI creates the API server refused as AlreadyExists (a create from a
/// stale cache that the server's name uniqueness stopped: not two live VMIs, but counted).
pub fn one_live_per_vm(audit: &[AuditEntry]) -> (Vec<String>, usize) {
    let c = one_per_vm::creates(audit, CONTROLLER_AGENT);
    let mut problems = c.overlapping_pods;
    problems.extend(c.overlapping_vmis);
    (problems, c.vmi_already_exists.len())
}

/// At most one leader's writes at any instant: the instances' leadership terms, derived from
/// their Lease writes, never overlap, and each instance wrote only inside its own terms
/// ([`split_brain::assert_no_split_brain`]; panics with the violations). Returns the terms.
pub fn one_leader_at_a_time(audit: &[AuditEntry], agents: &[String]) -> Vec<split_brain::Term> {
    let agents: Vec<&str> = agents.iter().map(String::as_str).collect();
    split_brain::assert_no_split_brain(audit, LEASE, &agents)
}

/// VMI lifecycle events of the VMs in the audit: the controllers' successful VMI creates
/// (starts) and the successful VMI deletes by anyone (stops).
pub fn vmi_lifecycles(audit: &[AuditEntry]) -> (usize, usize) {
    let ok = |e: &&AuditEntry| {
        e.resource == "virtualmachineinstances"
            && e.subresource.is_empty()
            && (200..300).contains(&e.code)
    };
    let creates = audit
        .iter()
        .filter(ok)
        .filter(|e| e.verb == "create" && e.user_agent.contains(CONTROLLER_AGENT))
        .count();
    let deletes = audit
        .iter()
        .filter(ok)
        .filter(|e| e.verb == "delete")
        .count();
    (creates, deletes)
}

/// The controllers' failed writes (not Lease) by request and code, most frequent first.
pub fn failed_writes(audit: &[AuditEntry]) -> Vec<(String, usize)> {
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for e in audit.iter().filter(|e| {
        e.is_write()
            && e.code >= 400
            && e.resource != "leases"
            && e.user_agent.contains(CONTROLLER_AGENT)
    }) {
        let sub = if e.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", e.subresource)
        };
        *failed
            .entry(format!("{} {}{sub} {}", e.verb, e.resource, e.code))
            .or_default() += 1;
    }
    let mut failed: Vec<_> = failed.into_iter().collect();
    failed.sort_by_key(|b| std::cmp::Reverse(b.1));
    failed
}
