//! Terms, content hash, PageRank and the canonical order of cluster members.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Words too common to index.
pub const STOP_WORDS: &[&str] = &[
    "the", "and", "of", "to", "a", "in", "is", "it", "for", "on", "with", "as", "at", "by", "an", "be", "or", "this",
    "that", "from", "are", "was", "were",
];

/// Shortest indexed term, in characters.
pub const MIN_TERM_CHARS: usize = 2;
/// Longest indexed term, in characters.
pub const MAX_TERM_CHARS: usize = 32;

/// The index terms of `s`, in order, with repeats: maximal runs of alphanumeric characters,
/// lowercased, 2–32 characters, stop words removed.
///
/// "Alphanumeric" is Unicode's (`char::is_alphanumeric`); the length is counted in characters
/// of the lowercased run.
///
/// ```
/// assert_eq!(webindex::text::terms("The Cat's 2 cats, and DOGS!"), ["cat", "cats", "dogs"]);
/// ```
pub fn terms(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|run| !run.is_empty())
        .map(str::to_lowercase)
        .filter(|t| (MIN_TERM_CHARS..=MAX_TERM_CHARS).contains(&t.chars().count()))
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
        .collect()
}

/// Adds one to `counts[t]` for every term `t` of [`terms(s)`](terms) (with repeats).
///
/// ```
/// let mut counts = std::collections::BTreeMap::new();
/// webindex::text::count_terms(&mut counts, "cats and dogs");
/// webindex::text::count_terms(&mut counts, "more cats");
/// assert_eq!(counts.get("cats"), Some(&2));
/// assert_eq!(counts.get("and"), None);
/// ```
pub fn count_terms(counts: &mut BTreeMap<String, u64>, s: &str) {
    for term in terms(s) {
        *counts.entry(term).or_insert(0) += 1;
    }
}

/// The content hash of a document: the first 16 bytes of SHA-256 of `title + "\n" + text`, as
/// 32 lowercase hex digits.
pub fn content_hash(title: &str, text: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(title.as_bytes());
    hasher.update(b"\n");
    hasher.update(text.as_bytes());
    let digest = hasher.finalize();
    let mut out = String::with_capacity(32);
    for b in &digest[..16] {
        out.push(char::from_digit(u32::from(b >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(b & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// Parses a `raw:pagerank` value (decimal text, finite, not negative).
///
/// The text is UTF-8, trimmed, in any form Rust's `f64` parser accepts (`1`, `0.25`, `2e-3`);
/// `-0` is read as `0`. The error names the offending text, e.g. `"abc" is not a number`.
pub fn parse_pagerank(value: &[u8]) -> Result<f64, String> {
    let text =
        std::str::from_utf8(value).map_err(|_| format!("{:?} is not UTF-8 text", String::from_utf8_lossy(value)))?;
    let trimmed = text.trim();
    let v: f64 = trimmed.parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !v.is_finite() {
        return Err(format!("{text:?} is not a finite number"));
    }
    if v < 0.0 {
        return Err(format!("{text:?} is negative"));
    }
    // `-0.0 + 0.0 == +0.0`: one zero, so `total_cmp` does not tell them apart.
    Ok(v + 0.0)
}

/// The canonical order of cluster members: `Less` means `a` is the better canonical (higher
/// PageRank by `f64::total_cmp`, then the smaller URL bytewise).
pub fn canonical_order(a: (&str, f64), b: (&str, f64)) -> Ordering {
    b.1.total_cmp(&a.1).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_lowercase_filter() {
        assert_eq!(terms("Hello, World! hello"), ["hello", "world", "hello"]);
        assert_eq!(terms("a b cd x1 1x 42"), ["cd", "x1", "1x", "42"]);
        assert_eq!(terms("The AND of To THIS was Were are"), Vec::<String>::new());
        assert_eq!(terms("Ünïcödé ΣΊΣΥΦΟΣ über-cool日本語"), ["ünïcödé", "σίσυφος", "über", "cool日本語"]);
        assert_eq!(terms("foo_bar foo.bar"), ["foo", "bar", "foo", "bar"]);
        let long = "x".repeat(33);
        assert_eq!(terms(&format!("{} {long}", &long[..32])), [&long[..32]]);
        assert!(terms("").is_empty());
    }

    #[test]
    fn content_hash_is_truncated_sha256() {
        // SHA-256("\n") = 01ba4719c80b6fe911b091a7c05124b64eeece964e09c058ef8f9805daca546b
        assert_eq!(content_hash("", ""), "01ba4719c80b6fe911b091a7c05124b6");
        let h = content_hash("title", "text");
        assert_eq!(h.len(), 32);
        assert!(h.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_ne!(h, content_hash("title\ntext", ""));
        assert_eq!(h, content_hash("title", "text"));
    }

    #[test]
    fn pagerank_parsing() {
        assert_eq!(parse_pagerank(b"1"), Ok(1.0));
        assert_eq!(parse_pagerank(b" 0.25\n"), Ok(0.25));
        assert_eq!(parse_pagerank(b"2e-3"), Ok(0.002));
        assert_eq!(parse_pagerank(b"+3"), Ok(3.0));
        assert!(parse_pagerank(b"-0").unwrap().is_sign_positive());
        assert_eq!(parse_pagerank(b"abc"), Err("\"abc\" is not a number".into()));
        assert_eq!(parse_pagerank(b""), Err("\"\" is not a number".into()));
        assert_eq!(parse_pagerank(b"-1"), Err("\"-1\" is negative".into()));
        assert_eq!(parse_pagerank(b"inf"), Err("\"inf\" is not a finite number".into()));
        assert_eq!(parse_pagerank(b"NaN"), Err("\"NaN\" is not a finite number".into()));
        assert!(parse_pagerank(&[0xff]).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn canonical_order_prefers_rank_then_url() {
        assert_eq!(canonical_order(("b", 2.0), ("a", 1.0)), Ordering::Less);
        assert_eq!(canonical_order(("a", 1.0), ("b", 1.0)), Ordering::Less);
        assert_eq!(canonical_order(("b", 1.0), ("a", 1.0)), Ordering::Greater);
        assert_eq!(canonical_order(("a", 1.0), ("a", 1.0)), Ordering::Equal);
    }
}
