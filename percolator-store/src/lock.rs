//! Meeting a lock: back off, then resolve it through its primary (the paper's
//! `BackoffAndMaybeCleanupLock`).
//!
//! A lock's fate is its primary's. If the primary has a commit record for the lock's start_ts the
//! transaction committed and the lock is **rolled forward** (its write record is written at the
//! primary's commit_ts). If the primary was rolled back, so is the lock. If the primary is still
//! locked, the owner is given time: the lock is rolled back only when the owning worker's lease
//! has expired or the lock's TTL (refreshed by the owner's heartbeat) has run out.

use std::time::{Duration, Instant};

use crate::bigtable::*;
use crate::error::{ConflictKind, Error, Result};
use crate::store::Inner;
use crate::timestamp::Timestamp;
use crate::worker::now_ms;

/// What happened to the transaction that owns a lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxnStatus {
    /// Committed at this timestamp.
    Committed(Timestamp),
    /// Rolled back (by its owner or by a resolver).
    RolledBack,
    /// Still running: its worker is alive and its lock has not expired.
    Live,
}

/// Whether resolution may roll back a lock whose owner still looks alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Force {
    /// Only dead or expired owners are rolled back.
    No,
    /// The caller knows the owner cannot be running (GC below the safepoint on an exclusive
    /// backend).
    Yes,
}

fn expired(lock: &LockRecord) -> bool {
    now_ms() > lock.wall_ms.saturating_add(lock.ttl_ms)
}

/// Decides the fate of the transaction that started at `start_ts` from its primary cell,
/// rolling the primary back if its owner is dead or expired (or `force`).
pub(crate) fn primary_status(inner: &Inner, primary: &CellRef, start_ts: Timestamp, force: Force) -> Result<TxnStatus> {
    let backend = inner.backend.as_ref();
    loop {
        let read = backend.read_row(&primary.table, &primary.row, &[&primary.column], start_ts)?;
        let lock = read.into_iter().next().and_then(|r| r.lock).filter(|(ts, _)| *ts == start_ts);
        if let Some((_, lock)) = lock {
            if force == Force::No && inner.worker_alive(lock.worker)? && !expired(&lock) {
                return Ok(TxnStatus::Live);
            }
            let op = RowMutation {
                table: primary.table.clone(),
                row: primary.row.clone(),
                conditions: vec![Condition::LockIs { column: primary.column.clone(), start_ts }],
                mutations: rollback_mutations(&primary.column, start_ts, true),
            };
            if inner.backend.apply(vec![Op::Row(op)])?[0] == Outcome::Applied {
                inner.counters.rolled_back.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                fail::fail_point!("roll-back-after-primary", |_| Err(Error::Storage(
                    "failpoint roll-back-after-primary".into()
                )));
                return Ok(TxnStatus::RolledBack);
            }
            // The lock changed under us (committed or rolled back meanwhile): look again.
            continue;
        }
        return match backend.find_write(primary, start_ts)? {
            Some((_, WriteRecord { kind: WriteKind::Rollback, .. })) => Ok(TxnStatus::RolledBack),
            Some((commit_ts, _)) => Ok(TxnStatus::Committed(commit_ts)),
            None => {
                // Neither locked nor decided: the primary was never prewritten (or its rollback
                // record was garbage-collected). Leave a rollback record so a delayed prewrite
                // fails; the condition keeps us from racing a prewrite that lands right now.
                fail::fail_point!("resolve-before-rollback-record");
                let op = RowMutation {
                    table: primary.table.clone(),
                    row: primary.row.clone(),
                    conditions: vec![Condition::LockAbsent { column: primary.column.clone(), start_ts }],
                    mutations: vec![Mutation::PutWrite {
                        column: primary.column.clone(),
                        commit_ts: start_ts,
                        write: WriteRecord { start_ts, kind: WriteKind::Rollback },
                    }],
                };
                // Applied or not, look again rather than answer "rolled back": the condition
                // only says no lock is there *now*, and the owner may have prewritten and
                // committed its primary since the two reads above (a lock and a commit record
                // both gone unseen). After the record no prewrite of the primary succeeds, so
                // the next look is final: its commit record if it committed before the record
                // was written (the rollback record beside it is then inert: reads skip it, and
                // `find_write` answers the commit), else this rollback record. `find_write`
                // reads the record at start_ts before the commits above it, so that a look
                // that began before such a commit and ends after the record (another
                // resolver's) does not answer "rolled back" (`cells::find_write`).
                inner.backend.apply(vec![Op::Row(op)])?;
                continue;
            }
        };
    }
}

/// The mutations that roll back one cell's lock; `record` leaves a rollback write record
/// (needed on primaries only).
pub(crate) fn rollback_mutations(column: &str, start_ts: Timestamp, record: bool) -> Vec<Mutation> {
    let mut m = vec![
        Mutation::DeleteLock { column: column.to_owned(), start_ts },
        Mutation::DeleteData { column: column.to_owned(), start_ts },
    ];
    if record {
        m.push(Mutation::PutWrite {
            column: column.to_owned(),
            commit_ts: start_ts,
            write: WriteRecord { start_ts, kind: WriteKind::Rollback },
        });
    }
    m
}

/// Resolves the lock at `(cell, start_ts)`; returns the owner's status. After `Committed` or
/// `RolledBack` the lock is gone.
pub(crate) fn resolve(
    inner: &Inner,
    cell: &CellRef,
    start_ts: Timestamp,
    lock: &LockRecord,
    force: Force,
) -> Result<TxnStatus> {
    let status = primary_status(inner, &lock.primary, start_ts, force)?;
    if *cell == lock.primary {
        return Ok(status);
    }
    match status {
        TxnStatus::Committed(commit_ts) => roll_forward(inner, cell, start_ts, commit_ts)?,
        TxnStatus::RolledBack => {
            let op = RowMutation {
                table: cell.table.clone(),
                row: cell.row.clone(),
                conditions: vec![Condition::LockIs { column: cell.column.clone(), start_ts }],
                mutations: rollback_mutations(&cell.column, start_ts, false),
            };
            inner.backend.apply(vec![Op::Row(op)])?;
        }
        TxnStatus::Live => {}
    }
    Ok(status)
}

/// Finishes a committed transaction's secondary: its write record at `commit_ts`, its lock gone.
pub(crate) fn roll_forward(inner: &Inner, cell: &CellRef, start_ts: Timestamp, commit_ts: Timestamp) -> Result<()> {
    fail::fail_point!("roll-forward-before-secondary", |_| Err(Error::Storage(
        "failpoint roll-forward-before-secondary".into()
    )));
    // A Put stages its value at start_ts; a Delete stages nothing. The lock condition below
    // guarantees the staged value did not change between this read and the mutation.
    let kind = match inner.backend.read_data(cell, start_ts)? {
        Some(v) => WriteKind::Put(v),
        None => WriteKind::Delete,
    };
    let op = RowMutation {
        table: cell.table.clone(),
        row: cell.row.clone(),
        conditions: vec![Condition::LockIs { column: cell.column.clone(), start_ts }],
        mutations: vec![
            Mutation::DeleteLock { column: cell.column.clone(), start_ts },
            Mutation::DeleteData { column: cell.column.clone(), start_ts },
            Mutation::PutWrite { column: cell.column.clone(), commit_ts, write: WriteRecord { start_ts, kind } },
        ],
    };
    if inner.backend.apply(vec![Op::Row(op)])?[0] == Outcome::Applied {
        inner.counters.rolled_forward.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}

/// Backoff state of one read that meets locks: waits for live owners, up to `lock_wait`.
pub(crate) struct LockWaiter {
    started: Instant,
    backoff: Duration,
}

impl LockWaiter {
    pub(crate) fn new() -> LockWaiter {
        LockWaiter { started: Instant::now(), backoff: Duration::from_millis(1) }
    }

    /// Handles a lock met by a reader: resolves it if possible, otherwise backs off. Returns an
    /// error once the wait exceeds the store's `lock_wait`.
    pub(crate) fn handle(
        &mut self,
        inner: &Inner,
        cell: &CellRef,
        start_ts: Timestamp,
        lock: &LockRecord,
    ) -> Result<()> {
        if resolve(inner, cell, start_ts, lock, Force::No)? != TxnStatus::Live {
            return Ok(());
        }
        inner.counters.lock_waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if self.started.elapsed() >= inner.config.lock_wait {
            return Err(Error::conflict(ConflictKind::LockWaitTimeout, &cell.table, &cell.row, &cell.column));
        }
        // Never sleep past the lock's expiry by much: that is when it becomes resolvable.
        let until_expiry = Duration::from_millis(lock.wall_ms.saturating_add(lock.ttl_ms).saturating_sub(now_ms()) + 1);
        std::thread::sleep(self.backoff.min(until_expiry));
        self.backoff = (self.backoff * 2).min(Duration::from_millis(50));
        Ok(())
    }
}
