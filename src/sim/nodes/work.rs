//! What the node loop has to look at on its next pass, and the indexes it keeps up to date on
//! every cache change instead of rebuilding them per pass.
//!
//! Every decision of the simulated components is a function of one object and a few things
//! around it: a pod's kubelet and PodGC steps read only the pod; a VMI's virt-handler step
//! reads the VMI and its launcher pods; a pending pod's scheduling reads the pod, the Nodes
//! and every node's usage. So a pass only needs to decide again for
//!
//! - the objects that changed since the last pass (watch events, responses to our own writes),
//!   and the VMIs whose launcher pods changed;
//! - the objects whose timer is due (kubelet delay, grace periods, virt-handler delay, retry
//!   after a failed write): [`WorkSet`] keeps them in a due-time order;
//! - every pending pod when the usage of any node or the Nodes changed ([`PodIndex::epoch`]):
//!   capacity freed by another pod, a node added, or a new unschedulable message;
//! - everything after a change the loop cannot attribute to objects (a handle call such as
//!   a fault or a delay change, a relist): [`WorkSet::full`].
//!
//! Any other object would get the same decision as last time, so skipping it changes nothing.

use super::resources::ResourceList;
use super::scheduler::{NodeUsage, pod_usage, wants_scheduling};
use super::virt_handler::launcher_owner_uids;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use tokio::time::Instant;

/// An object a timer is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Target {
    /// A pod, by `namespace/name`.
    Pod(String),
    /// A VirtualMachineInstance, by `namespace/name`.
    Vmi(String),
}

/// Objects to decide for on the next pass.
#[derive(Debug, Default)]
pub(super) struct WorkSet {
    /// Pod keys changed (or due) since the last pass.
    pub pods: BTreeSet<String>,
    /// VMI keys changed (or due) since the last pass.
    pub vmis: BTreeSet<String>,
    /// Timers: when, and for what.
    due: BTreeSet<(Instant, Target)>,
    /// Decide for everything on the next pass.
    pub full: bool,
}

impl WorkSet {
    /// Decide for the pod at `key` at `when` (at once if it is already past).
    pub(crate) fn pod_at(&mut self, key: &str, when: Instant) {
        self.due.insert((when, Target::Pod(key.to_string())));
    }

    /// Decide for the VMI at `key` at `when`.
    pub(crate) fn vmi_at(&mut self, key: &str, when: Instant) {
        self.due.insert((when, Target::Vmi(key.to_string())));
    }

    /// Move the timers due at `now` into the sets.
    pub(crate) fn take_due(&mut self, now: Instant) {
        while let Some(first) = self.due.first() {
            if first.0 > now {
                break;
            }
            let Some((_, target)) = self.due.pop_first() else {
                break;
            };
            match target {
                Target::Pod(key) => self.pods.insert(key),
                Target::Vmi(key) => self.vmis.insert(key),
            };
        }
    }

    /// When the next pass is needed: `now` when something is waiting already, else the
    /// earliest timer.
    pub(crate) fn next_wake(&self, now: Instant) -> Option<Instant> {
        if self.full || !self.pods.is_empty() || !self.vmis.is_empty() {
            return Some(now);
        }
        self.due.first().map(|(t, _)| *t)
    }

    /// The pods and VMIs of the next pass: at most `budget` of each, in key order; the rest
    /// stay for the passes after it ([`WorkSet::next_wake`] is then `now`).
    pub(crate) fn take_batch(&mut self, budget: usize) -> (BTreeSet<String>, BTreeSet<String>) {
        (
            take_first(&mut self.pods, budget),
            take_first(&mut self.vmis, budget),
        )
    }

    /// Number of timers set (for tests).
    #[cfg(test)]
    pub(crate) fn timers(&self) -> usize {
        self.due.len()
    }
}

/// The first `n` keys of `set`, taken out of it.
fn take_first(set: &mut BTreeSet<String>, n: usize) -> BTreeSet<String> {
    match set.iter().nth(n).cloned() {
        Some(first_left) => {
            let rest = set.split_off(&first_left);
            std::mem::replace(set, rest)
        }
        None => std::mem::take(set),
    }
}

/// What one cached pod contributes to the indexes.
#[derive(Debug, Default, Clone, PartialEq)]
struct PodEntry {
    /// VMI UIDs it may be the launcher of.
    owners: Vec<String>,
    /// Node and requests it counts for ([`pod_usage`]).
    usage: Option<(String, ResourceList)>,
    /// `Some(creationTimestamp)` while the scheduler should place it.
    pending: Option<Option<Time>>,
}

/// Indexes over the cached pods, updated on every change of one pod ([`PodIndex::update`]).
#[derive(Debug, Default)]
pub(super) struct PodIndex {
    entries: HashMap<String, PodEntry>,
    /// Pod keys by the VMI UID they may belong to (kept in key order, as a scan would find
    /// them).
    by_vmi: HashMap<String, BTreeSet<String>>,
    /// Usage per node name, as [`super::scheduler::node_usage`] over the effective pods.
    usage: BTreeMap<String, NodeUsage>,
    /// Pods the scheduler should place, in the order it takes them: creation timestamp, key.
    pending: BTreeSet<(Option<Time>, String)>,
    /// Bumped whenever [`PodIndex::usage`] changes or the Nodes do ([`PodIndex::nodes_changed`]).
    pub epoch: u64,
}

impl PodIndex {
    /// Bring the entry of `key` in line with `pod` (`None`: gone). `bound_by_us` is the node we
    /// bound the pod to when its cached copy does not show the binding yet (it already counts
    /// on that node and is not pending). Returns the VMI UIDs whose launcher pods changed
    /// (the pod's owners before and after).
    pub(crate) fn update(
        &mut self,
        key: &str,
        pod: Option<&Pod>,
        bound_by_us: Option<&str>,
    ) -> Vec<String> {
        let new = pod.map(|p| PodEntry {
            owners: launcher_owner_uids(p).map(str::to_string).collect(),
            usage: pod_usage(p, bound_by_us),
            pending: (bound_by_us.is_none() && wants_scheduling(p))
                .then(|| p.metadata.creation_timestamp.clone()),
        });
        let old = match &new {
            Some(e) => self.entries.insert(key.to_string(), e.clone()),
            None => self.entries.remove(key),
        }
        .unwrap_or_default();
        let new = new.unwrap_or_default();
        for uid in &old.owners {
            if !new.owners.contains(uid)
                && let Some(keys) = self.by_vmi.get_mut(uid)
            {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_vmi.remove(uid);
                }
            }
        }
        for uid in &new.owners {
            self.by_vmi
                .entry(uid.clone())
                .or_default()
                .insert(key.to_string());
        }
        if old.usage != new.usage {
            if let Some((node, requests)) = &old.usage
                && let Some(u) = self.usage.get_mut(node)
            {
                u.remove(requests);
                if u.is_empty() {
                    self.usage.remove(node);
                }
            }
            if let Some((node, requests)) = &new.usage {
                self.usage.entry(node.clone()).or_default().add(requests);
            }
            self.epoch += 1;
        }
        if old.pending != new.pending {
            if let Some(ts) = old.pending {
                self.pending.remove(&(ts, key.to_string()));
            }
            if let Some(ts) = new.pending {
                self.pending.insert((ts, key.to_string()));
            }
        }
        let mut owners = old.owners;
        for uid in new.owners {
            if !owners.contains(&uid) {
                owners.push(uid);
            }
        }
        owners
    }

    /// The Nodes changed: pending pods must be placed again.
    pub(crate) fn nodes_changed(&mut self) {
        self.epoch += 1;
    }

    /// Drop everything (before re-indexing a relisted cache).
    pub(crate) fn clear(&mut self) {
        let epoch = self.epoch + 1;
        *self = PodIndex {
            epoch,
            ..PodIndex::default()
        };
    }

    /// Keys of the pods that may be launchers of the VMI with this UID, in key order.
    pub(crate) fn launchers_of(&self, vmi_uid: &str) -> impl Iterator<Item = &String> {
        self.by_vmi.get(vmi_uid).into_iter().flatten()
    }

    /// Usage per node.
    pub(crate) fn usage(&self) -> &BTreeMap<String, NodeUsage> {
        &self.usage
    }

    /// Keys of the pending pods, in scheduling order.
    pub(crate) fn pending(&self) -> Vec<String> {
        self.pending.iter().map(|(_, k)| k.clone()).collect()
    }

    /// Whether the pod at `key` is pending.
    pub(crate) fn is_pending(&self, key: &str) -> bool {
        self.entries.get(key).is_some_and(|e| e.pending.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::nodes::scheduler::node_usage;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use std::time::Duration;

    #[test]
    fn a_pass_takes_at_most_its_budget_and_the_rest_waits() {
        let mut w = WorkSet::default();
        for i in 0..5 {
            w.pods.insert(format!("ns/p{i}"));
        }
        w.vmis.insert("ns/v".into());
        let now = Instant::now();
        let (pods, vmis) = w.take_batch(2);
        assert_eq!(pods.into_iter().collect::<Vec<_>>(), ["ns/p0", "ns/p1"]);
        assert_eq!(vmis.len(), 1);
        assert_eq!(w.next_wake(now), Some(now), "the rest is due at once");
        let (pods, _) = w.take_batch(2);
        assert_eq!(pods.into_iter().collect::<Vec<_>>(), ["ns/p2", "ns/p3"]);
        let (pods, vmis) = w.take_batch(2);
        assert_eq!(pods.into_iter().collect::<Vec<_>>(), ["ns/p4"]);
        assert!(vmis.is_empty());
        assert_eq!(w.next_wake(now), None);
    }

    fn pod(name: &str, node: Option<&str>, phase: &str, owner: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{name}")),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("time"),
                )),
                owner_references: owner.map(|uid| {
                    vec![OwnerReference {
                        controller: Some(true),
                        uid: uid.into(),
                        kind: "VirtualMachineInstance".into(),
                        name: "vm".into(),
                        api_version: "kubevirt.io/v1".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(str::to_string),
                containers: vec![Container {
                    name: "compute".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([
                            ("cpu".to_string(), Quantity("100m".into())),
                            ("memory".to_string(), Quantity("64Mi".into())),
                        ])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        }
    }

    fn key(p: &Pod) -> String {
        crate::api::key::key_of(p)
    }

    /// The index after a sequence of changes equals one built from the final pods at once.
    fn assert_matches_scan(index: &PodIndex, pods: &[&Pod]) {
        assert_eq!(index.usage(), &node_usage(pods.iter().copied()));
        let mut pending: Vec<String> = pods
            .iter()
            .filter(|p| wants_scheduling(p))
            .map(|p| key(p))
            .collect();
        pending.sort();
        assert_eq!(index.pending(), pending);
    }

    #[test]
    fn usage_and_pending_follow_each_pod_change() {
        let mut index = PodIndex::default();
        let a = pod("a", None, "Pending", None);
        let b = pod("b", Some("sim-node-0"), "Running", None);
        index.update(&key(&a), Some(&a), None);
        index.update(&key(&b), Some(&b), None);
        assert_matches_scan(&index, &[&a, &b]);
        assert_eq!(index.pending(), ["default/a"]);
        // a is bound by us; its cached copy does not show it yet: it counts on sim-node-1 and
        // is no longer pending.
        let before = index.epoch;
        index.update(&key(&a), Some(&a), Some("sim-node-1"));
        assert!(index.epoch > before, "usage changed");
        assert!(index.pending().is_empty());
        assert_eq!(index.usage().get("sim-node-1").map(|u| u.pods), Some(1));
        // The bound copy arrives: same usage, so no epoch change.
        let a_bound = pod("a", Some("sim-node-1"), "Pending", None);
        let before = index.epoch;
        index.update(&key(&a), Some(&a_bound), None);
        assert_eq!(index.epoch, before, "the same usage, counted once");
        assert_matches_scan(&index, &[&a_bound, &b]);
        // b ends: its capacity is freed (epoch bump, usage as if it never counted).
        let b_done = pod("b", Some("sim-node-0"), "Succeeded", None);
        let before = index.epoch;
        index.update(&key(&b), Some(&b_done), None);
        assert!(index.epoch > before);
        assert_matches_scan(&index, &[&a_bound, &b_done]);
        assert!(!index.usage().contains_key("sim-node-0"));
        // a is deleted.
        index.update(&key(&a), None, None);
        assert_matches_scan(&index, &[&b_done]);
        assert!(index.usage().is_empty());
    }

    #[test]
    fn pods_are_indexed_by_the_vmi_they_belong_to() {
        let mut index = PodIndex::default();
        let p1 = pod("p1", None, "Pending", Some("vmi-1"));
        let p0 = pod("p0", None, "Pending", Some("vmi-1"));
        assert_eq!(index.update(&key(&p1), Some(&p1), None), ["vmi-1"]);
        index.update(&key(&p0), Some(&p0), None);
        let keys: Vec<&String> = index.launchers_of("vmi-1").collect();
        assert_eq!(keys, ["default/p0", "default/p1"], "key order");
        // Re-created under the same name for another VMI: both VMIs are affected.
        let p1_other = pod("p1", None, "Pending", Some("vmi-2"));
        assert_eq!(
            index.update(&key(&p1), Some(&p1_other), None),
            ["vmi-1", "vmi-2"]
        );
        assert_eq!(index.launchers_of("vmi-1").count(), 1);
        assert_eq!(index.launchers_of("vmi-2").count(), 1);
        assert_eq!(index.update(&key(&p0), None, None), ["vmi-1"]);
        assert_eq!(index.launchers_of("vmi-1").count(), 0);
    }

    #[test]
    fn timers_fire_in_order_and_only_when_due() {
        let mut work = WorkSet::default();
        let now = Instant::now();
        assert_eq!(work.next_wake(now), None, "nothing to do");
        work.pod_at("default/late", now + Duration::from_secs(2));
        work.vmi_at("default/vm", now + Duration::from_secs(1));
        assert_eq!(work.next_wake(now), Some(now + Duration::from_secs(1)));
        work.take_due(now);
        assert!(work.pods.is_empty() && work.vmis.is_empty(), "none due yet");
        work.take_due(now + Duration::from_secs(1));
        assert_eq!(work.vmis.iter().collect::<Vec<_>>(), ["default/vm"]);
        assert!(work.pods.is_empty());
        assert_eq!(work.next_wake(now), Some(now), "a VMI waits: at once");
        work.vmis.clear();
        assert_eq!(work.next_wake(now), Some(now + Duration::from_secs(2)));
        work.take_due(now + Duration::from_secs(3));
        assert_eq!(work.pods.iter().collect::<Vec<_>>(), ["default/late"]);
        assert_eq!(work.timers(), 0);
    }
}
