//! Bank transfers on percolator-store (redb) vs PostgreSQL vs SQLite, at the same durability.
//!
//! A transfer reads two accounts and writes both (one unit from the first to the second),
//! retried on conflict until it commits. Each system gets C clients (1, 8, 64) over N accounts
//! (10,000 and 100, the second a hot set), run for a fixed time, at two durabilities:
//! - **fsync**: an answered commit survives power loss. percolator-store: redb `Immediate`
//!   (one fsync per group commit); PostgreSQL: `fsync=on`, `synchronous_commit=on` (the
//!   defaults; one WAL flush per group of commits); SQLite: WAL, `synchronous=FULL`.
//! - **none**: no fsync per commit. percolator-store: redb `None` (one group commit a second is
//!   fsynced); PostgreSQL: `fsync=off`, `synchronous_commit=off`; SQLite: WAL,
//!   `synchronous=OFF`.
//!
//! - percolator-store: C threads in this process, `Store::run` (its retry policy, with backoff).
//! - PostgreSQL (Debian's, installed with apt-get if missing and this runs as root): a server
//!   of its own on 127.0.0.1 with a private data directory, stopped by PID at the end; the
//!   clients are `pgbench -c C -j 2` running the transfer at REPEATABLE READ (PostgreSQL's
//!   snapshot isolation) with `--max-tries` retrying serialization failures. The two updates go
//!   in account order, so transfers do not deadlock.
//! - SQLite (bundled by rusqlite): C threads sharing one connection behind a mutex (SQLite has
//!   one writer at a time; this is its fastest use from one process), `BEGIN IMMEDIATE`, WAL
//!   mode, cached prepared statements.
//!
//! Reported per run: committed transfers/s, retries (attempts that conflicted) per committed
//! transfer (pgbench's count for PostgreSQL; none for SQLite), and the CPU time per committed
//! transfer of everything doing the work — this process for percolator-store and SQLite; the
//! PostgreSQL server processes plus pgbench for PostgreSQL — read from `/proc` (so other jobs
//! on the machine do not count; for percolator-store, the run ends with a checkpoint of what
//! its memtable holds, its time and CPU counted, so that work its checkpoint interval leaves
//! pending is not left out). Ratios are percolator-store over each other system, measured in the
//! same run. Every run ends by checking that the balances still sum to the initial total.
//!
//! `cargo run --release -p percolator-bench --bin bank` (about 5 minutes);
//! `-- --quick` (1 s runs, one client count: a smoke test);
//! `-- --secs S --clients 1,8,64 --accounts 10000,100 --durability fsync,none --systems percolator,postgres,sqlite`.

/// The host's allocator (`host/src/main.rs`), so that what is measured here is what it runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use percolator_store::backends::RedbBigtable;
use percolator_store::{Durability, RedbConfig, Store, StoreConfig, Transaction};

#[path = "../clients.rs"]
mod clients;
#[path = "../pg.rs"]
mod pg;
#[path = "../procfs.rs"]
mod procfs;

use clients::{Res, Run, TempDir, parse_list, print, run_threads, self_cpu};
use pg::Postgres;

const INITIAL: i64 = 1_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum System {
    Percolator,
    Postgres,
    Sqlite,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Percolator => "percolator",
            System::Postgres => "postgres",
            System::Sqlite => "sqlite",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dur {
    Fsync,
    None,
}

impl Dur {
    fn name(self) -> &'static str {
        match self {
            Dur::Fsync => "fsync",
            Dur::None => "none",
        }
    }
}

struct Plan {
    secs: f64,
    clients: Vec<usize>,
    accounts: Vec<u64>,
    durabilities: Vec<Dur>,
    systems: Vec<System>,
}

fn plan() -> Res<Plan> {
    let mut p = Plan {
        secs: 5.0,
        clients: vec![1, 8, 64],
        accounts: vec![10_000, 100],
        durabilities: vec![Dur::Fsync, Dur::None],
        systems: vec![System::Percolator, System::Postgres, System::Sqlite],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => {
                p.secs = 1.0;
                p.clients = vec![8];
                p.accounts = vec![10_000];
            }
            "--secs" => p.secs = value()?.parse().map_err(|e| format!("--secs: {e}"))?,
            "--clients" => p.clients = parse_list(&value()?, "clients", |x| x.parse().ok().filter(|&n| n > 0))?,
            "--accounts" => p.accounts = parse_list(&value()?, "accounts", |x| x.parse().ok().filter(|&n| n >= 2))?,
            "--durability" => {
                p.durabilities = parse_list(&value()?, "durability", |x| match x {
                    "fsync" => Some(Dur::Fsync),
                    "none" => Some(Dur::None),
                    _ => None,
                })?
            }
            "--systems" => {
                p.systems = parse_list(&value()?, "systems", |x| match x {
                    "percolator" => Some(System::Percolator),
                    "postgres" => Some(System::Postgres),
                    "sqlite" => Some(System::Sqlite),
                    _ => None,
                })?
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --quick, --secs S, --clients 1,8,64, --accounts 10000,100, \
                     --durability fsync,none, --systems percolator,postgres,sqlite)"
                )
                .into());
            }
        }
    }
    Ok(p)
}

/// Two distinct accounts, uniformly.
fn pick(accounts: u64) -> (u64, u64) {
    let a = rand::random_range(0..accounts);
    let b = (a + 1 + rand::random_range(0..accounts - 1)) % accounts;
    (a, b)
}

// ---------------------------------------------------------------------------------------------
// percolator-store

fn account(i: u64) -> Vec<u8> {
    format!("{i:08}").into_bytes()
}

fn balance(t: &mut Transaction, i: u64) -> percolator_store::Result<i64> {
    let v = t.get("bank", account(i), "bal:v")?.ok_or_else(|| percolator_store::Error::Storage("no account".into()))?;
    Ok(i64::from_be_bytes(v.try_into().map_err(|_| percolator_store::Error::Storage("bad balance".into()))?))
}

fn percolator_run(dir: &Path, dur: Dur, accounts: u64, clients: usize, secs: f64) -> Res<Run> {
    let path = dir.join(format!("percolator-{}-{accounts}-{clients}.redb", dur.name()));
    let durability = match dur {
        Dur::Fsync => Durability::Fsync,
        Dur::None => Durability::None,
    };
    let redb = Arc::new(RedbBigtable::open(&path, RedbConfig { durability, ..Default::default() })?);
    let store = Store::with_backend(redb.clone(), StoreConfig::default())?;
    for chunk in (0..accounts).collect::<Vec<_>>().chunks(1000) {
        store.run(|t| {
            for &i in chunk {
                t.set("bank", account(i), "bal:v", INITIAL.to_be_bytes())?;
            }
            Ok(())
        })?;
    }
    // The accounts in redb before the count starts, and the transfers in it before it ends:
    // each run pays for its own checkpoints, whatever the checkpoint interval leaves pending.
    redb.checkpoint()?;
    let cpu0 = self_cpu();
    let commits0 = store.metrics().backend_commits;
    let load = run_threads(clients, secs, || {
        let (a, b) = pick(accounts);
        let mut attempts = 0;
        store.run(|t| {
            attempts += 1;
            let x = balance(t, a)?;
            let y = balance(t, b)?;
            t.set("bank", account(a), "bal:v", (x - 1).to_be_bytes())?;
            t.set("bank", account(b), "bal:v", (y + 1).to_be_bytes())
        })?;
        Ok(attempts - 1)
    })?;
    let load_cpu = self_cpu() - cpu0;
    // Its time counts too (transfers/s and cores are over the run and this checkpoint).
    let checkpoint = std::time::Instant::now();
    redb.checkpoint()?;
    let checkpoint = checkpoint.elapsed().as_secs_f64();
    let cpu = self_cpu() - cpu0;
    let backend_commits = store.metrics().backend_commits - commits0;
    let sum: i64 = store.run(|t| (0..accounts).map(|i| balance(t, i)).sum())?;
    if sum != INITIAL * accounts as i64 {
        return Err(format!("percolator-store: balances sum to {sum}, not {}", INITIAL * accounts as i64).into());
    }
    drop(store);
    drop(redb);
    let _ = std::fs::remove_file(&path);
    Ok(Run {
        committed: load.committed,
        retries: Some(load.retries),
        secs: load.secs + checkpoint,
        cpu_secs: cpu,
        backend_commits: Some(backend_commits),
        load_cores: Some(load_cpu / load.secs),
    })
}

// ---------------------------------------------------------------------------------------------
// SQLite

fn sqlite_open(path: &Path, dur: Dur) -> Res<rusqlite::Connection> {
    let c = rusqlite::Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(30))?;
    c.pragma_update(None, "journal_mode", "WAL")?;
    c.pragma_update(
        None,
        "synchronous",
        match dur {
            Dur::Fsync => "FULL",
            Dur::None => "OFF",
        },
    )?;
    Ok(c)
}

fn sqlite_run(dir: &Path, dur: Dur, accounts: u64, clients: usize, secs: f64) -> Res<Run> {
    let path = dir.join(format!("sqlite-{}-{accounts}-{clients}.db", dur.name()));
    let mut c = sqlite_open(&path, dur)?;
    c.execute_batch("CREATE TABLE acct (id INTEGER PRIMARY KEY, bal INTEGER NOT NULL)")?;
    {
        let tx = c.transaction()?;
        {
            let mut insert = tx.prepare("INSERT INTO acct VALUES (?1, ?2)")?;
            for i in 0..accounts {
                insert.execute((i as i64, INITIAL))?;
            }
        }
        tx.commit()?;
    }
    // One connection shared behind a mutex: SQLite has one writer at a time anyway, and this
    // is its fastest use from many threads of one process (a connection per thread with
    // `BEGIN IMMEDIATE` waits in the busy handler's sleeps and does several times worse).
    let shared = std::sync::Mutex::new(c);
    let cpu0 = self_cpu();
    let load = run_threads(clients, secs, || {
        let (a, b) = pick(accounts);
        let mut c = shared.lock().map_err(|_| "poisoned")?;
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let x: i64 = tx.prepare_cached("SELECT bal FROM acct WHERE id = ?1")?.query_row([a as i64], |r| r.get(0))?;
        let y: i64 = tx.prepare_cached("SELECT bal FROM acct WHERE id = ?1")?.query_row([b as i64], |r| r.get(0))?;
        tx.prepare_cached("UPDATE acct SET bal = ?2 WHERE id = ?1")?.execute((a as i64, x - 1))?;
        tx.prepare_cached("UPDATE acct SET bal = ?2 WHERE id = ?1")?.execute((b as i64, y + 1))?;
        tx.commit()?;
        Ok(0)
    })?;
    let cpu = self_cpu() - cpu0;
    let c = shared.into_inner().map_err(|_| "poisoned")?;
    let sum: i64 = c.query_row("SELECT sum(bal) FROM acct", [], |r| r.get(0))?;
    if sum != INITIAL * accounts as i64 {
        return Err(format!("SQLite: balances sum to {sum}").into());
    }
    drop(c);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(Run::counted(load.committed, 0, load.secs, cpu))
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// One run of the transfers on `pg`'s server (its table made afresh).
fn postgres_run(pg: &Postgres, dir: &Path, accounts: u64, clients: usize, secs: f64) -> Res<Run> {
    pg.psql("DROP TABLE IF EXISTS acct")?;
    pg.psql("CREATE TABLE acct (id integer PRIMARY KEY, bal bigint NOT NULL)")?;
    pg.psql(&format!("INSERT INTO acct SELECT g, {INITIAL} FROM generate_series(0, {}) g", accounts - 1))?;
    pg.psql("VACUUM ANALYZE acct")?;
    pg.psql("CHECKPOINT")?;
    let script = dir.join("transfer.sql");
    // Two distinct accounts as in the other systems; the updates in account order (no
    // deadlocks); REPEATABLE READ is PostgreSQL's snapshot isolation.
    std::fs::write(
        &script,
        "\\set a random(0, :accounts - 1)\n\
         \\set b (:a + 1 + random(0, :accounts - 2)) % :accounts\n\
         \\set lo least(:a, :b)\n\
         \\set hi greatest(:a, :b)\n\
         BEGIN ISOLATION LEVEL REPEATABLE READ;\n\
         SELECT bal FROM acct WHERE id = :a;\n\
         SELECT bal FROM acct WHERE id = :b;\n\
         UPDATE acct SET bal = bal + CASE WHEN id = :a THEN -1 ELSE 1 END WHERE id = :lo;\n\
         UPDATE acct SET bal = bal + CASE WHEN id = :a THEN -1 ELSE 1 END WHERE id = :hi;\n\
         COMMIT;\n",
    )?;
    let run = pg.pgbench(&script, clients, secs, &[("accounts", accounts.to_string())])?;
    let sum: i64 = pg.psql("SELECT sum(bal) FROM acct")?.parse()?;
    if sum != INITIAL * accounts as i64 {
        return Err(format!("PostgreSQL: balances sum to {sum}").into());
    }
    Ok(run)
}

// ---------------------------------------------------------------------------------------------

fn main() -> Res<()> {
    let plan = plan()?;
    let dir = TempDir::new("bank")?;
    println!("# bank transfers: read 2 accounts, write both, retried until committed; {} s per run", plan.secs);
    println!(
        "# name value  (tps = committed transfers/s; cpu_us = CPU µs per committed transfer; cores = CPU time / wall time)"
    );
    for &dur in &plan.durabilities {
        let pg = if plan.systems.contains(&System::Postgres) {
            Some(Postgres::start(&dir.0, dur.name(), dur == Dur::Fsync)?)
        } else {
            None
        };
        for &accounts in &plan.accounts {
            for &clients in &plan.clients {
                let mut tps = Vec::new();
                for &system in &plan.systems {
                    let run = match system {
                        System::Percolator => percolator_run(&dir.0, dur, accounts, clients, plan.secs)?,
                        System::Sqlite => sqlite_run(&dir.0, dur, accounts, clients, plan.secs)?,
                        System::Postgres => {
                            postgres_run(pg.as_ref().ok_or("no PostgreSQL")?, &dir.0, accounts, clients, plan.secs)?
                        }
                    };
                    let key = format!("{}_{}_a{accounts}_c{clients}", system.name(), dur.name());
                    run.print(&key);
                    tps.push((system, run.tps()));
                }
                if let Some(&(_, ours)) = tps.iter().find(|(s, _)| *s == System::Percolator) {
                    for &(s, theirs) in tps.iter().filter(|(s, _)| *s != System::Percolator) {
                        print(&format!("ratio_vs_{}_{}_a{accounts}_c{clients}", s.name(), dur.name()), ours / theirs);
                    }
                }
            }
        }
        drop(pg);
    }
    Ok(())
}
