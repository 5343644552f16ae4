//! Snapshot-isolation anomaly tests: which anomalies the store rules out (lost update, read
//! skew, reading uncommitted or later-committed data) and which one SI is allowed to show (write
//! skew), plus the read path a snapshot depends on — read-your-own-writes, deletes, `get_many`
//! and `scan` with bounds, column filters, limits and buffered writes overlaid on the snapshot —
//! and name validation. Every scenario runs on both the in-memory backend and redb.

mod common;

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use common::TestStore;
use percolator_store::backends::{
    LockRecord, Mutation, Op, Outcome, RowMutation, WriteKind, WriteRecord, encode_value,
};
use percolator_store::{
    CellRef, ConflictKind, Error, RetryPolicy, ScanEntry, Store, StoreConfig, Timestamp, Transaction,
};

/// The table every scenario uses.
const T: &str = "si";

/// Generous retries: the threaded scenarios contend on one cell on purpose.
fn config() -> StoreConfig {
    StoreConfig {
        retry: RetryPolicy {
            max_attempts: 10_000,
            initial_backoff: std::time::Duration::from_micros(100),
            max_backoff: std::time::Duration::from_millis(10),
        },
        ..StoreConfig::default()
    }
}

/// Generates one `#[test]` per scenario and backend: `mem::<name>` and `redb::<name>`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod mem {
            $(
                #[test]
                fn $name() {
                    super::$name(super::common::test_store(super::config()));
                }
            )*
        }
        mod redb {
            $(
                #[test]
                fn $name() {
                    let dir = super::common::TempDir::new(concat!("si-", stringify!($name)));
                    super::$name(super::common::redb_store(&dir, super::config()));
                }
            )*
        }
    };
}

on_both_backends!(
    lost_update_single_row,
    lost_update_multi_row,
    lost_update_threads,
    read_skew_impossible,
    write_skew_allowed,
    write_skew_prevented_by_materialized_conflict,
    read_your_own_writes,
    delete_visibility,
    snapshot_ignores_later_commits,
    get_many_reads_the_snapshot,
    scan_matches_reference,
    scan_overlays_buffered_writes,
    scan_limit_inside_wide_row,
    scan_repages_after_resolving_locks,
    scan_inverted_range_is_empty,
    reserved_and_empty_names_rejected,
);

// ---- helpers ---------------------------------------------------------------------------------

fn get(t: &Transaction, row: &str, col: &str) -> Option<Vec<u8>> {
    t.get(T, row, col).unwrap()
}

fn get_u64(t: &Transaction, row: &str, col: &str) -> u64 {
    common::get_u64(t, T, row, col).unwrap()
}

fn set_u64(t: &mut Transaction, row: &str, col: &str, v: u64) {
    common::set_u64(t, T, row, col, v).unwrap()
}

fn seed(store: &Store, cells: &[(&str, &str, u64)]) {
    store
        .run(|t| {
            for (row, col, v) in cells {
                common::set_u64(t, T, row, col, *v)?;
            }
            Ok(())
        })
        .unwrap();
}

fn latest_u64(store: &Store, row: &str, col: &str) -> u64 {
    get_u64(&store.begin().unwrap(), row, col)
}

/// Asserts a write-write conflict: the loser of first-committer-wins.
#[track_caller]
fn assert_write_conflict(r: percolator_store::Result<Timestamp>) {
    match r {
        Err(e @ Error::Conflict { kind: ConflictKind::WriteAfterStart | ConflictKind::Locked, .. }) => {
            assert!(e.is_retryable(), "a conflict must be retryable: {e}")
        }
        other => panic!("expected Conflict {{ WriteAfterStart | Locked }}, got {other:?}"),
    }
}

#[track_caller]
fn assert_invalid<T: std::fmt::Debug>(r: percolator_store::Result<T>) {
    match r {
        Err(Error::InvalidArgument(_)) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

/// No lock or staged value is left anywhere.
#[track_caller]
fn assert_no_locks(store: &TestStore) {
    store.flush_secondaries();
    let versions = store.backend.scan_versions(None, usize::MAX).unwrap();
    for r in &versions {
        for c in &r.cells {
            assert!(
                c.locks.is_empty() && c.data.is_empty(),
                "leftover lock or data in {}/{:?}/{}: {c:?}",
                r.table,
                r.row,
                c.column
            );
        }
    }
}

fn entries(scan: &[ScanEntry]) -> Vec<(String, String, String)> {
    scan.iter()
        .map(|e| {
            (String::from_utf8(e.row.clone()).unwrap(), e.column.clone(), String::from_utf8(e.value.clone()).unwrap())
        })
        .collect()
}

type Model = BTreeMap<(Vec<u8>, String), Vec<u8>>;

/// What `scan` must return for `model` (the snapshot with the transaction's writes applied).
fn expected_scan(
    model: &Model,
    start: &[u8],
    end: Option<&[u8]>,
    columns: Option<&[&str]>,
    limit: usize,
) -> Vec<ScanEntry> {
    model
        .iter()
        .filter(|((row, col), _)| {
            row.as_slice() >= start
                && end.is_none_or(|e| row.as_slice() < e)
                && columns.is_none_or(|cs| cs.contains(&col.as_str()))
        })
        .take(limit)
        .map(|((row, column), value)| ScanEntry { row: row.clone(), column: column.clone(), value: value.clone() })
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

fn apply_row(store: &TestStore, row: &str, mutations: Vec<Mutation>) {
    let op = Op::Row(RowMutation { table: T.into(), row: row.as_bytes().to_vec(), conditions: Vec::new(), mutations });
    assert_eq!(store.backend.apply(vec![op]).unwrap(), vec![Outcome::Applied]);
}

/// Leaves the state of a transaction that started at `start_ts`, locked `row/col` as a
/// secondary (staging `value`) and then stopped: its primary `prow/c:p` is committed at
/// `commit` if given (the worker died after the commit point), else still locked by a dead
/// worker (it died before the commit point).
fn abandoned_secondary(
    store: &TestStore,
    start_ts: Timestamp,
    commit: Option<Timestamp>,
    prow: &str,
    row: &str,
    col: &str,
    value: &[u8],
) {
    let primary = CellRef::new(T, prow, "c:p");
    let (worker, ttl_ms) = match commit {
        // A committed primary decides the lock whatever the worker: make it look alive.
        Some(_) => (store.worker_id(), 600_000),
        // No lease exists for this id: the owner is dead, the lock may be rolled back at once.
        None => (u64::MAX - 7, 600_000),
    };
    let lock = LockRecord { primary: primary.clone(), wall_ms: now_ms(), ttl_ms, worker };
    match commit {
        Some(commit_ts) => apply_row(
            store,
            prow,
            vec![Mutation::PutWrite {
                column: "c:p".into(),
                commit_ts,
                write: WriteRecord { start_ts, kind: WriteKind::Put(encode_value(b"primary")) },
            }],
        ),
        None => apply_row(
            store,
            prow,
            vec![
                Mutation::PutLock { column: "c:p".into(), start_ts, lock: lock.clone() },
                Mutation::PutData { column: "c:p".into(), start_ts, value: encode_value(b"primary") },
            ],
        ),
    }
    apply_row(
        store,
        row,
        vec![
            Mutation::PutLock { column: col.into(), start_ts, lock },
            // Values in the stored form a transaction of this version writes.
            Mutation::PutData { column: col.into(), start_ts, value: encode_value(value) },
        ],
    );
}

// ---- lost update -------------------------------------------------------------------------------

/// Two read-modify-write transactions on one counter (one row: the one-phase commit path):
/// the second committer loses, so the counter goes up by one, not two.
fn lost_update_single_row(store: TestStore) {
    seed(&store, &[("ctr", "n:v", 10)]);
    let mut a = store.begin().unwrap();
    let mut b = store.begin().unwrap();
    let (va, vb) = (get_u64(&a, "ctr", "n:v"), get_u64(&b, "ctr", "n:v"));
    assert_eq!((va, vb), (10, 10));
    set_u64(&mut a, "ctr", "n:v", va + 1);
    set_u64(&mut b, "ctr", "n:v", vb + 1);
    let ts = a.commit().unwrap();
    assert!(ts > b.start_ts());
    assert_write_conflict(b.commit());
    assert_eq!(latest_u64(&store, "ctr", "n:v"), 11, "exactly one increment survives");
    assert_no_locks(&store);

    // The same race, the later starter committing first.
    let mut a = store.begin().unwrap();
    let mut b = store.begin().unwrap();
    let (va, vb) = (get_u64(&a, "ctr", "n:v"), get_u64(&b, "ctr", "n:v"));
    set_u64(&mut a, "ctr", "n:v", va + 1);
    set_u64(&mut b, "ctr", "n:v", vb + 1);
    b.commit().unwrap();
    assert_write_conflict(a.commit());
    assert_eq!(latest_u64(&store, "ctr", "n:v"), 12);
    assert!(store.metrics().conflicts >= 2);
}

/// Lost update through the two-phase path: both transactions also write a row of their own, so
/// the loser prewrites (and must roll back) a row the winner never touched.
fn lost_update_multi_row(store: TestStore) {
    seed(&store, &[("ctr", "n:v", 10)]);
    let mut a = store.begin().unwrap();
    let mut b = store.begin().unwrap();
    let (va, vb) = (get_u64(&a, "ctr", "n:v"), get_u64(&b, "ctr", "n:v"));
    set_u64(&mut a, "ctr", "n:v", va + 1);
    set_u64(&mut a, "log-a", "n:v", 1);
    set_u64(&mut b, "ctr", "n:v", vb + 1);
    // "a-log-b" sorts before "ctr": b's primary row is its own, so its conflict is on a secondary.
    set_u64(&mut b, "a-log-b", "n:v", 1);
    a.commit().unwrap();
    assert_write_conflict(b.commit());

    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "ctr", "n:v"), 11);
    assert_eq!(get(&t, "log-a", "n:v"), Some(1u64.to_be_bytes().to_vec()));
    assert_eq!(get(&t, "a-log-b", "n:v"), None, "the loser's other writes are not visible");
    assert_no_locks(&store);
}

/// Many threads increment one counter through `Store::run`: no increment is lost.
fn lost_update_threads(store: TestStore) {
    const THREADS: u64 = 4;
    const EACH: u64 = 25;
    seed(&store, &[("ctr", "n:v", 0)]);
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..EACH {
                    store
                        .run(|t| {
                            let n = common::get_u64(t, T, "ctr", "n:v")?;
                            common::set_u64(t, T, "ctr", "n:v", n + 1)?;
                            // Odd threads also keep a tally row: those commits take the two-phase path.
                            if i % 2 == 1 {
                                let row = format!("tally{i}");
                                let mine = common::get_u64(t, T, &row, "n:v")?;
                                common::set_u64(t, T, &row, "n:v", mine + 1)?;
                            }
                            Ok(())
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "ctr", "n:v"), THREADS * EACH, "every increment counted exactly once");
    for i in (1..THREADS).step_by(2) {
        assert_eq!(get_u64(&t, &format!("tally{i}"), "n:v"), EACH);
    }
    assert_no_locks(&store);
}

// ---- read skew ---------------------------------------------------------------------------------

/// T1 reads x, T2 moves value from x to y and commits, T1 reads y: T1 sees y as of its snapshot,
/// so the invariant x + y = 100 holds inside T1 (and on every later read of T1).
fn read_skew_impossible(store: TestStore) {
    seed(&store, &[("x", "v:v", 50), ("y", "v:v", 50)]);
    let t1 = store.begin().unwrap();
    let x = get_u64(&t1, "x", "v:v");
    assert_eq!(x, 50);

    store
        .run(|t2| {
            let (x, y) = (common::get_u64(t2, T, "x", "v:v")?, common::get_u64(t2, T, "y", "v:v")?);
            common::set_u64(t2, T, "x", "v:v", x - 30)?;
            common::set_u64(t2, T, "y", "v:v", y + 30)
        })
        .unwrap();

    let y = get_u64(&t1, "y", "v:v");
    assert_eq!(y, 50, "T1 must see the y of its snapshot, not T2's");
    assert_eq!(x + y, 100);
    // Repeatable, and the same through every read path.
    assert_eq!(get_u64(&t1, "x", "v:v"), 50);
    let many = t1.get_many(&[CellRef::new(T, "x", "v:v"), CellRef::new(T, "y", "v:v")]).unwrap();
    assert_eq!(many, vec![Some(50u64.to_be_bytes().to_vec()), Some(50u64.to_be_bytes().to_vec())]);
    let scanned: u64 = t1
        .scan(T, b"x", Some(b"z"), Some(&["v:v"]), usize::MAX)
        .unwrap()
        .iter()
        .map(|e| u64::from_be_bytes(e.value.clone().try_into().unwrap()))
        .sum();
    assert_eq!(scanned, 100);

    let t3 = store.begin().unwrap();
    assert_eq!((get_u64(&t3, "x", "v:v"), get_u64(&t3, "y", "v:v")), (20, 80));
}

// ---- write skew --------------------------------------------------------------------------------

/// Write skew **is allowed** under snapshot isolation, and this store is SI, not serializable.
///
/// The classic on-call doctors: the rule is "at least one doctor on call". Alice and Bob are both
/// on call; each, in a concurrent transaction, reads both rows, sees two on call, and takes
/// themselves off. Their write sets are disjoint (each writes only their own row), so
/// first-committer-wins sees no conflict: both commit and nobody is on call. This test pins that
/// behaviour down; if it ever fails, the store has become stricter than SI (e.g. serializable).
fn write_skew_allowed(store: TestStore) {
    seed(&store, &[("alice", "oncall:v", 1), ("bob", "oncall:v", 1)]);
    let mut t1 = store.begin().unwrap();
    let mut t2 = store.begin().unwrap();
    let on_call = |t: &Transaction| get_u64(t, "alice", "oncall:v") + get_u64(t, "bob", "oncall:v");
    assert_eq!(on_call(&t1), 2);
    assert_eq!(on_call(&t2), 2);
    set_u64(&mut t1, "alice", "oncall:v", 0);
    set_u64(&mut t2, "bob", "oncall:v", 0);
    t1.commit().expect("disjoint write sets: t1 commits");
    t2.commit().expect("disjoint write sets: t2 commits too (write skew)");
    let t = store.begin().unwrap();
    assert_eq!(on_call(&t), 0, "the invariant is violated: SI allows write skew");
}

/// The usual remedy for write skew under SI: materialize the conflict by writing a shared cell
/// (here the shift's count). Now the two transactions' write sets overlap and one aborts.
fn write_skew_prevented_by_materialized_conflict(store: TestStore) {
    seed(&store, &[("alice", "oncall:v", 1), ("bob", "oncall:v", 1), ("shift", "oncall:count", 2)]);
    let mut t1 = store.begin().unwrap();
    let mut t2 = store.begin().unwrap();
    for (t, me) in [(&mut t1, "alice"), (&mut t2, "bob")] {
        let n = get_u64(t, "shift", "oncall:count");
        assert_eq!(n, 2);
        set_u64(t, me, "oncall:v", 0);
        set_u64(t, "shift", "oncall:count", n - 1);
    }
    t1.commit().unwrap();
    assert_write_conflict(t2.commit());
    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "alice", "oncall:v") + get_u64(&t, "bob", "oncall:v"), 1);
    assert_eq!(get_u64(&t, "shift", "oncall:count"), 1);
}

// ---- visibility --------------------------------------------------------------------------------

fn read_your_own_writes(store: TestStore) {
    store.run(|t| t.set(T, "r", "c:a", b"committed".to_vec())).unwrap();
    let mut t = store.begin().unwrap();
    assert_eq!(get(&t, "r", "c:a"), Some(b"committed".to_vec()));
    t.set(T, "r", "c:a", b"mine".to_vec()).unwrap();
    t.set(T, "r", "c:new", b"fresh".to_vec()).unwrap();
    assert_eq!(get(&t, "r", "c:a"), Some(b"mine".to_vec()));
    assert_eq!(get(&t, "r", "c:new"), Some(b"fresh".to_vec()));

    // Another transaction sees none of it before the commit.
    let other = store.begin().unwrap();
    assert_eq!(get(&other, "r", "c:a"), Some(b"committed".to_vec()));
    assert_eq!(get(&other, "r", "c:new"), None);

    t.delete(T, "r", "c:a").unwrap();
    assert_eq!(get(&t, "r", "c:a"), None, "own delete hides the committed value");
    t.set(T, "r", "c:a", b"again".to_vec()).unwrap();
    assert_eq!(get(&t, "r", "c:a"), Some(b"again".to_vec()), "the last buffered write wins");
    t.delete(T, "r", "c:new").unwrap();
    assert_eq!(get(&t, "r", "c:new"), None);
    assert_eq!(
        entries(&t.scan(T, b"", None, None, usize::MAX).unwrap()),
        vec![("r".into(), "c:a".into(), "again".into())]
    );
    let ts = t.commit().unwrap();

    // `other` still reads its snapshot; a new transaction sees exactly what t left.
    assert!(ts > other.start_ts());
    assert_eq!(get(&other, "r", "c:a"), Some(b"committed".to_vec()));
    let after = store.begin().unwrap();
    assert_eq!(get(&after, "r", "c:a"), Some(b"again".to_vec()));
    assert_eq!(get(&after, "r", "c:new"), None);
}

fn delete_visibility(store: TestStore) {
    store
        .run(|t| {
            t.set(T, "r1", "c:a", b"one".to_vec())?;
            t.set(T, "r2", "c:a", b"two".to_vec())
        })
        .unwrap();
    let before = store.begin().unwrap();
    store.run(|t| t.delete(T, "r1", "c:a")).unwrap();
    let after = store.begin().unwrap();

    assert_eq!(get(&before, "r1", "c:a"), Some(b"one".to_vec()), "a snapshot before the delete keeps the value");
    assert_eq!(get(&after, "r1", "c:a"), None);
    assert_eq!(entries(&before.scan(T, b"", None, None, 10).unwrap()).len(), 2);
    assert_eq!(
        entries(&after.scan(T, b"", None, None, 10).unwrap()),
        vec![("r2".into(), "c:a".into(), "two".into())],
        "scan skips deleted cells"
    );
    assert_eq!(after.get_many(&[CellRef::new(T, "r1", "c:a")]).unwrap(), vec![None]);

    // Deleting a cell that never existed commits, and hides nothing.
    store.run(|t| t.delete(T, "r3", "c:a")).unwrap();
    // Writing after a delete makes the cell visible again.
    store.run(|t| t.set(T, "r1", "c:a", b"back".to_vec())).unwrap();
    let last = store.begin().unwrap();
    assert_eq!(get(&last, "r1", "c:a"), Some(b"back".to_vec()));
    assert_eq!(get(&last, "r3", "c:a"), None);
    assert_eq!(get(&after, "r1", "c:a"), None, "the older snapshot still sees the delete");
    assert_eq!(entries(&last.scan(T, b"", None, None, 10).unwrap()).len(), 2);
}

fn snapshot_ignores_later_commits(store: TestStore) {
    store.run(|t| t.set(T, "r", "c:a", b"v1".to_vec())).unwrap();
    let old = store.begin().unwrap();
    store
        .run(|t| {
            t.set(T, "r", "c:a", b"v2".to_vec())?;
            t.set(T, "new-row", "c:a", b"n".to_vec())
        })
        .unwrap();
    let new = store.begin().unwrap();
    assert!(new.start_ts() > old.start_ts());

    assert_eq!(get(&old, "r", "c:a"), Some(b"v1".to_vec()), "a later commit is invisible to an older snapshot");
    assert_eq!(get(&old, "new-row", "c:a"), None, "a row created later is invisible too");
    assert_eq!(entries(&old.scan(T, b"", None, None, 10).unwrap()), vec![("r".into(), "c:a".into(), "v1".into())]);

    assert_eq!(get(&new, "r", "c:a"), Some(b"v2".to_vec()), "a transaction started after a commit sees it");
    assert_eq!(get(&new, "new-row", "c:a"), Some(b"n".to_vec()));
    assert_eq!(
        entries(&new.scan(T, b"", None, None, 10).unwrap()),
        vec![("new-row".into(), "c:a".into(), "n".into()), ("r".into(), "c:a".into(), "v2".into())]
    );
}

fn get_many_reads_the_snapshot(store: TestStore) {
    store
        .run(|t| {
            t.set(T, "a", "c:1", b"a1".to_vec())?;
            t.set(T, "a", "c:2", b"a2".to_vec())?;
            t.set(T, "b", "c:1", b"b1".to_vec())?;
            t.set("other", "a", "c:1", b"other-a1".to_vec())
        })
        .unwrap();
    let mut t = store.begin().unwrap();
    store.run(|t| t.set(T, "a", "c:1", b"later".to_vec())).unwrap();
    t.set(T, "b", "c:1", b"mine".to_vec()).unwrap();
    t.delete(T, "a", "c:2").unwrap();
    t.set(T, "c", "c:9", b"new".to_vec()).unwrap();

    let cells = [
        CellRef::new(T, "b", "c:1"),
        CellRef::new(T, "a", "c:1"),
        CellRef::new(T, "missing", "c:1"),
        CellRef::new(T, "a", "c:2"),
        CellRef::new("other", "a", "c:1"),
        CellRef::new(T, "a", "c:1"),
        CellRef::new(T, "c", "c:9"),
        CellRef::new(T, "a", "c:3"),
    ];
    let got = t.get_many(&cells).unwrap();
    let want: Vec<Option<Vec<u8>>> = vec![
        Some(b"mine".to_vec()),
        Some(b"a1".to_vec()),
        None,
        None,
        Some(b"other-a1".to_vec()),
        Some(b"a1".to_vec()),
        Some(b"new".to_vec()),
        None,
    ];
    assert_eq!(got, want, "in request order, snapshot values overlaid with own writes");
    // get_many agrees with get cell by cell.
    for (c, v) in cells.iter().zip(&want) {
        assert_eq!(&t.get(&c.table, &c.row, &c.column).unwrap(), v, "{c}");
    }
    assert_eq!(t.get_many(&[]).unwrap(), Vec::<Option<Vec<u8>>>::new());
}

/// Many scans over a fixed snapshot, compared with a reference filter of the same data.
fn scan_matches_reference(store: TestStore) {
    let rows: [&[u8]; 6] = [b"", b"r0", b"r0\0", b"r1", b"r2", b"r3\xff"];
    let cols = ["a:x", "b:y", "c:z"];
    let mut model = Model::new();
    store
        .run(|t| {
            for (i, row) in rows.iter().enumerate() {
                for (j, col) in cols.iter().enumerate() {
                    if (i + j) % 3 != 2 {
                        t.set(T, row, col, format!("{i}{j}").into_bytes())?;
                    }
                }
            }
            // Neighbouring tables must not leak in.
            t.set("s", b"r0", "a:x", b"s".to_vec())?;
            t.set("si2", b"r0", "a:x", b"si2".to_vec())?;
            t.set("si ", b"", "a:x", b"si-space".to_vec())
        })
        .unwrap();
    for (i, row) in rows.iter().enumerate() {
        for (j, col) in cols.iter().enumerate() {
            if (i + j) % 3 != 2 {
                model.insert((row.to_vec(), col.to_string()), format!("{i}{j}").into_bytes());
            }
        }
    }
    // A later commit the snapshot must not see.
    let t = store.begin().unwrap();
    store
        .run(|t| {
            t.set(T, b"r1", "a:x", b"later".to_vec())?;
            t.delete(T, b"r0", "a:x")
        })
        .unwrap();

    let bounds: [&[u8]; 7] = [b"", b"\0", b"r0", b"r0\0", b"r1", b"r10", b"zz"];
    let filters: [Option<&[&str]>; 5] = [None, Some(&["a:x"]), Some(&["c:z", "a:x"]), Some(&["nope:x"]), Some(&[])];
    let mut checked = 0;
    for start in bounds {
        for end in bounds.iter().map(|e| Some(*e)).chain([None]) {
            if end.is_some_and(|e| e < start) {
                continue;
            }
            for columns in filters {
                for limit in [0, 1, 2, 5, usize::MAX] {
                    let got = t.scan(T, start, end, columns, limit).unwrap();
                    let want = expected_scan(&model, start, end, columns, limit);
                    assert_eq!(got, want, "scan start={start:?} end={end:?} columns={columns:?} limit={limit}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 500);
}

/// Buffered writes and deletes overlay the snapshot in scans, including deletes of cells the
/// limit would otherwise have counted.
fn scan_overlays_buffered_writes(store: TestStore) {
    store
        .run(|t| {
            for r in ["r1", "r2", "r3", "r4"] {
                t.set(T, r, "c:a", format!("{r}a").into_bytes())?;
                t.set(T, r, "c:b", format!("{r}b").into_bytes())?;
            }
            Ok(())
        })
        .unwrap();
    let mut t = store.begin().unwrap();
    let mut model = Model::new();
    for r in ["r1", "r2", "r3", "r4"] {
        for c in ["c:a", "c:b"] {
            model.insert((r.as_bytes().to_vec(), c.into()), format!("{r}{}", &c[2..]).into_bytes());
        }
    }
    let mut buffer = |t: &mut Transaction, row: &str, col: &str, v: Option<&str>| {
        let key = (row.as_bytes().to_vec(), col.to_string());
        match v {
            Some(v) => {
                t.set(T, row, col, v.as_bytes().to_vec()).unwrap();
                model.insert(key, v.as_bytes().to_vec());
            }
            None => {
                t.delete(T, row, col).unwrap();
                model.remove(&key);
            }
        }
    };
    // Deletes at the front of the range: a scan that fetched only `limit` snapshot cells and
    // then removed them would come back short.
    buffer(&mut t, "r1", "c:a", None);
    buffer(&mut t, "r1", "c:b", None);
    buffer(&mut t, "r2", "c:a", None);
    buffer(&mut t, "r0", "c:z", Some("r0z")); // before every snapshot row
    buffer(&mut t, "r2", "c:b", Some("mine")); // overwrite
    buffer(&mut t, "r3", "c:ab", Some("between")); // new column between two existing ones
    buffer(&mut t, "r9", "c:a", Some("r9a")); // after every snapshot row
    buffer(&mut t, "r5", "c:a", None); // delete of a cell that never existed
    t.set("other", "r2", "c:a", b"elsewhere".to_vec()).unwrap(); // another table
    let model = model;

    for start in [&b""[..], b"r1", b"r2", b"r3", b"r5"] {
        for end in [None, Some(&b"r3"[..]), Some(b"r4"), Some(b"r9")] {
            if end.is_some_and(|e| e < start) {
                continue;
            }
            for columns in [None, Some(&["c:a"][..]), Some(&["c:b", "c:ab"][..])] {
                for limit in 0..=11 {
                    let got = t.scan(T, start, end, columns, limit).unwrap();
                    let want = expected_scan(&model, start, end, columns, limit);
                    assert_eq!(got, want, "scan start={start:?} end={end:?} columns={columns:?} limit={limit}");
                }
            }
        }
    }
    assert_eq!(
        entries(&t.scan(T, b"", None, None, 3).unwrap()),
        vec![
            ("r0".into(), "c:z".into(), "r0z".into()),
            ("r2".into(), "c:b".into(), "mine".into()),
            ("r3".into(), "c:a".into(), "r3a".into()),
        ]
    );
    // Nothing buffered leaks into another transaction's scan.
    let other = store.begin().unwrap();
    assert_eq!(other.scan(T, b"", None, None, usize::MAX).unwrap().len(), 8);
}

/// A row with many columns, scanned with limits that cut inside it.
fn scan_limit_inside_wide_row(store: TestStore) {
    const WIDE: usize = 20;
    let col = |i: usize| format!("c:{i:02}");
    store
        .run(|t| {
            t.set(T, "a", "c:x", b"a".to_vec())?;
            for i in 0..WIDE {
                t.set(T, "w", &col(i), format!("v{i:02}").into_bytes())?;
            }
            t.set(T, "z", "c:x", b"z".to_vec())
        })
        .unwrap();
    let mut t = store.begin().unwrap();
    let mut model = Model::new();
    model.insert((b"a".to_vec(), "c:x".into()), b"a".to_vec());
    for i in 0..WIDE {
        model.insert((b"w".to_vec(), col(i)), format!("v{i:02}").into_bytes());
    }
    model.insert((b"z".to_vec(), "c:x".into()), b"z".to_vec());

    let check = |t: &Transaction, model: &Model| {
        for limit in 0..=WIDE + 3 {
            for (start, end) in [(&b"w"[..], Some(&b"x"[..])), (b"", None), (b"b", None), (b"w", None)] {
                let got = t.scan(T, start, end, None, limit).unwrap();
                assert_eq!(
                    got,
                    expected_scan(model, start, end, None, limit),
                    "start={start:?} end={end:?} limit={limit}"
                );
            }
            let filter = ["c:03", "c:07", "c:11", "c:x"];
            let got = t.scan(T, b"", None, Some(&filter), limit).unwrap();
            assert_eq!(got, expected_scan(model, b"", None, Some(&filter), limit), "filtered, limit={limit}");
        }
    };
    check(&t, &model);
    let got = t.scan(T, b"w", Some(b"x"), None, 7).unwrap();
    assert_eq!(got.len(), 7);
    assert!(got.windows(2).all(|w| (&w[0].row, &w[0].column) < (&w[1].row, &w[1].column)), "sorted, no duplicates");
    assert_eq!(got.last().unwrap().column, "c:06");

    // Buffered changes inside the row: deletes before the cut, a new column, an overwrite.
    for i in [1, 2, 4] {
        t.delete(T, "w", &col(i)).unwrap();
        model.remove(&(b"w".to_vec(), col(i)));
    }
    t.set(T, "w", "c:01a", b"new".to_vec()).unwrap();
    model.insert((b"w".to_vec(), "c:01a".into()), b"new".to_vec());
    t.set(T, "w", &col(5), b"mine".to_vec()).unwrap();
    model.insert((b"w".to_vec(), col(5)), b"mine".to_vec());
    check(&t, &model);
    assert_eq!(
        entries(&t.scan(T, b"w", None, None, 5).unwrap()),
        vec![
            ("w".into(), "c:00".into(), "v00".into()),
            ("w".into(), "c:01a".into(), "new".into()),
            ("w".into(), "c:03".into(), "v03".into()),
            ("w".into(), "c:05".into(), "mine".into()),
            ("w".into(), "c:06".into(), "v06".into()),
        ]
    );
}

/// Scans that meet abandoned locks in the middle of a wide row resolve them and resume from the
/// last cell they consumed (the scan's paging cursor), without skipping or repeating cells.
fn scan_repages_after_resolving_locks(store: TestStore) {
    const WIDE: usize = 20;
    let col = |i: usize| format!("c:{i:02}");
    store
        .run(|t| {
            for i in 0..WIDE {
                t.set(T, "w", &col(i), format!("v{i:02}").into_bytes())?;
            }
            t.set(T, "z", "c:x", b"z".to_vec())
        })
        .unwrap();
    let mut model = Model::new();
    for i in 0..WIDE {
        model.insert((b"w".to_vec(), col(i)), format!("v{i:02}").into_bytes());
    }
    model.insert((b"z".to_vec(), "c:x".into()), b"z".to_vec());

    // Round 1: a reader whose snapshot lies between the abandoned transactions' start and the
    // commit: it must resolve both locks but see neither value.
    let s_committed = store.oracle().next().unwrap();
    let s_dead = store.oracle().next().unwrap();
    let older = store.begin().unwrap();
    let c_committed = store.oracle().next().unwrap();
    abandoned_secondary(&store, s_committed, Some(c_committed), "p1", "w", &col(10), b"rolled-forward");
    abandoned_secondary(&store, s_dead, None, "p2", "w", &col(15), b"ghost");
    abandoned_secondary(&store, s_dead, None, "p2", "w", "c:99", b"ghost"); // a brand-new column
    // Everything the abandoned transactions did is invisible to `older`: one committed after it
    // started, the other never.
    let got = older.scan(T, b"", None, None, 25).unwrap();
    assert_eq!(got, expected_scan(&model, b"", None, None, 25), "older snapshot");
    let m = store.metrics();
    assert!(m.rolled_forward >= 1 && m.rolled_back >= 1, "the scan resolved the locks: {m:?}");

    let newer = store.begin().unwrap();
    model.insert((b"w".to_vec(), col(10)), b"rolled-forward".to_vec());
    model.insert((b"p1".to_vec(), "c:p".into()), b"primary".to_vec());
    for limit in [5, 11, 12, 16, 21, 22, 30] {
        let got = newer.scan(T, b"", None, None, limit).unwrap();
        assert_eq!(got, expected_scan(&model, b"", None, None, limit), "newer snapshot, limit={limit}");
    }

    // Round 2: fresh locks, met by a reader that starts after everything (so each resolution
    // re-pages from the middle of the row), with a limit that ends between the two locks and one
    // that ends after them.
    let s_committed = store.oracle().next().unwrap();
    let s_dead = store.oracle().next().unwrap();
    let c_committed = store.oracle().next().unwrap();
    abandoned_secondary(&store, s_committed, Some(c_committed), "p3", "w", &col(3), b"forward-3");
    abandoned_secondary(&store, s_committed, Some(c_committed), "p3", "w", &col(4), b"forward-4");
    abandoned_secondary(&store, s_dead, None, "p4", "w", &col(7), b"ghost-7");
    abandoned_secondary(&store, s_dead, None, "p4", "w", &col(8), b"ghost-8");
    model.insert((b"w".to_vec(), col(3)), b"forward-3".to_vec());
    model.insert((b"w".to_vec(), col(4)), b"forward-4".to_vec());
    model.insert((b"p3".to_vec(), "c:p".into()), b"primary".to_vec());
    let latest = store.begin().unwrap();
    let before = store.metrics();
    let got = latest.scan(T, b"w", Some(b"x"), None, 6).unwrap();
    assert_eq!(got, expected_scan(&model, b"w", Some(b"x"), None, 6), "limit cuts between the locks");
    let mid = store.metrics();
    assert_eq!(
        mid.rolled_forward - before.rolled_forward,
        2,
        "both committed locks before the cut were rolled forward"
    );
    assert_eq!(mid.rolled_back, before.rolled_back, "the scan stopped before the dead locks");
    let got = latest.scan(T, b"w", Some(b"x"), None, usize::MAX).unwrap();
    assert_eq!(got, expected_scan(&model, b"w", Some(b"x"), None, usize::MAX));
    assert_eq!(got.len(), WIDE);
    assert_eq!(store.metrics().rolled_back - mid.rolled_back, 1, "the dead transaction's primary was rolled back once");
    let got = latest.scan(T, b"", None, None, usize::MAX).unwrap();
    assert_eq!(got, expected_scan(&model, b"", None, None, usize::MAX));
    assert_no_locks(&store);
}

/// A scan whose `start` is above its `end` returns nothing (or rejects the arguments); it must
/// not panic. (Regression: `MemBigtable` once handed the inverted key range to
/// `BTreeMap::range`, which panics while the backend's mutex is held, poisoning the store.)
fn scan_inverted_range_is_empty(store: TestStore) {
    store.run(|t| t.set(T, "m", "c:a", b"m".to_vec())).unwrap();
    let mut t = store.begin().unwrap();
    t.set(T, "n", "c:a", b"mine".to_vec()).unwrap();
    for (start, end) in [(&b"z"[..], &b"a"[..]), (b"m", b"m"), (b"n", b"m"), (b"m\0", b"m")] {
        match t.scan(T, start, Some(end), None, 10) {
            Ok(v) => assert!(v.is_empty(), "range {start:?}..{end:?} returned {v:?}"),
            Err(Error::InvalidArgument(_)) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    // The store still works afterwards.
    assert_eq!(get(&t, "m", "c:a"), Some(b"m".to_vec()));
    t.commit().unwrap();
    assert_eq!(get(&store.begin().unwrap(), "n", "c:a"), Some(b"mine".to_vec()));
}

// ---- validation --------------------------------------------------------------------------------

fn reserved_and_empty_names_rejected(store: TestStore) {
    let mut t = store.begin().unwrap();
    for col in ["__ack:x", "__", ""] {
        assert_invalid(t.set(T, "r", col, b"v".to_vec()));
        assert_invalid(t.delete(T, "r", col));
        assert_invalid(t.get(T, "r", col));
        assert_invalid(t.get_many(&[CellRef::new(T, "r", "c:ok"), CellRef::new(T, "r", col)]));
        assert_invalid(t.scan(T, b"", None, Some(&["c:ok", col]), 10));
        assert_invalid(t.notify_weak(T, "r", col));
    }
    for table in ["", "bad\ntable"] {
        assert_invalid(t.set(table, "r", "c:a", b"v".to_vec()));
        assert_invalid(t.delete(table, "r", "c:a"));
        assert_invalid(t.get(table, "r", "c:a"));
        assert_invalid(t.get_many(&[CellRef::new(table, "r", "c:a")]));
        assert_invalid(t.scan(table, b"", None, None, 10));
    }
    assert_invalid(t.set(&"t".repeat(256), "r", "c:a", b"v".to_vec()));
    assert_invalid(t.set(T, vec![b'r'; 4097], "c:a", b"v".to_vec()));
    // Near misses are ordinary names.
    t.set(T, "r", "_single", b"1".to_vec()).unwrap();
    t.set(T, "r", "a__b", b"2".to_vec()).unwrap();
    t.set(T, "", "c:a", b"empty row".to_vec()).unwrap();
    t.commit().unwrap();

    // Rejected calls buffered nothing: a transaction made only of them is read-only.
    let commits = store.metrics().commits;
    let mut t = store.begin().unwrap();
    let start = t.start_ts();
    assert_invalid(t.set(T, "r", "__ack:x", b"v".to_vec()));
    assert_invalid(t.set("", "r", "c:a", b"v".to_vec()));
    assert_eq!(t.commit().unwrap(), start, "nothing to commit");
    assert_eq!(store.metrics().commits, commits);

    let t = store.begin().unwrap();
    assert_eq!(
        entries(&t.scan(T, b"", None, None, 10).unwrap()),
        vec![
            ("".into(), "c:a".into(), "empty row".into()),
            ("r".into(), "_single".into(), "1".into()),
            ("r".into(), "a__b".into(), "2".into()),
        ]
    );
}

// ---- rollback records do not abort other transactions ------------------------------------------

/// A transaction that *failed* to commit must not make an older, non-conflicting one fail.
///
/// `failed` writes rows `p` (its primary: it sorts first) and `q`; someone commits `q` after
/// `failed` began, so `failed`'s prewrite of the secondary `q` conflicts and its rollback leaves
/// a rollback record on `p` at `failed.start_ts`. `older` began before `failed` and writes only
/// `p`, where nothing was ever committed — first-committer-wins says it commits. (The prewrite
/// condition `NoWriteSince` skips other transactions' rollback records; only one at exactly
/// `since`, the checker's own, guarding a delayed prewrite, counts.)
fn aborted_commit_aborts_older_writer(store: TestStore) {
    let mut older = store.begin().unwrap();
    let mut failed = store.begin().unwrap();
    set_u64(&mut failed, "p", "c:v", 1);
    set_u64(&mut failed, "q", "c:v", 1);
    seed(&store, &[("q", "c:v", 2)]);
    assert_write_conflict(failed.commit());
    set_u64(&mut older, "p", "c:v", 3);
    older.commit().expect("nothing was ever committed to p: `older` must commit");
    assert_eq!(latest_u64(&store, "p", "c:v"), 3);
}

#[test]
fn aborted_commit_aborts_older_writer_on_the_test_backend() {
    aborted_commit_aborts_older_writer(common::test_store(config()));
}

#[test]
fn aborted_commit_aborts_older_writer_redb() {
    let dir = common::TempDir::new("si-aborted-older");
    aborted_commit_aborts_older_writer(common::redb_store(&dir, config()));
}

/// A commit whose primary is rolled back under it (its owner looked dead) cleans up every
/// secondary it prewrote, also when its primary row was not the first to land: here the
/// primary's first prewrite meets a committed transaction's leftover lock, resolves it and
/// lands on the retry, after the secondary. (The clean-up skipped the first row prewritten,
/// taking it for the primary: the secondary's lock stayed until a reader resolved it.)
#[test]
fn a_rolled_back_commit_cleans_up_every_secondary_it_prewrote() {
    use percolator_store::backends::{ApplyHook, Bigtable, Condition, MemBigtable, Observed};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Rolls back the primary of the transaction started at `owner` just before its commit
    /// (its `LockIs` op with a write record) reaches the backend.
    struct RollBackAtCommit {
        inner: Arc<MemBigtable>,
        owner: AtomicU64,
    }
    impl ApplyHook for RollBackAtCommit {
        type Note = ();
        fn note(&self, m: &RowMutation) -> Option<()> {
            let owner = Timestamp::from_raw(self.owner.load(Ordering::SeqCst));
            let commit =
                m.conditions.iter().any(|c| matches!(c, Condition::LockIs { start_ts, .. } if *start_ts == owner))
                    && m.mutations.iter().any(|x| matches!(x, Mutation::PutWrite { .. }));
            if commit && self.owner.swap(0, Ordering::SeqCst) != 0 {
                let column = "c:v".to_string();
                let rollback = RowMutation {
                    table: m.table.clone(),
                    row: m.row.clone(),
                    conditions: vec![Condition::LockIs { column: column.clone(), start_ts: owner }],
                    mutations: vec![
                        Mutation::DeleteLock { column: column.clone(), start_ts: owner },
                        Mutation::DeleteData { column: column.clone(), start_ts: owner },
                        Mutation::PutWrite {
                            column,
                            commit_ts: owner,
                            write: WriteRecord { start_ts: owner, kind: WriteKind::Rollback },
                        },
                    ],
                };
                assert_eq!(self.inner.apply(vec![Op::Row(rollback)]).unwrap(), vec![Outcome::Applied]);
            }
            None
        }
        fn applied(&self, _: Vec<()>) {}
    }

    let mem = Arc::new(MemBigtable::new());
    let hook = Arc::new(RollBackAtCommit { inner: mem.clone(), owner: AtomicU64::new(0) });
    let backend: Arc<dyn Bigtable> = Arc::new(Observed::new(mem, hook.clone()));
    let store = TestStore::new(backend, StoreConfig { one_phase_commit: false, async_secondaries: false, ..config() });
    // A transaction committed before ours starts left its secondary lock on `a` (its primary
    // `x` has the commit record): our prewrite of `a` meets it, rolls it forward, retries.
    let earlier = store.oracle().next().unwrap();
    let committed = store.oracle().next().unwrap();
    abandoned_secondary(&store, earlier, Some(committed), "x", "a", "c:v", b"earlier");
    let mut t = store.begin().unwrap();
    set_u64(&mut t, "a", "c:v", 1); // the primary: the first row written
    set_u64(&mut t, "b", "c:v", 2);
    hook.owner.store(t.start_ts().raw(), Ordering::SeqCst);
    match t.commit() {
        Err(Error::Conflict { kind: ConflictKind::RolledBack, .. }) => {}
        other => panic!("a commit whose primary was rolled back must fail, got {other:?}"),
    }
    assert_eq!(hook.owner.load(Ordering::SeqCst), 0, "the primary's commit never came");
    assert_no_locks(&store);
    let after = store.begin().unwrap();
    assert_eq!(get(&after, "a", "c:v").as_deref(), Some(&b"earlier"[..]));
    assert_eq!(get(&after, "b", "c:v"), None);
}
