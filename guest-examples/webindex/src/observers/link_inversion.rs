//! Link inversion: outgoing links → `inlinks`, and inlinks → anchor counts of the pages they
//! are forwarded to.

use std::collections::BTreeMap;

use percolator_guest::{Error, Notification, Observer, Result, Txn};

use super::{bad_cell, decode, get_column, get_page, notified_url, notify, put, scan_prefix, text};
use crate::html::MAX_URL_BYTES;
use crate::schema::{
    ANCHOR_COUNT, CLUSTER_CANONICAL, DOC_LINKS, FWD_TO, INDEX, INLINKS, LINK_ANCHOR, LINK_DIRTY, LINK_OUT, LINK_WAS,
    PAGES, PENDING, decode_count, decode_links, decode_list, decode_was, encode_count, encode_list, encode_was,
    inlink_anchors, join_row, length_row, prefix_range,
};
use crate::text::count_terms;

/// Both halves of link inversion, chosen by the notified column.
///
/// **Inverting half** (`doc:links` of page `P`): for each distinct target `T` of `P`'s links,
/// `inlinks/"T P"` holds the anchors of `P`'s links to `T` (empty ones skipped, joined by one
/// space; the row exists, possibly empty, as long as `P` links to `T`). Rows of targets `P`
/// no longer links to — read from `P`'s recorded `link:out` — are deleted. For every inlink
/// row it writes or deletes, it records in `pending/"T P"/link:was` what the row was before
/// ([`encode_was`]) unless a pending change is already recorded there (which it rewrites
/// unchanged: what was last forwarded has not changed), and weakly notifies `link:dirty` of
/// `T` (never written, so inverting runs of pages linking to one popular target do not
/// conflict there). `link:out` is written on every run (deleted when `P` has no links). Its
/// writes are O(links of `P`), whatever the targets' inlink counts.
///
/// **Forwarding half** (`link:dirty` or `cluster:canonical` of URL `T`): if `T` has inlinks,
/// its destination is `C` = `cluster:canonical(T)`, or `T` itself without one, and
/// `fwd:to(T) = C`; without inlinks `T` has no `fwd:to`. The terms of `T`'s anchors are
/// counted into `index/"term C"/anchor:count` (and their total into the length row's
/// `anchor:count`) by deltas:
///
/// - destination unchanged (`fwd:to` as recorded): only the pending changes are forwarded —
///   for each `pending/"T S"`, the terms of the recorded `link:was` are subtracted and those
///   of the current `inlinks/"T S"` added. O(pending changes), not O(inlinks).
/// - destination changed: every inlink of `T` moves — what was counted (`link:was` if pending,
///   else the current anchors) is subtracted at the old destination and the current anchors
///   are added at the new one. O(inlinks of `T`), as a move must be.
///
/// The pending rows it read are deleted, and `fwd:to` is written on every run (deleted when
/// `T` has no inlinks), so forwarding runs on one row serialize on it — the weak `link:dirty`
/// runs, which have no ack, included. A count that reaches 0 is deleted.
///
/// Bind to `pages/doc:links` (inverting) and to `pages/link:dirty` (`notify = "weak"`) and
/// `pages/cluster:canonical` (forwarding): the same component three times. Inverting reads
/// `pages/doc:links`, `pages/link:out`, `inlinks/link:anchor`, `pending/link:was`, writes
/// `inlinks/link:anchor`, `pending/link:was`, `pages/link:out` and notifies `pages/link:dirty`;
/// forwarding reads `pages/cluster:canonical`, `pages/fwd:to`, `inlinks/link:anchor`,
/// `pending/link:was`, `index/anchor:count`, writes `pending/link:was` (deletes),
/// `pages/fwd:to` and `index/anchor:count`, and notifies nobody (the exporter does not read
/// anchors: ranking adds `anchor:count` to `hit:count`).
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

    // Every target linked before or now, with the anchors it should have (None: no inlink).
    let mut targets: BTreeMap<&str, Option<&str>> = old_targets.into_iter().map(|t| (t, None)).collect();
    targets.extend(new.iter().map(|(t, a)| (*t, Some(a.as_str()))));
    let rows: Vec<Vec<u8>> = targets.keys().map(|target| join_row(target, source)).collect();
    let current = get_column(txn, INLINKS, rows.iter().map(Vec::as_slice), LINK_ANCHOR)?;
    let pending = get_column(txn, PENDING, rows.iter().map(Vec::as_slice), LINK_WAS)?;
    for ((((target, want), inlink), current), pending) in targets.iter().zip(&rows).zip(current).zip(pending) {
        if current.as_deref() == want.map(str::as_bytes) {
            continue;
        }
        // What was last forwarded: a pending change's record, else the row as it is now.
        let was = match pending {
            Some(recorded) => recorded,
            None => {
                let current = current.map(|v| text(INLINKS, inlink, LINK_ANCHOR, v)).transpose()?;
                encode_was(current.as_deref()).into_bytes()
            }
        };
        txn.set(PENDING, inlink, LINK_WAS, &was)?;
        put(txn, INLINKS, inlink, LINK_ANCHOR, *want)?;
        notify(txn, target, LINK_DIRTY)?;
    }
    let out = (!new.is_empty()).then(|| encode_list(new.keys()));
    put(txn, PAGES, row, LINK_OUT, out.as_deref())
}

/// Term-count deltas per destination URL.
type Deltas<'a> = BTreeMap<&'a str, BTreeMap<String, i64>>;

/// Adds `sign` × the term counts of `anchors` to `dest`'s deltas.
fn add<'a>(deltas: &mut Deltas<'a>, dest: &'a str, anchors: Option<&str>, sign: i64) {
    let Some(anchors) = anchors else { return };
    let mut counts = BTreeMap::new();
    count_terms(&mut counts, anchors);
    let entry = deltas.entry(dest).or_default();
    for (term, n) in counts {
        *entry.entry(term).or_default() += sign * i64::try_from(n).unwrap_or(i64::MAX);
    }
}

/// The forwarding half for target URL `target`.
fn forward(txn: &mut impl Txn, target: &str) -> Result<()> {
    let row = target.as_bytes();
    let [canonical, old_to] = get_page(txn, target, [CLUSTER_CANONICAL, FWD_TO])?;
    let pending = scan_prefix(txn, PENDING, target, LINK_WAS)?;
    let mut was: BTreeMap<&str, Option<&str>> = BTreeMap::new();
    for (source, value) in &pending {
        let decoded = decode(PENDING, &join_row(target, source), LINK_WAS, Some(value), decode_was)?;
        was.insert(source, decoded);
    }
    let (start, end) = prefix_range(target);
    let has_inlinks = !txn.scan(INLINKS, &start, Some(&end), Some(&[LINK_ANCHOR]), 1)?.is_empty();
    let to = has_inlinks.then(|| canonical.as_deref().unwrap_or(target));

    let mut deltas = Deltas::new();
    if old_to.as_deref() == to {
        // Same destination: forward the pending changes only.
        if let Some(to) = to {
            let rows: Vec<Vec<u8>> = was.keys().map(|source| join_row(target, source)).collect();
            let now = get_column(txn, INLINKS, rows.iter().map(Vec::as_slice), LINK_ANCHOR)?;
            for ((anchors, inlink), now) in was.values().zip(&rows).zip(now) {
                let now = now.map(|v| text(INLINKS, inlink, LINK_ANCHOR, v)).transpose()?;
                add(&mut deltas, to, *anchors, -1);
                add(&mut deltas, to, now.as_deref(), 1);
            }
        }
    } else {
        // A new destination: every inlink moves.
        let inlinks = scan_prefix(txn, INLINKS, target, LINK_ANCHOR)?;
        if let Some(old) = old_to.as_deref() {
            // What was counted there: the recorded value of a pending change, else the row.
            let unchanged = inlinks.iter().filter(|(source, _)| !was.contains_key(source.as_str()));
            for (_, anchors) in unchanged {
                add(&mut deltas, old, Some(anchors), -1);
            }
            for anchors in was.values() {
                add(&mut deltas, old, *anchors, -1);
            }
        }
        if let Some(to) = to {
            for (_, anchors) in &inlinks {
                add(&mut deltas, to, Some(anchors), 1);
            }
        }
    }
    for source in was.keys() {
        txn.delete(PENDING, &join_row(target, source), LINK_WAS)?;
    }
    put(txn, PAGES, row, FWD_TO, to)?;
    for (dest, terms) in deltas {
        apply(txn, dest, terms)?;
    }
    Ok(())
}

/// Adds `deltas` to the `anchor:count` cells of `dest`'s terms and to its length row's.
fn apply(txn: &mut impl Txn, dest: &str, deltas: BTreeMap<String, i64>) -> Result<()> {
    let mut changes: Vec<(Vec<u8>, i64)> = Vec::new();
    let mut total = 0i64;
    for (term, delta) in deltas {
        if delta != 0 {
            changes.push((join_row(&term, dest), delta));
            total += delta;
        }
    }
    if total != 0 {
        changes.push((length_row(dest), total));
    }
    let current = get_column(txn, INDEX, changes.iter().map(|(row, _)| row.as_slice()), ANCHOR_COUNT)?;
    for ((row, delta), current) in changes.iter().zip(current) {
        let current = current.map(|v| text(INDEX, row, ANCHOR_COUNT, v)).transpose()?;
        let old = decode(INDEX, row, ANCHOR_COUNT, Some(current.as_deref().unwrap_or("0")), decode_count)?;
        let new = i64::try_from(old).unwrap_or(i64::MAX).saturating_add(*delta);
        if new < 0 {
            let e = format!(
                "forwarding would take the count {old} below zero ({delta}): the anchors counted here differ from the inlinks recorded"
            );
            return Err(bad_cell(INDEX, row, ANCHOR_COUNT, e));
        }
        let value = (new > 0).then(|| encode_count(new.unsigned_abs()));
        put(txn, INDEX, row, ANCHOR_COUNT, value.as_deref())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::html::Link;
    use crate::observers::test_util::{column, store, take_notified};
    use crate::schema::{HIT_COUNT, encode_links};
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

    /// The anchor counts: (index row, count).
    fn counts(store: &MemStore) -> Vec<(String, String)> {
        rows(store, INDEX, ANCHOR_COUNT)
    }

    /// The cells a run of `n` would write, as `table/row/column` (`-` in front: deleted).
    fn writes(store: &MemStore, n: &Notification) -> Vec<String> {
        let mut txn = store.begin();
        LinkInversion::observe(&mut txn, n).unwrap();
        txn.buffered()
            .iter()
            .map(|(c, v)| {
                let sign = if v.is_some() { "" } else { "-" };
                format!("{sign}{}/{}/{}", c.table, String::from_utf8_lossy(&c.row), c.column)
            })
            .collect()
    }

    #[test]
    fn inverts_links_records_what_was_and_marks_targets_dirty() {
        let store = store();
        store.declare_writes(INLINKS, &[LINK_ANCHOR]);
        store.declare_writes(PENDING, &[LINK_WAS]);
        store.declare_writes(PAGES, &[LINK_OUT, LINK_DIRTY]);
        links(&store, "s:p", &[("t:a", "one"), ("t:b", ""), ("t:a", ""), ("t:a", "two words"), ("t:b", "")]);
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), strs(&[("t:a s:p", "one two words"), ("t:b s:p", "")]));
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&[("t:a s:p", "-"), ("t:b s:p", "-")]));
        assert_eq!(store.get_str(PAGES, "s:p", LINK_OUT).as_deref(), Some("t:a\nt:b\n"));
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:a", "t:b"]);
        assert!(column(&store, PAGES, LINK_DIRTY).is_empty(), "notified, never written");
    }

    #[test]
    fn changed_links_replace_stale_inlinks_and_keep_the_first_record() {
        let store = store();
        links(&store, "s:p", &[("t:a", "a"), ("t:b", "b"), ("t:c", "c")]);
        links(&store, "s:q", &[("t:a", "qa")]);
        for t in take_triggers(&store, LINK_DIRTY) {
            forward(&store, &t, LINK_DIRTY);
        }
        assert!(rows(&store, PENDING, LINK_WAS).is_empty(), "forwarded");

        links(&store, "s:p", &[("t:a", "a"), ("t:c", "new"), ("t:d", "d")]);
        assert_eq!(
            rows(&store, INLINKS, LINK_ANCHOR),
            strs(&[("t:a s:p", "a"), ("t:a s:q", "qa"), ("t:c s:p", "new"), ("t:d s:p", "d")])
        );
        assert_eq!(store.get_str(PAGES, "s:p", LINK_OUT).as_deref(), Some("t:a\nt:c\nt:d\n"));
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:b", "t:c", "t:d"], "t:a's row did not change");
        let want = [("t:b s:p", "+b"), ("t:c s:p", "+c"), ("t:d s:p", "-")];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));

        // Changed again before forwarding: the record still says what was forwarded.
        links(&store, "s:p", &[("t:a", "a"), ("t:c", "newer")]);
        let want = [("t:b s:p", "+b"), ("t:c s:p", "+c"), ("t:d s:p", "-")];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:c", "t:d"]);

        // No links at all: every row goes, and link:out with them.
        store.remove(PAGES, "s:p", DOC_LINKS);
        store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), strs(&[("t:a s:q", "qa")]));
        assert_eq!(store.get(PAGES, "s:p", LINK_OUT), None);
        assert_eq!(take_triggers(&store, LINK_DIRTY), ["t:a", "t:c"]);
        let want = [("t:a s:p", "+a"), ("t:b s:p", "+b"), ("t:c s:p", "+c"), ("t:d s:p", "-")];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));
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
        store.put(PAGES, "s:p", DOC_LINKS, "t:home\tpaper\n");
        store.put(PAGES, "s:q", DOC_LINKS, "t:home\tquery\n");
        let mut p = store.begin();
        let mut q = store.begin();
        LinkInversion::observe(&mut p, &store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        LinkInversion::observe(&mut q, &store.notification(PAGES, "s:q", DOC_LINKS)).unwrap();
        p.commit().unwrap();
        q.commit().unwrap();
        // Both notified t:home; one forwarding run (or two) counts both inlinks once.
        assert_eq!(store.take_weak_notifications(), vec![Cell::new(PAGES, "t:home", LINK_DIRTY); 2]);
        forward(&store, "t:home", LINK_DIRTY);
        forward(&store, "t:home", LINK_DIRTY);
        let want = [(" t:home", "2"), ("paper t:home", "1"), ("query t:home", "1")];
        assert_eq!(counts(&store), strs(&want));
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
        assert!(store.take_weak_notifications().is_empty(), "forwarding notifies nobody");
    }

    #[test]
    fn concurrent_forwarding_runs_on_one_row_conflict() {
        let store = store();
        links(&store, "s:p", &[("t:a", "paper")]);
        let n = notification(&store, "t:a", LINK_DIRTY);
        let mut first = store.begin();
        LinkInversion::observe(&mut first, &n).unwrap();
        // A new inlink and its notification arrive while the first run is in flight.
        links(&store, "s:q", &[("t:a", "query")]);
        let mut second = store.begin();
        LinkInversion::observe(&mut second, &n).unwrap();
        second.commit().unwrap();
        // Weak runs have no ack: they serialize on fwd:to, so the stale run cannot commit
        // (it would count s:p's anchors a second time).
        assert!(first.commit().unwrap_err().is_conflict());
        assert_eq!(counts(&store), strs(&[(" t:a", "2"), ("paper t:a", "1"), ("query t:a", "1")]));
    }

    #[test]
    fn an_inlink_changed_while_its_change_is_forwarded_conflicts() {
        let store = store();
        links(&store, "s:p", &[("t:a", "paper")]);
        forward(&store, "t:a", LINK_DIRTY);
        links(&store, "s:p", &[("t:a", "query")]);
        let mut forwarding = store.begin();
        LinkInversion::observe(&mut forwarding, &notification(&store, "t:a", LINK_DIRTY)).unwrap();
        // s:p changes its anchor again: its run rewrites the pending record, which the
        // forwarding run deletes.
        store.put(PAGES, "s:p", DOC_LINKS, "t:a\tdraft\n");
        let mut inverting = store.begin();
        LinkInversion::observe(&mut inverting, &store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        inverting.commit().unwrap();
        assert!(forwarding.commit().unwrap_err().is_conflict());
        forward(&store, "t:a", LINK_DIRTY);
        assert_eq!(counts(&store), strs(&[(" t:a", "1"), ("draft t:a", "1")]));
    }

    #[test]
    fn forwarding_follows_the_canonical() {
        let store = store();
        store.declare_writes(INDEX, &[ANCHOR_COUNT]);
        store.declare_writes(PENDING, &[LINK_WAS]);
        store.declare_writes(INLINKS, &[LINK_ANCHOR]);
        store.declare_writes(PAGES, &[FWD_TO, LINK_OUT, LINK_DIRTY]);
        links(&store, "s:q", &[("t:a", "query anchors"), ("t:ab", "not mine")]);
        links(&store, "s:p", &[("t:a", "")]);

        // No canonical: forwarded to itself.
        forward(&store, "t:a", LINK_DIRTY);
        let at_a = [(" t:a", "2"), ("anchors t:a", "1"), ("query t:a", "1")];
        assert_eq!(counts(&store), strs(&at_a));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("t:a"));
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&[("t:ab s:q", "-")]), "t:ab's is not t:a's");

        // Its cluster gets another canonical: the counts move.
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "c:x");
        forward(&store, "t:a", CLUSTER_CANONICAL);
        assert_eq!(counts(&store), strs(&[(" c:x", "2"), ("anchors c:x", "1"), ("query c:x", "1")]));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("c:x"));

        // Nothing changed: only fwd:to is written (the serialization point).
        let n = notification(&store, "t:a", LINK_DIRTY);
        assert_eq!(writes(&store, &n), ["pages/t:a/fwd:to"]);

        // An inlink changes: only its change is forwarded.
        links(&store, "s:p", &[("t:a", "paper")]);
        assert_eq!(
            writes(&store, &n),
            [
                "index/ c:x/anchor:count",
                "index/paper c:x/anchor:count",
                "pages/t:a/fwd:to",
                "-pending/t:a s:p/link:was"
            ]
        );
        forward(&store, "t:a", LINK_DIRTY);
        let want = [(" c:x", "3"), ("anchors c:x", "1"), ("paper c:x", "1"), ("query c:x", "1")];
        assert_eq!(counts(&store), strs(&want));

        // A change pending while the destination moves: what was counted leaves, what is
        // there now arrives.
        links(&store, "s:q", &[("t:ab", "not mine")]);
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "t:a");
        forward(&store, "t:a", CLUSTER_CANONICAL);
        let want = [(" t:a", "1"), ("paper t:a", "1")];
        assert_eq!(counts(&store).into_iter().filter(|(r, _)| r.ends_with("t:a")).collect::<Vec<_>>(), strs(&want));
        assert!(counts(&store).iter().all(|(r, _)| !r.ends_with("c:x")), "{:?}", counts(&store));

        // No inlinks left: the counts and fwd:to go.
        links(&store, "s:p", &[]);
        forward(&store, "t:a", LINK_DIRTY);
        forward(&store, "t:ab", LINK_DIRTY);
        assert_eq!(counts(&store), strs(&[(" t:ab", "2"), ("mine t:ab", "1"), ("not t:ab", "1")]));
        assert_eq!(store.get(PAGES, "t:a", FWD_TO), None);
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
    }

    #[test]
    fn a_change_costs_the_same_whatever_the_target_has_inlinks() {
        // Writes of one new inlink, one changed and one removed, to a target with `n` inlinks.
        let cost = |n: usize| {
            let store = store();
            for i in 0..n {
                store.put(INLINKS, join_row("t:hub", &format!("s:{i:05}")), LINK_ANCHOR, "documentation home");
            }
            store.put(INDEX, join_row("documentation", "t:hub"), ANCHOR_COUNT, n.to_string());
            store.put(INDEX, join_row("home", "t:hub"), ANCHOR_COUNT, n.to_string());
            store.put(INDEX, length_row("t:hub"), ANCHOR_COUNT, (2 * n).to_string());
            store.put(PAGES, "t:hub", FWD_TO, "t:hub");
            let mut written = Vec::new();
            for (source, anchors) in [("s:new", "new guide"), ("s:00001", "documentation index"), ("s:00002", "")] {
                let links = if anchors.is_empty() { String::new() } else { format!("t:hub\t{anchors}\n") };
                store.put(PAGES, source, LINK_OUT, "t:hub\n");
                store.put(PAGES, source, DOC_LINKS, links);
                let inverting = store.notification(PAGES, source, DOC_LINKS);
                written.push(writes(&store, &inverting).len());
                store.observe::<LinkInversion>(&inverting).unwrap();
                let forwarding = notification(&store, "t:hub", LINK_DIRTY);
                written.push(writes(&store, &forwarding).len());
                store.observe::<LinkInversion>(&forwarding).unwrap();
            }
            let hub = |term: &str| store.get_str(INDEX, join_row(term, "t:hub"), ANCHOR_COUNT);
            assert_eq!(hub("documentation"), Some((n - 1).to_string()));
            assert_eq!(hub("home"), Some((n - 2).to_string()));
            assert_eq!(
                (hub("new"), hub("guide"), hub("index")),
                (Some("1".into()), Some("1".into()), Some("1".into()))
            );
            written
        };
        assert_eq!(cost(10), cost(2_000));
        // New: the inlink, its record, link:out; then the record (deleted), fwd:to, two terms and
        // the length. Changed: one term out, one in, same length. Removed: two terms, length.
        assert_eq!(cost(10), [3, 5, 3, 4, 3, 5]);
    }

    #[test]
    fn inversion_then_forwarding() {
        let store = store();
        links(&store, "s:p", &[("t:a", "example")]);
        for target in take_triggers(&store, LINK_DIRTY) {
            forward(&store, &target, LINK_DIRTY);
        }
        assert_eq!(counts(&store), strs(&[(" t:a", "1"), ("example t:a", "1")]));
        assert!(rows(&store, INDEX, HIT_COUNT).is_empty(), "the text's counts are the exporter's");
    }

    #[test]
    fn the_longest_urls_make_valid_rows() {
        let store = store();
        let url = |c: char| format!("http://{c}.org/{}", c.to_string().repeat(MAX_URL_BYTES - 13));
        let (source, target) = (url('s'), url('t'));
        assert_eq!(source.len(), MAX_URL_BYTES);
        links(&store, &source, &[(&target, "anchor")]);
        assert_eq!(take_triggers(&store, LINK_DIRTY), std::slice::from_ref(&target));
        store.put(PAGES, &target, CLUSTER_CANONICAL, &source);
        forward(&store, &target, LINK_DIRTY);
        let index_row = String::from_utf8(join_row("anchor", &source)).unwrap();
        assert_eq!(counts(&store), strs(&[(&format!(" {source}"), "1"), (&index_row, "1")]));
        let pending_row = String::from_utf8(join_row(&target, &source)).unwrap();
        assert_eq!(pending_row.len(), 2 * MAX_URL_BYTES + 1);
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

        store.put(PENDING, "t:a s:p", LINK_WAS, "anchors");
        let err = store.observe::<LinkInversion>(&notification(&store, "t:a", LINK_DIRTY)).unwrap_err();
        assert_eq!(
            err,
            Error::failed("pending/t:a s:p/link:was: \"anchors\" is neither \"-\" nor \"+\" followed by anchors")
        );
        // A count that the recorded inlinks do not account for.
        store.put(PENDING, "t:a s:p", LINK_WAS, "+paper");
        store.put(PAGES, "t:a", FWD_TO, "t:a");
        store.put(INLINKS, "t:a s:q", LINK_ANCHOR, "");
        let err = store.observe::<LinkInversion>(&notification(&store, "t:a", LINK_DIRTY)).unwrap_err();
        assert!(
            matches!(&err, Error::Failed(m) if m.starts_with("index/paper t:a/anchor:count: forwarding would take"))
        );
    }
}
