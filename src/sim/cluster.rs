//! The embedded cluster: the in-process API server plus simulated nodes, and `apply` of YAML
//! manifests through a kube client.

use super::nodes::{NodeCapacity, NodeSimConfig, NodeSimError, NodeSimHandle, NodeSimulator};
use super::{ApiServer, ApiServerConfig, SimError};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{ApiCapabilities, Scope};
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Settings of an [`EmbeddedCluster`].
#[derive(Debug, Clone)]
pub struct EmbeddedClusterConfig {
    /// Number of simulated nodes (default 2).
    pub nodes: usize,
    /// Delay between binding and a pod running (default 200 ms).
    pub kubelet_delay: Duration,
    /// Factor applied to grace periods (default 0.01).
    pub grace_scale: f64,
    /// Capacity of every node.
    pub capacity: NodeCapacity,
    /// API server settings.
    pub api: ApiServerConfig,
}

impl Default for EmbeddedClusterConfig {
    fn default() -> Self {
        let nodes = NodeSimConfig::default();
        EmbeddedClusterConfig {
            nodes: nodes.nodes,
            kubelet_delay: nodes.kubelet_delay,
            grace_scale: nodes.grace_scale,
            capacity: nodes.capacity,
            api: ApiServerConfig::default(),
        }
    }
}

/// Errors of the embedded cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API server failed.
    #[error("embedded API server: {0}")]
    Server(#[source] Box<SimError>),
    /// The node simulator failed.
    #[error("simulated nodes: {0}")]
    Nodes(#[from] NodeSimError),
    /// A manifest file or directory could not be read.
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A manifest document is not valid or lacks `apiVersion`/`kind`/`metadata.name`.
    #[error("{path} (document {index}): {message}")]
    Manifest {
        path: PathBuf,
        index: usize,
        message: String,
    },
    /// The server refused an object.
    #[error("applying {what} from {path}: {source}")]
    Apply {
        what: String,
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
}

impl From<SimError> for ClusterError {
    fn from(e: SimError) -> Self {
        ClusterError::Server(Box::new(e))
    }
}

/// What [`EmbeddedCluster::apply_path`] did, one `Kind namespace/name` string per object.
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
    pub fn describe(&self) -> String {
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
    pub fn virtual_machines(&self) -> Vec<String> {
        self.created
            .iter()
            .chain(&self.replaced)
            .filter_map(|o| o.strip_prefix("VirtualMachine "))
            .map(str::to_string)
            .collect()
    }
}

/// An embedded API server plus a node simulator registered against it.
pub struct EmbeddedCluster {
    api: ApiServer,
    nodes: NodeSimulator,
}

impl EmbeddedCluster {
    /// Start the API server, then register the nodes and start their simulation.
    ///
    /// Errors: [`ClusterError::Server`] when the server cannot start, [`ClusterError::Nodes`]
    /// when the simulator cannot (the server is shut down again).
    pub async fn start(config: EmbeddedClusterConfig) -> Result<Self, ClusterError> {
        let api = ApiServer::start(config.api).await?;
        let node_config = NodeSimConfig {
            nodes: config.nodes,
            kubelet_delay: config.kubelet_delay,
            grace_scale: config.grace_scale,
            capacity: config.capacity,
        };
        match NodeSimulator::start_from_kubeconfig(api.kubeconfig_path(), node_config).await {
            Ok(nodes) => Ok(EmbeddedCluster { api, nodes }),
            Err(e) => {
                api.shutdown().await;
                Err(e.into())
            }
        }
    }

    /// The API server (audit log, faults, URL).
    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    /// The node simulator's control handle.
    pub fn nodes(&self) -> &NodeSimHandle {
        self.nodes.handle()
    }

    /// A kube client for the server. Errors: [`ClusterError::Server`].
    pub async fn client(&self) -> Result<Client, ClusterError> {
        Ok(self.api.client().await?)
    }

    /// Path of the server's kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        self.api.kubeconfig_path()
    }

    /// Apply a YAML/JSON manifest file, or every `*.yaml`/`*.yml`/`*.json` file of a directory
    /// (not recursive, in name order). Multi-document files and `kind: List` are supported.
    /// Each object is created, or replaced if it exists; objects of kinds the server does not
    /// serve are skipped with a note on stderr. Namespaced objects without a namespace go to
    /// `default`.
    ///
    /// Errors: [`ClusterError::Io`], [`ClusterError::Manifest`], [`ClusterError::Apply`]
    /// (stops at the first refused object), [`ClusterError::Server`].
    pub async fn apply_path(&self, path: &Path) -> Result<ApplySummary, ClusterError> {
        let client = self.client().await?;
        apply_path_with(&client, path).await
    }

    /// Stop the node simulation, then the server.
    pub async fn shutdown(self) {
        self.nodes.shutdown().await;
        self.api.shutdown().await;
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
    move |source| ClusterError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The manifest files `path` stands for: itself, or the YAML/JSON files of a directory.
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ClusterError> {
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

/// Parse the documents of a manifest text into JSON objects (null documents dropped, `List`
/// kinds expanded). Errors: [`ClusterError::Manifest`] naming the document.
pub fn parse_manifests(path: &Path, text: &str) -> Result<Vec<Value>, ClusterError> {
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let manifest_err = |message: String| ClusterError::Manifest {
            path: path.to_path_buf(),
            index,
            message,
        };
        let yaml = serde_yaml::Value::deserialize(doc).map_err(|e| manifest_err(e.to_string()))?;
        let json = serde_json::to_value(&yaml).map_err(|e| manifest_err(e.to_string()))?;
        if json.is_null() {
            continue;
        }
        let is_list = json
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && json.get("items").is_some_and(Value::is_array);
        let items = if is_list {
            json.get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![json]
        };
        for item in items {
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

/// [`EmbeddedCluster::apply_path`] with any client.
pub async fn apply_path_with(client: &Client, path: &Path) -> Result<ApplySummary, ClusterError> {
    let mut summary = ApplySummary::default();
    let mut kinds: HashMap<(String, String, String), Option<(ApiResource, ApiCapabilities)>> =
        HashMap::new();
    for file in manifest_files(path)? {
        let text = std::fs::read_to_string(&file).map_err(io_err(&file))?;
        for mut obj in parse_manifests(&file, &text)? {
            let gvk = gvk_of(&obj);
            let cache_key = (gvk.group.clone(), gvk.version.clone(), gvk.kind.clone());
            if !kinds.contains_key(&cache_key) {
                let found = match kube::discovery::pinned_kind(client, &gvk).await {
                    Ok(found) => Some(found),
                    Err(kube::Error::Discovery(_)) => None,
                    Err(kube::Error::Api(s)) if s.code == 404 => None,
                    Err(source) => {
                        return Err(ClusterError::Apply {
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
                let ns = obj
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or("default")
                    .to_string();
                obj["metadata"]["namespace"] = Value::String(ns.clone());
                Api::namespaced_with(client.clone(), &ns, resource)
            } else {
                Api::all_with(client.clone(), resource)
            };
            let what = match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
                Some(ns) => format!("{} {ns}/{name}", gvk.kind),
                None => format!("{} {name}", gvk.kind),
            };
            let apply_err = |source| ClusterError::Apply {
                what: what.clone(),
                path: file.clone(),
                source,
            };
            let mut dynamic: DynamicObject =
                serde_json::from_value(obj.clone()).map_err(|e| ClusterError::Manifest {
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
        let objs = parse_manifests(Path::new("x.yaml"), text).expect("parses");
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
        let err = parse_manifests(
            Path::new("bad.yaml"),
            "apiVersion: v1\nmetadata: {name: x}\n",
        )
        .expect_err("kind missing");
        assert!(err.to_string().contains("kind is missing"), "{err}");
        let err = parse_manifests(Path::new("bad.yaml"), "apiVersion: v1\nkind: Pod\n")
            .expect_err("name missing");
        assert!(err.to_string().contains("metadata.name"), "{err}");
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
}
