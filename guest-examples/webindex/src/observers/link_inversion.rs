//! Link inversion: outgoing links → `inlinks`, and inlinks → `fwd` rows of canonical pages.

use percolator_guest::{Error, Notification, Observer, Result, Txn};

use super::{bad_cell, decode, get_column, get_page, notified_url, notify, put, scan_prefix};
use crate::html::MAX_URL_BYTES;
use crate::schema::{
    CLUSTER_CANONICAL, DOC_LINKS, EXPORT_DIRTY, FWD, FWD_ANCHORS, FWD_TO, INLINKS, LINK_ANCHOR, LINK_DIRTY, LINK_OUT,
    PAGES, decode_links, decode_list, encode_fwd, encode_list, inlink_anchors, join_row,
};

/// Both halves of link inversion, chosen by the notified column.
///
/// **Inverting half** (`doc:links` of page `P`): for each distinct target `T` of `P`'s links,
/// `inlinks/"T P"` holds the anchors of `P`'s links to `T` (empty ones skipped, joined by one
/// space; the row exists, possibly empty, as long as `P` links to `T`). Rows of targets `P`
/// no longer links to — read from `P`'s recorded `link:out` — are deleted. Every target whose
/// row is written or deleted is weakly notified on `link:dirty` (never written, so inverting
/// runs of pages linking to one popular target do not conflict there). `link:out` is written
/// on every run (deleted when `P` has no links).
///
/// **Forwarding half** (`link:dirty` or `cluster:canonical` of URL `T`): if `T` has inlinks,
/// `C` = `cluster:canonical(T)`, or `T` itself without one; `fwd/"C T"` holds `T`'s inlinks
/// (`source\tanchors\n`, sorted by source) and `fwd:to(T) = C`. When the destination changes,
/// the row at the old destination (`fwd:to` as recorded) is deleted and both the old and the
/// new `C` are weakly notified on `export:dirty`; when only the value changes, `C` is.
/// `fwd:to` is written on every run (deleted when `T` has no inlinks), so forwarding runs on
/// one row serialize on it — the weak `link:dirty` runs, which have no ack, included.
///
/// Bind to `pages/doc:links` (inverting) and to `pages/link:dirty` (`notify = "weak"`) and
/// `pages/cluster:canonical` (forwarding): the same component three times. Inverting reads
/// `pages/doc:links`, `pages/link:out`, `inlinks/link:anchor`, writes `inlinks/link:anchor`,
/// `pages/link:out` and notifies `pages/link:dirty`; forwarding reads `inlinks/link:anchor`,
/// `pages/cluster:canonical`, `pages/fwd:to`, `fwd/fwd:anchors`, writes `fwd/fwd:anchors`,
/// `pages/fwd:to` and notifies `pages/export:dirty`.
pub struct LinkInversion;

impl Observer for LinkInversion {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let url = notified_url(n)?;
        match n.column() {
            DOC_LINKS => invert(txn, url),
            LINK_DIRTY | CLUSTER_CANONICAL => forward(txn, url),
            other => Err(Error::Failed(format!(
                "link inversion is bound to {}/{other}; it expects {PAGES}/{DOC_LINKS}, {PAGES}/{LINK_DIRTY} or \
                 {PAGES}/{CLUSTER_CANONICAL}",
                n.table()
            ))),
        }
    }
}

/// The inverting half for source page `source`.
fn invert(txn: &mut impl Txn, source: &str) -> Result<()> {
    let row = source.as_bytes();
    if source.len() > MAX_URL_BYTES {
        // The document processor writes no doc:links for such a page; someone else did.
        let e = format!("the row key is {} bytes, longer than the {MAX_URL_BYTES} a URL may have", source.len());
        return Err(bad_cell(PAGES, row, DOC_LINKS, e));
    }
    let [links, out] = get_page(txn, source, [DOC_LINKS, LINK_OUT])?;
    let links = decode(PAGES, row, DOC_LINKS, links.as_deref(), decode_links)?;
    let old_targets = decode(PAGES, row, LINK_OUT, out.as_deref(), decode_list)?;
    let new = inlink_anchors(&links);

    for target in old_targets.into_iter().filter(|t| !new.contains_key(t)) {
        txn.delete(INLINKS, &join_row(target, source), LINK_ANCHOR)?;
        notify(txn, target, LINK_DIRTY)?;
    }
    let rows: Vec<Vec<u8>> = new.keys().map(|target| join_row(target, source)).collect();
    let current = get_column(txn, INLINKS, rows.iter().map(Vec::as_slice), LINK_ANCHOR)?;
    for (((target, anchors), inlink), current) in new.iter().zip(&rows).zip(current) {
        if current.as_deref() != Some(anchors.as_bytes()) {
            txn.set_str(INLINKS, inlink, LINK_ANCHOR, anchors)?;
            notify(txn, target, LINK_DIRTY)?;
        }
    }
    let out = (!new.is_empty()).then(|| encode_list(new.keys()));
    put(txn, PAGES, row, LINK_OUT, out.as_deref())
}

/// The forwarding half for target URL `target`.
fn forward(txn: &mut impl Txn, target: &str) -> Result<()> {
    let row = target.as_bytes();
    let inlinks = scan_prefix(txn, INLINKS, target, LINK_ANCHOR)?;
    let [canonical, old_to] = get_page(txn, target, [CLUSTER_CANONICAL, FWD_TO])?;
    let to = (!inlinks.is_empty()).then(|| canonical.as_deref().unwrap_or(target));
    put(txn, PAGES, row, FWD_TO, to)?;
    let moved = old_to.as_deref() != to;
    if let Some(old) = old_to.as_deref()
        && moved
    {
        txn.delete(FWD, &join_row(old, target), FWD_ANCHORS)?;
        notify(txn, old, EXPORT_DIRTY)?;
    }
    if let Some(to) = to {
        let value = encode_fwd(inlinks.iter().map(|(source, anchors)| (source.as_str(), anchors.as_str())));
        let fwd_row = join_row(to, target);
        if txn.get(FWD, &fwd_row, FWD_ANCHORS)?.as_deref() != Some(value.as_bytes()) {
            txn.set_str(FWD, &fwd_row, FWD_ANCHORS, &value)?;
            notify(txn, to, EXPORT_DIRTY)?;
        } else if moved {
            notify(txn, to, EXPORT_DIRTY)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html::Link;
    use crate::observers::test_util::{column, store, take_notified};
    use crate::schema::encode_links;
    use percolator_guest::Cell;
    use percolator_guest::mem::MemStore;

    fn links(store: &MemStore, source: &str, links: &[(&str, &str)]) {
        let links: Vec<Link> =
            links.iter().map(|(t, a)| Link { target: (*t).to_owned(), anchor: (*a).to_owned() }).collect();
        store.put(PAGES, source, DOC_LINKS, encode_links(&links));
        store.observe::<LinkInversion>(&store.notification(PAGES, source, DOC_LINKS)).unwrap();
    }

    /// Runs the forwarding half as its bindings are notified: weakly on `link:dirty`,
    /// strongly on `cluster:canonical`.
    fn forward(store: &MemStore, target: &str, column: &str) {
        store.observe::<LinkInversion>(&notification(store, target, column)).unwrap();
    }

    fn notification(store: &MemStore, target: &str, column: &str) -> Notification {
        match column {
            LINK_DIRTY => Notification::weak(Cell::new(PAGES, target, column)),
            _ => store.notification(PAGES, target, column),
        }
    }

    fn rows(store: &MemStore, table: &str, col: &str) -> Vec<(String, String)> {
        column(store, table, col)
    }

    fn strs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    /// Takes the weak notifications of `col` sent since the last call: the URLs, sorted.
    fn take_triggers(store: &MemStore, col: &str) -> Vec<String> {
        take_notified(store, col)
    }

    #[test]
    fn inverts_links_and_marks_targets_dirty() {
        let store = store();
        store.declare_writes(INLINKS, &[LINK_ANCHOR]);
        store.declare_writes(PAGES, &[LINK_OUT, LINK_DIRTY]);
        links(&store, "s:p", &[("t:a", "one"), ("t:b", ""), ("t:a", ""), ("t:a", "two words"), ("t:b", "")]);
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), strs(&[("t:a s:p", "one two words"), ("t:b s:p", "")]));
        assert_eq!(store.get_str(PAGES, "s:p", LINK_OUT).as_deref(), Some("t:a\nt:b\n"));
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:a", "t:b"]);
        assert!(column(&store, PAGES, LINK_DIRTY).is_empty(), "notified, never written");
    }

    #[test]
    fn changed_links_replace_stale_inlinks() {
        let store = store();
        links(&store, "s:p", &[("t:a", "a"), ("t:b", "b"), ("t:c", "c")]);
        links(&store, "s:q", &[("t:a", "qa")]);
        take_triggers(&store, LINK_DIRTY);

        links(&store, "s:p", &[("t:a", "a"), ("t:c", "new"), ("t:d", "d")]);
        assert_eq!(
            rows(&store, INLINKS, LINK_ANCHOR),
            strs(&[("t:a s:p", "a"), ("t:a s:q", "qa"), ("t:c s:p", "new"), ("t:d s:p", "d")])
        );
        assert_eq!(store.get_str(PAGES, "s:p", LINK_OUT).as_deref(), Some("t:a\nt:c\nt:d\n"));
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:b", "t:c", "t:d"], "t:a's row did not change");

        // No links at all: every row goes, and link:out with them.
        store.remove(PAGES, "s:p", DOC_LINKS);
        store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), strs(&[("t:a s:q", "qa")]));
        assert_eq!(store.get(PAGES, "s:p", LINK_OUT), None);
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:a", "t:c", "t:d"]);
    }

    #[test]
    fn every_inverting_run_writes_link_out() {
        let store = store();
        links(&store, "s:p", &[("t:a", "a")]);
        let mut txn = store.begin();
        LinkInversion::observe(&mut txn, &store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        let written: Vec<String> = txn.buffered().keys().map(|c| c.column.clone()).collect();
        assert_eq!(written, [LINK_OUT]);
        assert!(txn.buffered_weak().is_empty(), "no inlink changed");
    }

    #[test]
    fn inverting_runs_of_pages_linking_to_one_target_do_not_conflict() {
        let store = store();
        store.put(PAGES, "s:p", DOC_LINKS, "t:home\tp\n");
        store.put(PAGES, "s:q", DOC_LINKS, "t:home\tq\n");
        let mut p = store.begin();
        let mut q = store.begin();
        LinkInversion::observe(&mut p, &store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        LinkInversion::observe(&mut q, &store.notification(PAGES, "s:q", DOC_LINKS)).unwrap();
        p.commit().unwrap();
        q.commit().unwrap();
        // Both notified t:home; one forwarding run (or two) sees both inlinks.
        assert_eq!(store.take_weak_notifications(), vec![Cell::new(PAGES, "t:home", LINK_DIRTY); 2]);
        forward(&store, "t:home", LINK_DIRTY);
        forward(&store, "t:home", LINK_DIRTY);
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("t:home t:home", "s:p\tp\ns:q\tq\n")]));
        assert_eq!(take_triggers(&store, EXPORT_DIRTY), ["t:home"], "the repeated run changed nothing");
    }

    #[test]
    fn concurrent_forwarding_runs_on_one_row_conflict() {
        let store = store();
        store.put(INLINKS, join_row("t:a", "s:p"), LINK_ANCHOR, "p");
        let n = notification(&store, "t:a", LINK_DIRTY);
        let mut first = store.begin();
        LinkInversion::observe(&mut first, &n).unwrap();
        // A new inlink and its notification arrive while the first run is in flight.
        store.put(INLINKS, join_row("t:a", "s:q"), LINK_ANCHOR, "q");
        let mut second = store.begin();
        LinkInversion::observe(&mut second, &n).unwrap();
        second.commit().unwrap();
        // Weak runs have no ack: they serialize on fwd:to, so the stale run cannot commit.
        assert!(first.commit().unwrap_err().is_conflict());
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("t:a t:a", "s:p\tp\ns:q\tq\n")]));
    }

    #[test]
    fn forwarding_follows_the_canonical() {
        let store = store();
        store.declare_writes(FWD, &[FWD_ANCHORS]);
        store.declare_writes(PAGES, &[FWD_TO, EXPORT_DIRTY]);
        store.put(INLINKS, join_row("t:a", "s:q"), LINK_ANCHOR, "q anchors");
        store.put(INLINKS, join_row("t:a", "s:p"), LINK_ANCHOR, "");
        store.put(INLINKS, join_row("t:ab", "s:x"), LINK_ANCHOR, "not t:a's");

        // No canonical: forwarded to itself.
        forward(&store, "t:a", LINK_DIRTY);
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("t:a t:a", "s:p\t\ns:q\tq anchors\n")]));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("t:a"));
        assert_eq!(take_triggers(&store, EXPORT_DIRTY), ["t:a"]);

        // Its cluster gets another canonical: the row moves, both are re-exported.
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "c:x");
        forward(&store, "t:a", CLUSTER_CANONICAL);
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("c:x t:a", "s:p\t\ns:q\tq anchors\n")]));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("c:x"));
        assert_eq!(take_triggers(&store, EXPORT_DIRTY), ["c:x", "t:a"]);

        // Nothing changed: only fwd:to is written (the serialization point).
        let mut txn = store.begin();
        LinkInversion::observe(&mut txn, &notification(&store, "t:a", LINK_DIRTY)).unwrap();
        let written: Vec<String> = txn.buffered().keys().map(|c| c.column.clone()).collect();
        assert_eq!(written, [FWD_TO]);
        assert!(txn.buffered_weak().is_empty());
        drop(txn);

        // An inlink changes: the row is rewritten in place.
        store.put(INLINKS, join_row("t:a", "s:p"), LINK_ANCHOR, "p");
        forward(&store, "t:a", LINK_DIRTY);
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("c:x t:a", "s:p\tp\ns:q\tq anchors\n")]));
        assert_eq!(take_triggers(&store, EXPORT_DIRTY), ["c:x"]);

        // No inlinks left: the row and fwd:to go.
        store.remove(INLINKS, join_row("t:a", "s:p"), LINK_ANCHOR);
        store.remove(INLINKS, join_row("t:a", "s:q"), LINK_ANCHOR);
        forward(&store, "t:a", LINK_DIRTY);
        assert!(rows(&store, FWD, FWD_ANCHORS).is_empty());
        assert_eq!(store.get(PAGES, "t:a", FWD_TO), None);
        assert_eq!(take_triggers(&store, EXPORT_DIRTY), ["c:x"]);
    }

    #[test]
    fn inversion_then_forwarding() {
        let store = store();
        links(&store, "s:p", &[("t:a", "x")]);
        for target in take_triggers(&store, LINK_DIRTY) {
            forward(&store, &target, LINK_DIRTY);
        }
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[("t:a t:a", "s:p\tx\n")]));
    }

    #[test]
    fn the_longest_urls_make_valid_rows() {
        let store = store();
        let url = |c: char| format!("http://{c}.org/{}", c.to_string().repeat(MAX_URL_BYTES - 13));
        let (source, target) = (url('s'), url('t'));
        assert_eq!(source.len(), MAX_URL_BYTES);
        links(&store, &source, &[(&target, "a")]);
        assert_eq!(take_triggers(&store, LINK_DIRTY), std::slice::from_ref(&target));
        store.put(PAGES, &target, CLUSTER_CANONICAL, &source);
        forward(&store, &target, LINK_DIRTY);
        let fwd_row = String::from_utf8(join_row(&source, &target)).unwrap();
        assert_eq!(fwd_row.len(), 2 * MAX_URL_BYTES + 1);
        assert_eq!(rows(&store, FWD, FWD_ANCHORS), strs(&[(&fwd_row, &format!("{source}\ta\n"))]));
    }

    #[test]
    fn bad_input_fails_naming_the_cell() {
        let store = store();
        store.put(PAGES, "s:p", DOC_LINKS, "no tab\n");
        let err = store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap_err();
        assert_eq!(err, Error::failed("pages/s:p/doc:links: line 1 (\"no tab\") has no tab"));
        store.put(PAGES, "s:p", DOC_LINKS, "");
        store.put(PAGES, "s:p", LINK_OUT, "t:a");
        let err = store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap_err();
        assert_eq!(err, Error::failed("pages/s:p/link:out: the last line does not end in a newline"));
        let long = format!("s:{}", "p".repeat(MAX_URL_BYTES));
        store.put(PAGES, &long, DOC_LINKS, "t:a\tx\n");
        let err = store.observe::<LinkInversion>(&store.notification(PAGES, &long, DOC_LINKS)).unwrap_err();
        assert_eq!(
            err,
            Error::failed(format!(
                "pages/{long}/doc:links: the row key is 2042 bytes, longer than the 2040 a URL may have"
            ))
        );
        let err = store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", "raw:html")).unwrap_err();
        assert!(matches!(&err, Error::Failed(m) if m.starts_with("link inversion is bound to pages/raw:html")));
    }
}
