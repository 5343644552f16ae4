//! A backend whose applied row mutations are reported: one wrapper that passes every
//! [`Bigtable`] call on (the defaulted ones too: a wrapper that forgets one silently replaces the
//! backend's behaviour by the default), for whatever needs to see the writes as they land —
//! GC's dirty rows (`dirty_rows.rs`), the benchmarks' byte counts and commit times.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::bigtable::*;
use crate::error::Result;
use crate::timestamp::Timestamp;

/// What an [`Observed`] backend reports to.
pub trait ApplyHook: Send + Sync + 'static {
    /// What to keep of a row mutation until the backend has applied it.
    type Note: Send;

    /// Called before the backend gets `m` (the mutation is moved into the call): what to keep
    /// of it, if anything.
    fn note(&self, m: &RowMutation) -> Option<Self::Note>;

    /// Called after the backend applied the row mutations these notes came from (only those
    /// whose conditions held: a failed call, or an atomic group that failed a condition,
    /// reports nothing), on the applying thread.
    fn applied(&self, notes: Vec<Self::Note>);
}

impl<H: ApplyHook> ApplyHook for Arc<H> {
    type Note = H::Note;
    fn note(&self, m: &RowMutation) -> Option<H::Note> {
        (**self).note(m)
    }
    fn applied(&self, notes: Vec<H::Note>) {
        (**self).applied(notes)
    }
}

/// `inner`, with every applied row mutation reported to `hook`.
pub struct Observed<H> {
    inner: Arc<dyn Bigtable>,
    hook: H,
}

impl<H: ApplyHook> Observed<H> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Bigtable>, hook: H) -> Observed<H> {
        Observed { inner, hook }
    }

    /// The hook.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The hook's notes of `ops`' row mutations, with each one's index.
    fn op_notes(&self, ops: &[Op]) -> Vec<(usize, H::Note)> {
        ops.iter()
            .enumerate()
            .filter_map(|(i, op)| match op {
                Op::Row(m) => self.hook.note(m).map(|n| (i, n)),
                _ => None,
            })
            .collect()
    }
}

/// The notes of the ops that `outcomes` says were applied.
fn applied_notes<'a, N: 'a>(notes: Vec<(usize, N)>, outcomes: &'a [Outcome]) -> impl Iterator<Item = N> + 'a {
    notes.into_iter().filter(|(i, _)| matches!(outcomes.get(*i), Some(Outcome::Applied))).map(|(_, n)| n)
}

impl<H: ApplyHook> Bigtable for Observed<H> {
    fn snapshot(&self) -> Result<Option<Box<dyn Snapshot>>> {
        self.inner.snapshot()
    }
    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        let notes = self.op_notes(&ops);
        let outcomes = self.inner.apply(ops)?;
        if !notes.is_empty() {
            self.hook.applied(applied_notes(notes, &outcomes).collect());
        }
        Ok(outcomes)
    }
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        self.inner.read_row(table, row, columns, ts)
    }
    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        self.inner.find_write(cell, start_ts)
    }
    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        self.inner.read_data(cell, start_ts)
    }
    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        self.inner.scan(range)
    }
    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        self.inner.scan_versions(from, limit)
    }
    fn row_versions_without_values(&self, rows: &[(String, Vec<u8>)]) -> Result<Vec<RowVersions>> {
        self.inner.row_versions_without_values(rows)
    }
    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.inner.scan_notify(from, limit)
    }
    fn has_notify(&self, cell: &CellRef) -> Result<bool> {
        self.inner.has_notify(cell)
    }
    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.meta_get(key)
    }
    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner.meta_scan(prefix)
    }
    fn exclusive(&self) -> bool {
        self.inner.exclusive()
    }
    fn stats(&self) -> BackendStats {
        self.inner.stats()
    }
    fn storage_failure(&self) -> Option<StorageFailure> {
        self.inner.storage_failure()
    }
    fn reopens(&self) -> u64 {
        self.inner.reopens()
    }
    fn atomic_unit(&self, table: &str, row: &[u8]) -> Option<u64> {
        self.inner.atomic_unit(table, row)
    }
    fn apply_atomic(&self, rows: Vec<RowMutation>) -> Result<AtomicOutcome> {
        let notes: Vec<H::Note> = rows.iter().filter_map(|m| self.hook.note(m)).collect();
        let outcome = self.inner.apply_atomic(rows)?;
        if outcome == AtomicOutcome::Applied && !notes.is_empty() {
            self.hook.applied(notes);
        }
        Ok(outcome)
    }
    fn apply_atomic_then(
        &self,
        rows: Vec<RowMutation>,
        then: Vec<Op>,
    ) -> Result<(AtomicOutcome, Option<Vec<Outcome>>)> {
        let notes: Vec<H::Note> = rows.iter().filter_map(|m| self.hook.note(m)).collect();
        let then_notes = self.op_notes(&then);
        let (outcome, outcomes) = self.inner.apply_atomic_then(rows, then)?;
        if outcome == AtomicOutcome::Applied {
            let mut applied = notes;
            if let Some(outcomes) = &outcomes {
                applied.extend(applied_notes(then_notes, outcomes));
            }
            if !applied.is_empty() {
                self.hook.applied(applied);
            }
        }
        Ok((outcome, outcomes))
    }
    fn size_on_disk(&self) -> Option<u64> {
        self.inner.size_on_disk()
    }
    fn notify_partitions(&self) -> u32 {
        self.inner.notify_partitions()
    }
    fn scan_notify_partition(&self, partition: u32, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.inner.scan_notify_partition(partition, from, limit)
    }
    fn try_lock_row(&self, row_key: &[u8], owner: u64, ttl: Duration) -> Result<bool> {
        self.inner.try_lock_row(row_key, owner, ttl)
    }
    fn unlock_row(&self, row_key: &[u8], owner: u64) -> Result<()> {
        self.inner.unlock_row(row_key, owner)
    }
    fn hurry(&self) {
        self.inner.hurry()
    }
    fn wake(&self, row_keys: &[Vec<u8>]) {
        self.inner.wake(row_keys)
    }
    fn watch_wakes(&self, on_wake: Box<dyn Fn() + Send>, stop: Arc<AtomicBool>) {
        self.inner.watch_wakes(on_wake, stop)
    }
}
