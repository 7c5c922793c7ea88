//! The upgrade rehearsal view (`inspect --upgrade-to VERSION`, with `-A` or `-n NS`): the
//! fleet's launcher pods re-rendered under another KubeVirt release
//! ([`crate::inspect::rehearsal`], what `explain-overhead -A --upgrade-to` prints), one row per
//! VM (memory request delta, the PR numbers of the causes, whether it still fits on its node),
//! the selected VM's causes in full, and one row per node.
//!
//! The view model ([`RehearsalView`]) is gathered once from the [`Rehearsal`]: every string
//! shown is computed there, so drawing ([`render`]) and `--once` ([`text`]) are pure functions
//! of it.

use super::text::{accent, bad, dim, good, pad, rpad, selected, warn};
use crate::api::quantity::human_bytes;
use crate::inspect::rehearsal::{Rehearsal, VmRehearsal, signed};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

/// One VM's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct VmRow {
    /// `namespace/vmi`.
    pub vm: String,
    /// The node it runs on, `-` when unknown.
    pub node: String,
    /// The release whose rendering the pod carries.
    pub rendered_by: String,
    /// The `compute` memory request after − now, bytes.
    pub delta_bytes: i64,
    /// Whether the new request fits on its node (`None`: node or allocatable unknown).
    pub fits: Option<bool>,
    /// The PR numbers behind the changes (`18388`, `18237`), each once, in order.
    pub prs: Vec<String>,
    /// The causes in full: one line per overhead term and per launcher pod rule.
    pub causes: Vec<String>,
}

/// One node's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeRow {
    pub node: String,
    pub allocatable: String,
    pub requested: String,
    pub requested_after: String,
    pub vms: usize,
    /// Bytes the node lacks once every VM on it has restarted (0: none).
    pub short_bytes: i64,
}

/// The rehearsal as shown, and the selected VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RehearsalView {
    /// `Upgrade rehearsal v1.9.0 → main in every namespace`.
    pub(crate) title: String,
    /// Largest memory increase first.
    pub(crate) vms: Vec<VmRow>,
    /// By name.
    pub(crate) nodes: Vec<NodeRow>,
    /// Pods not rehearsed and what could not be read, one line each.
    pub(crate) notes: Vec<String>,
    /// Index of the selected VM.
    pub selected: usize,
}

impl RehearsalView {
    /// The view of `r`, on its first VM.
    pub(crate) fn of(r: &Rehearsal) -> RehearsalView {
        let scope = r
            .namespace
            .as_deref()
            .map_or("every namespace".to_string(), |n| format!("namespace {n}"));
        let nodes = r
            .nodes
            .iter()
            .map(|n| NodeRow {
                node: n.node.clone(),
                allocatable: n.allocatable_bytes.map_or("?".into(), human_bytes),
                requested: human_bytes(n.requested_bytes),
                requested_after: human_bytes(n.requested_after_bytes),
                vms: n.vms,
                short_bytes: n.short_after_bytes(),
            })
            .collect();
        let mut notes: Vec<String> = r
            .pods_skipped
            .iter()
            .map(|p| format!("not rehearsed: {p}"))
            .collect();
        notes.extend(
            r.missing
                .iter()
                .map(|m| format!("not read: {}: {}", m.what, m.reason)),
        );
        RehearsalView {
            title: format!("Upgrade rehearsal {} → {} in {scope}", r.from, r.to),
            vms: r.vms.iter().map(vm_row).collect(),
            nodes,
            notes,
            selected: 0,
        }
    }

    /// Move the selection by `delta` rows, stopping at the first and the last.
    pub(crate) fn select_by(&mut self, delta: i64) {
        let last = self.vms.len().saturating_sub(1) as i64;
        self.selected = (self.selected as i64).saturating_add(delta).clamp(0, last) as usize;
    }

    fn no_longer_fit(&self) -> usize {
        self.vms.iter().filter(|v| v.fits == Some(false)).count()
    }
}

fn vm_row(v: &VmRehearsal) -> VmRow {
    let mut causes: Vec<String> = v
        .causes
        .iter()
        .map(|c| {
            let delta = signed(c.after_bytes - c.before_bytes);
            format!("{} {delta} ({})", c.term, c.source)
        })
        .collect();
    causes.extend(
        v.pod_changes
            .iter()
            .map(|c| format!("{}: {}", c.cause, c.paths.join(", "))),
    );
    let sources = v
        .causes
        .iter()
        .map(|c| c.source.as_str())
        .chain(v.pod_changes.iter().map(|c| c.cause.as_str()));
    let mut prs: Vec<String> = Vec::new();
    for pr in sources.flat_map(pr_numbers) {
        if !prs.contains(&pr) {
            prs.push(pr);
        }
    }
    VmRow {
        vm: format!("{}/{}", v.namespace, v.vmi),
        node: v.node.clone().unwrap_or_else(|| "-".into()),
        rendered_by: v.rendered_by.to_string(),
        delta_bytes: v.memory_request_delta_bytes,
        fits: v.fits_after,
        prs,
        causes,
    }
}

/// The numbers of every `PR N` in `text`.
fn pr_numbers(text: &str) -> Vec<String> {
    text.split("PR ")
        .skip(1)
        .filter_map(|rest| {
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (!n.is_empty()).then_some(n)
        })
        .collect()
}

/// The view's first lines: the title and the counts, then the notes.
fn header(view: &RehearsalView) -> Vec<Line<'static>> {
    let changing = view.vms.iter().filter(|v| !v.causes.is_empty()).count();
    let misfits = view.no_longer_fit();
    let short: Vec<String> = view
        .nodes
        .iter()
        .filter(|n| n.short_bytes > 0)
        .map(|n| format!("{} {} short", n.node, human_bytes(n.short_bytes)))
        .collect();
    let mut first = vec![
        Span::styled(
            view.title.clone(),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(": {} VM(s), {changing} change, ", view.vms.len())),
        Span::styled(
            format!("{misfits} no longer fit"),
            if misfits > 0 { bad() } else { good() },
        ),
    ];
    if !short.is_empty() {
        first.push(Span::styled(format!(" · {}", short.join(", ")), bad()));
    }
    let mut out = vec![Line::from(first)];
    out.extend(view.notes.iter().map(|n| Line::styled(n.clone(), warn())));
    out
}

const VM_W: usize = 28;
const NODE_W: usize = 14;

fn vm_heading() -> Line<'static> {
    Line::styled(
        format!(
            "{} {} {} {} {} CAUSES",
            pad("VM", VM_W),
            pad("NODE", NODE_W),
            pad("RENDERED", 8),
            rpad("MEMORY Δ", 9),
            pad("FITS", 4)
        ),
        dim().add_modifier(Modifier::BOLD),
    )
}

fn vm_line(v: &VmRow, is_selected: bool) -> Line<'static> {
    let (fits, fits_style) = match v.fits {
        Some(true) => ("yes", good()),
        Some(false) => ("NO", bad()),
        None => ("?", dim()),
    };
    let delta_style = if v.delta_bytes > 0 {
        warn()
    } else {
        Style::new()
    };
    let causes = if v.prs.is_empty() {
        if v.causes.is_empty() {
            "no change".to_string()
        } else {
            "no PR named".to_string()
        }
    } else {
        v.prs
            .iter()
            .map(|p| format!("PR {p}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut line = Line::from(vec![
        Span::raw(format!(
            "{} {} {} ",
            pad(&v.vm, VM_W),
            pad(&v.node, NODE_W),
            pad(&v.rendered_by, 8)
        )),
        Span::styled(rpad(&signed(v.delta_bytes), 9), delta_style),
        Span::raw(" "),
        Span::styled(pad(fits, 4), fits_style),
        Span::raw(" "),
        Span::styled(causes, accent()),
    ]);
    if is_selected {
        line = line.style(selected());
    }
    line
}

/// The selected VM's causes in full.
fn detail_lines(view: &RehearsalView) -> Vec<Line<'static>> {
    let Some(v) = view.vms.get(view.selected) else {
        return vec![Line::styled("no VM selected", dim())];
    };
    if v.causes.is_empty() {
        return vec![Line::styled(
            format!("{}: its launcher pod renders the same", v.vm),
            dim(),
        )];
    }
    v.causes.iter().map(|c| Line::raw(c.clone())).collect()
}

fn node_heading() -> Line<'static> {
    Line::styled(
        format!(
            "{} {} {} {} {} SHORT AFTER",
            pad("NODE", NODE_W),
            rpad("ALLOCATABLE", 11),
            rpad("REQUESTED", 10),
            rpad("AFTER", 10),
            rpad("VMS", 4)
        ),
        dim().add_modifier(Modifier::BOLD),
    )
}

fn node_line(n: &NodeRow) -> Line<'static> {
    let short = if n.short_bytes > 0 {
        Span::styled(human_bytes(n.short_bytes), bad())
    } else {
        Span::styled("-", good())
    };
    Line::from(vec![
        Span::raw(format!(
            "{} {} {} {} {} ",
            pad(&n.node, NODE_W),
            rpad(&n.allocatable, 11),
            rpad(&n.requested, 10),
            rpad(&n.requested_after, 10),
            rpad(&n.vms.to_string(), 4)
        )),
        short,
    ])
}

fn table(title: String, lines: Vec<Line<'static>>, width: u16) -> Paragraph<'static> {
    let width = usize::from(width.saturating_sub(2));
    let lines: Vec<Line<'static>> = lines
        .iter()
        .map(|l| super::fit::truncate(l, width))
        .collect();
    Paragraph::new(lines).block(Block::bordered().title(title).border_style(accent()))
}

/// Draw the rehearsal into `area`: the header, the VMs (the selected one highlighted, paged
/// to keep it on screen), its causes, the nodes.
pub(crate) fn render(frame: &mut Frame, area: Rect, view: &RehearsalView) {
    let head = header(view);
    let detail = detail_lines(view);
    let inner = area.width.saturating_sub(2);
    let node_rows = (view.nodes.len().max(1) as u16 + 3).min(area.height / 3);
    let detail_rows = (super::wrapped_height(&detail, inner) + 2).min(area.height / 4 + 2);
    let head_rows = super::wrapped_height(&head, area.width).min(area.height / 4);
    let [head_area, vms_area, detail_area, nodes_area] = Layout::vertical([
        Constraint::Length(head_rows),
        // The heading and at least one VM, whatever the height.
        Constraint::Min(4),
        Constraint::Length(detail_rows),
        Constraint::Length(node_rows),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(head).wrap(Wrap { trim: false }), head_area);

    let page = usize::from(vms_area.height.saturating_sub(3)).max(1);
    let start = view.selected.saturating_sub(page - 1);
    let mut lines = vec![vm_heading()];
    if view.vms.is_empty() {
        lines.push(Line::styled(
            "no running virt-launcher pods in scope",
            dim(),
        ));
    }
    lines.extend(
        view.vms
            .iter()
            .enumerate()
            .skip(start)
            .take(page)
            .map(|(i, v)| vm_line(v, i == view.selected)),
    );
    let title = if view.vms.len() > page {
        format!(
            " VirtualMachines {}-{} of {} · largest increase first ",
            start + 1,
            (start + page).min(view.vms.len()),
            view.vms.len()
        )
    } else {
        " VirtualMachines · largest increase first ".to_string()
    };
    frame.render_widget(table(title, lines, vms_area.width), vms_area);

    let name = view.vms.get(view.selected).map_or("", |v| v.vm.as_str());
    frame.render_widget(
        Paragraph::new(detail).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(format!(" Causes {name} "))
                .border_style(dim()),
        ),
        detail_area,
    );

    let mut lines = vec![node_heading()];
    lines.extend(view.nodes.iter().map(node_line));
    frame.render_widget(
        table(
            " Nodes · once every VM on them has restarted ".into(),
            lines,
            nodes_area.width,
        ),
        nodes_area,
    );
}

fn plain(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

/// The whole rehearsal as plain text (`--once`, or stdout not a terminal): the header, every
/// VM with its causes, every node.
pub(crate) fn text(view: &RehearsalView) -> String {
    let mut out = String::new();
    for l in header(view) {
        out.push_str(&plain(&l));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(plain(&vm_heading()).trim_end());
    out.push('\n');
    for v in &view.vms {
        out.push_str(plain(&vm_line(v, false)).trim_end());
        out.push('\n');
        for c in &v.causes {
            out.push_str(&format!("    {c}\n"));
        }
    }
    out.push('\n');
    out.push_str(plain(&node_heading()).trim_end());
    out.push('\n');
    for n in &view.nodes {
        out.push_str(plain(&node_line(n)).trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// Three VMs rehearsed from v1.9.0 to `main`: two on a roomy node, one on a node with
    /// 10Mi to spare, which no longer fits once QEMU's estimate grows by 20Mi (PR 18388).
    pub(crate) fn rehearsal() -> Rehearsal {
        let vm = |name: &str, node: &str, fits: bool| {
            json!({
                "namespace": "default", "vmi": name, "pod": format!("virt-launcher-{name}-abcde"),
                "node": node, "renderedBy": "v1.9.0",
                "changes": [{"resource": "requests.memory", "pod": "1290Mi", "rendered": "1310Mi",
                             "difference": -(20i64 << 20), "unit": "bytes"}],
                "memoryRequestDeltaBytes": 20 << 20,
                "causes": [{"term": "qemu", "beforeBytes": 30 << 20, "afterBytes": 50 << 20,
                            "source": "PR 18388:pkg/virt-controller/services/renderresources.go"}],
                "fitsAfter": fits,
                "podChanges": [{"cause": "PR 18237: the launcher flags move from command to args",
                                "source": "PR 18237:pkg/virt-controller/services/template.go",
                                "paths": ["spec.containers[compute].args",
                                          "spec.containers[compute].command"]}]
            })
        };
        serde_json::from_value(json!({
            "from": "v1.9.0", "to": "main",
            "vms": [vm("a", "roomy", true), vm("b", "roomy", true), vm("c", "full", false)],
            "nodes": [
                {"node": "full", "allocatableBytes": 2000i64 << 20,
                 "requestedBytes": 1990i64 << 20, "requestedAfterBytes": 2010i64 << 20, "vms": 1},
                {"node": "roomy", "allocatableBytes": 64i64 << 30,
                 "requestedBytes": 6i64 << 30, "requestedAfterBytes": (6i64 << 30) + (40 << 20),
                 "vms": 2}
            ]
        }))
        .expect("a rehearsal")
    }

    #[test]
    fn the_view_model_names_each_vms_prs_and_the_short_node() {
        let view = RehearsalView::of(&rehearsal());
        assert_eq!(
            view.title,
            "Upgrade rehearsal v1.9.0 → main in every namespace"
        );
        let c = &view.vms[2];
        assert_eq!(
            (c.vm.as_str(), c.fits, c.prs.clone()),
            (
                "default/c",
                Some(false),
                vec!["18388".into(), "18237".into()]
            )
        );
        assert_eq!(
            c.causes[0],
            "qemu +20Mi (PR 18388:pkg/virt-controller/services/renderresources.go)"
        );
        assert_eq!(view.nodes[0].short_bytes, 10 << 20);
        let t = text(&view);
        assert!(
            t.contains("3 VM(s), 3 change, 1 no longer fit · full 10Mi short"),
            "{t}"
        );
    }

    #[test]
    fn the_selection_stops_at_the_first_and_the_last_vm() {
        let mut view = RehearsalView::of(&rehearsal());
        view.select_by(-1);
        assert_eq!(view.selected, 0);
        view.select_by(10);
        assert_eq!(view.selected, 2);
        assert_eq!(pr_numbers("PR 18237: x; PR abc; PR 1"), ["18237", "1"]);
    }
}
