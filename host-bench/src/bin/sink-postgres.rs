//! The PostgreSQL sink against a plain PostgreSQL client, side by side in one run, on a
//! PostgreSQL 15 server of this benchmark's own (Debian's binaries in `/usr/lib/postgresql`,
//! `initdb` in a temp dir, listening on 127.0.0.1 only, stopped by PID when the run ends or
//! fails, and by a parent-death signal if this process is killed).
//!
//! 1. **Throughput**: N changes (one logged column `c:v` of table `t`, one short text value per
//!    row, transactions of 10 rows from 2 writer threads) committed to a redb store with the
//!    sink not running; then the sink is started in-process (`Sinks::new` + `Sinks::apply`)
//!    and timed until PostgreSQL holds all N rows at their commit timestamps (the row of the
//!    last commit is polled; every row's version is checked afterwards). Against the same N
//!    rows written into a fresh table of the same shape by a plain client (`postgres` crate):
//!    (a) one `COPY ... FROM STDIN`; (b) multi-row `INSERT ... ON CONFLICT DO UPDATE` (with the
//!    sink's version check), one statement per transaction of the sink's batch size. Each
//!    store durability (`none`, `fsync`) has its own sink run; the sides alternate for the
//!    rounds and the best round of each is kept. Diagnostic: the runner's loop replayed by
//!    hand with each phase timed (feed read, PostgreSQL delivery, subscription advance).
//! 2. **Latency**: a writer commits one change every millisecond to the store while the sink
//!    runs; a poller on its own connection reads `SELECT c_v_version FROM lat WHERE
//!    c_v_version > $last` every 2 ms (the table has an index on the version for it) and notes
//!    when each change became visible: p50 / p99 / max of (visible − commit returned).
//!
//! PostgreSQL runs with its defaults for durability (`fsync=on`, `synchronous_commit=on`): a
//! batch the sink counts as delivered is durable there.
//!
//! ```text
//! cargo run --release -p percolator-host-bench --bin sink-postgres            # about 2 minutes
//! cargo run --release -p percolator-host-bench --bin sink-postgres -- --quick # smoke test
//! ```
//!
//! Options: `--rows N` (100000; `--quick`: 5000), `--batch B` (the sink's batch, 500: the
//! configuration's default), `--rounds R` (2; `--quick`: 1), `--latency-secs S` (10; `--quick`:
//! 2), `--durability none,fsync`. Prints `name value` lines; `#` lines are comments.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use percolator_server::config::{Sink, SinkKind, postgres_column};
use percolator_server::sinks::postgres::{PostgresSink, create_sql};
use percolator_server::sinks::{Batch, ChangeToken, Deliver, Feed, Sinks};
use percolator_store::{Durability, RedbConfig, Store, StoreConfig};
use postgres::types::ToSql;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const TABLE: &str = "t";
const COLUMN: &str = "c:v";
const ROWS_PER_TXN: usize = 10;
const WRITERS: usize = 2;
/// How long a sink run may take before the benchmark gives up.
const SINK_TIMEOUT: Duration = Duration::from_secs(900);

fn print(name: &str, value: f64) {
    println!("{name} {value:.3}");
}

struct Plan {
    rows: usize,
    batch: usize,
    rounds: usize,
    latency_secs: f64,
    durabilities: Vec<Durability>,
}

fn dur_name(d: Durability) -> &'static str {
    match d {
        Durability::None => "none",
        _ => "fsync",
    }
}

fn plan() -> Res<Plan> {
    let mut p = Plan {
        rows: 100_000,
        batch: 500,
        rounds: 2,
        latency_secs: 10.0,
        durabilities: vec![Durability::None, Durability::Fsync],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => {
                p.rows = 5_000;
                p.rounds = 1;
                p.latency_secs = 2.0;
            }
            "--rows" => p.rows = value()?.parse().map_err(|e| format!("--rows: {e}"))?,
            "--batch" => p.batch = value()?.parse().map_err(|e| format!("--batch: {e}"))?,
            "--rounds" => p.rounds = value()?.parse().map_err(|e| format!("--rounds: {e}"))?,
            "--latency-secs" => p.latency_secs = value()?.parse().map_err(|e| format!("--latency-secs: {e}"))?,
            "--durability" => {
                p.durabilities = value()?
                    .split(',')
                    .map(|d| match d.trim() {
                        "none" => Ok(Durability::None),
                        "fsync" => Ok(Durability::Fsync),
                        other => Err(format!("--durability: {other:?} is not none or fsync")),
                    })
                    .collect::<Result<_, _>>()?
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --quick, --rows N, --batch B, --rounds R, \
                     --latency-secs S, --durability none,fsync)"
                )
                .into());
            }
        }
    }
    if p.rows == 0 || p.batch == 0 || p.rounds == 0 || p.durabilities.is_empty() {
        return Err("--rows, --batch, --rounds and --durability must not be zero or empty".into());
    }
    Ok(p)
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL of the benchmark's own.

/// A PostgreSQL server with a private data directory, on 127.0.0.1 and a Unix socket in that
/// directory; stopped by PID and its directory removed when dropped (also on an error or a
/// panic).
struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Run as user `postgres` (this process is root, which PostgreSQL refuses to be).
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

impl Postgres {
    fn start(dir: PathBuf) -> Res<Postgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|dirs| {
            let mut dirs: Vec<PathBuf> = dirs.flatten().map(|e| e.path().join("bin")).collect();
            dirs.sort();
            dirs.into_iter().rev().find(|d| d.join("postgres").exists() && d.join("initdb").exists())
        });
        let Some(bin) = bin else {
            return Err("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): \
                        run `apt-get install postgresql` (Debian's package) and try again"
                .into());
        };
        let as_postgres = is_root();
        // The guard exists before anything is created: every later failure cleans up.
        let mut pg = Postgres { bin, dir, port: 0, child: None, as_postgres };
        let data = pg.data();
        std::fs::create_dir_all(&data)?;
        if as_postgres {
            let ok = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&pg.dir).status()?.success();
            if !ok {
                return Err(format!("chown postgres {} failed", pg.dir.display()).into());
            }
        }
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        pg.port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log = pg.dir.join("pg.log");
        pg.child = Some(
            pg.server_command()
                .arg("-D")
                .arg(&data)
                .args(["-c", "listen_addresses=127.0.0.1", "-p", &pg.port.to_string()])
                .arg("-c")
                .arg(format!("unix_socket_directories={}", data.display()))
                .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
                .args(["-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB"])
                .stdout(Stdio::null())
                .stderr(Stdio::from(std::fs::File::create(&log)?))
                .spawn()?,
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while postgres::Client::connect(&pg.url(), postgres::NoTls).is_err() {
            let exited = pg.child.as_mut().map(|c| c.try_wait()).transpose()?.flatten();
            if exited.is_some() || Instant::now() > deadline {
                return Err(
                    format!("PostgreSQL did not start: {}", std::fs::read_to_string(&log).unwrap_or_default()).into()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(pg)
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

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

    /// The server's command: as [`Postgres::command`], and with a parent-death signal
    /// (`setpriv --pdeathsig INT`, a fast shutdown), so that the server stops even when this
    /// process is killed before its drop guard runs.
    fn server_command(&self) -> Command {
        let mut c = Command::new("setpriv");
        if self.as_postgres {
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups"]);
        }
        c.args(["--pdeathsig", "INT", "--"]).arg(self.bin.join("postgres"));
        c
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn client(&self) -> Res<postgres::Client> {
        Ok(postgres::Client::connect(&self.url(), postgres::NoTls)?)
    }

    /// A fresh, empty table of the sink's shape (`"row"`, `c_v`, `c_v_bytes`, `c_v_version`),
    /// then a checkpoint, so that no run writes the previous one's dirty pages.
    fn fresh_table(&self, name: &str) -> Res<()> {
        let mut c = self.client()?;
        c.batch_execute(&format!("DROP TABLE IF EXISTS {name}"))?;
        for sql in create_sql(name, &[pg_column()]) {
            c.batch_execute(&sql)?;
        }
        c.batch_execute("CHECKPOINT")?;
        Ok(())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Fast shutdown (SIGINT) by PID, then wait; SIGKILL if it does not exit.
            let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn pg_column() -> String {
    postgres_column(COLUMN)
}

fn row_key(i: usize) -> String {
    format!("r{i:09}")
}

fn value(i: usize) -> String {
    format!("value {i}")
}

// ---------------------------------------------------------------------------------------------
// The plain client.

/// `COPY target ("row", c_v, c_v_version) FROM STDIN` of every row; returns the seconds.
fn copy_run(pg: &Postgres, target: &str, rows: usize) -> Res<f64> {
    pg.fresh_table(target)?;
    let mut c = pg.client()?;
    let started = Instant::now();
    let mut w = c.copy_in(&format!("COPY {target} (\"row\", {col}, {col}_version) FROM STDIN", col = pg_column()))?;
    let mut buf = String::with_capacity(1 << 16);
    for i in 0..rows {
        use std::fmt::Write as _;
        let _ = writeln!(buf, "{}\t{}\t{}", row_key(i), value(i), i + 1);
        if buf.len() > 60_000 {
            std::io::Write::write_all(&mut w, buf.as_bytes())?;
            buf.clear();
        }
    }
    std::io::Write::write_all(&mut w, buf.as_bytes())?;
    w.finish()?;
    Ok(started.elapsed().as_secs_f64())
}

/// The multi-row versioned upsert of `n` rows.
fn multi_row_upsert_sql(target: &str, n: usize) -> String {
    let col = pg_column();
    let values: Vec<String> = (0..n).map(|k| format!("(${}, ${}, ${})", 3 * k + 1, 3 * k + 2, 3 * k + 3)).collect();
    format!(
        "INSERT INTO {target} AS t (\"row\", {col}, {col}_version) VALUES {} \
         ON CONFLICT (\"row\") DO UPDATE SET {col} = excluded.{col}, {col}_bytes = excluded.{col}_bytes, \
         {col}_version = excluded.{col}_version \
         WHERE t.{col}_version IS NULL OR excluded.{col}_version > t.{col}_version",
        values.join(", ")
    )
}

/// Every row by multi-row versioned upserts, `batch` rows per statement and transaction;
/// returns the seconds.
fn upsert_run(pg: &Postgres, target: &str, rows: usize, batch: usize) -> Res<f64> {
    pg.fresh_table(target)?;
    let mut c = pg.client()?;
    let started = Instant::now();
    let mut prepared: HashMap<usize, postgres::Statement> = HashMap::new();
    let mut start = 0;
    while start < rows {
        let end = (start + batch).min(rows);
        let n = end - start;
        let stmt = match prepared.get(&n) {
            Some(s) => s.clone(),
            None => {
                let s = c.prepare(&multi_row_upsert_sql(target, n))?;
                prepared.insert(n, s.clone());
                s
            }
        };
        let keys: Vec<String> = (start..end).map(row_key).collect();
        let values: Vec<String> = (start..end).map(value).collect();
        let versions: Vec<i64> = (start..end).map(|i| i as i64 + 1).collect();
        let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(3 * n);
        for ((key, value), version) in keys.iter().zip(&values).zip(&versions) {
            params.push(key);
            params.push(value);
            params.push(version);
        }
        let mut tx = c.transaction()?;
        tx.execute(&stmt, &params)?;
        tx.commit()?;
        start = end;
    }
    Ok(started.elapsed().as_secs_f64())
}

// ---------------------------------------------------------------------------------------------
// The store and the sink.

fn open_store(dir: &Path, name: &str, durability: Durability) -> Res<Store> {
    let path = dir.join(format!("{name}.redb"));
    let _ = std::fs::remove_file(&path);
    let store = Store::open(&path, StoreConfig::default(), RedbConfig { durability, ..Default::default() })?;
    store.set_change_log([(TABLE.to_owned(), COLUMN.to_owned())].into_iter().collect())?;
    Ok(store)
}

/// Rows `0..rows` written in transactions of [`ROWS_PER_TXN`] by [`WRITERS`] threads; returns
/// each row's commit timestamp and the seconds.
fn fill(store: &Store, rows: usize) -> Res<(Vec<i64>, f64)> {
    let versions = Arc::new(Mutex::new(vec![0i64; rows]));
    let started = Instant::now();
    let txns = rows.div_ceil(ROWS_PER_TXN);
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, versions) = (store.clone(), versions.clone());
            std::thread::spawn(move || -> Res<()> {
                for t in (w..txns).step_by(WRITERS) {
                    let range = t * ROWS_PER_TXN..((t + 1) * ROWS_PER_TXN).min(rows);
                    let mut txn = store.begin()?;
                    for i in range.clone() {
                        txn.set(TABLE, row_key(i), COLUMN, value(i))?;
                    }
                    let ts = txn.commit()?.raw() as i64;
                    let mut v = versions.lock().map_err(|_| "poisoned")?;
                    for i in range {
                        v[i] = ts;
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a writer panicked")??;
    }
    let secs = started.elapsed().as_secs_f64();
    let versions = std::mem::take(&mut *versions.lock().map_err(|_| "poisoned")?);
    Ok((versions, secs))
}

fn sink_config(pg: &Postgres, name: &str, target: &str, batch: usize) -> Sink {
    Sink {
        name: name.to_owned(),
        table: TABLE.to_owned(),
        columns: vec![COLUMN.to_owned()],
        batch,
        kind: SinkKind::Postgres { url: pg.url(), target: target.to_owned(), target_columns: vec![pg_column()] },
        transform: None,
        outputs: vec![COLUMN.to_owned()],
    }
}

/// Checks that `target` holds exactly the rows with these versions.
fn verify(pg: &Postgres, target: &str, versions: &[i64]) -> Res<()> {
    let mut c = pg.client()?;
    let rows = c.query(&format!("SELECT \"row\", {col}, {col}_version FROM {target}", col = pg_column()), &[])?;
    if rows.len() != versions.len() {
        return Err(format!("{target} holds {} rows, expected {}", rows.len(), versions.len()).into());
    }
    for r in rows {
        let key: String = r.get(0);
        let i: usize = key[1..].parse()?;
        let (text, version): (Option<String>, Option<i64>) = (r.get(1), r.get(2));
        if version != Some(versions[i]) || text.as_deref() != Some(value(i).as_str()) {
            return Err(
                format!("{target}: row {key} is {text:?} at {version:?}, expected version {}", versions[i]).into()
            );
        }
    }
    Ok(())
}

struct SinkRun {
    secs: f64,
    batches: u64,
    delivered: u64,
}

/// A store of `rows` changes, then the sink started and timed until PostgreSQL holds them all.
fn sink_run(pg: &Postgres, dir: &Path, durability: Durability, rows: usize, batch: usize) -> Res<(SinkRun, Store)> {
    let name = format!("sink-{}", dur_name(durability));
    let store = open_store(dir, &name, durability)?;
    let (versions, fill_secs) = fill(&store, rows)?;
    print(&format!("store_fill_{}_changes_per_s", dur_name(durability)), rows as f64 / fill_secs);
    let target = format!("sink_{}", dur_name(durability));
    pg.fresh_table(&target)?;
    // The row of the last commit: batches commit in PostgreSQL in commit-timestamp order, so
    // once it is there, all are.
    let (last, &last_ts) = versions.iter().enumerate().max_by_key(|(_, v)| **v).ok_or("no rows")?;
    let last_key = row_key(last);
    let mut poll = pg.client()?;
    let query = poll.prepare(&format!("SELECT {}_version FROM {target} WHERE \"row\" = $1", pg_column()))?;
    let dead = dir.join(format!("{name}.dead"));
    let sinks = Sinks::new(Arc::new(store.clone()), dead);
    let started = Instant::now();
    sinks.apply(&[sink_config(pg, &name, &target, batch)], &Default::default());
    loop {
        let v: Option<Option<i64>> = poll.query_opt(&query, &[&last_key])?.map(|r| r.get(0));
        if v == Some(Some(last_ts)) {
            break;
        }
        if started.elapsed() > SINK_TIMEOUT {
            let status = sinks.status();
            return Err(format!("the sink did not deliver within {SINK_TIMEOUT:?}: {status:?}").into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    // The runner counts a batch once it moved its position, just after PostgreSQL committed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        let status = sinks.status().into_iter().next().ok_or("no sink status")?;
        if status.delivered >= rows as u64 || Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    sinks.stop();
    verify(pg, &target, &versions)?;
    Ok((SinkRun { secs, batches: status.batches, delivered: status.delivered }, store))
}

/// The runner's loop replayed by hand on `store`'s backlog (a new subscription, a fresh table),
/// each phase timed: (batches, read s, deliver s, advance s).
fn breakdown(pg: &Postgres, store: &Store, durability: Durability, batch: usize) -> Res<(u64, f64, f64, f64)> {
    let target = format!("breakdown_{}", dur_name(durability));
    pg.fresh_table(&target)?;
    let name = format!("breakdown-{}", dur_name(durability));
    if !Feed::claim(store, &name)? {
        return Err("the breakdown's subscription is owned by another worker".into());
    }
    let mut kind = PostgresSink::new(&pg.url(), &target, vec![pg_column()]);
    let columns = [COLUMN.to_owned()];
    let (mut read, mut deliver, mut advance, mut batches) = (0.0, 0.0, 0.0, 0u64);
    let mut from = ChangeToken::origin();
    loop {
        let t0 = Instant::now();
        let page = Feed::changes(store, TABLE, &columns, &from, batch)?;
        let t1 = Instant::now();
        read += (t1 - t0).as_secs_f64();
        if page.changes.is_empty() {
            break;
        }
        let b = Batch { sink: &name, table: TABLE, columns: &columns, changes: &page.changes };
        kind.deliver(&b).map_err(|e| format!("{e:?}"))?;
        let t2 = Instant::now();
        Feed::advance(store, &name, &page.next)?;
        let t3 = Instant::now();
        deliver += (t2 - t1).as_secs_f64();
        advance += (t3 - t2).as_secs_f64();
        batches += 1;
        from = page.next;
    }
    Ok((batches, read, deliver, advance))
}

// ---------------------------------------------------------------------------------------------
// Latency.

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn latency(pg: &Postgres, dir: &Path, durability: Durability, secs: f64, batch: usize) -> Res<()> {
    let d = dur_name(durability);
    let name = format!("latency-{d}");
    let store = open_store(dir, &name, durability)?;
    let target = format!("lat_{d}");
    pg.fresh_table(&target)?;
    let col = pg_column();
    pg.client()?.batch_execute(&format!("CREATE INDEX ON {target} ({col}_version)"))?;
    let sinks = Sinks::new(Arc::new(store.clone()), dir.join(format!("{name}.dead")));
    sinks.apply(&[sink_config(pg, &name, &target, batch)], &Default::default());
    let committed: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let measure = Duration::from_secs_f64(secs);
    let writer = {
        let (store, committed, stop) = (store.clone(), committed.clone(), stop.clone());
        std::thread::spawn(move || -> Res<f64> {
            let started = Instant::now();
            let mut next = started;
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) && started.elapsed() < measure {
                next += Duration::from_millis(1);
                let mut t = store.begin()?;
                t.set(TABLE, format!("live{i:09}"), COLUMN, value(i))?;
                let ts = t.commit()?;
                committed.lock().map_err(|_| "poisoned")?.push((ts.raw() as i64, Instant::now()));
                i += 1;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            Ok(started.elapsed().as_secs_f64())
        })
    };
    let mut poll = pg.client()?;
    let query = poll.prepare(&format!("SELECT {col}_version FROM {target} WHERE {col}_version > $1"))?;
    let mut seen: HashMap<i64, Instant> = HashMap::new();
    let mut last = 0i64;
    let mut result: Res<()> = Ok(());
    let mut done_at: Option<Instant> = None;
    loop {
        let rows = match poll.query(&query, &[&last]) {
            Ok(rows) => rows,
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        let now = Instant::now();
        for r in rows {
            let v: i64 = r.get(0);
            seen.entry(v).or_insert(now);
            last = last.max(v);
        }
        if writer.is_finished() {
            // Wait for the tail (at most 10 s more).
            let all = committed.lock().map_err(|_| "poisoned")?.len();
            let done = *done_at.get_or_insert(now);
            if seen.len() >= all || now - done > Duration::from_secs(10) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let wrote_secs = writer.join().map_err(|_| "the writer panicked")??;
    sinks.stop();
    result?;
    let committed = committed.lock().map_err(|_| "poisoned")?;
    let mut lat: Vec<Duration> = Vec::with_capacity(committed.len());
    for (ts, at) in committed.iter() {
        let seen_at = seen.get(ts).ok_or_else(|| format!("the change committed at {ts} never became visible"))?;
        lat.push(seen_at.saturating_duration_since(*at));
    }
    lat.sort();
    if lat.is_empty() {
        return Err("no change was committed".into());
    }
    let k = format!("sink_latency_{d}");
    print(&format!("{k}_rate_per_s"), committed.len() as f64 / wrote_secs);
    print(&format!("{k}_changes"), committed.len() as f64);
    print(&format!("{k}_p50_ms"), percentile(&lat, 0.5).as_secs_f64() * 1e3);
    print(&format!("{k}_p99_ms"), percentile(&lat, 0.99).as_secs_f64() * 1e3);
    print(&format!("{k}_max_ms"), lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3);
    Ok(())
}

// ---------------------------------------------------------------------------------------------

/// Removes the directories of earlier runs that were killed (their process is gone; their
/// server stopped on its parent-death signal).
fn remove_stale_dirs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("percolator-sink-bench-").and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn main() -> Res<()> {
    let plan = plan()?;
    remove_stale_dirs(&std::env::temp_dir());
    let root = TempDir(std::env::temp_dir().join(format!("percolator-sink-bench-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&root.0);
    std::fs::create_dir_all(&root.0)?;
    // Dropped before `root`: stopped by PID, its directory removed, on every way out of main.
    let pg = Postgres::start(root.0.join("pg"))?;
    let (rows, batch) = (plan.rows, plan.batch);
    println!(
        "# PostgreSQL sink vs a plain client: {rows} rows x 1 column, short text values; the sink's batch {batch}; \
         store transactions of {ROWS_PER_TXN} rows; PostgreSQL fsync=on, synchronous_commit=on; best of {} rounds",
        plan.rounds
    );
    print("rows", rows as f64);
    print("sink_batch", batch as f64);

    // 1. Throughput, the sides alternating round by round.
    let mut copy_best = f64::MAX;
    let mut upsert_best = f64::MAX;
    let mut sink_best: Vec<Option<SinkRun>> = plan.durabilities.iter().map(|_| None).collect();
    let mut stores: Vec<Option<Store>> = plan.durabilities.iter().map(|_| None).collect();
    for round in 0..plan.rounds {
        let copy = copy_run(&pg, "plain_copy", rows)?;
        println!("# round {round}: COPY {:.0} rows/s", rows as f64 / copy);
        copy_best = copy_best.min(copy);
        let upsert = upsert_run(&pg, "plain_upsert", rows, batch)?;
        println!("# round {round}: batched upsert {:.0} rows/s", rows as f64 / upsert);
        upsert_best = upsert_best.min(upsert);
        for (k, &d) in plan.durabilities.iter().enumerate() {
            stores[k] = None; // its file is opened again
            let (run, store) = sink_run(&pg, &root.0, d, rows, batch)?;
            println!("# round {round}: sink, store {}: {:.0} changes/s", dur_name(d), rows as f64 / run.secs);
            if sink_best[k].as_ref().is_none_or(|b| run.secs < b.secs) {
                sink_best[k] = Some(run);
            }
            stores[k] = Some(store);
        }
    }
    let copy_rate = rows as f64 / copy_best;
    let upsert_rate = rows as f64 / upsert_best;
    print("pg_copy_changes_per_s", copy_rate);
    print("pg_batched_upsert_changes_per_s", upsert_rate);
    for (k, &d) in plan.durabilities.iter().enumerate() {
        let Some(run) = &sink_best[k] else { continue };
        let rate = rows as f64 / run.secs;
        let key = format!("sink_{}", dur_name(d));
        print(&format!("{key}_changes_per_s"), rate);
        print(&format!("{key}_batches"), run.batches as f64);
        print(&format!("{key}_mean_batch"), run.delivered as f64 / run.batches.max(1) as f64);
        print(&format!("{key}_over_copy"), rate / copy_rate);
        print(&format!("{key}_over_batched_upsert"), rate / upsert_rate);
    }

    // Diagnostic: where a sink's time goes.
    for (k, &d) in plan.durabilities.iter().enumerate() {
        let Some(store) = &stores[k] else { continue };
        let (batches, read, deliver, advance) = breakdown(&pg, store, d, batch)?;
        let key = format!("sink_{}_breakdown", dur_name(d));
        let per = |s: f64| s * 1e3 / batches.max(1) as f64;
        print(&format!("{key}_batches"), batches as f64);
        print(&format!("{key}_read_ms_per_batch"), per(read));
        print(&format!("{key}_deliver_ms_per_batch"), per(deliver));
        print(&format!("{key}_advance_ms_per_batch"), per(advance));
        print(&format!("{key}_changes_per_s"), rows as f64 / (read + deliver + advance));
    }
    drop(stores);

    // 2. Latency at about 1,000 changes/s.
    for &d in &plan.durabilities {
        latency(&pg, &root.0, d, plan.latency_secs, batch)?;
    }
    drop(pg);
    Ok(())
}
