//! `percolator`: the host binary.
//!
//! `percolator up <config.toml>` serves a pipeline: it opens the store, loads the bindings'
//! observer components, runs the scanner and hot-reloads the configuration and the observers
//! folder until it is killed (the store is crash-safe). The other commands are store tools
//! that open the redb file directly (so they run when no host is serving it).
//!
//! ```text
//! percolator up <config.toml>
//! percolator get <store.redb> <table> <row> <column>
//! percolator scan <store.redb> <table> [limit]
//! percolator gc <store.redb>
//! percolator dead-letters <store.redb>
//! ```

use std::process::ExitCode;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use percolator_host::config::Config;
use percolator_host::pipeline::Pipeline;
use percolator_host::{Runtime, reload};
use percolator_store::{RedbConfig, ScannerConfig, Store, StoreConfig};

const USAGE: &str = "usage:
  percolator up <config.toml>
  percolator get <store.redb> <table> <row> <column>
  percolator scan <store.redb> <table> [limit]
  percolator gc <store.redb>
  percolator dead-letters <store.redb>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("percolator: {e}");
            ExitCode::from(2)
        }
    }
}

fn open(path: &str) -> Result<Store, String> {
    Store::open(path, StoreConfig::default(), RedbConfig::default()).map_err(|e| format!("{path}: {e}"))
}

fn run(args: &[String]) -> Result<(), String> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["up", config] => up(Path::new(config))?,
        ["get", path, table, row, column] => {
            let store = open(path)?;
            let txn = store.begin().map_err(|e| e.to_string())?;
            match txn.get(table, row, column).map_err(|e| e.to_string())? {
                Some(v) => println!("{}", String::from_utf8_lossy(&v)),
                None => return Err(format!("{table}/{row}/{column}: no value")),
            }
        }
        ["scan", path, table, rest @ ..] if rest.len() <= 1 => {
            let limit = match rest.first() {
                Some(l) => l.parse::<usize>().map_err(|_| format!("limit {l:?} is not a number"))?,
                None => 100,
            };
            let store = open(path)?;
            let txn = store.begin().map_err(|e| e.to_string())?;
            for e in txn.scan(table, b"", None, None, limit).map_err(|e| e.to_string())? {
                println!("{}\t{}\t{}", String::from_utf8_lossy(&e.row), e.column, String::from_utf8_lossy(&e.value));
            }
        }
        ["gc", path] => {
            let stats = open(path)?.gc().map_err(|e| e.to_string())?;
            println!(
                "safepoint {} rows {} locks_resolved {} versions_removed {}",
                stats.safepoint, stats.rows, stats.locks_resolved, stats.versions_removed
            );
        }
        ["dead-letters", path] => {
            for d in open(path)?.dead_letters().map_err(|e| e.to_string())? {
                println!("{}\t{}\t{}\tattempts={}\t{}", d.id, d.cell, d.observer, d.attempts, d.error);
            }
        }
        _ => return Err(format!("unrecognized arguments {args:?}\n{USAGE}")),
    }
    Ok(())
}

/// Serves the pipeline of `config` until the process is killed.
fn up(config_path: &Path) -> Result<(), String> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = Config::load(config_path).map_err(|e| e.to_string())?;
    let store = Store::open(
        &config.store_path,
        StoreConfig::default(),
        RedbConfig { durability: config.durability, ..RedbConfig::default() },
    )
    .map_err(|e| format!("{}: {e}", config.store_path.display()))?;
    let runtime = Runtime::new(Some(config.cache_dir.clone())).map_err(|e| format!("{e:#}"))?;
    let pipeline = Arc::new(Pipeline::new(store.clone(), runtime));
    pipeline.apply(&config)?;
    let _scanner = store.start_scanner(ScannerConfig { threads: config.scanner_threads, ..ScannerConfig::default() });
    let _reloader = reload::watch(pipeline.clone(), &config.file, &config.observers_dir, Duration::from_millis(200))
        .map_err(|e| format!("watching for changes: {e}"))?;
    tracing::info!(store = %config.store_path.display(), observers = %config.observers_dir.display(), "serving");
    loop {
        std::thread::sleep(Duration::from_secs(10));
        let m = store.metrics();
        tracing::info!(
            commits = m.commits,
            observer_runs = m.observer_runs,
            observer_failures = m.observer_failures,
            dead_letters = m.dead_letters,
            conflicts = m.conflicts,
            "status"
        );
    }
}
