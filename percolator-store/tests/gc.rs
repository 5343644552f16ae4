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
