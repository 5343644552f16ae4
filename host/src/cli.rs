//! The command line: clap definitions, the choice of route (a running host's HTTP API or the
//! store file), and how each answer is printed.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use percolator_store::{Durability, RedbConfig, Store, StoreConfig};
use sha2::{Digest, Sha256};

use crate::api::*;
use crate::client::{Api, Direct, Remote};
use crate::config::{Config, DEFAULT_LISTEN, HttpConfig};
use crate::load::{self, Format};
use crate::ops::{self, ErrorKind, plural};
use crate::serve;

/// Test hook, read by debug builds only: `load` stops after this many batches, as if it were
/// interrupted (the integration tests run the debug binary).
const STOP_AFTER_ENV: &str = "PERCOLATOR_LOAD_STOP_AFTER";

#[cfg(debug_assertions)]
fn stop_after() -> Option<u64> {
    std::env::var(STOP_AFTER_ENV).ok().and_then(|v| v.parse().ok())
}

#[cfg(not(debug_assertions))]
fn stop_after() -> Option<u64> {
    None
}

/// `percolator`: Percolator (OSDI 2010) with WebAssembly observers.
///
/// `up` serves a pipeline: the store, the observers, the scanner, hot reload and a local HTTP
/// API. The other commands talk to that API when a host serves the configuration's store
/// (its URL is in the endpoint file next to the store), and open the store file directly
/// when none does.
#[derive(Debug, Parser)]
#[command(name = "percolator", version, max_term_width = 100)]
pub struct Cli {
    /// The pipeline configuration (TOML).
    #[arg(
        long,
        global = true,
        env = "PERCOLATOR_CONFIG",
        default_value = "config/web-index.toml",
        help_heading = "Global options"
    )]
    pub config: PathBuf,
    /// Talk to the host at this base URL (e.g. http://127.0.0.1:7878) instead of finding it
    /// through the configuration.
    #[arg(long, global = true, value_name = "URL", help_heading = "Global options")]
    pub url: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the pipeline: store, observers, scanner, hot reload and the HTTP API (until
    /// SIGINT or SIGTERM).
    Up {
        /// The configuration (default: --config).
        config: Option<PathBuf>,
    },
    /// Print one cell's value.
    Get {
        /// Table.
        table: String,
        /// Row key.
        row: String,
        /// Column (family:qualifier).
        column: String,
        /// Print the value as hex.
        #[arg(long)]
        hex: bool,
    },
    /// Print cells of a table, one `row<TAB>column<TAB>value` line each (control characters
    /// escaped).
    Scan(ScanArgs),
    /// Load a JSONL or CSV file into a table (checked whole first; resumable; idempotent).
    Load(LoadArgs),
    /// The pipeline's state: bindings, runs, failures, backlog, throughput, dead letters.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List dead letters (notifications whose observer kept failing), or retry them.
    DeadLetters {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// `retry`.
        #[command(subcommand)]
        action: Option<DeadLetterAction>,
    },
    /// Search the web index: pages with every term of the words, best first.
    Query {
        /// The words.
        #[arg(required = true)]
        words: Vec<String>,
        /// At most this many results.
        #[arg(long, default_value_t = 10, value_parser = at_least_one)]
        limit: u64,
    },
    /// Notify a column's observers of the rows that already have a value (a binding added
    /// later is notified only of new writes; this runs it on the old data too).
    Notify {
        /// Table.
        table: String,
        /// The observed column.
        column: String,
        /// Which rows.
        #[command(flatten)]
        rows: RowRange,
    },
    /// Remove versions no reader can see.
    Gc,
    /// Wait until the pipeline is quiescent (no pending notification, no run going);
    /// exit status 1 on timeout.
    Wait {
        /// Give up after this many seconds (at most 3600).
        #[arg(long, default_value_t = 60.0, value_parser = wait_seconds)]
        timeout: f64,
    },
    /// Write a generated sample crawl: DIR/crawl.jsonl (first crawl) and DIR/recrawl.jsonl
    /// (re-crawls), fields url, html, pagerank.
    SampleCrawl {
        /// Output folder (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Pages in the first crawl (at most 1000000).
        #[arg(long, default_value_t = 300, value_parser = crawl_pages)]
        pages: u64,
        /// Random seed (same seed, same crawl).
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// Rows `[--start, --end)` starting with `--prefix` (`scan`, `notify`).
#[derive(Debug, Args)]
pub struct RowRange {
    /// First row (inclusive).
    #[arg(long)]
    pub start: Option<String>,
    /// Last row (exclusive).
    #[arg(long)]
    pub end: Option<String>,
    /// Only rows starting with this.
    #[arg(long)]
    pub prefix: Option<String>,
}

/// `scan` options.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Table.
    pub table: String,
    /// Which rows.
    #[command(flatten)]
    pub rows: RowRange,
    /// Only these columns (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub columns: Option<Vec<String>>,
    /// At most this many cells (up to 100000).
    #[arg(long, default_value_t = 100, value_parser = scan_limit)]
    pub limit: u64,
}

/// `load` options.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// Target table.
    pub table: String,
    /// The file: JSONL (one JSON object per line) or CSV (a header row naming the fields).
    pub file: PathBuf,
    /// The field holding the row key (a non-empty string or an integer).
    #[arg(long, default_value = "row")]
    pub key: String,
    /// File format (default: from the extension: .jsonl/.ndjson/.json or .csv).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Column family of fields without one: field `f` becomes column `FAMILY:f`.
    #[arg(long, default_value = "raw")]
    pub family: String,
    /// Fields (comma-separated) whose values are base64 text of the bytes to store, e.g. HTML
    /// in any encoding (JSON and CSV carry only UTF-8 text).
    #[arg(long, value_delimiter = ',', value_name = "FIELDS")]
    pub base64: Vec<String>,
    /// Records per transaction, at most 100000 (fewer when they would make more than 8 MiB of
    /// JSON).
    #[arg(long, default_value_t = 200, value_parser = batch_size)]
    pub batch: u64,
    /// Load the file again even though it was loaded completely before.
    #[arg(long)]
    pub again: bool,
}

/// `--format`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// `dead-letters` actions.
#[derive(Debug, Subcommand)]
pub enum DeadLetterAction {
    /// Move dead letters back to pending: their observers run again.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all"])))]
    Retry {
        /// The dead letter's id (from `percolator dead-letters`).
        id: Option<String>,
        /// Retry every dead letter.
        #[arg(long)]
        all: bool,
    },
}

/// The most records per `load` batch (`--batch`).
pub const MAX_BATCH_RECORDS: u64 = 100_000;

/// A whole number from `min` to `max` (an option's value; clap reports a refusal as a usage
/// error, exit status 2).
fn whole_number(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let n: u64 = s.trim().parse().map_err(|_| format!("{s:?} is not a whole number"))?;
    match (n < min, n > max) {
        (false, false) => Ok(n),
        _ if max == u64::MAX => Err(format!("must be at least {min}")),
        _ => Err(format!("must be from {min} to {max}")),
    }
}

fn at_least_one(s: &str) -> Result<u64, String> {
    whole_number(s, 1, u64::MAX)
}

fn scan_limit(s: &str) -> Result<u64, String> {
    whole_number(s, 1, MAX_SCAN_LIMIT as u64).map_err(|e| format!("{e} (scan again from the last row to read more)"))
}

/// `sample-crawl --pages`: the crawl is built in memory (about 2 KiB a page, re-crawls included).
fn crawl_pages(s: &str) -> Result<u64, String> {
    whole_number(s, 1, 1_000_000)
}

fn batch_size(s: &str) -> Result<u64, String> {
    whole_number(s, 1, MAX_BATCH_RECORDS)
}

/// `wait --timeout`: seconds, from 0 to [`MAX_WAIT_SECS`].
fn wait_seconds(s: &str) -> Result<f64, String> {
    let t: f64 = s.trim().parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !t.is_finite() || t < 0.0 {
        return Err(format!("{s:?} is not a number of seconds"));
    }
    if t > MAX_WAIT_SECS as f64 {
        return Err(format!("must be at most {MAX_WAIT_SECS} seconds"));
    }
    Ok(t)
}

/// Runs the command line. `Err` is a message for people (printed once by `main`).
pub fn run(cli: Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Up { config } => {
            let config = config.as_deref().unwrap_or(&cli.config);
            serve::up(config, serve::signals())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::SampleCrawl { out, pages, seed } => sample_crawl(out, *pages, *seed),
        Command::Load(args) => {
            // Read and check the file before touching any store.
            let input = read_load_input(args)?;
            let api = connect(&cli, true)?;
            println!("{}", load_file(api.as_ref(), args, input)?);
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let api = connect(&cli, false)?;
            verb(api.as_ref(), command)
        }
    }
}

fn verb(api: &dyn Api, command: &Command) -> Result<ExitCode, String> {
    let out = std::io::stdout();
    let mut out = out.lock();
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    match command {
        Command::Get { table, row, column, hex } => {
            let v = api.get(&GetRequest { table: table.clone(), row: row.clone(), column: column.clone() })?;
            w(writeln!(out, "{}", if *hex { &v.value_hex } else { &v.value }))?;
        }
        Command::Scan(a) => {
            let r = api.scan(&ScanRequest {
                table: a.table.clone(),
                start: a.rows.start.clone(),
                end: a.rows.end.clone(),
                prefix: a.rows.prefix.clone(),
                columns: a.columns.clone(),
                limit: usize::try_from(a.limit).unwrap_or(usize::MAX),
            })?;
            for c in &r.cells {
                w(writeln!(out, "{}\t{}\t{}", escape(&c.row), escape(&c.column), escape(&c.value)))?;
            }
            if r.truncated {
                eprintln!("percolator: more cells follow (stopped at --limit {})", a.limit);
            }
        }
        Command::Status { json } => {
            let s = api.status()?;
            if *json {
                w(writeln!(out, "{}", serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?))?;
            } else {
                w(out.write_all(render_status(&s).as_bytes()))?;
            }
        }
        Command::DeadLetters { json, action: None } => {
            let list = api.dead_letters()?;
            if *json {
                w(writeln!(out, "{}", serde_json::to_string_pretty(&list).map_err(|e| e.to_string())?))?;
            } else {
                for d in &list {
                    w(writeln!(
                        out,
                        "{}\t{}\t{}\tattempts={}\t{}\t{}",
                        d.id,
                        escape(&d.cell),
                        d.observer,
                        d.attempts,
                        escape(&d.error),
                        d.time
                    ))?;
                }
            }
        }
        Command::DeadLetters { json, action: Some(DeadLetterAction::Retry { id, all }) } => {
            let r = api.retry(&RetryRequest { id: id.clone(), all: *all })?;
            if *json {
                w(writeln!(out, "{}", serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?))?;
            } else {
                match (r.retried.len(), id) {
                    (_, Some(id)) => w(writeln!(out, "retried {id}"))?,
                    (n, None) => w(writeln!(out, "retried {}", plural(n, "dead letter", "dead letters")))?,
                }
            }
        }
        Command::Query { words, limit } => {
            let r = api.query(&QueryRequest { words: words.clone(), limit: usize::try_from(*limit).unwrap_or(10) })?;
            for h in &r.hits {
                let title = h.title.as_deref().map(escape).unwrap_or_default();
                w(writeln!(out, "{}\t{}\t{}\t{title}", h.rank, h.url, h.score))?;
            }
            if r.hits.is_empty() {
                eprintln!("percolator: no page has every term ({})", r.terms.join(", "));
            }
        }
        Command::Notify { table, column, rows } => {
            let r = api.notify(&NotifyRequest {
                table: table.clone(),
                column: column.clone(),
                start: rows.start.clone(),
                end: rows.end.clone(),
                prefix: rows.prefix.clone(),
            })?;
            w(writeln!(out, "notified {} of {table}/{column}", plural(r.notified, "row", "rows")))?;
        }
        Command::Gc => {
            let s = api.gc()?;
            w(writeln!(
                out,
                "safepoint {} rows {} locks_resolved {} versions_removed {}{}",
                s.safepoint,
                s.rows,
                s.locks_resolved,
                s.versions_removed,
                if s.deferred { " (deferred: a live transaction holds a lock below the safepoint)" } else { "" }
            ))?;
        }
        Command::Wait { timeout } => {
            if !api.wait(&WaitRequest { timeout_secs: *timeout })?.quiescent {
                eprintln!("percolator: the pipeline did not become quiescent within {timeout} s");
                return Ok(ExitCode::FAILURE);
            }
            // Quiescent, but not everything was processed: say so (the exit status stays 0).
            let dead = api.dead_letters()?.len();
            if dead > 0 {
                eprintln!(
                    "percolator: quiescent, with {} (percolator dead-letters)",
                    ops::plural(dead, "dead letter", "dead letters")
                );
            }
        }
        Command::Up { .. } | Command::Load(_) | Command::SampleCrawl { .. } => unreachable!("handled by run"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Escapes control characters and backslashes so that one value stays on one line.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// What the verbs other than `up` need of the configuration: where the store is and how to
/// reach the host serving it. Taken from the configuration when it loads; else from a lenient
/// reading of `[store]` and `[http]` alone, so that the commands keep working while a bad
/// edit (which a running host refuses to reload) is being fixed.
struct Target {
    /// The configuration file.
    file: PathBuf,
    store_path: PathBuf,
    durability: Durability,
    http: HttpConfig,
    /// The configuration, or why it does not load.
    config: Result<Config, String>,
}

impl Target {
    fn find(file: &Path) -> Result<Target, String> {
        match Config::load(file) {
            Ok(c) => Ok(Target {
                file: c.file.clone(),
                store_path: c.store_path.clone(),
                durability: c.durability,
                http: c.http.clone(),
                config: Ok(c),
            }),
            Err(e) => {
                let e = e.to_string();
                match lenient(file) {
                    Some((store_path, durability, http)) => {
                        tracing::debug!("{e}; using [store] and [http] of the configuration only");
                        Ok(Target { file: file.to_owned(), store_path, durability, http, config: Err(e) })
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// The file a running host writes its base URL to (see [`Config::endpoint_file`]).
    fn endpoint_file(&self) -> PathBuf {
        let mut name = self.store_path.as_os_str().to_owned();
        name.push(".endpoint");
        PathBuf::from(name)
    }

    /// `message`, followed by the configuration's problem if it has one.
    fn explain(&self, message: String) -> String {
        match &self.config {
            Ok(_) => message,
            Err(e) => format!("{message}\n(and the configuration does not load: {e})"),
        }
    }
}

/// `[store] path` and `durability` and `[http] token_file` of the configuration `file`, read
/// without checking anything else (`None` if it is not TOML or has no store path). Relative
/// paths are relative to the file's folder, as in [`Config::load`].
fn lenient(file: &Path) -> Option<(PathBuf, Durability, HttpConfig)> {
    let src = std::fs::read_to_string(file).ok()?;
    let doc: toml::Table = toml::from_str(&src).ok()?;
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let rel = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };
    let store = doc.get("store")?.as_table()?;
    let path = store.get("path")?.as_str().filter(|p| !p.is_empty())?;
    let durability = match store.get("durability").and_then(toml::Value::as_str) {
        Some("none") => Durability::None,
        _ => Durability::Fsync,
    };
    let token_file = doc
        .get("http")
        .and_then(toml::Value::as_table)
        .and_then(|h| h.get("token_file"))
        .and_then(toml::Value::as_str)
        .map(rel);
    Some((rel(path), durability, HttpConfig { listen: DEFAULT_LISTEN, token_file }))
}

/// The token for `--url`: PERCOLATOR_TOKEN, else the configuration's token file if the
/// configuration can be read.
fn url_token(cli: &Cli) -> Result<Option<String>, String> {
    match Target::find(&cli.config) {
        Ok(target) => target.http.token(),
        Err(e) => {
            tracing::debug!("no token from the configuration: {e}");
            HttpConfig::default().token()
        }
    }
}

/// Picks the route: `--url`; else the host named by the endpoint file if it answers; else the
/// store file (created only when `creates`).
fn connect(cli: &Cli, creates: bool) -> Result<Box<dyn Api>, String> {
    if let Some(url) = &cli.url {
        let remote = Remote::new(url, url_token(cli)?);
        remote.health()?;
        return Ok(Box::new(remote));
    }
    let target = Target::find(&cli.config)?;
    let endpoint = target.endpoint_file();
    let mut answered_at = None;
    if let Ok(text) = std::fs::read_to_string(&endpoint) {
        let url = text.trim();
        let remote = Remote::new(url, target.http.token().map_err(|e| target.explain(e))?);
        match remote.health() {
            // A host answers: it must be the one serving this store (not another host that
            // took the port of a host that died without removing its endpoint file).
            Ok(h) if same_file(Path::new(&h.store), &target.store_path) => return Ok(Box::new(remote)),
            Ok(h) => {
                tracing::debug!("the host at {url} serves {}, not this store; using the store file", h.store);
                answered_at = Some(format!("{url} (from {}; a host there serves {})", endpoint.display(), h.store));
            }
            Err(e) if e.kind == ErrorKind::Unavailable => {
                tracing::debug!("{e}; using the store file");
                answered_at = Some(format!("{url} (from {})", endpoint.display()));
            }
            Err(e) => return Err(target.explain(e.message)),
        }
    }
    let nobody = answered_at.unwrap_or_else(|| format!("{} (no such file)", endpoint.display()));
    let path = &target.store_path;
    if !creates && !path.exists() {
        return Err(target.explain(format!(
            "store {} does not exist and no host answers at {nobody}; start one with `percolator up {}`",
            path.display(),
            target.file.display()
        )));
    }
    let store = Store::open(
        path,
        StoreConfig::default(),
        RedbConfig { durability: target.durability, ..RedbConfig::default() },
    )
    .map_err(|e| {
        target.explain(if serve::store_is_locked(&e) {
            format!("store {} is in use by another process and no host answers at {nobody}", path.display())
        } else {
            format!("{}: {e}", path.display())
        })
    })?;
    match &target.config {
        Ok(config) => Ok(Box::new(Direct::open(config, store)?)),
        Err(e) => Ok(Box::new(Direct::without_bindings(store, path.clone(), e.clone()))),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

struct LoadInput {
    name: String,
    parsed: load::Parsed,
    id: String,
    options: String,
}

fn read_load_input(a: &LoadArgs) -> Result<LoadInput, String> {
    let name = a.file.display().to_string();
    let meta = std::fs::metadata(&a.file).map_err(|e| format!("{name}: cannot read: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{name} is a directory; give the JSONL or CSV file to load"));
    }
    let format = match a.format {
        Some(FormatArg::Jsonl) => Format::Jsonl,
        Some(FormatArg::Csv) => Format::Csv,
        None => Format::from_path(&a.file).ok_or_else(|| {
            format!("{name}: cannot tell the format from the file name; pass --format jsonl or --format csv")
        })?,
    };
    let bytes = std::fs::read(&a.file).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let opts = load::Options {
        format,
        key: a.key.clone(),
        family: a.family.clone(),
        base64: a.base64.iter().cloned().collect(),
    };
    let parsed = load::parse(&name, &bytes, &a.table, &opts).map_err(|p| format!("{p}\nnothing was loaded"))?;
    let mut h = Sha256::new();
    h.update(a.table.as_bytes());
    h.update(b"\n");
    h.update(&bytes);
    let id = ops::hex(&h.finalize()[..16]);
    Ok(LoadInput { name, parsed, id, options: opts.describe() })
}

/// Loads the records of `input` in batches (at most `--batch` records and
/// [`load::MAX_BATCH_BYTES`] of JSON each) and says what was done.
fn load_file(api: &dyn Api, a: &LoadArgs, input: LoadInput) -> Result<String, String> {
    let LoadInput { name, parsed, id, options } = input;
    let total = parsed.records.len() as u64;
    if total == 0 {
        return Ok(format!("nothing to load: {name} has no records"));
    }
    let file = std::fs::canonicalize(&a.file).map(|p| p.display().to_string()).unwrap_or_else(|_| name.clone());
    let plan = api.load_begin(&LoadBegin {
        table: a.table.clone(),
        id,
        file: file.clone(),
        total,
        options: options.clone(),
        again: a.again,
        columns: parsed.columns.clone(),
    })?;
    match plan.state {
        LoadState::Done => {
            return Ok(format!(
                "{name}: already loaded ({}); use --again to load it again",
                plural(plan.total, "record", "records")
            ));
        }
        LoadState::Resume => eprintln!("{name}: resuming at record {} of {}", plan.start, plan.total),
        LoadState::New => {}
    }
    let stop_after = stop_after();
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(total);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} records ({elapsed}, about {eta} left)",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(format!("loading {}", a.table));
        bar.set_position(plan.start);
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let started = Instant::now();
    let mut done = plan.start;
    let mut batches = 0u64;
    let mut written = 0u64;
    while done < total {
        let end = batch_end(&parsed.sizes, done as usize, a.batch) as u64;
        let batch = LoadBatch {
            table: a.table.clone(),
            id: plan.id.clone(),
            file: file.clone(),
            options: options.clone(),
            start: done,
            total,
            records: parsed.records[done as usize..end as usize].to_vec(),
        };
        let progress = api.load_batch(&batch).map_err(|e| {
            bar.abandon();
            format!("{e}\n{}; run the same command again to resume", loaded_so_far(done, total, &name))
        })?;
        done = progress.done.max(end);
        written += progress.written;
        bar.set_position(done);
        batches += 1;
        if stop_after == Some(batches) && done < total {
            bar.abandon();
            return Err(format!(
                "stopped after {} ({STOP_AFTER_ENV}); {}",
                plural(batches, "batch", "batches"),
                loaded_so_far(done, total, &name)
            ));
        }
    }
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    let mut out = format!("loaded {} into {} in {secs:.1} s", plural(written, "record", "records"), a.table);
    let by_others = (total - plan.start).saturating_sub(written);
    if by_others > 0 {
        let were = if by_others == 1 { "was" } else { "were" };
        out.push_str(&format!(" ({by_others} more {were} written meanwhile by another run of this load)"));
    }
    Ok(out)
}

/// `loaded so far: 4 of 7 records of f.jsonl`.
fn loaded_so_far(done: u64, total: u64, name: &str) -> String {
    format!("loaded so far: {done} of {} of {name}", plural(total, "record", "records"))
}

/// The end of the batch starting at record `start`: at most `max_records` records, and no more
/// than [`load::MAX_BATCH_BYTES`] of JSON unless a single record is larger.
fn batch_end(sizes: &[usize], start: usize, max_records: u64) -> usize {
    let max_end = start.saturating_add(usize::try_from(max_records).unwrap_or(usize::MAX)).min(sizes.len());
    let mut end = start;
    let mut bytes = 0usize;
    while end < max_end && (end == start || bytes + sizes[end] <= load::MAX_BATCH_BYTES) {
        bytes += sizes[end];
        end += 1;
    }
    end
}

fn sample_crawl(out: &Path, pages: u64, seed: u64) -> Result<ExitCode, String> {
    let pages = usize::try_from(pages).map_err(|_| format!("--pages {pages} is too many for this machine"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: cannot create: {e}", out.display()))?;
    let crawl = webindex::crawl::generate(seed, pages);
    let write = |file: &str, list: &[webindex::crawl::CrawlPage]| -> Result<PathBuf, String> {
        let path = out.join(file);
        let mut text = String::new();
        for p in list {
            if !p.pagerank.is_finite() {
                return Err(format!("the generator made a non-finite PageRank for {}", p.url));
            }
            let line = serde_json::json!({"url": p.url, "html": p.html, "pagerank": p.pagerank});
            text.push_str(&line.to_string());
            text.push('\n');
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
        Ok(path)
    };
    let first = write("crawl.jsonl", &crawl.pages)?;
    let again = write("recrawl.jsonl", &crawl.recrawls)?;
    println!(
        "wrote {} to {} and {} to {}",
        plural(crawl.pages.len(), "page", "pages"),
        first.display(),
        plural(crawl.recrawls.len(), "re-crawl", "re-crawls"),
        again.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// Aligns columns (the last one is not padded).
fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..cols).map(|i| rows.iter().filter_map(|r| r.get(i)).map(|c| c.chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::from("  ");
        for (i, c) in r.iter().enumerate() {
            line.push_str(c);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn count(n: u64, capped: bool) -> String {
    if capped { format!("≥{n}") } else { n.to_string() }
}

/// `status` for people.
pub fn render_status(s: &StatusReport) -> String {
    let mut out = String::new();
    let st = &s.store;
    if let Some(e) = &s.config_error {
        out.push_str(&format!("configuration: does not load (loads are refused until it does): {}\n", escape(e)));
    }
    match &s.host {
        None => {
            out.push_str("host: none is running (the store file was read directly; start one with `percolator up`)\n");
            out.push_str(&format!(
                "store: {}: {}, {}\n",
                st.path,
                plural(
                    count(st.pending_notifications, st.pending_capped),
                    "pending notification",
                    "pending notifications"
                ),
                plural(st.dead_letters, "dead letter", "dead letters")
            ));
        }
        Some(h) => {
            out.push_str(&format!("host: {} (pid {}, started {})\n", h.url, h.pid, h.started_at));
            out.push_str(&format!(
                "pipeline: generation {}{}\n",
                h.generation,
                h.loaded_at.as_deref().map(|t| format!(", loaded {t}")).unwrap_or_default()
            ));
            out.push_str(&format!(
                "last reload error: {}\n",
                h.last_error.as_deref().map(escape).unwrap_or_else(|| "none".into())
            ));
            if h.bindings.is_empty() {
                out.push_str("bindings: none\n");
            } else {
                out.push_str("bindings:\n");
                let mut rows = vec![
                    ["NAME", "OBSERVES", "KIND", "WASM", "HASH", "LOADED", "RUNS", "FAILURES", "MEAN RUN", "BACKLOG"]
                        .map(String::from)
                        .to_vec(),
                ];
                for b in &h.bindings {
                    let wasm = Path::new(&b.wasm).file_name().map(|f| f.to_string_lossy().into_owned());
                    rows.push(vec![
                        b.name.clone(),
                        format!("{}/{}", b.table, b.column),
                        b.kind.clone(),
                        wasm.unwrap_or_else(|| b.wasm.clone()),
                        b.source_hash.chars().take(12).collect(),
                        b.loaded_at.clone(),
                        b.runs.to_string(),
                        b.failures.to_string(),
                        b.mean_run_ms.map(|m| format!("{m:.2} ms")).unwrap_or_else(|| "-".into()),
                        count(b.backlog, b.backlog_capped),
                    ]);
                }
                out.push_str(&table(&rows));
            }
            let t = &h.throughput;
            if t.window_secs < 0.5 {
                out.push_str("throughput: not measured yet (the host samples its counters every second)\n");
            } else {
                out.push_str(&format!(
                    "throughput (last {:.0} s): {:.1} observer runs/s, {:.1} commits/s, {:.1} conflicts/s\n",
                    t.window_secs, t.observer_runs_per_sec, t.commits_per_sec, t.conflicts_per_sec
                ));
            }
            out.push_str(&format!(
                "store: {}: {}, {}, {}, {}\n",
                st.path,
                plural(h.metrics.commits, "commit", "commits"),
                plural(h.metrics.conflicts, "conflict", "conflicts"),
                plural(
                    count(st.pending_notifications, st.pending_capped),
                    "pending notification",
                    "pending notifications"
                ),
                plural(st.dead_letters, "dead letter", "dead letters")
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_option_values_are_usage_errors_in_words() {
        let parse =
            |args: &[&str]| Cli::try_parse_from(std::iter::once("percolator").chain(args.iter().copied())).map(|_| ());
        let usage = |args: &[&str], says: &str| {
            let e = parse(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}");
            let text = e.to_string();
            assert!(text.contains(says), "{args:?}: {text}");
        };
        usage(&["query", "x", "--limit", "0"], "for '--limit <LIMIT>': must be at least 1");
        usage(&["query", "x", "--limit", "ten"], "\"ten\" is not a whole number");
        usage(&["sample-crawl", "--out", "d", "--pages", "0"], "for '--pages <PAGES>': must be from 1 to 1000000");
        usage(&["scan", "t", "--limit", "0"], "must be from 1 to 100000 (scan again from the last row");
        usage(&["scan", "t", "--limit", "100001"], "must be from 1 to 100000");
        usage(&["load", "t", "f.jsonl", "--batch", "0"], "must be from 1 to 100000");
        usage(&["wait", "--timeout", "1e19"], "must be at most 3600 seconds");
        usage(&["wait", "--timeout=-1"], "\"-1\" is not a number of seconds");
        usage(&["wait", "--timeout", "NaN"], "\"NaN\" is not a number of seconds");
        for ok in [
            &["query", "x", "--limit", "1"][..],
            &["scan", "t", "--limit", "100000"],
            &["load", "t", "f", "--batch", "100000"],
            &["wait", "--timeout", "3600"],
            &["wait", "--timeout", "0.5"],
        ] {
            parse(ok).unwrap();
        }
    }

    #[test]
    fn a_broken_configuration_still_names_the_store_and_the_token_file() {
        let dir = std::env::temp_dir().join(format!("percolator-lenient-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        let write = |text: &str| std::fs::write(&file, text).unwrap();
        // The observers folder is missing and a binding is wrong: the configuration does not load.
        write(
            "[store]\npath = \"s.redb\"\ndurability = \"none\"\n[observers]\ndir = \"nowhere\"\n\
             [http]\ntoken_file = \"tok\"\nlisten = \"127.0.0.1:0\"\n[[binding]]\nname = 1\n",
        );
        let t = Target::find(&file).unwrap();
        assert!(t.config.as_ref().is_err_and(|e| e.contains("p.toml")), "{:?}", t.config);
        assert_eq!((t.store_path.as_path(), t.durability), (dir.join("s.redb").as_path(), Durability::None));
        assert_eq!(t.http.token_file, Some(dir.join("tok")));
        assert_eq!(t.endpoint_file(), dir.join("s.redb.endpoint"));
        assert!(t.explain("x".into()).starts_with("x\n(and the configuration does not load: "));
        // Not TOML, or no store path: the configuration's own error.
        for text in ["[store\npath = \"s.redb\"\n", "[observers]\ndir = \"o\"\n", "[store]\npath = 3\n"] {
            write(text);
            let e = Target::find(&file).err().unwrap();
            assert_eq!(e, Config::load(&file).unwrap_err().to_string());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn status_says_when_the_configuration_does_not_load() {
        let s = StatusReport {
            host: None,
            store: StoreReport {
                path: "s.redb".into(),
                pending_notifications: 1,
                pending_capped: false,
                dead_letters: 0,
            },
            config_error: Some("p.toml:3: observers.dir: nowhere is not a directory".into()),
        };
        let text = render_status(&s);
        assert!(
            text.starts_with(
                "configuration: does not load (loads are refused until it does): p.toml:3: observers.dir: nowhere is not a directory\n\
                 host: none is running"
            ),
            "{text}"
        );
        assert!(text.contains("s.redb: 1 pending notification, 0 dead letters\n"), "{text}");
    }

    #[test]
    fn batches_are_cut_by_records_and_by_bytes() {
        let mb = 1 << 20;
        assert_eq!(batch_end(&[10; 7], 0, 3), 3);
        assert_eq!(batch_end(&[10; 7], 6, 3), 7);
        assert_eq!(batch_end(&[3 * mb; 5], 0, 200), 2);
        assert_eq!(batch_end(&[4 * mb, 4 * mb, 1], 0, 200), 2);
        // A record larger than a batch goes alone.
        assert_eq!(batch_end(&[20 * mb, 1, 1], 0, 200), 1);
        assert_eq!(batch_end(&[1, 20 * mb, 1], 0, 200), 1);
    }

    /// The store, where another run of the same load writes each batch just before this one.
    struct Racing {
        store: Store,
    }

    impl Api for Racing {
        fn load_begin(&self, r: &LoadBegin) -> ops::OpResult<LoadPlan> {
            ops::load_begin(&self.store, r)
        }
        fn load_batch(&self, r: &LoadBatch) -> ops::OpResult<LoadProgress> {
            if r.start == 0 {
                ops::load_batch(&self.store, r)?;
            }
            ops::load_batch(&self.store, r)
        }
        fn get(&self, _: &GetRequest) -> ops::OpResult<Value> {
            unreachable!("not used by load")
        }
        fn scan(&self, _: &ScanRequest) -> ops::OpResult<ScanResponse> {
            unreachable!("not used by load")
        }
        fn status(&self) -> ops::OpResult<StatusReport> {
            unreachable!("not used by load")
        }
        fn dead_letters(&self) -> ops::OpResult<Vec<DeadLetterReport>> {
            unreachable!("not used by load")
        }
        fn retry(&self, _: &RetryRequest) -> ops::OpResult<RetryResponse> {
            unreachable!("not used by load")
        }
        fn query(&self, _: &QueryRequest) -> ops::OpResult<QueryResponse> {
            unreachable!("not used by load")
        }
        fn gc(&self) -> ops::OpResult<GcReport> {
            unreachable!("not used by load")
        }
        fn notify(&self, _: &NotifyRequest) -> ops::OpResult<NotifyResponse> {
            unreachable!("not used by load")
        }
        fn wait(&self, _: &WaitRequest) -> ops::OpResult<WaitResponse> {
            unreachable!("not used by load")
        }
    }

    #[test]
    fn load_reports_the_records_this_run_wrote() {
        let store =
            Store::with_backend(std::sync::Arc::new(percolator_store::MemBigtable::new()), StoreConfig::default())
                .unwrap();
        let args = LoadArgs {
            table: "t".into(),
            file: PathBuf::from("/nonexistent/f.jsonl"),
            key: "row".into(),
            format: None,
            family: "raw".into(),
            base64: Vec::new(),
            batch: 2,
            again: false,
        };
        let src = b"{\"row\": \"a\"}\n{\"row\": \"b\"}\n{\"row\": \"c\"}\n";
        let opts = load::Options {
            format: Format::Jsonl,
            key: "row".into(),
            family: "raw".into(),
            base64: Default::default(),
        };
        let parsed = load::parse("f.jsonl", src, "t", &opts).unwrap();
        let input = LoadInput { name: "f.jsonl".into(), parsed, id: "0".repeat(32), options: opts.describe() };
        let out = load_file(&Racing { store }, &args, input).unwrap();
        assert!(out.starts_with("loaded 1 record into t in "), "{out}");
        assert!(out.ends_with(" s (2 more were written meanwhile by another run of this load)"), "{out}");
    }

    #[test]
    fn escape_keeps_one_value_on_one_line() {
        assert_eq!(escape("a\tb\nc\\d\u{1}é"), "a\\tb\\nc\\\\d\\u{1}é");
    }
}
