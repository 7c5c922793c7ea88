//! The three lost-event faults of the embedded API server (src/sim/faults.rs), seen by real
//! clients: the watcher really misses the event, or really gets the stale list.
//!
//! * a tombstone deletion: the watch ends with `410 Expired` where the `DELETED` would have
//!   been; kube's watcher relists and our informer reports the deletion as
//!   `Delete { relisted: true }` (client-go's `DeletedFinalStateUnknown`);
//! * a stale list: the list answers an older state and resourceVersion, and the watch from it
//!   replays what the list lacked;
//! * a dropped event: one event of the stream is skipped, the stream carries on.

use crate::common;

use std::sync::{Arc, Mutex};

use common::wait_for;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::api::{VersionMatch, WatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use virtctl_rs::runtime::informer::{Handler, Informer, Notification, key_of};
use virtctl_rs::sim::faults::FaultAction;
use virtctl_rs::sim::{ApiServer, ApiServerConfig, AuditQuery, FaultRule};

const AGENT: &str = "lost-events-test";

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}})).unwrap()
}

async fn server_and_api() -> (ApiServer, Api<ConfigMap>, Api<ConfigMap>) {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let watcher_api = Api::namespaced(server.client_with_agent(AGENT).await.unwrap(), "default");
    let writer = Api::namespaced(server.client().await.unwrap(), "default");
    (server, watcher_api, writer)
}

fn names(list: &[ConfigMap]) -> Vec<String> {
    list.iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// Our informer on `api`, synced; cancel the token to stop it.
async fn synced_informer(
    api: Api<ConfigMap>,
    handlers: Vec<Handler<ConfigMap>>,
) -> (Informer<ConfigMap>, CancellationToken) {
    let cancel = CancellationToken::new();
    let informer = Informer::spawn(
        "configmaps",
        api,
        kube::runtime::watcher::Config::default(),
        handlers,
        cancel.clone(),
    );
    informer.wait_synced().await;
    (informer, cancel)
}

/// The names in the informer's cache, sorted.
fn cached(informer: &Informer<ConfigMap>) -> Vec<String> {
    let mut n: Vec<String> = informer
        .store()
        .state()
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    n.sort();
    n
}

#[tokio::test]
async fn a_tombstone_deletion_reaches_the_informer_only_through_the_relist() {
    let (server, watched, writer) = server_and_api().await;
    server.faults().add(
        FaultRule::tombstone_deletes()
            .resource("configmaps")
            .user_agent(AGENT),
    );
    for n in ["a", "b"] {
        writer.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler: Handler<ConfigMap> = {
        let seen = seen.clone();
        Arc::new(move |n: &Notification<ConfigMap>| {
            let line = match n {
                Notification::Add(o) => format!("add {}", key_of(o.as_ref())),
                Notification::Update { new, .. } => format!("update {}", key_of(new.as_ref())),
                Notification::Delete { obj, relisted } => {
                    format!("delete {} relisted={relisted}", key_of(obj.as_ref()))
                }
            };
            seen.lock().unwrap().push(line);
        })
    };
    let (informer, cancel) = synced_informer(watched, vec![handler]).await;
    let lists_before = lists(&server);
    writer.delete("a", &DeleteParams::default()).await.unwrap();
    wait_for("the deletion of a", || async {
        seen.lock()
            .unwrap()
            .iter()
            .any(|l| l.starts_with("delete default/a"))
            .then_some(())
    })
    .await;
    let lines = seen.lock().unwrap().clone();
    assert!(
        lines.contains(&"delete default/a relisted=true".to_string()),
        "the DELETED never arrived, the relist told: {lines:?}"
    );
    assert!(!lines.contains(&"delete default/a relisted=false".to_string()));
    assert_eq!(lists(&server), lists_before + 1, "one relist");
    assert_eq!(cached(&informer), ["b"]);
    cancel.cancel();
    server.shutdown().await;
}

fn lists(server: &ApiServer) -> usize {
    server
        .audit()
        .query(&AuditQuery {
            verbs: Some(vec!["list".into()]),
            resource: Some("configmaps".into()),
            user_agent: Some(AGENT.into()),
            ..Default::default()
        })
        .len()
}

#[tokio::test]
async fn a_stale_list_answers_an_older_state_and_the_watch_replays_the_rest() {
    let (server, watched, writer) = server_and_api().await;
    for n in ["a", "b", "c"] {
        writer.create(&PostParams::default(), &cm(n)).await.unwrap();
    }
    writer
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "1"}})),
        )
        .await
        .unwrap();
    writer.delete("b", &DeleteParams::default()).await.unwrap();
    let fresh = writer.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&fresh.items), ["a", "c"]);
    // Three events behind: before b's deletion, a's change and c's creation.
    let id = server
        .faults()
        .add(FaultRule::stale_list(3).user_agent(AGENT));
    let stale = watched.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&stale.items), ["a", "b"]);
    let a = &stale.items[0];
    assert_eq!(a.data.as_ref().unwrap()["v"], "0", "a as it was");
    let stale_rv: u64 = stale
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let fresh_rv: u64 = fresh
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(stale_rv < fresh_rv, "{stale_rv} < {fresh_rv}");
    // NotOlderThan is honoured: never older than the resourceVersion asked for.
    let not_older = ListParams {
        resource_version: Some((stale_rv + 1).to_string()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..Default::default()
    };
    let bounded = watched.list(&not_older).await.unwrap();
    assert_eq!(
        bounded.metadata.resource_version,
        Some((stale_rv + 1).to_string())
    );
    server.faults().remove(id);
    // The watch from the stale resourceVersion replays the three events the list lacked.
    let stream = watched
        .watch(&WatchParams::default(), &stale_rv.to_string())
        .await
        .unwrap();
    let events: Vec<String> = stream
        .take(3)
        .map_ok(|e| match e {
            WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.unwrap()),
            WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.unwrap()),
            WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.unwrap()),
            other => format!("{other:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(events, ["ADDED c", "MODIFIED a", "DELETED b"]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_dropped_event_is_skipped_and_the_stream_carries_on() {
    let (server, watched, writer) = server_and_api().await;
    writer
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap();
    let rule = FaultRule::drop_event(2, None).user_agent(AGENT);
    assert!(matches!(rule.action, FaultAction::DropEvent { nth: 2, .. }));
    server.faults().add(rule);
    let rv = writer
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = watched.watch(&WatchParams::default(), &rv).await.unwrap();
    for v in ["1", "2", "3"] {
        writer
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"v": v}})),
            )
            .await
            .unwrap();
    }
    writer.delete("a", &DeleteParams::default()).await.unwrap();
    let events: Vec<String> = stream
        .take(3)
        .map_ok(|e| match e {
            WatchEvent::Modified(o) => format!("MODIFIED v={}", o.data.unwrap()["v"]),
            WatchEvent::Deleted(_) => "DELETED".to_string(),
            other => format!("{other:?}"),
        })
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        events,
        ["MODIFIED v=1", "MODIFIED v=3", "DELETED"],
        "v=2 dropped"
    );
    server.shutdown().await;
}

/// A dropped `DELETED` is not made good by anything but a relist: the informer keeps the
/// object while later events of other objects arrive.
#[tokio::test]
async fn a_dropped_deletion_stays_in_the_informer_cache() {
    let (server, watched, writer) = server_and_api().await;
    writer
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap();
    server.faults().add(
        FaultRule::drop_event(1, Some(virtctl_rs::sim::store::EventKind::Deleted))
            .user_agent(AGENT),
    );
    let (informer, cancel) = synced_informer(watched, Vec::new()).await;
    writer.delete("a", &DeleteParams::default()).await.unwrap();
    writer
        .create(&PostParams::default(), &cm("b"))
        .await
        .unwrap();
    wait_for("b in the cache", || async {
        cached(&informer).contains(&"b".to_string()).then_some(())
    })
    .await;
    assert_eq!(
        cached(&informer),
        ["a", "b"],
        "a was deleted before b was created"
    );
    cancel.cancel();
    server.shutdown().await;
}
