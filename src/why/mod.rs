//! `why vm/NAME`: a causal timeline of one VM — its recent runs (one per VMI), how each ended
//! and the chain of causes with the evidence for every link, from what survives in the cluster
//! (the VM's status, the current VMI and its launcher pods, the nodes, core/v1 Events, the
//! controller Lease).
//!
//! The same one-way flow as `inspect`: gather (reads only, `gather.rs`) → a pure analysis
//! (`analyze.rs`, with `trace.rs` per VMI, `evidence.rs` the shared vocabulary, `causes.rs` per kind of evidence, `aftermath.rs`
//! for what followed, `present.rs` for the VM's present, `defects.rs` for known upstream
//! defects) → [`model::WhyReport`] → `-o json`, or text ([`render_text`]).

mod aftermath;
mod analyze;
#[cfg(test)]
mod analyze_tests;
mod causes;
mod defects;
mod evidence;
mod gather;
pub mod model;
mod present;
mod recorded;
mod text;
mod trace;

use crate::inspect::{GatherError, GatherOptions};

/// Read one VM's trace and analyse it, with the Events of a flight recording's `lines` the
/// cluster no longer holds (none: pass `&[]`).
pub async fn why_vm(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
    recording: &[crate::flight::Line],
) -> Result<model::WhyReport, GatherError> {
    let mut g = gather::gather(client, namespace, name, opts).await?;
    recorded::add_recorded_events(&mut g, recording);
    Ok(analyze::analyze(&g))
}

/// The report as plain text.
pub(crate) fn render_text(report: &model::WhyReport) -> String {
    text::render(report)
}
