//! `word-count`: counts words over all documents, with weak notifications for the hot rows
//! (paper §2.4: a word like "the" is in every document, so one counter row per word would make
//! every document's transaction conflict with every other's).
//!
//! One component with two roles, told apart by the notified column:
//! - **splitter**, bound strongly to `docs/raw:text`. It counts the words of the document
//!   (lowercase alphanumeric runs) and diffs them against what it published before, recorded in
//!   `docs/wc:words` (sorted `word\tcount\n` lines; absent when none). For each word whose count
//!   changed it sets (or, at 0, deletes) `wc_parts/"<word> <doc>"/part:count` (decimal) and
//!   weakly notifies `words/<word>/count:dirty`; then it writes `wc:words`. A document writes
//!   only its own part cells, so splitters never conflict, even on the hottest word.
//! - **summer**, bound weakly (`notify = "weak"`) to `words/count:dirty`. It scans the word's
//!   parts (rows `["<word> ", "<word>!")`, page by page until a scan returns nothing), sums
//!   them and writes
//!   `words/<word>/count:total` (decimal) only if the sum changed, deleting it at 0. Weak
//!   notifications do not collapse and may repeat, so the summer recomputes from the parts
//!   instead of adding deltas: any run after the last part change leaves the exact total.
//!
//! Part rows `"<word> <doc>"` must fit the store's 4096-byte limit on row keys, so words longer
//! than [`MAX_WORD_LEN`] bytes are not counted, and a document whose row key is longer than
//! [`MAX_DOC_KEY_LEN`] (`4096 - MAX_WORD_LEN - 1`) bytes fails the splitter's run with a
//! message naming its cell (a dead letter) instead of failing on the store's limit.
//!
//! ```toml
//! [[binding]]
//! name = "wc-split"
//! wasm = "word_count.wasm"
//! table = "docs"
//! column = "raw:text"
//! reads = ["docs/wc:words"]
//! writes = ["docs/wc:words", "wc_parts/part:count", "words/count:dirty"]
//!
//! [[binding]]
//! name = "wc-sum"
//! wasm = "word_count.wasm"
//! table = "words"
//! column = "count:dirty"
//! notify = "weak"
//! reads = ["wc_parts/part:count"]
//! writes = ["words/count:total"]
//! ```
//!
//! (A `writes` rule on the weak column `words/count:dirty` is what allows `notify-weak` on it.)
//! Build with `scripts/build-guests` (→ `target/guests/word_count.wasm`); unit tests run
//! natively: `cargo test -p word-count` in `guest-examples/`.

use std::collections::BTreeMap;

use percolator_guest::{Error, Notification, Observer, Result, Txn};

/// A document's text; the splitter's column.
pub const TEXT: &str = "raw:text";
/// What the splitter last published for a document: sorted `word\tcount\n` lines.
pub const PUBLISHED: &str = "wc:words";
/// Per-(word, document) counts: row `"<word> <doc>"`.
pub const PARTS: &str = "wc_parts";
/// A part's count (decimal).
pub const PART: &str = "part:count";
/// Per-word rows: the summer's table.
pub const WORDS: &str = "words";
/// The weak-notify column that wakes the summer.
pub const DIRTY: &str = "count:dirty";
/// A word's total over all documents (decimal).
pub const TOTAL: &str = "count:total";
/// Longest counted word, in bytes.
pub const MAX_WORD_LEN: usize = 100;
/// Longest document row key, in bytes: a part row `"<word> <doc>"` is then at most 4096 bytes,
/// the store's limit on row keys.
pub const MAX_DOC_KEY_LEN: usize = 4096 - MAX_WORD_LEN - 1;

/// Cells per summer scan page (the host caps a call at 10,000).
const PAGE: u32 = 1000;

/// The observer (both roles).
pub struct WordCount;

impl Observer for WordCount {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        match n.column() {
            TEXT => split(txn, n),
            DIRTY => sum(txn, n, PAGE),
            other => Err(Error::failed(format!(
                "word-count is bound to {}/{other}; bind it to {TEXT} (strong) and {WORDS}/{DIRTY} (weak)",
                n.table()
            ))),
        }
    }
}

percolator_guest::export_observer!(WordCount);

/// Word counts of `text`: lowercase alphanumeric runs of at most [`MAX_WORD_LEN`] bytes.
pub fn count_words(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()) {
        if !word.is_empty() && word.len() <= MAX_WORD_LEN {
            *counts.entry(word.to_owned()).or_insert(0) += 1;
        }
    }
    counts
}

/// The part row of `word` in document `doc`: `"<word> <doc>"`. A word has no space, so the
/// rows of one word are exactly `["<word> ", "<word>!")`.
pub fn part_row(word: &str, doc: &[u8]) -> Vec<u8> {
    [word.as_bytes(), b" ", doc].concat()
}

/// The splitter: publishes the changes of one document's word counts.
fn split(txn: &mut impl Txn, n: &Notification) -> Result<()> {
    let doc = n.row();
    if doc.len() > MAX_DOC_KEY_LEN {
        return Err(Error::failed(format!(
            "{}/{}/{}: the row key is {} bytes, longer than {MAX_DOC_KEY_LEN} (its part rows \"<word> <doc>\" \
             must fit in 4096 bytes)",
            n.table(),
            String::from_utf8_lossy(doc),
            n.column(),
            doc.len()
        )));
    }
    let cells = [n.cell.clone(), n.cell.sibling(PUBLISHED)];
    let [text, published]: [Option<Vec<u8>>; 2] = txn
        .get_many(&cells)?
        .try_into()
        .map_err(|v: Vec<_>| Error::failed(format!("get_many of 2 cells returned {}", v.len())))?;
    // Invalid UTF-8 becomes U+FFFD, which separates words like any other punctuation.
    let new = count_words(&String::from_utf8_lossy(text.as_deref().unwrap_or_default()));
    let old = match published {
        Some(p) => parse_published(&p)
            .map_err(|e| Error::failed(format!("{}/{}/{PUBLISHED}: {e}", n.table(), String::from_utf8_lossy(doc))))?,
        None => BTreeMap::new(),
    };
    let mut words: Vec<&String> = old.keys().chain(new.keys()).collect();
    words.sort();
    words.dedup();
    for word in words {
        let count = new.get(word).copied().unwrap_or(0);
        if old.get(word).copied().unwrap_or(0) == count {
            continue;
        }
        let row = part_row(word, doc);
        if count == 0 {
            txn.delete(PARTS, &row, PART)?;
        } else {
            txn.set_str(PARTS, &row, PART, &count.to_string())?;
        }
        txn.notify_weak(WORDS, word.as_bytes(), DIRTY)?;
    }
    // Always written: two runs on one document conflict here even if neither changed a part.
    if new.is_empty() {
        txn.delete(n.table(), doc, PUBLISHED)
    } else {
        txn.set_str(n.table(), doc, PUBLISHED, &format_published(&new))
    }
}

/// The summer: recomputes one word's total from its parts.
fn sum(txn: &mut impl Txn, n: &Notification, page: u32) -> Result<()> {
    let word = n.row();
    let end = [word, b"!"].concat();
    let mut start = [word, b" "].concat();
    let mut total: u64 = 0;
    loop {
        let cells = txn.scan(PARTS, &start, Some(&end), Some(&[PART]), page)?;
        for e in &cells {
            let count = std::str::from_utf8(&e.value).ok().and_then(|v| v.parse::<u64>().ok()).ok_or_else(|| {
                Error::failed(format!(
                    "{PARTS}/{}/{PART} {:?} is not a whole number",
                    String::from_utf8_lossy(&e.row),
                    String::from_utf8_lossy(&e.value)
                ))
            })?;
            total = total.saturating_add(count);
        }
        // A page may be short without the range being exhausted (the host may cap a call):
        // only an empty one ends it. One column per row: the next page starts right after the
        // last row.
        match cells.last() {
            Some(last) => start = [last.row.as_slice(), &[0]].concat(),
            None => break,
        }
    }
    let current = txn.get(n.table(), word, TOTAL)?;
    let wanted = (total > 0).then(|| total.to_string().into_bytes());
    if current == wanted {
        return Ok(());
    }
    match wanted {
        Some(v) => txn.set(n.table(), word, TOTAL, &v),
        None => txn.delete(n.table(), word, TOTAL),
    }
}

/// Parses `word\tcount\n` lines.
fn parse_published(value: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    let text = std::str::from_utf8(value).map_err(|e| format!("not UTF-8: {e}"))?;
    text.lines()
        .map(|line| {
            line.split_once('\t')
                .and_then(|(w, c)| Some((w.to_owned(), c.parse::<u64>().ok()?)))
                .ok_or_else(|| format!("line {line:?} is not \"word<TAB>count\""))
        })
        .collect()
}

/// Formats counts as sorted `word\tcount\n` lines.
fn format_published(counts: &BTreeMap<String, u64>) -> String {
    counts.iter().map(|(w, c)| format!("{w}\t{c}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_guest::Cell;
    use percolator_guest::mem::MemStore;

    const DOCS: &str = "docs";

    /// A store with both bindings' declared writes and the weak column.
    fn store() -> MemStore {
        let store = MemStore::new();
        store.declare_writes(DOCS, &[PUBLISHED]);
        store.declare_writes(PARTS, &[PART]);
        store.declare_writes(WORDS, &[TOTAL]);
        store.bind_weak(WORDS, DIRTY);
        store
    }

    /// Writes a document and runs the splitter on it.
    fn write_doc(store: &MemStore, doc: &str, text: &str) {
        store.put(DOCS, doc, TEXT, text);
        store.observe::<WordCount>(&store.notification(DOCS, doc, TEXT)).unwrap();
    }

    /// Delivers every pending weak notification to the summer, each twice (weak runs may repeat).
    fn drain(store: &MemStore) -> Vec<String> {
        let cells = store.take_weak_notifications();
        for cell in cells.iter().chain(&cells) {
            store.observe::<WordCount>(&Notification::weak(cell.clone())).unwrap();
        }
        cells.iter().map(|c| String::from_utf8(c.row.clone()).unwrap()).collect()
    }

    fn parts(store: &MemStore) -> Vec<(String, String)> {
        store
            .cells(PARTS)
            .into_iter()
            .map(|(c, v)| (String::from_utf8(c.row).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn totals(store: &MemStore) -> BTreeMap<String, u64> {
        store
            .cells(WORDS)
            .into_iter()
            .filter(|(c, _)| c.column == TOTAL)
            .map(|(c, v)| (String::from_utf8(c.row).unwrap(), String::from_utf8(v).unwrap().parse().unwrap()))
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn words_are_lowercase_alphanumeric_runs() {
        let counts = count_words("The cat, the HAT; x2 x2-Ünïcode! ünïcode");
        let want = [("cat", 1), ("hat", 1), ("the", 2), ("x2", 2), ("ünïcode", 2)];
        assert_eq!(counts, want.iter().map(|(w, c)| (w.to_string(), *c)).collect());
        assert!(count_words(&"a".repeat(MAX_WORD_LEN + 1)).is_empty());
        assert!(count_words(" ,. ").is_empty());
    }

    #[test]
    fn published_counts_round_trip() {
        let counts = count_words("b a b");
        assert_eq!(format_published(&counts), "a\t1\nb\t2\n");
        assert_eq!(parse_published(b"a\t1\nb\t2\n").unwrap(), counts);
        assert!(parse_published(b"a 1\n").is_err());
    }

    #[test]
    fn the_splitter_writes_only_the_parts_that_changed() {
        let store = store();
        write_doc(&store, "d1", "a b b");
        assert_eq!(parts(&store), pairs(&[("a d1", "1"), ("b d1", "2")]));
        assert_eq!(store.get_str(DOCS, "d1", PUBLISHED).as_deref(), Some("a\t1\nb\t2\n"));
        assert_eq!(drain(&store), ["a", "b"]);

        // Rewrite: a disappears, b drops to 1, c appears.
        write_doc(&store, "d1", "B c");
        assert_eq!(parts(&store), pairs(&[("b d1", "1"), ("c d1", "1")]));
        assert_eq!(drain(&store), ["a", "b", "c"]);

        // Same counts in another order: no part written, no word notified.
        store.put(DOCS, "d1", TEXT, "c, b.");
        let mut txn = store.begin();
        WordCount::observe(&mut txn, &store.notification(DOCS, "d1", TEXT)).unwrap();
        let written: Vec<&Cell> = txn.buffered().keys().collect();
        assert_eq!(written, [&Cell::new(DOCS, *b"d1", PUBLISHED)]);
        assert!(txn.buffered_weak().is_empty());
        txn.commit().unwrap();

        // Emptied (or deleted) text: every part and the record go.
        store.remove(DOCS, "d1", TEXT);
        store.observe::<WordCount>(&store.notification(DOCS, "d1", TEXT)).unwrap();
        assert!(parts(&store).is_empty());
        assert_eq!(store.get(DOCS, "d1", PUBLISHED), None);
        assert_eq!(drain(&store), ["b", "c"]);
        assert!(totals(&store).is_empty(), "totals of vanished words are deleted");
    }

    #[test]
    fn totals_equal_a_batch_count_after_rewrites() {
        let store = store();
        let mut texts: BTreeMap<&str, &str> = BTreeMap::new();
        let rounds: [&[(&str, &str)]; 3] = [
            &[("d1", "the cat sat on the mat"), ("d2", "The dog. The end."), ("d3", "a cat and a dog")],
            &[("d2", "the end of the dog"), ("d4", "the the the")],
            &[("d1", "mat"), ("d3", ""), ("d5", "Cat cat CAT")],
        ];
        for round in rounds {
            for (doc, text) in round {
                write_doc(&store, doc, text);
                texts.insert(doc, text);
            }
            drain(&store);
            let mut batch: BTreeMap<String, u64> = BTreeMap::new();
            for text in texts.values() {
                for (w, c) in count_words(text) {
                    *batch.entry(w).or_insert(0) += c;
                }
            }
            assert_eq!(totals(&store), batch);
        }
    }

    #[test]
    fn the_summer_pages_through_parts_and_is_idempotent() {
        let store = store();
        for d in 0..7 {
            write_doc(&store, &format!("d{d}"), &"hot ".repeat(d + 1));
        }
        // A word sharing the prefix must not be summed into "hot".
        write_doc(&store, "x", "hotter");
        store.take_weak_notifications();
        let n = Notification::weak(Cell::new(WORDS, *b"hot", DIRTY));
        store.run(|txn| sum(txn, &n, 2)).unwrap();
        assert_eq!(totals(&store)["hot"], 28);
        // A repeated notification changes nothing: no write at all.
        let mut txn = store.begin();
        sum(&mut txn, &n, 3).unwrap();
        assert!(txn.buffered().is_empty());
        // A host that returns fewer cells than asked for: short pages do not end the scan.
        store.cap_scans(2);
        let mut txn = store.begin();
        sum(&mut txn, &n, PAGE).unwrap();
        assert!(txn.buffered().is_empty(), "the same total: {:?}", txn.buffered());
    }

    #[test]
    fn splitters_of_different_documents_never_conflict_on_hot_words() {
        let store = store();
        store.put(DOCS, "d1", TEXT, "the hot word");
        store.put(DOCS, "d2", TEXT, "the hot word again");
        let (n1, n2) = (store.notification(DOCS, "d1", TEXT), store.notification(DOCS, "d2", TEXT));
        let mut a = store.begin();
        let mut b = store.begin();
        WordCount::observe(&mut a, &n1).unwrap();
        WordCount::observe(&mut b, &n2).unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        drain(&store);
        assert_eq!(totals(&store)["the"], 2);
    }

    #[test]
    fn documents_with_over_long_row_keys_fail_naming_the_cell() {
        let store = store();
        let longest = "d".repeat(MAX_DOC_KEY_LEN);
        let word = "w".repeat(MAX_WORD_LEN);
        write_doc(&store, &longest, &word);
        assert_eq!(parts(&store), pairs(&[(&format!("{word} {longest}"), "1")]));
        assert_eq!(part_row(&word, longest.as_bytes()).len(), 4096);

        let too_long = "d".repeat(MAX_DOC_KEY_LEN + 1);
        store.put(DOCS, &too_long, TEXT, "a word");
        let e = store.observe::<WordCount>(&store.notification(DOCS, &too_long, TEXT)).unwrap_err();
        let want = format!("docs/{too_long}/raw:text: the row key is 3996 bytes, longer than 3995");
        assert!(matches!(&e, Error::Failed(m) if m.starts_with(&want)), "{e}");
        assert_eq!(parts(&store).len(), 1);
    }

    #[test]
    fn an_unexpected_column_is_an_error_naming_it() {
        let store = store();
        let e = store.observe::<WordCount>(&store.notification(DOCS, "d1", "raw:other")).unwrap_err();
        assert!(e.message().contains("docs/raw:other"), "{e}");
    }
}
