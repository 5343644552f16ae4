//! Large values are stored compressed, transparently to every read and write, and a store
//! written before the stored form existed (values as they are, no format marker) still reads
//! (`docs/design.md`, "Compressed values").

mod common;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use common::*;
use percolator_store::backends::{
    Bigtable, CellVersions, LockRecord, Mutation, Op, Outcome, RedbBigtable, RowMutation, WriteKind, WriteRecord,
    decode_value, encode_value,
};
use percolator_store::{CellRef, Durability, Oracle, RedbConfig, Store, StoreConfig};

fn html(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| format!("<li><a href=\"/guide/{i}.html\">Guide page {i}</a></li>\n"))
        .collect::<String>()
        .into_bytes()
}

/// The stored bytes of the newest write record of one cell.
fn stored(backend: &dyn Bigtable, table: &str, row: &[u8], column: &str) -> Vec<u8> {
    let rows = backend.scan_versions(Some((table, row)), 1).unwrap();
    let cell: &CellVersions = rows[0].cells.iter().find(|c| c.column == column).expect("the cell");
    match &cell.writes[0].1.kind {
        WriteKind::Put(v) => v.clone(),
        other => panic!("{other:?}"),
    }
}

fn apply(backend: &dyn Bigtable, table: &str, row: &[u8], mutations: Vec<Mutation>) {
    let op = RowMutation { table: table.into(), row: row.to_vec(), conditions: vec![], mutations };
    assert_eq!(backend.apply(vec![Op::Row(op)]).unwrap(), vec![Outcome::Applied]);
}

/// Every way to read returns what was written; large values take less room in the backend;
/// small ones one byte more.
#[test]
fn values_read_back_through_every_read_and_large_ones_are_stored_smaller() {
    for one_phase_commit in [true, false] {
        let s = test_store(StoreConfig { one_phase_commit, ..StoreConfig::default() });
        let (big, small) = (html(200), b"\x00\x01 small".to_vec());
        s.run(|t| {
            t.set("t", "big", "c:v", big.clone())?;
            t.set("t", "small", "c:v", small.clone())?;
            t.set("u", "other", "c:v", big.clone())
        })
        .unwrap();
        let t = s.begin().unwrap();
        assert_eq!(t.get("t", "big", "c:v").unwrap(), Some(big.clone()));
        let cells =
            [CellRef::new("t", "small", "c:v"), CellRef::new("t", "big", "c:v"), CellRef::new("u", "other", "c:v")];
        assert_eq!(t.get_many(&cells).unwrap(), vec![Some(small.clone()), Some(big.clone()), Some(big.clone())]);
        let scan = t.scan("t", b"", None, None, 10).unwrap();
        assert_eq!(scan.iter().map(|e| e.value.clone()).collect::<Vec<_>>(), vec![big.clone(), small.clone()]);
        drop(t);
        s.flush_secondaries();
        let (sb, ss) =
            (stored(s.backend.as_ref(), "t", b"big", "c:v"), stored(s.backend.as_ref(), "t", b"small", "c:v"));
        assert!(sb.len() * 5 < big.len(), "{} bytes stored for {}", sb.len(), big.len());
        assert_eq!(decode_value(&sb).unwrap(), big);
        assert_eq!(ss.len(), small.len() + 1);
        // A delete, and an overwrite with a small value, read as such.
        s.run(|t| {
            t.delete("t", "big", "c:v")?;
            t.set("u", "other", "c:v", "now small")
        })
        .unwrap();
        let t = s.begin().unwrap();
        assert_eq!(t.get("t", "big", "c:v").unwrap(), None);
        assert_eq!(t.get("u", "other", "c:v").unwrap(), Some(b"now small".to_vec()));
    }
}

/// A large value staged by a transaction that died after its commit point is rolled forward
/// (its staged bytes copied, not decoded) and reads back whole.
#[test]
fn a_rolled_forward_large_value_reads_back() {
    let s = test_store(StoreConfig::default());
    let big = html(300);
    let (start_ts, commit_ts) = (s.oracle().next().unwrap(), s.oracle().next().unwrap());
    let primary = CellRef::new("t", "p", "c:v");
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    let lock = LockRecord { primary: primary.clone(), wall_ms: now, ttl_ms: 600_000, worker: s.worker_id() };
    apply(
        s.backend.as_ref(),
        "t",
        b"p",
        vec![Mutation::PutWrite {
            column: "c:v".into(),
            commit_ts,
            write: WriteRecord { start_ts, kind: WriteKind::Put(encode_value(b"primary")) },
        }],
    );
    apply(
        s.backend.as_ref(),
        "t",
        b"s",
        vec![
            Mutation::PutLock { column: "c:v".into(), start_ts, lock },
            Mutation::PutData { column: "c:v".into(), start_ts, value: encode_value(&big) },
        ],
    );
    let t = s.begin().unwrap();
    assert_eq!(t.get("t", "s", "c:v").unwrap(), Some(big.clone()));
    assert_eq!(t.get("t", "p", "c:v").unwrap(), Some(b"primary".to_vec()));
    assert!(s.metrics().rolled_forward >= 1);
    assert_eq!(decode_value(&stored(s.backend.as_ref(), "t", b"s", "c:v")).unwrap(), big);
}

/// A store file as an earlier version left it — values as they are (first bytes 0 and 1
/// included, and a large one), a lock of a transaction that committed but died before its
/// secondary — opens, reads every value as it was, rolls the lock forward, takes new values in
/// the stored form, and writes its format marker once.
#[test]
fn a_store_of_an_earlier_version_still_reads() {
    let dir = TempDir::new("values-old");
    let path = dir.file("store.redb");
    let big = html(100);
    let old: Vec<(&[u8], Vec<u8>)> = vec![
        (b"zero", b"\x00 starts like a raw tag".to_vec()),
        (b"one", b"\x01\x02\x03".to_vec()),
        (b"big", big.clone()),
    ];
    {
        // What an earlier version wrote, record by record, with timestamps from its oracle.
        let backend: Arc<dyn Bigtable> = Arc::new(
            RedbBigtable::open(&path, RedbConfig { durability: Durability::Fsync, ..RedbConfig::default() }).unwrap(),
        );
        let oracle = Oracle::open(backend.clone()).unwrap();
        for (row, value) in &old {
            let (start_ts, commit_ts) = (oracle.next().unwrap(), oracle.next().unwrap());
            apply(
                backend.as_ref(),
                "t",
                row,
                vec![Mutation::PutWrite {
                    column: "c:v".into(),
                    commit_ts,
                    write: WriteRecord { start_ts, kind: WriteKind::Put(value.clone()) },
                }],
            );
        }
        let (start_ts, commit_ts) = (oracle.next().unwrap(), oracle.next().unwrap());
        let lock = LockRecord { primary: CellRef::new("t", "primary", "c:v"), wall_ms: 0, ttl_ms: 1, worker: 7 };
        apply(
            backend.as_ref(),
            "t",
            b"primary",
            vec![Mutation::PutWrite {
                column: "c:v".into(),
                commit_ts,
                write: WriteRecord { start_ts, kind: WriteKind::Put(b"p".to_vec()) },
            }],
        );
        apply(
            backend.as_ref(),
            "t",
            b"secondary",
            vec![
                Mutation::PutLock { column: "c:v".into(), start_ts, lock },
                Mutation::PutData { column: "c:v".into(), start_ts, value: b"\x01staged".to_vec() },
            ],
        );
    }
    let check_old = |store: &Store| {
        let t = store.begin().unwrap();
        for (row, value) in &old {
            assert_eq!(t.get("t", row, "c:v").unwrap().as_ref(), Some(value), "row {}", String::from_utf8_lossy(row));
        }
        assert_eq!(t.get("t", "secondary", "c:v").unwrap(), Some(b"\x01staged".to_vec()), "rolled forward");
        assert_eq!(t.get("t", "new", "c:v").unwrap(), Some(big.clone()));
        let scanned = t.scan("t", b"", None, None, 100).unwrap();
        assert_eq!(scanned.len(), old.len() + 3);
    };
    {
        let store = Store::open(&path, StoreConfig::default(), RedbConfig::default()).unwrap();
        store.run(|t| t.set("t", "new", "c:v", big.clone())).unwrap();
        check_old(&store);
    }
    let backend = RedbBigtable::open(&path, RedbConfig::default()).unwrap();
    assert_eq!(stored(&backend, "t", b"big", "c:v"), big, "an old value is left as it is");
    assert!(stored(&backend, "t", b"new", "c:v").len() * 5 < big.len(), "a new value is stored compressed");
    let marker = |b: &RedbBigtable| b.scan_versions(Some(("__system", b"format")), 1).unwrap()[0].clone();
    let first = marker(&backend);
    assert_eq!((first.table.as_str(), first.row.as_slice()), ("__system", &b"format"[..]));
    assert_eq!(first.cells[0].writes.len(), 1);
    drop(backend);
    // Reopened: the marker is read, not written again; everything still reads.
    let store = Store::open(&path, StoreConfig::default(), RedbConfig::default()).unwrap();
    check_old(&store);
    drop(store);
    let backend = RedbBigtable::open(&path, RedbConfig::default()).unwrap();
    assert_eq!(marker(&backend), first);
}

/// Two stores opening one backend agree on one marker: the second reads the first's.
#[test]
fn the_format_marker_is_written_once() {
    let backend: Arc<dyn Bigtable> = Arc::new(percolator_store::backends::MemBigtable::new());
    let marker = || backend.scan_versions(Some(("__system", b"format")), 1).unwrap()[0].cells[0].writes.clone();
    let s = Store::with_backend(backend.clone(), StoreConfig::default()).unwrap();
    s.run(|t| t.set("t", "r", "c:v", html(50))).unwrap();
    drop(s);
    let first = marker();
    assert_eq!(first.len(), 1);
    let s = Store::with_backend(backend.clone(), StoreConfig::default()).unwrap();
    assert_eq!(s.begin().unwrap().get("t", "r", "c:v").unwrap(), Some(html(50)));
    assert_eq!(marker(), first);
    // The marker's column is reserved: no transaction can change it.
    let mut t = s.begin().unwrap();
    assert!(t.set("__system", "format", "__values", "x").is_err());
}
