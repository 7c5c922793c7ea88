//! The admin endpoint (src/sim/admin.rs) with the controller running: a fault added at run time
//! changes what the controller does, and it stops when the fault is removed.

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, printable};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use virtctl_rs::api::Phase;
use virtctl_rs::sim::admin::AdminServer;

/// One HTTP/1.1 request to the admin endpoint: (status, JSON body).
async fn call(
    admin: &AdminServer,
    method: &str,
    path: &str,
    body: &str,
    token: &str,
) -> (u16, Value) {
    let addr = admin.url().trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("");
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_fault_added_at_run_time_shows_in_the_controller_and_goes_when_removed() {
    let env = Env::start().await;
    let cluster = env.cluster();
    let admin = AdminServer::start(cluster.api().faults_handle(), cluster.nodes().clone(), 0)
        .await
        .expect("admin endpoint");
    let token = admin.token().to_string();

    let (code, _) = call(&admin, "GET", "/faults", "", "wrong").await;
    assert_eq!(code, 401);
    let (code, body) = call(&admin, "POST", "/faults", "explode", &token).await;
    assert_eq!(code, 400);
    assert!(
        body["error"].as_str().unwrap().contains("unknown fault"),
        "{body}"
    );

    // The controller cannot create launcher pods.
    let rule = format!("error=500,verbs=create,resource=pods,agent={CONTROLLER_AGENT}");
    let (code, body) = call(&admin, "POST", "/faults", &rule, &token).await;
    assert_eq!(code, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_string();
    let (_, listed) = call(&admin, "GET", "/faults", "", &token).await;
    assert_eq!(listed["faults"][0]["id"], id.as_str(), "{listed}");
    // Listed in the syntax `--fault` and POST take, so it can be pasted back.
    assert_eq!(listed["faults"][0]["rule"], rule.as_str(), "{listed}");
    let (code, body) = call(
        &admin,
        "POST",
        "/faults",
        "tombstone,resource=pods,probability=0.5,times=2",
        &token,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (_, listed) = call(&admin, "GET", "/faults", "", &token).await;
    assert_eq!(
        listed["faults"][1]["rule"], "tombstone,resource=pods,probability=0.5,times=2",
        "{listed}"
    );
    let tombstone = listed["faults"][1]["id"].as_str().expect("id").to_string();
    let (code, _) = call(
        &admin,
        "DELETE",
        &format!("/faults/{tombstone}"),
        "",
        &token,
    )
    .await;
    assert_eq!(code, 200);

    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    env.wait_vmi_condition(
        "demo-vm",
        "a FailedCreate condition from the injected 500",
        |c| {
            c.reason.as_deref() == Some("FailedCreate")
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.contains("injected fault"))
        },
    )
    .await;
    assert!(
        env.pods()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // Removed: the controller's retry creates the pod and the VM runs.
    let (code, _) = call(&admin, "DELETE", &format!("/faults/{id}"), "", &token).await;
    assert_eq!(code, 200);
    let (code, _) = call(&admin, "DELETE", &format!("/faults/{id}"), "", &token).await;
    assert_eq!(code, 404);
    let (vm, vmi) = env.wait_running("demo-vm").await;
    assert_eq!(
        (printable(&vm).as_str(), vmi.phase()),
        ("Running", Phase::Running)
    );

    // A one-shot node fault through the same endpoint: the guest crashes.
    let (code, body) = call(
        &admin,
        "POST",
        "/faults",
        "crash-guest=default/demo-vm",
        &token,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let first = vmi.metadata.uid.clone();
    env.wait_vmi("demo-vm", "a new VMI after the crash", |v| {
        v.metadata.uid != first && v.phase() == Phase::Running
    })
    .await;
    admin.shutdown().await;
    env.shutdown().await;
}
