use super::*;

fn at(seconds: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
}

fn vmi(name: &str, resource_version: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachineInstance".into()),
        namespace: Some("prod".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        resource_version: Some(resource_version.into()),
        field_path: None,
    }
}

fn event(type_: &'static str, reason: &str, message: &str) -> Event {
    Event {
        type_,
        reason: reason.into(),
        message: message.into(),
    }
}

fn written(c: Correlated) -> Occurrence {
    match c {
        Correlated::Write(o) => o,
        Correlated::Skip => panic!("filtered as spam"),
    }
}

/// A first occurrence is a new Event named `<object>.<nanoseconds in hex>`, count 1; the same
/// event again (about a newer resourceVersion of the object: client-go's keys do not compare
/// it) counts on the same Event, keeping its name and first timestamp.
#[test]
fn a_repeat_counts_on_the_first_event_whatever_the_objects_version() {
    let mut c = Correlator::default();
    let e = event(
        "Normal",
        "SuccessfulCreate",
        "Created virtual machine pod p-1",
    );
    let first = written(c.correlate(&e, &vmi("vm-1", "7"), at(0)));
    assert_eq!(
        first,
        Occurrence {
            name: format!("vm-1.{:x}", at(0).as_nanosecond()),
            message: e.message.clone(),
            first: at(0),
            last: at(0),
            count: 1,
            combined: false,
        }
    );
    let second = written(c.correlate(&e, &vmi("vm-1", "9"), at(40)));
    assert_eq!(
        second,
        Occurrence {
            last: at(40),
            count: 2,
            ..first.clone()
        }
    );
    // Another message, object, type or field path is another Event.
    let other = written(c.correlate(
        &event(
            "Normal",
            "SuccessfulCreate",
            "Created virtual machine pod p-2",
        ),
        &vmi("vm-1", "9"),
        at(41),
    ));
    assert_eq!((other.count, other.name == first.name), (1, false));
    let in_field = ObjectReference {
        field_path: Some("spec".into()),
        ..vmi("vm-1", "9")
    };
    assert_eq!(written(c.correlate(&e, &in_field, at(42))).count, 1);
    assert_eq!(c.cached(), 3);
}

/// The tenth distinct message of one object, type and reason within ten minutes becomes the
/// combined Event, which the following ones count on with the latest message.
#[test]
fn ten_similar_events_in_ten_minutes_become_one_combined_event() {
    let mut c = Correlator::default();
    let object = vmi("vm-1", "1");
    for i in 0..9 {
        let o = written(c.correlate(
            &event("Warning", "FailedCreate", &format!("attempt {i}")),
            &object,
            at(i * 60),
        ));
        assert_eq!((o.count, o.combined), (1, false), "attempt {i}");
    }
    let tenth = written(c.correlate(
        &event("Warning", "FailedCreate", "attempt 9"),
        &object,
        at(540),
    ));
    assert_eq!(
        tenth,
        Occurrence {
            name: format!("vm-1.{:x}", at(540).as_nanosecond()),
            message: "(combined from similar events): attempt 9".into(),
            first: at(540),
            last: at(540),
            count: 1,
            combined: true,
        }
    );
    let eleventh = written(c.correlate(
        &event("Warning", "FailedCreate", "attempt 10"),
        &object,
        at(600),
    ));
    assert_eq!(
        eleventh,
        Occurrence {
            message: "(combined from similar events): attempt 10".into(),
            last: at(600),
            count: 2,
            ..tenth
        }
    );
    // Another reason is not combined with them.
    let other = written(c.correlate(
        &event("Warning", "FailedDelete", "attempt 0"),
        &object,
        at(601),
    ));
    assert!(!other.combined);
}

/// More than ten minutes after the last similar event the distinct messages count from zero.
#[test]
fn aggregation_starts_over_after_ten_quiet_minutes() {
    let mut c = Correlator::default();
    let object = vmi("vm-1", "1");
    for i in 0..9 {
        c.correlate(
            &event("Warning", "FailedCreate", &format!("a{i}")),
            &object,
            at(i),
        );
    }
    let after = written(c.correlate(
        &event("Warning", "FailedCreate", "a9"),
        &object,
        at(8 + 601),
    ));
    assert!(!after.combined, "{after:?}");
}

/// 25 events about an object pass at once; the 26th is dropped; a token comes back every five
/// minutes. The bucket is per object and type, and a dropped event still counts.
#[test]
fn the_spam_filter_allows_a_burst_of_25_then_one_per_five_minutes() {
    let mut c = Correlator::default();
    let object = vmi("vm-1", "1");
    let e = event("Normal", "SuccessfulCreate", "same");
    for i in 0..25 {
        assert!(
            matches!(c.correlate(&e, &object, at(0)), Correlated::Write(_)),
            "event {i}"
        );
    }
    assert_eq!(c.correlate(&e, &object, at(0)), Correlated::Skip);
    assert_eq!(c.correlate(&e, &object, at(299)), Correlated::Skip);
    // A Warning about the same object has its own bucket.
    assert!(matches!(
        c.correlate(&event("Warning", "X", "y"), &object, at(299)),
        Correlated::Write(_)
    ));
    let refilled = written(c.correlate(&e, &object, at(300)));
    assert_eq!(
        refilled.count, 28,
        "the two dropped occurrences are counted"
    );
    assert_eq!(c.correlate(&e, &object, at(301)), Correlated::Skip);
    // Another object is not affected.
    assert!(matches!(
        c.correlate(&e, &vmi("vm-2", "1"), at(301)),
        Correlated::Write(_)
    ));
}

/// Each cache keeps at most 4,096 entries, dropping the least recently used.
#[test]
fn at_most_4096_events_are_remembered_and_the_least_recently_used_go_first() {
    let mut c = Correlator::default();
    let e = event("Normal", "SuccessfulCreate", "m");
    for i in 0..MAX_CACHED_EVENTS {
        c.correlate(&e, &vmi(&format!("vm-{i}"), "1"), at(0));
    }
    // Touch the oldest: vm-1 is now the least recently used.
    assert_eq!(written(c.correlate(&e, &vmi("vm-0", "1"), at(1))).count, 2);
    c.correlate(&e, &vmi("vm-new", "1"), at(2));
    assert_eq!(c.cached(), MAX_CACHED_EVENTS);
    assert_eq!(c.aggregates.len(), MAX_CACHED_EVENTS);
    assert_eq!(c.spam.len(), MAX_CACHED_EVENTS);
    assert_eq!(written(c.correlate(&e, &vmi("vm-0", "1"), at(3))).count, 3);
    assert_eq!(
        written(c.correlate(&e, &vmi("vm-1", "1"), at(3))).count,
        1,
        "forgotten: a new Event"
    );
}

/// An object name that makes no valid Event name gets a UUID (client-go's
/// `GenerateEventName`).
#[test]
fn an_invalid_event_name_falls_back_to_a_uuid() {
    assert_eq!(
        event_name("vm-1", at(0)),
        format!("vm-1.{:x}", at(0).as_nanosecond())
    );
    let long = "a".repeat(240);
    assert!(uuid::Uuid::parse_str(&event_name(&long, at(0))).is_ok());
    assert!(uuid::Uuid::parse_str(&event_name("Upper", at(0))).is_ok());
}

/// The Event created and the patch of a repeat are client-go's, field for field.
#[tokio::test]
async fn the_written_event_and_the_repeat_patch_are_client_gos() {
    let config = kube::Config::new("http://127.0.0.1:1".parse().expect("URL"));
    let recorder = Recorder::new(
        kube::Client::try_from(config).expect("client"),
        COMPONENT.into(),
    );
    let e = event(
        "Warning",
        "FailedCreate",
        "Error creating pod: quota exceeded",
    );
    let object = ObjectReference {
        field_path: Some("spec".into()),
        ..vmi("vm-1", "41")
    };
    let o = Occurrence {
        name: "vm-1.abc".into(),
        message: e.message.clone(),
        first: at(0),
        last: at(30),
        count: 2,
        combined: false,
    };
    let json = serde_json::to_value(recorder.event(&e, &object, &o)).expect("json");
    assert_eq!(
        json,
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "vm-1.abc", "namespace": "prod"},
            "involvedObject": {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "namespace": "prod", "name": "vm-1", "uid": "uid-vm-1",
                "resourceVersion": "41", "fieldPath": "spec"
            },
            "reason": "FailedCreate",
            "message": "Error creating pod: quota exceeded",
            "source": {"component": "virtualmachine-controller"},
            "firstTimestamp": "2027-01-15T08:00:00Z",
            "lastTimestamp": "2027-01-15T08:00:30Z",
            "count": 2,
            "type": "Warning",
            "reportingComponent": "virtualmachine-controller",
            "reportingInstance": ""
        })
    );
    assert_eq!(
        repeat_patch(&o),
        serde_json::json!({
            "count": 2,
            "lastTimestamp": "2027-01-15T08:00:30Z",
            "message": "Error creating pod: quota exceeded"
        })
    );
    // A combined Event carries no reporting component (events_cache.go:278-290).
    let combined = recorder.event(
        &e,
        &object,
        &Occurrence {
            combined: true,
            ..o
        },
    );
    assert_eq!(combined.reporting_component.as_deref(), Some(""));
    assert_eq!(
        combined.source.and_then(|s| s.component).as_deref(),
        Some(COMPONENT)
    );
}

/// An Event published later than it was recorded (its publisher's queue was behind) carries
/// the recording's time in its name and timestamps, as client-go's `makeEvent` stamps it
/// before its broadcaster gets to it; a repeat keeps the first recording's first timestamp.
/// Stamped at publication, a VM controller's `SuccessfulDelete` published under load came a
/// second after virt-handler's `Stopped` for the same VMI, and `why` read a user's stop as a
/// guest shutdown.
#[test]
fn an_event_keeps_the_time_it_was_recorded_at() {
    let mut c = Correlator::default();
    let e = event("Normal", "SuccessfulDelete", "Stopped the virtual machine");
    let first = written(c.correlate_recorded(&e, &vmi("vm-1", "7"), at(0), at(3)));
    assert_eq!(first.name, format!("vm-1.{:x}", at(0).as_nanosecond()));
    assert_eq!((first.first, first.last), (at(0), at(0)));
    let again = written(c.correlate_recorded(&e, &vmi("vm-1", "8"), at(10), at(12)));
    assert_eq!((again.first, again.last, again.count), (at(0), at(10), 2));
}
