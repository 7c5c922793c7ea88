//! The shadow's summary: counts by verdict, each difference with its paths, both values and a
//! reproduction (the objects as they were before the write, as YAML).

use super::compare::Verdict;
use super::tracker::Record;
use super::verdicts::{LAST_PER_VM, LastVerdict, ShadowVerdicts, VmVerdicts};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `shadow -o json` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowReport {
    /// How long the shadow compared, in seconds.
    pub duration_seconds: f64,
    /// Writes of the leader compared.
    pub decisions: usize,
    /// Those our decision from the state before wrote the same.
    pub agree: usize,
    /// Those our next reconcile wrote the same.
    pub agree_later: usize,
    /// Those a decision from a state a few changes before wrote the same (the leader decided
    /// from a cache behind the server; only an audit log's replay looks back).
    pub agree_earlier: usize,
    /// Those our decision wrote differently.
    pub differ: usize,
    /// Those our decision would not have made.
    pub we_would_not_write: usize,
    /// Those our decision made with more.
    pub we_would_write_more: usize,
    /// Every write that did not agree.
    pub differences: Vec<Difference>,
    /// Decisions that could not be computed, with the reason.
    pub errors: Vec<String>,
    /// The KubeVirt release our decisions followed and where it was read (a live shadow; a
    /// replayed log leaves it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_as: Option<crate::kubevirt_version::DecidedVersion>,
}

/// One write that did not agree.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    /// `namespace/name` of the written object.
    pub key: String,
    /// Its kind.
    pub kind: &'static str,
    /// `differ`, `we-would-not-write` or `we-would-write-more`.
    pub verdict: Verdict,
    /// `main` or `status`: the part written.
    pub part: &'static str,
    /// Our action compared (`CreateVmi`, `UpdateVmStatus`, …); absent: we would not write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<&'static str>,
    /// The dotted paths where ours and theirs differ.
    pub paths: Vec<String>,
    /// Our value at each path (absent: not set).
    pub ours: BTreeMap<String, Value>,
    /// The leader's value at each path (absent: not set).
    pub theirs: BTreeMap<String, Value>,
    /// The reproduction file, when written (`--reproductions DIR`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reproduction: Option<PathBuf>,
    /// When the write was seen.
    pub seen: String,
}

impl ShadowReport {
    /// Count `records` and list the writes that did not agree.
    pub(crate) fn new(records: &[Record], duration_seconds: f64, errors: Vec<String>) -> Self {
        let count = |v: Verdict| records.iter().filter(|r| r.verdict == v).count();
        let differences = records
            .iter()
            .filter(|r| !r.verdict.agrees())
            .map(difference)
            .collect();
        ShadowReport {
            duration_seconds,
            decisions: records.len(),
            agree: count(Verdict::Agree),
            agree_later: count(Verdict::AgreeLater),
            agree_earlier: count(Verdict::AgreeEarlier),
            differ: count(Verdict::Differ),
            we_would_not_write: count(Verdict::WeWouldNotWrite),
            we_would_write_more: count(Verdict::WeWouldWriteMore),
            differences,
            errors,
            decided_as: None,
        }
    }

    /// "agreed on N of M decisions over D; K differ: …", one line per difference after it.
    pub fn text(&self) -> String {
        let agreed = self.agree + self.agree_later + self.agree_earlier;
        let mut out = format!(
            "agreed on {agreed} of {} decisions over {}",
            self.decisions,
            crate::inspect::model::human_duration(self.duration_seconds)
        );
        let mut notes = Vec::new();
        if self.agree_later > 0 {
            notes.push(format!("{} on our next reconcile", self.agree_later));
        }
        if self.agree_earlier > 0 {
            notes.push(format!(
                "{} from a state before the one just before it: the leader's cache was behind the server",
                self.agree_earlier
            ));
        }
        if !notes.is_empty() {
            out.push_str(&format!(" ({})", notes.join("; ")));
        }
        if self.differences.is_empty() {
            out.push('\n');
        } else {
            out.push_str(&format!("; {} differ:\n", self.differences.len()));
        }
        for d in &self.differences {
            let action = d.action.map(|a| format!(" ({a})")).unwrap_or_default();
            let detail = if d.paths.is_empty() {
                match d.verdict {
                    Verdict::WeWouldNotWrite => {
                        "the leader wrote it; no decision of ours from the state before writes it"
                            .to_string()
                    }
                    _ => "no path differs".to_string(),
                }
            } else {
                d.paths.join(", ")
            };
            out.push_str(&format!(
                "  {} {} {}{}: {detail}",
                d.kind,
                d.key,
                d.verdict.as_str(),
                action,
            ));
            if let Some(file) = &d.reproduction {
                out.push_str(&format!("  [{}]", file.display()));
            }
            out.push('\n');
        }
        for e in &self.errors {
            out.push_str(&format!("  error: {e}\n"));
        }
        if let Some(d) = &self.decided_as {
            out.push_str(&format!("decided as {d}\n"));
        }
        out
    }
}

fn difference(r: &Record) -> Difference {
    let side = |pick: fn(&super::compare::PathDiff) -> &Option<Value>| {
        r.paths
            .iter()
            .filter_map(|p| pick(p).clone().map(|v| (p.path.clone(), v)))
            .collect()
    };
    Difference {
        key: r.key.clone(),
        kind: r.kind.as_str(),
        verdict: r.verdict,
        part: part_name(r.part),
        action: r.action,
        paths: r.paths.iter().map(|p| p.path.clone()).collect(),
        ours: side(|p| &p.ours),
        theirs: side(|p| &p.theirs),
        reproduction: None,
        seen: r.seen.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }
}

/// The per-VM document `shadow --verdicts FILE` publishes for `inspect`
/// ([`super::verdicts`]), from the same classified writes as the summary: per VM key, the
/// writes compared, how many agreed, and the last [`LAST_PER_VM`] by the time they were seen.
pub(crate) fn verdicts(
    records: &[Record],
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ShadowVerdicts {
    let mut vms: BTreeMap<String, VmVerdicts> = BTreeMap::new();
    let mut sorted: Vec<&Record> = records.iter().collect();
    // Held writes are classified after later ones: the last are the last seen.
    sorted.sort_by_key(|r| r.seen);
    for r in sorted {
        let vm = vms.entry(r.vm_key.clone()).or_default();
        vm.decisions += 1;
        vm.agreed += usize::from(r.verdict.agrees());
        let verdict = LastVerdict {
            seen: r.seen,
            kind: r.kind.as_str().to_string(),
            key: r.key.clone(),
            part: part_name(r.part).to_string(),
            action: r.action.map(String::from),
            verdict: r.verdict,
            paths: r.paths.iter().map(|p| p.path.clone()).collect(),
        };
        if !r.verdict.agrees() {
            vm.last_difference = Some(verdict.clone());
        }
        vm.last.push(verdict);
        if vm.last.len() > LAST_PER_VM {
            vm.last.remove(0);
        }
    }
    ShadowVerdicts {
        written_at: now,
        since,
        vms,
    }
}

fn part_name(part: super::predict::Part) -> &'static str {
    match part {
        super::predict::Part::Main => "main",
        super::predict::Part::Status => "status",
    }
}

/// What a reproduction keeps of an object: everything but what the server sets on creation,
/// so `kubectl apply -f` (or a test) can recreate it.
fn reproducible(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "uid",
            "resourceVersion",
            "managedFields",
            "generation",
            "selfLink",
        ] {
            meta.remove(f);
        }
    }
    out
}

/// Write one YAML file per difference into `dir` (created if missing): a comment with the
/// verdict and paths, then the VM, VMI and pods as they were before the leader's write. Sets
/// each difference's `reproduction`.
pub fn write_reproductions(
    report: &mut ShadowReport,
    records: &[Record],
    dir: &Path,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let disagreeing = records.iter().filter(|r| !r.verdict.agrees());
    for (i, (d, r)) in report.differences.iter_mut().zip(disagreeing).enumerate() {
        let file = dir.join(format!(
            "{:03}-{}-{}.yaml",
            i + 1,
            d.key.replace('/', "-"),
            d.kind.to_lowercase()
        ));
        let mut text = format!(
            "# {} {} {}: {}\n# the objects below are the state before the leader's write\n",
            d.kind,
            d.key,
            d.verdict.as_str(),
            d.paths.join(", ")
        );
        for obj in &r.state_before {
            let yaml = serde_yaml::to_string(&reproducible(obj))
                .map_err(|e| format!("{}: {e}", file.display()))?;
            text.push_str("---\n");
            text.push_str(&yaml);
        }
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
        d.reproduction = Some(file);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write we would not make has no paths: the line says what the verdict means instead of
    /// ending in an empty list.
    #[test]
    fn a_write_we_would_not_make_is_explained_in_the_text() {
        let report = ShadowReport {
            duration_seconds: 12.0,
            decisions: 2,
            agree: 1,
            agree_later: 0,
            agree_earlier: 0,
            differ: 0,
            we_would_not_write: 1,
            we_would_write_more: 0,
            differences: vec![Difference {
                key: "default/virt-launcher-a-x".into(),
                kind: "Pod",
                verdict: Verdict::WeWouldNotWrite,
                part: "main",
                action: None,
                paths: Vec::new(),
                ours: BTreeMap::new(),
                theirs: BTreeMap::new(),
                reproduction: None,
                seen: String::new(),
            }],
            errors: Vec::new(),
            decided_as: Some(crate::kubevirt_version::DecidedVersion {
                version: crate::kubevirt_version::KubeVirtVersion::V1_8,
                source: crate::kubevirt_version::OBSERVED_VERSION.into(),
            }),
        };
        let text = report.text();
        assert!(
            text.contains("we-would-not-write: the leader wrote it; no decision of ours"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "decided as KubeVirt v1.8.0, from the KubeVirt CR's \
                 status.observedKubeVirtVersion\n"
            ),
            "{text}"
        );
    }

    fn record(vm: &str, second: i64, verdict: Verdict) -> Record {
        Record {
            vm_key: vm.into(),
            kind: super::super::predict::Kind::VirtualMachine,
            key: vm.into(),
            part: super::super::predict::Part::Status,
            verdict,
            action: Some("UpdateVmStatus"),
            paths: Vec::new(),
            state_before: Vec::new(),
            seen: DateTime::<Utc>::from_timestamp(1_800_000_000 + second, 0).expect("time"),
            change: u64::try_from(second).unwrap_or_default(),
        }
    }

    /// `inspect` sees the VM's last writes by the time they were seen (a held write is
    /// classified after later ones), at most [`LAST_PER_VM`], and the counts of all of them.
    #[test]
    fn the_published_verdicts_keep_each_vms_last_writes_by_time_seen() {
        let mut records: Vec<Record> = (0..7).map(|i| record("ns/a", i, Verdict::Agree)).collect();
        // Held, then classified last: seen before the others.
        records.push(record("ns/a", -1, Verdict::Differ));
        records.push(record("ns/b", 3, Verdict::WeWouldNotWrite));
        let at = DateTime::<Utc>::from_timestamp(1_800_000_100, 0).expect("time");
        let doc = verdicts(&records, at, at);
        let a = &doc.vms["ns/a"];
        assert_eq!((a.decisions, a.agreed), (8, 7));
        assert_eq!(a.last.len(), LAST_PER_VM);
        assert!(a.last.iter().all(|v| v.verdict == Verdict::Agree), "{a:?}");
        assert!(a.last.windows(2).all(|w| w[0].seen <= w[1].seen));
        // The difference fell out of the last five, and is still there.
        let differed = a.last_difference.as_ref().expect("the last difference");
        assert_eq!(differed.verdict, Verdict::Differ);
        let b = &doc.vms["ns/b"];
        assert_eq!((b.decisions, b.agreed), (1, 0));
        assert_eq!(b.last[0].verdict, Verdict::WeWouldNotWrite);
        assert_eq!(b.last[0].part, "status");
    }
}
