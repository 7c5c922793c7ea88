//! The VM's present: the controller Lease (who acts, or a leaderless gap) and what holds now
//! (run strategy, pending state-change requests, start-failure backoff, RestartRequired, the
//! controller's Failure condition, the current VMI).

use super::evidence::stamp;
use super::gather::WhyGathered;
use super::model::Link;
use chrono::{DateTime, Utc};

fn micro(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// `Ok` when a holder renewed the Lease within its duration; else why no controller acts.
pub(crate) fn leader_acting(g: &WhyGathered) -> Result<String, String> {
    let Some(lease) = &g.lease else {
        return Err(format!("the Lease {} could not be read", g.lease_key));
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.filter(|h| !h.is_empty());
    let renewed = spec.renew_time.as_ref().and_then(micro);
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match (holder, renewed) {
        (None, _) => Err(format!(
            "the Lease {} has no holder (released; last renewed {}): a leaderless gap",
            g.lease_key,
            stamp(renewed)
        )),
        (Some(h), Some(r)) if (g.now - r).num_seconds() <= duration => Ok(h),
        (Some(h), r) => Err(format!(
            "the Lease {} expired: {h} last renewed it {} (duration {duration} s): a leaderless gap",
            g.lease_key,
            stamp(r)
        )),
    }
}

/// A Lease handover between `from` and `to`: the holder's `acquireTime` falls inside and the
/// Lease changed hands before (`leaseTransitions` > 0). Decisions on either side of it came
/// from different controller processes (informers re-listed, expectations started empty).
pub(crate) fn handover_within(
    g: &WhyGathered,
    from: Option<DateTime<Utc>>,
    to: DateTime<Utc>,
) -> Option<Link> {
    let spec = g.lease.as_ref()?.spec.as_ref()?;
    let acquired = spec.acquire_time.as_ref().and_then(micro)?;
    let transitions = spec.lease_transitions.unwrap_or(0);
    let inside = from.is_some_and(|f| f <= acquired) && acquired <= to;
    (inside && transitions > 0).then(|| Link {
        claim: format!(
            "the controller Lease changed hands meanwhile: {} acquired it at {}",
            spec.holder_identity.as_deref().unwrap_or("(no holder now)"),
            stamp(Some(acquired))
        ),
        evidence: vec![format!(
            "Lease {} spec.acquireTime {}, leaseTransitions {transitions}",
            g.lease_key,
            stamp(Some(acquired))
        )],
    })
}

/// The Lease in one sentence.
pub(crate) fn leader_sentence(g: &WhyGathered) -> String {
    let transitions = g
        .lease
        .as_ref()
        .and_then(|l| l.spec.as_ref())
        .map(|s| {
            format!(
                "; acquired {}, {} transition(s)",
                stamp(s.acquire_time.as_ref().and_then(micro)),
                s.lease_transitions.unwrap_or(0)
            )
        })
        .unwrap_or_default();
    match leader_acting(g) {
        Ok(h) => format!("Lease {}: held by {h}{transitions}", g.lease_key),
        Err(why) => format!("{why}{transitions}"),
    }
}

/// What holds now, each with its evidence.
pub(crate) fn now_chain(g: &WhyGathered) -> Vec<Link> {
    let vm = format!("VirtualMachine/{}", g.name);
    let status = g.vm.status.clone().unwrap_or_default();
    let mut links = Vec::new();
    match &g.vmi {
        Some(v) => links.push(Link {
            claim: format!(
                "VMI {} is {}{}",
                v.metadata.uid.as_deref().unwrap_or("?"),
                v.phase().as_str(),
                v.status
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default()
            ),
            evidence: vec![format!("VirtualMachineInstance/{} status.phase", g.name)],
        }),
        None => links.push(Link {
            claim: "the VM has no VMI".into(),
            evidence: vec![format!("GET VirtualMachineInstance/{}: not found", g.name)],
        }),
    }
    let requests: Vec<String> = status
        .state_change_requests
        .iter()
        .flat_map(|r| r.iter())
        .map(|r| r.action.clone())
        .collect();
    if !requests.is_empty() {
        links.push(Link {
            claim: format!("state-change requests wait: {}", requests.join(", ")),
            evidence: vec![format!("{vm} status.stateChangeRequests")],
        });
    }
    if let Some(f) = &status.start_failure {
        links.push(Link {
            claim: format!(
                "{} consecutive start failure(s); the next start waits until {}",
                f.consecutive_fail_count,
                stamp(f.retry_after_timestamp.as_ref().map(|t| t.0))
            ),
            evidence: vec![format!(
                "{vm} status.startFailure (lastFailedVMIUID {}), printableStatus {}",
                f.last_failed_vmi_uid.as_deref().unwrap_or("-"),
                status.printable_status.as_deref().unwrap_or("-")
            )],
        });
    }
    for (type_, claim) in [
        (
            "RestartRequired",
            "the VM's spec changed in a way the running VMI cannot take: it applies at the next restart",
        ),
        ("Failure", "the VM controller's last sync failed"),
    ] {
        if let Some(c) = g.vm.condition(type_).filter(|c| c.status == "True") {
            links.push(Link {
                claim: claim.into(),
                evidence: vec![format!(
                    "{vm} condition {type_}=True reason {} \"{}\"",
                    c.reason.as_deref().unwrap_or("-"),
                    c.message.as_deref().unwrap_or("")
                )],
            });
        }
    }
    let current_start = g
        .vmi
        .as_ref()
        .and_then(|v| v.metadata.creation_timestamp.as_ref())
        .and_then(super::evidence::k8s_time);
    links.extend(handover_within(g, current_start, g.now));
    if let Err(why) = leader_acting(g) {
        links.push(Link {
            claim: "no VM controller acts on this VM now".into(),
            evidence: vec![why],
        });
    }
    links
}
