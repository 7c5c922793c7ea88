use super::*;
use crate::inspect::model::{QueueView, StartFailureView};
use crate::inspect::tui::fixtures;
use chrono::Duration;

fn fleet_at(seconds: i64, depth: u64, adds_total: Option<u64>) -> Fleet {
    Fleet {
        generated_at: fixtures::now() + Duration::seconds(seconds),
        queues: vec![QueueView {
            name: "virt-controller-vm".into(),
            depth,
            adds_total,
            ..Default::default()
        }],
        lease: fixtures::running_ours().lease,
        ..Default::default()
    }
}

#[test]
fn memory_is_bounded_to_the_last_samples() {
    let mut h = History::default();
    for s in 0..(SAMPLES_KEPT as i64 + 100) {
        h.record_fleet(&fleet_at(s, s as u64, None));
    }
    assert_eq!(h.samples().len(), SAMPLES_KEPT);
    assert_eq!(h.samples()[0].queues["virt-controller-vm"].depth, 100);
}

#[test]
fn adds_are_the_difference_between_samples_and_a_new_term_counts_from_zero() {
    let mut h = History::default();
    for (s, total) in [(0, 5), (1, 8), (2, 8), (3, 2)] {
        h.record_fleet(&fleet_at(s, 0, Some(total)));
    }
    let adds: Vec<Option<u64>> = h
        .samples()
        .iter()
        .map(|s| s.queues["virt-controller-vm"].adds)
        .collect();
    assert_eq!(adds, [None, Some(3), Some(0), Some(2)]);
}

#[test]
fn gathers_within_half_a_second_merge_into_one_sample() {
    let mut h = History::default();
    h.record_fleet(&fleet_at(0, 1, Some(1)));
    h.record_fleet(&fleet_at(1, 2, Some(4)));
    let mut quick = fleet_at(1, 7, Some(6));
    quick.generated_at += Duration::milliseconds(300);
    h.record_fleet(&quick);
    assert_eq!(h.samples().len(), 2);
    let last = &h.samples()[1].queues["virt-controller-vm"];
    assert_eq!((last.depth, last.adds), (7, Some(5)));
}

#[test]
fn a_handover_and_a_leaderless_gap_are_marked() {
    let mut h = History::default();
    for insp in fixtures::lease_handover() {
        h.record_vm(&insp);
    }
    let marks: Vec<LeaseMark> = h.samples().iter().map(|s| s.lease).collect();
    assert_eq!(marks.len(), 61);
    assert!(marks[..30].iter().all(|m| *m == LeaseMark::Held));
    assert!(marks[30..35].iter().all(|m| *m == LeaseMark::Leaderless));
    assert_eq!(marks[35], LeaseMark::Handover, "the new holder takes over");
    assert!(marks[36..].iter().all(|m| *m == LeaseMark::Held));
}

#[test]
fn reconciles_count_new_records_after_the_first_gather() {
    let mut h = History::default();
    for insp in fixtures::lease_handover() {
        h.record_vm(&insp);
    }
    let counts: Vec<u64> = h.samples().iter().filter_map(|s| s.reconciles).collect();
    assert_eq!(counts.len(), 61);
    assert_eq!(
        counts[0], 0,
        "the first gather's record is older than the inspector"
    );
    // The fixture's record moves every five seconds.
    assert_eq!(counts.iter().sum::<u64>(), 12);
}

#[test]
fn another_vm_drops_the_key_parts_and_keeps_the_controllers() {
    let mut h = History::default();
    for insp in fixtures::three_restarts() {
        h.record_vm(&insp);
    }
    assert_eq!(h.runs().len(), 4);
    let other = crate::inspect::model::Inspection {
        name: "other".into(),
        generated_at: fixtures::now() + Duration::seconds(1),
        ..fixtures::running_ours()
    };
    h.record_vm(&other);
    assert_eq!(h.samples().len(), fixtures::three_restarts().len() + 1);
    assert!(
        h.samples()
            .iter()
            .rev()
            .skip(1)
            .all(|s| s.reconciles.is_none() && s.queues.values().all(|q| q.retries.is_none()))
    );
    assert_eq!(h.runs().len(), 1, "only the other VM's VMI");
    assert!(h.backoffs().is_empty());
}

#[test]
fn each_vmi_is_a_run_and_each_backoff_is_kept_once() {
    let mut h = History::default();
    let gathers = fixtures::three_restarts();
    for insp in &gathers {
        h.record_vm(insp);
        // The same gather again changes nothing.
        h.record_vm(insp);
    }
    let uids: Vec<&str> = h.runs().iter().map(|r| r.uid.as_str()).collect();
    assert_eq!(uids, ["r1", "r2", "r3", "r4"]);
    assert_eq!(h.current_run(), Some("r4"));
    assert_eq!(
        h.runs()[0].transitions.last().map(|t| t.phase.as_str()),
        Some("Failed")
    );
    let b: Vec<(i64, i64, i64)> = h
        .backoffs()
        .iter()
        .map(|b| {
            (
                (fixtures::now() - b.from).num_seconds(),
                (fixtures::now() - b.until).num_seconds(),
                b.failures,
            )
        })
        .collect();
    // From each failure to the next start.
    assert_eq!(b, [(250, 230, 1), (195, 175, 2), (150, 100, 3)]);
}

#[test]
fn a_backoff_without_a_failed_vmi_starts_at_the_gather() {
    let mut h = History::default();
    let mut insp = fixtures::crash_loop();
    insp.vm.as_mut().unwrap().start_failure = Some(StartFailureView {
        consecutive_fail_count: 1,
        retry_after: Some(fixtures::now() + Duration::seconds(10)),
        retry_in_seconds: Some(10.0),
    });
    h.record_vm(&insp);
    assert_eq!(h.backoffs()[0].from, fixtures::now());
    assert_eq!(h.current_run(), None, "no VMI now");
}
