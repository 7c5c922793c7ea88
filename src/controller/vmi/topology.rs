//! The VMI controller's TSC topology hints: KubeVirt v1.9.0's topology hinter
//! (pkg/virt-controller/watch/topology/hinter.go:24-67, tsc.go:14-174, filter.go:14-123) as
//! pure functions of the VMI and of the node state the executor gathers ([`TopologyState`]).
//!
//! A VMI that needs a TSC frequency (an `invtsc` CPU feature required or forced, or the Hyper-V
//! reenlightenment enabled, on `amd64`) gets no launcher pod while `status.topologyHints` is
//! unset (vmi/lifecycle.go:106-109); the Pending branch of `updateStatus` writes the hint
//! (lifecycle.go:326-334, 615-626): the KubeVirt CR's `minimumClusterTSCFrequency`, else the
//! lowest `cpu-timer.node.kubevirt.io/tsc-frequency` among the nodes that are schedulable or run
//! a VMI, 0 when there is none. The launcher renderer then selects
//! `scheduling.node.kubevirt.io/tsc-frequency-<Hz>` ([`crate::launcher`]'s node selector).
//!
//! The node topology updater (topology/nodetopologyupdater.go, a loop of its own in
//! virt-controller, application.go:662, 786) that puts those scheduling labels on nodes is not
//! modelled: it is a node controller, not the VMI controller; docs/comparison.md.

use crate::api::VirtualMachineInstance;
use k8s_openapi::api::core::v1::Node;
use std::collections::BTreeMap;

/// `cpu-timer.node.kubevirt.io/tsc-frequency` (filter.go:14, `v1.CPUTimerLabel` types.go:1273).
pub(crate) const TSC_FREQUENCY_LABEL: &str = "cpu-timer.node.kubevirt.io/tsc-frequency";
/// `kubevirt.io/schedulable` (`v1.NodeSchedulable`), what `IsSchedulable` reads (filter.go:21-27, types.go:1187).
pub(crate) const SCHEDULABLE_LABEL: &str = "kubevirt.io/schedulable";
/// The event reason and sync error reason of a hint that cannot be gathered
/// (pkg/controller/controller.go:85-86, KubeVirt's spelling).
pub(crate) const FAILED_GATHERING_HINTS: &str = "FailedGatherhingClusterTopologyHints";

/// `TscFrequencyRequirementType` (tsc.go:14-20).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TscRequirement {
    /// `invtsc` with policy `require` or `force`.
    RequiredForBoot,
    /// Hyper-V reenlightenment enabled.
    RequiredForMigration,
    NotRequired,
}

/// `GetTscFrequencyRequirement` (tsc.go:135-148): `invtsc` required or forced
/// (`vmiHasInvTSCFeature`, tsc.go:150-163) first, then the Hyper-V reenlightenment
/// (`isVmiUsingHyperVReenlightenment`, tsc.go:165-174). Reads the VMI without keeping parsed
/// maps in the (cached) object.
pub(crate) fn tsc_requirement(vmi: &VirtualMachineInstance) -> TscRequirement {
    let invtsc = vmi.spec.domain.cpu.as_ref().is_some_and(|cpu| {
        cpu.extra.may_have_key("features")
            && cpu.extra.read(|m| {
                m.get("features")
                    .and_then(|f| f.as_array())
                    .is_some_and(|fs| {
                        fs.iter().any(|f| {
                            f.get("name").and_then(|n| n.as_str()) == Some("invtsc")
                                && matches!(
                                    f.get("policy").and_then(|p| p.as_str()),
                                    Some("require" | "force")
                                )
                        })
                    })
            })
    });
    if invtsc {
        return TscRequirement::RequiredForBoot;
    }
    let domain = &vmi.spec.domain.extra;
    let reenlightenment = domain.may_have_key("reenlightenment")
        && domain.read(|m| {
            m.get("features")
                .and_then(|f| f.get("hyperv"))
                .and_then(|h| h.get("reenlightenment"))
                .and_then(|r| r.get("enabled"))
                .and_then(|e| e.as_bool())
                == Some(true)
        });
    if reenlightenment {
        TscRequirement::RequiredForMigration
    } else {
        TscRequirement::NotRequired
    }
}

/// `spec.architecture` is `amd64` (hinter.go:31, 36: the VMI's own field, which virt-api's
/// mutator fills from the cluster default; an empty one is not `amd64`).
fn is_amd64(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec.architecture.as_deref() == Some("amd64")
}

/// `IsTscFrequencyRequired` (hinter.go:30-32): `amd64` and any requirement, for migration too.
pub(crate) fn is_tsc_frequency_required(vmi: &VirtualMachineInstance) -> bool {
    is_amd64(vmi) && tsc_requirement(vmi) != TscRequirement::NotRequired
}

/// `vmi.Status.TopologyHints != nil`: the status has a non-null `topologyHints`.
pub(crate) fn has_topology_hints(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().is_some_and(|s| {
        s.extra.may_have_key("topologyHints")
            && s.extra
                .read(|m| m.get("topologyHints").is_some_and(|h| !h.is_null()))
    })
}

/// `vmi.Status.TopologyHints == nil && IsTscFrequencyRequired(vmi)` (lifecycle.go:106): the
/// launcher pod waits for the hint.
pub(crate) fn pod_waits_for_hints(vmi: &VirtualMachineInstance) -> bool {
    !has_topology_hints(vmi) && is_tsc_frequency_required(vmi)
}

/// One node as the hinter's filters read it (filter.go:21-41, 109-123; tsc.go:41-55).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeTsc {
    /// `metadata.name`.
    pub name: String,
    /// The `cpu-timer.node.kubevirt.io/tsc-frequency` label, as written.
    pub frequency_label: Option<String>,
    /// `kubevirt.io/schedulable: "true"` (`IsSchedulable`).
    pub schedulable: bool,
    /// Some VMI in the controller's VMI cache has `status.nodeName` = this node
    /// (`IsNodeRunningVmis`, filter.go:109-123).
    pub runs_vmis: bool,
}

impl NodeTsc {
    /// The node's name and labels; `runs_vmis` is the caller's to fill.
    pub(crate) fn from_node(node: &Node) -> Self {
        let labels = node.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        NodeTsc {
            name: node.metadata.name.clone().unwrap_or_default(),
            frequency_label: label(TSC_FREQUENCY_LABEL),
            schedulable: label(SCHEDULABLE_LABEL).as_deref() == Some("true"),
            runs_vmis: false,
        }
    }

    /// `TSCFrequencyFromNode` (tsc.go:41-55): the label as a base-10 `int64` above 0; a
    /// malformed or non-positive one excludes the node (KubeVirt logs it).
    fn frequency(&self) -> Result<Option<i64>, String> {
        let Some(text) = &self.frequency_label else {
            return Ok(None);
        };
        match text.parse::<i64>() {
            Err(e) => Err(format!(
                "tsc frequency on node {} is not an int: {e}",
                self.name
            )),
            Ok(f) if f <= 0 => Err(format!(
                "tsc frequency on node {} is invalid: expected a frequency bigger than 0, but got {f}",
                self.name
            )),
            Ok(f) => Ok(Some(f)),
        }
    }
}

/// What the hinter reads besides the VMI: the KubeVirt CR's
/// `developerConfiguration.minimumClusterTSCFrequency` and the node cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopologyState {
    /// `GetMinimumClusterTSCFrequency` (virt-config.go:310-312).
    pub minimum_cluster_tsc_frequency: Option<i64>,
    /// The controller's node cache (empty when nodes cannot be listed: as a node informer that
    /// never synced leaves KubeVirt's hinter).
    pub nodes: Vec<NodeTsc>,
}

/// `LowestTSCFrequencyOnCluster` (hinter.go:49-67): the CR's minimum when set (an error when it
/// is not above 0), else the lowest valid frequency label among the nodes that are schedulable
/// or run a VMI (`LowestTSCFrequency`, tsc.go:27-39), 0 when none has one. `excluded`: the
/// nodes whose label is invalid, with why (KubeVirt logs them).
pub(crate) fn lowest_tsc_frequency(
    state: &TopologyState,
    excluded: &mut Vec<String>,
) -> Result<i64, String> {
    if let Some(min) = state.minimum_cluster_tsc_frequency {
        return if min > 0 {
            Ok(min)
        } else {
            Err(format!(
                "the configured minimumClusterTSCFrequency must be greater 0, but got {min}"
            ))
        };
    }
    let mut lowest: Option<i64> = None;
    for node in &state.nodes {
        let freq = match node.frequency() {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(e) => {
                excluded.push(e);
                continue;
            }
        };
        if node.schedulable || node.runs_vmis {
            lowest = Some(lowest.map_or(freq, |l| l.min(freq)));
        }
    }
    Ok(lowest.unwrap_or(0))
}

/// What `addTopologyHints` (lifecycle.go:615-626) does for a VMI whose status has no hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HintStep {
    /// `TopologyHintsForVMI` returns no hint and no error: no TSC requirement, or not `amd64`
    /// (hinter.go:35-38).
    NotNeeded,
    /// Write `status.topologyHints.tscFrequency` (hinter.go:45).
    Set(i64),
    /// The frequency cannot be determined and the VMI needs it to boot: Warning event and sync
    /// error `FailedGatherhingClusterTopologyHints`, `updateStatus` stops (lifecycle.go:617-619).
    Fail(String),
    /// It cannot be determined but the VMI needs it only to migrate: no hint, no error
    /// (lifecycle.go:617, 620) — its pod then keeps waiting (lifecycle.go:106-109).
    Skip(String),
}

/// `TopologyHintsForVMI` (hinter.go:34-47) as `addTopologyHints` uses it (lifecycle.go:615-626).
pub(crate) fn hint_step(
    vmi: &VirtualMachineInstance,
    state: &TopologyState,
    excluded: &mut Vec<String>,
) -> HintStep {
    let requirement = tsc_requirement(vmi);
    if requirement == TscRequirement::NotRequired || !is_amd64(vmi) {
        return HintStep::NotNeeded;
    }
    match lowest_tsc_frequency(state, excluded) {
        Ok(f) => HintStep::Set(f),
        Err(e) => {
            let message =
                format!("failed to determine the lowest tsc frequency on the cluster: {e}");
            if requirement == TscRequirement::RequiredForBoot {
                HintStep::Fail(message)
            } else {
                HintStep::Skip(message)
            }
        }
    }
}

/// The node as the controller's cache keeps it: name, UID, resourceVersion and the two labels
/// the hinter reads; the rest of the Node (spec, status, annotations, other labels) is dropped.
pub(crate) fn node_for_cache(node: &mut Node) {
    let keep = |k: &str| k == TSC_FREQUENCY_LABEL || k == SCHEDULABLE_LABEL;
    let labels: BTreeMap<String, String> = node
        .metadata
        .labels
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| keep(k))
        .collect();
    let meta = std::mem::take(&mut node.metadata);
    *node = Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            labels: (!labels.is_empty()).then_some(labels),
            ..Default::default()
        },
        ..Default::default()
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(spec: serde_json::Value, status: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "v", "namespace": "ns"},
            "spec": spec, "status": status}))
        .unwrap()
    }

    fn invtsc(policy: &str) -> VirtualMachineInstance {
        vmi(
            json!({"architecture": "amd64", "domain": {"devices": {},
                "cpu": {"features": [{"name": "invtsc", "policy": policy}]}}}),
            json!({}),
        )
    }

    fn reenlightenment() -> VirtualMachineInstance {
        vmi(
            json!({"architecture": "amd64", "domain": {"devices": {},
                "features": {"hyperv": {"reenlightenment": {"enabled": true}}}}}),
            json!({}),
        )
    }

    fn node(name: &str, freq: &str, schedulable: bool) -> NodeTsc {
        NodeTsc {
            name: name.into(),
            frequency_label: Some(freq.into()),
            schedulable,
            runs_vmis: false,
        }
    }

    /// tsc_test.go / hinter_test.go: `invtsc` required or forced needs it to boot, the
    /// reenlightenment to migrate, anything else not at all; only `amd64` asks for it.
    #[test]
    fn requirement_follows_invtsc_and_reenlightenment() {
        assert_eq!(
            tsc_requirement(&invtsc("require")),
            TscRequirement::RequiredForBoot
        );
        assert_eq!(
            tsc_requirement(&invtsc("force")),
            TscRequirement::RequiredForBoot
        );
        assert_eq!(
            tsc_requirement(&invtsc("optional")),
            TscRequirement::NotRequired
        );
        assert_eq!(
            tsc_requirement(&invtsc("disable")),
            TscRequirement::NotRequired
        );
        assert_eq!(
            tsc_requirement(&reenlightenment()),
            TscRequirement::RequiredForMigration
        );
        assert!(is_tsc_frequency_required(&reenlightenment()));
        let mut arm = invtsc("require");
        arm.spec.architecture = Some("arm64".into());
        assert!(!is_tsc_frequency_required(&arm));
        let state = TopologyState {
            nodes: vec![node("n1", "1234", true)],
            ..Default::default()
        };
        assert_eq!(hint_step(&arm, &state, &mut vec![]), HintStep::NotNeeded);
        arm.spec.architecture = None;
        assert!(!is_tsc_frequency_required(&arm));
    }

    /// hinter_test.go "should return the lowest TSC frequency": invalid labels are skipped,
    /// the lowest valid one of schedulable nodes wins, a minimum in the CR overrides it.
    #[test]
    fn lowest_frequency_of_usable_nodes_or_the_cr_minimum() {
        let mut state = TopologyState {
            minimum_cluster_tsc_frequency: None,
            nodes: vec![
                node("bad", "fast", true),
                node("zero", "0", true),
                node("a", "2900000000", true),
                node("b", "2100000000", true),
                node("c", "3300000000", false),
            ],
        };
        let mut excluded = Vec::new();
        assert_eq!(
            lowest_tsc_frequency(&state, &mut excluded),
            Ok(2_100_000_000)
        );
        assert_eq!(excluded.len(), 2, "{excluded:?}");
        assert!(
            excluded[0].contains("node bad is not an int"),
            "{excluded:?}"
        );
        // A lower node that is neither schedulable nor running a VMI does not count ...
        state.nodes.push(node("cordoned", "1000", false));
        assert_eq!(lowest_tsc_frequency(&state, &mut vec![]), Ok(2_100_000_000));
        // ... one running a VMI does (filter.go:109-123).
        state.nodes.last_mut().unwrap().runs_vmis = true;
        assert_eq!(lowest_tsc_frequency(&state, &mut vec![]), Ok(1000));
        state.minimum_cluster_tsc_frequency = Some(2_500_000_000);
        assert_eq!(lowest_tsc_frequency(&state, &mut vec![]), Ok(2_500_000_000));
        state.minimum_cluster_tsc_frequency = Some(0);
        let e = lowest_tsc_frequency(&state, &mut vec![]).unwrap_err();
        assert_eq!(
            e,
            "the configured minimumClusterTSCFrequency must be greater 0, but got 0"
        );
    }

    /// No node with a frequency and no minimum: hint 0, not an error (hinter.go:58-66), so
    /// the pod is created without the TSC selector.
    #[test]
    fn no_frequency_anywhere_is_a_zero_hint() {
        let state = TopologyState::default();
        assert_eq!(
            hint_step(&invtsc("require"), &state, &mut vec![]),
            HintStep::Set(0)
        );
    }

    /// vmi_test.go "topology hints": a bad minimum fails a VMI that needs the frequency to
    /// boot, and is skipped for one that needs it only to migrate.
    #[test]
    fn a_bad_minimum_fails_boot_and_skips_migration() {
        let state = TopologyState {
            minimum_cluster_tsc_frequency: Some(-5),
            nodes: vec![],
        };
        let msg = "failed to determine the lowest tsc frequency on the cluster: the configured minimumClusterTSCFrequency must be greater 0, but got -5";
        assert_eq!(
            hint_step(&invtsc("require"), &state, &mut vec![]),
            HintStep::Fail(msg.into())
        );
        assert_eq!(
            hint_step(&reenlightenment(), &state, &mut vec![]),
            HintStep::Skip(msg.into())
        );
    }

    #[test]
    fn the_pod_waits_only_while_the_status_has_no_hint() {
        let mut v = invtsc("require");
        assert!(pod_waits_for_hints(&v));
        v.status = serde_json::from_value(json!({"topologyHints": {"tscFrequency": 0}})).unwrap();
        assert!(!pod_waits_for_hints(&v));
        v.status = serde_json::from_value(json!({"topologyHints": null})).unwrap();
        assert!(pod_waits_for_hints(&v));
    }

    #[test]
    fn the_cached_node_keeps_only_what_the_hinter_reads() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n", "uid": "u", "resourceVersion": "7",
                "annotations": {"a": "b"},
                "labels": {TSC_FREQUENCY_LABEL: "2000", SCHEDULABLE_LABEL: "true", "other": "x"}},
            "spec": {"unschedulable": true},
            "status": {"capacity": {"cpu": "4"}}
        }))
        .unwrap();
        node_for_cache(&mut n);
        assert_eq!(
            serde_json::to_value(&n.metadata).unwrap(),
            json!({"name": "n", "uid": "u", "resourceVersion": "7",
                "labels": {TSC_FREQUENCY_LABEL: "2000", SCHEDULABLE_LABEL: "true"}})
        );
        assert!(n.spec.is_none() && n.status.is_none());
        assert_eq!(NodeTsc::from_node(&n), node("n", "2000", true));
    }
}
