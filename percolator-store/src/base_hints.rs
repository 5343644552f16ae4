//! What redb's last checkpoint cannot hold (`docs/design.md`, "A memtable in front of redb",
//! 10.): the highest commit timestamp of a write record in its cells table, and every lock key
//! in it. A round's conditions on a cell read the cell's locks and its write records down to
//! the transaction's start; when the base holds no lock of the cell and no write record that
//! recent, the base is not read.
//!
//! The facts live in memory only: built by one scan of the cells table at open
//! ([`BaseHints::scan`]), then kept by each checkpoint ([`BaseHints::note`]), and widened at a
//! reopen after a failed checkpoint ([`BaseHints::widen`]). Nothing stored can go stale (a
//! build of another version may have written the file in between).

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::cells::KvRead;
use crate::error::Result;
use crate::key::{self, Kind};

/// Locks kept at most: past this (locks that live across a checkpoint are few), the facts are
/// dropped until the next open.
pub(crate) const LOCKS_MAX: usize = 65_536;

/// The suffix of every cells key: kind byte, then the bit-inverted timestamp (big-endian).
const SUFFIX: usize = 9;

/// What one base's cells table holds, at most.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BaseHints {
    /// No write record in the base has a commit timestamp above this (raw).
    max_write: u64,
    /// Every lock key in the base (possibly more: after [`BaseHints::widen`]).
    locks: BTreeSet<Vec<u8>>,
}

/// A version key's cell prefix length, kind and timestamp: `None` unless `key` is exactly
/// `enc(table) ‖ enc(row) ‖ enc(column) ‖ kind ‖ !ts` (the encoding is prefix-free, so a key
/// that decodes so belongs to that one cell).
fn split(key: &[u8]) -> Option<(usize, Kind, u64)> {
    let cell = key::cell_prefix_len(key)?;
    if key.len() != cell + SUFFIX {
        return None;
    }
    let kind = Kind::from_byte(key[cell])?;
    let ts = !u64::from_be_bytes(key[cell + 1..].try_into().ok()?);
    Some((cell, kind, ts))
}

impl BaseHints {
    /// Records that the base's cells table now holds `key` (`present`) or no longer does.
    /// Returns false if `key` is not a version key (the facts can no longer be trusted).
    #[must_use]
    pub(crate) fn note(&mut self, key: &[u8], present: bool) -> bool {
        let Some((_, kind, ts)) = split(key) else { return false };
        match kind {
            Kind::Lock if present => {
                self.locks.insert(key.to_vec());
            }
            Kind::Lock => {
                self.locks.remove(key);
            }
            // A removed write record only lowers the true maximum.
            Kind::Write if present => self.max_write = self.max_write.max(ts),
            Kind::Write | Kind::Data => {}
        }
        true
    }

    /// Facts true of the base whether or not a checkpoint of these changes (`key`, present or
    /// removed) reached it: every lock it puts is added, none removed, and the maximum raised.
    /// Returns false if a key is not a version key.
    #[must_use]
    pub(crate) fn widen<'a>(&mut self, changes: impl IntoIterator<Item = (&'a [u8], bool)>) -> bool {
        changes.into_iter().all(|(key, present)| !present || self.note(key, true))
    }

    /// Whether there are too many locks to keep.
    pub(crate) fn too_many(&self) -> bool {
        self.locks.len() > LOCKS_MAX
    }

    /// Builds the facts from every key of a cells table. `None` if a key is not a version key,
    /// or past [`LOCKS_MAX`] locks.
    pub(crate) fn scan(cells: &dyn KvRead) -> Result<Option<BaseHints>> {
        let mut hints = BaseHints::default();
        let mut whole = true;
        cells.for_range(&[], None, &mut |k, _| {
            whole = hints.note(k, true) && !hints.too_many();
            Ok(whole)
        })?;
        Ok(whole.then_some(hints))
    }

    /// False if the base certainly holds no key `k` with `from <= k < to`: only for a range
    /// inside one cell's keys that covers no staged data (its locks, its write records down to
    /// some timestamp: what conditions read). True otherwise.
    pub(crate) fn may_hold(&self, from: &[u8], to: Option<&[u8]>) -> bool {
        let Some(to) = to else { return true };
        if to <= from {
            return false; // empty (or inverted)
        }
        let Some((cell, from_kind, from_ts)) = split(from) else { return true };
        // `to` is a version key of the same cell, or one with a 0 byte after it (the smallest
        // key after it: the range then includes that key).
        let (to_key, to_inclusive) = match to.len().checked_sub(from.len()) {
            Some(0) => (to, false),
            Some(1) if to[to.len() - 1] == 0 => (&to[..to.len() - 1], true),
            _ => return true,
        };
        let Some((to_cell, to_kind, to_ts)) = split(to_key) else { return true };
        if to_cell != cell || from[..cell] != to_key[..cell] || from_kind == Kind::Data || to_kind == Kind::Data {
            return true;
        }
        if self.locks.range::<[u8], _>((Bound::Included(from), Bound::Excluded(to))).next().is_some() {
            return true;
        }
        if to_kind == Kind::Lock {
            // Only lock keys in the range, and none is the base's.
            return false;
        }
        // Write records in the range: those above `to_ts` (at it too if inclusive), up to
        // `from_ts` if the range starts among them. The base's are at or below `max_write`.
        let highest = if from_kind == Kind::Write { from_ts } else { u64::MAX };
        if highest < to_ts || (highest == to_ts && !to_inclusive) {
            return false; // an empty write range
        }
        if to_inclusive { self.max_write >= to_ts } else { self.max_write > to_ts }
    }

    /// False if the base certainly does not hold `key`.
    pub(crate) fn may_hold_key(&self, key: &[u8]) -> bool {
        match split(key) {
            Some((_, Kind::Lock, _)) => self.locks.contains(key),
            Some((_, Kind::Write, ts)) => ts <= self.max_write,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{cell_prefix, prefix_end, row_prefix, version_key};
    use crate::timestamp::Timestamp;

    fn t(n: u64) -> Timestamp {
        Timestamp::from_raw(n)
    }

    /// Against a model: random sets of lock, write and data keys over cells of rows shaped to
    /// confuse a parser that looks only at a key's last 9 bytes (6-byte rows, rows holding
    /// 0x01 / 0x02 / 0x00 bytes); for every range conditions, reads, row reads and scans use,
    /// and every key, `may_hold` is true whenever the set holds a key in it (never a wrong
    /// "no"), and it says "no" often for the condition shapes.
    #[test]
    fn never_says_no_when_the_base_holds_a_key_in_the_range() {
        let rows: [&[u8]; 5] = [b"row001", b"abc\x01defghi", b"x\x02yz\x01\x02", b"\x00\x01", b"row002"];
        let cells: Vec<Vec<u8>> = rows.iter().flat_map(|r| ["a", "b"].map(|c| cell_prefix("t", r, c))).collect();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut said_no = 0;
        for _ in 0..300 {
            let mut hints = BaseHints::default();
            let mut keys = BTreeSet::new();
            for _ in 0..next(10) {
                let cell = &cells[next(cells.len() as u64) as usize];
                let kind = [Kind::Lock, Kind::Write, Kind::Data][next(3) as usize];
                let key = version_key(cell, kind, t(1 + next(20)));
                assert!(hints.note(&key, true));
                keys.insert(key);
            }
            // Some removed again (a lock resolved, a record collected).
            for key in keys.clone() {
                if next(4) == 0 {
                    assert!(hints.note(&key, false));
                    keys.remove(&key);
                }
            }
            let mut check = |from: &[u8], to: Option<&[u8]>, counts: bool| {
                let upper = to.map_or(Bound::Unbounded, Bound::Excluded);
                let held = to.is_none_or(|to| from < to)
                    && keys.range::<[u8], _>((Bound::Included(from), upper)).next().is_some();
                let says = hints.may_hold(from, to);
                assert!(says || !held, "said no for {from:02x?}..{to:02x?} holding {keys:02x?}");
                if counts {
                    said_no += usize::from(!says);
                }
            };
            for (i, row) in rows.iter().enumerate() {
                // A row (GC), rows to rows (scans): never a wrong "no".
                let prefix = row_prefix("t", row);
                check(&prefix, prefix_end(&prefix).as_deref(), false);
                check(&prefix, Some(&row_prefix("t", rows[(i + 1) % rows.len()])), false);
                check(&row_prefix("t", b"row000"), Some(&row_prefix("t", b"row999")), false);
            }
            for cell in &cells {
                for since in 1..=22 {
                    let mut inclusive = version_key(cell, Kind::Write, t(since));
                    inclusive.push(0);
                    let shapes = [
                        (version_key(cell, Kind::Lock, Timestamp::MAX), inclusive),
                        (version_key(cell, Kind::Lock, Timestamp::MAX), version_key(cell, Kind::Lock, Timestamp::ZERO)),
                        (version_key(cell, Kind::Write, Timestamp::MAX), version_key(cell, Kind::Write, t(since))),
                        (version_key(cell, Kind::Lock, t(since)), version_key(cell, Kind::Data, Timestamp::MAX)),
                    ];
                    for (from, to) in shapes {
                        check(&from, Some(&to), true);
                    }
                    for kind in [Kind::Lock, Kind::Write, Kind::Data] {
                        let key = version_key(cell, kind, t(since));
                        assert!(hints.may_hold_key(&key) || !keys.contains(&key), "said no for key {key:02x?}");
                    }
                }
            }
        }
        assert!(said_no > 1000, "the hints skipped only {said_no} ranges");
    }

    /// The facts of a table scanned equal those noted key by key; a key that is not a version
    /// key (here: a row prefix whose last 9 bytes look like a lock's suffix) makes a scan give
    /// up; widening keeps every lock and write either outcome of a checkpoint could leave.
    #[test]
    fn a_scan_builds_the_facts_gives_up_on_a_foreign_key_and_widening_keeps_both_outcomes() {
        let cell = cell_prefix("t", b"r", "c");
        let mut map = crate::cells::tests::Map(std::collections::BTreeMap::new());
        let mut noted = BaseHints::default();
        for (kind, ts) in [(Kind::Lock, 9), (Kind::Write, 7), (Kind::Write, 3), (Kind::Data, 9)] {
            let key = version_key(&cell, kind, t(ts));
            assert!(noted.note(&key, true));
            map.0.insert(key, b"v".to_vec());
        }
        assert_eq!(BaseHints::scan(&map).unwrap(), Some(noted.clone()));
        assert_eq!(noted.max_write, 7);
        let mut foreign = map.0.clone();
        foreign.insert(row_prefix("t", b"row001"), b"v".to_vec());
        assert_eq!(BaseHints::scan(&crate::cells::tests::Map(foreign)).unwrap(), None);

        // A checkpoint that removes the lock and adds another, and a write at 12: whether it
        // reached the file or not, the widened facts say "maybe" for both locks and the write.
        let (old_lock, new_lock) = (version_key(&cell, Kind::Lock, t(9)), version_key(&cell, Kind::Lock, t(11)));
        let write = version_key(&cell, Kind::Write, t(12));
        let mut widened = noted.clone();
        assert!(widened.widen([(old_lock.as_slice(), false), (new_lock.as_slice(), true), (write.as_slice(), true)]));
        for key in [&old_lock, &new_lock, &write] {
            assert!(widened.may_hold_key(key), "{key:02x?}");
        }
    }
}
