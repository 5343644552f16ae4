//! Garbage collection of versions no reader can see.
//!
//! The safepoint is the oldest start timestamp of a running transaction of this store (a live
//! [`Transaction`](crate::Transaction) pins its snapshot), or a fresh timestamp if none runs;
//! on a shared backend, also no later than what every other live worker published in its
//! lease (`worker::shared_safepoint`).
//! Unexpired pins hold it lower (`snapshot.rs`), and it is persisted before anything changes.
//! Pass 1 resolves every lock below the safepoint — its owner cannot be running — so that no
//! commit record another lock's fate depends on is removed. Pass 2 keeps, per cell, every write
//! record above the safepoint and the newest Put at or below it, and removes older records,
//! rollback records below the safepoint, deletes that no one can see past (unless an observer
//! of the cell has yet to see them), and orphaned data.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bigtable::*;
use crate::error::{Error, Result};
use crate::lock::{self, Force, TxnStatus};
use crate::redb_backend::{RedbBigtable, RedbConfig};
use crate::snapshot;
use crate::store::{Store, StoreConfig};
use crate::timestamp::Timestamp;
use crate::worker;

/// Rows per scan page.
const PAGE: usize = 256;

/// What a GC pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcStats {
    /// Versions at or below this timestamp were considered.
    pub safepoint: Timestamp,
    /// Rows examined.
    pub rows: u64,
    /// Abandoned locks below the safepoint rolled forward or back.
    pub locks_resolved: u64,
    /// Write records and staged values removed.
    pub versions_removed: u64,
    /// True if a lock below the safepoint belonged to a live worker (non-exclusive backends
    /// only): removal was skipped this time.
    pub deferred: bool,
    /// True if the pass read every row; false for an incremental pass, which read only the
    /// rows written since a pass last looked at them ([`Store::gc_incremental`]).
    pub full: bool,
}

/// What [`Store::compact`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Compaction {
    /// The GC pass before the compaction.
    pub gc: GcStats,
    /// The file's size before (bytes).
    pub bytes_before: u64,
    /// The file's size after (bytes).
    pub bytes_after: u64,
}

impl Store {
    /// Collects every old version of the redb store at `path` and compacts its file, offline:
    /// opens the store, runs a GC pass (nothing else runs, so each cell keeps only its newest
    /// version), closes it, and compacts the file ([`RedbBigtable::compact`]).
    ///
    /// Fails with [`Error::AlreadyOpen`] if a host (another process) or another handle of
    /// this process has the store open — nothing is changed then — and with
    /// [`Error::NotFound`] if there is no file at `path` (none is created), with
    /// [`Error::InvalidArgument`] for an empty file (not made a store). After another
    /// failure the store is whole: the GC pass is durable on its own, and the compaction's
    /// copy takes the file's place only once it is whole (or redb's compaction in place, when
    /// the disk has no room for a copy, moves pages in durable steps).
    ///
    /// [`RedbBigtable::compact`]: crate::backends::RedbBigtable::compact
    pub fn compact(path: impl AsRef<Path>) -> Result<Compaction> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::NotFound(format!("no store file at {}", path.display())));
        }
        let bytes_before = std::fs::metadata(path)?.len();
        if bytes_before == 0 {
            // redb would make a new store of it.
            return Err(Error::InvalidArgument(format!("{} is empty: not a store file", path.display())));
        }
        let gc = {
            let store = Store::open(path, StoreConfig::default(), RedbConfig::default())?;
            let stats = store.gc()?;
            store.flush_secondaries();
            stats
            // Closed here, before the drop returns (a lease beat under way included:
            // `worker::Beat`): redb compacts only a file nobody has open.
        };
        let (_, bytes_after) = RedbBigtable::compact(path)?;
        Ok(Compaction { gc, bytes_before, bytes_after })
    }

    /// Removes versions that no running or future transaction and no unexpired pin
    /// ([`Store::pin_snapshot`]) can read: a full pass, which reads every row. Persists its
    /// safepoint before it changes anything ([`Store::persisted_safepoint`]), so reads at an
    /// explicit snapshot below it fail instead of missing versions.
    pub fn gc(&self) -> Result<GcStats> {
        self.gc_pass(false)
    }

    /// Like [`Store::gc`], but on an exclusive backend (redb, memory) reads only the rows
    /// written since a pass last looked at them, so its cost follows what changed, not the
    /// store's size (`docs/design.md`, "GC"). It is a full pass when the store does not know
    /// every written row: the first pass after opening, after more than `DIRTY_ROWS_MAX` rows
    /// were written between passes, once an hour, and always on a shared backend. What
    /// [`Store::start_gc`] runs.
    pub fn gc_incremental(&self) -> Result<GcStats> {
        self.gc_pass(true)
    }

    fn gc_pass(&self, incremental: bool) -> Result<GcStats> {
        // One pass of this store at a time: its persisted safepoint is kept monotonic.
        let mut collected = self.inner.gc_collected.lock().map_err(|_| Error::Closed)?;
        let safepoint = self.settled_safepoint(&mut collected)?;
        let mut stats = GcStats { safepoint, ..GcStats::default() };
        let dirty = self.inner.gc_dirty.as_ref();
        let due = match dirty {
            Some(d) if incremental && !d.full_pass_due() => d.take_due(safepoint),
            _ => None,
        };
        let rows = match due {
            Some(rows) => Rows::Due(rows),
            None => {
                if let Some(d) = dirty {
                    d.full_pass_starts();
                }
                stats.full = true;
                Rows::All
            }
        };
        let force = if self.inner.backend.exclusive() { Force::Yes } else { Force::No };
        // Pass 1: resolve abandoned locks below the safepoint. The rows it reads are kept for
        // pass 2 (up to `KEPT_MAX` of them) unless it resolved a lock: see `Kept`.
        let mut kept = Kept::new(&rows);
        let full = matches!(rows, Rows::All);
        rows.for_each_page(self, |page| {
            if let (true, Some(d)) = (full, dirty) {
                // The filter of rows (`DirtyRows::pass_read`): every row a full pass reads.
                d.pass_read(page.iter().map(|r| (r.table.as_str(), r.row.as_slice())));
            }
            let mut resolved = false;
            for row in &page {
                for cell in &row.cells {
                    for (start_ts, l) in cell.locks.iter().filter(|(ts, _)| *ts < safepoint) {
                        let c = CellRef::new(row.table.clone(), row.row.clone(), cell.column.clone());
                        resolved = true;
                        match lock::resolve(&self.inner, &c, *start_ts, l, force)? {
                            TxnStatus::Live => stats.deferred = true,
                            _ => stats.locks_resolved += 1,
                        }
                    }
                }
            }
            kept.page(page, resolved);
            Ok(())
        })?;
        if stats.deferred {
            // Only on a shared backend, whose passes are full: nothing to put back.
            return Ok(stats);
        }
        // Pass 2: remove invisible versions, a page of rows per backend call (one fsync).
        let mut ops: Vec<Op> = Vec::new();
        let mut pass_2 = |row: &RowVersions| -> Result<()> {
            stats.rows += 1;
            let (mutations, revisit) = self.removals(row, safepoint)?;
            if let (Some(d), Some(ts)) = (dirty, revisit) {
                // Something here is for a later pass: a version above the safepoint, a lock,
                // a Delete kept for its observer.
                d.record(&row.table, &row.row, ts);
            }
            if !mutations.is_empty() {
                let op = RowMutation { table: row.table.clone(), row: row.row.clone(), conditions: vec![], mutations };
                ops.push(Op::Row(op));
                if ops.len() >= PAGE {
                    self.apply_removals(std::mem::take(&mut ops), &mut stats)?;
                }
            }
            Ok(())
        };
        match kept.take() {
            Some(pages) => pages.iter().flatten().try_for_each(&mut pass_2)?,
            None => rows.for_each_page(self, |page| page.iter().try_for_each(&mut pass_2))?,
        }
        self.apply_removals(ops, &mut stats)?;
        if let (true, Some(d)) = (full, dirty) {
            d.full_pass_ends();
        }
        self.inner.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
        Ok(stats)
    }

    /// What pass 2 removes of `row` at `safepoint` (per cell: every write record above it
    /// kept, and the newest Put at or below it; older records, rollback records below it,
    /// Deletes no observer still needs and staged data without a lock removed), and the
    /// smallest timestamp of what is left for a later pass, if anything is.
    fn removals(&self, row: &RowVersions, safepoint: Timestamp) -> Result<(Vec<Mutation>, Option<Timestamp>)> {
        let mut mutations = Vec::new();
        let mut revisit: Option<Timestamp> = None;
        let mut later = |ts: Timestamp| revisit = Some(revisit.map_or(ts, |r: Timestamp| r.min(ts)));
        for cell in &row.cells {
            let mut kept_visible = false;
            // A Delete that an observer has not yet seen (the cell's notify is pending, or
            // parked in a dead letter that a retry turns back into one) is kept: without it
            // the observer would find no change to react to.
            let notified = || -> Result<bool> {
                let c = CellRef::new(row.table.clone(), row.row.clone(), cell.column.clone());
                Ok(self.inner.backend.has_notify(&c)? || crate::notify::has_dead_letter(&self.inner, &c)?)
            };
            for (ts, w) in &cell.writes {
                if *ts > safepoint {
                    later(*ts);
                    continue;
                }
                let keep = !kept_visible
                    && match w.kind {
                        WriteKind::Put(_) => true,
                        WriteKind::Delete => {
                            let kept = notified()?;
                            if kept {
                                later(*ts);
                            }
                            kept
                        }
                        WriteKind::Rollback => false,
                    };
                if !kept_visible && w.kind != WriteKind::Rollback {
                    kept_visible = true;
                }
                if !keep {
                    mutations.push(Mutation::DeleteWrite { column: cell.column.clone(), commit_ts: *ts });
                }
            }
            for (ts, _) in &cell.locks {
                later(*ts);
            }
            for ts in &cell.data {
                if *ts < safepoint && !cell.locks.iter().any(|(l, _)| l == ts) {
                    mutations.push(Mutation::DeleteData { column: cell.column.clone(), start_ts: *ts });
                } else {
                    later(*ts);
                }
            }
        }
        Ok((mutations, revisit))
    }

    /// A safepoint computed as a GC pass computes it (this store's oldest transaction, other
    /// hosts' on a shared backend, pins), persisted before it is returned: versions no reader
    /// at or above it can see may be removed. Serialized with GC passes by `collected`.
    fn settled_safepoint(&self, collected: &mut Timestamp) -> Result<Timestamp> {
        let mut safepoint = self.safepoint()?;
        if !self.inner.backend.exclusive()
            && let Some(others) = worker::shared_safepoint(&self.inner)?
        {
            // Other hosts' transactions read this backend too.
            safepoint = safepoint.min(others);
        }
        // Pins, then the safepoint persisted before anything is resolved or removed.
        let safepoint = snapshot::settle_safepoint(&self.inner, safepoint, collected)?;
        *self.inner.recent_safepoint.lock().map_err(|_| Error::Closed)? = Some((Instant::now(), safepoint));
        Ok(safepoint)
    }

    /// A settled safepoint at most `max_age` old (one is settled again when the last is
    /// older; while a GC pass runs, the last one is used): for the folder, which removes the
    /// delta versions that earlier folds deleted below it (`combine.rs`).
    pub(crate) fn recent_safepoint(&self, max_age: Duration) -> Result<Timestamp> {
        let last = *self.inner.recent_safepoint.lock().map_err(|_| Error::Closed)?;
        if let Some((at, ts)) = last
            && at.elapsed() < max_age
        {
            return Ok(ts);
        }
        match self.inner.gc_collected.try_lock() {
            Ok(mut collected) => self.settled_safepoint(&mut collected),
            Err(std::sync::TryLockError::WouldBlock) => Ok(last.map_or(Timestamp::ZERO, |(_, ts)| ts)),
            Err(std::sync::TryLockError::Poisoned(_)) => Err(Error::Closed),
        }
    }

    /// Applies a page of removals (row ops of removal mutations only) and counts them once
    /// they are in.
    fn apply_removals(&self, ops: Vec<Op>, stats: &mut GcStats) -> Result<()> {
        let removed: u64 = ops.iter().map(|op| if let Op::Row(m) = op { m.mutations.len() as u64 } else { 0 }).sum();
        if removed == 0 {
            return Ok(());
        }
        self.inner.backend.apply(ops)?;
        stats.versions_removed += removed;
        self.inner.counters.gc_versions_removed.fetch_add(removed, Ordering::Relaxed);
        Ok(())
    }

    /// Runs [`Store::gc_incremental`] every `interval` on a thread of its own, so that old
    /// versions are collected as the safepoint moves instead of only when asked (the freed
    /// pages of redb are reused by later writes). Stops when the returned handle is dropped.
    pub fn start_gc(&self, interval: Duration) -> GcRunner {
        let stop = Arc::new(AtomicBool::new(false));
        let (store, flag) = (self.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("percolator-gc".into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                while !flag.load(Ordering::SeqCst) {
                    if Instant::now() < next {
                        std::thread::sleep(Duration::from_millis(50).min(next - Instant::now()));
                        continue;
                    }
                    match store.gc_incremental() {
                        Ok(s) => tracing::debug!(
                            safepoint = s.safepoint.raw(),
                            rows = s.rows,
                            removed = s.versions_removed,
                            locks_resolved = s.locks_resolved,
                            deferred = s.deferred,
                            full = s.full,
                            "gc: a pass"
                        ),
                        Err(e) => tracing::warn!(error = %e, "gc: a pass failed; the next one retries"),
                    }
                    next = Instant::now() + interval;
                }
            })
            .expect("spawning the gc thread");
        GcRunner { stop, thread: Some(thread) }
    }
}

/// The continuous GC of [`Store::start_gc`]; stops it (after the pass under way) when dropped.
pub struct GcRunner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for GcRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::warn!("the gc thread had panicked");
        }
    }
}

/// The rows a pass reads: every row (a full pass), or the rows due in the dirty set.
enum Rows {
    All,
    Due(Vec<(String, Vec<u8>)>),
}

impl Rows {
    /// Calls `f` with the versions of each page of rows, read now (pass 2 sees what pass 1
    /// changed).
    fn for_each_page(&self, store: &Store, mut f: impl FnMut(Vec<RowVersions>) -> Result<()>) -> Result<()> {
        match self {
            Rows::All => for_each_row_page(store, f),
            Rows::Due(rows) => {
                // A page of rows per read view, without the values of write records (what is
                // removed depends on versions, never on values). A row whose every version is
                // gone is left out: nothing to do.
                for page in rows.chunks(PAGE) {
                    f(store.inner.backend.row_versions_without_values(page)?)?;
                }
                Ok(())
            }
        }
    }
}

/// Rows of an incremental pass kept from pass 1 for pass 2 (at most this many).
const KEPT_MAX: usize = 64 * PAGE;

/// The rows pass 1 read, for pass 2 to use instead of reading them again: only in an
/// incremental pass (its rows are read without values), only up to [`KEPT_MAX`] rows, and only
/// if pass 1 resolved no lock. Reading them once is enough then (`docs/design.md`, "GC"): pass 1
/// changed none of them, and what others wrote meanwhile is above the safepoint (a transaction
/// running when it was computed started at or above it) or is a rollback record a reader's
/// lock resolution added — pass 2 removes only versions it saw, and a record it did not see is
/// kept for a later pass (its write marked the row dirty).
struct Kept {
    pages: Option<Vec<Vec<RowVersions>>>,
    rows: usize,
}

impl Kept {
    fn new(rows: &Rows) -> Kept {
        let pages = match rows {
            Rows::Due(due) if due.len() <= KEPT_MAX => Some(Vec::new()),
            _ => None,
        };
        Kept { pages, rows: 0 }
    }

    /// A page pass 1 read; `resolved`: it resolved a lock in it (pass 2 reads every row again).
    fn page(&mut self, page: Vec<RowVersions>, resolved: bool) {
        self.rows += page.len();
        match &mut self.pages {
            Some(pages) if !resolved && self.rows <= KEPT_MAX => pages.push(page),
            _ => self.pages = None,
        }
    }

    fn take(self) -> Option<Vec<Vec<RowVersions>>> {
        self.pages
    }
}

fn for_each_row_page(store: &Store, mut f: impl FnMut(Vec<RowVersions>) -> Result<()>) -> Result<()> {
    let mut from: Option<(String, Vec<u8>)> = None;
    loop {
        let page = store.inner.backend.scan_versions(from.as_ref().map(|(t, r)| (t.as_str(), r.as_slice())), PAGE)?;
        let next = (page.len() == PAGE).then(|| {
            let last = page.last().expect("full page");
            let mut next = last.row.clone();
            next.push(0);
            (last.table.clone(), next)
        });
        f(page)?;
        match next {
            Some(n) => from = Some(n),
            None => return Ok(()),
        }
    }
}
