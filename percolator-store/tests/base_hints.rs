//! The round's conditions skip redb's checkpoint when it cannot hold what they look for
//! (`docs/design.md`, "A memtable in front of redb", 10.): a lock that lived across a
//! checkpoint, and a write record newer than a transaction's start that reached redb, must
//! still be found — after the checkpoint, after a reopen (the facts scanned from the file),
//! and after the replay at open; and no other read may lose what the checkpoint holds (rows
//! whose key bytes look like a version key's suffix).

mod common;

use common::TempDir;
use percolator_store::backends::{
    Bigtable, Condition, Found, LockRecord, Mutation, Op, Outcome, RedbBigtable, RowMutation, WriteKind, WriteRecord,
};
use percolator_store::{CellRef, Durability, RedbConfig, Timestamp};

fn ts(n: u64) -> Timestamp {
    Timestamp::from_raw(n)
}

fn open(path: &std::path::Path, durability: Durability) -> RedbBigtable {
    RedbBigtable::open(path, RedbConfig { durability, ..RedbConfig::default() }).unwrap()
}

fn apply(b: &RedbBigtable, row: &str, conditions: Vec<Condition>, mutations: Vec<Mutation>) -> Outcome {
    let op = RowMutation { table: "t".into(), row: row.as_bytes().to_vec(), conditions, mutations };
    b.apply(vec![Op::Row(op)]).unwrap().remove(0)
}

fn lock(start: u64) -> Mutation {
    let lock =
        LockRecord { primary: CellRef::new("t", b"locked".to_vec(), "c:v"), wall_ms: 0, ttl_ms: 60_000, worker: 1 };
    Mutation::PutLock { column: "c:v".into(), start_ts: ts(start), lock }
}

fn write(commit: u64) -> Mutation {
    let write = WriteRecord { start_ts: ts(commit - 1), kind: WriteKind::Put(b"v".to_vec()) };
    Mutation::PutWrite { column: "c:v".into(), commit_ts: ts(commit), write }
}

/// A prewrite's conditions on a cell, started at `start`.
fn prewrite_conditions(start: u64) -> Vec<Condition> {
    vec![Condition::NoWriteSince { column: "c:v".into(), since: ts(start) }, Condition::NoLock { column: "c:v".into() }]
}

/// What the conditions of a transaction started at `start` find on each row, the store as it
/// is: the lock of row "locked" (start 10), the write record of row "written" (commit 20), and
/// nothing on row "free"; and a commit's `LockIs` finds its lock.
fn check(b: &RedbBigtable, when: &str) {
    let probe = |row: &str, start: u64| apply(b, row, prewrite_conditions(start), vec![]);
    match probe("locked", 30) {
        Outcome::ConditionFailed { index: 1, found: Found::Lock { start_ts, .. } } => {
            assert_eq!(start_ts, ts(10), "{when}")
        }
        other => panic!("{when}: a prewrite over the lock that lived across a checkpoint got {other:?}"),
    }
    for start in [5, 15, 20] {
        match probe("written", start) {
            Outcome::ConditionFailed { index: 0, found: Found::Write { commit_ts } } => {
                assert_eq!(commit_ts, ts(20), "{when}")
            }
            other => panic!("{when}: a prewrite started at {start}, before the write at 20, got {other:?}"),
        }
    }
    assert_eq!(probe("written", 21), Outcome::Applied, "{when}: started after the write");
    assert_eq!(probe("free", 21), Outcome::Applied, "{when}");
    let lock_is = vec![Condition::LockIs { column: "c:v".into(), start_ts: ts(10) }];
    assert_eq!(apply(b, "locked", lock_is, vec![]), Outcome::Applied, "{when}: a commit finds its lock");
    let absent = vec![Condition::LockAbsent { column: "c:v".into(), start_ts: ts(10) }];
    assert!(
        matches!(apply(b, "locked", absent, vec![]), Outcome::ConditionFailed { found: Found::LockPresent, .. }),
        "{when}"
    );
}

#[test]
fn conditions_find_what_reached_redb_after_a_checkpoint_a_reopen_and_a_scan() {
    for durability in [Durability::None, Durability::Fsync] {
        let dir = TempDir::new("base-hints");
        let path = dir.file("store.redb");
        {
            let b = open(&path, durability);
            assert_eq!(apply(&b, "locked", vec![], vec![lock(10)]), Outcome::Applied);
            assert_eq!(apply(&b, "written", vec![], vec![write(20)]), Outcome::Applied);
            check(&b, "in the memtable");
            // A checkpoint moves both into redb.
            b.space().unwrap();
            check(&b, "after a checkpoint");
            // A later round that writes other rows, checkpointed: the facts carry over.
            assert_eq!(apply(&b, "other", vec![], vec![write(25)]), Outcome::Applied);
            b.space().unwrap();
            check(&b, "after a second checkpoint");
        }
        {
            // More than an open scans itself (100,000 keys): the next open leaves the facts to
            // its first checkpoint.
            let b = open(&path, durability);
            let ops: Vec<Op> = (0..101)
                .map(|r| {
                    let mutations = (0..1000)
                        .map(|c| Mutation::PutWrite {
                            column: format!("c:{c}"),
                            commit_ts: ts(5),
                            write: WriteRecord { start_ts: ts(4), kind: WriteKind::Put(b"v".to_vec()) },
                        })
                        .collect();
                    Op::Row(RowMutation {
                        table: "t".into(),
                        row: format!("bulk{r}").into_bytes(),
                        conditions: vec![],
                        mutations,
                    })
                })
                .collect();
            assert!(b.apply(ops).unwrap().iter().all(|o| *o == Outcome::Applied));
        }
        let b = open(&path, durability);
        check(&b, "after a reopen of a large store (no facts yet)");
        // The first checkpoint that writes scans its new base for the facts.
        assert_eq!(apply(&b, "other2", vec![], vec![write(26)]), Outcome::Applied);
        b.checkpoint().unwrap();
        check(&b, "after the scan of the first checkpoint since the reopen");
        // The lock resolved (removed) and checkpointed: a prewrite passes again.
        let unlock = Mutation::DeleteLock { column: "c:v".into(), start_ts: ts(10) };
        assert_eq!(apply(&b, "locked", vec![], vec![unlock]), Outcome::Applied);
        b.space().unwrap();
        drop(b);
        let b = open(&path, durability);
        assert_eq!(apply(&b, "locked", prewrite_conditions(30), vec![]), Outcome::Applied, "the lock is gone");
    }
}

const CHILD_ENV: &str = "PERCOLATOR_BASE_HINTS_STORE";

/// The child of the replay test: the lock and the write record acknowledged at durability
/// fsync (in the redo log, no checkpoint), then SIGKILL.
#[test]
#[ignore = "run by conditions_find_what_the_replay_at_open_put_into_redb as a child process"]
fn logged_then_killed_child() {
    let Ok(path) = std::env::var(CHILD_ENV) else { return };
    let redb = RedbConfig { checkpoint_every: Some(std::time::Duration::from_secs(3600)), ..RedbConfig::default() };
    let b = RedbBigtable::open(std::path::Path::new(&path), redb).unwrap();
    assert_eq!(apply(&b, "locked", vec![], vec![lock(10)]), Outcome::Applied);
    assert_eq!(apply(&b, "written", vec![], vec![write(20)]), Outcome::Applied);
    println!("ACKNOWLEDGED");
    let _ = std::process::Command::new("kill").args(["-KILL", &std::process::id().to_string()]).status();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// The open after a crash replays the redo log into redb: the facts follow the replayed
/// changes, so the lock and the write record are found from the first round on.
#[test]
fn conditions_find_what_the_replay_at_open_put_into_redb() {
    let dir = TempDir::new("base-hints-replay");
    let path = dir.file("store.redb");
    let (mut child, lines) = common::spawn_child_test("logged_then_killed_child", CHILD_ENV, path.to_str().unwrap());
    assert!(lines.iter().any(|l| l.ends_with("ACKNOWLEDGED")), "the child acknowledged its rounds");
    child.wait().unwrap();
    let b = open(&path, Durability::Fsync);
    check(&b, "after the replay");
    assert_eq!(apply(&b, "other", vec![], vec![write(25)]), Outcome::Applied);
    b.checkpoint().unwrap();
    check(&b, "after the scan of the first checkpoint since the replay");
}

/// Rows and scans read everything the checkpoint holds, also for rows whose key bytes end like
/// a version key (a 6-byte row; a row with a 0x01 byte): a range that is not one cell's is
/// never skipped (an incremental GC pass that missed an old version could resurrect a deleted
/// value; a scan would miss committed cells).
#[test]
fn scans_and_row_reads_find_what_the_checkpoint_holds() {
    let dir = TempDir::new("base-hints-rows");
    let b = open(&dir.file("store.redb"), Durability::None);
    let rows = ["row001", "abc\x01defghi", "x\x02yz\x01\x02", "row002"];
    for row in rows {
        assert_eq!(apply(&b, row, vec![], vec![write(10)]), Outcome::Applied);
    }
    b.checkpoint().unwrap();
    let scan = |start: &[u8], end: Option<&[u8]>| {
        b.scan(&percolator_store::backends::ScanRange {
            table: "t",
            start,
            after_column: None,
            end,
            columns: None,
            prefixes: &[],
            ts: ts(100),
            limit: 100,
        })
        .unwrap()
        .len()
    };
    assert_eq!(scan(b"", None), rows.len(), "a scan of the table after the checkpoint");
    assert_eq!(scan(b"row000", Some(b"row999")), 2, "a scan of rows row000..row999 after the checkpoint");
    let wanted: Vec<(String, Vec<u8>)> = rows.iter().map(|r| ("t".to_string(), r.as_bytes().to_vec())).collect();
    let versions = b.row_versions_without_values(&wanted).unwrap();
    for row in rows {
        let v = versions.iter().find(|v| v.row == row.as_bytes()).unwrap_or_else(|| panic!("row {row:?} not read"));
        assert_eq!(v.cells[0].writes.len(), 1, "row {row:?}: {v:?}");
    }
}
