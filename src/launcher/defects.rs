//! Known upstream defects: renderings of a KubeVirt release that are known to hurt, flagged as
//! [`Warning`]s on an explanation. `explain-overhead` reproduces what the selected release
//! renders ([`super::renderer::render_compute_resources`]) and warns; `run-controller` fixes
//! what the API server would reject ([`super::renderer::render_admissible_compute_resources`]).
//!
//! | id | releases | what | upstream |
//! |---|---|---|---|
//! | [`GUEST_ONLY_NO_PAGE_TABLES`] | v1.6.4, v1.7.0 … main | a VMI with `memory.guest` and no `requests.memory` gets a zero page-table term (≈ 320Mi short at 160Gi) | PR 15896 (v1.7 cherry-pick 16032) moved the request out of virt-api; `GetMemoryOverhead` still reads the request |
//! | [`HUGEPAGES_OVERCOMMITTED`] | v1.0.0 … v1.9.0 | with hugepages and memoryOvercommit ≠ 100 the `hugepages-<size>` request is scaled and no longer a multiple of the page size: the pod is rejected | fixed by PR 18880 (hugepages are never overcommitted) |

use super::resources::ComputeResources;
use crate::api::quantity::ParsedQuantity;
use crate::api::resources::VmiResources;
use crate::api::vmi::VirtualMachineInstance;
use crate::config::ClusterSettings;
use serde::{Deserialize, Serialize};

/// A known upstream defect that hits this VMI with the selected KubeVirt release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Warning {
    /// Stable machine name ([`GUEST_ONLY_NO_PAGE_TABLES`], [`HUGEPAGES_OVERCOMMITTED`]).
    pub id: String,
    /// What goes wrong for this VMI, with its numbers.
    pub message: String,
    /// The upstream change that introduced, discussed or fixed it.
    pub upstream: String,
    /// Bytes the overhead falls short by, where the defect has a size (the missing page tables).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortfall_bytes: Option<i64>,
}

/// `memory.guest` without `requests.memory`: no page-table term (v1.6.4, v1.7.0 and later).
pub(crate) const GUEST_ONLY_NO_PAGE_TABLES: &str = "guestOnlyNoPageTables";
/// Hugepages scaled by memoryOvercommit, off the page-size grid (v1.0.0 … v1.9.0).
pub(crate) const HUGEPAGES_OVERCOMMITTED: &str = "hugepagesOvercommitted";

/// The known defects that hit `vmi` (as admitted: after [`crate::api::defaults`]) whose parsed
/// quantities are `resources` and whose `compute` container `settings.kubevirt_version`
/// renders as `rendered`.
pub(crate) fn known_defects(
    vmi: &VirtualMachineInstance,
    resources: &VmiResources,
    settings: &ClusterSettings,
    rendered: &ComputeResources,
) -> Vec<Warning> {
    let version = settings.kubevirt_version;
    let formula = version.formula();
    let mut warnings = Vec::new();
    let no_request = resources.request("memory").is_none_or(|q| q.is_zero());
    if let Some(guest) = resources.guest.filter(|g| g.value() > 0)
        && no_request
        && !formula.admission_sets_memory_request.value
    {
        // What the term would be had the request been set to memory.guest (hypervisorbackend.go
        // page-table rule: ScaledValue(Kilo) × 1000 / 512).
        let missing = (i128::from(guest.scaled_kilo()) * 1000 / 512) as i64;
        warnings.push(Warning {
            id: GUEST_ONLY_NO_PAGE_TABLES.into(),
            message: format!(
                "memory.guest {guest} without resources.requests.memory: KubeVirt {version} sizes the \
                 page-table term from requests.memory only, so the overhead is {missing} bytes \
                 ({:.1}Mi) short of the guest's page tables; set requests.memory to avoid an OOM kill",
                missing as f64 / (1024.0 * 1024.0)
            ),
            upstream: "kubevirt/kubevirt PR 15896 (in v1.7.0 as cherry-pick PR 16032, backported to v1.6.4) stopped \
                       virt-api copying memory.guest into requests.memory; GetMemoryOverhead still \
                       reads requests.memory (v1.9.0 pkg/hypervisor/kvm/hypervisorbackend.go:71-78); \
                       not fixed upstream"
                .into(),
            shortfall_bytes: Some(missing),
        });
    }
    let page = vmi
        .spec
        .hugepage_size()
        .and_then(|p| ParsedQuantity::parse(p).ok())
        .map(|p| p.value())
        .filter(|p| *p > 0);
    if let Some(page) = page
        && formula.hugepages_overcommitted.value
        && settings.memory_overcommit != 100
    {
        for (name, q) in &rendered.requests {
            let Some(bytes) = name
                .strip_prefix("hugepages-")
                .and_then(|_| ParsedQuantity::parse(&q.0).ok())
                .map(|p| p.value())
            else {
                continue;
            };
            if bytes % page != 0 {
                warnings.push(Warning {
                    id: HUGEPAGES_OVERCOMMITTED.into(),
                    message: format!(
                        "{name} = {bytes} bytes is not a multiple of the page size ({page} bytes): \
                         KubeVirt {version} scales the memory request it derives from memory.guest \
                         or the page size by memoryOvercommit {}%, hugepages included; the API \
                         server rejects the pod",
                        settings.memory_overcommit
                    ),
                    upstream: "kubevirt/kubevirt PR 18880 (hugepages are never overcommitted), \
                               after v1.9.0"
                        .into(),
                    shortfall_bytes: None,
                });
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::KubeVirtObject;
    use crate::kubevirt_version::KubeVirtVersion;
    use crate::launcher::explain::{Explanation, explain};
    use crate::launcher::overhead::MIB;
    use serde_json::json;

    fn explain_at(v: KubeVirtVersion, overcommit: u32, domain: serde_json::Value) -> Explanation {
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {"domain": domain}}))
        .unwrap();
        let settings = ClusterSettings {
            kubevirt_version: v,
            memory_overcommit: overcommit,
            ..Default::default()
        };
        explain(&KubeVirtObject::Vmi(Box::new(vmi)), "default", &settings).unwrap()
    }

    fn term(e: &Explanation, name: &str) -> i64 {
        e.overhead
            .terms
            .iter()
            .find(|t| t.name == name)
            .map_or(0, |t| t.bytes)
    }

    fn ids(e: &Explanation) -> Vec<&str> {
        e.warnings.iter().map(|w| w.id.as_str()).collect()
    }

    /// A guest-only 160Gi VMI: from v1.7 (and v1.6.4) no page-table term (≈ 320Mi short) and a
    /// warning; before, virt-api copied memory.guest into requests.memory (v1.6.0
    /// defaults.go:324-348), so the term is there and nothing is flagged.
    #[test]
    fn guest_only_vmis_lose_page_tables_from_v1_7() {
        let domain = json!({"memory": {"guest": "160Gi"}});
        let expected_pt = ((160i64 << 30) + 999) / 1000 * 1000 / 512;
        assert!((expected_pt - 320 * MIB).abs() < MIB);
        for v in KubeVirtVersion::ALL {
            let e = explain_at(v, 100, domain.clone());
            assert_eq!(e.kubevirt_version, v);
            if v.formula().admission_sets_memory_request.value {
                assert_eq!(term(&e, "pageTables"), expected_pt, "{v}");
                assert!(e.warnings.is_empty(), "{v}: {:?}", e.warnings);
                assert_eq!(e.compute_resources.requests["memory"].0, {
                    let r =
                        ParsedQuantity::parse("160Gi").unwrap().value() + e.overhead.total_bytes;
                    ParsedQuantity::from_units(r, crate::api::quantity::Format::BinarySI)
                        .to_quantity()
                        .0
                });
            } else {
                assert_eq!(term(&e, "pageTables"), 0, "{v}");
                assert_eq!(ids(&e), [GUEST_ONLY_NO_PAGE_TABLES], "{v}");
                let w = &e.warnings[0];
                assert!(
                    w.message
                        .contains(&format!("{expected_pt} bytes (320.0Mi)")),
                    "{}",
                    w.message
                );
                assert!(w.upstream.contains("PR 15896"));
            }
        }
        // With a request there is nothing to flag.
        let e = explain_at(
            KubeVirtVersion::V1_9,
            100,
            json!({"memory": {"guest": "160Gi"}, "resources": {"requests": {"memory": "160Gi"}}}),
        );
        assert!(e.warnings.is_empty());
        assert_eq!(term(&e, "pageTables"), expected_pt);
    }

    /// Up to v1.6 virt-api scaled the copied request by memoryOvercommit (defaults.go:339-345):
    /// the page tables follow the scaled request.
    #[test]
    fn v1_6_admission_scales_the_copied_request() {
        let e = explain_at(
            KubeVirtVersion::V1_6,
            200,
            json!({"memory": {"guest": "8Gi"}}),
        );
        assert_eq!(
            term(&e, "pageTables"),
            ((4i64 << 30) + 999) / 1000 * 1000 / 512
        );
        let e = explain_at(
            KubeVirtVersion::V1_9,
            200,
            json!({"memory": {"guest": "8Gi"}}),
        );
        let request = e.compute_resources.request_value("memory").unwrap();
        assert_eq!(request, (4i64 << 30) + e.overhead.total_bytes);
    }

    /// Hugepages with memoryOvercommit 150: every release up to v1.9.0 renders hugepages-1Gi =
    /// 2Gi × 100/150, not a multiple of 1Gi (v1.5/v1.6 through virt-api, v1.7+ through
    /// WithMemoryRequests) and is warned about; main (PR 18880) renders 2Gi.
    #[test]
    fn hugepages_overcommit_is_reproduced_and_flagged_until_pr_18880() {
        let domain = json!({"memory": {"guest": "2Gi", "hugepages": {"pageSize": "1Gi"}}});
        let scaled = ((2i64 << 30) * 100 / 150).to_string();
        for v in KubeVirtVersion::ALL {
            let e = explain_at(v, 150, domain.clone());
            let hp = &e.compute_resources.requests["hugepages-1Gi"].0;
            if v == KubeVirtVersion::Main {
                assert_eq!(hp, "2Gi");
                // (Guest-only, so the page-table warning still applies.)
                assert_eq!(ids(&e), [GUEST_ONLY_NO_PAGE_TABLES]);
            } else {
                assert_eq!(hp, &scaled, "{v}");
                assert!(ids(&e).contains(&HUGEPAGES_OVERCOMMITTED), "{v}");
                let w = e
                    .warnings
                    .iter()
                    .find(|w| w.id == HUGEPAGES_OVERCOMMITTED)
                    .unwrap();
                assert!(w.upstream.contains("PR 18880"));
                assert!(w.message.contains(&scaled), "{}", w.message);
            }
            // Without overcommit nothing is scaled or flagged.
            let e = explain_at(v, 100, domain.clone());
            assert_eq!(
                e.compute_resources.requests["hugepages-1Gi"].0, "2Gi",
                "{v}"
            );
            assert!(!ids(&e).contains(&HUGEPAGES_OVERCOMMITTED));
        }
    }

    /// Item 7 of issue 12 end to end: virt-api's SetDefaultGuestCPUTopology (v1.9.0
    /// pkg/defaults/defaults.go:285-308) treats an all-zero topology as unset and sets sockets
    /// from the CPU limit, else the request (here 4), cores = threads = 1: 4 vCPUs. Without a CPU
    /// request or limit it sets 1 socket.
    #[test]
    fn all_zero_topology_through_admission() {
        let e = explain_at(
            KubeVirtVersion::V1_9,
            100,
            json!({"cpu": {"cores": 0, "sockets": 0, "threads": 0},
                   "resources": {"requests": {"memory": "1Gi", "cpu": "4"}}}),
        );
        assert_eq!(term(&e, "vcpus"), 4 * 8 * MIB);
        let e = explain_at(
            KubeVirtVersion::V1_9,
            100,
            json!({"cpu": {"cores": 0, "sockets": 0, "threads": 0},
                   "resources": {"requests": {"memory": "1Gi"}}}),
        );
        assert_eq!(term(&e, "vcpus"), 8 * MIB);
    }

    #[test]
    fn warnings_serialize_as_id_message_upstream() {
        let e = explain_at(
            KubeVirtVersion::V1_9,
            100,
            json!({"memory": {"guest": "1Gi"}}),
        );
        let j = serde_json::to_value(&e).unwrap();
        assert_eq!(j["kubevirtVersion"], "v1.9.0");
        let w = &j["warnings"][0];
        assert_eq!(w["id"], GUEST_ONLY_NO_PAGE_TABLES);
        assert!(w["message"].is_string() && w["upstream"].is_string());
        let clean = explain_at(
            KubeVirtVersion::V1_9,
            100,
            json!({"resources": {"requests": {"memory": "1Gi"}}}),
        );
        assert!(
            serde_json::to_value(&clean)
                .unwrap()
                .get("warnings")
                .is_none()
        );
    }
}
