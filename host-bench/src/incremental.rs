//! The paper's point, measured: incremental processing vs batch recomputation on the web-index
//! pipeline (`config/web-index.toml`, `docs/webindex.md`).
//!
//! For each crawl size N: the four web-index components from `target/guests` run in process
//! (a [`Pipeline`] on a [`Store`] over redb, durability none, 2 scanner threads) over a
//! generated crawl of N pages. Measured:
//!
//! 1. the initial build: the crawl loaded with the scanner stopped, then the time from starting
//!    the scanner to the fixed point, and committed observer runs per second;
//! 2. incremental updates: one page re-crawled (one more sentence of text, its first link
//!    pointed at another page), from just before its commit until the pipeline is quiescent
//!    again; repeated on different pages (median, p90);
//! 3. the batch side: [`webindex::batch::compute`] over all N pages' final inputs, what a batch
//!    system redoes for any change. Native Rust, in memory, no store reads or writes and no
//!    Wasm: it flatters the batch side. Then the same with store I/O: the inputs scanned from
//!    the store and the result written to a fresh store in transactions of
//!    [`BATCH_TXN_CELLS`] cells.
//!
//! Figures for N are printed only after the incremental tables were checked equal to the batch
//! result ([`batch::diff`]), and so were the batch-written store's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::pipeline::Pipeline;
use percolator_store::{Durability, RedbConfig, ScannerConfig, Store, StoreConfig};
use webindex::batch::{self, Inputs, Tables};
use webindex::{crawl, schema};

use crate::tables::read_tables;
use crate::{Res, percentile};

/// The guests the pipeline's bindings name.
const GUESTS: [&str; 4] = ["document_processor", "clustering", "link_inversion", "exporter"];
/// Cells per transaction when the batch result is written to a store (N = 1000: 1 cell 1.6 s,
/// 100 cells 0.68 s, 1,000 cells 0.64 s; larger transactions were slower until
/// `commit::group_rows` stopped searching the rows seen so far — see BENCHMARKS.md).
const BATCH_TXN_CELLS: usize = 1_000;
/// Timed runs of `batch::compute` per N (the median is reported).
const BATCH_RUNS: usize = 5;
/// Seed of the generated crawls.
const SEED: u64 = 2010;

/// What to run.
pub(crate) struct Settings {
    /// Crawl sizes, one pipeline each.
    pub(crate) pages: Vec<usize>,
    /// Incremental updates (re-crawled pages) per crawl size.
    pub(crate) updates: usize,
}

/// One crawl size's figures, for the summary.
struct Summary {
    pages: usize,
    fixed_point: Duration,
    update_median: Duration,
    update_p90: Duration,
    batch_compute: Duration,
    batch_store: Duration,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs every crawl size of `settings` in folders under `dir` (which the caller removes).
pub(crate) fn run(dir: &Path, settings: &Settings) -> Res<()> {
    let guests = root().join("target/guests");
    for g in GUESTS {
        let wasm = guests.join(format!("{g}.wasm"));
        if !wasm.is_file() {
            return Err(format!("{} is missing: run scripts/build-guests first", wasm.display()).into());
        }
    }
    let real = std::fs::read_to_string(root().join("config/web-index.toml"))?;
    let bindings = &real[real.find("[[binding]]").ok_or("config/web-index.toml has no [[binding]]")?..];

    println!("# 3. Web index: incremental processing vs batch recomputation");
    println!("#    pipeline: config/web-index.toml's bindings, target/guests, redb durability none,");
    println!("#    2 scanner threads; crawl: webindex::crawl::generate({SEED}, N), final version of each URL");
    let mut summaries = Vec::new();
    for &n in &settings.pages {
        let sub = dir.join(format!("n{n}"));
        std::fs::create_dir_all(&sub)?;
        let toml = format!(
            "[store]\npath = \"store.redb\"\ndurability = \"none\"\n[scanner]\nthreads = 2\n\
             [observers]\ndir = {:?}\ncache_dir = {:?}\n{bindings}",
            guests.display().to_string(),
            dir.join("cache").display().to_string(),
        );
        std::fs::write(sub.join("pipeline.toml"), toml)?;
        let config = Config::load(&sub.join("pipeline.toml"))?;
        summaries.push(one_size(&config, &sub, n, settings.updates)?);
        std::fs::remove_dir_all(&sub)?;
    }

    println!("# summary: N, initial fixed point s, update median ms, p90 ms, batch compute ms,");
    println!("#          batch with store I/O ms, update/batch-compute, update/batch-with-I/O");
    for s in &summaries {
        println!(
            "#   {:>5}  {:>7.2}  {:>7.2}  {:>7.2}  {:>8.1}  {:>8.1}  {:.4}  {:.4}",
            s.pages,
            s.fixed_point.as_secs_f64(),
            ms(s.update_median),
            ms(s.update_p90),
            ms(s.batch_compute),
            ms(s.batch_store),
            s.update_median.as_secs_f64() / s.batch_compute.as_secs_f64(),
            s.update_median.as_secs_f64() / s.batch_store.as_secs_f64(),
        );
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One crawl size: builds the pipeline, measures, checks, then prints the figures.
fn one_size(config: &Config, dir: &Path, n: usize, updates: usize) -> Res<Summary> {
    let store = Store::open(
        &config.store_path,
        StoreConfig::default(),
        RedbConfig { durability: Durability::None, ..RedbConfig::default() },
    )?;
    let pipeline = Pipeline::new(store.clone(), Runtime::new(Some(config.cache_dir.clone()))?);
    pipeline.apply(config)?;
    let mut inputs = crawl::generate(SEED, n).inputs();
    let urls: Vec<String> = inputs.keys().cloned().collect();
    let mut out = Vec::new();
    let mut figure = |name: &str, value: String| out.push(format!("webindex_n{n}_{name} {value}"));
    eprintln!("# N = {n}: loading {} pages", urls.len());

    // 1. Initial build: load with no scanner, then time from scanner start to the fixed point.
    let start = Instant::now();
    for (url, (html, pagerank)) in &inputs {
        store.run(|t| {
            t.set(schema::PAGES, url, schema::RAW_HTML, html.clone().unwrap_or_default())?;
            t.set(schema::PAGES, url, schema::RAW_PAGERANK, pagerank.clone().unwrap_or_default())
        })?;
    }
    let load = start.elapsed();
    let before = store.metrics();
    let start = Instant::now();
    let scanner = store.start_scanner(ScannerConfig { threads: config.scanner_threads, ..ScannerConfig::default() });
    let fixed_point = wait_fixed_point(&store, start, Duration::from_secs(900), Duration::from_millis(1))?;
    let after = store.metrics();
    let runs = after.observer_runs - before.observer_runs;
    eprintln!("# N = {n}: fixed point after {:.2} s, {runs} runs; {updates} updates", fixed_point.as_secs_f64());
    figure("pages", urls.len().to_string());
    figure("load_s", format!("{:.3}", load.as_secs_f64()));
    figure("fixed_point_s", format!("{:.3}", fixed_point.as_secs_f64()));
    figure("initial_observer_runs", runs.to_string());
    figure("initial_observer_runs_per_s", format!("{:.0}", runs as f64 / fixed_point.as_secs_f64()));
    figure("initial_conflicts", (after.conflicts - before.conflicts).to_string());

    // 2. Incremental updates, one page at a time, each from an idle pipeline.
    std::thread::sleep(Duration::from_millis(100));
    let (mut latencies, mut update_runs) = (Vec::with_capacity(updates), Vec::with_capacity(updates));
    for k in 0..updates {
        let i = (k * urls.len() / updates + urls.len() / (2 * updates)) % urls.len();
        let url = &urls[i];
        let old = String::from_utf8(inputs[url].0.clone().unwrap_or_default())?;
        let mut target = &urls[(i + urls.len() / 2) % urls.len()];
        if old.contains(&format!("href=\"{target}\"")) {
            target = &urls[(i + urls.len() / 2 + 1) % urls.len()];
        }
        let html = revise(&old, k, target).ok_or_else(|| format!("{url}: no <p> or no link to change"))?;
        let before = store.metrics();
        let start = Instant::now();
        store.run(|t| t.set(schema::PAGES, url, schema::RAW_HTML, html.as_bytes()))?;
        latencies.push(wait_fixed_point(&store, start, Duration::from_secs(60), Duration::from_micros(100))?);
        update_runs.push(store.metrics().observer_runs - before.observer_runs);
        inputs.insert(url.clone(), (Some(html.into_bytes()), inputs[url].1.clone()));
        // Idle between updates, so each one starts from a sleeping scanner.
        std::thread::sleep(Duration::from_millis(5));
    }
    scanner.stop();
    let m = store.metrics();
    if m.dead_letters != 0 {
        return Err(format!("N = {n}: dead letters: {:?}", store.dead_letters()?).into());
    }
    latencies.sort();
    update_runs.sort();
    let (median, p90) = (percentile(&latencies, 0.5), percentile(&latencies, 0.9));
    figure("updates", updates.to_string());
    figure("update_median_ms", format!("{:.3}", ms(median)));
    figure("update_p90_ms", format!("{:.3}", ms(p90)));
    figure("update_max_ms", format!("{:.3}", ms(latencies[latencies.len() - 1])));
    figure("update_observer_runs_median", update_runs[update_runs.len() / 2].to_string());
    figure("update_observer_runs_max", update_runs[update_runs.len() - 1].to_string());

    // 3. Batch: the whole recomputation over the final inputs, native and in memory.
    let mut compute_times = Vec::with_capacity(BATCH_RUNS);
    let mut expected = Tables::new();
    for _ in 0..BATCH_RUNS {
        let start = Instant::now();
        expected = batch::compute(std::hint::black_box(&inputs))?;
        compute_times.push(start.elapsed());
    }
    compute_times.sort();
    let batch_compute = percentile(&compute_times, 0.5);
    batch::normalize(&mut expected);
    // The same with store I/O: scan the inputs, compute, write the derived cells to a fresh store.
    let start = Instant::now();
    let read_inputs = scan_inputs(&store)?;
    let read = start.elapsed();
    if read_inputs != inputs {
        return Err(format!("N = {n}: the inputs scanned from the store differ from the crawl").into());
    }
    let start = Instant::now();
    let result = batch::compute(&read_inputs)?;
    let compute_again = start.elapsed();
    let fresh = Store::open(
        dir.join("batch.redb"),
        StoreConfig::default(),
        RedbConfig { durability: Durability::None, ..RedbConfig::default() },
    )?;
    let start = Instant::now();
    let written = write_tables(&fresh, &result)?;
    let write = start.elapsed();
    let batch_store = read + compute_again + write;
    figure("batch_compute_ms", format!("{:.3}", ms(batch_compute)));
    figure("batch_read_inputs_ms", format!("{:.3}", ms(read)));
    figure("batch_write_ms", format!("{:.3}", ms(write)));
    figure("batch_cells_written", written.to_string());
    figure("batch_cells_per_txn", BATCH_TXN_CELLS.to_string());
    figure("batch_with_store_io_ms", format!("{:.3}", ms(batch_store)));
    figure("update_over_batch_compute", format!("{:.5}", median.as_secs_f64() / batch_compute.as_secs_f64()));
    figure("update_over_batch_with_store_io", format!("{:.5}", median.as_secs_f64() / batch_store.as_secs_f64()));
    figure("fixed_point_over_batch_compute", format!("{:.1}", fixed_point.as_secs_f64() / batch_compute.as_secs_f64()));

    // The check: no figures for a pipeline whose result is wrong.
    let actual = read_tables(&store)?;
    let diff = batch::diff(&expected, &actual, 20);
    if !diff.is_empty() {
        return Err(format!("N = {n}: the incremental result differs from batch:\n{}", diff.join("\n")).into());
    }
    let mut from_batch = read_tables(&fresh)?;
    // The fresh store has no inputs: add them back before comparing.
    let pages = from_batch.entry(schema::PAGES.to_owned()).or_default();
    for ((row, column), value) in &expected[schema::PAGES] {
        if column.starts_with("raw:") {
            pages.insert((row.clone(), column.clone()), value.clone());
        }
    }
    let diff = batch::diff(&expected, &from_batch, 20);
    if !diff.is_empty() {
        return Err(format!("N = {n}: the batch-written store differs from batch:\n{}", diff.join("\n")).into());
    }
    let cells: usize = actual.values().map(|t| t.len()).sum();
    figure("cells", cells.to_string());
    figure("incremental_equals_batch", "1".to_owned());
    for line in &out {
        println!("{line}");
    }
    drop(pipeline);
    Ok(Summary { pages: urls.len(), fixed_point, update_median: median, update_p90: p90, batch_compute, batch_store })
}

/// A re-crawl of a generated page: one more sentence in its first paragraph (terms that appear
/// nowhere else, so its content hash and index entries change) and its first link pointed at
/// `target`. `None` if the page has no paragraph or no link.
fn revise(html: &str, k: usize, target: &str) -> Option<String> {
    let p = html.find("</p>")?;
    let html = format!("{} Revision r{k}x brings incremental freshness.{}", &html[..p], &html[p..]);
    let href = html.find("<a href=\"")? + "<a href=\"".len();
    let end = href + html[href..].find('"')?;
    Some(format!("{}{target}{}", &html[..href], &html[end..]))
}

/// Polls (every `poll`) until the store is quiescent; returns the time since `start`.
fn wait_fixed_point(store: &Store, start: Instant, timeout: Duration, poll: Duration) -> Res<Duration> {
    loop {
        // A zero timeout checks once and returns.
        if store.wait_quiescent(Duration::ZERO)? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!("the pipeline did not reach its fixed point within {timeout:?}").into());
        }
        std::thread::sleep(poll);
    }
}

/// The `raw:*` inputs of every page, read in one transaction.
fn scan_inputs(store: &Store) -> Res<Inputs> {
    let txn = store.begin()?;
    let mut inputs = Inputs::new();
    for e in txn.scan(schema::PAGES, b"", None, Some(&[schema::RAW_HTML, schema::RAW_PAGERANK]), usize::MAX)? {
        let url = String::from_utf8(e.row)?;
        let slot = inputs.entry(url).or_insert((None, None));
        if e.column == schema::RAW_HTML {
            slot.0 = Some(e.value);
        } else {
            slot.1 = Some(e.value);
        }
    }
    Ok(inputs)
}

/// Writes every derived cell of `tables` (the `raw:*` inputs are already stored) in
/// transactions of [`BATCH_TXN_CELLS`] cells; returns the number of cells written.
fn write_tables(store: &Store, tables: &Tables) -> Res<usize> {
    let cells: Vec<(&str, &[u8], &str, &[u8])> = tables
        .iter()
        .flat_map(|(table, cells)| {
            cells.iter().map(move |((row, column), value)| (table.as_str(), &row[..], column.as_str(), &value[..]))
        })
        .filter(|(table, _, column, _)| !(*table == schema::PAGES && column.starts_with("raw:")))
        .collect();
    for chunk in cells.chunks(BATCH_TXN_CELLS) {
        store.run(|t| {
            for &(table, row, column, value) in chunk {
                t.set(table, row, column, value)?;
            }
            Ok(())
        })?;
    }
    Ok(cells.len())
}
