//! Link inversion: outgoing links → `inlinks`, and inlinks → anchor counts of the pages they
//! are forwarded to.

use std::collections::BTreeMap;

use percolator_guest::{Cell, Error, Notification, Observer, Result, Txn};

use super::{PAGE, bad_cell, decode, get_column, get_page, notified_url, put, scan_prefix, text};
use crate::html::MAX_URL_BYTES;
use crate::schema::{
    ANCHOR_COUNT, CLUSTER_CANONICAL, DOC_LINKS, Entry, FWD_TO, Fwd, INDEX, INLINKS, LINK_ANCHOR, LINK_DIRTY, LINK_OUT,
    LINK_WAS, Now, PAGES, PENDING, decode_count, decode_fwd, decode_links, decode_list, decode_pending, encode_count,
    encode_fwd, encode_list, encode_pending, inlink_anchors, join_row, length_row, prefix_range, site,
};
use crate::text::count_terms;

/// Both halves of link inversion, chosen by the notified column.
///
/// **Inverting half** (`pages/doc:links` of page `P`): for each distinct target `T` of `P`'s
/// links, `inlinks/"T P"` holds the anchors of `P`'s links to `T` (empty ones skipped, joined
/// by one space; the row exists, possibly empty, as long as `P` links to `T`). Rows of targets
/// `P` no longer links to — read from `P`'s recorded `link:out` — are deleted; only the rows of
/// the targets `link:out` lists are read (no other row from `P` exists). For every inlink
/// row it writes or deletes, the pending row of `P` and `T`'s [`site`],
/// `pending/"<site> P"/link:was`, gets an entry saying what the row was before, unless it has
/// one for `T` already (kept: what was last forwarded has not changed), and what the row is
/// now (so that forwarding need not read it); each pending row it changes is written, and its
/// site is weakly notified on `pending/<site>/link:dirty`, once. `link:out` is written on every run (deleted
/// when `P` has no links). Its writes are O(links of `P`), whatever the targets' inlink counts,
/// and one pending row and one notification per site its changed targets are on.
///
/// **Forwarding half**: a target `T` with inlinks has `fwd:to(T)` ([`Fwd`]): its destination
/// `C` = `cluster:canonical(T)`, or `T` itself without one, its number of inlinks and the term
/// counts of their anchors (its *summary*); without inlinks it has none. The summaries of the
/// targets forwarded to `C` are summed in `index/"term C"/anchor:count` (and their totals in
/// the length row's `anchor:count`), by deltas:
///
/// - a **site run** (`pending/<site>/link:dirty`, weak) reads the site's pending rows; for each
///   target with entries, it adds the terms of the current inlink rows (as the entries hold
///   them) and subtracts those the entries say were forwarded, in the summary and at the
///   destination (or, if the destination changed, moves
///   the summary), writes `fwd:to` (even unchanged) and deletes the pending rows it read.
///   O(pending entries), plus the summaries of the targets it touches.
/// - a **target run** (`pages/cluster:canonical` of `T`) moves `T`'s summary if the destination
///   changed: O(distinct terms of its anchors), not O(inlinks).
///
/// A run that changes nothing writes nothing, except a target run that finds no `fwd:to` but
/// an inlink: it deletes the absent `fwd:to`, so that it conflicts with a site run in flight
/// that is giving `T` a destination read before this canonical (`docs/webindex.md`, invariant
/// 5). A count that reaches 0 is deleted.
///
/// Bind to `pages/doc:links` (inverting), `pending/link:dirty` (`notify = "weak"`) and
/// `pages/cluster:canonical` (forwarding): the same component three times. Inverting reads
/// `pages/doc:links`, `pages/link:out`, `inlinks/link:anchor`, `pending/link:was`, writes
/// `inlinks/link:anchor`, `pending/link:was`, `pages/link:out` and notifies
/// `pending/link:dirty`; forwarding reads `pages/cluster:canonical`, `pages/fwd:to`,
/// `inlinks/link:anchor`, `pending/link:was`, `index/anchor:count`, writes `pending/link:was`
/// (deletes), `pages/fwd:to` and `index/anchor:count`, and notifies nobody (the exporter does
/// not read anchors: ranking adds `anchor:count` to `hit:count`).
pub struct LinkInversion;

impl Observer for LinkInversion {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let url = notified_url(n)?;
        match (n.table(), n.column()) {
            (PAGES, DOC_LINKS) => invert(txn, url),
            (PENDING, LINK_DIRTY) => forward_site(txn, url),
            (PAGES, CLUSTER_CANONICAL) => forward_target(txn, url),
            (table, column) => Err(Error::Failed(format!(
                "link inversion is bound to {table}/{column}; it expects {PAGES}/{DOC_LINKS}, {PENDING}/{LINK_DIRTY} or \
                 {PAGES}/{CLUSTER_CANONICAL}"
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

    // Every target linked before or now: the anchors it should have (None: no inlink), and
    // whether `link:out` lists it.
    let mut targets: BTreeMap<&str, (Option<&str>, bool)> =
        old_targets.into_iter().map(|t| (t, (None, true))).collect();
    for (t, a) in &new {
        targets.entry(t).and_modify(|(want, _)| *want = Some(a)).or_insert((Some(a), false));
    }
    let rows: Vec<Vec<u8>> = targets.keys().map(|target| join_row(target, source)).collect();
    // Only the targets `link:out` lists can have a row from this source: this inverter writes
    // the rows and `link:out` together, and no one else writes either (docs/webindex.md,
    // invariant 4). So only their rows are read; a target linked for the first time has none
    // (a new page's run reads no inlink row).
    let listed: Vec<&[u8]> =
        targets.values().zip(&rows).filter(|((_, listed), _)| *listed).map(|(_, r)| r.as_slice()).collect();
    let mut read = get_column(txn, INLINKS, listed, LINK_ANCHOR)?.into_iter();
    // The changed targets by site, each with what its inlink is before this run and after.
    type Changed<'a> = Vec<(&'a str, Option<String>, Option<&'a str>)>;
    let mut changed: BTreeMap<&str, Changed<'_>> = BTreeMap::new();
    for ((target, (want, listed)), inlink) in targets.iter().zip(&rows) {
        let current = if *listed { read.next().expect("a row read for every listed target") } else { None };
        if current.as_deref() == want.map(str::as_bytes) {
            continue;
        }
        let current = current.map(|v| text(INLINKS, inlink, LINK_ANCHOR, v)).transpose()?;
        changed.entry(site(target)).or_default().push((target, current, *want));
        put(txn, INLINKS, inlink, LINK_ANCHOR, *want)?;
    }
    let pending_rows: Vec<Vec<u8>> = changed.keys().map(|site| join_row(site, source)).collect();
    let recorded = get_column(txn, PENDING, pending_rows.iter().map(Vec::as_slice), LINK_WAS)?;
    for (((site, targets), pending), recorded) in changed.iter().zip(&pending_rows).zip(recorded) {
        let recorded = recorded.map(|v| text(PENDING, pending, LINK_WAS, v)).transpose()?;
        // What was last forwarded: a pending entry, else the row as it was before this run.
        // What it is now: the row this run writes (the other entries' rows are unchanged).
        let mut entries = match &recorded {
            Some(value) => decode(PENDING, pending, LINK_WAS, Some(value), decode_pending)?,
            None => BTreeMap::new(),
        };
        for (target, current, want) in targets {
            let now = Now::Is(*want);
            entries.entry(target).and_modify(|e| e.now = now).or_insert(Entry { was: current.as_deref(), now });
        }
        txn.set_str(PENDING, pending, LINK_WAS, &encode_pending(entries))?;
        txn.notify_weak(PENDING, site.as_bytes(), LINK_DIRTY)?;
    }
    let out = (!new.is_empty()).then(|| encode_list(new.keys()));
    put(txn, PAGES, row, LINK_OUT, out.as_deref())
}

/// Term-count deltas per destination URL.
type Deltas = BTreeMap<String, BTreeMap<String, i64>>;

/// Adds `sign` × the term counts of `terms` to `into`.
fn add_terms<'t>(into: &mut BTreeMap<String, i64>, terms: impl IntoIterator<Item = (&'t String, &'t u64)>, sign: i64) {
    for (term, n) in terms {
        *into.entry(term.clone()).or_default() += sign * i64::try_from(*n).unwrap_or(i64::MAX);
    }
}

/// Adds `sign` × the term counts of `anchors` (none: no inlink) to `into`.
fn add_anchors(into: &mut BTreeMap<String, i64>, anchors: Option<&str>, sign: i64) {
    let Some(anchors) = anchors else { return };
    let mut counts = BTreeMap::new();
    count_terms(&mut counts, anchors);
    add_terms(into, &counts, sign);
}

/// A target's `fwd:to`, decoded (`None`: absent).
fn read_fwd(target: &str, value: Option<String>) -> Result<Option<Fwd>> {
    value.map(|v| decode(PAGES, target.as_bytes(), FWD_TO, Some(&v), decode_fwd)).transpose()
}

/// The destination of `target`'s inlinks: its canonical, or itself.
fn destination(target: &str, canonical: Option<String>) -> String {
    canonical.unwrap_or_else(|| target.to_owned())
}

/// The site run: forwards every pending entry of `site`.
fn forward_site(txn: &mut impl Txn, site_key: &str) -> Result<()> {
    let rows = scan_prefix(txn, PENDING, site_key, LINK_WAS)?;
    // Per target, its entries: (source, what the inlink was when last forwarded and is now).
    let mut entries: BTreeMap<&str, Vec<(&str, Entry<'_>)>> = BTreeMap::new();
    for (source, value) in &rows {
        let row = join_row(site_key, source);
        for (target, entry) in decode(PENDING, &row, LINK_WAS, Some(value), decode_pending)? {
            if site(target) != site_key {
                let e = format!("target {target:?} is not on the site {site_key:?} of the row");
                return Err(bad_cell(PENDING, &row, LINK_WAS, e));
            }
            entries.entry(target).or_default().push((source, entry));
        }
    }
    let pages: Vec<Cell> =
        entries.keys().flat_map(|t| [Cell::new(PAGES, *t, FWD_TO), Cell::new(PAGES, *t, CLUSTER_CANONICAL)]).collect();
    let mut page_values = Vec::with_capacity(pages.len());
    for chunk in pages.chunks(PAGE) {
        page_values.extend(txn.get_many(chunk)?);
    }
    // An entry holds its inlink row's value (written with it); only an entry written by an
    // earlier version, without it, has the row read.
    let unrecorded: Vec<Vec<u8>> = entries
        .iter()
        .flat_map(|(t, list)| {
            list.iter().filter(|(_, e)| e.now == Now::Unrecorded).map(|(source, _)| join_row(t, source))
        })
        .collect();
    let read = get_column(txn, INLINKS, unrecorded.iter().map(Vec::as_slice), LINK_ANCHOR)?;
    let read: Vec<Option<String>> = unrecorded
        .iter()
        .zip(read)
        .map(|(row, value)| value.map(|v| text(INLINKS, row, LINK_ANCHOR, v)).transpose())
        .collect::<Result<_>>()?;
    // Both in the order of `entries`: two page cells per target, one read row per unrecorded
    // entry.
    let mut page_values = page_values.into_iter();
    let mut read = read.iter();

    let mut deltas = Deltas::new();
    for (target, list) in &entries {
        let (old, canonical) = (page_values.next().flatten(), page_values.next().flatten());
        let old = read_fwd(target, old.map(|v| text(PAGES, target.as_bytes(), FWD_TO, v)).transpose()?)?;
        let canonical = canonical.map(|v| text(PAGES, target.as_bytes(), CLUSTER_CANONICAL, v)).transpose()?;
        // The summary's change: the current rows in, what was counted out.
        let mut change: BTreeMap<String, i64> = BTreeMap::new();
        let mut inlinks_change = 0i64;
        for (_, entry) in list {
            let now = match entry.now {
                Now::Is(now) => now,
                Now::Unrecorded => read.next().expect("a row read for every unrecorded entry").as_deref(),
            };
            add_anchors(&mut change, now, 1);
            add_anchors(&mut change, entry.was, -1);
            inlinks_change += i64::from(now.is_some()) - i64::from(entry.was.is_some());
        }
        let new = summary_plus(target, old.as_ref(), &change, inlinks_change)?;
        let new = new.map(|(inlinks, terms)| Fwd { dest: destination(target, canonical), inlinks, terms });
        match (&old, &new) {
            (Some(o), Some(n)) if o.dest == n.dest => add_terms_i(deltas.entry(n.dest.clone()).or_default(), &change),
            _ => {
                if let Some(o) = &old {
                    add_terms(deltas.entry(o.dest.clone()).or_default(), &o.terms, -1);
                }
                if let Some(n) = &new {
                    add_terms(deltas.entry(n.dest.clone()).or_default(), &n.terms, 1);
                }
            }
        }
        put(txn, PAGES, target.as_bytes(), FWD_TO, new.as_ref().map(encode_fwd).as_deref())?;
    }
    for (source, _) in &rows {
        txn.delete(PENDING, &join_row(site_key, source), LINK_WAS)?;
    }
    for (dest, terms) in deltas {
        apply(txn, &dest, terms)?;
    }
    Ok(())
}

/// Adds the signed `change` to `into`.
fn add_terms_i(into: &mut BTreeMap<String, i64>, change: &BTreeMap<String, i64>) {
    for (term, n) in change {
        *into.entry(term.clone()).or_default() += n;
    }
}

/// `old`'s inlink count and term counts plus the changes (`None`: no inlinks left), or a
/// failure naming `fwd:to` if a count would go below zero or terms would be left without
/// inlinks: the pending entries do not describe what was counted.
fn summary_plus(
    target: &str,
    old: Option<&Fwd>,
    change: &BTreeMap<String, i64>,
    inlinks_change: i64,
) -> Result<Option<(u64, BTreeMap<String, u64>)>> {
    let broken = |what: String| {
        let e = format!("forwarding would take {what}: the summary differs from the inlinks recorded");
        bad_cell(PAGES, target.as_bytes(), FWD_TO, e)
    };
    let old_inlinks = old.map_or(0, |o| o.inlinks);
    let inlinks = i64::try_from(old_inlinks).unwrap_or(i64::MAX).saturating_add(inlinks_change);
    if inlinks < 0 {
        return Err(broken(format!("the inlink count {old_inlinks} below zero ({inlinks_change})")));
    }
    let mut terms = old.map(|o| o.terms.clone()).unwrap_or_default();
    for (term, delta) in change {
        let before = terms.get(term).copied().unwrap_or(0);
        let after = i64::try_from(before).unwrap_or(i64::MAX).saturating_add(*delta);
        match after {
            ..0 => return Err(broken(format!("the count {before} of {term:?} below zero ({delta})"))),
            0 => terms.remove(term),
            n => terms.insert(term.clone(), n.unsigned_abs()),
        };
    }
    if inlinks == 0 {
        if let Some(term) = terms.keys().next() {
            return Err(broken(format!("the inlinks to none, leaving terms ({term:?})")));
        }
        return Ok(None);
    }
    Ok(Some((inlinks.unsigned_abs(), terms)))
}

/// The target run: moves `target`'s summary if its destination changed.
fn forward_target(txn: &mut impl Txn, target: &str) -> Result<()> {
    let row = target.as_bytes();
    let [old, canonical] = get_page(txn, target, [FWD_TO, CLUSTER_CANONICAL])?;
    let Some(old) = read_fwd(target, old)? else {
        // A site run in flight may be giving `target` its first summary, with the canonical it
        // read: make it conflict (an inlink is what it would be forwarding).
        let (start, end) = prefix_range(target);
        if !txn.scan(INLINKS, &start, Some(&end), Some(&[LINK_ANCHOR]), 1)?.is_empty() {
            txn.delete(PAGES, row, FWD_TO)?;
        }
        return Ok(());
    };
    let dest = destination(target, canonical);
    if old.dest == dest {
        return Ok(());
    }
    let mut deltas = Deltas::new();
    add_terms(deltas.entry(old.dest.clone()).or_default(), &old.terms, -1);
    add_terms(deltas.entry(dest.clone()).or_default(), &old.terms, 1);
    let new = Fwd { dest, ..old };
    txn.set_str(PAGES, row, FWD_TO, &encode_fwd(&new))?;
    for (dest, terms) in deltas {
        apply(txn, &dest, terms)?;
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
    use percolator_guest::mem::{MemStore, MemTxn};
    use percolator_guest::{Delta, ScanEntry};
    use std::cell::Cell as Counter;

    /// A transaction that counts the cells its reads return.
    struct Reads<'t> {
        txn: &'t mut MemTxn,
        cells: Counter<usize>,
    }

    impl Txn for Reads<'_> {
        fn get(&self, table: &str, row: &[u8], column: &str) -> Result<Option<Vec<u8>>> {
            self.cells.set(self.cells.get() + 1);
            self.txn.get(table, row, column)
        }
        fn get_many(&self, cells: &[Cell]) -> Result<Vec<Option<Vec<u8>>>> {
            self.cells.set(self.cells.get() + cells.len());
            self.txn.get_many(cells)
        }
        fn scan(
            &self,
            table: &str,
            start: &[u8],
            end: Option<&[u8]>,
            columns: Option<&[&str]>,
            limit: u32,
        ) -> Result<Vec<ScanEntry>> {
            let entries = self.txn.scan(table, start, end, columns, limit)?;
            self.cells.set(self.cells.get() + entries.len().max(1));
            Ok(entries)
        }
        fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()> {
            self.txn.set(table, row, column, value)
        }
        fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
            self.txn.delete(table, row, column)
        }
        fn notify_weak(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
            self.txn.notify_weak(table, row, column)
        }
        fn combine(&mut self, table: &str, row: &[u8], column: &str, delta: Delta) -> Result<()> {
            self.txn.combine(table, row, column, delta)
        }
        fn start_ts(&self) -> u64 {
            self.txn.start_ts()
        }
        fn param(&self, key: &str) -> Option<String> {
            self.txn.param(key)
        }
        fn params(&self) -> Vec<(String, String)> {
            self.txn.params()
        }
    }

    /// The cells a run of `n` would read (a scan counts at least one) and write.
    fn cost(store: &MemStore, n: &Notification) -> (usize, usize) {
        let mut txn = store.begin();
        let mut reads = Reads { txn: &mut txn, cells: Counter::new(0) };
        LinkInversion::observe(&mut reads, n).unwrap();
        let read = reads.cells.get();
        (read, txn.buffered().len())
    }

    /// Sites of the tests' URLs.
    const A: &str = "http://a.example";
    const B: &str = "http://b.example";

    fn links(store: &MemStore, source: &str, links: &[(&str, &str)]) {
        let links: Vec<Link> =
            links.iter().map(|(t, a)| Link { target: (*t).to_owned(), anchor: (*a).to_owned() }).collect();
        store.put(PAGES, source, DOC_LINKS, encode_links(&links));
        store.observe::<LinkInversion>(&store.notification(PAGES, source, DOC_LINKS)).unwrap();
    }

    /// The site run's notification, weak as its binding.
    fn site_dirty(site: &str) -> Notification {
        Notification::weak(Cell::new(PENDING, site, LINK_DIRTY))
    }

    /// Runs the site run of `site`.
    fn forward(store: &MemStore, site: &str) {
        store.observe::<LinkInversion>(&site_dirty(site)).unwrap();
    }

    /// Runs the target run of `target` (its canonical changed).
    fn moved(store: &MemStore, target: &str) {
        store.observe::<LinkInversion>(&store.notification(PAGES, target, CLUSTER_CANONICAL)).unwrap();
    }

    /// Runs the site runs of every site notified since the last call.
    fn forward_all(store: &MemStore) {
        for site in take_notified(store, LINK_DIRTY) {
            forward(store, &site);
        }
    }

    fn rows(store: &MemStore, table: &str, col: &str) -> Vec<(String, String)> {
        column(store, table, col)
    }

    fn strs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
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
    fn inverts_links_records_what_was_per_site_and_notifies_each_site_once() {
        let store = store();
        store.declare_writes(INLINKS, &[LINK_ANCHOR]);
        store.declare_writes(PENDING, &[LINK_WAS, LINK_DIRTY]);
        store.declare_writes(PAGES, &[LINK_OUT]);
        let (ax, ay, bz) = ("http://a.example/x", "http://a.example/y", "http://b.example/z");
        links(&store, "http://s/p", &[(ax, "one"), (ay, ""), (ax, ""), (ax, "two words"), (bz, "")]);
        let want = [
            (format!("{ax} http://s/p"), "one two words"),
            (format!("{ay} http://s/p"), ""),
            (format!("{bz} http://s/p"), ""),
        ];
        let want: Vec<(String, String)> = want.into_iter().map(|(r, v)| (r, v.to_owned())).collect();
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), want);
        // One pending row per site, an entry per changed target.
        let pending = [
            (&*format!("{A} http://s/p"), &*format!("{ax}\tv2\t-\t+one two words\n{ay}\tv2\t-\t+\n")),
            (&*format!("{B} http://s/p"), &*format!("{bz}\tv2\t-\t+\n")),
        ];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&pending));
        assert_eq!(store.get_str(PAGES, "http://s/p", LINK_OUT), Some(format!("{ax}\n{ay}\n{bz}\n")));
        let notified = store.take_weak_notifications();
        assert_eq!(notified, [Cell::new(PENDING, A, LINK_DIRTY), Cell::new(PENDING, B, LINK_DIRTY)], "each site once");
        assert!(column(&store, PENDING, LINK_DIRTY).is_empty(), "notified, never written");
    }

    #[test]
    fn changed_links_replace_stale_inlinks_and_keep_the_first_record() {
        let store = store();
        links(&store, "s:p", &[("t:a", "a"), ("t:b", "b"), ("t:c", "c")]);
        links(&store, "s:q", &[("t:a", "qa")]);
        forward_all(&store);
        assert!(rows(&store, PENDING, LINK_WAS).is_empty(), "forwarded");

        links(&store, "s:p", &[("t:a", "a"), ("t:c", "new"), ("t:d", "d")]);
        assert_eq!(
            rows(&store, INLINKS, LINK_ANCHOR),
            strs(&[("t:a s:p", "a"), ("t:a s:q", "qa"), ("t:c s:p", "new"), ("t:d s:p", "d")])
        );
        assert_eq!(store.get_str(PAGES, "s:p", LINK_OUT).as_deref(), Some("t:a\nt:c\nt:d\n"));
        assert_eq!(take_notified(&store, LINK_DIRTY), ["t:b", "t:c", "t:d"], "t:a's row did not change");
        let want =
            [("t:b s:p", "t:b\tv2\t+b\t-\n"), ("t:c s:p", "t:c\tv2\t+c\t+new\n"), ("t:d s:p", "t:d\tv2\t-\t+d\n")];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));

        // Changed again before forwarding: the entries still say what was forwarded, and
        // what the rows are now.
        links(&store, "s:p", &[("t:a", "a"), ("t:c", "newer")]);
        let want =
            [("t:b s:p", "t:b\tv2\t+b\t-\n"), ("t:c s:p", "t:c\tv2\t+c\t+newer\n"), ("t:d s:p", "t:d\tv2\t-\t-\n")];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));
        assert_eq!(take_notified(&store, LINK_DIRTY), ["t:c", "t:d"]);

        // No links at all: every row goes, and link:out with them.
        store.remove(PAGES, "s:p", DOC_LINKS);
        store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        assert_eq!(rows(&store, INLINKS, LINK_ANCHOR), strs(&[("t:a s:q", "qa")]));
        assert_eq!(store.get(PAGES, "s:p", LINK_OUT), None);
        assert_eq!(take_notified(&store, LINK_DIRTY), ["t:a", "t:c"]);
        let want = [
            ("t:a s:p", "t:a\tv2\t+a\t-\n"),
            ("t:b s:p", "t:b\tv2\t+b\t-\n"),
            ("t:c s:p", "t:c\tv2\t+c\t-\n"),
            ("t:d s:p", "t:d\tv2\t-\t-\n"),
        ];
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&want));
        for site in ["t:a", "t:b", "t:c", "t:d"] {
            forward(&store, site);
        }
        assert_eq!(counts(&store), strs(&[(" t:a", "1"), ("qa t:a", "1")]));
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
        assert_eq!(rows(&store, PAGES, FWD_TO), strs(&[("t:a", "t:a\n1\nqa\t1\n")]));
    }

    #[test]
    fn entries_of_one_site_share_a_row_and_keep_their_records() {
        let store = store();
        let (ax, ay) = ("http://a.example/x", "http://a.example/y");
        links(&store, "http://s/p", &[(ax, "x")]);
        forward_all(&store);
        // x changes, y is new: one row with both; x changes again, y goes: the entries stay.
        links(&store, "http://s/p", &[(ax, "x2"), (ay, "y")]);
        links(&store, "http://s/p", &[(ax, "x3")]);
        let want = format!("{ax}\tv2\t+x\t+x3\n{ay}\tv2\t-\t-\n");
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&[(&format!("{A} http://s/p"), &want)]));
        assert_eq!(take_notified(&store, LINK_DIRTY), [A]);
        forward(&store, A);
        let x = |term: &str| format!("{term} {ax}");
        assert_eq!(counts(&store), strs(&[(&format!(" {ax}"), "1"), (&x("x3"), "1")]));
        assert_eq!(store.get(PAGES, ay, FWD_TO), None, "added and removed before forwarding");
    }

    #[test]
    fn a_first_inversion_reads_no_inlink_row() {
        let store = store();
        let (ax, ay, bz, aw) = ("http://a.example/x", "http://a.example/y", "http://b.example/z", "http://a.example/w");
        store.put(PAGES, "s:p", DOC_LINKS, format!("{ax}\tx\n{ay}\ty\n{bz}\tz\n"));
        // doc:links, link:out, the pending rows of the two sites; no inlink row (link:out lists
        // none). Written: three inlinks, two pending rows, link:out.
        let (read, written) = cost(&store, &store.notification(PAGES, "s:p", DOC_LINKS));
        assert_eq!((read, written), (4, 6));
        // A later run reads the rows link:out lists, and only those: not the new target's.
        store.observe::<LinkInversion>(&store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        store.put(PAGES, "s:p", DOC_LINKS, format!("{ax}\tx\n{aw}\tw\n"));
        let (read, _) = cost(&store, &store.notification(PAGES, "s:p", DOC_LINKS));
        assert_eq!(read, 2 + 3 + 2, "doc:links and link:out, the three listed rows, two pending rows");
    }

    #[test]
    fn an_entry_of_an_earlier_version_is_kept_then_upgraded_by_the_inverter() {
        let store = store();
        let (ax, ay) = ("http://a.example/x", "http://a.example/y");
        links(&store, "http://s/p", &[(ax, "first")]);
        forward(&store, A);
        // s:p's link to x changed under an earlier version: its entry has no `now`.
        store.put(INLINKS, join_row(ax, "http://s/p"), LINK_ANCHOR, "second");
        store.put(PAGES, "http://s/p", DOC_LINKS, format!("{ax}\tsecond\n"));
        let row = format!("{A} http://s/p");
        store.put(PENDING, &row, LINK_WAS, format!("{ax}\t+first\n"));
        // A new link to y on the same site: x's entry is kept as it is, y's is added.
        links(&store, "http://s/p", &[(ax, "second"), (ay, "why")]);
        let want = format!("{ax}\t+first\n{ay}\tv2\t-\t+why\n");
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&[(&row, &want)]));
        // x changes again: its entry keeps what was forwarded and records what it is now.
        links(&store, "http://s/p", &[(ax, "third"), (ay, "why")]);
        let want = format!("{ax}\tv2\t+first\t+third\n{ay}\tv2\t-\t+why\n");
        assert_eq!(rows(&store, PENDING, LINK_WAS), strs(&[(&row, &want)]));
        forward(&store, A);
        let x = |term: &str| format!("{term} {ax}");
        let y = |term: &str| format!("{term} {ay}");
        let want = [(format!(" {ax}"), "1"), (format!(" {ay}"), "1"), (x("third"), "1"), (y("why"), "1")];
        let want: Vec<(String, String)> = want.into_iter().map(|(r, v)| (r, v.to_owned())).collect();
        assert_eq!(counts(&store), want);
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
    fn inverting_runs_of_pages_linking_to_one_site_do_not_conflict() {
        let store = store();
        let home = "http://a.example/";
        store.put(PAGES, "http://s/p", DOC_LINKS, format!("{home}\tpaper\n"));
        store.put(PAGES, "http://s/q", DOC_LINKS, format!("{home}\tquery\n"));
        let mut p = store.begin();
        let mut q = store.begin();
        LinkInversion::observe(&mut p, &store.notification(PAGES, "http://s/p", DOC_LINKS)).unwrap();
        LinkInversion::observe(&mut q, &store.notification(PAGES, "http://s/q", DOC_LINKS)).unwrap();
        p.commit().unwrap();
        q.commit().unwrap();
        // Both notified the site; one site run (or two) counts both inlinks once.
        assert_eq!(store.take_weak_notifications(), vec![Cell::new(PENDING, A, LINK_DIRTY); 2]);
        forward(&store, A);
        forward(&store, A);
        let want = [(" http://a.example/", "2"), ("paper http://a.example/", "1"), ("query http://a.example/", "1")];
        assert_eq!(counts(&store), strs(&want));
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
        assert!(store.take_weak_notifications().is_empty(), "forwarding notifies nobody");
    }

    #[test]
    fn concurrent_site_runs_conflict() {
        let store = store();
        links(&store, "s:p", &[("t:a", "paper")]);
        let mut first = store.begin();
        LinkInversion::observe(&mut first, &site_dirty("t:a")).unwrap();
        // A new inlink and its notification arrive while the first run is in flight.
        links(&store, "s:q", &[("t:a", "query")]);
        let mut second = store.begin();
        LinkInversion::observe(&mut second, &site_dirty("t:a")).unwrap();
        second.commit().unwrap();
        // Weak runs have no ack: they serialize on the pending rows both delete, so the stale
        // run cannot commit (it would count s:p's anchors a second time).
        assert!(first.commit().unwrap_err().is_conflict());
        assert_eq!(counts(&store), strs(&[(" t:a", "2"), ("paper t:a", "1"), ("query t:a", "1")]));
    }

    #[test]
    fn an_inlink_changed_while_its_change_is_forwarded_conflicts() {
        let store = store();
        links(&store, "s:p", &[("t:a", "paper")]);
        forward(&store, "t:a");
        links(&store, "s:p", &[("t:a", "query")]);
        let mut forwarding = store.begin();
        LinkInversion::observe(&mut forwarding, &site_dirty("t:a")).unwrap();
        // s:p changes its anchor again: its run rewrites the pending row, which the
        // forwarding run deletes.
        store.put(PAGES, "s:p", DOC_LINKS, "t:a\tdraft\n");
        let mut inverting = store.begin();
        LinkInversion::observe(&mut inverting, &store.notification(PAGES, "s:p", DOC_LINKS)).unwrap();
        inverting.commit().unwrap();
        assert!(forwarding.commit().unwrap_err().is_conflict());
        forward(&store, "t:a");
        assert_eq!(counts(&store), strs(&[(" t:a", "1"), ("draft t:a", "1")]));
    }

    #[test]
    fn a_target_run_conflicts_with_a_site_run_giving_its_target_a_first_destination() {
        let store = store();
        links(&store, "s:p", &[("t:a", "paper")]);
        // The site run reads t:a without a canonical: its destination would be t:a itself.
        let mut site_run = store.begin();
        LinkInversion::observe(&mut site_run, &site_dirty("t:a")).unwrap();
        // Clustering gives t:a a canonical; its target run finds no summary yet.
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "c:x");
        let n = store.notification(PAGES, "t:a", CLUSTER_CANONICAL);
        assert_eq!(writes(&store, &n), ["-pages/t:a/fwd:to"], "an inlink: the absent summary is deleted");
        store.observe::<LinkInversion>(&n).unwrap();
        assert!(site_run.commit().unwrap_err().is_conflict(), "it read the old canonical");
        forward(&store, "t:a");
        assert_eq!(counts(&store), strs(&[(" c:x", "1"), ("paper c:x", "1")]));
    }

    #[test]
    fn runs_that_change_nothing_write_nothing() {
        let store = store();
        // No inlinks: a canonical changes nothing.
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "t:a");
        assert!(writes(&store, &store.notification(PAGES, "t:a", CLUSTER_CANONICAL)).is_empty());
        // Nothing pending.
        assert!(writes(&store, &site_dirty("t:a")).is_empty());
        // The destination is already the canonical's.
        links(&store, "s:p", &[("t:a", "paper")]);
        forward(&store, "t:a");
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("t:a\n1\npaper\t1\n"));
        assert!(writes(&store, &store.notification(PAGES, "t:a", CLUSTER_CANONICAL)).is_empty());
        assert!(writes(&store, &site_dirty("t:a")).is_empty());
    }

    #[test]
    fn forwarding_follows_the_canonical() {
        let store = store();
        store.declare_writes(INDEX, &[ANCHOR_COUNT]);
        store.declare_writes(PENDING, &[LINK_WAS, LINK_DIRTY]);
        store.declare_writes(INLINKS, &[LINK_ANCHOR]);
        store.declare_writes(PAGES, &[FWD_TO, LINK_OUT]);
        links(&store, "s:q", &[("t:a", "query anchors"), ("t:ab", "not mine")]);
        links(&store, "s:p", &[("t:a", "")]);

        // No canonical: forwarded to itself.
        forward(&store, "t:a");
        let at_a = [(" t:a", "2"), ("anchors t:a", "1"), ("query t:a", "1")];
        assert_eq!(counts(&store), strs(&at_a));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("t:a\n2\nanchors\t1\nquery\t1\n"));
        assert_eq!(
            rows(&store, PENDING, LINK_WAS),
            strs(&[("t:ab s:q", "t:ab\tv2\t-\t+not mine\n")]),
            "t:ab's is not t:a's"
        );

        // Its cluster gets another canonical: the summary moves.
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "c:x");
        moved(&store, "t:a");
        assert_eq!(counts(&store), strs(&[(" c:x", "2"), ("anchors c:x", "1"), ("query c:x", "1")]));
        assert_eq!(store.get_str(PAGES, "t:a", FWD_TO).as_deref(), Some("c:x\n2\nanchors\t1\nquery\t1\n"));

        // An inlink changes: only its change is forwarded.
        links(&store, "s:p", &[("t:a", "paper")]);
        assert_eq!(
            writes(&store, &site_dirty("t:a")),
            [
                "index/ c:x/anchor:count",
                "index/paper c:x/anchor:count",
                "pages/t:a/fwd:to",
                "-pending/t:a s:p/link:was"
            ]
        );
        forward(&store, "t:a");
        let want = [(" c:x", "3"), ("anchors c:x", "1"), ("paper c:x", "1"), ("query c:x", "1")];
        assert_eq!(counts(&store), strs(&want));

        // A change pending while the destination moves: the target run moves the summary, the
        // site run then forwards the change to the new destination.
        links(&store, "s:q", &[("t:ab", "not mine")]);
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "t:a");
        moved(&store, "t:a");
        forward(&store, "t:a");
        let want = [(" t:a", "1"), ("paper t:a", "1")];
        assert_eq!(counts(&store).into_iter().filter(|(r, _)| r.ends_with("t:a")).collect::<Vec<_>>(), strs(&want));
        assert!(counts(&store).iter().all(|(r, _)| !r.ends_with("c:x")), "{:?}", counts(&store));

        // The same, the other way round: the site run moves the summary itself.
        links(&store, "s:q", &[("t:ab", "not mine"), ("t:a", "back")]);
        store.put(PAGES, "t:a", CLUSTER_CANONICAL, "c:y");
        forward(&store, "t:a");
        assert!(writes(&store, &store.notification(PAGES, "t:a", CLUSTER_CANONICAL)).is_empty(), "moved already");
        let want = [(" c:y", "2"), ("back c:y", "1"), ("paper c:y", "1")];
        assert_eq!(counts(&store).into_iter().filter(|(r, _)| r.ends_with("c:y")).collect::<Vec<_>>(), strs(&want));

        // No inlinks left: the counts and fwd:to go.
        links(&store, "s:p", &[]);
        links(&store, "s:q", &[("t:ab", "not mine")]);
        forward(&store, "t:a");
        forward(&store, "t:ab");
        assert_eq!(counts(&store), strs(&[(" t:ab", "2"), ("mine t:ab", "1"), ("not t:ab", "1")]));
        assert_eq!(store.get(PAGES, "t:a", FWD_TO), None);
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
    }

    /// A store with `t:hub`'s `n` inlinks forwarded, as a site run leaves them.
    fn hub(n: usize) -> MemStore {
        let store = store();
        for i in 0..n {
            store.put(INLINKS, join_row("t:hub", &format!("s:{i:05}")), LINK_ANCHOR, "documentation home");
        }
        store.put(INDEX, join_row("documentation", "t:hub"), ANCHOR_COUNT, n.to_string());
        store.put(INDEX, join_row("home", "t:hub"), ANCHOR_COUNT, n.to_string());
        store.put(INDEX, length_row("t:hub"), ANCHOR_COUNT, (2 * n).to_string());
        store.put(PAGES, "t:hub", FWD_TO, format!("t:hub\n{n}\ndocumentation\t{n}\nhome\t{n}\n"));
        store
    }

    #[test]
    fn a_change_costs_the_same_whatever_the_target_has_inlinks() {
        // Cells read and written by one new inlink, one changed and one removed, to a target
        // with `n` inlinks.
        let costs = |n: usize| {
            let store = hub(n);
            let mut written = Vec::new();
            for (source, anchors) in [("s:new", "new guide"), ("s:00001", "documentation index"), ("s:00002", "")] {
                let links = if anchors.is_empty() { String::new() } else { format!("t:hub\t{anchors}\n") };
                store.put(PAGES, source, LINK_OUT, "t:hub\n");
                store.put(PAGES, source, DOC_LINKS, links);
                let inverting = store.notification(PAGES, source, DOC_LINKS);
                written.push(cost(&store, &inverting));
                store.observe::<LinkInversion>(&inverting).unwrap();
                written.push(cost(&store, &site_dirty("t:hub")));
                forward(&store, "t:hub");
            }
            let hub = |term: &str| store.get_str(INDEX, join_row(term, "t:hub"), ANCHOR_COUNT);
            assert_eq!(hub("documentation"), Some((n - 1).to_string()));
            assert_eq!(hub("home"), Some((n - 2).to_string()));
            assert_eq!(
                (hub("new"), hub("guide"), hub("index")),
                (Some("1".into()), Some("1".into()), Some("1".into()))
            );
            let want = format!("t:hub\n{n}\ndocumentation\t{}\nguide\t1\nhome\t{}\nindex\t1\nnew\t1\n", n - 1, n - 2);
            assert_eq!(store.get_str(PAGES, "t:hub", FWD_TO), Some(want));
            written
        };
        assert_eq!(costs(10), costs(2_000));
        // Writes. New: the inlink, its pending row, link:out; then the pending row (deleted),
        // fwd:to, two terms and the length. Changed: one term out, one in, same length.
        // Removed: two terms, the length.
        let written: Vec<usize> = costs(10).iter().map(|(_, w)| *w).collect();
        assert_eq!(written, [3, 5, 3, 4, 3, 5]);
        // Reads. Inverting: doc:links, link:out, the inlink, the pending row. Forwarding: the
        // pending row (and the empty page after it), fwd:to and the canonical, the counts it
        // changes (three, two, three); not the inlink, which the pending entry holds.
        let read: Vec<usize> = costs(10).iter().map(|(r, _)| *r).collect();
        assert_eq!(read, [4, 7, 4, 6, 4, 7]);
    }

    #[test]
    fn entries_of_an_earlier_version_have_their_inlink_read() {
        // Pending rows written before entries held the inlink's value: `now` unrecorded, so
        // the site run reads the rows (t:b's entry, beside them, holds it).
        let store = store();
        store.put(INLINKS, "t:a s:p", LINK_ANCHOR, "paper");
        store.put(INLINKS, "t:b s:p", LINK_ANCHOR, "blue");
        store.put(PENDING, "t:a s:p", LINK_WAS, "t:a\t-\n");
        store.put(PENDING, "t:b s:p", LINK_WAS, "t:b\tv2\t-\t+blue\n");
        store.put(INLINKS, "t:a s:q", LINK_ANCHOR, "query");
        store.put(PENDING, "t:a s:q", LINK_WAS, "t:a\t-\n");
        let (read, _) = cost(&store, &site_dirty("t:a"));
        // The two pending rows (and the empty page after them), fwd:to and the canonical, the
        // two inlink rows of the unrecorded entries, the three counts ("paper", "query", the
        // length).
        assert_eq!(read, 10);
        forward(&store, "t:a");
        forward(&store, "t:b");
        let want = [(" t:a", "2"), (" t:b", "1"), ("blue t:b", "1"), ("paper t:a", "1"), ("query t:a", "1")];
        assert_eq!(counts(&store), strs(&want));
        assert!(rows(&store, PENDING, LINK_WAS).is_empty());
    }

    #[test]
    fn a_move_costs_the_same_whatever_the_target_has_inlinks() {
        // Cells read and written by moving a target with `n` inlinks to another canonical.
        let costs = |n: usize| {
            let store = hub(n);
            store.put(PAGES, "t:hub", CLUSTER_CANONICAL, "c:mirror");
            let moving = store.notification(PAGES, "t:hub", CLUSTER_CANONICAL);
            let cost = cost(&store, &moving);
            store.observe::<LinkInversion>(&moving).unwrap();
            let want = [(" c:mirror", 2 * n), ("documentation c:mirror", n), ("home c:mirror", n)];
            let want: Vec<(String, String)> = want.iter().map(|(r, c)| ((*r).to_owned(), c.to_string())).collect();
            assert_eq!(counts(&store), want);
            cost
        };
        // Read: fwd:to, the canonical, three counts at each destination. Written: the summary,
        // three counts out, three in. Not one inlink.
        assert_eq!(costs(10), (8, 7));
        assert_eq!(costs(20_000), (8, 7));
    }

    #[test]
    fn inversion_then_forwarding() {
        let store = store();
        links(&store, "s:p", &[("t:a", "example")]);
        forward_all(&store);
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
        assert_eq!(take_notified(&store, LINK_DIRTY), ["http://t.org"]);
        store.put(PAGES, &target, CLUSTER_CANONICAL, &source);
        forward(&store, "http://t.org");
        let index_row = String::from_utf8(join_row("anchor", &source)).unwrap();
        assert_eq!(counts(&store), strs(&[(&format!(" {source}"), "1"), (&index_row, "1")]));
        let inlink_row = String::from_utf8(join_row(&target, &source)).unwrap();
        assert_eq!(inlink_row.len(), 2 * MAX_URL_BYTES + 1);
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

        store.put(PENDING, "t:a s:p", LINK_WAS, "t:a\tanchors\n");
        let err = store.observe::<LinkInversion>(&site_dirty("t:a")).unwrap_err();
        assert_eq!(
            err,
            Error::failed(
                "pending/t:a s:p/link:was: target \"t:a\": \"anchors\" is neither \"-\" nor \"+\" followed by anchors"
            )
        );
        store.put(PENDING, "t:a s:p", LINK_WAS, "t:b\t-\n");
        let err = store.observe::<LinkInversion>(&site_dirty("t:a")).unwrap_err();
        assert_eq!(
            err,
            Error::failed("pending/t:a s:p/link:was: target \"t:b\" is not on the site \"t:a\" of the row")
        );
        // A summary that the recorded inlinks do not account for.
        store.put(PENDING, "t:a s:p", LINK_WAS, "t:a\t+paper\n");
        store.put(PAGES, "t:a", FWD_TO, "t:a\n1\n");
        store.put(INLINKS, "t:a s:q", LINK_ANCHOR, "");
        let err = store.observe::<LinkInversion>(&site_dirty("t:a")).unwrap_err();
        assert!(
            matches!(&err, Error::Failed(m) if m.starts_with("pages/t:a/fwd:to: forwarding would take the count 0 of \"paper\" below zero")),
            "{err}"
        );
        store.put(PAGES, "t:a", FWD_TO, "t:a");
        let err = store.observe::<LinkInversion>(&store.notification(PAGES, "t:a", CLUSTER_CANONICAL)).unwrap_err();
        assert!(matches!(&err, Error::Failed(m) if m.starts_with("pages/t:a/fwd:to: \"t:a\" is not")), "{err}");
        // A count at the destination that the summary does not account for.
        store.put(PAGES, "t:a", FWD_TO, "t:a\n1\npaper\t1\n");
        let err = store.observe::<LinkInversion>(&site_dirty("t:a")).unwrap_err();
        assert!(
            matches!(&err, Error::Failed(m) if m.starts_with("index/paper t:a/anchor:count: forwarding would take")),
            "{err}"
        );
    }
}
