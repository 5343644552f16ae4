//! `exporter`: writes the inverted index of canonical pages (`docs/webindex.md`), exporting
//! [`webindex::observers::Exporter`].
//!
//! Bind it weakly (`notify = "weak"`) to `pages/export:dirty`, which the other observers
//! notify and never write. A URL `C` is exported iff `cluster:canonical(C) == C`; the terms of
//! its `doc:title` and `doc:text` (counted with repeats) go to `index/"<term> C"/hit:count`,
//! their total to `index/" C"/hit:count` (present for every exported page), and
//! `export:terms(C)` records them so the next run deletes the rows of terms that are gone. A
//! URL that is not exported has none of them. The anchors forwarded to `C` are counted by
//! link forwarding in `anchor:count` cells of the same rows, which ranking adds. A run may
//! repeat: it recomputes from the current state, and `export:terms`, written on every run,
//! serializes the runs of one URL (the weak binding has no ack).
//!
//! Reads `pages/cluster:canonical`, `pages/doc:title`, `pages/doc:text` and
//! `pages/export:terms`, `index/hit:count` (writable, hence readable); writes
//! `index/hit:count`, `pages/export:terms`. As in `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "exporter"
//! wasm = "exporter.wasm"
//! table = "pages"
//! column = "export:dirty"
//! notify = "weak"
//! reads = ["pages/cluster:canonical", "pages/doc:title", "pages/doc:text"]
//! writes = ["index/hit:count", "pages/export:terms"]
//! ```

percolator_guest::export_observer!(webindex::observers::Exporter);
