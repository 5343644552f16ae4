//! A randomized model test: proptest generates single-threaded interleavings of several open
//! transactions (begin, get, get_many, set, delete, scan, commit, drop) over a tiny key space,
//! and every read and every commit outcome is compared with a reference model of snapshot
//! isolation. An action on a slot with no open transaction begins one there first.
//!
//! The model keeps, per cell, the committed versions with their (logical) commit times. A
//! transaction reads the newest version committed before it began, overlaid with its own
//! buffered writes. A commit succeeds iff no other transaction committed a write to one of its
//! written cells after it began (first-committer-wins). Locks only exist inside `commit`, so in
//! a single-threaded run a commit never meets another transaction's lock.
//!
//! Rollback records a failed commit leaves behind must not abort anyone else: the model is the
//! textbook rule, so a spurious abort fails the test as surely as a lost update.

mod common;

use std::collections::BTreeMap;

use common::{TempDir, TestStore};
use percolator_store::{CellRef, ConflictKind, Error, ScanEntry, StoreConfig, Timestamp, Transaction};
use proptest::collection::vec;
use proptest::prelude::*;

const TABLE: &str = "m";
/// Row keys: the empty row and two rows where one is a prefix of the other (encoding edge cases).
const ROWS: [&[u8]; 3] = [b"", b"a", b"a\0"];
const COLS: [&str; 2] = ["c:a", "c:b"];
const CELLS: usize = ROWS.len() * COLS.len();
/// Scan bounds, including ones between and around the rows.
const BOUNDS: [&[u8]; 5] = [b"", b"\0", b"a", b"a\0", b"b"];
/// Column filters a scan may use.
const FILTERS: [Option<&[&str]>; 5] = [None, Some(&["c:a"]), Some(&["c:b"]), Some(&["c:a", "c:b"]), Some(&[])];
/// Transactions that may be open at once.
const SLOTS: usize = 4;

/// Cell `i`: row `i / 2`, column `i % 2`. Index order is the store's cell order.
fn cell_ref(i: usize) -> CellRef {
    CellRef::new(TABLE, ROWS[i / COLS.len()], COLS[i % COLS.len()])
}

/// Small values; 0 is the empty value (present, unlike a delete).
fn value(v: u8) -> Vec<u8> {
    if v == 0 { Vec::new() } else { vec![v] }
}

#[derive(Clone, Debug)]
struct ScanArgs {
    start: usize,
    end: Option<usize>,
    filter: usize,
    limit: usize,
}

#[derive(Clone, Debug)]
enum Action {
    Begin(usize),
    Get(usize, usize),
    GetMany(usize, Vec<usize>),
    Set(usize, usize, u8),
    Delete(usize, usize),
    Scan(usize, ScanArgs),
    Commit(usize),
    Drop(usize),
}

/// Scan arguments; `end` may be below `start` (an inverted range, which must come back empty).
fn scan_args() -> impl Strategy<Value = ScanArgs> {
    (
        0..BOUNDS.len(),
        proptest::option::of(0..BOUNDS.len()),
        0..FILTERS.len(),
        prop_oneof![4 => 0..6usize, 1 => Just(usize::MAX)],
    )
        .prop_map(|(start, end, filter, limit)| ScanArgs { start, end, filter, limit })
}

fn action() -> impl Strategy<Value = Action> {
    let slot = || 0..SLOTS;
    let cell = || 0..CELLS;
    prop_oneof![
        1 => slot().prop_map(Action::Begin),
        3 => (slot(), cell()).prop_map(|(s, c)| Action::Get(s, c)),
        1 => (slot(), vec(cell(), 0..4)).prop_map(|(s, cs)| Action::GetMany(s, cs)),
        6 => (slot(), cell(), 0..3u8).prop_map(|(s, c, v)| Action::Set(s, c, v)),
        2 => (slot(), cell()).prop_map(|(s, c)| Action::Delete(s, c)),
        2 => (slot(), scan_args()).prop_map(|(s, a)| Action::Scan(s, a)),
        4 => slot().prop_map(Action::Commit),
        1 => slot().prop_map(Action::Drop),
    ]
}

/// A case: the initial committed value of each cell (`None`: absent), then the actions.
type Case = (Vec<Option<u8>>, Vec<Action>);

fn case(max_actions: usize) -> impl Strategy<Value = Case> {
    (vec(proptest::option::of(0..3u8), CELLS), vec(action(), 1..max_actions))
}

// ---- the reference model -------------------------------------------------------------------------

struct ModelTxn {
    /// Logical time of the begin.
    start: u64,
    /// Buffered writes: `Some(v)` set, `None` delete.
    writes: BTreeMap<usize, Option<u8>>,
}

struct Model {
    /// Logical clock: one tick per begin and per successful commit.
    clock: u64,
    /// Per cell, committed versions `(commit time, value)` in commit order.
    committed: BTreeMap<usize, Vec<(u64, Option<u8>)>>,
    txns: [Option<ModelTxn>; SLOTS],
}

impl Model {
    fn new() -> Model {
        Model { clock: 0, committed: BTreeMap::new(), txns: Default::default() }
    }

    fn begin(&mut self, slot: usize) {
        self.clock += 1;
        self.txns[slot] = Some(ModelTxn { start: self.clock, writes: BTreeMap::new() });
    }

    /// The value of `cell` committed before `time`.
    fn committed_before(&self, cell: usize, time: u64) -> Option<u8> {
        self.committed.get(&cell).and_then(|vs| vs.iter().rev().find(|(t, _)| *t < time)).and_then(|(_, v)| *v)
    }

    /// What transaction `slot` reads at `cell`.
    fn read(&self, slot: usize, cell: usize) -> Option<Vec<u8>> {
        let t = self.txns[slot].as_ref().expect("open");
        match t.writes.get(&cell) {
            Some(w) => w.map(value),
            None => self.committed_before(cell, t.start).map(value),
        }
    }

    fn scan(&self, slot: usize, a: &ScanArgs) -> Vec<ScanEntry> {
        let (start, end, filter) = (BOUNDS[a.start], a.end.map(|e| BOUNDS[e]), FILTERS[a.filter]);
        (0..CELLS)
            .filter(|&i| {
                let c = cell_ref(i);
                c.row.as_slice() >= start
                    && end.is_none_or(|e| c.row.as_slice() < e)
                    && filter.is_none_or(|f| f.contains(&c.column.as_str()))
            })
            .filter_map(|i| {
                let c = cell_ref(i);
                self.read(slot, i).map(|value| ScanEntry { row: c.row, column: c.column, value })
            })
            .take(a.limit)
            .collect()
    }

    /// A cell this transaction writes that someone wrote after it began, if any.
    fn conflict(&self, t: &ModelTxn, cells: impl IntoIterator<Item = usize>) -> Option<usize> {
        cells.into_iter().find(|c| self.committed.get(c).is_some_and(|vs| vs.iter().any(|(time, _)| *time > t.start)))
    }

    /// Commits `slot`; returns whether it committed.
    fn commit(&mut self, slot: usize) -> bool {
        let t = self.txns[slot].take().expect("open");
        if t.writes.is_empty() {
            return true;
        }
        if self.conflict(&t, t.writes.keys().copied()).is_none() {
            self.clock += 1;
            for (&c, &v) in &t.writes {
                self.committed.entry(c).or_default().push((self.clock, v));
            }
            return true;
        }
        false
    }

    fn latest(&self) -> Vec<ScanEntry> {
        (0..CELLS)
            .filter_map(|i| {
                let c = cell_ref(i);
                self.committed_before(i, u64::MAX).map(|v| ScanEntry { row: c.row, column: c.column, value: value(v) })
            })
            .collect()
    }
}

// ---- running a case --------------------------------------------------------------------------------

/// Runs one case.
fn run_case(store: &TestStore, (initial, actions): &Case) {
    let mut model = Model::new();
    store
        .run(|t| {
            for (c, v) in initial.iter().enumerate() {
                if let Some(v) = v {
                    let r = cell_ref(c);
                    t.set(TABLE, &r.row, &r.column, value(*v))?;
                }
            }
            Ok(())
        })
        .unwrap();
    model.clock = 1;
    for (c, v) in initial.iter().enumerate() {
        if v.is_some() {
            model.committed.insert(c, vec![(1, *v)]);
        }
    }
    let mut txns: [Option<Transaction>; SLOTS] = Default::default();
    let mut last_ts = Timestamp::ZERO;
    for (step, a) in actions.iter().enumerate() {
        let ctx = || format!("step {step}: {a:?}");
        let mut begin = |txns: &mut [Option<Transaction>; SLOTS], s: usize| {
            txns[s] = None;
            let t = store.begin().unwrap();
            assert!(t.start_ts() > last_ts, "{}: start_ts must increase", ctx());
            last_ts = t.start_ts();
            txns[s] = Some(t);
            model.begin(s);
        };
        // Any other action on an empty slot begins a transaction there first.
        if !matches!(a, Action::Begin(_) | Action::Drop(_)) && txns[a.slot()].is_none() {
            begin(&mut txns, a.slot());
        }
        match a {
            Action::Begin(s) => begin(&mut txns, *s),
            Action::Drop(s) => {
                txns[*s] = None;
                model.txns[*s] = None;
            }
            Action::Get(s, c) => {
                let r = cell_ref(*c);
                let got = txns[*s].as_ref().unwrap().get(TABLE, &r.row, &r.column).unwrap();
                assert_eq!(got, model.read(*s, *c), "{}", ctx());
            }
            Action::GetMany(s, cs) => {
                let refs: Vec<CellRef> = cs.iter().map(|&c| cell_ref(c)).collect();
                let got = txns[*s].as_ref().unwrap().get_many(&refs).unwrap();
                let want: Vec<Option<Vec<u8>>> = cs.iter().map(|&c| model.read(*s, c)).collect();
                assert_eq!(got, want, "{}", ctx());
            }
            Action::Set(s, c, v) => {
                let r = cell_ref(*c);
                txns[*s].as_mut().unwrap().set(TABLE, &r.row, &r.column, value(*v)).unwrap();
                model.txns[*s].as_mut().unwrap().writes.insert(*c, Some(*v));
            }
            Action::Delete(s, c) => {
                let r = cell_ref(*c);
                txns[*s].as_mut().unwrap().delete(TABLE, &r.row, &r.column).unwrap();
                model.txns[*s].as_mut().unwrap().writes.insert(*c, None);
            }
            Action::Scan(s, args) => {
                let t = txns[*s].as_ref().unwrap();
                let got = t
                    .scan(TABLE, BOUNDS[args.start], args.end.map(|e| BOUNDS[e]), FILTERS[args.filter], args.limit)
                    .unwrap();
                assert_eq!(got, model.scan(*s, args), "{}", ctx());
            }
            Action::Commit(s) => {
                let t = txns[*s].take().unwrap();
                let (start, read_only) = (t.start_ts(), model.txns[*s].as_ref().unwrap().writes.is_empty());
                let got = t.commit();
                let want = model.commit(*s);
                match got {
                    Ok(ts) if want => {
                        if read_only {
                            assert_eq!(ts, start, "{}: a read-only commit returns its start_ts", ctx());
                        } else {
                            assert!(
                                ts > last_ts,
                                "{}: commit_ts {ts} must exceed every earlier timestamp {last_ts}",
                                ctx()
                            );
                            last_ts = ts;
                        }
                    }
                    Err(Error::Conflict { kind: ConflictKind::WriteAfterStart, .. }) if !want => {}
                    other => panic!("{}: store said {other:?}, model expected commit = {want}", ctx()),
                }
            }
        }
    }
    drop(txns);
    // The committed state, seen by a fresh transaction, is the model's; no lock is left.
    let t = store.begin().unwrap();
    assert_eq!(t.scan(TABLE, b"", None, None, usize::MAX).unwrap(), model.latest(), "final state");
    store.flush_secondaries();
    for r in store.backend.scan_versions(None, usize::MAX).unwrap() {
        for c in &r.cells {
            assert!(c.locks.is_empty() && c.data.is_empty(), "leftover lock or data on {:?}/{}", r.row, c.column);
        }
    }
}

impl Action {
    fn slot(&self) -> usize {
        match self {
            Action::Begin(s)
            | Action::Get(s, _)
            | Action::GetMany(s, _)
            | Action::Set(s, _, _)
            | Action::Delete(s, _)
            | Action::Scan(s, _)
            | Action::Commit(s)
            | Action::Drop(s) => *s,
        }
    }
}

fn redb(dir: &TempDir) -> TestStore {
    common::redb_store(dir, StoreConfig::default())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn model(case in case(100)) {
        run_case(&common::test_store(StoreConfig::default()), &case);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn model_redb(case in case(60)) {
        let dir = TempDir::new("model");
        run_case(&redb(&dir), &case);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The two-phase path on its own: with one-phase commit off, single-row commits prewrite
    /// and commit like multi-row ones.
    #[test]
    fn model_two_phase_only(case in case(100)) {
        let store = common::test_store(StoreConfig { one_phase_commit: false, ..StoreConfig::default() });
        run_case(&store, &case);
    }
}
