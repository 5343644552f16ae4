//! Notifications: observer chains reach a fixed point, racing runs commit once, writes
//! collapse into one run, failing observers land in dead letters, weak notifications, and a
//! scanner that meets backend errors counts them and carries on.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::*;
use percolator_store::backends::{Bigtable, MemBigtable, Mutation};
use percolator_store::{
    CellRef, Error, NotifyKind, ObserveError, Observer, ObserverSpec, ScannerConfig, Store, StoreConfig, Timestamp,
    Transaction,
};

/// An observer built from a closure, counting its invocations.
struct FnObserver<F> {
    f: F,
    calls: AtomicU64,
}

impl<F> Observer for FnObserver<F>
where
    F: Fn(&mut Transaction, &percolator_store::Notification) -> Result<(), ObserveError> + Send + Sync + 'static,
{
    fn observe(&self, txn: &mut Transaction, n: &percolator_store::Notification) -> Result<(), ObserveError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        (self.f)(txn, n)
    }
}

fn observer<F>(f: F) -> Arc<FnObserver<F>>
where
    F: Fn(&mut Transaction, &percolator_store::Notification) -> Result<(), ObserveError> + Send + Sync + 'static,
{
    Arc::new(FnObserver { f, calls: AtomicU64::new(0) })
}

fn spec(name: &str, table: &str, column: &str, kind: NotifyKind) -> ObserverSpec {
    ObserverSpec { name: name.into(), table: table.into(), column: column.into(), kind, max_attempts: 3 }
}

// An upper bound, not a timing check: debug builds on the Redis backend under a parallel test
// run are slow.
const QUIET: Duration = Duration::from_secs(120);

fn chain(store: Store) {
    // A: raw:content -> parsed:len ; B: parsed:len -> parsed:double
    let a = observer(|t, n| {
        let v = t.get(&n.cell.table, &n.cell.row, "raw:content")?.unwrap_or_default();
        t.set(&n.cell.table, &n.cell.row, "parsed:len", (v.len() as u64).to_be_bytes())?;
        Ok(())
    });
    let b = observer(|t, n| {
        let len = u64::from_be_bytes(t.get(&n.cell.table, &n.cell.row, "parsed:len")?.unwrap().try_into().unwrap());
        t.set(&n.cell.table, &n.cell.row, "parsed:double", (2 * len).to_be_bytes())?;
        Ok(())
    });
    store.register_observer(spec("a", "docs", "raw:content", NotifyKind::Strong), a.clone()).unwrap();
    store.register_observer(spec("b", "docs", "parsed:len", NotifyKind::Strong), b.clone()).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 3, ..ScannerConfig::default() });
    for i in 0..20u64 {
        store.run(|t| t.set("docs", format!("d{i:02}"), "raw:content", vec![b'x'; i as usize])).unwrap();
    }
    assert!(store.wait_quiescent(QUIET).unwrap(), "pipeline reaches a fixed point");
    let check = |extra: u64| {
        let t = store.begin().unwrap();
        for i in 0..20u64 {
            let want = if i % 2 == 0 { i + extra } else { i };
            assert_eq!(get_u64(&t, "docs", &format!("d{i:02}"), "parsed:double").unwrap(), 2 * want, "doc {i}");
        }
    };
    check(0);
    // Incremental update: change the even documents only.
    for i in (0..20u64).step_by(2) {
        store.run(|t| t.set("docs", format!("d{i:02}"), "raw:content", vec![b'y'; i as usize + 5])).unwrap();
    }
    assert!(store.wait_quiescent(QUIET).unwrap());
    check(5);
    scanner.stop();
    assert_eq!(store.metrics().observer_failures, 0);
    // Each run of A or B commits once per change it saw; nothing ran more than the changes.
    assert!(a.calls.load(Ordering::SeqCst) <= 30 + 10, "A ran {} times", a.calls.load(Ordering::SeqCst));
}

#[test]
fn observer_chain_reaches_fixed_point() {
    chain(test_store(StoreConfig::default()).store);
}

#[test]
fn observer_chain_reaches_fixed_point_redb() {
    let dir = TempDir::new("chain");
    chain(redb_store(&dir, StoreConfig::default()).store);
}

/// The bindings live in the store: a store opened later without observers of its own (a
/// loader, the CLI) still sets the notify cells of observed columns and leaves them pending for
/// a process that runs the observer (no dead letter); that process runs them when it is back.
#[test]
fn bindings_live_in_the_store_so_every_writer_notifies() {
    let dir = TempDir::new("registry");
    let upper_spec = spec("upper", "docs", "raw:text", NotifyKind::Strong);
    {
        let host = redb_store(&dir, StoreConfig::default());
        host.register_observer(upper_spec.clone(), observer(|_, _| Ok(()))).unwrap();
    }
    {
        let loader = redb_store(&dir, StoreConfig::default());
        assert_eq!(loader.observers(), vec![upper_spec.clone()]);
        assert!(loader.local_observers().is_empty());
        loader.run(|t| t.set("docs", "r1", "raw:text", "hello")).unwrap();
        loader.run(|t| t.set("docs", "r1", "raw:other", "unobserved")).unwrap();
        let pending = loader.pending_notifications(10).unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].cell.column, "raw:text");
        // Its scanner cannot run `upper`: the notification stays for a process that can.
        let scanner = loader.start_scanner(ScannerConfig::default());
        std::thread::sleep(Duration::from_millis(300));
        scanner.stop();
        assert_eq!(loader.pending_notifications(10).unwrap().len(), 1);
        assert!(loader.dead_letters().unwrap().is_empty());
        // The same name bound differently is refused: the store's binding stands.
        let other = ObserverSpec { column: "raw:other".into(), ..upper_spec.clone() };
        let e = loader.register_observer(other, observer(|_, _| Ok(()))).unwrap_err();
        assert!(e.to_string().contains("binds that name differently"), "{e}");
    }
    let host = redb_store(&dir, StoreConfig::default());
    let upper = observer(|t, n| {
        let v = t.get(&n.cell.table, &n.cell.row, "raw:text")?.unwrap_or_default();
        t.set(&n.cell.table, &n.cell.row, "derived:upper", v.to_ascii_uppercase())?;
        Ok(())
    });
    host.set_observers(vec![(upper_spec.clone(), upper.clone())]).unwrap();
    assert_eq!(host.local_observers(), vec!["upper".to_string()]);
    let scanner = host.start_scanner(ScannerConfig::default());
    assert!(host.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    assert_eq!(upper.calls.load(Ordering::SeqCst), 1);
    assert_eq!(host.begin().unwrap().get("docs", "r1", "derived:upper").unwrap(), Some(b"HELLO".to_vec()));
    // Unbound, it is gone from the store too: a writer no longer notifies.
    host.set_observers(vec![]).unwrap();
    drop(host);
    let loader = redb_store(&dir, StoreConfig::default());
    assert!(loader.observers().is_empty());
    loader.run(|t| t.set("docs", "r2", "raw:text", "bye")).unwrap();
    assert!(loader.pending_notifications(10).unwrap().is_empty());
}

#[test]
fn racing_runs_on_one_row_commit_once() {
    let store = test_store(StoreConfig::default());
    let barrier = Arc::new(Barrier::new(2));
    let bar = barrier.clone();
    let obs = observer(move |t, n| {
        let runs = get_u64(t, "c", std::str::from_utf8(&n.cell.row).unwrap(), "out:runs")?;
        // Both runs have read; now both try to commit.
        bar.wait();
        set_u64(t, "c", std::str::from_utf8(&n.cell.row).unwrap(), "out:runs", runs + 1)?;
        Ok(())
    });
    store.register_observer(spec("count", "c", "in:x", NotifyKind::Strong), obs.clone()).unwrap();
    store.run(|t| t.set("c", "r1", "in:x", "v")).unwrap();
    let pending = store.pending_notifications(10).unwrap();
    assert_eq!(pending.len(), 1);
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (store, entry) = (store.clone(), pending[0].clone());
            std::thread::spawn(move || store.process_notification(&entry).unwrap())
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(obs.calls.load(Ordering::SeqCst), 2, "both scanners ran the observer");
    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "c", "r1", "out:runs").unwrap(), 1, "exactly one run committed");
    drop(t);
    // Whatever is left pending is satisfied by the committed run: the next pass only skips.
    for e in store.pending_notifications(10).unwrap() {
        store.process_notification(&e).unwrap();
    }
    assert!(store.pending_notifications(10).unwrap().is_empty());
    assert_eq!(obs.calls.load(Ordering::SeqCst), 2, "no third run");
}

#[test]
fn ten_writes_collapse_into_one_run() {
    let store = test_store(StoreConfig::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    let obs = observer(move |t, n| {
        s.lock().unwrap().push(t.get(&n.cell.table, &n.cell.row, &n.cell.column)?.unwrap());
        Ok(())
    });
    store.register_observer(spec("o", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    for i in 0..10u8 {
        store.run(|t| t.set("t", "row", "in:v", vec![i])).unwrap();
    }
    let pending = store.pending_notifications(10).unwrap();
    assert_eq!(pending.len(), 1, "one notify cell for ten writes");
    store.process_notification(&pending[0]).unwrap();
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    assert_eq!(*seen.lock().unwrap(), vec![vec![9u8]], "the run sees the newest value");
    assert!(store.pending_notifications(10).unwrap().is_empty());
    // A later write triggers exactly one more run.
    store.run(|t| t.set("t", "row", "in:v", vec![10])).unwrap();
    let pending = store.pending_notifications(10).unwrap();
    store.process_notification(&pending[0]).unwrap();
    assert_eq!(obs.calls.load(Ordering::SeqCst), 2);
    assert_eq!(store.metrics().observer_runs, 2);
}

#[test]
fn failing_observer_lands_in_dead_letters_and_can_be_retried() {
    let store = test_store(StoreConfig::default());
    let failing = observer(|_, _| Err(ObserveError::Failed("boom: the observer trapped".into())));
    store.register_observer(spec("fragile", "t", "in:v", NotifyKind::Strong), failing.clone()).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, ..ScannerConfig::default() });
    store.run(|t| t.set("t", "row1", "in:v", "payload")).unwrap();
    assert!(store.wait_quiescent(QUIET).unwrap(), "a dead-lettered notification stops being pending");
    let dead = store.dead_letters().unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].attempts, 3);
    assert_eq!(dead[0].observer, "fragile");
    assert_eq!(dead[0].cell.row, b"row1");
    assert!(dead[0].error.contains("boom"), "{}", dead[0].error);
    assert_eq!(failing.calls.load(Ordering::SeqCst), 3, "exactly max_attempts runs");
    // Nothing the failing runs wrote is visible.
    assert_eq!(store.begin().unwrap().scan("t", b"", None, None, 100).unwrap().len(), 1);

    // Fix the observer (hot swap) and retry the dead letter.
    let fixed = observer(|t, n| {
        t.set(&n.cell.table, &n.cell.row, "out:v", "done")?;
        Ok(())
    });
    store.replace_observer("fragile", fixed.clone()).unwrap();
    store.retry_dead_letter(&dead[0].id).unwrap();
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert!(store.dead_letters().unwrap().is_empty());
    assert_eq!(fixed.calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.begin().unwrap().get("t", "row1", "out:v").unwrap(), Some(b"done".to_vec()));
    assert!(matches!(store.retry_dead_letter(&dead[0].id), Err(Error::NotFound(_))));
    scanner.stop();
}

#[test]
fn a_notification_whose_binding_went_away_is_kept_as_a_dead_letter() {
    let store = test_store(StoreConfig::default());
    let upper = || {
        observer(|t, n| {
            let v = t.get(&n.cell.table, &n.cell.row, "raw:text")?.unwrap_or_default();
            t.set(&n.cell.table, &n.cell.row, "derived:upper", v.to_ascii_uppercase())?;
            Ok(())
        })
    };
    store.register_observer(spec("upper", "docs", "raw:text", NotifyKind::Strong), upper()).unwrap();
    // Written while bound (no scanner yet): pending. Then the binding is removed.
    store.run(|t| t.set("docs", "r1", "raw:text", "hello")).unwrap();
    store.unregister_observer("upper").unwrap();
    let scanner = store.start_scanner(ScannerConfig::default());
    assert!(store.wait_quiescent(QUIET).unwrap(), "an unbound notification does not stay pending");
    let dead = store.dead_letters().unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].observer, percolator_store::UNBOUND);
    assert_eq!((dead[0].cell.row.as_slice(), dead[0].cell.column.as_str()), (&b"r1"[..], "raw:text"));
    assert_eq!(dead[0].attempts, 0);
    assert!(dead[0].error.starts_with("no observer is bound to docs/raw:text"), "{}", dead[0].error);
    assert_eq!(store.metrics().dead_letters, 1);

    // Bound again, the retried notification runs it: the change is processed after all.
    let again = upper();
    store.register_observer(spec("upper", "docs", "raw:text", NotifyKind::Strong), again.clone()).unwrap();
    store.retry_dead_letter(&dead[0].id).unwrap();
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert_eq!(again.calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.begin().unwrap().get("docs", "r1", "derived:upper").unwrap(), Some(b"HELLO".to_vec()));
    assert!(store.dead_letters().unwrap().is_empty());
    scanner.stop();
}

#[test]
fn notify_existing_runs_a_new_binding_on_old_data_once() {
    let store = test_store(StoreConfig::default());
    let rows = percolator_store::NOTIFY_EXISTING_PAGE as u64 * 2 + 7;
    // Written before any binding: no notifications.
    store
        .run(|t| {
            for i in 0..rows {
                t.set("docs", format!("r{i:05}"), "raw:text", "x")?;
            }
            t.set("docs", "other", "raw:else", "not this column")
        })
        .unwrap();
    let err = store.notify_existing("docs", "raw:text", b"", None).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m == "no observer is bound to docs/raw:text"), "{err}");

    let upper = observer(|t, n| {
        let v = t.get(&n.cell.table, &n.cell.row, "raw:text")?.unwrap_or_default();
        t.set(&n.cell.table, &n.cell.row, "derived:upper", v.to_ascii_uppercase())?;
        Ok(())
    });
    store.register_observer(spec("upper", "docs", "raw:text", NotifyKind::Strong), upper.clone()).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, ..ScannerConfig::default() });
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert_eq!(upper.calls.load(Ordering::SeqCst), 0, "binding does not replay old writes");

    // A range first, then everything: each row runs once (the ack skips processed rows).
    assert_eq!(store.notify_existing("docs", "raw:text", b"r00010", Some(b"r00020")).unwrap(), 10);
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert_eq!(upper.calls.load(Ordering::SeqCst), 10);
    assert_eq!(store.notify_existing("docs", "raw:text", b"", None).unwrap(), rows);
    assert!(store.wait_quiescent(QUIET).unwrap());
    let done = store.begin().unwrap().scan("docs", b"", None, Some(&["derived:upper"]), 10_000).unwrap();
    assert_eq!(done.len() as u64, rows);
    assert!(done.iter().all(|e| e.value == b"X"));
    assert_eq!(upper.calls.load(Ordering::SeqCst), rows, "one run per row");
    assert_eq!(store.begin().unwrap().get("docs", "other", "derived:upper").unwrap(), None);
    // Notifying again runs nothing (every row is acknowledged); a rerun runs each row again.
    assert_eq!(store.notify_existing("docs", "raw:text", b"r00010", Some(b"r00015")).unwrap(), 5);
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert_eq!(upper.calls.load(Ordering::SeqCst), rows, "acknowledged rows are skipped");
    assert_eq!(store.rerun_existing("docs", "raw:text", b"r00010", Some(b"r00015")).unwrap(), 5);
    assert!(store.wait_quiescent(QUIET).unwrap());
    assert_eq!(upper.calls.load(Ordering::SeqCst), rows + 5, "a rerun ignores the acks");
    scanner.stop();
}

#[test]
fn failed_runs_back_off_doubling() {
    let backoff = Duration::from_millis(200);
    let store = test_store(StoreConfig { observer_backoff: backoff, ..StoreConfig::default() });
    let times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = times.clone();
    let failing = observer(move |_, _| {
        seen.lock().unwrap().push(std::time::Instant::now());
        Err(ObserveError::Failed("always".into()))
    });
    store.register_observer(spec("fails", "t", "in:v", NotifyKind::Strong), failing).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, ..ScannerConfig::default() });
    store.run(|t| t.set("t", "row", "in:v", "x")).unwrap();
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    let times = times.lock().unwrap();
    assert_eq!(times.len(), 3, "max_attempts runs");
    // Attempt 2 waits the backoff, attempt 3 twice that.
    assert!(times[1] - times[0] >= backoff, "{:?}", times[1] - times[0]);
    assert!(times[2] - times[1] >= backoff * 2, "{:?}", times[2] - times[1]);
    assert_eq!(store.dead_letters().unwrap().len(), 1);
}

#[test]
fn weak_notifications_count_words_without_conflicts() {
    let store = test_store(StoreConfig::default());
    // Documents record per-document counts in the word's row and weakly notify it; the observer
    // sums the row. Writers never touch the same cell, so they never conflict.
    let sum = observer(|t, n| {
        let cells = t.scan(&n.cell.table, &n.cell.row, Some(&[n.cell.row.as_slice(), &[0]].concat()), None, 10_000)?;
        let total: u64 = cells
            .iter()
            .filter(|e| e.column.starts_with("occ:"))
            .map(|e| u64::from_be_bytes(e.value.clone().try_into().unwrap()))
            .sum();
        t.set(&n.cell.table, &n.cell.row, "wc:total", total.to_be_bytes())?;
        Ok(())
    });
    store.register_observer(spec("wordcount", "words", "wc:notify", NotifyKind::Weak), sum.clone()).unwrap();
    let err = store.begin().unwrap().set("words", "the", "wc:notify", "x").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "weak columns cannot be written: {err}");

    let scanner = store.start_scanner(ScannerConfig::default());
    let docs = ["the cat the hat", "the dog", "a cat and the bat", "the the the"];
    let threads: Vec<_> = docs
        .iter()
        .enumerate()
        .map(|(d, text)| {
            let store = store.clone();
            let text = text.to_string();
            std::thread::spawn(move || {
                store
                    .run(|t| {
                        let mut counts = std::collections::BTreeMap::new();
                        for w in text.split(' ') {
                            *counts.entry(w).or_insert(0u64) += 1;
                        }
                        for (w, c) in counts {
                            t.set("words", w, &format!("occ:doc{d}"), c.to_be_bytes())?;
                            t.notify_weak("words", w, "wc:notify")?;
                        }
                        Ok(())
                    })
                    .unwrap()
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    let t = store.begin().unwrap();
    for (w, want) in [("the", 7), ("cat", 2), ("dog", 1), ("a", 1), ("bat", 1), ("hat", 1), ("and", 1)] {
        assert_eq!(get_u64(&t, "words", w, "wc:total").unwrap(), want, "word {w}");
    }
    assert_eq!(store.metrics().conflicts, 0, "weak notifications never conflict");
}

#[test]
fn observer_registration_errors_are_clear() {
    let store = test_store(StoreConfig::default());
    let o = observer(|_, _| Ok(()));
    store.register_observer(spec("x", "t", "c:a", NotifyKind::Strong), o.clone()).unwrap();
    let dup = store.register_observer(spec("x", "t", "c:b", NotifyKind::Strong), o.clone()).unwrap_err();
    assert!(dup.to_string().contains("already registered"), "{dup}");
    let mixed = store.register_observer(spec("y", "t", "c:a", NotifyKind::Weak), o.clone()).unwrap_err();
    assert!(mixed.to_string().contains("already bound"), "{mixed}");
    let bad = store.register_observer(spec("bad name!", "t", "c:c", NotifyKind::Strong), o).unwrap_err();
    assert!(matches!(bad, Error::InvalidArgument(_)));
    assert!(matches!(store.unregister_observer("nope"), Err(Error::NotFound(_))));
}

#[test]
fn idle_scanner_wakes_on_commit_not_on_timeout() {
    let store = test_store(StoreConfig::default());
    let obs = observer(|t, n| {
        t.set(&n.cell.table, &n.cell.row, "out:v", "seen")?;
        Ok(())
    });
    store.register_observer(spec("o", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    // An idle wait far longer than the test: only the commit signal can wake the scanner.
    let scanner = store.start_scanner(ScannerConfig {
        threads: 1,
        idle_wait: Duration::from_secs(600),
        ..ScannerConfig::default()
    });
    std::thread::sleep(Duration::from_millis(100));
    store.run(|t| t.set("t", "r", "in:v", "x")).unwrap();
    assert!(store.wait_quiescent(Duration::from_secs(10)).unwrap(), "woken by the commit");
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    scanner.stop();
}

#[test]
fn scanners_meeting_a_busy_row_teleport() {
    let store = test_store(StoreConfig::default());
    let slow = observer(|_, _| {
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    });
    store.register_observer(spec("slow", "t", "in:v", NotifyKind::Strong), slow.clone()).unwrap();
    store.run(|t| t.set("t", "hot", "in:v", "x")).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 4, ..ScannerConfig::default() });
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    assert_eq!(slow.calls.load(Ordering::SeqCst), 1, "the advisory row lock kept the others out");
    assert!(store.metrics().teleports > 0, "threads that met the held row teleported");
}

/// A run that commits in one step clears its notification in the same backend call as its
/// commit (`docs/design.md`, "Notifications"), not in a call of its own.
#[test]
fn a_run_clears_its_notification_in_its_commit_round() {
    let flaky = Arc::new(Flaky::default());
    let store = TestStore::new(flaky.clone(), StoreConfig::default());
    let obs = observer(|t, n| {
        t.set("t", n.cell.row.clone(), "out:v", "y")?;
        Ok(())
    });
    store.register_observer(spec("o", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    store.run(|t| t.set("t", "r", "in:v", "x")).unwrap();
    for e in store.pending_notifications(10).unwrap() {
        store.process_notification(&e).unwrap();
    }
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    assert!(store.pending_notifications(10).unwrap().is_empty(), "cleared");
    assert_eq!(flaky.clears_with_commit.load(Ordering::SeqCst), 1, "the clear rode with the commit");
    assert_eq!(flaky.clears_alone.load(Ordering::SeqCst), 0);
    // A run that writes nothing (the same observer, skipping) clears in a call of its own.
    let quiet = observer(|_, _| Ok(()));
    store.register_observer(spec("q", "t", "in:w", NotifyKind::Weak), quiet.clone()).unwrap();
    store.run(|t| t.notify_weak("t", "r", "in:w")).unwrap();
    for e in store.pending_notifications(10).unwrap() {
        store.process_notification(&e).unwrap();
    }
    assert_eq!(quiet.calls.load(Ordering::SeqCst), 1);
    assert!(store.pending_notifications(10).unwrap().is_empty(), "cleared");
    assert_eq!(flaky.clears_alone.load(Ordering::SeqCst), 1);
}

/// A run whose commit loses to a conflict leaves its notification pending: the clear that
/// rides with the commit is applied only if the commit applied. (Were the two independent ops
/// of one call, the clear would apply and the change would never be processed.)
#[test]
fn a_run_that_loses_its_commit_leaves_the_notification_pending() {
    let flaky = Arc::new(Flaky::default());
    let store = TestStore::new(flaky.clone(), StoreConfig::default());
    let writer = store.clone();
    let obs = observer(move |t, n| {
        t.set("t", n.cell.row.clone(), "out:v", "from the run")?;
        if n.attempt == 1 {
            // Another transaction writes the same cell after this run started: its commit
            // must lose.
            writer.run(|w| w.set("t", "r", "out:v", "from elsewhere")).map_err(ObserveError::Store)?;
        }
        Ok(())
    });
    store.register_observer(spec("o", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    store.run(|t| t.set("t", "r", "in:v", "x")).unwrap();
    let entries = store.pending_notifications(10).unwrap();
    assert_eq!(entries.len(), 1);
    store.process_notification(&entries[0]).unwrap();
    assert_eq!(obs.calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.metrics().observer_conflicts, 1, "the run lost");
    assert_eq!(flaky.clears_with_commit.load(Ordering::SeqCst), 1, "the clear was handed to the commit");
    assert_eq!(store.pending_notifications(10).unwrap().len(), 1, "still pending: the change is not lost");
    let read = store.begin().unwrap().get("t", b"r", "out:v").unwrap();
    assert_eq!(read.as_deref(), Some(&b"from elsewhere"[..]));
}

/// Waits up to 10 s for `f`.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The scanner swallows nothing silently: each error it can only retry is logged and counted
/// (`scanner_errors`), and the notification is processed once the backend works again.
#[test]
fn scanner_counts_the_errors_it_retries_and_carries_on() {
    let flaky = Arc::new(Flaky::default());
    let store = TestStore::new(flaky.clone(), StoreConfig::default());
    let obs = observer(|_, _| Ok(()));
    store.register_observer(spec("o", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    store.run(|t| t.set("t", "r", "in:v", "x")).unwrap();

    flaky.fail_scans.store(true, Ordering::SeqCst);
    let scanner =
        store.start_scanner(ScannerConfig { threads: 1, idle_wait: Duration::from_millis(5), ..Default::default() });
    eventually("failed reads of the notify group", || store.metrics().scanner_errors >= 2);
    assert_eq!(obs.calls.load(Ordering::SeqCst), 0, "nothing was read, nothing ran");

    // Reads work again; clearing the processed cell fails.
    let before = store.metrics().scanner_errors;
    flaky.fail_clears.store(true, Ordering::SeqCst);
    flaky.fail_scans.store(false, Ordering::SeqCst);
    eventually("failed clears", || store.metrics().scanner_errors >= before + 2);
    assert_eq!(store.pending_notifications(10).unwrap().len(), 1, "a cell whose clear failed stays pending");

    flaky.fail_clears.store(false, Ordering::SeqCst);
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.notifications_cleared), (1, 0, 1));
}

/// A run that meets a store out of reach (`Error::Unavailable`: a Redis master down, a lapsed
/// lease) is not the observer's failure: it counts no attempt and goes to no dead letter, is
/// counted apart (`observer_store_failures`), and runs again until the store is back.
#[test]
fn a_run_that_meets_an_unavailable_store_is_no_failure_of_the_observer() {
    let flaky = Arc::new(Flaky::default());
    let store = TestStore::new(flaky.clone(), StoreConfig::default());
    let obs = observer(|t, n| {
        t.set("t", n.cell.row.clone(), "out:v", "done")?;
        Ok(())
    });
    // One attempt: a run counted as failed would become a dead letter at once.
    let once = ObserverSpec { max_attempts: 1, ..spec("o", "t", "in:v", NotifyKind::Strong) };
    store.register_observer(once, obs.clone()).unwrap();
    store.run(|t| t.set("t", "r", "in:v", "x")).unwrap();

    flaky.unavailable.store(true, Ordering::SeqCst);
    let scanner =
        store.start_scanner(ScannerConfig { threads: 1, idle_wait: Duration::from_millis(5), ..Default::default() });
    // Two runs at least: the first one was not the last.
    eventually("runs that meet the unavailable store", || store.metrics().observer_store_failures >= 2);
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.dead_letters), (0, 0, 0), "{m:?}");
    assert!(store.dead_letters().unwrap().is_empty());
    assert_eq!(store.pending_notifications(10).unwrap().len(), 1, "the change is still pending");

    flaky.unavailable.store(false, Ordering::SeqCst);
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    assert_eq!(store.begin().unwrap().get("t", "r", "out:v").unwrap().as_deref(), Some(&b"done"[..]));
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.dead_letters), (1, 0, 0), "{m:?}");
    assert_eq!(store.run_outcomes()["o"].failed, 0, "not the observer's failure");
}

/// The textbook counter: one observer run per event reads a shared count, adds one and writes
/// it, so concurrent runs on different events conflict on the one counter cell. Every event is
/// counted exactly once; the store tells committed runs from runs lost to a conflict (which are
/// retried after a backoff, never failures), narrows the observer's window of runs in flight so
/// that few runs are lost, and names the counter as the hot cell.
#[test]
fn a_hot_counter_counts_each_run_by_its_outcome_and_shows_as_a_hot_row() {
    const EVENTS: u64 = 60;
    let store = test_store(StoreConfig::default());
    let obs = observer(|t, _| {
        let n = get_u64(t, "stats", "license-1", "count:n")?;
        // Widen the race: the other workers read the same count meanwhile.
        std::thread::sleep(Duration::from_millis(2));
        set_u64(t, "stats", "license-1", "count:n", n + 1)?;
        Ok(())
    });
    store.register_observer(spec("count", "events", "in:license", NotifyKind::Strong), obs.clone()).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, workers: 8, ..ScannerConfig::default() });
    for i in 0..EVENTS {
        store.run(|t| t.set("events", format!("e{i:03}"), "in:license", "license-1")).unwrap();
    }
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "stats", "license-1", "count:n").unwrap(), EVENTS, "every event counted once");
    drop(t);
    let o = store.run_outcomes()["count"];
    assert_eq!(o.committed, EVENTS, "{o:?}");
    assert!(o.lost_to_conflict > 0, "eight workers on one counter conflict: {o:?}");
    // The observer's window comes down to about one run at a time: without it, each commit
    // lost about four runs (with the backoff alone) to six (without).
    assert!(o.lost_to_conflict < 2 * EVENTS, "{o:?}");
    assert_eq!(o.failed, 0, "a conflict is no failure: {o:?}");
    assert_eq!(o.runs(), o.committed + o.lost_to_conflict + o.failed);
    assert_eq!(o.runs(), obs.calls.load(Ordering::SeqCst), "every call of the observer is one outcome: {o:?}");
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_conflicts, m.observer_failures), (EVENTS, o.lost_to_conflict, 0));
    assert!(store.dead_letters().unwrap().is_empty());
    let hot = store.hot_rows(Duration::from_secs(300), 5);
    assert!(!hot.is_empty());
    assert_eq!(hot[0].cell, CellRef::new("stats", "license-1", "count:n"), "{hot:?}");
    assert_eq!(hot.iter().map(|h| h.conflicts).sum::<u64>(), o.lost_to_conflict, "{hot:?}");
    assert_eq!(hot[0].observers[0].0, "count");
}

/// A workload without conflicts has no hot rows, and its skips are no runs.
#[test]
fn without_conflicts_no_row_is_hot() {
    let store = test_store(StoreConfig::default());
    let obs = observer(|t, n| {
        let row = n.cell.row.clone();
        Ok(t.set(&n.cell.table, row, "out:v", "x")?)
    });
    store.register_observer(spec("copy", "t", "in:v", NotifyKind::Strong), obs.clone()).unwrap();
    let scanner = store.start_scanner(ScannerConfig::default());
    for i in 0..20 {
        store.run(|t| t.set("t", format!("r{i}"), "in:v", "v")).unwrap();
    }
    assert!(store.wait_quiescent(QUIET).unwrap());
    scanner.stop();
    let o = store.run_outcomes()["copy"];
    assert_eq!((o.committed, o.lost_to_conflict, o.failed), (20, 0, 0), "{o:?}");
    assert!(store.hot_rows(Duration::from_secs(600), 10).is_empty());
}

/// A transaction names itself in its weak notifications only at prewrite, so only a two-phase
/// commit drops the names again: a one-phase commit (and one with weak notifications only)
/// writes none and drops none — a `DropNotifyWriter` per weak notification, all no-ops, was
/// 8 % of the web index's mutations. Either way the notification is pending at the commit
/// timestamp with no writer named, and its observer runs (at least once: weak runs may repeat).
#[test]
fn only_a_two_phase_commit_drops_the_writer_names_of_its_weak_notifications() {
    use percolator_store::backends::{ApplyHook, Observed, RowMutation};
    #[derive(Default)]
    struct Drops(AtomicU64);
    impl ApplyHook for Drops {
        type Note = u64;
        fn note(&self, m: &RowMutation) -> Option<u64> {
            let n = m.mutations.iter().filter(|x| matches!(x, Mutation::DropNotifyWriter { .. })).count() as u64;
            (n > 0).then_some(n)
        }
        fn applied(&self, notes: Vec<u64>) {
            self.0.fetch_add(notes.iter().sum(), Ordering::Relaxed);
        }
    }
    for (one_phase_commit, weak_only, drops) in [(true, false, 0), (true, true, 0), (false, false, 2), (false, true, 0)]
    {
        let backend = Arc::new(Observed::new(Arc::new(MemBigtable::new()), Drops::default()));
        let config = StoreConfig { one_phase_commit, ..StoreConfig::default() };
        let store = Store::with_backend(backend.clone(), config).unwrap();
        let runs = Arc::new(AtomicU64::new(0));
        let counted = runs.clone();
        let o = observer(move |_, n| {
            assert!(n.commit_ts.is_none(), "a weak notification");
            counted.fetch_add(1, Ordering::Relaxed);
            Ok(())
        });
        store.register_observer(spec("w", "t", "w:n", NotifyKind::Weak), o).unwrap();
        store
            .run(|t| {
                if !weak_only {
                    t.set("t", "a", "c:x", "1")?;
                }
                t.notify_weak("t", "a", "w:n")?;
                t.notify_weak("t", "b", "w:n")
            })
            .unwrap();
        let what = format!("one_phase_commit {one_phase_commit}, weak only {weak_only}");
        // A two-phase commit's secondaries commit after `run` returns: wait for them.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while backend.scan_notify(None, 10).unwrap().iter().any(|e| !e.writers.is_empty()) {
            assert!(std::time::Instant::now() < deadline, "{what}: writers still named");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(backend.hook().0.load(Ordering::Relaxed), drops, "{what}");
        let pending = backend.scan_notify(None, 10).unwrap();
        assert_eq!(pending.len(), 2, "{what}");
        assert!(pending.iter().all(|e| e.writers.is_empty() && e.ts > Timestamp::ZERO), "{what}: {pending:?}");
        let scanner = store.start_scanner(ScannerConfig::default());
        assert!(store.wait_quiescent(QUIET).unwrap());
        scanner.stop();
        // Each ran (weak runs may repeat: two scanner threads can take one cell), and both
        // notifications were cleared.
        assert!(runs.load(Ordering::Relaxed) >= 2, "{what}: {} runs", runs.load(Ordering::Relaxed));
        assert!(backend.scan_notify(None, 10).unwrap().is_empty(), "{what}");
    }
}
