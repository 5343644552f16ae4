//! `percolator:observer/txn`: the running transaction, with the binding's access rules.

use percolator_store::CellRef;

use super::HostState;
use crate::bindings::percolator::observer::txn::Host;
use crate::bindings::{Cell, ScanEntry, WitError};

impl Host for HostState {
    fn get(&mut self, table: String, row: Vec<u8>, column: String) -> Result<Option<Vec<u8>>, WitError> {
        if !self.access.can_read(&table, &column) {
            return Err(self.deny(format!("read {table}/{column}")));
        }
        let r = self.txn()?.get(&table, &row, &column);
        r.map_err(|e| self.store_error(e))
    }

    fn get_many(&mut self, cells: Vec<Cell>) -> Result<Vec<Option<Vec<u8>>>, WitError> {
        if let Some(c) = cells.iter().find(|c| !self.access.can_read(&c.table, &c.column)) {
            let what = format!("read {}/{}", c.table, c.column);
            return Err(self.deny(what));
        }
        let cells: Vec<CellRef> = cells.into_iter().map(|c| CellRef::new(c.table, c.row, c.column)).collect();
        let r = self.txn()?.get_many(&cells);
        r.map_err(|e| self.store_error(e))
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
        let r = self.txn()?.scan(&table, &start, end.as_deref(), cols.as_deref(), limit as usize);
        r.map(|v| v.into_iter().map(|e| ScanEntry { row: e.row, column: e.column, value: e.value }).collect())
            .map_err(|e| self.store_error(e))
    }

    fn set(&mut self, table: String, row: Vec<u8>, column: String, value: Vec<u8>) -> Result<(), WitError> {
        if !self.access.can_write(&table, &column) {
            return Err(self.deny(format!("write {table}/{column}")));
        }
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

    fn start_ts(&mut self) -> u64 {
        self.txn.as_ref().map(|t| t.start_ts().raw()).unwrap_or(0)
    }
}
