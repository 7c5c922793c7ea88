//! Watch semantics of the embedded API server through kube's `Api::watch`, `watcher()` and
//! `reflector`: initial state, selector transitions, bookmarks, 410 Expired and relist,
//! dropped streams, delayed delivery and streaming lists.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::objects::pod;
use common::wait_for_within;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use serde_json::json;
use virtctl_rs::sim::{ApiServer, ApiServerConfig, FaultRule};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": "a"}}, "data": {"v": "0"}}),
    )
    .unwrap()
}

async fn next_event<K: Clone + serde::de::DeserializeOwned + std::fmt::Debug>(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(10), s.next())
        .await
        .expect("watch event in time")
        .expect("stream open")
        .expect("event ok")
}

#[tokio::test]
async fn raw_watch_sees_added_modified_deleted_in_order() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &cm("before"))
        .await
        .unwrap();
    // resourceVersion "0": current state first, as ADDED.
    let mut s = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Added(o) => assert_eq!(o.metadata.name.as_deref(), Some("before")),
        other => panic!("{other:?}"),
    }
    let list = cms.list(&ListParams::default()).await.unwrap();
    let list_rv = list.metadata.resource_version.unwrap();
    let mut from_list = cms
        .watch(&WatchParams::default(), &list_rv)
        .await
        .unwrap()
        .boxed();
    let created = cms.create(&PostParams::default(), &cm("x")).await.unwrap();
    cms.patch(
        "x",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "1"}})),
    )
    .await
    .unwrap();
    cms.delete("x", &DeleteParams::default()).await.unwrap();
    for stream in [&mut s, &mut from_list] {
        let a = next_event(stream).await;
        let m = next_event(stream).await;
        let d = next_event(stream).await;
        let (WatchEvent::Added(a), WatchEvent::Modified(m), WatchEvent::Deleted(d)) = (a, m, d)
        else {
            panic!("wrong event order");
        };
        assert_eq!(
            a.metadata.resource_version,
            created.metadata.resource_version
        );
        let rv = |c: &ConfigMap| {
            c.metadata
                .resource_version
                .as_ref()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        assert!(
            rv(&m) > rv(&a) && rv(&d) > rv(&m),
            "DELETED carries the delete's resourceVersion"
        );
        assert_eq!(m.data.unwrap()["v"], "1");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn selector_watch_turns_label_changes_into_added_and_deleted() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut s = cms
        .watch(&WatchParams::default().labels("app=b"), "0")
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("y")).await.unwrap();
    let pp = PatchParams::default();
    cms.patch(
        "y",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "b"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    cms.patch("y", &pp, &Patch::Merge(json!({"data": {"v": "2"}})))
        .await
        .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Modified(_)));
    cms.patch(
        "y",
        &pp,
        &Patch::Merge(json!({"metadata": {"labels": {"app": "c"}}})),
    )
    .await
    .unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Deleted(_)));
    // All-namespaces watch with a field selector.
    let all: Api<Pod> = Api::all(client.clone());
    let mut ps = all
        .watch(&WatchParams::default().fields("spec.nodeName=n1"), "0")
        .await
        .unwrap()
        .boxed();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    pods.create(&PostParams::default(), &pod("off", Some("n2")))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("on", Some("n1")))
        .await
        .unwrap();
    match next_event(&mut ps).await {
        WatchEvent::Added(p) => assert_eq!(p.metadata.name.as_deref(), Some("on")),
        other => panic!("{other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test]
async fn bookmarks_carry_the_current_resource_version() {
    let config = ApiServerConfig {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut s = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let created = cms.create(&PostParams::default(), &cm("b")).await.unwrap();
    let created_rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert!(matches!(next_event(&mut s).await, WatchEvent::Added(_)));
    loop {
        if let WatchEvent::Bookmark(b) = next_event(&mut s).await {
            let rv: u64 = b.metadata.resource_version.parse().unwrap();
            assert!(rv >= created_rv);
            break;
        }
    }
    // Without allowWatchBookmarks there are none.
    let mut quiet = cms
        .watch(
            &WatchParams::default().disable_bookmarks(),
            &created_rv.to_string(),
        )
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    assert!(matches!(next_event(&mut quiet).await, WatchEvent::Added(_)));
    server.shutdown().await;
}

#[tokio::test]
async fn too_old_resource_version_is_410_expired_error_event() {
    let config = ApiServerConfig {
        event_history: 5,
        ..Default::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms.create(&PostParams::default(), &cm("c0")).await.unwrap();
    for i in 1..12 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}")))
            .await
            .unwrap();
    }
    let old = first.metadata.resource_version.unwrap();
    let mut s = cms
        .watch(&WatchParams::default(), &old)
        .await
        .unwrap()
        .boxed();
    match next_event(&mut s).await {
        WatchEvent::Error(e) => {
            assert_eq!(e.code, 410);
            assert_eq!(e.reason, "Expired");
            assert!(
                e.message
                    .starts_with(&format!("too old resource version: {old} (")),
                "{}",
                e.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_secs(5), s.next())
            .await
            .unwrap()
            .is_none()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn watcher_relists_after_410_and_catches_up() {
    let config = ApiServerConfig {
        event_history: 5,
        ..Default::default()
    };
    let server = ApiServer::start(config).await.unwrap();
    let client = server.client_with_agent("relist-test").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let mut stream = reflector(writer, watcher(cms.clone(), watcher::Config::default())).boxed();
    // Drive until the initial list is done.
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    // Cut the stream while nobody polls it, then outrun the history window.
    server.faults().drop_watches();
    let writer_client = server.client().await.unwrap();
    let w: Api<ConfigMap> = Api::namespaced(writer_client, "default");
    for i in 0..20 {
        w.create(&PostParams::default(), &cm(&format!("n{i}")))
            .await
            .unwrap();
    }
    let mut saw_error = false;
    let mut inits = 0;
    while reader.state().len() < 20 {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        match ev {
            Err(watcher::Error::WatchError(e)) if e.code == 410 => saw_error = true,
            Ok(watcher::Event::Init) => inits += 1,
            _ => {}
        }
    }
    assert!(
        saw_error,
        "the re-watch from the old resourceVersion got 410"
    );
    assert!(inits >= 1, "the watcher relisted");
    let lists = server
        .audit()
        .by_user_agent("relist-test")
        .into_iter()
        .filter(|e| e.verb == "list")
        .count();
    assert!(lists >= 2, "initial list plus relist, got {lists}");
    server.shutdown().await;
}

#[tokio::test]
async fn watcher_survives_dropped_streams_without_losing_events() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    // Every watch from this agent is closed after 3 events.
    server
        .faults()
        .add(FaultRule::drop_watch_after(3).user_agent("flaky-informer"));
    let client = server.client_with_agent("flaky-informer").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (reader, writer) = reflector::store::<ConfigMap>();
    let informer = tokio::spawn(
        reflector(writer, watcher(cms, watcher::Config::default()))
            .default_backoff()
            .applied_objects()
            .for_each(|_| async {}),
    );
    let w: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    for i in 0..15 {
        w.create(&PostParams::default(), &cm(&format!("d{i}")))
            .await
            .unwrap();
    }
    for i in 0..15 {
        w.patch(
            &format!("d{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": format!("{i}")}})),
        )
        .await
        .unwrap();
    }
    for i in (0..15).step_by(3) {
        w.delete(&format!("d{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    let want: BTreeMap<String, String> = w
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| (c.metadata.name.unwrap(), c.data.unwrap()["v"].clone()))
        .collect();
    wait_for_within(
        "the informer cache to match the server",
        Duration::from_secs(20),
        || {
            let have: BTreeMap<String, String> = reader
                .state()
                .iter()
                .map(|c| {
                    (
                        c.metadata.name.clone().unwrap(),
                        c.data.as_ref().unwrap()["v"].clone(),
                    )
                })
                .collect();
            let ok = have == want;
            async move { ok.then_some(()) }
        },
    )
    .await;
    let audit = server.audit().by_user_agent("flaky-informer");
    let watches = audit.iter().filter(|e| e.verb == "watch").count();
    let lists = audit.iter().filter(|e| e.verb == "list").count();
    assert!(
        watches >= 5,
        "streams were cut and re-established ({watches} watches)"
    );
    assert_eq!(
        lists, 1,
        "re-watching from the last resourceVersion needed no relist"
    );
    informer.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn delayed_watch_delivery_models_a_lagging_cache() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    server
        .faults()
        .add(FaultRule::delay_watch_events(Duration::from_secs(2)).user_agent("laggy"));
    let lag_client = server.client_with_agent("laggy").await.unwrap();
    let (reader, writer) = reflector::store::<ConfigMap>();
    let cms: Api<ConfigMap> = Api::namespaced(lag_client, "default");
    let informer = tokio::spawn(
        reflector(writer, watcher(cms, watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    wait_for_within("initial sync", Duration::from_secs(10), || {
        let ready = reader.clone();
        async move { ready.wait_until_ready().await.ok() }
    })
    .await;
    let w: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    w.create(&PostParams::default(), &cm("late")).await.unwrap();
    assert!(
        reader.state().is_empty(),
        "the lagging cache must not have it yet"
    );
    wait_for_within("the delayed event", Duration::from_secs(20), || {
        let n = reader.state().len();
        async move { (n == 1).then_some(()) }
    })
    .await;
    informer.abort();
    server.shutdown().await;
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_end_bookmark() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}")))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store::<ConfigMap>();
    let mut stream = reflector(
        writer,
        watcher(cms.clone(), watcher::Config::default().streaming_lists()),
    )
    .boxed();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap()
            .unwrap();
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            break;
        }
    }
    assert_eq!(reader.state().len(), 3);
    cms.create(&PostParams::default(), &cm("s3")).await.unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ev, Some(watcher::Event::Apply(_))));
    assert_eq!(reader.state().len(), 4);
    server.shutdown().await;
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    let mut s = cms
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(ev) = s.next().await {
            ev.unwrap();
        }
    })
    .await;
    assert!(
        end.is_ok(),
        "the server closed the watch after timeoutSeconds"
    );
    server.shutdown().await;
}

/// A drop that lands after the server decided to serve a watch but before the stream started
/// (here: during an injected latency) still closes that stream. Before the fix the stream
/// subscribed to the drop signal only when it started, so it stayed open past the drop, and an
/// informer meant to be cut off kept watching (the flake in `informer_relist`).
#[tokio::test]
async fn a_drop_during_a_watch_request_closes_the_stream_it_starts() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    server.faults().add(
        FaultRule::latency(Duration::from_secs(1))
            .verbs(&[virtctl_rs::sim::Verb::Watch])
            .user_agent("slow-watch")
            .times(1),
    );
    let client = server.client_with_agent("slow-watch").await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let watch = tokio::spawn(async move {
        let mut s = cms.watch(&WatchParams::default(), "0").await?.boxed();
        while let Some(ev) = s.next().await {
            ev?;
        }
        Ok::<(), kube::Error>(())
    });
    // The rule's single use is spent once the server decided on the request.
    wait_for_within(
        "the watch request to be decided",
        Duration::from_secs(30),
        || async { (server.faults().rules()[0].times == Some(0)).then_some(()) },
    )
    .await;
    server.faults().drop_watches();
    tokio::time::timeout(Duration::from_secs(30), watch)
        .await
        .expect("the stream ended after the drop")
        .expect("watch task")
        .expect("watch ok");
    server.shutdown().await;
}
