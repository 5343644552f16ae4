//! Helpers shared by the integration tests of `percolator-store`, `percolator-redis` and the
//! host: a store on the backend under test (`PERCOLATOR_TEST_BACKEND`: in memory or a fresh
//! Redis namespace, so the same tests prove both), the test cluster's servers
//! (`scripts/dev-cluster`), temporary folders, child test processes. A dev-dependency only.
#![allow(missing_docs)]

mod flaky;
pub use flaky::Flaky;

use std::io::Write;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use percolator_redis::{EtcdCoordination, OracleServiceConfig, RedisBigtable, RedisConfig};
use percolator_store::backends::{Bigtable, MemBigtable, RedbBigtable};
use percolator_store::{Durability, RedbConfig, Store, StoreConfig, Transaction};

/// A store and the backend under it. The store does not hand its backend out; tests that look
/// at stored versions (no lock left, GC removed what it should) keep it here.
#[derive(Clone)]
pub struct TestStore {
    pub store: Store,
    pub backend: Arc<dyn Bigtable>,
}

impl TestStore {
    pub fn new(backend: Arc<dyn Bigtable>, config: StoreConfig) -> TestStore {
        TestStore { store: Store::with_backend(backend.clone(), config).unwrap(), backend }
    }

    /// The redb store at `path`, with `durability`.
    pub fn open(path: &Path, config: StoreConfig, durability: Durability) -> TestStore {
        let redb = RedbBigtable::open(path, RedbConfig { durability, ..RedbConfig::default() }).unwrap();
        TestStore::new(Arc::new(redb), config)
    }
}

impl Deref for TestStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

/// The store most tests run on: in memory, or with `PERCOLATOR_TEST_BACKEND=redis`, a fresh
/// namespace on the Redis Cluster that `PERCOLATOR_REDIS` names (see `scripts/test`): the same
/// tests prove both backends.
pub fn test_store(config: StoreConfig) -> TestStore {
    match test_backend().as_str() {
        "mem" => TestStore::new(Arc::new(MemBigtable::new()), config),
        "redis" => TestStore::new(Arc::new(redis_backend()), config),
        other => panic!("PERCOLATOR_TEST_BACKEND={other:?}: expected mem or redis"),
    }
}

/// An in-memory store whatever the test backend: for what only exclusive backends do
/// (one-phase commit).
pub fn mem_store(config: StoreConfig) -> TestStore {
    TestStore::new(Arc::new(MemBigtable::new()), config)
}

/// `PERCOLATOR_TEST_BACKEND`, `mem` by default.
pub fn test_backend() -> String {
    std::env::var("PERCOLATOR_TEST_BACKEND").unwrap_or_else(|_| "mem".into())
}

/// The Redis Cluster's seed nodes from `PERCOLATOR_REDIS` (`host:port,…`, as `scripts/dev-cluster`
/// writes them), or `None`. With `PERCOLATOR_REQUIRE_REDIS=1` (the test command sets it), a
/// missing cluster fails the test instead of skipping it.
pub fn redis_nodes() -> Option<Vec<String>> {
    server_list("PERCOLATOR_REDIS")
}

/// The etcd client URLs from `PERCOLATOR_ETCD`, like [`redis_nodes`].
pub fn etcd_endpoints() -> Option<Vec<String>> {
    server_list("PERCOLATOR_ETCD")
}

/// The comma-separated list in environment variable `var`; required with `PERCOLATOR_REQUIRE_REDIS`.
fn server_list(var: &str) -> Option<Vec<String>> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Some(v.split(',').map(|s| s.trim().to_string()).collect()),
        _ => {
            assert!(
                std::env::var("PERCOLATOR_REQUIRE_REDIS").is_err(),
                "PERCOLATOR_REQUIRE_REDIS is set but {var} is not (run scripts/dev-cluster up and source its env)"
            );
            None
        }
    }
}

/// Runs this test binary's ignored test `name` as a child process with `env = value`, its
/// stdout read line by line on a thread (the lines come on the receiver until it exits).
pub fn spawn_child_test(
    name: &str,
    env: &str,
    value: &str,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads=1"])
        .env(env, value)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = lines_of(&mut child);
    (child, lines)
}

/// The lines `child` prints on its stdout (piped), as they come; the channel ends at its EOF.
pub fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    lines
}

/// A fresh, empty Redis store (its own namespace) on the test cluster.
pub fn redis_backend() -> RedisBigtable {
    let nodes =
        redis_nodes().expect("PERCOLATOR_TEST_BACKEND=redis needs PERCOLATOR_REDIS (run scripts/dev-cluster up)");
    let namespace = unique_namespace();
    // Captured, and shown with a failing test's output: where to look on the cluster.
    eprintln!("Redis namespace {namespace}");
    RedisBigtable::open(RedisConfig { nodes, namespace, ..RedisConfig::default() }).unwrap()
}

/// A store over the Redis namespace `namespace` with the shared oracle service (this store one
/// of its candidates): what a host of several uses. Any number of them may share a namespace.
pub fn shared_store(namespace: &str, config: StoreConfig) -> TestStore {
    let nodes = redis_nodes().expect("needs PERCOLATOR_REDIS (run scripts/dev-cluster up)");
    let etcd = etcd_endpoints().expect("needs PERCOLATOR_ETCD (run scripts/dev-cluster up)");
    let backend = Arc::new(
        RedisBigtable::open(RedisConfig { nodes, namespace: namespace.into(), ..RedisConfig::default() }).unwrap(),
    );
    let oracle = EtcdCoordination::with_candidate(OracleServiceConfig {
        etcd,
        namespace: namespace.into(),
        range: 10_000,
        ..OracleServiceConfig::default()
    })
    .map(percolator_store::Oracle::new)
    .unwrap();
    TestStore { store: Store::with_oracle(backend.clone(), oracle, config).unwrap(), backend }
}

/// Runs `scripts/dev-cluster <args> --dir <dir>` and returns what it printed; fails the test if
/// it fails.
pub fn dev_cluster(dir: &Path, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/dev-cluster");
    let out = std::process::Command::new(script)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("running scripts/dev-cluster");
    assert!(out.status.success(), "dev-cluster {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The dev cluster's name (`redis-N`, what `kill` and `start` take) of its first Redis master.
pub fn first_master(dir: &Path) -> String {
    let master = dev_cluster(dir, &["masters"]).lines().next().expect("a master").trim().to_string();
    dev_cluster(dir, &["status"])
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.len() > 2 && cols[0].starts_with("redis-") && cols[2] == master)
        .map(|cols| cols[0].to_string())
        .expect("the master in the status")
}

/// A namespace no other test (or earlier run) uses.
pub fn unique_namespace() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("test-{}-{}-{n}", std::process::id(), rand_suffix())
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), name)
    }
    /// A folder under `parent`: for a test that needs a disk with room (an integration test's
    /// `CARGO_TARGET_TMPDIR`, on target/'s disk, rather than a small /tmp).
    pub fn new_in(parent: &Path, name: &str) -> TempDir {
        let p = parent.join(format!("percolator-{name}-{}-{}", std::process::id(), rand_suffix()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() as u64
}

pub fn redb_store(dir: &TempDir, config: StoreConfig) -> TestStore {
    TestStore::open(&dir.file("store.redb"), config, Durability::None)
}

/// Short TTLs so abandoned locks are cleaned quickly in tests.
pub fn fast_locks() -> StoreConfig {
    StoreConfig { lock_ttl: Duration::from_millis(200), lock_wait: Duration::from_secs(5), ..StoreConfig::default() }
}

pub fn get_u64(t: &Transaction, table: &str, row: &str, col: &str) -> percolator_store::Result<u64> {
    Ok(t.get(table, row, col)?.map(|v| u64::from_be_bytes(v.try_into().unwrap())).unwrap_or(0))
}

pub fn set_u64(t: &mut Transaction, table: &str, row: &str, col: &str, v: u64) -> percolator_store::Result<()> {
    t.set(table, row, col, v.to_be_bytes())
}

/// Runs `body` in one transaction and commits it once (no retry: for single-writer steps);
/// returns its commit timestamp.
pub fn commit_once(
    store: &Store,
    body: impl FnOnce(&mut Transaction) -> percolator_store::Result<()>,
) -> percolator_store::Timestamp {
    let mut t = store.begin().unwrap();
    body(&mut t).unwrap();
    t.commit().unwrap()
}

/// A tmpfs of a few MiB mounted on a fresh folder, unmounted on drop: a disk for a test to fill.
/// Mounting needs root (or `CAP_SYS_ADMIN`).
pub struct SmallDisk {
    /// Where it is mounted.
    pub dir: PathBuf,
}

impl SmallDisk {
    /// Mounts `size_mib` MiB, or says why it cannot and returns `None` (a failure instead if
    /// `PERCOLATOR_REQUIRE_MOUNT` is set).
    pub fn mount(test: &str, size_mib: u32) -> Option<SmallDisk> {
        let dir = std::env::temp_dir().join(format!("percolator-full-disk-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&dir)
            .output();
        let why = match out {
            Ok(o) if o.status.success() => return Some(SmallDisk { dir }),
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
            Err(e) => format!("cannot run mount: {e}"),
        };
        let _ = std::fs::remove_dir(&dir);
        assert!(
            std::env::var_os("PERCOLATOR_REQUIRE_MOUNT").is_none(),
            "{test}: mounting a {size_mib} MiB tmpfs failed ({why}), and PERCOLATOR_REQUIRE_MOUNT is set"
        );
        eprintln!(
            "SKIPPED {test}: mounting a {size_mib} MiB tmpfs to fill failed ({why}); run as root (or with \
             CAP_SYS_ADMIN) to run it, PERCOLATOR_REQUIRE_MOUNT=1 to make this a failure"
        );
        None
    }

    /// Fills the disk with `file`, then gives back `leave` bytes of it.
    pub fn fill(&self, file: &Path, leave: u64) {
        let mut f = std::fs::File::create(file).unwrap();
        let chunk = vec![0x5Au8; 64 << 10];
        let mut written = 0u64;
        loop {
            match f.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling {}: {e}", file.display()),
            }
        }
        f.set_len(written.saturating_sub(leave)).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Incompressible bytes (values of 256 bytes and more are stored deflated), different per
/// `seed`: for tests whose file sizes must be the values'.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `rounds` transactions, each writing `value(row, round)` to `t/r{row:04} c:v` of every row
/// below `rows`: versions for GC and compaction tests to collect.
pub fn write_rounds(store: &Store, rows: u64, rounds: u64, value: impl Fn(u64, u64) -> Vec<u8>) {
    for round in 0..rounds {
        store
            .run(|t| {
                for r in 0..rows {
                    t.set("t", format!("r{r:04}"), "c:v", value(r, round))?;
                }
                Ok(())
            })
            .unwrap();
    }
}

/// [`write_rounds`], each round checkpointed into `redb` before the next is written, so that
/// every version reaches the file: for compaction tests, whose file must hold the versions GC
/// then frees (one that GC removes while it is still in the memtable never reaches the file,
/// and a loaded machine checkpoints seldom).
pub fn write_rounds_into(
    store: &Store,
    redb: &RedbBigtable,
    rows: u64,
    rounds: u64,
    value: impl Fn(u64, u64) -> Vec<u8>,
) {
    for round in 0..rounds {
        write_rounds(store, rows, 1, |row, _| value(row, round));
        redb.checkpoint().unwrap();
    }
}

/// A store for compaction tests: `rounds` versions of `rows` rows written into the redb file at
/// `path` ([`write_rounds_into`]) and all but the newest collected, with no compaction when
/// quiet; then the store closed and opened again with `config`, whose compaction when quiet
/// begins its first quiet spell there. (Compacting from the start, a store whose machine was
/// slow enough to leave it quiet between the last round and GC's deletions compacted before
/// GC freed the pages: the test then saw a file already small.) Returns the store, its
/// backend and the file's size.
pub fn grown_store(
    path: &Path,
    config: RedbConfig,
    rows: u64,
    rounds: u64,
    value: impl Fn(u64, u64) -> Vec<u8>,
) -> (TestStore, Arc<RedbBigtable>, u64) {
    {
        let setup = RedbConfig { compact_when_quiet: None, ..config.clone() };
        let redb = Arc::new(RedbBigtable::open(path, setup).unwrap());
        let store = TestStore::new(redb.clone(), StoreConfig::default());
        write_rounds_into(&store, &redb, rows, rounds, &value);
        let gc = store.gc().unwrap();
        assert_eq!(gc.versions_removed, rows * (rounds - 1), "{gc:?}");
        redb.checkpoint().unwrap();
    }
    let redb = Arc::new(RedbBigtable::open(path, config).unwrap());
    let store = TestStore::new(redb.clone(), StoreConfig::default());
    let size = std::fs::metadata(path).unwrap().len();
    (store, redb, size)
}
