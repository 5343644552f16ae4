//! The pipeline's state and upkeep: health, status, the host's samples, dead letters and their
//! retry, hot rows, gc, wait.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use percolator_api::endpoint::{DeadLetters, Discard, Gc, Health, HotRows, Retry, Samples, Status, Wait};
use percolator_api::text::rfc3339;
use percolator_api::{
    ApiError, ApiResult, BindingReport, CompilingReport, DeadLetterReport, DiscardRequest, DiscardResponse, Empty,
    GcReport, HealthReport, Histogram, HostReport, HotRowObserver, HotRowReport, HotRowsReport, HotRowsRequest,
    MAX_HOT_ROWS_LIMIT, MAX_HOT_ROWS_MINUTES, MAX_WAIT_SECS, RegisteredBinding, RetryRequest, RetryResponse,
    SamplesReport, SinkDeadLetterReport, SinkReport, StatusReport, StorageFailureReport, StoreReport,
    SubscriptionReport, WaitRequest, WaitResponse, WorkerReport,
};
use percolator_store::{FRESHNESS_BUCKETS, FreshnessCounts, StorageFailure, Store, histogram_quantile};

use super::{Context, HostContext, Op};

/// Pending notifications are counted up to this many (status, `/metrics`).
pub const BACKLOG_CAP: usize = 100_000;

impl Op for Health {
    fn run(cx: &Context, _: Empty) -> ApiResult<HealthReport> {
        let path = cx.store_path.as_path();
        let store = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let store_failure = cx.store.storage_failure().map(|f| storage_failure_report(&f));
        Ok(HealthReport {
            ok: store_failure.is_none(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            store: store.display().to_string(),
            store_failure,
        })
    }
}

/// Why the store refuses writes, for `/health` and `status`.
pub fn storage_failure_report(f: &StorageFailure) -> StorageFailureReport {
    StorageFailureReport {
        error: f.error.to_string(),
        disk_full: f.error.is_disk_full(),
        since: rfc3339(f.since),
        probes: f.probes,
    }
}

/// Pending notifications, counted up to [`BACKLOG_CAP`].
pub struct Backlog {
    /// Per notified `(table, column)`.
    pub per_column: HashMap<(String, String), u64>,
    /// In all.
    pub total: u64,
    /// True if counting stopped at the cap (there may be more).
    pub capped: bool,
}

impl Backlog {
    /// Pending notifications of one column.
    pub fn of(&self, table: &str, column: &str) -> u64 {
        self.per_column.get(&(table.to_owned(), column.to_owned())).copied().unwrap_or(0)
    }
}

/// Counts the pending notifications.
pub fn backlog(store: &Store) -> ApiResult<Backlog> {
    let pending = store.pending_notifications(BACKLOG_CAP)?;
    let mut per_column: HashMap<(String, String), u64> = HashMap::new();
    for e in &pending {
        *per_column.entry((e.cell.table.clone(), e.cell.column.clone())).or_default() += 1;
    }
    Ok(Backlog { per_column, total: pending.len() as u64, capped: pending.len() >= BACKLOG_CAP })
}

/// The store's status, and the host's when one runs here.
impl Op for Status {
    /// The store's status, and the host's when one runs here (with the configuration's
    /// problem on the no-host route).
    fn run(cx: &Context, _: Empty) -> ApiResult<StatusReport> {
        let mut s = status(&cx.store, &cx.store_name, cx.host.as_deref())?;
        s.config_error = cx.config_error.as_deref().map(str::to_owned);
        Ok(s)
    }
}

fn status(store: &Store, store_name: &str, host: Option<&HostContext>) -> ApiResult<StatusReport> {
    let backlog = backlog(store)?;
    let dead_letters = store.dead_letters()?.len() as u64;
    let metrics = store.metrics();
    let workers = store.workers()?;
    let host = host.map(|h| {
        let s = h.pipeline.status();
        let freshness = store.freshness();
        let bindings = s
            .bindings
            .iter()
            .map(|b| {
                let f = freshness.get(&b.name).copied().unwrap_or_default();
                let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
                BindingReport {
                    name: b.name.clone(),
                    table: b.table.clone(),
                    column: b.column.clone(),
                    kind: b.kind.to_string(),
                    writes: b.writes.clone(),
                    wasm: b.wasm.display().to_string(),
                    source_hash: b.source_hash.clone(),
                    loaded_at: rfc3339(b.loaded_at),
                    runs: b.counts.runs,
                    committed: b.settled.committed,
                    lost_to_conflict: b.settled.lost_to_conflict,
                    successes: b.settled.committed,
                    failures: b.counts.failures,
                    failures_last_minute: b.counts.failures_last_minute,
                    mean_run_ms: (b.counts.runs > 0)
                        .then(|| b.counts.run_time.as_secs_f64() * 1000.0 / b.counts.runs as f64),
                    run_cpu_s: b.counts.cpu_time.as_secs_f64(),
                    p50_run_ms: ms(b.counts.p50),
                    p90_run_ms: ms(b.counts.p90),
                    p99_run_ms: ms(b.counts.p99),
                    freshness: freshness_histogram(&f),
                    freshness_untimed: f.untimed,
                    freshness_p50_ms: ms(histogram_quantile(&FRESHNESS_BUCKETS, &f.buckets, 0.5)),
                    freshness_p99_ms: ms(histogram_quantile(&FRESHNESS_BUCKETS, &f.buckets, 0.99)),
                    backlog: backlog.of(&b.table, &b.column),
                    backlog_capped: backlog.capped,
                }
            })
            .collect();
        HostReport {
            url: h.url.clone(),
            pid: std::process::id(),
            started_at: rfc3339(h.started_at),
            generation: s.generation,
            loaded_at: s.loaded_at.map(rfc3339),
            last_error: s.last_error,
            compiling: s
                .compiling
                .iter()
                .map(|c| CompilingReport {
                    binding: c.binding.clone(),
                    wasm: c.wasm.display().to_string(),
                    elapsed_ms: u64::try_from(c.elapsed.as_millis()).unwrap_or(u64::MAX),
                    index: u32::try_from(c.index).unwrap_or(u32::MAX),
                    total: u32::try_from(c.total).unwrap_or(u32::MAX),
                })
                .collect(),
            bindings,
            throughput: h.sampler.throughput_now(metrics),
            metrics: metrics_report(&metrics),
            sinks: h.pipeline.sinks().map(|s| sink_reports(&s.status())).unwrap_or_default(),
        }
    });
    Ok(StatusReport {
        host,
        store: StoreReport {
            path: store_name.to_owned(),
            store_failure: store.storage_failure().map(|f| storage_failure_report(&f)),
            pending_notifications: backlog.total,
            pending_capped: backlog.capped,
            dead_letters,
            registered: store
                .observers()
                .into_iter()
                .map(|o| RegisteredBinding { name: o.name, table: o.table, column: o.column, kind: o.kind.to_string() })
                .collect(),
            size_bytes: store.size_on_disk(),
            versions_collected: metrics.gc_versions_removed,
            notify_buckets: store.notify_partitions(),
            workers: workers
                .into_iter()
                .map(|w| WorkerReport {
                    id: w.id,
                    this: w.this,
                    scanning: w.scanning,
                    buckets: w.partitions.len() as u32,
                })
                .collect(),
            pins: store.pins()?.iter().map(super::snapshot::pin_report).collect(),
            gc_safepoint: store.persisted_safepoint()?.raw(),
            logged_columns: store.change_log().into_iter().map(|(t, c)| format!("{t}/{c}")).collect(),
            changes_trimmed_to: store.changes_trimmed_to()?.raw(),
            subscriptions: store
                .subscriptions()?
                .into_iter()
                .map(|(name, s)| SubscriptionReport {
                    name,
                    position: s.position.position().map(|p| p.raw()),
                    owner: s.owner,
                })
                .collect(),
            combined_columns: store.combined().iter().map(ToString::to_string).collect(),
            combine_folds: metrics.combine_folds,
            combine_deltas_folded: metrics.combine_deltas_folded,
        },
        config_error: None,
    })
}

/// The host's sample ring: its counters and backlog over the last minutes.
impl Op for Samples {
    /// The ring's samples; none without a host (nothing samples the store then).
    fn run(cx: &Context, _: Empty) -> ApiResult<SamplesReport> {
        Ok(match &cx.host {
            Some(h) => h.sampler.report(),
            None => SamplesReport {
                now_unix_ms: std::time::SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
                samples: Vec::new(),
            },
        })
    }
}

/// The sinks' status as the API reports it.
pub fn sink_reports(sinks: &[crate::sinks::SinkStatus]) -> Vec<SinkReport> {
    sinks
        .iter()
        .map(|s| SinkReport {
            name: s.name.clone(),
            kind: s.kind.to_owned(),
            destination: s.destination.clone(),
            table: s.table.clone(),
            columns: s.columns.clone(),
            owner: s.owner,
            owner_id: s.owner_id,
            position: s.position.map(|p| p.raw()),
            lag_secs: s.lag.map(|d| d.as_secs_f64()),
            delivered: s.delivered,
            batches: s.batches,
            delivered_per_sec: s.per_sec,
            last_error: s.last_error.clone(),
            last_error_at: s.last_error_at.map(rfc3339),
            failures: s.failures,
            dead_letters: s
                .dead_letters
                .iter()
                .map(|d| SinkDeadLetterReport {
                    id: d.id(),
                    file: d.file.display().to_string(),
                    first_ts: d.first_ts,
                    last_ts: d.last_ts,
                    changes: d.changes as u64,
                    error: d.error.clone(),
                })
                .collect(),
        })
        .collect()
}

/// A binding's freshness histogram as `/metrics` exports it (cumulative, in seconds).
pub fn freshness_histogram(f: &FreshnessCounts) -> Histogram {
    let mut cumulative = Vec::with_capacity(f.buckets.len());
    let mut sum = 0;
    for n in f.buckets {
        sum += n;
        cumulative.push(sum);
    }
    Histogram {
        le_secs: FRESHNESS_BUCKETS.iter().map(Duration::as_secs_f64).collect(),
        cumulative,
        sum_secs: f.sum.as_secs_f64(),
    }
}

/// The store's counters by name (`Metrics::counters`).
fn metrics_report(m: &percolator_store::Metrics) -> BTreeMap<String, u64> {
    m.counters().map(|c| (c.name.to_owned(), c.value)).collect()
}

/// Lists the dead letters.
impl Op for DeadLetters {
    fn run(cx: &Context, _: Empty) -> ApiResult<Vec<DeadLetterReport>> {
        dead_letters(&cx.store)
    }
}

fn dead_letters(store: &Store) -> ApiResult<Vec<DeadLetterReport>> {
    Ok(store
        .dead_letters()?
        .into_iter()
        .map(|d| {
            let row = String::from_utf8_lossy(&d.cell.row).into_owned();
            DeadLetterReport {
                cell: format!("{}/{row}/{}", d.cell.table, d.cell.column),
                table: d.cell.table,
                row,
                column: d.cell.column,
                observer: d.observer,
                attempts: d.attempts,
                error: d.error,
                time: rfc3339(UNIX_EPOCH + Duration::from_millis(d.wall_ms)),
                id: d.id,
            }
        })
        .collect())
}

/// The cells this host's observer runs lost the most conflicts on lately.
impl Op for HotRows {
    fn run(cx: &Context, r: HotRowsRequest) -> ApiResult<HotRowsReport> {
        if !(1..=MAX_HOT_ROWS_MINUTES).contains(&r.minutes) {
            return Err(ApiError::bad_input(format!(
                "minutes {} is not from 1 to {MAX_HOT_ROWS_MINUTES} (a host keeps {MAX_HOT_ROWS_MINUTES} minutes of conflicts)",
                r.minutes
            )));
        }
        if !(1..=MAX_HOT_ROWS_LIMIT).contains(&r.limit) {
            return Err(ApiError::bad_input(format!("limit {} is not from 1 to {MAX_HOT_ROWS_LIMIT}", r.limit)));
        }
        let window = Duration::from_secs(60 * u64::from(r.minutes));
        let rows = cx
            .store
            .hot_rows(window, r.limit as usize)
            .into_iter()
            .map(|h| {
                let row = String::from_utf8_lossy(&h.cell.row).into_owned();
                HotRowReport {
                    cell: h.cell.to_string(),
                    row_hex: percolator_api::text::hex(&h.cell.row),
                    table: h.cell.table,
                    row,
                    column: h.cell.column,
                    conflicts: h.conflicts,
                    observers: h
                        .observers
                        .into_iter()
                        .map(|(observer, conflicts)| HotRowObserver { observer, conflicts })
                        .collect(),
                    last_at: rfc3339(UNIX_EPOCH + Duration::from_millis(h.last_ms)),
                }
            })
            .collect();
        Ok(HotRowsReport { minutes: r.minutes, host: cx.host.is_some(), rows })
    }
}

/// Moves one dead letter (or all) back to pending.
impl Op for Retry {
    fn run(cx: &Context, r: RetryRequest) -> ApiResult<RetryResponse> {
        let mut answer = retry_dead_letters(&cx.store, &r)?;
        if let Some(host) = &cx.host {
            answer.reload_pending = host.pipeline.reload_pending();
            answer.compiling = host.pipeline.compiling_bindings();
        }
        Ok(answer)
    }
}

fn retry_dead_letters(store: &Store, r: &RetryRequest) -> ApiResult<RetryResponse> {
    let ids = match (&r.id, r.all) {
        (Some(id), false) => vec![id.clone()],
        (None, true) => store.dead_letters()?.into_iter().map(|d| d.id).collect(),
        _ => return Err(ApiError::bad_input("give either a dead letter id or all = true")),
    };
    let mut retried = Vec::new();
    for id in ids {
        store.retry_dead_letter(&id).map_err(|e| match e {
            percolator_store::Error::NotFound(_) => {
                ApiError::not_found(format!("no dead letter {id:?} (list them with `percolator dead-letters`)"))
            }
            e => ApiError::from(e),
        })?;
        retried.push(id);
    }
    Ok(RetryResponse { retried, reload_pending: false, compiling: Vec::new() })
}

/// Removes dead letters for good.
impl Op for Discard {
    fn run(cx: &Context, r: DiscardRequest) -> ApiResult<DiscardResponse> {
        let chosen = [r.id.is_some(), r.binding.is_some(), r.unbound, r.all].iter().filter(|c| **c).count();
        if chosen != 1 {
            return Err(ApiError::bad_input(
                "give exactly one of: a dead letter id, binding, unbound = true, all = true",
            ));
        }
        let ids: Vec<String> = match &r.id {
            Some(id) => vec![id.clone()],
            None => cx
                .store
                .dead_letters()?
                .into_iter()
                .filter(|d| match &r.binding {
                    Some(b) => d.observer == *b,
                    None => r.all || d.observer == percolator_store::UNBOUND,
                })
                .map(|d| d.id)
                .collect(),
        };
        let mut discarded = Vec::new();
        for id in ids {
            cx.store.discard_dead_letter(&id).map_err(|e| match e {
                percolator_store::Error::NotFound(_) => {
                    ApiError::not_found(format!("no dead letter {id:?} (list them with `percolator dead-letters`)"))
                }
                e => ApiError::from(e),
            })?;
            discarded.push(id);
        }
        Ok(DiscardResponse { discarded })
    }
}

/// Garbage-collects versions no reader can see.
impl Op for Gc {
    fn run(cx: &Context, _: Empty) -> ApiResult<GcReport> {
        let s = cx.store.gc()?;
        Ok(GcReport {
            safepoint: s.safepoint.raw(),
            rows: s.rows,
            locks_resolved: s.locks_resolved,
            versions_removed: s.versions_removed,
            deferred: s.deferred,
        })
    }
}

/// The timeout of a [`WaitRequest`], checked: a number of seconds from 0 to
/// [`MAX_WAIT_SECS`].
pub fn wait_timeout(r: &WaitRequest) -> ApiResult<Duration> {
    let t = r.timeout_secs;
    if !t.is_finite() || t < 0.0 {
        return Err(ApiError::bad_input(format!("timeout {t} is not a number of seconds")));
    }
    if t > MAX_WAIT_SECS as f64 {
        return Err(ApiError::bad_input(format!("timeout {t} s is more than the limit of {MAX_WAIT_SECS} s")));
    }
    Duration::try_from_secs_f64(t).map_err(|_| ApiError::bad_input(format!("timeout {t} is not a number of seconds")))
}

/// True if the pipeline is at its fixed point now: no notification pending, no run going.
/// Does not wait (a running host polls it; see `http.rs`).
pub fn quiescent(store: &Store) -> ApiResult<bool> {
    Ok(store.wait_quiescent(Duration::ZERO)?)
}

/// `wait` without a host: no scanner runs here, so nothing would ever process a pending
/// notification; it answers at once (an error if any is pending). A running host waits
/// instead, polling [`quiescent`] until the timeout or its shutdown.
fn wait_here(store: &Store, r: &WaitRequest) -> ApiResult<WaitResponse> {
    wait_timeout(r)?;
    let b = backlog(store)?;
    if b.total > 0 {
        let pending = match (b.capped, b.total) {
            (true, n) => format!("at least {n} notifications are"),
            (false, 1) => "1 notification is".to_owned(),
            (false, n) => format!("{n} notifications are"),
        };
        return Err(ApiError::bad_input(format!(
            "{pending} pending and no host is running to process them (start one with `percolator up <config>`)"
        )));
    }
    Ok(WaitResponse { quiescent: true, reload_pending: false })
}

/// How often a host's `wait` looks at the pipeline.
const WAIT_POLL: Duration = Duration::from_millis(20);

impl Op for Wait {
    /// Without a host: answers at once (an error if anything is pending). In a host the HTTP route polls instead
    /// ([`Op::serve`] below).
    fn run(cx: &Context, r: WaitRequest) -> ApiResult<WaitResponse> {
        wait_here(&cx.store, &r)
    }

    /// Polls [`quiescent`] every 20 ms until it holds, the timeout passes or the host
    /// shuts down. Between polls it holds no thread (many waits cost nothing), and it ends at
    /// shutdown, so that no request keeps the store open after the host stops.
    async fn serve(cx: Context, r: WaitRequest) -> ApiResult<WaitResponse> {
        let timeout = wait_timeout(&r)?;
        let Some(host) = cx.host.clone() else { return wait_here(&cx.store, &r) };
        let shutting_down = || ApiError::unavailable("the host is shutting down");
        let start = tokio::time::Instant::now();
        let deadline = start.checked_add(timeout).unwrap_or(start);
        let mut shutdown = host.shutdown.clone();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(shutting_down());
            }
            // A reload under way or coming first: work retried after a fix runs on the fix.
            let reload_pending = host.pipeline.reload_pending();
            let store = cx.store.clone();
            let done = !reload_pending
                && tokio::task::spawn_blocking(move || quiescent(&store))
                    .await
                    .map_err(|e| ApiError::store(format!("internal error: {e}")))??;
            if done {
                return Ok(WaitResponse { quiescent: true, reload_pending: false });
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(WaitResponse { quiescent: false, reload_pending });
            }
            tokio::select! {
                () = tokio::time::sleep(WAIT_POLL.min(deadline - now)) => {}
                changed = shutdown.changed() => {
                    if changed.is_err() {
                        // The sender is gone: the server is stopping.
                        return Err(shutting_down());
                    }
                }
            }
        }
    }
}
