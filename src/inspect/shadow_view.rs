//! `inspect vm/NAME --shadow FILE`: what a running shadow says about this VM. The shadow
//! (`shadow --verdicts FILE`, or `run-controller --shadow --verdicts FILE`) publishes its
//! per-VM verdicts to a local file; `inspect` reads this VM's entry at each gather and says
//! whether the leader's last writes agreed with our decisions. Nothing is written to the
//! cluster by either (docs/shadow.md, "What inspect shows").

use super::model::{Inspection, Missing, ShadowView};
use crate::shadow::{STALE_AFTER_SECONDS, ShadowVerdicts};
use chrono::{DateTime, Utc};
use std::path::Path;

/// Read `path` and set `insp.shadow` for the inspected VM; a file that cannot be read is
/// listed in `missing` (`shadow`) and the rest of the inspection stands.
pub(crate) fn attach(insp: &mut Inspection, path: &Path) {
    match ShadowVerdicts::read(path) {
        Ok(doc) => {
            let key = format!("{}/{}", insp.namespace, insp.name);
            let source = path.display().to_string();
            insp.shadow = Some(view(&doc, &key, &source, insp.generated_at));
        }
        Err(reason) => insp.missing.push(Missing {
            what: "shadow".into(),
            reason,
        }),
    }
}

/// The VM `key`'s entry of `doc` as the inspection shows it, at `now`.
pub(crate) fn view(
    doc: &ShadowVerdicts,
    key: &str,
    source: &str,
    now: DateTime<Utc>,
) -> ShadowView {
    let age_seconds = ((now - doc.written_at).num_milliseconds() as f64 / 1000.0).max(0.0);
    let stale = age_seconds > STALE_AFTER_SECONDS;
    let entry = doc.vms.get(key).cloned().unwrap_or_default();
    let since = doc.since.format("%H:%M:%S");
    let last_agreed =
        (!entry.last.is_empty()).then(|| entry.last.iter().all(|v| v.verdict.agrees()));
    let n = entry.last.len();
    let mut summary = match last_agreed {
        None => format!("no write of the leader to this VM compared since {since}"),
        Some(true) => format!(
            "agreed with the leader's last {n} write{} ({} of {} since {since})",
            if n == 1 { "" } else { "s" },
            entry.agreed,
            entry.decisions
        ),
        Some(false) => {
            let differing = entry.last.iter().filter(|v| !v.verdict.agrees()).count();
            format!(
                "DIFFERS on {differing} of the leader's last {n} write{} ({} of {} agreed since {since})",
                if n == 1 { "" } else { "s" },
                entry.agreed,
                entry.decisions
            )
        }
    };
    if let Some(d) = entry
        .last_difference
        .as_ref()
        .filter(|d| !entry.last.contains(d))
    {
        summary.push_str(&format!("; the last difference: {}", verdict_line(d)));
    }
    if stale {
        summary.push_str(&format!(
            "; the file is {} old: the shadow has probably stopped",
            super::model::human_duration(age_seconds)
        ));
    }
    ShadowView {
        source: source.to_string(),
        written_at: doc.written_at,
        age_seconds,
        stale,
        since: doc.since,
        decisions: entry.decisions,
        agreed: entry.agreed,
        last_agreed,
        last: entry.last,
        last_difference: entry.last_difference,
        summary,
    }
}

/// One classified write as a line: `10:00:01 VirtualMachineInstance demo/vm-a differ
/// (CreateVmi): metadata.labels.team`.
pub(crate) fn verdict_line(v: &crate::shadow::LastVerdict) -> String {
    let mut line = format!(
        "{} {} {} {}",
        v.seen.format("%H:%M:%S"),
        v.kind,
        v.key,
        v.verdict.as_str()
    );
    if let Some(a) = &v.action {
        line.push_str(&format!(" ({a})"));
    }
    if !v.paths.is_empty() {
        line.push_str(": ");
        line.push_str(&v.paths.join(", "));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::{LastVerdict, Verdict, VmVerdicts};
    use std::collections::BTreeMap;

    fn at(second: i64) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp(1_796_119_200 + second, 0).expect("time")
    }

    fn verdict(
        second: i64,
        kind: &str,
        action: &str,
        verdict: Verdict,
        paths: &[&str],
    ) -> LastVerdict {
        LastVerdict {
            seen: at(second),
            kind: kind.into(),
            key: "demo/vm-a".into(),
            part: "main".into(),
            action: Some(action.into()),
            verdict,
            paths: paths.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// A document in which the leader's VMI creation for `demo/vm-a` differed from ours.
    fn differing() -> ShadowVerdicts {
        let last = vec![
            verdict(
                1,
                "ControllerRevision",
                "CreateControllerRevision",
                Verdict::Agree,
                &[],
            ),
            verdict(
                1,
                "VirtualMachineInstance",
                "CreateVmi",
                Verdict::Differ,
                &["metadata.labels.team"],
            ),
            verdict(
                2,
                "VirtualMachine",
                "UpdateVmStatus",
                Verdict::AgreeLater,
                &[],
            ),
        ];
        ShadowVerdicts {
            written_at: at(5),
            since: at(0),
            vms: BTreeMap::from([(
                "demo/vm-a".to_string(),
                VmVerdicts {
                    decisions: 3,
                    agreed: 2,
                    last_difference: Some(last[1].clone()),
                    last,
                },
            )]),
        }
    }

    #[test]
    fn the_view_says_whether_the_last_writes_agreed_and_when_the_shadow_stopped() {
        let doc = differing();
        let v = view(&doc, "demo/vm-a", "v.json", at(7));
        assert_eq!(v.last_agreed, Some(false));
        assert!(!v.stale);
        assert_eq!(
            v.summary,
            "DIFFERS on 1 of the leader's last 3 writes (2 of 3 agreed since 10:00:00)"
        );
        let none = view(&doc, "demo/vm-b", "v.json", at(7));
        assert_eq!(none.last_agreed, None);
        assert_eq!(none.decisions, 0);
        assert_eq!(
            none.summary,
            "no write of the leader to this VM compared since 10:00:00"
        );
        let old = view(&doc, "demo/vm-b", "v.json", at(125));
        assert!(old.stale);
        assert!(
            old.summary
                .ends_with("the file is 2 m 0 s old: the shadow has probably stopped"),
            "{}",
            old.summary
        );
    }

    #[test]
    fn an_unreadable_file_is_missing_and_the_inspection_stands() {
        let mut insp = Inspection {
            namespace: "demo".into(),
            name: "vm-a".into(),
            ..Default::default()
        };
        attach(&mut insp, Path::new("/nonexistent/verdicts.json"));
        assert!(insp.shadow.is_none());
        assert_eq!(insp.missing[0].what, "shadow");
        assert!(
            insp.missing[0]
                .reason
                .contains("/nonexistent/verdicts.json")
        );
    }

    /// The `--once` text has a SHADOW section after LEADER (docs/shadow.md shows it).
    #[test]
    fn the_text_shows_the_shadows_verdicts_after_the_leader() {
        let text =
            crate::inspect::text::render_vm(&crate::inspect::tui::fixtures::shadow_differs());
        let expected = "\nSHADOW (/tmp/shadow-verdicts.json, written 2 s ago)
  DIFFERS on 1 of the leader's last 3 writes (8 of 9 agreed since 00:32:40)
  00:42:00 ControllerRevision default/revision-start-vm-1 agree (CreateControllerRevision)
  00:42:00 VirtualMachineInstance default/vm-cirros differ (CreateVmi): metadata.labels.team
  00:42:01 VirtualMachine default/vm-cirros agree-later (UpdateVmStatus)
\nQUEUES";
        assert!(text.contains(expected), "{text}");
    }
}
