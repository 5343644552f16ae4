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
//! Reported per run: committed transfers/s, and the CPU time per committed transfer of
//! everything doing the work — this process for percolator-store and SQLite; the PostgreSQL
//! server processes plus pgbench for PostgreSQL — read from `/proc` (so other jobs on the
//! machine do not count). Ratios are percolator-store over each other system, measured in the
//! same run. Every run ends by checking that the balances still sum to the initial total.
//!
//! `cargo run --release -p percolator-bench --bin bank` (about 5 minutes);
//! `-- --quick` (1 s runs, one client count: a smoke test);
//! `-- --secs S --clients 1,8,64 --accounts 10000,100 --durability fsync,none --systems percolator,postgres,sqlite`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use percolator_store::{Durability, RedbConfig, Store, StoreConfig, Transaction};

#[path = "../procfs.rs"]
mod procfs;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Prints one figure as `name value`.
fn print(name: &str, value: f64) {
    println!("{name} {value:.3}");
}

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

fn parse_list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> Res<Vec<T>> {
    s.split(',').map(|x| f(x.trim()).ok_or_else(|| format!("--{what}: cannot read {x:?}").into())).collect()
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

fn self_cpu() -> f64 {
    procfs::cpu_seconds("self").map(|(own, _)| own).unwrap_or(0.0)
}

fn children_cpu() -> f64 {
    procfs::cpu_seconds("self").map(|(_, children)| children).unwrap_or(0.0)
}

/// CPU seconds of a server: the process, the children it reaped, and its live children.
fn tree_cpu(root: u32) -> f64 {
    let mut total = procfs::cpu_seconds(&root.to_string()).map(|(own, reaped)| own + reaped).unwrap_or(0.0);
    let Ok(dir) = std::fs::read_dir("/proc") else { return total };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let ppid = stat[close + 2..].split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(root) {
            total += procfs::cpu_seconds(&name).map(|(own, _)| own).unwrap_or(0.0);
        }
    }
    total
}

/// One measured run.
struct Run {
    committed: u64,
    secs: f64,
    cpu_secs: f64,
    /// Backend commits (redb write transactions) during the run, where known.
    backend_commits: Option<u64>,
}

impl Run {
    fn tps(&self) -> f64 {
        self.committed as f64 / self.secs
    }
    fn cpu_us_per_commit(&self) -> f64 {
        self.cpu_secs * 1e6 / self.committed.max(1) as f64
    }
    /// Cores busy on average: CPU time over wall time.
    fn cores(&self) -> f64 {
        self.cpu_secs / self.secs
    }
}

/// Two distinct accounts, uniformly.
fn pick(accounts: u64) -> (u64, u64) {
    let a = rand::random_range(0..accounts);
    let b = (a + 1 + rand::random_range(0..accounts - 1)) % accounts;
    (a, b)
}

/// Runs `clients` threads of `transfer` for `secs`; returns committed transfers and wall time.
fn run_threads(clients: usize, secs: f64, transfer: impl Fn() -> Res<()> + Sync) -> Res<(u64, f64)> {
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let barrier = Barrier::new(clients + 1);
    let mut first_error = None;
    let secs_taken = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut error = None;
                    while !stop.load(Ordering::Relaxed) {
                        match transfer() {
                            Ok(()) => {
                                committed.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                error.get_or_insert(e.to_string());
                            }
                        }
                    }
                    error
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        let c0 = committed.load(Ordering::Relaxed);
        let taken = started.elapsed().as_secs_f64();
        for h in handles {
            if let Ok(Some(e)) = h.join() {
                first_error.get_or_insert(e);
            }
        }
        (c0, taken)
    });
    if let Some(e) = first_error {
        return Err(format!("{} transfer(s) failed, e.g.: {e}", failed.load(Ordering::Relaxed)).into());
    }
    Ok(secs_taken)
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
    let store = Store::open(&path, StoreConfig::default(), RedbConfig { durability, ..Default::default() })?;
    for chunk in (0..accounts).collect::<Vec<_>>().chunks(1000) {
        store.run(|t| {
            for &i in chunk {
                t.set("bank", account(i), "bal:v", INITIAL.to_be_bytes())?;
            }
            Ok(())
        })?;
    }
    let cpu0 = self_cpu();
    let commits0 = store.metrics().backend_commits;
    let (committed, wall) = run_threads(clients, secs, || {
        let (a, b) = pick(accounts);
        store.run(|t| {
            let x = balance(t, a)?;
            let y = balance(t, b)?;
            t.set("bank", account(a), "bal:v", (x - 1).to_be_bytes())?;
            t.set("bank", account(b), "bal:v", (y + 1).to_be_bytes())
        })?;
        Ok(())
    })?;
    let cpu = self_cpu() - cpu0;
    let backend_commits = store.metrics().backend_commits - commits0;
    let sum: i64 = store.run(|t| (0..accounts).map(|i| balance(t, i)).sum())?;
    if sum != INITIAL * accounts as i64 {
        return Err(format!("percolator-store: balances sum to {sum}, not {}", INITIAL * accounts as i64).into());
    }
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(Run { committed, secs: wall, cpu_secs: cpu, backend_commits: Some(backend_commits) })
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
    let (committed, wall) = run_threads(clients, secs, || {
        let (a, b) = pick(accounts);
        let mut c = shared.lock().map_err(|_| "poisoned")?;
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let x: i64 = tx.prepare_cached("SELECT bal FROM acct WHERE id = ?1")?.query_row([a as i64], |r| r.get(0))?;
        let y: i64 = tx.prepare_cached("SELECT bal FROM acct WHERE id = ?1")?.query_row([b as i64], |r| r.get(0))?;
        tx.prepare_cached("UPDATE acct SET bal = ?2 WHERE id = ?1")?.execute((a as i64, x - 1))?;
        tx.prepare_cached("UPDATE acct SET bal = ?2 WHERE id = ?1")?.execute((b as i64, y + 1))?;
        tx.commit()?;
        Ok(())
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
    Ok(Run { committed, secs: wall, cpu_secs: cpu, backend_commits: None })
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/// A PostgreSQL server of this benchmark's own: private data directory, 127.0.0.1, stopped by
/// PID when dropped.
struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    child: Child,
    /// Run as user `postgres` (this process is root, which PostgreSQL refuses to be).
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn postgres_bin() -> Res<PathBuf> {
    let find = || -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> =
            std::fs::read_dir("/usr/lib/postgresql").ok()?.flatten().map(|e| e.path().join("bin")).collect();
        dirs.sort();
        dirs.into_iter().rev().find(|d| d.join("postgres").exists() && d.join("pgbench").exists())
    };
    if let Some(d) = find() {
        return Ok(d);
    }
    if !is_root() {
        return Err("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres): run `apt-get install -y postgresql`, or run this as root to have it installed".into());
    }
    eprintln!("# installing PostgreSQL from Debian's packages (apt-get install postgresql)");
    let ok = Command::new("apt-get").arg("update").arg("-qq").status()?.success()
        && Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", "postgresql", "postgresql-contrib"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success();
    if !ok {
        return Err("apt-get install postgresql failed".into());
    }
    find().ok_or_else(|| "PostgreSQL installed, but /usr/lib/postgresql/*/bin/postgres is missing".into())
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Postgres {
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    fn start(dir: &Path, dur: Dur) -> Res<Postgres> {
        let bin = postgres_bin()?;
        let as_postgres = is_root();
        let data = dir.join(format!("pg-{}", dur.name()));
        std::fs::create_dir_all(&data)?;
        if as_postgres {
            let ok = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?.success();
            if !ok {
                return Err(format!("chown postgres {} failed", dir.display()).into());
            }
        }
        let mut pg =
            Postgres { bin, data: data.clone(), port: free_port()?, child: Command::new("true").spawn()?, as_postgres };
        let _ = pg.child.wait();
        let out = pg
            .command("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let (fsync, sync_commit) = match dur {
            Dur::Fsync => ("on", "on"),
            Dur::None => ("off", "off"),
        };
        pg.child = pg
            .command("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1", "-p", &pg.port.to_string()])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", data.display()))
            .args(["-c", &format!("fsync={fsync}"), "-c", &format!("synchronous_commit={sync_commit}")])
            .args(["-c", "max_connections=100", "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join(format!("pg-{}.log", dur.name())))?))
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pg.psql("SELECT 1").is_ok() {
                return Ok(pg);
            }
            if Instant::now() > deadline || pg.child.try_wait()?.is_some() {
                return Err(format!("PostgreSQL did not start (log: {}/pg-{}.log)", dir.display(), dur.name()).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn psql(&self, sql: &str) -> Res<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-X", "-q", "-t", "-A"])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql, "postgres"])
            .output()?;
        if !out.status.success() {
            return Err(format!("psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn run(&self, dir: &Path, accounts: u64, clients: usize, secs: f64) -> Res<Run> {
        self.psql("DROP TABLE IF EXISTS acct")?;
        self.psql("CREATE TABLE acct (id integer PRIMARY KEY, bal bigint NOT NULL)")?;
        self.psql(&format!("INSERT INTO acct SELECT g, {INITIAL} FROM generate_series(0, {}) g", accounts - 1))?;
        self.psql("VACUUM ANALYZE acct")?;
        self.psql("CHECKPOINT")?;
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
        let server0 = tree_cpu(self.child.id());
        let client0 = children_cpu();
        let started = Instant::now();
        let out = Command::new(self.bin.join("pgbench"))
            .args(["-n", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string()])
            .args(["-T", &format!("{}", secs.ceil() as u64), "--max-tries=1000"])
            .args(["-D", &format!("accounts={accounts}"), "-f"])
            .arg(&script)
            .arg("postgres")
            .output()?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = (tree_cpu(self.child.id()) - server0) + (children_cpu() - client0);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            return Err(format!("pgbench failed: {text}{}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let field = |prefix: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        };
        let committed = field("number of transactions actually processed:")
            .ok_or_else(|| format!("pgbench output without a transaction count: {text}"))?
            as u64;
        let failed = field("number of failed transactions:").unwrap_or(0.0);
        if failed > 0.0 {
            return Err(format!("pgbench: {failed} transfers failed after 1000 tries: {text}").into());
        }
        // pgbench's own duration (-T, whole seconds) is what the count is over; `wall` adds
        // its connection set-up.
        let secs_run = secs.ceil().min(wall);
        let sum: i64 = self.psql("SELECT sum(bal) FROM acct")?.parse()?;
        if sum != INITIAL * accounts as i64 {
            return Err(format!("PostgreSQL: balances sum to {sum}").into());
        }
        Ok(Run { committed, secs: secs_run, cpu_secs: cpu, backend_commits: None })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Fast shutdown (SIGINT) by PID, then wait for it.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.data);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

// ---------------------------------------------------------------------------------------------

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() -> Res<()> {
    let plan = plan()?;
    let dir = TempDir(std::env::temp_dir().join(format!("percolator-bank-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0)?;
    println!("# bank transfers: read 2 accounts, write both, retried until committed; {} s per run", plan.secs);
    println!(
        "# name value  (tps = committed transfers/s; cpu_us = CPU µs per committed transfer; cores = CPU time / wall time)"
    );
    for &dur in &plan.durabilities {
        let pg = if plan.systems.contains(&System::Postgres) { Some(Postgres::start(&dir.0, dur)?) } else { None };
        for &accounts in &plan.accounts {
            for &clients in &plan.clients {
                let mut tps = Vec::new();
                for &system in &plan.systems {
                    let run = match system {
                        System::Percolator => percolator_run(&dir.0, dur, accounts, clients, plan.secs)?,
                        System::Sqlite => sqlite_run(&dir.0, dur, accounts, clients, plan.secs)?,
                        System::Postgres => {
                            pg.as_ref().ok_or("no PostgreSQL")?.run(&dir.0, accounts, clients, plan.secs)?
                        }
                    };
                    let key = format!("{}_{}_a{accounts}_c{clients}", system.name(), dur.name());
                    print(&format!("{key}_tps"), run.tps());
                    print(&format!("{key}_cpu_us"), run.cpu_us_per_commit());
                    print(&format!("{key}_cores"), run.cores());
                    if let Some(n) = run.backend_commits {
                        print(&format!("{key}_backend_commits_per_transfer"), n as f64 / run.committed.max(1) as f64);
                    }
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
