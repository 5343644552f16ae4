//! [`Store`]: the entry point. Owns the backend, the oracle, the worker lease, the set of
//! running transactions (for GC's safepoint) and the observer registry.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use crate::backend_coordination::{self, HWM_KEY};
use crate::bigtable::{Bigtable, Op};
use crate::conflicts::Conflicts;
use crate::coordination::{Coordination, Published, Renewed};
use crate::dirty_rows::{DirtyRows, Tracked};
use crate::error::{Error, Result};
use crate::freshness::Freshness;
use crate::mem_backend::MemBigtable;
use crate::metrics::{Counters, Totals};
use crate::notify::FailState;
use crate::oracle::Oracle;
use crate::redb_backend::{RedbBigtable, RedbConfig};
use crate::registry::{self, Registry};
use crate::secondaries::AsyncSecondaries;
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;
use crate::values::Values;
use crate::worker::{self, Stop, now_ms};

/// How [`Store::run`] retries conflicts.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts in all, including the first.
    pub max_attempts: u32,
    /// Backoff before the second attempt; doubles per attempt, with jitter.
    pub initial_backoff: Duration,
    /// Backoff ceiling.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 50,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(200),
        }
    }
}

/// Settings of the Percolator layer (backend settings are separate, e.g. [`RedbConfig`]).
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// Time after a lock's wall time (written at prewrite, refreshed by the commit's heartbeat)
    /// after which another transaction may roll it back even if its worker looks alive.
    pub lock_ttl: Duration,
    /// Longest a read waits for a live transaction's lock before failing with a retryable
    /// conflict. Nothing waits forever.
    pub lock_wait: Duration,
    /// Worker lease period; a worker that misses it is dead and its locks are cleaned at once.
    pub worker_lease: Duration,
    /// Commit a transaction whose rows share one atomic unit (on redb: any transaction of at
    /// most 1,024 rows) in one atomic step instead of prewrite and commit. Used only on
    /// exclusive backends, where every reader passes this process's 1PC fence (see
    /// `docs/design.md`, "One-phase commit").
    pub one_phase_commit: bool,
    /// Return from a two-phase commit at its commit point, leaving the secondaries' commit
    /// records to a background thread (readers that meet one first roll it forward). Saves a
    /// backend round trip (and fsync) on the caller's path; see [`Store::flush_secondaries`].
    pub async_secondaries: bool,
    /// Conflict retries of [`Store::run`].
    pub retry: RetryPolicy,
    /// How long a notification whose observer failed (trap, error, deadline) waits before
    /// its next run; doubled after each further failure, up to [`StoreConfig::observer_backoff_max`].
    /// A failure that is likely to fail again (a bad input) is not retried in a tight loop.
    pub observer_backoff: Duration,
    /// Ceiling of [`StoreConfig::observer_backoff`].
    pub observer_backoff_max: Duration,
    /// On a shared backend, how often the store looks for bindings changed by another host
    /// (the observed-column registry lives in the store; see `docs/design.md`).
    pub registry_poll: Duration,
}

impl Default for StoreConfig {
    fn default() -> StoreConfig {
        StoreConfig {
            lock_ttl: Duration::from_secs(5),
            lock_wait: Duration::from_secs(10),
            worker_lease: Duration::from_secs(10),
            one_phase_commit: true,
            async_secondaries: true,
            retry: RetryPolicy::default(),
            observer_backoff: Duration::from_millis(500),
            observer_backoff_max: Duration::from_secs(60),
            registry_poll: Duration::from_millis(250),
        }
    }
}

/// Wakes idle scanners when a commit sets notify cells.
#[derive(Default)]
pub(crate) struct Signal {
    generation: Mutex<u64>,
    cv: Condvar,
}

impl Signal {
    /// The generation is a plain counter no panic can leave half-updated: a poisoned mutex is
    /// used as it is (an error here would make idle scanners spin instead of sleeping).
    fn lock(&self) -> MutexGuard<'_, u64> {
        self.generation.lock().unwrap_or_else(PoisonError::into_inner)
    }
    pub(crate) fn bump(&self) {
        *self.lock() += 1;
        self.cv.notify_all();
    }
    pub(crate) fn generation(&self) -> u64 {
        *self.lock()
    }
    /// Waits until the generation differs from `seen`, or `timeout`.
    pub(crate) fn wait_change(&self, seen: u64, timeout: Duration) {
        // Woken or timed out, the caller looks again: the result says nothing it needs.
        let _woken = self.cv.wait_timeout_while(self.lock(), timeout, |g| *g == seen);
    }
}

/// Rows with a one-phase commit in flight (between taking commit_ts and the write landing).
/// Readers wait for a row to leave the fence before reading it, which is what makes 1PC safe:
/// a reader whose start_ts is above the 1PC's commit_ts either sees the write or waits for it.
///
/// Entries are numbered in the order they enter ([`OnePcFence::enter`]); a reader waits only
/// for entries numbered at or below [`OnePcFence::entered`] read right after it got its start
/// timestamp. A later entry takes its commit timestamp after that, so above the reader's start:
/// the reader must not see it, and a hot row's stream of commits cannot starve it
/// (`docs/design.md`, "Combine columns", the 1PC fence).
///
/// A row is found by a 64-bit hash of its key: entering and leaving cost a hash and a hash-map
/// slot per row, not an ordered insert of a copied key (with `memcmp`s along long keys) under
/// the fence's mutex. Two rows whose keys hash alike share a slot, so a reader of one may also
/// wait for an entry holding the other: a wait that was not needed, never one that is missed
/// (the entry leaves when its commit ends, as every entry does). A range of rows is checked
/// against the keys of the entries in flight it may wait for.
///
/// Waiters sleep on the condition variable of their row's stripe (or, for a range, on the
/// range one), and an exit wakes only the stripes of the rows it held, and only where someone
/// sleeps: with many commits of a few hot rows in flight, one notification for every waiter
/// at every exit made most of the store's CPU time scheduler work.
pub(crate) struct OnePcFence {
    count: AtomicUsize,
    /// Entries so far (the number of the newest).
    entered: AtomicU64,
    /// One-phase commits finished so far: a read view opened before a 1PC finished may miss
    /// its write, so views are reopened when this changes.
    exits: AtomicU64,
    state: Mutex<FenceState>,
    /// Hashes row keys for [`FenceState::rows`] (seeded per process: which rows share a slot
    /// is not predictable from outside).
    hasher: foldhash::fast::RandomState,
    /// Waiters for one row, by [`fence_stripe`] of its hash.
    row_cvs: Vec<Condvar>,
    /// Waiters for a range of rows: woken by every exit.
    range_cv: Condvar,
    /// Called by a waiter before it first sleeps: the commits it waits for may sit in a group
    /// commit that is gathering ([`Bigtable::hurry`]). Called under the fence's mutex.
    hurry: Box<dyn Fn() + Send + Sync>,
}

/// What the fence's mutex guards.
struct FenceState {
    /// Fenced rows by the hash of their key, each with the numbers of the entries holding a
    /// row of that hash.
    rows: HashMap<u64, Holders, foldhash::fast::RandomState>,
    /// The entries in flight by number: their rows' hashes and keys (the keys for the waits
    /// on a range of rows).
    entries: BTreeMap<u64, Fenced>,
    /// Threads asleep on each of `row_cvs`, and on `range_cv`: an exit notifies only where
    /// someone sleeps.
    row_waiters: Vec<u32>,
    range_waiters: u32,
}

/// An entry's rows: their keys (`key::row_prefix`, sorted) and the hash of each.
struct Fenced {
    hashes: Vec<u64>,
    keys: Vec<Vec<u8>>,
}

impl Fenced {
    /// Whether a row key in `[lo, hi)` is among these (`hi = None`: unbounded): one binary
    /// search of the sorted keys.
    fn holds_in(&self, lo: &[u8], hi: Option<&[u8]>) -> bool {
        let first = self.keys.partition_point(|k| k.as_slice() < lo);
        self.keys.get(first).is_some_and(|k| hi.is_none_or(|hi| k.as_slice() < hi))
    }
}

/// The entries holding the rows of one hash: nearly always one.
enum Holders {
    One(u64),
    Many(Vec<u64>),
}

impl Holders {
    fn add(&mut self, number: u64) {
        match self {
            Holders::One(n) => *self = Holders::Many(vec![*n, number]),
            Holders::Many(numbers) => numbers.push(number),
        }
    }

    /// Takes `number` out; whether none is left.
    fn remove(&mut self, number: u64) -> bool {
        match self {
            Holders::One(n) => *n == number,
            Holders::Many(numbers) => {
                if let Some(i) = numbers.iter().position(|n| *n == number) {
                    numbers.swap_remove(i);
                }
                numbers.is_empty()
            }
        }
    }

    fn any_upto(&self, upto: u64) -> bool {
        match self {
            Holders::One(n) => *n <= upto,
            Holders::Many(numbers) => numbers.iter().any(|n| *n <= upto),
        }
    }
}

/// Condition variables of the fence's row waiters.
const FENCE_STRIPES: usize = 64;

/// The stripe of a row's waiters, from its hash.
fn fence_stripe(hash: u64) -> usize {
    (hash % FENCE_STRIPES as u64) as usize
}

impl OnePcFence {
    /// A fence whose waiters hurry `backend`'s group commit.
    pub(crate) fn new(backend: Arc<dyn Bigtable>) -> OnePcFence {
        OnePcFence {
            count: AtomicUsize::new(0),
            entered: AtomicU64::new(0),
            exits: AtomicU64::new(0),
            state: Mutex::new(FenceState {
                rows: HashMap::default(),
                entries: BTreeMap::new(),
                row_waiters: vec![0; FENCE_STRIPES],
                range_waiters: 0,
            }),
            hasher: foldhash::fast::RandomState::default(),
            row_cvs: (0..FENCE_STRIPES).map(|_| Condvar::new()).collect(),
            range_cv: Condvar::new(),
            hurry: Box::new(move || backend.hurry()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FenceState> {
        self.state.lock().expect("1PC fence poisoned")
    }

    fn row_hash(&self, row_key: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, row_key)
    }

    /// Fences the rows of `row_keys` (`key::row_prefix` each); returns the entry's number, for
    /// [`OnePcFence::exit`].
    pub(crate) fn enter(&self, mut row_keys: Vec<Vec<u8>>) -> u64 {
        // Sorted for the range waits (a commit's rows come sorted: nothing to do then).
        if !row_keys.is_sorted() {
            row_keys.sort_unstable();
        }
        let hashes: Vec<u64> = row_keys.iter().map(|k| self.row_hash(k)).collect();
        let mut state = self.lock();
        let number = self.entered.fetch_add(1, Ordering::SeqCst) + 1;
        for h in &hashes {
            match state.rows.entry(*h) {
                std::collections::hash_map::Entry::Occupied(mut o) => o.get_mut().add(number),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(Holders::One(number));
                }
            }
        }
        state.entries.insert(number, Fenced { hashes, keys: row_keys });
        self.count.fetch_add(1, Ordering::SeqCst);
        number
    }

    /// Takes entry `number` out of the fence and wakes who waits for its rows.
    pub(crate) fn exit(&self, number: u64) {
        let mut state = self.lock();
        let Some(fenced) = state.entries.remove(&number) else { return };
        for h in &fenced.hashes {
            if let Some(holders) = state.rows.get_mut(h)
                && holders.remove(number)
            {
                state.rows.remove(h);
            }
        }
        self.exits.fetch_add(1, Ordering::SeqCst);
        self.count.fetch_sub(1, Ordering::SeqCst);
        // Every sleeper counted here is inside `wait` (it counted itself and slept under the
        // mutex), so notifying after the mutex is released loses no wakeup.
        let mut stripes: Vec<usize> =
            fenced.hashes.iter().map(|h| fence_stripe(*h)).filter(|s| state.row_waiters[*s] > 0).collect();
        let ranges = state.range_waiters > 0;
        drop(state);
        stripes.sort_unstable();
        stripes.dedup();
        for s in stripes {
            self.row_cvs[s].notify_all();
        }
        if ranges {
            self.range_cv.notify_all();
        }
    }

    pub(crate) fn exits(&self) -> u64 {
        self.exits.load(Ordering::SeqCst)
    }

    /// The number of the newest entry so far: read after taking a start timestamp, the bound
    /// of the entries a reader waits for.
    pub(crate) fn entered(&self) -> u64 {
        self.entered.load(Ordering::SeqCst)
    }

    /// Waits while a row key in `[lo, hi)` (`hi = None`: unbounded) is fenced by an entry
    /// numbered at most `upto`; one atomic load when nothing is fenced.
    pub(crate) fn wait(&self, lo: &[u8], hi: Option<&[u8]>, upto: u64) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.wait_slow(lo, hi, upto)
    }

    /// Waits while `row_key` is fenced by an entry numbered at most `upto` (or a row of the
    /// same hash is).
    pub(crate) fn wait_row(&self, row_key: &[u8], upto: u64) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let h = self.row_hash(row_key);
        let stripe = fence_stripe(h);
        let mut state = self.lock();
        let mut hurried = false;
        while state.rows.get(&h).is_some_and(|holders| holders.any_upto(upto)) {
            if !std::mem::replace(&mut hurried, true) {
                (self.hurry)();
            }
            state.row_waiters[stripe] += 1;
            state = self.row_cvs[stripe].wait(state).expect("1PC fence poisoned");
            state.row_waiters[stripe] -= 1;
        }
    }

    #[cold]
    fn wait_slow(&self, lo: &[u8], hi: Option<&[u8]>, upto: u64) {
        let mut state = self.lock();
        let mut hurried = false;
        while state.entries.range(..=upto).any(|(_, fenced)| fenced.holds_in(lo, hi)) {
            if !std::mem::replace(&mut hurried, true) {
                (self.hurry)();
            }
            state.range_waiters += 1;
            state = self.range_cv.wait(state).expect("1PC fence poisoned");
            state.range_waiters -= 1;
        }
    }
}

pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Bigtable>,
    pub(crate) oracle: Oracle,
    pub(crate) config: StoreConfig,
    /// This store's worker id (liveness token); its lease, and every worker's, lives in the
    /// oracle's coordination (`Inner::coordination`).
    pub(crate) worker: u64,
    /// Start timestamps of running transactions (with multiplicity), for GC's safepoint.
    pub(crate) active: Mutex<BTreeMap<Timestamp, usize>>,
    pub(crate) registry: RwLock<Arc<Registry>>,
    /// The registry version every commit of this store sets the notify cells of (published in
    /// the lease; see `registry::acknowledge`).
    pub(crate) acked_registry: AtomicU64,
    /// Running scanners (a store with one takes a share of the notify partitions).
    pub(crate) scanners: AtomicUsize,
    /// Until when (wall-clock ms) this worker's lease is surely alive for every other worker;
    /// `u64::MAX` on an exclusive backend (no other worker).
    pub(crate) lease_valid_until: AtomicU64,
    /// Bumped when the lease lapsed before it was renewed: transactions that started before
    /// may have had versions collected under them by other hosts' GC (see `check_lease`).
    pub(crate) lease_epoch: AtomicU64,
    pub(crate) signal: Signal,
    pub(crate) fence: OnePcFence,
    /// Advisory row locks taken by scanners (row key prefixes).
    pub(crate) row_locks: Mutex<HashSet<Vec<u8>>>,
    /// Failed observer runs awaiting retry, keyed by (notified cell, observer name).
    pub(crate) failures: Mutex<HashMap<(Vec<u8>, String), FailState>>,
    pub(crate) counters: Counters,
    /// When (wall-clock ms; 0: never) an observer run's failure of the store was last logged
    /// at warn (`notify.rs`).
    pub(crate) store_failure_warned: AtomicU64,
    /// The background writer of secondaries (`StoreConfig::async_secondaries`).
    pub(crate) secondaries: Option<AsyncSecondaries>,
    /// Each observer's freshness histogram (this process's committed runs).
    pub(crate) freshness: Freshness,
    /// Each observer's run outcomes and the cells of recent conflicts (this process's runs).
    pub(crate) conflicts: Conflicts,
    /// The counters' saved totals (see `metrics.rs`).
    pub(crate) totals: Totals,
    /// Which transactions write values in their stored form (`values.rs`).
    pub(crate) values: Values,
    /// Serializes this store's GC passes; holds the highest safepoint a pass collected at
    /// (its persisted safepoint never goes below it: `snapshot::settle_safepoint`).
    pub(crate) gc_collected: Mutex<Timestamp>,
    /// The folder's safepoint (`Store::recent_safepoint`): when it was settled, and it.
    pub(crate) recent_safepoint: Mutex<Option<(std::time::Instant, Timestamp)>>,
    /// On an exclusive backend, the rows written since a GC pass last looked at them (what an
    /// incremental pass reads; `backend` records into it). None on a shared backend.
    pub(crate) gc_dirty: Option<Arc<DirtyRows>>,
    stop: Arc<Stop>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Secondaries still queued are written before the store lets go of the backend.
        if let Some(s) = &self.secondaries {
            s.close();
        }
        self.stop.stop();
        // A clean close frees the shared backend for the next store at once.
        if let Err(e) = self.coordination().revoke_lease(self.worker) {
            tracing::warn!(error = %e, "closing the store: removing its worker lease failed (it expires by itself)");
        }
        // A clean close keeps this store's counts in the totals.
        if let Err(e) = self.persist_metrics() {
            tracing::warn!(
                error = %e,
                "closing the store: saving the counters' totals failed (counts since the last save are lost)"
            );
        }
    }
}

/// A Percolator store: transactions, notifications, observers and GC over a [`Bigtable`].
///
/// Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
    /// Shared by the clones of the handle [`Store::open`] or [`Store::with_backend`] returned
    /// (`None` in a store the library makes from a transaction's): dropped after `inner`, with
    /// the last of them it waits for a lease beat under way ([`worker::Beat`]).
    _handle: Option<Arc<Handle>>,
}

/// See `Store::_handle`.
struct Handle {
    beat: Arc<worker::Beat>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The user's last handle is gone (its `inner` went first): a beat that holds the store
        // now ends, and closes it if it held the last reference, before this returns.
        drop(self.beat.0.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

impl Store {
    /// The store a transaction of it belongs to, for the library's own use: no user's handle
    /// (its drop waits for nothing).
    pub(crate) fn of(inner: Arc<Inner>) -> Store {
        Store { inner, _handle: None }
    }

    /// Opens (or creates) the embedded redb store at `path`. Fails with
    /// [`Error::AlreadyOpen`] if another process, or another open [`Store`] of this process,
    /// has the file open.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig, redb: RedbConfig) -> Result<Store> {
        Store::with_backend(Arc::new(RedbBigtable::open(path, redb)?), config)
    }

    /// A new, empty store in memory ([`MemBigtable`](crate::backends::MemBigtable)), gone when
    /// the last clone is dropped. For tests and tools that need no file.
    pub fn in_memory(config: StoreConfig) -> Result<Store> {
        Store::with_backend(Arc::new(MemBigtable::new()), config)
    }

    /// Runs Percolator over any backend. The store owns the backend's timestamp oracle and
    /// (on an exclusive backend) its worker leases: two stores must never share one backend
    /// at the same time. The store does not give the backend back out (see
    /// [`backends`](crate::backends)): a caller that needs it keeps its own `Arc`.
    pub fn with_backend(backend: Arc<dyn Bigtable>, config: StoreConfig) -> Result<Store> {
        if !backend.exclusive() {
            if let Some(service) = backend.meta_get(SERVICE_KEY)? {
                return Err(Error::InvalidArgument(format!(
                    "this store's hosts share the timestamp oracle service ({}): open it with that \
                     service (a shared coordination in Oracle::new, or `etcd` in the [store.redis] \
                     configuration), not with an oracle of its own",
                    String::from_utf8_lossy(&service)
                )));
            }
            // Before the oracle opens: it reserves timestamp ranges, which is sound only for
            // the one store using the backend (see `backend_coordination::wait_until_sole_worker`).
            backend_coordination::wait_until_sole_worker(backend.as_ref(), config.worker_lease)?;
        }
        let oracle = Oracle::open(backend.clone())?;
        Store::with_oracle(backend, oracle, config)
    }

    /// Runs Percolator over `backend` with timestamps (and worker leases) from `oracle`: with a
    /// shared coordination under it ([`Coordination::shared`]), any number of stores (hosts) may
    /// use one shared backend at once.
    /// With an in-process oracle over a shared backend, use [`Store::with_backend`], which
    /// makes sure no other store is using it.
    pub fn with_oracle(backend: Arc<dyn Bigtable>, oracle: Oracle, config: StoreConfig) -> Result<Store> {
        if backend.exclusive() {
            oracle.seam().clear_dead_leases()?;
        }
        if let Some(service) = oracle.seam().shared() {
            join_service(backend.as_ref(), &oracle, &service, config.worker_lease)?;
        }
        let totals = Totals::load(backend.as_ref())?;
        // Before any transaction: every transaction of this store starts above the marker.
        let values = Values::open(backend.as_ref(), &oracle)?;
        let worker = oracle.next()?.raw();
        // Its own id is a fresh timestamp: every transaction it runs starts above it.
        // The lease goes first: a registry change that does not see it committed before the
        // registry is loaded below (see "Several hosts" in docs/design.md).
        let published = Published { oldest: Timestamp::from_raw(worker), ..Default::default() };
        let renewed = oracle.seam().write_lease(worker, config.worker_lease, published)?;
        let valid_until = match renewed {
            _ if backend.exclusive() => u64::MAX,
            Some(r) => r.expiry.saturating_sub(worker::lease_margin(config.worker_lease)),
            None => 0,
        };
        let stop = Arc::new(Stop::default());
        let (lease, poll) = (config.worker_lease, config.registry_poll);
        // Every write of this store goes through `backend` from here on: on an exclusive
        // backend, its applied writes record their rows for incremental GC passes.
        let (backend, gc_dirty): (Arc<dyn Bigtable>, _) = if backend.exclusive() {
            let dirty = Arc::new(DirtyRows::default());
            let tracked: Arc<dyn Bigtable> = Arc::new(Tracked::new(backend, dirty.clone()));
            // A new store (or a small one) needs no full first pass to know its rows.
            dirty.learn_small_store(tracked.as_ref())?;
            (tracked, Some(dirty))
        } else {
            (backend, None)
        };
        let (config_async, backend_for_secondaries) = (config.async_secondaries, backend.clone());
        let fence = OnePcFence::new(backend.clone());
        let inner = Arc::new(Inner {
            backend,
            oracle,
            config,
            worker,
            active: Mutex::new(BTreeMap::new()),
            registry: RwLock::new(Arc::new(Registry::default())),
            acked_registry: AtomicU64::new(0),
            scanners: AtomicUsize::new(0),
            lease_valid_until: AtomicU64::new(valid_until),
            lease_epoch: AtomicU64::new(0),
            signal: Signal::default(),
            fence,
            row_locks: Mutex::new(HashSet::new()),
            failures: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            store_failure_warned: AtomicU64::new(0),
            secondaries: config_async.then(|| AsyncSecondaries::start(backend_for_secondaries)),
            freshness: Freshness::default(),
            conflicts: Conflicts::default(),
            totals,
            values,
            gc_collected: Mutex::new(Timestamp::ZERO),
            recent_safepoint: Mutex::new(None),
            gc_dirty,
            stop: stop.clone(),
        });
        let saved = registry::load(&inner)?;
        if let Some(old) = registry::install(&inner, saved, None)? {
            registry::acknowledge(&inner, old);
        }
        if !inner.backend.exclusive() {
            registry::spawn_watcher(Arc::downgrade(&inner), stop.clone(), poll);
        }
        let beat = Arc::new(worker::Beat::default());
        worker::spawn_heartbeat(Arc::downgrade(&inner), stop, lease, beat.clone());
        Ok(Store { inner, _handle: Some(Arc::new(Handle { beat })) })
    }

    /// Starts a snapshot-isolation transaction. Its reads see every transaction that committed
    /// before its start timestamp was issued, and none after.
    pub fn begin(&self) -> Result<Transaction> {
        Transaction::begin(self.inner.clone())
    }

    /// Runs `body` in a transaction and commits it, retrying on conflict with backoff (per
    /// [`StoreConfig::retry`]). `body` may run several times and must have no side effects
    /// outside the transaction. Returns `body`'s value from the attempt that committed.
    pub fn run<T>(&self, body: impl FnMut(&mut Transaction) -> Result<T>) -> Result<T> {
        self.run_for_commit_ts(body).map(|(v, _)| v)
    }

    /// [`Store::run`], also returning the commit timestamp.
    pub(crate) fn run_for_commit_ts<T>(
        &self,
        mut body: impl FnMut(&mut Transaction) -> Result<T>,
    ) -> Result<(T, Timestamp)> {
        let policy = &self.inner.config.retry;
        let mut backoff = policy.initial_backoff;
        let mut attempt = 1;
        loop {
            let result = self.begin().and_then(|mut txn| {
                let v = body(&mut txn)?;
                let ts = txn.commit()?;
                Ok((v, ts))
            });
            match result {
                Err(e) if e.is_retryable() && attempt < policy.max_attempts => {
                    let jitter = rand::random_range(0..=backoff.as_micros() as u64);
                    std::thread::sleep(backoff / 2 + Duration::from_micros(jitter / 2));
                    backoff = (backoff * 2).min(policy.max_backoff);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Waits until the secondaries of every transaction this store committed are written:
    /// with [`StoreConfig::async_secondaries`] a commit returns at its commit point and they
    /// follow. Readers never need this (a reader that meets such a lock rolls it forward); it
    /// is for tools and tests that look at the backend's cells themselves.
    pub fn flush_secondaries(&self) {
        if let Some(s) = &self.inner.secondaries {
            s.wait();
        }
    }

    /// The timestamp oracle.
    pub fn oracle(&self) -> &Oracle {
        &self.inner.oracle
    }

    /// This store's worker id (its liveness token).
    pub fn worker_id(&self) -> u64 {
        self.inner.worker
    }

    /// The oldest start timestamp any running transaction of this store holds, or a fresh
    /// timestamp if none runs: GC may drop versions that no reader at or after it can see.
    pub fn safepoint(&self) -> Result<Timestamp> {
        self.inner.oldest_start()
    }
}

/// Metadata key recording that the store's hosts use the oracle service (and its etcd and
/// namespace): a store with an oracle of its own must not open it any more.
const SERVICE_KEY: &str = "oracle/service";

/// Before a store joins the hosts of a shared oracle: no store with an oracle of its own may be
/// using the backend (its timestamps and the service's would interleave), the service must
/// hand out timestamps above every one that oracle handed out (else new snapshots would miss
/// its commits), and the backend records that it is served by the service from now on.
fn join_service(backend: &dyn Bigtable, oracle: &Oracle, service: &str, lease: Duration) -> Result<()> {
    if backend.meta_get(SERVICE_KEY)?.is_none() {
        backend_coordination::wait_until_sole_worker(backend, lease)?;
        if let Some(mark) = backend.meta_get(HWM_KEY)? {
            let mark = u64::from_le_bytes(
                mark.as_slice()
                    .try_into()
                    .map_err(|_| Error::Corrupt("oracle high-water mark is not 8 bytes".into()))?,
            );
            let next = oracle.next()?.raw();
            if next <= mark {
                return Err(Error::InvalidArgument(format!(
                    "this store was used with an oracle of its own up to timestamp {mark}, but the oracle \
                     service ({service}) hands out {next}: its snapshots would miss those commits. Use a \
                     new namespace for the service, or the store's own oracle"
                )));
            }
        }
        backend.apply(vec![Op::MetaPut { key: SERVICE_KEY.into(), value: service.as_bytes().to_vec() }])?;
    }
    Ok(())
}

impl Inner {
    pub(crate) fn register_active(&self) -> Result<Timestamp> {
        // Taking the timestamp under the lock means GC never computes a safepoint above a
        // transaction that has its timestamp but is not yet registered.
        let mut active = self.active.lock().map_err(|_| Error::Closed)?;
        let ts = self.oracle.next()?;
        *active.entry(ts).or_default() += 1;
        Ok(ts)
    }

    /// The oldest start of this store's running transactions, or a fresh timestamp if none
    /// runs; taken under the lock that registers transactions, so every transaction registered
    /// later starts above it.
    pub(crate) fn oldest_start(&self) -> Result<Timestamp> {
        let active = self.active.lock().map_err(|_| Error::Closed)?;
        match active.keys().next() {
            Some(ts) => Ok(*ts),
            None => self.oracle.next(),
        }
    }

    /// Registers a transaction reading at an explicit snapshot `ts` (`Store::begin_at`).
    pub(crate) fn register_active_at(&self, ts: Timestamp) -> Result<()> {
        let mut active = self.active.lock().map_err(|_| Error::Closed)?;
        *active.entry(ts).or_default() += 1;
        Ok(())
    }

    pub(crate) fn unregister_active(&self, ts: Timestamp) {
        if let Ok(mut active) = self.active.lock()
            && let Some(n) = active.get_mut(&ts)
        {
            *n -= 1;
            if *n == 0 {
                active.remove(&ts);
            }
        }
    }

    /// Wakes the scanners after notify cells of these rows (row keys) were set: this process's
    /// at once, other hosts' through the backend (see [`Bigtable::wake`]).
    pub(crate) fn notified(&self, row_keys: impl Iterator<Item = Vec<u8>>) {
        self.signal.bump();
        if !self.backend.exclusive() {
            let mut keys: Vec<Vec<u8>> = row_keys.collect();
            keys.sort_unstable();
            keys.dedup();
            self.backend.wake(&keys);
        }
    }

    /// Records a renewal of this worker's lease. If the lease had lapsed before the renewal
    /// was sent, other workers may have treated this one as dead meanwhile (GC below its
    /// running transactions' snapshots): the epoch moves on, and those transactions fail.
    pub(crate) fn lease_renewed(&self, renewed: Renewed) {
        if self.backend.exclusive() {
            return;
        }
        let valid = renewed.expiry.saturating_sub(worker::lease_margin(self.config.worker_lease));
        let before = self.lease_valid_until.load(Ordering::SeqCst);
        if before < renewed.sent {
            self.lease_epoch.fetch_add(1, Ordering::SeqCst);
            tracing::error!(
                worker = self.worker,
                "the worker's lease lapsed before it was renewed (the process stalled, or could not reach the \
                 lease service): transactions that started before fail"
            );
        }
        self.lease_valid_until.fetch_max(valid, Ordering::SeqCst);
    }

    /// After a read of a transaction that started in lease epoch `epoch`, and before its commit
    /// point: fails if the lease may have lapsed since (another host's GC may then have removed
    /// versions the read needed, so what it returned cannot be trusted; or rolled back a lock
    /// it prewrote, and the rollback record with it). Reads that return before the lease's
    /// expiry (less a margin) happened while every other worker still counted this one.
    pub(crate) fn check_lease(&self, epoch: u64) -> Result<()> {
        if self.backend.exclusive() {
            return Ok(());
        }
        if self.lease_epoch.load(Ordering::SeqCst) != epoch || now_ms() >= self.lease_valid_until.load(Ordering::SeqCst)
        {
            return Err(Error::Unavailable(format!(
                "worker {}'s lease is not (or was not) renewed in time: this transaction cannot go on (another host \
                 may have collected versions under its snapshot, or rolled back its locks); run it again",
                self.worker
            )));
        }
        Ok(())
    }

    pub(crate) fn worker_alive(&self, worker: u64) -> Result<bool> {
        if worker == self.worker {
            return Ok(true);
        }
        self.coordination().lease_alive(worker)
    }

    /// The store's coordination: the oracle's timestamps and the worker leases.
    pub(crate) fn coordination(&self) -> &dyn Coordination {
        self.oracle.seam()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key;
    use std::sync::mpsc;

    fn fence() -> Arc<OnePcFence> {
        Arc::new(OnePcFence::new(Arc::new(MemBigtable::new())))
    }

    /// Whether `wait` (on another thread) returns within `within`: it is left waiting if not
    /// (the caller exits the entry it waits for, then joins).
    fn returns_within(within: Duration, wait: impl FnOnce() + Send + 'static) -> (bool, std::thread::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || {
            wait();
            let _ = tx.send(());
        });
        (rx.recv_timeout(within).is_ok(), t)
    }

    /// How long a wait that must end is given (generous: the machine may be busy).
    const ENDS: Duration = Duration::from_secs(5);
    /// How long a wait that must go on is watched.
    const SOON: Duration = Duration::from_millis(200);

    #[test]
    fn a_reader_waits_for_the_fenced_rows_of_entries_up_to_its_bound() {
        let f = fence();
        let a = key::row_prefix("t", b"a");
        let b = key::row_prefix("t", b"b");
        let first = f.enter(vec![a.clone(), b.clone()]);
        let upto = f.entered();
        let second = f.enter(vec![key::row_prefix("t", b"c")]);
        assert_eq!((first, second, f.count.load(Ordering::SeqCst)), (1, 2, 2));

        // Rows no entry holds, and an entry after the reader's bound: no wait.
        let g = f.clone();
        let (done, t) = returns_within(ENDS, move || g.wait_row(&key::row_prefix("t", b"z"), upto));
        assert!(done, "a row nobody fenced");
        t.join().unwrap();
        let g = f.clone();
        let (done, t) = returns_within(ENDS, move || g.wait_row(&key::row_prefix("t", b"c"), upto));
        assert!(done, "a row fenced after the reader's bound");
        t.join().unwrap();
        let g = f.clone();
        let (done, t) = returns_within(ENDS, move || g.wait(&key::row_prefix("t", b"c"), None, upto));
        assert!(done, "a range holding only rows fenced after the bound");
        t.join().unwrap();

        // A fenced row, and a range holding one, wait until the entry exits.
        let g = f.clone();
        let row = b.clone();
        let (done, row_waiter) = returns_within(SOON, move || g.wait_row(&row, upto));
        assert!(!done, "a reader of a fenced row waits");
        let g = f.clone();
        let (lo, hi) = (key::row_prefix("t", b"a0"), key::row_prefix("t", b"c"));
        let (done, range_waiter) = returns_within(SOON, move || g.wait(&lo, Some(&hi), upto));
        assert!(!done, "a range holding row b waits");
        f.exit(first);
        row_waiter.join().unwrap();
        range_waiter.join().unwrap();
        assert_eq!(f.lock().entries.len(), 1);
        f.exit(second);
        assert_eq!((f.count.load(Ordering::SeqCst), f.exits(), f.lock().rows.len()), (0, 2, 0));
    }

    /// The slot of one hash: rows of two entries that hash alike share it, and it empties
    /// only when both left (an entry holding two rows of one hash is in it twice).
    #[test]
    fn a_slot_holds_every_entry_of_its_hash() {
        let mut h = Holders::One(3);
        assert!(h.any_upto(3) && !h.any_upto(2));
        h.add(5);
        h.add(5);
        assert!(!h.remove(3), "5 still holds it");
        assert!(!h.any_upto(4) && h.any_upto(5));
        assert!(!h.remove(5), "5 held it twice");
        assert!(h.remove(5));
        assert!(Holders::One(7).remove(7));
        assert!(!Holders::One(7).remove(8), "another entry's number changes nothing");
    }

    #[test]
    fn a_range_wait_finds_a_fenced_row_by_its_entry_s_sorted_keys() {
        let fenced = Fenced { hashes: vec![], keys: vec![b"b".to_vec(), b"d".to_vec(), b"f".to_vec()] };
        assert!(fenced.holds_in(b"a", Some(b"c")));
        assert!(fenced.holds_in(b"d", Some(b"e")));
        assert!(!fenced.holds_in(b"c", Some(b"d")), "the bound is excluded");
        assert!(!fenced.holds_in(b"g", None));
        assert!(fenced.holds_in(b"e", None));
        // Unsorted keys are sorted as they enter.
        let f = fence();
        let n = f.enter(vec![key::row_prefix("t", b"z"), key::row_prefix("t", b"a")]);
        assert!(f.lock().entries[&n].keys.is_sorted());
    }

    #[test]
    fn a_row_held_by_two_entries_stays_fenced_until_both_exit() {
        let f = fence();
        let a = key::row_prefix("t", b"a");
        let first = f.enter(vec![a.clone()]);
        let second = f.enter(vec![a.clone(), key::row_prefix("t", b"b")]);
        let upto = f.entered();
        f.exit(first);
        let g = f.clone();
        let row = a.clone();
        let (done, t) = returns_within(SOON, move || g.wait_row(&row, upto));
        assert!(!done, "the second entry still holds the row");
        f.exit(second);
        t.join().unwrap();
        assert!(f.lock().rows.is_empty());
        // An exit of an entry that already left changes nothing.
        f.exit(second);
        assert_eq!(f.exits(), 2);
    }
}
