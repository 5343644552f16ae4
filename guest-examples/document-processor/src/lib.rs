//! `document-processor`: the web-index pipeline's first stage (`docs/webindex.md`), exporting
//! [`webindex::observers::DocumentProcessor`].
//!
//! Bind it to `pages/raw:html`. On each notification it parses the page's `raw:html` into
//! `doc:title`, `doc:text`, `doc:links` and `doc:hash` of the same row, writing only the
//! columns whose value changed, and writes `export:dirty` when the title or text changed
//! (`raw:html` absent: the `doc:*` columns are deleted). `raw:html` that is not UTF-8 fails
//! the run.
//!
//! Reads `pages/raw:html`, `pages/doc:*`; writes `pages/doc:title`, `pages/doc:text`,
//! `pages/doc:links`, `pages/doc:hash`, `pages/export:dirty`:
//!
//! ```toml
//! [[binding]]
//! name = "document-processor"
//! wasm = "document_processor.wasm"
//! table = "pages"
//! column = "raw:html"
//! reads = ["pages/raw:html"]
//! writes = ["pages/doc:*", "pages/export:dirty"]
//! ```

percolator_guest::export_observer!(webindex::observers::DocumentProcessor);
