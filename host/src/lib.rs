//! The percolator host: runs Percolator observers as sandboxed WebAssembly components.
//!
//! [`Runtime`] compiles and caches components of the `percolator:observer` world
//! (`wit/observer.wit`); [`WasmObserver`] implements `percolator_store::Observer` for one,
//! with the binding's declared reads and writes enforced on every host call, a per-run
//! deadline (epoch interruption) and a memory cap.
//!
//! The `percolator` binary's verbs live in [`cli`]: `up` ([`serve`]) serves a pipeline with a
//! local HTTP API ([`http`], JSON types in [`api`]); the other verbs are implemented once in
//! [`ops`] and reached either over HTTP or on the store file ([`client`]).

mod access;
pub mod api;
mod bindings;
pub mod cli;
pub mod client;
pub mod config;
mod host;
pub mod http;
pub mod load;
pub mod metrics;
pub mod ops;
pub mod pipeline;
pub mod reload;
mod runtime;
pub mod serve;

pub use access::{Access, ColumnRule};
pub use runtime::{Compiled, Limits, RunCounts, RunStats, Runtime, WasmObserver};
