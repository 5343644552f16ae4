//! Several hosts on one Percolator over a Redis Cluster: throughput with 1, 2 and 3 hosts, and
//! transactions per second over time while a Redis master is killed and comes back (the
//! paper's Figure 10 analog).
//!
//! Each host is a process (this binary again, with `--child`): a `Store` over one Redis
//! namespace, the oracle service shared through etcd (every host an oracle candidate; one of
//! them is elected leader and serves all timestamps), and T threads doing bank transfers: two
//! random accounts of 4,000, read both balances, write both (a two-row, two-phase commit). A
//! conflict retries the same transfer; a transfer that fails otherwise (`Error::Unavailable`
//! during a failover) is counted and given up. Each host counts committed transfers per time
//! bucket; the parent sums them.
//!
//! 1. **Scaling**: 1, 2 and 3 hosts × T threads, and 1 host × 3T threads (a control: more
//!    concurrency in one process), each on a fresh namespace for the same duration, alternating
//!    for 2 rounds (best kept); committed transfers/s and the CPU time of the Redis servers,
//!    etcd and the hosts over the measured window.
//! 2. **Failover** (Figure 10): 3 hosts for 50 s in 0.5 s buckets; at 15 s the master that
//!    serves the first slots is SIGKILLed (`scripts/dev-cluster kill`), its replica takes over;
//!    at 30 s it is started again and rejoins as a replica. Run three times: with the store's
//!    default (each commit waits for one replica, `WAIT 1`), then with commits acknowledged by
//!    the master alone (`RedisConfig::replicas = 0`), which shows what `WAIT` costs while the
//!    promoted master has no replica, then with `WAIT 1` and `RedisConfig::degraded_writes` (a
//!    master without its replica waits for none). Writes `figure10.svg` / `.csv`,
//!    `figure10-wait0.svg` / `.csv` and `figure10-degraded.svg` / `.csv` (into `docs/figures`,
//!    or `--figure-dir DIR`), and checks after each run that the sum of all balances is
//!    unchanged.
//!
//! Needs the dev cluster: `scripts/dev-cluster up`, `set -a; . target/dev-cluster/env; set +a`,
//! then `cargo run --release -p percolator-bench --bin hosts` (about 7 minutes). The failover
//! part kills servers of the cluster in `PERCOLATOR_DEV_CLUSTER_DIR` (default
//! `target/dev-cluster`). `--quick`: shorter runs, one round, figures into the temp directory.
//! `--only scaling` / `--only failover`: one part; `--only failover-wait1`, `failover-wait0`,
//! `failover-degraded`: one failover run. `--threads T` (default 8).

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use percolator_redis::{EtcdCoordination, OracleServiceConfig, RedisBigtable, RedisConfig};
use percolator_store::{Oracle, Store, StoreConfig, Transaction};

#[path = "../cluster.rs"]
mod cluster;
#[path = "../procfs.rs"]
mod procfs;
use cluster::{Res, env_list, print};

const ACCOUNTS: u64 = 4000;
const INITIAL: u64 = 1000;
/// Error messages a host reports per kind (the counts are complete; the texts are samples).
const NOTES_PER_KIND: usize = 3;

fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// How a host's commits are made durable: the `RedisConfig` fields of the same names.
#[derive(Clone, Copy)]
struct Durability {
    /// Replicas each commit waits for (`WAIT`).
    replicas: u32,
    /// A master with fewer connected replicas than `replicas` waits only for those it has.
    degraded_writes: bool,
}

impl Default for Durability {
    /// The store's default.
    fn default() -> Durability {
        let c = RedisConfig::default();
        Durability { replicas: c.replicas, degraded_writes: c.degraded_writes }
    }
}

impl Durability {
    /// The flags that pass it to a host process (`--replicas R`, and `--degraded-writes`).
    fn flags(&self) -> Vec<String> {
        let mut f = vec!["--replicas".to_string(), self.replicas.to_string()];
        if self.degraded_writes {
            f.push("--degraded-writes".into());
        }
        f
    }
}

impl std::fmt::Display for Durability {
    /// `WAIT 1`, `WAIT 0`, `WAIT 1, degraded_writes`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WAIT {}", self.replicas)?;
        if self.degraded_writes {
            write!(f, ", degraded_writes")?;
        }
        Ok(())
    }
}

/// A host's store over `namespace`, this process an oracle candidate; its commits made durable
/// as `durability` says.
fn open_host(nodes: &[String], etcd: &[String], namespace: &str, durability: Durability) -> Res<Store> {
    let backend = std::sync::Arc::new(RedisBigtable::open(RedisConfig {
        nodes: nodes.to_vec(),
        namespace: namespace.into(),
        replicas: durability.replicas,
        degraded_writes: durability.degraded_writes,
        ..RedisConfig::default()
    })?);
    let oracle = EtcdCoordination::with_candidate(OracleServiceConfig {
        etcd: etcd.to_vec(),
        namespace: namespace.into(),
        ..OracleServiceConfig::default()
    })
    .map(Oracle::new)?;
    Ok(Store::with_oracle(backend, oracle, StoreConfig::default())?)
}

fn account(i: u64) -> String {
    format!("acct{i:05}")
}

fn balance(t: &Transaction, i: u64) -> percolator_store::Result<u64> {
    Ok(t.get("bank", account(i), "bal:v")?.map(|v| u64::from_be_bytes(v.try_into().unwrap_or([0; 8]))).unwrap_or(0))
}

// --- the child: one host ----------------------------------------------------------------------

/// What one host saw in one time bucket.
#[derive(Clone, Copy, Default)]
struct Counts {
    committed: u64,
    /// Attempts that met a conflict (the transfer is then retried).
    conflicts: u64,
    /// `Error::Unavailable` before `commit` (a read or the oracle): nothing was written.
    unavailable_before_commit: u64,
    /// `Error::Unavailable` from `commit`: the outcome is unknown (decided by the primary).
    unavailable_at_commit: u64,
    /// Any other error.
    other_errors: u64,
    /// Longest time from a transfer's first attempt to its commit, of those committed here.
    max_latency_us: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.committed += o.committed;
        self.conflicts += o.conflicts;
        self.unavailable_before_commit += o.unavailable_before_commit;
        self.unavailable_at_commit += o.unavailable_at_commit;
        self.other_errors += o.other_errors;
        self.max_latency_us = self.max_latency_us.max(o.max_latency_us);
    }

    fn errors(&self) -> u64 {
        self.unavailable_before_commit + self.unavailable_at_commit + self.other_errors
    }

    fn line(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.committed,
            self.conflicts,
            self.unavailable_before_commit,
            self.unavailable_at_commit,
            self.other_errors,
            self.max_latency_us
        )
    }

    fn parse(fields: &[&str]) -> Res<Counts> {
        let n: Vec<u64> = fields.iter().map(|f| f.parse()).collect::<Result<_, _>>()?;
        let [committed, conflicts, unavailable_before_commit, unavailable_at_commit, other_errors, max_latency_us] =
            n[..]
        else {
            return Err(format!("a bucket line has {} numbers, not 6", n.len()).into());
        };
        Ok(Counts {
            committed,
            conflicts,
            unavailable_before_commit,
            unavailable_at_commit,
            other_errors,
            max_latency_us,
        })
    }
}

struct ChildArgs {
    namespace: String,
    durability: Durability,
    threads: usize,
    duration: Duration,
    bucket: Duration,
}

/// One transfer of `amount` (at most the balance) from `from` to `to`; on failure, whether it
/// failed in `commit`.
fn transfer(store: &Store, from: u64, to: u64, amount: u64) -> Result<(), (bool, percolator_store::Error)> {
    let mut t = store.begin().map_err(|e| (false, e))?;
    let body = |t: &mut Transaction| -> percolator_store::Result<()> {
        let a = balance(t, from)?;
        let b = balance(t, to)?;
        let amount = amount.min(a);
        t.set("bank", account(from), "bal:v", (a - amount).to_be_bytes())?;
        t.set("bank", account(to), "bal:v", (b + amount).to_be_bytes())
    };
    body(&mut t).map_err(|e| (false, e))?;
    t.commit().map(drop).map_err(|e| (true, e))
}

/// The host: opens its store, says `READY`, waits for `GO <unix ms>` on stdin, runs transfers
/// from `threads` threads for `duration` from that instant, then prints one `BUCKET` line per
/// time bucket, its `NOTE`s (sample error messages) and `END`.
fn child(args: ChildArgs) -> Res<()> {
    let nodes = env_list("PERCOLATOR_REDIS")?;
    let etcd = env_list("PERCOLATOR_ETCD")?;
    let store = open_host(&nodes, &etcd, &args.namespace, args.durability)?;
    let oracle = store
        .oracle()
        .coordination::<EtcdCoordination>()
        .and_then(|c| c.candidate())
        .map(|c| c.address().to_string())
        .unwrap_or_default();
    println!("READY {oracle}");
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let go: u64 = go.strip_prefix("GO ").ok_or("expected GO <unix ms> on stdin")?.trim().parse()?;
    let start = Instant::now() + Duration::from_millis(go.saturating_sub(unix_ms()));
    let end = start + args.duration;
    let buckets = args.duration.div_duration_f64(args.bucket).ceil() as usize;
    let bucket_of = |at: Instant| {
        let i = (at.saturating_duration_since(start).as_secs_f64() / args.bucket.as_secs_f64()) as usize;
        i.min(buckets - 1)
    };
    let notes: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let note = |kind: &str, at: Instant, e: &percolator_store::Error| {
        let mut n = notes.lock().unwrap_or_else(|p| p.into_inner());
        let seen = n.iter().filter(|k| k.starts_with(kind)).count();
        if seen < NOTES_PER_KIND {
            let t = at.saturating_duration_since(start).as_secs_f64();
            n.push(format!("{kind} t={t:.2}s {e}"));
        }
    };
    let seed = u64::from(std::process::id());
    let per_thread: Vec<Vec<Counts>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..args.threads as u64)
            .map(|w| {
                let (store, note) = (&store, &note);
                s.spawn(move || {
                    let mut counts = vec![Counts::default(); buckets];
                    let mut n = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (w + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    let mut next = move || {
                        n ^= n << 13;
                        n ^= n >> 7;
                        n ^= n << 17;
                        n
                    };
                    std::thread::sleep(start.saturating_duration_since(Instant::now()));
                    while Instant::now() < end {
                        let from = next() % ACCOUNTS;
                        let to = (from + 1 + next() % (ACCOUNTS - 1)) % ACCOUNTS;
                        let amount = next() % 20;
                        let first = Instant::now();
                        let mut backoff = Duration::from_millis(1);
                        loop {
                            let r = transfer(store, from, to, amount);
                            let now = Instant::now();
                            if now >= end {
                                break; // finished after the window: not counted
                            }
                            let c = &mut counts[bucket_of(now)];
                            match r {
                                Ok(()) => {
                                    c.committed += 1;
                                    c.max_latency_us =
                                        c.max_latency_us.max(now.duration_since(first).as_micros() as u64);
                                    break;
                                }
                                Err((_, e)) if e.is_retryable() => {
                                    c.conflicts += 1;
                                    std::thread::sleep(backoff);
                                    backoff = (backoff * 2).min(Duration::from_millis(50));
                                }
                                Err((at_commit, e)) => {
                                    match (&e, at_commit) {
                                        (percolator_store::Error::Unavailable(_), false) => {
                                            c.unavailable_before_commit += 1;
                                            note("unavailable-before-commit", now, &e);
                                        }
                                        (percolator_store::Error::Unavailable(_), true) => {
                                            c.unavailable_at_commit += 1;
                                            note("unavailable-at-commit", now, &e);
                                        }
                                        _ => {
                                            c.other_errors += 1;
                                            note("other-error", now, &e);
                                        }
                                    }
                                    // Give up this transfer (its outcome may be unknown); a
                                    // short pause so that a dead server is not hammered.
                                    std::thread::sleep(Duration::from_millis(20));
                                    break;
                                }
                            }
                        }
                    }
                    counts
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a transfer thread panicked")).collect()
    });
    let mut out = std::io::stdout().lock();
    for i in 0..buckets {
        let mut c = Counts::default();
        for t in &per_thread {
            c.add(&t[i]);
        }
        writeln!(out, "BUCKET {i} {}", c.line())?;
    }
    for n in notes.into_inner().unwrap_or_else(|p| p.into_inner()) {
        writeln!(out, "NOTE {n}")?;
    }
    writeln!(out, "END")?;
    out.flush()?;
    Ok(())
}

// --- the parent: hosts, servers, measurements -------------------------------------------------

/// A host process and its stdout, line by line.
struct Host {
    child: Child,
    lines: Receiver<String>,
}

impl Host {
    fn spawn(
        namespace: &str,
        durability: Durability,
        threads: usize,
        duration: Duration,
        bucket: Duration,
    ) -> Res<Host> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--child", namespace])
            .args(durability.flags())
            .args(["--threads", &threads.to_string()])
            .args(["--duration-ms", &duration.as_millis().to_string(), "--bucket-ms", &bucket.as_millis().to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        Ok(Host { child, lines })
    }

    fn expect(&self, prefix: &str, timeout: Duration) -> Res<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let l = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .map_err(|_| format!("host {} sent no {prefix} line within {timeout:?}", self.child.id()))?;
            if let Some(rest) = l.strip_prefix(prefix) {
                return Ok(rest.trim().to_string());
            }
        }
    }

    /// The buckets and notes it prints after its run.
    fn results(&mut self, timeout: Duration) -> Res<(Vec<Counts>, Vec<String>)> {
        let deadline = Instant::now() + timeout;
        let (mut buckets, mut notes) = (Vec::new(), Vec::new());
        loop {
            let l = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .map_err(|_| format!("host {} did not finish within {timeout:?}", self.child.id()))?;
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.first() {
                Some(&"BUCKET") if f.len() == 8 => buckets.push(Counts::parse(&f[2..])?),
                Some(&"NOTE") => notes.push(l[5..].to_string()),
                Some(&"END") => break,
                _ => {}
            }
        }
        let _ = self.child.wait();
        Ok((buckets, notes))
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU seconds the whole machine has been busy (not idle, not waiting for I/O) since boot.
fn machine_busy_seconds(ticks: f64) -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else { return 0.0 };
    // user nice system idle iowait irq softirq steal ...
    let f: Vec<f64> = cpu.split_whitespace().skip(1).filter_map(|v| v.parse().ok()).collect();
    let busy: f64 = f.iter().take(8).enumerate().filter(|(i, _)| *i != 3 && *i != 4).map(|(_, v)| v).sum();
    busy / ticks
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// The dev cluster's directory and helpers around `scripts/dev-cluster`.
struct DevCluster {
    dir: PathBuf,
    script: PathBuf,
}

impl DevCluster {
    fn find() -> Option<DevCluster> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
        let dir = std::env::var_os("PERCOLATOR_DEV_CLUSTER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/dev-cluster"));
        dir.join("dev-cluster.state").exists().then(|| DevCluster { dir, script: root.join("scripts/dev-cluster") })
    }

    fn run(&self, args: &[&str]) -> Res<String> {
        let out = Command::new(&self.script).args(args).arg("--dir").arg(&self.dir).output()?;
        if !out.status.success() {
            return Err(format!("scripts/dev-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The server's PIDs by kind (`redis`, `etcd`), from the dev cluster's PID files.
    fn pids(&self, kind: &str) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(self.dir.join("pids")) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(kind))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok()?.trim().parse().ok())
            .collect()
    }

    /// The name (`redis-i`) and address of the master listed first by `masters`.
    fn first_master(&self) -> Res<(String, String)> {
        let master = self.run(&["masters"])?.lines().next().ok_or("no master")?.trim().to_string();
        let status = self.run(&["status"]).unwrap_or_else(|e| e.to_string());
        let name = status
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|c| c.len() > 2 && c[0].starts_with("redis-") && c[2] == master)
            .map(|c| c[0].to_string())
            .ok_or_else(|| format!("master {master} is not in scripts/dev-cluster status"))?;
        Ok((name, master))
    }
}

/// CPU seconds of each kind of process: `[redis, etcd, hosts, the whole machine]` (the
/// machine's busy time counts every process, other jobs on it too).
struct CpuSample([f64; 4]);

impl CpuSample {
    fn take(cluster: Option<&DevCluster>, hosts: &[Host], ticks: f64) -> CpuSample {
        let sum = |pids: Vec<u32>| {
            pids.into_iter().filter_map(|p| procfs::cpu_seconds(&p.to_string()).map(|(own, _)| own)).sum::<f64>()
        };
        let (redis, etcd) = match cluster {
            Some(c) => (sum(c.pids("redis")), sum(c.pids("etcd"))),
            None => (0.0, 0.0),
        };
        CpuSample([redis, etcd, sum(hosts.iter().map(|h| h.child.id()).collect()), machine_busy_seconds(ticks)])
    }
}

/// What one run of `hosts` host processes measured.
struct RunResult {
    /// Per host, per bucket.
    hosts: Vec<Vec<Counts>>,
    notes: Vec<String>,
    /// CPU seconds over the window: Redis servers, etcd, hosts, the whole machine.
    cpu: [f64; 4],
}

impl RunResult {
    fn total(&self) -> Counts {
        let mut c = Counts::default();
        for h in &self.hosts {
            for b in h {
                c.add(b);
            }
        }
        c
    }

    /// Committed per bucket, summed over the hosts.
    fn series(&self) -> Vec<Counts> {
        let n = self.hosts.iter().map(Vec::len).max().unwrap_or(0);
        (0..n)
            .map(|i| {
                let mut c = Counts::default();
                for h in &self.hosts {
                    if let Some(b) = h.get(i) {
                        c.add(b);
                    }
                }
                c
            })
            .collect()
    }
}

/// Fills `namespace` with the accounts (each holding `INITIAL`), from this process.
fn preload(nodes: &[String], etcd: &[String], namespace: &str) -> Res<()> {
    let store = open_host(nodes, etcd, namespace, Durability::default())?;
    for chunk in (0..ACCOUNTS).collect::<Vec<_>>().chunks(250) {
        store.run(|t| {
            for &i in chunk {
                t.set("bank", account(i), "bal:v", INITIAL.to_be_bytes())?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The sum of all balances, read in one transaction (retried on conflict: a lock left by a
/// transfer whose outcome was unknown is resolved by this read).
fn total_balance(nodes: &[String], etcd: &[String], namespace: &str) -> Res<u64> {
    let store = open_host(nodes, etcd, namespace, Durability::default())?;
    Ok(store.run(|t| (0..ACCOUNTS).map(|i| balance(t, i)).sum::<percolator_store::Result<u64>>())?)
}

/// Starts `hosts` host processes on `namespace`, starts them together, calls `during` with the
/// common start instant (it returns when its events are done), and collects the results.
#[allow(clippy::too_many_arguments)]
fn run_hosts(
    namespace: &str,
    durability: Durability,
    hosts: usize,
    threads: usize,
    duration: Duration,
    bucket: Duration,
    cluster: Option<&DevCluster>,
    during: impl FnOnce(Instant),
) -> Res<RunResult> {
    let mut procs: Vec<Host> =
        (0..hosts).map(|_| Host::spawn(namespace, durability, threads, duration, bucket)).collect::<Res<_>>()?;
    for h in &procs {
        h.expect("READY", Duration::from_secs(60))?;
    }
    let lead = Duration::from_millis(300);
    let go = unix_ms() + lead.as_millis() as u64;
    let start = Instant::now() + lead;
    for h in &mut procs {
        let stdin = h.child.stdin.as_mut().ok_or("no stdin")?;
        writeln!(stdin, "GO {go}")?;
        stdin.flush()?;
    }
    let ticks = clock_ticks();
    std::thread::sleep(start.saturating_duration_since(Instant::now()));
    let before = CpuSample::take(cluster, &procs, ticks);
    during(start);
    std::thread::sleep((start + duration).saturating_duration_since(Instant::now()));
    let after = CpuSample::take(cluster, &procs, ticks);
    let mut result =
        RunResult { hosts: Vec::new(), notes: Vec::new(), cpu: std::array::from_fn(|i| after.0[i] - before.0[i]) };
    // A transfer in flight at the end may wait out the store's retries (15 s) before it returns.
    for (i, h) in procs.iter_mut().enumerate() {
        let (buckets, notes) = h.results(Duration::from_secs(60))?;
        result.hosts.push(buckets);
        result.notes.extend(notes.into_iter().map(|n| format!("host {i}: {n}")));
    }
    Ok(result)
}

struct Config {
    quick: bool,
    threads: usize,
    scaling: bool,
    /// The failover runs to make.
    failover: Vec<&'static FailoverRun>,
    figure_dir: PathBuf,
}

fn scaling(cfg: &Config, nodes: &[String], etcd: &[String], cluster: Option<&DevCluster>) -> Res<()> {
    let (rounds, duration) = if cfg.quick { (1, Duration::from_secs(5)) } else { (2, Duration::from_secs(20)) };
    let t = cfg.threads;
    // (name, hosts, threads per host)
    let setups = [("hosts1", 1, t), ("hosts2", 2, t), ("hosts3", 3, t), ("hosts1_3t", 1, 3 * t)];
    println!(
        "# 1. scaling: {} s per run, {rounds} round(s) alternating, best kept; {ACCOUNTS} accounts, transfers of 2 reads + 2 writes",
        duration.as_secs()
    );
    let base = format!("bench-hosts-{}", std::process::id());
    for (name, _, _) in setups {
        preload(nodes, etcd, &format!("{base}-{name}"))?;
    }
    let mut best: Vec<Option<(f64, RunResult)>> = setups.iter().map(|_| None).collect();
    for round in 0..rounds {
        for (k, &(name, hosts, threads)) in setups.iter().enumerate() {
            let r = run_hosts(
                &format!("{base}-{name}"),
                Durability::default(),
                hosts,
                threads,
                duration,
                duration,
                cluster,
                |_| {},
            )?;
            let rate = r.total().committed as f64 / duration.as_secs_f64();
            let c = r.total();
            println!(
                "# round {round} {name} ({hosts} host(s) x {threads} threads): {rate:.1} tx/s, {} conflicts, {} errors; CPU s redis {:.1} etcd {:.1} hosts {:.1} machine {:.1}",
                c.conflicts,
                c.errors(),
                r.cpu[0],
                r.cpu[1],
                r.cpu[2],
                r.cpu[3]
            );
            for n in &r.notes {
                println!("#   {n}");
            }
            if best[k].as_ref().is_none_or(|(b, _)| rate > *b) {
                best[k] = Some((rate, r));
            }
        }
    }
    let rate = |k: usize| best[k].as_ref().map(|(r, _)| *r).unwrap_or(0.0);
    for (k, (name, hosts, threads)) in setups.iter().enumerate() {
        let Some((r, res)) = &best[k] else { continue };
        let c = res.total();
        println!("# {name}: {hosts} host(s) x {threads} threads");
        print(&format!("{name}_tx_per_s"), *r);
        print(&format!("{name}_conflicts_per_s"), c.conflicts as f64 / duration.as_secs_f64());
        print(&format!("{name}_errors"), c.errors() as f64);
        let window = duration.as_secs_f64();
        let [redis, etcd_cpu, hosts_cpu, machine] = res.cpu;
        print(&format!("{name}_cpu_redis_cores"), redis / window);
        print(&format!("{name}_cpu_etcd_cores"), etcd_cpu / window);
        print(&format!("{name}_cpu_hosts_cores"), hosts_cpu / window);
        print(&format!("{name}_cpu_machine_busy_cores"), machine / window);
    }
    print("hosts2_over_hosts1", rate(1) / rate(0));
    print("hosts3_over_hosts1", rate(2) / rate(0));
    print("hosts1_3t_over_hosts1", rate(3) / rate(0));
    print("hosts3_over_hosts1_3t", rate(2) / rate(3));
    println!("# the machine's cores: {}", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0));
    Ok(())
}

/// When the failover's events happened, in seconds from the start.
#[derive(Default)]
struct Events {
    victim: String,
    kill: f64,
    promoted: Option<f64>,
    restart: f64,
    rejoined: Option<f64>,
}

/// True once the cluster, asked through `seed`, says `cluster_state:ok` and no slot is served by
/// `dead` (its replica has been promoted).
fn promoted(seed: &str, dead: &str) -> bool {
    let check = || -> Res<bool> {
        let mut con =
            redis::Client::open(format!("redis://{seed}/"))?.get_connection_with_timeout(Duration::from_millis(500))?;
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con)?;
        if !info.contains("cluster_state:ok") {
            return Ok(false);
        }
        let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con)?;
        let dead_port: i64 = dead.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(-1);
        let redis::Value::Array(ranges) = slots else { return Ok(false) };
        for r in ranges {
            let redis::Value::Array(r) = r else { continue };
            if let Some(redis::Value::Array(master)) = r.get(2)
                && let Some(redis::Value::Int(port)) = master.get(1)
                && *port == dead_port
            {
                return Ok(false);
            }
        }
        Ok(true)
    };
    check().unwrap_or(false)
}

/// True once the node at `addr` is a replica with its link to the master up.
fn rejoined(addr: &str) -> bool {
    let check = || -> Res<bool> {
        let mut con =
            redis::Client::open(format!("redis://{addr}/"))?.get_connection_with_timeout(Duration::from_millis(500))?;
        let info: String = redis::cmd("INFO").arg("replication").query(&mut con)?;
        Ok(info.contains("role:slave") && info.contains("master_link_status:up"))
    };
    check().unwrap_or(false)
}

/// One failover run: how the hosts commit, and the names of what it writes.
struct FailoverRun {
    /// For `--only failover-<name>`.
    name: &'static str,
    /// Of its printed figures (`<prefix>_before_tx_per_s`, …).
    prefix: &'static str,
    /// Of its files (`<stem>.svg`, `<stem>.csv`).
    stem: &'static str,
    durability: Durability,
}

/// The store's default (every commit on a replica too); commits acknowledged by the master
/// alone (the difference is what `WAIT` costs while a master has no replica); the default with
/// `degraded_writes` (a master without its replica waits for none).
const FAILOVER_RUNS: [FailoverRun; 3] = [
    FailoverRun {
        name: "wait1",
        prefix: "failover",
        stem: "figure10",
        durability: Durability { replicas: 1, degraded_writes: false },
    },
    FailoverRun {
        name: "wait0",
        prefix: "failover_wait0",
        stem: "figure10-wait0",
        durability: Durability { replicas: 0, degraded_writes: false },
    },
    FailoverRun {
        name: "degraded",
        prefix: "failover_degraded",
        stem: "figure10-degraded",
        durability: Durability { replicas: 1, degraded_writes: true },
    },
];

/// One failover run: its figures printed, its series written to `<stem>.csv` and `.svg`.
fn failover(cfg: &Config, nodes: &[String], etcd: &[String], cluster: &DevCluster, run: &FailoverRun) -> Res<()> {
    let FailoverRun { prefix, stem, durability, .. } = *run;
    let out = |name: &str, v: f64| print(&format!("{prefix}_{name}"), v);
    let (duration, kill_at, restart_at) = if cfg.quick {
        (Duration::from_secs(24), Duration::from_secs(6), Duration::from_secs(14))
    } else {
        (Duration::from_secs(50), Duration::from_secs(15), Duration::from_secs(30))
    };
    let bucket = Duration::from_millis(500);
    cluster.run(&["wait-ok"])?;
    let (victim, victim_addr) = cluster.first_master()?;
    let witness = nodes.iter().find(|n| **n != victim_addr).ok_or("no other node")?.clone();
    println!(
        "# 2. failover, commits {durability}: 3 hosts x {} threads for {} s in {} ms buckets; {victim} ({victim_addr}) SIGKILLed at {} s, started at {} s",
        cfg.threads,
        duration.as_secs(),
        bucket.as_millis(),
        kill_at.as_secs(),
        restart_at.as_secs()
    );
    let namespace = format!("bench-hosts-{}-{stem}", std::process::id());
    preload(nodes, etcd, &namespace)?;
    let events = Mutex::new(Events { victim: victim.clone(), ..Events::default() });
    let mut failure = None;
    let result = run_hosts(&namespace, durability, 3, cfg.threads, duration, bucket, Some(cluster), |start| {
        let since = |at: Instant| at.duration_since(start).as_secs_f64();
        let mut ev = events.lock().unwrap_or_else(|p| p.into_inner());
        std::thread::sleep((start + kill_at).saturating_duration_since(Instant::now()));
        ev.kill = since(Instant::now());
        if let Err(e) = cluster.run(&["kill", &victim]) {
            failure = Some(e);
            return;
        }
        while Instant::now() < start + restart_at {
            if ev.promoted.is_none() && promoted(&witness, &victim_addr) {
                ev.promoted = Some(since(Instant::now()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        ev.restart = since(Instant::now());
        if let Err(e) = cluster.run(&["start", &victim]) {
            failure = Some(e);
            return;
        }
        while Instant::now() < start + duration && ev.rejoined.is_none() {
            if rejoined(&victim_addr) {
                ev.rejoined = Some(since(Instant::now()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })?;
    if let Some(e) = failure {
        return Err(e);
    }
    let ev = events.into_inner().unwrap_or_else(|p| p.into_inner());
    let series = result.series();
    let secs = bucket.as_secs_f64();
    let per_s = |c: &Counts| c.committed as f64 / secs;
    for n in &result.notes {
        println!("#   {n}");
    }
    // Throughput before the kill (after a 5 s warm-up), until the promotion, after it.
    let promoted_at = ev.promoted.unwrap_or(ev.restart);
    let mean = |from: f64, to: f64| {
        let b: Vec<&Counts> = series
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as f64 * secs >= from && (*i + 1) as f64 * secs <= to)
            .map(|(_, c)| c)
            .collect();
        b.iter().map(|c| per_s(c)).sum::<f64>() / b.len().max(1) as f64
    };
    let warm = (kill_at.as_secs_f64() / 3.0).min(5.0);
    let before = mean(warm, ev.kill);
    let outage = mean(ev.kill, promoted_at);
    let after = mean(promoted_at, ev.restart);
    let after_restart = mean(ev.restart, duration.as_secs_f64());
    // The dip: from the kill to the first bucket back at 80 % of the mean before.
    let kill_bucket = (ev.kill / secs) as usize;
    let recovered =
        series.iter().enumerate().skip(kill_bucket + 1).find(|(_, c)| per_s(c) >= 0.8 * before).map(|(i, _)| i);
    let zero = series.iter().skip(kill_bucket).filter(|c| c.committed == 0).count() as f64 * secs;
    let total = result.total();
    let max_latency = series.iter().map(|c| c.max_latency_us).max().unwrap_or(0) as f64 / 1000.0;
    out("kill_s", ev.kill);
    out("promoted_s", ev.promoted.unwrap_or(f64::NAN));
    out("restart_s", ev.restart);
    out("rejoined_s", ev.rejoined.unwrap_or(f64::NAN));
    out("before_tx_per_s", before);
    out("kill_to_promoted_tx_per_s", outage);
    out("promoted_to_restart_tx_per_s", after);
    out("after_restart_tx_per_s", after_restart);
    out("outage_over_before", outage / before);
    out("after_over_before", after / before);
    out("after_restart_over_before", after_restart / before);
    out("back_to_80pct_s", recovered.map(|i| i as f64 * secs - ev.kill).unwrap_or(f64::NAN));
    out("zero_commit_buckets_s", zero);
    out("max_latency_ms", max_latency);
    out("committed", total.committed as f64);
    out("conflicts", total.conflicts as f64);
    out("unavailable_before_commit", total.unavailable_before_commit as f64);
    out("unavailable_at_commit", total.unavailable_at_commit as f64);
    out("other_errors", total.other_errors as f64);
    let sum = total_balance(nodes, etcd, &namespace)?;
    out("total_balance_unchanged", if sum == ACCOUNTS * INITIAL { 1.0 } else { 0.0 });
    if sum != ACCOUNTS * INITIAL {
        return Err(format!("the total balance is {sum}, not {}", ACCOUNTS * INITIAL).into());
    }
    std::fs::create_dir_all(&cfg.figure_dir)?;
    let csv = cfg.figure_dir.join(format!("{stem}.csv"));
    let svg = cfg.figure_dir.join(format!("{stem}.svg"));
    std::fs::write(&csv, figure_csv(&result, &ev, bucket))?;
    std::fs::write(&svg, figure_svg(&result, &ev, bucket, cfg.threads, durability))?;
    println!("# wrote {} and {}", svg.display(), csv.display());
    Ok(())
}

/// The series as CSV: one row per bucket, the events in the bucket they fall in.
fn figure_csv(r: &RunResult, ev: &Events, bucket: Duration) -> String {
    let secs = bucket.as_secs_f64();
    let mut s = String::from(
        "t_s,total_tx_per_s,host0_tx_per_s,host1_tx_per_s,host2_tx_per_s,conflicts,unavailable_before_commit,unavailable_at_commit,other_errors,max_latency_ms,event\n",
    );
    let events = event_list(ev);
    for (i, c) in r.series().iter().enumerate() {
        let t = i as f64 * secs;
        let _ = write!(s, "{t:.1},{:.1}", c.committed as f64 / secs);
        for h in &r.hosts {
            let _ = write!(s, ",{:.1}", h.get(i).map_or(0.0, |b| b.committed as f64 / secs));
        }
        let here: Vec<&str> =
            events.iter().filter(|(at, _)| *at >= t && *at < t + secs).map(|(_, n)| n.as_str()).collect();
        let _ = writeln!(
            s,
            ",{},{},{},{},{:.1},{}",
            c.conflicts,
            c.unavailable_before_commit,
            c.unavailable_at_commit,
            c.other_errors,
            c.max_latency_us as f64 / 1000.0,
            here.join("; ")
        );
    }
    s
}

fn event_list(ev: &Events) -> Vec<(f64, String)> {
    let mut v = vec![(ev.kill, format!("{} SIGKILL", ev.victim))];
    if let Some(p) = ev.promoted {
        v.push((p, "replica promoted".into()));
    }
    v.push((ev.restart, format!("{} restarted", ev.victim)));
    if let Some(j) = ev.rejoined {
        v.push((j, "rejoined as replica".into()));
    }
    v
}

/// The Figure 10 analog as an SVG: committed transfers/s of the 3 hosts together and of each,
/// failed transfers as bars along the bottom, the events as vertical lines.
fn figure_svg(r: &RunResult, ev: &Events, bucket: Duration, threads: usize, durability: Durability) -> String {
    let (w, h) = (900.0, 480.0);
    let (left, right, top, bottom) = (75.0, 25.0, 55.0, 95.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let secs = bucket.as_secs_f64();
    let series = r.series();
    let t_max = series.len() as f64 * secs;
    let y_top = series.iter().map(|c| c.committed as f64 / secs).fold(0.0, f64::max);
    let y_step = nice_step(y_top / 5.0);
    let y_max = ((y_top * 1.08) / y_step).ceil() * y_step;
    let x = |t: f64| left + t / t_max * pw;
    let y = |v: f64| top + ph - v / y_max * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Figure 10 analog: transactions/s of 3 hosts while a Redis master is killed and restarted</text>"#,
        w / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="40" text-anchor="middle" fill="#555">Percolator on a 3-master Redis Cluster (commits {durability}); bank transfers, {threads} threads per host; {} ms buckets</text>"##,
        w / 2.0,
        bucket.as_millis()
    );
    // Grid and axes.
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{2}" y="{3:.1}" text-anchor="end">{v}</text>"##,
            y(v),
            left + pw,
            left - 6.0,
            y(v) + 4.0
        );
        v += y_step;
    }
    let x_step = nice_step(t_max / 10.0);
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#555"/><text x="{0:.1}" y="{3}" text-anchor="middle">{t}</text>"##,
            x(t),
            top + ph,
            top + ph + 5.0,
            top + ph + 19.0
        );
        t += x_step;
    }
    let _ = writeln!(s, r##"<path d="M{left} {top} V{0} H{1}" fill="none" stroke="#333"/>"##, top + ph, left + pw);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">time since the start (s)</text>"#,
        left + pw / 2.0,
        top + ph + 38.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(20 {}) rotate(-90)" text-anchor="middle">committed transactions / s</text>"#,
        top + ph / 2.0
    );
    // Failed transfers (errors other than conflicts), as red bars from the axis.
    let err_max = series.iter().map(Counts::errors).max().unwrap_or(0);
    if err_max > 0 {
        for (i, c) in series.iter().enumerate() {
            let e = c.errors() as f64 / secs;
            if e > 0.0 {
                let _ = writeln!(
                    s,
                    r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#d62728" fill-opacity="0.45"/>"##,
                    x(i as f64 * secs) + 0.5,
                    y(e),
                    pw / series.len() as f64 - 1.0,
                    y(0.0) - y(e)
                );
            }
        }
    }
    // The events.
    for (k, (at, name)) in event_list(ev).iter().enumerate() {
        let color = if name.contains("SIGKILL") { "#d62728" } else { "#2ca02c" };
        let dash = if k % 2 == 0 { "6 4" } else { "2 3" };
        let _ = writeln!(
            s,
            r#"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1}" stroke="{color}" stroke-width="1.5" stroke-dasharray="{dash}"/><text x="{2:.1}" y="{3}" fill="{color}" font-size="11">{name} ({at:.1} s)</text>"#,
            x(*at),
            top + ph,
            x(*at) + 4.0,
            top + 12.0 + 13.0 * k as f64
        );
    }
    // Each host, then the total on top.
    let colors = ["#9ecae1", "#a1d99b", "#fdd0a2"];
    let path = |f: &dyn Fn(usize) -> f64| {
        let mut d = String::new();
        for i in 0..series.len() {
            let _ = write!(d, "{}{:.1} {:.1} ", if i == 0 { "M" } else { "L" }, x((i as f64 + 0.5) * secs), y(f(i)));
        }
        d
    };
    for (k, hb) in r.hosts.iter().enumerate() {
        let d = path(&|i| hb.get(i).map_or(0.0, |c| c.committed as f64 / secs));
        let _ = writeln!(s, r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.3"/>"#, colors[k % colors.len()]);
    }
    let d = path(&|i| series[i].committed as f64 / secs);
    let _ = writeln!(s, r##"<path d="{d}" fill="none" stroke="#1f4e9a" stroke-width="2.2"/>"##);
    // Legend, below the axis: (colour, a line or a bar, label).
    let mut legend = vec![("#1f4e9a", true, "all 3 hosts".to_string())];
    for k in 0..r.hosts.len() {
        legend.push((colors[k % colors.len()], true, format!("host {k}")));
    }
    legend.push(("#d62728", false, "failed (unavailable), /s".to_string()));
    let (ly, mut lx) = (h - 22.0, left);
    for (color, line, label) in legend {
        if line {
            let _ = write!(
                s,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/>"#,
                lx + 20.0
            );
        } else {
            let _ = write!(
                s,
                r#"<rect x="{lx}" y="{}" width="20" height="9" fill="{color}" fill-opacity="0.45"/>"#,
                ly - 4.5
            );
        }
        let _ = writeln!(s, r#"<text x="{:.1}" y="{}">{label}</text>"#, lx + 26.0, ly + 4.0);
        lx += 40.0 + 7.0 * label.len() as f64;
    }
    s.push_str("</svg>\n");
    s
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let ms = |flag: &str| -> Res<Duration> {
        Ok(Duration::from_millis(value(flag).ok_or_else(|| format!("{flag} is missing"))?.parse()?))
    };
    let threads: usize = value("--threads").map(|t| t.parse()).transpose()?.unwrap_or(8);
    if let Some(namespace) = value("--child") {
        let durability = Durability {
            replicas: value("--replicas").ok_or("--replicas is missing")?.parse()?,
            degraded_writes: args.iter().any(|a| a == "--degraded-writes"),
        };
        return child(ChildArgs {
            namespace,
            durability,
            threads,
            duration: ms("--duration-ms")?,
            bucket: ms("--bucket-ms")?,
        });
    }
    let quick = args.iter().any(|a| a == "--quick");
    let only = value("--only");
    let failover_runs: Vec<&FailoverRun> = match only.as_deref() {
        None | Some("failover") => FAILOVER_RUNS.iter().collect(),
        Some("scaling") => Vec::new(),
        Some(o) => {
            let run = o.strip_prefix("failover-").and_then(|n| FAILOVER_RUNS.iter().find(|r| r.name == n));
            let names: Vec<String> = FAILOVER_RUNS.iter().map(|r| format!("failover-{}", r.name)).collect();
            vec![run.ok_or_else(|| format!("--only takes scaling, failover or {}, not {o}", names.join(", ")))?]
        }
    };
    let figure_dir = value("--figure-dir").map(PathBuf::from).unwrap_or_else(|| {
        if quick {
            std::env::temp_dir().join("percolator-bench-figures")
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/figures")
        }
    });
    let cfg = Config {
        quick,
        threads,
        scaling: only.is_none() || only.as_deref() == Some("scaling"),
        failover: failover_runs,
        figure_dir,
    };
    let nodes = env_list("PERCOLATOR_REDIS")?;
    let etcd = env_list("PERCOLATOR_ETCD")?;
    let cluster = DevCluster::find();
    println!("# percolator-bench hosts: Redis Cluster {}, etcd {}", nodes.join(","), etcd.join(","));
    match &cluster {
        Some(c) => println!("# dev cluster {}", c.dir.display()),
        None => println!("# no dev cluster directory (PERCOLATOR_DEV_CLUSTER_DIR): no CPU split, no failover"),
    }
    if cfg.scaling {
        scaling(&cfg, &nodes, &etcd, cluster.as_ref())?;
    }
    if !cfg.failover.is_empty() {
        let cluster = cluster
            .as_ref()
            .ok_or("the failover part needs PERCOLATOR_DEV_CLUSTER_DIR (scripts/dev-cluster's --dir)")?;
        for run in &cfg.failover {
            failover(&cfg, &nodes, &etcd, cluster, run)?;
        }
    }
    Ok(())
}
