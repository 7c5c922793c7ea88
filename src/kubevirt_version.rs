//! The KubeVirt releases whose overhead formula and launcher resources this crate reproduces,
//! and what differs between them: one [`Formula`] row per [`KubeVirtVersion`], each value with the
//! upstream source (tag, file, lines) it was read from.
//!
//! Selected by `explain-overhead --kubevirt-version`, or in cluster mode by the KubeVirt CR's
//! `status.observedKubeVirtVersion` ([`KubeVirtVersion::parse`]), and by
//! `run-controller --kubevirt-version`, which also picks the VM and VMI controllers' rules
//! (`ControllerRules`); [`KubeVirtVersion::V1_9`] is the default. A pre-release or dev build
//! (`v1.9.0-rc.1`, `v1.9.0-12-gabcdef`) uses its release's row. A patch release uses the row of the release it behaves like: every patch tag
//! was compared with `git show` (the overhead function, its constants and probe helper,
//! `WithMemoryRequests`, `WithHugePages`, `setDefaultResourceRequests`,
//! `SetDefaultGuestCPUTopology`, the passt memory): v1.7.1 … v1.7.4 and v1.8.1 … v1.8.4 are
//! identical to their .0, so they use it; the older branches got backports, hence the extra rows
//! v1.5.1 (v1.5.1, v1.5.2: vTPM fix), v1.5.3 (also the 100Mi before the ratio) and v1.6.4
//! (v1.6.4 … v1.6.6: PR 15896, the memory request moved to the renderer); v1.6.1 and v1.6.3 use
//! v1.6.0. v1.6.2 is refused: its renderer scaled every memory request by memoryOvercommit, a
//! user-set one included (a change reverted in v1.6.3), which is not modelled.
//!
//! Verified against the kubevirt/kubevirt git history (tags v1.5.0 … v1.9.0 and `main` at commit
//! d923fdb815, 2026-08-22) with `git show TAG:FILE`, and for v1.0.0, v1.0.1, v1.1.0, v1.1.1,
//! v1.2.0, v1.2.2, v1.3.0, v1.3.1, v1.4.0 and v1.4.1 against the module source the Go module
//! proxy serves (`GetMemoryOverhead`, `VMIResourcePredicates`, `setDefaultResourceRequests`,
//! `SetDefaultGuestCPUTopology` and the helpers they call compared per tag; each patch release
//! listed is identical to its .0 in them). v1.0.2+, v1.1.2+, v1.2.1, v1.2.3+, v1.3.2+ and v1.4.2+
//! are not served there and use their minor's row unverified.
//!
//! Before v1.3 (`BeforeV1_3`): every interface with the `passt` binding method and no `ports`
//! adds 800Mi before the ratio (v1.2.0 renderresources.go:395-401; gone in v1.3.0); network
//! binding plugin memory is not counted (v1.3.0 template.go:1460 added it); v1.0.x has no
//! dedicated-CPU / Guaranteed-QoS term (v1.1.0 renderresources.go:407-409 added it, after the
//! ratio); up to v1.1.x the arm64 term reads the cluster's architecture only (v1.1.0
//! template.go:1396), from v1.2.0 the VMI's `spec.architecture` first (v1.2.0
//! template.go:1465-1470).
//!
//! | what | v1.0.0 | v1.1.0 | v1.2.0 | v1.3.0, v1.4.0 | v1.4.1 | v1.5.0 | v1.5.1 | v1.5.3 | v1.6.0 | v1.6.4 | v1.7 | v1.8 | v1.9 | main |
//! |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
//! | virtlogd / virtqemud | 20 / 35Mi | 20 / 35Mi | 20 / 35Mi | 20 / 35Mi | 20 / 40Mi | 25 / 40Mi | … | … | … | … | … | … | … | 25 / 40Mi |
//! | QEMU estimate | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 50Mi (PR 18388) |
//! | video RAM | 16Mi | 16Mi | 16Mi | 16Mi | 16Mi | 16Mi | 16Mi | 16Mi | 32Mi (PR 14673) | 32Mi | 32Mi | 32Mi | 32Mi | 32Mi |
//! | dedicated/Guaranteed 100Mi | none | after | after | after | after | after the ratio | after | before (PR 14933) | before | before | before | before | before | before |
//! | `reservedOverhead.addedOverhead` | – | – | – | – | – | – | – | – | – | – | – | yes (PR 16384, v1.8 cherry-pick 16956) | yes | yes |
//! | SEV term counts SNP | – | – | – | – | – | – | – | – | – | – | yes (PR 14845) | yes | yes | yes |
//! | vTPM term honours `enabled: false` | – | – | – | – | yes (PR 14316 backported) | – | yes (PR 14316) | yes | yes | yes | yes | yes | yes | yes |
//! | passt core binding 250Mi | – | – | – | – | – | – | – | – | – | – | – | yes | yes | yes |
//! | `memory.guest` → `requests.memory` in virt-api | yes | yes | yes | yes | yes | yes (× 100/overcommit) | yes | yes | yes | no (PR 15896) | no (cherry-pick 16032) | no | no | no |
//! | 800Mi per `passt` interface without ports | yes | yes | yes | – | – | – | – | – | – | – | – | – | – | – |
//! | hugepages scaled by memoryOvercommit | yes | yes | yes | yes | yes | yes (virt-api) | yes | yes | yes | yes (renderer) | yes | yes | yes | no (PR 18880) |
//!
//! Two corrections to what issue 12 assumed: `reservedOverhead.addedOverhead` is already in
//! v1.8.0 (not only v1.9), and the `memory.guest` copy left virt-api before v1.7.0 (PR 15896 was
//! cherry-picked into release-1.7, and into release-1.6 for v1.6.4), so guest-only VMIs lose
//! their page-table term from v1.7.0 and v1.6.4.
//! PR 18880 is merged upstream but after the `main` commit above: its content was read from its
//! head commit 06135ce40d (renderresources.go `WithMemoryRequests`: overcommit skipped when
//! hugepages are set), and the `main` row includes it.
//!
//! Not modelled per version (no effect on memory): the device rules `WithTDX`,
//! `WithNetworksDRA` and `WithIOMMUFD` exist from v1.9 only; every row renders them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A KubeVirt release with its own row of the formula table.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub enum KubeVirtVersion {
    /// v1.0.0 and v1.0.1: no dedicated-CPU term; 800Mi per `passt` interface without ports.
    #[serde(rename = "v1.0.0")]
    V1_0,
    /// v1.1.0 and v1.1.1: the dedicated-CPU 100Mi, after the ratio (the arm64 term still
    /// reads the cluster's architecture only).
    #[serde(rename = "v1.1.0")]
    V1_1,
    /// v1.2.0 and v1.2.2: the arm64 term reads the VMI's `spec.architecture` first.
    #[serde(rename = "v1.2.0")]
    V1_2,
    /// v1.3.0 and v1.3.1: virtlogd 20Mi, virtqemud 35Mi.
    #[serde(rename = "v1.3.0")]
    V1_3,
    /// v1.4.0: the formula of v1.3.
    #[serde(rename = "v1.4.0")]
    V1_4,
    /// v1.4.1: virtqemud 40Mi, and the vTPM term honours `enabled: false` (PR 14316 backported).
    #[serde(rename = "v1.4.1")]
    V1_4_1,
    #[serde(rename = "v1.5.0")]
    V1_5,
    /// v1.5.1 and v1.5.2: the vTPM fix backported (PR 14316).
    #[serde(rename = "v1.5.1")]
    V1_5_1,
    /// v1.5.3: also the 100Mi moved before the ratio (PR 14933 backported).
    #[serde(rename = "v1.5.3")]
    V1_5_3,
    /// v1.6.0, v1.6.1 and v1.6.3.
    #[serde(rename = "v1.6.0")]
    V1_6,
    /// v1.6.4 … v1.6.6: PR 15896 backported (the memory request moved to the renderer).
    #[serde(rename = "v1.6.4")]
    V1_6_4,
    #[serde(rename = "v1.7.0")]
    V1_7,
    #[serde(rename = "v1.8.0")]
    V1_8,
    /// The default: the release this crate re-implements.
    #[default]
    #[serde(rename = "v1.9.0")]
    V1_9,
    /// Upstream `main` (see the module docs for the commit).
    #[serde(rename = "main")]
    Main,
}

/// A version string that names no row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVersion {
    /// The text given.
    pub given: String,
    /// Why a release that exists is not modelled (`None`: no such release known).
    pub not_modelled: Option<&'static str>,
}

impl fmt::Display for UnknownVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.not_modelled {
            Some(why) => write!(f, "KubeVirt {:?} is not modelled: {why}; ", self.given)?,
            None => write!(f, "unknown KubeVirt version {:?}: ", self.given)?,
        }
        write!(
            f,
            "known versions are {} (a patch release uses the row of the release it behaves like: \
             v1.8.2 → v1.8.0, v1.6.5 → v1.6.4)",
            KubeVirtVersion::known_list()
        )
    }
}

impl std::error::Error for UnknownVersion {}

/// A value of the table and where upstream it comes from (`TAG:FILE:LINES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: &'static str,
}

const fn s<T>(value: T, source: &'static str) -> Sourced<T> {
    Sourced { value, source }
}

/// Where each term of `GetMemoryOverhead` is, in one release (`TAG:FILE:LINES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSources {
    pub page_tables: &'static str,
    pub processes: &'static str,
    pub vcpus: &'static str,
    pub io_thread: &'static str,
    pub video_ram: &'static str,
    pub arm64: &'static str,
    pub vfio: &'static str,
    pub downward_metrics: &'static str,
    pub exec_probes: &'static str,
    pub sev: &'static str,
    pub tpm: &'static str,
    pub dedicated: &'static str,
    pub reserved_overhead: &'static str,
    pub ratio: &'static str,
    pub network: &'static str,
}

/// One row of the table: what a release's formula and renderer do differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Formula {
    /// The QEMU process estimate (`QemuOverhead`), bytes.
    pub qemu_bytes: Sourced<i64>,
    /// The virtlogd process estimate (`VirtlogdOverhead`), bytes.
    pub virtlogd_bytes: Sourced<i64>,
    /// The virtqemud process estimate (`VirtqemudOverhead`), bytes.
    pub virtqemud_bytes: Sourced<i64>,
    /// The video RAM term, bytes.
    pub video_ram_bytes: Sourced<i64>,
    /// The dedicated-CPU / Guaranteed-QoS 100Mi is added after `additionalGuestMemoryOverheadRatio`
    /// (so it is not multiplied).
    pub dedicated_after_ratio: Sourced<bool>,
    /// `memory.reservedOverhead.addedOverhead` is added.
    pub reserved_overhead: Sourced<bool>,
    /// The 256Mi SEV term also applies to `launchSecurity.snp`.
    pub sev_counts_snp: Sourced<bool>,
    /// The vTPM term needs `tpm.enabled` unset or true (before: any `tpm` device).
    pub tpm_honours_enabled: Sourced<bool>,
    /// The passt core binding adds 250Mi (`pkg/network/resources/memory.go`).
    pub passt_memory: Sourced<bool>,
    /// virt-api's `setDefaultResourceRequests` copies the memory limit, else `memory.guest`, else
    /// the hugepage size (× 100 / memoryOvercommit) into `requests.memory`; later releases leave
    /// the request unset and the renderer's `WithMemoryRequests` derives it.
    pub admission_sets_memory_request: Sourced<bool>,
    /// A request derived from `memory.guest`/the hugepage size is scaled by memoryOvercommit even
    /// with hugepages (so `hugepages-<size>` is no longer a multiple of the page size).
    pub hugepages_overcommitted: Sourced<bool>,
    /// What the releases before v1.3.0 did differently (`None` from v1.3.0 on).
    pub(crate) before_v1_3: Option<BeforeV1_3>,
    /// Where each term is in this release.
    pub terms: TermSources,
}

/// The rules of v1.0.x … v1.2.x that v1.3.0 changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BeforeV1_3 {
    /// The dedicated-CPU / Guaranteed-QoS 100Mi exists (from v1.1.0; where it goes is
    /// [`Formula::dedicated_after_ratio`]).
    pub(crate) dedicated_term: Sourced<bool>,
    /// Added before the ratio for each interface with the `passt` binding method and no
    /// `ports` (removed in v1.3.0), bytes.
    pub(crate) passt_without_ports_bytes: Sourced<i64>,
    /// The arm64 term reads the VMI's `spec.architecture` first (from v1.2.0); before, only the
    /// cluster's architecture.
    pub(crate) arm64_reads_vmi_architecture: Sourced<bool>,
    /// Where the launcher overhead is taken without network binding plugin memory (the
    /// plugins' `computeResourceOverhead` is counted from v1.3.0).
    pub(crate) no_binding_plugin_memory: &'static str,
}

const V1_0: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.0.0:pkg/virt-controller/services/template.go:128",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.0.0:pkg/virt-controller/services/template.go:126",
    ),
    virtqemud_bytes: s(
        35 << 20,
        "v1.0.0:pkg/virt-controller/services/template.go:127",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:338-340",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:288-397 (no such term)",
    ),
    reserved_overhead: s(
        false,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:288-397 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:366; pkg/util/util.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:372",
    ),
    passt_memory: s(
        false,
        "v1.0.0:pkg/virt-controller/services/renderresources.go:376-382 (the 800Mi rule only)",
    ),
    admission_sets_memory_request: s(true, "v1.0.0:pkg/virt-api/webhooks/defaults.go:118-171"),
    hugepages_overcommitted: s(true, "v1.0.0:pkg/virt-api/webhooks/defaults.go:149-156"),
    before_v1_3: Some(BeforeV1_3 {
        dedicated_term: s(
            false,
            "v1.0.0:pkg/virt-controller/services/renderresources.go:288-397 (no such term)",
        ),
        passt_without_ports_bytes: s(
            800 << 20,
            "v1.0.0:pkg/virt-controller/services/renderresources.go:376-382",
        ),
        arm64_reads_vmi_architecture: s(
            false,
            "v1.0.0:pkg/virt-controller/services/template.go:1350-1351",
        ),
        no_binding_plugin_memory: "v1.0.0:pkg/virt-controller/services/template.go:1350-1351",
    }),
    terms: TermSources {
        page_tables: "v1.0.0:pkg/virt-controller/services/renderresources.go:295-297",
        processes: "v1.0.0:pkg/virt-controller/services/template.go:124-128; renderresources.go:302-306",
        vcpus: "v1.0.0:pkg/virt-controller/services/renderresources.go:308-332",
        io_thread: "v1.0.0:pkg/virt-controller/services/renderresources.go:335",
        video_ram: "v1.0.0:pkg/virt-controller/services/renderresources.go:338-340",
        arm64: "v1.0.0:pkg/virt-controller/services/renderresources.go:345-347",
        vfio: "v1.0.0:pkg/virt-controller/services/renderresources.go:352-354; pkg/util/util.go IsVFIOVMI",
        downward_metrics: "v1.0.0:pkg/virt-controller/services/renderresources.go:358-360",
        exec_probes: "v1.0.0:pkg/virt-controller/services/renderresources.go:362; template.go:1068-1074",
        sev: "v1.0.0:pkg/virt-controller/services/renderresources.go:366-368",
        tpm: "v1.0.0:pkg/virt-controller/services/renderresources.go:372-374",
        dedicated: "v1.0.0:pkg/virt-controller/services/renderresources.go:288-397 (no such term)",
        reserved_overhead: "",
        ratio: "v1.0.0:pkg/virt-controller/services/renderresources.go:384-394,649",
        network: "v1.0.0:pkg/virt-controller/services/template.go:1350-1351 (no binding plugin memory); renderresources.go:376-382",
    },
};

const V1_1: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.1.0:pkg/virt-controller/services/template.go:126",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.1.0:pkg/virt-controller/services/template.go:124",
    ),
    virtqemud_bytes: s(
        35 << 20,
        "v1.1.0:pkg/virt-controller/services/template.go:125",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:349-351",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:395-405,407-409",
    ),
    reserved_overhead: s(
        false,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:299-412 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:377; pkg/util/util.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:383",
    ),
    passt_memory: s(
        false,
        "v1.1.0:pkg/virt-controller/services/renderresources.go:387-393 (the 800Mi rule only)",
    ),
    admission_sets_memory_request: s(true, "v1.1.0:pkg/virt-api/webhooks/defaults.go:137-190"),
    hugepages_overcommitted: s(true, "v1.1.0:pkg/virt-api/webhooks/defaults.go:168-175"),
    before_v1_3: Some(BeforeV1_3 {
        dedicated_term: s(
            true,
            "v1.1.0:pkg/virt-controller/services/renderresources.go:407-409",
        ),
        passt_without_ports_bytes: s(
            800 << 20,
            "v1.1.0:pkg/virt-controller/services/renderresources.go:387-393",
        ),
        arm64_reads_vmi_architecture: s(
            false,
            "v1.1.0:pkg/virt-controller/services/template.go:1395-1396",
        ),
        no_binding_plugin_memory: "v1.1.0:pkg/virt-controller/services/template.go:1395-1396",
    }),
    terms: TermSources {
        page_tables: "v1.1.0:pkg/virt-controller/services/renderresources.go:306-308",
        processes: "v1.1.0:pkg/virt-controller/services/template.go:122-126; renderresources.go:313-317",
        vcpus: "v1.1.0:pkg/virt-controller/services/renderresources.go:319-343",
        io_thread: "v1.1.0:pkg/virt-controller/services/renderresources.go:346",
        video_ram: "v1.1.0:pkg/virt-controller/services/renderresources.go:349-351",
        arm64: "v1.1.0:pkg/virt-controller/services/renderresources.go:356-358",
        vfio: "v1.1.0:pkg/virt-controller/services/renderresources.go:363-365; pkg/util/util.go IsVFIOVMI",
        downward_metrics: "v1.1.0:pkg/virt-controller/services/renderresources.go:369-371",
        exec_probes: "v1.1.0:pkg/virt-controller/services/renderresources.go:373; template.go:1081-1087",
        sev: "v1.1.0:pkg/virt-controller/services/renderresources.go:377-379",
        tpm: "v1.1.0:pkg/virt-controller/services/renderresources.go:383-385",
        dedicated: "v1.1.0:pkg/virt-controller/services/renderresources.go:407-409",
        reserved_overhead: "",
        ratio: "v1.1.0:pkg/virt-controller/services/renderresources.go:395-405,704",
        network: "v1.1.0:pkg/virt-controller/services/template.go:1395-1396 (no binding plugin memory); renderresources.go:387-393",
    },
};

const V1_2: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.2.0:pkg/virt-controller/services/template.go:127",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.2.0:pkg/virt-controller/services/template.go:125",
    ),
    virtqemud_bytes: s(
        35 << 20,
        "v1.2.0:pkg/virt-controller/services/template.go:126",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:357-359",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:403-413,415-417",
    ),
    reserved_overhead: s(
        false,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:307-420 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:385; pkg/util/util.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:391",
    ),
    passt_memory: s(
        false,
        "v1.2.0:pkg/virt-controller/services/renderresources.go:395-401 (the 800Mi rule only)",
    ),
    admission_sets_memory_request: s(true, "v1.2.0:pkg/virt-api/webhooks/defaults.go:137-190"),
    hugepages_overcommitted: s(true, "v1.2.0:pkg/virt-api/webhooks/defaults.go:168-175"),
    before_v1_3: Some(BeforeV1_3 {
        dedicated_term: s(
            true,
            "v1.2.0:pkg/virt-controller/services/renderresources.go:415-417",
        ),
        passt_without_ports_bytes: s(
            800 << 20,
            "v1.2.0:pkg/virt-controller/services/renderresources.go:395-401",
        ),
        arm64_reads_vmi_architecture: s(
            true,
            "v1.2.0:pkg/virt-controller/services/template.go:1464-1470",
        ),
        no_binding_plugin_memory: "v1.2.0:pkg/virt-controller/services/template.go:1464-1470",
    }),
    terms: TermSources {
        page_tables: "v1.2.0:pkg/virt-controller/services/renderresources.go:314-316",
        processes: "v1.2.0:pkg/virt-controller/services/template.go:123-127; renderresources.go:321-325",
        vcpus: "v1.2.0:pkg/virt-controller/services/renderresources.go:327-351",
        io_thread: "v1.2.0:pkg/virt-controller/services/renderresources.go:354",
        video_ram: "v1.2.0:pkg/virt-controller/services/renderresources.go:357-359",
        arm64: "v1.2.0:pkg/virt-controller/services/renderresources.go:364-366",
        vfio: "v1.2.0:pkg/virt-controller/services/renderresources.go:371-373; pkg/util/util.go IsVFIOVMI",
        downward_metrics: "v1.2.0:pkg/virt-controller/services/renderresources.go:377-379",
        exec_probes: "v1.2.0:pkg/virt-controller/services/renderresources.go:381; template.go:1150-1156",
        sev: "v1.2.0:pkg/virt-controller/services/renderresources.go:385-387",
        tpm: "v1.2.0:pkg/virt-controller/services/renderresources.go:391-393",
        dedicated: "v1.2.0:pkg/virt-controller/services/renderresources.go:415-417",
        reserved_overhead: "",
        ratio: "v1.2.0:pkg/virt-controller/services/renderresources.go:403-413,712",
        network: "v1.2.0:pkg/virt-controller/services/template.go:1464-1470 (no binding plugin memory); renderresources.go:395-401",
    },
};

const V1_3: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.3.0:pkg/virt-controller/services/template.go:124",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.3.0:pkg/virt-controller/services/template.go:122",
    ),
    virtqemud_bytes: s(
        35 << 20,
        "v1.3.0:pkg/virt-controller/services/template.go:123",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.3.0:pkg/virt-controller/services/renderresources.go:353-355",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.3.0:pkg/virt-controller/services/renderresources.go:391-405",
    ),
    reserved_overhead: s(
        false,
        "v1.3.0:pkg/virt-controller/services/renderresources.go:303-408 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.3.0:pkg/virt-controller/services/renderresources.go:381; pkg/util/amd64.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.3.0:pkg/virt-controller/services/renderresources.go:387",
    ),
    passt_memory: s(
        false,
        "v1.3.0:pkg/virt-controller/services/template.go:1460 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.3.0:pkg/virt-api/webhooks/defaults.go:236-268"),
    hugepages_overcommitted: s(true, "v1.3.0:pkg/virt-api/webhooks/defaults.go:258-263"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.3.0:pkg/virt-controller/services/renderresources.go:310-312",
        processes: "v1.3.0:pkg/virt-controller/services/template.go:120-124; renderresources.go:317-321",
        vcpus: "v1.3.0:pkg/virt-controller/services/renderresources.go:325-347",
        io_thread: "v1.3.0:pkg/virt-controller/services/renderresources.go:350",
        video_ram: "v1.3.0:pkg/virt-controller/services/renderresources.go:353-355",
        arm64: "v1.3.0:pkg/virt-controller/services/renderresources.go:360-362",
        vfio: "v1.3.0:pkg/virt-controller/services/renderresources.go:367-369",
        downward_metrics: "v1.3.0:pkg/virt-controller/services/renderresources.go:373-375",
        exec_probes: "v1.3.0:pkg/virt-controller/services/renderresources.go:377; template.go:1155-1176",
        sev: "v1.3.0:pkg/virt-controller/services/renderresources.go:381-383",
        tpm: "v1.3.0:pkg/virt-controller/services/renderresources.go:387-389",
        dedicated: "v1.3.0:pkg/virt-controller/services/renderresources.go:403-405",
        reserved_overhead: "",
        ratio: "v1.3.0:pkg/virt-controller/services/renderresources.go:392-401,685",
        network: "v1.3.0:pkg/virt-controller/services/template.go:1460; pkg/network/netbinding/memory.go:30-80",
    },
};

const V1_4: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.4.0:pkg/virt-controller/services/template.go:117",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.4.0:pkg/virt-controller/services/template.go:115",
    ),
    virtqemud_bytes: s(
        35 << 20,
        "v1.4.0:pkg/virt-controller/services/template.go:116",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.4.0:pkg/virt-controller/services/renderresources.go:353-355",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.4.0:pkg/virt-controller/services/renderresources.go:391-405",
    ),
    reserved_overhead: s(
        false,
        "v1.4.0:pkg/virt-controller/services/renderresources.go:303-408 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.4.0:pkg/virt-controller/services/renderresources.go:381; pkg/util/amd64.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.4.0:pkg/virt-controller/services/renderresources.go:387",
    ),
    passt_memory: s(
        false,
        "v1.4.0:pkg/virt-controller/services/template.go:1456-1460 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.4.0:pkg/defaults/defaults.go:303-335"),
    hugepages_overcommitted: s(true, "v1.4.0:pkg/defaults/defaults.go:325-330"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.4.0:pkg/virt-controller/services/renderresources.go:310-312",
        processes: "v1.4.0:pkg/virt-controller/services/template.go:113-117; renderresources.go:317-321",
        vcpus: "v1.4.0:pkg/virt-controller/services/renderresources.go:325-347",
        io_thread: "v1.4.0:pkg/virt-controller/services/renderresources.go:350",
        video_ram: "v1.4.0:pkg/virt-controller/services/renderresources.go:353-355",
        arm64: "v1.4.0:pkg/virt-controller/services/renderresources.go:360-362",
        vfio: "v1.4.0:pkg/virt-controller/services/renderresources.go:367-369",
        downward_metrics: "v1.4.0:pkg/virt-controller/services/renderresources.go:373-375",
        exec_probes: "v1.4.0:pkg/virt-controller/services/renderresources.go:377; template.go:1190-1211",
        sev: "v1.4.0:pkg/virt-controller/services/renderresources.go:381-383",
        tpm: "v1.4.0:pkg/virt-controller/services/renderresources.go:387-389",
        dedicated: "v1.4.0:pkg/virt-controller/services/renderresources.go:403-405",
        reserved_overhead: "",
        ratio: "v1.4.0:pkg/virt-controller/services/renderresources.go:392-401,685",
        network: "v1.4.0:pkg/virt-controller/services/template.go:1456-1460",
    },
};

const V1_4_1: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.4.1:pkg/virt-controller/services/template.go:117",
    ),
    virtlogd_bytes: s(
        20 << 20,
        "v1.4.1:pkg/virt-controller/services/template.go:115",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.4.1:pkg/virt-controller/services/template.go:116",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.4.1:pkg/virt-controller/services/renderresources.go:354-356",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.4.1:pkg/virt-controller/services/renderresources.go:392-406",
    ),
    reserved_overhead: s(
        false,
        "v1.4.1:pkg/virt-controller/services/renderresources.go:304-409 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.4.1:pkg/virt-controller/services/renderresources.go:382; pkg/util/amd64.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        true,
        "v1.4.1:pkg/virt-controller/services/renderresources.go:388 (tpm.HasDevice; PR 14316 backported)",
    ),
    passt_memory: s(
        false,
        "v1.4.1:pkg/virt-controller/services/template.go:1458-1462 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.4.1:pkg/defaults/defaults.go:312-344"),
    hugepages_overcommitted: s(true, "v1.4.1:pkg/defaults/defaults.go:334-339"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.4.1:pkg/virt-controller/services/renderresources.go:311-313",
        processes: "v1.4.1:pkg/virt-controller/services/template.go:113-117; renderresources.go:318-322",
        vcpus: "v1.4.1:pkg/virt-controller/services/renderresources.go:326-348",
        io_thread: "v1.4.1:pkg/virt-controller/services/renderresources.go:351",
        video_ram: "v1.4.1:pkg/virt-controller/services/renderresources.go:354-356",
        arm64: "v1.4.1:pkg/virt-controller/services/renderresources.go:361-363",
        vfio: "v1.4.1:pkg/virt-controller/services/renderresources.go:368-370",
        downward_metrics: "v1.4.1:pkg/virt-controller/services/renderresources.go:374-376",
        exec_probes: "v1.4.1:pkg/virt-controller/services/renderresources.go:378; template.go:1192-1213",
        sev: "v1.4.1:pkg/virt-controller/services/renderresources.go:382-384",
        tpm: "v1.4.1:pkg/virt-controller/services/renderresources.go:388-390",
        dedicated: "v1.4.1:pkg/virt-controller/services/renderresources.go:404-406",
        reserved_overhead: "",
        ratio: "v1.4.1:pkg/virt-controller/services/renderresources.go:393-402,686",
        network: "v1.4.1:pkg/virt-controller/services/template.go:1458-1462",
    },
};

const V1_5: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.5.0:pkg/virt-controller/services/template.go:118",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.5.0:pkg/virt-controller/services/template.go:116",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.5.0:pkg/virt-controller/services/template.go:117",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.5.0:pkg/virt-controller/services/renderresources.go:379-381",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.5.0:pkg/virt-controller/services/renderresources.go:417-431",
    ),
    reserved_overhead: s(
        false,
        "v1.5.0:pkg/virt-controller/services/renderresources.go:329-434 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.5.0:pkg/virt-controller/services/renderresources.go:407; pkg/util/amd64.go IsSEVVMI",
    ),
    tpm_honours_enabled: s(
        false,
        "v1.5.0:pkg/virt-controller/services/renderresources.go:413",
    ),
    passt_memory: s(
        false,
        "v1.5.0:pkg/virt-controller/services/template.go:1470-1474 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.5.0:pkg/defaults/defaults.go:303-335"),
    hugepages_overcommitted: s(true, "v1.5.0:pkg/defaults/defaults.go:325-330"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.5.0:pkg/virt-controller/services/renderresources.go:336-338",
        processes: "v1.5.0:pkg/virt-controller/services/template.go:114-118; renderresources.go:343-347",
        vcpus: "v1.5.0:pkg/virt-controller/services/renderresources.go:351-373",
        io_thread: "v1.5.0:pkg/virt-controller/services/renderresources.go:376",
        video_ram: "v1.5.0:pkg/virt-controller/services/renderresources.go:379-381",
        arm64: "v1.5.0:pkg/virt-controller/services/renderresources.go:386-388",
        vfio: "v1.5.0:pkg/virt-controller/services/renderresources.go:393-395",
        downward_metrics: "v1.5.0:pkg/virt-controller/services/renderresources.go:399-401",
        exec_probes: "v1.5.0:pkg/virt-controller/services/renderresources.go:403; template.go:1206-1227",
        sev: "v1.5.0:pkg/virt-controller/services/renderresources.go:407-409",
        tpm: "v1.5.0:pkg/virt-controller/services/renderresources.go:413-415",
        dedicated: "v1.5.0:pkg/virt-controller/services/renderresources.go:429-431",
        reserved_overhead: "",
        ratio: "v1.5.0:pkg/virt-controller/services/renderresources.go:418-427,711",
        network: "v1.5.0:pkg/virt-controller/services/template.go:1470-1474",
    },
};

const V1_5_1: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.5.1:pkg/virt-controller/services/template.go:118",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.5.1:pkg/virt-controller/services/template.go:116",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.5.1:pkg/virt-controller/services/template.go:117",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.5.1:pkg/virt-controller/services/renderresources.go:380-382",
    ),
    dedicated_after_ratio: s(
        true,
        "v1.5.1:pkg/virt-controller/services/renderresources.go:419-432",
    ),
    reserved_overhead: s(
        false,
        "v1.5.1:pkg/virt-controller/services/renderresources.go:330-435 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.5.1:pkg/virt-controller/services/renderresources.go:408",
    ),
    tpm_honours_enabled: s(
        true,
        "v1.5.1:pkg/virt-controller/services/renderresources.go:414",
    ),
    passt_memory: s(
        false,
        "v1.5.1:pkg/virt-controller/services/template.go:1483 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.5.1:pkg/defaults/defaults.go:302-340"),
    hugepages_overcommitted: s(true, "v1.5.1:pkg/defaults/defaults.go:334-340"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.5.1:pkg/virt-controller/services/renderresources.go:337-339",
        processes: "v1.5.1:pkg/virt-controller/services/template.go:114-118; renderresources.go:344-348",
        vcpus: "v1.5.1:pkg/virt-controller/services/renderresources.go:352-374",
        io_thread: "v1.5.1:pkg/virt-controller/services/renderresources.go:377",
        video_ram: "v1.5.1:pkg/virt-controller/services/renderresources.go:380-382",
        arm64: "v1.5.1:pkg/virt-controller/services/renderresources.go:387-389",
        vfio: "v1.5.1:pkg/virt-controller/services/renderresources.go:394-396",
        downward_metrics: "v1.5.1:pkg/virt-controller/services/renderresources.go:400-402",
        exec_probes: "v1.5.1:pkg/virt-controller/services/renderresources.go:404; template.go:1224-1238",
        sev: "v1.5.1:pkg/virt-controller/services/renderresources.go:408-410",
        tpm: "v1.5.1:pkg/virt-controller/services/renderresources.go:414-416",
        dedicated: "v1.5.1:pkg/virt-controller/services/renderresources.go:430-432",
        reserved_overhead: "",
        ratio: "v1.5.1:pkg/virt-controller/services/renderresources.go:419-428,712",
        network: "v1.5.1:pkg/virt-controller/services/template.go:1481-1485",
    },
};

const V1_5_3: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.5.3:pkg/virt-controller/services/template.go:118",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.5.3:pkg/virt-controller/services/template.go:116",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.5.3:pkg/virt-controller/services/template.go:117",
    ),
    video_ram_bytes: s(
        16 << 20,
        "v1.5.3:pkg/virt-controller/services/renderresources.go:372-374",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.5.3:pkg/virt-controller/services/renderresources.go:410-424",
    ),
    reserved_overhead: s(
        false,
        "v1.5.3:pkg/virt-controller/services/renderresources.go:322-427 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.5.3:pkg/virt-controller/services/renderresources.go:400",
    ),
    tpm_honours_enabled: s(
        true,
        "v1.5.3:pkg/virt-controller/services/renderresources.go:406",
    ),
    passt_memory: s(
        false,
        "v1.5.3:pkg/virt-controller/services/template.go:1483 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.5.3:pkg/defaults/defaults.go:307-345"),
    hugepages_overcommitted: s(true, "v1.5.3:pkg/defaults/defaults.go:339-345"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.5.3:pkg/virt-controller/services/renderresources.go:329-331",
        processes: "v1.5.3:pkg/virt-controller/services/template.go:114-118; renderresources.go:336-340",
        vcpus: "v1.5.3:pkg/virt-controller/services/renderresources.go:344-366",
        io_thread: "v1.5.3:pkg/virt-controller/services/renderresources.go:369",
        video_ram: "v1.5.3:pkg/virt-controller/services/renderresources.go:372-374",
        arm64: "v1.5.3:pkg/virt-controller/services/renderresources.go:379-381",
        vfio: "v1.5.3:pkg/virt-controller/services/renderresources.go:386-388",
        downward_metrics: "v1.5.3:pkg/virt-controller/services/renderresources.go:392-394",
        exec_probes: "v1.5.3:pkg/virt-controller/services/renderresources.go:396; template.go:1224-1238",
        sev: "v1.5.3:pkg/virt-controller/services/renderresources.go:400-402",
        tpm: "v1.5.3:pkg/virt-controller/services/renderresources.go:406-408",
        dedicated: "v1.5.3:pkg/virt-controller/services/renderresources.go:410-412",
        reserved_overhead: "",
        ratio: "v1.5.3:pkg/virt-controller/services/renderresources.go:415-424,704",
        network: "v1.5.3:pkg/virt-controller/services/template.go:1481-1485",
    },
};

const V1_6_4: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.6.4:pkg/virt-controller/services/template.go:119",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.6.4:pkg/virt-controller/services/template.go:117",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.6.4:pkg/virt-controller/services/template.go:118",
    ),
    video_ram_bytes: s(
        32 << 20,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:474-476",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:512-526",
    ),
    reserved_overhead: s(
        false,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:424-529 (no such term)",
    ),
    sev_counts_snp: s(
        false,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:502; pkg/util/amd64.go:22-24",
    ),
    tpm_honours_enabled: s(
        true,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:508",
    ),
    passt_memory: s(
        false,
        "v1.6.4:pkg/virt-controller/services/template.go:1513 (binding plugins only)",
    ),
    admission_sets_memory_request: s(
        false,
        "v1.6.4:pkg/defaults/defaults.go:309; renderresources.go:255-285 (PR 15896 backported)",
    ),
    hugepages_overcommitted: s(
        true,
        "v1.6.4:pkg/virt-controller/services/renderresources.go:277-282",
    ),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.6.4:pkg/virt-controller/services/renderresources.go:431-433",
        processes: "v1.6.4:pkg/virt-controller/services/template.go:115-119; renderresources.go:438-442",
        vcpus: "v1.6.4:pkg/virt-controller/services/renderresources.go:446-468",
        io_thread: "v1.6.4:pkg/virt-controller/services/renderresources.go:471",
        video_ram: "v1.6.4:pkg/virt-controller/services/renderresources.go:474-476",
        arm64: "v1.6.4:pkg/virt-controller/services/renderresources.go:481-483",
        vfio: "v1.6.4:pkg/virt-controller/services/renderresources.go:488-490",
        downward_metrics: "v1.6.4:pkg/virt-controller/services/renderresources.go:494-496",
        exec_probes: "v1.6.4:pkg/virt-controller/services/renderresources.go:498; template.go:1235",
        sev: "v1.6.4:pkg/virt-controller/services/renderresources.go:502-504",
        tpm: "v1.6.4:pkg/virt-controller/services/renderresources.go:508-510",
        dedicated: "v1.6.4:pkg/virt-controller/services/renderresources.go:512-514",
        reserved_overhead: "",
        ratio: "v1.6.4:pkg/virt-controller/services/renderresources.go:517-526,809",
        network: "v1.6.4:pkg/virt-controller/services/template.go:1511-1515",
    },
};

const V1_6: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.6.0:pkg/virt-controller/services/template.go:119",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.6.0:pkg/virt-controller/services/template.go:117",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.6.0:pkg/virt-controller/services/template.go:118",
    ),
    video_ram_bytes: s(
        32 << 20,
        "v1.6.0:pkg/virt-controller/services/renderresources.go:442-444",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.6.0:pkg/virt-controller/services/renderresources.go:480-494",
    ),
    reserved_overhead: s(
        false,
        "v1.6.0:pkg/virt-controller/services/renderresources.go:392-497 (no such term)",
    ),
    sev_counts_snp: s(false, "v1.6.0:pkg/util/amd64.go:22-24"),
    tpm_honours_enabled: s(
        true,
        "v1.6.0:pkg/virt-controller/services/renderresources.go:476; pkg/tpm/tpm.go:5-8",
    ),
    passt_memory: s(
        false,
        "v1.6.0:pkg/network/netbinding/memory.go:32-39 (binding plugins only)",
    ),
    admission_sets_memory_request: s(true, "v1.6.0:pkg/defaults/defaults.go:317-349"),
    hugepages_overcommitted: s(true, "v1.6.0:pkg/defaults/defaults.go:335-345"),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.6.0:pkg/virt-controller/services/renderresources.go:399-401",
        processes: "v1.6.0:pkg/virt-controller/services/template.go:115-119; renderresources.go:406-410",
        vcpus: "v1.6.0:pkg/virt-controller/services/renderresources.go:414-436",
        io_thread: "v1.6.0:pkg/virt-controller/services/renderresources.go:439",
        video_ram: "v1.6.0:pkg/virt-controller/services/renderresources.go:442-444",
        arm64: "v1.6.0:pkg/virt-controller/services/renderresources.go:449-451",
        vfio: "v1.6.0:pkg/virt-controller/services/renderresources.go:456-458",
        downward_metrics: "v1.6.0:pkg/virt-controller/services/renderresources.go:462-464",
        exec_probes: "v1.6.0:pkg/virt-controller/services/renderresources.go:466; template.go:1235",
        sev: "v1.6.0:pkg/virt-controller/services/renderresources.go:470-472",
        tpm: "v1.6.0:pkg/virt-controller/services/renderresources.go:476-478",
        dedicated: "v1.6.0:pkg/virt-controller/services/renderresources.go:480-482",
        reserved_overhead: "",
        ratio: "v1.6.0:pkg/virt-controller/services/renderresources.go:485-494,777",
        network: "v1.6.0:pkg/virt-controller/services/template.go:1499-1503; pkg/network/netbinding/memory.go:32-39",
    },
};

const V1_7: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.7.0:pkg/virt-controller/services/template.go:120",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.7.0:pkg/virt-controller/services/template.go:118",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.7.0:pkg/virt-controller/services/template.go:119",
    ),
    video_ram_bytes: s(
        32 << 20,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:475-477",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:513-527",
    ),
    reserved_overhead: s(
        false,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:425-530 (no such term)",
    ),
    sev_counts_snp: s(
        true,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:503",
    ),
    tpm_honours_enabled: s(
        true,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:509",
    ),
    passt_memory: s(
        false,
        "v1.7.0:pkg/network/netbinding/memory.go:32-39 (binding plugins only)",
    ),
    admission_sets_memory_request: s(
        false,
        "v1.7.0:pkg/defaults/defaults.go:262-283; renderresources.go:256-286",
    ),
    hugepages_overcommitted: s(
        true,
        "v1.7.0:pkg/virt-controller/services/renderresources.go:278-283",
    ),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.7.0:pkg/virt-controller/services/renderresources.go:432-434",
        processes: "v1.7.0:pkg/virt-controller/services/template.go:116-120; renderresources.go:439-443",
        vcpus: "v1.7.0:pkg/virt-controller/services/renderresources.go:447-469",
        io_thread: "v1.7.0:pkg/virt-controller/services/renderresources.go:472",
        video_ram: "v1.7.0:pkg/virt-controller/services/renderresources.go:475-477",
        arm64: "v1.7.0:pkg/virt-controller/services/renderresources.go:482-484",
        vfio: "v1.7.0:pkg/virt-controller/services/renderresources.go:489-491",
        downward_metrics: "v1.7.0:pkg/virt-controller/services/renderresources.go:495-497",
        exec_probes: "v1.7.0:pkg/virt-controller/services/renderresources.go:499; template.go:1257",
        sev: "v1.7.0:pkg/virt-controller/services/renderresources.go:503-505",
        tpm: "v1.7.0:pkg/virt-controller/services/renderresources.go:509-511",
        dedicated: "v1.7.0:pkg/virt-controller/services/renderresources.go:513-515",
        reserved_overhead: "",
        ratio: "v1.7.0:pkg/virt-controller/services/renderresources.go:518-527,810",
        network: "v1.7.0:pkg/virt-controller/services/template.go:1533-1537; pkg/network/netbinding/memory.go:32-39",
    },
};

const V1_8: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:41",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:39",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:40",
    ),
    video_ram_bytes: s(
        32 << 20,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:118-120",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:156-174",
    ),
    reserved_overhead: s(
        true,
        "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:160-162",
    ),
    sev_counts_snp: s(true, "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:146"),
    tpm_honours_enabled: s(true, "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:152"),
    passt_memory: s(true, "v1.8.0:pkg/network/resources/memory.go:40-42,97-100"),
    admission_sets_memory_request: s(
        false,
        "v1.8.0:pkg/virt-controller/services/renderresources.go:254-284",
    ),
    hugepages_overcommitted: s(
        true,
        "v1.8.0:pkg/virt-controller/services/renderresources.go:276-281",
    ),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:75-77",
        processes: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:37-41,82-86",
        vcpus: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:90-112",
        io_thread: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:115",
        video_ram: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:118-120",
        arm64: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:125-127",
        vfio: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:132-134",
        downward_metrics: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:138-140",
        exec_probes: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:142,179-200",
        sev: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:146-148",
        tpm: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:152-154",
        dedicated: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:156-158",
        reserved_overhead: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:160-162",
        ratio: "v1.8.0:pkg/hypervisor/kvm/hypervisorbackend.go:165-174,202-208",
        network: "v1.8.0:pkg/virt-controller/services/template.go:1559-1575; pkg/network/resources/memory.go:34-100",
    },
};

const V1_9: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:42",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:40",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:41",
    ),
    video_ram_bytes: s(
        32 << 20,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:119-121",
    ),
    dedicated_after_ratio: s(
        false,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:157-175",
    ),
    reserved_overhead: s(
        true,
        "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:161-163",
    ),
    sev_counts_snp: s(true, "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:147"),
    tpm_honours_enabled: s(true, "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:153"),
    passt_memory: s(true, "v1.9.0:pkg/network/resources/memory.go:40-42,97-100"),
    admission_sets_memory_request: s(
        false,
        "v1.9.0:pkg/virt-controller/services/renderresources.go:263-293",
    ),
    hugepages_overcommitted: s(
        true,
        "v1.9.0:pkg/virt-controller/services/renderresources.go:285-290",
    ),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:76-78",
        processes: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:38-42,83-87",
        vcpus: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:91-113",
        io_thread: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:116",
        video_ram: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:119-121",
        arm64: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:126-128",
        vfio: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:133-135; pkg/vmitrait/vmitrait.go:33-52",
        downward_metrics: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:139-141",
        exec_probes: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:143,180-201",
        sev: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:147-149",
        tpm: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:153-155",
        dedicated: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:157-159",
        reserved_overhead: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:161-163",
        ratio: "v1.9.0:pkg/hypervisor/kvm/hypervisorbackend.go:166-175,203-209",
        network: "v1.9.0:pkg/virt-controller/services/template.go:1678-1694; pkg/network/resources/memory.go:34-100",
    },
};

const MAIN: Formula = Formula {
    qemu_bytes: s(
        50 << 20,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:42 (PR 18388)",
    ),
    virtlogd_bytes: s(
        25 << 20,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:40",
    ),
    virtqemud_bytes: s(
        40 << 20,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:41",
    ),
    video_ram_bytes: s(
        32 << 20,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:119-121",
    ),
    dedicated_after_ratio: s(
        false,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:157-175",
    ),
    reserved_overhead: s(
        true,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:161-163",
    ),
    sev_counts_snp: s(
        true,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:147",
    ),
    tpm_honours_enabled: s(
        true,
        "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:153",
    ),
    passt_memory: s(
        true,
        "main@d923fdb815:pkg/network/resources/memory.go:40-42,97-100",
    ),
    admission_sets_memory_request: s(
        false,
        "main@d923fdb815:pkg/virt-controller/services/renderresources.go:263-293",
    ),
    hugepages_overcommitted: s(
        false,
        "PR 18880 (06135ce40d):pkg/virt-controller/services/renderresources.go:284-286",
    ),
    before_v1_3: None,
    terms: TermSources {
        page_tables: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:76-78",
        processes: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:38-42,83-87",
        vcpus: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:91-113",
        io_thread: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:116",
        video_ram: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:119-121",
        arm64: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:126-128",
        vfio: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:133-135",
        downward_metrics: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:139-141",
        exec_probes: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:143,180-201",
        sev: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:147-149",
        tpm: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:153-155",
        dedicated: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:157-159",
        reserved_overhead: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:161-163",
        ratio: "main@d923fdb815:pkg/hypervisor/kvm/hypervisorbackend.go:166-175,203-209",
        network: "main@d923fdb815:pkg/virt-controller/services/template.go:1686-1702; pkg/network/resources/memory.go:34-100",
    },
};

impl KubeVirtVersion {
    /// Every row, oldest first.
    pub const ALL: [KubeVirtVersion; 15] = [
        KubeVirtVersion::V1_0,
        KubeVirtVersion::V1_1,
        KubeVirtVersion::V1_2,
        KubeVirtVersion::V1_3,
        KubeVirtVersion::V1_4,
        KubeVirtVersion::V1_4_1,
        KubeVirtVersion::V1_5,
        KubeVirtVersion::V1_5_1,
        KubeVirtVersion::V1_5_3,
        KubeVirtVersion::V1_6,
        KubeVirtVersion::V1_6_4,
        KubeVirtVersion::V1_7,
        KubeVirtVersion::V1_8,
        KubeVirtVersion::V1_9,
        KubeVirtVersion::Main,
    ];

    /// The row's name: the release tag (`v1.9.0`) or `main`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            KubeVirtVersion::V1_0 => "v1.0.0",
            KubeVirtVersion::V1_1 => "v1.1.0",
            KubeVirtVersion::V1_2 => "v1.2.0",
            KubeVirtVersion::V1_3 => "v1.3.0",
            KubeVirtVersion::V1_4 => "v1.4.0",
            KubeVirtVersion::V1_4_1 => "v1.4.1",
            KubeVirtVersion::V1_5 => "v1.5.0",
            KubeVirtVersion::V1_5_1 => "v1.5.1",
            KubeVirtVersion::V1_5_3 => "v1.5.3",
            KubeVirtVersion::V1_6 => "v1.6.0",
            KubeVirtVersion::V1_6_4 => "v1.6.4",
            KubeVirtVersion::V1_7 => "v1.7.0",
            KubeVirtVersion::V1_8 => "v1.8.0",
            KubeVirtVersion::V1_9 => "v1.9.0",
            KubeVirtVersion::Main => "main",
        }
    }

    fn known_list() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// Read a version as `--kubevirt-version` or `status.observedKubeVirtVersion` spell it:
    /// `v1.8.0`, `1.8.0`, `v1.8`, a patch release (`v1.8.2` → v1.8.0, `v1.6.5` → v1.6.4, see the
    /// module docs), a pre-release or dev build `v1.9.0-rc.1` (→ v1.9.0), or `main`. Anything else,
    /// and v1.6.2, is an [`UnknownVersion`] listing the known rows.
    pub(crate) fn parse(text: &str) -> Result<Self, UnknownVersion> {
        let unknown = || UnknownVersion {
            given: text.to_string(),
            not_modelled: None,
        };
        let t = text.trim();
        if t.eq_ignore_ascii_case("main") {
            return Ok(KubeVirtVersion::Main);
        }
        let t = t.strip_prefix('v').unwrap_or(t);
        let core = t.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
            return Err(unknown());
        };
        let patch = match parts.next() {
            None => Some(0),
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok(),
            Some(_) => None,
        };
        let Some(patch) = patch.filter(|_| parts.next().is_none() && major == "1") else {
            return Err(unknown());
        };
        let patch: u32 = patch;
        match (minor, patch) {
            ("0", _) => Ok(KubeVirtVersion::V1_0),
            ("1", _) => Ok(KubeVirtVersion::V1_1),
            ("2", _) => Ok(KubeVirtVersion::V1_2),
            ("3", _) => Ok(KubeVirtVersion::V1_3),
            ("4", 0) => Ok(KubeVirtVersion::V1_4),
            ("4", _) => Ok(KubeVirtVersion::V1_4_1),
            ("5", 0) => Ok(KubeVirtVersion::V1_5),
            ("5", 1 | 2) => Ok(KubeVirtVersion::V1_5_1),
            ("5", _) => Ok(KubeVirtVersion::V1_5_3),
            ("6", 2) => Err(UnknownVersion {
                given: text.to_string(),
                not_modelled: Some(
                    "its renderer scales every memory request by memoryOvercommit, a user-set \
                     one included (v1.6.2 renderresources.go:255-261, template.go:1530-1532; \
                     reverted in v1.6.3)",
                ),
            }),
            ("6", 0 | 1 | 3) => Ok(KubeVirtVersion::V1_6),
            ("6", _) => Ok(KubeVirtVersion::V1_6_4),
            (minor, _) => Self::minor_row(minor).ok_or_else(unknown),
        }
    }

    /// The row of v1.7 … v1.9: their patch releases carry the same overhead and memory
    /// request code as the .0 release (checked up to v1.7.4 and v1.8.4).
    fn minor_row(minor: &str) -> Option<Self> {
        match minor {
            "7" => Some(KubeVirtVersion::V1_7),
            "8" => Some(KubeVirtVersion::V1_8),
            "9" => Some(KubeVirtVersion::V1_9),
            _ => None,
        }
    }

    /// This release's row of the table.
    pub(crate) fn formula(self) -> &'static Formula {
        match self {
            KubeVirtVersion::V1_0 => &V1_0,
            KubeVirtVersion::V1_1 => &V1_1,
            KubeVirtVersion::V1_2 => &V1_2,
            KubeVirtVersion::V1_3 => &V1_3,
            KubeVirtVersion::V1_4 => &V1_4,
            KubeVirtVersion::V1_4_1 => &V1_4_1,
            KubeVirtVersion::V1_5 => &V1_5,
            KubeVirtVersion::V1_5_1 => &V1_5_1,
            KubeVirtVersion::V1_5_3 => &V1_5_3,
            KubeVirtVersion::V1_6 => &V1_6,
            KubeVirtVersion::V1_6_4 => &V1_6_4,
            KubeVirtVersion::V1_7 => &V1_7,
            KubeVirtVersion::V1_8 => &V1_8,
            KubeVirtVersion::V1_9 => &V1_9,
            KubeVirtVersion::Main => &MAIN,
        }
    }
}

/// The VM and VMI controllers' rules that differ between releases, selected by
/// `run-controller --kubevirt-version` and carried in the controllers' snapshots
/// (`VmControllerConfig::rules`, `VmiSnapshot::rules`). Every row up to v1.9.0 has v1.8.0's and
/// v1.9.0's rules (the rules below changed after v1.9.0); `main` has the later ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ControllerRules {
    /// `isSetToStart` for a `RerunOnFailure` VM without a VMI: true only with a start request or
    /// a run strategy just switched to `RerunOnFailure` (PR 18787, `shouldStartRerunOnFailure`
    /// shared with `syncRunStrategy`). Before: always true (v1.9.0
    /// pkg/virt-controller/watch/vm/vm.go:1232-1236, v1.8.0 1231-1235), so a stopped VM with a Pending PVC reports
    /// `WaitingForVolumeBinding` instead of `Stopped`.
    pub(crate) rerun_on_failure_start_needs_request: Sourced<bool>,
    /// The VMI controller's `execute` re-adds a key whose pod, VMI or PVC expectations are not
    /// satisfied after the expectations timeout (`c.Queue.AddAfter(key,
    /// controller.ExpectationsTimeout)`, PR 18206), so an expected event that never comes (a
    /// hotplug attachment pod whose launcher pod left the cache first) delays the VMI by five
    /// minutes. Before: `execute` returns and the key waits for the next event (v1.9.0
    /// pkg/virt-controller/watch/vmi/vmi.go:332-337).
    pub(crate) vmi_requeue_after_expectations_timeout: Sourced<bool>,
    /// A Multus network's NAD reference (`networkName`) changed on a running VM reaches the VMI
    /// only when the VMI is `LiveMigratable=True`; for any other the change needs a restart
    /// (PR 18194, "Restart required for NAD hotswap on non migratable VMs"). Before: always
    /// synced, never a restart (v1.9.0 pkg/network/controllers/vm.go:183-198,
    /// pkg/network/vmliveupdate/restart.go:120-140).
    pub(crate) nad_ref_update_needs_migratable: Sourced<bool>,
    /// A hotplug attachment pod records the VMI it serves in two annotations,
    /// `kubevirt.io/owner-vmi-name` (the VMI's name) and `kubevirt.io/owner-vmi-uid` (its UID),
    /// and the VMI controller's pod-delete handler falls back on them when the owner chain
    /// (attachment pod → launcher pod → VMI) cannot be resolved, as when the launcher pod left
    /// the cache first: it looks the VMI up by that name in the pod's namespace and uses it only
    /// if its UID matches (PR 18222, "Recover VMI from hotplug attachment pod annotations").
    /// Before: no annotations (v1.9.0 pkg/virt-controller/services/template.go:1092-1103) and
    /// the delete of such a pod is dropped (v1.9.0 pkg/virt-controller/watch/vmi/vmi.go:457-461).
    pub(crate) attachment_pod_owner_annotations: Sourced<bool>,
}

const CONTROLLER_RULES_V1_9: ControllerRules = ControllerRules {
    rerun_on_failure_start_needs_request: s(
        false,
        "v1.9.0:pkg/virt-controller/watch/vm/vm.go:1232-1236",
    ),
    vmi_requeue_after_expectations_timeout: s(
        false,
        "v1.9.0:pkg/virt-controller/watch/vmi/vmi.go:332-337",
    ),
    nad_ref_update_needs_migratable: s(
        false,
        "v1.9.0:pkg/network/controllers/vm.go:183-198, pkg/network/vmliveupdate/restart.go:120-140",
    ),
    attachment_pod_owner_annotations: s(
        false,
        "v1.9.0:pkg/virt-controller/services/template.go:1092-1103, pkg/virt-controller/watch/vmi/vmi.go:457-461",
    ),
};

const CONTROLLER_RULES_MAIN: ControllerRules = ControllerRules {
    rerun_on_failure_start_needs_request: s(
        true,
        "PR 18787:pkg/virt-controller/watch/vm/vm.go shouldStartRerunOnFailure",
    ),
    vmi_requeue_after_expectations_timeout: s(
        true,
        "PR 18206:pkg/virt-controller/watch/vmi/vmi.go execute",
    ),
    nad_ref_update_needs_migratable: s(
        true,
        "PR 18194:pkg/network/vmliveupdate/restart.go, pkg/network/controllers/vm.go",
    ),
    attachment_pod_owner_annotations: s(
        true,
        "PR 18222:staging/src/kubevirt.io/api/core/v1/types.go (OwnerVMINameAnnotation, OwnerVMIUIDAnnotation), pkg/virt-controller/watch/vmi/vmi.go onPodDelete",
    ),
};

impl KubeVirtVersion {
    /// The VM controller's rules of this release ([`ControllerRules`]): the one place a
    /// version selects controller behaviour.
    pub(crate) fn controller_rules(self) -> ControllerRules {
        match self {
            KubeVirtVersion::Main => CONTROLLER_RULES_MAIN,
            _ => CONTROLLER_RULES_V1_9,
        }
    }
}

impl Default for ControllerRules {
    fn default() -> Self {
        KubeVirtVersion::default().controller_rules()
    }
}

/// The launcher pod renderer's rules that differ between releases beyond the memory formula
/// and the compute resources ([`Formula`]), selected with the formula (`--kubevirt-version`,
/// the KubeVirt CR's observed version, the release that rendered a pod). Every row up to
/// v1.9.0 renders as v1.9.0; `main` has the later rules.
///
/// Read from the pull requests (the search tool's copy of their descriptions and review
/// threads) and, for PR 18687, from a copy of `main`'s template.go that has it
/// (kubevirt/kubevirt@008b6e6b9c). PR 18222's owner annotations on hotplug attachment pods are
/// a [`ControllerRules`] rule (the VMI controller renders those pods and reads the annotations
/// back). Not modelled for want of the exact change: PR 18272 (the `hugetblfs-dir` emptyDir
/// made hugepage-backed: its description, title and release note say "hugepage-backed", but the
/// thread's review diffs show only `converter.go`, so whether the medium is `HugePages` or
/// `HugePages-<size>` is not known; docs/explain-overhead.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PodRules {
    /// `compute`'s `command` is `/usr/bin/virt-launcher-monitor` alone and its flags are
    /// `args`; the same split for the `container-disk-binary` init container's `cp` (PR
    /// 18237). Before: the executable and every flag in `command` (v1.9.0
    /// pkg/virt-controller/services/template.go:460-485, 643).
    pub(crate) launcher_flags_in_args: Sourced<bool>,
    /// `compute` gets `--libvirt-hook-server-and-client` while the `LibvirtHooksServerAndClient`
    /// feature gate is on (Beta, so on unless disabled, in v1.9.0:
    /// pkg/virt-controller/services/template.go:480-482). On `main` the gate is GA (PR 18687)
    /// and the renderer no longer passes the flag: virt-launcher always runs the hooks.
    pub(crate) libvirt_hooks_flag: Sourced<bool>,
}

const POD_RULES_V1_9: PodRules = PodRules {
    launcher_flags_in_args: s(
        false,
        "v1.9.0:pkg/virt-controller/services/template.go:460-485,643",
    ),
    libvirt_hooks_flag: s(
        true,
        "v1.9.0:pkg/virt-controller/services/template.go:480-482",
    ),
};

const POD_RULES_MAIN: PodRules = PodRules {
    launcher_flags_in_args: s(
        true,
        "PR 18237:pkg/virt-controller/services/template.go (Command: the executable, Args: its flags)",
    ),
    libvirt_hooks_flag: s(
        false,
        "PR 18687:pkg/virt-controller/services/template.go (LibvirtHooksServerAndClient GA, its flag gone)",
    ),
};

impl KubeVirtVersion {
    /// The launcher pod renderer's rules of this release ([`PodRules`]).
    pub(crate) fn pod_rules(self) -> PodRules {
        match self {
            KubeVirtVersion::Main => POD_RULES_MAIN,
            _ => POD_RULES_V1_9,
        }
    }
}

/// Where the KubeVirt CR reports the release it runs, as the commands name it.
pub(crate) const OBSERVED_VERSION: &str = "the KubeVirt CR's status.observedKubeVirtVersion";

/// The release a command reproduces and where it was read ([`KubeVirtVersion::decide`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecidedVersion {
    /// The release.
    pub version: KubeVirtVersion,
    /// Where it was read: `--kubevirt-version`, [`OBSERVED_VERSION`], or the default and why.
    pub source: String,
}

impl fmt::Display for DecidedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KubeVirt {}, from {}", self.version, self.source)
    }
}

impl KubeVirtVersion {
    /// The release the KubeVirt CR says the cluster runs (`status.observedKubeVirtVersion`,
    /// which virt-operator records once every component of that release is ready: v1.9.0
    /// pkg/virt-operator/kubevirt.go:1114-1120, util/config.go:527-528), or why it cannot be
    /// used: not reported, or no row of the table. The one rule `explain-overhead`, `why` and
    /// `shadow` follow when no `--kubevirt-version` is given.
    pub(crate) fn observed(observed: Option<&str>) -> Result<Self, String> {
        match observed.map(str::trim).filter(|o| !o.is_empty()) {
            None => Err("not reported".into()),
            Some(o) => Self::parse(o).map_err(|e| e.to_string()),
        }
    }

    /// The release to reproduce: `flag` (`--kubevirt-version`) when given, else the KubeVirt
    /// CR's observed version ([`KubeVirtVersion::observed`]), else the default (v1.9.0), each
    /// with where it was read.
    pub(crate) fn decide(flag: Option<Self>, observed: Option<&str>) -> DecidedVersion {
        if let Some(version) = flag {
            return DecidedVersion {
                version,
                source: "--kubevirt-version".into(),
            };
        }
        match Self::observed(observed) {
            Ok(version) => DecidedVersion {
                version,
                source: OBSERVED_VERSION.into(),
            },
            Err(reason) => DecidedVersion {
                version: Self::default(),
                source: format!("the default ({OBSERVED_VERSION}: {reason})"),
            },
        }
    }
}

impl fmt::Display for KubeVirtVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KubeVirtVersion {
    type Err = UnknownVersion;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--kubevirt-version` first, then the CR's observed version (a patch release by its row),
    /// then v1.9.0 saying why; each names where it was read.
    #[test]
    fn the_release_is_the_flag_else_the_crs_observed_version_else_the_default() {
        let d = KubeVirtVersion::decide(Some(KubeVirtVersion::Main), Some("v1.8.0"));
        assert_eq!(
            (d.version, d.source.as_str()),
            (KubeVirtVersion::Main, "--kubevirt-version")
        );
        let d = KubeVirtVersion::decide(None, Some("v1.8.3"));
        assert_eq!(
            (d.version, d.source.as_str()),
            (KubeVirtVersion::V1_8, OBSERVED_VERSION)
        );
        assert_eq!(
            d.to_string(),
            "KubeVirt v1.8.0, from the KubeVirt CR's status.observedKubeVirtVersion"
        );
        for (observed, why) in [
            (None, "not reported"),
            (Some(" "), "not reported"),
            (Some("v2.0.0"), "v2.0.0"),
        ] {
            let d = KubeVirtVersion::decide(None, observed);
            assert_eq!(d.version, KubeVirtVersion::V1_9, "{observed:?}");
            assert!(
                d.source
                    .starts_with("the default (the KubeVirt CR's status.observedKubeVirtVersion: ")
                    && d.source.contains(why),
                "{observed:?}: {}",
                d.source
            );
        }
    }

    #[test]
    fn parses_tags_patch_releases_and_main() {
        use KubeVirtVersion::*;
        for (text, v) in [
            ("v1.9.0", V1_9),
            ("1.9.0", V1_9),
            ("v1.8.2", V1_8),
            ("v1.8.4", V1_8),
            ("v1.8", V1_8),
            ("v1.9.0-rc.1", V1_9),
            ("v1.7.0-12-gabcdef0", V1_7),
            ("v1.7.4", V1_7),
            ("v1.6.1", V1_6),
            ("v1.6.3", V1_6),
            ("v1.3.1", V1_3),
            ("v1.0.0", V1_0),
            ("v1.0.1", V1_0),
            ("v1.1.1", V1_1),
            ("v1.2.0", V1_2),
            ("v1.2.2", V1_2),
            ("v1.4.0", V1_4),
            ("v1.4.1", V1_4_1),
            ("v1.4.3", V1_4_1),
            ("v1.6.4", V1_6_4),
            ("v1.6.6", V1_6_4),
            ("v1.5.0", V1_5),
            ("v1.5.2", V1_5_1),
            ("v1.5.3", V1_5_3),
            ("main", Main),
            (" MAIN ", Main),
        ] {
            assert_eq!(KubeVirtVersion::parse(text), Ok(v), "{text}");
        }
        for v in KubeVirtVersion::ALL {
            assert_eq!(KubeVirtVersion::parse(v.name()), Ok(v));
            assert_eq!(v.to_string(), v.name());
        }
    }

    #[test]
    fn unknown_versions_list_the_known_ones() {
        for text in [
            "v0.59.0", "v2.0.0", "v1.10.0", "latest", "", "v1.9.x", "v1.9.0.1",
        ] {
            let e = KubeVirtVersion::parse(text).unwrap_err();
            assert_eq!(e.given, text);
            assert_eq!(
                e.to_string(),
                format!(
                    "unknown KubeVirt version {text:?}: known versions are v1.0.0, v1.1.0, v1.2.0, v1.3.0, v1.4.0, \
                     v1.4.1, v1.5.0, v1.5.1, v1.5.3, v1.6.0, v1.6.4, v1.7.0, v1.8.0, v1.9.0, main (a patch release uses \
                     the row of the release it behaves like: v1.8.2 → v1.8.0, v1.6.5 → v1.6.4)"
                )
            );
        }
        let e = KubeVirtVersion::parse("v1.6.2").unwrap_err();
        assert!(
            e.to_string().starts_with(
                "KubeVirt \"v1.6.2\" is not modelled: its renderer scales every memory request"
            ),
            "{e}"
        );
    }

    #[test]
    fn default_is_v1_9_and_serializes_as_the_tag() {
        assert_eq!(KubeVirtVersion::default(), KubeVirtVersion::V1_9);
        assert_eq!(
            serde_json::to_value(KubeVirtVersion::Main).unwrap(),
            serde_json::json!("main")
        );
        assert_eq!(
            serde_json::from_value::<KubeVirtVersion>(serde_json::json!("v1.6.0")).unwrap(),
            KubeVirtVersion::V1_6
        );
    }

    /// Every value cites a tag (or the main commit / PR) and a file.
    #[test]
    fn every_row_cites_its_sources() {
        for v in KubeVirtVersion::ALL {
            let f = v.formula();
            let tag = match v {
                KubeVirtVersion::Main => "main@",
                _ => v.name(),
            };
            let t = &f.terms;
            let mut all = vec![
                t.page_tables,
                t.processes,
                t.vcpus,
                t.io_thread,
                t.video_ram,
                t.arm64,
                t.vfio,
                t.downward_metrics,
                t.exec_probes,
                t.sev,
                t.tpm,
                t.dedicated,
                t.ratio,
                t.network,
                f.qemu_bytes.source,
                f.video_ram_bytes.source,
                f.dedicated_after_ratio.source,
                f.reserved_overhead.source,
                f.sev_counts_snp.source,
                f.tpm_honours_enabled.source,
                f.passt_memory.source,
                f.admission_sets_memory_request.source,
            ];
            if v != KubeVirtVersion::Main {
                all.push(f.hugepages_overcommitted.source);
            }
            if f.reserved_overhead.value {
                all.push(t.reserved_overhead);
            }
            if let Some(b) = f.before_v1_3 {
                all.extend([
                    b.dedicated_term.source,
                    b.passt_without_ports_bytes.source,
                    b.arm64_reads_vmi_architecture.source,
                    b.no_binding_plugin_memory,
                ]);
            }
            for src in all {
                assert!(src.starts_with(tag) && src.contains(".go:"), "{v}: {src}");
            }
        }
    }

    /// The known differences, as the table states them.
    #[test]
    fn known_differences() {
        use KubeVirtVersion::*;
        let f = |v: KubeVirtVersion| v.formula();
        assert_eq!(f(V1_9).qemu_bytes.value, 30 << 20);
        assert_eq!(f(Main).qemu_bytes.value, 50 << 20);
        assert_eq!(f(V1_5).video_ram_bytes.value, 16 << 20);
        assert_eq!(f(V1_5_3).video_ram_bytes.value, 16 << 20);
        assert_eq!(f(V1_6).video_ram_bytes.value, 32 << 20);
        assert!(f(V1_5).dedicated_after_ratio.value && !f(V1_6).dedicated_after_ratio.value);
        assert!(f(V1_5_1).dedicated_after_ratio.value && !f(V1_5_3).dedicated_after_ratio.value);
        assert!(!f(V1_5).tpm_honours_enabled.value && f(V1_5_1).tpm_honours_enabled.value);
        assert!(!f(V1_6_4).admission_sets_memory_request.value);
        assert!(!f(V1_7).reserved_overhead.value && f(V1_8).reserved_overhead.value);
        assert!(f(V1_6).admission_sets_memory_request.value);
        assert!(!f(V1_7).admission_sets_memory_request.value);
        assert!(f(V1_9).hugepages_overcommitted.value && !f(Main).hugepages_overcommitted.value);
        // Before v1.3 (module docs): the passt 800Mi, no dedicated term in v1.0, the arm64 term
        // from the VMI's architecture from v1.2.
        let old = |v: KubeVirtVersion| v.formula().before_v1_3.unwrap();
        for v in [V1_0, V1_1, V1_2] {
            assert_eq!(old(v).passt_without_ports_bytes.value, 800 << 20);
            assert_eq!(f(v).virtqemud_bytes.value, 35 << 20);
        }
        assert!(!old(V1_0).dedicated_term.value && old(V1_1).dedicated_term.value);
        assert!(!old(V1_1).arm64_reads_vmi_architecture.value);
        assert!(old(V1_2).arm64_reads_vmi_architecture.value);
        assert!(
            KubeVirtVersion::ALL
                .iter()
                .all(|v| (*v < V1_3) == f(*v).before_v1_3.is_some())
        );
    }
}
