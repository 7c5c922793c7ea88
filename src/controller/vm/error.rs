//! Why a step of the VM sync stopped: the error KubeVirt's `sync`/`execute` returns (its text is
//! what KubeVirt logs, puts in `SyncOutcome::Error` and wraps into the `Failure` condition).

use crate::api::defaults::DefaultsError;
use crate::api::vm::RunStrategyError;
use crate::controller::common::{ApiFailure, ReconcileError};
use crate::controller::vm::setup_vmi::SetupError;

/// A failed step of one VM sync. The `Display` text is KubeVirt's error text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmSyncError {
    /// An API call failed: `err.Error()`.
    #[error("{0}")]
    Api(#[from] ApiFailure),
    /// Several adoption failures, printed like `utilerrors.NewAggregate` (vm.go:427-438).
    #[error("[{}]", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Aggregate(Vec<ApiFailure>),
    /// Creating a DataVolume of a template failed (vm.go:546-548).
    #[error("failed to create DataVolume: {0}")]
    CreateDataVolume(ApiFailure),
    /// A `dataVolumeTemplates` entry cannot become a DataVolume (vm.go:526-531).
    #[error("unable to create DataVolume manifest: {0}")]
    DataVolumeManifest(String),
    /// A Pending DataVolume over its quota (vm.go:559-563).
    #[error("DataVolume {name} importer is not running due to an error: {message}")]
    DataVolumeImporter {
        /// The DataVolume.
        name: String,
        /// The `Bound` condition message.
        message: String,
    },
    /// A DataVolume source virtctl-rs does not model (clone authorization, sourceRef).
    #[error("{0}")]
    Unsupported(String),
    /// A start ControllerRevision cannot be read, named or built (vm.go:1798-1838).
    #[error("{0}")]
    Revision(String),
    /// The instancetype or preference cannot be found or applied to the VMI (vm.go:1302-1322).
    #[error("{0}")]
    Instancetype(String),
    /// A revision looked up without a name (the API client's own check).
    #[error("resource name may not be empty")]
    EmptyResourceName,
    /// `SetupVMIFromVM` failed.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The default network interface cannot be applied (virt-api's defaults).
    #[error(transparent)]
    Defaults(#[from] DefaultsError),
    /// `spec.running` and `spec.runStrategy` cannot be folded (vm.go:3263-3266).
    #[error(transparent)]
    RunStrategy(#[from] RunStrategyError),
}

impl From<VmSyncError> for ReconcileError {
    /// The step's text, and the API answer when the step stopped on one (a failed write, or a
    /// failed DataVolume create).
    fn from(e: VmSyncError) -> Self {
        let failure = match &e {
            VmSyncError::Api(f) | VmSyncError::CreateDataVolume(f) => Some(f.clone()),
            _ => None,
        };
        ReconcileError::Step {
            message: e.to_string(),
            failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_kubevirts() {
        let f = |m: &str| ApiFailure::other(m);
        assert_eq!(VmSyncError::from(f("boom")).to_string(), "boom");
        assert_eq!(
            VmSyncError::Aggregate(vec![f("a"), f("b")]).to_string(),
            "[a, b]"
        );
        assert_eq!(
            VmSyncError::CreateDataVolume(f("quota")).to_string(),
            "failed to create DataVolume: quota"
        );
        assert_eq!(
            VmSyncError::DataVolumeImporter {
                name: "dv1".into(),
                message: "exceeded".into()
            }
            .to_string(),
            "DataVolume dv1 importer is not running due to an error: exceeded"
        );
    }
}
