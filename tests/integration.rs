//! The integration tests, compiled into one test binary (`cargo test --test integration`).
//!
//! Each file under `tests/` is one module here, named after the file, so
//! `cargo test --test integration split_brain::` runs what `tests/split_brain.rs` holds. One
//! binary rather than one per file: each test binary links the whole library and its
//! dependencies (about 120 MB in the dev profile), and 37 of them filled the disk of a CI
//! machine before the tests ran. `tests/common/` is the support they share.

#[macro_use]
mod common;

mod api_roundtrip;
mod backend_storage_e2e;
mod cli_basics;
mod cli_conventions;
mod cli_on_both_servers;
mod client_rate_limit;
mod controller_e2e;
mod controller_events;
mod controller_reliability;
mod controller_writes;
mod deploy_manifests;
mod explain_overhead_cli;
mod explain_overhead_cluster;
mod fault_soak;
mod informer_relist;
mod inspect_cli;
mod inspect_replay_cli;
mod inspect_tui_e2e;
mod instancetype_e2e;
mod interface_hotplug_e2e;
mod krew_manifest;
mod kubevirt_config;
mod launcher_pod_e2e;
mod launcher_proptest;
mod launcher_render;
mod leader_election;
mod lifecycle_cli;
mod live_update_e2e;
mod lost_events;
mod memory_dump_e2e;
mod module_graph;
mod pvc_status;
mod rbac;
mod readme;
mod reference_conformance;
mod reference_generated;
mod reference_lifecycle;
mod reference_virt_api;
mod replay_e2e;
mod run_controller_cli;
mod self_contained;
mod server_conformance;
mod shadow;
mod sim_admin;
mod sim_admission;
mod sim_crud;
mod sim_faults;
mod sim_fixes;
mod sim_gc;
mod sim_kubectl;
mod sim_lost_events;
mod sim_nodes;
mod sim_nodes_cli;
mod sim_pvc;
mod sim_watch;
mod split_brain;
mod topology_hints_e2e;
mod vm_stale_copy;
mod volume_hotplug_e2e;
mod volume_snapshot_status;
mod whatif_cli;
mod why_e2e;
