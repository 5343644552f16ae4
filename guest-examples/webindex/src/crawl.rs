//! A deterministic sample-crawl generator. (Skeleton: being written.)

/// One crawled page.
#[derive(Clone, Debug, PartialEq)]
pub struct CrawlPage {
    /// Normalized URL (the row key).
    pub url: String,
    /// The HTML.
    pub html: String,
    /// PageRank.
    pub pagerank: f64,
}

/// A crawl: first versions of every page, then re-crawls (later versions of some of them).
#[derive(Clone, Debug, PartialEq)]
pub struct Crawl {
    /// First crawl, one per URL.
    pub pages: Vec<CrawlPage>,
    /// Re-crawls, in order; each URL is one of `pages`' URLs.
    pub recrawls: Vec<CrawlPage>,
}

/// Generates a crawl of `pages` pages from `seed` (same arguments, same crawl).
pub fn generate(seed: u64, pages: usize) -> Crawl {
    let _ = (seed, pages);
    unimplemented!("skeleton")
}
