//! The dashboard: one page, its script and its style sheet, built into the binary and served
//! at `/` of the host's HTTP listener. The page holds no data: its script reads the API
//! (`/v1/status`, `/v1/dead-letters` and `/v1/hot-rows` every second, `/v1/samples` once to
//! start its charts from the host's sample ring, `/v1/dead-letters/retry` and `discard` for its
//! buttons) with the token the user typed, so the same rules guard the data as for any other
//! client.
//!
//! The three files are served to every request that passes the loopback `Host` check, without
//! a token: the page must load before it can ask for one (a browser sends no bearer token on
//! its own), and they are the same for every host. The token then goes in the
//! `Authorization` header of the script's requests, never in a URL, and stays in the tab's
//! `sessionStorage`. A strict `Content-Security-Policy` keeps the page to its own origin: no
//! other script, style, image or connection, no framing.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// The page.
pub const INDEX_PATH: &str = "/";
/// Its script.
pub const SCRIPT_PATH: &str = "/dashboard.js";
/// Its style sheet.
pub const STYLE_PATH: &str = "/dashboard.css";

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");
const STYLE: &str = include_str!("dashboard/dashboard.css");

/// Only this origin (and a `data:` image: the empty favicon, so that the browser asks for
/// none); no inline script or style.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// True if `path` is one of the dashboard's files (served without a token).
pub fn is_asset(path: &str) -> bool {
    matches!(path, INDEX_PATH | SCRIPT_PATH | STYLE_PATH)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = ([(header::CONTENT_TYPE, content_type)], body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    // A new binary brings new files: always ask again (they are small).
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /`: the page.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /dashboard.js`.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard.css`.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}
