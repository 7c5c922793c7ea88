//! `inspect`: what the controller is thinking about one VM (or the whole fleet).
//!
//! Data flows one way: gather (API server + the controller's `/debug/state?key=` or KubeVirt's
//! metrics) → [`model::Inspection`] → render (`-o json|yaml`, plain text, the terminal UI).

pub mod model;
pub mod tui;
