//! The host side of the WIT imports: one `HostState` per wasmtime `Store`, one file per
//! interface.

mod config;
mod log;
pub(crate) mod sink;
pub(crate) mod txn;

use std::collections::BTreeMap;
use std::sync::Arc;

use percolator_store::Transaction;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, bail};
use wasmtime_wasi::{WasiCtxView, WasiView};

use crate::access::Access;
use crate::bindings::WitError;
use crate::runtime::Limits;
use crate::sandbox::Wasi;

/// The data of one observer instance's wasmtime `Store`.
pub(crate) struct HostState {
    /// The observer's name (for logs and errors).
    pub(crate) observer: Arc<str>,
    /// The running transaction; present only during an `observe` call.
    pub(crate) txn: Option<Transaction>,
    /// What the binding may read and write.
    pub(crate) access: Arc<Access>,
    /// Memory cap: linear memories and tables together.
    pub(crate) limits: Budget,
    /// Bytes moved between host and guest in the current run (values returned and buffered
    /// writes), capped at the instance's memory budget: the guest cannot make the host hold
    /// more than it could hold itself.
    pub(crate) io_bytes: usize,
    /// The last conflict a host call reported to the guest: if the guest returns a conflict,
    /// this is the store error that is retried.
    pub(crate) conflict: Option<percolator_store::Error>,
    /// The first storage failure a host call reported to the guest (the store cannot write:
    /// a full disk): the run's outcome whatever the guest makes of it, so that it backs off
    /// instead of counting as the observer's failure.
    pub(crate) storage_failure: Option<percolator_store::Error>,
    /// The first access violation of the run: a denied access fails the run even if the guest
    /// swallows the error.
    pub(crate) denied: Option<String>,
    /// The binding's parameters (the `config` import).
    pub(crate) params: Arc<BTreeMap<String, String>>,
    /// The instance's WASI context (deny-by-default, `sandbox.rs`) and its resources.
    pub(crate) wasi: Wasi,
    /// When the current run (or the instantiation) started, for its deadline.
    pub(crate) run_clock: crate::runtime::RunClock,
    table: ResourceTable,
}

impl HostState {
    pub(crate) fn new(
        observer: Arc<str>,
        access: Arc<Access>,
        limits: Budget,
        params: Arc<BTreeMap<String, String>>,
        wasi: Wasi,
    ) -> HostState {
        HostState {
            observer,
            txn: None,
            access,
            limits,
            io_bytes: 0,
            conflict: None,
            storage_failure: None,
            denied: None,
            params,
            wasi,
            run_clock: crate::runtime::RunClock::now(),
            table: ResourceTable::new(),
        }
    }

    /// Charges `n` bytes of host-side work to this run; past the budget the run fails.
    fn charge(&mut self, n: usize) -> Result<(), WitError> {
        self.io_bytes = self.io_bytes.saturating_add(n);
        if self.io_bytes > self.limits.bytes {
            let msg = format!(
                "observer {} moved more than its memory limit of {} MiB through the host in one run",
                self.observer,
                self.limits.bytes >> 20
            );
            self.denied.get_or_insert_with(|| msg.clone());
            return Err(WitError::InvalidArgument(msg));
        }
        Ok(())
    }

    fn txn(&mut self) -> Result<&mut Transaction, WitError> {
        self.txn.as_mut().ok_or_else(|| WitError::Storage("no transaction is running (called outside observe)".into()))
    }

    /// Converts a store error for the guest, remembering conflicts.
    fn store_error(&mut self, e: percolator_store::Error) -> WitError {
        use percolator_store::Error as E;
        let text = e.to_string();
        match e {
            E::Conflict { .. } => {
                self.conflict = Some(e);
                WitError::Conflict(text)
            }
            // The store's failure, not the observer's (`Error::is_storage_failure`), whatever
            // the guest makes of it.
            E::Io { .. } | E::Unavailable(_) => {
                self.storage_failure.get_or_insert(e);
                WitError::Storage(text)
            }
            E::InvalidArgument(_) => WitError::InvalidArgument(text),
            E::NotFound(_) => WitError::NotFound(text),
            _ => WitError::Storage(text),
        }
    }

    fn deny(&mut self, what: String) -> WitError {
        let msg = format!("observer {} may not {what}: not declared in its binding", self.observer);
        self.denied.get_or_insert_with(|| msg.clone());
        WitError::Denied(msg)
    }
}

impl crate::bindings::percolator::observer::types::Host for HostState {}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi.ctx, table: &mut self.table }
    }
}

/// One byte budget per instance for all its linear memories and tables (8 bytes per table
/// element), so neither several memories nor a huge table can exceed the binding's cap; and
/// the binding's counts of core instances, tables and memories.
pub(crate) struct Budget {
    pub(crate) bytes: usize,
    used: usize,
    instances: usize,
    tables: usize,
    memories: usize,
    /// The total a refused growth asked for, since the last take: a guest whose allocator
    /// aborts on a failed `memory.grow` (SpiderMonkey does) traps as `unreachable`, and this
    /// says why.
    refused: Option<usize>,
}

impl Budget {
    pub(crate) fn new(limits: &Limits) -> Budget {
        Budget {
            bytes: limits.memory_bytes,
            used: 0,
            instances: limits.instances as usize,
            tables: limits.tables as usize,
            memories: limits.memories as usize,
            refused: None,
        }
    }

    /// The total a refused growth asked for since the last call, if one was refused.
    pub(crate) fn take_refused(&mut self) -> Option<usize> {
        self.refused.take()
    }

    /// Bytes of linear memory and tables the instance holds.
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    fn grow(&mut self, delta: usize) -> wasmtime::Result<bool> {
        match self.used.checked_add(delta) {
            Some(total) if total <= self.bytes => {
                self.used = total;
                Ok(true)
            }
            Some(total) => {
                self.refused = Some(total);
                bail!(
                    "memory limit of {} MiB exceeded: the instance asked for {:.1} MiB in all (raise memory_mb)",
                    self.bytes >> 20,
                    total as f64 / f64::from(1 << 20)
                )
            }
            None => bail!("memory limit of {} MiB exceeded", self.bytes >> 20),
        }
    }
}

impl ResourceLimiter for Budget {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current))
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current).saturating_mul(8))
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

/// The versions of the world whose `txn` and `log` interfaces the host defines. 0.2.0 added the
/// `config` interface, 0.3.0 `txn.combine` (and its `delta` type), and nothing else changed,
/// so one implementation serves all: component types are structural, so the functions typed
/// with 0.3.0's records and variants type-check against an older component's imports of the
/// same shapes.
pub(crate) const WORLD_VERSIONS: [&str; 3] = ["0.1.0", "0.2.0", "0.3.0"];

/// The versions whose world has the `config` interface (the newest one is defined by the
/// bindings' own `add_to_linker`).
const CONFIG_VERSIONS: [&str; 1] = ["0.2.0"];

/// The versions whose `txn` has `combine`.
const COMBINE_VERSIONS: [&str; 1] = ["0.3.0"];

/// Defines the `percolator:observer` imports in `linker`: `txn` and `log` of every version of
/// [`WORLD_VERSIONS`] (the log records a guest's panic message for the run's error, see
/// `runtime.rs`), `combine` of 0.3.0, and `config` of 0.2.0 and 0.3.0.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<HostState>,
    on_log: fn(&mut HostState, crate::bindings::percolator::observer::log::Level, String),
) -> wasmtime::Result<()> {
    use crate::bindings::percolator::observer::{config, log::Level, txn::Host as _};
    use crate::bindings::{Cell, Delta, ScanEntry};
    use wasmtime::StoreContextMut as Cx;
    type Scan = (String, Vec<u8>, Option<Vec<u8>>, Option<Vec<String>>, u32);
    type Reply<T> = wasmtime::Result<(Result<T, WitError>,)>;
    for version in WORLD_VERSIONS {
        let mut txn = linker.instance(&format!("percolator:observer/txn@{version}"))?;
        txn.func_wrap("get", |mut s: Cx<'_, HostState>, (t, r, c): (String, Vec<u8>, String)| -> Reply<_> {
            Ok((s.data_mut().get(t, r, c),))
        })?;
        txn.func_wrap("get-many", |mut s: Cx<'_, HostState>, (cells,): (Vec<Cell>,)| -> Reply<_> {
            Ok((s.data_mut().get_many(cells),))
        })?;
        txn.func_wrap("scan", |mut s: Cx<'_, HostState>, (t, a, b, cols, n): Scan| -> Reply<Vec<ScanEntry>> {
            Ok((s.data_mut().scan(t, a, b, cols, n),))
        })?;
        txn.func_wrap(
            "set",
            |mut s: Cx<'_, HostState>, (t, r, c, v): (String, Vec<u8>, String, Vec<u8>)| -> Reply<()> {
                Ok((s.data_mut().set(t, r, c, v),))
            },
        )?;
        txn.func_wrap("delete", |mut s: Cx<'_, HostState>, (t, r, c): (String, Vec<u8>, String)| -> Reply<()> {
            Ok((s.data_mut().delete(t, r, c),))
        })?;
        txn.func_wrap("notify-weak", |mut s: Cx<'_, HostState>, (t, r, c): (String, Vec<u8>, String)| -> Reply<()> {
            Ok((s.data_mut().notify_weak(t, r, c),))
        })?;
        txn.func_wrap("start-ts", |mut s: Cx<'_, HostState>, (): ()| Ok((s.data_mut().start_ts(),)))?;
        if COMBINE_VERSIONS.contains(&version) {
            txn.func_wrap(
                "combine",
                |mut s: Cx<'_, HostState>, (t, r, c, d): (String, Vec<u8>, String, Delta)| -> Reply<()> {
                    Ok((s.data_mut().combine(t, r, c, d),))
                },
            )?;
        }
        let mut log = linker.instance(&format!("percolator:observer/log@{version}"))?;
        log.func_wrap("log", move |mut s: Cx<'_, HostState>, (level, message): (Level, String)| {
            on_log(s.data_mut(), level, message);
            Ok(())
        })?;
    }
    for version in CONFIG_VERSIONS {
        let mut config = linker.instance(&format!("percolator:observer/config@{version}"))?;
        config.func_wrap("get", |mut s: Cx<'_, HostState>, (key,): (String,)| {
            Ok((config::Host::get(s.data_mut(), key),))
        })?;
        config.func_wrap("all", |mut s: Cx<'_, HostState>, (): ()| Ok((config::Host::all(s.data_mut()),)))?;
    }
    config::add_to_linker::<HostState, wasmtime::component::HasSelf<HostState>>(linker, |s| s)
}
