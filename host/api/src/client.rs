//! [`Remote`]: a running host's API over HTTP, one generic [`Remote::call`] for every
//! [`Endpoint`].

use std::time::Duration;

use crate::endpoint::{Empty, Endpoint, Health, METRICS_PATH, Method};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::types::ErrorBody;

/// Health checks (deciding the route) give up sooner than other requests.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// A running host's HTTP API.
#[derive(Clone, Debug)]
pub struct Remote {
    base: String,
    token: Option<String>,
}

impl Remote {
    /// The host at `base` (e.g. `http://127.0.0.1:7878`), sending `token` if given.
    pub fn new(base: &str, token: Option<String>) -> Remote {
        Remote { base: base.trim().trim_end_matches('/').to_owned(), token }
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    fn agent(timeout: Duration) -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(timeout))
            .build()
            .into()
    }

    fn unreachable(&self, e: ureq::Error) -> ApiError {
        ApiError::unavailable(format!("cannot reach the host at {}: {e}", self.base))
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    /// Sends `body` (POST) or nothing (GET) to `path`; the answer's status and body.
    fn send(&self, method: Method, path: &str, body: Option<&[u8]>, timeout: Duration) -> ApiResult<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let agent = Self::agent(timeout);
        let resp = match (method, body) {
            (Method::Get, _) => self.auth(agent.get(url)).call(),
            (Method::Post, body) => {
                self.auth(agent.post(url)).header("Content-Type", "application/json").send(body.unwrap_or(b"{}"))
            }
        };
        let mut resp = resp.map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().with_config().limit(u64::MAX).read_to_string().map_err(|e| self.unreachable(e))?;
        Ok((status, text))
    }

    /// An error answer as an [`ApiError`].
    fn refused(&self, path: &str, status: u16, body: &str) -> ApiError {
        let kind = ErrorKind::of_http_status(status);
        let message = match serde_json::from_str::<ErrorBody>(body) {
            Ok(b) if kind == ErrorKind::Unauthorized => {
                format!("the host at {} refused the request: {}", self.base, b.error)
            }
            Ok(b) => b.error,
            Err(_) => format!("the host at {} answered HTTP {status} to {path}: {}", self.base, body.trim()),
        };
        ApiError { kind, message }
    }

    /// Calls endpoint `E` with `request`.
    pub fn call<E: Endpoint>(&self, request: &E::Request) -> ApiResult<E::Response> {
        self.call_within::<E>(request, E::timeout(request))
    }

    fn call_within<E: Endpoint>(&self, request: &E::Request, timeout: Duration) -> ApiResult<E::Response> {
        let body = match E::METHOD {
            Method::Get => None,
            Method::Post => Some(
                serde_json::to_vec(request).map_err(|e| ApiError::bad_input(format!("encoding the request: {e}")))?,
            ),
        };
        let (status, text) = self.send(E::METHOD, E::PATH, body.as_deref(), timeout)?;
        if !(200..300).contains(&status) {
            return Err(self.refused(E::PATH, status, &text));
        }
        serde_json::from_str(&text).map_err(|e| {
            ApiError::store(format!("the host at {} answered {} with something unexpected: {e}", self.base, E::PATH))
        })
    }

    /// `GET /v1/health`: does a host answer (with this token)? Gives up after a few seconds.
    pub fn health(&self) -> ApiResult<crate::HealthReport> {
        self.call_within::<Health>(&Empty {}, HEALTH_TIMEOUT)
    }

    /// `GET /metrics`, as text.
    pub fn metrics(&self) -> ApiResult<String> {
        let (status, text) = self.send(Method::Get, METRICS_PATH, None, crate::endpoint::DEFAULT_TIMEOUT)?;
        if status == 200 { Ok(text) } else { Err(self.refused(METRICS_PATH, status, &text)) }
    }
}
