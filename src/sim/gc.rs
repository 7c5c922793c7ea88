//! The garbage collector and namespace controller of the embedded cluster.
//!
//! Models `pkg/controller/garbagecollector/garbagecollector.go`:
//! - an object whose owners (by apiVersion/kind/name and matching uid) are all gone is deleted
//!   in the background; references to gone owners are removed while other owners remain;
//! - an owner deleted with `propagationPolicy=Orphan` (finalizer `orphan`) has its reference
//!   removed from every dependent, then the finalizer removed;
//! - an owner deleted with `propagationPolicy=Foreground` (finalizer `foregroundDeletion`) gets
//!   its dependents deleted (in the foreground when they block it) and keeps the finalizer until
//!   no dependent with `blockOwnerDeletion: true` remains.
//!
//! And `pkg/controller/namespace/deletion/namespaced_resources_deleter.go`: a terminating
//! namespace gets phase `Terminating`, its content deleted, and is removed once empty.
//!
//! Writes appear in the audit log with user agent [`GC_USER_AGENT`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::audit::{AuditLog, AuditRecord};
use super::object;
use super::status::ApiError;
use super::store::{DeleteOpts, Deleted, GcItem, ObjKey, Propagation, Store, Sub};

/// User agent of the collector's writes in the audit log.
pub const GC_USER_AGENT: &str = "kube-controller-manager/v1.33.0 (sim) garbage-collector";

/// Run until `stop` is cancelled.
pub(crate) async fn run(store: Arc<Store>, audit: Arc<AuditLog>, stop: CancellationToken) {
    let gc = Gc { store, audit };
    loop {
        tokio::select! {
            _ = gc.store.gc_notified() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
        for item in gc.store.take_gc_work() {
            gc.process(item);
        }
    }
}

struct Gc {
    store: Arc<Store>,
    audit: Arc<AuditLog>,
}

/// Audit a write an in-server controller (`agent`) made to `key` directly in the store.
pub(super) fn record_write(
    store: &Store,
    audit: &AuditLog,
    agent: &str,
    verb: &str,
    key: &ObjKey,
    sub: &str,
    (code, answer): (u16, Option<Value>),
) {
    let def = store.registry().get(key.res);
    audit.record(
        chrono::Utc::now(),
        AuditRecord {
            verb: verb.into(),
            group: def.group.into(),
            resource: def.plural.into(),
            subresource: sub.into(),
            namespace: key.ns.clone(),
            name: key.name.clone(),
            user_agent: agent.into(),
            path: String::new(),
            response_object: answer,
            ..Default::default()
        },
        code,
    );
}

/// The code of a write an in-server controller made, and the object it answered when the
/// audit file keeps objects of its kind (`None` object: a `Status` of success).
pub(super) fn answer_of(
    store: &Store,
    audit: &AuditLog,
    key: &ObjKey,
    r: Result<Option<&Value>, &ApiError>,
) -> (u16, Option<Value>) {
    let def = store.registry().get(key.res);
    match r {
        Err(e) => (e.code, None),
        Ok(_) if !audit.wants_objects(def.group, def.plural) => (200, None),
        Ok(Some(obj)) => (200, Some(obj.clone())),
        Ok(None) => (
            200,
            Some(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
        ),
    }
}

impl Gc {
    fn record(&self, verb: &str, key: &ObjKey, sub: &str, answer: (u16, Option<Value>)) {
        record_write(
            &self.store,
            &self.audit,
            GC_USER_AGENT,
            verb,
            key,
            sub,
            answer,
        );
    }

    /// The code and (when the audit file keeps objects) the object a write answered.
    fn answer(&self, key: &ObjKey, r: Result<Option<&Value>, &ApiError>) -> (u16, Option<Value>) {
        answer_of(&self.store, &self.audit, key, r)
    }

    fn patch(&self, key: &ObjKey, sub: Sub, f: impl FnOnce(&Value) -> Result<Value, ApiError>) {
        let r = self
            .store
            .mutate(key.res, &key.ns, &key.name, sub, false, false, f);
        let s = if sub == Sub::Status { "status" } else { "" };
        let answer = self.answer(key, r.as_ref().map(|o| Some(o.as_ref())));
        self.record("patch", key, s, answer);
    }

    fn delete(&self, key: &ObjKey, propagation: Option<Propagation>) {
        let opts = DeleteOpts {
            propagation,
            ..Default::default()
        };
        let r = self.store.delete(key.res, &key.ns, &key.name, &opts);
        // A deletion that is complete answers a `Status`, as the API server does.
        let answer = self.answer(
            key,
            r.as_ref().map(|d| match d {
                Deleted::Pending(o) => Some(o.as_ref()),
                Deleted::Gone(_) => None,
            }),
        );
        self.record("delete", key, "", answer);
    }

    fn process(&self, item: GcItem) {
        match item {
            GcItem::Owner(key) => self.owner(&key),
            GcItem::Dependent(key) => self.dependent(&key),
            GcItem::Namespace(ns) => self.namespace(&ns),
        }
    }

    fn owner(&self, key: &ObjKey) {
        let Some(obj) = self.store.get_key_metadata(key) else {
            return;
        };
        if !object::is_deleting(&obj) {
            return;
        }
        let uid = object::uid(&obj).to_string();
        let fins = object::finalizers(&obj);
        if fins.iter().any(|f| f == "orphan") {
            for dep in self.store.dependents_of(&uid) {
                self.patch(&dep, Sub::Main, |cur| {
                    let mut next = cur.clone();
                    let m = object::meta_mut(&mut next);
                    if let Some(refs) = m.get_mut("ownerReferences").and_then(Value::as_array_mut) {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(&uid));
                        if refs.is_empty() {
                            m.remove("ownerReferences");
                        }
                    }
                    Ok(next)
                });
            }
            self.remove_finalizer(key, "orphan");
        } else if fins.iter().any(|f| f == "foregroundDeletion") {
            let mut blocked = false;
            for dep in self.store.dependents_of(&uid) {
                let Some(d) = self.store.get_key_metadata(&dep) else {
                    continue;
                };
                let blocks = object::owner_refs(&d)
                    .iter()
                    .any(|r| r.uid == uid && r.block_owner_deletion);
                if !object::is_deleting(&d) {
                    let p = if blocks {
                        Propagation::Foreground
                    } else {
                        Propagation::Background
                    };
                    self.delete(&dep, Some(p));
                }
                if blocks && self.store.get_key_metadata(&dep).is_some() {
                    blocked = true;
                }
            }
            if !blocked {
                self.remove_finalizer(key, "foregroundDeletion");
            }
        }
    }

    fn remove_finalizer(&self, key: &ObjKey, fin: &str) {
        self.patch(key, Sub::Main, |cur| {
            let mut next = cur.clone();
            let f: Vec<String> = object::finalizers(cur)
                .into_iter()
                .filter(|x| x != fin)
                .collect();
            object::set_finalizers(&mut next, &f);
            Ok(next)
        });
    }

    fn dependent(&self, key: &ObjKey) {
        let Some(obj) = self.store.get_key_metadata(key) else {
            return;
        };
        let refs = object::owner_refs(&obj);
        if refs.is_empty() {
            return;
        }
        let reg = self.store.registry().clone();
        let mut dangling = Vec::new();
        let mut solid = 0usize;
        for r in &refs {
            match reg.find_kind(&r.api_version, &r.kind) {
                // Unknown kinds cannot be resolved; the real collector leaves them alone too.
                None => solid += 1,
                Some(res) => {
                    let ns = if reg.get(res).namespaced {
                        key.ns.as_str()
                    } else {
                        ""
                    };
                    if self.store.holds_uid(res, ns, &r.name, &r.uid) {
                        solid += 1;
                    } else {
                        dangling.push(r.uid.clone());
                    }
                }
            }
        }
        if dangling.is_empty() {
            return;
        }
        if solid == 0 {
            if !object::is_deleting(&obj) {
                self.delete(key, Some(Propagation::Background));
            }
        } else {
            self.patch(key, Sub::Main, |cur| {
                let mut next = cur.clone();
                if let Some(refs) = object::meta_mut(&mut next)
                    .get_mut("ownerReferences")
                    .and_then(Value::as_array_mut)
                {
                    refs.retain(|r| {
                        !r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| dangling.iter().any(|d| d == u))
                    });
                }
                Ok(next)
            });
        }
    }

    fn namespace(&self, name: &str) {
        let Some(ns_res) = self.store.registry().core("namespaces") else {
            return;
        };
        let key = ObjKey {
            res: ns_res,
            ns: String::new(),
            name: name.to_string(),
        };
        let Some(obj) = self.store.get_key(&key) else {
            return;
        };
        if !object::is_deleting(&obj) {
            return;
        }
        if obj.pointer("/status/phase").and_then(Value::as_str) != Some("Terminating") {
            self.patch(&key, Sub::Status, |cur| {
                let mut next = cur.clone();
                if let Some(m) = next.as_object_mut() {
                    m.insert("status".into(), json!({"phase": "Terminating"}));
                }
                Ok(next)
            });
        }
        let content = self.store.keys_in_namespace(name);
        if content.is_empty() {
            // `finalize`: clear spec.finalizers; with no metadata finalizers it is removed.
            self.patch(&key, Sub::Main, |cur| {
                let mut next = cur.clone();
                if let Some(spec) = next.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.insert("finalizers".into(), json!([]));
                }
                Ok(next)
            });
            return;
        }
        for k in content {
            if let Some(o) = self.store.get_key_metadata(&k)
                && !object::is_deleting(&o)
            {
                self.delete(&k, None);
            }
        }
    }
}
