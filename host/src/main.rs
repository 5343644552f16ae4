//! `percolator`: the host binary. Parses the command line, installs logging, runs the command
//! ([`cli::run`]: `up` is `percolator_server::serve::up`, the other verbs are
//! `percolator_server` commands reached through a `Route`) and prints its error once.

/// mimalloc instead of glibc's malloc: malloc/free were ≈ 17 % of a web-index load's pipeline
/// CPU under glibc (arena consolidation and chunk unlinking among the top symbols);
/// BENCHMARKS.md, "Fifth round"; transparent huge pages off at start ("Sixth round").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
