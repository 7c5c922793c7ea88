//! Pure comparison of one write: the object as the leading controller wrote it against the
//! object as our decision would have written it, both from the same state before the write.
//!
//! Only what is expected to differ between two correct controllers is normalised away (see
//! [`normalise`]); every other difference is reported with its path and both values. One
//! exception is forced by what a watch shows: a created object arrives with the server's and
//! admission's defaults merged in, so a creation is compared on the fields ours sets.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How one write of the leading controller compares with our decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Our decision from the state just before the write writes the same.
    Agree,
    /// Our decision from the state just before did not, the one of our next reconcile does.
    AgreeLater,
    /// Our decision from the state just before did not, nor our next one; one from a state a
    /// few changes before does: the controller decided from a cache behind the server.
    AgreeEarlier,
    /// Our decision writes the same object, with other values at `paths`.
    Differ,
    /// Our decision writes nothing to that object.
    WeWouldNotWrite,
    /// Our decision writes everything the leader wrote, and more.
    WeWouldWriteMore,
}

impl Verdict {
    /// `agree`, `agree-later` or `agree-earlier`: one of our decisions writes the same.
    pub fn agrees(self) -> bool {
        matches!(
            self,
            Verdict::Agree | Verdict::AgreeLater | Verdict::AgreeEarlier
        )
    }

    /// The word the report uses.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verdict::Agree => "agree",
            Verdict::AgreeLater => "agree-later",
            Verdict::AgreeEarlier => "agree-earlier",
            Verdict::Differ => "differ",
            Verdict::WeWouldNotWrite => "we-would-not-write",
            Verdict::WeWouldWriteMore => "we-would-write-more",
        }
    }
}

/// The metadata fields the API server sets on every write (never a controller's decision).
const SERVER_METADATA: [&str; 6] = [
    "uid",
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// The placeholder of every timestamp.
const TIMESTAMP: &str = "<timestamp>";

/// `obj` without what two correct controllers write differently: the server-set metadata
/// (UID, resourceVersion, managedFields, creationTimestamp, generation), the name the server
/// generated from `metadata.generateName`, the values of timestamps (RFC 3339 strings
/// become `<timestamp>`: each controller writes its own clock) and the one value KubeVirt
/// draws at random, the launcher's `--qemu-timeout` ([`RANDOM_FLAG`]). Nothing else.
pub(crate) fn normalise(obj: &Value) -> Value {
    let mut out = obj.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in SERVER_METADATA {
            meta.remove(field);
        }
        let generated = meta
            .get("generateName")
            .and_then(Value::as_str)
            .is_some_and(|g| !g.is_empty());
        if generated {
            meta.remove("name");
        }
    }
    mask_timestamps(&mut out);
    out
}

/// The launcher's flag whose value KubeVirt draws at random: `--qemu-timeout` is the
/// configured timeout plus a jitter of 0-119 s (template.go:101, 368-372).
const RANDOM_FLAG: &str = "--qemu-timeout";

fn mask_timestamps(v: &mut Value) {
    match v {
        Value::String(s) if is_timestamp(s) => *v = Value::String(TIMESTAMP.into()),
        Value::Array(items) => {
            for i in 1..items.len() {
                if items[i - 1] == RANDOM_FLAG {
                    items[i] = Value::String("<random>".into());
                }
            }
            items.iter_mut().for_each(mask_timestamps)
        }
        Value::Object(map) => map.values_mut().for_each(mask_timestamps),
        _ => {}
    }
}

fn is_timestamp(s: &str) -> bool {
    // metav1.Time and MicroTime serialise as RFC 3339 ("2026-12-01T08:44:43Z", with an
    // optional fraction and offset); a short check first keeps this cheap on other strings.
    s.len() >= 20
        && s.as_bytes().get(10) == Some(&b'T')
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

/// One path where two objects differ, with both values (absent: not set).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PathDiff {
    /// Dotted path (`status.conditions`); array elements are compared whole.
    pub path: String,
    /// Our value.
    pub ours: Option<Value>,
    /// The leading controller's value.
    pub theirs: Option<Value>,
}

/// The leaf paths at which `ours` and `theirs` differ, in key order. Arrays are compared as
/// whole values (a list element moved is one difference, at the list).
pub(crate) fn diff(ours: &Value, theirs: &Value) -> Vec<PathDiff> {
    let mut out = Vec::new();
    diff_at("", Some(ours), Some(theirs), &mut out);
    out
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn diff_at(prefix: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<PathDiff>) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                diff_at(&join(prefix, k), x.get(k), y.get(k), out);
            }
        }
        (a, b) if a != b => out.push(PathDiff {
            path: if prefix.is_empty() {
                ".".into()
            } else {
                prefix.into()
            },
            ours: a.cloned(),
            theirs: b.cloned(),
        }),
        _ => {}
    }
}

/// The outcome of comparing one write with one of our intended writes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Comparison {
    /// Agree, Differ or WeWouldWriteMore.
    pub verdict: Verdict,
    /// Where ours and theirs differ (empty on agreement).
    pub paths: Vec<PathDiff>,
}

/// Compare the object the leader's write left (`theirs`) with the one our write would leave
/// (`ours`), both applied to `before`. `None` objects after: a deletion. `before` `None`: a
/// creation, where the stored object also holds what the API server and admission default, so
/// only what ours sets is compared ([`contained`]).
pub(crate) fn compare(
    before: Option<&Value>,
    ours: Option<&Value>,
    theirs: Option<&Value>,
) -> Comparison {
    let norm = |v: Option<&Value>| v.map(normalise).unwrap_or(Value::Null);
    let creation = before.is_none();
    let (before, ours, theirs) = (norm(before), norm(ours), norm(theirs));
    let paths = if creation {
        // A created object as stored holds the API server's and admission's defaults beside
        // what the creator sent, and the two cannot be told apart: compare what ours sets.
        let mut out = Vec::new();
        subset_at("", &ours, &theirs, &mut out);
        out
    } else {
        diff(&ours, &theirs)
    };
    if paths.is_empty() {
        return Comparison {
            verdict: Verdict::Agree,
            paths,
        };
    }
    // More: every change the leader made, ours makes with the same value, and ours changes
    // further paths the leader left as they were.
    let theirs_changes = diff(&theirs, &before);
    let ours_changes = diff(&ours, &before);
    let more = ours.is_object()
        && theirs.is_object()
        && theirs_changes.iter().all(|t| ours_changes.contains(t))
        && paths.iter().all(|p| {
            theirs_changes.iter().all(|t| t.path != p.path)
                && before_value(&before, &p.path) == p.theirs
        });
    Comparison {
        verdict: if more {
            Verdict::WeWouldWriteMore
        } else {
            Verdict::Differ
        },
        paths,
    }
}

/// Is `ours` contained in `theirs`: every key of an object, every element of an array (the
/// element at the same index when the lengths match, else any element), every scalar equal?
fn contained(ours: &Value, theirs: &Value) -> bool {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => a
            .iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| contained(v, w))),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            a.iter().zip(b).all(|(x, y)| contained(x, y))
        }
        (Value::Array(a), Value::Array(b)) => a.iter().all(|x| b.iter().any(|y| contained(x, y))),
        (a, b) => a == b,
    }
}

/// The paths where `ours` sets something `theirs` does not hold (see [`contained`]).
fn subset_at(prefix: &str, ours: &Value, theirs: &Value, out: &mut Vec<PathDiff>) {
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => subset_at(&join(prefix, k), v, w, out),
                    None => out.push(PathDiff {
                        path: join(prefix, k),
                        ours: Some(v.clone()),
                        theirs: None,
                    }),
                }
            }
        }
        (a, b) if !contained(a, b) => out.push(PathDiff {
            path: if prefix.is_empty() {
                ".".into()
            } else {
                prefix.into()
            },
            ours: Some(a.clone()),
            theirs: Some(b.clone()),
        }),
        _ => {}
    }
}

fn before_value(before: &Value, path: &str) -> Option<Value> {
    let mut cur = before;
    for step in path.split('.') {
        cur = cur.get(step)?;
    }
    Some(cur.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn normalise_drops_server_metadata_generated_names_and_clock_values_only() {
        let pod = json!({"metadata": {"name": "virt-launcher-a-x7k2p", "generateName":
            "virt-launcher-a-", "uid": "1", "resourceVersion": "9", "managedFields": [],
            "creationTimestamp": "2026-12-01T08:44:43Z", "labels": {"kubevirt.io": "virt-launcher"}},
            "status": {"since": "2026-12-01T08:44:43.123456Z", "note": "2026-12-01"},
            "spec": {"containers": [{"command": ["x", "--qemu-timeout", "297s", "--name", "a"]}]}});
        assert_eq!(
            normalise(&pod),
            json!({"metadata": {"generateName": "virt-launcher-a-",
                "labels": {"kubevirt.io": "virt-launcher"}},
                "status": {"since": "<timestamp>", "note": "2026-12-01"},
                "spec": {"containers": [{"command": ["x", "--qemu-timeout", "<random>", "--name",
                    "a"]}]}})
        );
        // A name the client chose is kept.
        let vmi = json!({"metadata": {"name": "a", "uid": "u"}});
        assert_eq!(normalise(&vmi), json!({"metadata": {"name": "a"}}));
    }

    #[test]
    fn same_write_agrees_whatever_the_clock() {
        let before = json!({"metadata": {"name": "a"}, "status": {}});
        let ours = json!({"metadata": {"name": "a"}, "status": {"ready": true,
            "t": "2026-12-01T08:44:43Z"}});
        let theirs = json!({"metadata": {"name": "a", "resourceVersion": "5"}, "status":
            {"ready": true, "t": "2026-12-01T08:44:45Z"}});
        let c = compare(Some(&before), Some(&ours), Some(&theirs));
        assert_eq!(c.verdict, Verdict::Agree);
        assert!(c.paths.is_empty());
    }

    #[test]
    fn a_different_value_is_a_difference_at_its_path_with_both_values() {
        let before = json!({"status": {"phase": "Pending"}});
        let ours = json!({"status": {"phase": "Scheduling", "ready": false}});
        let theirs = json!({"status": {"phase": "Scheduled", "ready": false}});
        let c = compare(Some(&before), Some(&ours), Some(&theirs));
        assert_eq!(c.verdict, Verdict::Differ);
        assert_eq!(
            c.paths,
            vec![PathDiff {
                path: "status.phase".into(),
                ours: Some(json!("Scheduling")),
                theirs: Some(json!("Scheduled")),
            }]
        );
    }

    #[test]
    fn writing_everything_the_leader_wrote_and_more_is_more() {
        let before = json!({"status": {"phase": "Pending"}});
        let ours = json!({"status": {"phase": "Scheduling", "ready": false}});
        let theirs = json!({"status": {"phase": "Scheduling"}});
        let c = compare(Some(&before), Some(&ours), Some(&theirs));
        assert_eq!(c.verdict, Verdict::WeWouldWriteMore);
        assert_eq!(c.paths[0].path, "status.ready");
        // Fewer than the leader is a difference, not "more".
        let c = compare(Some(&before), Some(&theirs), Some(&ours));
        assert_eq!(c.verdict, Verdict::Differ);
    }

    #[test]
    fn a_creation_agrees_when_the_stored_object_holds_ours_plus_server_defaults() {
        let ours = json!({"metadata": {"generateName": "p-", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "x"}]}});
        let theirs = json!({"metadata": {"generateName": "p-", "name": "p-x1", "uid": "u",
            "labels": {"a": "1"}}, "spec": {"containers": [{"name": "c",
            "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst",
            "tolerations": [{"key": "y"}, {"key": "x"}]}, "status": {"phase": "Pending"}});
        assert_eq!(
            compare(None, Some(&ours), Some(&theirs)).verdict,
            Verdict::Agree
        );
        let mut other = theirs.clone();
        other["metadata"]["labels"]["a"] = json!("2");
        let c = compare(None, Some(&ours), Some(&other));
        assert_eq!(c.verdict, Verdict::Differ);
        assert_eq!(c.paths[0].path, "metadata.labels.a");
    }

    #[test]
    fn deletions_compare_as_absent_objects() {
        let before = json!({"metadata": {"name": "p"}});
        assert_eq!(compare(Some(&before), None, None).verdict, Verdict::Agree);
        let c = compare(Some(&before), Some(&before), None);
        assert_eq!(c.verdict, Verdict::Differ);
        assert_eq!(c.paths[0].path, ".");
    }
}
