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
    let value = |row: u64, round: u64| noise(row << 32 | round, 2048);
    let (rows, rounds) = (300u64, 30u64);
    {
        let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::Fsync);
        write_rounds(&store, rows, rounds, value);
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

/// A small deterministic generator (xorshift64*), so a failure repeats.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[test]
fn an_incremental_pass_visits_only_written_rows_and_leaves_a_full_pass_nothing() {
    let dir = TempDir::new("gc-incremental");
    let store = redb_store(&dir, StoreConfig::default());
    let rows = 400u64;
    // What every cell holds, to check no pass removed a visible version.
    let mut model: std::collections::BTreeMap<(u64, &str), Option<u64>> = Default::default();
    store
        .run(|t| {
            for r in 0..rows {
                set_u64(t, "t", &format!("r{r:04}"), "c:a", r)?;
            }
            Ok(())
        })
        .unwrap();
    for r in 0..rows {
        model.insert((r, "c:a"), Some(r));
    }
    // The store was new when it opened: its first pass is incremental, and visits only what
    // the store held then (its format marker's row); the rows written since, once with puts,
    // hold nothing to collect.
    let first = store.gc_incremental().unwrap();
    assert!(!first.full && first.rows <= 1, "{first:?}");

    let mut rng = Rng(0x5eed);
    let mut left_for_later = 0;
    for round in 0..8u64 {
        // A few rows written, deleted and rewritten, some in multi-row transactions, some
        // conflicting with each other (the loser rolls back what it prewrote).
        let mut written = std::collections::BTreeSet::new();
        // Half the rounds with a reader that started halfway through their writes and still
        // runs during the pass: rows written before and after it are due, and the pass must
        // leave what is above its safepoint for a later one.
        let mut pin = None;
        for i in 0..20 {
            if round % 2 == 1 && i == 10 {
                pin = Some(store.begin().unwrap());
            }
            let picks: Vec<(u64, &str, Option<u64>)> = (0..1 + rng.below(3))
                .map(|_| {
                    let col = if rng.below(2) == 0 { "c:a" } else { "c:b" };
                    let value = (rng.below(4) != 0).then(|| rng.below(1000));
                    (rng.below(rows), col, value)
                })
                .collect();
            let mut loser = store.begin().unwrap();
            let clash = rng.below(3) == 0;
            store
                .run(|t| {
                    for (r, col, value) in &picks {
                        match value {
                            Some(v) => set_u64(t, "t", &format!("r{r:04}"), col, *v)?,
                            None => t.delete("t", format!("r{r:04}"), col)?,
                        }
                    }
                    Ok(())
                })
                .unwrap();
            if clash {
                // Writes a cell the committed transaction wrote after it started: it loses.
                let (r, col, _) = picks[0];
                set_u64(&mut loser, "t", &format!("r{r:04}"), col, 7).unwrap();
                assert!(loser.commit().is_err());
            }
            for (r, col, value) in picks {
                model.insert((r, col), value);
                written.insert(r);
            }
        }
        let stats = store.gc_incremental().unwrap();
        assert!(!stats.full, "round {round}: {stats:?}");
        // It read the rows written this round (all of them due, unless a reader older than
        // their writes runs) and those an earlier pass left for it; never the whole table.
        let (lo, hi) = match &pin {
            None => (written.len() as u64, (written.len() + left_for_later) as u64 + 5),
            Some(_) => (0, written.len() as u64 + 5),
        };
        assert!((lo..=hi).contains(&stats.rows), "round {round}: {} rows written, {stats:?}", written.len());
        left_for_later = if pin.is_some() { written.len() } else { 0 };
        drop(pin);
    }
    // Nothing runs: one more incremental pass takes what the pins held back; then a full pass
    // (nothing written in between) finds nothing left to remove.
    store.gc_incremental().unwrap();
    let full = store.gc().unwrap();
    assert!(full.full);
    assert_eq!(full.versions_removed, 0, "an incremental pass left collectable versions: {full:?}");
    let t = store.begin().unwrap();
    for ((r, col), value) in &model {
        let got = t.get("t", format!("r{r:04}"), col).unwrap().map(|v| u64::from_be_bytes(v.try_into().unwrap()));
        assert_eq!(got, *value, "r{r:04} {col}");
    }
}

/// Rows written once with `Put`s hold nothing to collect: once the filter of rows knows the
/// store (a full pass read it, or the store was new at its open), an incremental pass does not
/// visit them; a second write to one makes it due, and the version it replaced is removed
/// (`docs/design.md`, "GC", rows written once).
#[test]
fn rows_written_once_are_not_visited_until_written_again() {
    let dir = TempDir::new("gc-written-once");
    let store = redb_store(&dir, StoreConfig::default());
    store.run(|t| set_u64(t, "t", "r000", "c:a", 0)).unwrap();
    assert!(!store.gc_incremental().unwrap().full, "a new store's first pass is incremental");
    store.run(|t| (1..=100).try_for_each(|r| set_u64(t, "t", &format!("r{r:03}"), "c:a", r))).unwrap();
    let pass = store.gc_incremental().unwrap();
    assert!(!pass.full && pass.rows == 0, "new rows written once: {pass:?}");
    // Eleven of them written again: r000, r010, …, r100.
    store
        .run(|t| (0..=100).step_by(10).try_for_each(|r| set_u64(t, "t", &format!("r{r:03}"), "c:a", r + 1000)))
        .unwrap();
    let pass = store.gc_incremental().unwrap();
    assert!(!pass.full && pass.rows == 11 && pass.versions_removed == 11, "{pass:?}");
    let full = store.gc().unwrap();
    assert_eq!(full.versions_removed, 0, "an incremental pass left collectable versions: {full:?}");
    let t = store.begin().unwrap();
    for r in 0..=100u64 {
        let want = if r % 10 == 0 { r + 1000 } else { r };
        assert_eq!(get_u64(&t, "t", &format!("r{r:03}"), "c:a").unwrap(), want);
    }
}

/// A store opened over rows nobody recorded (a crashed writer's lock among them): if it holds
/// a few rows, its first pass is incremental and visits them all; if it holds more than one
/// scan reads at the open, its first pass is full. Either way the lock is resolved.
#[test]
fn a_store_opened_over_a_crashed_writers_lock_resolves_it_in_its_first_pass() {
    for many in [false, true] {
        a_store_opened_over_a_crashed_writers_lock(many);
    }
}

fn a_store_opened_over_a_crashed_writers_lock(many: bool) {
    use percolator_store::backends::{LockRecord, Mutation, Op, RowMutation};
    use percolator_store::{CellRef, Durability};
    let dir = TempDir::new(if many { "gc-incremental-open-many" } else { "gc-incremental-open" });
    let path = dir.file("store.redb");
    let abandoned = {
        let store = TestStore::open(&path, StoreConfig::default(), Durability::None);
        store.run(|t| set_u64(t, "t", "r", "c:x", 1)).unwrap();
        if many {
            store.run(|t| (0..300).try_for_each(|i| set_u64(t, "u", &format!("r{i:03}"), "c:x", i))).unwrap();
        }
        // A writer that died after its prewrite: a lock and staged data nobody recorded.
        let start = store.begin().unwrap().start_ts();
        let lock = LockRecord { primary: CellRef::new("t", "r", "c:x"), wall_ms: 0, ttl_ms: 0, worker: 0 };
        let m = RowMutation {
            table: "t".into(),
            row: b"r".to_vec(),
            conditions: vec![],
            mutations: vec![
                Mutation::PutLock { column: "c:x".into(), start_ts: start, lock },
                Mutation::PutData { column: "c:x".into(), start_ts: start, value: vec![0; 8] },
            ],
        };
        store.backend.apply(vec![Op::Row(m)]).unwrap();
        start
    };
    let store = TestStore::open(&path, StoreConfig::default(), Durability::None);
    let first = store.gc_incremental().unwrap();
    assert!(first.full == many && first.locks_resolved == 1, "{first:?}");
    let versions = store.backend.scan_versions(None, 10).unwrap();
    assert!(versions[0].cells[0].locks.is_empty(), "the lock at {abandoned:?} was resolved");
    assert_eq!(get_u64(&store.begin().unwrap(), "t", "r", "c:x").unwrap(), 1);
    assert!(!store.gc_incremental().unwrap().full, "then passes are incremental");
}

/// What GC reads of the rows due (`row_versions_without_values`, one read view, keys decoded
/// only where a row or a column starts) is what a version scan of those rows gives, with the
/// values of write records left out: on redb and in memory, for rows with several columns and
/// versions, deletes, rollback records, a lock and staged data, rows holding 0x00 bytes, and rows
/// that have no versions at all.
#[test]
fn gc_reads_the_versions_of_due_rows_as_a_version_scan_does_without_values() {
    use percolator_store::CellRef;
    use percolator_store::backends::{LockRecord, MemBigtable, Mutation, Op, RowMutation, RowVersions, WriteRecord};
    let dir = TempDir::new("gc-row-versions");
    let stores = [
        redb_store(&dir, StoreConfig::default()),
        TestStore::new(std::sync::Arc::new(MemBigtable::new()), StoreConfig::default()),
    ];
    for store in &stores {
        let rows: Vec<Vec<u8>> =
            vec![b"a".to_vec(), b"a\0".to_vec(), b"\0b\0\0".to_vec(), b"c".to_vec(), vec![0xff; 40]];
        for round in 0..4u8 {
            store
                .run(|t| {
                    for (i, r) in rows.iter().enumerate() {
                        if (i + round as usize) % 3 == 2 {
                            t.delete("t", r.clone(), "c:x")?;
                        } else {
                            t.set("t", r.clone(), "c:x", vec![round; 300 * (i + 1)])?;
                        }
                        t.set("t", r.clone(), "c:y", vec![round])?;
                    }
                    t.set("u", b"a", "c:x", vec![round])?;
                    Ok(())
                })
                .unwrap();
        }
        // A rolled-back transaction's record, and one left prewritten (a lock and staged data).
        let start = store.begin().unwrap().start_ts();
        let rollback = WriteRecord { start_ts: start, kind: WriteKind::Rollback };
        let m = RowMutation {
            table: "t".into(),
            row: b"c".to_vec(),
            conditions: vec![],
            mutations: vec![Mutation::PutWrite { column: "c:x".into(), commit_ts: start, write: rollback }],
        };
        store.backend.apply(vec![Op::Row(m)]).unwrap();
        let lock = LockRecord { primary: CellRef::new("t", rows[1].clone(), "c:z"), wall_ms: 0, ttl_ms: 0, worker: 0 };
        let prewrite = |row: &Vec<u8>| {
            Op::Row(RowMutation {
                table: "t".into(),
                row: row.clone(),
                conditions: vec![],
                mutations: vec![
                    Mutation::PutLock { column: "c:z".into(), start_ts: start, lock: lock.clone() },
                    Mutation::PutData { column: "c:z".into(), start_ts: start, value: b"staged".to_vec() },
                ],
            })
        };
        store.backend.apply(vec![prewrite(&rows[1]), prewrite(&rows[2])]).unwrap();

        let wanted: Vec<(String, Vec<u8>)> = vec![
            ("t".into(), rows[3].clone()),
            ("t".into(), b"missing".to_vec()),
            ("t".into(), rows[1].clone()),
            ("u".into(), b"a".to_vec()),
            ("t".into(), rows[4].clone()),
            ("t".into(), rows[2].clone()),
            ("t".into(), rows[0].clone()),
            ("v".into(), b"a".to_vec()),
        ];
        let all = store.backend.scan_versions(None, usize::MAX).unwrap();
        let expected: Vec<RowVersions> = wanted
            .iter()
            .filter_map(|(t, r)| all.iter().find(|v| &v.table == t && &v.row == r).cloned())
            .map(|mut v| {
                for (_, w) in v.cells.iter_mut().flat_map(|c| c.writes.iter_mut()) {
                    if let WriteKind::Put(value) = &mut w.kind {
                        value.clear();
                    }
                }
                v
            })
            .collect();
        assert_eq!(expected.len(), 6);
        // The scan itself, against what was written: each row's columns, with their versions.
        for v in &expected {
            let columns: Vec<(&str, usize)> = v.cells.iter().map(|c| (c.column.as_str(), c.writes.len())).collect();
            let staged = v.table == "t" && (v.row == rows[1] || v.row == rows[2]);
            let want: Vec<(&str, usize)> = match (v.table.as_str(), staged) {
                ("u", _) => vec![("c:x", 4)],
                (_, false) if v.row == b"c" => vec![("c:x", 5), ("c:y", 4)],
                (_, false) => vec![("c:x", 4), ("c:y", 4)],
                (_, true) => vec![("c:x", 4), ("c:y", 4), ("c:z", 0)],
            };
            assert_eq!(columns, want, "{:?}/{:?}", v.table, v.row);
        }
        assert!(expected.iter().any(|v| v.cells.iter().any(|c| !c.locks.is_empty() && !c.data.is_empty())));
        assert!(
            expected
                .iter()
                .any(|v| v.cells.iter().any(|c| c.writes.iter().any(|(_, w)| w.kind == WriteKind::Rollback)))
        );
        assert_eq!(store.backend.row_versions_without_values(&wanted).unwrap(), expected);
    }
}

/// An incremental pass that resolves a lock reads the rows again for its removals: pass 2 sees
/// the commit record pass 1 rolled forward, and removes the version it replaced in the same pass
/// (a pass that kept pass 1's reads would see the lock still there and keep the old version).
#[test]
fn an_incremental_pass_removes_what_the_lock_it_rolled_forward_replaced() {
    use percolator_store::CellRef;
    use percolator_store::backends::{LockRecord, Mutation, Op, RowMutation, WriteRecord, encode_value};
    let dir = TempDir::new("gc-incremental-roll-forward");
    let store = redb_store(&dir, StoreConfig::default());
    // Written twice, so that the row is due at the next pass: the lock below is put in behind
    // the store's back (a writer of this process would have recorded it), and a row written
    // once with puts only is not recorded.
    store.run(|t| set_u64(t, "t", "r", "c:x", 0)).unwrap();
    store.run(|t| set_u64(t, "t", "r", "c:x", 1)).unwrap();
    // A writer that died after committing its primary (t/p c:y) and before its secondary
    // (t/r c:x): the secondary's lock and staged value are left, below the next safepoint.
    let start = store.begin().unwrap().start_ts();
    let commit = store.begin().unwrap().start_ts();
    let lock = LockRecord { primary: CellRef::new("t", "p", "c:y"), wall_ms: 0, ttl_ms: 0, worker: 0 };
    let row = |row: &str, mutations| {
        Op::Row(RowMutation { table: "t".into(), row: row.into(), conditions: vec![], mutations })
    };
    let two = encode_value(&2u64.to_be_bytes());
    let put = || WriteRecord { start_ts: start, kind: WriteKind::Put(two.clone()) };
    store
        .backend
        .apply(vec![
            row("p", vec![Mutation::PutWrite { column: "c:y".into(), commit_ts: commit, write: put() }]),
            row(
                "r",
                vec![
                    Mutation::PutLock { column: "c:x".into(), start_ts: start, lock },
                    Mutation::PutData { column: "c:x".into(), start_ts: start, value: two.clone() },
                ],
            ),
        ])
        .unwrap();
    let pass = store.gc_incremental().unwrap();
    assert!(!pass.full && pass.locks_resolved == 1, "{pass:?}");
    let r = store.backend.scan_versions(Some(("t", b"r")), 1).unwrap();
    let cell = &r[0].cells[0];
    assert!(cell.locks.is_empty() && cell.data.is_empty(), "{cell:?}");
    assert_eq!(cell.writes.len(), 1, "the version the rolled-forward commit replaced is gone: {cell:?}");
    assert_eq!(cell.writes[0].0, commit);
    assert_eq!(get_u64(&store.begin().unwrap(), "t", "r", "c:x").unwrap(), 2);
}

/// A store that GC left with many free pages compacts its open file by itself once it has
/// been quiet (`RedbConfig::compact_when_quiet`: no writes; reads do not count, none waits for
/// the compaction's copy): the file shrinks to about its pages, a reader running without a pause
/// throughout reads every row's value before, during and after, and writes go on after it,
/// also across a reopen.
#[test]
fn a_quiet_store_compacts_its_open_file_and_readers_and_writers_go_on() {
    use percolator_store::backends::{Bigtable, RedbBigtable};
    use percolator_store::{Durability, RedbConfig};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let dir = TempDir::new("gc-compact-quiet");
    let path = dir.file("store.redb");
    let value = |row: u64, round: u64| noise(row << 32 | round, 2048);
    let config = RedbConfig {
        durability: Durability::Fsync,
        checkpoint_every: Some(Duration::from_millis(50)),
        // Long enough for the reader below to read before the compaction begins.
        compact_when_quiet: Some(Duration::from_millis(1000)),
        ..RedbConfig::default()
    };
    let (rows, rounds) = (300u64, 30u64);
    let open = || {
        let redb = Arc::new(RedbBigtable::open(&path, config.clone()).unwrap());
        (TestStore::new(redb.clone(), StoreConfig::default()), redb)
    };
    // Grown and collected with no compaction when quiet, then opened with it.
    let (store, redb, grown) = percolator_testkit::grown_store(&path, config.clone(), rows, rounds, value);
    // A reader without a pause (thousands of reads a second), from before the compaction
    // began (its spell began at the reopen, a second before) to after it.
    let (stop, reads) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (store, stop, reads, redb) = (store.clone(), stop.clone(), reads.clone(), redb.clone());
        std::thread::spawn(move || {
            // The compactions made before its first read: none, so that it read throughout.
            let mut before_first = None;
            while !stop.load(Ordering::SeqCst) {
                let t = store.begin().unwrap();
                let r = reads.load(Ordering::SeqCst) % rows;
                assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(value(r, rounds - 1)), "row {r}");
                before_first.get_or_insert(redb.stats().compactions);
                reads.fetch_add(1, Ordering::SeqCst);
            }
            before_first
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while redb.stats().compactions == 0 {
        assert!(Instant::now() < deadline, "no compaction in 30 s of quiet: {:?}", redb.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let during = reads.load(Ordering::SeqCst);
    // A read after the compaction, by the same reader.
    while reads.load(Ordering::SeqCst) == during {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::SeqCst);
    assert_eq!(reader.join().unwrap(), Some(0), "the reader's first read came before the compaction");
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after < grown / 4, "{grown} bytes before, {after} after");
    // Writes go on, and what was there reads back, also after a reopen.
    store.run(|t| t.set("t", "new", "c:v", "after")).unwrap();
    drop((store, redb));
    let (store, redb) = open();
    let t = store.begin().unwrap();
    for r in 0..rows {
        assert_eq!(t.get("t", format!("r{r:04}"), "c:v").unwrap(), Some(value(r, rounds - 1)), "row {r}");
    }
    assert_eq!(t.get("t", "new", "c:v").unwrap(), Some(b"after".to_vec()));
    drop(t);
    // A store that stays compact is not compacted again.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(redb.stats().compactions, 0, "{:?}", redb.space());
}
