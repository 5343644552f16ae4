//! The [`Txn`] backed by the WIT imports, and the glue behind
//! [`export_observer!`](crate::export_observer).

use crate::bindings::percolator::observer::{txn as wit, types as wt};
use crate::error::{Error, Result};
use crate::txn::{Cell, Delta, Notification, ScanEntry, Txn};

/// The host's transaction, reached through the WIT `txn` imports.
///
/// Only meaningful inside a Wasm guest run by the host: [`export_observer!`](crate::export_observer)
/// hands one to the observer. On other targets wit-bindgen compiles the imports to stubs that
/// panic, so native tests use [`MemTxn`](crate::mem::MemTxn) instead.
#[derive(Debug)]
pub struct HostTxn {
    _private: (),
}

impl Txn for HostTxn {
    fn get(&self, table: &str, row: &[u8], column: &str) -> Result<Option<Vec<u8>>> {
        wit::get(table, row, column).map_err(Error::from)
    }

    fn get_many(&self, cells: &[Cell]) -> Result<Vec<Option<Vec<u8>>>> {
        let cells: Vec<wt::Cell> = cells
            .iter()
            .map(|c| wt::Cell { table: c.table.clone(), row: c.row.clone(), column: c.column.clone() })
            .collect();
        wit::get_many(&cells).map_err(Error::from)
    }

    fn scan(
        &self,
        table: &str,
        start: &[u8],
        end: Option<&[u8]>,
        columns: Option<&[&str]>,
        limit: u32,
    ) -> Result<Vec<ScanEntry>> {
        let columns: Option<Vec<String>> = columns.map(|cs| cs.iter().map(|c| (*c).to_owned()).collect());
        let entries = wit::scan(table, start, end, columns.as_deref(), limit)?;
        Ok(entries.into_iter().map(|e| ScanEntry { row: e.row, column: e.column, value: e.value }).collect())
    }

    fn set(&mut self, table: &str, row: &[u8], column: &str, value: &[u8]) -> Result<()> {
        wit::set(table, row, column, value).map_err(Error::from)
    }

    fn delete(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        wit::delete(table, row, column).map_err(Error::from)
    }

    fn notify_weak(&mut self, table: &str, row: &[u8], column: &str) -> Result<()> {
        wit::notify_weak(table, row, column).map_err(Error::from)
    }

    fn combine(&mut self, table: &str, row: &[u8], column: &str, delta: Delta) -> Result<()> {
        let delta = match delta {
            Delta::Int(i) => wt::Delta::Int(i),
            Delta::Float(f) => wt::Delta::Float(f),
            Delta::Members(m) => wt::Delta::Members(m),
        };
        wit::combine(table, row, column, &delta).map_err(Error::from)
    }

    fn start_ts(&self) -> u64 {
        wit::start_ts()
    }

    fn param(&self, key: &str) -> Option<String> {
        crate::bindings::percolator::observer::config::get(key)
    }

    fn params(&self) -> Vec<(String, String)> {
        crate::bindings::percolator::observer::config::all()
    }
}

impl From<wt::Error> for Error {
    fn from(e: wt::Error) -> Error {
        match e {
            wt::Error::Conflict(m) => Error::Conflict(m),
            wt::Error::NotFound(m) => Error::NotFound(m),
            wt::Error::Denied(m) => Error::Denied(m),
            wt::Error::InvalidArgument(m) => Error::InvalidArgument(m),
            wt::Error::Storage(m) => Error::Storage(m),
            wt::Error::Failed(m) => Error::Failed(m),
        }
    }
}

impl From<Error> for wt::Error {
    fn from(e: Error) -> wt::Error {
        match e {
            Error::Conflict(m) => wt::Error::Conflict(m),
            Error::NotFound(m) => wt::Error::NotFound(m),
            Error::Denied(m) => wt::Error::Denied(m),
            Error::InvalidArgument(m) => wt::Error::InvalidArgument(m),
            Error::Storage(m) => wt::Error::Storage(m),
            Error::Failed(m) => wt::Error::Failed(m),
        }
    }
}

impl From<wt::Notification> for Notification {
    fn from(n: wt::Notification) -> Notification {
        Notification {
            cell: Cell { table: n.cell.table, row: n.cell.row, column: n.cell.column },
            weak: n.weak,
            commit_ts: n.commit_ts,
            attempt: n.attempt,
        }
    }
}

/// Runs one observer call: converts the WIT notification, installs the panic logger once,
/// hands `observe` a [`HostTxn`] and converts its result back.
#[doc(hidden)]
pub fn run(
    notification: wt::Notification,
    observe: impl FnOnce(&mut HostTxn, &Notification) -> Result<()>,
) -> std::result::Result<(), wt::Error> {
    install_panic_logger();
    let notification = Notification::from(notification);
    observe(&mut HostTxn { _private: () }, &notification).map_err(wt::Error::from)
}

/// On wasm32-unknown-unknown a panic message goes nowhere; send it to the host's log first
/// (the panic then aborts, which the host sees as a trap).
fn install_panic_logger() {
    #[cfg(target_arch = "wasm32")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| {
                crate::log::log(crate::log::Level::Error, &format!("observer panicked: {info}"));
            }));
        });
    }
}
