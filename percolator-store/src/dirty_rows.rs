//! The rows GC has yet to look at: what an incremental pass visits (`docs/design.md`, "GC",
//! incremental passes).
//!
//! On an exclusive backend the store sees every write, so [`Tracked`] (an
//! [`Observed`] backend) records the row of each applied mutation that adds a version (a lock, staged data, a write
//! record) with the smallest such timestamp not yet looked at. A pass takes out the rows due at
//! its safepoint and puts back those that still hold something for a later pass.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use foldhash::fast::RandomState;

use crate::bigtable::{Bigtable, Mutation, RowMutation, WriteKind};
use crate::error::Result;
use crate::memtable::BlockedBloom;
use crate::observed::{ApplyHook, Observed};
use crate::timestamp::Timestamp;

/// Rows tracked at most: past this, tracking stops and the next pass is full (a bounded set:
/// about 100 bytes a row).
pub(crate) const DIRTY_ROWS_MAX: usize = 500_000;

/// Rows a store may hold at its open for its first GC pass to be incremental
/// ([`DirtyRows::learn_small_store`]): a new store, or one of a few rows, read in one scan.
pub(crate) const SMALL_STORE_ROWS: usize = 256;

/// A full pass at least this often, as a safety net (every write is recorded, so it should find
/// what the incremental passes left: nothing).
pub(crate) const FULL_PASS_EVERY: Duration = Duration::from_secs(3600);

/// The filter of rows seen ([`RowFilter`]): 2 MiB, about 1.5 million rows at 1–2 % false
/// positives; past that it answers "seen" more often, which only records more rows.
const ROW_FILTER_BLOCKS: usize = (2 << 20) / 64;

/// Rows written since a GC pass last looked at them, by table, with the smallest timestamp of a
/// version in them that no pass has looked at; and a filter of the rows the store holds, so
/// that a row written once is not visited (`docs/design.md`, "GC", rows written once).
#[derive(Default)]
pub(crate) struct DirtyRows {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Table → row → smallest unexamined version timestamp. Hashed with foldhash (about 1 %
    /// of a web-index load's CPU went to SipHash here: every applied row is recorded): its
    /// seeds are random per process, which defeats colliding row keys chosen in advance (rows
    /// are user data, such as crawled URLs), though not an attacker who can time the store's
    /// commits; the set is bounded by [`DIRTY_ROWS_MAX`] either way.
    rows: HashMap<String, HashMap<Vec<u8>, Timestamp, RandomState>>,
    len: usize,
    /// The set holds every row written since the last full pass started: an incremental pass
    /// may rely on it. False until a full pass starts, and after an overflow.
    complete: bool,
    /// When the last full pass started.
    last_full: Option<Instant>,
    /// Every row written or read by a pass since the last full pass started.
    seen: RowFilter,
    /// `seen` holds every row the store holds (a full pass finished since it was cleared):
    /// a write adding only `Put` records to a row it certainly does not hold need not be
    /// recorded.
    seen_complete: bool,
}

/// A [`BlockedBloom`] of rows, allocated at the first row noted; its hashes' seeds are random
/// per process (rows are user data).
#[derive(Default)]
struct RowFilter {
    bits: Option<BlockedBloom>,
    hasher: RandomState,
}

impl RowFilter {
    /// Notes `(table, row)`; true if the filter certainly did not hold it.
    fn note(&mut self, table: &str, row: &[u8]) -> bool {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one((table, row));
        self.bits.get_or_insert_with(|| BlockedBloom::with_blocks(ROW_FILTER_BLOCKS)).insert(hash)
    }

    fn clear(&mut self) {
        self.bits = None;
    }
}

/// A write of a row, as recorded: its table, its row, the smallest timestamp of a version it
/// added, and whether every version it added is a `Put` commit record (a write of this kind
/// to a row the store does not hold yet leaves nothing to collect).
pub(crate) type Write = (String, Vec<u8>, Timestamp, bool);

impl DirtyRows {
    /// Records that `row` of `table` has a version at `ts` no pass has looked at.
    pub(crate) fn record(&self, table: &str, row: &[u8], ts: Timestamp) {
        self.record_all(vec![(table.to_owned(), row.to_vec(), ts, false)]);
    }

    /// Records each write of `writes`, under one lock: every row is noted in the filter, and
    /// recorded unless the write added only `Put` records to a row the store certainly did not
    /// hold before.
    pub(crate) fn record_all(&self, writes: Vec<Write>) {
        let Ok(mut s) = self.state.lock() else { return };
        let State { rows, len, complete, seen, seen_complete, .. } = &mut *s;
        for (table, row, ts, puts_only) in writes {
            let new = seen.note(&table, &row);
            if !*complete || (puts_only && new && *seen_complete) {
                // Nothing to keep: the next pass is full; or nothing to collect in the row.
                continue;
            }
            let table_rows = match rows.get_mut(table.as_str()) {
                Some(t) => t,
                None => rows.entry(table).or_default(),
            };
            match table_rows.entry(row) {
                Entry::Occupied(mut e) => *e.get_mut() = (*e.get()).min(ts),
                Entry::Vacant(e) => {
                    e.insert(ts);
                    *len += 1;
                    if *len > DIRTY_ROWS_MAX {
                        // The rest are noted in the filter all the same (it stays complete).
                        *complete = false;
                    }
                }
            }
        }
        if s.len > DIRTY_ROWS_MAX {
            s.rows.clear();
            s.len = 0;
        }
    }

    /// Whether the next pass must be full (the set does not know every written row, or the
    /// last full pass is [`FULL_PASS_EVERY`] old).
    pub(crate) fn full_pass_due(&self) -> bool {
        let Ok(s) = self.state.lock() else { return true };
        !s.complete || s.last_full.is_none_or(|t| t.elapsed() >= FULL_PASS_EVERY)
    }

    /// A full pass starts (after it settled its safepoint, before it reads any row): it reads
    /// every row, so the set starts over, complete from now on.
    /// The filter of rows starts over too: the pass notes every row it reads
    /// ([`DirtyRows::pass_read`]), and writes note theirs; until the pass finishes
    /// ([`DirtyRows::full_pass_ends`]) every write is recorded.
    pub(crate) fn full_pass_starts(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.rows.clear();
            s.len = 0;
            s.complete = true;
            s.last_full = Some(Instant::now());
            s.seen.clear();
            s.seen_complete = false;
        }
    }

    /// Stands for a store's first full pass at its open, if `backend` (the store's [`Tracked`]
    /// backend, before any transaction runs) holds at most [`SMALL_STORE_ROWS`] rows (a new
    /// store): the set and the filter start over, as for a full pass; the rows it holds are
    /// read in one scan, noted in the filter and recorded as due at any safepoint, so that the
    /// first pass (incremental) reads each of them as a full pass would; writes applied
    /// meanwhile are recorded by the backend. Returns whether it did; a larger store's first
    /// pass is full.
    pub(crate) fn learn_small_store(&self, backend: &dyn Bigtable) -> Result<bool> {
        self.full_pass_starts();
        let rows = match backend.scan_versions(None, SMALL_STORE_ROWS + 1) {
            Ok(rows) if rows.len() <= SMALL_STORE_ROWS => rows,
            other => {
                self.forget();
                return other.map(|_| false);
            }
        };
        self.pass_read(rows.iter().map(|r| (r.table.as_str(), r.row.as_slice())));
        self.record_all(rows.into_iter().map(|r| (r.table, r.row, Timestamp::ZERO, false)).collect());
        self.full_pass_ends();
        Ok(true)
    }

    /// Back to not knowing: the next pass is full.
    fn forget(&self) {
        if let Ok(mut s) = self.state.lock() {
            *s = State::default();
        }
    }

    /// A full pass read these rows (noted in the filter).
    pub(crate) fn pass_read<'a>(&self, rows: impl IntoIterator<Item = (&'a str, &'a [u8])>) {
        if let Ok(mut s) = self.state.lock() {
            for (table, row) in rows {
                s.seen.note(table, row);
            }
        }
    }

    /// A full pass that started with [`DirtyRows::full_pass_starts`] read every row: the
    /// filter holds every row the store holds (those it read, and those written since it
    /// started), unless the set overflowed meanwhile (a later full pass starts it over).
    pub(crate) fn full_pass_ends(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.seen_complete = s.complete;
        }
    }

    /// Takes out the rows due at `safepoint` (smallest timestamp at or below it), sorted; the
    /// others stay. `None` if the set is not complete (a full pass is needed).
    pub(crate) fn take_due(&self, safepoint: Timestamp) -> Option<Vec<(String, Vec<u8>)>> {
        let mut s = self.state.lock().ok()?;
        if !s.complete {
            return None;
        }
        let mut due = Vec::new();
        for (table, rows) in &mut s.rows {
            rows.retain(|row, ts| {
                if *ts <= safepoint {
                    due.push((table.clone(), row.clone()));
                    false
                } else {
                    true
                }
            });
        }
        s.rows.retain(|_, rows| !rows.is_empty());
        s.len -= due.len();
        due.sort_unstable();
        Some(due)
    }

    /// Rows tracked now (for tests and status).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state.lock().map_or(0, |s| s.len)
    }
}

/// The smallest timestamp of a version `m` adds (a lock or staged data at its start, a write
/// record at its commit timestamp), if it adds one.
fn adds_version(m: &RowMutation) -> Option<Timestamp> {
    m.mutations
        .iter()
        .filter_map(|x| match x {
            Mutation::PutLock { start_ts, .. } | Mutation::PutData { start_ts, .. } => Some(*start_ts),
            Mutation::PutWrite { commit_ts, .. } => Some(*commit_ts),
            _ => None,
        })
        .min()
}

/// Whether every version `m` adds is a commit record of a `Put` (no lock, no staged data, no
/// Delete, no rollback record).
fn puts_only(m: &RowMutation) -> bool {
    m.mutations.iter().all(|x| match x {
        Mutation::PutLock { .. } | Mutation::PutData { .. } => false,
        Mutation::PutWrite { write, .. } => matches!(write.kind, WriteKind::Put(_)),
        _ => true,
    })
}

/// The writes an exclusive backend applied, recorded after it applied them (a pass that took
/// a row out before a write applied reads the row after it took it out, and a write recorded
/// before it applied could be missed by that read).
impl ApplyHook for DirtyRows {
    type Note = Write;

    fn note(&self, m: &RowMutation) -> Option<Self::Note> {
        adds_version(m).map(|ts| (m.table.clone(), m.row.clone(), ts, puts_only(m)))
    }

    fn applied(&self, notes: Vec<Self::Note>) {
        self.record_all(notes);
    }
}

/// An exclusive backend whose applied writes are recorded in [`DirtyRows`].
pub(crate) type Tracked = Observed<Arc<DirtyRows>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(n: u64) -> Timestamp {
        Timestamp::from_raw(n)
    }

    #[test]
    fn rows_are_due_by_their_smallest_timestamp_and_only_once_complete() {
        let d = DirtyRows::default();
        d.record("t", b"a", ts(5));
        assert_eq!(d.take_due(ts(100)), None, "not complete before a full pass started");
        assert!(d.full_pass_due());
        d.full_pass_starts();
        assert!(!d.full_pass_due());
        d.record("t", b"a", ts(50));
        d.record("t", b"a", ts(20));
        d.record("t", b"b", ts(30));
        d.record("u", b"a", ts(10));
        assert_eq!(d.len(), 3);
        let due = d.take_due(ts(25)).unwrap();
        assert_eq!(due, vec![("t".to_owned(), b"a".to_vec()), ("u".to_owned(), b"a".to_vec())]);
        assert_eq!(d.len(), 1);
        assert_eq!(d.take_due(ts(29)).unwrap(), vec![]);
        assert_eq!(d.take_due(ts(30)).unwrap(), vec![("t".to_owned(), b"b".to_vec())]);
        assert_eq!(d.len(), 0);
    }

    fn write(row: &str, at: u64, puts_only: bool) -> Write {
        ("t".to_owned(), row.as_bytes().to_vec(), ts(at), puts_only)
    }

    #[test]
    fn a_row_written_once_with_puts_is_not_recorded_once_a_full_pass_has_read_the_store() {
        let d = DirtyRows::default();
        d.full_pass_starts();
        // While the pass reads: every write is recorded.
        d.record_all(vec![write("during", 5, true)]);
        assert_eq!(d.len(), 1);
        d.pass_read([("t", &b"old"[..])]);
        d.full_pass_ends();
        d.record_all(vec![write("new", 6, true)]);
        assert_eq!(d.len(), 1, "a new row written with puts only: nothing to collect");
        d.record_all(vec![write("old", 7, true), write("during", 8, true), write("lock", 9, false)]);
        d.record_all(vec![write("new", 10, true)]);
        let due = d.take_due(ts(100)).unwrap();
        let rows: Vec<&[u8]> = due.iter().map(|(_, r)| r.as_slice()).collect();
        assert_eq!(rows, [&b"during"[..], b"lock", b"new", b"old"], "rows the store held, a lock, a second write");
        // The next full pass starts the filter over: until it ends, everything is recorded.
        d.full_pass_starts();
        d.record_all(vec![write("newer", 11, true)]);
        assert_eq!(d.len(), 1);
    }

    #[test]
    fn an_overflow_makes_the_next_pass_full() {
        let d = DirtyRows::default();
        d.full_pass_starts();
        for i in 0..=DIRTY_ROWS_MAX as u64 {
            d.record("t", &i.to_be_bytes(), ts(1));
        }
        assert!(d.full_pass_due());
        assert_eq!(d.take_due(ts(10)), None);
        d.full_pass_starts();
        assert_eq!(d.take_due(ts(10)), Some(vec![]));
    }
}
