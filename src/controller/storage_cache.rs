//! The cluster-scoped storage informers: StorageClasses, CDI's StorageProfiles, and the
//! VolumeSnapshotClasses of `snapshot.storage.k8s.io` (KubeVirt's snapshot controller's
//! `StorageClassInformer`, `StorageProfileInformer` and dynamic VolumeSnapshotClass informer,
//! pkg/storage/snapshot/snapshot_base.go:70-125), read for the VMs' `volumeSnapshotStatuses`;
//! CDI's CDI CRs and CDIConfigs (the VMI controller's `cdiStore` and `cdiConfigStore`,
//! vmi/storage.go:374-394), read for the claims' filesystem overhead.
//! A kind the cluster does not serve has a disabled (empty, synced) informer, as KubeVirt's
//! fake informers for CDI and its unstarted dynamic informer are empty.

use crate::api::storage::{Cdi, CdiConfig, StorageProfile, VolumeSnapshotClass};
use crate::controller::vm::volume_snapshot::StorageView;
use crate::runtime::informer::Informer;
use k8s_openapi::api::storage::v1::StorageClass;

/// The stores.
#[derive(Clone)]
pub struct StorageCaches {
    pub storage_classes: Informer<StorageClass>,
    pub storage_profiles: Informer<StorageProfile>,
    pub snapshot_classes: Informer<VolumeSnapshotClass>,
    pub cdis: Informer<Cdi>,
    pub cdi_configs: Informer<CdiConfig>,
}

impl StorageCaches {
    /// Never watching (unit tests, dry runs).
    pub(crate) fn disabled() -> Self {
        StorageCaches {
            storage_classes: Informer::disabled("storageclasses"),
            storage_profiles: Informer::disabled("storageprofiles"),
            snapshot_classes: Informer::disabled("volumesnapshotclasses"),
            cdis: Informer::disabled("cdis"),
            cdi_configs: Informer::disabled("cdiconfigs"),
        }
    }

    /// Every store completed its first list.
    pub(crate) fn has_synced(&self) -> bool {
        self.storage_classes.has_synced()
            && self.storage_profiles.has_synced()
            && self.snapshot_classes.has_synced()
            && self.cdis.has_synced()
            && self.cdi_configs.has_synced()
    }

    /// Wait for every store's first list.
    pub(crate) async fn wait_synced(&self) {
        self.storage_classes.wait_synced().await;
        self.storage_profiles.wait_synced().await;
        self.snapshot_classes.wait_synced().await;
        self.cdis.wait_synced().await;
        self.cdi_configs.wait_synced().await;
    }

    /// What the volume snapshot rule reads of the three stores, now.
    pub(crate) fn view(&self) -> StorageView {
        StorageView::from_objects(
            self.storage_classes.store().state().iter().map(|sc| &**sc),
            self.storage_profiles.store().state().iter().map(|p| &**p),
            self.snapshot_classes.store().state().iter().map(|c| &**c),
        )
    }
}
