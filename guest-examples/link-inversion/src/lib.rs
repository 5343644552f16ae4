//! `link-inversion`: inverts links and forwards them to canonical pages (`docs/webindex.md`),
//! exporting [`webindex::observers::LinkInversion`].
//!
//! Bind it three times; the notified column picks the half:
//!
//! - `pages/doc:links` (**inverting**): for each distinct target `T` of the page `P`'s links,
//!   `inlinks/"T P"/link:anchor` holds the anchors; rows of targets no longer linked to are
//!   deleted (the page's `link:out` records the targets). Each inlink row written or deleted
//!   gets an entry in `pending/"<site of T> P"/link:was` (what it was when last forwarded,
//!   kept if already pending, and what it is now): one pending row per page and site, and one
//!   weak notification of the site's `pending/<site>/link:dirty`.
//! - `pending/link:dirty` (weak, a **site run**) and `pages/cluster:canonical` (strong, a
//!   **target run**) (**forwarding**): a URL `T` with inlinks forwards them to `C`, its
//!   `cluster:canonical` (or `T` itself), recorded in `fwd:to(T)` with `T`'s summary (inlink
//!   count, anchor term counts). A site run applies its site's pending entries to each
//!   target's summary and to `index/"term C"/anchor:count` and the length row's, and deletes
//!   the pending rows — O(changes), not O(inlinks). When `C` changes, the summary moves from
//!   the old `C` to the new one: O(distinct anchor terms).
//!
//! `link:dirty` is a weak-notify column (`notify = "weak"`): it is never written, so inverting
//! runs of many pages linking to one popular site do not conflict on it. A site run may
//! repeat; it forwards the changes still pending. Runs that change anything write `fwd:to` of
//! every target they touch, and site runs delete the pending rows they read, which serializes
//! the runs of one target and of one site (the weak binding has no ack).
//!
//! Each half writes only its own columns, so the bindings form no trigger cycle (the
//! inverting binding's `link:dirty` notifies the forwarding binding, which writes neither
//! `doc:links` nor `link:dirty`).
//!
//! Inverting half: reads `pages/doc:links` (observed), `pages/link:out`,
//! `inlinks/link:anchor` and `pending/link:was` (writable, hence readable); writes
//! `inlinks/link:anchor`, `pending/link:was`, `pages/link:out`; notifies `pending/link:dirty`.
//! Forwarding half: reads `inlinks/link:anchor`, `pages/cluster:canonical`, `pages/fwd:to`,
//! `pending/link:was`, `index/anchor:count`; writes `pending/link:was` (deletes; site runs),
//! `pages/fwd:to`, `index/anchor:count`. As in `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "link-inversion"
//! wasm = "link_inversion.wasm"
//! table = "pages"
//! column = "doc:links"
//! writes = ["inlinks/link:anchor", "pending/link:was", "pages/link:out", "pending/link:dirty"]
//!
//! [[binding]]
//! name = "link-forwarding"
//! wasm = "link_inversion.wasm"
//! table = "pending"
//! column = "link:dirty"
//! notify = "weak"
//! reads = ["pages/cluster:canonical", "inlinks/link:anchor"]
//! writes = ["pending/link:was", "pages/fwd:to", "index/anchor:count"]
//!
//! [[binding]]
//! name = "link-forwarding-canonical"
//! wasm = "link_inversion.wasm"
//! table = "pages"
//! column = "cluster:canonical"
//! reads = ["inlinks/link:anchor"]
//! writes = ["pages/fwd:to", "index/anchor:count"]
//! ```

percolator_guest::export_observer!(webindex::observers::LinkInversion);
