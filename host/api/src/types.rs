//! The request and answer types of the API (JSON on the wire). Both routes of a client use
//! them: a running host answers them over HTTP, the no-host route of `percolator-server`
//! computes them in-process, so both print the same thing. Which type goes with which path is
//! said once, in [`endpoint`](crate::endpoint).
//!
//! Byte strings (rows, values) are sent twice: as UTF-8 text (invalid sequences replaced, for
//! people and `curl`) and as hex (exact).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The largest request body the host accepts (bytes); a larger one is refused with 413.
pub const MAX_REQUEST_BYTES: usize = 64 << 20;
/// The most cells one [`ScanRequest`] may ask for; a larger `limit` is refused with 400 (ask
/// for the next page with [`ScanResponse::next`] to read more).
pub const MAX_SCAN_LIMIT: usize = 100_000;
/// The `limit` of a [`ScanRequest`] that gives none.
pub const DEFAULT_SCAN_LIMIT: usize = 100;
/// The `timeout_secs` of a [`WaitRequest`] that gives none.
pub const DEFAULT_WAIT_SECS: f64 = 60.0;
/// The longest [`WaitRequest`] timeout, in seconds; a longer one is refused with 400.
pub const MAX_WAIT_SECS: u64 = 3600;

/// The table holding load checkpoints (one row per load id); nothing else may be written there.
pub const LOADS_TABLE: &str = "_loads";
/// Records of the file loaded so far (the checkpoint).
pub const LOAD_LINES: &str = "load:lines";
/// The file loaded.
pub const LOAD_FILE: &str = "load:file";
/// Records in the file.
pub const LOAD_TOTAL: &str = "load:total";
/// How the file is read (format, key field, family).
pub const LOAD_OPTIONS: &str = "load:options";

/// What a table or column name may be, as a JSON schema `pattern`: no control characters (the
/// store's rule; its length, 1 to [`MAX_NAME_LEN`](percolator_store::MAX_NAME_LEN) bytes, is
/// the schema's `minLength` and `maxLength`, which count characters: a bound, not the rule).
const NAME_PATTERN: &str = r"^[^\u0000-\u001f\u007f-\u009f]*$";
/// A load's base id ([`LoadBeginRequest::id`]) as a JSON schema `pattern`.
const LOAD_ID_PATTERN: &str = "^[0-9a-f]{32}$";
/// A load id with its generation ([`LoadPlan::id`]) as a JSON schema `pattern`.
const LOAD_GENERATION_ID_PATTERN: &str = "^[0-9a-f]{32}(-[1-9][0-9]*)?$";

/// The body of every error response.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// `GET /v1/health`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HealthReport {
    /// True unless the store refuses writes ([`HealthReport::store_failure`] says why). The
    /// answer is 200 either way: the host is up and serves reads.
    pub ok: bool,
    /// The host's version.
    pub version: String,
    /// The store file it serves (canonical path).
    pub store: String,
    /// Set while the store refuses writes: read-only because the disk is full, or an I/O
    /// error. Clears by itself once a write succeeds again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_failure: Option<StorageFailureReport>,
}

/// Why the store refuses writes ([`HealthReport::store_failure`], [`StoreReport::store_failure`]).
/// Reads go on meanwhile; the host tries a probe write of 1 MiB by itself (every 2 s at most) and takes
/// writes again as soon as one succeeds, without a restart (what it had acknowledged is kept
/// meanwhile, at either durability).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct StorageFailureReport {
    /// The first error met, with the file and the system's words for the cause
    /// (`…/store.redb: No space left on device (os error 28) …`).
    pub error: String,
    /// The disk is full (or a quota is exhausted): free space and writes resume.
    pub disk_full: bool,
    /// When the error was met (RFC 3339).
    pub since: String,
    /// Small writes tried since, which failed too.
    pub probes: u64,
}

/// `POST /v1/get`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetRequest {
    /// Table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// Row key.
    #[schemars(length(min = 1, max = percolator_store::MAX_ROW_LEN))]
    pub row: String,
    /// Column (`family:qualifier`).
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub column: String,
    /// Read at this snapshot (a timestamp: a scan's `at`, a pin's `ts`, `snapshot`'s answer)
    /// instead of the latest. Refused above the current timestamp and below GC's safepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub at: Option<u64>,
}

/// A value: the answer to [`GetRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Value {
    /// As UTF-8 (invalid sequences replaced).
    pub value: String,
    /// The exact bytes, hex.
    pub value_hex: String,
    /// The commit timestamp of the write that set it.
    #[serde(default)]
    pub commit_ts: u64,
}

/// `POST /v1/scan`: cells of rows in `[start, end)` whose row starts with `prefix`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScanRequest {
    /// Table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// First row (inclusive).
    #[serde(default)]
    pub start: Option<String>,
    /// Last row (exclusive).
    #[serde(default)]
    pub end: Option<String>,
    /// Only rows starting with this.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Only these columns (default: every column).
    #[serde(default)]
    #[schemars(length(min = 1), inner(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN)))]
    pub columns: Option<Vec<String>>,
    /// At most this many cells (1 to [`MAX_SCAN_LIMIT`]; default [`DEFAULT_SCAN_LIMIT`]).
    #[serde(default = "default_scan_limit")]
    #[schemars(range(min = 1, max = 100_000))]
    pub limit: usize,
    /// Resume after the cell this token names: the [`ScanResponse::next`] of the previous page
    /// (with the same table, range and columns). The token carries the first page's snapshot:
    /// every page of one scan reads that snapshot.
    #[serde(default)]
    pub after: Option<String>,
    /// Read at this snapshot (a timestamp) instead of the latest. With `after`, it must be the
    /// token's. Refused above the current timestamp and below GC's safepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub at: Option<u64>,
}

impl Default for ScanRequest {
    fn default() -> ScanRequest {
        ScanRequest {
            table: String::new(),
            start: None,
            end: None,
            prefix: None,
            columns: None,
            limit: DEFAULT_SCAN_LIMIT,
            after: None,
            at: None,
        }
    }
}

fn default_scan_limit() -> usize {
    DEFAULT_SCAN_LIMIT
}

fn default_wait_secs() -> f64 {
    DEFAULT_WAIT_SECS
}

/// `POST /v1/notify`: sets the notify cell of `table/column` in every row of the range (as in
/// [`ScanRequest`]) where the column has a value, so that the column's observers run on data
/// written before they were bound.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyRequest {
    /// Table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// The observed column.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub column: String,
    /// First row (inclusive).
    #[serde(default)]
    pub start: Option<String>,
    /// Last row (exclusive).
    #[serde(default)]
    pub end: Option<String>,
    /// Only rows starting with this.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Run the observers again even on rows whose latest change they already processed (their
    /// acks are ignored): for a new version of an observer. Without it, a row the observer has
    /// acknowledged is skipped.
    #[serde(default)]
    pub rerun: bool,
}

/// The answer to [`NotifyRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct NotifyResponse {
    /// Rows notified.
    pub notified: u64,
}

/// One cell of a [`ScanResponse`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ScanCell {
    /// Row key as UTF-8 (invalid sequences replaced).
    pub row: String,
    /// Row key, hex.
    pub row_hex: String,
    /// Column.
    pub column: String,
    /// Value as UTF-8 (invalid sequences replaced).
    pub value: String,
    /// Value, hex.
    pub value_hex: String,
    /// The commit timestamp of the write that set the value.
    #[serde(default)]
    pub commit_ts: u64,
}

/// The answer to [`ScanRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ScanResponse {
    /// The snapshot this page read (every page of one scan reads the same).
    #[serde(default)]
    pub at: u64,
    /// Cells in (row, column) order.
    pub cells: Vec<ScanCell>,
    /// True if more cells follow beyond the limit.
    pub truncated: bool,
    /// When more cells follow: the token that asks for the next page ([`ScanRequest::after`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One record of a load: a row and its cells (`None` deletes the cell).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadRecord {
    /// Row key.
    #[schemars(length(min = 1, max = percolator_store::MAX_ROW_LEN))]
    pub row: String,
    /// `[column, value]` pairs; a `null` value (`None`) deletes the cell.
    pub cells: Vec<(String, Option<CellValue>)>,
}

/// A value to write: text (a JSON string, stored as its UTF-8 bytes), or any bytes as
/// `{"base64": "..."}` (standard alphabet, padding optional).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum CellValue {
    /// UTF-8 text.
    Text(String),
    /// Bytes, base64-encoded.
    Bytes {
        /// The bytes in base64.
        base64: String,
    },
}

impl CellValue {
    /// The bytes to store, or why the base64 is not valid.
    pub fn to_bytes(&self) -> Result<std::borrow::Cow<'_, [u8]>, String> {
        match self {
            CellValue::Text(s) => Ok(std::borrow::Cow::Borrowed(s.as_bytes())),
            CellValue::Bytes { base64 } => decode_base64(base64).map(std::borrow::Cow::Owned),
        }
    }
}

impl From<&str> for CellValue {
    fn from(s: &str) -> CellValue {
        CellValue::Text(s.to_owned())
    }
}

impl From<String> for CellValue {
    fn from(s: String) -> CellValue {
        CellValue::Text(s)
    }
}

/// Decodes standard base64 (RFC 4648 section 4), with or without padding; the error says what
/// is wrong and where.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, String> {
    use base64::Engine as _;
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    LENIENT.decode(text).map_err(|e| format!("not base64: {e}"))
}

/// Encodes bytes as standard base64 (RFC 4648 section 4, padded): what [`decode_base64`] reads.
pub fn encode_base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `POST /v1/load/begin`: where does the load of this file stand? Writes nothing.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadBeginRequest {
    /// Target table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// The load's base id: hex SHA-256 of `table + "\n" + file bytes`, first 16 bytes.
    #[schemars(pattern(LOAD_ID_PATTERN))]
    pub id: String,
    /// The file (for the checkpoint record and messages).
    pub file: String,
    /// Records in the file.
    pub total: u64,
    /// How the file is read (format, key, family): a resumed load must read it the same way.
    pub options: String,
    /// Load it again even if it was loaded completely before.
    pub again: bool,
    /// Every column the load writes (checked against weak-notify bindings before anything is
    /// written).
    #[schemars(inner(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN)))]
    pub columns: Vec<String>,
}

/// What a load is to do: the answer to [`LoadBeginRequest`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LoadPlan {
    /// The load id to use for the batches (the base id, with `-N` for the Nth `--again`).
    pub id: String,
    /// Records already loaded: the next batch starts here.
    pub start: u64,
    /// Records in the file.
    pub total: u64,
    /// `new`, `resume` or `done`.
    pub state: LoadState,
}

/// Where a load stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LoadState {
    /// Nothing loaded yet.
    New,
    /// Interrupted: `start` records are in.
    Resume,
    /// Loaded completely before.
    Done,
}

/// `POST /v1/load`: one batch, written in one transaction together with the load's checkpoint
/// (`_loads/<id>`), and only if the checkpoint says these records are not in yet. Sending a
/// batch twice (a retry after a lost response) writes it once.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadBatch {
    /// Target table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// The load id ([`LoadPlan::id`]).
    #[schemars(pattern(LOAD_GENERATION_ID_PATTERN))]
    pub id: String,
    /// The file (recorded in the checkpoint).
    pub file: String,
    /// As in [`LoadBeginRequest::options`].
    pub options: String,
    /// Index of the batch's first record in the file.
    pub start: u64,
    /// Records in the file.
    pub total: u64,
    /// The records.
    #[schemars(length(min = 1))]
    pub records: Vec<LoadRecord>,
}

/// The answer to [`LoadBatch`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct LoadProgress {
    /// Records of the file loaded now (the checkpoint).
    pub done: u64,
    /// Records in the file.
    pub total: u64,
    /// True if the checkpoint was already past this batch (nothing written).
    pub skipped: bool,
    /// Records of this batch written by this request (fewer than the batch's when another
    /// run of the same load wrote some of them first; 0 when skipped).
    pub written: u64,
}

/// `GET /v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct StatusReport {
    /// The running host, if one serves the store.
    pub host: Option<HostReport>,
    /// The store.
    pub store: StoreReport,
    /// Why the configuration does not load, when the command line read the store file without
    /// a host (loads are refused then). Never sent by a host: it reports a rejected reload as
    /// [`HostReport::last_error`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_error: Option<String>,
}

/// Store-level status (known with or without a host).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct StoreReport {
    /// The store: its file, or its Redis namespace and cluster.
    pub path: String,
    /// Set while the store refuses writes (read-only: the disk is full, or an I/O error); it
    /// clears by itself once a write succeeds again. Observer runs wait meanwhile, counted
    /// neither as failures nor as dead letters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_failure: Option<StorageFailureReport>,
    /// Pending notify cells (counted up to [`StoreReport::pending_capped`]).
    pub pending_notifications: u64,
    /// True if there are at least `pending_notifications` (counting stopped there).
    pub pending_capped: bool,
    /// Dead letters.
    pub dead_letters: u64,
    /// The bindings the store's registry holds: every writer (any host, a load) sets their
    /// notify cells, and each host runs those it has a component for.
    #[serde(default)]
    pub registered: Vec<RegisteredBinding>,
    /// Bytes the store takes on disk (the redb file's size); none where it is not known
    /// (Redis). `/metrics`: `percolator_store_size_bytes`.
    #[serde(default)]
    pub size_bytes: Option<u64>,
    /// Versions (write records and staged values) garbage collection removed, over the store's
    /// life (the `gc_versions_removed` counter).
    #[serde(default)]
    pub versions_collected: u64,
    /// Partitions ("buckets") of the notify group that scanners share out (Redis: its buckets;
    /// redb: one).
    #[serde(default)]
    pub notify_buckets: u32,
    /// The live workers (hosts, and command lines that opened the store) with their shares of
    /// the notify buckets. `/metrics`: `percolator_worker_notify_buckets`.
    #[serde(default)]
    pub workers: Vec<WorkerReport>,
    /// Pinned snapshots (`snapshot --ttl`): GC keeps what reads at them need until they
    /// expire (expired ones are listed until a GC pass removes them).
    #[serde(default)]
    pub pins: Vec<PinReport>,
    /// GC's persisted safepoint: reads at a snapshot below it are refused (0: no GC ran).
    #[serde(default)]
    pub gc_safepoint: u64,
    /// The change log: the logged columns as `table/column` (`[[changes]]` and every sink's).
    #[serde(default)]
    pub logged_columns: Vec<String>,
    /// The change log keeps only changes committed above this (0: nothing trimmed yet).
    #[serde(default)]
    pub changes_trimmed_to: u64,
    /// The change-feed subscriptions (one per sink): trimming never passes their positions.
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionReport>,
    /// The combined columns (`[[combine]]`) as `table/column (op type)`.
    #[serde(default)]
    pub combined_columns: Vec<String>,
    /// Folds of combined cells that committed, over the store's life.
    #[serde(default)]
    pub combine_folds: u64,
    /// Deltas those folds folded into their totals.
    #[serde(default)]
    pub combine_deltas_folded: u64,
}

/// A change-feed subscription in [`StoreReport`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SubscriptionReport {
    /// Its name (the sink's).
    pub name: String,
    /// Every change committed at or below it was delivered; none while it delivered nothing.
    pub position: Option<u64>,
    /// The worker that delivers it, if one claimed it.
    pub owner: Option<u64>,
}

/// `POST /v1/snapshot`: the current timestamp, or with `ttl_secs` a pin of it (or of `at`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// Pin the snapshot for this many seconds (1 to a week): GC keeps what reads at it need.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub ttl_secs: Option<u64>,
    /// Pin this snapshot instead of the current timestamp (with `ttl_secs` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub at: Option<u64>,
}

/// The answer to [`SnapshotRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotReport {
    /// The snapshot: read at it with `at` (`get`, `scan`).
    pub ts: u64,
    /// The pin, when `ttl_secs` was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin: Option<PinReport>,
}

/// `POST /v1/snapshot/renew`: extends a pin.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinRenewRequest {
    /// The pin's id.
    pub id: u64,
    /// It expires this many seconds from now (1 to a week).
    #[schemars(range(min = 1, max = 604_800))]
    pub ttl_secs: u64,
}

/// `POST /v1/snapshot/release`: ends a pin.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinReleaseRequest {
    /// The pin's id.
    pub id: u64,
}

/// A pinned snapshot.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct PinReport {
    /// Its id (for renewing and releasing it).
    pub id: u64,
    /// The snapshot it keeps.
    pub ts: u64,
    /// When it stops keeping it, unless renewed (RFC 3339).
    pub expires: String,
    /// True once it has expired (GC no longer keeps its snapshot).
    #[serde(default)]
    pub expired: bool,
}

/// A live worker of the store: a host, or a command line that opened the store itself.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerReport {
    /// Its id (a timestamp from the oracle, taken when it opened the store).
    pub id: u64,
    /// True for the one that answers.
    pub this: bool,
    /// True if it runs scanners (only those take a share of the notify buckets).
    pub scanning: bool,
    /// Notify buckets its scanners walk.
    pub buckets: u32,
}

/// A histogram as Prometheus exports one: cumulative counts at upper bounds.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Histogram {
    /// The buckets' upper bounds in seconds (Prometheus's `le`), increasing; the last,
    /// unbounded bucket (`+Inf`) is not listed.
    pub le_secs: Vec<f64>,
    /// Observations at or below each bound (cumulative), then all of them (`+Inf`): one more
    /// than `le_secs`.
    pub cumulative: Vec<u64>,
    /// The sum of the observations, seconds.
    pub sum_secs: f64,
}

/// A binding in the store's registry.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RegisteredBinding {
    /// Binding (and observer) name.
    pub name: String,
    /// Observed table.
    pub table: String,
    /// Observed column.
    pub column: String,
    /// `strong` or `weak`.
    pub kind: String,
}

/// What a running host reports.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HostReport {
    /// The API's base URL.
    pub url: String,
    /// The host's process id.
    pub pid: u32,
    /// When it started (RFC 3339, UTC).
    pub started_at: String,
    /// Successful pipeline loads (1 after start-up, +1 per applied reload).
    pub generation: u64,
    /// When the current generation was loaded.
    pub loaded_at: Option<String>,
    /// Why the last reload was rejected, if it was.
    pub last_error: Option<String>,
    /// Components being compiled for a reload now; the current generation serves meanwhile.
    #[serde(default)]
    pub compiling: Vec<CompilingReport>,
    /// Loaded bindings.
    pub bindings: Vec<BindingReport>,
    /// Rates over the last seconds.
    pub throughput: Throughput,
    /// The store's counters by name (`percolator_store::Metrics::counters`): totals over the
    /// store's life, except `backend_*` (since the store was opened).
    pub metrics: std::collections::BTreeMap<String, u64>,
    /// The configuration's sinks (`[[sink]]`) as this host runs them.
    #[serde(default)]
    pub sinks: Vec<SinkReport>,
}

/// A sink: where the changes of some columns are delivered, each change's effect exactly once.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SinkReport {
    /// Its name (also its subscription's in the store).
    pub name: String,
    /// `postgres`, `jsonl` or `webhook`.
    pub kind: String,
    /// Where it delivers: the PostgreSQL database and table, the file, or the URL without its
    /// query (never a password).
    pub destination: String,
    /// The store table.
    pub table: String,
    /// The store columns it delivers.
    pub columns: Vec<String>,
    /// True if this host owns the sink's subscription and so delivers; with several hosts on
    /// one store exactly one live host does.
    pub owner: bool,
    /// The owning worker's id, when known.
    pub owner_id: Option<u64>,
    /// The subscription's position (a commit timestamp): every change committed at or below it
    /// has been acknowledged by the destination. `/metrics`: `percolator_sink_position`.
    pub position: Option<u64>,
    /// Seconds behind: 0 when the last read of the change feed found nothing new, else the time
    /// since one did (none before the first read; only the owner reads). `/metrics`:
    /// `percolator_sink_lag_seconds`.
    pub lag_secs: Option<f64>,
    /// Changes delivered (acknowledged) by this host since it started. `/metrics`:
    /// `percolator_sink_delivered_total`.
    pub delivered: u64,
    /// Batches delivered by this host since it started.
    pub batches: u64,
    /// Changes delivered per second over the last 10 s.
    pub delivered_per_sec: f64,
    /// The last error, while deliveries fail (cleared by the next success; a parked batch's
    /// stays until then).
    pub last_error: Option<String>,
    /// When it happened (RFC 3339, UTC).
    pub last_error_at: Option<String>,
    /// Failed attempts since the last success. `/metrics`: `percolator_sink_failures`.
    pub failures: u64,
    /// Batches the destination refused for good (a webhook's 4xx), kept in files beside the
    /// store. `/metrics`: `percolator_sink_dead_letters`.
    #[serde(default)]
    pub dead_letters: Vec<SinkDeadLetterReport>,
}

/// A batch a sink's destination refused, parked.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SinkDeadLetterReport {
    /// Its id among the sink's parked batches (`<first ts>-<last ts>`, zero-padded), for
    /// [`SinkDeadLetterRequest`].
    #[serde(default)]
    pub id: String,
    /// The file holding the batch (its changes as JSON) and the answer.
    pub file: String,
    /// The commit timestamp of its first change.
    pub first_ts: u64,
    /// The commit timestamp of its last change.
    pub last_ts: u64,
    /// Changes in it.
    pub changes: u64,
    /// The destination's answer.
    pub error: String,
}

/// `POST /v1/sinks/dead-letters`: send a parked batch of a sink again, or discard it.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SinkDeadLetterRequest {
    /// The sink.
    #[schemars(length(min = 1, max = 64))]
    pub sink: String,
    /// The parked batch ([`SinkDeadLetterReport::id`]).
    #[schemars(length(min = 1, max = 64))]
    pub id: String,
    /// `retry`: deliver it once more now (kept if the destination refuses it again); `discard`:
    /// delete it.
    pub action: SinkDeadLetterAction,
}

/// What to do with a parked batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SinkDeadLetterAction {
    /// Deliver it again (out of order: its changes are older than the sink's position).
    Retry,
    /// Delete it.
    Discard,
}

/// What became of a parked batch.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SinkDeadLetterResponse {
    /// True if the destination acknowledged it (retry) or it was deleted (discard): it is gone.
    pub removed: bool,
    /// Changes in it.
    pub changes: u64,
}

/// A dry run of a candidate version of a binding's component on existing rows.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReplayRequest {
    /// The binding whose current version the candidate is compared with (its access rules,
    /// limits and parameters apply to both).
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN))]
    pub binding: String,
    /// The candidate component: a path the host can read (the command line sends it absolute).
    #[schemars(length(min = 1))]
    pub wasm: String,
    /// Row keys to replay on (text); empty: the first `limit` rows of the binding's table that
    /// have a value in its column.
    #[serde(default)]
    pub rows: Vec<String>,
    /// How many rows when `rows` is empty (default 20, at most 1,000).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_REPLAY_ROWS))]
    pub limit: Option<u32>,
}

/// Most rows one replay runs on.
pub const MAX_REPLAY_ROWS: u32 = 1000;
/// Rows a replay runs on when neither rows nor a limit are given.
pub const DEFAULT_REPLAY_ROWS: u32 = 20;

/// What a replay found: per row, the cells the candidate would write differently from the
/// current version. Nothing was committed.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReplayReport {
    /// The binding.
    pub binding: String,
    /// Its observed table.
    pub table: String,
    /// Its observed column.
    pub column: String,
    /// SHA-256 of the current version's component.
    pub current_hash: String,
    /// SHA-256 of the candidate component.
    pub candidate_hash: String,
    /// One entry per row replayed, in row order.
    pub rows: Vec<RowReplay>,
    /// Rows where the two versions write differently (a failure of one of them included).
    pub changed_rows: u64,
    /// Rows where they write the same cells with the same values.
    pub identical_rows: u64,
    /// Cells only the candidate writes.
    pub cells_added: u64,
    /// Cells both write, with different values (or one deletes).
    pub cells_changed: u64,
    /// Cells only the current version writes.
    pub cells_removed: u64,
}

/// One row of a replay.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RowReplay {
    /// The row key (UTF-8, invalid sequences replaced).
    pub row: String,
    /// The row key, hex.
    pub row_hex: String,
    /// Why the current version's run failed, if it did.
    pub current_error: Option<String>,
    /// Why the candidate's run failed, if it did.
    pub candidate_error: Option<String>,
    /// The cells written differently.
    pub cells: Vec<CellChange>,
    /// Cells both versions write identically.
    pub identical_cells: u64,
}

/// A cell one version writes differently from the other.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CellChange {
    /// `added` (only the candidate writes it), `changed` (both, differently) or `removed`
    /// (only the current version writes it).
    pub change: String,
    /// Table.
    pub table: String,
    /// Row key (UTF-8, invalid sequences replaced).
    pub row: String,
    /// Column.
    pub column: String,
    /// What the current version writes: a value preview, `(deleted)`, or none.
    pub current: Option<String>,
    /// What the candidate writes.
    pub candidate: Option<String>,
}

/// A component being compiled.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompilingReport {
    /// The binding it is for.
    pub binding: String,
    /// The component file.
    pub wasm: String,
    /// Milliseconds it has been compiling.
    pub elapsed_ms: u64,
    /// Which of the configuration's components it is (1-based).
    #[serde(default)]
    pub index: u32,
    /// How many components the configuration has.
    #[serde(default)]
    pub total: u32,
}

/// One loaded binding.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct BindingReport {
    /// Binding (and observer) name.
    pub name: String,
    /// Observed table.
    pub table: String,
    /// Observed column.
    pub column: String,
    /// `strong` or `weak`.
    pub kind: String,
    /// The columns it may write or weakly notify, as declared (`writes` in the configuration):
    /// `table/column`, or `table/family:*` for every column of a family. The pipeline's edges:
    /// a run may change these, and so notify their observers.
    #[serde(default)]
    pub writes: Vec<String>,
    /// The component file.
    pub wasm: String,
    /// SHA-256 of the component, hex.
    pub source_hash: String,
    /// When this version was loaded (RFC 3339, UTC).
    pub loaded_at: String,
    /// Runs of the binding (all its versions) over the store's life: every call of its
    /// component, **lost and failed ones included** (`runs = committed + lost_to_conflict +
    /// failures`, up to the runs under way while the counts were read, and a run lost to a
    /// conflict before its component was called, which counts only in `lost_to_conflict`). A
    /// host saves the counts every 10 s and when it stops, and the next host on the store
    /// continues them (a host killed without a clean stop loses the last seconds' counts).
    /// `/metrics`: `percolator_observer_runs_total`.
    pub runs: u64,
    /// Runs that committed, over the store's life like `runs` (counted from the version that
    /// added it on): the only successful runs. `/metrics`: `percolator_observer_committed_total`.
    #[serde(default)]
    pub committed: u64,
    /// Runs lost to a conflict, over the store's life like `committed`: another transaction
    /// wrote or locked a cell the run read or wrote, so nothing of the run is visible and the
    /// notification runs again after a short backoff (never a failure, never a dead letter).
    /// Which cells: `percolator hot-rows`. `/metrics`: `percolator_observer_conflicts_total`.
    #[serde(default)]
    pub lost_to_conflict: u64,
    /// The same as `committed` (kept for readers of earlier versions, where it counted every
    /// run that did not fail, runs lost to a conflict included). `/metrics`:
    /// `percolator_observer_successes_total`.
    #[serde(default)]
    pub successes: u64,
    /// Failed runs (trap, deadline, error, denied access; conflicts excluded), over the store's
    /// life like `runs`. `/metrics`: `percolator_observer_failures_total`.
    pub failures: u64,
    /// Failed runs in the last 60 s on this host: whether the binding fails now (the
    /// dashboard draws it as failing while this is above 0, or while it has a dead letter),
    /// where `failures` keeps every failure of the store's life.
    #[serde(default)]
    pub failures_last_minute: u64,
    /// Mean wall-clock time of a run, milliseconds, over the store's life like `runs` (none
    /// before the first run).
    pub mean_run_ms: Option<f64>,
    /// CPU time of the runs, seconds, over the store's life like `runs` (from the version that
    /// saves it on): of the thread that ran each, from taking a warm instance (or making one)
    /// to putting it back — the guest, its reads and writes, its output logged; not the commit
    /// after it. Where a pipeline's
    /// CPU goes, observer by observer. `/metrics`: `percolator_observer_run_cpu_seconds_total`.
    #[serde(default)]
    pub run_cpu_s: f64,
    /// Median run time, milliseconds: estimated from the run-time histogram `/metrics`
    /// exports (`percolator_observer_run_seconds`, buckets 50 µs to 60 s) as Prometheus's
    /// `histogram_quantile` does, by linear interpolation inside the bucket. The histogram is
    /// saved and continued like `runs`, so it covers the store's life too (from the version
    /// that saves it on: a store saved by an earlier one has none of its earlier runs in it);
    /// none before the first run it holds.
    pub p50_run_ms: Option<f64>,
    /// 90th percentile of the run time, milliseconds (estimated like `p50_run_ms`).
    pub p90_run_ms: Option<f64>,
    /// 99th percentile of the run time, milliseconds (estimated like `p50_run_ms`): the slow
    /// runs a mean hides.
    pub p99_run_ms: Option<f64>,
    /// Freshness: for each committed run since the host started, the time from the change it
    /// ran on to the run's commit. The change is the later of the newest write its snapshot saw
    /// (strong) and its notification: a notification made after the write (`notify`,
    /// `notify --rerun`, a retried dead letter) counts from itself, not from the old write.
    /// Since the host started: a restarted host starts an empty histogram. Commit times come
    /// from the oracle's timestamps, which the host samples with the time it got them (within
    /// about a millisecond for its own commits, a second for other hosts'). `/metrics`:
    /// `percolator_observer_freshness_seconds`.
    #[serde(default)]
    pub freshness: Histogram,
    /// Committed runs since the host started whose change is older than the host's samples of
    /// the oracle (committed before the host started, or over an hour before the run): not in
    /// `freshness`.
    #[serde(default)]
    pub freshness_untimed: u64,
    /// Median freshness, milliseconds (from `freshness` as `p50_run_ms` is from run times).
    #[serde(default)]
    pub freshness_p50_ms: Option<f64>,
    /// 99th percentile of the freshness, milliseconds.
    #[serde(default)]
    pub freshness_p99_ms: Option<f64>,
    /// Pending notifications of the observed column.
    pub backlog: u64,
    /// True if counting stopped at the cap (the backlog is at least `backlog`).
    pub backlog_capped: bool,
}

/// Rates over the last [`Throughput::window_secs`] seconds, up to the request.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Throughput {
    /// The window actually covered (shorter just after start-up).
    pub window_secs: f64,
    /// Committed observer runs per second.
    pub observer_runs_per_sec: f64,
    /// Commits per second.
    pub commits_per_sec: f64,
    /// Conflicts per second.
    pub conflicts_per_sec: f64,
    /// Timestamps the oracle handed this host per second (its share of the oracle's rate).
    #[serde(default)]
    pub timestamps_per_sec: f64,
    /// Observer runs per second that met a failure of the store itself (a full disk, a server
    /// out of reach, a lapsed lease) and wait to run again: not the observers' failures
    /// (`percolator_store::Metrics::observer_store_failures`).
    #[serde(default)]
    pub store_failures_per_sec: f64,
}

/// `GET /v1/samples`: the host's samples of its counters, one a second over the last 5
/// minutes (the ring its throughput is computed from), oldest first.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct SamplesReport {
    /// The host's clock when it answered, milliseconds since the Unix epoch: a client whose
    /// clock differs places the samples on its own by the difference.
    pub now_unix_ms: u64,
    /// The samples, oldest first (empty without a host: nothing samples the store then).
    pub samples: Vec<CounterSample>,
}

/// One sample of [`SamplesReport`]: the store's counters (totals, as in `status`'s
/// `host.metrics`) and the backlog at one instant.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct CounterSample {
    /// When it was taken, milliseconds since the Unix epoch (the host's clock).
    pub unix_ms: u64,
    /// Pending notifications, counted up to the cap of `status` (see `pending_capped`); none
    /// if they were not counted for this sample (the host spends at most a twentieth of a
    /// thread's time counting them: after a slow count it skips some samples) or counting
    /// failed.
    pub pending_notifications: Option<u64>,
    /// True if counting stopped at the cap (there were at least `pending_notifications`).
    pub pending_capped: bool,
    /// Commits (`metrics.commits`).
    pub commits: u64,
    /// Committed observer runs (`metrics.observer_runs`).
    pub observer_runs: u64,
    /// Conflicts (`metrics.conflicts`).
    pub conflicts: u64,
    /// Timestamps the oracle handed this host (`metrics.oracle_timestamps`).
    pub oracle_timestamps: u64,
}

/// One dead letter (`GET /v1/dead-letters` answers a list of them).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeadLetterReport {
    /// Its id (for `retry`).
    pub id: String,
    /// The notified cell as `table/row/column`.
    pub cell: String,
    /// Table.
    pub table: String,
    /// Row (UTF-8, invalid sequences replaced).
    pub row: String,
    /// Column.
    pub column: String,
    /// The observer that failed.
    pub observer: String,
    /// Failed runs.
    pub attempts: u32,
    /// The last error.
    pub error: String,
    /// When it was dead-lettered (RFC 3339, UTC).
    pub time: String,
}

/// `POST /v1/hot-rows`: the cells observer runs lost the most conflicts on lately.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HotRowsRequest {
    /// The window, in minutes up to now (the current minute counts as one; 1 to
    /// [`MAX_HOT_ROWS_MINUTES`]; default [`DEFAULT_HOT_ROWS_MINUTES`]).
    #[serde(default = "default_hot_rows_minutes")]
    #[schemars(range(min = 1, max = 10))]
    pub minutes: u32,
    /// The most cells answered (1 to [`MAX_HOT_ROWS_LIMIT`]; default [`DEFAULT_HOT_ROWS_LIMIT`]).
    #[serde(default = "default_hot_rows_limit")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: u32,
}

impl Default for HotRowsRequest {
    fn default() -> HotRowsRequest {
        HotRowsRequest { minutes: DEFAULT_HOT_ROWS_MINUTES, limit: DEFAULT_HOT_ROWS_LIMIT }
    }
}

/// The `minutes` of a [`HotRowsRequest`] that gives none.
pub const DEFAULT_HOT_ROWS_MINUTES: u32 = 5;
/// The longest window of a [`HotRowsRequest`]: what the host keeps.
pub const MAX_HOT_ROWS_MINUTES: u32 = percolator_store::HOT_ROWS_MINUTES;
/// The `limit` of a [`HotRowsRequest`] that gives none.
pub const DEFAULT_HOT_ROWS_LIMIT: u32 = 20;
/// The largest `limit` of a [`HotRowsRequest`].
pub const MAX_HOT_ROWS_LIMIT: u32 = 1000;

fn default_hot_rows_minutes() -> u32 {
    DEFAULT_HOT_ROWS_MINUTES
}

fn default_hot_rows_limit() -> u32 {
    DEFAULT_HOT_ROWS_LIMIT
}

/// The answer to [`HotRowsRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HotRowsReport {
    /// The window, in minutes.
    pub minutes: u32,
    /// False when no host runs observers on the store (the command line opened the file): only
    /// a host's runs conflict, so the list is empty.
    pub host: bool,
    /// The cells, most conflicts first; empty when no run lost to a conflict in the window.
    pub rows: Vec<HotRowReport>,
}

/// One cell observer runs lost conflicts on.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HotRowReport {
    /// The cell as `table/row/column`.
    pub cell: String,
    /// Table.
    pub table: String,
    /// Row (UTF-8, invalid sequences replaced).
    pub row: String,
    /// Row, hex (exact).
    pub row_hex: String,
    /// Column.
    pub column: String,
    /// Runs lost to a conflict on it in the window (this host's runs).
    pub conflicts: u64,
    /// The bindings whose runs lost, most first.
    pub observers: Vec<HotRowObserver>,
    /// When the last of them lost (RFC 3339, UTC).
    pub last_at: String,
}

/// A binding's runs lost on one hot cell.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct HotRowObserver {
    /// The binding.
    pub observer: String,
    /// Its runs lost to a conflict on the cell in the window.
    pub conflicts: u64,
}

/// `POST /v1/dead-letters/retry`: one id, or all.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// The dead letter to retry.
    #[serde(default)]
    pub id: Option<String>,
    /// Retry every dead letter.
    #[serde(default)]
    pub all: bool,
}

/// `POST /v1/dead-letters/discard`: which dead letters to remove for good (exactly one of
/// the four).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscardRequest {
    /// The dead letter to discard.
    #[serde(default)]
    pub id: Option<String>,
    /// Every dead letter of this binding (observer).
    #[serde(default)]
    pub binding: Option<String>,
    /// Every dead letter of `(unbound)`: notifications whose binding was removed.
    #[serde(default)]
    pub unbound: bool,
    /// Every dead letter.
    #[serde(default)]
    pub all: bool,
}

/// The answer to [`DiscardRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DiscardResponse {
    /// The ids removed.
    pub discarded: Vec<String>,
}

/// The answer to [`RetryRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct RetryResponse {
    /// The ids moved back to pending.
    pub retried: Vec<String>,
    /// True if a reload was under way or coming (a changed configuration or component not yet
    /// applied): the retried notifications may run on the versions before it.
    #[serde(default)]
    pub reload_pending: bool,
    /// The bindings whose new version was compiling.
    #[serde(default)]
    pub compiling: Vec<String>,
}

/// The answer to `POST /v1/gc`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GcReport {
    /// Versions at or below this timestamp were considered.
    pub safepoint: u64,
    /// Rows examined.
    pub rows: u64,
    /// Abandoned locks resolved.
    pub locks_resolved: u64,
    /// Versions removed.
    pub versions_removed: u64,
    /// A live lock below the safepoint deferred removal.
    pub deferred: bool,
}

/// `POST /v1/wait`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    /// Give up after this many seconds (0 to [`MAX_WAIT_SECS`]; default [`DEFAULT_WAIT_SECS`]).
    #[serde(default = "default_wait_secs")]
    #[schemars(range(min = 0, max = 3600))]
    pub timeout_secs: f64,
}

/// The answer to [`WaitRequest`].
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WaitResponse {
    /// True if the pipeline reached its fixed point (no notification pending, no run going,
    /// no reload under way or coming).
    pub quiescent: bool,
    /// True if it timed out while a reload was under way or coming (a changed configuration
    /// file or component, not yet compiled and applied).
    #[serde(default)]
    pub reload_pending: bool,
}

/// The `limit` of a [`ChangesRequest`] that gives none.
pub const DEFAULT_CHANGES_LIMIT: usize = 1000;
/// The longest [`ChangesRequest::wait_secs`].
pub const MAX_CHANGES_WAIT_SECS: f64 = 60.0;

/// `POST /v1/changes`: the next page of the change feed.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesRequest {
    /// Table.
    #[schemars(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN))]
    pub table: String,
    /// Only these columns (default: every logged column of the table); each must be logged.
    #[serde(default)]
    #[schemars(length(min = 1), inner(length(min = 1, max = percolator_store::MAX_NAME_LEN), pattern(NAME_PATTERN)))]
    pub columns: Option<Vec<String>>,
    /// Resume after this position: the [`ChangesResponse::next`] of the previous page (default:
    /// from the oldest change the log keeps).
    #[serde(default)]
    pub since: Option<String>,
    /// At most about this many changes (1 to 100000; a transaction is never split).
    #[serde(default = "default_changes_limit")]
    #[schemars(range(min = 1, max = 100_000))]
    pub limit: usize,
    /// Wait up to this many seconds for a change when there is none yet (0 to 60; default 0).
    #[serde(default)]
    #[schemars(range(min = 0, max = 60))]
    pub wait_secs: f64,
}

fn default_changes_limit() -> usize {
    DEFAULT_CHANGES_LIMIT
}

/// One committed change, as the feed and the sinks print it: the value as text when its bytes
/// are UTF-8, else base64; or `deleted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangeRecord {
    /// Table.
    pub table: String,
    /// Row key, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<String>,
    /// Row key in base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_base64: Option<String>,
    /// Column.
    pub column: String,
    /// The new value, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The new value in base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_base64: Option<String>,
    /// True when the change deleted the cell.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deleted: bool,
    /// The commit timestamp of the transaction that made it.
    pub commit_ts: u64,
}

impl ChangeRecord {
    /// The record of a change from the store.
    pub fn of(change: &percolator_store::Change) -> ChangeRecord {
        use base64::Engine as _;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let (row, row_base64) = match std::str::from_utf8(&change.cell.row) {
            Ok(s) => (Some(s.to_owned()), None),
            Err(_) => (None, Some(b64(&change.cell.row))),
        };
        let (value, value_base64) = match change.value.as_deref().map(std::str::from_utf8) {
            None => (None, None),
            Some(Ok(s)) => (Some(s.to_owned()), None),
            Some(Err(_)) => (None, change.value.as_deref().map(b64)),
        };
        ChangeRecord {
            table: change.cell.table.clone(),
            row,
            row_base64,
            column: change.cell.column.clone(),
            value,
            value_base64,
            deleted: change.value.is_none(),
            commit_ts: change.commit_ts.raw(),
        }
    }
}

/// The answer to [`ChangesRequest`].
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ChangesResponse {
    /// Committed changes in commit-timestamp order.
    pub changes: Vec<ChangeRecord>,
    /// The position after them: resume with `since` = this; nothing is missed or repeated.
    pub next: String,
    /// True when the page stopped at its `limit`: more changes can be read at once. False:
    /// caught up (to the resolved timestamp).
    #[serde(default)]
    pub more: bool,
}
