//! The change feed on redb: how fast a consumer reads it, what logging costs the writers, and
//! how long a change takes from its commit to a follower.
//!
//! On one redb store (durability none, so the disk's noise stays out of the ratios):
//! 1. **write cost**: the same transactions (10 rows each, 4 writer threads) with the column
//!    logged and not logged, alternated; prints the ratio of their rates;
//! 2. **read rate**: the whole backlog read from the oldest change in pages of 10,000, and the
//!    same reads while the writers keep writing (a follower at the head of the log);
//! 3. **latency**: a writer commits one change every millisecond (≈ 1,000 changes/s) while a
//!    follower polls the feed every millisecond; the time from a commit's return to the change
//!    in a page, p50 / p99 / max.
//!
//! `cargo run --release -p percolator-bench --bin changes` (about a minute); `-- --quick` (a
//! smoke test); `-- --write-only logged|unlogged` writes 2,000 transactions on one thread and
//! nothing else (for `valgrind --tool=callgrind`, whose instruction counts this noisy machine
//! does not disturb).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use percolator_store::{ChangeToken, Durability, RedbConfig, Store, StoreConfig, Timestamp};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const TABLE: &str = "t";
const COLUMN: &str = "c:v";
const ROWS_PER_TXN: u64 = 10;
const WRITERS: u64 = 4;

fn open(dir: &std::path::Path, name: &str, logged: bool) -> Res<Store> {
    let path = dir.join(format!("{name}.redb"));
    let _ = std::fs::remove_file(&path);
    let store =
        Store::open(&path, StoreConfig::default(), RedbConfig { durability: Durability::None, ..Default::default() })?;
    if logged {
        store.set_change_log([(TABLE.to_owned(), COLUMN.to_owned())].into_iter().collect())?;
    }
    Ok(store)
}

/// `txns` transactions of [`ROWS_PER_TXN`] rows from [`WRITERS`] threads; returns the seconds.
fn write(store: &Store, txns: u64, offset: u64) -> Res<f64> {
    let started = Instant::now();
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = store.clone();
            std::thread::spawn(move || -> Res<()> {
                for i in (w..txns).step_by(WRITERS as usize) {
                    store.run(|t| {
                        for r in 0..ROWS_PER_TXN {
                            let row = format!("r{:09}", (offset + i) * ROWS_PER_TXN + r);
                            t.set(TABLE, row, COLUMN, format!("value of transaction {i}, row {r}"))?;
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")??;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Reads the feed from `token` until its position reaches `upto`; returns (changes, seconds, token).
fn read(store: &Store, mut token: ChangeToken, upto: Timestamp) -> Res<(u64, f64, ChangeToken)> {
    let started = Instant::now();
    let mut n = 0u64;
    while token.position().is_none_or(|p| p < upto) {
        let page = store.changes(TABLE, None, &token, 10_000)?;
        n += page.changes.len() as u64;
        token = page.next;
    }
    Ok((n, started.elapsed().as_secs_f64(), token))
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let txns = if quick { 500 } else { 10_000 };
    let dir = std::env::temp_dir().join(format!("percolator-bench-changes-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    if let Some(i) = args.iter().position(|a| a == "--write-only") {
        let logged = match args.get(i + 1).map(String::as_str) {
            Some("logged") => true,
            Some("unlogged") => false,
            other => return Err(format!("--write-only takes logged or unlogged, not {other:?}").into()),
        };
        let store = open(&dir, "write-only", logged)?;
        for i in 0..2_000u64 {
            store.run(|t| {
                for r in 0..ROWS_PER_TXN {
                    t.set(
                        TABLE,
                        format!("r{:09}", i * ROWS_PER_TXN + r),
                        COLUMN,
                        format!("value of transaction {i}, row {r}"),
                    )?;
                }
                Ok(())
            })?;
        }
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
        return Ok(());
    }

    // 1. What logging costs the writers: alternated, twice each.
    let (mut on, mut off) = (0.0, 0.0);
    for round in 0..2 {
        let s = open(&dir, &format!("off{round}"), false)?;
        off += write(&s, txns / 2, 0)?;
        drop(s);
        let s = open(&dir, &format!("on{round}"), true)?;
        on += write(&s, txns / 2, 0)?;
    }
    let changes = (txns * ROWS_PER_TXN) as f64;
    println!("changes_write_logged_per_s {:.0}", changes / on);
    println!("changes_write_unlogged_per_s {:.0}", changes / off);
    println!("changes_write_logged_over_unlogged {:.2}", off / on);

    // 2. Reading the backlog, then reading while writers write.
    let store = open(&dir, "read", true)?;
    write(&store, txns, 0)?;
    let end = store.oracle().next()?;
    let (n, secs, token) = read(&store, ChangeToken::origin(), end)?;
    assert_eq!(n, txns * ROWS_PER_TXN, "the feed holds every change once");
    println!("changes_read_backlog_per_s {:.0}", n as f64 / secs);
    let writing = {
        let store = store.clone();
        std::thread::spawn(move || write(&store, txns, txns))
    };
    let mut followed = 0u64;
    let mut token = token;
    let started = Instant::now();
    while !writing.is_finished() {
        let page = store.changes(TABLE, None, &token, 10_000)?;
        followed += page.changes.len() as u64;
        token = page.next;
    }
    writing.join().map_err(|_| "the writers panicked")??;
    let (rest, _, _) = read(&store, token, store.oracle().next()?)?;
    followed += rest;
    assert_eq!(followed, txns * ROWS_PER_TXN, "the follower saw every change once");
    println!("changes_follow_while_writing_per_s {:.0}", followed as f64 / started.elapsed().as_secs_f64());

    // 3. Commit → follower latency at about 1,000 changes/s.
    let committed: Arc<Mutex<Vec<(Timestamp, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, committed, stop) = (store.clone(), committed.clone(), stop.clone());
        std::thread::spawn(move || -> Res<()> {
            let mut i = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                next += Duration::from_millis(1);
                let mut t = store.begin()?;
                t.set(TABLE, format!("live{i:09}"), COLUMN, format!("live {i}"))?;
                let ts = t.commit()?;
                committed.lock().map_err(|_| "poisoned")?.push((ts, Instant::now()));
                i += 1;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            Ok(())
        })
    };
    let mut token = store.changes(TABLE, None, &ChangeToken::origin(), 1)?.next;
    // Start at the head: skip the backlog.
    let head = store.oracle().next()?;
    while token.position().is_some_and(|p| p < head) {
        token = store.changes(TABLE, None, &token, 100_000)?.next;
    }
    let mut seen_at: Vec<(Timestamp, Instant)> = Vec::new();
    let measure = if quick { Duration::from_secs(2) } else { Duration::from_secs(10) };
    let started = Instant::now();
    while started.elapsed() < measure {
        let page = store.changes(TABLE, None, &token, 10_000)?;
        let now = Instant::now();
        seen_at.extend(page.changes.iter().map(|c| (c.commit_ts, now)));
        token = page.next;
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().map_err(|_| "the writer panicked")??;
    let committed = committed.lock().map_err(|_| "poisoned")?;
    let by_ts: std::collections::HashMap<Timestamp, Instant> = committed.iter().copied().collect();
    // Only changes committed once the follower was at the head (the ones committed while it
    // skipped the backlog would count the skip).
    let mut lat: Vec<Duration> = seen_at
        .iter()
        .filter_map(|(ts, seen)| by_ts.get(ts).filter(|c| **c >= started).map(|c| seen.saturating_duration_since(*c)))
        .collect();
    lat.sort();
    let rate = lat.len() as f64 / measure.as_secs_f64();
    println!("changes_latency_rate_per_s {rate:.0}");
    println!("changes_latency_p50_ms {:.2}", percentile(&lat, 0.5).as_secs_f64() * 1e3);
    println!("changes_latency_p99_ms {:.2}", percentile(&lat, 0.99).as_secs_f64() * 1e3);
    println!("changes_latency_max_ms {:.2}", lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
