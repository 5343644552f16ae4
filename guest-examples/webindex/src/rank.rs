//! Ranking a query against the inverted index: BM25 with a PageRank prior
//! (`docs/webindex.md`, "Querying").
//!
//! A query is conjunctive: a page is a hit only if it has every query term. Its score is
//!
//! ```text
//! score(d) = Σ_t idf(t) · tf(t,d)·(k1 + 1) / (tf(t,d) + k1·(1 − b + b·len(d)/avglen))
//!          + w · pagerank(d) / (pagerank(d) + mean_pagerank)
//! idf(t)   = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))
//! ```
//!
//! with `tf(t,d)` the term's `hit:count` plus `anchor:count` (title, text and the anchors
//! forwarded to the page, one field), `n(t)` its number of postings, `len(d)` the page's
//! length (all its term occurrences), `N`, `avglen` and `mean_pagerank` over the exported pages,
//! and [`K1`], [`B`], [`PAGERANK_WEIGHT`] as `k1`, `b`, `w`. Hits are sorted by score, highest
//! first, then by URL (bytewise), so equal scores come out in one order.
//!
//! [`rank`] is pure: it takes what a client reads from the store (the postings of each term,
//! the length and PageRank of each candidate, the corpus statistics) and needs no store.
//! [`search`] reads them from any [`Source`] (a snapshot of the store seen through get-many
//! and range scans; the batch result [`Tables`] is one) and ranks:
//!
//! ```
//! use webindex::{batch, rank};
//!
//! let page = |title: &str, text: &str, pagerank: &str| {
//!     let html = format!("<title>{title}</title><p>{text}</p>");
//!     (Some(html.into_bytes()), Some(pagerank.as_bytes().to_vec()))
//! };
//! let chapter = "Ownership is how a program manages memory. Ownership rules: each value has an owner.";
//! let filler = "Cargo builds crates. Traits define shared behaviour. Closures capture values. ";
//! let mut inputs = batch::Inputs::new();
//! for i in 1..=9 {
//!     inputs.insert(format!("http://book.example/other{i}.html"), page(&format!("Chapter {i}"), filler, "1"));
//! }
//! inputs.insert("http://book.example/ch04.html".into(), page("Understanding Ownership", chapter, "1"));
//! let book = format!("Understanding Ownership. {chapter} {}", filler.repeat(40));
//! inputs.insert("http://book.example/print.html".into(), page("The Book", &book, "5"));
//! let tables = batch::compute(&inputs).unwrap();
//!
//! let terms = rank::query_terms("Ownership");
//! let hits = rank::search(&tables, &terms, &rank::Params::DEFAULT).unwrap();
//! let urls: Vec<&str> = hits.iter().map(|h| h.url.as_str()).collect();
//! // The book has "ownership" as often (and five times the PageRank), but it is 30 times longer.
//! assert_eq!(urls, ["http://book.example/ch04.html", "http://book.example/print.html"]);
//! assert!(hits[0].score > hits[1].score && hits[0].prior < hits[1].prior);
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::batch::Tables;
use crate::schema::{
    ANCHOR_COUNT, HIT_COUNT, INDEX, PAGES, RAW_PAGERANK, decode_count, length_range, prefix_range, split_row,
};
use crate::text;

/// BM25's term-frequency saturation `k1`: the 2nd occurrence of a term adds less than the
/// 1st, and no number of occurrences is worth more than `k1 + 1` times the term's IDF.
pub const K1: f64 = 1.2;
/// BM25's length normalization `b`: 0 ignores the length, 1 divides term frequencies by the
/// page's length relative to the average.
pub const B: f64 = 0.75;
/// The weight `w` of the PageRank prior `w · pagerank / (pagerank + mean_pagerank)`, which
/// saturates: 0 without PageRank, `w / 2` at the mean, `0.45` at 10 times it, never `w`. So the
/// prior decides between pages whose texts match about as well, and no PageRank, however
/// high, is worth more than half an occurrence of a term that one page in three has (one
/// occurrence in a page of average length scores `idf`, and such a term has `idf ≈ 1`).
pub const PAGERANK_WEIGHT: f64 = 0.5;

/// The ranking's parameters; [`Params::DEFAULT`] holds [`K1`], [`B`] and [`PAGERANK_WEIGHT`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// BM25 `k1` (term-frequency saturation).
    pub k1: f64,
    /// BM25 `b` (length normalization, 0 to 1).
    pub b: f64,
    /// Weight of the PageRank prior (0: BM25 alone).
    pub pagerank_weight: f64,
}

impl Params {
    /// `k1` = [`K1`], `b` = [`B`], `pagerank_weight` = [`PAGERANK_WEIGHT`].
    pub const DEFAULT: Params = Params { k1: K1, b: B, pagerank_weight: PAGERANK_WEIGHT };
}

impl Default for Params {
    fn default() -> Params {
        Params::DEFAULT
    }
}

/// One query term's postings: every exported page that has it, with its count.
///
/// Read from `index/["<term> ", "<term>!")` ([`prefix_range`] of the term): the row
/// `"<term> <url>"` holds the count of the term in `url`'s title and text (`hit:count`) and in
/// the anchors forwarded to it (`anchor:count`); the posting's count is their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Postings {
    /// The term.
    pub term: String,
    /// URL → occurrences of the term in the page. Its size is the term's document frequency,
    /// so it must hold every posting of the term, not only those of candidates.
    pub counts: BTreeMap<String, u64>,
}

/// What ranking needs of one page besides its postings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Document {
    /// All its term occurrences: `hit:count` plus `anchor:count` of `index/" <url>"`
    /// ([`length_row`](crate::schema::length_row)).
    pub length: u64,
    /// Its `pages/<url>/raw:pagerank`, parsed ([`text::parse_pagerank`]); absent counts as 0.
    pub pagerank: f64,
}

/// Corpus statistics: over every exported page.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Corpus {
    /// `N`: the number of exported pages (rows of [`length_range`]).
    pub documents: u64,
    /// Their mean length (0 when there are none).
    pub average_length: f64,
    /// Their mean PageRank, absent counted as 0 (0 when there are none). The prior measures
    /// PageRank against it, so that PageRank in any scale (summing to 1, averaging 1) ranks
    /// the same.
    pub mean_pagerank: f64,
}

impl Corpus {
    /// The statistics of these pages (every exported page, each once).
    pub fn from_documents<'a>(documents: impl IntoIterator<Item = &'a Document>) -> Corpus {
        let (mut n, mut length, mut pagerank) = (0u64, 0f64, 0f64);
        for d in documents {
            n += 1;
            length += d.length as f64;
            pagerank += d.pagerank;
        }
        if n == 0 {
            return Corpus { documents: 0, average_length: 0.0, mean_pagerank: 0.0 };
        }
        Corpus { documents: n, average_length: length / n as f64, mean_pagerank: pagerank / n as f64 }
    }
}

/// One ranked page.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The page (an exported, canonical URL).
    pub url: String,
    /// `bm25 + prior`: what hits are sorted by.
    pub score: f64,
    /// The BM25 part: how well the page's text matches the query.
    pub bm25: f64,
    /// The PageRank part, `w · pagerank / (pagerank + mean_pagerank)`, from 0 (no PageRank) to
    /// below `w`.
    pub prior: f64,
}

/// Why [`rank`] could not rank.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RankError {
    /// A candidate (a URL in every term's postings) has no [`Document`].
    MissingDocument {
        /// The candidate.
        url: String,
    },
}

impl fmt::Display for RankError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankError::MissingDocument { url } => {
                write!(f, "{url} has a posting for every query term but no length and PageRank were given for it")
            }
        }
    }
}

impl std::error::Error for RankError {}

/// The distinct terms of a query, sorted: [`text::terms`] of `words`, so a query term is
/// spelled as the index spells it. Empty when `words` has no searchable term (only stop words,
/// single characters, punctuation).
///
/// ```
/// assert_eq!(webindex::rank::query_terms("The Cat, the cat and DOGS"), ["cat", "dogs"]);
/// ```
pub fn query_terms(words: &str) -> Vec<String> {
    let mut terms = text::terms(words);
    terms.sort();
    terms.dedup();
    terms
}

/// The URLs in every one of `postings` (sorted; none when `postings` is empty): the pages a
/// conjunctive query matches, whose [`Document`] [`rank`] needs.
pub fn candidates(postings: &[Postings]) -> Vec<String> {
    let Some((first, rest)) = postings.split_first() else {
        return Vec::new();
    };
    first.counts.keys().filter(|url| rest.iter().all(|p| p.counts.contains_key(*url))).cloned().collect()
}

/// Ranks the pages that have every term of `postings` (one entry per query term; a repeated
/// term counts twice), highest score first, equal scores by URL.
///
/// `documents` must hold every [`candidates`] URL (others are ignored); `corpus` describes all
/// exported pages. No postings, or a term without postings, gives no hits. Fails only if a
/// candidate has no document.
pub fn rank(
    postings: &[Postings],
    documents: &BTreeMap<String, Document>,
    corpus: &Corpus,
    params: &Params,
) -> Result<Vec<Hit>, RankError> {
    let idfs: Vec<f64> = postings.iter().map(|p| idf(corpus.documents, p.counts.len() as u64)).collect();
    let mut hits = Vec::new();
    for url in candidates(postings) {
        let Some(doc) = documents.get(&url) else {
            return Err(RankError::MissingDocument { url });
        };
        // In the order of `postings`, so equal inputs give bit-for-bit equal scores.
        let bm25: f64 = postings
            .iter()
            .zip(&idfs)
            .map(|(p, idf)| idf * saturated_tf(p.counts[&url], doc.length, corpus.average_length, params))
            .sum();
        let prior = prior(doc.pagerank, corpus.mean_pagerank, params.pagerank_weight);
        hits.push(Hit { url, score: bm25 + prior, bm25, prior });
    }
    // Stable tie-breaking: the URLs are distinct, so this is a total order.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.url.cmp(&b.url)));
    Ok(hits)
}

/// BM25's IDF, in the form that is never negative (as Lucene's): a term in every page still
/// counts a little. A `frequency` above `documents` (statistics from another snapshot) counts
/// as a term in every page.
fn idf(documents: u64, frequency: u64) -> f64 {
    let (n, f) = (documents.max(frequency) as f64, frequency as f64);
    ((n - f + 0.5) / (f + 0.5)).ln_1p()
}

/// BM25's saturated, length-normalized term frequency, between 0 and `k1 + 1`.
fn saturated_tf(tf: u64, length: u64, average_length: f64, params: &Params) -> f64 {
    let tf = tf as f64;
    // Without an average (no pages, all empty) every page counts as average.
    let relative_length = if average_length > 0.0 { length as f64 / average_length } else { 1.0 };
    let norm = params.k1 * (1.0 - params.b + params.b * relative_length);
    if tf + norm > 0.0 { tf * (params.k1 + 1.0) / (tf + norm) } else { 0.0 }
}

/// The PageRank prior `w · pagerank / (pagerank + mean)`: a saturating function of PageRank
/// relative to the corpus (PageRank is a power law, a log prior would let a few pages' outsized
/// PageRank outweigh any text), 0 when the corpus has no PageRank; a non-finite or negative
/// PageRank counts as 0.
fn prior(pagerank: f64, mean: f64, weight: f64) -> f64 {
    if mean > 0.0 && pagerank > 0.0 && pagerank.is_finite() { weight * pagerank / (pagerank + mean) } else { 0.0 }
}

/// `(row, value)` pairs of one column, in row order: what [`Source::scan`] returns.
pub type Cells = Vec<(Vec<u8>, Vec<u8>)>;

/// Read access to the web index at one snapshot, as a client of the store has it.
///
/// [`search`] reads, in this order: the postings of each term
/// (`index/["<term> ", "<term>!")`, `hit:count` then `anchor:count`); only if some page has
/// every term, the lengths (`index/[" ", "!")`, [`length_range`]: `hit:count`, whose rows are
/// the exported pages, then `anchor:count`) and the PageRank of each exported page (`pages/<url>/raw:pagerank`, get-many). Read them all in one transaction, so that
/// postings and lengths agree.
pub trait Source {
    /// What a read fails with.
    type Error;

    /// `(row, value)` of every cell of `column` in the rows `[start, end)` of `table`, in row
    /// order: all of them, however many calls that takes. (The host caps each scan and may
    /// return a short page before the end: continue just after the last row returned, until a
    /// call returns nothing.)
    fn scan(&self, table: &str, start: &[u8], end: &[u8], column: &str) -> Result<Cells, Self::Error>;

    /// The value of `column` in each of `rows` of `table`, in order (`None`: absent).
    fn get_many(&self, table: &str, rows: &[Vec<u8>], column: &str) -> Result<Vec<Option<Vec<u8>>>, Self::Error>;
}

/// The batch result as a [`Source`]: ranking what [`batch::compute`](crate::batch::compute)
/// derives, as a store at the pipeline's fixed point would rank it.
impl Source for Tables {
    type Error = std::convert::Infallible;

    fn scan(&self, table: &str, start: &[u8], end: &[u8], column: &str) -> Result<Cells, Self::Error> {
        let Some(cells) = self.get(table) else {
            return Ok(Vec::new());
        };
        let from = (start.to_vec(), String::new());
        Ok(cells
            .range(from..)
            .take_while(|((row, _), _)| row.as_slice() < end)
            .filter(|((_, c), _)| c == column)
            .map(|((row, _), value)| (row.clone(), value.clone()))
            .collect())
    }

    fn get_many(&self, table: &str, rows: &[Vec<u8>], column: &str) -> Result<Vec<Option<Vec<u8>>>, Self::Error> {
        let cells = self.get(table);
        Ok(rows.iter().map(|row| cells.and_then(|t| t.get(&(row.clone(), column.to_owned()))).cloned()).collect())
    }
}

/// Why [`search`] failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum SearchError<E> {
    /// The source failed to read.
    Source(E),
    /// An `index` cell is not what the exporter writes (a row key that is not `"<term> <url>"`
    /// in UTF-8, a value that is not a decimal count).
    BadCell {
        /// `table/row/column`.
        cell: String,
        /// What is wrong with it.
        message: String,
    },
    /// A page has a posting for every query term but no length row `index/" <url>"`: it was
    /// exported before the exporter kept lengths; one more exporter run for it (notify
    /// `pages/<url>/export:dirty`) writes it.
    MissingLength {
        /// The page.
        url: String,
    },
}

impl<E: fmt::Display> fmt::Display for SearchError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SearchError::Source(e) => write!(f, "reading the index: {e}"),
            SearchError::BadCell { cell, message } => write!(f, "{cell}: {message}"),
            SearchError::MissingLength { url } => write!(
                f,
                "{url} is in the index but has no length ({INDEX}/\" {url}\"/{HIT_COUNT}): it was exported before lengths \
                 were kept; notify {PAGES}/{url}/export:dirty to export it again"
            ),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for SearchError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SearchError::Source(e) => Some(e),
            _ => None,
        }
    }
}

/// Reads what [`rank`] needs from `source` (see [`Source`] for the rows) and ranks the pages
/// that have every one of `terms` (give [`query_terms`]; none: no hits).
///
/// Reads the postings of every term, then, if some page has all of them, the length and
/// PageRank of every exported page for the corpus statistics: O(exported pages) small cells per
/// query that matches anything. An unparsable `raw:pagerank` counts as 0 (its clustering run
/// has failed on it and says so).
pub fn search<S: Source>(source: &S, terms: &[String], params: &Params) -> Result<Vec<Hit>, SearchError<S::Error>> {
    let mut postings = Vec::with_capacity(terms.len());
    // Per term, the URLs with a text posting (`hit:count`): only exported pages have one.
    let mut with_text = Vec::with_capacity(terms.len());
    for term in terms {
        let (start, end) = prefix_range(term);
        let mut counts = read_counts(source, &start, &end, HIT_COUNT)?;
        with_text.push(counts.keys().cloned().collect::<BTreeSet<String>>());
        for (url, n) in read_counts(source, &start, &end, ANCHOR_COUNT)? {
            let sum = counts.entry(url).or_default();
            *sum = sum.saturating_add(n);
        }
        postings.push(Postings { term: term.clone(), counts });
    }
    if candidates(&postings).is_empty() {
        return Ok(Vec::new());
    }
    let (start, end) = length_range();
    // Exported pages are those with a text length; the anchors forwarded to them add to it.
    let lengths = read_counts(source, &start, &end, HIT_COUNT)?;
    let anchor_lengths = read_counts(source, &start, &end, ANCHOR_COUNT)?;
    // Anchors are also counted for pages that are not exported (not crawled, or not
    // canonical): such a posting is not the corpus's. A text posting without a length is
    // kept, and reported as a missing length.
    for (p, text) in postings.iter_mut().zip(&with_text) {
        p.counts.retain(|url, _| lengths.contains_key(url) || text.contains(url));
    }
    let candidates = candidates(&postings);
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<Vec<u8>> = lengths.keys().map(|url| url.as_bytes().to_vec()).collect();
    let pageranks = source.get_many(PAGES, &rows, RAW_PAGERANK).map_err(SearchError::Source)?;
    let all: BTreeMap<&str, Document> = lengths
        .iter()
        .zip(pageranks)
        .map(|((url, &length), pagerank)| {
            let pagerank = pagerank.and_then(|v| text::parse_pagerank(&v).ok()).unwrap_or(0.0);
            let length = length.saturating_add(anchor_lengths.get(url).copied().unwrap_or(0));
            (url.as_str(), Document { length, pagerank })
        })
        .collect();
    let corpus = Corpus::from_documents(all.values());
    let documents: BTreeMap<String, Document> =
        candidates.into_iter().filter_map(|url| Some((url.clone(), *all.get(url.as_str())?))).collect();
    rank(&postings, &documents, &corpus, params).map_err(|e| match e {
        RankError::MissingDocument { url } => SearchError::MissingLength { url },
    })
}

/// The `index` rows `"<prefix> <url>"` in `[start, end)` as URL → `column`'s count.
fn read_counts<S: Source>(
    source: &S,
    start: &[u8],
    end: &[u8],
    column: &str,
) -> Result<BTreeMap<String, u64>, SearchError<S::Error>> {
    let cells = source.scan(INDEX, start, end, column).map_err(SearchError::Source)?;
    let mut out = BTreeMap::new();
    for (row, value) in cells {
        let bad = |message: String| SearchError::BadCell {
            cell: format!("{INDEX}/{}/{column}", String::from_utf8_lossy(&row)),
            message,
        };
        let Some((_, url)) = split_row(&row) else {
            return Err(bad("the row key is not \"<term> <url>\" in UTF-8".to_owned()));
        };
        let Some(count) = std::str::from_utf8(&value).ok().and_then(|v| decode_count(v).ok()) else {
            return Err(bad(format!("{:?} is not a decimal count", String::from_utf8_lossy(&value))));
        };
        out.insert(url.to_owned(), count);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The postings of `term`: (url, count) pairs.
    fn term(term: &str, counts: &[(&str, u64)]) -> Postings {
        Postings { term: term.to_owned(), counts: counts.iter().map(|(u, n)| ((*u).to_owned(), *n)).collect() }
    }

    /// Documents: (url, length, pagerank).
    fn docs(list: &[(&str, u64, f64)]) -> BTreeMap<String, Document> {
        list.iter()
            .map(|(u, length, pagerank)| ((*u).to_owned(), Document { length: *length, pagerank: *pagerank }))
            .collect()
    }

    fn urls(hits: &[Hit]) -> Vec<&str> {
        hits.iter().map(|h| h.url.as_str()).collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    const CHAPTER: &str = "http://doc.example/book/ch04-01-what-is-ownership.html";
    const BOOK: &str = "http://doc.example/book/print.html";

    /// The user's report: a whole-book page has "ownership" 215 times, the chapter about it
    /// 46 times. A corpus of 30,000 documentation pages averaging 1,500 terms; the book is
    /// 400,000 terms long, the chapter 4,000; 300 pages mention the word.
    fn ownership(book_pagerank: f64) -> Vec<Hit> {
        let mut counts: Vec<(String, u64)> =
            (0..298).map(|i| (format!("http://doc.example/p{i:03}.html"), 1)).collect();
        counts.push((BOOK.to_owned(), 215));
        counts.push((CHAPTER.to_owned(), 46));
        let postings = [Postings { term: "ownership".into(), counts: counts.iter().cloned().collect() }];
        let mut documents = docs(&[(CHAPTER, 4_000, 1.0), (BOOK, 400_000, book_pagerank)]);
        for (url, _) in &counts[..298] {
            documents.insert(url.clone(), Document { length: 1_500, pagerank: 1.0 });
        }
        let corpus = Corpus { documents: 30_000, average_length: 1_500.0, mean_pagerank: 1.0 };
        rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap()
    }

    #[test]
    fn the_focused_chapter_beats_the_whole_book() {
        // By the sum of counts the book wins, 215 to 46.
        let hits = ownership(1.0);
        assert_eq!(hits.len(), 300);
        assert_eq!(urls(&hits[..2]), [CHAPTER, BOOK]);
        // 215 occurrences saturate: hardly more than one in an average page.
        assert!(hits[0].bm25 > 1.8 * hits[1].bm25, "{:?}", &hits[..3]);
        assert!(hits[1].bm25 < 1.1 * hits[2].bm25, "{:?}", &hits[..3]);
        // A PageRank 10, 100, even 1000 times the chapter's (every page links to the print
        // version) does not overturn it.
        for pagerank in [10.0, 100.0, 1_000.0] {
            let hits = ownership(pagerank);
            assert_eq!(urls(&hits[..2]), [CHAPTER, BOOK], "book PageRank {pagerank}");
        }
    }

    #[test]
    fn bm25_and_prior_have_their_textbook_values() {
        // N = 10, the term in 1 page, once, at the average length: idf = ln(1 + 9.5/1.5),
        // tf part = (k1 + 1)/(1 + k1) = 1; PageRank at the mean: w / 2.
        let postings = [term("rare", &[("u:a", 1)])];
        let corpus = Corpus { documents: 10, average_length: 100.0, mean_pagerank: 2.0 };
        let hits = rank(&postings, &docs(&[("u:a", 100, 2.0)]), &corpus, &Params::DEFAULT).unwrap();
        let idf = (1.0f64 + 9.5 / 1.5).ln();
        assert!(close(hits[0].bm25, idf), "{hits:?}");
        assert!(close(hits[0].prior, PAGERANK_WEIGHT / 2.0));
        assert_eq!(hits[0].score, hits[0].bm25 + hits[0].prior);
        // Twice as long: k1·(1 − b + b·2) = 2.1 → 2.2 / 3.1.
        let hits = rank(&postings, &docs(&[("u:a", 200, 2.0)]), &corpus, &Params::DEFAULT).unwrap();
        assert!(close(hits[0].bm25, idf * 2.2 / 3.1));
        // b = 0 ignores length; k1 = 0 ignores repeats.
        let flat = Params { b: 0.0, ..Params::DEFAULT };
        let hits = rank(&postings, &docs(&[("u:a", 200, 2.0)]), &corpus, &flat).unwrap();
        assert!(close(hits[0].bm25, idf));
        let binary = Params { k1: 0.0, ..Params::DEFAULT };
        let many = [term("rare", &[("u:a", 50)])];
        assert!(close(rank(&many, &docs(&[("u:a", 100, 2.0)]), &corpus, &binary).unwrap()[0].bm25, idf));
    }

    #[test]
    fn equal_scores_are_ordered_by_url() {
        let postings = [term("x", &[("u:c", 2), ("u:a", 2), ("u:b", 2)])];
        let documents = docs(&[("u:a", 10, 1.0), ("u:b", 10, 1.0), ("u:c", 10, 1.0)]);
        let corpus = Corpus { documents: 5, average_length: 10.0, mean_pagerank: 1.0 };
        let hits = rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap();
        assert_eq!(urls(&hits), ["u:a", "u:b", "u:c"]);
        assert!(hits.iter().all(|h| h.score == hits[0].score), "bit-for-bit equal: {hits:?}");
    }

    #[test]
    fn pagerank_breaks_near_ties_but_not_clear_differences() {
        let corpus = Corpus { documents: 1_000, average_length: 200.0, mean_pagerank: 1.0 };
        // Same count, one term longer: "u:a" is a hair better by BM25, "u:b" has twice the
        // PageRank, which wins.
        let postings = [term("x", &[("u:a", 3), ("u:b", 3)])];
        let documents = docs(&[("u:a", 200, 1.0), ("u:b", 201, 2.0)]);
        let bm25_only = Params { pagerank_weight: 0.0, ..Params::DEFAULT };
        assert_eq!(urls(&rank(&postings, &documents, &corpus, &bm25_only).unwrap()), ["u:a", "u:b"]);
        assert_eq!(urls(&rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap()), ["u:b", "u:a"]);
        // Identical text, different PageRank: the higher first, absent (0) last.
        let documents = docs(&[("u:a", 200, 0.0), ("u:b", 200, 0.5), ("u:c", 200, 3.0)]);
        let postings = [term("x", &[("u:a", 3), ("u:b", 3), ("u:c", 3)])];
        let hits = rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap();
        assert_eq!(urls(&hits), ["u:c", "u:b", "u:a"]);
        assert_eq!(hits[2].prior, 0.0);
        // Four occurrences in a short page against one in a page of the same length with ten
        // times the PageRank: the text wins.
        let postings = [term("x", &[("u:a", 4), ("u:b", 1)])];
        let documents = docs(&[("u:a", 200, 1.0), ("u:b", 200, 10.0)]);
        assert_eq!(urls(&rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap()), ["u:a", "u:b"]);
    }

    #[test]
    fn every_term_is_required() {
        let corpus = Corpus { documents: 10, average_length: 10.0, mean_pagerank: 1.0 };
        let documents = docs(&[("u:a", 10, 1.0), ("u:b", 10, 1.0), ("u:c", 10, 1.0)]);
        let cat = term("cat", &[("u:a", 1), ("u:b", 5)]);
        let dog = term("dog", &[("u:b", 1), ("u:c", 9)]);
        let hits = rank(&[cat.clone(), dog.clone()], &documents, &corpus, &Params::DEFAULT).unwrap();
        assert_eq!(urls(&hits), ["u:b"]);
        assert_eq!(candidates(&[dog, cat.clone()]), ["u:b"]);
        // A term no page has: no hits, whatever the other terms match.
        let missing = term("unicorn", &[]);
        assert!(rank(&[cat.clone(), missing], &documents, &corpus, &Params::DEFAULT).unwrap().is_empty());
        assert!(rank(&[], &documents, &corpus, &Params::DEFAULT).unwrap().is_empty(), "no terms, no hits");
        // Pages that match nothing need no document.
        let hits = rank(&[term("cat", &[("u:a", 1)])], &docs(&[("u:a", 10, 1.0)]), &corpus, &Params::DEFAULT);
        assert_eq!(hits.unwrap().len(), 1);
        let err = rank(&[cat], &docs(&[("u:a", 10, 1.0)]), &corpus, &Params::DEFAULT).unwrap_err();
        assert_eq!(err, RankError::MissingDocument { url: "u:b".into() });
    }

    #[test]
    fn a_rare_term_weighs_more_than_a_common_one() {
        // "u:a" has the rare term twice and the common one once; "u:b" the other way round.
        let corpus = Corpus { documents: 1_000, average_length: 50.0, mean_pagerank: 1.0 };
        let mut common: Vec<(String, u64)> = (0..500).map(|i| (format!("u:z{i}"), 1)).collect();
        common.extend([("u:a".to_owned(), 1), ("u:b".to_owned(), 2)]);
        let postings = [
            Postings { term: "common".into(), counts: common.into_iter().collect() },
            term("rare", &[("u:a", 2), ("u:b", 1)]),
        ];
        let documents = docs(&[("u:a", 50, 1.0), ("u:b", 50, 1.0)]);
        assert_eq!(urls(&rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap()), ["u:a", "u:b"]);
    }

    #[test]
    fn the_scale_of_pagerank_does_not_matter() {
        let postings = [term("x", &[("u:a", 1), ("u:b", 3), ("u:c", 2)])];
        let ranked = |scale: f64| {
            let documents = docs(&[("u:a", 10, 9.0 * scale), ("u:b", 40, 1.0 * scale), ("u:c", 20, 0.0)]);
            let corpus = Corpus::from_documents(documents.values());
            rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap()
        };
        let (one, tiny) = (ranked(1.0), ranked(1.0 / 30_000.0));
        assert_eq!(urls(&one), urls(&tiny));
        for (a, b) in one.iter().zip(&tiny) {
            assert!(close(a.score, b.score), "{one:?} {tiny:?}");
        }
    }

    #[test]
    fn degenerate_statistics_give_finite_scores() {
        let postings = [term("x", &[("u:a", 1)])];
        let documents = docs(&[("u:a", 0, f64::NAN)]);
        for corpus in [
            Corpus { documents: 0, average_length: 0.0, mean_pagerank: 0.0 },
            Corpus::from_documents(&[]),
            Corpus { documents: 1, average_length: 0.0, mean_pagerank: f64::INFINITY },
        ] {
            let hits = rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap();
            assert!(hits[0].score.is_finite() && hits[0].score > 0.0, "{corpus:?}: {hits:?}");
            assert_eq!(hits[0].prior, 0.0);
        }
        let docs = [Document { length: 10, pagerank: 1.0 }, Document { length: 30, pagerank: 0.0 }];
        assert_eq!(Corpus::from_documents(&docs), Corpus { documents: 2, average_length: 20.0, mean_pagerank: 0.5 });
    }

    #[test]
    fn query_terms_are_the_index_terms_sorted_and_distinct() {
        assert_eq!(query_terms("Snapshot isolation, SNAPSHOT"), ["isolation", "snapshot"]);
        assert!(query_terms("the a of").is_empty());
    }

    /// Tables holding `index` and `pages` cells: (table, row, column, value).
    fn tables(cells: &[(&str, &str, &str, &str)]) -> Tables {
        let mut t = Tables::new();
        for (table, row, column, value) in cells {
            let table = t.entry((*table).to_owned()).or_default();
            table.insert((row.as_bytes().to_vec(), (*column).to_owned()), value.as_bytes().to_vec());
        }
        t
    }

    #[test]
    fn search_reads_postings_lengths_and_pageranks() {
        let t = tables(&[
            (INDEX, " u:a", HIT_COUNT, "10"),
            (INDEX, " u:b", HIT_COUNT, "10"),
            (INDEX, " u:c", HIT_COUNT, "40"),
            (INDEX, "cat u:a", HIT_COUNT, "1"),
            (INDEX, "cat u:b", HIT_COUNT, "1"),
            (INDEX, "cats u:c", HIT_COUNT, "9"),
            (INDEX, "dog u:a", HIT_COUNT, "2"),
            (INDEX, "dog u:b", HIT_COUNT, "2"),
            (PAGES, "u:a", RAW_PAGERANK, "0.5"),
            (PAGES, "u:b", RAW_PAGERANK, "2"),
            (PAGES, "u:b", "doc:title", "not read"),
            (PAGES, "u:c", RAW_PAGERANK, "not a number"),
        ]);
        let hits = search(&t, &query_terms("dog cat"), &Params::DEFAULT).unwrap();
        assert_eq!(urls(&hits), ["u:b", "u:a"]);
        // By hand: N = 3, average length 20, mean PageRank (0.5 + 2 + 0)/3.
        let corpus = Corpus { documents: 3, average_length: 20.0, mean_pagerank: 2.5 / 3.0 };
        let postings = [term("cat", &[("u:a", 1), ("u:b", 1)]), term("dog", &[("u:a", 2), ("u:b", 2)])];
        let documents = docs(&[("u:a", 10, 0.5), ("u:b", 10, 2.0)]);
        assert_eq!(hits, rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap());
        // "cat" is not a prefix of "cats".
        assert!(search(&t, &query_terms("cat cats"), &Params::DEFAULT).unwrap().is_empty());
        assert_eq!(urls(&search(&t, &query_terms("cats"), &Params::DEFAULT).unwrap()), ["u:c"]);
        assert!(search(&t, &[], &Params::DEFAULT).unwrap().is_empty());
    }

    #[test]
    fn anchor_counts_add_to_exported_pages_only() {
        let t = tables(&[
            (INDEX, " u:a", HIT_COUNT, "10"),
            (INDEX, " u:a", ANCHOR_COUNT, "6"),
            (INDEX, " u:b", HIT_COUNT, "0"),
            (INDEX, " u:b", ANCHOR_COUNT, "4"),
            (INDEX, " u:gone", ANCHOR_COUNT, "2"),
            (INDEX, "cat u:a", HIT_COUNT, "1"),
            (INDEX, "cat u:a", ANCHOR_COUNT, "2"),
            (INDEX, "cat u:b", ANCHOR_COUNT, "1"),
            (INDEX, "cat u:gone", ANCHOR_COUNT, "5"),
        ]);
        let hits = search(&t, &query_terms("cat"), &Params::DEFAULT).unwrap();
        // u:gone is not exported (no text length): neither a hit nor part of the corpus.
        let corpus = Corpus { documents: 2, average_length: 10.0, mean_pagerank: 0.0 };
        let postings = [term("cat", &[("u:a", 3), ("u:b", 1)])];
        let documents = docs(&[("u:a", 16, 0.0), ("u:b", 4, 0.0)]);
        assert_eq!(hits, rank(&postings, &documents, &corpus, &Params::DEFAULT).unwrap());
        assert_eq!(urls(&hits), ["u:a", "u:b"]);
        let err = search(&tables(&[(INDEX, "cat u:a", ANCHOR_COUNT, "x")]), &query_terms("cat"), &Params::DEFAULT)
            .unwrap_err();
        assert_eq!(err.to_string(), "index/cat u:a/anchor:count: \"x\" is not a decimal count");
    }

    #[test]
    fn search_names_bad_cells_and_missing_lengths() {
        let t = tables(&[(INDEX, "cat u:a", HIT_COUNT, "1"), (INDEX, "cat u:b", HIT_COUNT, "many")]);
        let err = search(&t, &query_terms("cat"), &Params::DEFAULT).unwrap_err();
        assert_eq!(err.to_string(), "index/cat u:b/hit:count: \"many\" is not a decimal count");
        let t = tables(&[(INDEX, "cat u:a", HIT_COUNT, "1"), (INDEX, " u:b", HIT_COUNT, "3")]);
        let err = search(&t, &query_terms("cat"), &Params::DEFAULT).unwrap_err();
        assert!(matches!(&err, SearchError::MissingLength { url } if url == "u:a"), "{err}");
        assert!(err.to_string().contains("notify pages/u:a/export:dirty"), "{err}");
    }
}
