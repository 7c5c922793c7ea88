use super::*;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::routing::{get, put};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// A stand-in for virt-api: discovery of `subresources.kubevirt.io/v1` (when `serves`), and the
/// subresource PUTs, recorded and answered from `answers` (then 202).
#[derive(Clone, Default)]
struct FakeVirtApi {
    seen: Arc<Mutex<Vec<(String, Value)>>>,
    answers: Arc<Mutex<VecDeque<(u16, String)>>>,
}

async fn discovery() -> axum::Json<Value> {
    let resources: Vec<Value> = ["start", "stop", "restart"]
        .iter()
        .map(|v| {
            json!({"name": format!("virtualmachines/{v}"), "namespaced": true,
                        "kind": "VirtualMachine", "verbs": ["update"], "singularName": ""})
        })
        .collect();
    axum::Json(json!({
        "kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": "subresources.kubevirt.io/v1", "resources": resources
    }))
}

async fn subresource(
    State(fake): State<FakeVirtApi>,
    uri: Uri,
    body: axum::body::Bytes,
) -> (StatusCode, axum::Json<Value>) {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    fake.seen
        .lock()
        .unwrap()
        .push((uri.path().to_string(), body));
    match fake.answers.lock().unwrap().pop_front() {
        None => (StatusCode::ACCEPTED, axum::Json(json!({}))),
        Some((code, message)) => {
            let reason = if code == 409 {
                "Conflict"
            } else {
                "InternalError"
            };
            (
                StatusCode::from_u16(code).unwrap(),
                axum::Json(
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": message, "reason": reason, "code": code}),
                ),
            )
        }
    }
}

async fn serve(fake: &FakeVirtApi, serves: bool) -> kube::Client {
    let mut router = Router::new();
    if serves {
        router = router
            .route("/apis/subresources.kubevirt.io/v1", get(discovery))
            .route(
                "/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/{name}/{verb}",
                put(subresource),
            );
    }
    let router = router.with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn request(verb: Verb, grace: Option<i64>, dry_run: bool) -> Request {
    Request {
        verb,
        namespace: "ns".into(),
        name: "vm-a".into(),
        options: Options {
            grace_period: grace,
            paused: false,
        },
        dry_run,
    }
}

#[tokio::test]
async fn with_virt_api_the_subresource_is_called_with_virtctls_body() {
    let fake = FakeVirtApi::default();
    let client = serve(&fake, true).await;
    let cases = [
        (request(Verb::Start, None, false), "start", json!({})),
        (
            Request {
                options: Options {
                    paused: true,
                    ..Options::default()
                },
                ..request(Verb::Start, None, false)
            },
            "start",
            json!({"paused": true}),
        ),
        (
            request(Verb::Stop, Some(0), true),
            "stop",
            json!({"gracePeriod": 0, "dryRun": ["All"]}),
        ),
        (
            request(Verb::Restart, Some(0), false),
            "restart",
            json!({"gracePeriodSeconds": 0}),
        ),
    ];
    for (req, verb, body) in cases {
        let outcome = send(&client, &req).await.expect("accepted");
        assert_eq!((outcome.route, outcome.attempts), (Route::Subresource, 1));
        let (path, sent) = fake.seen.lock().unwrap().pop().expect("a PUT");
        assert_eq!(
            path,
            format!("/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm-a/{verb}")
        );
        assert_eq!(sent, body, "{verb}");
    }
}

#[tokio::test]
async fn virt_api_refusals_are_reported_and_test_conflicts_retried() {
    let fake = FakeVirtApi::default();
    let client = serve(&fake, true).await;
    // Two failed `test`s, then accepted.
    let test_failed = (
        409,
        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm-a\": jsonpatch test operation does not apply".to_string(),
    );
    fake.answers
        .lock()
        .unwrap()
        .extend([test_failed.clone(), test_failed.clone()]);
    let outcome = send(&client, &request(Verb::Restart, None, false))
        .await
        .expect("accepted on the third attempt");
    assert_eq!(outcome.attempts, 3);
    // A refusal is final: one PUT, KubeVirt's message in the error with the VM's name.
    fake.seen.lock().unwrap().clear();
    fake.answers.lock().unwrap().push_back((
        409,
        "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm-a\": VM is already running".into(),
    ));
    let err = send(&client, &request(Verb::Start, None, false))
        .await
        .unwrap_err();
    assert_eq!(err.refusal().map(|r| r.code), Some(409));
    assert_eq!(
        err.to_string(),
        "starting VirtualMachine ns/vm-a: Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm-a\": VM is already running"
    );
    assert_eq!(fake.seen.lock().unwrap().len(), 1);
    // Conflicts on every attempt: bounded, and said so.
    fake.answers
        .lock()
        .unwrap()
        .extend(std::iter::repeat_n(test_failed, MAX_ATTEMPTS as usize));
    let err = send(&client, &request(Verb::Restart, None, false))
        .await
        .unwrap_err();
    assert!(
        matches!(*err.cause, Cause::Conflict { attempts } if attempts == MAX_ATTEMPTS),
        "{err}"
    );
}

#[tokio::test]
async fn without_the_subresource_group_the_route_is_direct() {
    let client = serve(&FakeVirtApi::default(), false).await;
    match route(&client, Verb::Start).await {
        Route::Direct { why } => assert!(why.contains("no subresources.kubevirt.io/v1"), "{why}"),
        other => panic!("expected the direct route, got {other:?}"),
    }
}

#[test]
fn failed_tests_are_told_from_other_errors() {
    let status = |code: u16, reason: &str, message: &str| {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..kube::core::Status::failure(message, reason)
        }))
    };
    assert!(is_test_failure(&status(
        409,
        "Conflict",
        "the object has been modified"
    )));
    assert!(is_test_failure(&status(422, "Invalid", PATCH_REJECTED)));
    // A schema error is 422 Invalid too, with the field in the message: not retried.
    assert!(!is_test_failure(&status(
        422,
        "Invalid",
        "VirtualMachine.kubevirt.io \"vm-a\" is invalid: spec.runStrategy: Unsupported value"
    )));
    assert!(!is_test_failure(&status(403, "Forbidden", "forbidden")));
}
