//! `bad-write`: a hostile observer that writes `secret:stolen` in the notified row, a column no
//! binding should declare. It propagates the host's answer, so the run fails with `denied` when
//! the host enforces the binding's declared writes (and commits the write when it does not).

use percolator_guest::{Notification, Observer, Result, Txn};

/// The column it tries to write.
pub const STOLEN: &str = "secret:stolen";

/// The observer.
pub struct BadWrite;

impl Observer for BadWrite {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        txn.set_str(n.table(), n.row(), STOLEN, "stolen")
    }
}

percolator_guest::export_observer!(BadWrite);
