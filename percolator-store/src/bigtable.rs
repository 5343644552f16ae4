//! The seam: what Bigtable gives Percolator.
//!
//! Percolator is a client library over Bigtable, and this trait is that boundary. A backend
//! stores versioned cells keyed by (table, row, column, timestamp), applies **conditional
//! mutations of one row atomically**, reads a row's columns at a timestamp, scans in key order,
//! keeps notify cells in a separate locality group, and offers a small metadata keyspace (the
//! Chubby analog: oracle high-water mark, worker leases, dead letters). Everything above this
//! trait relies on single-row atomicity only; a backend may batch many row operations into one
//! underlying commit (group commit) as long as each keeps its own outcome.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::error::Result;
use crate::timestamp::Timestamp;

/// Where a cell lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CellRef {
    /// Table name.
    pub table: String,
    /// Row key.
    pub row: Vec<u8>,
    /// Column name (`family:qualifier` by convention).
    pub column: String,
}

impl CellRef {
    /// Builds a cell reference.
    pub fn new(table: impl Into<String>, row: impl Into<Vec<u8>>, column: impl Into<String>) -> CellRef {
        CellRef { table: table.into(), row: row.into(), column: column.into() }
    }
}

impl std::fmt::Display for CellRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.table, String::from_utf8_lossy(&self.row), self.column)
    }
}

/// The paper's `c:lock` value: who holds the cell and where their primary is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockRecord {
    /// The transaction's primary cell: its fate decides this lock's.
    pub primary: CellRef,
    /// Wall-clock milliseconds when the lock was written or last refreshed by a heartbeat.
    pub wall_ms: u64,
    /// How long after `wall_ms` the lock may be rolled back even if its owner looks alive.
    pub ttl_ms: u64,
    /// The owning worker's liveness token.
    pub worker: u64,
}

/// What a committed write record says happened to a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// The cell holds this value from the record's commit_ts on (values are always inlined).
    Put(Vec<u8>),
    /// The cell is deleted from the record's commit_ts on.
    Delete,
    /// The transaction that started at `start_ts` was rolled back. Kept at `ts = start_ts` so a
    /// delayed prewrite of that transaction finds a write at its start and fails.
    Rollback,
}

/// The paper's `c:write` value, keyed by commit_ts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// Start timestamp of the transaction that wrote it.
    pub start_ts: Timestamp,
    /// What it did.
    pub kind: WriteKind,
}

/// A condition checked atomically before a row mutation; the mutation applies only if all hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// No lock on `column`, at any timestamp.
    NoLock {
        /// Column checked.
        column: String,
    },
    /// No write record on `column` with commit timestamp `>= since`.
    NoWriteSince {
        /// Column checked.
        column: String,
        /// Start of the forbidden range.
        since: Timestamp,
    },
    /// `column` holds no lock of the transaction that started at `start_ts` (other locks may exist).
    LockAbsent {
        /// Column checked.
        column: String,
        /// The owner's start timestamp.
        start_ts: Timestamp,
    },
    /// `column` holds the lock of the transaction that started at `start_ts`.
    LockIs {
        /// Column checked.
        column: String,
        /// The owner's start timestamp.
        start_ts: Timestamp,
    },
}

/// One change inside a row mutation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Write a lock at `start_ts`.
    PutLock {
        /// Column.
        column: String,
        /// Owner's start timestamp.
        start_ts: Timestamp,
        /// The lock.
        lock: LockRecord,
    },
    /// Remove the lock at `start_ts`, if present.
    DeleteLock {
        /// Column.
        column: String,
        /// Owner's start timestamp.
        start_ts: Timestamp,
    },
    /// Stage a prewritten value at `start_ts`.
    PutData {
        /// Column.
        column: String,
        /// Owner's start timestamp.
        start_ts: Timestamp,
        /// The value.
        value: Vec<u8>,
    },
    /// Remove the staged value at `start_ts`, if present.
    DeleteData {
        /// Column.
        column: String,
        /// Owner's start timestamp.
        start_ts: Timestamp,
    },
    /// Write a write record at `commit_ts`.
    PutWrite {
        /// Column.
        column: String,
        /// Commit timestamp (for a rollback record, the start timestamp).
        commit_ts: Timestamp,
        /// The record.
        write: WriteRecord,
    },
    /// Remove the write record at `commit_ts` (garbage collection only).
    DeleteWrite {
        /// Column.
        column: String,
        /// Its timestamp.
        commit_ts: Timestamp,
    },
    /// Without `writer`: set the column's notify cell's timestamp to `max(current, ts)`. With
    /// `writer` (a weak notification at prewrite): add the writer to the writers the cell names
    /// (a cell created so has timestamp zero: pending only through the name). Names are never
    /// erased by another notification.
    SetNotify {
        /// Column.
        column: String,
        /// Timestamp of the write that triggered it.
        ts: Timestamp,
        /// For a weak notification set at prewrite: the writer, whose fate decides whether
        /// the notification stands (see `docs/design.md`).
        writer: Option<Writer>,
    },
    /// Remove the writer that started at `start_ts` from the writers the column's notify cell
    /// names (its fate is known: it re-notified at its commit timestamp, or it rolled back); a
    /// cell left with timestamp zero and no writer is removed.
    DropNotifyWriter {
        /// Column.
        column: String,
        /// The writer's start timestamp.
        start_ts: Timestamp,
    },
    /// If the column's notify cell's timestamp is `<= max_ts`: remove the cell, or, if it names
    /// writers (whose fate is unknown), set its timestamp to zero and keep the names.
    ClearNotify {
        /// Column.
        column: String,
        /// Only notifications at or before this are cleared.
        max_ts: Timestamp,
    },
}

/// An atomic conditional mutation of one row: the paper's Bigtable row transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowMutation {
    /// Table.
    pub table: String,
    /// Row.
    pub row: Vec<u8>,
    /// Checked first, all against the same state; any failure means nothing is written.
    pub conditions: Vec<Condition>,
    /// Applied in order if every condition holds.
    pub mutations: Vec<Mutation>,
}

/// What a failed condition found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A lock held by the transaction that started at `start_ts`.
    Lock {
        /// The owner's start timestamp.
        start_ts: Timestamp,
        /// The lock.
        lock: LockRecord,
    },
    /// A write record at `commit_ts`.
    Write {
        /// Its timestamp.
        commit_ts: Timestamp,
    },
    /// The expected lock is absent.
    NoLock,
    /// A lock that was expected absent is present.
    LockPresent,
}

/// The result of one row mutation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every condition held and every mutation was applied.
    Applied,
    /// Condition number `index` failed; nothing was written.
    ConditionFailed {
        /// Index into [`RowMutation::conditions`].
        index: usize,
        /// What was there instead.
        found: Found,
    },
}

/// What [`Bigtable::apply_atomic`] did: everything, or nothing because of one condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AtomicOutcome {
    /// Every row's conditions held and every mutation was applied.
    Applied,
    /// Nothing was applied: condition `index` of row `op` did not hold.
    ConditionFailed {
        /// Which row of the call.
        op: usize,
        /// Which condition of that row.
        index: usize,
        /// What violated it.
        found: Found,
    },
}

/// Checks a group for [`Bigtable::apply_atomic`]: its rows are distinct and share `backend`'s
/// atomic unit.
pub fn check_atomic_group<B: Bigtable + ?Sized>(backend: &B, rows: &[RowMutation]) -> crate::error::Result<()> {
    let Some(first) = rows.first() else { return Ok(()) };
    let unit = backend.atomic_unit(&first.table, &first.row).ok_or_else(|| {
        crate::error::Error::InvalidArgument("this backend applies one row at a time atomically".into())
    })?;
    let mut seen = std::collections::BTreeSet::new();
    for m in rows {
        if !seen.insert((m.table.as_str(), m.row.as_slice())) {
            return Err(crate::error::Error::InvalidArgument(format!(
                "an atomic group names row {}/{} twice",
                m.table,
                String::from_utf8_lossy(&m.row)
            )));
        }
        if backend.atomic_unit(&m.table, &m.row) != Some(unit) {
            return Err(crate::error::Error::InvalidArgument(format!(
                "row {}/{} is not in the atomic unit of row {}/{}",
                m.table,
                String::from_utf8_lossy(&m.row),
                first.table,
                String::from_utf8_lossy(&first.row)
            )));
        }
    }
    Ok(())
}

/// One operation of a group-committed batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A conditional row mutation.
    Row(RowMutation),
    /// Set a metadata key.
    MetaPut {
        /// Key.
        key: String,
        /// Value.
        value: Vec<u8>,
    },
    /// Remove a metadata key.
    MetaDelete {
        /// Key.
        key: String,
    },
    /// Add `delta` to the counter under a metadata key: a u64, 8 bytes little-endian (an
    /// absent key counts as zero), wrapping on overflow. Atomic, so hosts that share a backend
    /// add to one total without overwriting each other's counts. A value of another length is
    /// [`Error::Corrupt`](crate::Error::Corrupt).
    MetaAdd {
        /// Key.
        key: String,
        /// What to add.
        delta: u64,
    },
}

/// A cell as seen by a reader at some timestamp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellRead {
    /// The newest lock with start_ts `<=` the read timestamp (the paper's `[0, start_ts]` range).
    pub lock: Option<(Timestamp, LockRecord)>,
    /// The newest Put or Delete write record with commit_ts `<=` the read timestamp
    /// (rollback records are skipped).
    pub write: Option<(Timestamp, WriteRecord)>,
}

impl CellRead {
    /// The visible value, if the newest write is a Put.
    pub fn value(&self) -> Option<&[u8]> {
        match &self.write {
            Some((_, WriteRecord { kind: WriteKind::Put(v), .. })) => Some(v),
            _ => None,
        }
    }
}

/// What a scan reads: rows `[start, end)` of `table` as seen at `ts`, at most `limit` cells.
/// With `after_column`, the scan starts strictly after that cell of row `start` (resuming a
/// page). `columns` filters when given; reserved (`__`) columns are included only if named.
#[derive(Clone, Copy, Debug)]
pub struct ScanRange<'a> {
    /// Table.
    pub table: &'a str,
    /// First row (inclusive).
    pub start: &'a [u8],
    /// Resume strictly after this cell of row `start`.
    pub after_column: Option<&'a str>,
    /// End row (exclusive); `None` for the table's end.
    pub end: Option<&'a [u8]>,
    /// Only these columns, when given (`None`: every column outside the reserved namespace).
    pub columns: Option<&'a [&'a str]>,
    /// Columns starting with one of these are returned too, reserved ones included: the delta
    /// columns of combined columns (`combine.rs`). A scan of one row (`end` = `start ‖ 0x00`)
    /// with `columns = Some(&[])` and one prefix reads only that prefix's keys.
    pub prefixes: &'a [&'a str],
    /// The snapshot timestamp.
    pub ts: Timestamp,
    /// Most cells returned.
    pub limit: usize,
}

/// A cell found by a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedCell {
    /// Row key.
    pub row: Vec<u8>,
    /// Column.
    pub column: String,
    /// What a reader at the scan timestamp sees.
    pub read: CellRead,
}

/// Every stored version of one cell (for GC and diagnostics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CellVersions {
    /// Column.
    pub column: String,
    /// Locks, newest first.
    pub locks: Vec<(Timestamp, LockRecord)>,
    /// Write records, newest first.
    pub writes: Vec<(Timestamp, WriteRecord)>,
    /// Start timestamps of staged data, newest first.
    pub data: Vec<Timestamp>,
}

/// Every version of every cell of one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowVersions {
    /// Table.
    pub table: String,
    /// Row.
    pub row: Vec<u8>,
    /// Cells in column order.
    pub cells: Vec<CellVersions>,
}

/// The transaction behind a weak notification set at prewrite.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writer {
    /// Its start timestamp.
    pub start_ts: Timestamp,
    /// Its primary cell.
    pub primary: CellRef,
}

/// A pending notification (a set notify cell).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyEntry {
    /// The notified cell.
    pub cell: CellRef,
    /// Timestamp of the newest write that set it; zero when the cell is pending only because
    /// it names writers.
    pub ts: Timestamp,
    /// The weak notifications set at prewrite whose transactions may not have committed yet,
    /// oldest first.
    pub writers: Vec<Writer>,
}

/// Counters a backend keeps about its commits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackendStats {
    /// Underlying commits (for redb: write transactions, each one fsync when durable).
    pub commits: u64,
    /// Operations applied in those commits.
    pub ops: u64,
    /// For redb at durability fsync: rounds made durable by an fdatasync of the redo log
    /// (their redb commits wrote no page).
    pub log_syncs: u64,
    /// For redb at durability fsync: checkpoints (durable redb commits that emptied the redo
    /// log).
    pub checkpoints: u64,
    /// For redb: compactions of the open file while the store was quiet.
    pub compactions: u64,
    /// For redb: compactions started and given up, the file left as it was: the store stopped
    /// being quiet during the copy, or the copy failed (the log says why).
    pub compactions_given_up: u64,
    /// For redb: syncs of the file while a checkpoint (or a compaction) wrote it, one per
    /// megabyte written, so that a round's flush of the redo log never waits behind a whole
    /// checkpoint's (`docs/design.md`, "A memtable in front of redb", 12.).
    pub paced_syncs: u64,
}

/// Why a backend refuses writes now ([`Bigtable::storage_failure`],
/// [`Store::storage_failure`](crate::Store::storage_failure)).
#[derive(Clone, Debug)]
pub struct StorageFailure {
    /// The first error met ([`Error::Io`](crate::Error::Io): the file and the cause); every
    /// refused write answers it.
    pub error: crate::Error,
    /// When it was met.
    pub since: std::time::SystemTime,
    /// Small writes tried since, which failed too.
    pub probes: u64,
}

/// A consistent read view of the cells (for redb: one read transaction). A transaction keeps
/// one across its reads instead of opening a new one per read; see `docs/design.md` ("Read
/// views") for why that is safe.
pub trait Snapshot: Send {
    /// Like [`Bigtable::read_row`], as of when the view was opened.
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>>;

    /// Like [`Bigtable::scan`], as of when the view was opened.
    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>>;
}

/// What Bigtable gives Percolator. See the module docs.
///
/// (A method added here, defaulted or not, must be passed on by
/// [`Observed`](crate::backends::Observed), which wraps backends to see their writes.)
pub trait Bigtable: Send + Sync + 'static {
    /// Opens a read view, or `None` if the backend has no cheap views (reads then go to the
    /// live store, which is always at least as fresh).
    fn snapshot(&self) -> Result<Option<Box<dyn Snapshot>>> {
        Ok(None)
    }

    /// Applies operations, each atomically and independently; returns one outcome per op, in
    /// order. A backend may commit them together (group commit); a failed condition affects only
    /// its own op. If the call returns `Err`, none, some or all ops may be durable.
    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>>;

    /// Reads `columns` of one row as seen at `ts`.
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>>;

    /// Finds the write record of the transaction that started at `start_ts` on one cell
    /// (its commit record, or its rollback record), searching commit timestamps `>= start_ts`;
    /// its commit record when both are there. A backend whose reads are not one snapshot must
    /// read the record at `start_ts` before the commit records above it, as
    /// [`cells::find_write`](crate::backends::cells::find_write) does (`docs/design.md`, "Lock
    /// resolution").
    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>>;

    /// Reads the staged value of a prewrite.
    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>>;

    /// Scans `range` (see [`ScanRange`]): at most `range.limit` cells that have a lock or a
    /// visible Put (deleted cells are skipped), in key order.
    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>>;

    /// Every version of up to `limit` rows, across tables, starting at `(table, row)` inclusive
    /// (or at the beginning). For GC and diagnostics.
    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>>;

    /// The versions of each of `rows` that has any, in the order given, without the values of
    /// write records (a `Put` holds an empty value): what GC decides on, for the rows written
    /// since it last looked. The default reads each row with [`Bigtable::scan_versions`] and
    /// drops the values; a backend with one read view over all rows reads them in it, and
    /// does not copy values it would drop.
    fn row_versions_without_values(&self, rows: &[(String, Vec<u8>)]) -> Result<Vec<RowVersions>> {
        let mut out = Vec::with_capacity(rows.len());
        for (table, row) in rows {
            let Some(mut found) = self.scan_versions(Some((table, row)), 1)?.pop() else { continue };
            // A row without versions reads as the next row.
            if &found.table != table || &found.row != row {
                continue;
            }
            for w in found.cells.iter_mut().flat_map(|c| c.writes.iter_mut()) {
                if let WriteKind::Put(v) = &mut w.1.kind {
                    *v = Vec::new();
                }
            }
            out.push(found);
        }
        Ok(out)
    }

    /// Up to `limit` notify cells from `from` (an encoded notify position, inclusive) in key
    /// order. `None` starts at the beginning. Costs ∝ notify cells, not all cells.
    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>>;

    /// True if `cell` has a notify cell (an observer of it has work pending). The default
    /// scans from the cell's position; a backend that can read one key does that instead.
    fn has_notify(&self, cell: &CellRef) -> Result<bool> {
        let pos = notify_position(cell);
        Ok(self.scan_notify(Some(&pos), 1)?.first().is_some_and(|e| &e.cell == cell))
    }

    /// Reads a metadata key.
    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Lists metadata keys starting with `prefix`, in order.
    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// True if this process is the only one that can open the store (embedded backends): every
    /// reader goes through this process, which allows one-phase commit and lets a new process
    /// treat every earlier worker as dead.
    fn exclusive(&self) -> bool;

    /// Commit counters.
    fn stats(&self) -> BackendStats;

    /// The failure that stops this backend's writes now, if one does: redb after an I/O error
    /// (a full disk) refuses writes until a probe write of 1 MiB it tries by itself succeeds. `None`
    /// (the default): writes are not known to fail.
    fn storage_failure(&self) -> Option<StorageFailure> {
        None
    }

    /// How many times the backend reopened its store after a failure. A reopen goes back to
    /// the last durable commit, so what depends on a write being kept — the oracle's
    /// high-water mark — writes it again when this changes. 0, the default: never reopens.
    fn reopens(&self) -> u64 {
        0
    }

    /// The atomic unit of a row: rows of one unit can be changed together in one
    /// [`Bigtable::apply_atomic`] call (redb and memory: every row is in unit 0; Redis: the
    /// rows of one bucket, which is one cluster slot). `None`, the default: one row at a time.
    fn atomic_unit(&self, table: &str, row: &[u8]) -> Option<u64> {
        let _ = (table, row);
        None
    }

    /// Applies mutations of distinct rows that share one atomic unit as one atomic step: the
    /// conditions of every row are checked, and only if all hold are the mutations of every
    /// row applied (see [`check_atomic_group`]). The default refuses: a backend without
    /// multi-row atomicity.
    fn apply_atomic(&self, rows: Vec<RowMutation>) -> Result<AtomicOutcome> {
        check_atomic_group(self, &rows)?;
        Err(crate::error::Error::InvalidArgument("this backend applies one row at a time atomically".into()))
    }

    /// [`Bigtable::apply_atomic`] of `rows` (one row: [`Bigtable::apply`] of its op, which
    /// every backend applies atomically), then, only if the group applied, `then` as by
    /// [`Bigtable::apply`]: each op on its own, with its own outcome. `None` when the group
    /// failed (nothing of `then` was tried), or when the default's second call failed once the
    /// group had applied: the group's outcome stands, and the caller applies `then` itself
    /// (and meets the error there), so `then` must be ops that may be applied twice. The
    /// default makes the two calls; a backend that group-commits may do both in one
    /// submission (redb: one round, the group first, and an error fails both; memory: one
    /// hold of its map, where an error while applying `then`, which only a corrupt record
    /// can cause, is answered as an error although the group applied). The store
    /// clears a notification this way after the commit of the run that processed it
    /// (`docs/design.md`, "Notifications").
    fn apply_atomic_then(
        &self,
        rows: Vec<RowMutation>,
        then: Vec<Op>,
    ) -> Result<(AtomicOutcome, Option<Vec<Outcome>>)> {
        let outcome = if rows.len() == 1 {
            match self.apply(rows.into_iter().map(Op::Row).collect())?.pop() {
                Some(Outcome::ConditionFailed { index, found }) => {
                    AtomicOutcome::ConditionFailed { op: 0, index, found }
                }
                _ => AtomicOutcome::Applied,
            }
        } else {
            self.apply_atomic(rows)?
        };
        if outcome != AtomicOutcome::Applied {
            return Ok((outcome, None));
        }
        match self.apply(then) {
            Ok(outcomes) => Ok((outcome, Some(outcomes))),
            Err(e) => {
                tracing::debug!(error = %e, "the ops after an applied atomic group failed; left to the caller");
                Ok((outcome, None))
            }
        }
    }

    /// The bytes the store takes on disk (a file's size), if the backend knows; `None` (the
    /// default) if it does not (an in-memory or remote backend).
    fn size_on_disk(&self) -> Option<u64> {
        None
    }

    /// How many partitions the notify group has for scanners of several processes to share
    /// out (see "Several hosts" in `docs/design.md`); 1 (the default) if it is one range.
    fn notify_partitions(&self) -> u32 {
        1
    }

    /// [`Bigtable::scan_notify`] within one partition (`partition < notify_partitions()`); a
    /// position passed as `from` must be of that partition. The default has one partition.
    fn scan_notify_partition(&self, partition: u32, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        debug_assert_eq!(partition, 0, "one notify partition");
        self.scan_notify(from, limit)
    }

    /// Takes the scanners' advisory lock of a row (`row_key` as `key::row_prefix` encodes it)
    /// for `owner` (a worker id), expiring after `ttl`, across every process that uses the
    /// store; `false` if another owner holds it. The default (for exclusive backends, where
    /// the process's own row locks suffice) always takes it.
    fn try_lock_row(&self, row_key: &[u8], owner: u64, ttl: Duration) -> Result<bool> {
        let _ = (row_key, owner, ttl);
        Ok(true)
    }

    /// Releases a row lock [`Bigtable::try_lock_row`] gave `owner` (nothing if it expired and
    /// someone else took it).
    fn unlock_row(&self, row_key: &[u8], owner: u64) -> Result<()> {
        let _ = (row_key, owner);
        Ok(())
    }

    /// A reader of this process is about to wait for writes it submitted (one-phase commits
    /// in the 1PC fence): a backend that gathers callers into shared commits should commit
    /// what it has gathered now. A hint, and must not block; the default does nothing.
    fn hurry(&self) {}

    /// Tells the scanners of other processes that notify cells of these rows (`row_key`s) were
    /// set. Best effort and must not block: a lost wakeup only delays work until a scanner's
    /// next look. The default does nothing (no other process uses an exclusive backend).
    fn wake(&self, row_keys: &[Vec<u8>]) {
        let _ = row_keys;
    }

    /// Calls `on_wake` whenever another process calls [`Bigtable::wake`], from a thread of its
    /// own, until `stop` is set. Returns at once. The default does nothing.
    fn watch_wakes(&self, on_wake: Box<dyn Fn() + Send>, stop: Arc<AtomicBool>) {
        let _ = (on_wake, stop);
    }
}

/// The notify-position encoding of a cell, as passed to [`Bigtable::scan_notify`].
pub fn notify_position(cell: &CellRef) -> Vec<u8> {
    crate::key::cell_prefix(&cell.table, &cell.row, &cell.column)
}

// ---- value encodings shared by every backend ------------------------------------------------

/// The byte encodings of the records a backend stores (locks, write records, notify values).
pub(crate) mod codec {
    use super::*;
    use crate::error::Error;

    fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }

    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8]> {
            if self.0.len() < n {
                return Err(Error::Corrupt("truncated record".into()));
            }
            let (a, b) = self.0.split_at(n);
            self.0 = b;
            Ok(a)
        }
        fn u8(&mut self) -> Result<u8> {
            Ok(self.take(1)?[0])
        }
        fn u64(&mut self) -> Result<u64> {
            Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
        }
        fn bytes(&mut self) -> Result<&'a [u8]> {
            let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
            self.take(n)
        }
        fn string(&mut self) -> Result<String> {
            String::from_utf8(self.bytes()?.to_vec()).map_err(|_| Error::Corrupt("non-UTF-8 name".into()))
        }
    }

    const LOCK_V1: u8 = 1;
    const WRITE_PUT: u8 = 1;
    const WRITE_DELETE: u8 = 2;
    const WRITE_ROLLBACK: u8 = 3;

    /// A lock record's bytes.
    pub fn encode_lock(l: &LockRecord) -> Vec<u8> {
        let mut out = vec![LOCK_V1];
        put_bytes(&mut out, l.primary.table.as_bytes());
        put_bytes(&mut out, &l.primary.row);
        put_bytes(&mut out, l.primary.column.as_bytes());
        out.extend_from_slice(&l.wall_ms.to_le_bytes());
        out.extend_from_slice(&l.ttl_ms.to_le_bytes());
        out.extend_from_slice(&l.worker.to_le_bytes());
        out
    }

    /// A lock record from its bytes.
    pub fn decode_lock(b: &[u8]) -> Result<LockRecord> {
        let mut r = Reader(b);
        if r.u8()? != LOCK_V1 {
            return Err(Error::Corrupt("unknown lock record version".into()));
        }
        Ok(LockRecord {
            primary: CellRef { table: r.string()?, row: r.bytes()?.to_vec(), column: r.string()? },
            wall_ms: r.u64()?,
            ttl_ms: r.u64()?,
            worker: r.u64()?,
        })
    }

    /// Notify value: `ts` (8 bytes BE), then for each writer its start_ts (8 bytes LE) and
    /// primary (table, row, column). (A value with one writer or none reads as before.)
    pub(crate) fn encode_notify(ts: Timestamp, writers: &[Writer]) -> Vec<u8> {
        let mut out = ts.raw().to_be_bytes().to_vec();
        for w in writers {
            out.extend_from_slice(&encode_writer(w));
        }
        out
    }

    /// One writer of a notify value.
    pub fn encode_writer(w: &Writer) -> Vec<u8> {
        let mut out = w.start_ts.raw().to_le_bytes().to_vec();
        put_bytes(&mut out, w.primary.table.as_bytes());
        put_bytes(&mut out, &w.primary.row);
        put_bytes(&mut out, w.primary.column.as_bytes());
        out
    }

    pub(crate) fn decode_notify(b: &[u8]) -> Result<(Timestamp, Vec<Writer>)> {
        let mut r = Reader(b);
        let ts = Timestamp::from_raw(u64::from_be_bytes(r.take(8)?.try_into().expect("8 bytes")));
        let mut writers = Vec::new();
        while !r.0.is_empty() {
            let start_ts = Timestamp::from_raw(r.u64()?);
            let primary = CellRef { table: r.string()?, row: r.bytes()?.to_vec(), column: r.string()? };
            writers.push(Writer { start_ts, primary });
        }
        Ok((ts, writers))
    }

    /// A write record's bytes.
    pub fn encode_write(w: &WriteRecord) -> Vec<u8> {
        let mut out = Vec::with_capacity(13 + if let WriteKind::Put(v) = &w.kind { v.len() } else { 0 });
        match &w.kind {
            WriteKind::Put(v) => {
                out.push(WRITE_PUT);
                out.extend_from_slice(&w.start_ts.raw().to_le_bytes());
                out.extend_from_slice(v);
            }
            WriteKind::Delete => {
                out.push(WRITE_DELETE);
                out.extend_from_slice(&w.start_ts.raw().to_le_bytes());
            }
            WriteKind::Rollback => {
                out.push(WRITE_ROLLBACK);
                out.extend_from_slice(&w.start_ts.raw().to_le_bytes());
            }
        }
        out
    }

    /// Decodes only the kind tag and start_ts (cheap: no value copy).
    pub(crate) fn write_header(b: &[u8]) -> Result<(u8, Timestamp)> {
        if b.len() < 9 {
            return Err(Error::Corrupt("truncated write record".into()));
        }
        Ok((b[0], Timestamp::from_raw(u64::from_le_bytes(b[1..9].try_into().expect("8 bytes")))))
    }

    pub(crate) fn is_rollback(b: &[u8]) -> Result<bool> {
        Ok(write_header(b)?.0 == WRITE_ROLLBACK)
    }

    /// [`decode_write`] with an empty value for a `Put` (what GC decides on; no copy).
    pub(crate) fn decode_write_without_value(b: &[u8]) -> Result<WriteRecord> {
        let (tag, start_ts) = write_header(b)?;
        let kind = match tag {
            WRITE_PUT => WriteKind::Put(Vec::new()),
            WRITE_DELETE => WriteKind::Delete,
            WRITE_ROLLBACK => WriteKind::Rollback,
            t => return Err(Error::Corrupt(format!("unknown write record tag {t}"))),
        };
        Ok(WriteRecord { start_ts, kind })
    }

    pub(crate) fn decode_write(b: &[u8]) -> Result<WriteRecord> {
        let (tag, start_ts) = write_header(b)?;
        let kind = match tag {
            WRITE_PUT => WriteKind::Put(b[9..].to_vec()),
            WRITE_DELETE => WriteKind::Delete,
            WRITE_ROLLBACK => WriteKind::Rollback,
            t => return Err(Error::Corrupt(format!("unknown write record tag {t}"))),
        };
        Ok(WriteRecord { start_ts, kind })
    }
}
