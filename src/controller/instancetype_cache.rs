//! The four instancetype informers the VM controller reads (KubeVirt's virt-controller gives its
//! instancetype controller these stores, pkg/virt-controller/watch/application.go and
//! pkg/instancetype/controller/vm/controller.go:87-101). No handlers: a change of an instancetype
//! does not requeue VMs, as in KubeVirt (a VM keeps the spec it stashed).

use crate::api::instancetype::{
    VirtualMachineClusterInstancetype, VirtualMachineClusterPreference, VirtualMachineInstancetype,
    VirtualMachinePreference,
};
use crate::instancetype::Resource;
use crate::runtime::informer::Informer;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;

/// The four stores; disabled (empty, synced) when the cluster does not serve the group.
#[derive(Clone)]
pub struct InstancetypeCaches {
    pub instancetypes: Informer<VirtualMachineInstancetype>,
    pub cluster_instancetypes: Informer<VirtualMachineClusterInstancetype>,
    pub preferences: Informer<VirtualMachinePreference>,
    pub cluster_preferences: Informer<VirtualMachineClusterPreference>,
}

impl InstancetypeCaches {
    /// Never watching (unit tests, a cluster without the CRDs).
    pub(crate) fn disabled() -> Self {
        InstancetypeCaches {
            instancetypes: Informer::disabled("virtualmachineinstancetypes"),
            cluster_instancetypes: Informer::disabled("virtualmachineclusterinstancetypes"),
            preferences: Informer::disabled("virtualmachinepreferences"),
            cluster_preferences: Informer::disabled("virtualmachineclusterpreferences"),
        }
    }

    /// Every store completed its first list.
    pub(crate) fn has_synced(&self) -> bool {
        self.instancetypes.has_synced()
            && self.cluster_instancetypes.has_synced()
            && self.preferences.has_synced()
            && self.cluster_preferences.has_synced()
    }

    /// Wait for every store's first list.
    pub(crate) async fn wait_synced(&self) {
        self.instancetypes.wait_synced().await;
        self.cluster_instancetypes.wait_synced().await;
        self.preferences.wait_synced().await;
        self.cluster_preferences.wait_synced().await;
    }

    /// The cached object of `resource` named `name` (in `namespace` for the namespaced kinds),
    /// as JSON.
    pub(crate) fn get(
        &self,
        resource: Resource,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<serde_json::Value>> {
        let value = match resource {
            Resource::Instancetype => to_json(
                self.instancetypes
                    .store()
                    .get(&ObjectRef::new(name).within(namespace)),
            ),
            Resource::Preference => to_json(
                self.preferences
                    .store()
                    .get(&ObjectRef::new(name).within(namespace)),
            ),
            Resource::ClusterInstancetype => to_json(
                self.cluster_instancetypes
                    .store()
                    .get(&ObjectRef::new(name)),
            ),
            Resource::ClusterPreference => {
                to_json(self.cluster_preferences.store().get(&ObjectRef::new(name)))
            }
        };
        value.map(Arc::new)
    }
}

fn to_json<K: serde::Serialize>(object: Option<Arc<K>>) -> Option<serde_json::Value> {
    serde_json::to_value(object?.as_ref()).ok()
}
