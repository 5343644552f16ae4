//! Table and column names, row keys and value encodings of `docs/webindex.md`.

/// Crawled pages and everything derived per URL.
pub const PAGES: &str = "pages";
/// Cluster members (`"<hash> <url>"`) and canonical URLs (`"<hash>"`).
pub const CLUSTERS: &str = "clusters";
/// Inverted links, `"<target> <source>"`.
pub const INLINKS: &str = "inlinks";
/// Inlinks forwarded to canonical pages, `"<canonical> <target>"`.
pub const FWD: &str = "fwd";
/// The inverted index, `"<term> <url>"`.
pub const INDEX: &str = "index";

/// Crawled HTML (input).
pub const RAW_HTML: &str = "raw:html";
/// PageRank, decimal text (input).
pub const RAW_PAGERANK: &str = "raw:pagerank";
/// Title.
pub const DOC_TITLE: &str = "doc:title";
/// Visible text.
pub const DOC_TEXT: &str = "doc:text";
/// Links, `target\tanchor\n` each.
pub const DOC_LINKS: &str = "doc:links";
/// Content hash.
pub const DOC_HASH: &str = "doc:hash";
/// The hash the page is registered under in `clusters`.
pub const CLUSTER_HASH: &str = "cluster:hash";
/// The page's cluster's canonical URL.
pub const CLUSTER_CANONICAL: &str = "cluster:canonical";
/// Targets with published inlinks from this page.
pub const LINK_OUT: &str = "link:out";
/// Trigger: this URL's inlinks changed.
pub const LINK_DIRTY: &str = "link:dirty";
/// Where this URL's inlinks are forwarded.
pub const FWD_TO: &str = "fwd:to";
/// Trigger: re-export this URL.
pub const EXPORT_DIRTY: &str = "export:dirty";
/// Exported terms, `term\tcount\n` each.
pub const EXPORT_TERMS: &str = "export:terms";
/// Member PageRank (in `clusters`).
pub const MEMBER_PAGERANK: &str = "member:pagerank";
/// Canonical URL (in `clusters`).
pub const CANON_URL: &str = "canon:url";
/// Anchors of source → target (in `inlinks`).
pub const LINK_ANCHOR: &str = "link:anchor";
/// Forwarded inlinks (in `fwd`).
pub const FWD_ANCHORS: &str = "fwd:anchors";
/// Occurrences of a term (in `index`).
pub const HIT_COUNT: &str = "hit:count";

/// The row key `"a b"`.
pub fn join_row(a: &str, b: &str) -> Vec<u8> {
    let mut row = Vec::with_capacity(a.len() + 1 + b.len());
    row.extend_from_slice(a.as_bytes());
    row.push(b' ');
    row.extend_from_slice(b.as_bytes());
    row
}

/// The row range `["a ", "a!")`: every `join_row(a, _)`.
pub fn prefix_range(a: &str) -> (Vec<u8>, Vec<u8>) {
    let mut start = a.as_bytes().to_vec();
    let mut end = start.clone();
    start.push(b' ');
    end.push(b'!');
    (start, end)
}

/// Splits `"a b"` at its first space.
pub fn split_row(row: &[u8]) -> Option<(&str, &str)> {
    std::str::from_utf8(row).ok()?.split_once(' ')
}
