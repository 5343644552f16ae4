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

use crate::bigtable::{Mutation, RowMutation};
use crate::observed::{ApplyHook, Observed};
use crate::timestamp::Timestamp;

/// Rows tracked at most: past this, tracking stops and the next pass is full (a bounded set:
/// about 100 bytes a row).
pub(crate) const DIRTY_ROWS_MAX: usize = 500_000;

/// A full pass at least this often, as a safety net (every write is recorded, so it should find
/// what the incremental passes left: nothing).
pub(crate) const FULL_PASS_EVERY: Duration = Duration::from_secs(3600);

/// Rows written since a GC pass last looked at them, by table, with the smallest timestamp of a
/// version in them that no pass has looked at.
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
}

impl DirtyRows {
    /// Records that `row` of `table` has a version at `ts` no pass has looked at.
    pub(crate) fn record(&self, table: &str, row: &[u8], ts: Timestamp) {
        self.record_all(vec![(table.to_owned(), row.to_vec(), ts)]);
    }

    /// Records each `(table, row, ts)` of `writes`, under one lock.
    pub(crate) fn record_all(&self, writes: Vec<(String, Vec<u8>, Timestamp)>) {
        let Ok(mut s) = self.state.lock() else { return };
        if !s.complete {
            // Nothing to keep: the next pass is full.
            return;
        }
        let State { rows, len, .. } = &mut *s;
        for (table, row, ts) in writes {
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
                        break;
                    }
                }
            }
        }
        if s.len > DIRTY_ROWS_MAX {
            s.rows.clear();
            s.len = 0;
            s.complete = false;
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
    pub(crate) fn full_pass_starts(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.rows.clear();
            s.len = 0;
            s.complete = true;
            s.last_full = Some(Instant::now());
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

/// The writes an exclusive backend applied, recorded after it applied them (a pass that took
/// a row out before a write applied reads the row after it took it out, and a write recorded
/// before it applied could be missed by that read).
impl ApplyHook for DirtyRows {
    type Note = (String, Vec<u8>, Timestamp);

    fn note(&self, m: &RowMutation) -> Option<Self::Note> {
        adds_version(m).map(|ts| (m.table.clone(), m.row.clone(), ts))
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
