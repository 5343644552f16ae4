//! Hot keys: C writers (64) adding 1 to ONE counter row, at fsync durability, on
//! percolator-store with a combine column, percolator-store by read-modify-write, PostgreSQL
//! and SQLite.
//!
//! Each writer commits one increment per transaction, for a fixed time. Durability: an
//! answered commit survives power loss — percolator-store: redb `Durability::Fsync` (one fsync
//! per group commit); PostgreSQL: `fsync=on`, `synchronous_commit=on`; SQLite: WAL,
//! `synchronous=FULL`.
//! - **combine**: `Transaction::combine(…, Delta::Int(1))` on a column declared
//!   `sum`/`i64` with `Store::set_combined`, one transaction per increment, the scanner (and
//!   so the folder) running. A conflict is an error here: combines never conflict. After the
//!   run, the folder is waited for (`Store::wait_quiescent`; the time it took is reported), and
//!   the folded total is checked to equal the increments committed, every delta folded once.
//! - **rmw**: read-modify-write, `get`, +1, `set`, retried by `Store::run` (its retry policy:
//!   exponential backoff with jitter), with its attempts raised so that no increment gives up.
//! - **postgres**: `UPDATE counter SET n = n + 1 WHERE id = 1` (autocommit, READ COMMITTED: a
//!   writer waits for the row lock and never fails), `pgbench -c C -j 2`, on a server of the
//!   benchmark's own (`pg.rs`).
//! - **sqlite**: C threads sharing one connection behind a mutex (as in `bank.rs`),
//!   `BEGIN IMMEDIATE; UPDATE counter SET n = n + 1 WHERE id = 1; COMMIT`.
//!
//! Reported per system: committed increments/s, retries (attempts that conflicted) per
//! committed increment, CPU µs per committed increment and cores (CPU time over wall time) of
//! everything doing the work, read from `/proc` (this process; for PostgreSQL its server
//! processes and pgbench), and the ratios of combine (and rmw) over PostgreSQL and SQLite,
//! all measured in the same run. For combine, the CPU includes the folder's catch-up after
//! the writers stopped. Before and after, the disk's median fsync latency (4 KiB write +
//! `fdatasync`), which bounds every system here and moves on a shared machine.
//!
//! `cargo run --release -p percolator-bench --bin counter` (10 s per system, about a minute);
//! `-- --quick` (1 s runs: a smoke test); `-- --secs S --clients C --systems
//! combine,rmw,postgres,sqlite`.

use std::path::Path;
use std::time::{Duration, Instant};

use percolator_store::{
    CombineOp, CombineSpec, CombineType, Delta, Durability, RedbConfig, RetryPolicy, ScannerConfig, Store, StoreConfig,
};

#[path = "../clients.rs"]
mod clients;
#[path = "../pg.rs"]
mod pg;
#[path = "../procfs.rs"]
mod procfs;

use clients::{Res, Run, TempDir, parse_list, print, run_threads, self_cpu};
use pg::Postgres;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Combine,
    Rmw,
    Postgres,
    Sqlite,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Combine => "combine",
            System::Rmw => "rmw",
            System::Postgres => "postgres",
            System::Sqlite => "sqlite",
        }
    }
}

struct Plan {
    secs: f64,
    clients: usize,
    systems: Vec<System>,
}

fn plan() -> Res<Plan> {
    let mut p =
        Plan { secs: 10.0, clients: 64, systems: vec![System::Combine, System::Rmw, System::Postgres, System::Sqlite] };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => p.secs = 1.0,
            "--secs" => p.secs = value()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--clients" => {
                p.clients = value()?.parse().ok().filter(|&n| n > 0).ok_or("--clients: a number above 0")?;
            }
            "--systems" => {
                p.systems = parse_list(&value()?, "systems", |x| match x {
                    "combine" => Some(System::Combine),
                    "rmw" => Some(System::Rmw),
                    "postgres" => Some(System::Postgres),
                    "sqlite" => Some(System::Sqlite),
                    _ => None,
                })?
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --quick, --secs S, --clients C, --systems \
                     combine,rmw,postgres,sqlite)"
                )
                .into());
            }
        }
    }
    Ok(p)
}

const TABLE: &str = "counter";
const ROW: &str = "hot";
const COLUMN: &str = "c:n";

fn open_store(dir: &Path, name: &str, config: StoreConfig) -> Res<(Store, std::path::PathBuf)> {
    let path = dir.join(format!("{name}.redb"));
    let store = Store::open(&path, config, RedbConfig { durability: Durability::Fsync, ..Default::default() })?;
    Ok((store, path))
}

fn read_counter(store: &Store) -> Res<i64> {
    let v = store.begin()?.get(TABLE, ROW, COLUMN)?.ok_or("the counter is missing")?;
    Ok(std::str::from_utf8(&v)?.parse()?)
}

// ---------------------------------------------------------------------------------------------
// percolator-store, combine

fn combine_run(dir: &Path, clients: usize, secs: f64) -> Res<Run> {
    let (store, path) = open_store(dir, "combine", StoreConfig::default())?;
    store.set_combined(vec![CombineSpec::new(TABLE, COLUMN, CombineOp::Sum, CombineType::I64)?])?;
    let scanner = store.start_scanner(ScannerConfig::default());
    let m0 = store.metrics();
    let cpu0 = self_cpu();
    let load = run_threads(clients, secs, || {
        let mut retries = 0;
        loop {
            let mut t = store.begin()?;
            t.combine(TABLE, ROW, COLUMN, Delta::Int(1))?;
            match t.commit() {
                Ok(_) => return Ok(retries),
                Err(e) if e.is_retryable() => retries += 1,
                Err(e) => return Err(e.into()),
            }
        }
    })?;
    let stopped = Instant::now();
    if !store.wait_quiescent(Duration::from_secs(300))? {
        return Err("combine: the folder did not finish within 300 s of the writers".into());
    }
    let lag = stopped.elapsed().as_secs_f64();
    let cpu = self_cpu() - cpu0;
    let m = store.metrics();
    drop(scanner);
    let total = read_counter(&store)?;
    let folded = m.combine_deltas_folded - m0.combine_deltas_folded;
    let folds = m.combine_folds - m0.combine_folds;
    print("combine_fold_lag_s", lag);
    print("combine_deltas_per_fold", folded as f64 / folds.max(1) as f64);
    print("combine_store_conflicts", (m.conflicts - m0.conflicts) as f64);
    if total != load.total as i64 || folded != load.total {
        return Err(format!(
            "combine: {} increments committed, but the counter reads {total} and the folder folded {folded} deltas",
            load.total
        )
        .into());
    }
    if load.retries != 0 {
        return Err(format!("combine: {} conflicts (combines must never conflict)", load.retries).into());
    }
    let backend_commits = m.backend_commits - m0.backend_commits;
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(Run {
        committed: load.committed,
        retries: Some(load.retries),
        secs: load.secs,
        cpu_secs: cpu,
        backend_commits: Some(backend_commits),
        load_cores: None,
    })
}

// ---------------------------------------------------------------------------------------------
// percolator-store, read-modify-write

fn rmw_run(dir: &Path, clients: usize, secs: f64) -> Res<Run> {
    // The default policy gives up after 50 attempts; 64 writers of one cell can exceed that,
    // and an increment that gives up would end the run. Same backoff, more attempts.
    let config = StoreConfig {
        retry: RetryPolicy { max_attempts: 100_000, ..RetryPolicy::default() },
        ..StoreConfig::default()
    };
    let (store, path) = open_store(dir, "rmw", config)?;
    store.run(|t| t.set(TABLE, ROW, COLUMN, b"0".to_vec()))?;
    let m0 = store.metrics();
    let cpu0 = self_cpu();
    let load = run_threads(clients, secs, || {
        let mut attempts = 0;
        store.run(|t| {
            attempts += 1;
            let v = t.get(TABLE, ROW, COLUMN)?.unwrap_or_default();
            let n: i64 = std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            t.set(TABLE, ROW, COLUMN, (n + 1).to_string().into_bytes())
        })?;
        Ok(attempts - 1)
    })?;
    let cpu = self_cpu() - cpu0;
    let backend_commits = store.metrics().backend_commits - m0.backend_commits;
    let total = read_counter(&store)?;
    if total != load.total as i64 {
        return Err(format!("rmw: {} increments committed, but the counter reads {total}", load.total).into());
    }
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(Run {
        committed: load.committed,
        retries: Some(load.retries),
        secs: load.secs,
        cpu_secs: cpu,
        backend_commits: Some(backend_commits),
        load_cores: None,
    })
}

// ---------------------------------------------------------------------------------------------
// SQLite

fn sqlite_run(dir: &Path, clients: usize, secs: f64) -> Res<Run> {
    let path = dir.join("counter.db");
    let c = rusqlite::Connection::open(&path)?;
    c.busy_timeout(Duration::from_secs(30))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(None, "synchronous", "FULL")?;
    c.execute_batch(
        "CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); INSERT INTO counter VALUES (1, 0)",
    )?;
    // One connection behind a mutex, as in `bank.rs`: SQLite's fastest use from one process.
    let shared = std::sync::Mutex::new(c);
    let cpu0 = self_cpu();
    let load = run_threads(clients, secs, || {
        let mut c = shared.lock().map_err(|_| "poisoned")?;
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.prepare_cached("UPDATE counter SET n = n + 1 WHERE id = 1")?.execute([])?;
        tx.commit()?;
        Ok(0)
    })?;
    let cpu = self_cpu() - cpu0;
    let c = shared.into_inner().map_err(|_| "poisoned")?;
    let n: i64 = c.query_row("SELECT n FROM counter WHERE id = 1", [], |r| r.get(0))?;
    if n != load.total as i64 {
        return Err(format!("SQLite: {} increments committed, but the counter reads {n}", load.total).into());
    }
    drop(c);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(Run::counted(load.committed, 0, load.secs, cpu))
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

fn postgres_run(dir: &Path, clients: usize, secs: f64) -> Res<Run> {
    let pg = Postgres::start(dir, "counter", true)?;
    pg.psql("CREATE TABLE counter (id integer PRIMARY KEY, n bigint NOT NULL)")?;
    pg.psql("INSERT INTO counter VALUES (1, 0)")?;
    pg.psql("VACUUM ANALYZE counter")?;
    pg.psql("CHECKPOINT")?;
    let script = dir.join("increment.sql");
    std::fs::write(&script, "UPDATE counter SET n = n + 1 WHERE id = 1;\n")?;
    let run = pg.pgbench(&script, clients, secs, &[])?;
    // pgbench counts the transactions that finished within its time; a few in flight at the
    // end may have committed too.
    let n: u64 = pg.psql("SELECT n FROM counter WHERE id = 1")?.parse()?;
    if n < run.committed || n > run.committed + clients as u64 {
        return Err(
            format!("PostgreSQL: pgbench counted {} increments, but the counter reads {n}", run.committed).into()
        );
    }
    Ok(run)
}

// ---------------------------------------------------------------------------------------------

/// The disk's fsync latency at this moment: the median of 200 rounds of a 4 KiB write and
/// `fdatasync`, in µs. Printed before and after the systems run: every figure above is bounded
/// by it, and on a shared machine it moves.
fn fsync_probe(dir: &Path) -> Res<f64> {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let block = [7u8; 4096];
    let mut us: Vec<f64> = (0..200)
        .map(|_| {
            let t = Instant::now();
            f.write_all(&block)?;
            f.sync_data()?;
            Ok(t.elapsed().as_secs_f64() * 1e6)
        })
        .collect::<std::io::Result<_>>()?;
    drop(f);
    let _ = std::fs::remove_file(&path);
    us.sort_by(f64::total_cmp);
    Ok(us[us.len() / 2])
}

// ---------------------------------------------------------------------------------------------

fn main() -> Res<()> {
    let plan = plan()?;
    let dir = TempDir::new("counter")?;
    println!(
        "# hot counter: {} writers add 1 to one row, one increment per transaction, fsync durability; {} s per system",
        plan.clients, plan.secs
    );
    println!(
        "# name value  (tps = committed increments/s; retries_per_commit = conflicted attempts per committed \
         increment; cpu_us = CPU µs per committed increment; cores = CPU time / wall time)"
    );
    print("fsync_us_before", fsync_probe(&dir.0)?);
    let mut tps = Vec::new();
    for &system in &plan.systems {
        let run = match system {
            System::Combine => combine_run(&dir.0, plan.clients, plan.secs)?,
            System::Rmw => rmw_run(&dir.0, plan.clients, plan.secs)?,
            System::Postgres => postgres_run(&dir.0, plan.clients, plan.secs)?,
            System::Sqlite => sqlite_run(&dir.0, plan.clients, plan.secs)?,
        };
        run.print(&format!("{}_c{}", system.name(), plan.clients));
        tps.push((system, run.tps()));
    }
    print("fsync_us_after", fsync_probe(&dir.0)?);
    for ours in [System::Combine, System::Rmw] {
        let Some(&(_, a)) = tps.iter().find(|(s, _)| *s == ours) else { continue };
        for theirs in [System::Postgres, System::Sqlite] {
            if let Some(&(_, b)) = tps.iter().find(|(s, _)| *s == theirs) {
                print(&format!("ratio_{}_vs_{}_c{}", ours.name(), theirs.name(), plan.clients), a / b);
            }
        }
    }
    Ok(())
}
