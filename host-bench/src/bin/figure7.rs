//! Figure 7 of the paper, reproduced: each document's delay from its crawl (load) to its
//! clustering, for the incremental pipeline and for periodic batch runs, as a function of the
//! crawl rate (percent of the repository crawled per hour).
//!
//! A repository of N pages (`webindex::crawl::generate_pages`, hub-shaped) is loaded once into
//! an in-process host running `config/web-index.toml`'s bindings on redb (durability none, 2
//! scanner threads), to the fixed point. One batch run over it (`webindex::batch::compute` and
//! its tables written to redb, durability none) is timed: `T_b`. Time is scaled so that one
//! simulated hour is `3 T_b` (`--hour S` overrides): the batch pass over the repository then
//! takes a third of an hour, as the paper's three MapReduces took 20 minutes of each hour.
//!
//! For each crawl rate X (`--rates`), `X% × N × window` documents arrive at a uniform pace
//! over `--window` simulated hours: nine in ten re-crawls of a repository page picked at random
//! (its text gains a sentence of its own, so its content hash changes), one in ten a new page
//! (the next page of the same generated crawl). The same arrivals, on the same schedule, go to:
//!
//! - **the incremental pipeline**: the loader commits each arrival's `raw:html` (and a new
//!   page's `raw:pagerank`) in a transaction of its own at its scheduled time; the document is
//!   clustered when the clustering observer's transaction that registers it under its new
//!   `doc:hash` commits (`pages/cluster:hash` equal to the hash of that version, or of a later
//!   version of the same page: that transaction also writes `cluster:canonical` when it
//!   changes). Commits are seen at the seam: a wrapper of the redb backend notes the time at
//!   which every committed write record of `pages/raw:html` and of `pages/cluster:hash` was
//!   applied. The delay is the clustering's time minus the loader's. After the window the
//!   pipeline is drained to its fixed point; every arrival must have been clustered.
//! - **periodic batch runs**, back to back: each run takes every arrival due before it started
//!   into the repository, computes every table from scratch and writes them (one redb file per
//!   table, one write transaction each, in parallel); a document's delay is the end of the
//!   first run that started after its arrival minus its arrival. Runs go on until every arrival
//!   is covered. The pipeline is idle meanwhile (its GC is stopped): each side has the machine
//!   to itself.
//!
//! The incremental side **saturates** at X when more than 5% of the window's arrivals are not
//! yet clustered when the window ends (its queue grows: a longer window makes the delays
//! longer without bound). Rates above two saturated ones are not run on the incremental side.
//! At the end the pipeline's tables are checked equal to the batch computation of the final
//! repository (`--no-check` skips it).
//!
//! Writes `figure7.csv` and `figure7.svg` (median, 5th and 95th percentile per side and rate)
//! into `docs/figures` (`--out DIR`). Not run by the tests.
//!
//! ```text
//! scripts/build-guests
//! cargo run --release -p percolator-host-bench --bin figure7                     # N = 100,000
//! cargo run --release -p percolator-host-bench --bin figure7 -- --pages 5000 --rates 1,10,40
//! ```
//!
//! Options: `--pages N` (default 100000), `--rates A,B,…` (percent per simulated hour; default
//! 1,3,10,30,60,100,200,400), `--window H` (simulated hours per rate, default 0.5), `--hour S`
//! (seconds per simulated hour; default three batch runs), `--seed S` (1), `--out DIR`,
//! `--guests DIR`, `--config FILE`, `--no-check`. Prints `name value` lines; `#` lines are
//! comments.

/// The host's allocator (`host/src/main.rs`), so that what is measured here is what it runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::pipeline::Pipeline;
use percolator_store::backends::{
    ApplyHook, Mutation, Observed, RedbBigtable, RowMutation, WriteKind, WriteRecord, decode_value,
};
use percolator_store::{Durability, RedbConfig, ScannerConfig, Store, StoreConfig};
use webindex::batch::{self, Inputs, Tables};
use webindex::crawl::{self, Rng, Shape};
use webindex::{charset, html, schema, text};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[path = "../tables.rs"]
mod tables;
use tables::read_tables;

/// Pages per transaction of the initial load.
const LOAD_BATCH: usize = 100;
/// One arrival in this many is a new page; the others are re-crawls.
const NEW_EVERY: usize = 10;
/// The incremental side is saturated when more than this fraction of a window's arrivals is
/// still unclustered at the window's end.
const SATURATED_BACKLOG: f64 = 0.05;
/// Simulated hours per batch run over the repository: the paper's 20 minutes.
const BATCH_HOURS: f64 = 1.0 / 3.0;

/// A committed write record the benchmark watches for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Noted {
    /// `pages/raw:html`: a crawled document loaded (only the loader writes it).
    Crawled,
    /// `pages/cluster:hash`: a document clustered.
    Clustered,
}

/// What the seam saw: (which, row, the value in its stored form — empty for
/// [`Noted::Crawled`] — and when the backend had applied it).
type Seen = Vec<(Noted, Vec<u8>, Vec<u8>, Instant)>;

/// Notes when each committed write record of `pages/raw:html` (the loader's commit) and of
/// `pages/cluster:hash` (the clustering transaction's commit; `cluster:canonical` is written in
/// the same transaction when it changes) was applied by the redb backend (an [`Observed`]
/// one).
struct Watch {
    seen: Mutex<Seen>,
}

impl Watch {
    /// The watched write records of `m`: which, and the value (stored form) of a clustering.
    fn watched(m: &RowMutation) -> impl Iterator<Item = (Noted, &[u8])> {
        let pages = m.table == schema::PAGES;
        m.mutations.iter().filter_map(move |mutation| match mutation {
            Mutation::PutWrite { column, write: WriteRecord { kind: WriteKind::Put(v), .. }, .. } if pages => {
                match column.as_str() {
                    schema::CLUSTER_HASH => Some((Noted::Clustered, v.as_slice())),
                    schema::RAW_HTML => Some((Noted::Crawled, &[][..])),
                    _ => None,
                }
            }
            _ => None,
        })
    }

    fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl ApplyHook for Watch {
    type Note = Vec<(Noted, Vec<u8>, Vec<u8>)>;

    fn note(&self, m: &RowMutation) -> Option<Self::Note> {
        let found: Self::Note = Watch::watched(m).map(|(w, v)| (w, m.row.clone(), v.to_vec())).collect();
        (!found.is_empty()).then_some(found)
    }

    fn applied(&self, notes: Vec<Self::Note>) {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.extend(notes.into_iter().flatten().map(|(which, row, value)| (which, row, value, now)));
    }
}

/// The command line.
struct Args {
    pages: usize,
    /// Percent of the repository per simulated hour, ascending.
    rates: Vec<f64>,
    /// Simulated hours of arrivals per rate.
    window: f64,
    /// Seconds per simulated hour; `None`: three batch runs.
    hour: Option<f64>,
    seed: u64,
    out: PathBuf,
    guests: PathBuf,
    config: PathBuf,
    check: bool,
    /// Redraw `figure7.svg` from this earlier run's output instead of running.
    replot: Option<PathBuf>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        pages: 100_000,
        rates: vec![1.0, 3.0, 10.0, 30.0, 60.0, 100.0, 200.0, 400.0],
        window: 0.5,
        hour: None,
        seed: 1,
        out: root().join("docs/figures"),
        guests: root().join("target/guests"),
        config: root().join("config/web-index.toml"),
        check: true,
        replot: None,
    };
    let positive = |flag: &str, v: String| -> Res<f64> {
        match v.parse::<f64>() {
            Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
            _ => Err(format!("{flag} {v:?}: expected a positive number").into()),
        }
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pages" => args.pages = value()?.parse().map_err(|e| format!("--pages: {e}"))?,
            "--rates" => {
                args.rates =
                    value()?.split(',').map(|r| positive("--rates", r.trim().to_owned())).collect::<Res<_>>()?;
            }
            "--window" => args.window = positive("--window", value()?)?,
            "--hour" => args.hour = Some(positive("--hour", value()?)?),
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--out" => args.out = PathBuf::from(value()?),
            "--guests" => args.guests = PathBuf::from(value()?),
            "--config" => args.config = PathBuf::from(value()?),
            "--no-check" => args.check = false,
            "--replot" => args.replot = Some(PathBuf::from(value()?)),
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --pages, --rates, --window, --hour, --seed, --out, --guests, --config, --no-check, --replot)"
                )
                .into());
            }
        }
    }
    if args.pages < 100 {
        return Err("--pages must be at least 100".into());
    }
    if args.rates.is_empty() {
        return Err("--rates needs at least one rate".into());
    }
    args.rates.sort_by(f64::total_cmp);
    Ok(args)
}

fn main() {
    // As the host runs (`host/src/main.rs`).
    percolator_server::memory::without_transparent_huge_pages();
    if let Err(e) = parse_args().and_then(|args| {
        if let Some(log) = &args.replot {
            return replot(log, &args.out);
        }
        let dir = std::env::temp_dir().join(format!("percolator-figure7-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let result = run(&args, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }) {
        eprintln!("figure7: {e}");
        std::process::exit(1);
    }
}

/// One crawled document, due at `due` after its window started.
struct Arrival {
    url: String,
    html: String,
    /// A new page's PageRank; re-crawls keep theirs.
    pagerank: Option<String>,
    /// Its content hash (`doc:hash`), which clustering registers it under.
    hash: String,
    due: Duration,
}

/// The repository as the crawler knows it: every page's first HTML (re-crawls revise it) and
/// the pages still to be discovered.
struct Crawler {
    urls: Vec<String>,
    base: HashMap<String, String>,
    unseen: std::vec::IntoIter<crawl::CrawlPage>,
    rng: Rng,
    revisions: u64,
}

impl Crawler {
    /// `count` arrivals spread evenly over `span`.
    fn arrivals(&mut self, count: usize, span: Duration) -> Res<Vec<Arrival>> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let due = span.mul_f64(i as f64 / count as f64);
            let fresh = if i % NEW_EVERY == NEW_EVERY - 1 { self.unseen.next() } else { None };
            let (url, html, pagerank) = match fresh {
                Some(p) => {
                    self.urls.push(p.url.clone());
                    self.base.insert(p.url.clone(), p.html.clone());
                    (p.url, p.html, Some(p.pagerank.to_string()))
                }
                None => {
                    let url = self.urls[self.rng.below(self.urls.len())].clone();
                    self.revisions += 1;
                    let html = revise(&self.base[&url], self.revisions)
                        .ok_or_else(|| format!("{url}: its HTML has no </p> to revise"))?;
                    (url, html, None)
                }
            };
            let doc = html::parse(&url, &charset::decode(html.as_bytes()).0);
            let hash = text::content_hash(&doc.title, &doc.text);
            out.push(Arrival { url, html, pagerank, hash, due });
        }
        Ok(out)
    }
}

/// A re-crawl: one more sentence, with a word of its own, in the first paragraph (so the page's
/// content hash changes); `None` if the page has no paragraph.
fn revise(html: &str, revision: u64) -> Option<String> {
    let p = html.find("</p>")?;
    Some(format!("{} Revision r{revision}x was crawled again.{}", &html[..p], &html[p..]))
}

/// Per-document delays of one side at one rate, in seconds.
#[derive(Clone, Copy, Default)]
struct Delays {
    p5: f64,
    median: f64,
    p95: f64,
    max: f64,
}

impl Delays {
    fn new(mut all: Vec<Duration>) -> Delays {
        all.sort();
        let q =
            |q: f64| all.get(((all.len().max(1) - 1) as f64 * q).round() as usize).map_or(0.0, Duration::as_secs_f64);
        Delays { p5: q(0.05), median: q(0.5), p95: q(0.95), max: q(1.0) }
    }
}

/// One rate's figures.
struct Point {
    rate: f64,
    arrivals: usize,
    /// `None`: not run (saturated at two lower rates).
    incremental: Option<Incremental>,
    batch: Batch,
}

struct Incremental {
    delays: Delays,
    /// Arrivals not yet clustered when the window ended.
    backlog: usize,
    saturated: bool,
    /// Documents clustered per second during the window.
    clustered_per_s: f64,
    /// From the window's end to the fixed point.
    drain: Duration,
    /// The loader's largest lag behind the schedule (its commit's return after the arrival was
    /// due): the arrival rate it achieved is the nominal one while this stays small.
    late: Duration,
}

struct Batch {
    delays: Delays,
    runs: usize,
    /// Mean run time.
    run: Duration,
    pages: usize,
}

fn run(args: &Args, dir: &Path) -> Res<()> {
    for g in ["document_processor", "clustering", "link_inversion", "exporter"] {
        let wasm = args.guests.join(format!("{g}.wasm"));
        if !wasm.is_file() {
            return Err(format!("{} is missing: run scripts/build-guests first", wasm.display()).into());
        }
    }
    let real = std::fs::read_to_string(&args.config).map_err(|e| format!("{}: {e}", args.config.display()))?;
    let bindings = &real[real.find("[[binding]]").ok_or("the configuration has no [[binding]]")?..];
    let toml = format!(
        "[store]\npath = \"store.redb\"\ndurability = \"none\"\n[scanner]\nthreads = 2\n\
         [observers]\ndir = {:?}\ncache_dir = {:?}\n{bindings}",
        args.guests.display().to_string(),
        dir.join("cache").display().to_string(),
    );
    std::fs::write(dir.join("pipeline.toml"), toml)?;
    let config = Config::load(&dir.join("pipeline.toml"))?;
    let redb =
        RedbBigtable::open(&config.store_path, RedbConfig { durability: Durability::None, ..RedbConfig::default() })?;
    let watch = Arc::new(Observed::new(Arc::new(redb), Watch { seen: Mutex::new(Vec::new()) }));
    let store = Store::with_backend(watch.clone(), StoreConfig::default())?;
    let pipeline = Pipeline::new(store.clone(), Runtime::new(Some(config.cache_dir.clone()))?);
    pipeline.apply(&config)?;

    // The crawl: the repository's N pages, then as many new pages as the sweep will discover.
    let total: f64 = args.rates.iter().map(|r| r / 100.0 * args.pages as f64 * args.window).sum();
    let extra = (total / NEW_EVERY as f64).ceil() as usize + args.rates.len();
    let mut pages = crawl::generate_pages(args.seed, args.pages + extra, Shape::Hubs).into_iter();
    let repository: Vec<crawl::CrawlPage> = pages.by_ref().take(args.pages).collect();
    let mut inputs: Inputs = repository
        .iter()
        .map(|p| (p.url.clone(), (Some(p.html.clone().into_bytes()), Some(p.pagerank.to_string().into_bytes()))))
        .collect();
    let mut crawler = Crawler {
        urls: repository.iter().map(|p| p.url.clone()).collect(),
        base: repository.iter().map(|p| (p.url.clone(), p.html.clone())).collect(),
        unseen: pages.collect::<Vec<_>>().into_iter(),
        rng: Rng(args.seed ^ 0xF167),
        revisions: 0,
    };
    let machine = machine();
    println!("# Figure 7: clustering delay vs crawl rate, {} pages (hub-shaped crawl, seed {})", args.pages, args.seed);
    println!("#   machine: {machine}");
    println!(
        "#   incremental: config/web-index.toml's bindings, redb durability none, {} scanner threads, {} observer workers",
        config.scanner_threads, config.observer_workers
    );

    // The repository, loaded into the pipeline to its fixed point.
    let scanner = store.start_scanner(ScannerConfig {
        threads: config.scanner_threads,
        workers: config.observer_workers,
        ..ScannerConfig::default()
    });
    let start = Instant::now();
    for chunk in repository.chunks(LOAD_BATCH) {
        store.run(|t| {
            for p in chunk {
                t.set(schema::PAGES, p.url.as_str(), schema::RAW_HTML, p.html.as_bytes())?;
                t.set(schema::PAGES, p.url.as_str(), schema::RAW_PAGERANK, p.pagerank.to_string().as_bytes())?;
            }
            Ok(())
        })?;
    }
    drop(repository);
    let loaded = wait_fixed_point(&store, Duration::from_secs(6 * 3600))?;
    let load = start.elapsed();
    watch.hook().take();
    println!("figure7_pages {}", args.pages);
    println!("figure7_load_s {:.1}", load.as_secs_f64());
    println!("figure7_load_pages_per_s {:.1}", args.pages as f64 / load.as_secs_f64());
    if !loaded {
        return Err("the initial load did not reach its fixed point".into());
    }

    // One batch run over the repository sets the clock.
    let batch_dir = dir.join("batch");
    std::fs::create_dir_all(&batch_dir)?;
    let start = Instant::now();
    let cells = batch_run(&inputs, &batch_dir)?;
    let t_b = start.elapsed();
    let hour = args.hour.map_or(t_b.as_secs_f64() / BATCH_HOURS, |h| h);
    let hour_d = Duration::from_secs_f64(hour);
    println!("figure7_batch_run_s {:.2}", t_b.as_secs_f64());
    println!("figure7_batch_cells {cells}");
    println!("figure7_hour_s {hour:.2}");
    println!(
        "# one simulated hour = {hour:.1} s ({}); window {} simulated hour(s) per rate",
        if args.hour.is_some() { "--hour" } else { "3 batch runs over the repository" },
        args.window
    );

    let mut gc = Some(store.start_gc(Duration::from_secs(60)));
    let mut points = Vec::new();
    let mut saturated_rates = 0;
    for &rate in &args.rates {
        let span = hour_d.mul_f64(args.window);
        let count = (rate / 100.0 * args.pages as f64 * args.window).round().max(1.0) as usize;
        let arrivals = crawler.arrivals(count, span)?;
        eprintln!("# rate {rate}%/h: {count} arrivals over {:.1} s", span.as_secs_f64());

        // Incremental: the loader commits each arrival on schedule; clustering commits are seen
        // at the seam.
        let incremental = if saturated_rates >= 2 {
            // Its delays would only grow: load the arrivals without measuring.
            load_arrivals(&store, &arrivals)?;
            if !wait_fixed_point(&store, Duration::from_secs(6 * 3600))? {
                return Err(format!("rate {rate}%: the pipeline did not drain").into());
            }
            None
        } else {
            let m = incremental_side(&store, watch.hook(), &arrivals, span)?;
            saturated_rates += usize::from(m.saturated);
            Some(m)
        };
        // The batch side over the same arrivals, with the pipeline idle; it applies them to
        // the repository as its runs take them.
        drop(gc.take());
        let batch = batch_side(&mut inputs, &arrivals, &batch_dir)?;
        gc = Some(store.start_gc(Duration::from_secs(60)));
        let point = Point { rate, arrivals: count, incremental, batch };
        print_point(&point);
        points.push(point);
        write_figure(args, &points, hour, t_b, &machine)?;
    }
    drop(gc);
    scanner.stop();
    let m = store.metrics();
    println!("figure7_dead_letters {}", m.dead_letters);
    if m.dead_letters != 0 {
        return Err(format!("dead letters: {:?}", store.dead_letters()?).into());
    }
    if args.check {
        let mut expected = batch::compute(&inputs)?;
        batch::normalize(&mut expected);
        let diff = batch::diff(&expected, &read_tables(&store)?, 20);
        if !diff.is_empty() {
            return Err(format!("the incremental result differs from batch:\n{}", diff.join("\n")).into());
        }
        println!("figure7_incremental_equals_batch 1");
    }
    if let Some(sat) = saturation(&points, args.pages, hour) {
        println!("figure7_saturation_percent_per_hour {sat:.1}");
    }
    drop(pipeline);
    Ok(())
}

/// Commits each arrival in a transaction of its own, as fast as it can.
fn load_arrivals(store: &Store, arrivals: &[Arrival]) -> Res<()> {
    for a in arrivals {
        commit_arrival(store, a)?;
    }
    Ok(())
}

fn commit_arrival(store: &Store, a: &Arrival) -> Res<()> {
    store.run(|t| {
        t.set(schema::PAGES, a.url.as_str(), schema::RAW_HTML, a.html.as_bytes())?;
        if let Some(p) = &a.pagerank {
            t.set(schema::PAGES, a.url.as_str(), schema::RAW_PAGERANK, p.as_bytes())?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The incremental side at one rate: arrivals committed on schedule over `span`, then the
/// pipeline drained; each arrival matched with the clustering commit that registered it.
fn incremental_side(store: &Store, watch: &Watch, arrivals: &[Arrival], span: Duration) -> Res<Incremental> {
    if !wait_fixed_point(store, Duration::from_secs(6 * 3600))? {
        return Err("the pipeline did not reach its fixed point before the window".into());
    }
    watch.take();
    let start = Instant::now();
    let mut late = Duration::ZERO;
    for a in arrivals {
        let due = start + a.due;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        commit_arrival(store, a)?;
        late = late.max(Instant::now() - due);
    }
    let end = start + span;
    let now = Instant::now();
    if end > now {
        std::thread::sleep(end - now);
    }
    let window_end = Instant::now();
    if !wait_fixed_point(store, Duration::from_secs(6 * 3600))? {
        return Err("the pipeline did not drain within 6 hours".into());
    }
    let drain = window_end.elapsed();

    // Match, in the order the seam saw them. The loader's commits: the k-th `raw:html` commit
    // of a URL is its k-th arrival (only the loader writes `raw:html`, one arrival at a time).
    // Clusterings: a commit of hash h clusters the URL's unclustered arrival with hash h and
    // every earlier one (superseded by it).
    let mut by_url: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, a) in arrivals.iter().enumerate() {
        by_url.entry(a.url.as_str()).or_default().push(i);
    }
    let mut loads: HashMap<&str, usize> = HashMap::new();
    let mut pending = by_url.clone();
    let mut crawled: Vec<Option<Instant>> = vec![None; arrivals.len()];
    let mut clustered: Vec<Option<Instant>> = vec![None; arrivals.len()];
    let mut seen = watch.take();
    seen.sort_by_key(|(.., at)| *at);
    for (which, row, stored, at) in seen {
        let Ok(url) = std::str::from_utf8(&row) else { continue };
        let Some((&url, list)) = by_url.get_key_value(url) else { continue };
        if which == Noted::Crawled {
            let k = loads.entry(url).or_default();
            if let Some(&i) = list.get(*k) {
                crawled[i] = Some(at);
            }
            *k += 1;
            continue;
        }
        let Ok(value) = decode_value(&stored) else { continue };
        let list = pending.get_mut(url).expect("every URL of by_url is pending");
        if let Some(k) = list.iter().position(|&i| arrivals[i].hash.as_bytes() == value.as_slice()) {
            for i in list.drain(..=k) {
                clustered[i] = Some(at);
            }
        }
    }
    let mut delays = Vec::with_capacity(arrivals.len());
    let mut backlog = 0;
    for (i, a) in arrivals.iter().enumerate() {
        let at = clustered[i].ok_or_else(|| {
            format!("{}: never clustered under {} (its clustering commit was not seen)", a.url, a.hash)
        })?;
        let from = crawled[i].ok_or_else(|| format!("{}: the loader's commit of its raw:html was not seen", a.url))?;
        if at > window_end {
            backlog += 1;
        }
        delays.push(at.checked_duration_since(from).ok_or_else(|| {
            format!("{}: clustered before its raw:html commit was applied (a mismatched commit)", a.url)
        })?);
    }
    let clustered_in_window = arrivals.len() - backlog;
    Ok(Incremental {
        delays: Delays::new(delays),
        backlog,
        saturated: backlog as f64 > SATURATED_BACKLOG * arrivals.len() as f64,
        clustered_per_s: clustered_in_window as f64 / (window_end - start).as_secs_f64(),
        drain,
        late,
    })
}

/// The batch side at one rate: runs back to back over `repository`, each first taking the
/// arrivals due before it started, until every arrival is covered (so all are applied when it
/// returns).
fn batch_side(repository: &mut Inputs, arrivals: &[Arrival], dir: &Path) -> Res<Batch> {
    let start = Instant::now();
    let (mut next, mut delays, mut runs, mut total) = (0, Vec::with_capacity(arrivals.len()), 0, Duration::ZERO);
    let mut pages = 0;
    while next < arrivals.len() {
        let run_start = Instant::now();
        let since = run_start - start;
        let first = next;
        while next < arrivals.len() && arrivals[next].due <= since {
            let a = &arrivals[next];
            let slot = repository.entry(a.url.clone()).or_insert((None, None));
            slot.0 = Some(a.html.clone().into_bytes());
            if let Some(p) = &a.pagerank {
                slot.1 = Some(p.clone().into_bytes());
            }
            next += 1;
        }
        batch_run(repository, dir)?;
        let run_end = Instant::now();
        total += run_end - run_start;
        runs += 1;
        pages = repository.len();
        for a in &arrivals[first..next] {
            delays.push(run_end - (start + a.due));
        }
    }
    Ok(Batch { delays: Delays::new(delays), runs, run: total / runs.max(1) as u32, pages })
}

/// One batch run: every table computed from `inputs`, then written, one redb file per table
/// (durability none, one write transaction each, the tables in parallel). Returns the cells
/// written.
fn batch_run(inputs: &Inputs, dir: &Path) -> Res<usize> {
    const CELLS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("cells");
    let tables: Tables = batch::compute(inputs)?;
    let written = std::thread::scope(|s| {
        let handles: Vec<_> = tables
            .iter()
            .map(|(name, cells)| {
                s.spawn(move || -> Result<usize, String> {
                    let path = dir.join(format!("{name}.redb"));
                    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
                    if path.exists() {
                        std::fs::remove_file(&path).map_err(|e| fail(&e))?;
                    }
                    let db = redb::Database::create(&path).map_err(|e| fail(&e))?;
                    let mut tx = db.begin_write().map_err(|e| fail(&e))?;
                    tx.set_durability(redb::Durability::None).map_err(|e| fail(&e))?;
                    let mut n = 0;
                    {
                        let mut table = tx.open_table(CELLS).map_err(|e| fail(&e))?;
                        let mut key = Vec::new();
                        for ((row, column), value) in cells {
                            // The inputs are the repository's own cells, not the batch's output.
                            if name == schema::PAGES && column.starts_with("raw:") {
                                continue;
                            }
                            key.clear();
                            key.extend_from_slice(row);
                            key.push(0);
                            key.extend_from_slice(column.as_bytes());
                            table.insert(key.as_slice(), value.as_slice()).map_err(|e| fail(&e))?;
                            n += 1;
                        }
                    }
                    tx.commit().map_err(|e| fail(&e))?;
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a batch writer panicked".to_owned())?)
            .sum::<Result<usize, String>>()
    })?;
    // Freed outside the timed part would flatter the batch: dropping the tables is its work too.
    drop(tables);
    Ok(written)
}

/// Waits until the pipeline is quiescent; false on timeout.
fn wait_fixed_point(store: &Store, timeout: Duration) -> Res<bool> {
    let start = Instant::now();
    loop {
        if store.wait_quiescent(Duration::ZERO)? {
            return Ok(true);
        }
        if start.elapsed() > timeout {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn print_point(p: &Point) {
    let r = p.rate;
    let figure = |name: &str, value: String| println!("figure7_r{r}_{name} {value}");
    figure("arrivals", p.arrivals.to_string());
    if let Some(inc) = &p.incremental {
        figure("incremental_median_s", format!("{:.4}", inc.delays.median));
        figure("incremental_p5_s", format!("{:.4}", inc.delays.p5));
        figure("incremental_p95_s", format!("{:.4}", inc.delays.p95));
        figure("incremental_max_s", format!("{:.4}", inc.delays.max));
        figure("incremental_backlog_at_window_end", inc.backlog.to_string());
        figure("incremental_clustered_per_s", format!("{:.1}", inc.clustered_per_s));
        figure("incremental_drain_s", format!("{:.2}", secs(inc.drain)));
        figure("incremental_loader_late_max_s", format!("{:.3}", secs(inc.late)));
        figure("incremental_saturated", u8::from(inc.saturated).to_string());
    } else {
        println!("# rate {r}%: incremental side not measured (saturated at two lower rates)");
    }
    figure("batch_median_s", format!("{:.3}", p.batch.delays.median));
    figure("batch_p5_s", format!("{:.3}", p.batch.delays.p5));
    figure("batch_p95_s", format!("{:.3}", p.batch.delays.p95));
    figure("batch_max_s", format!("{:.3}", p.batch.delays.max));
    figure("batch_runs", p.batch.runs.to_string());
    figure("batch_run_mean_s", format!("{:.2}", secs(p.batch.run)));
    figure("batch_pages", p.batch.pages.to_string());
}

/// The crawl rate at which the incremental side saturates, in percent of `pages` per simulated
/// hour: its clustering throughput at the first saturated rate, as a crawl rate. `None` if no
/// measured rate saturated it.
fn saturation(points: &[Point], pages: usize, hour: f64) -> Option<f64> {
    points.iter().find_map(|p| {
        let inc = p.incremental.as_ref()?;
        inc.saturated.then(|| inc.clustered_per_s * hour / pages as f64 * 100.0)
    })
}

/// The CPU and its count, from `/proc/cpuinfo`.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    format!("{cpus} vCPUs ({model}), shared with other work")
}

/// Writes `figure7.csv` and `figure7.svg` (what is measured so far).
fn write_figure(args: &Args, points: &[Point], hour: f64, t_b: Duration, machine: &str) -> Res<()> {
    std::fs::create_dir_all(&args.out)?;
    let mut csv = String::from(
        "rate_percent_per_hour,side,arrivals,median_s,p5_s,p95_s,max_s,saturated,backlog_at_window_end,batch_runs,pages,hour_s\n",
    );
    for p in points {
        if let Some(inc) = &p.incremental {
            let d = &inc.delays;
            let _ = writeln!(
                csv,
                "{},incremental,{},{:.4},{:.4},{:.4},{:.4},{},{},,{},{hour:.2}",
                p.rate,
                p.arrivals,
                d.median,
                d.p5,
                d.p95,
                d.max,
                u8::from(inc.saturated),
                inc.backlog,
                p.batch.pages,
            );
        }
        let d = &p.batch.delays;
        let _ = writeln!(
            csv,
            "{},batch,{},{:.4},{:.4},{:.4},{:.4},0,,{},{},{hour:.2}",
            p.rate, p.arrivals, d.median, d.p5, d.p95, d.max, p.batch.runs, p.batch.pages,
        );
    }
    std::fs::write(args.out.join("figure7.csv"), csv)?;
    std::fs::write(args.out.join("figure7.svg"), figure_svg(args.pages, points, hour, secs(t_b), machine))?;
    Ok(())
}

/// Redraws `figure7.svg` in `out` from a run's output (its `name value` lines and its
/// machine comment), for a change of the drawing without running again.
fn replot(log: &Path, out: &Path) -> Res<()> {
    let text = std::fs::read_to_string(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut values = HashMap::new();
    let (mut machine, mut rates) = ("unknown machine", Vec::new());
    for line in text.lines() {
        if let Some(m) = line.strip_prefix("#   machine: ") {
            machine = m;
        } else if let Some((name, value)) = line.split_once(' ')
            && let Some(name) = name.strip_prefix("figure7_")
        {
            if let Some(rate) = name.strip_prefix('r').and_then(|n| n.strip_suffix("_arrivals")) {
                rates.push(rate.to_owned());
            }
            values.insert(name.to_owned(), value.trim());
        }
    }
    let num = |name: &str| -> Res<f64> {
        let v = values.get(name).ok_or_else(|| format!("{}: no figure7_{name} line", log.display()))?;
        Ok(v.parse::<f64>().map_err(|e| format!("{}: figure7_{name} {v:?}: {e}", log.display()))?)
    };
    let delays = |prefix: &str| -> Res<Delays> {
        let p95 = num(&format!("{prefix}_p95_s"))?;
        Ok(Delays {
            p5: num(&format!("{prefix}_p5_s"))?,
            median: num(&format!("{prefix}_median_s"))?,
            p95,
            max: num(&format!("{prefix}_max_s")).unwrap_or(p95),
        })
    };
    let mut points = Vec::new();
    for r in &rates {
        let n = |name: &str| format!("r{r}_{name}");
        let incremental = if values.contains_key(&n("incremental_median_s")) {
            Some(Incremental {
                delays: delays(&n("incremental"))?,
                backlog: num(&n("incremental_backlog_at_window_end"))? as usize,
                saturated: num(&n("incremental_saturated"))? != 0.0,
                clustered_per_s: num(&n("incremental_clustered_per_s"))?,
                drain: Duration::from_secs_f64(num(&n("incremental_drain_s"))?),
                late: Duration::from_secs_f64(num(&n("incremental_loader_late_max_s"))?),
            })
        } else {
            None
        };
        let batch = Batch {
            delays: delays(&n("batch"))?,
            runs: num(&n("batch_runs"))? as usize,
            run: Duration::from_secs_f64(num(&n("batch_run_mean_s"))?),
            pages: num(&n("batch_pages"))? as usize,
        };
        let rate = r.parse().map_err(|e| format!("{}: rate {r:?}: {e}", log.display()))?;
        points.push(Point { rate, arrivals: num(&n("arrivals"))? as usize, incremental, batch });
    }
    if points.is_empty() {
        return Err(format!("{}: no rate measured (no figure7_r…_arrivals line)", log.display()).into());
    }
    let svg = figure_svg(num("pages")? as usize, &points, num("hour_s")?, num("batch_run_s")?, machine);
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("figure7.svg"), svg)?;
    Ok(())
}

/// The Figure 7 analog: clustering delay (log) against the crawl rate (log), median with 5th and
/// 95th percentile bars; the incremental side dashed, the batch side solid (as in the paper).
fn figure_svg(pages: usize, points: &[Point], hour: f64, t_b: f64, machine: &str) -> String {
    let (w, h) = (860.0, 560.0);
    let (left, right, top, bottom) = (80.0, 30.0, 72.0, 118.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let delays = points.iter().flat_map(|p| {
        let inc = p.incremental.iter().flat_map(|i| [i.delays.p5, i.delays.p95]);
        inc.chain([p.batch.delays.p5, p.batch.delays.p95])
    });
    let (lo, hi) = delays.fold((f64::MAX, f64::MIN), |(lo, hi), d| (lo.min(d.max(1e-4)), hi.max(d)));
    let (y_lo, y_hi) = (10f64.powf(lo.log10().floor()), 10f64.powf(hi.max(lo * 10.0).log10().ceil()));
    let decades = (y_hi / y_lo).log10().round();
    let rates = || points.iter().map(|p| p.rate);
    // A margin of half a step either side, so that the end points are not on the frame.
    let x_lo = rates().fold(f64::MAX, f64::min) / 1.4;
    let x_hi = rates().fold(f64::MIN, f64::max) * 1.4;
    let x = |r: f64| left + (r.log10() - x_lo.log10()) / (x_hi.log10() - x_lo.log10()) * pw;
    let y = |d: f64| top + ph - (d.max(y_lo).log10() - y_lo.log10()) / (y_hi.log10() - y_lo.log10()) * ph;
    let number = |v: f64| if v >= 1.0 { format!("{v}") } else { format!("{}", (v * 1e4).round() / 1e4) };
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">Figure 7 analog: document clustering delay vs crawl rate</text>"#,
        w / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="40" text-anchor="middle" fill="#555">{pages} pages (hub-shaped synthetic crawl); 1 simulated hour = {hour:.1} s = 3 batch runs over the repository ({t_b:.1} s each)</text>"##,
        w / 2.0,
    );
    let _ = writeln!(s, r##"<text x="{}" y="56" text-anchor="middle" fill="#555">{machine}</text>"##, w / 2.0);
    // Grid: decades, and their 2 and 5 (labelled when there are few decades).
    let mut d = y_lo;
    while d <= y_hi * 1.0001 {
        for m in [1.0, 2.0, 5.0] {
            let v = d * m;
            if v > y_hi * 1.0001 {
                break;
            }
            let label = if m == 1.0 || decades <= 3.0 { number(v) } else { String::new() };
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="{2}"/><text x="{3}" y="{4:.1}" text-anchor="end">{label}</text>"##,
                y(v),
                left + pw,
                if m == 1.0 { "#d0d0d0" } else { "#eeeeee" },
                left - 6.0,
                y(v) + 4.0
            );
        }
        d *= 10.0;
    }
    let mut r = 10f64.powf(x_lo.log10().floor());
    while r <= x_hi {
        for m in [1.0, 2.0, 5.0] {
            let v = r * m;
            if v < x_lo || v > x_hi {
                continue;
            }
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1}" stroke="#eeeeee"/><line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#555"/><text x="{0:.1}" y="{3}" text-anchor="middle">{v}</text>"##,
                x(v),
                top + ph,
                top + ph + 5.0,
                top + ph + 19.0
            );
        }
        r *= 10.0;
    }
    let _ = writeln!(s, r##"<path d="M{left} {top} V{0} H{1}" fill="none" stroke="#333"/>"##, top + ph, left + pw);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">crawl rate (percent of the repository crawled per simulated hour)</text>"#,
        left + pw / 2.0,
        top + ph + 38.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22 {}) rotate(-90)" text-anchor="middle">clustering delay (s, measured; median, 5th–95th percentile)</text>"#,
        top + ph / 2.0
    );
    // The saturation point, as the paper's dotted asymptote.
    if let Some(sat) = saturation(points, pages, hour).filter(|s| *s > x_lo && *s < x_hi) {
        let _ = writeln!(
            s,
            r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1}" stroke="#1f4e9a" stroke-dasharray="2 4" stroke-width="1.5"/><text x="{2:.1}" y="{3}" fill="#1f4e9a" text-anchor="end">incremental saturates: ≈{sat:.0} %/h</text>"##,
            x(sat),
            top + ph,
            x(sat) - 6.0,
            top + 14.0
        );
    }
    // Each side: the median line, bars, markers (hollow: saturated), the median's value.
    let series = |color: &str, dash: &str, below: bool, pts: Vec<(f64, Delays, bool)>, s: &mut String| {
        let mut d = String::new();
        for (k, (r, delays, _)) in pts.iter().enumerate() {
            let _ = write!(d, "{}{:.1} {:.1} ", if k == 0 { "M" } else { "L" }, x(*r), y(delays.median));
        }
        let _ =
            writeln!(s, r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/>"#);
        for (r, delays, hollow) in &pts {
            let (x0, lo, med, hi) = (x(*r), y(delays.p5), y(delays.median), y(delays.p95));
            let _ = writeln!(
                s,
                r#"<path d="M{x0:.1} {lo:.1} V{hi:.1} M{0:.1} {lo:.1} H{1:.1} M{0:.1} {hi:.1} H{1:.1}" stroke="{color}" stroke-width="1.3" fill="none"/><circle cx="{x0:.1}" cy="{med:.1}" r="4" fill="{2}" stroke="{color}" stroke-width="1.5"/>"#,
                x0 - 5.0,
                x0 + 5.0,
                if *hollow { "white" } else { color }
            );
            let label = if delays.median >= 0.1 {
                format!("{:.2} s", delays.median)
            } else {
                format!("{:.1} ms", delays.median * 1e3)
            };
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{:.1}" fill="{color}" font-size="11">{label}</text>"#,
                x0 + 8.0,
                if below { med + 15.0 } else { med - 8.0 }
            );
        }
    };
    let inc: Vec<(f64, Delays, bool)> =
        points.iter().filter_map(|p| p.incremental.as_ref().map(|i| (p.rate, i.delays, i.saturated))).collect();
    let bat: Vec<(f64, Delays, bool)> = points.iter().map(|p| (p.rate, p.batch.delays, false)).collect();
    series("#d95f02", "", false, bat, &mut s);
    series("#1f4e9a", "7 5", true, inc, &mut s);
    // Legend, one entry a line.
    let legend = [
        (
            "#d95f02",
            "",
            "periodic batch runs: compute every table from scratch and write them, back to back (MapReduce's place)",
        ),
        (
            "#1f4e9a",
            "7 5",
            "Percolator: the incremental web-index pipeline, crawl commit to clustering commit (hollow: saturated)",
        ),
    ];
    for (k, (color, dash, label)) in legend.iter().enumerate() {
        let ly = h - 40.0 + 18.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{left}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}" font-size="11">{label}</text>"#,
            left + 26.0,
            left + 32.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
