//! `document-processor`: the web-index pipeline's first stage (`docs/webindex.md`), exporting
//! [`webindex::observers::DocumentProcessor`].
//!
//! Bind it to `pages/raw:html`. On each notification it parses the page's `raw:html` into
//! `doc:title`, `doc:text`, `doc:links` and `doc:hash` of the same row, writing only the
//! columns whose value changed, and weakly notifies `export:dirty` when the title or text
//! changed (`raw:html` absent: the `doc:*` columns are deleted). `raw:html` that is not UTF-8
//! fails the run, and so does a row key that is not a normalized http(s) URL of at most
//! [`MAX_URL_BYTES`](webindex::html::MAX_URL_BYTES) (2040) bytes.
//!
//! Reads `pages/raw:html` (the observed column) and `pages/doc:*` (writable, hence readable);
//! writes `pages/doc:title`, `pages/doc:text`, `pages/doc:links`, `pages/doc:hash`; notifies
//! `pages/export:dirty` (a weak-notify column: the `writes` rule grants `notify-weak`). As in
//! `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "document-processor"
//! wasm = "document_processor.wasm"
//! table = "pages"
//! column = "raw:html"
//! writes = ["pages/doc:*", "pages/export:dirty"]
//! ```

percolator_guest::export_observer!(webindex::observers::DocumentProcessor);
