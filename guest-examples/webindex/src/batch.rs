//! The from-scratch batch computation: every table of `docs/webindex.md` derived from the
//! `raw:*` inputs alone, the value the incremental pipeline must equal at its fixed point.
//!
//! It is written directly from the specification, one pass per observer (documents, clusters,
//! inverted links, forwarding, export), with whole-table maps and sums instead of diffs and
//! deltas, so that it can serve as the oracle for the observers' tests.
//!
//! A table without cells is absent from the result ([`normalize`] makes any [`Tables`] so).
//! The trigger columns (`link:dirty`, `export:dirty`) are weak-notify columns, which never
//! hold a value, so they are not part of it either; nor is the `pending` table, which is
//! empty at the fixed point.
//!
//! ```
//! use std::collections::BTreeMap;
//! use webindex::batch;
//!
//! let mut inputs = BTreeMap::new();
//! let html = r#"<title>Home</title><p>Hello</p><a href="/about.html">About us</a>"#;
//! inputs.insert("http://site.example/".to_owned(), (Some(html.as_bytes().to_vec()), None));
//! let tables = batch::compute(&inputs).unwrap();
//! let inlink = (b"http://site.example/about.html http://site.example/".to_vec(), "link:anchor".to_owned());
//! assert_eq!(tables["inlinks"][&inlink], b"About us");
//! ```

use std::collections::{BTreeMap, BTreeSet};

use crate::charset;
use crate::html::{self, Document};
use crate::schema::*;
use crate::text;

/// Cells of one table: (row, column) → value.
pub type Table = BTreeMap<(Vec<u8>, String), Vec<u8>>;
/// Tables by name.
pub type Tables = BTreeMap<String, Table>;
/// The inputs: URL → (`raw:html`, `raw:pagerank`), each possibly absent.
pub type Inputs = BTreeMap<String, (Option<Vec<u8>>, Option<Vec<u8>>)>;

/// Longest value shown by [`diff`], in characters.
const SHOWN_CHARS: usize = 120;

/// Computes every table of `docs/webindex.md` (raw inputs included, trigger columns excluded)
/// from the inputs: URL → (`raw:html`, `raw:pagerank`), each possibly absent.
///
/// Tables without cells are absent from the result. Fails, naming the URL, if a `raw:pagerank`
/// does not parse ([`text::parse_pagerank`]) — whether or not the URL has `raw:html` — or if a
/// URL with `raw:html` is not a normalized http(s) URL of at
/// most [`MAX_URL_BYTES`](html::MAX_URL_BYTES) bytes ([`html::check_url_key`]), as the
/// document processor's run fails. (Links to longer URLs are dropped by [`html::parse`].)
pub fn compute(inputs: &Inputs) -> Result<Tables, String> {
    compute_in_stages(inputs, &mut |_| {})
}

/// The stages of [`compute`], in order, each named after the observers that do its work
/// incrementally.
pub const STAGES: [&str; 5] = ["document processor", "clustering", "link inversion", "link forwarding", "exporter"];

/// [`compute`], calling `done` with the index of each stage of [`STAGES`] as it ends (for a
/// benchmark that times them).
pub fn compute_in_stages(inputs: &Inputs, done: &mut dyn FnMut(usize)) -> Result<Tables, String> {
    let mut out = Output::default();

    // Inputs, and the document processor: `doc:*` exactly for the URLs with `raw:html`.
    let mut docs: BTreeMap<&str, Document> = BTreeMap::new();
    let mut pagerank: BTreeMap<&str, f64> = BTreeMap::new();
    for (url, (html, rank)) in inputs {
        if let Some(rank) = rank {
            let value = text::parse_pagerank(rank).map_err(|e| format!("pages/{url}/{RAW_PAGERANK} of {url}: {e}"))?;
            pagerank.insert(url, value);
            out.set(PAGES, url, RAW_PAGERANK, rank.clone());
        }
        if let Some(html) = html {
            html::check_url_key(url).map_err(|e| format!("pages/{url}/{RAW_HTML}: {e}"))?;
            out.set(PAGES, url, RAW_HTML, html.clone());
            let doc = html::parse(url, &charset::decode(html).0);
            let links: String = doc.links.iter().map(|l| format!("{}\t{}\n", l.target, l.anchor)).collect();
            out.set(PAGES, url, DOC_TITLE, doc.title.clone());
            out.set(PAGES, url, DOC_TEXT, doc.text.clone());
            out.set(PAGES, url, DOC_LINKS, links);
            out.set(PAGES, url, DOC_HASH, text::content_hash(&doc.title, &doc.text));
            docs.insert(url, doc);
        }
    }

    done(0);

    // Clustering: equal `doc:hash` → one cluster; canonical = highest PageRank (absent: 0),
    // then smallest URL.
    let mut clusters: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (url, doc) in &docs {
        clusters.entry(text::content_hash(&doc.title, &doc.text)).or_default().push(url);
    }
    let mut canonical: BTreeMap<&str, &str> = BTreeMap::new();
    for (hash, members) in &clusters {
        let rank = |url: &str| pagerank.get(url).copied().unwrap_or(0.0);
        let best = members
            .iter()
            .copied()
            .min_by(|&a, &b| text::canonical_order((a, rank(a)), (b, rank(b))))
            .expect("a cluster has a member");
        out.set(CLUSTERS, hash, CANON_URL, best);
        for url in members {
            let raw = inputs[*url].1.clone().unwrap_or_else(|| b"0".to_vec());
            out.set_row(CLUSTERS, join_row(hash, url), MEMBER_PAGERANK, raw);
            out.set(PAGES, url, CLUSTER_HASH, hash.as_str());
            out.set(PAGES, url, CLUSTER_CANONICAL, best);
            canonical.insert(url, best);
        }
    }

    done(1);

    // Link inversion, inverting half: one inlink per (target, source), anchors in document
    // order, empty ones skipped.
    let mut inlinks: BTreeMap<&str, BTreeMap<&str, String>> = BTreeMap::new();
    for (source, doc) in &docs {
        let mut anchors: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for link in &doc.links {
            let list = anchors.entry(&link.target).or_default();
            if !link.anchor.is_empty() {
                list.push(&link.anchor);
            }
        }
        if anchors.is_empty() {
            continue;
        }
        let out_list: String = anchors.keys().map(|t| format!("{t}\n")).collect();
        out.set(PAGES, source, LINK_OUT, out_list);
        for (target, list) in anchors {
            let joined = list.join(" ");
            out.set_row(INLINKS, join_row(target, source), LINK_ANCHOR, joined.as_str());
            inlinks.entry(target).or_default().insert(source, joined);
        }
    }

    done(2);

    // Forwarding half: a target's inlinks go to its canonical, or stay with it; the terms of
    // their anchors are counted there, exported or not, and in the target's summary.
    let mut anchor_counts: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
    for (target, sources) in &inlinks {
        let dest = canonical.get(target).copied().unwrap_or(target);
        let mut terms = BTreeMap::new();
        for anchors in sources.values() {
            text::count_terms(&mut terms, anchors);
        }
        let counts = anchor_counts.entry(dest).or_default();
        for (term, n) in &terms {
            *counts.entry(term.clone()).or_default() += n;
        }
        let fwd = Fwd { dest: dest.to_owned(), inlinks: sources.len() as u64, terms };
        out.set(PAGES, target, FWD_TO, encode_fwd(&fwd));
    }
    for (dest, counts) in &anchor_counts {
        if counts.is_empty() {
            continue;
        }
        out.set_row(INDEX, length_row(dest), ANCHOR_COUNT, counts.values().sum::<u64>().to_string());
        for (term, n) in counts {
            out.set_row(INDEX, join_row(term, dest), ANCHOR_COUNT, n.to_string());
        }
    }

    done(3);

    // Exporter: canonical pages only; terms of title and text, and the text's length (all its
    // term occurrences, 0 when it has none) in the row of the empty term.
    for (url, doc) in &docs {
        if canonical.get(url) != Some(url) {
            continue;
        }
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        text::count_terms(&mut counts, &doc.title);
        text::count_terms(&mut counts, &doc.text);
        out.set_row(INDEX, length_row(url), HIT_COUNT, counts.values().sum::<u64>().to_string());
        if counts.is_empty() {
            continue;
        }
        let list: String = counts.iter().map(|(t, n)| format!("{t}\t{n}\n")).collect();
        out.set(PAGES, url, EXPORT_TERMS, list);
        for (term, n) in &counts {
            out.set_row(INDEX, join_row(term, url), HIT_COUNT, n.to_string());
        }
    }
    done(4);

    Ok(out.tables)
}

/// Removes the tables that have no cells, so that "absent" and "empty" compare equal.
pub fn normalize(t: &mut Tables) {
    t.retain(|_, table| !table.is_empty());
}

/// Up to `max` differences between two sets of tables, one line each (missing, extra or
/// different cells, with table, row and column; values shown lossily, at most 120 characters),
/// then one more line saying how many were left off, if any. Empty tables count as absent.
pub fn diff(expected: &Tables, actual: &Tables, max: usize) -> Vec<String> {
    let empty = Table::new();
    let names: BTreeSet<&String> = expected.keys().chain(actual.keys()).collect();
    let mut lines = Vec::new();
    let mut total = 0usize;
    for name in names {
        let e = expected.get(name).unwrap_or(&empty);
        let a = actual.get(name).unwrap_or(&empty);
        let keys: BTreeSet<&(Vec<u8>, String)> = e.keys().chain(a.keys()).collect();
        for key @ (row, column) in keys {
            let line = match (e.get(key), a.get(key)) {
                (Some(x), None) => format!("missing {name}/{}/{column}: expected {}", show_row(row), show(x)),
                (None, Some(y)) => format!("extra {name}/{}/{column}: {}", show_row(row), show(y)),
                (Some(x), Some(y)) if x != y => {
                    format!("different {name}/{}/{column}: expected {}, actual {}", show_row(row), show(x), show(y))
                }
                _ => continue,
            };
            total += 1;
            if lines.len() < max {
                lines.push(line);
            }
        }
    }
    if total > lines.len() {
        lines.push(format!("… and {} more differences ({total} in all)", total - lines.len()));
    }
    lines
}

/// A row key for a message: lossy UTF-8, control characters escaped.
fn show_row(row: &[u8]) -> String {
    String::from_utf8_lossy(row)
        .chars()
        .map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() })
        .collect()
}

/// A value for a message: lossy UTF-8, escaped, at most [`SHOWN_CHARS`] characters.
fn show(value: &[u8]) -> String {
    let s = format!("{:?}", String::from_utf8_lossy(value));
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// The tables being built.
#[derive(Default)]
struct Output {
    tables: Tables,
}

impl Output {
    fn set(&mut self, table: &str, row: &str, column: &str, value: impl Into<Vec<u8>>) {
        self.set_row(table, row.as_bytes().to_vec(), column, value);
    }

    fn set_row(&mut self, table: &str, row: Vec<u8>, column: &str, value: impl Into<Vec<u8>>) {
        self.tables.entry(table.to_owned()).or_default().insert((row, column.to_owned()), value.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(pages: &[(&str, Option<&str>, Option<&str>)]) -> Inputs {
        pages
            .iter()
            .map(|(u, h, p)| (u.to_string(), (h.map(|h| h.as_bytes().to_vec()), p.map(|p| p.as_bytes().to_vec()))))
            .collect()
    }

    fn get<'a>(t: &'a Tables, table: &str, row: &str, column: &str) -> Option<&'a str> {
        let v = t.get(table)?.get(&(row.as_bytes().to_vec(), column.to_owned()))?;
        Some(std::str::from_utf8(v).unwrap())
    }

    const A: &str = "http://a.example/";
    const B: &str = "http://b.example/";
    const C: &str = "http://c.example/";
    const D: &str = "http://d.example/";

    /// `A` and `B` are duplicates, `C` links to both (twice to `B`, once without anchor), `D`
    /// has only a PageRank.
    fn sample(rank_a: &str, rank_b: Option<&str>) -> Inputs {
        let dup = "<title>Zebra</title><p>Striped horses</p>";
        let c = format!(
            "<title>Links</title><a href=\"{A}\">wild zebra</a> <a href=\"{B}\">mirror</a> \
             <a href=\"{B}\"></a> <a href=\"{B}#x\">copy</a> <a href=\"mailto:x@c.example\">mail</a>"
        );
        inputs(&[(A, Some(dup), Some(rank_a)), (B, Some(dup), rank_b), (C, Some(&c), None), (D, None, Some("3"))])
    }

    #[test]
    fn the_stages_end_in_order_and_compute_the_same_tables() {
        let inputs = sample("0.5", Some("0.25"));
        let mut ended = Vec::new();
        let staged = compute_in_stages(&inputs, &mut |stage| ended.push(stage)).unwrap();
        assert_eq!(ended, (0..STAGES.len()).collect::<Vec<_>>());
        assert_eq!(staged, compute(&inputs).unwrap());
    }

    #[test]
    fn documents_clusters_and_inputs() {
        let t = compute(&sample("0.5", Some("0.5"))).unwrap();
        assert_eq!(get(&t, PAGES, A, DOC_TITLE), Some("Zebra"));
        assert_eq!(get(&t, PAGES, A, DOC_TEXT), Some("Striped horses"));
        assert_eq!(get(&t, PAGES, A, DOC_LINKS), Some(""));
        assert_eq!(get(&t, PAGES, D, RAW_PAGERANK), Some("3"));
        assert_eq!(get(&t, PAGES, D, DOC_TITLE), None, "no raw:html, no doc:*");
        assert_eq!(get(&t, PAGES, D, CLUSTER_HASH), None);
        let hash = text::content_hash("Zebra", "Striped horses");
        assert_eq!(get(&t, PAGES, B, DOC_HASH), Some(hash.as_str()));
        assert_eq!(get(&t, PAGES, B, CLUSTER_HASH), Some(hash.as_str()));
        // Tied PageRank: the smaller URL wins.
        assert_eq!(get(&t, PAGES, B, CLUSTER_CANONICAL), Some(A));
        assert_eq!(get(&t, CLUSTERS, &hash, CANON_URL), Some(A));
        assert_eq!(get(&t, CLUSTERS, &format!("{hash} {B}"), MEMBER_PAGERANK), Some("0.5"));
        // C has no PageRank: its member row says 0; it is its own canonical.
        let c_hash = get(&t, PAGES, C, DOC_HASH).unwrap();
        assert_eq!(get(&t, CLUSTERS, &format!("{c_hash} {C}"), MEMBER_PAGERANK), Some("0"));
        assert_eq!(get(&t, PAGES, C, CLUSTER_CANONICAL), Some(C));
        // A higher PageRank wins over the URL.
        let t = compute(&sample("0.5", Some("0.50001"))).unwrap();
        assert_eq!(get(&t, CLUSTERS, &hash, CANON_URL), Some(B));
        // Absent counts as 0.
        let t = compute(&sample("0", None)).unwrap();
        assert_eq!(get(&t, CLUSTERS, &hash, CANON_URL), Some(A));
        assert_eq!(get(&t, CLUSTERS, &format!("{hash} {B}"), MEMBER_PAGERANK), Some("0"));
    }

    #[test]
    fn links_are_inverted_and_forwarded_to_the_canonical() {
        let t = compute(&sample("2", Some("1"))).unwrap();
        assert_eq!(get(&t, PAGES, C, LINK_OUT), Some(&*format!("{A}\n{B}\n")));
        assert_eq!(get(&t, PAGES, A, LINK_OUT), None, "no links, no link:out");
        assert_eq!(get(&t, INLINKS, &format!("{A} {C}"), LINK_ANCHOR), Some("wild zebra"));
        assert_eq!(get(&t, INLINKS, &format!("{B} {C}"), LINK_ANCHOR), Some("mirror copy"));
        assert_eq!(t[INLINKS].len(), 2);
        // B's inlinks go to its canonical A: their anchors are counted there.
        assert_eq!(get(&t, PAGES, B, FWD_TO), Some(&*format!("{A}\n1\ncopy\t1\nmirror\t1\n")));
        assert_eq!(get(&t, PAGES, A, FWD_TO), Some(&*format!("{A}\n1\nwild\t1\nzebra\t1\n")));
        assert_eq!(get(&t, PAGES, C, FWD_TO), None, "no inlinks, no forwarding");
        for term in ["wild", "zebra", "mirror", "copy"] {
            assert_eq!(get(&t, INDEX, &format!("{term} {A}"), ANCHOR_COUNT), Some("1"), "{term}");
        }
        assert_eq!(get(&t, INDEX, &format!(" {A}"), ANCHOR_COUNT), Some("4"), "A's anchors' length");
        assert_eq!(get(&t, INDEX, &format!("mirror {B}"), ANCHOR_COUNT), None);
        // Only the canonical is exported, with its own title and text.
        assert_eq!(get(&t, PAGES, A, EXPORT_TERMS), Some("horses\t1\nstriped\t1\nzebra\t1\n"));
        assert_eq!(get(&t, INDEX, &format!("zebra {A}"), HIT_COUNT), Some("1"));
        assert_eq!(get(&t, INDEX, &format!(" {A}"), HIT_COUNT), Some("3"), "A's text's length");
        assert_eq!(get(&t, INDEX, &format!(" {B}"), HIT_COUNT), None);
        assert_eq!(get(&t, INDEX, &format!(" {C}"), HIT_COUNT), Some("6"), "links wild zebra mirror copy mail");
        assert_eq!(get(&t, INDEX, &format!(" {C}"), ANCHOR_COUNT), None, "no inlinks");
        assert_eq!(get(&t, PAGES, B, EXPORT_TERMS), None);
        assert_eq!(get(&t, INDEX, &format!("zebra {B}"), HIT_COUNT), None);
        assert_eq!(get(&t, INDEX, &format!("links {C}"), HIT_COUNT), Some("1"));
        // Trigger columns never hold values.
        assert!(t[PAGES].keys().all(|(_, c)| c != LINK_DIRTY && c != EXPORT_DIRTY));
    }

    #[test]
    fn uncrawled_targets_forward_to_themselves() {
        let html = "<title>T</title><a href=\"http://gone.example/x\">lost page</a>";
        let t = compute(&inputs(&[(A, Some(html), Some("1"))])).unwrap();
        let gone = "http://gone.example/x";
        assert_eq!(get(&t, PAGES, gone, FWD_TO), Some(&*format!("{gone}\n1\nlost\t1\npage\t1\n")));
        assert_eq!(get(&t, INDEX, &format!("lost {gone}"), ANCHOR_COUNT), Some("1"), "anchors are counted");
        assert_eq!(get(&t, INDEX, &format!("lost {gone}"), HIT_COUNT), None, "not crawled, not exported");
        assert_eq!(get(&t, INDEX, &format!(" {gone}"), HIT_COUNT), None);
    }

    #[test]
    fn empty_anchors_still_make_an_inlink_and_empty_pages_export_only_a_length() {
        let html = format!("<a href=\"{B}\"></a>");
        let t = compute(&inputs(&[(A, Some(&html), None)])).unwrap();
        assert_eq!(get(&t, INLINKS, &format!("{B} {A}"), LINK_ANCHOR), Some(""));
        assert_eq!(get(&t, PAGES, B, FWD_TO), Some(&*format!("{B}\n1\n")), "an inlink without terms");
        assert_eq!(get(&t, PAGES, A, EXPORT_TERMS), None);
        // A is exported without terms (its length is 0); nothing is counted at B.
        let index: Vec<(&[u8], &str)> = t[INDEX].keys().map(|(r, c)| (r.as_slice(), c.as_str())).collect();
        assert_eq!(index, [(format!(" {A}").as_bytes(), HIT_COUNT)]);
        assert_eq!(get(&t, INDEX, &format!(" {A}"), HIT_COUNT), Some("0"));
    }

    #[test]
    fn bad_inputs_name_the_url() {
        let err = compute(&inputs(&[(A, Some("<p>x</p>"), Some("lots"))])).unwrap_err();
        assert!(err.contains(A) && err.contains("lots"), "{err}");
        let err = compute(&inputs(&[(D, None, Some("-1"))])).unwrap_err();
        assert!(err.contains(D), "{err}");
        // Not UTF-8 is not bad: windows-1252 (see `charset`).
        let mut latin1 = inputs(&[]);
        latin1.insert(C.to_owned(), (Some(vec![0xff]), None));
        assert_eq!(get(&compute(&latin1).unwrap(), PAGES, C, DOC_TEXT), Some("ÿ"));
        let err = compute(&inputs(&[("HTTP://a.example/", Some("x"), None)])).unwrap_err();
        assert_eq!(
            err,
            "pages/HTTP://a.example//raw:html: the row key is not a normalized http(s) URL (expected \"http://a.example/\")"
        );
        assert_eq!(compute(&inputs(&[])).unwrap(), Tables::new());
    }

    #[test]
    fn urls_longer_than_the_limit_are_refused_and_links_to_them_dropped() {
        let long = format!("{A}{}", "x".repeat(html::MAX_URL_BYTES + 1 - A.len()));
        let err = compute(&inputs(&[(&long, Some("<p>x</p>"), None)])).unwrap_err();
        assert!(
            err.starts_with(&format!("pages/{long}/raw:html: the row key is 2041 bytes, longer than the 2040")),
            "{err}"
        );
        // A PageRank alone is only an input: no row key is derived from it.
        assert!(compute(&inputs(&[(&long, None, Some("1"))])).is_ok());
        let html = format!("<a href=\"{long}\">too long</a><a href=\"{}\">fits</a>", &long[..long.len() - 1]);
        let t = compute(&inputs(&[(B, Some(&html), None)])).unwrap();
        let links = get(&t, PAGES, B, DOC_LINKS).unwrap();
        assert_eq!(links, format!("{}\tfits\n", &long[..long.len() - 1]));
        assert_eq!(t[INLINKS].len(), 1);
    }

    #[test]
    fn diff_and_normalize() {
        let expected = compute(&sample("2", Some("1"))).unwrap();
        let mut actual = expected.clone();
        assert!(diff(&expected, &actual, 10).is_empty());
        actual.insert("unused".to_owned(), Table::new());
        assert!(diff(&expected, &actual, 10).is_empty(), "empty tables count as absent");
        normalize(&mut actual);
        assert_eq!(actual, expected);
        let pages = actual.get_mut(PAGES).unwrap();
        pages.remove(&(A.as_bytes().to_vec(), DOC_TITLE.to_owned()));
        pages.insert((A.as_bytes().to_vec(), LINK_DIRTY.to_owned()), vec![]);
        pages.insert((A.as_bytes().to_vec(), RAW_HTML.to_owned()), "x".repeat(500).into_bytes());
        let lines = diff(&expected, &actual, 10);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines.iter().any(|l| l == &format!("missing pages/{A}/doc:title: expected \"Zebra\"")));
        assert!(lines.iter().any(|l| l == &format!("extra pages/{A}/link:dirty: \"\"")));
        let different = lines.iter().find(|l| l.starts_with("different")).unwrap();
        assert!(different.contains("pages/http://a.example//raw:html") && different.chars().count() < 400);
        let lines = diff(&expected, &actual, 1);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1], "… and 2 more differences (3 in all)");
    }
}
