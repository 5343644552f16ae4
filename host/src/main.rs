//! `percolator`: the host binary. Parses the command line, installs logging, runs the command
//! ([`cli::run`]: `up` is `percolator_server::serve::up`, the other verbs are
//! `percolator_server` commands reached through a `Route`) and prints its error once.

/// jemalloc instead of glibc's malloc: malloc/free were ≈ 17 % of a web-index load's pipeline
/// CPU under glibc (BENCHMARKS.md, "Fifth round"), and mimalloc, which replaced it then, still
/// took ≈ 17 % at 30,000 pages, most of it missing the cache on its free lists; jemalloc's
/// thread caches hand back the block freed last, still in the cache ("Twenty-first round").
/// Transparent huge pages off at start ("Sixth round").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command};

mod cli;
mod project;

fn main() -> ExitCode {
    percolator_server::memory::without_transparent_huge_pages();
    let cli = Cli::parse();
    // `up` logs at info by default; the other commands only warnings (RUST_LOG overrides).
    let default = if matches!(cli.command, Command::Up { .. }) { "info" } else { "warn" };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
        )
        .init();
    match cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("percolator: {e}");
            ExitCode::FAILURE
        }
    }
}
