//! An in-memory Lease store that enforces `resourceVersion` like the API server, with scripted
//! per-client faults, for testing leader election without a cluster.
//!
//! One [`FakeLeaseStore`] is the "API server"; each candidate gets its own [`FakeLeaseApi`]
//! handle from [`FakeLeaseStore::client`], whose faults (errors, 409s, latency, partitions)
//! affect only that candidate. A test can also play a contender by hand with
//! [`FakeLeaseStore::write_record`]. Time (latency, delays) is tokio time, so tests run on the
//! paused clock. Test code only (`#[cfg(test)]`): it is not in the binary.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::api::{LeaseApi, LeaseError};
use super::record::LeaseRecord;

/// Which call a scripted [`Fault`] applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Op {
    /// [`LeaseApi::get`].
    Get,
    /// [`LeaseApi::create`].
    Create,
    /// [`LeaseApi::replace`].
    Replace,
}

/// What happens to one scripted call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// Fail with this error without touching the store.
    Fail(LeaseError),
    /// Apply the call to the store, then report this error (the response got lost).
    FailAfterCommit(LeaseError),
    /// Wait this long (tokio time) before performing the call normally.
    Delay(Duration),
}

#[derive(Default)]
struct Store {
    leases: BTreeMap<String, Lease>,
    last_rv: u64,
}

impl Store {
    fn bump(&mut self) -> String {
        self.last_rv += 1;
        self.last_rv.to_string()
    }
}

/// The shared in-memory "API server" for Leases of one namespace.
#[derive(Clone, Default)]
pub(super) struct FakeLeaseStore {
    store: Arc<Mutex<Store>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FakeLeaseStore {
    /// An empty store.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A new client handle with its own fault plan.
    pub(crate) fn client(&self) -> FakeLeaseApi {
        FakeLeaseApi {
            store: self.clone(),
            plan: Arc::new(Mutex::new(Plan::default())),
        }
    }

    /// The stored Lease, if any.
    pub(crate) fn lease(&self, name: &str) -> Option<Lease> {
        lock(&self.store).leases.get(name).cloned()
    }

    /// The stored Lease's election record, if the Lease exists.
    pub(crate) fn record(&self, name: &str) -> Option<LeaseRecord> {
        self.lease(name)
            .map(|l| LeaseRecord::from_spec(l.spec.as_ref()))
    }

    /// Unconditionally writes `record` as the Lease's spec (creating the Lease if needed),
    /// keeping its metadata, and bumps the resourceVersion: a contender played by the test.
    pub(crate) fn write_record(&self, name: &str, record: &LeaseRecord) -> Lease {
        let mut store = lock(&self.store);
        let rv = store.bump();
        let lease = store
            .leases
            .entry(name.to_owned())
            .or_insert_with(|| Lease {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                spec: None,
            });
        lease.spec = Some(record.to_spec());
        lease.metadata.resource_version = Some(rv);
        lease.clone()
    }

    /// Unconditionally stores `lease` (by its name), bumping the resourceVersion.
    pub(crate) fn put(&self, mut lease: Lease) -> Lease {
        let mut store = lock(&self.store);
        lease.metadata.resource_version = Some(store.bump());
        let name = lease.metadata.name.clone().unwrap_or_default();
        store.leases.insert(name, lease.clone());
        lease
    }

    fn get(&self, name: &str) -> Result<Lease, LeaseError> {
        self.lease(name)
            .ok_or_else(|| LeaseError::NotFound(format!("leases \"{name}\" not found")))
    }

    fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let name = lease.metadata.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err(LeaseError::Other("lease has no metadata.name".into()));
        }
        let mut store = lock(&self.store);
        if store.leases.contains_key(&name) {
            return Err(LeaseError::Conflict(format!(
                "leases \"{name}\" already exists"
            )));
        }
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(store.bump());
        store.leases.insert(name, stored.clone());
        Ok(stored)
    }

    fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        if lease.metadata.name.as_deref() != Some(name) {
            return Err(LeaseError::Other(format!(
                "metadata.name {:?} does not match {name:?}",
                lease.metadata.name
            )));
        }
        let mut store = lock(&self.store);
        let current_rv = match store.leases.get(name) {
            None => {
                return Err(LeaseError::NotFound(format!("leases \"{name}\" not found")));
            }
            Some(current) => current.metadata.resource_version.clone(),
        };
        if let Some(rv) = &lease.metadata.resource_version
            && Some(rv) != current_rv.as_ref()
        {
            return Err(LeaseError::Conflict(format!(
                "Operation cannot be fulfilled on leases \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            )));
        }
        let mut stored = lease.clone();
        stored.metadata.resource_version = Some(store.bump());
        store.leases.insert(name.to_owned(), stored.clone());
        Ok(stored)
    }
}

#[derive(Default)]
struct Plan {
    scripted: BTreeMap<Op, VecDeque<Fault>>,
    down: bool,
    latency: Option<(StdRng, Duration)>,
    calls: BTreeMap<Op, u64>,
    conflicts: u64,
}

/// One candidate's connection to a [`FakeLeaseStore`]. Clones share the fault plan, so a test
/// keeps a clone to steer the candidate that owns the other.
#[derive(Clone)]
pub(super) struct FakeLeaseApi {
    store: FakeLeaseStore,
    plan: Arc<Mutex<Plan>>,
}

impl FakeLeaseApi {
    /// Queues `fault` for the next call of `op` (faults of one op apply in order).
    pub(crate) fn push_fault(&self, op: Op, fault: Fault) {
        lock(&self.plan)
            .scripted
            .entry(op)
            .or_default()
            .push_back(fault);
    }

    /// While `down`, every call fails with [`LeaseError::Other`] (network partition / API
    /// server outage as seen by this candidate).
    pub(crate) fn set_down(&self, down: bool) {
        lock(&self.plan).down = down;
    }

    /// Every call waits a random time in `[0, max]` before reaching the store and again before
    /// returning, drawn from a generator seeded with `seed` (deterministic interleavings).
    pub(crate) fn set_random_latency(&self, seed: u64, max: Duration) {
        lock(&self.plan).latency = Some((StdRng::seed_from_u64(seed), max));
    }

    /// How many calls of `op` this handle has received.
    pub(crate) fn calls(&self, op: Op) -> u64 {
        lock(&self.plan).calls.get(&op).copied().unwrap_or(0)
    }

    /// How many calls returned [`LeaseError::Conflict`] to this handle.
    pub(crate) fn conflicts(&self) -> u64 {
        lock(&self.plan).conflicts
    }

    async fn call<T>(
        &self,
        op: Op,
        apply: impl FnOnce(&FakeLeaseStore) -> Result<T, LeaseError>,
    ) -> Result<T, LeaseError> {
        let (fault, before, after) = {
            let mut plan = lock(&self.plan);
            *plan.calls.entry(op).or_default() += 1;
            let fault = plan.scripted.get_mut(&op).and_then(VecDeque::pop_front);
            let (before, after) = match plan.latency.as_mut() {
                Some((rng, max)) => {
                    let max = max.as_secs_f64();
                    (
                        Duration::from_secs_f64(rng.random_range(0.0..=max)),
                        Duration::from_secs_f64(rng.random_range(0.0..=max)),
                    )
                }
                None => (Duration::ZERO, Duration::ZERO),
            };
            (fault, before, after)
        };
        if !before.is_zero() {
            tokio::time::sleep(before).await;
        }
        if let Some(Fault::Delay(d)) = &fault {
            tokio::time::sleep(*d).await;
        }
        if lock(&self.plan).down {
            return Err(LeaseError::Other(
                "connection refused (fake API server unreachable)".into(),
            ));
        }
        if let Some(Fault::Fail(e)) = fault {
            if matches!(e, LeaseError::Conflict(_)) {
                lock(&self.plan).conflicts += 1;
            }
            return Err(e);
        }
        let result = apply(&self.store);
        if !after.is_zero() {
            tokio::time::sleep(after).await;
        }
        let result = match fault {
            Some(Fault::FailAfterCommit(e)) => Err(e),
            _ => result,
        };
        if matches!(result, Err(LeaseError::Conflict(_))) {
            lock(&self.plan).conflicts += 1;
        }
        result
    }
}

impl LeaseApi for FakeLeaseApi {
    async fn get(&self, name: &str) -> Result<Lease, LeaseError> {
        self.call(Op::Get, |s| s.get(name)).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.call(Op::Create, |s| s.create(lease)).await
    }

    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        self.call(Op::Replace, |s| s.replace(name, lease)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn lease(name: &str) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn enforces_resource_version_and_existence() {
        let store = FakeLeaseStore::new();
        let api = store.client();
        assert!(matches!(api.get("l").await, Err(LeaseError::NotFound(_))));
        assert!(matches!(
            api.replace("l", &lease("l")).await,
            Err(LeaseError::NotFound(_))
        ));
        let created = api.create(&lease("l")).await;
        let created = created.unwrap_or_else(|e| panic!("create: {e}"));
        assert!(matches!(
            api.create(&lease("l")).await,
            Err(LeaseError::Conflict(_))
        ));
        let updated = api.replace("l", &created).await;
        let updated = updated.unwrap_or_else(|e| panic!("replace: {e}"));
        assert_ne!(
            updated.metadata.resource_version,
            created.metadata.resource_version
        );
        // Stale resourceVersion → 409.
        assert!(matches!(
            api.replace("l", &created).await,
            Err(LeaseError::Conflict(_))
        ));
        assert_eq!(api.calls(Op::Replace), 3);
        assert_eq!(api.conflicts(), 2);
        assert_eq!(api.calls(Op::Create), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn scripted_faults_apply_per_client_and_in_order() {
        let store = FakeLeaseStore::new();
        let a = store.client();
        let b = store.client();
        a.push_fault(Op::Create, Fault::Fail(LeaseError::Other("boom".into())));
        a.push_fault(
            Op::Create,
            Fault::FailAfterCommit(LeaseError::Other("lost reply".into())),
        );
        assert_eq!(
            a.create(&lease("l")).await.err(),
            Some(LeaseError::Other("boom".into()))
        );
        assert!(store.lease("l").is_none());
        assert_eq!(
            a.create(&lease("l")).await.err(),
            Some(LeaseError::Other("lost reply".into()))
        );
        assert!(store.lease("l").is_some(), "committed despite the error");
        b.set_down(true);
        assert!(matches!(b.get("l").await, Err(LeaseError::Other(_))));
        assert!(a.get("l").await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn delays_use_tokio_time() {
        let store = FakeLeaseStore::new();
        let a = store.client();
        a.push_fault(Op::Get, Fault::Delay(Duration::from_secs(30)));
        let start = tokio::time::Instant::now();
        let _ = a.get("l").await;
        assert_eq!(start.elapsed(), Duration::from_secs(30));
    }

    #[test]
    fn write_record_upserts_and_bumps_version() {
        let store = FakeLeaseStore::new();
        let rec = LeaseRecord {
            holder_identity: "other".into(),
            lease_duration_seconds: 15,
            ..LeaseRecord::default()
        };
        let first = store.write_record("l", &rec);
        let second = store.write_record("l", &rec);
        assert_ne!(
            first.metadata.resource_version,
            second.metadata.resource_version
        );
        assert_eq!(store.record("l"), Some(rec));
    }
}
