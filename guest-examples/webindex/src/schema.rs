//! Table and column names, row keys and value encodings of `docs/webindex.md`.
//!
//! Every list value is lines, each ending in `\n`, fields separated by `\t`; the `decode_*`
//! functions reject anything else (a missing final newline, a line without its tab, a count
//! that is not a decimal `u64`) with a message saying what is wrong, which callers prefix
//! with the cell's name.

use std::collections::BTreeMap;

use crate::html::{Link, MAX_URL_BYTES};

/// Crawled pages and everything derived per URL.
pub const PAGES: &str = "pages";
/// Cluster members (`"<hash> <url>"`) and canonical URLs (`"<hash>"`).
pub const CLUSTERS: &str = "clusters";
/// Inverted links, `"<target> <source>"`.
pub const INLINKS: &str = "inlinks";
/// Inlink changes not yet forwarded, `"<site> <source>"` ([`site`]); and the sites' trigger
/// rows `"<site>"`.
pub const PENDING: &str = "pending";
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
/// Trigger, weak-notify (never written, only notified), of `pending/<site>`: the site has
/// pending inlink changes.
pub const LINK_DIRTY: &str = "link:dirty";
/// Where this URL's inlinks are forwarded, and what is counted there: [`encode_fwd`].
pub const FWD_TO: &str = "fwd:to";
/// Trigger, weak-notify (never written, only notified): re-export this URL.
pub const EXPORT_DIRTY: &str = "export:dirty";
/// Exported terms, `term\tcount\n` each.
pub const EXPORT_TERMS: &str = "export:terms";
/// Member PageRank (in `clusters`).
pub const MEMBER_PAGERANK: &str = "member:pagerank";
/// Canonical URL (in `clusters`).
pub const CANON_URL: &str = "canon:url";
/// Anchors of source → target (in `inlinks`).
pub const LINK_ANCHOR: &str = "link:anchor";
/// What the changed inlinks of one source to one site's targets were when last forwarded (in
/// `pending`): [`encode_pending`].
pub const LINK_WAS: &str = "link:was";
/// Occurrences of a term in the exported document's title and text (in `index`); in a
/// [`length_row`], all of them: present exactly for exported documents.
pub const HIT_COUNT: &str = "hit:count";
/// Occurrences of a term in the anchors forwarded to a URL (in `index`); in a [`length_row`],
/// all of them. Kept for every URL that inlinks are forwarded to, exported or not.
pub const ANCHOR_COUNT: &str = "anchor:count";

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

/// The `index` row holding the lengths of `url`: in `hit:count`, the number of term occurrences
/// of its title and text, all terms together (the sum of its `export:terms` counts; present
/// exactly when `url` is exported), and in `anchor:count`, those of the anchors forwarded to it
/// (present when there are any). A document's length for ranking is their sum.
///
/// It is the row of the empty term, `" <url>"`. No term is empty (terms have at least
/// [`MIN_TERM_CHARS`](crate::text::MIN_TERM_CHARS) characters), so these rows are never a
/// term's and are exactly the rows of [`length_range`], which the term ranges
/// ([`prefix_range`] of a term) never overlap: a term starts with an alphanumeric character,
/// after `'!'`.
///
/// ```
/// assert_eq!(webindex::schema::length_row("http://a.example/"), b" http://a.example/");
/// ```
pub fn length_row(url: &str) -> Vec<u8> {
    join_row("", url)
}

/// The row range `[" ", "!")` of every [`length_row`]: one row per exported document.
pub fn length_range() -> (Vec<u8>, Vec<u8>) {
    prefix_range("")
}

/// The site of a URL, its pending rows' first part: the scheme and authority, up to the first
/// `/` after `://`, or the whole string if it has no `://` (or nothing after the authority).
///
/// ```
/// use webindex::schema::site;
/// assert_eq!(site("http://a.example:8080/docs/x.html"), "http://a.example:8080");
/// assert_eq!(site("https://a.example"), "https://a.example");
/// assert_eq!(site("t:a"), "t:a");
/// ```
pub fn site(url: &str) -> &str {
    let Some(scheme_end) = url.find("://") else { return url };
    let authority = scheme_end + 3;
    match url[authority..].find('/') {
        Some(slash) => &url[..authority + slash],
        None => url,
    }
}

/// Splits `"a b"` at its first space.
pub fn split_row(row: &[u8]) -> Option<(&str, &str)> {
    std::str::from_utf8(row).ok()?.split_once(' ')
}

/// `member:pagerank` of a member whose `raw:pagerank` is absent.
pub const ABSENT_PAGERANK: &str = "0";

/// `doc:links`: `target\tanchor\n` per link, in order.
pub fn encode_links(links: &[Link]) -> String {
    let mut out = String::new();
    for link in links {
        out.push_str(&link.target);
        out.push('\t');
        out.push_str(&link.anchor);
        out.push('\n');
    }
    out
}

/// Reads an [`encode_links`] value; a target must be non-empty, free of whitespace and at
/// most [`MAX_URL_BYTES`] long (it is the first part of `inlinks` row keys).
pub fn decode_links(value: &str) -> Result<Vec<Link>, String> {
    pairs(value)?
        .map(|pair| {
            let (target, anchor) = pair?;
            if target.is_empty() || target.contains(char::is_whitespace) {
                return Err(format!("link target {target:?} is empty or contains whitespace"));
            }
            if target.len() > MAX_URL_BYTES {
                let start: String = target.chars().take(40).collect();
                return Err(format!("link target {start:?}… is {} bytes, longer than {MAX_URL_BYTES}", target.len()));
            }
            if anchor.contains('\t') {
                // The document processor collapses whitespace; the pending entries separate
                // what an inlink was and is with a tab.
                return Err(format!("the anchor of the link to {target:?} contains a tab"));
            }
            Ok(Link { target: target.to_owned(), anchor: anchor.to_owned() })
        })
        .collect()
}

/// The `inlinks` values of one source page: for each distinct target of `links`, the anchors of
/// the links to it in document order, empty ones skipped, joined by one space (possibly the
/// empty string). Sorted by target, so the keys are also the page's `link:out`.
pub fn inlink_anchors(links: &[Link]) -> BTreeMap<&str, String> {
    let mut out: BTreeMap<&str, String> = BTreeMap::new();
    for link in links {
        let anchors = out.entry(link.target.as_str()).or_default();
        if !link.anchor.is_empty() {
            if !anchors.is_empty() {
                anchors.push(' ');
            }
            anchors.push_str(&link.anchor);
        }
    }
    out
}

/// `link:out`: one item per line, `item\n` each, in the order given.
pub fn encode_list<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> String {
    let mut out = String::new();
    for item in items {
        out.push_str(item.as_ref());
        out.push('\n');
    }
    out
}

/// Reads an [`encode_list`] value.
pub fn decode_list(value: &str) -> Result<Vec<&str>, String> {
    lines(value).map(Iterator::collect)
}

/// `link:was`: an inlink's `link:anchor` as it was when last forwarded — `+` then the anchors
/// if the row existed, `-` if it did not.
///
/// ```
/// use webindex::schema::{decode_was, encode_was};
/// assert_eq!(encode_was(Some("docs home")), "+docs home");
/// assert_eq!(decode_was(&encode_was(None)), Ok(None));
/// ```
pub fn encode_was(anchors: Option<&str>) -> String {
    match anchors {
        Some(a) => format!("+{a}"),
        None => "-".to_owned(),
    }
}

/// Reads an [`encode_was`] value.
pub fn decode_was(value: &str) -> Result<Option<&str>, String> {
    match value.strip_prefix('+') {
        Some(anchors) => Ok(Some(anchors)),
        None if value == "-" => Ok(None),
        None => Err(format!("{value:?} is neither \"-\" nor \"+\" followed by anchors")),
    }
}

/// What a pending entry says its inlink is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Now<'a> {
    /// The inlink row's value (`None`: no inlink), written with it: an entry's `now` is the
    /// row's value in every snapshot, since the inverter writes both in one transaction.
    Is(Option<&'a str>),
    /// Not recorded: an entry written by a version before entries held it (the forwarding
    /// run reads the inlink row then).
    Unrecorded,
}

/// A pending entry: what the inlink was when last forwarded, and what it is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The inlink when it was last forwarded (`None`: no inlink then).
    pub was: Option<&'a str>,
    /// The inlink now.
    pub now: Now<'a>,
}

/// Marks an entry that holds what its inlink is now: `target\tv2\t<was>\t<now>`. A version
/// before it reads the marker as a malformed *was* and fails the run, naming the cell, rather
/// than taking `v2\t…` for anchors (its decoder split a line at its first tab only).
const ENTRY_V2: &str = "v2";

/// `pending/"<site> <source>"/link:was`: one line per target on the site whose inlink from the
/// source changed since it was last forwarded: `target\t`, [`ENTRY_V2`], `\t`, [`encode_was`]
/// of what the inlink was then, `\t` and the same of what it is now; sorted by target.
/// (Anchors hold no tab: [`decode_links`] refuses one. An entry of an earlier version is
/// `target\t<was>`: what it is now is not recorded.)
///
/// ```
/// use webindex::schema::{Entry, Now, decode_pending, encode_pending};
/// let x = Entry { was: Some("docs"), now: Now::Is(Some("guide")) };
/// let y = Entry { was: None, now: Now::Is(None) };
/// let value = encode_pending([("http://a/x", x), ("http://a/y", y)]);
/// assert_eq!(value, "http://a/x\tv2\t+docs\t+guide\nhttp://a/y\tv2\t-\t-\n");
/// assert_eq!(decode_pending(&value).unwrap()["http://a/y"], y);
/// assert_eq!(decode_pending("http://a/z\t+old\n").unwrap()["http://a/z"].now, Now::Unrecorded);
/// ```
pub fn encode_pending<'a>(entries: impl IntoIterator<Item = (&'a str, Entry<'a>)>) -> String {
    let mut out = String::new();
    for (target, entry) in entries {
        out.push_str(target);
        out.push('\t');
        match entry.now {
            Now::Is(now) => {
                out.push_str(ENTRY_V2);
                out.push('\t');
                out.push_str(&encode_was(entry.was));
                out.push('\t');
                out.push_str(&encode_was(now));
            }
            Now::Unrecorded => out.push_str(&encode_was(entry.was)),
        }
        out.push('\n');
    }
    out
}

/// Reads an [`encode_pending`] value: target → its entry. At least one entry, targets
/// non-empty, without whitespace, each once.
pub fn decode_pending(value: &str) -> Result<BTreeMap<&str, Entry<'_>>, String> {
    let mut out = BTreeMap::new();
    for pair in pairs(value)? {
        let (target, rest) = pair?;
        if target.is_empty() || target.contains(char::is_whitespace) {
            return Err(format!("target {target:?} is empty or contains whitespace"));
        }
        let was = |v| decode_was(v).map_err(|e| format!("target {target:?}: {e}"));
        let entry = match rest.strip_prefix(ENTRY_V2).and_then(|r| r.strip_prefix('\t')) {
            Some(fields) => {
                let (before, now) = fields
                    .split_once('\t')
                    .ok_or_else(|| format!("target {target:?}: {fields:?} is not what was, a tab, and what is now"))?;
                let now = decode_was(now).map_err(|e| format!("target {target:?}, now: {e}"))?;
                Entry { was: was(before)?, now: Now::Is(now) }
            }
            None => Entry { was: was(rest)?, now: Now::Unrecorded },
        };
        if out.insert(target, entry).is_some() {
            return Err(format!("target {target:?} has two entries"));
        }
    }
    if out.is_empty() {
        return Err("no entries".to_owned());
    }
    Ok(out)
}

/// What a target's inlinks count at its destination: the `fwd:to` value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fwd {
    /// The destination: the target's canonical, or the target itself.
    pub dest: String,
    /// How many inlinks (sources) the target has; positive.
    pub inlinks: u64,
    /// Occurrences of each term in their anchors, all of them together (no zeros).
    pub terms: BTreeMap<String, u64>,
}

/// `fwd:to`: `dest\ninlinks\n`, then `term\tcount\n` per term ([`encode_term_counts`]).
///
/// ```
/// use webindex::schema::{Fwd, decode_fwd, encode_fwd};
/// let fwd = Fwd { dest: "http://a/".into(), inlinks: 2, terms: [("docs".into(), 2)].into() };
/// assert_eq!(encode_fwd(&fwd), "http://a/\n2\ndocs\t2\n");
/// assert_eq!(decode_fwd(&encode_fwd(&fwd)), Ok(fwd));
/// ```
pub fn encode_fwd(fwd: &Fwd) -> String {
    format!("{}\n{}\n{}", fwd.dest, fwd.inlinks, encode_term_counts(&fwd.terms))
}

/// Reads an [`encode_fwd`] value.
pub fn decode_fwd(value: &str) -> Result<Fwd, String> {
    let mut parts = value.splitn(3, '\n');
    let (Some(dest), Some(inlinks), Some(terms)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("{value:?} is not a destination line, an inlink count line and term counts"));
    };
    if dest.is_empty() || dest.contains(char::is_whitespace) {
        return Err(format!("destination {dest:?} is empty or contains whitespace"));
    }
    let inlinks = match inlinks.parse::<u64>() {
        Ok(n) if n > 0 => n,
        _ => return Err(format!("inlink count {inlinks:?} is not a positive decimal number")),
    };
    let terms = decode_term_counts(terms)?;
    if let Some((term, _)) = terms.iter().find(|(_, n)| **n == 0) {
        return Err(format!("term {term:?} has count 0"));
    }
    Ok(Fwd { dest: dest.to_owned(), inlinks, terms })
}

/// `export:terms`: `term\tcount\n` per term, sorted by term.
pub fn encode_term_counts(counts: &BTreeMap<String, u64>) -> String {
    let mut out = String::new();
    for (term, count) in counts {
        out.push_str(term);
        out.push('\t');
        out.push_str(&count.to_string());
        out.push('\n');
    }
    out
}

/// Reads an [`encode_term_counts`] value.
pub fn decode_term_counts(value: &str) -> Result<BTreeMap<String, u64>, String> {
    pairs(value)?
        .map(|pair| {
            let (term, count) = pair?;
            match count.parse::<u64>() {
                Ok(n) => Ok((term.to_owned(), n)),
                Err(_) => Err(format!("count {count:?} of term {term:?} is not a decimal number")),
            }
        })
        .collect()
}

/// Checks a `doc:hash` or `cluster:hash` value: 32 lowercase hex digits, as
/// [`content_hash`](crate::text::content_hash) writes them.
pub fn decode_hash(value: &str) -> Result<&str, String> {
    if value.len() == 32 && value.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(value)
    } else {
        Err(format!("{value:?} is not a content hash (32 lowercase hex digits)"))
    }
}

/// `hit:count`: decimal text.
pub fn encode_count(count: u64) -> String {
    count.to_string()
}

/// Reads a [`encode_count`] value.
pub fn decode_count(value: &str) -> Result<u64, String> {
    value.parse().map_err(|_| format!("{value:?} is not a decimal count"))
}

/// The lines of a list value, each of which must end in `\n`.
fn lines(value: &str) -> Result<std::str::SplitTerminator<'_, char>, String> {
    if value.is_empty() || value.ends_with('\n') {
        Ok(value.split_terminator('\n'))
    } else {
        Err("the last line does not end in a newline".to_owned())
    }
}

/// The lines of a list value as `first\tsecond` pairs (split at the first tab).
fn pairs(value: &str) -> Result<impl Iterator<Item = Result<(&str, &str), String>>, String> {
    Ok(lines(value)?
        .enumerate()
        .map(|(i, line)| line.split_once('\t').ok_or_else(|| format!("line {} ({line:?}) has no tab", i + 1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(target: &str, anchor: &str) -> Link {
        Link { target: target.into(), anchor: anchor.into() }
    }

    #[test]
    fn rows_and_ranges() {
        assert_eq!(join_row("a", "b c"), b"a b c");
        assert_eq!(split_row(b"a b c"), Some(("a", "b c")));
        let (start, end) = prefix_range("a");
        assert!(start.as_slice() <= join_row("a", "").as_slice() && join_row("a", "\u{10ffff}") < end);
        assert!(join_row("ab", "x") >= end);
        let (start, end) = length_range();
        let row = length_row("http://a/");
        assert!(start <= row && row < end);
        // The smallest character a term can start with is after every length row.
        let (term_start, _) = prefix_range("0");
        assert!(end <= term_start && end <= join_row("0", "x"));
        assert_eq!(split_row(&row), Some(("", "http://a/")));
    }

    #[test]
    fn links_round_trip() {
        let links = vec![link("http://a/", "x y"), link("http://b/", ""), link("http://a/", "z")];
        let encoded = encode_links(&links);
        assert_eq!(encoded, "http://a/\tx y\nhttp://b/\t\nhttp://a/\tz\n");
        assert_eq!(decode_links(&encoded), Ok(links));
        assert_eq!(decode_links(""), Ok(vec![]));
        assert!(decode_links("http://a/\tx").is_err());
        assert!(decode_links("http://a/\n").is_err());
        assert!(decode_links("\tx\n").is_err());
        assert!(decode_links("http://a b/\tx\n").is_err());
        let long = format!("http://a/{}", "x".repeat(MAX_URL_BYTES));
        assert!(decode_links(&format!("{}\tx\n", &long[..MAX_URL_BYTES])).is_ok());
        assert!(decode_links(&format!("{long}\tx\n")).unwrap_err().contains("longer than 2040"));
    }

    #[test]
    fn inlink_anchors_group_by_target() {
        let links = [link("t:b", "one"), link("t:a", ""), link("t:b", ""), link("t:b", "two")];
        let got: Vec<(&str, String)> = inlink_anchors(&links).into_iter().collect();
        assert_eq!(got, [("t:a", String::new()), ("t:b", "one two".to_owned())]);
    }

    #[test]
    fn lists_was_and_term_counts_round_trip() {
        assert_eq!(encode_list(["a", "b"]), "a\nb\n");
        assert_eq!(decode_list("a\nb\n"), Ok(vec!["a", "b"]));
        assert_eq!(decode_list(""), Ok(vec![]));
        assert!(decode_list("a\nb").is_err());

        assert_eq!(encode_was(Some("")), "+");
        assert_eq!(decode_was("+"), Ok(Some("")));
        assert_eq!(decode_was("+a\tb"), Ok(Some("a\tb")));
        assert_eq!(decode_was("-"), Ok(None));
        assert!(decode_was("").is_err() && decode_was("--").is_err() && decode_was("x").is_err());

        let counts: BTreeMap<String, u64> = [("cat".to_owned(), 2), ("dog".to_owned(), 10)].into();
        let encoded = encode_term_counts(&counts);
        assert_eq!(encoded, "cat\t2\ndog\t10\n");
        assert_eq!(decode_term_counts(&encoded), Ok(counts));
        assert!(decode_term_counts("cat\t-1\n").is_err());
        assert!(decode_term_counts("cat\n").is_err());

        assert_eq!(decode_count(&encode_count(42)), Ok(42));
        assert!(decode_count("4 2").is_err());
    }

    #[test]
    fn sites_pending_rows_and_fwd_round_trip() {
        assert_eq!(site("http://a.example/"), "http://a.example");
        assert_eq!(site("http://u@[::1]:80/a/b?c"), "http://u@[::1]:80");
        assert_eq!(site("http://a.example"), "http://a.example");
        assert_eq!(site("mailto:x"), "mailto:x");

        let value = "t:a\tv2\t+one two\t+one\nt:b\tv2\t-\t+\nt:c\tv2\t+gone\t-\n";
        let entries = decode_pending(value).unwrap();
        let entry = |was, now| Entry { was, now: Now::Is(now) };
        let want = [
            ("t:a", entry(Some("one two"), Some("one"))),
            ("t:b", entry(None, Some(""))),
            ("t:c", entry(Some("gone"), None)),
        ];
        assert_eq!(entries, want.into());
        assert_eq!(encode_pending(entries), value);
        // Entries of an earlier version (no `now`), also beside new ones.
        let old = "t:a\t+one two\nt:b\tv2\t-\t-\n";
        let entries = decode_pending(old).unwrap();
        assert_eq!(entries["t:a"], Entry { was: Some("one two"), now: Now::Unrecorded });
        assert_eq!(entries["t:b"], entry(None, None));
        assert_eq!(encode_pending(entries), old);
        assert!(decode_pending("").unwrap_err().contains("no entries"));
        assert!(decode_pending("t:a\t-\nt:a\t+x\n").unwrap_err().contains("two entries"));
        assert!(decode_pending("t:a\tx\n").unwrap_err().contains("neither"));
        assert!(decode_pending("t:a\tv2\t-\tx\n").unwrap_err().contains("now: \"x\" is neither"));
        assert!(decode_pending("t:a\tv2\t-\t-\t-\n").unwrap_err().contains("now"));
        assert!(decode_pending("t:a\tv2\t-\n").unwrap_err().contains("not what was, a tab, and what is now"));
        // What a version before the marker made of a new entry: a malformed *was*, not anchors.
        assert!(decode_was("v2\t+x\t+y").unwrap_err().contains("neither"));
        assert!(decode_links("t:a\tone\ttwo\n").unwrap_err().contains("contains a tab"));
        assert!(decode_pending("t:a\n").is_err());

        let fwd = Fwd { dest: "t:c".into(), inlinks: 3, terms: BTreeMap::new() };
        assert_eq!(encode_fwd(&fwd), "t:c\n3\n");
        assert_eq!(decode_fwd("t:c\n3\n"), Ok(fwd));
        assert!(decode_fwd("t:c").is_err());
        assert!(decode_fwd("t:c\n0\n").unwrap_err().contains("positive"));
        assert!(decode_fwd("t:c\n1\nx\t0\n").unwrap_err().contains("count 0"));
        assert!(decode_fwd("t:c\n1\nx\t1").is_err());
        assert!(decode_fwd("\n1\n").is_err());
    }

    #[test]
    fn hashes() {
        let h = crate::text::content_hash("t", "x");
        assert_eq!(decode_hash(&h), Ok(h.as_str()));
        assert!(decode_hash(&h.to_uppercase()).is_err());
        assert!(decode_hash(&h[1..]).is_err());
        assert!(decode_hash("").is_err());
    }
}
