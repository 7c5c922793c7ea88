//! The flight recorder (`run-controller --record DIR`): a bounded, rotating history of what the
//! controller saw and did, as JSON lines (docs/replay.md): the changes of its cached objects
//! (as patches), each reconcile with its inputs, expectations and decision, each write with
//! the API server's answer, the Events it emitted, its leadership terms and settings.
//! `replay` runs the decisions again on it; `why` reads the Events from it.
//!
//! ```text
//! informer observers ┐
//! executors ─────────┼─► FlightRecorder (one lock, one sequence) ─► ring.rs (segments)
//! manager, events ───┘
//! ```
//!
//! Writing is synchronous under the lock into a buffered file; the buffer is written out at
//! each reconcile. A failing disk stops the recording (one warning), never the controller.

pub(crate) mod format;
mod read;
mod ring;

pub(crate) use format::rv_of;
pub use format::{
    Answer, Body, Decided, EventLine, Expectation, FORMAT, Input, Line, ObjectId, Reconcile,
    Version, WatchOp, Write,
};
pub use read::{ReadError, read_recording};
pub use ring::SEGMENTS;

use crate::runtime::informer::{Handler, Notification};
use chrono::Utc;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The default size limit of a recording directory (`--record-max-bytes`).
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;

struct Inner {
    ring: ring::Ring,
    identity: String,
    seq: u64,
    /// The last recorded version of every cached object: what the next change is a patch of,
    /// and what a new segment's snapshot holds.
    objects: HashMap<ObjectId, Value>,
    /// Set once writing failed: nothing more is recorded.
    broken: bool,
}

/// A handle on one recording; clones share it.
#[derive(Clone)]
pub struct FlightRecorder {
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for FlightRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlightRecorder")
    }
}

impl FlightRecorder {
    /// Record into `dir` (created if missing), keeping it under `max_bytes`, for the
    /// controller `identity`.
    pub fn open(dir: &Path, max_bytes: u64, identity: &str) -> std::io::Result<Self> {
        let ring = ring::Ring::open(dir, max_bytes)?;
        let mut inner = Inner {
            ring,
            identity: identity.to_string(),
            seq: 0,
            objects: HashMap::new(),
            broken: false,
        };
        inner.header()?;
        Ok(FlightRecorder {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    /// The sequence number of the last line: a reconcile takes it before its snapshot.
    pub(crate) fn position(&self) -> u64 {
        self.lock().seq
    }

    /// Record one line.
    pub(crate) fn record(&self, body: Body) {
        self.lock().append(body);
    }

    /// Record one reconcile and write out the buffer.
    pub(crate) fn reconcile(&self, r: Reconcile) {
        let mut g = self.lock();
        g.append(Body::Reconcile(Box::new(r)));
        g.flush();
    }

    /// Record a write; `answer` is the object it returned, recorded as a patch of the cached
    /// version.
    pub(crate) fn write(&self, mut w: Write, answer: Option<(&str, &str, Value)>) {
        let mut g = self.lock();
        if let Some((kind, key, obj)) = answer {
            let id = ObjectId {
                kind: kind.into(),
                key: key.into(),
            };
            let version = format::version_of(g.objects.get(&id), &obj);
            w.answer = Some(Answer { id, version });
        }
        g.append(Body::Write(Box::new(w)));
    }

    /// Write out what is buffered.
    pub fn flush(&self) {
        self.lock().flush();
    }

    /// Record a change of a cached object of `kind`.
    pub(crate) fn watch<K: kube::Resource + serde::Serialize>(
        &self,
        kind: &str,
        n: &Notification<K>,
    ) {
        let (op, obj) = match n {
            Notification::Add(o) => (WatchOp::Add, o),
            Notification::Update { new, .. } => (WatchOp::Update, new),
            Notification::Delete { obj, .. } => (WatchOp::Delete, obj),
        };
        let meta = obj.meta();
        let id = ObjectId {
            kind: kind.to_string(),
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or("")
            ),
        };
        let value = match op {
            WatchOp::Delete => None,
            _ => match serde_json::to_value(obj.as_ref()) {
                Ok(v) => Some(v),
                Err(e) => {
                    tracing::warn!(kind, key = %id.key, error = %e, "flight recorder: object not recorded");
                    return;
                }
            },
        };
        let mut g = self.lock();
        let version = value
            .as_ref()
            .map(|v| format::version_of(g.objects.get(&id), v));
        let op = match (&version, op) {
            (Some(v), WatchOp::Update) if v.object.is_some() => WatchOp::Add,
            (_, op) => op,
        };
        match value {
            Some(v) => g.objects.insert(id.clone(), v),
            None => g.objects.remove(&id),
        };
        g.append(Body::Watch { id, op, version });
    }

    /// An informer observer recording `kind`'s changes: the informer calls it before its cache
    /// applies each change ([`crate::runtime::informer::InformerState::observed_by`]), so a
    /// reconcile never reads a version recorded after its own line.
    pub(crate) fn handler<K>(&self, kind: &'static str) -> Handler<K>
    where
        K: kube::Resource + serde::Serialize + Send + Sync + 'static,
    {
        let recorder = self.clone();
        Arc::new(move |n: &Notification<K>| recorder.watch(kind, n))
    }
}

/// The [`Input`] naming `obj` of `kind` at its resourceVersion.
pub(crate) fn input<K: kube::Resource>(kind: &str, obj: &K) -> Input {
    let meta = obj.meta();
    Input {
        id: ObjectId {
            kind: kind.to_string(),
            key: format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or(""),
                meta.name.as_deref().unwrap_or("")
            ),
        },
        rv: meta.resource_version.clone().unwrap_or_default(),
    }
}

impl Inner {
    fn header(&mut self) -> std::io::Result<()> {
        let body = Body::Header {
            format: FORMAT.to_string(),
            identity: self.identity.clone(),
            segment: self.ring.segment(),
        };
        self.write_body(body)
    }

    fn write_body(&mut self, body: Body) -> std::io::Result<()> {
        self.seq += 1;
        let line = Line {
            seq: self.seq,
            at: Utc::now(),
            body,
        };
        let bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        self.ring.write_line(&bytes)
    }

    /// A new segment: its header, then every cached object as it is now.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.ring.rotate()?;
        self.header()?;
        let mut objects: Vec<(ObjectId, Value)> = self
            .objects
            .iter()
            .map(|(id, v)| (id.clone(), v.clone()))
            .collect();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        for (id, object) in objects {
            self.write_body(Body::Snapshot { id, object })?;
        }
        self.ring.mark_start();
        Ok(())
    }

    fn append(&mut self, body: Body) {
        if self.broken {
            return;
        }
        let result = if self.ring.full() {
            self.rotate()
        } else {
            Ok(())
        };
        if let Err(e) = result.and_then(|_| self.write_body(body)) {
            self.fail(e);
        }
    }

    fn flush(&mut self) {
        if !self.broken
            && let Err(e) = self.ring.flush()
        {
            self.fail(e);
        }
    }

    fn fail(&mut self, e: std::io::Error) {
        tracing::warn!(error = %e, "flight recorder: writing failed; the recording stops here");
        self.broken = true;
    }
}

#[cfg(test)]
mod tests;
