//! Reads for `why`: the VM, its VMI, every launcher pod that still carries the VM's name, the
//! core/v1 Events about the VM, its VMIs (all share its name, old ones included) and its pods,
//! the nodes they ran on, the controller Lease and the KubeVirt CR's settings. Only reads;
//! a failed read is noted in [`WhyGathered::missing`].

use crate::api::labels::{CREATED_BY, VM_NAME};
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::inspect::gather::{describe_error, is_not_found, is_transport, read_kubevirt};
use crate::inspect::model::Missing;
use crate::inspect::{GatherError, GatherOptions};
use crate::kubevirt_version::KubeVirtVersion;
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;

/// Most launcher pods whose events are read (the newest first).
const MAX_POD_EVENT_READS: usize = 20;

/// Everything `why` reads about one VM. Tests build it by hand.
#[derive(Debug, Clone, Default)]
pub(crate) struct WhyGathered {
    pub now: DateTime<Utc>,
    pub namespace: String,
    pub name: String,
    pub vm: VirtualMachine,
    /// The VMI of the VM's name, if one exists.
    pub vmi: Option<VirtualMachineInstance>,
    /// Launcher pods labelled with the VM's name or the VMI's uid.
    pub pods: Vec<Pod>,
    /// The nodes the VMI and the pods name: `None` when the Node does not exist.
    pub nodes: BTreeMap<String, Option<Node>>,
    /// core/v1 Events about the VM, its VMIs and its launcher pods.
    pub events: Vec<Event>,
    /// The controller Lease, and `namespace/name` of the one looked at.
    pub lease: Option<Lease>,
    pub lease_key: String,
    /// The cluster settings (the KubeVirt CR's, else KubeVirt's defaults).
    pub settings: ClusterSettings,
    /// The KubeVirt release the cluster runs and where that was read ([`cluster_version`]);
    /// `None` when neither says.
    pub kubevirt_version: Option<(KubeVirtVersion, String)>,
    pub missing: Vec<Missing>,
}

fn note(list: &mut Vec<Missing>, what: impl Into<String>, reason: impl Into<String>) {
    list.push(Missing {
        what: what.into(),
        reason: reason.into(),
    });
}

/// Read one VM's trace. Errors: the VM does not exist, or the API server cannot be reached.
pub(crate) async fn gather(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
) -> Result<WhyGathered, GatherError> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let vm = match vms.get(name).await {
        Ok(vm) => vm,
        Err(e) if is_not_found(&e) => {
            return Err(GatherError::VmNotFound {
                namespace: namespace.into(),
                name: name.into(),
            });
        }
        Err(e) => {
            return Err(GatherError::Unreachable(format!(
                "get VirtualMachine {namespace}/{name}: {}",
                describe_error(&e)
            )));
        }
    };
    let mut g = WhyGathered {
        namespace: namespace.into(),
        name: name.into(),
        vm,
        lease_key: format!("{}/{}", opts.lease_namespace, opts.lease_name),
        ..Default::default()
    };
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    match vmis.get_opt(name).await {
        Ok(v) => g.vmi = v,
        Err(e) if is_transport(&e) => return Err(GatherError::Unreachable(describe_error(&e))),
        Err(e) => note(&mut g.missing, "vmi", describe_error(&e)),
    }
    read_pods(client, &mut g).await;
    read_events(client, &mut g).await;
    read_nodes(client, &mut g).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &opts.lease_namespace);
    match leases.get_opt(&opts.lease_name).await {
        Ok(l) => g.lease = l,
        Err(e) => note(&mut g.missing, "lease", describe_error(&e)),
    }
    let observed = match read_kubevirt(client, &opts.kubevirt_namespace).await {
        Ok((s, observed)) => {
            g.settings = s;
            observed
        }
        Err(m) => {
            g.missing.push(m);
            None
        }
    };
    g.kubevirt_version = cluster_version(observed.as_deref(), &g.pods);
    g.now = Utc::now();
    Ok(g)
}

/// The KubeVirt release the cluster runs: the KubeVirt CR's `status.observedKubeVirtVersion`
/// ([`KubeVirtVersion::observed`], the rule `explain-overhead` and `shadow` follow), else the
/// launcher image tag of the newest launcher pod (`pods` newest first) that names a known
/// release; with where it was read.
pub(crate) fn cluster_version(
    observed: Option<&str>,
    pods: &[Pod],
) -> Option<(KubeVirtVersion, String)> {
    if let Ok(v) = KubeVirtVersion::observed(observed) {
        return Some((v, crate::kubevirt_version::OBSERVED_VERSION.into()));
    }
    pods.iter().find_map(|p| {
        let tag = crate::launcher::explain::launcher_image_tag(p)?;
        let v = KubeVirtVersion::parse(&tag).ok()?;
        let name = p.metadata.name.as_deref().unwrap_or_default();
        Some((v, format!("the launcher image tag of pod {name}")))
    })
}

async fn read_pods(client: &kube::Client, g: &mut WhyGathered) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &g.namespace);
    let mut selectors = vec![format!("{VM_NAME}={}", g.name)];
    if let Some(uid) = g.vmi.as_ref().and_then(|v| v.metadata.uid.as_deref()) {
        selectors.push(format!("{CREATED_BY}={uid}"));
    }
    for selector in selectors {
        match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                for p in list.items {
                    if !g.pods.iter().any(|q| q.metadata.uid == p.metadata.uid) {
                        g.pods.push(p);
                    }
                }
            }
            Err(e) => note(
                &mut g.missing,
                format!("pods ({selector})"),
                describe_error(&e),
            ),
        }
    }
    g.pods.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
    });
}

/// The names of launcher pods the VMI events name (`Created virtual machine pod NAME`,
/// lifecycle.go:184) and the pods read, newest first, at most [`MAX_POD_EVENT_READS`].
fn pod_names(g: &WhyGathered) -> Vec<String> {
    let mut names: Vec<String> = g
        .pods
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let mut created: Vec<&Event> = g
        .events
        .iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("VirtualMachineInstance"))
        .collect();
    created.sort_by_key(|e| std::cmp::Reverse(super::evidence::event_time(e)));
    for e in created {
        if let Some(pod) = super::evidence::created_pod_name(e)
            && !names.contains(&pod)
        {
            names.push(pod);
        }
    }
    names.truncate(MAX_POD_EVENT_READS);
    names
}

async fn read_events(client: &kube::Client, g: &mut WhyGathered) {
    let api: Api<Event> = Api::namespaced(client.clone(), &g.namespace);
    let by_name = ListParams::default().fields(&format!("involvedObject.name={}", g.name));
    match api.list(&by_name).await {
        Ok(list) => g.events = list.items,
        Err(e) => {
            note(&mut g.missing, "events", describe_error(&e));
            return;
        }
    }
    for pod in pod_names(g) {
        let lp = ListParams::default().fields(&format!(
            "involvedObject.kind=Pod,involvedObject.name={pod}"
        ));
        match api.list(&lp).await {
            Ok(list) => g.events.extend(list.items),
            Err(e) => note(
                &mut g.missing,
                format!("events of Pod/{pod}"),
                describe_error(&e),
            ),
        }
    }
}

async fn read_nodes(client: &kube::Client, g: &mut WhyGathered) {
    let mut wanted: Vec<String> = g
        .pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    if let Some(n) = g
        .vmi
        .as_ref()
        .and_then(|v| v.status.as_ref()?.node_name.clone())
    {
        wanted.push(n);
    }
    wanted.retain(|n| !n.is_empty());
    wanted.sort();
    wanted.dedup();
    let nodes: Api<Node> = Api::all(client.clone());
    for n in wanted {
        match nodes.get_opt(&n).await {
            Ok(found) => {
                g.nodes.insert(n, found);
            }
            Err(e) => note(&mut g.missing, format!("node/{n}"), describe_error(&e)),
        }
    }
}
