//! Sinks: the store's committed changes delivered to outside systems, each change's effect
//! exactly once (`[[sink]]` in the configuration; `docs/design.md`, "Sinks").
//!
//! One runner thread per sink. It claims the sink's named subscription in the store (only the
//! owner delivers; with several hosts on one store exactly one live host does, and another
//! takes over when it dies), then loops: read the changes after its position
//! ([`Feed::changes`], up to the resolved timestamp), deliver them as one batch, and only after
//! the outside system acknowledged the batch move the position ([`Feed::advance`]). A crash
//! between the acknowledgement and the move delivers the batch again: delivery is at least
//! once, and each kind makes a repeat harmless (PostgreSQL: upserts versioned by commit
//! timestamp; jsonl: consumers dedupe by `(row, column, commit_ts)`; webhook: an
//! `Idempotency-Key`). A sink that is down only grows its backlog: the runner retries with
//! capped backoff and shows the error in `status`; the pipeline runs on.
//!
//! The kinds, one file each: [`postgres`], [`jsonl`], [`webhook`]. The store never imports
//! them: the runner reaches it through [`Feed`].

pub mod feed;
pub mod jsonl;
pub mod postgres;
pub mod transform;
pub mod webhook;

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use percolator_runtime::SinkTransform;
use percolator_store::Timestamp;

use crate::config::{Sink, SinkKind};
pub use feed::Feed;
pub use percolator_store::{Change, ChangePage, ChangeToken};

/// How often a runner that does not own its subscription tries to claim it.
pub const CLAIM_EVERY: Duration = Duration::from_secs(2);
/// How often a caught-up runner asks for new changes.
const POLL_EVERY: Duration = Duration::from_millis(25);
/// The first retry of a failed delivery waits this long, doubling up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(200);
/// The longest wait between retries of a failed delivery.
pub const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A caught-up runner moves its position to the feed's head (an empty page's `next`) at most
/// this often: that lets the host's trimmer (`crate::trim`) remove the log behind it without a
/// write per poll.
const IDLE_ADVANCE_EVERY: Duration = Duration::from_secs(5);
/// The window of the delivered-per-second rate.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// A batch handed to a kind.
pub struct Batch<'a> {
    /// The sink's name.
    pub sink: &'a str,
    /// The store table.
    pub table: &'a str,
    /// The store columns the sink delivers (every change is of one of them).
    pub columns: &'a [String],
    /// The changes, in commit-timestamp order (at least one).
    pub changes: &'a [Change],
}

/// Why a delivery failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Try the same batch again later (the outside system is down, slow or said so).
    Retry(String),
    /// The outside system refused the batch for good (a webhook's 4xx): it is parked as a
    /// dead letter of the sink and the position moves on.
    Reject(String),
}

/// One kind of sink: delivers a batch and returns once the outside system acknowledged it.
pub trait Deliver: Send {
    /// Delivers `batch`. `Ok` means acknowledged: durable at the destination.
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure>;
}

/// A change as JSON (jsonl lines, webhook bodies): `table`, `row` (or `row_base64` when the
/// key is not UTF-8), `column`, then `value` (UTF-8), `value_base64` (any other bytes) or
/// `deleted: true`, and `commit_ts`.
pub fn change_json(change: &Change) -> serde_json::Value {
    let mut o = serde_json::Map::new();
    o.insert("table".into(), change.cell.table.clone().into());
    match std::str::from_utf8(&change.cell.row) {
        Ok(row) => o.insert("row".into(), row.into()),
        Err(_) => o.insert("row_base64".into(), BASE64.encode(&change.cell.row).into()),
    };
    o.insert("column".into(), change.cell.column.clone().into());
    match &change.value {
        None => o.insert("deleted".into(), true.into()),
        Some(v) => match std::str::from_utf8(v) {
            Ok(text) => o.insert("value".into(), text.into()),
            Err(_) => o.insert("value_base64".into(), BASE64.encode(v).into()),
        },
    };
    o.insert("commit_ts".into(), change.commit_ts.raw().into());
    serde_json::Value::Object(o)
}

/// A batch the destination refused, kept in a file (`status` lists them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The file holding the batch and the answer.
    pub file: PathBuf,
    /// First and last commit timestamp of the batch.
    pub first_ts: u64,
    /// Last commit timestamp of the batch.
    pub last_ts: u64,
    /// Changes in it.
    pub changes: usize,
    /// The destination's answer.
    pub error: String,
}

impl DeadLetter {
    /// Its id: the file's name without `.json` (`<first ts>-<last ts>`, zero-padded).
    pub fn id(&self) -> String {
        self.file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
    }
}

/// Why [`Sinks::dead_letter`] did nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterError {
    /// No such sink on this host, or no such parked batch.
    NotFound(String),
    /// The batch could not be read, sent or removed (it is kept).
    Failed(String),
}

/// A change from its JSON form ([`change_json`]), as parked.
fn change_from_json(v: &serde_json::Value) -> Option<Change> {
    let bytes = |text: &str, b64: &str| -> Option<Vec<u8>> {
        match (v[text].as_str(), v[b64].as_str()) {
            (Some(t), _) => Some(t.as_bytes().to_vec()),
            (None, Some(b)) => BASE64.decode(b).ok(),
            (None, None) => None,
        }
    };
    let row = bytes("row", "row_base64")?;
    let value = if v["deleted"] == true { None } else { Some(bytes("value", "value_base64")?) };
    Some(Change {
        cell: percolator_store::CellRef::new(v["table"].as_str()?, row, v["column"].as_str()?),
        value,
        commit_ts: Timestamp::from_raw(v["commit_ts"].as_u64()?),
    })
}

/// What `status` shows of a sink.
#[derive(Clone, Debug, PartialEq)]
pub struct SinkStatus {
    /// Its name.
    pub name: String,
    /// `postgres`, `jsonl` or `webhook`.
    pub kind: &'static str,
    /// Where it delivers (no password).
    pub destination: String,
    /// The store table.
    pub table: String,
    /// The store columns.
    pub columns: Vec<String>,
    /// True if this host owns the subscription (and so delivers).
    pub owner: bool,
    /// The owner's worker id, when known.
    pub owner_id: Option<u64>,
    /// The subscription's position: every change committed at or below it is delivered.
    pub position: Option<Timestamp>,
    /// How far behind the sink is: zero when the last read found nothing new, else the time
    /// since it last did (none before the first read).
    pub lag: Option<Duration>,
    /// Changes delivered (acknowledged) by this host since it started.
    pub delivered: u64,
    /// Batches delivered by this host since it started.
    pub batches: u64,
    /// Changes delivered per second over the last 10 s.
    pub per_sec: f64,
    /// The last error, if the last attempt failed (cleared by the next success).
    pub last_error: Option<String>,
    /// When that error happened.
    pub last_error_at: Option<SystemTime>,
    /// Failed attempts since the last success.
    pub failures: u64,
    /// Batches the destination refused (webhook 4xx), parked.
    pub dead_letters: Vec<DeadLetter>,
}

/// A runner's shared state.
struct Shared {
    stop: AtomicBool,
    status: Mutex<SinkStatus>,
    /// (when, delivered total) per acknowledged batch within [`RATE_WINDOW`].
    rate: Mutex<VecDeque<(Instant, u64)>>,
    /// When the last read found nothing new (the runner's start before that), and whether
    /// the last read found changes (the sink is behind).
    caught_up: Mutex<(Instant, bool)>,
    /// Whether the runner has read the feed yet.
    read: AtomicBool,
}

impl Shared {
    fn status(&self) -> std::sync::MutexGuard<'_, SinkStatus> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Zero when the last read found nothing new; else the time since one did.
    fn lag(&self) -> Option<Duration> {
        if !self.read.load(Ordering::Relaxed) {
            return None;
        }
        let (at, behind) = *self.caught_up.lock().unwrap_or_else(PoisonError::into_inner);
        Some(if behind { at.elapsed() } else { Duration::ZERO })
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps `d`, waking early when asked to stop; false if it was.
    fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while !self.stopped() {
            let now = Instant::now();
            if now >= until {
                return true;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(50)));
        }
        false
    }

    fn failed(&self, error: String) {
        tracing::warn!(sink = %self.status().name, "{error}");
        let mut s = self.status();
        s.last_error = Some(error);
        s.last_error_at = Some(SystemTime::now());
        s.failures += 1;
    }
}

struct Runner {
    sink: Sink,
    /// Its transform, if the sink has one (a changed component restarts the runner).
    transform: Option<Arc<SinkTransform>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Runner {
    fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The running sinks of a host: [`Sinks::apply`] makes them those of a configuration.
pub struct Sinks {
    feed: Arc<dyn Feed>,
    /// Where refused batches are kept, one folder per sink.
    dead_dir: PathBuf,
    runners: Mutex<BTreeMap<String, Runner>>,
}

impl Sinks {
    /// No sink running yet; refused batches go under `dead_dir/<sink>/`.
    pub fn new(feed: Arc<dyn Feed>, dead_dir: PathBuf) -> Sinks {
        Sinks { feed, dead_dir, runners: Mutex::new(BTreeMap::new()) }
    }

    /// Makes the running sinks those of `sinks`: stops removed and changed ones (a changed sink
    /// restarts from its subscription's position: its name is its identity; each stops after
    /// the delivery it is in) and starts new ones. The caller has made the store's change log
    /// hold their columns first (`Config::logged_columns`), so that nothing committed after a
    /// new sink starts is missed. A runner that cannot be started (no thread) is logged and
    /// left out.
    ///
    /// `transforms` holds the compiled transform of every sink that has one, by sink name.
    pub fn apply(&self, sinks: &[Sink], transforms: &BTreeMap<String, Arc<SinkTransform>>) {
        let mut runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        let wanted: BTreeMap<&str, &Sink> = sinks.iter().map(|s| (s.name.as_str(), s)).collect();
        let hash = |t: Option<&Arc<SinkTransform>>| t.map(|t| t.source_hash().to_owned());
        let gone: Vec<String> = runners
            .iter()
            .filter(|(n, r)| {
                wanted.get(n.as_str()) != Some(&&r.sink) || hash(r.transform.as_ref()) != hash(transforms.get(*n))
            })
            .map(|(n, _)| n.clone())
            .collect();
        for name in gone {
            if let Some(mut r) = runners.remove(&name) {
                r.stop();
                tracing::info!(sink = %name, "sink stopped");
            }
        }
        for s in sinks {
            if runners.contains_key(&s.name) {
                continue;
            }
            let transform = transforms.get(&s.name).cloned();
            let kind = deliverer(s, transform.clone());
            match spawn(self.feed.clone(), s.clone(), transform, kind, self.dead_dir.join(&s.name)) {
                Ok(runner) => {
                    tracing::info!(sink = %s.name, kind = s.kind.name(), to = %s.kind.destination(), "sink started");
                    runners.insert(s.name.clone(), runner);
                }
                Err(e) => tracing::error!("{e}"),
            }
        }
    }

    /// Every sink's status, by name.
    pub fn status(&self) -> Vec<SinkStatus> {
        let runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        runners
            .values()
            .map(|r| {
                let mut s = r.shared.status().clone();
                let now = Instant::now();
                let mut rate = r.shared.rate.lock().unwrap_or_else(PoisonError::into_inner);
                while rate.front().is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW) {
                    rate.pop_front();
                }
                s.per_sec = rate.iter().map(|(_, n)| *n).sum::<u64>() as f64 / RATE_WINDOW.as_secs_f64();
                s.lag = r.shared.lag();
                s.dead_letters = read_dead_letters(&self.dead_dir.join(&r.sink.name));
                s
            })
            .collect()
    }

    /// Sends parked batch `id` of sink `sink` once more (`retry`; removed once acknowledged,
    /// kept with the new answer otherwise) or deletes it; returns how many changes it held.
    pub fn dead_letter(&self, sink: &str, id: &str, retry: bool) -> Result<usize, DeadLetterError> {
        let config = {
            let runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
            runners.get(sink).map(|r| (r.sink.clone(), r.transform.clone()))
        };
        let (config, transform) =
            config.ok_or_else(|| DeadLetterError::NotFound(format!("no sink {sink:?} runs on this host")))?;
        let dir = self.dead_dir.join(sink);
        let Some(parked) = read_dead_letters(&dir).into_iter().find(|d| d.id() == id) else {
            return Err(DeadLetterError::NotFound(format!(
                "sink {sink} has no parked batch {id:?} (`percolator status` lists them)"
            )));
        };
        let failed = |e: std::io::Error| DeadLetterError::Failed(format!("{}: {e}", parked.file.display()));
        if retry {
            let text = std::fs::read(&parked.file).map_err(failed)?;
            let changes: Option<Vec<Change>> = serde_json::from_slice::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["changes"].as_array().map(|c| c.iter().map(change_from_json).collect()))
                .flatten();
            let changes = changes.ok_or_else(|| {
                DeadLetterError::Failed(format!("{}: not a parked batch of changes", parked.file.display()))
            })?;
            let batch = Batch { sink, table: &config.table, columns: &config.columns, changes: &changes };
            if let Err(Failure::Retry(e) | Failure::Reject(e)) = deliverer(&config, transform).deliver(&batch) {
                // Kept, with the new answer, for another try.
                let _ = park(&dir, &batch, &e);
                return Err(DeadLetterError::Failed(format!("sent again, and not acknowledged: {e}")));
            }
        }
        std::fs::remove_file(&parked.file).map_err(failed)?;
        Ok(parked.changes)
    }

    /// Stops every runner (each finishes the delivery it is in first).
    pub fn stop(&self) {
        let mut runners = self.runners.lock().unwrap_or_else(PoisonError::into_inner);
        for r in runners.values_mut() {
            r.shared.stop.store(true, Ordering::Relaxed);
        }
        for (_, mut r) in std::mem::take(&mut *runners) {
            r.stop();
        }
    }
}

impl Drop for Sinks {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The deliverer of a kind.
fn new_kind(kind: &SinkKind) -> Box<dyn Deliver> {
    match kind {
        SinkKind::Postgres { url, target, target_columns } => {
            Box::new(postgres::PostgresSink::new(url, target, target_columns.clone()))
        }
        SinkKind::Jsonl { path } => Box::new(jsonl::JsonlSink::new(path.clone())),
        SinkKind::Webhook { url, timeout } => Box::new(webhook::WebhookSink::new(url.clone(), *timeout)),
    }
}

/// The deliverer of a sink: its kind, behind its transform if it has one.
fn deliverer(sink: &Sink, transform: Option<Arc<SinkTransform>>) -> Box<dyn Deliver> {
    let inner = new_kind(&sink.kind);
    match transform {
        None => inner,
        Some(transform) => Box::new(transform::Transformed { inner, transform, outputs: sink.outputs.clone() }),
    }
}

/// Starts the runner of `sink`, delivering with `kind`.
fn spawn(
    feed: Arc<dyn Feed>,
    sink: Sink,
    transform: Option<Arc<SinkTransform>>,
    kind: Box<dyn Deliver>,
    dead_dir: PathBuf,
) -> Result<Runner, String> {
    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        status: Mutex::new(SinkStatus {
            name: sink.name.clone(),
            kind: sink.kind.name(),
            destination: sink.kind.destination(),
            table: sink.table.clone(),
            columns: sink.columns.clone(),
            owner: false,
            owner_id: None,
            position: None,
            lag: None,
            delivered: 0,
            batches: 0,
            per_sec: 0.0,
            last_error: None,
            last_error_at: None,
            failures: 0,
            dead_letters: Vec::new(),
        }),
        rate: Mutex::new(VecDeque::new()),
        caught_up: Mutex::new((Instant::now(), false)),
        read: AtomicBool::new(false),
    });
    let thread = {
        let (shared, s) = (shared.clone(), sink.clone());
        std::thread::Builder::new()
            .name(format!("sink-{}", sink.name))
            .spawn(move || run(&*feed, &s, kind, &shared, &dead_dir))
            .map_err(|e| format!("sink {}: starting its thread: {e}", sink.name))?
    };
    Ok(Runner { sink, transform, shared, thread: Some(thread) })
}

/// The runner's loop (see the module's docs), until asked to stop.
fn run(feed: &dyn Feed, sink: &Sink, mut kind: Box<dyn Deliver>, shared: &Shared, dead_dir: &Path) {
    let name = sink.name.as_str();
    let mut position: Option<ChangeToken> = None;
    let mut backoff = MIN_BACKOFF;
    let mut last_advance = Instant::now();
    let retry = |shared: &Shared, backoff: &mut Duration, error: String| {
        shared.failed(error);
        let wait = *backoff;
        *backoff = (*backoff * 2).min(MAX_BACKOFF);
        shared.sleep(wait)
    };
    while !shared.stopped() {
        // Only the owner delivers; the others wait to take over.
        let Some(from) = position else {
            match feed.claim(name).and_then(|owned| Ok((owned, feed.subscription(name)?))) {
                Ok((owned, sub)) => {
                    let (at, owner) = sub.map(|(p, o)| (Some(p), o)).unwrap_or((None, None));
                    {
                        let mut s = shared.status();
                        s.owner = owned;
                        s.owner_id = owner;
                        s.position = at.as_ref().and_then(ChangeToken::position);
                    }
                    if owned {
                        tracing::info!(sink = %name, position = ?at.as_ref().and_then(ChangeToken::position), "sink: delivering (owns its subscription)");
                        position = Some(at.unwrap_or_else(ChangeToken::origin));
                    } else {
                        shared.sleep(CLAIM_EVERY);
                    }
                }
                Err(e) => {
                    retry(shared, &mut backoff, format!("claiming subscription {name}: {e}"));
                }
            }
            continue;
        };
        let page = match feed.changes(&sink.table, &sink.columns, &from, sink.batch) {
            Ok(page) => page,
            Err(e) => {
                retry(shared, &mut backoff, format!("reading changes: {e}"));
                continue;
            }
        };
        shared.read.store(true, Ordering::Relaxed);
        if page.changes.is_empty() && page.more {
            // Stopped at its limit before any change it could deliver: read on at once.
            position = Some(page.next);
            continue;
        }
        if page.changes.is_empty() {
            *shared.caught_up.lock().unwrap_or_else(PoisonError::into_inner) = (Instant::now(), false);
            // Follow the head now and then, so the log behind it can be trimmed.
            if page.next.position() > from.position() && last_advance.elapsed() >= IDLE_ADVANCE_EVERY {
                match feed.advance(name, &page.next) {
                    Ok(()) => {
                        last_advance = Instant::now();
                        shared.status().position = page.next.position();
                        position = Some(page.next);
                    }
                    Err(e) => {
                        lost(shared, name, &e);
                        position = None;
                        continue;
                    }
                }
            }
            shared.sleep(POLL_EVERY);
            continue;
        }
        // Behind: the lag grows from the last time the sink was caught up.
        shared.caught_up.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        let batch = Batch { sink: name, table: &sink.table, columns: &sink.columns, changes: &page.changes };
        let mut refused = false;
        match kind.deliver(&batch) {
            Ok(()) => {}
            Err(Failure::Retry(e)) => {
                retry(shared, &mut backoff, format!("delivering {} changes: {e}", page.changes.len()));
                continue;
            }
            Err(Failure::Reject(answer)) => {
                // Refused for good: kept (durably) before the position moves past it.
                if let Err(e) = park(dead_dir, &batch, &answer) {
                    retry(shared, &mut backoff, format!("parking a refused batch ({answer}): {e}"));
                    continue;
                }
                shared.failed(format!("batch refused, parked as a dead letter: {answer}"));
                refused = true;
            }
        }
        // Acknowledged (or parked): only now does the position move.
        if let Err(e) = feed.advance(name, &page.next) {
            lost(shared, name, &e);
            position = None;
            continue;
        }
        last_advance = Instant::now();
        backoff = MIN_BACKOFF;
        let n = page.changes.len() as u64;
        {
            let mut s = shared.status();
            s.delivered += n;
            s.batches += 1;
            s.position = page.next.position();
            if !refused {
                s.last_error = None;
                s.failures = 0;
            }
        }
        {
            // Pruned here too, so the window stays bounded when nobody asks for the status.
            let mut rate = shared.rate.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            while rate.front().is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW) {
                rate.pop_front();
            }
            rate.push_back((now, n));
        }
        position = Some(page.next);
    }
}

/// The subscription could not be moved: another host took it over (this one was taken for
/// dead), or the store failed. Claim it again before delivering more.
fn lost(shared: &Shared, name: &str, e: &str) {
    shared.failed(format!("moving the position of subscription {name} (claiming it again): {e}"));
    shared.status().owner = false;
}

/// Writes a refused batch to `dir/<first>-<last>.json` (fsynced) with the destination's answer.
fn park(dir: &Path, batch: &Batch<'_>, answer: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let first = batch.changes.first().map_or(0, |c| c.commit_ts.raw());
    let last = batch.changes.last().map_or(0, |c| c.commit_ts.raw());
    let body = serde_json::json!({
        "sink": batch.sink,
        "first_ts": first,
        "last_ts": last,
        "error": answer,
        "changes": batch.changes.iter().map(change_json).collect::<Vec<_>>(),
    });
    let path = dir.join(format!("{first:020}-{last:020}.json"));
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(serde_json::to_string_pretty(&body).unwrap_or_default().as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The parked batches of one sink, oldest first.
fn read_dead_letters(dir: &Path) -> Vec<DeadLetter> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<DeadLetter> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|file| {
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).ok()?).ok()?;
            Some(DeadLetter {
                first_ts: v["first_ts"].as_u64()?,
                last_ts: v["last_ts"].as_u64()?,
                changes: v["changes"].as_array().map_or(0, Vec::len),
                error: v["error"].as_str().unwrap_or_default().to_owned(),
                file,
            })
        })
        .collect();
    out.sort_by_key(|d| d.first_ts);
    out
}

#[cfg(test)]
mod tests;
