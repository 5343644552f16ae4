//! The host's HTTP API (axum): JSON under `/v1`, Prometheus text at `/metrics`, the API's
//! OpenAPI description at `/v1/openapi.json`. The routes are derived from the list of
//! commands ([`ops::register`]): each [`Op`]'s endpoint gives the method and path, its body is
//! parsed into the endpoint's request type, and [`Op::serve`] answers it (on a blocking thread;
//! `wait` polls instead, so that it holds no thread and ends at shutdown).
//!
//! Every request passes a guard first. Browsers can reach a loopback port too, so a page the
//! user visits must not be able to drive the API: on a loopback listener the `Host` header must
//! name loopback (`localhost`, `127.x.y.z`, `[::1]`), which defeats DNS rebinding, and a POST
//! route reads a body only if it says `Content-Type: application/json` (a cross-origin page can
//! send that only after a CORS preflight, and the API answers none: it sends no CORS headers;
//! checked by the route, so that a POST to a GET route is answered 405, the wrong method). When
//! a token is configured every request must carry `Authorization: Bearer <token>` (it must be on
//! any other listener, so there the `Host` is not checked). A request body is a JSON object.
//!
//! Beside the API, `/` serves the [`dashboard`]: a page, a script and a style
//! sheet, the only routes that need no token (they hold no data; the page asks for the token
//! and sends it with its API requests). The `Host` check applies to them too.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use percolator_api::endpoint::{self, METRICS_PATH, OPENAPI_PATH};
use percolator_api::{ApiError, ErrorBody, ErrorKind, MAX_REQUEST_BYTES};
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::dashboard;
use crate::ops::{self, Context, Op, Registry};

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// What the commands run on (with the host).
    cx: Context,
    /// SHA-256 of the token, if one is required (compared in constant time).
    token: Option<Arc<[u8; 32]>>,
    /// The listener is on loopback: only loopback `Host` headers are served.
    check_host: bool,
}

impl AppState {
    /// The state of a host serving `cx` (which must have its [`Context::host`]) on a listener
    /// bound to `listen`; `token` is required of every request when given.
    pub fn new(cx: Context, token: Option<&str>, listen: SocketAddr) -> AppState {
        AppState {
            cx,
            token: token.map(|t| Arc::new(Sha256::digest(t.as_bytes()).into())),
            check_host: listen.ip().is_loopback(),
        }
    }
}

/// Builds the router one command at a time.
struct Routes(Option<Router<AppState>>);

impl Registry for Routes {
    fn op<E: Op>(&mut self) {
        let router = self.0.take().unwrap_or_default();
        self.0 = Some(match E::METHOD {
            endpoint::Method::Get => router.route(E::PATH, get(handle::<E>)),
            endpoint::Method::Post => router.route(E::PATH, post(handle::<E>)),
        });
    }
}

/// The API's routes.
pub fn router(state: AppState) -> Router {
    let mut routes = Routes(Some(Router::new()));
    ops::register(&mut routes);
    routes
        .0
        .unwrap_or_default()
        .route(METRICS_PATH, get(metrics))
        .route(OPENAPI_PATH, get(openapi))
        .route(dashboard::INDEX_PATH, get(dashboard::index))
        .route(dashboard::SCRIPT_PATH, get(dashboard::script))
        .route(dashboard::STYLE_PATH, get(dashboard::style))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Parses the request of `E` (a GET's is `{}`; a POST's body must be JSON and say so) and
/// answers what [`Op::serve`] gives.
async fn handle<E: Op>(State(s): State<AppState>, req: Request) -> Response {
    let request: E::Request = match E::METHOD {
        endpoint::Method::Get => match serde_json::from_slice(b"{}") {
            Ok(r) => r,
            Err(e) => return error_response(ApiError::store(format!("internal error: {e}"))),
        },
        endpoint::Method::Post => {
            // The content type first: a body that is not said to be JSON is not even read.
            if let Err((status, message)) = json_content_type(E::PATH, req.headers()) {
                return refuse(status, message);
            }
            match body(Bytes::from_request(req, &s).await) {
                Ok(r) => r,
                Err((status, message)) => return refuse(status, message),
            }
        }
    };
    match E::serve(s.cx, request).await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error_response(e),
    }
}

fn error_response(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut r = (status, axum::Json(ErrorBody { error: e.message })).into_response();
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

/// Refuses what a rebound DNS name could send, checks the token (except for the dashboard's
/// files), and refuses a body over the limit by its `Content-Length` (the POST routes check the
/// content type).
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
    // The dashboard's files hold no data, and the page must load to ask for the token.
    let public = dashboard::is_asset(req.uri().path()) && matches!(*req.method(), Method::GET | Method::HEAD);
    if let Some(expected) = state.token.as_ref().filter(|_| !public) {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        let unauthorized =
            |message: &str| error_response(ApiError { kind: ErrorKind::Unauthorized, message: message.to_owned() });
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

/// Refuses a POST to `path` whose body is not said to be JSON (what a page can send without a
/// CORS preflight). Checked once the route is known, so that a POST to a GET route is the
/// wrong method (405), not the wrong content type.
fn json_content_type(path: &str, headers: &HeaderMap) -> Result<(), (StatusCode, String)> {
    let content_type = headers.get(header::CONTENT_TYPE);
    let media_type = content_type.and_then(|v| v.to_str().ok()).map(|v| v.split(';').next().unwrap_or("").trim());
    if media_type.is_some_and(|m| m.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    let given = match content_type {
        Some(v) => format!("{:?}", String::from_utf8_lossy(v.as_bytes())),
        None => "none".to_owned(),
    };
    Err((
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!("POST {path} needs `Content-Type: application/json` (the request's is {given})"),
    ))
}

/// The request body as `T`, or why it is refused: the status and the message. Every request
/// is a JSON object: serde would also read a struct from an array of its fields in order
/// (`[]` as `{}`), which the API does not describe, so anything but an object is refused.
fn body<T: DeserializeOwned>(bytes: Result<Bytes, BytesRejection>) -> Result<T, (StatusCode, String)> {
    let bytes = bytes.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => (StatusCode::PAYLOAD_TOO_LARGE, too_large_message("")),
        status => (status, format!("reading the request body: {}", e.body_text())),
    })?;
    let found = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => None,
        Some(b'[') => Some("an array"),
        Some(b'"') => Some("a string"),
        Some(b't' | b'f') => Some("a boolean"),
        Some(b'n') => Some("null"),
        Some(b'-' | b'0'..=b'9') => Some("a number"),
        // Not JSON at all: serde says where.
        Some(_) => None,
        None => Some("nothing (the body is empty)"),
    };
    if let Some(found) = found {
        return Err((StatusCode::BAD_REQUEST, format!("invalid request body: expected a JSON object, found {found}")));
    }
    serde_json::from_slice(&bytes).map_err(|e| (StatusCode::BAD_REQUEST, format!("invalid request body: {e}")))
}

async fn metrics(State(s): State<AppState>) -> Response {
    let Some(host) = s.cx.host.clone() else {
        return error_response(ApiError::unavailable("metrics are served by a running host"));
    };
    let store = s.cx.store.clone();
    match tokio::task::spawn_blocking(move || crate::metrics::render(&store, &host)).await {
        Ok(Ok(text)) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response(),
        Ok(Err(e)) => error_response(e),
        Err(e) => error_response(ApiError::store(format!("internal error: {e}"))),
    }
}

async fn openapi() -> Response {
    axum::Json(percolator_api::openapi::document()).into_response()
}

async fn not_found(req: Request) -> Response {
    error_response(ApiError::not_found(format!("no such endpoint: {} {}", req.method(), req.uri().path())))
}

async fn method_not_allowed(req: Request) -> Response {
    let mut r = error_response(ApiError::bad_input(format!(
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
