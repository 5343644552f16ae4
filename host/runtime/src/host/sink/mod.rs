//! The host side of the sink-transform world's imports (`wit/sink/sink.wit`): one
//! [`TransformState`] per wasmtime `Store` (one per batch), one file per interface.

mod config;
mod log;

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtxView, WasiView};

use super::Budget;
use crate::runtime::RunClock;
use crate::sandbox::Wasi;

/// What the SDK-less guests' panic hook puts before a panic's message when it logs it through
/// the `log` import (see `guest-examples/sink-title`), just before the panic aborts as a trap.
pub(crate) const PANIC_LOG_PREFIX: &str = "transform panicked: ";

/// The data of one transform instance's wasmtime `Store`.
pub(crate) struct TransformState {
    /// The sink's name (for logs and errors).
    pub(crate) sink: Arc<str>,
    /// Memory cap: linear memories and tables together, and the counts of instances, tables
    /// and memories.
    pub(crate) limits: Budget,
    /// The sink's parameters (the `config` import).
    pub(crate) params: Arc<BTreeMap<String, String>>,
    /// The panic message the guest logged before it trapped, for the batch's error.
    pub(crate) panic: Option<String>,
    /// The instance's WASI context (deny-by-default, fixed clocks, seeded randomness).
    pub(crate) wasi: Wasi,
    /// When the call under way started, in CPU and wall time (the deadline is of CPU time, as
    /// an observer run's: `RunClock`).
    pub(crate) run_clock: RunClock,
    table: ResourceTable,
}

impl TransformState {
    pub(crate) fn new(sink: Arc<str>, limits: Budget, params: Arc<BTreeMap<String, String>>, wasi: Wasi) -> Self {
        TransformState {
            sink,
            limits,
            params,
            panic: None,
            wasi,
            run_clock: RunClock::now(),
            table: ResourceTable::new(),
        }
    }
}

impl crate::sink_bindings::percolator::sink::types::Host for TransformState {}

impl WasiView for TransformState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi.ctx, table: &mut self.table }
    }
}

/// Defines the `percolator:sink` imports (`log`, `config`) in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<TransformState>) -> wasmtime::Result<()> {
    use crate::sink_bindings::percolator::sink;
    sink::log::add_to_linker::<TransformState, HasSelf<TransformState>>(linker, |s| s)?;
    sink::config::add_to_linker::<TransformState, HasSelf<TransformState>>(linker, |s| s)
}
