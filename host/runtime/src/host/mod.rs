//! The host side of the WIT imports: one `HostState` per wasmtime `Store`, one file per
//! interface.

mod log;
mod txn;

use std::sync::Arc;

use percolator_store::Transaction;
use wasmtime::{ResourceLimiter, bail};

use crate::access::Access;
use crate::bindings::WitError;

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
    /// The first access violation of the run: a denied access fails the run even if the guest
    /// swallows the error.
    pub(crate) denied: Option<String>,
}

impl HostState {
    pub(crate) fn new(observer: Arc<str>, access: Arc<Access>, limits: Budget) -> HostState {
        HostState { observer, txn: None, access, limits, io_bytes: 0, conflict: None, denied: None }
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

/// One byte budget per instance for all its linear memories and tables (8 bytes per table
/// element), so neither several memories nor a huge table can exceed the binding's cap.
pub(crate) struct Budget {
    pub(crate) bytes: usize,
    used: usize,
}

impl Budget {
    pub(crate) fn new(bytes: usize) -> Budget {
        Budget { bytes, used: 0 }
    }

    fn grow(&mut self, delta: usize) -> wasmtime::Result<bool> {
        match self.used.checked_add(delta) {
            Some(total) if total <= self.bytes => {
                self.used = total;
                Ok(true)
            }
            _ => bail!("memory limit of {} MiB exceeded", self.bytes >> 20),
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
        // A componentized Rust guest uses three or four core instances.
        16
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        4
    }
}
