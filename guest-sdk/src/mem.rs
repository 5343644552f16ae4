//! An in-memory store for unit-testing observers natively, with plain `cargo test`.
//!
//! [`MemStore`] keeps every committed version of every cell; [`MemTxn`] reads the snapshot at
//! its start timestamp plus its own buffered writes, and its commit fails with
//! [`Error::Conflict`] if another transaction committed a write to one of its cells after it
//! started — the snapshot-isolation rules of the real store, without locks, notifications or
//! acks. Names are validated like the store does (1–255 bytes, no control characters, no
//! reserved `__` columns, rows up to 4096 bytes), and a binding's declared writes and weak-notify
//! columns can be imitated with [`MemStore::declare_writes`] and [`MemStore::bind_weak`].
//!
//! ```
//! use percolator_guest::mem::MemStore;
//! use percolator_guest::{Notification, Result, Txn};
//!
//! fn shout(txn: &mut impl Txn, n: &Notification) -> Result<()> {
//!     let text = txn.get_str(n.table(), n.row(), n.column())?.unwrap_or_default();
//!     txn.set_str(n.table(), n.row(), "derived:upper", &text.to_uppercase())
//! }
//!
//! let store = MemStore::new();
//! store.put("docs", b"r1", "raw:text", "hi");
//! let n = store.notification("docs", b"r1", "raw:text");
//! store.run(|txn| shout(txn, &n)).unwrap();
//! assert_eq!(store.get_str("docs", b"r1", "derived:upper").as_deref(), Some("HI"));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::txn::{Cell, Notification, Observer, ScanEntry, Txn};

/// Longest table or column name, in bytes (as in the store).
const MAX_NAME_LEN: usize = 255;
/// Longest row key, in bytes (as in the store).
const MAX_ROW_LEN: usize = 4096;
/// Reserved column prefix (as in the store).
const RESERVED_COLUMN_PREFIX: &str = "__";

/// A multi-version in-memory store. Cloning gives another handle to the same store.
#[derive(Clone, Debug, Default)]
pub struct MemStore {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Every committed version of every cell: commit timestamp → value (`None`: deleted).
    versions: BTreeMap<Cell, BTreeMap<u64, Option<Vec<u8>>>>,
    /// The last timestamp handed out.
    clock: u64,
    /// Weak notifications sent by committed transactions, oldest first.
    weak_sent: Vec<Cell>,
    /// `Some`: only these (table, column)s may be written by transactions.
    declared_writes: Option<BTreeSet<(String, String)>>,
    /// Weak-notify columns: they can be notified, not written.
    weak_columns: BTreeSet<(String, String)>,
    /// `Some(n)`: a scan returns at most `n` cells, whatever its limit.
    scan_cap: Option<u32>,
    /// The binding's parameters, as `[binding.params]` would give them.
    params: BTreeMap<String, String>,
}

impl State {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The value of `cell` committed before `ts`.
    fn read(&self, cell: &Cell, ts: u64) -> Option<&Vec<u8>> {
        self.versions.get(cell)?.range(..ts).next_back()?.1.as_ref()
    }

    /// The commit timestamp of the newest version of `cell` (a delete included).
    fn latest_ts(&self, cell: &Cell) -> Option<u64> {
        self.versions.get(cell)?.keys().next_back().copied()
    }

    fn write(&mut self, cell: Cell, ts: u64, value: Option<Vec<u8>>) {
        self.versions.entry(cell).or_default().insert(ts, value);
    }
}

impl MemStore {
    /// An empty store.
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Commits a write of `value` directly (as another client would, ignoring
    /// [`declare_writes`](MemStore::declare_writes)) and returns its commit timestamp.
    pub fn put(&self, table: &str, row: impl AsRef<[u8]>, column: &str, value: impl AsRef<[u8]>) -> u64 {
        let mut s = self.lock();
        let ts = s.tick();
        s.write(Cell::new(table, row.as_ref(), column), ts, Some(value.as_ref().to_vec()));
        ts
    }

    /// Commits a `u64` (8 bytes big-endian) directly, like [`put`](MemStore::put).
    pub fn put_u64(&self, table: &str, row: impl AsRef<[u8]>, column: &str, value: u64) -> u64 {
        self.put(table, row, column, value.to_be_bytes())
    }

    /// Commits a delete directly and returns its commit timestamp.
    pub fn remove(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> u64 {
        let mut s = self.lock();
        let ts = s.tick();
        s.write(Cell::new(table, row.as_ref(), column), ts, None);
        ts
    }

    /// The newest committed value of a cell.
    pub fn get(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        s.read(&Cell::new(table, row.as_ref(), column), u64::MAX).cloned()
    }

    /// The newest committed value of a cell as text.
    ///
    /// # Panics
    /// If the value is not UTF-8.
    pub fn get_str(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Option<String> {
        self.get(table, row, column).map(|v| String::from_utf8(v).expect("cell value is not UTF-8"))
    }

    /// The newest committed value of a cell as a `u64` (8 bytes big-endian).
    ///
    /// # Panics
    /// If the value is not 8 bytes long.
    pub fn get_u64(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Option<u64> {
        self.get(table, row, column).map(|v| u64::from_be_bytes(v.try_into().expect("cell value is not 8 bytes")))
    }

    /// Every cell of `table` with its newest committed value, in key order.
    pub fn cells(&self, table: &str) -> Vec<(Cell, Vec<u8>)> {
        let s = self.lock();
        s.versions
            .iter()
            .filter(|(c, _)| c.table == table)
            .filter_map(|(c, _)| s.read(c, u64::MAX).map(|v| (c.clone(), v.clone())))
            .collect()
    }

    /// A strong notification of a cell, as the host would deliver it now: `commit_ts` is the
    /// newest committed write of the cell, `attempt` is 1.
    pub fn notification(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Notification {
        let cell = Cell::new(table, row.as_ref(), column);
        let commit_ts = self.lock().latest_ts(&cell);
        Notification::strong(cell, commit_ts)
    }

    /// Imitates a binding's declared writes: from now on transactions may write (set or
    /// delete) only the (table, column)s declared so far; others fail with [`Error::Denied`].
    pub fn declare_writes(&self, table: &str, columns: &[&str]) {
        let mut s = self.lock();
        let declared = s.declared_writes.get_or_insert_with(BTreeSet::new);
        declared.extend(columns.iter().map(|c| (table.to_owned(), (*c).to_owned())));
    }

    /// Marks a column as weak-notify: transactions may notify it but not write it
    /// ([`Error::InvalidArgument`], as in the store).
    pub fn bind_weak(&self, table: &str, column: &str) {
        self.lock().weak_columns.insert((table.to_owned(), column.to_owned()));
    }

    /// Caps every scan at `cells` cells, whatever its limit — as the host caps a scan at 10,000
    /// cells per call — so tests can check that an observer pages through a short result
    /// instead of taking it for the end.
    pub fn cap_scans(&self, cells: u32) {
        self.lock().scan_cap = Some(cells);
    }

    /// The weak notifications sent by committed transactions since the last call, oldest first.
    pub fn take_weak_notifications(&self) -> Vec<Cell> {
        std::mem::take(&mut self.lock().weak_sent)
    }

    /// Sets the binding parameter `key` (what `[binding.params]` gives the guest in the host).
    pub fn set_param(&self, key: &str, value: impl Into<String>) {
        self.lock().params.insert(key.to_owned(), value.into());
    }

    /// Starts a transaction at a new snapshot.
    pub fn begin(&self) -> MemTxn {
        let start_ts = self.lock().tick();
        MemTxn { store: self.clone(), start_ts, writes: BTreeMap::new(), weak: BTreeSet::new() }
    }

    /// Runs `f` in a new transaction and commits it if `f` returns `Ok` (discards it
    /// otherwise). Returns the commit timestamp.
    pub fn run(&self, f: impl FnOnce(&mut MemTxn) -> Result<()>) -> Result<u64> {
        let mut txn = self.begin();
        f(&mut txn)?;
        txn.commit()
    }

    /// Runs observer `O` on `notification` the way the host does (one attempt): in a new
    /// transaction, committed only if the observer returns `Ok`.
    pub fn observe<O: Observer>(&self, notification: &Notification) -> Result<()> {
        self.run(|txn| O::observe(txn, notification)).map(|_| ())
    }
}

/// A transaction of a [`MemStore`]: snapshot reads, buffered writes, commit with write-write
/// conflict detection. Dropping it without [`commit`](MemTxn::commit) discards it.
#[derive(Debug)]
pub struct MemTxn {
    store: MemStore,
    start_ts: u64,
    writes: BTreeMap<Cell, Option<Vec<u8>>>,
    weak: BTreeSet<Cell>,
}

impl MemTxn {
    /// Commits the buffered writes and weak notifications and returns the commit timestamp.
    /// Fails with [`Error::Conflict`] (writing nothing) if another transaction committed a
    /// write to one of the written cells after this one started.
    pub fn commit(self) -> Result<u64> {
        let mut s = self.store.lock();
        for cell in self.writes.keys() {
            if let Some(ts) = s.latest_ts(cell)
                && ts > self.start_ts
            {
                return Err(Error::Conflict(format!(
                    "{}/{}/{} was written at {ts}, after this transaction started at {}",
                    cell.table,
                    String::from_utf8_lossy(&cell.row),
                    cell.column,
                    self.start_ts
                )));
            }
        }
        let commit_ts = s.tick();
        for (cell, value) in self.writes {
            s.write(cell, commit_ts, value);
        }
        s.weak_sent.extend(self.weak);
        Ok(commit_ts)
    }

    /// The buffered writes (`None`: a delete).
    pub fn buffered(&self) -> &BTreeMap<Cell, Option<Vec<u8>>> {
        &self.writes
    }

    /// The buffered weak notifications.
    pub fn buffered_weak(&self) -> &BTreeSet<Cell> {
        &self.weak
    }

    fn check_writable(&self, table: &str, column: &str) -> Result<()> {
        let s = self.store.lock();
        let key = (table.to_owned(), column.to_owned());
        if s.weak_columns.contains(&key) {
            return Err(Error::InvalidArgument(format!(
                "column {table}/{column} is bound to a weak-notify observer: it can be notified, not written"
            )));
        }
        if let Some(declared) = &s.declared_writes
            && !declared.contains(&key)
        {
            return Err(Error::Denied(format!("the binding does not declare a write to {table}/{column}")));
        }
        Ok(())
    }
}

fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} name is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} name is {} bytes, longer than the limit of {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::InvalidArgument(format!("{what} name {name:?} contains the control character {c:?}")));
    }
    Ok(())
}

fn check_column(column: &str) -> Result<()> {
    check_name("column", column)?;
    if column.starts_with(RESERVED_COLUMN_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "column {column:?} is in the reserved namespace {RESERVED_COLUMN_PREFIX:?}"
        )));
    }
    Ok(())
}

fn check(table: &str, row: &[u8], column: &str) -> Result<()> {
    check_name("table", table)?;
    if row.len() > MAX_ROW_LEN {
        return Err(Error::InvalidArgument(format!(
            "row key is {} bytes, longer than the limit of {MAX_ROW_LEN}",
            row.len()
        )));
    }
    check_column(column)
}

impl Txn for MemTxn {
    fn get(&self, table: &str, row: &[u8], column: &str) -> Result<Option<Vec<u8>>> {
        check(table, row, column)?;
        let cell = Cell::new(table, row, column);
        if let Some(w) = self.writes.get(&cell) {
            return Ok(w.clone());
        }
        Ok(self.store.lock().read(&cell, self.start_ts).cloned())
    }

    fn get_many(&self, cells: &[Cell]) -> Result<Vec<Option<Vec<u8>>>> {
        cells.iter().map(|c| self.get(&c.table, &c.row, &c.column)).collect()
    }

    fn scan(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: u32,
    ) -> Result<Vec<ScanEntry>> {
        check_name("table", table)?;
        for c in columns.into_iter().flatten() {
            check_column(c)?;
        }
        let in_range =
            |c: &Cell| c.table == table && c.row.as_slice() >= start && end.is_none_or(|e| c.row.as_slice() < e);
        let col_ok = |c: &str| match columns {
            Some(cols) => cols.contains(&c),
            None => !c.starts_with(RESERVED_COLUMN_PREFIX),
        };
        let mut merged: BTreeMap<(Vec<u8>, String), Vec<u8>> = BTreeMap::new();
        let limit = {
            let s = self.store.lock();
            let from = Cell::new(table, start, "");
            for (cell, _) in s.versions.range(from..).take_while(|(c, _)| c.table == table) {
                if !in_range(cell) || !col_ok(&cell.column) {
                    continue;
                }
                if let Some(v) = s.read(cell, self.start_ts) {
                    merged.insert((cell.row.clone(), cell.column.clone()), v.clone());
                }
            }
            s.scan_cap.map_or(limit, |cap| limit.min(cap))
        };
        for (cell, value) in self.writes.iter().filter(|(c, _)| in_range(c) && col_ok(&c.column)) {
            let k = (cell.row.clone(), cell.column.clone());
            match value {
                Some(v) => merged.insert(k, v.clone()),
                None => merged.remove(&k),
            };
        }
        Ok(merged
            .into_iter()
            .take(limit as usize)
            .map(|((row, column), value)| ScanEntry { row, column, value })
            .collect())
    }

    fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()> {
        check(table, row, column)?;
        self.check_writable(table, column)?;
        self.writes.insert(Cell::new(table, row, column), Some(value.to_vec()));
        Ok(())
    }

    fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        check(table, row, column)?;
        self.check_writable(table, column)?;
        self.writes.insert(Cell::new(table, row, column), None);
        Ok(())
    }

    fn notify_weak(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        check(table, row, column)?;
        self.weak.insert(Cell::new(table, row, column));
        Ok(())
    }

    fn start_ts(&self) -> u64 {
        self.start_ts
    }

    fn param(&self, key: &str) -> Option<String> {
        self.store.lock().params.get(key).cloned()
    }

    fn params(&self) -> Vec<(String, String)> {
        self.store.lock().params.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_see_the_snapshot_and_own_writes() {
        let store = MemStore::new();
        store.put("t", b"r", "c:a", "old");
        let mut txn = store.begin();
        store.put("t", b"r", "c:a", "new"); // after the snapshot
        assert_eq!(txn.get_str("t", b"r", "c:a").unwrap().as_deref(), Some("old"));
        txn.set_str("t", b"r", "c:b", "mine").unwrap();
        assert_eq!(txn.get_str("t", b"r", "c:b").unwrap().as_deref(), Some("mine"));
        txn.delete("t", b"r", "c:b").unwrap();
        assert_eq!(txn.get("t", b"r", "c:b").unwrap(), None);
        assert_eq!(store.get("t", b"r", "c:b"), None, "buffered writes are invisible before commit");
        let cells = [Cell::new("t", *b"r", "c:a"), Cell::new("t", *b"x", "c:a")];
        assert_eq!(txn.get_many(&cells).unwrap(), vec![Some(b"old".to_vec()), None]);
    }

    #[test]
    fn write_write_conflict() {
        let store = MemStore::new();
        let mut t1 = store.begin();
        let mut t2 = store.begin();
        t1.add_u64("t", b"r", "c:n", 1).unwrap();
        t2.add_u64("t", b"r", "c:n", 1).unwrap();
        t1.commit().unwrap();
        assert!(t2.commit().unwrap_err().is_conflict());
        assert_eq!(store.get_u64("t", b"r", "c:n"), Some(1));
    }

    #[test]
    fn failed_run_writes_nothing() {
        let store = MemStore::new();
        let r = store.run(|txn| {
            txn.set_str("t", b"r", "c:a", "x")?;
            Err(Error::failed("no"))
        });
        assert_eq!(r, Err(Error::failed("no")));
        assert_eq!(store.get("t", b"r", "c:a"), None);
    }

    #[test]
    fn capped_scans_return_short_pages() {
        let store = MemStore::new();
        for row in ["a", "b", "c"] {
            store.put("t", row, "c:x", "1");
        }
        store.cap_scans(2);
        let txn = store.begin();
        assert_eq!(txn.scan("t", b"", None, None, 100).unwrap().len(), 2);
        assert_eq!(txn.scan("t", b"c", None, None, 100).unwrap().len(), 1);
    }

    #[test]
    fn scan_merges_snapshot_and_buffer() {
        let store = MemStore::new();
        for (row, col, v) in [("a", "c:x", "1"), ("b", "c:x", "2"), ("b", "c:y", "3"), ("c", "c:x", "4")] {
            store.put("t", row, col, v);
        }
        store.put("other", "b", "c:x", "no");
        let mut txn = store.begin();
        txn.delete("t", b"b", "c:x").unwrap();
        txn.set_str("t", b"bb", "c:x", "5").unwrap();
        let rows = |es: Vec<ScanEntry>| -> Vec<(String, String)> {
            es.into_iter().map(|e| (String::from_utf8(e.row).unwrap(), e.column)).collect()
        };
        let all = txn.scan("t", b"b", Some(b"c"), None, 100).unwrap();
        assert_eq!(rows(all), vec![("b".into(), "c:y".into()), ("bb".into(), "c:x".into())]);
        let xs = txn.scan("t", b"", None, Some(&["c:x"]), 2).unwrap();
        assert_eq!(rows(xs), vec![("a".into(), "c:x".into()), ("bb".into(), "c:x".into())]);
    }

    #[test]
    fn validation_and_declared_writes() {
        let store = MemStore::new();
        let mut txn = store.begin();
        assert!(matches!(txn.set("", b"r", "c", b""), Err(Error::InvalidArgument(_))));
        assert!(matches!(txn.set("t", b"r", "__ack:x", b""), Err(Error::InvalidArgument(_))));
        assert!(matches!(txn.get("t", &[0; 4097], "c"), Err(Error::InvalidArgument(_))));
        store.declare_writes("t", &["out:a"]);
        store.bind_weak("t", "weak:w");
        assert!(txn.set("t", b"r", "out:a", b"").is_ok());
        assert!(matches!(txn.set("t", b"r", "secret:b", b""), Err(Error::Denied(_))));
        assert!(matches!(txn.set("t", b"r", "weak:w", b""), Err(Error::InvalidArgument(_))));
        txn.notify_weak("t", b"r", "weak:w").unwrap();
        txn.commit().unwrap();
        assert_eq!(store.take_weak_notifications(), vec![Cell::new("t", *b"r", "weak:w")]);
        assert!(store.take_weak_notifications().is_empty());
    }

    #[test]
    fn integers_and_notifications() {
        let store = MemStore::new();
        let ts = store.put("t", b"r", "c:a", "x");
        let n = store.notification("t", b"r", "c:a");
        assert_eq!(n.commit_ts, Some(ts));
        assert!(!n.weak);
        assert_eq!(n.attempt, 1);
        store.put("t", b"r", "c:bad", "abc");
        let txn = store.begin();
        assert!(matches!(txn.get_u64("t", b"r", "c:bad"), Err(Error::Failed(_))));
        store.put_u64("t", b"r", "c:n", 41);
        let mut txn = store.begin();
        assert_eq!(txn.add_u64("t", b"r", "c:n", 1).unwrap(), 42);
        txn.commit().unwrap();
        assert_eq!(store.get_u64("t", b"r", "c:n"), Some(42));
        assert_eq!(store.cells("t").len(), 3);
    }
}
