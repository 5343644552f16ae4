//! Shared by the integration tests of the host's crates (`host/tests`, `host/server/tests`,
//! `apps/webindex/tests` include this file): where the guest components are, and an in-process
//! host (store, pipeline, scanner) over a redb store in a temp dir.
#![allow(dead_code, unreachable_pub)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::sync::Arc;

use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::pipeline::Pipeline;
use percolator_store::{Durability, RedbConfig, Scanner, ScannerConfig, Store, StoreConfig};

/// Where `scripts/build-guests` puts the guest modules (`PERCOLATOR_GUESTS` overrides).
pub fn guests_dir() -> PathBuf {
    std::env::var_os("PERCOLATOR_GUESTS").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/guests"))
}

/// The workspace's root folder (the one holding `Cargo.lock`).
pub fn workspace() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().find(|p| p.join("Cargo.lock").is_file()).unwrap_or(here).to_path_buf()
}

/// The module of guest crate `name` (dashes or underscores).
pub fn guest(name: &str) -> PathBuf {
    let dir = guests_dir();
    for candidate in [name.to_owned(), name.replace('-', "_")] {
        let p = dir.join(format!("{candidate}.wasm"));
        if p.is_file() {
            return p;
        }
    }
    panic!("guest {name} not found in {}: run scripts/build-guests first", dir.display());
}

/// The `[store]` section of a test configuration: the redb file `path` with `durability`, or,
/// with `PERCOLATOR_TEST_BACKEND=redis`, a fresh namespace on the Redis Cluster that
/// `PERCOLATOR_REDIS` names (`path` then only anchors the host's local files).
pub fn store_section(path: &str, durability: &str) -> String {
    match std::env::var("PERCOLATOR_TEST_BACKEND").as_deref() {
        Ok("redis") => {
            let nodes =
                std::env::var("PERCOLATOR_REDIS").expect("PERCOLATOR_TEST_BACKEND=redis needs PERCOLATOR_REDIS");
            let nodes: Vec<String> = nodes.split(',').map(|n| format!("{:?}", n.trim())).collect();
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
            format!(
                "[store]\npath = \"{path}\"\nbackend = \"redis\"\n[store.redis]\nnodes = [{}]\nnamespace = \"test-{}-{nanos}\"\n",
                nodes.join(", "),
                std::process::id()
            )
        }
        _ => format!("[store]\npath = \"{path}\"\ndurability = \"{durability}\"\n"),
    }
}

/// A host running in this process; its temp dir is removed on drop.
pub struct Host {
    pub dir: PathBuf,
    pub store: Store,
    pub pipeline: Arc<Pipeline>,
    pub scanner: Option<Scanner>,
}

impl Host {
    /// Stops this host (the scanner, then the pipeline and the store, which closes) and starts
    /// another on the same folder, configuration and store. The pipeline saves nothing when
    /// it is dropped: run counts not saved by `Pipeline::persist_counts` are lost, as when a
    /// host process is killed.
    pub fn restart(mut self, scanner_threads: usize) -> Host {
        let dir = std::mem::take(&mut self.dir);
        drop(self); // removes no folder: `dir` is empty now
        open(dir, scanner_threads)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.scanner.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a host in `<tmp>/percolator-<name>-<pid>` whose observers folder holds `guests`
/// (file name → guest crate) and whose `pipeline.toml` has `bindings` (TOML `[[binding]]`
/// tables), with `scanner_threads` scanner threads (durability none).
pub fn start(name: &str, guests: &[(&str, &str)], bindings: &str, scanner_threads: usize) -> Host {
    start_with(name, guests, bindings, scanner_threads, "")
}

/// The compiled-component cache the tests share, `target/test-component-cache`: the large Python
/// and JavaScript components compile once, and their interpreters' functions (the function
/// cache) once for all of them; entries are verified by digest, so sharing is safe.
#[allow(dead_code)]
pub fn shared_cache_dir() -> PathBuf {
    workspace().join("target/test-component-cache")
}

/// [`start`] with compiled components cached in the workspace's `target/test-component-cache`,
/// shared by every test that uses it (the large Python and JavaScript components compile once;
/// entries are verified by digest, so sharing is safe).
#[allow(dead_code)]
pub fn start_cached(name: &str, guests: &[(&str, &str)], bindings: &str, scanner_threads: usize) -> Host {
    let cache = shared_cache_dir();
    start_with(name, guests, bindings, scanner_threads, &format!("cache_dir = {:?}\n", cache.display().to_string()))
}

fn start_with(name: &str, guests: &[(&str, &str)], bindings: &str, scanner_threads: usize, observers: &str) -> Host {
    let dir = std::env::temp_dir().join(format!("percolator-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("observers")).unwrap();
    for (file, crate_name) in guests {
        std::fs::copy(guest(crate_name), dir.join("observers").join(file)).unwrap();
    }
    std::fs::write(
        dir.join("pipeline.toml"),
        format!(
            "[store]\npath = \"store.redb\"\ndurability = \"none\"\n[observers]\ndir = \"observers\"\n{observers}{bindings}"
        ),
    )
    .unwrap();
    open(dir, scanner_threads)
}

/// Opens the host of a folder [`start`] made: its `pipeline.toml`, over its store.
fn open(dir: PathBuf, scanner_threads: usize) -> Host {
    let config = Config::load(&dir.join("pipeline.toml")).unwrap();
    let store = Store::open(
        &config.store_path,
        StoreConfig::default(),
        RedbConfig { durability: Durability::None, ..RedbConfig::default() },
    )
    .unwrap();
    let runtime = Runtime::new(Some(config.cache_dir.clone())).unwrap();
    let pipeline = Arc::new(Pipeline::new(store.clone(), runtime));
    pipeline.apply(&config).unwrap();
    let scanner = Some(store.start_scanner(ScannerConfig { threads: scanner_threads, ..ScannerConfig::default() }));
    Host { dir, store, pipeline, scanner }
}

/// The `percolator` binary, for tests of other packages (a package's own tests use
/// `CARGO_BIN_EXE_percolator`): `PERCOLATOR_BIN`, else the one cargo built next to the test
/// (`cargo test --workspace` builds it with the `percolator` package's tests).
pub fn percolator_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("PERCOLATOR_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/<test> → target/<profile>/percolator
    let bin = exe.parent().and_then(Path::parent).map(|d| d.join("percolator")).unwrap();
    assert!(
        bin.is_file(),
        "{} is missing: build it first (cargo build -p percolator) or set PERCOLATOR_BIN",
        bin.display()
    );
    bin
}

/// A `[[binding]]` of `wasm` on `docs/<column>` with `extra` lines (the language guests' tests).
#[allow(dead_code)]
pub fn docs_binding(name: &str, wasm: &str, column: &str, extra: &str) -> String {
    format!("\n[[binding]]\nname = \"{name}\"\nwasm = \"{wasm}\"\ntable = \"docs\"\ncolumn = \"{column}\"\n{extra}")
}

/// A binding of a language's `hostile.wasm` on `docs/in:<mode>` misbehaving as `mode` says
/// (its parameter), allowed to write `docs/out:<mode>`, dead-lettered at the first failure.
#[allow(dead_code)]
pub fn hostile_binding(mode: &str, extra: &str) -> String {
    docs_binding(
        mode,
        "hostile.wasm",
        &format!("in:{mode}"),
        &format!("writes = [\"docs/out:{mode}\"]\nmax_attempts = 1\n{extra}[binding.params]\nmode = \"{mode}\"\n"),
    )
}

/// A language's uppercase guest (`guest`), bound twice — with the default target and with the
/// `target` parameter — runs end to end, and a non-UTF-8 value dead-letters both bindings
/// with the SDK's message naming the cell.
#[allow(dead_code)]
pub fn uppercase_runs_with_its_parameters(name: &str, guest: &str) {
    let h = start_cached(
        name,
        &[("upper.wasm", guest)],
        &(docs_binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")
            + &docs_binding(
                "shout",
                "upper.wasm",
                "raw:text",
                "writes = [\"docs/derived:shout\"]\n[binding.params]\ntarget = \"derived:shout\"\n",
            )),
        2,
    );
    for i in 0..10 {
        h.store.run(|t| t.set("docs", format!("r{i}"), "raw:text", format!("hello {i}"))).unwrap();
    }
    h.store.run(|t| t.set("docs", "bad", "raw:text", vec![0xff, 0xfe])).unwrap();
    assert!(h.store.wait_quiescent(std::time::Duration::from_secs(120)).unwrap());
    let t = h.store.begin().unwrap();
    for i in 0..10 {
        assert_eq!(t.get("docs", format!("r{i}"), "derived:upper").unwrap(), Some(format!("HELLO {i}").into_bytes()));
        assert_eq!(t.get("docs", format!("r{i}"), "derived:shout").unwrap(), Some(format!("HELLO {i}").into_bytes()));
    }
    let dead = h.store.dead_letters().unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|d| d.error.contains("docs/bad/raw:text is not UTF-8")), "{dead:?}");
}

/// The `[[combine]]` sections and the binding of a language's `hostile.wasm` in mode
/// `combine`: `docs/sum:i` (sum i64), `docs/sum:f` (sum f64), `docs/set:s` (set).
#[allow(dead_code)]
pub fn combine_pipeline() -> String {
    let mut toml = String::new();
    for (column, op, ty) in [("sum:i", "sum", "i64"), ("sum:f", "sum", "f64"), ("set:s", "set", "set")] {
        toml += &format!("[[combine]]\ntable = \"docs\"\ncolumn = \"{column}\"\nop = \"{op}\"\ntype = \"{ty}\"\n\n");
    }
    toml + &docs_binding(
        "combine",
        "hostile.wasm",
        "in:combine",
        "writes = [\"docs/out:combine\", \"docs/sum:i\", \"docs/sum:f\", \"docs/set:s\"]\nmax_attempts = 1\n\
         [binding.params]\nmode = \"combine\"\n",
    )
}

/// A language's hostile guest in mode `combine` ([`combine_pipeline`]): its SDK's deltas of
/// every kind reach the host's `combine` (the totals read back as the store's text), and
/// deltas of the wrong kind are refused with `invalid-argument`, by the host or the SDK.
#[allow(dead_code)]
pub fn combine_deltas_of_every_kind_reach_the_host(name: &str, guest: &str) {
    let h = start_cached(name, &[("hostile.wasm", guest)], &combine_pipeline(), 2);
    h.store.run(|t| t.set("docs", "r1", "in:combine", "go")).unwrap();
    assert!(h.store.wait_quiescent(std::time::Duration::from_secs(120)).unwrap());
    assert!(h.store.dead_letters().unwrap().is_empty(), "{:?}", h.store.dead_letters().unwrap());
    let t = h.store.begin().unwrap();
    let text = |col: &str| t.get("docs", "r1", col).unwrap().map(|v| String::from_utf8(v).unwrap());
    assert_eq!(text("out:combine").as_deref(), Some("read 5; invalid-argument; invalid-argument; invalid-argument"));
    assert_eq!(text("sum:i").as_deref(), Some("5"));
    assert_eq!(text("sum:f").as_deref(), Some("2.5"));
    assert_eq!(text("set:s").as_deref(), Some(r#"["a","b","c"]"#));
}

/// Stops a `percolator` process the way its supervisor would (SIGTERM, by PID), waits up to
/// 30 s for it to exit, then kills it: what a test's host guard does on drop.
pub fn stop_process(mut child: std::process::Child) {
    let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A host running the hostile guest `hostile` (a Python or JavaScript component) once per
/// misbehaviour in `modes` (mode, its binding's extra lines), beside `upper` (the uppercase
/// guest of the same language) on `docs/raw:text`: each mode's input written to `docs/r1`, then
/// `more` (further writes), then a healthy document, and the host waited on until quiescent.
/// Returns the host and a lookup of the dead letter of each mode, by mode.
pub fn run_hostile_modes(
    name: &str,
    hostile: &str,
    upper: &str,
    modes: &[(&str, &str)],
    more: impl FnOnce(&Store),
) -> (Host, Vec<percolator_store::DeadLetter>) {
    let bindings: String = modes.iter().map(|(mode, extra)| hostile_binding(mode, extra)).collect::<String>()
        + &docs_binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n");
    let h = start_cached(name, &[("hostile.wasm", hostile), ("upper.wasm", upper)], &bindings, 2);
    for (mode, _) in modes {
        h.store.run(|t| t.set("docs", "r1", &format!("in:{mode}"), "go")).unwrap();
    }
    more(&h.store);
    h.store.run(|t| t.set("docs", "healthy", "raw:text", "still serving")).unwrap();
    assert!(h.store.wait_quiescent(std::time::Duration::from_secs(120)).unwrap());
    let dead = h.store.dead_letters().unwrap();
    (h, dead)
}

/// The error of `observer`'s dead letter in `dead`; fails the test if it has none.
pub fn dead_letter_error(dead: &[percolator_store::DeadLetter], observer: &str) -> String {
    dead.iter()
        .find(|d| d.observer == observer)
        .map(|d| d.error.clone())
        .unwrap_or_else(|| panic!("no dead letter of {observer}: {dead:?}"))
}

/// Waits (up to 120 s) until a starting `percolator up` has written its endpoint file; fails
/// the test with the host's log if it exits or does not start in time.
pub fn wait_for_endpoint(child: &mut std::process::Child, endpoint: &Path, log: &Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !endpoint.is_file() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the host exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the host did not start: {}",
            std::fs::read_to_string(log).unwrap()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
