//! Watch streams: newline-delimited `{"type": ..., "object": ...}` JSON over a chunked HTTP
//! body, as `k8s.io/apiserver/pkg/endpoints/handlers/watch.go` writes them.
//!
//! Selector filtering follows the watch cache (`cacher.go`): a `MODIFIED` object that starts
//! matching is sent as `ADDED`, one that stops matching as `DELETED`. `BOOKMARK` events carry
//! only `kind`, `apiVersion` and `metadata.resourceVersion` (plus the
//! `k8s.io/initial-events-end` annotation that ends a streaming list).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::selector::Filter;
use super::store::{Event, EventKind, Store};

/// Per-request watch settings.
#[derive(Debug, Clone)]
pub(crate) struct WatchOptions {
    /// Label + field selector.
    pub filter: Filter,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// Send the `initial-events-end` bookmark after the initial events (`sendInitialEvents`).
    pub initial_events_end: bool,
    /// Close the stream after this long (`timeoutSeconds`).
    pub timeout: Duration,
    /// Period of `BOOKMARK` events.
    pub bookmark_interval: Duration,
    /// Fault: close after this many delivered events.
    pub drop_after: Option<u64>,
    /// Fault: deliver each event this long after its commit.
    pub delay: Duration,
    /// Fault: end with `410 Expired` instead of sending a `DELETED` event (a tombstone
    /// deletion, [`super::faults::FaultAction::TombstoneDeletes`]).
    pub tombstone_deletes: bool,
    /// Fault: skip these events, `(nth, kind)` ([`super::faults::FaultAction::DropEvent`]).
    pub drop_events: Vec<(u64, Option<EventKind>)>,
    /// `kind` for bookmarks.
    pub kind: String,
    /// `apiVersion` for bookmarks.
    pub api_version: String,
    /// Served definition when the resource is an alias of another's storage (objects are
    /// converted with `sim::convert::from_storage` before they are sent).
    pub convert: Option<super::resources::ResourceDef>,
    /// Send each object as a one-row `Table` (`kubectl get -w`): (resource, Table apiVersion,
    /// includeObject).
    pub table: Option<(
        super::resources::ResourceDef,
        &'static str,
        super::table::IncludeObject,
    )>,
}

enum Out {
    Event(Arc<Event>),
    Bookmark { rv: u64, initial_end: bool },
}

struct State {
    store: Arc<Store>,
    opts: WatchOptions,
    pending: VecDeque<Out>,
    rx: mpsc::UnboundedReceiver<Arc<Event>>,
    deadline: Instant,
    next_bookmark: Instant,
    drop_rx: watch::Receiver<u64>,
    sent: u64,
    /// Events the stream would have sent (dropped ones included): all, and per kind
    /// (ADDED, MODIFIED, DELETED), for the dropped-event fault.
    offered: u64,
    offered_by_kind: [u64; 3],
    last_rv: u64,
    done: bool,
}

impl State {
    /// Count an event about to be sent; `true` when the dropped-event fault skips it.
    fn skips(&mut self, kind: EventKind) -> bool {
        let k = match kind {
            EventKind::Added => 0,
            EventKind::Modified => 1,
            EventKind::Deleted => 2,
        };
        self.offered += 1;
        self.offered_by_kind[k] += 1;
        let (all, of_kind) = (self.offered, self.offered_by_kind[k]);
        self.opts.drop_events.iter().any(|(nth, only)| match only {
            None => *nth == all,
            Some(only) => *only == kind && *nth == of_kind,
        })
    }
}

/// The kind of the event as this watch sends it, or `None` when the filter hides it.
fn sent_kind(ev: &Event, filter: &Filter) -> Option<EventKind> {
    if filter.is_empty() {
        return Some(ev.kind);
    }
    let now = filter.matches_stored(&ev.object);
    match ev.kind {
        EventKind::Added | EventKind::Deleted => now.then_some(ev.kind),
        EventKind::Modified => {
            let before = ev.prev.as_deref().is_some_and(|p| filter.matches_stored(p));
            match (before, now) {
                (true, true) => Some(EventKind::Modified),
                (false, true) => Some(EventKind::Added),
                (true, false) => Some(EventKind::Deleted),
                (false, false) => None,
            }
        }
    }
}

/// One serialized line for an event sent as `kind`.
fn render(ev: &Event, kind: EventKind, opts: &WatchOptions) -> Option<Bytes> {
    if opts.convert.is_none() && opts.table.is_none() {
        // The common case: the bytes serialised at commit, shared by every watcher.
        return Some(line_raw(kind.as_str(), ev.object_json()));
    }
    let stored = ev.object_value();
    let served = opts
        .convert
        .as_ref()
        .and_then(|d| super::convert::from_storage(d, &stored));
    let obj = served.as_ref().unwrap_or(&stored);
    match &opts.table {
        Some((def, version, include)) => {
            let rv = super::object::resource_version(obj).to_string();
            let t = super::table::table(def, version, &[obj], Some(rv), None, *include);
            line(kind.as_str(), &t)
        }
        None if served.is_none() => Some(line_raw(kind.as_str(), ev.object_json())),
        None => line(kind.as_str(), obj),
    }
}

/// `{"type":"X","object":<json>}\n` from an already serialised object.
fn line_raw(kind: &str, body: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(body.len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(body);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn line(kind: &str, obj: &Value) -> Option<Bytes> {
    // {"type":"X","object":...}\n without building an intermediate Value.
    let body = serde_json::to_vec(obj).ok()?;
    Some(line_raw(kind, &body))
}

/// A `BOOKMARK` line.
pub(crate) fn bookmark_line(kind: &str, api_version: &str, rv: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": kind, "apiVersion": api_version, "metadata": meta});
    line("BOOKMARK", &obj).unwrap_or_default()
}

/// An `ERROR` line carrying a `Status`.
pub(crate) fn error_line(status: &Value) -> Bytes {
    line("ERROR", status).unwrap_or_default()
}

/// Build the body stream of a watch.
pub(crate) fn stream(
    store: Arc<Store>,
    initial: Vec<Arc<Event>>,
    start_rv: u64,
    rx: mpsc::UnboundedReceiver<Arc<Event>>,
    drop_rx: watch::Receiver<u64>,
    opts: WatchOptions,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> + Send + 'static {
    let now = Instant::now();
    let mut pending: VecDeque<Out> = initial.into_iter().map(Out::Event).collect();
    if opts.initial_events_end {
        pending.push_back(Out::Bookmark {
            rv: start_rv,
            initial_end: true,
        });
    }
    let state = State {
        store,
        deadline: now + opts.timeout,
        next_bookmark: now + opts.bookmark_interval,
        opts,
        pending,
        rx,
        drop_rx,
        sent: 0,
        offered: 0,
        offered_by_kind: [0; 3],
        last_rv: start_rv,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            if st.opts.drop_after.is_some_and(|n| st.sent >= n) && st.pending.is_empty() {
                return None;
            }
            if let Some(front) = st.pending.front() {
                // Delayed delivery: wait until the event is old enough.
                if let Out::Event(ev) = front
                    && !st.opts.delay.is_zero()
                {
                    let due = Instant::from_std(ev.at) + st.opts.delay;
                    if due > Instant::now() {
                        tokio::select! {
                            _ = tokio::time::sleep_until(due) => {}
                            _ = tokio::time::sleep_until(st.deadline) => return None,
                            r = st.drop_rx.changed() => { if r.is_ok() { return None; } }
                        }
                    }
                }
                let Some(out) = st.pending.pop_front() else {
                    continue;
                };
                match out {
                    Out::Event(ev) => {
                        let before = st.last_rv;
                        st.last_rv = st.last_rv.max(ev.rv);
                        let Some(kind) = sent_kind(&ev, &st.opts.filter) else {
                            continue;
                        };
                        if kind == EventKind::Deleted && st.opts.tombstone_deletes {
                            // The DELETED never reaches this client: its window is gone.
                            st.done = true;
                            let e = super::status::ApiError::expired(format!(
                                "too old resource version: {before} ({})",
                                ev.rv
                            ));
                            return Some((Ok(error_line(&e.to_status())), st));
                        }
                        if st.skips(kind) {
                            continue;
                        }
                        if let Some(b) = render(&ev, kind, &st.opts) {
                            st.sent += 1;
                            if st.opts.drop_after.is_some_and(|n| st.sent > n) {
                                return None;
                            }
                            return Some((Ok(b), st));
                        }
                    }
                    Out::Bookmark { rv, initial_end } => {
                        let b = bookmark_line(&st.opts.kind, &st.opts.api_version, rv, initial_end);
                        return Some((Ok(b), st));
                    }
                }
                continue;
            }
            let bookmark_at = if st.opts.bookmarks {
                st.next_bookmark
            } else {
                st.deadline + Duration::from_secs(3600)
            };
            tokio::select! {
                ev = st.rx.recv() => match ev {
                    Some(ev) => st.pending.push_back(Out::Event(ev)),
                    None => return None,
                },
                _ = tokio::time::sleep_until(bookmark_at) => {
                    st.next_bookmark = Instant::now() + st.opts.bookmark_interval;
                    // Everything committed up to `g` is already in our channel.
                    let g = st.store.current_rv();
                    let mut max_rv = st.last_rv;
                    while let Ok(ev) = st.rx.try_recv() {
                        max_rv = max_rv.max(ev.rv);
                        st.pending.push_back(Out::Event(ev));
                    }
                    st.pending.push_back(Out::Bookmark { rv: g.max(max_rv), initial_end: false });
                }
                _ = tokio::time::sleep_until(st.deadline) => {
                    st.done = true;
                }
                r = st.drop_rx.changed() => {
                    if r.is_ok() {
                        return None;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::selector::LabelSelector;
    use crate::sim::stored::Stored;
    use std::time::Instant as StdInstant;

    fn ev(kind: EventKind, labels: Value, prev: Option<Value>) -> Event {
        Event {
            rv: 5,
            kind,
            ns: String::new(),
            object: Stored::encode(&json!({"metadata": {"name": "a", "labels": labels}})),
            prev: prev.map(|p| Stored::encode(&json!({"metadata": {"name": "a", "labels": p}}))),
            at: StdInstant::now(),
        }
    }

    fn kind_of(b: &Bytes) -> String {
        let v: Value = serde_json::from_slice(b).unwrap();
        v["type"].as_str().unwrap().to_string()
    }

    #[test]
    fn selector_transitions() {
        let f = WatchOptions {
            filter: Filter {
                labels: LabelSelector::parse("app=x").unwrap(),
                ..Default::default()
            },
            bookmarks: false,
            initial_events_end: false,
            timeout: Duration::from_secs(1),
            bookmark_interval: Duration::from_secs(1),
            drop_after: None,
            delay: Duration::ZERO,
            tombstone_deletes: false,
            drop_events: Vec::new(),
            kind: "ConfigMap".into(),
            api_version: "v1".into(),
            convert: None,
            table: None,
        };
        let sent = |e: &Event| {
            let kind = sent_kind(e, &f.filter)?;
            render(e, kind, &f).map(|b| kind_of(&b))
        };
        let enter = ev(EventKind::Modified, json!({"app": "x"}), Some(json!({})));
        assert_eq!(sent(&enter).as_deref(), Some("ADDED"));
        let leave = ev(EventKind::Modified, json!({}), Some(json!({"app": "x"})));
        assert_eq!(sent(&leave).as_deref(), Some("DELETED"));
        let stay_out = ev(EventKind::Modified, json!({}), Some(json!({})));
        assert_eq!(sent(&stay_out), None);
        let stay = ev(
            EventKind::Modified,
            json!({"app": "x"}),
            Some(json!({"app": "x"})),
        );
        assert_eq!(sent(&stay).as_deref(), Some("MODIFIED"));
    }

    #[test]
    fn bookmark_shape() {
        let b = bookmark_line("Pod", "v1", 42, true);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["type"], "BOOKMARK");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "42");
        assert_eq!(
            v["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
            "true"
        );
    }
}
