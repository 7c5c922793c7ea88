//! The runtime's `Informer` against the embedded API server when its watch goes away: no
//! change may be lost, and a relist must report what vanished meanwhile as deletions, as
//! client-go's reflector + `DeltaFIFO.Replace` do (`tools/cache/reflector.go`,
//! `delta_fifo.go`: `DeletedFinalStateUnknown`).
//!
//! * A short outage (the watch dropped, re-watches refused) within the server's event history:
//!   the informer resumes watching from its last resourceVersion (like client-go's reflector),
//!   so the deletion arrives as an ordinary watch `DELETED` and no relist happens.
//! * An outage longer than the event history: the resumed watch gets `410 Expired` ("too old
//!   resource version"), the informer relists, and the object deleted meanwhile is reported as
//!   `Delete { relisted: true }` with its last known state, one created meanwhile as `Add`.
//!
//! Outages are made with the server's faults (`drop_watches` plus a 500 on the informer's
//! watch requests) and observed in the audit log; no fixed sleeps.

use crate::common;

use common::wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use virtctl_rs::runtime::informer::{Handler, Informer, Notification, key_of};
use virtctl_rs::sim::{ApiServer, ApiServerConfig, AuditQuery, FaultId, FaultRule, Verb};

const DEADLINE: Duration = Duration::from_secs(30);
/// User agent of the informer's client (faults and audit queries are scoped by it).
const AGENT: &str = "informer-under-test";

/// What the handler saw, as `add ns/name`, `update ns/name`,
/// `delete ns/name relisted=BOOL data=VALUE`.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn handler(&self) -> Handler<ConfigMap> {
        let seen = self.clone();
        Arc::new(move |n: &Notification<ConfigMap>| {
            let line = match n {
                Notification::Add(o) => format!("add {}", key_of(o.as_ref())),
                Notification::Update { new, .. } => format!("update {}", key_of(new.as_ref())),
                Notification::Delete { obj, relisted } => format!(
                    "delete {} relisted={relisted} data={}",
                    key_of(obj.as_ref()),
                    obj.data
                        .as_ref()
                        .and_then(|d| d.get("v"))
                        .map(String::as_str)
                        .unwrap_or("-")
                ),
            };
            seen.0.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        })
    }

    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn since(&self, mark: usize) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())[mark..].to_vec()
    }
}

fn cm(name: &str, v: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"v": v}
    }))
    .expect("static ConfigMap")
}

struct Setup {
    server: ApiServer,
    cms: Api<ConfigMap>,
    informer: Informer<ConfigMap>,
    seen: Seen,
    stop: CancellationToken,
}

/// A server with `event_history` events kept per resource, ConfigMaps `a` and `b`, and a
/// synced informer on ConfigMaps in `default` through its own client.
async fn setup(event_history: usize) -> Setup {
    let server = ApiServer::start(ApiServerConfig {
        event_history,
        ..Default::default()
    })
    .await
    .expect("API server starts");
    let cms: Api<ConfigMap> =
        Api::namespaced(server.client().await.expect("test client"), "default");
    for (name, v) in [("a", "1"), ("b", "2")] {
        cms.create(&PostParams::default(), &cm(name, v))
            .await
            .expect("create");
    }
    let seen = Seen::default();
    let stop = CancellationToken::new();
    let informer = Informer::spawn(
        "configmaps",
        Api::namespaced(
            server
                .client_with_agent(AGENT)
                .await
                .expect("informer client"),
            "default",
        ),
        watcher::Config::default(),
        vec![seen.handler()],
        stop.clone(),
    );
    tokio::time::timeout(DEADLINE, informer.wait_synced())
        .await
        .expect("informer synced");
    let mut initial = seen.since(0);
    initial.sort();
    assert_eq!(initial, ["add default/a", "add default/b"]);
    Setup {
        server,
        cms,
        informer,
        seen,
        stop,
    }
}

impl Setup {
    /// Requests of the informer's client with verb `verb` on ConfigMaps, from audit seq `since`.
    fn informer_requests(&self, verb: &str, since: u64) -> Vec<u16> {
        self.server
            .audit()
            .query(&AuditQuery {
                verbs: Some(vec![verb.to_string()]),
                resource: Some("configmaps".into()),
                user_agent: Some(AGENT.into()),
                since: Some(since),
                ..Default::default()
            })
            .iter()
            .map(|e| e.code)
            .collect()
    }

    /// Closes the informer's watch and refuses its re-watches; returns once a re-watch was
    /// refused, i.e. no watch is open.
    async fn start_outage(&self) -> FaultId {
        let mark = self.server.audit().len() as u64;
        let fault = self.server.faults().add(
            FaultRule::error(500)
                .verbs(&[Verb::Watch])
                .resource("configmaps")
                .user_agent(AGENT),
        );
        self.server.faults().drop_watches();
        wait_for("a refused re-watch", || async {
            self.informer_requests("watch", mark)
                .contains(&500)
                .then_some(())
        })
        .await;
        fault
    }

    /// The names in the informer's cache, sorted.
    fn cached(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .informer
            .store()
            .state()
            .iter()
            .map(|o| key_of(o.as_ref()))
            .collect();
        names.sort();
        names
    }

    /// Waits until the handler saw every line of `want` since `mark`; returns all it saw since.
    async fn wait_seen(&self, mark: usize, want: &[&str]) -> Vec<String> {
        wait_for(&format!("notifications {want:?}"), || async {
            let got = self.seen.since(mark);
            want.iter()
                .all(|w| got.iter().any(|g| g == w))
                .then_some(got)
        })
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_during_a_short_watch_outage_arrives_when_the_watch_resumes() {
    let s = setup(10_000).await;
    let lists_before = s.informer_requests("list", 0).len();
    let mark = s.seen.len();
    let fault = s.start_outage().await;
    s.cms
        .delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
    s.cms
        .create(&PostParams::default(), &cm("c", "3"))
        .await
        .expect("create c");
    s.server.faults().remove(fault);

    let got = s
        .wait_seen(
            mark,
            &["delete default/b relisted=false data=2", "add default/c"],
        )
        .await;
    assert_eq!(
        got,
        ["delete default/b relisted=false data=2", "add default/c"],
        "exactly the missed changes, in order"
    );
    assert_eq!(s.cached(), ["default/a", "default/c"]);
    assert_eq!(
        s.informer_requests("list", 0).len(),
        lists_before,
        "resumed from the last resourceVersion without a relist"
    );
    s.stop.cancel();
    s.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_during_an_outage_longer_than_the_history_is_reported_by_the_relist() {
    const HISTORY: usize = 5;
    let s = setup(HISTORY).await;
    let lists_before = s.informer_requests("list", 0).len();
    let mark = s.seen.len();
    let audit_mark = s.server.audit().len() as u64;
    let fault = s.start_outage().await;

    // While no watch is open: b goes (after a last change the informer never saw), c comes,
    // and enough churn follows to push all of it out of the server's event history.
    s.cms
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "unseen"}})),
        )
        .await
        .expect("update b");
    s.cms
        .delete("b", &DeleteParams::default())
        .await
        .expect("delete b");
    s.cms
        .create(&PostParams::default(), &cm("c", "3"))
        .await
        .expect("create c");
    s.cms
        .create(&PostParams::default(), &cm("churn", "0"))
        .await
        .expect("create churn");
    for i in 1..=HISTORY {
        s.cms
            .patch(
                "churn",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": i.to_string()}})),
            )
            .await
            .expect("update churn");
    }
    s.server.faults().remove(fault);

    // The resumed watch gets 410 Expired; the relist reports the vanished b as a relisted
    // deletion with the last state the informer knew, and c (and churn) as additions.
    let got = s
        .wait_seen(
            mark,
            &[
                "delete default/b relisted=true data=2",
                "add default/c",
                "add default/churn",
                "update default/a",
            ],
        )
        .await;
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "add default/c",
            "add default/churn",
            "delete default/b relisted=true data=2",
            "update default/a",
        ],
        "nothing else, and b reported exactly once: {got:?}"
    );
    assert_eq!(
        s.cached(),
        ["default/a", "default/c", "default/churn"],
        "the cache matches the server"
    );
    assert_eq!(
        s.informer_requests("list", audit_mark).len(),
        1,
        "one relist after the outage"
    );
    assert_eq!(s.informer_requests("list", 0).len(), lists_before + 1);

    // Watching again: later changes arrive as ordinary events.
    let mark = s.seen.len();
    s.cms
        .delete("c", &DeleteParams::default())
        .await
        .expect("delete c");
    let got = s
        .wait_seen(mark, &["delete default/c relisted=false data=3"])
        .await;
    assert_eq!(got, ["delete default/c relisted=false data=3"]);
    s.stop.cancel();
    s.server.shutdown().await;
}
