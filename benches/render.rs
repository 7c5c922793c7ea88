//! What the VMI controller's pod render costs: `launcher_pod_render/demo_vm` renders the
//! launcher pod of `demo-vm` (docs/examples/vm-containerdisk.yaml: a container disk and a
//! cloud-init disk) the way a creating VMI reconcile does (`render_pod_with`: admission
//! defaults on a copy of the VMI, then `render_launch_manifest`), once per VM start.
//!
//! Run: `cargo bench --bench render`. Figures: docs/performance.md ("Launcher pod render").

use criterion::{Criterion, criterion_group, criterion_main};
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::vm::setup_vmi::setup_vmi_from_vm;
use virtctl_rs::controller::vmi::executor::render_pod_with;
use virtctl_rs::launcher::resources::NamespaceContext;

fn bench_render(c: &mut Criterion) {
    let vm: VirtualMachine =
        serde_yaml::from_str(include_str!("../docs/examples/vm-containerdisk.yaml"))
            .expect("docs/examples/vm-containerdisk.yaml is a VirtualMachine");
    let mut vmi = setup_vmi_from_vm(&vm).expect("demo-vm has a template");
    vmi.metadata.namespace = Some("default".into());
    vmi.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    let settings = ClusterSettings::default();
    let ns = NamespaceContext::default();
    let pod = render_pod_with(&settings, &ns, &vmi).expect("demo-vm renders");
    assert!(
        pod.spec
            .as_ref()
            .is_some_and(|s| !s.volumes.as_deref().unwrap_or_default().is_empty())
    );
    c.bench_function("launcher_pod_render/demo_vm", |b| {
        b.iter(|| render_pod_with(&settings, &ns, std::hint::black_box(&vmi)).expect("render"))
    });
}

criterion_group!(benches, bench_render);
criterion_main!(benches);
