//! The change feed: every committed change to the logged columns, in commit-timestamp order, up
//! to a **resolved timestamp**, with a position to resume from that neither misses nor repeats a
//! change (`docs/design.md`, "The change feed").
//!
//! A commit that writes a logged column adds one cell to itself: [`TABLE`]/`start_ts`/[`COLUMN`],
//! the transaction's changes to logged columns. It is prewritten, committed or rolled back with
//! the rest of the transaction. A page of the feed reads those rows, resolves their locks like
//! any reader, and emits what committed at or below the resolved timestamp `R`: below `R` no
//! transaction can still commit. Subscriptions are positions kept in the store, each owned by
//! one live worker; trimming removes what every subscription has passed.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::bigtable::{CellRef, Condition, Mutation, Op, RowMutation, WriteKind};
use crate::error::{Error, Result};
use crate::key::{self, validate_column, validate_table};
use crate::lock::{self, Force, TxnStatus};
use crate::registry::{self, Registry};
use crate::store::Store;
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;

/// Table of the log rows; a row is a transaction's start timestamp (8 bytes, big-endian).
pub(crate) const TABLE: &str = "__changes";
/// The reserved column holding a transaction's logged changes.
pub(crate) const COLUMN: &str = "__log";
const FORMAT: u8 = 1;
const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;

/// Table, row prefix and columns of subscriptions and of the trim mark.
const SYSTEM: &str = "__system";
const SUBSCRIPTION_PREFIX: &[u8] = b"subscription/";
const POSITION: &str = "__position";
const OWNER: &str = "__owner";
const TRIM_ROW: &[u8] = b"changes";
const TRIM_COLUMN: &str = "__trimmed";
/// Log rows read per backend call.
const PAGE_ROWS: usize = 256;
/// The most changes [`Store::changes`] returns in one page (a larger limit is lowered to it).
pub const MAX_CHANGES_PER_PAGE: usize = 100_000;

/// A committed change to a logged cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The changed cell.
    pub cell: CellRef,
    /// Its new value; `None` when the transaction deleted it.
    pub value: Option<Vec<u8>>,
    /// The commit timestamp of the transaction that made it.
    pub commit_ts: Timestamp,
}

/// Where a consumer of the feed stands: every change committed at or below
/// [`position`](ChangeToken::position) was delivered, none above it. Its text form (`Display`,
/// `FromStr`) is what a consumer keeps; [`ChangeToken::origin`] is "from the oldest change kept".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChangeToken {
    /// `None`: from the oldest change still kept.
    position: Option<Timestamp>,
    /// No log row that starts below this can still commit above `position` (0 when unknown);
    /// where the next page starts reading (see `docs/design.md`).
    scan_from: Timestamp,
}

impl ChangeToken {
    /// From the oldest change still kept.
    pub fn origin() -> ChangeToken {
        ChangeToken { position: None, scan_from: Timestamp::ZERO }
    }

    /// The commit timestamp up to which (inclusive) every change was delivered; `None` for
    /// [`ChangeToken::origin`].
    pub fn position(&self) -> Option<Timestamp> {
        self.position
    }
}

impl fmt::Display for ChangeToken {
    /// `origin`, or `c1.<position>.<scan_from>` (decimal timestamps).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.position {
            None => f.write_str("origin"),
            Some(p) => write!(f, "c1.{}.{}", p.raw(), self.scan_from.raw()),
        }
    }
}

impl FromStr for ChangeToken {
    type Err = Error;

    fn from_str(s: &str) -> Result<ChangeToken> {
        let bad = || {
            Error::InvalidArgument(format!(
                "{s:?} is not a change-feed token (one looks like c1.1234.1200, as `changes` printed it, or origin)"
            ))
        };
        if s == "origin" {
            return Ok(ChangeToken::origin());
        }
        let rest = s.strip_prefix("c1.").ok_or_else(bad)?;
        let (p, l) = rest.split_once('.').ok_or_else(bad)?;
        let p: u64 = p.parse().map_err(|_| bad())?;
        let l: u64 = l.parse().map_err(|_| bad())?;
        if l > p.saturating_add(1) {
            return Err(bad());
        }
        Ok(ChangeToken { position: Some(Timestamp::from_raw(p)), scan_from: Timestamp::from_raw(l) })
    }
}

/// A page of the feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangePage {
    /// Committed changes after the page's starting position, in commit-timestamp order (a
    /// transaction's changes in table, row, column order).
    pub changes: Vec<Change>,
    /// Where the next page starts: resuming from it neither misses nor repeats a change.
    pub next: ChangeToken,
    /// True when the page stopped at its limit: more changes can be read at once (a page can
    /// then even be empty, its changes committed above where it had to stop). False when it
    /// read up to the resolved timestamp: the consumer is caught up.
    pub more: bool,
}

/// A subscription: a named position kept in the store and the worker that delivers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscription {
    /// Every change at or below it was delivered (acknowledged by the consumer).
    pub position: ChangeToken,
    /// The worker that owns it (delivers it), if any claimed it.
    pub owner: Option<u64>,
}

/// Encodes a transaction's logged changes: version byte 1, then per change its table, row and
/// column (u32-LE-length-prefixed), a tag (1 put + length-prefixed value, 2 delete).
fn encode<'a>(changes: impl Iterator<Item = (&'a CellRef, &'a Option<Vec<u8>>)>) -> Vec<u8> {
    fn put(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    let mut out = vec![FORMAT];
    for (cell, value) in changes {
        put(&mut out, cell.table.as_bytes());
        put(&mut out, &cell.row);
        put(&mut out, cell.column.as_bytes());
        match value {
            Some(v) => {
                out.push(TAG_PUT);
                put(&mut out, v);
            }
            None => out.push(TAG_DELETE),
        }
    }
    out
}

fn decode(bytes: &[u8], start_ts: Timestamp) -> Result<Vec<(CellRef, Option<Vec<u8>>)>> {
    let bad = |why: &str| Error::Corrupt(format!("the change log row of the transaction at {start_ts} {why}"));
    let mut rest = bytes.strip_prefix(&[FORMAT]).ok_or_else(|| bad("has an unknown format version"))?;
    fn take<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let part = rest.get(4..4 + n)?;
        *rest = &rest[4 + n..];
        Some(part)
    }
    let mut out = Vec::new();
    while !rest.is_empty() {
        let table = take(&mut rest).ok_or_else(|| bad("is truncated"))?;
        let row = take(&mut rest).ok_or_else(|| bad("is truncated"))?.to_vec();
        let column = take(&mut rest).ok_or_else(|| bad("is truncated"))?;
        let (table, column) = match (std::str::from_utf8(table), std::str::from_utf8(column)) {
            (Ok(t), Ok(c)) => (t.to_owned(), c.to_owned()),
            _ => return Err(bad("names a table or column that is not UTF-8")),
        };
        let (&tag, after) = rest.split_first().ok_or_else(|| bad("is truncated"))?;
        rest = after;
        let value = match tag {
            TAG_PUT => Some(take(&mut rest).ok_or_else(|| bad("is truncated"))?.to_vec()),
            TAG_DELETE => None,
            _ => return Err(bad("holds an unknown change tag")),
        };
        out.push((CellRef { table, row, column }, value));
    }
    Ok(out)
}

/// Adds the transaction's log row if it writes a logged column (called by the commit with the
/// registry it commits under, so a change of the logged set and the commits agree).
pub(crate) fn log_writes(txn: &mut Transaction, registry: &Registry) {
    if !registry.logs_anything() {
        return;
    }
    let logged: Vec<(&CellRef, &Option<Vec<u8>>)> =
        txn.writes.iter().filter(|(c, _)| registry.logs(&c.table, &c.column) && !txn.quiet.contains(*c)).collect();
    if logged.is_empty() {
        return;
    }
    let value = encode(logged.into_iter());
    let cell = CellRef::new(TABLE, txn.start_ts.raw().to_be_bytes(), COLUMN);
    txn.set_reserved(cell, Some(value));
}

/// A log row met by a page: committed at `commit_ts`, with its changes the page wants.
struct Committed {
    commit_ts: Timestamp,
    start_ts: Timestamp,
    changes: Vec<Change>,
}

fn subscription_row(name: &str) -> Vec<u8> {
    let mut row = SUBSCRIPTION_PREFIX.to_vec();
    row.extend_from_slice(name.as_bytes());
    row
}

fn check_subscription_name(name: &str) -> Result<()> {
    crate::notify::validate_observer_name(name)
        .map_err(|_| Error::InvalidArgument(format!("subscription name {name:?}: use 1 to 64 of A-Z a-z 0-9 _ . -")))
}

/// A subscription's position and owner, as `txn` reads them.
fn read_subscription(txn: &Transaction, row: &[u8]) -> Result<(Option<ChangeToken>, Option<u64>)> {
    let mut cells = txn.read_row(SYSTEM, row, &[POSITION, OWNER])?.into_iter();
    let position = txn.inner.values.read(cells.next().expect("two columns"))?;
    let owner = txn.inner.values.read(cells.next().expect("two columns"))?;
    Ok((position.as_deref().map(parse_position).transpose()?, owner.as_deref().map(parse_owner).transpose()?))
}

fn parse_owner(bytes: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(
        bytes.try_into().map_err(|_| Error::Corrupt("a subscription's owner is not 8 bytes".into()))?,
    ))
}

fn parse_position(bytes: &[u8]) -> Result<ChangeToken> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| Error::Corrupt("a subscription's position is not a change-feed token".into()))
}

impl Store {
    /// Makes exactly these `(table, column)`s logged: from when this returns, every commit on
    /// every host that writes one of them adds its changes to the change log (read with
    /// [`Store::changes`]). Like [`Store::set_observers`], it waits until every live host
    /// acknowledged. Changes committed before a column was logged are not in the feed.
    pub fn set_change_log(&self, columns: BTreeSet<(String, String)>) -> Result<()> {
        for (table, column) in &columns {
            validate_table(table)?;
            validate_column(column)?;
        }
        let saved = registry::save_logged(self, &columns)?;
        self.change_bindings(saved, |_| {})
    }

    /// The logged `(table, column)`s (see [`Store::set_change_log`]).
    pub fn change_log(&self) -> BTreeSet<(String, String)> {
        let registry = self.inner.registry.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        registry.logged().clone()
    }

    /// The next page of committed changes to `columns` of `table` (`None`: every logged column
    /// of the table) after `since`: at most about `limit` changes (a transaction's changes are
    /// never split, so one large transaction may exceed it), in commit-timestamp order, up to
    /// the resolved timestamp — below it no transaction can still commit. Resume from
    /// [`ChangePage::next`]: nothing is missed or repeated, whatever happened in between
    /// (restarts, other hosts). An empty page still moves the position when time passed.
    ///
    /// Fails with [`Error::ChangesTrimmed`] when `since` is older than the oldest change kept,
    /// and with [`Error::InvalidArgument`] when a column is not logged.
    pub fn changes(
        &self,
        table: &str,
        columns: Option<&[String]>,
        since: &ChangeToken,
        limit: usize,
    ) -> Result<ChangePage> {
        validate_table(table)?;
        let logged = self.change_log();
        let wanted: BTreeSet<String> = match columns {
            Some(cols) => {
                for c in cols {
                    validate_column(c)?;
                    if !logged.contains(&(table.to_owned(), c.clone())) {
                        return Err(Error::InvalidArgument(format!(
                            "column {table}/{c} is not in the change log (log it with a sink or a [[changes]] \
                             entry of the configuration; logged: {})",
                            describe(&logged)
                        )));
                    }
                }
                cols.iter().cloned().collect()
            }
            None => logged.iter().filter(|(t, _)| t == table).map(|(_, c)| c.clone()).collect(),
        };
        if wanted.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "no column of table {table} is in the change log (logged: {})",
                describe(&logged)
            )));
        }
        let limit = limit.clamp(1, MAX_CHANGES_PER_PAGE);
        loop {
            let mark = self.trim_mark()?;
            let after = since.position.unwrap_or(mark);
            if after < mark {
                return Err(Error::ChangesTrimmed { position: after, trimmed: mark });
            }
            let page = self.read_page(table, &wanted, after, since.scan_from, limit)?;
            // After the read: a trim that removed a row above `after` raised the mark first.
            let mark_now = self.trim_mark()?;
            if after < mark_now {
                if since.position.is_none() {
                    continue; // from the origin: start again at the new oldest change
                }
                return Err(Error::ChangesTrimmed { position: after, trimmed: mark_now });
            }
            return Ok(page);
        }
    }

    fn read_page(
        &self,
        table: &str,
        wanted: &BTreeSet<String>,
        after: Timestamp,
        scan_from: Timestamp,
        limit: usize,
    ) -> Result<ChangePage> {
        let inner = &self.inner;
        let exclusive = inner.backend.exclusive();
        // X: every transaction running now, or started later, starts at or above it.
        let oldest = if exclusive { Some(inner.oldest_start()?) } else { None };
        let t = inner.oracle.next()?;
        // One-phase commits that entered the fence later take commit timestamps above `t`.
        let fenced_upto = inner.fence.entered();
        if after >= t {
            // No page of this store ever ended there: a token of another store, or a damaged
            // one. Taking it would skip every change up to it without a word.
            return Err(Error::InvalidArgument(format!(
                "the change-feed position {after} is in the future (this store's timestamps are at {t}): a token \
                 of another store, or a damaged one"
            )));
        }
        let lo = key::table_prefix(TABLE);
        let hi = key::prefix_end(&lo);
        if exclusive {
            // A one-phase commit that took its commit timestamp before `t` lands first.
            inner.fence.wait(&lo, hi.as_deref(), fenced_upto);
        }
        let mut hold: Option<Timestamp> = None; // the oldest start of a live (undecided) writer
        let mut next_unread: Option<Timestamp> = None; // every unread row starts at or above it
        let mut committed: Vec<Committed> = Vec::new();
        let mut gathered = 0usize;
        let start_row = if exclusive { scan_from.raw().to_be_bytes() } else { [0; 8] };
        let mut from: (String, Vec<u8>) = (TABLE.to_owned(), start_row.to_vec());
        let mut first = true;
        'rows: loop {
            let rows = inner.backend.scan_versions(Some((from.0.as_str(), from.1.as_slice())), PAGE_ROWS)?;
            let n = rows.len();
            let last = from.clone();
            for row in rows {
                // A later page starts at the last row read (inclusive).
                if !first && (row.table.as_str(), row.row.as_slice()) <= (last.0.as_str(), last.1.as_slice()) {
                    continue;
                }
                if row.table != TABLE {
                    break 'rows;
                }
                let Ok(bytes) = <[u8; 8]>::try_from(row.row.as_slice()) else {
                    from = (row.table, row.row);
                    continue; // not a log row (a user's table of that name)
                };
                let start = Timestamp::from_raw(u64::from_be_bytes(bytes));
                if start >= t {
                    break 'rows;
                }
                // Stop at the limit, but only past `after`: rows that started below it and
                // committed above it are read whatever their number (the transactions that
                // straddle `after`), or a page could make no progress.
                if gathered >= limit && start > after {
                    next_unread = Some(start);
                    break 'rows;
                }
                from = (row.table.clone(), row.row.clone());
                let Some(cell) = row.cells.iter().find(|c| c.column == COLUMN) else { continue };
                let cell_ref = CellRef::new(TABLE, row.row.clone(), COLUMN);
                let mut found =
                    cell.writes.iter().find(|(_, w)| w.start_ts == start && w.kind != WriteKind::Rollback).cloned();
                if found.is_none()
                    && let Some((lock_ts, lock)) = cell.locks.iter().find(|(ts, _)| *ts == start)
                {
                    match lock::resolve(inner, &cell_ref, *lock_ts, lock, Force::No)? {
                        TxnStatus::Committed(_) => {
                            found = inner.backend.find_write(&cell_ref, start)?;
                        }
                        TxnStatus::RolledBack => {}
                        TxnStatus::Live => {
                            hold = Some(hold.map_or(start, |h| h.min(start)));
                        }
                    }
                }
                let Some((commit_ts, record)) = found else { continue };
                if record.kind == WriteKind::Rollback || commit_ts <= after {
                    continue;
                }
                let Some(bytes) = inner.values.decode(record)? else { continue };
                let mine: Vec<Change> = decode(&bytes, start)?
                    .into_iter()
                    .filter(|(cell, _)| cell.table == table && wanted.contains(&cell.column))
                    .map(|(cell, value)| Change { cell, value, commit_ts })
                    .collect();
                gathered += mine.len();
                committed.push(Committed { commit_ts, start_ts: start, changes: mine });
            }
            if n < PAGE_ROWS {
                break;
            }
            first = false;
        }
        let mut resolved = t;
        for bound in [hold, next_unread].into_iter().flatten() {
            resolved = resolved.min(bound);
        }
        committed.sort_by_key(|c| c.commit_ts);
        let mut changes = Vec::new();
        let mut scan_next = resolved;
        for bound in [hold, next_unread, oldest].into_iter().flatten() {
            scan_next = scan_next.min(bound);
        }
        for c in committed {
            if c.commit_ts > resolved {
                scan_next = scan_next.min(c.start_ts);
                continue;
            }
            changes.extend(c.changes);
        }
        let position = resolved.max(after);
        let scan_from = if exclusive { scan_next.min(position) } else { Timestamp::ZERO };
        Ok(ChangePage {
            changes,
            next: ChangeToken { position: Some(position), scan_from },
            more: next_unread.is_some(),
        })
    }

    /// The trim mark: changes at or below it may have been removed.
    fn trim_mark(&self) -> Result<Timestamp> {
        let txn = self.begin()?;
        let cell = txn.read_row(SYSTEM, TRIM_ROW, &[TRIM_COLUMN])?.pop().expect("one column read");
        match self.inner.values.read(cell)? {
            None => Ok(Timestamp::ZERO),
            Some(v) => Ok(Timestamp::from_raw(u64::from_be_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| Error::Corrupt("the change log's trim mark is not 8 bytes".into()))?,
            ))),
        }
    }

    /// The oldest position a consumer can resume from: changes at or below it may be gone.
    pub fn changes_trimmed_to(&self) -> Result<Timestamp> {
        self.trim_mark()
    }

    /// Removes the log rows of transactions committed at or below `min(upto, every
    /// subscription's position)`, after raising the trim mark to that bound (so a consumer
    /// whose position is below it is told, [`Error::ChangesTrimmed`], rather than silently
    /// missing changes). Returns how many rows it removed.
    pub fn trim_changes(&self, upto: Timestamp) -> Result<u64> {
        let mut bound = upto;
        for (_, sub) in self.subscriptions()? {
            match sub.position.position {
                Some(p) => bound = bound.min(p),
                None => return Ok(0), // a subscription that delivered nothing yet keeps all
            }
        }
        let raised = self.run(|txn| {
            let cell = txn.read_row(SYSTEM, TRIM_ROW, &[TRIM_COLUMN])?.pop().expect("one column read");
            let mark = match txn.inner.values.read(cell)? {
                None => Timestamp::ZERO,
                Some(v) => Timestamp::from_raw(u64::from_be_bytes(
                    v.as_slice().try_into().map_err(|_| Error::Corrupt("the trim mark is not 8 bytes".into()))?,
                )),
            };
            if bound <= mark {
                return Ok(false);
            }
            txn.set_reserved(CellRef::new(SYSTEM, TRIM_ROW, TRIM_COLUMN), Some(bound.raw().to_be_bytes().to_vec()));
            Ok(true)
        })?;
        if !raised && bound == Timestamp::ZERO {
            return Ok(0);
        }
        let mut removed = 0u64;
        let mut from: (String, Vec<u8>) = (TABLE.to_owned(), vec![0; 8]);
        let mut first = true;
        'rows: loop {
            let rows = self.inner.backend.scan_versions(Some((from.0.as_str(), from.1.as_slice())), PAGE_ROWS)?;
            let n = rows.len();
            let mut ops = Vec::new();
            for row in rows.into_iter().skip(usize::from(!first)) {
                if row.table != TABLE {
                    self.apply_trim(ops, &mut removed)?;
                    break 'rows;
                }
                from = (row.table.clone(), row.row.clone());
                let Ok(bytes) = <[u8; 8]>::try_from(row.row.as_slice()) else { continue };
                if Timestamp::from_raw(u64::from_be_bytes(bytes)) >= bound {
                    self.apply_trim(ops, &mut removed)?;
                    break 'rows; // it commits above the bound, and so does every later row
                }
                let Some(cell) = row.cells.iter().find(|c| c.column == COLUMN) else { continue };
                let mutations: Vec<Mutation> = cell
                    .writes
                    .iter()
                    .filter(|(c, w)| *c <= bound && w.kind != WriteKind::Rollback)
                    .map(|(c, _)| Mutation::DeleteWrite { column: COLUMN.into(), commit_ts: *c })
                    .collect();
                if !mutations.is_empty() {
                    let conditions = vec![Condition::NoLock { column: COLUMN.into() }];
                    ops.push(Op::Row(RowMutation { table: row.table, row: row.row, conditions, mutations }));
                }
            }
            self.apply_trim(ops, &mut removed)?;
            if n < PAGE_ROWS {
                break;
            }
            first = false;
        }
        Ok(removed)
    }

    fn apply_trim(&self, ops: Vec<Op>, removed: &mut u64) -> Result<()> {
        if ops.is_empty() {
            return Ok(());
        }
        let outcomes = self.inner.backend.apply(ops)?;
        *removed += outcomes.iter().filter(|o| **o == crate::bigtable::Outcome::Applied).count() as u64;
        Ok(())
    }

    /// Makes this store's worker the owner of subscription `name` if it has no owner or its
    /// owner's lease is gone (creating it at [`ChangeToken::origin`]); `true` if this worker
    /// owns it now. One live owner at a time: whoever delivers a subscription claims it first.
    pub fn claim_subscription(&self, name: &str) -> Result<bool> {
        check_subscription_name(name)?;
        let me = self.inner.worker;
        let row = subscription_row(name);
        self.run(|txn| {
            let (position, owner) = read_subscription(txn, &row)?;
            if let Some(owner) = owner {
                if owner == me {
                    return Ok(true);
                }
                if txn.inner.worker_alive(owner)? {
                    return Ok(false);
                }
            }
            if position.is_none() {
                txn.set_reserved(
                    CellRef::new(SYSTEM, row.clone(), POSITION),
                    Some(ChangeToken::origin().to_string().into_bytes()),
                );
            }
            txn.set_reserved(CellRef::new(SYSTEM, row.clone(), OWNER), Some(me.to_be_bytes().to_vec()));
            Ok(true)
        })
    }

    /// Moves subscription `name` to `to` (never backwards) if this store's worker still owns
    /// it, checked in the same transaction; `false` (nothing written) if it does not.
    pub fn advance_subscription(&self, name: &str, to: &ChangeToken) -> Result<bool> {
        check_subscription_name(name)?;
        let me = self.inner.worker;
        let row = subscription_row(name);
        self.run(|txn| {
            let (current, owner) = read_subscription(txn, &row)?;
            if owner != Some(me) {
                return Ok(false);
            }
            if current.is_some_and(|c| c.position >= to.position) {
                return Ok(true);
            }
            txn.set_reserved(CellRef::new(SYSTEM, row.clone(), POSITION), Some(to.to_string().into_bytes()));
            Ok(true)
        })
    }

    /// Subscription `name`, if it exists.
    pub fn subscription(&self, name: &str) -> Result<Option<Subscription>> {
        check_subscription_name(name)?;
        let txn = self.begin()?;
        let mut cells = txn.read_row(SYSTEM, &subscription_row(name), &[POSITION, OWNER])?.into_iter();
        let position = self.inner.values.read(cells.next().expect("two columns"))?;
        let owner = self.inner.values.read(cells.next().expect("two columns"))?;
        match position {
            None => Ok(None),
            Some(p) => Ok(Some(Subscription {
                position: parse_position(&p)?,
                owner: owner.as_deref().map(parse_owner).transpose()?,
            })),
        }
    }

    /// Every subscription, by name.
    pub fn subscriptions(&self) -> Result<Vec<(String, Subscription)>> {
        let mut end = SUBSCRIPTION_PREFIX.to_vec();
        *end.last_mut().expect("a prefix") += 1;
        let ts = self.inner.oracle.next()?;
        let cells = self.inner.backend.scan(&crate::bigtable::ScanRange {
            table: SYSTEM,
            start: SUBSCRIPTION_PREFIX,
            after_column: None,
            end: Some(&end),
            columns: Some(&[POSITION]),
            prefixes: &[],
            ts,
            limit: usize::MAX,
        })?;
        let mut out = Vec::new();
        for cell in cells {
            let name = String::from_utf8_lossy(&cell.row[SUBSCRIPTION_PREFIX.len()..]).into_owned();
            if let Some(sub) = self.subscription(&name)? {
                out.push((name, sub));
            }
        }
        Ok(out)
    }

    /// Removes subscription `name` (trimming no longer waits for it).
    pub fn drop_subscription(&self, name: &str) -> Result<()> {
        check_subscription_name(name)?;
        let row = subscription_row(name);
        self.run(|txn| {
            txn.set_reserved(CellRef::new(SYSTEM, row.clone(), POSITION), None);
            txn.set_reserved(CellRef::new(SYSTEM, row.clone(), OWNER), None);
            Ok(())
        })
    }
}

fn describe(logged: &BTreeSet<(String, String)>) -> String {
    if logged.is_empty() {
        return "none".into();
    }
    logged.iter().map(|(t, c)| format!("{t}/{c}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let t = ChangeToken { position: Some(Timestamp::from_raw(42)), scan_from: Timestamp::from_raw(40) };
        assert_eq!(t.to_string().parse::<ChangeToken>().unwrap(), t);
        assert_eq!("origin".parse::<ChangeToken>().unwrap(), ChangeToken::origin());
        for bad in ["", "c1", "c1.5", "c1.x.1", "c2.5.4", "c1.5.9", "c1.-1.0"] {
            let e = bad.parse::<ChangeToken>().unwrap_err().to_string();
            assert!(e.contains("not a change-feed token"), "{bad}: {e}");
        }
    }

    #[test]
    fn log_rows_round_trip_and_bad_bytes_are_corrupt() {
        let a = CellRef::new("t", b"r\x00".to_vec(), "c:x");
        let b = CellRef::new("u", b"".to_vec(), "c:y");
        let (va, vb) = (Some(b"v".to_vec()), None);
        let bytes = encode([(&a, &va), (&b, &vb)].into_iter());
        let ts = Timestamp::from_raw(7);
        assert_eq!(decode(&bytes, ts).unwrap(), vec![(a, va), (b, vb)]);
        for bad in [&bytes[..bytes.len() - 1], &[2u8][..], &[]] {
            assert!(matches!(decode(bad, ts), Err(Error::Corrupt(_))), "{bad:?}");
        }
    }
}
