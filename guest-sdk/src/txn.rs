//! The transaction an observer runs in, and the values it deals in.

use crate::error::{Error, Result};

/// Where a cell lives: table, row key, column (`family:qualifier` by convention).
///
/// Ordered by (table, row, column), the store's key order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cell {
    /// Table name.
    pub table: String,
    /// Row key (arbitrary bytes).
    pub row: Vec<u8>,
    /// Column name.
    pub column: String,
}

impl Cell {
    /// A cell from its parts.
    pub fn new(table: impl Into<String>, row: impl Into<Vec<u8>>, column: impl Into<String>) -> Cell {
        Cell { table: table.into(), row: row.into(), column: column.into() }
    }

    /// Another column of the same row of the same table.
    pub fn sibling(&self, column: impl Into<String>) -> Cell {
        Cell { table: self.table.clone(), row: self.row.clone(), column: column.into() }
    }
}

/// What changed: the argument of every observer run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The changed (or weakly notified) cell.
    pub cell: Cell,
    /// True for a weak notification (no collapsing guarantee; runs may repeat).
    pub weak: bool,
    /// Commit timestamp of the newest write the run's snapshot sees (strong only).
    pub commit_ts: Option<u64>,
    /// 1 for the first run of this notification, more for retries after failures.
    pub attempt: u32,
}

impl Notification {
    /// A strong notification of `cell` (first attempt).
    pub fn strong(cell: Cell, commit_ts: Option<u64>) -> Notification {
        Notification { cell, weak: false, commit_ts, attempt: 1 }
    }

    /// A weak notification of `cell` (first attempt).
    pub fn weak(cell: Cell) -> Notification {
        Notification { cell, weak: true, commit_ts: None, attempt: 1 }
    }

    /// The same notification as retry number `attempt`.
    pub fn with_attempt(mut self, attempt: u32) -> Notification {
        self.attempt = attempt;
        self
    }

    /// The notified cell's table.
    pub fn table(&self) -> &str {
        &self.cell.table
    }

    /// The notified cell's row key.
    pub fn row(&self) -> &[u8] {
        &self.cell.row
    }

    /// The notified cell's column.
    pub fn column(&self) -> &str {
        &self.cell.column
    }
}

/// A cell returned by [`Txn::scan`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScanEntry {
    /// Row key.
    pub row: Vec<u8>,
    /// Column name.
    pub column: String,
    /// The value visible to the transaction.
    pub value: Vec<u8>,
}

/// What [`Txn::combine`] adds to a combined column; mirrors the WIT `delta` variant.
///
/// The kind must fit the column's declared type (the host's `[[combine]] type`): [`Int`] for
/// `i64` (also taken for `f64`), [`Float`] (finite) for `f64`, [`Members`] for `set`.
///
/// [`Int`]: Delta::Int
/// [`Float`]: Delta::Float
/// [`Members`]: Delta::Members
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// An integer: for `i64` columns, and `f64` ones (converted).
    Int(i64),
    /// A float: for `f64` columns; must be finite.
    Float(f64),
    /// Strings to add to a `set` column.
    Members(Vec<String>),
}

impl Delta {
    /// [`Delta::Members`] of any strings.
    pub fn members<S: Into<String>>(members: impl IntoIterator<Item = S>) -> Delta {
        Delta::Members(members.into_iter().map(Into::into).collect())
    }
}

impl From<i64> for Delta {
    fn from(i: i64) -> Delta {
        Delta::Int(i)
    }
}

impl From<f64> for Delta {
    fn from(f: f64) -> Delta {
        Delta::Float(f)
    }
}

impl From<Vec<String>> for Delta {
    fn from(members: Vec<String>) -> Delta {
        Delta::Members(members)
    }
}

/// The running snapshot-isolation transaction of one observer run.
///
/// Reads see the snapshot at [`start_ts`](Txn::start_ts) plus the transaction's own buffered
/// writes; writes are buffered and become visible only if the run returns `Ok` and the commit
/// succeeds. Implemented by [`HostTxn`](crate::HostTxn) (the WIT imports, inside a Wasm guest)
/// and by [`MemTxn`](crate::mem::MemTxn) (in memory, for native unit tests).
///
/// The required methods map one to one to the WIT `txn` interface; the provided ones are
/// conveniences built on them. Integers are stored as 8 bytes big-endian (they sort
/// numerically and match the store's own timestamp encoding).
pub trait Txn {
    /// Reads one cell at the transaction's snapshot (own writes included).
    fn get(&self, table: &str, row: &[u8], column: &str) -> Result<Option<Vec<u8>>>;

    /// Reads several cells at once, in the order given.
    fn get_many(&self, cells: &[Cell]) -> Result<Vec<Option<Vec<u8>>>>;

    /// Scans rows `[start, end)` of `table` (`end = None`: to the end of the table) and returns
    /// up to `limit` cells in (row, column) order. `columns = None` returns every user column.
    fn scan(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: u32,
    ) -> Result<Vec<ScanEntry>>;

    /// Buffers a write.
    fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()>;

    /// Buffers a delete.
    fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()>;

    /// Sends a weak notification to a weak-notify column at commit.
    fn notify_weak(&mut self, table: &str, row: &[u8], column: &str) -> Result<()>;

    /// Adds `delta` to a combined column (a `[[combine]]` of the host's configuration: `sum`,
    /// `min` or `max` over `i64` or `f64`, or `set` of strings) at commit.
    ///
    /// Combines never conflict with each other: any number of concurrent transactions add to
    /// one cell and all commit. Reads of the column return its folded total as text — `i64`
    /// in decimal (`42`), `f64` in its shortest round-trip form (`2.5`, `3.0`), `set` as a JSON
    /// array of distinct strings in byte order (`["a","b"]`) — the snapshot's total folded with
    /// this transaction's own deltas. `i64` sums saturate. A [`set`](Txn::set) or
    /// [`delete`](Txn::delete) of the column is a **reset**: it discards the deltas its
    /// snapshot sees (deltas committed meanwhile apply on top), and later combines of the
    /// transaction fold into the reset's value. Strong observers of the column run when its
    /// folded total changes, not per delta.
    ///
    /// Fails with [`Error::InvalidArgument`] (naming table, column and row) on a column that
    /// is not combined, or a delta of the wrong kind for its type (see [`Delta`]).
    fn combine(&mut self, table: &str, row: &[u8], column: &str, delta: Delta) -> Result<()>;

    /// The snapshot timestamp.
    fn start_ts(&self) -> u64;

    /// The binding's parameter `key` (its `[binding.params]` table in the host's
    /// configuration, values as text), if the binding sets it. One component bound twice can
    /// behave differently per binding (an output column, a threshold).
    fn param(&self, key: &str) -> Option<String>;

    /// Every parameter of the binding, sorted by key.
    fn params(&self) -> Vec<(String, String)>;

    /// [`get`](Txn::get) of a [`Cell`].
    fn get_cell(&self, cell: &Cell) -> Result<Option<Vec<u8>>> {
        self.get(&cell.table, &cell.row, &cell.column)
    }

    /// [`set`](Txn::set) of a [`Cell`].
    fn set_cell(&mut self, cell: &Cell, value: &[u8]) -> Result<()> {
        self.set(&cell.table, &cell.row, &cell.column, value)
    }

    /// Reads a cell as UTF-8 text; a value that is not UTF-8 is an [`Error::Failed`].
    fn get_str(&self, table: &str, row: &[u8], column: &str) -> Result<Option<String>> {
        match self.get(table, row, column)? {
            None => Ok(None),
            Some(v) => String::from_utf8(v).map(Some).map_err(|e| {
                Error::Failed(format!("{table}/{}/{column} is not UTF-8: {e}", String::from_utf8_lossy(row)))
            }),
        }
    }

    /// Buffers a write of UTF-8 text.
    fn set_str(&mut self, table: &str, row: &[u8], column: &str, value: &str) -> Result<()> {
        self.set(table, row, column, value.as_bytes())
    }

    /// Reads a cell as a `u64` (8 bytes big-endian); any other length is an [`Error::Failed`].
    fn get_u64(&self, table: &str, row: &[u8], column: &str) -> Result<Option<u64>> {
        match self.get(table, row, column)? {
            None => Ok(None),
            Some(v) => match <[u8; 8]>::try_from(v.as_slice()) {
                Ok(b) => Ok(Some(u64::from_be_bytes(b))),
                Err(_) => Err(Error::Failed(format!(
                    "{table}/{}/{column} holds {} bytes, not an 8-byte big-endian u64",
                    String::from_utf8_lossy(row),
                    v.len()
                ))),
            },
        }
    }

    /// Buffers a write of a `u64` (8 bytes big-endian).
    fn set_u64(&mut self, table: &str, row: &[u8], column: &str, value: u64) -> Result<()> {
        self.set(table, row, column, &value.to_be_bytes())
    }

    /// Adds `delta` to a `u64` cell (absent counts as 0, overflow wraps) and returns the new
    /// value. Two runs adding concurrently conflict, so exactly one of them commits per retry.
    fn add_u64(&mut self, table: &str, row: &[u8], column: &str, delta: u64) -> Result<u64> {
        let value = self.get_u64(table, row, column)?.unwrap_or(0).wrapping_add(delta);
        self.set_u64(table, row, column, value)?;
        Ok(value)
    }
}

impl<T: Txn + ?Sized> Txn for &mut T {
    fn get(&self, table: &str, row: &[u8], column: &str) -> Result<Option<Vec<u8>>> {
        (**self).get(table, row, column)
    }
    fn get_many(&self, cells: &[Cell]) -> Result<Vec<Option<Vec<u8>>>> {
        (**self).get_many(cells)
    }
    fn scan(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: u32,
    ) -> Result<Vec<ScanEntry>> {
        (**self).scan(table, start, end, columns, limit)
    }
    fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()> {
        (**self).set(table, row, column, value)
    }
    fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        (**self).delete(table, row, column)
    }
    fn notify_weak(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        (**self).notify_weak(table, row, column)
    }
    fn combine(&mut self, table: &str, row: &[u8], column: &str, delta: Delta) -> Result<()> {
        (**self).combine(table, row, column, delta)
    }
    fn start_ts(&self) -> u64 {
        (**self).start_ts()
    }

    fn param(&self, key: &str) -> Option<String> {
        (**self).param(key)
    }

    fn params(&self) -> Vec<(String, String)> {
        (**self).params()
    }
}

/// An observer: user code run on notifications inside a transaction.
///
/// Implement it on a unit struct and export it with [`export_observer!`](crate::export_observer).
/// Returning `Ok` lets the host commit the transaction; returning `Err` (or trapping) discards
/// every write of the run. Return [`Error::Conflict`] from a `Txn` call unchanged (`?` does):
/// the host retries the run with a fresh snapshot.
pub trait Observer {
    /// Reacts to one notification inside the running transaction.
    fn observe(txn: &mut impl Txn, notification: &Notification) -> Result<()>;
}
