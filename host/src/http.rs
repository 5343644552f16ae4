//! The host's HTTP API (axum): JSON under `/v1`, Prometheus text at `/metrics`. Every handler
//! runs its [`ops`] function on a blocking thread (store calls block). When a token is
//! configured every request must carry `Authorization: Bearer <token>`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use percolator_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::api::{self, ErrorBody, path};
use crate::ops::{self, ErrorKind, HostContext, OpError, OpResult};

/// Largest request body (a load batch of big documents).
const BODY_LIMIT: usize = 256 << 20;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    store_path: Arc<PathBuf>,
    host: Arc<HostContext>,
    /// SHA-256 of the token, if one is required (compared in constant time).
    token: Option<Arc<[u8; 32]>>,
}

impl AppState {
    /// The state of a host serving `store` (at `store_path`); `token` is required of every
    /// request when given.
    pub fn new(store: Store, store_path: PathBuf, host: Arc<HostContext>, token: Option<&str>) -> AppState {
        AppState {
            store,
            store_path: Arc::new(store_path),
            host,
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
        }
    }
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(path::HEALTH, get(health))
        .route(path::STATUS, get(status))
        .route(path::GET, post(get_cell))
        .route(path::SCAN, post(scan))
        .route(path::LOAD_BEGIN, post(load_begin))
        .route(path::LOAD, post(load))
        .route(path::DEAD_LETTERS, get(dead_letters))
        .route(path::RETRY, post(retry))
        .route(path::QUERY, post(query))
        .route(path::GC, post(gc))
        .route(path::WAIT, post(wait))
        .route(path::METRICS, get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

/// The HTTP status of an error kind.
pub fn status_code(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadInput => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn error_response(e: OpError) -> Response {
    let mut r = (status_code(e.kind), axum::Json(ErrorBody { error: e.message })).into_response();
    if e.kind == ErrorKind::Unauthorized {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}

async fn auth(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(expected) = &state.token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        let unauthorized =
            |message: &str| error_response(OpError { kind: ErrorKind::Unauthorized, message: message.to_owned() });
        match given {
            None => {
                return unauthorized(
                    "this host requires a token: send `Authorization: Bearer <token>` \
                     (the command line reads it from PERCOLATOR_TOKEN or the config's http.token_file)",
                );
            }
            Some(t) => {
                let digest: [u8; 32] = Sha256::digest(t.as_bytes()).into();
                // Constant time: every byte is compared whatever the first difference.
                let diff = digest.iter().zip(expected.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
                if diff != 0 {
                    return unauthorized("wrong token");
                }
            }
        }
    }
    next.run(req).await
}

/// Runs `f` on a blocking thread and answers its value as JSON (or its error).
async fn blocking<T: Serialize + Send + 'static>(f: impl FnOnce() -> OpResult<T> + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => error_response(e),
        Err(e) => error_response(OpError::store(format!("internal error: {e}"))),
    }
}

fn body<T: DeserializeOwned>(bytes: &Bytes) -> Result<T, OpError> {
    serde_json::from_slice(bytes).map_err(|e| OpError::bad_input(format!("invalid request body: {e}")))
}

macro_rules! json_handler {
    ($name:ident, $req:ty, $op:path) => {
        async fn $name(State(s): State<AppState>, bytes: Bytes) -> Response {
            let req: $req = match body(&bytes) {
                Ok(r) => r,
                Err(e) => return error_response(e),
            };
            blocking(move || $op(&s.store, &req)).await
        }
    };
}

json_handler!(get_cell, api::GetRequest, ops::get);
json_handler!(scan, api::ScanRequest, ops::scan);
json_handler!(load_begin, api::LoadBegin, ops::load_begin);
json_handler!(load, api::LoadBatch, ops::load_batch);
json_handler!(retry, api::RetryRequest, ops::retry_dead_letters);
json_handler!(query, api::QueryRequest, ops::query);

async fn health(State(s): State<AppState>) -> Response {
    axum::Json(ops::health(&s.store_path)).into_response()
}

async fn status(State(s): State<AppState>) -> Response {
    blocking(move || ops::status(&s.store, &s.store_path, Some(&s.host))).await
}

async fn dead_letters(State(s): State<AppState>) -> Response {
    blocking(move || ops::dead_letters(&s.store)).await
}

async fn gc(State(s): State<AppState>) -> Response {
    blocking(move || ops::gc(&s.store)).await
}

async fn wait(State(s): State<AppState>, bytes: Bytes) -> Response {
    let req: api::WaitRequest = match body(&bytes) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    blocking(move || ops::wait(&s.store, &req, true)).await
}

async fn metrics(State(s): State<AppState>) -> Response {
    match tokio::task::spawn_blocking(move || crate::metrics::render(&s.store, &s.host)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Ok(Err(e)) => error_response(e),
        Err(e) => error_response(OpError::store(format!("internal error: {e}"))),
    }
}

async fn not_found(req: Request) -> Response {
    error_response(OpError::not_found(format!("no such endpoint: {} {}", req.method(), req.uri().path())))
}

async fn method_not_allowed(req: Request) -> Response {
    let mut r = error_response(OpError::bad_input(format!(
        "{} is not allowed on {} (see `percolator --help` or the README's command line section)",
        req.method(),
        req.uri().path()
    )));
    *r.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
    r
}
