//! What redb's last checkpoint cannot hold (`docs/design.md`, "A memtable in front of redb",
//! 10.): the highest commit timestamp of a write record in its cells table, and every lock key
//! in it. A round's conditions on a cell read the cell's locks and its write records down to
//! the transaction's start; when the base holds no lock of the cell and no write record that
//! recent, the base is not read.
//!
//! The facts follow every change of the base's cells ([`BaseHints::note`]: a checkpoint, the
//! replay at open), are stored in the same redb transaction as those cells
//! ([`BaseHints::encode`]), and are rebuilt by one scan ([`BaseHints::scan`]) for a store that
//! has none.

use std::collections::BTreeSet;

use crate::cells::KvRead;
use crate::error::Result;
use crate::key::Kind;

/// Metadata key of [`BaseHints::max_write`] (8 bytes, big-endian).
pub(crate) const MAX_WRITE_KEY: &str = "redo/base_max_write";
/// Metadata key of [`BaseHints::locks`] (each key as a 4-byte big-endian length, then its bytes).
pub(crate) const LOCKS_KEY: &str = "redo/base_locks";

/// Locks kept at most: past this (locks that live across a checkpoint are few), the facts are
/// dropped, and the next open scans for them again.
pub(crate) const LOCKS_MAX: usize = 65_536;

/// The suffix of every cells key: kind byte, then the bit-inverted timestamp (big-endian).
const SUFFIX: usize = 9;

/// What one base's cells table holds, at most.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BaseHints {
    /// No write record in the base has a commit timestamp above this (raw).
    max_write: u64,
    /// Every lock key in the base.
    locks: BTreeSet<Vec<u8>>,
}

/// A cells key's kind and timestamp, if it is shaped as one (`cell ‖ kind ‖ !ts`).
fn split(key: &[u8]) -> Option<(usize, Kind, u64)> {
    let cell = key.len().checked_sub(SUFFIX)?;
    let kind = Kind::from_byte(key[cell])?;
    let ts = !u64::from_be_bytes(key[cell + 1..].try_into().ok()?);
    Some((cell, kind, ts))
}

impl BaseHints {
    /// Records that the base's cells table now holds `key` (`present`) or no longer does.
    /// Returns false if `key` is not a cells key (the facts can no longer be trusted).
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

    /// Whether there are too many locks to keep.
    pub(crate) fn too_many(&self) -> bool {
        self.locks.len() > LOCKS_MAX
    }

    /// Builds the facts from every key of a cells table. `None` if a key is not a cells key.
    pub(crate) fn scan(cells: &dyn KvRead) -> Result<Option<BaseHints>> {
        let mut hints = BaseHints::default();
        let mut whole = true;
        cells.for_range(&[], None, &mut |k, _| {
            whole = hints.note(k, true);
            Ok(whole)
        })?;
        Ok(whole.then_some(hints))
    }

    /// The two metadata values: [`MAX_WRITE_KEY`]'s and [`LOCKS_KEY`]'s.
    pub(crate) fn encode(&self) -> (Vec<u8>, Vec<u8>) {
        let mut locks = Vec::with_capacity(self.locks.iter().map(|k| k.len() + 4).sum());
        for k in &self.locks {
            locks.extend_from_slice(&(k.len() as u32).to_be_bytes());
            locks.extend_from_slice(k);
        }
        (self.max_write.to_be_bytes().to_vec(), locks)
    }

    /// The facts from the two metadata values; `None` if they do not decode.
    pub(crate) fn decode(max_write: &[u8], locks: &[u8]) -> Option<BaseHints> {
        let max_write = u64::from_be_bytes(max_write.try_into().ok()?);
        let mut set = BTreeSet::new();
        let mut rest = locks;
        while !rest.is_empty() {
            let n = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let key = rest.get(4..4 + n)?;
            split(key).filter(|(_, kind, _)| *kind == Kind::Lock)?;
            set.insert(key.to_vec());
            rest = &rest[4 + n..];
        }
        Some(BaseHints { max_write, locks: set })
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
        // `to` is a cells key of the same cell, or one with a 0 byte after it (the smallest key
        // after it: the range then includes that key).
        let (to_key, to_inclusive) = match to.len().checked_sub(from.len()) {
            Some(0) => (to, false),
            Some(1) if to[to.len() - 1] == 0 => (&to[..to.len() - 1], true),
            _ => return true,
        };
        let Some((to_cell, to_kind, to_ts)) = split(to_key) else { return true };
        if to_cell != cell || from[..cell] != to_key[..cell] || from_kind == Kind::Data || to_kind == Kind::Data {
            return true;
        }
        if self
            .locks
            .range::<[u8], _>((std::ops::Bound::Included(from), std::ops::Bound::Excluded(to)))
            .next()
            .is_some()
        {
            return true;
        }
        if to_kind == Kind::Lock {
            // Only lock keys in the range, and none is the base's.
            return false;
        }
        // Write records in the range: those above `to_ts` (at it too if inclusive), up to
        // `from_ts` if the range starts among them. The base's are at or below `max_write`.
        let highest = if from_kind == Kind::Write { from_ts } else { u64::MAX };
        let lowest_excluded = to_ts;
        if highest <= lowest_excluded && !(to_inclusive && highest == lowest_excluded) {
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
    use crate::key::{cell_prefix, version_key};
    use crate::timestamp::Timestamp;

    fn t(n: u64) -> Timestamp {
        Timestamp::from_raw(n)
    }

    /// Against a model: a random set of lock, write and data keys over a few cells; for every
    /// range of the shapes conditions and reads use, and every key, `may_hold` is true whenever
    /// the set holds a key in it (never a wrong "no"), and false for the condition shapes
    /// when it holds none and no write record at or below `max_write` could be there.
    #[test]
    fn never_says_no_when_the_base_holds_a_key_in_the_range() {
        let cells: Vec<Vec<u8>> = ["a", "b", "c"].iter().map(|c| cell_prefix("t", b"row", c)).collect();
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
            for _ in 0..next(8) {
                let cell = &cells[next(3) as usize];
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
            // The facts survive their metadata encoding.
            let (m, l) = hints.encode();
            assert_eq!(BaseHints::decode(&m, &l).as_ref(), Some(&hints));
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
                        let held = keys.range(from.clone()..to.clone()).next().is_some();
                        let says = hints.may_hold(&from, Some(&to));
                        assert!(says || !held, "said no for {from:02x?}..{to:02x?} holding {keys:02x?}");
                        said_no += usize::from(!says);
                    }
                    for kind in [Kind::Lock, Kind::Write, Kind::Data] {
                        let key = version_key(cell, kind, t(since));
                        assert!(hints.may_hold_key(&key) || !keys.contains(&key), "said no for key {key:02x?}");
                    }
                }
                // A whole row (GC, scans) is never skipped.
                assert!(hints.may_hold(&cell_prefix("t", b"row", ""), None));
            }
        }
        assert!(said_no > 1000, "the hints skipped only {said_no} ranges");
    }

    /// The facts of a table scanned equal those noted key by key, and a key that is not a
    /// cells key makes a scan give up (the facts could be wrong).
    #[test]
    fn a_scan_builds_the_facts_and_gives_up_on_a_foreign_key() {
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
        map.0.insert(b"x".to_vec(), b"v".to_vec());
        assert_eq!(BaseHints::scan(&map).unwrap(), None);
    }
}
