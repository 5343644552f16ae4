//! `panics`: a hostile observer that panics, for the host's trap handling. It buffers a write
//! first, which must never become visible; the panic message reaches the host's log (the SDK
//! logs it through the `log` import before aborting).

use percolator_guest::{Notification, Observer, Result, Txn};

/// The observer.
pub struct Panics;

impl Observer for Panics {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        // Ignore the result: the point is the panic, whatever the binding allows.
        let _ = txn.set_str(n.table(), n.row(), "derived:panicked", "must never commit");
        panic!("deliberate panic in the `panics` guest (attempt {})", n.attempt);
    }
}

percolator_guest::export_observer!(Panics);
