//! Garbage collection keeps what some reader can see and removes the rest.

mod common;

use common::*;
use percolator_store::StoreConfig;
use percolator_store::backends::{WriteKind, decode_value};

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
            WriteKind::Put(v) => u64::from_be_bytes(decode_value(v).unwrap().try_into().unwrap()),
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

/// Offline compaction gives the pages of collected versions back to the file system: a store
/// that held 30 versions of 300 rows shrinks once GC and compaction ran, and every row still
/// reads its newest value (large values are stored compressed; these are not compressible, so
/// the file's size is the versions'). A held store and a missing file are refused.
#[test]
fn compaction_after_gc_shrinks_the_file_and_keeps_every_value() {
    let dir = TempDir::new("gc-compact");
    let path = dir.file("store.redb");
    let value = |row: u64, round: u64| -> Vec<u8> {
        // Incompressible bytes, different per row and round.
        let mut x = (row << 32 | round) ^ 0x9E37_79B9_7F4A_7C15;
        (0..2048)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let (rows, rounds) = (300u64, 30u64);
    {
        let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::Fsync);
        for round in 0..rounds {
            store
                .run(|t| {
                    for r in 0..rows {
                        t.set("t", format!("r{r:04}"), "c:v", value(r, round))?;
                    }
                    Ok(())
                })
                .unwrap();
        }
        store.run(|t| t.set("t", "small", "c:v", "kept")).unwrap();
        // Open: compaction is refused and changes nothing.
        let refused = percolator_store::Store::compact(&path);
        assert!(matches!(refused, Err(percolator_store::Error::AlreadyOpen { .. })), "{refused:?}");
    }
    let grown = std::fs::metadata(&path).unwrap().len();
    assert!(grown > rows * rounds * 2048, "{grown} bytes for {} written", rows * rounds * 2048);
    let c = percolator_store::Store::compact(&path).unwrap();
    assert_eq!(c.bytes_before, grown);
    assert_eq!(c.gc.versions_removed, rows * (rounds - 1));
    let after = std::fs::metadata(&path).unwrap().len();
    assert_eq!(c.bytes_after, after);
    // What is left: one version of each row, 600 KB; redb's pages and tree around it.
    assert!(after < grown / 10, "{grown} bytes before, {after} after");
    assert!(after >= rows * 2048);
    let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::Fsync);
    let t = store.begin().unwrap();
    for r in 0..rows {
        assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(value(r, rounds - 1)), "row {r}");
    }
    assert_eq!(t.get("t", "small", "c:v").unwrap(), Some(b"kept".to_vec()));
    drop(t);
    drop(store);
    // A second compaction finds nothing more to give back.
    let again = percolator_store::Store::compact(&path).unwrap();
    assert_eq!(again.gc.versions_removed, 0);
    assert!(again.bytes_after <= after, "{again:?}");
    let missing = percolator_store::Store::compact(dir.file("nowhere.redb"));
    assert!(matches!(missing, Err(percolator_store::Error::NotFound(_))), "{missing:?}");
    assert!(!dir.file("nowhere.redb").exists(), "a missing store is not created");
    std::fs::write(dir.file("empty.redb"), b"").unwrap();
    let empty = percolator_store::Store::compact(dir.file("empty.redb"));
    assert!(matches!(empty, Err(percolator_store::Error::InvalidArgument(_))), "{empty:?}");
    assert_eq!(std::fs::metadata(dir.file("empty.redb")).unwrap().len(), 0, "an empty file is not made a store");
}
