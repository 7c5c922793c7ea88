//! virtctl-rs: a re-implementation of KubeVirt v1.9's virt-controller plus an inspector.
//!
//! Data flows one way: informers → work queue → pure decision → executor.
//! See `docs/architecture.md`.

// Functions stay within a screen or two: the limit is clippy.toml's (150 lines).
#![warn(clippy::too_many_lines)]
#![warn(unreachable_pub)]

pub mod api;
pub mod cli;
pub mod config;
pub mod controller;
pub mod flight;
pub mod inspect;
pub mod instancetype;
pub mod kubevirt_version;
pub mod launcher;
pub mod lifecycle;
pub mod replay;
pub mod runtime;
pub mod shadow;
pub mod sim;
pub mod why;
