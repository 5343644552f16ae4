//! [`Transaction`]: snapshot reads and buffered writes. The commit protocol is in `commit.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bigtable::{CellRead, CellRef, ScanRange, ScannedCell, Snapshot};
use crate::combine::{CombineSpec, ScanDeltas, ScannedCells, delta_column, fold_scanned};
use crate::error::{Error, Result};
use crate::key::{self, validate_column, validate_row, validate_table};
use crate::lock::LockWaiter;
use crate::notify::NotifyKind;
use crate::store::Inner;
use crate::timestamp::Timestamp;

/// A cell returned by [`Transaction::scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanEntry {
    /// Row key.
    pub row: Vec<u8>,
    /// Column.
    pub column: String,
    /// Value.
    pub value: Vec<u8>,
}

/// A cell returned by [`Transaction::scan_timed`]: a [`ScanEntry`] and the commit timestamp of
/// the write record it was read from (`None` for this transaction's own buffered write).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedEntry {
    /// The cell.
    pub entry: ScanEntry,
    /// When the value was committed.
    pub commit_ts: Option<Timestamp>,
}

/// A snapshot-isolation transaction (the paper's `Transaction`, Figure 6).
///
/// Reads see the snapshot at [`start_ts`](Transaction::start_ts) plus this transaction's own
/// buffered writes. Writes are buffered until [`commit`](Transaction::commit). Dropping a
/// transaction without committing discards its writes; nothing was written to the store.
pub struct Transaction {
    pub(crate) inner: Arc<Inner>,
    pub(crate) start_ts: Timestamp,
    /// Buffered writes: `Some(value)` is a set, `None` a delete. Sorted, so a row's cells are
    /// adjacent and the first cell is the primary.
    pub(crate) writes: BTreeMap<CellRef, Option<Vec<u8>>>,
    /// Weak notifications to send at commit.
    pub(crate) weak: BTreeSet<CellRef>,
    /// Written cells that notify nobody and are not logged: a fold's unchanged total written
    /// back (`combine.rs`).
    pub(crate) quiet: BTreeSet<CellRef>,
    /// The 1PC fence's entries when the start timestamp was taken: reads wait only for these.
    pub(crate) fenced_upto: u64,
    /// The backend read view this transaction reads through, reused across reads.
    view: Mutex<Option<View>>,
    /// False for the inert placeholder [`Transaction::take`] leaves behind: it does not hold
    /// the start timestamp in the active set.
    registered: bool,
    /// The worker's lease epoch when the transaction started (see `Inner::check_lease`).
    pub(crate) epoch: u64,
    /// True for a read-only transaction at an explicit snapshot (`Store::begin_at`): its
    /// reads are fenced on the persisted GC safepoint and it takes no writes.
    at_snapshot: bool,
}

/// A reusable backend read view. Safe to keep because every transaction that committed before
/// `start_ts` had its locks visible before this view was opened (2PC), or finished its 1PC
/// before `fence_exits` was read; a view is dropped after meeting a lock (the lock's fate is
/// decided after the view) and when a one-phase commit has finished since it was opened.
struct View {
    snapshot: Box<dyn Snapshot>,
    fence_exits: u64,
    opened: Instant,
}

/// A view older than this is reopened, so a long-lived transaction does not pin old pages of
/// the backend (redb cannot reuse pages a read transaction still sees).
const VIEW_MAX_AGE: Duration = Duration::from_millis(100);

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.registered {
            self.inner.unregister_active(self.start_ts);
        }
    }
}

impl Transaction {
    pub(crate) fn begin(inner: Arc<Inner>) -> Result<Transaction> {
        let epoch = inner.lease_epoch.load(std::sync::atomic::Ordering::SeqCst);
        let start_ts = inner.register_active()?;
        // After the start timestamp: a later entry's commit timestamp is above it.
        let fenced_upto = inner.fence.entered();
        Ok(Transaction {
            epoch,
            inner,
            start_ts,
            writes: BTreeMap::new(),
            weak: BTreeSet::new(),
            quiet: BTreeSet::new(),
            fenced_upto,
            view: Mutex::new(None),
            registered: true,
            at_snapshot: false,
        })
    }

    /// A read-only transaction at `ts`, registered in the active set (`Store::begin_at`
    /// checks `ts`).
    pub(crate) fn begin_at(inner: Arc<Inner>, ts: Timestamp) -> Result<Transaction> {
        let epoch = inner.lease_epoch.load(std::sync::atomic::Ordering::SeqCst);
        inner.register_active_at(ts)?;
        let fenced_upto = inner.fence.entered();
        Ok(Transaction {
            epoch,
            inner,
            start_ts: ts,
            writes: BTreeMap::new(),
            weak: BTreeSet::new(),
            quiet: BTreeSet::new(),
            fenced_upto,
            view: Mutex::new(None),
            registered: true,
            at_snapshot: true,
        })
    }

    /// Moves the transaction out, leaving an inert placeholder with no buffered writes in its
    /// place. For runtimes that must hand an owned (`'static`) transaction to something else for
    /// the length of a call — a Wasm store — and put it back afterwards with `*txn = taken`.
    /// Committing the placeholder commits nothing.
    pub fn take(&mut self) -> Transaction {
        let placeholder = Transaction {
            inner: self.inner.clone(),
            start_ts: self.start_ts,
            writes: BTreeMap::new(),
            weak: BTreeSet::new(),
            quiet: BTreeSet::new(),
            fenced_upto: self.fenced_upto,
            view: Mutex::new(None),
            registered: false,
            epoch: self.epoch,
            at_snapshot: self.at_snapshot,
        };
        std::mem::replace(self, placeholder)
    }

    /// Buffers a write without validation: for the system's own reserved columns (acks).
    pub(crate) fn set_reserved(&mut self, cell: CellRef, value: Option<Vec<u8>>) {
        self.writes.insert(cell, value);
    }

    /// The snapshot timestamp.
    pub fn start_ts(&self) -> Timestamp {
        self.start_ts
    }

    /// The buffered writes, in key order: `Some(value)` a set, `None` a delete. What
    /// [`commit`](Transaction::commit) would write (a dry run reads it and drops the
    /// transaction).
    pub fn buffered_writes(&self) -> &BTreeMap<CellRef, Option<Vec<u8>>> {
        &self.writes
    }

    /// The buffered weak notifications.
    pub fn buffered_weak_notifications(&self) -> &BTreeSet<CellRef> {
        &self.weak
    }

    fn check(&self, table: &str, row: &[u8], column: &str) -> Result<()> {
        validate_table(table)?;
        validate_row(row)?;
        validate_column(column)
    }

    /// Reads one cell: this transaction's own buffered write if any, else the newest version
    /// committed before `start_ts`. Meets locks by backing off and resolving them (see
    /// [`StoreConfig::lock_wait`](crate::StoreConfig::lock_wait)).
    pub fn get(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.get_timed(table, row, column)?.map(|(v, _)| v))
    }

    /// [`Transaction::get`], with the commit timestamp of the value's write record (`None`
    /// for this transaction's own buffered write).
    pub fn get_timed(
        &self,
        table: &str,
        row: impl AsRef<[u8]>,
        column: &str,
    ) -> Result<Option<(Vec<u8>, Option<Timestamp>)>> {
        let row = row.as_ref();
        self.check(table, row, column)?;
        if let Some(spec) = self.combined_spec(table, column)? {
            return self.read_combined(&spec, row);
        }
        if !self.writes.is_empty()
            && let Some(w) = self.writes.get(&CellRef::new(table, row, column))
        {
            return Ok(w.clone().map(|v| (v, None)));
        }
        let mut reads = self.read_row(table, row, &[column])?;
        match reads.pop() {
            Some(r) => {
                let ts = r.write.as_ref().map(|(ts, _)| *ts);
                Ok(self.inner.values.read(r)?.map(|v| (v, ts)))
            }
            None => Ok(None),
        }
    }

    /// Reads several cells at once (one backend read per distinct row), in the order given.
    pub fn get_many(&self, cells: &[CellRef]) -> Result<Vec<Option<Vec<u8>>>> {
        for c in cells {
            self.check(&c.table, &c.row, &c.column)?;
        }
        let mut out: Vec<Option<Option<Vec<u8>>>> = cells.iter().map(|c| self.writes.get(c).cloned()).collect();
        let mut by_row: BTreeMap<(&str, &[u8]), Vec<usize>> = BTreeMap::new();
        for (i, c) in cells.iter().enumerate() {
            if let Some(spec) = self.combined_spec(&c.table, &c.column)? {
                out[i] = Some(self.read_combined(&spec, &c.row)?.map(|(v, _)| v));
                continue;
            }
            if out[i].is_none() {
                by_row.entry((c.table.as_str(), c.row.as_slice())).or_default().push(i);
            }
        }
        for ((table, row), idx) in by_row {
            let cols: Vec<&str> = idx.iter().map(|&i| cells[i].column.as_str()).collect();
            for (i, r) in idx.into_iter().zip(self.read_row(table, row, &cols)?) {
                out[i] = Some(self.inner.values.read(r)?);
            }
        }
        Ok(out.into_iter().map(|v| v.expect("every cell read")).collect())
    }

    /// Scans rows `[start, end)` of `table` (`end = None`: to the end of the table) and returns
    /// up to `limit` cells with values, in (row, column) order, including this transaction's own
    /// writes. `columns = None` returns every user column.
    pub fn scan(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: usize,
    ) -> Result<Vec<ScanEntry>> {
        Ok(self.scan_timed(table, start, end, columns, limit)?.into_iter().map(|t| t.entry).collect())
    }

    /// [`Transaction::scan`], with each cell's commit timestamp.
    pub fn scan_timed(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: usize,
    ) -> Result<Vec<TimedEntry>> {
        validate_table(table)?;
        for c in columns.into_iter().flatten() {
            self.check(table, b"", c)?;
        }
        let in_range = |row: &[u8]| row >= start && end.is_none_or(|e| row < e);
        let col_ok = |c: &str| match columns {
            Some(cols) => cols.contains(&c),
            None => !c.starts_with(key::RESERVED_COLUMN_PREFIX),
        };
        let buffered: Vec<(&CellRef, &Option<Vec<u8>>)> =
            self.writes.iter().filter(|(c, _)| c.table == table && in_range(&c.row) && col_ok(&c.column)).collect();
        // Combined columns the scan returns: their delta columns are read too, and folded.
        let combined: Vec<Arc<CombineSpec>> =
            self.combined_in(table)?.into_iter().filter(|s| col_ok(&s.column)).collect();
        let delta_prefixes: Vec<String> = combined.iter().map(|s| s.delta_prefix()).collect();
        let delta_prefixes: Vec<&str> = delta_prefixes.iter().map(String::as_str).collect();
        let mut deltas = ScanDeltas::default();
        // Fetch enough that buffered deletes cannot starve the limit.
        let fetch = limit.saturating_add(buffered.iter().filter(|(_, v)| v.is_none()).count());
        // (row, column) → (value, commit timestamp).
        type Cell = (Vec<u8>, Option<Timestamp>);
        let mut merged: BTreeMap<(Vec<u8>, String), Cell> = BTreeMap::new();
        // The last cell consumed: the next page starts strictly after it.
        let mut cursor: (Vec<u8>, Option<String>) = (start.to_vec(), None);
        let mut waiter = LockWaiter::new();
        // Row keys of this table sort below `table_end` (the table prefix's successor).
        let table_end = key::prefix_end(&key::table_prefix(table));
        let (lo, hi) = (key::row_prefix(table, start), end.map(|e| key::row_prefix(table, e)));
        'pages: while merged.len() < fetch {
            self.inner.fence.wait(&lo, hi.as_deref().or(table_end.as_deref()), self.fenced_upto);
            // Delta cells do not count towards the limit: with combined columns, pages large
            // enough that a row of many unfolded deltas is not read a cell per page.
            let want = if combined.is_empty() { fetch - merged.len() } else { (fetch - merged.len()).max(256) };
            let page = self.scan_view(&ScanRange {
                table,
                start: &cursor.0,
                after_column: cursor.1.as_deref(),
                end,
                columns,
                prefixes: &delta_prefixes,
                ts: self.start_ts,
                limit: want,
            })?;
            for cell in &page {
                if let Some((lock_ts, lock)) = &cell.read.lock {
                    let c = CellRef::new(table, cell.row.clone(), cell.column.clone());
                    waiter.handle(&self.inner, &c, *lock_ts, lock)?;
                    // Re-read from this cell on, through a fresh view: the lock's fate decides
                    // what is visible.
                    self.drop_view();
                    continue 'pages;
                }
                if let Some(v) = self.inner.values.read_ref(&cell.read)? {
                    let ts = cell.read.write.as_ref().map(|(ts, _)| *ts);
                    let delta = !combined.is_empty()
                        && deltas.take(&combined, &cell.row, &cell.column, ts.unwrap_or(Timestamp::ZERO), v.clone());
                    if !delta {
                        merged.insert((cell.row.clone(), cell.column.clone()), (v, ts));
                    }
                }
                cursor = (cell.row.clone(), Some(cell.column.clone()));
            }
            if page.len() < want {
                break;
            }
        }
        if !combined.is_empty() {
            self.fold_scan(&combined, deltas, cursor, &mut merged)?;
        }
        for (c, v) in buffered {
            let k = (c.row.clone(), c.column.clone());
            match v {
                Some(v) => merged.insert(k, (v.clone(), None)),
                None => merged.remove(&k),
            };
        }
        if !combined.is_empty() {
            // This transaction's own deltas, on top.
            for spec in &combined {
                let own = delta_column(&spec.column, self.start_ts);
                for (c, v) in
                    self.writes.iter().filter(|(c, _)| c.table == table && in_range(&c.row) && c.column == own)
                {
                    let Some(v) = v else { continue };
                    let k = (c.row.clone(), spec.column.clone());
                    if self.writes.contains_key(&CellRef::new(table, c.row.clone(), spec.column.clone())) {
                        continue; // a reset of this transaction already holds it
                    }
                    let cell = CellRef::new(table, c.row.clone(), spec.column.clone());
                    let base = merged.remove(&k);
                    if let Some((v, _)) = fold_scanned(spec, &cell, base, vec![(Timestamp::ZERO, v.clone())])? {
                        merged.insert(k, (v, None));
                    }
                }
            }
        }
        Ok(merged
            .into_iter()
            .take(limit)
            .map(|((row, column), (value, commit_ts))| TimedEntry {
                entry: ScanEntry { row, column, value },
                commit_ts,
            })
            .collect())
    }

    /// Folds the combined cells a scan met: each row's deltas into its base; the row the scan
    /// stopped in (`cursor`) may be incomplete, so its combined cells are read whole.
    fn fold_scan(
        &self,
        combined: &[Arc<CombineSpec>],
        deltas: ScanDeltas,
        cursor: (Vec<u8>, Option<String>),
        merged: &mut ScannedCells,
    ) -> Result<()> {
        let table = &combined[0].table;
        let last = cursor.1.is_some().then_some(cursor.0);
        let mut seen = deltas.into_seen();
        seen.retain(|(row, _), _| Some(row) != last.as_ref());
        for ((row, column), ds) in seen {
            let Some(spec) = combined.iter().find(|s| s.column == column) else { continue };
            let k = (row, column);
            let base = merged.remove(&k);
            let cell = CellRef::new(table.clone(), k.0.clone(), k.1.clone());
            if let Some(v) = fold_scanned(spec, &cell, base, ds)? {
                merged.insert(k, v);
            }
        }
        if let Some(row) = last {
            for spec in combined {
                let k = (row.clone(), spec.column.clone());
                match self.fold_committed(spec, &row)? {
                    (Some(acc), ts) => merged.insert(k, (spec.encode(&acc), ts)),
                    (None, _) => merged.remove(&k),
                };
            }
        }
        Ok(())
    }

    /// Buffers a write of `value` to a cell.
    pub fn set(&mut self, table: &str, row: impl AsRef<[u8]>, column: &str, value: impl Into<Vec<u8>>) -> Result<()> {
        let row = row.as_ref();
        self.check(table, row, column)?;
        self.check_writable(table, column)?;
        let value = value.into();
        if let Some(spec) = self.combined_spec(table, column)? {
            // A reset: the value must be one of the column's type; the deltas go.
            spec.parse_reset(&value, row)?;
            self.reset_deltas(&spec, row)?;
        }
        self.writes.insert(CellRef::new(table, row, column), Some(value));
        Ok(())
    }

    /// Buffers a delete of a cell.
    pub fn delete(&mut self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Result<()> {
        let row = row.as_ref();
        self.check(table, row, column)?;
        self.check_writable(table, column)?;
        if let Some(spec) = self.combined_spec(table, column)? {
            self.reset_deltas(&spec, row)?;
        }
        self.writes.insert(CellRef::new(table, row, column), None);
        Ok(())
    }

    /// Sends a weak notification to a weak-notify column at commit: its observers run, with no
    /// transactional conflict between notifiers (the paper's remedy for hotspots).
    pub fn notify_weak(&mut self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Result<()> {
        let row = row.as_ref();
        self.check(table, row, column)?;
        self.check_not_at_snapshot()?;
        self.weak.insert(CellRef::new(table, row, column));
        Ok(())
    }

    fn check_writable(&self, table: &str, column: &str) -> Result<()> {
        self.check_not_at_snapshot()?;
        let registry = self.inner.registry.read().map_err(|_| Error::Closed)?.clone();
        if registry.kind_of(table, column) == Some(NotifyKind::Weak) {
            return Err(Error::InvalidArgument(format!(
                "column {table}/{column} is bound to a weak-notify observer: it can be notified, not written"
            )));
        }
        Ok(())
    }

    pub(crate) fn check_not_at_snapshot(&self) -> Result<()> {
        if self.at_snapshot {
            return Err(Error::InvalidArgument(format!(
                "a transaction reading at the explicit snapshot {} is read-only",
                self.start_ts
            )));
        }
        Ok(())
    }

    /// After a read returned: fails if it cannot be trusted (the worker's lease; for a
    /// transaction at an explicit snapshot, a GC pass persisted a safepoint above it).
    fn check_read(&self) -> Result<()> {
        self.inner.check_lease(self.epoch)?;
        if self.at_snapshot {
            crate::snapshot::check_fence(&self.inner, self.start_ts)?;
        }
        Ok(())
    }

    /// Reads columns of one row at `start_ts`, resolving locks.
    pub(crate) fn read_row(&self, table: &str, row: &[u8], columns: &[&str]) -> Result<Vec<CellRead>> {
        let mut waiter = LockWaiter::new();
        loop {
            self.inner.fence.wait_row(&key::row_prefix(table, row), self.fenced_upto);
            let reads = self.with_view(|v| match v {
                Some(v) => v.read_row(table, row, columns, self.start_ts),
                None => self.inner.backend.read_row(table, row, columns, self.start_ts),
            })?;
            let mut blocked = false;
            for (column, r) in columns.iter().zip(&reads) {
                if let Some((lock_ts, lock)) = &r.lock {
                    blocked = true;
                    waiter.handle(&self.inner, &CellRef::new(table, row, *column), *lock_ts, lock)?;
                }
            }
            if !blocked {
                self.check_read()?;
                return Ok(reads);
            }
            self.drop_view();
        }
    }

    /// Scans through the read view (see [`Transaction::read_row`]).
    pub(crate) fn scan_view(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        let cells = self.with_view(|v| match v {
            Some(v) => v.scan(range),
            None => self.inner.backend.scan(range),
        })?;
        self.check_read()?;
        Ok(cells)
    }

    /// Runs `f` on the current read view, (re)opening it if there is none, if a one-phase
    /// commit finished since it was opened, or if it is old.
    fn with_view<T>(&self, f: impl FnOnce(Option<&dyn Snapshot>) -> Result<T>) -> Result<T> {
        let mut view = self.view.lock().map_err(|_| Error::Closed)?;
        let exits = self.inner.fence.exits();
        let stale = view.as_ref().is_none_or(|v| v.fence_exits != exits || v.opened.elapsed() > VIEW_MAX_AGE);
        if stale {
            // Read the exit count before opening: a 1PC that finishes after this point bumps it.
            *view = self.inner.backend.snapshot()?.map(|snapshot| View {
                snapshot,
                fence_exits: exits,
                opened: Instant::now(),
            });
        }
        f(view.as_ref().map(|v| v.snapshot.as_ref()))
    }

    pub(crate) fn drop_view(&self) {
        if let Ok(mut v) = self.view.lock() {
            *v = None;
        }
    }

    /// Commits: prewrite the primary, prewrite the secondaries, take a commit timestamp, commit
    /// the primary (the commit point), commit the secondaries. Single-row transactions commit
    /// in one row operation on exclusive backends. Read-only transactions commit trivially and
    /// return their start timestamp.
    ///
    /// # After a failure
    /// - [`Error::Conflict`]: nothing this transaction wrote is or will become visible; its
    ///   locks are removed (or will be, by the next reader). Run it again from the start.
    /// - Any other error: the outcome is decided by the primary cell. If the failure came before
    ///   the commit point the transaction is aborted; if the commit point was durable it is
    ///   committed and readers will roll its secondaries forward. A caller that must know reads
    ///   the written cells in a new transaction.
    ///
    /// Once the commit point is durable, `commit` returns `Ok` even if writing the secondaries'
    /// commit records fails: those are finished by whoever reads them next.
    pub fn commit(mut self) -> Result<Timestamp> {
        crate::commit::commit(&mut self)
    }

    /// [`Transaction::commit`], with `then` applied in the same backend call after a
    /// one-phase commit, only if it applied: their outcomes, or `None` when the commit was
    /// not one step (`then` not tried). See `commit::commit_then`.
    pub(crate) fn commit_then(
        mut self,
        then: Vec<crate::bigtable::Op>,
    ) -> Result<(Timestamp, Option<Vec<crate::bigtable::Outcome>>)> {
        crate::commit::commit_then(&mut self, then)
    }
}
