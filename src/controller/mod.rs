//! The controllers: each turns a snapshot of cached state into a list of intended actions
//! (a pure decision), which a thin executor applies against the API server.

pub mod vm;
pub mod vmi;
