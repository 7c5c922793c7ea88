//! Which optional APIs the cluster serves (CDI, snapshot classes, instancetypes, the KubeVirt
//! CR): each informer of one waits for discovery's answer, asked in the background, so starting
//! never waits for the API server. KubeVirt learns it from its CRD informer
//! (virtinformers.go); we ask discovery.
//!
//! An answer is an answer: the group/version is listed, or the server says it does not know it
//! (404) or refuses to say (another 4xx but 429). A failure that may pass (429, 5xx, a broken
//! connection) is no answer: it is retried with backoff until the manager stops, because the
//! answer switches an informer off for the life of the process; one dropped discovery request,
//! or an API server that is not up yet, must not leave a served API unwatched.

use std::time::Duration;

use futures::FutureExt;
use futures::future::Shared;
use tokio_util::sync::CancellationToken;

use crate::runtime::informer::Gate;
use crate::runtime::log_limit::LogLimiter;

/// First wait after a failed discovery request; doubled after each failure up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(200);
/// Longest wait between discovery attempts.
const MAX_WAIT: Duration = Duration::from_secs(5);

/// What one discovery request told.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Served(bool),
    /// A failure that may pass: ask again.
    Retry(String),
}

fn answer(
    result: Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList, kube::Error>,
    resource: &str,
) -> Answer {
    match result {
        Ok(list) => Answer::Served(list.resources.iter().any(|r| r.name == resource)),
        Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && e.code != 429 => {
            if e.code != 404 {
                tracing::warn!(
                    code = e.code, error = %e.message, resource,
                    "discovery refused: taken as not served"
                );
            }
            Answer::Served(false)
        }
        Err(e) => Answer::Retry(e.to_string()),
    }
}

/// Whether `resource` of `group_version` is served, asked once in the background and shared by
/// the informers it gates ([`Served::gate`]).
#[derive(Clone)]
pub(super) struct Served(Shared<Gate>);

impl Served {
    /// Ask discovery (retrying failures until `stop`); when the answer is "not served", log
    /// `absent` (what the controller cannot do without it) once.
    pub(super) fn ask(
        client: &kube::Client,
        group_version: &'static str,
        resource: &'static str,
        absent: &'static str,
        stop: &CancellationToken,
    ) -> Self {
        let (client, stop) = (client.clone(), stop.clone());
        let asking = async move {
            match served(&client, group_version, resource, &stop).await {
                Some(true) => true,
                Some(false) => {
                    tracing::info!(
                        "{group_version} {resource} are not served by this cluster: {absent}"
                    );
                    false
                }
                None => false,
            }
        };
        Served(asking.boxed().shared())
    }

    /// The answer, for one informer ([`crate::runtime::informer::Informer::spawn_decoding`]).
    pub(super) fn gate(&self) -> Gate {
        self.0.clone().boxed()
    }
}

/// Whether the API server serves `resource` in `group_version` (`cdi.kubevirt.io/v1beta1`);
/// `None` when `stop` ends the retries of a failing discovery.
async fn served(
    client: &kube::Client,
    group_version: &str,
    resource: &str,
    stop: &CancellationToken,
) -> Option<bool> {
    let mut wait = FIRST_WAIT;
    for attempt in 1u64.. {
        let error = match answer(
            client.list_api_group_resources(group_version).await,
            resource,
        ) {
            Answer::Served(served) => return Some(served),
            Answer::Retry(error) => error,
        };
        // One line a minute for all the APIs asked about: an unreachable API server is named
        // by the informers and /healthz already.
        match LogLimiter::shared().allow("discovery failed") {
            Some(note) => tracing::warn!(
                group_version,
                resource,
                attempt,
                error,
                suppressed = note.suppressed,
                "discovery failed; retrying in {wait:?} {note}"
            ),
            None => tracing::debug!(group_version, resource, attempt, error, "discovery failed"),
        }
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(MAX_WAIT);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{Request, Response};
    use kube::client::Body;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const LIST: &str = r#"{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"snapshot.storage.k8s.io/v1","resources":[{"name":"volumesnapshotclasses","singularName":"volumesnapshotclass","namespaced":false,"kind":"VolumeSnapshotClass","verbs":["get","list","watch"]}]}"#;

    /// A client whose discovery answers are `codes` in turn (200 = the list), then 200s;
    /// also returns how many requests arrived.
    fn client(codes: Vec<u16>) -> (kube::Client, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let count = seen.clone();
        let service = tower::service_fn(move |_: Request<Body>| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let code = codes.get(n).copied().unwrap_or(200);
            let body = if code == 200 {
                LIST.to_string()
            } else {
                format!(
                    r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"fault {code}","reason":"X","code":{code}}}"#
                )
            };
            async move {
                Ok::<_, std::convert::Infallible>(
                    Response::builder()
                        .status(code)
                        .body(Body::from(body.into_bytes()))
                        .expect("response"),
                )
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    const GV: &str = "snapshot.storage.k8s.io/v1";

    #[tokio::test(start_paused = true)]
    async fn a_listed_resource_is_served_and_an_unlisted_one_is_not() {
        let (c, seen) = client(vec![]);
        let stop = CancellationToken::new();
        assert_eq!(
            served(&c, GV, "volumesnapshotclasses", &stop).await,
            Some(true)
        );
        assert_eq!(served(&c, GV, "volumesnapshots", &stop).await, Some(false));
        assert_eq!(seen.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_404_or_403_is_an_answer_asked_once() {
        for code in [404, 403] {
            let (c, seen) = client(vec![code]);
            let stop = CancellationToken::new();
            let answer = served(&c, GV, "volumesnapshotclasses", &stop).await;
            assert_eq!(answer, Some(false), "{code}");
            assert_eq!(seen.load(Ordering::SeqCst), 1, "{code}");
        }
    }

    /// Before, one failed discovery request switched the informer off for the life of the
    /// process: the one cause found for a CI run in which
    /// `a_volume_snapshot_class_enables_the_claims` never saw its VolumeSnapshotClass.
    #[tokio::test(start_paused = true)]
    async fn failures_that_may_pass_are_retried_until_an_answer() {
        let (c, seen) = client(vec![503, 500, 429]);
        let stop = CancellationToken::new();
        let start = tokio::time::Instant::now();
        assert_eq!(
            served(&c, GV, "volumesnapshotclasses", &stop).await,
            Some(true)
        );
        assert_eq!(seen.load(Ordering::SeqCst), 4);
        assert_eq!(start.elapsed(), Duration::from_millis(200 + 400 + 800));
    }

    #[tokio::test(start_paused = true)]
    async fn stop_ends_the_retries() {
        let (c, _) = client(vec![503; 1000]);
        let stop = CancellationToken::new();
        let asking = served(&c, GV, "volumesnapshotclasses", &stop);
        let stopper = async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            stop.cancel();
        };
        let (served, ()) = tokio::join!(asking, stopper);
        assert_eq!(served, None);
    }
}
