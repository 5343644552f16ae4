//! [`Flaky`]: a backend whose calls fail on demand, for the tests of how the store and the host
//! meet a backend's errors.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use percolator_store::backends::{
    AtomicOutcome, BackendStats, Bigtable, CellRead, MemBigtable, Mutation, NotifyEntry, Op, Outcome, RowMutation,
    RowVersions, ScanRange, ScannedCell, Snapshot, WriteRecord,
};
use percolator_store::{CellRef, Error, Timestamp};

/// A [`MemBigtable`] whose calls fail on demand: reads of the notify group or clears of notify
/// cells (errors the scanner can only retry), every write, or the reads of one column, as a
/// backend that cannot be reached fails them (`Error::Unavailable`).
#[derive(Default)]
pub struct Flaky {
    pub mem: MemBigtable,
    pub fail_scans: AtomicBool,
    pub fail_clears: AtomicBool,
    /// Every write fails with `Error::Unavailable`, as on a Redis Cluster whose master is out
    /// of reach.
    pub unavailable: AtomicBool,
    /// Reads that ask for this column fail with `Error::Unavailable` (a run then gets as far
    /// as its observer's own read of it).
    pub unavailable_column: Mutex<Option<String>>,
    /// Clears applied in a call of their own, and clears that rode with a commit
    /// (`apply_atomic_then`), tried or not.
    pub clears_alone: AtomicU64,
    pub clears_with_commit: AtomicU64,
}

fn clears(ops: &[Op]) -> u64 {
    ops.iter()
        .filter(|op| matches!(op, Op::Row(r) if r.mutations.iter().any(|m| matches!(m, Mutation::ClearNotify { .. }))))
        .count() as u64
}

impl Flaky {
    fn reachable(&self) -> percolator_store::Result<()> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(Error::Unavailable("injected: 127.0.0.1:7001 did not answer".into()));
        }
        Ok(())
    }

    fn refuse(&self, ops: &[Op]) -> bool {
        self.fail_clears.load(Ordering::SeqCst)
            && ops.iter().any(
                |op| matches!(op, Op::Row(r) if r.mutations.iter().any(|m| matches!(m, Mutation::ClearNotify { .. }))),
            )
    }
}

impl Bigtable for Flaky {
    fn snapshot(&self) -> percolator_store::Result<Option<Box<dyn Snapshot>>> {
        self.mem.snapshot()
    }
    fn apply(&self, ops: Vec<Op>) -> percolator_store::Result<Vec<Outcome>> {
        self.reachable()?;
        if self.refuse(&ops) {
            return Err(Error::Storage("injected: clearing a notify cell failed".into()));
        }
        self.clears_alone.fetch_add(clears(&ops), Ordering::SeqCst);
        self.mem.apply(ops)
    }
    fn atomic_unit(&self, table: &str, row: &[u8]) -> Option<u64> {
        self.mem.atomic_unit(table, row)
    }
    fn apply_atomic(&self, rows: Vec<RowMutation>) -> percolator_store::Result<AtomicOutcome> {
        self.reachable()?;
        self.mem.apply_atomic(rows)
    }
    fn apply_atomic_then(
        &self,
        rows: Vec<RowMutation>,
        then: Vec<Op>,
    ) -> percolator_store::Result<(AtomicOutcome, Option<Vec<Outcome>>)> {
        self.clears_with_commit.fetch_add(clears(&then), Ordering::SeqCst);
        self.reachable()?;
        if self.refuse(&then) {
            // What the default does when its second call fails: the group's outcome stands,
            // and the caller applies `then` itself (and meets the error).
            return Ok((self.mem.apply_atomic_then(rows, Vec::new())?.0, None));
        }
        self.mem.apply_atomic_then(rows, then)
    }
    fn read_row(
        &self,
        table: &str,
        row: &[u8],
        columns: &[&str],
        ts: Timestamp,
    ) -> percolator_store::Result<Vec<CellRead>> {
        let down = self.unavailable_column.lock().unwrap_or_else(PoisonError::into_inner);
        if down.as_deref().is_some_and(|c| columns.contains(&c)) {
            return Err(Error::Unavailable("injected: 127.0.0.1:7001 did not answer".into()));
        }
        drop(down);
        self.mem.read_row(table, row, columns, ts)
    }
    fn find_write(
        &self,
        cell: &CellRef,
        start_ts: Timestamp,
    ) -> percolator_store::Result<Option<(Timestamp, WriteRecord)>> {
        self.mem.find_write(cell, start_ts)
    }
    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> percolator_store::Result<Option<Vec<u8>>> {
        self.mem.read_data(cell, start_ts)
    }
    fn scan(&self, range: &ScanRange<'_>) -> percolator_store::Result<Vec<ScannedCell>> {
        self.mem.scan(range)
    }
    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> percolator_store::Result<Vec<RowVersions>> {
        self.mem.scan_versions(from, limit)
    }
    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> percolator_store::Result<Vec<NotifyEntry>> {
        if self.fail_scans.load(Ordering::SeqCst) {
            return Err(Error::Storage("injected: reading the notify group failed".into()));
        }
        self.mem.scan_notify(from, limit)
    }
    fn meta_get(&self, key: &str) -> percolator_store::Result<Option<Vec<u8>>> {
        self.mem.meta_get(key)
    }
    fn meta_scan(&self, prefix: &str) -> percolator_store::Result<Vec<(String, Vec<u8>)>> {
        self.mem.meta_scan(prefix)
    }
    fn exclusive(&self) -> bool {
        self.mem.exclusive()
    }
    fn stats(&self) -> BackendStats {
        self.mem.stats()
    }
}
