//! The web index loaded from scratch, and one hub and one leaf page updated: what the pipeline
//! costs per page, and whether a page's cost follows its change or its inlinks.
//!
//! A generated crawl (`webindex::crawl::generate_shaped`, hub-shaped by default: a few pages
//! linked from most pages, power-law inlinks; `--shape docs`: documentation sites shaped after
//! a real crawl, pages of 4.5 KB median up to ~3 MB; first versions only) is loaded into an
//! in-process host — the four web-index components of `config/web-index.toml`, a
//! [`Pipeline`] on a [`Store`] over redb (durability fsync, as that configuration; `--durability
//! none`: one durable commit a second), the scanner running while the loader writes 100 pages
//! per transaction — until the pipeline reaches its fixed point. Measured:
//!
//! - pages per second from the first load to the fixed point, observer runs per page,
//!   conflicts per page;
//! - **CPU against the batch computation, side by side**: the process's CPU-seconds (user +
//!   system, `/proc/self/stat`) from the first load to the fixed point and a checkpoint of
//!   what the memtable still holds — loader, scanners, observers, GC and redb alike — and the
//!   loading thread's own share (its transactions
//!   writing the inputs, then polling for the fixed point), wall time and cores used (CPU /
//!   wall); then `webindex::batch::compute` over the same inputs on one thread (its thread CPU
//!   time, the median of 3 runs, after the pipeline stopped), and the ratios `cpu_over_batch`
//!   (the whole process) and `pipeline_cpu_over_batch` (the loading thread's CPU left out);
//!   and the same computation in a process of its own, each of 3 runs in a new process of this
//!   binary (`batch_fresh_process_cpu_s`, the median; `cpu_over_fresh_process_batch`): the
//!   in-process runs follow the allocator state the load left behind;
//! - the same CPU by thread (`thread_cpu_s{observers|scanners|gc|...}`: threads alive at the
//!   fixed point, by name), and the bytes those threads passed to write calls
//!   (`thread_written_mb{...}`: the redo log's appends, redb's pages by the checkpointer);
//! - bytes written per page: row key, column and value of every committed cell version
//!   (counted in the backend, acks and every table included; deletions count row key and
//!   column), and input bytes (URL, HTML, PageRank) for scale;
//! - the redb file's size at the fixed point over the input's size, and over the bytes of the
//!   batch computation's tables (`store_over_batch_tables`: each cell's row, column and value,
//!   uncompressed, as a batch run would write them); the pages redb has allocated in it (live
//!   data, versions not collected yet, B-tree overhead) over the same (`allocated_over_batch_tables`:
//!   the file grows in large steps, so its size is a coarse figure), and the blocks the file
//!   takes on disk (`store_disk_bytes`: the unwritten tail of a growth step takes none); with
//!   `--space-every S`, the same looked at every S seconds during the load (the worst file /
//!   allocated and file / stored keys and values, the same for the disk blocks,
//!   `load_max_*`; each look walks the B-trees, CPU counted in `cpu_s`); with old versions
//!   collected during the load as the configuration's `[store] gc_interval_s` says (the
//!   host's default if absent; `--gc-every S`: every S seconds; `--no-gc`: never); values of
//!   256 bytes or more are stored deflated (`docs/design.md`, "Compressed values");
//! - with `--compact-when-quiet S` (the store's `RedbConfig::compact_when_quiet`; 0: off), the
//!   pipeline at rest after the fixed point, GC on as during the load, until the quiet store
//!   compacted its open file: the file then over the batch tables
//!   (`quiet_file_over_batch_tables`), and the longest a reader probing every 50 ms (every
//!   `--probe-every-ms M`; 0: without a pause, as a serving host's queries) waited
//!   (`quiet_longest_read_ms`) and its reads a second (`quiet_reads_per_s`; without a pause,
//!   also those of its median and its slowest tenth of a second, `quiet_reads_per_s_*_tenth`);
//! - one update of the crawl's first hub (new title, text and links) and one of a leaf page
//!   linking to it (a new anchor), each from an idle pipeline to its fixed point again:
//!   observer runs and bytes written. Each page is first updated once to a fixed version, so
//!   the measured update changes the same bytes whatever the crawl. Then the hub moved to
//!   another canonical and back (`hub_move*`: a copy of it loaded with a PageRank above every
//!   page's, then below the hub's), which forwards all its inlinks elsewhere each time: the
//!   same, and the wall time of the forwarding bindings' runs (`*_forwarding_run_ms`).
//!
//! Then the tables are checked equal to `webindex::batch::compute` of the final inputs
//! (`--no-check` skips it: for guests of another version of the pipeline, whose tables this
//! crate's batch computation does not describe). Last, the space: a GC pass with nothing
//! running (each cell keeps its newest version), what is left by table and column (cells,
//! write records, locks, notify cells, key and value bytes, values compressed and not), and the
//! file's size after the store is closed and compacted (`RedbBigtable::compact`) over the
//! input's size (`compacted_over_input`) and over the batch tables
//! (`compacted_over_batch_tables`).
//!
//! ```text
//! scripts/build-guests
//! cargo run --release -p percolator-host-bench --bin webindex-load -- --pages 10000
//! ```
//!
//! Options: `--pages N` (default 10000), `--seed S` (1), `--shape hubs|uniform|docs` (hubs),
//! `--durability fsync|none` (fsync),
//! `--guests DIR` (the components; default `target/guests`), `--config FILE` (whose
//! `[[binding]]` tables to use; default `config/web-index.toml`), `--no-check`, `--no-gc`,
//! `--workers N` (observer runs in flight; default the configuration's `[scanner] workers`),
//! `--gc-every S` (seconds between GC passes; default the configuration's `gc_interval_s`),
//! `--space-every S`,
//! `--compact-when-quiet S`, `--probe-every-ms M` (50). Prints `name value` lines; `#`
//! lines are comments.

/// The host's allocator (`host/src/main.rs`), so that what is measured here is what it runs.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use percolator_runtime::Runtime;
use percolator_server::config::{Backend, Config};
use percolator_server::pipeline::Pipeline;
use percolator_store::backends::{
    ApplyHook, Bigtable, Mutation, Observed, RedbBigtable, RowMutation, WriteKind, WriteRecord, decode_value,
    notify_position,
};
use percolator_store::{Durability, RedbConfig, Result as StoreResult, ScannerConfig, Store, StoreConfig};
use webindex::batch::{self, Inputs};
use webindex::crawl::{self, Shape};
use webindex::schema;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

#[path = "../../../bench/src/procfs.rs"]
mod procfs;
#[path = "../tables.rs"]
mod tables;
use tables::read_tables;

/// Pages per load transaction.
const LOAD_BATCH: usize = 100;
/// Runs of the batch computation timed (the median is the figure).
const BATCH_RUNS: usize = 3;

/// `/proc/loadavg`'s 1-, 5- and 15-minute averages (the machine is shared).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_owned())
}

/// Counts the bytes of the cell versions committed through a backend (an [`Observed`] one).
#[derive(Default)]
struct Counting {
    bytes: AtomicU64,
    /// Applied row mutations by table: how many, and their mutations (each one B-tree insert
    /// or delete, or one of the notify table) by kind ([`KINDS`]).
    tables: std::sync::Mutex<BTreeMap<String, (u64, [u64; KINDS.len()])>>,
}

/// The kinds of [`Mutation`], as [`kind`] numbers them.
const KINDS: [&str; 10] = [
    "PutLock",
    "DeleteLock",
    "PutData",
    "DeleteData",
    "PutWrite",
    "PutWrite(rollback)",
    "DeleteWrite",
    "SetNotify",
    "DropNotifyWriter",
    "ClearNotify",
];

fn kind(m: &Mutation) -> usize {
    match m {
        Mutation::PutLock { .. } => 0,
        Mutation::DeleteLock { .. } => 1,
        Mutation::PutData { .. } => 2,
        Mutation::DeleteData { .. } => 3,
        Mutation::PutWrite { write: WriteRecord { kind: WriteKind::Rollback, .. }, .. } => 5,
        Mutation::PutWrite { .. } => 4,
        Mutation::DeleteWrite { .. } => 6,
        Mutation::SetNotify { .. } => 7,
        Mutation::DropNotifyWriter { .. } => 8,
        Mutation::ClearNotify { .. } => 9,
    }
}

/// What [`Counting`] keeps of a row mutation: bytes written, its table, its mutations by kind.
struct Counted {
    bytes: u64,
    table: String,
    kinds: [u64; KINDS.len()],
}

impl ApplyHook for Counting {
    type Note = Counted;

    fn note(&self, m: &RowMutation) -> Option<Counted> {
        let mut n = 0;
        let mut kinds = [0; KINDS.len()];
        for mutation in &m.mutations {
            kinds[kind(mutation)] += 1;
            if let Mutation::PutWrite { column, write: WriteRecord { kind, .. }, .. } = mutation {
                n += match kind {
                    WriteKind::Put(v) => m.row.len() + column.len() + v.len(),
                    WriteKind::Delete => m.row.len() + column.len(),
                    WriteKind::Rollback => 0,
                };
            }
        }
        Some(Counted { bytes: n as u64, table: m.table.clone(), kinds })
    }

    fn applied(&self, notes: Vec<Counted>) {
        self.bytes.fetch_add(notes.iter().map(|c| c.bytes).sum(), Ordering::Relaxed);
        let mut tables = self.tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for c in notes {
            let (rows, kinds) = match tables.get_mut(&c.table) {
                Some(t) => t,
                None => tables.entry(c.table).or_default(),
            };
            *rows += 1;
            for (total, n) in kinds.iter_mut().zip(c.kinds) {
                *total += n;
            }
        }
    }
}

/// The command line.
struct Args {
    pages: usize,
    seed: u64,
    shape: Shape,
    durability: Durability,
    guests: PathBuf,
    config: PathBuf,
    check: bool,
    no_gc: bool,
    /// How often GC runs an incremental pass during the load (`None`: as the configuration's
    /// `[store] gc_interval_s` says, as the host would run it).
    gc_every: Option<Duration>,
    /// Observer runs in flight (`[scanner] workers`); `None`: the host's default.
    workers: Option<usize>,
    /// How often to look at the store file's space during the load (`None`: only at the fixed
    /// point; each look walks the B-trees, CPU that counts in `cpu_s`).
    space_every: Option<Duration>,
    /// `--compact-when-quiet S`: the store's [`RedbConfig::compact_when_quiet`] (0: off), and
    /// at the end, a wait for the quiet store to compact its file. `None`: the store's default,
    /// no wait.
    compact_when_quiet: Option<Duration>,
    /// `--probe-every-ms M`: the pause between two reads of the probe while the quiet store
    /// compacts (zero: none).
    probe_every: Duration,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn parse_args() -> Res<Args> {
    let mut args = Args {
        pages: 10_000,
        seed: 1,
        shape: Shape::Hubs,
        durability: Durability::Fsync,
        guests: root().join("target/guests"),
        config: root().join("config/web-index.toml"),
        check: true,
        no_gc: false,
        gc_every: None,
        workers: None,
        space_every: None,
        compact_when_quiet: None,
        probe_every: Duration::from_millis(50),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pages" => args.pages = value()?.parse().map_err(|e| format!("--pages: {e}"))?,
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--shape" => {
                args.shape = match value()?.as_str() {
                    "hubs" => Shape::Hubs,
                    "uniform" => Shape::Uniform,
                    "docs" => Shape::Docs,
                    other => return Err(format!("--shape {other:?}: expected hubs, uniform or docs").into()),
                }
            }
            "--durability" => {
                args.durability = match value()?.as_str() {
                    "fsync" => Durability::Fsync,
                    "none" => Durability::None,
                    other => return Err(format!("--durability {other:?}: expected fsync or none").into()),
                }
            }
            "--guests" => args.guests = PathBuf::from(value()?),
            "--config" => args.config = PathBuf::from(value()?),
            "--no-check" => args.check = false,
            "--no-gc" => args.no_gc = true,
            "--gc-every" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--gc-every: {e}"))?;
                if !(secs.is_finite() && (0.05..=3600.0).contains(&secs)) {
                    return Err(format!("--gc-every {secs}: expected seconds, 0.05 to 3600").into());
                }
                args.gc_every = Some(Duration::from_secs_f64(secs));
            }
            "--workers" => args.workers = Some(value()?.parse().map_err(|e| format!("--workers: {e}"))?),
            "--space-every" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--space-every: {e}"))?;
                if !(secs.is_finite() && secs >= 0.1) {
                    return Err(format!("--space-every {secs}: expected seconds, at least 0.1").into());
                }
                args.space_every = Some(Duration::from_secs_f64(secs));
            }
            "--compact-when-quiet" => {
                let secs: f64 = value()?.parse().map_err(|e| format!("--compact-when-quiet: {e}"))?;
                if !(secs.is_finite() && (0.0..=3600.0).contains(&secs)) {
                    return Err(format!("--compact-when-quiet {secs}: expected seconds, 0 (off) to 3600").into());
                }
                args.compact_when_quiet = Some(Duration::from_secs_f64(secs));
            }
            "--probe-every-ms" => {
                let ms: u64 = value()?.parse().map_err(|e| format!("--probe-every-ms: {e}"))?;
                if ms > 60_000 {
                    return Err(format!("--probe-every-ms {ms}: expected milliseconds, 0 to 60000").into());
                }
                args.probe_every = Duration::from_millis(ms);
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?} (expected --pages, --seed, --shape, --durability, --guests, --config, --no-check, --no-gc, --gc-every, --workers, --space-every, --compact-when-quiet, --probe-every-ms)"
                )
                .into());
            }
        }
    }
    if args.pages < 10 {
        return Err("--pages must be at least 10".into());
    }
    if args.no_gc && args.gc_every.is_some() {
        return Err("--no-gc and --gc-every contradict each other: give one".into());
    }
    Ok(args)
}

fn main() {
    // As the host runs (`host/src/main.rs`).
    percolator_server::memory::without_transparent_huge_pages();
    // The batch computation in a process of its own (see `batch_in_fresh_processes`).
    let mut argv = std::env::args().skip(1);
    if argv.next().as_deref() == Some(BATCH_CHILD) {
        match argv.next().ok_or_else(|| format!("{BATCH_CHILD} needs a file").into()).and_then(|f| batch_child(&f)) {
            Ok(cpu) => println!("{cpu}"),
            Err(e) => {
                eprintln!("webindex-load {BATCH_CHILD}: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    if let Err(e) = parse_args().and_then(|args| {
        let dir = std::env::temp_dir().join(format!("percolator-webindex-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let result = run(&args, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }) {
        eprintln!("webindex-load: {e}");
        std::process::exit(1);
    }
}

/// The role of a thread by its name (cut to 15 bytes: `percolator-obse` are the observer
/// workers), for the figures by thread.
fn thread_role(name: &str) -> &'static str {
    match name {
        n if n.starts_with("percolator-obse") => "observers",
        n if n.starts_with("percolator-scan") => "scanners",
        "percolator-gc" => "gc",
        n if n.starts_with("percolator-") || n.starts_with("redb-") => "other store threads",
        _ => "loader and others",
    }
}

/// The argument that makes this binary a batch run of its own (see `batch_in_fresh_processes`).
const BATCH_CHILD: &str = "--batch-child";

/// `inputs` as the child reads them: for each URL, its length and bytes, then each of HTML and
/// PageRank as a flag (present or not), a length and bytes; lengths as 8-byte little endian.
fn write_inputs(inputs: &Inputs, to: &Path) -> Res<()> {
    let mut out = Vec::new();
    let mut put = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    for (url, (html, pagerank)) in inputs {
        put(url.as_bytes());
        for v in [html, pagerank] {
            match v {
                Some(v) => {
                    put(b"1");
                    put(v);
                }
                None => put(b""),
            }
        }
    }
    std::fs::write(to, out).map_err(|e| format!("{}: {e}", to.display()).into())
}

fn read_inputs(from: &Path) -> Res<Inputs> {
    let bytes = std::fs::read(from).map_err(|e| format!("{}: {e}", from.display()))?;
    let mut rest = bytes.as_slice();
    let mut take = || -> Res<Option<Vec<u8>>> {
        if rest.is_empty() {
            return Ok(None);
        }
        let (len, tail) = rest.split_at_checked(8).ok_or("inputs end inside a length")?;
        let len = usize::try_from(u64::from_le_bytes(len.try_into().expect("8 bytes")))?;
        let (v, tail) = tail.split_at_checked(len).ok_or("inputs end inside a value")?;
        rest = tail;
        Ok(Some(v.to_vec()))
    };
    let mut inputs = Inputs::new();
    while let Some(url) = take()? {
        let url = String::from_utf8(url)?;
        let mut value = || -> Res<Option<Vec<u8>>> {
            let tag = take()?.ok_or("inputs end inside a page")?;
            if tag.is_empty() {
                Ok(None)
            } else if tag == b"1" {
                Ok(Some(take()?.ok_or("inputs end inside a page")?))
            } else {
                Err(format!("inputs hold a value tagged {tag:?}, expected 1 or nothing").into())
            }
        };
        let (html, pagerank) = (value()?, value()?);
        inputs.insert(url, (html, pagerank));
    }
    Ok(inputs)
}

/// `batch::compute` over `inputs`, the CPU seconds this thread spent in it, and in each of its
/// stages ([`batch::STAGES`]).
fn timed_batch(inputs: &Inputs) -> Res<(batch::Tables, f64, Vec<f64>)> {
    let before = thread_cpu();
    let mut ends = Vec::with_capacity(batch::STAGES.len());
    let tables = batch::compute_in_stages(inputs, &mut |_| ends.push(thread_cpu()))?;
    let stages = ends.iter().scan(before, |last, end| Some(end - std::mem::replace(last, *end))).collect();
    Ok((tables, thread_cpu() - before, stages))
}

/// The stage of the batch computation (an index of [`batch::STAGES`]) that binding `name` of
/// `config/web-index.toml` does incrementally.
fn stage_of(name: &str) -> Option<usize> {
    match name {
        "document-processor" => Some(0),
        "clustering-hash" | "clustering-pagerank" => Some(1),
        "link-inversion" => Some(2),
        "link-forwarding" | "link-forwarding-canonical" => Some(3),
        "exporter" => Some(4),
        _ => None,
    }
}

/// The CPU seconds this thread has spent (`CLOCK_THREAD_CPUTIME_ID`: nanoseconds, where
/// `/proc/thread-self/stat` counts 10 ms ticks).
fn thread_cpu() -> f64 {
    percolator_runtime::thread_cpu().as_secs_f64()
}

/// In the child: the thread CPU of one `batch::compute` over the inputs in `file`.
fn batch_child(file: &str) -> Res<f64> {
    let inputs = read_inputs(Path::new(file))?;
    timed_batch(&inputs).map(|(_, cpu, _)| cpu)
}

/// The batch computation in a process of its own: each of [`BATCH_RUNS`] runs in a new process
/// of this binary (a fresh allocator, no memory left mapped by the load), timed by its own
/// thread's CPU from after it read the inputs. The in-process runs (`batch_cpu_s`) follow the
/// allocator state the pipeline left behind (BENCHMARKS.md, "Sixth round").
fn batch_in_fresh_processes(inputs: &Inputs, dir: &Path) -> Res<Vec<f64>> {
    let file = dir.join("batch-inputs");
    write_inputs(inputs, &file)?;
    let exe = std::env::current_exe()?;
    let mut runs = Vec::new();
    for _ in 0..BATCH_RUNS {
        let out = std::process::Command::new(&exe).arg(BATCH_CHILD).arg(&file).output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("the batch run in its own process failed ({}): {stderr}", out.status).into());
        }
        runs.push(text.trim().parse::<f64>().map_err(|e| format!("the batch run printed {text:?}: {e}"))?);
    }
    Ok(runs)
}

/// The hub's HTML, version `v`.
fn hub_html(v: u32) -> String {
    format!(
        "<title>Documentation hub {v}</title><p>Version {v} of the index of every guide and reference.</p>\
         <a href=\"/guide/v{v}.html\">Guide {v}</a> <a href=\"http://probe.example/\">Probe home</a>"
    )
}

/// The leaf page's HTML, version `v`: a link to `hub` with an anchor that changes.
fn leaf_html(hub: &str, v: u32) -> String {
    format!(
        "<title>Leaf {v}</title><p>A leaf page about storage engines, version {v}.</p>\
         <a href=\"{hub}\">storage guide {v}</a> <a href=\"/\">home</a>"
    )
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
    let durability = match args.durability {
        Durability::Fsync => "fsync",
        Durability::None => "none",
    };
    // Observer runs in flight: `--workers`, else the configuration's `[scanner] workers`, else
    // the host's default; GC's interval: `--gc-every`, else the configuration's (or the host's
    // default): as the host runs that configuration.
    let table = real.parse::<toml::Table>().map_err(|e| format!("{}: {e}", args.config.display()))?;
    let integer =
        |section: &str, key: &str| table.get(section).and_then(|s| s.get(key)).and_then(toml::Value::as_integer);
    let workers = match args.workers {
        Some(w) => Some(w),
        None => integer("scanner", "workers")
            .map(|w| usize::try_from(w).map_err(|_| format!("{}: scanner.workers = {w}", args.config.display())))
            .transpose()?,
    };
    // `[store]` keys copied as the configuration sets them (GC's interval, redb's page cache),
    // checked here so that an error names the user's file rather than the copy.
    let store_key = |key: &str, range: std::ops::RangeInclusive<i64>, lowest: &str| -> Res<String> {
        match table.get("store").and_then(|s| s.get(key)) {
            None => Ok(String::new()),
            Some(v) => match v.as_integer() {
                Some(n) if range.contains(&n) => Ok(format!("{key} = {n}\n")),
                _ => Err(format!(
                    "{}: store.{key} = {v}: must be between {lowest} and {}",
                    args.config.display(),
                    range.end()
                )
                .into()),
            },
        }
    };
    let gc_interval = store_key("gc_interval_s", 0..=86_400, "0 (off)")?;
    let cache_mb = store_key("cache_mb", 1..=65_536, "1")?;
    let toml = format!(
        "[store]\npath = \"store.redb\"\ndurability = \"{durability}\"\n{gc_interval}{cache_mb}[scanner]\nthreads = 2\n{}\
         [observers]\ndir = {:?}\ncache_dir = {:?}\n{bindings}",
        workers.map(|w| format!("workers = {w}\n")).unwrap_or_default(),
        args.guests.display().to_string(),
        dir.join("cache").display().to_string(),
    );
    std::fs::write(dir.join("pipeline.toml"), toml)?;
    let config = Config::load(&dir.join("pipeline.toml"))?;
    let gc_every = if args.no_gc { None } else { args.gc_every.or(config.gc_interval) };
    let redb = Arc::new(RedbBigtable::open(
        &config.store_path,
        RedbConfig {
            durability: args.durability,
            compact_when_quiet: match args.compact_when_quiet {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => RedbConfig::default().compact_when_quiet,
            },
            cache_bytes: match config.backend {
                Backend::Redb { cache_bytes, .. } => cache_bytes,
                _ => RedbConfig::default().cache_bytes,
            },
            ..RedbConfig::default()
        },
    )?);
    let counting = Arc::new(Observed::new(redb.clone(), Counting::default()));
    let store = Store::with_backend(counting.clone(), StoreConfig::default())?;
    let pipeline = Pipeline::new(store.clone(), Runtime::new(Some(config.cache_dir.clone()))?);
    pipeline.apply(&config)?;

    let crawl = crawl::generate_shaped(args.seed, args.pages, args.shape);
    let hub = crawl.pages[0].url.clone();
    let leaf = "http://probe.example/leaf.html".to_owned();
    let mut inputs: Inputs = BTreeMap::new();
    for p in &crawl.pages {
        inputs.insert(p.url.clone(), (Some(p.html.clone().into_bytes()), Some(p.pagerank.to_string().into_bytes())));
    }
    inputs.insert(leaf.clone(), (Some(leaf_html(&hub, 0).into_bytes()), None));
    let input_bytes: usize = inputs
        .iter()
        .map(|(url, (h, p))| url.len() + h.as_ref().map_or(0, Vec::len) + p.as_ref().map_or(0, Vec::len))
        .sum();
    let pages = inputs.len();
    println!(
        "# web index load: {pages} pages ({:?} crawl, seed {}) and one hub and one leaf update",
        args.shape, args.seed
    );
    println!("#   guests {}, bindings of {}", args.guests.display(), args.config.display());
    println!("#   load average before: {}", load_average());
    println!(
        "#   redb durability {durability}, 2 scanner threads, {} observer workers, {LOAD_BATCH} pages per load transaction, gc {}",
        config.observer_workers,
        gc_every.map_or("off".to_owned(), |d| format!("every {d:?}"))
    );

    // The load, with the pipeline running, to the fixed point.
    let scanner = store.start_scanner(ScannerConfig {
        threads: config.scanner_threads,
        workers: config.observer_workers,
        ..ScannerConfig::default()
    });
    // Old versions collected as the load goes, as the host does (`[store] gc_interval_s` of the
    // configuration, or `--gc-every`).
    let gc = gc_every.map(|every| store.start_gc(every));
    let before = store.metrics();
    let cpu_before = procfs::cpu_seconds("self").map(|(own, _)| own);
    let by_thread_before = procfs::thread_cpu_by_name();
    let written_before = procfs::thread_written_by_name();
    let thread_cpu = || procfs::cpu_seconds("thread-self").map(|(own, _)| own);
    let loader_before = thread_cpu();
    let start = Instant::now();
    let looking = AtomicBool::new(true);
    let (loaded, loader_loaded, elapsed, cpu, looks, by_thread, written) = std::thread::scope(|scope| -> Res<_> {
        let sampler = args.space_every.map(|every| {
            let (redb, looking) = (&redb, &looking);
            scope.spawn(move || {
                let mut looks = Vec::new();
                while looking.load(Ordering::Relaxed) {
                    std::thread::sleep(every);
                    if let Ok(space) = redb.space() {
                        looks.push(space);
                    }
                }
                looks
            })
        });
        let list: Vec<_> = inputs.iter().collect();
        for chunk in list.chunks(LOAD_BATCH) {
            store.run(|t| {
                for (url, (html, pagerank)) in chunk {
                    if let Some(h) = html {
                        t.set(schema::PAGES, url.as_str(), schema::RAW_HTML, h.as_slice())?;
                    }
                    if let Some(p) = pagerank {
                        t.set(schema::PAGES, url.as_str(), schema::RAW_PAGERANK, p.as_slice())?;
                    }
                }
                Ok(())
            })?;
        }
        let loaded = start.elapsed();
        let loader_loaded = thread_cpu();
        let elapsed = wait_fixed_point(&store, start, Duration::from_secs(3 * 3600))?;
        // Everything written into redb, in the CPU counted: the rounds since the last
        // checkpoint would otherwise be checkpointed after the count, up to a checkpoint
        // interval of them (5 s at durability fsync).
        redb.checkpoint()?;
        let cpu = procfs::cpu_seconds("self").map(|(own, _)| own).zip(cpu_before).map(|(a, b)| a - b);
        let by_thread = procfs::thread_cpu_by_name();
        let written = procfs::thread_written_by_name();
        looking.store(false, Ordering::Relaxed);
        let looks = match sampler {
            Some(s) => s.join().map_err(|_| "the space sampler panicked")?,
            None => Vec::new(),
        };
        Ok((loaded, loader_loaded, elapsed, cpu, looks, by_thread, written))
    })?;
    // The loading thread: its transactions, then polling for the fixed point.
    let loader_cpu = loader_loaded.zip(loader_before).map(|(a, b)| a - b);
    let main_cpu = thread_cpu().zip(loader_before).map(|(a, b)| a - b);
    let after = store.metrics();
    let bytes = counting.hook().bytes.load(Ordering::Relaxed);
    let runs = after.observer_runs - before.observer_runs;
    // No GC during the single-page updates below: their bytes written would count its
    // deletions. (The load's bytes written include those of the passes during the load.)
    drop(gc);
    let file = std::fs::metadata(&config.store_path)?.len();
    // What of the file redb uses (the file grows in large steps and never shrinks while open),
    // before a compaction when quiet can change it.
    let at_fixed_point = redb.space()?;
    // With `--compact-when-quiet`: from the fixed point on, the compactions counted and a probe
    // reading (the store may compact while the figures below are taken).
    let compactions_at_fixed_point = redb.stats().compactions;
    let fixed_at = Instant::now();
    let (stop_probe, longest) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
    let probe = args.compact_when_quiet.filter(|d| !d.is_zero()).map(|_| {
        let (store, stop, longest, pause) = (store.clone(), stop_probe.clone(), longest.clone(), args.probe_every);
        // The pages' documents, all over the table (a query's candidates are).
        let urls: Vec<String> = crawl.pages.iter().map(|p| p.url.clone()).collect();
        std::thread::spawn(move || -> StoreResult<(u64, Vec<u32>)> {
            let mut reads = 0u64;
            // Reads by 100 ms from the start: the rate's dip while the store compacts.
            let (began, mut by_tenth) = (Instant::now(), Vec::<u32>::new());
            while !stop.load(Ordering::Relaxed) {
                let url = &urls[(reads as usize).wrapping_mul(7919) % urls.len()];
                let start = Instant::now();
                store.begin()?.get(schema::PAGES, url.as_bytes(), schema::DOC_TEXT)?;
                longest.fetch_max(start.elapsed().as_micros() as u64, Ordering::Relaxed);
                reads += 1;
                let tenth = (began.elapsed().as_millis() / 100) as usize;
                if by_tenth.len() <= tenth {
                    by_tenth.resize(tenth + 1, 0);
                }
                by_tenth[tenth] += 1;
                // By default 20 reads a second, as a dashboard might.
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            // The last tenth is cut short.
            by_tenth.pop();
            Ok((reads, by_tenth))
        })
    });
    let figure = |name: &str, value: String| println!("webindex_load_{name} {value}");
    figure("pages", pages.to_string());
    figure("input_bytes", input_bytes.to_string());
    figure("load_s", format!("{:.2}", loaded.as_secs_f64()));
    figure("fixed_point_s", format!("{:.2}", elapsed.as_secs_f64()));
    figure("pages_per_s", format!("{:.1}", pages as f64 / elapsed.as_secs_f64()));
    if let Some(cpu) = cpu {
        // The whole process (loader, scanners, observers, GC): how much of the machine it used.
        figure("cpu_s", format!("{cpu:.2}"));
        figure("cores", format!("{:.2}", cpu / elapsed.as_secs_f64()));
    }
    if let (Some(cpu), Some(loader), Some(main)) = (cpu, loader_cpu, main_cpu) {
        figure("loader_cpu_s", format!("{loader:.2}"));
        figure("poll_cpu_s", format!("{:.2}", main - loader));
        figure("pipeline_cpu_s", format!("{:.2}", cpu - main));
    }
    // By thread, from the first load to the fixed point (thread names are cut to 15 bytes:
    // `percolator-obse` are the observer workers).
    let mut roles: BTreeMap<&str, f64> = BTreeMap::new();
    for (name, cpu) in &by_thread {
        let cpu = cpu - by_thread_before.get(name).copied().unwrap_or(0.0);
        *roles.entry(thread_role(name)).or_default() += cpu;
    }
    for (role, cpu) in &roles {
        figure(&format!("thread_cpu_s{{{role}}}"), format!("{cpu:.2}"));
    }
    // What the same threads wrote, in MB: the redo log's appends, by whichever thread leads a
    // round (observer workers, the loader, GC's commits); redb's pages, by the checkpointer.
    let mut roles: BTreeMap<&str, u64> = BTreeMap::new();
    for (name, bytes) in &written {
        let bytes = bytes.saturating_sub(written_before.get(name).copied().unwrap_or(0));
        *roles.entry(thread_role(name)).or_default() += bytes;
    }
    for (role, bytes) in &roles {
        figure(&format!("thread_written_mb{{{role}}}"), format!("{:.1}", *bytes as f64 / 1e6));
    }
    // By binding: each observer's runs and their CPU (the guest, its reads and writes; its
    // commits are not in it), from a fresh store to the fixed point.
    let mut run_cpu: BTreeMap<String, f64> = BTreeMap::new();
    for b in &pipeline.status().bindings {
        figure(&format!("runs{{{}}}", b.name), b.counts.runs.to_string());
        figure(&format!("run_cpu_s{{{}}}", b.name), format!("{:.2}", b.counts.cpu_time.as_secs_f64()));
        run_cpu.insert(b.name.clone(), b.counts.cpu_time.as_secs_f64());
    }
    figure("observer_runs", runs.to_string());
    figure("observer_runs_per_page", format!("{:.2}", runs as f64 / pages as f64));
    figure("conflicts_per_page", format!("{:.2}", (after.conflicts - before.conflicts) as f64 / pages as f64));
    figure("commits", (after.commits - before.commits).to_string());
    // The backend's own commits (redb write transactions: group-commit rounds) and the row ops
    // they applied.
    let rounds = after.backend_commits - before.backend_commits;
    figure("backend_commits", rounds.to_string());
    figure(
        "backend_ops_per_commit",
        format!("{:.1}", (after.backend_ops - before.backend_ops) as f64 / rounds.max(1) as f64),
    );
    // Of the whole run: rounds made durable by the redo log's fdatasync, and checkpoints.
    let redb_stats = redb.stats();
    figure("backend_log_syncs", redb_stats.log_syncs.to_string());
    figure("backend_checkpoints", redb_stats.checkpoints.to_string());
    figure("backend_paced_syncs", redb_stats.paced_syncs.to_string());
    figure("bytes_written", bytes.to_string());
    // What the backend applied to the fixed point (GC's removals included): row mutations by
    // table, and their mutations (one B-tree insert or delete each) by table and kind.
    let tables = counting.hook().tables.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let per_page = |n: u64| format!("{:.1}", n as f64 / pages as f64);
    figure("mutations_per_page", per_page(tables.values().flat_map(|(_, k)| k).sum()));
    for (table, (rows, kinds)) in &tables {
        figure(&format!("row_mutations_per_page{{{table}}}"), per_page(*rows));
        for (name, n) in KINDS.iter().zip(kinds).filter(|(_, n)| **n > 0) {
            figure(&format!("mutations_per_page{{{table} {name}}}"), per_page(*n));
        }
    }
    figure("bytes_written_per_page", format!("{:.0}", bytes as f64 / pages as f64));
    figure("bytes_written_over_input", format!("{:.2}", bytes as f64 / input_bytes as f64));
    figure("store_file_bytes", file.to_string());
    figure("store_over_input", format!("{:.2}", file as f64 / input_bytes as f64));
    figure("store_allocated_bytes", at_fixed_point.allocated_bytes.to_string());
    figure("store_disk_bytes", at_fixed_point.disk_bytes.to_string());
    figure("store_stored_bytes", at_fixed_point.stored_bytes.to_string());
    if !looks.is_empty() {
        // During the load: the worst ratios of the file to what redb holds in it.
        let worst = |f: fn(&percolator_store::Space) -> u64| {
            looks.iter().map(|s| s.file_bytes as f64 / f(s).max(1) as f64).fold(0.0, f64::max)
        };
        figure("space_looks", looks.len().to_string());
        figure("load_max_file_over_allocated", format!("{:.2}", worst(|s| s.allocated_bytes)));
        figure("load_max_file_over_stored", format!("{:.2}", worst(|s| s.stored_bytes)));
        // The same for the blocks the file takes on disk (a growth step's unwritten tail
        // takes none).
        let worst_disk = |f: fn(&percolator_store::Space) -> u64| {
            looks.iter().map(|s| s.disk_bytes as f64 / f(s).max(1) as f64).fold(0.0, f64::max)
        };
        figure("load_max_disk_over_allocated", format!("{:.2}", worst_disk(|s| s.allocated_bytes)));
        figure("load_max_disk_over_stored", format!("{:.2}", worst_disk(|s| s.stored_bytes)));
        figure("load_max_allocated_bytes", looks.iter().map(|s| s.allocated_bytes).max().unwrap_or(0).to_string());
    }
    let mut quiet_file = None;
    // The host at rest: GC on as during the load, the store quiet: with `--compact-when-quiet`,
    // the file once the store compacted it, and the longest a reader waited meanwhile.
    if let (Some(quiet), Some(probe)) = (args.compact_when_quiet.filter(|d| !d.is_zero()), probe) {
        let gc = gc_every.map(|every| store.start_gc(every));
        let (started, compactions) = (fixed_at, compactions_at_fixed_point);
        let deadline = started + quiet + Duration::from_secs(120);
        while redb.stats().compactions == compactions && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop_probe.store(true, Ordering::Relaxed);
        let (probe_reads, mut by_tenth) = probe.join().map_err(|_| "the read probe panicked")??;
        let probed_for = started.elapsed();
        drop(gc);
        let file = std::fs::metadata(&config.store_path)?.len();
        figure("quiet_compactions", (redb.stats().compactions - compactions).to_string());
        figure("quiet_compactions_given_up", redb.stats().compactions_given_up.to_string());
        figure("quiet_compaction_after_s", format!("{:.1}", started.elapsed().as_secs_f64()));
        figure("quiet_longest_read_ms", format!("{:.1}", longest.load(Ordering::Relaxed) as f64 / 1e3));
        figure("quiet_reads_per_s", format!("{:.0}", probe_reads as f64 / probed_for.as_secs_f64()));
        // Without a pause: the reads a second of the median tenth of a second, and of the
        // slowest one (the copy's share of the disk and cores).
        if args.probe_every.is_zero() && !by_tenth.is_empty() {
            by_tenth.sort_unstable();
            figure("quiet_reads_per_s_median_tenth", (by_tenth[by_tenth.len() / 2] * 10).to_string());
            figure("quiet_reads_per_s_slowest_tenth", (by_tenth[0] * 10).to_string());
        }
        figure("quiet_file_bytes", file.to_string());
        figure("quiet_file_over_input", format!("{:.2}", file as f64 / input_bytes as f64));
        quiet_file = Some(file);
    }

    let inlinks = store
        .begin()?
        .scan(
            schema::INLINKS,
            format!("{hub} ").as_bytes(),
            Some(format!("{hub}!").as_bytes()),
            Some(&[schema::LINK_ANCHOR]),
            usize::MAX,
        )?
        .len();
    figure("hub_inlinks", inlinks.to_string());

    // One update of the hub and one of the leaf, each measured at its second version.
    let mut update = |url: &str, html: String| -> Res<(u64, u64, Duration)> {
        let (runs, bytes) = (store.metrics().observer_runs, counting.hook().bytes.load(Ordering::Relaxed));
        let start = Instant::now();
        store.run(|t| t.set(schema::PAGES, url, schema::RAW_HTML, html.as_bytes()))?;
        let took = wait_fixed_point(&store, start, Duration::from_secs(600))?;
        inputs.get_mut(url).ok_or("an update of a page not loaded")?.0 = Some(html.into_bytes());
        Ok((store.metrics().observer_runs - runs, counting.hook().bytes.load(Ordering::Relaxed) - bytes, took))
    };
    update(&hub, hub_html(1))?;
    update(&leaf, leaf_html(&hub, 1))?;
    for (name, (runs, bytes, took)) in
        [("hub", update(&hub, hub_html(2))?), ("leaf", update(&leaf, leaf_html(&hub, 2))?)]
    {
        figure(&format!("{name}_update_observer_runs"), runs.to_string());
        figure(&format!("{name}_update_bytes_written"), bytes.to_string());
        figure(&format!("{name}_update_ms"), format!("{:.1}", took.as_secs_f64() * 1e3));
    }
    // The hub moved to another canonical and back: a copy of it (same title and text) with a
    // PageRank above every page's becomes its cluster's canonical, then falls below it again;
    // each time all the hub's inlinks are forwarded elsewhere. The wall time of the forwarding
    // bindings' runs, from their run-time counters.
    let forwarding_run_time = || -> Duration {
        pipeline
            .status()
            .bindings
            .iter()
            .filter(|b| b.name.starts_with("link-forwarding"))
            .map(|b| b.counts.run_time)
            .sum()
    };
    let copy = "http://copy.example/".to_owned();
    let hub_now = inputs[&hub].0.clone().ok_or("the hub has no HTML")?;
    for (name, pagerank) in [("hub_move", "1000000"), ("hub_move_back", "0")] {
        let (runs, bytes, fwd) =
            (store.metrics().observer_runs, counting.hook().bytes.load(Ordering::Relaxed), forwarding_run_time());
        let start = Instant::now();
        store.run(|t| {
            t.set(schema::PAGES, copy.as_bytes(), schema::RAW_HTML, hub_now.clone())?;
            t.set(schema::PAGES, copy.as_bytes(), schema::RAW_PAGERANK, pagerank)
        })?;
        let took = wait_fixed_point(&store, start, Duration::from_secs(600))?;
        inputs.insert(copy.clone(), (Some(hub_now.clone()), Some(pagerank.as_bytes().to_vec())));
        figure(&format!("{name}_observer_runs"), (store.metrics().observer_runs - runs).to_string());
        figure(&format!("{name}_bytes_written"), (counting.hook().bytes.load(Ordering::Relaxed) - bytes).to_string());
        figure(&format!("{name}_ms"), format!("{:.1}", took.as_secs_f64() * 1e3));
        let fwd = forwarding_run_time().saturating_sub(fwd);
        figure(&format!("{name}_forwarding_run_ms"), format!("{:.2}", fwd.as_secs_f64() * 1e3));
    }
    scanner.stop();
    let m = store.metrics();
    figure("dead_letters", m.dead_letters.to_string());
    if m.dead_letters != 0 {
        return Err(format!("dead letters: {:?}", store.dead_letters()?).into());
    }
    // The batch computation over the same inputs, on this thread, with the pipeline stopped.
    let mut runs_s = Vec::new();
    let mut stages_s = vec![Vec::new(); batch::STAGES.len()];
    let mut expected = None;
    for _ in 0..BATCH_RUNS {
        let (tables, cpu, stages) = timed_batch(&inputs)?;
        runs_s.push(cpu);
        for (all, stage) in stages_s.iter_mut().zip(stages) {
            all.push(stage);
        }
        expected = Some(tables);
    }
    let mut expected = expected.expect("BATCH_RUNS > 0");
    let median = |runs: &mut Vec<f64>| {
        runs.sort_by(f64::total_cmp);
        runs[runs.len() / 2]
    };
    let batch_cpu = median(&mut runs_s);
    let batch_bytes: usize =
        expected.values().flat_map(|t| t.iter()).map(|((row, column), v)| row.len() + column.len() + v.len()).sum();
    figure("batch_cpu_s", format!("{batch_cpu:.2}"));
    println!("# batch runs (thread CPU s): {runs_s:.2?}");
    // Stage by stage, against the runs of the observers doing that stage's work (their CPU in
    // the guest and its reads and writes, not their commits): what the guests and the reads
    // cost beside the native computation.
    for (i, (stage, runs)) in batch::STAGES.iter().zip(&mut stages_s).enumerate() {
        let cpu = median(runs);
        let observers: f64 = run_cpu.iter().filter(|(name, _)| stage_of(name) == Some(i)).map(|(_, c)| c).sum();
        figure(&format!("batch_stage_cpu_s{{{stage}}}"), format!("{cpu:.3}"));
        figure(&format!("run_cpu_over_batch_stage{{{stage}}}"), format!("{:.1}", observers / cpu));
    }
    let mut fresh = batch_in_fresh_processes(&inputs, dir)?;
    fresh.sort_by(f64::total_cmp);
    let fresh_cpu = fresh[fresh.len() / 2];
    figure("batch_fresh_process_cpu_s", format!("{fresh_cpu:.2}"));
    println!("# batch runs, each in a process of its own (thread CPU s): {fresh:.2?}");
    if let (Some(cpu), Some(main)) = (cpu, main_cpu) {
        figure("cpu_over_batch", format!("{:.1}", cpu / batch_cpu));
        figure("pipeline_cpu_over_batch", format!("{:.1}", (cpu - main) / batch_cpu));
        figure("cpu_over_fresh_process_batch", format!("{:.1}", cpu / fresh_cpu));
    }
    figure("batch_table_bytes", batch_bytes.to_string());
    figure("store_over_batch_tables", format!("{:.2}", file as f64 / batch_bytes as f64));
    figure("allocated_over_batch_tables", format!("{:.2}", at_fixed_point.allocated_bytes as f64 / batch_bytes as f64));
    if let Some(file) = quiet_file {
        figure("quiet_file_over_batch_tables", format!("{:.2}", file as f64 / batch_bytes as f64));
    }
    println!("#   load average after: {}", load_average());
    if args.check {
        batch::normalize(&mut expected);
        let diff = batch::diff(&expected, &read_tables(&store)?, 20);
        if !diff.is_empty() {
            return Err(format!("the incremental result differs from batch:\n{}", diff.join("\n")).into());
        }
        figure("incremental_equals_batch", "1".to_owned());
    }

    // Space: every old version collected (nothing runs, so each cell keeps its newest version),
    // where the bytes are, then the closed file compacted.
    let gc = store.gc()?;
    store.flush_secondaries();
    figure("final_gc_versions_removed", gc.versions_removed.to_string());
    let space = Space::measure(counting.as_ref())?;
    for (column, c) in space.by_column.iter().rev().take(24) {
        println!(
            "# live {column}: {} cells, {} write records, {} locks, {} staged; keys {} B, values {} B stored ({} B as written)",
            c.cells, c.writes, c.locks, c.staged, c.key_bytes, c.value_bytes, c.raw_value_bytes
        );
    }
    let total = space.total();
    figure("live_cells", total.cells.to_string());
    figure("live_write_records", total.writes.to_string());
    figure("live_locks", total.locks.to_string());
    figure("live_notify_cells", space.notify_cells.to_string());
    figure("live_key_bytes", total.key_bytes.to_string());
    figure("live_value_bytes", total.value_bytes.to_string());
    figure("live_value_bytes_uncompressed", total.raw_value_bytes.to_string());
    figure("live_over_input", format!("{:.2}", (total.key_bytes + total.value_bytes) as f64 / input_bytes as f64));
    figure("value_compression_ratio", format!("{:.2}", total.raw_value_bytes as f64 / total.value_bytes.max(1) as f64));
    drop(pipeline);
    drop(store);
    drop(counting);
    drop(redb);
    let (before, after) = RedbBigtable::compact(&config.store_path)?;
    figure("store_file_bytes_before_compaction", before.to_string());
    figure("compacted_file_bytes", after.to_string());
    figure("compacted_over_input", format!("{:.2}", after as f64 / input_bytes as f64));
    figure("compacted_over_batch_tables", format!("{:.2}", after as f64 / batch_bytes as f64));
    Ok(())
}

/// What one column holds after the last GC pass (every table's, `table/column`).
#[derive(Default, Clone, Copy)]
struct ColumnSpace {
    cells: u64,
    writes: u64,
    locks: u64,
    staged: u64,
    /// Version keys (`enc(table) ‖ enc(row) ‖ enc(column) ‖ kind ‖ ts`) of every version.
    key_bytes: u64,
    /// Write records as stored (tag, start timestamp, the value in its stored form).
    value_bytes: u64,
    /// The same with each value as the transaction wrote it (uncompressed).
    raw_value_bytes: u64,
}

/// Where a store's bytes are.
struct Space {
    /// By column, ascending by bytes (keys and values).
    by_column: Vec<(String, ColumnSpace)>,
    notify_cells: u64,
}

impl Space {
    fn measure(backend: &dyn Bigtable) -> StoreResult<Space> {
        let mut by: BTreeMap<String, ColumnSpace> = BTreeMap::new();
        let mut from: Option<(String, Vec<u8>)> = None;
        loop {
            let page = backend.scan_versions(from.as_ref().map(|(t, r)| (t.as_str(), r.as_slice())), 256)?;
            for row in &page {
                for cell in &row.cells {
                    let c = by.entry(format!("{}/{}", row.table, cell.column)).or_default();
                    let versions = (cell.writes.len() + cell.locks.len() + cell.data.len()) as u64;
                    let key = (row.table.len() + row.row.len() + cell.column.len() + 6 + 9) as u64;
                    c.cells += 1;
                    c.writes += cell.writes.len() as u64;
                    c.locks += cell.locks.len() as u64;
                    c.staged += cell.data.len() as u64;
                    c.key_bytes += versions * key;
                    for (_, w) in &cell.writes {
                        let (stored, raw) = match &w.kind {
                            // A fresh store: every value is in the stored form but the format
                            // marker's.
                            WriteKind::Put(v) => (v.len(), decode_value(v).map_or(v.len(), |d| d.len())),
                            _ => (0, 0),
                        };
                        c.value_bytes += 9 + stored as u64;
                        c.raw_value_bytes += 9 + raw as u64;
                    }
                }
            }
            if page.len() < 256 {
                break;
            }
            let last = page.last().expect("a full page");
            let mut next = last.row.clone();
            next.push(0);
            from = Some((last.table.clone(), next));
        }
        let mut notify_cells = 0;
        let mut pos: Option<Vec<u8>> = None;
        loop {
            let page = backend.scan_notify(pos.as_deref(), 1024)?;
            notify_cells += page.len() as u64;
            match page.last() {
                Some(last) if page.len() == 1024 => {
                    let mut next = notify_position(&last.cell);
                    next.push(0);
                    pos = Some(next);
                }
                _ => break,
            }
        }
        let mut by_column: Vec<_> = by.into_iter().collect();
        by_column.sort_by_key(|(_, c)| c.key_bytes + c.value_bytes);
        Ok(Space { by_column, notify_cells })
    }

    fn total(&self) -> ColumnSpace {
        self.by_column.iter().fold(ColumnSpace::default(), |a, (_, c)| ColumnSpace {
            cells: a.cells + c.cells,
            writes: a.writes + c.writes,
            locks: a.locks + c.locks,
            staged: a.staged + c.staged,
            key_bytes: a.key_bytes + c.key_bytes,
            value_bytes: a.value_bytes + c.value_bytes,
            raw_value_bytes: a.raw_value_bytes + c.raw_value_bytes,
        })
    }
}

/// Polls until the store is quiescent; returns the time since `start`.
fn wait_fixed_point(store: &Store, start: Instant, timeout: Duration) -> Res<Duration> {
    loop {
        if store.wait_quiescent(Duration::ZERO)? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(format!("the pipeline did not reach its fixed point within {timeout:?}").into());
        }
        // Every 2 ms for a short wait (an update's), up to every 20 ms for a long one (a load's):
        // the fixed point's time within 0.5 %, and the poll's CPU, counted in `cpu_s`, small.
        std::thread::sleep((start.elapsed() / 200).clamp(Duration::from_millis(2), Duration::from_millis(20)));
    }
}
