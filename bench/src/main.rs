//! Percolator-vs-raw-redb benchmark: what the Percolator layer costs over the redb file below it.
//!
//! Measures, in one run, on redb files with the same settings (page cache size, durability),
//! created under [`std::env::temp_dir`] and removed at the end:
//!
//! 1. **Get**: a long-lived [`Transaction`] doing `get` on random preloaded rows, against one
//!    raw redb read transaction + `open_table` + `get` per lookup (what the Percolator redb
//!    backend does per read).
//! 2. **One-cell transaction** (single row: the one-phase-commit path) against a raw one-put
//!    redb write transaction, at durability `None` and `Fsync`/`Immediate`.
//! 3. **Two-row transaction** (the two-phase-commit path) against the same raw one-put commit.
//! 4. **Group commit**: 64 writer threads at `Fsync` on distinct rows; committed transactions
//!    and backend operations per backend commit (each redb commit is one fsync).
//! 5. **Oracle**: `store.oracle().next()` from 1 and 2 threads.
//!
//! Diagnostic figures explain the gaps: a raw redb range seek (the shape of the Percolator cell
//! read), the backend's `read_row` without the transaction layer, a raw commit that inserts a new
//! version key instead of overwriting, and (full run only) the group commit with 256 writers.
//!
//! Every figure is printed as a machine-readable `name value` line; lines starting with `#` are
//! for humans. Throughputs are the best of several alternating rounds (the machine this was
//! written for is small and shared, so the best round is the least disturbed one).
//!
//! Run: `cargo run --release -p percolator-bench` (about 1.5 minutes), or
//! `cargo run --release -p percolator-bench -- --quick` (about 15 seconds, a smoke test).

/// The host's allocator (`host/src/main.rs`), so that what is measured here is what it runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use percolator_store::backends::{Bigtable, RedbBigtable};
use percolator_store::{Durability, Metrics, RedbConfig, Store, StoreConfig, Transaction};
use redb::{Database, ReadableDatabase, TableDefinition};

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

const RAW: TableDefinition<&[u8], &[u8]> = TableDefinition::new("t");
const TABLE: &str = "t";
const COLUMN: &str = "c:v";
const VALUE: [u8; 16] = *b"0123456789abcdef";
const THREADS: usize = 64;

/// How long each measurement runs.
struct Plan {
    rows: usize,
    rounds: usize,
    warmup: Duration,
    get: Duration,
    write_none: Duration,
    write_fsync: Duration,
    concurrent: Duration,
    oracle: Duration,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            rows: 10_000,
            rounds: 3,
            warmup: Duration::from_millis(300),
            get: Duration::from_millis(1500),
            write_none: Duration::from_millis(1000),
            write_fsync: Duration::from_millis(2000),
            concurrent: Duration::from_secs(5),
            oracle: Duration::from_millis(1500),
        }
    }

    fn quick() -> Plan {
        Plan {
            rows: 2_000,
            rounds: 2,
            warmup: Duration::from_millis(100),
            get: Duration::from_millis(250),
            write_none: Duration::from_millis(200),
            write_fsync: Duration::from_millis(300),
            concurrent: Duration::from_millis(1500),
            oracle: Duration::from_millis(300),
        }
    }
}

/// A tiny xorshift generator (no dependency needed for picking random rows).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The benchmark's temporary directory, removed on drop (also when a measurement fails).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Res<TempDir> {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.subsec_nanos();
        let dir = std::env::temp_dir().join(format!("percolator-bench-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn row(i: usize) -> String {
    format!("row{i:08}")
}

/// [`raw_key`] of version `ts`: a new key per version, as the Percolator backend writes.
fn raw_version_key(i: usize, ts: u64) -> Vec<u8> {
    let mut k = raw_key(i);
    let n = k.len();
    k[n - 8..].copy_from_slice(&(!ts).to_be_bytes());
    k
}

/// A raw key shaped like the Percolator backend's version key of the same cell:
/// `enc(table) ‖ enc(row) ‖ enc(column) ‖ kind ‖ !ts` (same length and prefix structure).
fn raw_key(i: usize) -> Vec<u8> {
    let mut k = Vec::with_capacity(32);
    for part in [TABLE.as_bytes(), row(i).as_bytes(), COLUMN.as_bytes()] {
        k.extend_from_slice(part);
        k.extend_from_slice(&[0, 1]);
    }
    k.push(2);
    k.extend_from_slice(&(!1u64).to_be_bytes());
    k
}

fn redb_durability(d: Durability) -> redb::Durability {
    match d {
        Durability::Fsync => redb::Durability::Immediate,
        Durability::None => redb::Durability::None,
    }
}

fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::Fsync => "fsync",
        Durability::None => "none",
    }
}

/// Opens a raw redb file with the same settings the Percolator backend uses.
fn open_raw(path: &Path) -> Res<Database> {
    Ok(Database::builder().set_cache_size(RedbConfig::default().cache_bytes).create(path)?)
}

/// Opens a Percolator store, and keeps its backend (bench 1 also reads through the backend alone).
fn open_store(path: &Path, durability: Durability) -> Res<(Store, Arc<dyn Bigtable>)> {
    let backend: Arc<dyn Bigtable> =
        Arc::new(RedbBigtable::open(path, RedbConfig { durability, ..Default::default() })?);
    Ok((Store::with_backend(backend.clone(), StoreConfig::default())?, backend))
}

/// Loads `rows` rows into both stores, in transactions of 1000 rows.
fn preload(store: &Store, raw: &Database, durability: Durability, rows: usize) -> Res<()> {
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        store.run(|t| {
            for &i in chunk {
                t.set(TABLE, row(i), COLUMN, VALUE)?;
            }
            Ok(())
        })?;
        let mut tx = raw.begin_write()?;
        tx.set_durability(redb_durability(durability))?;
        {
            let mut t = tx.open_table(RAW)?;
            for &i in chunk {
                t.insert(raw_key(i).as_slice(), VALUE.as_slice())?;
            }
        }
        tx.commit()?;
    }
    Ok(())
}

/// Runs `op` for `warmup`, then for `dur`, and returns operations per second.
fn rate(warmup: Duration, dur: Duration, mut op: impl FnMut() -> Res<()>) -> Res<f64> {
    let until = Instant::now() + warmup;
    while Instant::now() < until {
        op()?;
    }
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        for _ in 0..16 {
            op()?;
        }
        n += 16;
        let elapsed = start.elapsed();
        if elapsed >= dur {
            return Ok(n as f64 / elapsed.as_secs_f64());
        }
    }
}

/// A measurement: runs once and returns a rate.
type Measure<'a> = Box<dyn FnMut() -> Res<f64> + 'a>;

/// Runs every measurement once per round, alternating, and returns the best rate of each.
fn best_of(rounds: usize, mut measures: Vec<Measure<'_>>) -> Res<Vec<f64>> {
    let mut best = vec![0f64; measures.len()];
    for _ in 0..rounds {
        for (b, m) in best.iter_mut().zip(&mut measures) {
            *b = b.max(m()?);
        }
    }
    Ok(best)
}

/// Prints one `name value` line: rates and counts as integers, ratios with three decimals.
fn print(name: &str, value: f64) {
    if name.ends_with("_per_s") || name.ends_with("conflicts") || name.ends_with("persists") {
        println!("{name} {value:.0}");
    } else {
        println!("{name} {value:.3}");
    }
}

fn bench_get(plan: &Plan, store: &Store, backend: &dyn Bigtable, raw: &Database) -> Res<()> {
    println!("# 1. Get of an existing cell: Percolator Transaction::get (through its reused read view)");
    println!("#    vs raw redb begin_read+open_table+get per get, and vs raw get in one reused read txn");
    let txn: Transaction = store.begin()?;
    let rows: Vec<String> = (0..plan.rows).map(row).collect();
    let keys: Vec<Vec<u8>> = (0..plan.rows).map(raw_key).collect();
    // The bounds of the Percolator backend's one-seek cell read: (cell, LOCK, !ts) .. (cell, DATA, !MAX).
    let bounds: Vec<(Vec<u8>, Vec<u8>)> = keys
        .iter()
        .map(|k| {
            let n = k.len();
            let (mut lo, mut hi) = (k.clone(), k.clone());
            lo[n - 9] = 1;
            lo[n - 8..].copy_from_slice(&(!txn.start_ts().raw()).to_be_bytes());
            hi[n - 9] = 3;
            hi[n - 8..].copy_from_slice(&0u64.to_be_bytes());
            (lo, hi)
        })
        .collect();
    let (mut r1, mut r2, mut r3, mut r4, mut r5) =
        (Rng(0x9E37_79B9_7F4A_7C15), Rng(0x2545_F491_4F6C_DD1D), Rng(7), Rng(11), Rng(13));
    // The raw store's best case: one read transaction reused for every get (what a Percolator
    // transaction's read view does).
    let reused = raw.begin_read()?.open_table(RAW)?;
    let best = best_of(
        plan.rounds,
        vec![
            Box::new(|| {
                rate(plan.warmup, plan.get, || {
                    let v = txn.get(TABLE, &rows[r1.below(rows.len())], COLUMN)?;
                    assert!(v.is_some(), "preloaded row missing");
                    std::hint::black_box(v);
                    Ok(())
                })
            }),
            Box::new(|| {
                rate(plan.warmup, plan.get, || {
                    let tx = raw.begin_read()?;
                    let t = tx.open_table(RAW)?;
                    let v = t.get(keys[r2.below(keys.len())].as_slice())?.map(|v| v.value().to_vec());
                    assert!(v.is_some(), "preloaded key missing");
                    std::hint::black_box(v);
                    Ok(())
                })
            }),
            Box::new(|| {
                rate(plan.warmup, plan.get, || {
                    let tx = raw.begin_read()?;
                    let t = tx.open_table(RAW)?;
                    let (lo, hi) = &bounds[r3.below(bounds.len())];
                    let v = match t.range::<&[u8]>(lo.as_slice()..hi.as_slice())?.next() {
                        Some(item) => Some(item?.1.value().to_vec()),
                        None => None,
                    };
                    assert!(v.is_some(), "preloaded key missing");
                    std::hint::black_box(v);
                    Ok(())
                })
            }),
            Box::new(|| {
                rate(plan.warmup, plan.get, || {
                    let v =
                        backend.read_row(TABLE, rows[r4.below(rows.len())].as_bytes(), &[COLUMN], txn.start_ts())?;
                    assert!(v[0].value().is_some(), "preloaded row missing");
                    std::hint::black_box(v);
                    Ok(())
                })
            }),
            Box::new(|| {
                rate(plan.warmup, plan.get, || {
                    let v = reused.get(keys[r5.below(keys.len())].as_slice())?.map(|v| v.value().to_vec());
                    assert!(v.is_some(), "preloaded key missing");
                    std::hint::black_box(v);
                    Ok(())
                })
            }),
        ],
    )?;
    let (perc, raw_get) = (best[0], best[1]);
    print("get_percolator_ops_per_s", perc);
    print("get_raw_redb_ops_per_s", raw_get);
    print("get_ratio", perc / raw_get);
    println!("# goal: get_ratio >= 0.9 (paper: 0.94). Diagnostics: where the gap goes");
    print("get_raw_redb_range_seek_ops_per_s", best[2]);
    print("get_percolator_backend_read_row_ops_per_s", best[3]);
    println!("# the raw store's best case: every get in one reused read transaction");
    print("get_raw_redb_reused_txn_ops_per_s", best[4]);
    print("get_ratio_vs_reused_txn", perc / best[4]);
    drop(txn);
    Ok(())
}

/// One raw redb write transaction with one put, at `durability`.
fn raw_put(raw: &Database, durability: Durability, key: &[u8]) -> Res<()> {
    let mut tx = raw.begin_write()?;
    tx.set_durability(redb_durability(durability))?;
    {
        let mut t = tx.open_table(RAW)?;
        t.insert(key, VALUE.as_slice())?;
    }
    tx.commit()?;
    Ok(())
}

fn bench_writes(plan: &Plan, store: &Store, raw: &Database, durability: Durability) -> Res<()> {
    let d = durability_name(durability);
    let dur = match durability {
        Durability::Fsync => plan.write_fsync,
        Durability::None => plan.write_none,
    };
    println!(
        "# 2./3. Write transactions at durability {d}: Percolator one-row and two-row (both one-phase commits on redb) vs raw one-put commit"
    );
    let rows: Vec<String> = (0..plan.rows).map(row).collect();
    let keys: Vec<Vec<u8>> = (0..plan.rows).map(raw_key).collect();
    let before = store.metrics();
    // (transactions, backend commits) of the one-row and two-row measurements.
    let (mut one, mut two) = ((0u64, 0u64), (0u64, 0u64));
    let counted = |acc: &mut (u64, u64), f: &mut dyn FnMut() -> Res<f64>| -> Res<f64> {
        let m0 = store.metrics();
        let r = f()?;
        let m1 = store.metrics();
        acc.0 += m1.commits - m0.commits;
        acc.1 += m1.backend_commits - m0.backend_commits;
        Ok(r)
    };
    let (mut r1, mut r2, mut r3, mut r4) = (Rng(0x1234_5678_9ABC_DEF1), Rng(0x5555_AAAA_1234_4321), Rng(3), Rng(5));
    let mut version = 2u64;
    let best = best_of(
        plan.rounds,
        vec![
            Box::new(|| {
                counted(&mut one, &mut || {
                    rate(plan.warmup, dur, || {
                        let r = &rows[r1.below(rows.len())];
                        store.run(|t| t.set(TABLE, r, COLUMN, VALUE))?;
                        Ok(())
                    })
                })
            }),
            Box::new(|| {
                counted(&mut two, &mut || {
                    rate(plan.warmup, dur, || {
                        let a = r2.below(rows.len());
                        let b = (a + 1 + r2.below(rows.len() - 1)) % rows.len();
                        store.run(|t| {
                            t.set(TABLE, &rows[a], COLUMN, VALUE)?;
                            t.set(TABLE, &rows[b], COLUMN, VALUE)
                        })?;
                        Ok(())
                    })
                })
            }),
            Box::new(|| rate(plan.warmup, dur, || raw_put(raw, durability, &keys[r3.below(keys.len())]))),
            Box::new(|| {
                rate(plan.warmup, dur, || {
                    version += 1;
                    raw_put(raw, durability, &raw_version_key(r4.below(rows.len()), version))
                })
            }),
        ],
    )?;
    let after = store.metrics();
    let raw_best = best[2];
    print(&format!("txn1_{d}_percolator_txns_per_s"), best[0]);
    print(&format!("txn1_{d}_raw_redb_commits_per_s"), raw_best);
    print(&format!("txn1_{d}_ratio"), best[0] / raw_best);
    print(&format!("txn1_{d}_backend_commits_per_txn"), per(one.1, one.0));
    print(&format!("txn2_{d}_percolator_txns_per_s"), best[1]);
    print(&format!("txn2_{d}_ratio"), best[1] / raw_best);
    print(&format!("txn2_{d}_backend_commits_per_txn"), per(two.1, two.0));
    print(&format!("txn_{d}_conflicts"), (after.conflicts - before.conflicts) as f64);
    println!(
        "# goal: txn1_{d}_ratio >= 0.5 (paper: 0.23); txn2: no goal (one atomic step since the multi-row one-phase commit; 3 sequential backend commits before)"
    );
    println!("# diagnostic: raw one-put commit that inserts a new version key (as MVCC does) instead of overwriting");
    print(&format!("txn1_{d}_raw_redb_new_key_commits_per_s"), best[3]);
    Ok(())
}

fn per(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

/// `threads` writers, each on its own rows, `rows_per_txn` rows per transaction (one-phase
/// commits on redb either way).
fn bench_concurrent(plan: &Plan, store: &Store, threads: usize, rows_per_txn: usize) -> Res<()> {
    let name = format!("conc{threads}_{rows_per_txn}row_fsync");
    println!("# 4. {threads} writer threads, {rows_per_txn}-row transactions on distinct rows, durability fsync");
    let stop = Arc::new(AtomicBool::new(false));
    let n_rows = plan.rows;
    let results: Vec<Res<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                let stop = stop.clone();
                s.spawn(move || -> Res<()> {
                    // Rows w, w + threads, w + 2*threads, …: no two threads share a row.
                    let mine: Vec<String> = (w..n_rows).step_by(threads).map(row).collect();
                    let mut k = 0;
                    while !stop.load(Ordering::Relaxed) {
                        store.run(|t| {
                            for j in 0..rows_per_txn {
                                t.set(TABLE, &mine[(k + j) % mine.len()], COLUMN, VALUE)?;
                            }
                            Ok(())
                        })?;
                        k += 1;
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(plan.warmup.max(Duration::from_millis(500)));
        let (m0, t0) = (store.metrics(), Instant::now());
        std::thread::sleep(plan.concurrent);
        let (m1, secs) = (store.metrics(), t0.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        report_concurrent(&name, &m0, &m1, secs);
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("writer thread panicked".into()))).collect()
    });
    results.into_iter().collect::<Res<Vec<()>>>()?;
    Ok(())
}

fn report_concurrent(name: &str, m0: &Metrics, m1: &Metrics, secs: f64) {
    let txns = m1.commits - m0.commits;
    let commits = m1.backend_commits - m0.backend_commits;
    let ops = m1.backend_ops - m0.backend_ops;
    print(&format!("{name}_txns_per_s"), txns as f64 / secs);
    print(&format!("{name}_fsyncs_per_s"), commits as f64 / secs);
    print(&format!("{name}_txns_per_fsync"), per(txns, commits));
    print(&format!("{name}_backend_ops_per_fsync"), per(ops, commits));
    print(&format!("{name}_conflicts"), (m1.conflicts - m0.conflicts) as f64);
}

/// Baseline for 4.: `THREADS` threads doing raw one-put Immediate commits (redb serializes them).
fn bench_concurrent_raw(plan: &Plan, raw: &Database) -> Res<()> {
    let stop = AtomicBool::new(false);
    let count = AtomicU64::new(0);
    let keys: Vec<Vec<u8>> = (0..plan.rows).map(raw_key).collect();
    let results: Vec<Res<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|w| {
                let (stop, count, keys) = (&stop, &count, &keys);
                s.spawn(move || -> Res<()> {
                    let mut k = w;
                    while !stop.load(Ordering::Relaxed) {
                        raw_put(raw, Durability::Fsync, &keys[k % keys.len()])?;
                        count.fetch_add(1, Ordering::Relaxed);
                        k += THREADS;
                    }
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(plan.warmup.max(Duration::from_millis(500)));
        let (c0, t0) = (count.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(plan.concurrent / 2);
        let (c1, secs) = (count.load(Ordering::Relaxed), t0.elapsed().as_secs_f64());
        stop.store(true, Ordering::Relaxed);
        print(&format!("conc{THREADS}_raw_redb_fsync_commits_per_s"), (c1 - c0) as f64 / secs);
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("writer thread panicked".into()))).collect()
    });
    results.into_iter().collect::<Res<Vec<()>>>()?;
    Ok(())
}

fn bench_oracle(plan: &Plan, store: &Store) -> Res<()> {
    println!("# 5. Oracle timestamps in-process (store durability fsync: a range persist every 2^20 timestamps)");
    let oracle = store.oracle();
    let run = |threads: usize| -> Res<f64> {
        let counts: Vec<Res<(u64, f64)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| -> Res<(u64, f64)> {
                        let until = Instant::now() + plan.warmup;
                        while Instant::now() < until {
                            for _ in 0..4096 {
                                std::hint::black_box(oracle.next()?);
                            }
                        }
                        let start = Instant::now();
                        let mut n = 0u64;
                        while start.elapsed() < plan.oracle {
                            for _ in 0..4096 {
                                std::hint::black_box(oracle.next()?);
                            }
                            n += 4096;
                        }
                        Ok((n, start.elapsed().as_secs_f64()))
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("oracle thread panicked".into()))).collect()
        });
        let mut total = 0f64;
        for c in counts {
            let (n, secs) = c?;
            total += n as f64 / secs;
        }
        Ok(total)
    };
    let (mut one, mut two) = (0f64, 0f64);
    let persists0 = oracle.persists();
    for _ in 0..plan.rounds {
        one = one.max(run(1)?);
        two = two.max(run(2)?);
    }
    print("oracle_1t_ts_per_s", one);
    print("oracle_2t_ts_per_s", two);
    print("oracle_high_water_mark_persists", (oracle.persists() - persists0) as f64);
    println!("# goal: oracle >= 20M/s");
    Ok(())
}

fn main() -> Res<()> {
    let quick = std::env::args().skip(1).any(|a| a == "--quick");
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let started = Instant::now();
    let dir = TempDir::new()?;
    println!("# percolator-bench{} in {}", if quick { " --quick" } else { "" }, dir.0.display());
    println!("# rows {}, rounds {} (best round reported), {THREADS} writer threads in 4.", plan.rows, plan.rounds);

    {
        let (store, backend) = open_store(&dir.file("perc-none.redb"), Durability::None)?;
        let raw = open_raw(&dir.file("raw-none.redb"))?;
        preload(&store, &raw, Durability::None, plan.rows)?;
        bench_get(&plan, &store, backend.as_ref(), &raw)?;
        bench_writes(&plan, &store, &raw, Durability::None)?;
    }
    {
        let (store, _) = open_store(&dir.file("perc-fsync.redb"), Durability::Fsync)?;
        let raw = open_raw(&dir.file("raw-fsync.redb"))?;
        preload(&store, &raw, Durability::Fsync, plan.rows)?;
        bench_writes(&plan, &store, &raw, Durability::Fsync)?;
        bench_concurrent(&plan, &store, THREADS, 1)?;
        bench_concurrent(&plan, &store, THREADS, 2)?;
        bench_concurrent_raw(&plan, &raw)?;
        if !quick {
            println!("# diagnostic: batches hold about half the writers (see BENCHMARKS.md); 4x the writers:");
            bench_concurrent(&plan, &store, 4 * THREADS, 1)?;
        }
        bench_oracle(&plan, &store)?;
    }
    print("bench_seconds", started.elapsed().as_secs_f64());
    Ok(())
}
