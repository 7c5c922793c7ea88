//! What decoding one watch event costs the controller's informers, with and without reading
//! `metadata.managedFields` (src/runtime/wire.rs).
//!
//! The objects are `demo-vm` (docs/examples/vm-containerdisk.yaml), its VMI as the VM controller
//! builds it and its launcher pod as the VMI controller renders it, each sent as a `MODIFIED`
//! watch line. On kube-apiserver each carries `managedFields`: here two entries, one for the
//! creating manager naming every field of `metadata` and `spec`, one for the status writer
//! naming every field of `status`, in `FieldsV1`'s shape (`f:` per field, `k:` per keyed list
//! item, `.` for a set map), which is what a server-side field manager records for a manager
//! that set those fields. The embedded API server sends none (the third column).
//!
//! - `whole`: `WatchEvent<K>` as kube decodes it, `managedFields` built into `Value`s (and then
//!   dropped by the informer's transform): what every informer did before `WithoutManagedFields`.
//! - `without`: `WatchEvent<WithoutManagedFields<K>>`, what the informers decode now.
//! - `none`: `WatchEvent<WithoutManagedFields<K>>` of the line without `managedFields`.
//!
//! Run: `cargo bench --bench watch_decode`. Figures: docs/performance.md ("Decoding without
//! managedFields").

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube::core::WatchEvent;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::vm::setup_vmi::setup_vmi_from_vm;
use virtctl_rs::controller::vmi::executor::render_pod_with;
use virtctl_rs::controller::vmi::launcher_cache::CachedPod;
use virtctl_rs::launcher::resources::NamespaceContext;
use virtctl_rs::runtime::wire::WithoutManagedFields;

/// The `FieldsV1` of a manager that set every field of `v`.
fn fields_v1(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            out.insert(".".into(), json!({}));
            for (k, child) in m {
                out.insert(format!("f:{k}"), fields_v1(child));
            }
            Value::Object(out)
        }
        Value::Array(items) if items.iter().all(|i| i.get("name").is_some()) => {
            let mut out = Map::new();
            for item in items {
                let key = json!({"name": item["name"]}).to_string();
                out.insert(format!("k:{key}"), fields_v1(item));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// `obj` as kube-apiserver sends it: a creating manager's entry for `metadata` and `spec`, a
/// status writer's for `status`.
fn with_managed_fields(mut obj: Value, api_version: &str) -> Value {
    let mut created = Map::new();
    for part in ["metadata", "spec"] {
        if let Some(v) = obj.get(part) {
            created.insert(format!("f:{part}"), fields_v1(v));
        }
    }
    let status = obj
        .get("status")
        .map(fields_v1)
        .unwrap_or_else(|| json!({}));
    obj["metadata"]["managedFields"] = json!([
        {"apiVersion": api_version, "fieldsType": "FieldsV1", "fieldsV1": created,
         "manager": "virtctl-rs", "operation": "Update", "time": "2026-12-06T00:00:00Z"},
        {"apiVersion": api_version, "fieldsType": "FieldsV1", "fieldsV1": {"f:status": status},
         "manager": "virt-handler", "operation": "Update", "subresource": "status",
         "time": "2026-12-06T00:00:01Z"}
    ]);
    obj
}

fn line(obj: &Value) -> String {
    json!({"type": "MODIFIED", "object": obj}).to_string()
}

/// The three columns (module docs) for one kind.
fn bench_kind<K: DeserializeOwned>(c: &mut Criterion, kind: &str, obj: Value, api_version: &str) {
    let managed = line(&with_managed_fields(obj.clone(), api_version));
    let plain = line(&obj);
    eprintln!(
        "{kind}: {} bytes of JSON, {} with managedFields",
        plain.len(),
        managed.len()
    );
    let mut group = c.benchmark_group(format!("watch_decode/{kind}"));
    group.bench_function("whole", |b| {
        b.iter(|| serde_json::from_str::<WatchEvent<K>>(std::hint::black_box(&managed)).unwrap())
    });
    group.bench_function("without", |b| {
        b.iter(|| {
            serde_json::from_str::<WatchEvent<WithoutManagedFields<K>>>(std::hint::black_box(
                &managed,
            ))
            .unwrap()
        })
    });
    group.bench_function("none", |b| {
        b.iter(|| {
            serde_json::from_str::<WatchEvent<WithoutManagedFields<K>>>(std::hint::black_box(
                &plain,
            ))
            .unwrap()
        })
    });
    group.finish();
}

fn bench_watch_decode(c: &mut Criterion) {
    let mut vm: VirtualMachine =
        serde_yaml::from_str(include_str!("../docs/examples/vm-containerdisk.yaml"))
            .expect("docs/examples/vm-containerdisk.yaml is a VirtualMachine");
    vm.metadata.namespace = Some("default".into());
    vm.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    let mut vmi: VirtualMachineInstance = setup_vmi_from_vm(&vm).expect("demo-vm has a template");
    vmi.metadata.uid = Some("00000000-0000-0000-0000-000000000002".into());
    let pod = render_pod_with(
        &ClusterSettings::default(),
        &NamespaceContext::default(),
        &vmi,
    )
    .expect("demo-vm renders");
    bench_kind::<VirtualMachine>(c, "vm", as_json(&vm), "kubevirt.io/v1");
    bench_kind::<VirtualMachineInstance>(c, "vmi", as_json(&vmi), "kubevirt.io/v1");
    bench_kind::<Pod>(c, "pod_whole", as_json(&pod), "v1");
    bench_kind::<CachedPod>(c, "launcher_pod", as_json(&pod), "v1");
}

fn as_json<T: serde::Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).expect("serialises")
}

criterion_group!(benches, bench_watch_decode);
criterion_main!(benches);
