//! The same observer — upper-case a cell into another column — written in Rust, Python
//! (componentize-py) and JavaScript (componentize-js), side by side on one host and one store:
//! per-notification cost, compile time cold and cached, instantiation time and memory per
//! instance. Ratios are against the Rust guest, measured in the same run.
//!
//! `after_sibling_ms`: compiling the guest on a runtime whose cache folder holds another guest
//! of the same language compiled before (Rust: `counter`; Python: `hostile_py`; JavaScript:
//! `hostile_js`), no artifact of its own: what the function cache (cranelift's incremental
//! cache) saves a host that loads a new or edited guest. `hits` is the share of its functions
//! that came from that cache.
//!
//! Run: `scripts/build-guests && cargo run --release -p percolator-host-bench --bin languages`
//! (`-- --runs N`, default 2,000). The guests are `target/guests/uppercase.wasm`,
//! `uppercase_py.wasm` and `uppercase_js.wasm`; a missing one is reported and skipped.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use percolator_runtime::{Access, ColumnRule, Environment, Limits, Runtime};
use percolator_store::{CellRef, Notification, NotifyKind, Observer, Store, StoreConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn guest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests").join(format!("{name}.wasm"))
}

struct Figures {
    size: u64,
    cold: Duration,
    after_sibling: Duration,
    hit_share: f64,
    cached: Duration,
    instantiate: Duration,
    memory: usize,
    per_run: Duration,
}

fn measure(path: &Path, sibling: &Path, runs: usize, store: &Store) -> Res<Figures> {
    let size = std::fs::metadata(path)?.len();
    let cold = {
        let runtime = Runtime::new(None)?;
        let started = Instant::now();
        runtime.compile_file(path).map_err(|e| format!("{e:#}"))?;
        started.elapsed()
    };
    let cache = std::env::temp_dir().join(format!("percolator-bench-languages-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let (after_sibling, hit_share) = {
        let runtime = Runtime::new(Some(cache.clone()))?;
        runtime.compile_file(sibling).map_err(|e| format!("{}: {e:#}", sibling.display()))?;
        let before = runtime.function_cache_stats().ok_or("no function cache")?;
        let started = Instant::now();
        runtime.compile_file(path).map_err(|e| format!("{e:#}"))?;
        let elapsed = started.elapsed();
        let after = runtime.function_cache_stats().ok_or("no function cache")?;
        let (hits, misses) = (after.hits - before.hits, after.misses - before.misses);
        (elapsed, hits as f64 / (hits + misses).max(1) as f64)
    };
    let _ = std::fs::remove_dir_all(&cache);
    let runtime = Runtime::new(Some(cache.clone()))?;
    runtime.compile_file(path)?; // fills the cache
    let runtime = Runtime::new(Some(cache.clone()))?;
    let started = Instant::now();
    let compiled = runtime.compile_file(path)?;
    let cached = started.elapsed();
    let access = Access {
        reads: vec![ColumnRule::parse("docs/raw:text")?],
        writes: vec![ColumnRule::parse("docs/derived:upper")?],
    };
    let observer = runtime.observer("bench", &compiled, access, Limits::default(), Environment::default());
    let (instantiate, memory) = observer.instance_cost()?;
    observer.check_instantiates()?;
    let n = |i: usize| Notification {
        cell: CellRef::new("docs", format!("r{:04}", i % 100), "raw:text"),
        kind: NotifyKind::Strong,
        commit_ts: None,
        attempt: 1,
    };
    // Warm up, then time the observer's calls only (the transactions are not committed: what
    // is compared is the guest, not the store).
    for i in 0..runs / 10 {
        let mut txn = store.begin()?;
        observer.observe(&mut txn, &n(i)).map_err(|e| format!("{e}"))?;
    }
    let mut total = Duration::ZERO;
    for i in 0..runs {
        let mut txn = store.begin()?;
        let started = Instant::now();
        observer.observe(&mut txn, &n(i)).map_err(|e| format!("{e}"))?;
        total += started.elapsed();
    }
    let _ = std::fs::remove_dir_all(&cache);
    Ok(Figures { size, cold, after_sibling, hit_share, cached, instantiate, memory, per_run: total / runs as u32 })
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs = match args.iter().position(|a| a == "--runs") {
        Some(i) => args.get(i + 1).ok_or("--runs needs a number")?.parse()?,
        None => 2_000,
    };
    let store = Store::in_memory(StoreConfig::default())?;
    store.run(|t| {
        for i in 0..100 {
            t.set("docs", format!("r{i:04}"), "raw:text", format!("a line of text number {i} to upper-case"))?;
        }
        Ok(())
    })?;
    println!("# the uppercase observer per language, {runs} runs each (observe calls only, warm instances)");
    println!(
        "# language  size_bytes  cold_compile_ms  after_sibling_ms  hits  cached_load_ms  instantiate_ms  instance_memory_mib  us_per_run  run_cost_vs_rust"
    );
    let mut rust_per_run = None;
    for (language, name, sibling) in [
        ("rust", "uppercase", "counter"),
        ("python", "uppercase_py", "hostile_py"),
        ("javascript", "uppercase_js", "hostile_js"),
    ] {
        let (path, sibling) = (guest(name), guest(sibling));
        if let Some(missing) = [&path, &sibling].into_iter().find(|p| !p.is_file()) {
            println!("# {language}: {} is missing (run scripts/build-guests)", missing.display());
            continue;
        }
        let f = measure(&path, &sibling, runs, &store)?;
        let per_run = f.per_run.as_secs_f64() * 1e6;
        let base = *rust_per_run.get_or_insert(per_run);
        println!(
            "{language:<10}  {:>10}  {:>15.0}  {:>16.0}  {:>3.0}%  {:>14.1}  {:>14.1}  {:>19.1}  {:>10.1}  {:>16.1}",
            f.size,
            f.cold.as_secs_f64() * 1e3,
            f.after_sibling.as_secs_f64() * 1e3,
            f.hit_share * 100.0,
            f.cached.as_secs_f64() * 1e3,
            f.instantiate.as_secs_f64() * 1e3,
            f.memory as f64 / f64::from(1 << 20),
            per_run,
            per_run / base,
        );
    }
    Ok(())
}
