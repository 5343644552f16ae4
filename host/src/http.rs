//! The host's HTTP API (axum): JSON under `/v1`, Prometheus text at `/metrics`. Every handler
//! runs its [`ops`] function on a blocking thread (store calls block); `wait` polls instead, so
//! that it holds no thread and ends at shutdown.
//!
//! Every request passes a guard first. Browsers can reach a loopback port too, so a page the
//! user visits must not be able to drive the API: a POST must say `Content-Type:
//! application/json` (a cross-origin page can send that only after a CORS preflight, and the API
//! answers none: it sends no CORS headers), and on a loopback listener the `Host` header must
//! name loopback (`localhost`, `127.x.y.z`, `[::1]`), which defeats DNS rebinding. When a token
//! is configured every request must carry `Authorization: Bearer <token>` (it must be on any
//! other listener, so there the `Host` is not checked).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use percolator_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::api::{self, ErrorBody, MAX_REQUEST_BYTES, path};
use crate::ops::{self, ErrorKind, HostContext, OpError, OpResult};

/// How often a `wait` looks at the pipeline.
const WAIT_POLL: Duration = Duration::from_millis(20);

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    store: Store,
    store_path: Arc<PathBuf>,
    host: Arc<HostContext>,
    /// SHA-256 of the token, if one is required (compared in constant time).
    token: Option<Arc<[u8; 32]>>,
    /// The listener is on loopback: only loopback `Host` headers are served.
    check_host: bool,
    /// Becomes true when the host starts shutting down (ends running `wait`s).
    shutdown: watch::Receiver<bool>,
}

impl AppState {
    /// The state of a host serving `store` (at `store_path`) on a listener bound to `listen`;
    /// `token` is required of every request when given; `shutdown` turns true when the host
    /// stops.
    pub fn new(
        store: Store,
        store_path: PathBuf,
        host: Arc<HostContext>,
        token: Option<&str>,
        listen: SocketAddr,
        shutdown: watch::Receiver<bool>,
    ) -> AppState {
        AppState {
            store,
            store_path: Arc::new(store_path),
            host,
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
            check_host: listen.ip().is_loopback(),
            shutdown,
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
        .route(path::NOTIFY, post(notify))
        .route(path::WAIT, post(wait))
        .route(path::METRICS, get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
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

/// An error answer with an explicit status.
fn refuse(status: StatusCode, message: String) -> Response {
    (status, axum::Json(ErrorBody { error: message })).into_response()
}

/// True if `host` (a `Host` header: a name or an IP literal, with an optional port) names the
/// loopback interface: `localhost`, `127.x.y.z` or `[::1]`.
pub fn is_loopback_host(host: &str) -> bool {
    fn is_port(p: &str) -> bool {
        !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok()
    }
    if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, port)) = rest.split_once(']') else { return false };
        let port_ok = port.is_empty() || port.strip_prefix(':').is_some_and(is_port);
        return port_ok && ip.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    }
    let name = match host.split_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return false,
        None => host,
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Refuses what a browser page or a rebound DNS name could send, then checks the token.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if state.check_host {
        let host = req.headers().get(header::HOST).map(|h| h.to_str().map_err(|_| h));
        let authority = req.uri().authority().map(|a| a.as_str());
        let refused = match (host, authority) {
            (None, None) => Some("a request without a Host header".to_owned()),
            (Some(Err(h)), _) => Some(format!("Host {:?}", String::from_utf8_lossy(h.as_bytes()))),
            (Some(Ok(h)), _) if !is_loopback_host(h) => Some(format!("Host {h:?}")),
            (_, Some(a)) if !is_loopback_host(a) => Some(format!("Host {a:?}")),
            _ => None,
        };
        if let Some(what) = refused {
            return refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "{what} is refused: this host listens on loopback and serves only requests for \
                     localhost, 127.0.0.1 or [::1]"
                ),
            );
        }
    }
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
    if req.method() == Method::POST {
        let content_type = req.headers().get(header::CONTENT_TYPE);
        let media_type = content_type.and_then(|v| v.to_str().ok()).map(|v| v.split(';').next().unwrap_or("").trim());
        if !media_type.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
            let given = match content_type {
                Some(v) => format!("{:?}", String::from_utf8_lossy(v.as_bytes())),
                None => "none".to_owned(),
            };
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("POST {} needs `Content-Type: application/json` (the request's is {given})", req.uri().path()),
            );
        }
    }
    let length = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if let Some(length) = length
        && length > MAX_REQUEST_BYTES as u64
    {
        return too_large(Some(length));
    }
    next.run(req).await
}

fn too_large(length: Option<u64>) -> Response {
    let size = length.map(|n| format!(" of {n} bytes")).unwrap_or_default();
    refuse(StatusCode::PAYLOAD_TOO_LARGE, too_large_message(&size))
}

fn too_large_message(size: &str) -> String {
    format!("the request body{size} is larger than the limit of {} MiB", MAX_REQUEST_BYTES >> 20)
}

fn shutting_down() -> Response {
    error_response(OpError::unavailable("the host is shutting down"))
}

/// Runs `f` on a blocking thread and answers its value as JSON (or its error).
async fn blocking<T: Serialize + Send + 'static>(f: impl FnOnce() -> OpResult<T> + Send + 'static) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => error_response(e),
        Err(e) => error_response(OpError::store(format!("internal error: {e}"))),
    }
}

/// The request body as `T`, or why it is refused: the status and the message.
fn body<T: DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, (StatusCode, String)> {
    let bytes = bytes.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, too_large_message("")),
        status => (status, format!("reading the request body: {}", e.body_text())),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid request body: {e}")))
}

macro_rules! json_handler {
    ($name:ident, $req:ty, $op:path) => {
        async fn $name(State(s): State<AppState>, bytes: Result<Bytes, BytesRejection>) -> Response {
            let req: $req = match body(bytes) {
                Ok(r) => r,
                Err((status, message)) => return refuse(status, message),
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
json_handler!(notify, api::NotifyRequest, ops::notify_existing);

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

/// Polls [`ops::quiescent`] every [`WAIT_POLL`] until it holds, the timeout passes or the host
/// shuts down. Between polls it holds no thread (many waits cost nothing), and it ends at
/// shutdown, so that no request keeps the store open after the host stops.
async fn wait(State(s): State<AppState>, bytes: Result<Bytes, BytesRejection>) -> Response {
    let req: api::WaitRequest = match body(bytes) {
        Ok(r) => r,
        Err((status, message)) => return refuse(status, message),
    };
    let timeout = match ops::wait_timeout(&req) {
        Ok(t) => t,
        Err(e) => return error_response(e),
    };
    let start = tokio::time::Instant::now();
    let deadline = start.checked_add(timeout).unwrap_or(start);
    let mut shutdown = s.shutdown.clone();
    loop {
        if *shutdown.borrow_and_update() {
            return shutting_down();
        }
        let store = s.store.clone();
        match tokio::task::spawn_blocking(move || ops::quiescent(&store)).await {
            Ok(Ok(true)) => return axum::Json(api::WaitResponse { quiescent: true }).into_response(),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => return error_response(e),
            Err(e) => return error_response(OpError::store(format!("internal error: {e}"))),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return axum::Json(api::WaitResponse { quiescent: false }).into_response();
        }
        tokio::select! {
            () = tokio::time::sleep(WAIT_POLL.min(deadline - now)) => {}
            changed = shutdown.changed() => {
                if changed.is_err() {
                    // The sender is gone: the server is stopping.
                    return shutting_down();
                }
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_pass() {
        for host in
            ["localhost", "LocalHost:7878", "127.0.0.1", "127.0.0.1:0", "127.9.8.7:65535", "[::1]", "[::1]:7878"]
        {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "evil.example",
            "evil.example:7878",
            "localhost.evil.example",
            "localhost:",
            "localhost:x",
            "localhost:70000",
            "127.0.0.1:7878:1",
            "127.1",
            "10.0.0.1:7878",
            "0.0.0.0:7878",
            "[::2]:7878",
            "[::1]x",
            "[::1",
            "::1",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
