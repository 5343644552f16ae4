//! The host side of the WIT imports: one `HostState` per wasmtime `Store`, one file per
//! interface.

mod log;
mod txn;

use std::sync::Arc;

use percolator_store::Transaction;
use wasmtime::StoreLimits;

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
    /// Memory cap.
    pub(crate) limits: StoreLimits,
    /// The last conflict a host call reported to the guest: if the guest returns a conflict,
    /// this is the store error that is retried.
    pub(crate) conflict: Option<percolator_store::Error>,
    /// The first access violation of the run: a denied access fails the run even if the guest
    /// swallows the error.
    pub(crate) denied: Option<String>,
}

impl HostState {
    pub(crate) fn new(observer: Arc<str>, access: Arc<Access>, limits: StoreLimits) -> HostState {
        HostState { observer, txn: None, access, limits, conflict: None, denied: None }
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
