//! `clustering`: groups pages with equal content hashes and picks each cluster's canonical URL
//! (`docs/webindex.md`), exporting [`webindex::observers::Clustering`].
//!
//! Bind it twice, to `pages/doc:hash` and to `pages/raw:pagerank`. A run on a page moves it
//! into the cluster of its `doc:hash` (`clusters/"<hash> <url>"/member:pagerank`, and
//! `cluster:hash` of the page), out of the cluster it was registered in before, and settles
//! every cluster it touched: `clusters/"<hash>"/canon:url` is the member with the highest
//! PageRank (ties: the smallest URL), written on every run as the clusters' serialization
//! point, and every member's `cluster:canonical` follows it, with a weak notification of
//! `export:dirty` for each member whose canonical changed. An unparsable `raw:pagerank` fails
//! the run.
//!
//! Reads `pages/doc:hash`, `pages/raw:pagerank` (one observed, one declared), `pages/cluster:*`
//! and `clusters/member:pagerank` (writable, hence readable); writes `clusters/member:pagerank`,
//! `clusters/canon:url`, `pages/cluster:hash`, `pages/cluster:canonical`; notifies
//! `pages/export:dirty`. As in `config/web-index.toml`:
//!
//! ```toml
//! [[binding]]
//! name = "clustering-hash"
//! wasm = "clustering.wasm"
//! table = "pages"
//! column = "doc:hash"
//! reads = ["pages/raw:pagerank"]
//! writes = ["pages/cluster:*", "pages/export:dirty", "clusters/member:pagerank", "clusters/canon:url"]
//!
//! [[binding]]
//! name = "clustering-pagerank"
//! wasm = "clustering.wasm"
//! table = "pages"
//! column = "raw:pagerank"
//! reads = ["pages/doc:hash"]
//! writes = ["pages/cluster:*", "pages/export:dirty", "clusters/member:pagerank", "clusters/canon:url"]
//! ```

percolator_guest::export_observer!(webindex::observers::Clustering);
