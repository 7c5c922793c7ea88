//! The pods as the simulated nodes cache them: only what the scheduler, the kubelet and
//! virt-handler read.
//!
//! They read the metadata (names, UID, labels, annotations, owners, deletion), and of the spec
//! the node name, the scheduling fields (`schedulerName`, node selector, affinity,
//! tolerations), `overhead`, the readiness gates, `restartPolicy`, the grace period, and of
//! each container and init container its name, image, resources and `restartPolicy` (native
//! sidecars); of the status everything (the kubelet writes it back whole). They never read the
//! volumes, nor a container's command, arguments, environment, mounts, devices, ports, probes,
//! security context or lifecycle hooks, which are most of a virt-launcher pod's spec: those are
//! dropped when a pod enters the cache ([`for_node_cache`]).
//!
//! Nothing is lost on the server: the simulators write a pod only through `pods/status`, which
//! takes the status (and on a real API server the labels and annotations) from the body and
//! keeps the stored spec (`registry/core/pod` status strategy; the embedded server,
//! `src/sim/store.rs` `Sub::Status`), and through `pods/binding`, whose fallback update reads
//! the pod afresh (`bind_pod`). `metadata.managedFields` is dropped too: the simulators do not
//! read it, and a status update without it keeps the stored one.
//!
//! Heap per cached launcher pod before and after: `benches/cache_memory.rs`, docs/performance.md.

use k8s_openapi::api::core::v1::{Container, Pod};

/// `pod` with only what the simulated nodes read (module docs).
pub fn for_node_cache(mut pod: Pod) -> Pod {
    pod.metadata.managed_fields = None;
    if let Some(spec) = pod.spec.as_mut() {
        spec.volumes = None;
        spec.ephemeral_containers = None;
        spec.containers = std::mem::take(&mut spec.containers)
            .into_iter()
            .map(narrow_container)
            .collect();
        spec.init_containers = spec
            .init_containers
            .take()
            .map(|cs| cs.into_iter().map(narrow_container).collect());
    }
    pod
}

/// A container with its name, image, resources and `restartPolicy` only.
fn narrow_container(c: Container) -> Container {
    Container {
        name: c.name,
        image: c.image,
        resources: c.resources,
        restart_policy: c.restart_policy,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterSettings;
    use crate::controller::vmi::executor::render_pod_with;
    use crate::launcher::resources::NamespaceContext;

    fn launcher() -> Pod {
        let vmi = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}
        }))
        .unwrap();
        let settings = ClusterSettings::default();
        render_pod_with(&settings, &NamespaceContext::default(), &vmi).unwrap()
    }

    /// What the simulators read is kept as it was; the volumes and the containers' other
    /// fields are gone.
    #[test]
    fn the_cached_pod_keeps_what_the_simulators_read() {
        let mut pod = launcher();
        pod.spec.as_mut().unwrap().node_name = Some("sim-node-0".into());
        pod.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let cached = for_node_cache(pod.clone());
        assert_eq!(cached.metadata, pod.metadata);
        assert_eq!(cached.status, pod.status);
        let (spec, whole) = (cached.spec.unwrap(), pod.spec.unwrap());
        assert_eq!(spec.volumes, None);
        assert!(whole.volumes.is_some_and(|v| !v.is_empty()));
        assert_eq!(
            (&spec.node_name, &spec.tolerations, &spec.affinity),
            (&whole.node_name, &whole.tolerations, &whole.affinity)
        );
        assert_eq!(
            (&spec.readiness_gates, &spec.overhead, &spec.scheduler_name),
            (
                &whole.readiness_gates,
                &whole.overhead,
                &whole.scheduler_name
            )
        );
        let pairs = spec.containers.iter().zip(&whole.containers).chain(
            spec.init_containers
                .iter()
                .flatten()
                .zip(whole.init_containers.iter().flatten()),
        );
        for (c, w) in pairs {
            assert_eq!(
                (&c.name, &c.image, &c.resources, &c.restart_policy),
                (&w.name, &w.image, &w.resources, &w.restart_policy)
            );
            assert_eq!(
                (&c.command, &c.env, &c.volume_mounts),
                (&None, &None, &None)
            );
        }
        assert!(
            whole.containers[0].command.is_some(),
            "the launcher has a command"
        );
    }

    /// The scheduler's and the kubelet's requests of the pod are the same on the cached copy.
    #[test]
    fn node_usage_and_readiness_read_the_same_on_the_cached_copy() {
        let pod = launcher();
        let cached = for_node_cache(pod.clone());
        assert_eq!(
            super::super::resources::pod_requests(cached.spec.as_ref().unwrap()),
            super::super::resources::pod_requests(pod.spec.as_ref().unwrap())
        );
    }
}
