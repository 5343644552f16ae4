//! `webindex`: the paper's web index as an application of the percolator host.
//!
//! The pipeline itself is four observer components (`guest-examples/`) bound by
//! `config/web-index.toml` and served by `percolator up`; this binary adds what only the web
//! index knows: `sample-crawl` writes a generated crawl to load, and `query` searches the
//! exported index. `query` reads through the host's public API (a paged prefix scan per term,
//! then a `get` per hit), from a running host or, when none runs, from the store file — the
//! same two routes as every `percolator` verb.
//!
//! ```text
//! webindex sample-crawl --out target/demo
//! percolator up config/web-index.toml &
//! percolator --config config/web-index.toml load pages target/demo/crawl.jsonl --key url
//! webindex query snapshot isolation
//! ```

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use percolator_api::endpoint as ep;
use percolator_api::text::{escape, plural};
use percolator_api::{ApiError, ApiResult, ErrorKind, GetRequest, MAX_SCAN_LIMIT, ScanRequest};
use percolator_server::route::{self, Route};
use webindex::{rank, schema};

/// `webindex`: search the web index and generate sample crawls for it.
#[derive(Debug, Parser)]
#[command(name = "webindex", version, max_term_width = 100)]
struct Cli {
    /// The web index's pipeline configuration (TOML): where its store is, how to reach its host.
    #[arg(
        long,
        global = true,
        env = "PERCOLATOR_CONFIG",
        default_value = "config/web-index.toml",
        help_heading = "Global options"
    )]
    config: PathBuf,
    /// Talk to the host at this base URL (e.g. http://127.0.0.1:7878) instead of finding it
    /// through the configuration.
    #[arg(long, global = true, value_name = "URL", help_heading = "Global options")]
    url: Option<String>,
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Search the web index: pages with every term of the words, best first.
    Query {
        /// The words.
        #[arg(required = true)]
        words: Vec<String>,
        /// At most this many results.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
        limit: u64,
    },
    /// Write a generated sample crawl: DIR/crawl.jsonl (first crawl) and DIR/recrawl.jsonl
    /// (re-crawls), fields url, html, pagerank.
    SampleCrawl {
        /// Output folder (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Pages in the first crawl (at most 1000000).
        #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        pages: u64,
        /// Random seed (same seed, same crawl).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The link graph: `uniform` (every page a few inlinks), `hubs` (a few pages linked
        /// from most pages, power-law inlinks, as on documentation and news sites) or `docs`
        /// (documentation sites shaped after a real crawl: pages of 4.5 KB median up to ~3 MB,
        /// navigation blocks of hundreds of links, a third of the pages mirror copies).
        #[arg(long, value_enum, default_value_t = ShapeArg::Uniform)]
        shape: ShapeArg,
    },
}

/// `--shape` of `sample-crawl`: [`webindex::crawl::Shape`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ShapeArg {
    /// Links drawn uniformly.
    Uniform,
    /// Hubs linked from most pages, power-law inlinks.
    Hubs,
    /// Documentation sites with a real crawl's page sizes, navigation and copies.
    Docs,
}

impl From<ShapeArg> for webindex::crawl::Shape {
    fn from(shape: ShapeArg) -> Self {
        match shape {
            ShapeArg::Uniform => webindex::crawl::Shape::Uniform,
            ShapeArg::Hubs => webindex::crawl::Shape::Hubs,
            ShapeArg::Docs => webindex::crawl::Shape::Docs,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let result = match &cli.command {
        Command::SampleCrawl { out, pages, seed, shape } => sample_crawl(out, *pages, *seed, (*shape).into()),
        Command::Query { words, limit } => route::connect(&cli.config, cli.url.as_deref(), false)
            .and_then(|route| print_query(&route, words, usize::try_from(*limit).unwrap_or(10))),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("webindex: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One page found.
#[derive(Clone, Debug, PartialEq)]
struct Hit {
    url: String,
    score: f64,
    title: Option<String>,
}

/// What a query found: its terms, the best hits, and how many pages matched.
struct Found {
    terms: Vec<String>,
    hits: Vec<Hit>,
    matched: usize,
}

fn print_query(route: &Route, words: &[String], limit: usize) -> Result<ExitCode, String> {
    let found = query(route, words, limit)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    for (rank, h) in found.hits.iter().enumerate() {
        let title = h.title.as_deref().map(escape).unwrap_or_default();
        writeln!(out, "{}\t{}\t{:.3}\t{title}", rank + 1, h.url, h.score)
            .map_err(|e| format!("writing the output: {e}"))?;
    }
    if found.hits.is_empty() {
        eprintln!("webindex: no page has every term ({})", found.terms.join(", "));
    } else if found.matched > found.hits.len() {
        eprintln!("webindex: {} match; showing the best {}", plural(found.matched, "page", "pages"), found.hits.len());
    }
    Ok(ExitCode::SUCCESS)
}

/// The store, as the ranking reads it (`webindex::rank::Source`): through the host's public API.
struct ApiSource<'a>(&'a Route);

/// A row bound as the API takes it (row keys of the web index are UTF-8).
fn text(bytes: &[u8]) -> ApiResult<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ApiError::bad_input("a row bound of the web index is not UTF-8"))
}

/// The exact bytes of a cell's value or row (sent as hex too).
fn bytes(hex: &str) -> ApiResult<Vec<u8>> {
    percolator_api::text::unhex(hex).ok_or_else(|| ApiError::store(format!("the host sent bad hex {hex:?}")))
}

/// More rows than this are read with one scan of the table instead of a `get` each.
const GETS_AT_MOST: usize = 64;

impl rank::Source for ApiSource<'_> {
    type Error = ApiError;

    fn scan(&self, table: &str, start: &[u8], end: &[u8], column: &str) -> ApiResult<rank::Cells> {
        self.scan_rows(table, Some(text(start)?), Some(text(end)?), column)
    }

    fn get_many(&self, table: &str, rows: &[Vec<u8>], column: &str) -> ApiResult<Vec<Option<Vec<u8>>>> {
        if rows.len() > GETS_AT_MOST {
            // One paged scan of the column instead of a request per row.
            let all: std::collections::BTreeMap<Vec<u8>, Vec<u8>> =
                self.scan_rows(table, None, None, column)?.into_iter().collect();
            return Ok(rows.iter().map(|r| all.get(r).cloned()).collect());
        }
        rows.iter()
            .map(|row| {
                let get = GetRequest { table: table.into(), row: text(row)?, column: column.into(), at: None };
                match self.0.call::<ep::Get>(get) {
                    Ok(v) => bytes(&v.value_hex).map(Some),
                    Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .collect()
    }
}

impl ApiSource<'_> {
    /// `(row, value)` of `column` in the rows `[start, end)` (`None`: unbounded), every page.
    fn scan_rows(
        &self,
        table: &str,
        start: Option<String>,
        end: Option<String>,
        column: &str,
    ) -> ApiResult<rank::Cells> {
        let mut cells = Vec::new();
        let mut after = None;
        loop {
            let page = self.0.call::<ep::Scan>(ScanRequest {
                table: table.into(),
                start: start.clone(),
                end: end.clone(),
                columns: Some(vec![column.into()]),
                limit: MAX_SCAN_LIMIT,
                after: after.take(),
                ..Default::default()
            })?;
            for c in &page.cells {
                cells.push((bytes(&c.row_hex)?, bytes(&c.value_hex)?));
            }
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(cells),
            }
        }
    }
}

/// Pages having every term of `words`, ranked by BM25 with a PageRank prior
/// (`webindex::rank`, `docs/webindex.md`).
fn query(route: &Route, words: &[String], limit: usize) -> Result<Found, String> {
    let terms = rank::query_terms(&words.join(" "));
    if terms.is_empty() {
        return Err(format!(
            "no searchable terms in {:?} (terms are runs of 2-32 letters or digits that are not stop words)",
            words.join(" ")
        ));
    }
    let ranked = rank::search(&ApiSource(route), &terms, &rank::Params::DEFAULT).map_err(|e| e.to_string())?;
    let matched = ranked.len();
    let mut hits = Vec::with_capacity(limit.min(matched));
    for h in ranked.into_iter().take(limit) {
        hits.push(Hit { title: title(route, &h.url)?, url: h.url, score: h.score });
    }
    Ok(Found { terms, hits, matched })
}

/// `pages/<url>/doc:title`, if it has one.
fn title(route: &Route, url: &str) -> ApiResult<Option<String>> {
    let get = GetRequest { table: schema::PAGES.into(), row: url.into(), column: schema::DOC_TITLE.into(), at: None };
    match route.call::<ep::Get>(get) {
        Ok(v) => Ok(Some(v.value)),
        Err(e) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

fn sample_crawl(out: &Path, pages: u64, seed: u64, shape: webindex::crawl::Shape) -> Result<ExitCode, String> {
    let pages = usize::try_from(pages).map_err(|_| format!("--pages {pages} is too many for this machine"))?;
    std::fs::create_dir_all(out).map_err(|e| format!("{}: cannot create: {e}", out.display()))?;
    let crawl = webindex::crawl::generate_shaped(seed, pages, shape);
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_option_values_are_usage_errors() {
        let parse = |args: &[&str]| Cli::try_parse_from(std::iter::once("webindex").chain(args.iter().copied()));
        let e = parse(&["query", "x", "--limit", "0"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let e = parse(&["sample-crawl", "--out", "d", "--pages", "0"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        parse(&["query", "x", "--limit", "1"]).unwrap();
        let e = parse(&["sample-crawl", "--out", "d", "--shape", "stars"]).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        parse(&["sample-crawl", "--out", "d", "--shape", "hubs"]).unwrap();
        parse(&["sample-crawl", "--out", "d", "--shape", "docs"]).unwrap();
    }
}
