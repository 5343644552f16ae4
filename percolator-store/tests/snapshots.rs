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
    let c1 = commit_once(&store, |t| t.set("t", "a", "c:x", "one"));
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

/// A number below `n` (from the clock's nanoseconds: enough spread for timing).
fn rand_below(n: u64) -> u64 {
    u64::from(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()) % n
}

/// Pins made while GC passes run at random moments (the pin's timestamp is not a running
/// transaction's, so only the pin can hold GC at it): a pin that was made is never collected
/// under — reads at it see exactly the value of its snapshot, after later passes — and one
/// that raced a pass past its timestamp is refused with `SnapshotTooOld`. Reads at a snapshot
/// without a pin see their value or fail with `SnapshotTooOld`, never another value.
#[test]
fn pins_and_reads_racing_gc_passes_are_whole_or_refused() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let store = test_store(StoreConfig::default());
    let (stop, passes) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let gc = {
        let (other, stop, passes) = (store.store.clone(), stop.clone(), passes.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                other.gc().unwrap();
                passes.fetch_add(1, Ordering::SeqCst);
                // Passes at random moments, so some pins are made between two of them.
                std::thread::sleep(Duration::from_micros(rand_below(2000)));
            }
        })
    };
    let (mut made, mut refused, mut fenced) = (0, 0, 0);
    for i in 0..200u32 {
        store.run(|t| t.set("t", "a", "c:x", format!("v{i}"))).unwrap();
        let at = store.begin().unwrap().start_ts();
        // Sometimes a pass comes between (the pin is refused), sometimes during the pinning.
        std::thread::sleep(Duration::from_micros(rand_below(1500)));
        let pin = match store.pin_snapshot(Some(at), Duration::from_secs(600)) {
            Ok(pin) => Some(pin),
            Err(Error::SnapshotTooOld { .. }) => None,
            Err(e) => panic!("{e:?}"),
        };
        store.run(|t| t.set("t", "a", "c:x", format!("after{i}"))).unwrap();
        match pin {
            Some(pin) => {
                made += 1;
                // Two more passes (the second started after the write above).
                let seen = passes.load(Ordering::SeqCst);
                while passes.load(Ordering::SeqCst) < seen + 2 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                let got = store.begin_at(at).and_then(|t| t.get("t", "a", "c:x"));
                assert_eq!(got.unwrap(), Some(format!("v{i}").into_bytes()), "pin {} at {at}", pin.id);
                store.unpin(pin.id).unwrap();
            }
            None => {
                refused += 1;
                match store.begin_at(at).and_then(|t| t.get("t", "a", "c:x")) {
                    Ok(v) => assert_eq!(v, Some(format!("v{i}").into_bytes()), "a read at {at}"),
                    Err(Error::SnapshotTooOld { .. }) => fenced += 1,
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    gc.join().unwrap();
    eprintln!(
        "{} GC passes; {made} pins made, {refused} refused; {fenced} unpinned reads fenced",
        passes.load(Ordering::SeqCst)
    );
    assert!(made > 0 && refused > 0, "both outcomes happened");
}

/// Two hosts on one Redis namespace with the oracle service: a pin made on one holds the
/// other's GC; a read at a snapshot on one fails once the other's GC passed it.
#[test]
fn pins_hold_and_fences_reach_across_hosts() {
    if redis_nodes().is_none() || etcd_endpoints().is_none() {
        assert!(std::env::var("PERCOLATOR_REQUIRE_REDIS").is_err(), "PERCOLATOR_REDIS and PERCOLATOR_ETCD are needed");
        return;
    }
    let namespace = unique_namespace();
    let (a, b) = (shared_store(&namespace, StoreConfig::default()), shared_store(&namespace, StoreConfig::default()));
    a.run(|t| t.set("t", "r", "c:v", "old")).unwrap();
    let pin = a.pin_snapshot(None, Duration::from_secs(600)).unwrap();
    let unpinned = a.begin().unwrap().start_ts();
    let reader = a.begin_at(unpinned).unwrap();
    a.run(|t| t.set("t", "r", "c:v", "new")).unwrap();
    assert_eq!(b.pins().unwrap(), vec![pin.clone()], "the pin is in the store");
    // b's GC: held by the pin (a's running transactions publish only with a's heartbeat).
    assert!(b.gc().unwrap().safepoint <= pin.ts);
    assert_eq!(b.begin_at(pin.ts).unwrap().get("t", "r", "c:v").unwrap(), Some(b"old".to_vec()));
    b.unpin(pin.id).unwrap();
    drop(reader);
    a.run(|t| t.set("t", "r", "c:v", "newer")).unwrap();
    // a's heartbeat publishes that nothing of it runs; then a reads at the old snapshot, which
    // nothing but the fence protects from b's GC until a's next heartbeat.
    std::thread::sleep(StoreConfig::default().worker_lease / 3 + Duration::from_millis(500));
    let reader = a.begin_at(unpinned).unwrap();
    let stats = b.gc().unwrap();
    if stats.safepoint > unpinned {
        assert!(stats.versions_removed > 0);
        assert!(matches!(reader.get("t", "r", "c:v"), Err(Error::SnapshotTooOld { .. })));
        assert!(matches!(reader.scan("t", b"", None, None, 10), Err(Error::SnapshotTooOld { .. })));
        assert!(matches!(a.begin_at(unpinned), Err(Error::SnapshotTooOld { .. })));
    } else {
        // a's heartbeat published the reader's snapshot before b's pass: b kept it.
        eprintln!("a's heartbeat came first: the fence was not needed");
        assert_eq!(reader.get("t", "r", "c:v").unwrap(), Some(b"old".to_vec()));
    }
}
