//! The percolator host's server: everything `percolator up` runs, and the commands over a
//! store that a client without a host runs in-process.
//!
//! Layers, bottom up (no module uses one above it):
//! - [`config`]: the TOML configuration, parsed in two stages (raw serde mirror → validated
//!   [`Config`]), errors located by file, line and field;
//! - [`pipeline`]: a configuration's bindings compiled by the Wasm runtime
//!   (`percolator-runtime`) and swapped into the store as a whole; [`reload`] watches the
//!   files and applies changes; [`sampler`] keeps throughput samples;
//! - [`ops`]: every API command as an [`Op`](ops::Op) over a store, listed once in
//!   [`ops::register`]; [`metrics`] renders `/metrics`;
//! - [`http`]: the routes derived from that list, and the [`dashboard`]'s page at `/`;
//!   [`route`]: a client's choice between a running host and the store file; [`serve`]: `up`
//!   itself, with [`trim`] trimming the change log and its [`sinks`] (changes delivered to
//!   PostgreSQL, a file, a webhook).
//!
//! ```no_run
//! // Serve the pipeline of a configuration until Ctrl-C (what `percolator up` does).
//! percolator_server::serve::up(std::path::Path::new("percolator.toml"), percolator_server::serve::signals())?;
//! # Ok::<(), String>(())
//! ```

pub mod config;
pub mod dashboard;
pub mod http;
pub mod memory;
pub mod metrics;
pub mod ops;
pub mod pipeline;
pub mod reload;
pub mod route;
pub mod sampler;
pub mod serve;
pub mod sinks;
pub mod trim;

pub use config::Config;
pub use pipeline::Pipeline;
pub use route::{Route, connect};
