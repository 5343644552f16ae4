//! An in-memory [`Bigtable`] that commits every operation separately (no group commit).
//!
//! For tests: fast, and it keeps the protocol honest, because nothing above the seam can lean
//! on two row operations landing together. It is exclusive (one process), like redb.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bigtable::*;
use crate::cells::{self, KvRead, KvWrite, Visitor};
use crate::error::{Error, Result};
use crate::timestamp::Timestamp;

#[derive(Default)]
struct Map(BTreeMap<Vec<u8>, Vec<u8>>);

impl KvRead for Map {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key).cloned())
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        if to.is_some_and(|to| to <= from) {
            return Ok(()); // an empty (or inverted) range
        }
        let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
        for (k, v) in self.0.range::<[u8], _>((Bound::Included(from), upper)) {
            if !f(k, v)? {
                break;
            }
        }
        Ok(())
    }
}

impl KvWrite for Map {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.0.remove(key);
        Ok(())
    }
}

#[derive(Default)]
struct Maps {
    cells: Map,
    notify: Map,
    meta: Map,
}

/// In-memory backend; see the module docs.
#[derive(Default)]
pub struct MemBigtable {
    maps: Mutex<Maps>,
    commits: AtomicU64,
}

impl MemBigtable {
    /// An empty store.
    pub fn new() -> MemBigtable {
        MemBigtable::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Maps) -> Result<T>) -> Result<T> {
        let mut g = self.maps.lock().map_err(|_| Error::Closed)?;
        f(&mut g)
    }
}

impl Bigtable for MemBigtable {
    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        ops.iter()
            .map(|op| {
                self.commits.fetch_add(1, Ordering::Relaxed);
                self.with(|m| cells::apply_op(&mut m.cells, &mut m.notify, &mut m.meta, op))
            })
            .collect()
    }
    fn atomic_unit(&self, _table: &str, _row: &[u8]) -> Option<u64> {
        Some(0)
    }
    fn apply_atomic(&self, rows: Vec<RowMutation>) -> Result<AtomicOutcome> {
        check_atomic_group(self, &rows)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.with(|m| cells::apply_rows_atomically(&mut m.cells, &mut m.notify, &rows))
    }
    fn apply_atomic_then(
        &self,
        rows: Vec<RowMutation>,
        then: Vec<Op>,
    ) -> Result<(AtomicOutcome, Option<Vec<Outcome>>)> {
        check_atomic_group(self, &rows)?;
        self.commits.fetch_add(1, Ordering::Relaxed);
        // Under one hold of the map, as redb's round.
        self.with(|m| cells::apply_rows_then(&mut m.cells, &mut m.notify, &mut m.meta, &rows, &then))
    }
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        self.with(|m| cells::read_row(&m.cells, table, row, columns, ts))
    }
    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        self.with(|m| cells::find_write(&m.cells, cell, start_ts))
    }
    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        self.with(|m| cells::read_data(&m.cells, cell, start_ts))
    }
    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        self.with(|m| cells::scan(&m.cells, range))
    }
    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        self.with(|m| cells::scan_versions(&m.cells, from, limit))
    }
    fn row_versions_without_values(&self, rows: &[(String, Vec<u8>)]) -> Result<Vec<RowVersions>> {
        self.with(|m| cells::versions_of_rows(&m.cells, rows, cells::WriteValues::Left))
    }
    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.with(|m| cells::scan_notify(&m.notify, from, limit))
    }
    fn has_notify(&self, cell: &CellRef) -> Result<bool> {
        let pos = notify_position(cell);
        self.with(|m| Ok(m.notify.get(&pos)?.is_some()))
    }
    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.with(|m| m.meta.get(key.as_bytes()))
    }
    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.with(|m| cells::meta_scan(&m.meta, prefix))
    }
    fn exclusive(&self) -> bool {
        true
    }
    fn stats(&self) -> BackendStats {
        let c = self.commits.load(Ordering::Relaxed);
        BackendStats { commits: c, ops: c, ..BackendStats::default() }
    }
}
