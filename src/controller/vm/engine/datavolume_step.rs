//! DataVolume templates step of the VM engine: `handleDataVolumes` (vm.go:436-520).

use super::{Abort, Engine};
use crate::controller::vm::action::{EventType, VmAction};
use crate::controller::vm::datavolume::{
    build_data_volume, check_clone_source, dv_phase, exceeded_quota, find,
};
use crate::controller::vm::error::VmSyncError;
use crate::controller::vm::reasons::event;

impl Engine<'_> {
    /// `handleDataVolumes` (vm.go:512-573): create missing DataVolumes of the templates; report
    /// whether all exist with phase Succeeded, WaitForFirstConsumer or PendingPopulation. `Err`
    /// carries KubeVirt's error text.
    pub(super) fn handle_data_volumes(&mut self) -> Result<bool, Abort> {
        let mut ready = true;
        let templates = self
            .vm
            .spec
            .data_volume_templates
            .clone()
            .unwrap_or_default();
        for (i, template) in templates.iter().enumerate() {
            let name = template
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string();
            if name.is_empty() {
                return Err(VmSyncError::DataVolumeManifest(format!(
                    "spec.dataVolumeTemplates[{i}].metadata.name is empty"
                )));
            }
            if let Some(dv) = find(&self.snap.data_volumes, &name) {
                match dv_phase(dv) {
                    "Succeeded" | "WaitForFirstConsumer" | "PendingPopulation" => continue,
                    "Failed" => self.event(
                        EventType::Warning,
                        event::FAILED_DATA_VOLUME_IMPORT,
                        format!("DataVolume {name} failed to import disk image"),
                        "DataVolume Failed (vm.go:557-558)",
                    ),
                    "Pending" => {
                        if let Some(msg) = exceeded_quota(dv) {
                            self.event(
                                EventType::Warning,
                                event::FAILED_DATA_VOLUME_IMPORT,
                                format!("DataVolume {name} exceeds quota limits"),
                                "DataVolume over quota (vm.go:559-563)",
                            );
                            return Err(VmSyncError::DataVolumeImporter { name, message: msg });
                        }
                    }
                    _ => {}
                }
                ready = false;
                continue;
            }
            let pvc_exists = self.snap.pvcs.contains_key(&name);
            ready = false;
            let dv = build_data_volume(&self.vm, template)?;
            check_clone_source(&dv)?;
            let key = self.key.clone();
            self.local(
                VmAction::ExpectDataVolumeCreations {
                    key: key.clone(),
                    count: 1,
                },
                "expect the DataVolume creation (vm.go:536)",
            );
            self.explain(format!(
                "DataVolume {name} missing: create it (vm.go:520-551)"
            ));
            let (_, res) = self.api(
                VmAction::CreateDataVolume {
                    data_volume: Box::new(dv),
                },
                format!("create DataVolume {name} from spec.dataVolumeTemplates (vm.go:537)"),
            );
            match res {
                Ok(()) => self.event(
                    EventType::Normal,
                    event::SUCCESSFUL_DATA_VOLUME_CREATE,
                    format!("Created DataVolume {name}"),
                    "DataVolume created (vm.go:550)",
                ),
                Err(e) => {
                    self.local(
                        VmAction::DataVolumeCreationObserved { key },
                        "the create was not accepted: lower the expectation (vm.go:539)",
                    );
                    if pvc_exists && e.message.contains("already exists") {
                        self.explain(format!(
                            "DataVolume {name}: PVC already exists, create error ignored \
                             (vm.go:540-545)"
                        ));
                        continue;
                    }
                    self.event(
                        EventType::Warning,
                        event::FAILED_DATA_VOLUME_CREATE,
                        format!("Error creating DataVolume {name}: {}", e.message),
                        "DataVolume create failed (vm.go:546)",
                    );
                    return Err(VmSyncError::CreateDataVolume(e));
                }
            }
        }
        Ok(ready)
    }
}
