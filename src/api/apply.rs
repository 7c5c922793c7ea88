//! Applying YAML/JSON manifests through any kube client, against the embedded cluster or a real
//! one: each object is created, or replaced if it exists (`kubectl apply` without the
//! three-way merge). `run-controller --apply` and `cluster --apply` use it.
//!
//! The documents are split by [`super::manifest::split_documents`], the one splitter.

use super::manifest::{ManifestError, split_documents};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why a manifest could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// A manifest file or directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A manifest document is not valid or lacks `apiVersion`/`kind`/`metadata.name`.
    #[error("{path} (document {index}): {message}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// 1-based document number (items of a `List` count as documents, like
        /// [`split_documents`]); 0 when the object, not a document, is at fault.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// The server refused an object.
    #[error("applying {what} from {path}: {source}")]
    Apply {
        /// `Kind namespace/name`, or the discovery request.
        what: String,
        /// The file.
        path: PathBuf,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// What [`apply_path`] did, one `Kind namespace/name` string per object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplySummary {
    /// Objects created.
    pub created: Vec<String>,
    /// Objects that existed and were replaced.
    pub replaced: Vec<String>,
    /// Objects skipped because the server does not serve their kind.
    pub skipped: Vec<String>,
}

impl ApplySummary {
    /// One line: `2 created, 1 replaced, 1 skipped (Kind ns/name, ...)`.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!(
            "{} created, {} replaced",
            self.created.len(),
            self.replaced.len()
        );
        if !self.skipped.is_empty() {
            s.push_str(&format!(
                ", {} skipped ({})",
                self.skipped.len(),
                self.skipped.join(", ")
            ));
        }
        s
    }

    /// `namespace/name` of every VirtualMachine created or replaced.
    pub(crate) fn virtual_machines(&self) -> Vec<String> {
        self.created
            .iter()
            .chain(&self.replaced)
            .filter_map(|o| o.strip_prefix("VirtualMachine "))
            .map(str::to_string)
            .collect()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ApplyError + '_ {
    move |source| ApplyError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The manifest files `path` stands for: itself, or the YAML/JSON files of a directory (not
/// recursive, in name order).
pub(crate) fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ApplyError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(io_err(path))? {
        let p = entry.map_err(io_err(path))?.path();
        let manifest = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"));
        if manifest && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// The objects of a manifest text ([`split_documents`]), each checked to have `apiVersion`,
/// `kind` and `metadata.name`. Errors: [`ApplyError::Manifest`] naming the document.
pub(crate) fn parse_objects(path: &Path, text: &str) -> Result<Vec<Value>, ApplyError> {
    let docs = split_documents(&path.display().to_string(), text).map_err(|e| match e {
        ManifestError::Syntax { index, message, .. } => ApplyError::Manifest {
            path: path.to_path_buf(),
            index,
            message,
        },
        other => ApplyError::Manifest {
            path: path.to_path_buf(),
            index: 0,
            message: other.to_string(),
        },
    })?;
    let mut out = Vec::with_capacity(docs.len());
    for (index, item) in docs {
        let manifest_err = |message: String| ApplyError::Manifest {
            path: path.to_path_buf(),
            index,
            message,
        };
        for field in ["apiVersion", "kind"] {
            if item
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(manifest_err(format!("{field} is missing")));
            }
        }
        if item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(manifest_err("metadata.name is missing".into()));
        }
        out.push(item);
    }
    Ok(out)
}

fn gvk_of(obj: &Value) -> GroupVersionKind {
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

/// Apply a YAML/JSON manifest file, or every `*.yaml`/`*.yml`/`*.json` file of a directory
/// ([`manifest_files`]). Multi-document files and `kind: List` are supported. Each object is
/// created, or replaced if it exists; objects of kinds the server does not serve are skipped
/// with a note on stderr. Namespaced objects without a namespace go to `default`.
///
/// Errors: [`ApplyError::Io`], [`ApplyError::Manifest`], [`ApplyError::Apply`] (stops at the
/// first refused object).
pub async fn apply_path(client: &Client, path: &Path) -> Result<ApplySummary, ApplyError> {
    apply_path_in(client, path, None).await
}

/// [`apply_path`] as `kubectl apply -n NAMESPACE` does it when `namespace` is given: namespaced
/// objects without a namespace go there, and an object that names another namespace is refused
/// (kubectl's message), so nothing lands where the caller does not look.
pub async fn apply_path_in(
    client: &Client,
    path: &Path,
    namespace: Option<&str>,
) -> Result<ApplySummary, ApplyError> {
    let mut summary = ApplySummary::default();
    let mut kinds: HashMap<(String, String, String), Option<(ApiResource, ApiCapabilities)>> =
        HashMap::new();
    for file in manifest_files(path)? {
        let text = std::fs::read_to_string(&file).map_err(io_err(&file))?;
        for mut obj in parse_objects(&file, &text)? {
            let gvk = gvk_of(&obj);
            let cache_key = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
            if !kinds.contains_key(&cache_key) {
                let found = match kube::discovery::pinned_kind(client, &gvk).await {
                    Ok(found) => Some(found),
                    Err(kube::Error::Discovery(_)) => None,
                    Err(kube::Error::Api(s)) if s.code == 404 => None,
                    Err(source) => {
                        return Err(ApplyError::Apply {
                            what: format!("discovery of {}", obj["apiVersion"]),
                            path: file.clone(),
                            source,
                        });
                    }
                };
                kinds.insert(cache_key.clone(), found);
            }
            let name = obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let Some(Some((resource, caps))) = kinds.get(&cache_key) else {
                let what = format!("{} {name}", gvk.kind);
                eprintln!(
                    "note: skipping {what} from {}: the server does not serve {}/{}",
                    file.display(),
                    obj["apiVersion"].as_str().unwrap_or_default(),
                    gvk.kind
                );
                summary.skipped.push(what);
                continue;
            };
            let api: Api<DynamicObject> = if caps.scope == Scope::Namespaced {
                let named = obj
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                if let (Some(named), Some(wanted)) = (named, namespace)
                    && named != wanted
                {
                    return Err(ApplyError::Manifest {
                        path: file.clone(),
                        index: 0,
                        message: format!(
                            "{} {name}: the namespace from the provided object {named:?} does not \
                             match the namespace {wanted:?}. You must pass '--namespace={named}' \
                             to perform this operation.",
                            gvk.kind
                        ),
                    });
                }
                let ns = named.or(namespace).unwrap_or("default").to_string();
                obj["metadata"]["namespace"] = Value::String(ns.clone());
                Api::namespaced_with(client.clone(), &ns, resource)
            } else {
                Api::all_with(client.clone(), resource)
            };
            let what = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(ns) => format!("{} {ns}/{name}", gvk.kind),
                None => format!("{} {name}", gvk.kind),
            };
            let apply_err = |source| ApplyError::Apply {
                what: what.clone(),
                path: file.clone(),
                source,
            };
            let mut dynamic: DynamicObject =
                serde_json::from_value(obj.clone()).map_err(|e| ApplyError::Manifest {
                    path: file.clone(),
                    index: 0,
                    message: format!("{what}: {e}"),
                })?;
            match api.create(&PostParams::default(), &dynamic).await {
                Ok(_) => summary.created.push(what),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    let existing = api.get(&name).await.map_err(apply_err)?;
                    dynamic.metadata.resource_version = existing.resource_version();
                    api.replace(&name, &PostParams::default(), &dynamic)
                        .await
                        .map_err(apply_err)?;
                    summary.replaced.push(what);
                }
                Err(e) => return Err(apply_err(e)),
            }
        }
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_yaml_and_lists() {
        let text = "\
apiVersion: v1
kind: Namespace
metadata:
  name: demo
---
# comment only
---
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: a}
- apiVersion: kubevirt.io/v1
  kind: VirtualMachine
  metadata: {name: vm, namespace: demo}
";
        let objs = parse_objects(Path::new("x.yaml"), text).expect("parses");
        let kinds: Vec<&str> = objs.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["Namespace", "ConfigMap", "VirtualMachine"]);
        let gvk = gvk_of(&objs[2]);
        assert_eq!(
            (gvk.group.as_str(), gvk.version.as_str()),
            ("kubevirt.io", "v1")
        );
        let gvk = gvk_of(&objs[0]);
        assert_eq!((gvk.group.as_str(), gvk.version.as_str()), ("", "v1"));
    }

    #[test]
    fn rejects_documents_without_kind_or_name() {
        let err = parse_objects(
            Path::new("bad.yaml"),
            "apiVersion: v1\nmetadata: {name: x}\n",
        )
        .expect_err("kind missing");
        assert!(err.to_string().contains("kind is missing"), "{err}");
        let err = parse_objects(Path::new("bad.yaml"), "apiVersion: v1\nkind: Pod\n")
            .expect_err("name missing");
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }

    /// Documents are numbered like `explain-overhead` numbers them: from 1, `List` items
    /// counted, empty documents not.
    #[test]
    fn errors_number_documents_like_the_manifest_reader() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nmetadata: {name: b}\n";
        let err = parse_objects(Path::new("two.yaml"), text).expect_err("kind missing");
        assert_eq!(err.to_string(), "two.yaml (document 2): kind is missing");
        let err = parse_objects(Path::new("bad.yaml"), "kind: [unclosed\n").expect_err("syntax");
        assert!(
            matches!(err, ApplyError::Manifest { index: 1, .. }),
            "{err}"
        );
    }

    #[test]
    fn directory_lists_yaml_files_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for f in ["b.yaml", "a.yml", "c.json", "notes.txt"] {
            std::fs::write(dir.path().join(f), "").expect("write");
        }
        let files = manifest_files(dir.path()).expect("lists");
        let names: Vec<String> = files
            .iter()
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        assert_eq!(names, ["a.yml", "b.yaml", "c.json"]);
    }

    #[tokio::test]
    async fn a_namespace_given_places_objects_without_one_and_refuses_another() {
        let server = crate::sim::ApiServer::start(crate::sim::ApiServerConfig::default())
            .await
            .expect("server");
        let client = server.client().await.expect("client");
        let dir = tempfile::tempdir().expect("tempdir");
        let namespaces = dir.path().join("ns.yaml");
        std::fs::write(
            &namespaces,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: my-vms}\n---\n\
             apiVersion: v1\nkind: Namespace\nmetadata: {name: other}\n",
        )
        .expect("write");
        apply_path(&client, &namespaces).await.expect("namespaces");
        let file = dir.path().join("cm.yaml");
        std::fs::write(
            &file,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\n",
        )
        .expect("write");
        apply_path_in(&client, &file, Some("my-vms"))
            .await
            .expect("applied");
        let in_ns: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(client.clone(), "my-vms");
        assert!(in_ns.get_opt("plain").await.expect("get").is_some());

        std::fs::write(
            &file,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere, namespace: other}\n",
        )
        .expect("write");
        let err = apply_path_in(&client, &file, Some("my-vms"))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "the namespace from the provided object \"other\" does not match the namespace \"my-vms\""
            ),
            "{err}"
        );
        // Without -n, each object keeps its own namespace.
        apply_path(&client, &file).await.expect("applied");
        server.shutdown().await;
    }
}
