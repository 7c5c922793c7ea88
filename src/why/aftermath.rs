//! What followed an end: the VM controller's deletion of the ended VMI and the next VMI, or,
//! for the last run, what the run strategy, the start-failure backoff and the Lease make of it.

use super::evidence::{STARTED_PREFIX, quote_event, stamp};
use super::gather::WhyGathered;
use super::model::Link;
use super::present::leader_acting;
use super::trace::RunTrace;
use crate::api::vm::RunStrategy;

/// The links after an end and whether the VM restarted (`Some(true)`), stays stopped
/// (`Some(false)`) or is to restart (`None`).
pub(crate) fn link(
    g: &WhyGathered,
    t: &RunTrace<'_>,
    next: Option<&RunTrace<'_>>,
) -> (Vec<Link>, Option<bool>) {
    let mut links = Vec::new();
    if let Some(next) = next {
        let mut evidence = Vec::new();
        if let Some(d) = t.deleted_by_vm {
            evidence.push(quote_event(d));
        }
        evidence.extend(
            g.events
                .iter()
                .filter(|e| {
                    e.involved_object.kind.as_deref() == Some("VirtualMachine")
                        && e.message
                            .as_deref()
                            .is_some_and(|m| m.starts_with(STARTED_PREFIX))
                })
                .map(quote_event),
        );
        links.push(Link {
            claim: format!(
                "the VM controller replaced it: VMI {} started {}",
                next.uid.as_deref().unwrap_or("?"),
                stamp(next.started)
            ),
            evidence,
        });
        return (links, Some(true));
    }
    let Ok(strategy) = g.vm.run_strategy() else {
        return (links, Some(false));
    };
    let phase = t.final_phase();
    let restarts = match strategy {
        RunStrategy::Always => true,
        RunStrategy::RerunOnFailure => phase != Some("Succeeded"),
        _ => false,
    };
    let strategy_evidence = format!("VirtualMachine/{} spec runStrategy {strategy}", g.name);
    if !restarts {
        links.push(Link {
            claim: format!("runStrategy {strategy} does not start a new VMI after this end"),
            evidence: vec![strategy_evidence],
        });
        return (links, Some(false));
    }
    let mut evidence = vec![strategy_evidence];
    let mut claim = format!("runStrategy {strategy} restarts it");
    if let Some(f) = g.vm.status.as_ref().and_then(|s| s.start_failure.as_ref())
        && let Some(retry) = f.retry_after_timestamp.as_ref().map(|t| t.0)
        && retry > g.now
    {
        claim.push_str(&format!(
            " after the start-failure backoff, at {} (in {} s)",
            stamp(Some(retry)),
            (retry - g.now).num_seconds()
        ));
        evidence.push(format!(
            "VirtualMachine/{} status.startFailure.retryAfterTimestamp {}, consecutiveFailCount {}; printableStatus {}",
            g.name,
            stamp(Some(retry)),
            f.consecutive_fail_count,
            g.vm.status.as_ref().and_then(|s| s.printable_status.as_deref()).unwrap_or("-")
        ));
    }
    if let Err(why) = leader_acting(g) {
        claim.push_str(&format!(", but no controller acts now: {why}"));
        evidence.push(super::present::leader_sentence(g));
    }
    links.push(Link { claim, evidence });
    (links, None)
}
