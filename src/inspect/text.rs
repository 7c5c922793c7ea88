//! `inspect --once`: the [`Inspection`] (and the [`Fleet`]) as plain text, one section per
//! topic, in the order an operator reads them: what happens next, what blocks, then the details.

use super::model::human_duration;
use super::model::{ControllerSourceKind, Fleet, HolderKind, Inspection, KeyState, SettingsCheck};
use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt::Write;

fn ts(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn hms(t: &DateTime<Utc>) -> String {
    t.format("%H:%M:%S").to_string()
}

/// The value, or `-` when unknown.
fn or_dash(v: Option<impl std::fmt::Display>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

fn mib(bytes: i64) -> String {
    format!("{:.1}Mi", bytes as f64 / 1_048_576.0)
}

/// A section of one line per item (`none` when there are none).
fn list_section<T>(o: &mut String, title: &str, items: &[T], line: impl Fn(&T) -> String) {
    let _ = writeln!(o, "\n{title}");
    if items.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for item in items {
        let _ = writeln!(o, "  {}", line(item));
    }
}

/// The whole inspection as text.
pub(crate) fn render_vm(ins: &Inspection) -> String {
    let mut o = String::new();
    header(&mut o, ins);
    next_decision(&mut o, ins);
    blockers(&mut o, ins);
    printable_status(&mut o, ins);
    leader(&mut o, ins);
    shadow(&mut o, ins);
    queues(&mut o, ins);
    expectations(&mut o, ins);
    phase_timeline(&mut o, ins);
    overhead_check(&mut o, ins);
    objects(&mut o, ins);
    events(&mut o, ins);
    missing(&mut o, ins);
    o
}

/// The title line and the VM's run strategy, printableStatus and generation.
fn header(o: &mut String, ins: &Inspection) {
    let _ = writeln!(
        o,
        "VirtualMachine {}/{}  (at {})",
        ins.namespace,
        ins.name,
        ts(&ins.generated_at)
    );
    if let Some(vm) = &ins.vm {
        let _ = writeln!(
            o,
            "  runStrategy {}  printableStatus {}  generation {}",
            vm.run_strategy.as_deref().unwrap_or("-"),
            vm.printable_status.as_deref().unwrap_or("-"),
            or_dash(vm.object.generation)
        );
    }
}

/// What the controllers do next, and why.
fn next_decision(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nNEXT DECISION");
    match &ins.next_decision {
        Some(nd) => {
            let _ = writeln!(o, "  {}", nd.summary);
            if let Some(w) = &nd.waiting
                && w != &nd.summary
            {
                let _ = writeln!(o, "  {w}");
            }
            if let Some(d) = &nd.disagreement {
                let _ = writeln!(o, "  DISAGREES WITH THE LEADER: {d}");
            }
            for a in &nd.actions {
                let _ = writeln!(o, "  - {} {}: {}", a.controller, a.kind, a.why);
            }
            if !nd.explanation.is_empty() {
                let _ = writeln!(o, "  why:");
                for l in &nd.explanation {
                    let _ = writeln!(o, "    {l}");
                }
            }
        }
        None => {
            let _ = writeln!(o, "  (none: no VM)");
        }
    }
}

/// What holds the VM, deepest cause first.
fn blockers(o: &mut String, ins: &Inspection) {
    list_section(o, "BLOCKERS (deepest first)", &ins.blockers, |b| {
        let mut line = format!("[{}] {} {}: {}", b.depth, b.object, b.reason, b.message);
        if let Some(fix) = &b.fix {
            line.push_str("\n      fix: ");
            line.push_str(fix);
        }
        line
    });
}

/// How printableStatus was computed, from which inputs.
fn printable_status(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nPRINTABLE STATUS");
    if let Some(p) = &ins.printable_status_reason {
        let _ = writeln!(
            o,
            "  {} (stored: {}): {}",
            p.computed,
            p.stored.as_deref().unwrap_or("-"),
            p.rule
        );
        let inputs: Vec<String> = p.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(o, "  inputs: {}", inputs.join(", "));
    }
    if let Some(c) = &ins.caught_up {
        let _ = writeln!(o, "  caught up: {}", c.summary);
    }
}

/// The Lease holder and where the controller view came from.
fn leader(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nLEADER");
    match &ins.lease {
        Some(l) => {
            let kind = match l.holder_kind {
                HolderKind::None => "nobody",
                HolderKind::VirtctlRs => "virtctl-rs run-controller",
                HolderKind::KubeVirt => "KubeVirt virt-controller",
                HolderKind::Unknown => "unknown kind",
            };
            let _ = writeln!(
                o,
                "  Lease {} held by {} ({kind}); renewed {} ago of {} s{}; transitions {}",
                l.lease,
                l.holder_identity.as_deref().unwrap_or("-"),
                l.renew_age_seconds.map_or("never".into(), human_duration),
                l.lease_duration_seconds.unwrap_or(0),
                if l.stale { ", STALE" } else { "" },
                l.lease_transitions.unwrap_or(0)
            );
        }
        None => {
            let _ = writeln!(o, "  no Lease");
        }
    }
    let source = match ins.controller.kind {
        ControllerSourceKind::DebugEndpoint => "debug endpoint",
        ControllerSourceKind::Metrics => "KubeVirt metrics",
        ControllerSourceKind::Unavailable => "unavailable",
    };
    let _ = writeln!(
        o,
        "  controller view: {source}{}",
        ins.controller
            .url
            .as_deref()
            .map(|u| format!(" ({u})"))
            .unwrap_or_default()
    );
}

/// What a running shadow says about the leader's last writes for this VM (`--shadow FILE`).
fn shadow(o: &mut String, ins: &Inspection) {
    let Some(s) = &ins.shadow else {
        return;
    };
    let _ = writeln!(
        o,
        "\nSHADOW ({}, written {} ago)\n  {}",
        s.source,
        human_duration(s.age_seconds),
        s.summary
    );
    for v in &s.last {
        let _ = writeln!(o, "  {}", crate::inspect::shadow_view::verdict_line(v));
    }
}

/// The work queues and where this VM's key is in them.
fn queues(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nQUEUES");
    if ins.queues.is_empty() {
        let _ = writeln!(o, "  unknown");
    }
    for q in &ins.queues {
        let state = match q.key_state {
            Some(KeyState::Idle) => "this key idle".to_string(),
            Some(KeyState::Queued) => format!(
                "this key queued {}",
                human_duration(q.key_seconds.unwrap_or(0.0))
            ),
            Some(KeyState::InFlight) => format!(
                "this key in flight {}",
                human_duration(q.key_seconds.unwrap_or(0.0))
            ),
            Some(KeyState::Waiting) => format!(
                "this key waiting, ready in {}",
                human_duration(q.key_seconds.unwrap_or(0.0))
            ),
            None => String::new(),
        };
        let _ = writeln!(
            o,
            "  {:<22} depth {:<4} retries {:<3} {}{}",
            q.name,
            q.depth,
            q.retries,
            state,
            q.longest_running_processor_seconds
                .map(|s| format!(" longest running {s:.1} s"))
                .unwrap_or_default()
        );
    }
}

/// Pending expectations and the last reconcile of each controller.
fn expectations(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nEXPECTATIONS");
    if !ins.controller.expectations_exposed {
        let _ = writeln!(o, "  not exposed by this controller");
    } else if ins.expectations.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for e in &ins.expectations {
        let _ = writeln!(
            o,
            "  {:<14} {} adds {} dels {} set {} ago, expires in {}{}",
            e.store,
            e.key,
            e.adds,
            e.dels,
            human_duration(e.age_seconds),
            human_duration(e.expires_in_seconds),
            if e.satisfied {
                " (satisfied)"
            } else {
                " (PENDING)"
            }
        );
    }
    for r in &ins.last_reconciles {
        let _ = writeln!(
            o,
            "  last {} reconcile {}: {}{}; {}",
            r.controller,
            hms(&r.at),
            r.result,
            r.error
                .as_deref()
                .map(|e| format!(" {e}"))
                .unwrap_or_default(),
            if r.actions.is_empty() {
                "no actions".to_string()
            } else {
                format!("actions: {}", r.actions.join(", "))
            }
        );
    }
}

/// The VMI's phase transitions.
fn phase_timeline(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nPHASE TIMELINE");
    match &ins.vmi {
        Some(vmi) if !vmi.phase_transitions.is_empty() => {
            let line: Vec<String> = vmi
                .phase_transitions
                .iter()
                .map(|p| {
                    format!(
                        "{} {} ({})",
                        p.phase,
                        hms(&p.timestamp),
                        human_duration(p.duration_seconds)
                    )
                })
                .collect();
            let _ = writeln!(o, "  {}", line.join(" → "));
        }
        Some(vmi) => {
            let _ = writeln!(o, "  phase {:?}, no transitions recorded", vmi.phase);
        }
        None => {
            let _ = writeln!(o, "  no VMI");
        }
    }
}

/// The memory overhead formula against the pod, annotation and status.
fn overhead_check(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nOVERHEAD CHECK");
    match &ins.overhead_check {
        Some(c) => {
            let _ = writeln!(
                o,
                "  {}  formula overhead {} ({})  request {}  pod {}  annotation {}  status {}",
                if c.matches { "MATCH" } else { "DIFFERS" },
                c.formula_bytes,
                mib(c.formula_bytes),
                or_dash(c.formula_request_bytes),
                or_dash(c.pod_request_bytes),
                or_dash(c.annotation_bytes),
                or_dash(c.status_bytes),
            );
            for t in &c.terms {
                let _ = writeln!(o, "    {:<22} {:>12}  {}", t.name, t.bytes, t.reason);
            }
            for d in &c.differences {
                let _ = writeln!(o, "  difference: {d}");
            }
            if let Some(v) = &ins.kubevirt_version_overhead {
                let _ = writeln!(o, "  {}", v.comparison(c.formula_bytes));
            }
            if let Some(cpu) = &c.cpu {
                let _ = writeln!(
                    o,
                    "  cpu: {} vCPU(s) ÷ ratio {} → request {} (pod {}){}",
                    cpu.vcpus,
                    cpu.allocation_ratio,
                    or_dash(cpu.formula_request_millis.map(|m| format!("{m}m"))),
                    or_dash(cpu.pod_request_millis.map(|m| format!("{m}m"))),
                    if cpu.matches { " MATCH" } else { " DIFFERS" }
                );
            }
        }
        None => {
            let _ = writeln!(o, "  unavailable");
        }
    }
    if let Some(line) = ins.settings.as_ref().and_then(settings_line) {
        let _ = writeln!(o, "  {line}");
    }
}

/// The VMI, launcher pods, volumes and node.
fn objects(o: &mut String, ins: &Inspection) {
    let _ = writeln!(o, "\nOBJECTS");
    if let Some(vmi) = &ins.vmi {
        let _ = writeln!(
            o,
            "  VirtualMachineInstance {} phase {} node {}",
            ins.name,
            vmi.phase,
            vmi.node_name.as_deref().unwrap_or("-")
        );
    }
    for p in &ins.pods {
        let _ = writeln!(
            o,
            "  Pod {} phase {} node {}{}",
            p.name,
            p.phase.as_deref().unwrap_or("-"),
            p.node_name.as_deref().unwrap_or("-"),
            p.compute_requests
                .get("memory")
                .map(|m| format!(" memory request {m}"))
                .unwrap_or_default()
        );
    }
    for v in &ins.volumes {
        let on_vmi = match (&v.vmi_phase, &v.attachment_pod) {
            (Some(p), Some(pod)) => format!(", on the VMI {p} via attachment pod {pod}"),
            (Some(p), None) => format!(", on the VMI {p}"),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {} {} (volume {}) {}{on_vmi}",
            v.kind,
            v.name,
            v.volume,
            if v.exists {
                v.phase.as_deref().unwrap_or("no phase")
            } else {
                "MISSING"
            }
        );
    }
    if let Some(d) = ins.vm.as_ref().and_then(|v| v.memory_dump.as_ref()) {
        let file = d
            .file_name
            .as_deref()
            .map(|f| format!(", file {f}"))
            .unwrap_or_default();
        let why = d
            .message
            .as_deref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "  Memory dump to claim {} {}{file}{why}",
            d.claim_name, d.phase
        );
    }
    if let Some(n) = &ins.node {
        let _ = writeln!(
            o,
            "  Node {} Ready={}",
            n.name,
            n.ready.as_deref().unwrap_or("-")
        );
    }
}

/// The events, oldest first.
fn events(o: &mut String, ins: &Inspection) {
    list_section(o, "EVENTS (oldest first)", &ins.events, |e| {
        format!(
            "{} {:<7} {:<22} {:<40} {}{}",
            e.time.as_ref().map_or("--:--:--".into(), hms),
            e.type_,
            e.reason,
            e.object,
            e.message,
            if e.count > 1 {
                format!(" (×{})", e.count)
            } else {
                String::new()
            }
        )
    });
}

/// What could not be read.
fn missing(o: &mut String, ins: &Inspection) {
    if !ins.missing.is_empty() {
        let _ = writeln!(o, "\nMISSING");
        for m in &ins.missing {
            let _ = writeln!(o, "  {}: {}", m.what, m.reason);
        }
    }
}

/// The leader's settings against the KubeVirt CR's (KubeVirt's defaults where the CR sets none,
/// or without one), when the leader's are known.
fn settings_line(s: &SettingsCheck) -> Option<String> {
    let from = s.controller_origin()?;
    let mut line = if s.differences.is_empty() {
        format!(
            "settings: the controller's ({from}) match the KubeVirt CR's (KubeVirt's defaults where it sets none)"
        )
    } else {
        format!(
            "settings: the controller's ({from}) DIFFER from the KubeVirt CR's: {}",
            s.differences.join("; ")
        )
    };
    if let Some(refused) = &s.controller_refused {
        let _ = write!(line, "; it refused {refused}");
    }
    Some(line)
}

/// The fleet as a table, problems first.
pub(crate) fn render_fleet(f: &Fleet) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<20} {:<28} {:<20} {:<12} {:>8} {:>7} {:>5} {:<9} PROBLEM",
        "NAMESPACE", "NAME", "STATUS", "VMI PHASE", "IN PHASE", "RETRIES", "EXP", "OVERHEAD"
    );
    for r in &f.rows {
        let _ = writeln!(
            o,
            "{:<20} {:<28} {:<20} {:<12} {:>8} {:>7} {:>5} {:<9} {}",
            r.namespace,
            r.name,
            r.printable_status.as_deref().unwrap_or("-"),
            r.vmi_phase.as_deref().unwrap_or("-"),
            r.phase_seconds.map_or("-".into(), human_duration),
            r.retries,
            r.pending_expectations,
            match (r.overhead_match, r.overhead_difference_bytes) {
                (Some(true), _) => "MATCH".to_string(),
                (Some(false), Some(d)) => format!("{d:+}"),
                (Some(false), None) => "DIFFERS".to_string(),
                (None, _) => "-".to_string(),
            },
            r.problem.as_deref().unwrap_or("")
        );
    }
    for m in &f.missing {
        let _ = writeln!(o, "missing {}: {}", m.what, m.reason);
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterSettings;

    fn check(differences: Vec<String>, rv: Option<&str>) -> SettingsCheck {
        SettingsCheck {
            cluster: ClusterSettings::default(),
            controller: Some(ClusterSettings::default()),
            controller_source: None,
            controller_resource_version: rv.map(str::to_string),
            controller_loaded_at: None,
            controller_refused: None,
            differences,
        }
    }

    /// Without a KubeVirt CR the line said the controller's defaults "are the KubeVirt CR's"
    /// while MISSING said there is no CR; it now says what the comparison is against.
    #[test]
    fn the_settings_line_says_what_the_controller_s_settings_are_compared_with() {
        assert_eq!(
            settings_line(&check(vec![], None)).as_deref(),
            Some(
                "settings: the controller's (KubeVirt's defaults) match the KubeVirt CR's \
                 (KubeVirt's defaults where it sets none)"
            )
        );
        let differ = vec!["memoryOvercommit: controller 100, KubeVirt CR 150".to_string()];
        assert_eq!(
            settings_line(&check(differ, Some("812"))).as_deref(),
            Some(
                "settings: the controller's (KubeVirt CR resourceVersion 812) DIFFER from the \
                 KubeVirt CR's: memoryOvercommit: controller 100, KubeVirt CR 150"
            )
        );
        let unknown = SettingsCheck {
            controller: None,
            ..check(vec![], None)
        };
        assert_eq!(settings_line(&unknown), None);
    }
}
