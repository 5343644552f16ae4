//! The embedded default backend: one redb file, group-committed.
//!
//! Three redb tables: `cells` (locks, write records and staged data, see [`crate::key`]),
//! `notify` (the notify locality group: scanning it costs ∝ pending notifications), and `meta`
//! (oracle high-water mark, worker leases, dead letters). redb holds an exclusive lock on the
//! file, so this process is the only reader and writer ([`Bigtable::exclusive`]).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::bigtable::*;
use crate::cells::{self, KvRead, KvWrite, Visitor};
use crate::error::{Error, Result};
use crate::group_commit::{GroupCommit, Work};
use crate::timestamp::Timestamp;

const CELLS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("cells");
const NOTIFY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("notify");
const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");

/// How durable a group commit is before its callers are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync once per group commit (the default): an answered commit survives power loss.
    #[default]
    Fsync,
    /// No fsync per commit: one group commit a second is made durable (fsynced), so a crash or
    /// power loss loses at most about the last second (like PostgreSQL's
    /// `synchronous_commit = off`), and redb can reuse the pages that removed versions held (it
    /// reuses pages freed by non-durable commits only after a durable one). For tests and
    /// benchmarks.
    None,
}

/// Settings of the redb backend.
#[derive(Clone, Debug)]
pub struct RedbConfig {
    /// fsync per group commit, or not.
    pub durability: Durability,
    /// redb page cache size in bytes.
    pub cache_bytes: usize,
}

impl Default for RedbConfig {
    fn default() -> RedbConfig {
        RedbConfig { durability: Durability::Fsync, cache_bytes: 256 << 20 }
    }
}

/// One caller's share of a group commit.
enum Batch {
    /// Independent ops, each with its own outcome.
    Ops(Vec<Op>),
    /// An atomic group ([`Bigtable::apply_atomic`]): all rows or none.
    Atomic(Vec<RowMutation>),
}

enum Done {
    Ops(Vec<Outcome>),
    Atomic(AtomicOutcome),
}

impl Work for Batch {
    fn weight(&self) -> usize {
        match self {
            Batch::Ops(ops) => ops.len(),
            Batch::Atomic(rows) => rows.len(),
        }
    }
}

/// [`Bigtable`] over one redb file.
pub struct RedbBigtable {
    db: Database,
    /// The file (for its size).
    path: std::path::PathBuf,
    config: RedbConfig,
    group: GroupCommit<Batch, Done>,
    commits: AtomicU64,
    ops: AtomicU64,
    /// With [`Durability::None`]: when (ms after `opened`) the next group commit is durable.
    opened: std::time::Instant,
    next_durable_ms: AtomicU64,
}

/// With [`Durability::None`], a group commit is made durable at most this often.
const NONE_DURABLE_EVERY_MS: u64 = 1000;

impl RedbBigtable {
    /// Opens or creates the store file at `path`. Fails with [`Error::AlreadyOpen`] if another
    /// process, or another handle in this process, has the file open.
    pub fn open(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbBigtable> {
        let path = path.as_ref();
        let db = Database::builder().set_cache_size(config.cache_bytes).create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_owned() },
            e => Error::Storage(format!("opening {}: {e}", path.display())),
        })?;
        let tx = db.begin_write()?;
        tx.open_table(CELLS)?;
        tx.open_table(NOTIFY)?;
        tx.open_table(META)?;
        tx.commit()?;
        Ok(RedbBigtable {
            db,
            path: path.to_owned(),
            config,
            group: GroupCommit::new(),
            commits: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            opened: std::time::Instant::now(),
            next_durable_ms: AtomicU64::new(NONE_DURABLE_EVERY_MS),
        })
    }

    /// Compacts the store file at `path` in place: redb moves the pages in use to the start of
    /// the file and gives the rest back to the file system (it never does while the file is
    /// open for use). Offline: fails with [`Error::AlreadyOpen`] if another process or handle
    /// has the file open, and with [`Error::NotFound`] if there is no file (none is created).
    /// Returns the file's size before and after. Old versions must be collected first to free
    /// their pages ([`Store::compact`](crate::Store::compact) does both).
    ///
    /// # After a failure
    /// redb compacts in durable steps: the file is whole, and as large or smaller.
    pub fn compact(path: impl AsRef<Path>) -> Result<(u64, u64)> {
        let path = path.as_ref();
        let size = || -> Result<u64> { Ok(std::fs::metadata(path)?.len()) };
        if !path.is_file() {
            return Err(Error::NotFound(format!("no store file at {}", path.display())));
        }
        let before = size()?;
        let mut db = Database::builder().open(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_owned() },
            e => Error::Storage(format!("opening {}: {e}", path.display())),
        })?;
        // Each call moves what it can; a later one may find more to move. Bounded, in case a
        // version of redb kept reporting progress.
        for _ in 0..16 {
            if !db.compact().map_err(|e| Error::Storage(format!("compacting {}: {e}", path.display())))? {
                break;
            }
        }
        drop(db);
        Ok((before, size()?))
    }

    fn commit_batch(&self, groups: &[&Batch]) -> Result<Vec<Done>> {
        let mut tx = self.db.begin_write()?;
        let durable = match self.config.durability {
            Durability::Fsync => true,
            // Only the group commit's leader gets here: one at a time.
            Durability::None => {
                self.opened.elapsed().as_millis() as u64 >= self.next_durable_ms.load(Ordering::Relaxed)
            }
        };
        tx.set_durability(if durable { redb::Durability::Immediate } else { redb::Durability::None })?;
        let mut out = Vec::with_capacity(groups.len());
        {
            // Tables are opened when first used: a commit that writes no notify cell or metadata
            // (most one-phase commits) does not pay for opening and re-rooting those tables.
            let mut cells = Lazy::new(&tx, CELLS);
            let mut notify = Lazy::new(&tx, NOTIFY);
            let mut meta = Lazy::new(&tx, META);
            for group in groups {
                out.push(match group {
                    Batch::Ops(ops) => {
                        let mut outcomes = Vec::with_capacity(ops.len());
                        for op in ops {
                            outcomes.push(cells::apply_op(&mut cells, &mut notify, &mut meta, op)?);
                        }
                        Done::Ops(outcomes)
                    }
                    // Every row's conditions are checked before any is written, so a failed
                    // group leaves nothing behind in the shared transaction.
                    Batch::Atomic(rows) => Done::Atomic(cells::apply_rows_atomically(&mut cells, &mut notify, rows)?),
                });
            }
        }
        tx.commit()?;
        if durable && self.config.durability == Durability::None {
            let now = self.opened.elapsed().as_millis() as u64;
            self.next_durable_ms.store(now + NONE_DURABLE_EVERY_MS, Ordering::Relaxed);
        }
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(groups.iter().map(|g| g.weight() as u64).sum(), Ordering::Relaxed);
        Ok(out)
    }

    fn read<T>(&self, table: TableDefinition<&[u8], &[u8]>, f: impl FnOnce(&dyn KvRead) -> Result<T>) -> Result<T> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(table)?;
        f(&R(t))
    }
}

struct R(redb::ReadOnlyTable<&'static [u8], &'static [u8]>);
struct W<'t>(redb::Table<'t, &'static [u8], &'static [u8]>);

fn for_range_impl<T: ReadableTable<&'static [u8], &'static [u8]>>(
    t: &T,
    from: &[u8],
    to: Option<&[u8]>,
    f: Visitor<'_>,
) -> Result<()> {
    if to.is_some_and(|to| to <= from) {
        return Ok(()); // an empty (or inverted) range
    }
    let iter = match to {
        Some(to) => t.range::<&[u8]>(from..to)?,
        None => t.range::<&[u8]>(from..)?,
    };
    for item in iter {
        let (k, v) = item?;
        if !f(k.value(), v.value())? {
            break;
        }
    }
    Ok(())
}

/// A table of a write transaction, opened when first used.
struct Lazy<'t> {
    tx: &'t redb::WriteTransaction,
    def: TableDefinition<'static, &'static [u8], &'static [u8]>,
    table: std::cell::OnceCell<W<'t>>,
}

impl<'t> Lazy<'t> {
    fn new(tx: &'t redb::WriteTransaction, def: TableDefinition<'static, &'static [u8], &'static [u8]>) -> Lazy<'t> {
        Lazy { tx, def, table: std::cell::OnceCell::new() }
    }

    fn table(&self) -> Result<&W<'t>> {
        if self.table.get().is_none() {
            let _ = self.table.set(W(self.tx.open_table(self.def)?));
        }
        Ok(self.table.get().expect("just opened"))
    }

    fn table_mut(&mut self) -> Result<&mut W<'t>> {
        self.table()?;
        Ok(self.table.get_mut().expect("just opened"))
    }
}

impl KvRead for Lazy<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.table()?.get(key)
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        self.table()?.for_range(from, to, f)
    }
}

impl KvWrite for Lazy<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.table_mut()?.put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.table_mut()?.delete(key)
    }
}

impl KvRead for R {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key)?.map(|v| v.value().to_vec()))
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        for_range_impl(&self.0, from, to, f)
    }
}

impl KvRead for W<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key)?.map(|v| v.value().to_vec()))
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        for_range_impl(&self.0, from, to, f)
    }
}

impl KvWrite for W<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.insert(key, value)?;
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.0.remove(key)?;
        Ok(())
    }
}

impl Drop for RedbBigtable {
    fn drop(&mut self) {
        // redb persists non-durable commits only when a durable one follows: make a clean close
        // keep everything, whatever the durability setting.
        if self.config.durability == Durability::None
            && let Ok(tx) = self.db.begin_write()
        {
            let _ = tx.commit();
        }
    }
}

/// One redb read transaction over the `cells` table.
struct RedbSnapshot(R);

impl Snapshot for RedbSnapshot {
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        cells::read_row(&self.0, table, row, columns, ts)
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        cells::scan(&self.0, range)
    }
}

impl Bigtable for RedbBigtable {
    fn snapshot(&self) -> Result<Option<Box<dyn Snapshot>>> {
        let tx = self.db.begin_read()?;
        Ok(Some(Box::new(RedbSnapshot(R(tx.open_table(CELLS)?)))))
    }

    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        match self.group.submit(Batch::Ops(ops), &|groups| self.commit_batch(groups))? {
            Done::Ops(outcomes) => Ok(outcomes),
            Done::Atomic(_) => Err(Error::Storage("group commit answered ops with an atomic outcome".into())),
        }
    }

    fn atomic_unit(&self, _table: &str, _row: &[u8]) -> Option<u64> {
        Some(0)
    }

    fn apply_atomic(&self, rows: Vec<RowMutation>) -> Result<AtomicOutcome> {
        check_atomic_group(self, &rows)?;
        if rows.is_empty() {
            return Ok(AtomicOutcome::Applied);
        }
        // Group-committed like any op: it shares the write transaction (and the fsync) of
        // whatever else is queued, and stays all-or-nothing inside it.
        match self.group.submit(Batch::Atomic(rows), &|groups| self.commit_batch(groups))? {
            Done::Atomic(outcome) => Ok(outcome),
            Done::Ops(_) => Err(Error::Storage("group commit answered an atomic group with op outcomes".into())),
        }
    }

    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        self.read(CELLS, |c| cells::read_row(c, table, row, columns, ts))
    }

    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        self.read(CELLS, |c| cells::find_write(c, cell, start_ts))
    }

    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        self.read(CELLS, |c| cells::read_data(c, cell, start_ts))
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        self.read(CELLS, |c| cells::scan(c, range))
    }

    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        self.read(CELLS, |c| cells::scan_versions(c, from, limit))
    }

    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.read(NOTIFY, |n| cells::scan_notify(n, from, limit))
    }

    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.read(META, |m| m.get(key.as_bytes()))
    }

    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.read(META, |m| cells::meta_scan(m, prefix))
    }

    fn size_on_disk(&self) -> Option<u64> {
        std::fs::metadata(&self.path).ok().map(|m| m.len())
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn hurry(&self) {
        self.group.hurry();
    }

    fn stats(&self) -> BackendStats {
        BackendStats { commits: self.commits.load(Ordering::Relaxed), ops: self.ops.load(Ordering::Relaxed) }
    }
}
