//! `instancetype.kubevirt.io/v1beta1`: VirtualMachineInstancetype, VirtualMachineClusterInstancetype,
//! VirtualMachinePreference, VirtualMachineClusterPreference. The spec is kept raw: the
//! instancetype logic (`crate::instancetype`) reads it field by field, as KubeVirt's apply
//! functions do, and a ControllerRevision stores it whole.
//!
//! Schema: KubeVirt `staging/src/kubevirt.io/api/instancetype/v1beta1/types.go` (v1.9.0).

use super::common::Extra;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// The API group (api/instancetype/register.go:24).
pub const GROUP: &str = "instancetype.kubevirt.io";
/// The one version v1.9 serves and stores revisions in (`LatestVersion`, register.go:27).
pub const VERSION: &str = "v1beta1";
/// `GROUP/VERSION`.
pub const API_VERSION: &str = "instancetype.kubevirt.io/v1beta1";

macro_rules! instancetype_kind {
    ($(#[$doc:meta])* $ty:ident, $kind:literal, $plural:literal, $scope:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
        #[serde(rename_all = "camelCase")]
        pub struct $ty {
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub api_version: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub kind: Option<String>,
            #[serde(default)]
            pub metadata: ObjectMeta,
            #[serde(default)]
            pub spec: serde_json::Value,
            #[serde(flatten)]
            pub extra: Extra,
        }

        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = $scope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                GROUP.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                VERSION.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

instancetype_kind!(
    /// A namespaced instancetype.
    VirtualMachineInstancetype,
    "VirtualMachineInstancetype",
    "virtualmachineinstancetypes",
    k8s_openapi::NamespaceResourceScope
);
instancetype_kind!(
    /// A cluster-wide instancetype.
    VirtualMachineClusterInstancetype,
    "VirtualMachineClusterInstancetype",
    "virtualmachineclusterinstancetypes",
    k8s_openapi::ClusterResourceScope
);
instancetype_kind!(
    /// A namespaced preference.
    VirtualMachinePreference,
    "VirtualMachinePreference",
    "virtualmachinepreferences",
    k8s_openapi::NamespaceResourceScope
);
instancetype_kind!(
    /// A cluster-wide preference.
    VirtualMachineClusterPreference,
    "VirtualMachineClusterPreference",
    "virtualmachineclusterpreferences",
    k8s_openapi::ClusterResourceScope
);
