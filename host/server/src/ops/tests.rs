//! Tests of the commands on an in-memory store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use percolator_api::endpoint::{Get, Load, LoadBegin, Retry, Scan, Wait};
use percolator_api::*;
use percolator_store::{NotifyKind, Store, Transaction};

use super::*;

fn batch(start: u64, rows: &[&str]) -> LoadBatch {
    LoadBatch {
        table: "t".into(),
        id: "0123456789abcdef0123456789abcdef".into(),
        file: "f.jsonl".into(),
        options: "format=jsonl key=row family=raw".into(),
        start,
        total: 4,
        records: rows
            .iter()
            .map(|r| LoadRecord { row: (*r).into(), cells: vec![("raw:x".into(), Some((*r).into()))] })
            .collect(),
    }
}

#[test]
fn a_batch_counts_only_the_records_it_writes() {
    let store = mem_store();
    let p = call::<Load>(&store, batch(0, &["a", "b"])).unwrap();
    assert_eq!((p.done, p.written, p.skipped), (2, 2, false));
    // Another run's batch overlapping this one: only the new records are written.
    let p = call::<Load>(&store, batch(0, &["a", "b", "c"])).unwrap();
    assert_eq!((p.done, p.written, p.skipped), (3, 1, false));
    let p = call::<Load>(&store, batch(1, &["b", "c"])).unwrap();
    assert_eq!((p.done, p.written, p.skipped), (3, 0, true));
    let e = call::<Load>(&store, LoadBatch { table: LOADS_TABLE.into(), ..batch(3, &["d"]) }).unwrap_err();
    assert!(e.message.contains("holds the checkpoints of loads"), "{e}");
}

fn mem_store() -> Context {
    let store = Store::in_memory(Default::default()).unwrap();
    Context {
        store,
        store_path: Arc::new(PathBuf::from("mem")),
        store_name: "mem".into(),
        host: None,
        config_error: None,
        config: None,
    }
}

#[test]
fn without_a_host_there_are_no_samples() {
    let r = call::<percolator_api::endpoint::Samples>(&mem_store(), Empty {}).unwrap();
    assert!(r.samples.is_empty() && r.now_unix_ms > 1_700_000_000_000, "{r:?}");
}

#[test]
fn names_and_keys_are_checked() {
    let store = mem_store();
    let get = |table: &str, row: &str, column: &str| {
        call::<Get>(&store, GetRequest { table: table.into(), row: row.into(), column: column.into(), at: None })
            .unwrap_err()
    };
    let e = get("pages", "", "doc:title");
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::BadInput, "the row key is empty"));
    assert_eq!(get("", "x", "doc:title").message, "table name is empty");
    assert_eq!(
        get("pa\tges", "x", "doc:title").message,
        "table name \"pa\\tges\" contains the control character '\\t'"
    );
    assert_eq!(get("pages", "x", "__ack:x").message, "column \"__ack:x\" is in the reserved namespace \"__\"");
    assert!(get("pages", &"r".repeat(4097), "doc:title").message.contains("longer than the limit of 4096"));
    // A valid name of a table without cells (a typo?) is said to be empty.
    let e = get("pa ges", "x", "doc:title");
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert_eq!(e.message, "pa ges/x/doc:title: no value (table \"pa ges\" has no cells at all)");
    call::<Load>(&store, batch(0, &["a"])).unwrap();
    assert_eq!(get("t", "b", "raw:x").message, "t/b/raw:x: no value");

    let scan = |table: &str, start: Option<&str>, end: Option<&str>| {
        call::<Scan>(
            &store,
            ScanRequest {
                table: table.into(),
                start: start.map(Into::into),
                end: end.map(Into::into),
                limit: 10,
                ..Default::default()
            },
        )
    };
    let e = scan("t", Some("z"), Some("a")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadInput);
    assert_eq!(e.message, "the range is empty: start \"z\" is not before end \"a\" (the end is exclusive)");
    assert!(scan("t", Some("a"), Some("a")).is_err());
    assert_eq!(scan("t", Some("a"), Some("b")).unwrap().cells.len(), 1);
    assert_eq!(scan("", None, None).unwrap_err().message, "table name is empty");

    // Load batches sent over HTTP are checked the same way (the CLI checks its file first).
    let e = call::<Load>(&store, batch(0, &[""])).unwrap_err();
    assert_eq!(e.message, "record 1 of f.jsonl (row \"\"): the row key is empty");
    let mut b = batch(0, &["a"]);
    b.records[0].cells[0].0 = "nofamily\u{1}".into();
    let e = call::<Load>(&store, b).unwrap_err();
    assert!(e.message.starts_with("record 1 of f.jsonl (row \"a\"): column name "), "{e}");
}

#[test]
fn wait_without_a_host_counts_in_words() {
    let store = mem_store();
    let observer: Arc<dyn percolator_store::Observer> = Arc::new(Never);
    let spec = percolator_store::ObserverSpec {
        name: "o".into(),
        table: "t".into(),
        column: "raw:x".into(),
        kind: NotifyKind::Strong,
        max_attempts: 1,
    };
    store.store.set_observers(vec![(spec, observer)]).unwrap();
    let w = || call::<Wait>(&store, WaitRequest { timeout_secs: 0.0 }).unwrap_err().message;
    call::<Load>(&store, batch(0, &["a"])).unwrap();
    assert!(w().starts_with("1 notification is pending and no host is running"), "{}", w());
    call::<Load>(&store, batch(1, &["b"])).unwrap();
    assert!(w().starts_with("2 notifications are pending and no host is running"), "{}", w());
}

struct Never;

impl percolator_store::Observer for Never {
    fn observe(
        &self,
        _: &mut Transaction,
        _: &percolator_store::Notification,
    ) -> Result<(), percolator_store::ObserveError> {
        unreachable!("no scanner runs")
    }
}

#[test]
fn wait_timeouts_are_bounded() {
    let t = |secs: f64| pipeline::wait_timeout(&WaitRequest { timeout_secs: secs });
    assert_eq!(t(0.5), Ok(Duration::from_millis(500)));
    assert_eq!(t(3600.0), Ok(Duration::from_secs(3600)));
    assert_eq!(t(3600.5).unwrap_err().message, "timeout 3600.5 s is more than the limit of 3600 s");
    assert_eq!(t(1e19).unwrap_err().kind, ErrorKind::BadInput);
    assert_eq!(t(-1.0).unwrap_err().message, "timeout -1 is not a number of seconds");
    assert_eq!(t(f64::NAN).unwrap_err().kind, ErrorKind::BadInput);
}

#[test]
fn a_column_without_family_is_named_with_what_the_row_has() {
    let store = mem_store();
    let mut b = batch(0, &["a"]);
    b.records[0].cells.push(("doc:title".into(), Some("T".into())));
    call::<Load>(&store, b).unwrap();
    let get = |column: &str| {
        call::<Get>(&store, GetRequest { table: "t".into(), row: "a".into(), column: column.into(), at: None })
            .unwrap_err()
    };
    let e = get("title");
    assert_eq!(e.kind, ErrorKind::BadInput);
    assert_eq!(
        e.message,
        "column \"title\" has no family: columns are named family:qualifier (e.g. doc:title); did you mean doc:title?"
    );
    assert!(get("nothing").message.ends_with("; row \"a\" of t has doc:title, raw:x"), "{}", get("nothing"));
    // With a family, a missing cell is simply not found.
    assert_eq!(get("doc:nothing").kind, ErrorKind::NotFound);
}

#[test]
fn a_scan_resumes_exactly_after_its_token_even_inside_a_wide_row() {
    let store = mem_store();
    // Row "w" has 25 columns, rows "a" and "z" one each: 27 cells.
    let mut wide = batch(0, &["a", "w", "z"]);
    wide.total = 3;
    for i in 0..24 {
        wide.records[1].cells.push((format!("c:{i:02}"), Some(format!("v{i}").into())));
    }
    call::<Load>(&store, wide).unwrap();
    let all = call::<Scan>(&store, ScanRequest { table: "t".into(), limit: 1000, ..Default::default() }).unwrap();
    assert_eq!((all.cells.len(), all.truncated, all.next.as_deref()), (27, false, None));
    for limit in [1, 2, 5, 26, 27] {
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let page = call::<Scan>(
                &store,
                ScanRequest { table: "t".into(), limit, after: after.take(), ..Default::default() },
            )
            .unwrap();
            assert!(page.cells.len() <= limit);
            got.extend(page.cells.iter().map(|c| (c.row.clone(), c.column.clone())));
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        let want: Vec<_> = all.cells.iter().map(|c| (c.row.clone(), c.column.clone())).collect();
        assert_eq!(got, want, "pages of {limit}");
    }
    let e = call::<Scan>(&store, ScanRequest { table: "t".into(), after: Some("xyz".into()), ..Default::default() })
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadInput);
}

#[test]
fn optional_request_fields_take_their_defaults() {
    let r: ScanRequest = serde_json::from_str(r#"{"table": "t"}"#).unwrap();
    assert_eq!((r.limit, r.after), (DEFAULT_SCAN_LIMIT, None));
    let w: WaitRequest = serde_json::from_str("{}").unwrap();
    assert_eq!(w.timeout_secs, DEFAULT_WAIT_SECS);
}

/// Found in the review that came with fuzzing the API (scripts/fuzz-http): a retry of a metadata
/// key that is no dead letter's answered 500 "corrupt store" (the key was read as a damaged dead
/// letter).
#[test]
fn retrying_an_id_that_is_no_dead_letter_is_not_found() {
    let store = mem_store();
    call::<Load>(&store, batch(0, &["a"])).unwrap();
    store.store.persist_metrics().unwrap();
    for id in ["oracle/high_water_mark", "metrics/commits", "dead/", "nonsense"] {
        let e = call::<Retry>(&store, RetryRequest { id: Some(id.into()), all: false }).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound, "{id}: {e}");
        assert_eq!(e.message, format!("no dead letter {id:?} (list them with `percolator dead-letters`)"));
    }
}

/// Found while fuzzing the API: `load/begin` took columns with control characters (the batches
/// would refuse them later), and a checkpoint whose record count differed, with the same
/// options, was said to have "other options ( ; now )".
#[test]
fn load_begin_checks_the_columns_and_says_what_differs() {
    let store = mem_store();
    let begin = |columns: &[&str], total: u64, options: &str| {
        call::<LoadBegin>(
            &store,
            LoadBeginRequest {
                table: "t".into(),
                id: "0123456789abcdef0123456789abcdef".into(),
                file: "f.jsonl".into(),
                total,
                options: options.into(),
                again: false,
                columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            },
        )
    };
    let e = begin(&["raw:x", "raw:\u{9b}"], 4, "o").unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::BadInput, "column name \"raw:\\u{9b}\" contains the control character '\\u{9b}'")
    );
    assert_eq!(begin(&["raw:x"], 4, "format=jsonl key=row family=raw").unwrap().state, LoadState::New);
    call::<Load>(&store, batch(0, &["a"])).unwrap(); // 1 of 4 records in
    let e = begin(&["raw:x"], 5, "format=jsonl key=row family=raw").unwrap_err();
    assert_eq!(
        e.message,
        "f.jsonl was being loaded into t with another record count (4; now 5) and stopped at record 1 of 4; \
         run the load with those options to finish it, or pass --again to start over"
    );
    let e = begin(&["raw:x"], 4, "family=other").unwrap_err();
    assert!(
        e.message.contains("with other options (format=jsonl key=row family=raw; now family=other) and stopped"),
        "{e}"
    );
}

/// Every page of a multi-page scan reads the first page's snapshot while a writer changes,
/// adds and deletes rows between (and during) the pages: the pages together are exactly one
/// big scan at that timestamp, and every cell carries its commit timestamp.
#[test]
fn a_multi_page_scan_reads_one_snapshot_under_a_concurrent_writer() {
    use percolator_api::endpoint::{Snapshot, SnapshotRelease, SnapshotRenew};
    let cx = mem_store();
    let write = |round: u32| {
        cx.store
            .run(|t| {
                for i in 0..40u32 {
                    let row = format!("r{i:03}");
                    match (i + round) % 7 {
                        0 => t.delete("t", &row, "c:v")?,
                        _ => t.set("t", &row, "c:v", format!("{round}-{i}"))?,
                    }
                }
                t.set("t", format!("new{round}"), "c:v", "late")
            })
            .unwrap();
    };
    write(0);
    // A writer running all along, besides the writes between pages.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, stop) = (cx.store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                store.run(|t| t.set("t", format!("r{:03}", n % 40), "c:v", format!("bg{n}"))).unwrap();
                // Paced: unpaced, on a fast machine it rewrites one of the 40 rows between any
                // start and commit of `write`, which then loses every one of its attempts.
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        })
    };
    let scan = |limit, after, at| {
        call::<Scan>(&cx, ScanRequest { table: "t".into(), limit, after, at, ..Default::default() }).unwrap()
    };
    let mut pages = vec![scan(7, None, None)];
    let at = pages[0].at;
    let mut round = 1;
    while let Some(next) = pages.last().unwrap().next.clone() {
        write(round);
        round += 1;
        pages.push(scan(7, Some(next), None));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    writer.join().unwrap();
    assert!(pages.len() > 3 && pages.iter().all(|p| p.at == at), "every page reads the first page's snapshot");
    let key = |c: &ScanCell| (c.row.clone(), c.column.clone(), c.value.clone(), c.commit_ts);
    let paged: Vec<_> = pages.iter().flat_map(|p| p.cells.iter().map(key)).collect();
    let whole = scan(1000, None, Some(at));
    assert_eq!(whole.at, at);
    assert_eq!(paged, whole.cells.iter().map(key).collect::<Vec<_>>());
    assert!(paged.iter().all(|(_, _, v, ts)| !v.starts_with("bg") || *ts < at));
    assert!(paged.iter().all(|(_, _, _, ts)| *ts > 0 && *ts < at), "commit timestamps below the snapshot");
    assert!(!paged.iter().any(|(r, ..)| r.starts_with("new1")), "a row written after the snapshot is not in it");
    // The latest differs from the snapshot.
    assert_ne!(scan(1000, None, None).cells.iter().map(key).collect::<Vec<_>>(), paged);

    // A token with another `at` is refused; so is an old token without a snapshot.
    let token = scan(3, None, Some(at)).next.unwrap();
    let e = call::<Scan>(
        &cx,
        ScanRequest { table: "t".into(), after: Some(token), at: Some(at - 1), ..Default::default() },
    )
    .unwrap_err();
    assert!(e.message.contains("every page of a scan reads the first page's snapshot"), "{e}");
    let e = call::<Scan>(&cx, ScanRequest { table: "t".into(), after: Some("72.633a76".into()), ..Default::default() })
        .unwrap_err();
    assert!(e.message.contains("earlier version"), "{e}");

    // `get` at the snapshot, and with its commit timestamp.
    let (row, _, value, ts) = paged[0].clone();
    let v = call::<Get>(&cx, GetRequest { table: "t".into(), row, column: "c:v".into(), at: Some(at) }).unwrap();
    assert_eq!((v.value, v.commit_ts), (value, ts));

    // A future snapshot is refused; so is one below the safepoint after GC, unless pinned.
    let future = call::<Snapshot>(&cx, SnapshotRequest::default()).unwrap().ts + 1000;
    let e = call::<Scan>(&cx, ScanRequest { table: "t".into(), at: Some(future), ..Default::default() }).unwrap_err();
    assert!(e.kind == ErrorKind::BadInput && e.message.contains("not yet stable"), "{e}");
    let pin = call::<Snapshot>(&cx, SnapshotRequest { ttl_secs: Some(600), at: Some(at) }).unwrap().pin.unwrap();
    assert_eq!(pin.ts, at);
    cx.store.gc().unwrap();
    assert_eq!(scan(1000, None, Some(at)).cells.iter().map(key).collect::<Vec<_>>(), paged, "the pin kept it");
    let renewed = call::<SnapshotRenew>(&cx, PinRenewRequest { id: pin.id, ttl_secs: 60 }).unwrap();
    assert_eq!((renewed.id, renewed.ts), (pin.id, at));
    call::<SnapshotRelease>(&cx, PinReleaseRequest { id: pin.id }).unwrap();
    let e = call::<SnapshotRelease>(&cx, PinReleaseRequest { id: pin.id }).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    cx.store.gc().unwrap();
    let e = call::<Scan>(&cx, ScanRequest { table: "t".into(), at: Some(at), ..Default::default() }).unwrap_err();
    assert!(e.kind == ErrorKind::BadInput && e.message.contains("below the GC safepoint"), "{e}");
    for bad in [SnapshotRequest { ttl_secs: Some(0), at: None }, SnapshotRequest { ttl_secs: None, at: Some(at) }] {
        assert_eq!(call::<Snapshot>(&cx, bad).unwrap_err().kind, ErrorKind::BadInput);
    }
}
