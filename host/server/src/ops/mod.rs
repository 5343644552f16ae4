//! Every command of the API, implemented once as an [`Op`] over a [`Context`] (a store, and
//! the host when one serves it). The HTTP routes ([`http`](crate::http)) and the no-host route
//! of the command line ([`Direct`](crate::route::Direct)) both run these, so both answer the
//! same thing; which commands exist is listed once, in [`register`].
//!
//! One module per group of commands: [`cells`] (get, scan, notify), [`changes`] (the change
//! feed), [`load`], [`pipeline`] (health, status, samples, dead letters, retry, hot rows, gc, wait), [`snapshot`]
//! (the current timestamp, pins), [`sinks`] (a sink's parked batches).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use percolator_api::endpoint::{self, Endpoint};
use percolator_api::{ApiError, ApiResult};
use percolator_store::Store;
use tokio::sync::watch;

use crate::config::Config;
use crate::pipeline::Pipeline;
use crate::sampler::Sampler;

pub mod cells;
pub mod changes;
pub mod load;
pub mod pipeline;
pub mod replay;
pub mod sinks;
pub mod snapshot;

pub use cells::{check_column, check_row, check_table};
pub use pipeline::{BACKLOG_CAP, Backlog, backlog};

/// What a running host adds to the store: its pipeline, throughput samples, URL and shutdown.
pub struct HostContext {
    /// The running pipeline.
    pub pipeline: Arc<Pipeline>,
    /// The sample ring: the store's counters and backlog once a second (rates, `samples`).
    pub sampler: Arc<Sampler>,
    /// The API's base URL.
    pub url: String,
    /// When the host started.
    pub started_at: SystemTime,
    /// Turns true when the host starts shutting down (ends running `wait`s).
    pub shutdown: watch::Receiver<bool>,
}

/// What a command runs on.
#[derive(Clone)]
pub struct Context {
    /// The store.
    pub store: Store,
    /// Its file (with Redis: the local state path that anchors the host's endpoint file).
    pub store_path: Arc<PathBuf>,
    /// What it is, for people: its file, or its Redis namespace and cluster
    /// ([`Backend::describe`](crate::config::Backend::describe)).
    pub store_name: Arc<str>,
    /// The host serving it, if the command runs in one (`None`: the command line opened the
    /// store file itself).
    pub host: Option<Arc<HostContext>>,
    /// No-host route only: why the configuration does not load. Its bindings are then unknown,
    /// so a write could not set the notifications they need: commands that [write](Op::WRITES)
    /// are refused.
    pub config_error: Option<Arc<str>>,
    /// No-host route only: the configuration, when it loads (`replay` compiles its bindings'
    /// components).
    pub config: Option<Arc<Config>>,
}

/// A command's implementation: its [`Endpoint`] says what it takes and answers.
pub trait Op: Endpoint {
    /// True if it writes to the store (refused on the no-host route while the configuration
    /// does not load: see [`Context::config_error`]).
    const WRITES: bool = false;

    /// Runs the command (blocking: store calls block).
    fn run(cx: &Context, request: Self::Request) -> ApiResult<Self::Response>;

    /// How a host serves it: [`Op::run`] on a blocking thread. `wait` overrides this to poll
    /// without holding a thread. A write waits until the host's first load of the pipeline is
    /// done: before it, the store's registry may lack the configuration's bindings, combined
    /// and logged columns, and the write would notify, combine and log nothing.
    fn serve(cx: Context, request: Self::Request) -> impl Future<Output = ApiResult<Self::Response>> + Send {
        async move {
            if Self::WRITES
                && let Some(host) = &cx.host
            {
                while !host.pipeline.has_loaded() {
                    if *host.shutdown.borrow() {
                        return Err(ApiError::unavailable("the host is shutting down (its pipeline did not load)"));
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            }
            tokio::task::spawn_blocking(move || Self::run(&cx, request))
                .await
                .unwrap_or_else(|e| Err(ApiError::store(format!("internal error: {e}"))))
        }
    }
}

/// Something that takes every command ([`register`] calls it once per [`Op`]).
pub trait Registry {
    /// Takes command `E`.
    fn op<E: Op>(&mut self);
}

/// The list of commands: the host routes exactly these (a test checks that it is
/// [`endpoint::ALL`]).
pub fn register(r: &mut impl Registry) {
    r.op::<endpoint::Health>();
    r.op::<endpoint::Status>();
    r.op::<endpoint::Samples>();
    r.op::<endpoint::Get>();
    r.op::<endpoint::Scan>();
    r.op::<endpoint::LoadBegin>();
    r.op::<endpoint::Load>();
    r.op::<endpoint::DeadLetters>();
    r.op::<endpoint::Retry>();
    r.op::<endpoint::Discard>();
    r.op::<endpoint::HotRows>();
    r.op::<endpoint::Gc>();
    r.op::<endpoint::Wait>();
    r.op::<endpoint::Notify>();
    r.op::<endpoint::Replay>();
    r.op::<endpoint::Changes>();
    r.op::<endpoint::Snapshot>();
    r.op::<endpoint::SnapshotRenew>();
    r.op::<endpoint::SnapshotRelease>();
    r.op::<endpoint::SinkDeadLetter>();
}

/// Runs `E` on `cx`, refusing a write while the configuration does not load.
pub fn call<E: Op>(cx: &Context, request: E::Request) -> ApiResult<E::Response> {
    if E::WRITES
        && let Some(e) = &cx.config_error
    {
        return Err(ApiError::bad_input(format!(
            "{e}\nno host is running and the configuration does not load, so nothing is written to \
             {}: a write must notify the observers of the configuration's bindings; fix the \
             configuration and try again",
            cx.store_name
        )));
    }
    E::run(cx, request)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_endpoint_has_an_op_and_no_op_lacks_an_endpoint() {
        struct Paths(BTreeSet<(&'static str, &'static str)>);
        impl Registry for Paths {
            fn op<E: Op>(&mut self) {
                assert!(self.0.insert((E::METHOD.as_str(), E::PATH)), "{} registered twice", E::PATH);
            }
        }
        let mut ops = Paths(BTreeSet::new());
        register(&mut ops);
        let described: BTreeSet<_> = endpoint::ALL.iter().map(|d| (d.method.as_str(), d.path)).collect();
        assert_eq!(ops.0, described);
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod command_tests;
