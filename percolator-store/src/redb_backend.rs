//! The embedded default backend: one redb file, group-committed.
//!
//! Three redb tables: `cells` (locks, write records and staged data, see [`crate::key`]),
//! `notify` (the notify locality group: scanning it costs ∝ pending notifications), and `meta`
//! (oracle high-water mark, worker leases, dead letters). redb holds an exclusive lock on the
//! file, so this process is the only reader and writer ([`Bigtable::exclusive`]).
//!
//! At durability fsync a round is made durable by the redo log (`<store>.redo`, [`crate::redo`]):
//! its key-level changes are appended and fdatasynced, then redb commits it without writing
//! pages; a checkpoint each second (a durable redb commit) empties the log, and opening the
//! store replays what the log holds after the last checkpoint (`docs/design.md`, "A redo log
//! in front of redb").
//!
//! After an I/O error (a full disk) redb refuses every later operation until the file is
//! closed and opened again. The backend then refuses writes with the first error
//! ([`Error::Io`]), reopens the file at once so that reads work, and tries a probe write (1 MiB) with
//! backoff until one succeeds (`docs/design.md`, "A full disk") — unless commits it
//! acknowledged are not durable yet (durability none), which a reopen would drop: then the
//! failure stays until the process is restarted ([`StorageFailure::needs_restart`]).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::bigtable::*;
use crate::cells::{self, KvRead, KvWrite, Visitor};
use crate::error::{Error, LATCHED, Result};
use crate::group_commit::{GroupCommit, Work};
use crate::redo::{self, Changes, RedoLog, Table};
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
    /// At [`Durability::Fsync`], make rounds durable with the redo log rather than with redb's
    /// durable commit (the default; off only to compare the two in benchmarks).
    pub redo_log: bool,
    /// How often a round is a checkpoint (a durable redb commit that empties the redo log):
    /// longer means fewer page writes and more to replay after a crash.
    pub checkpoint_every: Duration,
}

impl Default for RedbConfig {
    fn default() -> RedbConfig {
        RedbConfig {
            durability: Durability::Fsync,
            cache_bytes: 256 << 20,
            redo_log: true,
            checkpoint_every: redo::CHECKPOINT_EVERY,
        }
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
    shared: Arc<Shared>,
}

/// What the backend and its prober thread share.
struct Shared {
    /// The open database: shared (read) to begin a transaction — a group commit's leader holds
    /// it until its write transaction is committed —, exclusive (write) only to reopen the file
    /// after an I/O error, which therefore never closes it under a live write transaction.
    /// `None` while a reopen failed (every operation then answers the recorded failure).
    db: RwLock<Option<Database>>,
    /// The file (for its size, for reopening, for errors).
    path: PathBuf,
    config: RedbConfig,
    group: GroupCommit<Batch, Done>,
    commits: AtomicU64,
    ops: AtomicU64,
    /// With [`Durability::None`]: when (ms after `opened`) the next group commit is durable.
    opened: Instant,
    next_durable_ms: AtomicU64,
    /// True while `health` holds a failure: writes are refused without touching redb (read on
    /// every group commit, so an atomic rather than the mutex).
    failing: AtomicBool,
    /// The failure that stops writes, and the prober that ends it.
    health: Mutex<Health>,
    /// Wakes the prober early (the backend is dropped).
    wake_prober: Condvar,
    /// Times the file was reopened after a failure ([`Bigtable::reopens`]).
    reopens: AtomicU64,
    /// The last commit that succeeded was not durable ([`Durability::None`]): a reopen now
    /// would go back before commits that callers were told succeeded.
    unsynced: AtomicBool,
    /// The redo log, when rounds are made durable by it ([`RedbConfig::redo_log`] at
    /// [`Durability::Fsync`]). Locked by a round's leader for the whole round, and by a reopen
    /// (always after `db`).
    redo: Mutex<Option<RedoLog>>,
    /// A round failed after touching the log (its append failed, or redb's commit after it):
    /// the prober reopens again before it lets writes resume, even if it reopened since the
    /// failure it is handling was recorded (the log and redb must be read back together).
    reopen_needed: AtomicBool,
    /// Rounds made durable by the log, and checkpoints ([`BackendStats`]).
    log_syncs: AtomicU64,
    checkpoints: AtomicU64,
}

#[derive(Default)]
struct Health {
    failure: Option<StorageFailure>,
    /// The prober thread, while one runs (or ran: joined before the next is started).
    prober: Option<std::thread::JoinHandle<()>>,
    /// The backend is being dropped: the prober stops.
    stopping: bool,
    /// At durability none, the thread that makes the last commits durable a second after them
    /// when no commit comes to do it (`Shared::sync_when_quiet`).
    syncer: Option<std::thread::JoinHandle<()>>,
}

/// With [`Durability::None`], a group commit is made durable at most this often.
const NONE_DURABLE_EVERY_MS: u64 = 1000;

/// The prober's first wait after a failure, doubled after each failed probe up to
/// [`PROBE_MAX`].
const PROBE_FIRST: Duration = Duration::from_millis(100);
/// The longest wait between two probes: how long writes stay refused after space was freed.
const PROBE_MAX: Duration = Duration::from_secs(2);
/// The metadata key the prober writes, and removes again.
const PROBE_KEY: &str = "backend/probe";
/// The size of the prober's value: a probe must find room for more than a page or two, or the
/// free pages a failed commit left in the file would let it succeed on a full disk (and the
/// next real write fail again).
const PROBE_BYTES: usize = 1 << 20;

fn open_database(path: &Path, cache_bytes: usize) -> Result<Database> {
    Database::builder().set_cache_size(cache_bytes).create(path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => Error::AlreadyOpen { path: path.to_owned() },
        redb::DatabaseError::Storage(redb::StorageError::Io(e)) => Error::io(path, &e),
        e => Error::Storage(format!("opening {}: {e}", path.display())),
    })
}

/// Replays the redo log of the store at `path` into `db`: the records after `redo/applied`, in
/// order, in one write transaction that also moves `redo/applied` to the last of them. At open
/// (`durable`) that commit is a checkpoint and the log is emptied; after a reopen for a
/// failure it is not durable (the disk may be full) and the next round makes the checkpoint.
/// Returns the log if this store keeps one (`logging`); otherwise a log left by an earlier
/// configuration is replayed and removed.
fn recover(
    db: &Database,
    path: &Path,
    logging: bool,
    durable: bool,
    checkpoint_every: Duration,
) -> Result<Option<RedoLog>> {
    if !logging && !redo::path_of(path).exists() {
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
    let (mut log, records) = RedoLog::open(path, applied, store_id, checkpoint_every)?;
    if !records.is_empty() || !log.is_empty() {
        let mut tx = db.begin_write()?;
        tx.set_durability(if durable { redb::Durability::Immediate } else { redb::Durability::None })?;
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
        if durable {
            log.checkpointed()?;
        } else {
            log.force_checkpoint();
        }
    }
    if logging {
        Ok(Some(log))
    } else {
        if durable {
            log.remove();
        }
        Ok(None)
    }
}

impl RedbBigtable {
    /// Opens or creates the store file at `path`. Fails with [`Error::AlreadyOpen`] if another
    /// process, or another handle in this process, has the file open.
    pub fn open(path: impl AsRef<Path>, config: RedbConfig) -> Result<RedbBigtable> {
        let path = path.as_ref();
        let db = open_database(path, config.cache_bytes)?;
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
        let redo = recover(&db, path, logging, true, config.checkpoint_every).map_err(located)?;
        let backend = RedbBigtable {
            shared: Arc::new(Shared {
                db: RwLock::new(Some(db)),
                path: path.to_owned(),
                config,
                group: GroupCommit::new(),
                commits: AtomicU64::new(0),
                ops: AtomicU64::new(0),
                opened: Instant::now(),
                next_durable_ms: AtomicU64::new(NONE_DURABLE_EVERY_MS),
                failing: AtomicBool::new(false),
                health: Mutex::new(Health::default()),
                wake_prober: Condvar::new(),
                reopens: AtomicU64::new(0),
                unsynced: AtomicBool::new(false),
                redo: Mutex::new(redo),
                reopen_needed: AtomicBool::new(false),
                log_syncs: AtomicU64::new(0),
                checkpoints: AtomicU64::new(0),
            }),
        };
        if backend.shared.config.durability == Durability::None {
            // Without it, the last commits before a quiet spell would stay non-durable until
            // the next commit (or a clean close), however long the spell.
            let shared = backend.shared.clone();
            let syncer = std::thread::Builder::new()
                .name("redb-syncer".into())
                .spawn(move || shared.sync_when_quiet())
                .map_err(|e| Error::Storage(format!("starting the store's syncer thread: {e}")))?;
            backend.shared.health.lock().unwrap_or_else(PoisonError::into_inner).syncer = Some(syncer);
        }
        Ok(backend)
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
        if redo::path_of(path).exists() {
            // Rounds after the last checkpoint are only in the log: a clean open and close
            // puts them into the file (and removes the log) before the file is compacted.
            drop(RedbBigtable::open(path, RedbConfig::default())?);
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

    /// How the store file's space is used now: the file's size, the pages redb has allocated
    /// (live data, old versions GC has not collected yet, B-tree overhead), and of those the
    /// bytes of keys and values. The file grows in large steps and never shrinks while open, so
    /// its size alone says little about what the store holds. Walks every B-tree inside a write
    /// transaction (writes wait meanwhile): for benchmarks and diagnostics, not for a hot path.
    pub fn space(&self) -> Result<Space> {
        let shared = &self.shared;
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
        let file_bytes = std::fs::metadata(&shared.path).map_err(|e| shared.located(e.into()))?.len();
        Ok(Space {
            file_bytes,
            allocated_bytes: stats.allocated_pages() * stats.page_size() as u64,
            stored_bytes: stats.stored_bytes(),
        })
    }
}

/// [`RedbBigtable::space`]: how the store file's bytes are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    /// The file's size.
    pub file_bytes: u64,
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
        // At durability none, commits acknowledged since the last durable one live only in
        // this database: reopening would drop them while this process goes on as if they
        // were there (a value format marker, a registry change, a high-water mark…). A
        // restart loses the same, but starts from what is on disk.
        let needs_restart = self.unsynced.load(Ordering::Acquire);
        if needs_restart {
            tracing::error!(
                error = %e,
                "the store's file failed with commits acknowledged that are not durable yet (durability none): \
                 it is not reopened; restart the process once the cause is fixed"
            );
        } else {
            tracing::warn!(
                error = %e,
                "the store's file failed: writes are refused until one succeeds again; reopening it and retrying"
            );
        }
        h.failure = Some(StorageFailure { error: e.clone(), since: SystemTime::now(), probes: 0, needs_restart });
        self.failing.store(true, Ordering::Release);
        if !h.stopping && !needs_restart {
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

    /// The prober: reopens the file (redb refuses everything after an I/O error), waits, tries
    /// a durable write of 1 MiB; until the write commits, when the failure is cleared.
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
                // A round failed on the log after the last reopen: read both back once more.
                Ok(()) if self.reopen_needed.load(Ordering::Acquire) => {}
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

    /// At durability none: every quarter of a second, if the last commit was not durable and
    /// the last durable one is a second old, an empty commit, which redb makes durable with
    /// every commit before it — so a crash loses at most about the last second of commits,
    /// even when the store then goes quiet. Ends when the backend is dropped.
    fn sync_when_quiet(self: Arc<Self>) {
        loop {
            {
                let h = self.health.lock().unwrap_or_else(PoisonError::into_inner);
                let (h, _) = self
                    .wake_prober
                    .wait_timeout_while(h, Duration::from_millis(250), |h| !h.stopping)
                    .unwrap_or_else(PoisonError::into_inner);
                if h.stopping {
                    return;
                }
            }
            let due = self.opened.elapsed().as_millis() as u64 >= self.next_durable_ms.load(Ordering::Relaxed);
            if due && self.unsynced.load(Ordering::Acquire) && !self.failing.load(Ordering::Acquire) {
                // Through the group commit, as any commit: its leader decides it is durable.
                if let Err(e) = self.group.submit(Batch::Ops(Vec::new()), &|next| self.commit_batch(next)) {
                    tracing::debug!(error = %e, "a durable commit of the last commits failed");
                }
            }
        }
    }

    /// Closes the database and opens the file again (redb recovers it to its last committed
    /// state). Only the prober calls it; the exclusive lock waits for a running write
    /// transaction to end, and read views of the old database fail from then on.
    fn reopen(&self) -> Result<()> {
        let mut db = self.db.write().unwrap_or_else(PoisonError::into_inner);
        // Closing first: redb locks the file while it is open. A database that met an I/O
        // error writes nothing on close.
        drop(db.take());
        self.reopen_needed.store(false, Ordering::Release);
        let reopened = open_database(&self.path, self.config.cache_bytes)?;
        let mut redo = self.redo.lock().unwrap_or_else(PoisonError::into_inner);
        if redo.is_some() {
            // The file holds its last durable commit, or (closed without an I/O error: redb
            // persists its non-durable commits then) every round committed: the whole records
            // of the log are applied again, in order, onto either — not durably (the disk may
            // be full); the log stays until the checkpoint the next round makes. A whole
            // record whose fsync failed is replayed too (its callers heard an error, which
            // never promised "not committed").
            *redo = recover(&reopened, &self.path, true, false, self.config.checkpoint_every)?;
        }
        *db = Some(reopened);
        self.reopens.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// A durable write of [`PROBE_BYTES`], then its removal (its pages are reused).
    fn probe(&self) -> Result<()> {
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
        Ok(())
    }

    /// The open database for a read, or the recorded failure if there is none.
    fn begin_read(self: &Arc<Self>) -> Result<redb::ReadTransaction> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let Some(db) = db.as_ref() else {
            return Err(self.failure_error().unwrap_or_else(|| Error::Storage("the store's file is not open".into())));
        };
        db.begin_read().map_err(|e| self.located(e.into()))
    }

    /// One group-commit round: the callers' work taken from `next` (see [`crate::group_commit`])
    /// applied in one write transaction.
    fn commit_batch(self: &Arc<Self>, next: &mut dyn FnMut() -> Option<Batch>) -> Result<Vec<Done>> {
        if self.failing.load(Ordering::Acquire)
            && let Some(e) = self.failure_error()
        {
            // Refused at once: the prober finds out when writes work again.
            return Err(e);
        }
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let Some(db) = db.as_ref() else {
            return Err(self.failure_error().unwrap_or_else(|| Error::Storage("the store's file is not open".into())));
        };
        self.commit_in(db, next).map_err(|e| self.located(e))
    }

    fn commit_in(self: &Arc<Self>, db: &Database, next: &mut dyn FnMut() -> Option<Batch>) -> Result<Vec<Done>> {
        let mut redo = self.redo.lock().unwrap_or_else(PoisonError::into_inner);
        let mut tx = db.begin_write()?;
        let durable = match self.config.durability {
            // With the log, a round is durable in redb only when it is a checkpoint.
            Durability::Fsync => redo.as_ref().is_none_or(RedoLog::checkpoint_due),
            // Only the group commit's leader gets here: one at a time.
            Durability::None => {
                self.opened.elapsed().as_millis() as u64 >= self.next_durable_ms.load(Ordering::Relaxed)
            }
        };
        tx.set_durability(if durable { redb::Durability::Immediate } else { redb::Durability::None })?;
        let mut out = Vec::new();
        let mut ops = 0;
        // What the round changes, for the log (a round that is a checkpoint is not logged).
        let changes = RefCell::new(Changes::default());
        let log = (redo.is_some() && !durable).then_some(&changes);
        {
            // Tables are opened when first used: a commit that writes no notify cell or metadata
            // (most one-phase commits) does not pay for opening and re-rooting those tables.
            let mut cells = Lazy::new(&tx, CELLS, log.map(|c| (c, Table::Cells)));
            let mut notify = Lazy::new(&tx, NOTIFY, log.map(|c| (c, Table::Notify)));
            let mut meta = Lazy::new(&tx, META, log.map(|c| (c, Table::Meta)));
            // Each caller's work as the group commit hands it over: those queued at once, then
            // those that arrive while the round gathers.
            while let Some(group) = next() {
                ops += group.weight() as u64;
                out.push(match &group {
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
            if durable && let Some(redo) = redo.as_ref() {
                // A checkpoint: every logged round is in redb once this commit is durable.
                meta.put(redo::APPLIED_KEY.as_bytes(), &redo.last_seq().to_be_bytes())?;
            }
        }
        match redo.as_mut() {
            Some(log) if !durable && !changes.borrow().is_empty() => {
                // Write-ahead: durable in the log before any reader can see it. A failed append
                // or fsync fails the round (the transaction is dropped, so aborted) and, being
                // an I/O error, has the file reopened, which reads the log and redb back
                // together.
                log.append(&changes.borrow()).inspect_err(|e| {
                    if e.is_storage_failure() {
                        // Whatever reached the file is read back at the reopen, with redb.
                        self.reopen_needed.store(true, Ordering::Release);
                    }
                })?;
                self.log_syncs.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = tx.commit() {
                    // Logged but not committed: a reopen replays it (its callers hear an
                    // error, which never promised "not committed"). Recorded as a failure
                    // whatever its kind, so that the prober reopens.
                    self.reopen_needed.store(true, Ordering::Release);
                    let e = Error::from(e);
                    return Err(match e {
                        Error::Io { .. } => e,
                        e => self.fail(e),
                    });
                }
                fail::fail_point!("redo-after-commit");
            }
            Some(log) if durable => {
                tx.commit()?;
                self.checkpoints.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = log.checkpointed() {
                    // The records stay, below `redo/applied`: a later open skips them.
                    tracing::warn!(error = %e, "emptying the redo log after a checkpoint failed; trying again at the next");
                }
            }
            _ => tx.commit()?,
        }
        // A round the log holds is durable although redb's commit was not.
        self.unsynced.store(!durable && redo.is_none(), Ordering::Release);
        if durable && self.config.durability == Durability::None {
            let now = self.opened.elapsed().as_millis() as u64;
            self.next_durable_ms.store(now + NONE_DURABLE_EVERY_MS, Ordering::Relaxed);
        }
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
        Ok(out)
    }

    fn read<T>(
        self: &Arc<Self>,
        table: TableDefinition<&[u8], &[u8]>,
        f: impl FnOnce(&dyn KvRead) -> Result<T>,
    ) -> Result<T> {
        let tx = self.begin_read()?;
        let read = || -> Result<T> {
            let t = tx.open_table(table)?;
            f(&R(t))
        };
        read().map_err(|e| self.located(e))
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

/// A table of a write transaction, opened when first used; its changes are recorded in `log`
/// (a round's redo record) when there is one.
struct Lazy<'t> {
    tx: &'t redb::WriteTransaction,
    def: TableDefinition<'static, &'static [u8], &'static [u8]>,
    table: std::cell::OnceCell<W<'t>>,
    log: Option<(&'t RefCell<Changes>, Table)>,
}

impl<'t> Lazy<'t> {
    fn new(
        tx: &'t redb::WriteTransaction,
        def: TableDefinition<'static, &'static [u8], &'static [u8]>,
        log: Option<(&'t RefCell<Changes>, Table)>,
    ) -> Lazy<'t> {
        Lazy { tx, def, table: std::cell::OnceCell::new(), log }
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
        self.table_mut()?.put(key, value)?;
        if let Some((log, table)) = self.log {
            log.borrow_mut().put(table, key, value);
        }
        Ok(())
    }
    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.table_mut()?.delete(key)?;
        if let Some((log, table)) = self.log {
            log.borrow_mut().delete(table, key);
        }
        Ok(())
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
        let shared = &self.shared;
        let prober = {
            let mut h = shared.health.lock().unwrap_or_else(PoisonError::into_inner);
            h.stopping = true;
            h.prober.take()
        };
        shared.wake_prober.notify_all();
        if let Some(prober) = prober {
            let _ = prober.join();
        }
        let syncer = shared.health.lock().unwrap_or_else(PoisonError::into_inner).syncer.take();
        if let Some(syncer) = syncer {
            let _ = syncer.join();
        }
        // A clean close ends with a durable round, through the group commit like any other: at
        // durability none redb persists non-durable commits only when a durable one follows;
        // with the redo log the round is a checkpoint, after which the log file goes (a crash
        // before leaves it, and the next open replays it).
        if !shared.failing.load(Ordering::Acquire) {
            shared.next_durable_ms.store(0, Ordering::Relaxed);
            if let Some(log) = shared.redo.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                log.force_checkpoint();
            }
            if let Err(e) = shared.group.submit(Batch::Ops(Vec::new()), &|next| shared.commit_batch(next)) {
                tracing::warn!(error = %e, "the last durable commit at close failed; the next open replays the redo log");
            }
        }
        if let Some(log) = shared.redo.lock().unwrap_or_else(PoisonError::into_inner).take() {
            log.remove();
        }
    }
}

/// One redb read transaction over the `cells` table.
struct RedbSnapshot {
    table: R,
    /// For errors (not kept alive by a view: the file closes when the backend is dropped).
    shared: Weak<Shared>,
    /// The backend's reopen count when the view was opened.
    opened_in: u64,
}

impl RedbSnapshot {
    fn located(&self, e: Error) -> Error {
        let Some(shared) = self.shared.upgrade() else {
            return e;
        };
        if shared.reopens.load(Ordering::SeqCst) != self.opened_in {
            // Its database was closed by a reopen: what it reads now fails. Still the storage
            // failure's doing (the failure may be cleared by now), not the reader's.
            return shared.failure_error().unwrap_or_else(|| Error::Io {
                path: shared.path.clone(),
                message: LATCHED.into(),
                disk_full: false,
            });
        }
        shared.located(e)
    }
}

impl Snapshot for RedbSnapshot {
    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        cells::read_row(&self.table, table, row, columns, ts).map_err(|e| self.located(e))
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        cells::scan(&self.table, range).map_err(|e| self.located(e))
    }
}

impl Bigtable for RedbBigtable {
    fn snapshot(&self) -> Result<Option<Box<dyn Snapshot>>> {
        let shared = &self.shared;
        let opened_in = shared.reopens.load(Ordering::SeqCst);
        let tx = shared.begin_read()?;
        let table = tx.open_table(CELLS).map_err(|e| shared.located(e.into()))?;
        Ok(Some(Box::new(RedbSnapshot { table: R(table), shared: Arc::downgrade(shared), opened_in })))
    }

    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        match self.shared.group.submit(Batch::Ops(ops), &|next| self.shared.commit_batch(next))? {
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
        match self.shared.group.submit(Batch::Atomic(rows), &|next| self.shared.commit_batch(next))? {
            Done::Atomic(outcome) => Ok(outcome),
            Done::Ops(_) => Err(Error::Storage("group commit answered an atomic group with op outcomes".into())),
        }
    }

    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        self.shared.read(CELLS, |c| cells::read_row(c, table, row, columns, ts))
    }

    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        self.shared.read(CELLS, |c| cells::find_write(c, cell, start_ts))
    }

    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        self.shared.read(CELLS, |c| cells::read_data(c, cell, start_ts))
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        self.shared.read(CELLS, |c| cells::scan(c, range))
    }

    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        self.shared.read(CELLS, |c| cells::scan_versions(c, from, limit))
    }

    fn row_versions_without_values(&self, rows: &[(String, Vec<u8>)]) -> Result<Vec<RowVersions>> {
        self.shared.read(CELLS, |c| cells::versions_of_rows(c, rows, cells::WriteValues::Left))
    }

    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.shared.read(NOTIFY, |n| cells::scan_notify(n, from, limit))
    }

    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.shared.read(META, |m| m.get(key.as_bytes()))
    }

    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        self.shared.read(META, |m| cells::meta_scan(m, prefix))
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
