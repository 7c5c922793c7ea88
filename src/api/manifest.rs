//! Reading VirtualMachine / VirtualMachineInstance documents from YAML or JSON text
//! (one document, a multi-document YAML stream, or a `v1/List`).
//!
//! Documents are numbered from 1 in the order they appear, so errors can say
//! "document 3 (VirtualMachine default/vm-cirros): spec.template: ...".

use super::{VirtualMachine, VirtualMachineInstance};
use serde::Deserialize;
use std::fmt;

/// A VM or VMI read from a manifest.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeVirtObject {
    Vm(Box<VirtualMachine>),
    Vmi(Box<VirtualMachineInstance>),
}

impl KubeVirtObject {
    /// `VirtualMachine` or `VirtualMachineInstance`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            KubeVirtObject::Vm(_) => "VirtualMachine",
            KubeVirtObject::Vmi(_) => "VirtualMachineInstance",
        }
    }

    /// `metadata.name` (or `""`).
    pub(crate) fn name(&self) -> &str {
        let meta = match self {
            KubeVirtObject::Vm(vm) => &vm.metadata,
            KubeVirtObject::Vmi(vmi) => &vmi.metadata,
        };
        meta.name.as_deref().unwrap_or("")
    }

    /// `metadata.namespace` if set.
    pub(crate) fn namespace(&self) -> Option<&str> {
        match self {
            KubeVirtObject::Vm(vm) => vm.metadata.namespace.as_deref(),
            KubeVirtObject::Vmi(vmi) => vmi.metadata.namespace.as_deref(),
        }
    }
}

/// Where an object came from in a manifest, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentRef {
    /// 1-based document number in the stream (items of a `List` count as their own documents).
    pub index: usize,
    /// `kind` of the document, if it had one.
    pub kind: Option<String>,
    /// `namespace/name` or `name`, if it had one.
    pub name: Option<String>,
}

impl fmt::Display for DocumentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.index)?;
        match (&self.kind, &self.name) {
            (Some(k), Some(n)) => write!(f, " ({k} {n})"),
            (Some(k), None) => write!(f, " ({k}, no metadata.name)"),
            (None, _) => write!(f, " (no kind)"),
        }
    }
}

/// A VM/VMI with its position in the manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestObject {
    pub doc: DocumentRef,
    pub object: KubeVirtObject,
}

/// A document that is valid YAML but not a VM or VMI (skipped, with a note).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedDocument {
    pub doc: DocumentRef,
    pub reason: String,
}

/// The result of reading a manifest.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    pub objects: Vec<ManifestObject>,
    pub skipped: Vec<SkippedDocument>,
}

/// Why a manifest could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// The input has no documents at all.
    #[error(
        "{source_name}: the input is empty: expected a VirtualMachine or VirtualMachineInstance"
    )]
    Empty { source_name: String },
    /// A document is not valid YAML/JSON.
    #[error("{source_name}: document {index}: invalid YAML: {message}")]
    Syntax {
        source_name: String,
        index: usize,
        message: String,
    },
    /// A document is not an object with `apiVersion` and `kind`.
    #[error("{source_name}: {doc}: {message}")]
    NotAnObject {
        source_name: String,
        doc: DocumentRef,
        message: String,
    },
    /// A VM/VMI document has a field of the wrong shape or a missing required field.
    #[error("{source_name}: {doc}: field {field}: {message}")]
    InvalidField {
        source_name: String,
        doc: DocumentRef,
        field: String,
        message: String,
    },
    /// Only other kinds were found.
    #[error(
        "{source_name}: no VirtualMachine or VirtualMachineInstance found ({skipped} other document(s) skipped: {kinds})"
    )]
    NoKubeVirtObjects {
        source_name: String,
        skipped: usize,
        /// The skipped documents, e.g. `Deployment d, ConfigMap c`.
        kinds: String,
    },
}

/// The object a template at `pointer` (`{metadata, spec}`) of `owner` creates, as a `kind`
/// document named after the owner (in its namespace, with the template's labels and
/// annotations); `None` without a template.
fn templated(owner: &serde_json::Value, pointer: &str, kind: &str) -> Option<serde_json::Value> {
    let template = owner.pointer(pointer)?;
    let mut metadata = template
        .get("metadata")
        .cloned()
        .filter(|m| m.is_object())
        .unwrap_or_else(|| serde_json::json!({}));
    for key in ["name", "namespace"] {
        match owner.pointer(&format!("/metadata/{key}")) {
            Some(v) => metadata[key] = v.clone(),
            None => {
                if let Some(m) = metadata.as_object_mut() {
                    m.remove(key);
                }
            }
        }
    }
    Some(serde_json::json!({
        "apiVersion": format!("{}/{}", super::GROUP, super::VERSION),
        "kind": kind,
        "metadata": metadata,
        "spec": template.get("spec").cloned().unwrap_or(serde_json::Value::Null),
    }))
}

// Errors carry the document reference and field by value; they are built once, on a cold path.
#[allow(clippy::result_large_err)]
/// Split YAML/JSON text into JSON values, one per non-empty document; `List` kinds are expanded
/// into their items. Returns (1-based index, value) pairs.
pub fn split_documents(
    source_name: &str,
    text: &str,
) -> Result<Vec<(usize, serde_json::Value)>, ManifestError> {
    let mut out = Vec::new();
    let mut index = 0;
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_json::Value::deserialize(doc).map_err(|e| ManifestError::Syntax {
            source_name: source_name.to_string(),
            index: index + 1,
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let is_list = value
            .get("kind")
            .and_then(|k| k.as_str())
            .is_some_and(|k| k.ends_with("List"))
            && value.get("items").is_some_and(|i| i.is_array());
        if is_list {
            if let Some(items) = value.get("items").and_then(|i| i.as_array()) {
                for item in items {
                    index += 1;
                    out.push((index, item.clone()));
                }
            }
        } else {
            index += 1;
            out.push((index, value));
        }
    }
    Ok(out)
}

fn doc_ref(index: usize, value: &serde_json::Value) -> DocumentRef {
    let kind = value
        .get("kind")
        .and_then(|k| k.as_str())
        .map(str::to_string);
    let meta = value.get("metadata");
    let name = meta.and_then(|m| m.get("name")).and_then(|n| n.as_str());
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(|n| n.as_str());
    let name = name.map(|n| super::key::ObjectKey::new(ns, n).to_string());
    DocumentRef { index, kind, name }
}

/// Deserialize a JSON value into `T`, reporting the path of the offending field.
pub(crate) fn from_value_with_path<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // serde_json's message for a missing field names it; make the path point to it.
        let field = match inner
            .strip_prefix("missing field `")
            .and_then(|r| r.split('`').next())
        {
            Some(missing) if path == "." => missing.to_string(),
            Some(missing) => format!("{path}.{missing}"),
            None => path,
        };
        (field, inner)
    })
}

/// Read every VM and VMI of a manifest. Documents of other kinds are returned in `skipped`.
///
/// Errors: empty input, a YAML syntax error, a document that is not an object with `kind`, a
/// VM/VMI whose fields have the wrong shape (the field path is named), a VM without
/// `spec.template`, or a stream with no VM/VMI at all.
#[allow(clippy::result_large_err)]
pub(crate) fn read_manifest(source_name: &str, text: &str) -> Result<Manifest, ManifestError> {
    let docs = split_documents(source_name, text)?;
    if docs.is_empty() {
        return Err(ManifestError::Empty {
            source_name: source_name.to_string(),
        });
    }
    let mut manifest = Manifest::default();
    for (index, value) in docs {
        let doc = doc_ref(index, &value);
        if !value.is_object() {
            return Err(ManifestError::NotAnObject {
                source_name: source_name.to_string(),
                doc,
                message: "not a Kubernetes object (expected a mapping with apiVersion and kind)"
                    .into(),
            });
        }
        let api_version = value
            .get("apiVersion")
            .and_then(|v| v.as_str())
            .unwrap_or("");
        let Some(kind) = doc.kind.clone() else {
            return Err(ManifestError::NotAnObject {
                source_name: source_name.to_string(),
                doc,
                message: "missing field kind".into(),
            });
        };
        let group = api_version.split('/').next().unwrap_or("");
        let is_kubevirt = group == super::GROUP && api_version.contains('/');
        let invalid =
            |doc: DocumentRef, (field, message): (String, String)| ManifestError::InvalidField {
                source_name: source_name.to_string(),
                doc,
                field,
                message,
            };
        match (is_kubevirt, kind.as_str()) {
            (true, "VirtualMachine") => {
                let vm: VirtualMachine =
                    from_value_with_path(value).map_err(|e| invalid(doc.clone(), e))?;
                if vm.spec.template.is_none() {
                    return Err(invalid(
                        doc,
                        ("spec.template".into(), "required field is missing".into()),
                    ));
                }
                manifest.objects.push(ManifestObject {
                    doc,
                    object: KubeVirtObject::Vm(Box::new(vm)),
                });
            }
            (true, "VirtualMachineInstance") => {
                let vmi: VirtualMachineInstance =
                    from_value_with_path(value).map_err(|e| invalid(doc.clone(), e))?;
                manifest.objects.push(ManifestObject {
                    doc,
                    object: KubeVirtObject::Vmi(Box::new(vmi)),
                });
            }
            // A pool's VirtualMachine template (pool.kubevirt.io VirtualMachinePool) and a
            // replica set's VMI template (VirtualMachineInstanceReplicaSet): explained as the
            // VM / VMI they create, named after the owner.
            (false, "VirtualMachinePool") if group == "pool.kubevirt.io" => {
                let vm = templated(&value, "/spec/virtualMachineTemplate", "VirtualMachine")
                    .ok_or_else(|| {
                        invalid(
                            doc.clone(),
                            (
                                "spec.virtualMachineTemplate".into(),
                                "required field is missing".into(),
                            ),
                        )
                    })?;
                let vm: VirtualMachine = from_value_with_path(vm).map_err(|(f, m)| {
                    invalid(doc.clone(), (format!("spec.virtualMachineTemplate.{f}"), m))
                })?;
                if vm.spec.template.is_none() {
                    return Err(invalid(
                        doc,
                        (
                            "spec.virtualMachineTemplate.spec.template".into(),
                            "required field is missing".into(),
                        ),
                    ));
                }
                manifest.objects.push(ManifestObject {
                    doc,
                    object: KubeVirtObject::Vm(Box::new(vm)),
                });
            }
            (true, "VirtualMachineInstanceReplicaSet") => {
                let vmi = templated(&value, "/spec/template", "VirtualMachineInstance")
                    .ok_or_else(|| {
                        invalid(
                            doc.clone(),
                            ("spec.template".into(), "required field is missing".into()),
                        )
                    })?;
                let vmi: VirtualMachineInstance = from_value_with_path(vmi)
                    .map_err(|(f, m)| invalid(doc.clone(), (format!("spec.template.{f}"), m)))?;
                manifest.objects.push(ManifestObject {
                    doc,
                    object: KubeVirtObject::Vmi(Box::new(vmi)),
                });
            }
            _ => manifest.skipped.push(SkippedDocument {
                reason: format!(
                    "{kind} ({}) is not a kubevirt.io/v1 VirtualMachine or VirtualMachineInstance",
                    if api_version.is_empty() {
                        "no apiVersion"
                    } else {
                        api_version
                    }
                ),
                doc,
            }),
        }
    }
    if manifest.objects.is_empty() {
        let kinds = manifest
            .skipped
            .iter()
            .map(|d| {
                format!(
                    "{} {}",
                    d.doc.kind.as_deref().unwrap_or("?"),
                    d.doc.name.as_deref().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ManifestError::NoKubeVirtObjects {
            source_name: source_name.to_string(),
            skipped: manifest.skipped.len(),
            kinds,
        });
    }
    Ok(manifest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object_indices(m: &Manifest) -> Vec<usize> {
        m.objects.iter().map(|o| o.doc.index).collect()
    }

    #[test]
    fn reads_vm_and_skips_other_kinds() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec:\n  template:\n    spec:\n      domain: {devices: {}}\n";
        let m = read_manifest("t.yaml", text).unwrap();
        let skipped: Vec<usize> = m.skipped.iter().map(|d| d.doc.index).collect();
        assert_eq!((object_indices(&m), skipped), (vec![2], vec![1]));
    }

    #[test]
    fn errors_name_document_and_field() {
        let e = read_manifest("t.yaml", "").unwrap_err();
        assert!(matches!(e, ManifestError::Empty { .. }), "{e}");

        let e = read_manifest("t.yaml", "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {running: true}\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.yaml: document 1 (VirtualMachine a): field spec.template: required field is missing"
        );

        let e = read_manifest("t.yaml", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: b, namespace: ns}\nspec:\n  domain:\n    cpu: {cores: many}\n").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("document 1 (VirtualMachineInstance ns/b): field spec.domain.cpu.cores"),
            "{msg}"
        );

        let e = read_manifest("t.yaml", "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: b}\nspec: {}\n").unwrap_err();
        assert!(e.to_string().contains("field spec.domain"), "{e}");

        let e = read_manifest("t.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
            .unwrap_err();
        assert!(
            matches!(e, ManifestError::NoKubeVirtObjects { skipped: 1, .. }),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with("(1 other document(s) skipped: Pod p)"),
            "{e}"
        );

        let e = read_manifest("t.yaml", "a: [\n").unwrap_err();
        assert!(matches!(e, ManifestError::Syntax { index: 1, .. }), "{e}");

        let e = read_manifest("t.yaml", "- 1\n- 2\n").unwrap_err();
        assert!(matches!(e, ManifestError::NotAnObject { .. }), "{e}");
    }

    /// The one splitter of the crate (explain-overhead reads with it, `api::apply` applies
    /// with it): null documents dropped, `List` items numbered as documents, non-string YAML
    /// keys read as strings (as kubectl's YAML-to-JSON conversion does).
    #[test]
    fn splits_documents_and_numbers_list_items() {
        let text = "a: 1\n---\n---\nkind: List\nitems: [{b: 2}, {c: 3}]\n---\ndata:\n  1: one\n";
        let docs = split_documents("s.yaml", text).unwrap();
        let index: Vec<usize> = docs.iter().map(|(i, _)| *i).collect();
        assert_eq!(index, [1, 2, 3, 4]);
        assert_eq!(docs[2].1, serde_json::json!({"c": 3}));
        assert_eq!(docs[3].1, serde_json::json!({"data": {"1": "one"}}));
    }

    #[test]
    fn expands_lists() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: kubevirt.io/v1\n  kind: VirtualMachineInstance\n  metadata: {name: a}\n  spec: {domain: {devices: {}}}\n- apiVersion: kubevirt.io/v1\n  kind: VirtualMachineInstance\n  metadata: {name: b}\n  spec: {domain: {devices: {}}}\n";
        let m = read_manifest("l.yaml", text).unwrap();
        assert_eq!(object_indices(&m), [1, 2]);
    }

    #[test]
    fn pools_and_replica_sets_are_read_as_the_vm_and_vmi_their_templates_create() {
        let text = "apiVersion: pool.kubevirt.io/v1beta1\nkind: VirtualMachinePool\nmetadata: {name: pool-a, namespace: prod}\nspec:\n  replicas: 3\n  virtualMachineTemplate:\n    metadata: {labels: {app: a}}\n    spec:\n      runStrategy: Always\n      template:\n        spec:\n          domain: {devices: {}, resources: {requests: {memory: 1Gi}}}\n---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceReplicaSet\nmetadata: {name: rs-b}\nspec:\n  replicas: 2\n  template:\n    metadata: {name: ignored, labels: {app: b}}\n    spec:\n      domain: {devices: {}, memory: {guest: 2Gi}}\n";
        let m = read_manifest("t.yaml", text).unwrap();
        assert!(m.skipped.is_empty());
        match &m.objects[0].object {
            KubeVirtObject::Vm(vm) => {
                assert_eq!(vm.metadata.name.as_deref(), Some("pool-a"));
                assert_eq!(vm.metadata.namespace.as_deref(), Some("prod"));
                assert!(vm.spec.template.is_some());
            }
            other => panic!("expected a VM, got {other:?}"),
        }
        match &m.objects[1].object {
            KubeVirtObject::Vmi(vmi) => {
                assert_eq!(vmi.metadata.name.as_deref(), Some("rs-b"));
                assert_eq!(vmi.metadata.namespace, None);
                assert_eq!(crate::api::label(&vmi.metadata, "app"), Some("b"));
            }
            other => panic!("expected a VMI, got {other:?}"),
        }
        // Errors name the field in the owner's own terms.
        let bad = "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceReplicaSet\nmetadata: {name: rs}\nspec:\n  template:\n    spec:\n      domain: {devices: {}, memory: {guest: [1]}}\n";
        let e = read_manifest("t.yaml", bad).unwrap_err().to_string();
        assert!(
            e.contains("field spec.template.spec.domain.memory.guest"),
            "{e}"
        );
        let e = read_manifest("t.yaml", "apiVersion: pool.kubevirt.io/v1beta1\nkind: VirtualMachinePool\nmetadata: {name: p}\nspec: {}\n").unwrap_err().to_string();
        assert!(
            e.contains("field spec.virtualMachineTemplate: required"),
            "{e}"
        );
    }
}
