//! `percolator:observer/txn`: the running transaction, with the binding's access rules.

use percolator_store::CellRef;

use super::HostState;

/// Most cells one guest `scan` call returns (a guest cannot make the host buffer a whole table).
pub(crate) const MAX_SCAN_CELLS: u32 = 10_000;
use crate::bindings::percolator::observer::txn::Host;
use crate::bindings::{Cell, Delta, ScanEntry, WitError};

impl Host for HostState {
    fn get(&mut self, table: String, row: Vec<u8>, column: String) -> Result<Option<Vec<u8>>, WitError> {
        if !self.access.can_read(&table, &column) {
            return Err(self.deny(format!("read {table}/{column}")));
        }
        let r = self.txn()?.get(&table, &row, &column);
        let v = r.map_err(|e| self.store_error(e))?;
        self.charge(v.as_ref().map_or(0, Vec::len))?;
        Ok(v)
    }

    fn get_many(&mut self, cells: Vec<Cell>) -> Result<Vec<Option<Vec<u8>>>, WitError> {
        if cells.len() > MAX_SCAN_CELLS as usize {
            return Err(WitError::InvalidArgument(format!(
                "get-many of {} cells: at most {MAX_SCAN_CELLS} per call",
                cells.len()
            )));
        }
        if let Some(c) = cells.iter().find(|c| !self.access.can_read(&c.table, &c.column)) {
            let what = format!("read {}/{}", c.table, c.column);
            return Err(self.deny(what));
        }
        let cells: Vec<CellRef> = cells.into_iter().map(|c| CellRef::new(c.table, c.row, c.column)).collect();
        // Read each distinct cell once, then charge every copy handed back.
        let mut unique = cells.clone();
        unique.sort();
        unique.dedup();
        let r = self.txn()?.get_many(&unique);
        let values = r.map_err(|e| self.store_error(e))?;
        let mut out = Vec::with_capacity(cells.len());
        for c in &cells {
            let i = unique.binary_search(c).expect("every cell is in unique");
            self.charge(values[i].as_ref().map_or(0, Vec::len))?;
            out.push(values[i].clone());
        }
        Ok(out)
    }

    fn scan(
        &mut self,
        table: String,
        start: Vec<u8>,
        end: Option<Vec<u8>>,
        columns: Option<Vec<String>>,
        limit: u32,
    ) -> Result<Vec<ScanEntry>, WitError> {
        if !self.access.can_scan(&table, columns.as_deref()) {
            let what = match &columns {
                Some(c) => format!("scan {table} columns {c:?}"),
                None => format!("scan every column of {table} (declare \"{table}/*\")"),
            };
            return Err(self.deny(what));
        }
        let cols: Option<Vec<&str>> = columns.as_ref().map(|c| c.iter().map(String::as_str).collect());
        let limit = limit.min(MAX_SCAN_CELLS) as usize;
        let r = self.txn()?.scan(&table, &start, end.as_deref(), cols.as_deref(), limit);
        let entries = r.map_err(|e| self.store_error(e))?;
        self.charge(entries.iter().map(|e| e.row.len() + e.column.len() + e.value.len()).sum())?;
        Ok(entries.into_iter().map(|e| ScanEntry { row: e.row, column: e.column, value: e.value }).collect())
    }

    fn set(&mut self, table: String, row: Vec<u8>, column: String, value: Vec<u8>) -> Result<(), WitError> {
        if !self.access.can_write(&table, &column) {
            return Err(self.deny(format!("write {table}/{column}")));
        }
        self.charge(row.len() + value.len())?;
        let r = self.txn()?.set(&table, &row, &column, value);
        r.map_err(|e| self.store_error(e))
    }

    fn delete(&mut self, table: String, row: Vec<u8>, column: String) -> Result<(), WitError> {
        if !self.access.can_write(&table, &column) {
            return Err(self.deny(format!("delete {table}/{column}")));
        }
        let r = self.txn()?.delete(&table, &row, &column);
        r.map_err(|e| self.store_error(e))
    }

    fn notify_weak(&mut self, table: String, row: Vec<u8>, column: String) -> Result<(), WitError> {
        if !self.access.can_write(&table, &column) {
            return Err(self.deny(format!("notify {table}/{column}")));
        }
        let r = self.txn()?.notify_weak(&table, &row, &column);
        r.map_err(|e| self.store_error(e))
    }

    fn combine(&mut self, table: String, row: Vec<u8>, column: String, delta: Delta) -> Result<(), WitError> {
        if !self.access.can_write(&table, &column) {
            return Err(self.deny(format!("combine into {table}/{column}")));
        }
        let delta = match delta {
            Delta::Int(i) => percolator_store::Delta::Int(i),
            Delta::Float(f) => percolator_store::Delta::Float(f),
            Delta::Members(m) => {
                self.charge(m.iter().map(String::len).sum())?;
                percolator_store::Delta::Members(m)
            }
        };
        self.charge(row.len())?;
        let r = self.txn()?.combine(&table, &row, &column, delta);
        r.map_err(|e| match e {
            // Which binding: the store's message names the table, column and row.
            percolator_store::Error::InvalidArgument(m) => {
                WitError::InvalidArgument(format!("observer {}: {m}", self.observer))
            }
            e => self.store_error(e),
        })
    }

    fn start_ts(&mut self) -> u64 {
        self.txn.as_ref().map(|t| t.start_ts().raw()).unwrap_or(0)
    }
}
