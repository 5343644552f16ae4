//! The Wasm runtime: one wasmtime `Engine`, components compiled once (and cached on disk), and
//! [`WasmObserver`], which implements the store's `Observer` trait by calling a component's
//! `observe` export.
//!
//! **Instances are reused.** A fresh `Store` + instantiation per notification costs ≈ 36–69 µs
//! here against ≈ 1.5 µs for a call into a warm instance (measured on this project's 2-core machine),
//! so each observer keeps a small pool of warm instances, each in its own `Store` with its own
//! memory cap. The sandbox guarantees are per instance and do not depend on freshness: a guest
//! still sees only its own linear memory and the WIT imports, and every run gets its own
//! deadline. What reuse allows is state carried from one run to the next inside one
//! observer's instance (observers are meant to be stateless; state that matters belongs in the
//! store). An instance that traps is discarded (wasmtime refuses further calls into it), and
//! every instance is retired after [`MAX_RUNS_PER_INSTANCE`] runs, which bounds leaks, or once
//! its memory grew more than [`GROWN_SLACK`] (or twice) past its fresh size, which bounds what
//! warm instances hold.

use std::cell::{Cell as StdCell, RefCell};
use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use percolator_store::{NotifyKind, ObserveError, Transaction};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::error::Context;
use wasmtime::{Config, Engine, ProfilingStrategy, Result, Store, Trap};

use crate::access::Access;
use crate::bindings::{Cell, Notification, Observer as ObserverWorld, ObserverPre, WitError};
use crate::cache_limit::CachePruned;
use crate::footprint::Footprint;
use crate::function_cache::{self, FunctionCache, FunctionCacheStats};
use crate::host::sink::TransformState;
use crate::host::{Budget, HostState};
use crate::sandbox::{Environment, Output, Wasi};
use crate::world::Provided;

/// Epoch ticker period: deadlines are enforced to within one tick.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);
/// A run's clocks, for its deadline ([`Limits::timeout`]): the CPU time its thread had spent and
/// the wall time when it started.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunClock {
    cpu: Duration,
    wall: Instant,
}

/// A run is interrupted after this many times its deadline of wall time, however little CPU it
/// had: a bound on a run starved of cores.
const WALL_DEADLINE_FACTOR: u32 = 10;

impl RunClock {
    pub(crate) fn now() -> RunClock {
        RunClock { cpu: thread_cpu(), wall: Instant::now() }
    }

    /// The wall time since the clock started.
    pub(crate) fn wall_spent(&self) -> Duration {
        self.wall.elapsed()
    }

    /// The CPU time this thread spent since the clock started (call it on the same thread).
    pub(crate) fn cpu_spent(&self) -> Duration {
        thread_cpu().saturating_sub(self.cpu)
    }

    /// What to do when the epoch deadline of a run of `timeout` passes (it is called on the
    /// run's thread): interrupt it if its thread spent `timeout` of CPU in it since it started
    /// (or `WALL_DEADLINE_FACTOR` times it of wall time passed), else wait the ticks of what is
    /// left of its CPU time.
    pub(crate) fn deadline(&self, timeout: Duration) -> wasmtime::UpdateDeadline {
        let spent = self.cpu_spent();
        if spent >= timeout || self.wall.elapsed() >= timeout.saturating_mul(WALL_DEADLINE_FACTOR) {
            return wasmtime::UpdateDeadline::Interrupt;
        }
        let left = (timeout - spent).as_millis() as u64;
        wasmtime::UpdateDeadline::Continue(left.div_ceil(EPOCH_TICK.as_millis() as u64).max(1))
    }
}

/// The CPU time this thread has spent (`CLOCK_THREAD_CPUTIME_ID`); zero if unknown, so that
/// a run's wall-time bound decides. Also what the benchmarks time a computation with.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    #[allow(unsafe_code)]
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec.max(0) as u64, ts.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// Retire an instance after this many runs.
const MAX_RUNS_PER_INSTANCE: u32 = 10_000;

/// How long a host waits for another that compiles the same component into the shared cache
/// before compiling it itself (an 18 MB Python component takes seconds to tens of seconds).
const COMPILE_LOCK_WAIT: Duration = Duration::from_secs(120);

/// What the compiled components in the cache folder may take unless told otherwise
/// ([`Runtime::set_cache_limit`]; the configuration's `observers.cache_max_mb`): about a hundred
/// Python or JavaScript guests, or thousands of Rust ones.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 4 << 30;

/// Per-binding limits of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deadline of one `observe` call (of a sink transform: of its instantiation, then of one
    /// `transform` call): CPU time of its thread, and at most ten times it of wall time
    /// (`RunClock`).
    pub timeout: Duration,
    /// Linear-memory cap of one instance (all its memories and tables), in bytes.
    pub memory_bytes: usize,
    /// Core module instances one component instance may create (a Rust guest makes 3–4,
    /// componentize-py's output 38, componentize-js's 7–10).
    pub instances: u32,
    /// Tables one component instance may create.
    pub tables: u32,
    /// Linear memories one component instance may create.
    pub memories: u32,
    /// Warm instances kept (about the number of scanner threads).
    pub pool: usize,
}

impl Limits {
    /// The defaults fit what the standard Rust, Python (componentize-py) and JavaScript
    /// (componentize-js) toolchains produce for an observer.
    pub const DEFAULT: Limits = Limits {
        timeout: Duration::from_secs(1),
        memory_bytes: 256 << 20,
        instances: 64,
        tables: 64,
        memories: 16,
        pool: 4,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// The engine, the linker with the host imports, and the compiled-component cache.
pub struct Runtime {
    pub(crate) engine: Engine,
    linker: Linker<HostState>,
    /// The linker of the sink-transform world (`transform.rs`): WASI and `percolator:sink`.
    pub(crate) sink_linker: Linker<TransformState>,
    cache_dir: Option<PathBuf>,
    /// What the cached components may take (`cache_limit.rs`): the least recently used go
    /// first once a compile has written one more.
    cache_max_bytes: AtomicU64,
    /// The cache entries this runtime loaded or wrote: never pruned by it (its hosts may load
    /// them again, on a reload).
    cache_loaded: Mutex<HashSet<PathBuf>>,
    /// Cranelift's incremental compilation cache, in the cache folder: what the functions of the
    /// components compiled so far became, by function.
    functions: Option<Arc<FunctionCache>>,
    /// Engine compatibility hash: part of every cache key, so a new wasmtime never loads an
    /// old artifact.
    engine_hash: u64,
    /// Keeps the epoch ticker running: held by the runtime and by every observer it made, so
    /// deadlines keep firing as long as any of them can run.
    pub(crate) ticker: Arc<()>,
    /// What the linker defines, to name every unsatisfied import of a component at once.
    provided: Provided,
    /// What the sink linker defines.
    pub(crate) sink_provided: Provided,
}

/// A file read, componentized if it was a core module, and compiled (or found in the cache):
/// not yet linked to a world.
pub(crate) struct Loaded {
    pub(crate) component: Component,
    pub(crate) source_hash: String,
    pub(crate) footprint: Footprint,
}

/// A validated, compiled observer component, ready to instantiate.
#[derive(Clone)]
pub struct Compiled {
    pre: ObserverPre<HostState>,
    /// SHA-256 of the file's bytes, hex.
    pub source_hash: String,
    /// What one instance of it creates (checked against a binding's [`Limits`]).
    pub footprint: Footprint,
}

impl Runtime {
    /// Creates the engine and starts its epoch ticker. Compiled components are cached in
    /// `cache_dir` when given, and so is each compiled function (`functions-<engine hash>/`): a
    /// component sharing functions with one compiled before compiles only the others. With the
    /// environment variable `PERCOLATOR_PERFMAP=1`, guest code is listed for `perf` in
    /// `/tmp/perf-<pid>.map` (wasmtime's perf map profiler).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Runtime> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // Guests get a bounded native stack; a deep recursion traps instead of crashing.
        // (512 KiB: well inside a scanner thread's 2 MiB native stack, host calls included.)
        config.max_wasm_stack(512 << 10);
        // `PERCOLATOR_PERFMAP=1`: compiled guest code is listed in `/tmp/perf-<pid>.map`, so
        // that `perf report` names guests' functions instead of anonymous addresses.
        if std::env::var_os("PERCOLATOR_PERFMAP").is_some_and(|v| v == "1") {
            config.profiler(ProfilingStrategy::PerfMap);
        }
        let mut functions = None;
        if let Some(dir) = &cache_dir {
            // The folder is named by the engine's compatibility hash, which a probe engine
            // (milliseconds) gives before the cache is configured.
            let probe = Engine::new(&config).context("creating the wasmtime engine")?;
            let cache = Arc::new(FunctionCache::new(function_cache::dir_in(dir, compatibility_hash(&probe))));
            config.enable_incremental_compilation(cache.clone()).context("enabling the function cache")?;
            functions = Some(cache);
        }
        let engine = Engine::new(&config).context("creating the wasmtime engine")?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).context("linking WASI")?;
        crate::host::add_to_linker(&mut linker, log_recording_panics).context("linking the host imports")?;
        let mut sink_linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut sink_linker).context("linking WASI for sink transforms")?;
        crate::host::sink::add_to_linker(&mut sink_linker).context("linking the sink-transform imports")?;
        let engine_hash = compatibility_hash(&engine);
        let ticker = Arc::new(());
        let (e, alive) = (engine.clone(), Arc::downgrade(&ticker));
        std::thread::Builder::new()
            .name("percolator-epoch".into())
            .spawn(move || {
                while alive.strong_count() > 0 {
                    std::thread::sleep(EPOCH_TICK);
                    e.increment_epoch();
                }
            })
            .context("spawning the epoch ticker")?;
        if let Some(dir) = &cache_dir {
            std::fs::create_dir_all(dir).with_context(|| format!("creating the cache directory {}", dir.display()))?;
        }
        let provided =
            Provided::observer_world().map_err(|e| wasmtime::Error::msg(format!("reading the observer world: {e}")))?;
        let sink_provided =
            Provided::sink_world().map_err(|e| wasmtime::Error::msg(format!("reading the sink world: {e}")))?;
        Ok(Runtime {
            engine,
            linker,
            sink_linker,
            cache_dir,
            cache_max_bytes: AtomicU64::new(DEFAULT_CACHE_MAX_BYTES),
            cache_loaded: Mutex::new(HashSet::new()),
            functions,
            engine_hash,
            ticker,
            provided,
            sink_provided,
        })
    }

    /// Reads, validates and compiles the observer at `path`: a component of the
    /// `percolator:observer` world, or a core module carrying wit-bindgen's component type
    /// (componentized here). Fails with the reason, on one line, if it is not a valid observer:
    /// a truncated or corrupt file, every import the world does not provide, a missing
    /// `observe` export. Never panics: a panic inside the toolchain on malformed input (a
    /// truncated core module made wit-component panic) is caught and becomes the error.
    pub fn compile_file(&self, path: &Path) -> Result<Compiled> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        self.compile(&bytes).with_context(|| format!("loading observer {}", path.display()))
    }

    /// Keeps the compiled components in the cache folder under `max_bytes`, the least recently
    /// used removed first (never one this runtime loaded): now, and after each compile that
    /// adds one. Says what this pass removed (`None` without a cache folder, or if the folder
    /// cannot be read: then nothing is removed, and loading goes on).
    pub fn set_cache_limit(&self, max_bytes: u64) -> Option<CachePruned> {
        self.cache_max_bytes.store(max_bytes, Ordering::Relaxed);
        self.prune_cache()
    }

    fn prune_cache(&self) -> Option<CachePruned> {
        let dir = self.cache_dir.as_ref()?;
        let keep = self.cache_loaded.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match crate::cache_limit::prune(dir, self.cache_max_bytes.load(Ordering::Relaxed), &keep) {
            Ok(p) => {
                if p.components > 0 || p.leftovers > 0 {
                    tracing::info!(
                        "component cache {}: removed {} compiled components not used lately ({} MB) and {} leftover files; {} MB kept",
                        dir.display(),
                        p.components,
                        p.bytes >> 20,
                        p.leftovers,
                        p.kept_bytes >> 20
                    );
                }
                Some(p)
            }
            Err(e) => {
                tracing::warn!("could not prune the cache {}: {e}", dir.display());
                None
            }
        }
    }

    /// What the function cache served since this runtime started (`None` without a cache
    /// folder).
    pub fn function_cache_stats(&self) -> Option<FunctionCacheStats> {
        self.functions.as_ref().map(|f| f.stats())
    }

    /// Like [`Runtime::compile_file`] for bytes in memory.
    pub fn compile(&self, bytes: &[u8]) -> Result<Compiled> {
        self.compile_bytes(bytes).map_err(|e| wasmtime::Error::msg(one_line(&format!("{e:#}"))))
    }

    fn compile_bytes(&self, bytes: &[u8]) -> Result<Compiled> {
        let Loaded { component, source_hash, footprint } = self.load(bytes)?;
        let pre = without_panics("linking", || self.link(&component))?;
        Ok(Compiled { pre, source_hash, footprint })
    }

    /// The world-independent steps of loading: checks, componentizing a core module (by the
    /// component type wit-bindgen embedded in it, whichever world that is), the footprint, and
    /// compiling or reading the cache. Every step under [`without_panics`].
    pub(crate) fn load(&self, bytes: &[u8]) -> Result<Loaded> {
        if bytes.len() < 8 || bytes[..4] != *b"\0asm" {
            // wasmparser would say so with a multi-line dump of the expected and actual bytes.
            // Bytes in hex, no escapes: the message is shown quoted (JSON, logs) as often as not.
            let first = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(" ");
            wasmtime::bail!(
                "not a WebAssembly module: {}, where a module starts with 00 61 73 6d",
                if bytes.is_empty() { "the file is empty".to_owned() } else { format!("it starts with {first}") }
            );
        }
        without_panics("parsing", || well_formed(bytes))?;
        let source_hash = hex(&Sha256::digest(bytes));
        // A core module becomes a component first (a few milliseconds, so also on a cache hit:
        // the footprint is read from the component).
        let encoded = if wasmparser_is_core(bytes) {
            Some(without_panics("componentizing", || componentize(bytes))?)
        } else {
            None
        };
        let component_bytes = encoded.as_deref().unwrap_or(bytes);
        let footprint = without_panics("measuring", || Ok(Footprint::of(component_bytes)))?;
        let component = without_panics("compiling", || self.component(component_bytes, &source_hash))?;
        Ok(Loaded { component, source_hash, footprint })
    }

    /// Checks the component's imports against the world (naming all that are missing), then
    /// links it and checks its export.
    fn link(&self, component: &Component) -> Result<ObserverPre<HostState>> {
        let exports = export_names(&self.engine, component);
        if exports.iter().any(|e| e == "transform") && !exports.iter().any(|e| e == "observe") {
            wasmtime::bail!(
                "the component is a sink transform (it exports `transform` of the world percolator:sink/transform), \
                 not an observer: an observer must be a component of the world percolator:observer/observer, \
                 which exports `observe`"
            );
        }
        let missing = self.provided.unsatisfied(&self.engine, component);
        if !missing.is_empty() {
            wasmtime::bail!(
                "the component's imports do not match the percolator:observer world: it imports {} that the \
                 world does not provide: {}; the world `observer` provides {}",
                if missing.len() == 1 { "one item".to_owned() } else { format!("{} items", missing.len()) },
                missing.join(", "),
                self.provided.describe()
            );
        }
        let pre = self
            .linker
            .instantiate_pre(component)
            .context("the component's imports do not match the percolator:observer world")?;
        ObserverPre::new(pre).map_err(|e| {
            if exports.iter().any(|name| name == "observe") {
                // There is an `observe`, of another type: say so, with wasmtime's mismatch.
                return wasmtime::format_err!(
                    "the component's `observe` export does not have the type of the percolator:observer world's \
                     (`observe: func(notification: notification) -> result<_, error>`): {e:#}"
                );
            }
            let exports: Vec<String> = exports.iter().map(|name| format!("`{name}`")).collect();
            wasmtime::format_err!(
                "the component does not export `observe` of the percolator:observer world (it exports {})",
                if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") }
            )
        })
    }

    /// The component of `bytes` (a component), from the cache (keyed by the source file's
    /// hash) or compiled and cached.
    ///
    /// A component missing from the cache is compiled under the entry's lock
    /// ([`crate::files::lock_beside`]): hosts (or threads) that load the same component at
    /// once, as several hosts sharing a cache folder do when they start, compile it once, the
    /// others waiting for it and loading what it cached. A holder that takes longer than
    /// [`COMPILE_LOCK_WAIT`] is not waited for further.
    fn component(&self, bytes: &[u8], source_hash: &str) -> Result<Component> {
        let Some(path) =
            self.cache_dir.as_ref().map(|d| d.join(format!("{source_hash}-{:016x}.cwasm", self.engine_hash)))
        else {
            return self.compile_component(bytes, None);
        };
        self.cache_loaded.lock().unwrap_or_else(|e| e.into_inner()).insert(path.clone());
        if let Some(component) = self.cached_component(&path) {
            return Ok(component);
        }
        let lock = crate::files::lock_beside(&path, COMPILE_LOCK_WAIT);
        if lock.is_none() {
            tracing::debug!("compiling {} without its lock (held too long, or none can be made)", path.display());
        } else if let Some(component) = self.cached_component(&path) {
            return Ok(component); // compiled by the holder waited for
        }
        let component = self.compile_component(bytes, Some(&path));
        drop(lock);
        if component.is_ok() {
            self.prune_cache();
        }
        component
    }

    /// The compiled component cached at `path`, if there is a whole one for this engine.
    fn cached_component(&self, path: &Path) -> Option<Component> {
        let artifact = read_verified(path)?;
        // Used now: the last to be pruned (`cache_limit.rs` goes by modification time). A
        // folder this host cannot write keeps its times, and its entries still load.
        if let Ok(f) = std::fs::File::options().write(true).open(path) {
            let _ = f.set_modified(std::time::SystemTime::now());
        }
        // SAFETY: the bytes come from the host's own cache directory, were written by
        // `serialize` below under a key that includes the engine's compatibility hash, and
        // match the SHA-256 recorded beside them when they were written; nothing else is
        // ever deserialized.
        #[allow(unsafe_code)]
        match unsafe { Component::deserialize(&self.engine, &artifact) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("discarding unreadable cache entry {}: {e:#}", path.display());
                None
            }
        }
    }

    fn compile_component(&self, bytes: &[u8], cache: Option<&Path>) -> Result<Component> {
        let (started, before) = (Instant::now(), self.function_cache_stats());
        if let Some(functions) = &self.functions {
            functions.refresh(); // other hosts' packs, written since
        }
        let component = Component::new(&self.engine, bytes);
        if let Some(functions) = &self.functions {
            functions.flush();
        }
        let component = component.context("not a valid WebAssembly component")?;
        if let (Some(before), Some(after)) = (before, self.function_cache_stats()) {
            // Counts of the whole runtime: with other components compiling at the same time,
            // theirs are included.
            tracing::info!(
                "compiled a component of {} KB in {:.1} s: {} functions compiled, {} from the function cache",
                bytes.len() / 1024,
                started.elapsed().as_secs_f64(),
                after.misses - before.misses,
                after.hits - before.hits
            );
        }
        if let Some(path) = cache
            && let Err(e) = component.serialize().and_then(|b| write_verified(path, &b))
        {
            tracing::warn!("could not cache {}: {e:#}", path.display());
        }
        Ok(component)
    }

    /// Binds a compiled component as an observer with its access rules, limits and environment
    /// (parameters, clocks, randomness).
    pub fn observer(
        &self,
        name: &str,
        compiled: &Compiled,
        access: Access,
        limits: Limits,
        env: Environment,
    ) -> WasmObserver {
        WasmObserver {
            name: name.into(),
            engine: self.engine.clone(),
            pre: compiled.pre.clone(),
            source_hash: compiled.source_hash.clone(),
            footprint: compiled.footprint,
            access: Arc::new(access),
            limits,
            env,
            ticks: (limits.timeout.as_millis() as u64).div_ceil(EPOCH_TICK.as_millis() as u64).max(1),
            pool: Mutex::new(Vec::new()),
            stats: Arc::new(RunStats::default()),
            _ticker: self.ticker.clone(),
        }
    }
}

/// The engine's compatibility hash: what a compiled artifact must have been compiled with.
fn compatibility_hash(engine: &Engine) -> u64 {
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    h.finish()
}

/// The names a component exports.
pub(crate) fn export_names(engine: &Engine, component: &Component) -> Vec<String> {
    component.component_type().exports(engine).map(|(name, _)| name.to_owned()).collect()
}

/// Upper bounds of the run-time histogram's buckets (a 1-2.5-5 series from 50 µs to 60 s; a
/// last, unbounded bucket holds the longer runs). Fixed, so that `/metrics` can export them as
/// a Prometheus histogram and the buckets of all observers line up.
pub const RUN_TIME_BUCKETS: [Duration; 19] = [
    Duration::from_micros(50),
    Duration::from_micros(100),
    Duration::from_micros(250),
    Duration::from_micros(500),
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_millis(2_500),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(25),
    Duration::from_secs(60),
];

/// Buckets of the histogram: one per bound, plus the unbounded one.
const BUCKETS: usize = RUN_TIME_BUCKETS.len() + 1;

/// Failures within this long count in [`RunCounts::failures_last_minute`].
pub const RECENT_FAILURES: Duration = Duration::from_secs(60);

/// Counters of an observer's runs (for `status` and `/metrics`). Shared by the versions of one
/// binding across hot reloads (see [`WasmObserver::continuing`]), so they count per binding.
/// Lock-free on a run that succeeds: every scanner thread records into it after each run.
///
/// The counts ([`RunTotals`]: runs, failures, their time, the run-time histogram) continue
/// from the totals it was made with ([`RunStats::continuing_from`]: what a host saved before
/// it restarted); the longest run and the failures of the last minute are this process's.
#[derive(Debug, Default)]
pub struct RunStats {
    /// The totals it started from (earlier processes' counts).
    saved: RunTotals,
    runs: AtomicU64,
    failures: AtomicU64,
    run_nanos: AtomicU64,
    /// CPU time of the runs' threads, nanoseconds.
    cpu_nanos: AtomicU64,
    /// The longest run, nanoseconds.
    max_nanos: AtomicU64,
    /// This process's runs per bucket of [`RUN_TIME_BUCKETS`] (not cumulative); the last is
    /// above 60 s.
    buckets: [AtomicU64; BUCKETS],
    /// Failures per second of the last [`RECENT_FAILURES`]: `(second, failures)`, oldest
    /// first, seconds counted from [`mono_secs`]'s base. Taken only when a run fails.
    recent_failures: Mutex<std::collections::VecDeque<(u64, u64)>>,
}

/// Whole seconds from a fixed instant of this process to `now` (a monotonic clock for the
/// recent failures; an instant before the base counts as 0).
fn mono_secs(now: Instant) -> u64 {
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    now.saturating_duration_since(*BASE.get_or_init(Instant::now)).as_secs()
}

/// The counts of [`RunStats`] that are totals: what a host saves, and a restarted host
/// continues from ([`RunStats::continuing_from`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// Calls of the component's `observe` (committed or not).
    pub runs: u64,
    /// Runs that failed (see [`RunCounts::failures`]).
    pub failures: u64,
    /// Wall-clock time spent in runs.
    pub run_time: Duration,
    /// CPU time spent in runs: of the thread that ran each, from taking a warm instance (or
    /// making one) to putting it back (the guest, its reads and writes, its output logged; not
    /// the commit that follows the run).
    pub cpu_time: Duration,
    /// Runs per bucket of [`RUN_TIME_BUCKETS`] (not cumulative; the last bucket holds the runs
    /// longer than the last bound). Their sum can be below `runs`: runs saved by a version
    /// that did not save the histogram are in no bucket.
    pub buckets: [u64; BUCKETS],
    /// Wall-clock time of the runs the buckets hold (the histogram's sum).
    pub histogram_run_time: Duration,
}

/// A snapshot of [`RunStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Calls of the component's `observe` (committed or not), from the saved totals on.
    pub runs: u64,
    /// Runs that failed: a trap, a deadline, an error the observer returned, a denied access.
    /// Conflicts (retried by the store) are not failures. From the saved totals on.
    pub failures: u64,
    /// Runs of this process that failed in the last [`RECENT_FAILURES`]: whether the binding
    /// fails now, where `failures` holds every failure of the store's life.
    pub failures_last_minute: u64,
    /// Wall-clock time spent in runs, from the saved totals on.
    pub run_time: Duration,
    /// CPU time spent in runs (see [`RunTotals::cpu_time`]), from the saved totals on.
    pub cpu_time: Duration,
    /// Wall-clock time of the runs the histogram holds (its sum), from the saved totals on.
    pub histogram_run_time: Duration,
    /// The longest run of this process.
    pub max_run_time: Duration,
    /// Runs per bucket of [`RUN_TIME_BUCKETS`] (not cumulative), from the saved totals on; the
    /// last bucket holds the runs longer than the last bound. Their sum can trail `runs` by
    /// the runs being recorded while the snapshot was taken, and by the runs saved by a
    /// version that did not save the histogram.
    pub buckets: [u64; BUCKETS],
    /// Median run time, estimated (see [`RunCounts::percentile`]); none before the first run
    /// the histogram holds.
    pub p50: Option<Duration>,
    /// 90th percentile of the run time, estimated.
    pub p90: Option<Duration>,
    /// 99th percentile of the run time, estimated.
    pub p99: Option<Duration>,
}

impl RunCounts {
    /// The `q`-quantile (0 < q ≤ 1) of the run time, **estimated** from the histogram as
    /// Prometheus's `histogram_quantile` does from the buckets `/metrics` exports: linear
    /// interpolation inside the bucket that holds it (from 0 in the first); past the last
    /// bound, the last bound. None before the first run.
    pub fn percentile(&self, q: f64) -> Option<Duration> {
        percolator_store::histogram_quantile(&RUN_TIME_BUCKETS, &self.buckets, q)
    }
}

impl RunStats {
    /// Counters whose counts and histogram start from `saved` (what an earlier process
    /// counted).
    pub fn continuing_from(saved: RunTotals) -> RunStats {
        RunStats { saved, ..RunStats::default() }
    }

    /// The counts now, from the saved totals on.
    pub fn totals(&self) -> RunTotals {
        let here = Duration::from_nanos(self.run_nanos.load(Ordering::Relaxed));
        RunTotals {
            runs: self.saved.runs.saturating_add(self.runs.load(Ordering::Relaxed)),
            failures: self.saved.failures.saturating_add(self.failures.load(Ordering::Relaxed)),
            run_time: self.saved.run_time.saturating_add(here),
            cpu_time: self.saved.cpu_time.saturating_add(Duration::from_nanos(self.cpu_nanos.load(Ordering::Relaxed))),
            buckets: std::array::from_fn(|i| {
                self.saved.buckets[i].saturating_add(self.buckets[i].load(Ordering::Relaxed))
            }),
            histogram_run_time: self.saved.histogram_run_time.saturating_add(here),
        }
    }

    /// The counters now.
    pub fn counts(&self) -> RunCounts {
        self.counts_at(Instant::now())
    }

    fn counts_at(&self, now: Instant) -> RunCounts {
        let totals = self.totals();
        let mut counts = RunCounts {
            runs: totals.runs,
            failures: totals.failures,
            failures_last_minute: self.failures_since(now),
            run_time: totals.run_time,
            cpu_time: totals.cpu_time,
            histogram_run_time: totals.histogram_run_time,
            max_run_time: Duration::from_nanos(self.max_nanos.load(Ordering::Relaxed)),
            buckets: totals.buckets,
            ..RunCounts::default()
        };
        counts.p50 = counts.percentile(0.5);
        counts.p90 = counts.percentile(0.9);
        counts.p99 = counts.percentile(0.99);
        counts
    }

    /// Failures in the [`RECENT_FAILURES`] up to `now`.
    fn failures_since(&self, now: Instant) -> u64 {
        let now = mono_secs(now);
        let window = RECENT_FAILURES.as_secs();
        let recent = self.recent_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        recent.iter().filter(|(s, _)| s.saturating_add(window) > now).map(|(_, n)| n).sum()
    }

    pub(crate) fn record(&self, elapsed: Duration, cpu: Duration, failed: bool) {
        self.record_at(elapsed, cpu, failed, Instant::now());
    }

    fn record_at(&self, elapsed: Duration, cpu: Duration, failed: bool, now: Instant) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.cpu_nanos.fetch_add(u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        let bucket = RUN_TIME_BUCKETS.iter().position(|bound| elapsed <= *bound).unwrap_or(BUCKETS - 1);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.run_nanos.fetch_add(nanos, Ordering::Relaxed);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
            let second = mono_secs(now);
            // One push or increment and the trimming: a poisoned deque is still consistent.
            let mut recent = self.recent_failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match recent.back_mut() {
                Some((s, n)) if *s == second => *n += 1,
                _ => recent.push_back((second, 1)),
            }
            while recent.front().is_some_and(|(s, _)| s.saturating_add(RECENT_FAILURES.as_secs()) <= second) {
                recent.pop_front();
            }
        }
    }
}

/// Reads a cache artifact if its recorded SHA-256 matches.
fn read_verified(path: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    let recorded = std::fs::read_to_string(sha_path(path)).ok()?;
    (recorded.trim() == hex(&Sha256::digest(&bytes))).then_some(bytes)
}

/// Writes a cache artifact and then its SHA-256, each through a unique temp file, fsync and
/// rename: a crash or a concurrent writer can only cause a mismatch, which means a recompile.
fn write_verified(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::files::write_replacing(path, true, |f| f.write_all(bytes))?;
    crate::files::write_replacing(&sha_path(path), true, |f| f.write_all(hex(&Sha256::digest(bytes)).as_bytes()))?;
    Ok(())
}

pub(crate) fn sha_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".sha256");
    PathBuf::from(p)
}

/// An error message on one line: wasmparser and wit-component messages can span several (a
/// pretty-printed byte array, say), which the status output and the logs would show as is.
pub(crate) fn one_line(message: &str) -> String {
    if !message.contains('\n') {
        return message.to_owned();
    }
    message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// What the guest SDK's panic hook puts before a panic's message when it logs it through the
/// `log` import (guest-sdk/src/host.rs), just before the panic aborts as an `unreachable` trap.
const PANIC_LOG_PREFIX: &str = "observer panicked: ";

/// Longest panic message carried into a run's error (the log has the whole message, up to its
/// own limit).
const MAX_PANIC_MESSAGE: usize = 300;

thread_local! {
    /// The panic message the guest running on this thread logged, if any. A run is one
    /// synchronous call on the calling thread, so the log import (called inside it) and the
    /// run (reading it after the trap) meet here.
    static GUEST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// The `log` import: logs as `host/log.rs` does, and remembers a logged panic message, so that
/// the run's error can carry it.
fn log_recording_panics(
    state: &mut HostState,
    level: crate::bindings::percolator::observer::log::Level,
    message: String,
) {
    use crate::bindings::percolator::observer::log::{Host, Level};
    if level == Level::Error
        && let Some(panic) = message.strip_prefix(PANIC_LOG_PREFIX)
    {
        let panic = panic_message(panic);
        GUEST_PANIC.with(|p| *p.borrow_mut() = Some(panic));
    }
    Host::log(state, level, message);
}

/// A logged panic, for an error: std formats it as `panicked at FILE:LINE:COL:\nMESSAGE`, which
/// becomes `MESSAGE (at FILE:LINE:COL)`; on one line, at most [`MAX_PANIC_MESSAGE`] bytes.
pub(crate) fn panic_message(logged: &str) -> String {
    let text = match logged.strip_prefix("panicked at ").and_then(|rest| rest.split_once(":\n")) {
        Some((location, message)) => format!("{message} (at {location})"),
        None => logged.to_owned(),
    };
    let text = one_line(text.trim());
    if text.len() <= MAX_PANIC_MESSAGE {
        return text;
    }
    format!("{}… ({} bytes)", &text[..text.floor_char_boundary(MAX_PANIC_MESSAGE)], text.len())
}

/// Parses every section (without validating): a truncated or corrupt file fails here with
/// wasmparser's reason and offset, before wit-component or cranelift see it.
fn well_formed(bytes: &[u8]) -> Result<()> {
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let Err(e) = payload {
            wasmtime::bail!("the file is truncated or corrupt: {e}");
        }
    }
    Ok(())
}

thread_local! {
    /// Set while [`without_panics`] runs a step on this thread: the panic hook stays quiet
    /// (the panic becomes the step's error) and leaves the panic's location here.
    static CATCHING: StdCell<bool> = const { StdCell::new(false) };
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs one step of loading a component and turns a panic inside it into an error, so that a
/// malformed file can never take down the thread that loads it (the reload watcher, or `up`
/// at start-up). wit-component has panicked on a truncated core module, and nothing promises
/// that the decoders and the compiler cannot panic on other input.
pub(crate) fn without_panics<T>(step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    static QUIET_HOOK: Once = Once::new();
    QUIET_HOOK.call_once(|| {
        // Chains to the hook in place (the default one prints the panic), except for a panic
        // that is caught here: that one is reported once, as the error.
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if CATCHING.with(StdCell::get) {
                let location = info.location().map(|l| format!("{}:{}", l.file(), l.line()));
                PANIC_LOCATION.with(|p| *p.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
    let was = CATCHING.with(|c| c.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    outcome.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".to_owned());
        let location = PANIC_LOCATION.with(|p| p.borrow_mut().take()).map(|l| format!(" at {l}")).unwrap_or_default();
        Err(wasmtime::Error::msg(format!(
            "{step} the file failed inside the toolchain (a panic{location}: {}); it is probably truncated or corrupt",
            one_line(&message)
        )))
    })
}

/// A core module carrying wit-bindgen's component-type section, made a component.
fn componentize(bytes: &[u8]) -> Result<Vec<u8>> {
    wit_component::ComponentEncoder::default()
        .module(bytes)
        .map_err(wasmtime::Error::from_anyhow)
        .context("the core module carries no usable component type (was it built with wit-bindgen?)")?
        .validate(true)
        .encode()
        .map_err(wasmtime::Error::from_anyhow)
        .context("componentizing the core module")
}

fn wasmparser_is_core(bytes: &[u8]) -> bool {
    // A core module's preamble is `\0asm` + version 1; a component's has layer 1.
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

struct Warm {
    store: Store<HostState>,
    instance: ObserverWorld,
    runs: u32,
    /// Bytes of linear memory and tables it held when new.
    fresh: usize,
}

impl Warm {
    /// Whether to keep it warm after a run: not past [`MAX_RUNS_PER_INSTANCE`], and not grown
    /// far beyond its fresh size — a guest's allocator never gives memory back, so an instance
    /// that once held a 3 MB page would keep its tens of MiB for as long as it is pooled, in
    /// every warm instance of every binding (a fresh one costs tens of µs, once per big input).
    fn keep(&self) -> bool {
        keeps_warm(self.fresh, self.store.data().limits.used(), self.runs)
    }
}

/// [`Warm::keep`] of an instance that held `fresh` bytes when new, holds `used` now and ran
/// `runs` times.
fn keeps_warm(fresh: usize, used: usize, runs: u32) -> bool {
    runs < MAX_RUNS_PER_INSTANCE && used <= fresh.saturating_mul(2).max(fresh.saturating_add(GROWN_SLACK))
}

/// How far past its fresh size (or twice it, if more) an instance's memory may grow and the
/// instance still be kept warm ([`Warm::keep`]).
const GROWN_SLACK: usize = 8 << 20;

/// An observer component bound to a column: implements the store's `Observer`.
pub struct WasmObserver {
    name: Arc<str>,
    engine: Engine,
    pre: ObserverPre<HostState>,
    source_hash: String,
    footprint: Footprint,
    access: Arc<Access>,
    limits: Limits,
    env: Environment,
    /// Epoch ticks of the deadline.
    ticks: u64,
    pool: Mutex<Vec<Warm>>,
    /// Run counters (shared with the binding's earlier versions).
    stats: Arc<RunStats>,
    /// Keeps the engine's epoch ticker alive while this observer may run.
    _ticker: Arc<()>,
}

impl WasmObserver {
    /// SHA-256 of the component file this observer runs.
    pub fn source_hash(&self) -> &str {
        &self.source_hash
    }

    /// Its run counters.
    pub fn stats(&self) -> &Arc<RunStats> {
        &self.stats
    }

    /// The same component, access, limits and environment as another observer named `name`,
    /// with counters and warm instances of its own: for dry runs (`replay`) that must not count
    /// as the binding's runs.
    pub fn detached(&self, name: &str) -> WasmObserver {
        WasmObserver {
            name: name.into(),
            engine: self.engine.clone(),
            pre: self.pre.clone(),
            source_hash: self.source_hash.clone(),
            footprint: self.footprint,
            access: self.access.clone(),
            limits: self.limits,
            env: self.env.clone(),
            ticks: self.ticks,
            pool: Mutex::new(Vec::new()),
            stats: Arc::new(RunStats::default()),
            _ticker: self._ticker.clone(),
        }
    }

    /// The same observer counting into `stats` (a new version of a binding continues its
    /// predecessor's counters).
    pub fn continuing(mut self, stats: Arc<RunStats>) -> WasmObserver {
        self.stats = stats;
        self
    }

    /// Instantiates once under the binding's limits (a start function that traps, or an
    /// initial memory above the cap, fails here with the reason instead of dead-lettering every
    /// notification later); the instance is kept warm.
    pub fn check_instantiates(&self) -> Result<()> {
        self.footprint.check(&self.limits)?;
        let warm = without_panics("instantiating", || self.instantiate())?;
        if !self.env.deterministic()
            && let Ok(mut pool) = self.pool.lock()
            && pool.len() < self.limits.pool
        {
            pool.push(warm);
        }
        Ok(())
    }

    /// Instantiates once, outside the pool: how long it took and the bytes of linear memory and
    /// tables the new instance holds (what its binding's `memory_mb` must allow). For
    /// benchmarks and diagnostics.
    pub fn instance_cost(&self) -> Result<(Duration, usize)> {
        let started = Instant::now();
        let warm = without_panics("instantiating", || self.instantiate())?;
        Ok((started.elapsed(), warm.store.data().limits.used()))
    }

    fn instantiate(&self) -> Result<Warm> {
        let budget = Budget::new(&self.limits);
        let wasi = Wasi::new(&self.env);
        let state = HostState::new(self.name.clone(), self.access.clone(), budget, self.env.params.clone(), wasi);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // The deadline is of CPU time: a run interrupted only once its thread spent
        // `limits.timeout` in it, so that a run waiting for a core among many in flight is
        // not failed for the wait (`RunClock`).
        let timeout = self.limits.timeout;
        store.epoch_deadline_callback(move |ctx| Ok(ctx.data().run_clock.deadline(timeout)));
        store.set_epoch_deadline(self.ticks);
        let mut attempt = 1;
        let instance = loop {
            match self.pre.instantiate(&mut store) {
                // wasmtime builds a module's copy-on-write memory image at its first
                // instantiation, sealing a memfd, which fails with EBUSY while the kernel holds
                // a page of it for a moment (seen once in a clean-clone CI run with the 12 MB
                // JavaScript guest; the image is not kept after a failure): tried again.
                Err(e) if attempt < 5 && format!("{e:#}").contains("cannot add seals to the memfd") => {
                    tracing::debug!(observer = %self.name, attempt, error = %format!("{e:#}"), "instantiating again");
                    std::thread::sleep(Duration::from_millis(50 * attempt));
                    attempt += 1;
                }
                r => break r,
            }
        };
        let instance = match instance {
            Ok(instance) => instance,
            Err(e) => {
                let message = limit_error(&format!("{e:#}"), &self.limits).unwrap_or_else(|| format!("{e:#}"));
                let stderr = store.data().wasi.stderr.take();
                return Err(match stderr.tail() {
                    Some(tail) => wasmtime::Error::msg(format!("instantiating: {message}; stderr: {tail}")),
                    None => wasmtime::Error::msg(format!("instantiating: {message}")),
                });
            }
        };
        let fresh = store.data().limits.used();
        Ok(Warm { store, instance, runs: 0, fresh })
    }

    fn describe_trap(&self, e: &wasmtime::Error) -> String {
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => format!("deadline of {} ms exceeded", self.limits.timeout.as_millis()),
            Some(Trap::UnreachableCodeReached) => match GUEST_PANIC.with(|p| p.borrow_mut().take()) {
                Some(message) => format!("the guest panicked: {message}"),
                None => "the guest panicked (unreachable code reached)".to_owned(),
            },
            Some(Trap::StackOverflow) => "the guest overflowed its stack".to_owned(),
            _ if format!("{e:#}").contains("memory limit") => {
                format!("the guest exceeded its memory limit of {} MiB ({e:#})", self.limits.memory_bytes >> 20)
            }
            _ => match limit_error(&format!("{e:#}"), &self.limits) {
                Some(named) => named,
                None => format!("trap: {e:#}"),
            },
        }
    }
}

impl percolator_store::Observer for WasmObserver {
    fn observe(&self, txn: &mut Transaction, n: &percolator_store::Notification) -> Result<(), ObserveError> {
        let started = RunClock::now();
        let outcome = self.run(txn, n);
        let failed = match &outcome {
            Ok(()) => false,
            Err(ObserveError::Store(e)) => !e.is_retryable() && !e.is_storage_failure(),
            Err(ObserveError::Failed(_)) => true,
        };
        self.stats.record(started.wall_spent(), started.cpu_spent(), failed);
        outcome
    }
}

impl WasmObserver {
    fn run(&self, txn: &mut Transaction, n: &percolator_store::Notification) -> Result<(), ObserveError> {
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        let mut warm = match pooled {
            Some(w) => w,
            None => self.instantiate().map_err(|e| ObserveError::Failed(format!("{e:#}")))?,
        };
        let notification = Notification {
            cell: Cell { table: n.cell.table.clone(), row: n.cell.row.clone(), column: n.cell.column.clone() },
            weak: n.kind == NotifyKind::Weak,
            commit_ts: n.commit_ts.map(|t| t.raw()),
            attempt: n.attempt,
        };
        let data = warm.store.data_mut();
        data.txn = Some(txn.take());
        data.conflict = None;
        data.storage_failure = None;
        data.denied = None;
        data.io_bytes = 0;
        data.wasi.start_run(self.env.random_seed);
        data.run_clock = RunClock::now();
        warm.store.set_epoch_deadline(self.ticks);
        GUEST_PANIC.with(|p| p.borrow_mut().take());
        let result = warm.instance.call_observe(&mut warm.store, &notification);
        let data = warm.store.data_mut();
        if let Some(t) = data.txn.take() {
            *txn = t;
        }
        let (conflict, denied) = (data.conflict.take(), data.denied.take());
        let storage_failure = data.storage_failure.take();
        let (stdout, stderr) = (data.wasi.stdout.take(), data.wasi.stderr.take());
        let refused = data.limits.take_refused();
        self.log_output(&stdout, &stderr);
        warm.runs += 1;
        let with_stderr = |message: String| match stderr.tail() {
            Some(tail) => format!("{message}; stderr: {tail}"),
            None => message,
        };
        let outcome = match result {
            // The instance is dropped.
            Err(trap) => {
                if let Some(e) = storage_failure {
                    return Err(ObserveError::Store(e));
                }
                let described = match refused {
                    // The guest's allocator gave up after a refused growth (any trap then).
                    Some(asked) if !format!("{trap:#}").contains("memory limit") => format!(
                        "the guest exceeded its memory limit of {} MiB (it asked for {:.1} MiB in all, then trapped: {})",
                        self.limits.memory_bytes >> 20,
                        asked as f64 / f64::from(1 << 20),
                        self.describe_trap(&trap)
                    ),
                    _ => self.describe_trap(&trap),
                };
                return Err(ObserveError::Failed(with_stderr(described)));
            }
            Ok(Ok(())) => match denied {
                // A guest that swallowed a denied access still fails: the binding was violated.
                Some(d) => Err(ObserveError::Failed(d)),
                None => Ok(()),
            },
            Ok(Err(WitError::Conflict(m))) => Err(match conflict {
                Some(e) => ObserveError::Store(e),
                None => ObserveError::Failed(format!("the guest returned a conflict the store did not report: {m}")),
            }),
            Ok(Err(e)) => {
                Err(ObserveError::Failed(with_stderr(format!("the observer returned an error: {}", describe(&e)))))
            }
        };
        // The store could not write or read (a full disk, a server out of reach, a lapsed
        // lease): whatever the guest made of it, the run is not the observer's failure.
        let outcome = match storage_failure {
            Some(e) => Err(ObserveError::Store(e)),
            None => outcome,
        };
        if warm.keep()
            && !self.env.deterministic()
            && let Ok(mut pool) = self.pool.lock()
            && pool.len() < self.limits.pool
        {
            pool.push(warm);
        }
        outcome
    }
}

impl WasmObserver {
    /// A run's stdout and stderr into the log, a line per line, under the observer's name.
    fn log_output(&self, stdout: &Output, stderr: &Output) {
        let observer = &*self.name;
        for (stream, out) in [("stdout", stdout), ("stderr", stderr)] {
            if out.is_empty() {
                continue;
            }
            if out.dropped > 0 {
                tracing::warn!(observer, stream, "{} earlier bytes of this run's {stream} dropped", out.dropped);
            }
            for line in out.text.lines().filter(|l| !l.trim().is_empty()) {
                match stream {
                    "stdout" => tracing::info!(observer, stream, "{line}"),
                    _ => tracing::warn!(observer, stream, "{line}"),
                }
            }
        }
    }
}

/// wasmtime's error for a count over a [`ResourceLimiter`](wasmtime::ResourceLimiter) limit
/// ("instance count too high at 17"), with the binding's setting that allows more.
pub(crate) fn limit_error(message: &str, limits: &Limits) -> Option<String> {
    let (what, field, limit) = if message.contains("instance count too high") {
        ("core instances", "max_instances", limits.instances)
    } else if message.contains("table count too high") {
        ("tables", "max_tables", limits.tables)
    } else if message.contains("memory count too high") {
        ("memories", "max_memories", limits.memories)
    } else {
        return None;
    };
    Some(format!("the component creates more {what} than the binding allows ({field} = {limit}): {message}"))
}

fn describe(e: &WitError) -> String {
    match e {
        WitError::Conflict(m) => format!("conflict: {m}"),
        WitError::NotFound(m) => format!("not found: {m}"),
        WitError::Denied(m) => format!("denied: {m}"),
        WitError::InvalidArgument(m) => format!("invalid argument: {m}"),
        WitError::Storage(m) => format!("storage: {m}"),
        WitError::Failed(m) => m.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_logged_panic_becomes_one_bounded_line() {
        assert_eq!(
            panic_message("panicked at src/lib.rs:14:9:\ndeliberate panic (attempt 1)"),
            "deliberate panic (attempt 1) (at src/lib.rs:14:9)"
        );
        assert_eq!(panic_message("panicked at src/lib.rs:1:1:\nfirst\n  second\n"), "first second (at src/lib.rs:1:1)");
        assert_eq!(panic_message("a message of another form"), "a message of another form");
        let long = panic_message(&format!("panicked at a.rs:1:1:\n{}", "é".repeat(1000)));
        assert!(long.len() < MAX_PANIC_MESSAGE + 32 && long.ends_with("bytes)"), "{long}");
    }

    #[test]
    fn an_instance_grown_far_past_its_fresh_size_or_run_too_often_is_not_kept_warm() {
        let mib = 1 << 20;
        assert!(keeps_warm(mib, mib, 1));
        assert!(keeps_warm(mib, mib + GROWN_SLACK, 1), "up to the slack past a small fresh size");
        assert!(!keeps_warm(mib, mib + GROWN_SLACK + 65536, 1), "one Wasm page more");
        assert!(keeps_warm(40 * mib, 80 * mib, 1), "twice a large fresh size");
        assert!(!keeps_warm(40 * mib, 80 * mib + 65536, 1));
        assert!(!keeps_warm(mib, mib, MAX_RUNS_PER_INSTANCE));
        assert!(keeps_warm(usize::MAX, usize::MAX, 1), "no overflow");
    }

    #[test]
    fn a_run_is_interrupted_by_its_cpu_time_not_by_waiting() {
        let timeout = Duration::from_millis(40);
        let continues = |u: wasmtime::UpdateDeadline| matches!(u, wasmtime::UpdateDeadline::Continue(n) if n >= 1);
        // Waiting (no CPU) past the deadline: not interrupted, up to ten times it.
        let clock = RunClock::now();
        std::thread::sleep(timeout * 2);
        assert!(continues(clock.deadline(timeout)), "a run that waited is not interrupted");
        let old = RunClock { wall: Instant::now() - timeout * WALL_DEADLINE_FACTOR, ..RunClock::now() };
        assert!(
            matches!(old.deadline(timeout), wasmtime::UpdateDeadline::Interrupt),
            "ten times the deadline of wall time"
        );
        // Spending the CPU time: interrupted.
        let clock = RunClock::now();
        let mut x = 0u64;
        while thread_cpu().saturating_sub(clock.cpu) < timeout {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(matches!(clock.deadline(timeout), wasmtime::UpdateDeadline::Interrupt));
        assert!(thread_cpu() > Duration::ZERO, "this thread's CPU time is known");
    }

    #[test]
    fn percentiles_interpolate_inside_their_bucket() {
        let stats = RunStats::default();
        assert_eq!(stats.counts().p50, None, "none before the first run");
        // 80 runs of 300 µs (bucket 250-500 µs), 15 of 3 ms (2.5-5 ms), 4 of 40 ms (25-50 ms)
        // and one slow hub run of 2 s (1-2.5 s): a mean of about 20.8 ms hides all of it.
        for (n, t) in [(80, 300), (15, 3_000), (4, 40_000), (1, 2_000_000)] {
            for _ in 0..n {
                stats.record(Duration::from_micros(t), Duration::ZERO, false);
            }
        }
        let c = stats.counts();
        assert_eq!(c.runs, 100);
        assert_eq!(c.buckets.iter().sum::<u64>(), 100);
        let ms = |d: Option<Duration>| d.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3);
        // Rank 50 of the 80 in (250, 500] µs: 250 + 250 × 50/80.
        assert_eq!(ms(c.p50), Some(0.406));
        // Rank 90: the 10th of the 15 in (2.5, 5] ms.
        assert_eq!(ms(c.p90), Some(4.167));
        // Rank 99: the 4th of the 4 in (25, 50] ms.
        assert_eq!(ms(c.p99), Some(50.0));
        assert_eq!(ms(c.percentile(1.0)), Some(2500.0), "the slowest run's bucket bound");
        // Past the last bound: the last bound.
        stats.record(Duration::from_secs(90), Duration::ZERO, true);
        let c = stats.counts();
        assert_eq!(c.buckets[BUCKETS - 1], 1);
        assert_eq!(c.percentile(1.0), Some(Duration::from_secs(60)));
        assert_eq!(c.failures, 1);
        // A boundary value falls in the bucket it bounds.
        let exact = RunStats::default();
        exact.record(Duration::from_millis(1), Duration::ZERO, false);
        assert_eq!(exact.counts().buckets[4], 1);
        // The 99th percentile of one run in (0.5, 1] ms: 99 % into the bucket.
        assert_eq!(ms(exact.counts().p99), Some(0.995));
    }

    #[test]
    fn counts_and_the_histogram_continue_from_saved_totals() {
        let mut buckets = [0; BUCKETS];
        buckets[7] = 30; // (5, 10] ms
        let saved = RunTotals {
            runs: 40,
            failures: 3,
            run_time: Duration::from_secs(2),
            cpu_time: Duration::from_millis(1500),
            buckets,
            histogram_run_time: Duration::from_millis(240),
        };
        let stats = RunStats::continuing_from(saved);
        assert_eq!(stats.totals(), saved);
        let c = stats.counts();
        assert_eq!((c.runs, c.failures, c.run_time), (40, 3, Duration::from_secs(2)));
        // The saved histogram's percentiles before any run of this process.
        assert_eq!((c.buckets.iter().sum::<u64>(), c.histogram_run_time), (30, Duration::from_millis(240)));
        assert!(c.p50.is_some_and(|p| p > Duration::from_millis(5) && p <= Duration::from_millis(10)), "{c:?}");
        stats.record(Duration::from_millis(10), Duration::from_millis(4), true);
        stats.record(Duration::from_millis(30), Duration::from_millis(25), false);
        let t = stats.totals();
        assert_eq!((t.runs, t.failures, t.run_time), (42, 4, Duration::from_millis(2040)));
        assert_eq!(t.cpu_time, Duration::from_millis(1529), "the saved CPU time and this process's");
        assert_eq!((t.buckets[7], t.buckets[9], t.histogram_run_time), (31, 1, Duration::from_millis(280)));
        let c = stats.counts();
        assert_eq!((c.runs, c.failures, c.run_time, c.cpu_time), (42, 4, Duration::from_millis(2040), t.cpu_time));
        assert_eq!(c.buckets.iter().sum::<u64>(), 32, "the saved runs and this process's");
        assert_eq!(c.histogram_run_time, Duration::from_millis(280));
        assert_eq!(c.max_run_time, Duration::from_millis(30));
        // A restart from these totals continues them all.
        assert_eq!(RunStats::continuing_from(t).counts().buckets, c.buckets);
    }

    #[test]
    fn failures_of_the_last_minute_are_counted_apart_from_the_total() {
        let stats = RunStats::continuing_from(RunTotals { failures: 24, ..RunTotals::default() });
        let t0 = Instant::now();
        assert_eq!(stats.counts_at(t0).failures_last_minute, 0, "the saved failures are not recent");
        stats.record_at(Duration::from_millis(1), Duration::ZERO, true, t0);
        stats.record_at(Duration::from_millis(1), Duration::ZERO, true, t0);
        stats.record_at(Duration::from_millis(1), Duration::ZERO, false, t0 + Duration::from_secs(20));
        stats.record_at(Duration::from_millis(1), Duration::ZERO, true, t0 + Duration::from_secs(30));
        let at = |secs: u64| stats.counts_at(t0 + Duration::from_secs(secs));
        assert_eq!((at(30).failures, at(30).failures_last_minute), (27, 3));
        // The first two fall out of the window a minute later, the third ten seconds after.
        assert_eq!(at(62).failures_last_minute, 1);
        assert_eq!(at(95).failures_last_minute, 0);
        assert_eq!(at(95).failures, 27, "the total keeps them");
        // A failure long after trims the old seconds.
        stats.record_at(Duration::from_millis(1), Duration::ZERO, true, t0 + Duration::from_secs(600));
        assert_eq!(stats.recent_failures.lock().unwrap().len(), 1);
        assert_eq!(at(600).failures_last_minute, 1);
    }

    #[test]
    fn a_panic_in_a_loading_step_becomes_its_error() {
        let e = without_panics("compiling", || -> Result<()> { panic!("index out of range") }).unwrap_err();
        let e = format!("{e:#}");
        assert!(e.starts_with("compiling the file failed inside the toolchain (a panic at "), "{e}");
        assert!(e.contains("index out of range") && e.contains("truncated or corrupt"), "{e}");
        assert!(!CATCHING.with(StdCell::get), "reset after the step");
        assert_eq!(without_panics("compiling", || Ok(7)).unwrap(), 7);
    }

    #[test]
    fn multi_line_errors_are_joined() {
        assert_eq!(
            one_line("bad magic - expected=[\n    0x0,\n    0x61,\n] (at offset 0x0)"),
            "bad magic - expected=[ 0x0, 0x61, ] (at offset 0x0)"
        );
        assert_eq!(one_line("already  one line"), "already  one line");
    }
}
