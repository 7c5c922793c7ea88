//! `explain-overhead`: flags and output formatting. The numbers come from
//! [`crate::launcher::explain`].
//!
//! Exit codes: 0 success; 1 bad input (the message names the document, object and field);
//! 2 not available yet (cluster mode); 3 with `--pod` when the pod does not match the formula.

use super::{CliError, GlobalArgs};
use crate::api::manifest::{ManifestObject, read_manifest};
use crate::config::ClusterSettings;
use crate::launcher::explain::{Explanation, PodCheck, check_pod, explain};
use crate::launcher::overhead::MIB;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::fmt::Write as _;
use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// Output format of `explain-overhead`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// A JSON list, one entry per object (stable shape, see docs/explain-overhead.md).
    Json,
    /// The same list as YAML.
    Yaml,
}

/// Flags of `explain-overhead`.
#[derive(Debug, Args)]
pub struct ExplainOverheadArgs {
    /// `vm/NAME` or `vmi/NAME` to read from the cluster (not available yet: use -f).
    pub target: Option<String>,
    /// Manifest with VirtualMachine / VirtualMachineInstance documents (`-` for stdin). Other
    /// kinds are skipped with a note on stderr.
    #[arg(short = 'f', long = "filename")]
    pub filename: Option<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// KubeVirt custom resource (YAML/JSON) to read cluster settings from
    /// (cpuAllocationRatio, memoryOvercommit, additionalGuestMemoryOverheadRatio, ...).
    #[arg(long, value_name = "FILE")]
    pub kubevirt_cr: Option<PathBuf>,
    /// Override `developerConfiguration.cpuAllocationRatio` (default 10).
    #[arg(long)]
    pub cpu_allocation_ratio: Option<u32>,
    /// Override `developerConfiguration.memoryOvercommit` in percent (default 100).
    #[arg(long)]
    pub memory_overcommit: Option<u32>,
    /// Override `additionalGuestMemoryOverheadRatio` (e.g. 1.5).
    #[arg(long)]
    pub additional_guest_memory_overhead_ratio: Option<String>,
    /// KubeVirt release whose formula and renderer to reproduce: v1.5.0 … v1.9.0 or main
    /// (default v1.9.0; a patch release such as v1.8.2 uses its minor's row).
    #[arg(long, value_name = "VERSION")]
    pub kubevirt_version: Option<String>,
    /// Override the cluster's default architecture.
    #[arg(long, value_parser = ["amd64", "arm64", "s390x"])]
    pub architecture: Option<String>,
    /// A virt-launcher pod (YAML/JSON) to check against the formula: its
    /// `kubevirt.io/memory-overhead-bytes` annotation and `compute` memory request.
    #[arg(long, value_name = "FILE")]
    pub pod: Option<PathBuf>,
    /// What-if: a JSON merge patch (RFC 7386, JSON or YAML) applied to every VM/VMI of the
    /// manifest; prints the terms before and after (repeatable).
    #[arg(long = "what-if", value_name = "PATCH")]
    pub what_if: Vec<String>,
    /// What-if: set one field, `path=value` (value JSON when it parses, else a string;
    /// repeatable, applied after --what-if).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
}

/// One object of `explain-overhead --what-if`: the formula before and after the change.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIfExplanation {
    /// `VirtualMachine` or `VirtualMachineInstance`.
    pub kind: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The change, one line per step.
    pub change: Vec<String>,
    /// Before the change.
    pub before: Explanation,
    /// After the change.
    pub after: Explanation,
    /// Every term before and after, in KubeVirt's order.
    pub terms: Vec<crate::inspect::whatif::TermChange>,
}

/// `--what-if`/`--set` as a change (bad syntax is a usage error); `None` when neither is given.
fn what_if_change(
    args: &ExplainOverheadArgs,
) -> Result<Option<crate::inspect::whatif::Change>, CliError> {
    use crate::inspect::whatif::{Change, parse_patch, parse_set};
    if args.what_if.is_empty() && args.set.is_empty() {
        return Ok(None);
    }
    let usage = |e: crate::inspect::whatif::ChangeError| CliError::Usage(e.to_string());
    let mut change = Change::default();
    for p in &args.what_if {
        change.patches.push(parse_patch(p).map_err(usage)?);
    }
    for s in &args.set {
        change.sets.push(parse_set(s).map_err(usage)?);
    }
    Ok(Some(change))
}

/// Apply `change` to one manifest object (a copy) and explain it again.
fn explain_changed(
    object: &crate::api::manifest::KubeVirtObject,
    change: &crate::inspect::whatif::Change,
    namespace: &str,
    settings: &ClusterSettings,
) -> Result<Explanation, String> {
    use crate::api::manifest::{KubeVirtObject, from_value_with_path};
    let mut doc = match object {
        KubeVirtObject::Vm(vm) => serde_json::to_value(vm),
        KubeVirtObject::Vmi(vmi) => serde_json::to_value(vmi),
    }
    .map_err(|e| e.to_string())?;
    change.apply_to_value(&mut doc).map_err(|e| e.to_string())?;
    let changed = match object {
        KubeVirtObject::Vm(_) => KubeVirtObject::Vm(Box::new(
            from_value_with_path(doc)
                .map_err(|(f, m)| format!("after the change, field {f}: {m}"))?,
        )),
        KubeVirtObject::Vmi(_) => KubeVirtObject::Vmi(Box::new(
            from_value_with_path(doc)
                .map_err(|(f, m)| format!("after the change, field {f}: {m}"))?,
        )),
    };
    explain(&changed, namespace, settings).map_err(|e| format!("after the change: {e}"))
}

/// The before/after table of one object.
pub fn render_what_if_table(w: &WhatIfExplanation) -> String {
    use crate::inspect::whatif::human_bytes;
    let mut out = String::new();
    let _ = writeln!(out, "{} {}/{} (what-if)", w.kind, w.namespace, w.name);
    for c in &w.change {
        let _ = writeln!(out, "  change: {c}");
    }
    let width = term_width(w.terms.iter().map(|t| t.name.as_str()));
    let _ = writeln!(
        out,
        "  {:<width$}  {:>12}  {:>12}  {:>9}  WHY (after)",
        "TERM", "BEFORE", "AFTER", "DELTA"
    );
    for t in &w.terms {
        let delta = if t.delta_bytes == 0 {
            "-".to_string()
        } else if t.delta_bytes > 0 {
            format!("+{}", human_bytes(t.delta_bytes))
        } else {
            human_bytes(t.delta_bytes)
        };
        let _ = writeln!(
            out,
            "  {:<width$}  {:>12}  {:>12}  {:>9}  {}",
            t.name, t.before_bytes, t.after_bytes, delta, t.reason
        );
    }
    let (b, a) = (w.before.overhead.total_bytes, w.after.overhead.total_bytes);
    let _ = writeln!(
        out,
        "  {:<width$}  {:>12}  {:>12}  {:>9}",
        "TOTAL",
        b,
        a,
        if a == b {
            "-".to_string()
        } else {
            format!("{:+}", a - b)
        }
    );
    let mem = |e: &Explanation| {
        e.compute_resources
            .requests
            .get("memory")
            .map_or("-".to_string(), |q| q.0.clone())
    };
    let _ = writeln!(
        out,
        "  compute memory request: {} → {}",
        mem(&w.before),
        mem(&w.after)
    );
    out
}

fn read_input(name: &str) -> Result<String, CliError> {
    if name == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::Failed(format!("reading stdin: {e}")))?;
        Ok(s)
    } else {
        std::fs::read_to_string(name).map_err(|e| CliError::Failed(format!("reading {name}: {e}")))
    }
}

/// Build the cluster settings from `--kubevirt-cr` and the override flags.
fn settings(args: &ExplainOverheadArgs) -> Result<ClusterSettings, CliError> {
    let mut s = match &args.kubevirt_cr {
        Some(path) => {
            let text = read_input(&path.display().to_string())?;
            let value: serde_json::Value = serde_yaml::from_str(&text)
                .map_err(|e| CliError::Failed(format!("{}: invalid YAML: {e}", path.display())))?;
            ClusterSettings::from_kubevirt_cr(&value)
                .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?
        }
        None => ClusterSettings::default(),
    };
    if let Some(r) = args.cpu_allocation_ratio {
        if r == 0 {
            return Err(CliError::Failed(
                "--cpu-allocation-ratio must be at least 1".into(),
            ));
        }
        s.cpu_allocation_ratio = r;
    }
    if let Some(o) = args.memory_overcommit {
        if o == 0 {
            return Err(CliError::Failed(
                "--memory-overcommit must be at least 1".into(),
            ));
        }
        s.memory_overcommit = o;
    }
    if let Some(r) = &args.additional_guest_memory_overhead_ratio {
        crate::config::validate_overhead_ratio(r).map_err(|m| {
            CliError::Failed(format!("--additional-guest-memory-overhead-ratio: {m}"))
        })?;
        s.additional_guest_memory_overhead_ratio = Some(r.clone());
    }
    if let Some(a) = &args.architecture {
        s.architecture = a.clone();
    }
    if let Some(v) = &args.kubevirt_version {
        s.kubevirt_version = crate::kubevirt_version::KubeVirtVersion::parse(v)
            .map_err(|e| CliError::Usage(format!("--kubevirt-version: {e}")))?;
    }
    Ok(s)
}

/// Pick the explanation a pod belongs to: the only one, or the one named by the pod's
/// `kubevirt.io/domain` annotation / `vm.kubevirt.io/name` label.
fn pod_target<'a>(
    explanations: &'a mut [Explanation],
    pod: &Pod,
) -> Result<&'a mut Explanation, String> {
    let meta = &pod.metadata;
    let name = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::annotations::DOMAIN))
        .or_else(|| {
            meta.labels
                .as_ref()
                .and_then(|l| l.get(crate::api::labels::VM_NAME))
        });
    match name {
        Some(name) => {
            let known: Vec<String> = explanations.iter().map(|e| e.name.clone()).collect();
            explanations.iter_mut().find(|e| &e.name == name).ok_or_else(|| {
                format!("the pod belongs to VMI {name:?} (kubevirt.io/domain), which is not in the manifest ({})", known.join(", "))
            })
        }
        None if explanations.len() == 1 => explanations
            .first_mut()
            .ok_or_else(|| "no VM/VMI to compare with".to_string()),
        None => Err(
            "cannot tell which VM/VMI the pod belongs to: it has no kubevirt.io/domain annotation"
                .to_string(),
        ),
    }
}

/// Run `explain-overhead`.
pub fn run(global: &GlobalArgs, args: ExplainOverheadArgs) -> Result<ExitCode, CliError> {
    if let Some(target) = &args.target {
        return Err(CliError::Failed(format!(
            "reading {target} from the cluster is not available yet in this build; use -f FILE (a VM/VMI manifest) instead"
        )));
    }
    let Some(filename) = args.filename.clone() else {
        return Err(CliError::Usage(
            "nothing to explain: give -f FILE (or -f - for stdin)".into(),
        ));
    };
    let settings = settings(&args)?;
    let text = read_input(&filename)?;
    let source = if filename == "-" {
        "<stdin>".to_string()
    } else {
        filename.clone()
    };
    let manifest = read_manifest(&source, &text).map_err(|e| CliError::Failed(e.to_string()))?;
    for skipped in &manifest.skipped {
        eprintln!(
            "note: {source}: {}: skipped: {}",
            skipped.doc, skipped.reason
        );
    }
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let mut explanations = Vec::new();
    for ManifestObject { doc, object } in &manifest.objects {
        if let crate::api::manifest::KubeVirtObject::Vm(vm) = object
            && (vm.spec.instancetype.is_some() || vm.spec.preference.is_some())
        {
            eprintln!(
                "note: {source}: {doc}: spec.instancetype/spec.preference are not resolved by explain-overhead \
                 (and the controller refuses such VMs): the figures use the template alone"
            );
        }
        let e = explain(object, &namespace, &settings)
            .map_err(|e| CliError::Failed(format!("{source}: {doc}: {e}")))?;
        explanations.push(e);
    }
    if let Some(change) = what_if_change(&args)? {
        if args.pod.is_some() {
            return Err(CliError::Usage(
                "--pod checks a running pod against the manifest as is: not with --what-if/--set"
                    .into(),
            ));
        }
        let mut results = Vec::new();
        for (ManifestObject { doc, object }, before) in manifest.objects.iter().zip(explanations) {
            let after = explain_changed(object, &change, &namespace, &settings)
                .map_err(|e| CliError::Failed(format!("{source}: {doc}: {e}")))?;
            results.push(WhatIfExplanation {
                kind: before.kind.clone(),
                namespace: before.namespace.clone(),
                name: before.name.clone(),
                change: change.describe(),
                terms: crate::inspect::whatif::term_changes(&before, &after),
                before,
                after,
            });
        }
        print!("{}", render(args.output, &results, render_what_if_table)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut mismatch = false;
    if let Some(pod_path) = &args.pod {
        let pod_text = read_input(&pod_path.display().to_string())?;
        if pod_text.trim().is_empty() {
            return Err(CliError::Failed(format!(
                "{}: the file is empty: expected a virt-launcher Pod",
                pod_path.display()
            )));
        }
        let value: serde_json::Value = serde_yaml::from_str(&pod_text)
            .map_err(|e| CliError::Failed(format!("{}: invalid YAML: {e}", pod_path.display())))?;
        match value.get("kind").and_then(|k| k.as_str()) {
            Some("Pod") | None => {}
            Some(other) => {
                return Err(CliError::Failed(format!(
                    "{}: expected a Pod, found kind {other}",
                    pod_path.display()
                )));
            }
        }
        let pod: Pod = serde_json::from_value(value)
            .map_err(|e| CliError::Failed(format!("{}: not a Pod: {e}", pod_path.display())))?;
        let target = pod_target(&mut explanations, &pod)
            .map_err(|why| CliError::Failed(format!("{}: {why}", pod_path.display())))?;
        let check = check_pod(target, &pod);
        mismatch = !check.matches;
        target.pod_check = Some(check);
    }
    super::output::out(&render(args.output, &explanations, render_table)?);
    Ok(if mismatch {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// `items` in the chosen output format: a JSON or YAML list, or one table each.
fn render<T: serde::Serialize>(
    output: Output,
    items: &[T],
    table: fn(&T) -> String,
) -> Result<String, CliError> {
    Ok(match output {
        Output::Json => {
            serde_json::to_string_pretty(items).map_err(|e| CliError::Failed(e.to_string()))? + "\n"
        }
        Output::Yaml => {
            serde_yaml::to_string(items).map_err(|e| CliError::Failed(e.to_string()))?
        }
        Output::Table => items.iter().map(table).collect::<Vec<_>>().join("\n"),
    })
}

fn mib(bytes: i64) -> String {
    let v = bytes as f64 / MIB as f64;
    if bytes % MIB == 0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Width of a table's TERM column: the longest term name, at least `TERM` and a space.
fn term_width<'a>(names: impl Iterator<Item = &'a str>) -> usize {
    names.map(str::len).max().unwrap_or(4).max(5)
}

/// The human-readable table for one object.
pub fn render_table(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} {}/{}", e.kind, e.namespace, e.name);
    let width = term_width(e.overhead.terms.iter().map(|t| t.name.as_str()));
    let _ = writeln!(
        out,
        "  {:<width$}  {:>12}  {:>9}  WHY",
        "TERM", "BYTES", "MiB"
    );
    for t in &e.overhead.terms {
        let _ = writeln!(
            out,
            "  {:<width$}  {:>12}  {:>9}  {}",
            t.name,
            t.bytes,
            mib(t.bytes),
            t.reason
        );
    }
    let _ = writeln!(
        out,
        "  {:<width$}  {:>12}  {:>9}",
        "TOTAL",
        e.overhead.total_bytes,
        mib(e.overhead.total_bytes)
    );
    let list = |m: &std::collections::BTreeMap<String, Quantity>| {
        if m.is_empty() {
            "(none)".to_string()
        } else {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.0))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let _ = writeln!(
        out,
        "  compute requests: {}",
        list(&e.compute_resources.requests)
    );
    let _ = writeln!(
        out,
        "  compute limits:   {}",
        list(&e.compute_resources.limits)
    );
    if e.kubevirt_version != crate::kubevirt_version::KubeVirtVersion::default() {
        let _ = writeln!(out, "  formula of KubeVirt {}", e.kubevirt_version);
    }
    for w in &e.warnings {
        let _ = writeln!(out, "  WARNING {}: {}", w.id, w.message);
        let _ = writeln!(out, "    upstream: {}", w.upstream);
    }
    if let Some(c) = &e.pod_check {
        out.push_str(&render_pod_check(c));
    }
    out
}

fn render_pod_check(c: &PodCheck) -> String {
    let mut out = String::new();
    let verdict = if c.matches {
        "MATCH".to_string()
    } else {
        "MISMATCH".to_string()
    };
    let _ = writeln!(out, "  pod {}: {verdict}", c.pod);
    let diff = |d: Option<i64>| match d {
        Some(0) => "match".to_string(),
        Some(d) => format!("differs by {d:+} bytes"),
        None => "not comparable".to_string(),
    };
    let _ = writeln!(
        out,
        "    overhead annotation: {} vs formula {} ({})",
        c.annotation_overhead_bytes
            .map_or("-".into(), |v| v.to_string()),
        c.formula_overhead_bytes,
        diff(c.overhead_difference_bytes)
    );
    let _ = writeln!(
        out,
        "    compute memory request: {} vs formula {} ({})",
        c.pod_memory_request_bytes
            .map_or("-".into(), |v| v.to_string()),
        c.formula_memory_request_bytes
            .map_or("-".into(), |v| v.to_string()),
        diff(c.memory_request_difference_bytes)
    );
    for n in &c.notes {
        let _ = writeln!(out, "    note: {n}");
    }
    out
}
