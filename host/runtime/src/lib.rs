//! The percolator Wasm runtime: observers as sandboxed WebAssembly components.
//!
//! [`Runtime`] holds the one wasmtime `Engine`, compiles components of the
//! `percolator:observer` world (`wit/observer.wit`; a core module carrying wit-bindgen's
//! component-type section is made a component first) and caches the compiled artefacts on disk
//! by engine and source hash. [`Runtime::observer`] links one into a [`WasmObserver`], which
//! implements `percolator_store::Observer`: every run gets a fresh wasmtime `Store` (a warm
//! instance is reused while it is healthy), the binding's declared reads and writes
//! ([`Access`]) are checked on every host call, and a run is bounded by a deadline (epoch
//! interruption) and memory/table [`Limits`].
//!
//! **Sink transforms** (`wit/sink/sink.wit`): [`Runtime::compile_transform_file`] and
//! [`Runtime::transform`] give a [`SinkTransform`], whose [`SinkTransform::apply`] turns a batch
//! of the change feed's changes into the changes a sink delivers, in the same sandbox, always
//! deterministic (fresh instance, fixed clocks, seeded randomness), its output checked against
//! the world's contract ([`TransformError`]).
//!
//! This crate knows nothing of configuration files, HTTP or the command line: the server
//! (`percolator-server`) builds [`Access`] and [`Limits`] from its TOML and calls
//! [`Runtime::compile_file`] and [`Runtime::observer`].
//!
//! ```no_run
//! use percolator_runtime::{Access, ColumnRule, Environment, Limits, Runtime};
//!
//! let runtime = Runtime::new(None)?; // no on-disk cache
//! let compiled = runtime.compile_file(std::path::Path::new("target/guests/uppercase.wasm"))?;
//! let access = Access {
//!     reads: vec![ColumnRule::parse("pages/doc:title").map_err(wasmtime::Error::msg)?],
//!     writes: vec![ColumnRule::parse("pages/doc:upper").map_err(wasmtime::Error::msg)?],
//! };
//! let observer = runtime.observer("uppercase", &compiled, access, Limits::default(), Environment::default());
//! observer.check_instantiates()?;
//! # Ok::<(), wasmtime::Error>(())
//! ```

mod access;
mod bindings;
mod cache_limit;
mod files;
mod footprint;
mod function_cache;
mod host;
mod runtime;
mod sandbox;
mod sink_bindings;
mod transform;
mod world;

pub use access::{Access, ColumnRule};
pub use cache_limit::CachePruned;
pub use footprint::Footprint;
pub use function_cache::FunctionCacheStats;
pub use runtime::{
    Compiled, DEFAULT_CACHE_MAX_BYTES, Limits, RECENT_FAILURES, RUN_TIME_BUCKETS, RunCounts, RunStats, RunTotals,
    Runtime, WasmObserver, thread_cpu,
};
pub use sandbox::{ClockMode, Environment};
pub use transform::{CompiledTransform, SinkTransform, TRANSFORM_RANDOM_SEED, TransformError};
