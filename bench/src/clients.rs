//! What the benchmarks against PostgreSQL and SQLite (`--bin bank`, `--bin counter`) share:
//! client threads run for a fixed time, a measured run, CPU time, a private temporary
//! directory. Included by `#[path]` (with `pg.rs` and `procfs.rs`).

use std::path::PathBuf;
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A benchmark's result.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Prints one figure as `name value`.
pub(crate) fn print(name: &str, value: f64) {
    println!("{name} {value:.3}");
}

/// Parses a comma-separated list given to `--what`.
pub(crate) fn parse_list<T>(s: &str, what: &str, f: impl Fn(&str) -> Option<T>) -> Res<Vec<T>> {
    s.split(',').map(|x| f(x.trim()).ok_or_else(|| format!("--{what}: cannot read {x:?}").into())).collect()
}

/// CPU seconds of this process so far.
pub(crate) fn self_cpu() -> f64 {
    crate::procfs::cpu_seconds("self").map(|(own, _)| own).unwrap_or(0.0)
}

/// One measured run.
pub(crate) struct Run {
    /// Committed transactions.
    pub(crate) committed: u64,
    /// Attempts that failed with a conflict (serialization failure) and were retried, where
    /// known.
    pub(crate) retries: Option<u64>,
    pub(crate) secs: f64,
    /// CPU time of everything doing the work (this process; or the server and its clients).
    pub(crate) cpu_secs: f64,
    /// Backend commits (redb write transactions) during the run, where known.
    pub(crate) backend_commits: Option<u64>,
    /// Cores busy while the clients ran, where the run has a tail after them (percolator's
    /// final checkpoint, which `secs` and `cpu_secs` include).
    pub(crate) load_cores: Option<f64>,
}

impl Run {
    /// A run known by its counts and times alone (no backend commits, no tail after the load).
    pub(crate) fn counted(committed: u64, retries: u64, secs: f64, cpu_secs: f64) -> Run {
        Run { committed, retries: Some(retries), secs, cpu_secs, backend_commits: None, load_cores: None }
    }

    pub(crate) fn tps(&self) -> f64 {
        self.committed as f64 / self.secs
    }
    pub(crate) fn cpu_us_per_commit(&self) -> f64 {
        self.cpu_secs * 1e6 / self.committed.max(1) as f64
    }
    /// Cores busy on average: CPU time over wall time.
    pub(crate) fn cores(&self) -> f64 {
        self.cpu_secs / self.secs
    }
    /// Prints the run's figures, each named `{key}_…`.
    pub(crate) fn print(&self, key: &str) {
        print(&format!("{key}_tps"), self.tps());
        print(&format!("{key}_cpu_us"), self.cpu_us_per_commit());
        print(&format!("{key}_cores"), self.cores());
        if let Some(n) = self.retries {
            print(&format!("{key}_retries_per_commit"), n as f64 / self.committed.max(1) as f64);
        }
        if let Some(n) = self.backend_commits {
            print(&format!("{key}_backend_commits_per_commit"), n as f64 / self.committed.max(1) as f64);
        }
        if let Some(cores) = self.load_cores {
            print(&format!("{key}_load_cores"), cores);
        }
    }
}

/// What [`run_threads`] counted.
pub(crate) struct Load {
    /// Committed before the time was up.
    pub(crate) committed: u64,
    /// Committed in all, including the transactions in flight when the time was up.
    pub(crate) total: u64,
    pub(crate) retries: u64,
    pub(crate) secs: f64,
}

/// Runs `clients` threads calling `once` for `secs`; `once` commits one transaction and
/// returns how many attempts it retried. Counts what committed before the time was up.
pub(crate) fn run_threads(clients: usize, secs: f64, once: impl Fn() -> Res<u64> + Sync) -> Res<Load> {
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let retries = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let barrier = Barrier::new(clients + 1);
    let mut first_error = None;
    let load = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let mut error = None;
                    while !stop.load(Ordering::Relaxed) {
                        match once() {
                            Ok(r) => {
                                retries.fetch_add(r, Ordering::Relaxed);
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
        let mut load = Load {
            committed: committed.load(Ordering::Relaxed),
            total: 0,
            retries: retries.load(Ordering::Relaxed),
            secs: started.elapsed().as_secs_f64(),
        };
        for h in handles {
            if let Ok(Some(e)) = h.join() {
                first_error.get_or_insert(e);
            }
        }
        load.total = committed.load(Ordering::Relaxed);
        load
    });
    if let Some(e) = first_error {
        return Err(format!("{} transaction(s) failed, e.g.: {e}", failed.load(Ordering::Relaxed)).into());
    }
    Ok(load)
}

/// A temporary directory, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    /// `percolator-<name>-<pid>` in the system's temporary directory.
    pub(crate) fn new(name: &str) -> Res<TempDir> {
        let dir = TempDir(std::env::temp_dir().join(format!("percolator-{name}-{}", std::process::id())));
        std::fs::create_dir_all(&dir.0)?;
        Ok(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
