//! What a running shadow publishes for `inspect` (`shadow --verdicts FILE`): per VM, how many
//! of the leader's writes it compared, how many agreed, and its verdicts on the last few. The
//! file is a local one, rewritten whole (a temporary file beside it, then renamed over it) when
//! a new write has been classified (and every [`HEARTBEAT`]), so a reader never sees half of it; nothing goes to the
//! cluster. `inspect vm/NAME --shadow FILE` reads it (`src/inspect/shadow_view.rs`).
//!
//! The document is built from the same classified writes as the summary
//! (`report::verdicts`), so `inspect` and `shadow` cannot tell two stories.

use super::compare::Verdict;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How often the shadow rewrites the file when nothing new was classified: its `writtenAt`
/// tells a reader the shadow still runs.
pub(super) const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(10);

/// A file older than this was left by a shadow that stopped (three heartbeats missed).
pub const STALE_AFTER_SECONDS: f64 = 30.0;

/// How many of a VM's last classified writes the document keeps.
pub const LAST_PER_VM: usize = 5;

/// The published document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowVerdicts {
    /// When the shadow wrote this version of the file.
    pub written_at: DateTime<Utc>,
    /// When the shadow started comparing.
    pub since: DateTime<Utc>,
    /// Per VM key (`namespace/name`), its verdicts.
    #[serde(default)]
    pub vms: BTreeMap<String, VmVerdicts>,
}

/// One VM's verdicts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmVerdicts {
    /// Writes of the leader for this VM (its VM, VMI, pods, revisions, DataVolumes) compared.
    pub decisions: usize,
    /// Of those, how many one of our decisions wrote the same (`agree`, `agree-later`).
    pub agreed: usize,
    /// The last [`LAST_PER_VM`] classified writes, oldest first.
    #[serde(default)]
    pub last: Vec<LastVerdict>,
    /// The last write that did not agree, kept when newer writes push it out of `last`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_difference: Option<LastVerdict>,
}

/// One classified write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastVerdict {
    /// When the write was seen on the watches.
    pub seen: DateTime<Utc>,
    /// The written object's kind.
    pub kind: String,
    /// Its `namespace/name`.
    pub key: String,
    /// `main` or `status`.
    pub part: String,
    /// Our action compared (absent: we would not write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Where ours and the leader's differ.
    #[serde(default)]
    pub paths: Vec<String>,
}

impl ShadowVerdicts {
    /// Write the document to `path`: to a temporary file beside it, then renamed over it.
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| format!("{}: cannot serialise the verdicts: {e}", path.display()))?;
        let mut temporary = path.as_os_str().to_owned();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Read a document [`ShadowVerdicts::write`] wrote; the error names the file and what is
    /// wrong with it.
    pub fn read(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: not a shadow verdicts file (shadow --verdicts FILE writes one): {e}",
                path.display()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_document_reads_back_and_a_foreign_file_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("verdicts.json");
        let at = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let doc = ShadowVerdicts {
            written_at: at,
            since: at,
            vms: BTreeMap::from([(
                "ns/a".to_string(),
                VmVerdicts {
                    decisions: 1,
                    agreed: 0,
                    last: vec![LastVerdict {
                        seen: at,
                        kind: "VirtualMachine".into(),
                        key: "ns/a".into(),
                        part: "status".into(),
                        action: Some("UpdateVmStatus".into()),
                        verdict: Verdict::Differ,
                        paths: vec!["status.printableStatus".into()],
                    }],
                    last_difference: None,
                },
            )]),
        };
        doc.write(&path).expect("written");
        assert_eq!(ShadowVerdicts::read(&path).expect("read"), doc);
        assert!(!dir.path().join("verdicts.json.tmp").exists());
        std::fs::write(&path, "{\"kind\": \"Pod\"}").expect("write");
        let err = ShadowVerdicts::read(&path).unwrap_err();
        assert!(err.contains("not a shadow verdicts file"), "{err}");
        assert!(err.starts_with(&path.display().to_string()), "{err}");
    }
}
