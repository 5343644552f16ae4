//! Terms, content hash, PageRank. (Skeleton: signatures fixed, bodies being written.)

use std::cmp::Ordering;

/// The index terms of `s`, in order, with repeats: maximal runs of alphanumeric characters,
/// lowercased, 2–32 characters, stop words removed.
pub fn terms(s: &str) -> Vec<String> {
    let _ = s;
    unimplemented!("skeleton")
}

/// The content hash of a document: the first 16 bytes of SHA-256 of `title + "\n" + text`, as
/// 32 lowercase hex digits.
pub fn content_hash(title: &str, text: &str) -> String {
    let _ = (title, text);
    unimplemented!("skeleton")
}

/// Parses a `raw:pagerank` value (decimal text, finite, not negative).
pub fn parse_pagerank(value: &[u8]) -> Result<f64, String> {
    let _ = value;
    unimplemented!("skeleton")
}

/// The canonical order of cluster members: `Less` means `a` is the better canonical (higher
/// PageRank by `f64::total_cmp`, then the smaller URL bytewise).
pub fn canonical_order(a: (&str, f64), b: (&str, f64)) -> Ordering {
    b.1.total_cmp(&a.1).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
}
