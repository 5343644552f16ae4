//! The distributed backend of `percolator-store`: the two seams implemented over outside
//! systems, so that several host processes share one store.
//!
//! - **Data** ([`Bigtable`](percolator_store::backends::Bigtable)): [`RedisBigtable`], a Redis
//!   Cluster (`bigtable/`: buckets of one hash tag each, the row transaction server-side in
//!   `percolator.lua`; `docs/design.md`, "The Redis backend").
//! - **Coordination** ([`Coordination`](percolator_store::backends::Coordination)):
//!   [`EtcdCoordination`], timestamps from the oracle service ([`OracleServer`]: one leader,
//!   elected through an etcd lease, hands out every host's timestamps; `docs/design.md`, "The
//!   oracle service") and worker leases in etcd (`etcd.rs`: a small client of etcd's JSON
//!   gateway).
//!
//! ```no_run
//! use std::sync::Arc;
//! use percolator_redis::{EtcdCoordination, OracleServiceConfig, RedisBigtable, RedisConfig};
//! use percolator_store::{Oracle, Store, StoreConfig};
//!
//! let backend = RedisBigtable::open(RedisConfig { nodes: vec!["127.0.0.1:7100".into()], ..RedisConfig::default() })?;
//! // This host is one of the oracle's candidates; any number of hosts may do the same.
//! let coordination = EtcdCoordination::with_candidate(OracleServiceConfig {
//!     etcd: vec!["http://127.0.0.1:12379".into()],
//!     ..OracleServiceConfig::default()
//! })?;
//! let store = Store::with_oracle(Arc::new(backend), Oracle::new(coordination), StoreConfig::default())?;
//! # Ok::<(), percolator_store::Error>(())
//! ```
//!
//! The store's own test suite runs over these with `PERCOLATOR_TEST_BACKEND=redis`
//! (`scripts/test`); this crate's tests are what only they have: the Lua row transaction
//! against `cells.rs`, the oracle service, several host processes on one namespace, and
//! killed servers.

mod bigtable;
mod etcd;
mod etcd_coordination;
mod oracle_service;

pub use bigtable::{RedisBigtable, RedisConfig};
pub use etcd_coordination::EtcdCoordination;
pub use oracle_service::{OracleServer, OracleServiceConfig};
