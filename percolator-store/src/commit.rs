//! The commit protocol (paper §2.2, Figure 6): prewrite the primary, prewrite the secondaries,
//! take a commit timestamp, commit the primary (the commit point), commit the secondaries.
//!
//! Named failpoints (feature `failpoints`) sit between the phases; see `docs/design.md`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use fail::fail_point;

use crate::bigtable::*;
use crate::error::{ConflictKind, Error, Result};
use crate::key;
use crate::lock::{self, Force, rollback_mutations};
use crate::notify::NotifyKind;
use crate::registry::Registry;
use crate::store::Inner;
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;
use crate::worker::now_ms;

// Rows per prewrite batch of secondaries; between batches the primary's lock is refreshed if
// the commit is running long (the heartbeat).
use crate::secondaries::SECONDARY_BATCH;

/// One row's share of a transaction.
struct RowWrites {
    table: String,
    row: Vec<u8>,
    /// (column, value in its stored form (`values.rs`) or delete).
    cells: Vec<(String, Option<Vec<u8>>)>,
    /// Weak notifications to send to this row.
    weak: Vec<String>,
    /// Columns written quietly (no notify cell: a fold's unchanged total written back).
    quiet: Vec<String>,
}

fn group_rows(txn: &Transaction) -> Vec<RowWrites> {
    // At most a row per written cell (sized up front: a transaction writing a row per cell,
    // as an exporter's postings, otherwise grows both several times).
    let mut rows: Vec<RowWrites> = Vec::with_capacity(txn.writes.len());
    // (table, row) → index in `rows`: grouping stays linear in the transaction's size. The keys
    // are this transaction's own rows, so a fast hash (foldhash, seeded per process) serves.
    let mut index: RowIndex<'_> = HashMap::with_capacity_and_hasher(txn.writes.len(), Default::default());
    type RowIndex<'a> = HashMap<(&'a str, &'a [u8]), usize, foldhash::fast::RandomState>;
    fn index_of<'a>(rows: &mut Vec<RowWrites>, index: &mut RowIndex<'a>, c: &'a CellRef) -> usize {
        *index.entry((c.table.as_str(), c.row.as_slice())).or_insert_with(|| {
            rows.push(RowWrites {
                table: c.table.clone(),
                row: c.row.clone(),
                cells: Vec::new(),
                weak: Vec::new(),
                quiet: Vec::new(),
            });
            rows.len() - 1
        })
    }
    for (c, v) in &txn.writes {
        let i = index_of(&mut rows, &mut index, c);
        // The stored form (large values compressed), on the committing thread.
        rows[i].cells.push((c.column.clone(), v.as_deref().map(|v| txn.inner.values.encode(txn.start_ts, v))));
    }
    for c in &txn.weak {
        let i = index_of(&mut rows, &mut index, c);
        rows[i].weak.push(c.column.clone());
    }
    for c in &txn.quiet {
        let i = index_of(&mut rows, &mut index, c);
        rows[i].quiet.push(c.column.clone());
    }
    // Rows with writes first (the primary is the first cell of the first row); weak-only after.
    rows.sort_by_key(|r| r.cells.is_empty());
    rows
}

fn write_kind(v: &Option<Vec<u8>>) -> WriteKind {
    match v {
        Some(v) => WriteKind::Put(v.clone()),
        None => WriteKind::Delete,
    }
}

fn conflict(found: &Found, table: &str, row: &[u8], column: &str) -> Error {
    let kind = match found {
        Found::Write { .. } => ConflictKind::WriteAfterStart,
        Found::Lock { .. } | Found::LockPresent => ConflictKind::Locked,
        Found::NoLock => ConflictKind::RolledBack,
    };
    Error::conflict(kind, table, row, column)
}

/// Notify cells of the row's writes to strongly observed columns.
fn strong_notifies(registry: &Registry, r: &RowWrites, ts: Timestamp, out: &mut Vec<Mutation>) {
    for (column, _) in &r.cells {
        if registry.kind_of(&r.table, column) == Some(NotifyKind::Strong) && !r.quiet.contains(column) {
            out.push(Mutation::SetNotify { column: column.clone(), ts, writer: None });
        }
    }
}

/// Notify cells of the row's weak notifications. At prewrite they name the `writer`, so a
/// scanner that meets them before the commit can tell whether the transaction committed (and
/// then re-notify at its commit timestamp) even if the writer dies before re-setting them at
/// commit; at commit they carry the commit timestamp and no writer.
fn weak_notifies(r: &RowWrites, ts: Timestamp, writer: Option<&Writer>, out: &mut Vec<Mutation>) {
    for column in &r.weak {
        out.push(Mutation::SetNotify { column: column.clone(), ts, writer: writer.cloned() });
    }
}

fn prewrite_op(registry: &Registry, r: &RowWrites, start_ts: Timestamp, lock: &LockRecord) -> RowMutation {
    let mut conditions = Vec::with_capacity(2 * r.cells.len());
    let mut mutations = Vec::with_capacity(3 * r.cells.len());
    for (column, value) in &r.cells {
        conditions.push(Condition::NoWriteSince { column: column.clone(), since: start_ts });
        conditions.push(Condition::NoLock { column: column.clone() });
        mutations.push(Mutation::PutLock { column: column.clone(), start_ts, lock: lock.clone() });
        if let Some(v) = value {
            mutations.push(Mutation::PutData { column: column.clone(), start_ts, value: v.clone() });
        }
    }
    // Notify is written at prewrite, not at commit: a reader that rolls this transaction
    // forward does not know to set it (the lesson of Fluo issue 642).
    strong_notifies(registry, r, start_ts, &mut mutations);
    let writer = Writer { start_ts, primary: lock.primary.clone() };
    weak_notifies(r, start_ts, Some(&writer), &mut mutations);
    RowMutation { table: r.table.clone(), row: r.row.clone(), conditions, mutations }
}

/// The commit of a prewritten row: each cell's write record at `commit_ts`, lock and staged
/// data removed; weak notifications at `commit_ts`.
fn commit_op(r: &RowWrites, start_ts: Timestamp, commit_ts: Timestamp, condition: Option<Condition>) -> RowMutation {
    let mut mutations = Vec::with_capacity(3 * r.cells.len());
    for (column, _) in &r.cells {
        mutations.push(Mutation::DeleteLock { column: column.clone(), start_ts });
        mutations.push(Mutation::DeleteData { column: column.clone(), start_ts });
    }
    write_records(r, start_ts, commit_ts, Named::AtPrewrite, &mut mutations);
    RowMutation { table: r.table.clone(), row: r.row.clone(), conditions: condition.into_iter().collect(), mutations }
}

/// Whether a transaction named itself in its rows' weak notifications before its commit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Named {
    /// It prewrote them (two-phase commit): its commit drops the names.
    AtPrewrite,
    /// It never did (one-phase commit, weak notifications only): nothing to drop. (A
    /// `DropNotifyWriter` per weak notification, no-ops all, was 8 % of the web index's
    /// mutations.)
    Never,
}

fn write_records(r: &RowWrites, start_ts: Timestamp, commit_ts: Timestamp, named: Named, out: &mut Vec<Mutation>) {
    for (column, value) in &r.cells {
        out.push(Mutation::PutWrite {
            column: column.clone(),
            commit_ts,
            write: WriteRecord { start_ts, kind: write_kind(value) },
        });
    }
    weak_notifies(r, commit_ts, None, out);
    if named == Named::AtPrewrite {
        // This writer's weak notifications are settled now (at commit_ts): no longer named.
        for column in &r.weak {
            out.push(Mutation::DropNotifyWriter { column: column.clone(), start_ts });
        }
    }
}

/// Removes the locks of rows this transaction prewrote (the primary gets a rollback record)
/// and its name from the weak notifications it set: it will never commit.
fn roll_back(inner: &Inner, rows: &[&RowWrites], start_ts: Timestamp, primary: &CellRef) {
    let ops = rows
        .iter()
        .map(|r| {
            let mut mutations = Vec::new();
            for (column, _) in &r.cells {
                let is_primary = r.table == primary.table && r.row == primary.row && *column == primary.column;
                mutations.extend(rollback_mutations(column, start_ts, is_primary));
            }
            for column in &r.weak {
                mutations.push(Mutation::DropNotifyWriter { column: column.clone(), start_ts });
            }
            // Weak notifications only: no lock to check.
            let conditions = match r.cells.first() {
                Some((first, _)) => vec![Condition::LockIs { column: first.clone(), start_ts }],
                None => vec![],
            };
            Op::Row(RowMutation { table: r.table.clone(), row: r.row.clone(), conditions, mutations })
        })
        .collect();
    // Best effort: whatever stays locked is rolled back by the next reader via the primary.
    let _ = inner.backend.apply(ops);
}

pub(crate) fn commit(txn: &mut Transaction) -> Result<Timestamp> {
    commit_then(txn, Vec::new()).map(|(ts, _)| ts)
}

/// [`commit`], and `then` (independent ops, as by [`Bigtable::apply`]) applied in the same
/// backend call as a one-phase commit, after it and only if it applied
/// ([`Bigtable::apply_atomic_then`]): their outcomes. `None` if the commit was not one step
/// (nothing written, weak notifications only, two phases): then nothing of `then` was tried,
/// and the caller applies it itself. For the clear of the notification a run processed
/// (`docs/design.md`, "Notifications").
pub(crate) fn commit_then(txn: &mut Transaction, then: Vec<Op>) -> Result<(Timestamp, Option<Vec<Outcome>>)> {
    let inner = txn.inner.clone();
    if txn.writes.is_empty() && txn.weak.is_empty() {
        return Ok((txn.start_ts, None));
    }
    let span = tracing::debug_span!(
        "commit",
        start_ts = txn.start_ts.raw(),
        writes = txn.writes.len(),
        weak = txn.weak.len(),
        mode = tracing::field::Empty,
        commit_ts = tracing::field::Empty,
    );
    let _entered = span.enter();
    let registry = inner.registry.read().map_err(|_| Error::Closed)?.clone();
    // Like writes to unobserved columns, weak notifications of a column nobody observes notify
    // nobody (they would only become dead letters).
    txn.weak.retain(|c| registry.kind_of(&c.table, &c.column).is_some());
    if txn.writes.is_empty() && txn.weak.is_empty() {
        return Ok((txn.start_ts, None));
    }
    // A delta of a column that stopped being combined since `combine` buffered it would never
    // be read or folded: refused (the declaration changed under the transaction).
    crate::combine::check_deltas(txn, &registry)?;
    // The change log: one more cell of this very transaction (`changes.rs`).
    crate::changes::log_writes(txn, &registry);
    let rows = group_rows(txn);
    let writing = rows.iter().filter(|r| !r.cells.is_empty()).count();
    let result = if writing == 0 {
        // Weak notifications only: nothing to make atomic.
        span.record("mode", "weak_only");
        let ts = inner.oracle.next()?;
        let ops = rows
            .iter()
            .map(|r| {
                let mut mutations = Vec::with_capacity(r.weak.len());
                write_records(r, txn.start_ts, ts, Named::Never, &mut mutations);
                Op::Row(RowMutation { table: r.table.clone(), row: r.row.clone(), conditions: vec![], mutations })
            })
            .collect();
        inner.backend.apply(ops)?;
        Ok((ts, None))
    } else if one_phase_applies(&inner, &rows) {
        span.record("mode", "one_pc");
        one_phase(&inner, &registry, &rows, txn.start_ts, then)
    } else {
        span.record("mode", "two_pc");
        two_phase(&inner, &registry, &rows, txn.start_ts, txn.epoch).map(|ts| (ts, None))
    };
    match &result {
        Ok((ts, _)) => {
            span.record("commit_ts", ts.raw());
            tracing::debug!("committed");
            inner.counters.commits.fetch_add(1, Ordering::Relaxed);
            let mut notified: Vec<&CellRef> = txn.weak.iter().collect();
            notified.extend(txn.writes.keys().filter(|c| {
                registry.kind_of(&c.table, &c.column) == Some(NotifyKind::Strong) && !txn.quiet.contains(*c)
            }));
            if !notified.is_empty() {
                inner.notified(notified.into_iter().map(|c| key::row_prefix(&c.table, &c.row)));
            }
        }
        Err(e) if e.is_retryable() => {
            inner.counters.conflicts.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(error = %e, "conflict");
        }
        Err(e) => tracing::debug!(error = %e, "commit failed"),
    }
    txn.writes.clear();
    txn.weak.clear();
    txn.quiet.clear();
    result
}

/// Leaves the 1PC fence even if the commit fails or panics.
struct FenceGuard<'a>(&'a Inner, u64);

impl Drop for FenceGuard<'_> {
    fn drop(&mut self) {
        self.0.fence.exit(self.1);
    }
}

/// Whether `rows` can commit in one step: one-phase commit is on, no other process reads the
/// backend (the fence is in this process), and every row is in one atomic unit.
fn one_phase_applies(inner: &Inner, rows: &[RowWrites]) -> bool {
    if !inner.config.one_phase_commit || !inner.backend.exclusive() || rows.len() > ONE_PHASE_MAX_ROWS {
        return false;
    }
    let unit = inner.backend.atomic_unit(&rows[0].table, &rows[0].row);
    unit.is_some() && rows[1..].iter().all(|r| inner.backend.atomic_unit(&r.table, &r.row) == unit)
}

/// Rows of the largest one-phase commit: a larger transaction prewrites in batches (2PC).
/// The bound is on the serial section, not on correctness: a one-phase commit is one atomic
/// group in one group-commit round, so its rows' conditions and writes hold that round (and
/// every committer queued behind it) for as long as they take; a two-phase commit of the same
/// rows does more work in all (a lock and staged data per cell, written, then removed), but
/// in rounds of 1,024 rows. `docs/design.md`, "One-phase commit".
pub const ONE_PHASE_MAX_ROWS: usize = 8 * SECONDARY_BATCH;

/// One atomic step: check every written cell for conflicts and write the commit records
/// directly, with the notifications. The written rows sit in the 1PC fence from before
/// commit_ts is taken until the write is visible, so no reader with a later start_ts can miss
/// any of them (the argument is in `docs/design.md`, "One-phase commit").
fn one_phase(
    inner: &Inner,
    registry: &Registry,
    rows: &[RowWrites],
    start_ts: Timestamp,
    then: Vec<Op>,
) -> Result<(Timestamp, Option<Vec<Outcome>>)> {
    let fenced: Vec<Vec<u8>> =
        rows.iter().filter(|r| !r.cells.is_empty()).map(|r| key::row_prefix(&r.table, &r.row)).collect();
    let _guard = FenceGuard(inner, inner.fence.enter(fenced));
    let commit_ts = inner.oracle.next()?;
    fail_point!("before-one-phase-write", |_| Err(Error::Storage("failpoint before-one-phase-write".into())));
    // Built again for a retry rather than cloned on every commit.
    let group = || -> Vec<RowMutation> {
        rows.iter()
            .map(|r| {
                let mut conditions = Vec::with_capacity(2 * r.cells.len());
                for (column, _) in &r.cells {
                    conditions.push(Condition::NoWriteSince { column: column.clone(), since: start_ts });
                    conditions.push(Condition::NoLock { column: column.clone() });
                }
                // No lock and no staged data exist to remove: the write records go straight in,
                // with the strong and weak notifications in the same step (exactly as durable as
                // the write).
                let mut mutations = Vec::with_capacity(r.cells.len() + r.weak.len() + 1);
                write_records(r, start_ts, commit_ts, Named::Never, &mut mutations);
                strong_notifies(registry, r, commit_ts, &mut mutations);
                RowMutation { table: r.table.clone(), row: r.row.clone(), conditions, mutations }
            })
            .collect()
    };
    let mut retries = 0;
    let mut then_outcomes = None;
    loop {
        let outcome = if !then.is_empty() {
            // The ops ride in the same submission, applied only after the group (retried with
            // it: until the group applies, none of them was tried).
            let (outcome, outcomes) = inner.backend.apply_atomic_then(group(), then.clone())?;
            then_outcomes = outcomes;
            outcome
        } else if rows.len() == 1 {
            // One row: a plain row op (every backend's row ops are atomic).
            match inner.backend.apply(group().into_iter().map(Op::Row).collect())?.pop() {
                Some(Outcome::ConditionFailed { index, found }) => {
                    AtomicOutcome::ConditionFailed { op: 0, index, found }
                }
                _ => AtomicOutcome::Applied,
            }
        } else {
            inner.backend.apply_atomic(group())?
        };
        let AtomicOutcome::ConditionFailed { op, index, found } = &outcome else { break };
        let r = &rows[*op];
        let column = &r.cells[index / 2].0;
        let resolved = resolve_found(inner, found, CellRef::new(r.table.clone(), r.row.clone(), column.clone()));
        if !resolved || retries == RESOLVED_RETRIES {
            return Err(conflict(found, &r.table, &r.row, column));
        }
        retries += 1;
    }
    fail_point!("after-one-phase-write", |_| Ok((commit_ts, then_outcomes.clone())));
    inner.counters.one_pc_commits.fetch_add(1, Ordering::Relaxed);
    Ok((commit_ts, then_outcomes))
}

/// A prewrite that found a lock on `cell` resolves it if its owner is dead or expired (rolled
/// forward or back through its primary), so the retry can win. Resolving only the primary is not
/// enough: a cell that is only ever written, never read (an index entry), would keep a dead
/// transaction's secondary lock forever and every later writer would conflict on it.
///
/// Returns whether the lock is gone now (its transaction was decided: committed and rolled
/// forward, or rolled back), so the row's conditions are worth checking again at once: a lock
/// left by a committed transaction whose secondaries are still being written (asynchronously)
/// is not a conflict for a writer that started after that commit.
fn resolve_found(inner: &Inner, found: &Found, cell: CellRef) -> bool {
    match found {
        // Errors here change nothing: we conflict anyway, and the retry meets the lock again.
        Found::Lock { start_ts, lock } => matches!(
            lock::resolve(inner, &cell, *start_ts, lock, Force::No),
            Ok(lock::TxnStatus::Committed(_) | lock::TxnStatus::RolledBack)
        ),
        _ => false,
    }
}

/// Times a row's conditions are checked again after the lock they met was resolved.
const RESOLVED_RETRIES: usize = 3;

/// `epoch`: the worker's lease epoch when the transaction started (`Inner::check_lease`).
fn two_phase(
    inner: &Inner,
    registry: &Registry,
    rows: &[RowWrites],
    start_ts: Timestamp,
    epoch: u64,
) -> Result<Timestamp> {
    let primary_row = &rows[0];
    let primary = CellRef::new(primary_row.table.clone(), primary_row.row.clone(), primary_row.cells[0].0.clone());
    let mut lock = LockRecord {
        primary: primary.clone(),
        wall_ms: now_ms(),
        ttl_ms: inner.config.lock_ttl.as_millis() as u64,
        worker: inner.worker,
    };

    // Phase 1: prewrite. The primary row goes in the first batch. Every row is checked on its
    // own, so the order in which they land does not matter: a secondary lock whose primary was
    // never locked is rolled back by whoever meets it (a rollback record at the primary).
    let all: Vec<&RowWrites> = rows.iter().collect();
    let parts: Vec<&[&RowWrites]> = if crate::failpoints_configured() {
        // The primary alone, then the first secondary alone, then the rest: a test can stop
        // between any two.
        let mut parts = vec![&all[..1]];
        if all.len() > 1 {
            parts.push(&all[1..2]);
        }
        parts.extend(all[all.len().min(2)..].chunks(SECONDARY_BATCH));
        parts
    } else {
        all.chunks(SECONDARY_BATCH).collect()
    };
    let mut prewritten: Vec<&RowWrites> = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        if n > 0 {
            heartbeat(inner, &primary, start_ts, &mut lock)?;
        }
        let mut pending: Vec<&RowWrites> = part.to_vec();
        let mut retries = 0;
        while !pending.is_empty() {
            let ops = pending
                .iter()
                .map(|r| {
                    if r.cells.is_empty() {
                        // Weak notifications only: set now, and again at commit.
                        let mut mutations = Vec::new();
                        let writer = Writer { start_ts, primary: primary.clone() };
                        weak_notifies(r, start_ts, Some(&writer), &mut mutations);
                        RowMutation { table: r.table.clone(), row: r.row.clone(), conditions: vec![], mutations }
                    } else {
                        prewrite_op(registry, r, start_ts, &lock)
                    }
                })
                .map(Op::Row)
                .collect();
            let outcomes = match inner.backend.apply(ops) {
                Ok(o) => o,
                Err(e) => {
                    roll_back(inner, &prewritten, start_ts, &primary);
                    return Err(e);
                }
            };
            let mut failed = None;
            let mut again = Vec::new();
            for (r, o) in pending.iter().zip(&outcomes) {
                match o {
                    Outcome::Applied => prewritten.push(r),
                    Outcome::ConditionFailed { index, found } => {
                        let column = &r.cells[index / 2].0;
                        let cell = CellRef::new(r.table.clone(), r.row.clone(), column.clone());
                        // A lock its resolution removed: check the row again (a lock of a
                        // transaction committed before we started is no conflict).
                        if resolve_found(inner, found, cell) && retries < RESOLVED_RETRIES {
                            again.push(*r);
                        } else {
                            failed.get_or_insert_with(|| conflict(found, &r.table, &r.row, column));
                        }
                    }
                }
            }
            if let Some(e) = failed {
                roll_back(inner, &prewritten, start_ts, &primary);
                return Err(e);
            }
            pending = again;
            retries += 1;
        }
        match n {
            0 => fail_point!("after-prewrite-primary", |_| Err(Error::Storage(
                "failpoint after-prewrite-primary".into()
            ))),
            1 => fail_point!("after-prewrite-first-secondary", |_| Err(Error::Storage(
                "failpoint after-prewrite-first-secondary".into()
            ))),
            _ => {}
        }
    }
    // On a shared backend: every prewrite landed while the other workers still counted this
    // one, so no GC pass had removed a rollback record at our start under a prewrite (a
    // primary's, landing after a resolver rolled the transaction back and a GC that no longer
    // counted us removed the record, would find nothing to stop it). `docs/design.md`,
    // "Commits check the lease once, after their prewrites".
    if let Err(e) = inner.check_lease(epoch) {
        roll_back(inner, &prewritten, start_ts, &primary);
        return Err(e);
    }
    let secondaries: Vec<&RowWrites> = rows[1..].iter().collect();

    // Phase 2: the commit point.
    heartbeat(inner, &primary, start_ts, &mut lock)?;
    let commit_ts = inner.oracle.next()?;
    fail_point!("before-commit-primary", |_| Err(Error::Storage("failpoint before-commit-primary".into())));
    let op = commit_op(
        primary_row,
        start_ts,
        commit_ts,
        Some(Condition::LockIs { column: primary.column.clone(), start_ts }),
    );
    let outcome = inner.backend.apply(vec![Op::Row(op)])?;
    if let Outcome::ConditionFailed { found, .. } = &outcome[0] {
        // Someone rolled us back (we looked dead or expired). Clean our other locks: every row
        // prewritten (the primary row may not be the first: one whose first prewrite met a lock
        // it resolved lands on the retry). The primary row's own op is a no-op: its `LockIs`
        // fails, the lock being gone.
        roll_back(inner, &prewritten, start_ts, &primary);
        return Err(conflict(found, &primary.table, &primary.row, &primary.column));
    }
    fail_point!("after-commit-primary", |_| Ok(commit_ts));

    // Phase 3: the secondaries' commit records. Unconditional and idempotent: a resolver that
    // rolled a secondary forward wrote exactly the same record. Failures are left to readers.
    // The transaction is committed: with `async_secondaries` the caller does not wait for them.
    let ops: Vec<Op> = secondaries.iter().map(|r| Op::Row(commit_op(r, start_ts, commit_ts, None))).collect();
    if ops.is_empty() {
        return Ok(commit_ts);
    }
    let ops = match &inner.secondaries {
        Some(queue) => match queue.submit(ops) {
            Ok(()) => {
                inner.counters.async_secondaries.fetch_add(1, Ordering::Relaxed);
                return Ok(commit_ts);
            }
            Err(ops) => ops, // the queue is full: write them here
        },
        None => ops,
    };
    crate::secondaries::commit(inner.backend.as_ref(), ops);
    Ok(commit_ts)
}

/// Refreshes the primary lock's wall time when a commit has been running for more than half the
/// TTL, so resolvers do not take a slow-but-alive transaction for an abandoned one.
fn heartbeat(inner: &Inner, primary: &CellRef, start_ts: Timestamp, lock: &mut LockRecord) -> Result<()> {
    if now_ms() < lock.wall_ms + lock.ttl_ms / 2 {
        return Ok(());
    }
    lock.wall_ms = now_ms();
    let op = RowMutation {
        table: primary.table.clone(),
        row: primary.row.clone(),
        conditions: vec![Condition::LockIs { column: primary.column.clone(), start_ts }],
        mutations: vec![Mutation::PutLock { column: primary.column.clone(), start_ts, lock: lock.clone() }],
    };
    match &inner.backend.apply(vec![Op::Row(op)])?[0] {
        Outcome::Applied => Ok(()),
        Outcome::ConditionFailed { found, .. } => Err(conflict(found, &primary.table, &primary.row, &primary.column)),
    }
}
