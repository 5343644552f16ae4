//! Snapshots across requests: reads at a named timestamp, refused in the future and below the
//! persisted GC safepoint (also after the read), pins that hold GC and expire.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use percolator_store::backends::{Bigtable, MemBigtable};
use percolator_store::{Error, MAX_PIN_TTL, Store, StoreConfig, Timestamp};

fn text(t: &percolator_store::Transaction, row: &str) -> Option<String> {
    t.get("t", row, "c:x").unwrap().map(|v| String::from_utf8(v).unwrap())
}

#[test]
fn a_read_at_a_past_timestamp_sees_that_snapshot_with_commit_timestamps() {
    let store = test_store(StoreConfig::default());
    let c1 = store.run_ts(|t| t.set("t", "a", "c:x", "one"));
    let at = store.begin().unwrap().start_ts();
    store.run(|t| t.set("t", "a", "c:x", "two")).unwrap();
    store.run(|t| t.set("t", "b", "c:x", "new")).unwrap();

    let mut old = store.begin_at(at).unwrap();
    assert_eq!(old.start_ts(), at);
    assert_eq!(text(&old, "a").as_deref(), Some("one"));
    assert_eq!(text(&old, "b"), None, "a row written after the snapshot is not in it");
    assert_eq!(old.get_timed("t", "a", "c:x").unwrap(), Some((b"one".to_vec(), Some(c1))));
    let scanned = old.scan_timed("t", b"", None, None, 10).unwrap();
    assert_eq!(scanned.len(), 1);
    assert_eq!((scanned[0].entry.value.as_slice(), scanned[0].commit_ts), (&b"one"[..], Some(c1)));
    let e = old.set("t", "a", "c:x", "three").unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");
    assert!(old.notify_weak("t", "a", "c:x").is_err());
    assert_eq!(text(&store.begin().unwrap(), "a").as_deref(), Some("two"));
}

#[test]
fn a_snapshot_in_the_future_or_at_zero_is_refused() {
    let store = test_store(StoreConfig::default());
    let now = store.begin().unwrap().start_ts();
    for ts in [Timestamp::from_raw(now.raw() + 1_000_000), Timestamp::MAX] {
        let e = store.begin_at(ts).err().expect("refused");
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(e.to_string().contains("in the future") && e.to_string().contains("not yet stable"), "{e}");
        assert!(store.pin_snapshot(Some(ts), Duration::from_secs(60)).is_err());
    }
    assert!(matches!(store.begin_at(Timestamp::ZERO), Err(Error::InvalidArgument(_))));
    // Its own current timestamp is a stable snapshot.
    assert!(store.begin_at(now).is_ok());
}

#[test]
fn a_read_below_the_safepoint_after_gc_is_refused() {
    let store = test_store(StoreConfig::default());
    store.run(|t| t.set("t", "a", "c:x", "one")).unwrap();
    let at = store.begin().unwrap().start_ts();
    store.run(|t| t.set("t", "a", "c:x", "two")).unwrap();
    assert_eq!(store.persisted_safepoint().unwrap(), Timestamp::ZERO, "no GC ran yet");
    let stats = store.gc().unwrap();
    assert!(stats.safepoint > at);
    assert_eq!(store.persisted_safepoint().unwrap(), stats.safepoint, "GC persisted its safepoint");
    let e = store.begin_at(at).err().expect("refused");
    match &e {
        Error::SnapshotTooOld { ts, safepoint } => assert_eq!((*ts, *safepoint), (at, stats.safepoint)),
        other => panic!("{other:?}"),
    }
    let m = e.to_string();
    assert!(m.contains("below the GC safepoint") && m.contains("percolator snapshot --ttl"), "{m}");
    // At or above the safepoint is fine.
    assert_eq!(text(&store.begin_at(stats.safepoint).unwrap(), "a").as_deref(), Some("two"));
}

#[test]
fn a_pinned_snapshot_survives_gc_and_reads_the_old_values() {
    let store = test_store(StoreConfig::default());
    store.run(|t| t.set("t", "a", "c:x", "one")).unwrap();
    let pin = store.pin_snapshot(None, Duration::from_secs(600)).unwrap();
    assert!(!pin.expired());
    assert_eq!(store.pins().unwrap(), vec![pin.clone()]);
    for v in ["two", "three"] {
        store.run(|t| t.set("t", "a", "c:x", v)).unwrap();
    }
    let stats = store.gc().unwrap();
    assert_eq!(stats.safepoint, pin.ts, "the pin holds the safepoint");
    assert!(store.persisted_safepoint().unwrap() <= pin.ts);
    assert_eq!(text(&store.begin_at(pin.ts).unwrap(), "a").as_deref(), Some("one"));

    // Renewed, it still holds; released, GC passes it and the snapshot is refused.
    let renewed = store.renew_pin(pin.id, Duration::from_secs(1200)).unwrap();
    assert!(renewed.expires > pin.expires && renewed.ts == pin.ts);
    assert_eq!(store.unpin(pin.id).unwrap().id, pin.id);
    assert!(store.pins().unwrap().is_empty());
    assert!(store.gc().unwrap().safepoint > pin.ts);
    assert!(matches!(store.begin_at(pin.ts), Err(Error::SnapshotTooOld { .. })));
}

#[test]
fn a_pin_at_an_older_timestamp_and_an_expired_pin() {
    let store = test_store(StoreConfig::default());
    store.run(|t| t.set("t", "a", "c:x", "one")).unwrap();
    let at = store.begin().unwrap().start_ts();
    store.run(|t| t.set("t", "a", "c:x", "two")).unwrap();
    let pin = store.pin_snapshot(Some(at), Duration::from_millis(200)).unwrap();
    assert_eq!(pin.ts, at);
    assert_eq!(store.gc().unwrap().safepoint, at);
    assert_eq!(text(&store.begin_at(at).unwrap(), "a").as_deref(), Some("one"));

    std::thread::sleep(Duration::from_millis(300));
    assert!(store.pins().unwrap()[0].expired());
    let e = store.renew_pin(pin.id, Duration::from_secs(60)).unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");
    // An expired pin does not hold GC, and the pass removes it.
    assert!(store.gc().unwrap().safepoint > at);
    assert!(store.pins().unwrap().is_empty());
    assert!(matches!(store.begin_at(at), Err(Error::SnapshotTooOld { .. })));
    assert!(matches!(store.pin_snapshot(Some(at), Duration::from_secs(60)), Err(Error::SnapshotTooOld { .. })));
}

#[test]
fn bad_pin_requests_are_refused() {
    let store = test_store(StoreConfig::default());
    for ttl in [Duration::ZERO, MAX_PIN_TTL + Duration::from_secs(1)] {
        let e = store.pin_snapshot(None, ttl).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
    assert!(store.pins().unwrap().is_empty(), "a refused pin leaves nothing");
    assert!(matches!(store.renew_pin(42, Duration::from_secs(1)), Err(Error::NotFound(_))));
    assert!(matches!(store.unpin(42), Err(Error::NotFound(_))));
    let pin = store.pin_snapshot(None, Duration::from_secs(60)).unwrap();
    assert!(matches!(store.renew_pin(pin.id, Duration::ZERO), Err(Error::InvalidArgument(_))));
    store.unpin(pin.id).unwrap();
    assert!(matches!(store.unpin(pin.id), Err(Error::NotFound(_))));
}

/// The post-read fence: a transaction at an explicit snapshot is registered in its own store,
/// but another store's GC (another host's) does not see it; once that GC persisted a safepoint
/// above the snapshot, the transaction's next read fails instead of returning what is left.
#[test]
fn a_read_after_another_stores_gc_passed_its_snapshot_fails() {
    let backend: Arc<dyn Bigtable> = Arc::new(MemBigtable::new());
    let store = Store::with_backend(backend.clone(), StoreConfig::default()).unwrap();
    for v in ["one", "two"] {
        store.run(|t| t.set("t", "a", "c:x", v)).unwrap();
    }
    let at = store.begin().unwrap().start_ts();
    store.run(|t| t.set("t", "a", "c:x", "three")).unwrap();
    store.run(|t| t.set("t", "b", "c:x", "three")).unwrap();
    let reader = store.begin_at(at).unwrap();
    assert_eq!(text(&reader, "a").as_deref(), Some("two"));

    // Another store over the same backend (standing for another host) collects.
    let other = Store::with_backend(backend, StoreConfig::default()).unwrap();
    let stats = other.gc().unwrap();
    assert!(stats.safepoint > at && stats.versions_removed > 0);
    let e = reader.get("t", "a", "c:x").unwrap_err();
    assert!(matches!(e, Error::SnapshotTooOld { .. }), "{e:?}");
    assert!(matches!(reader.scan("t", b"", None, None, 10), Err(Error::SnapshotTooOld { .. })));
}

trait RunTs {
    fn run_ts(&self, body: impl FnMut(&mut percolator_store::Transaction) -> percolator_store::Result<()>)
    -> Timestamp;
}

impl RunTs for Store {
    /// Runs `body` once and returns its commit timestamp.
    fn run_ts(
        &self,
        mut body: impl FnMut(&mut percolator_store::Transaction) -> percolator_store::Result<()>,
    ) -> Timestamp {
        let mut t = self.begin().unwrap();
        body(&mut t).unwrap();
        t.commit().unwrap()
    }
}
