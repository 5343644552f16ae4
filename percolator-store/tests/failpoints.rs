//! Failpoints between every protocol phase: a transfer "crashes" (its commit stops at the
//! failpoint and leaves whatever it wrote), and a later transaction finds the store consistent
//! and cleans up: rolled back before the commit point, rolled forward after it. Also crashes of
//! the resolver itself, during roll-forward and roll-back, and the notify-at-prewrite rule.
//!
//! Run with `cargo test -p percolator-store --features failpoints --test failpoints`.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use fail::FailScenario;
use percolator_store::{
    CellOutcome, Error, Notification, NotifyKind, ObserveError, Observer, ObserverSpec, Store, StoreConfig, Transaction,
};

const ROWS: [&str; 4] = ["a", "b", "c", "d"];

/// Two-phase commit whatever the backend, secondaries written by the committing thread: the
/// failpoints between its phases are what is tested.
fn two_phase() -> StoreConfig {
    StoreConfig { one_phase_commit: false, async_secondaries: false, ..fast_locks() }
}

fn seeded() -> TestStore {
    seeded_with(test_store(two_phase()))
}

fn seeded_with(store: TestStore) -> TestStore {
    store
        .run(|t| {
            for r in ROWS {
                set_u64(t, "bank", r, "bal:data", 100)?;
            }
            Ok(())
        })
        .unwrap();
    store
}

/// a -10, b +4, c +6 (three rows: a primary and two secondaries).
fn transfer(store: &Store) -> percolator_store::Result<percolator_store::Timestamp> {
    let mut t = store.begin()?;
    let (a, b, c) = (
        get_u64(&t, "bank", "a", "bal:data")?,
        get_u64(&t, "bank", "b", "bal:data")?,
        get_u64(&t, "bank", "c", "bal:data")?,
    );
    set_u64(&mut t, "bank", "a", "bal:data", a - 10)?;
    set_u64(&mut t, "bank", "b", "bal:data", b + 4)?;
    set_u64(&mut t, "bank", "c", "bal:data", c + 6)?;
    t.commit()
}

fn balances(store: &Store) -> Vec<u64> {
    let t = store.begin().unwrap();
    ROWS.iter().map(|r| get_u64(&t, "bank", r, "bal:data").unwrap()).collect()
}

fn assert_clean(store: &TestStore) {
    store.flush_secondaries();
    let versions = store.backend.scan_versions(None, usize::MAX).unwrap();
    for row in versions {
        for c in row.cells {
            assert!(c.locks.is_empty() && c.data.is_empty(), "leftover lock/data in {:?}/{}", row.row, c.column);
        }
    }
}

fn crash_at(failpoint: &str, committed: bool) {
    crash_in(seeded, failpoint, committed);
}

/// Seeds a store made by `make` and crashes a transfer at `failpoint`; returns the store. The
/// store is made inside the failpoint scenario, whose lock keeps other tests' failpoints from
/// firing in its seeding.
fn crash_in(make: impl FnOnce() -> TestStore, failpoint: &str, committed: bool) -> TestStore {
    let scenario = FailScenario::setup();
    let store = &make();
    fail::cfg(failpoint, "return").unwrap();
    let result = transfer(store);
    fail::remove(failpoint);
    // The commit stopped at the failpoint; locks it wrote are still there.
    assert_eq!(result.is_ok(), committed, "{failpoint}: {result:?}");
    let after = balances(store);
    let want = if committed { vec![90, 104, 106, 100] } else { vec![100; 4] };
    assert_eq!(after, want, "after a crash at {failpoint}");
    assert_eq!(after.iter().sum::<u64>(), 400);
    assert_clean(store);
    // And the store keeps working.
    transfer(store).unwrap();
    assert_eq!(balances(store).iter().sum::<u64>(), 400);
    scenario.teardown();
    store.clone()
}

#[test]
fn crash_after_prewrite_primary_rolls_back() {
    crash_at("after-prewrite-primary", false);
}

#[test]
fn crash_after_some_secondaries_rolls_back() {
    crash_at("after-prewrite-first-secondary", false);
}

#[test]
fn crash_before_commit_point_rolls_back() {
    crash_at("before-commit-primary", false);
}

/// The three-row transfer as one atomic step (one-phase commit on an exclusive backend): a
/// crash between taking commit_ts and the write leaves nothing; after the write, everything.
#[test]
fn multi_row_one_phase_commit_is_all_or_nothing_across_a_crash() {
    for (failpoint, committed) in [("before-one-phase-write", false), ("after-one-phase-write", true)] {
        let store = crash_in(|| seeded_with(mem_store(fast_locks())), failpoint, committed);
        // The seeding and the last transfer completed their one-phase commits; the crashed one
        // stopped at its failpoint, before counting.
        assert_eq!(store.metrics().one_pc_commits, 2, "{failpoint}");
    }
}

/// With the secondaries left to the background writer, a commit returns at its commit point;
/// if the writer stops after the first secondary (a crash), the rest stay locked, and readers
/// roll them forward.
#[test]
fn secondaries_left_by_a_crashed_background_writer_are_rolled_forward() {
    let scenario = FailScenario::setup();
    let store = seeded_with(test_store(StoreConfig { async_secondaries: true, ..two_phase() }));
    store.flush_secondaries(); // the seeding's
    let before = store.metrics().async_secondaries;
    fail::cfg("after-commit-first-secondary", "return").unwrap();
    transfer(&store).unwrap();
    store.flush_secondaries();
    fail::remove("after-commit-first-secondary");
    assert_eq!(store.metrics().async_secondaries - before, 1, "the secondaries went to the background writer");
    let locked: Vec<Vec<u8>> = store
        .backend
        .scan_versions(None, usize::MAX)
        .unwrap()
        .into_iter()
        .filter(|r| r.cells.iter().any(|c| !c.locks.is_empty()))
        .map(|r| r.row)
        .collect();
    assert_eq!(locked, vec![b"c".to_vec()], "the writer stopped after the first secondary (b)");
    let rolled = store.metrics().rolled_forward;
    assert_eq!(balances(&store), vec![90, 104, 106, 100]);
    assert!(store.metrics().rolled_forward > rolled, "the reader rolled c forward");
    assert_clean(&store);
    scenario.teardown();
}

#[test]
fn crash_after_commit_point_rolls_forward() {
    crash_at("after-commit-primary", true);
}

#[test]
fn crash_after_some_secondary_commits_rolls_forward() {
    crash_at("after-commit-first-secondary", true);
}

/// Cells that are only ever written, never read (index entries), must not keep a crashed
/// transaction's locks: a writer's prewrite that meets such a lock resolves it (roll forward or
/// back) once its owner is dead or expired, so the writer's retry wins instead of conflicting
/// forever.
#[test]
fn blind_writes_resolve_locks_left_by_a_crash() {
    for (failpoint, committed) in [("after-commit-primary", true), ("after-prewrite-first-secondary", false)] {
        let scenario = FailScenario::setup();
        let store = seeded();
        fail::cfg(failpoint, "return").unwrap();
        let _ = transfer(&store);
        fail::remove(failpoint);
        // Blind writes: b and c in one two-row transaction, then a alone (one-phase commit).
        for cells in [&["b", "c"][..], &["a"][..]] {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let result = store.begin().and_then(|mut t| {
                    for r in cells {
                        set_u64(&mut t, "bank", r, "bal:data", 7)?;
                    }
                    t.commit()
                });
                match result {
                    Ok(_) => break,
                    Err(e) if e.is_retryable() && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(e) => panic!("{failpoint}: the blind write of {cells:?} never got past the lock: {e}"),
                }
            }
        }
        assert_eq!(balances(&store), vec![7, 7, 7, 100], "after {failpoint} (committed: {committed})");
        assert_clean(&store);
        scenario.teardown();
    }
}

#[test]
fn resolver_crash_during_roll_forward_is_finished_by_the_next_reader() {
    let scenario = FailScenario::setup();
    let store = seeded();
    fail::cfg("after-commit-primary", "return").unwrap();
    transfer(&store).unwrap();
    fail::remove("after-commit-primary");
    fail::cfg("roll-forward-before-secondary", "return").unwrap();
    let t = store.begin().unwrap();
    let err = t.get("bank", "b", "bal:data").unwrap_err();
    assert!(err.to_string().contains("roll-forward"), "{err}");
    fail::remove("roll-forward-before-secondary");
    assert_eq!(get_u64(&t, "bank", "b", "bal:data").unwrap(), 104, "the same snapshot, retried, rolls forward");
    drop(t);
    assert_eq!(balances(&store), vec![90, 104, 106, 100]);
    assert_clean(&store);
    assert!(store.metrics().rolled_forward >= 2);
    scenario.teardown();
}

#[test]
fn resolver_crash_during_roll_back_is_finished_by_the_next_reader() {
    let scenario = FailScenario::setup();
    let store = seeded();
    fail::cfg("before-commit-primary", "return").unwrap();
    transfer(&store).unwrap_err();
    fail::remove("before-commit-primary");
    fail::cfg("roll-back-after-primary", "return").unwrap();
    // Reading a secondary: the resolver rolls the primary back, then "crashes".
    let t = store.begin().unwrap();
    let err = t.get("bank", "c", "bal:data").unwrap_err();
    assert!(err.to_string().contains("roll-back"), "{err}");
    fail::remove("roll-back-after-primary");
    drop(t);
    // The primary's rollback record decides the secondaries' fate.
    assert_eq!(balances(&store), vec![100; 4]);
    assert_clean(&store);
    scenario.teardown();
}

struct Counting(AtomicU64);

impl Observer for Counting {
    fn observe(&self, _: &mut Transaction, _: &percolator_store::Notification) -> Result<(), ObserveError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn notification_survives_roll_forward_of_a_secondary() {
    // Fluo issue 642: a notify written only at commit is lost when a reader rolls the commit
    // forward. Here the observed cell is a secondary whose commit never happened.
    let scenario = FailScenario::setup();
    let store = seeded();
    let obs = Arc::new(Counting(AtomicU64::new(0)));
    let spec = ObserverSpec {
        name: "audit".into(),
        table: "bank".into(),
        column: "bal:data".into(),
        kind: NotifyKind::Strong,
        max_attempts: 3,
    };
    store.register_observer(spec, obs.clone()).unwrap();
    // Settle the seed's notifications first.
    for e in store.pending_notifications(100).unwrap() {
        store.process_notification(&e).unwrap();
    }
    assert!(store.pending_notifications(100).unwrap().is_empty());
    let before = obs.0.load(Ordering::SeqCst);
    fail::cfg("after-commit-primary", "return").unwrap();
    transfer(&store).unwrap();
    fail::remove("after-commit-primary");
    let pending = store.pending_notifications(100).unwrap();
    assert_eq!(pending.len(), 3, "a, b and c were notified at prewrite");
    for e in &pending {
        store.process_notification(e).unwrap();
    }
    assert_eq!(obs.0.load(Ordering::SeqCst) - before, 3, "every changed cell ran its observer once");
    assert!(store.pending_notifications(100).unwrap().is_empty());
    assert_clean(&store);
    scenario.teardown();
}

struct ReadsA(Mutex<Vec<Option<Vec<u8>>>>);
impl Observer for ReadsA {
    fn observe(&self, t: &mut Transaction, _n: &Notification) -> Result<(), ObserveError> {
        let v = t.get("t", "a", "c:v")?;
        self.0.lock().unwrap().push(v);
        Ok(())
    }
}

/// Observer `w` on the weak column `t/w:n`.
fn weak_spec() -> ObserverSpec {
    ObserverSpec { name: "w".into(), table: "t".into(), column: "w:n".into(), kind: NotifyKind::Weak, max_attempts: 3 }
}

/// A weak notification set at prewrite names its writer: a scanner that meets it while the
/// writer is in flight waits for the writer's fate, and if the writer dies after its commit
/// point (before re-notifying at commit), the scanner re-notifies at the commit timestamp.
#[test]
fn weak_notification_survives_a_crash_after_the_commit_point() {
    let scenario = FailScenario::setup();
    let s = test_store(two_phase());
    let obs = Arc::new(ReadsA(Mutex::new(vec![])));
    s.register_observer(weak_spec(), obs.clone()).unwrap();
    let handle: Arc<Mutex<Option<std::thread::JoinHandle<()>>>> = Arc::new(Mutex::new(None));
    let (s2, h2) = (s.clone(), handle.clone());
    fail::cfg_callback("after-prewrite-first-secondary", move || {
        let s3 = s2.clone();
        // A scanner picks up the prewrite-time weak notify while the writer is still in flight.
        *h2.lock().unwrap() = Some(std::thread::spawn(move || {
            for e in s3.pending_notifications(10).unwrap() {
                s3.process_notification(&e).unwrap();
            }
        }));
        std::thread::sleep(Duration::from_millis(100)); // its observer txn has begun and waits on our lock
    })
    .unwrap();
    fail::cfg("after-commit-primary", "return").unwrap(); // "crash" right after the commit point
    let mut t = s.begin().unwrap();
    t.set("t", "a", "c:v", b"new".to_vec()).unwrap();
    t.set("t", "c", "c:v", b"x".to_vec()).unwrap(); // a second written row: two-phase commit
    t.notify_weak("t", "c", "w:n").unwrap(); // weak notify on the secondary row
    t.commit().unwrap();
    handle.lock().unwrap().take().unwrap().join().unwrap();
    fail::remove("after-prewrite-first-secondary");
    fail::remove("after-commit-primary");
    // Everything pending is processed; the committed write must have been observed at least once.
    for _ in 0..3 {
        for e in s.pending_notifications(10).unwrap() {
            s.process_notification(&e).unwrap();
        }
    }
    let seen = obs.0.lock().unwrap().clone();
    scenario.teardown();
    assert!(seen.contains(&Some(b"new".to_vec())), "weak observer never saw the committed write: {seen:?}");
}

/// Records the start timestamp of every run.
struct RunStarts(Mutex<Vec<percolator_store::Timestamp>>);
impl Observer for RunStarts {
    fn observe(&self, t: &mut Transaction, _n: &Notification) -> Result<(), ObserveError> {
        self.0.lock().unwrap().push(t.start_ts());
        Ok(())
    }
}

/// Two weak writers of one cell: the second one's notification (newer) must not erase the
/// first one's name. Before the fix, it did: a scanner then processed and cleared the cell while
/// the first writer was between prewrite and commit, the first writer died after its commit
/// point (before re-notifying at commit), and its committed write was never observed.
#[test]
fn a_second_weak_writer_does_not_erase_the_first_ones_name() {
    let scenario = FailScenario::setup();
    let s = test_store(two_phase());
    let runs = Arc::new(RunStarts(Mutex::new(vec![])));
    let spec = weak_spec();
    s.register_observer(spec, runs.clone()).unwrap();
    let s2 = s.clone();
    fail::cfg_callback("after-prewrite-first-secondary", move || {
        // While the first writer is prewritten: a second weak writer of the same cell commits
        // (a newer notification), and a scanner comes by.
        let mut t2 = s2.begin().unwrap();
        t2.set("t", "c", "z:v", b"2".to_vec()).unwrap();
        t2.notify_weak("t", "c", "w:n").unwrap();
        t2.commit().unwrap();
        for e in s2.pending_notifications(10).unwrap() {
            s2.process_notification(&e).unwrap();
        }
    })
    .unwrap();
    fail::cfg("after-commit-primary", "return").unwrap(); // dies right after its commit point
    let mut t = s.begin().unwrap();
    t.set("t", "a", "c:v", b"new".to_vec()).unwrap();
    t.set("t", "c", "c:v", b"x".to_vec()).unwrap(); // the weak notify's row is a secondary
    t.notify_weak("t", "c", "w:n").unwrap();
    let commit_ts = t.commit().unwrap();
    fail::remove("after-prewrite-first-secondary");
    fail::remove("after-commit-primary");
    for _ in 0..3 {
        for e in s.pending_notifications(10).unwrap() {
            s.process_notification(&e).unwrap();
        }
    }
    let runs = runs.0.lock().unwrap().clone();
    let pending = s.pending_notifications(10).unwrap();
    scenario.teardown();
    assert!(
        runs.iter().any(|&ts| ts > commit_ts),
        "no run saw the first writer's commit at {commit_ts:?}; runs started at {runs:?}"
    );
    assert!(pending.is_empty(), "{pending:?}");
}

/// A one-phase commit (one written row) with a weak notification of another row: the
/// notification goes in with the write, in one atomic step, so a crash right after the write
/// cannot lose it (it used to be applied after the write, then before it).
#[test]
fn a_one_phase_commit_s_weak_notification_survives_a_crash_after_the_write() {
    let scenario = FailScenario::setup();
    // One-phase commit exists on exclusive backends only.
    let s = mem_store(fast_locks());
    let runs = Arc::new(RunStarts(Mutex::new(vec![])));
    let spec = weak_spec();
    s.register_observer(spec, runs.clone()).unwrap();
    // Saving the binding was a one-phase commit of its own.
    let one_pc_before = s.metrics().one_pc_commits;
    fail::cfg("after-one-phase-write", "return").unwrap();
    let mut t = s.begin().unwrap();
    t.set("t", "a", "c:v", b"new".to_vec()).unwrap();
    t.notify_weak("t", "hot", "w:n").unwrap();
    let commit_ts = t.commit().unwrap();
    fail::remove("after-one-phase-write");
    assert_eq!(s.metrics().one_pc_commits, one_pc_before, "the commit stopped right after its write");
    assert_eq!(s.begin().unwrap().get("t", "a", "c:v").unwrap(), Some(b"new".to_vec()));
    for e in s.pending_notifications(10).unwrap() {
        s.process_notification(&e).unwrap();
    }
    let runs = runs.0.lock().unwrap().clone();
    // The same transaction without the failpoint is a one-phase commit (the path tested).
    s.run(|t| {
        t.set("t", "a", "c:v", b"again".to_vec())?;
        t.notify_weak("t", "hot", "w:n")
    })
    .unwrap();
    assert_eq!(s.metrics().one_pc_commits, one_pc_before + 1);
    scenario.teardown();
    assert!(runs.iter().any(|&ts| ts > commit_ts), "the weak notification was lost: runs {runs:?}");
}

/// The worker lease of [`short_lease_store`]'s store.
const SHORT_LEASE: Duration = Duration::from_millis(1500);

/// Longer than [`SHORT_LEASE`]: a stalled heartbeat has let the lease lapse.
const LAPSED: Duration = Duration::from_millis(1600);

/// A store with `config` and a [`SHORT_LEASE`] on the Redis test backend; `None` on an
/// exclusive backend, where no other worker can count this one dead.
fn short_lease_store(config: StoreConfig) -> Option<TestStore> {
    (test_backend() == "redis").then(|| test_store(StoreConfig { worker_lease: SHORT_LEASE, ..config }))
}

/// A worker whose lease lapses (its heartbeat stalls) stops trusting its reads on a shared
/// backend: another host's GC may have collected under its snapshots. A transaction that
/// started before the lapse keeps failing after the lease is renewed; a new one reads again.
#[test]
fn reads_fail_once_the_workers_lease_lapsed() {
    let scenario = FailScenario::setup();
    let Some(s) = short_lease_store(fast_locks()) else { return };
    s.run(|t| t.set("t", "r", "c:v", b"1".to_vec())).unwrap();
    let old = s.begin().unwrap();
    assert_eq!(old.get("t", "r", "c:v").unwrap(), Some(b"1".to_vec()));
    fail::cfg("lease-heartbeat", "return").unwrap();
    std::thread::sleep(LAPSED);
    match old.get("t", "r", "c:v") {
        Err(Error::Unavailable(m)) => assert!(m.contains("lease"), "{m}"),
        other => panic!("a read after the lease lapsed must fail, got {other:?}"),
    }
    fail::remove("lease-heartbeat");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match s.begin().and_then(|t| t.get("t", "r", "c:v")) {
            Ok(v) => {
                assert_eq!(v, Some(b"1".to_vec()));
                break;
            }
            Err(e) => assert!(std::time::Instant::now() < deadline, "the lease was not renewed: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(matches!(old.get("t", "r", "c:v"), Err(Error::Unavailable(_))), "the old transaction stays failed");
    scenario.teardown();
}

/// An observer whose run outlives its worker's lease: the run's read fails with
/// `Error::Unavailable`. That is the worker's trouble, not the observer's: with one attempt
/// allowed, the notification still goes to no dead letter, and the run commits once the lease
/// is renewed.
struct OutlivesTheLease {
    calls: AtomicU64,
}

impl Observer for OutlivesTheLease {
    fn observe(&self, t: &mut Transaction, n: &Notification) -> Result<(), ObserveError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            // The heartbeat is stalled (`lease-heartbeat`): the lease lapses under this run.
            std::thread::sleep(LAPSED);
        }
        let v = t.get(&n.cell.table, &n.cell.row, &n.cell.column)?.unwrap_or_default();
        t.set(&n.cell.table, n.cell.row.clone(), "c:out", v)?;
        Ok(())
    }
}

#[test]
fn an_observer_run_whose_lease_lapsed_is_no_failure_of_the_observer() {
    let scenario = FailScenario::setup();
    let Some(s) = short_lease_store(fast_locks()) else { return };
    let obs = Arc::new(OutlivesTheLease { calls: AtomicU64::new(0) });
    let spec = ObserverSpec {
        name: "o".into(),
        table: "t".into(),
        column: "c:in".into(),
        kind: NotifyKind::Strong,
        max_attempts: 1,
    };
    s.register_observer(spec, obs.clone()).unwrap();
    s.run(|t| t.set("t", "r", "c:in", b"x".to_vec())).unwrap();
    let entries = s.pending_notifications(10).unwrap();
    assert_eq!(entries.len(), 1);
    fail::cfg("lease-heartbeat", "return").unwrap();
    match s.process_notification(&entries[0]) {
        Ok(outcome) => assert_eq!(outcome, CellOutcome::Pending, "the run could not commit"),
        Err(e) => panic!("processing the notification: {e}"),
    }
    fail::remove("lease-heartbeat");
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    let m = s.metrics();
    assert_eq!((m.observer_failures, m.dead_letters, m.observer_store_failures), (0, 0, 1), "{m:?}");
    assert!(s.dead_letters().unwrap().is_empty());

    // Once the lease is renewed (and the run's second of backoff is over), the run commits.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !s.pending_notifications(10).unwrap().is_empty() {
        assert!(Instant::now() < deadline, "the notification was never processed");
        std::thread::sleep(Duration::from_millis(100));
        for e in s.pending_notifications(10).unwrap_or_default() {
            let _ = s.process_notification(&e);
        }
    }
    scenario.teardown();
    assert_eq!(s.begin().unwrap().get("t", "r", "c:out").unwrap(), Some(b"x".to_vec()));
    let m = s.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.dead_letters), (1, 0, 0), "{m:?}");
}

/// A worker's lease lapses while its transaction prewrites (the heartbeat stalled, the commit
/// held after the primary's prewrite): the commit fails before its commit point and leaves
/// nothing. Committing then was unsafe on a shared backend: a primary whose prewrite landed
/// after a resolver rolled the transaction back and another host's GC, no longer counting this
/// worker, removed the rollback record would commit with its secondaries rolled back
/// (`docs/design.md`, "Commits check the lease once, after their prewrites").
#[test]
fn a_commit_whose_lease_lapsed_during_its_prewrite_fails() {
    let scenario = FailScenario::setup();
    let Some(s) = short_lease_store(two_phase()) else { return };
    s.run(|t| {
        t.set("t", "a", "c:v", b"1".to_vec())?;
        t.set("t", "b", "c:v", b"1".to_vec())
    })
    .unwrap();
    let mut t = s.begin().unwrap();
    t.set("t", "a", "c:v", b"2".to_vec()).unwrap();
    t.set("t", "b", "c:v", b"2".to_vec()).unwrap();
    fail::cfg("lease-heartbeat", "return").unwrap();
    fail::cfg_callback("after-prewrite-primary", || std::thread::sleep(LAPSED)).unwrap();
    match t.commit() {
        Err(Error::Unavailable(m)) => assert!(m.contains("lease"), "{m}"),
        other => panic!("a commit whose lease lapsed during its prewrite must fail, got {other:?}"),
    }
    fail::remove("after-prewrite-primary");
    fail::remove("lease-heartbeat");
    // Nothing of it is visible, and it left no lock (its roll-back ran).
    let deadline = Instant::now() + Duration::from_secs(10);
    let values = loop {
        let read = s.begin().and_then(|t| Ok((t.get("t", "a", "c:v")?, t.get("t", "b", "c:v")?)));
        match read {
            Ok(v) => break v,
            Err(e) => assert!(Instant::now() < deadline, "the lease was not renewed: {e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    scenario.teardown();
    assert_eq!(values, (Some(b"1".to_vec()), Some(b"1".to_vec())));
    let versions = s.backend.scan_versions(None, usize::MAX).unwrap();
    assert!(versions.iter().all(|r| r.cells.iter().all(|c| c.locks.is_empty() && c.data.is_empty())), "{versions:?}");
}

/// A resolver meets a secondary lock whose primary is neither locked nor decided (the
/// prewrite of the primary, sent in parallel with the secondaries, has not landed yet), and
/// decides to leave a rollback record there. If the owner prewrites and commits its primary
/// between the resolver's reads and that record (`LockAbsent` still holds: the commit removed
/// the lock), the transaction committed, and the resolver must not roll its secondary back:
/// that lost a committed write (an append of the list-append test on three hosts over Redis,
/// overwritten by a concurrent transaction that then prewrote the cell unhindered). The
/// failpoint stops the resolver right there while the owner's primary commits.
#[test]
fn a_primary_committed_while_its_rollback_was_decided_is_rolled_forward() {
    use percolator_store::CellRef;
    use percolator_store::backends::{LockRecord, Mutation, Op, RowMutation, WriteKind, WriteRecord, encode_value};
    let scenario = FailScenario::setup();
    let s = test_store(two_phase());
    let column = "c:v";
    let row = |row: &str, mutations: Vec<Mutation>| {
        Op::Row(RowMutation { table: "t".into(), row: row.as_bytes().to_vec(), conditions: vec![], mutations })
    };
    // The owner's secondary `t/k` is prewritten; its primary `t/p` not yet.
    let start = s.oracle().next().unwrap();
    let lock = LockRecord { primary: CellRef::new("t", "p", column), wall_ms: 0, ttl_ms: u64::MAX / 2, worker: 0 };
    s.backend
        .apply(vec![row(
            "k",
            vec![
                Mutation::PutLock { column: column.into(), start_ts: start, lock },
                Mutation::PutData { column: column.into(), start_ts: start, value: encode_value(b"owner's") },
            ],
        )])
        .unwrap();
    // Between the resolver's reads of the primary and its rollback record, the owner's primary
    // is prewritten and committed (what is left of it: its commit record).
    let (store, backend) = (s.store.clone(), s.backend.clone());
    let committed = Arc::new(AtomicU64::new(0));
    let at = committed.clone();
    fail::cfg_callback("resolve-before-rollback-record", move || {
        if at.load(Ordering::SeqCst) != 0 {
            return;
        }
        let commit_ts = store.oracle().next().unwrap();
        let write = WriteRecord { start_ts: start, kind: WriteKind::Put(encode_value(b"owner's")) };
        backend.apply(vec![row("p", vec![Mutation::PutWrite { column: column.into(), commit_ts, write }])]).unwrap();
        at.store(commit_ts.raw(), Ordering::SeqCst);
    })
    .unwrap();
    // A reader meets the secondary lock and resolves it through the primary.
    let reader = s.begin().unwrap();
    assert_eq!(reader.get("t", "k", column).unwrap(), None, "the owner committed after the reader started");
    fail::remove("resolve-before-rollback-record");
    assert_ne!(committed.load(Ordering::SeqCst), 0, "the resolver never decided to leave a rollback record");
    let after = s.begin().unwrap();
    let (primary, secondary) = (after.get("t", "p", column).unwrap(), after.get("t", "k", column).unwrap());
    scenario.teardown();
    assert_eq!(primary.as_deref(), Some(&b"owner's"[..]), "the primary's commit record");
    assert_eq!(
        secondary.as_deref(),
        Some(&b"owner's"[..]),
        "the primary committed, but the resolver rolled its secondary back: a committed write lost"
    );
}

/// An fsync of the redo log fails while transfers run from several threads (the failpoint
/// returns the fsync's error after the record was written): the record is cut off the log
/// again, the round's callers hear the error, the store's prober probes until writes work,
/// and then the total is whole, every acknowledged transfer is there, and writes go on.
#[test]
fn a_failed_log_fsync_leaves_a_consistent_store_after_the_reopen() {
    let scenario = FailScenario::setup();
    let dir = TempDir::new("redo-fsync-failed");
    let store =
        seeded_with(TestStore::open(&dir.file("s.redb"), StoreConfig::default(), percolator_store::Durability::Fsync));
    // The 40th fsync from now fails, once.
    fail::cfg("redo-fsync", "39*off->1*return->off").unwrap();
    let (acked, failures) = transfers(&store, &|_, i| i < 60);
    assert!(failures > 0, "no transfer met the failed fsync");
    check_transfers_after_the_failure(&store, &acked);
    scenario.teardown();
}

/// Transfers among [`ROWS`] on 4 threads (each also logs its id), each thread while
/// `go_on(failures so far, its transfers so far)`; returns the ids acknowledged and how many
/// met a storage failure.
fn transfers(store: &TestStore, go_on: &(dyn Fn(u64, u64) -> bool + Sync)) -> (Vec<String>, u64) {
    let acked = Mutex::new(Vec::new());
    let failures = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (acked, failures) = (&acked, &failures);
            s.spawn(move || {
                let mut i = 0;
                while go_on(failures.load(Ordering::SeqCst), i) {
                    let (from, to) = (ROWS[((w + i) % 4) as usize], ROWS[((w + i + 1) % 4) as usize]);
                    let id = format!("{w}-{i}");
                    i += 1;
                    let r = store.begin().and_then(|mut t| {
                        let a = get_u64(&t, "bank", from, "bal:data")?;
                        let b = get_u64(&t, "bank", to, "bal:data")?;
                        let amount = a.min(3);
                        set_u64(&mut t, "bank", from, "bal:data", a - amount)?;
                        set_u64(&mut t, "bank", to, "bal:data", b + amount)?;
                        t.set("log", id.clone(), "t:amount", amount.to_be_bytes())?;
                        t.commit()
                    });
                    match r {
                        Ok(_) => acked.lock().unwrap().push(id),
                        Err(e) if e.is_storage_failure() => {
                            failures.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(_) => {} // a conflict: not committed, nothing to check
                    }
                }
            });
        }
    });
    (acked.into_inner().unwrap(), failures.load(Ordering::SeqCst))
}

/// Once writes work again: the total holds, every acknowledged transfer is there, and the
/// store takes a write.
fn check_transfers_after_the_failure(store: &TestStore, acked: &[String]) {
    let start = Instant::now();
    while store.storage_failure().is_some() {
        assert!(start.elapsed() < Duration::from_secs(20), "writes did not come back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let t = store.begin().unwrap();
    let total: u64 = ROWS.iter().map(|r| get_u64(&t, "bank", r, "bal:data").unwrap()).sum();
    assert_eq!(total, 400, "the total after the failure");
    for id in acked {
        assert!(t.get("log", id, "t:amount").unwrap().is_some(), "acknowledged transfer {id} lost");
    }
    drop(t);
    store.run(|t| set_u64(t, "t", "after", "c:v", 3)).unwrap();
}

/// A checkpoint that fails (redb's commit meets an I/O error, as on a full disk) while
/// transfers run, at either durability: writes are refused until the prober's checkpoint
/// succeeds, and nothing acknowledged is lost — not at the reopen the prober makes (the
/// memtable keeps what the checkpoint did not write), nor after a close and an open.
#[test]
fn a_failed_checkpoint_keeps_every_acknowledged_transfer() {
    let scenario = FailScenario::setup();
    for durability in [percolator_store::Durability::Fsync, percolator_store::Durability::None] {
        let dir = TempDir::new("checkpoint-failed");
        let path = dir.file("s.redb");
        let store = seeded_with(TestStore::open(&path, StoreConfig::default(), durability));
        fail::cfg("checkpoint-before-commit", "return").unwrap();
        let healed = std::sync::atomic::AtomicBool::new(false);
        let (acked, failures) = std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                // The checkpointer fails within about a second; then the prober's checkpoints
                // fail for a while, then succeed.
                let start = Instant::now();
                while store.storage_failure().is_none() {
                    assert!(start.elapsed() < Duration::from_secs(20), "{durability:?}: no checkpoint failed");
                    std::thread::sleep(Duration::from_millis(10));
                }
                std::thread::sleep(Duration::from_millis(300));
                fail::remove("checkpoint-before-commit");
                healed.store(true, Ordering::SeqCst);
            });
            let out = transfers(&store, &|failures, i| failures == 0 || !healed.load(Ordering::SeqCst) || i < 400);
            watcher.join().unwrap();
            out
        });
        assert!(failures > 0, "{durability:?}: no transfer met the failed checkpoint");
        assert!(store.backend.reopens() > 0, "{durability:?}: the prober did not reopen the file");
        check_transfers_after_the_failure(&store, &acked);
        drop(store);
        let store = TestStore::open(&path, StoreConfig::default(), durability);
        let t = store.begin().unwrap();
        let total: u64 = ROWS.iter().map(|r| get_u64(&t, "bank", r, "bal:data").unwrap()).sum();
        assert_eq!(total, 400, "{durability:?}: the total after a close and an open");
        for id in &acked {
            assert!(t.get("log", id, "t:amount").unwrap().is_some(), "{durability:?}: transfer {id} lost at the open");
        }
    }
    scenario.teardown();
}

/// The store of the compaction tests: checkpoints every 50 ms, quiet after `quiet`, and 18 MB of
/// versions of 300 rows written into redb, all but the last collected (over the 16 MiB of free
/// pages a compaction needs), before its compaction when quiet is on
/// ([`percolator_testkit::grown_store`]). Returns the store, its backend and the file's size.
fn store_to_compact(
    path: &std::path::Path,
    quiet: Duration,
    durability: percolator_store::Durability,
) -> (TestStore, Arc<percolator_store::backends::RedbBigtable>, u64) {
    let config = percolator_store::RedbConfig {
        durability,
        checkpoint_every: Some(Duration::from_millis(50)),
        compact_when_quiet: Some(quiet),
        ..percolator_store::RedbConfig::default()
    };
    percolator_testkit::grown_store(path, config, 300, 30, compacted_value)
}

fn compacted_value(row: u64, round: u64) -> Vec<u8> {
    noise(row << 32 | round, 2048)
}

/// Waits until `done`, failing the test (`what`, and the backend's counters) once `secs` have
/// passed since `start`.
fn wait_for(
    start: Instant,
    secs: u64,
    what: &str,
    redb: &percolator_store::backends::RedbBigtable,
    done: impl Fn() -> bool,
) {
    use percolator_store::backends::Bigtable;
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(secs), "{what}: {:?}", redb.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` on a thread of its own and fails the test if it takes over 20 s (a read or a commit
/// waiting behind the compaction, which the test holds paused, would wait forever).
fn within_20_s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} waited 20 s for the compaction"))
}

/// A compaction when quiet copies the file while readers and rounds go on (`docs/design.md`,
/// "GC", compaction when quiet): with the copy held in its middle, every row reads its value and
/// new commits are answered; once it ends, the file is smaller, the commits made during the copy
/// read back (the next checkpoint wrote them into the new file), also after a reopen, and no
/// copy is left beside the file.
#[test]
fn readers_and_rounds_go_on_while_a_compaction_copies_the_file() {
    use percolator_store::backends::Bigtable;
    let scenario = FailScenario::setup();
    let dir = TempDir::new("compaction-copying");
    let path = dir.file("s.redb");
    let copy = dir.file("s.redb.compacting");
    fail::cfg("redb-compact-copying", "pause").unwrap();
    let (store, redb, grown) = store_to_compact(&path, Duration::from_millis(400), percolator_store::Durability::Fsync);
    // A file only its owner may read: so is the copy that takes its place.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let start = Instant::now();
    wait_for(start, 30, "no compaction started", &redb, || copy.exists());
    // The copy is held at the end of its first run: read everything, commit new rows.
    {
        let store = store.clone();
        within_20_s("a reader and a writer", move || {
            let t = store.begin().unwrap();
            for r in 0..300 {
                assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(compacted_value(r, 29)), "row {r}");
            }
            drop(t);
            for i in 0..20u64 {
                store.run(|t| set_u64(t, "during", &format!("d{i}"), "c:v", i)).unwrap();
            }
        })
    }
    assert_eq!(redb.stats().compactions, 0, "the compaction is held");
    fail::remove("redb-compact-copying");
    wait_for(start, 60, "the compaction did not end", &redb, || redb.stats().compactions != 0);
    let compacted = std::fs::metadata(&path).unwrap().len();
    assert!(compacted < grown / 2, "the file was {grown} bytes, {compacted} after the compaction");
    assert!(!copy.exists(), "the copy took the file's place");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the file's permissions after the compaction: {mode:o}");
    }
    let check = |store: &TestStore, when: &str| {
        let t = store.begin().unwrap();
        for r in 0..300 {
            assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(compacted_value(r, 29)), "{when}: row {r}");
        }
        for i in 0..20u64 {
            assert_eq!(get_u64(&t, "during", &format!("d{i}"), "c:v").unwrap(), i, "{when}: a commit during the copy");
        }
    };
    check(&store, "after the compaction");
    store.run(|t| set_u64(t, "t", "after", "c:v", 3)).unwrap();
    redb.checkpoint().unwrap();
    assert_eq!(redb.stats().compactions_given_up, 0);
    drop((store, redb));
    let reopened = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::Fsync);
    check(&reopened, "after a reopen");
    assert_eq!(get_u64(&reopened.begin().unwrap(), "t", "after", "c:v").unwrap(), 3);
    scenario.teardown();
}

/// At durability none, where a round is durable only once a checkpoint wrote it, a compaction
/// gives its copy up as soon as a round is published (else what a crash loses would reach back
/// to the copy's start): the file is as it was, and the round is written by the next checkpoint.
#[test]
fn at_durability_none_a_round_during_the_copy_makes_the_compaction_give_up() {
    use percolator_store::backends::Bigtable;
    let scenario = FailScenario::setup();
    let dir = TempDir::new("compaction-unlogged");
    let path = dir.file("s.redb");
    let copy = dir.file("s.redb.compacting");
    fail::cfg("redb-compact-copying", "pause").unwrap();
    let (store, redb, grown) = store_to_compact(&path, Duration::from_millis(400), percolator_store::Durability::None);
    let start = Instant::now();
    wait_for(start, 30, "no compaction started", &redb, || copy.exists());
    {
        let store = store.clone();
        within_20_s("a commit", move || store.run(|t| set_u64(t, "during", "d", "c:v", 7)).unwrap());
    }
    // The compaction tried again after the back-off fails before its copy, so that the file
    // stays as it was for the checks below.
    fail::cfg("redb-compact-start", "return").unwrap();
    fail::remove("redb-compact-copying");
    wait_for(start, 60, "the compaction went on", &redb, || redb.stats().compactions_given_up != 0);
    assert_eq!(redb.stats().compactions, 0);
    assert!(!copy.exists(), "the given-up copy was removed");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), grown, "the file is as it was");
    // The round reaches the file by a checkpoint, as any other.
    redb.checkpoint().unwrap();
    drop((store, redb));
    let reopened = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::None);
    assert_eq!(get_u64(&reopened.begin().unwrap(), "during", "d", "c:v").unwrap(), 7);
    scenario.teardown();
}

/// A compaction when quiet whose copy fails leaves the store as it was: writes never stop, the
/// file keeps its size, the copy is removed, and the store, quiet throughout, compacts after a
/// back-off.
#[test]
fn a_compaction_whose_copy_fails_leaves_the_store_as_it_was() {
    use percolator_store::backends::Bigtable;
    let scenario = FailScenario::setup();
    let dir = TempDir::new("compaction-failed");
    let path = dir.file("s.redb");
    fail::cfg("redb-compact-copying", "return").unwrap();
    let (store, redb, grown) = store_to_compact(&path, Duration::from_millis(400), percolator_store::Durability::Fsync);
    let start = Instant::now();
    wait_for(start, 30, "no compaction was tried", &redb, || redb.stats().compactions_given_up != 0);
    assert!(store.storage_failure().is_none(), "a failed copy is no failure of the store");
    // (A try again after the back-off, 800 ms on, fails too and makes a copy for a moment.)
    let copy = dir.file("s.redb.compacting");
    wait_for(start, 30, "the failed copy was not removed", &redb, || !copy.exists());
    assert_eq!(std::fs::metadata(&path).unwrap().len(), grown, "the file is as it was");
    assert_eq!(redb.stats().compactions, 0);
    fail::remove("redb-compact-copying");
    // A few commits (one operation each), too few to start a new quiet spell (more than
    // QUIET_OPS, 64, in a checkpoint interval of 50 ms): the store compacts after the back-off,
    // 2 × 400 ms, of the spell it stays in. (Until there was a back-off, a hundred commits here
    // started a new spell only on a disk that took 65 of them in 50 ms: the official CI's did
    // not, and the test waited in vain.)
    for i in 0..10u64 {
        store.run(|t| set_u64(t, "t", &format!("w{i:03}"), "c:v", i)).unwrap();
    }
    wait_for(start, 60, "no compaction after the back-off", &redb, || redb.stats().compactions != 0);
    assert!(std::fs::metadata(&path).unwrap().len() < grown / 2);
    let t = store.begin().unwrap();
    for r in 0..300 {
        assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(compacted_value(r, 29)), "row {r}");
    }
    for i in 0..10u64 {
        assert_eq!(get_u64(&t, "t", &format!("w{i:03}"), "c:v").unwrap(), i);
    }
    drop(t);
    scenario.teardown();
}

/// Dropping the last handle of a store while its lease heartbeat is mid-beat (a beat holds the
/// store, here for 300 ms) closes the store before the drop returns: its file opens again at
/// once. Before, the beat held the store until it ended, and the open failed with
/// `AlreadyOpen` (a test that dropped and reopened a store could meet it).
#[test]
fn a_store_dropped_while_its_heartbeat_beats_is_closed_when_the_drop_returns() {
    let scenario = FailScenario::setup();
    let dir = TempDir::new("drop-mid-beat");
    let path = dir.file("s.redb");
    // A beat counts itself, waits (at most 10 s) until the test is about to drop the store,
    // then holds on 300 ms more: the drop comes mid-beat, however late the test thread runs.
    let (beats, dropping) = (Arc::new(AtomicU64::new(0)), Arc::new(std::sync::atomic::AtomicBool::new(false)));
    {
        let (beats, dropping) = (beats.clone(), dropping.clone());
        fail::cfg_callback("lease-heartbeat-beating", move || {
            beats.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            while !dropping.load(Ordering::SeqCst) && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(300));
        })
        .unwrap();
    }
    // A beat every 100 ms.
    let config = StoreConfig { worker_lease: Duration::from_millis(300), ..StoreConfig::default() };
    let store = Store::open(&path, config, percolator_store::RedbConfig::default()).unwrap();
    store.run(|t| set_u64(t, "t", "r", "c:v", 1)).unwrap();
    let start = Instant::now();
    while beats.load(Ordering::SeqCst) == 0 {
        assert!(start.elapsed() < Duration::from_secs(20), "no beat in 20 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    dropping.store(true, Ordering::SeqCst);
    drop(store);
    let again = Store::open(&path, StoreConfig::default(), percolator_store::RedbConfig::default());
    fail::remove("lease-heartbeat-beating");
    let again = again.unwrap_or_else(|e| panic!("the file of a store just dropped: {e}"));
    assert_eq!(get_u64(&again.begin().unwrap(), "t", "r", "c:v").unwrap(), 1);
    scenario.teardown();
}
