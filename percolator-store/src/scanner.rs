//! The notification scanner (paper §2.4, "bus clumping").
//!
//! Several threads each start at a random position in the notify locality group and walk it in
//! key order. Before running observers on a row a thread takes an advisory row lock (in memory,
//! and on a shared backend also in the backend, across hosts); if another thread holds it, the
//! thread **teleports** to a new random position instead of trailing it. A thread that
//! completes a full lap without clearing anything sleeps until a commit sets a notify cell (or
//! a short timeout, for retries after failures).
//!
//! Observer runs do not happen on the scanning threads: a scanner that takes a row's lock hands
//! the row (and the lock) to a bounded pool of **workers** ([`ScannerConfig::workers`]) and
//! scans on. So the runs in flight are set by configuration, not by the scanning threads or the
//! cores: many runs waiting on commits (fsyncs, Redis round trips) fill each group commit.
//!
//! On a backend whose notify group has several partitions (Redis: its buckets), the stores
//! that run scanners share the partitions out by their live worker leases: each walks only its
//! share, and a share is recomputed every [`SHARE_REFRESH`] (see "Several hosts" in
//! `docs/design.md`).

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::RngExt;

use crate::bigtable::{CellRef, NotifyEntry};
use crate::error::{Error, Result};
use crate::key;
use crate::notify::CellOutcome;
use crate::store::{Inner, Store};
use crate::timestamp::Timestamp;
use crate::worker;

/// How often a scanner thread recomputes its share of the notify partitions.
pub const SHARE_REFRESH: Duration = Duration::from_secs(1);

/// Scanner settings.
#[derive(Clone, Debug)]
pub struct ScannerConfig {
    /// Scanning threads.
    pub threads: usize,
    /// Observer runs in flight: worker threads fed by the scanning threads through a bounded
    /// queue. 0 runs observers on the scanning threads themselves.
    pub workers: usize,
    /// Notify cells read per scan step.
    pub batch: usize,
    /// Longest an idle thread sleeps before looking again without being woken (bounds the
    /// delay of retries after failures).
    pub idle_wait: Duration,
    /// Expiry of a row lock held in a shared backend (a scanner that dies holding one frees it
    /// after this long). A run longer than this only lets another host's run start too.
    pub row_lock_ttl: Duration,
}

impl Default for ScannerConfig {
    fn default() -> ScannerConfig {
        ScannerConfig {
            threads: 2,
            workers: 8,
            batch: 256,
            idle_wait: Duration::from_millis(100),
            row_lock_ttl: Duration::from_secs(30),
        }
    }
}

/// Running scanner threads; stopped (and joined) by [`Scanner::stop`] or on drop.
pub struct Scanner {
    /// The store's user handle (not a bare `Arc<Inner>`): dropped after the threads are
    /// joined, it closes the store if it is the last (`worker::Beat`).
    store: Store,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    runs: Option<Arc<Runs>>,
    workers: Vec<JoinHandle<()>>,
}

/// One row's pending notifications, with the row's scanner lock, for a worker to run.
struct Job {
    entries: Vec<NotifyEntry>,
    _lock: RowLock,
}

/// The bounded queue between scanning threads and workers.
struct Runs {
    queue: Mutex<RunQueue>,
    /// A job was queued, or the queue closed.
    queued: Condvar,
    /// A job was taken (room in the queue), or the queue closed.
    taken: Condvar,
    capacity: usize,
    /// Notify cells the workers cleared: a scanner's lap made progress if this moved.
    cleared: AtomicU64,
    /// Jobs queued or running.
    in_flight: AtomicU64,
}

#[derive(Default)]
struct RunQueue {
    jobs: VecDeque<Job>,
    closed: bool,
}

impl Runs {
    fn lock(&self) -> std::sync::MutexGuard<'_, RunQueue> {
        // Only single push/pop calls happen under the mutex: a poisoned one is still whole.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues a job, waiting while the queue is full. Gives the job back if the queue closed.
    fn push(&self, job: Job) -> Option<Job> {
        let mut q = self.lock();
        while q.jobs.len() >= self.capacity && !q.closed {
            q = self.taken.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
        if q.closed {
            return Some(job);
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        q.jobs.push_back(job);
        self.queued.notify_one();
        None
    }

    /// The next job, or `None` once the queue is closed.
    fn pop(&self) -> Option<Job> {
        let mut q = self.lock();
        loop {
            if q.closed {
                return None;
            }
            if let Some(job) = q.jobs.pop_front() {
                self.taken.notify_one();
                return Some(job);
            }
            q = self.queued.wait(q).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Closes the queue: waiting scanners and idle workers return; queued jobs are dropped
    /// (their notifications stay pending in the store, their row locks are released).
    fn close(&self) {
        let dropped: Vec<Job> = {
            let mut q = self.lock();
            q.closed = true;
            q.jobs.drain(..).collect()
        };
        self.in_flight.fetch_sub(dropped.len() as u64, Ordering::SeqCst);
        drop(dropped);
        self.queued.notify_all();
        self.taken.notify_all();
    }
}

/// A worker: runs jobs until the queue closes. An observer that panics is logged and its
/// notifications stay pending; the worker goes on.
fn work_loop(store: &Store, runs: &Runs) {
    while let Some(job) = runs.pop() {
        let ran = std::panic::catch_unwind(AssertUnwindSafe(|| run_row(store, &job.entries)));
        match ran {
            Ok(cleared) => {
                runs.cleared.fetch_add(cleared, Ordering::Relaxed);
            }
            Err(panic) => {
                let cell = &job.entries[0].cell;
                tracing::warn!(
                    table = %cell.table,
                    row = %String::from_utf8_lossy(&cell.row),
                    panic = panic_message(&panic),
                    "scanner: an observer panicked; its notifications stay pending"
                );
            }
        }
        drop(job);
        runs.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Processes a row's notify cells, the oldest notification first; returns how many it cleared.
fn run_row(store: &Store, entries: &[NotifyEntry]) -> u64 {
    let mut cleared = 0;
    for entry in oldest_first(entries) {
        if store.inner.backend.storage_failure().is_some() {
            // Queued before the store began refusing writes: left pending, not run to fail.
            break;
        }
        match store.process_notification(entry) {
            Ok(CellOutcome::Cleared) => cleared += 1,
            Ok(CellOutcome::Pending) => {}
            Err(e) => log_failed(&store.inner, &entry.cell, &e),
        }
    }
    cleared
}

/// A row's notify cells by the age of their notification (the timestamp of the write that set
/// it; a cell pending only through named writers, by its oldest writer's start), not by column:
/// within a row, a notification that keeps losing a race to newer ones' runs goes first, so
/// they cannot starve it. Ties keep column order.
fn oldest_first(entries: &[NotifyEntry]) -> Vec<&NotifyEntry> {
    let age = |e: &NotifyEntry| match e.writers.first() {
        Some(w) if e.ts == Timestamp::ZERO => w.start_ts,
        _ => e.ts,
    };
    let mut sorted: Vec<&NotifyEntry> = entries.iter().collect();
    sorted.sort_by_key(|e| age(e));
    sorted
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

impl Store {
    /// Starts scanner threads that run observers on pending notifications.
    pub fn start_scanner(&self, config: ScannerConfig) -> Scanner {
        let stop = Arc::new(AtomicBool::new(false));
        // Take a share of the notify partitions at once: publish the scanner in the lease.
        self.inner.scanners.fetch_add(1, Ordering::SeqCst);
        if !self.inner.backend.exclusive() {
            if let Err(e) = worker::publish(&self.inner) {
                tracing::warn!(error = %e, "scanner: publishing it in the worker lease failed (the heartbeat retries)");
            }
            let inner = Arc::downgrade(&self.inner);
            let on_wake = Box::new(move || {
                if let Some(inner) = inner.upgrade() {
                    inner.signal.bump();
                }
            });
            self.inner.backend.watch_wakes(on_wake, stop.clone());
        }
        let runs = (config.workers > 0).then(|| {
            Arc::new(Runs {
                queue: Mutex::new(RunQueue::default()),
                queued: Condvar::new(),
                taken: Condvar::new(),
                // Enough queued that a worker finishing a row finds the next one waiting.
                capacity: config.workers,
                cleared: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
            })
        });
        let workers = match &runs {
            None => Vec::new(),
            Some(runs) => (0..config.workers)
                .map(|i| {
                    let (store, runs) = (self.clone(), runs.clone());
                    std::thread::Builder::new()
                        .name(format!("percolator-observer-{i}"))
                        .spawn(move || work_loop(&store, &runs))
                        .expect("spawning an observer worker thread")
                })
                .collect(),
        };
        let threads = (0..config.threads.max(1))
            .map(|i| {
                let (store, stop, config, runs) = (self.clone(), stop.clone(), config.clone(), runs.clone());
                std::thread::Builder::new()
                    .name(format!("percolator-scanner-{i}"))
                    .spawn(move || scan_loop(&store, &stop, &config, runs.as_deref()))
                    .expect("spawning a scanner thread")
            })
            .collect();
        Scanner { store: self.clone(), stop, threads, runs, workers }
    }
}

impl Scanner {
    /// Stops the threads after their current row and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return;
        }
        self.store.inner.signal.bump();
        // Closing the queue first frees a scanner waiting for room in it.
        if let Some(runs) = &self.runs {
            runs.close();
        }
        for t in self.threads.drain(..).chain(self.workers.drain(..)) {
            if let Err(panic) = t.join() {
                // An observer that panics on a scanning thread (no workers) unwinds through it.
                tracing::warn!(panic = panic_message(&*panic), "a scanner thread had stopped: it panicked");
            }
        }
        self.store.inner.scanners.fetch_sub(1, Ordering::SeqCst);
        if !self.store.inner.backend.exclusive()
            && let Err(e) = worker::publish(&self.store.inner)
        {
            tracing::debug!(error = %e, "scanner: withdrawing it from the worker lease failed (the heartbeat retries)");
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

/// The share of `total` notify partitions of the scanning worker `me` among the scanning
/// workers `ids` (`me` counts whether or not it is listed): with `n` of them, sorted by id, the
/// worker of rank `r` takes the partitions `p` with `p mod n = r`. Returns the share and `n`.
pub(crate) fn share_of(total: u32, mut ids: Vec<u64>, me: u64) -> (Vec<u32>, u32) {
    if !ids.contains(&me) {
        ids.push(me);
    }
    ids.sort_unstable();
    ids.dedup();
    let n = ids.len() as u32;
    let rank = ids.iter().position(|id| *id == me).unwrap_or(0) as u32;
    ((0..total).filter(|p| p % n == rank).collect(), n)
}

/// A live worker (an open store: a host, or a command line that opened the store) and its
/// share of the notify partitions, from [`Store::workers`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerShare {
    /// Its id: a timestamp from the oracle, taken when it opened.
    pub id: u64,
    /// True for the store asked.
    pub this: bool,
    /// True if it runs a scanner.
    pub scanning: bool,
    /// The notify partitions its scanners walk (none if it runs no scanner): what the scanners
    /// compute from the same leases (they recompute every [`SHARE_REFRESH`], so a share can be
    /// that long out of date after a worker comes or goes).
    pub partitions: Vec<u32>,
}

impl Store {
    /// The bytes the store takes on disk: the redb file's size; `None` for a backend that does
    /// not know (in memory, Redis).
    pub fn size_on_disk(&self) -> Option<u64> {
        self.inner.backend.size_on_disk()
    }

    /// Why the store refuses writes now, if it does: the redb file met an I/O error (the
    /// disk is full). Cleared by itself once a write succeeds again (`docs/design.md`, "A full
    /// disk"); meanwhile reads work, and observers wait without failing.
    pub fn storage_failure(&self) -> Option<crate::StorageFailure> {
        self.inner.backend.storage_failure()
    }

    /// How many partitions the notify group has (Redis: its buckets; redb: one).
    pub fn notify_partitions(&self) -> u32 {
        self.inner.backend.notify_partitions().max(1)
    }

    /// The live workers, by id, with their shares of the notify partitions. On an exclusive
    /// backend (redb) this store is the only one.
    pub fn workers(&self) -> Result<Vec<WorkerShare>> {
        let inner = &self.inner;
        let total = self.notify_partitions();
        let mut live: Vec<(u64, bool)> =
            inner.coordination().live_leases()?.into_iter().map(|(id, p)| (id, p.scanning)).collect();
        // This store is live whatever its lease says this instant (it may be mid-renewal).
        let here = inner.scanners.load(Ordering::SeqCst) > 0;
        live.retain(|(id, _)| *id != inner.worker);
        live.push((inner.worker, here));
        live.sort_unstable();
        let scanning: Vec<u64> = live.iter().filter(|(_, s)| *s).map(|(id, _)| *id).collect();
        Ok(live
            .into_iter()
            .map(|(id, is_scanning)| WorkerShare {
                id,
                this: id == inner.worker,
                scanning: is_scanning,
                partitions: match is_scanning {
                    false => Vec::new(),
                    true if total == 1 || inner.backend.exclusive() => (0..total).collect(),
                    true => share_of(total, scanning.clone(), id).0,
                },
            })
            .collect())
    }
}

/// The notify partitions a scanner thread walks, recomputed every [`SHARE_REFRESH`].
struct Share {
    total: u32,
    parts: Vec<u32>,
    refreshed: Instant,
}

impl Share {
    fn new(inner: &Inner) -> Share {
        let total = inner.backend.notify_partitions().max(1);
        let mut share = Share { total, parts: (0..total).collect(), refreshed: Instant::now() };
        share.refresh(inner);
        share
    }

    /// Recomputes the share: with `n` live scanning workers, sorted by id, the worker of rank
    /// `r` takes the partitions `p` with `p mod n = r`. One partition, or an exclusive backend:
    /// all of it. If the leases cannot be read, the share stays as it was.
    fn refresh(&mut self, inner: &Inner) {
        self.refreshed = Instant::now();
        if self.total == 1 || inner.backend.exclusive() {
            return;
        }
        let ids: Vec<u64> = match inner.coordination().live_leases() {
            Ok(live) => live.into_iter().filter(|(_, p)| p.scanning).map(|(id, _)| id).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "scanner: reading the live workers failed; keeping the share");
                return;
            }
        };
        let (parts, n) = share_of(self.total, ids, inner.worker);
        if parts != self.parts {
            tracing::debug!(workers = n, ?parts, "scanner: new share of the notify partitions");
            self.parts = parts;
        }
    }

    fn due(&self) -> bool {
        self.refreshed.elapsed() >= SHARE_REFRESH
    }

    /// A random partition of the share and a random position in it.
    fn random(&self) -> (u32, Option<Vec<u8>>) {
        let at = match self.parts.len() {
            0 => 0,
            n => self.parts[rand::random_range(0..n)],
        };
        (at, Some(random_position()))
    }

    /// The partition of the share after `at` (wrapping).
    fn next_after(&self, at: u32) -> u32 {
        self.parts.iter().copied().find(|p| *p > at).or_else(|| self.parts.first().copied()).unwrap_or(0)
    }
}

/// An advisory row lock, released when dropped (even if an observer panics): the process's
/// own, and on a shared backend the backend's, which keeps scanners of other hosts off the row.
///
/// The set of held rows is changed only by single `insert`/`remove` calls, so a panic while the
/// mutex was held cannot leave it half-updated: a poisoned mutex is used as it is (treating it
/// as an error would make every row look held, or never released, for good).
struct RowLock {
    inner: Arc<Inner>,
    row: Vec<u8>,
    /// Whether the backend's lock is held too.
    shared: bool,
}

impl RowLock {
    fn try_take(inner: &Arc<Inner>, row: Vec<u8>, ttl: Duration) -> Option<RowLock> {
        let mut locks = inner.row_locks.lock().unwrap_or_else(PoisonError::into_inner);
        if !locks.insert(row.clone()) {
            return None;
        }
        drop(locks);
        let mut lock = RowLock { inner: inner.clone(), row, shared: false };
        if inner.backend.exclusive() {
            return Some(lock);
        }
        match inner.backend.try_lock_row(&lock.row, inner.worker, ttl) {
            Ok(true) => {
                lock.shared = true;
                Some(lock)
            }
            Ok(false) => None,
            Err(e) => {
                tracing::debug!(error = %e, "scanner: taking a row lock in the backend failed; skipping the row");
                None
            }
        }
    }
}

impl Drop for RowLock {
    fn drop(&mut self) {
        if self.shared
            && let Err(e) = self.inner.backend.unlock_row(&self.row, self.inner.worker)
        {
            tracing::debug!(error = %e, "scanner: releasing a row lock in the backend failed (it expires)");
        }
        self.inner.row_locks.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.row);
    }
}

fn scan_loop(store: &Store, stop: &AtomicBool, config: &ScannerConfig, runs: Option<&Runs>) {
    let inner = &store.inner;
    // What the workers had cleared at the last lap check.
    let mut cleared_seen = 0;
    let mut share = Share::new(inner);
    let (mut at, mut pos) = share.random();
    // Partition ends reached since the last lap check: a lap is one end per partition.
    let mut ends = 0usize;
    // Progress since the last lap check. Starts true so the part before the random start is
    // scanned before the first sleep.
    let mut progressed = true;
    let mut generation = inner.signal.generation();
    // Teleports since this thread last ran a row: when every pending row is held by others,
    // teleporting again at once would only spin.
    let mut idle_teleports = 0u32;
    // Whether the last read of the notify group failed: a failure that lasts is logged at warn
    // once, then at debug on every retry (they come every `idle_wait`).
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        if share.due() {
            share.refresh(inner);
            if !share.parts.contains(&at) {
                (at, pos) = share.random();
                ends = 0;
            }
        }
        if share.parts.is_empty() {
            // More scanning workers than partitions: this one waits for a share.
            inner.signal.wait_change(generation, config.idle_wait);
            generation = inner.signal.generation();
            continue;
        }
        if idle_teleports >= 4 {
            inner.signal.wait_change(generation, Duration::from_millis(5));
            idle_teleports = 0;
        }
        if inner.backend.storage_failure().is_some() {
            // The store refuses writes (a full disk): a run could not commit, nor a
            // notification be cleared. Wait for writes to work again; nothing is counted.
            inner.signal.wait_change(generation, config.idle_wait);
            generation = inner.signal.generation();
            continue;
        }
        let batch = match inner.backend.scan_notify_partition(at, pos.as_deref(), config.batch) {
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
            let Some(lock) = RowLock::try_take(inner, row_key.clone(), config.row_lock_ttl) else {
                inner.counters.teleports.fetch_add(1, Ordering::Relaxed);
                idle_teleports += 1;
                (at, pos) = share.random();
                ends = 0;
                teleported = true;
                break;
            };
            idle_teleports = 0;
            match runs {
                Some(runs) => {
                    if runs.push(Job { entries: row.to_vec(), _lock: lock }).is_some() {
                        return; // stopping
                    }
                }
                None => {
                    progressed |= run_row(store, row) > 0;
                    drop(lock);
                }
            }
            let mut next = row_key;
            next.push(0xFF);
            pos = Some(next);
        }
        if teleported || full {
            continue;
        }
        // Reached the end of partition `at`: go on with the next one of the share.
        at = share.next_after(at);
        pos = None;
        ends += 1;
        if ends < share.parts.len() {
            continue;
        }
        // A lap: sleep if it did nothing. With workers, the lap's rows may still be running:
        // progress is what they cleared since the last lap, and while rows are in flight the
        // sleep is short (their commits wake it anyway when they notify).
        ends = 0;
        let mut busy = false;
        if let Some(runs) = runs {
            let cleared = runs.cleared.load(Ordering::Relaxed);
            progressed |= cleared != cleared_seen;
            cleared_seen = cleared;
            busy = runs.in_flight.load(Ordering::SeqCst) > 0;
        }
        let now = inner.signal.generation();
        if !progressed && now == generation {
            let mut wait = if busy { config.idle_wait.min(Duration::from_millis(10)) } else { config.idle_wait };
            if let Some(at) = crate::notify::next_conflict_retry(inner) {
                wait = wait.min(at.saturating_duration_since(Instant::now()));
            }
            inner.signal.wait_change(generation, wait);
        }
        generation = inner.signal.generation();
        progressed = false;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_split_the_partitions_by_rank() {
        // Three scanning workers over 8 partitions: ranks by id.
        assert_eq!(share_of(8, vec![30, 10, 20], 10), (vec![0, 3, 6], 3));
        assert_eq!(share_of(8, vec![30, 10, 20], 20), (vec![1, 4, 7], 3));
        assert_eq!(share_of(8, vec![30, 10, 20], 30), (vec![2, 5], 3));
        // A worker not (yet) in the leases counts itself.
        assert_eq!(share_of(4, vec![10], 5), (vec![0, 2], 2));
        // More workers than partitions: some get none.
        assert_eq!(share_of(2, vec![1, 2, 3], 3), (vec![], 3));
    }

    #[test]
    fn a_rows_notifications_run_oldest_first() {
        use crate::bigtable::Writer;
        let entry = |column: &str, ts: u64, writer: Option<u64>| NotifyEntry {
            cell: CellRef::new("t", "r", column),
            ts: Timestamp::from_raw(ts),
            writers: writer
                .map(|s| Writer { start_ts: Timestamp::from_raw(s), primary: CellRef::new("t", "p", "c") })
                .into_iter()
                .collect(),
        };
        let row = [entry("a", 30, None), entry("b", 10, None), entry("c", 0, Some(20)), entry("d", 10, None)];
        let order: Vec<&str> = oldest_first(&row).iter().map(|e| e.cell.column.as_str()).collect();
        assert_eq!(order, ["b", "d", "c", "a"]);
    }
}
