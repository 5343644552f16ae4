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
//! Combined columns (the host's `[[combine]]`) are declared with [`MemStore::combine_column`]
//! and behave as in the store: [`Txn::combine`] never conflicts, reads return the folded
//! total as text, and `set`/`delete` of the column are resets (see [`Txn::combine`]).
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
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::txn::{Cell, Delta, Notification, Observer, ScanEntry, Txn};

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
    /// Combined columns: (table, column) → how they fold.
    combined: BTreeMap<(String, String), Combined>,
    /// The deltas committed to combined cells: commit timestamp → delta. Kept apart from
    /// `versions`, which holds only their bases (resets), so that combines never conflict.
    deltas: BTreeMap<Cell, BTreeMap<u64, Acc>>,
    /// The start timestamp of each reset of a combined cell, by its commit timestamp: the
    /// reset discarded the deltas committed below its start, those above apply on top.
    reset_starts: BTreeMap<Cell, BTreeMap<u64, u64>>,
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

    /// How `cell` folds, if its column is combined.
    fn combined(&self, cell: &Cell) -> Option<Combined> {
        self.combined.get(&(cell.table.clone(), cell.column.clone())).copied()
    }

    /// The value of `cell` committed before `ts`, a combined cell's folded.
    fn value(&self, cell: &Cell, ts: u64) -> Result<Option<Vec<u8>>> {
        match self.combined(cell) {
            Some(spec) => Ok(self.fold(spec, cell, ts)?.map(|acc| spec.encode(&acc))),
            None => Ok(self.read(cell, ts).cloned()),
        }
    }

    /// A combined cell's total before `ts`: the last reset's value folded, in commit order,
    /// with every delta committed after that reset's start.
    fn fold(&self, spec: Combined, cell: &Cell, ts: u64) -> Result<Option<Acc>> {
        let (mut acc, from) = match self.versions.get(cell).and_then(|v| v.range(..ts).next_back()) {
            Some((commit, value)) => {
                // A reset without a recorded start (a write before the column was declared
                // combined) discards every delta before it.
                let start = self.reset_starts.get(cell).and_then(|r| r.get(commit)).copied().unwrap_or(*commit);
                let acc = match value {
                    Some(v) => Some(spec.parse(v).ok_or_else(|| {
                        Error::Storage(format!(
                            "{} holds {:?}, which is not a value of the combined column's type {}",
                            cell_text(cell),
                            String::from_utf8_lossy(v),
                            spec.value_type
                        ))
                    })?),
                    None => None,
                };
                (acc, start)
            }
            None => (None, 0),
        };
        if let Some(deltas) = self.deltas.get(cell) {
            for delta in deltas.range(from + 1..ts).map(|(_, d)| d) {
                acc = Some(spec.fold(acc, delta.clone()));
            }
        }
        Ok(acc)
    }

    /// The commit timestamp of the newest change of `cell`: its newest version, or for a
    /// combined cell the newest of that and its deltas.
    fn newest_change(&self, cell: &Cell) -> Option<u64> {
        let delta = self.deltas.get(cell).and_then(|d| d.keys().next_back().copied());
        self.latest_ts(cell).max(delta)
    }
}

/// `table/row/column` for messages.
fn cell_text(cell: &Cell) -> String {
    format!("{}/{}/{}", cell.table, String::from_utf8_lossy(&cell.row), cell.column)
}

/// How a combined column folds its deltas (the host's `[[combine]] op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CombineOp {
    /// The sum (`i64` saturates at its bounds; `f64` follows IEEE).
    Sum,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
    /// The union of sets of strings.
    Set,
}

impl fmt::Display for CombineOp {
    /// `sum`, `min`, `max` or `set`, as the configuration writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CombineOp::Sum => "sum",
            CombineOp::Min => "min",
            CombineOp::Max => "max",
            CombineOp::Set => "set",
        })
    }
}

/// What a combined column holds (the host's `[[combine]] type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CombineType {
    /// A 64-bit signed integer, read as decimal text (`42`).
    I64,
    /// A finite 64-bit float, read in its shortest round-trip form (`2.5`, `3.0`, `1e300`).
    F64,
    /// A set of strings, read as a JSON array of distinct strings in byte order (`["a","b"]`).
    Set,
}

impl fmt::Display for CombineType {
    /// `i64`, `f64` or `set`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CombineType::I64 => "i64",
            CombineType::F64 => "f64",
            CombineType::Set => "set",
        })
    }
}

/// A combined column's op and type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Combined {
    op: CombineOp,
    value_type: CombineType,
}

/// A parsed value or delta of a combined column.
#[derive(Clone, Debug, PartialEq)]
enum Acc {
    Int(i64),
    Float(f64),
    Set(BTreeSet<String>),
}

impl Combined {
    /// Checks a delta against the column's type (the store's messages).
    fn delta(self, delta: Delta, cell: &Cell) -> Result<Acc> {
        let wrong = |what: &str| {
            Error::InvalidArgument(format!(
                "combine into {}/{} of row {:?}: {what}",
                cell.table,
                cell.column,
                String::from_utf8_lossy(&cell.row)
            ))
        };
        let (t, op) = (self.value_type, self.op);
        match (t, delta) {
            (CombineType::I64, Delta::Int(i)) => Ok(Acc::Int(i)),
            (CombineType::F64, Delta::Int(i)) => Ok(Acc::Float(i as f64)),
            (CombineType::F64, Delta::Float(f)) if f.is_finite() => Ok(Acc::Float(f)),
            (CombineType::F64, Delta::Float(f)) => Err(wrong(&format!("the delta {f} is not a finite number"))),
            (CombineType::Set, Delta::Members(m)) => Ok(Acc::Set(m.into_iter().collect())),
            (t, Delta::Int(_)) => Err(wrong(&format!("an integer delta, but the column holds {t} ({op})"))),
            (t, Delta::Float(_)) => Err(wrong(&format!("a float delta, but the column holds {t} ({op})"))),
            (t, Delta::Members(_)) => Err(wrong(&format!("set members, but the column holds {t} ({op})"))),
        }
    }

    /// Parses a stored value (or one given to a reset).
    fn parse(self, bytes: &[u8]) -> Option<Acc> {
        let text = std::str::from_utf8(bytes).ok()?;
        match self.value_type {
            CombineType::I64 => text.parse::<i64>().ok().map(Acc::Int),
            CombineType::F64 => text.parse::<f64>().ok().filter(|f| f.is_finite()).map(Acc::Float),
            CombineType::Set => parse_json_strings(text).map(|m| Acc::Set(m.into_iter().collect())),
        }
    }

    /// The stored (and read) form.
    fn encode(self, acc: &Acc) -> Vec<u8> {
        match acc {
            Acc::Int(i) => i.to_string().into_bytes(),
            Acc::Float(f) => format!("{f:?}").into_bytes(),
            Acc::Set(m) => {
                let items: Vec<String> = m.iter().map(|s| json_string(s)).collect();
                format!("[{}]", items.join(",")).into_bytes()
            }
        }
    }

    /// `acc` ⊕ `delta` (nothing yet: the delta).
    fn fold(self, acc: Option<Acc>, delta: Acc) -> Acc {
        let Some(acc) = acc else { return delta };
        match (self.op, acc, delta) {
            (CombineOp::Sum, Acc::Int(a), Acc::Int(b)) => Acc::Int(a.saturating_add(b)),
            (CombineOp::Sum, Acc::Float(a), Acc::Float(b)) => Acc::Float(a + b),
            (CombineOp::Min, Acc::Int(a), Acc::Int(b)) => Acc::Int(a.min(b)),
            (CombineOp::Min, Acc::Float(a), Acc::Float(b)) => Acc::Float(a.min(b)),
            (CombineOp::Max, Acc::Int(a), Acc::Int(b)) => Acc::Int(a.max(b)),
            (CombineOp::Max, Acc::Float(a), Acc::Float(b)) => Acc::Float(a.max(b)),
            (CombineOp::Set, Acc::Set(mut a), Acc::Set(b)) => {
                a.extend(b);
                Acc::Set(a)
            }
            // Both sides were parsed under this column's type, so the kinds always match.
            (_, acc, _) => acc,
        }
    }
}

/// A string as JSON (what serde_json writes: `"`, `\\` and control characters escaped).
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Four hex digits of a JSON `\\u` escape.
fn hex_unit(chars: &mut impl Iterator<Item = char>) -> Option<u32> {
    let hex: String = (0..4).map(|_| chars.next()).collect::<Option<String>>()?;
    u32::from_str_radix(&hex, 16).ok()
}

/// Parses a JSON array of strings (`["a","b"]`, whitespace allowed); `None` if it is not one.
fn parse_json_strings(text: &str) -> Option<Vec<String>> {
    let mut chars = text.trim().chars().peekable();
    let skip_ws = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        while chars.next_if(|c| c.is_ascii_whitespace()).is_some() {}
    };
    if chars.next()? != '[' {
        return None;
    }
    let mut out = Vec::new();
    skip_ws(&mut chars);
    if chars.next_if_eq(&']').is_some() {
        return chars.next().is_none().then_some(out);
    }
    loop {
        skip_ws(&mut chars);
        if chars.next()? != '"' {
            return None;
        }
        let mut s = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    '"' => s.push('"'),
                    '\\' => s.push('\\'),
                    '/' => s.push('/'),
                    'n' => s.push('\n'),
                    'r' => s.push('\r'),
                    't' => s.push('\t'),
                    'b' => s.push('\u{8}'),
                    'f' => s.push('\u{c}'),
                    'u' => {
                        let hi = hex_unit(&mut chars)?;
                        let code = if (0xd800..0xdc00).contains(&hi) {
                            if chars.next()? != '\\' || chars.next()? != 'u' {
                                return None;
                            }
                            let lo = hex_unit(&mut chars)?;
                            if !(0xdc00..0xe000).contains(&lo) {
                                return None;
                            }
                            0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                        } else {
                            hi
                        };
                        s.push(char::from_u32(code)?);
                    }
                    _ => return None,
                },
                c if (c as u32) < 0x20 => return None,
                c => s.push(c),
            }
        }
        out.push(s);
        skip_ws(&mut chars);
        match chars.next()? {
            ',' => continue,
            ']' => break,
            _ => return None,
        }
    }
    skip_ws(&mut chars);
    chars.next().is_none().then_some(out)
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
    /// [`declare_writes`](MemStore::declare_writes)) and returns its commit timestamp. Of a
    /// combined column it is a reset that discards every delta committed before it.
    ///
    /// # Panics
    /// If the column is combined and `value` is not a value of its type.
    pub fn put(&self, table: &str, row: impl AsRef<[u8]>, column: &str, value: impl AsRef<[u8]>) -> u64 {
        let mut s = self.lock();
        let cell = Cell::new(table, row.as_ref(), column);
        let value = value.as_ref();
        if let Some(spec) = s.combined(&cell) {
            assert!(
                spec.parse(value).is_some(),
                "{} is combined ({} {}): {:?} is not a value of its type",
                cell_text(&cell),
                spec.op,
                spec.value_type,
                String::from_utf8_lossy(value)
            );
        }
        let ts = s.tick();
        s.write(cell, ts, Some(value.to_vec()));
        ts
    }

    /// Commits a `u64` (8 bytes big-endian) directly, like [`put`](MemStore::put).
    pub fn put_u64(&self, table: &str, row: impl AsRef<[u8]>, column: &str, value: u64) -> u64 {
        self.put(table, row, column, value.to_be_bytes())
    }

    /// Commits a delete directly and returns its commit timestamp (of a combined column: a
    /// reset to nothing, discarding every delta committed before it).
    pub fn remove(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> u64 {
        let mut s = self.lock();
        let ts = s.tick();
        s.write(Cell::new(table, row.as_ref(), column), ts, None);
        ts
    }

    /// The newest committed value of a cell (of a combined column: its folded total, as text).
    ///
    /// # Panics
    /// If a combined cell holds a value that is not of its type (written before the column was
    /// declared combined).
    pub fn get(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Option<Vec<u8>> {
        let s = self.lock();
        s.value(&Cell::new(table, row.as_ref(), column), u64::MAX).unwrap_or_else(|e| panic!("{e}"))
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

    /// Every cell of `table` with its newest committed value (combined ones folded), in key
    /// order.
    ///
    /// # Panics
    /// As [`get`](MemStore::get).
    pub fn cells(&self, table: &str) -> Vec<(Cell, Vec<u8>)> {
        let s = self.lock();
        let cells: BTreeSet<&Cell> = s.versions.keys().chain(s.deltas.keys()).filter(|c| c.table == table).collect();
        cells
            .into_iter()
            .filter_map(|c| {
                let v = s.value(c, u64::MAX).unwrap_or_else(|e| panic!("{e}"));
                v.map(|v| (c.clone(), v))
            })
            .collect()
    }

    /// A strong notification of a cell, as the host would deliver it now: `commit_ts` is the
    /// newest committed write of the cell (of a combined cell: the newest reset or delta),
    /// `attempt` is 1.
    pub fn notification(&self, table: &str, row: impl AsRef<[u8]>, column: &str) -> Notification {
        let cell = Cell::new(table, row.as_ref(), column);
        let commit_ts = self.lock().newest_change(&cell);
        Notification::strong(cell, commit_ts)
    }

    /// Declares `table/column` combined, as the host's `[[combine]] table, column, op, type`
    /// does: from now on [`Txn::combine`] adds to it, reads fold, and `set`/`delete` reset it.
    /// Fails with [`Error::InvalidArgument`] if `op` does not apply to `value_type` (`sum`,
    /// `min` and `max` take `i64` or `f64`; `set` takes `set`), or the name is invalid.
    pub fn combine_column(&self, table: &str, column: &str, op: CombineOp, value_type: CombineType) -> Result<()> {
        check_name("table", table)?;
        check_column(column)?;
        let fits = match op {
            CombineOp::Set => value_type == CombineType::Set,
            _ => value_type != CombineType::Set,
        };
        if !fits {
            return Err(Error::InvalidArgument(format!(
                "combined column {table}/{column}: op {op} does not apply to type {value_type} (sum, min and max take \
                 i64 or f64; set takes set)"
            )));
        }
        self.lock().combined.insert((table.to_owned(), column.to_owned()), Combined { op, value_type });
        Ok(())
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
        MemTxn {
            store: self.clone(),
            start_ts,
            writes: BTreeMap::new(),
            deltas: BTreeMap::new(),
            weak: BTreeSet::new(),
        }
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
    /// Writes and deletes; of a combined cell, resets (a combine after one folds into it).
    writes: BTreeMap<Cell, Option<Vec<u8>>>,
    /// This transaction's delta per combined cell it did not reset (never a conflict).
    deltas: BTreeMap<Cell, Acc>,
    weak: BTreeSet<Cell>,
}

impl MemTxn {
    /// Commits the buffered writes, combines and weak notifications and returns the commit
    /// timestamp. Fails with [`Error::Conflict`] (writing nothing) if another transaction
    /// committed a write to one of the written cells after this one started (a combine is not
    /// a write of its cell: it conflicts with nothing; a reset of a combined cell conflicts
    /// with another reset).
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
            if s.combined(&cell).is_some() {
                s.reset_starts.entry(cell.clone()).or_default().insert(commit_ts, self.start_ts);
            }
            s.write(cell, commit_ts, value);
        }
        for (cell, delta) in self.deltas {
            s.deltas.entry(cell).or_default().insert(commit_ts, delta);
        }
        s.weak_sent.extend(self.weak);
        Ok(commit_ts)
    }

    /// The buffered writes (`None`: a delete; of a combined cell, a reset).
    pub fn buffered(&self) -> &BTreeMap<Cell, Option<Vec<u8>>> {
        &self.writes
    }

    /// The buffered combines: this transaction's delta per combined cell (all its combines of
    /// the cell folded), in the column's text form (`3`, `2.5`, `["a"]`). Combines after a
    /// reset of the cell are in the reset's value instead ([`buffered`](MemTxn::buffered)).
    pub fn buffered_combines(&self) -> BTreeMap<Cell, Vec<u8>> {
        let s = self.store.lock();
        self.deltas
            .iter()
            .filter_map(|(cell, acc)| s.combined(cell).map(|spec| (cell.clone(), spec.encode(acc))))
            .collect()
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
        let s = self.store.lock();
        match s.combined(&cell) {
            Some(spec) => {
                let mut acc = s.fold(spec, &cell, self.start_ts)?;
                if let Some(mine) = self.deltas.get(&cell) {
                    acc = Some(spec.fold(acc, mine.clone()));
                }
                Ok(acc.map(|a| spec.encode(&a)))
            }
            None => Ok(s.read(&cell, self.start_ts).cloned()),
        }
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
        // Every cell that may have a value: committed versions and deltas, own writes and
        // combines; each then read like `get` (snapshot, own writes, combined ones folded).
        let (candidates, limit) = {
            let s = self.store.lock();
            let from = Cell::new(table, start, "");
            let committed = s.versions.range(from.clone()..).map(|(c, _)| c);
            let deltas = s.deltas.range(from..).map(|(c, _)| c);
            // Cells are ordered by (table, row, column): the range's are contiguous.
            let before_end = |c: &&Cell| c.table == table && end.is_none_or(|e| c.row.as_slice() < e);
            let candidates: BTreeSet<Cell> = committed
                .take_while(before_end)
                .chain(deltas.take_while(before_end))
                .chain(self.writes.keys())
                .chain(self.deltas.keys())
                .filter(|c| in_range(c) && col_ok(&c.column))
                .cloned()
                .collect();
            (candidates, s.scan_cap.map_or(limit, |cap| limit.min(cap)))
        };
        let mut out = Vec::new();
        for cell in candidates {
            if out.len() >= limit as usize {
                break;
            }
            if let Some(value) = self.get(&cell.table, &cell.row, &cell.column)? {
                out.push(ScanEntry { row: cell.row, column: cell.column, value });
            }
        }
        Ok(out)
    }

    fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()> {
        check(table, row, column)?;
        self.check_writable(table, column)?;
        let cell = Cell::new(table, row, column);
        let spec = self.store.lock().combined(&cell);
        if let Some(spec) = spec {
            // A reset: the value must be one of the column's type; own deltas go (the
            // snapshot's are discarded at commit, by the reset's start).
            if spec.parse(value).is_none() {
                return Err(Error::InvalidArgument(format!(
                    "set of the combined column {table}/{column} of row {:?}: {:?} is not a {} value (i64: decimal \
                     digits; f64: a finite number; set: a JSON array of strings)",
                    String::from_utf8_lossy(row),
                    String::from_utf8_lossy(value),
                    spec.value_type
                )));
            }
            self.deltas.remove(&cell);
        }
        self.writes.insert(cell, Some(value.to_vec()));
        Ok(())
    }

    fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        check(table, row, column)?;
        self.check_writable(table, column)?;
        let cell = Cell::new(table, row, column);
        self.deltas.remove(&cell);
        self.writes.insert(cell, None);
        Ok(())
    }

    fn combine(&mut self, table: &str, row: &[u8], column: &str, delta: Delta) -> Result<()> {
        check(table, row, column)?;
        self.check_writable(table, column)?;
        let cell = Cell::new(table, row, column);
        let Some(spec) = self.store.lock().combined(&cell) else {
            return Err(Error::InvalidArgument(format!(
                "combine into {table}/{column} of row {:?}: the column is not declared combined (a [[combine]] in the \
                 configuration)",
                String::from_utf8_lossy(row)
            )));
        };
        let delta = spec.delta(delta, &cell)?;
        // After a reset in this transaction, the delta folds into the reset's value.
        if let Some(reset) = self.writes.get(&cell) {
            let acc = reset.as_deref().and_then(|v| spec.parse(v));
            let total = spec.fold(acc, delta);
            self.writes.insert(cell, Some(spec.encode(&total)));
            return Ok(());
        }
        let total = spec.fold(self.deltas.remove(&cell), delta);
        self.deltas.insert(cell, total);
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

    /// A store with `t/c:n` (sum i64), `t/c:f` (sum f64), `t/c:lo` (min i64), `t/c:tags` (set).
    fn combined() -> MemStore {
        let store = MemStore::new();
        store.combine_column("t", "c:n", CombineOp::Sum, CombineType::I64).unwrap();
        store.combine_column("t", "c:f", CombineOp::Sum, CombineType::F64).unwrap();
        store.combine_column("t", "c:lo", CombineOp::Min, CombineType::I64).unwrap();
        store.combine_column("t", "c:tags", CombineOp::Set, CombineType::Set).unwrap();
        store
    }

    #[test]
    fn concurrent_combines_into_one_cell_all_commit() {
        let store = combined();
        let mut txns: Vec<MemTxn> = (0..5).map(|_| store.begin()).collect();
        for (i, t) in txns.iter_mut().enumerate() {
            t.combine("t", b"r", "c:n", Delta::Int(i as i64 + 1)).unwrap();
            t.combine("t", b"r", "c:tags", Delta::members([format!("m{}", i % 2)])).unwrap();
        }
        for t in txns {
            t.commit().unwrap();
        }
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("15"));
        assert_eq!(store.get_str("t", "r", "c:tags").as_deref(), Some(r#"["m0","m1"]"#));
        // A combine also commits beside a concurrent reset (the reset conflicts only with resets).
        let mut reset = store.begin();
        let mut add = store.begin();
        reset.set_str("t", b"r", "c:n", "100").unwrap();
        add.combine("t", b"r", "c:n", Delta::Int(1)).unwrap();
        let mut other_reset = store.begin();
        other_reset.delete("t", b"r", "c:n").unwrap();
        add.commit().unwrap();
        reset.commit().unwrap();
        assert!(other_reset.commit().unwrap_err().is_conflict());
        // The delta committed after the reset's start applies on top of it.
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("101"));
    }

    #[test]
    fn reads_fold_the_snapshot_with_own_deltas() {
        let store = combined();
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(10))).unwrap();
        let mut txn = store.begin();
        // Committed after the snapshot: not seen.
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(1000))).unwrap();
        assert_eq!(txn.get_str("t", b"r", "c:n").unwrap().as_deref(), Some("10"));
        txn.combine("t", b"r", "c:n", Delta::Int(5)).unwrap();
        txn.combine("t", b"r", "c:n", Delta::Int(-2)).unwrap();
        assert_eq!(txn.get_str("t", b"r", "c:n").unwrap().as_deref(), Some("13"));
        assert_eq!(txn.buffered_combines()[&Cell::new("t", *b"r", "c:n")], b"3");
        assert!(txn.buffered().is_empty(), "a combine is not a write");
        let cells = [Cell::new("t", *b"r", "c:n"), Cell::new("t", *b"q", "c:n")];
        assert_eq!(txn.get_many(&cells).unwrap(), vec![Some(b"13".to_vec()), None]);
        let scanned = txn.scan("t", b"", None, None, 10).unwrap();
        assert_eq!(scanned, vec![ScanEntry { row: b"r".to_vec(), column: "c:n".into(), value: b"13".to_vec() }]);
        txn.commit().unwrap();
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("1013"));
        assert_eq!(store.cells("t"), vec![(Cell::new("t", *b"r", "c:n"), b"1013".to_vec())]);
        let n = store.notification("t", "r", "c:n");
        assert_eq!(n.commit_ts, Some(store.lock().clock), "the newest delta's commit");
    }

    #[test]
    fn values_are_text_of_the_type() {
        let store = combined();
        store
            .run(|t| {
                t.combine("t", b"r", "c:f", Delta::Float(2.5))?;
                t.combine("t", b"r", "c:f", Delta::Int(1))?;
                t.combine("t", b"s", "c:f", Delta::Float(1e300))?;
                t.combine("t", b"r", "c:lo", Delta::Int(7))?;
                t.combine("t", b"r", "c:lo", Delta::Int(-3))?;
                t.combine("t", b"r", "c:tags", Delta::members(["b", "a\"q", "b"]))?;
                t.combine("t", b"s", "c:tags", Delta::Members(vec![]))
            })
            .unwrap();
        store.run(|t| t.combine("t", b"r", "c:lo", Delta::Int(4))).unwrap();
        store.run(|t| t.combine("t", b"t", "c:f", Delta::Int(3))).unwrap();
        assert_eq!(store.get_str("t", "r", "c:f").as_deref(), Some("3.5"));
        assert_eq!(store.get_str("t", "s", "c:f").as_deref(), Some("1e300"));
        assert_eq!(store.get_str("t", "t", "c:f").as_deref(), Some("3.0"));
        assert_eq!(store.get_str("t", "r", "c:lo").as_deref(), Some("-3"));
        assert_eq!(store.get_str("t", "r", "c:tags").as_deref(), Some(r#"["a\"q","b"]"#));
        assert_eq!(store.get_str("t", "s", "c:tags").as_deref(), Some("[]"));
        // i64 sums saturate at each step.
        store.run(|t| t.combine("t", b"big", "c:n", Delta::Int(i64::MAX))).unwrap();
        store.run(|t| t.combine("t", b"big", "c:n", Delta::Int(1))).unwrap();
        store.run(|t| t.combine("t", b"big", "c:n", Delta::Int(-1))).unwrap();
        assert_eq!(store.get_str("t", "big", "c:n"), Some((i64::MAX - 1).to_string()));
        // The set's text parses back (a reset to it), escapes included.
        let text = store.get("t", "r", "c:tags").unwrap();
        store.run(|t| t.set("t", b"r2", "c:tags", &text)).unwrap();
        store.run(|t| t.combine("t", b"r2", "c:tags", Delta::members(["\n"]))).unwrap();
        assert_eq!(store.get_str("t", "r2", "c:tags").as_deref(), Some(r#"["\n","a\"q","b"]"#));
        assert_eq!(parse_json_strings(r#" [ "x" , "\u00e9\ud83d\ude00" ] "#), Some(vec!["x".into(), "é😀".into()]));
        assert_eq!(parse_json_strings(r#"["x",]"#), None);
        assert_eq!(parse_json_strings(r#"["x"] x"#), None);
    }

    #[test]
    fn set_and_delete_reset_a_combined_column() {
        let store = combined();
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(10))).unwrap();
        let mut txn = store.begin();
        txn.combine("t", b"r", "c:n", Delta::Int(1)).unwrap();
        txn.set_str("t", b"r", "c:n", "5").unwrap();
        assert_eq!(txn.get_str("t", b"r", "c:n").unwrap().as_deref(), Some("5"), "the own delta went too");
        txn.combine("t", b"r", "c:n", Delta::Int(2)).unwrap();
        assert_eq!(txn.get_str("t", b"r", "c:n").unwrap().as_deref(), Some("7"), "folded into the reset");
        assert!(txn.buffered_combines().is_empty());
        // Committed while the reset runs: applies on top of it.
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(100))).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("107"));

        // A delete: the next combine starts from nothing.
        let mut txn = store.begin();
        txn.delete("t", b"r", "c:n").unwrap();
        assert_eq!(txn.get("t", b"r", "c:n").unwrap(), None);
        txn.commit().unwrap();
        assert_eq!(store.get("t", "r", "c:n"), None);
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(-4))).unwrap();
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("-4"));
        // A delete then a combine in one transaction: the combine is the value.
        store
            .run(|t| {
                t.delete("t", b"r", "c:n")?;
                t.combine("t", b"r", "c:n", Delta::Int(9))
            })
            .unwrap();
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("9"));
        // A direct put is a reset too.
        store.put("t", "r", "c:n", "1");
        store.run(|t| t.combine("t", b"r", "c:n", Delta::Int(1))).unwrap();
        assert_eq!(store.get_str("t", "r", "c:n").as_deref(), Some("2"));
    }

    #[test]
    fn combine_errors_name_the_cell() {
        let store = combined();
        let mut txn = store.begin();
        let invalid = |r: Result<()>| match r {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("not invalid-argument: {other:?}"),
        };
        let m = invalid(txn.combine("t", b"r", "c:plain", Delta::Int(1)));
        assert!(m.contains("t/c:plain") && m.contains("\"r\"") && m.contains("not declared combined"), "{m}");
        let m = invalid(txn.combine("t", b"r", "c:n", Delta::Float(1.5)));
        assert!(m.contains("combine into t/c:n of row \"r\": a float delta"), "{m}");
        let m = invalid(txn.combine("t", b"r", "c:n", Delta::members(["a"])));
        assert!(m.contains("set members, but the column holds i64 (sum)"), "{m}");
        let m = invalid(txn.combine("t", b"r", "c:tags", Delta::Int(1)));
        assert!(m.contains("an integer delta, but the column holds set (set)"), "{m}");
        let m = invalid(txn.combine("t", b"r", "c:f", Delta::Float(f64::NAN)));
        assert!(m.contains("not a finite number"), "{m}");
        assert!(txn.combine("t", b"r", "c:f", Delta::Float(f64::INFINITY)).is_err());
        let m = invalid(txn.set("t", b"r", "c:n", b"1.5"));
        assert!(m.contains("set of the combined column t/c:n"), "{m}");
        assert!(txn.set("t", b"r", "c:tags", b"[1]").is_err());
        assert!(txn.set("t", b"r", "c:f", b"inf").is_err());
        assert!(matches!(txn.combine("t", b"r", "__delta", Delta::Int(1)), Err(Error::InvalidArgument(_))));
        assert!(store.combine_column("t", "c:x", CombineOp::Sum, CombineType::Set).is_err());
        assert!(store.combine_column("t", "c:x", CombineOp::Set, CombineType::I64).is_err());
        // Declared writes apply to combines.
        store.declare_writes("t", &["c:f"]);
        assert!(matches!(txn.combine("t", b"r", "c:n", Delta::Int(1)), Err(Error::Denied(_))));
        txn.combine("t", b"r", "c:f", Delta::Int(1)).unwrap();
        txn.commit().unwrap();
        assert_eq!(store.get_str("t", "r", "c:f").as_deref(), Some("1.0"));
    }
}
