//! The exporter: the inverted index rows of the title and text of canonical pages.

use std::collections::BTreeMap;

use percolator_guest::{Notification, Observer, Result, Txn};

use super::{decode, get_page, notified_url, put};
use crate::schema::{
    CLUSTER_CANONICAL, DOC_TEXT, DOC_TITLE, EXPORT_TERMS, HIT_COUNT, INDEX, PAGES, decode_term_counts, encode_count,
    encode_term_counts, join_row, length_row,
};
use crate::text::count_terms;

/// Writes `index/"term C"/hit:count` for every term of the title and text of an exported URL
/// `C`, and deletes stale ones.
///
/// `C` is exported iff `cluster:canonical(C) == C`. Its terms are those of `doc:title` and
/// `doc:text`, counted with repeats; `export:terms(C)` records them, the rows written or
/// deleted are the difference from the recorded previous value, and `export:terms` is written
/// on every run (deleted when there are no terms, as for a URL that is not exported). The
/// anchors forwarded to `C` are not the exporter's: link forwarding counts them into
/// `anchor:count` cells of the same rows by deltas, and ranking adds the two, so an exporter
/// run is O(the page's text) whatever its inlinks.
///
/// It also keeps the text's length, the sum of its term counts, in `index/" C"/hit:count`
/// ([`length_row`]: the row of the empty term; present exactly when `C` is exported, `0` for
/// an exported page without terms), which ranking reads to know the exported pages and their
/// lengths. It reads that cell and writes it only when it differs — not from the recorded
/// `export:terms`, so that a store whose pages were exported before lengths were kept gets
/// them from one more run of each (`percolator notify` of `pages/export:dirty`).
///
/// Bind to `pages/export:dirty` with `notify = "weak"`: the column is never written, only
/// notified, so a run may repeat; it recomputes from the current state, and `export:terms`,
/// written on every run, serializes runs on one URL. Reads `pages/cluster:canonical`,
/// `pages/doc:title`, `pages/doc:text`, `pages/export:terms`, `index/hit:count` (the length
/// row); writes `index/hit:count`, `pages/export:terms`.
pub struct Exporter;

impl Observer for Exporter {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let url = notified_url(n)?;
        let row = url.as_bytes();
        let [canonical, title, text, recorded] =
            get_page(txn, url, [CLUSTER_CANONICAL, DOC_TITLE, DOC_TEXT, EXPORT_TERMS])?;
        let old = decode(PAGES, row, EXPORT_TERMS, recorded.as_deref(), decode_term_counts)?;
        let exported = canonical.as_deref() == Some(url);
        let mut new = BTreeMap::new();
        if exported {
            count_terms(&mut new, title.as_deref().unwrap_or_default());
            count_terms(&mut new, text.as_deref().unwrap_or_default());
        }
        for term in old.keys().filter(|t| !new.contains_key(*t)) {
            txn.delete(INDEX, &join_row(term, url), HIT_COUNT)?;
        }
        for (term, &count) in &new {
            if old.get(term) != Some(&count) {
                txn.set_str(INDEX, &join_row(term, url), HIT_COUNT, &encode_count(count))?;
            }
        }
        // Only this URL's runs write its length row's hit:count, and they serialize on
        // `export:terms`: the value read is the last committed run's.
        let length_row = length_row(url);
        let new_length = exported.then(|| encode_count(length(&new)));
        if txn.get(INDEX, &length_row, HIT_COUNT)?.as_deref() != new_length.as_deref().map(str::as_bytes) {
            put(txn, INDEX, &length_row, HIT_COUNT, new_length.as_deref())?;
        }
        let terms = (!new.is_empty()).then(|| encode_term_counts(&new));
        put(txn, PAGES, row, EXPORT_TERMS, terms.as_deref())
    }
}

/// A document's length: its term occurrences, all terms together. (Saturates rather than
/// overflow; counts of one page's terms are far from that.)
fn length(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().fold(0, |sum, &n| sum.saturating_add(n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observers::test_util::{column, store};
    use crate::schema::{ANCHOR_COUNT, EXPORT_DIRTY};
    use percolator_guest::mem::MemStore;
    use percolator_guest::{Cell, Error};

    /// The exporter's (weak) notification for `url`.
    fn dirty(url: &str) -> Notification {
        Notification::weak(Cell::new(PAGES, url, EXPORT_DIRTY))
    }

    fn export(store: &MemStore, url: &str) {
        store.observe::<Exporter>(&dirty(url)).unwrap();
    }

    fn index(store: &MemStore) -> Vec<(String, String)> {
        column(store, INDEX, HIT_COUNT)
    }

    fn strs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn exports_title_and_text() {
        let store = store();
        store.declare_writes(INDEX, &[HIT_COUNT]);
        store.declare_writes(PAGES, &[EXPORT_TERMS]);
        store.put(PAGES, "c:x", CLUSTER_CANONICAL, "c:x");
        store.put(PAGES, "c:x", DOC_TITLE, "Cats");
        store.put(PAGES, "c:x", DOC_TEXT, "the cats and dogs");
        // Forwarded anchors are counted by link forwarding, not here.
        store.put(INDEX, join_row("dogs", "c:x"), ANCHOR_COUNT, "5");
        export(&store, "c:x");
        assert_eq!(index(&store), strs(&[(" c:x", "3"), ("cats c:x", "2"), ("dogs c:x", "1")]));
        assert_eq!(store.get_str(PAGES, "c:x", EXPORT_TERMS).as_deref(), Some("cats\t2\ndogs\t1\n"));
        assert_eq!(store.get_str(INDEX, join_row("dogs", "c:x"), ANCHOR_COUNT).as_deref(), Some("5"));
        // A repeated notification (weak runs may repeat) writes the same values again.
        let mut txn = store.begin();
        Exporter::observe(&mut txn, &dirty("c:x")).unwrap();
        let written: Vec<&str> = txn.buffered().keys().map(|c| c.column.as_str()).collect();
        assert_eq!(written, [EXPORT_TERMS]);
        txn.commit().unwrap();
        assert_eq!(index(&store), strs(&[(" c:x", "3"), ("cats c:x", "2"), ("dogs c:x", "1")]));
    }

    #[test]
    fn an_exported_page_without_terms_has_a_length_of_zero() {
        let store = store();
        store.put(PAGES, "c:x", CLUSTER_CANONICAL, "c:x");
        store.put(PAGES, "c:x", DOC_TEXT, "a");
        export(&store, "c:x");
        assert_eq!(index(&store), strs(&[(" c:x", "0")]));
        assert_eq!(store.get(PAGES, "c:x", EXPORT_TERMS), None);
        store.remove(PAGES, "c:x", CLUSTER_CANONICAL);
        export(&store, "c:x");
        assert!(index(&store).is_empty());
    }

    #[test]
    fn writes_the_difference_and_deletes_stale_rows() {
        let store = store();
        store.put(PAGES, "c:x", CLUSTER_CANONICAL, "c:x");
        store.put(PAGES, "c:x", DOC_TEXT, "alpha beta beta");
        export(&store, "c:x");
        store.put(PAGES, "c:x", DOC_TEXT, "alpha beta gamma");
        let mut txn = store.begin();
        Exporter::observe(&mut txn, &dirty("c:x")).unwrap();
        let written: Vec<(String, bool)> = txn
            .buffered()
            .iter()
            .map(|(c, v)| (format!("{}/{}", c.table, String::from_utf8_lossy(&c.row)), v.is_some()))
            .collect();
        // Three terms before and after: the length row stays.
        let want = [("index/beta c:x", true), ("index/gamma c:x", true), ("pages/c:x", true)];
        assert_eq!(written, want.map(|(c, set)| (c.to_owned(), set)));
        txn.commit().unwrap();
        let want = [(" c:x", "3"), ("alpha c:x", "1"), ("beta c:x", "1"), ("gamma c:x", "1")];
        assert_eq!(index(&store), strs(&want));

        store.put(PAGES, "c:x", DOC_TEXT, "gamma");
        export(&store, "c:x");
        assert_eq!(index(&store), strs(&[(" c:x", "1"), ("gamma c:x", "1")]));
    }

    #[test]
    fn a_missing_or_wrong_length_row_is_written_though_the_terms_are_unchanged() {
        // As in a store exported before lengths were kept: terms recorded, no length row.
        let store = store();
        store.put(PAGES, "c:x", CLUSTER_CANONICAL, "c:x");
        store.put(PAGES, "c:x", DOC_TEXT, "alpha beta beta");
        store.put(PAGES, "c:x", EXPORT_TERMS, "alpha\t1\nbeta\t2\n");
        store.put(INDEX, "alpha c:x", HIT_COUNT, "1");
        store.put(INDEX, "beta c:x", HIT_COUNT, "2");
        export(&store, "c:x");
        assert_eq!(index(&store), strs(&[(" c:x", "3"), ("alpha c:x", "1"), ("beta c:x", "2")]));
        store.put(INDEX, " c:x", HIT_COUNT, "junk");
        export(&store, "c:x");
        assert_eq!(store.get_str(INDEX, " c:x", HIT_COUNT).as_deref(), Some("3"));
    }

    #[test]
    fn pages_that_are_not_canonical_are_not_exported() {
        let store = store();
        store.put(PAGES, "u:a", DOC_TEXT, "words here");
        export(&store, "u:a");
        assert!(index(&store).is_empty());
        assert_eq!(store.get(PAGES, "u:a", EXPORT_TERMS), None);

        store.put(PAGES, "u:a", CLUSTER_CANONICAL, "u:a");
        export(&store, "u:a");
        assert_eq!(index(&store), strs(&[(" u:a", "2"), ("here u:a", "1"), ("words u:a", "1")]));

        // Another page becomes canonical: u:a's rows go.
        store.put(PAGES, "u:a", CLUSTER_CANONICAL, "u:b");
        export(&store, "u:a");
        assert!(index(&store).is_empty());
        assert_eq!(store.get(PAGES, "u:a", EXPORT_TERMS), None);
    }

    #[test]
    fn every_run_writes_export_terms() {
        let store = store();
        let mut txn = store.begin();
        Exporter::observe(&mut txn, &dirty("u:a")).unwrap();
        let written: Vec<(String, bool)> =
            txn.buffered().iter().map(|(c, v)| (c.column.clone(), v.is_some())).collect();
        assert_eq!(written, [(EXPORT_TERMS.to_owned(), false)]);
    }

    #[test]
    fn bad_recorded_terms_fail_naming_the_cell() {
        let store = store();
        store.put(PAGES, "u:a", EXPORT_TERMS, "cats\tmany\n");
        let err = store.observe::<Exporter>(&dirty("u:a")).unwrap_err();
        assert_eq!(
            err,
            Error::failed("pages/u:a/export:terms: count \"many\" of term \"cats\" is not a decimal number")
        );
    }
}
