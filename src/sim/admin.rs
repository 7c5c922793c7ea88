//! The embedded cluster's admin endpoint: add and remove fault rules while it runs.
//!
//! Loopback only (`127.0.0.1`), every request needs `Authorization: Bearer <token>` (401
//! otherwise). Rules are the text of [`super::faultspec`].
//!
//! | request | answer |
//! |---|---|
//! | `GET /faults` | `{"faults": [{"id", "rule"}]}`: the rules in force |
//! | `POST /faults` with a rule as the body | 201 `{"id", "rule"}` for a rule that stays in force (API faults, `stuck-image-pull`); 200 `{"applied"}` for one that happens once (guest crash, node loss, ...); 400 `{"error"}` for a rule that does not parse or apply |
//! | `DELETE /faults/<id>` | 200, or 404 for an unknown id |
//! | `DELETE /faults` | every rule removed |

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::faults::{FaultId, Faults};
use super::faultspec::{self, FaultSpec, NodeFault};
use super::nodes::{Matcher, NodeSimHandle};

struct AdminState {
    token: String,
    faults: Arc<Faults>,
    nodes: NodeSimHandle,
    /// Standing node faults (`stuck-image-pull`), with their ids `node-<n>` and rule text.
    node_rules: Mutex<NodeRules>,
}

#[derive(Default)]
struct NodeRules {
    next: u64,
    rules: Vec<(String, String, Matcher)>,
}

/// A running admin endpoint.
pub struct AdminServer {
    url: String,
    token: String,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl AdminServer {
    /// Bind `127.0.0.1:<port>` (0 = any free port) with a fresh random token.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(
        faults: Arc<Faults>,
        nodes: NodeSimHandle,
        port: u16,
    ) -> std::io::Result<AdminServer> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let token = super::kubeconfig::random_token();
        let state = Arc::new(AdminState {
            token: token.clone(),
            faults,
            nodes,
            node_rules: Mutex::new(NodeRules::default()),
        });
        let router = Router::new()
            .route("/faults", get(list).post(add).delete(clear))
            .route("/faults/{id}", delete(remove))
            .with_state(state);
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, router)
                .with_graceful_shutdown(async move { s.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "admin endpoint stopped");
            }
        });
        Ok(AdminServer {
            url,
            token,
            stop,
            task,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The bearer token requests must carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Stop serving.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn authorized(state: &AdminState, h: &HeaderMap) -> bool {
    h.get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t.trim() == state.token)
}

fn answer(code: StatusCode, body: Value) -> Response {
    (code, axum::Json(body)).into_response()
}

fn unauthorized() -> Response {
    answer(
        StatusCode::UNAUTHORIZED,
        json!({"error": "missing or wrong bearer token"}),
    )
}

fn lock(state: &AdminState) -> std::sync::MutexGuard<'_, NodeRules> {
    state.node_rules.lock().unwrap_or_else(|e| e.into_inner())
}

async fn list(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let mut out: Vec<Value> = state
        .faults
        .installed()
        .into_iter()
        .map(|(id, r)| json!({"id": id.get().to_string(), "rule": faultspec::format_rule(&r)}))
        .collect();
    out.extend(
        lock(&state)
            .rules
            .iter()
            .map(|(id, text, _)| json!({"id": id, "rule": text})),
    );
    answer(StatusCode::OK, json!({"faults": out}))
}

async fn add(State(state): State<Arc<AdminState>>, headers: HeaderMap, body: Bytes) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let text = String::from_utf8_lossy(&body).trim().to_string();
    let spec = match faultspec::parse(&text) {
        Ok(s) => s,
        Err(e) => return answer(StatusCode::BAD_REQUEST, json!({"error": e})),
    };
    match spec {
        FaultSpec::Api(rule) => {
            let id = state.faults.add(rule);
            answer(
                StatusCode::CREATED,
                json!({"id": id.get().to_string(), "rule": text}),
            )
        }
        FaultSpec::Node(NodeFault::StuckImagePull(m)) => {
            state.nodes.stick_image_pull(m.clone());
            let mut rules = lock(&state);
            rules.next += 1;
            let id = format!("node-{}", rules.next);
            rules.rules.push((id.clone(), text.clone(), m));
            answer(StatusCode::CREATED, json!({"id": id, "rule": text}))
        }
        FaultSpec::Node(f) => match f.apply(&state.nodes).await {
            Ok(()) => answer(StatusCode::OK, json!({"applied": text})),
            Err(e) => answer(StatusCode::BAD_REQUEST, json!({"error": e.to_string()})),
        },
    }
}

/// The simulator keeps one list of image-pull faults: clear it and put back those still in force.
fn reinstall_image_pull_faults(state: &AdminState, rules: &NodeRules) {
    state.nodes.clear_image_pull_faults();
    for (_, _, m) in &rules.rules {
        state.nodes.stick_image_pull(m.clone());
    }
}

async fn remove(
    State(state): State<Arc<AdminState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    let removed = if id.starts_with("node-") {
        let mut rules = lock(&state);
        let before = rules.rules.len();
        rules.rules.retain(|(i, _, _)| *i != id);
        let gone = rules.rules.len() != before;
        if gone {
            reinstall_image_pull_faults(&state, &rules);
        }
        gone
    } else {
        id.parse()
            .is_ok_and(|n| state.faults.remove(FaultId::from_raw(n)))
    };
    if removed {
        answer(StatusCode::OK, json!({"removed": id}))
    } else {
        answer(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no fault {id:?}")}),
        )
    }
}

async fn clear(State(state): State<Arc<AdminState>>, headers: HeaderMap) -> Response {
    if !authorized(&state, &headers) {
        return unauthorized();
    }
    state.faults.clear();
    let mut rules = lock(&state);
    rules.rules.clear();
    reinstall_image_pull_faults(&state, &rules);
    answer(StatusCode::OK, json!({"removed": "all"}))
}
