//! The notification scanner (paper §2.4, "bus clumping").
//!
//! Several threads each start at a random position in the notify locality group and walk it in
//! key order. Before running observers on a row a thread takes an advisory in-memory row lock;
//! if another thread holds it, the thread **teleports** to a new random position instead of
//! trailing it. A thread that completes a full lap without clearing anything sleeps until a
//! commit sets a notify cell (or a short timeout, for retries after failures).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rand::RngExt;

use crate::bigtable::{CellRef, NotifyEntry};
use crate::error::Error;
use crate::key;
use crate::notify::CellOutcome;
use crate::store::{Inner, Store};

/// Scanner settings.
#[derive(Clone, Debug)]
pub struct ScannerConfig {
    /// Scanning threads.
    pub threads: usize,
    /// Notify cells read per scan step.
    pub batch: usize,
    /// Longest an idle thread sleeps before looking again without being woken (bounds the
    /// delay of retries after failures).
    pub idle_wait: Duration,
}

impl Default for ScannerConfig {
    fn default() -> ScannerConfig {
        ScannerConfig { threads: 2, batch: 256, idle_wait: Duration::from_millis(100) }
    }
}

/// Running scanner threads; stopped (and joined) by [`Scanner::stop`] or on drop.
pub struct Scanner {
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Store {
    /// Starts scanner threads that run observers on pending notifications.
    pub fn start_scanner(&self, config: ScannerConfig) -> Scanner {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..config.threads.max(1))
            .map(|i| {
                let (store, stop, config) = (self.clone(), stop.clone(), config.clone());
                std::thread::Builder::new()
                    .name(format!("percolator-scanner-{i}"))
                    .spawn(move || scan_loop(&store, &stop, &config))
                    .expect("spawning a scanner thread")
            })
            .collect();
        Scanner { inner: self.inner.clone(), stop, threads }
    }
}

impl Scanner {
    /// Stops the threads after their current row and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.inner.signal.bump();
        for t in self.threads.drain(..) {
            if let Err(panic) = t.join() {
                // An observer that panics unwinds through the scanner thread that ran it.
                let message = panic
                    .downcast_ref::<&str>()
                    .copied()
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(no message)");
                tracing::warn!(panic = message, "a scanner thread had stopped: it panicked");
            }
        }
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn random_position() -> Vec<u8> {
    let mut b = vec![0u8; 8];
    rand::rng().fill(&mut b[..]);
    b
}

/// Releases an advisory row lock even if an observer panics.
///
/// The set of held rows is changed only by single `insert`/`remove` calls, so a panic while the
/// mutex was held cannot leave it half-updated: a poisoned mutex is used as it is (treating it
/// as an error would make every row look held, or never released, for good).
struct RowLock<'a>(&'a Inner, Vec<u8>);

impl<'a> RowLock<'a> {
    fn try_take(inner: &'a Inner, row: Vec<u8>) -> Option<RowLock<'a>> {
        let mut locks = inner.row_locks.lock().unwrap_or_else(PoisonError::into_inner);
        locks.insert(row.clone()).then(|| RowLock(inner, row))
    }
}

impl Drop for RowLock<'_> {
    fn drop(&mut self) {
        self.0.row_locks.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.1);
    }
}

fn scan_loop(store: &Store, stop: &AtomicBool, config: &ScannerConfig) {
    let inner = &store.inner;
    let mut pos: Option<Vec<u8>> = Some(random_position());
    // Progress since the last time this thread reached the end of the notify group. Starts
    // true so the part before the random start is scanned before the first sleep.
    let mut progressed = true;
    let mut generation = inner.signal.generation();
    // Teleports since this thread last ran a row: when every pending row is held by others,
    // teleporting again at once would only spin.
    let mut idle_teleports = 0u32;
    // Whether the last read of the notify group failed: a failure that lasts is logged at warn
    // once, then at debug on every retry (they come every `idle_wait`).
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        if idle_teleports >= 4 {
            inner.signal.wait_change(generation, Duration::from_millis(5));
            idle_teleports = 0;
        }
        let batch = match inner.backend.scan_notify(pos.as_deref(), config.batch) {
            Ok(b) => {
                if std::mem::take(&mut failing) {
                    tracing::info!("scanner: reading pending notifications works again");
                }
                b
            }
            Err(e) => {
                inner.counters.scanner_errors.fetch_add(1, Ordering::Relaxed);
                if std::mem::replace(&mut failing, true) {
                    tracing::debug!(error = %e, "scanner: reading pending notifications failed again");
                } else {
                    tracing::warn!(error = %e, "scanner: reading pending notifications failed; retrying");
                }
                inner.signal.wait_change(generation, config.idle_wait);
                continue;
            }
        };
        let full = batch.len() >= config.batch;
        let rows = split_rows(&batch);
        let mut teleported = false;
        for (n, row) in rows.iter().enumerate() {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let first = &row[0].cell;
            let row_key = key::row_prefix(&first.table, &first.row);
            // A full batch may cut its last row short: leave it for the next step, unless it is
            // the only row.
            if full && n + 1 == rows.len() && n > 0 {
                pos = Some(row_key);
                break;
            }
            let Some(_lock) = RowLock::try_take(inner, row_key.clone()) else {
                inner.counters.teleports.fetch_add(1, Ordering::Relaxed);
                idle_teleports += 1;
                pos = Some(random_position());
                teleported = true;
                break;
            };
            idle_teleports = 0;
            for entry in row.iter() {
                match store.process_notification(entry) {
                    Ok(CellOutcome::Cleared) => progressed = true,
                    Ok(CellOutcome::Pending) => {}
                    Err(e) => log_failed(inner, &entry.cell, &e),
                }
            }
            let mut next = row_key;
            next.push(0xFF);
            pos = Some(next);
        }
        if teleported || full {
            continue;
        }
        // Reached the end of the notify group: wrap around, or sleep if a whole lap did nothing.
        let now = inner.signal.generation();
        if !progressed && now == generation {
            inner.signal.wait_change(generation, config.idle_wait);
        }
        generation = inner.signal.generation();
        progressed = false;
        pos = None;
    }
}

/// Logs an error of processing a notify cell, which stays pending and is processed again on a
/// later pass: at debug for a conflict (a race with a writer or another run), else at warn.
fn log_failed(inner: &Inner, cell: &CellRef, e: &Error) {
    let row = String::from_utf8_lossy(&cell.row);
    if e.is_retryable() {
        tracing::debug!(
            table = %cell.table,
            %row,
            column = %cell.column,
            error = %e,
            "scanner: processing a notification conflicted; it stays pending"
        );
    } else {
        inner.counters.scanner_errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            table = %cell.table,
            %row,
            column = %cell.column,
            error = %e,
            "scanner: processing a notification failed; it stays pending and is retried"
        );
    }
}

fn split_rows(batch: &[NotifyEntry]) -> Vec<&[NotifyEntry]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=batch.len() {
        if i == batch.len()
            || batch[i].cell.table != batch[start].cell.table
            || batch[i].cell.row != batch[start].cell.row
        {
            out.push(&batch[start..i]);
            start = i;
        }
    }
    out
}
