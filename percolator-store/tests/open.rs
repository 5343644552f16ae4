//! Opening a store: a file is refused while it is open, and the counters' totals carry over to
//! the next open.

mod common;

use std::sync::Arc;

use common::{TempDir, TestStore};
use percolator_store::backends::{Bigtable, MemBigtable, Op};
use percolator_store::{Durability, Error, RedbConfig, Store, StoreConfig};

fn open(path: &std::path::Path) -> percolator_store::Result<Store> {
    Store::open(path, StoreConfig::default(), RedbConfig { durability: Durability::None, ..RedbConfig::default() })
}

/// redb locks the file while it is open, for other handles of this process too: a second open
/// is refused with the variant a caller branches on, and succeeds once the first is closed.
#[test]
fn a_file_already_open_is_refused_with_already_open() {
    let dir = TempDir::new("already-open");
    let path = dir.file("store.redb");
    let first = open(&path).unwrap();
    first.run(|t| t.set("t", "r", "c:v", "kept")).unwrap();
    match open(&path) {
        Err(Error::AlreadyOpen { path: p }) => assert_eq!(p, path),
        Err(e) => panic!("expected AlreadyOpen, got {e:?}"),
        Ok(_) => panic!("a second open of an open file succeeded"),
    }
    let e = open(&path).err().unwrap();
    assert!(e.to_string().contains(&path.display().to_string()), "the message names the file: {e}");
    drop(first);
    let again = open(&path).unwrap();
    assert_eq!(again.begin().unwrap().get("t", "r", "c:v").unwrap(), Some(b"kept".to_vec()));
}

/// The protocol's counters are totals over the store's life: a clean close saves them, the next
/// open continues from them, and `persist_metrics` saves them without closing. The backend's
/// counters start again at each open.
#[test]
fn counter_totals_continue_after_a_reopen() {
    let dir = TempDir::new("totals");
    let path = dir.file("store.redb");
    let first = open(&path).unwrap();
    for i in 0..3u64 {
        first.run(|t| t.set("t", format!("r{i}"), "c:v", "x")).unwrap();
    }
    let closed = first.metrics();
    assert_eq!((closed.commits, closed.one_pc_commits), (3, 3));
    drop(first);

    let second = TestStore::open(&path, StoreConfig::default(), Durability::None);
    let reopened = second.metrics();
    assert_eq!((reopened.commits, reopened.one_pc_commits), (3, 3), "the totals continue");
    assert!(reopened.backend_ops < closed.backend_ops, "backend counters start again: {reopened:?}");
    second.run(|t| t.set("t", "a", "c:v", "x").and_then(|()| t.set("t", "b", "c:v", "x"))).unwrap();
    assert_eq!(second.metrics().commits, 4);
    second.persist_metrics().unwrap();
    let saved =
        |name: &str| second.backend.meta_get(&format!("metrics/{name}")).unwrap().map(|v| v.try_into().unwrap());
    assert_eq!(saved("commits").map(u64::from_le_bytes), Some(4), "saved without closing");
    assert_eq!(saved("one_pc_commits").map(u64::from_le_bytes), Some(4), "two rows: one-phase too");
    assert_eq!(saved("backend_ops"), None, "backend counters are not saved");
}

/// An in-memory backend keeps the totals too, for as long as it lives.
#[test]
fn counter_totals_live_in_a_memory_backend() {
    let backend: Arc<dyn Bigtable> = Arc::new(MemBigtable::new());
    let first = Store::with_backend(backend.clone(), StoreConfig::default()).unwrap();
    first.run(|t| t.set("t", "r", "c:v", "x")).unwrap();
    first.persist_metrics().unwrap();
    first.run(|t| t.set("t", "r", "c:v", "y")).unwrap();
    drop(first);
    let second = Store::with_backend(backend, StoreConfig::default()).unwrap();
    assert_eq!(second.metrics().commits, 2, "the close saved what came after the explicit save");
}

/// A saved total that does not decode is reported, not silently reset; a counter this version
/// does not know (a newer version's) is left alone.
#[test]
fn saved_totals_are_checked_at_open() {
    let put = |key: &str, value: &[u8]| Op::MetaPut { key: key.into(), value: value.to_vec() };
    let backend: Arc<dyn Bigtable> = Arc::new(MemBigtable::new());
    backend.apply(vec![put("metrics/commits", &7u64.to_le_bytes()), put("metrics/from_the_future", b"?")]).unwrap();
    let store = Store::with_backend(backend.clone(), StoreConfig::default()).unwrap();
    assert_eq!(store.metrics().commits, 7);
    drop(store);
    assert_eq!(backend.meta_get("metrics/from_the_future").unwrap(), Some(b"?".to_vec()));

    backend.apply(vec![put("metrics/commits", b"bad")]).unwrap();
    match Store::with_backend(backend, StoreConfig::default()) {
        Err(Error::Corrupt(m)) => assert!(m.contains("metrics/commits"), "{m}"),
        other => panic!("expected Corrupt, got {:?}", other.map(|_| "a store")),
    }
}
