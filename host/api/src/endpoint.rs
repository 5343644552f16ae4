//! One description per command: its HTTP method and path, its request and answer types and a
//! sentence for the API description. The host's routes, the HTTP client ([`Remote`]), the
//! no-host route of `percolator-server` and the OpenAPI document ([`openapi`]) are all
//! derived from these, so a new verb is described once, here.
//!
//! [`Remote`]: crate::Remote
//! [`openapi`]: crate::openapi

use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::*;

/// How an endpoint is called.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `GET`, no body: the request type is [`Empty`].
    Get,
    /// `POST` with a JSON body (`Content-Type: application/json`).
    Post,
}

impl Method {
    /// `GET` or `POST`.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// The request of an endpoint that takes none (`{}` when sent as a body).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

/// A command of the API.
pub trait Endpoint: 'static {
    /// What the client sends (a JSON body for [`Method::Post`]; [`Empty`] for [`Method::Get`]).
    type Request: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// What the host answers (JSON) when the command succeeds; a failure answers an
    /// [`ErrorBody`] with the status of its [`ErrorKind`](crate::ErrorKind).
    type Response: Serialize + DeserializeOwned + JsonSchema + Send + 'static;
    /// Its method.
    const METHOD: Method;
    /// Its path, e.g. `/v1/get`.
    const PATH: &'static str;
    /// The `operationId` of the API description (and the verb's name), e.g. `get`.
    const NAME: &'static str;
    /// One sentence for the API description.
    const SUMMARY: &'static str;

    /// How long a client waits for the answer to `request`.
    fn timeout(_request: &Self::Request) -> Duration {
        DEFAULT_TIMEOUT
    }
}

/// Declares the endpoints: one unit struct each, its [`Endpoint`] impl, and [`ALL`].
macro_rules! endpoints {
    ($(
        $(#[$doc:meta])*
        $name:ident: $method:ident $path:literal, $op:literal, $req:ty => $resp:ty, $summary:literal
        $(, timeout = $timeout:path)?;
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Copy, Debug)]
            pub struct $name;

            impl Endpoint for $name {
                type Request = $req;
                type Response = $resp;
                const METHOD: Method = Method::$method;
                const PATH: &'static str = $path;
                const NAME: &'static str = $op;
                const SUMMARY: &'static str = $summary;
                $(
                    fn timeout(request: &Self::Request) -> Duration {
                        $timeout(request)
                    }
                )?
            }
        )*

        /// Every endpoint, in the order of the API description.
        pub const ALL: &[Description] = &[$(Description::of::<$name>()),*];
    };
}

endpoints! {
    /// Is the host up (and is the token right)?
    Health: Get "/v1/health", "health", Empty => HealthReport,
        "Is the host up? Answers its version and the store it serves.";
    /// The pipeline's state.
    Status: Get "/v1/status", "status", Empty => StatusReport,
        "The pipeline: bindings with their runs, failures and run-time percentiles, backlog, throughput, dead letters.";
    /// The host's samples of its counters.
    Samples: Get "/v1/samples", "samples", Empty => SamplesReport,
        "The host's samples of its counters and backlog, one a second over the last 5 minutes, oldest first (what the dashboard's charts start from); none without a host.";
    /// One cell.
    Get: Post "/v1/get", "get", GetRequest => Value,
        "One cell's latest value, or its value at a snapshot (404 when it has none).";
    /// Cells of a table, a page at a time.
    Scan: Post "/v1/scan", "scan", ScanRequest => ScanResponse,
        "Cells of a table in (row, column) order: a row range, a row prefix, some columns; a page at a time with a resume token, every page at the first page's snapshot.";
    /// Where the load of a file stands.
    LoadBegin: Post "/v1/load/begin", "load_begin", LoadBeginRequest => LoadPlan,
        "Where the load of a file stands (new, interrupted at a checkpoint, or done); writes nothing.";
    /// One batch of a load.
    Load: Post "/v1/load", "load", LoadBatch => LoadProgress,
        "One batch of a load, written in one transaction with the load's checkpoint; a repeated batch is written once.";
    /// The dead letters.
    DeadLetters: Get "/v1/dead-letters", "dead_letters", Empty => Vec<DeadLetterReport>,
        "Notifications whose observer kept failing, with the last error.";
    /// Retry dead letters.
    Retry: Post "/v1/dead-letters/retry", "retry", RetryRequest => RetryResponse,
        "Moves one dead letter (or all) back to pending: their observers run again.";
    /// Discard dead letters.
    Discard: Post "/v1/dead-letters/discard", "discard", DiscardRequest => DiscardResponse,
        "Removes dead letters for good (one, a binding's, every (unbound) one, or all): their notifications are not run again.";
    /// The cells observer runs lose conflicts on.
    HotRows: Post "/v1/hot-rows", "hot_rows", HotRowsRequest => HotRowsReport,
        "The cells observer runs on this host lost the most conflicts on over the last minutes, with the bindings that lost; empty without conflicts.";
    /// Garbage collection.
    Gc: Post "/v1/gc", "gc", Empty => GcReport,
        "Removes versions no reader can see.";
    /// Wait for the fixed point.
    Wait: Post "/v1/wait", "wait", WaitRequest => WaitResponse,
        "Waits until no notification is pending and no run is going, or the timeout.",
        timeout = wait_timeout;
    /// A dry run of a new version of a binding's component.
    Replay: Post "/v1/replay", "replay", ReplayRequest => ReplayReport,
        "Runs a candidate component and the binding's current version on existing rows in transactions that are never committed, and answers the cells they would write differently.";
    /// Run observers on existing rows.
    Notify: Post "/v1/notify", "notify", NotifyRequest => NotifyResponse,
        "Notifies a column's observers of the rows that already have a value (rerun: even rows they processed).";
    /// The change feed.
    Changes: Post "/v1/changes", "changes", ChangesRequest => ChangesResponse,
        "Committed changes to a table's logged columns after a position, in commit-timestamp order, up to the resolved timestamp (nothing later can still commit below it); resume from `next` to miss and repeat nothing. `wait_secs` waits for a first change.",
        timeout = changes_timeout;
    /// The current timestamp, or a pinned snapshot.
    Snapshot: Post "/v1/snapshot", "snapshot", SnapshotRequest => SnapshotReport,
        "The current timestamp (a snapshot to read at); with ttl_secs, pins it (or `at`) so GC keeps it until the pin expires.";
    /// Extend a pin.
    SnapshotRenew: Post "/v1/snapshot/renew", "snapshot_renew", PinRenewRequest => PinReport,
        "Extends a pinned snapshot to expire ttl_secs from now (refused once it has expired).";
    /// End a pin.
    SnapshotRelease: Post "/v1/snapshot/release", "snapshot_release", PinReleaseRequest => PinReport,
        "Releases a pinned snapshot: GC no longer keeps it.";
    /// A sink's parked batch sent again or discarded.
    SinkDeadLetter: Post "/v1/sinks/dead-letters", "sink_dead_letter", SinkDeadLetterRequest => SinkDeadLetterResponse,
        "Sends a batch a sink's destination refused (listed in status, host.sinks[].dead_letters) once more, or discards it.";
}

/// `GET`: Prometheus text exposition format 0.0.4 (not JSON, so not an [`Endpoint`]).
pub const METRICS_PATH: &str = "/metrics";
/// `GET`: this API's OpenAPI description (JSON).
pub const OPENAPI_PATH: &str = "/v1/openapi.json";

/// How long a client waits for an answer, unless the endpoint says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A `wait` may take its whole timeout: the client waits that long and a little more.
fn wait_timeout(request: &WaitRequest) -> Duration {
    let asked = Duration::try_from_secs_f64(request.timeout_secs).unwrap_or(Duration::ZERO);
    asked.min(Duration::from_secs(MAX_WAIT_SECS)).saturating_add(Duration::from_secs(30))
}

/// A `changes` may wait up to its `wait_secs` for a first change.
fn changes_timeout(request: &ChangesRequest) -> Duration {
    let asked = Duration::try_from_secs_f64(request.wait_secs).unwrap_or(Duration::ZERO);
    DEFAULT_TIMEOUT.saturating_add(asked.min(Duration::from_secs(60)))
}

/// An endpoint as data (for the API description and for checking that a server routes every
/// endpoint).
#[derive(Clone, Copy)]
pub struct Description {
    /// [`Endpoint::METHOD`].
    pub method: Method,
    /// [`Endpoint::PATH`].
    pub path: &'static str,
    /// [`Endpoint::NAME`].
    pub name: &'static str,
    /// [`Endpoint::SUMMARY`].
    pub summary: &'static str,
    /// The request's JSON schema.
    pub request: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    /// The answer's JSON schema.
    pub response: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
}

impl Description {
    /// The description of `E`.
    pub const fn of<E: Endpoint>() -> Description {
        Description {
            method: E::METHOD,
            path: E::PATH,
            name: E::NAME,
            summary: E::SUMMARY,
            request: |g| g.subschema_for::<E::Request>(),
            response: |g| g.subschema_for::<E::Response>(),
        }
    }
}

impl std::fmt::Debug for Description {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} ({})", self.method.as_str(), self.path, self.name)
    }
}
