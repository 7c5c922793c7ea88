//! `start`, `stop` and `restart` of a VM as KubeVirt's virt-api carries them out
//! (pkg/virt-api/rest/lifecycle.go): [`decide`] is the handlers' decision (run strategy × verb
//! → JSON patches or KubeVirt's error), [`request`] sends a request through virt-api's
//! subresource endpoint or, where the cluster has no virt-api, makes the same writes itself.

pub(crate) mod decide;
pub(crate) mod request;

pub use decide::{Options, Plan, Refusal, Verb, Write};
pub(crate) use request::{Outcome, Request, Route, send};
