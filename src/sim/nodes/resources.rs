//! Pod resource arithmetic: effective requests (for the scheduler's fit check) and the QoS class.
//!
//! Sources: kubernetes pkg/api/v1/resource/helpers.go (`PodRequests`, native sidecars included),
//! pkg/apis/core/v1/helper/qos/qos.go (`ComputePodQOS`) and the API server's defaulting of
//! container requests from limits (pkg/apis/core/v1/defaults.go: `SetDefaults_Pod`).
//! Unparseable quantities count as zero (they would have been rejected by a real API server).

use super::quantity::{Milli, parse_quantity};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// Resource name → amount in milli-units.
pub(crate) type ResourceList = BTreeMap<String, Milli>;

/// QoS class `Guaranteed`.
pub(crate) const QOS_GUARANTEED: &str = "Guaranteed";
/// QoS class `Burstable`.
pub(crate) const QOS_BURSTABLE: &str = "Burstable";
/// QoS class `BestEffort`.
pub(crate) const QOS_BEST_EFFORT: &str = "BestEffort";

fn to_list(map: Option<&BTreeMap<String, Quantity>>) -> ResourceList {
    map.into_iter()
        .flatten()
        .filter_map(|(k, q)| parse_quantity(&q.0).ok().map(|m| (k.clone(), m)))
        .collect()
}

/// A container's limits.
pub(crate) fn container_limits(c: &Container) -> ResourceList {
    to_list(c.resources.as_ref().and_then(|r| r.limits.as_ref()))
}

/// A container's requests after API-server defaulting: a resource with a limit and no request
/// gets request = limit.
pub(crate) fn container_requests(c: &Container) -> ResourceList {
    let mut requests = to_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    for (name, limit) in container_limits(c) {
        requests.entry(name).or_insert(limit);
    }
    requests
}

fn add_into(total: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        let entry = total.entry(k.clone()).or_default();
        entry.0 += v.0;
    }
}

fn max_into(total: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        let entry = total.entry(k.clone()).or_default();
        if v.0 > entry.0 {
            *entry = *v;
        }
    }
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`).
pub(crate) fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Effective requests of a pod, as the scheduler computes them: sum of containers plus native
/// sidecars, at least the peak of any regular init container (plus the sidecars started before
/// it), plus `spec.overhead`.
pub(crate) fn pod_requests(spec: &PodSpec) -> ResourceList {
    let mut requests = ResourceList::new();
    for c in &spec.containers {
        add_into(&mut requests, &container_requests(c));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_requests(c);
        if is_restartable_init(c) {
            add_into(&mut requests, &own);
            add_into(&mut sidecars, &own);
            max_into(&mut init_peak, &sidecars);
        } else {
            let mut during = own;
            add_into(&mut during, &sidecars);
            max_into(&mut init_peak, &during);
        }
    }
    max_into(&mut requests, &init_peak);
    add_into(&mut requests, &to_list(spec.overhead.as_ref()));
    requests
}

/// The pod's QoS class (`Guaranteed`, `Burstable` or `BestEffort`), computed from cpu and memory
/// of all containers and init containers like `ComputePodQOS`.
pub(crate) fn qos_class(spec: &PodSpec) -> &'static str {
    const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];
    let mut requests = ResourceList::new();
    let mut limits = ResourceList::new();
    let mut guaranteed = true;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        for (name, q) in container_requests(c) {
            if QOS_RESOURCES.contains(&name.as_str()) && q.0 > 0 {
                requests.entry(name).or_default().0 += q.0;
            }
        }
        let mut found = 0;
        for (name, q) in container_limits(c) {
            if QOS_RESOURCES.contains(&name.as_str()) && q.0 > 0 {
                found += 1;
                limits.entry(name).or_default().0 += q.0;
            }
        }
        if found < QOS_RESOURCES.len() {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QOS_BEST_EFFORT;
    }
    if guaranteed {
        guaranteed = requests
            .iter()
            .all(|(name, req)| limits.get(name) == Some(req));
    }
    if guaranteed && requests.len() == limits.len() {
        QOS_GUARANTEED
    } else {
        QOS_BURSTABLE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ResourceRequirements;

    fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let list = |items: &[(&str, &str)]| {
            (!items.is_empty()).then(|| {
                items
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        Container {
            name: name.to_string(),
            resources: Some(ResourceRequirements {
                requests: list(req),
                limits: list(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        }
    }

    /// A container's `(name, requests, limits)`.
    type Spec<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [(&'a str, &'a str)]);

    #[test]
    fn qos_class_follows_requests_and_limits() {
        let gi = &[("cpu", "1"), ("memory", "1Gi")][..];
        let cases: [(&str, &[Spec], &[Spec], &str); 6] = [
            (
                "no cpu or memory",
                &[("compute", &[], &[("devices.kubevirt.io/kvm", "1")])],
                &[],
                "BestEffort",
            ),
            (
                "limits equal requests in every container (b's requests defaulted from limits)",
                &[
                    ("a", gi, &[("cpu", "1000m"), ("memory", "1024Mi")]),
                    ("b", &[], &[("cpu", "100m"), ("memory", "64Mi")]),
                ],
                &[],
                "Guaranteed",
            ),
            (
                "a container lacks limits",
                &[("a", gi, gi), ("b", &[("cpu", "100m")], &[])],
                &[],
                "Burstable",
            ),
            (
                "a request differs from its limit",
                &[("a", &[("cpu", "500m"), ("memory", "1Gi")], gi)],
                &[],
                "Burstable",
            ),
            (
                "a virt-launcher pod: memory request, no limits",
                &[(
                    "compute",
                    &[("cpu", "100m"), ("memory", "300Mi")],
                    &[("devices.kubevirt.io/kvm", "1")],
                )],
                &[(
                    "guest-console-log",
                    &[("cpu", "5m"), ("memory", "35M")],
                    &[("cpu", "15m"), ("memory", "60M")],
                )],
                "Burstable",
            ),
            (
                "init containers count for Guaranteed",
                &[("a", &[], gi)],
                &[("init", &[("cpu", "10m")], &[])],
                "Burstable",
            ),
        ];
        let build = |list: &[Spec]| -> Vec<Container> {
            list.iter()
                .map(|(name, req, lim)| container(name, req, lim))
                .collect()
        };
        for (case, containers, init, want) in cases {
            let s = spec(build(containers), build(init));
            assert_eq!(qos_class(&s), want, "{case}");
        }
    }

    #[test]
    fn pod_requests_add_sidecars_and_take_init_peak() {
        let mut sidecar = container("sidecar", &[("cpu", "100m")], &[]);
        sidecar.restart_policy = Some("Always".into());
        let s = spec(
            vec![container(
                "a",
                &[("cpu", "1"), ("memory", "1Gi")],
                &[("devices.kubevirt.io/kvm", "1")],
            )],
            vec![sidecar, container("init", &[("cpu", "2")], &[])],
        );
        let r = pod_requests(&s);
        // max(1 + 0.1, 2 + 0.1) = 2.1 CPUs.
        assert_eq!(r.get("cpu"), Some(&Milli(2100)));
        assert_eq!(r.get("memory"), Some(&Milli(1024 * 1024 * 1024 * 1000)));
        // Extended resource requested through its limit.
        assert_eq!(r.get("devices.kubevirt.io/kvm"), Some(&Milli(1000)));
    }
}
