//! The command line: clap definitions, the choice of route (a running host's HTTP API or the
//! store file), and how each answer is printed.

use std::io::{IsTerminal, Read, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use percolator_api::endpoint as ep;
use percolator_api::loadfile::{self as load, Format};
use percolator_api::text::{escape, hex, plural, unhex};
use percolator_api::*;
use percolator_server::ops::Op;
use percolator_server::route::{self, Route};
use percolator_server::serve;

use crate::project::{self, Lang};
use sha2::{Digest, Sha256};

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
/// when none does. Applications bring their own commands (the web index: `webindex`).
#[derive(Debug, Parser)]
#[command(name = "percolator", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// The pipeline configuration (TOML).
    #[arg(
        long,
        global = true,
        env = "PERCOLATOR_CONFIG",
        default_value = "percolator.toml",
        help_heading = "Global options"
    )]
    pub(crate) config: PathBuf,
    /// Talk to the host at this base URL (e.g. http://127.0.0.1:7878) instead of finding it
    /// through the configuration.
    #[arg(long, global = true, value_name = "URL", help_heading = "Global options")]
    pub(crate) url: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the pipeline: store, observers, scanner, hot reload and the HTTP API (until
    /// SIGINT or SIGTERM).
    Up {
        /// The configuration (default: --config).
        config: Option<PathBuf>,
    },
    /// Write a new guest project (an observer) from a template, in any folder: the observer,
    /// its tests, the language's guest SDK and the WIT, ready for `percolator build`.
    New {
        /// The project's name (lower-case letters, digits, '-', '_'); also its folder's.
        name: String,
        /// The language.
        #[arg(long, value_enum, default_value_t = Lang::Rust)]
        lang: Lang,
        /// The folder to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Build a guest project (default: the current folder) into the component `NAME.wasm`
    /// in it, with its language's toolchain.
    Build {
        /// The project's folder.
        dir: Option<PathBuf>,
    },
    /// Print one cell's value.
    Get {
        /// Table.
        table: String,
        /// Row key.
        row: String,
        /// Column (family:qualifier).
        column: String,
        /// Print the value as hex (`--format hex`).
        #[arg(long, conflicts_with_all = ["json", "format"])]
        hex: bool,
        /// Read at this snapshot (a timestamp from `snapshot`, a pin or a scan) instead of the
        /// latest.
        #[arg(long, value_name = "TS", value_parser = timestamp)]
        at: Option<u64>,
        /// Print a JSON object: table, row, column, value (text) or value_base64, commit_ts
        /// (`--format json`).
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// How to print the value: text (control characters escaped), hex, json, or an 8-byte
        /// big-endian number as u64, i64 or f64 (what the SDKs' `set_u64` writes).
        #[arg(long, value_enum)]
        format: Option<ValueFormat>,
    },
    /// Print cells of a table, one `row<TAB>column<TAB>value` line each (control characters
    /// escaped).
    Scan(ScanArgs),
    /// Print the committed changes to a table's logged columns (a sink's columns, or
    /// `[[changes]]` in the configuration) as JSON lines in commit-timestamp order, then a
    /// line `{"next": TOKEN}`: `--since TOKEN` later resumes exactly there (nothing missed or
    /// repeated). Without --since, from the oldest change the log keeps.
    Changes {
        /// Table.
        table: String,
        /// Only these logged columns (comma-separated; default: every logged column).
        #[arg(long, value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// Resume after this position (the `next` of an earlier run).
        #[arg(long, value_name = "TOKEN")]
        since: Option<String>,
        /// Keep printing changes as they commit (a `next` line after each batch), until
        /// interrupted.
        #[arg(long)]
        follow: bool,
        /// Stop after about this many changes (a transaction's changes are never split).
        #[arg(long, value_parser = at_least_one)]
        limit: Option<u64>,
    },
    /// Load a JSONL or CSV file into a table (checked whole first; resumable; idempotent).
    Load(LoadArgs),
    /// The pipeline's state: bindings, runs (committed, lost to a conflict, failed), backlog,
    /// throughput, dead letters.
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
    /// The cells this host's observer runs lost the most conflicts on over the last minutes
    /// (the contended cell, and the bindings whose runs lost on it).
    HotRows {
        /// The most cells to list.
        #[arg(long, default_value_t = DEFAULT_HOT_ROWS_LIMIT, value_parser = hot_rows_limit)]
        limit: u32,
        /// The window: the last this many minutes (the current one counts; at most 10).
        #[arg(long, default_value_t = DEFAULT_HOT_ROWS_MINUTES, value_parser = hot_rows_minutes)]
        minutes: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
        /// Run the observers again even on rows they already processed (their acks are
        /// removed): for a new version of an observer.
        #[arg(long)]
        rerun: bool,
    },
    /// Dry-run a new version of a binding's component: run it and the current version on
    /// existing rows, in transactions that are never committed, and print the cells it would
    /// write differently (added, changed, removed). Nothing is written. Exit status 4 when
    /// anything differs.
    Replay {
        /// The binding (its access rules, limits and parameters apply to both versions).
        #[arg(long)]
        binding: String,
        /// The candidate component.
        #[arg(long, value_name = "FILE")]
        wasm: PathBuf,
        /// A row to replay on (repeatable); default: the first --limit rows that have a value
        /// in the binding's column.
        #[arg(long = "row", value_name = "ROW")]
        rows: Vec<String>,
        /// How many rows without --row (at most 1000).
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the current timestamp (a snapshot: read at it with `get`/`scan --at`); with
    /// --ttl, pin it so GC keeps it until the pin expires; renew or release a pin.
    Snapshot(SnapshotArgs),
    /// Remove versions no reader can see.
    Gc,
    /// Remove every old version and give the freed space back to the file system: offline,
    /// on a redb store file that no host serves (stop the host first; refused while one runs,
    /// and for a Redis store). Prints the file's size before and after.
    Compact {
        /// The store file (default: the configuration's `[store] path`).
        #[arg(long, value_name = "PATH")]
        store: Option<PathBuf>,
    },
    /// Wait until the pipeline is quiescent (no pending notification, no run going); on a
    /// terminal it shows the backlog, runs/s and an estimate meanwhile. Exit status 1 on
    /// timeout, 3 when quiescent with dead letters (unless --allow-dead-letters).
    Wait {
        /// Give up after this many seconds (at most 3600).
        #[arg(long, default_value_t = 60.0, value_parser = wait_seconds)]
        timeout: f64,
        /// Exit 0 even if some notifications ended as dead letters.
        #[arg(long)]
        allow_dead_letters: bool,
    },
}

/// Rows `[--start, --end)` starting with `--prefix` (`scan`, `notify`).
#[derive(Debug, Args)]
pub(crate) struct RowRange {
    /// First row (inclusive).
    #[arg(long)]
    pub(crate) start: Option<String>,
    /// Last row (exclusive).
    #[arg(long)]
    pub(crate) end: Option<String>,
    /// Only rows starting with this.
    #[arg(long)]
    pub(crate) prefix: Option<String>,
}

/// `scan` options.
#[derive(Debug, Args)]
pub(crate) struct ScanArgs {
    /// Table.
    pub(crate) table: String,
    /// Which rows.
    #[command(flatten)]
    pub(crate) rows: RowRange,
    /// Only these columns (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) columns: Option<Vec<String>>,
    /// At most this many cells (read from the host a page at a time).
    #[arg(long, default_value_t = 100, value_parser = at_least_one)]
    pub(crate) limit: u64,
    /// Continue after the cell this token names (printed when a scan stops at --limit); the
    /// token carries the scan's snapshot.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) after: Option<String>,
    /// Read at this snapshot (a timestamp) instead of the latest; every page reads it.
    #[arg(long, value_name = "TS", value_parser = timestamp)]
    pub(crate) at: Option<u64>,
    /// Print one JSON object per cell and line: table, row, column, value (text) or
    /// value_base64, commit_ts (`--format json`).
    #[arg(long, conflicts_with = "format")]
    pub(crate) json: bool,
    /// How to print each value: text (the default; control characters escaped), hex, json
    /// (one object per cell), or an 8-byte big-endian number as u64, i64 or f64 (a value of
    /// another length is printed in hex, prefixed `0x`).
    #[arg(long, value_enum)]
    pub(crate) format: Option<ValueFormat>,
}

/// How `get` and `scan` print a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum ValueFormat {
    /// As text (invalid UTF-8 replaced, control characters escaped in `scan`).
    Text,
    /// As hex.
    Hex,
    /// A JSON object per cell.
    Json,
    /// An 8-byte big-endian unsigned integer.
    U64,
    /// An 8-byte big-endian signed integer.
    I64,
    /// An 8-byte big-endian IEEE 754 float.
    F64,
}

/// `value` as an 8-byte big-endian number of `format` (u64, i64 or f64); `None` for another
/// length or format.
fn number(value: &[u8], format: ValueFormat) -> Option<String> {
    let bytes: [u8; 8] = value.try_into().ok()?;
    Some(match format {
        ValueFormat::U64 => u64::from_be_bytes(bytes).to_string(),
        ValueFormat::I64 => i64::from_be_bytes(bytes).to_string(),
        ValueFormat::F64 => f64::from_be_bytes(bytes).to_string(),
        _ => return None,
    })
}

/// `snapshot` options.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").args(["renew", "release"])))]
pub(crate) struct SnapshotArgs {
    /// Pin the snapshot for this long (e.g. 90s, 10m, 2h, 1d; at most a week): GC keeps what
    /// reads at it need until then. With --renew: the pin's new TTL, from now.
    #[arg(long, value_name = "DURATION", value_parser = ttl, conflicts_with = "release")]
    pub(crate) ttl: Option<u64>,
    /// Pin this snapshot (a timestamp) instead of the current one (with --ttl).
    #[arg(long, value_name = "TS", value_parser = timestamp, requires = "ttl", conflicts_with = "change")]
    pub(crate) at: Option<u64>,
    /// Renew the pin with this id (with --ttl).
    #[arg(long, value_name = "ID", requires = "ttl")]
    pub(crate) renew: Option<u64>,
    /// Release the pin with this id.
    #[arg(long, value_name = "ID")]
    pub(crate) release: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `load` options.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    /// Target table.
    pub(crate) table: String,
    /// The file: JSONL (one JSON object per line) or CSV (a header row naming the fields).
    pub(crate) file: PathBuf,
    /// The field holding the row key (a non-empty string or an integer).
    #[arg(long, default_value = "row")]
    pub(crate) key: String,
    /// File format (default: from the extension: .jsonl/.ndjson/.json or .csv).
    #[arg(long, value_enum)]
    pub(crate) format: Option<FormatArg>,
    /// Column family of fields without one: field `f` becomes column `FAMILY:f`.
    #[arg(long, default_value = "raw")]
    pub(crate) family: String,
    /// Fields (comma-separated) whose values are base64 text of the bytes to store, e.g. HTML
    /// in any encoding (JSON and CSV carry only UTF-8 text).
    #[arg(long, value_delimiter = ',', value_name = "FIELDS")]
    pub base64: Vec<String>,
    /// Records per transaction, at most 100000 (fewer when they would make more than 8 MiB of
    /// JSON).
    #[arg(long, default_value_t = 200, value_parser = batch_size)]
    pub(crate) batch: u64,
    /// Load the file again even though it was loaded completely before.
    #[arg(long)]
    pub(crate) again: bool,
}

/// `--format`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub(crate) enum FormatArg {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// `dead-letters` actions.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadLetterAction {
    /// Move dead letters back to pending: their observers run again.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all"])))]
    Retry {
        /// The dead letter's id (from `percolator dead-letters`).
        id: Option<String>,
        /// Retry every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Remove dead letters for good: their notifications are not run again (a strong
    /// observer's change stays acknowledged; a later write still triggers it).
    #[command(group(clap::ArgGroup::new("which").required(true).args(["id", "binding", "unbound", "all"])))]
    Discard {
        /// The dead letter's id (from `percolator dead-letters`).
        id: Option<String>,
        /// Every dead letter of this binding.
        #[arg(long, value_name = "NAME")]
        binding: Option<String>,
        /// Every dead letter of `(unbound)` (notifications whose binding was removed).
        #[arg(long)]
        unbound: bool,
        /// Every dead letter.
        #[arg(long)]
        all: bool,
    },
}

/// The most records per `load` batch (`--batch`).
pub(crate) const MAX_BATCH_RECORDS: u64 = 100_000;

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

fn hot_rows_limit(s: &str) -> Result<u32, String> {
    whole_number(s, 1, u64::from(MAX_HOT_ROWS_LIMIT)).map(|n| n as u32)
}

fn hot_rows_minutes(s: &str) -> Result<u32, String> {
    whole_number(s, 1, u64::from(MAX_HOT_ROWS_MINUTES)).map(|n| n as u32)
}

fn batch_size(s: &str) -> Result<u64, String> {
    whole_number(s, 1, MAX_BATCH_RECORDS)
}

/// `--at`: a timestamp (a whole number, at least 1).
fn timestamp(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .ok()
        .filter(|t| *t > 0)
        .ok_or_else(|| format!("{s:?} is not a timestamp (a whole number from 1)"))
}

/// The longest `snapshot --ttl`: a week (the store's `MAX_PIN_TTL`).
const MAX_TTL_SECS: u64 = 7 * 24 * 3600;

/// `snapshot --ttl`: a duration (`90s`, `10m`, `2h`, `1d`; a bare number is seconds), in
/// seconds, from 1 s to a week.
fn ttl(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("{s:?} is not a duration (e.g. 90s, 10m, 2h, 1d)");
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    match n.checked_mul(scale) {
        Some(0) => Err("a TTL must be more than zero".into()),
        Some(secs) if secs <= MAX_TTL_SECS => Ok(secs),
        _ => Err(format!("{s:?} is more than the longest TTL, a week (7d); renew the pin to keep it longer")),
    }
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
pub(crate) fn run(cli: Cli) -> Result<ExitCode, String> {
    match &cli.command {
        Command::Up { config } => {
            let config = config.as_deref().unwrap_or(&cli.config);
            serve::up(config, serve::signals())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::New { name, lang, dir } => {
            let dir = dir.clone().unwrap_or_else(|| PathBuf::from(name));
            print!("{}", project::new(name, *lang, &dir)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Build { dir } => {
            let dir = dir.clone().unwrap_or_else(|| PathBuf::from("."));
            let built = project::build(&dir)?;
            let size = std::fs::metadata(&built.wasm).map(|m| m.len()).unwrap_or(0);
            let kept = if built.kept { "; its inputs are unchanged since it was built: kept, not rebuilt" } else { "" };
            println!("built {} ({size} bytes{kept})", built.wasm.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Load(args) => {
            // Read and check the file before touching any store.
            let input = read_load_input(args)?;
            let route = route::connect(&cli.config, cli.url.as_deref(), true)?;
            println!("{}", load_file(&route, args, input)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Compact { store } => {
            if let Some(url) = &cli.url {
                return Err(format!(
                    "compact does not go through a host (it needs the store file closed); drop --url {url}"
                ));
            }
            let done = route::compact(&cli.config, store.as_deref())?;
            let c = &done.compaction;
            println!(
                "compacted {}: {} → {} bytes ({} removed by gc)",
                done.path.display(),
                c.bytes_before,
                c.bytes_after,
                plural(c.gc.versions_removed, "old version", "old versions")
            );
            Ok(ExitCode::SUCCESS)
        }
        command => {
            let route = route::connect(&cli.config, cli.url.as_deref(), false)?;
            verb(&route, command)
        }
    }
}

/// Exit status of `wait` when the pipeline is quiescent but some notifications ended as dead
/// letters.
pub(crate) const EXIT_DEAD_LETTERS: u8 = 3;

/// Exit status of `replay` when the candidate writes differently on some row.
pub(crate) const EXIT_REPLAY_DIFFERS: u8 = 4;

/// Cells a `scan` asks for per request.
const SCAN_PAGE: u64 = 10_000;

/// Changes a `changes` asks for per request.
const CHANGES_PAGE: u64 = 10_000;

fn json<T: serde::Serialize>(v: &T) -> Result<String, String> {
    serde_json::to_string_pretty(v).map_err(|e| e.to_string())
}

fn verb(route: &Route, command: &Command) -> Result<ExitCode, String> {
    let out = std::io::stdout();
    let mut out = out.lock();
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    match command {
        Command::Get { table, row, column, hex, at, json: as_json, format } => {
            let v = route.call::<ep::Get>(GetRequest {
                table: table.clone(),
                row: row.clone(),
                column: column.clone(),
                at: *at,
            })?;
            let bytes = unhex(&v.value_hex).unwrap_or_default();
            let format = match (format, hex, as_json) {
                (Some(f), ..) => *f,
                (None, true, _) => ValueFormat::Hex,
                (None, _, true) => ValueFormat::Json,
                _ => ValueFormat::Text,
            };
            let line = match format {
                ValueFormat::Text => v.value.clone(),
                ValueFormat::Hex => v.value_hex.clone(),
                ValueFormat::Json => cell_json(table, row.as_bytes(), column, &bytes, v.commit_ts),
                number_format => number(&bytes, number_format).ok_or_else(|| {
                    format!(
                        "{table}/{row}/{column}: the value is {}, not the 8 bytes of a big-endian {} (try --format \
                         text or hex)",
                        plural(bytes.len(), "byte", "bytes"),
                        format!("{number_format:?}").to_lowercase()
                    )
                })?,
            };
            w(writeln!(out, "{line}"))?;
        }
        Command::Snapshot(a) => snapshot(route, a, &mut out)?,
        Command::Scan(a) => {
            let mut left = a.limit;
            let mut after = a.after.clone();
            loop {
                let r = route.call::<ep::Scan>(ScanRequest {
                    table: a.table.clone(),
                    start: a.rows.start.clone(),
                    end: a.rows.end.clone(),
                    prefix: a.rows.prefix.clone(),
                    columns: a.columns.clone(),
                    limit: usize::try_from(left.min(SCAN_PAGE)).unwrap_or(MAX_SCAN_LIMIT),
                    // Every page's token carries the first page's snapshot (--at, if given).
                    at: a.at,
                    after: after.take(),
                })?;
                let format = match (a.format, a.json) {
                    (Some(f), _) => f,
                    (None, true) => ValueFormat::Json,
                    (None, false) => ValueFormat::Text,
                };
                for c in &r.cells {
                    let value = unhex(&c.value_hex).unwrap_or_default();
                    let shown = match format {
                        ValueFormat::Json => {
                            let row = unhex(&c.row_hex).unwrap_or_default();
                            w(writeln!(out, "{}", cell_json(&a.table, &row, &c.column, &value, c.commit_ts)))?;
                            continue;
                        }
                        ValueFormat::Text => escape(&c.value),
                        ValueFormat::Hex => c.value_hex.clone(),
                        // Another length than a number's: in hex, marked as such.
                        number_format => number(&value, number_format).unwrap_or_else(|| format!("0x{}", c.value_hex)),
                    };
                    w(writeln!(out, "{}\t{}\t{shown}", escape(&c.row), escape(&c.column)))?;
                }
                left -= r.cells.len() as u64;
                match r.next {
                    Some(token) if left == 0 => {
                        eprintln!(
                            "percolator: more cells follow (stopped at --limit {}); continue with --after {token}",
                            a.limit
                        );
                        break;
                    }
                    Some(token) => after = Some(token),
                    None => break,
                }
            }
        }
        Command::Changes { table, columns, since, follow, limit } => {
            if *follow && route.url().is_none() {
                return Err("changes --follow needs a running host (`percolator up`): without one it would hold the \
                            store file, and no host could start meanwhile; run it without --follow to read what \
                            is committed now"
                    .to_owned());
            }
            let mut since = since.clone();
            let mut left = *limit;
            loop {
                let page = route.call::<ep::Changes>(ChangesRequest {
                    table: table.clone(),
                    columns: columns.clone(),
                    since: since.clone(),
                    limit: usize::try_from(left.unwrap_or(CHANGES_PAGE).min(CHANGES_PAGE))
                        .unwrap_or(DEFAULT_CHANGES_LIMIT),
                    wait_secs: if *follow { 10.0 } else { 0.0 },
                })?;
                for c in &page.changes {
                    w(writeln!(out, "{}", serde_json::to_string(c).map_err(|e| e.to_string())?))?;
                }
                let done = page.changes.is_empty() && !page.more && !*follow;
                left = left.map(|l| l.saturating_sub(page.changes.len() as u64));
                // Following: a token after each batch (a consumer that stops resumes from its
                // last one); otherwise one at the end.
                if (*follow && !page.changes.is_empty()) || done || left == Some(0) {
                    w(writeln!(out, "{}", serde_json::json!({ "next": page.next })))?;
                    w(out.flush())?;
                }
                since = Some(page.next);
                if done || left == Some(0) {
                    break;
                }
            }
        }
        Command::Status { json: as_json } => {
            let s = route.call::<ep::Status>(Empty {})?;
            if *as_json {
                w(writeln!(out, "{}", json(&s)?))?;
            } else {
                w(out.write_all(render_status(&s).as_bytes()))?;
            }
        }
        Command::DeadLetters { json: as_json, action: None } => {
            let list = route.call::<ep::DeadLetters>(Empty {})?;
            if *as_json {
                w(writeln!(out, "{}", json(&list)?))?;
            } else if list.is_empty() {
                eprintln!("percolator: no dead letters");
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
        Command::DeadLetters { json: as_json, action: Some(DeadLetterAction::Retry { id, all }) } => {
            let r = route.call::<ep::Retry>(RetryRequest { id: id.clone(), all: *all })?;
            if r.reload_pending {
                let what = match r.compiling.as_slice() {
                    [] => String::new(),
                    names => format!(" (compiling {})", names.join(", ")),
                };
                eprintln!(
                    "percolator: note: a reload is under way{what}: the retried notifications may run on the \
                     versions before it; `percolator wait` waits for the reload too"
                );
            }
            if *as_json {
                w(writeln!(out, "{}", json(&r)?))?;
            } else {
                match (r.retried.len(), id) {
                    (_, Some(id)) => w(writeln!(out, "retried {id}"))?,
                    (n, None) => w(writeln!(out, "retried {}", plural(n, "dead letter", "dead letters")))?,
                }
            }
        }
        Command::DeadLetters {
            json: as_json,
            action: Some(DeadLetterAction::Discard { id, binding, unbound, all }),
        } => {
            let r = route.call::<ep::Discard>(DiscardRequest {
                id: id.clone(),
                binding: binding.clone(),
                unbound: *unbound,
                all: *all,
            })?;
            if *as_json {
                w(writeln!(out, "{}", json(&r)?))?;
            } else {
                match (r.discarded.len(), id) {
                    (_, Some(id)) => w(writeln!(out, "discarded {id}"))?,
                    (n, None) => w(writeln!(out, "discarded {}", plural(n, "dead letter", "dead letters")))?,
                }
            }
        }
        Command::HotRows { limit, minutes, json: as_json } => {
            let r = route.call::<ep::HotRows>(HotRowsRequest { minutes: *minutes, limit: *limit })?;
            if *as_json {
                w(writeln!(out, "{}", json(&r)?))?;
            } else {
                w(out.write_all(render_hot_rows(&r).as_bytes()))?;
            }
        }
        Command::Notify { table, column, rows, rerun } => {
            let r = route.call::<ep::Notify>(NotifyRequest {
                table: table.clone(),
                column: column.clone(),
                start: rows.start.clone(),
                end: rows.end.clone(),
                prefix: rows.prefix.clone(),
                rerun: *rerun,
            })?;
            let again = if *rerun { " (acks removed: their observers run again)" } else { "" };
            w(writeln!(out, "notified {} of {table}/{column}{again}", plural(r.notified, "row", "rows")))?;
        }
        Command::Replay { binding, wasm, rows, limit, json: as_json } => {
            let wasm = std::path::absolute(wasm).map_err(|e| format!("{}: {e}", wasm.display()))?;
            if !wasm.exists() {
                return Err(format!("{} does not exist", wasm.display()));
            }
            let r = route.call::<ep::Replay>(ReplayRequest {
                binding: binding.clone(),
                wasm: wasm.display().to_string(),
                rows: rows.clone(),
                limit: Some(*limit),
            })?;
            if *as_json {
                w(writeln!(out, "{}", json(&r)?))?;
            } else {
                w(out.write_all(replay_text(&r, &wasm).as_bytes()))?;
            }
            if r.changed_rows > 0 {
                return Ok(ExitCode::from(EXIT_REPLAY_DIFFERS));
            }
        }
        Command::Gc => {
            let s = route.call::<ep::Gc>(Empty {})?;
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
        Command::Wait { timeout, allow_dead_letters } => return wait(route, *timeout, *allow_dead_letters),
        Command::Up { .. }
        | Command::Load(_)
        | Command::New { .. }
        | Command::Build { .. }
        | Command::Compact { .. } => {
            unreachable!("handled by run")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One cell as a line of JSON: text where the bytes are UTF-8, else base64 (`row_base64`,
/// `value_base64`).
fn cell_json(table: &str, row: &[u8], column: &str, value: &[u8], commit_ts: u64) -> String {
    fn bytes(o: &mut serde_json::Map<String, serde_json::Value>, name: &str, b: &[u8]) {
        match std::str::from_utf8(b) {
            Ok(s) => o.insert(name.into(), s.into()),
            Err(_) => o.insert(format!("{name}_base64"), encode_base64(b).into()),
        };
    }
    let mut o = serde_json::Map::new();
    o.insert("table".into(), table.into());
    bytes(&mut o, "row", row);
    o.insert("column".into(), column.into());
    bytes(&mut o, "value", value);
    o.insert("commit_ts".into(), commit_ts.into());
    serde_json::Value::Object(o).to_string()
}

/// `snapshot`: the current timestamp, a new pin, a renewal or a release.
fn snapshot(route: &Route, a: &SnapshotArgs, out: &mut impl Write) -> Result<(), String> {
    let w = |r: std::io::Result<()>| r.map_err(|e| format!("writing the output: {e}"));
    let pin_line = |p: &PinReport| format!("pin {} ts {} expires {}", p.id, p.ts, p.expires);
    match (a.renew, a.release) {
        (Some(id), _) => {
            let ttl_secs = a.ttl.expect("clap: --renew requires --ttl");
            let p = route.call::<ep::SnapshotRenew>(PinRenewRequest { id, ttl_secs })?;
            w(writeln!(out, "{}", if a.json { json(&p)? } else { pin_line(&p) }))
        }
        (None, Some(id)) => {
            let p = route.call::<ep::SnapshotRelease>(PinReleaseRequest { id })?;
            w(writeln!(out, "{}", if a.json { json(&p)? } else { format!("released pin {} (ts {})", p.id, p.ts) }))
        }
        (None, None) => {
            let r = route.call::<ep::Snapshot>(SnapshotRequest { ttl_secs: a.ttl, at: a.at })?;
            let line = match &r.pin {
                _ if a.json => json(&r)?,
                Some(p) => pin_line(p),
                None => r.ts.to_string(),
            };
            w(writeln!(out, "{line}"))
        }
    }
}

/// A replay's report for people: a line per row, the changed cells under it, a summary.
fn replay_text(r: &ReplayReport, candidate: &Path) -> String {
    let short = |h: &str| h.get(..12).unwrap_or(h).to_owned();
    let mut out = format!(
        "replay of binding {} on {} of {}/{}: candidate {} ({}) against the current version ({})\n",
        r.binding,
        plural(r.rows.len(), "row", "rows"),
        r.table,
        r.column,
        candidate.display(),
        short(&r.candidate_hash),
        short(&r.current_hash),
    );
    let value = |v: &Option<String>| v.as_deref().map(escape).unwrap_or_else(|| "(not written)".into());
    for row in &r.rows {
        let mut notes = Vec::new();
        if let Some(e) = &row.current_error {
            notes.push(format!("the current version fails: {}", escape(e)));
        }
        if let Some(e) = &row.candidate_error {
            notes.push(format!("the candidate fails: {}", escape(e)));
        }
        let summary = if row.cells.is_empty() && notes.is_empty() {
            format!("identical ({})", plural(row.identical_cells, "cell", "cells"))
        } else {
            let mut parts: Vec<String> = Vec::new();
            if !row.cells.is_empty() {
                parts.push(differ(row.cells.len() as u64, "cell", "cells"));
            }
            parts.extend(notes);
            parts.join("; ")
        };
        out.push_str(&format!("row {}: {summary}\n", escape(&row.row)));
        for c in &row.cells {
            let sign = match c.change.as_str() {
                "added" => '+',
                "removed" => '-',
                _ => '~',
            };
            out.push_str(&format!(
                "  {sign} {}/{}/{}: {} -> {}\n",
                c.table,
                escape(&c.row),
                c.column,
                value(&c.current),
                value(&c.candidate)
            ));
        }
    }
    out.push_str(&format!(
        "summary: {} ({} added, {} changed, {} removed), {} identical; nothing was written\n",
        differ(r.changed_rows, "row", "rows"),
        plural(r.cells_added, "cell", "cells"),
        r.cells_changed,
        r.cells_removed,
        r.identical_rows
    ));
    out
}

/// `1 row differs`, `2 rows differ`.
fn differ(n: u64, one: &str, many: &str) -> String {
    if n == 1 { format!("1 {one} differs") } else { format!("{n} {many} differ") }
}

/// `wait`: on a terminal, waits a second at a time and shows the backlog, the observer runs per
/// second and an estimate of the time left between waits; elsewhere it waits in one request.
fn wait(route: &Route, timeout: f64, allow_dead_letters: bool) -> Result<ExitCode, String> {
    let started = Instant::now();
    let deadline = Duration::try_from_secs_f64(timeout).unwrap_or(Duration::ZERO);
    let progress = std::io::stderr().is_terminal() && route.url().is_some();
    let mut reloading = false;
    let quiescent = loop {
        let left = deadline.saturating_sub(started.elapsed());
        let step = if progress { left.min(Duration::from_secs(1)) } else { left };
        let answer = route.call::<ep::Wait>(WaitRequest { timeout_secs: step.as_secs_f64() })?;
        if answer.quiescent {
            break true;
        }
        reloading = answer.reload_pending;
        if started.elapsed() >= deadline {
            break false;
        }
        if let Ok(s) = route.call::<ep::Status>(Empty {}) {
            eprint!("\r\x1b[K{}", wait_progress(&s, started.elapsed()));
        }
    };
    if progress {
        eprint!("\r\x1b[K");
    }
    if !quiescent {
        let why = if reloading { " (a reload is still compiling or about to start)" } else { "" };
        eprintln!("percolator: the pipeline did not become quiescent within {timeout} s{why}");
        return Ok(ExitCode::FAILURE);
    }
    let dead = route.call::<ep::DeadLetters>(Empty {})?.len();
    let took = started.elapsed().as_secs_f64();
    if dead == 0 {
        eprintln!("percolator: quiescent after {took:.1} s: no pending notification, no dead letter");
        return Ok(ExitCode::SUCCESS);
    }
    let letters = plural(dead, "dead letter", "dead letters");
    if allow_dead_letters {
        eprintln!("percolator: quiescent after {took:.1} s, with {letters} (see `percolator dead-letters`)");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "percolator: quiescent after {took:.1} s, but {letters} (their observers kept failing): see \
             `percolator dead-letters`, retry with `percolator dead-letters retry --all`; \
             --allow-dead-letters exits 0"
        );
        Ok(ExitCode::from(EXIT_DEAD_LETTERS))
    }
}

/// `waiting 12 s: 1,234 pending notifications, 56.0 runs/s, about 22 s left`.
fn wait_progress(s: &StatusReport, waited: Duration) -> String {
    let pending = s.store.pending_notifications;
    let mut line = format!(
        "waiting {:.0} s: {}",
        waited.as_secs_f64(),
        plural(count(pending, s.store.pending_capped), "pending notification", "pending notifications")
    );
    if let Some(h) = &s.host {
        let rate = h.throughput.observer_runs_per_sec;
        line.push_str(&format!(", {rate:.1} runs/s"));
        if rate > 0.0 && pending > 0 {
            line.push_str(&format!(", about {:.0} s left", pending as f64 / rate));
        }
    }
    if s.store.dead_letters > 0 {
        line.push_str(&format!(", {}", plural(s.store.dead_letters, "dead letter", "dead letters")));
    }
    line
}

/// What `load` needs of a route: running a command (a test races it with another load).
trait Calls {
    fn call<E: Op>(&self, request: E::Request) -> ApiResult<E::Response>;
}

impl Calls for Route {
    fn call<E: Op>(&self, request: E::Request) -> ApiResult<E::Response> {
        Route::call::<E>(self, request)
    }
}

/// Reads a file's records again, in file order, handing each on (see [`load::read`]); `Err` if
/// the file has changed since it was checked.
type Reread = Box<dyn Fn(&mut dyn FnMut(load::Read1) -> ControlFlow<()>) -> Result<(), String>>;

/// A checked load file: what `load/begin` needs, and a way to read its records again.
struct LoadInput {
    name: String,
    /// Records in the file.
    total: u64,
    /// Every column they write.
    columns: Vec<String>,
    /// The load's id: a hash of the table and the file's bytes.
    id: String,
    options: String,
    records: Reread,
}

/// Passes the bytes read through to a SHA-256 of the table and the file (the load id).
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Reads the file at `path` through [`load::read`], handing each record to `each`; returns what
/// was read and the load id.
fn read_pass(
    name: &str,
    path: &Path,
    table: &str,
    opts: &load::Options,
    each: &mut dyn FnMut(load::Read1) -> ControlFlow<()>,
) -> Result<(load::Summary, String), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    let mut hash = Sha256::new();
    hash.update(table.as_bytes());
    hash.update(b"\n");
    let mut reader = Hashing { inner: file, hash };
    let summary = load::read(name, &mut reader, table, opts, each).map_err(|p| p.to_string())?;
    // The id covers the whole file, also what follows a stop.
    std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| format!("{name}: cannot read: {e}"))?;
    Ok((summary, hex(&reader.hash.finalize()[..16])))
}

/// Checks the whole file (nothing is loaded from a file with a problem) in bounded memory:
/// records are read and dropped; what stays is their count, columns and the load id.
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
    let opts = load::Options {
        format,
        key: a.key.clone(),
        family: a.family.clone(),
        base64: a.base64.iter().cloned().collect(),
    };
    let (summary, id) = read_pass(&name, &a.file, &a.table, &opts, &mut |_| ControlFlow::Continue(()))
        .map_err(|p| format!("{p}\nnothing was loaded"))?;
    let options = opts.describe();
    let (path, table, checked) = (a.file.clone(), a.table.clone(), (summary.records, id.clone()));
    let reread_name = name.clone();
    let records: Reread = Box::new(move |each| {
        let changed = |what: String| {
            format!("{reread_name} changed while it was loaded ({what}); load it again to load the new contents")
        };
        match read_pass(&reread_name, &path, &table, &opts, each) {
            Ok((s, id)) if (s.records, &id) == (checked.0, &checked.1) => Ok(()),
            Ok(_) => Err(changed("its contents differ from those checked".into())),
            Err(e) => Err(changed(e)),
        }
    });
    Ok(LoadInput { name, total: summary.records, columns: summary.columns, id, options, records })
}

/// Loads the records of `input` in batches (at most `--batch` records and
/// [`load::MAX_BATCH_BYTES`] of JSON each) and says what was done. The file is read as the
/// batches go: at most one batch is held in memory.
fn load_file(api: &impl Calls, a: &LoadArgs, input: LoadInput) -> Result<String, String> {
    let LoadInput { name, total, columns, id, options, records } = input;
    if total == 0 {
        return Ok(format!("nothing to load: {name} has no records"));
    }
    let file = std::fs::canonicalize(&a.file).map(|p| p.display().to_string()).unwrap_or_else(|_| name.clone());
    let plan = api.call::<ep::LoadBegin>(LoadBeginRequest {
        table: a.table.clone(),
        id,
        file: file.clone(),
        total,
        options: options.clone(),
        again: a.again,
        columns,
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
    // Records read so far (the next one's index), the batch being filled and its JSON bytes.
    let mut index = 0u64;
    let mut batch: Vec<LoadRecord> = Vec::new();
    let mut batch_bytes = 0usize;
    let mut done = plan.start;
    let mut batches = 0u64;
    let mut written = 0u64;
    let mut failed: Option<String> = None;
    let max_records = usize::try_from(a.batch).unwrap_or(usize::MAX).max(1);
    // Sends the batch of records [done, done + len); false (and `failed`) if it did not land.
    let mut send = |batch: &mut Vec<LoadRecord>, done: &mut u64, failed: &mut Option<String>| -> bool {
        let end = *done + batch.len() as u64;
        let request = LoadBatch {
            table: a.table.clone(),
            id: plan.id.clone(),
            file: file.clone(),
            options: options.clone(),
            start: *done,
            total,
            records: std::mem::take(batch),
        };
        match api.call::<ep::Load>(request) {
            Ok(progress) => {
                *done = progress.done.max(end);
                written += progress.written;
                bar.set_position(*done);
                batches += 1;
                if stop_after == Some(batches) && *done < total {
                    *failed = Some(format!(
                        "stopped after {} ({STOP_AFTER_ENV}); {}",
                        plural(batches, "batch", "batches"),
                        loaded_so_far(*done, total, &name)
                    ));
                    return false;
                }
                true
            }
            Err(e) => {
                *failed =
                    Some(format!("{e}\n{}; run the same command again to resume", loaded_so_far(*done, total, &name)));
                false
            }
        }
    };
    let reread = records(&mut |r| {
        let i = index;
        index += 1;
        // Records before the checkpoint are loaded already; a batch may also have been taken
        // further by another run of this load.
        if i < done {
            return ControlFlow::Continue(());
        }
        if !batch.is_empty() && (batch.len() >= max_records || batch_bytes + r.size > load::MAX_BATCH_BYTES) {
            batch_bytes = 0;
            if !send(&mut batch, &mut done, &mut failed) {
                return ControlFlow::Break(());
            }
            if i < done {
                return ControlFlow::Continue(());
            }
        }
        batch_bytes += r.size;
        batch.push(r.record);
        ControlFlow::Continue(())
    });
    if failed.is_none() && !batch.is_empty() {
        send(&mut batch, &mut done, &mut failed);
    }
    report_peak_rss();
    if let Some(f) = failed {
        bar.abandon();
        return Err(f);
    }
    if let Err(e) = reread {
        bar.abandon();
        return Err(format!("{e}\n{}", loaded_so_far(done, total, &name)));
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

/// With `PERCOLATOR_LOAD_PEAK_RSS` set (tests), prints the process's peak resident set size
/// (`VmHWM` of `/proc/self/status`) to stderr: how the bounded memory of a load is checked.
fn report_peak_rss() {
    if std::env::var_os("PERCOLATOR_LOAD_PEAK_RSS").is_none() {
        return;
    }
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(kb) = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))
    {
        eprintln!("peak RSS: {}", kb.trim());
    }
}

/// `loaded so far: 4 of 7 records of f.jsonl`.
fn loaded_so_far(done: u64, total: u64, name: &str) -> String {
    format!("loaded so far: {done} of {} of {name}", plural(total, "record", "records"))
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

/// A percentile of the run time (an upper bucket bound, so a few significant digits).
fn run_ms(ms: f64) -> String {
    if ms < 1.0 {
        format!("{ms:.2} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// `hot-rows` for people: a table of the cells, most conflicts first, or a line saying there
/// are none.
pub(crate) fn render_hot_rows(r: &HotRowsReport) -> String {
    let window = plural(r.minutes, "minute", "minutes");
    if r.rows.is_empty() {
        return if r.host {
            format!("no observer run lost to a conflict in the last {window}\n")
        } else {
            "no host is running: conflicts are counted by a host's observer runs (start one with `percolator up`)\n"
                .to_owned()
        };
    }
    let mut rows = vec![["CELL", "CONFLICTS", "BINDINGS", "LAST"].map(String::from).to_vec()];
    for h in &r.rows {
        let observers: Vec<String> = h.observers.iter().map(|o| format!("{} ({})", o.observer, o.conflicts)).collect();
        rows.push(vec![escape(&h.cell), h.conflicts.to_string(), observers.join(", "), h.last_at.clone()]);
    }
    format!("observer runs lost to conflicts in the last {window}, by the cell they were on:\n{}", table(&rows))
}

/// `status` for people.
pub(crate) fn render_status(s: &StatusReport) -> String {
    let mut out = String::new();
    let st = &s.store;
    if let Some(e) = &s.config_error {
        out.push_str(&format!("configuration: does not load (loads are refused until it does): {}\n", escape(e)));
    }
    if let Some(f) = &st.store_failure {
        let why = if f.disk_full { "the disk is full" } else { "writing its file failed" };
        let then =
            format!("writes resume by themselves once one succeeds ({} tried)", plural(f.probes, "probe", "probes"));
        out.push_str(&format!("store: READ-ONLY since {}: {why}; {then}: {}\n", f.since, escape(&f.error)));
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
            if !st.registered.is_empty() {
                let names: Vec<&str> = st.registered.iter().map(|b| b.name.as_str()).collect();
                out.push_str(&format!("bindings in the store: {}\n", names.join(", ")));
            }
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
            for c in &h.compiling {
                if h.generation == 0 {
                    // The first load: nothing serves yet.
                    out.push_str(&format!(
                        "starting: compiling {} of {} components: {} for binding {} ({:.1} s so far)\n",
                        c.index,
                        c.total,
                        c.wasm,
                        c.binding,
                        c.elapsed_ms as f64 / 1000.0
                    ));
                } else {
                    out.push_str(&format!(
                        "compiling: {} for binding {} ({:.1} s so far; the current version serves meanwhile)\n",
                        c.wasm,
                        c.binding,
                        c.elapsed_ms as f64 / 1000.0
                    ));
                }
            }
            if h.bindings.is_empty() {
                out.push_str("bindings: none\n");
            } else {
                out.push_str("bindings:\n");
                let mut rows = vec![
                    [
                        "NAME",
                        "OBSERVES",
                        "KIND",
                        "WASM",
                        "HASH",
                        "LOADED",
                        "RUNS",
                        "COMMITTED",
                        "CONFLICTS",
                        "FAILURES",
                        "P50 / P99",
                        "CPU",
                        "BACKLOG",
                    ]
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
                        b.committed.to_string(),
                        b.lost_to_conflict.to_string(),
                        match b.failures_last_minute {
                            0 => b.failures.to_string(),
                            recent => format!("{} ({recent} in the last minute)", b.failures),
                        },
                        match (b.p50_run_ms, b.p99_run_ms) {
                            (Some(p50), Some(p99)) => format!("{} / {}", run_ms(p50), run_ms(p99)),
                            _ => "-".into(),
                        },
                        // The runs' CPU over the store's life: where the pipeline's CPU goes.
                        run_ms(b.run_cpu_s * 1000.0),
                        count(b.backlog, b.backlog_capped),
                    ]);
                }
                out.push_str(&table(&rows));
            }
            // Hosts that share a store share its registry of bindings, not their components.
            let missing: Vec<&str> = st
                .registered
                .iter()
                .filter(|r| !h.bindings.iter().any(|b| b.name == r.name))
                .map(|r| r.name.as_str())
                .collect();
            if !missing.is_empty() {
                out.push_str(&format!(
                    "bindings in the store that this host has no component for (another host runs them): {}\n",
                    missing.join(", ")
                ));
            }
            let unregistered: Vec<&str> = h
                .bindings
                .iter()
                .filter(|b| !st.registered.iter().any(|r| r.name == b.name))
                .map(|b| b.name.as_str())
                .collect();
            if !unregistered.is_empty() {
                out.push_str(&format!(
                    "bindings loaded here but no longer in the store (another host replaced the bindings; \
                     they do not run): {}\n",
                    unregistered.join(", ")
                ));
            }
            let t = &h.throughput;
            if t.window_secs < 0.5 {
                out.push_str("throughput: not measured yet (the host samples its counters every second)\n");
            } else {
                out.push_str(&format!(
                    "throughput (last {:.0} s): {:.1} observer runs/s, {:.1} commits/s, {:.1} conflicts/s\n",
                    t.window_secs, t.observer_runs_per_sec, t.commits_per_sec, t.conflicts_per_sec
                ));
                if t.store_failures_per_sec > 0.0 {
                    out.push_str(&format!(
                        "observer runs waiting on the store: {:.1}/s met a failure of the store itself (a full \
                         disk, a server out of reach, a lapsed lease; the log says which) and run again a second \
                         later, counting no attempt\n",
                        t.store_failures_per_sec
                    ));
                }
            }
            out.push_str(&format!(
                "store: {}: {}, {}, {}, {}\n",
                st.path,
                plural(h.metrics.get("commits").copied().unwrap_or(0), "commit", "commits"),
                plural(h.metrics.get("conflicts").copied().unwrap_or(0), "conflict", "conflicts"),
                plural(
                    count(st.pending_notifications, st.pending_capped),
                    "pending notification",
                    "pending notifications"
                ),
                plural(st.dead_letters, "dead letter", "dead letters")
            ));
            sinks_text(&mut out, &h.sinks);
        }
    }
    for p in &st.pins {
        let state = if p.expired { "expired" } else { "expires" };
        out.push_str(&format!("pinned snapshot: {} (pin {}, {state} {})\n", p.ts, p.id, p.expires));
    }
    if !st.logged_columns.is_empty() {
        out.push_str(&format!("change log: {} (kept above {})\n", st.logged_columns.join(", "), st.changes_trimmed_to));
    }
    if !st.combined_columns.is_empty() {
        out.push_str(&format!(
            "combined: {} ({} of {} folded)\n",
            st.combined_columns.join(", "),
            plural(st.combine_folds, "fold", "folds"),
            plural(st.combine_deltas_folded, "delta", "deltas")
        ));
    }
    for s in &st.subscriptions {
        let at = s.position.map_or("nothing delivered yet".to_owned(), |p| format!("at {p}"));
        let owner = s.owner.map_or(String::new(), |o| format!(", delivered by worker {o}"));
        out.push_str(&format!("subscription {}: {at}{owner}\n", s.name));
    }
    out
}

/// The sinks' lines of `status`.
fn sinks_text(out: &mut String, sinks: &[percolator_api::SinkReport]) {
    if sinks.is_empty() {
        return;
    }
    out.push_str(
        "sinks:
",
    );
    for s in sinks {
        let position = s.position.map_or_else(|| "-".to_owned(), |p| p.to_string());
        let state = if s.owner {
            match s.lag_secs {
                Some(l) if l > 0.0 => format!("delivering, {l:.1} s behind"),
                Some(_) => "caught up".to_owned(),
                None => "starting".to_owned(),
            }
        } else {
            match s.owner_id {
                Some(id) => format!("standby (worker {id} delivers)"),
                None => "standby".to_owned(),
            }
        };
        out.push_str(&format!(
            "  {} ({} -> {}): {state}, position {position}, {} delivered ({:.1}/s)\n",
            s.name, s.kind, s.destination, s.delivered, s.delivered_per_sec
        ));
        if let Some(e) = &s.last_error {
            out.push_str(&format!("    last error ({} failed attempts): {e}\n", s.failures));
        }
        if !s.dead_letters.is_empty() {
            out.push_str(&format!("    {} refused batches parked (dead letters):\n", s.dead_letters.len()));
            for d in &s.dead_letters {
                out.push_str(&format!("      {} ({} changes): {}\n", d.file, d.changes, d.error));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_cell_as_json_is_text_where_it_can_be_and_base64_where_not() {
        let text = json_value(&cell_json("t", b"r1", "c:v", "h\u{e9}\n".as_bytes(), 42));
        assert_eq!(
            text,
            serde_json::json!({"table": "t", "row": "r1", "column": "c:v", "value": "h\u{e9}\n", "commit_ts": 42})
        );
        let bytes = json_value(&cell_json("t", b"\xff", "c:v", &[0, 0xfe, 1], 7));
        assert_eq!(
            bytes,
            serde_json::json!({"table": "t", "row_base64": "/w==", "column": "c:v", "value_base64": "AP4B", "commit_ts": 7})
        );
    }

    fn json_value(line: &str) -> serde_json::Value {
        assert!(!line.contains('\n'), "one line: {line}");
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn ttls_and_timestamps_are_read_or_refused_in_words() {
        assert_eq!(ttl("90s"), Ok(90));
        assert_eq!(ttl("10m"), Ok(600));
        assert_eq!(ttl("2h"), Ok(7200));
        assert_eq!(ttl("7d"), Ok(7 * 86_400));
        assert_eq!(ttl(" 45 "), Ok(45));
        for bad in ["", "m", "1.5h", "10 m", "-1m", "1w"] {
            assert!(ttl(bad).unwrap_err().contains("is not a duration"), "{bad}");
        }
        assert!(ttl("0s").unwrap_err().contains("more than zero"));
        assert!(ttl("604801").unwrap_err().contains("a week"));
        assert!(ttl("18446744073709551615d").unwrap_err().contains("a week"));
        assert_eq!(timestamp("17"), Ok(17));
        for bad in ["0", "-1", "x", "1e3", ""] {
            assert!(timestamp(bad).unwrap_err().contains("is not a timestamp"), "{bad}");
        }
    }

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
        usage(&["scan", "t", "--limit", "0"], "for '--limit <LIMIT>': must be at least 1");
        usage(&["scan", "t", "--limit", "ten"], "\"ten\" is not a whole number");
        usage(&["load", "t", "f.jsonl", "--batch", "0"], "must be from 1 to 100000");
        usage(&["wait", "--timeout", "1e19"], "must be at most 3600 seconds");
        usage(&["wait", "--timeout=-1"], "\"-1\" is not a number of seconds");
        usage(&["wait", "--timeout", "NaN"], "\"NaN\" is not a number of seconds");
        for ok in [
            &["scan", "t", "--limit", "1"][..],
            &["scan", "t", "--limit", "1000000000"],
            &["load", "t", "f", "--batch", "100000"],
            &["wait", "--timeout", "3600"],
            &["wait", "--timeout", "0.5"],
        ] {
            parse(ok).unwrap();
        }
    }

    /// Several hosts share the store's bindings, not their components: `status` names the
    /// bindings this host cannot run and those it loaded that the store no longer has.
    #[test]
    fn status_names_bindings_the_store_and_this_host_do_not_share() {
        use percolator_api::{BindingReport, HostReport, RegisteredBinding, Throughput};
        let registered = |name: &str| RegisteredBinding {
            name: name.into(),
            table: "t".into(),
            column: "c".into(),
            kind: "strong".into(),
        };
        let binding = |name: &str| BindingReport {
            name: name.into(),
            table: "t".into(),
            column: "c".into(),
            kind: "strong".into(),
            writes: Vec::new(),
            wasm: format!("observers/{name}.wasm"),
            source_hash: "0".repeat(64),
            loaded_at: "2026-11-23T00:00:00Z".into(),
            runs: 0,
            committed: 0,
            lost_to_conflict: 0,
            successes: 0,
            failures: 0,
            failures_last_minute: 0,
            mean_run_ms: None,
            run_cpu_s: 0.0,
            p50_run_ms: None,
            p90_run_ms: None,
            p99_run_ms: None,
            freshness: Default::default(),
            freshness_untimed: 0,
            freshness_p50_ms: None,
            freshness_p99_ms: None,
            backlog: 0,
            backlog_capped: false,
        };
        let s = StatusReport {
            host: Some(HostReport {
                url: "http://127.0.0.1:1".into(),
                pid: 1,
                started_at: "2026-11-23T00:00:00Z".into(),
                generation: 1,
                loaded_at: None,
                last_error: None,
                compiling: Vec::new(),
                bindings: vec![binding("both"), binding("local")],
                throughput: Throughput {
                    window_secs: 0.0,
                    observer_runs_per_sec: 0.0,
                    commits_per_sec: 0.0,
                    conflicts_per_sec: 0.0,
                    timestamps_per_sec: 0.0,
                    store_failures_per_sec: 0.0,
                },
                metrics: Default::default(),
                sinks: Vec::new(),
            }),
            store: StoreReport {
                store_failure: None,
                path: "s".into(),
                pending_notifications: 0,
                pending_capped: false,
                dead_letters: 0,
                registered: vec![registered("both"), registered("remote")],
                size_bytes: None,
                versions_collected: 0,
                notify_buckets: 1,
                workers: vec![],
                pins: vec![],
                gc_safepoint: 0,
                logged_columns: Vec::new(),
                changes_trimmed_to: 0,
                subscriptions: Vec::new(),
                combined_columns: Vec::new(),
                combine_folds: 0,
                combine_deltas_folded: 0,
            },
            config_error: None,
        };
        let text = render_status(&s);
        assert!(text.contains("no component for (another host runs them): remote\n"), "{text}");
        assert!(
            text.contains("no longer in the store (another host replaced the bindings; they do not run): local\n"),
            "{text}"
        );
        let all_shared = StatusReport {
            store: StoreReport { registered: vec![registered("both"), registered("local")], ..s.store.clone() },
            ..s.clone()
        };
        let text = render_status(&all_shared);
        assert!(!text.contains("no component") && !text.contains("no longer in the store"), "{text}");
        assert!(!text.contains("waiting on the store"), "{text}");
        // Runs that meet a failure of the store (a Redis master out of reach, say) are said
        // apart from the throughput, while they happen.
        let mut outage = all_shared.clone();
        if let Some(h) = outage.host.as_mut() {
            h.throughput = Throughput { window_secs: 10.0, store_failures_per_sec: 3.2, ..h.throughput };
        }
        let text = render_status(&outage);
        assert!(text.contains("observer runs waiting on the store: 3.2/s met a failure of the store itself"), "{text}");
    }

    #[test]
    fn status_says_when_the_configuration_does_not_load() {
        let s = StatusReport {
            host: None,
            store: StoreReport {
                store_failure: None,
                path: "s.redb".into(),
                pending_notifications: 1,
                pending_capped: false,
                dead_letters: 0,
                registered: vec![],
                size_bytes: None,
                versions_collected: 0,
                notify_buckets: 1,
                workers: vec![],
                pins: vec![],
                gc_safepoint: 0,
                logged_columns: Vec::new(),
                changes_trimmed_to: 0,
                subscriptions: Vec::new(),
                combined_columns: Vec::new(),
                combine_folds: 0,
                combine_deltas_folded: 0,
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

    /// The store, where another run of the same load writes each batch just before this one.
    struct Racing {
        cx: percolator_server::ops::Context,
    }

    impl Calls for Racing {
        fn call<E: Op>(&self, r: E::Request) -> ApiResult<E::Response> {
            if E::PATH == ep::Load::PATH {
                let batch: LoadBatch = serde_json::from_value(serde_json::to_value(&r).unwrap()).unwrap();
                if batch.start == 0 {
                    percolator_server::ops::call::<ep::Load>(&self.cx, batch)?;
                }
            }
            percolator_server::ops::call::<E>(&self.cx, r)
        }
    }

    #[test]
    fn load_reports_the_records_this_run_wrote() {
        let store = percolator_store::Store::in_memory(Default::default()).unwrap();
        let cx = percolator_server::ops::Context {
            store,
            store_path: std::sync::Arc::new(PathBuf::from("mem")),
            store_name: "mem".into(),
            host: None,
            config_error: None,
            config: None,
        };
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
        let (total, columns) = (parsed.records.len() as u64, parsed.columns.clone());
        let records = std::sync::Mutex::new(parsed.records);
        let input = LoadInput {
            name: "f.jsonl".into(),
            total,
            columns,
            id: "0".repeat(32),
            options: opts.describe(),
            records: Box::new(move |each| {
                for (i, record) in records.lock().unwrap().iter().enumerate() {
                    let size = serde_json::to_vec(record).unwrap().len();
                    if each(load::Read1 { line: i as u64 + 1, record: record.clone(), size }).is_break() {
                        break;
                    }
                }
                Ok(())
            }),
        };
        let out = load_file(&Racing { cx }, &args, input).unwrap();
        assert!(out.starts_with("loaded 1 record into t in "), "{out}");
        assert!(out.ends_with(" s (2 more were written meanwhile by another run of this load)"), "{out}");
    }
}
