//! The KubeVirt releases whose overhead formula and launcher resources this crate reproduces,
//! and what differs between them: one [`Formula`] row per [`KubeVirtVersion`], each value with the
//! upstream source (tag, file, lines) it was read from.
//!
//! Selected by `explain-overhead --kubevirt-version`, or in cluster mode by the KubeVirt CR's
//! `status.observedKubeVirtVersion` ([`KubeVirtVersion::parse`]); [`KubeVirtVersion::V1_9`] is
//! the default. A patch release (`v1.8.2`) or a pre-release/dev build (`v1.9.0-rc.1`,
//! `v1.9.0-12-gabcdef`) uses its minor's row: the formula did not change in patch releases
//! checked (v1.8.0 … v1.8.4 carry the same `hypervisorbackend.go` as v1.8.0).
//!
//! Verified against the kubevirt/kubevirt git history (tags v1.5.0 … v1.9.0 and `main` at commit
//! d923fdb815, 2026-08-22) with `git show TAG:FILE`:
//!
//! | what | v1.5 | v1.6 | v1.7 | v1.8 | v1.9 | main |
//! |---|---|---|---|---|---|---|
//! | QEMU estimate | 30Mi | 30Mi | 30Mi | 30Mi | 30Mi | 50Mi (PR 18388) |
//! | video RAM | 16Mi | 32Mi (PR 14673) | 32Mi | 32Mi | 32Mi | 32Mi |
//! | dedicated/Guaranteed 100Mi | after the ratio | before it (PR 14933) | before | before | before | before |
//! | `reservedOverhead.addedOverhead` | – | – | – | yes (PR 16384, v1.8 cherry-pick 16956) | yes | yes |
//! | SEV term counts SNP | – | – | yes (PR 14845) | yes | yes | yes |
//! | vTPM term honours `enabled: false` | – | yes (PR 14316) | yes | yes | yes | yes |
//! | passt core binding 250Mi | – | – | – | yes | yes | yes |
//! | `memory.guest` → `requests.memory` in virt-api | yes (× 100/overcommit) | yes | no (PR 15896, cherry-pick 16032) | no | no | no |
//! | hugepages scaled by memoryOvercommit | yes (virt-api) | yes (virt-api) | yes (renderer) | yes | yes | no (PR 18880) |
//!
//! Two corrections to what issue 12 assumed: `reservedOverhead.addedOverhead` is already in
//! v1.8.0 (not only v1.9), and the `memory.guest` copy left virt-api before v1.7.0 (PR 15896 was
//! cherry-picked into release-1.7), so guest-only VMIs lose their page-table term from v1.7.0.
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
    #[serde(rename = "v1.5.0")]
    V1_5,
    #[serde(rename = "v1.6.0")]
    V1_6,
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
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown KubeVirt version {given:?}: known versions are {} (a patch release such as v1.8.2 uses its minor's row)",
    KubeVirtVersion::known_list()
)]
pub struct UnknownVersion {
    /// The text given.
    pub given: String,
}

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
    /// Where each term is in this release.
    pub terms: TermSources,
}

const V1_5: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.5.0:pkg/virt-controller/services/template.go:118",
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

const V1_6: Formula = Formula {
    qemu_bytes: s(
        30 << 20,
        "v1.6.0:pkg/virt-controller/services/template.go:119",
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
    pub const ALL: [KubeVirtVersion; 6] = [
        KubeVirtVersion::V1_5,
        KubeVirtVersion::V1_6,
        KubeVirtVersion::V1_7,
        KubeVirtVersion::V1_8,
        KubeVirtVersion::V1_9,
        KubeVirtVersion::Main,
    ];

    /// The row's name: the release tag (`v1.9.0`) or `main`.
    pub fn name(self) -> &'static str {
        match self {
            KubeVirtVersion::V1_5 => "v1.5.0",
            KubeVirtVersion::V1_6 => "v1.6.0",
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
    /// `v1.8.0`, `1.8.0`, `v1.8`, a patch release `v1.8.2` (→ the v1.8.0 row), a pre-release or
    /// dev build `v1.9.0-rc.1` (→ v1.9.0), or `main`. Anything else is an [`UnknownVersion`]
    /// listing the known rows.
    pub fn parse(text: &str) -> Result<Self, UnknownVersion> {
        let unknown = || UnknownVersion {
            given: text.to_string(),
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
        let patch_ok = match parts.next() {
            None => true,
            Some(p) => !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()),
        };
        if !patch_ok || parts.next().is_some() || major != "1" {
            return Err(unknown());
        }
        match minor {
            "5" => Ok(KubeVirtVersion::V1_5),
            "6" => Ok(KubeVirtVersion::V1_6),
            "7" => Ok(KubeVirtVersion::V1_7),
            "8" => Ok(KubeVirtVersion::V1_8),
            "9" => Ok(KubeVirtVersion::V1_9),
            _ => Err(unknown()),
        }
    }

    /// This release's row of the table.
    pub fn formula(self) -> &'static Formula {
        match self {
            KubeVirtVersion::V1_5 => &V1_5,
            KubeVirtVersion::V1_6 => &V1_6,
            KubeVirtVersion::V1_7 => &V1_7,
            KubeVirtVersion::V1_8 => &V1_8,
            KubeVirtVersion::V1_9 => &V1_9,
            KubeVirtVersion::Main => &MAIN,
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

    #[test]
    fn parses_tags_patch_releases_and_main() {
        use KubeVirtVersion::*;
        for (text, v) in [
            ("v1.9.0", V1_9),
            ("1.9.0", V1_9),
            ("v1.8.2", V1_8),
            ("v1.8", V1_8),
            ("v1.9.0-rc.1", V1_9),
            ("v1.7.0-12-gabcdef0", V1_7),
            ("v1.6.6", V1_6),
            ("v1.5.3", V1_5),
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
            "v1.4.0", "v2.0.0", "v1.10.0", "latest", "", "v1.9.x", "v1.9.0.1",
        ] {
            let e = KubeVirtVersion::parse(text).unwrap_err();
            assert_eq!(e.given, text);
            assert_eq!(
                e.to_string(),
                format!(
                    "unknown KubeVirt version {text:?}: known versions are v1.5.0, v1.6.0, v1.7.0, \
                     v1.8.0, v1.9.0, main (a patch release such as v1.8.2 uses its minor's row)"
                )
            );
        }
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
        assert_eq!(f(V1_6).video_ram_bytes.value, 32 << 20);
        assert!(f(V1_5).dedicated_after_ratio.value && !f(V1_6).dedicated_after_ratio.value);
        assert!(!f(V1_7).reserved_overhead.value && f(V1_8).reserved_overhead.value);
        assert!(f(V1_6).admission_sets_memory_request.value);
        assert!(!f(V1_7).admission_sets_memory_request.value);
        assert!(f(V1_9).hugepages_overcommitted.value && !f(Main).hugepages_overcommitted.value);
    }
}
