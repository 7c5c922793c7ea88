//! The controller runtime: names-only work queues, expectations, informers, the Lease and HTTP
//! endpoints. Nothing here knows about VMs; the controllers in `crate::controller` plug into it.

pub mod expectations;
pub mod http;
pub mod informer;
pub mod lease;
pub mod metrics;
pub mod queue;
