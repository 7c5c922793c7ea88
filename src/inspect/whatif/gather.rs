//! The what-if's reads: the cluster (as `inspect` gathers, plus the nodes), or a manifest.

use crate::api::manifest::from_value_with_path;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::inspect::gather::{GatherError, GatherOptions, Gathered, describe_error, gather_raw};
use crate::inspect::model::Missing;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;
/// Gather as `inspect` does, plus every node (for the fit check of the rendered pod). Reads
/// only; the VM is not touched.
pub(crate) async fn gather_what_if(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
) -> Result<Gathered, GatherError> {
    let mut g = gather_raw(client, namespace, name, opts).await?;
    if g.candidate_nodes.is_empty() {
        let nodes: kube::Api<Node> = kube::Api::all(client.clone());
        match nodes.list(&kube::api::ListParams::default()).await {
            Ok(list) => g.candidate_nodes = list.items,
            Err(e) => g.missing.push(Missing {
                what: "nodes".into(),
                reason: format!("{}; the fit check is skipped", describe_error(&e)),
            }),
        }
    }
    Ok(g)
}

/// A [`Gathered`] from a manifest alone (`inspect -f FILE --what-if`): its first VM, the VMI of
/// the same name, that VMI's launcher pods, Nodes, a KubeVirt CR (settings), the
/// ControllerRevisions, DataVolumes and PVCs it holds. No cluster is read.
pub(crate) fn gathered_from_manifest(
    source: &str,
    text: &str,
    default_namespace: &str,
    now: DateTime<Utc>,
) -> Result<Gathered, String> {
    let docs = crate::api::manifest::split_documents(source, text).map_err(|e| e.to_string())?;
    let mut g = Gathered {
        now,
        ..Default::default()
    };
    let mut vmis = Vec::new();
    let mut pods: Vec<Pod> = Vec::new();
    let mut kubevirt = None;
    for (index, doc) in docs {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = |field: String, message: String| {
            format!("{source}: document {index} ({kind}): field {field}: {message}")
        };
        match kind.as_str() {
            "VirtualMachine" if g.vm.is_none() => {
                let vm: VirtualMachine = from_value_with_path(doc).map_err(|(f, m)| at(f, m))?;
                g.vm = Some(vm);
            }
            "VirtualMachineInstance" => {
                vmis.push(
                    from_value_with_path::<VirtualMachineInstance>(doc)
                        .map_err(|(f, m)| at(f, m))?,
                );
            }
            "Pod" => pods.push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "Node" => g
                .candidate_nodes
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "KubeVirt" => kubevirt = Some(doc),
            "ControllerRevision" => g
                .revisions
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "DataVolume" => g
                .data_volumes
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "PersistentVolumeClaim" => {
                let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim =
                    from_value_with_path(doc).map_err(|(f, m)| at(f, m))?;
                g.pvcs
                    .insert(pvc.metadata.name.clone().unwrap_or_default(), pvc);
            }
            _ => {}
        }
    }
    let mut vm =
        g.vm.take()
            .ok_or_else(|| format!("{source}: no VirtualMachine in the file"))?;
    if vm.metadata.namespace.is_none() {
        vm.metadata.namespace = Some(default_namespace.to_string());
    }
    g.namespace = vm.metadata.namespace.clone().unwrap_or_default();
    g.name = vm.metadata.name.clone().unwrap_or_default();
    g.vmi = vmis
        .into_iter()
        .find(|v| v.metadata.name.as_deref() == Some(g.name.as_str()));
    if let Some(v) = g.vmi.as_mut()
        && v.metadata.namespace.is_none()
    {
        v.metadata.namespace = Some(g.namespace.clone());
    }
    let uid = g.vmi.as_ref().and_then(|v| v.metadata.uid.clone());
    g.pods = pods
        .into_iter()
        .filter(|p| {
            uid.is_some()
                && crate::api::label(&p.metadata, crate::api::labels::CREATED_BY) == uid.as_deref()
        })
        .collect();
    g.settings = match kubevirt {
        Some(cr) => ClusterSettings::from_kubevirt_cr(&cr).map_err(|e| format!("{source}: {e}"))?,
        None => {
            g.missing.push(Missing {
                what: "kubevirt".into(),
                reason: format!("no KubeVirt CR in {source}; KubeVirt's default settings assumed"),
            });
            ClusterSettings::default()
        }
    };
    if g.vmi.is_none() {
        g.missing.push(Missing {
            what: "vmi".into(),
            reason: format!("no VirtualMachineInstance {} in {source}", g.name),
        });
    }
    if g.candidate_nodes.is_empty() {
        g.missing.push(Missing {
            what: "nodes".into(),
            reason: format!("no Node in {source}; the fit check is skipped"),
        });
    }
    g.missing.push(Missing {
        what: "controller".into(),
        reason: "read from a file: no controller to ask; expectations taken as satisfied".into(),
    });
    g.vm = Some(vm);
    Ok(g)
}
