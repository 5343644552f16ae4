//! `word-count`: counts words over all documents into a combined column (paper §2.4: a word
//! like "the" is in every document, so adding to one counter row per word by read-modify-write
//! would make every document's transaction conflict with every other's).
//!
//! The observer is bound strongly to `docs/raw:text`. It counts the words of the document
//! (lowercase alphanumeric runs) and diffs them against what it counted before, recorded in
//! `docs/wc:words` (sorted `word\tcount\n` lines; absent when none). For each word whose count
//! changed it **combines** the difference (`+n` or `−n`) into `words/<word>/count:total`, a
//! combined column (`[[combine]] op = "sum", type = "i64"`); then it writes `wc:words`.
//! Combines never conflict with each other, so documents sharing the hottest word all commit
//! at once, and a read of `count:total` is the total (decimal text) of every committed delta.
//! Two runs on one document do conflict — on its `wc:words` — so each change of a document's
//! counts is added exactly once. A word no document has any more reads `0`.
//!
//! ```toml
//! [[combine]]
//! table = "words"
//! column = "count:total"
//! op = "sum"
//! type = "i64"
//!
//! [[binding]]
//! name = "wc-split"
//! wasm = "word_count.wasm"
//! table = "docs"
//! column = "raw:text"
//! reads = ["docs/wc:words"]
//! writes = ["docs/wc:words", "words/count:total"]
//! ```
//!
//! (A `writes` rule on the combined column is what allows `combine` into it.) Build with
//! `scripts/build-guests` (→ `target/guests/word_count.wasm`); unit tests run natively:
//! `cargo test -p word-count` in `guest-examples/`.

use std::collections::BTreeMap;

use percolator_guest::{Delta, Error, Notification, Observer, Result, Txn};

/// A document's text; the observer's column.
pub const TEXT: &str = "raw:text";
/// What the observer last counted for a document: sorted `word\tcount\n` lines.
pub const PUBLISHED: &str = "wc:words";
/// Per-word rows.
pub const WORDS: &str = "words";
/// A word's total over all documents: a combined column (sum, i64).
pub const TOTAL: &str = "count:total";
/// Longest counted word, in bytes.
pub const MAX_WORD_LEN: usize = 100;

/// The observer.
pub struct WordCount;

impl Observer for WordCount {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        match n.column() {
            TEXT => split(txn, n),
            other => Err(Error::failed(format!("word-count is bound to {}/{other}; bind it to {TEXT}", n.table()))),
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

/// Adds the changes of one document's word counts to the totals.
fn split(txn: &mut impl Txn, n: &Notification) -> Result<()> {
    let doc = n.row();
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
        let (before, after) = (old.get(word).copied().unwrap_or(0), new.get(word).copied().unwrap_or(0));
        if before != after {
            // Counts are bounded by the text's length, far below i64::MAX.
            let delta = after as i64 - before as i64;
            txn.combine(WORDS, word.as_bytes(), TOTAL, Delta::Int(delta))?;
        }
    }
    // Always written: two runs on one document conflict here even if neither changed a count,
    // so each change is added exactly once.
    if new.is_empty() {
        txn.delete(n.table(), doc, PUBLISHED)
    } else {
        txn.set_str(n.table(), doc, PUBLISHED, &format_published(&new))
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
    use percolator_guest::mem::{CombineOp, CombineType, MemStore};

    const DOCS: &str = "docs";

    /// A store with the binding's declared writes and the combined column.
    fn store() -> MemStore {
        let store = MemStore::new();
        store.combine_column(WORDS, TOTAL, CombineOp::Sum, CombineType::I64).unwrap();
        store.declare_writes(DOCS, &[PUBLISHED]);
        store.declare_writes(WORDS, &[TOTAL]);
        store
    }

    /// Writes a document and runs the observer on it.
    fn write_doc(store: &MemStore, doc: &str, text: &str) {
        store.put(DOCS, doc, TEXT, text);
        store.observe::<WordCount>(&store.notification(DOCS, doc, TEXT)).unwrap();
    }

    /// Every word's total, zeros included.
    fn totals(store: &MemStore) -> BTreeMap<String, i64> {
        store
            .cells(WORDS)
            .into_iter()
            .filter(|(c, _)| c.column == TOTAL)
            .map(|(c, v)| (String::from_utf8(c.row).unwrap(), String::from_utf8(v).unwrap().parse().unwrap()))
            .collect()
    }

    /// The words of the totals that are not zero.
    fn nonzero(store: &MemStore) -> BTreeMap<String, i64> {
        totals(store).into_iter().filter(|(_, c)| *c != 0).collect()
    }

    fn counts(list: &[(&str, i64)]) -> BTreeMap<String, i64> {
        list.iter().map(|(w, c)| (w.to_string(), *c)).collect()
    }

    /// The combines a run buffered, as (word, delta text).
    fn combines(txn: &percolator_guest::mem::MemTxn) -> Vec<(String, String)> {
        txn.buffered_combines()
            .into_iter()
            .map(|(c, v)| (String::from_utf8(c.row).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
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
    fn the_observer_combines_only_the_counts_that_changed() {
        let store = store();
        write_doc(&store, "d1", "a b b");
        assert_eq!(totals(&store), counts(&[("a", 1), ("b", 2)]));
        assert_eq!(store.get_str(DOCS, "d1", PUBLISHED).as_deref(), Some("a\t1\nb\t2\n"));

        // Rewrite: a disappears, b drops to 1, c appears.
        store.put(DOCS, "d1", TEXT, "B c");
        let mut txn = store.begin();
        WordCount::observe(&mut txn, &store.notification(DOCS, "d1", TEXT)).unwrap();
        let want = [("a", "-1"), ("b", "-1"), ("c", "1")];
        assert_eq!(combines(&txn), want.map(|(w, d)| (w.to_owned(), d.to_owned())));
        txn.commit().unwrap();
        assert_eq!(totals(&store), counts(&[("a", 0), ("b", 1), ("c", 1)]));

        // Same counts in another order: no combine, only the record is rewritten.
        store.put(DOCS, "d1", TEXT, "c, b.");
        let mut txn = store.begin();
        WordCount::observe(&mut txn, &store.notification(DOCS, "d1", TEXT)).unwrap();
        let written: Vec<&Cell> = txn.buffered().keys().collect();
        assert_eq!(written, [&Cell::new(DOCS, *b"d1", PUBLISHED)]);
        assert!(combines(&txn).is_empty());
        txn.commit().unwrap();

        // Emptied (or deleted) text: every count is taken back and the record goes.
        store.remove(DOCS, "d1", TEXT);
        store.observe::<WordCount>(&store.notification(DOCS, "d1", TEXT)).unwrap();
        assert_eq!(store.get(DOCS, "d1", PUBLISHED), None);
        assert!(nonzero(&store).is_empty(), "{:?}", totals(&store));
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
            let mut batch: BTreeMap<String, i64> = BTreeMap::new();
            for text in texts.values() {
                for (w, c) in count_words(text) {
                    *batch.entry(w).or_insert(0) += c as i64;
                }
            }
            assert_eq!(nonzero(&store), batch);
        }
    }

    #[test]
    fn runs_of_different_documents_never_conflict_on_hot_words() {
        let store = store();
        for d in 0..5 {
            store.put(DOCS, format!("d{d}"), TEXT, "the hot word ".repeat(d + 1));
        }
        // Every run starts before any commits: all of them add to "the" at once.
        let mut runs = Vec::new();
        for d in 0..5 {
            let mut txn = store.begin();
            WordCount::observe(&mut txn, &store.notification(DOCS, format!("d{d}"), TEXT)).unwrap();
            runs.push(txn);
        }
        for txn in runs {
            txn.commit().unwrap();
        }
        assert_eq!(totals(&store), counts(&[("hot", 15), ("the", 15), ("word", 15)]));
    }

    #[test]
    fn two_runs_on_one_document_conflict_so_a_change_is_added_once() {
        let store = store();
        store.put(DOCS, "d1", TEXT, "a a");
        let n = store.notification(DOCS, "d1", TEXT);
        let (mut first, mut second) = (store.begin(), store.begin());
        WordCount::observe(&mut first, &n).unwrap();
        WordCount::observe(&mut second, &n).unwrap();
        first.commit().unwrap();
        assert!(second.commit().unwrap_err().is_conflict());
        // The retry sees the first run's record: nothing more to add.
        store.observe::<WordCount>(&n).unwrap();
        assert_eq!(totals(&store), counts(&[("a", 2)]));
    }

    #[test]
    fn an_unexpected_column_is_an_error_naming_it() {
        let store = store();
        let e = store.observe::<WordCount>(&store.notification(DOCS, "d1", "raw:other")).unwrap_err();
        assert!(e.message().contains("docs/raw:other"), "{e}");
    }
}
