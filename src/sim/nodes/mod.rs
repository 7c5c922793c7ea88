//! Simulated nodes: scheduler, kubelet and virt-handler stand-ins (being written).
