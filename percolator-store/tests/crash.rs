//! A child process doing transfers on a durable redb store is killed with SIGKILL mid-commit,
//! again and again. After every kill the reopened store is consistent (the total is unchanged),
//! no transfer the child saw commit is lost, and the oracle never hands out a timestamp twice.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use percolator_store::backends::RedbBigtable;
use percolator_store::{Durability, RedbConfig, Store, StoreConfig};

const ACCOUNTS: u64 = 6;
const INITIAL: u64 = 1000;
const ENV: &str = "PERCOLATOR_CRASH_STORE";

fn open(path: &Path) -> TestStore {
    let config = StoreConfig { lock_ttl: Duration::from_millis(300), ..StoreConfig::default() };
    TestStore::open(path, config, Durability::Fsync)
}

/// The child: transfers from several threads forever, printing what committed.
#[test]
#[ignore = "run by crash_recovery_after_sigkill as a child process"]
fn crash_child() {
    let Ok(path) = std::env::var(ENV) else { return };
    transfer_forever(&open(Path::new(&path)));
}

/// Transfers between the accounts from four threads until the process is killed, printing
/// `COMMITTED id start commit` for each transfer once its commit returned.
fn transfer_forever(store: &TestStore) {
    let next_id = AtomicU64::new(std::process::id() as u64 * 1_000_000);
    let out = std::sync::Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let (store, next_id, out) = (&store, &next_id, &out);
            s.spawn(move || {
                let mut n = w + 1;
                loop {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let from = (n >> 33) % ACCOUNTS;
                    let to = (from + 1 + (n >> 40) % (ACCOUNTS - 1)) % ACCOUNTS;
                    let id = next_id.fetch_add(1, Ordering::Relaxed);
                    let r = store.begin().and_then(|mut t| {
                        let a = get_u64(&t, "bank", &format!("acct{from}"), "bal:data")?;
                        let b = get_u64(&t, "bank", &format!("acct{to}"), "bal:data")?;
                        let amount = (n >> 52) % 20;
                        let amount = amount.min(a);
                        set_u64(&mut t, "bank", &format!("acct{from}"), "bal:data", a - amount)?;
                        set_u64(&mut t, "bank", &format!("acct{to}"), "bal:data", b + amount)?;
                        t.set("log", id.to_string(), "t:amount", amount.to_be_bytes())?;
                        let start = t.start_ts();
                        t.commit().map(|c| (start, c))
                    });
                    if let Ok((start, commit)) = r {
                        let mut o = out.lock().unwrap();
                        writeln!(o, "COMMITTED {id} {} {}", start.raw(), commit.raw()).unwrap();
                        o.flush().unwrap();
                    }
                }
            });
        }
    });
}

/// A fresh store at `path` holding the accounts, closed cleanly.
fn accounts(path: &Path) {
    let store = open(path);
    store
        .run(|t| {
            for i in 0..ACCOUNTS {
                set_u64(t, "bank", &format!("acct{i}"), "bal:data", INITIAL)?;
            }
            Ok(())
        })
        .unwrap();
}

/// Reads a killed child's lines to its end; returns the ids of the transfers it saw commit,
/// after checking each timestamp was issued once (across `timestamps`).
fn committed_by(rx: std::sync::mpsc::Receiver<String>, timestamps: &mut BTreeSet<u64>, what: &str) -> Vec<String> {
    let mut committed = Vec::new();
    // (The test harness's own words may start the child's first line.)
    for l in rx.iter().filter_map(|l| l.find("COMMITTED ").map(|at| l[at..].to_owned())) {
        let parts: Vec<&str> = l.split(' ').collect();
        committed.push(parts[1].to_string());
        for ts in &parts[2..4] {
            assert!(timestamps.insert(ts.parse().unwrap()), "{what}: timestamp {ts} issued twice");
        }
    }
    committed
}

/// The store at `path` after a kill: the total is unchanged, every transfer in `committed` is
/// there, the oracle resumed above every issued timestamp, and GC leaves no lock behind.
fn check_after_kill(path: &Path, committed: &[String], timestamps: &BTreeSet<u64>, what: &str) {
    let store = open(path);
    let t = store.begin().unwrap();
    assert!(
        t.start_ts().raw() > *timestamps.last().unwrap(),
        "{what}: the oracle resumed above every issued timestamp"
    );
    let total: u64 = (0..ACCOUNTS).map(|i| get_u64(&t, "bank", &format!("acct{i}"), "bal:data").unwrap()).sum();
    assert_eq!(total, ACCOUNTS * INITIAL, "{what}: total after SIGKILL");
    for id in committed {
        assert!(t.get("log", id, "t:amount").unwrap().is_some(), "{what}: committed transfer {id} lost");
    }
    drop(t);
    // Whatever the child left locked is cleaned by GC below the safepoint.
    let gc = store.gc().unwrap();
    assert!(!gc.deferred);
    let versions = store.backend.scan_versions(None, usize::MAX).unwrap();
    assert!(versions.iter().all(|r| r.cells.iter().all(|c| c.locks.is_empty())), "{what}: locks left after GC");
}

/// Waits until the child prints a line ending in `marker` (the test harness prints lines of
/// its own first); panics, naming `what` it waited for, if it stops or is silent for 120 s.
fn wait_for_line(rx: &std::sync::mpsc::Receiver<String>, marker: &str, what: &str) {
    loop {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) if l.ends_with(marker) => return,
            Ok(_) => {}
            Err(e) => panic!("{what}: the child stopped before printing {marker}: {e}"),
        }
    }
}

/// Kills this process with SIGKILL (no destructor runs, as in a crash).
fn kill_self() -> ! {
    let _ = std::process::Command::new("kill").args(["-KILL", &std::process::id().to_string()]).status();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn crash_recovery_after_sigkill() {
    let dir = TempDir::new("crash");
    let path = dir.file("store.redb");
    accounts(&path);
    let mut committed: Vec<String> = Vec::new();
    let mut timestamps: BTreeSet<u64> = BTreeSet::new();
    for round in 0..6u64 {
        let what = format!("round {round}");
        let (mut child, rx) = spawn_child_test("crash_child", ENV, path.to_str().unwrap());
        // Let it commit a few transfers (however slow the machine), then kill it at an
        // arbitrary point a little later, mid-commit as likely as not.
        let mut first = Vec::new();
        while first.len() < 5 {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) => first.push(l),
                Err(e) => panic!("{what}: the child stopped committing: {e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(20 + 37 * round));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // The reader ends at the child's EOF: every line it printed.
        let (tx, all) = std::sync::mpsc::channel();
        for l in first.into_iter().chain(rx.iter()) {
            tx.send(l).unwrap();
        }
        drop(tx);
        let this_round = committed_by(all, &mut timestamps, &what);
        assert!(!this_round.is_empty(), "{what}: the child committed nothing before the kill");
        committed.extend(this_round);
        check_after_kill(&path, &committed, &timestamps, &what);
    }
    assert!(committed.len() >= 6);
}

#[cfg(feature = "failpoints")]
const REDO_ENV: &str = "PERCOLATOR_CRASH_REDO";

/// The child of [`a_kill_at_each_step_of_a_logged_round_loses_no_acknowledged_transfer`]:
/// `failpoint|n|path` — transfers as [`crash_child`] does, and kills itself with SIGKILL the
/// `n`th time it passes `failpoint`.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "run by a_kill_at_each_step_of_a_logged_round_loses_no_acknowledged_transfer as a child process"]
fn redo_failpoint_child() {
    let Ok(spec) = std::env::var(REDO_ENV) else { return };
    let mut parts = spec.splitn(3, '|');
    let (failpoint, n, path) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let n: u64 = n.parse().unwrap();
    let store = open(Path::new(path));
    let passes = AtomicU64::new(0);
    let name = failpoint.to_owned();
    fail::cfg_callback(failpoint, move || {
        if passes.fetch_add(1, Ordering::SeqCst) + 1 == n {
            println!("AT {name}");
            std::io::stdout().flush().unwrap();
            kill_self();
        }
    })
    .unwrap();
    transfer_forever(&store);
}

/// SIGKILL at each step of a round made durable by the redo log — after the append (before
/// its fsync), after the fsync (before the round is published to the memtable), after the
/// publish (before the answer) — and in a checkpoint, after the turn of the log's files but
/// before redb's commit (rounds after `redo/applied` in both files), and after the commit
/// before the emptying of the file it held: every transfer the child saw commit is there after
/// the reopen, the total holds,
/// and the log is emptied by the open's checkpoint. Rounds write nothing to redb (only
/// checkpoints do), so without the replay the last rounds' transfers would be lost.
#[cfg(feature = "failpoints")]
#[test]
fn a_kill_at_each_step_of_a_logged_round_loses_no_acknowledged_transfer() {
    for (failpoint, n) in [
        ("redo-after-append", 40),
        ("redo-after-fsync", 40),
        ("redo-after-commit", 40),
        ("checkpoint-before-commit", 1),
        ("redo-checkpoint-before-truncate", 1),
    ] {
        let dir = TempDir::new(failpoint);
        let path = dir.file("store.redb");
        accounts(&path);
        let log = dir.file("store.redb.redo");
        assert!(!log.exists(), "a clean close removes the redo log");
        let (mut child, rx) =
            spawn_child_test("redo_failpoint_child", REDO_ENV, &format!("{failpoint}|{n}|{}", path.display()));
        let (tx, lines) = std::sync::mpsc::channel();
        let mut at = false;
        loop {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(l) => {
                    at |= l.ends_with(&format!("AT {failpoint}"));
                    tx.send(l).unwrap();
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("{failpoint}: the child neither stopped nor printed for 120 s: {e}"),
            }
        }
        child.wait().unwrap();
        drop(tx);
        assert!(at, "{failpoint}: the child did not reach the failpoint");
        // Each of the log's two files starts with a 16-byte header.
        let logged: u64 =
            [&log, &dir.file("store.redb.redo.1")].iter().map(|f| std::fs::metadata(f).map_or(0, |m| m.len())).sum();
        assert!(logged > 32, "{failpoint}: the kill left nothing in the redo log to replay");
        let mut timestamps = BTreeSet::new();
        let committed = committed_by(lines, &mut timestamps, failpoint);
        assert!(!committed.is_empty(), "{failpoint}: the child committed nothing before the kill");
        check_after_kill(&path, &committed, &timestamps, failpoint);
        assert!(!log.exists(), "{failpoint}: the log was not emptied and removed by the open and close");
    }
}

const TORN_ENV: &str = "PERCOLATOR_CRASH_TORN";

/// The child of the redo log's damage tests: 30 commits at durability fsync (no checkpoint
/// meanwhile), each printed once it returned, then SIGKILL.
#[test]
#[ignore = "run by the redo log's damage tests as a child process"]
fn commit_then_kill_child() {
    let Ok(path) = std::env::var(TORN_ENV) else { return };
    let redb = RedbConfig { checkpoint_every: Some(Duration::from_secs(3600)), ..RedbConfig::default() };
    let store = Store::open(Path::new(&path), StoreConfig::default(), redb).unwrap();
    for i in 0..30u64 {
        store.run(|t| set_u64(t, "t", &format!("r{i}"), "c:v", i)).unwrap();
        println!("COMMITTED {i}");
        std::io::stdout().flush().unwrap();
    }
    kill_self();
}

/// Runs [`commit_then_kill_child`] on a fresh store; returns the store's and the log's paths.
fn thirty_commits_then_a_kill(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let path = dir.file("store.redb");
    let (mut child, rx) = spawn_child_test("commit_then_kill_child", TORN_ENV, path.to_str().unwrap());
    let committed = rx.iter().filter(|l| l.contains("COMMITTED ")).count();
    child.wait().unwrap();
    assert_eq!(committed, 30, "the child's commits");
    let log = dir.file("store.redb.redo");
    assert!(std::fs::metadata(&log).unwrap().len() > 0, "the commits are in the redo log");
    (path, log)
}

/// A crash mid-append leaves a torn last record (its fsync never returned, so nobody was
/// answered): the open cuts it off, keeps every acknowledged commit, and the store goes on.
#[test]
fn a_torn_tail_of_the_redo_log_is_cut_off_and_every_acknowledged_commit_survives() {
    let dir = TempDir::new("redo-torn");
    let (path, log) = thirty_commits_then_a_kill(&dir);
    // A record that declares 1,000 bytes, of which 10 made it to the disk.
    let mut torn = 1000u32.to_le_bytes().to_vec();
    torn.extend_from_slice(&[0xab; 14]);
    std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(&torn).unwrap();
    for pass in ["after the tear", "after more commits"] {
        let store = open(&path);
        let t = store.begin().unwrap();
        for i in 0..30u64 {
            assert_eq!(get_u64(&t, "t", &format!("r{i}"), "c:v").unwrap(), i, "{pass}: r{i}");
        }
        drop(t);
        store.run(|t| set_u64(t, "t", "more", "c:v", 1)).unwrap();
    }
}

/// The record offsets of a redo log: after its 16-byte header, each record is
/// `len: u32 ‖ crc ‖ len bytes`.
fn record_starts(log: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 16;
    while at + 8 <= log.len() {
        starts.push(at);
        at += 8 + u32::from_le_bytes(log[at..at + 4].try_into().unwrap()) as usize;
    }
    starts
}

/// A record damaged in the middle of the log ends it there, as a tear does (PostgreSQL's WAL
/// replay stops the same way; a disk that damages bytes after their fsync returned is beyond
/// what the log can mend): the store opens with the rounds before it, the commits it holds are
/// a prefix of those made (none after a missing one), and a log given to the wrong store file
/// is refused, naming both.
#[test]
fn a_damaged_record_ends_the_redo_log_and_the_store_holds_a_prefix_of_the_commits() {
    let dir = TempDir::new("redo-damaged");
    let (path, log) = thirty_commits_then_a_kill(&dir);
    let mut bytes = std::fs::read(&log).unwrap();
    let starts = record_starts(&bytes);
    assert!(starts.len() >= 30, "{} records for 30 commits", starts.len());
    let middle = starts[starts.len() / 2];
    bytes[middle + 12] ^= 0xff; // inside the record's seq or changes: its crc fails
    std::fs::write(&log, &bytes).unwrap();
    let store = open(&path);
    let t = store.begin().unwrap();
    let present: Vec<bool> = (0..30u64).map(|i| t.get("t", format!("r{i}"), "c:v").unwrap().is_some()).collect();
    let kept = present.iter().take_while(|p| **p).count();
    assert!(present[kept..].iter().all(|p| !p), "the commits kept are not a prefix: {present:?}");
    assert!(kept > 0 && kept < 30, "{kept} of 30 commits kept, the log cut in the middle");
    drop(t);
    drop(store);

    // Another store's log beside this store file: refused, naming the log and the store.
    let other = TempDir::new("redo-other");
    let (_, other_log) = thirty_commits_then_a_kill(&other);
    std::fs::copy(&other_log, &log).unwrap();
    let e = RedbBigtable::open(&path, RedbConfig::default()).err().expect("another store's log").to_string();
    assert!(e.contains(&log.display().to_string()) && e.contains("belongs to another store file"), "{e}");
}

const QUIET_ENV: &str = "PERCOLATOR_CRASH_QUIET_STORE";

/// The child: at durability none, a burst of commits, then quiet; it says when it has been
/// quiet for two seconds and waits to be killed.
#[test]
#[ignore = "run by at_durability_none_a_crash_after_a_quiet_second_loses_nothing as a child process"]
fn quiet_child() {
    let Ok(path) = std::env::var(QUIET_ENV) else { return };
    let store = TestStore::open(Path::new(&path), StoreConfig::default(), Durability::None);
    // Past the first second after opening, as a host's load would be: without a commit
    // after it, nothing made these durable.
    std::thread::sleep(Duration::from_millis(1200));
    for i in 0..20u64 {
        store.run(|t| set_u64(t, "t", &format!("r{i}"), "c:v", i)).unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    println!("QUIET");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn at_durability_none_a_crash_after_a_quiet_second_loses_nothing() {
    let dir = TempDir::new("crash-quiet");
    let path = dir.file("store.redb");
    let (mut child, rx) = spawn_child_test("quiet_child", QUIET_ENV, path.to_str().unwrap());
    wait_for_line(&rx, "QUIET", "the quiet second");
    child.kill().unwrap(); // SIGKILL: no clean close
    child.wait().unwrap();
    let store = TestStore::open(&path, StoreConfig::default(), Durability::None);
    let t = store.begin().unwrap();
    for i in 0..20u64 {
        assert_eq!(
            get_u64(&t, "t", &format!("r{i}"), "c:v").unwrap(),
            i,
            "r{i}: a commit two quiet seconds old was lost"
        );
    }
}

#[cfg(feature = "failpoints")]
const COMPACT_ENV: &str = "PERCOLATOR_CRASH_COMPACT";

/// Incompressible bytes, different per row and round.
#[cfg(feature = "failpoints")]
fn incompressible(row: u64, round: u64) -> Vec<u8> {
    noise(row << 32 | round, 2048)
}

#[cfg(feature = "failpoints")]
const COMPACT_ROWS: u64 = 300;
#[cfg(feature = "failpoints")]
const COMPACT_ROUNDS: u64 = 30;

/// The child of [`a_kill_while_a_quiet_store_compacts_its_file_loses_nothing`]: writes
/// `COMPACT_ROUNDS` versions of `COMPACT_ROWS` rows, each into redb, collects the old ones (18 MB
/// of the file's pages, past the compaction's 16 MiB), then rests until its
/// checkpointer compacts the file (printing `COMPACTING` as it starts) and the parent kills it.
#[cfg(feature = "failpoints")]
#[test]
#[ignore = "run by a_kill_while_a_quiet_store_compacts_its_file_loses_nothing as a child process"]
fn compaction_child() {
    let Ok(path) = std::env::var(COMPACT_ENV) else { return };
    fail::cfg_callback("redb-compact-start", || {
        println!("COMPACTING");
        std::io::stdout().flush().unwrap();
    })
    .unwrap();
    let config = RedbConfig {
        durability: Durability::Fsync,
        checkpoint_every: Some(Duration::from_millis(50)),
        compact_when_quiet: Some(Duration::from_millis(300)),
        ..RedbConfig::default()
    };
    let redb = std::sync::Arc::new(RedbBigtable::open(&path, config).unwrap());
    let store = TestStore::new(redb.clone(), StoreConfig::default());
    // Each round reaches the file (else, on a loaded machine, GC may remove versions that never
    // left the memtable, and there is nothing to compact).
    write_rounds_into(&store, &redb, COMPACT_ROWS, COMPACT_ROUNDS, incompressible);
    store.gc().unwrap();
    redb.checkpoint().unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// SIGKILL while the host compacts its open file (`docs/design.md`, "GC", compaction when
/// quiet), at several delays after the compaction started (some land in redb's moves, some
/// after): the store opens, every row reads its last value, and an offline compaction of it
/// still works.
#[cfg(feature = "failpoints")]
#[test]
fn a_kill_while_a_quiet_store_compacts_its_file_loses_nothing() {
    for delay_ms in [0u64, 2, 10, 40] {
        let dir = TempDir::new("compact-kill");
        let path = dir.file("store.redb");
        let (mut child, rx) = spawn_child_test("compaction_child", COMPACT_ENV, path.to_str().unwrap());
        wait_for_line(&rx, "COMPACTING", &format!("delay {delay_ms} ms: a compaction"));
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        {
            let store = open(&path);
            assert!(
                !dir.file("store.redb.compacting").exists(),
                "delay {delay_ms} ms: the open removed a cut-short copy"
            );
            let t = store.begin().unwrap();
            for r in 0..COMPACT_ROWS {
                let got = t.get("t", format!("r{r:04}"), "c:v").unwrap();
                assert_eq!(got, Some(incompressible(r, COMPACT_ROUNDS - 1)), "delay {delay_ms} ms: row {r}");
            }
        }
        let c = Store::compact(&path).unwrap();
        assert!(c.bytes_after <= c.bytes_before, "delay {delay_ms} ms: {c:?}");
    }
}
