//! The VM and VMI controllers: each a pure decision (snapshot → intended actions) plus a thin
//! executor, and what they share (context, informer handlers, the manager).

pub mod context;
pub mod handlers;
pub mod manager;
pub mod vm;
pub mod vmi;
