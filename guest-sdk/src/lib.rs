//! `percolator-guest`: write a percolator observer as a WebAssembly component in a few lines.
//!
//! An observer is bound (in the host's TOML) to a column; when a transaction changes that
//! column, the host calls the observer inside a new snapshot-isolation transaction. With this
//! crate an observer is a type implementing [`Observer`] (or a plain function), exported with
//! [`export_observer!`]:
//!
//! ```
//! use percolator_guest::{Notification, Observer, Result, Txn};
//!
//! /// Writes the upper-cased `raw:text` of the notified row to `derived:upper`.
//! pub struct Uppercase;
//!
//! impl Observer for Uppercase {
//!     fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
//!         let text = txn.get_str(n.table(), n.row(), "raw:text")?.unwrap_or_default();
//!         txn.set_str(n.table(), n.row(), "derived:upper", &text.to_uppercase())
//!     }
//! }
//!
//! percolator_guest::export_observer!(Uppercase);
//!
//! // Natively, test it against the in-memory store:
//! let store = percolator_guest::mem::MemStore::new();
//! store.put("docs", b"r1", "raw:text", "hello");
//! store.observe::<Uppercase>(&store.notification("docs", b"r1", "raw:text")).unwrap();
//! assert_eq!(store.get_str("docs", b"r1", "derived:upper").as_deref(), Some("HELLO"));
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-unknown-unknown` (see `scripts/build-guests`): the
//! result is a core module carrying wit-bindgen's component-type section, which the host turns
//! into a component of the world `percolator:observer/observer@0.3.0` (`wit/observer.wit`).
//!
//! - [`Txn`]: the running transaction (get, get_many, scan, set, delete, notify_weak,
//!   combine, start_ts, and typed helpers such as [`Txn::get_str`] and [`Txn::add_u64`]).
//! - [`Delta`]: what [`Txn::combine`] adds to a combined column (an integer, a float, set
//!   members).
//! - [`Error`]: mirrors the WIT `error` variant; every operation returns it, so `?` works.
//!   Return conflicts unchanged: the host retries the run.
//! - [`mem`]: [`MemStore`](mem::MemStore) / [`MemTxn`](mem::MemTxn) for native unit tests.
//! - [`log`]: logging into the host's tracing output (a panic message is logged too).

mod error;
mod host;
pub mod log;
pub mod mem;
mod memcmp;
mod txn;

pub use error::{Error, Result};
pub use host::HostTxn;
pub use txn::{Cell, Delta, Notification, Observer, ScanEntry, Txn};

/// The raw wit-bindgen output for the world `observer` (generated from `../wit`). The SDK's
/// types wrap it; it is public for [`export_observer!`] and for anyone who needs the bare
/// imports.
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "observer",
        pub_export_macro: true,
        default_bindings_module: "percolator_guest::bindings",
    });
}

/// Glue used by [`export_observer!`]; not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::host::run;
}

/// Exports an observer as the component's `observe` function.
///
/// Either a type implementing [`Observer`]:
/// `percolator_guest::export_observer!(MyObserver);`
/// or a function `fn(&mut impl Txn, &Notification) -> Result<()>`:
/// `percolator_guest::export_observer!(fn my_observe);`
///
/// Use it once per crate (a component exports one `observe`). It generates the wit-bindgen
/// export glue, which hands the observer a [`HostTxn`] backed by the WIT imports and converts
/// its [`Error`] into the WIT `error`.
#[macro_export]
macro_rules! export_observer {
    (fn $observe:path) => {
        $crate::export_observer!(@glue |txn, n| $observe(txn, n));
    };
    ($observer:ty) => {
        $crate::export_observer!(@glue |txn, n| <$observer as $crate::Observer>::observe(txn, n));
    };
    (@glue $call:expr) => {
        const _: () = {
            struct PercolatorGuestExport;

            impl $crate::bindings::Guest for PercolatorGuestExport {
                fn observe(
                    notification: $crate::bindings::Notification,
                ) -> ::core::result::Result<(), $crate::bindings::Error> {
                    $crate::__private::run(notification, $call)
                }
            }

            $crate::bindings::export!(PercolatorGuestExport with_types_in $crate::bindings);
        };
    };
}
