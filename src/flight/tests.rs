use super::*;
use k8s_openapi::api::core::v1::Pod;
use std::sync::Arc as StdArc;

fn pod(name: &str, rv: &str, phase: &str) -> StdArc<Pod> {
    let mut p = Pod::default();
    p.metadata.name = Some(name.into());
    p.metadata.namespace = Some("ns".into());
    p.metadata.resource_version = Some(rv.into());
    p.status = Some(k8s_openapi::api::core::v1::PodStatus {
        phase: Some(phase.into()),
        ..Default::default()
    });
    StdArc::new(p)
}

fn watch_lines(lines: &[Line]) -> Vec<(u64, WatchOp, Option<Version>)> {
    lines
        .iter()
        .filter_map(|l| match &l.body {
            Body::Watch { op, version, .. } => Some((l.seq, *op, version.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn changes_are_patches_of_the_last_recorded_version() {
    let dir = tempfile::tempdir().unwrap();
    let rec = FlightRecorder::open(dir.path(), DEFAULT_MAX_BYTES, "me").unwrap();
    let (a, b) = (pod("p", "1", "Pending"), pod("p", "2", "Running"));
    rec.watch("Pod", &Notification::Add(a.clone()));
    rec.watch(
        "Pod",
        &Notification::Update {
            old: a,
            new: b.clone(),
        },
    );
    rec.watch(
        "Pod",
        &Notification::Delete {
            obj: b,
            relisted: false,
        },
    );
    rec.flush();
    let lines = read_recording(dir.path()).unwrap();
    assert!(matches!(&lines[0].body, Body::Header { identity, .. } if identity == "me"));
    let w = watch_lines(&lines);
    assert_eq!(
        w.iter().map(|(s, op, _)| (*s, *op)).collect::<Vec<_>>(),
        [
            (2, WatchOp::Add),
            (3, WatchOp::Update),
            (4, WatchOp::Delete)
        ]
    );
    let first = w[0].2.as_ref().unwrap().resolve(None).unwrap();
    let second = w[1].2.as_ref().unwrap();
    assert!(second.object.is_none() && second.from_rv.as_deref() == Some("1"));
    let rebuilt = second.resolve(Some(&first)).unwrap();
    assert_eq!(rebuilt["status"]["phase"], "Running");
    assert!(w[2].2.is_none());
}

#[test]
fn a_new_segment_begins_with_the_objects_as_they_are() {
    let dir = tempfile::tempdir().unwrap();
    // Four segments of 1 KiB.
    let rec = FlightRecorder::open(dir.path(), 4096, "me").unwrap();
    let mut old = pod("p", "1", "Pending");
    rec.watch("Pod", &Notification::Add(old.clone()));
    rec.watch("Pod", &Notification::Add(pod("q", "1", "Running")));
    for rv in 2..200 {
        let new = pod(
            "p",
            &rv.to_string(),
            if rv % 2 == 0 { "Running" } else { "Pending" },
        );
        rec.watch(
            "Pod",
            &Notification::Update {
                old,
                new: new.clone(),
            },
        );
        old = new;
    }
    rec.flush();
    let segments = ring::segments(dir.path()).unwrap();
    assert_eq!(segments.len(), SEGMENTS, "{segments:?}");
    let total: u64 = segments
        .iter()
        .map(|(_, p)| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(total <= 4096 + 4 * 1024, "{total} bytes");
    // The oldest segment kept still rebuilds both pods: its snapshot holds them.
    let first = read_recording(&segments[0].1).unwrap();
    let snap: Vec<&ObjectId> = first
        .iter()
        .filter_map(|l| match &l.body {
            Body::Snapshot { id, .. } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(
        snap.iter().map(|id| id.key.as_str()).collect::<Vec<_>>(),
        ["ns/p", "ns/q"]
    );
    // Sequence numbers go on across segments.
    let all = read_recording(dir.path()).unwrap();
    assert!(all.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert_eq!(all.last().unwrap().seq, rec.position());
}

#[test]
fn a_truncated_last_line_is_left_out_and_a_foreign_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let rec = FlightRecorder::open(dir.path(), DEFAULT_MAX_BYTES, "me").unwrap();
    rec.watch("Pod", &Notification::Add(pod("p", "1", "Pending")));
    rec.flush();
    let (_, path) = ring::segments(dir.path()).unwrap().remove(0);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(r#"{"seq":3,"at":"#);
    std::fs::write(&path, &text).unwrap();
    assert_eq!(read_recording(&path).unwrap().len(), 2);
    let other = dir.path().join("other.jsonl");
    std::fs::write(&other, "{\"seq\":1,\"at\":\"2026-01-01T00:00:00Z\",\"type\":\"header\",\"format\":\"x/v9\",\"identity\":\"i\",\"segment\":1}\n").unwrap();
    let err = read_recording(&other).unwrap_err().to_string();
    assert!(
        err.contains("other.jsonl:1") && err.contains("x/v9"),
        "{err}"
    );
}
