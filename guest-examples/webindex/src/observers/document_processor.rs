//! The document processor: `raw:html` → `doc:title`, `doc:text`, `doc:links`, `doc:hash`.

use percolator_guest::{Notification, Observer, Result, Txn};

use super::{bad_cell, get_page, notified_url, notify, put};
use crate::schema::{DOC_HASH, DOC_LINKS, DOC_TEXT, DOC_TITLE, EXPORT_DIRTY, PAGES, RAW_HTML, encode_links};
use crate::text::content_hash;
use crate::{charset, html};

/// Parses `pages/<url>/raw:html` into the four `doc:*` columns of the same row.
///
/// Writes a `doc:*` column only when its value changes (so unchanged re-crawls notify nobody),
/// and weakly notifies `export:dirty` of the page when `doc:title` or `doc:text` changes.
/// `raw:html` is decoded by [`charset::decode`] (any encoding, never fails). `raw:html` absent:
/// deletes the `doc:*` columns. A row key that is not a normalized http(s) URL of at most
/// [`MAX_URL_BYTES`](html::MAX_URL_BYTES) ([`html::check_url_key`]): rows derived from it
/// would be unreachable or too long.
///
/// Bind to `pages/raw:html`. Reads `pages/raw:html`, `pages/doc:*`; writes `pages/doc:*`;
/// notifies `pages/export:dirty`.
pub struct DocumentProcessor;

impl Observer for DocumentProcessor {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let url = notified_url(n)?;
        let row = url.as_bytes();
        let new = match txn.get(PAGES, row, RAW_HTML)? {
            None => None,
            Some(raw) => {
                // Row keys built from URLs ("<url> <other>") rely on URLs without whitespace and
                // short enough that two of them fit in one row key.
                html::check_url_key(url).map_err(|e| bad_cell(PAGES, row, RAW_HTML, e))?;
                let doc = html::parse(url, &charset::decode(&raw).0);
                let hash = content_hash(&doc.title, &doc.text);
                let links = encode_links(&doc.links);
                Some([doc.title, doc.text, links, hash])
            }
        };
        let columns = [DOC_TITLE, DOC_TEXT, DOC_LINKS, DOC_HASH];
        let old = get_page(txn, url, columns)?;
        let mut text_changed = false;
        for (i, column) in columns.into_iter().enumerate() {
            let value = new.as_ref().map(|values| values[i].as_str());
            if old[i].as_deref() != value {
                put(txn, PAGES, row, column, value)?;
                text_changed |= column == DOC_TITLE || column == DOC_TEXT;
            }
        }
        if text_changed {
            notify(txn, url, EXPORT_DIRTY)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observers::test_util::{dump, store, take_notified};
    use percolator_guest::mem::MemStore;
    use percolator_guest::{Cell, Error};

    const URL: &str = "http://a.org/x/p.html";

    fn run(store: &MemStore) -> Result<()> {
        store.observe::<DocumentProcessor>(&store.notification(PAGES, URL, RAW_HTML))
    }

    #[test]
    fn writes_doc_columns_and_triggers_export() {
        let store = store();
        store.declare_writes(PAGES, &[DOC_TITLE, DOC_TEXT, DOC_LINKS, DOC_HASH, EXPORT_DIRTY]);
        store.put(PAGES, URL, RAW_HTML, "<title>T</title><p>Body <a href='q.html#f'>go</a> <a href=/>home</a>");
        run(&store).unwrap();
        assert_eq!(store.get_str(PAGES, URL, DOC_TITLE).as_deref(), Some("T"));
        assert_eq!(store.get_str(PAGES, URL, DOC_TEXT).as_deref(), Some("Body go home"));
        assert_eq!(
            store.get_str(PAGES, URL, DOC_LINKS).as_deref(),
            Some("http://a.org/x/q.html\tgo\nhttp://a.org/\thome\n")
        );
        assert_eq!(store.get_str(PAGES, URL, DOC_HASH), Some(content_hash("T", "Body go home")));
        assert_eq!(take_notified(&store, EXPORT_DIRTY), [URL]);
    }

    #[test]
    fn a_row_key_that_is_not_a_normalized_url_fails_the_run() {
        let store = store();
        store.declare_writes(PAGES, &[DOC_TITLE, DOC_TEXT, DOC_LINKS, DOC_HASH, EXPORT_DIRTY]);
        for (url, expected) in [("HTTP://A.org/x", "(expected \"http://a.org/x\")"), ("http://a.org/a b", "URL")] {
            store.put(PAGES, url, RAW_HTML, "<title>T</title>");
            let e = store.observe::<DocumentProcessor>(&store.notification(PAGES, url, RAW_HTML)).unwrap_err();
            let prefix = format!("pages/{url}/raw:html: the row key is not a normalized");
            assert!(matches!(&e, Error::Failed(m) if m.starts_with(&prefix) && m.ends_with(expected)), "{e:?}");
            assert_eq!(store.get(PAGES, url, DOC_HASH), None);
        }
    }

    #[test]
    fn a_row_key_too_long_to_join_fails_the_run() {
        let store = store();
        // Normalized, but "<url> <source>" rows of its inlinks could exceed the store's limit.
        let url = format!("http://a.org/{}", "x".repeat(html::MAX_URL_BYTES));
        store.put(PAGES, &url, RAW_HTML, "<title>T</title><a href='/y'>y</a>");
        let e = store.observe::<DocumentProcessor>(&store.notification(PAGES, &url, RAW_HTML)).unwrap_err();
        let want = format!("pages/{url}/raw:html: the row key is {} bytes, longer than the 2040", url.len());
        assert!(matches!(&e, Error::Failed(m) if m.starts_with(&want)), "{e:?}");
        assert!(dump(&store, PAGES).iter().all(|(_, c, _)| c == RAW_HTML));
        // One byte shorter than the limit works, and so do its links.
        let url = format!("http://a.org/{}", "x".repeat(html::MAX_URL_BYTES - "http://a.org/".len()));
        store.put(PAGES, &url, RAW_HTML, "<a href='/y'>y</a>");
        store.observe::<DocumentProcessor>(&store.notification(PAGES, &url, RAW_HTML)).unwrap();
        assert_eq!(store.get_str(PAGES, &url, DOC_LINKS).as_deref(), Some("http://a.org/y\ty\n"));
    }

    #[test]
    fn empty_page_has_empty_doc_columns() {
        let store = store();
        store.put(PAGES, URL, RAW_HTML, "");
        run(&store).unwrap();
        for column in [DOC_TITLE, DOC_TEXT, DOC_LINKS] {
            assert_eq!(store.get_str(PAGES, URL, column).as_deref(), Some(""), "{column}");
        }
        assert_eq!(store.get_str(PAGES, URL, DOC_HASH), Some(content_hash("", "")));
        // Title and text went from absent to "": a change, so the page is re-exported.
        assert_eq!(take_notified(&store, EXPORT_DIRTY), [URL]);
    }

    #[test]
    fn writes_only_what_changed() {
        let store = store();
        let export = [Cell::new(PAGES, URL, EXPORT_DIRTY)];
        store.put(PAGES, URL, RAW_HTML, "<title>T</title>text <a href=/a>a</a>");
        run(&store).unwrap();
        store.take_weak_notifications();

        // Same content, different markup: nothing is written, nobody notified.
        store.put(PAGES, URL, RAW_HTML, "<TITLE>T</TITLE>\n<b>text</b> <a href='/a'>a</a>");
        let mut txn = store.begin();
        DocumentProcessor::observe(&mut txn, &store.notification(PAGES, URL, RAW_HTML)).unwrap();
        assert!(txn.buffered().is_empty(), "{:?}", txn.buffered());
        assert!(txn.buffered_weak().is_empty());

        // Only the links change: doc:links is written, no export notification.
        store.put(PAGES, URL, RAW_HTML, "<title>T</title>text <a href=/b>a</a>");
        let mut txn = store.begin();
        DocumentProcessor::observe(&mut txn, &store.notification(PAGES, URL, RAW_HTML)).unwrap();
        let written: Vec<&str> = txn.buffered().keys().map(|c| c.column.as_str()).collect();
        assert_eq!(written, [DOC_LINKS]);
        assert!(txn.buffered_weak().is_empty());
        txn.commit().unwrap();

        // The text changes: doc:text, doc:hash and the export notification.
        store.put(PAGES, URL, RAW_HTML, "<title>T</title>new text <a href=/b>a</a>");
        let mut txn = store.begin();
        DocumentProcessor::observe(&mut txn, &store.notification(PAGES, URL, RAW_HTML)).unwrap();
        let written: Vec<&str> = txn.buffered().keys().map(|c| c.column.as_str()).collect();
        assert_eq!(written, [DOC_HASH, DOC_TEXT]);
        assert!(txn.buffered_weak().iter().eq(&export));
    }

    #[test]
    fn removed_html_deletes_doc_columns() {
        let store = store();
        store.put(PAGES, URL, RAW_HTML, "<title>T</title>text");
        run(&store).unwrap();
        store.take_weak_notifications();
        store.remove(PAGES, URL, RAW_HTML);
        run(&store).unwrap();
        assert!(dump(&store, PAGES).is_empty(), "{:?}", dump(&store, PAGES));
        assert_eq!(take_notified(&store, EXPORT_DIRTY), [URL], "title and text went");
        // Nothing to delete any more: the next run writes nothing.
        let mut txn = store.begin();
        DocumentProcessor::observe(&mut txn, &store.notification(PAGES, URL, RAW_HTML)).unwrap();
        assert!(txn.buffered().is_empty() && txn.buffered_weak().is_empty());
    }

    #[test]
    fn html_in_legacy_encodings_is_decoded() {
        let store = store();
        store.declare_writes(PAGES, &[DOC_TITLE, DOC_TEXT, DOC_LINKS, DOC_HASH, EXPORT_DIRTY]);
        // Unlabelled Latin-1 (not UTF-8: windows-1252), then labelled Shift_JIS.
        store.put(PAGES, URL, RAW_HTML, b"<title>Caf\xe9</title><p>cr\xe8me <a href=b.html>br\xfbl\xe9e</a>");
        run(&store).unwrap();
        assert_eq!(store.get_str(PAGES, URL, DOC_TITLE).as_deref(), Some("Café"));
        assert_eq!(store.get_str(PAGES, URL, DOC_TEXT).as_deref(), Some("crème brûlée"));
        assert_eq!(store.get_str(PAGES, URL, DOC_LINKS).as_deref(), Some("http://a.org/x/b.html\tbrûlée\n"));
        store.put(PAGES, URL, RAW_HTML, b"<meta charset=shift_jis><title>\x93\xfa\x96\x7b</title>");
        run(&store).unwrap();
        assert_eq!(store.get_str(PAGES, URL, DOC_TITLE).as_deref(), Some("日本"));
        // A stray byte in UTF-8 is a replacement character, not a failed run.
        store.put(PAGES, URL, RAW_HTML, b"<meta charset=utf-8><title>a\xffb</title>");
        run(&store).unwrap();
        assert_eq!(store.get_str(PAGES, URL, DOC_TITLE).as_deref(), Some("a\u{fffd}b"));
    }
}
