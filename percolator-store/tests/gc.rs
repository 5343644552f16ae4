//! Garbage collection keeps what some reader can see and removes the rest.

mod common;

use common::*;
use percolator_store::StoreConfig;
use percolator_store::backends::WriteKind;

#[test]
fn gc_keeps_pinned_snapshot_and_newest_version() {
    let dir = TempDir::new("gc");
    let store = redb_store(&dir, StoreConfig::default());
    for v in 1..=5u64 {
        store.run(|t| set_u64(t, "t", "r", "c:x", v)).unwrap();
    }
    store.run(|t| t.set("t", "gone", "c:x", "soon deleted")).unwrap();
    store.run(|t| t.delete("t", "gone", "c:x")).unwrap();
    // A running transaction pins its snapshot: version 5 must survive for it.
    let pinned = store.begin().unwrap();
    for v in 6..=8u64 {
        store.run(|t| set_u64(t, "t", "r", "c:x", v)).unwrap();
    }
    let stats = store.gc().unwrap();
    assert_eq!(stats.safepoint, pinned.start_ts());
    // Versions 1-4 and the deleted cell's put and delete are gone; 5 (visible at the safepoint)
    // and 6-8 (above it) stay.
    assert_eq!(stats.versions_removed, 4 + 2);
    assert_eq!(get_u64(&pinned, "t", "r", "c:x").unwrap(), 5, "the pinned snapshot still reads its version");
    drop(pinned);
    let versions = store.backend.scan_versions(None, 100).unwrap();
    let r = versions.iter().find(|r| r.row == b"r").unwrap();
    let kept: Vec<u64> = r.cells[0]
        .writes
        .iter()
        .map(|(_, w)| match &w.kind {
            WriteKind::Put(v) => u64::from_be_bytes(v.clone().try_into().unwrap()),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kept, vec![8, 7, 6, 5]);
    assert!(versions.iter().all(|r| r.row != b"gone"), "a deleted cell leaves nothing behind");

    // With nothing pinned, everything but the newest version goes.
    let stats = store.gc().unwrap();
    assert_eq!(stats.versions_removed, 3);
    assert_eq!(get_u64(&store.begin().unwrap(), "t", "r", "c:x").unwrap(), 8);
    assert_eq!(store.gc().unwrap().versions_removed, 0, "GC is idempotent");
}

/// With continuous GC the old versions of rewritten rows are collected as the store runs, and
/// redb reuses the pages they occupied: rewriting the same 200 rows of 4 KB values 30 times
/// (24 MB written) leaves a file the size of a few rounds, not of all of them. Without the GC
/// thread the waits for collected versions time out, and the file holds every round.
#[test]
fn continuous_gc_collects_as_it_goes_and_the_file_stops_growing() {
    let dir = TempDir::new("gc-continuous");
    let path = dir.file("store.redb");
    let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::Fsync);
    let _gc = store.start_gc(std::time::Duration::from_millis(20));
    let (rows, rounds) = (200u64, 30u64);
    let mut sizes = Vec::new();
    for round in 0..rounds {
        store
            .run(|t| {
                for i in 0..rows {
                    t.set("t", format!("r{i:04}"), "c:v", vec![round as u8; 4096])?;
                }
                Ok(())
            })
            .unwrap();
        // Every earlier round's versions are below the safepoint: wait for a pass to take them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while store.metrics().gc_versions_removed < rows * round {
            assert!(std::time::Instant::now() < deadline, "round {round}: {:?}", store.metrics());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        sizes.push(std::fs::metadata(&path).unwrap().len());
    }
    let written = rows * rounds * 4096;
    let last = *sizes.last().unwrap();
    assert!(last < written / 4, "the file holds {last} bytes of {written} written: {sizes:?}");
    assert!(last <= sizes[9] * 2, "the file keeps growing after round 10: {sizes:?}");
    let t = store.begin().unwrap();
    assert_eq!(t.get("t", "r0000", "c:v").unwrap(), Some(vec![(rounds - 1) as u8; 4096]));
}
