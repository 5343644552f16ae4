//! The document processor on big pages: MB/s of HTML through the Wasm component
//! (`guest-examples/document-processor`, run by the real runtime against a real store) next to
//! the same Rust code called natively, and where a run's time goes.
//!
//! The pages are `webindex::crawl::big_page`: generated documentation pages (inline `<style>`
//! and `<script>`, a sidebar of a few hundred links, sections of nested `<div>`s, paragraphs
//! with entities and inline links, highlighted code blocks, tables of links) of 100 KB, 1 MB
//! and 3 MB by default. For each size, one page is stored as `pages/<url>/raw:html` in a redb
//! store (durability none) and processed many times, each time in a transaction of its own
//! that is dropped afterwards (nothing is committed, so every run sees the same state):
//!
//! - `first`: the `doc:*` columns are absent (a new page: four values are written);
//! - `again`: they hold this page's output (an unchanged re-crawl: the old values are read
//!   and compared, nothing is written).
//!
//! Measured, best and median of `--runs` runs (after one warm-up run):
//!
//! - `wasm`: `WasmObserver::observe` on a warm instance, default `Limits` (the 1 s deadline);
//! - `native`: the same steps in Rust on the same `Transaction` (what the observer does:
//!   `get` of `raw:html`, `charset::decode` + `html::parse` + `content_hash` +
//!   `encode_links`, `get_many` of the old `doc:*`, a `set` per changed column and the
//!   `notify_weak`), each step timed: `host_calls` (the store work behind the guest's host
//!   calls, identical in both) and `compute` (the guest's own work, natively);
//! - the split of a Wasm run: host calls (as measured natively), guest code in Wasm plus the
//!   copies across the boundary (the rest), and for scale `copy_floor_ms`, a native `memcpy` of
//!   the bytes that cross the boundary (`raw:html` in, the values out and, `again`, the old
//!   values in).
//!
//! `--load N` runs N threads spinning on the CPU during the measurements (a loaded machine;
//! this one has 2 cores). The default deadline is 1 s (`Limits::DEFAULT`, `timeout_ms` in a
//! binding's TOML); `<page>_<case>_deadline_room` is how many times the page's median Wasm run
//! fits in it.
//!
//! ```text
//! scripts/build-guests
//! cargo run --release -p percolator-host-bench --bin docproc
//! ```
//!
//! Options: `--sizes 100000,1000000,3000000` (bytes), `--runs N` (default 9), `--load N`
//! (default 0), `--guest FILE` (default `target/guests/document_processor.wasm`), `--html FILE`
//! (also a real page, as bytes; repeatable: e.g. the Rust documentation rustup installs,
//! `share/doc/rust/html/std/primitive.slice.html`), `--no-generated` (only the `--html` pages).
//! Prints `name value` lines; `#` lines are comments.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use percolator_runtime::{Access, ColumnRule, Environment, Limits, Runtime, WasmObserver};
use percolator_store::{
    CellRef, Durability, Notification, NotifyKind, Observer, RedbConfig, Store, StoreConfig, Transaction,
};
use webindex::schema::{DOC_HASH, DOC_LINKS, DOC_TEXT, DOC_TITLE, EXPORT_DIRTY, PAGES, RAW_HTML, encode_links};
use webindex::{charset, html, text};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The page's URL (its row key).
const URL: &str = "http://docs.example/api/reference.html";
const DOC_COLUMNS: [&str; 4] = [DOC_TITLE, DOC_TEXT, DOC_LINKS, DOC_HASH];

struct Args {
    sizes: Vec<usize>,
    runs: usize,
    load: usize,
    guest: PathBuf,
    /// Pages read from files (`--html`), after the generated ones.
    files: Vec<PathBuf>,
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        sizes: vec![100_000, 1_000_000, 3_000_000],
        runs: 9,
        load: 0,
        guest: Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests/document_processor.wasm"),
        files: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--sizes" => {
                let list = value()?;
                args.sizes = list
                    .split(',')
                    .map(|s| s.trim().parse::<usize>().ok().filter(|&n| n >= 1000))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        format!("--sizes {list:?}: expected sizes in bytes (>= 1000) separated by commas")
                    })?;
            }
            "--runs" => {
                let v = value()?;
                args.runs = v.parse().ok().filter(|&n| n > 0).ok_or(format!("--runs {v:?}: expected a count > 0"))?;
            }
            "--load" => {
                let v = value()?;
                args.load = v.parse().map_err(|_| format!("--load {v:?}: expected a number of threads"))?;
            }
            "--guest" => args.guest = PathBuf::from(value()?),
            "--html" => args.files.push(PathBuf::from(value()?)),
            "--no-generated" => args.sizes.clear(),
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --sizes, --runs, --load, --guest, --html, --no-generated)"
                )
                .into());
            }
        }
    }
    Ok(args)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("docproc: {e}");
        std::process::exit(1);
    }
}

/// Threads spinning until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(n: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Load { stop, threads }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn run() -> Res<()> {
    let args = parse_args()?;
    if !args.guest.is_file() {
        return Err(format!("{} is missing: run scripts/build-guests first", args.guest.display()).into());
    }
    let dir = std::env::temp_dir().join(format!("percolator-docproc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = measure(&args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn measure(args: &Args, dir: &Path) -> Res<()> {
    let store = Store::open(
        dir.join("store.redb"),
        StoreConfig::default(),
        RedbConfig { durability: Durability::None, ..RedbConfig::default() },
    )?;
    let runtime = Runtime::new(None)?;
    let compiled = runtime.compile_file(&args.guest)?;
    let access = Access {
        reads: vec![ColumnRule::parse(&format!("{PAGES}/{RAW_HTML}"))?],
        writes: vec![
            ColumnRule::parse(&format!("{PAGES}/doc:*"))?,
            ColumnRule::parse(&format!("{PAGES}/{EXPORT_DIRTY}"))?,
        ],
    };
    let limits = Limits::default();
    let wasm = runtime.observer("document-processor", &compiled, access, limits, Environment::default());
    wasm.check_instantiates()?;
    println!("# document processor: {} in Wasm vs the same Rust natively", args.guest.display());
    println!(
        "# runs per figure {} (best, median), spinning threads {} on {} cores",
        args.runs,
        args.load,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "# default deadline {} ms; *_deadline_room: how many times the median Wasm run fits in it",
        limits.timeout.as_millis()
    );
    let _load = Load::start(args.load);
    let mut pages: Vec<(String, Vec<u8>)> = args
        .sizes
        .iter()
        .map(|&size| {
            let page = webindex::crawl::big_page(size as u64, size);
            (format!("{}kb", page.len() / 1000), page.into_bytes())
        })
        .collect();
    for file in &args.files {
        let bytes = std::fs::read(file).map_err(|e| format!("--html {}: {e}", file.display()))?;
        let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let name: String = stem.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        pages.push((format!("{name}_{}kb", bytes.len() / 1000), bytes));
    }
    for (label, page) in &pages {
        let mb = page.len() as f64 / 1e6;
        let doc = html::parse(URL, &charset::decode(page).0);
        println!(
            "# {label}: {} bytes, {} links, title {:?}, text {} bytes",
            page.len(),
            doc.links.len(),
            doc.title,
            doc.text.len()
        );
        store.run(|t| {
            for c in DOC_COLUMNS {
                t.delete(PAGES, URL, c)?;
            }
            t.set(PAGES, URL, RAW_HTML, page.as_slice())
        })?;
        for case in ["first", "again"] {
            if case == "again" {
                // This page's output, committed: the next runs find it unchanged.
                let mut txn = store.begin()?;
                native_run(&mut txn, &mut Split::default())?;
                txn.commit()?;
            }
            let (wasm_times, native) = runs(&store, &wasm, args.runs)?;
            let (best, median) = best_median(&wasm_times);
            let (nbest, nmedian) = best_median(&native.iter().map(|s| s.total()).collect::<Vec<_>>());
            let split = median_split(&native);
            let p = format!("{label}_{case}");
            println!("{p}_wasm_mb_per_s {:.1}", mb / median.as_secs_f64());
            println!("{p}_native_mb_per_s {:.1}", mb / nmedian.as_secs_f64());
            println!("{p}_wasm_over_native_time {:.2}", median.as_secs_f64() / nmedian.as_secs_f64());
            println!("{p}_wasm_ms_best_median {:.1} {:.1}", ms(best), ms(median));
            println!("{p}_native_ms_best_median {:.1} {:.1}", ms(nbest), ms(nmedian));
            println!(
                "{p}_native_split_ms get_raw {:.1} compute {:.1} (decode {:.1} parse {:.1} hash+encode {:.1}) get_old {:.1} sets {:.1}",
                ms(split.get_raw),
                ms(split.compute()),
                ms(split.decode),
                ms(split.parse),
                ms(split.hash_encode),
                ms(split.get_old),
                ms(split.sets)
            );
            let host = split.get_raw + split.get_old + split.sets;
            println!(
                "{p}_wasm_split_ms host_calls {:.1} guest_and_copies {:.1} copy_floor {:.2} ({:.1} MB across)",
                ms(host),
                ms(median.saturating_sub(host)),
                ms(split.copy_floor),
                split.crossing as f64 / 1e6
            );
            println!("{p}_deadline_room {:.1}", limits.timeout.as_secs_f64() / median.as_secs_f64());
        }
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Best and median.
fn best_median(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    (sorted[0], sorted[sorted.len() / 2])
}

/// `runs` Wasm runs and `runs` native runs, alternating (after a warm-up of each), each in a
/// transaction of its own that is dropped.
fn runs(store: &Store, wasm: &WasmObserver, runs: usize) -> Res<(Vec<Duration>, Vec<Split>)> {
    let notification = Notification {
        cell: CellRef::new(PAGES, URL, RAW_HTML),
        kind: NotifyKind::Strong,
        commit_ts: None,
        attempt: 1,
    };
    let (mut wasm_times, mut native) = (Vec::new(), Vec::new());
    for i in 0..=runs {
        let mut txn = store.begin()?;
        let started = Instant::now();
        wasm.observe(&mut txn, &notification).map_err(|e| format!("the Wasm run failed: {e}"))?;
        let took = started.elapsed();
        drop(txn);
        let mut txn = store.begin()?;
        let mut split = Split::default();
        native_run(&mut txn, &mut split)?;
        drop(txn);
        if i > 0 {
            wasm_times.push(took);
            native.push(split);
        }
    }
    Ok((wasm_times, native))
}

/// Where a native run's time went.
#[derive(Clone, Copy, Default)]
struct Split {
    get_raw: Duration,
    decode: Duration,
    parse: Duration,
    hash_encode: Duration,
    get_old: Duration,
    sets: Duration,
    /// A `memcpy` of the bytes a Wasm run moves across the boundary.
    copy_floor: Duration,
    /// Those bytes.
    crossing: usize,
}

impl Split {
    fn compute(&self) -> Duration {
        self.decode + self.parse + self.hash_encode
    }
    fn total(&self) -> Duration {
        self.get_raw + self.compute() + self.get_old + self.sets
    }
}

/// The median of each part, separately.
fn median_split(splits: &[Split]) -> Split {
    let median = |f: fn(&Split) -> Duration| best_median(&splits.iter().map(f).collect::<Vec<_>>()).1;
    Split {
        get_raw: median(|s| s.get_raw),
        decode: median(|s| s.decode),
        parse: median(|s| s.parse),
        hash_encode: median(|s| s.hash_encode),
        get_old: median(|s| s.get_old),
        sets: median(|s| s.sets),
        copy_floor: median(|s| s.copy_floor),
        crossing: splits[0].crossing,
    }
}

/// What `webindex::observers::DocumentProcessor` does, natively on `txn`, step by step.
fn native_run(txn: &mut Transaction, split: &mut Split) -> Res<bool> {
    let mut t = Instant::now();
    let mut lap = |d: &mut Duration| {
        let now = Instant::now();
        *d = now - t;
        t = now;
    };
    let raw = txn.get(PAGES, URL, RAW_HTML)?.ok_or("raw:html is missing")?;
    lap(&mut split.get_raw);
    html::check_url_key(URL)?;
    let decoded = charset::decode(&raw).0;
    lap(&mut split.decode);
    let doc = html::parse(URL, &decoded);
    lap(&mut split.parse);
    let hash = text::content_hash(&doc.title, &doc.text);
    let links = encode_links(&doc.links);
    let new = [doc.title, doc.text, links, hash];
    lap(&mut split.hash_encode);
    let cells: Vec<CellRef> = DOC_COLUMNS.iter().map(|c| CellRef::new(PAGES, URL, *c)).collect();
    let old = txn.get_many(&cells)?;
    lap(&mut split.get_old);
    let mut written: Vec<&[u8]> = Vec::new();
    for ((column, value), old) in DOC_COLUMNS.iter().zip(&new).zip(&old) {
        if old.as_deref() != Some(value.as_bytes()) {
            txn.set(PAGES, URL, column, value.as_bytes())?;
            written.push(value.as_bytes());
        }
    }
    let changed = !written.is_empty();
    if changed {
        txn.notify_weak(PAGES, URL, EXPORT_DIRTY)?;
    }
    lap(&mut split.sets);
    // In: raw:html and the old values; out: the values written.
    let crossing: usize = [raw.as_slice()]
        .into_iter()
        .chain(old.iter().flatten().map(Vec::as_slice))
        .chain(written.iter().copied())
        .map(<[u8]>::len)
        .sum();
    let mut copy = Vec::with_capacity(crossing);
    for v in [raw.as_slice()].into_iter().chain(old.iter().flatten().map(Vec::as_slice)).chain(written.iter().copied())
    {
        copy.extend_from_slice(v);
    }
    black_box(&copy);
    lap(&mut split.copy_floor);
    split.crossing = crossing;
    Ok(changed)
}
