//! Several stores (hosts) on one Redis namespace, in one process: the observed-column registry
//! lives in the store (a writer without bindings notifies another host's observers; a change
//! of bindings reaches every host before it returns), scanners share the notify buckets and
//! take over a dead host's share, a row is run by one host at a time, and a commit on one host
//! wakes another host's scanner.
//!
//! Needs the dev cluster (`PERCOLATOR_REDIS`, `PERCOLATOR_ETCD`); skipped without it unless
//! `PERCOLATOR_REQUIRE_REDIS` is set.

use percolator_testkit as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use percolator_redis::{RedisBigtable, RedisConfig};
use percolator_store::backends::Bigtable;
use percolator_store::{NotifyKind, ObserveError, Observer, ObserverSpec, ScannerConfig, StoreConfig, Transaction};

/// Copies `raw:text` to `derived:copy`, counting its runs.
#[derive(Default)]
struct Copy {
    runs: AtomicU64,
}

impl Observer for Copy {
    fn observe(&self, txn: &mut Transaction, n: &percolator_store::Notification) -> Result<(), ObserveError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let v = txn.get(&n.cell.table, &n.cell.row, "raw:text")?.unwrap_or_default();
        txn.set(&n.cell.table, &n.cell.row, "derived:copy", v)?;
        Ok(())
    }
}

fn copy_spec(name: &str) -> ObserverSpec {
    ObserverSpec {
        name: name.into(),
        table: "docs".into(),
        column: "raw:text".into(),
        kind: NotifyKind::Strong,
        max_attempts: 3,
    }
}

/// Two hosts on a fresh namespace, or `None` without a cluster.
fn two_hosts(config: StoreConfig) -> Option<(TestStore, TestStore)> {
    hosts(config).map(|(a, b, _)| (a, b))
}

/// Two hosts on a fresh namespace and a third handle on it, or `None` without a cluster.
fn hosts(config: StoreConfig) -> Option<(TestStore, TestStore, RedisBigtable)> {
    let nodes = redis_nodes()?;
    etcd_endpoints()?;
    let namespace = unique_namespace();
    let (a, b) = (shared_store(&namespace, config.clone()), shared_store(&namespace, config));
    let probe = RedisBigtable::open(RedisConfig { nodes, namespace, ..RedisConfig::default() }).unwrap();
    Some((a, b, probe))
}

/// Waits up to 60 s for `f`.
fn eventually(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_writer_without_bindings_notifies_another_hosts_observers() {
    let Some((a, b)) = two_hosts(StoreConfig::default()) else { return };
    let copy = Arc::new(Copy::default());
    a.register_observer(copy_spec("copy"), copy.clone()).unwrap();
    // B runs no observer, but its commits set the notify cells of A's binding.
    assert_eq!(b.observers(), vec![copy_spec("copy")]);
    assert!(b.local_observers().is_empty());
    b.run(|t| t.set("docs", "r1", "raw:text", "hello")).unwrap();
    assert_eq!(b.pending_notifications(10).unwrap().len(), 1);
    let scanner = a.start_scanner(ScannerConfig::default());
    eventually("A runs the observer on B's write", || {
        b.begin().unwrap().get("docs", "r1", "derived:copy").unwrap().as_deref() == Some(b"hello")
    });
    assert!(a.wait_quiescent(Duration::from_secs(60)).unwrap());
    scanner.stop();
    assert_eq!(copy.runs.load(Ordering::SeqCst), 1);
}

#[test]
fn a_change_of_bindings_reaches_every_host_before_it_returns() {
    let Some((a, b)) = two_hosts(StoreConfig::default()) else { return };
    let copy = Arc::new(Copy::default());
    a.set_observers(vec![(copy_spec("copy"), copy.clone())]).unwrap();
    // No waiting: B acknowledged before set_observers returned, so its next commit notifies.
    assert_eq!(b.observers(), vec![copy_spec("copy")]);
    b.run(|t| t.set("docs", "r1", "raw:text", "x")).unwrap();
    assert_eq!(b.pending_notifications(10).unwrap().len(), 1);

    // B joins in with the same binding (its own implementation): the store keeps one binding.
    b.register_observer(copy_spec("copy"), Arc::new(Copy::default())).unwrap();
    assert_eq!(a.observers(), vec![copy_spec("copy")]);
    // A configuration reloaded on B replaces the store's bindings, on A too.
    let other = ObserverSpec { column: "raw:other".into(), ..copy_spec("copy") };
    b.set_observers(vec![(other, Arc::new(Copy::default()))]).unwrap();
    assert_eq!(a.observers()[0].column, "raw:other");
    // A removal reaches A too; A's commits stop notifying.
    b.set_observers(vec![]).unwrap();
    assert!(a.observers().is_empty());
    a.run(|t| t.set("docs", "r2", "raw:text", "y")).unwrap();
    a.run(|t| t.set("docs", "r2", "raw:other", "y")).unwrap();
    let pending = a.pending_notifications(10).unwrap();
    assert_eq!(pending.len(), 1, "only r1's notification from before: {pending:?}");
}

/// Records which host ran each row.
struct Recorder {
    host: &'static str,
    runs: Runs,
}

impl Observer for Recorder {
    fn observe(&self, txn: &mut Transaction, n: &percolator_store::Notification) -> Result<(), ObserveError> {
        self.runs.lock().unwrap().push((self.host, n.cell.row.clone()));
        txn.set(&n.cell.table, &n.cell.row, "derived:by", self.host)?;
        Ok(())
    }
}

fn recorder_spec() -> ObserverSpec {
    ObserverSpec { name: "rec".into(), ..copy_spec("rec") }
}

type Runs = Arc<std::sync::Mutex<Vec<(&'static str, Vec<u8>)>>>;

fn bind_recorder(store: &TestStore, host: &'static str, runs: &Runs) {
    store.register_observer(recorder_spec(), Arc::new(Recorder { host, runs: runs.clone() })).unwrap();
}

fn write_rows(store: &TestStore, from: usize, to: usize) {
    for i in from..to {
        store.run(|t| t.set("docs", format!("r{i:03}"), "raw:text", "x")).unwrap();
    }
}

/// Two scanning hosts split the buckets between them (no bucket is run by both, each row once);
/// when one stops scanning, the other takes its share.
#[test]
fn scanners_share_the_buckets_and_take_over_a_share_that_is_left() {
    let Some((a, b, probe)) = hosts(StoreConfig::default()) else { return };
    let runs: Runs = Arc::default();
    bind_recorder(&a, "a", &runs);
    bind_recorder(&b, "b", &runs);
    let scan_a = a.start_scanner(ScannerConfig::default());
    let scan_b = b.start_scanner(ScannerConfig::default());
    // Both shares settle within a refresh.
    std::thread::sleep(percolator_store::SHARE_REFRESH * 2);
    write_rows(&a, 0, 64);
    assert!(a.wait_quiescent(Duration::from_secs(60)).unwrap());
    let got = std::mem::take(&mut *runs.lock().unwrap());
    assert_eq!(got.len(), 64, "each row once: {got:?}");
    let buckets = |host: &str| -> std::collections::BTreeSet<u32> {
        got.iter().filter(|(h, _)| *h == host).map(|(_, row)| probe.bucket_of("docs", row)).collect()
    };
    let (of_a, of_b) = (buckets("a"), buckets("b"));
    assert!(!of_a.is_empty() && !of_b.is_empty(), "both hosts scan: a {of_a:?}, b {of_b:?}");
    assert!(of_a.is_disjoint(&of_b), "a bucket is one host's: a {of_a:?}, b {of_b:?}");

    // B stops scanning: A takes every bucket.
    scan_b.stop();
    std::thread::sleep(percolator_store::SHARE_REFRESH * 2);
    write_rows(&b, 64, 96);
    assert!(a.wait_quiescent(Duration::from_secs(60)).unwrap());
    let got = std::mem::take(&mut *runs.lock().unwrap());
    assert_eq!(got.len(), 32, "{got:?}");
    assert!(got.iter().all(|(h, _)| *h == "a"), "{got:?}");
    scan_a.stop();
}

/// The backend's row lock keeps a scanner off a row another host holds, until it expires.
#[test]
fn a_row_held_by_another_host_waits_for_its_lock() {
    let Some((a, _b, probe)) = hosts(StoreConfig::default()) else { return };
    // The row lock itself: one owner at a time, released only by its owner, expiring.
    let key = b"some row key".to_vec();
    let ttl = Duration::from_millis(800);
    assert!(probe.try_lock_row(&key, 1, ttl).unwrap());
    assert!(!probe.try_lock_row(&key, 2, ttl).unwrap());
    probe.unlock_row(&key, 2).unwrap();
    assert!(!probe.try_lock_row(&key, 2, ttl).unwrap(), "only the owner releases it");
    probe.unlock_row(&key, 1).unwrap();
    assert!(probe.try_lock_row(&key, 2, ttl).unwrap());
    std::thread::sleep(ttl + Duration::from_millis(200));
    assert!(probe.try_lock_row(&key, 3, ttl).unwrap(), "it expires");

    // A scanner meets a row another host holds: it runs the row only after the lock expires.
    let runs: Runs = Arc::default();
    bind_recorder(&a, "a", &runs);
    a.run(|t| t.set("docs", "held", "raw:text", "x")).unwrap();
    // The row key of docs/held as the scanner locks it: enc(table) ‖ enc(row), each component
    // followed by 0x00 0x01 (no zero bytes to escape here).
    let row_key = [&b"docs"[..], &[0, 1], b"held", &[0, 1]].concat();
    let pending = a.pending_notifications(1).unwrap();
    assert_eq!(pending.len(), 1);
    assert!(percolator_store::backends::notify_position(&pending[0].cell).starts_with(&row_key));
    let held = Duration::from_millis(1500);
    assert!(probe.try_lock_row(&row_key, 42, held).unwrap());
    let taken = Instant::now();
    let scanner = a.start_scanner(ScannerConfig::default());
    eventually("the held row runs", || !runs.lock().unwrap().is_empty());
    let waited = taken.elapsed();
    scanner.stop();
    assert!(waited >= held - Duration::from_millis(100), "ran after {waited:?}, while the lock was held");
}

/// A commit on one host wakes another host's idle scanner at once (its own timeout is 30 s).
#[test]
fn a_commit_on_one_host_wakes_another_hosts_scanner() {
    let Some((a, b)) = two_hosts(StoreConfig::default()) else { return };
    let copy = Arc::new(Copy::default());
    a.register_observer(copy_spec("copy"), copy.clone()).unwrap();
    let scanner = a.start_scanner(ScannerConfig { idle_wait: Duration::from_secs(30), ..ScannerConfig::default() });
    // Let it finish its first lap and go to sleep.
    std::thread::sleep(Duration::from_millis(500));
    let written = Instant::now();
    b.run(|t| t.set("docs", "r1", "raw:text", "wake up")).unwrap();
    let deadline = Duration::from_secs(10);
    while copy.runs.load(Ordering::SeqCst) == 0 {
        assert!(written.elapsed() < deadline, "A's scanner was not woken by B's commit");
        std::thread::sleep(Duration::from_millis(5));
    }
    scanner.stop();
}

/// Hosts keep their worker leases in etcd, not in the backend; and a namespace served by the
/// oracle service refuses a store with an oracle of its own (their timestamps would interleave).
#[test]
fn hosts_lease_in_etcd_and_their_namespace_refuses_a_private_oracle() {
    let Some((_a, _b, probe)) = hosts(StoreConfig::default()) else { return };
    assert!(probe.meta_scan("worker/").unwrap().is_empty(), "no lease in the backend's metadata");
    let nodes = redis_nodes().unwrap();
    let backend =
        RedisBigtable::open(RedisConfig { nodes, namespace: probe.namespace().into(), ..RedisConfig::default() })
            .unwrap();
    match percolator_store::Store::with_backend(Arc::new(backend), StoreConfig::default()) {
        Err(percolator_store::Error::InvalidArgument(m)) => assert!(m.contains("oracle service"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| "a store")),
    }
}

/// Hosts add to one total of each counter and of each user's named counts; none overwrites
/// another's.
#[test]
fn hosts_add_to_the_same_totals() {
    let Some((a, b)) = two_hosts(StoreConfig::default()) else { return };
    let before = a.metrics().commits;
    a.run(|t| t.set("docs", "r1", "raw:text", "a")).unwrap();
    b.run(|t| t.set("docs", "r2", "raw:text", "b")).unwrap();
    b.run(|t| t.set("docs", "r3", "raw:text", "b")).unwrap();
    a.persist_metrics().unwrap();
    b.persist_metrics().unwrap();
    a.persist_metrics().unwrap();
    assert_eq!(a.metrics().commits, before + 3, "A's and B's commits, each once");
    a.add_totals("observer/x", &[("runs", 2), ("failures", 1)]).unwrap();
    b.add_totals("observer/x", &[("runs", 5)]).unwrap();
    let totals = b.saved_totals("observer/x").unwrap();
    assert_eq!((totals["runs"], totals["failures"]), (7, 1));
}
