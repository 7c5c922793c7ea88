//! The VM and VMI controllers and what they share.

pub mod context;
pub mod handlers;
pub mod manager;
