//! Several stores (hosts) on one Redis namespace, in one process: the observed-column registry
//! lives in the store (a writer without bindings notifies another host's observers; a change
//! of bindings reaches every host before it returns), scanners share the notify buckets and
//! take over a dead host's share, a row is run by one host at a time, and a commit on one host
//! wakes another host's scanner.
//!
//! Needs the dev cluster (`PERCOLATOR_REDIS`, `PERCOLATOR_ETCD`); skipped without it unless
//! `PERCOLATOR_REQUIRE_REDIS` is set.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
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
    redis_nodes()?;
    etcd_endpoints()?;
    let namespace = unique_namespace();
    Some((shared_store(&namespace, config.clone()), shared_store(&namespace, config)))
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
