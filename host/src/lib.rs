//! The percolator host: runs Percolator observers as sandboxed WebAssembly components.
//!
//! [`Runtime`] compiles and caches components of the `percolator:observer` world
//! (`wit/observer.wit`); [`WasmObserver`] implements `percolator_store::Observer` for one,
//! with the binding's declared reads and writes enforced on every host call, a per-run
//! deadline (epoch interruption) and a memory cap.

mod access;
mod bindings;
pub mod config;
mod host;
pub mod pipeline;
pub mod reload;
mod runtime;

pub use access::{Access, ColumnRule};
pub use runtime::{Compiled, Limits, Runtime, WasmObserver};
