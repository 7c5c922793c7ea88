//! The real `kubectl` against the embedded API server: `get`, `apply -f` on every
//! VirtualMachine or VirtualMachineInstance of the repository's own manifests (docs/examples,
//! docs/examples/more, tests/fixtures) and, when they are available (`KUBEVIRT_EXAMPLES`, see
//! tests/common), of KubeVirt's v1.9.0 examples; `get -o yaml`, `patch --type=json`, `delete`.
//! Skipped (with a printed reason) when kubectl is missing.

use crate::common;

use std::path::{Path, PathBuf};

use common::objects::{vm_resource, vmi_resource};
use kube::api::{Api, DynamicObject};
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.args(args)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kubectl");
        // Dropping stdin (after writing, if there is input) closes it.
        if let Some(mut si) = child.stdin.take()
            && let Some(text) = stdin
        {
            si.write_all(text.as_bytes()).await.unwrap();
        }
        let out = child.wait_with_output().await.unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args, None).await;
        assert!(ok, "kubectl {args:?} failed: {err}{out}");
        out
    }
}

fn kubectl_available() -> bool {
    std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The VirtualMachine and VirtualMachineInstance documents of the example files, with the
/// file, kind and name of each: the repository's own, then KubeVirt's when available.
fn vm_examples() -> Vec<(PathBuf, String, String)> {
    let mut out = Vec::new();
    let mut dirs = common::own_manifest_dirs();
    dirs.extend(common::upstream_examples(
        "kubectl_get_apply_patch_delete over KubeVirt's examples (the repository's own still run)",
    ));
    for f in dirs.iter().flat_map(|d| common::yaml_files(d)) {
        let text = std::fs::read_to_string(&f).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let Ok(v) = <serde_json::Value as serde::Deserialize>::deserialize(doc) else {
                continue;
            };
            let kind = v["kind"].as_str().unwrap_or("");
            if kind == "VirtualMachine" || kind == "VirtualMachineInstance" {
                let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
                out.push((f.clone(), kind.to_string(), name));
            }
        }
    }
    out
}

fn only_vm_docs(path: &Path) -> String {
    // Some files also hold a PriorityClass or a claim: feed only the VM/VMI documents.
    let text = std::fs::read_to_string(path).unwrap();
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or("");
        if kind == "VirtualMachine" || kind == "VirtualMachineInstance" {
            docs.push(serde_yaml::to_string(&v).unwrap());
        }
    }
    docs.join("---\n")
}

#[tokio::test]
async fn kubectl_get_apply_patch_delete() {
    if !kubectl_available() {
        eprintln!("SKIP kubectl_get_apply_patch_delete: kubectl is not on PATH");
        return;
    }
    let examples = vm_examples();
    assert!(
        examples.iter().any(|(_, k, _)| k == "VirtualMachine")
            && examples
                .iter()
                .any(|(_, k, _)| k == "VirtualMachineInstance"),
        "the repository's own examples hold a VM and a VMI: {examples:?}"
    );
    // The wire protocol alone: without admission, whose VMI finalizer would keep
    // `kubectl delete vmi` waiting for a controller that does not run here.
    let server = common::server_without_admission().await;
    let k = Kubectl {
        kubeconfig: server.kubeconfig_path().to_path_buf(),
        cache: tempfile::tempdir().unwrap(),
    };
    let out = k.ok(&["get", "namespaces"]).await;
    for ns in ["default", "kube-system", "kubevirt"] {
        assert!(out.contains(ns), "{out}");
    }
    let (ok, out, err) = k.run(&["get", "pods"], None).await;
    assert!(
        ok && out.is_empty() && err.contains("No resources found"),
        "{out}{err}"
    );

    let client = server.client().await.unwrap();
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vmi_resource());
    for (file, kind, name) in &examples {
        let manifest = only_vm_docs(file);
        let (ok, out, err) = k.run(&["apply", "-f", "-"], Some(&manifest)).await;
        assert!(ok, "apply {}: {err}", file.display());
        // Two examples share a name (vmi-fedora): the second apply updates the first.
        assert!(
            out.contains("created") || out.contains("configured"),
            "{out}"
        );
        let api = if kind == "VirtualMachine" {
            &vms
        } else {
            &vmis
        };
        let obj = api.get(name).await.unwrap();
        assert!(
            obj.metadata
                .annotations
                .unwrap_or_default()
                .contains_key("kubectl.kubernetes.io/last-applied-configuration"),
            "{name}"
        );
    }
    // Re-applying unchanged is a no-op; a changed manifest goes through a merge patch.
    let (file, _, vm_name) = examples
        .iter()
        .find(|(_, k, _)| k == "VirtualMachine")
        .unwrap();
    let manifest = only_vm_docs(file);
    let (ok, out, _) = k.run(&["apply", "-f", "-"], Some(&manifest)).await;
    assert!(ok && out.contains("unchanged"), "{out}");
    let changed = manifest.replacen(
        "metadata:\n",
        "metadata:\n  labels:\n    applied: again\n",
        1,
    );
    let changed = if changed.contains("labels:\n    applied") {
        changed
    } else {
        manifest.clone()
    };
    let (ok, out, err) = k.run(&["apply", "-f", "-"], Some(&changed)).await;
    assert!(ok, "{err}");
    assert!(
        out.contains("configured") || out.contains("unchanged"),
        "{out}"
    );
    // The server answers kubectl's Table request with the KubeVirt printer columns.
    let out = k.ok(&["get", "vm"]).await;
    assert!(out.contains(vm_name.as_str()), "{out}");
    let header = out.lines().next().unwrap_or("");
    assert!(
        header.contains("STATUS") && header.contains("READY"),
        "{out}"
    );
    let out = k.ok(&["get", "vmi", "-o", "wide"]).await;
    let header = out.lines().next().unwrap_or("");
    for col in ["PHASE", "NODENAME", "LIVE-MIGRATABLE"] {
        assert!(header.contains(col), "{out}");
    }

    // get vmi -o yaml
    let (_, _, vmi_name) = examples
        .iter()
        .find(|(_, k, _)| k == "VirtualMachineInstance")
        .unwrap();
    let yaml = k.ok(&["get", "vmi", vmi_name, "-o", "yaml"]).await;
    let v: serde_json::Value = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(v["kind"], "VirtualMachineInstance");
    assert_eq!(v["apiVersion"], "kubevirt.io/v1");
    let list_yaml = k.ok(&["get", "vmis", "-o", "yaml"]).await;
    let l: serde_json::Value = serde_yaml::from_str(&list_yaml).unwrap();
    let distinct: std::collections::BTreeSet<&String> = examples
        .iter()
        .filter(|(_, k, _)| k == "VirtualMachineInstance")
        .map(|(_, _, n)| n)
        .collect();
    assert_eq!(l["items"].as_array().unwrap().len(), distinct.len());

    // patch --type=json, including a failing test op.
    k.ok(&[
        "patch",
        "vmi",
        vmi_name,
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/metadata/annotations/patched","value":"yes"}]"#,
    ])
    .await;
    let obj = vmis.get(vmi_name).await.unwrap();
    assert_eq!(obj.metadata.annotations.unwrap()["patched"], "yes");
    let before = server.snapshot();
    let (ok, _, err) = k
        .run(
            &[
                "patch",
                "vmi",
                vmi_name,
                "--type=json",
                "-p",
                r#"[{"op":"test","path":"/metadata/name","value":"other"}]"#,
            ],
            None,
        )
        .await;
    assert!(!ok);
    assert!(
        err.contains("the server rejected our request due to an error in our request"),
        "{err}"
    );
    assert_eq!(server.snapshot(), before);
    // kubectl patch defaults to strategic merge, which custom resources refuse (415).
    let (ok, _, err) = k
        .run(
            &[
                "patch",
                "vm",
                vm_name,
                "-p",
                r#"{"metadata":{"labels":{"x":"y"}}}"#,
            ],
            None,
        )
        .await;
    assert!(!ok && err.contains("unknown format"), "{err}");
    k.ok(&[
        "patch",
        "vm",
        vm_name,
        "--type=merge",
        "-p",
        r#"{"metadata":{"labels":{"x":"y"}}}"#,
    ])
    .await;

    // delete
    let out = k.ok(&["delete", "vmi", vmi_name]).await;
    assert!(out.contains("deleted"), "{out}");
    assert!(vmis.get(vmi_name).await.is_err());
    let out = k.ok(&["delete", "-f", file.to_str().unwrap()]).await;
    assert!(out.contains("deleted"), "{out}");
    assert!(vms.get(vm_name).await.is_err());
    server.shutdown().await;
}

/// kubectl's typed clients send built-in kinds as `application/vnd.kubernetes.protobuf`:
/// every `kubectl create` generator for a kind the server serves, and `kubectl run`, work, and
/// the stored objects carry what kubectl sent.
#[tokio::test]
async fn kubectl_create_generators_send_protobuf() {
    if !kubectl_available() {
        eprintln!("SKIP kubectl_create_generators_send_protobuf: kubectl is not on PATH");
        return;
    }
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let k = Kubectl {
        kubeconfig: server.kubeconfig_path().to_path_buf(),
        cache: tempfile::tempdir().unwrap(),
    };
    k.ok(&["create", "ns", "prod"]).await;
    k.ok(&[
        "create",
        "configmap",
        "c",
        "--from-literal=a=b",
        "-n",
        "prod",
    ])
    .await;
    k.ok(&["run", "p", "--image=x"]).await;
    k.ok(&[
        "create",
        "secret",
        "generic",
        "s",
        "--from-literal=k=v",
        "-n",
        "prod",
    ])
    .await;
    k.ok(&["create", "serviceaccount", "sa", "-n", "prod"])
        .await;
    k.ok(&[
        "create",
        "service",
        "clusterip",
        "sv",
        "--tcp=80:web",
        "-n",
        "prod",
    ])
    .await;
    k.ok(&[
        "create",
        "priorityclass",
        "pc",
        "--value=7",
        "--description=d",
    ])
    .await;
    k.ok(&["create", "quota", "q", "--hard=pods=2", "-n", "prod"])
        .await;

    let get = |args: &'static [&'static str]| {
        let k = &k;
        async move {
            let out = k.ok(args).await;
            serde_json::from_str::<serde_json::Value>(&out).unwrap()
        }
    };
    let ns = get(&["get", "ns", "prod", "-o", "json"]).await;
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    let cm = get(&["get", "cm", "c", "-n", "prod", "-o", "json"]).await;
    assert_eq!(cm["data"], serde_json::json!({"a": "b"}), "{cm}");
    assert!(cm["metadata"].get("generateName").is_none(), "{cm}");
    let secret = get(&["get", "secret", "s", "-n", "prod", "-o", "json"]).await;
    assert_eq!(secret["data"]["k"], "dg==", "{secret}");
    let svc = get(&["get", "svc", "sv", "-n", "prod", "-o", "json"]).await;
    assert_eq!(svc["spec"]["ports"][0]["port"], 80, "{svc}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "web", "{svc}");
    assert_eq!(svc["spec"]["selector"]["app"], "sv", "{svc}");
    let pc = get(&["get", "pc", "pc", "-o", "json"]).await;
    assert_eq!(
        (pc["value"].clone(), pc["description"].clone()),
        (7.into(), "d".into())
    );
    let q = get(&["get", "quota", "q", "-n", "prod", "-o", "json"]).await;
    assert_eq!(q["spec"]["hard"]["pods"], "2", "{q}");
    let pod = get(&["get", "pod", "p", "-o", "json"]).await;
    assert_eq!(pod["spec"]["containers"][0]["image"], "x", "{pod}");
    server.shutdown().await;
}
