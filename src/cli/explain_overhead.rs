//! `explain-overhead`: flags and output formatting. The numbers come from
//! [`crate::launcher::explain`]; the cluster reads from [`crate::inspect::overhead`].
//!
//! Three modes: files (`-f`, repeatable, a directory, `-` for stdin), one object of the cluster
//! (`vm/NAME`, `vmi/NAME`, `pod/NAME`), and the fleet audit (`-A`, or `-n NS` alone).
//!
//! Exit codes: 0 success; 1 bad input or failed read (the message names the document or
//! object, and the field); 2 usage; 3 when a pod does not match the formula (`--pod`, cluster
//! mode) or the audit flags anything.

use super::{CliError, GlobalArgs};
use crate::api::manifest::{ManifestObject, read_manifest};
use crate::config::ClusterSettings;
use crate::launcher::explain::{
    Explanation, PodCheck, RenderInputs, check_pod, explain_in, likely_cause,
};
use crate::launcher::overhead::MIB;
use crate::launcher::resources::NamespaceContext;
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
    /// `vm/NAME`, `vmi/NAME` or `pod/NAME` (a virt-launcher pod) to explain from the cluster,
    /// with its KubeVirt CR, namespace and ResourceQuotas, checked against the pod that runs.
    pub target: Option<String>,
    /// Manifest with VirtualMachine / VirtualMachineInstance (or VirtualMachinePool,
    /// VirtualMachineInstanceReplicaSet) documents: a file, a directory (its .yaml/.yml/.json
    /// files), or `-` for stdin; repeatable. Other kinds are skipped with a note on stderr;
    /// Namespace and ResourceQuota documents are used as the namespace context.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: Vec<String>,
    /// Audit every virt-launcher pod of every namespace (with `-n NS` alone: of one namespace)
    /// against the formula, worst first; exit code 3 when anything is flagged.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// With the audit: a Prometheus server (`http://host:9090`) to read
    /// `kubevirt_vmi_memory_resident_bytes` from and compare with each pod's limit.
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,
    #[command(flatten)]
    pub kubevirt: super::KubeVirtNamespaceArg,
    /// Timeout of reads outside the Kubernetes API (Prometheus), seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout_seconds: u64,
    /// File mode: the VMI's Namespace (YAML/JSON, as `kubectl get ns NAME -o yaml` prints), for
    /// `alpha.kubevirt.io/auto-memory-limits-ratio` and the autoCPULimitNamespaceLabelSelector.
    #[arg(long, value_name = "FILE")]
    pub namespace_file: Option<PathBuf>,
    /// File mode: the namespace's ResourceQuotas (a quota, several documents or a List;
    /// repeatable): `limits.cpu` / `limits.memory` give the pod automatic limits.
    #[arg(long = "resourcequota-file", value_name = "FILE")]
    pub resourcequota_file: Vec<PathBuf>,
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
    /// KubeVirt release whose formula and renderer to reproduce: v1.0.0 … v1.9.0 or main
    /// (default v1.9.0; a patch release such as v1.8.2 uses its minor's row).
    #[arg(long, value_name = "VERSION")]
    pub kubevirt_version: Option<String>,
    /// With the audit (-A or -n NS): an upgrade rehearsal instead. Every running launcher pod
    /// rendered again under this release (v1.0.0 … v1.9.0 or main), the change per VM with
    /// its causes, and which VMs no longer fit on their node after their next restart.
    #[arg(long, value_name = "VERSION")]
    pub upgrade_to: Option<String>,
    /// Override the cluster's default architecture.
    #[arg(long, value_parser = ["amd64", "arm64", "s390x"])]
    pub architecture: Option<String>,
    /// Virt-launcher pods (YAML/JSON: one, several documents, or a List as `kubectl get pod -o
    /// yaml` prints) to check against the formula: the `kubevirt.io/memory-overhead-bytes`
    /// annotation and every request and limit of the `compute` container.
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
pub(crate) struct WhatIfExplanation {
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
    ns_ctx: &NamespaceContext,
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
    explain_in(&changed, namespace, settings, ns_ctx).map_err(|e| format!("after the change: {e}"))
}

/// The before/after table of one object.
pub(crate) fn render_what_if_table(w: &WhatIfExplanation) -> String {
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
fn pod_target(explanations: &[Explanation], pod: &Pod) -> Result<usize, String> {
    let meta = &pod.metadata;
    let name = crate::api::annotation(meta, crate::api::annotations::DOMAIN)
        .or_else(|| crate::api::label(meta, crate::api::labels::VM_NAME));
    match name {
        Some(name) => {
            let known: Vec<String> = explanations.iter().map(|e| e.name.clone()).collect();
            explanations.iter().position(|e| e.name == name).ok_or_else(|| {
                format!("the pod belongs to VMI {name:?} (kubevirt.io/domain), which is not in the manifest ({})", known.join(", "))
            })
        }
        None if explanations.len() == 1 => Ok(0),
        None => Err(
            "cannot tell which VM/VMI the pod belongs to: it has no kubevirt.io/domain annotation"
                .to_string(),
        ),
    }
}

/// The files `-f` names, in order: a directory stands for its `.yaml`, `.yml` and `.json`
/// files, sorted (not recursive, as kubectl without `-R`); `-` is stdin (once).
fn expand_inputs(names: &[String]) -> Result<Vec<String>, CliError> {
    let mut out = Vec::new();
    for name in names {
        let path = std::path::Path::new(name);
        if name != "-" && path.is_dir() {
            let mut files: Vec<String> = std::fs::read_dir(path)
                .map_err(|e| CliError::Failed(format!("reading directory {name}: {e}")))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .and_then(|x| x.to_str())
                            .is_some_and(|x| ["yaml", "yml", "json"].contains(&x))
                })
                .map(|p| p.display().to_string())
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(CliError::Failed(format!(
                    "{name}: the directory has no .yaml, .yml or .json file"
                )));
            }
            out.extend(files);
        } else {
            out.push(name.clone());
        }
    }
    if out.iter().filter(|n| *n == "-").count() > 1 {
        return Err(CliError::Usage("-f - (stdin) can be given once".into()));
    }
    Ok(out)
}

/// The namespace context given to file mode: Namespace and ResourceQuota documents of the
/// inputs, `--namespace-file`, `--resourcequota-file`.
#[derive(Default)]
struct FileContext {
    namespaces: Vec<k8s_openapi::api::core::v1::Namespace>,
    quotas: Vec<k8s_openapi::api::core::v1::ResourceQuota>,
}

impl FileContext {
    /// Add the documents of the file `path` (`-` for stdin), which must hold at least one `kind`
    /// (`Namespace` or `ResourceQuota`).
    fn add_file(
        &mut self,
        path: &std::path::Path,
        kind: &str,
        default_ns: &str,
    ) -> Result<(), CliError> {
        let name = path.display().to_string();
        let text = read_input(&name)?;
        let count = |c: &Self| match kind {
            "Namespace" => c.namespaces.len(),
            _ => c.quotas.len(),
        };
        let before = count(self);
        self.add_documents(&name, &text, default_ns)?;
        if count(self) == before {
            return Err(CliError::Failed(format!(
                "{name}: expected a {kind}, found none"
            )));
        }
        Ok(())
    }

    /// Add the Namespace / ResourceQuota documents of `text` (others are ignored here).
    fn add_documents(
        &mut self,
        source: &str,
        text: &str,
        default_ns: &str,
    ) -> Result<(), CliError> {
        let docs = crate::api::manifest::split_documents(source, text)
            .map_err(|e| CliError::Failed(e.to_string()))?;
        for (index, doc) in docs {
            let kind = doc
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("")
                .to_string();
            let bad = |e: serde_json::Error| {
                CliError::Failed(format!("{source}: document {index} ({kind}): {e}"))
            };
            match kind.as_str() {
                "Namespace" => self
                    .namespaces
                    .push(serde_json::from_value(doc).map_err(bad)?),
                "ResourceQuota" => {
                    let mut q: k8s_openapi::api::core::v1::ResourceQuota =
                        serde_json::from_value(doc).map_err(bad)?;
                    q.metadata
                        .namespace
                        .get_or_insert_with(|| default_ns.to_string());
                    self.quotas.push(q);
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// What the renderer knows of `namespace`.
    fn context(&self, namespace: &str, settings: &ClusterSettings) -> NamespaceContext {
        NamespaceContext::from_cluster(
            self.namespaces
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(namespace)),
            self.quotas
                .iter()
                .filter(|q| q.metadata.namespace.as_deref() == Some(namespace)),
            settings,
        )
    }
}

/// The namespace an object is explained in: its own, else `-n`, else `default`.
fn object_namespace(object: &crate::api::manifest::KubeVirtObject, default_ns: &str) -> String {
    object.namespace().unwrap_or(default_ns).to_string()
}

/// Flags that only make sense with `-f`, set on this command line.
fn file_only_flags(args: &ExplainOverheadArgs) -> Vec<&'static str> {
    let mut set = Vec::new();
    for (on, flag) in [
        (args.kubevirt_cr.is_some(), "--kubevirt-cr"),
        (
            args.cpu_allocation_ratio.is_some(),
            "--cpu-allocation-ratio",
        ),
        (args.memory_overcommit.is_some(), "--memory-overcommit"),
        (
            args.additional_guest_memory_overhead_ratio.is_some(),
            "--additional-guest-memory-overhead-ratio",
        ),
        (args.architecture.is_some(), "--architecture"),
        (args.pod.is_some(), "--pod"),
        (!args.what_if.is_empty(), "--what-if"),
        (!args.set.is_empty(), "--set"),
        (args.namespace_file.is_some(), "--namespace-file"),
        (!args.resourcequota_file.is_empty(), "--resourcequota-file"),
    ] {
        if on {
            set.push(flag);
        }
    }
    set
}

const MODES: &str = "give -f FILE (a manifest, a directory or - for stdin), vm/NAME | vmi/NAME | pod/NAME (from the cluster), or -A / -n NS (audit every virt-launcher pod)";

/// Run `explain-overhead`.
pub(crate) fn run(global: &GlobalArgs, args: ExplainOverheadArgs) -> Result<ExitCode, CliError> {
    let target = args
        .target
        .as_deref()
        .map(str::parse::<crate::inspect::overhead::Target>)
        .transpose()
        .map_err(CliError::Usage)?;
    let audit = args.all_namespaces
        || (target.is_none() && args.filename.is_empty() && global.namespace.is_some());
    if target.is_some() || audit {
        check_cluster_flags(&args, target.is_some(), audit)?;
        return run_cluster(global, &args, target);
    }
    if args.filename.is_empty() {
        return Err(CliError::Usage(format!("nothing to explain: {MODES}")));
    }
    if args.prometheus.is_some() || args.upgrade_to.is_some() {
        return Err(CliError::Usage(format!(
            "{} goes with the audit (-A or -n NS)",
            if args.prometheus.is_some() {
                "--prometheus"
            } else {
                "--upgrade-to"
            }
        )));
    }
    run_files(global, &args)
}

/// The flags that make no sense when the cluster is read (`TYPE/NAME` or the audit).
fn check_cluster_flags(
    args: &ExplainOverheadArgs,
    has_target: bool,
    audit: bool,
) -> Result<(), CliError> {
    if !args.filename.is_empty() {
        return Err(CliError::Usage(format!(
            "-f reads files, {} reads the cluster: give one",
            args.target.as_deref().unwrap_or("-A")
        )));
    }
    if has_target && args.all_namespaces {
        return Err(CliError::Usage(
            "-A audits every pod: not with a TYPE/NAME".into(),
        ));
    }
    let file_only = file_only_flags(args);
    if !file_only.is_empty() {
        return Err(CliError::Usage(format!(
            "{} appl{} to -f only: in the cluster the settings come from the KubeVirt CR and the namespace from the API server",
            file_only.join(", "),
            if file_only.len() == 1 { "ies" } else { "y" }
        )));
    }
    if args.upgrade_to.is_some() && !audit {
        return Err(CliError::Usage(
            "--upgrade-to goes with the audit (-A or -n NS without TYPE/NAME)".into(),
        ));
    }
    if args.upgrade_to.is_some() && args.prometheus.is_some() {
        return Err(CliError::Usage(
            "--upgrade-to rehearses the rendering: not with --prometheus".into(),
        ));
    }
    if args.prometheus.is_some() && !audit {
        return Err(CliError::Usage(
            "--prometheus goes with the audit (-A or -n NS without TYPE/NAME)".into(),
        ));
    }
    Ok(())
}

/// The objects of `-f` (with the file each came from, instancetypes and preferences of the
/// files applied), and the namespace context the files give.
struct FileInputs {
    objects: Vec<(String, ManifestObject)>,
    context: FileContext,
}

fn read_files(args: &ExplainOverheadArgs, default_ns: &str) -> Result<FileInputs, CliError> {
    let inputs = expand_inputs(&args.filename)?;
    let several = inputs.len() > 1;
    let mut objects = Vec::new();
    let mut context = FileContext::default();
    let mut instancetypes = crate::instancetype::Objects::default();
    for filename in &inputs {
        let text = read_input(filename)?;
        let source = if filename == "-" {
            "<stdin>".to_string()
        } else {
            filename.clone()
        };
        context.add_documents(&source, &text, default_ns)?;
        add_instancetype_documents(&mut instancetypes, &source, &text);
        let manifest = match read_manifest(&source, &text) {
            Ok(m) => m,
            // With several inputs, a file of other kinds (a Namespace, a quota) is fine.
            Err(crate::api::manifest::ManifestError::NoKubeVirtObjects { .. }) if several => {
                continue;
            }
            Err(e) => return Err(CliError::Failed(e.to_string())),
        };
        for skipped in &manifest.skipped {
            let used = matches!(
                skipped.doc.kind.as_deref(),
                Some("Namespace" | "ResourceQuota")
            ) || crate::instancetype::Resource::ALL
                .iter()
                .any(|r| skipped.doc.kind.as_deref() == Some(r.kind()));
            if !used {
                eprintln!(
                    "note: {source}: {}: skipped: {}",
                    skipped.doc, skipped.reason
                );
            }
        }
        objects.extend(manifest.objects.into_iter().map(|o| (source.clone(), o)));
    }
    if objects.is_empty() {
        return Err(CliError::Failed(format!(
            "{}: no VirtualMachine or VirtualMachineInstance found",
            inputs.join(", ")
        )));
    }
    if let Some(path) = &args.namespace_file {
        context.add_file(path, "Namespace", default_ns)?;
    }
    for path in &args.resourcequota_file {
        context.add_file(path, "ResourceQuota", default_ns)?;
    }
    for (source, ManifestObject { doc, object }) in &mut objects {
        expand_instancetype(source, doc, object, &instancetypes);
    }
    Ok(FileInputs { objects, context })
}

/// `explain-overhead -f FILE`: explain, then `--what-if` or `--pod` if given.
fn run_files(global: &GlobalArgs, args: &ExplainOverheadArgs) -> Result<ExitCode, CliError> {
    let settings = settings(args)?;
    let default_ns = global
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let FileInputs { objects, context } = read_files(args, &default_ns)?;
    let mut explanations = Vec::new();
    for (source, ManifestObject { doc, object }) in &objects {
        let ns_ctx = context.context(&object_namespace(object, &default_ns), &settings);
        let e = explain_in(object, &default_ns, &settings, &ns_ctx)
            .map_err(|e| CliError::Failed(format!("{source}: {doc}: {e}")))?;
        explanations.push(e);
    }
    let files = Files {
        objects: &objects,
        context: &context,
        settings: &settings,
        default_ns: &default_ns,
    };
    if let Some(change) = what_if_change(args)? {
        if args.pod.is_some() {
            return Err(CliError::Usage(
                "--pod checks a running pod against the manifest as is: not with --what-if/--set"
                    .into(),
            ));
        }
        return run_what_if(args, &files, explanations, &change);
    }
    let mut mismatch = false;
    if let Some(pod_path) = &args.pod {
        mismatch = check_pods(pod_path, &files, &mut explanations)?;
    }
    super::output::out(&render(args.output, &explanations, render_table)?);
    Ok(if mismatch {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// What the file mode's steps after the first explanation share.
struct Files<'a> {
    objects: &'a [(String, ManifestObject)],
    context: &'a FileContext,
    settings: &'a ClusterSettings,
    default_ns: &'a str,
}

/// `--what-if`/`--set`: each object explained again with the change, term by term.
fn run_what_if(
    args: &ExplainOverheadArgs,
    files: &Files<'_>,
    explanations: Vec<Explanation>,
    change: &crate::inspect::whatif::Change,
) -> Result<ExitCode, CliError> {
    let (objects, context, settings, default_ns) = (
        files.objects,
        files.context,
        files.settings,
        files.default_ns,
    );
    let mut results = Vec::new();
    for ((source, ManifestObject { doc, object }), before) in objects.iter().zip(explanations) {
        let ns_ctx = context.context(&object_namespace(object, default_ns), settings);
        let after = explain_changed(object, change, default_ns, settings, &ns_ctx)
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
    Ok(ExitCode::SUCCESS)
}

/// `--pod FILE`: each pod checked against the object it belongs to; true on a mismatch.
fn check_pods(
    pod_path: &std::path::Path,
    files: &Files<'_>,
    explanations: &mut [Explanation],
) -> Result<bool, CliError> {
    let (objects, context, settings, default_ns) = (
        files.objects,
        files.context,
        files.settings,
        files.default_ns,
    );
    let mut mismatch = false;
    let name = pod_path.display().to_string();
    let pod_text = read_input(&name)?;
    if pod_text.trim().is_empty() {
        return Err(CliError::Failed(format!(
            "{name}: the file is empty: expected a virt-launcher Pod"
        )));
    }
    let docs = crate::api::manifest::split_documents(&name, &pod_text)
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let mut checked = std::collections::BTreeSet::new();
    for (index, value) in docs {
        let at = |m: String| CliError::Failed(format!("{name}: document {index}: {m}"));
        match value.get("kind").and_then(|k| k.as_str()) {
            Some("Pod") | None => {}
            Some(other) => {
                return Err(CliError::Failed(format!(
                    "{name}: expected a Pod, found kind {other}"
                )));
            }
        }
        let pod: Pod = serde_json::from_value(value).map_err(|e| at(format!("not a Pod: {e}")))?;
        let i = pod_target(explanations, &pod)
            .map_err(|why| CliError::Failed(format!("{name}: {why}")))?;
        if !checked.insert(i) {
            return Err(at(format!(
                "a second pod for {} {}: give one pod per VM/VMI",
                explanations[i].kind, explanations[i].name
            )));
        }
        let (_, ManifestObject { object, .. }) = &objects[i];
        let ns_ctx = context.context(&object_namespace(object, default_ns), settings);
        let mut check = check_pod(&explanations[i], &pod);
        check.likely_cause = likely_cause(
            RenderInputs {
                object,
                default_namespace: default_ns,
                settings,
                namespace: &ns_ctx,
            },
            &pod,
            &check,
            None,
        );
        mismatch |= !check.matches;
        explanations[i].pod_check = Some(check);
    }
    Ok(mismatch)
}

/// `explain-overhead TYPE/NAME` and the audit.
fn run_cluster(
    global: &GlobalArgs,
    args: &ExplainOverheadArgs,
    target: Option<crate::inspect::overhead::Target>,
) -> Result<ExitCode, CliError> {
    use crate::inspect::overhead::{explain_target, gather_audit};
    use std::io::IsTerminal;
    let opts = crate::inspect::GatherOptions {
        kubevirt_namespace: args.kubevirt.kubevirt_namespace.clone(),
        timeout: std::time::Duration::from_secs(args.timeout_seconds.max(1)),
        ..Default::default()
    };
    let upgrade_to = args
        .upgrade_to
        .as_deref()
        .map(crate::kubevirt_version::KubeVirtVersion::parse)
        .transpose()
        .map_err(|e| CliError::Usage(format!("--upgrade-to: {e}")))?;
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let client = super::client::client_from_flags(global, "explain-overhead").await?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        match target {
            Some(target) => {
                let e = explain_target(&client, &namespace, &target, &opts)
                    .await
                    .map_err(|e| CliError::Failed(e.to_string()))?;
                let mismatch = e.explanation.pod_check.as_ref().is_some_and(|c| !c.matches);
                super::output::out(&render(
                    args.output,
                    std::slice::from_ref(&e),
                    render_cluster_table,
                )?);
                Ok(if mismatch {
                    ExitCode::from(3)
                } else {
                    ExitCode::SUCCESS
                })
            }
            None => {
                let scope = (!args.all_namespaces).then_some(namespace.as_str());
                let tty = std::io::stderr().is_terminal();
                let started = std::time::Instant::now();
                let mut shown = false;
                let mut progress = |what: &str| {
                    // Only on a terminal, and only once the audit takes more than a moment.
                    if tty && (shown || started.elapsed() > std::time::Duration::from_millis(500)) {
                        eprint!("\r\x1b[2K{what}…");
                        shown = true;
                    }
                };
                if let Some(to) = upgrade_to {
                    let rehearsal = crate::inspect::rehearsal::gather_rehearsal(
                        &client,
                        scope,
                        &opts,
                        to,
                        &mut progress,
                    )
                    .await;
                    if shown {
                        eprint!("\r\x1b[2K");
                    }
                    let rehearsal = rehearsal.map_err(|e| CliError::Failed(e.to_string()))?;
                    return print_rehearsal(args.output, &rehearsal);
                }
                let report = gather_audit(
                    &client,
                    scope,
                    &opts,
                    args.prometheus.as_deref(),
                    &mut progress,
                )
                .await;
                if shown {
                    eprint!("\r\x1b[2K");
                }
                let report = report.map_err(|e| CliError::Failed(e.to_string()))?;
                let flagged = !report.findings.is_empty();
                let text = match args.output {
                    Output::Table => render_audit_table(&report),
                    other => render(other, std::slice::from_ref(&report), render_audit_table).map(
                        |t| match other {
                            // One report, not a list of one.
                            Output::Json => serde_json::to_string_pretty(&report)
                                .map(|s| s + "\n")
                                .unwrap_or(t),
                            _ => serde_yaml::to_string(&report).unwrap_or(t),
                        },
                    )?,
                };
                super::output::out(&text);
                Ok(if flagged {
                    ExitCode::from(3)
                } else {
                    ExitCode::SUCCESS
                })
            }
        }
    })
}

/// The rehearsal in the chosen format; exit code 3 when it flags a VM or node.
fn print_rehearsal(
    output: Output,
    r: &crate::inspect::rehearsal::Rehearsal,
) -> Result<ExitCode, CliError> {
    use super::upgrade_rehearsal::{flagged, render_rehearsal_table};
    let text = match output {
        Output::Table => render_rehearsal_table(r),
        Output::Json => serde_json::to_string_pretty(r)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Failed(e.to_string()))?,
        Output::Yaml => serde_yaml::to_string(r).map_err(|e| CliError::Failed(e.to_string()))?,
    };
    super::output::out(&text);
    Ok(if flagged(r) {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

/// The table of `explain-overhead TYPE/NAME`: the inputs, the formula, the pod beside it.
pub(crate) fn render_cluster_table(e: &crate::inspect::overhead::ClusterExplanation) -> String {
    let mut out = String::new();
    let c = &e.cluster;
    let _ = writeln!(
        out,
        "cluster: KubeVirt {} · settings from {} (cpuAllocationRatio {}, memoryOvercommit {}%, additionalGuestMemoryOverheadRatio {}) · namespace: {}",
        c.kubevirt_version
            .as_deref()
            .unwrap_or("(version not reported)"),
        c.settings_source,
        c.settings.cpu_allocation_ratio,
        c.settings.memory_overcommit,
        c.settings
            .additional_guest_memory_overhead_ratio
            .as_deref()
            .unwrap_or("unset"),
        namespace_summary(&c.namespace_context),
    );
    out.push_str(&render_table(&e.explanation));
    if let Some(r) = e.reported_overhead_bytes {
        let f = e.explanation.overhead.total_bytes;
        let _ = writeln!(
            out,
            "  VMI status.memory.memoryOverhead: {r} ({})",
            if r == f {
                "same as the formula".to_string()
            } else {
                format!("{:+} bytes from the formula", r - f)
            }
        );
    }
    if let Some(why) = &e.no_pod {
        let _ = writeln!(out, "  pod: none ({why})");
    }
    for m in &e.missing {
        let _ = writeln!(out, "  could not read {}: {}", m.what, m.reason);
    }
    out
}

fn namespace_summary(ns: &NamespaceContext) -> String {
    let mut parts = Vec::new();
    if ns.quota_limits_memory {
        let ratio = ns
            .labels
            .get(crate::launcher::resources::AUTO_MEMORY_LIMITS_RATIO_LABEL)
            .map_or("2.0 (default)".to_string(), |r| format!("{r} (label)"));
        parts.push(format!(
            "ResourceQuota limits.memory → automatic memory limit × {ratio}"
        ));
    }
    if ns.quota_limits_cpu {
        parts.push("ResourceQuota limits.cpu → automatic CPU limit".to_string());
    }
    if ns.auto_cpu_limit_selector_matches {
        parts.push("matches autoCPULimitNamespaceLabelSelector → automatic CPU limit".to_string());
    }
    if parts.is_empty() {
        "no automatic limits".to_string()
    } else {
        parts.join(", ")
    }
}

/// The audit's table: a line of scope, then the findings worst first.
pub(crate) fn render_audit_table(r: &crate::inspect::overhead::AuditReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Checked {} virt-launcher pod(s) in {} · KubeVirt {} · status.memory.memoryOverhead reported by {}/{} VMIs{}{}",
        r.pods_checked,
        r.namespace
            .as_deref()
            .map_or("every namespace".to_string(), |n| format!("namespace {n}")),
        r.kubevirt_version
            .as_deref()
            .unwrap_or("(version not reported)"),
        r.overhead_reporting.reported,
        r.overhead_reporting.vmis,
        if r.overhead_reporting.reported > 0 {
            " (used as the overhead where reported)"
        } else {
            " (VmiMemoryOverheadReport off or not supported: the formula is used)"
        },
        if r.prometheus {
            " · resident memory from Prometheus"
        } else {
            ""
        },
    );
    if r.findings.is_empty() {
        let _ = writeln!(out, "Nothing flagged.");
    } else {
        let kind_w = r
            .findings
            .iter()
            .map(|f| f.kind.as_str().len())
            .max()
            .unwrap_or(4)
            .max(4);
        let pod_w = r
            .findings
            .iter()
            .map(|f| f.namespace.len() + f.pod.len() + 1)
            .max()
            .unwrap_or(3)
            .max(3);
        let _ = writeln!(out, "{:<kind_w$}  {:<pod_w$}  DETAIL", "KIND", "POD");
        for f in &r.findings {
            let _ = writeln!(
                out,
                "{:<kind_w$}  {:<pod_w$}  {}",
                f.kind.as_str(),
                format!("{}/{}", f.namespace, f.pod),
                f.message
            );
        }
        let _ = writeln!(out, "{} finding(s): exit code 3", r.findings.len());
    }
    if !r.older_renderings.is_empty() {
        let _ = writeln!(
            out,
            "Rendered by an older KubeVirt, as it renders them (not flagged; they change on their next restart):"
        );
        for f in &r.older_renderings {
            let _ = writeln!(out, "  {}/{}  {}", f.namespace, f.pod, f.message);
        }
    }
    for s in &r.pods_skipped {
        let _ = writeln!(out, "not checked: {s}");
    }
    for m in &r.missing {
        let _ = writeln!(out, "could not read {}: {}", m.what, m.reason);
    }
    out
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
pub(crate) fn render_table(e: &Explanation) -> String {
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
    if !c.differences.is_empty() {
        let w = c
            .differences
            .iter()
            .map(|d| d.resource.len())
            .max()
            .unwrap_or(8)
            .max(8);
        let _ = writeln!(
            out,
            "    {:<w$}  {:>14}  {:>14}  DIFFERENCE",
            "RESOURCE", "POD", "KUBEVIRT"
        );
        for d in &c.differences {
            let _ = writeln!(
                out,
                "    {:<w$}  {:>14}  {:>14}  {}",
                d.resource,
                d.pod.as_deref().unwrap_or("-"),
                d.rendered.as_deref().unwrap_or("-"),
                d.difference
                    .map_or("not comparable".to_string(), |v| format!(
                        "{v:+} {}",
                        d.unit
                    ))
            );
        }
    }
    if let Some(cause) = &c.likely_cause {
        let _ = writeln!(out, "    likely cause: {cause}");
    }
    for n in &c.notes {
        let _ = writeln!(out, "    note: {n}");
    }
    out
}

/// The instancetypes and preferences among the input documents, for expanding the VMs that name
/// them (documents that do not parse were reported by the manifest reader already).
fn add_instancetype_documents(
    objects: &mut crate::instancetype::Objects,
    source: &str,
    text: &str,
) {
    let Ok(docs) = crate::api::manifest::split_documents(source, text) else {
        return;
    };
    for (_, doc) in docs {
        let kind = doc.get("kind").and_then(serde_json::Value::as_str);
        let name = doc
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str);
        let resource = crate::instancetype::Resource::ALL
            .into_iter()
            .find(|r| Some(r.kind()) == kind);
        if let (Some(resource), Some(name)) = (resource, name) {
            let key = (resource, name.to_string());
            objects.0.insert(key, std::sync::Arc::new(doc.clone()));
        }
    }
}

/// A VM naming an instancetype or preference: expanded as KubeVirt's `ApplyToVM` does
/// (pkg/instancetype/apply/vm.go:67-87) when the input holds them, which a note says; otherwise
/// a note that the figures use the template alone.
fn expand_instancetype(
    source: &str,
    doc: &crate::api::manifest::DocumentRef,
    object: &mut crate::api::manifest::KubeVirtObject,
    instancetypes: &crate::instancetype::Objects,
) {
    let crate::api::manifest::KubeVirtObject::Vm(vm) = object else {
        return;
    };
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return;
    }
    let named = |m: Option<crate::instancetype::Matcher>, what: &str| {
        m.map(|m| format!("{what} {}", m.name))
    };
    let from = [
        named(
            crate::instancetype::Matcher::instancetype(vm),
            "instancetype",
        ),
        named(crate::instancetype::Matcher::preference(vm), "preference"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" and ");
    match crate::instancetype::apply_to_vm(vm, instancetypes, &[]) {
        Ok(expanded) => {
            eprintln!(
                "note: {source}: {doc}: expanded with {from} (the CPU, memory and other fields \
                 they set come from them)"
            );
            **vm = expanded;
        }
        Err(e) => eprintln!(
            "note: {source}: {doc}: {from} not resolved ({e}; give their manifests with -f): \
             the figures use the template alone"
        ),
    }
}
