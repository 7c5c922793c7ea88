//! Golden test of the virt-launcher pod renderer: the repository's fixtures (tests/fixtures/)
//! and main example VM (docs/examples/vm-containerdisk.yaml) rendered with a fixed rng and
//! compared with `tests/golden/render/<name>.yaml`; plus a sweep rendering every VMI of
//! KubeVirt's v1.9.0 examples when they are available (`KUBEVIRT_EXAMPLES`, see tests/common).
//!
//! The VMIs first get virt-api's admission defaults (`apply_admission_defaults`: architecture,
//! guest memory, CPU topology), as a VMI in a cluster would have them; they are placed in
//! namespace `default` with a fixed UID. Settings are KubeVirt's defaults (serial console log on,
//! ImageVolume on); `vmi-arm` is rendered for an arm64 cluster.
//!
//! Regenerate with `UPDATE_GOLDEN=1 cargo test --test integration launcher_render::`, then review the diff.

use crate::common;

use pretty_assertions::assert_eq;
use std::path::{Path, PathBuf};
use virtctl_rs::api::defaults::{AdmissionSettings, apply_admission_defaults};
use virtctl_rs::api::vm::{TemplateMeta, VirtualMachine};
use virtctl_rs::api::vmi::VirtualMachineInstance;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::launcher::pod::render_launch_manifest;
use virtctl_rs::launcher::resources::{NamespaceContext, PvcInfo};

/// A deterministic rng independent of rand's algorithms: every word is the same constant.
struct FixedRng(u64);

impl rand::RngCore for FixedRng {
    fn next_u32(&mut self) -> u32 {
        self.0 as u32
    }
    fn next_u64(&mut self) -> u64 {
        self.0
    }
    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for (i, b) in dst.iter_mut().enumerate() {
            *b = self.0.to_le_bytes()[i % 8];
        }
    }
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/render")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A VMI from a fixture file, as it would look after creation in namespace `default`.
fn example_vmi(file: &str, uid: &str, cluster_arch: &str) -> VirtualMachineInstance {
    let path = common::repo_path("tests/fixtures").join(file);
    let mut vmi: VirtualMachineInstance = serde_yaml::from_str(&read(&path)).unwrap();
    vmi.metadata.namespace = Some("default".into());
    vmi.metadata.uid = Some(uid.into());
    let admission = AdmissionSettings {
        architecture: cluster_arch.into(),
        ..Default::default()
    };
    apply_admission_defaults(&mut vmi.spec, &admission).unwrap();
    vmi
}

/// The VMI the VM controller would create from docs/examples/vm-containerdisk.yaml
/// (SetupVMIFromVM: name, namespace, template labels/annotations and spec; the VM-generation
/// annotation).
fn demo_vmi(uid: &str) -> VirtualMachineInstance {
    let vm: VirtualMachine = common::example_vm("vm-containerdisk.yaml");
    let template = vm.spec.template.clone().unwrap();
    let mut vmi = VirtualMachineInstance {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachineInstance".into()),
        metadata: template
            .metadata
            .as_ref()
            .map(TemplateMeta::to_object_meta)
            .unwrap_or_default()
            .into(),
        spec: template.spec.clone().unwrap(),
        ..Default::default()
    };
    vmi.metadata.name = vm.metadata.name.clone();
    vmi.metadata.namespace = Some("default".into());
    vmi.metadata.uid = Some(uid.into());
    vmi.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("kubevirt.io/vm-generation", "1".into());
    apply_admission_defaults(&mut vmi.spec, &AdmissionSettings::default()).unwrap();
    vmi
}

fn check(name: &str, source: &str, vmi: &VirtualMachineInstance, settings: &ClusterSettings) {
    check_in(name, source, vmi, settings, &NamespaceContext::default());
}

/// [`check`] with what the renderer knows of the namespace (its claims).
fn check_in(
    name: &str,
    source: &str,
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
) {
    let mut rng = FixedRng(0x9e37_79b9_7f4a_7c15);
    let pod = render_launch_manifest(vmi, settings, ns, &mut rng)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = format!(
        "# virt-launcher pod for {source}, rendered by tests/launcher_render.rs.\n\
         # Regenerate with UPDATE_GOLDEN=1 cargo test --test integration launcher_render::\n{}",
        serde_yaml::to_string(&pod).unwrap()
    );
    let path = golden_dir().join(format!("{name}.yaml"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(text, expected, "{name} differs from {}", path.display());
}

#[test]
fn golden_vmi_masquerade() {
    let vmi = example_vmi(
        "vmi-masquerade.yaml",
        "5d0bcb47-0000-4000-8000-00000000f001",
        "amd64",
    );
    check(
        "vmi-masquerade",
        "tests/fixtures/vmi-masquerade.yaml",
        &vmi,
        &ClusterSettings::default(),
    );
}

#[test]
fn golden_vmi_gpu() {
    let vmi = example_vmi(
        "vmi-gpu.yaml",
        "5d0bcb47-0000-4000-8000-00000000f002",
        "amd64",
    );
    check(
        "vmi-gpu",
        "tests/fixtures/vmi-gpu.yaml",
        &vmi,
        &ClusterSettings::default(),
    );
}

#[test]
fn golden_vmi_arm() {
    let settings = ClusterSettings {
        architecture: "arm64".into(),
        ..ClusterSettings::default()
    };
    let vmi = example_vmi(
        "vmi-arm.yaml",
        "5d0bcb47-0000-4000-8000-00000000f003",
        "arm64",
    );
    check(
        "vmi-arm",
        "tests/fixtures/vmi-arm.yaml (arm64 cluster)",
        &vmi,
        &settings,
    );
}

#[test]
fn golden_vmi_sriov() {
    let vmi = example_vmi(
        "vmi-sriov.yaml",
        "5d0bcb47-0000-4000-8000-00000000f004",
        "amd64",
    );
    check(
        "vmi-sriov",
        "tests/fixtures/vmi-sriov.yaml",
        &vmi,
        &ClusterSettings::default(),
    );
}

/// A Multus secondary network, an SR-IOV interface, a ConfigMap hook sidecar and a virtiofs
/// filesystem (issue 39): the Multus annotation with hashed interface names
/// (multus/annotation.go), `hook-sidecar-0` after `virtiofs-shared-files`, the network-info,
/// hook-sockets and virtiofs volumes, the hook's ConfigMap volume last (template.go:573-620, 794).
#[test]
fn golden_vmi_networks_hooks_virtiofs() {
    let vmi = example_vmi(
        "vmi-networks-hooks-virtiofs.yaml",
        "5d0bcb47-0000-4000-8000-00000000f006",
        "amd64",
    );
    check(
        "vmi-networks-hooks-virtiofs",
        "tests/fixtures/vmi-networks-hooks-virtiofs.yaml",
        &vmi,
        &ClusterSettings::default(),
    );
}

/// A LUN with a SCSI persistent reservation beside a plain claim, both claims known: the
/// reserved claim's UID as the pod label `pr.kubevirt.io/<uid>` and a required hostname
/// anti-affinity term after the VMI's own preferred one; the plain claim adds nothing
/// (template.go:164-193, template_test.go:1926-1984).
#[test]
fn golden_vmi_persistent_reservation() {
    let vmi = example_vmi(
        "vmi-persistent-reservation.yaml",
        "5d0bcb47-0000-4000-8000-00000000f007",
        "amd64",
    );
    let claim = |uid: &str| PvcInfo {
        block: true,
        shared: true,
        uid: Some(uid.into()),
    };
    let ns = NamespaceContext {
        pvcs: Some(
            [
                (
                    "fixture-fence-lun".to_string(),
                    claim("9a1e0c3b-0000-4000-8000-00000000c001"),
                ),
                (
                    "fixture-data".to_string(),
                    claim("9a1e0c3b-0000-4000-8000-00000000c002"),
                ),
            ]
            .into(),
        ),
        ..Default::default()
    };
    check_in(
        "vmi-persistent-reservation",
        "tests/fixtures/vmi-persistent-reservation.yaml (both claims block, ReadWriteMany)",
        &vmi,
        &ClusterSettings::default(),
        &ns,
    );
}

#[test]
fn golden_vm_containerdisk() {
    let vmi = demo_vmi("5d0bcb47-0000-4000-8000-00000000f005");
    check(
        "vm-containerdisk",
        "docs/examples/vm-containerdisk.yaml (spec.template as created by the VM controller)",
        &vmi,
        &ClusterSettings::default(),
    );
}

/// The rendered pods parse back as Kubernetes Pods and keep their key facts.
#[test]
fn golden_files_are_pods() {
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        return;
    }
    for name in [
        "vmi-masquerade",
        "vmi-gpu",
        "vmi-arm",
        "vmi-sriov",
        "vmi-networks-hooks-virtiofs",
        "vmi-persistent-reservation",
        "vm-containerdisk",
    ] {
        let text = std::fs::read_to_string(golden_dir().join(format!("{name}.yaml"))).unwrap();
        let pod: k8s_openapi::api::core::v1::Pod = serde_yaml::from_str(&text).unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.containers[0].name, "compute", "{name}");
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"), "{name}");
        let ann = pod.metadata.annotations.unwrap();
        assert!(
            ann.contains_key("kubevirt.io/memory-overhead-bytes"),
            "{name}"
        );
    }
}

/// Every VirtualMachineInstance of KubeVirt's examples (22 in v1.9.0) gets the admission
/// defaults and renders to a pod with a `compute` container. Runs when the examples are
/// available (tests/common).
#[test]
fn every_upstream_example_vmi_renders() {
    let Some(dir) = common::upstream_examples("every_upstream_example_vmi_renders") else {
        return;
    };
    let mut rendered = 0;
    for path in common::yaml_files(&dir) {
        let text = read(&path);
        let docs =
            virtctl_rs::api::manifest::split_documents(&path.display().to_string(), &text).unwrap();
        for (_, doc) in docs {
            if doc["kind"] != "VirtualMachineInstance" {
                continue;
            }
            let mut vmi: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
            vmi.metadata.namespace = Some("default".into());
            vmi.metadata.uid = Some("5d0bcb47-0000-4000-8000-00000000ffff".into());
            apply_admission_defaults(&mut vmi.spec, &AdmissionSettings::default())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut rng = FixedRng(7);
            let pod = render_launch_manifest(
                &vmi,
                &ClusterSettings::default(),
                &NamespaceContext::default(),
                &mut rng,
            )
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let spec = pod.spec.expect("pod spec");
            assert_eq!(spec.containers[0].name, "compute", "{}", path.display());
            rendered += 1;
        }
    }
    assert_eq!(rendered, 22, "VMIs in KubeVirt v1.9.0's examples");
}
