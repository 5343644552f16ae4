//! `clustering`: groups pages with equal content hashes and picks each cluster's canonical URL
//! (`docs/webindex.md`), exporting [`webindex::observers::Clustering`].
//!
//! Bind it twice, to `pages/doc:hash` and to `pages/raw:pagerank`. A run on a page moves it
//! into the cluster of its `doc:hash` (`clusters/"<hash> <url>"/member:pagerank`, and
//! `cluster:hash` of the page), out of the cluster it was registered in before, and settles
//! every cluster it touched: `clusters/"<hash>"/canon:url` is the member with the highest
//! PageRank (ties: the smallest URL), written on every run as the clusters' serialization
//! point, and every member's `cluster:canonical` follows it, with `export:dirty` for each
//! member whose canonical changed. An unparsable `raw:pagerank` fails the run.
//!
//! Reads `pages/doc:hash`, `pages/raw:pagerank`, `pages/cluster:*`,
//! `clusters/member:pagerank`; writes `clusters/member:pagerank`, `clusters/canon:url`,
//! `pages/cluster:hash`, `pages/cluster:canonical`, `pages/export:dirty`:
//!
//! ```toml
//! [[binding]]
//! name = "clustering-hash"
//! wasm = "clustering.wasm"
//! table = "pages"
//! column = "doc:hash"
//! reads = ["pages/doc:hash", "pages/raw:pagerank"]
//! writes = ["clusters/member:pagerank", "clusters/canon:url", "pages/cluster:*", "pages/export:dirty"]
//!
//! [[binding]]
//! name = "clustering-pagerank"
//! wasm = "clustering.wasm"
//! table = "pages"
//! column = "raw:pagerank"
//! reads = ["pages/doc:hash", "pages/raw:pagerank"]
//! writes = ["clusters/member:pagerank", "clusters/canon:url", "pages/cluster:*", "pages/export:dirty"]
//! ```

percolator_guest::export_observer!(webindex::observers::Clustering);
