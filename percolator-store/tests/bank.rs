//! The paper's Figure 4 bank transfer, and many threads transferring at random: the total
//! never changes in any snapshot, on both backends.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use percolator_store::{Error, ONE_PHASE_MAX_ROWS, Store, StoreConfig};

const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 1000;

fn account(i: u64) -> String {
    format!("acct{i:03}")
}

fn seed(store: &Store) {
    store
        .run(|t| {
            for i in 0..ACCOUNTS {
                set_u64(t, "bank", &account(i), "bal:data", INITIAL)?;
            }
            Ok(())
        })
        .unwrap();
}

fn total(store: &Store) -> u64 {
    balances(store).1.iter().sum()
}

/// A snapshot's start timestamp and every account's balance in it.
fn balances(store: &Store) -> (u64, Vec<u64>) {
    let t = store.begin().unwrap();
    let rows = t.scan("bank", b"", None, Some(&["bal:data"]), usize::MAX).unwrap();
    assert_eq!(rows.len() as u64, ACCOUNTS, "every account visible in the snapshot");
    (t.start_ts().raw(), rows.iter().map(|e| u64::from_be_bytes(e.value.clone().try_into().unwrap())).collect())
}

/// Bob pays Joe, with one-phase commit (on an exclusive backend the two rows commit in one
/// atomic step) and without (two-phase: prewrite, commit primary, commit the secondary).
#[test]
fn figure_4_bob_pays_joe() {
    for one_phase_commit in [true, false] {
        bob_pays_joe(one_phase_commit);
    }
}

fn bob_pays_joe(one_phase_commit: bool) {
    let store = test_store(StoreConfig { one_phase_commit, ..StoreConfig::default() });
    store
        .run(|t| {
            set_u64(t, "bank", "Bob", "bal:data", 10)?;
            set_u64(t, "bank", "Joe", "bal:data", 2)
        })
        .unwrap();
    let before = store.begin().unwrap();
    store
        .run(|t| {
            let bob = get_u64(t, "bank", "Bob", "bal:data")?;
            let joe = get_u64(t, "bank", "Joe", "bal:data")?;
            set_u64(t, "bank", "Bob", "bal:data", bob - 7)?;
            set_u64(t, "bank", "Joe", "bal:data", joe + 7)
        })
        .unwrap();
    let after = store.begin().unwrap();
    assert_eq!(get_u64(&after, "bank", "Bob", "bal:data").unwrap(), 3);
    assert_eq!(get_u64(&after, "bank", "Joe", "bal:data").unwrap(), 9);
    // The older snapshot still sees the old balances.
    assert_eq!(get_u64(&before, "bank", "Bob", "bal:data").unwrap(), 10);
    assert_eq!(get_u64(&before, "bank", "Joe", "bal:data").unwrap(), 2);
    let one_pc = u64::from(one_phase_commit && store.backend.exclusive());
    // The seeding transaction wrote the same two rows.
    assert_eq!(store.metrics().one_pc_commits, 2 * one_pc, "one-phase commit {one_phase_commit}");
}

fn concurrent_transfers(store: TestStore) {
    seed(&store);
    let stop = Arc::new(AtomicBool::new(false));
    let committed = Arc::new(AtomicU64::new(0));
    let conflicts = Arc::new(AtomicU64::new(0));
    let history: Arc<Mutex<Vec<Transfer>>> = Arc::default();
    let workers: Vec<_> = (0..6)
        .map(|w| {
            let (store, stop, committed, conflicts, history) =
                (store.clone(), stop.clone(), committed.clone(), conflicts.clone(), history.clone());
            std::thread::spawn(move || {
                let mut n = w as u64 * 7919;
                while !stop.load(Ordering::Relaxed) {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let from = (n >> 33) % ACCOUNTS;
                    let to = (from + 1 + (n >> 40) % (ACCOUNTS - 1)) % ACCOUNTS;
                    let amount = (n >> 50) % 50;
                    let mut record = None;
                    let attempt = store.begin().and_then(|mut t| {
                        let a = get_u64(&t, "bank", &account(from), "bal:data")?;
                        let b = get_u64(&t, "bank", &account(to), "bal:data")?;
                        let amount = amount.min(a);
                        set_u64(&mut t, "bank", &account(from), "bal:data", a - amount)?;
                        set_u64(&mut t, "bank", &account(to), "bal:data", b + amount)?;
                        let start = t.start_ts().raw();
                        record = Some(Transfer { start, commit: None, from, to, read: (a, b), amount });
                        t.commit()
                    });
                    if let Some(mut r) = record {
                        r.commit = attempt.as_ref().ok().map(|ts| ts.raw());
                        history.lock().unwrap().push(r);
                    }
                    match attempt {
                        Ok(_) => committed.fetch_add(1, Ordering::Relaxed),
                        Err(Error::Conflict { .. }) => conflicts.fetch_add(1, Ordering::Relaxed),
                        Err(e) => panic!("transfer failed: {e}"),
                    };
                }
            })
        })
        .collect();
    // Auditors: every snapshot read during the run sees the same total.
    let mut audits = 0;
    while committed.load(Ordering::Relaxed) < 1500 {
        let (ts, seen) = balances(&store);
        if seen.iter().sum::<u64>() != ACCOUNTS * INITIAL {
            // Which kind of failure: a torn snapshot (later snapshots sum right again) or a lost
            // update (the total stays off).
            let later: Vec<(u64, Vec<u64>)> = (0..3).map(|_| balances(&store)).collect();
            stop.store(true, Ordering::Relaxed);
            let history = std::mem::take(&mut *history.lock().unwrap());
            panic!(
                "snapshot total after {audits} audits: {} at {ts}, not {}: balances {seen:?}; the next snapshots: \
                 {later:?}\n{}",
                seen.iter().sum::<u64>(),
                ACCOUNTS * INITIAL,
                explain(&store, &history)
            );
        }
        audits += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let history = std::mem::take(&mut *history.lock().unwrap());
    assert_eq!(total(&store), ACCOUNTS * INITIAL, "{}", explain(&store, &history));
    assert!(conflicts.load(Ordering::Relaxed) > 0, "8 accounts and 6 writers must conflict sometimes");
    assert!(audits > 0);
    // No lock is left behind (once the secondaries written in the background are in).
    store.flush_secondaries();
    let versions = store.backend.scan_versions(None, usize::MAX).unwrap();
    assert!(versions.iter().all(|r| r.cells.iter().all(|c| c.locks.is_empty() && c.data.is_empty())));
}

/// One transfer that reached its commit: what it read, and its outcome.
#[derive(Clone, Debug)]
struct Transfer {
    start: u64,
    /// Its commit timestamp; `None` if the commit failed (a conflict).
    commit: Option<u64>,
    from: u64,
    to: u64,
    /// The balances it read: `from`'s and `to`'s.
    read: (u64, u64),
    /// What it moved (at most `from`'s balance).
    amount: u64,
}

/// After a wrong total: which transfers of `history` disagree with each other and with the
/// stored write records (a stale read, two overlapping writers of one account that both
/// committed, a committed transfer whose record is missing, a failed one whose record is there),
/// with every stored version of the accounts involved.
fn explain(store: &TestStore, history: &[Transfer]) -> String {
    use percolator_store::backends::{WriteKind, decode_value};
    store.flush_secondaries();
    let versions = store.backend.scan_versions(None, usize::MAX).unwrap();
    // Per account: stored write records (commit_ts, start_ts, value or what else), newest first.
    let mut stored: Vec<Vec<(u64, u64, String)>> = vec![Vec::new(); ACCOUNTS as usize];
    let mut locks: Vec<String> = Vec::new();
    for r in &versions {
        let Some(i) = (0..ACCOUNTS).find(|i| account(*i).as_bytes() == r.row.as_slice()) else { continue };
        for c in r.cells.iter().filter(|c| c.column == "bal:data") {
            for (ts, w) in &c.writes {
                let v = match &w.kind {
                    // The stored form (`values.rs`), decoded.
                    WriteKind::Put(v) => match decode_value(v).ok().and_then(|v| <[u8; 8]>::try_from(v).ok()) {
                        Some(b) => u64::from_be_bytes(b).to_string(),
                        None => format!("{v:?}"),
                    },
                    other => format!("{other:?}"),
                };
                stored[i as usize].push((ts.raw(), w.start_ts.raw(), v));
            }
            for (ts, _) in &c.locks {
                locks.push(format!("{} lock at {}", account(i), ts.raw()));
            }
        }
    }
    let mut out = Vec::new();
    let mut suspects: Vec<u64> = Vec::new();
    let committed: Vec<&Transfer> = history.iter().filter(|t| t.commit.is_some()).collect();
    for t in history {
        for acct in [t.from, t.to] {
            let found = stored[acct as usize].iter().find(|(_, s, _)| *s == t.start);
            match (t.commit, found) {
                (Some(c), None) => {
                    out.push(format!("committed at {c} but no record of it in {}: {t:?}", account(acct)));
                    suspects.push(acct);
                }
                (Some(c), Some((ts, _, v))) if *ts != c || v.starts_with("Rollback") => {
                    out.push(format!("committed at {c}, but {}'s record is at {ts}: {v}: {t:?}", account(acct)));
                    suspects.push(acct);
                }
                (None, Some((ts, _, v))) if !v.starts_with("Rollback") => {
                    out.push(format!("failed, but {} has its record at {ts}: {v}: {t:?}", account(acct)));
                    suspects.push(acct);
                }
                _ => {}
            }
        }
    }
    for acct in 0..ACCOUNTS {
        // Committed writers of the account in commit order, with the value each read.
        let mut writers: Vec<(&Transfer, u64)> = committed
            .iter()
            .filter(|t| t.from == acct || t.to == acct)
            .map(|t| (*t, if t.from == acct { t.read.0 } else { t.read.1 }))
            .collect();
        writers.sort_by_key(|(t, _)| t.commit);
        for pair in writers.windows(2) {
            let ((a, _), (b, read)) = (pair[0], pair[1]);
            let wrote = if a.from == acct { a.read.0 - a.amount } else { a.read.1 + a.amount };
            if b.start < a.commit.unwrap() {
                out.push(format!("{}: overlapping writers both committed: {a:?} and {b:?}", account(acct)));
                suspects.push(acct);
            } else if read != wrote {
                out.push(format!(
                    "{}: read {read}, but the previous commit wrote {wrote}: {a:?} then {b:?}",
                    account(acct)
                ));
                suspects.push(acct);
            }
        }
    }
    suspects.sort_unstable();
    suspects.dedup();
    for acct in suspects {
        out.push(format!(
            "{} stored (commit_ts, start_ts, value), newest first: {:?}",
            account(acct),
            stored[acct as usize]
        ));
    }
    out.extend(locks);
    out.push(format!("{} transfers recorded, {} committed; {:?}", history.len(), committed.len(), store.metrics()));
    out.join("\n")
}

#[test]
fn concurrent_transfers_preserve_total() {
    concurrent_transfers(test_store(StoreConfig::default()));
}

#[test]
fn concurrent_transfers_preserve_total_redb() {
    let dir = TempDir::new("bank");
    concurrent_transfers(redb_store(&dir, StoreConfig::default()));
}

/// The same with one-phase commit off: every transfer prewrites, commits its primary, then its
/// secondary.
#[test]
fn concurrent_two_phase_transfers_preserve_total() {
    concurrent_transfers(test_store(StoreConfig { one_phase_commit: false, ..StoreConfig::default() }));
}

#[test]
fn concurrent_two_phase_transfers_preserve_total_redb() {
    let dir = TempDir::new("bank-2pc");
    concurrent_transfers(redb_store(&dir, StoreConfig { one_phase_commit: false, ..StoreConfig::default() }));
}

/// On an exclusive backend a transaction commits in one step, whether it writes one row or
/// several; the multi-row ones are a single atomic group, so a snapshot never sees half.
#[test]
fn transactions_on_an_exclusive_backend_use_one_phase_commit() {
    let dir = TempDir::new("1pc-multi");
    let store = redb_store(&dir, StoreConfig::default());
    store
        .run(|t| {
            for i in 0..5 {
                set_u64(t, "bank", &account(i), "bal:data", 10)?;
            }
            Ok(())
        })
        .unwrap();
    let m = store.metrics();
    assert_eq!((m.commits, m.one_pc_commits), (1, 1));
    let t = store.begin().unwrap();
    for i in 0..5 {
        assert_eq!(get_u64(&t, "bank", &account(i), "bal:data").unwrap(), 10);
    }
}

/// A transaction of [`ONE_PHASE_MAX_ROWS`] rows commits in one step (one round holds them
/// all); one row more prewrites. Prints how long the largest one-phase commit held its round.
#[test]
fn the_largest_one_phase_commit_and_the_smallest_two_phase_one() {
    let dir = TempDir::new("1pc-largest");
    let store = redb_store(&dir, StoreConfig::default());
    for (rows, one_phase) in [(ONE_PHASE_MAX_ROWS, 1), (ONE_PHASE_MAX_ROWS + 1, 0)] {
        let before = store.metrics();
        let started = std::time::Instant::now();
        store
            .run(|t| {
                for i in 0..rows {
                    set_u64(t, "wide", &format!("row{i:06}"), "n:data", rows as u64)?;
                }
                Ok(())
            })
            .unwrap();
        println!("{rows} rows: committed in {:?}", started.elapsed());
        let m = store.metrics();
        assert_eq!(
            (m.commits - before.commits, m.one_pc_commits - before.one_pc_commits),
            (1, one_phase),
            "{rows} rows"
        );
        let t = store.begin().unwrap();
        for i in [0, rows / 2, rows - 1] {
            assert_eq!(get_u64(&t, "wide", &format!("row{i:06}"), "n:data").unwrap(), rows as u64);
        }
    }
}

#[test]
fn single_row_transactions_use_one_phase_commit() {
    let dir = TempDir::new("1pc");
    let store = redb_store(&dir, StoreConfig::default());
    store.run(|t| set_u64(t, "bank", "Bob", "bal:data", 1)).unwrap();
    let m = store.metrics();
    assert_eq!((m.commits, m.one_pc_commits), (1, 1));
    let t = store.begin().unwrap();
    assert_eq!(get_u64(&t, "bank", "Bob", "bal:data").unwrap(), 1);
}
