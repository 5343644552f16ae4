//! The embedded default backend: one redb file, group-committed, with a memtable and a redo
//! log in front of it.
//!
//! Three redb tables: `cells` (locks, write records and staged data, see [`crate::key`]),
//! `notify` (the notify locality group: scanning it costs ∝ pending notifications), and `meta`
//! (oracle high-water mark, worker leases, dead letters). redb holds an exclusive lock on the
//! file, so this process is the only reader and writer ([`Bigtable::exclusive`]).
//!
//! A group-commit round does not write redb: it applies its callers' work in memory, appends
//! the key-level changes it made to the redo log and fdatasyncs them (durability fsync:
//! `<store>.redo` and `<store>.redo.1`, [`crate::redo`]), then publishes them into the
//! memtable ([`crate::memtable`]), which readers see over redb's last checkpoint. A thread of
//! the backend (`redb-checkpointer`) writes the memtable to redb in one durable transaction
//! every few seconds (each second at durability none; [`RedbConfig::checkpoint_every`]) and
//! empties the log's file that held it; opening the store replays what the
//! log holds after the last checkpoint (`docs/design.md`, "A redo log in front of redb" and
//! "A memtable in front of redb").
//!
//! After an I/O error (a full disk) redb refuses every later operation until the file is
//! closed and opened again. The backend then refuses writes with the first error
//! ([`Error::Io`]), reopens the file at once so that reads work, and tries a probe write (1
//! MiB) and the checkpoint with backoff until they succeed (`docs/design.md`, "A full disk").
//! What was published since the last checkpoint stays in memory across the reopen, so nothing
//! acknowledged is lost, at either durability.

use std::ops::Bound;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};

use crate::base_hints::BaseHints;
use crate::bigtable::*;
use crate::cells::{self, KvRead, KvWrite, Visitor};
use crate::error::{Error, LATCHED, Result};
use crate::group_commit::{GroupCommit, Work};
use crate::memtable::{CellFilter, Layered, Map, Mem};
use crate::paced_file::{PacedFile, SYNC_STEP};
use crate::redo::{self, Changes, RedoLog, Table};
use crate::timestamp::Timestamp;

const CELLS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("cells");
const NOTIFY: TableDefinition<&[u8], &[u8]> = TableDefinition::new("notify");
const META: TableDefinition<&[u8], &[u8]> = TableDefinition::new("meta");
/// The tables by [`Table`] number.
const TABLES: [TableDefinition<&[u8], &[u8]>; 3] = [CELLS, NOTIFY, META];

/// How durable a group commit is before its callers are answered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// fsync once per group commit (the default): an answered commit survives power loss.
    #[default]
    Fsync,
    /// No fsync per commit: commits are made durable by the next checkpoint, about a second
    /// later, so a crash or power loss loses about the last second of commits (like
    /// PostgreSQL's `synchronous_commit = off`). For tests and benchmarks.
    None,
}

/// Settings of the redb backend.
#[derive(Clone, Debug)]
pub struct RedbConfig {
    /// fsync per group commit, or not.
    pub durability: Durability,
    /// redb's page cache in bytes, at most: its read cache and its write buffer together (a
    /// checkpoint's dirty pages past half of it are written out before its commit, and
    /// written again if it touches them again). Default: 1 GiB, redb's own default.
    pub cache_bytes: usize,
    /// At [`Durability::Fsync`], make rounds durable with the redo log (the default) rather
    /// than with a checkpoint at the end of each round (off only to compare the two in
    /// benchmarks: a round is then visible to readers just before its checkpoint is durable).
    pub redo_log: bool,
    /// How often the memtable is checkpointed into redb (a durable redb commit that also
    /// empties a file of the redo log): longer means fewer page writes, more memory and more
    /// to replay after a crash. `None` (the default): every 5 s when the redo log makes rounds
    /// durable (durability fsync), every second otherwise, where the checkpoint is what makes
    /// them durable and its interval bounds what a crash loses.
    pub checkpoint_every: Option<Duration>,
    /// Compact the open file when the store has been quiet (no writes but a host's few; reads
    /// do not count) this long and a quarter of the
    /// file (at least 16 MiB) is free pages (`docs/design.md`, "GC", compaction when quiet):
    /// redb grows its file in doubling steps and gives freed pages back only by compacting.
    /// The file is copied beside itself (the disk needs room for what it holds), and the copy
    /// takes its place; readers and rounds go on meanwhile. `None`: never (the file shrinks
    /// only offline, [`RedbBigtable::compact`]). Default: 30 s.
    pub compact_when_quiet: Option<Duration>,
}

impl RedbConfig {
    /// The interval between checkpoints these settings give ([`RedbConfig::checkpoint_every`]).
    pub fn checkpoint_interval(&self) -> Duration {
        match self.checkpoint_every {
            Some(every) => every,
            None if self.durability == Durability::Fsync && self.redo_log => CHECKPOINT_EVERY_LOGGED,
            None => CHECKPOINT_EVERY,
        }
    }
}

impl Default for RedbConfig {
    fn default() -> RedbConfig {
        RedbConfig {
            durability: Durability::Fsync,
            cache_bytes: CACHE_BYTES,
            redo_log: true,
            checkpoint_every: None,
            compact_when_quiet: Some(COMPACT_WHEN_QUIET),
        }
    }
}

/// redb's largest value, and largest key and value together (its `MAX_VALUE_LENGTH` and
/// `MAX_PAIR_LENGTH`, not public).
const REDB_MAX_VALUE: usize = 3 << 30;
const REDB_MAX_PAIR: usize = (3 << 30) + (768 << 20);

/// What a write record adds to its value (a tag and the start timestamp), with room to spare.
const WRITE_RECORD_OVERHEAD: usize = 64;

/// Refuses, before they are submitted, ops holding a value redb cannot take: in a round, the
/// check of [`RoundTable::put`] fails the whole round, every caller in it with this caller's
/// error. (Keys are far below redb's pair limit: a row is at most `key::MAX_ROW_LEN` bytes.)
fn refuse_oversized_ops(rows: &[RowMutation], ops: &[Op]) -> Result<()> {
    let too_long = |what: String, len: usize| {
        Error::InvalidArgument(format!(
            "{what}: a value of {len} bytes; the store takes at most {} bytes a value",
            REDB_MAX_VALUE - WRITE_RECORD_OVERHEAD
        ))
    };
    let op_rows = ops.iter().filter_map(|op| match op {
        Op::Row(m) => Some(m),
        _ => None,
    });
    for m in rows.iter().chain(op_rows) {
        for mutation in &m.mutations {
            let (column, len) = match mutation {
                Mutation::PutData { column, value, .. } => (column, value.len()),
                Mutation::PutWrite { column, write: WriteRecord { kind: WriteKind::Put(v), .. }, .. } => {
                    (column, v.len())
                }
                _ => continue,
            };
            if len > REDB_MAX_VALUE - WRITE_RECORD_OVERHEAD {
                return Err(too_long(format!("{}/{}/{column}", m.table, String::from_utf8_lossy(&m.row)), len));
            }
        }
    }
    for op in ops {
        if let Op::MetaPut { key, value } = op
            && value.len() > REDB_MAX_VALUE - WRITE_RECORD_OVERHEAD
        {
            return Err(too_long(format!("metadata key {key:?}"), value.len()));
        }
    }
    Ok(())
}

/// A checkpoint is made this often by default where it is what makes rounds durable
/// (durability none, or no redo log): about the last second is what a crash loses.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// ... and where the redo log makes them durable: the interval then trades memory and the
/// log's length for checkpoint work only (a 3,000-page web-index load, the last checkpoint's
/// work counted: the checkpointer's CPU −25 %, the process's −6 %, pages/s +10 %, against
/// every second; BENCHMARKS.md, "Fifth round").
const CHECKPOINT_EVERY_LOGGED: Duration = Duration::from_secs(5);

/// [`RedbConfig::cache_bytes`]'s default: redb's own, 1 GiB. A cap, not an allocation: a
/// small store's cache holds what it reads and writes. With 256 MiB, the checkpoints of a
/// 30,000-page web-index load (a 2 GB file) overflowed the write buffer and wrote 3.5 GB to
/// redb's file up to the fixed point; with 1 GiB, 2.4–2.6 GB (BENCHMARKS.md, "Twentieth
/// round").
const CACHE_BYTES: usize = 1 << 30;

/// [`RedbConfig::compact_when_quiet`]'s default.
const COMPACT_WHEN_QUIET: Duration = Duration::from_secs(30);
/// The store is quiet while at most this many operations are applied per checkpoint interval
/// (a host's lease and oracle writes are a few). Reads do not count: none waits for the copy.
const QUIET_OPS: u64 = 64;
/// The free pages that make a compaction worth its copy: at least this many bytes...
const COMPACT_MIN_FREE: u64 = 16 << 20;
/// ...and at least this fraction of the file (1/4: a file over 4/3 of its pages).
const COMPACT_MIN_FREE_PART: u64 = 4;
/// The room a compaction leaves on the disk beyond its copy of the file's content (for the
/// redo log of the rounds meanwhile, and everything else on the disk).
const COMPACT_DISK_MARGIN: u64 = 256 << 20;
/// A compaction's copy closes its cursor (applies the run it buffers in memory) and asks
/// whether to go on after this many bytes of keys and values...
const COMPACT_RUN_BYTES: usize = 8 << 20;
/// ...and commits (not durably: the last commit of the copy is) after this many.
const COMPACT_TXN_BYTES: usize = 128 << 20;
/// A checkpoint is made at once when the memtable holds this many bytes.
const CHECKPOINT_BYTES: usize = 64 << 20;
/// A round waits for a checkpoint that is being written when the memtable holds this many.
const MEMTABLE_MAX_BYTES: usize = 2 * CHECKPOINT_BYTES;

/// One caller's share of a group commit.
enum Batch {
    /// Independent ops, each with its own outcome.
    Ops(Vec<Op>),
    /// An atomic group ([`Bigtable::apply_atomic`]): all rows or none.
    Atomic(Vec<RowMutation>),
    /// An atomic group, then independent ops only if it applied
    /// ([`Bigtable::apply_atomic_then`]).
    AtomicThen(Vec<RowMutation>, Vec<Op>),
}

enum Done {
    Ops(Vec<Outcome>),
    Atomic(AtomicOutcome),
    AtomicThen(AtomicOutcome, Option<Vec<Outcome>>),
}

impl Work for Batch {
    fn weight(&self) -> usize {
        match self {
            Batch::Ops(ops) => ops.len(),
            Batch::Atomic(rows) => rows.len(),
            Batch::AtomicThen(rows, ops) => rows.len() + ops.len(),
        }
    }
}

/// [`Bigtable`] over one redb file.
pub struct RedbBigtable {
    shared: Arc<Shared>,
}

/// What the backend, its checkpointer and its prober share.
struct Shared {
    /// The open database: shared to write a checkpoint or take space figures, exclusive only
    /// to reopen the file after an I/O error. `None` while a reopen failed.
    db: RwLock<Option<Database>>,
    /// What readers read: the memtable over redb's last checkpoint. Always taken after `db`
    /// when both are held.
    layers: RwLock<Layers>,
    /// The file (for its size, for reopening, for errors).
    path: PathBuf,
    config: RedbConfig,
    group: GroupCommit<Batch, Done>,
    commits: AtomicU64,
    ops: AtomicU64,
    /// True while `health` holds a failure: writes are refused without touching the layers
    /// (read on every group commit, so an atomic rather than the mutex).
    failing: AtomicBool,
    /// The failure that stops writes, and the threads.
    health: Mutex<Health>,
    /// Wakes the prober early (the backend is dropped).
    wake_prober: Condvar,
    /// Wakes the checkpointer early (the memtable is large, or the backend is dropped).
    wake_checkpointer: Condvar,
    /// Wakes a round waiting for room in the memtable (a checkpoint ended).
    room: Condvar,
    /// Held while a checkpoint is made or the file reopened: one at a time.
    checkpointing: Mutex<()>,
    /// Times the file was reopened after a failure ([`Bigtable::reopens`]).
    reopens: AtomicU64,
    /// The redo log, when rounds are made durable by it ([`RedbConfig::redo_log`] at
    /// [`Durability::Fsync`]). Held by a round's leader for the whole round (so a checkpoint's
    /// freeze, which holds it too, falls between two rounds).
    redo: Mutex<Option<RedoLog>>,
    /// Rounds made durable by the log, and checkpoints ([`BackendStats`]).
    log_syncs: AtomicU64,
    checkpoints: AtomicU64,
    /// Compactions of the open file ([`RedbConfig::compact_when_quiet`]), and those given up.
    compactions: AtomicU64,
    compactions_given_up: AtomicU64,
    /// Syncs of the file by its [`PacedFile`] ([`BackendStats::paced_syncs`]).
    paced_syncs: Arc<AtomicU64>,
    /// A compaction renamed its copy into the file's place, and the directory was not synced
    /// after: the next checkpoint syncs it before it writes into the file.
    dir_sync_pending: AtomicBool,
}

/// The published state (`docs/design.md`, "A memtable in front of redb", 1.): `active` over
/// `frozen` over `base`, the newest layer holding a key saying its value.
struct Layers {
    /// Rounds published since the last freeze.
    active: Mem,
    /// Rounds frozen for the checkpoint being written (or failed).
    frozen: Option<Arc<Mem>>,
    /// The seq of the last round logged in `frozen` (`redo/applied` once it is in redb).
    frozen_seq: u64,
    /// redb's last checkpoint, shared by every reader; `None` while the file is not open.
    base: Option<Base>,
}

impl Layers {
    /// `table` as readers see it: `round` (a round's own changes, for its leader) over the
    /// memtable over the base.
    fn view<'a>(&'a self, table: Table, round: Option<&'a Map>) -> Option<Layered<'a>> {
        let base = self.base.as_ref()?;
        let frozen = self.frozen.as_deref();
        let filters = match table {
            Table::Cells => [None, self.active.cell_filter(), frozen.and_then(Mem::cell_filter)],
            _ => [None; 3],
        };
        Some(Layered {
            layers: [round, Some(self.active.table(table)), frozen.map(|f| f.table(table))],
            filters,
            base: &base.tables[table as usize],
        })
    }
}

/// One redb read transaction's three tables; the cells table with what it cannot hold.
struct Base {
    tables: [BaseTable; 3],
    /// The cells' facts are not known yet: the next checkpoint scans its new base for them.
    scan_next: bool,
}

/// A table of the base, and for the cells table the facts of `base_hints.rs` (`None`: not
/// known, every read goes to redb).
struct BaseTable {
    r: R,
    hints: Option<BaseHints>,
}

impl Base {
    /// The file's last commit as the readers' base, with the facts its caller knows of it (a
    /// checkpoint's: the old base's noted with what it wrote; a reopen's: widened), or none yet
    /// (`scan_next`: at open, so that opening a store costs no scan of it).
    fn open(db: &Database, hints: Option<BaseHints>, scan_next: bool) -> Result<Base> {
        let tx = db.begin_read()?;
        let tables = [
            BaseTable { r: R(tx.open_table(CELLS)?), hints },
            BaseTable { r: R(tx.open_table(NOTIFY)?), hints: None },
            BaseTable { r: R(tx.open_table(META)?), hints: None },
        ];
        Ok(Base { tables, scan_next })
    }

    /// The file's last commit as the readers' base, with the facts of one scan of its cells
    /// (the first checkpoint after the open makes it, on its own thread; the facts are kept in
    /// memory only, so none can be stale). A scan that gives up leaves none, for good.
    fn scanned(db: &Database) -> Result<Base> {
        let mut base = Base::open(db, None, false)?;
        let cells = &mut base.tables[Table::Cells as usize];
        cells.hints = BaseHints::scan(&cells.r)?;
        Ok(base)
    }

    /// The base at open: its facts scanned now if its cells table is small (redb knows the
    /// count without reading it), else by the first checkpoint.
    fn at_open(db: &Database) -> Result<Base> {
        let small = {
            let tx = db.begin_read()?;
            let cells = tx.open_table(CELLS)?;
            redb::ReadableTableMetadata::len(&cells)? <= SCAN_AT_OPEN_MAX
        };
        if small { Base::scanned(db) } else { Base::open(db, None, true) }
    }

    fn hints(&self) -> Option<&BaseHints> {
        self.tables[Table::Cells as usize].hints.as_ref()
    }
}

/// The most cells keys an open scans for the facts (`base_hints.rs`) itself, in ≈ 0.1 s; a
/// larger store gets them from its first checkpoint.
const SCAN_AT_OPEN_MAX: u64 = 100_000;

impl KvRead for BaseTable {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.r.get(key)
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        self.r.for_range(from, to, f)
    }
    fn may_hold(&self, from: &[u8], to: Option<&[u8]>) -> bool {
        self.hints.as_ref().is_none_or(|h| h.may_hold(from, to))
    }
    fn may_hold_key(&self, key: &[u8]) -> bool {
        self.hints.as_ref().is_none_or(|h| h.may_hold_key(key))
    }
}

/// The checkpointer's measure of a quiet store: how long at most [`QUIET_OPS`] operations were
/// applied between two of its ticks, and when in such a spell a compaction is tried: once it
/// has lasted `after`, and again after a back-off if that one was given up.
struct Quiet {
    /// Operations applied at the last tick.
    seen: u64,
    since: Instant,
    /// How long into the spell the next compaction is tried; `None`: not in this spell.
    next: Option<Duration>,
    /// Compactions given up in a row: the back-off is `after` times 2 to this power (at most
    /// [`QUIET_MAX_BACKOFF`]).
    given_up: u32,
}

/// The longest back-off after compactions given up in a row: `after` times 2 to this power.
const QUIET_MAX_BACKOFF: u32 = 6;

/// What a compaction when quiet came to, for [`Quiet::tried`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compaction {
    /// Compacted, or not worth it (or no room on the disk): not again in this spell.
    Done,
    /// Given up, or its copy failed: tried again after a back-off.
    GivenUp,
}

impl Quiet {
    /// The first spell, from `now`: a compaction is tried once it has lasted `after`.
    fn new(seen: u64, after: Duration, now: Instant) -> Quiet {
        Quiet { seen, since: now, next: Some(after), given_up: 0 }
    }

    /// A tick at `now` with `ops` applied so far: true when a compaction is to be tried, once
    /// the spell has lasted `after` (or its back-off, [`Quiet::tried`]).
    fn tick(&mut self, ops: u64, after: Duration, now: Instant) -> bool {
        if ops.saturating_sub(self.seen) > QUIET_OPS {
            self.since = now;
            self.next = Some(after);
        }
        self.seen = ops;
        match self.next {
            Some(at) if now.saturating_duration_since(self.since) >= at => {
                self.next = None;
                true
            }
            _ => false,
        }
    }

    /// What the compaction [`Quiet::tick`] asked for at `now` came to.
    fn tried(&mut self, outcome: Compaction, after: Duration, now: Instant) {
        match outcome {
            Compaction::Done => self.given_up = 0,
            Compaction::GivenUp => {
                self.given_up = (self.given_up + 1).min(QUIET_MAX_BACKOFF);
                let backoff = after.saturating_mul(1 << self.given_up);
                self.next = Some(now.saturating_duration_since(self.since).saturating_add(backoff));
            }
        }
    }
}

#[derive(Default)]
struct Health {
    failure: Option<StorageFailure>,
    /// The prober thread, while one runs (or ran: joined before the next is started).
    prober: Option<std::thread::JoinHandle<()>>,
    /// The checkpointer thread.
    checkpointer: Option<std::thread::JoinHandle<()>>,
    /// A round found the memtable large: checkpoint now.
    checkpoint_now: bool,
    /// The backend is being dropped: the threads stop.
    stopping: bool,
}

/// The prober's first wait after a failure, doubled after each failed probe up to
/// [`PROBE_MAX`].
const PROBE_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two probes: how long writes stay refused after space was freed.
const PROBE_MAX: Duration = Duration::from_secs(2);
/// The metadata key the prober writes, and removes again.
const PROBE_KEY: &str = "backend/probe";

/// A checkpoint puts a run of keys through one cursor when it is at least this long...
const CURSOR_RUN_MIN: usize = 8;
/// ...and after a shorter one (or a key redb already holds) puts this many keys one by one
/// before it tries a cursor again.
const CURSOR_BACKOFF: usize = 128;

/// Writes one table's layer (in key order; tombstones remove) into a checkpoint's write
/// transaction, telling `note` each key and whether it is put.
///
/// A put opens a cursor at its key's place and the keys after it that fall in the same gap
/// between redb's keys go in through that cursor: redb buffers them and splices them into the
/// leaves at once, instead of descending the tree for each key. That pays from runs of about
/// four keys on (a fresh store's first checkpoints are one long run; new rows are long runs) and
/// costs up to three times an insert for a run of one (a new version of a cell that already
/// has versions): after a run shorter than [`CURSOR_RUN_MIN`], the next [`CURSOR_BACKOFF`] puts
/// are plain inserts (BENCHMARKS.md, "Tenth round").
fn write_layer(
    t: &mut redb::Table<'_, &'static [u8], &'static [u8]>,
    layer: &Map,
    mut note: impl FnMut(&[u8], bool),
) -> Result<()> {
    // Whether the cursor took the key (false: not strictly between the gap's neighbours).
    fn put_in_gap(
        cursor: &mut redb::CursorMut<'_, &'static [u8], &'static [u8]>,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool> {
        match cursor.insert_before(key, value) {
            Ok(()) => Ok(true),
            Err(redb::CursorError::UnorderedKey) => Ok(false),
            Err(e) => Err(redb::Error::from(e).into()),
        }
    }
    let mut plain = 0;
    let mut entries = layer.iter().peekable();
    while let Some((key, value)) = entries.next() {
        note(key, value.is_some());
        let Some(value) = value else {
            t.remove(key.as_slice())?;
            continue;
        };
        if plain > 0 {
            plain -= 1;
            t.insert(key.as_slice(), value.as_slice())?;
            continue;
        }
        let mut cursor = t.lower_bound_mut(Bound::Included(key.as_slice()))?;
        if !put_in_gap(&mut cursor, key, value)? {
            // redb holds the key already (a cursor only inserts).
            cursor.close()?;
            t.insert(key.as_slice(), value.as_slice())?;
            plain = CURSOR_BACKOFF;
            continue;
        }
        let mut run = 1;
        while let Some((key, Some(value))) = entries.peek() {
            if !put_in_gap(&mut cursor, key, value)? {
                break;
            }
            note(key, true);
            run += 1;
            entries.next();
        }
        cursor.close()?;
        if run < CURSOR_RUN_MIN {
            plain = CURSOR_BACKOFF;
        }
    }
    Ok(())
}

/// How a compaction's copy failed: on the open file (an error of the store, as a failed
/// checkpoint's), or in the copy (which is removed; the store goes on as it was); or why it
/// was given up (the store is not quiet any more, [`Shared::copy_wanted`]).
enum Copy {
    Live(Error),
    Copying(Error),
    GivenUp,
}

/// redb's own compaction of `db`, the file at `path`: it moves the pages in use to the file's
/// start and gives back the rest. Step by step until redb reports nothing more to move
/// (bounded, in case a version of redb kept reporting progress), asking `goes_on` after each
/// step; returns false if that stopped it.
fn compact_in_place(db: &mut Database, path: &Path, mut goes_on: impl FnMut() -> Result<bool>) -> Result<bool> {
    for _ in 0..16 {
        let moved = db.compact().map_err(|e| Error::Storage(format!("compacting {}: {e}", path.display())))?;
        if !goes_on()? {
            return Ok(false);
        }
        if !moved {
            break;
        }
    }
    Ok(true)
}

/// Where a compaction when quiet writes its copy of the store file at `path`: beside it, on the
/// same file system (so that a rename puts it in the file's place).
fn compacting_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".compacting");
    PathBuf::from(name)
}

/// Removes the copy a compaction left beside the store file at `path` (given up, failed, or cut
/// short by a crash), if there is one.
fn remove_copy_of(path: &Path) -> Result<()> {
    let copy = compacting_path(path);
    match std::fs::remove_file(&copy) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(&copy, &e)),
        _ => Ok(()),
    }
}

/// The bytes an unprivileged writer may still take on the file system holding `path`.
#[allow(unsafe_code)]
fn free_disk_bytes(path: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("{}: a path with a NUL byte", path.display())))?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` room for one `statvfs`, which the call fills
    // when it returns 0.
    if unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(Error::io(path, &std::io::Error::last_os_error()));
    }
    // SAFETY: filled by the successful call above.
    let st = unsafe { st.assume_init() };
    // The fields are narrower than u64 on some platforms.
    #[allow(clippy::useless_conversion)]
    Ok(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

/// The size of the prober's value: a probe must find room for more than a page or two, or the
/// free pages a failed commit left in the file would let it succeed on a full disk (and the
/// next real write fail again).
const PROBE_BYTES: usize = 1 << 20;

/// Opens (or creates) the file at `path` through a [`PacedFile`], whose syncs are counted in
/// `paced_syncs`.
fn open_database(path: &Path, cache_bytes: usize, paced_syncs: &Arc<AtomicU64>) -> Result<Database> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| Error::io(path, &e))?;
    PacedFile::new(file, SYNC_STEP, Arc::clone(paced_syncs))
        .and_then(|file| Database::builder().set_cache_size(cache_bytes).create_with_backend(file))
        .map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_owned() },
            redb::DatabaseError::Storage(redb::StorageError::Io(e)) => Error::io(path, &e),
            e => Error::Storage(format!("opening {}: {e}", path.display())),
        })
}

/// Replays the redo log of the store at `path` into `db` at open: the records after
/// `redo/applied`, in order, in one durable write transaction that also moves `redo/applied`
/// to the last of them (the open's checkpoint); then the log is emptied. Returns the log if
/// this store keeps one (`logging`); otherwise a log left by an earlier configuration is
/// replayed and removed.
fn recover(db: &Database, path: &Path, logging: bool) -> Result<Option<RedoLog>> {
    if !logging && !redo::exists(path) {
        return Ok(None);
    }
    let (applied, store_id) = {
        let tx = db.begin_read()?;
        let meta = tx.open_table(META)?;
        let number = |key: &str| -> Result<Option<u64>> {
            let value = meta.get(key.as_bytes())?;
            match value.as_ref().map(|v| <[u8; 8]>::try_from(v.value())) {
                None => Ok(None),
                Some(Ok(n)) => Ok(Some(u64::from_be_bytes(n))),
                Some(Err(_)) => Err(Error::Storage(format!("{}: meta {key} is not an 8-byte number", path.display()))),
            }
        };
        let store_id = number(redo::STORE_ID_KEY)?
            .ok_or_else(|| Error::Storage(format!("{}: meta {} is missing", path.display(), redo::STORE_ID_KEY)))?;
        (number(redo::APPLIED_KEY)?.unwrap_or(0), store_id)
    };
    let (mut log, records) = RedoLog::open(path, applied, store_id)?;
    if !records.is_empty() || !log.is_empty() {
        let tx = db.begin_write()?;
        {
            let mut tables = [tx.open_table(CELLS)?, tx.open_table(NOTIFY)?, tx.open_table(META)?];
            for record in &records {
                let changes = redo::decode(&record.changes).ok_or_else(|| {
                    Error::Storage(format!("{}: record {} does not decode", redo::path_of(path).display(), record.seq))
                })?;
                for change in changes {
                    match change {
                        redo::Change::Put(t, key, value) => {
                            tables[t as usize].insert(key, value)?;
                        }
                        redo::Change::Delete(t, key) => {
                            tables[t as usize].remove(key)?;
                        }
                    }
                }
            }
            tables[Table::Meta as usize]
                .insert(redo::APPLIED_KEY.as_bytes(), log.last_seq().to_be_bytes().as_slice())?;
        }
        tx.commit()?;
        if !records.is_empty() {
            tracing::info!(
                records = records.len(),
                last = log.last_seq(),
                "replayed the redo log: rounds acknowledged after the last checkpoint"
            );
        }
        log.checkpointed()?;
    }
    if logging {
        Ok(Some(log))
    } else {
        log.remove();
        Ok(None)
    }
}

impl RedbBigtable {
    /// Opens or creates the store file at `path`. Fails with [`Error::AlreadyOpen`] if another
    /// process, or another handle in this process, has the file open.
    pub fn open(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbBigtable> {
        let path = path.as_ref();
        let paced_syncs = Arc::new(AtomicU64::new(0));
        let db = open_database(path, config.cache_bytes, &paced_syncs)?;
        // A compaction's copy that a crash cut short (this handle holds the file's lock now, so
        // no other compacts it).
        remove_copy_of(path)?;
        let created = || -> Result<()> {
            let tx = db.begin_write()?;
            tx.open_table(CELLS)?;
            tx.open_table(NOTIFY)?;
            {
                // The store file's id, which its redo log's header repeats.
                let mut meta = tx.open_table(META)?;
                if meta.get(redo::STORE_ID_KEY.as_bytes())?.is_none() {
                    meta.insert(redo::STORE_ID_KEY.as_bytes(), rand::random::<u64>().to_be_bytes().as_slice())?;
                }
            }
            tx.commit()?;
            Ok(())
        };
        let located = |e| match e {
            Error::Io { message, disk_full, .. } => Error::Io { path: path.to_owned(), message, disk_full },
            e => e,
        };
        created().map_err(located)?;
        let logging = config.durability == Durability::Fsync && config.redo_log;
        let redo = recover(&db, path, logging).map_err(located)?;
        let base = Base::at_open(&db).map_err(located)?;
        // A round shares an fsync only at durability fsync; at durability none it costs little
        // more than its ops, and waiting for more callers only delays them (`docs/design.md`,
        // "Gathering only where a round shares an fsync").
        let gather = config.durability == Durability::Fsync;
        let backend = RedbBigtable {
            shared: Arc::new(Shared {
                db: RwLock::new(Some(db)),
                layers: RwLock::new(Layers { active: Mem::filtered(), frozen: None, frozen_seq: 0, base: Some(base) }),
                path: path.to_owned(),
                config,
                group: GroupCommit::new(gather),
                commits: AtomicU64::new(0),
                ops: AtomicU64::new(0),
                failing: AtomicBool::new(false),
                health: Mutex::new(Health::default()),
                wake_prober: Condvar::new(),
                wake_checkpointer: Condvar::new(),
                room: Condvar::new(),
                checkpointing: Mutex::new(()),
                reopens: AtomicU64::new(0),
                redo: Mutex::new(redo),
                log_syncs: AtomicU64::new(0),
                checkpoints: AtomicU64::new(0),
                compactions: AtomicU64::new(0),
                compactions_given_up: AtomicU64::new(0),
                paced_syncs,
                dir_sync_pending: AtomicBool::new(false),
            }),
        };
        let shared = backend.shared.clone();
        let checkpointer = std::thread::Builder::new()
            .name("redb-checkpointer".into())
            .spawn(move || shared.checkpoint_every_so_often())
            .map_err(|e| Error::Storage(format!("starting the store's checkpointer thread: {e}")))?;
        backend.shared.health.lock().unwrap_or_else(PoisonError::into_inner).checkpointer = Some(checkpointer);
        Ok(backend)
    }

    /// Compacts the store file at `path`, offline. Opens it as a store (which replays a redo
    /// log and holds the file's lock), then copies its content into a new file beside it that
    /// takes its place, as a compaction when quiet does (`docs/design.md`, "GC"): each table in
    /// key order, its leaves full, and compacted in place by redb before it takes the file's
    /// place (the unwritten tail of its last region given back). If the disk has no room for
    /// the copy, or the copy is no smaller, redb compacts the file in place instead, moving the
    /// pages in use to its start (leaves as full as they were).
    /// Fails with [`Error::AlreadyOpen`] if another process or handle has the file open, with
    /// [`Error::NotFound`] if there is no file (none is created), and with
    /// [`Error::InvalidArgument`] for an empty one. Returns the file's size before and after.
    /// Old versions must be collected first to free their pages
    /// ([`Store::compact`](crate::Store::compact) does both).
    ///
    /// # After a failure
    /// The file is whole: the copy takes its place by a rename once it is durable (a copy cut
    /// short is removed by the next open), and redb compacts in place in durable steps.
    pub fn compact(path: impl AsRef<Path>) -> Result<(u64, u64)> {
        let path = path.as_ref();
        let size = || -> Result<u64> { Ok(std::fs::metadata(path)?.len()) };
        if !path.is_file() {
            return Err(Error::NotFound(format!("no store file at {}", path.display())));
        }
        let before = size()?;
        if before == 0 {
            // redb would make a new store of it.
            return Err(Error::InvalidArgument(format!("{} is empty: not a store file", path.display())));
        }
        {
            // Rounds after the last checkpoint, only in the log, are written into the file
            // first; the clean close at the end removes the log.
            let config = RedbConfig { compact_when_quiet: None, ..RedbConfig::default() };
            let store = RedbBigtable::open(path, config)?;
            store.shared.checkpoint_all()?;
            store.shared.compact_if_worth_it(true)?;
            if store.shared.compactions.load(Ordering::Relaxed) != 0 {
                // The copy, already compacted in place, took the file's place.
                drop(store);
                return Ok((before, size()?));
            }
        }
        // No copy (no room for it on the disk, or it was no smaller): in place only.
        let mut db = Database::builder().open(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_owned() },
            e => Error::Storage(format!("opening {}: {e}", path.display())),
        })?;
        compact_in_place(&mut db, path, || Ok(true))?;
        drop(db);
        Ok((before, size()?))
    }

    /// Writes every round published so far into redb now, in durable checkpoints (what the
    /// checkpointer does on its clock, and a clean close at the end): for benchmarks that
    /// must count the work a checkpoint interval would otherwise leave for later, and for
    /// tools. Fails as the checkpoint fails (then the store is failing, as after any failed
    /// checkpoint).
    pub fn checkpoint(&self) -> Result<()> {
        self.shared.checkpoint_all()
    }

    /// How the store file's space is used now: the file's size, the pages redb has allocated
    /// (live data, old versions GC has not collected yet, B-tree overhead), and of those the
    /// bytes of keys and values. The file grows in large steps and never shrinks while open, so
    /// its size alone says little about what the store holds. Checkpoints the memtable first
    /// (so the figures cover every round published), then walks every B-tree inside a write
    /// transaction: for benchmarks and diagnostics, not for a hot path.
    pub fn space(&self) -> Result<Space> {
        let shared = &self.shared;
        shared.checkpoint_all()?;
        let db = shared.db.read().unwrap_or_else(PoisonError::into_inner);
        let Some(db) = db.as_ref() else {
            return Err(shared
                .failure_error()
                .unwrap_or_else(|| Error::Storage("the store's file is not open".into())));
        };
        let stats = || -> Result<redb::DatabaseStats> {
            let tx = db.begin_write()?;
            let stats = tx.stats()?;
            tx.abort()?;
            Ok(stats)
        };
        let stats = stats().map_err(|e| shared.located(e))?;
        let meta = std::fs::metadata(&shared.path).map_err(|e| shared.located(e.into()))?;
        Ok(Space {
            file_bytes: meta.len(),
            // `st_blocks` counts 512-byte units whatever the file system's block size.
            disk_bytes: meta.blocks() * 512,
            allocated_bytes: stats.allocated_pages() * stats.page_size() as u64,
            stored_bytes: stats.stored_bytes(),
        })
    }
}

/// [`RedbBigtable::space`]: how the store file's bytes are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Space {
    /// The file's size.
    pub file_bytes: u64,
    /// What the file takes on disk: redb grows the file with `set_len`, which allocates no
    /// blocks, so the part of a growth step never written takes none (pages written once and
    /// freed later keep theirs).
    pub disk_bytes: u64,
    /// Pages in use (data, branches, metadata, not yet reusable pages of recent commits).
    pub allocated_bytes: u64,
    /// Keys and values in the B-trees' leaves.
    pub stored_bytes: u64,
}

impl Shared {
    /// The recorded failure, as the error every refused operation answers.
    fn failure_error(&self) -> Option<Error> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner).failure.as_ref().map(|f| f.error.clone())
    }

    /// Gives an error met on this file its path, and records an I/O error as the failure that
    /// stops writes (the first one: later ones are answered with it). Any other error met
    /// while writes are refused is most likely redb's "previous I/O error": answered with the
    /// recorded failure, which names the cause.
    fn located(self: &Arc<Self>, e: Error) -> Error {
        match e {
            // redb's latch: the cause was met by another caller, who records it (if it is not
            // recorded yet, this one says only that the file stopped).
            e if e.is_latched() => self.failure_error().unwrap_or(Error::Io {
                path: self.path.clone(),
                message: LATCHED.into(),
                disk_full: false,
            }),
            Error::Io { path, message, disk_full } => {
                // redb's errors name no file: this one; the redo log's name theirs.
                let path = if path.as_os_str().is_empty() { self.path.clone() } else { path };
                self.fail(Error::Io { path, message, disk_full })
            }
            Error::Storage(_) if self.failing.load(Ordering::Acquire) => self.failure_error().unwrap_or(e),
            e => e,
        }
    }

    /// Records `e` as the failure that stops writes unless one is recorded already, starts the
    /// prober, and returns the recorded failure.
    fn fail(self: &Arc<Self>, e: Error) -> Error {
        let mut h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = &h.failure {
            return f.error.clone();
        }
        tracing::warn!(
            error = %e,
            "the store's file failed: writes are refused until one succeeds again; reopening it and retrying"
        );
        // What was published since the last checkpoint is in memory, and a reopen keeps it:
        // the prober can always reopen.
        h.failure = Some(StorageFailure { error: e.clone(), since: SystemTime::now(), probes: 0 });
        self.failing.store(true, Ordering::Release);
        if !h.stopping {
            if let Some(done) = h.prober.take() {
                // The previous prober cleared its failure and is ending (or has ended).
                let _ = done.join();
            }
            let shared = self.clone();
            match std::thread::Builder::new().name("redb-prober".into()).spawn(move || shared.probe_until_writable()) {
                Ok(handle) => h.prober = Some(handle),
                Err(spawn) => tracing::error!(error = %spawn, "cannot start the store's prober thread"),
            }
        }
        e
    }

    /// The prober: reopens the file (redb refuses everything after an I/O error), waits, then
    /// tries the log's repair, a durable write of 1 MiB and the checkpoint; when all succeed,
    /// the failure is cleared.
    fn probe_until_writable(self: Arc<Self>) {
        let mut wait = PROBE_FIRST;
        loop {
            match self.reopen() {
                Ok(()) => tracing::debug!("reopened the store's file after a failed write"),
                Err(e) => tracing::debug!(error = %e, "reopening the store's file failed; trying again"),
            }
            {
                let h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
                let (h, _) = self
                    .wake_prober
                    .wait_timeout_while(h, wait, |h| !h.stopping)
                    .unwrap_or_else(PoisonError::into_inner);
                if h.stopping {
                    return;
                }
            }
            let probed = self.probe();
            let mut h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
            match probed {
                Ok(()) => {
                    if let Some(f) = h.failure.take() {
                        let down = f.since.elapsed().unwrap_or_default();
                        tracing::info!(
                            after_s = down.as_secs_f64(),
                            probes = f.probes + 1,
                            "the store's file takes writes again"
                        );
                    }
                    self.failing.store(false, Ordering::Release);
                    return;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "the store's file still fails writes");
                    if let Some(f) = &mut h.failure {
                        f.probes += 1;
                    }
                    if h.stopping {
                        return;
                    }
                    wait = (wait * 2).min(PROBE_MAX);
                }
            }
        }
    }

    /// The checkpointer: every `checkpoint_every`, or when a round finds the memtable large,
    /// a checkpoint — unless the store is failing (the prober makes it then). Ends when the
    /// backend is dropped.
    fn checkpoint_every_so_often(self: Arc<Self>) {
        let activity = || self.ops.load(Ordering::Relaxed);
        let after = self.config.compact_when_quiet.unwrap_or_default();
        let mut quiet = Quiet::new(activity(), after, Instant::now());
        loop {
            {
                let h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
                let (mut h, _) = self
                    .wake_checkpointer
                    .wait_timeout_while(h, self.config.checkpoint_interval(), |h| !h.stopping && !h.checkpoint_now)
                    .unwrap_or_else(PoisonError::into_inner);
                if h.stopping {
                    return;
                }
                h.checkpoint_now = false;
            }
            if self.failing.load(Ordering::Acquire) {
                continue;
            }
            if let Err(e) = self.checkpoint() {
                // Recorded as the store's failure if it was the file's: the prober takes over.
                tracing::debug!(error = %e, "a checkpoint failed");
                continue;
            }
            if let Some(after) = self.config.compact_when_quiet
                && quiet.tick(activity(), after, Instant::now())
            {
                let outcome = self.compact_if_worth_it(false).unwrap_or_else(|e| {
                    // The store's failure (the prober takes over): tried again in a later spell.
                    tracing::debug!(error = %e, "compacting the store's file failed");
                    Compaction::Done
                });
                quiet.tried(outcome, after, Instant::now());
            }
        }
    }

    /// Compacts the open file if a quarter of it (and at least [`COMPACT_MIN_FREE`]) is free
    /// pages, by copying it (`docs/design.md`, "GC", compaction when quiet): its content, as of
    /// the readers' base, is written in key order into a new file beside it, which then takes
    /// the file's place. Readers and rounds go on meanwhile (no checkpoint is made: what rounds
    /// publish stays in the memtable); they wait only while the two files swap. A copy that
    /// fails or is given up leaves the store as it was ([`Compaction::GivenUp`]: tried again
    /// after a back-off); an error is the open file's own (the store fails). `asked` (offline,
    /// [`RedbBigtable::compact`]): whatever its free pages.
    fn compact_if_worth_it(self: &Arc<Self>, asked: bool) -> Result<Compaction> {
        let _one = self.checkpointing.lock().unwrap_or_else(PoisonError::into_inner);
        let started = Instant::now();
        let (hints, scan_next) = {
            let layers = self.layers.read().unwrap_or_else(PoisonError::into_inner);
            if self.failing.load(Ordering::Acquire) || layers.frozen.is_some() {
                // A failed checkpoint: the prober's.
                return Ok(Compaction::Done);
            }
            match &layers.base {
                Some(b) => (b.hints().cloned(), b.scan_next),
                None => return Ok(Compaction::Done),
            }
        };
        let (new_db, new_base, before, allocated) = match self.copy_file(hints, scan_next, asked) {
            Ok(Some(copied)) => copied,
            Ok(None) => return Ok(Compaction::Done),
            Err(Copy::GivenUp) => {
                self.give_up_copy();
                tracing::info!("gave up compacting the store's file: it is not quiet any more");
                return Ok(Compaction::GivenUp);
            }
            Err(Copy::Live(e)) => {
                // An error of the open file's own (its empty commits, or reading it for the
                // copy): as a failed checkpoint's; a copy begun goes.
                self.remove_copy();
                return Err(match self.located(e) {
                    e if self.failing.load(Ordering::Acquire) => e,
                    e => self.fail(e),
                });
            }
            Err(Copy::Copying(e)) => {
                // redb's I/O errors name no file: the copy's, most likely.
                let e = match e {
                    Error::Io { path, message, disk_full } if path.as_os_str().is_empty() => {
                        Error::Io { path: compacting_path(&self.path), message, disk_full }
                    }
                    e => e,
                };
                self.give_up_copy();
                tracing::warn!(error = %e, "compacting the store's file by a copy failed; the file is as it was");
                return Ok(Compaction::GivenUp);
            }
        };
        let copy = compacting_path(&self.path);
        {
            let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
            let mut layers = self.layers.write().unwrap_or_else(PoisonError::into_inner);
            if self.failing.load(Ordering::Acquire) {
                drop((layers, db, new_base, new_db));
                self.give_up_copy();
                return Ok(Compaction::GivenUp);
            }
            self.dir_sync_pending.store(true, Ordering::SeqCst);
            if let Err(e) = std::fs::rename(&copy, &self.path) {
                self.dir_sync_pending.store(false, Ordering::SeqCst);
                drop((layers, db, new_base, new_db));
                self.give_up_copy();
                tracing::warn!(error = %e, "compacting the store's file: the copy could not take its place; the file is as it was");
                return Ok(Compaction::GivenUp);
            }
            let old_base = layers.base.replace(new_base);
            let old_db = db.replace(new_db);
            drop((layers, db));
            // The old file, unlinked by the rename, goes with its last handle.
            drop((old_base, old_db));
        }
        // Before the next checkpoint writes into the new file and a redo file is emptied, the
        // rename is made durable: a checkpoint syncs the directory itself while this is pending.
        match redo::sync_dir_of(&self.path) {
            Ok(()) => self.dir_sync_pending.store(false, Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(error = %e, "syncing the store's directory after a compaction failed; the next checkpoint tries again")
            }
        }
        let after = std::fs::metadata(&self.path).map(|m| m.len()).unwrap_or(0);
        self.compactions.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            before,
            after,
            allocated,
            ms = started.elapsed().as_millis() as u64,
            "compacted the store's file while the store was quiet"
        );
        Ok(Compaction::Done)
    }

    /// The copy of [`Shared::compact_if_worth_it`], under the checkpoint lock: checks that it is
    /// worth it and that the disk has room for it, then writes the file's content, as of its last
    /// commit (the readers' base: no checkpoint comes meanwhile), into a new file at
    /// [`compacting_path`], each table in key order through one cursor at its end (so that its
    /// leaves are full), and makes that durable. Returns the new database, its base (with the
    /// old base's facts: the same keys), the file's size and the pages it had allocated; `None`
    /// if not worth it (unless `asked`), if the disk has no room for it, or if the copy is no
    /// smaller than the file; [`Copy::GivenUp`] (the caller removes the copy) once a checkpoint is
    /// wanted (the memtable grew), the store fails or the backend is being dropped.
    fn copy_file(
        &self,
        hints: Option<BaseHints>,
        scan_next: bool,
        asked: bool,
    ) -> std::result::Result<Option<(Database, Base, u64, u64)>, Copy> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let Some(database) = db.as_ref() else { return Ok(None) };
        let live = |e: redb::Error| Copy::Live(e.into());
        // The pages the last checkpoint freed are reusable only after a later commit: two
        // empty ones, so that redb's count of allocated pages is what the content takes.
        for _ in 0..2 {
            let mut tx = database.begin_write().map_err(|e| live(e.into()))?;
            tx.set_durability(redb::Durability::Immediate).map_err(|e| live(e.into()))?;
            tx.commit().map_err(|e| live(e.into()))?;
        }
        let file = std::fs::metadata(&self.path).map_err(|e| Copy::Live(e.into()))?;
        let before = file.len();
        let allocated = {
            let tx = database.begin_write().map_err(|e| live(e.into()))?;
            let stats = tx.stats().map_err(|e| live(e.into()))?;
            tx.abort().map_err(|e| live(e.into()))?;
            stats.allocated_pages() * stats.page_size() as u64
        };
        let free = before.saturating_sub(allocated);
        if !asked && (free < COMPACT_MIN_FREE || free < before / COMPACT_MIN_FREE_PART) {
            return Ok(None);
        }
        // The copy takes at most what the content takes now; rounds keep room for their log.
        match free_disk_bytes(&self.path) {
            Ok(room) if room < allocated.saturating_add(COMPACT_DISK_MARGIN) => {
                tracing::info!(
                    room,
                    allocated,
                    "not compacting the store's file: the disk has no room for a copy of its content"
                );
                return Ok(None);
            }
            Ok(_) => {}
            Err(e) => return Err(Copy::Copying(e)),
        }
        // Prints, or fails the copy (tests).
        fail::fail_point!("redb-compact-start", |_| Err(Copy::Copying(Error::Storage(
            "failpoint redb-compact-start".into()
        ))));
        let copying = |e: Error| Copy::Copying(e);
        let path = compacting_path(&self.path);
        self.remove_copy();
        let new = open_database(&path, self.config.cache_bytes, &self.paced_syncs).map_err(copying)?;
        // The copy takes the file's place: with its permissions (its owner is this process's).
        std::fs::set_permissions(&path, file.permissions()).map_err(|e| copying(Error::io(&path, &e)))?;
        let snapshot = database.begin_read().map_err(|e| live(e.into()))?;
        for table in Table::ALL {
            let def = TABLES[table as usize];
            let from = snapshot.open_table(def).map_err(|e| live(e.into()))?;
            if !self.copy_table(&from, &new, def).map_err(copying)? {
                return Err(Copy::GivenUp);
            }
            // The same content: as many keys (redb counts them).
            let had = from.len().map_err(|e| live(e.into()))?;
            let has = || -> std::result::Result<u64, redb::Error> { Ok(new.begin_read()?.open_table(def)?.len()?) };
            let has = has().map_err(|e| copying(e.into()))?;
            if had != has {
                return Err(copying(Error::Storage(format!(
                    "the copy of {} holds {has} keys of table {table:?}, the file {had}",
                    path.display()
                ))));
            }
        }
        // The copied transactions were not durable; this one makes them so.
        let durable = || -> std::result::Result<(), redb::Error> {
            let mut tx = new.begin_write()?;
            tx.set_durability(redb::Durability::Immediate)?;
            tx.commit()?;
            Ok(())
        };
        durable().map_err(|e| copying(e.into()))?;
        // redb's own compaction of the copy, which nobody else has open yet: it gives back the
        // unwritten tail of the last region the new file grew by (the leaves are full already).
        // At 30,000 pages: 0.68 of the batch tables instead of 0.80 (BENCHMARKS.md).
        let mut new = new;
        if !compact_in_place(&mut new, &path, || self.copy_goes_on()).map_err(copying)? {
            return Err(Copy::GivenUp);
        }
        // A file with few free pages (a compaction asked for) may not be made smaller by its
        // copy: kept then.
        let copied = std::fs::metadata(&path).map_err(|e| copying(Error::io(&path, &e)))?.len();
        if copied >= before {
            drop(new);
            self.remove_copy();
            return Ok(None);
        }
        let base = Base::open(&new, hints, scan_next).map_err(copying)?;
        Ok(Some((new, base, before, allocated)))
    }

    /// Copies one table of the file into `new`, in transactions of [`COMPACT_TXN_BYTES`] that
    /// are not durable, inserting at the end through a cursor closed every
    /// [`COMPACT_RUN_BYTES`] and at the end of each transaction (its run is buffered in memory
    /// until then). Returns false if the copy is to be given up ([`Shared::copy_goes_on`]),
    /// which it asks after each run.
    fn copy_table(
        &self,
        from: &redb::ReadOnlyTable<&'static [u8], &'static [u8]>,
        new: &Database,
        def: TableDefinition<&'static [u8], &'static [u8]>,
    ) -> Result<bool> {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let mut tx = new.begin_write()?;
            tx.set_durability(redb::Durability::None)?;
            let mut done = true;
            {
                let mut into = tx.open_table(def)?;
                let entries = match &after {
                    None => from.range::<&[u8]>(..)?,
                    Some(last) => from.range::<&[u8]>((Bound::Excluded(last.as_slice()), Bound::Unbounded))?,
                };
                let (mut run, mut txn) = (0usize, 0usize);
                let mut cursor = into.upper_bound_mut(Bound::<&[u8]>::Unbounded)?;
                for entry in entries {
                    let (k, v) = entry?;
                    cursor.insert_before(k.value(), v.value()).map_err(redb::Error::from)?;
                    let bytes = k.value().len() + v.value().len();
                    (run, txn) = (run + bytes, txn + bytes);
                    if run >= COMPACT_RUN_BYTES {
                        cursor.close()?;
                        if !self.copy_goes_on()? {
                            return Ok(false);
                        }
                        run = 0;
                        cursor = into.upper_bound_mut(Bound::<&[u8]>::Unbounded)?;
                    }
                    if txn >= COMPACT_TXN_BYTES {
                        after = Some(k.value().to_vec());
                        done = false;
                        break;
                    }
                }
                cursor.close()?;
                if !self.copy_goes_on()? {
                    return Ok(false);
                }
            }
            tx.commit()?;
            if done {
                return Ok(true);
            }
        }
    }

    /// After each run a copy applied: whether the copy goes on ([`Shared::copy_wanted`]). The
    /// failpoint `redb-compact-copying` pauses the copy here, or fails it (tests).
    fn copy_goes_on(&self) -> Result<bool> {
        fail::fail_point!("redb-compact-copying", |_| Err(Error::Storage("failpoint redb-compact-copying".into())));
        Ok(self.copy_wanted())
    }

    /// Whether a copy of the file goes on: not once a checkpoint is wanted (the memtable, which
    /// the copy's checkpoint lock keeps from being written, reached [`CHECKPOINT_BYTES`]: the
    /// store is not quiet), the store fails, or the backend is being dropped.
    ///
    /// Without a redo log (durability none), a round is durable only once a checkpoint wrote it:
    /// the copy gives up as soon as one is published, so that what a crash loses stays what
    /// the checkpoint interval bounds (and a round that checkpoints itself waits one run at most).
    fn copy_wanted(&self) -> bool {
        {
            let h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
            if h.stopping || h.checkpoint_now || self.failing.load(Ordering::Acquire) {
                return false;
            }
        }
        let logged = self.config.durability == Durability::Fsync && self.config.redo_log;
        logged || self.layers.read().unwrap_or_else(PoisonError::into_inner).active.is_empty()
    }

    /// Removes a copy of the file left by a compaction, if there is one (a failure is logged:
    /// the next compaction or open removes it).
    fn remove_copy(&self) {
        if let Err(e) = remove_copy_of(&self.path) {
            tracing::warn!(error = %e, "removing a copy of the store's file failed");
        }
    }

    /// A compaction given up, the file as it was: its copy removed, and counted.
    fn give_up_copy(&self) {
        self.remove_copy();
        self.compactions_given_up.fetch_add(1, Ordering::Relaxed);
    }

    /// One checkpoint (`docs/design.md`, "A memtable in front of redb", 3.): freezes the
    /// memtable (unless a frozen one is still there: a checkpoint that failed), writes it to
    /// redb in one durable transaction with `redo/applied`, makes that commit the readers'
    /// base, then empties the log's file that held it. Returns whether there was anything to
    /// write.
    fn checkpoint(self: &Arc<Self>) -> Result<bool> {
        let _one = self.checkpointing.lock().unwrap_or_else(PoisonError::into_inner);
        let (frozen, seq, logging) = {
            let mut redo = self.redo.lock().unwrap_or_else(PoisonError::into_inner);
            let mut layers = self.layers.write().unwrap_or_else(PoisonError::into_inner);
            if layers.frozen.is_none() {
                if layers.active.is_empty() {
                    return Ok(false);
                }
                let seq = match redo.as_mut() {
                    Some(log) => log.turn().map_err(|e| self.located(e))?,
                    None => 0,
                };
                layers.frozen = Some(Arc::new(std::mem::replace(&mut layers.active, Mem::filtered())));
                layers.frozen_seq = seq;
            }
            (layers.frozen.clone().expect("frozen just now or before"), layers.frozen_seq, redo.is_some())
        };
        {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            let Some(db) = db.as_ref() else {
                return Err(self
                    .failure_error()
                    .unwrap_or_else(|| Error::Storage("the store's file is not open".into())));
            };
            // What the new base's cells cannot hold: the old base's facts with the frozen
            // layer's keys noted, or a scan of the new base if none was made yet since the open
            // (`base_hints.rs`).
            let (mut hints, scan) = match &self.layers.read().unwrap_or_else(PoisonError::into_inner).base {
                Some(b) => (b.hints().cloned(), b.scan_next),
                None => (None, true),
            };
            let mut write = || -> Result<Base> {
                if self.dir_sync_pending.load(Ordering::SeqCst) {
                    // The compaction's rename, durable before anything is written after it.
                    redo::sync_dir_of(&self.path)?;
                    self.dir_sync_pending.store(false, Ordering::SeqCst);
                }
                let mut tx = db.begin_write()?;
                tx.set_durability(redb::Durability::Immediate)?;
                for table in Table::ALL {
                    let mut t = tx.open_table(TABLES[table as usize])?;
                    write_layer(&mut t, frozen.table(table), |key, present| {
                        if table == Table::Cells && hints.as_mut().is_some_and(|h| !h.note(key, present)) {
                            hints = None;
                        }
                    })?;
                    if table == Table::Meta && logging {
                        t.insert(redo::APPLIED_KEY.as_bytes(), seq.to_be_bytes().as_slice())?;
                    }
                }
                fail::fail_point!("checkpoint-before-commit", |_| Err(Error::Io {
                    path: PathBuf::new(),
                    message: "failpoint checkpoint-before-commit".into(),
                    disk_full: true,
                }));
                tx.commit()?;
                if scan {
                    return Base::scanned(db);
                }
                Base::open(db, hints.take().filter(|h| !h.too_many()), false)
            };
            // Any error stops writes (a storage failure; the prober tries again): a memtable
            // that cannot reach redb must not grow on.
            let base = write().map_err(|e| match self.located(e) {
                e if self.failing.load(Ordering::Acquire) => e,
                e => self.fail(e),
            })?;
            let mut layers = self.layers.write().unwrap_or_else(PoisonError::into_inner);
            layers.frozen = None;
            layers.base = Some(base);
        }
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.room.notify_all();
        fail::fail_point!("redo-checkpoint-before-truncate");
        if let Some(log) = self.redo.lock().unwrap_or_else(PoisonError::into_inner).as_mut()
            && let Err(e) = log.retire()
        {
            // The records stay, below `redo/applied`: a later open skips them, the next turn
            // empties the file.
            tracing::warn!(error = %e, "emptying the redo log's file after a checkpoint failed; trying again at the next");
        }
        Ok(true)
    }

    /// Closes the database and opens the file again (redb recovers it to its last durable
    /// commit: the last checkpoint, or the one that failed if it was durable after all); the
    /// readers' base becomes that. The memtable is kept: it holds every round published
    /// since the base's checkpoint (a `frozen` one is written again by the next checkpoint), so
    /// nothing acknowledged is lost. Readers wait meanwhile.
    fn reopen(&self) -> Result<()> {
        let _one = self.checkpointing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        let mut layers = self.layers.write().unwrap_or_else(PoisonError::into_inner);
        // The facts of the file as it will be: the last checkpoint's, widened by a frozen layer
        // whose checkpoint failed — its commit may or may not have reached the file
        // (`base_hints.rs`; no scan here, where every reader waits).
        let scan_next = layers.base.as_ref().is_none_or(|b| b.scan_next);
        let hints = layers.base.as_ref().and_then(|b| b.hints().cloned()).and_then(|mut h| match &layers.frozen {
            Some(frozen) => {
                h.widen(frozen.table(Table::Cells).iter().map(|(k, v)| (k.as_slice(), v.is_some()))).then_some(h)
            }
            None => Some(h),
        });
        // Closing first: redb locks the file while it is open. A database that met an I/O
        // error writes nothing on close.
        layers.base = None;
        drop(db.take());
        let reopened = open_database(&self.path, self.config.cache_bytes, &self.paced_syncs)?;
        layers.base = Some(Base::open(&reopened, hints, scan_next)?);
        *db = Some(reopened);
        self.reopens.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The log's repair (a failed record's bytes cut off), a durable write of [`PROBE_BYTES`]
    /// and its removal, then a checkpoint of what the memtable holds.
    fn probe(self: &Arc<Self>) -> Result<()> {
        fail::fail_point!("redb-probe", |_| Err(Error::Storage("failpoint redb-probe".into())));
        if let Some(log) = self.redo.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            log.repair()?;
        }
        {
            let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
            let db = db.as_ref().ok_or_else(|| Error::Storage("the store's file is not open".into()))?;
            let value = vec![0u8; PROBE_BYTES];
            for put in [true, false] {
                let mut tx = db.begin_write()?;
                tx.set_durability(redb::Durability::Immediate)?;
                {
                    let mut meta = tx.open_table(META)?;
                    if put {
                        meta.insert(PROBE_KEY.as_bytes(), value.as_slice())?;
                    } else {
                        meta.remove(PROBE_KEY.as_bytes())?;
                    }
                }
                tx.commit()?;
            }
        }
        self.checkpoint_all()
    }

    /// Checkpoints until the memtable is empty: a frozen one left by a failed checkpoint, then
    /// the active one (rounds arriving meanwhile wait for the next).
    fn checkpoint_all(self: &Arc<Self>) -> Result<()> {
        for _ in 0..2 {
            if !self.checkpoint()? {
                break;
            }
        }
        Ok(())
    }

    /// Waits while the memtable is over [`MEMTABLE_MAX_BYTES`] and a checkpoint is being
    /// written (or failed: then until the store fails the round).
    fn wait_for_room(&self) {
        loop {
            {
                let layers = self.layers.read().unwrap_or_else(PoisonError::into_inner);
                if layers.active.bytes() < MEMTABLE_MAX_BYTES || layers.frozen.is_none() {
                    return;
                }
            }
            if self.failing.load(Ordering::Acquire) {
                return;
            }
            let h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = self.room.wait_timeout(h, Duration::from_millis(10)).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// One group-commit round (`docs/design.md`, "A memtable in front of redb", 2.): the
    /// callers' work taken from `next` (see [`crate::group_commit`]) applied in a round overlay
    /// over the published state, logged (durability fsync), then published.
    fn commit_batch(self: &Arc<Self>, next: &mut dyn FnMut() -> Option<Batch>) -> Result<Vec<Done>> {
        // (Returns at once while the store is failing.)
        self.wait_for_room();
        if self.failing.load(Ordering::Acquire)
            && let Some(e) = self.failure_error()
        {
            // Refused at once (also if it failed while this round waited for room): the
            // prober finds out when writes work again.
            return Err(e);
        }
        let mut redo = self.redo.lock().unwrap_or_else(PoisonError::into_inner);
        let mut round = Mem::default();
        let mut ops = 0;
        let out = {
            let [c, n, m] = round.tables_mut();
            let mut cells = RoundTable { shared: self, table: Table::Cells, overlay: c };
            let mut notify = RoundTable { shared: self, table: Table::Notify, overlay: n };
            let mut meta = RoundTable { shared: self, table: Table::Meta, overlay: m };
            let mut out = Vec::new();
            // Each caller's work as the group commit hands it over: those queued at once, then
            // those that arrive while the round gathers.
            while let Some(group) = next() {
                ops += group.weight() as u64;
                out.push(match &group {
                    Batch::Ops(ops) => {
                        let mut outcomes = Vec::with_capacity(ops.len());
                        for op in ops {
                            outcomes.push(
                                cells::apply_op(&mut cells, &mut notify, &mut meta, op).map_err(|e| self.located(e))?,
                            );
                        }
                        Done::Ops(outcomes)
                    }
                    // Every row's conditions are checked before any is written, so a failed
                    // group leaves nothing behind in the round.
                    Batch::Atomic(rows) => Done::Atomic(
                        cells::apply_rows_atomically(&mut cells, &mut notify, rows).map_err(|e| self.located(e))?,
                    ),
                    // The ops see the group's writes, as a later submission would.
                    Batch::AtomicThen(rows, ops) => {
                        let (outcome, outcomes) = cells::apply_rows_then(&mut cells, &mut notify, &mut meta, rows, ops)
                            .map_err(|e| self.located(e))?;
                        Done::AtomicThen(outcome, outcomes)
                    }
                });
            }
            out
        };
        if !round.is_empty() {
            if let Some(log) = redo.as_mut() {
                // Write-ahead: durable in the log before any reader can see it. A failed
                // append or fsync fails the round, whose record the log cuts off again.
                let mut changes = Changes::default();
                for table in Table::ALL {
                    for (key, value) in round.table(table) {
                        match value {
                            Some(value) => changes.put(table, key, value),
                            None => changes.delete(table, key),
                        }
                    }
                }
                log.append(&changes).map_err(|e| self.located(e))?;
                self.log_syncs.fetch_add(1, Ordering::Relaxed);
            }
            // Hashed before the layers' lock is taken: under it only bits are set.
            let cells = CellFilter::hashes(round.table(Table::Cells).keys());
            let bytes = {
                let mut layers = self.layers.write().unwrap_or_else(PoisonError::into_inner);
                layers.active.absorb(round, &cells);
                layers.active.bytes()
            };
            fail::fail_point!("redo-after-commit");
            if bytes >= CHECKPOINT_BYTES {
                self.health.lock().unwrap_or_else(PoisonError::into_inner).checkpoint_now = true;
                self.wake_checkpointer.notify_all();
            }
            if redo.is_none() && self.config.durability == Durability::Fsync {
                // No log ([`RedbConfig::redo_log`] off): each round is made durable by a
                // checkpoint of its own before its callers are answered.
                drop(redo);
                self.checkpoint()?;
            }
        }
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
        Ok(out)
    }

    /// Runs `f` on `table` as readers see it, holding the layers shared (so a call sees
    /// whole rounds).
    fn read<T>(self: &Arc<Self>, table: Table, f: impl FnOnce(&dyn KvRead) -> Result<T>) -> Result<T> {
        self.layered(table, None, f).map_err(|e| self.located(e))
    }

    /// `f` on `table` through `round` (a round's own changes, for its leader) over the
    /// published layers.
    fn layered<T>(&self, table: Table, round: Option<&Map>, f: impl FnOnce(&dyn KvRead) -> Result<T>) -> Result<T> {
        let layers = self.layers.read().unwrap_or_else(PoisonError::into_inner);
        match layers.view(table, round) {
            Some(view) => f(&view),
            None => Err(self.failure_error().unwrap_or_else(|| Error::Storage("the store's file is not open".into()))),
        }
    }
}

struct R(redb::ReadOnlyTable<&'static [u8], &'static [u8]>);

impl KvRead for R {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key)?.map(|v| v.value().to_vec()))
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        if to.is_some_and(|to| to <= from) {
            return Ok(()); // an empty (or inverted) range
        }
        let iter = match to {
            Some(to) => self.0.range::<&[u8]>(from..to)?,
            None => self.0.range::<&[u8]>(from..)?,
        };
        for item in iter {
            let (k, v) = item?;
            if !f(k.value(), v.value())? {
                break;
            }
        }
        Ok(())
    }
}

/// A table as a round's leader sees and changes it: the round's own changes (`overlay`) over
/// the published layers.
struct RoundTable<'a> {
    shared: &'a Shared,
    table: Table,
    overlay: &'a mut Map,
}

impl KvRead for RoundTable<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared.layered(self.table, Some(self.overlay), |t| t.get(key))
    }
    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        self.shared.layered(self.table, Some(self.overlay), |t| t.for_range(from, to, f))
    }
}

impl KvWrite for RoundTable<'_> {
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        // What redb takes (its `MAX_VALUE_LENGTH` and `MAX_PAIR_LENGTH`), checked here: a
        // round published with more could never be checkpointed (nor replayed at open).
        if value.len() > REDB_MAX_VALUE || key.len() + value.len() > REDB_MAX_PAIR {
            return Err(Error::InvalidArgument(format!(
                "a value of {} bytes under a key of {} bytes: the store takes at most {REDB_MAX_VALUE} bytes a \
                 value and {REDB_MAX_PAIR} bytes a key and value",
                value.len(),
                key.len()
            )));
        }
        self.overlay.insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.overlay.insert(key.to_vec(), None);
        Ok(())
    }
}

impl Drop for RedbBigtable {
    fn drop(&mut self) {
        let shared = &self.shared;
        let (prober, checkpointer) = {
            let mut h = shared.health.lock().unwrap_or_else(PoisonError::into_inner);
            h.stopping = true;
            (h.prober.take(), h.checkpointer.take())
        };
        shared.wake_prober.notify_all();
        shared.wake_checkpointer.notify_all();
        for thread in [prober, checkpointer].into_iter().flatten() {
            let _ = thread.join();
        }
        // A clean close ends with the checkpoints of what the memtable holds (a frozen one
        // left by a failed checkpoint, then the active one), after which the log files go (a
        // crash before leaves them, and the next open replays them).
        if !shared.failing.load(Ordering::Acquire)
            && let Err(e) = shared.checkpoint_all()
        {
            tracing::warn!(error = %e, "the last checkpoint at close failed; the next open replays the redo log");
        }
        if let Some(mut log) = shared.redo.lock().unwrap_or_else(PoisonError::into_inner).take() {
            // A failed append's bytes the cut left (nobody was answered for them): off the log,
            // so that the next open does not replay a round that was never published.
            if let Err(e) = log.repair() {
                tracing::warn!(error = %e, "cutting a failed record off the redo log at close failed");
            }
            log.remove();
        }
    }
}

impl Bigtable for RedbBigtable {
    // No read views (`snapshot`): every read sees the latest published state through the
    // memtable (`docs/design.md`, "A memtable in front of redb", 6.); opening one costs nothing
    // a read does not pay anyway.

    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        refuse_oversized_ops(&[], &ops)?;
        match self.shared.group.submit(Batch::Ops(ops), &|next| self.shared.commit_batch(next))? {
            Done::Ops(outcomes) => Ok(outcomes),
            _ => Err(Error::Storage("group commit answered ops with an atomic outcome".into())),
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
        refuse_oversized_ops(&rows, &[])?;
        // Group-committed like any op: it shares the round (and the fsync) of whatever else
        // is queued, and stays all-or-nothing inside it.
        match self.shared.group.submit(Batch::Atomic(rows), &|next| self.shared.commit_batch(next))? {
            Done::Atomic(outcome) => Ok(outcome),
            _ => Err(Error::Storage("group commit answered an atomic group with op outcomes".into())),
        }
    }

    fn apply_atomic_then(
        &self,
        rows: Vec<RowMutation>,
        then: Vec<Op>,
    ) -> Result<(AtomicOutcome, Option<Vec<Outcome>>)> {
        check_atomic_group(self, &rows)?;
        if rows.is_empty() {
            return Ok((AtomicOutcome::Applied, Some(self.apply(then)?)));
        }
        refuse_oversized_ops(&rows, &then)?;
        // One submission: the group and the ops share one round, the ops after the group.
        match self.shared.group.submit(Batch::AtomicThen(rows, then), &|next| self.shared.commit_batch(next))? {
            Done::AtomicThen(outcome, outcomes) => Ok((outcome, outcomes)),
            _ => Err(Error::Storage("group commit answered an atomic group and ops with other outcomes".into())),
        }
    }

    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        self.shared.read(Table::Cells, |c| cells::read_row(c, table, row, columns, ts))
    }

    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        self.shared.read(Table::Cells, |c| cells::find_write(c, cell, start_ts))
    }

    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        self.shared.read(Table::Cells, |c| cells::read_data(c, cell, start_ts))
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        self.shared.read(Table::Cells, |c| cells::scan(c, range))
    }

    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        self.shared.read(Table::Cells, |c| cells::scan_versions(c, from, limit))
    }

    fn row_versions_without_values(&self, rows: &[(String, Vec<u8>)]) -> Result<Vec<RowVersions>> {
        self.shared.read(Table::Cells, |c| cells::versions_of_rows(c, rows, cells::WriteValues::Left))
    }

    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.shared.read(Table::Notify, |n| cells::scan_notify(n, from, limit))
    }

    fn has_notify(&self, cell: &CellRef) -> Result<bool> {
        let pos = notify_position(cell);
        self.shared.read(Table::Notify, |n| Ok(n.get(&pos)?.is_some()))
    }

    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.shared.read(Table::Meta, |m| m.get(key.as_bytes()))
    }

    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.shared.read(Table::Meta, |m| cells::meta_scan(m, prefix))
    }

    fn size_on_disk(&self) -> Option<u64> {
        std::fs::metadata(&self.shared.path).ok().map(|m| m.len())
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn hurry(&self) {
        self.shared.group.hurry();
    }

    fn stats(&self) -> BackendStats {
        let s = &self.shared;
        BackendStats {
            commits: s.commits.load(Ordering::Relaxed),
            ops: s.ops.load(Ordering::Relaxed),
            log_syncs: s.log_syncs.load(Ordering::Relaxed),
            checkpoints: s.checkpoints.load(Ordering::Relaxed),
            compactions: s.compactions.load(Ordering::Relaxed),
            compactions_given_up: s.compactions_given_up.load(Ordering::Relaxed),
            paced_syncs: s.paced_syncs.load(Ordering::Relaxed),
        }
    }

    fn storage_failure(&self) -> Option<StorageFailure> {
        if !self.shared.failing.load(Ordering::Acquire) {
            return None;
        }
        self.shared.health.lock().unwrap_or_else(PoisonError::into_inner).failure.clone()
    }

    fn reopens(&self) -> u64 {
        self.shared.reopens.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_testkit::TempDir;
    use std::collections::BTreeMap;

    /// A quiet spell asks for one compaction once it has lasted `after`; one that ended is not
    /// asked for again in that spell, one given up is, after a back-off of 2, 4, … times
    /// `after` (at most 64), reset by one that ends; more than `QUIET_OPS` operations between
    /// two ticks start a new spell, fewer do not. Before, a spell asked once: a store quiet
    /// after a failed copy was never compacted (the official CI's run of
    /// `failpoints::a_compaction_whose_copy_fails_leaves_the_store_as_it_was`).
    #[test]
    fn a_quiet_spell_tries_once_and_again_after_a_give_up() {
        let after = Duration::from_secs(10);
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut q = Quiet::new(0, after, t0);
        // Ticks every second with a trickle of operations (at most QUIET_OPS per tick).
        let ticks = |q: &mut Quiet, ops: &mut u64, from: u64, to: u64| -> Vec<u64> {
            (from..=to)
                .filter(|&s| {
                    *ops += QUIET_OPS;
                    q.tick(*ops, after, at(s))
                })
                .collect()
        };
        let mut ops = 0;
        assert_eq!(ticks(&mut q, &mut ops, 1, 12), vec![10], "once the spell has lasted `after`");
        q.tried(Compaction::GivenUp, after, at(10));
        assert_eq!(ticks(&mut q, &mut ops, 11, 40), vec![30], "again 2 × `after` later");
        q.tried(Compaction::GivenUp, after, at(30));
        assert_eq!(ticks(&mut q, &mut ops, 31, 80), vec![70], "then 4 × `after` later");
        q.tried(Compaction::Done, after, at(70));
        assert_eq!(ticks(&mut q, &mut ops, 71, 2000), Vec::<u64>::new(), "not again in the spell it ended in");
        // A burst starts a new spell: tried `after` later, and a give-up backs off from 2 ×.
        ops += QUIET_OPS + 1;
        assert!(!q.tick(ops, after, at(2001)));
        assert_eq!(ticks(&mut q, &mut ops, 2002, 2012), vec![2011]);
        let mut asked = 2011;
        for n in 1..=8u32 {
            q.tried(Compaction::GivenUp, after, at(asked));
            let backoff = 10 << n.min(QUIET_MAX_BACKOFF);
            let next = ticks(&mut q, &mut ops, asked + 1, asked + backoff + 1);
            assert_eq!(next, vec![asked + backoff], "the back-off after {n} given up in a row");
            asked += backoff;
        }
    }

    fn key(n: u32) -> Vec<u8> {
        // Long shared prefixes, as the cells table's keys have.
        let mut k = b"\x00pages\x00\x01https://site.example/docs/".to_vec();
        k.extend_from_slice(&n.to_be_bytes());
        k
    }

    /// A value redb cannot take is refused to its caller before it is submitted, naming the
    /// cell, and nothing of the call is applied; before, the round's check failed every caller
    /// in the round with this one's error. (The value is allocated zeroed and never touched:
    /// gigabytes of address space, not of memory.)
    #[test]
    fn an_oversized_value_is_refused_to_its_caller_before_its_round() {
        let dir = TempDir::new("oversized");
        let db = RedbBigtable::open(dir.file("s.redb"), RedbConfig::default()).unwrap();
        let row = |row: &[u8], value: Vec<u8>| RowMutation {
            table: "t".into(),
            row: row.to_vec(),
            conditions: vec![],
            mutations: vec![Mutation::PutWrite {
                column: "c:v".into(),
                commit_ts: Timestamp::from_raw(2),
                write: WriteRecord { start_ts: Timestamp::from_raw(1), kind: WriteKind::Put(value) },
            }],
        };
        let huge = || vec![0u8; REDB_MAX_VALUE];
        let rounds = db.stats().commits;
        let refused = [
            db.apply(vec![Op::Row(row(b"small", b"v".to_vec())), Op::Row(row(b"big", huge()))]).unwrap_err(),
            db.apply_atomic(vec![row(b"small", b"v".to_vec()), row(b"big", huge())]).unwrap_err(),
            db.apply_atomic_then(vec![row(b"small", b"v".to_vec())], vec![Op::Row(row(b"big", huge()))]).unwrap_err(),
            db.apply(vec![Op::MetaPut { key: "k".into(), value: huge() }]).unwrap_err(),
        ];
        for e in &refused {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        assert!(refused[0].to_string().contains("t/big/c:v"), "{}", refused[0]);
        assert!(refused[3].to_string().contains("\"k\""), "{}", refused[3]);
        assert_eq!(db.stats().commits, rounds, "no round was made");
        let read = db.read_row("t", b"small", &["c:v"], Timestamp::from_raw(3)).unwrap();
        assert!(read[0].write.is_none(), "nothing of a refused call is applied");
        // The store goes on.
        db.apply(vec![Op::Row(row(b"small", b"v".to_vec()))]).unwrap();
        let read = db.read_row("t", b"small", &["c:v"], Timestamp::from_raw(3)).unwrap();
        assert!(read[0].write.is_some());
    }

    /// The store's file is a [`PacedFile`]: a checkpoint of a few megabytes syncs it on the way,
    /// about once per [`SYNC_STEP`], and says so in its stats.
    #[test]
    fn a_checkpoint_syncs_the_file_in_steps() {
        let dir = TempDir::new("paced-checkpoint");
        let db = RedbBigtable::open(dir.file("s.redb"), RedbConfig::default()).unwrap();
        let before = db.stats().paced_syncs;
        // 4 MiB of values that do not compress (values of 256 bytes or more are deflated).
        let ops = (0..1024u32)
            .map(|n| {
                Op::Row(RowMutation {
                    table: "t".into(),
                    row: n.to_be_bytes().to_vec(),
                    conditions: vec![],
                    mutations: vec![Mutation::PutWrite {
                        column: "c:v".into(),
                        commit_ts: Timestamp::from_raw(2),
                        write: WriteRecord {
                            start_ts: Timestamp::from_raw(1),
                            kind: WriteKind::Put(percolator_testkit::noise(u64::from(n), 4096)),
                        },
                    }],
                })
            })
            .collect();
        db.apply(ops).unwrap();
        db.checkpoint().unwrap();
        let paced = db.stats().paced_syncs - before;
        let steps = (4 << 20) / SYNC_STEP;
        assert!((steps..=4 * steps).contains(&paced), "{paced} syncs for 4 MiB in steps of {SYNC_STEP} bytes");
    }

    /// A checkpoint's layer written through cursors and one-by-one inserts leaves redb holding
    /// exactly the layer applied to what it held: long runs of new keys in one gap, single new
    /// keys in many gaps (short runs, then the backoff's plain inserts, then cursors again),
    /// overwrites, removals of keys present and absent, a put next to a removal; and `note`
    /// hears every key once, in order, with whether it is put.
    #[test]
    fn a_layer_written_through_cursors_equals_the_layer_applied() {
        let dir = TempDir::new("write-layer");
        let db = Database::create(dir.file("t.redb")).unwrap();
        for existing in [(0..0).step_by(1), (0..20_000).step_by(10)] {
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(CELLS).unwrap();
                t.retain(|_, _| false).unwrap();
                for n in existing.clone() {
                    t.insert(key(n).as_slice(), b"old".as_slice()).unwrap();
                    model.insert(key(n), b"old".to_vec());
                }
            }
            tx.commit().unwrap();

            let mut layer = Map::new();
            let put = |n: u32, layer: &mut Map| {
                layer.insert(key(n), Some(format!("new {n}").into_bytes()));
            };
            for n in 1..500 {
                put(n, &mut layer); // keys 1–9 and the gaps after 10, 20, ...: runs of 9
            }
            for n in (1001..9_000).step_by(10) {
                put(n, &mut layer); // one new key per gap: runs of one
            }
            for n in 9_001..9_400 {
                put(n, &mut layer); // runs of nine again, after the backoff
            }
            for n in (9_400..9_600).step_by(10) {
                put(n, &mut layer); // overwrites (of keys held when `existing` is not empty)
            }
            for n in 9_600..9_700 {
                if n % 3 == 0 {
                    layer.insert(key(n), None); // removals, of held keys and absent ones
                } else {
                    put(n, &mut layer);
                }
            }
            for n in 50_000..60_000 {
                put(n, &mut layer); // one long run past the last key
            }
            for n in 70_000..70_600 {
                // A run of 3 MB: redb splices it in several pieces (at 1 MiB of buffered keys).
                layer.insert(key(n), Some(vec![n as u8; 5_000]));
            }
            for (k, v) in &layer {
                match v {
                    Some(v) => model.insert(k.clone(), v.clone()),
                    None => model.remove(k),
                };
            }

            let mut noted = Vec::new();
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(CELLS).unwrap();
                write_layer(&mut t, &layer, |k, present| noted.push((k.to_vec(), present))).unwrap();
            }
            tx.commit().unwrap();
            let want: Vec<(Vec<u8>, bool)> = layer.iter().map(|(k, v)| (k.clone(), v.is_some())).collect();
            assert_eq!(noted, want);
            let tx = db.begin_read().unwrap();
            let t = tx.open_table(CELLS).unwrap();
            let got: BTreeMap<Vec<u8>, Vec<u8>> =
                t.iter().unwrap().map(|e| e.unwrap()).map(|(k, v)| (k.value().to_vec(), v.value().to_vec())).collect();
            assert_eq!(got.len(), model.len());
            assert!(got == model, "redb differs from the layer applied to what it held");
        }
    }
}
