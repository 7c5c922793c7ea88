//! Split-brain checks from the embedded API server's audit log, for any number of controller
//! instances told apart by their user agents.
//!
//! A *leadership term* is derived from the successful writes of the election Lease alone
//! (`AuditEntry::lease`: `holderIdentity`, `renewTime`, `leaseDurationSeconds` as written):
//! it starts with the write by which an instance made its identity the holder, is extended by
//! each renewal the same instance writes under the same identity, and is valid until its last
//! renewal plus `leaseDurationSeconds`, or until the instance released it (a write with an empty
//! holder). Times are the API server's (the audit entry's arrival time): the `renewTime` in a
//! record is the writer's own clock, which the clock-skew case distorts on purpose, so it is
//! only reported, never trusted (client-go's rule as well: expiry is judged by observation).
//!
//! The two properties ([`assert_no_split_brain`]):
//! * terms never overlap: a term starts only after the previous one ended (released, or
//!   last renewal + lease duration passed on the server's clock);
//! * every non-Lease write of an instance (any outcome: a refused write was still sent) falls
//!   inside one of that instance's own terms.

use chrono::{DateTime, TimeDelta, Utc};
use virtctl_rs::sim::AuditEntry;

/// The election Lease (namespace, name).
pub type LeaseName<'a> = (&'a str, &'a str);

/// One leadership term of one instance.
#[derive(Debug, Clone)]
pub struct Term {
    /// The instance: the entry of `agents` its user agent contains.
    pub agent: String,
    /// `holderIdentity` it wrote.
    pub holder: String,
    /// Audit position and server time of the write that started the term.
    pub start_seq: u64,
    pub start: DateTime<Utc>,
    /// Audit position and server time of its last renewal (or release).
    pub last_seq: u64,
    pub last_renew: DateTime<Utc>,
    /// `renewTime` of the last renewal, as the instance wrote it (its own clock).
    pub last_renew_time_written: Option<String>,
    /// `leaseDurationSeconds` of the last renewal.
    pub duration: TimeDelta,
    /// Server time of the release, if the instance released the Lease.
    pub released: Option<DateTime<Utc>>,
    /// Lease writes in the term (acquire, renewals, release).
    pub writes: usize,
}

impl Term {
    /// Until when the term entitles its instance to write.
    pub fn valid_until(&self) -> DateTime<Utc> {
        self.released
            .unwrap_or(self.last_renew + self.duration)
            .min(self.last_renew + self.duration)
    }
}

/// A successful create/update of the election Lease, with its leader-election fields.
pub fn is_election_write(e: &AuditEntry, lease: LeaseName) -> bool {
    e.lease.is_some()
        && e.resource == "leases"
        && e.namespace == lease.0
        && e.name == lease.1
        && (200..300).contains(&e.code)
}

fn agent_of<'a>(e: &AuditEntry, agents: &[&'a str]) -> Option<&'a str> {
    agents.iter().find(|a| e.user_agent.contains(**a)).copied()
}

/// The leadership terms of `agents`, in audit order.
pub fn terms(entries: &[AuditEntry], lease: LeaseName, agents: &[&str]) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    for e in entries.iter().filter(|e| is_election_write(e, lease)) {
        let Some(agent) = agent_of(e, agents) else {
            continue;
        };
        let Some(fields) = e.lease.as_ref() else {
            continue;
        };
        let duration = TimeDelta::seconds(fields.lease_duration_seconds.unwrap_or(0));
        let current = out
            .last_mut()
            .filter(|t| t.agent == agent && t.released.is_none());
        match current {
            Some(t) if fields.holder_identity.is_empty() => {
                t.released = Some(e.time);
                t.last_seq = e.seq;
                t.writes += 1;
            }
            Some(t) if t.holder == fields.holder_identity => {
                t.last_seq = e.seq;
                t.last_renew = e.time;
                t.last_renew_time_written = fields.renew_time.clone();
                t.duration = duration;
                t.writes += 1;
            }
            _ if fields.holder_identity.is_empty() => {}
            _ => out.push(Term {
                agent: agent.to_string(),
                holder: fields.holder_identity.clone(),
                start_seq: e.seq,
                start: e.time,
                last_seq: e.seq,
                last_renew: e.time,
                last_renew_time_written: fields.renew_time.clone(),
                duration,
                released: None,
                writes: 1,
            }),
        }
    }
    out
}

/// One line per term, for failure messages and test output.
pub fn describe(terms: &[Term]) -> String {
    terms
        .iter()
        .map(|t| {
            format!(
                "{} as {:?}: #{} {} .. #{} {} ({} Lease writes, valid until {}{}; last renewTime written {:?})",
                t.agent,
                t.holder,
                t.start_seq,
                t.start,
                t.last_seq,
                t.last_renew,
                t.writes,
                t.valid_until(),
                if t.released.is_some() { ", released" } else { "" },
                t.last_renew_time_written
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Check both properties of the module docs over `entries`; panics with every violation.
/// Returns the terms.
pub fn assert_no_split_brain(
    entries: &[AuditEntry],
    lease: LeaseName,
    agents: &[&str],
) -> Vec<Term> {
    let terms = terms(entries, lease, agents);
    let mut violations = Vec::new();
    for pair in terms.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.start_seq <= before.last_seq || after.start < before.valid_until() {
            violations.push(format!(
                "overlapping terms: {} valid until {} (#{}), {} from {} (#{})",
                before.agent,
                before.valid_until(),
                before.last_seq,
                after.agent,
                after.start,
                after.start_seq
            ));
        }
    }
    for w in entries
        .iter()
        .filter(|e| e.is_write() && e.resource != "leases")
    {
        let Some(agent) = agent_of(w, agents) else {
            continue;
        };
        let inside = terms.iter().any(|t| {
            t.agent == agent
                && t.start_seq < w.seq
                && t.start <= w.time
                && w.time <= t.valid_until()
        });
        if !inside {
            violations.push(format!(
                "#{} {} {} {}/{} {}/{} by {} (code {}) outside its own terms",
                w.seq,
                w.time,
                w.verb,
                w.resource,
                w.subresource,
                w.namespace,
                w.name,
                w.user_agent,
                w.code
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "split brain:\n{}\nterms:\n{}",
        violations.join("\n"),
        describe(&terms)
    );
    terms
}
