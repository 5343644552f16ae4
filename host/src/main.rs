//! `percolator`: the host binary.
//!
//! This first cut offers the store's own tools over an embedded redb store; serving Wasm
//! observers (`percolator up`) is built on top of it by the host issue.
//!
//! ```text
//! percolator get <store.redb> <table> <row> <column>
//! percolator scan <store.redb> <table> [limit]
//! percolator gc <store.redb>
//! percolator dead-letters <store.redb>
//! ```

use std::process::ExitCode;

use percolator_store::{RedbConfig, Store, StoreConfig};

const USAGE: &str = "usage:
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
