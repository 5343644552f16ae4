//! `exporter`: writes the inverted index of canonical pages (`docs/webindex.md`), exporting
//! [`webindex::observers::Exporter`].
//!
//! Bind it to `pages/export:dirty`. A URL `C` is exported iff `cluster:canonical(C) == C`;
//! its terms (of `doc:title`, `doc:text` and every anchor in `fwd/"C *"`, counted with
//! repeats) go to `index/"<term> C"/hit:count`, and `export:terms(C)` records them so the
//! next run deletes the rows of terms that are gone. A URL that is not exported has neither.
//!
//! Reads `pages/cluster:canonical`, `pages/doc:title`, `pages/doc:text`, `pages/export:terms`,
//! `fwd/fwd:anchors`; writes `index/hit:count`, `pages/export:terms`:
//!
//! ```toml
//! [[binding]]
//! name = "exporter"
//! wasm = "exporter.wasm"
//! table = "pages"
//! column = "export:dirty"
//! reads = ["pages/cluster:canonical", "pages/doc:title", "pages/doc:text", "fwd/fwd:anchors"]
//! writes = ["index/hit:count", "pages/export:terms"]
//! ```

percolator_guest::export_observer!(webindex::observers::Exporter);
