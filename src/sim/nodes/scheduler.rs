//! The scheduler stand-in: which pods it is responsible for, whether a pod fits a node, which
//! node it picks, and the `PodScheduled=False` message when none fits.
//!
//! Follows kube-scheduler v1.33's default profile, filters in its order
//! (pkg/scheduler/apis/config/v1/default_plugins.go): NodeUnschedulable, TaintToleration,
//! NodeAffinity (nodeSelector + required node affinity), NodeResourcesFit. A node stops at its
//! first failing filter (framework/runtime/framework.go `RunFilterPlugins`); NodeResourcesFit
//! can report several resources at once. Messages are those of the plugins and of
//! `FitError.Error()` (pkg/scheduler/framework/types.go), including the preemption post-filter
//! summary. Scoring is simplified to "fewest pods, then node order".

use super::quantity::parse_quantity;
use super::resources::{ResourceList, pod_requests};
use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The scheduler name this stand-in answers to (`spec.schedulerName`).
pub(crate) const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Whether the scheduler should try to place this pod: no `spec.nodeName`, not being deleted,
/// not in a final phase, and `spec.schedulerName` empty or `default-scheduler`.
pub(crate) fn wants_scheduling(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty()) {
        return false;
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    if matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return false;
    }
    matches!(
        spec.scheduler_name.as_deref(),
        None | Some("") | Some(DEFAULT_SCHEDULER_NAME)
    )
}

/// Why a node does not fit a pod (one filter plugin's verdict).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FitFailure {
    /// NodeUnschedulable: `spec.unschedulable` without a matching toleration.
    Unschedulable,
    /// TaintToleration: a NoSchedule/NoExecute taint the pod does not tolerate.
    UntoleratedTaint { key: String, value: String },
    /// NodeAffinity: nodeSelector or required node affinity does not match.
    NodeAffinity,
    /// NodeResourcesFit: the node already runs `allocatable pods` pods.
    TooManyPods,
    /// NodeResourcesFit: not enough of the named resource left.
    Insufficient(String),
}

impl FitFailure {
    /// The plugin's reason string as it appears in the scheduler's message.
    pub(crate) fn reason(&self) -> String {
        match self {
            FitFailure::Unschedulable => "node(s) were unschedulable".to_string(),
            FitFailure::UntoleratedTaint { key, value } => {
                format!("node(s) had untolerated taint {{{key}: {value}}}")
            }
            FitFailure::NodeAffinity => {
                "node(s) didn't match Pod's node affinity/selector".to_string()
            }
            FitFailure::TooManyPods => "Too many pods".to_string(),
            FitFailure::Insufficient(resource) => format!("Insufficient {resource}"),
        }
    }

    /// Whether preemption could help (resource shortage) or not (UnschedulableAndUnresolvable).
    fn preemption_may_help(&self) -> bool {
        matches!(self, FitFailure::TooManyPods | FitFailure::Insufficient(_))
    }
}

/// What is already placed on a node: number of non-terminal pods and the sum of their requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NodeUsage {
    /// Non-terminal pods bound to the node.
    pub pods: usize,
    /// Sum of their effective requests (milli-units).
    pub requests: ResourceList,
}

impl NodeUsage {
    /// Count one more pod with these requests.
    pub(crate) fn add(&mut self, requests: &ResourceList) {
        self.pods += 1;
        for (k, v) in requests {
            self.requests.entry(k.clone()).or_default().0 += v.0;
        }
    }

    /// Count one pod with these requests less (the inverse of [`NodeUsage::add`]; amounts that
    /// drop to zero are removed, so the result equals a usage that never counted the pod).
    pub(crate) fn remove(&mut self, requests: &ResourceList) {
        self.pods = self.pods.saturating_sub(1);
        for (k, v) in requests {
            if let Some(have) = self.requests.get_mut(k) {
                have.0 -= v.0;
                if have.0 == 0 {
                    self.requests.remove(k);
                }
            }
        }
    }

    /// Whether nothing is counted.
    pub(crate) fn is_empty(&self) -> bool {
        self.pods == 0 && self.requests.is_empty()
    }
}

/// What `pod` counts for in [`node_usage`]: its node and effective requests, when it is bound
/// to a node (`spec.nodeName`, or `node` for a pod whose binding the caller made but whose
/// cached copy does not show it yet) and not Succeeded/Failed.
pub(crate) fn pod_usage(pod: &Pod, node: Option<&str>) -> Option<(String, ResourceList)> {
    let spec = pod.spec.as_ref()?;
    let node = spec
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .or(node)?;
    if matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    ) {
        return None;
    }
    Some((node.to_string(), pod_requests(spec)))
}

/// Usage per node name, from every pod bound to a node and not Succeeded/Failed.
#[cfg(test)]
pub(crate) fn node_usage<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
) -> BTreeMap<String, NodeUsage> {
    let mut usage: BTreeMap<String, NodeUsage> = BTreeMap::new();
    for (node, requests) in pods.into_iter().filter_map(|p| pod_usage(p, None)) {
        usage.entry(node).or_default().add(&requests);
    }
    usage
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        if t.effect
            .as_deref()
            .is_some_and(|e| !e.is_empty() && e != taint.effect)
        {
            return false;
        }
        if t.key
            .as_deref()
            .is_some_and(|k| !k.is_empty() && k != taint.key)
        {
            return false;
        }
        match t.operator.as_deref() {
            Some("Exists") => true,
            _ => {
                t.key.as_deref() == Some(taint.key.as_str())
                    && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
            }
        }
    })
}

fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let (Some(v), [bound]) = (value, values) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if op == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        // An empty term matches no objects (k8s.io/component-helpers nodeaffinity).
        return false;
    }
    let labels = node.metadata.labels.as_ref();
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.and_then(|l| l.get(&r.key)).map(String::as_str)))
        && fields.iter().all(|r| {
            r.key == "metadata.name" && requirement_matches(r, node.metadata.name.as_deref())
        })
}

/// NodeAffinity filter: `spec.nodeSelector` labels all equal, and, when present, at least one
/// required node-affinity term matches (In, NotIn, Exists, DoesNotExist, Gt, Lt;
/// `matchFields` on `metadata.name`).
pub(crate) fn matches_node_affinity(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let labels = node.metadata.labels.as_ref();
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !selector_ok {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node)),
    }
}

/// Run the filters for one node. `Ok(())` when the pod fits; otherwise the failures of the
/// first failing filter.
pub(crate) fn node_fits(
    pod: &Pod,
    requests: &ResourceList,
    node: &Node,
    usage: &NodeUsage,
) -> Result<(), Vec<FitFailure>> {
    // Borrowed, not cloned: this runs for every pending pod on every node.
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    let node_spec = node.spec.as_ref();
    if node_spec.and_then(|s| s.unschedulable) == Some(true) {
        let taint = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerates(tolerations, &taint) {
            return Err(vec![FitFailure::Unschedulable]);
        }
    }
    for taint in node_spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
    {
        if matches!(taint.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerates(tolerations, taint)
        {
            return Err(vec![FitFailure::UntoleratedTaint {
                key: taint.key.clone(),
                value: taint.value.clone().unwrap_or_default(),
            }]);
        }
    }
    if !matches_node_affinity(pod, node) {
        return Err(vec![FitFailure::NodeAffinity]);
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let mut failures = Vec::new();
    let max_pods = allocatable
        .and_then(|a| a.get("pods"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .map_or(i128::MAX, |m| m.0 / 1000);
    if i128::try_from(usage.pods).unwrap_or(i128::MAX) + 1 > max_pods {
        failures.push(FitFailure::TooManyPods);
    }
    for (name, want) in requests {
        if want.0 <= 0 || name == "pods" {
            continue;
        }
        let have = allocatable
            .and_then(|a| a.get(name))
            .and_then(|q| parse_quantity(&q.0).ok())
            .map_or(0, |m| m.0);
        let used = usage.requests.get(name).map_or(0, |m| m.0);
        if want.0 > have - used {
            failures.push(FitFailure::Insufficient(name.clone()));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
    }
}

/// The scheduler's verdict for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ScheduleDecision {
    /// Bind the pod to this node.
    Bind { node: String },
    /// No node fits; the pod stays Pending with `PodScheduled=False`, reason `Unschedulable`,
    /// and this message.
    Unschedulable { message: String },
}

fn histogram(total: usize, reasons: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{total} nodes are available: {}.", parts.join(", "))
}

/// `FitError.Error()` for `total` nodes and the failures of each node, e.g.
/// `0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption:
/// 0/2 nodes are available: 2 Preemption is not helpful for scheduling.`
pub(crate) fn unschedulable_message(total: usize, per_node: &[Vec<FitFailure>]) -> String {
    if total == 0 {
        return "no nodes available to schedule pods".to_string();
    }
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut preemption: BTreeMap<String, usize> = BTreeMap::new();
    for failures in per_node {
        for f in failures {
            *reasons.entry(f.reason()).or_default() += 1;
        }
        let key = if failures.iter().any(FitFailure::preemption_may_help) {
            "No preemption victims found for incoming pod"
        } else {
            "Preemption is not helpful for scheduling"
        };
        *preemption.entry(key.to_string()).or_default() += 1;
    }
    format!(
        "{} preemption: {}",
        histogram(total, &reasons),
        histogram(total, &preemption)
    )
}

/// Pick a node for `pod` among `nodes` (in preference order on ties): every fitting node is a
/// candidate; the one with the fewest pods wins.
pub(crate) fn schedule(
    pod: &Pod,
    nodes: &[&Node],
    usage: &BTreeMap<String, NodeUsage>,
) -> ScheduleDecision {
    let requests = pod.spec.as_ref().map(pod_requests).unwrap_or_default();
    let empty = NodeUsage::default();
    let mut best: Option<(usize, &str)> = None;
    let mut failures = Vec::new();
    for node in nodes {
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let u = usage.get(name).unwrap_or(&empty);
        match node_fits(pod, &requests, node, u) {
            Ok(()) => {
                if best.is_none_or(|(pods, _)| u.pods < pods) {
                    best = Some((u.pods, name));
                }
            }
            Err(f) => failures.push(f),
        }
    }
    match best {
        Some((_, name)) => ScheduleDecision::Bind {
            node: name.to_string(),
        },
        None => ScheduleDecision::Unschedulable {
            message: unschedulable_message(nodes.len(), &failures),
        },
    }
}

/// The nodes of one scheduling pass by (pods bound, preference order): the first that fits a
/// pod is the node [`schedule`] picks, found without running the filters on every node.
#[derive(Debug)]
pub(crate) struct NodeOrder {
    by_pods: BTreeSet<(usize, usize)>,
    pods: Vec<usize>,
    index: HashMap<String, usize>,
}

impl NodeOrder {
    pub(crate) fn new(nodes: &[&Node], usage: &BTreeMap<String, NodeUsage>) -> NodeOrder {
        let mut order = NodeOrder {
            by_pods: BTreeSet::new(),
            pods: vec![0; nodes.len()],
            index: HashMap::new(),
        };
        for (i, node) in nodes.iter().enumerate() {
            if let Some(name) = node.metadata.name.as_deref() {
                order.index.insert(name.to_string(), i);
                order.pods[i] = usage.get(name).map_or(0, |u| u.pods);
                order.by_pods.insert((order.pods[i], i));
            }
        }
        order
    }

    /// The node called `name` now has `pods` pods bound.
    pub(crate) fn set_pods(&mut self, name: &str, pods: usize) {
        if let Some(&i) = self.index.get(name) {
            self.by_pods.remove(&(self.pods[i], i));
            self.pods[i] = pods;
            self.by_pods.insert((pods, i));
        }
    }
}

/// [`schedule`] with the nodes in `order` (built from the same `nodes` and `usage`): the
/// filters run on the least-loaded nodes first and stop at the first that fits; every node is
/// looked at only when none fits (for the message).
pub(crate) fn schedule_in(
    pod: &Pod,
    nodes: &[&Node],
    usage: &BTreeMap<String, NodeUsage>,
    order: &NodeOrder,
) -> ScheduleDecision {
    let requests = pod.spec.as_ref().map(pod_requests).unwrap_or_default();
    let empty = NodeUsage::default();
    for &(_, i) in &order.by_pods {
        let Some(name) = nodes[i].metadata.name.as_deref() else {
            continue;
        };
        let u = usage.get(name).unwrap_or(&empty);
        if node_fits(pod, &requests, nodes[i], u).is_ok() {
            return ScheduleDecision::Bind {
                node: name.to_string(),
            };
        }
    }
    schedule(pod, nodes, usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::nodes::node::{NodeCapacity, build_node};
    use k8s_openapi::api::core::v1::{
        Affinity, Container, NodeAffinity, NodeSelector, PodSpec, PodStatus, ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn nodes(n: usize) -> Vec<Node> {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(0).expect("epoch"));
        (0..n)
            .map(|i| build_node(i, &NodeCapacity::default(), &[], &now))
            .collect()
    }

    fn with_spec(p: &mut Pod, f: impl FnOnce(&mut PodSpec)) {
        f(p.spec.get_or_insert_with(Default::default));
    }

    fn pod(selector: &[(&str, &str)]) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "compute".into(),
                    ..Default::default()
                }],
                node_selector: (!selector.is_empty()).then(|| {
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_unbound_live_default_scheduler_pods_are_scheduled() {
        let mut p = pod(&[]);
        assert!(wants_scheduling(&p));
        with_spec(&mut p, |s| {
            s.scheduler_name = Some("default-scheduler".into())
        });
        assert!(wants_scheduling(&p));
        with_spec(&mut p, |s| s.scheduler_name = Some("my-scheduler".into()));
        assert!(!wants_scheduling(&p));
        let mut p = pod(&[]);
        with_spec(&mut p, |s| s.node_name = Some("sim-node-0".into()));
        assert!(!wants_scheduling(&p));
        let mut p = pod(&[]);
        p.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert!(!wants_scheduling(&p));
    }

    #[test]
    fn launcher_selector_fits_and_least_loaded_node_wins() {
        let ns = nodes(2);
        let refs: Vec<&Node> = ns.iter().collect();
        let p = pod(&[
            ("kubevirt.io/schedulable", "true"),
            ("kubernetes.io/arch", "amd64"),
        ]);
        let mut usage = BTreeMap::new();
        assert_eq!(
            schedule(&p, &refs, &usage),
            ScheduleDecision::Bind {
                node: "sim-node-0".into()
            }
        );
        usage.insert(
            "sim-node-0".to_string(),
            NodeUsage {
                pods: 1,
                ..Default::default()
            },
        );
        assert_eq!(
            schedule(&p, &refs, &usage),
            ScheduleDecision::Bind {
                node: "sim-node-1".into()
            }
        );
    }

    #[test]
    fn the_ordered_scan_picks_what_the_full_scan_picks() {
        let mut ns = nodes(6);
        // Nodes 1 and 4 do not match the pod's selector.
        for i in [1, 4] {
            if let Some(l) = ns[i].metadata.labels.as_mut() {
                l.insert("kubernetes.io/arch".into(), "arm64".into());
            }
        }
        let refs: Vec<&Node> = ns.iter().collect();
        let p = pod(&[("kubernetes.io/arch", "amd64")]);
        let mut usage: BTreeMap<String, NodeUsage> = BTreeMap::new();
        let mut order = NodeOrder::new(&refs, &usage);
        for round in 0..20 {
            let full = schedule(&p, &refs, &usage);
            assert_eq!(
                schedule_in(&p, &refs, &usage, &order),
                full,
                "round {round}"
            );
            let ScheduleDecision::Bind { node } = full else {
                panic!("round {round}: {full:?}");
            };
            let u = usage.entry(node.clone()).or_default();
            u.pods += 1 + round % 2;
            order.set_pods(&node, u.pods);
        }
        let none = pod(&[("kubernetes.io/arch", "s390x")]);
        assert_eq!(
            schedule_in(&none, &refs, &usage, &order),
            schedule(&none, &refs, &usage)
        );
    }

    #[test]
    fn selector_mismatch_gives_the_real_schedulers_message() {
        let ns = nodes(2);
        let refs: Vec<&Node> = ns.iter().collect();
        let p = pod(&[("kubernetes.io/arch", "s390x")]);
        let ScheduleDecision::Unschedulable { message } = schedule(&p, &refs, &BTreeMap::new())
        else {
            panic!("expected unschedulable");
        };
        assert_eq!(
            message,
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. \
             preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }

    #[test]
    fn no_nodes_message() {
        let p = pod(&[]);
        assert_eq!(
            schedule(&p, &[], &BTreeMap::new()),
            ScheduleDecision::Unschedulable {
                message: "no nodes available to schedule pods".into()
            }
        );
    }

    #[test]
    fn required_node_affinity_expressions() {
        let ns = nodes(2);
        let term = |key: &str, op: &str, values: &[&str]| NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        let with_terms = |terms: Vec<NodeSelectorTerm>| {
            let mut p = pod(&[]);
            with_spec(&mut p, |s| {
                s.affinity = Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: terms,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            });
            p
        };
        let p = with_terms(vec![term("kubernetes.io/hostname", "In", &["sim-node-1"])]);
        assert!(!matches_node_affinity(&p, &ns[0]));
        assert!(matches_node_affinity(&p, &ns[1]));
        // KubeVirt's host-model term.
        let p = with_terms(vec![term(
            "node-labeller.kubevirt.io/obsolete-host-model",
            "DoesNotExist",
            &[],
        )]);
        assert!(matches_node_affinity(&p, &ns[0]));
        let p = with_terms(vec![term("kubevirt.io/schedulable", "NotIn", &["true"])]);
        assert!(!matches_node_affinity(&p, &ns[0]));
        // Terms are ORed.
        let p = with_terms(vec![
            term("kubevirt.io/schedulable", "NotIn", &["true"]),
            term("kubernetes.io/os", "Exists", &[]),
        ]);
        assert!(matches_node_affinity(&p, &ns[0]));
        // Empty term matches nothing.
        let p = with_terms(vec![NodeSelectorTerm::default()]);
        assert!(!matches_node_affinity(&p, &ns[0]));
    }

    #[test]
    fn resources_and_taints_and_cordon() {
        let mut ns = nodes(3);
        if let Some(s) = ns[0].spec.as_mut() {
            s.unschedulable = Some(true);
        }
        if let Some(s) = ns[1].spec.as_mut() {
            s.taints = Some(vec![Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]);
        }
        let refs: Vec<&Node> = ns.iter().collect();
        let mut p = pod(&[]);
        with_spec(&mut p, |s| {
            s.containers[0].resources = Some(ResourceRequirements {
                requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("64".into()))])),
                ..Default::default()
            })
        });
        let ScheduleDecision::Unschedulable { message } = schedule(&p, &refs, &BTreeMap::new())
        else {
            panic!("expected unschedulable");
        };
        assert_eq!(
            message,
            "0/3 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint \
             {dedicated: gpu}, 1 node(s) were unschedulable. preemption: 0/3 nodes are available: \
             1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
        );
        // Tolerating the taint and asking for less CPU lands on sim-node-1 or sim-node-2.
        with_spec(&mut p, |s| {
            s.containers[0].resources = None;
            s.tolerations = Some(vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }])
        });
        assert_eq!(
            schedule(&p, &refs, &BTreeMap::new()),
            ScheduleDecision::Bind {
                node: "sim-node-1".into()
            }
        );
    }

    #[test]
    fn usage_counts_only_live_bound_pods() {
        let mut a = pod(&[]);
        with_spec(&mut a, |s| s.node_name = Some("sim-node-0".into()));
        let mut b = a.clone();
        b.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let c = pod(&[]);
        let u = node_usage([&a, &b, &c]);
        assert_eq!(u.get("sim-node-0").map(|u| u.pods), Some(1));
        assert_eq!(u.len(), 1);
    }
}
