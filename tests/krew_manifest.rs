//! krew: the manifest `scripts/release.sh` renders from `krew/virtctl-rs.yaml.in` obeys krew's
//! rules (validated here: name matches the file, `v`-prefixed semver, unique selectors,
//! sha256 format and value, `bin` present in the archive's file list, `.exe` on Windows), and
//! each broken case fails; the committed `krew/virtctl-rs.yaml` passes the rules that need no
//! archive. Then kubectl's plugin discovery: the built binary, copied as `kubectl-virtctl_rs`
//! into a directory on PATH, answers `kubectl virtctl-rs --help` (skipped, with the reason
//! printed, when kubectl is not installed).

use crate::common;

use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

const PLATFORMS: [(&str, &str); 5] = [
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
    ("windows", "amd64"),
];

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

fn archive_files(path: &Path) -> Vec<String> {
    let out = Command::new("tar")
        .arg("tzf")
        .arg(path)
        .output()
        .expect("tar");
    assert!(out.status.success(), "tar tzf {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .collect()
}

fn is_semver_v(v: &str) -> bool {
    let Some(rest) = v.strip_prefix('v') else {
        return false;
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && (p.len() == 1 || !p.starts_with('0'))
        })
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
        })
}

/// krew's checks of a plugin manifest named `file_name`; `archives` maps an uri's file name to
/// a local archive, whose sha256 and file list are then checked too. All problems, or Ok.
fn validate(
    file_name: &str,
    m: &Value,
    archives: &BTreeMap<String, PathBuf>,
) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if m["apiVersion"] != "krew.googlecontainertools.github.com/v1alpha2" || m["kind"] != "Plugin" {
        errs.push(format!(
            "not a krew Plugin: apiVersion {} kind {}",
            m["apiVersion"], m["kind"]
        ));
    }
    let name = m["metadata"]["name"].as_str().unwrap_or("");
    if file_name.strip_suffix(".yaml") != Some(name) {
        errs.push(format!(
            "metadata.name {name:?} does not match the file name {file_name:?}"
        ));
    }
    let spec = &m["spec"];
    let version = spec["version"].as_str().unwrap_or("");
    if !is_semver_v(version) {
        errs.push(format!(
            "spec.version {version:?} is not a v-prefixed semantic version"
        ));
    }
    for field in ["homepage", "shortDescription", "description"] {
        if spec[field].as_str().is_none_or(str::is_empty) {
            errs.push(format!("spec.{field} is missing"));
        }
    }
    let platforms = spec["platforms"].as_array().cloned().unwrap_or_default();
    if platforms.is_empty() {
        errs.push("spec.platforms is empty".into());
    }
    let mut selectors = BTreeSet::new();
    for (i, p) in platforms.iter().enumerate() {
        let labels = &p["selector"]["matchLabels"];
        let (os, arch) = (
            labels["os"].as_str().unwrap_or(""),
            labels["arch"].as_str().unwrap_or(""),
        );
        let at = format!("spec.platforms[{i}] ({os}/{arch})");
        if os.is_empty() || arch.is_empty() {
            errs.push(format!("{at}: selector.matchLabels needs os and arch"));
        }
        if !selectors.insert(labels.to_string()) {
            errs.push(format!("{at}: duplicate selector {labels}"));
        }
        let uri = p["uri"].as_str().unwrap_or("");
        if !uri.starts_with("https://") || !(uri.ends_with(".tar.gz") || uri.ends_with(".zip")) {
            errs.push(format!("{at}: uri {uri:?} is not an https .tar.gz/.zip"));
        }
        let sha = p["sha256"].as_str().unwrap_or("");
        if sha.len() != 64
            || !sha
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        {
            errs.push(format!(
                "{at}: sha256 {sha:?} is not 64 lowercase hex digits"
            ));
        }
        let bin = p["bin"].as_str().unwrap_or("");
        if bin.is_empty() {
            errs.push(format!("{at}: bin is missing"));
        } else if (os == "windows") != bin.ends_with(".exe") {
            errs.push(format!(
                "{at}: bin {bin:?} must end in .exe exactly on windows"
            ));
        }
        let file = uri.rsplit('/').next().unwrap_or("");
        if let Some(local) = archives.get(file) {
            let actual = sha256(local);
            if actual != sha {
                errs.push(format!(
                    "{at}: sha256 {sha} does not match the archive ({actual})"
                ));
            }
            let files = archive_files(local);
            if !bin.is_empty() && !files.iter().any(|f| f == bin) {
                errs.push(format!(
                    "{at}: bin {bin:?} is not in the archive ({files:?})"
                ));
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A small stand-in for the binary (what is checked is the packaging and the manifest; gzip of
/// the debug binary would take a minute).
fn stub_binary(dir: &Path) -> PathBuf {
    let stub = dir.join("stub-kubectl-virtctl_rs");
    if !stub.exists() {
        std::fs::write(&stub, "#!/bin/sh\necho stand-in for kubectl-virtctl_rs\n").unwrap();
    }
    stub
}

fn release(out: &Path, extra: &[&str]) -> std::process::Output {
    let stubs = out.parent().expect("out has a parent").to_path_buf();
    Command::new(common::repo_path("scripts/release.sh"))
        .env("BIN", stub_binary(&stubs))
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run scripts/release.sh")
}

/// Archives for the platforms this machine cannot build, packaged like release.sh does (a
/// stand-in binary under the platform's name: the test checks the manifest, not the binary).
fn add_other_platforms(out: &Path, version: &str) {
    let stage = tempfile::tempdir().unwrap();
    let mut sums = std::fs::read_to_string(out.join("SHA256SUMS")).unwrap();
    for (os, arch) in PLATFORMS {
        let name = format!("virtctl-rs-v{version}-{os}-{arch}.tar.gz");
        if out.join(&name).exists() {
            continue;
        }
        let bin = if os == "windows" {
            "kubectl-virtctl_rs.exe"
        } else {
            "kubectl-virtctl_rs"
        };
        std::fs::copy(stub_binary(out.parent().unwrap()), stage.path().join(bin)).unwrap();
        std::fs::copy(common::repo_path("LICENSE"), stage.path().join("LICENSE")).unwrap();
        let st = Command::new("tar")
            .arg("-czf")
            .arg(out.join(&name))
            .arg("-C")
            .arg(stage.path())
            .args([bin, "LICENSE"])
            .status()
            .unwrap();
        assert!(st.success());
        sums.push_str(&format!("{}  {name}\n", sha256(&out.join(&name))));
    }
    std::fs::write(out.join("SHA256SUMS"), sums).unwrap();
}

fn local_archives(dir: &Path) -> BTreeMap<String, PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect()
}

#[test]
fn the_rendered_manifest_obeys_krews_rules_and_broken_ones_fail() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("dist");
    let out = out_dir.as_path();
    // Without the other platforms' archives, rendering refuses unless told to leave them out.
    let refused = release(out, &[]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("no archive for linux-arm64"));
    let partial = release(out, &["--allow-missing"]);
    assert!(
        partial.status.success(),
        "{}",
        String::from_utf8_lossy(&partial.stderr)
    );
    let m = yaml(&out.join("virtctl-rs.yaml"));
    let archives = local_archives(out);
    assert_eq!(archives.len(), 1, "this platform's archive: {archives:?}");
    validate("virtctl-rs.yaml", &m, &archives).unwrap_or_else(|e| panic!("{e:#?}"));
    let version = m["spec"]["version"]
        .as_str()
        .unwrap()
        .trim_start_matches('v')
        .to_string();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));

    // Every platform.
    add_other_platforms(out, &version);
    let full = release(out, &[]);
    assert!(
        full.status.success(),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
    let m = yaml(&out.join("virtctl-rs.yaml"));
    let archives = local_archives(out);
    validate("virtctl-rs.yaml", &m, &archives).unwrap_or_else(|e| panic!("{e:#?}"));
    let got: Vec<(String, String)> = m["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let l = &p["selector"]["matchLabels"];
            (
                l["os"].as_str().unwrap().to_string(),
                l["arch"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = PLATFORMS
        .iter()
        .map(|(o, a)| (o.to_string(), a.to_string()))
        .collect();
    assert_eq!(got, want);
    let caveats = m["spec"]["caveats"].as_str().unwrap();
    assert!(
        caveats.contains("CRDs") && caveats.contains("deploy/rbac/controller.yaml"),
        "{caveats}"
    );

    // The broken cases, each caught.
    let broken = |what: &str, file: &str, edit: &dyn Fn(&mut Value), expect: &str| {
        let mut bad = m.clone();
        edit(&mut bad);
        let errs = validate(file, &bad, &archives).expect_err(what);
        assert!(errs.iter().any(|e| e.contains(expect)), "{what}: {errs:#?}");
    };
    broken(
        "wrong sha256",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][0]["sha256"] = json!("0".repeat(64)),
        "does not match the archive",
    );
    broken(
        "malformed sha256",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][1]["sha256"] = json!("ABC"),
        "not 64 lowercase hex digits",
    );
    broken(
        "duplicate selector",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][1]["selector"] = v["spec"]["platforms"][0]["selector"].clone(),
        "duplicate selector",
    );
    broken(
        "bin not in the archive",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][0]["bin"] = json!("kubectl-other"),
        "is not in the archive",
    );
    broken(
        "bin missing",
        "virtctl-rs.yaml",
        &|v| {
            v["spec"]["platforms"][2]
                .as_object_mut()
                .unwrap()
                .remove("bin");
        },
        "bin is missing",
    );
    broken(
        "windows bin without .exe",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][4]["bin"] = json!("kubectl-virtctl_rs"),
        "must end in .exe",
    );
    broken(
        "name mismatch",
        "virtctl.yaml",
        &|_| {},
        "does not match the file name",
    );
    broken(
        "version without v",
        "virtctl-rs.yaml",
        &|v| v["spec"]["version"] = json!("0.1.0"),
        "not a v-prefixed semantic version",
    );
    broken(
        "http uri",
        "virtctl-rs.yaml",
        &|v| v["spec"]["platforms"][0]["uri"] = json!("http://example.invalid/a.tar.gz"),
        "is not an https",
    );
}

#[test]
fn semver_rule() {
    for ok in ["v0.1.0", "v1.2.3", "v10.0.1-rc.1"] {
        assert!(is_semver_v(ok), "{ok}");
    }
    for bad in ["0.1.0", "v1.2", "v01.2.3", "v1.2.3-", "vx.y.z", "v1.2.3.4"] {
        assert!(!is_semver_v(bad), "{bad}");
    }
}

/// The committed rendering and the template: krew's rules that need no archive; the template
/// lists every platform.
#[test]
fn the_committed_manifest_and_template_are_valid() {
    let m = yaml(&common::repo_path("krew/virtctl-rs.yaml"));
    validate("virtctl-rs.yaml", &m, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(
        m["spec"]["version"],
        format!("v{}", env!("CARGO_PKG_VERSION"))
    );
    let template = std::fs::read_to_string(common::repo_path("krew/virtctl-rs.yaml.in")).unwrap();
    for (os, arch) in PLATFORMS {
        let key = format!("{os}_{arch}").to_uppercase();
        assert!(
            template.contains(&format!("        os: {os}\n        arch: {arch}\n")),
            "{os}/{arch}"
        );
        assert!(
            template.contains(&format!("@SHA256_{key}@"))
                && template.contains(&format!("@URI_{key}@"))
        );
    }
}

/// `kubectl virtctl-rs --help` through kubectl's plugin discovery: the binary (the one `cargo
/// install --path .` installs, copied rather than rebuilt) as `kubectl-virtctl_rs` on PATH.
#[test]
fn kubectl_finds_the_plugin_on_path() {
    let kubectl = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("kubectl"))
            .find(|p| p.is_file())
    });
    let Some(kubectl) = kubectl else {
        eprintln!("SKIP kubectl_finds_the_plugin_on_path: kubectl is not on PATH");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("kubectl-virtctl_rs");
    std::fs::copy(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"), &plugin).unwrap();
    let path = std::env::join_paths(std::iter::once(dir.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&kubectl)
            .args(args)
            .env("PATH", &path)
            .env("KUBECONFIG", dir.path().join("none"))
            .output()
            .expect("run kubectl");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run(&["virtctl-rs", "--help"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("Usage: kubectl virtctl-rs"), "{stdout}");
    for sub in [
        "run-controller",
        "inspect",
        "explain-overhead",
        "version",
        "completion",
    ] {
        assert!(stdout.contains(sub), "{sub}: {stdout}");
    }
    let (code, stdout, _) = run(&["virtctl-rs", "version", "-o", "json"]);
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains("\"kubevirtVersion\": \"v1.9.0\""),
        "{stdout}"
    );
    let (_, stdout, stderr) = run(&["plugin", "list"]);
    assert!(
        stdout.contains(&plugin.display().to_string())
            || stderr.contains(&plugin.display().to_string()),
        "kubectl plugin list does not show {}: {stdout}{stderr}",
        plugin.display()
    );
}
