//! `kubectl virtctl-rs explain-overhead` end to end, through the built binary, on the
//! repository's fixtures (tests/fixtures/) and examples (docs/examples/), plus a sweep over
//! KubeVirt's own v1.9.0 examples when they are available (`KUBEVIRT_EXAMPLES`, see
//! tests/common). Golden outputs live in tests/golden/explain/ (regenerate with
//! `UPDATE_GOLDEN=1 cargo test --test integration explain_overhead_cli::`, then review the diff).

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
}

/// A file of tests/fixtures/.
fn fixture(name: &str) -> PathBuf {
    common::repo_path("tests/fixtures").join(name)
}

fn run(args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = bin();
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    if let Some(text) = stdin {
        // A command line refused before the input is read closes stdin early: not an error.
        match child.stdin.take().unwrap().write_all(text.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/explain")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    pretty_assertions::assert_eq!(expected, actual, "golden {name}");
}

/// Golden outputs (table and JSON) for the main example VM and four fixtures; vmi-arm on an
/// arm64 cluster.
#[test]
fn golden_outputs_for_fixtures_and_examples() {
    for (path, extra) in [
        (
            common::repo_path("docs/examples/vm-containerdisk.yaml"),
            vec![],
        ),
        (fixture("vmi-masquerade.yaml"), vec![]),
        (fixture("vmi-gpu.yaml"), vec![]),
        (fixture("vmi-arm.yaml"), vec!["--architecture", "arm64"]),
        (fixture("vmi-sriov.yaml"), vec![]),
    ] {
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let path = path.to_str().unwrap();
        let stem = file.trim_end_matches(".yaml");
        for (format, ext) in [("table", "txt"), ("json", "json")] {
            let mut args = vec!["explain-overhead", "-f", path, "-o", format];
            args.extend(extra.iter().copied());
            let out = run(&args, None);
            assert!(out.status.success(), "{file}: {}", text(&out.stderr));
            golden(&format!("{stem}.{ext}"), &text(&out.stdout));
        }
    }
}

/// The JSON shape other tools rely on, and the worked totals of the facts (§5): arm64 adds
/// 128Mi; a GPU adds 1Gi of VFIO.
#[test]
fn json_shape_and_values() {
    let out = run(
        &[
            "explain-overhead",
            "-f",
            fixture("vmi-gpu.yaml").to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &v[0];
    assert_eq!(e["kind"], "VirtualMachineInstance");
    assert_eq!(e["namespace"], "default");
    assert_eq!(e["name"], "fixture-gpu");
    let total = e["overhead"]["totalBytes"].as_i64().unwrap();
    let terms = e["overhead"]["terms"].as_array().unwrap();
    assert_eq!(
        terms
            .iter()
            .map(|t| t["bytes"].as_i64().unwrap())
            .sum::<i64>(),
        total
    );
    assert!(
        terms
            .iter()
            .all(|t| t["name"].is_string() && t["reason"].is_string() && t["source"].is_string())
    );
    assert!(
        terms
            .iter()
            .any(|t| t["name"] == "vfio" && t["bytes"] == 1 << 30)
    );
    assert_eq!(total, (268 << 20) + (1 << 30));
    assert!(e["computeResources"]["requests"]["memory"].is_string());
    assert_eq!(
        e["computeResources"]["limits"]["nvidia.com/TU104GL_Tesla_T4"],
        "1"
    );

    let yaml = run(
        &[
            "explain-overhead",
            "-f",
            fixture("vmi-arm.yaml").to_str().unwrap(),
            "-o",
            "yaml",
            "--architecture",
            "arm64",
        ],
        None,
    );
    let v: serde_json::Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(v[0]["overhead"]["totalBytes"], (268 + 128) << 20);
}

/// Every file of `files` with a VM or VMI explains without error; other kinds are skipped with
/// a note on stderr; files without any VM/VMI are an error that says so. Returns how many
/// files were explained.
fn explain_all(files: &[PathBuf]) -> usize {
    let mut explained = 0;
    for path in files {
        let text_in = std::fs::read_to_string(path).unwrap();
        let has_vm = text_in.lines().any(|l| {
            [
                "kind: VirtualMachine",
                "kind: VirtualMachineInstance",
                "kind: VirtualMachinePool",
                "kind: VirtualMachineInstanceReplicaSet",
            ]
            .contains(&l)
        });
        let out = run(
            &[
                "explain-overhead",
                "-f",
                path.to_str().unwrap(),
                "-o",
                "json",
            ],
            None,
        );
        if has_vm {
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                text(&out.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert!(!v.as_array().unwrap().is_empty());
            explained += 1;
        } else {
            assert_eq!(out.status.code(), Some(1), "{}", path.display());
            assert!(
                text(&out.stderr).contains("no VirtualMachine or VirtualMachineInstance found"),
                "{}",
                text(&out.stderr)
            );
        }
    }
    explained
}

/// Every own example and fixture holds a VM or VMI, and explains.
#[test]
fn every_own_example_and_fixture_explains() {
    let files = common::own_manifest_files();
    assert_eq!(explain_all(&files), files.len());
}

/// KubeVirt's 36 example files with a VM, VMI, VM pool or VMI replica set explain (34 VM/VMI files,
/// vm-pool-cirros.yaml, vmi-replicaset-cirros.yaml); the others are refused with a reason.
#[test]
fn every_upstream_example_explains() {
    let Some(dir) = common::upstream_examples("every_upstream_example_explains") else {
        return;
    };
    assert_eq!(explain_all(&common::yaml_files(&dir)), 36);
}

#[test]
fn other_kinds_are_skipped_with_a_note() {
    let input = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: v}\nspec: {domain: {devices: {}, resources: {requests: {memory: 1Gi}}}}\n";
    let out = run(&["explain-overhead", "-f", "-", "-o", "json"], Some(input));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("note: <stdin>: document 1 (ConfigMap c): skipped"),
        "{}",
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 1Gi request, 1 vCPU, bridge interface: 270Mi (facts §5).
    assert_eq!(v[0]["overhead"]["totalBytes"], 283_115_520);
    assert_eq!(v[0]["computeResources"]["requests"]["memory"], "1294Mi");
}

/// Bad input: each error names the document, the object and the field, exits non-zero, and
/// never panics.
#[test]
fn bad_input_names_document_object_and_field() {
    let vmi = |mem: &str| {
        format!(
            "---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: ok}}\nspec: {{domain: {{devices: {{}}}}}}\n---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: bad, namespace: ns}}\nspec: {{domain: {{devices: {{}}, resources: {{requests: {{memory: \"{mem}\"}}}}}}}}\n"
        )
    };
    for (input, expected) in [
        (vmi("2Gx"), "<stdin>: document 2 (VirtualMachineInstance ns/bad): field spec.domain.resources.requests.memory: quantity \"2Gx\""),
        (vmi("-1Gi"), "<stdin>: document 2 (VirtualMachineInstance ns/bad): field spec.domain.resources.requests.memory: must not be negative"),
        (
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: t}\nspec:\n  template:\n    spec:\n      domain:\n        devices: {}\n        resources: {limits: {memory: 1Qi}}\n".to_string(),
            "<stdin>: document 1 (VirtualMachine t): field spec.template.spec.domain.resources.limits.memory",
        ),
        ("apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: nt}\nspec: {runStrategy: Always}\n".to_string(), "<stdin>: document 1 (VirtualMachine nt): field spec.template: required field is missing"),
        ("".to_string(), "<stdin>: the input is empty"),
        ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n".to_string(), "no VirtualMachine or VirtualMachineInstance found"),
        ("kind: [unclosed\n".to_string(), "<stdin>: document 1: invalid YAML"),
    ] {
        let out = run(&["explain-overhead", "-f", "-"], Some(&input));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "input {input:?}: {err}");
        assert!(err.contains(expected), "input {input:?}\nexpected {expected:?}\ngot {err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty(), "no half output on error");
    }
}

/// A launcher pod of fixture-masquerade with every `compute` resource KubeVirt renders for it
/// but the memory request, and the overhead annotation, given.
fn launcher_pod(overhead: &str, memory: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: virt-launcher-fixture-masquerade-abcde\n  namespace: default\n  annotations:\n    kubevirt.io/domain: fixture-masquerade\n    kubevirt.io/memory-overhead-bytes: \"{overhead}\"\nspec:\n  containers:\n  - name: compute\n    image: x\n    resources:\n      requests:\n        cpu: 100m\n        ephemeral-storage: 50M\n        memory: \"{memory}\"\n      limits:\n        devices.kubevirt.io/kvm: \"1\"\n        devices.kubevirt.io/tun: \"1\"\n        devices.kubevirt.io/vhost-net: \"1\"\n"
    )
}

/// `--pod`: MATCH when the pod agrees with the formula, the difference in bytes (exit 3) when not.
#[test]
fn pod_check_match_and_mismatch() {
    let dir = tempfile::tempdir().unwrap();
    let vmi = fixture("vmi-masquerade.yaml");
    // fixture-masquerade: 1024M guest, masquerade, no request → overhead 268Mi, request
    // 1024M + 268Mi.
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, launcher_pod("281018368", "1305018368")).unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vmi.to_str().unwrap(),
            "--pod",
            good.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("pod default/virt-launcher-fixture-masquerade-abcde: MATCH"),
        "{}",
        text(&out.stdout)
    );

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, launcher_pod("281018369", "1300Mi")).unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vmi.to_str().unwrap(),
            "--pod",
            bad.to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &v[0]["podCheck"];
    assert_eq!(c["match"], false);
    assert_eq!(c["overheadDifferenceBytes"], 1);
    assert_eq!(
        c["memoryRequestDifferenceBytes"],
        1300 * 1024 * 1024 - 1_305_018_368i64
    );
}

#[test]
fn settings_from_kubevirt_cr_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("kv.yaml");
    std::fs::write(&cr, "apiVersion: kubevirt.io/v1\nkind: KubeVirt\nmetadata: {name: kubevirt, namespace: kubevirt}\nspec:\n  configuration:\n    additionalGuestMemoryOverheadRatio: \"2\"\n    developerConfiguration: {cpuAllocationRatio: 16}\n").unwrap();
    let input = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: v}\nspec: {domain: {devices: {}, resources: {requests: {memory: 1Gi}}}}\n";
    let out = run(
        &[
            "explain-overhead",
            "-f",
            "-",
            "-o",
            "json",
            "--kubevirt-cr",
            cr.to_str().unwrap(),
        ],
        Some(input),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 1 vCPU / ratio 16 → 62500u (renderresources: %g then µ).
    assert_eq!(v[0]["computeResources"]["requests"]["cpu"], "62500u");
    // Ratio 2: 283115520 → + 1000 × trunc(283116 × 1.0) bytes.
    assert_eq!(v[0]["overhead"]["totalBytes"], 283_115_520 + 283_116_000);
    let out = run(
        &[
            "explain-overhead",
            "-f",
            "-",
            "-o",
            "json",
            "--kubevirt-cr",
            cr.to_str().unwrap(),
            "--cpu-allocation-ratio",
            "10",
        ],
        Some(input),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["computeResources"]["requests"]["cpu"], "100m");
    let out = run(
        &["explain-overhead", "-f", "-", "--cpu-allocation-ratio", "0"],
        Some(input),
    );
    assert_eq!(out.status.code(), Some(1));
}

/// Found by a new-user trial: with nothing to explain the exit code was 1, while --help says
/// usage errors exit 2.
#[test]
fn no_input_is_a_usage_error() {
    let out = run(&["explain-overhead"], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("give -f FILE"),
        "{}",
        text(&out.stderr)
    );
}

/// Cluster mode (tests/explain_overhead_cluster.rs has it against a cluster): with no cluster
/// to read, the error says which kubeconfig failed; -f and a TYPE/NAME do not mix.
#[test]
fn cluster_mode_without_a_cluster_says_which_configuration_failed() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let out = run(
        &[
            "explain-overhead",
            "vm/foo",
            "--kubeconfig",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("no-such-kubeconfig"),
        "{}",
        text(&out.stderr)
    );
    let vmi = fixture("vmi-masquerade.yaml");
    let out = run(
        &["explain-overhead", "vm/foo", "-f", vmi.to_str().unwrap()],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("give one"),
        "{}",
        text(&out.stderr)
    );
}

/// Found by a new-user trial: invalid cluster settings and mismatched pods were accepted.
#[test]
fn invalid_settings_and_mismatched_pods_are_rejected() {
    let vmi = fixture("vmi-masquerade.yaml");
    let vmi = vmi.to_str().unwrap();
    // KubeVirt's webhook rejects ratios below 1.0.
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vmi,
            "--additional-guest-memory-overhead-ratio",
            "0.5",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("below 1.0"),
        "{}",
        text(&out.stderr)
    );
    let out = run(
        &["explain-overhead", "-f", vmi, "--architecture", "x86"],
        None,
    );
    assert_ne!(out.status.code(), Some(0));

    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.yaml");
    std::fs::write(
        &other,
        launcher_pod("281018368", "1305018368").replace(
            "kubevirt.io/domain: fixture-masquerade",
            "kubevirt.io/domain: demo-vm",
        ),
    )
    .unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vmi,
            "--pod",
            other.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("belongs to VMI \"demo-vm\""),
        "{}",
        text(&out.stderr)
    );
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vmi,
            "--pod",
            empty.to_str().unwrap(),
        ],
        None,
    );
    assert!(
        text(&out.stderr).contains("the file is empty"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["explain-overhead", "-f", vmi, "--pod", vmi], None);
    assert!(
        text(&out.stderr).contains("expected a Pod, found kind VirtualMachineInstance"),
        "{}",
        text(&out.stderr)
    );

    // A VM whose instancetype is not in the input is explained from its template, with a note
    // saying so.
    let out = run(
        &[
            "explain-overhead",
            "-f",
            fixture("vm-instancetype.yaml").to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success());
    assert!(
        text(&out.stderr)
            .contains("instancetype fixture-medium and preference fixture-linux not resolved"),
        "{}",
        text(&out.stderr)
    );
    // The skipped kinds are named when nothing is left.
    let out = run(
        &["explain-overhead", "-f", "-"],
        Some("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n"),
    );
    assert!(
        text(&out.stderr).contains("skipped: Deployment d"),
        "{}",
        text(&out.stderr)
    );
}

/// Inputs as kubectl takes them: -f repeated and -f DIR, Namespace and ResourceQuota documents
/// (in the input or with --namespace-file / --resourcequota-file) as the namespace context, and
/// a pod List for --pod.
#[test]
fn inputs_as_kubectl_takes_them_with_the_namespace_context() {
    let dir = tempfile::tempdir().unwrap();
    let vmi = |name: &str, ns: &str| {
        format!(
            "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{domain: {{devices: {{}}, resources: {{requests: {{memory: 1Gi}}}}}}}}\n"
        )
    };
    let vms = dir.path().join("vms");
    std::fs::create_dir(&vms).unwrap();
    std::fs::write(vms.join("a.yaml"), vmi("a", "prod")).unwrap();
    std::fs::write(vms.join("b.yml"), vmi("b", "dev")).unwrap();
    std::fs::write(vms.join("notes.txt"), "not a manifest").unwrap();
    let context = dir.path().join("context.yaml");
    std::fs::write(
        &context,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod, labels: {alpha.kubevirt.io/auto-memory-limits-ratio: \"1.5\"}}\n---\napiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: prod}\nspec: {hard: {limits.memory: 10Gi, limits.cpu: \"8\"}}\n",
    )
    .unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vms.to_str().unwrap(),
            "-f",
            context.to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["a", "b"],
        "the directory's .yaml/.yml files, sorted"
    );
    // prod: 1294Mi request → limit trunc(1294Mi × 1.5), CPU limit = 1 vCPU; dev: no quota.
    let request: i64 = 1294 * 1024 * 1024;
    let bytes = |q: &serde_json::Value| {
        virtctl_rs::api::quantity::ParsedQuantity::parse(q.as_str().expect("a quantity"))
            .unwrap()
            .value()
    };
    assert_eq!(
        bytes(&v[0]["computeResources"]["limits"]["memory"]),
        (request as f64 * 1.5) as i64
    );
    assert_eq!(v[0]["computeResources"]["limits"]["cpu"], "1");
    assert!(v[1]["computeResources"]["limits"].get("memory").is_none());

    // The same context from the dedicated flags.
    let ns_file = dir.path().join("ns.yaml");
    std::fs::write(
        &ns_file,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: prod}\n",
    )
    .unwrap();
    let quota_file = dir.path().join("quota.yaml");
    std::fs::write(
        &quota_file,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ResourceQuota\n  metadata: {name: q, namespace: prod}\n  spec: {hard: {limits.memory: 10Gi}}\n",
    )
    .unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vms.join("a.yaml").to_str().unwrap(),
            "--namespace-file",
            ns_file.to_str().unwrap(),
            "--resourcequota-file",
            quota_file.to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        bytes(&v[0]["computeResources"]["limits"]["memory"]),
        request * 2
    );
    assert!(v[0]["computeResources"]["limits"].get("cpu").is_none());
    let out = run(
        &[
            "explain-overhead",
            "-f",
            vms.join("a.yaml").to_str().unwrap(),
            "--namespace-file",
            quota_file.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("expected a Namespace, found none"),
        "{}",
        text(&out.stderr)
    );

    // --pod with a List of pods, as `kubectl get pod -o yaml` prints: each finds its VMI.
    let fixture_vmi = fixture("vmi-masquerade.yaml");
    let list = format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        launcher_pod("281018368", "1300Mi")
            .lines()
            .enumerate()
            .map(|(i, l)| if i == 0 {
                format!("- {l}\n")
            } else {
                format!("  {l}\n")
            })
            .collect::<String>()
    );
    let pods = dir.path().join("pods.yaml");
    std::fs::write(&pods, list).unwrap();
    let out = run(
        &[
            "explain-overhead",
            "-f",
            fixture_vmi.to_str().unwrap(),
            "--pod",
            pods.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.contains("requests.memory"), "{table}");
    assert!(
        table.contains("likely cause: the pod's resources differ"),
        "{table}"
    );

    // An empty directory is an error that names it.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = run(&["explain-overhead", "-f", empty.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("has no .yaml, .yml or .json file"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 12 items 4 and 5 through the binary: `--kubevirt-version` selects a row of the version
/// table (main's QEMU estimate is 50Mi, PR 18388), an unknown version is a usage error listing
/// the known ones, and a known upstream defect comes out as a warning in the table and JSON.
#[test]
fn kubevirt_version_flag_and_warnings() {
    let input = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: g}\nspec: {domain: {devices: {}, memory: {guest: 160Gi}}}\n";
    let json = |version: &str| {
        let out = run(
            &[
                "explain-overhead",
                "-f",
                "-",
                "-o",
                "json",
                "--kubevirt-version",
                version,
            ],
            Some(input),
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let qemu = |v: &serde_json::Value| {
        v[0]["overhead"]["terms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "qemu")
            .unwrap()["bytes"]
            .clone()
    };
    let main = json("main");
    assert_eq!(main[0]["kubevirtVersion"], "main");
    assert_eq!(qemu(&main), 50 * 1024 * 1024);
    // A patch release uses its minor's row.
    let v19 = json("v1.9.3");
    assert_eq!(v19[0]["kubevirtVersion"], "v1.9.0");
    assert_eq!(qemu(&v19), 30 * 1024 * 1024);
    assert_eq!(v19[0]["warnings"][0]["id"], "guestOnlyNoPageTables");
    // v1.6 copied memory.guest into the request: page tables counted, nothing flagged.
    let v16 = json("v1.6.0");
    assert!(v16[0].get("warnings").is_none(), "{}", v16[0]);
    let table = run(&["explain-overhead", "-f", "-"], Some(input));
    let table = text(&table.stdout);
    assert!(table.contains("WARNING guestOnlyNoPageTables:"), "{table}");
    assert!(
        table.contains("upstream: kubevirt/kubevirt PR 15896"),
        "{table}"
    );
    let out = run(
        &[
            "explain-overhead",
            "-f",
            "-",
            "--kubevirt-version",
            "v0.59.0",
        ],
        Some(input),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("unknown KubeVirt version \"v0.59.0\": known versions are v1.0.0, v1.1.0, v1.2.0, v1.3.0, v1.4.0, v1.4.1, v1.5.0, v1.5.1, v1.5.3, v1.6.0, v1.6.4, v1.7.0, v1.8.0, v1.9.0, main"),
        "{err}"
    );
}

/// A VM naming an instancetype and a preference is explained with both applied when the input
/// holds them (KubeVirt's `ApplyToVM`, pkg/instancetype/apply/vm.go:67-87): 2 vCPUs as cores,
/// 2Gi of guest memory from demo-cx-medium; without them, a note and the template alone.
#[test]
fn instancetype_vms_are_explained_expanded() {
    let example = common::repo_path("docs/examples/more/vm-instancetype.yaml");
    let out = run(&["explain-overhead", "-f", example.to_str().unwrap()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("8Mi × 2 vCPU(s): domain.cpu: cores 2 × sockets 1 × threads 1"),
        "{stdout}"
    );
    // 2Gi guest + 276Mi overhead.
    assert!(stdout.contains("memory=2324Mi"), "{stdout}");
    assert!(
        text(&out.stderr)
            .contains("expanded with instancetype demo-cx-medium and preference demo-linux-virtio"),
        "{}",
        text(&out.stderr)
    );

    // Only the VM: the references cannot be resolved.
    let text_all = std::fs::read_to_string(&example).unwrap();
    let vm_only = text_all
        .split("\n---\n")
        .find(|d| d.contains("kind: VirtualMachine\n"))
        .unwrap();
    let out = run(&["explain-overhead", "-f", "-"], Some(vm_only));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("not resolved (virtualmachineclusterinstancetypes.instancetype.kubevirt.io \"demo-cx-medium\" not found"),
        "{stderr}"
    );
}
