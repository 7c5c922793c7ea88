//! `inspect`: what the controller is thinking about one VM (or the whole fleet).
//!
//! Data flows one way: gather (API server + the controller's `/debug/state?key=` or KubeVirt's
//! metrics, [`gather`]) → analyse with the controllers' own pure functions ([`analyze`]) →
//! [`model::Inspection`] → render (`-o json|yaml`, plain text [`text`], the terminal UI).

pub mod analyze;
mod diagnose;
pub mod gather;
pub mod model;
pub mod overhead;
mod settings_check;
#[cfg(test)]
pub(crate) mod test_support;
pub mod text;
pub mod tui;
pub mod whatif;

pub use gather::{GatherError, GatherOptions, gather_fleet, gather_vm};
