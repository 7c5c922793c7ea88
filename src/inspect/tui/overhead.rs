//! Overhead check panel: the memory overhead formula term by term against the pod's `compute`
//! request, the `kubevirt.io/memory-overhead-bytes` annotation and the VMI's
//! `status.memory.memoryOverhead`, and the CPU request against vCPUs ÷ cpuAllocationRatio;
//! then the settings the controller renders with against the KubeVirt CR's (`--once`'s
//! `settings:` line), which explain a pod rendered unlike the formula.

use super::state::{Panel, ViewState};
use super::text::{bad, bytes, dim, field, good, note, pad, rpad};
use crate::inspect::model::{Inspection, SettingsCheck};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let settings = insp
        .settings
        .as_ref()
        .map(settings_lines)
        .unwrap_or_default();
    let Some(check) = &insp.overhead_check else {
        let mut out = vec![note("no overhead check (see Blockers)")];
        out.extend(settings);
        return out;
    };
    let mut out = vec![if check.matches {
        Line::styled("MATCH: every value present agrees with the formula", good())
    } else {
        Line::styled("DIFFERS from the formula", bad())
    }];
    for d in &check.differences {
        out.push(Line::styled(format!("  {d}"), bad()));
    }
    out.extend(settings);
    out.push(field("formula overhead", bytes(check.formula_bytes)));
    if let Some(b) = check.formula_request_bytes {
        out.push(field("formula request", bytes(b)));
    }
    let present = |label: &str, v: Option<i64>| match v {
        Some(b) => field(label, bytes(b)),
        None => note(format!("{label}: absent")),
    };
    out.push(present("pod request", check.pod_request_bytes));
    out.push(present("annotation", check.annotation_bytes));
    out.push(present("VMI status", check.status_bytes));
    if let Some(cpu) = &check.cpu {
        let fmt = |m: Option<i64>| m.map(|m| format!("{m}m")).unwrap_or_else(|| "-".into());
        let verdict = if cpu.matches { "MATCH" } else { "DIFFERS" };
        out.push(Line::from(vec![
            Span::styled("cpu: ", dim()),
            Span::raw(format!(
                "{} vCPU ÷ ratio {} = {}, pod {} ",
                cpu.vcpus,
                cpu.allocation_ratio,
                fmt(cpu.formula_request_millis),
                fmt(cpu.pod_request_millis)
            )),
            Span::styled(verdict, if cpu.matches { good() } else { bad() }),
        ]));
    }
    out.push(Line::styled(
        format!("{} {}  {}", pad("TERM", 20), rpad("BYTES", 11), "WHY"),
        dim(),
    ));
    for t in &check.terms {
        out.push(Line::from(vec![
            Span::raw(format!(
                "{} {}  ",
                pad(&t.name, 20),
                rpad(&t.bytes.to_string(), 11)
            )),
            Span::styled(t.reason.clone(), dim()),
        ]));
    }
    out
}

/// The leader's settings against the KubeVirt CR's: one line when they agree; else a line per
/// differing setting and the CR version the leader refused, if any. Nothing when the leader's
/// settings are unknown (KubeVirt's controller).
fn settings_lines(s: &SettingsCheck) -> Vec<Line<'static>> {
    let Some(from) = s.controller_origin() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if s.differences.is_empty() {
        out.push(Line::from(vec![
            Span::styled("settings: ", dim()),
            Span::styled(
                format!("the controller's ({from}) are the KubeVirt CR's"),
                good(),
            ),
        ]));
    } else {
        out.push(Line::from(vec![
            Span::styled("settings: ", dim()),
            Span::styled(
                format!("the controller's ({from}) DIFFER from the KubeVirt CR's"),
                bad(),
            ),
        ]));
        for d in &s.differences {
            out.push(Line::styled(format!("  {d}"), bad()));
        }
    }
    if let Some(refused) = &s.controller_refused {
        out.push(Line::styled(format!("  it refused {refused}"), bad()));
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Overhead, lines(insp), view);
}
