//! `exporter`: writes the inverted index of canonical pages (`docs/webindex.md`), exporting
//! [`webindex::observers::Exporter`].
//!
//! Bind it weakly (`notify = "weak"`) to `pages/export:dirty`, which the other observers
//! notify and never write. A URL `C` is exported iff `cluster:canonical(C) == C`; its terms
//! (of `doc:title`, `doc:text` and every anchor in `fwd/"C *"`, counted with repeats) go to
//! `index/"<term> C"/hit:count`, and `export:terms(C)` records them so the next run deletes
//! the rows of terms that are gone. A URL that is not exported has neither. A run may repeat:
//! it recomputes from the current state, and `export:terms`, written on every run, serializes
//! the runs of one URL (the weak binding has no ack).
//!
//! Reads `pages/cluster:canonical`, `pages/doc:title`, `pages/doc:text`, `fwd/fwd:anchors`
//! and `pages/export:terms` (writable, hence readable); writes `index/hit:count`,
//! `pages/export:terms`. As in `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "exporter"
//! wasm = "exporter.wasm"
//! table = "pages"
//! column = "export:dirty"
//! notify = "weak"
//! reads = ["pages/cluster:canonical", "pages/doc:title", "pages/doc:text", "fwd/fwd:anchors"]
//! writes = ["index/hit:count", "pages/export:terms"]
//! ```

percolator_guest::export_observer!(webindex::observers::Exporter);
