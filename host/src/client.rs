//! The command line's two routes to a store: [`Remote`] asks a running host over HTTP,
//! [`Direct`] runs the same [`ops`] on the store file itself. Both answer the same
//! [`api`](crate::api) types, so the command line prints the same either way.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use percolator_store::{ObserveError, Observer, ObserverSpec, Store, Transaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::*;
use crate::config::Config;
use crate::ops::{self, ErrorKind, OpError, OpResult};

/// Every verb, on some route to a store.
pub trait Api {
    /// [`ops::get`].
    fn get(&self, r: &GetRequest) -> OpResult<Value>;
    /// [`ops::scan`].
    fn scan(&self, r: &ScanRequest) -> OpResult<ScanResponse>;
    /// [`ops::load_begin`].
    fn load_begin(&self, r: &LoadBegin) -> OpResult<LoadPlan>;
    /// [`ops::load_batch`].
    fn load_batch(&self, r: &LoadBatch) -> OpResult<LoadProgress>;
    /// [`ops::status`].
    fn status(&self) -> OpResult<StatusReport>;
    /// [`ops::dead_letters`].
    fn dead_letters(&self) -> OpResult<Vec<DeadLetterReport>>;
    /// [`ops::retry_dead_letters`].
    fn retry(&self, r: &RetryRequest) -> OpResult<RetryResponse>;
    /// [`ops::query`].
    fn query(&self, r: &QueryRequest) -> OpResult<QueryResponse>;
    /// [`ops::gc`].
    fn gc(&self) -> OpResult<GcReport>;
    /// [`ops::notify_existing`].
    fn notify(&self, r: &NotifyRequest) -> OpResult<NotifyResponse>;
    /// Waits for the pipeline's fixed point: [`ops::wait`] without a host, polling
    /// [`ops::quiescent`] on a running host.
    fn wait(&self, r: &WaitRequest) -> OpResult<WaitResponse>;
}

/// The store file opened in this process (no host runs).
pub struct Direct {
    store: Store,
    path: PathBuf,
    /// Why the configuration does not load, if it does not: its bindings are then unknown
    /// (not registered), so writes are refused and reads served.
    config_error: Option<String>,
}

/// Stands in for a binding's observer when no host runs: registering the configuration's
/// bindings makes writes to observed columns set their notify cells (so the host runs the
/// observers when it starts), and refuses writes to weak-notify columns, as a host would.
/// No scanner runs here, so it is never called.
struct Parked;

impl Observer for Parked {
    fn observe(&self, _: &mut Transaction, _: &percolator_store::Notification) -> Result<(), ObserveError> {
        Err(ObserveError::Failed("no host is running".into()))
    }
}

impl Direct {
    /// Opens the store of `config` with its bindings registered (not run).
    pub fn open(config: &Config, store: Store) -> OpResult<Direct> {
        let observers = config
            .bindings
            .iter()
            .map(|b| {
                let spec = ObserverSpec {
                    name: b.name.clone(),
                    table: b.table.clone(),
                    column: b.column.clone(),
                    kind: b.kind,
                    max_attempts: b.max_attempts,
                };
                (spec, Arc::new(Parked) as Arc<dyn Observer>)
            })
            .collect();
        store.set_observers(observers)?;
        Ok(Direct { store, path: config.store_path.clone(), config_error: None })
    }

    /// Opens the store at `path` while its configuration does not load (`config_error` says
    /// why). Its bindings are unknown, so a write could not set the notifications they need:
    /// loads are refused (naming the configuration's problem); reads, `gc`, `wait` and dead
    /// letters work.
    pub fn without_bindings(store: Store, path: PathBuf, config_error: String) -> Direct {
        Direct { store, path, config_error: Some(config_error) }
    }

    /// Refuses a write while the bindings are unknown.
    fn writable(&self) -> OpResult<()> {
        match &self.config_error {
            None => Ok(()),
            Some(e) => Err(OpError::bad_input(format!(
                "{e}\nno host is running and the configuration does not load, so nothing is written to \
                 {}: a load must notify the observers of the configuration's bindings; fix the \
                 configuration and load again",
                self.path.display()
            ))),
        }
    }
}

impl Api for Direct {
    fn get(&self, r: &GetRequest) -> OpResult<Value> {
        ops::get(&self.store, r)
    }
    fn scan(&self, r: &ScanRequest) -> OpResult<ScanResponse> {
        ops::scan(&self.store, r)
    }
    fn load_begin(&self, r: &LoadBegin) -> OpResult<LoadPlan> {
        self.writable()?;
        ops::load_begin(&self.store, r)
    }
    fn load_batch(&self, r: &LoadBatch) -> OpResult<LoadProgress> {
        self.writable()?;
        ops::load_batch(&self.store, r)
    }
    fn status(&self) -> OpResult<StatusReport> {
        let mut s = ops::status(&self.store, &self.path, None)?;
        s.config_error.clone_from(&self.config_error);
        Ok(s)
    }
    fn dead_letters(&self) -> OpResult<Vec<DeadLetterReport>> {
        ops::dead_letters(&self.store)
    }
    fn retry(&self, r: &RetryRequest) -> OpResult<RetryResponse> {
        ops::retry_dead_letters(&self.store, r)
    }
    fn query(&self, r: &QueryRequest) -> OpResult<QueryResponse> {
        ops::query(&self.store, r)
    }
    fn gc(&self) -> OpResult<GcReport> {
        ops::gc(&self.store)
    }
    fn notify(&self, r: &NotifyRequest) -> OpResult<NotifyResponse> {
        self.writable()?;
        ops::notify_existing(&self.store, r)
    }
    fn wait(&self, r: &WaitRequest) -> OpResult<WaitResponse> {
        ops::wait(&self.store, r)
    }
}

/// A running host's HTTP API.
pub struct Remote {
    base: String,
    token: Option<String>,
}

/// Requests that should answer at once give up after this long.
const TIMEOUT: Duration = Duration::from_secs(600);
/// Health checks (deciding the route) give up sooner.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

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

    fn unreachable(&self, e: ureq::Error) -> OpError {
        OpError { kind: ErrorKind::Unavailable, message: format!("cannot reach the host at {}: {e}", self.base) }
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    fn finish<T: DeserializeOwned>(&self, path: &str, mut resp: ureq::http::Response<ureq::Body>) -> OpResult<T> {
        let status = resp.status().as_u16();
        let body = resp.body_mut().with_config().limit(u64::MAX).read_to_string().map_err(|e| self.unreachable(e))?;
        if (200..300).contains(&status) {
            return serde_json::from_str(&body).map_err(|e| {
                OpError::store(format!("the host at {} answered {path} with something unexpected: {e}", self.base))
            });
        }
        let kind = match status {
            400 | 405 | 413 | 415 | 422 => ErrorKind::BadInput,
            401 | 403 => ErrorKind::Unauthorized,
            404 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            503 => ErrorKind::Unavailable,
            _ => ErrorKind::Store,
        };
        let message = match serde_json::from_str::<ErrorBody>(&body) {
            Ok(b) if kind == ErrorKind::Unauthorized => {
                format!("the host at {} refused the request: {}", self.base, b.error)
            }
            Ok(b) => b.error,
            Err(_) => format!("the host at {} answered HTTP {status} to {path}: {}", self.base, body.trim()),
        };
        Err(OpError { kind, message })
    }

    fn get_json<T: DeserializeOwned>(&self, path: &str, timeout: Duration) -> OpResult<T> {
        let resp = self
            .auth(Self::agent(timeout).get(format!("{}{path}", self.base)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        self.finish(path, resp)
    }

    /// POSTs `body` as compact JSON (the host refuses a POST of any other content type).
    fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B, timeout: Duration) -> OpResult<T> {
        let json = serde_json::to_vec(body).map_err(|e| OpError::bad_input(format!("encoding the request: {e}")))?;
        let resp = self
            .auth(Self::agent(timeout).post(format!("{}{path}", self.base)))
            .header("Content-Type", "application/json")
            .send(&json[..])
            .map_err(|e| self.unreachable(e))?;
        self.finish(path, resp)
    }

    /// `GET /v1/health`: does a host answer (with this token)?
    pub fn health(&self) -> OpResult<Health> {
        self.get_json(path::HEALTH, HEALTH_TIMEOUT)
    }

    /// `GET /metrics`, as text.
    pub fn metrics(&self) -> OpResult<String> {
        let resp = self
            .auth(Self::agent(TIMEOUT).get(format!("{}{}", self.base, path::METRICS)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let mut resp = resp;
        let text = resp.body_mut().read_to_string().map_err(|e| self.unreachable(e))?;
        if status == 200 { Ok(text) } else { Err(OpError::store(format!("HTTP {status}: {text}"))) }
    }
}

impl Api for Remote {
    fn get(&self, r: &GetRequest) -> OpResult<Value> {
        self.post(path::GET, r, TIMEOUT)
    }
    fn scan(&self, r: &ScanRequest) -> OpResult<ScanResponse> {
        self.post(path::SCAN, r, TIMEOUT)
    }
    fn load_begin(&self, r: &LoadBegin) -> OpResult<LoadPlan> {
        self.post(path::LOAD_BEGIN, r, TIMEOUT)
    }
    fn load_batch(&self, r: &LoadBatch) -> OpResult<LoadProgress> {
        self.post(path::LOAD, r, TIMEOUT)
    }
    fn status(&self) -> OpResult<StatusReport> {
        self.get_json(path::STATUS, TIMEOUT)
    }
    fn dead_letters(&self) -> OpResult<Vec<DeadLetterReport>> {
        self.get_json(path::DEAD_LETTERS, TIMEOUT)
    }
    fn retry(&self, r: &RetryRequest) -> OpResult<RetryResponse> {
        self.post(path::RETRY, r, TIMEOUT)
    }
    fn query(&self, r: &QueryRequest) -> OpResult<QueryResponse> {
        self.post(path::QUERY, r, TIMEOUT)
    }
    fn gc(&self) -> OpResult<GcReport> {
        self.post(path::GC, &serde_json::json!({}), TIMEOUT)
    }
    fn notify(&self, r: &NotifyRequest) -> OpResult<NotifyResponse> {
        self.post(path::NOTIFY, r, TIMEOUT)
    }
    fn wait(&self, r: &WaitRequest) -> OpResult<WaitResponse> {
        // The host answers within the request's timeout (it refuses one above the limit).
        let asked = Duration::try_from_secs_f64(r.timeout_secs).unwrap_or(Duration::ZERO);
        let timeout = asked.min(Duration::from_secs(MAX_WAIT_SECS)).saturating_add(Duration::from_secs(30));
        self.post(path::WAIT, r, timeout)
    }
}
