//! The cluster state a recording rebuilds: the current version of every cached object, and
//! every version seen (watch events and write answers) by resourceVersion, from which a
//! reconcile's inputs are taken.

use crate::flight::{Body, Input, ObjectId, Version, WatchOp, Write};
use crate::shadow::{Kind, Mirror};
use serde_json::Value;
use std::collections::HashMap;

#[derive(Default)]
pub(super) struct State {
    current: HashMap<ObjectId, Value>,
    versions: HashMap<ObjectId, HashMap<String, Value>>,
    settings: Option<crate::config::ClusterSettings>,
    /// Changes whose earlier version was missing.
    pub(super) broken: usize,
}

fn kind_of(kind: &str) -> Option<Kind> {
    Some(match kind {
        "VirtualMachine" => Kind::VirtualMachine,
        "VirtualMachineInstance" => Kind::VirtualMachineInstance,
        "Pod" => Kind::Pod,
        "ControllerRevision" => Kind::ControllerRevision,
        "DataVolume" => Kind::DataVolume,
        _ => return None,
    })
}

impl State {
    fn keep(&mut self, id: &ObjectId, obj: &Value) {
        self.versions
            .entry(id.clone())
            .or_default()
            .insert(crate::flight::rv_of(obj), obj.clone());
    }

    fn set(&mut self, id: &ObjectId, version: &Version) {
        match version.resolve(self.current.get(id)) {
            Ok(obj) => {
                self.keep(id, &obj);
                self.current.insert(id.clone(), obj);
            }
            Err(_) => {
                self.broken += 1;
                self.current.remove(id);
            }
        }
    }

    /// Apply a snapshot, watch or settings line.
    pub(super) fn apply(&mut self, body: &Body) {
        match body {
            Body::Snapshot { id, object } => {
                self.keep(id, object);
                self.current.insert(id.clone(), object.clone());
            }
            Body::Watch { id, op, version } => match (op, version) {
                (WatchOp::Delete, _) | (_, None) => {
                    self.current.remove(id);
                }
                (_, Some(v)) => self.set(id, v),
            },
            Body::Settings { settings } => {
                self.settings = serde_json::from_value(settings.clone()).ok();
            }
            _ => {}
        }
    }

    /// Keep the object a write returned (the VM controller reads its own answers first).
    pub(super) fn answer(&mut self, w: &Write) {
        if let Some(a) = &w.answer {
            match a.version.resolve(self.current.get(&a.id)) {
                Ok(obj) => self.keep(&a.id, &obj),
                Err(_) => self.broken += 1,
            }
        }
    }

    /// A mirror holding exactly `inputs`, at their resourceVersions; an error names the first
    /// one the recording does not hold.
    pub(super) fn mirror(&self, inputs: &[Input]) -> Result<Mirror, String> {
        let mut m = Mirror::new(self.settings.clone().unwrap_or_default());
        // A recorded VMI reconcile names every node its topology hinter read.
        m.nodes = Some(Default::default());
        for input in inputs {
            let obj = self
                .versions
                .get(&input.id)
                .and_then(|v| v.get(&input.rv))
                .ok_or_else(|| {
                    format!(
                        "{} {} at resourceVersion {} is not in the recording",
                        input.id.kind, input.id.key, input.rv
                    )
                })?;
            match kind_of(&input.id.kind) {
                Some(kind) => m.set(kind, &input.id.key, Some(obj.clone())),
                None if input.id.kind == "PersistentVolumeClaim" => {
                    m.set_pvc(&input.id.key, Some(obj.clone()));
                }
                None if input.id.kind == "Node" => {
                    (m.nodes.get_or_insert_with(Default::default))
                        .insert(input.id.key.clone(), obj.clone());
                }
                None => return Err(format!("{}: not a kind replay knows", input.id.kind)),
            }
        }
        Ok(m)
    }
}
