//! The controllers of virt-controller, each as a pure decision (snapshot → intended actions)
//! plus the names KubeVirt uses for them.

pub mod vmi;
