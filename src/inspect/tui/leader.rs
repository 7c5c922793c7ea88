//! Leader panel: the controller Lease (holder, renew age vs duration, transitions, stale), where
//! the controller's view came from, whether the controller is caught up with this VM, and
//! (with `--shadow FILE`) whether a running shadow agreed with its last writes for it.

use super::state::{Panel, ViewState};
use super::text::{bad, duration, field, field_styled, good, note, warn};
use crate::inspect::model::{ControllerSourceKind, HolderKind, Inspection, LeaseView};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;

/// The Lease lines (shared with the fleet view's header).
pub(crate) fn lease_lines(lease: Option<&LeaseView>) -> Vec<Line<'static>> {
    let Some(lease) = lease else {
        return vec![note("Lease: not read (see Blockers)")];
    };
    let mut out = vec![field("Lease", lease.lease.clone())];
    let who = match lease.holder_kind {
        HolderKind::None => "nobody".to_string(),
        HolderKind::VirtctlRs => "virtctl-rs run-controller".to_string(),
        HolderKind::KubeVirt => "KubeVirt virt-controller".to_string(),
        HolderKind::Unknown => "unknown".to_string(),
    };
    match &lease.holder_identity {
        Some(h) => out.push(field("holder", format!("{h} ({who})"))),
        None => out.push(field_styled("holder", "nobody holds it", warn())),
    }
    let renew = match (lease.renew_age_seconds, lease.lease_duration_seconds) {
        (Some(age), Some(d)) => format!("{} ago, duration {d} s", duration(age)),
        (Some(age), None) => format!("{} ago", duration(age)),
        (None, Some(d)) => format!("never, duration {d} s"),
        (None, None) => "never".into(),
    };
    if lease.stale {
        out.push(field_styled(
            "renewed",
            format!("{renew}: STALE (renewTime + duration has passed)"),
            bad(),
        ));
    } else {
        out.push(field("renewed", renew));
    }
    if let Some(t) = lease.lease_transitions {
        out.push(field("transitions", t.to_string()));
    }
    out
}

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let mut out = lease_lines(insp.lease.as_ref());
    let src = &insp.controller;
    let how = match src.kind {
        ControllerSourceKind::DebugEndpoint => "debug endpoint",
        ControllerSourceKind::Metrics => "Prometheus metrics (pod proxy)",
        ControllerSourceKind::Unavailable => "unavailable",
    };
    let source = match &src.url {
        Some(url) => format!("{how} {url}"),
        None => how.to_string(),
    };
    if src.kind == ControllerSourceKind::Unavailable {
        out.push(field_styled("view", source, warn()));
    } else {
        out.push(field("view", source));
    }
    match &insp.caught_up {
        Some(c) => {
            let ok = c.generation_observed
                && c.vm_cache_current != Some(false)
                && c.vmi_cache_current != Some(false);
            out.push(field_styled(
                "caught up",
                c.summary.clone(),
                if ok { good() } else { warn() },
            ));
        }
        None => out.push(note("caught up: unknown")),
    }
    if let Some(s) = &insp.shadow {
        out.extend(super::shadow::vm_lines(s));
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Leader, lines(insp), view);
}
