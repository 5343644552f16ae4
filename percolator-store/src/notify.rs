//! Notifications and observers (paper §2.4).
//!
//! A write to an observed column sets that column's notify cell (in the notify locality group)
//! at prewrite. Each strong observer `O` keeps an ack column `__ack:O` in the row holding the
//! start timestamp of its last successful run; a run happens only if the column's newest write
//! is newer than the ack, and writes the ack in its own transaction, so two racing runs
//! conflict and at most one commits per change, and many writes before a run collapse into
//! one run. Weak observers have no ack: any weak notification runs them. The notify cell is a
//! hint: it is cleared after every observer of the column is satisfied, and only if no write
//! newer than the runs' snapshot (and no lock) has arrived. A run that keeps failing is moved to
//! a dead-letter record after `max_attempts` and can be retried from there.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::bigtable::*;
use crate::conflicts::{self, RunEnd};
use crate::error::{Error, Result};
use crate::key;
use crate::lock::{self, Force, TxnStatus};
use crate::registry::{self, Bound};
use crate::store::{Inner, Store};
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;
use crate::worker::now_ms;

/// Strong notifications are transactional and collapse; weak ones never conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NotifyKind {
    /// Triggered by every committed write to the column; at most one observer commit per change.
    Strong,
    /// Triggered by [`Transaction::notify_weak`]; the column cannot be written. Runs may repeat.
    Weak,
}

impl std::fmt::Display for NotifyKind {
    /// `strong` or `weak`, as a pipeline configuration writes them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotifyKind::Strong => "strong",
            NotifyKind::Weak => "weak",
        })
    }
}

/// How an observer is bound.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverSpec {
    /// Unique name (`[A-Za-z0-9_.-]`, at most 64 bytes); names the ack column `__ack:<name>`.
    pub name: String,
    /// Observed table.
    pub table: String,
    /// Observed column.
    pub column: String,
    /// Strong or weak.
    pub kind: NotifyKind,
    /// Failed runs of one notification before it moves to dead letters (at least 1).
    pub max_attempts: u32,
}

/// What an observer is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notification {
    /// The changed (or notified) cell.
    pub cell: CellRef,
    /// Strong or weak.
    pub kind: NotifyKind,
    /// Commit timestamp of the newest write the run's snapshot sees (strong only).
    pub commit_ts: Option<Timestamp>,
    /// 1 for the first run of this notification, more for retries after failures.
    pub attempt: u32,
}

/// Why an observer run failed.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// A store operation failed; a conflict is retried without counting as a failure.
    #[error(transparent)]
    Store(#[from] Error),
    /// The observer itself failed (an error it returned, a trap, a deadline).
    #[error("{0}")]
    Failed(String),
}

/// User code run on notifications. The host implements it for Wasm components.
pub trait Observer: Send + Sync + 'static {
    /// Reacts to a notification inside `txn`. Returning `Ok` lets the runtime commit `txn`
    /// (with the observer's ack); returning `Err` discards everything it wrote.
    fn observe(&self, txn: &mut Transaction, notification: &Notification) -> Result<(), ObserveError>;
}

/// Failure and conflict bookkeeping of one (notification, observer) pair.
pub(crate) struct FailState {
    attempts: u32,
    retry_at: Instant,
    /// Runs lost to conflicts in a row.
    losses: u32,
    /// When the notification first lost a run or was held back by its observer's window:
    /// once that is `conflicts::CONFLICT_AGING` ago it backs off no more and may take a slot
    /// beyond the window.
    waiting_since: Option<Instant>,
}

/// When the soonest conflict backoff still running ends (a scanner that found nothing to do
/// sleeps no longer than that, so a backoff is not stretched to its idle wait).
pub(crate) fn next_conflict_retry(inner: &Inner) -> Option<Instant> {
    let now = Instant::now();
    let failures = inner.failures.lock().unwrap_or_else(PoisonError::into_inner);
    failures.values().filter(|f| f.losses > 0 && f.retry_at > now).map(|f| f.retry_at).min()
}

/// How long a run that met a storage failure ([`Error::is_storage_failure`]) waits before it
/// runs again (at most `observer_backoff_max`).
const STORAGE_FAILURE_BACKOFF: Duration = Duration::from_secs(1);

/// Logs an observer run that met a failure of the store itself: at warn at most once per
/// [`STORAGE_FAILURE_WARN_EVERY`] for the whole store (an outage fails every run in flight),
/// else at debug.
fn warn_store_failure(inner: &Inner, observer: &str, cell: &CellRef, e: &Error) {
    let now = now_ms();
    let last = inner.store_failure_warned.load(Ordering::Relaxed);
    let every = STORAGE_FAILURE_WARN_EVERY.as_millis() as u64;
    let due = last == 0 || now.saturating_sub(last) >= every;
    if due
        && inner.store_failure_warned.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        tracing::warn!(
            observer,
            table = %cell.table,
            row = %String::from_utf8_lossy(&cell.row),
            column = %cell.column,
            error = %e,
            "observer run met a failure of the store, not of the observer: it runs again in a second \
             and counts no attempt (observer_store_failures counts these runs)"
        );
    } else {
        tracing::debug!(observer, error = %e, "observer run met a failure of the store; it runs again in a second");
    }
}

/// How often at most a failure of the store that observer runs meet is logged at warn.
const STORAGE_FAILURE_WARN_EVERY: Duration = Duration::from_secs(10);

/// A notification whose observer failed `attempts` times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// Identifier for [`Store::retry_dead_letter`].
    pub id: String,
    /// The notified cell.
    pub cell: CellRef,
    /// The observer that failed.
    pub observer: String,
    /// Failed runs.
    pub attempts: u32,
    /// The last error, as text.
    pub error: String,
    /// Wall-clock milliseconds when it was dead-lettered.
    pub wall_ms: u64,
}

const DEAD_PREFIX: &str = "dead/";

/// Rows read per snapshot by [`Store::notify_existing`].
pub const NOTIFY_EXISTING_PAGE: usize = 1000;

/// The [`DeadLetter::observer`] of a notification that no observer was bound to when the
/// scanner found it (its binding was removed while it was pending). Not a valid observer name.
/// Retrying it once a binding is back runs that binding.
pub const UNBOUND: &str = "(unbound)";

/// What processing one notify cell did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellOutcome {
    /// Every observer is satisfied and the notify cell was cleared.
    Cleared,
    /// Something is left to do (a conflict, a failure awaiting retry, a newer write): the notify
    /// cell stays and the cell is processed again later.
    Pending,
}

fn ack_column(observer: &str) -> String {
    format!("{}ack:{observer}", key::RESERVED_COLUMN_PREFIX)
}

/// Checks an observer name: 1-64 characters of `[A-Za-z0-9_.-]` (it names the ack column).
pub fn validate_observer_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("observer name {name:?} must be 1-64 characters of [A-Za-z0-9_.-]")))
    }
}

fn validate_spec(spec: &ObserverSpec) -> Result<()> {
    validate_observer_name(&spec.name)?;
    key::validate_table(&spec.table)?;
    key::validate_column(&spec.column)?;
    if spec.max_attempts == 0 {
        return Err(Error::InvalidArgument(format!("observer {}: max_attempts must be at least 1", spec.name)));
    }
    Ok(())
}

impl Store {
    /// Binds `observer` to its column: adds the binding to the store's registry (every host
    /// and writer sets its notify cells from then on) and runs it in this process. A binding
    /// of that name already in the registry (another host's) must be the same spec. Fails if
    /// this process already runs an observer of that name, or the column is already bound with
    /// the other [`NotifyKind`].
    pub fn register_observer(&self, spec: ObserverSpec, observer: Arc<dyn Observer>) -> Result<()> {
        validate_spec(&spec)?;
        if self.inner.registry.read().map_err(|_| Error::Closed)?.local().contains_key(&spec.name) {
            return Err(Error::InvalidArgument(format!("an observer named {:?} is already registered", spec.name)));
        }
        let saved = registry::save(self, |specs| match specs.get(&spec.name) {
            Some(saved) if *saved != spec => Err(Error::InvalidArgument(format!(
                "observer {}: the store already binds that name differently ({}/{}, {}, max_attempts {})",
                spec.name, saved.table, saved.column, saved.kind, saved.max_attempts
            ))),
            _ => {
                specs.insert(spec.name.clone(), spec.clone());
                Ok(())
            }
        })?;
        self.change_bindings(saved, |local| {
            local.insert(spec.name.clone(), observer.clone());
        })
    }

    /// Replaces the whole set of observers (hot reload of a configuration): the store's
    /// registry becomes exactly these bindings, and this process runs exactly these observers.
    /// One atomic swap: no scanner ever sees a state in between. Validates everything first;
    /// on error nothing changes. Runs that already started finish on the observers they
    /// started with. On a shared backend, returns once every live host acknowledged the new
    /// bindings (see [`Store::register_observer`]).
    pub fn set_observers(&self, observers: Vec<(ObserverSpec, Arc<dyn Observer>)>) -> Result<()> {
        let mut wanted = BTreeMap::new();
        let mut local: BTreeMap<String, Arc<dyn Observer>> = BTreeMap::new();
        for (spec, observer) in observers {
            validate_spec(&spec)?;
            let name = spec.name.clone();
            if local.insert(name.clone(), observer).is_some() {
                return Err(Error::InvalidArgument(format!("two observers are named {name:?}")));
            }
            wanted.insert(name, spec);
        }
        registry::check_kinds(&wanted)?;
        let saved = registry::save(self, |specs| {
            *specs = wanted.clone();
            Ok(())
        })?;
        self.change_bindings(saved, |l| *l = local.clone())
    }

    /// Swaps in the saved registry with this process's observers changed by `edit`,
    /// acknowledges it, and waits for the other live workers to.
    pub(crate) fn change_bindings(
        &self,
        saved: registry::Saved,
        edit: impl FnOnce(&mut BTreeMap<String, Arc<dyn Observer>>),
    ) -> Result<()> {
        let version = saved.version;
        let mut local = self.inner.registry.read().map_err(|_| Error::Closed)?.local().clone();
        edit(&mut local);
        match registry::install(&self.inner, saved, Some(local.clone()))? {
            Some(old) => registry::acknowledge(&self.inner, old),
            // A newer version (another host's) is already in: keep it, with these observers.
            None => {
                registry::install_local(&self.inner, local)?;
            }
        }
        registry::await_acknowledged(&self.inner, version)
    }

    /// Swaps the implementation of an observer this process runs atomically (hot reload): runs
    /// that already started finish on the old one. The store's bindings do not change.
    pub fn replace_observer(&self, name: &str, observer: Arc<dyn Observer>) -> Result<()> {
        let mut local = self.inner.registry.read().map_err(|_| Error::Closed)?.local().clone();
        if !local.contains_key(name) {
            return Err(Error::NotFound(format!("observer {name:?}")));
        }
        local.insert(name.to_owned(), observer);
        registry::install_local(&self.inner, local)?;
        Ok(())
    }

    /// Unbinds an observer: removes it from the store's registry and stops running it here.
    /// Pending notifications of its column stay for other observers; if none is left, the
    /// scanner turns them into dead letters of [`UNBOUND`].
    pub fn unregister_observer(&self, name: &str) -> Result<()> {
        let saved = registry::save(self, |specs| {
            specs.remove(name).map(|_| ()).ok_or_else(|| Error::NotFound(format!("observer {name:?}")))
        })?;
        self.change_bindings(saved, |local| {
            local.remove(name);
        })
    }

    /// The store's bindings: every observer the registry names, whether or not this process
    /// runs it (see [`Store::local_observers`]).
    pub fn observers(&self) -> Vec<ObserverSpec> {
        // The registry is swapped whole, never changed in place: a poisoned lock still holds a
        // consistent one (an empty answer would hide every binding).
        let registry = self.inner.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry.specs().values().cloned().collect()
    }

    /// Names of the bindings this process runs (has an observer for).
    pub fn local_observers(&self) -> Vec<String> {
        let registry = self.inner.registry.read().unwrap_or_else(PoisonError::into_inner);
        registry.local().keys().filter(|n| registry.specs().contains_key(*n)).cloned().collect()
    }

    /// Up to `limit` pending notifications, in key order.
    pub fn pending_notifications(&self, limit: usize) -> Result<Vec<NotifyEntry>> {
        self.inner.backend.scan_notify(None, limit)
    }

    /// Runs the observers of one notify cell and clears it if all are satisfied. The scanner
    /// calls this under an advisory row lock; calling it directly (tests, tools) is safe too:
    /// concurrent runs conflict on the ack and at most one commits.
    pub fn process_notification(&self, entry: &NotifyEntry) -> Result<CellOutcome> {
        process(&self.inner, entry)
    }

    /// Lists dead letters.
    pub fn dead_letters(&self) -> Result<Vec<DeadLetter>> {
        self.inner.backend.meta_scan(DEAD_PREFIX)?.into_iter().map(|(id, v)| decode_dead(id, &v)).collect()
    }

    /// Moves a dead letter back to pending: its observer runs again from attempt 1. An `id`
    /// that [`Store::dead_letters`] does not list is [`Error::NotFound`].
    pub fn retry_dead_letter(&self, id: &str) -> Result<()> {
        let not_found = || Error::NotFound(format!("dead letter {id:?}"));
        // Only a dead letter's key: another metadata key (the oracle's, a counter's) is not a
        // dead letter, and would otherwise be read as a corrupt one, or deleted.
        if !id.starts_with(DEAD_PREFIX) {
            return Err(not_found());
        }
        let raw = self.inner.backend.meta_get(id)?.ok_or_else(not_found)?;
        let dead = decode_dead(id.to_owned(), &raw)?;
        // Forget the ack so the observer runs even though it "acknowledged" the change when it
        // was dead-lettered.
        if dead.observer != UNBOUND {
            let ack = CellRef::new(dead.cell.table.clone(), dead.cell.row.clone(), ack_column(&dead.observer));
            self.run(|txn| {
                txn.set_reserved(ack.clone(), None);
                Ok(())
            })?;
        }
        let ts = self.inner.oracle.next()?;
        let notify = Op::Row(RowMutation {
            table: dead.cell.table.clone(),
            row: dead.cell.row.clone(),
            conditions: vec![],
            mutations: vec![Mutation::SetNotify { column: dead.cell.column.clone(), ts, writer: None }],
        });
        // Notify first, then forget the record: a crash in between leaves a duplicate, never a loss.
        self.inner.backend.apply(vec![notify])?;
        self.inner.backend.apply(vec![Op::MetaDelete { key: id.to_owned() }])?;
        // One `remove`, and every other holder makes single calls too: a poisoned map is
        // consistent, and skipping the removal would delay the retry by a stale backoff.
        let mut failures = self.inner.failures.lock().unwrap_or_else(PoisonError::into_inner);
        failures.remove(&(notify_position(&dead.cell), dead.observer.clone()));
        drop(failures);
        self.inner.notified(std::iter::once(key::row_prefix(&dead.cell.table, &dead.cell.row)));
        Ok(())
    }

    /// Removes a dead letter for good: its notification is not run again. A strong observer's
    /// change was acknowledged when it was dead-lettered (a later write still triggers it); an
    /// [`UNBOUND`] one's notification was cleared then. What GC kept for a retry (a Delete
    /// record) becomes collectable. An `id` that [`Store::dead_letters`] does not list is
    /// [`Error::NotFound`].
    pub fn discard_dead_letter(&self, id: &str) -> Result<()> {
        let not_found = || Error::NotFound(format!("dead letter {id:?}"));
        if !id.starts_with(DEAD_PREFIX) {
            return Err(not_found());
        }
        let raw = self.inner.backend.meta_get(id)?.ok_or_else(not_found)?;
        let dead = decode_dead(id.to_owned(), &raw)?;
        self.inner.backend.apply(vec![Op::MetaDelete { key: id.to_owned() }])?;
        let mut failures = self.inner.failures.lock().unwrap_or_else(PoisonError::into_inner);
        failures.remove(&(notify_position(&dead.cell), dead.observer.clone()));
        Ok(())
    }

    /// Sets the notify cell of `table/column` in every row of `[start, end)` (`end = None`: to
    /// the end of the table) where the column has a value now, so that its observers run on
    /// data written before they were bound: a binding is notified only of the writes made while
    /// it exists. Returns how many rows were notified.
    ///
    /// A strong observer still skips a row whose newest write it has acknowledged, so notifying
    /// rows it already processed costs a read each, not a run. Fails if no observer is bound to
    /// the column (the notifications would only become dead letters). Pages through the rows,
    /// [`NOTIFY_EXISTING_PAGE`] per snapshot; a row written meanwhile is notified by its write.
    pub fn notify_existing(&self, table: &str, column: &str, start: &[u8], end: Option<&[u8]>) -> Result<u64> {
        self.notify_rows(table, column, start, end, false)
    }

    /// [`Store::notify_existing`], and every strong observer of `table/column` runs again on
    /// those rows even where it has acknowledged their newest write: their acks are removed
    /// first (in one transaction per page). For a new version of an observer, whose output
    /// on the old rows should be recomputed. Weak observers have no acks: for them it is
    /// [`Store::notify_existing`].
    pub fn rerun_existing(&self, table: &str, column: &str, start: &[u8], end: Option<&[u8]>) -> Result<u64> {
        self.notify_rows(table, column, start, end, true)
    }

    fn notify_rows(&self, table: &str, column: &str, start: &[u8], end: Option<&[u8]>, rerun: bool) -> Result<u64> {
        key::validate_table(table)?;
        key::validate_column(column)?;
        let acks: Vec<String> = {
            let registry = self.inner.registry.read().map_err(|_| Error::Closed)?;
            if registry.kind_of(table, column).is_none() {
                return Err(Error::InvalidArgument(format!("no observer is bound to {table}/{column}")));
            }
            registry
                .observers(table, column)
                .iter()
                .filter(|b| rerun && b.spec.kind == NotifyKind::Strong)
                .map(|b| ack_column(&b.spec.name))
                .collect()
        };
        let mut from = start.to_vec();
        let mut notified = 0u64;
        loop {
            let page = self.begin()?.scan(table, &from, end, Some(&[column]), NOTIFY_EXISTING_PAGE)?;
            let Some(last) = page.last() else { break };
            if !acks.is_empty() {
                // Forget the acks before notifying: a run that starts after the notification
                // then finds no ack and runs (one that committed an ack meanwhile ran on the
                // rows' current data anyway).
                self.run(|txn| {
                    for e in &page {
                        for ack in &acks {
                            txn.set_reserved(CellRef::new(table, e.row.clone(), ack.clone()), None);
                        }
                    }
                    Ok(())
                })?;
            }
            let ts = self.inner.oracle.next()?;
            let ops = page
                .iter()
                .map(|e| {
                    Op::Row(RowMutation {
                        table: table.to_owned(),
                        row: e.row.clone(),
                        conditions: vec![],
                        mutations: vec![Mutation::SetNotify { column: column.to_owned(), ts, writer: None }],
                    })
                })
                .collect();
            self.inner.backend.apply(ops)?;
            self.inner.notified(page.iter().map(|e| key::row_prefix(table, &e.row)));
            notified += page.len() as u64;
            if page.len() < NOTIFY_EXISTING_PAGE {
                break;
            }
            // The next row after `last` (one column per row: one cell per row).
            from = last.row.clone();
            from.push(0);
        }
        Ok(notified)
    }

    /// Waits until no notification is pending and no scanner is mid-row (the pipeline reached
    /// its fixed point). Returns false on timeout.
    pub fn wait_quiescent(&self, timeout: Duration) -> Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            // See the scanner's `RowLock` on a poisoned set (an error would mean "never idle").
            let idle = self.inner.row_locks.lock().unwrap_or_else(PoisonError::into_inner).is_empty();
            if idle && self.inner.backend.scan_notify(None, 1)?.is_empty() {
                return Ok(true);
            }
            if Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn process(inner: &Arc<Inner>, entry: &NotifyEntry) -> Result<CellOutcome> {
    let cell = &entry.cell;
    if !entry.writers.is_empty() {
        // Weak notifications set at prewrite: their transactions may not have committed yet.
        // Decide each writer through its primary: committed → re-notify at its commit
        // timestamp (what its commit does, unless it died after its commit point) and forget
        // the name; rolled back → forget the name; live → keep it (its commit re-notifies).
        let column = &cell.column;
        let (mut settled, mut committed, mut rolled_back) = (Vec::new(), false, false);
        for w in &entry.writers {
            match lock::primary_status(inner, &w.primary, w.start_ts, Force::No)? {
                TxnStatus::Live => {}
                TxnStatus::Committed(commit_ts) => {
                    committed = true;
                    settled.push(Mutation::SetNotify { column: column.clone(), ts: commit_ts, writer: None });
                    settled.push(Mutation::DropNotifyWriter { column: column.clone(), start_ts: w.start_ts });
                }
                TxnStatus::RolledBack => {
                    rolled_back = true;
                    settled.push(Mutation::DropNotifyWriter { column: column.clone(), start_ts: w.start_ts });
                }
            }
        }
        if !settled.is_empty() {
            let op = RowMutation {
                table: cell.table.clone(),
                row: cell.row.clone(),
                conditions: vec![],
                mutations: settled,
            };
            inner.backend.apply(vec![Op::Row(op)])?;
        }
        if committed {
            // Processed again with the commit timestamp it now has.
            return Ok(CellOutcome::Pending);
        }
        if entry.ts == Timestamp::ZERO && !rolled_back {
            // Pending only through the names of writers in flight: nothing to run until one
            // of them commits (and notifies again).
            return Ok(CellOutcome::Pending);
        }
        // A change is pending, or a writer was found rolled back — which is also what a
        // committed writer looks like once GC removed its commit record under a newer write:
        // run now (at worst a spurious run), even while other writers are in flight (a hot
        // weak cell always has some); the clear keeps their names, and each one's commit
        // notifies again. (A writer that aborts removes its own name.)
    }
    // Not the registry itself: a registry change waits for the commits holding the old one.
    let observers = inner.registry.read().map_err(|_| Error::Closed)?.observers(&cell.table, &cell.column);
    if observers.is_empty() {
        // The column's binding went away while this was pending. Clearing it silently would
        // lose the change for good (a binding added later is not notified of old writes): keep
        // it as a dead letter, which `retry_dead_letter` turns back into a notification.
        unbound_dead_letter(inner, cell)?;
    }
    // Taken before the first run (none while every observer backs off: no timestamp per look).
    let mut t0 = observers.is_empty().then_some(entry.ts);
    let mut settled = true;
    let position = notify_position(cell);
    // Clear only if every write and lock the runs could have missed is absent.
    let clear = |t0: Timestamp| RowMutation {
        table: cell.table.clone(),
        row: cell.row.clone(),
        conditions: if observers.is_empty() {
            vec![]
        } else {
            vec![
                Condition::NoLock { column: cell.column.clone() },
                Condition::NoWriteSince { column: cell.column.clone(), since: t0 },
            ]
        },
        mutations: vec![Mutation::ClearNotify { column: cell.column.clone(), max_ts: t0 }],
    };
    // With one observer, the clear is the next thing done after its run commits: it rides
    // with that commit when the commit is one step, and this is its outcome.
    let mut cleared = None;
    for b in &observers {
        let Some(observer) = &b.observer else {
            // Bound in the store, but this process has no implementation: a host that has one
            // runs it. Not settled, so the notify cell stays for it.
            settled = false;
            continue;
        };
        let key = (position.clone(), b.spec.name.clone());
        let (attempts, waiting_since) = {
            let failures = inner.failures.lock().map_err(|_| Error::Closed)?;
            match failures.get(&key) {
                Some(f) if f.retry_at > Instant::now() => {
                    settled = false;
                    continue;
                }
                Some(f) => (f.attempts, f.waiting_since),
                None => (0, None),
            }
        };
        let aged = waiting_since.is_some_and(|t| t.elapsed() >= conflicts::CONFLICT_AGING);
        let Some(_slot) = conflicts::Conflicts::admit(inner, &b.spec.name, aged) else {
            // The observer's runs conflict with each other: as many are in flight as its
            // window allows. Held back, not run (and so not lost).
            let now = Instant::now();
            let mut failures = inner.failures.lock().map_err(|_| Error::Closed)?;
            let f =
                failures.entry(key).or_insert(FailState { attempts, retry_at: now, losses: 0, waiting_since: None });
            f.waiting_since.get_or_insert(now);
            settled = false;
            continue;
        };
        if t0.is_none() {
            t0 = Some(inner.oracle.next()?);
        }
        let mut run_ts = None;
        let then = match t0 {
            Some(t0) if observers.len() == 1 => vec![Op::Row(clear(t0))],
            _ => Vec::new(),
        };
        match run_observer(inner, b, observer.as_ref(), entry, attempts + 1, &mut run_ts, then, &mut cleared) {
            Ok(()) => {
                inner.failures.lock().map_err(|_| Error::Closed)?.remove(&key);
            }
            Err(ObserveError::Store(e)) if e.is_retryable() => {
                // Lost to a conflict: not a failure, never a dead letter; runs again after a
                // backoff with jitter, which ends as the notification ages (no starving).
                let now = Instant::now();
                let mut failures = inner.failures.lock().map_err(|_| Error::Closed)?;
                let f = failures.entry(key).or_insert(FailState {
                    attempts,
                    retry_at: now,
                    losses: 0,
                    waiting_since: None,
                });
                f.losses = f.losses.saturating_add(1);
                let first = *f.waiting_since.get_or_insert(now);
                f.retry_at = now + conflicts::conflict_backoff(f.losses, now - first);
                settled = false;
            }
            Err(ObserveError::Store(e)) if e.is_storage_failure() => {
                // The store cannot write (a full disk) or cannot be reached (a Redis master
                // down, a lapsed lease): no fault of the observer, so not a failure and no
                // attempt; runs again once the backoff is over (the scanner waits anyway while
                // the store reports a failure of its file).
                inner.counters.observer_store_failures.fetch_add(1, Ordering::Relaxed);
                warn_store_failure(inner, &b.spec.name, cell, &e);
                let mut failures = inner.failures.lock().map_err(|_| Error::Closed)?;
                let f = failures.entry(key).or_insert(FailState {
                    attempts,
                    retry_at: Instant::now(),
                    losses: 0,
                    waiting_since: None,
                });
                f.retry_at = Instant::now() + inner.config.observer_backoff_max.min(STORAGE_FAILURE_BACKOFF);
                settled = false;
            }
            Err(e) => {
                inner.counters.observer_failures.fetch_add(1, Ordering::Relaxed);
                let attempts = attempts + 1;
                if attempts >= b.spec.max_attempts {
                    dead_letter(inner, b, cell, attempts, &e.to_string(), run_ts)?;
                    inner.failures.lock().map_err(|_| Error::Closed)?.remove(&key);
                } else {
                    // Doubling from `observer_backoff` (attempts ≥ 1 here), capped.
                    let config = &inner.config;
                    let backoff = config
                        .observer_backoff
                        .saturating_mul(1u32 << (attempts - 1).min(20))
                        .min(config.observer_backoff_max);
                    tracing::warn!(
                        observer = %b.spec.name,
                        table = %cell.table,
                        row = %String::from_utf8_lossy(&cell.row),
                        column = %cell.column,
                        attempt = attempts,
                        max_attempts = b.spec.max_attempts,
                        retry_in_ms = backoff.as_millis() as u64,
                        error = %e,
                        "observer run failed; it runs again after a backoff"
                    );
                    inner.failures.lock().map_err(|_| Error::Closed)?.insert(
                        key,
                        FailState { attempts, retry_at: Instant::now() + backoff, losses: 0, waiting_since: None },
                    );
                    settled = false;
                }
            }
        }
    }
    if !settled {
        return Ok(CellOutcome::Pending);
    }
    let outcome = match cleared {
        Some(outcome) => outcome,
        None => {
            // Every observer ran (or there is none): `t0` was taken.
            let op = clear(t0.unwrap_or(entry.ts));
            inner.backend.apply(vec![Op::Row(op)])?.swap_remove(0)
        }
    };
    Ok(match outcome {
        Outcome::Applied => {
            inner.counters.notifications_cleared.fetch_add(1, Ordering::Relaxed);
            CellOutcome::Cleared
        }
        Outcome::ConditionFailed { .. } => CellOutcome::Pending,
    })
}

/// Runs one observer on one cell in a new transaction; `run_ts` receives its start timestamp.
/// `then` (the notification's clear, or nothing) is applied with a one-step commit of the run,
/// after it and only if it applied; `cleared` receives its outcome then (see
/// [`Transaction::commit_then`]).
#[allow(clippy::too_many_arguments)]
fn run_observer(
    inner: &Arc<Inner>,
    b: &Bound,
    observer: &dyn Observer,
    entry: &NotifyEntry,
    attempt: u32,
    run_ts: &mut Option<Timestamp>,
    then: Vec<Op>,
    cleared: &mut Option<Outcome>,
) -> Result<(), ObserveError> {
    let cell = &entry.cell;
    let span = tracing::debug_span!(
        "observer_run",
        observer = %b.spec.name,
        table = %cell.table,
        row = %String::from_utf8_lossy(&cell.row),
        column = %cell.column,
        attempt,
        start_ts = tracing::field::Empty,
    );
    let _entered = span.enter();
    let result = run_observer_in_span(inner, b, observer, entry, attempt, run_ts, then, cleared);
    match &result {
        Ok(()) => tracing::debug!("observer run done"),
        Err(ObserveError::Store(e)) if e.is_retryable() => tracing::debug!(error = %e, "observer run conflicted"),
        Err(e) => tracing::debug!(error = %e, "observer run failed"),
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn run_observer_in_span(
    inner: &Arc<Inner>,
    b: &Bound,
    observer: &dyn Observer,
    entry: &NotifyEntry,
    attempt: u32,
    run_ts: &mut Option<Timestamp>,
    then: Vec<Op>,
    cleared: &mut Option<Outcome>,
) -> Result<(), ObserveError> {
    let cell = &entry.cell;
    let mut txn = Transaction::begin(inner.clone())?;
    *run_ts = Some(txn.start_ts());
    tracing::Span::current().record("start_ts", txn.start_ts().raw());
    let mut commit_ts = None;
    if b.spec.kind == NotifyKind::Strong {
        let ack_col = ack_column(&b.spec.name);
        let reads = txn.read_row(&cell.table, &cell.row, &[&cell.column, &ack_col])?;
        let latest = reads[0].write.as_ref().map(|(ts, _)| *ts);
        let ack = match inner.values.read_ref(&reads[1])? {
            Some(v) => Timestamp::from_raw(u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| Error::Corrupt(format!("ack column {ack_col} of {cell} is not 8 bytes")))?,
            )),
            None => Timestamp::ZERO,
        };
        // The last run (at `ack`) saw every write committed before it.
        if latest.is_none_or(|c| c < ack) {
            inner.counters.observer_skips.fetch_add(1, Ordering::Relaxed);
            inner.conflicts.record(&b.spec.name, RunEnd::Skipped);
            return Ok(());
        }
        commit_ts = latest;
        let ack_cell = CellRef::new(cell.table.clone(), cell.row.clone(), ack_col);
        txn.set_reserved(ack_cell, Some(txn.start_ts().raw().to_be_bytes().to_vec()));
    }
    let n = Notification { cell: cell.clone(), kind: b.spec.kind, commit_ts, attempt };
    let ran = observer.observe(&mut txn, &n).and_then(|()| {
        // A fold counts its deltas before the commit, and itself as a fold once it committed.
        let folded = if b.spec.name == crate::combine::FOLDER { crate::combine::deltas_deleted(&txn) } else { 0 };
        let (ts, then_outcomes) = txn.commit_then(then)?;
        *cleared = then_outcomes.and_then(|mut o| o.pop());
        Ok((folded, ts))
    });
    if let Err(e) = &ran {
        // A run (the observer was called) that did not commit.
        match e {
            ObserveError::Store(e) if e.is_retryable() => {
                inner.counters.observer_conflicts.fetch_add(1, Ordering::Relaxed);
                inner.conflicts.lost(&b.spec.name, e.conflict_cell().unwrap_or(cell));
            }
            // The store's failure, not the run's: it is run again.
            ObserveError::Store(e) if e.is_storage_failure() => {}
            _ => inner.conflicts.record(&b.spec.name, RunEnd::Failed),
        }
    }
    let (folded, _) = ran?;
    if b.spec.name == crate::combine::FOLDER {
        // A fold: counted as such, not as an observer run (its window widens as any run's).
        inner.conflicts.record(&b.spec.name, RunEnd::Committed);
        if folded > 0 {
            inner.counters.combine_folds.fetch_add(1, Ordering::Relaxed);
            inner.counters.combine_deltas_folded.fetch_add(folded, Ordering::Relaxed);
        }
        return Ok(());
    }
    inner.counters.observer_runs.fetch_add(1, Ordering::Relaxed);
    inner.conflicts.record(&b.spec.name, RunEnd::Committed);
    // Freshness: from the change the run consumed to now. For a weak observer that is the
    // notification; for a strong one the later of the newest write it saw and the
    // notification, so that a notification made after the write (`notify_existing`,
    // `rerun_existing`, a retried dead letter) counts from itself, not from the old write. (A
    // write's own notification is set at its start timestamp, or at its commit timestamp by a
    // one-phase commit: never after the commit it announces.)
    let changed = commit_ts.map_or(entry.ts, |c| c.max(entry.ts));
    if changed != Timestamp::ZERO {
        inner.freshness.record(inner, &b.spec.name, changed, Instant::now());
    }
    Ok(())
}

/// Records a dead letter. A strong observer's change is acknowledged as of `failed_run_ts`,
/// the snapshot of the last failed run: writes after it were never seen by a failing run and
/// still trigger the observer.
fn dead_letter(
    inner: &Arc<Inner>,
    b: &Bound,
    cell: &CellRef,
    attempts: u32,
    error: &str,
    failed_run_ts: Option<Timestamp>,
) -> Result<()> {
    tracing::warn!(
        observer = %b.spec.name,
        table = %cell.table,
        row = %String::from_utf8_lossy(&cell.row),
        column = %cell.column,
        attempts,
        error,
        "dead letter: the observer failed on every attempt"
    );
    let id = format!("{DEAD_PREFIX}{}/{}", hex(&notify_position(cell)), b.spec.name);
    let record = encode_dead(cell, &b.spec.name, attempts, error, now_ms());
    inner.backend.apply(vec![Op::MetaPut { key: id, value: record }])?;
    if b.spec.kind == NotifyKind::Strong
        && let Some(ack_ts) = failed_run_ts
    {
        // Acknowledge the change so the observer stops running on it; a retry forgets the ack.
        let ack = CellRef::new(cell.table.clone(), cell.row.clone(), ack_column(&b.spec.name));
        Store::of(inner.clone()).run(|txn| {
            txn.set_reserved(ack.clone(), Some(ack_ts.raw().to_be_bytes().to_vec()));
            Ok(())
        })?;
    }
    inner.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Records a notification without observer as a dead letter of [`UNBOUND`]. Idempotent: the
/// same cell found again (after a crash before its clear, or by two scanner threads at once)
/// keeps the one record and counts it once.
fn unbound_dead_letter(inner: &Arc<Inner>, cell: &CellRef) -> Result<()> {
    // Two scanner threads of this process can take the same cell in one pass; the check and
    // the write are one step for them. (Hosts sharing a backend can still both count it: the
    // counter is per process.)
    static RECORDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = RECORDING.lock().map_err(|_| Error::Closed)?;
    let id = format!("{DEAD_PREFIX}{}/{UNBOUND}", hex(&notify_position(cell)));
    if inner.backend.meta_get(&id)?.is_some() {
        return Ok(());
    }
    let error = format!(
        "no observer is bound to {}/{}: this change was not processed (bind one, then retry)",
        cell.table, cell.column
    );
    tracing::warn!(
        table = %cell.table,
        row = %String::from_utf8_lossy(&cell.row),
        column = %cell.column,
        "dead letter: a pending notification has no observer any more"
    );
    inner.backend.apply(vec![Op::MetaPut { key: id, value: encode_dead(cell, UNBOUND, 0, &error, now_ms()) }])?;
    inner.counters.dead_letters.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// True if a dead letter of some observer holds a notification of `cell` (its change has not
/// been seen yet: GC keeps what a retry needs).
pub(crate) fn has_dead_letter(inner: &Inner, cell: &CellRef) -> Result<bool> {
    let prefix = format!("{DEAD_PREFIX}{}/", hex(&notify_position(cell)));
    Ok(!inner.backend.meta_scan(&prefix)?.is_empty())
}

/// Lower-case hex (a `format!` per byte made GC's check of every collectable Delete for a
/// dead letter a quarter of its pass).
fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * b.len());
    for &x in b {
        out.push(char::from(DIGITS[usize::from(x >> 4)]));
        out.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    out
}

fn encode_dead(cell: &CellRef, observer: &str, attempts: u32, error: &str, wall_ms: u64) -> Vec<u8> {
    let mut out = vec![1u8];
    for part in [cell.table.as_bytes(), &cell.row, cell.column.as_bytes(), observer.as_bytes(), error.as_bytes()] {
        out.extend_from_slice(&(part.len() as u32).to_le_bytes());
        out.extend_from_slice(part);
    }
    out.extend_from_slice(&attempts.to_le_bytes());
    out.extend_from_slice(&wall_ms.to_le_bytes());
    out
}

fn decode_dead(id: String, b: &[u8]) -> Result<DeadLetter> {
    let bad = || Error::Corrupt(format!("dead letter {id:?} does not decode"));
    let mut rest = b.strip_prefix(&[1u8]).ok_or_else(bad)?;
    let mut parts: Vec<Vec<u8>> = Vec::new();
    for _ in 0..5 {
        let n = u32::from_le_bytes(rest.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?) as usize;
        parts.push(rest.get(4..4 + n).ok_or_else(bad)?.to_vec());
        rest = &rest[4 + n..];
    }
    let attempts = u32::from_le_bytes(rest.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let wall_ms = u64::from_le_bytes(rest.get(4..12).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
    let s = |v: &Vec<u8>| String::from_utf8(v.clone()).map_err(|_| bad());
    Ok(DeadLetter {
        cell: CellRef { table: s(&parts[0])?, row: parts[1].clone(), column: s(&parts[2])? },
        observer: s(&parts[3])?,
        error: s(&parts[4])?,
        attempts,
        wall_ms,
        id,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_is_two_lower_case_digits_per_byte() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(super::hex(&all), expected);
        assert_eq!(super::hex(&[]), "");
    }
}
