//! Every VirtualMachine and VirtualMachineInstance of the repository's own manifests
//! (docs/examples, docs/examples/more, tests/fixtures) and, when available, of KubeVirt's v1.9.0
//! example manifests (`KUBEVIRT_EXAMPLES`, see tests/common) must survive deserialise →
//! serialise without losing or changing a field.

use crate::common;

use std::path::PathBuf;
use virtctl_rs::api::manifest::split_documents;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};

/// Kubernetes treats an explicit `null` like an absent optional field; drop them before comparing.
fn strip_nulls(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(
    value: &serde_json::Value,
) -> serde_json::Value {
    let typed: T = serde_json::from_value(value.clone()).expect("deserialise");
    serde_json::to_value(&typed).expect("serialise")
}

/// Round-trips every VM and VMI document of `files`; returns (files holding one, objects).
fn round_trip_files(files: &[PathBuf]) -> (usize, usize) {
    let mut files_with_one = 0;
    let mut objects = 0;
    for path in files {
        let text = std::fs::read_to_string(path).unwrap();
        let mut found = false;
        for (_, doc) in split_documents(&path.display().to_string(), &text).unwrap() {
            let kind = doc
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("")
                .to_string();
            let back = match kind.as_str() {
                "VirtualMachine" => round_trip::<VirtualMachine>(&doc),
                "VirtualMachineInstance" => round_trip::<VirtualMachineInstance>(&doc),
                _ => continue,
            };
            found = true;
            objects += 1;
            let (mut a, mut b) = (doc.clone(), back);
            strip_nulls(&mut a);
            strip_nulls(&mut b);
            pretty_assertions::assert_eq!(
                a,
                b,
                "{} ({kind}) changed in a round trip",
                path.display()
            );
        }
        if found {
            files_with_one += 1;
        }
    }
    (files_with_one, objects)
}

#[test]
fn every_own_example_and_fixture_round_trips() {
    let files = common::own_manifest_files();
    let (files_with_one, objects) = round_trip_files(&files);
    assert_eq!(
        files_with_one,
        files.len(),
        "every own manifest holds a VM or VMI"
    );
    assert!(objects >= 14, "{objects} objects");
}

#[test]
fn every_upstream_example_vm_and_vmi_round_trips() {
    let Some(dir) = common::upstream_examples("every_upstream_example_vm_and_vmi_round_trips")
    else {
        return;
    };
    let (files_with_one, objects) = round_trip_files(&common::yaml_files(&dir));
    assert_eq!(
        files_with_one, 34,
        "KubeVirt v1.9.0 ships 34 example files with a VM or VMI"
    );
    assert!(objects >= 34);
}

/// A field we do not model, deep inside the template, survives a round trip and a YAML trip.
#[test]
fn unknown_fields_survive_yaml() {
    let text = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: x, namespace: ns}
spec:
  runStrategy: Always
  futureField: {a: 1}
  template:
    metadata: {labels: {a: b}}
    spec:
      domain:
        devices:
          disks: [{name: d, disk: {bus: virtio}, futureDiskField: true}]
          futureDevice: {x: [1, 2.5, "s"]}
        memory: {guest: 1Gi, futureMemory: 3}
      futureSpecField: null
      volumes: [{name: d, containerDisk: {image: i, futureImageField: 1}}]
status: {printableStatus: Stopped, somethingNew: {deep: true}}
"#;
    let vm: VirtualMachine = serde_yaml::from_str(text).unwrap();
    let out = serde_yaml::to_string(&vm).unwrap();
    let a: serde_json::Value = serde_yaml::from_str(text).unwrap();
    let mut b: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    let mut a = a;
    strip_nulls(&mut a);
    strip_nulls(&mut b);
    assert_eq!(a, b);
}
