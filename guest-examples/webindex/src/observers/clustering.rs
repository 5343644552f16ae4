//! Clustering: pages with equal `doc:hash` form a cluster with one canonical URL.

use std::cmp::Ordering;

use percolator_guest::{Notification, Observer, Result, Txn};

use super::{bad_cell, decode, get_column, get_page, notified_url, notify, scan_prefix};
use crate::schema::{
    ABSENT_PAGERANK, CANON_URL, CLUSTER_CANONICAL, CLUSTER_HASH, CLUSTERS, DOC_HASH, EXPORT_DIRTY, MEMBER_PAGERANK,
    PAGES, RAW_PAGERANK, decode_hash, join_row,
};
use crate::text::{canonical_order, parse_pagerank};

/// Keeps `clusters` and the page's `cluster:hash` / `cluster:canonical` in step with its
/// `doc:hash` and `raw:pagerank`.
///
/// A run on page `U`: if `U` is registered (`cluster:hash`) under another hash than its
/// `doc:hash`, it leaves that cluster; if it has a `doc:hash` it joins (or stays in) that
/// cluster with its current PageRank. Each cluster touched is then *settled*: its members are
/// scanned, the canonical is the best by [`canonical_order`], `canon:url` is written even when
/// unchanged (deleted when the cluster is empty) — the serialization point that makes two
/// runs touching one cluster conflict — and every member whose `cluster:canonical` differs
/// gets it, and a weak notification of its `export:dirty`. A page without `doc:hash` loses
/// `cluster:hash` and `cluster:canonical` (notifying `export:dirty` if it had one).
///
/// `cluster:hash` is written on every run (set, or deleted even when absent), so that two runs
/// on one page conflict: its two bindings (`doc:hash`, `raw:pagerank`) have separate acks, and
/// without it a run that saw the page's old `doc:hash` could register it in a cluster after a
/// concurrent run that saw the hash deleted had found nothing to do.
///
/// An unparsable `raw:pagerank` fails the run naming the cell, whether or not the page has a
/// `doc:hash`; absent counts as 0.
///
/// Bind to `pages/doc:hash` and to `pages/raw:pagerank` (the same component twice). Reads
/// `pages/doc:hash`, `pages/raw:pagerank`, `pages/cluster:*`, `clusters/member:pagerank`;
/// writes `clusters/member:pagerank`, `clusters/canon:url`, `pages/cluster:*`; notifies
/// `pages/export:dirty`.
pub struct Clustering;

impl Observer for Clustering {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let url = notified_url(n)?;
        let row = url.as_bytes();
        let [hash, registered, pagerank, canonical] =
            get_page(txn, url, [DOC_HASH, CLUSTER_HASH, RAW_PAGERANK, CLUSTER_CANONICAL])?;
        let hash = hash.as_deref().map(|h| decode(PAGES, row, DOC_HASH, Some(h), decode_hash)).transpose()?;
        let registered =
            registered.as_deref().map(|h| decode(PAGES, row, CLUSTER_HASH, Some(h), decode_hash)).transpose()?;
        if let Some(p) = &pagerank {
            parse_pagerank(p.as_bytes()).map_err(|e| bad_cell(PAGES, row, RAW_PAGERANK, e))?;
        }

        if let Some(old) = registered
            && Some(old) != hash
        {
            txn.delete(CLUSTERS, &join_row(old, url), MEMBER_PAGERANK)?;
            settle(txn, old)?;
        }
        match hash {
            Some(h) => {
                let member = join_row(h, url);
                let pagerank = pagerank.as_deref().unwrap_or(ABSENT_PAGERANK);
                if txn.get(CLUSTERS, &member, MEMBER_PAGERANK)?.as_deref() != Some(pagerank.as_bytes()) {
                    txn.set_str(CLUSTERS, &member, MEMBER_PAGERANK, pagerank)?;
                }
                // Written on every run, like the deletion below: the page's runs serialize on
                // it (its two bindings have separate acks).
                txn.set_str(PAGES, row, CLUSTER_HASH, h)?;
                settle(txn, h)?;
            }
            None => {
                // Even when absent: a concurrent run that still saw a hash (the other binding's)
                // must conflict with this one rather than register the page after it.
                txn.delete(PAGES, row, CLUSTER_HASH)?;
                if canonical.is_some() {
                    txn.delete(PAGES, row, CLUSTER_CANONICAL)?;
                    notify(txn, url, EXPORT_DIRTY)?;
                }
            }
        }
        Ok(())
    }
}

/// Recomputes cluster `hash` from its members (as this transaction sees them, own writes
/// included): writes `canon:url` unconditionally and fixes every member's `cluster:canonical`.
fn settle(txn: &mut impl Txn, hash: &str) -> Result<()> {
    let members = scan_prefix(txn, CLUSTERS, hash, MEMBER_PAGERANK)?;
    let mut best: Option<(&str, f64)> = None;
    for (url, pagerank) in &members {
        let rank = parse_pagerank(pagerank.as_bytes())
            .map_err(|e| bad_cell(CLUSTERS, &join_row(hash, url), MEMBER_PAGERANK, e))?;
        if best.is_none_or(|b| canonical_order((url, rank), b) == Ordering::Less) {
            best = Some((url, rank));
        }
    }
    let Some((canonical, _)) = best else {
        return txn.delete(CLUSTERS, hash.as_bytes(), CANON_URL);
    };
    txn.set_str(CLUSTERS, hash.as_bytes(), CANON_URL, canonical)?;
    let current = get_column(txn, PAGES, members.iter().map(|(url, _)| url.as_bytes()), CLUSTER_CANONICAL)?;
    for ((url, _), current) in members.iter().zip(current) {
        if current.as_deref() != Some(canonical.as_bytes()) {
            txn.set_str(PAGES, url.as_bytes(), CLUSTER_CANONICAL, canonical)?;
            notify(txn, url, EXPORT_DIRTY)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observers::test_util::{column, dump, store, take_notified};
    use percolator_guest::Error;
    use percolator_guest::mem::MemStore;

    const H1: &str = "11111111111111111111111111111111";
    const H2: &str = "22222222222222222222222222222222";

    fn page(store: &MemStore, url: &str, hash: Option<&str>, pagerank: Option<&str>) {
        match hash {
            Some(h) => store.put(PAGES, url, DOC_HASH, h),
            None => store.remove(PAGES, url, DOC_HASH),
        };
        match pagerank {
            Some(p) => store.put(PAGES, url, RAW_PAGERANK, p),
            None => store.remove(PAGES, url, RAW_PAGERANK),
        };
        store.observe::<Clustering>(&store.notification(PAGES, url, DOC_HASH)).unwrap();
    }

    fn canonicals(store: &MemStore) -> Vec<(String, String)> {
        column(store, PAGES, CLUSTER_CANONICAL)
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
    }

    #[test]
    fn highest_pagerank_is_canonical_ties_to_smaller_url() {
        let store = store();
        store.declare_writes(CLUSTERS, &[MEMBER_PAGERANK, CANON_URL]);
        store.declare_writes(PAGES, &[CLUSTER_HASH, CLUSTER_CANONICAL, EXPORT_DIRTY]);
        page(&store, "u:b", Some(H1), Some("0.5"));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:b"));
        page(&store, "u:c", Some(H1), Some("0.5"));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:b"), "tie: smaller URL");
        page(&store, "u:a", Some(H1), None);
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:b"), "absent counts as 0");
        assert_eq!(store.get_str(CLUSTERS, join_row(H1, "u:a"), MEMBER_PAGERANK).as_deref(), Some("0"));
        page(&store, "u:c", Some(H1), Some("2"));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:c"));
        assert_eq!(canonicals(&store), pairs(&[("u:a", "u:c"), ("u:b", "u:c"), ("u:c", "u:c")]));
        assert_eq!(column(&store, PAGES, CLUSTER_HASH), pairs(&[("u:a", H1), ("u:b", H1), ("u:c", H1)]));
        assert_eq!(take_notified(&store, EXPORT_DIRTY), ["u:a", "u:b", "u:c"]);
        assert!(column(&store, PAGES, EXPORT_DIRTY).is_empty(), "notified, never written");
        // The member keeps the raw text.
        page(&store, "u:a", Some(H1), Some(" 1e1 "));
        assert_eq!(store.get_str(CLUSTERS, join_row(H1, "u:a"), MEMBER_PAGERANK).as_deref(), Some(" 1e1 "));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:a"));
    }

    #[test]
    fn recrawl_moves_a_page_between_clusters() {
        let store = store();
        page(&store, "u:a", Some(H1), Some("3"));
        page(&store, "u:b", Some(H1), Some("2"));
        page(&store, "u:c", Some(H2), Some("1"));
        assert_eq!(take_notified(&store, EXPORT_DIRTY), ["u:a", "u:b", "u:c"]);

        // u:a (the canonical of H1) now has u:c's content.
        page(&store, "u:a", Some(H2), Some("3"));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:b"));
        assert_eq!(store.get_str(CLUSTERS, H2, CANON_URL).as_deref(), Some("u:a"));
        assert_eq!(canonicals(&store), pairs(&[("u:a", "u:a"), ("u:b", "u:b"), ("u:c", "u:a")]));
        assert_eq!(
            column(&store, CLUSTERS, MEMBER_PAGERANK),
            pairs(&[(&format!("{H1} u:b"), "2"), (&format!("{H2} u:a"), "3"), (&format!("{H2} u:c"), "1")])
        );
        // Every page whose canonical changed is re-exported; u:a's did not change.
        assert_eq!(take_notified(&store, EXPORT_DIRTY), ["u:b", "u:c"]);

        // u:b loses its content: H1 is empty, so it goes, with u:b's cluster columns.
        page(&store, "u:b", None, Some("2"));
        assert_eq!(store.get(CLUSTERS, H1, CANON_URL), None);
        assert_eq!(store.get(PAGES, "u:b", CLUSTER_HASH), None);
        assert_eq!(store.get(PAGES, "u:b", CLUSTER_CANONICAL), None);
        assert_eq!(take_notified(&store, EXPORT_DIRTY), ["u:b"], "u:b lost its canonical");
        let clusters: Vec<String> = dump(&store, CLUSTERS).into_iter().map(|(r, _, _)| r).collect();
        assert_eq!(clusters, [H2.to_owned(), format!("{H2} u:a"), format!("{H2} u:c")]);
    }

    #[test]
    fn pagerank_change_alone_recomputes() {
        let store = store();
        page(&store, "u:a", Some(H1), Some("1"));
        page(&store, "u:b", Some(H1), Some("0"));
        store.put(PAGES, "u:b", RAW_PAGERANK, "5");
        store.observe::<Clustering>(&store.notification(PAGES, "u:b", RAW_PAGERANK)).unwrap();
        assert_eq!(canonicals(&store), pairs(&[("u:a", "u:b"), ("u:b", "u:b")]));
    }

    #[test]
    fn without_a_hash_only_cluster_hash_is_written() {
        let store = store();
        store.put(PAGES, "u:a", RAW_PAGERANK, "1");
        let mut txn = store.begin();
        Clustering::observe(&mut txn, &store.notification(PAGES, "u:a", RAW_PAGERANK)).unwrap();
        let written: Vec<(String, bool)> =
            txn.buffered().iter().map(|(c, v)| (c.column.clone(), v.is_some())).collect();
        assert_eq!(written, [(CLUSTER_HASH.to_owned(), false)], "deleted, though absent");
        assert!(txn.buffered_weak().is_empty());
    }

    #[test]
    fn every_run_writes_canon_url_and_cluster_hash() {
        let store = store();
        page(&store, "u:a", Some(H1), Some("1"));
        let mut txn = store.begin();
        Clustering::observe(&mut txn, &store.notification(PAGES, "u:a", RAW_PAGERANK)).unwrap();
        let written: Vec<String> = txn.buffered().keys().map(|c| c.column.clone()).collect();
        assert_eq!(written, [CANON_URL, CLUSTER_HASH]);
        assert!(txn.buffered_weak().is_empty(), "the canonical did not change");
    }

    #[test]
    fn a_run_that_saw_a_deleted_hash_conflicts_with_the_run_that_saw_it_gone() {
        let store = store();
        store.put(PAGES, "u:a", DOC_HASH, H1);
        store.put(PAGES, "u:a", RAW_PAGERANK, "1");
        // The PageRank's run begins while the page still has its hash...
        let mut stale = store.begin();
        Clustering::observe(&mut stale, &store.notification(PAGES, "u:a", RAW_PAGERANK)).unwrap();
        // ...which goes (its page was deleted) before that run commits.
        store.remove(PAGES, "u:a", DOC_HASH);
        let mut fresh = store.begin();
        Clustering::observe(&mut fresh, &store.notification(PAGES, "u:a", DOC_HASH)).unwrap();
        fresh.commit().unwrap();
        assert!(stale.commit().unwrap_err().is_conflict(), "it would register a page without a hash");
    }

    #[test]
    fn bad_pagerank_fails_naming_the_cell() {
        let store = store();
        store.put(PAGES, "u:a", DOC_HASH, H1);
        store.put(PAGES, "u:a", RAW_PAGERANK, "abc");
        let err = store.observe::<Clustering>(&store.notification(PAGES, "u:a", RAW_PAGERANK)).unwrap_err();
        assert_eq!(err, Error::failed("pages/u:a/raw:pagerank: \"abc\" is not a number"));
        store.put(PAGES, "u:a", RAW_PAGERANK, "-2");
        store.remove(PAGES, "u:a", DOC_HASH);
        let err = store.observe::<Clustering>(&store.notification(PAGES, "u:a", RAW_PAGERANK)).unwrap_err();
        assert_eq!(err, Error::failed("pages/u:a/raw:pagerank: \"-2\" is negative"));
        assert!(store.cells(CLUSTERS).is_empty());
    }

    #[test]
    fn bad_hash_fails_naming_the_cell() {
        let store = store();
        store.put(PAGES, "u:a", DOC_HASH, "not a hash");
        let err = store.observe::<Clustering>(&store.notification(PAGES, "u:a", DOC_HASH)).unwrap_err();
        assert!(
            matches!(&err, Error::Failed(m) if m.starts_with("pages/u:a/doc:hash: \"not a hash\" is not")),
            "{err}"
        );
    }

    #[test]
    fn concurrent_runs_on_one_cluster_conflict() {
        let store = store();
        store.put(PAGES, "u:a", DOC_HASH, H1);
        store.put(PAGES, "u:b", DOC_HASH, H1);
        let (na, nb) = (store.notification(PAGES, "u:a", DOC_HASH), store.notification(PAGES, "u:b", DOC_HASH));
        let mut a = store.begin();
        let mut b = store.begin();
        // Each sees only itself as a member and would make itself canonical (write skew)...
        Clustering::observe(&mut a, &na).unwrap();
        Clustering::observe(&mut b, &nb).unwrap();
        a.commit().unwrap();
        // ...but both write canon:url, so the second commit conflicts and is retried.
        assert!(b.commit().unwrap_err().is_conflict());
        store.observe::<Clustering>(&nb).unwrap();
        assert_eq!(canonicals(&store), pairs(&[("u:a", "u:a"), ("u:b", "u:a")]));
    }

    #[test]
    fn leaving_and_joining_one_cluster_concurrently_conflict() {
        let store = store();
        page(&store, "u:a", Some(H1), Some("3"));
        page(&store, "u:b", Some(H2), Some("1"));
        // a leaves H1 (which it alone is in) while b joins it.
        store.put(PAGES, "u:a", DOC_HASH, H2);
        store.put(PAGES, "u:b", DOC_HASH, H1);
        let (na, nb) = (store.notification(PAGES, "u:a", DOC_HASH), store.notification(PAGES, "u:b", DOC_HASH));
        let mut a = store.begin();
        let mut b = store.begin();
        // a sees H1 empty and deletes canon:url; b sees a still in H1 and keeps it canonical.
        Clustering::observe(&mut a, &na).unwrap();
        Clustering::observe(&mut b, &nb).unwrap();
        b.commit().unwrap();
        assert!(a.commit().unwrap_err().is_conflict(), "both wrote canon:url of H1");
        store.observe::<Clustering>(&na).unwrap();
        assert_eq!(canonicals(&store), pairs(&[("u:a", "u:a"), ("u:b", "u:b")]));
        assert_eq!(store.get_str(CLUSTERS, H1, CANON_URL).as_deref(), Some("u:b"));
        assert_eq!(store.get_str(CLUSTERS, H2, CANON_URL).as_deref(), Some("u:a"));
    }
}
