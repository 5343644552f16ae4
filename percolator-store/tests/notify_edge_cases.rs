//! Edge cases of notifications found in review: deletes parked in dead letters across GC,
//! weak notifications of unbound columns, `notify_existing` at page boundaries, and the writers
//! a weak notify cell names (aborted writers, a hot cell whose writers always overlap, a
//! committed writer whose commit record GC removed, a writer that died before its commit point).
//!
//! `cargo test -p percolator-store --test notify_edge_cases`, and with `--features failpoints`.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use percolator_store::{
    Notification, NotifyKind, ObserveError, Observer, ObserverSpec, Store, StoreConfig, Transaction,
};

/// Records what each run saw in the notified column.
struct Rec {
    seen: Mutex<Vec<Option<Vec<u8>>>>,
    calls: AtomicU64,
}
impl Observer for Rec {
    fn observe(&self, t: &mut Transaction, n: &Notification) -> Result<(), ObserveError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let v = if n.kind == NotifyKind::Strong { t.get(&n.cell.table, &n.cell.row, &n.cell.column)? } else { None };
        self.seen.lock().unwrap().push(v);
        Ok(())
    }
}
fn rec() -> Arc<Rec> {
    Arc::new(Rec { seen: Mutex::new(vec![]), calls: AtomicU64::new(0) })
}

fn spec(name: &str, column: &str, kind: NotifyKind) -> ObserverSpec {
    ObserverSpec { name: name.into(), table: "t".into(), column: column.into(), kind, max_attempts: 3 }
}

fn drain(s: &Store) {
    for _ in 0..5 {
        for e in s.pending_notifications(10_000).unwrap() {
            s.process_notification(&e).unwrap();
        }
    }
}

fn unbound_delete_scenario(run_gc: bool) -> (Arc<Rec>, Store) {
    let s = Store::in_memory(StoreConfig::default()).unwrap();
    let obs = rec();
    s.register_observer(spec("o", "c:v", NotifyKind::Strong), obs.clone()).unwrap();
    s.run(|t| t.set("t", "r", "c:v", b"x".to_vec())).unwrap();
    drain(&s);
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    // A delete is pending when the binding is removed: the scanner parks it as an (unbound)
    // dead letter and clears the notify cell.
    s.run(|t| t.delete("t", "r", "c:v")).unwrap();
    s.unregister_observer("o").unwrap();
    drain(&s);
    assert!(s.pending_notifications(10).unwrap().is_empty());
    let dead = s.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].observer, percolator_store::UNBOUND);
    if run_gc {
        // GC keeps a Delete only while the cell's notify is pending; a dead letter is not.
        s.gc().unwrap();
    }
    s.register_observer(spec("o", "c:v", NotifyKind::Strong), obs.clone()).unwrap();
    s.retry_dead_letter(&dead[0].id).unwrap();
    drain(&s);
    (obs, s)
}

/// Control: without GC the retried (unbound) dead letter does reach the observer.
#[test]
fn unbound_dead_letter_of_a_delete_is_processed_on_retry() {
    let _no_failpoints = no_failpoints();
    let (obs, s) = unbound_delete_scenario(false);
    assert_eq!(obs.calls.load(Ordering::SeqCst), 2);
    assert_eq!(obs.seen.lock().unwrap().last(), Some(&None));
    assert!(s.pending_notifications(10).unwrap().is_empty());
}

/// With a GC between the dead-lettering and the retry: GC keeps the Delete record while a dead
/// letter holds the cell's notification (it used to remove it, and the retried observer then
/// found no write newer than its ack and skipped: the delete was never observed).
#[test]
fn unbound_dead_letter_of_a_delete_survives_gc() {
    let _no_failpoints = no_failpoints();
    let (obs, _s) = unbound_delete_scenario(true);
    assert_eq!(
        obs.calls.load(Ordering::SeqCst),
        2,
        "the retried (unbound) dead letter never ran the observer for the delete: {:?}",
        obs.seen.lock().unwrap()
    );
}

/// A weak notification of a column nobody observes notifies nobody, like a write to an
/// unobserved column: no notify cell, no `(unbound)` dead letter.
#[test]
fn weak_notify_of_a_never_bound_column_notifies_nobody() {
    let _no_failpoints = no_failpoints();
    let s = Store::in_memory(StoreConfig::default()).unwrap();
    s.run(|t| t.notify_weak("t", "r", "nobody:listens")).unwrap();
    assert!(s.pending_notifications(10).unwrap().is_empty());
    drain(&s);
    assert!(s.dead_letters().unwrap().is_empty());
}

/// notify_existing at page boundaries: exactly one and two full pages, rows with several
/// columns, deleted values, row keys with NUL bytes, an end bound.
#[test]
fn notify_existing_pages_exactly() {
    let _no_failpoints = no_failpoints();
    let page = percolator_store::NOTIFY_EXISTING_PAGE;
    for n in [page - 1, page, page + 1, 2 * page] {
        let s = Store::in_memory(StoreConfig::default()).unwrap();
        let mut want = Vec::new();
        s.run(|t| {
            for i in 0..n {
                // Rows "r<i>" and "r<i>\0": the second sorts right after the first.
                let row = format!("r{i:05}").into_bytes();
                t.set("t", &row, "a:x", "other")?;
                t.set("t", &row, "c:v", "v")?;
                t.set("t", &row, "z:y", "other")?;
                let mut nul = row.clone();
                nul.push(0);
                t.set("t", &nul, "c:v", "v")?;
                t.set("t", format!("d{i:05}"), "c:v", "gone")?;
            }
            Ok(())
        })
        .unwrap();
        s.run(|t| {
            for i in 0..n {
                t.delete("t", format!("d{i:05}"), "c:v")?;
            }
            Ok(())
        })
        .unwrap();
        for i in 0..n {
            let row = format!("r{i:05}").into_bytes();
            let mut nul = row.clone();
            nul.push(0);
            want.push(row);
            want.push(nul);
        }
        s.register_observer(spec("o", "c:v", NotifyKind::Strong), rec()).unwrap();
        let got = s.notify_existing("t", "c:v", b"", None).unwrap();
        assert_eq!(got as usize, want.len(), "n = {n}");
        let pending: Vec<Vec<u8>> =
            s.pending_notifications(usize::MAX).unwrap().into_iter().map(|e| e.cell.row).collect();
        want.sort();
        assert_eq!(pending, want, "n = {n}");
        // A bounded range, cut right at a page boundary.
        let end = format!("r{:05}", page / 2);
        let got = s.notify_existing("t", "c:v", b"r", Some(end.as_bytes())).unwrap();
        assert_eq!(got as usize, 2 * (page / 2).min(n), "n = {n}");
    }
}

/// A weak writer that conflicts on its primary had its weak-only row prewritten in the same
/// batch: its roll-back removes its name, and nothing stays pending.
#[test]
fn a_conflicting_weak_writer_s_name_is_settled() {
    let _no_failpoints = no_failpoints();
    let s = test_store(StoreConfig { one_phase_commit: false, ..fast_locks() });
    let obs = rec();
    s.register_observer(spec("w", "w:n", NotifyKind::Weak), obs.clone()).unwrap();
    let mut old = s.begin().unwrap();
    s.run(|t| t.set("t", "a", "c:v", b"1".to_vec())).unwrap();
    old.set("t", "a", "c:v", b"2".to_vec()).unwrap();
    old.notify_weak("t", "hot", "w:n").unwrap();
    assert!(old.commit().is_err());
    assert!(s.pending_notifications(10).unwrap().is_empty(), "{:?}", s.pending_notifications(10).unwrap());
    drain(&s);
    assert_eq!(obs.calls.load(Ordering::SeqCst), 0, "nothing committed, nothing to run");
}

/// Same for an observer that failed on a delete: GC keeps the Delete while the dead letter
/// exists, and the retry (which forgets the ack) sees it.
#[test]
fn failed_dead_letter_of_a_delete_survives_gc() {
    let _no_failpoints = no_failpoints();
    struct FailOnDelete(AtomicU64, AtomicBool);
    impl Observer for FailOnDelete {
        fn observe(&self, t: &mut Transaction, n: &Notification) -> Result<(), ObserveError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            let v = t.get(&n.cell.table, &n.cell.row, &n.cell.column)?;
            if v.is_none() && self.1.load(Ordering::SeqCst) {
                return Err(ObserveError::Failed("cannot handle deletes yet".into()));
            }
            Ok(())
        }
    }
    let s = Store::in_memory(StoreConfig::default()).unwrap();
    let obs = Arc::new(FailOnDelete(AtomicU64::new(0), AtomicBool::new(true)));
    let mut sp = spec("o", "c:v", NotifyKind::Strong);
    sp.max_attempts = 1;
    s.register_observer(sp, obs.clone()).unwrap();
    s.run(|t| t.set("t", "r", "c:v", b"x".to_vec())).unwrap();
    drain(&s);
    s.run(|t| t.delete("t", "r", "c:v")).unwrap();
    drain(&s);
    let dead = s.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    let before = obs.0.load(Ordering::SeqCst);
    s.gc().unwrap();
    obs.1.store(false, Ordering::SeqCst); // the observer is fixed, the dead letter retried
    s.retry_dead_letter(&dead[0].id).unwrap();
    drain(&s);
    assert_eq!(obs.0.load(Ordering::SeqCst), before + 1, "the retried dead letter of a delete never ran");
}

/// Writers that abort at prewrite (conflict) remove their own names: they do not pile up on a
/// hot weak-only row (every SetNotify re-encodes the list).
#[test]
fn aborted_weak_writers_leave_no_names() {
    let _no_failpoints = no_failpoints();
    let s = test_store(StoreConfig { one_phase_commit: false, ..fast_locks() });
    s.register_observer(spec("w", "w:n", NotifyKind::Weak), rec()).unwrap();
    for i in 0..200u32 {
        let mut old = s.begin().unwrap();
        s.run(|t| t.set("t", "a", "c:v", i.to_be_bytes().to_vec())).unwrap();
        old.set("t", "a", "c:v", b"late".to_vec()).unwrap();
        old.notify_weak("t", "hot", "w:n").unwrap();
        assert!(old.commit().is_err());
    }
    assert!(s.pending_notifications(10).unwrap().is_empty(), "{:?}", s.pending_notifications(10).unwrap());
}

#[cfg(feature = "failpoints")]
mod fp {
    use std::time::{Duration, Instant};

    use super::*;
    use fail::FailScenario;

    /// Liveness: a weak hotspot whose writers overlap (each is between the prewrite of the hot
    /// row and its commit while the next one prewrites) always names a live writer; the
    /// observer must still run during the load (each commit notifies), not only after it.
    #[test]
    fn a_weak_hotspot_runs_while_writers_overlap() {
        let scenario = FailScenario::setup();
        let s = test_store(StoreConfig { one_phase_commit: false, ..StoreConfig::default() });
        let obs = rec();
        s.register_observer(spec("w", "w:n", NotifyKind::Weak), obs.clone()).unwrap();
        // Each commit stays 30 ms between the prewrite of the hot (weak-only) row and its commit
        // (a slow disk, a large transaction).
        fail::cfg_callback("after-prewrite-first-secondary", || std::thread::sleep(Duration::from_millis(30))).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..3)
            .map(|i| {
                let (s, stop, commits) = (s.clone(), stop.clone(), commits.clone());
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(10 * i));
                    let mut n = 0u64;
                    while !stop.load(Ordering::SeqCst) {
                        let mut t = s.begin().unwrap();
                        t.set("t", format!("p{i}"), "c:v", n.to_be_bytes().to_vec()).unwrap();
                        t.notify_weak("t", "hot", "w:n").unwrap();
                        if t.commit().is_ok() {
                            commits.fetch_add(1, Ordering::SeqCst);
                        }
                        n += 1;
                    }
                })
            })
            .collect();
        let scanner = s.start_scanner(percolator_store::ScannerConfig::default());
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(1500));
        let runs_during_load = obs.calls.load(Ordering::SeqCst);
        let named = s.pending_notifications(10).unwrap();
        stop.store(true, Ordering::SeqCst);
        for w in writers {
            w.join().unwrap();
        }
        fail::remove("after-prewrite-first-secondary");
        let quiet = s.wait_quiescent(Duration::from_secs(10)).unwrap();
        let runs_after = obs.calls.load(Ordering::SeqCst);
        scanner.stop();
        scenario.teardown();
        eprintln!(
            "{} commits in {:?}; runs during load {runs_during_load}, after {runs_after}; cell then: {:?}",
            commits.load(Ordering::SeqCst),
            t0.elapsed(),
            named.iter().map(|e| e.writers.len()).collect::<Vec<_>>()
        );
        assert!(quiet && runs_after > 0);
        assert!(
            runs_during_load > 0,
            "the weak observer never ran during 1.5 s of load ({} commits)",
            commits.load(Ordering::SeqCst)
        );
    }

    /// A weak writer that dies after its commit point, whose primary's commit record GC then
    /// removes (a newer Put below the safepoint): the scanner decides it "rolled back" (and
    /// writes a rollback record for a committed transaction), drops its name and runs the
    /// observer anyway. Checked: nothing is lost and the cell clears.
    #[test]
    fn committed_weak_writer_whose_commit_record_was_gced() {
        let scenario = FailScenario::setup();
        let s = test_store(StoreConfig { one_phase_commit: false, ..fast_locks() });
        let obs = rec();
        s.register_observer(spec("w", "w:n", NotifyKind::Weak), obs.clone()).unwrap();
        fail::cfg("after-commit-primary", "return").unwrap();
        let mut t = s.begin().unwrap();
        t.set("t", "a", "c:v", b"new".to_vec()).unwrap();
        t.notify_weak("t", "hot", "w:n").unwrap();
        let commit_ts = t.commit().unwrap();
        fail::remove("after-commit-primary");
        s.run(|t| t.set("t", "a", "c:v", b"newer".to_vec())).unwrap();
        s.gc().unwrap();
        let named = s.pending_notifications(10).unwrap();
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].writers.len(), 1);
        drain(&s);
        scenario.teardown();
        assert!(obs.calls.load(Ordering::SeqCst) >= 1);
        assert!(s.pending_notifications(10).unwrap().is_empty());
        assert_eq!(s.begin().unwrap().get("t", "a", "c:v").unwrap(), Some(b"newer".to_vec()));
        let _ = commit_ts;
    }

    /// A weak writer that dies between prewrite and commit point with a live worker: the name
    /// keeps the cell until the lock's TTL, then it is rolled back and the cell clears.
    #[test]
    fn crashed_weak_writer_before_commit_point_is_settled_after_ttl() {
        let scenario = FailScenario::setup();
        let s = test_store(StoreConfig { one_phase_commit: false, ..fast_locks() });
        let obs = rec();
        s.register_observer(spec("w", "w:n", NotifyKind::Weak), obs.clone()).unwrap();
        fail::cfg("before-commit-primary", "return").unwrap();
        let mut t = s.begin().unwrap();
        t.set("t", "a", "c:v", b"new".to_vec()).unwrap();
        t.notify_weak("t", "hot", "w:n").unwrap();
        assert!(t.commit().is_err());
        fail::remove("before-commit-primary");
        drain(&s);
        assert_eq!(s.pending_notifications(10).unwrap().len(), 1, "live writer keeps it");
        std::thread::sleep(Duration::from_millis(300));
        drain(&s);
        scenario.teardown();
        assert!(s.pending_notifications(10).unwrap().is_empty());
        assert_eq!(s.begin().unwrap().get("t", "a", "c:v").unwrap(), None);
    }
}
