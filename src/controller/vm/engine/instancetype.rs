//! The instancetype synchronizer of `sync` (vm.go:3268-3282,
//! pkg/instancetype/controller/vm/controller.go:110-216) and the instancetype steps of `startVMI`
//! (vm.go:1302-1322), under each `instancetype.referencePolicy`: `reference` (KubeVirt's
//! default) stashes the specs in ControllerRevisions, `expand`/`expandAll` write them into the
//! VM.

use super::Engine;
use crate::config::ReferencePolicy;
use crate::controller::vm::action::{
    EventType, ResourceVersionFrom, SyncError, VmAction, VmUpdatePurpose,
};
use crate::controller::vm::reasons::{event, sync as reason};
use crate::instancetype::{self as it, Matcher};
use k8s_openapi::api::apps::v1::ControllerRevision;
use serde_json::{Value, json};
use std::sync::Arc;

/// `storeControllerRevisionErrFmt` (controller/vm/controller.go:104).
const STORE_ERR: &str =
    "error encountered while storing instancetype.kubevirt.io controllerRevisions";
/// The reason `handleSynchronizerErr` gives an error without one (vm.go:3400).
const UNSUPPORTED: &str = "UnsupportedSyncError";
/// `upgradeControllerRevisionErrFmt` (controller/vm/controller.go:105).
const UPGRADE_ERR: &str =
    "error encountered while upgrading instancetype.kubevirt.io controllerRevisions";

/// What the instancetype synchronizer leaves the sync with (vm.go:3269-3279).
pub(super) enum InstancetypeSync {
    /// The VM is as it was: go on.
    Continue,
    /// The VM was expanded and written: `sync` returns the written VM with no error, and
    /// `updateStatus` runs on it (vm.go:3273-3278).
    Expanded,
    /// A sync error (`handleSynchronizerErr`, vm.go:3270-3272, 3392-3401).
    Failed(SyncError),
}

impl Engine<'_> {
    /// The ControllerRevisions a find may read: the snapshot's and those created earlier in
    /// this sync (KubeVirt's finders GET a revision their informer has not seen yet,
    /// find/controller_revision.go:41-62).
    pub(super) fn instancetype_revisions(&self) -> Vec<Arc<ControllerRevision>> {
        let mut all = self.snap.revisions.clone();
        all.extend(self.created_revisions.iter().cloned());
        all
    }

    /// `specFinder.Find` / `FindPreference` on the working VM.
    pub(super) fn find_spec(&self, preference: bool) -> Result<Option<Value>, String> {
        it::find_spec(
            &self.vm,
            preference,
            &self.snap.instancetypes,
            &self.instancetype_revisions(),
        )
    }

    /// The instancetype controller's `Sync` (controller/vm/controller.go:110-142): check the
    /// referenced objects exist, stash them in ControllerRevisions named in the status refs
    /// (`Store`), upgrade stashed revisions of older versions (`Upgrade`). A `SyncError` stops the
    /// sync (vm.go:3270-3272).
    pub(super) fn sync_instancetype(&mut self) -> InstancetypeSync {
        use InstancetypeSync::{Continue, Failed};
        if self.vm.spec.instancetype.is_none() && self.vm.spec.preference.is_none() {
            return Continue;
        }
        // checkResourcesExist (controller.go:144-158)
        if let Err(e) = self.find_spec(false) {
            self.explain("the VM's instancetype cannot be found (instancetype/controller/vm/controller.go:150-152)");
            return Failed(SyncError::new("FailedFindInstancetype", e));
        }
        if let Err(e) = self.find_spec(true) {
            self.explain("the VM's preference cannot be found (instancetype/controller/vm/controller.go:153-155)");
            return Failed(SyncError::new("FailedFindPreference", e));
        }
        match self.snap.config.reference_policy {
            ReferencePolicy::Reference => {
                if let Err(e) = self.store_instancetype_revisions() {
                    return Failed(self.instancetype_failure(STORE_ERR, &e));
                }
            }
            policy @ (ReferencePolicy::Expand | ReferencePolicy::ExpandAll) => {
                return self.expand_instancetype(policy);
            }
        }
        if let Err(e) = self.upgrade_instancetype_revisions() {
            return Failed(self.instancetype_failure(UPGRADE_ERR, &e));
        }
        Continue
    }

    /// `handleExpand` (controller.go:160-216): unless `expand` finds a stashed revision already
    /// named in the status, write the expanded VM (`Update`), then its status without the refs
    /// (`UpdateStatus`, with the resourceVersion the Update returned), then delete the stashed
    /// revisions the refs named. Neither Store nor Upgrade runs under these policies.
    fn expand_instancetype(&mut self, policy: ReferencePolicy) -> InstancetypeSync {
        use InstancetypeSync::{Continue, Expanded, Failed};
        let named = [false, true].map(|p| it::status_revision_name(&self.vm, p));
        if policy == ReferencePolicy::Expand && named.iter().any(|n| !n.is_empty()) {
            self.explain(
                "referencePolicy expand: the status already names a stashed revision, so the VM \
                 is not expanded (instancetype/controller/vm/controller.go:164-173)",
            );
            return Continue;
        }
        // Errors without a reason are wrapped by handleSynchronizerErr (vm.go:3392-3401).
        let unsupported = |m: String| {
            Failed(SyncError::new(
                UNSUPPORTED,
                format!("unsupported error: {m}"),
            ))
        };
        let (admission, defaults) = &self.snap.config.expand_defaults;
        let expanded = match it::expand::expand(
            &self.vm,
            &self.snap.instancetypes,
            &self.instancetype_revisions(),
            admission,
            defaults,
        ) {
            Ok(vm) => vm,
            Err(e) => {
                return unsupported(format!(
                    "error encountered while expanding into VirtualMachine: {e}"
                ));
            }
        };
        if crate::controller::common::semantic_eq(&*self.vm, &expanded) {
            return Continue;
        }
        let status = expanded.status.clone().unwrap_or_default();
        let (update, res) = self.api(
            VmAction::UpdateVm {
                vm: Box::new(expanded.clone()),
                purpose: VmUpdatePurpose::ExpandInstancetype,
                resource_version_from: self.vm_rv,
            },
            "write the VM with its instancetype and preference expanded \
             (instancetype/controller/vm/controller.go:177-182)",
        );
        if let Err(e) = res {
            return unsupported(format!(
                "error encountered when trying to update expanded VirtualMachine: {}",
                e.message
            ));
        }
        let (status_write, res) = self.api(
            VmAction::UpdateVmStatus {
                status: Box::new(status.clone()),
                resource_version_from: ResourceVersionFrom::Action(update),
            },
            "clear the status refs of the expanded VM \
             (instancetype/controller/vm/controller.go:183-188)",
        );
        if let Err(e) = res {
            return unsupported(format!(
                "error encountered when trying to update expanded VirtualMachine Status: {}",
                e.message
            ));
        }
        for name in named.into_iter().filter(|n| !n.is_empty()) {
            let (_, res) = self.api(
                VmAction::DeleteControllerRevision { name: name.clone() },
                "delete the stashed revision the expanded VM no longer names \
                 (instancetype/controller/vm/controller.go:189-209)",
            );
            if let Err(e) = res {
                // `return nil, err`: the sync goes on with the VM it read (vm.go:3270-3272).
                return Failed(SyncError::new(
                    reason::FAILED_CREATE,
                    format!(
                        "error encountered cleaning controllerRevision {name} after successfully \
                         expanding VirtualMachine {}: {}",
                        self.vm.metadata.name.as_deref().unwrap_or(""),
                        e.message
                    ),
                ));
            }
        }
        self.explain(format!(
            "referencePolicy {policy:?}: the VM is expanded and written; the sync stops here \
             and the status is computed on it (vm.go:3273-3278)"
        ));
        let mut vm = expanded;
        vm.status = Some(status.clone());
        self.vm = Arc::new(vm);
        self.server_status = Some(status);
        self.vm_rv = ResourceVersionFrom::Action(status_write);
        Expanded
    }

    /// The Warning event and SyncError of a failed Store/Upgrade (controller.go:124-139).
    fn instancetype_failure(&mut self, prefix: &str, e: &str) -> SyncError {
        let message = format!("{prefix}: {e}");
        self.event(
            EventType::Warning,
            event::FAILED_CREATE,
            message.clone(),
            "instancetype ControllerRevision handling failed (instancetype/controller/vm/controller.go:124-139)",
        );
        SyncError::new(reason::FAILED_CREATE, message)
    }

    /// `revisionHandler.Store` (revision/store.go:47-62): sync each status ref with its matcher,
    /// creating a ControllerRevision where the ref has none, then one status patch adding the
    /// changed refs (revision/patch.go:30-75).
    fn store_instancetype_revisions(&mut self) -> Result<(), String> {
        let mut changed = Vec::new();
        for preference in [false, true] {
            if let Some(r) = self.sync_status_ref(preference)? {
                // `vm.Status.InstancetypeRef = statusRef` before the patch (store.go:93-98): a
                // failed patch leaves the new refs for updateStatus to write.
                Arc::make_mut(&mut self.vm)
                    .status
                    .get_or_insert_with(Default::default)
                    .extra
                    .insert(ref_key(preference).into(), r.clone());
                changed.push((preference, r));
            }
        }
        if changed.is_empty() {
            return Ok(());
        }
        let mut patch = crate::controller::common::PatchSet::new();
        for (preference, r) in &changed {
            let key = ref_key(*preference);
            patch.add(crate::controller::common::patch::path(&["status", key]), r);
        }
        let (index, res) = self.api(
            VmAction::PatchVmInstancetypeRefs {
                patch: patch.into_value(),
            },
            "record the stashed instancetype/preference ControllerRevisions in the VM status \
             (revision/patch.go:30-52)",
        );
        res.map_err(|e| e.message)?;
        // patchVM: the working VM takes the patched object's metadata and status.
        let mut server = self.server_status.clone().unwrap_or_default();
        for (preference, r) in changed {
            server.extra.insert(ref_key(preference).into(), r);
        }
        self.server_status = Some(server.clone());
        Arc::make_mut(&mut self.vm).status = Some(server);
        self.vm_rv = crate::controller::vm::action::ResourceVersionFrom::Action(index);
        Ok(())
    }

    /// `storeInstancetypeRevision` / `storePreferenceRevision` + `syncStatusWithMatcher`
    /// (revision/store.go:64-167): the new status ref when it changed.
    fn sync_status_ref(&mut self, preference: bool) -> Result<Option<Value>, String> {
        let matcher = if preference {
            Matcher::preference(&self.vm)
        } else {
            Matcher::instancetype(&self.vm)
        };
        let Some(m) = matcher else {
            return Ok(None);
        };
        let key = ref_key(preference);
        // `vm.Status.InstancetypeRef = &InstancetypeStatusRef{}` when nil: kept in memory even if
        // the sync fails below (updateStatus then writes `{}`).
        let original = match it::status_ref(&self.vm, preference) {
            Some(r) => r,
            None => {
                let status = Arc::make_mut(&mut self.vm)
                    .status
                    .get_or_insert_with(Default::default);
                status.extra.insert(key.into(), json!({}));
                json!({})
            }
        };
        let mut r = original.clone();
        let mut clear = false;
        for (field, value) in [
            ("name", &m.name),
            ("kind", &m.kind),
            ("inferFromVolume", &m.infer_from_volume),
        ] {
            if !value.is_empty() && r.get(field).and_then(Value::as_str) != Some(value) {
                r[field] = json!(value);
                clear = true;
            }
        }
        if clear && let Some(o) = r.as_object_mut() {
            o.remove("controllerRevisionRef");
        }
        if let Some(p) = &m.infer_from_volume_failure_policy
            && r.get("inferFromVolumeFailurePolicy")
                .and_then(Value::as_str)
                != Some(p)
        {
            r["inferFromVolumeFailurePolicy"] = json!(p);
        }
        let current = |r: &Value| {
            r.pointer("/controllerRevisionRef/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        if !m.revision_name.is_empty() && current(&r).as_deref() != Some(&m.revision_name) {
            r["controllerRevisionRef"] = json!({"name": m.revision_name});
        }
        if r.get("controllerRevisionRef").is_none_or(Value::is_null) {
            let name = self.create_instancetype_revision(&m, preference)?;
            r["controllerRevisionRef"] = json!({"name": name});
        }
        Ok((!crate::controller::common::semantic_eq(&original, &r)).then_some(r))
    }

    /// `createInstancetypeRevision` / `createPreferenceRevision` + `storeControllerRevision`
    /// (revision/store.go:100-134, 152-167, 278-320): find the object, check one final time that
    /// the instancetype does not conflict with the template, create the revision. An existing
    /// revision of that name is fine when it stashes the same spec (the executor checks).
    fn create_instancetype_revision(
        &mut self,
        m: &Matcher,
        preference: bool,
    ) -> Result<String, String> {
        let resource = m.resource(preference)?;
        let object = self
            .snap
            .instancetypes
            .get(resource, &m.name)
            .cloned()
            .ok_or_else(|| resource.not_found(&m.name))?;
        if !preference {
            self.check_template_conflicts(&object)?;
        }
        let revision = it::revision::build(&self.vm, resource, &object);
        let name = revision.metadata.name.clone().unwrap_or_default();
        let (_, res) = self.api(
            VmAction::CreateInstancetypeRevision {
                revision: Box::new(revision.clone()),
            },
            format!(
                "stash {} {} in a ControllerRevision (revision/store.go:278-320)",
                resource.kind(),
                m.name
            ),
        );
        res.map_err(|e| e.message)?;
        self.created_revisions.push(Arc::new(revision));
        Ok(name)
    }

    /// `checkForInstancetypeConflicts` (revision/store.go:136-150): the instancetype alone applied
    /// to a copy of the template, conflicts reported under `spec.template.spec`.
    fn check_template_conflicts(&self, object: &Value) -> Result<(), String> {
        let template = self.vm.spec.template.as_ref();
        let mut spec =
            serde_json::to_value(template.and_then(|t| t.spec.clone()).unwrap_or_default())
                .map_err(|e| e.to_string())?;
        let mut annotations = template
            .and_then(|t| t.metadata.as_ref())
            .and_then(|m| m.maps.annotations.clone())
            .unwrap_or_default();
        let empty = json!({});
        let conflicts = it::apply::apply_to_vmi(
            "spec.template.spec",
            Some(object.get("spec").unwrap_or(&empty)),
            None,
            &mut spec,
            &mut annotations,
        );
        if conflicts.is_empty() {
            Ok(())
        } else {
            Err(conflicts.to_string())
        }
    }

    /// `upgrader.Upgrade` (upgrade/handler.go:52-161): a stashed revision not labelled with the
    /// latest object version is decoded, stashed again under a new revision, the status ref
    /// moved to it (test + replace), and the old revision deleted (a failed delete is ignored).
    fn upgrade_instancetype_revisions(&mut self) -> Result<(), String> {
        let mut patch = crate::controller::common::PatchSet::new();
        let mut moved = Vec::new();
        for preference in [false, true] {
            let has_matcher = if preference {
                self.vm.spec.preference.is_some()
            } else {
                self.vm.spec.instancetype.is_some()
            };
            let old = it::status_revision_name(&self.vm, preference);
            if !has_matcher || old.is_empty() {
                continue;
            }
            let revisions = self.instancetype_revisions();
            let cr = revisions
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(old.as_str()))
                .ok_or_else(|| format!("controllerrevisions.apps \"{old}\" not found"))?;
            if it::revision::is_latest_version(cr) {
                continue;
            }
            let (resource, object) = it::revision::stashed_object(cr)?;
            let new = it::revision::build(&self.vm, resource, &object);
            let new_name = new.metadata.name.clone().unwrap_or_default();
            let (_, res) = self.api(
                VmAction::CreateControllerRevision {
                    revision: Box::new(new.clone()),
                },
                "stash the upgraded object in a new ControllerRevision (upgrade/handler.go:146-150)",
            );
            res.map_err(|e| e.message)?;
            self.created_revisions.push(Arc::new(new));
            let p = || {
                crate::controller::common::patch::path(&[
                    "status",
                    ref_key(preference),
                    "controllerRevisionRef",
                    "name",
                ])
            };
            patch.test(p(), &old);
            patch.replace(p(), &new_name);
            moved.push((preference, old, new_name));
        }
        if moved.is_empty() {
            return Ok(());
        }
        let (index, res) = self.api(
            VmAction::PatchVmInstancetypeRefs {
                patch: patch.into_value(),
            },
            "point the status refs at the upgraded ControllerRevisions (upgrade/handler.go:76-86)",
        );
        res.map_err(|e| e.message)?;
        self.vm_rv = crate::controller::vm::action::ResourceVersionFrom::Action(index);
        for (preference, old, new_name) in moved {
            let _ = self.api(
                VmAction::DeleteControllerRevision { name: old },
                "delete the revision the upgrade replaced; a failure is only logged \
                 (upgrade/handler.go:89-101)",
            );
            let key = ref_key(preference);
            for status in [
                Arc::make_mut(&mut self.vm).status.as_mut(),
                self.server_status.as_mut(),
            ]
            .into_iter()
            .flatten()
            {
                if let Some(r) = status.extra.get_mut(key) {
                    r["controllerRevisionRef"] = json!({"name": new_name});
                }
            }
        }
        Ok(())
    }

    /// `ApplyAutoAttachPreferences` (controller.go:224-234), before the input device and default
    /// network are added (vm.go:1302-1307).
    pub(super) fn apply_auto_attach_preferences(&self, spec: &mut Value) -> Result<(), String> {
        if self.vm.spec.preference.is_none() {
            return Ok(());
        }
        if let Some(pref) = self.find_spec(true)? {
            it::preference::auto_attach(&pref, spec);
        }
        Ok(())
    }

    /// `ApplyToVMI` (controller.go:236-260): the name annotations, then the instancetype and
    /// preference applied to the VMI; conflicts are "VMI conflicts with instancetype spec in
    /// fields: [...]".
    pub(super) fn apply_instancetype_to_vmi(
        &self,
        vmi: &mut crate::api::vmi::VirtualMachineInstance,
    ) -> Result<(), String> {
        let itype = self.find_spec(false)?;
        let pref = self.find_spec(true)?;
        if itype.is_none() && pref.is_none() {
            return Ok(());
        }
        let mut annotations = vmi.metadata.annotations.take().unwrap_or_default();
        it::set_name_annotations(&self.vm, &mut annotations);
        let mut spec = serde_json::to_value(&vmi.spec).map_err(|e| e.to_string())?;
        let conflicts = it::apply::apply_to_vmi(
            "spec",
            itype.as_ref(),
            pref.as_ref(),
            &mut spec,
            &mut annotations,
        );
        vmi.metadata.annotations = Some(annotations);
        if !conflicts.is_empty() {
            return Err(format!(
                "VMI conflicts with instancetype spec in fields: [{}]",
                conflicts.paths()
            ));
        }
        vmi.spec = serde_json::from_value(spec).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// The working VM with its instancetype and preference expanded (`ApplyToVM`,
    /// apply/vm.go:67-87), as the RestartRequired and live-update checks read it.
    pub(super) fn expanded(
        &self,
        vm: &crate::api::vm::VirtualMachine,
    ) -> Result<crate::api::vm::VirtualMachine, String> {
        it::apply_to_vm(vm, &self.snap.instancetypes, &self.instancetype_revisions())
    }
}

/// The status field of a ref.
fn ref_key(preference: bool) -> &'static str {
    if preference {
        "preferenceRef"
    } else {
        "instancetypeRef"
    }
}
