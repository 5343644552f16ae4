//! Combine columns: cells that any number of transactions add to at once without conflicting
//! (a count, a sum, a minimum or maximum, a set of strings). The argument is in
//! `docs/design.md`, "Combine columns".
//!
//! [`Transaction::combine`] writes a **delta**: a reserved column of the row, unique to the
//! transaction (`__delta:<n>:<column>:<start_ts>`), and weakly notifies `__fold:<column>`. A
//! read of the column folds the visible deltas into the **base** (the column's own cell) in
//! commit order. The **folder** — a built-in weak observer of `__fold:<column>` that the
//! registry binds on every host — folds them into the base in one ordinary transaction and
//! deletes them; only a changed total is an ordinary (notifying) write. `set` and `delete` of
//! a combined column are resets: they discard the deltas their snapshot sees.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use std::time::Duration;

use crate::bigtable::{CellRef, Mutation, Op, RowMutation, ScanRange, WriteKind};
use crate::error::{Error, Result};
use crate::key;
use crate::lock::LockWaiter;
use crate::notify::{Notification, ObserveError, Observer};
use crate::store::Store;
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;

/// How a combined column folds its deltas.
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

impl CombineOp {
    /// Parses `sum`, `min`, `max` or `set`.
    pub fn parse(s: &str) -> Option<CombineOp> {
        Some(match s {
            "sum" => CombineOp::Sum,
            "min" => CombineOp::Min,
            "max" => CombineOp::Max,
            "set" => CombineOp::Set,
            _ => return None,
        })
    }

    fn byte(self) -> u8 {
        match self {
            CombineOp::Sum => 1,
            CombineOp::Min => 2,
            CombineOp::Max => 3,
            CombineOp::Set => 4,
        }
    }
}

impl fmt::Display for CombineOp {
    /// `sum`, `min`, `max` or `set`, as a configuration writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CombineOp::Sum => "sum",
            CombineOp::Min => "min",
            CombineOp::Max => "max",
            CombineOp::Set => "set",
        })
    }
}

/// What a combined column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CombineType {
    /// A 64-bit signed integer, stored in decimal (`42`).
    I64,
    /// A finite 64-bit float, stored in its shortest round-trip form (`2.5`, `1e300`).
    F64,
    /// A set of strings, stored as a JSON array of distinct strings in byte order (`["a","b"]`).
    Set,
}

impl CombineType {
    /// Parses `i64`, `f64` or `set`.
    pub fn parse(s: &str) -> Option<CombineType> {
        Some(match s {
            "i64" => CombineType::I64,
            "f64" => CombineType::F64,
            "set" => CombineType::Set,
            _ => return None,
        })
    }

    fn byte(self) -> u8 {
        match self {
            CombineType::I64 => 1,
            CombineType::F64 => 2,
            CombineType::Set => 3,
        }
    }
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

/// A combined column: declared with [`Store::set_combined`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CombineSpec {
    /// Its table.
    pub table: String,
    /// The column.
    pub column: String,
    /// How deltas fold.
    pub op: CombineOp,
    /// What it holds: `i64` or `f64` for sum, min and max; `set` for set.
    pub value_type: CombineType,
}

impl CombineSpec {
    /// A checked spec: valid names, and a type that fits the op (sum, min and max over `i64` or
    /// `f64`; set over `set`).
    pub fn new(table: &str, column: &str, op: CombineOp, value_type: CombineType) -> Result<CombineSpec> {
        key::validate_table(table)?;
        key::validate_column(column)?;
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
        Ok(CombineSpec { table: table.to_owned(), column: column.to_owned(), op, value_type })
    }
}

impl fmt::Display for CombineSpec {
    /// `table/column (op type)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({} {})", self.table, self.column, self.op, self.value_type)
    }
}

/// What [`Transaction::combine`] adds.
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// An integer: for `i64` columns, and `f64` ones (converted).
    Int(i64),
    /// A float: for `f64` columns; must be finite.
    Float(f64),
    /// Strings to add to a `set` column.
    Members(Vec<String>),
}

/// A parsed value or delta of a combined column.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Acc {
    Int(i64),
    Float(f64),
    Set(BTreeSet<String>),
}

impl CombineSpec {
    /// Checks a delta against the column's type.
    pub(crate) fn delta(&self, delta: Delta, row: &[u8]) -> Result<Acc> {
        let wrong = |what: &str| {
            Error::InvalidArgument(format!(
                "combine into {}/{} of row {}: {what}",
                self.table,
                self.column,
                row_text(row)
            ))
        };
        match (self.value_type, delta) {
            (CombineType::I64, Delta::Int(i)) => Ok(Acc::Int(i)),
            (CombineType::F64, Delta::Int(i)) => Ok(Acc::Float(i as f64)),
            (CombineType::F64, Delta::Float(f)) if f.is_finite() => Ok(Acc::Float(f)),
            (CombineType::F64, Delta::Float(f)) => Err(wrong(&format!("the delta {f} is not a finite number"))),
            (CombineType::Set, Delta::Members(m)) => Ok(Acc::Set(m.into_iter().collect())),
            (t, Delta::Int(_)) => Err(wrong(&format!("an integer delta, but the column holds {t} ({})", self.op))),
            (t, Delta::Float(_)) => Err(wrong(&format!("a float delta, but the column holds {t} ({})", self.op))),
            (t, Delta::Members(_)) => Err(wrong(&format!("set members, but the column holds {t} ({})", self.op))),
        }
    }

    /// Parses a stored base or delta; `what` names it in the error.
    pub(crate) fn parse(&self, bytes: &[u8], what: impl FnOnce() -> String) -> Result<Acc> {
        let text = std::str::from_utf8(bytes).ok();
        let parsed = match self.value_type {
            CombineType::I64 => text.and_then(|t| t.parse::<i64>().ok()).map(Acc::Int),
            CombineType::F64 => text.and_then(|t| t.parse::<f64>().ok()).filter(|f| f.is_finite()).map(Acc::Float),
            CombineType::Set => {
                serde_json::from_slice::<Vec<String>>(bytes).ok().map(|m| Acc::Set(m.into_iter().collect()))
            }
        };
        parsed.ok_or_else(|| {
            Error::Corrupt(format!(
                "{} holds {:?}, which is not a value of the combined column's type {}",
                what(),
                String::from_utf8_lossy(&bytes[..bytes.len().min(64)]),
                self.value_type
            ))
        })
    }

    /// Parses a value given to `set` (a reset), refusing one that does not fit.
    pub(crate) fn parse_reset(&self, bytes: &[u8], row: &[u8]) -> Result<Acc> {
        self.parse(bytes, String::new).map_err(|_| {
            Error::InvalidArgument(format!(
                "set of the combined column {}/{} of row {}: {:?} is not a {} value (i64: decimal digits; f64: a \
                 finite number; set: a JSON array of strings)",
                self.table,
                self.column,
                row_text(row),
                String::from_utf8_lossy(&bytes[..bytes.len().min(64)]),
                self.value_type
            ))
        })
    }

    /// The stored form.
    pub(crate) fn encode(&self, acc: &Acc) -> Vec<u8> {
        match acc {
            Acc::Int(i) => i.to_string().into_bytes(),
            Acc::Float(f) => format!("{f:?}").into_bytes(),
            Acc::Set(m) => serde_json::to_vec(m).unwrap_or_else(|_| b"[]".to_vec()),
        }
    }

    /// `acc` ⊕ `delta` (nothing yet: the delta).
    pub(crate) fn fold(&self, acc: Option<Acc>, delta: Acc) -> Acc {
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
            // Both sides were parsed under this spec's type, so the kinds always match.
            (_, acc, _) => acc,
        }
    }

    /// Where this column's deltas live: the prefix of every delta column (the length makes
    /// it a prefix of no other column's).
    pub(crate) fn delta_prefix(&self) -> String {
        delta_prefix(&self.column)
    }
}

fn delta_prefix(column: &str) -> String {
    format!("{}delta:{}:{column}:", key::RESERVED_COLUMN_PREFIX, column.len())
}

/// The delta column of the transaction starting at `start_ts`.
pub(crate) fn delta_column(column: &str, start_ts: Timestamp) -> String {
    format!("{}{:016x}", delta_prefix(column), start_ts.raw())
}

/// The reserved column whose weak notification makes the folder fold `column`.
pub(crate) fn fold_column(column: &str) -> String {
    format!("{}fold:{column}", key::RESERVED_COLUMN_PREFIX)
}

/// A row key for an error message: its text, quoted (bytes that are not UTF-8 replaced).
fn row_text(row: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(row))
}

/// The name the folder's bindings have (not a valid observer name, so no user binding has it).
pub const FOLDER: &str = "(fold)";

/// Failed folds of one row before its notification becomes a dead letter: a fold fails only on
/// a base or delta that does not parse (a damaged store).
const FOLD_ATTEMPTS: u32 = 5;

/// Delta columns read per page.
const DELTA_PAGE: usize = 256;

/// The folder: a weak observer of `__fold:<column>`, one per combined column.
pub(crate) struct Folder {
    pub(crate) spec: CombineSpec,
}

impl Folder {
    /// The binding the registry gives the folder of `spec`.
    pub(crate) fn binding(spec: &CombineSpec) -> crate::notify::ObserverSpec {
        crate::notify::ObserverSpec {
            name: FOLDER.to_owned(),
            table: spec.table.clone(),
            column: fold_column(&spec.column),
            kind: crate::notify::NotifyKind::Weak,
            max_attempts: FOLD_ATTEMPTS,
        }
    }
}

impl Observer for Folder {
    fn observe(&self, txn: &mut Transaction, n: &Notification) -> Result<(), ObserveError> {
        let row = n.cell.row.clone();
        collect_folded(txn, &self.spec, &row)?;
        let (base, deltas) = txn.read_parts_committed(&self.spec, &row)?;
        if deltas.is_empty() {
            return Ok(());
        }
        let before = base.as_ref().map(|(acc, _)| acc.clone());
        let mut total = before.clone();
        for d in &deltas {
            total = Some(self.spec.fold(total, d.acc.clone()));
        }
        let cell = CellRef::new(self.spec.table.clone(), row.clone(), self.spec.column.clone());
        for d in &deltas {
            txn.set_reserved(CellRef::new(self.spec.table.clone(), row.clone(), d.column.clone()), None);
        }
        let value = total.as_ref().map(|t| self.spec.encode(t));
        if total != before {
            txn.set_reserved(cell, value);
        } else {
            // Written back so that the fold conflicts with an overlapping reset; quietly, so
            // nobody is notified of a value that did not change.
            txn.quiet.insert(cell.clone());
            txn.set_reserved(cell, value);
        }
        Ok(())
    }
}

/// How old the safepoint below which the folder removes folded deltas may be.
const COLLECT_SAFEPOINT_AGE: Duration = Duration::from_secs(1);

/// Removes every version of the deltas of `row` that earlier folds deleted below a recent
/// settled safepoint: no reader at or above it sees them (they are deleted there), and no
/// reader below it is allowed (the safepoint is persisted first, as GC's). What GC would
/// remove, done by the folder so that reads of a hot cell do not step over thousands of
/// deleted deltas between two GC passes.
fn collect_folded(txn: &Transaction, spec: &CombineSpec, row: &[u8]) -> Result<()> {
    let store = Store::of(txn.inner.clone());
    let safepoint = store.recent_safepoint(COLLECT_SAFEPOINT_AGE)?;
    if safepoint == Timestamp::ZERO {
        return Ok(());
    }
    let backend = &txn.inner.backend;
    let Some(versions) = backend.scan_versions(Some((&spec.table, row)), 1)?.pop() else { return Ok(()) };
    if versions.table != spec.table || versions.row != row {
        return Ok(());
    }
    let prefix = spec.delta_prefix();
    let mut mutations = Vec::new();
    for cell in versions.cells.iter().filter(|c| c.column.starts_with(&prefix)) {
        // Its newest record is a delete (or a roll back) below the safepoint: invisible to all.
        let gone = cell.locks.is_empty()
            && cell.writes.first().is_some_and(|(ts, w)| *ts <= safepoint && !matches!(w.kind, WriteKind::Put(_)));
        if !gone {
            continue;
        }
        for (ts, _) in &cell.writes {
            mutations.push(Mutation::DeleteWrite { column: cell.column.clone(), commit_ts: *ts });
        }
        for ts in &cell.data {
            mutations.push(Mutation::DeleteData { column: cell.column.clone(), start_ts: *ts });
        }
    }
    if mutations.is_empty() {
        return Ok(());
    }
    let removed = mutations.len() as u64;
    let op = RowMutation { table: spec.table.clone(), row: row.to_vec(), conditions: vec![], mutations };
    backend.apply(vec![Op::Row(op)])?;
    txn.inner.counters.gc_versions_removed.fetch_add(removed, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Fails if `txn` writes a delta of a column `registry` does not combine (its declaration was
/// removed while the transaction ran): such a delta would never be read or folded.
pub(crate) fn check_deltas(txn: &Transaction, registry: &crate::registry::Registry) -> Result<()> {
    let marker = format!("{}delta:", key::RESERVED_COLUMN_PREFIX);
    for (c, v) in &txn.writes {
        let Some(rest) = c.column.strip_prefix(&marker) else { continue };
        if v.is_none() {
            continue; // a fold's or a reset's delete
        }
        // `<n>:<column>:<start_ts>`
        let column = rest.split_once(':').and_then(|(n, tail)| tail.get(..n.parse::<usize>().ok()?));
        if column.is_none_or(|column| registry.combined(&c.table, column).is_none()) {
            return Err(Error::InvalidArgument(format!(
                "combine into {}/{} of row {}: the column is no longer declared combined (the configuration changed \
                 while the transaction ran)",
                c.table,
                column.unwrap_or("?"),
                row_text(&c.row)
            )));
        }
    }
    Ok(())
}

/// The deltas a fold's transaction deletes (counted once it committed).
pub(crate) fn deltas_deleted(txn: &Transaction) -> u64 {
    let prefix = format!("{}delta:", key::RESERVED_COLUMN_PREFIX);
    txn.writes.iter().filter(|(c, v)| v.is_none() && c.column.starts_with(&prefix)).count() as u64
}

/// One visible delta of a cell.
pub(crate) struct SeenDelta {
    pub(crate) column: String,
    pub(crate) commit_ts: Timestamp,
    pub(crate) acc: Acc,
}

/// A base (parsed, with its commit timestamp) and the visible deltas in commit order.
type Parts = (Option<(Acc, Timestamp)>, Vec<SeenDelta>);

impl Transaction {
    /// Adds `delta` to a combined column (declared with [`Store::set_combined`]) at commit.
    /// Never conflicts with other combines: the delta is a cell of this transaction's own.
    /// Readers see the column's base folded with every delta committed in their snapshot;
    /// the folder folds them into the base in the background. Combining twice into one cell
    /// in a transaction adds both.
    ///
    /// Fails (`InvalidArgument`, naming the table, column and row) on a column that is not
    /// combined, or a delta of the wrong type (an integer is taken for an `f64` column).
    pub fn combine(&mut self, table: &str, row: impl AsRef<[u8]>, column: &str, delta: Delta) -> Result<()> {
        let row = row.as_ref();
        key::validate_table(table)?;
        key::validate_row(row)?;
        key::validate_column(column)?;
        self.check_not_at_snapshot()?;
        let Some(spec) = self.combined_spec(table, column)? else {
            return Err(Error::InvalidArgument(format!(
                "combine into {table}/{column} of row {}: the column is not declared combined (a [[combine]] in the \
                 configuration)",
                row_text(row)
            )));
        };
        let delta = spec.delta(delta, row)?;
        let base = CellRef::new(table, row, column);
        // After a reset in this transaction, the delta folds into the reset's value.
        if let Some(reset) = self.writes.get(&base) {
            let acc = match reset {
                Some(v) => Some(spec.parse(v, || format!("the value set to {base}"))?),
                None => None,
            };
            let total = spec.fold(acc, delta);
            self.writes.insert(base, Some(spec.encode(&total)));
            return Ok(());
        }
        let cell = CellRef::new(table, row, delta_column(column, self.start_ts));
        let mine = match self.writes.get(&cell) {
            Some(Some(v)) => Some(spec.parse(v, || format!("the delta buffered for {base}"))?),
            _ => None,
        };
        let total = spec.fold(mine, delta);
        self.writes.insert(cell, Some(spec.encode(&total)));
        self.weak.insert(CellRef::new(table, row, fold_column(column)));
        Ok(())
    }

    /// The spec of `table/column` if it is combined.
    pub(crate) fn combined_spec(&self, table: &str, column: &str) -> Result<Option<Arc<CombineSpec>>> {
        let registry = self.inner.registry.read().map_err(|_| Error::Closed)?;
        Ok(registry.combined(table, column))
    }

    /// The combined columns of `table` (none: reads and scans of it fold nothing).
    pub(crate) fn combined_in(&self, table: &str) -> Result<Vec<Arc<CombineSpec>>> {
        let registry = self.inner.registry.read().map_err(|_| Error::Closed)?;
        Ok(registry.combined_of_table(table))
    }

    /// A reset (`set` or `delete` of a combined column): buffers a delete of every delta the
    /// snapshot sees, and drops this transaction's own; the caller buffers the base.
    pub(crate) fn reset_deltas(&mut self, spec: &CombineSpec, row: &[u8]) -> Result<()> {
        let (_, deltas) = self.read_parts_committed(spec, row)?;
        for d in deltas {
            self.writes.insert(CellRef::new(spec.table.clone(), row, d.column), None);
        }
        self.writes.remove(&CellRef::new(spec.table.clone(), row, delta_column(&spec.column, self.start_ts)));
        Ok(())
    }

    /// A combined cell's value: own buffered writes first, else the snapshot's base folded with
    /// its deltas (and this transaction's own delta). The timestamp is the newest commit
    /// folded in (`None` when this transaction's own writes decide).
    pub(crate) fn read_combined(&self, spec: &CombineSpec, row: &[u8]) -> Result<Option<(Vec<u8>, Option<Timestamp>)>> {
        let base = CellRef::new(spec.table.clone(), row, spec.column.clone());
        if let Some(reset) = self.writes.get(&base) {
            return Ok(reset.clone().map(|v| (v, None)));
        }
        let (acc, ts) = self.fold_committed(spec, row)?;
        let own = CellRef::new(spec.table.clone(), row, delta_column(&spec.column, self.start_ts));
        match self.writes.get(&own) {
            Some(Some(v)) => {
                let mine = spec.parse(v, || format!("the delta buffered for {base}"))?;
                Ok(Some((spec.encode(&spec.fold(acc, mine)), None)))
            }
            _ => Ok(acc.map(|a| (spec.encode(&a), ts))),
        }
    }

    /// The snapshot's base folded with its deltas, and the newest commit among them.
    pub(crate) fn fold_committed(&self, spec: &CombineSpec, row: &[u8]) -> Result<(Option<Acc>, Option<Timestamp>)> {
        let (base, deltas) = self.read_parts_committed(spec, row)?;
        let mut newest = base.as_ref().map(|(_, ts)| *ts);
        let mut acc = base.map(|(a, _)| a);
        for d in deltas {
            newest = newest.max(Some(d.commit_ts));
            acc = Some(spec.fold(acc, d.acc));
        }
        Ok((acc, newest))
    }

    /// The snapshot's base and its visible deltas in commit order (ignoring own writes).
    pub(crate) fn read_parts_committed(&self, spec: &CombineSpec, row: &[u8]) -> Result<Parts> {
        let base_cell = CellRef::new(spec.table.clone(), row, spec.column.clone());
        let mut reads = self.read_row(&spec.table, row, &[&spec.column])?;
        let base = match reads.pop() {
            Some(r) => {
                let ts = r.write.as_ref().map(|(ts, _)| *ts);
                match (self.inner.values.read(r)?, ts) {
                    (Some(v), Some(ts)) => Some((spec.parse(&v, || format!("the base of {base_cell}"))?, ts)),
                    _ => None,
                }
            }
            None => None,
        };
        let deltas = self.read_deltas(spec, row)?;
        Ok((base, deltas))
    }

    /// Every delta of a combined cell visible at the snapshot, in commit order (locks of
    /// deltas that started below the snapshot are waited out like any reader's).
    fn read_deltas(&self, spec: &CombineSpec, row: &[u8]) -> Result<Vec<SeenDelta>> {
        let prefix = spec.delta_prefix();
        let prefixes = [prefix.as_str()];
        let mut end = row.to_vec();
        end.push(0);
        let mut after: Option<String> = None;
        let mut out: Vec<SeenDelta> = Vec::new();
        let mut waiter = LockWaiter::new();
        'pages: loop {
            self.inner.fence.wait_row(&key::row_prefix(&spec.table, row), self.fenced_upto);
            let page = self.scan_view(&ScanRange {
                table: &spec.table,
                start: row,
                after_column: after.as_deref(),
                end: Some(&end),
                columns: Some(&[]),
                prefixes: &prefixes,
                ts: self.start_ts,
                limit: DELTA_PAGE,
            })?;
            for cell in &page {
                if let Some((lock_ts, lock)) = &cell.read.lock {
                    let c = CellRef::new(spec.table.clone(), row, cell.column.clone());
                    waiter.handle(&self.inner, &c, *lock_ts, lock)?;
                    self.drop_view();
                    continue 'pages;
                }
                if let (Some(v), Some((commit_ts, _))) = (self.inner.values.read_ref(&cell.read)?, &cell.read.write) {
                    let acc =
                        spec.parse(&v, || format!("the delta {}/{}/{}", spec.table, row_text(row), cell.column))?;
                    out.push(SeenDelta { column: cell.column.clone(), commit_ts: *commit_ts, acc });
                }
                after = Some(cell.column.clone());
            }
            if page.len() < DELTA_PAGE {
                break;
            }
        }
        // Commit order; one transaction's deltas of a cell are one cell, so no ties.
        out.sort_by_key(|d| d.commit_ts);
        Ok(out)
    }
}

/// Deltas a scan met, by (row, combined column): their commit timestamps and stored values.
pub(crate) type SeenByCell = BTreeMap<(Vec<u8>, String), Vec<(Timestamp, Vec<u8>)>>;

/// A scan's cells: (row, column) → value and commit timestamp.
pub(crate) type ScannedCells = BTreeMap<(Vec<u8>, String), (Vec<u8>, Option<Timestamp>)>;

/// The combined columns of a scan's rows, folded: what `scan` gathered of each row's delta
/// columns as it passed them.
#[derive(Default)]
pub(crate) struct ScanDeltas {
    /// (row, column) → the deltas seen, with their commit timestamps.
    seen: SeenByCell,
}

impl ScanDeltas {
    /// Takes a scanned cell if it is a delta of one of `specs`; false if it is not.
    pub(crate) fn take(
        &mut self,
        specs: &[Arc<CombineSpec>],
        row: &[u8],
        column: &str,
        ts: Timestamp,
        v: Vec<u8>,
    ) -> bool {
        let Some(spec) = specs.iter().find(|s| column.starts_with(&s.delta_prefix())) else { return false };
        self.seen.entry((row.to_vec(), spec.column.clone())).or_default().push((ts, v));
        true
    }

    /// Rows with deltas seen.
    pub(crate) fn into_seen(self) -> SeenByCell {
        self.seen
    }
}

/// A combined cell of a scan: `base` (its value and commit, if the scan met one) folded with the
/// deltas the scan met. Returns the value and the newest commit.
pub(crate) fn fold_scanned(
    spec: &CombineSpec,
    cell: &CellRef,
    base: Option<(Vec<u8>, Option<Timestamp>)>,
    mut deltas: Vec<(Timestamp, Vec<u8>)>,
) -> Result<Option<(Vec<u8>, Option<Timestamp>)>> {
    deltas.sort_by_key(|(ts, _)| *ts);
    let mut newest = base.as_ref().and_then(|(_, ts)| *ts);
    let mut acc = match base {
        Some((v, _)) => Some(spec.parse(&v, || format!("the base of {cell}"))?),
        None => None,
    };
    for (ts, v) in deltas {
        newest = newest.max(Some(ts));
        acc = Some(spec.fold(acc, spec.parse(&v, || format!("a delta of {cell}"))?));
    }
    Ok(acc.map(|a| (spec.encode(&a), newest)))
}

const FORMAT: u8 = 1;

/// Encodes the combined columns: version byte 1, then per column its table and name (u32-LE
/// length-prefixed), an op byte and a type byte.
pub(crate) fn encode_specs(specs: &BTreeSet<CombineSpec>) -> Vec<u8> {
    let mut out = vec![FORMAT];
    for s in specs {
        for part in [&s.table, &s.column] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out.push(s.op.byte());
        out.push(s.value_type.byte());
    }
    out
}

/// Decodes [`encode_specs`].
pub(crate) fn decode_specs(bytes: &[u8]) -> Result<BTreeSet<CombineSpec>> {
    let bad = |why: &str| Error::Corrupt(format!("the combined columns (__system/registry/__combine) {why}"));
    let mut rest = bytes.strip_prefix(&[FORMAT]).ok_or_else(|| bad("have an unknown format version"))?;
    let mut out = BTreeSet::new();
    while !rest.is_empty() {
        let mut parts = [String::new(), String::new()];
        for part in &mut parts {
            let n = rest.get(..4).ok_or_else(|| bad("are truncated"))?;
            let n = u32::from_le_bytes(n.try_into().map_err(|_| bad("are truncated"))?) as usize;
            let b = rest.get(4..4 + n).ok_or_else(|| bad("are truncated"))?;
            *part = String::from_utf8(b.to_vec()).map_err(|_| bad("hold a name that is not UTF-8"))?;
            rest = &rest[4 + n..];
        }
        let (op, ty) = match rest {
            [op, ty, tail @ ..] => {
                let pair = (*op, *ty);
                rest = tail;
                pair
            }
            _ => return Err(bad("are truncated")),
        };
        let op = [CombineOp::Sum, CombineOp::Min, CombineOp::Max, CombineOp::Set]
            .into_iter()
            .find(|o| o.byte() == op)
            .ok_or_else(|| bad("hold an unknown op"))?;
        let value_type = [CombineType::I64, CombineType::F64, CombineType::Set]
            .into_iter()
            .find(|t| t.byte() == ty)
            .ok_or_else(|| bad("hold an unknown type"))?;
        let [table, column] = parts;
        out.insert(CombineSpec { table, column, op, value_type });
    }
    Ok(out)
}

impl Store {
    /// Declares the combined columns (replacing the set): from then on, on every host,
    /// [`Transaction::combine`] adds to them, reads fold their deltas and the folder runs.
    ///
    /// Refused (`InvalidArgument`, naming the column) if a column that stops being combined, or
    /// changes op or type, still has unfolded deltas: they would be read under another rule,
    /// or not at all. Wait for the folder (`Store::wait_quiescent`) and try again. Also refused:
    /// a combined column bound to a weak observer (its folded value is written).
    pub fn set_combined(&self, specs: Vec<CombineSpec>) -> Result<()> {
        let mut wanted = BTreeSet::new();
        for s in specs {
            let s = CombineSpec::new(&s.table, &s.column, s.op, s.value_type)?;
            if let Some(other) = wanted.iter().find(|o: &&CombineSpec| o.table == s.table && o.column == s.column) {
                return Err(Error::InvalidArgument(format!("{s} is declared twice (also as {other})")));
            }
            wanted.insert(s);
        }
        let current = self.combined();
        for old in &current {
            if wanted.contains(old) {
                continue;
            }
            let rows = self.unfolded_rows(old)?;
            if rows > 0 {
                return Err(Error::InvalidArgument(format!(
                    "combined column {old}: {rows} row{} still {} unfolded deltas; keep its declaration until the \
                     folder is done (percolator wait), then change it",
                    if rows == 1 { "" } else { "s" },
                    if rows == 1 { "has" } else { "have" }
                )));
            }
        }
        let saved = crate::registry::save_combined(self, &wanted)?;
        if let Some(old) = crate::registry::install(&self.inner, saved.clone(), None)? {
            crate::registry::acknowledge(&self.inner, old);
        }
        crate::registry::await_acknowledged(&self.inner, saved.version)
    }

    /// The combined columns.
    pub fn combined(&self) -> Vec<CombineSpec> {
        let registry = self.inner.registry.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        registry.combined_specs().iter().cloned().collect()
    }

    /// Rows of `spec`'s column with a fold pending (unfolded deltas, or a fold in flight).
    fn unfolded_rows(&self, spec: &CombineSpec) -> Result<u64> {
        let fold = fold_column(&spec.column);
        let mut rows = 0u64;
        let mut from: Option<Vec<u8>> = None;
        loop {
            let page = self.inner.backend.scan_notify(from.as_deref(), 1024)?;
            for e in &page {
                if e.cell.table == spec.table && e.cell.column == fold {
                    rows += 1;
                }
            }
            match page.last() {
                Some(last) if page.len() == 1024 => {
                    let mut k = crate::bigtable::notify_position(&last.cell);
                    k.push(0);
                    from = Some(k);
                }
                _ => return Ok(rows),
            }
        }
    }
}
