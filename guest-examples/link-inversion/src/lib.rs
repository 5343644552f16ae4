//! `link-inversion`: inverts links and forwards them to canonical pages (`docs/webindex.md`),
//! exporting [`webindex::observers::LinkInversion`].
//!
//! Bind it three times; the notified column picks the half:
//!
//! - `pages/doc:links` (**inverting**): for each distinct target `T` of the page `P`'s links,
//!   `inlinks/"T P"/link:anchor` holds the anchors; rows of targets no longer linked to are
//!   deleted (the page's `link:out` records the targets), and each target whose row changed
//!   gets a weak notification of `link:dirty`.
//! - `pages/link:dirty` (weak) and `pages/cluster:canonical` (strong) (**forwarding**): a URL
//!   `T` with inlinks has them copied to `fwd/"C T"/fwd:anchors`, where `C` is its
//!   `cluster:canonical` (or `T` itself), `fwd:to(T) = C`; stale forwarding rows are deleted
//!   and the old and new `C` get a weak notification of `export:dirty` when their row changes.
//!
//! `link:dirty` is a weak-notify column (`notify = "weak"`): it is never written, so inverting
//! runs of many pages linking to one popular target do not conflict on it. A forwarding run
//! may repeat; it recomputes from the inlinks, and `fwd:to`, written on every run, serializes
//! the runs of one URL (the weak binding has no ack).
//!
//! Each half writes only its own columns, so the bindings form no trigger cycle (the
//! inverting binding's `link:dirty` notifies the forwarding binding, which writes neither
//! `doc:links` nor `link:dirty`).
//!
//! Inverting half: reads `pages/doc:links` (observed), `pages/link:out`,
//! `inlinks/link:anchor` (writable, hence readable); writes `inlinks/link:anchor`,
//! `pages/link:out`; notifies `pages/link:dirty`. Forwarding half: reads
//! `inlinks/link:anchor`, `pages/cluster:canonical`, `pages/fwd:to`, `fwd/fwd:anchors`; writes
//! `fwd/fwd:anchors`, `pages/fwd:to`; notifies `pages/export:dirty`. As in
//! `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "link-inversion"
//! wasm = "link_inversion.wasm"
//! table = "pages"
//! column = "doc:links"
//! writes = ["inlinks/link:anchor", "pages/link:out", "pages/link:dirty"]
//!
//! [[binding]]
//! name = "link-forwarding"
//! wasm = "link_inversion.wasm"
//! table = "pages"
//! column = "link:dirty"
//! notify = "weak"
//! reads = ["pages/cluster:canonical", "inlinks/link:anchor"]
//! writes = ["fwd/fwd:anchors", "pages/fwd:to", "pages/export:dirty"]
//!
//! [[binding]]
//! name = "link-forwarding-canonical"
//! wasm = "link_inversion.wasm"
//! table = "pages"
//! column = "cluster:canonical"
//! reads = ["inlinks/link:anchor"]
//! writes = ["fwd/fwd:anchors", "pages/fwd:to", "pages/export:dirty"]
//! ```

percolator_guest::export_observer!(webindex::observers::LinkInversion);
