//! The change feed (`docs/design.md`, "The change feed"): every committed write to a logged
//! column appears exactly once, in commit-timestamp order; no rolled-back or abandoned write
//! ever appears; resuming from any token gives exactly the rest; a lock of a writer that died
//! holds the feed back until it is resolved; trimming and subscriptions.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use percolator_store::{Change, ChangeToken, Error, Store, StoreConfig, Timestamp};

const TABLE: &str = "t";
const LOGGED: &str = "c:v";
const UNLOGGED: &str = "c:other";

fn log(store: &Store) {
    store.set_change_log([(TABLE.to_owned(), LOGGED.to_owned())].into_iter().collect()).unwrap();
}

/// One change as the writers recorded it and as the feed must show it.
type Seen = (Timestamp, Vec<u8>, Option<Vec<u8>>);

fn seen(c: &Change) -> Seen {
    (c.commit_ts, c.cell.row.clone(), c.value.clone())
}

/// Reads pages from `token` until the position reaches `upto`; returns the changes and every
/// token met on the way (with how many changes came before it).
fn follow(
    store: &Store,
    mut token: ChangeToken,
    upto: Timestamp,
    limit: usize,
) -> (Vec<Change>, Vec<(ChangeToken, usize)>) {
    let mut out = Vec::new();
    let mut tokens = vec![(token, 0)];
    let deadline = Instant::now() + Duration::from_secs(60);
    while token.position().is_none_or(|p| p < upto) {
        assert!(Instant::now() < deadline, "the feed did not reach {upto} (at {token})");
        let page = store.changes(TABLE, None, &token, limit).unwrap();
        out.extend(page.changes);
        token = page.next;
        tokens.push((token, out.len()));
    }
    (out, tokens)
}

/// Writers commit, conflict and abort on a few hot rows while a follower reads the feed; the
/// feed is then exactly the committed writes in commit order, and every token resumes exactly.
fn concurrent_writers_are_fed_exactly_once(store: &Store) {
    log(store);
    let committed: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let follower = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut token = ChangeToken::origin();
            let mut got = Vec::new();
            let mut tokens = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let page = store.changes(TABLE, Some(&[LOGGED.to_owned()]), &token, 7).unwrap();
                got.extend(page.changes);
                token = page.next;
                tokens.push((token, got.len()));
            }
            (got, tokens)
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (store, committed) = (store.clone(), committed.clone());
            std::thread::spawn(move || {
                for i in 0..60u32 {
                    let mut t = store.begin().unwrap();
                    // Two hot rows: writers conflict on them. A read first makes it a real
                    // read-modify-write.
                    let rows = [format!("r{}", i % 3), format!("r{}", (i + w) % 5)];
                    let mut mine = BTreeMap::new();
                    for row in &rows {
                        let _ = t.get(TABLE, row, LOGGED);
                        let value = if (i + w) % 7 == 0 { None } else { Some(format!("w{w}-{i}-{row}").into_bytes()) };
                        match &value {
                            Some(v) => t.set(TABLE, row, LOGGED, v.clone()).unwrap(),
                            None => t.delete(TABLE, row, LOGGED).unwrap(),
                        }
                        t.set(TABLE, row, UNLOGGED, b"not in the feed".to_vec()).unwrap();
                        mine.insert(row.clone().into_bytes(), value);
                    }
                    if i % 11 == 5 {
                        drop(t); // abandoned before commit: never in the feed
                        continue;
                    }
                    match t.commit() {
                        Ok(ts) => {
                            let mut c = committed.lock().unwrap();
                            c.extend(mine.into_iter().map(|(row, v)| (ts, row, v)));
                        }
                        Err(e) if e.is_retryable() => {} // rolled back: never in the feed
                        Err(e) => panic!("commit: {e}"),
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let last = store.oracle().next().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    stop.store(true, Ordering::SeqCst);
    let (mut got, tokens) = follower.join().unwrap();
    let end = tokens.last().map(|(t, _)| *t).unwrap_or(ChangeToken::origin());
    let (rest, _) = follow(store, end, last, 1000);
    got.extend(rest);
    let mut want = committed.lock().unwrap().clone();
    want.sort();
    let got_seen: Vec<Seen> = got.iter().map(seen).collect();
    assert!(got_seen.windows(2).all(|w| w[0].0 <= w[1].0), "the feed is in commit-timestamp order");
    let mut sorted = got_seen.clone();
    sorted.sort();
    assert_eq!(sorted.len(), want.len(), "every committed write once, nothing else");
    assert_eq!(sorted, want, "every committed write once, nothing else");
    assert!(got.iter().all(|c| c.cell.table == TABLE && c.cell.column == LOGGED));
    assert!(want.len() > 100, "enough commits to mean something: {}", want.len());
    // Resuming from any token gives exactly the rest of the feed.
    for (token, before) in tokens.iter().step_by(5) {
        let (suffix, _) = follow(store, *token, last, 13);
        let suffix: Vec<Seen> = suffix.iter().map(seen).collect();
        assert_eq!(suffix, got_seen[*before..], "resuming from {token}");
    }
    // And through the text form a consumer keeps.
    let (token, before) = tokens[tokens.len() / 2];
    let parsed: ChangeToken = token.to_string().parse().unwrap();
    let (suffix, _) = follow(store, parsed, last, 1000);
    assert_eq!(suffix.iter().map(seen).collect::<Vec<_>>(), got_seen[before..]);
}

#[test]
fn concurrent_writers_are_fed_exactly_once_on_the_test_backend() {
    let _f = no_failpoints();
    // With failpoints compiled in, a quarter of the commits pause between taking their commit
    // timestamp and writing their commit point: the window in which a page must hold back
    // (a page that ignored live locks misses such commits).
    #[cfg(feature = "failpoints")]
    fail::cfg("before-commit-primary", "25%sleep(10)").unwrap();
    // Two-phase commit with asynchronous secondaries.
    concurrent_writers_are_fed_exactly_once(&test_store(StoreConfig { one_phase_commit: false, ..fast_locks() }));
    #[cfg(feature = "failpoints")]
    fail::remove("before-commit-primary");
}

#[test]
fn concurrent_writers_are_fed_exactly_once_with_one_phase_commit() {
    let _f = no_failpoints();
    // The same window for one-phase commits: between the commit timestamp and the atomic write
    // (the fence makes a page wait for it).
    #[cfg(feature = "failpoints")]
    fail::cfg("before-one-phase-write", "25%sleep(10)").unwrap();
    concurrent_writers_are_fed_exactly_once(&mem_store(fast_locks()));
    let dir = TempDir::new("changes-redb");
    concurrent_writers_are_fed_exactly_once(&redb_store(&dir, fast_locks()));
    #[cfg(feature = "failpoints")]
    fail::remove("before-one-phase-write");
}

#[test]
fn unlogged_columns_are_refused_and_the_log_survives_a_restart() {
    let _f = no_failpoints();
    let dir = TempDir::new("changes-reopen");
    let path = dir.file("store.redb");
    let token = {
        let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::None);
        let e = store.changes(TABLE, None, &ChangeToken::origin(), 10).unwrap_err().to_string();
        assert!(e.contains("no column of table t is in the change log"), "{e}");
        log(&store);
        let e = store.changes(TABLE, Some(&[UNLOGGED.to_owned()]), &ChangeToken::origin(), 10).unwrap_err();
        assert!(e.to_string().contains("t/c:other is not in the change log"), "{e}");
        store.run(|t| t.set(TABLE, "a", LOGGED, b"1".to_vec())).unwrap();
        let page = store.changes(TABLE, None, &ChangeToken::origin(), 10).unwrap();
        assert_eq!(page.changes.len(), 1);
        page.next
    };
    let store = TestStore::open(&path, StoreConfig::default(), percolator_store::Durability::None);
    assert_eq!(store.change_log(), [(TABLE.to_owned(), LOGGED.to_owned())].into_iter().collect::<BTreeSet<_>>());
    let ts = commit_once(&store, |t| t.set(TABLE, "b", LOGGED, b"2".to_vec()));
    let page = store.changes(TABLE, None, &token, 10).unwrap();
    assert_eq!(page.changes.iter().map(seen).collect::<Vec<_>>(), vec![(ts, b"b".to_vec(), Some(b"2".to_vec()))]);
    // A column that is no longer logged is no longer fed.
    store.set_change_log(BTreeSet::new()).unwrap();
    store.run(|t| t.set(TABLE, "c", LOGGED, b"3".to_vec())).unwrap();
    assert!(store.changes(TABLE, None, &page.next, 10).is_err());
}

#[test]
fn trimming_keeps_what_a_subscription_has_not_passed() {
    let _f = no_failpoints();
    let store = test_store(StoreConfig::default());
    log(&store);
    assert!(store.claim_subscription("sink-a").unwrap());
    assert!(store.claim_subscription("sink-a").unwrap(), "its owner claims it again");
    let mut stamps = Vec::new();
    for i in 0..10 {
        stamps.push(commit_once(&store, |t| t.set(TABLE, format!("r{i}"), LOGGED, vec![i as u8])));
    }
    // The subscription delivered nothing yet: nothing may be trimmed.
    assert_eq!(store.trim_changes(store.oracle().next().unwrap()).unwrap(), 0);
    let first = store.changes(TABLE, None, &ChangeToken::origin(), 4).unwrap();
    assert_eq!(first.changes.len(), 4);
    assert!(store.advance_subscription("sink-a", &first.next).unwrap());
    let sub = store.subscription("sink-a").unwrap().unwrap();
    assert_eq!(sub.position, first.next);
    assert_eq!(sub.owner, Some(store.worker_id()));
    // Trimming stops at the subscription's position.
    let removed = store.trim_changes(store.oracle().next().unwrap()).unwrap();
    assert_eq!(removed, 4);
    assert_eq!(store.changes_trimmed_to().unwrap(), first.next.position().unwrap());
    // A consumer behind the mark is told, and the origin starts at it.
    let e = store.changes(TABLE, None, &"c1.1.0".parse().unwrap(), 4).unwrap_err();
    assert!(matches!(e, Error::ChangesTrimmed { .. }), "{e}");
    assert!(e.to_string().contains("trimmed"), "{e}");
    let (rest, _) = follow(&store, ChangeToken::origin(), *stamps.last().unwrap(), 3);
    assert_eq!(rest.iter().map(|c| c.commit_ts).collect::<Vec<_>>(), stamps[4..]);
    // The position never moves backwards.
    assert!(store.advance_subscription("sink-a", &ChangeToken::origin()).unwrap());
    assert_eq!(store.subscription("sink-a").unwrap().unwrap().position, first.next);
    assert_eq!(store.subscriptions().unwrap().len(), 1);
    store.drop_subscription("sink-a").unwrap();
    assert!(store.subscription("sink-a").unwrap().is_none());
    assert!(store.subscriptions().unwrap().is_empty());
    assert_eq!(store.trim_changes(store.oracle().next().unwrap()).unwrap(), 6);
    for bad in ["", "a/b", &"x".repeat(65)] {
        assert!(store.claim_subscription(bad).is_err(), "{bad:?}");
    }
    // A position this store never reached (another store's token) is refused, not skipped to.
    let e = store.changes(TABLE, None, &"c1.999999999999.999999999999".parse().unwrap(), 4).unwrap_err();
    assert!(e.to_string().contains("is in the future"), "{e}");
}

/// On a shared backend, one live worker owns a subscription; another takes it over only when
/// the owner's lease is gone.
#[test]
fn one_live_owner_per_subscription_on_redis() {
    if test_backend() != "redis" || etcd_endpoints().is_none() {
        eprintln!("skipped: needs PERCOLATOR_TEST_BACKEND=redis and the dev cluster");
        return;
    }
    let ns = unique_namespace();
    let config = StoreConfig { worker_lease: Duration::from_secs(2), ..StoreConfig::default() };
    let a = shared_store(&ns, config.clone());
    let b = shared_store(&ns, config);
    assert!(a.claim_subscription("s").unwrap());
    assert!(!b.claim_subscription("s").unwrap(), "a is alive");
    assert!(!b.advance_subscription("s", &"c1.5.0".parse().unwrap()).unwrap(), "b does not own it");
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !b.claim_subscription("s").unwrap() {
        assert!(Instant::now() < deadline, "b never took over the subscription of a closed store");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(b.subscription("s").unwrap().unwrap().owner, Some(b.worker_id()));
}

/// A writer that stopped between its phases: before its commit point its log row's lock holds
/// the feed below its start until the lock expires and is rolled back (its change never
/// appears); after it, the change appears once.
#[cfg(feature = "failpoints")]
#[test]
fn a_crashed_writer_holds_the_feed_until_its_lock_is_resolved() {
    for (failpoint, committed) in [("before-commit-primary", false), ("after-commit-primary", true)] {
        let scenario = fail::FailScenario::setup();
        let store = test_store(StoreConfig { one_phase_commit: false, async_secondaries: false, ..fast_locks() });
        log(&store);
        let before = commit_once(&store, |t| t.set(TABLE, "x", LOGGED, b"0".to_vec()));
        fail::cfg(failpoint, "return").unwrap();
        let mut t = store.begin().unwrap();
        let crashed = t.start_ts();
        t.set(TABLE, "y", LOGGED, b"crashed".to_vec()).unwrap();
        t.set(TABLE, "z", LOGGED, b"crashed".to_vec()).unwrap();
        let result = t.commit();
        fail::remove(failpoint);
        assert_eq!(result.is_ok(), committed, "{failpoint}: {result:?}");
        let page = store.changes(TABLE, None, &ChangeToken::origin(), 100).unwrap();
        if committed {
            let ts = result.unwrap();
            let rows: Vec<Seen> = page.changes.iter().map(seen).collect();
            assert_eq!(
                rows,
                vec![
                    (before, b"x".to_vec(), Some(b"0".to_vec())),
                    (ts, b"y".to_vec(), Some(b"crashed".to_vec())),
                    (ts, b"z".to_vec(), Some(b"crashed".to_vec())),
                ],
                "{failpoint}"
            );
        } else {
            assert_eq!(
                page.changes.iter().map(seen).collect::<Vec<_>>(),
                vec![(before, b"x".to_vec(), Some(b"0".to_vec()))]
            );
            assert!(page.next.position().unwrap() <= crashed, "a live lock holds the feed below its start");
            // Once its TTL ran out the feed rolls it back and moves past it, without it.
            std::thread::sleep(Duration::from_millis(300));
            let after = store.oracle().next().unwrap();
            let (rest, _) = follow(&store, page.next, after, 100);
            assert!(rest.is_empty(), "an aborted write in the feed: {rest:?}");
        }
        drop(scenario);
    }
}

/// Transactions that started before a page's position and committed after it are read whatever
/// the page's limit: with a limit of 1 the feed still makes progress and keeps commit order.
#[test]
fn a_small_limit_always_makes_progress() {
    let _f = no_failpoints();
    let store = test_store(StoreConfig::default());
    log(&store);
    // Started in the order a, b, c; committed c, b, a: every transaction straddles the others.
    let mut txns: Vec<_> = ["a", "b", "c"].iter().map(|r| (r, store.begin().unwrap())).collect();
    let mut stamps = Vec::new();
    while let Some((row, mut t)) = txns.pop() {
        t.set(TABLE, *row, LOGGED, row.as_bytes().to_vec()).unwrap();
        stamps.push((t.commit().unwrap(), row.as_bytes().to_vec()));
    }
    let end = store.oracle().next().unwrap();
    let mut token = ChangeToken::origin();
    let mut got = Vec::new();
    let mut pages = 0;
    while token.position().is_none_or(|p| p < end) {
        pages += 1;
        assert!(pages < 50, "no progress at {token}");
        let page = store.changes(TABLE, None, &token, 1).unwrap();
        got.extend(page.changes.iter().map(|c| (c.commit_ts, c.cell.row.clone())));
        token = page.next;
    }
    assert_eq!(got, stamps, "each change once, in commit order");
}
