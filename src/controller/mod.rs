//! The VM and VMI controllers: each a pure decision (snapshot → intended actions) plus a thin
//! executor, and what they share (context, informer handlers, the manager).

pub(crate) mod cluster_config;
pub(crate) mod common;
pub mod context;
pub(crate) mod debug_state;
mod discovery;
pub(crate) mod handlers;
pub(crate) mod instancetype_cache;
pub mod manager;
pub(crate) mod storage_cache;
pub mod vm;
pub mod vmi;

use std::sync::Arc;

/// The VM and VMI reconcilers, for [`manager::Manager::start`].
pub fn reconcilers() -> (Arc<dyn manager::Reconciler>, Arc<dyn manager::Reconciler>) {
    (
        Arc::new(vm::executor::VmReconciler),
        Arc::new(vmi::executor::VmiReconciler),
    )
}
