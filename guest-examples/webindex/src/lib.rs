//! `webindex`: the paper's web-index pipeline (section 1, Figure 2), shared by its observer
//! components, the host's `query` and `sample-crawl` commands, and the tests.
//!
//! The tables, columns and invariants are specified in `docs/webindex.md` (repository root);
//! this crate is that specification in code:
//!
//! - [`charset`]: the encoding of a fetched page (byte order mark, `<meta charset>`, UTF-8 or
//!   windows-1252), decoded as browsers do.
//! - [`html`]: a tolerant HTML parser (title, visible text, links with anchor text) and URL
//!   resolution/normalization.
//! - [`text`]: terms (tokenization), the content hash, PageRank parsing and the canonical order.
//! - [`schema`]: table and column names, row-key joining, value encodings.
//! - [`observers`] (feature `observers`): the four observers, generic over
//!   `percolator_guest::Txn`; each guest crate exports one of them.
//! - [`crawl`]: a deterministic sample-crawl generator (duplicates, links, PageRank, re-crawls).
//! - [`batch`]: the from-scratch batch computation of every derived table from the `raw:*`
//!   inputs, which the incremental pipeline must equal at its fixed point.
//! - [`rank`]: answering a query from the index — BM25 with a PageRank prior, every term
//!   required; pure, plus the reads a client makes to feed it.

pub mod batch;
pub mod charset;
pub mod crawl;
pub mod html;
#[cfg(feature = "observers")]
pub mod observers;
pub mod rank;
pub mod schema;
pub mod text;
